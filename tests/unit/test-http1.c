/*
 * The engine client's HTTP/1.1 layer: the response parser on its own
 * (RFC 9112 framing), then the client (net/http1-client.c, through
 * net/upstream.h) against a scripted loopback server that misbehaves in
 * the ways engines and their proxies do: closing kept-alive connections,
 * answering in small pieces, truncating, sending no length, sending junk.
 */
#include "build-config.h"

#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gio/gio.h>
#include <glib-unix.h>
#include <glib.h>

#include "net/http1-parse.h"
#include "net/upstream.h"

/* --- the parser ----------------------------------------------------------- */

/* Decodes a whole response, fed `step` bytes at a time. Returns the body,
 * or NULL when the response is malformed or incomplete. */
static GString *
decode_all(const char *resp, size_t step, struct nw_h1_head *head)
{
	size_t size = strlen(resp), avail = MIN(step, size), off = 0;
	struct nw_h1_body body;
	GString *out = g_string_new(NULL);
	bool have_head = false;

	for (;;) {
		struct nw_h1_step st;

		if (!have_head) {
			ssize_t n = nw_h1_parse_head(resp + off, avail - off, false, head);

			if (n < 0)
				break;
			if (n > 0) {
				off += (size_t)n;
				if (head->status >= 200) {
					have_head = true;
					nw_h1_body_init(&body, head);
				}
				continue;
			}
		} else {
			nw_h1_body_step(&body, resp + off, avail - off, &st);
			if (st.kind == NW_H1_DONE)
				return out;
			if (st.kind == NW_H1_INVALID)
				break;
			if (st.kind != NW_H1_MORE) {
				if (st.kind == NW_H1_DATA)
					g_string_append_len(out, resp + off, (gssize)st.data_len);
				off += st.used;
				body = st.next;
				continue;
			}
		}
		if (avail == size) {
			if (have_head && body.framing == NW_H1_UNTIL_CLOSE)
				return out; /* EOF ends it */
			break;
		}
		avail = MIN(avail + step, size);
	}
	g_string_free(out, TRUE);
	return NULL;
}

static void
assert_body(const char *resp, const char *want, long status, enum nw_h1_framing framing,
            bool close)
{
	/* Every way of cutting the bytes gives the same answer. */
	for (size_t step = 1; step <= strlen(resp); step++) {
		struct nw_h1_head head;
		GString *got = decode_all(resp, step, &head);

		g_assert_nonnull(got);
		g_assert_cmpstr(got->str, ==, want);
		g_assert_cmpint(head.status, ==, status);
		g_assert_cmpint(head.framing, ==, framing);
		g_assert_cmpint(head.close, ==, close);
		g_string_free(got, TRUE);
	}
}

static void
assert_invalid(const char *resp)
{
	struct nw_h1_head head;
	GString *got = decode_all(resp, strlen(resp), &head);

	if (got != NULL)
		g_error("accepted: %s", resp);
}

static void
test_parse_length(void)
{
	g_test_summary("RFC 9112 6.3: a Content-Length body ends after its length; the "
	               "connection stays open for another request");
	assert_body("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
	            "content-length:  11 \r\n\r\n{\"ok\":true}",
	            "{\"ok\":true}", 200, NW_H1_LENGTH, false);
	assert_body("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", "", 200, NW_H1_LENGTH, false);
	/* Bare LF line ends are read too. */
	assert_body("HTTP/1.1 429 Too Many\nContent-Length: 2\n\nno", "no", 429, NW_H1_LENGTH, false);
}

static void
test_parse_chunked(void)
{
	g_test_summary("RFC 9112 7.1: chunked bodies with extensions and trailers are "
	               "decoded, whatever the cuts");
	assert_body("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
	            "6;name=value\r\ndata: \r\n1A\r\nabcdefghijklmnopqrstuvwxyz\r\n"
	            "0\r\nX-Trailer: yes\r\n\r\n",
	            "data: abcdefghijklmnopqrstuvwxyz", 200, NW_H1_CHUNKED, false);
	/* A length next to chunked is ignored, and the connection not trusted. */
	assert_body("HTTP/1.1 200 OK\r\nContent-Length: 99\r\nTransfer-Encoding: chunked\r\n\r\n"
	            "2\r\nok\r\n0\r\n\r\n",
	            "ok", 200, NW_H1_CHUNKED, true);
	/* Empty list elements and the coding's case do not matter. */
	assert_body("HTTP/1.1 200 OK\r\nTransfer-Encoding: , Chunked ,\r\n\r\n"
	            "2\r\nok\r\n0\r\n\r\n",
	            "ok", 200, NW_H1_CHUNKED, false);
	/* Leading zeros in a chunk size are allowed, however many. */
	assert_body("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
	            "000000000000000000002\r\nok\r\n00\r\n\r\n",
	            "ok", 200, NW_H1_CHUNKED, false);
	/* HTTP/1.0 has no Transfer-Encoding: never kept, even when asked. */
	assert_body("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n"
	            "2\r\nok\r\n0\r\n\r\n",
	            "ok", 200, NW_H1_CHUNKED, true);
}

static void
test_parse_close_and_empty(void)
{
	g_test_summary("RFC 9112 6.3: no length means the body runs to EOF; 1xx, 204 and 304 "
	               "have none; HTTP/1.0 and Connection: close end the connection");
	assert_body("HTTP/1.1 200 OK\r\n\r\nuntil close", "until close", 200, NW_H1_UNTIL_CLOSE, true);
	assert_body("HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nhi", "hi", 200, NW_H1_LENGTH, true);
	assert_body("HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 2\r\n\r\nhi", "hi",
	            200, NW_H1_LENGTH, false);
	assert_body("HTTP/1.1 200 OK\r\nConnection: foo, close\r\nContent-Length: 2\r\n\r\nhi", "hi",
	            200, NW_H1_LENGTH, true);
	assert_body("HTTP/1.1 204 No Content\r\n\r\n", "", 204, NW_H1_NO_BODY, false);
	assert_body("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n",
	            "", 304, NW_H1_NO_BODY, false);
}

