/*
 * The libcurl engine client, for https engines: one multi handle per pool,
 * bound to the GLib loop.
 *
 * - curl's sockets live in one private epoll set behind a single GLib fd
 *   source, with lazy deregistration.
 * - curl's timer callback only records a deadline; the deadline source
 *   drives curl.
 * - Easy handles are pooled and reused, aborted ones included.
 * - CURLMOPT_MAXCONNECTS is raised so bursts do not churn connections.
 */
#include "build-config.h"

#include "net/upstream-backend.h"

#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <curl/curl.h>
#include <glib-unix.h>
#include <glib.h>

#include "core/log.h"
#include "net/http1-parse.h"
#include "net/loop.h"

/* What we know of one of curl's sockets. */
struct sock {
	curl_socket_t fd;
	uint32_t events;  /* registered epoll events; 0 when not in the set */
	bool watched;     /* curl wants events; false after CURL_POLL_REMOVE */
};

struct nw_curl_pool {
	CURLM *multi;
	int epfd;
	GSource *io;
	GSource *timer;
	GHashTable *socks;    /* fd -> struct sock * */
	GQueue idle_easy;     /* pooled easy handles */
	GHashTable *calls;    /* running calls */
	GPtrArray *reap;      /* calls cancelled from inside curl */
	unsigned in_curl;     /* depth of socket_action calls */
	char *tls_ca_file;    /* NULL: the system's store */
	bool tls_no_verify;
};

struct curl_call {
	struct nw_upstream_call base;  /* tls = true */
	struct nw_curl_pool *up;
	CURL *easy;
	struct curl_slist *headers;
	char *body;
	struct nw_upstream_handlers handlers;
	void *data;
	bool responded;
	bool cancelled;
	bool head_request;
	bool has_body;
	bool bad_coding;   /* refused: a transfer coding other than chunked */
	bool not_resent;   /* refused: libcurl's resend of a body */
	unsigned attempts; /* connections the request was about to go out on */
	char errbuf[CURL_ERROR_SIZE];
};

static void drive(struct nw_curl_pool *up, curl_socket_t fd, int ev_bitmask);

/* --- sockets -------------------------------------------------------- */

static int
on_curl_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
	struct nw_curl_pool *up = userp;
	struct sock *s = g_hash_table_lookup(up->socks, GINT_TO_POINTER(fd));
	uint32_t want = 0;

	if (s == NULL) {
		s = g_new0(struct sock, 1);
		s->fd = fd;
		g_hash_table_insert(up->socks, GINT_TO_POINTER(fd), s);
	}
	if (what == CURL_POLL_REMOVE) {
		/* Keep an idle connection's fd in the set (reading only) and
		 * drop it if the engine closes it; reuse then costs nothing. */
		s->watched = false;
		if (s->events & EPOLLOUT) {
			struct epoll_event ev = { .events = EPOLLIN, .data.fd = fd };

			if (epoll_ctl(up->epfd, EPOLL_CTL_MOD, fd, &ev) == 0)
				s->events = EPOLLIN;
		}
		return 0;
	}
	if (what & CURL_POLL_IN)
		want |= EPOLLIN;
	if (what & CURL_POLL_OUT)
		want |= EPOLLOUT;
	s->watched = true;
	if (want != s->events) {
		struct epoll_event ev = { .events = want, .data.fd = fd };
		int op = s->events ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;

		if (epoll_ctl(up->epfd, op, fd, &ev) == 0)
			s->events = want;
	}
	return 0;
}

static int
on_curl_close_socket(void *clientp, curl_socket_t fd)
{
	struct nw_curl_pool *up = clientp;

	/* Forget the fd before its number can be reused by a new socket. */
	if (g_hash_table_remove(up->socks, GINT_TO_POINTER(fd)))
		epoll_ctl(up->epfd, EPOLL_CTL_DEL, fd, NULL);
	return close(fd);
}

static int
on_curl_timer(CURLM *multi, long timeout_ms, void *userp)
{
	struct nw_curl_pool *up = userp;

	/* Only record; the deadline source drives curl. */
	if (timeout_ms < 0)
		nw_deadline_source_set(up->timer, -1);
	else
		nw_deadline_source_set_in(up->timer, (int64_t)timeout_ms * 1000);
	return 0;
}

