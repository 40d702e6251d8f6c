/*
 * The front door over raw sockets (issue 9, "The front door"): body
 * framing that libmicrohttpd would misread, the 413 a client reads even
 * when it sends its body without waiting, slow heads and bodies, the cap
 * on connections without a head, SIGHUP, and GET routes that keep the
 * connection alive for pipelined requests. Each test names its item; none
 * races a clock: every wait polls with a deadline.
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

#include <curl/curl.h>

#include "integration/test-serve-common.h"

static const char *const sim_fast[] = { "--engines", "2", "--time-scale", "50", NULL };

static unsigned
count(const char *hay, const char *needle)
{
	unsigned n = 0;

	for (const char *p = strstr(hay, needle); p != NULL; p = strstr(p + 1, needle))
		n++;
	return n;
}

/* The answer says it closes the connection (any case). */
static gboolean
says_close(const char *answer)
{
	g_autofree char *low = g_ascii_strdown(answer, -1);

	return strstr(low, "connection: close") != NULL;
}

static json_int_t
front_counter(struct serve_env *e, const char *name)
{
	struct sim_reply r;
	json_t *doc, *v;
	json_int_t n;

	sim_http(e->port, "GET", "/narwhal/health", NULL, NULL, 5000, &r);
	g_assert_cmpint(r.status, ==, 200);
	doc = sim_json(r.body->str);
	v = json_object_get(json_object_get(doc, "front_door"), name);
	g_assert_true(json_is_integer(v));
	n = json_integer_value(v);
	json_decref(doc);
	sim_reply_clear(&r);
	return n;
}

/* One request on a fresh connection: the single answer, then the close. */
static void
assert_refused_and_closed(struct serve_env *e, const char *request, const char *status_line,
                          const char *code)
{
	GString *got = g_string_new(NULL);
	gboolean reset;
	int fd = serve_raw_connect(e->port);

	serve_raw_send(fd, request, strlen(request));
	g_assert_true(serve_raw_read_to_eof(fd, got, 5000, &reset));
	if (!g_str_has_prefix(got->str, status_line))
		g_printerr("request:\n%s\nanswer:\n%s\n", request, got->str);
	g_assert_true(g_str_has_prefix(got->str, status_line));
	g_assert_false(reset);
	g_assert_true(says_close(got->str));
	/* Whatever followed in the same write was not run as a request. */
	g_assert_null(strstr(got->str, "HTTP/1.1 200"));
	/* (libmicrohttpd 0.9.75 repeats the head of its own answers, so one
	 * answer is counted only where the answer is Narwhal's.) */
	if (code != NULL)
		g_assert_cmpuint(count(got->str, "HTTP/1.1 "), ==, 1);
	if (code != NULL) {
		const char *json = strstr(got->str, "\r\n\r\n");
		g_autofree char *c = serve_error_code(json ? json + 4 : "");

		g_assert_cmpstr(c, ==, code);
	}
	close(fd);
	g_string_free(got, TRUE);
}

static void
test_content_length_and_chunked(void)
{
	struct serve_env e;

	g_test_summary("/front/framing/length-and-chunked (issue 9, front door: framing): a "
	               "request with both Content-Length and Transfer-Encoding is answered 400 "
	               "and closed; the bytes after it never run as a second request");
	if (!serve_start(&e, sim_fast, "pd", NULL))
		return;
	assert_refused_and_closed(&e,
	                          "POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
	                          "Content-Length: 48\r\nTransfer-Encoding: chunked\r\n\r\n"
	                          "0\r\n\r\n"
	                          "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n",
	                          "HTTP/1.1 400", "ambiguous_framing");
	g_assert_cmpint(front_counter(&e, "framing_refusals"), ==, 1);
	g_assert_cmpint(serve_counter(&e, "requests_models"), ==, 0);
	serve_clear(&e);
}

