/*
 * The monitor's roles (docs/recovery.md, docs/controller.md): the engines
 * as the role rules see them, floor repair each pass, the role a
 * readmitted engine takes, the operator's pins and moves, and the
 * changes the controller host proposes. Every change is recorded in the
 * flip history, logged, and told to whoever listens (nw_monitor_on_change).
 */
#include "build-config.h"

#include "control/monitor.h"

#include "control/monitor-internal.h"
#include "core/log.h"

static void
fill_role_engines(struct nw_monitor *m)
{
	for (uint32_t i = 0; i < m->n; i++)
		m->role_scratch[i] = nw_role_engine_of(&m->fleet->engines[i], &m->dialects[i]);
}

static void
apply_change(struct nw_monitor *m, const struct nw_role_change *c)
{
	nw_flip_history_add(&m->history, c);
	nw_log(NARWHAL_LOG_WARNING, c->applied ? "role_change" : "role_change_advised", "engine",
	       m->fleet->ids[c->engine], "from", nw_role_name(c->from), "to", nw_role_name(c->to),
	       "caller", c->caller, "reason", c->reason, NULL);
	if (c->applied)
		nw_fleet_set_role(m->fleet, c->engine, c->to, c->at_ns);
	if (m->on_change != NULL)
		m->on_change(m->on_change_data, c);
}

/* A change of the controller or of floor repair: in advisory mode the
 * same move is proposed every pass, and recorded once. */
static void
propose_change(struct nw_monitor *m, const struct nw_role_change *c)
{
	if (!nw_roles_advice_repeats(&m->last_advised, c))
		apply_change(m, c);
}

void
nw_monitor_on_change(struct nw_monitor *m, nw_monitor_change_fn fn, void *data)
{
	m->on_change = fn;
	m->on_change_data = data;
}

const struct nw_role_engine *
nw_monitor_role_engines(struct nw_monitor *m)
{
	fill_role_engines(m);
	return m->role_scratch;
}

void
nw_monitor_apply_role_change(struct nw_monitor *m, const struct nw_role_change *c)
{
	if (c->engine < m->n && !m->stopped)
		propose_change(m, c);
}

void
nw_monitor_repair_floors(struct nw_monitor *m, int64_t now)
{
	struct nw_floor_report before = m->floors;
	uint32_t k;

	fill_role_engines(m);
	/* One engine serves whole requests whatever its role (spec 7.2): no
	 * floor to repair or breach. */
	k = nw_roles_repair_floors(m->role_scratch, m->n, &m->role_rules, now, m->change_scratch,
	                           m->n < 2 ? 0 : m->n, &m->floors);
	if (m->n < 2)
		m->floors.prefill_breach = m->floors.decode_breach = false;
	for (uint32_t i = 0; i < k; i++)
		propose_change(m, &m->change_scratch[i]);
	if ((m->floors.prefill_breach || m->floors.decode_breach) &&
	    (m->floors.prefill_breach != before.prefill_breach ||
	     m->floors.decode_breach != before.decode_breach)) {
		char p[16], d[16];

		g_snprintf(p, sizeof p, "%u", m->floors.reachable_prefill);
		g_snprintf(d, sizeof d, "%u", m->floors.reachable_decode);
		nw_log(NARWHAL_LOG_WARNING, "floor_breach", "phase",
		       m->floors.decode_breach ? "decode" : "prefill", "reachable_prefill", p,
		       "reachable_decode", d, NULL);
	}
}

void
nw_monitor_readmitted(struct nw_monitor *m, uint32_t engine)
{
	struct narwhal_engine_view *v = &m->fleet->engines[engine];
	narwhal_role role;

	fill_role_engines(m);
	m->role_scratch[engine].live = false;
	role = nw_roles_readmit_role(m->role_scratch, m->n, engine, &m->role_rules);
	nw_log(NARWHAL_LOG_WARNING, "engine_readmitted", "engine", m->fleet->ids[engine], "role",
	       nw_role_name(role), NULL);
	if (role != v->role) {
		struct nw_role_change c = {
			.engine = engine, .from = v->role, .to = role, .at_ns = nw_monitor_now(m),
			.caller = "readmission", .reason = "current_demand",
			.applied = !m->role_rules.advisory,
		};

		for (uint32_t i = 0; i < m->n; i++) {
			const struct narwhal_engine_view *w = &m->fleet->engines[i];
			narwhal_role r = i == engine ? role : w->role;

			if (i == engine || (w->flags & NARWHAL_ENGINE_AVAILABLE)) {
				c.prefill_after += r == NARWHAL_ROLE_PREFILL;
				c.decode_after += r == NARWHAL_ROLE_DECODE;
			}
		}
		apply_change(m, &c);
	}
}


/* --- the operator's word ------------------------------------------------ */

void
nw_monitor_pin(struct nw_monitor *m, uint32_t engine, bool pinned)
{
	struct narwhal_engine_view *v = &m->fleet->engines[engine];

	m->engines[engine].operator_pin = pinned;
	if (pinned)
		v->flags |= NARWHAL_ENGINE_PINNED;
	else
		v->flags &= ~NARWHAL_ENGINE_PINNED;
}

const char *
nw_monitor_pinned_by(const struct nw_monitor *m, uint32_t engine)
{
	if (!(m->fleet->engines[engine].flags & NARWHAL_ENGINE_PINNED))
		return NULL;
	return m->engines[engine].operator_pin ? "operator" : "config";
}

nw_role_guard
nw_monitor_set_role(struct nw_monitor *m, uint32_t engine, narwhal_role to, const char *caller,
                    const char *reason)
{
	int64_t now = nw_monitor_now(m);
	struct nw_role_change c = {
		.engine = engine, .from = m->fleet->engines[engine].role, .to = to, .at_ns = now,
		.caller = caller, .reason = reason, .applied = true,
	};
	nw_role_guard g;

	fill_role_engines(m);
	g = nw_roles_check_move(m->role_scratch, m->n, engine, to, &m->role_rules, now);
	if (g != NW_ROLE_GUARD_OK)
		return g;
	c.prefill_after = nw_monitor_split_of(m, NARWHAL_ROLE_PREFILL) + (to == NARWHAL_ROLE_PREFILL) -
	                  (c.from == NARWHAL_ROLE_PREFILL);
	c.decode_after = nw_monitor_split_of(m, NARWHAL_ROLE_DECODE) + (to == NARWHAL_ROLE_DECODE) -
	                 (c.from == NARWHAL_ROLE_DECODE);
	apply_change(m, &c);
	return NW_ROLE_GUARD_OK;
}
