#include "build-config.h"

#include "core/dialect.h"

#include <string.h>

#include "core/log.h"

bool
nw_dialects_init(struct nw_dialect *dialects, const struct nw_config *cfg,
                 struct nw_plugin_instance *const *instances, GError **error)
{
	for (uint32_t i = 0; i < cfg->fleet.n_engines; i++) {
		struct nw_dialect *d = &dialects[i];
		const struct nw_engine_config *e = &cfg->fleet.engines[i];

		d->ops = &instances[i]->plugin->ops.dialect;
		d->ctx = instances[i]->ctx;
		d->name = instances[i]->plugin->desc->name;
		d->ref = (struct narwhal_engine_ref){
			.struct_size = sizeof d->ref, .index = i, .id = e->id, .url = e->url,
		};
		d->caps = d->ops->capabilities(d->ctx, &d->ref);
		/* The loader checked the trio is whole or absent. */
		if (nw_dialect_pairs(d) && d->ops->build_prefill == NULL) {
			g_set_error(error, NARWHAL_PLUGIN_ERROR, NW_PLUGIN_ERROR_NULL_SLOT,
			            "fleet.engines[%u] (%s): dialect %s says the engine hands off KV "
			            "caches but has no build_prefill, build_decode or parse_prefill: "
			            "fix the dialect plugin, or give the engine a dialect that "
			            "serves it", i, e->id, d->name);
			return false;
		}
	}
	return true;
}

const char **
nw_dialects_router_keys(const struct nw_dialect *dialects, uint32_t n)
{
	g_autoptr(GPtrArray) keys = g_ptr_array_new();

	for (uint32_t i = 0; i < n; i++) {
		const struct nw_dialect *d = &dialects[i];
		const char *const *own;
		bool seen = false;

		/* Engines share instances: ask each instance once. */
		for (uint32_t j = 0; j < i && !seen; j++)
			seen = dialects[j].ctx == d->ctx;
		if (seen || d->ops->router_keys == NULL || (own = d->ops->router_keys(d->ctx)) == NULL)
			continue;
		for (; *own != NULL; own++) {
			bool dup = false;

			for (guint k = 0; k < keys->len && !dup; k++)
				dup = strcmp(g_ptr_array_index(keys, k), *own) == 0;
			if (!dup)
				g_ptr_array_add(keys, (gpointer)*own);
		}
	}
	g_ptr_array_add(keys, NULL);
	return (const char **)g_ptr_array_free(g_steal_pointer(&keys), FALSE);
}

bool
nw_dialects_whole_body_only(const struct nw_dialect *dialects, uint32_t n,
                            const json_t *client_body)
{
	for (uint32_t i = 0; i < n; i++) {
		const struct nw_dialect *d = &dialects[i];

		/* Neighbours usually share an instance: ask each run once. */
		if (d->ops->whole_body_only != NULL && (i == 0 || d->ctx != dialects[i - 1].ctx) &&
		    d->ops->whole_body_only(d->ctx, client_body))
			return true;
	}
	return false;
}

bool
nw_dialect_concurrent(const struct nw_dialect *prefill)
{
	return !(prefill->caps & NARWHAL_DIALECT_HANDOFF_SEQUENTIAL) &&
	       (prefill->caps & NARWHAL_DIALECT_HANDOFF_CONCURRENT);
}

bool
nw_dialect_compatible(const struct nw_dialect *prefill, const struct nw_dialect *decode)
{
	uint32_t mode = nw_dialect_concurrent(prefill) ? NARWHAL_DIALECT_HANDOFF_CONCURRENT
	                                               : NARWHAL_DIALECT_HANDOFF_SEQUENTIAL;

	return prefill->ctx == decode->ctx && (prefill->caps & mode) && (decode->caps & mode);
}

void
nw_dialect_read_error(const struct nw_dialect *d, long status, const char *body, size_t len,
                      struct narwhal_engine_error *out)
{
	memset(out, 0, sizeof *out);
	out->struct_size = sizeof *out;
	out->error_class = status > 0 && nw_engine_status_retryable(status) ? NARWHAL_ERROR_RETRYABLE
	                                                                 : NARWHAL_ERROR_PERMANENT;
	/* -EPROTO leaves the presets: the status alone decides. */
	(void)d->ops->parse_error(d->ctx, (int32_t)status, body, len, out);
	out->message[sizeof out->message - 1] = '\0';
	out->param[sizeof out->param - 1] = '\0';
}

bool
nw_engine_status_retryable(long status)
{
	switch (status) {
	case 0:   /* no response: connect, reset, timeout */
	case 408:
	case 429:
	case 500:
	case 502:
	case 503:
	case 504:
		return true;
	default:
		return false;
	}
}
