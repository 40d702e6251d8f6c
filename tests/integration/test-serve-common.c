#include "build-config.h"

#include "integration/test-serve-common.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <glib/gstdio.h>

static char *
read_text(const char *path)
{
	char *text = NULL;

	if (!g_file_get_contents(path, &text, NULL, NULL))
		return g_strdup("");
	return text;
}

void
serve_json_merge(json_t *dst, json_t *src)
{
	const char *key;
	json_t *v;

	json_object_foreach(src, key, v) {
		json_t *d = json_object_get(dst, key);

		if (json_is_object(d) && json_is_object(v))
			serve_json_merge(d, v);
		else
			json_object_set(dst, key, v);
	}
}

char *
serve_json_merged_text(const char *base, const char *extra)
{
	json_t *cfg = sim_json(base);
	char *text;

	if (extra != NULL) {
		json_t *more = sim_json(extra);

		serve_json_merge(cfg, more);
		json_decref(more);
	}
	text = json_dumps(cfg, JSON_COMPACT);
	json_decref(cfg);
	return text;
}

json_t *
serve_base_config(void)
{
	return json_pack("{s:{s:s, s:i}, s:{s:s}, s:{s:s}, s:{s:s}}",
	                 "server", "host", "127.0.0.1", "port", 0,
	                 "log", "level", "info",
	                 "serving", "admission", "open",
	                 "controller", "policy", "static");
}

static json_t *
build_config(struct serve_env *e, const char *roles, const char *config_json)
{
	json_t *cfg = serve_base_config();
	json_t *engines;

	json_object_set(cfg, "fleet", e->sim.fleet);
	engines = json_object_get(json_object_get(cfg, "fleet"), "engines");

	if (roles != NULL) {
		json_t *copy = json_deep_copy(engines);

		for (size_t i = 0; i < json_array_size(copy) && roles[i]; i++) {
			json_t *engine = json_array_get(copy, i);

			if (roles[i] == 'a')
				json_object_del(engine, "role");
			else
				json_object_set_new(engine, "role",
				                    json_string(roles[i] == 'd' ? "decode" : "prefill"));
		}
		json_object_set_new(json_object_get(cfg, "fleet"), "engines", copy);
	}
	if (e->dialect_config != NULL) {
		/* A copy: the test's config merged next must not change it. */
		json_t *copy = json_deep_copy(e->dialect_config);

		serve_json_merge(cfg, copy);
		json_decref(copy);
	}
	if (config_json != NULL) {
		json_t *extra = sim_json(config_json);

		serve_json_merge(cfg, extra);
		json_decref(extra);
	}
	return cfg;
}

gboolean
serve_wait_log(struct serve_env *e, const char *needle, guint timeout_ms)
{
	gint64 deadline = g_get_monotonic_time() + (gint64)timeout_ms * 1000;

	do {
		g_autofree char *text = read_text(e->log_path);

		if (strstr(text, needle) != NULL)
			return TRUE;
		if (e->daemon == NULL || g_subprocess_get_identifier(e->daemon) == NULL)
			return FALSE;
		g_usleep(2000);
	} while (g_get_monotonic_time() < deadline);
	return FALSE;
}

char *
serve_log(struct serve_env *e)
{
	return read_text(e->log_path);
}

/* A test that aborts must not leave its daemon running. */
static void
die_with_parent(gpointer unused)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
}

