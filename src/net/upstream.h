/*
 * Engine HTTP client: one pool per purpose (the serving pool, the control
 * pool), bound to the GLib loop. Plain-http engines are served by
 * Narwhal's own HTTP/1.1 client (net/http1-client.c), https engines by
 * libcurl (net/upstream-curl.c); both report through these types. Failures
 * are reported with libcurl's error codes either way, so callers need not
 * know which client served a call.
 */
#ifndef NW_UPSTREAM_H
#define NW_UPSTREAM_H

#include <stdbool.h>
#include <stddef.h>

#include <curl/curl.h>

struct nw_upstream;
struct nw_upstream_call;

struct nw_upstream_options {
	unsigned max_connections; /* pool size: total connections to engines,
	                           * for each of the two clients; calls beyond
	                           * it wait for a connection in arrival order */
	bool use_libcurl;         /* libcurl for http URLs too (tests) */
};

struct nw_upstream_request {
	const char *method;       /* "GET" or "POST" */
	const char *url;
	const char *request_id;   /* X-Request-Id, may be NULL */
	const char *body;         /* copied (unless owned_body); may be NULL */
	size_t body_len;
	char *owned_body;         /* instead of body: malloc'd, the call takes it
	                           * (freed even when the start fails) */
	long connect_timeout_ms;  /* 0: 300 s, curl's default */
	long timeout_ms;          /* whole transfer; 0: none */
};

struct nw_upstream_result {
	CURLcode code;            /* CURLE_OK when the transfer completed */
	long status;              /* HTTP status, 0 when none arrived */
	const char *error;        /* what failed, when code != CURLE_OK */
};

struct nw_upstream_handlers {
	/* The response headers are complete (optional). */
	void (*on_response)(void *data, long status);
	/* Body bytes (chunked framing removed). Return true to take them,
	 * false to pause the transfer: the same bytes come back after
	 * nw_upstream_unpause (C7). */
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

/* Continue a call paused by on_data returning false. The held bytes reach
 * on_data again from the loop (with libcurl, possibly before this returns,
 * and on_data may cancel the call then). */
void nw_upstream_unpause(struct nw_upstream_call *call);

unsigned nw_upstream_active(const struct nw_upstream *up);

/* A header of the call's final response (e.g. "Retry-After"), or NULL.
 * Valid from on_response until on_done returns. */
const char *nw_upstream_header(struct nw_upstream_call *call, const char *name);

#endif /* NW_UPSTREAM_H */