static void
test_parse_invalid(void)
{
	GString *big = g_string_new("HTTP/1.1 200 OK\r\n");

	g_test_summary("Malformed heads and chunk syntax are refused, never guessed at");
	assert_invalid("HTTP/2 200 OK\r\n\r\n");
	assert_invalid("HTTP/1.1 20 OK\r\n\r\n");
	assert_invalid("HTTP/1.1 200OK\r\n\r\n");
	assert_invalid(" HTTP/1.1 200 OK\r\n\r\n");
	assert_invalid("HTTP/1.1 099 Low\r\n\r\n");
	assert_invalid("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nab");
	assert_invalid("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n");
	assert_invalid("HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n");
	assert_invalid("HTTP/1.1 200 OK\r\nX-A: 1\r\n folded\r\n\r\n");
	assert_invalid("HTTP/1.1 200 OK\r\nNo colon\r\n\r\n");
	assert_invalid("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n");
	assert_invalid("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000000\r\n");
	assert_invalid("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nokX\r\n0\r\n\r\n");
	assert_invalid("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\rjunk\r\nok\r\n0\r\n\r\n");
	/* A head that never ends within the limit. */
	while (big->len <= NW_H1_MAX_HEAD)
		g_string_append(big, "X-Padding: 0123456789abcdef0123456789abcdef\r\n");
	assert_invalid(big->str);
	g_string_free(big, TRUE);
}

static void
assert_coding_refused(const char *codings)
{
	g_autofree char *resp = g_strdup_printf("HTTP/1.1 200 OK\r\n%s\r\n\r\n2\r\nok\r\n0\r\n\r\n",
	                                        codings);
	struct nw_h1_head head;

	if (nw_h1_parse_head(resp, strlen(resp), false, &head) != NW_H1_HEAD_CODING)
		g_error("not refused as undecodable: %s", codings);
}

static void
test_parse_codings(void)
{
	struct nw_h1_head head;
	const char *gz = "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n";
	const char *gz204 = "HTTP/1.1 204 No Content\r\nTransfer-Encoding: gzip\r\n\r\n";

	/* Issue 9, the engine client: a transfer coding the client cannot
	 * decode fails the call; it is never passed on as identity. */
	g_test_summary("RFC 9112 6.1: a body whose transfer codings are not exactly one chunked "
	               "(gzip, chunked not last, chunked twice, identity) is refused as "
	               "undecodable; with no body to decode, the codings do not matter");
	assert_coding_refused("Transfer-Encoding: gzip");
	assert_coding_refused("Transfer-Encoding: gzip, chunked");
	assert_coding_refused("Transfer-Encoding: chunked, gzip");
	assert_coding_refused("Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip");
	assert_coding_refused("Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked");
	assert_coding_refused("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked");
	assert_coding_refused("Transfer-Encoding: identity");
	assert_coding_refused("Transfer-Encoding: chunked;q=1");
	assert_coding_refused("Transfer-Encoding: ");
	assert_coding_refused("Content-Length: 2\r\nTransfer-Encoding: deflate");
	g_assert_cmpint(nw_h1_parse_head(gz, strlen(gz), true, &head), ==, (ssize_t)strlen(gz));
	g_assert_cmpint(head.framing, ==, NW_H1_NO_BODY);
	g_assert_cmpint(nw_h1_parse_head(gz204, strlen(gz204), false, &head), ==,
	                (ssize_t)strlen(gz204));
}

static void
test_find_header(void)
{
	const char *head = "HTTP/1.1 503 Busy\r\nRetry-After:   7 \r\nx-request-id: abc\r\n\r\n";
	size_t len;
	const char *v;

	g_test_summary("Header look-ups ignore case and surrounding blanks");
	v = nw_h1_find_header(head, strlen(head), "retry-after", &len);
	g_assert_nonnull(v);
	g_assert_cmpmem(v, len, "7", 1);
	v = nw_h1_find_header(head, strlen(head), "X-Request-Id", &len);
	g_assert_cmpmem(v, len, "abc", 3);
	g_assert_null(nw_h1_find_header(head, strlen(head), "Retry", &len));
}

/* --- a scripted loopback server -------------------------------------------- */

/* What the server does with the n-th request it reads (over all
 * connections). */
struct action {
	const char *reply;    /* written back; NULL: nothing */
	size_t piece;         /* write in pieces this long, 2 ms apart; 0: at once */
	bool close;           /* close the connection after the reply */
};

struct server {
	int fd;
	guint16 port;
	const struct action *script;
	unsigned n_script;
	unsigned requests;    /* read so far */
	unsigned accepted;
	GString *last_request;
	GPtrArray *peers;     /* connections still open */
};

struct peer {
	struct server *srv;
	int fd;
	GString *in;
	guint watch;
	/* the reply being written */
	const struct action *act;
	size_t written;
};

static void peer_free(struct peer *p);

static gboolean
write_piece(gpointer data)
{
	struct peer *p = data;
	size_t len = strlen(p->act->reply) - p->written;

	if (p->act->piece && len > p->act->piece)
		len = p->act->piece;
	if (len > 0 && write(p->fd, p->act->reply + p->written, len) > 0)
		p->written += len;
	if (p->written < strlen(p->act->reply))
		return G_SOURCE_CONTINUE;
	if (p->act->close) {
		peer_free(p);
	} else {
		p->act = NULL;
	}
	return G_SOURCE_REMOVE;
}

/* A request is whole once its head and Content-Length body are in. The
 * head's end is looked for in its first HEAD_MAX bytes only: a search of
 * the whole buffer at every read made a 16 MiB body quadratic, some 20 s
 * under ASan, whose strstr measures the string first. */
#define HEAD_MAX 8192
static bool
take_request(struct peer *p)
{
	const char *end = g_strstr_len(p->in->str, (gssize)MIN(p->in->len, HEAD_MAX), "\r\n\r\n");
	const char *cl;
	size_t need;

	if (end == NULL)
		return false;
	cl = g_strstr_len(p->in->str, end - p->in->str, "Content-Length: ");
	need = (size_t)(end + 4 - p->in->str) + (cl ? strtoul(cl + 16, NULL, 10) : 0);
	if (p->in->len < need)
		return false;
	g_string_assign(p->srv->last_request, "");
	g_string_append_len(p->srv->last_request, p->in->str, (gssize)need);
	g_string_erase(p->in, 0, (gssize)need);
	return true;
}

static gboolean
on_peer(gint fd, GIOCondition cond, gpointer data)
{
	struct peer *p = data;
	struct server *srv = p->srv;
	char buf[4096];
	ssize_t n = read(fd, buf, sizeof buf);

	if (n <= 0) {
		p->watch = 0;
		peer_free(p);
		return G_SOURCE_REMOVE;
	}
	g_string_append_len(p->in, buf, n);
	while (p->act == NULL && take_request(p)) {
		const struct action *a = &srv->script[MIN(srv->requests, srv->n_script - 1)];

		srv->requests++;
		if (a->reply == NULL) {
			if (a->close) {
				p->watch = 0;
				peer_free(p);
				return G_SOURCE_REMOVE;
			}
			continue;
		}
		p->act = a;
		p->written = 0;
		if (a->piece)
			g_timeout_add(2, write_piece, p);
		else if (write_piece(p) == G_SOURCE_REMOVE && a->close)
			return G_SOURCE_REMOVE; /* p is gone */
	}
	return G_SOURCE_CONTINUE;
}

