/*
 * GET /narwhal/state and the admin API end to end (issue 11; docs/state.md,
 * docs/admin.md): narwhal in front of real narwhal-sim engines on loopback
 * ephemeral ports, with the admin listener on an ephemeral port of its own
 * and its token in the environment. Each test names the issue item it
 * checks.
 *
 * The monitor runs every 0.1 s, so an operator's action shows in a few
 * passes. Engines sim-0 and sim-1 are prefill, sim-2 and sim-3 decode
 * unless a test says otherwise.
 */
#include "build-config.h"

#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <glib/gstdio.h>

#include "integration/test-serve-common.h"

#define TOKEN_ENV "NARWHAL_TEST_ADMIN_TOKEN"
#define TOKEN "s3cret-admin-token"
#define WAIT_MS 8000

/* The admin listener on a free port, and a fast monitor. */
static const char admin_config[] =
	"{\"admin\": {\"port\": 0, \"token_env\": \"" TOKEN_ENV "\"},"
	" \"controller\": {\"monitor_interval_s\": 0.1, \"flip_history\": 50},"
	" \"recovery\": {\"verify_backoff_s\": 0.2, \"verify_backoff_max_s\": 0.5}}";

/* admin_config with extra (a JSON object text, or NULL) merged over it. */
static char *
config_with(const char *extra)
{
	return serve_json_merged_text(admin_config, extra);
}

G_GNUC_NORETURN static void
fail(struct serve_env *e, const char *what)
{
	g_autofree char *log = serve_log(e);

	g_printerr("narwhal log:\n%s\n", log);
	g_error("%s", what);
}

static gboolean
start(struct serve_env *e, const char *time_scale, const char *extra)
{
	const char *const args[] = { "--engines", "4", "--time-scale", time_scale, NULL };
	g_autofree char *cfg = config_with(extra);

	if (!serve_start(e, args, "ppdd", cfg))
		return FALSE;
	if (!serve_wait_all_available(e, WAIT_MS))
		fail(e, "the engines did not all become available");
	return TRUE;
}

/* The admin port from the admin_listening line. */
static guint16
admin_port(struct serve_env *e)
{
	g_autofree char *log = serve_log(e);
	const char *at = strstr(log, "\"event\":\"admin_listening\"");

	if (at == NULL || (at = strstr(at, "\"port\":\"")) == NULL)
		fail(e, "no admin_listening line");
	return (guint16)atoi(at + strlen("\"port\":\""));
}

/* One admin call with a token (NULL: no Authorization header). */
static void
admin_call_as(struct serve_env *e, const char *token, const char *method, const char *path,
              const char *body, struct sim_reply *r)
{
	g_autofree char *auth = token ? g_strdup_printf("Authorization: Bearer %s", token) : NULL;
	const char *const headers[] = { "Content-Type: application/json", auth, NULL };

	sim_http(admin_port(e), method, path, body, headers, 5000, r);
}

static void
admin_call(struct serve_env *e, const char *method, const char *path, const char *body,
           struct sim_reply *r)
{
	admin_call_as(e, TOKEN, method, path, body, r);
}

/* POST /admin/engines/<id>/<action> and its status. */
static long
engine_action(struct serve_env *e, const char *id, const char *action, const char *body,
              char **code)
{
	g_autofree char *path = g_strdup_printf("/admin/engines/%s/%s", id, action);
	struct sim_reply r;
	long status;

	admin_call(e, "POST", path, body, &r);
	status = r.status;
	if (code != NULL)
		*code = serve_error_code(r.body->str);
	sim_reply_clear(&r);
	return status;
}

/* A JSON document from the clients' listener (owned). */
static json_t *
client_get(struct serve_env *e, const char *path, char **text)
{
	struct sim_reply r;
	json_t *doc;

	sim_http(e->port, "GET", path, NULL, NULL, 5000, &r);
	doc = sim_json(r.body->str);
	if (text != NULL)
		*text = g_strdup(r.body->str);
	sim_reply_clear(&r);
	return doc;
}

static json_t *
state(struct serve_env *e)
{
	return client_get(e, "/narwhal/state", NULL);
}

/* One engine's entry of a state document (borrowed). */
static json_t *
engine_of(json_t *doc, const char *id)
{
	json_t *engine;
	size_t i;

	json_array_foreach(json_object_get(doc, "engines"), i, engine) {
		if (g_strcmp0(json_string_value(json_object_get(engine, "id")), id) == 0)
			return engine;
	}
	g_error("no engine %s in the state", id);
}

static const char *
str_at(json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));

	return s != NULL ? s : "(null)";
}

/* An engine's string field in /narwhal/state now (owned). */
static char *
engine_str(struct serve_env *e, const char *id, const char *key)
{
	json_t *doc = state(e);
	char *v = g_strdup(str_at(engine_of(doc, id), key));

	json_decref(doc);
	return v;
}

static gboolean
engine_flag(struct serve_env *e, const char *id, const char *key)
{
	json_t *doc = state(e);
	gboolean v = json_is_true(json_object_get(engine_of(doc, id), key));

	json_decref(doc);
	return v;
}

/* Poll until an engine's boolean field is want (bounded). */
static gboolean
wait_engine_flag(struct serve_env *e, const char *id, const char *key, gboolean want)
{
	gint64 deadline = g_get_monotonic_time() + (gint64)WAIT_MS * 1000;

	do {
		if (engine_flag(e, id, key) == want)
			return TRUE;
		g_usleep(10000);
	} while (g_get_monotonic_time() < deadline);
	return FALSE;
}

static void
assert_has(struct serve_env *e, json_t *o, const char *const *keys)
{
	for (const char *const *k = keys; *k != NULL; k++) {
		if (json_object_get(o, *k) == NULL) {
			g_autofree char *text = json_dumps(o, JSON_COMPACT);
			g_autofree char *what = g_strdup_printf("no \"%s\" in %s", *k, text);

			fail(e, what);
		}
	}
}

/* --- the state document ---------------------------------------------------- */

