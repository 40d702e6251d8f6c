/*
 * Issue 11, "How it is checked": `promtool check metrics` on a scrape of
 * GET /metrics taken during a replay. A real narwhal in front of a
 * narwhal-sim fleet (one prefill, one decode engine) serves a short,
 * bounded narwhal-replay workload (streams, so TTFT and TPOT are
 * observed); scrapes taken while requests are in flight, and one after
 * the replay, go through promtool. Then the figures are checked against
 * each other: every histogram's +Inf bucket equals its count, requests
 * served in full equal the end-to-end count, the per-engine call counts
 * add up to the fleet-wide histograms'.
 *
 * A second test moves the operating families (the monitor, roles, holds,
 * pins, drains, reloads, admin calls) through the admin API and SIGHUP
 * and checks their values, and promtool again.
 *
 * Without promtool the promtool step is skipped with a message, unless
 * NARWHAL_REQUIRE_PROMTOOL=1 (bootstrap.sh test sets it), when its absence
 * fails the test.
 */
#include "build-config.h"

#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "integration/test-serve-common.h"

static const char *const sim_args[] = { "--engines", "2", "--time-scale", "2", NULL };

static char *
scrape(struct serve_env *e)
{
	struct sim_reply r;
	char *text;

	sim_http(e->port, "GET", "/metrics", NULL, NULL, 5000, &r);
	g_assert_cmpint(r.status, ==, 200);
	text = g_strdup(r.body->str);
	sim_reply_clear(&r);
	return text;
}

/* The value of the sample whose line starts with "name " or "name{labels} "
 * exactly as given (line is that prefix); NAN when absent. */
static double
sample(const char *text, const char *line)
{
	g_autofree char *needle = g_strconcat("\n", line, " ", NULL);
	const char *at = strstr(text, needle);

	return at ? g_ascii_strtod(at + strlen(needle), NULL) : NAN;
}

/* The sum of every sample of a family whose labels contain all of
 * filter ("k=\"v\"" strings, NULL-terminated; may be NULL). */
static double
sum_samples(const char *text, const char *name, const char *const *filter)
{
	g_auto(GStrv) lines = g_strsplit(text, "\n", -1);
	size_t len = strlen(name);
	double sum = 0;

	for (char **l = lines; *l != NULL; l++) {
		bool match = strncmp(*l, name, len) == 0 && ((*l)[len] == '{' || (*l)[len] == ' ');

		for (size_t k = 0; match && filter != NULL && filter[k] != NULL; k++)
			match = strstr(*l, filter[k]) != NULL;
		if (match)
			sum += g_ascii_strtod(strrchr(*l, ' ') + 1, NULL);
	}
	return sum;
}

/* promtool, or NULL: then the test is skipped (after its other checks)
 * unless NARWHAL_REQUIRE_PROMTOOL=1, when it fails. */
static char *
promtool_find(void)
{
	char *bin = g_find_program_in_path("promtool");

	if (bin == NULL && g_strcmp0(g_getenv("NARWHAL_REQUIRE_PROMTOOL"), "1") == 0)
		g_error("promtool is not installed and NARWHAL_REQUIRE_PROMTOOL=1: install "
		        "Debian's prometheus package (./bootstrap.sh deps)");
	return bin;
}

/* promtool check metrics on the text: no problem, no lint. */
static void
promtool_check(const char *bin, const char *text)
{
	g_autoptr(GSubprocess) proc = NULL;
	g_autofree char *out = NULL, *err = NULL;
	GError *error = NULL;

	proc = g_subprocess_new(G_SUBPROCESS_FLAGS_STDIN_PIPE | G_SUBPROCESS_FLAGS_STDOUT_PIPE |
	                        G_SUBPROCESS_FLAGS_STDERR_MERGE, &error, bin, "check", "metrics",
	                        NULL);
	g_assert_no_error(error);
	g_assert_true(g_subprocess_communicate_utf8(proc, text, NULL, &out, &err, &error));
	g_assert_no_error(error);
	if (!g_subprocess_get_if_exited(proc) || g_subprocess_get_exit_status(proc) != 0 ||
	    (out != NULL && *out != '\0'))
		g_error("promtool check metrics found problems:\n%s\nin the scrape:\n%s",
		        out ? out : "", text);
}