static gboolean
on_epoll_ready(gint epfd, GIOCondition cond, gpointer data)
{
	struct nw_curl_pool *up = data;
	struct epoll_event events[128];
	int n;

	do {
		n = epoll_wait(up->epfd, events, G_N_ELEMENTS(events), 0);
		for (int i = 0; i < n; i++) {
			curl_socket_t fd = events[i].data.fd;
			struct sock *s = g_hash_table_lookup(up->socks, GINT_TO_POINTER(fd));
			int mask = 0;

			if (s == NULL)
				continue;
			if (!s->watched) {
				/* An idle connection was closed by the engine. */
				epoll_ctl(up->epfd, EPOLL_CTL_DEL, fd, NULL);
				s->events = 0;
				continue;
			}
			if (events[i].events & EPOLLIN)
				mask |= CURL_CSELECT_IN;
			if (events[i].events & EPOLLOUT)
				mask |= CURL_CSELECT_OUT;
			if (events[i].events & (EPOLLERR | EPOLLHUP))
				mask |= CURL_CSELECT_ERR;
			drive(up, fd, mask);
		}
	} while (n == (int)G_N_ELEMENTS(events));
	return G_SOURCE_CONTINUE;
}

static void
on_timer(void *data)
{
	drive(data, CURL_SOCKET_TIMEOUT, 0);
}

/* --- calls ---------------------------------------------------------- */

/* libcurl's codes in Narwhal's own terms (net/upstream.h). */
static enum nw_upstream_code
code_of(CURLcode code)
{
	switch (code) {
	case CURLE_OK:
		return NW_UPSTREAM_OK;
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_RESOLVE_PROXY:
		return NW_UPSTREAM_RESOLVE;
	case CURLE_COULDNT_CONNECT:
		return NW_UPSTREAM_CONNECT;
	case CURLE_OPERATION_TIMEDOUT:
		return NW_UPSTREAM_TIMEOUT;
	case CURLE_SEND_ERROR:
	case CURLE_SEND_FAIL_REWIND:
		return NW_UPSTREAM_SEND;
	case CURLE_RECV_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_PARTIAL_FILE:
		return NW_UPSTREAM_RECV;
	case CURLE_WEIRD_SERVER_REPLY:
	case CURLE_UNSUPPORTED_PROTOCOL:
		return NW_UPSTREAM_MALFORMED;
	case CURLE_BAD_CONTENT_ENCODING:
		return NW_UPSTREAM_BAD_RESPONSE;
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CACERT_BADFILE:
	case CURLE_SSL_CERTPROBLEM:
	case CURLE_SSL_CIPHER:
	case CURLE_SSL_ENGINE_NOTFOUND:
	case CURLE_SSL_ENGINE_SETFAILED:
	case CURLE_SSL_ENGINE_INITFAILED:
	case CURLE_SSL_SHUTDOWN_FAILED:
	case CURLE_SSL_CRL_BADFILE:
	case CURLE_SSL_ISSUER_ERROR:
	case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
	case CURLE_SSL_INVALIDCERTSTATUS:
	case CURLE_SSL_CLIENTCERT:
	case CURLE_USE_SSL_FAILED:
		return NW_UPSTREAM_TLS;
	default:
		return NW_UPSTREAM_FAILED;
	}
}

static void
call_release(struct curl_call *call)
{
	struct nw_curl_pool *up = call->up;

	curl_multi_remove_handle(up->multi, call->easy);
	g_queue_push_head(&up->idle_easy, call->easy);
	g_hash_table_remove(up->calls, call);
	curl_slist_free_all(call->headers);
	g_free(call->body);
	g_free(call);
}

