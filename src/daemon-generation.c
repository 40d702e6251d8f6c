#include "build-config.h"

#include "daemon-generation.h"

#include <string.h>

#include "core/log.h"
#include "daemon.h"

/* --- plugins ----------------------------------------------------------- */

/* The plugin kinds chosen once a generation; dialects are per engine. */
struct plugin_slot {
	narwhal_plugin_kind kind;
	const char *config_path; /* for messages */
	size_t config_offset;    /* its struct nw_plugin_config in struct nw_config */
	size_t loaded_offset;    /* its struct loaded_plugin in struct nw_generation */
};

static const struct plugin_slot plugin_slots[] = {
	{ NARWHAL_KIND_ADMISSION, "plugins.admission", offsetof(struct nw_config, plugins.admission),
	  offsetof(struct nw_generation, admission) },
	{ NARWHAL_KIND_PLACEMENT, "plugins.placement", offsetof(struct nw_config, plugins.placement),
	  offsetof(struct nw_generation, placement) },
	{ NARWHAL_KIND_CONTROLLER, "plugins.controller",
	  offsetof(struct nw_config, plugins.controller), offsetof(struct nw_generation, controller) },
};

static void
loaded_plugin_clear(struct loaded_plugin *lp)
{
	nw_plugin_instance_free(lp->instance);
	nw_host_free(lp->host);
	nw_plugin_free(lp->plugin);
	memset(lp, 0, sizeof *lp);
}

/* Load and create the slot's plugin. On failure *where is the
 * configuration path at fault, for the message. */
static gboolean
load_plugin(const struct nw_config *cfg, const struct plugin_slot *slot, struct nw_fleet *fleet,
            struct nw_plugin_metrics *metrics, bool quiet, struct loaded_plugin *out,
            const char **where, GError **error)
{
	const struct nw_plugin_config *pc =
		(const struct nw_plugin_config *)((const char *)cfg + slot->config_offset);
	g_autofree char *file = nw_plugin_resolve(slot->kind, pc->name, pc->path, cfg->plugins.dir);
	struct loaded_plugin lp = { 0 };
	json_t *config;

	*where = slot->config_path;
	lp.plugin = nw_plugin_load(slot->kind, pc->path ? NULL : pc->name, file, error);
	if (lp.plugin == NULL) {
		/* The controller loaded by name is named by controller.policy
		 * (its plugins section may not name it, docs/configuration.md). */
		if (slot->kind == NARWHAL_KIND_CONTROLLER && pc->path == NULL)
			*where = "controller.policy";
		return FALSE;
	}
	lp.host = nw_host_new(slot->kind, lp.plugin->desc->name, NULL, NULL, fleet, metrics);
	nw_host_set_quiet(lp.host, quiet);
	config = nw_config_plugin_section(cfg, pc, slot->kind);
	lp.instance = nw_plugin_instance_new(lp.plugin, nw_host_table(lp.host), config, error);
	json_decref(config);
	if (lp.instance == NULL) {
		loaded_plugin_clear(&lp);
		return FALSE;
	}
	*out = lp;
	return TRUE;
}

/* The distinct dialect names of the fleet, in fleet order. */
static GPtrArray *
fleet_dialects(const struct nw_config *cfg)
{
	GPtrArray *names = g_ptr_array_new();

	for (uint32_t i = 0; i < cfg->fleet.n_engines; i++) {
		const char *d = cfg->fleet.engines[i].dialect;
		gboolean seen = FALSE;

		for (guint k = 0; k < names->len && !seen; k++)
			seen = strcmp(g_ptr_array_index(names, k), d) == 0;
		if (!seen)
			g_ptr_array_add(names, (gpointer)d);
	}
	return names;
}

/* --- profiles ------------------------------------------------------------ */

/* Read profiles.path into *store and give each engine of fleet the
 * profile of its id (docs/profiles.md, "How the router uses the store").
 * A missing store leaves every engine unprofiled (*store NULL; a hint in
 * the log when log_hints); one that is there but invalid is an error. */