/* Every histogram family: cumulative buckets that never go down, and a
 * +Inf bucket equal to the count. */
static void
assert_histograms(const char *text)
{
	g_auto(GStrv) lines = g_strsplit(text, "\n", -1);
	g_autofree char *series = NULL;
	double last = 0;
	unsigned families = 0;

	for (char **l = lines; *l != NULL; l++) {
		const char *b = strstr(*l, "_bucket{");
		const char *le;

		if (b == NULL || **l == '#')
			continue;
		le = strstr(*l, "le=\"");
		g_assert_nonnull(le);
		{
			/* The series without its le: where the buckets restart. */
			g_autofree char *key = g_strndup(*l, (size_t)(le - *l));
			double v = g_ascii_strtod(strrchr(*l, ' ') + 1, NULL);

			if (g_strcmp0(key, series) != 0) {
				g_free(series);
				series = g_strdup(key);
				last = 0;
			}
			g_assert_cmpfloat(v, >=, last);
			last = v;
			if (g_str_has_prefix(le, "le=\"+Inf\"")) {
				/* name{labels,le="+Inf"} v  ->  name_count{labels} */
				g_autofree char *name = g_strndup(*l, (size_t)(b - *l));
				g_autofree char *labels = g_strndup(b + 8, (size_t)(le - (b + 8)));
				g_autofree char *count = NULL;

				if (g_str_has_suffix(labels, ","))
					labels[strlen(labels) - 1] = '\0';
				count = *labels ? g_strdup_printf("%s_count{%s}", name, labels)
				                : g_strdup_printf("%s_count", name);
				g_assert_cmpfloat(sample(text, count), ==, v);
				families++;
			}
		}
	}
	g_assert_cmpuint(families, >=, 9);
}

/* docs/metrics.md names every family of the scrape in backquotes; the
 * data-plane counters of /narwhal/health (narwhal_<counter>_total) are
 * documented as a group there and one by one in docs/api.md. */
static void
assert_documented(struct serve_env *e, const char *text)
{
	g_autofree char *path = g_test_build_filename(G_TEST_DIST, "..", "docs", "metrics.md", NULL);
	g_autofree char *docs = NULL;
	g_auto(GStrv) lines = g_strsplit(text, "\n", -1);
	json_t *counters = serve_counters(e);

	g_assert_true(g_file_get_contents(path, &docs, NULL, NULL));
	for (char **l = lines; *l != NULL; l++) {
		char name[256];
		g_autofree char *quoted = NULL;

		if (!g_str_has_prefix(*l, "# TYPE "))
			continue;
		g_assert_cmpint(sscanf(*l, "# TYPE %255s", name), ==, 1);
		quoted = g_strdup_printf("`%s`", name);
		if (strstr(docs, quoted) != NULL)
			continue;
		if (g_str_has_suffix(name, "_total")) {
			g_autofree char *key = g_strndup(name + strlen("narwhal_"),
			                                 strlen(name) - strlen("narwhal_") - 6);

			if (json_object_get(counters, key) != NULL)
				continue;
		}
		g_error("%s is in the scrape but not in docs/metrics.md", name);
	}
	json_decref(counters);
}

