/*
 * A fleet that mixes dialects (issue 14, "a fleet that mixes dialects
 * works"): vLLM prefill and decode engines next to an engine spoken to by
 * the llamacpp dialect, which has no handoff and so is aggregate-only.
 * The llama.cpp engine is a narwhal-sim engine speaking llama.cpp's wire
 * format (--dialect llamacpp), so the monitor reads its own /metrics page.
 * Sizing is by characters (engine.tokenize false).
 */
#include "build-config.h"

#include <string.h>

#include <glib.h>

#include "integration/test-serve-common.h"

#define TOKEN_ENV "NARWHAL_TEST_ADMIN_TOKEN"
#define TOKEN "mixed-fleet-admin-token"
#define WAIT_MS 8000

/* sim-0 speaks llamacpp, sim-1 and sim-2 vllm; roles[i] ('p', 'd') is the
 * role written for engine i. */
static gboolean
start_roles(struct serve_env *e, const char *roles)
{
	const char *const args[] = { "--time-scale", "20", NULL };
	const char *cfg = "{\"engine\": {\"tokenize\": false},"
	                  " \"admin\": {\"port\": 0, \"token_env\": \"" TOKEN_ENV "\"},"
	                  " \"controller\": {\"monitor_interval_s\": 0.1},"
	                  " \"recovery\": {\"verify_backoff_s\": 0.2,"
	                  " \"verify_backoff_max_s\": 0.5}}";

	if (!serve_start_dialects(e, "lvv", roles, args, cfg))
		return FALSE;
	if (!serve_wait_all_available(e, WAIT_MS)) {
		g_autofree char *log = serve_log(e);

		g_error("the engines did not all become available:\n%s", log);
	}
	return TRUE;
}

/* sim-0 (llamacpp) labelled decode beside a vLLM prefill and decode pair. */
static gboolean
start(struct serve_env *e)
{
	return start_roles(e, "dpd");
}

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

/* POST /admin/engines/<id>/<action>: its status, and its error code in
 * *code (NULL when none; may be NULL). */
static long
engine_action(struct serve_env *e, const char *id, const char *action, const char *body,
              char **code)
{
	g_autofree char *path = g_strdup_printf("/admin/engines/%s/%s", id, action);
	const char *const headers[] = { "Content-Type: application/json",
	                                "Authorization: Bearer " TOKEN, NULL };
	struct sim_reply r = { 0 };
	long status;

	sim_http(admin_port(e), "POST", path, body, headers, 5000, &r);
	status = r.status;
	if (code != NULL)
		*code = serve_error_code(r.body->str);
	sim_reply_clear(&r);
	return status;
}

/* A field of one engine in /narwhal/state (owned). */
static char *
engine_field(struct serve_env *e, const char *id, const char *key)
{
	struct sim_reply r = { 0 };
	json_t *doc, *engine;
	size_t i;
	char *value = NULL;

	sim_http(e->port, "GET", "/narwhal/state", NULL, NULL, 5000, &r);
	doc = sim_json(r.body->str);
	sim_reply_clear(&r);
	json_array_foreach(json_object_get(doc, "engines"), i, engine) {
		if (g_strcmp0(json_string_value(json_object_get(engine, "id")), id) == 0) {
			const json_t *v = json_object_get(engine, key);

			value = json_is_string(v) ? g_strdup(json_string_value(v))
			                          : json_dumps(v, JSON_ENCODE_ANY);
		}
	}
	json_decref(doc);
	g_assert_nonnull(value);
	return value;
}

static json_int_t
engine_stat(struct serve_env *e, unsigned engine, const char *key)
{
	return sim_engine_stat(&e->sim, engine, key);
}

/* No dialect call failed and no monitor stage failed: the llama.cpp
 * engine's /metrics page is read like the others. */
static void
assert_no_plugin_errors(struct serve_env *e)
{
	g_autofree char *log = serve_log(e);
	g_auto(GStrv) lines = g_strsplit(log, "\n", -1);

	for (guint i = 0; lines[i] != NULL; i++) {
		if (strstr(lines[i], "\"event\":\"plugin_call_failed\"") != NULL ||
		    strstr(lines[i], "\"event\":\"monitor_failure\"") != NULL)
			g_error("a dialect call failed: %s", lines[i]);
	}
}

