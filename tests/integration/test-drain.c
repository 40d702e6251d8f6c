/*
 * Graceful shutdown (issue 11, "Graceful shutdown"; docs/deployment.md,
 * "Stopping: the drain") against real narwhal-sim engines and a real
 * narwhal on loopback ephemeral ports.
 */
#include "build-config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "integration/test-serve-common.h"

static const char *const sim_args[] = { "--engines", "4", "--time-scale", "1", NULL };

/* A raw client connection (kept alive between requests), or -1 when the
 * connection is refused (errno says why). */
static int
raw_connect(guint16 port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
		int saved = errno;

		close(fd);
		errno = saved;
		return -1;
	}
	return fd;
}

/* Send a request on fd and read its whole answer (head, and the body its
 * Content-Length gives). */
static void
raw_exchange(int fd, const char *method, const char *path, const char *body, GString *got)
{
	g_autofree char *req = g_strdup_printf("%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n"
	                                       "Content-Type: application/json\r\n"
	                                       "Content-Length: %zu\r\n\r\n%s",
	                                       method, path, body ? strlen(body) : 0,
	                                       body ? body : "");

	gint64 deadline = g_get_monotonic_time() + 5 * G_USEC_PER_SEC;
	const char *cl;
	size_t head, want;

	g_string_truncate(got, 0);
	g_assert_true(serve_send_all(fd, req));
	g_assert_true(serve_raw_read_until(fd, got, "\r\n\r\n", 5000));
	head = (size_t)(strstr(got->str, "\r\n\r\n") - got->str) + 4;
	cl = g_strstr_len(got->str, (gssize)head, "Content-Length: ");
	g_assert_nonnull(cl);
	want = head + (size_t)g_ascii_strtoull(cl + strlen("Content-Length: "), NULL, 10);
	while (got->len < want && g_get_monotonic_time() < deadline) {
		char buf[4096];
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t n;

		if (poll(&p, 1, 100) <= 0)
			continue;
		n = recv(fd, buf, sizeof buf, 0);
		if (n <= 0)
			break;
		g_string_append_len(got, buf, n);
	}
	g_assert_cmpuint(got->len, ==, want);
}

/* Wait (bounded) for the daemon to exit by itself; its exit status. */
static int
wait_exit(struct serve_env *e, guint timeout_ms)
{
	gint64 deadline = g_get_monotonic_time() + (gint64)timeout_ms * 1000;

	while (g_subprocess_get_identifier(e->daemon) != NULL && g_get_monotonic_time() < deadline)
		g_usleep(2000);
	if (g_subprocess_get_identifier(e->daemon) != NULL)
		return -1;
	return serve_stop_daemon(e, SIGTERM, 1000); /* reaps, sends nothing */
}

/* Wait (bounded) until a counter of narwhal's reaches n. */
static gboolean
wait_counter(struct serve_env *e, const char *name, json_int_t n)
{
	gint64 deadline = g_get_monotonic_time() + 20 * G_USEC_PER_SEC;

	while (serve_counter(e, name) < n) {
		if (g_get_monotonic_time() > deadline)
			return FALSE;
		g_usleep(5000);
	}
	return TRUE;
}

static gboolean
stream_done(const struct sim_reply *r)
{
	g_autoptr(GPtrArray) events = sim_sse_events(r->body->str);

	if (r->status != 200 || events->len == 0 ||
	    strcmp(g_ptr_array_index(events, events->len - 1), "[DONE]") != 0)
		return FALSE;
	for (guint i = 0; i < events->len; i++) {
		if (strstr(g_ptr_array_index(events, i), "\"error\"") != NULL)
			return FALSE;
	}
	return TRUE;
}

/* A stream ended by the stop: 200, then a terminal error event with
 * code shutting_down, and no [DONE]. */
static gboolean
stream_cut(const struct sim_reply *r)
{
	g_autoptr(GPtrArray) events = sim_sse_events(r->body->str);
	const char *last;

	if (r->status != 200 || events->len == 0)
		return FALSE;
	last = g_ptr_array_index(events, events->len - 1);
	return strstr(last, "\"error\"") != NULL && strstr(last, "\"shutting_down\"") != NULL;
}

#define STREAMS 50

/* Issue 11: "SIGTERM with 50 streams in flight finishing inside the drain
 * time" (zero failed); readiness turns false at the start of the drain;
 * a new connection is refused; a new request on an open keep-alive
 * connection gets 503 shutting_down with Retry-After. */
