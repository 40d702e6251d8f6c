/* The scripted scenarios of the policy kinds (conform.h): admission,
 * placement and controller. Each call's result goes to the transcript with
 * every field the host reads; a failed call of a required slot, or a
 * result the host would refuse, becomes a problem line. */
#include "build-config.h"

#include "tools/plugin-kit/conform.h"

#include <math.h>

#include "tools/plugin-kit/guard.h"

#define MS 1000000LL
#define S 1000000000LL

/* The scripts' lengths are odd and not multiples of one another, so that
 * state shared between instances (a counter taken modulo the eligible
 * engines, say) shows in the isolation check rather than cancel out. */

/* The fleet's counts change from call to call, alike in every run. */
static void
stir(struct kit_world *w, guint i, gboolean disturb)
{
	const struct narwhal_fleet_view *v = narwhal_test_fleet_view(w->fleet);

	for (uint32_t e = 0; e < v->n_engines; e++) {
		struct narwhal_engine_view *ev = narwhal_test_fleet_engine(w->fleet, e);
		guint k = i * 7 + e * 3;

		ev->resident_prefill = disturb ? 60 + k % 5 : k % 4;
		ev->resident_decode = disturb ? 200 + k % 9 : k % 6;
		ev->queued_prefill = disturb ? 40 : k % 3;
		ev->resident_kv_tokens = (uint64_t)ev->resident_decode * 900;
	}
}

static const char *
str(const char *s)
{
	return s != NULL ? s : "(null)";
}

void
kit_scenario_admission(const struct nw_plugin *p, void *inst, struct kit_world *w,
                       gboolean disturb, struct kit_seen *seen)
{
	const struct narwhal_admission_ops *ops = &p->ops.admission;
	guint n = disturb ? 401 : 41;
	int64_t now = 1 * S;

	for (guint i = 0; i < n; i++) {
		char id[32];
		struct narwhal_admission_request req = {
			.struct_size = sizeof req,
			.request = i + 1,
			.request_id = id,
			.prompt_tokens = disturb ? 30000 : 64 + (i * 997) % 16000,
			.prompt_tokens_exact = i % 3 != 0,
			.max_tokens = 16 + (i * 31) % 512,
			.arrival_ns = now,
			.deadline_ns = now + 60 * S,
			.admitted = disturb ? 64 : i % 12,
			.admitted_limit = 64,
			.queued = disturb ? 8 : i % 5,
			.queue_capacity = 8,
		};
		struct narwhal_admission_decision out = {
			.struct_size = sizeof out,
			.verdict = NARWHAL_REFUSE,
			.retry_after_s = 1.0,
			.projected_ttft_s = NAN,
		};
		int rc;

		g_snprintf(id, sizeof id, "kit-%u", i);
		stir(w, i, disturb);
		narwhal_mock_host_set_time(w->mh, now);
		KIT_CALL("decide", rc = ops->decide(inst, &req, &out));
		g_string_append_printf(seen->transcript, "decide %u: %d %u %.17g %.17g %s\n", i, rc,
		                       out.verdict, out.retry_after_s, out.projected_ttft_s,
		                       str(out.reason));
		if (rc != 0)
			kit_problem(seen->slots, "decide returned %d for request %u (%" G_GUINT64_FORMAT
			            " prompt tokens)", rc, i, req.prompt_tokens);
		else if (out.verdict > NARWHAL_REFUSE_TOO_LONG)
			kit_problem(seen->range, "decide answered verdict %u, not one of 0 to 3",
			            out.verdict);
		else if (out.verdict == NARWHAL_REFUSE &&
		         !(isfinite(out.retry_after_s) && out.retry_after_s >= 0))
			kit_problem(seen->range, "decide refused with retry_after_s %g, not a finite "
			            "number of seconds", out.retry_after_s);
		else if (!isnan(out.projected_ttft_s) && !(out.projected_ttft_s >= 0))
			kit_problem(seen->range, "decide projected a TTFT of %g s", out.projected_ttft_s);
		/* Every third admitted request finishes; in the disturbing run
		 * none does, so a shared ledger would fill up. */
		if (!disturb && rc == 0 && out.verdict == NARWHAL_ADMIT && i % 3 == 0 &&
		    ops->finished != NULL)
			KIT_CALL("finished", ops->finished(inst, req.request, i % 2 == 0));
		now += 25 * MS;
	}
}

