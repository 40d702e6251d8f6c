/*
 * The spec's defaults run (issue 12): a configuration that names only the
 * fleet starts with predictive admission and slo-cost placement once the
 * fleet is profiled; without profiles predictive stops the start with a
 * message that says how to make them, and --check-config says the same
 * as the start; the default controller, "reactive", gets its sections
 * (issue 13). serving.admission_margin reaches the admission plugin
 * (docs/configuration.md, "plugins").
 */
#include "build-config.h"

#include <signal.h>
#include <string.h>

#include <glib/gstdio.h>

#include "integration/harness.h"

/* The fleet and the profile store; the rest defaults, but for a loopback
 * listener, a JSON log and two more sections (%s %s: the controller and
 * the serving section, or nothing). */
#define CONFIG \
	"{\n" \
	"  \"server\": {\"host\": \"127.0.0.1\", \"port\": 0},\n" \
	"  \"log\": {\"level\": \"debug\", \"format\": \"json\"},\n" \
	"%s%s" \
	"  \"profiles\": {\"path\": \"%s\"},\n" \
	"  \"fleet\": {\"engines\": [\n" \
	"    {\"id\": \"p0\", \"url\": \"http://127.0.0.1:9\"},\n" \
	"    {\"id\": \"d0\", \"url\": \"http://127.0.0.1:10\"}\n" \
	"  ]}\n" \
	"}\n"
#define STATIC "  \"controller\": {\"policy\": \"static\"},\n"

#define ENGINE(id, url) \
	"{\"engine\": \"" id "\", \"url\": \"" url "\", \"dialect\": \"vllm\"," \
	" \"model\": \"m\", \"hardware\": null, \"kv_capacity_tokens\": 0," \
	" \"measured_at\": \"2026-12-01T20:00:00Z\"," \
	" \"prefill\": {\"a_s\": 0.01, \"b_s\": 0.0001, \"c_s\": 0, \"min_tokens\": 1," \
	"  \"max_tokens\": 4096, \"samples\": 10, \"rel_rms_error\": 0.02}," \
	" \"decode\": {\"d0_s\": 0.01, \"d1_s\": 0, \"d2_s\": 0.0001, \"min_active\": 1," \
	"  \"max_active\": 32, \"min_kv_tokens\": 0, \"max_kv_tokens\": 100000, \"samples\": 20," \
	"  \"rel_rms_error\": 0.03}," \
	" \"handoff\": {\"setup_s\": 0, \"per_token_s\": 0, \"max_tokens\": 0, \"samples\": 0}}"

#define STORE \
	"{\"version\": 1, \"created_at\": \"2026-12-01T20:00:00Z\", \"tool\": \"test\"," \
	" \"engines\": [" ENGINE("p0", "http://127.0.0.1:9") "," \
	ENGINE("d0", "http://127.0.0.1:10") "]}"

struct env {
	struct harness_proc p;
	char *store;
	char *config;
};