static void
test_space_before_colon(void)
{
	static const char *const requests[] = {
		"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length : 40\r\n\r\n"
		"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length\t: 40\r\n\r\n"
		"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding : chunked\r\n\r\n"
		"26\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n\r\n0\r\n\r\n",
	};
	struct serve_env e;

	g_test_summary("/front/framing/space-before-colon (issue 9, front door: framing; RFC 9112 "
	               "5.1): a header name with whitespace before its colon is answered 400 and "
	               "closed, so a body another hop would see is never run as a request");
	if (!serve_start(&e, sim_fast, "pd", NULL))
		return;
	for (size_t i = 0; i < G_N_ELEMENTS(requests); i++)
		assert_refused_and_closed(&e, requests[i], "HTTP/1.1 400", "invalid_header_name");
	g_assert_cmpint(front_counter(&e, "framing_refusals"), ==, 3);
	g_assert_cmpint(serve_counter(&e, "requests_models"), ==, 0);
	serve_clear(&e);
}

static void
test_absolute_form(void)
{
	struct serve_env e;
	g_autofree char *request = NULL;
	GString *got;

	g_test_summary("/front/absolute-form (RFC 9112 3.2.2): a request whose target is an "
	               "absolute URI is served as its path");
	if (!serve_start(&e, sim_fast, "pd", NULL))
		return;
	request = g_strdup_printf("GET http://127.0.0.1:%u/v1/models HTTP/1.1\r\nHost: x\r\n"
	                          "Connection: close\r\n\r\n", (unsigned)e.port);
	got = serve_raw_exchange(e.port, request, 5000);
	g_assert_true(g_str_has_prefix(got->str, "HTTP/1.1 200"));
	g_assert_nonnull(strstr(got->str, "\"object\":\"list\""));
	g_string_free(got, TRUE);
	serve_clear(&e);
}

static void
test_two_lengths(void)
{
	struct serve_env e;

	g_test_summary("/front/framing/two-lengths (issue 9, front door: framing): two "
	               "different Content-Length fields are answered 400 and closed, never read "
	               "by the first; a comma list is refused 400 and closed too");
	if (!serve_start(&e, sim_fast, "pd", NULL))
		return;
	assert_refused_and_closed(&e,
	                          "POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
	                          "Content-Length: 2\r\nContent-Length: 40\r\n\r\n"
	                          "{}GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n",
	                          "HTTP/1.1 400", "invalid_content_length");
	/* libmicrohttpd refuses a list in one field itself, before Narwhal
	 * sees the request: 400 and close, with its own body (docs/api.md). */
	assert_refused_and_closed(&e,
	                          "POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
	                          "Content-Length: 2, 40\r\n\r\n"
	                          "{}GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n",
	                          "HTTP/1.1 400", NULL);
	g_assert_cmpint(serve_counter(&e, "requests_models"), ==, 0);
	serve_clear(&e);
}

static void
test_unknown_coding(void)
{
	struct serve_env e;

	g_test_summary("/front/framing/unknown-coding (issue 9, front door: framing): a transfer "
	               "coding other than chunked is answered 501 and closed (it used to get no "
	               "answer at all); chunked twice or not last is 400");
	if (!serve_start(&e, sim_fast, "pd", NULL))
		return;
	assert_refused_and_closed(&e,
	                          "POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
	                          "Transfer-Encoding: gzip\r\n\r\nabc",
	                          "HTTP/1.1 501", "unsupported_transfer_encoding");
	assert_refused_and_closed(&e,
	                          "POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
	                          "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
	                          "HTTP/1.1 501", "unsupported_transfer_encoding");
	assert_refused_and_closed(&e,
	                          "POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
	                          "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n"
	                          "0\r\n\r\n",
	                          "HTTP/1.1 400", "invalid_transfer_encoding");
	g_assert_cmpint(front_counter(&e, "framing_refusals"), ==, 3);
	serve_clear(&e);
}

