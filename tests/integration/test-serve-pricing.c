/*
 * The pricing ledger through the daemon, in front of narwhal-sim, with a
 * profile store (issue 12, "The estimators in core"; spec 7.1;
 * docs/profiles.md, "Pricing work on the fleet"): /narwhal/state shows
 * every profiled engine's loads as numbers, work waiting for an engine's
 * slots and decodes in flight show in its loads and resident KV tokens,
 * and once the traffic is over (requests that completed, were retried,
 * failed, or were cancelled while queued or decoding) the ledger is back
 * to zero: every load 0, no resident KV token, nothing queued, also
 * across a reload that came while work was waiting.
 */
#include "build-config.h"

#include <math.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <glib/gstdio.h>

#include "integration/test-serve-common.h"

/* A profile of narwhal-sim's default preset, roughly (the loads need a
 * profile, not an exact one), wide domains. */
#define PROFILE(id) \
	"{\"engine\": \"" id "\", \"url\": \"http://127.0.0.1:1\", \"dialect\": \"vllm\"," \
	" \"model\": \"m\", \"hardware\": null, \"kv_capacity_tokens\": 0," \
	" \"measured_at\": \"2026-12-01T20:00:00Z\"," \
	" \"prefill\": {\"a_s\": 0.02, \"b_s\": 0.0001, \"c_s\": 1e-08, \"min_tokens\": 1," \
	"  \"max_tokens\": 4096, \"samples\": 10, \"rel_rms_error\": 0.02}," \
	" \"decode\": {\"d0_s\": 0.02, \"d1_s\": 1e-07, \"d2_s\": 0.0001, \"min_active\": 1," \
	"  \"max_active\": 256, \"min_kv_tokens\": 0, \"max_kv_tokens\": 1000000, \"samples\": 20," \
	"  \"rel_rms_error\": 0.03}," \
	" \"handoff\": {\"setup_s\": 0.002, \"per_token_s\": 1e-06, \"max_tokens\": 4096," \
	"  \"samples\": 4}}"

#define STORE \
	"{\"version\": 1, \"created_at\": \"2026-12-01T20:00:00Z\", \"tool\": \"test\"," \
	" \"engines\": [" PROFILE("sim-0") "," PROFILE("sim-1") "," PROFILE("sim-2") "]}"

static json_t *
state(struct serve_env *e)
{
	struct sim_reply r;
	json_t *doc;

	sim_http(e->port, "GET", "/narwhal/state", NULL, NULL, 5000, &r);
	g_assert_cmpint(r.status, ==, 200);
	doc = sim_json(r.body->str);
	sim_reply_clear(&r);
	return doc;
}

static json_t *
load_of(json_t *engine, const char *phase)
{
	return json_object_get(json_object_get(engine, "loads"), phase);
}

static json_int_t
int_of(json_t *engine, const char *key)
{
	return json_integer_value(json_object_get(engine, key));
}

/* What a state document is checked for. */
typedef gboolean (*state_check)(json_t *doc, gpointer data);

/* Poll /narwhal/state until check holds; FALSE after timeout_ms. */
static gboolean
wait_state(struct serve_env *e, state_check check, gpointer data, guint timeout_ms)
{
	gint64 deadline = g_get_monotonic_time() + (gint64)timeout_ms * 1000;

	do {
		json_t *doc = state(e);
		gboolean ok = check(doc, data);

		json_decref(doc);
		if (ok)
			return TRUE;
		g_usleep(10000);
	} while (g_get_monotonic_time() < deadline);
	return FALSE;
}

/* Every engine is profiled and both its loads are numbers (spec 7.1, priced). */
static gboolean
loads_finite(json_t *doc, gpointer unused)
{
	json_t *engine;
	size_t i;

	json_array_foreach(json_object_get(doc, "engines"), i, engine) {
		if (!json_is_true(json_object_get(engine, "profiled")) ||
		    !json_is_number(load_of(engine, "prefill")) ||
		    !json_is_number(load_of(engine, "decode")))
			return FALSE;
	}
	return json_array_size(json_object_get(doc, "engines")) == 3;
}

/* The ledger is back to zero: nothing resident, queued or held, and the
 * loads the pass priced from it are 0. */
static gboolean
ledger_zero(json_t *doc, gpointer unused)
{
	json_t *engine;
	size_t i;

	json_array_foreach(json_object_get(doc, "engines"), i, engine) {
		if (int_of(engine, "resident_prefill") != 0 || int_of(engine, "resident_decode") != 0 ||
		    int_of(engine, "resident_kv_tokens") != 0 || int_of(engine, "queued_prefill") != 0 ||
		    !json_is_number(load_of(engine, "prefill")) ||
		    json_number_value(load_of(engine, "prefill")) != 0 ||
		    !json_is_number(load_of(engine, "decode")) ||
		    json_number_value(load_of(engine, "decode")) != 0)
			return FALSE;
	}
	return TRUE;
}

