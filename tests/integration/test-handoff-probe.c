/*
 * The handoff probe (src/control/handoff-probe.h) against narwhal-sim
 * engines: a complete prefill-to-decode handoff outside any client request,
 * as the breaker's verification legs (spec 6: a complete prefill leg and a
 * complete decode leg with a real handoff, each under
 * engine.first_token_timeout_s) and narwhal-check's pair checks (spec 4.2)
 * run it; where each kind of failure stops it; a cancelled probe that
 * calls nothing back and leaks nothing (run under ASan in the sanitizer
 * build); and the aggregate leg with timed token events that
 * narwhal-profile's decode grid runs.
 */
#include "build-config.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <glib/gstdio.h>

#include "control/handoff-probe.h"
#include "integration/sim-client.h"
#include "integration/test-serve-common.h"
#include "core/fleet-dialects.h"

struct probe_env {
	struct sim_proc sim;
	char *plugin_dir;
	struct nw_config *cfg;
	struct nw_fleet *registry;
	struct nw_plugin_metrics *metrics;
	struct nw_fleet_dialects *fleet;
	struct nw_upstream *pool;
	uint64_t next_handle;
};

/* narwhal-sim with two engines at time scale 20 (plus extra arguments),
 * engine i speaking dialects[i] ('v': vllm, 'm': the mock with mock_caps).
 * FALSE (skipped) when narwhal-sim is not built. */
static gboolean
env_start(struct probe_env *e, const char *dialects, unsigned mock_caps, const char *const *extra)
{
	g_autofree char *bin = sim_bin();
	g_autoptr(GPtrArray) args = g_ptr_array_new();
	json_t *cfg, *engines;
	g_autofree char *text = NULL;
	GPtrArray *problems = NULL;
	GError *error = NULL;
	struct nw_upstream_options pool = { .max_connections = 8 };

	memset(e, 0, sizeof *e);
	if (!g_file_test(bin, G_FILE_TEST_IS_EXECUTABLE)) {
		g_test_skip("narwhal-sim is not built");
		return FALSE;
	}
	g_ptr_array_add(args, "--engines");
	g_ptr_array_add(args, "2");
	g_ptr_array_add(args, "--time-scale");
	g_ptr_array_add(args, "20");
	for (const char *const *a = extra; a && *a; a++)
		g_ptr_array_add(args, (gpointer)*a);
	g_ptr_array_add(args, NULL);
	g_assert_true(sim_start(&e->sim, (const char *const *)args->pdata));
	e->plugin_dir = serve_plugin_dir_new();
	engines = json_object_get(e->sim.fleet, "engines");
	for (size_t i = 0; i < json_array_size(engines) && dialects[i]; i++)
		json_object_set_new(json_array_get(engines, i), "dialect",
		                    json_string(dialects[i] == 'm' ? "mock" : "vllm"));
	cfg = json_pack("{s:{s:s, s:{s:{s:i}}}, s:O}", "plugins", "dir", e->plugin_dir,
	                "dialects", "mock", "caps", (json_int_t)mock_caps, "fleet", e->sim.fleet);
	if (strchr(dialects, 'm') == NULL)
		json_object_del(json_object_get(cfg, "plugins"), "dialects");
	text = json_dumps(cfg, JSON_COMPACT);
	json_decref(cfg);
	e->cfg = nw_config_load_string(text, "probe.json", &problems);
	if (e->cfg == NULL) {
		char *line = nw_config_error_format("probe.json", g_ptr_array_index(problems, 0));

		g_error("%s", line);
	}
	g_ptr_array_unref(problems);
	e->registry = nw_fleet_new(e->cfg, 0);
	e->metrics = nw_plugin_metrics_new();
	e->fleet = nw_fleet_dialects_load(e->cfg, e->registry, e->metrics, &error);
	g_assert_no_error(error);
	e->pool = nw_upstream_new(&pool);
	e->next_handle = NW_HANDOFF_PROBE_HANDLE_BASE + 1;
	return TRUE;
}