static void
finish_done_transfers(struct nw_curl_pool *up)
{
	CURLMsg *msg;
	int left;

	while ((msg = curl_multi_info_read(up->multi, &left)) != NULL) {
		struct curl_call *call = NULL;
		struct nw_upstream_result res = { 0 };

		if (msg->msg != CURLMSG_DONE)
			continue;
		curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&call);
		if (call == NULL || call->cancelled)
			continue; /* reaped below */
		res.code = code_of(msg->data.result);
		if (call->bad_coding) {
			res.code = NW_UPSTREAM_BAD_RESPONSE;
			g_strlcpy(call->errbuf, "The engine's response has a transfer coding other than "
			          "chunked, which the client cannot decode", sizeof call->errbuf);
		} else if (call->not_resent) {
			res.code = NW_UPSTREAM_RECV;
			g_strlcpy(call->errbuf, "The reused connection closed with no response after "
			          "the request went out; it is not sent again", sizeof call->errbuf);
		}
		curl_easy_getinfo(call->easy, CURLINFO_RESPONSE_CODE, &res.status);
		res.error = res.code == NW_UPSTREAM_OK ? NULL
		          : (call->errbuf[0] ? call->errbuf : curl_easy_strerror(msg->data.result));
		call->handlers.on_done(call->data, &res);
		call_release(call);
	}
}

/* After leaving curl: release calls cancelled from inside its callbacks,
 * then report finished transfers. Only at the outermost level. */
static void
reap(struct nw_curl_pool *up)
{
	if (up->in_curl > 0)
		return;
	for (guint i = 0; i < up->reap->len; i++)
		call_release(g_ptr_array_index(up->reap, i));
	g_ptr_array_set_size(up->reap, 0);
	finish_done_transfers(up);
}

static void
drive(struct nw_curl_pool *up, curl_socket_t fd, int ev_bitmask)
{
	int running;

	up->in_curl++;
	curl_multi_socket_action(up->multi, fd, ev_bitmask, &running);
	up->in_curl--;
	reap(up);
}

/* libcurl sends a request again on a fresh connection when a reused one
 * died with nothing read, whether or not the engine got it whole. It
 * cannot say how much went out, so a request with a body (a POST, maybe a
 * prefill holding a KV lease) is never resent: the call fails instead
 * (docs/deployment.md). */
static int
on_curl_prereq(void *userp, char *conn_primary_ip, char *conn_local_ip, int conn_primary_port,
               int conn_local_port)
{
	struct curl_call *call = userp;

	if (++call->attempts > 1 && call->has_body) {
		call->not_resent = true;
		return CURL_PREREQFUNC_ABORT;
	}
	return CURL_PREREQFUNC_OK;
}

/* libcurl passes a transfer coding other than chunked on still encoded
 * (unless asked to decode gzip): refuse such an answer, as the HTTP/1.1
 * client does (docs/deployment.md). */
static bool
decodable(struct curl_call *call, long status)
{
	struct curl_header *h;
	unsigned codings = 0;
	bool all_chunked = true;
	size_t amount;

	if (call->head_request || status == 204 || status == 304 ||
	    curl_easy_header(call->easy, "Transfer-Encoding", 0, CURLH_HEADER, -1, &h) != CURLHE_OK)
		return true;
	amount = h->amount;
	for (size_t i = 0; i < amount; i++) {
		if (curl_easy_header(call->easy, "Transfer-Encoding", i, CURLH_HEADER, -1, &h) !=
		    CURLHE_OK)
			return false;
		nw_h1_count_codings(h->value, h->value + strlen(h->value), &codings, &all_chunked);
	}
	return codings == 1 && all_chunked;
}

static size_t
on_curl_header(char *line, size_t size, size_t n, void *userp)
{
	struct curl_call *call = userp;
	size_t len = size * n;
	long status = 0;

	if (call->cancelled)
		return 0;
	/* The blank line ends a header block; skip interim 1xx blocks. */
	if (len <= 2 && (line[0] == '\r' || line[0] == '\n')) {
		curl_easy_getinfo(call->easy, CURLINFO_RESPONSE_CODE, &status);
		if (status >= 200 && !call->responded) {
			call->responded = true;
			if (!decodable(call, status)) {
				call->bad_coding = true;
				return 0; /* aborts the transfer */
			}
			if (call->handlers.on_response)
				call->handlers.on_response(call->data, status);
		}
	}
	return call->cancelled ? 0 : len;
}