gboolean
serve_start_daemon(struct serve_env *e, const char *config_json, const char *const *envp)
{
	g_autoptr(GSubprocessLauncher) launcher = g_subprocess_launcher_new(G_SUBPROCESS_FLAGS_STDOUT_SILENCE);
	json_t *cfg = build_config(e, NULL, config_json);
	GError *error = NULL;
	g_autofree char *text = NULL;
	const char *at;

	g_assert_true(json_dump_file(cfg, e->config_path, JSON_INDENT(1)) == 0);
	json_decref(cfg);
	g_unlink(e->log_path);
	g_subprocess_launcher_set_stderr_file_path(launcher, e->log_path);
	g_subprocess_launcher_set_child_setup(launcher, die_with_parent, NULL, NULL);
	/* A refused request-state transition (src/serve/request.c) is a
	 * critical: abort, so the test that reaches one fails. */
	g_subprocess_launcher_setenv(launcher, "G_DEBUG", "fatal-criticals", TRUE);
	for (const char *const *v = envp; v && *v; v += 2)
		g_subprocess_launcher_setenv(launcher, v[0], v[1], TRUE);
	e->daemon = g_subprocess_launcher_spawn(launcher, &error, g_getenv("NARWHAL_BIN"),
	                                        "--config", e->config_path, NULL);
	g_assert_no_error(error);
	if (!serve_wait_log(e, "\"event\":\"listening\"", 10000))
		return FALSE;
	text = serve_log(e);
	at = strstr(strstr(text, "\"event\":\"listening\""), "\"port\":\"");
	e->port = at ? (guint16)atoi(at + strlen("\"port\":\"")) : 0;
	/* The model is known once the first engine answered. */
	serve_wait_log(e, "\"event\":\"model_", 3000);
	return e->port != 0;
}

struct serve_env *serve_current;

/* narwhal-sim's --dialect entry for engine i (docs/simulator.md). */
static const char *
sim_dialect_entry(char dialect, char role)
{
	switch (dialect) {
	case 'v':
		return "vllm";
	case 'l':
		return "llamacpp";
	case 's':
		return role == 'p' ? "sglang:prefill" : role == 'd' ? "sglang:decode"
		                                                    : "sglang:aggregate";
	default:
		g_error("unknown dialect letter '%c'", dialect);
	}
}

char *
serve_sim_dialects(const char *dialects, const char *roles)
{
	GString *list = g_string_new(NULL);

	g_assert_true(roles != NULL && strlen(roles) == strlen(dialects));
	for (size_t i = 0; dialects[i]; i++)
		g_string_append_printf(list, "%s%s", i ? "," : "",
		                       sim_dialect_entry(dialects[i], roles[i]));
	return g_string_free(list, FALSE);
}

/* What the sglang dialect must be told of the fleet (docs/dialects.md):
 * its aggregate engines run without --disaggregation-mode. NULL when
 * nothing. */
static json_t *
sglang_settings(json_t *fleet, const char *dialects, const char *roles)
{
	json_t *engines = json_object();

	for (size_t i = 0; dialects[i]; i++) {
		json_t *engine = json_array_get(json_object_get(fleet, "engines"), i);
		const char *id = json_string_value(json_object_get(engine, "id"));

		if (dialects[i] == 's' && roles[i] != 'p' && roles[i] != 'd')
			json_object_set_new(engines, id, json_pack("{s:b}", "disaggregation", 0));
	}
	if (json_object_size(engines) == 0) {
		json_decref(engines);
		return NULL;
	}
	return json_pack("{s:{s:{s:{s:o}}}}", "plugins", "dialects", "sglang", "engines",
	                 engines);
}

gboolean
serve_start(struct serve_env *e, const char *const *sim_args, const char *roles,
            const char *config_json)
{
	return serve_start_dialects(e, NULL, roles, sim_args, config_json);
}

