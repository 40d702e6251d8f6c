/*
 * Narwhal's own HTTP/1.1 client for plain-http engines.
 *
 * Why not libcurl here: on the serving path libcurl 7.88 spends two poll()
 * calls per transfer (a liveness check of the pooled connection, a
 * readiness check after sending) and about as much CPU again in its own
 * bookkeeping, which together were a third of a proxied request's cost.
 * What engines speak is small: one request at a time per connection,
 * responses framed by Content-Length, chunked or close.
 *
 * - Each connection joins the pool's epoll set once, edge-triggered, when
 *   it is opened; a request costs one sendmsg and, usually, one recv.
 * - A socket is read until a recv returns less than the room it was given
 *   (the kernel had no more), so no read ends in EAGAIN.
 * - Idle connections stay in the set; the engine closing one is noticed and
 *   the connection dropped. One that dies just as it is reused (nothing came
 *   back) gets the request again on a fresh connection, once.
 * - Calls beyond max_connections wait in arrival order.
 * - Connections and calls ended from inside an event batch are freed when
 *   the batch is over, so no event reaches freed memory.
 */
#include "build-config.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gio/gio.h>
#include <glib-unix.h>
#include <glib.h>

#include "net/http1-origin.h"
#include "net/http1-parse.h"
#include "net/timers.h"
#include "net/upstream-backend.h"

#define READ_BUFFER (16u * 1024u)
#define DEFAULT_CONNECT_TIMEOUT_MS 300000L

enum conn_state { CONN_RESOLVING, CONN_CONNECTING, CONN_BUSY, CONN_IDLE, CONN_DEAD };

struct resolve_ticket {
	struct conn *conn;      /* NULL once the connection is gone */
};

struct conn {
	struct nw_h1_pool *pool;
	struct nw_h1_origin *origin;
	enum conn_state state;
	int fd;
	struct h1_call *call;   /* while resolving, connecting or busy */
	GList idle_link;        /* in origin->idle */
	bool reused;            /* has carried a request before this one */
	bool peer_closed;       /* the engine has closed its side */
	char *in;               /* read buffer */
	size_t in_off, in_len, in_cap;
	struct resolve_ticket *ticket;
	GList *addrs;           /* resolved addresses (GInetAddress), owned */
	GList *next_addr;       /* the one to try next */
};

enum call_phase {
	CALL_WAITING,     /* for a connection */
	CALL_CONNECTING,
	CALL_SENDING,
	CALL_RECEIVING,
	CALL_FAILED,      /* failed where its handler may not run yet */
};

struct h1_call {
	struct nw_upstream_call base;  /* tls = false */
	struct nw_h1_pool *pool;
	struct nw_h1_target *target;
	struct conn *conn;
	enum call_phase phase;
	struct nw_upstream_handlers handlers;
	void *data;
	GList wait_link;        /* in pool->waiting */
	GList live_link;        /* in pool->live until ended */

	char *head_out;         /* the request head */
	size_t head_out_len;
	char *body;
	size_t body_len;
	size_t sent;            /* of head and body */
	bool head_request;

	long connect_timeout_ms, timeout_ms;
	int64_t started_us, connect_started_us;
	struct nw_timer deadline; /* the nearest limit, or a failure to report */

	bool have_head, paused, cancelled, retried, got_bytes;
	CURLcode failed_code;   /* with CALL_FAILED */
	struct nw_h1_head head;
	char *resp_head;        /* status line and headers, for look-ups */
	size_t resp_head_len;
	struct nw_h1_body body_state;
	size_t received;
	char error[160];
	GPtrArray *header_values; /* values handed out by nw_h1_header */
};

struct nw_h1_pool {
	unsigned max_connections;
	unsigned connections;   /* open or opening */
	int epfd;
	GSource *io;
	struct nw_timers *timers;
	struct nw_h1_targets *targets;
	GQueue waiting;         /* calls waiting for a connection */
	GQueue live;            /* calls not yet ended */
	GPtrArray *dead_calls;  /* ended calls and closed connections, freed */
	GPtrArray *dead_conns;  /* when the outermost entry point is left */
	unsigned depth;         /* nesting of entry points */
	unsigned defer;         /* >0: failures are reported from the timer */
	bool dispatching;
	GResolver *resolver;
};

