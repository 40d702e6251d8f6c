/*
 * Engine HTTP client: one libcurl multi handle per connection pool (the
 * serving pool and the control pool), bound to the GLib loop.
 *
 * - curl's sockets live in one private epoll set behind a single GLib fd
 *   source, with lazy deregistration (event-loop-notes C3, C4).
 * - curl's timer callback only records a deadline; the deadline source
 *   drives curl (C1, C2).
 * - Easy handles are pooled and reused, aborted ones included (C8).
 * - CURLMOPT_MAXCONNECTS is raised so bursts do not churn connections (C5).
 */
#ifndef NW_UPSTREAM_H
#define NW_UPSTREAM_H

#include <stdbool.h>
#include <stddef.h>

#include <curl/curl.h>

struct nw_upstream;
struct nw_upstream_call;

struct nw_upstream_options {
	const char *name;         /* "serving" or "control", for logs */
	unsigned max_connections; /* pool size: total connections to engines */
};

struct nw_upstream_request {
	const char *method;       /* "GET" or "POST" */
	const char *url;
	const char *request_id;   /* X-Request-Id, may be NULL */
	const char *body;         /* copied (unless owned_body); may be NULL */
	size_t body_len;
	char *owned_body;         /* instead of body: malloc'd, the call takes it
	                           * (freed even when the start fails) */
	long connect_timeout_ms;  /* 0: curl's default */
	long timeout_ms;          /* whole transfer; 0: none */
};

struct nw_upstream_result {
	CURLcode code;            /* CURLE_OK when the transfer completed */
	long status;              /* HTTP status, 0 when none arrived */
	const char *error;        /* curl's description when code != CURLE_OK */
};

struct nw_upstream_handlers {
	/* The response headers are complete (optional). */
	void (*on_response)(void *data, long status);
	/* Body bytes. Return true to take them, false to pause the transfer:
	 * curl hands the same bytes back after nw_upstream_unpause (C7). */
	bool (*on_data)(void *data, const char *bytes, size_t len);
	/* The call ended (required); not called after nw_upstream_cancel. The
	 * call is freed right after this returns. */
	void (*on_done)(void *data, const struct nw_upstream_result *result);
};

struct nw_upstream *nw_upstream_new(const struct nw_upstream_options *opts);

/* Cancels every call still running, without callbacks. */
void nw_upstream_free(struct nw_upstream *up);

struct nw_upstream_call *nw_upstream_start(struct nw_upstream *up,
                                           const struct nw_upstream_request *req,
                                           const struct nw_upstream_handlers *handlers,
                                           void *data);

/* Abort a call at once; its connection is closed and no callback follows.
 * Safe from any callback, including the call's own. */
void nw_upstream_cancel(struct nw_upstream_call *call);

/* Continue a call paused by on_data returning false. curl may hand the
 * held bytes to on_data before this returns, and on_data may cancel the
 * call then: the call is released once curl is left, as in the loop. */
void nw_upstream_unpause(struct nw_upstream_call *call);

unsigned nw_upstream_active(const struct nw_upstream *up);

/* A header of the call's final response (e.g. "Retry-After"), or NULL.
 * Valid from on_response until on_done returns. */
const char *nw_upstream_header(struct nw_upstream_call *call, const char *name);

#endif /* NW_UPSTREAM_H */
