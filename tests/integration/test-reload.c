/*
 * Configuration reload (issue 11, "Configuration reload on SIGHUP";
 * docs/deployment.md, "Reloading the configuration"), against real
 * narwhal-sim engines and a real narwhal on loopback ephemeral ports.
 */
#include "build-config.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include <glib/gstdio.h>

#include "integration/test-serve-common.h"

/* The file narwhal re-reads: the defaults the common helpers use, the
 * given engines of the simulated fleet (index and role, "0p,1d"), and
 * extra settings merged over them. */
static void
write_config(struct serve_env *e, const char *engines, const char *extra)
{
	json_t *cfg = serve_base_config();
	json_t *all = json_object_get(e->sim.fleet, "engines");
	json_t *list = json_array();
	g_auto(GStrv) picks = g_strsplit(engines, ",", -1);

	json_object_set_new(cfg, "fleet", json_pack("{s:s, s:o}", "model", e->model, "engines", list));

	for (char **p = picks; *p != NULL; p++) {
		json_t *en = json_deep_copy(json_array_get(all, (size_t)(**p - '0')));

		json_object_set_new(en, "role", json_string((*p)[1] == 'd' ? "decode" : "prefill"));
		json_array_append_new(list, en);
	}
	if (extra != NULL) {
		json_t *x = sim_json(extra);

		serve_json_merge(cfg, x);
		json_decref(x);
	}
	g_assert_cmpint(json_dump_file(cfg, e->config_path, JSON_INDENT(1)), ==, 0);
	json_decref(cfg);
}

static unsigned
count_in_log(struct serve_env *e, const char *needle)
{
	g_autofree char *log = serve_log(e);
	unsigned n = 0;

	for (const char *p = strstr(log, needle); p != NULL; p = strstr(p + 1, needle))
		n++;
	return n;
}

/* SIGHUP, then wait (bounded) for the n-th line with this event. */
static gboolean
reload_and_wait(struct serve_env *e, const char *event, unsigned n)
{
	g_autofree char *needle = g_strdup_printf("\"event\":\"%s\"", event);
	gint64 deadline = g_get_monotonic_time() + 10 * G_USEC_PER_SEC;

	g_subprocess_send_signal(e->daemon, SIGHUP);
	while (count_in_log(e, needle) < n) {
		if (g_get_monotonic_time() > deadline)
			return FALSE;
		g_usleep(5000);
	}
	return TRUE;
}

static json_t *
engine_of(json_t *health, const char *id)
{
	size_t i;
	json_t *en;

	json_array_foreach(json_object_get(health, "engines"), i, en) {
		if (g_strcmp0(json_string_value(json_object_get(en, "id")), id) == 0)
			return en;
	}
	return NULL;
}

static const char *
sim_id(struct serve_env *e, unsigned i)
{
	return json_string_value(json_object_get(json_array_get(json_object_get(e->sim.fleet,
	                                                                         "engines"), i),
	                                         "id"));
}

static json_int_t
sim_tokens(struct serve_env *e, unsigned engine)
{
	json_t *st = sim_engine_stats(&e->sim, engine);
	json_int_t v = json_integer_value(json_object_get(st, "generation_tokens_total"));

	json_decref(st);
	return v;
}

/* --- bounded load ------------------------------------------------------- */

struct load {
	struct serve_env *env;
	unsigned requests;       /* each client sends this many, one after another */
	gint sent, failed;
	GString *failures;       /* what failed, for the report */
	GMutex lock;
};

/* A reply that is a whole success: 200, and a stream that ends with
 * [DONE] and carries no error event. */
static gboolean
reply_ok(const struct sim_reply *r, gboolean stream)
{
	g_autoptr(GPtrArray) events = NULL;

	if (r->status != 200)
		return FALSE;
	if (!stream)
		return TRUE;
	events = sim_sse_events(r->body->str);
	if (events->len == 0 || strcmp(g_ptr_array_index(events, events->len - 1), "[DONE]") != 0)
		return FALSE;
	for (guint i = 0; i < events->len; i++) {
		if (strstr(g_ptr_array_index(events, i), "\"error\"") != NULL)
			return FALSE;
	}
	return TRUE;
}

