#include "build-config.h"

#include "obs/state.h"

#include <math.h>

/* A load the monitor or controller has priced (spec 7.1), or null. */
static json_t *
load_json(double v)
{
	return isfinite(v) ? json_real(v) : json_null();
}

/* What the state adds to the monitor's entry of engine i: its dialect, pin
 * holder, KV and loads, the drain's progress, and for operators its
 * address. */
static void
engine_extra(const struct nw_state_sources *src, uint32_t i, json_t *entry)
{
	const struct narwhal_engine_view *v = &src->fleet->engines[i];
	const struct nw_engine_config *ec = &src->cfg->fleet.engines[i];
	uint32_t residents = nw_monitor_residents(src->monitor, i);
	bool draining = nw_monitor_draining(src->monitor, i);
	const char *by = nw_monitor_pinned_by(src->monitor, i);

	json_object_update_new(entry, json_pack(
		"{s:s, s:o, s:b, s:I, s:I, s:{s:o, s:o}, s:{s:b, s:I, s:b}}",
		"dialect", ec->dialect,
		"pinned_by", by != NULL ? json_string(by) : json_null(),
		"profiled", (v->flags & NARWHAL_ENGINE_PROFILED) != 0,
		"resident_kv_tokens", (json_int_t)v->resident_kv_tokens,
		"queued_prefill", (json_int_t)v->queued_prefill,
		"loads", "prefill", load_json(v->prefill_load), "decode", load_json(v->decode_load),
		"drain", "draining", draining, "residents_left", (json_int_t)residents,
		"drained", draining && residents == 0));
	if (src->operator)
		json_object_set_new(entry, "url", json_string(ec->url));
}

static json_t *
admission_json(const struct nw_state_sources *src, const json_t *gauges)
{
	const json_t *plugin = json_object_get(src->plugins, "admission");

	return json_pack("{s:O?, s:s, s:O?, s:O?, s:I, s:I, s:b, s:f}",
	                 "plugin", json_object_get(plugin, "name"),
	                 "mode", nw_config_admission_name(src->cfg->serving.admission),
	                 "admitted_now", json_object_get(gauges, "admitted_now"),
	                 "queued_now", json_object_get(gauges, "queued_now"),
	                 "limit", (json_int_t)nw_config_admission_limit(src->cfg),
	                 "queue_capacity", (json_int_t)src->cfg->serving.queue_capacity,
	                 "stopped", src->fleet->admission_stopped,
	                 "retry_after_s", src->fleet->retry_after_s);
}

static json_t *
config_json(const struct nw_state_sources *src)
{
	g_autofree char *digest = nw_state_config_digest(src->cfg);
	json_t *loaded = json_null();

	if (src->cfg->loaded_unix_us > 0) {
		g_autoptr(GDateTime) t = g_date_time_new_from_unix_utc(src->cfg->loaded_unix_us /
		                                                        G_USEC_PER_SEC);
		g_autofree char *text = t ? g_date_time_format_iso8601(t) : NULL;

		if (text != NULL)
			loaded = json_string(text);
	}
	return json_pack("{s:s, s:o}", "digest", digest, "loaded_at", loaded);
}

json_t *
nw_state_to_json(const struct nw_state_sources *src)
{
	json_t *doc = nw_monitor_to_json(src->monitor, src->operator);
	json_t *gauges = nw_serve_counters_to_json(src->serve);
	json_t *engines = json_object_get(doc, "engines"), *entry;
	json_t *ops = src->operator_history != NULL
	              ? json_deep_copy(src->operator_history)
	              : json_pack("{s:b, s:[]}", "enabled", 0, "entries");
	size_t i;

	json_array_foreach(engines, i, entry)
		engine_extra(src, (uint32_t)i, entry);
	json_object_update_new(doc, json_pack(
		"{s:s, s:f, s:s?, s:o, s:{s:O?, s:I, s:f}, s:{s:I, s:o}, s:o, s:o, s:O}",
		"version", PACKAGE_VERSION,
		"uptime_s", src->uptime_s,
		"model", src->fleet->model,
		"admission", admission_json(src, gauges),
		"retry_budget",
		"credits", json_object_get(gauges, "retry_credits"),
		"budget", (json_int_t)src->cfg->serving.retry_budget,
		"replenish", src->cfg->serving.retry_replenish,
		"flip_history",
		"capacity", (json_int_t)src->cfg->controller.flip_history,
		"entries", nw_monitor_history_json(src->monitor),
		"operator_history", ops,
		"config", config_json(src),
		"plugins", src->plugins));
	json_decref(gauges);
	return doc;
}

char *
nw_state_config_digest(const struct nw_config *cfg)
{
	json_t *effective = nw_config_to_json(cfg);
	char *text = json_dumps(effective, JSON_COMPACT | JSON_SORT_KEYS);
	char *digest = g_compute_checksum_for_string(G_CHECKSUM_SHA256, text ? text : "", -1);
	char *out = g_strconcat("sha256:", digest, NULL);

	free(text);
	g_free(digest);
	json_decref(effective);
	return out;
}