static void
test_413_read_by_eager_client(void)
{
	struct serve_env e;
	gsize big = 1u << 20;
	g_autofree char *body = g_malloc(big);

	g_test_summary("/front/413/eager-client (issue 9, front door: 413 delivered): a client "
	               "that sends a 1 MiB body without waiting for an answer reads the 413, "
	               "not a reset, every time (lingering close)");
	if (!serve_start(&e, sim_fast, "pd", "{\"serving\":{\"max_request_bytes\":400}}"))
		return;
	memset(body, 'x', big);
	for (int i = 0; i < 10; i++) {
		g_autofree char *head = g_strdup_printf("POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
		                                        "Content-Type: application/json\r\n"
		                                        "Content-Length: %zu\r\n\r\n", big);
		GString *got = g_string_new(NULL);
		gboolean reset;
		int fd = serve_raw_connect(e.port);

		serve_raw_send(fd, head, strlen(head));
		/* All of it, as an SDK does, before reading; a reset here or on
		 * the read is the failure. */
		serve_raw_send(fd, body, big);
		g_assert_true(serve_raw_read_to_eof(fd, got, 10000, &reset));
		g_assert_false(reset);
		g_assert_true(g_str_has_prefix(got->str, "HTTP/1.1 413"));
		g_assert_nonnull(strstr(got->str, "\"request_too_large\""));
		close(fd);
		g_string_free(got, TRUE);
	}
	g_assert_cmpint(front_counter(&e, "lingering_closes"), >=, 10);
	serve_clear(&e);
}

static void
test_chunked_413_closes_at_once(void)
{
	struct serve_env e;
	GString *got = g_string_new(NULL);
	gboolean reset;
	const char *head;
	int fd;

	g_test_summary("/front/413/chunked-at-once (issue 9, front door: 413 delivered): a "
	               "chunked body that passes max_request_bytes is answered 413 and closed "
	               "at once, without waiting for the body's end (which never comes here)");
	if (!serve_start(&e, sim_fast, "pd", "{\"serving\":{\"max_request_bytes\":400,"
	                 "\"request_timeout_s\":60}}"))
		return;
	fd = serve_raw_connect(e.port);
	head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
	serve_raw_send(fd, head, strlen(head));
	for (int i = 0; i < 8; i++) {
		char chunk[128];

		g_snprintf(chunk, sizeof chunk, "64\r\n%0100d\r\n", 0);
		serve_raw_send(fd, chunk, strlen(chunk));
	}
	/* No last chunk: the answer and the close must not wait for one. */
	g_assert_true(serve_raw_read_to_eof(fd, got, 5000, &reset));
	g_assert_true(g_str_has_prefix(got->str, "HTTP/1.1 413"));
	g_assert_nonnull(strstr(got->str, "\"request_too_large\""));
	g_assert_true(says_close(got->str));
	close(fd);
	g_assert_cmpint(serve_counter(&e, "too_large"), ==, 1);
	g_string_free(got, TRUE);
	serve_clear(&e);
}

static void
test_head_deadline(void)
{
	struct serve_env e;
	GString *got = g_string_new(NULL);
	gint64 deadline;
	gboolean closed = FALSE, reset;
	const char *head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ";
	int fd;

	g_test_summary("/front/slow/head-deadline (issue 9, front door: slow clients): a client "
	               "that trickles its head a byte at a time is closed once "
	               "server.head_timeout_s passes, though it is never idle");
	if (!serve_start(&e, sim_fast, "pd", "{\"server\":{\"head_timeout_s\":0.5}}"))
		return;
	fd = serve_raw_connect(e.port);
	deadline = g_get_monotonic_time() + 10 * G_USEC_PER_SEC;
	for (size_t i = 0; !closed && g_get_monotonic_time() < deadline; i++) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		char c = i < strlen(head) ? head[i] : 'a';

		/* A byte every 50 ms, and a look for the close in between. */
		if (send(fd, &c, 1, MSG_NOSIGNAL) != 1 || poll(&pfd, 1, 50) > 0)
			closed = serve_raw_read_to_eof(fd, got, 1000, &reset);
	}
	g_assert_true(closed);
	g_assert_cmpuint(got->len, ==, 0);
	g_assert_cmpint(front_counter(&e, "head_timeouts"), ==, 1);
	g_assert_true(serve_wait_log(&e, "\"event\":\"slow_clients_closed\"", 2000));
	close(fd);
	g_string_free(got, TRUE);
	serve_clear(&e);
}