/* issue 11, /narwhal/state: one document of everything the router knows,
 * field by field as docs/state.md lists them; the admin listener's copy
 * adds the engines' addresses and nothing else changes its digest. */
static void
test_state_document(void)
{
	struct serve_env e;
	static const char *const top[] = {
		"version", "uptime_s", "model", "status", "reasons", "engines", "roles", "monitor",
		"admission", "retry_budget", "flip_history", "operator_history", "config",
		"plugins", NULL,
	};
	static const char *const engine_keys[] = {
		"id", "dialect", "role", "pinned", "pinned_by", "available", "holds", "state",
		"reason", "resident_prefill", "resident_decode", "resident_kv_tokens", "loads",
		"legs_placed", "legs_failed", "drain", NULL,
	};
	static const char *const admission_keys[] = {
		"plugin", "mode", "admitted_now", "queued_now", "limit", "queue_capacity", "stopped",
		NULL,
	};
	json_t *doc, *admin, *engine, *cfg;
	struct sim_reply r;
	const char *digest;
	size_t i;

	if (!start(&e, "20", NULL))
		return;
	doc = state(&e);
	assert_has(&e, doc, top);
	json_array_foreach(json_object_get(doc, "engines"), i, engine) {
		assert_has(&e, engine, engine_keys);
		g_assert_cmpstr(str_at(engine, "dialect"), ==, "vllm");
		g_assert_null(json_object_get(engine, "url"));
		g_assert_true(json_is_false(json_object_get(json_object_get(engine, "drain"),
		                                            "draining")));
	}
	assert_has(&e, json_object_get(doc, "admission"), admission_keys);
	g_assert_cmpstr(str_at(json_object_get(doc, "admission"), "plugin"), ==, "open");
	g_assert_cmpint(json_integer_value(json_object_get(json_object_get(doc, "retry_budget"),
	                                                   "budget")), ==, 10);
	g_assert_cmpint(json_integer_value(json_object_get(json_object_get(doc, "flip_history"),
	                                                   "capacity")), ==, 50);
	g_assert_true(json_is_true(json_object_get(json_object_get(doc, "operator_history"),
	                                           "enabled")));
	cfg = json_object_get(doc, "config");
	digest = str_at(cfg, "digest");
	g_assert_true(g_str_has_prefix(digest, "sha256:"));
	g_assert_cmpuint(strlen(digest), ==, strlen("sha256:") + 64);
	g_assert_true(json_is_string(json_object_get(cfg, "loaded_at")));
	g_assert_cmpstr(str_at(json_object_get(json_object_get(doc, "plugins"), "controller"),
	                       "name"), ==, "static");
	g_assert_nonnull(json_object_get(json_object_get(json_object_get(doc, "plugins"),
	                                                 "dialects"), "vllm"));
	g_assert_cmpstr(str_at(engine_of(doc, "sim-0"), "role"), ==, "prefill");
	g_assert_cmpstr(str_at(engine_of(doc, "sim-3"), "role"), ==, "decode");

	/* The operators' copy: addresses, the same digest. */
	admin_call(&e, "GET", "/admin/state", NULL, &r);
	g_assert_cmpint(r.status, ==, 200);
	admin = sim_json(r.body->str);
	sim_reply_clear(&r);
	g_assert_true(g_str_has_prefix(str_at(engine_of(admin, "sim-0"), "url"), "http://127.0.0.1:"));
	g_assert_cmpstr(str_at(json_object_get(admin, "config"), "digest"), ==, digest);
	json_decref(admin);
	json_decref(doc);
	serve_clear(&e);
}

/* A TCP port on loopback that nothing listens on. */
static guint16
closed_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof a;
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	g_assert_cmpint(bind(fd, (struct sockaddr *)&a, sizeof a), ==, 0);
	g_assert_cmpint(getsockname(fd, (struct sockaddr *)&a, &len), ==, 0);
	close(fd);
	return ntohs(a.sin_port);
}

/* issue 11, "/narwhal/health no longer shows plugin file paths to
 * unauthenticated callers": with every plugin configured by path and an
 * engine that refuses connections (its error names its address), neither
 * /narwhal/health nor /narwhal/state shows a plugin file, an engine
 * address or an engine's error text; /admin/state shows them. */
static void
test_no_paths_for_clients(void)
{
	struct serve_env e;
	const char *dir = g_getenv("NARWHAL_PLUGIN_DIR");
	guint16 dead = closed_port();
	g_autofree char *dead_url = g_strdup_printf("http://127.0.0.1:%u", dead);
	g_autofree char *extra = NULL;
	g_autofree char *health_text = NULL, *state_text = NULL;
	json_t *engines, *health, *doc, *admin;
	struct sim_reply r;

	if (!start(&e, "20", NULL))
		return;
	/* Restart narwhal with a fifth, dead decode engine and the plugins by
	 * path. */
	serve_stop_daemon(&e, SIGTERM, 10000);
	engines = json_object_get(e.sim.fleet, "engines");
	json_array_append_new(engines, json_pack("{s:s, s:s, s:s}", "id", "dead", "url", dead_url,
	                                         "role", "decode"));
	extra = g_strdup_printf("{\"plugins\": {\"admission\": {\"path\": \"%s/admission-open.so\"},"
	                        " \"placement\": {\"path\": \"%s/placement-least-loaded.so\"},"
	                        " \"controller\": {\"path\": \"%s/controller-static.so\"}}}",
	                        dir, dir, dir);
	{
		g_autofree char *cfg = config_with(extra);

		if (!serve_start_daemon(&e, cfg, NULL))
			fail(&e, "narwhal did not start with plugins by path");
	}
	/* The dead engine is out, with an error that names its address. */
	if (!wait_engine_flag(&e, "dead", "available", FALSE))
		fail(&e, "the dead engine stayed available");
	admin_call(&e, "GET", "/admin/state", NULL, &r);
	g_assert_cmpint(r.status, ==, 200);
	admin = sim_json(r.body->str);
	g_assert_nonnull(strstr(r.body->str, dead_url + strlen("http://")));
	g_assert_nonnull(strstr(r.body->str, "admission-open.so"));
	g_assert_true(json_is_string(json_object_get(engine_of(admin, "dead"), "last_error")));
	sim_reply_clear(&r);
	json_decref(admin);

	health = client_get(&e, "/narwhal/health", &health_text);
	doc = client_get(&e, "/narwhal/state", &state_text);
	for (int k = 0; k < 2; k++) {
		const char *text = k == 0 ? health_text : state_text;

		g_assert_null(strstr(text, dir));
		g_assert_null(strstr(text, ".so\""));
		g_assert_null(strstr(text, "127.0.0.1"));
		for (unsigned i = 0; i <= e.sim.n_engines; i++) {
			g_autofree char *port = g_strdup_printf(":%u", i < e.sim.n_engines
			                                                   ? e.sim.ports[i] : dead);

			g_assert_null(strstr(text, port));
		}
	}
	g_assert_null(json_object_get(engine_of(doc, "dead"), "last_error"));
	g_assert_null(json_object_get(engine_of(health, "dead"), "last_error"));
	/* Left out, as docs/state.md says: not even a null path. */
	{
		json_t *plugins = json_object_get(doc, "plugins");
		static const char *const kinds[] = { "admission", "placement", "controller" };

		for (size_t k = 0; k < G_N_ELEMENTS(kinds); k++) {
			json_t *p = json_object_get(plugins, kinds[k]);

			g_assert_true(json_is_object(p));
			g_assert_null(json_object_get(p, "path"));
		}
	}
	json_decref(health);
	json_decref(doc);
	serve_clear(&e);
}

