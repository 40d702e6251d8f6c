/*
 * narwhal-replay --what-if as an operator runs it (issue 13, "A what-if
 * mode under virtual time"; docs/replay.md, "What-if mode"): a synthetic
 * workload through the daemon's plugins and narwhal-sim's engine model on
 * a virtual clock gives narwhal-replay's own report (table, JSON, CSV) with
 * a what-if section, the same report twice for one seed, refusals counted
 * as a live run counts a 429, a profile store that predictive admission and
 * slo-cost placement price with, a fleet made by --engines, and clear
 * errors for what cannot run.
 *
 * The plugins come from $NARWHAL_PLUGIN_DIR (set by make check); nothing
 * listens and nothing is sent.
 */
#include "build-config.h"

#include <math.h>
#include <string.h>

#include <glib.h>
#include <glib/gstdio.h>

#include "integration/sim-client.h"

/* narwhal-sim's opt-13b-a100 preset (src/sim/model.c), milliseconds. */
#define OPT_PREFILL_A_MS 18.10
#define OPT_PREFILL_B_MS 0.10191
#define OPT_PREFILL_C_MS 7.122e-6
#define OPT_DECODE_D0_MS 19.93
#define OPT_DECODE_D1_MS 6.269e-4
#define OPT_DECODE_D2_MS 0.03851
#define OPT_KV_BYTES_PER_TOKEN (800.0 * 1024)
#define OPT_KV_GBS 45.0
#define OPT_MAX_LEN 2048

#define RUN_TIMEOUT_S 120

struct dir {
	char *path;
};

static char *
dir_file(const struct dir *d, const char *name)
{
	return g_build_filename(d->path, name, NULL);
}

static void
dir_make(struct dir *d)
{
	GError *error = NULL;

	d->path = g_dir_make_tmp("narwhal-whatif-XXXXXX", &error);
	g_assert_no_error(error);
}

static void
dir_clear(struct dir *d)
{
	GDir *dh = g_dir_open(d->path, 0, NULL);
	const char *name;

	while (dh != NULL && (name = g_dir_read_name(dh)) != NULL) {
		g_autofree char *f = dir_file(d, name);

		g_unlink(f);
	}
	if (dh != NULL)
		g_dir_close(dh);
	g_rmdir(d->path);
	g_free(d->path);
}

/* A daemon configuration of 2 prefill and 2 decode engines; admission and
 * placement as named, profiles.path in the directory. */
static char *
write_config(const struct dir *d, const char *admission, const char *placement,
             const char *extra)
{
	char *path = dir_file(d, "narwhal.json");
	g_autofree char *store = dir_file(d, "profiles.json");
	g_autofree char *text = g_strdup_printf(
		"{\"slo\": {\"ttft_s\": 0.5, \"tpot_s\": 0.05},"
		" \"serving\": {\"admission\": \"%s\"},"
		" \"controller\": {\"policy\": \"static\"},"
		" \"profiles\": {\"path\": \"%s\"},"
		" \"plugins\": {\"placement\": {\"name\": \"%s\"}%s},"
		" \"fleet\": {\"engines\": ["
		"  {\"id\": \"p0\", \"url\": \"http://127.0.0.1:9101\", \"role\": \"prefill\"},"
		"  {\"id\": \"p1\", \"url\": \"http://127.0.0.1:9102\", \"role\": \"prefill\"},"
		"  {\"id\": \"d0\", \"url\": \"http://127.0.0.1:9103\", \"role\": \"decode\"},"
		"  {\"id\": \"d1\", \"url\": \"http://127.0.0.1:9104\", \"role\": \"decode\"}]}}",
		admission, store, placement, extra ? extra : "");

	g_assert_true(g_file_set_contents(path, text, -1, NULL));
	return path;
}

/* The store narwhal-profile would write for the preset at time scale 1
 * (its coefficients, as tests/integration/test-admission.c writes it). */