static gpointer
load_client(gpointer data)
{
	struct load *l = data;

	for (unsigned k = 0; k < l->requests; k++) {
		gboolean stream = k % 2 == 0;
		g_autofree char *body = serve_completion_body(l->env, 24, stream);
		struct sim_reply r;

		serve_post(l->env, "/v1/completions", body, NULL, 30000, &r);
		g_atomic_int_inc(&l->sent);
		if (!reply_ok(&r, stream)) {
			g_atomic_int_inc(&l->failed);
			g_mutex_lock(&l->lock);
			g_string_append_printf(l->failures, "status %ld: %.300s\n", r.status, r.body->str);
			g_mutex_unlock(&l->lock);
		}
		sim_reply_clear(&r);
	}
	return NULL;
}

#define CLIENTS 6

static void
load_start(struct load *l, struct serve_env *e, unsigned requests, GThread **threads)
{
	memset(l, 0, sizeof *l);
	l->env = e;
	l->requests = requests;
	l->failures = g_string_new(NULL);
	g_mutex_init(&l->lock);
	for (unsigned i = 0; i < CLIENTS; i++)
		threads[i] = g_thread_new("load", load_client, l);
}

static void
load_finish(struct load *l, GThread **threads)
{
	for (unsigned i = 0; i < CLIENTS; i++)
		g_thread_join(threads[i]);
	if (l->failed > 0)
		g_test_message("failed requests:\n%s", l->failures->str);
	g_string_free(l->failures, TRUE);
	g_mutex_clear(&l->lock);
}

/* Wait (bounded) until the load has sent at least n requests. */
static gboolean
load_reached(struct load *l, int n)
{
	gint64 deadline = g_get_monotonic_time() + 30 * G_USEC_PER_SEC;

	while (g_atomic_int_get(&l->sent) < n) {
		if (g_get_monotonic_time() > deadline)
			return FALSE;
		g_usleep(2000);
	}
	return TRUE;
}

/* --- tests ---------------------------------------------------------------- */

static const char *const sim_args[] = { "--engines", "4", "--time-scale", "5", NULL };

/* serve_start runs narwhal on the whole simulated fleet: run it again on
 * engines 0 (prefill), 1 and 2 (decode) of the four, from a file
 * written by write_config, which a reload re-reads. */
static gboolean
start_three(struct serve_env *e)
{
	g_autoptr(GSubprocessLauncher) launcher = NULL;
	GError *error = NULL;
	g_autofree char *log = NULL;
	const char *at;

	if (!serve_start(e, sim_args, NULL, NULL))
		return FALSE;
	g_assert_cmpint(serve_stop_daemon(e, SIGTERM, 10000), ==, 0);
	write_config(e, "0p,1d,2d", "{\"plugins\": {\"admission\": {\"config\": "
	                            "{\"retry_after_s\": 1}}}}");
	launcher = g_subprocess_launcher_new(G_SUBPROCESS_FLAGS_STDOUT_SILENCE);
	g_unlink(e->log_path);
	g_subprocess_launcher_set_stderr_file_path(launcher, e->log_path);
	g_subprocess_launcher_setenv(launcher, "G_DEBUG", "fatal-criticals", TRUE);
	e->daemon = g_subprocess_launcher_spawn(launcher, &error, g_getenv("NARWHAL_BIN"),
	                                        "--config", e->config_path, NULL);
	g_assert_no_error(error);
	g_assert_true(serve_wait_log(e, "\"event\":\"listening\"", 10000));
	log = serve_log(e);
	at = strstr(strstr(log, "\"event\":\"listening\""), "\"port\":\"");
	g_assert_nonnull(at);
	e->port = (guint16)atoi(at + strlen("\"port\":\""));
	g_assert_true(serve_wait_all_available(e, 10000));
	return TRUE;
}

