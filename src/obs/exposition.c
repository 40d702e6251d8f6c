#include "build-config.h"

#include "obs/exposition.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#include "control/health.h"
#include "core/log.h"
#include "obs/prom.h"
#include "serve/counters.h"

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

/* --- the request path -------------------------------------------------- */

/* Refusals by reason, from the counters (docs/metrics.md). */
static const struct {
	const char *reason;
	size_t offset;
} refusals[] = {
#define REFUSAL(reason, field) { reason, offsetof(struct nw_serve_counters, field) }
	REFUSAL("unauthorized", unauthorized),
	REFUSAL("connection_ceiling", ceiling_refusals),
	REFUSAL("too_large", too_large),
	REFUSAL("admission", refused_admission),
	REFUSAL("ttft_target", refused_too_long),
	REFUSAL("queue_full", queue_full),
	REFUSAL("queue_timeout", queue_timeouts),
	REFUSAL("context_length", refused_context_length),
	REFUSAL("degraded", refused_degraded),
#undef REFUSAL
};

static const char *const call_kinds[NW_CALL_KINDS] = {
	"tokenize", "prefill", "decode", "aggregate",
};

static void
write_outcomes(GString *out, const struct nw_serve_metrics *m, const struct nw_demand_totals *t)
{
	nw_prom_family(out, "narwhal_requests_total", "counter",
	               "Client requests by route, status and answer code (none: served in full), "
	               "counted when the answer is final.");
	for (uint32_t route = 0; route < NW_METRIC_ROUTE_N; route++) {
		for (uint32_t code = 0; code < NW_OUTCOME_N_CODES; code++) {
			for (uint32_t st = 0; st < NW_OUTCOME_N_STATUSES; st++) {
				uint64_t n = m->outcomes[route][code][st];
				char status[8];
				const char *labels[] = {
					"route", nw_metric_route_names[route], "status", status,
					"code", nw_outcome_codes[code], NULL,
				};

				if (n == 0)
					continue;
				if (nw_outcome_statuses[st] != 0)
					g_snprintf(status, sizeof status, "%u", nw_outcome_statuses[st]);
				else
					g_strlcpy(status, "other", sizeof status);
				nw_prom_sample(out, "narwhal_requests_total", labels, (double)n);
			}
		}
	}
	nw_prom_family(out, "narwhal_refusals_total", "counter",
	               "Completion requests refused before any engine work, by reason.");
	for (size_t i = 0; i < G_N_ELEMENTS(refusals); i++) {
		const char *labels[] = { "reason", refusals[i].reason, NULL };
		const uint64_t *n = (const uint64_t *)((const char *)&m->counters +
		                                       refusals[i].offset);

		nw_prom_sample(out, "narwhal_refusals_total", labels, (double)*n);
	}
	/* The one reason without a data-plane counter of its own: the demand
	 * ledger counts it. */
	{
		const char *labels[] = {
			"reason", nw_demand_refusal_names[NW_DEMAND_REFUSED_UNAVAILABLE], NULL,
		};

		nw_prom_sample(out, "narwhal_refusals_total", labels,
		               (double)t->refused[NW_DEMAND_REFUSED_UNAVAILABLE]);
	}
}

