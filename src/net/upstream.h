/*
 * Engine HTTP client: one pool per purpose (the serving pool, the control
 * pool), bound to the GLib loop. Plain-http engines are served by
 * Narwhal's own HTTP/1.1 client (net/http1-client.c), https engines by
 * libcurl (net/upstream-curl.c); both report through these types and
 * Narwhal's own failure codes, so callers need not know which client
 * served a call (libcurl's codes stay inside upstream-curl.c).
 */
#ifndef NW_UPSTREAM_H
#define NW_UPSTREAM_H

#include <stdbool.h>
#include <stddef.h>

struct nw_upstream;
struct nw_upstream_call;

struct nw_upstream_options {
	unsigned max_connections; /* pool size: total connections to engines,
	                           * for each of the two clients; calls beyond
	                           * it wait for a connection in arrival order */
	bool use_libcurl;         /* libcurl for http URLs too (tests) */
	/* https engines (docs/configuration.md, engine.tls_*): */
	const char *tls_ca_file;  /* CA bundle (PEM), copied; NULL: the system's */
	bool tls_no_verify;       /* accept any certificate and name */
};

struct nw_upstream_request {
	const char *method;       /* "GET" or "POST" */
	const char *url;
	const char *request_id;   /* X-Request-Id, may be NULL */
	const char *body;         /* copied (unless owned_body); may be NULL */
	size_t body_len;
	char *owned_body;         /* instead of body: malloc'd, the call takes it
	                           * (freed even when the start fails) */
	long connect_timeout_ms;  /* 0: 300 s; shared among a host's addresses */
	long timeout_ms;          /* whole transfer; 0: none */
};

/* How a call ended. Every code but OK and BAD_RESPONSE is a transport
 * failure: the engine gave no usable HTTP answer (docs/deployment.md,
 * engine connections). */
enum nw_upstream_code {
	NW_UPSTREAM_OK = 0,        /* the response arrived whole */
	NW_UPSTREAM_RESOLVE,       /* the host name did not resolve */
	NW_UPSTREAM_CONNECT,       /* no address accepted a connection */
	NW_UPSTREAM_TIMEOUT,       /* connect_timeout_ms or timeout_ms passed */
	NW_UPSTREAM_SEND,          /* the request could not be written */
	NW_UPSTREAM_RECV,          /* the connection failed or closed before the
	                            * response ended */
	NW_UPSTREAM_MALFORMED,     /* not HTTP/1.x as RFC 9112 frames it: a bad
	                            * status line, header or chunk, a head too big */
	NW_UPSTREAM_BAD_RESPONSE,  /* well-framed, but in a form the client cannot
	                            * decode (a transfer coding other than chunked) */
	NW_UPSTREAM_TLS,           /* TLS handshake or certificate check failed */
	NW_UPSTREAM_FAILED,        /* anything else (the client's own failure) */
};

struct nw_upstream_result {
	enum nw_upstream_code code;
	long status;              /* HTTP status, 0 when none arrived */
	const char *error;        /* what failed, when code != NW_UPSTREAM_OK:
	                           * may name the engine's address, so it is for
	                           * logs, never for clients */
};

struct nw_upstream_handlers {
	/* The response headers are complete (optional). */
	void (*on_response)(void *data, long status);
	/* Body bytes (chunked framing removed). Return true to take them,
	 * false to pause the transfer: the same bytes come back after
	 * nw_upstream_unpause. */
	bool (*on_data)(void *data, const char *bytes, size_t len);
	/* The call ended (required); not called after nw_upstream_cancel. The
	 * call is freed right after this returns. */
	void (*on_done)(void *data, const struct nw_upstream_result *result);
};

struct nw_upstream *nw_upstream_new(const struct nw_upstream_options *opts);

/* Cancels every call still running, without callbacks. Not from inside a
 * handler. */
void nw_upstream_free(struct nw_upstream *up);

struct nw_upstream_call *nw_upstream_start(struct nw_upstream *up,
                                           const struct nw_upstream_request *req,
                                           const struct nw_upstream_handlers *handlers,
                                           void *data);

/* Abort a call at once; its connection is closed and no callback follows.
 * Safe from any callback, including the call's own. */
void nw_upstream_cancel(struct nw_upstream_call *call);

/* Read no more from the engine for now: bytes already received still reach
 * on_data, the rest waits in the socket (the kernel's memory, not ours)
 * until nw_upstream_unpause. Safe from on_data. The libcurl client cannot
 * stop between reads and ignores this: its consumer refuses bytes instead
 * (on_data returning false). */
void nw_upstream_pause(struct nw_upstream_call *call);

/* Continue a call paused by nw_upstream_pause or by on_data returning
 * false. Held bytes reach on_data again from the loop (with libcurl,
 * possibly before this returns, and on_data may cancel the call then). */
void nw_upstream_unpause(struct nw_upstream_call *call);

unsigned nw_upstream_active(const struct nw_upstream *up);

/* Read buffers the plain-http client's connections hold now: one per
 * connection with unread bytes (a paused transfer, a partial chunk line),
 * none for a call that waits on an empty socket. */
unsigned nw_upstream_read_buffers(const struct nw_upstream *up);

/* A header of the call's final response (e.g. "Retry-After"), or NULL.
 * Valid from on_response until on_done returns. */
const char *nw_upstream_header(struct nw_upstream_call *call, const char *name);

#endif /* NW_UPSTREAM_H */
