/*
 * The host side of the dialect ABI (docs/plugins.md, "Dialects"): each
 * engine's dialect instance and capabilities, the engine references and
 * targets handed to builders, and the calls whose failures the host logs
 * and counts. Engine-format knowledge stays in the plugins; this module only
 * asks them.
 */
#ifndef NW_CORE_DIALECT_H
#define NW_CORE_DIALECT_H

#include <narwhal/plugin-abi.h>

#include <stdbool.h>
#include <stdint.h>

#include <glib.h>

#include "core/config.h"
#include "core/plugin-loader.h"

/* One engine's dialect: the loaded plugin's ops and instance, and what the
 * dialect says this engine can do. */
struct nw_dialect {
	const struct narwhal_dialect_ops *ops;
	void *ctx;
	const char *name;               /* the dialect plugin's name */
	uint32_t caps;                  /* NARWHAL_DIALECT_* for this engine */
	struct narwhal_engine_ref ref;  /* the engine, as dialect calls see it */
};

/* Fill dialects[i] for every engine of cfg from instances[i], ask each
 * engine's capabilities, and check that an engine with a handoff has the
 * slots for it. False with error set when the fleet cannot be served. */
bool nw_dialects_init(struct nw_dialect *dialects, const struct nw_config *cfg,
                      struct nw_plugin_instance *const *instances, GError **error);

/* The router-owned request keys of every dialect in the fleet, without
 * repeats: a NULL-terminated array (free with g_free; strings borrowed). */
const char **nw_dialects_router_keys(const struct nw_dialect *dialects, uint32_t n);

/* Whether any dialect of the fleet answers this client body only in a whole
 * body (its whole_body_only slot). */
bool nw_dialects_whole_body_only(const struct nw_dialect *dialects, uint32_t n,
                                 const json_t *client_body);

/* Whether the engine can take part in a prefill/decode pair. */
static inline bool
nw_dialect_pairs(const struct nw_dialect *d)
{
	return (d->caps & (NARWHAL_DIALECT_HANDOFF_SEQUENTIAL |
	                   NARWHAL_DIALECT_HANDOFF_CONCURRENT)) != 0;
}

/* Whether a prefill engine's pairs send both legs at once: its dialect
 * offers HANDOFF_CONCURRENT and not HANDOFF_SEQUENTIAL (sequential is
 * preferred when an engine can do both, since it needs no second leg in
 * flight). */
bool nw_dialect_concurrent(const struct nw_dialect *prefill);

/* Whether a decode engine can take a prefill engine's handoff: the same
 * dialect instance, and the prefill engine's handoff mode. */
bool nw_dialect_compatible(const struct nw_dialect *prefill, const struct nw_dialect *decode);

/* Read an engine error (HTTP status >= 400 with its body, or an in-band
 * event with status 0). out is preset from the status (spec 4.2) and
 * filled by the dialect. */
void nw_dialect_read_error(const struct nw_dialect *d, long status, const char *body,
                           size_t len, struct narwhal_engine_error *out);

/* HTTP statuses that may be retried before visible output: 408, 429, 500,
 * 502, 503, 504. Transport failures (status 0) are retryable too. */
bool nw_engine_status_retryable(long status);

#endif /* NW_CORE_DIALECT_H */