static void
write_histograms(GString *out, const struct nw_serve_metrics *m)
{
	static const struct {
		const char *name;
		const char *help;
		size_t offset;
		const struct nw_histogram_scale *scale;
	} hists[] = {
		{ "narwhal_time_to_first_token_seconds",
		  "Streams: arrival to the first token released to the client.",
		  offsetof(struct nw_serve_metrics, ttft), &nw_scale_ttft },
		{ "narwhal_time_per_output_token_seconds",
		  "Streams served in full: mean interval per output token after the first.",
		  offsetof(struct nw_serve_metrics, tpot), &nw_scale_tpot },
		{ "narwhal_request_duration_seconds",
		  "Completion requests served in full: arrival to the last byte.",
		  offsetof(struct nw_serve_metrics, e2e), &nw_scale_e2e },
		{ "narwhal_queue_wait_seconds",
		  "Admitted requests: the wait in the admission queue (0 when admitted at once).",
		  offsetof(struct nw_serve_metrics, queue_wait), &nw_scale_queue },
		{ "narwhal_handoff_seconds",
		  "Prefill/decode pairs: the prefill engine's answer to the decode call going out.",
		  offsetof(struct nw_serve_metrics, handoff), &nw_scale_handoff },
	};

	for (size_t i = 0; i < G_N_ELEMENTS(hists); i++) {
		nw_prom_family(out, hists[i].name, "histogram", hists[i].help);
		nw_prom_histogram_write(out, hists[i].name, NULL, hists[i].scale,
		                        (const struct nw_histogram *)((const char *)m +
		                                                      hists[i].offset));
	}
	nw_prom_family(out, "narwhal_engine_call_duration_seconds", "histogram",
	               "Engine calls that ended, fleet-wide, by leg kind: sent to answered.");
	for (uint32_t k = 0; k < NW_CALL_KINDS; k++) {
		const char *labels[] = { "leg", call_kinds[k], NULL };

		nw_prom_histogram_write(out, "narwhal_engine_call_duration_seconds", labels,
		                        &nw_scale_call, &m->calls[k]);
	}
}

static void
write_by_route(GString *out, const char *name, const char *help, const uint64_t *values)
{
	nw_prom_family(out, name, "counter", help);
	for (uint32_t route = 0; route < NW_METRIC_ROUTE_N; route++) {
		const char *labels[] = { "route", nw_metric_route_names[route], NULL };

		nw_prom_sample(out, name, labels, (double)values[route]);
	}
}

static void
write_request_path(GString *out, const struct nw_exposition_sources *src)
{
	const struct nw_serve_metrics *m = nw_serve_metrics(src->serve);
	struct nw_serve_gauges g;
	const char *prefill[] = { "phase", "prefill", NULL }, *decode[] = { "phase", "decode", NULL };

	nw_serve_gauges(src->serve, &g);
	write_outcomes(out, m, nw_demand_totals(nw_serve_demand(src->serve)));
	write_histograms(out, m);
	nw_prom_family(out, "narwhal_phase_slots", "gauge",
	               "Resident requests each engine may hold in a phase "
	               "(serving.prefill_concurrency, serving.decode_concurrency).");
	nw_prom_sample(out, "narwhal_phase_slots", prefill, g.prefill_slots);
	nw_prom_sample(out, "narwhal_phase_slots", decode, g.decode_slots);
	nw_prom_family(out, "narwhal_phase_waiting", "gauge",
	               "Requests waiting for a phase slot on any engine.");
	nw_prom_sample(out, "narwhal_phase_waiting", prefill, g.prefill_waiting);
	nw_prom_sample(out, "narwhal_phase_waiting", decode, g.decode_waiting);
	nw_prom_family(out, "narwhal_retry_budget", "gauge",
	               "The retry budget's ceiling in credits (serving.retry_budget).");
	nw_prom_sample(out, "narwhal_retry_budget", NULL, g.retry_budget);
	write_by_route(out, "narwhal_client_received_bytes_total",
	               "Request body bytes received from clients.", m->client_bytes_in);
	write_by_route(out, "narwhal_client_sent_bytes_total",
	               "Answer body and stream bytes sent to clients.", m->client_bytes_out);
	nw_prom_family(out, "narwhal_upstream_sent_bytes_total", "counter",
	               "Request body bytes sent to engines.");
	nw_prom_sample(out, "narwhal_upstream_sent_bytes_total", NULL, (double)m->engine_bytes_out);
	nw_prom_family(out, "narwhal_upstream_received_bytes_total", "counter",
	               "Answer bytes received from engines.");
	nw_prom_sample(out, "narwhal_upstream_received_bytes_total", NULL,
	               (double)m->engine_bytes_in);
	nw_prom_family(out, "narwhal_plugin_call_failures_total", "counter",
	               "Plugin calls that failed, by plugin kind (the monitor's dialect calls "
	               "included).");
	for (uint32_t k = 0; k < NW_PLUGIN_FAILURE_N; k++) {
		const char *labels[] = { "kind", nw_plugin_failure_kinds[k], NULL };
		uint64_t n = m->plugin_failures[k];

		if (k == NW_PLUGIN_FAILURE_DIALECT)
			n += src->fleet->monitor_plugin_errors;
		nw_prom_sample(out, "narwhal_plugin_call_failures_total", labels, (double)n);
	}
}

