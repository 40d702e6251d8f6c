/*
 * The monitor's passes (docs/recovery.md): health verdicts into
 * availability, floor repair, the served model, and the degraded state.
 * The calls themselves are engine-probe.c's and verify.c's.
 */
#include "build-config.h"

#include "control/monitor.h"

#include <math.h>
#include <string.h>

#include "control/monitor-internal.h"
#include "core/log.h"

struct nw_monitor *
nw_monitor_new(const struct nw_monitor_options *o)
{
	struct nw_monitor *m = g_new0(struct nw_monitor, 1);
	const struct nw_config *cfg = o->cfg;

	m->cfg = cfg;
	m->fleet = o->fleet;
	m->dialects = o->dialects;
	m->pool = o->control_pool;
	m->clock = o->clock != NULL ? o->clock : nw_clock_monotonic_ns;
	m->clock_data = o->clock_data;
	m->start_ns = nw_monitor_now(m);
	m->n = o->fleet->view.n_engines;
	m->pool_cap = o->control_connections ? o->control_connections
	                                      : nw_config_control_connections(cfg);
	nw_health_rules_from_config(&m->rules, cfg);
	nw_role_rules_from_config(&m->role_rules, cfg);
	m->engines = g_new0(struct nw_monitor_engine, MAX(m->n, 1));
	m->role_scratch = g_new0(struct nw_role_engine, MAX(m->n, 1));
	m->change_scratch = g_new0(struct nw_role_change, MAX(m->n, 1));
	for (uint32_t i = 0; i < m->n; i++) {
		struct nw_monitor_engine *e = &m->engines[i];

		e->m = m;
		e->index = i;
		e->max_model_len = -1;
		nw_health_init(&e->health, &m->rules, cfg->controller.monitor_interval_s, m->start_ns);
	}
	nw_flip_history_init(&m->history, cfg->controller.flip_history);
	m->fleet->retry_after_s = ceil(cfg->controller.monitor_interval_s);
	return m;
}

void
nw_monitor_stop(struct nw_monitor *m)
{
	m->stopped = true;
	if (m->fleet->leg_outcome_data == m) {
		m->fleet->leg_outcome = NULL;
		m->fleet->leg_outcome_data = NULL;
	}
	if (m->tick != 0) {
		g_source_remove(m->tick);
		m->tick = 0;
	}
	for (uint32_t i = 0; i < m->n; i++) {
		nw_engine_probe_cancel(&m->engines[i]);
		nw_verify_cancel(&m->engines[i]);
	}
}

void
nw_monitor_free(struct nw_monitor *m)
{
	if (m == NULL)
		return;
	nw_monitor_stop(m);
	for (uint32_t i = 0; i < m->n; i++) {
		nw_health_clear(&m->engines[i].health);
		g_free(m->engines[i].model);
	}
	nw_flip_history_clear(&m->history);
	g_free(m->engines);
	g_free(m->role_scratch);
	g_free(m->change_scratch);
	g_free(m);
}

void
nw_monitor_on_pass(struct nw_monitor *m, nw_monitor_pass_fn fn, void *data)
{
	m->on_pass = fn;
	m->on_pass_data = data;
}

/* --- verdicts into the fleet ------------------------------------------- */

const char *const nw_monitor_stages[NW_MONITOR_STAGES] = {
	"health", "models", "metrics", "control_pool", "other",
};

static uint32_t
stage_index(const char *stage)
{
	for (uint32_t k = 0; k + 1 < NW_MONITOR_STAGES; k++) {
		if (g_strcmp0(stage, nw_monitor_stages[k]) == 0)
			return k;
	}
	return NW_MONITOR_STAGES - 1;
}

void
nw_monitor_failed(struct nw_monitor *m, uint32_t engine, const char *stage, const char *error,
                  bool answer)
{
	uint32_t kept = m->n_failures + m->answers_failed;

	m->failures_total[stage_index(stage)]++;

	if (kept < NW_MONITOR_FAILURES_KEPT) {
		struct nw_monitor_failure *f = &m->failures[kept];

		f->engine = engine;
		f->stage = stage;
		g_strlcpy(f->error, error ? error : "", sizeof f->error);
	}
	if (answer)
		m->answers_failed++;
	else
		m->n_failures++;
	nw_log(NARWHAL_LOG_WARNING, "monitor_failure", "engine", m->fleet->ids[engine], "stage",
	       stage, "error", error ? error : "", NULL);
}