static void
peer_free(struct peer *p)
{
	if (p->watch)
		g_source_remove(p->watch);
	while (g_source_remove_by_user_data(p)) /* a pending write_piece */
		;
	g_ptr_array_remove_fast(p->srv->peers, p);
	close(p->fd);
	g_string_free(p->in, TRUE);
	g_free(p);
}

static gboolean
on_accept(gint fd, GIOCondition cond, gpointer data)
{
	struct server *srv = data;
	struct peer *p = g_new0(struct peer, 1);

	p->srv = srv;
	p->fd = accept(fd, NULL, NULL);
	g_assert_cmpint(p->fd, >=, 0);
	p->in = g_string_new(NULL);
	p->watch = g_unix_fd_add(p->fd, G_IO_IN | G_IO_HUP, on_peer, p);
	srv->accepted++;
	g_ptr_array_add(srv->peers, p);
	return G_SOURCE_CONTINUE;
}

static void
server_start(struct server *srv, const struct action *script, unsigned n)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof a;

	memset(srv, 0, sizeof *srv);
	srv->script = script;
	srv->n_script = n;
	srv->last_request = g_string_new(NULL);
	srv->peers = g_ptr_array_new();
	srv->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	g_assert_cmpint(bind(srv->fd, (struct sockaddr *)&a, sizeof a), ==, 0);
	g_assert_cmpint(listen(srv->fd, 16), ==, 0);
	getsockname(srv->fd, (struct sockaddr *)&a, &len);
	srv->port = ntohs(a.sin_port);
	g_unix_fd_add(srv->fd, G_IO_IN, on_accept, srv);
}

static void
server_stop(struct server *srv)
{
	g_source_remove_by_user_data(srv);
	while (srv->peers->len > 0)
		peer_free(srv->peers->pdata[0]);
	g_ptr_array_free(srv->peers, TRUE);
	close(srv->fd);
	g_string_free(srv->last_request, TRUE);
}

/* --- the client ------------------------------------------------------------ */

struct result {
	bool done;
	enum nw_upstream_code code;
	long status;
	char *error;
	GString *body;
	struct nw_upstream_call *call; /* set: look headers up in on_done */
	char *retry_after;
	bool started;         /* nw_upstream_start has returned */
	bool early;           /* on_done ran before that */
	bool pause_next;      /* refuse the next body bytes (pausing) */
	bool stop_reading;    /* take the next body bytes, then nw_upstream_pause */
	bool cancel_in_data;  /* cancel the call from inside on_data */
	unsigned data_calls;
};

static bool
on_body(void *data, const char *bytes, size_t len)
{
	struct result *r = data;

	r->data_calls++;
	if (r->cancel_in_data) {
		nw_upstream_cancel(r->call);
		return false;
	}
	if (r->pause_next) {
		r->pause_next = false;
		return false;
	}
	if (r->stop_reading) {
		r->stop_reading = false;
		nw_upstream_pause(r->call);
	}
	g_string_append_len(r->body, bytes, (gssize)len);
	return true;
}

static void
on_done(void *data, const struct nw_upstream_result *res)
{
	struct result *r = data;

	r->done = true;
	r->early = !r->started;
	r->code = res->code;
	r->status = res->status;
	r->error = g_strdup(res->error);
	if (r->call != NULL) {
		r->retry_after = g_strdup(nw_upstream_header(r->call, "Retry-After"));
		g_assert_cmpstr(nw_upstream_header(r->call, "RETRY-AFTER"), ==, r->retry_after);
		g_assert_null(nw_upstream_header(r->call, "X-Missing"));
	}
}

static const struct nw_upstream_handlers handlers = {
	.on_data = on_body, .on_done = on_done,
};

/* Starts req with a fresh result; on_done must not run before this returns. */
static void
start_call(struct nw_upstream *up, const struct nw_upstream_request *req, struct result *r)
{
	memset(r, 0, sizeof *r);
	r->body = g_string_new(NULL);
	g_assert_nonnull(nw_upstream_start(up, req, &handlers, r));
	r->started = true;
	g_assert_false(r->early);
}

static void
call(struct nw_upstream *up, const char *url, long timeout_ms, struct result *r)
{
	struct nw_upstream_request req = {
		.method = "POST", .url = url, .request_id = "rid-1",
		.body = "{\"a\":1}", .body_len = 7, .connect_timeout_ms = 2000, .timeout_ms = timeout_ms,
	};

	start_call(up, &req, r);
}

static void
wait_done(struct result *r)
{
	gint64 deadline = g_get_monotonic_time() + 5 * G_USEC_PER_SEC;

	while (!r->done && g_get_monotonic_time() < deadline)
		g_main_context_iteration(NULL, TRUE);
	g_assert_true(r->done);
	g_assert_false(r->early);
}

static void
settle(unsigned ms)
{
	gint64 until = g_get_monotonic_time() + ms * 1000;

	while (g_get_monotonic_time() < until)
		g_main_context_iteration(NULL, FALSE), g_usleep(500);
}

static void
result_clear(struct result *r)
{
	g_string_free(r->body, TRUE);
	g_free(r->retry_after);
	g_free(r->error);
}

static char *
url_of(struct server *srv, const char *host)
{
	return g_strdup_printf("http://%s:%u/v1/completions?x=1", host, srv->port);
}

/* Starts a GET whose handle the test keeps in r->call. */
static void
call_get(struct nw_upstream *up, const char *url, struct result *r)
{
	struct nw_upstream_request req = { .method = "GET", .url = url, .connect_timeout_ms = 2000 };

	r->call = nw_upstream_start(up, &req, &handlers, r);
	g_assert_nonnull(r->call);
	r->started = true;
}

#define OK_REPLY "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"

/* A scripted server and a client pool in front of it. */
struct env {
	struct server srv;
	struct nw_upstream *up;
	char *url;
};

static void
env_start_with(struct env *e, const struct action *script, unsigned n,
               const struct nw_upstream_options *uo, const char *host)
{
	server_start(&e->srv, script, n);
	e->up = nw_upstream_new(uo);
	e->url = url_of(&e->srv, host);
}

