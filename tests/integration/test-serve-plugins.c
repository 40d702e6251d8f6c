/*
 * The host's side of the plugin ABI (include/narwhal/plugin-abi.h,
 * docs/plugins.md), end to end with real processes: optional dialect slots
 * checked before use, a fleet that mixes dialects, and plugin calls that
 * fail being refused rather than taken as "admit".
 */
#include "build-config.h"

#include <narwhal/plugin-abi.h>

#include <string.h>
#include <unistd.h>

#include <glib.h>
#include <glib/gstdio.h>

#include "integration/test-serve-common.h"

/* narwhal-sim engines with these roles ('p', 'd'), and narwhal in front of
 * them with engine i speaking dialects[i] ('v': vllm, 'm': the mock, whose
 * capabilities are mock_caps) from a plugin directory returned in *dir
 * (serve_plugin_dir_free). FALSE (skipped) when narwhal-sim is not built. */
static gboolean
start_mixed(struct serve_env *e, const char *roles, const char *dialects, unsigned mock_caps,
            gboolean tokenize, char **dir)
{
	g_autofree char *engines = g_strdup_printf("%zu", strlen(roles));
	const char *const args[] = { "--engines", engines, "--time-scale", "20", NULL };
	g_autofree char *cfg = NULL;

	if (!serve_start(e, args, roles, NULL))
		return FALSE;
	*dir = serve_plugin_dir_new();
	cfg = g_strdup_printf("{\"plugins\": {\"dir\": \"%s\", \"dialects\": {\"mock\":"
	                      " {\"caps\": %u}}}, \"engine\": {\"tokenize\": %s}}",
	                      *dir, mock_caps, tokenize ? "true" : "false");
	serve_restart_with_dialects(e, dialects, cfg);
	return TRUE;
}

static json_int_t
engine_requests(struct serve_env *e, unsigned engine)
{
	/* Work only: the monitor's health, model and metrics calls do not count. */
	return sim_engine_stat(&e->sim, engine, "work_requests_total");
}

static void
post_ok(struct serve_env *e, unsigned n)
{
	g_autofree char *body = serve_completion_body(e, 4, FALSE);

	for (unsigned i = 0; i < n; i++) {
		struct sim_reply r = { 0 };

		serve_post(e, "/v1/completions", body, NULL, 10000, &r);
		if (r.status != 200)
			g_error("want 200, got %ld: %s", r.status, r.body->str);
		sim_reply_clear(&r);
	}
}

/* Issue 9: "a dialect without tokenise support crashes the daemon on its
 * first request". The host checks the optional pair before calling it and
 * sizes by characters. */
static void
test_dialect_without_tokenize(void)
{
	struct serve_env e;
	char *dir;

	if (!start_mixed(&e, "pd", "mm", NARWHAL_DIALECT_HANDOFF_SEQUENTIAL, TRUE, &dir))
		return;
	post_ok(&e, 2);
	g_assert_cmpint(serve_counter(&e, "tokenize_calls"), ==, 0);
	g_assert_cmpint(serve_counter(&e, "prefill_started"), ==, 2);
	g_assert_cmpint(serve_counter(&e, "decode_started"), ==, 2);
	g_assert_cmpint(serve_counter(&e, "plugin_call_errors"), ==, 0);
	serve_clear(&e);
	serve_plugin_dir_free(dir);
}

/* Issue 9: capabilities are read per engine, so a fleet that mixes dialects
 * works. An engine whose dialect cannot pair (capabilities 0, like
 * llama.cpp) starts requests whatever its role and runs them whole. */
static void
test_aggregate_only_engine(void)
{
	struct serve_env e;
	char *dir;
	json_int_t before[3];

	/* Sizing by characters keeps the vllm engines' tokenise calls out of
	 * the counts. */
	if (!start_mixed(&e, "dpd", "mvv", 0, FALSE, &dir))
		return;
	/* sim-0 (the mock, aggregate-only) ties with sim-1 (vllm prefill) on
	 * load, and the lower instance ID wins (spec 5). */
	for (unsigned i = 0; i < 3; i++)
		before[i] = engine_requests(&e, i);
	post_ok(&e, 3);
	g_assert_cmpint(serve_counter(&e, "aggregate_started"), ==, 3);
	g_assert_cmpint(serve_counter(&e, "prefill_started"), ==, 0);
	g_assert_cmpint(engine_requests(&e, 0) - before[0], ==, 3);
	g_assert_cmpint(engine_requests(&e, 1) - before[1], ==, 0);
	g_assert_cmpint(engine_requests(&e, 2) - before[2], ==, 0);
	serve_clear(&e);
	serve_plugin_dir_free(dir);
}

/* A decode engine takes a handoff only from a prefill engine of its own
 * dialect: the vllm prefill engine's requests decode on the vllm decode
 * engine, never on the mock one, though the mock's ID is lower. */
