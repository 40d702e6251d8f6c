/*
 * The daemon reads the profile store (issue 12, "The estimators in core",
 * first increment; docs/profiles.md, "How the router uses the store"): an
 * engine with a profile in profiles.path is profiled (the fleet view's
 * NARWHAL_ENGINE_PROFILED, shown as engines[].profiled in
 * /narwhal/state), a reload re-reads the store, an invalid store stops
 * the start (and refuses a reload) with the loader's message, and a
 * missing one leaves every engine unprofiled with a hint in the log.
 */
#include "build-config.h"

#include <signal.h>
#include <string.h>

#include <glib/gstdio.h>

#include "integration/harness.h"

#define CONFIG \
	"{\n" \
	"  \"server\": {\"host\": \"127.0.0.1\", \"port\": 0},\n" \
	"  \"log\": {\"level\": \"info\", \"format\": \"json\"},\n" \
	"  \"serving\": {\"admission\": \"open\"},\n" \
	"  \"controller\": {\"policy\": \"static\"},\n" \
	"  \"profiles\": {\"path\": \"%s\"},\n" \
	"  \"fleet\": {\"engines\": [\n" \
	"    {\"id\": \"e0\", \"url\": \"http://127.0.0.1:9\", \"role\": \"prefill\"},\n" \
	"    {\"id\": \"e1\", \"url\": \"http://127.0.0.1:10\", \"role\": \"decode\"}\n" \
	"  ]}\n" \
	"}\n"

/* One engine's profile as narwhal-profile writes it (docs/profiles.md);
 * samples is the prefill fit's sample count. */
#define ENGINE(id, url, samples) \
	"{\"engine\": \"" id "\", \"url\": \"" url "\", \"dialect\": \"vllm\"," \
	" \"model\": \"m\", \"hardware\": null, \"kv_capacity_tokens\": 0," \
	" \"measured_at\": \"2026-12-01T20:00:00Z\"," \
	" \"prefill\": {\"a_s\": 0.01, \"b_s\": 0.0001, \"c_s\": 0, \"min_tokens\": 1," \
	"  \"max_tokens\": 4096, \"samples\": " samples ", \"rel_rms_error\": 0.02}," \
	" \"decode\": {\"d0_s\": 0.01, \"d1_s\": 0, \"d2_s\": 0.0001, \"min_active\": 1," \
	"  \"max_active\": 32, \"min_kv_tokens\": 0, \"max_kv_tokens\": 100000, \"samples\": 20," \
	"  \"rel_rms_error\": 0.03}," \
	" \"handoff\": {\"setup_s\": 0, \"per_token_s\": 0, \"max_tokens\": 0, \"samples\": 0}}"

#define STORE(engines) \
	"{\"version\": 1, \"created_at\": \"2026-12-01T20:00:00Z\", \"tool\": \"test\"," \
	" \"engines\": [" engines "]}"

struct env {
	struct harness_proc p;
	char *store;  /* profiles.path */
	char *config;
};

static void
env_init(struct env *e, const char *store_text)
{
	g_autofree char *text = NULL;

	/* the directory first, then the store beside the configuration */
	g_free(harness_write_config(&e->p, "{}"));
	e->store = g_build_filename(e->p.dir, "profiles.json", NULL);
	if (store_text != NULL)
		g_assert_true(g_file_set_contents(e->store, store_text, -1, NULL));
	text = g_strdup_printf(CONFIG, e->store);
	e->config = harness_write_config(&e->p, text);
}

static void
env_clear(struct env *e)
{
	g_unlink(e->store);
	g_free(e->store);
	g_free(e->config);
	harness_clear(&e->p);
}

/* engines[].profiled of /narwhal/state, by id: 1 true, 0 false, -1 absent. */
static int
profiled(struct env *e, const char *id)
{
	g_autofree char *body = NULL;
	json_t *doc, *engine;
	size_t i;
	int out = -1;

	g_assert_cmpint(harness_http(e->p.port, "GET", "/narwhal/state", NULL, &body), ==, 200);
	doc = json_loads(body, 0, NULL);
	g_assert_nonnull(doc);
	json_array_foreach(json_object_get(doc, "engines"), i, engine) {
		json_t *v = json_object_get(engine, "profiled");

		if (g_strcmp0(json_string_value(json_object_get(engine, "id")), id) == 0 &&
		    json_is_boolean(v))
			out = json_is_true(v);
	}
	json_decref(doc);
	return out;
}

