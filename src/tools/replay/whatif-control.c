/*
 * The monitor's pass under virtual time (control/monitor.c, nw_monitor_pass,
 * the parts that do not probe engines): every controller.monitor_interval_s
 * from the run's start, the host's floor repair (control/roles.h), the
 * pricing pass (a decode-correction window ends and the loads of spec 7.1
 * are written), then the controller's scheduled evaluation; and the urgent
 * evaluation an admission decision's projected TTFT breach arms, as the
 * daemon's controller host runs them (daemon-controller.c). Role changes
 * are applied to the fleet view (new placements only, as the monitor
 * applies them), told to the controller host, and kept, every one, for the
 * report.
 *
 * Every engine stays healthy and available: the what-if mode has no faults.
 */
#include "build-config.h"

#include <string.h>

#include "control/controller.h"
#include "control/roles.h"
#include "tools/replay/whatif-internal.h"

struct wi_control {
	struct nw_controller *host;       /* the controller host (control/controller.h) */
	struct nw_role_rules rules;
	struct nw_role_engine *roles;     /* the guards' view, one per engine */
	struct nw_role_change *changes;   /* scratch, one per engine */
	GArray *history;                  /* struct nw_role_change, the run's all */
	struct nw_floor_report floors;
	struct nw_role_change last_advised;
	uint64_t passes;
	uint32_t initial_prefill, initial_decode;
};

static void
split_of(const struct nw_fleet *f, uint32_t *prefill, uint32_t *decode)
{
	*prefill = *decode = 0;
	for (uint32_t i = 0; i < f->view.n_engines; i++) {
		if (f->engines[i].role == NARWHAL_ROLE_PREFILL)
			(*prefill)++;
		else
			(*decode)++;
	}
}

struct wi_control *
wi_control_new(struct wi_world *w)
{
	struct wi_control *c = g_new0(struct wi_control, 1);
	const struct nw_config *cfg = w->cfg;
	uint32_t n = w->fleet->view.n_engines;

	nw_role_rules_from_config(&c->rules, cfg);
	c->host = nw_controller_new(cfg);
	c->roles = g_new0(struct nw_role_engine, MAX(n, 1));
	c->changes = g_new0(struct nw_role_change, MAX(n, 1));
	c->history = g_array_new(FALSE, FALSE, sizeof(struct nw_role_change));
	c->last_advised.engine = UINT32_MAX;
	split_of(w->fleet, &c->initial_prefill, &c->initial_decode);
	return c;
}

void
wi_control_free(struct wi_control *c)
{
	if (c == NULL)
		return;
	nw_controller_free(c->host);
	g_free(c->roles);
	g_free(c->changes);
	g_array_free(c->history, TRUE);
	g_free(c);
}

/* The engines as the guards see them, as the monitor sees them. */
static void
fill_roles(struct wi_world *w)
{
	for (uint32_t i = 0; i < w->fleet->view.n_engines; i++)
		w->control->roles[i] = nw_role_engine_of(&w->fleet->engines[i],
		                                         &w->dialects->dialects[i]);
}

/* monitor-roles.c, apply_change and propose_change: advisory mode
 * proposes the same move every pass and it is kept once; the view
 * changes, nothing resident moves; the controller host hears of it. */
static void
apply(struct wi_world *w, const struct nw_role_change *ch)
{
	struct wi_control *c = w->control;

	if (nw_roles_advice_repeats(&c->last_advised, ch))
		return;
	g_array_append_val(c->history, *ch);
	if (ch->applied)
		nw_fleet_set_role(w->fleet, ch->engine, ch->to, ch->at_ns);
	nw_controller_note_change(c->host, w->demand, ch);
}

/* One evaluation of the controller host with the run's controller plugin
 * (daemon-controller.c, evaluate): scheduled, or the urgent wake. A
 * failing propose is no change, as in the daemon. */
static uint32_t
controller_evaluate(struct wi_world *w, bool urgent, struct nw_role_change *out, uint32_t max)
{
	struct wi_control *c = w->control;
	const struct nw_controller_plugin plugin = {
		w->controller.plugin->desc->name, &w->controller.plugin->ops.controller,
		w->controller.instance->ctx,
	};
	const struct nw_controller_pass pass = {
		.fleet = w->fleet, .demand = w->demand, .engines = c->roles,
		.n = w->fleet->view.n_engines, .plugin = &plugin, .now_ns = w->queue.now_ns,
	};

	return urgent ? nw_controller_urgent(c->host, &pass, out, max)
	              : nw_controller_scheduled(c->host, &pass, out, max);
}