static void
test_scrape_during_replay(void)
{
	struct serve_env e;
	g_autofree char *url = NULL, *bad = NULL, *during = NULL, *after = NULL;
	g_autoptr(GSubprocess) replay = NULL;
	GError *error = NULL;
	gint64 deadline;
	struct sim_reply r;
	const char *decode[] = { "leg=\"decode\"", NULL }, *prefill[] = { "leg=\"prefill\"", NULL };
	const char *ok[] = { "code=\"none\"", "route=\"completions\"", NULL };
	g_autofree char *promtool = promtool_find();
	double served;

	g_test_summary("issue 11: promtool check metrics on scrapes taken while a bounded "
	               "replay runs through narwhal, and after it; histogram invariants and "
	               "consistent request-path figures");
	if (!serve_start(&e, sim_args, "pd", NULL))
		return;
	if (!g_file_test(sim_replay_bin(), G_FILE_TEST_IS_EXECUTABLE)) {
		serve_clear(&e);
		g_test_skip("narwhal-replay is not built");
		return;
	}
	g_assert_true(serve_wait_all_available(&e, 10000));
	/* An outcome other than success, for the outcome labels. */
	bad = g_strdup_printf("{\"model\":\"%s\",\"prompt\":\"x\",\"max_tokens\":0}", e.model);
	serve_post(&e, "/v1/completions", bad, NULL, 5000, &r);
	g_assert_cmpint(r.status, ==, 400);
	sim_reply_clear(&r);

	/* Bounded in count and time: at most 60 streams over 3 s. */
	url = g_strdup_printf("http://127.0.0.1:%u", e.port);
	replay = g_subprocess_new(G_SUBPROCESS_FLAGS_STDOUT_SILENCE |
	                          G_SUBPROCESS_FLAGS_STDERR_SILENCE, &error, sim_replay_bin(),
	                          "--url", url, "--model", e.model, "--synthetic",
	                          "rate=20,input=uniform:20:80,output=uniform:16:48,duration=3",
	                          "--max-requests", "60", "--timeout", "20", "--quiet", NULL);
	g_assert_no_error(error);
	/* Scrapes while the replay runs, until one sees requests in flight. */
	deadline = g_get_monotonic_time() + 10 * G_USEC_PER_SEC;
	while (g_get_monotonic_time() < deadline && g_subprocess_get_identifier(replay) != NULL) {
		char *text = scrape(&e);

		if (sample(text, "narwhal_retained") > 0 &&
		    sum_samples(text, "narwhal_requests_total", ok) > 0) {
			during = text;
			break;
		}
		g_free(text);
		g_usleep(20 * 1000);
	}
	/* Taken with requests in flight and some already served. */
	g_assert_nonnull(during);
	if (promtool != NULL)
		promtool_check(promtool, during);
	assert_histograms(during);

	g_assert_true(g_subprocess_wait(replay, NULL, &error));
	g_assert_no_error(error);
	g_assert_true(g_subprocess_get_if_exited(replay));
	g_assert_cmpint(g_subprocess_get_exit_status(replay), ==, 0);
	/* Every request of the replay has ended: nothing retained. */
	deadline = g_get_monotonic_time() + 10 * G_USEC_PER_SEC;
	do {
		g_free(after);
		after = scrape(&e);
	} while (sample(after, "narwhal_retained") > 0 && g_get_monotonic_time() < deadline);
	g_assert_cmpfloat(sample(after, "narwhal_retained"), ==, 0);
	if (promtool != NULL)
		promtool_check(promtool, after);
	assert_histograms(after);

	assert_documented(&e, after);
	/* The figures agree with each other. */
	served = sum_samples(after, "narwhal_requests_total", ok);
	g_assert_cmpfloat(served, >=, 10);
	g_assert_cmpfloat(served, ==, sample(after, "narwhal_requests_ok_total"));
	g_assert_cmpfloat(sample(after, "narwhal_request_duration_seconds_count"), ==, served);
	/* Every replayed request is a stream with output: a first token each,
	 * and a TPOT each (16 tokens or more). */
	g_assert_cmpfloat(sample(after, "narwhal_time_to_first_token_seconds_count"), ==, served);
	g_assert_cmpfloat(sample(after, "narwhal_time_per_output_token_seconds_count"), ==, served);
	g_assert_cmpfloat(sample(after, "narwhal_time_per_output_token_seconds_sum") / served, >, 0);
	g_assert_cmpfloat(sample(after, "narwhal_requests_total{route=\"completions\",status=\"400\","
	                                "code=\"invalid_value\"}"), ==, 1);
	g_assert_cmpfloat(sample(after, "narwhal_queue_wait_seconds_count"), ==, served);
	g_assert_cmpfloat(sample(after, "narwhal_handoff_seconds_count"), ==, served);
	g_assert_cmpfloat(sum_samples(after, "narwhal_engine_calls_total", decode), ==,
	                  sample(after, "narwhal_engine_call_duration_seconds_count{leg=\"decode\"}"));
	g_assert_cmpfloat(sum_samples(after, "narwhal_engine_calls_total", decode), ==,
	                  sample(after, "narwhal_decode_started_total"));
	g_assert_cmpfloat(sum_samples(after, "narwhal_engine_calls_total", prefill), ==,
	                  sample(after, "narwhal_prefill_started_total"));
	{
		/* Engine 1 is the decode engine ("pd"): every decode call was its. */
		json_t *engines = json_object_get(e.sim.fleet, "engines");
		const char *id = json_string_value(json_object_get(json_array_get(engines, 1), "id"));
		g_autofree char *line = g_strdup_printf("narwhal_engine_calls_total{engine=\"%s\","
		                                        "leg=\"decode\"}", id);

		g_assert_cmpfloat(sample(after, line), ==, served);
	}
	g_assert_cmpfloat(sample(after, "narwhal_client_sent_bytes_total{route=\"completions\"}"),
	                  >, 0);
	g_assert_cmpfloat(sample(after, "narwhal_upstream_received_bytes_total"), >, 0);
	g_assert_cmpfloat(sum_samples(after, "narwhal_engine_call_failures_total", NULL), ==, 0);
	serve_clear(&e);
	if (promtool == NULL)
		g_test_skip("promtool is not installed (Debian's prometheus package): the scrapes "
		            "were not checked by it");
}