/* Issue 11: "reload under load that adds an engine, removes one, swaps a
 * plugin's configuration and tightens a limit, with zero failed
 * requests"; the removed engine finishes its residents and takes no new
 * work, the added one serves once probed, and the counters go on. */
static void
test_reload_under_load(void)
{
	struct serve_env e;
	struct load l;
	GThread *threads[CLIENTS];
	json_t *health;
	json_int_t removed_tokens, added_tokens, ok_before, placed_at_reload;
	g_autofree char *big = NULL;
	struct sim_reply r;
	g_autofree char *log = NULL;

	if (!start_three(&e))
		return;
	ok_before = serve_counter(&e, "requests_ok");
	added_tokens = sim_tokens(&e, 3);
	g_assert_cmpint(added_tokens, ==, 0);

	load_start(&l, &e, 30, threads);
	g_assert_true(load_reached(&l, 40));
	/* Engine 2 out, engine 3 in; the admission plugin's configuration
	 * swapped; the body limit and the prefill slots tightened. */
	write_config(&e, "0p,1d,3d",
	             "{\"plugins\": {\"admission\": {\"config\": {\"retry_after_s\": 3}}},"
	             " \"serving\": {\"max_request_bytes\": 8192, \"prefill_concurrency\": 4}}");
	health = serve_health(&e);
	placed_at_reload = json_integer_value(json_object_get(engine_of(health, sim_id(&e, 0)),
	                                                      "legs_placed"));
	json_decref(health);
	g_assert_cmpint(placed_at_reload, >, 0);
	g_assert_true(reload_and_wait(&e, "reload_applied", 1));
	/* The old generation is freed once its last request left. */
	g_assert_true(serve_wait_log(&e, "\"event\":\"generation_freed\"", 20000));
	removed_tokens = sim_tokens(&e, 2);
	load_finish(&l, threads);

	g_assert_cmpint(l.failed, ==, 0);
	g_assert_cmpint(l.sent, ==, CLIENTS * 30);
	/* Counters continuous across the reload: every request counted once. */
	g_assert_cmpint(serve_counter(&e, "requests_ok"), ==, ok_before + CLIENTS * 30);
	g_assert_cmpint(serve_counter(&e, "requests_failed"), ==, 0);
	g_assert_cmpint(serve_counter(&e, "in_progress"), ==, 0);
	g_assert_cmpint(serve_counter(&e, "retained"), ==, 0);
	/* Nothing new went to the removed engine once its generation left;
	 * the added one served. */
	g_assert_cmpint(sim_tokens(&e, 2), ==, removed_tokens);
	g_assert_cmpint(sim_tokens(&e, 3), >, 0);
	health = serve_health(&e);
	/* A kept engine's own counts go on from where they were: engine 0,
	 * the only prefill engine, counts every request's prefill leg, the
	 * ones placed before the reload and the old generation's after it. */
	g_assert_cmpint(json_integer_value(json_object_get(engine_of(health, sim_id(&e, 0)),
	                                                   "legs_placed")), >=, CLIENTS * 30);
	g_assert_null(engine_of(health, sim_id(&e, 2)));
	g_assert_nonnull(engine_of(health, sim_id(&e, 3)));
	json_decref(health);

	log = serve_log(&e);
	/* The reload came with requests in flight, which finished on the old
	 * generation. */
	{
		const char *line = strstr(log, "\"event\":\"reload_applied\"");

		g_test_message("%.*s", (int)(strchr(line, '\n') - line), line);
		g_assert_null(g_strstr_len(line, strchr(line, '\n') - line, "\"in_flight_old\":\"0\""));
	}
	g_assert_nonnull(strstr(log, "\"event\":\"engine_removed\",\"engine\":\""));
	g_assert_nonnull(strstr(log, "\"state\":\"draining\""));
	g_assert_nonnull(strstr(log, "\"plugins\":\"admission: open (config)\""));
	g_assert_nonnull(strstr(log, "serving.max_request_bytes"));
	g_assert_nonnull(strstr(log, "serving.prefill_concurrency"));
	/* The tightened limit holds for new requests. */
	big = g_strdup_printf("{\"model\": \"%s\", \"prompt\": \"%0*d\", \"max_tokens\": 2}",
	                      e.model, 9000, 0);
	serve_post(&e, "/v1/completions", big, NULL, 10000, &r);
	serve_assert_error(&r, 413, "request_too_large");
	sim_reply_clear(&r);
	serve_clear(&e);
}