static void
floor_repair(struct wi_world *w, int64_t now)
{
	struct wi_control *c = w->control;
	uint32_t n = w->fleet->view.n_engines, k;

	fill_roles(w);
	/* One engine serves whole requests whatever its role (spec 7.2). */
	k = nw_roles_repair_floors(c->roles, n, &c->rules, now, c->changes, n < 2 ? 0 : n,
	                           &c->floors);
	for (uint32_t i = 0; i < k; i++)
		apply(w, &c->changes[i]);
}

static void
evaluate(struct wi_world *w, bool urgent)
{
	struct wi_control *c = w->control;
	uint32_t k;

	fill_roles(w);
	k = controller_evaluate(w, urgent, c->changes, w->fleet->view.n_engines);
	for (uint32_t i = 0; i < k; i++)
		apply(w, &c->changes[i]);
}

void
wi_control_pass(struct wi_world *w)
{
	int64_t now = w->queue.now_ns;

	w->control->passes++;
	floor_repair(w, now);
	nw_pricing_pass(w->fleet, now);
	evaluate(w, false);
	wi_queue_push(&w->queue, now + wi_ns(w->cfg->controller.monitor_interval_s), WI_EV_PASS,
	              NULL, 0);
}

void
wi_control_admission_priced(struct wi_world *w, uint64_t prompt_tokens,
                            const struct narwhal_admission_decision *dec)
{
	/* serve/phases.c: a refusal is demand too (spec 7.6), a prompt too
	 * long even on an idle fleet is no reason to move. The controller
	 * host coalesces the triggers until its wake, which runs right after
	 * this (the daemon's wake is a zero timeout on its loop). */
	if (dec->verdict == NARWHAL_REFUSE_TOO_LONG || !(dec->projected_ttft_s > w->cfg->slo.ttft_s))
		return;
	if (nw_controller_urgent_note(w->control->host, w->queue.now_ns, prompt_tokens,
	                              dec->projected_ttft_s))
		wi_queue_push(&w->queue, w->queue.now_ns, WI_EV_URGENT, NULL, 0);
}

void
wi_control_urgent(struct wi_world *w)
{
	evaluate(w, true);
}

json_t *
wi_control_json(const struct wi_control *c, const struct wi_world *w)
{
	json_t *changes = json_array();
	struct nw_controller_summary sum;
	uint64_t proposals = 0;
	uint32_t prefill, decode;

	for (guint i = 0; i < c->history->len; i++) {
		const struct nw_role_change *ch = &g_array_index(c->history, struct nw_role_change, i);

		json_array_append_new(changes, json_pack(
			"{s:f, s:s, s:s, s:s, s:s, s:s, s:b, s:I, s:I}",
			"at_s", wi_s(ch->at_ns), "engine", w->fleet->ids[ch->engine],
			"from", nw_role_name(ch->from), "to", nw_role_name(ch->to),
			"caller", ch->caller, "reason", ch->reason ? ch->reason : "",
			"applied", ch->applied, "prefill", (json_int_t)ch->prefill_after,
			"decode", (json_int_t)ch->decode_after));
	}
	split_of(w->fleet, &prefill, &decode);
	nw_controller_summary(c->host, &sum);
	/* Proposals that would change the split, whatever became of them. */
	for (int r = 0; r < NW_CONTROLLER_RESULTS; r++) {
		const char *name = nw_controller_result_names[r];

		if (strcmp(name, "applied") == 0 || strcmp(name, "advised") == 0 ||
		    strcmp(name, "refused") == 0)
			proposals += sum.results[0][r] + sum.results[1][r];
	}
	return json_pack("{s:{s:I, s:I}, s:{s:I, s:I}, s:I, s:I, s:I, s:I, s:o, s:o}",
	                 "initial_split", "prefill", (json_int_t)c->initial_prefill,
	                 "decode", (json_int_t)c->initial_decode,
	                 "final_split", "prefill", (json_int_t)prefill, "decode", (json_int_t)decode,
	                 "monitor_passes", (json_int_t)c->passes,
	                 "evaluations", (json_int_t)sum.evaluations[0],
	                 "urgent_evaluations", (json_int_t)sum.evaluations[1],
	                 "proposals", (json_int_t)proposals,
	                 "role_changes", changes,
	                 "controller", nw_controller_to_json(c->host, (const char *const *)w->fleet->ids,
	                                                     0));
}