static void
post_ok(struct serve_env *e, unsigned n)
{
	g_autofree char *body = serve_completion_body(e, 4, FALSE);
	g_autofree char *stream = serve_completion_body(e, 4, TRUE);

	for (unsigned i = 0; i < n; i++) {
		struct sim_reply r = { 0 };

		serve_post(e, "/v1/completions", i % 2 ? stream : body, NULL, 10000, &r);
		if (r.status != 200)
			g_error("want 200, got %ld: %s", r.status, r.body->str);
		sim_reply_clear(&r);
	}
}

/* Issue 14: the llamacpp engine serves whole requests whatever its written
 * role, and is never given a prefill or decode leg (it holds no lease and
 * serves no KV pull); with it drained, the same fleet's vLLM engines pair.
 * No plugin call fails along the way. */
static void
test_aggregate_beside_pairs(void)
{
	struct serve_env e;
	json_int_t work0;

	if (!start(&e))
		return;
	/* What each engine runs, as the policies see it (ABI 2.3 flags). */
	{
		g_autofree char *llama = engine_field(&e, "sim-0", "runs");
		g_autofree char *vllm = engine_field(&e, "sim-1", "runs");

		g_assert_cmpstr(llama, ==, "whole");
		g_assert_cmpstr(vllm, ==, "both");
	}
	work0 = engine_stat(&e, 0, "work_requests_total");
	/* sim-0 ties with sim-1 on load, and the lower instance ID wins. */
	post_ok(&e, 4);
	g_assert_cmpint(serve_counter(&e, "aggregate_started"), ==, 4);
	g_assert_cmpint(serve_counter(&e, "prefill_started"), ==, 0);
	g_assert_cmpint(engine_stat(&e, 0, "work_requests_total") - work0, ==, 4);

	g_assert_cmpint(engine_action(&e, "sim-0", "drain", NULL, NULL), ==, 200);
	post_ok(&e, 4);
	g_assert_cmpint(serve_counter(&e, "prefill_started"), ==, 4);
	g_assert_cmpint(serve_counter(&e, "decode_started"), ==, 4);
	g_assert_cmpint(serve_counter(&e, "aggregate_started"), ==, 4);
	g_assert_cmpint(engine_stat(&e, 0, "work_requests_total") - work0, ==, 4);
	/* The pairs handed off: sim-1 served the decode engine's KV pulls. */
	g_assert_cmpint(engine_stat(&e, 1, "kv_pulls_served"), >, 0);

	g_assert_cmpint(engine_stat(&e, 0, "leases"), ==, 0);
	g_assert_cmpint(engine_stat(&e, 0, "kv_pulls_served"), ==, 0);
	/* The monitor read the llama.cpp engine's own page. */
	{
		json_t *health = serve_health(&e);
		json_t *m = json_object_get(json_array_get(json_object_get(health, "engines"), 0),
		                            "metrics");

		g_assert_true(json_is_integer(json_object_get(m, "running")));
		g_assert_true(json_is_integer(json_object_get(m, "waiting")));
		json_decref(health);
	}
	assert_no_plugin_errors(&e);
	serve_clear(&e);
}

/* Issue 14 with the admin API (issue 11): an engine that cannot hand off
 * is never moved between roles. The role route and a pin at a role are
 * refused as engine_not_movable, a pin at its own role is accepted, and
 * after an ejection the breaker verifies it with a whole request and
 * readmits it at the role it had. */
