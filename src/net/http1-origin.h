/*
 * Where the engine client's URLs go. An origin is a host and port with
 * its idle connections; a target is a URL's origin and request path. Each
 * distinct URL is parsed once; the client then finds its target with one
 * string hash per call.
 */
#ifndef NW_HTTP1_ORIGIN_H
#define NW_HTTP1_ORIGIN_H

#include <gio/gio.h>
#include <glib.h>

struct nw_h1_origin {
	char *host;               /* as in the URL, without IPv6 brackets */
	guint16 port;
	char *authority;          /* the Host header */
	GQueue idle;              /* the client's idle connections, most recent first */
	GSocketAddress *literal;  /* the address when host is an IP literal */
};

struct nw_h1_target {
	struct nw_h1_origin *origin;
	char *path;               /* path and query, at least "/" */
};

struct nw_h1_targets;

struct nw_h1_targets *nw_h1_targets_new(void);
/* The idle queues must be empty by then. */
void nw_h1_targets_free(struct nw_h1_targets *t);

/* The target of an http URL, or NULL when the URL has no host. */
struct nw_h1_target *nw_h1_target_get(struct nw_h1_targets *t, const char *url);

/* An origin with an idle connection, or NULL when none has one. */
struct nw_h1_origin *nw_h1_targets_any_idle(struct nw_h1_targets *t);

#endif /* NW_HTTP1_ORIGIN_H */
