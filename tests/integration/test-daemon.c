/*
 * The daemon skeleton, as a real process on a loopback ephemeral port:
 * the health route, errors for unknown routes and methods, the exit status
 * and message for bad configurations, and clean shutdown on SIGTERM/SIGINT.
 */
#include "build-config.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

#include <curl/curl.h>

#include "integration/harness.h"

/* A one-engine fleet: both floors at 1 serve aggregate (spec 7.2). Nothing
 * listens at the engine's URL: the monitor finds it dead. */
static const char *good_config =
	"{\n"
	"  \"server\": {\"host\": \"127.0.0.1\", \"port\": 0},\n"
	"  \"log\": {\"level\": \"info\", \"format\": \"json\"},\n"
	"  \"serving\": {\"admission\": \"open\"},\n"
	"  \"controller\": {\"policy\": \"static\"},\n"
	"  \"fleet\": {\"engines\": [\n"
	"    {\"id\": \"e0\", \"url\": \"http://127.0.0.1:9\", \"role\": \"prefill\"}\n"
	"  ]}\n"
	"}\n";

/* Issue 10 (degraded state): "Health is no longer ok with a whole pool
 * dead". The only engine refuses connections, so the monitor's probes
 * eject it, and /narwhal/health answers 503 unavailable, saying which
 * engine is out and why. */
static void
test_health(void)
{
	struct harness_proc p = { 0 };
	g_autofree char *file = harness_write_config(&p, good_config);
	json_t *doc = NULL, *engine;
	gint64 deadline;
	int status = 0;

	g_assert_true(harness_start_daemon(&p, file));
	deadline = g_get_monotonic_time() + 20 * G_USEC_PER_SEC;
	while (g_get_monotonic_time() < deadline) {
		g_autofree char *body = NULL;

		status = harness_http(p.port, "GET", "/narwhal/health", NULL, &body);
		json_decref(doc);
		doc = json_loads(body, 0, NULL);
		g_assert_nonnull(doc);
		if (status == 503)
			break;
		g_assert_cmpint(status, ==, 200);
		g_usleep(50000);
	}
	g_assert_cmpint(status, ==, 503);
	g_assert_cmpstr(json_string_value(json_object_get(doc, "status")), ==, "unavailable");
	g_assert_cmpstr(json_string_value(json_object_get(json_array_get(json_object_get(doc,
	                "reasons"), 0), "code")), ==, "no_live_engine");
	engine = json_array_get(json_object_get(doc, "engines"), 0);
	g_assert_cmpstr(json_string_value(json_object_get(engine, "id")), ==, "e0");
	g_assert_cmpstr(json_string_value(json_object_get(engine, "state")), ==, "ejected");
	g_assert_cmpstr(json_string_value(json_object_get(engine, "reason")), ==, "probe_failures");
	g_assert_false(json_is_true(json_object_get(engine, "available")));
	/* The engine's own error text names its address: not on this route. */
	g_assert_null(json_object_get(engine, "last_error"));
	g_assert_cmpstr(json_string_value(json_object_get(json_object_get(json_object_get(doc,
	                "plugins"), "admission"), "name")), ==, "open");
	g_assert_cmpstr(json_string_value(json_object_get(json_object_get(json_object_get(doc,
	                "plugins"), "controller"), "name")), ==, "static");
	json_decref(doc);
	g_assert_cmpint(harness_stop(&p, SIGTERM, 10000), ==, 0);
	harness_clear(&p);
}

/* Issue 11 (GET /metrics): the Prometheus text format: every family has
 * its HELP and TYPE before its samples, every sample line is
 * name{labels} value, and the engine and build families are there. */