static void
test_pairs_within_dialect(void)
{
	struct serve_env e;
	char *dir;
	json_int_t before[3];

	if (!start_mixed(&e, "pdd", "vmv", NARWHAL_DIALECT_HANDOFF_SEQUENTIAL, FALSE, &dir))
		return;
	for (unsigned i = 0; i < 3; i++)
		before[i] = engine_requests(&e, i);
	post_ok(&e, 3);
	g_assert_cmpint(serve_counter(&e, "prefill_started"), ==, 3);
	g_assert_cmpint(serve_counter(&e, "decode_started"), ==, 3);
	g_assert_cmpint(engine_requests(&e, 1) - before[1], ==, 0);
	g_assert_cmpint(engine_requests(&e, 2) - before[2], ==, 3);
	serve_clear(&e);
	serve_plugin_dir_free(dir);
}

/* Issue 9: the host implements HANDOFF_CONCURRENT. Both legs of a pair go
 * out at once, built for both engines with one pair id: the prefill engine
 * here never answers (hung), yet the request is served by the decode leg,
 * which a sequential handoff would never have sent. */
static void
test_concurrent_pair(void)
{
	struct serve_env e;
	char *dir;
	g_autofree char *log = NULL;
	char *at;

	if (!start_mixed(&e, "pd", "mm", NARWHAL_DIALECT_HANDOFF_CONCURRENT, FALSE, &dir))
		return;
	g_assert_cmpint(sim_set_faults(&e.sim, 0, "{\"hang_before_first_token\": true}"), ==, 200);
	post_ok(&e, 2);
	g_assert_cmpint(serve_counter(&e, "prefill_started"), ==, 2);
	g_assert_cmpint(serve_counter(&e, "decode_started"), ==, 2);
	/* Both legs of the first pair name both engines and one pair id (the
	 * log's writer thread may still hold lines the answers overtook). */
	g_assert_true(serve_wait_log(&e, "mock prefill leg pair=", 5000));
	log = serve_log(&e);
	at = strstr(log, "mock prefill leg pair=");
	g_assert_nonnull(at);
	{
		unsigned long long pair = g_ascii_strtoull(at + strlen("mock prefill leg pair="), NULL,
		                                           10);
		g_autofree char *decode = g_strdup_printf("mock decode leg pair=%llu prefill=sim-0"
		                                          " decode=sim-1", pair);
		g_autofree char *prefill = g_strdup_printf("mock prefill leg pair=%llu prefill=sim-0"
		                                           " decode=sim-1", pair);

		g_assert_cmpuint(pair, >, 0);
		g_assert_true(serve_wait_log(&e, prefill, 5000));
		g_assert_true(serve_wait_log(&e, decode, 5000));
	}
	sim_set_faults(&e.sim, 0, "{\"hang_before_first_token\": false}");
	serve_clear(&e);
	serve_plugin_dir_free(dir);
}

/* A concurrent pair's prefill leg that fails fails the attempt, charged to
 * the prefill engine: the client gets the failure, never a success built
 * on a prefill that did not happen. */
static void
test_concurrent_prefill_failure(void)
{
	struct serve_env e;
	char *dir;
	g_autofree char *body = NULL;
	struct sim_reply r = { 0 };

	if (!start_mixed(&e, "pd", "mm", NARWHAL_DIALECT_HANDOFF_CONCURRENT, FALSE, &dir))
		return;
	g_assert_cmpint(sim_set_faults(&e.sim, 0, "{\"error_rate\": 1.0, \"error_status\": 500}"),
	                ==, 200);
	/* The decode engine answers slowly, so the prefill's 500 comes first. */
	g_assert_cmpint(sim_set_faults(&e.sim, 1, "{\"hang_before_first_token\": 2.0}"), ==, 200);
	body = serve_completion_body(&e, 4, FALSE);
	serve_post(&e, "/v1/completions", body, NULL, 20000, &r);
	serve_assert_error(&r, 502, "engine_error");
	g_assert_null(strstr(r.body->str, "127.0.0.1"));
	sim_reply_clear(&r);
	g_assert_cmpint(serve_counter(&e, "prefill_failed_status"), ==, 1);
	g_assert_true(serve_wait_log(&e, "\"engine\":\"sim-0\",\"status\":\"500\"", 2000));
	sim_set_faults(&e.sim, 0, "{\"error_rate\": 0}");
	sim_set_faults(&e.sim, 1, "{\"hang_before_first_token\": false}");
	serve_clear(&e);
	serve_plugin_dir_free(dir);
}

/* plugin-abi.h: a failed admission decision refuses the request (503),
 * logged and counted; it never becomes "admit". */
