/*
 * The fleet's dialect plugins, loaded the one way the daemon and
 * narwhal-check both need: each distinct dialect of the configuration
 * loaded once, with its plugins.dialects section, one instance shared by
 * its engines (handoffs pair only within an instance, core/dialect.h), and
 * every engine's struct nw_dialect filled by nw_dialects_init.
 */
#ifndef NW_CORE_FLEET_DIALECTS_H
#define NW_CORE_FLEET_DIALECTS_H

#include <glib.h>

#include "core/config.h"
#include "core/dialect.h"
#include "core/host.h"
#include "core/plugin-loader.h"

/* One loaded dialect plugin with its host table and instance. */
struct nw_loaded_dialect {
	struct nw_plugin *plugin;
	struct nw_host *host;
	struct nw_plugin_instance *instance;
};

/* Load dialect name with its section of cfg's plugins.dialects; fleet and
 * metrics back its host table (borrowed, they must outlive it). NULL with
 * error set, its message starting with "plugins.dialects.<name>: ". */
struct nw_loaded_dialect *nw_loaded_dialect_new(const struct nw_config *cfg, const char *name,
                                                struct nw_fleet *fleet,
                                                struct nw_plugin_metrics *metrics,
                                                GError **error);
void nw_loaded_dialect_free(gpointer loaded);

struct nw_fleet_dialects {
	struct nw_dialect *dialects;      /* one per engine */
	uint32_t n_engines;
	GPtrArray *loaded;                /* struct nw_loaded_dialect, in fleet order */
	struct nw_plugin_instance **engine_instances; /* one per engine, borrowed */
};

/* Load every dialect of cfg and ask each engine's capabilities. NULL with
 * error set when a plugin cannot be loaded or the fleet cannot be served;
 * the message starts with the configuration path at fault
 * ("plugins.dialects.vllm: ..." or "fleet.engines[0] (id): ..."). */
struct nw_fleet_dialects *nw_fleet_dialects_load(const struct nw_config *cfg,
                                                 struct nw_fleet *fleet,
                                                 struct nw_plugin_metrics *metrics,
                                                 GError **error);
void nw_fleet_dialects_free(struct nw_fleet_dialects *f);

#endif /* NW_CORE_FLEET_DIALECTS_H */