/* --- the token ------------------------------------------------------------- */

/* issue 11, admin API "with and without the token (401)": no token and a
 * wrong one get 401 with WWW-Authenticate: Bearer and the error envelope,
 * and are recorded; the right one works. */
static void
test_token(void)
{
	struct serve_env e;
	struct sim_reply r;
	g_autofree char *challenge = NULL;
	json_t *doc, *entries;

	if (!start(&e, "20", NULL))
		return;
	admin_call_as(&e, NULL, "GET", "/admin/state", NULL, &r);
	serve_assert_error(&r, 401, "invalid_admin_token");
	challenge = sim_reply_header(&r, "WWW-Authenticate");
	g_assert_cmpstr(challenge, ==, "Bearer");
	sim_reply_clear(&r);

	admin_call_as(&e, "wrong-token", "POST", "/admin/engines/sim-0/drain", NULL, &r);
	serve_assert_error(&r, 401, "invalid_admin_token");
	sim_reply_clear(&r);
	admin_call_as(&e, TOKEN "x", "GET", "/admin/state", NULL, &r);
	serve_assert_error(&r, 401, "invalid_admin_token");
	sim_reply_clear(&r);
	g_assert_true(engine_flag(&e, "sim-0", "available"));

	admin_call(&e, "GET", "/admin/state", NULL, &r);
	g_assert_cmpint(r.status, ==, 200);
	sim_reply_clear(&r);
	/* HEAD is a read too (docs/admin.md, "The record"). */
	admin_call(&e, "HEAD", "/admin/state", NULL, &r);
	g_assert_cmpint(r.status, ==, 200);
	sim_reply_clear(&r);

	admin_call(&e, "POST", "/admin/engines/sim-0/undrain", NULL, &r);
	g_assert_cmpint(r.status, ==, 200);
	sim_reply_clear(&r);

	/* Every call is logged; every call but an answered read (GET or
	 * HEAD) or one without the right token is recorded; those are counted apart, so a
	 * caller without the token cannot push the actions out of the
	 * history. The clients' copy has no caller addresses. */
	g_assert_true(serve_wait_log(&e, "\"path\":\"/admin/state\",\"status\":\"200\"", 1000));
	g_assert_true(serve_wait_log(&e, "\"path\":\"/admin/engines/sim-0/undrain\"", 1000));
	g_assert_true(serve_wait_log(&e, "\"status\":\"401\",\"result\":\"invalid_admin_token\"",
	                             1000));
	doc = state(&e);
	entries = json_object_get(json_object_get(doc, "operator_history"), "entries");
	g_assert_cmpuint(json_array_size(entries), ==, 1);
	g_assert_cmpstr(str_at(json_array_get(entries, 0), "result"), ==, "ok");
	g_assert_cmpstr(str_at(json_array_get(entries, 0), "path"), ==,
	                "/admin/engines/sim-0/undrain");
	g_assert_null(json_object_get(json_array_get(entries, 0), "peer"));
	{
		json_t *u = json_object_get(json_object_get(doc, "operator_history"), "unauthorized");

		g_assert_cmpint(json_integer_value(json_object_get(u, "count")), ==, 3);
		g_assert_nonnull(json_string_value(json_object_get(u, "last_at")));
		g_assert_null(json_object_get(u, "last_peer"));
	}
	json_decref(doc);
	serve_clear(&e);
}

/* Run narwhal to completion with a config (text) and the environment
 * variable TOKEN_ENV set to token (NULL: unset); its exit status, stderr
 * in *err. */
static int
run_narwhal(const char *flag, const char *config_text, const char *token, char **err)
{
	g_autofree char *dir = g_dir_make_tmp("narwhal-admin-XXXXXX", NULL);
	g_autofree char *file = g_build_filename(dir, "narwhal.json", NULL);
	g_autoptr(GSubprocessLauncher) l =
		g_subprocess_launcher_new(G_SUBPROCESS_FLAGS_STDOUT_SILENCE |
		                          G_SUBPROCESS_FLAGS_STDERR_PIPE);
	g_autoptr(GSubprocess) p = NULL;
	GError *error = NULL;
	int status;

	g_assert_true(g_file_set_contents(file, config_text, -1, NULL));
	if (token != NULL)
		g_subprocess_launcher_setenv(l, TOKEN_ENV, token, TRUE);
	else
		g_subprocess_launcher_unsetenv(l, TOKEN_ENV);
	p = g_subprocess_launcher_spawn(l, &error, g_getenv("NARWHAL_BIN"), flag, file, NULL);
	g_assert_no_error(error);
	g_assert_true(g_subprocess_communicate_utf8(p, NULL, NULL, NULL, err, &error));
	g_assert_no_error(error);
	status = g_subprocess_get_if_exited(p) ? g_subprocess_get_exit_status(p) : -1;
	g_unlink(file);
	g_rmdir(dir);
	return status;
}

