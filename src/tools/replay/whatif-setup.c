/*
 * The what-if mode's setup: the daemon's configuration (with --engines, a
 * fleet of N engines made from the first configured one), narwhal-sim's
 * engine model, the profile store; and for each run a world made the way
 * the daemon makes a generation (daemon-generation.c): the fleet registry
 * with its profiles, the admission, placement and controller plugins
 * through the plugin loader with host tables on the virtual clock, the
 * fleet's dialects (their capabilities decide pairing and movability), the
 * demand ledger, the admission ledger and the phase-slot wait lines.
 */
#include "build-config.h"

#include <math.h>
#include <string.h>

#include "tools/replay/whatif-internal.h"

static const char *const DEFAULT_PRESET = "opt-13b-a100"; /* narwhal-sim's */

/* --- the engine model ---------------------------------------------------- */

static bool
load_model(struct wi_setup *s, GError **error)
{
	if (s->o.model_file != NULL) {
		if (!sim_model_load_file(s->o.model_file, &s->model, error)) {
			g_prefix_error(error, "--sim-model-file: ");
			return false;
		}
		return true;
	}
	if (!sim_model_preset(s->o.preset ? s->o.preset : DEFAULT_PRESET, &s->model)) {
		g_autofree char *names = g_strjoinv(", ", (char **)sim_model_preset_names());

		g_set_error(error, RP_ERROR, RP_ERROR_PARSE, "--sim-preset %s: unknown; the presets "
		            "are %s", s->o.preset, names);
		return false;
	}
	return true;
}

/* --- the configuration ---------------------------------------------------- */

static uint32_t
configured_prefill(const struct nw_config *cfg)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < cfg->fleet.n_engines; i++)
		n += cfg->fleet.engines[i].role == NW_ROLE_PREFILL;
	return n;
}

/* The configured split scaled to n engines: at least one of each role when
 * there are two or more (the floors are the loader's to check). */
static uint32_t
scaled_prefill(const struct nw_config *cfg, uint32_t n)
{
	double share = (double)configured_prefill(cfg) / cfg->fleet.n_engines;
	uint32_t p = (uint32_t)floor(share * n + 0.5);

	if (n < 2)
		return share >= 0.5 ? n : 0;
	return CLAMP(p, 1, n - 1);
}

/* The file with fleet.engines replaced by n engines made from the first:
 * its dialect and lease, ids "<id>-<k>", addresses that are never called
 * (whatif-<k>.invalid, distinct as the loader wants), the scaled split,
 * none pinned. */
static struct nw_config *
load_scaled(const char *file, const struct nw_config *orig, uint32_t n, GError **error)
{
	json_error_t jerr;
	json_t *doc = json_load_file(file, 0, &jerr), *engines, *tmpl;
	GPtrArray *problems = NULL;
	g_autofree char *name = g_strdup_printf("%s (--engines %u)", file, n);
	const struct nw_engine_config *t = &orig->fleet.engines[0];
	uint32_t prefill = scaled_prefill(orig, n);
	struct nw_config *cfg;
	char *text;

	if (!json_is_object(doc) || !json_is_object(json_object_get(doc, "fleet"))) {
		json_decref(doc);
		g_set_error(error, RP_ERROR, RP_ERROR_FILE, "--engines: cannot read %s again", file);
		return NULL;
	}
	tmpl = json_array_get(json_object_get(json_object_get(doc, "fleet"), "engines"), 0);
	engines = json_array();
	for (uint32_t k = 0; k < n; k++) {
		json_t *e = json_is_object(tmpl) ? json_copy(tmpl) : json_object();
		const char *scheme = g_str_has_prefix(t->url, "https:") ? "https" : "http";

		json_object_del(e, "pinned");
		json_object_set_new(e, "id", json_sprintf("%s-%u", t->id, k));
		json_object_set_new(e, "url", json_sprintf("%s://whatif-%u.invalid:8000", scheme, k));
		json_object_set_new(e, "role", json_string(k < prefill ? "prefill" : "decode"));
		json_array_append_new(engines, e);
	}
	json_object_set_new(json_object_get(doc, "fleet"), "engines", engines);
	text = json_dumps(doc, JSON_COMPACT);
	json_decref(doc);
	cfg = nw_config_load_string(text, name, &problems);
	free(text);
	nw_config_print_problems(name, problems, cfg != NULL);
	g_ptr_array_unref(problems);
	if (cfg == NULL)
		g_set_error(error, RP_ERROR, RP_ERROR_PARSE, "--engines %u: the configuration with "
		            "that fleet is not valid (above)", n);
	return cfg;
}

