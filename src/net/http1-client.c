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
 *   the connection dropped. A request goes out again on a fresh connection
 *   (once) only when it provably never reached the engine whole: the reused
 *   connection failed while the request was still being written. Once it
 *   is written, a POST may have been processed (a prefill holds a KV lease
 *   for it), so it is never sent twice (docs/deployment.md).
 * - Calls beyond max_connections wait in arrival order.
 * - Connections and calls ended from inside an event batch are freed when
 *   the batch is over, so no event reaches freed memory.
 *
 * Connections themselves (opening, parking, closing) are in http1-conn.c.
 */
#include "build-config.h"

#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <glib-unix.h>

#include "net/http1-internal.h"

#define DEFAULT_CONNECT_TIMEOUT_MS 300000L

static void call_pump(struct h1_call *call, bool try_read, bool until_empty);
static void call_send(struct h1_call *call);

/* --- deadlines ----------------------------------------------------------- */

/* The call's nearest limit: the whole transfer's, and the connect's while
 * it connects. */
void
nw_h1_call_update_deadline(struct h1_call *call)
{
	int64_t d = call->timeout_ms > 0 ? call->started_us + call->timeout_ms * 1000 : -1;

	if (call->phase == CALL_CONNECTING) {
		/* While connecting, the address's own slice of the budget. */
		int64_t c = call->conn->state == CONN_CONNECTING
		          ? call->conn->addr_deadline_us
		          : call->connect_started_us + call->connect_timeout_ms * 1000;

		d = d < 0 ? c : MIN(d, c);
	}
	nw_timer_set(call->pool->timers, &call->deadline, d);
}

/* --- entry and exit ------------------------------------------------------ */

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

void
nw_h1_enter(struct nw_h1_pool *pool)
{
	pool->depth++;
}

/* Leaving the outermost entry point frees what the batch ended. */
void
nw_h1_leave(struct nw_h1_pool *pool)
{
	if (--pool->depth > 0)
		return;
	for (guint i = 0; i < pool->dead_calls->len; i++)
		call_free(pool->dead_calls->pdata[i]);
	g_ptr_array_set_size(pool->dead_calls, 0);
	for (guint i = 0; i < pool->dead_conns->len; i++)
		nw_h1_conn_free(pool->dead_conns->pdata[i]);
	g_ptr_array_set_size(pool->dead_conns, 0);
}

/* --- ending calls --------------------------------------------------------- */

/* Takes the call off its connection, closing it unless it was parked
 * idle, and out of the wait line. */
static void
call_unhook(struct h1_call *call)
{
	if (call->conn != NULL) {
		if (call->conn->state != CONN_IDLE)
			nw_h1_conn_close(call->conn);
		call->conn->call = NULL;
		call->conn = NULL;
	}
	if (call->wait_link.data != NULL) {
		g_queue_unlink(&call->pool->waiting, &call->wait_link);
		call->wait_link.data = NULL;
	}
}

/* Ends the call for good; its memory is freed on leaving. */
static void
call_detach(struct h1_call *call)
{
	struct nw_h1_pool *pool = call->pool;

	call_unhook(call);
	nw_timer_cancel(pool->timers, &call->deadline);
	nw_timer_cancel(pool->timers, &call->wake);
	g_queue_unlink(&pool->live, &call->live_link);
	g_ptr_array_add(pool->dead_calls, call);
}

static void
call_finish(struct h1_call *call, enum nw_upstream_code code, const char *error)
{
	struct nw_upstream_result res = {
		.code = code,
		.status = call->have_head ? call->head.status : 0,
		.error = code == NW_UPSTREAM_OK ? NULL : error,
	};

	call_detach(call);
	call->cancelled = true; /* no callback after this one */
	call->handlers.on_done(call->data, &res);
	nw_h1_pool_dispatch(call->pool);
}

/* Inside nw_h1_start, nw_h1_cancel or a dispatch, the failure is reported
 * from the timer: a handler must never run before nw_upstream_start has
 * returned, nor deep inside another call's teardown. */