static void
write_store(const struct dir *d)
{
	g_autofree char *path = dir_file(d, "profiles.json");
	const char *ids[] = { "p0", "p1", "d0", "d1" };
	json_t *engines = json_array(), *doc;

	for (guint i = 0; i < G_N_ELEMENTS(ids); i++)
		json_array_append_new(engines, json_pack(
			"{s:s, s:s, s:s, s:s, s:n, s:I, s:s,"
			" s:{s:f, s:f, s:f, s:I, s:I, s:I, s:f},"
			" s:{s:f, s:f, s:f, s:I, s:I, s:I, s:I, s:I, s:f},"
			" s:{s:f, s:f, s:I, s:I}}",
			"engine", ids[i], "url", "http://127.0.0.1:1", "dialect", "vllm",
			"model", "opt-13b-a100", "hardware", "kv_capacity_tokens", (json_int_t)0,
			"measured_at", "2026-12-01T20:00:00Z",
			"prefill", "a_s", OPT_PREFILL_A_MS / 1e3, "b_s", OPT_PREFILL_B_MS / 1e3,
			"c_s", OPT_PREFILL_C_MS / 1e3, "min_tokens", (json_int_t)1,
			"max_tokens", (json_int_t)OPT_MAX_LEN, "samples", (json_int_t)100,
			"rel_rms_error", 0.0,
			"decode", "d0_s", OPT_DECODE_D0_MS / 1e3, "d1_s", OPT_DECODE_D1_MS / 1e3,
			"d2_s", OPT_DECODE_D2_MS / 1e3, "min_active", (json_int_t)1,
			"max_active", (json_int_t)64, "min_kv_tokens", (json_int_t)0,
			"max_kv_tokens", (json_int_t)200000, "samples", (json_int_t)100,
			"rel_rms_error", 0.0,
			"handoff", "setup_s", 1e-3, "per_token_s", OPT_KV_BYTES_PER_TOKEN / (OPT_KV_GBS * 1e9),
			"max_tokens", (json_int_t)OPT_MAX_LEN, "samples", (json_int_t)10));
	doc = json_pack("{s:i, s:s, s:s, s:o}", "version", 1, "created_at", "2026-12-01T20:00:00Z",
	                "tool", "test-whatif", "engines", engines);
	g_assert_cmpint(json_dump_file(doc, path, JSON_INDENT(1)), ==, 0);
	json_decref(doc);
}

/* narwhal-replay with args; its JSON summary in *doc when out_json. */
static void
replay(const char *const *args, struct tool_run *r)
{
	tool_run(sim_replay_bin(), "narwhal-replay", args, RUN_TIMEOUT_S, r);
}

static json_t *
load_json(const char *path)
{
	json_error_t jerr;
	json_t *doc = json_load_file(path, 0, &jerr);

	g_assert_nonnull(doc);
	return doc;
}

static json_int_t
count(const json_t *run, const char *key)
{
	return json_integer_value(json_object_get(json_object_get(run, "counts"), key));
}

#define LIGHT "rate=3,duration=40,input=lognormal:600:0.5,output=uniform:20:120"

/* A light synthetic load on an idle 2P+2D fleet: every request answered,
 * attainment near 1, the report narwhal-replay writes for a live run with
 * the what-if section beside it. */