gboolean
serve_start_dialects(struct serve_env *e, const char *dialects, const char *roles,
                     const char *const *sim_args, const char *config_json)
{
	g_autofree char *bin = sim_bin();
	g_autoptr(GPtrArray) args = g_ptr_array_new_with_free_func(g_free);
	GError *error = NULL;
	json_t *cfg;

	memset(e, 0, sizeof *e);
	serve_current = e;
	if (!g_file_test(bin, G_FILE_TEST_IS_EXECUTABLE)) {
		g_test_skip("narwhal-sim is not built");
		return FALSE;
	}
	if (dialects != NULL) {
		g_ptr_array_add(args, g_strdup("--engines"));
		g_ptr_array_add(args, g_strdup_printf("%zu", strlen(dialects)));
		g_ptr_array_add(args, g_strdup("--dialect"));
		g_ptr_array_add(args, serve_sim_dialects(dialects, roles));
	}
	for (const char *const *a = sim_args; a && *a; a++)
		g_ptr_array_add(args, g_strdup(*a));
	g_ptr_array_add(args, NULL);
	g_assert_true(sim_start(&e->sim, (const char *const *)args->pdata));
	if (dialects != NULL)
		e->dialect_config = sglang_settings(e->sim.fleet, dialects, roles);
	e->model = json_string_value(json_object_get(e->sim.fleet, "model"));
	e->dir = g_dir_make_tmp("narwhal-serve-test-XXXXXX", &error);
	g_assert_no_error(error);
	e->config_path = g_build_filename(e->dir, "narwhal.json", NULL);
	e->log_path = g_build_filename(e->dir, "narwhal.log", NULL);
	/* Roles go into the fleet the daemon reads. */
	cfg = build_config(e, roles, NULL);
	json_object_set(e->sim.fleet, "engines",
	                json_object_get(json_object_get(cfg, "fleet"), "engines"));
	json_decref(cfg);
	if (!serve_start_daemon(e, config_json, NULL)) {
		g_autofree char *log = serve_log(e);

		g_test_message("narwhal log:\n%s", log);
		g_assert_not_reached();
	}
	return TRUE;
}

int
serve_stop_daemon(struct serve_env *e, int signo, guint timeout_ms)
{
	gint64 deadline = g_get_monotonic_time() + (gint64)timeout_ms * 1000;
	int status = -1;

	if (e->daemon == NULL)
		return -1;
	if (g_subprocess_get_identifier(e->daemon) != NULL)
		g_subprocess_send_signal(e->daemon, signo);
	while (g_subprocess_get_identifier(e->daemon) != NULL && g_get_monotonic_time() < deadline)
		g_usleep(2000);
	if (g_subprocess_get_identifier(e->daemon) != NULL) {
		g_subprocess_force_exit(e->daemon);
		g_subprocess_wait(e->daemon, NULL, NULL);
	} else {
		g_subprocess_wait(e->daemon, NULL, NULL);
		if (g_subprocess_get_if_exited(e->daemon))
			status = g_subprocess_get_exit_status(e->daemon);
	}
	g_clear_object(&e->daemon);
	return status;
}

void
serve_clear(struct serve_env *e)
{
	if (e->daemon != NULL) {
		int status = serve_stop_daemon(e, SIGTERM, 10000);

		if (status != 0) {
			g_autofree char *log = serve_log(e);

			g_test_message("narwhal exited with %d; log:\n%s", status, log);
			g_test_fail();
		}
	}
	if (g_test_failed() && e->log_path != NULL) {
		g_autofree char *log = serve_log(e);

		g_test_message("narwhal log:\n%s", log);
	}
	sim_stop(&e->sim, SIGTERM, 10000);
	sim_clear(&e->sim);
	if (e->dir != NULL) {
		g_unlink(e->config_path);
		g_unlink(e->log_path);
		g_rmdir(e->dir);
	}
	g_free(e->dir);
	g_free(e->config_path);
	g_free(e->log_path);
	json_decref(e->dialect_config);
	memset(e, 0, sizeof *e);
}

void
serve_fail(struct serve_env *e, const char *what)
{
	g_autofree char *log = serve_log(e);

	g_printerr("narwhal log:\n%s\n", log);
	g_error("%s", what);
}

void
serve_request_whole(struct serve_env *e, gboolean stream, unsigned max_tokens)
{
	g_autofree char *body = serve_completion_body(e, max_tokens, stream);
	struct sim_reply r;
	gboolean good;

	serve_post(e, "/v1/completions", body, NULL, 10000, &r);
	if (stream) {
		good = serve_stream_whole(&r);
	} else {
		json_t *doc = r.status == 200 ? sim_json(r.body->str) : NULL;

		good = json_integer_value(json_object_get(json_object_get(doc, "usage"),
		                                          "completion_tokens")) == max_tokens;
		json_decref(doc);
	}
	if (!good) {
		g_autofree char *what = g_strdup_printf("%s: want a whole answer, got %ld (curl %d): "
		                                        "%s", stream ? "stream" : "plain", r.status,
		                                        r.curl_code, r.body->str);

		sim_reply_clear(&r);
		serve_fail(e, what);
	}
	sim_reply_clear(&r);
}