static void
test_metrics(void)
{
	struct harness_proc p = { 0 };
	g_autofree char *file = harness_write_config(&p, good_config);
	g_autofree char *body = NULL;
	g_autoptr(GRegex) sample = g_regex_new("^[a-zA-Z_:][a-zA-Z0-9_:]*(\\{[^}]*\\})? "
	                                       "([-+]?[0-9.eE+-]+|NaN|[+-]Inf)$", 0, 0, NULL);
	g_autoptr(GHashTable) typed = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
	g_auto(GStrv) lines = NULL;

	g_assert_true(harness_start_daemon(&p, file));
	g_assert_cmpint(harness_http(p.port, "GET", "/metrics", NULL, &body), ==, 200);
	g_assert_nonnull(strstr(body, "narwhal_build_info{version=\"" PACKAGE_VERSION "\"} 1\n"));
	g_assert_nonnull(strstr(body, "narwhal_engine_available{engine=\"e0\"} "));
	g_assert_nonnull(strstr(body, "narwhal_requests_completions_total 0\n"));
	g_assert_nonnull(strstr(body, "# TYPE narwhal_engine_legs_placed_total counter\n"));
	/* The request-path families are there before any request. */
	g_assert_nonnull(strstr(body, "# TYPE narwhal_time_to_first_token_seconds histogram\n"));
	g_assert_nonnull(strstr(body, "narwhal_time_to_first_token_seconds_bucket{le=\"+Inf\"} 0\n"));
	g_assert_nonnull(strstr(body, "narwhal_engine_calls_total{engine=\"e0\",leg=\"prefill\"} 0\n"));
	g_assert_nonnull(strstr(body, "narwhal_engine_hold{engine=\"e0\",hold=\"drain\"} 0\n"));
	g_assert_nonnull(strstr(body, "narwhal_refusals_total{reason=\"queue_full\"} 0\n"));
	lines = g_strsplit(body, "\n", -1);
	for (char **l = lines; *l != NULL; l++) {
		char name[256];

		if (**l == '\0')
			continue;
		if (g_str_has_prefix(*l, "# TYPE ")) {
			g_assert_cmpint(sscanf(*l, "# TYPE %255s", name), ==, 1);
			g_assert_true(g_hash_table_add(typed, g_strdup(name))); /* once each */
			continue;
		}
		if (g_str_has_prefix(*l, "# HELP "))
			continue;
		if (!g_regex_match(sample, *l, 0, NULL))
			g_error("not a sample line: %s", *l);
		g_assert_cmpint(sscanf(*l, "%255[a-zA-Z0-9_:]", name), ==, 1);
		/* A histogram's samples carry a suffix on the family's name. */
		if (!g_hash_table_contains(typed, name)) {
			static const char *const suffixes[] = { "_bucket", "_sum", "_count" };

			for (size_t k = 0; k < G_N_ELEMENTS(suffixes); k++) {
				if (g_str_has_suffix(name, suffixes[k]))
					name[strlen(name) - strlen(suffixes[k])] = '\0';
			}
		}
		if (!g_hash_table_contains(typed, name))
			g_error("sample before its TYPE: %s", *l);
	}
	g_assert_cmpint(harness_http(p.port, "POST", "/metrics", "{}", NULL), ==, 405);
	g_assert_cmpint(harness_stop(&p, SIGTERM, 10000), ==, 0);
	harness_clear(&p);
}

static void
assert_error_envelope(const char *body, const char *code)
{
	json_t *doc = json_loads(body, 0, NULL);
	json_t *err;

	g_assert_nonnull(doc);
	err = json_object_get(doc, "error");
	g_assert_true(json_is_object(err));
	g_assert_true(json_is_string(json_object_get(err, "message")));
	g_assert_true(json_is_string(json_object_get(err, "type")));
	g_assert_cmpstr(json_string_value(json_object_get(err, "code")), ==, code);
	json_decref(doc);
}

static void
test_unknown_route_and_method(void)
{
	struct harness_proc p = { 0 };
	g_autofree char *file = harness_write_config(&p, good_config);
	char *body = NULL;

	g_assert_true(harness_start_daemon(&p, file));
	g_assert_cmpint(harness_http(p.port, "GET", "/nowhere", NULL, &body), ==, 404);
	assert_error_envelope(body, "not_found");
	g_free(body);
	g_assert_cmpint(harness_http(p.port, "POST", "/narwhal/health", "{}", &body), ==, 405);
	assert_error_envelope(body, "method_not_allowed");
	g_free(body);
	/* Still answering after the errors (503 once the dead engine is out). */
	g_assert_cmpint(harness_http(p.port, "GET", "/narwhal/health", NULL, NULL), >=, 200);
	g_assert_cmpint(harness_stop(&p, SIGTERM, 10000), ==, 0);
	harness_clear(&p);
}

/* Issue 11 (graceful shutdown): SIGTERM and SIGINT both drain; with
 * nothing in flight the drain ends at once (drained, 0 finished) and the
 * process exits 0 long before server.drain_timeout_s (30 s here). */