void
nw_monitor_answer_read(struct nw_monitor *m)
{
	m->answers_read++;
}

/* Each engine's flags from its health and holds (plugin-abi.h): available,
 * draining (an operator drain or a restart hold), quarantined. */
void
nw_monitor_refresh(struct nw_monitor *m)
{
	int64_t now = nw_monitor_now(m);

	for (uint32_t i = 0; i < m->n; i++) {
		const struct nw_engine_health *h = &m->engines[i].health;
		struct narwhal_engine_view *v = &m->fleet->engines[i];
		uint32_t flags = v->flags & (NARWHAL_ENGINE_PINNED | NW_ENGINE_OWN_FLAGS);

		if (nw_health_available(h, now))
			flags |= NARWHAL_ENGINE_AVAILABLE;
		if ((h->holds & NW_HOLD_DRAIN) || h->reason == NW_HEALTH_REASON_RESTART)
			flags |= NARWHAL_ENGINE_DRAINING;
		if (h->quarantine_until_ns > now)
			flags |= NARWHAL_ENGINE_QUARANTINED;
		if ((v->flags ^ flags) & NARWHAL_ENGINE_AVAILABLE)
			nw_log(NARWHAL_LOG_WARNING, (flags & NARWHAL_ENGINE_AVAILABLE) ? "engine_available"
			                                                                 : "engine_unavailable",
			       "engine", m->fleet->ids[i], "state", nw_health_state_name(h->state),
			       "reason", nw_health_reason_name(h->reason) ? nw_health_reason_name(h->reason)
			               : (h->holds & NW_HOLD_DRAIN) ? "drain"
			               : (h->holds & NW_HOLD_MODEL_MISMATCH) ? "model_mismatch"
			               : (h->holds & NW_HOLD_UNPROBED) ? "unprobed"
			               : (flags & NARWHAL_ENGINE_QUARANTINED) ? "quarantine" : "none",
			       /* why it left; an engine back has no error to tell */
			       (flags & NARWHAL_ENGINE_AVAILABLE) ? NULL : "error", h->last_error, NULL);
		v->flags = flags;
	}
	nw_fleet_changed(m->fleet);
}

/* Live engines of a role. */
uint32_t
nw_monitor_live_of(const struct nw_monitor *m, narwhal_role role)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < m->n; i++) {
		const struct narwhal_engine_view *v = &m->fleet->engines[i];

		n += (v->flags & NARWHAL_ENGINE_AVAILABLE) && v->role == role;
	}
	return n;
}

uint32_t
nw_monitor_split_of(const struct nw_monitor *m, narwhal_role role)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < m->n; i++) {
		const struct narwhal_engine_view *v = &m->fleet->engines[i];

		n += (v->flags & NARWHAL_ENGINE_AVAILABLE) && v->role == role &&
		     nw_dialect_pairs(&m->dialects[i]);
	}
	return n;
}

/* Whether engine is the last live engine of its role. */
static bool
last_of_role(const struct nw_monitor *m, uint32_t engine)
{
	const struct narwhal_engine_view *v = &m->fleet->engines[engine];

	return nw_monitor_live_of(m, v->role) <= ((v->flags & NARWHAL_ENGINE_AVAILABLE) != 0);
}

void
nw_monitor_health_step(struct nw_monitor *m, uint32_t engine, const struct nw_health_event *ev,
                       const char *detail)
{
	struct nw_monitor_engine *e = &m->engines[engine];
	nw_health_reason before = e->health.reason;
	struct nw_health_rules rules = m->rules;

	/* Failing or stalled requests never take out the last live engine of
	 * a role (as Envoy's max_ejection_percent): a fleet slowed down or
	 * overloaded as a whole would otherwise eject itself entirely. A
	 * refused connection still does (nothing serves there), and so do its
	 * probes (docs/recovery.md). */
	if ((ev->kind == NW_HEALTH_LEG_FAILED || ev->kind == NW_HEALTH_STALLED) &&
	    last_of_role(m, engine)) {
		if (ev->kind == NW_HEALTH_STALLED)
			return;
		rules.passive_failures = 0;
	}
	/* An engine a reload added waits for one passing probe. */
	if (ev->kind == NW_HEALTH_PROBE_OK &&
	    nw_health_set_hold(&e->health, NW_HOLD_UNPROBED, false))
		nw_monitor_refresh(m);
	if (!nw_health_step(&e->health, &rules, ev, nw_monitor_now(m), detail))
		return;
	/* A restarted engine may serve another model now: ask again. */
	if (e->health.reason == NW_HEALTH_REASON_RESTART && before != NW_HEALTH_REASON_RESTART) {
		g_clear_pointer(&e->model, g_free);
		nw_health_set_hold(&e->health, NW_HOLD_MODEL_MISMATCH, false);
	}
	nw_monitor_refresh(m);
}

