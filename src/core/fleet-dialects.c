#include "build-config.h"

#include "core/fleet-dialects.h"

#include <string.h>

void
nw_loaded_dialect_free(gpointer data)
{
	struct nw_loaded_dialect *ld = data;

	if (ld == NULL)
		return;
	nw_plugin_instance_free(ld->instance);
	nw_host_free(ld->host);
	nw_plugin_free(ld->plugin);
	g_free(ld);
}

struct nw_loaded_dialect *
nw_loaded_dialect_new(const struct nw_config *cfg, const char *name, struct nw_fleet *fleet,
                      struct nw_plugin_metrics *metrics, GError **error)
{
	const char *path = nw_config_dialect_path(cfg, name);
	g_autofree char *file = nw_plugin_resolve(NARWHAL_KIND_DIALECT, name, path, cfg->plugins.dir);
	struct nw_loaded_dialect *ld = g_new0(struct nw_loaded_dialect, 1);
	GError *local = NULL;

	/* From an explicit path the name is not checked, as for the other
	 * kinds: engines name the dialect by its plugins.dialects key. */
	ld->plugin = nw_plugin_load(NARWHAL_KIND_DIALECT, path ? NULL : name, file, &local);
	if (ld->plugin != NULL) {
		json_t *section = nw_config_dialect_section(cfg, name);

		ld->host = nw_host_new(NARWHAL_KIND_DIALECT, name, NULL, NULL, fleet, metrics);
		ld->instance = nw_plugin_instance_new(ld->plugin, nw_host_table(ld->host), section,
		                                      &local);
		json_decref(section);
	}
	if (ld->instance == NULL) {
		g_set_error(error, local->domain, local->code, "plugins.dialects.%s: %s", name,
		            local->message);
		g_error_free(local);
		nw_loaded_dialect_free(ld);
		return NULL;
	}
	return ld;
}

struct nw_fleet_dialects *
nw_fleet_dialects_load(const struct nw_config *cfg, struct nw_fleet *fleet,
                       struct nw_plugin_metrics *metrics, GError **error)
{
	struct nw_fleet_dialects *f = g_new0(struct nw_fleet_dialects, 1);
	uint32_t n = cfg->fleet.n_engines;

	f->n_engines = n;
	f->loaded = g_ptr_array_new_with_free_func(nw_loaded_dialect_free);
	f->engine_instances = g_new0(struct nw_plugin_instance *, MAX(n, 1));
	f->dialects = g_new0(struct nw_dialect, MAX(n, 1));
	for (uint32_t i = 0; i < n; i++) {
		const char *name = cfg->fleet.engines[i].dialect;
		struct nw_loaded_dialect *ld;

		for (uint32_t j = 0; j < i && f->engine_instances[i] == NULL; j++) {
			if (strcmp(cfg->fleet.engines[j].dialect, name) == 0)
				f->engine_instances[i] = f->engine_instances[j];
		}
		if (f->engine_instances[i] != NULL)
			continue;
		ld = nw_loaded_dialect_new(cfg, name, fleet, metrics, error);
		if (ld == NULL) {
			nw_fleet_dialects_free(f);
			return NULL;
		}
		g_ptr_array_add(f->loaded, ld);
		f->engine_instances[i] = ld->instance;
	}
	if (!nw_dialects_init(f->dialects, cfg, f->engine_instances, error)) {
		nw_fleet_dialects_free(f);
		return NULL;
	}
	/* What each engine's dialect lets it run, for the policies
	 * (plugin-abi.h 2.3; the host's own rules: serve/eligible.c). */
	for (uint32_t i = 0; i < n; i++) {
		const struct nw_dialect *d = &f->dialects[i];
		uint32_t *flags = &fleet->engines[i].flags;

		*flags &= ~(uint32_t)(NARWHAL_ENGINE_WHOLE_ONLY | NARWHAL_ENGINE_PAIR_ONLY);
		if (!nw_dialect_pairs(d))
			*flags |= NARWHAL_ENGINE_WHOLE_ONLY;
		else if (!(d->caps & NARWHAL_DIALECT_PER_REQUEST_ROLES))
			*flags |= NARWHAL_ENGINE_PAIR_ONLY;
	}
	return f;
}

void
nw_fleet_dialects_free(struct nw_fleet_dialects *f)
{
	if (f == NULL)
		return;
	g_ptr_array_unref(f->loaded);
	g_free(f->engine_instances);
	g_free(f->dialects);
	g_free(f);
}