static void
test_body_deadline(void)
{
	struct serve_env e;
	GString *got = g_string_new(NULL);
	gboolean reset;
	int fd;
	const char *req = "POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
	                  "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"a\":";

	g_test_summary("/front/slow/body-deadline (issue 9, front door: slow clients): a body "
	               "that does not arrive within server.body_timeout_s is answered 408 "
	               "request_timeout and closed");
	if (!serve_start(&e, sim_fast, "pd", "{\"server\":{\"body_timeout_s\":0.5}}"))
		return;
	fd = serve_raw_connect(e.port);
	serve_raw_send(fd, req, strlen(req));
	g_assert_true(serve_raw_read_to_eof(fd, got, 10000, &reset));
	g_assert_true(g_str_has_prefix(got->str, "HTTP/1.1 408"));
	g_assert_nonnull(strstr(got->str, "\"request_timeout\""));
	g_assert_cmpint(front_counter(&e, "body_timeouts"), ==, 1);
	g_assert_true(serve_wait_log(&e, "\"event\":\"slow_clients_closed\"", 2000));
	close(fd);
	g_string_free(got, TRUE);
	serve_clear(&e);
}

/* n connections, each with a head begun and never finished. */
static int *
open_slow_heads(guint16 port, unsigned n)
{
	int *fds = g_new(int, n);

	for (unsigned i = 0; i < n; i++) {
		fds[i] = serve_raw_connect(port);
		serve_raw_send(fds[i], "POST /v1/completions HTTP/1.1\r\nHost: x\r\n", 40);
	}
	return fds;
}

static void
close_all(int *fds, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		close(fds[i]);
	g_free(fds);
}

static void
test_pending_cap(void)
{
	struct serve_env e;
	GString *got = g_string_new(NULL);
	gboolean reset;
	int *fds;

	g_test_summary("/front/slow/pending-cap (issue 9, front door: slow clients): with "
	               "server.max_pending_connections heads pending, a new connection pushes "
	               "the oldest out and is itself answered");
	if (!serve_start(&e, sim_fast, "pd", "{\"server\":{\"max_pending_connections\":8}}"))
		return;
	fds = open_slow_heads(e.port, 8);
	/* Each pending head is counted once the daemon has accepted it: the
	 * health request (the ninth connection) then pushes out the first. */
	g_assert_cmpint(front_counter(&e, "pending_evictions"), >=, 1);
	g_assert_true(serve_raw_read_to_eof(fds[0], got, 5000, &reset));
	g_assert_cmpuint(got->len, ==, 0);
	close_all(fds, 8);
	g_string_free(got, TRUE);
	serve_clear(&e);
}

static void
test_good_client_among_slow_heads(void)
{
	struct serve_env e;
	unsigned n = 300;
	int *fds;

	g_test_summary("/front/slow/good-client-answered (issue 9, front door: slow clients): "
	               "with 300 connections holding unfinished heads, three times the "
	               "connection limit for admitted requests, well-behaved clients are "
	               "still answered and no slow head is pushed out");
	/* The limit for admitted requests (max_connections + queue_capacity +
	 * 64 = 96) is well below the slow heads, which are capped apart. */
	if (!serve_start(&e, sim_fast, "pd", "{\"serving\":{\"max_connections\":32}}"))
		return;
	fds = open_slow_heads(e.port, n);
	for (int i = 0; i < 20; i++) {
		g_autofree char *body = serve_completion_body(&e, 3, FALSE);
		struct sim_reply r;

		serve_post(&e, "/v1/completions", body, NULL, 10000, &r);
		g_assert_cmpint(r.status, ==, 200);
		sim_reply_clear(&r);
	}
	g_assert_cmpint(front_counter(&e, "pending_evictions"), ==, 0);
	close_all(fds, n);
	serve_clear(&e);
}