void
serve_finish(struct serve_env *e)
{
	int status;

	if (e->daemon != NULL)
		g_assert_cmpint(serve_stop_daemon(e, SIGTERM, 10000), ==, 0);
	status = sim_stop(&e->sim, SIGTERM, 10000);
	if (status != 0) {
		g_test_message("narwhal-sim exited with %d", status);
		g_test_fail();
	}
	serve_clear(e);
}

void
serve_post(struct serve_env *e, const char *path, const char *body, const char *const *headers,
           long timeout_ms, struct sim_reply *r)
{
	sim_http(e->port, "POST", path, body, headers, timeout_ms, r);
}

json_t *
serve_health(struct serve_env *e)
{
	struct sim_reply r;
	json_t *doc;

	sim_http(e->port, "GET", "/narwhal/health", NULL, NULL, 5000, &r);
	/* 503 when Narwhal cannot serve (docs/api.md), with the same body. */
	if (r.status != 200 && r.status != 503)
		g_error("GET /narwhal/health: %ld %s", r.status, r.body->str);
	doc = sim_json(r.body->str);
	sim_reply_clear(&r);
	return doc;
}

json_t *
serve_counters(struct serve_env *e)
{
	json_t *doc = serve_health(e);
	json_t *counters = json_incref(json_object_get(doc, "counters"));

	json_decref(doc);
	return counters;
}

gboolean
serve_wait_all_available(struct serve_env *e, long timeout_ms)
{
	gint64 deadline = g_get_monotonic_time() + timeout_ms * 1000;

	for (;;) {
		json_t *doc = serve_health(e), *engine;
		size_t i;
		gboolean all = TRUE;

		json_array_foreach(json_object_get(doc, "engines"), i, engine)
			all = all && json_is_true(json_object_get(engine, "available"));
		json_decref(doc);
		if (all)
			return TRUE;
		if (g_get_monotonic_time() >= deadline)
			return FALSE;
		g_usleep(20000);
	}
}

json_int_t
serve_counter(struct serve_env *e, const char *name)
{
	json_t *c = serve_counters(e);
	json_t *v = json_object_get(c, name);
	json_int_t n;

	g_assert_true(json_is_integer(v));
	n = json_integer_value(v);
	json_decref(c);
	return n;
}

char *
serve_completion_body(const struct serve_env *e, unsigned max_tokens, gboolean stream)
{
	return g_strdup_printf("{\"model\":\"%s\",\"prompt\":\"Tell me about whales\","
	                       "\"max_tokens\":%u%s}", e->model, max_tokens,
	                       stream ? ",\"stream\":true" : "");
}

char *
serve_error_code(const char *body)
{
	json_t *doc = json_loads(body, 0, NULL);
	const char *code = json_string_value(json_object_get(json_object_get(doc, "error"), "code"));
	char *out = g_strdup(code);

	json_decref(doc);
	return out;
}

void
serve_assert_error(const struct sim_reply *r, long status, const char *code)
{
	g_autofree char *got = serve_error_code(r->body->str);

	if (r->status != status || g_strcmp0(got, code) != 0) {
		g_autofree char *log = serve_current ? serve_log(serve_current) : NULL;

		g_printerr("narwhal log:\n%s\n", log ? log : "");
		g_error("want %ld %s, got %ld: %s", status, code, r->status, r->body->str);
	}
}

/* The error event of a failed stream, and that no [DONE] follows. */
void
serve_assert_stream_error(const struct sim_reply *r, const char *code)
{
	GPtrArray *events = sim_sse_events(r->body->str);
	const char *last;
	json_t *doc;

	if (strstr(r->body->str, "\"error\"") == NULL) {
		g_autofree char *log = serve_current ? serve_log(serve_current) : NULL;

		g_printerr("no error event in: %s\nnarwhal log:\n%s\n", r->body->str, log);
	}
	g_assert_cmpint(r->status, ==, 200);
	g_assert_cmpuint(events->len, >, 0);
	last = g_ptr_array_index(events, events->len - 1);
	g_assert_null(strstr(r->body->str, "[DONE]"));
	doc = sim_json(last);
	if (code != NULL)
		g_assert_cmpstr(json_string_value(json_object_get(json_object_get(doc, "error"), "code")),
		                ==, code);
	else
		g_assert_true(json_is_object(json_object_get(doc, "error")));
	json_decref(doc);
	g_ptr_array_free(events, TRUE);
}

