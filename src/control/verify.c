/*
 * The breaker's verification (spec 6; docs/recovery.md): an ejected engine
 * whose health passes is readmitted only after a complete prefill leg and a
 * complete decode leg with a real handoff, each under
 * engine.first_token_timeout_s. The engine prefills for a live decode
 * partner, and decodes a live prefill partner's handoff; without a live
 * partner it pairs with itself. An engine whose dialect cannot pair runs
 * one whole request instead; one whose role is fixed runs only its own
 * leg, with a live partner, else with a partner that is recovering too.
 */
#include "build-config.h"

#include <string.h>

#include "control/monitor-internal.h"
#include "core/log.h"

/* Engine i is in role `role` and can pair with c in that direction. */
static bool
pairs_as(const struct nw_monitor *m, uint32_t c, uint32_t i, narwhal_role role)
{
	if (i == c || m->fleet->engines[i].role != role)
		return false;
	return role == NARWHAL_ROLE_DECODE ? nw_dialect_compatible(&m->dialects[c], &m->dialects[i])
	                                   : nw_dialect_compatible(&m->dialects[i], &m->dialects[c]);
}

/* A live partner for engine c in role `role`: available, of that role,
 * and able to pair with c in the given direction; -1 when none. Lowest
 * index first, so verification is deterministic. */
static int32_t
partner(const struct nw_monitor *m, uint32_t c, narwhal_role role)
{
	for (uint32_t i = 0; i < m->n; i++) {
		if ((m->fleet->engines[i].flags & NARWHAL_ENGINE_AVAILABLE) && pairs_as(m, c, i, role))
			return (int32_t)i;
	}
	return -1;
}

/* For an engine whose role is fixed and that has no live partner: one of
 * the other role that is out for its health (not by the operator, no
 * hold) but whose last health probe passed, so that a pair that went down
 * together (a SGLang prefill and decode engine on one host) can verify
 * each other instead of each waiting for the other forever; -1 when none. */
static int32_t
recovering_partner(const struct nw_monitor *m, uint32_t c, narwhal_role role)
{
	for (uint32_t i = 0; i < m->n; i++) {
		const struct nw_engine_health *h = &m->engines[i].health;

		if (h->state != NW_HEALTH_LIVE && h->reason != NW_HEALTH_REASON_OPERATOR &&
		    h->holds == 0 && !h->probe_failed_last && pairs_as(m, c, i, role))
			return (int32_t)i;
	}
	return -1;
}

static void
verify_finish(struct nw_monitor *m, struct nw_monitor_engine *e)
{
	if (e->verify[0] != NULL || e->verify[1] != NULL)
		return;
	if (e->verify_failed) {
		nw_log(NARWHAL_LOG_WARNING, "engine_verification_failed", "engine",
		       m->fleet->ids[e->index], "error", e->verify_error, NULL);
		nw_monitor_health_event(m, e->index, NW_HEALTH_VERIFY_FAILED, e->verify_error);
		return;
	}
	nw_monitor_health_event(m, e->index, NW_HEALTH_VERIFY_OK, NULL);
	/* The operator may have ejected it meanwhile: then it stays out. */
	if (e->health.state == NW_HEALTH_LIVE)
		nw_monitor_readmitted(m, e->index);
}

static void
leg_done(struct nw_monitor_engine *e, int slot, const struct nw_handoff_probe_result *res)
{
	struct nw_monitor *m = e->m;

	e->verify[slot] = NULL;
	nw_monitor_pool_give(m, 2);
	if (!res->ok && !e->verify_failed) {
		e->verify_failed = true;
		g_snprintf(e->verify_error, sizeof e->verify_error, "%s leg (%s): %s",
		           slot == 0 ? "prefill" : "decode", nw_handoff_probe_stage_name(res->stage),
		           res->error);
	}
	verify_finish(m, e);
}

static void
prefill_leg_done(void *data, const struct nw_handoff_probe_result *res)
{
	leg_done(data, 0, res);
}

static void
decode_leg_done(void *data, const struct nw_handoff_probe_result *res)
{
	leg_done(data, 1, res);
}

