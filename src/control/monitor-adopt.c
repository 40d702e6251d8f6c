/*
 * A reload (docs/deployment.md, "Reloading the configuration"): the new
 * generation's monitor takes over what the superseded one learnt about the
 * engines both fleets keep (control/monitor.h, nw_monitor_adopt).
 */
#include "build-config.h"

#include "control/monitor.h"

#include <string.h>

#include "control/monitor-internal.h"

void
nw_monitor_adopt(struct nw_monitor *m, const struct nw_monitor *old, const uint32_t *new_of_old)
{
	int64_t now = nw_monitor_now(m);
	struct nw_fleet *f = m->fleet;
	bool *kept = g_new0(bool, MAX(m->n, 1));
	/* The file may name another model now: then every engine is asked
	 * again, and the mismatch holds are decided afresh. */
	bool same_model = g_strcmp0(m->cfg->fleet.model, old->cfg->fleet.model) == 0;

	for (uint32_t j = 0; j < old->n; j++) {
		const struct nw_monitor_engine *o = &old->engines[j];
		const struct narwhal_engine_view *ov = &old->fleet->engines[j];
		struct nw_monitor_engine *e;
		struct narwhal_engine_view *v;
		uint32_t i = new_of_old[j];

		if (i == UINT32_MAX)
			continue;
		kept[i] = true;
		e = &m->engines[i];
		v = &f->engines[i];
		nw_health_adopt(&e->health, &o->health, now);
		if (same_model)
			e->model = g_strdup(o->model);
		else
			nw_health_set_hold(&e->health, NW_HOLD_MODEL_MISMATCH, false);
		e->max_model_len = o->max_model_len;
		e->metrics = o->metrics;
		e->metrics_at_ns = o->metrics_at_ns;
		e->seen_progress = o->seen_progress;
		e->progress_at_ns = o->progress_at_ns;
		e->busy_since_ns = o->busy_since_ns;
		e->idle_since_ns = o->idle_since_ns;
		e->operator_pin = o->operator_pin;
		e->drain_reported = o->drain_reported;
		v->role = ov->role;
		v->role_since_ns = ov->role_since_ns;
		v->flags = nw_engine_flags_follow(v->flags, ov->flags);
		v->prefill_load = ov->prefill_load;
		v->decode_load = ov->decode_load;
		/* What the engine's decode showed goes on (spec 7.7). */
		f->ledger[i].correction = old->fleet->ledger[j].correction;
	}
	/* Added engines: probed before placement uses them. */
	for (uint32_t i = 0; i < m->n; i++) {
		if (kept[i])
			continue;
		nw_health_set_hold(&m->engines[i].health, NW_HOLD_UNPROBED, true);
		f->engines[i].flags &= ~(uint32_t)NARWHAL_ENGINE_AVAILABLE;
	}
	g_free(kept);
	nw_fleet_changed(f);
	nw_flip_history_adopt(&m->history, &old->history, new_of_old);
	m->start_ns = old->start_ns;
	m->passes_before = old->passes_before + old->passes;
	m->failed_passes = old->failed_passes;
	memcpy(m->last_failures, old->last_failures, sizeof m->last_failures);
	m->n_last_failures = old->n_last_failures;
	memcpy(m->failures_total, old->failures_total, sizeof m->failures_total);
	for (uint32_t k = 0; k < m->n_last_failures; k++) {
		/* Failures of removed engines are dropped. */
		uint32_t i = new_of_old[m->last_failures[k].engine];

		if (i == UINT32_MAX)
			m->last_failures[k--] = m->last_failures[--m->n_last_failures];
		else
			m->last_failures[k].engine = i;
	}
	m->floors = old->floors;
	f->admission_stopped = old->fleet->admission_stopped;
	if (m->role_rules.advisory && old->last_advised.caller != NULL &&
	    new_of_old[old->last_advised.engine] != UINT32_MAX) {
		m->last_advised = old->last_advised;
		m->last_advised.engine = new_of_old[old->last_advised.engine];
	}
	/* The served model the engines named carries on while the file's
	 * fleet.model is unchanged. */
	if (same_model) {
		m->model_seen = old->model_seen;
		if (f->model == NULL && old->fleet->model != NULL)
			f->model = g_strdup(old->fleet->model);
		f->max_model_len = old->fleet->max_model_len;
	}
}