gboolean
serve_stream_whole(const struct sim_reply *r)
{
	GPtrArray *events;
	gboolean whole;

	if (r->status != 200)
		return FALSE;
	events = sim_sse_events(r->body->str);
	whole = events->len > 1 &&
	        strcmp(g_ptr_array_index(events, events->len - 1), "[DONE]") == 0 &&
	        strstr(r->body->str, "\"error\"") == NULL;
	g_ptr_array_free(events, TRUE);
	return whole;
}

gboolean
serve_wait_stat(struct serve_env *e, unsigned engine, const char *field, json_int_t value,
                guint timeout_ms)
{
	gint64 deadline = g_get_monotonic_time() + (gint64)timeout_ms * 1000;

	do {
		if (sim_engine_stat(&e->sim, engine, field) == value)
			return TRUE;
		g_usleep(2000);
	} while (g_get_monotonic_time() < deadline);
	return FALSE;
}

static gpointer
async_run(gpointer data)
{
	struct serve_async *a = data;

	serve_post(a->env, a->path, a->body, NULL, a->timeout_ms, &a->reply);
	a->done_us = g_get_monotonic_time();
	return NULL;
}

struct serve_async *
serve_post_async(struct serve_env *e, const char *path, const char *body, long timeout_ms)
{
	struct serve_async *a = g_new0(struct serve_async, 1);

	a->env = e;
	a->path = g_strdup(path);
	a->body = g_strdup(body);
	a->timeout_ms = timeout_ms;
	a->thread = g_thread_new("serve-async", async_run, a);
	return a;
}

void
serve_async_join(struct serve_async *a, struct sim_reply *r, gint64 *done_us)
{
	g_thread_join(a->thread);
	*r = a->reply;
	if (done_us != NULL)
		*done_us = a->done_us;
	g_free(a->path);
	g_free(a->body);
	g_free(a);
}

void
serve_post_in_order(struct serve_env *e, const char *body, struct serve_async **out, unsigned n)
{
	json_int_t base = serve_counter(e, "requests_completions");

	for (unsigned i = 0; i < n; i++) {
		gint64 deadline = g_get_monotonic_time() + 5 * G_USEC_PER_SEC;

		out[i] = serve_post_async(e, "/v1/completions", body, 20000);
		while (serve_counter(e, "requests_completions") < base + i + 1) {
			if (g_get_monotonic_time() > deadline)
				g_error("request %u of %u did not reach narwhal within 5 s", i + 1, n);
			g_usleep(1000);
		}
	}
}

int
serve_raw_post(guint16 port, const char *path, const char *body, int rcvbuf)
{
	struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = htons(port) };
	g_autofree char *req = g_strdup_printf("POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\n"
	                                       "Content-Type: application/json\r\n"
	                                       "Content-Length: %zu\r\n\r\n%s",
	                                       path, strlen(body), body);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
	if (fd < 0)
		return -1;
	if (rcvbuf > 0)
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
	if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0 ||
	    write(fd, req, strlen(req)) != (ssize_t)strlen(req)) {
		close(fd);
		return -1;
	}
	return fd;
}

gboolean
serve_raw_read_until(int fd, GString *got, const char *needle, guint timeout_ms)
{
	gint64 deadline = g_get_monotonic_time() + (gint64)timeout_ms * 1000;

	while (strstr(got->str, needle) == NULL) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		char buf[4096];
		ssize_t n;

		if (g_get_monotonic_time() >= deadline)
			return FALSE;
		if (poll(&pfd, 1, 10) <= 0)
			continue;
		n = read(fd, buf, sizeof buf);
		if (n <= 0)
			return strstr(got->str, needle) != NULL;
		g_string_append_len(got, buf, n);
	}
	return TRUE;
}