static void
test_shutdown_signal(gconstpointer data)
{
	int signo = GPOINTER_TO_INT(data);
	struct harness_proc p = { 0 };
	g_autofree char *file = harness_write_config(&p, good_config);
	gint64 t0;

	g_assert_true(harness_start_daemon(&p, file));
	t0 = g_get_monotonic_time();
	g_assert_cmpint(harness_stop(&p, signo, 10000), ==, 0);
	g_assert_cmpint(g_get_monotonic_time() - t0, <, 5 * G_USEC_PER_SEC);
	g_assert_nonnull(strstr(p.log->str, "\"event\":\"draining\",\"in_flight\":\"0\","
	                                    "\"drain_timeout_s\":\"30\""));
	g_assert_nonnull(strstr(p.log->str, "\"event\":\"drained\",\"finished\":\"0\""));
	g_assert_nonnull(strstr(p.log->str, "\"event\":\"stopped\",\"finished\":\"0\","
	                                    "\"ended\":\"0\""));
	g_assert_null(strstr(p.log->str, "\"event\":\"drain_cut\""));
	harness_clear(&p);
}

static void
test_bad_config_exit(void)
{
	struct harness_proc p = { 0 };
	g_autofree char *file = harness_write_config(&p,
		"{\"serving\": {\"admission\": \"open\", \"max_attempts\": 7},"
		" \"controller\": {\"policy\": \"static\"},"
		" \"fleet\": {\"engines\": [{\"id\": \"e0\", \"url\": \"http://127.0.0.1:9\"}]}}");
	g_autofree char *out = NULL, *err = NULL;
	const char *argv[] = { harness_narwhal_bin(), "--config", file, NULL };
	g_autofree char *expect = g_strdup_printf("%s: serving.max_attempts: ", file);

	g_assert_cmpint(harness_run(argv, &out, &err), ==, 1);
	g_assert_nonnull(strstr(err, expect));
	harness_clear(&p);
}

static void
test_missing_plugin_exit(void)
{
	struct harness_proc p = { 0 };
	g_autofree char *file = harness_write_config(&p,
		"{\"serving\": {\"admission\": \"open\"},"
		" \"controller\": {\"policy\": \"static\"},"
		" \"plugins\": {\"admission\": {\"path\": \"/nonexistent/admission-x.so\"}},"
		" \"fleet\": {\"engines\": [{\"id\": \"e0\", \"url\": \"http://127.0.0.1:9\"}]}}");
	g_autofree char *out = NULL, *err = NULL;
	const char *argv[] = { harness_narwhal_bin(), "--config", file, NULL };

	g_assert_cmpint(harness_run(argv, &out, &err), ==, 1);
	g_assert_nonnull(strstr(err, "/nonexistent/admission-x.so"));
	harness_clear(&p);
}

static void
test_port_in_use(void)
{
	struct harness_proc a = { 0 }, b = { 0 };
	g_autofree char *file_a = harness_write_config(&a, good_config);
	g_autofree char *text = NULL, *file_b = NULL, *out = NULL, *err = NULL;

	g_assert_true(harness_start_daemon(&a, file_a));
	text = g_strdup_printf("{\"server\": {\"port\": %u}, \"serving\": {\"admission\": \"open\"},"
	                       " \"controller\": {\"policy\": \"static\"},"
	                       " \"fleet\": {\"engines\": [{\"id\": \"e0\", \"url\": \"http://127.0.0.1:9\"}]}}",
	                       a.port);
	file_b = harness_write_config(&b, text);
	const char *argv[] = { harness_narwhal_bin(), "--config", file_b, NULL };
	g_assert_cmpint(harness_run(argv, &out, &err), ==, 1);
	g_assert_nonnull(strstr(err, "cannot listen"));
	g_assert_cmpint(harness_stop(&a, SIGTERM, 10000), ==, 0);
	harness_clear(&a);
	harness_clear(&b);
}

static void
test_usage(void)
{
	const char *argv[] = { harness_narwhal_bin(), NULL };
	g_autofree char *out = NULL, *err = NULL;

	g_assert_cmpint(harness_run(argv, &out, &err), ==, 2);
	g_assert_nonnull(strstr(err, "--config"));
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	g_test_add_func("/daemon/health", test_health);
	g_test_add_func("/daemon/issue-11/metrics", test_metrics);
	g_test_add_func("/daemon/unknown-route-and-method", test_unknown_route_and_method);
	g_test_add_data_func("/daemon/shutdown/sigterm", GINT_TO_POINTER(SIGTERM), test_shutdown_signal);
	g_test_add_data_func("/daemon/shutdown/sigint", GINT_TO_POINTER(SIGINT), test_shutdown_signal);
	g_test_add_func("/daemon/bad-config-exit", test_bad_config_exit);
	g_test_add_func("/daemon/missing-plugin-exit", test_missing_plugin_exit);
	g_test_add_func("/daemon/port-in-use", test_port_in_use);
	g_test_add_func("/daemon/usage", test_usage);
	int status = g_test_run();
	curl_global_cleanup();
	return status;
}