static void
env_clear(struct probe_env *e)
{
	nw_upstream_free(e->pool);
	nw_fleet_dialects_free(e->fleet);
	nw_plugin_metrics_free(e->metrics);
	nw_fleet_free(e->registry);
	nw_config_free(e->cfg);
	serve_plugin_dir_free(e->plugin_dir);
	g_assert_cmpint(sim_stop(&e->sim, SIGTERM, 10000), ==, 0);
	sim_clear(&e->sim);
}

/* What a probe reported, kept past its callback. */
struct outcome {
	unsigned calls;
	struct nw_handoff_probe_result res;
	json_t *handoff;
};

static void
on_done(void *data, const struct nw_handoff_probe_result *res)
{
	struct outcome *o = data;

	o->calls++;
	o->res = *res;
	o->handoff = json_deep_copy(res->handoff);
	o->res.handoff = NULL;
}

static gboolean
on_guard(gpointer data)
{
	g_error("the probe did not end within its bounds");
	return G_SOURCE_REMOVE;
}

static struct nw_handoff_probe_options
options(struct probe_env *e, unsigned prefill, unsigned decode, double leg_timeout_s)
{
	return (struct nw_handoff_probe_options){
		.pool = e->pool,
		.prefill = &e->fleet->dialects[prefill],
		.decode = &e->fleet->dialects[decode],
		.model = json_string_value(json_object_get(e->sim.fleet, "model")),
		.handle = e->next_handle++,
		.max_tokens = 3,
		.leg_timeout_s = leg_timeout_s,
		.connect_timeout_s = 2.0,
	};
}

/* Run one probe to its end (the loop runs until done is called). */
static void
run_probe(const struct nw_handoff_probe_options *opts, struct outcome *o)
{
	guint guard = g_timeout_add_seconds(20, on_guard, NULL);
	struct nw_handoff_probe *p;

	memset(o, 0, sizeof *o);
	p = nw_handoff_probe_start(opts, on_done, o);
	g_assert_nonnull(p);
	/* Never from inside start. */
	g_assert_cmpuint(o->calls, ==, 0);
	while (o->calls == 0)
		g_main_context_iteration(NULL, TRUE);
	g_source_remove(guard);
	g_assert_cmpuint(o->calls, ==, 1);
}

static json_int_t
stat_of(const struct sim_proc *p, unsigned engine, const char *key)
{
	json_t *st = sim_engine_stats(p, engine);
	json_int_t v = json_integer_value(json_object_get(st, key));

	json_decref(st);
	return v;
}

static void
expect_failure(const struct outcome *o, nw_handoff_probe_stage stage, gboolean timed_out)
{
	if (o->res.ok || o->res.stage != stage || o->res.timed_out != timed_out)
		g_error("want a failure at %s (timed out: %d), got ok %d at %s (timed out: %d): %s",
		        nw_handoff_probe_stage_name(stage), timed_out, o->res.ok,
		        nw_handoff_probe_stage_name(o->res.stage), o->res.timed_out, o->res.error);
	g_assert_cmpstr(o->res.error, !=, "");
}

/* Spec 6 / issue 10: a verification is a complete prefill leg and a
 * complete decode leg with a real handoff; the timings narwhal-check
 * reports come with it. */
static void
test_good_pair(void)
{
	struct probe_env e;
	struct nw_handoff_probe_options opts;
	struct outcome o;

	g_test_summary("/control/issue10/probe-good-pair: a prefill on sim-0 hands its KV to a "
	               "streamed decode on sim-1, which pulls it; the probe passes with its "
	               "timings");
	if (!env_start(&e, "vv", 0, NULL))
		return;
	opts = options(&e, 0, 1, 5.0);
	run_probe(&opts, &o);
	if (!o.res.ok)
		g_error("probe failed at %s: %s", nw_handoff_probe_stage_name(o.res.stage),
		        o.res.error);
	g_assert_cmpint(o.res.stage, ==, NW_PROBE_STAGE_NONE);
	g_assert_cmpuint(o.res.tokens, ==, 3);
	g_assert_cmpfloat(o.res.prefill_s, >, 0.0);
	g_assert_cmpfloat(o.res.first_token_s, >, 0.0);
	g_assert_cmpfloat(o.res.handoff_s, >=, o.res.prefill_s + o.res.first_token_s);
	g_assert_cmpfloat(o.res.total_s, >=, o.res.handoff_s);
	g_assert_cmpfloat(o.res.total_s, <, 5.0);
	g_assert_null(o.handoff);
	/* A real handoff: sim-1 pulled the KV from sim-0, which holds none now. */
	g_assert_cmpint(stat_of(&e.sim, 0, "kv_pulls_served"), ==, 1);
	g_assert_cmpint(stat_of(&e.sim, 0, "leases"), ==, 0);
	/* The same engine on both sides works too (a one-engine fleet). */
	opts = options(&e, 1, 1, 5.0);
	run_probe(&opts, &o);
	g_assert_true(o.res.ok);
	g_assert_cmpint(stat_of(&e.sim, 1, "kv_pulls_served"), ==, 1);
	env_clear(&e);
}