static void
test_drain_50_streams(void)
{
	struct serve_env e;
	struct serve_async *a[STREAMS];
	g_autofree char *body = NULL;
	g_autoptr(GString) got = g_string_new(NULL);
	g_autofree char *log = NULL;
	int ready_fd, post_fd, models_fd, fd;
	gint64 t0;
	unsigned done = 0;

	if (!serve_start(&e, sim_args, "ppdd", "{\"server\": {\"drain_timeout_s\": 30}}"))
		return;
	g_assert_true(serve_wait_all_available(&e, 10000));
	body = serve_completion_body(&e, 48, TRUE);
	for (unsigned i = 0; i < STREAMS; i++)
		a[i] = serve_post_async(&e, "/v1/completions", body, 60000);
	g_assert_true(wait_counter(&e, "retained", STREAMS));

	/* Three keep-alive connections, opened while serving. */
	ready_fd = raw_connect(e.port);
	post_fd = raw_connect(e.port);
	models_fd = raw_connect(e.port);
	g_assert_cmpint(ready_fd, >=, 0);
	g_assert_cmpint(post_fd, >=, 0);
	g_assert_cmpint(models_fd, >=, 0);
	raw_exchange(ready_fd, "GET", "/narwhal/health/ready", NULL, got);
	g_assert_true(g_str_has_prefix(got->str, "HTTP/1.1 200"));
	g_assert_nonnull(strstr(got->str, "{\"ready\":true}"));
	raw_exchange(post_fd, "GET", "/narwhal/health/ready", NULL, got);
	raw_exchange(models_fd, "GET", "/narwhal/health/ready", NULL, got);

	t0 = g_get_monotonic_time();
	g_subprocess_send_signal(e.daemon, SIGTERM);
	g_assert_true(serve_wait_log(&e, "\"event\":\"draining\",\"in_flight\":\"50\"", 5000));
	/* Readiness is false at once, while the streams go on. */
	raw_exchange(ready_fd, "GET", "/narwhal/health/ready", NULL, got);
	g_assert_true(g_str_has_prefix(got->str, "HTTP/1.1 503"));
	g_assert_nonnull(strstr(got->str, "{\"ready\":false,\"reason\":\"draining\"}"));
	/* A new request on an open connection: 503 with Retry-After. */
	raw_exchange(post_fd, "POST", "/v1/completions", body, got);
	g_assert_true(g_str_has_prefix(got->str, "HTTP/1.1 503"));
	g_assert_nonnull(strstr(got->str, "\"code\":\"shutting_down\""));
	g_assert_nonnull(g_strstr_len(got->str, -1, "Retry-After: 1\r\n"));
	raw_exchange(models_fd, "GET", "/v1/models", NULL, got);
	g_assert_true(g_str_has_prefix(got->str, "HTTP/1.1 503"));
	g_assert_nonnull(strstr(got->str, "\"code\":\"shutting_down\""));
	/* Both refusals are counted by their final answer (docs/metrics.md,
	 * narwhal_requests_total), and /metrics still answers. */
	raw_exchange(ready_fd, "GET", "/metrics", NULL, got);
	g_assert_true(g_str_has_prefix(got->str, "HTTP/1.1 200"));
	g_assert_nonnull(strstr(got->str, "narwhal_requests_total{route=\"completions\","
	                                  "status=\"503\",code=\"shutting_down\"} 1\n"));
	g_assert_nonnull(strstr(got->str, "narwhal_requests_total{route=\"models\","
	                                  "status=\"503\",code=\"shutting_down\"} 1\n"));
	/* A new connection is refused. */
	fd = raw_connect(e.port);
	g_assert_cmpint(fd, ==, -1);
	g_assert_cmpint(errno, ==, ECONNREFUSED);
	close(ready_fd);
	close(post_fd);
	close(models_fd);

	for (unsigned i = 0; i < STREAMS; i++) {
		struct sim_reply r;

		serve_async_join(a[i], &r, NULL);
		if (stream_done(&r))
			done++;
		else
			g_test_message("stream %u: status %ld: %.300s", i, r.status, r.body->str);
		sim_reply_clear(&r);
	}
	g_assert_cmpuint(done, ==, STREAMS);
	g_assert_cmpint(wait_exit(&e, 30000), ==, 0);
	g_assert_cmpint(g_get_monotonic_time() - t0, <, 30 * G_USEC_PER_SEC);
	log = serve_log(&e);
	g_assert_nonnull(strstr(log, "\"event\":\"drained\",\"finished\":\"50\""));
	{
		const char *line = strstr(log, "\"event\":\"drained\"");

		g_test_message("%.*s", (int)strcspn(line, "\n"), line);
	}
	g_assert_nonnull(strstr(log, "\"event\":\"stopped\",\"finished\":\"50\",\"ended\":\"0\""));
	g_assert_null(strstr(log, "\"event\":\"drain_cut\""));
	serve_clear(&e);
}