/* --- the operating families ------------------------------------------- */

#define TOKEN_ENV "NARWHAL_TEST_METRICS_ADMIN_TOKEN"
#define TOKEN "metrics-admin-token"

static guint16
admin_port(struct serve_env *e)
{
	g_autofree char *log = serve_log(e);
	const char *at = strstr(log, "\"event\":\"admin_listening\"");

	g_assert_nonnull(at);
	at = strstr(at, "\"port\":\"");
	g_assert_nonnull(at);
	return (guint16)atoi(at + strlen("\"port\":\""));
}

/* An admin call (token NULL: none); its status. */
static long
admin_call(struct serve_env *e, const char *token, const char *method, const char *path)
{
	g_autofree char *auth = token ? g_strdup_printf("Authorization: Bearer %s", token) : NULL;
	const char *const headers[] = { auth, NULL };
	struct sim_reply r;
	long status;

	sim_http(admin_port(e), method, path, NULL, headers, 5000, &r);
	status = r.status;
	sim_reply_clear(&r);
	return status;
}

/* Scrape until the sample (a whole line prefix, see sample()) has the
 * value, for at most 10 s; the last scrape (owned). */
static char *
scrape_until(struct serve_env *e, const char *line, double value)
{
	gint64 deadline = g_get_monotonic_time() + 10 * G_USEC_PER_SEC;
	char *text = scrape(e);

	while (sample(text, line) != value && g_get_monotonic_time() < deadline) {
		g_free(text);
		g_usleep(20 * 1000);
		text = scrape(e);
	}
	if (sample(text, line) != value)
		g_error("%s is %g, not %g, after 10 s:\n%s", line, sample(text, line), value, text);
	return text;
}

/* SIGHUP, then wait (bounded) until the reload counter of result reaches n. */
static char *
reload(struct serve_env *e, const char *result, double n)
{
	g_autofree char *line = g_strdup_printf("narwhal_config_reloads_total{result=\"%s\"}",
	                                        result);

	g_subprocess_send_signal(e->daemon, SIGHUP);
	return scrape_until(e, line, n);
}

#define ENGINE_LINE(buf, family, id, rest) \
	g_snprintf(buf, sizeof buf, "%s{engine=\"%s\"%s}", family, id, rest)