static gboolean
read_profiles(const struct nw_config *cfg, struct nw_fleet *fleet, bool log_hints,
              struct nw_profile_store **store, GError **error)
{
	const char *file = cfg->profiles.path;

	*store = NULL;
	if (!g_file_test(file, G_FILE_TEST_EXISTS)) {
		if (log_hints)
			nw_log(NARWHAL_LOG_WARNING, "profiles_missing", "path", file, "hint",
			       "no engine has a measured profile, so the estimators answer \"no "
			       "profile\" (docs/profiles.md says how the store is made)", NULL);
		return TRUE;
	}
	*store = nw_profile_store_load(file, error);
	if (*store == NULL)
		return FALSE;
	for (uint32_t i = 0; i < cfg->fleet.n_engines; i++) {
		const struct nw_engine_config *e = &cfg->fleet.engines[i];
		const struct nw_engine_profile *p = nw_profile_store_find(*store, e->id);

		/* The id names the engine; an address can change (a move, a
		 * port) while the hardware stays, so a profile measured at
		 * another url is still used, and the operator is told. */
		if (p != NULL && log_hints && strcmp(p->url, e->url) != 0)
			nw_log(NARWHAL_LOG_WARNING, "profile_url_mismatch", "engine", e->id, "url", e->url,
			       "profiled_url", p->url, "hint",
			       "the profile is used; run narwhal-profile again if this is another engine",
			       NULL);
		nw_fleet_set_profile(fleet, i, p);
	}
	return TRUE;
}

/* What --check-config --show-plugins prints of a loaded plugin: its file
 * as an absolute path (a relative one is the working directory's), and
 * the files of the same name it hides further along the search path. */
static json_t *
loaded_json(const struct nw_plugin *p, const struct nw_config *cfg, const char *name,
            const char *path)
{
	g_autofree char *file = g_canonicalize_filename(p->path, NULL);
	g_auto(GStrv) hidden = nw_plugin_hidden(p->kind, name, path, cfg->plugins.dir);
	json_t *hides = json_array();

	for (char **h = hidden; *h != NULL; h++) {
		g_autofree char *abs = g_canonicalize_filename(*h, NULL);

		json_array_append_new(hides, json_string(abs));
	}
	return json_pack("{s:s, s:s?, s:s, s:o}", "name", p->desc->name, "version",
	                 p->desc->version, "path", file, "hides", hides);
}