static void
env_start(struct env *e, const struct action *script, unsigned n, unsigned max_connections,
          const char *host)
{
	struct nw_upstream_options uo = { .max_connections = max_connections };

	env_start_with(e, script, n, &uo, host);
}

static void
env_stop(struct env *e)
{
	g_assert_cmpuint(nw_upstream_active(e->up), ==, 0);
	nw_upstream_free(e->up);
	server_stop(&e->srv);
	g_free(e->url);
}

/* One POST to its end: checks the outcome and, when given, the body;
 * returns the status. */
static long
exchange(struct env *e, long timeout_ms, enum nw_upstream_code code, const char *body)
{
	struct result r;
	long status;

	call(e->up, e->url, timeout_ms, &r);
	wait_done(&r);
	g_assert_cmpint(r.code, ==, code);
	if (body != NULL)
		g_assert_cmpstr(r.body->str, ==, body);
	status = r.status;
	result_clear(&r);
	return status;
}

static void
test_keep_alive_and_request(void)
{
	static const struct action script[] = { { OK_REPLY, 0, false } };
	struct env e;
	const char *sent;

	g_test_summary("Requests carry the method, path and query, Host, X-Request-Id, JSON "
	               "type and length; sequential calls share one kept-alive connection");
	env_start(&e, script, G_N_ELEMENTS(script), 4, "127.0.0.1");
	for (int i = 0; i < 5; i++)
		g_assert_cmpint(exchange(&e, 0, NW_UPSTREAM_OK, "hello"), ==, 200);
	g_assert_cmpuint(e.srv.accepted, ==, 1);
	sent = e.srv.last_request->str;
	g_assert_true(g_str_has_prefix(sent, "POST /v1/completions?x=1 HTTP/1.1\r\n"));
	g_assert_nonnull(strstr(sent, "\r\nX-Request-Id: rid-1\r\n"));
	g_assert_nonnull(strstr(sent, "\r\nContent-Type: application/json\r\n"));
	g_assert_nonnull(strstr(sent, "\r\nContent-Length: 7\r\n"));
	g_assert_true(g_str_has_suffix(sent, "\r\n\r\n{\"a\":1}"));
	env_stop(&e);
}

static void
test_engine_closes_idle(void)
{
	static const struct action script[] = {
		{ OK_REPLY, 0, true }, /* closes after answering, without saying so */
		{ NULL, 0, true },     /* reads the request, closes, answers nothing */
		{ OK_REPLY, 0, false },
	};
	struct env e;

	g_test_summary("An idle connection the engine closes is dropped, so the next request "
	               "opens a new one; a new connection closed unanswered is a failure");
	env_start(&e, script, G_N_ELEMENTS(script), 4, "127.0.0.1");
	exchange(&e, 0, NW_UPSTREAM_OK, "hello");
	settle(20);
	exchange(&e, 0, NW_UPSTREAM_RECV, NULL);
	exchange(&e, 0, NW_UPSTREAM_OK, "hello");
	g_assert_cmpuint(e.srv.accepted, ==, 3);
	env_stop(&e);
}

/* data: non-NULL runs the libcurl client (the https path) instead. */
static void
test_stale_reuse_not_resent(gconstpointer libcurl)
{
	static const struct action script[] = {
		{ OK_REPLY, 0, false },
		{ NULL, 0, true },     /* on the reused connection: read whole, dropped unanswered */
		{ OK_REPLY, 0, false },
	};
	struct nw_upstream_options uo = { .max_connections = 4, .use_libcurl = libcurl != NULL };
	struct env e;

	/* Issue 9, the engine client: a POST that may have been processed is
	 * never sent twice (a prefill sent twice orphans a KV lease). */
	g_test_summary("A reused connection that dies after the whole request was written, with "
	               "nothing read, fails the call: the engine saw the request exactly once");
	env_start_with(&e, script, G_N_ELEMENTS(script), &uo, "127.0.0.1");
	exchange(&e, 0, NW_UPSTREAM_OK, "hello");
	exchange(&e, 0, NW_UPSTREAM_RECV, NULL);
	g_assert_cmpuint(e.srv.requests, ==, 2);
	/* libcurl opens its fresh connection before it can be stopped. */
	g_assert_cmpuint(e.srv.accepted, ==, libcurl ? 2 : 1);
	settle(20); /* nothing goes out later either */
	g_assert_cmpuint(e.srv.requests, ==, 2);
	exchange(&e, 0, NW_UPSTREAM_OK, "hello");
	g_assert_cmpuint(e.srv.requests, ==, 3);
	env_stop(&e);
}

/* Resets every connection the server holds (RST, not FIN), at once. */
static void
server_reset_peers(struct server *srv)
{
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };

	while (srv->peers->len > 0) {
		struct peer *p = srv->peers->pdata[0];

		setsockopt(p->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
		peer_free(p);
	}
}

/* A POST of `size` bytes whose last byte is `mark`: answered, and the
 * server saw it whole. A send that stalls ends with the call's own
 * timeout, which wakes the loop (nothing else would). */
static void
exchange_large(struct env *e, size_t size, char mark)
{
	struct nw_upstream_request req = {
		.method = "POST", .url = e->url, .request_id = "rid-1",
		.owned_body = g_malloc(size), .body_len = size, .connect_timeout_ms = 2000,
		.timeout_ms = 20000,
	};
	const GString *got = e->srv.last_request;
	struct result r;

	memset(req.owned_body, 'x', size);
	req.owned_body[size - 1] = mark;
	start_call(e->up, &req, &r);
	while (!r.done)
		g_main_context_iteration(NULL, TRUE);
	g_assert_cmpint(r.code, ==, NW_UPSTREAM_OK);
	g_assert_cmpstr(r.body->str, ==, "hello");
	g_assert_cmpuint(got->len, >, size);
	g_assert_cmpint(got->str[got->len - 1], ==, mark);
	g_assert_cmpint(got->str[got->len - size], ==, 'x');
	result_clear(&r);
}

static void
test_large_body_waits_for_room(void)
{
	static const struct action script[] = { { OK_REPLY, 0, false } };
	struct env e;

	/* A send that meets a full socket waits for the edge saying there is
	 * room again (net/http1-client.c), on a new connection and on a kept
	 * one. */
	g_test_summary("A request body larger than the socket's buffers is written whole as the "
	               "engine reads it, and the connection then carries the next requests");
	env_start(&e, script, G_N_ELEMENTS(script), 4, "127.0.0.1");
	exchange_large(&e, 16u << 20, 'a');
	g_assert_cmpint(exchange(&e, 0, NW_UPSTREAM_OK, "hello"), ==, 200);
	exchange_large(&e, 16u << 20, 'b');
	g_assert_cmpuint(e.srv.accepted, ==, 1);
	env_stop(&e);
}