static void
test_sighup_stream_goes_on(void)
{
	const char *const args[] = { "--engines", "2", "--time-scale", "1", NULL };
	struct serve_env e;
	GString *got = g_string_new(NULL);
	g_autofree char *body = NULL;
	int fd;

	g_test_summary("/front/sighup (issue 9, front door: SIGHUP; issue 11, reload): SIGHUP "
	               "during a stream reloads the unchanged file: the stream completes on the "
	               "generation that took it and the daemon stays up");
	if (!serve_start(&e, args, "pd", NULL))
		return;
	body = serve_completion_body(&e, 30, TRUE);
	fd = serve_raw_post(e.port, "/v1/completions", body, 0);
	g_assert_cmpint(fd, >=, 0);
	g_assert_true(serve_raw_read_until(fd, got, "\"text\"", 5000));
	g_subprocess_send_signal(e.daemon, SIGHUP);
	g_assert_true(serve_wait_log(&e, "\"event\":\"reload_applied\",\"generation\":\"1\","
	                                 "\"engines_added\":\"\",\"engines_removed\":\"\","
	                                 "\"plugins\":\"\",\"fields\":\"\",\"in_flight_old\":\"1\"",
	                             5000));
	g_assert_true(serve_raw_read_until(fd, got, "[DONE]", 30000));
	close(fd);
	/* Success is settled when the engine's transfer ends, just after the
	 * client's [DONE]: poll for it. */
	for (gint64 until = g_get_monotonic_time() + 5 * G_USEC_PER_SEC;
	     serve_counter(&e, "requests_ok") < 1 && g_get_monotonic_time() < until;)
		g_usleep(10000);
	g_assert_cmpint(serve_counter(&e, "requests_ok"), ==, 1);
	g_string_free(got, TRUE);
	serve_clear(&e);
}

static void
test_get_keeps_alive(void)
{
	struct serve_env e;
	GString *got = g_string_new(NULL);
	g_autofree char *body = NULL, *two = NULL;
	int fd;

	g_test_summary("/front/get-keep-alive (issue 9, front door: GET keep-alive): two GETs "
	               "pipelined in one write are both answered, and a GET followed by a POST "
	               "in one write gets both answers on the same connection");
	if (!serve_start(&e, sim_fast, "pd", NULL))
		return;
	fd = serve_raw_connect(e.port);
	two = g_strdup("GET /narwhal/health HTTP/1.1\r\nHost: x\r\n\r\n"
	               "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n");
	serve_raw_send(fd, two, strlen(two));
	g_assert_true(serve_raw_read_until(fd, got, "\"object\":\"list\"", 5000));
	g_assert_cmpuint(count(got->str, "HTTP/1.1 200"), ==, 2);
	g_assert_false(says_close(got->str));
	close(fd);

	g_string_truncate(got, 0);
	body = serve_completion_body(&e, 3, FALSE);
	two = (g_free(two), g_strdup_printf("GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
	                                    "POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
	                                    "Content-Type: application/json\r\n"
	                                    "Content-Length: %zu\r\n\r\n%s", strlen(body), body));
	fd = serve_raw_connect(e.port);
	serve_raw_send(fd, two, strlen(two));
	g_assert_true(serve_raw_read_until(fd, got, "\"text_completion\"", 10000));
	g_assert_cmpuint(count(got->str, "HTTP/1.1 200"), ==, 2);
	close(fd);
	g_string_free(got, TRUE);
	serve_clear(&e);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	g_test_add_func("/front/framing/length-and-chunked", test_content_length_and_chunked);
	g_test_add_func("/front/framing/two-lengths", test_two_lengths);
	g_test_add_func("/front/framing/space-before-colon", test_space_before_colon);
	g_test_add_func("/front/absolute-form", test_absolute_form);
	g_test_add_func("/front/framing/unknown-coding", test_unknown_coding);
	g_test_add_func("/front/413/eager-client", test_413_read_by_eager_client);
	g_test_add_func("/front/413/chunked-at-once", test_chunked_413_closes_at_once);
	g_test_add_func("/front/slow/head-deadline", test_head_deadline);
	g_test_add_func("/front/slow/body-deadline", test_body_deadline);
	g_test_add_func("/front/slow/pending-cap", test_pending_cap);
	g_test_add_func("/front/slow/good-client-answered", test_good_client_among_slow_heads);
	g_test_add_func("/front/sighup", test_sighup_stream_goes_on);
	g_test_add_func("/front/get-keep-alive", test_get_keeps_alive);
	return g_test_run();
}
