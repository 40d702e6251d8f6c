/*
 * Inside the HTTP/1.1 engine client: what its two halves share.
 * http1-conn.c opens (resolving, connecting), parks and closes
 * connections; http1-client.c runs calls over them. Nothing outside
 * src/net/http1-*.c includes this.
 */
#ifndef NW_HTTP1_INTERNAL_H
#define NW_HTTP1_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <gio/gio.h>
#include <glib.h>

#include "net/http1-origin.h"
#include "net/http1-parse.h"
#include "net/timers.h"
#include "net/upstream-backend.h"

#define NW_H1_READ_BUFFER (16u * 1024u)
/* Read buffers kept for reuse. A call holds one only while bytes wait in
 * it (a partial chunk line, a paused transfer), so few are ever out at
 * once; the spares let the next read skip a malloc. */
#define NW_H1_SPARE_BUFFERS 16u

enum conn_state { CONN_RESOLVING, CONN_CONNECTING, CONN_BUSY, CONN_IDLE, CONN_DEAD };

struct resolve_ticket {
	struct h1_conn *conn;      /* NULL once the connection is gone */
};

struct h1_conn {
	struct nw_h1_pool *pool;
	struct nw_h1_origin *origin;
	enum conn_state state;
	int fd;
	struct h1_call *call;   /* while resolving, connecting or busy */
	GList idle_link;        /* in origin->idle */
	bool reused;            /* has carried a request before this one */
	bool peer_closed;       /* the engine has closed its side */
	bool drained;           /* the last read emptied the socket */
	char *in;               /* read buffer, only while bytes wait in it */
	size_t in_off, in_len, in_cap;
	struct resolve_ticket *ticket;
	GList *addrs;           /* resolved addresses (GInetAddress), owned */
	GList *next_addr;       /* the one to try next */
	int64_t addr_deadline_us; /* this address's slice of the connect budget */
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
	struct nw_h1_origin *origin;
	struct h1_conn *conn;
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
	struct nw_timer wake;     /* resumes a call unpaused, from the loop */

	bool have_head, paused, cancelled, retried, got_bytes;
	enum nw_upstream_code failed_code; /* with CALL_FAILED */
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
	GPtrArray *spare_buffers; /* read buffers not in use, for reuse */
	unsigned buffers_out;   /* read buffers held by connections */
	unsigned depth;         /* nesting of entry points */
	unsigned defer;         /* >0: failures are reported from the timer */
	bool dispatching;
	GResolver *resolver;
};

/* Binds a call and the connection that carries it. */
static inline void
h1_bind(struct h1_call *call, struct h1_conn *c)
{
	call->conn = c;
	c->call = call;
}

/* http1-client.c: entry points nest; leaving the outermost frees the
 * calls and connections that ended inside. */
void nw_h1_enter(struct nw_h1_pool *pool);
void nw_h1_leave(struct nw_h1_pool *pool);
void nw_h1_pool_dispatch(struct nw_h1_pool *pool);
void nw_h1_call_update_deadline(struct h1_call *call);
/* The connection is up: send the request. */
void nw_h1_call_begin_exchange(struct h1_call *call);
void nw_h1_call_fail(struct h1_call *call, enum nw_upstream_code code, const char *fmt, ...)
	G_GNUC_PRINTF(3, 4);

/* http1-conn.c */
/* Opens a new connection for the call (resolving its host if need be). */
void nw_h1_conn_open(struct h1_call *call);
/* An epoll event while connecting. */
void nw_h1_conn_connecting_event(struct h1_conn *c, uint32_t events);
/* The call's connect deadline passed while opening c: the next address,
 * or a timeout. */
void nw_h1_conn_connect_expired(struct h1_conn *c, int64_t now);
/* Gives a connection about to read its read buffer, if it has none. */
void nw_h1_conn_take_buffer(struct h1_conn *c);
/* Gives an emptied read buffer back to the pool: a connection holds one
 * only while unread bytes wait in it, so memory follows the bytes in
 * flight rather than the calls (an open stream mostly waits for its next
 * event). */
void nw_h1_conn_drop_buffer(struct h1_conn *c);
/* Parks a connection that finished an exchange cleanly (without buffer). */
void nw_h1_conn_make_idle(struct h1_conn *c);
/* Closes at once; the memory is freed on leaving. */
void nw_h1_conn_close(struct h1_conn *c);
void nw_h1_conn_free(struct h1_conn *c);
/* Room to read into, making some when the head does not fit yet. */
size_t nw_h1_conn_room(struct h1_conn *c, bool reading_head);

#endif /* NW_HTTP1_INTERNAL_H */