static void call_pump(struct h1_call *call, bool try_read, bool until_empty);
static void call_send(struct h1_call *call);
static void conn_connect_next(struct conn *c);
static void pool_dispatch(struct nw_h1_pool *pool);

/* --- deadlines ----------------------------------------------------------- */

/* The call's nearest limit: the whole transfer's, and the connect's while
 * it connects. */
static void
call_update_deadline(struct h1_call *call)
{
	int64_t d = call->timeout_ms > 0 ? call->started_us + call->timeout_ms * 1000 : -1;

	if (call->phase == CALL_CONNECTING) {
		int64_t c = call->connect_started_us + call->connect_timeout_ms * 1000;

		d = d < 0 ? c : MIN(d, c);
	}
	nw_timer_set(call->pool->timers, &call->deadline, d);
}

/* --- entry and exit ------------------------------------------------------ */

static void
conn_free(struct conn *c)
{
	if (c->ticket != NULL)
		c->ticket->conn = NULL;
	g_list_free_full(c->addrs, g_object_unref);
	g_free(c->in);
	g_free(c);
}

static void
call_free(struct h1_call *call)
{
	g_free(call->head_out);
	g_free(call->body);
	g_free(call->resp_head);
	if (call->header_values != NULL)
		g_ptr_array_free(call->header_values, TRUE);
	g_free(call);
}

static void
enter(struct nw_h1_pool *pool)
{
	pool->depth++;
}

/* Leaving the outermost entry point frees what the batch ended. */
static void
leave(struct nw_h1_pool *pool)
{
	if (--pool->depth > 0)
		return;
	for (guint i = 0; i < pool->dead_calls->len; i++)
		call_free(pool->dead_calls->pdata[i]);
	g_ptr_array_set_size(pool->dead_calls, 0);
	for (guint i = 0; i < pool->dead_conns->len; i++)
		conn_free(pool->dead_conns->pdata[i]);
	g_ptr_array_set_size(pool->dead_conns, 0);
}

/* --- connections ---------------------------------------------------------- */

static void
conn_close(struct conn *c)
{
	struct nw_h1_pool *pool = c->pool;

	if (c->state == CONN_DEAD)
		return;
	if (c->state == CONN_IDLE)
		g_queue_unlink(&c->origin->idle, &c->idle_link);
	if (c->fd >= 0) {
		/* Explicitly: a forked child may briefly share the socket, and
		 * close() alone would then leave it in the set. */
		epoll_ctl(pool->epfd, EPOLL_CTL_DEL, c->fd, NULL);
		close(c->fd);
	}
	c->fd = -1;
	c->state = CONN_DEAD;
	c->call = NULL;
	pool->connections--;
	g_ptr_array_add(pool->dead_conns, c);
}

static void
conn_make_idle(struct conn *c)
{
	c->state = CONN_IDLE;
	c->call = NULL;
	c->reused = true;
	c->in_off = c->in_len = 0;
	g_queue_push_head_link(&c->origin->idle, &c->idle_link);
}

/* --- ending calls --------------------------------------------------------- */

/* Detaches the call from everything but the memory freed on leaving. */
static void
call_detach(struct h1_call *call)
{
	struct nw_h1_pool *pool = call->pool;

	nw_timer_cancel(pool->timers, &call->deadline);
	if (call->phase == CALL_WAITING && call->wait_link.data != NULL) {
		g_queue_unlink(&pool->waiting, &call->wait_link);
		call->wait_link.data = NULL;
	}
	if (call->conn != NULL) {
		call->conn->call = NULL;
		call->conn = NULL;
	}
	g_queue_unlink(&pool->live, &call->live_link);
	g_ptr_array_add(pool->dead_calls, call);
}

