/*
 * The two engine clients behind net/upstream.h: our own HTTP/1.1 client for
 * plain-http engines (the serving path, where libcurl's per-transfer polls
 * and bookkeeping were most of a request's cost), and libcurl for https.
 * Both share the handler and result types of upstream.h; every call starts
 * with the base below so upstream.c can route cancel, unpause and header
 * look-ups to the client that made it.
 */
#ifndef NW_UPSTREAM_BACKEND_H
#define NW_UPSTREAM_BACKEND_H

#include "net/upstream.h"

struct nw_upstream_call {
	bool tls;  /* made by the libcurl client */
};

struct nw_h1_pool;
struct nw_curl_pool;

struct nw_h1_pool *nw_h1_pool_new(unsigned max_connections);
void nw_h1_pool_free(struct nw_h1_pool *pool);
struct nw_upstream_call *nw_h1_start(struct nw_h1_pool *pool, const struct nw_upstream_request *req,
                                     const struct nw_upstream_handlers *handlers, void *data);
void nw_h1_cancel(struct nw_upstream_call *call);
void nw_h1_pause(struct nw_upstream_call *call);
void nw_h1_unpause(struct nw_upstream_call *call);
const char *nw_h1_header(struct nw_upstream_call *call, const char *name);
unsigned nw_h1_active(const struct nw_h1_pool *pool);
unsigned nw_h1_read_buffers(const struct nw_h1_pool *pool);

struct nw_curl_pool *nw_curl_pool_new(const struct nw_upstream_options *opts);
void nw_curl_pool_free(struct nw_curl_pool *pool);
struct nw_upstream_call *nw_curl_start(struct nw_curl_pool *pool, const struct nw_upstream_request *req,
                                       const struct nw_upstream_handlers *handlers, void *data);
void nw_curl_cancel(struct nw_upstream_call *call);
void nw_curl_unpause(struct nw_upstream_call *call);
const char *nw_curl_header(struct nw_upstream_call *call, const char *name);
unsigned nw_curl_active(const struct nw_curl_pool *pool);

#endif /* NW_UPSTREAM_BACKEND_H */
