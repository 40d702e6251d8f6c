#include "build-config.h"

#include "obs/state.h"

#include <math.h>

/* A figure that may be unknown (NaN): a load the monitor or controller
 * has priced (spec 7.1), a plugin's projection; null when unknown. */
static json_t *
finite_json(double v)
{
	return isfinite(v) ? json_real(v) : json_null();
}

/* What the state adds to the monitor's entry of engine i: its dialect and
 * what it runs, pin holder, KV and loads, the drain's progress, and for operators its
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
		"{s:s, s:s, s:o, s:b, s:I, s:I, s:{s:o, s:o}, s:{s:b, s:I, s:b}}",
		"dialect", ec->dialect,
		"runs", (v->flags & NARWHAL_ENGINE_WHOLE_ONLY) ? "whole"
		        : (v->flags & NARWHAL_ENGINE_PAIR_ONLY) ? "legs" : "both",
		"pinned_by", by != NULL ? json_string(by) : json_null(),
		"profiled", (v->flags & NARWHAL_ENGINE_PROFILED) != 0,
		"resident_kv_tokens", (json_int_t)v->resident_kv_tokens,
		"queued_prefill", (json_int_t)v->queued_prefill,
		"loads", "prefill", finite_json(v->prefill_load), "decode", finite_json(v->decode_load),
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

/* --- demand (docs/state.md, "demand") ------------------------------------ */

/* One value per placement phase. */
static json_t *
by_phase_json(const uint64_t *n)
{
	json_t *o = json_object();

	for (int k = 0; k < NW_DEMAND_PHASES; k++)
		json_object_set_new(o, nw_demand_phase_names[k], json_integer((json_int_t)n[k]));
	return o;
}

static json_t *
totals_json(const struct nw_demand_totals *t)
{
	json_t *refused = json_object();

	for (int k = 0; k < NW_DEMAND_REFUSALS; k++)
		json_object_set_new(refused, nw_demand_refusal_names[k],
		                    json_integer((json_int_t)t->refused[k]));
	return json_pack("{s:{s:I, s:I, s:I, s:I}, s:I, s:I, s:I, s:I, s:o, s:I, s:{s:I, s:I}, s:I}",
	                 "offers", "sized", (json_int_t)t->offers_sized,
	                 "unsized", (json_int_t)t->offers_unsized,
	                 "sized_by_chars", (json_int_t)t->offers_estimated,
	                 "without_max_tokens", (json_int_t)t->offers_unbounded,
	                 "prompt_tokens", (json_int_t)t->prompt_tokens,
	                 "output_tokens_requested", (json_int_t)t->output_requested,
	                 "queued", (json_int_t)t->queued,
	                 "admitted", (json_int_t)t->admitted,
	                 "refused", refused,
	                 "withdrawn", (json_int_t)t->withdrawn,
	                 "completed", "ok", (json_int_t)t->completed_ok,
	                 "failed", (json_int_t)t->completed_failed,
	                 "output_tokens_delivered", (json_int_t)t->output_delivered);
}

static json_t *
estimate_json(const struct nw_demand *d, int64_t now_ns, nw_demand_horizon h)
{
	struct nw_demand_estimate e;

	nw_demand_estimate(d, now_ns, h, &e);
	return json_pack("{s:f, s:f, s:f, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:f, s:f, s:f, s:o}",
	                 "horizon_s", e.horizon_s, "bucket_s", e.bucket_s, "covered_s", e.covered_s,
	                 "arrivals", (json_int_t)e.arrivals,
	                 "unsized_arrivals", (json_int_t)e.unsized,
	                 "prompt_tokens", (json_int_t)e.prompt_tokens,
	                 "output_tokens_requested", (json_int_t)e.output_requested,
	                 "output_tokens_delivered", (json_int_t)e.output_delivered,
	                 "completions", (json_int_t)e.completions,
	                 "arrivals_per_s", e.arrivals_per_s,
	                 "prompt_tokens_per_s", e.prompt_tokens_per_s,
	                 "output_tokens_requested_per_s", e.output_requested_per_s,
	                 "output_tokens_delivered_per_s", e.output_delivered_per_s,
	                 "arrival_dispersion", finite_json(e.dispersion));
}

static json_t *
evidence_json(const struct nw_demand *d, int64_t now_ns)
{
	const struct nw_demand_windows *w = nw_demand_windows(d);
	struct nw_demand_evidence ev;

	nw_demand_evidence(d, now_ns, &ev);
	return json_pack("{s:f, s:I, s:b, s:s?, s:o, s:f, s:f, s:I, s:I, s:s?}",
	                 "span_s", ev.span_s, "arrivals", (json_int_t)ev.arrivals,
	                 "closed", ev.closed, "closed_by", ev.closed_by,
	                 "closed_after_s", finite_json(ev.closed_after_s),
	                 "required_span_s", w->evidence_span_s,
	                 "max_span_s", w->evidence_max_span_s,
	                 "min_arrivals", (json_int_t)w->evidence_min_arrivals,
	                 "resets", (json_int_t)ev.resets, "last_reset", ev.last_reset);
}