static void
call_finish(struct h1_call *call, CURLcode code, const char *error)
{
	struct nw_upstream_result res = {
		.code = code,
		.status = call->have_head ? call->head.status : 0,
		.error = code == CURLE_OK ? NULL : error,
	};

	if (call->conn != NULL && call->conn->state != CONN_IDLE)
		conn_close(call->conn);
	call_detach(call);
	call->cancelled = true; /* no callback after this one */
	call->handlers.on_done(call->data, &res);
	pool_dispatch(call->pool);
}

static void
call_fail(struct h1_call *call, CURLcode code, const char *fmt, ...) G_GNUC_PRINTF(3, 4);

/* Inside nw_h1_start, nw_h1_cancel or a dispatch, the failure is reported
 * from the timer: a handler must never run before nw_upstream_start has
 * returned, nor deep inside another call's teardown. */
static void
call_fail(struct h1_call *call, CURLcode code, const char *fmt, ...)
{
	struct nw_h1_pool *pool = call->pool;
	va_list ap;

	va_start(ap, fmt);
	g_vsnprintf(call->error, sizeof call->error, fmt, ap);
	va_end(ap);
	if (pool->defer == 0) {
		call_finish(call, code, call->error);
		return;
	}
	if (call->conn != NULL) {
		if (call->conn->state != CONN_IDLE)
			conn_close(call->conn);
		call->conn->call = NULL;
		call->conn = NULL;
	}
	if (call->phase == CALL_WAITING && call->wait_link.data != NULL) {
		g_queue_unlink(&pool->waiting, &call->wait_link);
		call->wait_link.data = NULL;
	}
	call->phase = CALL_FAILED;
	call->failed_code = code;
	nw_timer_set(pool->timers, &call->deadline, 0); /* long past */
}

/* Runs a handler; false when the call was cancelled meanwhile. */
#define CALLBACK(call, expr) ((expr), !(call)->cancelled)

/* --- sending -------------------------------------------------------------- */

static bool
call_uses(struct h1_call *call, struct conn *c)
{
	call->conn = c;
	c->call = call;
	return true;
}

/* Starts the request on a connected connection. */
static void
call_begin_exchange(struct h1_call *call)
{
	call->phase = CALL_SENDING;
	call->sent = 0;
	call_update_deadline(call);
	call_send(call);
}

/* The connection failed before the engine sent anything back. A reused
 * connection may simply have been closed by the engine as we reused it:
 * send again on a new one, once. */
static bool
call_retry_fresh(struct h1_call *call)
{
	struct conn *c = call->conn;

	if (c == NULL || !c->reused || call->got_bytes || call->retried)
		return false;
	call->retried = true;
	conn_close(c);
	call->conn = NULL;
	c->call = NULL;
	call->phase = CALL_WAITING;
	g_queue_push_head_link(&call->pool->waiting, &call->wait_link);
	call->wait_link.data = call;
	pool_dispatch(call->pool);
	return true;
}

static void
call_send(struct h1_call *call)
{
	struct conn *c = call->conn;

	while (call->sent < call->head_out_len + call->body_len) {
		struct iovec iov[2];
		struct msghdr msg = { .msg_iov = iov };
		ssize_t n;

		if (call->sent < call->head_out_len) {
			iov[0].iov_base = call->head_out + call->sent;
			iov[0].iov_len = call->head_out_len - call->sent;
			iov[1].iov_base = call->body;
			iov[1].iov_len = call->body_len;
			msg.msg_iovlen = call->body_len ? 2 : 1;
		} else {
			iov[0].iov_base = call->body + (call->sent - call->head_out_len);
			iov[0].iov_len = call->body_len - (call->sent - call->head_out_len);
			msg.msg_iovlen = 1;
		}
		n = sendmsg(c->fd, &msg, MSG_NOSIGNAL);
		if (n >= 0) {
			call->sent += (size_t)n;
			continue;
		}
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return; /* EPOLLOUT comes when there is room */
		if (!call_retry_fresh(call))
			call_fail(call, CURLE_SEND_ERROR, "Send failure: %s", g_strerror(errno));
		return;
	}
	call->phase = CALL_RECEIVING;
}