static void
test_never_moved(void)
{
	struct serve_env e;
	g_autofree char *code = NULL, *pin_code = NULL, *role = NULL;

	if (!start(&e))
		return;
	g_assert_cmpint(engine_action(&e, "sim-0", "role", "{\"role\": \"prefill\"}", &code), ==,
	                409);
	g_assert_cmpstr(code, ==, "engine_not_movable");
	g_assert_cmpint(engine_action(&e, "sim-0", "pin", "{\"role\": \"prefill\"}", &pin_code),
	                ==, 409);
	g_assert_cmpstr(pin_code, ==, "engine_not_movable");
	g_assert_cmpint(engine_action(&e, "sim-0", "pin", "{\"role\": \"decode\"}", NULL), ==, 200);
	g_assert_cmpint(engine_action(&e, "sim-0", "unpin", NULL, NULL), ==, 200);
	role = engine_field(&e, "sim-0", "role");
	g_assert_cmpstr(role, ==, "decode");
	g_clear_pointer(&role, g_free);

	g_assert_cmpint(engine_action(&e, "sim-0", "eject", NULL, NULL), ==, 200);
	g_assert_cmpint(engine_action(&e, "sim-0", "readmit", NULL, NULL), ==, 200);
	{
		gint64 deadline = g_get_monotonic_time() + WAIT_MS * 1000;
		gboolean live = FALSE;

		while (!live && g_get_monotonic_time() < deadline) {
			g_autofree char *available = engine_field(&e, "sim-0", "available");

			live = g_strcmp0(available, "true") == 0;
			if (!live)
				g_usleep(50000);
		}
		if (!live) {
			g_autofree char *log = serve_log(&e);

			g_error("sim-0 was not readmitted:\n%s", log);
		}
	}
	role = engine_field(&e, "sim-0", "role");
	g_assert_cmpstr(role, ==, "decode");
	post_ok(&e, 2);
	g_assert_cmpint(engine_stat(&e, 0, "leases"), ==, 0);
	assert_no_plugin_errors(&e);
	serve_clear(&e);
}

/* Issue 14 with spec 7.2: the floors count engines that can pair. Written
 * roles (as file-order assignment gives them when the llama.cpp engine
 * comes first) that label the aggregate-only engine prefill and both vLLM
 * engines decode leave no pairing prefill engine: floor repair moves a
 * vLLM engine to prefill on the first pass, and the vLLM engines pair. */
static void
test_floors_count_pairing_engines(void)
{
	struct serve_env e;
	gint64 deadline;
	gboolean repaired = FALSE;

	if (!start_roles(&e, "pdd"))
		return;
	deadline = g_get_monotonic_time() + WAIT_MS * 1000;
	while (!repaired && g_get_monotonic_time() < deadline) {
		g_autofree char *r1 = engine_field(&e, "sim-1", "role");
		g_autofree char *r2 = engine_field(&e, "sim-2", "role");

		repaired = g_strcmp0(r1, "prefill") == 0 || g_strcmp0(r2, "prefill") == 0;
		if (!repaired)
			g_usleep(50000);
	}
	if (!repaired) {
		g_autofree char *log = serve_log(&e);

		g_error("no vLLM engine was moved to prefill:\n%s", log);
	}
	g_assert_true(serve_wait_log(&e, "\"caller\":\"floor_repair\"", 5000));
	{
		g_autofree char *r0 = engine_field(&e, "sim-0", "role");

		g_assert_cmpstr(r0, ==, "prefill");
	}
	g_assert_cmpint(engine_action(&e, "sim-0", "drain", NULL, NULL), ==, 200);
	post_ok(&e, 2);
	g_assert_cmpint(serve_counter(&e, "prefill_started"), ==, 2);
	g_assert_cmpint(serve_counter(&e, "decode_started"), ==, 2);
	assert_no_plugin_errors(&e);
	serve_clear(&e);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	/* The admin token reaches narwhal through the environment only. */
	g_setenv(TOKEN_ENV, TOKEN, TRUE);
	g_test_add_func("/serve/mixed-fleet/issue-14/aggregate-beside-pairs",
	                test_aggregate_beside_pairs);
	g_test_add_func("/serve/mixed-fleet/issue-14/never-moved", test_never_moved);
	g_test_add_func("/serve/mixed-fleet/issue-14/floors-count-pairing-engines",
	                test_floors_count_pairing_engines);
	return g_test_run();
}