/* --- demand (docs/metrics.md, "Demand") ------------------------------- */

/* One sample a label value. */
static void
write_labelled(GString *out, const char *name, const char *type, const char *help,
               const char *key, const char *const *values, const double *v, size_t n)
{
	nw_prom_family(out, name, type, help);
	for (size_t k = 0; k < n; k++) {
		const char *labels[] = { key, values[k], NULL };

		nw_prom_sample(out, name, labels, v[k]);
	}
}

static void
write_demand(GString *out, const struct nw_demand *d)
{
	static const char *const sizes[] = { "sized", "unsized" };
	static const char *const results[] = { "ok", "failed" };
	static const char *const work[] = { "prompt", "output_requested", "output_delivered" };
	static const char *const horizons[] = { "short", "long" };
	const struct nw_demand_totals *t = nw_demand_totals(d);
	int64_t now_ns = g_get_monotonic_time() * 1000;
	struct nw_demand_estimate est[2];
	struct nw_demand_evidence ev;
	double v[3];

	G_STATIC_ASSERT(NW_DEMAND_PHASES <= G_N_ELEMENTS(v));
	nw_demand_estimate(d, now_ns, NW_DEMAND_SHORT, &est[0]);
	nw_demand_estimate(d, now_ns, NW_DEMAND_LONG, &est[1]);
	nw_demand_evidence(d, now_ns, &ev);
	v[0] = (double)t->offers_sized;
	v[1] = (double)t->offers_unsized;
	write_labelled(out, "narwhal_demand_offers_total", "counter",
	               "Completion offers: sized (prompt tokens known) or unsized (refused at the "
	               "connection ceiling before the body).", "size", sizes, v, 2);
	nw_prom_family(out, "narwhal_demand_withdrawn_total", "counter",
	               "Sized offers that ended before an admission verdict.");
	nw_prom_sample(out, "narwhal_demand_withdrawn_total", NULL, (double)t->withdrawn);
	v[0] = (double)t->completed_ok;
	v[1] = (double)t->completed_failed;
	write_labelled(out, "narwhal_demand_completions_total", "counter",
	               "Admitted requests that ended, answered in full (ok) or not (failed).",
	               "result", results, v, 2);
	v[0] = (double)t->prompt_tokens;
	v[1] = (double)t->output_requested;
	v[2] = (double)t->output_delivered;
	write_labelled(out, "narwhal_demand_tokens_total", "counter",
	               "Token work: prompt tokens and max_tokens of sized offers, output tokens "
	               "delivered by completions.", "work", work, v, 3);
	v[0] = est[0].horizon_s;
	v[1] = est[1].horizon_s;
	write_labelled(out, "narwhal_demand_horizon_seconds", "gauge",
	               "The demand estimates' horizons (controller.reactive.evidence_span_s, "
	               "controller.reactive.window_s).", "horizon", horizons, v, 2);
	v[0] = est[0].arrivals_per_s;
	v[1] = est[1].arrivals_per_s;
	write_labelled(out, "narwhal_demand_arrivals_per_second", "gauge",
	               "Offers per second over the horizon, refused and unsized ones included.",
	               "horizon", horizons, v, 2);
	v[0] = est[0].dispersion;
	v[1] = est[1].dispersion;
	write_labelled(out, "narwhal_demand_arrival_dispersion", "gauge",
	               "Variance over mean of the arrival counts of the horizon's buckets: 1 for "
	               "Poisson arrivals, more for bursts (NaN: unmeasured).",
	               "horizon", horizons, v, 2);
	nw_prom_family(out, "narwhal_demand_tokens_per_second", "gauge",
	               "Token work per second over the horizon.");
	for (int h = 0; h < 2; h++) {
		const double rate[] = {
			est[h].prompt_tokens_per_s, est[h].output_requested_per_s,
			est[h].output_delivered_per_s,
		};

		for (size_t k = 0; k < G_N_ELEMENTS(work); k++) {
			const char *labels[] = { "horizon", horizons[h], "work", work[k], NULL };

			nw_prom_sample(out, "narwhal_demand_tokens_per_second", labels, rate[k]);
		}
	}
	nw_prom_family(out, "narwhal_demand_evidence_closed", "gauge",
	               "1 while the arrival-evidence window is closed (spec 7.6).");
	nw_prom_sample(out, "narwhal_demand_evidence_closed", NULL, ev.closed);
	nw_prom_family(out, "narwhal_demand_evidence_arrivals", "gauge",
	               "Offers since the arrival-evidence window opened.");
	nw_prom_sample(out, "narwhal_demand_evidence_arrivals", NULL, (double)ev.arrivals);
	nw_prom_family(out, "narwhal_demand_evidence_span_seconds", "gauge",
	               "Seconds since the arrival-evidence window opened.");
	nw_prom_sample(out, "narwhal_demand_evidence_span_seconds", NULL, ev.span_s);
	nw_prom_family(out, "narwhal_demand_evidence_resets_total", "counter",
	               "Times the arrival-evidence window was opened again.");
	nw_prom_sample(out, "narwhal_demand_evidence_resets_total", NULL, (double)ev.resets);
	for (int k = 0; k < NW_DEMAND_PHASES; k++)
		v[k] = (double)t->placements[k];
	write_labelled(out, "narwhal_placements_total", "counter",
	               "Engines the placement plugin chose for a request, by phase.", "phase",
	               nw_demand_phase_names, v, NW_DEMAND_PHASES);
	for (int k = 0; k < NW_DEMAND_PHASES; k++)
		v[k] = (double)t->unserved[k];
	write_labelled(out, "narwhal_placement_unserved_total", "counter",
	               "Placements where every candidate broke its projected SLO (spec 5), by "
	               "phase.", "phase", nw_demand_phase_names, v, NW_DEMAND_PHASES);
}