gboolean
nw_daemon_check_plugins(const struct nw_config *cfg, GPtrArray *problems, json_t *loaded,
                        gboolean quiet)
{
	json_t *dialects = loaded ? json_object() : NULL;
	struct nw_fleet *fleet = nw_fleet_new(cfg, 0);
	struct nw_plugin_metrics *metrics = nw_plugin_metrics_new();
	struct nw_profile_store *profiles = NULL;
	GError *store_error = NULL;
	gboolean store_ok, ok;

	/* The plugins are created as the daemon would create them: over the
	 * fleet with its profiles (predictive admission checks them). With a
	 * store that cannot be read they are not: a plugin would only say
	 * again, and wrongly, that no engine was profiled. */
	store_ok = read_profiles(cfg, fleet, false, &profiles, &store_error);
	if (!store_ok) {
		nw_config_error_add(problems, false, "profiles.path", store_error->message);
		g_error_free(store_error);
	}
	ok = store_ok;
	for (size_t i = 0; store_ok && i < G_N_ELEMENTS(plugin_slots); i++) {
		struct loaded_plugin lp = { 0 };
		GError *error = NULL;
		const char *where;

		if (load_plugin(cfg, &plugin_slots[i], fleet, metrics, quiet, &lp, &where, &error)) {
			const struct nw_plugin_config *pc = (const struct nw_plugin_config *)(
				(const char *)cfg + plugin_slots[i].config_offset);

			if (loaded != NULL)
				json_object_set_new(loaded, nw_plugin_kind_name(plugin_slots[i].kind),
				                    loaded_json(lp.plugin, cfg, pc->name, pc->path));
			loaded_plugin_clear(&lp);
			continue;
		}
		nw_config_error_add(problems, false, where, error->message);
		g_error_free(error);
		ok = FALSE;
	}
	{
		g_autoptr(GPtrArray) names = fleet_dialects(cfg);

		for (guint k = 0; k < names->len; k++) {
			GError *error = NULL;
			struct nw_loaded_dialect *ld = nw_loaded_dialect_new(cfg, g_ptr_array_index(names, k),
			                                                     fleet, metrics, &error);

			if (ld != NULL) {
				const char *name = g_ptr_array_index(names, k);

				if (dialects != NULL)
					json_object_set_new(dialects, name,
					                    loaded_json(ld->plugin, cfg, name,
					                                nw_config_dialect_path(cfg, name)));
				nw_loaded_dialect_free(ld);
				continue;
			}
			/* The message starts with plugins.dialects.<name>. */
			nw_config_error_add(problems, false, NULL, error->message);
			g_error_free(error);
			ok = FALSE;
		}
	}
	/* No store at all, when a plugin refused (predictive admission
	 * refuses unprofiled engines): a typo in profiles.path looks just like
	 * an unprofiled fleet. A running daemon logs profiles_missing. */
	if (store_ok && profiles == NULL && !ok) {
		g_autofree char *msg = g_strdup_printf(
			"\"%s\" does not exist%s: no engine has a measured profile; `narwhal-profile "
			"--config FILE` writes the store (docs/profiles.md)", cfg->profiles.path,
			g_path_is_absolute(cfg->profiles.path)
				? "" : " (a relative path is taken from the working directory)");

		nw_config_error_add(problems, true, "profiles.path", msg);
	}
	if (loaded != NULL)
		json_object_set_new(loaded, "dialects", dialects);
	nw_plugin_metrics_free(metrics);
	nw_fleet_free(fleet);
	nw_profile_store_free(profiles);
	return ok;
}

/* --- a generation -------------------------------------------------------- */

/* What one engine of the newer fleet counts for the older generations'
 * work on it, as last applied (the data plane keeps own + this). */
struct lent_load {
	uint32_t resident_prefill, resident_decode, queued_prefill;
	uint32_t legs_out, handoff_decodes;
	uint64_t resident_kv_tokens;
	/* The priced work (core/pricing.h), so the newer projections see it. */
	int64_t resident_prefill_ns, queued_prefill_ns;
	uint32_t prefill_holds;
	uint64_t reserved_output_tokens;
};

/* The older engine's monotonic counts as last carried over. */
struct seen_counts {
	uint64_t legs_placed, legs_failed, progress;
	uint64_t calls[NW_CALL_KINDS], call_failures[NW_CALL_KINDS];
	double call_seconds[NW_CALL_KINDS];
};

static struct seen_counts
counts_of(const struct nw_engine_stats *st)
{
	struct seen_counts s = { st->legs_placed, st->legs_failed, st->progress, { 0 }, { 0 },
	                         { 0 } };

	memcpy(s.calls, st->calls, sizeof s.calls);
	memcpy(s.call_failures, st->call_failures, sizeof s.call_failures);
	memcpy(s.call_seconds, st->call_seconds, sizeof s.call_seconds);
	return s;
}

/* Add what the older engine counted since *seen to the newer one's
 * counts, so they go on across a reload (docs/metrics.md). */
static void
carry_counts(struct nw_engine_stats *st, const struct nw_engine_stats *ost,
             struct seen_counts *seen)
{
	struct seen_counts now = counts_of(ost);