/* Issue 11: "an invalid file changes nothing and says why": the reason is
 * logged as file: json.path: problem, and the running configuration
 * serves on. A malformed file likewise. */
static void
test_reload_invalid(void)
{
	struct serve_env e;
	g_autofree char *log = NULL;
	g_autofree char *expect = NULL;
	g_autofree char *body = NULL;
	struct sim_reply r;
	json_t *health;

	if (!start_three(&e))
		return;
	write_config(&e, "0p,3d", "{\"serving\": {\"max_attempts\": 7}}");
	g_assert_true(reload_and_wait(&e, "reload_failed", 1));
	log = serve_log(&e);
	expect = g_strdup_printf("%s: serving.max_attempts: 7 is out of range", e.config_path);
	g_assert_nonnull(strstr(log, expect));
	g_assert_null(strstr(log, "\"event\":\"reload_applied\""));
	g_assert_true(g_file_set_contents(e.config_path, "{\"fleet\": ", -1, NULL));
	g_assert_true(reload_and_wait(&e, "reload_failed", 2));

	/* Nothing changed: the same engines, and requests are served. */
	health = serve_health(&e);
	g_assert_nonnull(engine_of(health, sim_id(&e, 2)));
	g_assert_null(engine_of(health, sim_id(&e, 3)));
	json_decref(health);
	body = serve_completion_body(&e, 4, FALSE);
	serve_post(&e, "/v1/completions", body, NULL, 10000, &r);
	g_assert_cmpint(r.status, ==, 200);
	sim_reply_clear(&r);
	serve_clear(&e);
}

/* Issue 11: "What cannot change without a restart (the listening address)
 * is refused with a clear message", naming the field and the running
 * value; nothing else in the file is applied either. */
static void
test_reload_port_refused(void)
{
	struct serve_env e;
	g_autofree char *log = NULL;
	json_t *health;

	if (!start_three(&e))
		return;
	write_config(&e, "0p,1d,3d", "{\"server\": {\"port\": 18123, \"host\": \"127.0.0.2\"}}");
	g_assert_true(reload_and_wait(&e, "reload_failed", 1));
	log = serve_log(&e);
	g_assert_nonnull(strstr(log, "server.port: cannot change without a restart (running: 0, "
	                             "file: 18123)"));
	g_assert_nonnull(strstr(log, "server.host: cannot change without a restart (running: "
	                             "\\\"127.0.0.1\\\", file: \\\"127.0.0.2\\\")"));
	health = serve_health(&e);
	g_assert_nonnull(engine_of(health, sim_id(&e, 2)));
	g_assert_null(engine_of(health, sim_id(&e, 3)));
	json_decref(health);
	serve_clear(&e);
}

/* Issue 11 (reload; no leak across reloads under the sanitizer build):
 * many reloads in a row, each swapping the fleet and a plugin's
 * configuration, with requests between them; every one applies, every
 * request succeeds, and the health route's pass count and counters go
 * on. Bounded: 12 reloads. */