/* --- receiving ------------------------------------------------------------ */

enum progress { NEED_BYTES, STOPPED };

/* Parses and hands on what the buffer holds. STOPPED: the call ended,
 * was cancelled or paused; the caller must not touch it again. */
static enum progress
call_consume(struct h1_call *call)
{
	struct conn *c = call->conn;

	while (!call->have_head) {
		ssize_t n = nw_h1_parse_head(c->in + c->in_off, c->in_len - c->in_off,
		                             call->head_request, &call->head);

		if (n == 0)
			return NEED_BYTES;
		if (n < 0 || call->head.status == 101) {
			call_fail(call, CURLE_WEIRD_SERVER_REPLY, "The engine's response head is malformed");
			return STOPPED;
		}
		if (call->head.status < 200) { /* an interim response */
			c->in_off += (size_t)n;
			continue;
		}
		call->have_head = true;
		call->resp_head = g_strndup(c->in + c->in_off, (gsize)n);
		call->resp_head_len = (size_t)n;
		c->in_off += (size_t)n;
		nw_h1_body_init(&call->body_state, &call->head);
		if (call->handlers.on_response != NULL &&
		    !CALLBACK(call, call->handlers.on_response(call->data, call->head.status)))
			return STOPPED;
	}
	for (;;) {
		struct nw_h1_step st;
		bool taken = true;

		nw_h1_body_step(&call->body_state, c->in + c->in_off, c->in_len - c->in_off, &st);
		switch (st.kind) {
		case NW_H1_MORE:
			return NEED_BYTES;
		case NW_H1_INVALID:
			call_fail(call, CURLE_RECV_ERROR, "The engine's chunked body is malformed");
			return STOPPED;
		case NW_H1_DATA:
			if (call->handlers.on_data != NULL &&
			    !CALLBACK(call, taken = call->handlers.on_data(
			                  call->data, c->in + c->in_off + st.data_off, st.data_len)))
				return STOPPED;
			if (!taken) {
				call->paused = true;
				return STOPPED;
			}
			call->received += st.data_len;
			break;
		case NW_H1_FRAMING:
			break;
		case NW_H1_DONE: {
			bool keep = !call->head.close && !c->peer_closed &&
			            call->phase == CALL_RECEIVING && c->in_off + st.used == c->in_len;

			if (keep)
				conn_make_idle(c);
			call_finish(call, CURLE_OK, NULL);
			return STOPPED;
		}
		}
		c->in_off += st.used;
		call->body_state = st.next;
	}
}

static void
call_eof(struct h1_call *call)
{
	if (call->have_head && call->body_state.framing == NW_H1_UNTIL_CLOSE) {
		call_finish(call, CURLE_OK, NULL);
	} else if (!call->got_bytes) {
		if (!call_retry_fresh(call))
			call_fail(call, CURLE_GOT_NOTHING, "Empty reply from the engine");
	} else {
		call_fail(call, CURLE_PARTIAL_FILE,
		          "The engine closed the connection before its response ended");
	}
}

/* Room to read into: the unread bytes move to the front, and the buffer
 * grows only while a head does not fit. */
static size_t
conn_room(struct conn *c, bool reading_head)
{
	if (c->in_off > 0 && (c->in_off == c->in_len || c->in_cap - c->in_len < 2048)) {
		memmove(c->in, c->in + c->in_off, c->in_len - c->in_off);
		c->in_len -= c->in_off;
		c->in_off = 0;
	}
	if (c->in_len == c->in_cap && reading_head && c->in_cap < NW_H1_MAX_HEAD + READ_BUFFER) {
		c->in_cap *= 2;
		c->in = g_realloc(c->in, c->in_cap);
	}
	return c->in_cap - c->in_len;
}