void
nw_h1_call_fail(struct h1_call *call, enum nw_upstream_code code, const char *fmt, ...)
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
	call_unhook(call);
	call->phase = CALL_FAILED;
	call->failed_code = code;
	nw_timer_set(pool->timers, &call->deadline, 0); /* long past */
}

/* Runs a handler; false when the call was cancelled meanwhile. */
#define CALLBACK(call, expr) ((expr), !(call)->cancelled)

/* --- sending -------------------------------------------------------------- */

/* Starts the request on a connected connection. */
void
nw_h1_call_begin_exchange(struct h1_call *call)
{
	call->phase = CALL_SENDING;
	call->sent = 0;
	nw_h1_call_update_deadline(call);
	call_send(call);
}

/* The connection failed. A reused one may simply have been closed by the
 * engine as we reused it: when the request was not yet written whole, the
 * engine cannot have acted on it, so it goes out again on a new
 * connection, once. */
static bool
call_retry_fresh(struct h1_call *call)
{
	struct h1_conn *c = call->conn;

	if (c == NULL || !c->reused || call->got_bytes || call->retried ||
	    call->sent >= call->head_out_len + call->body_len)
		return false;
	call->retried = true;
	nw_h1_conn_close(c);
	call->conn = NULL;
	c->call = NULL;
	call->phase = CALL_WAITING;
	g_queue_push_head_link(&call->pool->waiting, &call->wait_link);
	call->wait_link.data = call;
	nw_h1_pool_dispatch(call->pool);
	return true;
}

static void
call_send(struct h1_call *call)
{
	struct h1_conn *c = call->conn;

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
			nw_h1_call_fail(call, NW_UPSTREAM_SEND, "Send failure: %s", g_strerror(errno));
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
	struct h1_conn *c = call->conn;

	if (c->in == NULL)
		return NEED_BYTES; /* nothing has come since the last read */
	while (!call->have_head) {
		ssize_t n = nw_h1_parse_head(c->in + c->in_off, c->in_len - c->in_off,
		                             call->head_request, &call->head);

		if (n == 0)
			return NEED_BYTES;
		if (n == NW_H1_HEAD_CODING) {
			/* Never passed on still encoded (docs/deployment.md). */
			nw_h1_call_fail(call, NW_UPSTREAM_BAD_RESPONSE,
			                "The engine's response has a transfer coding other than "
			                "chunked, which the client cannot decode");
			return STOPPED;
		}
		if (n < 0 || call->head.status == 101) {
			nw_h1_call_fail(call, NW_UPSTREAM_MALFORMED,
			                "The engine's response head is malformed");
			return STOPPED;
		}
		if (call->head.status < 200) { /* an interim response */
			c->in_off += (size_t)n;
			continue;
		}
		call->have_head = true;
		call->resp_head = g_memdup2(c->in + c->in_off, (gsize)n);
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
			nw_h1_call_fail(call, NW_UPSTREAM_MALFORMED, "The engine's chunked body is malformed");
			return STOPPED;
		case NW_H1_DATA:
			if (call->handlers.on_data != NULL &&
			    !CALLBACK(call, taken = call->handlers.on_data(
			                  call->data, c->in + c->in_off, st.data_len)))
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
			/* Kept only when nothing else came: nothing left in the
			 * buffer, nor (by the last read) in the socket. */
			bool keep = !call->head.close && !c->peer_closed && c->drained &&
			            call->phase == CALL_RECEIVING && c->in_off + st.used == c->in_len;

			if (keep)
				nw_h1_conn_make_idle(c);
			call_finish(call, NW_UPSTREAM_OK, NULL);
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
		call_finish(call, NW_UPSTREAM_OK, NULL);
	} else if (!call->got_bytes) {
		if (!call_retry_fresh(call))
			nw_h1_call_fail(call, NW_UPSTREAM_RECV, "Empty reply from the engine");
	} else {
		nw_h1_call_fail(call, NW_UPSTREAM_RECV,
		                "The engine closed the connection before its response ended");
	}
}

/* Waiting for the engine with nothing unread: the read buffer goes back
 * (an open stream spends most of its time here). */