	st->legs_placed += now.legs_placed - seen->legs_placed;
	st->legs_failed += now.legs_failed - seen->legs_failed;
	st->progress += now.progress - seen->progress;
	for (int k = 0; k < NW_CALL_KINDS; k++) {
		st->calls[k] += now.calls[k] - seen->calls[k];
		st->call_failures[k] += now.call_failures[k] - seen->call_failures[k];
		st->call_seconds[k] += now.call_seconds[k] - seen->call_seconds[k];
	}
	*seen = now;
	if (ost->last_placed_ns > st->last_placed_ns)
		st->last_placed_ns = ost->last_placed_ns;
}

struct nw_generation_carry {
	uint32_t *new_of_old;       /* older engine -> this fleet's index, or UINT32_MAX */
	struct lent_load *lent;     /* one per engine of this fleet */
	struct seen_counts *seen;   /* one per engine of the older fleet */
	uint64_t seen_plugin_errors;
	int64_t lent_pending_ns;    /* the older pool's priced work, as last lent */
	uint32_t lent_pending;
};

static void
carry_free(struct nw_generation *g)
{
	if (g->carry == NULL)
		return;
	g_free(g->carry->new_of_old);
	g_free(g->carry->lent);
	g_free(g->carry->seen);
	g_clear_pointer(&g->carry, g_free);
}

struct nw_generation *
nw_generation_new(struct nw_config *cfg, const struct nw_generation_shared *sh, GError **error)
{
	struct nw_generation *g = g_new0(struct nw_generation, 1);
	struct nw_serve_options so = { 0 };
	struct nw_monitor_options mo = { 0 };

	g->cfg = cfg;
	g->fleet = nw_fleet_new(cfg, nw_clock_monotonic_ns(NULL));
	/* Each generation reads the store afresh, so a reload sees a store
	 * narwhal-profile rewrote; the plugins see the profiles at create(). */
	if (!read_profiles(cfg, g->fleet, true, &g->profiles, error))
		goto fail;
	for (size_t i = 0; i < G_N_ELEMENTS(plugin_slots); i++) {
		struct loaded_plugin *lp =
			(struct loaded_plugin *)((char *)g + plugin_slots[i].loaded_offset);
		const char *where;

		if (!load_plugin(cfg, &plugin_slots[i], g->fleet, sh->plugin_metrics, false, lp,
		                 &where, error)) {
			/* A field of the file, not a plugin's own message: say which. */
			if (where != plugin_slots[i].config_path)
				g_prefix_error(error, "%s: %s: ", cfg->source ? cfg->source : "<config>",
				               where);
			goto fail;
		}
	}
	g->dialects = nw_fleet_dialects_load(cfg, g->fleet, sh->plugin_metrics, error);
	if (g->dialects == NULL)
		goto fail;
	if (cfg->server.api_keys_env != NULL) {
		g->api_keys = nw_serve_read_api_keys(cfg->server.api_keys_env, error);
		if (g->api_keys == NULL)
			goto fail;
	}
	so.cfg = cfg;
	so.fleet = g->fleet;
	so.admission = g->admission.instance;
	so.placement = g->placement.instance;
	so.dialects = g->dialects->dialects;
	so.serving_pool = sh->serving_pool;
	so.api_keys = g->api_keys;
	so.metrics = sh->serve_metrics;
	so.demand = sh->demand;
	so.ttft_breach = sh->ttft_breach;
	so.ttft_breach_data = sh->ttft_breach_data;
	g->serve = nw_serve_new(&so, error);
	if (g->serve == NULL)
		goto fail;
	mo.cfg = cfg;
	mo.fleet = g->fleet;
	mo.dialects = g->dialects->dialects;
	mo.control_pool = sh->control_pool;
	mo.clock = nw_clock_monotonic_ns;
	mo.control_connections = sh->control_connections;
	g->monitor = nw_monitor_new(&mo);
	return g;

fail:
	nw_generation_free(g);
	return NULL;
}

static bool
same_engine(const struct nw_engine_config *a, const struct nw_engine_config *b)
{
	return strcmp(a->id, b->id) == 0 && strcmp(a->url, b->url) == 0;
}