/* A prefill engine that refuses connections fails the probe at its
 * prefill leg, at once (no timeout). */
static void
test_refused_prefill(void)
{
	struct probe_env e;
	struct nw_handoff_probe_options opts;
	struct outcome o;

	g_test_summary("/control/issue10/probe-refused-prefill: a refused connection fails the "
	               "probe at stage prefill");
	if (!env_start(&e, "vv", 0, NULL))
		return;
	g_assert_cmpint(sim_set_faults(&e.sim, 0, "{\"refuse_connections\": true}"), ==, 200);
	opts = options(&e, 0, 1, 5.0);
	run_probe(&opts, &o);
	expect_failure(&o, NW_PROBE_STAGE_PREFILL, FALSE);
	g_assert_cmpint(o.res.status, ==, 0);
	g_assert_cmpfloat(o.res.total_s, <, 5.0);
	env_clear(&e);
}

/* Spec 6: the decode leg's bound runs to its first token; an engine that
 * hangs before it fails the probe at stage decode, timed out. */
static void
test_decode_hangs(void)
{
	struct probe_env e;
	struct nw_handoff_probe_options opts;
	struct outcome o;

	g_test_summary("/control/issue10/probe-decode-hangs: a decode engine that sends no first "
	               "token within leg_timeout_s fails the probe at stage decode, timed out");
	if (!env_start(&e, "vv", 0, NULL))
		return;
	g_assert_cmpint(sim_set_faults(&e.sim, 1, "{\"hang_before_first_token\": true}"), ==, 200);
	opts = options(&e, 0, 1, 0.4);
	run_probe(&opts, &o);
	expect_failure(&o, NW_PROBE_STAGE_DECODE, TRUE);
	g_assert_cmpfloat(o.res.prefill_s, >, 0.0);
	g_assert_cmpfloat(o.res.total_s, >=, 0.4);
	g_assert_cmpfloat(o.res.total_s, <, 3.0);
	env_clear(&e);
}

/* An engine error answer fails the leg with its status and the dialect's
 * reading of the message. */
static void
test_decode_error_status(void)
{
	struct probe_env e;
	struct nw_handoff_probe_options opts;
	struct outcome o;

	g_test_summary("/control/issue10/probe-decode-error: a 503 from the decode engine fails "
	               "the probe at stage decode with the status");
	if (!env_start(&e, "vv", 0, NULL))
		return;
	g_assert_cmpint(sim_set_faults(&e.sim, 1, "{\"error_rate\": 1.0}"), ==, 200);
	opts = options(&e, 0, 1, 5.0);
	run_probe(&opts, &o);
	expect_failure(&o, NW_PROBE_STAGE_DECODE, FALSE);
	g_assert_cmpint(o.res.status, ==, 503);
	g_assert_nonnull(strstr(o.res.error, "503"));
	env_clear(&e);
}

/* A decode stream that dies after its first token fails at stage
 * stream: the handoff worked, the stream did not end. */
static void
test_stream_dies(void)
{
	struct probe_env e;
	struct nw_handoff_probe_options opts;
	struct outcome o;

	g_test_summary("/control/issue10/probe-stream-dies: a decode stream cut after its first "
	               "token fails the probe at stage stream, with the token counted");
	if (!env_start(&e, "vv", 0, NULL))
		return;
	g_assert_cmpint(sim_set_faults(&e.sim, 1, "{\"die_after_tokens\": 1}"), ==, 200);
	opts = options(&e, 0, 1, 5.0);
	run_probe(&opts, &o);
	expect_failure(&o, NW_PROBE_STAGE_STREAM, FALSE);
	g_assert_cmpuint(o.res.tokens, ==, 1);
	g_assert_cmpfloat(o.res.first_token_s, >, 0.0);
	env_clear(&e);
}