/* Hands on buffered bytes, then reads while the socket may hold more.
 * try_read: read at least once. until_empty: read until EOF or EAGAIN,
 * because the engine has closed its side and no further edge will come. */
static void
call_pump(struct h1_call *call, bool try_read, bool until_empty)
{
	bool more = try_read;

	for (;;) {
		struct conn *c = call->conn;
		size_t room;
		ssize_t n;

		if (call_consume(call) == STOPPED)
			return;
		if (!more)
			return;
		room = conn_room(c, !call->have_head);
		if (room == 0) {
			call_fail(call, CURLE_WEIRD_SERVER_REPLY, "The engine's response head is too large");
			return;
		}
		n = recv(c->fd, c->in + c->in_len, room, 0);
		if (n > 0) {
			c->in_len += (size_t)n;
			call->got_bytes = true;
			/* Less than asked: the socket is empty for now. */
			more = until_empty || (size_t)n == room;
			continue;
		}
		if (n == 0) {
			call_eof(call);
			return;
		}
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return;
		if (call->got_bytes || !call_retry_fresh(call))
			call_fail(call, CURLE_RECV_ERROR, "Recv failure: %s", g_strerror(errno));
		return;
	}
}

/* --- connecting ----------------------------------------------------------- */

static void
conn_connected(struct conn *c)
{
	struct h1_call *call = c->call;

	c->state = CONN_BUSY;
	if (call != NULL)
		call_begin_exchange(call);
	else
		conn_make_idle(c); /* its call went away while it connected */
}

static void
conn_connect_failed(struct conn *c, int err)
{
	struct h1_call *call = c->call;

	if (c->fd >= 0) {
		epoll_ctl(c->pool->epfd, EPOLL_CTL_DEL, c->fd, NULL);
		close(c->fd);
		c->fd = -1;
	}
	if (c->next_addr != NULL) {
		conn_connect_next(c);
		return;
	}
	if (call == NULL) {
		conn_close(c);
		pool_dispatch(c->pool);
		return;
	}
	call_fail(call, err == ENOENT ? CURLE_COULDNT_RESOLVE_HOST : CURLE_COULDNT_CONNECT,
	          "Failed to connect to %s port %u: %s", c->origin->host, c->origin->port,
	          err == ENOENT ? "could not resolve the host" : g_strerror(err));
}

static void
conn_connect_to(struct conn *c, GSocketAddress *addr)
{
	struct sockaddr_storage ss;
	int one = 1;
	int family = g_socket_address_get_family(addr) == G_SOCKET_FAMILY_IPV6 ? AF_INET6 : AF_INET;
	struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.ptr = c };

	c->state = CONN_CONNECTING;
	c->fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (c->fd < 0 || !g_socket_address_to_native(addr, &ss, sizeof ss, NULL)) {
		conn_connect_failed(c, c->fd < 0 ? errno : EINVAL);
		return;
	}
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	setsockopt(c->fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
	if (connect(c->fd, (struct sockaddr *)&ss, (socklen_t)g_socket_address_get_native_size(addr)) != 0 &&
	    errno != EINPROGRESS) {
		conn_connect_failed(c, errno);
		return;
	}
	/* Joined after connect(), so readiness is reported whether or not it
	 * completed at once: edges are never missed. */
	if (epoll_ctl(c->pool->epfd, EPOLL_CTL_ADD, c->fd, &ev) != 0)
		conn_connect_failed(c, errno);
}

static void
conn_connect_next(struct conn *c)
{
	GInetAddress *a = c->next_addr->data;
	GSocketAddress *sa = g_inet_socket_address_new(a, c->origin->port);

	c->next_addr = c->next_addr->next;
	conn_connect_to(c, sa);
	g_object_unref(sa);
}