static void
test_report(void)
{
	struct dir d;
	g_autofree char *cfg = NULL, *json = NULL, *csv = NULL, *csv_text = NULL, *target = NULL;
	struct tool_run r;
	json_t *doc, *run, *wi;
	double attainment;

	dir_make(&d);
	cfg = write_config(&d, "open", "least-loaded", NULL);
	json = dir_file(&d, "out.json");
	csv = dir_file(&d, "out.csv");
	{
		const char *args[] = { "--what-if", cfg, "--synthetic", LIGHT, "--slo-ttft", "0.5",
		                       "--slo-tpot", "0.05", "--max-prompt-tokens", "1800",
		                       "--out-json", json, "--out-csv", csv, NULL };

		replay(args, &r);
	}
	g_assert_cmpint(r.status, ==, 0);
	g_assert_nonnull(strstr(r.out, "what-if: "));
	g_assert_nonnull(strstr(r.out, "-> what-if:"));
	tool_run_clear(&r);
	doc = load_json(json);
	target = g_strdup_printf("what-if:%s", cfg);
	g_assert_cmpstr(json_string_value(json_object_get(json_object_get(doc, "target"), "url")),
	                ==, target);
	run = json_array_get(json_object_get(doc, "runs"), 0);
	g_assert_cmpint(count(run, "scheduled"), >, 80);
	g_assert_cmpint(count(run, "sent"), ==, count(run, "scheduled"));
	g_assert_cmpint(count(run, "ok"), ==, count(run, "scheduled"));
	g_assert_cmpint(count(run, "late"), ==, 0);
	attainment = json_real_value(json_object_get(json_object_get(run, "slo"), "attainment"));
	g_assert_cmpfloat(attainment, >=, 0.9);
	g_assert_cmpfloat(attainment, <=, 1.0);
	/* Latencies the engine model allows: a prefill of at least 18 ms, a
	 * token interval of at least the decode step's 20 ms. */
	g_assert_cmpfloat(json_real_value(json_object_get(json_object_get(run, "ttft_s"), "p50")), >,
	                  0.018);
	g_assert_cmpfloat(json_real_value(json_object_get(json_object_get(run, "tpot_s"), "p50")), >,
	                  0.019);
	wi = json_object_get(run, "what_if");
	g_assert_nonnull(wi);
	g_assert_cmpfloat(json_real_value(json_object_get(wi, "virtual_s")), >=, 39);
	g_assert_true(json_is_real(json_object_get(wi, "wall_s")));
	g_assert_true(json_is_array(json_object_get(wi, "role_changes")));
	g_assert_cmpint(json_integer_value(json_object_get(wi, "proposals")), ==, 0);
	g_assert_cmpint(json_integer_value(json_object_get(wi, "engines")), ==, 4);
	g_assert_cmpstr(json_string_value(json_object_get(json_object_get(json_object_get(
	                doc, "what_if"), "plugins"), "controller")), ==, "static");
	g_assert_true(g_file_get_contents(csv, &csv_text, NULL, NULL));
	g_assert_true(g_str_has_prefix(csv_text, "rate_scale,id,request_id,"));
	json_decref(doc);
	dir_clear(&d);
}

/* Drop the wall-clock figure: everything else is virtual time. */
static void
strip_wall(json_t *doc)
{
	json_t *runs = json_object_get(doc, "runs");

	for (size_t i = 0; i < json_array_size(runs); i++)
		json_object_del(json_object_get(json_array_get(runs, i), "what_if"), "wall_s");
}

/* One seed, one report: two runs give the same JSON (but for wall_s) and
 * the same CSV, a rate sweep included. */
static void
test_deterministic(void)
{
	struct dir d;
	g_autofree char *cfg = NULL;
	json_t *docs[2];
	char *csvs[2];

	dir_make(&d);
	cfg = write_config(&d, "open", "least-loaded", NULL);
	for (int k = 0; k < 2; k++) {
		g_autofree char *json = dir_file(&d, k ? "b.json" : "a.json");
		g_autofree char *csv = dir_file(&d, k ? "b.csv" : "a.csv");
		const char *args[] = { "--what-if", cfg, "--synthetic", LIGHT, "--rate-sweep", "1,4",
		                       "--seed", "5", "--sim-noise-sigma", "0.1", "--slo-ttft", "0.5",
		                       "--out-json", json, "--out-csv", csv, "--quiet", NULL };
		struct tool_run r;

		replay(args, &r);
		g_assert_cmpint(r.status, ==, 0);
		tool_run_clear(&r);
		docs[k] = load_json(json);
		strip_wall(docs[k]);
		g_assert_true(g_file_get_contents(csv, &csvs[k], NULL, NULL));
	}
	g_assert_cmpuint(json_array_size(json_object_get(docs[0], "runs")), ==, 2);
	g_assert_true(json_equal(docs[0], docs[1]));
	g_assert_cmpstr(csvs[0], ==, csvs[1]);
	for (int k = 0; k < 2; k++) {
		json_decref(docs[k]);
		g_free(csvs[k]);
	}
	dir_clear(&d);
}