void
nw_monitor_health_event(struct nw_monitor *m, uint32_t engine, nw_health_event_kind kind,
                        const char *detail)
{
	struct nw_health_event ev = { .kind = kind };

	nw_monitor_health_step(m, engine, &ev, detail);
}

/* Passive detection (docs/recovery.md): the data plane's hook. */
static void
leg_outcome(void *data, uint32_t engine, nw_leg_outcome outcome, const char *detail)
{
	static const nw_health_event_kind kinds[] = {
		[NW_LEG_OK] = NW_HEALTH_LEG_OK,
		[NW_LEG_FAILED] = NW_HEALTH_LEG_FAILED,
		[NW_LEG_REFUSED] = NW_HEALTH_LEG_REFUSED,
	};
	struct nw_monitor *m = data;

	if (engine >= m->n || m->stopped)
		return;
	nw_monitor_health_event(m, engine, kinds[outcome], detail);
}

/* --- the served model --------------------------------------------------- */

/* An engine said which model it serves: the first answer names the fleet's
 * model when the configuration did not; an engine serving another one is
 * held out of placement and reported. The context length is the smallest
 * any engine of the model gave. */
void
nw_monitor_model_seen(struct nw_monitor *m, uint32_t engine)
{
	struct nw_monitor_engine *e = &m->engines[engine];
	struct nw_fleet *f = m->fleet;
	bool mismatch;

	if (f->model == NULL)
		f->model = g_strdup(e->model);
	if (!m->model_seen) {
		char len[24];

		m->model_seen = true;
		g_snprintf(len, sizeof len, "%" G_GINT64_FORMAT, e->max_model_len);
		nw_log(NARWHAL_LOG_INFO, "model_discovered", "model", e->model, "engine",
		       f->ids[engine], "max_model_len", len, NULL);
	}
	mismatch = strcmp(e->model, f->model) != 0;
	if (nw_health_set_hold(&e->health, NW_HOLD_MODEL_MISMATCH, mismatch)) {
		if (mismatch)
			nw_log(NARWHAL_LOG_ERROR, "model_mismatch", "engine", f->ids[engine], "serves",
			       e->model, "fleet_model", f->model, NULL);
		nw_monitor_refresh(m);
	}
	if (!mismatch && e->max_model_len > 0 &&
	    (f->max_model_len < 0 || e->max_model_len < f->max_model_len))
		f->max_model_len = e->max_model_len;
}

/* --- passes ------------------------------------------------------------- */

/* A pass with any monitoring failure counts towards the degraded state;
 * controller.monitor_failure_limit of them in a row stop new admission
 * until a clean pass (spec 7). */
static void
close_pass(struct nw_monitor *m)
{
	bool was = m->fleet->admission_stopped;

	/* One engine's unreadable model list or metrics is that engine's
	 * (shown in its entry); the stage fails when no engine's could be
	 * read. */
	if (m->n_failures > 0 || (m->answers_failed > 0 && m->answers_read == 0)) {
		m->failed_passes++;
		memcpy(m->last_failures, m->failures, sizeof m->failures);
		m->n_last_failures = MIN(m->n_failures + m->answers_failed, NW_MONITOR_FAILURES_KEPT);
	} else {
		m->failed_passes = 0;
	}
	m->n_failures = 0;
	m->answers_failed = 0;
	m->answers_read = 0;
	m->fleet->admission_stopped = m->failed_passes >= m->cfg->controller.monitor_failure_limit;
	if (m->fleet->admission_stopped != was) {
		char passes[16];

		g_snprintf(passes, sizeof passes, "%u", m->failed_passes);
		nw_log(was ? NARWHAL_LOG_WARNING : NARWHAL_LOG_ERROR,
		       was ? "admission_resumed" : "admission_stopped", "failed_passes", passes, NULL);
	}
}

