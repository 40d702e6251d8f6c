#include "build-config.h"

#include "core/host.h"

#include <math.h>
#include <string.h>
#include <time.h>

#include "core/estimate.h"
#include "core/log.h"
#include "core/plugin-loader.h"
#include "core/split-price.h"

struct nw_plugin_metrics {
	GHashTable *values; /* full name -> double * */
};

struct nw_host {
	struct narwhal_host table;
	char *plugin;        /* "admission/open", for logs */
	char *metric_prefix; /* "narwhal_plugin_admission_open_" */
	nw_clock_fn clock;
	void *clock_data;
	struct nw_fleet *fleet;
	struct nw_plugin_metrics *metrics;
	GHashTable *slots;   /* name as the plugin gives it -> its value in
	                      * metrics: a metric update on the request path
	                      * allocates nothing once the name is known */
	bool quiet;          /* nw_host_set_quiet */
};

int64_t
nw_clock_monotonic_ns(void *unused)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* --- fleet ----------------------------------------------------------- */

struct nw_fleet *
nw_fleet_new(const struct nw_config *cfg, int64_t now_ns)
{
	struct nw_fleet *fleet = g_new0(struct nw_fleet, 1);
	uint32_t n = cfg->fleet.n_engines;

	fleet->engines = g_new0(struct narwhal_engine_view, MAX(n, 1));
	fleet->stats = g_new0(struct nw_engine_stats, MAX(n, 1));
	fleet->profiles = g_new0(const struct nw_engine_profile *, MAX(n, 1));
	fleet->ledger = g_new0(struct nw_engine_ledger, MAX(n, 1));
	fleet->model = g_strdup(cfg->fleet.model);
	fleet->max_model_len = -1;
	fleet->retry_after_s = 1.0;
	fleet->ids = g_new0(char *, n + 1);
	for (uint32_t i = 0; i < n; i++) {
		const struct nw_engine_config *e = &cfg->fleet.engines[i];
		struct narwhal_engine_view *v = &fleet->engines[i];

		fleet->ids[i] = g_strdup(e->id);
		v->struct_size = sizeof *v;
		v->index = i;
		v->id = fleet->ids[i];
		v->role = (narwhal_role)e->role;
		/* Engines count as available until health checking says otherwise. */
		v->flags = NARWHAL_ENGINE_AVAILABLE | (e->pinned ? NARWHAL_ENGINE_PINNED : 0);
		v->role_since_ns = now_ns;
		v->prefill_load = NAN;
		v->decode_load = NAN;
	}
	fleet->view.struct_size = sizeof fleet->view;
	fleet->view.engine_view_size = sizeof(struct narwhal_engine_view);
	fleet->view.n_engines = n;
	fleet->view.engines = fleet->engines;
	fleet->view.ttft_target_s = cfg->slo.ttft_s;
	fleet->view.tpot_target_s = cfg->slo.tpot_s;
	nw_pricing_init(fleet, cfg->controller.reactive.decode_correction_min,
	                cfg->controller.reactive.decode_correction_max,
	                cfg->controller.reactive.decode_correction_alpha,
	                cfg->controller.reactive.decode_correction_min_samples);
	return fleet;
}

void
nw_fleet_free(struct nw_fleet *fleet)
{
	if (fleet == NULL)
		return;
	g_strfreev(fleet->ids);
	g_free(fleet->engines);
	g_free(fleet->stats);
	g_free(fleet->profiles);
	g_free(fleet->ledger);
	g_free(fleet->model);
	g_free(fleet);
}

void
nw_fleet_set_profile(struct nw_fleet *fleet, uint32_t i, const struct nw_engine_profile *p)
{
	if (i >= fleet->view.n_engines)
		return;
	fleet->profiles[i] = p;
	fleet->engines[i].flags &= ~(uint32_t)NARWHAL_ENGINE_PROFILED;
	if (p != NULL)
		fleet->engines[i].flags |= NARWHAL_ENGINE_PROFILED;
	nw_pricing_profiles_changed(fleet);
}

/* --- metrics --------------------------------------------------------- */

struct nw_plugin_metrics *
nw_plugin_metrics_new(void)
{
	struct nw_plugin_metrics *m = g_new0(struct nw_plugin_metrics, 1);

	m->values = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
	return m;
}

void
nw_plugin_metrics_free(struct nw_plugin_metrics *m)
{
	if (m == NULL)
		return;
	g_hash_table_destroy(m->values);
	g_free(m);
}

double
nw_plugin_metrics_get(const struct nw_plugin_metrics *m, const char *name)
{
	double *v = g_hash_table_lookup(m->values, name);

	return v ? *v : NAN;
}

void
nw_plugin_metrics_foreach(const struct nw_plugin_metrics *m,
                          void (*fn)(const char *name, double value, void *data), void *data)
{
	g_autoptr(GList) names = g_list_sort(g_hash_table_get_keys(m->values),
	                                     (GCompareFunc)strcmp);

	for (GList *l = names; l != NULL; l = l->next)
		fn(l->data, *(double *)g_hash_table_lookup(m->values, l->data), data);
}

static double *
metric_slot(struct nw_host *h, const char *name)
{
	double *v = g_hash_table_lookup(h->slots, name);
	char *full;

	if (v != NULL)
		return v;
	full = g_strconcat(h->metric_prefix, name, NULL);

	/* Prometheus names allow [a-zA-Z0-9_:]; map anything else to '_'. */
	for (char *p = full; *p; p++) {
		if (!g_ascii_isalnum(*p) && *p != '_' && *p != ':')
			*p = '_';
	}
	v = g_hash_table_lookup(h->metrics->values, full);
	if (v == NULL) {
		v = g_new0(double, 1);
		g_hash_table_insert(h->metrics->values, full, v);
	} else {
		g_free(full);
	}
	g_hash_table_insert(h->slots, g_strdup(name), v);
	return v;
}