/* A fleet of one engine nothing serves (narwhal fails before it matters). */
#define ONE_ENGINE "\"fleet\": {\"model\": \"m\", \"engines\": [{\"id\": \"a\", " \
	"\"url\": \"http://127.0.0.1:9\"}]}, \"controller\": {\"policy\": \"static\"}, " \
	"\"serving\": {\"admission\": \"open\"}, \"server\": {\"port\": 0}"

/* issue 11, admin API "token read from an environment variable (never
 * from the file)": a variable unset or empty is a start error that names
 * it; the file has no field for the token itself. */
static void
test_token_from_env_only(void)
{
	g_autofree char *err_unset = NULL, *err_empty = NULL, *err_field = NULL;
	g_autofree char *err_check = NULL, *err_checked = NULL;
	const char *cfg = "{" ONE_ENGINE ", \"admin\": {\"port\": 0, \"token_env\": \"" TOKEN_ENV
	                  "\"}}";

	g_assert_cmpint(run_narwhal("--config", cfg, NULL, &err_unset), !=, 0);
	g_assert_nonnull(strstr(err_unset, "admin.token_env: the environment variable "
	                                   TOKEN_ENV " is unset"));
	/* The start failed before it listened: no "stopped" line. */
	g_assert_nonnull(strstr(err_unset, "startup_failed"));
	g_assert_null(strstr(err_unset, "stopped"));
	/* The file is valid, but --check-config warns that a start here
	 * would fail; with the variable set it says nothing. */
	g_assert_cmpint(run_narwhal("--check-config", cfg, NULL, &err_check), ==, 0);
	g_assert_nonnull(strstr(err_check, "warning: "));
	g_assert_nonnull(strstr(err_check, "admin.token_env: the environment variable "
	                                   TOKEN_ENV " is unset here"));
	g_assert_cmpint(run_narwhal("--check-config", cfg, "sesame", &err_checked), ==, 0);
	g_assert_null(strstr(err_checked, "warning"));
	g_assert_cmpint(run_narwhal("--config", cfg, "", &err_empty), !=, 0);
	g_assert_nonnull(strstr(err_empty, TOKEN_ENV " is empty"));
	g_assert_cmpint(run_narwhal("--check-config",
	                            "{" ONE_ENGINE ", \"admin\": {\"token\": \"abc\"}}", NULL,
	                            &err_field), !=, 0);
	g_assert_nonnull(strstr(err_field, "admin.token"));
}

/* issue 11, admin API "from a non-loopback bind only when configured":
 * the configuration check refuses admin.host 0.0.0.0 and says to set
 * admin.allow_remote; with it the file is valid. */
static void
test_remote_bind(void)
{
	g_autofree char *refused = NULL, *allowed = NULL;

	g_assert_cmpint(run_narwhal("--check-config",
	                            "{" ONE_ENGINE ", \"admin\": {\"host\": \"0.0.0.0\"}}", NULL,
	                            &refused), !=, 0);
	g_assert_nonnull(strstr(refused, "admin.host: \"0.0.0.0\" is not a loopback address"));
	g_assert_nonnull(strstr(refused, "admin.allow_remote"));
	g_assert_cmpint(run_narwhal("--check-config",
	                            "{" ONE_ENGINE ", \"admin\": {\"host\": \"0.0.0.0\", "
	                            "\"allow_remote\": true}}", NULL, &allowed), ==, 0);
}

/* issue 11, admin API: no admin.token_env, no admin listener, said once. */
static void
test_no_token_no_listener(void)
{
	struct serve_env e;
	g_autofree char *log = NULL;

	if (!start(&e, "20", "{\"admin\": {\"token_env\": null}}"))
		return;
	log = serve_log(&e);
	g_assert_nonnull(strstr(log, "\"event\":\"admin_disabled\""));
	g_assert_null(strstr(log, "\"event\":\"admin_listening\""));
	serve_clear(&e);
}

/* issue 11, admin API "every call is logged and recorded": a caller, with
 * the token or without, may send any bytes in the path. The call is still
 * logged and recorded (without the token: counted), as valid UTF-8 (log lines and the state are JSON) and cut to
 * a bounded length, so a caller without the token cannot make the log or
 * the clients' /narwhal/state grow by the size of its request line. */
static void
test_hostile_paths(void)
{
	struct serve_env e;
	struct sim_reply r;
	g_autofree char *many = g_strnfill(8000, 'a'), *long_path = NULL, *log = NULL;
	g_auto(GStrv) lines = NULL;
	json_t *doc, *history, *entry;
	size_t i;

	if (!start(&e, "20", NULL))
		return;
	admin_call_as(&e, NULL, "GET", "/admin/%FF%FE", NULL, &r);
	serve_assert_error(&r, 401, "invalid_admin_token");
	sim_reply_clear(&r);
	admin_call(&e, "POST", "/admin/engines/%C3%28/drain", NULL, &r);
	serve_assert_error(&r, 404, "engine_not_found");
	/* The operator is told which ids there are. */
	g_assert_nonnull(strstr(r.body->str, "\\\"sim-0\\\", \\\"sim-1\\\""));
	sim_reply_clear(&r);
	long_path = g_strconcat("/admin/", many, NULL);
	admin_call_as(&e, "wrong", "GET", long_path, NULL, &r);
	serve_assert_error(&r, 401, "invalid_admin_token");
	sim_reply_clear(&r);

	doc = state(&e);
	history = json_object_get(doc, "operator_history");
	/* The two calls without the token are counted apart. */
	g_assert_cmpint(json_integer_value(json_object_get(history, "total")), ==, 1);
	g_assert_cmpuint(json_array_size(json_object_get(history, "entries")), ==, 1);
	g_assert_cmpint(json_integer_value(json_object_get(json_object_get(history, "unauthorized"),
	                                                   "count")), ==, 2);
	json_array_foreach(json_object_get(history, "entries"), i, entry) {
		const char *path = json_string_value(json_object_get(entry, "path"));

		g_assert_nonnull(path);
		g_assert_true(g_str_has_prefix(path, "/admin/"));
		g_assert_cmpuint(strlen(path), <=, 1024);
	}
	json_decref(doc);

	/* Every log line is one JSON object, and none carries the long path. */
	g_assert_true(serve_wait_log(&e, "\"status\":\"401\"", 1000));
	log = serve_log(&e);
	lines = g_strsplit(log, "\n", -1);
	for (char **l = lines; *l != NULL; l++) {
		json_t *line;

		if (**l == '\0')
			continue;
		line = json_loads(*l, 0, NULL);
		if (line == NULL)
			fail(&e, "a log line is not JSON");
		json_decref(line);
		g_assert_cmpuint(strlen(*l), <, 2048);
	}
	serve_clear(&e);
}