static void
on_resolved(GObject *source, GAsyncResult *res, gpointer data)
{
	struct resolve_ticket *ticket = data;
	struct conn *c = ticket->conn;
	GList *addrs = g_resolver_lookup_by_name_finish(G_RESOLVER(source), res, NULL);

	g_free(ticket);
	if (c == NULL) { /* the connection was dropped meanwhile */
		g_resolver_free_addresses(addrs);
		return;
	}
	c->ticket = NULL;
	enter(c->pool);
	c->addrs = addrs;
	c->next_addr = addrs;
	if (addrs == NULL)
		conn_connect_failed(c, ENOENT);
	else
		conn_connect_next(c);
	leave(c->pool);
}

/* A new connection for the call. */
static void
call_open_connection(struct h1_call *call)
{
	struct nw_h1_pool *pool = call->pool;
	struct conn *c = g_new0(struct conn, 1);
	struct nw_h1_origin *o = call->target->origin;

	c->pool = pool;
	c->origin = o;
	c->fd = -1;
	c->in_cap = READ_BUFFER;
	c->in = g_malloc(c->in_cap);
	c->idle_link.data = c;
	pool->connections++;
	call_uses(call, c);
	call->phase = CALL_CONNECTING;
	call->connect_started_us = g_get_monotonic_time();
	call_update_deadline(call);
	if (o->literal != NULL) {
		conn_connect_to(c, o->literal);
	} else {
		c->state = CONN_RESOLVING;
		c->ticket = g_new0(struct resolve_ticket, 1);
		c->ticket->conn = c;
		g_resolver_lookup_by_name_async(pool->resolver, o->host, NULL, on_resolved, c->ticket);
	}
}

/* Gives waiting calls connections, in arrival order, while there is room:
 * an idle one to their engine, a new one, or a new one in place of an idle
 * one to another engine. */
static void
pool_dispatch(struct nw_h1_pool *pool)
{
	struct h1_call *call;

	if (pool->dispatching)
		return; /* the outer loop carries on */
	pool->dispatching = true;
	pool->defer++;
	while ((call = g_queue_peek_head(&pool->waiting)) != NULL) {
		struct nw_h1_origin *o = call->target->origin;
		struct conn *idle = g_queue_peek_head(&o->idle);

		if (idle != NULL && call->retried) {
			/* It may be as stale as the one that just failed. */
			conn_close(idle);
			idle = NULL;
		}
		if (idle == NULL && pool->connections >= pool->max_connections) {
			struct nw_h1_origin *other = nw_h1_targets_any_idle(pool->targets);

			if (other == NULL)
				break;
			conn_close(g_queue_peek_tail(&other->idle));
		}
		g_queue_unlink(&pool->waiting, &call->wait_link);
		call->wait_link.data = NULL;
		if (idle != NULL) {
			g_queue_unlink(&o->idle, &idle->idle_link);
			idle->state = CONN_BUSY;
			call_uses(call, idle);
			call_begin_exchange(call);
		} else {
			call_open_connection(call);
		}
	}
	pool->defer--;
	pool->dispatching = false;
}

/* --- events --------------------------------------------------------------- */

static void
conn_event(struct conn *c, uint32_t events)
{
	struct h1_call *call = c->call;

	switch (c->state) {
	case CONN_CONNECTING:
		if (events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) {
			int err = 0;
			socklen_t len = sizeof err;

			if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
				err = errno;
			if (err == 0 && !(events & EPOLLHUP))
				conn_connected(c);
			else
				conn_connect_failed(c, err ? err : ECONNREFUSED);
		}
		return;
	case CONN_IDLE:
		/* The engine closed it, or sent what nobody asked for. */
		if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
			conn_close(c);
		return;
	case CONN_BUSY:
		if (call == NULL)
			return;
		/* A close that came with the answer has no edge of its own. */
		if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))
			c->peer_closed = true;
		if ((events & EPOLLOUT) && call->phase == CALL_SENDING) {
			call_send(call);
			if (call->cancelled || call->conn != c)
				return;
		}
		if ((events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) && !call->paused)
			call_pump(call, true, (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0);
		return;
	default:
		return;
	}
}