static const char *
verdict_name(narwhal_admission_verdict v)
{
	switch (v) {
	case NARWHAL_ADMIT: return "admit";
	case NARWHAL_ADMIT_QUEUE: return "queue";
	case NARWHAL_REFUSE_TOO_LONG: return "too_long";
	default: return "refuse"; /* as the host acts on it */
	}
}

/* One priced decision. The request id is the client's choice: the
 * operator's copy only. */
static json_t *
decision_json(const struct nw_demand_decision *rec, int64_t now_ns, bool operator)
{
	json_t *o = json_pack("{s:f, s:s, s:I, s:b}",
	                      "age_s", (double)MAX(now_ns - rec->at_ns, 0) / 1e9,
	                      "kind", rec->kind == NW_DECISION_ADMISSION ? "admission" : "placement",
	                      "prompt_tokens", (json_int_t)rec->prompt_tokens,
	                      "prompt_tokens_exact", rec->prompt_tokens_exact);

	if (rec->kind == NW_DECISION_ADMISSION)
		json_object_update_new(o, json_pack(
			"{s:s, s:o, s:o, s:o, s:s?}",
			"verdict", verdict_name(rec->verdict),
			"projected_ttft_s", finite_json(rec->projected_ttft_s),
			"budget_s", finite_json(rec->budget_s),
			"retry_after_s", rec->verdict == NARWHAL_ADMIT || rec->verdict == NARWHAL_ADMIT_QUEUE
			                 ? json_null() : finite_json(rec->retry_after_s),
			"reason", rec->reason[0] ? rec->reason : NULL));
	else
		json_object_update_new(o, json_pack(
			"{s:s, s:s?, s:b, s:o, s:o, s:b}",
			"phase", rec->phase >= 1 && rec->phase <= NW_DEMAND_PHASES
			         ? nw_demand_phase_names[rec->phase - 1] : "other",
			"engine", rec->engine, "binding", rec->binding,
			"cost", finite_json(rec->cost),
			"projected_slo_ratio", finite_json(rec->projected_slo_ratio),
			"unserved", rec->unserved));
	if (operator)
		json_object_set_new(o, "request_id", json_string(rec->request_id));
	return o;
}

static json_t *
demand_json(const struct nw_demand *d, int64_t now_ns, bool operator)
{
	json_t *entries = json_array();

	for (uint32_t i = 0; i < nw_demand_decision_count(d); i++)
		json_array_append_new(entries, decision_json(nw_demand_decision_at(d, i), now_ns,
		                                             operator));
	return json_pack("{s:o, s:o, s:o, s:o, s:{s:i, s:I, s:o}}",
	                 "totals", totals_json(nw_demand_totals(d)),
	                 "short", estimate_json(d, now_ns, NW_DEMAND_SHORT),
	                 "long", estimate_json(d, now_ns, NW_DEMAND_LONG),
	                 "evidence", evidence_json(d, now_ns),
	                 "decisions", "capacity", NW_DEMAND_DECISIONS,
	                 "total", (json_int_t)nw_demand_totals(d)->decisions, "entries", entries);
}

json_t *
nw_state_to_json(const struct nw_state_sources *src)
{
	json_t *doc = nw_monitor_to_json(src->monitor, src->operator);
	json_t *gauges = nw_serve_counters_to_json(src->serve);
	json_t *engines = json_object_get(doc, "engines"), *entry;
	const struct nw_demand *demand = nw_serve_demand(src->serve);
	const struct nw_demand_totals *totals = nw_demand_totals(demand);
	int64_t now_ns = g_get_monotonic_time() * 1000;
	json_t *ops = src->operator_history != NULL
	              ? json_deep_copy(src->operator_history)
	              : json_pack("{s:b, s:[]}", "enabled", 0, "entries");
	size_t i;

	json_array_foreach(engines, i, entry)
		engine_extra(src, (uint32_t)i, entry);
	json_object_update_new(doc, json_pack(
		"{s:s, s:f, s:s?, s:o, s:o, s:{s:o, s:o}, s:{s:O?, s:I, s:f}, s:{s:I, s:o}, s:o, "
		"s:o, s:O}",
		"version", PACKAGE_VERSION,
		"uptime_s", src->uptime_s,
		"model", src->fleet->model,
		"admission", admission_json(src, gauges),
		"demand", demand_json(demand, now_ns, src->operator),
		"placement", "placed", by_phase_json(totals->placements),
		"unserved", by_phase_json(totals->unserved),
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
	/* Its times count from the flip history's time 0, so the two read
	 * together (docs/state.md, "controller"). */
	if (src->controller != NULL)
		json_object_set_new(doc, "controller", nw_controller_to_json(
			src->controller, (const char *const *)src->fleet->ids,
			nw_monitor_start_ns(src->monitor)));
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