/* issue 11, admin API: a body that names "role" twice is ambiguous (which
 * one applies?): 400 invalid_json, nothing moves. */
static void
test_duplicate_role(void)
{
	struct serve_env e;
	char *code = NULL;

	if (!start(&e, "20", NULL))
		return;
	g_assert_cmpint(engine_action(&e, "sim-2", "role",
	                              "{\"role\": \"prefill\", \"role\": \"decode\"}", &code),
	                ==, 400);
	g_assert_cmpstr(code, ==, "invalid_json");
	g_free(code);
	g_assert_cmpint(engine_action(&e, "sim-2", "pin",
	                              "{\"role\": \"decode\", \"role\": \"prefill\"}", &code),
	                ==, 400);
	g_assert_cmpstr(code, ==, "invalid_json");
	g_free(code);
	g_assert_false(engine_flag(&e, "sim-2", "pinned"));
	serve_clear(&e);
}

/* issue 11, admin API "a bearer token read from an environment variable":
 * a token with the line end or spaces a secret file or `kubectl create
 * secret --from-file` leaves around it is the token without them (as
 * server.api_keys_env's keys are); one of blanks only is empty. */
static void
test_token_trimmed(void)
{
	struct serve_env e;
	struct sim_reply r;
	const char *const padded[] = { TOKEN_ENV, " " TOKEN "\n", NULL };
	const char *const blank[] = { TOKEN_ENV, " \n", NULL };
	g_autofree char *cfg = config_with(NULL), *log = NULL;

	if (!start(&e, "20", NULL))
		return;
	g_assert_cmpint(serve_stop_daemon(&e, SIGTERM, 5000), ==, 0);
	g_assert_true(serve_start_daemon(&e, cfg, padded));
	admin_call(&e, "GET", "/admin/state", NULL, &r);
	g_assert_cmpint(r.status, ==, 200);
	sim_reply_clear(&r);

	g_assert_cmpint(serve_stop_daemon(&e, SIGTERM, 5000), ==, 0);
	g_assert_false(serve_start_daemon(&e, cfg, blank));
	g_assert_cmpint(serve_stop_daemon(&e, SIGTERM, 5000), ==, 1);
	log = serve_log(&e);
	g_assert_nonnull(strstr(log, TOKEN_ENV " is empty"));
	serve_clear(&e);
}

/* --- routes and bodies ----------------------------------------------------- */

/* issue 11, admin API errors: unknown engine 404, bad JSON 400, a wrong
 * method 405 with Allow, an unknown route 404, a body too large 413, each
 * in the envelope; POST /admin/reload answers 200 with what changed or
 * 409 with the reason. */