/* A hung engine whose health still passes (docs/recovery.md,
 * recovery.stall_s): legs are out to it, and nothing has come back from
 * it, no answer and no stream bytes, since it last did or since it got
 * them. Read at pass granularity from the data plane's plain counts. Legs
 * that time out one after another on a hung engine do not restart the
 * clock: only progress, or a whole stall_s without legs out, does. */
static void
check_stalls(struct nw_monitor *m, int64_t now)
{
	double stall_s = m->cfg->recovery.stall_s;

	for (uint32_t i = 0; i < m->n && stall_s > 0; i++) {
		struct nw_monitor_engine *e = &m->engines[i];
		const struct nw_engine_stats *st = &m->fleet->stats[i];
		char detail[96];
		double silent_s;

		if (st->progress != e->seen_progress) {
			e->seen_progress = st->progress;
			e->progress_at_ns = now;
			e->busy_since_ns = 0;
		}
		if (st->legs_out == 0) {
			if (e->idle_since_ns == 0)
				e->idle_since_ns = now;
			if ((double)(now - e->idle_since_ns) / 1e9 >= stall_s)
				e->busy_since_ns = 0;
			continue;
		}
		e->idle_since_ns = 0;
		if (!(m->fleet->engines[i].flags & NARWHAL_ENGINE_AVAILABLE))
			continue;
		if (e->busy_since_ns == 0)
			e->busy_since_ns = now;
		silent_s = (double)(now - MAX(e->busy_since_ns, e->progress_at_ns)) / 1e9;
		if (silent_s < stall_s)
			continue;
		g_snprintf(detail, sizeof detail, "held work and sent nothing back for %.1f s",
		           silent_s);
		nw_monitor_health_event(m, i, NW_HEALTH_STALLED, detail);
	}
}

/* An operator's drain is complete once nothing is resident on the engine
 * (docs/admin.md): logged once per drain. */
static void
check_drains(struct nw_monitor *m)
{
	for (uint32_t i = 0; i < m->n; i++) {
		struct nw_monitor_engine *e = &m->engines[i];

		if (!nw_monitor_draining(m, i) || e->drain_reported || nw_monitor_residents(m, i) > 0)
			continue;
		e->drain_reported = true;
		nw_log(NARWHAL_LOG_INFO, "engine_drained", "engine", m->fleet->ids[i], NULL);
	}
}

void
nw_monitor_pass(struct nw_monitor *m)
{
	int64_t now;

	if (m->stopped)
		return;
	if (m->passes > 0)
		close_pass(m);
	m->passes++;
	now = nw_monitor_now(m);
	nw_monitor_refresh(m); /* quarantines end on the pass after them */
	check_stalls(m, now);
	check_drains(m);
	nw_monitor_repair_floors(m, now);
	for (uint32_t i = 0; i < m->n; i++)
		nw_engine_probe_pass(&m->engines[i]);
	/* A decode-correction window ends, and the loads are priced anew. */
	nw_pricing_pass(m->fleet, now);
	if (m->on_pass != NULL)
		m->on_pass(m->on_pass_data, m, now);
}

static gboolean
on_tick(gpointer data)
{
	nw_monitor_pass(data);
	return G_SOURCE_CONTINUE;
}

void
nw_monitor_start(struct nw_monitor *m)
{
	m->fleet->leg_outcome = leg_outcome;
	m->fleet->leg_outcome_data = m;
	nw_monitor_pass(m);
	m->tick = g_timeout_add((guint)MAX(1.0, m->cfg->controller.monitor_interval_s * 1000),
	                        on_tick, m);
}

/* --- operator holds ------------------------------------------------------ */

void
nw_monitor_drain(struct nw_monitor *m, uint32_t engine, bool drain)
{
	if (engine >= m->n)
		return;
	if (nw_health_set_hold(&m->engines[engine].health, NW_HOLD_DRAIN, drain)) {
		m->engines[engine].drain_reported = false;
		nw_monitor_refresh(m);
	}
}

uint32_t
nw_monitor_residents(const struct nw_monitor *m, uint32_t engine)
{
	const struct narwhal_engine_view *v = &m->fleet->engines[engine];

	return v->resident_prefill + v->resident_decode;
}

