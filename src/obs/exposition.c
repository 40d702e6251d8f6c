#include "build-config.h"

#include "obs/exposition.h"

#include <string.h>

#include "core/log.h"
#include "obs/prom.h"

/* The data plane's gauges among its counters (serve/counters.h lists the
 * counters; these are added by nw_serve_counters_to_json). */
static const struct {
	const char *key;
	const char *help;
} gauges[] = {
	{ "retained", "Completion requests held, answered ones still being sent included." },
	{ "in_progress", "Completion requests not yet decided." },
	{ "admitted_now", "Requests admitted now." },
	{ "queued_now", "Requests waiting in the admission queue." },
	{ "retry_credits", "Retry credits left in the budget (serving.retry_budget)." },
};

static bool
is_gauge(const char *key)
{
	for (size_t i = 0; i < G_N_ELEMENTS(gauges); i++) {
		if (strcmp(gauges[i].key, key) == 0)
			return true;
	}
	return false;
}

static void
write_serve(GString *out, struct nw_serve *serve)
{
	json_t *counters = nw_serve_counters_to_json(serve);
	const char *key;
	json_t *v;

	json_object_foreach(counters, key, v) {
		g_autofree char *name = NULL;

		if (is_gauge(key))
			continue;
		name = g_strdup_printf("narwhal_%s_total", key);
		nw_prom_family(out, name, "counter", "Data-plane counter (docs/api.md, counters).");
		nw_prom_sample(out, name, NULL, json_number_value(v));
	}
	for (size_t i = 0; i < G_N_ELEMENTS(gauges); i++) {
		g_autofree char *name = g_strdup_printf("narwhal_%s", gauges[i].key);

		nw_prom_family(out, name, "gauge", gauges[i].help);
		nw_prom_sample(out, name, NULL, json_number_value(json_object_get(counters,
		                                                                   gauges[i].key)));
	}
	json_decref(counters);
}

/* One family a line of the engines, each engine a sample. */
typedef double (*engine_value_fn)(const struct nw_exposition_sources *src, uint32_t i);

static double
engine_available(const struct nw_exposition_sources *src, uint32_t i)
{
	return (src->fleet->engines[i].flags & NARWHAL_ENGINE_AVAILABLE) != 0;
}

static double
engine_resident_prefill(const struct nw_exposition_sources *src, uint32_t i)
{
	return src->fleet->engines[i].resident_prefill;
}

static double
engine_resident_decode(const struct nw_exposition_sources *src, uint32_t i)
{
	return src->fleet->engines[i].resident_decode;
}

static double
engine_legs_placed(const struct nw_exposition_sources *src, uint32_t i)
{
	return (double)src->fleet->stats[i].legs_placed;
}

static double
engine_legs_failed(const struct nw_exposition_sources *src, uint32_t i)
{
	return (double)src->fleet->stats[i].legs_failed;
}

static double
engine_ejections(const struct nw_exposition_sources *src, uint32_t i)
{
	return (double)nw_monitor_engine_health(src->monitor, i)->ejections;
}

static const struct {
	const char *name;
	const char *type;
	const char *help;
	engine_value_fn value;
} engine_families[] = {
	{ "narwhal_engine_available", "gauge",
	  "1 when placement may use the engine (docs/recovery.md).", engine_available },
	{ "narwhal_engine_resident_prefill", "gauge", "Prefill requests resident on the engine.",
	  engine_resident_prefill },
	{ "narwhal_engine_resident_decode", "gauge", "Decode requests resident on the engine.",
	  engine_resident_decode },
	{ "narwhal_engine_legs_placed_total", "counter", "Engine legs started on the engine.",
	  engine_legs_placed },
	{ "narwhal_engine_legs_failed_total", "counter",
	  "Engine legs that failed through the engine's fault.", engine_legs_failed },
	{ "narwhal_engine_ejections_total", "counter", "Times the engine was ejected.",
	  engine_ejections },
};

static void
write_engines(GString *out, const struct nw_exposition_sources *src)
{
	uint32_t n = src->fleet->view.n_engines;

	for (size_t f = 0; f < G_N_ELEMENTS(engine_families); f++) {
		nw_prom_family(out, engine_families[f].name, engine_families[f].type,
		               engine_families[f].help);
		for (uint32_t i = 0; i < n; i++) {
			const char *labels[] = { "engine", src->fleet->ids[i], NULL };

			nw_prom_sample(out, engine_families[f].name, labels,
			               engine_families[f].value(src, i));
		}
	}
	/* Role and health state: one sample per engine with the value as a
	 * label, 1 (the state-set idiom). */
	nw_prom_family(out, "narwhal_engine_role", "gauge", "The engine's role (label role), 1.");
	for (uint32_t i = 0; i < n; i++) {
		const char *labels[] = {
			"engine", src->fleet->ids[i],
			"role", src->fleet->engines[i].role == NARWHAL_ROLE_DECODE ? "decode" : "prefill",
			NULL,
		};

		nw_prom_sample(out, "narwhal_engine_role", labels, 1);
	}
	nw_prom_family(out, "narwhal_engine_health_state", "gauge",
	               "The engine's health state (label state) and why it is out (label reason), "
	               "1 (docs/recovery.md).");
	for (uint32_t i = 0; i < n; i++) {
		const struct nw_engine_health *h = nw_monitor_engine_health(src->monitor, i);
		const char *reason = nw_health_reason_name(h->reason);
		const char *labels[] = {
			"engine", src->fleet->ids[i], "state", nw_health_state_name(h->state),
			"reason", reason != NULL ? reason : "", NULL,
		};

		nw_prom_sample(out, "narwhal_engine_health_state", labels, 1);
	}
}

static void
write_plugin_metric(const char *name, double value, void *data)
{
	GString *out = data;

	/* The host names them narwhal_plugin_<kind>_<name>_<metric> (plugin-abi.h)
	 * and the plugin says not whether it is a counter or a gauge. */
	if (!nw_prom_name_valid(name))
		return;
	nw_prom_family(out, name, "untyped", "Recorded by a plugin through the host.");
	nw_prom_sample(out, name, NULL, value);
}

GString *
nw_exposition_render(const struct nw_exposition_sources *src)
{
	GString *out = g_string_sized_new(8192);
	const char *build[] = { "version", PACKAGE_VERSION, NULL };

	nw_prom_family(out, "narwhal_build_info", "gauge", "Narwhal's version (label version), 1.");
	nw_prom_sample(out, "narwhal_build_info", build, 1);
	nw_prom_family(out, "narwhal_admission_stopped", "gauge",
	               "1 while admission is stopped by the degraded state (docs/recovery.md).");
	nw_prom_sample(out, "narwhal_admission_stopped", NULL, src->fleet->admission_stopped);
	write_serve(out, src->serve);
	write_engines(out, src);
	nw_plugin_metrics_foreach(src->plugin_metrics, write_plugin_metric, out);
	nw_prom_family(out, "narwhal_log_dropped_lines_total", "counter",
	               "Log lines dropped because stderr fell behind (docs/metrics.md, Access log).");
	nw_prom_sample(out, "narwhal_log_dropped_lines_total", NULL, (double)nw_log_dropped_lines());
	return out;
}