/* Issue 11 (GET /metrics: "the monitor's engine readings, health verdicts"
 * and the operating state): a drain through the admin API shows as the
 * drain hold, a complete drain (no residents), a breached prefill floor
 * and a degraded health status; an operator pin by "operator"; calls
 * without the token as invalid_admin_token; a SIGHUP with an invalid file
 * as a failed reload, one changing the port as refused, a valid one as
 * applied with a new generation and load time, the drain carried over.
 * Every family passes promtool and is documented. */
static void
test_operating_families(void)
{
	struct serve_env e;
	const char *cfg = "{\"admin\": {\"port\": 0, \"token_env\": \"" TOKEN_ENV "\"},"
	                  " \"controller\": {\"monitor_interval_s\": 0.1}}";
	g_autofree char *promtool = promtool_find();
	g_autofree char *original = NULL, *drain = NULL, *pin = NULL;
	json_t *engines;
	const char *p, *d;
	char line[256];
	char *text;
	double loaded;

	g_test_summary("issue 11: the monitor, role, hold, pin, drain, reload and admin families "
	               "move with the operator's actions and pass promtool");
	if (!serve_start(&e, sim_args, "pd", cfg))
		return;
	g_assert_true(serve_wait_all_available(&e, 10000));
	engines = json_object_get(e.sim.fleet, "engines");
	p = json_string_value(json_object_get(json_array_get(engines, 0), "id"));
	d = json_string_value(json_object_get(json_array_get(engines, 1), "id"));

	/* At rest: both roles at their floor, the engines' own readings in. */
	ENGINE_LINE(line, "narwhal_engine_reading_age_seconds", d, "");
	text = scrape(&e);
	for (gint64 end = g_get_monotonic_time() + 10 * G_USEC_PER_SEC;
	     isnan(sample(text, line)) && g_get_monotonic_time() < end;) {
		g_free(text);
		g_usleep(20 * 1000);
		text = scrape(&e);
	}
	g_assert_cmpfloat(sample(text, line), >=, 0);
	g_assert_cmpfloat(sample(text, line), <, 5);
	ENGINE_LINE(line, "narwhal_engine_kv_cache_usage_ratio", d, "");
	g_assert_cmpfloat(sample(text, line), >=, 0);
	g_assert_cmpfloat(sample(text, line), <=, 1);
	ENGINE_LINE(line, "narwhal_engine_running_requests", p, "");
	g_assert_cmpfloat(sample(text, line), ==, 0);
	g_assert_cmpfloat(sample(text, "narwhal_health_status{status=\"ok\"}"), ==, 1);
	g_assert_cmpfloat(sample(text, "narwhal_role_live_engines{role=\"prefill\"}"), ==, 1);
	g_assert_cmpfloat(sample(text, "narwhal_role_floor{role=\"prefill\"}"), ==, 1);
	g_assert_cmpfloat(sample(text, "narwhal_role_floor_breached{role=\"prefill\"}"), ==, 0);
	g_assert_cmpfloat(sample(text, "narwhal_monitor_passes_total"), >, 0);
	g_assert_cmpfloat(sample(text, "narwhal_config_generation"), ==, 0);
	g_assert_cmpfloat(sample(text, "narwhal_draining"), ==, 0);
	g_assert_cmpfloat(sample(text, "narwhal_admin_requests_total{result=\"ok\"}"), ==, 0);
	loaded = sample(text, "narwhal_config_last_reload_success_timestamp_seconds");
	g_assert_cmpfloat(fabs(loaded - (double)g_get_real_time() / 1e6), <, 60);
	ENGINE_LINE(line, "narwhal_engine_drain_residents", p, "");
	g_assert_true(isnan(sample(text, line)));   /* only while draining */
	g_free(text);

	/* The admin API: one call without the token, a drain and a pin. */
	g_assert_cmpint(admin_call(&e, NULL, "GET", "/admin/state"), ==, 401);
	drain = g_strconcat("/admin/engines/", p, "/drain", NULL);
	pin = g_strconcat("/admin/engines/", d, "/pin", NULL);
	g_assert_cmpint(admin_call(&e, TOKEN, "POST", drain), ==, 200);
	g_assert_cmpint(admin_call(&e, TOKEN, "POST", pin), ==, 200);
	/* The floor's breach is the next pass's. */
	text = scrape_until(&e, "narwhal_role_floor_breached{role=\"prefill\"}", 1);
	g_assert_cmpfloat(sample(text, "narwhal_role_live_engines{role=\"prefill\"}"), ==, 0);
	g_assert_cmpfloat(sample(text, "narwhal_role_reachable_engines{role=\"prefill\"}"), ==, 0);
	g_assert_cmpfloat(sample(text, "narwhal_health_status{status=\"degraded\"}"), ==, 1);
	g_assert_cmpfloat(sample(text, "narwhal_health_status{status=\"ok\"}"), ==, 0);
	ENGINE_LINE(line, "narwhal_engine_hold", p, ",hold=\"drain\"");
	g_assert_cmpfloat(sample(text, line), ==, 1);
	ENGINE_LINE(line, "narwhal_engine_drain_residents", p, "");
	g_assert_cmpfloat(sample(text, line), ==, 0);
	ENGINE_LINE(line, "narwhal_engine_pinned", d, ",by=\"operator\"");
	g_assert_cmpfloat(sample(text, line), ==, 1);
	ENGINE_LINE(line, "narwhal_engine_pinned", d, ",by=\"config\"");
	g_assert_cmpfloat(sample(text, line), ==, 0);
	g_assert_cmpfloat(sample(text, "narwhal_admin_requests_total{result=\"ok\"}"), ==, 2);
	g_assert_cmpfloat(sample(text, "narwhal_admin_requests_total{result=\"invalid_admin_token\"}"),
	                  ==, 1);
	g_free(text);

	/* Reloads: invalid (failed), a new port (refused), the file again
	 * (applied); the drain holds on. */
	g_assert_true(g_file_get_contents(e.config_path, &original, NULL, NULL));
	g_assert_true(g_file_set_contents(e.config_path, "{\"fleet\": ", -1, NULL));
	g_free(reload(&e, "failed", 1));
	{
		json_t *doc = json_loads(original, 0, NULL);

		json_object_set_new(json_object_get(doc, "server"), "port", json_integer(1));
		g_assert_cmpint(json_dump_file(doc, e.config_path, 0), ==, 0);
		json_decref(doc);
	}
	text = reload(&e, "refused", 1);
	g_assert_cmpfloat(sample(text, "narwhal_config_generation"), ==, 0);
	g_assert_cmpfloat(sample(text, "narwhal_config_reloads_total{result=\"applied\"}"), ==, 0);
	g_free(text);
	g_assert_true(g_file_set_contents(e.config_path, original, -1, NULL));
	text = reload(&e, "applied", 1);
	g_assert_cmpfloat(sample(text, "narwhal_config_generation"), ==, 1);
	g_assert_cmpfloat(sample(text, "narwhal_config_reloads_total{result=\"failed\"}"), ==, 1);
	g_assert_cmpfloat(sample(text, "narwhal_config_last_reload_success_timestamp_seconds"), >,
	                  loaded);
	ENGINE_LINE(line, "narwhal_engine_hold", p, ",hold=\"drain\"");
	g_assert_cmpfloat(sample(text, line), ==, 1);
	if (promtool != NULL)
		promtool_check(promtool, text);
	assert_documented(&e, text);
	g_free(text);
	serve_clear(&e);
	if (promtool == NULL)
		g_test_skip("promtool is not installed (Debian's prometheus package): the scrapes "
		            "were not checked by it");
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_setenv(TOKEN_ENV, TOKEN, TRUE);
	g_test_add_func("/metrics/issue-11/promtool-during-replay", test_scrape_during_replay);
	g_test_add_func("/metrics/issue-11/operating-families", test_operating_families);
	return g_test_run();
}