static void
call_wait(struct h1_conn *c)
{
	if (c->in != NULL && c->in_off == c->in_len)
		nw_h1_conn_drop_buffer(c);
}

/* Hands on buffered bytes, then reads while the socket may hold more.
 * try_read: read at least once. until_empty: read until EOF or EAGAIN,
 * because the engine has closed its side and no further edge will come. */
static void
call_pump(struct h1_call *call, bool try_read, bool until_empty)
{
	bool more = try_read;

	for (;;) {
		struct h1_conn *c = call->conn;
		size_t room;
		ssize_t n;

		if (call_consume(call) == STOPPED)
			return;
		if (!more || call->paused) {
			call_wait(c);
			return;
		}
		nw_h1_conn_take_buffer(c);
		room = nw_h1_conn_room(c, !call->have_head);
		if (room == 0) {
			nw_h1_call_fail(call, NW_UPSTREAM_MALFORMED,
			                "The engine's response head is too large");
			return;
		}
		n = recv(c->fd, c->in + c->in_len, room, 0);
		if (n > 0) {
			c->in_len += (size_t)n;
			call->got_bytes = true;
			/* Less than asked: the socket is empty for now. */
			c->drained = (size_t)n < room;
			more = until_empty || !c->drained;
			continue;
		}
		if (n == 0) {
			call_eof(call);
			return;
		}
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK) {
			c->drained = true;
			call_wait(c);
			return;
		}
		if (!call_retry_fresh(call))
			nw_h1_call_fail(call, NW_UPSTREAM_RECV, "Recv failure: %s", g_strerror(errno));
		return;
	}
}

/* --- giving calls connections --------------------------------------------- */

/* Gives waiting calls connections, in arrival order, while there is room:
 * an idle one to their engine, a new one, or a new one in place of an idle
 * one to another engine. */
void
nw_h1_pool_dispatch(struct nw_h1_pool *pool)
{
	struct h1_call *call;

	if (pool->dispatching)
		return; /* the outer loop carries on */
	pool->dispatching = true;
	pool->defer++;
	while ((call = g_queue_peek_head(&pool->waiting)) != NULL) {
		struct nw_h1_origin *o = call->origin;
		struct h1_conn *idle = g_queue_peek_head(&o->idle);

		if (idle != NULL && call->retried) {
			/* It may be as stale as the one that just failed. */
			nw_h1_conn_close(idle);
			idle = NULL;
		}
		if (idle == NULL && pool->connections >= pool->max_connections) {
			struct nw_h1_origin *other = nw_h1_targets_any_idle(pool->targets);

			if (other == NULL)
				break;
			nw_h1_conn_close(g_queue_peek_tail(&other->idle));
		}
		g_queue_unlink(&pool->waiting, &call->wait_link);
		call->wait_link.data = NULL;
		if (idle != NULL) {
			g_queue_unlink(&o->idle, &idle->idle_link);
			idle->state = CONN_BUSY;
			h1_bind(call, idle);
			nw_h1_call_begin_exchange(call);
		} else {
			nw_h1_conn_open(call);
		}
	}
	pool->defer--;
	pool->dispatching = false;
}

/* --- events --------------------------------------------------------------- */