static size_t
on_curl_write(char *bytes, size_t size, size_t n, void *userp)
{
	struct curl_call *call = userp;
	size_t len = size * n;

	if (call->cancelled)
		return 0;
	if (call->handlers.on_data && !call->handlers.on_data(call->data, bytes, len))
		return call->cancelled ? 0 : CURL_WRITEFUNC_PAUSE;
	return call->cancelled ? 0 : len;
}

static CURL *
easy_get(struct nw_curl_pool *up)
{
	CURL *easy = g_queue_pop_head(&up->idle_easy);

	if (easy != NULL)
		return easy;
	easy = curl_easy_init();
	if (easy == NULL)
		return NULL;
	/* Options that never change are set once. */
	curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(easy, CURLOPT_TCP_NODELAY, 1L);
	curl_easy_setopt(easy, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, on_curl_header);
	curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_curl_write);
	curl_easy_setopt(easy, CURLOPT_PREREQFUNCTION, on_curl_prereq);
	curl_easy_setopt(easy, CURLOPT_CLOSESOCKETFUNCTION, on_curl_close_socket);
	curl_easy_setopt(easy, CURLOPT_CLOSESOCKETDATA, up);
	if (up->tls_ca_file != NULL)
		curl_easy_setopt(easy, CURLOPT_CAINFO, up->tls_ca_file);
	if (up->tls_no_verify) {
		curl_easy_setopt(easy, CURLOPT_SSL_VERIFYPEER, 0L);
		curl_easy_setopt(easy, CURLOPT_SSL_VERIFYHOST, 0L);
	}
	return easy;
}

struct nw_upstream_call *
nw_curl_start(struct nw_curl_pool *up, const struct nw_upstream_request *req,
              const struct nw_upstream_handlers *handlers, void *data)
{
	struct curl_call *call;
	CURL *easy = easy_get(up);

	if (easy == NULL) {
		free(req->owned_body);
		return NULL;
	}
	call = g_new0(struct curl_call, 1);
	call->base.tls = true;
	call->up = up;
	call->easy = easy;
	call->handlers = *handlers;
	call->data = data;
	call->head_request = g_strcmp0(req->method, "HEAD") == 0;

	/* An empty Expect: stops curl waiting for 100-continue on big bodies. */
	call->headers = curl_slist_append(NULL, "Expect:");
	if (req->request_id) {
		char *h = g_strdup_printf("X-Request-Id: %s", req->request_id);
		call->headers = curl_slist_append(call->headers, h);
		g_free(h);
	}
	curl_easy_setopt(easy, CURLOPT_URL, req->url);
	curl_easy_setopt(easy, CURLOPT_PRIVATE, call);
	curl_easy_setopt(easy, CURLOPT_HEADERDATA, call);
	curl_easy_setopt(easy, CURLOPT_WRITEDATA, call);
	curl_easy_setopt(easy, CURLOPT_PREREQDATA, call);
	curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, call->errbuf);
	curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, req->connect_timeout_ms);
	curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, req->timeout_ms);
	if (req->owned_body != NULL || req->body != NULL) {
		/* An owned body is used as it is: no copy per call. */
		call->body = req->owned_body ? req->owned_body : g_memdup2(req->body, req->body_len);
		call->has_body = true;
		call->headers = curl_slist_append(call->headers, "Content-Type: application/json");
		curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body_len);
		curl_easy_setopt(easy, CURLOPT_POSTFIELDS, call->body);
		curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST,
		                 g_strcmp0(req->method, "POST") == 0 ? NULL : req->method);
	} else {
		curl_easy_setopt(easy, CURLOPT_HTTPGET, 1L);
		curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST,
		                 g_strcmp0(req->method, "GET") == 0 ? NULL : req->method);
	}
	curl_easy_setopt(easy, CURLOPT_HTTPHEADER, call->headers);

	g_hash_table_add(up->calls, call);
	if (curl_multi_add_handle(up->multi, easy) != CURLM_OK) {
		g_hash_table_remove(up->calls, call);
		g_queue_push_head(&up->idle_easy, easy);
		curl_slist_free_all(call->headers);
		g_free(call->body);
		g_free(call);
		return NULL;
	}
	return &call->base;
}