/* A store with e0 only: e0 profiled, e1 not; a reload after the store
 * gains e1 (measured at another address) profiles it too, with
 * profile_url_mismatch logged; a reload onto an invalid store is refused
 * with the loader's message and changes nothing. */
static void
test_profiled_and_reload(void)
{
	struct env e = { 0 };
	g_autofree char *expect = NULL;

	env_init(&e, STORE(ENGINE("e0", "http://127.0.0.1:9", "10") ","
	                   ENGINE("retired", "http://127.0.0.1:12", "10")));
	g_assert_true(harness_start_daemon(&e.p, e.config));
	g_assert_cmpint(profiled(&e, "e0"), ==, 1);
	g_assert_cmpint(profiled(&e, "e1"), ==, 0);
	g_assert_null(strstr(e.p.log->str, "profiles_missing"));

	g_assert_true(g_file_set_contents(e.store,
		STORE(ENGINE("e0", "http://127.0.0.1:9", "10") ","
		      ENGINE("e1", "http://127.0.0.1:11", "10")), -1, NULL));
	g_subprocess_send_signal(e.p.proc, SIGHUP);
	g_assert_true(harness_wait_log(&e.p, "\"event\":\"reload_applied\"", 20000));
	g_assert_nonnull(strstr(e.p.log->str, "\"event\":\"profile_url_mismatch\""));
	g_assert_cmpint(profiled(&e, "e0"), ==, 1);
	g_assert_cmpint(profiled(&e, "e1"), ==, 1);

	g_assert_true(g_file_set_contents(e.store,
		STORE(ENGINE("e0", "http://127.0.0.1:9", "0")), -1, NULL));
	g_subprocess_send_signal(e.p.proc, SIGHUP);
	g_assert_true(harness_wait_log(&e.p, "\"event\":\"reload_failed\"", 20000));
	expect = g_strdup_printf("%s: engines[0].prefill.samples: wrong value", e.store);
	g_assert_nonnull(strstr(e.p.log->str, expect));
	g_assert_cmpint(profiled(&e, "e1"), ==, 1);

	g_assert_cmpint(harness_stop(&e.p, SIGTERM, 10000), ==, 0);
	env_clear(&e);
}

/* No store at profiles.path: the daemon starts, no engine is profiled,
 * and the log says once where the store was looked for and how to make
 * one. */
static void
test_missing_store(void)
{
	struct env e = { 0 };
	const char *line, *again;

	env_init(&e, NULL);
	g_assert_true(harness_start_daemon(&e.p, e.config));
	g_assert_cmpint(profiled(&e, "e0"), ==, 0);
	g_assert_cmpint(profiled(&e, "e1"), ==, 0);
	line = strstr(e.p.log->str, "\"event\":\"profiles_missing\"");
	g_assert_nonnull(line);
	g_assert_nonnull(strstr(line, e.store));
	g_assert_nonnull(strstr(line, "docs/profiles.md"));
	again = strstr(line + 1, "\"event\":\"profiles_missing\"");
	g_assert_null(again);
	g_assert_cmpint(harness_stop(&e.p, SIGTERM, 10000), ==, 0);
	env_clear(&e);
}

/* An invalid store stops the start: exit 1, the loader's message on
 * stderr (the store's file, the json path, the problem). */
static void
test_invalid_store_exit(void)
{
	struct env e = { 0 };
	g_autofree char *out = NULL, *err = NULL, *expect = NULL;
	const char *argv[4];

	env_init(&e, "{\"version\": 2, \"engines\": []}");
	argv[0] = harness_narwhal_bin();
	argv[1] = "--config";
	argv[2] = e.config;
	argv[3] = NULL;
	g_assert_cmpint(harness_run(argv, &out, &err), ==, 1);
	expect = g_strdup_printf("%s: version: version 2 is not read by this narwhal", e.store);
	g_assert_nonnull(strstr(err, expect));
	g_assert_nonnull(strstr(err, "run narwhal-profile again"));
	env_clear(&e);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/profiles/profiled-and-reload", test_profiled_and_reload);
	g_test_add_func("/profiles/missing-store", test_missing_store);
	g_test_add_func("/profiles/invalid-store-exit", test_invalid_store_exit);
	return g_test_run();
}
