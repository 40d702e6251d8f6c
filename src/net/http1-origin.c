#include "build-config.h"

#include "net/http1-origin.h"

#include <stdbool.h>
#include <string.h>

/* Distinct URLs remembered; past this the cache starts again (origins,
 * which hold connections, are kept). */
#define TARGET_CACHE_MAX 4096u

struct nw_h1_targets {
	GHashTable *origins;  /* "host:port" -> struct nw_h1_origin */
	GHashTable *targets;  /* URL -> struct nw_h1_target */
};

static void
origin_free(gpointer p)
{
	struct nw_h1_origin *o = p;

	g_free(o->host);
	g_free(o->authority);
	g_clear_object(&o->literal);
	g_resolver_free_addresses(o->resolved);
	g_free(o->resolve_error);
	g_free(o);
}

static void
target_free(gpointer p)
{
	struct nw_h1_target *t = p;

	g_free(t->path);
	g_free(t);
}

struct nw_h1_targets *
nw_h1_targets_new(void)
{
	struct nw_h1_targets *t = g_new0(struct nw_h1_targets, 1);

	t->origins = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, origin_free);
	t->targets = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, target_free);
	return t;
}

void
nw_h1_targets_free(struct nw_h1_targets *t)
{
	g_hash_table_destroy(t->targets);
	g_hash_table_destroy(t->origins);
	g_free(t);
}

static struct nw_h1_origin *
origin_get(struct nw_h1_targets *t, const char *host, int port)
{
	char *key = g_strdup_printf("%s:%d", host, port);
	struct nw_h1_origin *o = g_hash_table_lookup(t->origins, key);
	bool v6 = strchr(host, ':') != NULL;

	if (o != NULL) {
		g_free(key);
		return o;
	}
	o = g_new0(struct nw_h1_origin, 1);
	o->host = g_strdup(host);
	o->port = (guint16)port;
	/* Host carries the port only when it is not http's own. */
	o->authority = port == 80 ? g_strdup_printf(v6 ? "[%s]" : "%s", host)
	                          : g_strdup_printf(v6 ? "[%s]:%d" : "%s:%d", host, port);
	if (g_hostname_is_ip_address(host))
		o->literal = g_inet_socket_address_new_from_string(host, (guint)port);
	g_hash_table_insert(t->origins, key, o);
	return o;
}

struct nw_h1_target *
nw_h1_target_get(struct nw_h1_targets *t, const char *url)
{
	struct nw_h1_target *target = g_hash_table_lookup(t->targets, url);
	char *host = NULL, *path = NULL, *query = NULL;
	gint port = -1;

	if (target != NULL)
		return target;
	if (!g_uri_split(url, G_URI_FLAGS_ENCODED, NULL, NULL, &host, &port, &path, &query, NULL,
	                 NULL) ||
	    host == NULL || *host == '\0') {
		g_free(host);
		g_free(path);
		g_free(query);
		return NULL;
	}
	if (g_hash_table_size(t->targets) >= TARGET_CACHE_MAX)
		g_hash_table_remove_all(t->targets);
	target = g_new0(struct nw_h1_target, 1);
	target->origin = origin_get(t, host, port < 0 ? 80 : port);
	target->path = g_strconcat(*path ? path : "/", query ? "?" : "", query ? query : "", NULL);
	g_hash_table_insert(t->targets, g_strdup(url), target);
	g_free(host);
	g_free(path);
	g_free(query);
	return target;
}

struct nw_h1_origin *
nw_h1_targets_any_idle(struct nw_h1_targets *t)
{
	GHashTableIter it;
	gpointer value;

	g_hash_table_iter_init(&it, t->origins);
	while (g_hash_table_iter_next(&it, NULL, &value)) {
		struct nw_h1_origin *o = value;

		if (!g_queue_is_empty(&o->idle))
			return o;
	}
	return NULL;
}