/* The store at profiles.path as the daemon reads it (daemon-generation.c,
 * read_profiles): missing, no engine has a profile; there but invalid, an
 * error. An engine has the profile of its id, or with --engines the
 * template engine's. */
static bool
load_profiles(struct wi_setup *s, const char *template_id, GError **error)
{
	const struct nw_config *cfg = s->cfg;

	s->engine_profiles = g_new0(const struct nw_engine_profile *, MAX(cfg->fleet.n_engines, 1));
	if (!g_file_test(cfg->profiles.path, G_FILE_TEST_EXISTS))
		return true;
	s->profiles = nw_profile_store_load(cfg->profiles.path, error);
	if (s->profiles == NULL)
		return false;
	for (uint32_t i = 0; i < cfg->fleet.n_engines; i++)
		s->engine_profiles[i] = nw_profile_store_find(
			s->profiles, template_id ? template_id : cfg->fleet.engines[i].id);
	return true;
}

struct wi_setup *
wi_setup_new(const struct wi_options *o, GError **error)
{
	struct wi_setup *s = g_new0(struct wi_setup, 1);
	g_autofree char *template_id = NULL;

	s->o = *o;
	s->config_path = g_strdup(o->config);
	s->o.config = s->config_path;
	s->target = g_strdup_printf("what-if:%s", o->config);
	if (!(o->time_scale > 0) || !(o->noise_sigma >= 0)) {
		g_set_error(error, RP_ERROR, RP_ERROR_PARSE, "--sim-time-scale must be above 0 and "
		            "--sim-noise-sigma at least 0");
		goto fail;
	}
	if (!load_model(s, error))
		goto fail;
	s->cfg = nw_config_load_reported(o->config);
	if (s->cfg == NULL) {
		g_set_error(error, RP_ERROR, RP_ERROR_PARSE, "--what-if %s: not a valid configuration "
		            "(above)", o->config);
		goto fail;
	}
	if (o->engines > 0) {
		struct nw_config *scaled;

		template_id = g_strdup(s->cfg->fleet.engines[0].id);
		scaled = load_scaled(o->config, s->cfg, o->engines, error);
		if (scaled == NULL)
			goto fail;
		nw_config_free(s->cfg);
		s->cfg = scaled;
	}
	if (!load_profiles(s, template_id, error))
		goto fail;
	/* Fail before a long run, not after it: a world is made once here, as
	 * the daemon checks its plugins before it serves. */
	{
		struct wi_run_opts ro = { .timeout_s = 1 };
		struct wi_world *w = wi_world_new(s, &ro, error);

		if (w == NULL)
			goto fail;
		wi_world_free(w);
	}
	return s;
fail:
	wi_setup_free(s);
	return NULL;
}

void
wi_setup_free(struct wi_setup *s)
{
	if (s == NULL)
		return;
	nw_config_free(s->cfg);
	nw_profile_store_free(s->profiles);
	g_free(s->engine_profiles);
	g_free(s->config_path);
	g_free(s->target);
	g_free(s);
}

const char *
wi_setup_target(const struct wi_setup *s)
{
	return s->target;
}

const char *
wi_setup_model(const struct wi_setup *s)
{
	return s->cfg->fleet.model ? s->cfg->fleet.model : s->model.name;
}

json_t *
wi_setup_json(const struct wi_setup *s)
{
	const struct nw_config *cfg = s->cfg;
	uint32_t prefill = configured_prefill(cfg);

	return json_pack("{s:s, s:s?, s:s?, s:s, s:f, s:I, s:f, s:{s:I, s:I, s:I, s:b, s:b},"
	                 " s:{s:s, s:s, s:s, s:b}, s:s, s:b}",
	                 "config", s->config_path,
	                 "sim_preset", s->o.model_file ? NULL
	                               : s->o.preset ? s->o.preset : DEFAULT_PRESET,
	                 "sim_model_file", s->o.model_file,
	                 "model", s->model.name,
	                 "sim_noise_sigma", s->o.noise_sigma,
	                 "sim_seed", (json_int_t)s->o.seed,
	                 "sim_time_scale", s->o.time_scale,
	                 "fleet", "engines", (json_int_t)cfg->fleet.n_engines,
	                 "prefill", (json_int_t)prefill,
	                 "decode", (json_int_t)(cfg->fleet.n_engines - prefill),
	                 "scaled", s->o.engines > 0,
	                 "aggregate", s->o.aggregate,
	                 "plugins", "admission", cfg->plugins.admission.name,
	                 "placement", cfg->plugins.placement.name,
	                 "controller", cfg->plugins.controller.name,
	                 "advisory", cfg->controller.advisory,
	                 "profiles", cfg->profiles.path,
	                 "profiled", s->profiles != NULL);
}