static gboolean
on_epoll_ready(gint fd, GIOCondition cond, gpointer data)
{
	struct nw_h1_pool *pool = data;
	struct epoll_event events[128];
	int n;

	enter(pool);
	do {
		n = epoll_wait(pool->epfd, events, G_N_ELEMENTS(events), 0);
		for (int i = 0; i < n; i++) {
			struct conn *c = events[i].data.ptr;

			if (c->state != CONN_DEAD)
				conn_event(c, events[i].events);
		}
	} while (n == (int)G_N_ELEMENTS(events));
	leave(pool);
	return G_SOURCE_CONTINUE;
}

static void
on_deadline(void *data)
{
	struct h1_call *call = data;
	struct nw_h1_pool *pool = call->pool;
	int64_t now = g_get_monotonic_time();

	enter(pool);
	if (call->phase == CALL_FAILED)
		call_finish(call, call->failed_code, call->error);
	else if (call->phase == CALL_CONNECTING &&
	         now >= call->connect_started_us + call->connect_timeout_ms * 1000)
		call_fail(call, CURLE_OPERATION_TIMEDOUT, "Connection timed out after %ld milliseconds",
		          (long)((now - call->connect_started_us) / 1000));
	else
		call_fail(call, CURLE_OPERATION_TIMEDOUT,
		          "Operation timed out after %ld milliseconds with %zu bytes received",
		          (long)((now - call->started_us) / 1000), call->received);
	leave(pool);
}

/* --- the backend API ------------------------------------------------------ */

struct nw_upstream_call *
nw_h1_start(struct nw_h1_pool *pool, const struct nw_upstream_request *req,
            const struct nw_upstream_handlers *handlers, void *data)
{
	struct nw_h1_target *t = nw_h1_target_get(pool->targets, req->url);
	struct h1_call *call;
	GString *head;

	if (t == NULL) {
		free(req->owned_body);
		return NULL;
	}
	call = g_new0(struct h1_call, 1);
	call->pool = pool;
	call->target = t;
	call->handlers = *handlers;
	call->data = data;
	nw_timer_init(&call->deadline, on_deadline, call);
	call->started_us = g_get_monotonic_time();
	call->timeout_ms = req->timeout_ms;
	call->connect_timeout_ms = req->connect_timeout_ms > 0 ? req->connect_timeout_ms
	                                                       : DEFAULT_CONNECT_TIMEOUT_MS;
	call->head_request = g_strcmp0(req->method, "HEAD") == 0;
	if (req->owned_body != NULL || req->body != NULL) {
		call->body = req->owned_body ? req->owned_body : g_memdup2(req->body, req->body_len);
		call->body_len = req->body_len;
	}

	/* Plain appends: a printf per call showed in the profile. */
	head = g_string_sized_new(200 + (req->request_id ? strlen(req->request_id) : 0));
	g_string_append(head, req->method);
	g_string_append_c(head, ' ');
	g_string_append(head, t->path);
	g_string_append(head, " HTTP/1.1\r\nHost: ");
	g_string_append(head, t->origin->authority);
	if (req->request_id != NULL) {
		g_string_append(head, "\r\nX-Request-Id: ");
		g_string_append(head, req->request_id);
	}
	if (call->body != NULL) {
		char digits[24];
		size_t n = sizeof digits, len = call->body_len;

		do
			digits[--n] = (char)('0' + len % 10);
		while ((len /= 10) > 0);
		g_string_append(head, "\r\nContent-Type: application/json\r\nContent-Length: ");
		g_string_append_len(head, digits + n, (gssize)(sizeof digits - n));
	}
	g_string_append(head, "\r\n\r\n");
	call->head_out_len = head->len;
	call->head_out = g_string_free(head, FALSE);

	call->live_link.data = call;
	g_queue_push_tail_link(&pool->live, &call->live_link);
	enter(pool);
	pool->defer++;
	call->phase = CALL_WAITING;
	call->wait_link.data = call;
	g_queue_push_tail_link(&pool->waiting, &call->wait_link);
	call_update_deadline(call);
	pool_dispatch(pool);
	pool->defer--;
	leave(pool);
	return &call->base;
}