bool
nw_monitor_draining(const struct nw_monitor *m, uint32_t engine)
{
	return (m->engines[engine].health.holds & NW_HOLD_DRAIN) != 0;
}

void
nw_monitor_eject(struct nw_monitor *m, uint32_t engine)
{
	if (engine < m->n)
		nw_monitor_health_event(m, engine, NW_HEALTH_EJECT, "ejected by the operator");
}

bool
nw_monitor_readmit(struct nw_monitor *m, uint32_t engine)
{
	const struct nw_engine_health *h;

	if (engine >= m->n)
		return false;
	h = &m->engines[engine].health;
	if (h->state != NW_HEALTH_EJECTED || h->next_verify_ns <= nw_monitor_now(m))
		return false;
	nw_monitor_health_event(m, engine, NW_HEALTH_READMIT, NULL);
	return true;
}

/* --- what operators see --------------------------------------------------- */

static void
add_reason(json_t *reasons, const char *code, const char *message)
{
	json_array_append_new(reasons, json_pack("{s:s, s:s}", "code", code, "message", message));
}

/* Why health is not plainly "ok": unavailable when admission is stopped
 * or no engine can serve; degraded while serving with something out. */
static json_t *
reasons_json(const struct nw_monitor *m, const char **status)
{
	json_t *reasons = json_array();
	uint32_t out = 0;

	if (m->fleet->admission_stopped)
		add_reason(reasons, "monitoring_failures", "the monitor failed in "
		           "controller.monitor_failure_limit passes in a row: new requests are "
		           "refused until a clean pass");
	if (nw_monitor_live_of(m, NARWHAL_ROLE_PREFILL) + nw_monitor_live_of(m, NARWHAL_ROLE_DECODE) == 0) {
		add_reason(reasons, "no_live_engine", "no engine is available to serve");
		*status = "unavailable";
		return reasons;
	}
	if (nw_monitor_live_of(m, NARWHAL_ROLE_PREFILL) == 0)
		add_reason(reasons, "prefill_pool_empty", "no live prefill engine: live decode "
		           "engines serve whole requests (the aggregate fallback)");
	if (nw_monitor_live_of(m, NARWHAL_ROLE_DECODE) == 0)
		add_reason(reasons, "decode_pool_empty", "no live decode engine: live prefill "
		           "engines serve whole requests");
	if (m->floors.prefill_breach || m->floors.decode_breach)
		add_reason(reasons, "floor_breach", "too few movable live engines to keep "
		           "controller.min_prefill and controller.min_decode");
	for (uint32_t i = 0; i < m->n; i++)
		out += !(m->fleet->engines[i].flags & NARWHAL_ENGINE_AVAILABLE);
	if (out > 0)
		add_reason(reasons, "engines_out", "one or more engines are out of placement: see "
		           "engines[]");
	*status = m->fleet->admission_stopped ? "unavailable"
	          : json_array_size(reasons) > 0 ? "degraded" : "ok";
	return reasons;
}

static json_t *
metrics_json(const struct nw_monitor_engine *e, int64_t now)
{
	const struct narwhal_engine_metrics *x = &e->metrics;

	if (e->metrics_at_ns == 0)
		return json_null();
	return json_pack("{s:o, s:o, s:o, s:f}",
	                 "running", x->running >= 0 ? json_integer(x->running) : json_null(),
	                 "waiting", x->waiting >= 0 ? json_integer(x->waiting) : json_null(),
	                 "kv_usage", isfinite(x->kv_usage) ? json_real(x->kv_usage) : json_null(),
	                 "age_s", (double)(now - e->metrics_at_ns) / 1e9);
}