static void
start_leg(struct nw_monitor *m, struct nw_monitor_engine *e, int slot, uint32_t prefill,
          uint32_t decode)
{
	struct nw_handoff_probe_options o = {
		.pool = m->pool,
		.prefill = &m->dialects[prefill],
		.decode = &m->dialects[decode],
		.model = m->fleet->model,
		.handle = NW_HANDOFF_PROBE_HANDLE_BASE + m->next_probe_handle++,
		.leg_timeout_s = m->cfg->engine.first_token_timeout_s,
		.connect_timeout_s = m->cfg->engine.connect_timeout_s,
	};

	nw_monitor_pool_take(m, 2);
	e->verify[slot] = nw_handoff_probe_start(&o, slot == 0 ? prefill_leg_done : decode_leg_done,
	                                         e);
}

void
nw_verify_start(struct nw_monitor *m, struct nw_monitor_engine *e)
{
	uint32_t c = e->index;
	int32_t decode, prefill;
	bool two;

	if (m->stopped || e->verify[0] != NULL || e->verify[1] != NULL)
		return;
	if (!nw_dialect_pairs(&m->dialects[c])) {
		decode = prefill = (int32_t)c; /* one whole request */
	} else if (!(m->dialects[c].caps & NARWHAL_DIALECT_PER_REQUEST_ROLES)) {
		/* A fixed role: only its own leg, with a live partner. */
		bool is_prefill = m->fleet->engines[c].role == NARWHAL_ROLE_PREFILL;
		narwhal_role want = is_prefill ? NARWHAL_ROLE_DECODE : NARWHAL_ROLE_PREFILL;
		int32_t other = partner(m, c, want);

		if (other < 0)
			other = recovering_partner(m, c, want);
		if (other < 0)
			return; /* nothing to pair with: next pass */
		prefill = is_prefill ? (int32_t)c : other;
		decode = is_prefill ? other : (int32_t)c;
		if (m->pool_used + 2 > m->pool_cap)
			return;
		e->verify_failed = false;
		e->verify_error[0] = '\0';
		nw_monitor_health_event(m, c, NW_HEALTH_VERIFY_START, NULL);
		nw_log(NARWHAL_LOG_INFO, "engine_verification", "engine", m->fleet->ids[c],
		       "decode_partner", m->fleet->ids[decode], "prefill_partner",
		       m->fleet->ids[prefill], NULL);
		start_leg(m, e, is_prefill ? 0 : 1, (uint32_t)prefill, (uint32_t)decode);
		return;
	} else {
		decode = partner(m, c, NARWHAL_ROLE_DECODE);
		prefill = partner(m, c, NARWHAL_ROLE_PREFILL);
		if (decode < 0)
			decode = (int32_t)c;
		if (prefill < 0)
			prefill = (int32_t)c;
	}
	/* With no partner either way, one self-paired handoff covers both. */
	two = decode != (int32_t)c || prefill != (int32_t)c;
	/* Each handoff holds up to two control connections; without them the
	 * next pass tries again (no verdict), and a pool that can never hold
	 * them is the monitor's failure (engine.control_connections). */
	if (m->pool_used + (two ? 4u : 2u) > m->pool_cap) {
		if ((two ? 4u : 2u) > m->pool_cap)
			nw_monitor_failed(m, c, "control_pool", "verification needs more control "
			                  "connections than engine.control_connections allows", false);
		return;
	}
	e->verify_failed = false;
	e->verify_error[0] = '\0';
	nw_monitor_health_event(m, c, NW_HEALTH_VERIFY_START, NULL);
	nw_log(NARWHAL_LOG_INFO, "engine_verification", "engine", m->fleet->ids[c],
	       "decode_partner", m->fleet->ids[decode], "prefill_partner", m->fleet->ids[prefill],
	       NULL);
	start_leg(m, e, 0, c, (uint32_t)decode);
	if (two)
		start_leg(m, e, 1, (uint32_t)prefill, c);
}

void
nw_verify_cancel(struct nw_monitor_engine *e)
{
	for (int slot = 0; slot < 2; slot++) {
		if (e->verify[slot] != NULL) {
			nw_handoff_probe_cancel(e->verify[slot]);
			e->verify[slot] = NULL;
			nw_monitor_pool_give(e->m, 2);
		}
	}
}