/* The lease check's first half: an abandoned prefill keeps its handoff
 * and sends no decode leg; the engine holds the KV under its lease. */
static void
test_abandon(void)
{
	struct probe_env e;
	struct nw_handoff_probe_options opts;
	struct outcome o;
	json_int_t decode_requests;

	g_test_summary("/control/issue10/probe-abandon: abandon stops after the prefill answer and "
	               "hands back the handoff; the prefill engine holds its KV under a lease");
	if (!env_start(&e, "vv", 0, NULL))
		return;
	decode_requests = stat_of(&e.sim, 1, "http_requests_total");
	opts = options(&e, 0, 1, 5.0);
	opts.abandon = true;
	run_probe(&opts, &o);
	g_assert_true(o.res.ok);
	g_assert_true(json_is_object(o.handoff));
	g_assert_nonnull(json_object_get(o.handoff, "remote_block_ids"));
	g_assert_cmpfloat(o.res.prefill_s, >, 0.0);
	g_assert_cmpfloat(o.res.first_token_s, ==, 0.0);
	g_assert_cmpint(stat_of(&e.sim, 0, "leases"), ==, 1);
	g_assert_cmpint(stat_of(&e.sim, 1, "http_requests_total"), ==, decode_requests);
	json_decref(o.handoff);
	env_clear(&e);
}

/* A sequential dialect that returns no handoff: the data plane would
 * decode without one, a verification fails at stage handoff. */
static void
test_missing_handoff(void)
{
	struct probe_env e;
	struct nw_handoff_probe_options opts;
	struct outcome o;

	g_test_summary("/control/issue10/probe-missing-handoff: a prefill answer without a handoff "
	               "fails the probe at stage handoff");
	if (!env_start(&e, "mm", NARWHAL_DIALECT_HANDOFF_SEQUENTIAL, NULL))
		return;
	opts = options(&e, 0, 1, 5.0);
	run_probe(&opts, &o);
	expect_failure(&o, NW_PROBE_STAGE_HANDOFF, FALSE);
	env_clear(&e);
}

/* HANDOFF_CONCURRENT: both legs at once; the probe is complete when both
 * are, and a failed prefill leg fails it even though the decode leg
 * streamed. */
static void
test_concurrent(void)
{
	struct probe_env e;
	struct nw_handoff_probe_options opts;
	struct outcome o;

	g_test_summary("/control/issue10/probe-concurrent: a concurrent pair sends both legs at "
	               "once and needs both to complete");
	if (!env_start(&e, "mm", NARWHAL_DIALECT_HANDOFF_CONCURRENT, NULL))
		return;
	opts = options(&e, 0, 1, 5.0);
	run_probe(&opts, &o);
	if (!o.res.ok)
		g_error("probe failed at %s: %s", nw_handoff_probe_stage_name(o.res.stage),
		        o.res.error);
	g_assert_cmpfloat(o.res.prefill_s, >, 0.0);
	g_assert_cmpfloat(o.res.first_token_s, >, 0.0);
	g_assert_cmpuint(o.res.tokens, ==, 3);
	/* Both legs went out together: the handoff lived about as long as the
	 * decode leg's wait for its first token, not prefill plus decode. */
	g_assert_cmpfloat(o.res.handoff_s, <, o.res.first_token_s + 0.05);
	g_assert_cmpint(stat_of(&e.sim, 0, "http_requests_total"), >=, 1);

	g_assert_cmpint(sim_set_faults(&e.sim, 0, "{\"error_rate\": 1.0, \"error_status\": 500}"),
	                ==, 200);
	opts = options(&e, 0, 1, 5.0);
	run_probe(&opts, &o);
	expect_failure(&o, NW_PROBE_STAGE_PREFILL, FALSE);
	g_assert_cmpint(o.res.status, ==, 500);
	/* Nothing to abandon without a sequential handoff. */
	opts = options(&e, 0, 1, 5.0);
	opts.abandon = true;
	run_probe(&opts, &o);
	expect_failure(&o, NW_PROBE_STAGE_BUILD, FALSE);
	env_clear(&e);
}