static void
conn_event(struct h1_conn *c, uint32_t events)
{
	struct h1_call *call = c->call;

	switch (c->state) {
	case CONN_CONNECTING:
		nw_h1_conn_connecting_event(c, events);
		return;
	case CONN_IDLE:
		/* The engine closed it, or sent what nobody asked for. */
		if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
			nw_h1_conn_close(c);
		return;
	case CONN_BUSY: /* always with its call: ending a call unhooks it */
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

	nw_h1_enter(pool);
	do {
		n = epoll_wait(pool->epfd, events, G_N_ELEMENTS(events), 0);
		for (int i = 0; i < n; i++) {
			struct h1_conn *c = events[i].data.ptr;

			if (c->state != CONN_DEAD)
				conn_event(c, events[i].events);
		}
	} while (n == (int)G_N_ELEMENTS(events));
	nw_h1_leave(pool);
	return G_SOURCE_CONTINUE;
}

static void
on_wake(void *data)
{
	struct h1_call *call = data;
	struct nw_h1_pool *pool = call->pool;

	if (call->paused)
		return; /* paused again before the loop came round */
	nw_h1_enter(pool);
	/* Edges that came while paused were not acted on: read until empty. */
	call_pump(call, true, true);
	nw_h1_leave(pool);
}

static void
on_deadline(void *data)
{
	struct h1_call *call = data;
	struct nw_h1_pool *pool = call->pool;
	int64_t now = g_get_monotonic_time();

	nw_h1_enter(pool);
	if (call->phase == CALL_FAILED)
		call_finish(call, call->failed_code, call->error);
	else if (call->phase == CALL_CONNECTING &&
	         (call->timeout_ms <= 0 || now < call->started_us + call->timeout_ms * 1000))
		nw_h1_conn_connect_expired(call->conn, now);
	else
		nw_h1_call_fail(call, NW_UPSTREAM_TIMEOUT,
		                "Operation timed out after %ld milliseconds with %zu bytes received",
		                (long)((now - call->started_us) / 1000), call->received);
	nw_h1_leave(pool);
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
	call->origin = t->origin; /* t may go with the URL cache; origins stay */
	call->handlers = *handlers;
	call->data = data;
	nw_timer_init(&call->deadline, on_deadline, call);
	nw_timer_init(&call->wake, on_wake, call);
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
	if (req->owned_body != NULL || req->body != NULL) {
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
	nw_h1_enter(pool);
	pool->defer++;
	call->phase = CALL_WAITING;
	call->wait_link.data = call;
	g_queue_push_tail_link(&pool->waiting, &call->wait_link);
	nw_h1_call_update_deadline(call);
	nw_h1_pool_dispatch(pool);
	pool->defer--;
	nw_h1_leave(pool);
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
	nw_h1_enter(pool);
	pool->defer++;
	call->cancelled = true;
	call_detach(call);
	nw_h1_pool_dispatch(pool);
	pool->defer--;
	nw_h1_leave(pool);
}

void
nw_h1_pause(struct nw_upstream_call *base)
{
	struct h1_call *call = (struct h1_call *)base;

	/* What the buffer holds is still handed on (call_consume); the socket
	 * is not read again until nw_h1_unpause. */
	if (!call->cancelled)
		call->paused = true;
}

void
nw_h1_unpause(struct nw_upstream_call *base)
{
	struct h1_call *call = (struct h1_call *)base;
	struct nw_h1_pool *pool = call->pool;

	if (call->cancelled || !call->paused)
		return;
	/* The held bytes go out from the loop, not from inside the caller
	 * (often the HTTP server's content reader): the call may end then. */
	call->paused = false;
	nw_timer_set(pool->timers, &call->wake, 0);
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
nw_h1_read_buffers(const struct nw_h1_pool *pool)
{
	return pool->buffers_out;
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
	pool->spare_buffers = g_ptr_array_new_with_free_func(g_free);
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
	g_warn_if_fail(pool->depth == 0); /* never from inside a handler */
	nw_h1_enter(pool);
	/* Every call still running ends without a callback, and every
	 * connection closes. */
	while ((call = g_queue_peek_head(&pool->live)) != NULL) {
		call->cancelled = true;
		call_detach(call);
	}
	while ((o = nw_h1_targets_any_idle(pool->targets)) != NULL)
		nw_h1_conn_close(g_queue_peek_head(&o->idle));
	nw_h1_leave(pool);
	g_source_destroy(pool->io);
	g_source_unref(pool->io);
	nw_timers_free(pool->timers);
	close(pool->epfd);
	nw_h1_targets_free(pool->targets);
	g_ptr_array_free(pool->dead_calls, TRUE);
	g_ptr_array_free(pool->dead_conns, TRUE);
	g_ptr_array_free(pool->spare_buffers, TRUE);
	g_object_unref(pool->resolver);
	g_free(pool);
}