/* --- a world ---------------------------------------------------------------- */

static bool
load_plugin(struct wi_world *w, narwhal_plugin_kind kind, const struct nw_plugin_config *pc,
            struct wi_plugin *out, GError **error)
{
	const struct nw_config *cfg = w->cfg;
	g_autofree char *file = nw_plugin_resolve(kind, pc->name, pc->path, cfg->plugins.dir);
	json_t *section;

	out->plugin = nw_plugin_load(kind, pc->path ? NULL : pc->name, file, error);
	if (out->plugin == NULL)
		return false;
	/* The host clock is the world's virtual clock (ARCHITECTURE.md 10). */
	out->host = nw_host_new(kind, out->plugin->desc->name, wi_queue_clock, &w->queue, w->fleet,
	                        w->metrics);
	section = nw_config_plugin_section(cfg, pc, kind);
	out->instance = nw_plugin_instance_new(out->plugin, nw_host_table(out->host), section,
	                                       error);
	json_decref(section);
	return out->instance != NULL;
}

static void
plugin_clear(struct wi_plugin *p)
{
	nw_plugin_instance_free(p->instance);
	nw_host_free(p->host);
	nw_plugin_free(p->plugin);
	memset(p, 0, sizeof *p);
}

struct wi_world *
wi_world_new(const struct wi_setup *s, const struct wi_run_opts *o, GError **error)
{
	struct wi_world *w = g_new0(struct wi_world, 1);
	const struct nw_config *cfg = s->cfg;
	struct nw_demand_windows windows;
	uint32_t n = cfg->fleet.n_engines;

	w->setup = s;
	w->cfg = cfg;
	w->opts = o;
	wi_queue_init(&w->queue);
	w->fleet = nw_fleet_new(cfg, 0);
	/* What the daemon learns from the engines' models answer. */
	w->fleet->max_model_len = s->model.max_model_len;
	for (uint32_t i = 0; i < n; i++)
		nw_fleet_set_profile(w->fleet, i, s->engine_profiles[i]);
	w->metrics = nw_plugin_metrics_new();
	if (!load_plugin(w, NARWHAL_KIND_ADMISSION, &cfg->plugins.admission, &w->admission, error) ||
	    !load_plugin(w, NARWHAL_KIND_PLACEMENT, &cfg->plugins.placement, &w->placement, error) ||
	    !load_plugin(w, NARWHAL_KIND_CONTROLLER, &cfg->plugins.controller, &w->controller,
	                 error))
		goto fail;
	w->dialects = nw_fleet_dialects_load(cfg, w->fleet, w->metrics, error);
	if (w->dialects == NULL)
		goto fail;
	/* --aggregate: every engine as an aggregate-only dialect makes it
	 * (neither handoff flag, docs/plugins.md): the fleet never pairs, so
	 * each request runs whole on the engine placement picks. */
	for (uint32_t i = 0; s->o.aggregate && i < n; i++)
		w->dialects->dialects[i].caps &= ~(uint32_t)(NARWHAL_DIALECT_HANDOFF_SEQUENTIAL |
		                                             NARWHAL_DIALECT_HANDOFF_CONCURRENT);
	nw_demand_windows_from_config(cfg, &windows);
	w->demand = nw_demand_new(&windows, 0);
	nw_resource_init(&w->admitted, nw_config_admission_limit(cfg), cfg->serving.queue_capacity);
	nw_wait_line_init(&w->prefill_line);
	nw_wait_line_init(&w->decode_line);
	w->eligible = g_new0(uint32_t, MAX(n, 1));
	wi_engines_init(&w->engines, n, &s->model, &wi_course_engine_callbacks, s->o.noise_sigma,
	                s->o.seed, s->o.time_scale, &w->queue, WI_EV_ENGINE);
	w->control = wi_control_new(w);
	return w;
fail:
	g_prefix_error(error, "--what-if %s: ", s->config_path);
	wi_world_free(w);
	return NULL;
}

void
wi_world_free(struct wi_world *w)
{
	if (w == NULL)
		return;
	for (size_t i = 0; w->results != NULL && i < w->schedule->items->len; i++)
		g_free(w->results[i].error);
	g_free(w->results);
	wi_control_free(w->control);
	wi_engines_clear(&w->engines);
	g_free(w->eligible);
	nw_demand_free(w->demand);
	nw_fleet_dialects_free(w->dialects);
	plugin_clear(&w->controller);
	plugin_clear(&w->placement);
	plugin_clear(&w->admission);
	nw_plugin_metrics_free(w->metrics);
	nw_fleet_free(w->fleet);
	wi_queue_clear(&w->queue);
	g_free(w);
}