/* An aggregate-only engine (no handoff capability) is verified with one
 * aggregate leg. */
static void
test_aggregate_only(void)
{
	struct probe_env e;
	struct nw_handoff_probe_options opts;
	struct outcome o;
	json_int_t other;

	g_test_summary("/control/issue10/probe-aggregate-only: an engine that cannot hand off is "
	               "verified with one aggregate leg");
	if (!env_start(&e, "mm", 0, NULL))
		return;
	other = stat_of(&e.sim, 1, "http_requests_total");
	opts = options(&e, 0, 1, 5.0);
	run_probe(&opts, &o);
	g_assert_true(o.res.ok);
	g_assert_cmpfloat(o.res.prefill_s, ==, 0.0);
	g_assert_cmpfloat(o.res.handoff_s, ==, 0.0);
	g_assert_cmpfloat(o.res.first_token_s, >, 0.0);
	g_assert_cmpuint(o.res.tokens, ==, 3);
	g_assert_cmpint(stat_of(&e.sim, 1, "http_requests_total"), ==, other);
	/* A hung aggregate leg fails before its first token at stage prefill. */
	g_assert_cmpint(sim_set_faults(&e.sim, 0, "{\"hang_before_first_token\": true}"), ==, 200);
	opts = options(&e, 0, 1, 0.3);
	run_probe(&opts, &o);
	expect_failure(&o, NW_PROBE_STAGE_PREFILL, TRUE);
	env_clear(&e);
}

/* The token events of a probe, as on_tokens saw them. */
struct token_times {
	unsigned events;
	uint32_t tokens;
	int64_t first_us, last_us;
	bool ordered;
};

static void
on_token_event(void *data, uint32_t tokens, int64_t at_us)
{
	struct token_times *t = data;

	if (t->events++ == 0)
		t->first_us = at_us;
	t->ordered = t->ordered && at_us >= t->last_us && at_us <= g_get_monotonic_time();
	t->last_us = at_us;
	t->tokens += tokens;
}

/* Issue 12 (narwhal-profile's decode timing): the probe runs one
 * aggregate leg on an engine that can hand off when asked, reports each
 * token event with the time it was read, and bounds the gap between
 * tokens when asked. */
static void
test_token_times(void)
{
	struct probe_env e;
	struct nw_handoff_probe_options opts;
	struct token_times t = { .ordered = true };
	struct outcome o;
	json_int_t other;

	g_test_summary("/control/issue12/probe-token-times: an aggregate leg on a handing-off "
	               "engine, each token event timed, and the gap between tokens bounded");
	if (!env_start(&e, "vv", 0, NULL))
		return;
	other = stat_of(&e.sim, 1, "http_requests_total");
	opts = options(&e, 0, 1, 5.0);
	opts.aggregate = true;
	opts.max_tokens = 5;
	opts.on_tokens = on_token_event;
	opts.tokens_data = &t;
	run_probe(&opts, &o);
	g_assert_true(o.res.ok);
	g_assert_cmpfloat(o.res.prefill_s, ==, 0.0);
	g_assert_cmpfloat(o.res.handoff_s, ==, 0.0);
	g_assert_cmpuint(o.res.tokens, ==, 5);
	/* The simulator sends a token a step. */
	g_assert_cmpuint(t.events, ==, 5);
	g_assert_cmpuint(t.tokens, ==, 5);
	g_assert_true(t.ordered);
	g_assert_cmpint(t.last_us, >, t.first_us);
	/* No handoff: the other engine saw nothing, no KV was pulled. */
	g_assert_cmpint(stat_of(&e.sim, 1, "http_requests_total"), ==, other);
	g_assert_cmpint(stat_of(&e.sim, 0, "kv_pulls_served"), ==, 0);
	/* Steps 300 times slower (0.3 s of wall time each at time scale 20):
	 * the first token comes within leg_timeout_s, the second not within
	 * gap_timeout_s of it. */
	g_assert_cmpint(sim_set_faults(&e.sim, 0, "{\"latency_multiplier\": 300}"), ==, 200);
	opts = options(&e, 0, 1, 5.0);
	opts.aggregate = true;
	opts.gap_timeout_s = 0.1;
	run_probe(&opts, &o);
	expect_failure(&o, NW_PROBE_STAGE_STREAM, TRUE);
	g_assert_nonnull(strstr(o.res.error, "of the last token"));
	g_assert_cmpuint(o.res.tokens, ==, 1);
	env_clear(&e);
}