/* Predictive admission and slo-cost placement price with the store
 * (docs/admission.md): under an overload some requests are refused with
 * 429, which count as failed for attainment as a live run counts them, and
 * the admitted ones keep their TTFT target far better than the offered
 * load would allow. */
static void
test_predictive_overload(void)
{
	struct dir d;
	g_autofree char *cfg = NULL, *json = NULL;
	struct tool_run r;
	json_t *doc, *run, *status;
	json_int_t refused, ok;
	double attainment;

	dir_make(&d);
	write_store(&d);
	cfg = write_config(&d, "predictive", "slo-cost", NULL);
	json = dir_file(&d, "out.json");
	{
		const char *args[] = { "--what-if", cfg, "--synthetic",
		                       "rate=40,duration=20,input=lognormal:1200:0.3,output=40",
		                       "--max-prompt-tokens", "1900", "--slo-ttft", "0.5",
		                       "--out-json", json, "--quiet", NULL };

		replay(args, &r);
	}
	g_assert_cmpint(r.status, ==, 0);
	tool_run_clear(&r);
	doc = load_json(json);
	run = json_array_get(json_object_get(doc, "runs"), 0);
	status = json_object_get(json_object_get(run, "counts"), "status");
	refused = json_integer_value(json_object_get(status, "429"));
	ok = count(run, "ok");
	g_assert_cmpint(refused, >, 0);
	g_assert_cmpint(ok, >, 0);
	g_assert_cmpint(count(run, "failed"), ==, count(run, "scheduled") - ok);
	attainment = json_real_value(json_object_get(json_object_get(run, "slo"), "attainment"));
	g_assert_cmpfloat(attainment, <, 1.0);
	/* Refused requests are misses: attainment is at most the ok share. */
	g_assert_cmpfloat(attainment, <=, (double)ok / (double)count(run, "scheduled") + 1e-9);
	g_assert_cmpint(json_integer_value(json_object_get(json_object_get(json_object_get(
	                run, "what_if"), "demand"), "offers_sized")), ==, count(run, "scheduled"));
	g_assert_cmpfloat(json_real_value(json_object_get(json_object_get(run, "ttft_s"), "p90")), <,
	                  0.5);
	json_decref(doc);
	dir_clear(&d);
}

/* --engines N: a large fleet made from the first configured engine, the
 * split scaled, loaded by a rate scale; it runs in far less wall time than
 * its virtual time. */
static void
test_engines(void)
{
	struct dir d;
	g_autofree char *cfg = NULL, *json = NULL;
	struct tool_run r;
	json_t *doc, *run, *fleet;

	dir_make(&d);
	cfg = write_config(&d, "open", "least-loaded", NULL);
	json = dir_file(&d, "out.json");
	{
		const char *args[] = { "--what-if", cfg, "--engines", "200", "--synthetic",
		                       "rate=3,duration=2000,input=lognormal:600:0.4,output=60",
		                       "--rate-scale", "100", "--max-prompt-tokens", "1800",
		                       "--out-json", json, "--quiet", NULL };

		replay(args, &r);
	}
	g_assert_cmpint(r.status, ==, 0);
	tool_run_clear(&r);
	doc = load_json(json);
	fleet = json_object_get(json_object_get(doc, "what_if"), "fleet");
	g_assert_cmpint(json_integer_value(json_object_get(fleet, "engines")), ==, 200);
	g_assert_cmpint(json_integer_value(json_object_get(fleet, "prefill")), ==, 100);
	run = json_array_get(json_object_get(doc, "runs"), 0);
	g_assert_cmpint(count(run, "scheduled"), >, 5000);
	g_assert_cmpint(count(run, "ok"), ==, count(run, "scheduled"));
	json_decref(doc);
	dir_clear(&d);
}

