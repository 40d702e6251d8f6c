/*
 * The engine client's connections: opening them (resolving a host name
 * off the main thread, trying each address), parking them when idle, and
 * closing them. See http1-client.c for how calls use them.
 */
#include "build-config.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net/http1-internal.h"

static void conn_connect_next(struct h1_conn *c);

void
nw_h1_conn_free(struct h1_conn *c)
{
	if (c->ticket != NULL)
		c->ticket->conn = NULL;
	g_list_free_full(c->addrs, g_object_unref);
	if (c->in != NULL) {
		g_free(c->in);
		c->pool->buffers_out--;
	}
	g_free(c);
}

void
nw_h1_conn_close(struct h1_conn *c)
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

void
nw_h1_conn_make_idle(struct h1_conn *c)
{
	c->state = CONN_IDLE;
	c->call = NULL;
	c->reused = true;
	nw_h1_conn_drop_buffer(c);
	g_queue_push_head_link(&c->origin->idle, &c->idle_link);
}

void
nw_h1_conn_take_buffer(struct h1_conn *c)
{
	GPtrArray *spares = c->pool->spare_buffers;

	if (c->in != NULL)
		return;
	c->in_cap = NW_H1_READ_BUFFER;
	c->in_off = c->in_len = 0;
	c->in = spares->len > 0 ? g_ptr_array_steal_index_fast(spares, spares->len - 1)
	                        : g_malloc(c->in_cap);
	c->pool->buffers_out++;
}

void
nw_h1_conn_drop_buffer(struct h1_conn *c)
{
	GPtrArray *spares = c->pool->spare_buffers;

	if (c->in == NULL)
		return;
	/* Kept for the next read, unless grown for a long head or enough
	 * are kept already. */
	if (c->in_cap == NW_H1_READ_BUFFER && spares->len < NW_H1_SPARE_BUFFERS)
		g_ptr_array_add(spares, c->in);
	else
		g_free(c->in);
	c->in = NULL;
	c->in_off = c->in_len = c->in_cap = 0;
	c->pool->buffers_out--;
}

/* Room to read into: the unread bytes move to the front, and the buffer
 * grows only while a head does not fit. */
size_t
nw_h1_conn_room(struct h1_conn *c, bool reading_head)
{
	if (c->in_off > 0 && (c->in_off == c->in_len || c->in_cap - c->in_len < 2048)) {
		memmove(c->in, c->in + c->in_off, c->in_len - c->in_off);
		c->in_len -= c->in_off;
		c->in_off = 0;
	}
	if (c->in_len == c->in_cap && reading_head && c->in_cap <= NW_H1_MAX_HEAD) {
		c->in_cap = MIN(c->in_cap * 2, (size_t)NW_H1_MAX_HEAD + 1);
		c->in = g_realloc(c->in, c->in_cap);
	}
	return c->in_cap - c->in_len;
}

/* A connection being opened always has its call: cancelling the call
 * closes it. */
static void
conn_connected(struct h1_conn *c)
{
	c->state = CONN_BUSY;
	nw_h1_call_begin_exchange(c->call);
}

static void
conn_close_socket(struct h1_conn *c)
{
	if (c->fd >= 0) {
		epoll_ctl(c->pool->epfd, EPOLL_CTL_DEL, c->fd, NULL);
		close(c->fd);
		c->fd = -1;
	}
}

/* Whether a failed connect says something about the engine (nothing
 * listens, no route to it) rather than about this process (out of file
 * descriptors, buffers or local ports): only the former is the engine's
 * fault (docs/recovery.md, passive detection). */
static bool
connect_error_is_remote(int err)
{
	switch (err) {
	case ECONNREFUSED:
	case ECONNRESET:
	case EHOSTUNREACH:
	case ENETUNREACH:
	case ETIMEDOUT:
		return true;
	default:
		return false;
	}
}

static void
conn_connect_failed(struct h1_conn *c, int err)
{
	conn_close_socket(c);
	if (!connect_error_is_remote(err)) {
		nw_h1_call_fail(c->call, NW_UPSTREAM_FAILED, "Could not open a connection to %s "
		                "port %u: %s", c->origin->host, c->origin->port, g_strerror(err));
		return;
	}
	if (c->next_addr != NULL) {
		conn_connect_next(c);
		return;
	}
	nw_h1_call_fail(c->call, NW_UPSTREAM_CONNECT, "Failed to connect to %s port %u: %s",
	                c->origin->host, c->origin->port, g_strerror(err));
}

void
nw_h1_conn_connect_expired(struct h1_conn *c, int64_t now)
{
	struct h1_call *call = c->call;

	if (c->state == CONN_CONNECTING && c->next_addr != NULL) {
		conn_close_socket(c);
		conn_connect_next(c);
		return;
	}
	nw_h1_call_fail(call, NW_UPSTREAM_TIMEOUT, "%s timed out after %ld milliseconds",
	                c->state == CONN_RESOLVING ? "Resolving the host" : "Connection",
	                (long)((now - call->connect_started_us) / 1000));
}