/* Both prefill engines hold a prefill slot. */
static gboolean
prefill_slots_taken(json_t *doc, gpointer unused)
{
	json_t *engines = json_object_get(doc, "engines");

	return int_of(json_array_get(engines, 0), "resident_prefill") == 1 &&
	       int_of(json_array_get(engines, 1), "resident_prefill") == 1;
}

/* One request waits for a prefill engine's slots, and that engine's
 * prefill load counts its work (the FIFO projection's queued term). */
static gboolean
one_queued_priced(json_t *doc, gpointer unused)
{
	json_t *engine;
	size_t i;
	json_int_t queued = 0;
	gboolean priced = FALSE;

	json_array_foreach(json_object_get(doc, "engines"), i, engine) {
		queued += int_of(engine, "queued_prefill");
		if (int_of(engine, "queued_prefill") == 1)
			priced = json_number_value(load_of(engine, "prefill")) > 0;
	}
	return queued == 1 && priced;
}

static gboolean
none_queued(json_t *doc, gpointer unused)
{
	json_t *engine;
	size_t i;

	json_array_foreach(json_object_get(doc, "engines"), i, engine) {
		if (int_of(engine, "queued_prefill") != 0)
			return FALSE;
	}
	return TRUE;
}

/* The decode engine holds at least *data resident KV tokens. */
static gboolean
decode_kv_at_least(json_t *doc, gpointer data)
{
	json_t *engine = json_array_get(json_object_get(doc, "engines"), 2);

	return int_of(engine, "resident_kv_tokens") >= *(json_int_t *)data &&
	       int_of(engine, "resident_decode") == 1;
}

static void
assert_state(struct serve_env *e, state_check check, gpointer data, const char *what)
{
	if (!wait_state(e, check, data, 10000)) {
		json_t *doc = state(e);
		g_autofree char *text = json_dumps(doc, JSON_INDENT(1));

		json_decref(doc);
		g_error("%s: /narwhal/state never showed it:\n%s", what, text);
	}
}