/* --- engines ---------------------------------------------------------- */

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

/* The holds beside the health state (control/health.h), and the failure
 * quarantine, which keeps an engine out as they do. */
static const struct {
	uint32_t bit;
	const char *name;
} holds[] = {
	{ NW_HOLD_DRAIN, "drain" },
	{ NW_HOLD_MODEL_MISMATCH, "model_mismatch" },
	{ NW_HOLD_UNPROBED, "unprobed" },
};

static bool
engine_held(const struct nw_exposition_sources *src, uint32_t i, size_t k)
{
	if (k == G_N_ELEMENTS(holds))
		return (src->fleet->engines[i].flags & NARWHAL_ENGINE_QUARANTINED) != 0;
	return (nw_monitor_engine_health(src->monitor, i)->holds & holds[k].bit) != 0;
}

/* Per-engine call figures: a count and two sums per engine and leg kind
 * (the fleet-wide histograms carry the distribution). */
static const struct {
	const char *name;
	const char *help;
} call_families[] = {
	{ "narwhal_engine_calls_total", "Engine calls that ended, by leg kind." },
	{ "narwhal_engine_call_seconds_total", "Seconds of the engine calls that ended, by leg kind." },
	{ "narwhal_engine_call_failures_total",
	  "Engine calls that failed through the engine's fault, by leg kind." },
};

static double
call_value(const struct nw_engine_stats *st, size_t family, uint32_t kind)
{
	switch (family) {
	case 0: return (double)st->calls[kind];
	case 1: return st->call_seconds[kind];
	default: return (double)st->call_failures[kind];
	}
}

/* The engines' own metrics as the monitor last read them (docs/metrics.md,
 * "Engines"): only engines with a reading, and of those only the figures
 * their dialect knows. */