/* --aggregate (issue 13's evaluation: "all engines aggregate"): no engine
 * hands off, so every request runs whole on one engine whatever its role,
 * and the report says so; without it the same fleet pairs every request. */
static void
test_aggregate(void)
{
	struct dir d;
	g_autofree char *cfg = NULL, *json = NULL;
	json_t *doc, *run;

	dir_make(&d);
	cfg = write_config(&d, "open", "least-loaded", NULL);
	json = dir_file(&d, "out.json");
	for (int aggregate = 0; aggregate <= 1; aggregate++) {
		const char *args[] = { "--what-if", cfg, "--synthetic", LIGHT, "--max-prompt-tokens",
		                       "1800", "--out-json", json, "--quiet",
		                       aggregate ? "--aggregate" : NULL, NULL };
		struct tool_run r;

		replay(args, &r);
		g_assert_cmpint(r.status, ==, 0);
		tool_run_clear(&r);
		doc = load_json(json);
		g_assert_true(json_boolean_value(json_object_get(json_object_get(json_object_get(
		              doc, "what_if"), "fleet"), "aggregate")) == (aggregate == 1));
		run = json_array_get(json_object_get(doc, "runs"), 0);
		g_assert_cmpint(count(run, "scheduled"), >, 50);
		g_assert_cmpint(count(run, "ok"), ==, count(run, "scheduled"));
		g_assert_cmpint(json_integer_value(json_object_get(json_object_get(run, "what_if"),
		                                                   "aggregate_legs")), ==,
		                aggregate ? count(run, "scheduled") : 0);
		json_decref(doc);
	}
	dir_clear(&d);
}

/* The controller in the what-if mode (issue 13: "the real ... controller
 * plugins, the host's guards"): with reactive on a prefill-heavy phase and
 * then a decode-heavy one, the controller host moves engines towards
 * prefill in the first phase and towards decode in the second, every move
 * in the report with its time, caller and reason, never below a floor. */
static void
test_reactive_phases(void)
{
	struct dir d;
	g_autofree char *cfg = NULL, *json = NULL;
	struct tool_run r;
	json_t *doc, *wi, *changes;
	size_t i;
	gboolean to_prefill_first = FALSE, to_decode_second = FALSE;

	dir_make(&d);
	write_store(&d);
	cfg = write_config(&d, "predictive", "slo-cost", NULL);
	{
		/* The same file with the reactive controller. */
		g_autofree char *text = NULL;
		g_autofree char *swapped = NULL;
		g_auto(GStrv) parts = NULL;

		g_assert_true(g_file_get_contents(cfg, &text, NULL, NULL));
		parts = g_strsplit(text, "\"static\"", -1);
		swapped = g_strjoinv("\"reactive\"", parts);
		g_assert_true(g_file_set_contents(cfg, swapped, -1, NULL));
	}
	json = dir_file(&d, "out.json");
	{
		const char *args[] = { "--what-if", cfg, "--synthetic",
		                       "name=prefill,rate=8,input=lognormal:1500:0.2,output=8,duration=300;"
		                       "name=decode,rate=6,input=200,output=uniform:200:400,duration=300",
		                       "--max-prompt-tokens", "1800", "--slo-ttft", "0.5",
		                       "--out-json", json, "--quiet", NULL };

		replay(args, &r);
	}
	g_assert_cmpint(r.status, ==, 0);
	tool_run_clear(&r);
	doc = load_json(json);
	wi = json_object_get(json_array_get(json_object_get(doc, "runs"), 0), "what_if");
	changes = json_object_get(wi, "role_changes");
	g_assert_cmpuint(json_array_size(changes), >, 0);
	g_assert_cmpint(json_integer_value(json_object_get(wi, "proposals")), >=,
	                (json_int_t)json_array_size(changes));
	for (i = 0; i < json_array_size(changes); i++) {
		const json_t *c = json_array_get(changes, i);
		double at = json_real_value(json_object_get(c, "at_s"));
		const char *to = json_string_value(json_object_get(c, "to"));

		g_assert_cmpstr(json_string_value(json_object_get(c, "caller")), !=, NULL);
		g_assert_cmpint(json_integer_value(json_object_get(c, "prefill")), >=, 1);
		g_assert_cmpint(json_integer_value(json_object_get(c, "decode")), >=, 1);
		if (at < 300 && strcmp(to, "prefill") == 0)
			to_prefill_first = TRUE;
		if (at >= 300 && strcmp(to, "decode") == 0)
			to_decode_second = TRUE;
	}
	g_assert_true(to_prefill_first);
	g_assert_true(to_decode_second);
	g_assert_true(json_is_object(json_object_get(wi, "controller")));
	json_decref(doc);
	dir_clear(&d);
}