static void
conn_connect_to(struct h1_conn *c, GSocketAddress *addr)
{
	struct sockaddr_storage ss;
	int one = 1;
	int family = g_socket_address_get_family(addr) == G_SOCKET_FAMILY_IPV6 ? AF_INET6 : AF_INET;
	struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.ptr = c };

	struct h1_call *call = c->call;
	int64_t now = g_get_monotonic_time();
	int64_t left = call->connect_started_us + call->connect_timeout_ms * 1000 - now;

	/* Each address gets its share of what is left of the budget, so one
	 * that never answers cannot use it all (docs/deployment.md). */
	c->state = CONN_CONNECTING;
	c->addr_deadline_us = now + MAX(left, 0) / (int64_t)(1 + g_list_length(c->next_addr));
	nw_h1_call_update_deadline(call);
	c->fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (c->fd < 0 || !g_socket_address_to_native(addr, &ss, sizeof ss, NULL)) {
		conn_connect_failed(c, c->fd < 0 ? errno : EINVAL);
		return;
	}
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	setsockopt(c->fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
	if (connect(c->fd, (struct sockaddr *)&ss,
	            (socklen_t)g_socket_address_get_native_size(addr)) != 0 &&
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
conn_connect_next(struct h1_conn *c)
{
	GInetAddress *a = c->next_addr->data;
	GSocketAddress *sa = g_inet_socket_address_new(a, c->origin->port);

	c->next_addr = c->next_addr->next;
	conn_connect_to(c, sa);
	g_object_unref(sa);
}

/* Connects to the first of addrs (GInetAddress), which c takes. */
static void
conn_connect_first(struct h1_conn *c, GList *addrs)
{
	c->addrs = addrs;
	c->next_addr = addrs;
	conn_connect_next(c);
}

static GList *
addresses_copy(GList *addrs)
{
	return g_list_copy_deep(addrs, (GCopyFunc)(void (*)(void))g_object_ref, NULL);
}

static void
on_resolved(GObject *source, GAsyncResult *res, gpointer data)
{
	struct resolve_ticket *ticket = data;
	struct h1_conn *c = ticket->conn;
	GError *error = NULL;
	GList *addrs = g_resolver_lookup_by_name_finish(G_RESOLVER(source), res, &error);
	struct nw_h1_origin *o;

	g_free(ticket);
	if (c == NULL) { /* the connection was dropped meanwhile */
		g_resolver_free_addresses(addrs);
		g_clear_error(&error);
		return;
	}
	c->ticket = NULL;
	o = c->origin;
	g_resolver_free_addresses(o->resolved);
	g_clear_pointer(&o->resolve_error, g_free);
	nw_h1_enter(c->pool);
	if (addrs == NULL) {
		/* GLib's message names the cause ("Name or service not known"). */
		o->resolve_error = g_strdup(error ? error->message : "no address");
		o->resolved = NULL;
		o->resolved_until_us = g_get_monotonic_time() + NW_H1_RESOLVE_FAIL_TTL_US;
		nw_h1_call_fail(c->call, NW_UPSTREAM_RESOLVE, "Could not resolve %s: %s", o->host,
		                o->resolve_error);
	} else {
		o->resolved = addrs;
		o->resolved_until_us = g_get_monotonic_time() + NW_H1_RESOLVE_TTL_US;
		conn_connect_first(c, addresses_copy(addrs));
	}
	g_clear_error(&error);
	nw_h1_leave(c->pool);
}

/* A new connection for the call. */
void
nw_h1_conn_open(struct h1_call *call)
{
	struct nw_h1_pool *pool = call->pool;
	struct h1_conn *c = g_new0(struct h1_conn, 1);
	struct nw_h1_origin *o = call->origin;

	c->pool = pool;
	c->origin = o;
	c->fd = -1;
	c->idle_link.data = c;
	pool->connections++;
	h1_bind(call, c);
	call->phase = CALL_CONNECTING;
	call->connect_started_us = g_get_monotonic_time();
	c->state = CONN_RESOLVING;
	nw_h1_call_update_deadline(call);
	if (o->literal != NULL) {
		conn_connect_to(c, o->literal);
	} else if (call->connect_started_us < o->resolved_until_us) {
		if (o->resolved != NULL)
			conn_connect_first(c, addresses_copy(o->resolved));
		else
			nw_h1_call_fail(call, NW_UPSTREAM_RESOLVE, "Could not resolve %s: %s", o->host,
			                o->resolve_error);
	} else {
		c->ticket = g_new0(struct resolve_ticket, 1);
		c->ticket->conn = c;
		g_resolver_lookup_by_name_async(pool->resolver, o->host, NULL, on_resolved, c->ticket);
	}
}

void
nw_h1_conn_connecting_event(struct h1_conn *c, uint32_t events)
{
	int err = 0;
	socklen_t len = sizeof err;

	if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
		return;
	if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
		err = errno;
	if (err == 0 && !(events & EPOLLHUP))
		conn_connected(c);
	else
		conn_connect_failed(c, err ? err : ECONNREFUSED);
}