static void
test_unsent_request_resent(void)
{
	static const struct action script[] = { { OK_REPLY, 0, false } };
	struct env e;

	/* Issue 9, the engine client: a request is resent on a fresh
	 * connection when it provably did not reach the engine. */
	g_test_summary("A reused connection the engine reset before the request went out (the "
	               "write fails) gets the request on a fresh connection, and the caller sees "
	               "one clean answer");
	env_start(&e, script, G_N_ELEMENTS(script), 4, "127.0.0.1");
	exchange(&e, 0, NW_UPSTREAM_OK, "hello");
	/* The reset lands before the loop can notice it: the parked
	 * connection is reused and its write fails. */
	server_reset_peers(&e.srv);
	exchange(&e, 0, NW_UPSTREAM_OK, "hello");
	g_assert_cmpuint(e.srv.requests, ==, 2);
	g_assert_cmpuint(e.srv.accepted, ==, 2);
	env_stop(&e);
}

static void
test_undecodable_coding(gconstpointer libcurl)
{
	static const struct action script[] = {
		{ "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
		  "5\r\nhello\r\n0\r\n\r\n", 0, false },
		{ "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nConnection: close\r\n\r\nhello",
		  0, true },
		{ OK_REPLY, 0, false },
	};
	struct nw_upstream_options uo = { .max_connections = 4, .use_libcurl = libcurl != NULL };
	struct env e;

	/* Issue 9, the engine client: an undecodable transfer coding fails the
	 * call with a bad-response error (engine_bad_response); nothing of the
	 * body is handed on as if it were identity. */
	g_test_summary("A gzip transfer coding, with or without chunked, fails the call as a bad "
	               "response before any body byte is handed on; the next call is served");
	env_start_with(&e, script, G_N_ELEMENTS(script), &uo, "127.0.0.1");
	for (int i = 0; i < 2; i++) {
		struct result r;

		call(e.up, e.url, 0, &r);
		wait_done(&r);
		g_assert_cmpint(r.code, ==, NW_UPSTREAM_BAD_RESPONSE);
		g_assert_cmpuint(r.data_calls, ==, 0);
		g_assert_nonnull(strstr(r.error, "transfer coding"));
		result_clear(&r);
	}
	exchange(&e, 0, NW_UPSTREAM_OK, "hello");
	env_stop(&e);
}

static void
test_framings_over_the_wire(void)
{
	static const struct action script[] = {
		{ "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
		  "5\r\ndata:\r\n6\r\n token\r\n0\r\n\r\n", 3, false },
		{ "HTTP/1.1 503 Busy\r\nRetry-After: 3\r\nContent-Length: 4\r\n\r\nbusy", 0, false },
		{ "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n", 0, false },
		{ "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nto the end", 4, true },
	};
	struct env e;

	g_test_summary("Chunked answers in 3-byte pieces, error statuses with their bodies, an "
	               "interim 100 before a 204, and bodies that end at EOF all arrive whole");
	env_start(&e, script, G_N_ELEMENTS(script), 4, "127.0.0.1");
	g_assert_cmpint(exchange(&e, 0, NW_UPSTREAM_OK, "data: token"), ==, 200);
	g_assert_cmpint(exchange(&e, 0, NW_UPSTREAM_OK, "busy"), ==, 503);
	g_assert_cmpint(exchange(&e, 0, NW_UPSTREAM_OK, ""), ==, 204);
	g_assert_cmpuint(e.srv.accepted, ==, 1); /* all on one connection so far */
	g_assert_cmpint(exchange(&e, 0, NW_UPSTREAM_OK, "to the end"), ==, 200);
	env_stop(&e);
}

static void
test_header_lookup(void)
{
	static const struct action script[] = {
		{ "HTTP/1.1 429 Slow Down\r\nretry-after:  12 \r\nContent-Length: 0\r\n\r\n", 0, false },
	};
	struct env e;
	struct result r = { 0 };

	g_test_summary("Response headers can be looked up by any case until the call ends; a "
	               "GET has no body headers");
	env_start(&e, script, G_N_ELEMENTS(script), 4, "127.0.0.1");
	r.body = g_string_new(NULL);
	call_get(e.up, e.url, &r);
	wait_done(&r);
	g_assert_cmpstr(r.retry_after, ==, "12");
	g_assert_cmpint(r.status, ==, 429);
	g_assert_true(g_str_has_prefix(e.srv.last_request->str,
	                               "GET /v1/completions?x=1 HTTP/1.1\r\n"));
	g_assert_null(strstr(e.srv.last_request->str, "Content-Length"));
	result_clear(&r);
	env_stop(&e);
}

static void
test_failures(void)
{
	static const struct action script[] = {
		{ "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort", 0, true },
		{ "SMTP ready\r\n\r\n", 0, true },
		{ NULL, 0, false },    /* never answers */
	};
	struct env e;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof a;
	int fd;

	g_test_summary("Truncated bodies, junk heads, silence past the timeout and refused "
	               "connections fail with their own codes, never before start returns");
	env_start(&e, script, G_N_ELEMENTS(script), 4, "127.0.0.1");
	exchange(&e, 0, NW_UPSTREAM_RECV, NULL);
	exchange(&e, 0, NW_UPSTREAM_MALFORMED, NULL);
	exchange(&e, 150, NW_UPSTREAM_TIMEOUT, NULL);

	/* A port nobody listens on (bound, never listening). */
	fd = socket(AF_INET, SOCK_STREAM, 0);
	g_assert_cmpint(bind(fd, (struct sockaddr *)&a, sizeof a), ==, 0);
	getsockname(fd, (struct sockaddr *)&a, &len);
	g_free(e.url);
	e.url = g_strdup_printf("http://127.0.0.1:%u/", ntohs(a.sin_port));
	exchange(&e, 0, NW_UPSTREAM_CONNECT, NULL);
	close(fd);
	env_stop(&e);
}