/* --- plugin directories ------------------------------------------------ */

char *
serve_plugin_dir_new(void)
{
	static const char *const builtin[] = {
		"admission-open.so", "admission-predictive.so", "controller-static.so",
		"dialect-llamacpp.so", "dialect-sglang.so", "dialect-vllm.so",
		"placement-least-loaded.so", "placement-slo-cost.so",
	};
	const char *built = g_getenv("NARWHAL_PLUGIN_DIR");
	g_autofree char *mock = g_test_build_filename(G_TEST_BUILT, "plugins", ".libs",
	                                              "mock-dialect.so", NULL);
	g_autofree char *mock_link = NULL;
	char *dir = g_dir_make_tmp("narwhal-plugins-XXXXXX", NULL);

	g_assert_nonnull(built);
	g_assert_nonnull(dir);
	for (size_t i = 0; i < G_N_ELEMENTS(builtin); i++) {
		g_autofree char *target = g_build_filename(built, builtin[i], NULL);
		g_autofree char *link = g_build_filename(dir, builtin[i], NULL);

		g_assert_cmpint(symlink(target, link), ==, 0);
	}
	mock_link = g_build_filename(dir, "dialect-mock.so", NULL);
	g_assert_cmpint(symlink(mock, mock_link), ==, 0);
	return dir;
}

void
serve_plugin_dir_free(char *dir)
{
	g_autoptr(GDir) d = g_dir_open(dir, 0, NULL);
	const char *name;

	while (d != NULL && (name = g_dir_read_name(d)) != NULL) {
		g_autofree char *path = g_build_filename(dir, name, NULL);

		g_unlink(path);
	}
	g_rmdir(dir);
	g_free(dir);
}

void
serve_restart_with_dialects(struct serve_env *e, const char *dialects, const char *config_json)
{
	json_t *engines = json_object_get(e->sim.fleet, "engines");

	g_assert_cmpint(serve_stop_daemon(e, SIGTERM, 10000), ==, 0);
	for (size_t i = 0; i < json_array_size(engines) && dialects[i]; i++)
		json_object_set_new(json_array_get(engines, i), "dialect",
		                    json_string(dialects[i] == 'm'   ? "mock"
		                                : dialects[i] == 'l' ? "llamacpp"
		                                                     : "vllm"));
	if (!serve_start_daemon(e, config_json, NULL)) {
		g_autofree char *log = serve_log(e);

		g_error("narwhal did not start:\n%s", log);
	}
}

/* --- a loopback fake engine ------------------------------------------ */

gboolean
serve_send_all(int fd, const char *text)
{
	size_t len = strlen(text);

	while (len > 0) {
		ssize_t n = send(fd, text, len, MSG_NOSIGNAL);

		if (n <= 0)
			return FALSE;
		text += n;
		len -= (size_t)n;
	}
	return TRUE;
}

size_t
serve_fake_read_request(int fd, GString *in)
{
	char buf[4096];
	const char *end, *cl;
	size_t head, body = 0;
	ssize_t n;

	while ((end = strstr(in->str, "\r\n\r\n")) == NULL) {
		if ((n = recv(fd, buf, sizeof buf, 0)) <= 0)
			return 0;
		g_string_append_len(in, buf, n);
	}
	head = (size_t)(end - in->str) + 4;
	cl = g_strstr_len(in->str, (gssize)head, "Content-Length:");
	if (cl != NULL)
		body = strtoul(cl + strlen("Content-Length:"), NULL, 10);
	while (in->len < head + body && (n = recv(fd, buf, sizeof buf, 0)) > 0)
		g_string_append_len(in, buf, n);
	return in->len < head + body ? 0 : head + body;
}