static void
write_readings(GString *out, const struct nw_exposition_sources *src, const char *labels,
               const uint32_t *at)
{
	static const struct {
		const char *name;
		const char *help;
	} families[] = {
		{ "narwhal_engine_running_requests",
		  "The engine's running batch, as it last reported it." },
		{ "narwhal_engine_waiting_requests",
		  "Requests waiting in the engine's own queue, as it last reported it." },
		{ "narwhal_engine_kv_cache_usage_ratio",
		  "The engine's KV-cache use, 0 to 1, as it last reported it." },
		{ "narwhal_engine_reading_age_seconds",
		  "Seconds since the monitor last read the engine's own metrics." },
	};
	uint32_t n = src->fleet->view.n_engines;
	struct narwhal_engine_metrics *r = g_new(struct narwhal_engine_metrics, MAX(n, 1));
	double *age = g_new(double, MAX(n, 1));
	bool *has = g_new(bool, MAX(n, 1));

	for (uint32_t i = 0; i < n; i++)
		has[i] = nw_monitor_engine_reading(src->monitor, i, &r[i], &age[i]);
	for (size_t f = 0; f < G_N_ELEMENTS(families); f++) {
		nw_prom_family(out, families[f].name, "gauge", families[f].help);
		for (uint32_t i = 0; i < n; i++) {
			double v = f == 0 ? (double)r[i].running : f == 1 ? (double)r[i].waiting
			           : f == 2 ? r[i].kv_usage : age[i];

			/* Unknown: -1 for counts, NaN for the ratio. */
			if (has[i] && (f >= 2 ? isfinite(v) : v >= 0))
				nw_prom_sample_pre(out, families[f].name, labels + at[i], NULL, v);
		}
	}
	g_free(r);
	g_free(age);
	g_free(has);
}

/* A scrape of a 1,024-engine fleet must stay under 10 ms (bench/obs): each
 * engine's label is escaped once, and the samples reuse it. */
static void
write_engines(GString *out, const struct nw_exposition_sources *src)
{
	uint32_t n = src->fleet->view.n_engines;
	GString *text = g_string_sized_new(32 * (gsize)MAX(n, 1));
	uint32_t *at = g_new(uint32_t, MAX(n, 1));

	for (uint32_t i = 0; i < n; i++) {
		const char *labels[] = { "engine", src->fleet->ids[i], NULL };

		at[i] = (uint32_t)text->len;
		nw_prom_labels_append(text, labels);
		g_string_append_c(text, '\0');
	}
#define PRE(i) (text->str + at[i])
	for (size_t f = 0; f < G_N_ELEMENTS(engine_families); f++) {
		nw_prom_family(out, engine_families[f].name, engine_families[f].type,
		               engine_families[f].help);
		for (uint32_t i = 0; i < n; i++)
			nw_prom_sample_pre(out, engine_families[f].name, PRE(i), NULL,
			                   engine_families[f].value(src, i));
	}
	/* Role, health state and holds: one sample per engine with the value
	 * as a label, 1 (the state-set idiom); holds 0 or 1 each. */
	nw_prom_family(out, "narwhal_engine_role", "gauge", "The engine's role (label role), 1.");
	for (uint32_t i = 0; i < n; i++) {
		const char *labels[] = {
			"role", src->fleet->engines[i].role == NARWHAL_ROLE_DECODE ? "decode" : "prefill",
			NULL,
		};

		nw_prom_sample_pre(out, "narwhal_engine_role", PRE(i), labels, 1);
	}
	nw_prom_family(out, "narwhal_engine_health_state", "gauge",
	               "The engine's health state (label state) and why it is out (label reason), "
	               "1 (docs/recovery.md).");
	for (uint32_t i = 0; i < n; i++) {
		const struct nw_engine_health *h = nw_monitor_engine_health(src->monitor, i);
		const char *reason = nw_health_reason_name(h->reason);
		const char *labels[] = {
			"state", nw_health_state_name(h->state), "reason", reason != NULL ? reason : "",
			NULL,
		};

		nw_prom_sample_pre(out, "narwhal_engine_health_state", PRE(i), labels, 1);
	}
	nw_prom_family(out, "narwhal_engine_hold", "gauge",
	               "1 while the hold (label hold: drain, model_mismatch, unprobed, "
	               "quarantine) keeps the engine out of placement.");
	for (uint32_t i = 0; i < n; i++) {
		for (size_t k = 0; k <= G_N_ELEMENTS(holds); k++) {
			const char *labels[] = {
				"hold", k < G_N_ELEMENTS(holds) ? holds[k].name : "quarantine", NULL,
			};

			nw_prom_sample_pre(out, "narwhal_engine_hold", PRE(i), labels,
			                   engine_held(src, i, k));
		}
	}
	nw_prom_family(out, "narwhal_engine_pinned", "gauge",
	               "1 while the engine's role is pinned, by the configuration or the "
	               "operator (label by).");
	for (uint32_t i = 0; i < n; i++) {
		const char *by = nw_monitor_pinned_by(src->monitor, i);
		const char *config[] = { "by", "config", NULL }, *op[] = { "by", "operator", NULL };

		nw_prom_sample_pre(out, "narwhal_engine_pinned", PRE(i), config,
		                   g_strcmp0(by, "config") == 0);
		nw_prom_sample_pre(out, "narwhal_engine_pinned", PRE(i), op,
		                   g_strcmp0(by, "operator") == 0);
	}
	nw_prom_family(out, "narwhal_engine_drain_residents", "gauge",
	               "Engines an operator drains: requests still resident (0: drained).");
	for (uint32_t i = 0; i < n; i++) {
		if (nw_monitor_draining(src->monitor, i))
			nw_prom_sample_pre(out, "narwhal_engine_drain_residents", PRE(i), NULL,
			                   nw_monitor_residents(src->monitor, i));
	}
	write_readings(out, src, text->str, at);
	for (size_t f = 0; f < G_N_ELEMENTS(call_families); f++) {
		nw_prom_family(out, call_families[f].name, "counter", call_families[f].help);
		for (uint32_t i = 0; i < n; i++) {
			for (uint32_t k = 0; k < NW_CALL_KINDS; k++) {
				const char *labels[] = { "leg", call_kinds[k], NULL };

				nw_prom_sample_pre(out, call_families[f].name, PRE(i), labels,
				                   call_value(&src->fleet->stats[i], f, k));
			}
		}
	}
#undef PRE
	g_free(at);
	g_string_free(text, TRUE);
}