/* CONFIG with these sections; store_text NULL: no store. */
static void
env_init(struct env *e, const char *controller, const char *serving, const char *store_text)
{
	g_autofree char *text = NULL;

	g_free(harness_write_config(&e->p, "{}"));
	e->store = g_build_filename(e->p.dir, "profiles.json", NULL);
	if (store_text != NULL)
		g_assert_true(g_file_set_contents(e->store, store_text, -1, NULL));
	text = g_strdup_printf(CONFIG, controller, serving, e->store);
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

/* Run narwhal with one option on the file; its exit status and stderr. */
static int
run(const char *option, const char *file, char **err)
{
	g_autofree char *out = NULL;
	const char *argv[] = { harness_narwhal_bin(), option, file, NULL };

	return harness_run(argv, &out, err);
}

static const char *
plugin_name(json_t *state, const char *kind)
{
	return json_string_value(json_object_get(
		json_object_get(json_object_get(state, "plugins"), kind), "name"));
}

/* Issue 12: with a profile store, the file that names the fleet (and the
 * static controller) starts with predictive admission and slo-cost
 * placement, and the admission plugin gets serving.admission_margin. */
static void
test_profiled_defaults_start(void)
{
	struct env e = { 0 };
	g_autofree char *body = NULL;
	json_t *state;

	env_init(&e, STATIC, "  \"serving\": {\"admission_margin\": 0.25},\n", STORE);
	g_assert_true(harness_start_daemon(&e.p, e.config));
	g_assert_cmpint(harness_http(e.p.port, "GET", "/narwhal/state", NULL, &body), ==, 200);
	state = json_loads(body, 0, NULL);
	g_assert_nonnull(state);
	g_assert_cmpstr(plugin_name(state, "admission"), ==, "predictive");
	g_assert_cmpstr(plugin_name(state, "placement"), ==, "slo-cost");
	json_decref(state);
	/* The plugin's own start line says what it was given. */
	g_assert_true(harness_wait_log(&e.p, "admission_margin=0.25 without_profiles=refuse",
	                               10000));
	g_assert_cmpint(harness_stop(&e.p, SIGTERM, 10000), ==, 0);
	env_clear(&e);
}

/* Issue 12: no profile store: predictive stops the start, naming the
 * unprofiled engines and how to profile them; --check-config says the
 * same, after the file and the field. */
static void
test_unprofiled_stops_start(void)
{
	struct env e = { 0 };
	g_autofree char *err = NULL, *check = NULL, *prefix = NULL;
	static const char *const says[] = {
		"p0, d0 have no measured profile",
		"run `narwhal-profile --config FILE`",
		"docs/profiles.md",
		"plugins.admission.config.without_profiles to \"open\"",
	};

	env_init(&e, STATIC, "", NULL);
	g_assert_cmpint(run("--config", e.config, &err), ==, 1);
	g_assert_cmpint(run("--check-config", e.config, &check), ==, 1);
	prefix = g_strdup_printf("%s: plugins.admission: ", e.config);
	g_assert_nonnull(strstr(check, prefix));
	for (guint i = 0; i < G_N_ELEMENTS(says); i++) {
		g_assert_nonnull(strstr(err, says[i]));
		g_assert_nonnull(strstr(check, says[i]));
	}
	env_clear(&e);
}

/* Issue 13: the default controller is "reactive"; it gets
 * controller.reactive and controller.thresholds with
 * plugins.controller.config merged over them, a key set there winning
 * (docs/plugins.md, "Its settings"); the plugin's start line says what it
 * was given. */
static void
test_reactive_by_default(void)
{
	struct env e = { 0 };
	g_autofree char *body = NULL, *err = NULL, *check = NULL;
	json_t *state;

	env_init(&e, "  \"controller\": {\"reactive\": {\"step_s\": 2.5, \"utilization\": 0.7},"
	             " \"thresholds\": {\"sustained_intervals\": 5}},\n",
	         "  \"plugins\": {\"controller\": {\"config\": {\"reactive\": {\"step_s\": 1}}}},\n",
	         STORE);
	g_assert_cmpint(run("--check-config", e.config, &check), ==, 0);
	g_assert_true(harness_start_daemon(&e.p, e.config));
	g_assert_cmpint(harness_http(e.p.port, "GET", "/narwhal/state", NULL, &body), ==, 200);
	state = json_loads(body, 0, NULL);
	g_assert_nonnull(state);
	g_assert_cmpstr(plugin_name(state, "controller"), ==, "reactive");
	json_decref(state);
	g_assert_true(harness_wait_log(&e.p, "reactive controller: step_s=1 confirmations=5 "
	                                     "movement_margin=0.05 utilization=0.7", 10000));
	g_assert_cmpint(harness_stop(&e.p, SIGTERM, 10000), ==, 0);
	env_clear(&e);

	/* The plugin's refusal of a key is the configuration error. */
	env_init(&e, "", "  \"plugins\": {\"controller\": {\"config\": {\"reactive\": "
	                 "{\"step\": 1}}}},\n", STORE);
	g_assert_cmpint(run("--check-config", e.config, &err), ==, 1);
	g_test_message("%s", err);
	g_assert_nonnull(strstr(err, "plugins.controller: "));
	g_assert_nonnull(strstr(err, "unknown key \"reactive.step\""));
	env_clear(&e);
}

/* docs/configuration.md: the controller plugin is named by
 * controller.policy (plugins.controller.name is refused), so a name no
 * plugin answers to is that field's error, at start and in
 * --check-config, with the controllers there are. */
static void
test_unknown_policy(void)
{
	struct env e = { 0 };
	g_autofree char *err = NULL, *check = NULL, *prefix = NULL;

	env_init(&e, "  \"controller\": {\"policy\": \"nosuch\"},\n", "", STORE);
	g_assert_cmpint(run("--config", e.config, &err), ==, 1);
	g_assert_cmpint(run("--check-config", e.config, &check), ==, 1);
	g_test_message("%s", check);
	prefix = g_strdup_printf("%s: controller.policy: ", e.config);
	g_assert_nonnull(strstr(err, prefix));
	g_assert_nonnull(strstr(check, prefix));
	g_assert_nonnull(strstr(check, "expected controller plugin \"nosuch\""));
	g_assert_nonnull(strstr(check, "reactive, static"));
	g_assert_null(strstr(check, ": plugins.controller: "));
	env_clear(&e);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);

	g_test_add_func("/defaults/profiled-defaults-start", test_profiled_defaults_start);
	g_test_add_func("/defaults/unprofiled-stops-start", test_unprofiled_stops_start);
	g_test_add_func("/defaults/reactive-by-default", test_reactive_by_default);
	g_test_add_func("/defaults/unknown-policy", test_unknown_policy);
	return g_test_run();
}