static void
test_connect_timeout(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof a;
	struct nw_upstream_options uo = { .max_connections = 4 };
	struct nw_upstream_request req = {
		.method = "GET", .connect_timeout_ms = 200, .timeout_ms = 5000,
	};
	struct nw_upstream *up;
	struct result r = { 0 };
	g_autofree char *url = NULL;
	int fillers[4];
	int fd;

	g_test_summary("A connection that never completes fails at connect_timeout_ms, not at "
	               "the transfer's timeout (a loopback listener whose accept queue is full "
	               "drops new SYNs)");
	fd = socket(AF_INET, SOCK_STREAM, 0);
	g_assert_cmpint(bind(fd, (struct sockaddr *)&a, sizeof a), ==, 0);
	g_assert_cmpint(listen(fd, 0), ==, 0);
	getsockname(fd, (struct sockaddr *)&a, &len);
	for (unsigned i = 0; i < G_N_ELEMENTS(fillers); i++) {
		fillers[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
		(void)connect(fillers[i], (struct sockaddr *)&a, sizeof a);
	}
	settle(50);
	url = g_strdup_printf("http://127.0.0.1:%u/", ntohs(a.sin_port));
	req.url = url;
	up = nw_upstream_new(&uo);
	r.body = g_string_new(NULL);
	g_assert_nonnull(nw_upstream_start(up, &req, &handlers, &r));
	r.started = true;
	wait_done(&r);
	g_assert_cmpint(r.code, ==, NW_UPSTREAM_TIMEOUT);
	g_assert_true(g_str_has_prefix(r.error, "Connection timed out"));
	result_clear(&r);
	nw_upstream_free(up);
	for (unsigned i = 0; i < G_N_ELEMENTS(fillers); i++)
		close(fillers[i]);
	close(fd);
}

/* A resolver that knows two names: two.test, whose first address
 * (127.0.0.2) is black-holed by the test and whose second is the server,
 * and bad.test, which fails. It counts its look-ups. */
G_DECLARE_FINAL_TYPE(FakeResolver, fake_resolver, FAKE, RESOLVER, GResolver)

struct _FakeResolver {
	GResolver parent;
	unsigned lookups;
};

G_DEFINE_TYPE(FakeResolver, fake_resolver, G_TYPE_RESOLVER)

static GList *
fake_lookup(GResolver *r, const gchar *host, GCancellable *cancel, GError **error)
{
	((FakeResolver *)r)->lookups++;
	if (strcmp(host, "two.test") == 0)
		return g_list_append(g_list_append(NULL, g_inet_address_new_from_string("127.0.0.2")),
		                     g_inet_address_new_from_string("127.0.0.1"));
	g_set_error(error, G_RESOLVER_ERROR, G_RESOLVER_ERROR_NOT_FOUND, "no such test name");
	return NULL;
}

static void
fake_lookup_async(GResolver *r, const gchar *host, GCancellable *cancel,
                  GAsyncReadyCallback done, gpointer data)
{
	GTask *task = g_task_new(r, cancel, done, data);
	GError *error = NULL;
	GList *addrs = fake_lookup(r, host, cancel, &error);

	if (addrs != NULL)
		g_task_return_pointer(task, addrs, (GDestroyNotify)g_resolver_free_addresses);
	else
		g_task_return_error(task, error);
	g_object_unref(task);
}

static GList *
fake_lookup_finish(GResolver *r, GAsyncResult *res, GError **error)
{
	return g_task_propagate_pointer(G_TASK(res), error);
}

static void
fake_resolver_class_init(FakeResolverClass *klass)
{
	GResolverClass *rc = G_RESOLVER_CLASS(klass);

	rc->lookup_by_name = fake_lookup;
	rc->lookup_by_name_async = fake_lookup_async;
	rc->lookup_by_name_finish = fake_lookup_finish;
}

static void
fake_resolver_init(FakeResolver *self)
{
}

/* A client pool made while the fake resolver is the default. */
static struct nw_upstream *
upstream_with_resolver(FakeResolver **out)
{
	GResolver *saved = g_resolver_get_default();
	FakeResolver *fake = g_object_new(fake_resolver_get_type(), NULL);
	struct nw_upstream_options uo = { .max_connections = 4 };
	struct nw_upstream *up;

	g_resolver_set_default(G_RESOLVER(fake));
	up = nw_upstream_new(&uo);
	g_resolver_set_default(saved);
	g_object_unref(saved);
	*out = fake;
	return up;
}

static void
test_connect_slices_and_cache(void)
{
	static const struct action script[] = { { OK_REPLY, 0, true } }; /* a new connection each */
	struct sockaddr_in a = { .sin_family = AF_INET };
	struct server srv;
	FakeResolver *fake;
	struct nw_upstream *up;
	g_autofree char *url = NULL;
	int hole, fillers[4];

	/* Issue 9, the engine client: each resolved address gets its own slice
	 * of engine.connect_timeout_s; resolutions are cached for a bounded
	 * time. */
	g_test_summary("A host whose first address never answers (a full accept queue) is still "
	               "reached on its second within the connect timeout, and a second "
	               "connection uses the cached resolution");
	server_start(&srv, script, G_N_ELEMENTS(script));
	a.sin_addr.s_addr = htonl(0x7f000002);
	a.sin_port = htons(srv.port);
	hole = socket(AF_INET, SOCK_STREAM, 0);
	if (bind(hole, (struct sockaddr *)&a, sizeof a) != 0) {
		g_test_skip("cannot bind 127.0.0.2 with the server's port");
		close(hole);
		server_stop(&srv);
		return;
	}
	g_assert_cmpint(listen(hole, 0), ==, 0);
	for (unsigned i = 0; i < G_N_ELEMENTS(fillers); i++) {
		fillers[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
		(void)connect(fillers[i], (struct sockaddr *)&a, sizeof a);
	}
	settle(50);
	up = upstream_with_resolver(&fake);
	url = g_strdup_printf("http://two.test:%u/", srv.port);
	for (int i = 0; i < 2; i++) {
		struct nw_upstream_request req = {
			.method = "GET", .url = url, .connect_timeout_ms = 800, .timeout_ms = 5000,
		};
		struct result r = { 0 };
		int64_t t0 = g_get_monotonic_time();

		r.body = g_string_new(NULL);
		g_assert_nonnull(nw_upstream_start(up, &req, &handlers, &r));
		r.started = true;
		wait_done(&r);
		if (r.code != NW_UPSTREAM_OK)
			g_error("call %d: %d %s", i, r.code, r.error);
		g_assert_cmpstr(r.body->str, ==, "hello");
		/* The black hole had its half of the budget first. */
		g_assert_cmpint(g_get_monotonic_time() - t0, >=, 350 * 1000);
		result_clear(&r);
	}
	g_assert_cmpuint(srv.accepted, ==, 2);
	g_assert_cmpuint(fake->lookups, ==, 1);
	nw_upstream_free(up);
	g_object_unref(fake);
	for (unsigned i = 0; i < G_N_ELEMENTS(fillers); i++)
		close(fillers[i]);
	close(hole);
	server_stop(&srv);
}

/* Starts a GET to url on up and waits for its end. */
static void
get_to_end(struct nw_upstream *up, const char *url, struct result *r)
{
	memset(r, 0, sizeof *r);
	r->body = g_string_new(NULL);
	call_get(up, url, r);
	r->call = NULL;
	wait_done(r);
}

static void
test_resolve_errors(void)
{
	struct nw_upstream_options uo = { .max_connections = 4 };
	struct nw_upstream *up = nw_upstream_new(&uo);
	FakeResolver *fake;
	struct result r;

	/* Issue 9, the engine client: resolver errors are reported with their
	 * cause; a failed resolution is cached only briefly. */
	g_test_summary("A name that does not resolve (the .invalid TLD, RFC 6761) fails the call "
	               "as a resolve error naming the name and the resolver's cause; a second "
	               "call at once does not ask the resolver again");
	get_to_end(up, "http://narwhal-test.invalid:8000/v1/models", &r);
	g_test_message("%s", r.error);
	g_assert_cmpint(r.code, ==, NW_UPSTREAM_RESOLVE);
	g_assert_true(g_str_has_prefix(r.error, "Could not resolve narwhal-test.invalid: "));
	g_assert_cmpuint(strlen(r.error), >, strlen("Could not resolve narwhal-test.invalid: "));
	result_clear(&r);
	nw_upstream_free(up);

	up = upstream_with_resolver(&fake);
	for (int i = 0; i < 2; i++) {
		get_to_end(up, "http://bad.test:8000/", &r);
		g_assert_cmpint(r.code, ==, NW_UPSTREAM_RESOLVE);
		g_assert_cmpstr(r.error, ==, "Could not resolve bad.test: no such test name");
		result_clear(&r);
	}
	g_assert_cmpuint(fake->lookups, ==, 1);
	nw_upstream_free(up);
	g_object_unref(fake);
}

static void
test_pool_limit_and_names(void)
{
	static const struct action script[] = { { OK_REPLY, 1, false } };
	struct env e;
	struct result r[4];

	g_test_summary("Calls beyond max_connections wait for the connection in turn; a host "
	               "name is resolved (localhost: every address is tried)");
	env_start(&e, script, G_N_ELEMENTS(script), 1, "localhost");
	for (int i = 0; i < 4; i++)
		call(e.up, e.url, 0, &r[i]);
	for (int i = 0; i < 4; i++) {
		wait_done(&r[i]);
		g_assert_cmpint(r[i].code, ==, NW_UPSTREAM_OK);
		g_assert_cmpstr(r[i].body->str, ==, "hello");
		result_clear(&r[i]);
	}
	g_assert_cmpuint(e.srv.accepted, ==, 1);
	g_assert_cmpuint(e.srv.requests, ==, 4);
	env_stop(&e);
}


static void
test_pause_cancel_and_big_heads(void)
{
	static const struct action script[] = {
		{ "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
		  "3\r\none\r\n3\r\ntwo\r\n0\r\n\r\n", 0, false },
		{ OK_REPLY, 0, false },
		{ NULL, 0, false },    /* the big head, set below */
		{ OK_REPLY, 0, false },
	};
	struct action acts[G_N_ELEMENTS(script)];
	struct env e;
	struct result r = { 0 };
	GString *big = g_string_new("HTTP/1.1 200 OK\r\n");
	unsigned before;

	g_test_summary("A paused call gets the same bytes back from the loop after unpause, "
	               "never inside it; a call cancelled from its own on_data ends silently; "
	               "a 20 KiB head is read and its connection then serves on");
	while (big->len < 20 * 1024)
		g_string_append(big, "X-Padding: 0123456789abcdef0123456789abcdef\r\n");
	g_string_append(big, "Content-Length: 2\r\n\r\nok");
	memcpy(acts, script, sizeof acts);
	acts[2].reply = big->str;
	env_start(&e, acts, G_N_ELEMENTS(acts), 4, "127.0.0.1");

	r.body = g_string_new(NULL);
	r.pause_next = true;
	call_get(e.up, e.url, &r);
	while (r.data_calls == 0)
		g_main_context_iteration(NULL, TRUE);
	before = r.data_calls;
	nw_upstream_unpause(r.call);
	g_assert_cmpuint(r.data_calls, ==, before); /* nothing from inside */
	g_assert_false(r.done);
	r.call = NULL; /* not looked at in on_done */
	wait_done(&r);
	g_assert_cmpint(r.code, ==, NW_UPSTREAM_OK);
	g_assert_cmpstr(r.body->str, ==, "onetwo");
	result_clear(&r);

	memset(&r, 0, sizeof r);
	r.body = g_string_new(NULL);
	r.cancel_in_data = true;
	call_get(e.up, e.url, &r);
	while (r.data_calls == 0)
		g_main_context_iteration(NULL, TRUE);
	settle(20);
	g_assert_false(r.done);
	g_assert_cmpuint(nw_upstream_active(e.up), ==, 0);
	result_clear(&r);

	exchange(&e, 0, NW_UPSTREAM_OK, "ok");
	exchange(&e, 0, NW_UPSTREAM_OK, "hello");
	g_assert_cmpuint(e.srv.accepted, ==, 2); /* the cancel closed the first */
	env_stop(&e);
	g_string_free(big, TRUE);
}

/* Polls (bounded) until the client holds `want` read buffers. */
static void
wait_read_buffers(struct nw_upstream *up, unsigned want)
{
	gint64 deadline = g_get_monotonic_time() + 5 * G_USEC_PER_SEC;

	while (nw_upstream_read_buffers(up) != want && g_get_monotonic_time() < deadline)
		g_main_context_iteration(NULL, FALSE), g_usleep(500);
	g_assert_cmpuint(nw_upstream_read_buffers(up), ==, want);
}

static void
test_read_buffer_follows_bytes(void)
{
	static const struct action script[] = {
		/* An open stream: one event, then the engine thinks. */
		{ "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
		  "6\r\ndata: \r\n", 0, false },
		/* The next chunk's size line cut short: those bytes wait. */
		{ "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
		  "3\r\none\r\n1", 0, false },
		/* Paused by its reader: the bytes wait too. */
		{ "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
		  "3\r\none\r\n0\r\n\r\n", 0, false },
	};
	struct env e;
	struct result open = { 0 }, cut = { 0 }, paused = { 0 };

	/* Issue 15 (memory under many open streams): a call holds a read
	 * buffer only while unread bytes wait in it. */
	g_test_summary("A call waiting on an empty socket holds no read buffer; one with unread "
	               "bytes (a partial chunk line, a paused transfer) holds one until they are "
	               "taken");
	env_start(&e, script, G_N_ELEMENTS(script), 4, "127.0.0.1");

	open.body = g_string_new(NULL);
	call_get(e.up, e.url, &open);
	while (open.data_calls == 0)
		g_main_context_iteration(NULL, TRUE);
	g_assert_false(open.done);
	g_assert_cmpuint(nw_upstream_read_buffers(e.up), ==, 0);

	cut.body = g_string_new(NULL);
	call_get(e.up, e.url, &cut);
	while (cut.data_calls == 0)
		g_main_context_iteration(NULL, TRUE);
	wait_read_buffers(e.up, 1);

	paused.body = g_string_new(NULL);
	paused.pause_next = true;
	call_get(e.up, e.url, &paused);
	while (paused.data_calls == 0)
		g_main_context_iteration(NULL, TRUE);
	g_assert_cmpuint(nw_upstream_read_buffers(e.up), ==, 2);
	nw_upstream_unpause(paused.call);
	paused.call = NULL; /* not looked at in on_done */
	wait_done(&paused);
	g_assert_cmpstr(paused.body->str, ==, "one");
	g_assert_cmpuint(nw_upstream_read_buffers(e.up), ==, 1);

	g_assert_cmpstr(open.body->str, ==, "data: ");
	g_assert_false(open.done || cut.done);
	nw_upstream_cancel(open.call);
	nw_upstream_cancel(cut.call);
	g_assert_cmpuint(nw_upstream_read_buffers(e.up), ==, 0);
	result_clear(&open);
	result_clear(&cut);
	result_clear(&paused);
	env_stop(&e);
}

/* Bytes sent on fd that the peer has not acknowledged yet. */
static int
unacked(int fd)
{
	int n = -1;

	g_assert_cmpint(ioctl(fd, SIOCOUTQ, &n), ==, 0);
	return n;
}

static void
test_stop_reading(void)
{
	static const struct action script[] = {
		{ "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\none\r\n", 0, false },
	};
	static const char rest[] = "3\r\ntwo\r\n0\r\n\r\n";
	struct env e;
	struct result r = { 0 };
	struct peer *p;
	gint64 deadline = g_get_monotonic_time() + 5 * G_USEC_PER_SEC;

	/* Issue 15: a stream's backlog waits in the engine's socket, not in
	 * the router's memory. */
	g_test_summary("After nw_upstream_pause no more is read from the socket and no read "
	               "buffer is held; nw_upstream_unpause reads on");
	env_start(&e, script, G_N_ELEMENTS(script), 4, "127.0.0.1");
	r.body = g_string_new(NULL);
	r.stop_reading = true;
	call_get(e.up, e.url, &r);
	while (r.data_calls == 0)
		g_main_context_iteration(NULL, TRUE);
	/* The rest of the answer, sent once the call has stopped reading. */
	g_assert_cmpuint(e.srv.peers->len, ==, 1);
	p = e.srv.peers->pdata[0];
	g_assert_cmpint(write(p->fd, rest, sizeof rest - 1), ==, (ssize_t)(sizeof rest - 1));
	/* Until the client's side has them (acknowledged), then until the
	 * loop has nothing left to do. */
	while (unacked(p->fd) > 0 && g_get_monotonic_time() < deadline)
		g_usleep(200);
	g_assert_cmpint(unacked(p->fd), ==, 0);
	while (g_main_context_iteration(NULL, FALSE))
		;
	g_assert_cmpuint(r.data_calls, ==, 1);
	g_assert_false(r.done);
	g_assert_cmpstr(r.body->str, ==, "one");
	g_assert_cmpuint(nw_upstream_read_buffers(e.up), ==, 0);
	nw_upstream_unpause(r.call);
	r.call = NULL; /* not looked at in on_done */
	wait_done(&r);
	g_assert_cmpint(r.code, ==, NW_UPSTREAM_OK);
	g_assert_cmpstr(r.body->str, ==, "onetwo");
	g_assert_cmpuint(nw_upstream_read_buffers(e.up), ==, 0);
	result_clear(&r);
	env_stop(&e);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/http1/parse/length", test_parse_length);
	g_test_add_func("/http1/parse/chunked", test_parse_chunked);
	g_test_add_func("/http1/parse/close-and-empty", test_parse_close_and_empty);
	g_test_add_func("/http1/parse/invalid", test_parse_invalid);
	g_test_add_func("/http1/parse/codings", test_parse_codings);
	g_test_add_func("/http1/parse/find-header", test_find_header);
	g_test_add_func("/http1/client/keep-alive-and-request", test_keep_alive_and_request);
	g_test_add_func("/http1/client/engine-closes-idle", test_engine_closes_idle);
	g_test_add_data_func("/http1/client/stale-reuse-not-resent", NULL,
	                     test_stale_reuse_not_resent);
	g_test_add_data_func("/http1/libcurl/stale-reuse-not-resent", "libcurl",
	                     test_stale_reuse_not_resent);
	g_test_add_func("/http1/client/unsent-request-resent", test_unsent_request_resent);
	g_test_add_func("/http1/client/large-body-waits-for-room", test_large_body_waits_for_room);
	g_test_add_func("/http1/client/framings", test_framings_over_the_wire);
	g_test_add_data_func("/http1/client/undecodable-coding", NULL, test_undecodable_coding);
	g_test_add_data_func("/http1/libcurl/undecodable-coding", "libcurl",
	                     test_undecodable_coding);
	g_test_add_func("/http1/client/header-lookup", test_header_lookup);
	g_test_add_func("/http1/client/failures", test_failures);
	g_test_add_func("/http1/client/connect-timeout", test_connect_timeout);
	g_test_add_func("/http1/client/pool-limit-and-names", test_pool_limit_and_names);
	g_test_add_func("/http1/client/connect-slices-and-cache", test_connect_slices_and_cache);
	g_test_add_func("/http1/client/resolve-errors", test_resolve_errors);
	g_test_add_func("/http1/client/pause-cancel-big-head", test_pause_cancel_and_big_heads);
	g_test_add_func("/http1/client/read-buffer-follows-bytes", test_read_buffer_follows_bytes);
	g_test_add_func("/http1/client/stop-reading", test_stop_reading);
	return g_test_run();
}