/* --- the monitor, the roles and the daemon ------------------------------ */

/* A state set: one sample per value, 1 for the current one. */
static void
write_state_set(GString *out, const char *name, const char *key, const char *const *values,
                size_t n, const char *current)
{
	for (size_t k = 0; k < n; k++) {
		const char *labels[] = { key, values[k], NULL };

		nw_prom_sample(out, name, labels, g_strcmp0(values[k], current) == 0);
	}
}

/* One sample per role. */
static void
write_by_role(GString *out, const char *name, const char *type, const char *help,
              double prefill, double decode)
{
	const char *p[] = { "role", "prefill", NULL }, *d[] = { "role", "decode", NULL };

	nw_prom_family(out, name, type, help);
	nw_prom_sample(out, name, p, prefill);
	nw_prom_sample(out, name, d, decode);
}

static void
write_monitor(GString *out, const struct nw_exposition_sources *src)
{
	static const char *const statuses[] = { "ok", "degraded", "unavailable" };
	struct nw_monitor_summary s;

	nw_monitor_summary(src->monitor, &s);
	nw_prom_family(out, "narwhal_health_status", "gauge",
	               "GET /narwhal/health's status (label status: ok, degraded, unavailable), "
	               "1 for the current one.");
	write_state_set(out, "narwhal_health_status", "status", statuses, G_N_ELEMENTS(statuses),
	                s.status);
	nw_prom_family(out, "narwhal_monitor_passes_total", "counter", "Monitor passes run.");
	nw_prom_sample(out, "narwhal_monitor_passes_total", NULL, (double)s.passes);
	nw_prom_family(out, "narwhal_monitor_failed_passes", "gauge",
	               "Monitor passes in a row with a monitoring failure; admission stops at "
	               "narwhal_monitor_failure_limit.");
	nw_prom_sample(out, "narwhal_monitor_failed_passes", NULL, s.failed_passes);
	nw_prom_family(out, "narwhal_monitor_failure_limit", "gauge",
	               "Failed passes in a row that stop admission "
	               "(controller.monitor_failure_limit).");
	nw_prom_sample(out, "narwhal_monitor_failure_limit", NULL, s.failure_limit);
	nw_prom_family(out, "narwhal_monitor_failures_total", "counter",
	               "The monitor's failures by stage (an engine's unreadable answer included).");
	for (size_t k = 0; k < NW_MONITOR_STAGES; k++) {
		const char *labels[] = { "stage", nw_monitor_stages[k], NULL };

		nw_prom_sample(out, "narwhal_monitor_failures_total", labels, (double)s.failures[k]);
	}

	write_by_role(out, "narwhal_role_live_engines", "gauge",
	              "Engines of the role available to placement.", s.floors.live_prefill,
	              s.floors.live_decode);
	write_by_role(out, "narwhal_role_floor", "gauge",
	              "The least live engines the role keeps (controller.min_prefill, "
	              "controller.min_decode).", s.min_prefill, s.min_decode);
	write_by_role(out, "narwhal_role_floor_breached", "gauge",
	              "1 while too few movable live engines keep the role's floor.",
	              s.floors.prefill_breach, s.floors.decode_breach);
	write_by_role(out, "narwhal_role_reachable_engines", "gauge",
	              "The live engines of the role that floor repair can reach.",
	              s.floors.reachable_prefill, s.floors.reachable_decode);
	nw_prom_family(out, "narwhal_role_changes_total", "counter",
	               "Role changes by caller, applied (true) or only advised (false).");
	for (uint32_t c = 0; c < NW_ROLE_CALLERS; c++) {
		for (int applied = 1; applied >= 0; applied--) {
			const char *labels[] = {
				"caller", nw_role_callers[c], "applied", applied ? "true" : "false", NULL,
			};

			nw_prom_sample(out, "narwhal_role_changes_total", labels,
			               (double)s.role_changes[c][applied]);
		}
	}
}