void
kit_scenario_placement(const struct nw_plugin *p, void *inst, struct kit_world *w,
                       gboolean disturb, struct kit_seen *seen)
{
	static const narwhal_phase phases[] = { NARWHAL_PHASE_PREFILL, NARWHAL_PHASE_DECODE,
	                                        NARWHAL_PHASE_AGGREGATE };
	const struct narwhal_placement_ops *ops = &p->ops.placement;
	guint n = disturb ? 301 : 37;

	for (guint i = 0; i < n; i++) {
		narwhal_phase phase = phases[i % 3];
		uint32_t n_el = 0, one;
		const uint32_t *el;
		char id[32];
		int rc;

		stir(w, i, disturb);
		narwhal_mock_host_set_time(w->mh, 1 * S + (int64_t)i * 10 * MS);
		if (i % 4 == 3) {
			/* A single eligible engine, whatever its role. */
			one = (i / 4) % narwhal_test_fleet_view(w->fleet)->n_engines;
			el = &one;
			n_el = 1;
		} else {
			el = narwhal_test_fleet_eligible(w->fleet,
			                                 phase == NARWHAL_PHASE_PREFILL ? NARWHAL_ROLE_PREFILL
			                                 : phase == NARWHAL_PHASE_DECODE ? NARWHAL_ROLE_DECODE
			                                                                 : 0,
			                                 &n_el);
		}
		g_snprintf(id, sizeof id, "kit-%u", i);
		struct narwhal_placement_request req = {
			.struct_size = sizeof req,
			.request = i + 1,
			.request_id = id,
			.phase = phase,
			.prompt_tokens = disturb ? 30000 : 100 + (i * 613) % 8000,
			.max_tokens = 128,
			.eligible = el,
			.n_eligible = n_el,
			.paired_engine = phase == NARWHAL_PHASE_DECODE ? 0 : -1,
		};
		struct narwhal_placement_result out = {
			.struct_size = sizeof out,
			.engine = UINT32_MAX,
			.cost = NAN,
			.projected_slo_ratio = NAN,
		};
		gboolean eligible = FALSE;

		KIT_CALL("place", rc = ops->place(inst, &req, &out));
		g_string_append_printf(seen->transcript, "place %u: %d %u %.17g %.17g %d\n", i, rc,
		                       out.engine, out.cost, out.projected_slo_ratio, out.unserved);
		for (uint32_t k = 0; k < n_el; k++)
			eligible |= el[k] == out.engine;
		if (rc != 0)
			kit_problem(seen->slots, "place returned %d for phase %u with %u eligible engines",
			            rc, phase, n_el);
		else if (!eligible)
			kit_problem(seen->range, "place chose engine %u, which is not in the eligible set "
			            "of call %u", out.engine, i);
		else if (!isnan(out.projected_slo_ratio) && !(out.projected_slo_ratio >= 0))
			kit_problem(seen->range, "place projected an SLO ratio of %g",
			            out.projected_slo_ratio);
	}
}

void
kit_scenario_controller(const struct nw_plugin *p, void *inst, struct kit_world *w,
                        gboolean disturb, struct kit_seen *seen)
{
	const struct narwhal_controller_ops *ops = &p->ops.controller;
	guint n = disturb ? 201 : 31;

	for (guint i = 0; i < n; i++) {
		int64_t now = (int64_t)(i + 1) * S;
		struct narwhal_controller_input in = {
			.struct_size = sizeof in,
			.now_ns = now,
			.fleet = narwhal_test_fleet_view(w->fleet),
			.live_prefill = 2,
			.live_decode = 2,
			.prefill_load = disturb ? 3.0 : 0.2 + 0.05 * (i % 10),
			.decode_load = disturb ? 0.1 : 0.3,
			.demand_short = disturb ? 90.0 : 4.0 + i % 3,
			.demand_long = disturb ? 60.0 : 4.0,
			.evidence_closed = i % 2 == 1,
			.urgent = disturb || i % 10 == 9,
			.arrivals_short = 40,
			.arrivals_long = 400,
			.prompt_tokens_mean = 1500,
			.output_tokens_mean = 200,
			.resident_decode = 10,
			.pending_decode = 2,
			.profiles_complete = true,
			.movable_to_prefill = 1,
			.movable_to_decode = 1,
			.urgent_prompt_tokens = disturb || i % 10 == 9 ? 4000 : 0,
			.urgent_ttft_s = disturb || i % 10 == 9 ? 2.5 : NAN,
			.arrival_dispersion = 1.0,
		};
		struct narwhal_controller_proposal out = {
			.struct_size = sizeof out,
			.prefill = in.live_prefill,
			.decode = in.live_decode,
			.worst_slo_ratio = NAN,
		};
		int rc;

		stir(w, i, disturb);
		narwhal_mock_host_set_time(w->mh, now);
		KIT_CALL("propose", rc = ops->propose(inst, &in, &out));
		g_string_append_printf(seen->transcript, "propose %u: %d %u/%u %.17g %s\n", i, rc,
		                       out.prefill, out.decode, out.worst_slo_ratio, str(out.reason));
		if (rc != 0)
			kit_problem(seen->slots, "propose returned %d at pass %u", rc, i);
		else if (out.prefill + out.decode != in.live_prefill + in.live_decode)
			kit_problem(seen->range, "propose split %u/%u, but the live engines are %u",
			            out.prefill, out.decode, in.live_prefill + in.live_decode);
		else if (!isnan(out.worst_slo_ratio) && !(out.worst_slo_ratio >= 0))
			kit_problem(seen->range, "propose priced a worst SLO ratio of %g",
			            out.worst_slo_ratio);
	}
}