static void
test_errors(void)
{
	struct serve_env e;
	struct sim_reply r;
	g_autofree char *allow = NULL;
	char *code = NULL;

	if (!start(&e, "20", NULL))
		return;
	g_assert_cmpint(engine_action(&e, "nosuch", "drain", NULL, &code), ==, 404);
	g_assert_cmpstr(code, ==, "engine_not_found");
	g_clear_pointer(&code, g_free);
	g_assert_cmpint(engine_action(&e, "sim-0", "role", "{\"role\": ", &code), ==, 400);
	g_assert_cmpstr(code, ==, "invalid_json");
	g_clear_pointer(&code, g_free);
	g_assert_cmpint(engine_action(&e, "sim-0", "role", "[1]", &code), ==, 400);
	g_assert_cmpstr(code, ==, "invalid_json");
	g_clear_pointer(&code, g_free);
	g_assert_cmpint(engine_action(&e, "sim-0", "role", "{\"role\": \"both\"}", &code), ==, 400);
	g_assert_cmpstr(code, ==, "invalid_value");
	g_clear_pointer(&code, g_free);
	g_assert_cmpint(engine_action(&e, "sim-0", "role", "{}", &code), ==, 400);
	g_assert_cmpstr(code, ==, "missing_field");
	g_clear_pointer(&code, g_free);
	g_assert_cmpint(engine_action(&e, "sim-0", "drain", "{\"force\": true}", &code), ==, 400);
	g_assert_cmpstr(code, ==, "unknown_field");
	g_clear_pointer(&code, g_free);
	g_assert_cmpint(engine_action(&e, "sim-0", "explode", NULL, &code), ==, 404);
	g_assert_cmpstr(code, ==, "not_found");
	g_clear_pointer(&code, g_free);

	admin_call(&e, "GET", "/admin/engines/sim-0/drain", NULL, &r);
	serve_assert_error(&r, 405, "method_not_allowed");
	allow = sim_reply_header(&r, "Allow");
	g_assert_cmpstr(allow, ==, "POST");
	sim_reply_clear(&r);
	admin_call(&e, "DELETE", "/admin/state", NULL, &r);
	serve_assert_error(&r, 405, "method_not_allowed");
	sim_reply_clear(&r);
	admin_call(&e, "GET", "/admin/nowhere", NULL, &r);
	serve_assert_error(&r, 404, "not_found");
	sim_reply_clear(&r);
	{
		g_autofree char *big = g_strnfill(5000, ' ');

		admin_call(&e, "POST", "/admin/engines/sim-0/pin", big, &r);
		serve_assert_error(&r, 413, "request_too_large");
		sim_reply_clear(&r);
	}
	{
		/* A declared length over the limit is refused before any body
		 * byte comes: 413 and the close, not a wait for the body (which
		 * would end in 408). */
		g_autofree char *head = g_strdup_printf(
			"POST /admin/reload HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
			"Content-Type: application/json\r\nContent-Length: 99999999\r\n\r\n", TOKEN);
		GString *got = serve_raw_exchange(admin_port(&e), head, 30000);

		g_assert_true(g_str_has_prefix(got->str, "HTTP/1.1 413"));
		g_assert_nonnull(strstr(got->str, "request_too_large"));
		g_string_free(got, TRUE);
	}
	/* Reload takes no body: one is refused, never ignored, an empty
	 * object and a body that is not JSON alike (docs/admin.md). */
	{
		static const char *const bodies[] = {
			"{\"path\": \"/etc/passwd\"}", "{\"role\": \"decode\"}", "{}", "garbage", " ",
		};

		for (size_t i = 0; i < G_N_ELEMENTS(bodies); i++) {
			admin_call(&e, "POST", "/admin/reload", bodies[i], &r);
			serve_assert_error(&r, 400, "body_not_allowed");
			g_assert_null(strstr(r.body->str, "role"));
			sim_reply_clear(&r);
		}
	}
	/* Reload through the admin API (issue 11, "Configuration reload ...
	 * and through the admin API"): POST only; the file unchanged reloads
	 * with no field changed; an invalid file is 400 invalid_config and a
	 * file that moves the listener is 409 reload_refused, both changing
	 * nothing. */
	admin_call(&e, "GET", "/admin/reload", NULL, &r);
	serve_assert_error(&r, 405, "method_not_allowed");
	sim_reply_clear(&r);
	admin_call(&e, "POST", "/admin/reload", NULL, &r);
	g_assert_cmpint(r.status, ==, 200);
	{
		json_t *doc = sim_json(r.body->str);

		g_assert_true(json_is_true(json_object_get(doc, "reloaded")));
		g_assert_cmpuint(json_array_size(json_object_get(doc, "fields")), ==, 0);
		g_assert_cmpuint(json_array_size(json_object_get(doc, "engines_added")), ==, 0);
		g_assert_nonnull(json_string_value(json_object_get(doc, "digest")));
		json_decref(doc);
	}
	sim_reply_clear(&r);
	{
		g_autofree char *good = NULL;
		json_t *cfg;
		char *moved;

		g_assert_true(g_file_get_contents(e.config_path, &good, NULL, NULL));
		g_assert_true(g_file_set_contents(e.config_path, "{\"fleet\": ", -1, NULL));
		admin_call(&e, "POST", "/admin/reload", NULL, &r);
		serve_assert_error(&r, 400, "invalid_config");
		sim_reply_clear(&r);

		cfg = sim_json(good);
		json_object_set_new(json_object_get(cfg, "server"), "port", json_integer(1));
		moved = json_dumps(cfg, 0);
		g_assert_true(g_file_set_contents(e.config_path, moved, -1, NULL));
		admin_call(&e, "POST", "/admin/reload", NULL, &r);
		serve_assert_error(&r, 409, "reload_refused");
		g_assert_nonnull(strstr(r.body->str, "server.port: cannot change without a restart"));
		sim_reply_clear(&r);
		free(moved);
		json_decref(cfg);
		g_assert_true(g_file_set_contents(e.config_path, good, -1, NULL));
	}
	/* Nothing changed. */
	g_assert_false(engine_flag(&e, "sim-0", "pinned"));
	g_assert_true(engine_flag(&e, "sim-0", "available"));
	serve_clear(&e);
}

/* --- drain ------------------------------------------------------------------ */

static json_int_t
engine_int(json_t *doc, const char *id, const char *key)
{
	return json_integer_value(json_object_get(engine_of(doc, id), key));
}

static json_t *
drain_of(json_t *doc, const char *id)
{
	return json_object_get(engine_of(doc, id), "drain");
}

#define DRAIN_STREAMS 6
#define DRAIN_MORE 12

/* issue 11, admin API drain "under load (its residents finish, nothing new
 * arrives, zero failed requests; its drain completion is visible)": long
 * streams are resident on decode engine sim-2 when it is drained; they all
 * finish, the requests sent after the drain go to sim-3 only, the state
 * shows the drain until its residents reach zero, then drained (logged
 * once as engine_drained); undrain puts it back into placement. */
