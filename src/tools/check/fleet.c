#include "build-config.h"

#include "tools/check/fleet.h"

#include <string.h>

#include "core/host.h"
#include "core/plugin-loader.h"

/* One loaded dialect plugin with its host table and instance. */
struct loaded_dialect {
	struct nw_plugin *plugin;
	struct nw_host *host;
	struct nw_plugin_instance *instance;
};

static void
loaded_dialect_free(gpointer data)
{
	struct loaded_dialect *ld = data;

	nw_plugin_instance_free(ld->instance);
	nw_host_free(ld->host);
	nw_plugin_free(ld->plugin);
	g_free(ld);
}

static struct loaded_dialect *
load_dialect(struct nw_check_fleet *f, const char *name, GError **error)
{
	const struct nw_config *cfg = f->cfg;
	g_autofree char *file = nw_plugin_resolve(NARWHAL_KIND_DIALECT, name, NULL, cfg->plugins.dir);
	struct loaded_dialect *ld = g_new0(struct loaded_dialect, 1);
	GError *local = NULL;

	ld->plugin = nw_plugin_load(NARWHAL_KIND_DIALECT, name, file, &local);
	if (ld->plugin != NULL) {
		ld->host = nw_host_new(NARWHAL_KIND_DIALECT, name, NULL, NULL, f->fleet, f->metrics);
		ld->instance = nw_plugin_instance_new(ld->plugin, nw_host_table(ld->host),
		                                      json_object_get(cfg->plugins.dialects, name),
		                                      &local);
	}
	if (ld->instance == NULL) {
		g_set_error(error, local->domain, local->code, "plugins.dialects.%s: %s", name,
		            local->message);
		g_error_free(local);
		loaded_dialect_free(ld);
		return NULL;
	}
	return ld;
}

struct nw_check_fleet *
nw_check_fleet_load(const struct nw_config *cfg, GError **error)
{
	struct nw_check_fleet *f = g_new0(struct nw_check_fleet, 1);
	uint32_t n = cfg->fleet.n_engines;

	f->cfg = cfg;
	f->n_engines = n;
	f->fleet = nw_fleet_new(cfg, nw_clock_monotonic_ns(NULL));
	f->metrics = nw_plugin_metrics_new();
	f->loaded = g_ptr_array_new_with_free_func(loaded_dialect_free);
	f->engine_instances = g_new0(struct nw_plugin_instance *, MAX(n, 1));
	f->dialects = g_new0(struct nw_dialect, MAX(n, 1));
	/* One instance per dialect name, shared by its engines: handoffs pair
	 * only within an instance (nw_dialect_compatible). */
	for (uint32_t i = 0; i < n; i++) {
		const char *name = cfg->fleet.engines[i].dialect;
		struct loaded_dialect *ld;

		for (uint32_t j = 0; j < i && f->engine_instances[i] == NULL; j++) {
			if (strcmp(cfg->fleet.engines[j].dialect, name) == 0)
				f->engine_instances[i] = f->engine_instances[j];
		}
		if (f->engine_instances[i] != NULL)
			continue;
		ld = load_dialect(f, name, error);
		if (ld == NULL) {
			nw_check_fleet_free(f);
			return NULL;
		}
		g_ptr_array_add(f->loaded, ld);
		f->engine_instances[i] = ld->instance;
	}
	if (!nw_dialects_init(f->dialects, cfg, f->engine_instances, error)) {
		nw_check_fleet_free(f);
		return NULL;
	}
	return f;
}

void
nw_check_fleet_free(struct nw_check_fleet *f)
{
	if (f == NULL)
		return;
	g_ptr_array_unref(f->loaded);
	g_free(f->engine_instances);
	g_free(f->dialects);
	nw_plugin_metrics_free(f->metrics);
	nw_fleet_free(f->fleet);
	g_free(f);
}