static void
test_reload_many(void)
{
	struct serve_env e;
	json_int_t passes_before, passes_after;
	json_t *health;

	if (!start_three(&e))
		return;
	health = serve_health(&e);
	passes_before = json_integer_value(json_object_get(json_object_get(health, "monitor"),
	                                                   "passes"));
	json_decref(health);
	for (unsigned k = 1; k <= 12; k++) {
		g_autofree char *extra = g_strdup_printf(
			"{\"plugins\": {\"admission\": {\"config\": {\"retry_after_s\": %u}}}}", k);
		g_autofree char *body = serve_completion_body(&e, 4, k % 2 == 0);
		struct sim_reply r;

		write_config(&e, k % 2 ? "0p,1d,3d" : "0p,1d,2d", extra);
		g_assert_true(reload_and_wait(&e, "reload_applied", k));
		g_assert_true(serve_wait_all_available(&e, 10000));
		serve_post(&e, "/v1/completions", body, NULL, 10000, &r);
		g_assert_true(reply_ok(&r, k % 2 == 0));
		sim_reply_clear(&r);
	}
	g_assert_cmpint(serve_counter(&e, "requests_ok"), ==, 12);
	health = serve_health(&e);
	passes_after = json_integer_value(json_object_get(json_object_get(health, "monitor"),
	                                                  "passes"));
	g_assert_cmpint(passes_after, >, passes_before);
	json_decref(health);
	serve_clear(&e);
}

/* Issue 11 (reload on SIGHUP; `systemctl reload` may come as soon as the
 * process exists): a SIGHUP while Narwhal is still starting must not end
 * it (the default action of SIGHUP). Each start gets one once it loads
 * its plugins; it comes up and stops with status 0. Bounded: 5 starts. */
static void
test_reload_while_starting(void)
{
	struct serve_env e;

	if (!start_three(&e))
		return;
	g_assert_cmpint(serve_stop_daemon(&e, SIGTERM, 10000), ==, 0);
	for (unsigned k = 0; k < 5; k++) {
		g_autoptr(GSubprocessLauncher) l =
			g_subprocess_launcher_new(G_SUBPROCESS_FLAGS_STDOUT_SILENCE);
		g_autoptr(GSubprocess) p = NULL;
		GError *error = NULL;

		g_unlink(e.log_path);
		g_subprocess_launcher_set_stderr_file_path(l, e.log_path);
		p = g_subprocess_launcher_spawn(l, &error, g_getenv("NARWHAL_BIN"), "--config",
		                                e.config_path, NULL);
		g_assert_no_error(error);
		/* Once its dialect plugin is mapped it is past its configuration
		 * and building its daemon: the SIGHUP comes while it starts. */
		{
			g_autofree char *maps = g_strdup_printf("/proc/%s/maps",
			                                        g_subprocess_get_identifier(p));
			gboolean loaded = FALSE;

			for (gint64 end = g_get_monotonic_time() + 10 * G_USEC_PER_SEC;
			     !loaded && g_get_monotonic_time() < end;) {
				g_autofree char *text = NULL;

				loaded = g_file_get_contents(maps, &text, NULL, NULL) &&
				         strstr(text, "dialect-vllm") != NULL;
			}
		}
		g_subprocess_send_signal(p, SIGHUP);
		/* Up, or gone (then the wait below says how). */
		for (gint64 end = g_get_monotonic_time() + 10 * G_USEC_PER_SEC;
		     g_get_monotonic_time() < end && g_subprocess_get_identifier(p) != NULL &&
		     count_in_log(&e, "\"event\":\"listening\"") == 0;)
			g_usleep(2000);
		g_subprocess_send_signal(p, SIGTERM);
		g_assert_true(g_subprocess_wait(p, NULL, &error));
		g_assert_no_error(error);
		g_assert_false(g_subprocess_get_if_signaled(p));
		g_assert_cmpint(g_subprocess_get_exit_status(p), ==, 0);
	}
	serve_clear(&e);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/reload/issue-11/under-load", test_reload_under_load);
	g_test_add_func("/reload/issue-11/invalid-file", test_reload_invalid);
	g_test_add_func("/reload/issue-11/port-refused", test_reload_port_refused);
	g_test_add_func("/reload/issue-11/many", test_reload_many);
	g_test_add_func("/reload/issue-11/while-starting", test_reload_while_starting);
	return g_test_run();
}