int
serve_fake_answer_control(int fd, const char *request, gboolean close)
{
	static const char models[] = "{\"object\":\"list\",\"data\":[{\"id\":\"opt-13b-a100\","
	                             "\"object\":\"model\",\"max_model_len\":2048}]}";
	static const char metrics[] = "vllm:num_requests_running{model_name=\"opt-13b-a100\"} 0\n"
	                              "vllm:num_requests_waiting{model_name=\"opt-13b-a100\"} 0\n"
	                              "vllm:kv_cache_usage_perc{model_name=\"opt-13b-a100\"} 0\n";
	const char *body, *type = "application/json";
	g_autofree char *resp = NULL;

	if (g_str_has_prefix(request, "GET /v1/models")) {
		body = models;
	} else if (g_str_has_prefix(request, "GET /health")) {
		body = "";
	} else if (g_str_has_prefix(request, "GET /metrics")) {
		body = metrics;
		type = "text/plain; version=0.0.4";
	} else {
		return -1;
	}
	resp = g_strdup_printf("HTTP/1.1 200 OK\r\nContent-Type: %s\r\n%sContent-Length: %zu\r\n"
	                       "\r\n%s", type, close ? "Connection: close\r\n" : "",
	                       strlen(body), body);
	return serve_send_all(fd, resp) ? 1 : 0;
}

struct fake_conn {
	struct serve_fake_engine *engine;
	int fd;
};

static gpointer
fake_conn_run(gpointer data)
{
	struct fake_conn *c = data;

	c->engine->serve(c->fd, c->engine->data);
	g_free(c);
	return NULL;
}

static gpointer
fake_accept(gpointer data)
{
	struct serve_fake_engine *f = data;

	while (!g_atomic_int_get(&f->stop)) {
		struct pollfd p = { .fd = f->fd, .events = POLLIN };
		struct fake_conn *c;
		int fd;

		if (poll(&p, 1, 50) <= 0)
			continue;
		fd = accept(f->fd, NULL, NULL);
		if (fd < 0)
			continue;
		c = g_new(struct fake_conn, 1);
		c->engine = f;
		c->fd = fd;
		g_thread_unref(g_thread_new("fake-engine-conn", fake_conn_run, c));
	}
	return NULL;
}

void
serve_fake_engine_start(struct serve_fake_engine *f, serve_fake_fn serve, gpointer data)
{
	struct sockaddr_in addr = { .sin_family = AF_INET };
	socklen_t len = sizeof addr;

	memset(f, 0, sizeof *f);
	f->serve = serve;
	f->data = data;
	inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
	f->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	g_assert_cmpint(f->fd, >=, 0);
	g_assert_cmpint(bind(f->fd, (struct sockaddr *)&addr, sizeof addr), ==, 0);
	g_assert_cmpint(listen(f->fd, 16), ==, 0);
	g_assert_cmpint(getsockname(f->fd, (struct sockaddr *)&addr, &len), ==, 0);
	f->port = ntohs(addr.sin_port);
	f->acceptor = g_thread_new("fake-engine", fake_accept, f);
}

void
serve_fake_engine_stop(struct serve_fake_engine *f)
{
	g_atomic_int_set(&f->stop, 1);
	g_thread_join(f->acceptor);
	close(f->fd);
}

/* --- profile stores ---------------------------------------------------- */

/* narwhal-sim's opt-13b-a100 preset (src/sim/model.c), milliseconds: the
 * coefficients narwhal-profile recovers (tests/integration/
 * test-narwhal-profile.c). */
#define OPT_PREFILL_A_MS 18.10
#define OPT_PREFILL_B_MS 0.10191
#define OPT_PREFILL_C_MS 7.122e-6
#define OPT_DECODE_D0_MS 19.93
#define OPT_DECODE_D1_MS 6.269e-4
#define OPT_DECODE_D2_MS 0.03851
#define OPT_KV_BYTES_PER_TOKEN (800.0 * 1024)
#define OPT_KV_GBS 45.0
#define OPT_KV_SETUP_MS 1.0
#define OPT_MAX_LEN 2048