#define LONG_STREAMS 5

/* Start LONG_STREAMS streams that last far longer than the test (1,500
 * tokens at the simulator's real speed). */
static void
start_long_streams(struct serve_env *e, struct serve_async **a)
{
	g_autofree char *body = serve_completion_body(e, 1500, TRUE);

	for (unsigned i = 0; i < LONG_STREAMS; i++)
		a[i] = serve_post_async(e, "/v1/completions", body, 60000);
	/* Committed: their 200 is out (spec 4.3, when the decode leg goes). */
	g_assert_true(wait_counter(e, "decode_started", LONG_STREAMS));
}

static void
join_cut(struct serve_async **a)
{
	for (unsigned i = 0; i < LONG_STREAMS; i++) {
		struct sim_reply r;

		serve_async_join(a[i], &r, NULL);
		if (!stream_cut(&r))
			g_test_message("stream %u: status %ld: %.300s", i, r.status, r.body->str);
		g_assert_true(stream_cut(&r));
		sim_reply_clear(&r);
	}
}

/* Issue 11: "a second SIGTERM ends at once": the streams still in flight
 * end with their terminal error events, and the process exits 0. */
static void
test_second_sigterm(void)
{
	struct serve_env e;
	struct serve_async *a[LONG_STREAMS];
	g_autofree char *log = NULL;
	g_autoptr(GString) got = g_string_new(NULL);
	gint64 t0;
	int fd;

	if (!serve_start(&e, sim_args, "ppdd", "{\"server\": {\"drain_timeout_s\": 300}}"))
		return;
	g_assert_true(serve_wait_all_available(&e, 10000));
	start_long_streams(&e, a);
	fd = raw_connect(e.port);
	g_assert_cmpint(fd, >=, 0);
	g_subprocess_send_signal(e.daemon, SIGTERM);
	g_assert_true(serve_wait_log(&e, "\"event\":\"draining\"", 5000));
	/* Draining: the streams go on (the health route still answers on a
	 * connection opened before). */
	raw_exchange(fd, "GET", "/narwhal/health", NULL, got);
	g_assert_nonnull(strstr(got->str, "\"retained\":5,"));
	close(fd);
	t0 = g_get_monotonic_time();
	g_subprocess_send_signal(e.daemon, SIGTERM);
	g_assert_cmpint(wait_exit(&e, 10000), ==, 0);
	g_assert_cmpint(g_get_monotonic_time() - t0, <, 5 * G_USEC_PER_SEC);
	join_cut(a);
	log = serve_log(&e);
	g_assert_nonnull(strstr(log, "\"event\":\"drain_cut\",\"reason\":\"second_signal\","
	                             "\"in_flight\":\"5\""));
	g_assert_nonnull(strstr(log, "\"event\":\"stopped\",\"finished\":\"0\",\"ended\":\"5\""));
	serve_clear(&e);
}

/* Issue 11: "then ends the rest with their terminal error events": a
 * drain time that runs out ends the streams still in flight. */
static void
test_drain_timeout(void)
{
	struct serve_env e;
	struct serve_async *a[LONG_STREAMS];
	g_autofree char *log = NULL;
	gint64 t0, took;

	if (!serve_start(&e, sim_args, "ppdd", "{\"server\": {\"drain_timeout_s\": 1}}"))
		return;
	g_assert_true(serve_wait_all_available(&e, 10000));
	start_long_streams(&e, a);
	t0 = g_get_monotonic_time();
	g_subprocess_send_signal(e.daemon, SIGTERM);
	g_assert_cmpint(wait_exit(&e, 10000), ==, 0);
	took = g_get_monotonic_time() - t0;
	g_assert_cmpint(took, >=, G_USEC_PER_SEC);
	g_assert_cmpint(took, <, 5 * G_USEC_PER_SEC);
	join_cut(a);
	log = serve_log(&e);
	g_assert_nonnull(strstr(log, "\"event\":\"drain_cut\",\"reason\":\"drain_timeout\","
	                             "\"in_flight\":\"5\""));
	g_assert_null(strstr(log, "\"event\":\"drained\""));
	serve_clear(&e);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/drain/issue-11/sigterm-50-streams", test_drain_50_streams);
	g_test_add_func("/drain/issue-11/second-sigterm", test_second_sigterm);
	g_test_add_func("/drain/issue-11/drain-timeout", test_drain_timeout);
	return g_test_run();
}