/* --- the controller host (docs/metrics.md, "Controller") ------------------- */

static void
write_controller(GString *out, const struct nw_controller *c)
{
	static const char *const kinds[] = { "scheduled", "urgent" };
	static const char *const callers[] = { "controller", "controller_urgent" };
	static const char *const horizons[] = { "short", "long" };
	static const char *const splits[] = { "current", "proposed" };
	struct nw_controller_summary s;
	const char *gate[3] = { "gate", NULL, NULL };
	double v[2];

	nw_controller_summary(c, &s);
	v[0] = (double)s.evaluations[0];
	v[1] = (double)s.evaluations[1];
	write_labelled(out, "narwhal_controller_evaluations_total", "counter",
	               "Controller evaluations: scheduled (each monitor pass) or urgent (a "
	               "projected TTFT breach).", "kind", kinds, v, 2);
	nw_prom_family(out, "narwhal_controller_proposals_total", "counter",
	               "Controller evaluations by caller and what became of the proposal.");
	for (int k = 0; k < 2; k++) {
		for (int r = 0; r < NW_CONTROLLER_RESULTS; r++) {
			const char *labels[] = {
				"caller", callers[k], "result", nw_controller_result_names[r], NULL,
			};

			nw_prom_sample(out, "narwhal_controller_proposals_total", labels,
			               (double)s.results[k][r]);
		}
	}
	gate[1] = s.gate != NULL ? s.gate : "none";
	nw_prom_family(out, "narwhal_controller_gate", "gauge",
	               "What blocks role movement now (label gate), 1.");
	nw_prom_sample(out, "narwhal_controller_gate", gate, 1);
	write_by_role(out, "narwhal_controller_proposed_engines", "gauge",
	              "The split the last evaluation proposed.", s.proposed_prefill,
	              s.proposed_decode);
	write_by_role(out, "narwhal_controller_pool_load", "gauge",
	              "The pool loads the last evaluation was priced on (spec 7.1).",
	              s.prefill_load, s.decode_load);
	v[0] = s.demand_short;
	v[1] = s.demand_long;
	write_labelled(out, "narwhal_controller_demand_arrivals_per_second", "gauge",
	               "The demand the last evaluation was priced on, by horizon.", "horizon",
	               horizons, v, 2);
	nw_prom_family(out, "narwhal_controller_evidence_closed", "gauge",
	               "1 when the last evaluation saw the arrival-evidence window closed.");
	nw_prom_sample(out, "narwhal_controller_evidence_closed", NULL, s.evidence_closed);
	v[0] = s.worst_ratio_current;
	v[1] = s.worst_ratio_proposed;
	write_labelled(out, "narwhal_controller_worst_slo_ratio", "gauge",
	               "The worst projected SLO ratio of the current and proposed splits at the "
	               "last evaluation (NaN: not priced).", "split", splits, v, 2);
	nw_prom_family(out, "narwhal_controller_urgent_pending", "gauge",
	               "1 while an urgent evaluation waits for its wake.");
	nw_prom_sample(out, "narwhal_controller_urgent_pending", NULL,
	               nw_controller_urgent_pending(c));
}