/* What cannot run is said before anything runs. */
static void
test_errors(void)
{
	struct dir d;
	g_autofree char *cfg = NULL;
	struct tool_run r;

	dir_make(&d);
	cfg = write_config(&d, "predictive", "least-loaded", NULL);
	{
		const char *args[] = { "--what-if", cfg, "--url", "http://127.0.0.1:9",
		                       "--synthetic", LIGHT, NULL };

		replay(args, &r);
		g_assert_cmpint(r.status, ==, 2);
		g_assert_nonnull(strstr(r.err, "not both"));
		tool_run_clear(&r);
	}
	{
		const char *args[] = { "--url", "http://127.0.0.1:9", "--engines", "8",
		                       "--synthetic", LIGHT, NULL };

		replay(args, &r);
		g_assert_cmpint(r.status, ==, 2);
		g_assert_nonnull(strstr(r.err, "--what-if only"));
		tool_run_clear(&r);
	}
	{
		const char *args[] = { "--url", "http://127.0.0.1:9", "--aggregate", "--synthetic",
		                       LIGHT, NULL };

		replay(args, &r);
		g_assert_cmpint(r.status, ==, 2);
		g_assert_nonnull(strstr(r.err, "--what-if only"));
		tool_run_clear(&r);
	}
	{
		const char *args[] = { "--what-if", cfg, "--sim-preset", "no-such", "--synthetic",
		                       LIGHT, NULL };

		replay(args, &r);
		g_assert_cmpint(r.status, ==, 1);
		g_assert_nonnull(strstr(r.err, "opt-13b-a100"));
		tool_run_clear(&r);
	}
	/* Predictive without a store refuses to start, as the daemon does,
	 * and says how to go on. */
	{
		const char *args[] = { "--what-if", cfg, "--synthetic", LIGHT, NULL };

		replay(args, &r);
		g_assert_cmpint(r.status, ==, 1);
		g_assert_nonnull(strstr(r.err, "narwhal-profile"));
		g_assert_nonnull(strstr(r.err, "without_profiles"));
		tool_run_clear(&r);
	}
	g_free(cfg);
	/* ... and runs with without_profiles "open", as the daemon does. */
	cfg = write_config(&d, "predictive", "least-loaded",
	                   ", \"admission\": {\"config\": {\"without_profiles\": \"open\"}}");
	{
		const char *args[] = { "--what-if", cfg, "--synthetic", LIGHT, "--quiet", NULL };

		replay(args, &r);
		g_assert_cmpint(r.status, ==, 0);
		tool_run_clear(&r);
	}
	dir_clear(&d);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/whatif/report", test_report);
	g_test_add_func("/whatif/deterministic", test_deterministic);
	g_test_add_func("/whatif/predictive-overload", test_predictive_overload);
	g_test_add_func("/whatif/engines", test_engines);
	g_test_add_func("/whatif/aggregate", test_aggregate);
	g_test_add_func("/whatif/reactive-phases", test_reactive_phases);
	g_test_add_func("/whatif/errors", test_errors);
	return g_test_run();
}