static void
test_loads_and_ledger(void)
{
	const char *const args[] = { "--engines", "3", "--time-scale", "20", NULL };
	g_autofree char *dir = g_dir_make_tmp("narwhal-pricing-XXXXXX", NULL);
	g_autofree char *store = g_build_filename(dir, "profiles.json", NULL);
	g_autofree char *config = NULL, *short_body = NULL, *long_body = NULL;
	g_autofree char *stream_body = NULL;
	struct serve_async *reqs[6];
	struct serve_env e;
	struct sim_reply r;
	json_int_t kv_floor = 1500;
	GString *got;
	int fd;

	g_test_summary("issue 12, the estimators in core: engines[].loads are numbers with a "
	               "profile store, and the ledger is back to zero after traffic that "
	               "completed, retried, failed and was cancelled (docs/profiles.md)");
	g_assert_nonnull(dir);
	g_assert_true(g_file_set_contents(store, STORE, -1, NULL));
	/* Short monitor passes: the loads are priced at each. Sizing by
	 * characters (chars_per_token) is priced like an exact count. */
	config = g_strdup_printf(
		"{\"profiles\": {\"path\": \"%s\"}, \"engine\": {\"tokenize\": false},"
		" \"controller\": {\"monitor_interval_s\": 0.05,"
		"   \"reactive\": {\"decode_correction_min_samples\": 2}},"
		" \"serving\": {\"prefill_concurrency\": 1, \"max_attempts\": 2,"
		"   \"handoff_timeout_s\": 5, \"retry_base_s\": 0.01, \"retry_cap_s\": 0.02}}", store);
	if (!serve_start(&e, args, "ppd", config)) {
		g_unlink(store);
		g_rmdir(dir);
		return;
	}
	assert_state(&e, loads_finite, NULL, "every engine profiled, its loads numbers");

	/* Traffic that completes, streamed and not, some waiting for a
	 * prefill slot (one per engine). */
	short_body = serve_completion_body(&e, 8, FALSE);
	stream_body = serve_completion_body(&e, 8, TRUE);
	for (unsigned i = 0; i < G_N_ELEMENTS(reqs); i++)
		reqs[i] = serve_post_async(&e, "/v1/completions", i % 2 ? stream_body : short_body,
		                           20000);
	for (unsigned i = 0; i < G_N_ELEMENTS(reqs); i++) {
		serve_async_join(reqs[i], &r, NULL);
		g_assert_cmpint(r.status, ==, 200);
		sim_reply_clear(&r);
	}
	assert_state(&e, loads_finite, NULL, "loads still numbers after traffic");

	/* A request waits for a prefill slot while both prefill engines hang
	 * (2 s), is priced there, and is cancelled while it waits. */
	g_assert_cmpint(sim_set_faults(&e.sim, 0, "{\"hang_before_first_token\":40}"), ==, 200);
	g_assert_cmpint(sim_set_faults(&e.sim, 1, "{\"hang_before_first_token\":40}"), ==, 200);
	reqs[0] = serve_post_async(&e, "/v1/completions", short_body, 20000);
	reqs[1] = serve_post_async(&e, "/v1/completions", short_body, 20000);
	assert_state(&e, prefill_slots_taken, NULL, "both prefill slots taken");
	fd = serve_raw_post(e.port, "/v1/completions", short_body, 0);
	g_assert_cmpint(fd, >=, 0);
	assert_state(&e, one_queued_priced, NULL, "the third request queued and priced");
	/* A reload: the older generation's work is lent to the newer ledger
	 * (docs/profiles.md), so the newer loads still price it. */
	g_subprocess_send_signal(e.daemon, SIGHUP);
	g_assert_true(serve_wait_log(&e, "\"event\":\"reload_applied\"", 10000));
	assert_state(&e, one_queued_priced, NULL, "the queued request priced after a reload");
	close(fd);
	assert_state(&e, none_queued, NULL, "the cancelled request gone from the queue");
	g_assert_cmpint(sim_set_faults(&e.sim, 0, "{\"hang_before_first_token\":null}"), ==, 200);
	g_assert_cmpint(sim_set_faults(&e.sim, 1, "{\"hang_before_first_token\":null}"), ==, 200);
	for (unsigned i = 0; i < 2; i++) {
		serve_async_join(reqs[i], &r, NULL);
		g_assert_cmpint(r.status, ==, 200);
		sim_reply_clear(&r);
	}
	/* The older generation's slots are given back to the newer view only
	 * when it has synced; the retry below needs sim-1's slot free. */
	g_assert_true(serve_wait_log(&e, "\"event\":\"generation_freed\"", 10000));

	/* A prefill that fails and is retried on the other engine, then one
	 * that fails on both: the attempts give their work back. */
	g_assert_cmpint(sim_set_faults(&e.sim, 0, "{\"error_rate\":1,\"error_status\":503}"), ==, 200);
	serve_post(&e, "/v1/completions", short_body, NULL, 10000, &r);
	g_assert_cmpint(r.status, ==, 200);
	sim_reply_clear(&r);
	g_assert_cmpint(sim_set_faults(&e.sim, 1, "{\"error_rate\":1,\"error_status\":503}"), ==, 200);
	serve_post(&e, "/v1/completions", short_body, NULL, 10000, &r);
	g_assert_cmpint(r.status, ==, 502);
	sim_reply_clear(&r);
	g_assert_cmpint(sim_set_faults(&e.sim, 0, "{\"error_rate\":null}"), ==, 200);
	g_assert_cmpint(sim_set_faults(&e.sim, 1, "{\"error_rate\":null}"), ==, 200);
	/* A decode that fails in its stream. */
	g_assert_cmpint(sim_set_faults(&e.sim, 2, "{\"error_after_tokens\":2}"), ==, 200);
	serve_post(&e, "/v1/completions", stream_body, NULL, 10000, &r);
	g_assert_cmpint(r.status, ==, 200);
	g_assert_nonnull(strstr(r.body->str, "\"error\""));
	sim_reply_clear(&r);
	g_assert_cmpint(sim_set_faults(&e.sim, 2, "{\"error_after_tokens\":null}"), ==, 200);

	/* A long decode holds its prompt and its reserved output in the
	 * decode engine's resident KV tokens until the client hangs up. */
	long_body = serve_completion_body(&e, (unsigned)kv_floor, TRUE);
	fd = serve_raw_post(e.port, "/v1/completions", long_body, 0);
	g_assert_cmpint(fd, >=, 0);
	got = g_string_new(NULL);
	g_assert_true(serve_raw_read_until(fd, got, "data: ", 10000));
	assert_state(&e, decode_kv_at_least, &kv_floor, "the decode's KV counted");
	close(fd);
	g_string_free(got, TRUE);

	assert_state(&e, ledger_zero, NULL, "the ledger back to zero");
	serve_clear(&e);
	g_unlink(store);
	g_rmdir(dir);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/serve/pricing/loads-and-ledger", test_loads_and_ledger);
	return g_test_run();
}