static void
write_daemon(GString *out, const struct nw_exposition_daemon *d)
{
	const struct {
		const char *result;
		uint64_t n;
	} reloads[] = {
		{ "applied", d->reloads_applied },
		{ "failed", d->reloads_failed },
		{ "refused", d->reloads_refused },
	};

	nw_prom_family(out, "narwhal_draining", "gauge",
	               "1 from the stop signal on: in-flight requests finish, new ones are "
	               "refused, readiness is false.");
	nw_prom_sample(out, "narwhal_draining", NULL, d->draining);
	nw_prom_family(out, "narwhal_config_reloads_total", "counter",
	               "Configuration reloads by result: applied, failed (an invalid file), "
	               "refused (a field that needs a restart, or Narwhal stopping).");
	for (size_t k = 0; k < G_N_ELEMENTS(reloads); k++) {
		const char *labels[] = { "result", reloads[k].result, NULL };

		nw_prom_sample(out, "narwhal_config_reloads_total", labels, (double)reloads[k].n);
	}
	nw_prom_family(out, "narwhal_config_last_reload_success_timestamp_seconds", "gauge",
	               "When the configuration in force was loaded (Unix seconds): the start, or "
	               "the last reload applied.");
	nw_prom_sample(out, "narwhal_config_last_reload_success_timestamp_seconds", NULL,
	               d->loaded_unix_s);
	nw_prom_family(out, "narwhal_config_generation", "gauge",
	               "The configuration's generation: 0 at start, one more each reload applied.");
	nw_prom_sample(out, "narwhal_config_generation", NULL, d->generation);
	nw_prom_family(out, "narwhal_config_superseded_generations", "gauge",
	               "Generations a reload superseded that still finish requests.");
	nw_prom_sample(out, "narwhal_config_superseded_generations", NULL, d->superseded);
	nw_prom_family(out, "narwhal_config_superseded_requests", "gauge",
	               "Requests still finishing on superseded generations.");
	nw_prom_sample(out, "narwhal_config_superseded_requests", NULL, d->superseded_requests);
	if (d->admin_calls == NULL)
		return;
	nw_prom_family(out, "narwhal_admin_requests_total", "counter",
	               "Admin API calls by result: ok, or the error code answered.");
	for (size_t k = 0; k < d->n_admin_calls; k++) {
		const char *labels[] = { "result", d->admin_calls[k].label, NULL };

		nw_prom_sample(out, "narwhal_admin_requests_total", labels,
		               (double)d->admin_calls[k].n);
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
	/* About 1.5 KiB an engine: one growth or none for most fleets. */
	GString *out = g_string_sized_new(16384 + 1536 * (gsize)src->fleet->view.n_engines);
	const char *build[] = { "version", PACKAGE_VERSION, NULL };

	nw_prom_family(out, "narwhal_build_info", "gauge", "Narwhal's version (label version), 1.");
	nw_prom_sample(out, "narwhal_build_info", build, 1);
	nw_prom_family(out, "narwhal_admission_stopped", "gauge",
	               "1 while admission is stopped by the degraded state (docs/recovery.md).");
	nw_prom_sample(out, "narwhal_admission_stopped", NULL, src->fleet->admission_stopped);
	write_monitor(out, src);
	if (src->controller != NULL)
		write_controller(out, src->controller);
	if (src->daemon != NULL)
		write_daemon(out, src->daemon);
	write_serve(out, src->serve);
	write_request_path(out, src);
	write_demand(out, nw_serve_demand(src->serve));
	write_engines(out, src);
	nw_plugin_metrics_foreach(src->plugin_metrics, write_plugin_metric, out);
	nw_prom_family(out, "narwhal_log_dropped_lines_total", "counter",
	               "Log lines dropped because stderr fell behind (docs/metrics.md, Access log).");
	nw_prom_sample(out, "narwhal_log_dropped_lines_total", NULL, (double)nw_log_dropped_lines());
	return out;
}