json_t *
nw_monitor_to_json(const struct nw_monitor *m, bool operator)
{
	int64_t now = nw_monitor_now(m);
	const char *status;
	json_t *reasons = reasons_json(m, &status);
	json_t *engines = json_array(), *failures = json_array();

	for (uint32_t i = 0; i < m->n; i++) {
		const struct nw_monitor_engine *e = &m->engines[i];
		const struct narwhal_engine_view *v = &m->fleet->engines[i];
		const struct nw_engine_stats *st = &m->fleet->stats[i];
		json_t *h = nw_health_to_json(&e->health, &m->rules, now);

		/* An engine's own error text may name its address: operators only. */
		if (!operator)
			json_object_del(h, "last_error");
		json_object_update_new(h, json_pack(
			"{s:s, s:s, s:b, s:b, s:s?, s:I, s:I, s:I, s:I, s:o}",
			"id", m->fleet->ids[i], "role", nw_role_name(v->role),
			"available", (v->flags & NARWHAL_ENGINE_AVAILABLE) != 0,
			"pinned", (v->flags & NARWHAL_ENGINE_PINNED) != 0,
			"model", e->model,
			"resident_prefill", (json_int_t)v->resident_prefill,
			"resident_decode", (json_int_t)v->resident_decode,
			"legs_placed", (json_int_t)st->legs_placed,
			"legs_failed", (json_int_t)st->legs_failed,
			"metrics", metrics_json(e, now)));
		json_array_append_new(engines, h);
	}
	for (uint32_t k = 0; k < m->n_last_failures; k++) {
		const struct nw_monitor_failure *f = &m->last_failures[k];

		json_array_append_new(failures, json_pack("{s:s, s:s, s:s?}", "engine",
		                                          m->fleet->ids[f->engine], "stage", f->stage,
		                                          "error", operator ? f->error : NULL));
	}
	return json_pack("{s:s, s:o, s:o, s:{s:I, s:I, s:b, s:b, s:I, s:I, s:I, s:I}, "
	                 "s:{s:I, s:I, s:I, s:o}}",
	                 "status", status, "reasons", reasons, "engines", engines,
	                 /* The live split as engines[] shows it (an engine may have
	                  * been ejected or readmitted since the last pass); the
	                  * breach and the reachable split are the last pass's. */
	                 "roles",
	                 "live_prefill", (json_int_t)nw_monitor_split_of(m, NARWHAL_ROLE_PREFILL),
	                 "live_decode", (json_int_t)nw_monitor_split_of(m, NARWHAL_ROLE_DECODE),
	                 "prefill_breach", m->floors.prefill_breach,
	                 "decode_breach", m->floors.decode_breach,
	                 "reachable_prefill", (json_int_t)m->floors.reachable_prefill,
	                 "reachable_decode", (json_int_t)m->floors.reachable_decode,
	                 "min_prefill", (json_int_t)m->role_rules.min_prefill,
	                 "min_decode", (json_int_t)m->role_rules.min_decode,
	                 "monitor",
	                 "passes", (json_int_t)(m->passes_before + m->passes),
	                 "failed_passes", (json_int_t)m->failed_passes,
	                 "failure_limit", (json_int_t)m->cfg->controller.monitor_failure_limit,
	                 "last_failures", failures);
}

const struct nw_engine_health *
nw_monitor_engine_health(const struct nw_monitor *m, uint32_t i)
{
	return &m->engines[i].health;
}

bool
nw_monitor_engine_reading(const struct nw_monitor *m, uint32_t i,
                          struct narwhal_engine_metrics *out, double *age_s)
{
	const struct nw_monitor_engine *e = &m->engines[i];

	if (e->metrics_at_ns == 0)
		return false;
	*out = e->metrics;
	*age_s = (double)(nw_monitor_now(m) - e->metrics_at_ns) / 1e9;
	return true;
}

void
nw_monitor_summary(const struct nw_monitor *m, struct nw_monitor_summary *out)
{
	json_decref(reasons_json(m, &out->status));
	out->passes = m->passes_before + m->passes;
	out->failed_passes = m->failed_passes;
	out->failure_limit = m->cfg->controller.monitor_failure_limit;
	memcpy(out->failures, m->failures_total, sizeof out->failures);
	out->min_prefill = m->role_rules.min_prefill;
	out->min_decode = m->role_rules.min_decode;
	out->floors = m->floors;
	/* As nw_monitor_to_json: the live split as the engines show it now. */
	out->floors.live_prefill = nw_monitor_split_of(m, NARWHAL_ROLE_PREFILL);
	out->floors.live_decode = nw_monitor_split_of(m, NARWHAL_ROLE_DECODE);
	memcpy(out->role_changes, m->history.by_caller, sizeof out->role_changes);
}

int64_t
nw_monitor_start_ns(const struct nw_monitor *m)
{
	return m->start_ns;
}

json_t *
nw_monitor_history_json(const struct nw_monitor *m)
{
	return nw_flip_history_to_json(&m->history, (const char *const *)m->fleet->ids,
	                               m->start_ns);
}