static void
test_drain_under_load(void)
{
	struct serve_env e;
	struct serve_async *streams[DRAIN_STREAMS];
	g_autofree char *long_body = NULL, *short_body = NULL;
	json_t *doc;
	json_int_t placed_at_drain;
	gint64 deadline, drain_started;

	if (!start(&e, "2", NULL))
		return;
	long_body = serve_completion_body(&e, 160, TRUE);
	short_body = serve_completion_body(&e, 4, FALSE);
	for (unsigned i = 0; i < DRAIN_STREAMS; i++)
		streams[i] = serve_post_async(&e, "/v1/completions", long_body, 30000);
	/* Wait (bounded) until streams are resident on sim-2. */
	deadline = g_get_monotonic_time() + (gint64)WAIT_MS * 1000;
	for (;;) {
		doc = state(&e);
		if (engine_int(doc, "sim-2", "resident_decode") > 0)
			break;
		json_decref(doc);
		if (g_get_monotonic_time() > deadline)
			fail(&e, "no stream became resident on sim-2");
		g_usleep(5000);
	}
	json_decref(doc);

	{
		struct sim_reply r;
		json_t *reply, *drain;

		admin_call(&e, "POST", "/admin/engines/sim-2/drain", NULL, &r);
		g_assert_cmpint(r.status, ==, 200);
		reply = sim_json(r.body->str);
		sim_reply_clear(&r);
		/* Streams are still resident: not drained yet. */
		drain = json_object_get(json_object_get(reply, "state"), "drain");
		g_assert_true(json_is_true(json_object_get(drain, "draining")));
		g_assert_cmpint(json_integer_value(json_object_get(drain, "residents_left")), >, 0);
		g_assert_false(json_is_true(json_object_get(drain, "drained")));
		json_decref(reply);
	}
	drain_started = g_get_monotonic_time();
	doc = state(&e);
	placed_at_drain = engine_int(doc, "sim-2", "legs_placed");
	g_assert_true(json_is_true(json_object_get(drain_of(doc, "sim-2"), "draining")));
	g_assert_false(json_is_true(json_object_get(engine_of(doc, "sim-2"), "available")));
	json_decref(doc);

	/* More work while it drains: none of it on sim-2, all of it served. */
	for (unsigned i = 0; i < DRAIN_MORE; i++) {
		struct sim_reply r;

		serve_post(&e, "/v1/completions", short_body, NULL, 10000, &r);
		if (r.status != 200)
			fail(&e, "a request failed during the drain");
		sim_reply_clear(&r);
	}
	for (unsigned i = 0; i < DRAIN_STREAMS; i++) {
		struct sim_reply r;

		serve_async_join(streams[i], &r, NULL);
		if (r.status != 200 || strstr(r.body->str, "\"error\"") != NULL ||
		    strstr(r.body->str, "[DONE]") == NULL)
			fail(&e, "a resident stream did not finish");
		sim_reply_clear(&r);
	}
	if (!wait_engine_flag(&e, "sim-2", "available", FALSE))
		fail(&e, "sim-2 came back while drained");
	deadline = g_get_monotonic_time() + (gint64)WAIT_MS * 1000;
	for (;;) {
		doc = state(&e);
		if (json_is_true(json_object_get(drain_of(doc, "sim-2"), "drained"))) {
			g_test_message("drained %.2f s after the drain began",
			               (double)(g_get_monotonic_time() - drain_started) / 1e6);
			break;
		}
		json_decref(doc);
		if (g_get_monotonic_time() > deadline)
			fail(&e, "the drain never completed");
		g_usleep(10000);
	}
	g_assert_cmpint(json_integer_value(json_object_get(drain_of(doc, "sim-2"),
	                                                   "residents_left")), ==, 0);
	g_assert_cmpint(engine_int(doc, "sim-2", "legs_placed"), ==, placed_at_drain);
	g_assert_cmpint(engine_int(doc, "sim-2", "legs_failed"), ==, 0);
	json_decref(doc);
	if (!serve_wait_log(&e, "\"event\":\"engine_drained\",\"engine\":\"sim-2\"", 2000))
		fail(&e, "engine_drained is not logged");
	{
		g_autofree char *log = serve_log(&e);
		const char *first = strstr(log, "\"event\":\"engine_drained\",\"engine\":\"sim-2\"");

		if (first == NULL || strstr(first + 1, "\"event\":\"engine_drained\"") != NULL)
			fail(&e, "engine_drained is not logged once");
	}
	g_assert_cmpint(serve_counter(&e, "requests_failed"), ==, 0);

	/* Undrain: back in placement. */
	g_assert_cmpint(engine_action(&e, "sim-2", "undrain", NULL, NULL), ==, 200);
	if (!wait_engine_flag(&e, "sim-2", "available", TRUE))
		fail(&e, "sim-2 did not come back after undrain");
	doc = state(&e);
	g_assert_false(json_is_true(json_object_get(drain_of(doc, "sim-2"), "draining")));
	json_decref(doc);
	serve_clear(&e);
}

/* --- roles ------------------------------------------------------------------- */

/* The last flip history entry (owned). */
static json_t *
last_flip(struct serve_env *e)
{
	json_t *doc = state(e);
	json_t *entries = json_object_get(json_object_get(doc, "flip_history"), "entries");
	json_t *last = json_incref(json_array_get(entries, json_array_size(entries) - 1));

	json_decref(doc);
	return last;
}

/* issue 11, admin API pin, role change and guards: a pinned engine's move
 * is refused (engine_pinned) and allowed once unpinned; a move that would
 * break a floor is refused (prefill_floor, decode_floor); a move of an
 * engine out of placement is refused (engine_not_live); pin with a role
 * moves through the guards; an applied move is in the flip history with
 * caller operator. */
static void
test_pin_and_role(void)
{
	struct serve_env e;
	g_autofree char *role = NULL, *by = NULL;
	json_t *flip;
	char *code = NULL;

	if (!start(&e, "20", NULL))
		return;
	g_assert_cmpint(engine_action(&e, "sim-1", "pin", NULL, NULL), ==, 200);
	by = engine_str(&e, "sim-1", "pinned_by");
	g_assert_cmpstr(by, ==, "operator");
	g_assert_cmpint(engine_action(&e, "sim-1", "role", "{\"role\": \"decode\"}", &code), ==,
	                409);
	g_assert_cmpstr(code, ==, "engine_pinned");
	g_clear_pointer(&code, g_free);
	g_assert_cmpint(engine_action(&e, "sim-1", "unpin", NULL, NULL), ==, 200);
	g_assert_false(engine_flag(&e, "sim-1", "pinned"));
	g_assert_cmpint(engine_action(&e, "sim-1", "role", "{\"role\": \"decode\"}", &code), ==,
	                200);
	role = engine_str(&e, "sim-1", "role");
	g_assert_cmpstr(role, ==, "decode");
	flip = last_flip(&e);
	g_assert_cmpstr(str_at(flip, "engine"), ==, "sim-1");
	g_assert_cmpstr(str_at(flip, "caller"), ==, "operator");
	g_assert_cmpstr(str_at(flip, "to"), ==, "decode");
	g_assert_cmpint(json_integer_value(json_object_get(flip, "prefill")), ==, 1);
	g_assert_cmpint(json_integer_value(json_object_get(flip, "decode")), ==, 3);
	json_decref(flip);

	/* Floors (1 and 1): sim-0 is the last prefill engine. */
	g_assert_cmpint(engine_action(&e, "sim-0", "role", "{\"role\": \"decode\"}", &code), ==,
	                409);
	g_assert_cmpstr(code, ==, "prefill_floor");
	g_clear_pointer(&code, g_free);

	/* Not live: an ejected engine keeps its role. */
	g_assert_cmpint(engine_action(&e, "sim-3", "eject", NULL, NULL), ==, 200);
	g_assert_cmpint(engine_action(&e, "sim-3", "role", "{\"role\": \"prefill\"}", &code), ==,
	                409);
	g_assert_cmpstr(code, ==, "engine_not_live");
	g_clear_pointer(&code, g_free);

	/* Pin at a role: sim-1 back to prefill through the guards, pinned. */
	g_assert_cmpint(engine_action(&e, "sim-1", "pin", "{\"role\": \"prefill\"}", NULL), ==, 200);
	g_clear_pointer(&role, g_free);
	role = engine_str(&e, "sim-1", "role");
	g_assert_cmpstr(role, ==, "prefill");
	g_assert_true(engine_flag(&e, "sim-1", "pinned"));

	/* Decode floor: two live decode engines left (sim-3 is out) with a
	 * floor of 2 after a restart would refuse; here with floor 1, sim-2 is
	 * the last live decode engine. */
	g_assert_cmpint(engine_action(&e, "sim-2", "role", "{\"role\": \"prefill\"}", &code), ==,
	                409);
	g_assert_cmpstr(code, ==, "decode_floor");
	g_clear_pointer(&code, g_free);
	serve_clear(&e);
}