/* --- the services ---------------------------------------------------- */

static int64_t
svc_now_ns(void *ctx)
{
	struct nw_host *h = ctx;

	return h->clock(h->clock_data);
}

static void
svc_log(void *ctx, narwhal_log_level level, const char *message)
{
	struct nw_host *h = ctx;

	if (h->quiet)
		return;
	if (level > NARWHAL_LOG_ERROR)
		level = NARWHAL_LOG_ERROR;
	nw_log(level, "plugin", "plugin", h->plugin, "message", message ? message : "", NULL);
}

static void
svc_counter_add(void *ctx, const char *name, double delta)
{
	if (name != NULL && delta >= 0)
		*metric_slot(ctx, name) += delta;
}

static void
svc_gauge_set(void *ctx, const char *name, double value)
{
	if (name != NULL)
		*metric_slot(ctx, name) = value;
}

static const struct narwhal_fleet_view *
svc_fleet(void *ctx)
{
	struct nw_host *h = ctx;

	return h->fleet ? &h->fleet->view : NULL;
}

static narwhal_estimate_status
svc_prefill_seconds(void *ctx, uint32_t engine, uint64_t tokens, double *out)
{
	struct nw_host *h = ctx;

	if (h->fleet == NULL)
		return NARWHAL_ESTIMATE_NO_PROFILE;
	return nw_pricing_prefill_s(h->fleet, engine, tokens, out);
}

/* The profile's interval times the engine's live correction (spec 7.7). */
static narwhal_estimate_status
svc_decode_interval_seconds(void *ctx, uint32_t engine, uint32_t active, uint64_t kv,
                            double *out)
{
	struct nw_host *h = ctx;

	if (h->fleet == NULL)
		return NARWHAL_ESTIMATE_NO_PROFILE;
	return nw_pricing_decode_interval_s(h->fleet, engine, active, kv, out);
}

/* The FIFO completion projection (core/pricing.c), at the host clock. */
static narwhal_estimate_status
svc_prefill_queue_seconds(void *ctx, uint32_t engine, uint64_t tokens, double *out)
{
	struct nw_host *h = ctx;

	if (h->fleet == NULL)
		return NARWHAL_ESTIMATE_NO_PROFILE;
	return nw_pricing_prefill_queue_s(h->fleet, engine, tokens, h->clock(h->clock_data), out);
}

/* A split priced on the mean profile (core/split-price.c), at the host
 * clock. The query is read up to its struct_size (plugin-abi.h): a field
 * beyond it reads as 0, so a query that ends before the split's sizes is
 * one without sense (NO_PROFILE). */
static narwhal_estimate_status
svc_price_split(void *ctx, const struct narwhal_split_query *q, struct narwhal_split_price *out)
{
	struct nw_host *h = ctx;
	struct narwhal_split_query query = { 0 };

	if (h->fleet == NULL || q == NULL || out == NULL)
		return NARWHAL_ESTIMATE_NO_PROFILE;
	memcpy(&query, q, MIN(q->struct_size, sizeof query));
	return nw_split_price(h->fleet, &query, h->clock(h->clock_data), out);
}

struct nw_host *
nw_host_new(narwhal_plugin_kind kind, const char *plugin_name, nw_clock_fn clock,
            void *clock_data, struct nw_fleet *fleet, struct nw_plugin_metrics *metrics)
{
	struct nw_host *h = g_new0(struct nw_host, 1);
	const char *kind_name = nw_plugin_kind_name(kind);

	h->plugin = g_strdup_printf("%s/%s", kind_name, plugin_name);
	h->metric_prefix = g_strdup_printf("narwhal_plugin_%s_%s_", kind_name, plugin_name);
	h->slots = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
	for (char *p = h->metric_prefix; *p; p++) {
		if (!g_ascii_isalnum(*p) && *p != '_')
			*p = '_';
	}
	h->clock = clock ? clock : nw_clock_monotonic_ns;
	h->clock_data = clock_data;
	h->fleet = fleet;
	h->metrics = metrics;

	h->table.struct_size = sizeof h->table;
	h->table.abi_major = NARWHAL_ABI_MAJOR;
	h->table.abi_minor = NARWHAL_ABI_MINOR;
	h->table.host_ctx = h;
	h->table.now_ns = svc_now_ns;
	h->table.log = svc_log;
	h->table.counter_add = svc_counter_add;
	h->table.gauge_set = svc_gauge_set;
	h->table.fleet = svc_fleet;
	h->table.prefill_seconds = svc_prefill_seconds;
	h->table.decode_interval_seconds = svc_decode_interval_seconds;
	h->table.prefill_queue_seconds = svc_prefill_queue_seconds;
	h->table.price_split = svc_price_split;
	return h;
}

void
nw_host_set_quiet(struct nw_host *host, bool quiet)
{
	host->quiet = quiet;
}

const struct narwhal_host *
nw_host_table(const struct nw_host *host)
{
	return &host->table;
}

const char *
nw_host_metric_prefix(const struct nw_host *host)
{
	return host->metric_prefix;
}

void
nw_host_free(struct nw_host *host)
{
	if (host == NULL)
		return;
	g_free(host->plugin);
	g_free(host->metric_prefix);
	g_hash_table_destroy(host->slots);
	g_free(host);
}