static void
test_admission_failure_refuses(void)
{
	static const char *const args[] = { "--engines", "2", "--time-scale", "20", NULL };
	struct serve_env e;
	g_autofree char *mock = g_test_build_filename(G_TEST_BUILT, "plugins", ".libs",
	                                              "mock-good.so", NULL);
	g_autofree char *cfg = g_strdup_printf(
		"{\"plugins\": {\"admission\": {\"path\": \"%s\", \"config\": {\"decide_rc\": -5}}},"
		" \"engine\": {\"tokenize\": false}}",
		mock);
	g_autofree char *body = NULL;
	struct sim_reply r = { 0 };
	json_int_t before;

	if (!serve_start(&e, args, "pd", cfg))
		return;
	before = engine_requests(&e, 0) + engine_requests(&e, 1);
	body = serve_completion_body(&e, 4, FALSE);
	serve_post(&e, "/v1/completions", body, NULL, 10000, &r);
	serve_assert_error(&r, 503, "admission_unavailable");
	sim_reply_clear(&r);
	g_assert_cmpint(serve_counter(&e, "plugin_call_errors"), ==, 1);
	g_assert_cmpint(serve_counter(&e, "admitted"), ==, 0);
	g_assert_cmpint(engine_requests(&e, 0) + engine_requests(&e, 1), ==, before);
	g_assert_true(serve_wait_log(&e, "\"event\":\"plugin_call_failed\"", 2000));
	serve_clear(&e);
}

/* A plugin metric of the mock dialect, from GET /metrics (0 when absent). */
static double
mock_metric(struct serve_env *e, const char *name)
{
	g_autofree char *want = g_strdup_printf("\nnarwhal_plugin_dialect_mock_%s ", name);
	struct sim_reply r;
	const char *at;
	double v = 0;

	sim_http(e->port, "GET", "/metrics", NULL, NULL, 5000, &r);
	g_assert_cmpint(r.status, ==, 200);
	at = strstr(r.body->str, want);
	if (at != NULL)
		v = g_ascii_strtod(at + strlen(want), NULL);
	sim_reply_clear(&r);
	return v;
}

/* plugin-abi.h 2.4: an assembled answer's events are read as JSON once,
 * by the host, and a dialect with parse_sse_json classifies the tree; only
 * the terminator, which is not JSON, goes to parse_sse. A relayed stream
 * needs no tree and keeps parse_sse. */
static void
test_sse_read_once(void)
{
	struct serve_env e;
	char *dir;
	double json, bytes;

	g_test_summary("/serve/plugins/sse-read-once: a 2.4 dialect gets the assembly's JSON "
	               "events as trees, the terminator and a relayed stream as bytes");
	if (!start_mixed(&e, "a", "m", 0, FALSE, &dir))
		return;
	serve_request_whole(&e, FALSE, 4);
	json = mock_metric(&e, "sse_json_total");
	bytes = mock_metric(&e, "sse_bytes_total");
	g_assert_cmpfloat(json, >=, 4.0); /* the token events, the usage event */
	g_assert_cmpfloat(bytes, ==, 1.0); /* [DONE] */
	serve_request_whole(&e, TRUE, 4);
	g_assert_cmpfloat(mock_metric(&e, "sse_json_total"), ==, json);
	/* at least its first token event and its terminator */
	g_assert_cmpfloat(mock_metric(&e, "sse_bytes_total"), >=, bytes + 2.0);
	serve_clear(&e);
	serve_plugin_dir_free(dir);
}

/* The fleet's dialects own their handoff keys: a client kv_transfer_params
 * is refused before any engine sees the request. */
static void
test_router_keys_refused(void)
{
	static const char *const args[] = { "--engines", "2", "--time-scale", "20", NULL };
	struct serve_env e;
	g_autofree char *body = NULL;
	struct sim_reply r = { 0 };
	json_int_t before;

	if (!serve_start(&e, args, "pd", NULL))
		return;
	before = engine_requests(&e, 0) + engine_requests(&e, 1);
	body = g_strdup_printf("{\"model\": \"%s\", \"prompt\": \"x\", \"max_tokens\": 2,"
	                       " \"kv_transfer_params\": {\"remote_host\": \"10.9.9.9\"}}",
	                       e.model);
	serve_post(&e, "/v1/completions", body, NULL, 10000, &r);
	serve_assert_error(&r, 400, "unsupported_value");
	g_assert_nonnull(strstr(r.body->str, "kv_transfer_params"));
	sim_reply_clear(&r);
	g_assert_cmpint(engine_requests(&e, 0) + engine_requests(&e, 1), ==, before);
	serve_clear(&e);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/serve/plugins/dialect-without-tokenize", test_dialect_without_tokenize);
	g_test_add_func("/serve/plugins/aggregate-only-engine", test_aggregate_only_engine);
	g_test_add_func("/serve/plugins/pairs-within-dialect", test_pairs_within_dialect);
	g_test_add_func("/serve/plugins/concurrent-pair", test_concurrent_pair);
	g_test_add_func("/serve/plugins/concurrent-prefill-failure", test_concurrent_prefill_failure);
	g_test_add_func("/serve/plugins/admission-failure-refuses", test_admission_failure_refuses);
	g_test_add_func("/serve/plugins/router-keys-refused", test_router_keys_refused);
	g_test_add_func("/serve/plugins/sse-read-once", test_sse_read_once);
	return g_test_run();
}