/* issue 11, admin API role change guard dwell: controller.thresholds.dwell_s
 * since an engine's last change (its start counts as one). */
static void
test_role_dwell(void)
{
	struct serve_env e;
	char *code = NULL;

	if (!start(&e, "20", "{\"controller\": {\"thresholds\": {\"dwell_s\": 600}}}"))
		return;
	g_assert_cmpint(engine_action(&e, "sim-1", "role", "{\"role\": \"decode\"}", &code), ==,
	                409);
	g_assert_cmpstr(code, ==, "dwell");
	g_free(code);
	serve_clear(&e);
}

/* --- eject and readmit --------------------------------------------------------- */

/* issue 11, admin API readmit "(through verification)": an ejected engine
 * stays out until readmitted, is not back at once, and comes back once the
 * monitor's breaker verified it (logged engine_readmitted); a live engine
 * cannot be readmitted (409). */
static void
test_eject_and_readmit(void)
{
	struct serve_env e;
	g_autofree char *st = NULL, *reason = NULL;
	struct sim_reply r;
	json_t *reply;
	char *code = NULL;

	if (!start(&e, "20", NULL))
		return;
	g_assert_cmpint(engine_action(&e, "sim-3", "readmit", NULL, &code), ==, 409);
	g_assert_cmpstr(code, ==, "engine_not_ejected");
	g_clear_pointer(&code, g_free);

	g_assert_cmpint(engine_action(&e, "sim-3", "eject", NULL, NULL), ==, 200);
	st = engine_str(&e, "sim-3", "state");
	reason = engine_str(&e, "sim-3", "reason");
	g_assert_cmpstr(st, ==, "ejected");
	g_assert_cmpstr(reason, ==, "operator");
	/* An operator's ejection waits for the operator. */
	g_assert_false(serve_wait_log(&e, "\"event\":\"engine_readmitted\"", 500));
	g_assert_false(engine_flag(&e, "sim-3", "available"));

	admin_call(&e, "POST", "/admin/engines/sim-3/readmit", NULL, &r);
	g_assert_cmpint(r.status, ==, 200);
	reply = sim_json(r.body->str);
	sim_reply_clear(&r);
	/* Not at once: the breaker verifies it first. */
	g_assert_false(json_is_true(json_object_get(json_object_get(reply, "state"),
	                                            "available")));
	g_assert_true(json_is_true(json_object_get(reply, "changed")));
	json_decref(reply);
	/* Asked again before it is back: nothing more to do (changed false),
	 * unless the breaker has already put it back (409). */
	admin_call(&e, "POST", "/admin/engines/sim-3/readmit", NULL, &r);
	if (r.status == 200) {
		reply = sim_json(r.body->str);
		g_assert_true(json_is_false(json_object_get(reply, "changed")));
		json_decref(reply);
	} else {
		serve_assert_error(&r, 409, "engine_not_ejected");
	}
	sim_reply_clear(&r);
	if (!serve_wait_log(&e, "\"event\":\"engine_readmitted\"", WAIT_MS))
		fail(&e, "sim-3 was not readmitted");
	if (!wait_engine_flag(&e, "sim-3", "available", TRUE))
		fail(&e, "sim-3 did not come back");
	serve_clear(&e);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	/* The admin token reaches narwhal through the environment only. */
	g_setenv(TOKEN_ENV, TOKEN, TRUE);
	g_test_add_func("/admin/issue-11/state-document", test_state_document);
	g_test_add_func("/admin/issue-11/no-paths-for-clients", test_no_paths_for_clients);
	g_test_add_func("/admin/issue-11/token", test_token);
	g_test_add_func("/admin/issue-11/token-from-env-only", test_token_from_env_only);
	g_test_add_func("/admin/issue-11/remote-bind", test_remote_bind);
	g_test_add_func("/admin/issue-11/no-token-no-listener", test_no_token_no_listener);
	g_test_add_func("/admin/issue-11/errors", test_errors);
	g_test_add_func("/admin/issue-11/hostile-paths", test_hostile_paths);
	g_test_add_func("/admin/issue-11/duplicate-role", test_duplicate_role);
	g_test_add_func("/admin/issue-11/token-trimmed", test_token_trimmed);
	g_test_add_func("/admin/issue-11/drain-under-load", test_drain_under_load);
	g_test_add_func("/admin/issue-11/pin-and-role", test_pin_and_role);
	g_test_add_func("/admin/issue-11/role-dwell", test_role_dwell);
	g_test_add_func("/admin/issue-11/eject-and-readmit", test_eject_and_readmit);
	return g_test_run();
}
