/*
 * The fleet's dialects for narwhal-check (and the handoff probe's tests):
 * each distinct dialect of the configuration loaded once, as the daemon
 * loads them (src/daemon.c), with its plugins.dialects section, and every
 * engine's struct nw_dialect filled by nw_dialects_init.
 */
#ifndef NW_CHECK_FLEET_H
#define NW_CHECK_FLEET_H

#include <glib.h>

#include "core/config.h"
#include "core/dialect.h"

struct nw_check_fleet {
	const struct nw_config *cfg;      /* borrowed */
	struct nw_dialect *dialects;      /* one per engine */
	uint32_t n_engines;
	/* Ownership of the loaded plugins, their host tables and instances. */
	struct nw_fleet *fleet;
	struct nw_plugin_metrics *metrics;
	GPtrArray *loaded;
	struct nw_plugin_instance **engine_instances;
};

/* Load every dialect of cfg and ask each engine's capabilities. NULL with
 * error set when a plugin cannot be loaded or the fleet cannot be served;
 * the message starts with the configuration path at fault
 * ("plugins.dialects.vllm: ..." or "fleet.engines[0] (id): ..."). */
struct nw_check_fleet *nw_check_fleet_load(const struct nw_config *cfg, GError **error);
void nw_check_fleet_free(struct nw_check_fleet *f);

#endif /* NW_CHECK_FLEET_H */