void
serve_store_write(struct serve_store *s, unsigned n_engines, double time_scale)
{
	GError *error = NULL;
	double k = 1e-3 / time_scale; /* model ms -> real s */
	json_t *engines = json_array(), *doc;

	s->dir = g_dir_make_tmp("narwhal-store-test-XXXXXX", &error);
	g_assert_no_error(error);
	s->path = g_build_filename(s->dir, "profiles.json", NULL);
	for (unsigned i = 0; i < n_engines; i++) {
		char id[8];

		g_snprintf(id, sizeof id, "sim-%u", i);
		json_array_append_new(engines, json_pack(
			"{s:s, s:s, s:s, s:s, s:n, s:I, s:s,"
			" s:{s:f, s:f, s:f, s:I, s:I, s:I, s:f},"
			" s:{s:f, s:f, s:f, s:I, s:I, s:I, s:I, s:I, s:f},"
			" s:{s:f, s:f, s:I, s:I}}",
			"engine", id, "url", "http://127.0.0.1:1", "dialect", "vllm",
			"model", "opt-13b-a100", "hardware", "kv_capacity_tokens", (json_int_t)0,
			"measured_at", "2026-12-01T20:00:00Z",
			"prefill", "a_s", OPT_PREFILL_A_MS * k, "b_s", OPT_PREFILL_B_MS * k,
			"c_s", OPT_PREFILL_C_MS * k, "min_tokens", (json_int_t)1,
			"max_tokens", (json_int_t)OPT_MAX_LEN, "samples", (json_int_t)100,
			"rel_rms_error", 0.0,
			"decode", "d0_s", OPT_DECODE_D0_MS * k, "d1_s", OPT_DECODE_D1_MS * k,
			"d2_s", OPT_DECODE_D2_MS * k, "min_active", (json_int_t)1,
			"max_active", (json_int_t)64, "min_kv_tokens", (json_int_t)0,
			"max_kv_tokens", (json_int_t)200000, "samples", (json_int_t)100,
			"rel_rms_error", 0.0,
			"handoff", "setup_s", OPT_KV_SETUP_MS * k,
			"per_token_s", OPT_KV_BYTES_PER_TOKEN / (OPT_KV_GBS * 1e9) / time_scale,
			"max_tokens", (json_int_t)OPT_MAX_LEN, "samples", (json_int_t)10));
	}
	doc = json_pack("{s:i, s:s, s:s, s:o}", "version", 1, "created_at",
	                "2026-12-01T20:00:00Z", "tool", "test-serve-common", "engines", engines);
	g_assert_cmpint(json_dump_file(doc, s->path, JSON_INDENT(1)), ==, 0);
	json_decref(doc);
}

void
serve_store_clear(struct serve_store *s)
{
	g_unlink(s->path);
	g_rmdir(s->dir);
	g_free(s->path);
	g_free(s->dir);
}

/* --- raw sockets --- */

int
serve_raw_connect(guint16 port)
{
	struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = htons(port) };
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	g_assert_cmpint(fd, >=, 0);
	inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
	g_assert_cmpint(connect(fd, (struct sockaddr *)&addr, sizeof addr), ==, 0);
	return fd;
}

void
serve_raw_send(int fd, const char *text, size_t len)
{
	size_t off = 0;

	while (off < len) {
		ssize_t n = send(fd, text + off, len - off, MSG_NOSIGNAL);

		g_assert_cmpint(n, >, 0);
		off += (size_t)n;
	}
}

gboolean
serve_raw_read_to_eof(int fd, GString *got, guint timeout_ms, gboolean *reset)
{
	gint64 deadline = g_get_monotonic_time() + (gint64)timeout_ms * 1000;

	*reset = FALSE;
	while (g_get_monotonic_time() < deadline) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		char buf[4096];
		ssize_t n;

		if (poll(&pfd, 1, 10) <= 0)
			continue;
		n = recv(fd, buf, sizeof buf, 0);
		if (n == 0)
			return TRUE;
		if (n < 0) {
			*reset = errno == ECONNRESET;
			return TRUE;
		}
		g_string_append_len(got, buf, n);
	}
	return FALSE;
}

GString *
serve_raw_exchange(guint16 port, const char *request, guint timeout_ms)
{
	GString *got = g_string_new(NULL);
	gboolean reset;
	int fd = serve_raw_connect(port);

	serve_raw_send(fd, request, strlen(request));
	g_assert_true(serve_raw_read_to_eof(fd, got, timeout_ms, &reset));
	close(fd);
	return got;
}