void
nw_curl_cancel(struct nw_upstream_call *base)
{
	struct curl_call *call = (struct curl_call *)base;
	struct nw_curl_pool *up;

	if (call == NULL || call->cancelled)
		return;
	up = call->up;
	call->cancelled = true;
	if (up->in_curl > 0)
		g_ptr_array_add(up->reap, call); /* removing inside curl is not allowed */
	else
		call_release(call);
}

void
nw_curl_unpause(struct nw_upstream_call *base)
{
	struct curl_call *call = (struct curl_call *)base;
	struct nw_curl_pool *up;

	if (call == NULL || call->cancelled)
		return;
	up = call->up;
	/* curl may deliver the held data to on_data right here; a handler
	 * that cancels must not free the call while curl still uses it, so
	 * count this as being inside curl and reap afterwards. */
	up->in_curl++;
	curl_easy_pause(call->easy, CURLPAUSE_CONT);
	up->in_curl--;
	reap(up);
}

const char *
nw_curl_header(struct nw_upstream_call *base, const char *name)
{
	struct curl_call *call = (struct curl_call *)base;
	struct curl_header *h = NULL;

	if (call == NULL || call->cancelled)
		return NULL;
	/* request -1: the last response, past any 1xx interim ones. */
	if (curl_easy_header(call->easy, name, 0, CURLH_HEADER, -1, &h) != CURLHE_OK)
		return NULL;
	return h->value;
}

unsigned
nw_curl_active(const struct nw_curl_pool *up)
{
	return g_hash_table_size(up->calls);
}

struct nw_curl_pool *
nw_curl_pool_new(const struct nw_upstream_options *opts)
{
	struct nw_curl_pool *up = g_new0(struct nw_curl_pool, 1);

	up->tls_ca_file = g_strdup(opts->tls_ca_file);
	up->tls_no_verify = opts->tls_no_verify;
	up->multi = curl_multi_init();
	up->epfd = epoll_create1(EPOLL_CLOEXEC);
	up->socks = g_hash_table_new_full(g_direct_hash, g_direct_equal, NULL, g_free);
	up->calls = g_hash_table_new(g_direct_hash, g_direct_equal);
	up->reap = g_ptr_array_new();
	g_queue_init(&up->idle_easy);

	curl_multi_setopt(up->multi, CURLMOPT_SOCKETFUNCTION, on_curl_socket);
	curl_multi_setopt(up->multi, CURLMOPT_SOCKETDATA, up);
	curl_multi_setopt(up->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
	curl_multi_setopt(up->multi, CURLMOPT_TIMERDATA, up);
	curl_multi_setopt(up->multi, CURLMOPT_MAXCONNECTS, 4096L);
	curl_multi_setopt(up->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, (long)opts->max_connections);

	up->io = g_unix_fd_source_new(up->epfd, G_IO_IN);
	g_source_set_callback(up->io, (GSourceFunc)(void (*)(void))on_epoll_ready, up, NULL);
	g_source_set_can_recurse(up->io, TRUE);
	g_source_set_name(up->io, "narwhal-upstream-io");
	g_source_attach(up->io, NULL);
	up->timer = nw_deadline_source_new("narwhal-upstream-timer", on_timer, up);
	return up;
}

void
nw_curl_pool_free(struct nw_curl_pool *up)
{
	GHashTableIter it;
	gpointer call;
	CURL *easy;

	if (up == NULL)
		return;
	g_hash_table_iter_init(&it, up->calls);
	while (g_hash_table_iter_next(&it, &call, NULL)) {
		struct curl_call *c = call;

		curl_multi_remove_handle(up->multi, c->easy);
		curl_easy_cleanup(c->easy);
		curl_slist_free_all(c->headers);
		g_free(c->body);
		g_free(c);
	}
	g_hash_table_destroy(up->calls);
	while ((easy = g_queue_pop_head(&up->idle_easy)) != NULL)
		curl_easy_cleanup(easy);
	/* Closes cached connections through the close-socket callback. */
	curl_multi_cleanup(up->multi);
	g_source_destroy(up->io);
	g_source_unref(up->io);
	nw_deadline_source_destroy(up->timer);
	close(up->epfd);
	g_hash_table_destroy(up->socks);
	g_ptr_array_free(up->reap, TRUE);
	g_free(up->tls_ca_file);
	g_free(up);
}