void
nw_generation_adopt(struct nw_generation *g, struct nw_generation *older, GPtrArray *added,
                    GPtrArray *removed)
{
	const struct nw_config *ncfg = g->cfg, *ocfg = older->cfg;
	uint32_t n = ncfg->fleet.n_engines, on = ocfg->fleet.n_engines;
	struct nw_generation_carry *c = g_new0(struct nw_generation_carry, 1);
	bool *kept = g_new0(bool, MAX(n, 1));
	int64_t now = nw_clock_monotonic_ns(NULL);

	c->new_of_old = g_new(uint32_t, MAX(on, 1));
	c->lent = g_new0(struct lent_load, MAX(n, 1));
	c->seen = g_new0(struct seen_counts, MAX(on, 1));
	for (uint32_t j = 0; j < on; j++) {
		c->new_of_old[j] = UINT32_MAX;
		for (uint32_t i = 0; i < n && c->new_of_old[j] == UINT32_MAX; i++) {
			if (same_engine(&ncfg->fleet.engines[i], &ocfg->fleet.engines[j]))
				c->new_of_old[j] = i;
		}
		if (c->new_of_old[j] == UINT32_MAX)
			g_ptr_array_add(removed, ocfg->fleet.engines[j].id);
		else
			kept[c->new_of_old[j]] = true;
	}
	for (uint32_t i = 0; i < n; i++) {
		if (!kept[i])
			g_ptr_array_add(added, ncfg->fleet.engines[i].id);
	}
	g_free(kept);
	nw_monitor_adopt(g->monitor, older->monitor, c->new_of_old);

	for (uint32_t j = 0; j < on; j++) {
		const struct nw_engine_config *oe = &ocfg->fleet.engines[j];
		const struct nw_engine_stats *ost = &older->fleet->stats[j];
		uint32_t i = c->new_of_old[j];
		const struct nw_engine_config *ne;
		struct narwhal_engine_view *v;
		struct nw_engine_stats *st;

		if (i == UINT32_MAX)
			continue;
		ne = &ncfg->fleet.engines[i];
		v = &g->fleet->engines[i];
		st = &g->fleet->stats[i];
		/* The counts go on from where they were. */
		carry_counts(st, ost, &c->seen[j]);
		/* The running role and pin carry over (the controller, floor
		 * repair or the operator may have set them), unless the file
		 * changes them: an edit is the operator's word. */
		if (ne->role_set && (!oe->role_set || ne->role != oe->role) &&
		    v->role != (narwhal_role)ne->role) {
			v->role = (narwhal_role)ne->role;
			v->role_since_ns = now;
		}
		if (ne->pinned != oe->pinned) {
			v->flags &= ~(uint32_t)NARWHAL_ENGINE_PINNED;
			if (ne->pinned)
				v->flags |= NARWHAL_ENGINE_PINNED;
		}
	}
	g->fleet->monitor_plugin_errors = older->fleet->monitor_plugin_errors;
	c->seen_plugin_errors = older->fleet->monitor_plugin_errors;
	g->number = older->number + 1;
	g->older = older;
	g->carry = c;
	nw_serve_set_older(g->serve, older->serve);
}

void
nw_generation_start(struct nw_generation *g, struct nw_http_server *http)
{
	nw_serve_set_http(g->serve, http);
	nw_monitor_start(g->monitor);
}

/* The newer generation of g (the one whose older is g), from newest. */
static struct nw_generation *
newer_of(struct nw_generation *newest, const struct nw_generation *g)
{
	for (struct nw_generation *n = newest; n != NULL; n = n->older) {
		if (n->older == g)
			return n;
	}
	return NULL;
}

/* An older generation's real legs feed the newest monitor through the
 * newer fleets (passive detection, docs/recovery.md). */
