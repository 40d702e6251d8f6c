#include "build-config.h"

#include "net/upstream.h"

#include <glib.h>

#include "net/upstream-backend.h"

struct nw_upstream {
	struct nw_upstream_options opts; /* tls_ca_file owned */
	struct nw_h1_pool *h1;
	struct nw_curl_pool *tls;  /* made on the first https call */
};

struct nw_upstream *
nw_upstream_new(const struct nw_upstream_options *opts)
{
	struct nw_upstream *up = g_new0(struct nw_upstream, 1);

	up->opts = *opts;
	up->opts.tls_ca_file = g_strdup(opts->tls_ca_file);
	if (!opts->use_libcurl)
		up->h1 = nw_h1_pool_new(opts->max_connections);
	return up;
}

void
nw_upstream_free(struct nw_upstream *up)
{
	if (up == NULL)
		return;
	nw_h1_pool_free(up->h1);
	nw_curl_pool_free(up->tls);
	g_free((char *)up->opts.tls_ca_file);
	g_free(up);
}

struct nw_upstream_call *
nw_upstream_start(struct nw_upstream *up, const struct nw_upstream_request *req,
                  const struct nw_upstream_handlers *handlers, void *data)
{
	if (up->h1 != NULL && g_ascii_strncasecmp(req->url, "http://", 7) == 0)
		return nw_h1_start(up->h1, req, handlers, data);
	if (up->tls == NULL)
		up->tls = nw_curl_pool_new(&up->opts);
	return nw_curl_start(up->tls, req, handlers, data);
}

void
nw_upstream_cancel(struct nw_upstream_call *call)
{
	if (call == NULL)
		return;
	if (call->tls)
		nw_curl_cancel(call);
	else
		nw_h1_cancel(call);
}

void
nw_upstream_pause(struct nw_upstream_call *call)
{
	if (call != NULL && !call->tls)
		nw_h1_pause(call);
}

void
nw_upstream_unpause(struct nw_upstream_call *call)
{
	if (call == NULL)
		return;
	if (call->tls)
		nw_curl_unpause(call);
	else
		nw_h1_unpause(call);
}

const char *
nw_upstream_header(struct nw_upstream_call *call, const char *name)
{
	if (call == NULL)
		return NULL;
	return call->tls ? nw_curl_header(call, name) : nw_h1_header(call, name);
}

unsigned
nw_upstream_active(const struct nw_upstream *up)
{
	return (up->h1 ? nw_h1_active(up->h1) : 0) + (up->tls ? nw_curl_active(up->tls) : 0);
}

unsigned
nw_upstream_read_buffers(const struct nw_upstream *up)
{
	return up->h1 ? nw_h1_read_buffers(up->h1) : 0;
}