void
nw_h1_cancel(struct nw_upstream_call *base)
{
	struct h1_call *call = (struct h1_call *)base;
	struct nw_h1_pool *pool;

	if (call->cancelled)
		return;
	pool = call->pool;
	enter(pool);
	pool->defer++;
	call->cancelled = true;
	if (call->conn != NULL)
		conn_close(call->conn);
	call_detach(call);
	pool_dispatch(pool);
	pool->defer--;
	leave(pool);
}

void
nw_h1_unpause(struct nw_upstream_call *base)
{
	struct h1_call *call = (struct h1_call *)base;
	struct nw_h1_pool *pool = call->pool;

	if (call->cancelled || !call->paused)
		return;
	enter(pool);
	call->paused = false;
	/* Edges that came while paused were not acted on: read as well. */
	call_pump(call, true, true);
	leave(pool);
}

const char *
nw_h1_header(struct nw_upstream_call *base, const char *name)
{
	struct h1_call *call = (struct h1_call *)base;
	const char *v;
	size_t len;

	if (call->resp_head == NULL)
		return NULL;
	v = nw_h1_find_header(call->resp_head, call->resp_head_len, name, &len);
	if (v == NULL)
		return NULL;
	/* Kept until the call is freed, as the API promises. */
	if (call->header_values == NULL)
		call->header_values = g_ptr_array_new_with_free_func(g_free);
	g_ptr_array_add(call->header_values, g_strndup(v, len));
	return g_ptr_array_index(call->header_values, call->header_values->len - 1);
}

unsigned
nw_h1_active(const struct nw_h1_pool *pool)
{
	return pool->live.length;
}

unsigned
nw_h1_connections(const struct nw_h1_pool *pool)
{
	return pool->connections;
}

struct nw_h1_pool *
nw_h1_pool_new(unsigned max_connections)
{
	struct nw_h1_pool *pool = g_new0(struct nw_h1_pool, 1);

	pool->max_connections = MAX(max_connections, 1u);
	pool->epfd = epoll_create1(EPOLL_CLOEXEC);
	pool->targets = nw_h1_targets_new();
	pool->timers = nw_timers_new(true);
	pool->dead_calls = g_ptr_array_new();
	pool->dead_conns = g_ptr_array_new();
	g_queue_init(&pool->live);
	pool->resolver = g_resolver_get_default();
	g_queue_init(&pool->waiting);

	pool->io = g_unix_fd_source_new(pool->epfd, G_IO_IN);
	g_source_set_callback(pool->io, (GSourceFunc)(void (*)(void))on_epoll_ready, pool, NULL);
	g_source_set_can_recurse(pool->io, TRUE);
	g_source_set_name(pool->io, "narwhal-http1-io");
	g_source_attach(pool->io, NULL);
	return pool;
}

void
nw_h1_pool_free(struct nw_h1_pool *pool)
{
	struct nw_h1_origin *o;
	struct h1_call *call;

	if (pool == NULL)
		return;
	enter(pool);
	/* Every call still running ends without a callback, and every
	 * connection closes. */
	while ((call = g_queue_peek_head(&pool->live)) != NULL) {
		call->cancelled = true;
		if (call->conn != NULL)
			conn_close(call->conn);
		call_detach(call);
	}
	while ((o = nw_h1_targets_any_idle(pool->targets)) != NULL)
		conn_close(g_queue_peek_head(&o->idle));
	leave(pool);
	g_source_destroy(pool->io);
	g_source_unref(pool->io);
	nw_timers_free(pool->timers);
	close(pool->epfd);
	nw_h1_targets_free(pool->targets);
	g_ptr_array_free(pool->dead_calls, TRUE);
	g_ptr_array_free(pool->dead_conns, TRUE);
	g_object_unref(pool->resolver);
	g_free(pool);
}