static void
forward_leg_outcome(void *data, uint32_t engine, nw_leg_outcome outcome, const char *detail)
{
	struct nw_generation *newer = data;
	uint32_t i = engine < newer->older->fleet->view.n_engines ? newer->carry->new_of_old[engine]
	                                                          : UINT32_MAX;

	if (i != UINT32_MAX && newer->fleet->leg_outcome != NULL)
		newer->fleet->leg_outcome(newer->fleet->leg_outcome_data, i, outcome, detail);
}

void
nw_generation_supersede(struct nw_generation *g)
{
	/* One monitor probes: the newest. Stopping clears g's hook. */
	nw_monitor_stop(g->monitor);
}

/* Counts of the older generation on engine j, now. */
static struct lent_load
load_of(const struct nw_fleet *f, uint32_t j)
{
	const struct narwhal_engine_view *v = &f->engines[j];
	const struct nw_engine_stats *st = &f->stats[j];
	const struct nw_engine_ledger *l = &f->ledger[j];

	return (struct lent_load){
		.resident_prefill = v->resident_prefill, .resident_decode = v->resident_decode,
		.queued_prefill = v->queued_prefill, .legs_out = st->legs_out,
		.handoff_decodes = st->handoff_decodes, .resident_kv_tokens = v->resident_kv_tokens,
		.resident_prefill_ns = l->resident_prefill_ns,
		.queued_prefill_ns = l->queued_prefill_ns, .prefill_holds = l->prefill_holds,
		.reserved_output_tokens = l->reserved_output_tokens,
	};
}

/* field += now - before, for unsigned counts that may go down. */
#define APPLY(dst, now, before) ((dst) = (dst) + (now) - (before))

/* Lend newer the load of its older generation; true when some engine's
 * lent load went down (room may have appeared). */
static bool
lend(struct nw_generation *newer)
{
	const struct nw_fleet *of = newer->older->fleet;
	struct nw_generation_carry *c = newer->carry;
	bool room = false;

	for (uint32_t j = 0; j < of->view.n_engines; j++) {
		uint32_t i = c->new_of_old[j];
		struct lent_load now, *was;
		struct narwhal_engine_view *v;
		struct nw_engine_stats *st;
		struct nw_engine_ledger *l;
		const struct nw_engine_stats *ost = &of->stats[j];
		uint32_t hd;

		if (i == UINT32_MAX)
			continue;
		now = load_of(of, j);
		was = &c->lent[i];
		v = &newer->fleet->engines[i];
		st = &newer->fleet->stats[i];
		l = &newer->fleet->ledger[i];
		room |= now.resident_prefill < was->resident_prefill ||
		        now.resident_decode < was->resident_decode ||
		        now.handoff_decodes < was->handoff_decodes;
		APPLY(v->resident_prefill, now.resident_prefill, was->resident_prefill);
		APPLY(v->resident_decode, now.resident_decode, was->resident_decode);
		APPLY(v->queued_prefill, now.queued_prefill, was->queued_prefill);
		APPLY(v->resident_kv_tokens, now.resident_kv_tokens, was->resident_kv_tokens);
		APPLY(st->legs_out, now.legs_out, was->legs_out);
		hd = st->handoff_decodes + now.handoff_decodes - was->handoff_decodes;
		/* Whether it takes aggregate work may have changed (core/pricing.h). */
		if ((hd == 0) != (st->handoff_decodes == 0))
			nw_fleet_changed(newer->fleet);
		st->handoff_decodes = hd;
		APPLY(l->resident_prefill_ns, now.resident_prefill_ns, was->resident_prefill_ns);
		APPLY(l->queued_prefill_ns, now.queued_prefill_ns, was->queued_prefill_ns);
		APPLY(l->prefill_holds, now.prefill_holds, was->prefill_holds);
		APPLY(l->reserved_output_tokens, now.reserved_output_tokens,
		      was->reserved_output_tokens);
		/* The older work's progress counts from its own clock. */
		l->progress_since_ns = MAX(l->progress_since_ns, of->ledger[j].progress_since_ns);
		*was = now;
		carry_counts(st, ost, &c->seen[j]);
	}
	APPLY(newer->fleet->pricing.pending_ns, of->pricing.pending_ns, c->lent_pending_ns);
	APPLY(newer->fleet->pricing.pending, of->pricing.pending, c->lent_pending);
	c->lent_pending_ns = of->pricing.pending_ns;
	c->lent_pending = of->pricing.pending;
	APPLY(newer->fleet->monitor_plugin_errors, of->monitor_plugin_errors,
	      c->seen_plugin_errors);
	c->seen_plugin_errors = of->monitor_plugin_errors;
	return room;
}

