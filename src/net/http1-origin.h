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
	/* The last resolution (docs/deployment.md): addresses (GInetAddress)
	 * kept NW_H1_RESOLVE_TTL_US, or a failure kept NW_H1_RESOLVE_FAIL_TTL_US
	 * so a flood of calls does not become a flood of look-ups. */
	GList *resolved;
	char *resolve_error;
	int64_t resolved_until_us;
};

#define NW_H1_RESOLVE_TTL_US (30 * G_USEC_PER_SEC)
#define NW_H1_RESOLVE_FAIL_TTL_US (1 * G_USEC_PER_SEC)

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