static void
never_called(void *data, const struct nw_handoff_probe_result *res)
{
	g_error("a cancelled probe called back (%s)", res->error);
}

/* Cancelling stops the calls and calls nothing back, at any point: right
 * after the start, and while the decode leg waits for its first token.
 * Leaks show under ASan. */
static void
test_cancel(void)
{
	struct probe_env e;
	struct nw_handoff_probe_options opts;
	struct nw_handoff_probe *p;
	struct outcome o;
	gint64 deadline;

	g_test_summary("/control/issue10/probe-cancel: a cancelled probe calls nothing back and "
	               "leaves nothing behind");
	if (!env_start(&e, "vv", 0, NULL))
		return;
	opts = options(&e, 0, 1, 5.0);
	p = nw_handoff_probe_start(&opts, never_called, NULL);
	nw_handoff_probe_cancel(p);
	/* A failure that is final inside start is cancelled before delivery. */
	opts = options(&e, 0, 0, 5.0);
	opts.max_tokens = 1;
	opts.abandon = true;
	e.fleet->dialects[0].caps = 0;
	p = nw_handoff_probe_start(&opts, never_called, NULL);
	e.fleet->dialects[0].caps = NARWHAL_DIALECT_HANDOFF_SEQUENTIAL;
	nw_handoff_probe_cancel(p);

	/* Cancelled while the decode leg hangs before its first token. */
	g_assert_cmpint(sim_set_faults(&e.sim, 1, "{\"hang_before_first_token\": true}"), ==, 200);
	opts = options(&e, 0, 1, 10.0);
	p = nw_handoff_probe_start(&opts, never_called, NULL);
	deadline = g_get_monotonic_time() + 10 * G_USEC_PER_SEC;
	while (stat_of(&e.sim, 1, "active_requests") < 1 && g_get_monotonic_time() < deadline)
		g_main_context_iteration(NULL, FALSE);
	g_assert_cmpint(stat_of(&e.sim, 1, "active_requests"), ==, 1);
	nw_handoff_probe_cancel(p);
	/* The engine sees the connection close. */
	deadline = g_get_monotonic_time() + 10 * G_USEC_PER_SEC;
	while (stat_of(&e.sim, 1, "active_requests") > 0 && g_get_monotonic_time() < deadline)
		g_main_context_iteration(NULL, FALSE);
	g_assert_cmpint(stat_of(&e.sim, 1, "active_requests"), ==, 0);
	g_assert_cmpuint(nw_upstream_active(e.pool), ==, 0);

	/* The loop goes on and a later probe works; nothing of the
	 * cancelled ones calls back meanwhile. */
	g_assert_cmpint(sim_set_faults(&e.sim, 1, "{\"hang_before_first_token\": false}"), ==, 200);
	opts = options(&e, 0, 1, 5.0);
	run_probe(&opts, &o);
	g_assert_true(o.res.ok);
	env_clear(&e);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/control/issue10/probe-good-pair", test_good_pair);
	g_test_add_func("/control/issue10/probe-refused-prefill", test_refused_prefill);
	g_test_add_func("/control/issue10/probe-decode-hangs", test_decode_hangs);
	g_test_add_func("/control/issue10/probe-decode-error", test_decode_error_status);
	g_test_add_func("/control/issue10/probe-stream-dies", test_stream_dies);
	g_test_add_func("/control/issue10/probe-abandon", test_abandon);
	g_test_add_func("/control/issue10/probe-missing-handoff", test_missing_handoff);
	g_test_add_func("/control/issue10/probe-concurrent", test_concurrent);
	g_test_add_func("/control/issue10/probe-aggregate-only", test_aggregate_only);
	g_test_add_func("/control/issue10/probe-cancel", test_cancel);
	g_test_add_func("/control/issue12/probe-token-times", test_token_times);
	return g_test_run();
}