/* The older fleet follows the newer's verdicts and roles; an engine the
 * newer configuration dropped takes no new work there. */
static void
mirror(struct nw_generation *newer)
{
	struct nw_fleet *of = newer->older->fleet;
	const uint32_t *map = newer->carry->new_of_old;

	for (uint32_t j = 0; j < of->view.n_engines; j++) {
		struct narwhal_engine_view *ov = &of->engines[j];

		if (map[j] == UINT32_MAX) {
			ov->flags = (ov->flags & (NARWHAL_ENGINE_PINNED | NW_ENGINE_OWN_FLAGS)) |
			            NARWHAL_ENGINE_DRAINING;
			continue;
		}
		ov->flags = nw_engine_flags_follow(ov->flags, newer->fleet->engines[map[j]].flags);
		ov->role = newer->fleet->engines[map[j]].role;
		ov->role_since_ns = newer->fleet->engines[map[j]].role_since_ns;
	}
	of->admission_stopped = newer->fleet->admission_stopped;
	nw_fleet_changed(of);
	of->leg_outcome = forward_leg_outcome;
	of->leg_outcome_data = newer;
}

void
nw_generation_sync(struct nw_generation *g)
{
	if (g->older == NULL)
		return;
	/* Verdicts flow down from the newest, loads up from the oldest. */
	mirror(g);
	nw_generation_sync(g->older);
	if (lend(g))
		nw_serve_room_changed(g->serve);
}

unsigned
nw_generation_reap(struct nw_generation *newest)
{
	unsigned live = 0;
	char number[16];

	for (;;) {
		struct nw_generation *oldest = newest, *newer;

		while (oldest->older != NULL)
			oldest = oldest->older;
		if (oldest == newest || nw_serve_busy(oldest->serve) > 0)
			break;
		newer = newer_of(newest, oldest);
		/* Its last counts back (all zero now), then it goes. */
		nw_generation_sync(newest);
		g_snprintf(number, sizeof number, "%u", oldest->number);
		nw_log(NARWHAL_LOG_INFO, "generation_freed", "generation", number, NULL);
		newer->older = NULL;
		nw_serve_set_older(newer->serve, NULL);
		carry_free(newer);
		nw_generation_free(oldest);
	}
	for (struct nw_generation *g = newest->older; g != NULL; g = g->older)
		live++;
	return live;
}

unsigned
nw_generation_retained(const struct nw_generation *g)
{
	unsigned n = 0;

	for (; g != NULL; g = g->older)
		n += nw_serve_retained(g->serve);
	return n;
}

void
nw_generation_free(struct nw_generation *g)
{
	if (g == NULL)
		return;
	if (g->monitor != NULL)
		nw_monitor_stop(g->monitor);
	nw_serve_free(g->serve);
	nw_monitor_free(g->monitor);
	nw_fleet_dialects_free(g->dialects);
	g_strfreev(g->api_keys);
	loaded_plugin_clear(&g->admission);
	loaded_plugin_clear(&g->placement);
	loaded_plugin_clear(&g->controller);
	nw_fleet_free(g->fleet);
	nw_profile_store_free(g->profiles);
	nw_config_free(g->cfg);
	carry_free(g);
	g_free(g);
}
