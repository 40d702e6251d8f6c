/*
 * The controller host (src/control/controller.h) on a fake clock, on the
 * fixture of controller-fixture.h (a scripted plugin, a real fleet, role
 * rules and demand ledger); its urgent path is test-controller-urgent.c's.
 * Each test names the clause it defends: spec 7 (cooldown_s,
 * panic_ratio), 7.2 (floors), 7.3 (resident work), 7.4 (advisory, what is
 * exposed), 7.6 (evidence, resident plus pending decode work), the
 * role-control document ("Role control", "Guards on role changes") and
 * issue 13 ("The host's guards", "Exposure").
 */
#include "build-config.h"

#include <math.h>
#include <string.h>

#include <glib.h>

#include "controller-fixture.h"

/* --- the inputs -------------------------------------------------------------- */

/* ABI 2.2 (plugin-abi.h, struct narwhal_controller_input) and spec 7.6:
 * the plugin sees the live split, the pool loads, both demand horizons
 * with their arrivals and the long horizon's mean request and arrival
 * dispersion (docs/controller.md, "How a split is priced"), the resident
 * and pending decode work, profile coverage, how many engines the guards
 * let move each way, and the evidence window; the proposal comes preset
 * to the current split, so a plugin that fills nothing proposes no
 * change. */
static void
test_inputs(void)
{
	struct env e;
	struct nw_price_hold h = { 0 };

	env_init(&e, "ppddd", "\"reactive\": {\"window_s\": 100, \"evidence_span_s\": 50, "
	         "\"evidence_max_span_s\": 100, \"evidence_min_arrivals\": 10}");
	e.f->engines[0].prefill_load = 0.4;
	e.f->engines[1].prefill_load = 0.8;
	e.f->engines[2].decode_load = 0.2;
	e.f->engines[3].decode_load = 0.4;     /* engine 4's unknown: not in the mean */
	e.f->engines[2].resident_decode = 3;
	e.f->engines[3].resident_decode = 2;
	e.f->engines[0].resident_prefill = 1;  /* admitted, decode not begun */
	e.f->engines[1].queued_prefill = 2;
	nw_pricing_pending(e.f, &h, 100);      /* one more, not placed yet */
	e.f->engines[4].flags |= NARWHAL_ENGINE_PINNED;
	/* 40 offers in one 50 s, 20 in the next 50, of 200 tokens and
	 * max_tokens 50. */
	offers(&e, 40, 901, 951, 200, 50);
	offers(&e, 20, 951, 1000, 200, 50);

	e.script.fill = false;
	{
		struct nw_controller_pass p = pass_of(&e);

		g_assert_cmpuint(nw_controller_scheduled(e.c, &p, e.out, MAX_ENGINES), ==, 0);
	}
	g_assert_cmpuint(e.script.calls, ==, 1);
	g_assert_cmpuint(e.script.preset.prefill, ==, 2);
	g_assert_cmpuint(e.script.preset.decode, ==, 3);
	g_assert_true(isnan(e.script.preset.worst_slo_ratio));
	g_assert_null(e.script.preset.reason);
	g_assert_cmpint(e.script.in.now_ns, ==, T0);
	g_assert_true(e.script.in.fleet == &e.f->view);
	g_assert_false(e.script.in.urgent);
	g_assert_cmpuint(e.script.in.live_prefill, ==, 2);
	g_assert_cmpuint(e.script.in.live_decode, ==, 3);
	g_assert_cmpfloat_with_epsilon(e.script.in.prefill_load, 0.6, 1e-12);
	g_assert_cmpfloat_with_epsilon(e.script.in.decode_load, 0.3, 1e-12);
	{
		struct nw_demand_estimate sh, lo;

		nw_demand_estimate(e.demand, T0, NW_DEMAND_SHORT, &sh);
		nw_demand_estimate(e.demand, T0, NW_DEMAND_LONG, &lo);
		g_assert_cmpuint(e.script.in.arrivals_long, ==, 60);
		g_assert_cmpuint(e.script.in.arrivals_long, ==, lo.arrivals);
		g_assert_cmpuint(e.script.in.arrivals_short, ==, sh.arrivals);
		g_assert_cmpuint(sh.arrivals, >=, 19);      /* the last 50 s */
		g_assert_cmpuint(sh.arrivals, <=, 20);
		g_assert_cmpfloat(e.script.in.demand_long, ==, lo.arrivals_per_s);
		g_assert_cmpfloat(e.script.in.demand_short, ==, sh.arrivals_per_s);
		/* Twice the rate in one half of the horizon as in the other. */
		g_assert_cmpfloat(lo.dispersion, >, 0);
		g_assert_cmpfloat(e.script.in.arrival_dispersion, ==, lo.dispersion);
	}
	g_assert_cmpfloat_with_epsilon(e.script.in.prompt_tokens_mean, 200, 1e-9);
	g_assert_cmpfloat_with_epsilon(e.script.in.output_tokens_mean, 50, 1e-9);
	g_assert_cmpuint(e.script.in.resident_decode, ==, 5);
	g_assert_cmpuint(e.script.in.pending_decode, ==, 4);
	g_assert_true(e.script.in.profiles_complete);
	g_assert_true(e.script.in.evidence_closed);   /* 50 s and 10 arrivals */
	/* Both prefill engines may go (the prefill floor is 1, and one stays);
	 * decode: engines 2 and 3, not the pinned one. */
	g_assert_cmpuint(e.script.in.movable_to_decode, ==, 2);
	g_assert_cmpuint(e.script.in.movable_to_prefill, ==, 2);
	g_assert_cmpuint(e.script.in.urgent_prompt_tokens, ==, 0);
	assert_last(&e, "unchanged", NULL);
	g_assert_null(gate(&e));
	g_assert_cmpuint(n_proposals(&e), ==, 0);

	/* An engine without a profile: coverage is incomplete. */
	nw_fleet_set_profile(e.f, 4, NULL);
	e.script.fill = false;
	{
		struct nw_controller_pass p = pass_of(&e);

		nw_controller_scheduled(e.c, &p, e.out, MAX_ENGINES);
	}
	g_assert_false(e.script.in.profiles_complete);
	nw_pricing_release(e.f, &h);
	env_clear(&e);
}

/* Spec 7.6: the evidence window is open at first and the plugin is told
 * so; the mean output stands on what completions delivered when offers
 * set no max_tokens, and on the offers that set it once some do
 * (plugin-abi.h). */
static void
test_inputs_open_evidence(void)
{
	struct env e;
	struct nw_demand_ticket t = { 0 };

	env_init(&e, "pd", NULL);
	e.now = S(5);
	nw_demand_offer(e.demand, &t, S(1), 100, true, 0);
	nw_demand_admit(e.demand, &t);
	nw_demand_end(e.demand, &t, S(2), true, 30);
	scheduled(&e, 0, "hold");
	g_assert_false(e.script.in.evidence_closed);
	g_assert_cmpfloat_with_epsilon(e.script.in.output_tokens_mean, 30, 1e-9);
	g_assert_cmpfloat_with_epsilon(e.script.in.prompt_tokens_mean, 100, 1e-9);

	/* Once some offers set max_tokens, the mean is theirs alone: an offer
	 * without it does not halve what the others request. */
	{
		struct nw_demand_ticket t2 = { 0 }, t3 = { 0 };

		nw_demand_offer(e.demand, &t2, S(3), 300, true, 80);
		nw_demand_offer(e.demand, &t3, S(3), 200, true, 0);
	}
	e.now = S(15); /* past the plugin's step */
	scheduled(&e, 0, "hold");
	g_assert_cmpfloat_with_epsilon(e.script.in.output_tokens_mean, 80, 1e-9);
	g_assert_cmpfloat_with_epsilon(e.script.in.prompt_tokens_mean, 200, 1e-9);
	env_clear(&e);
}

/* --- what becomes of a proposal ----------------------------------------------- */

/* Issue 13, "Exposure": a proposal of no change records the evaluation
 * and the plugin's reason as the gate, and is no proposal; a call
 * between the plugin's own steps ("step", the role-control document's
 * one evaluation per step_s) records nothing; a failing
 * plugin changes nothing (plugin-abi.h: "Non-zero: no change this pass")
 * and is recorded as failed. */
static void
test_unchanged_and_failed(void)
{
	struct env e;
	struct nw_controller_summary s;

	env_init(&e, "ppdd", NULL);
	g_assert_cmpuint(scheduled(&e, 0, "prefill_pressure_low"), ==, 0);
	assert_last(&e, "unchanged", NULL);
	g_assert_cmpstr(gate(&e), ==, "prefill_pressure_low");
	g_assert_cmpuint(n_proposals(&e), ==, 0);

	/* A self-limiting plugin called between its steps: no evaluation,
	 * the gate and the last evaluation stay. */
	g_assert_cmpuint(scheduled(&e, 0, "step"), ==, 0);
	g_assert_cmpstr(gate(&e), ==, "prefill_pressure_low");
	assert_last(&e, "unchanged", NULL);
	nw_controller_summary(e.c, &s);
	g_assert_cmpuint(s.evaluations[0], ==, 1);

	e.script.rc = -5;
	g_assert_cmpuint(scheduled(&e, 1, "would_move"), ==, 0);
	assert_last(&e, "failed", NULL);
	g_assert_cmpstr(gate(&e), ==, "plugin_failed");
	g_assert_cmpuint(live_of(&e, P), ==, 2);
	nw_controller_summary(e.c, &s);
	g_assert_cmpuint(s.evaluations[0], ==, 2);
	g_assert_cmpuint(s.results[0][0], ==, 1);   /* unchanged */
	g_assert_cmpuint(s.results[0][4], ==, 1);   /* failed */
	g_assert_cmpstr(nw_controller_result_names[4], ==, "failed");
	env_clear(&e);
}

/* Role-control document, "Guards on role changes": a decode-to-prefill
 * move takes the lightest eligible decode engine (least resident work,
 * ties to the lowest index); the change names the caller and the
 * plugin's reason and the split after it; the record says applied, and
 * nothing blocks movement afterwards. */
static void
test_applied_lightest_donor(void)
{
	struct env e;
	json_t *d, *rec;

	env_init(&e, "pddd", NULL);
	e.f->engines[1].resident_decode = 4;
	e.f->engines[2].resident_decode = 1;
	e.f->engines[3].resident_decode = 1;
	g_assert_cmpuint(scheduled(&e, 1, "prefill_pressure"), ==, 1);
	g_assert_cmpuint(e.out[0].engine, ==, 2);
	g_assert_cmpuint(e.out[0].from, ==, D);
	g_assert_cmpuint(e.out[0].to, ==, P);
	g_assert_cmpstr(e.out[0].caller, ==, "controller");
	g_assert_cmpstr(e.out[0].reason, ==, "prefill_pressure");
	g_assert_true(e.out[0].applied);
	g_assert_cmpint(e.out[0].at_ns, ==, T0);
	g_assert_cmpuint(e.out[0].prefill_after, ==, 2);
	g_assert_cmpuint(e.out[0].decode_after, ==, 2);
	g_assert_cmpuint(live_of(&e, P), ==, 2);
	g_assert_null(gate(&e));

	d = doc(&e);
	g_assert_cmpuint(json_array_size(json_object_get(d, "proposals")), ==, 1);
	rec = json_array_get(json_object_get(d, "proposals"), 0);
	g_assert_cmpstr(json_string_value(json_object_get(rec, "caller")), ==, "controller");
	g_assert_cmpstr(json_string_value(json_object_get(rec, "reason")), ==, "prefill_pressure");
	g_assert_cmpstr(json_string_value(json_object_get(rec, "result")), ==, "applied");
	g_assert_cmpint(json_integer_value(json_object_get(json_object_get(rec, "before"),
	                                                   "prefill")), ==, 1);
	g_assert_cmpint(json_integer_value(json_object_get(json_object_get(rec, "proposed"),
	                                                   "prefill")), ==, 2);
	g_assert_cmpstr(json_string_value(json_array_get(json_object_get(rec, "engines"), 0)), ==,
	                "d2");
	g_assert_cmpfloat(json_real_value(json_object_get(rec, "at_s")), ==, 1000.0);
	json_decref(d);
	env_clear(&e);
}

/* Role-control document, "Role control": one adjacent move per
 * evaluation; a proposal of two engines, or of a split of other engines
 * than the live ones, is refused and nothing moves. */
static void
test_one_adjacent_move(void)
{
	struct env e;

	env_init(&e, "ppdddd", NULL);
	g_assert_cmpuint(scheduled(&e, 2, "big_step"), ==, 0);
	assert_last(&e, "refused", "not_adjacent");
	g_assert_cmpstr(gate(&e), ==, "not_adjacent");
	g_assert_cmpuint(scheduled(&e, -2, "big_step"), ==, 0);
	assert_last(&e, "refused", "not_adjacent");
	e.script.extra_decode = 1;
	g_assert_cmpuint(scheduled(&e, 1, "miscounted"), ==, 0);
	assert_last(&e, "refused", "invalid_split");
	g_assert_cmpuint(live_of(&e, P), ==, 2);
	g_assert_cmpuint(n_proposals(&e), ==, 3);
	env_clear(&e);
}

/* Role-control document, "Role control": a move may involve more than one
 * engine while the pool it feeds is below its floor, at most up to the
 * floor; each change's split is the split once it and those before it are
 * applied. */
static void
test_below_floor_moves_several(void)
{
	struct env e;

	env_init(&e, "pppdddd", "\"min_prefill\": 3");
	e.f->engines[1].flags &= ~(uint32_t)NARWHAL_ENGINE_AVAILABLE;
	e.f->engines[2].flags &= ~(uint32_t)NARWHAL_ENGINE_AVAILABLE;
	/* One live prefill engine of a floor of three: up to two may move. */
	g_assert_cmpuint(scheduled(&e, 3, "refill"), ==, 0);
	assert_last(&e, "refused", "not_adjacent");
	g_assert_cmpuint(scheduled(&e, 2, "refill"), ==, 2);
	g_assert_cmpuint(e.out[0].engine, ==, 3);
	g_assert_cmpuint(e.out[1].engine, ==, 4);
	g_assert_cmpuint(e.out[0].prefill_after, ==, 2);
	g_assert_cmpuint(e.out[1].prefill_after, ==, 3);
	g_assert_cmpuint(e.out[1].decode_after, ==, 2);
	g_assert_cmpuint(live_of(&e, P), ==, 3);
	env_clear(&e);
}

/* Spec 7.2 and the role-control document's guards through
 * nw_roles_check_move: a pinned or unmovable engine is passed over for an
 * eligible one; dwell holds a recent mover; the decode floor holds; the
 * refusing guard is the one that stopped the candidate that got furthest. */
static void
test_guards_pins_dwell_floors(void)
{
	struct env e;

	env_init(&e, "pddd", "\"thresholds\": {\"dwell_s\": 30}");
	e.f->engines[1].flags |= NARWHAL_ENGINE_PINNED;
	e.unmovable[2] = true;
	g_assert_cmpuint(scheduled(&e, 1, "expand"), ==, 1);
	g_assert_cmpuint(e.out[0].engine, ==, 3);

	/* Engine 3 moved at T0, engine 0 five seconds before: within dwell_s
	 * neither goes back. */
	e.f->engines[0].role_since_ns = T0 - S(5);
	e.now = T0 + S(10);
	g_assert_cmpuint(scheduled(&e, -1, "shrink"), ==, 0);
	assert_last(&e, "refused", "dwell");
	/* Now no decode engine may move: pinned and unmovable ones and the
	 * decode floor (engine 1 and 2 are the last two, one pinned). */
	g_assert_cmpuint(scheduled(&e, 1, "expand"), ==, 0);
	assert_last(&e, "refused", "engine_pinned");
	e.f->engines[1].flags &= ~(uint32_t)NARWHAL_ENGINE_PINNED;
	e.unmovable[2] = false;
	e.f->engines[2].flags &= ~(uint32_t)NARWHAL_ENGINE_AVAILABLE;
	g_assert_cmpuint(scheduled(&e, 1, "expand"), ==, 0);
	assert_last(&e, "refused", "decode_floor");
	g_assert_cmpstr(gate(&e), ==, "decode_floor");
	env_clear(&e);
}

/* Role-control document: flip_resident_guard is judged on the lightest
 * eligible decode donor: a lighter engine that is pinned does not count,
 * and when the lightest eligible one carries more streams than the guard
 * the move is refused. */
static void
test_resident_guard_lightest_eligible(void)
{
	struct env e;

	env_init(&e, "pddd", "\"thresholds\": {\"flip_resident_guard\": 2}");
	e.f->engines[1].resident_decode = 0;
	e.f->engines[1].flags |= NARWHAL_ENGINE_PINNED;
	e.f->engines[2].resident_decode = 3;
	e.f->engines[3].resident_decode = 5;
	g_assert_cmpuint(scheduled(&e, 1, "expand"), ==, 0);
	assert_last(&e, "refused", "resident_guard");
	e.f->engines[3].resident_decode = 2;
	g_assert_cmpuint(scheduled(&e, 1, "expand"), ==, 1);
	g_assert_cmpuint(e.out[0].engine, ==, 3);
	env_clear(&e);
}

/* Spec 7.3: a decode-to-prefill move leaves a split whose decode engines
 * hold the resident decode work inside the measured domain (here 64
 * streams an engine); priced with resident plus pending decode work (spec
 * 7.6). Without a profile nothing can be checked and the move is
 * refused. */
static void
test_resident_work_domain(void)
{
	struct env e;

	env_init(&e, "pdd", NULL);
	offers(&e, 20, 900, 1000, 100, 16);
	e.f->engines[1].resident_decode = 40;
	e.f->engines[2].resident_decode = 40;
	/* 80 streams on one engine: beyond the 64 measured. */
	g_assert_cmpuint(scheduled(&e, 1, "expand"), ==, 0);
	assert_last(&e, "refused", "outside_domain");
	g_assert_cmpuint(live_of(&e, P), ==, 1);
	/* 60 on one: inside. */
	e.f->engines[1].resident_decode = 20;
	g_assert_cmpuint(scheduled(&e, 1, "expand"), ==, 1);
	g_assert_cmpuint(live_of(&e, P), ==, 2);
	env_clear(&e);

	env_init(&e, "ppdd", NULL);
	for (uint32_t i = 0; i < 4; i++)
		nw_fleet_set_profile(e.f, i, NULL);
	g_assert_cmpuint(scheduled(&e, 1, "expand"), ==, 0);
	assert_last(&e, "refused", "no_profile");
	/* Moves towards decode need no price. */
	g_assert_cmpuint(scheduled(&e, -1, "consolidate"), ==, 1);
	env_clear(&e);
}

/* Spec 7 (controller.thresholds.cooldown_s): a prefill-to-decode move
 * waits cooldown_s after the last move towards decode, whoever made it
 * (a floor repair here); panic_ratio lets a decode pool at that multiple
 * of its target skip the wait while prefill is below shrink. */
static void
test_cooldown_and_panic(void)
{
	struct env e;
	struct nw_role_change repair = {
		.engine = 1, .from = P, .to = D, .at_ns = T0, .caller = "floor_repair",
		.reason = "decode_below_floor", .applied = true, .prefill_after = 3, .decode_after = 1,
	};

	env_init(&e, "ppppd", "\"thresholds\": {\"cooldown_s\": 10, \"panic_ratio\": 2, "
	         "\"shrink\": 0.5}");
	/* No move towards decode yet: nothing to wait for. */
	g_assert_cmpuint(scheduled(&e, -1, "consolidate"), ==, 1);
	e.now = T0 + S(5);
	g_assert_cmpuint(scheduled(&e, -1, "consolidate"), ==, 0);
	assert_last(&e, "refused", "cooldown");
	g_assert_cmpstr(gate(&e), ==, "cooldown");
	e.now = T0 + S(10);
	g_assert_cmpuint(scheduled(&e, -1, "consolidate"), ==, 1);

	/* Another caller's move towards decode restarts it. */
	repair.at_ns = T0 + S(12);
	nw_controller_note_change(e.c, e.demand, &repair);
	e.now = T0 + S(15);
	/* Engines 2 and 3 serve prefill now. Decode at 2.5 times its target,
	 * prefill light: panic skips the wait ... */
	for (uint32_t i = 0; i < 5; i++) {
		e.f->engines[i].decode_load = 2.5;
		e.f->engines[i].prefill_load = 0.2;
	}
	/* ... but not with prefill at shrink (a mean of 0.5). */
	e.f->engines[3].prefill_load = 0.8;
	g_assert_cmpuint(scheduled(&e, -1, "panic"), ==, 0);
	assert_last(&e, "refused", "cooldown");
	e.f->engines[3].prefill_load = 0.2;
	g_assert_cmpuint(scheduled(&e, -1, "panic"), ==, 1);
	env_clear(&e);
}

/* Spec 7.4 (advisory rollout): every proposal is recorded with its split,
 * caller, reason and result "advised"; the changes come back not applied
 * (for the flip history) and the roles stay. */
static void
test_advisory(void)
{
	struct env e;
	json_t *d, *rec;

	env_init(&e, "pddd", "\"advisory\": true");
	g_assert_cmpuint(scheduled(&e, 1, "expand"), ==, 1);
	g_assert_false(e.out[0].applied);
	g_assert_cmpuint(live_of(&e, P), ==, 1);
	g_assert_cmpstr(gate(&e), ==, "advisory");
	g_assert_cmpuint(scheduled(&e, 1, "expand"), ==, 1);
	d = doc(&e);
	g_assert_true(json_is_true(json_object_get(d, "advisory")));
	g_assert_cmpuint(json_array_size(json_object_get(d, "proposals")), ==, 2);
	rec = json_array_get(json_object_get(d, "proposals"), 1);
	g_assert_cmpstr(json_string_value(json_object_get(rec, "result")), ==, "advised");
	g_assert_cmpstr(json_string_value(json_object_get(rec, "reason")), ==, "expand");
	g_assert_cmpint(json_integer_value(json_object_get(json_object_get(rec, "proposed"),
	                                                   "prefill")), ==, 2);
	json_decref(d);
	/* A refused proposal is refused in advisory mode too. */
	g_assert_cmpuint(scheduled(&e, 2, "too_far"), ==, 0);
	assert_last(&e, "refused", "not_adjacent");
	env_clear(&e);
}

/* Issue 13, "Exposure": the proposals are kept in a ring of
 * controller.flip_history, oldest first; a reload keeps them (a larger
 * ring takes them all, a smaller one the newest), and keeps the last move
 * towards decode (the cooldown goes on). */
static void
test_ring_and_reload(void)
{
	struct env e;
	struct nw_config *next;
	GPtrArray *problems = NULL;
	json_t *d;

	env_init(&e, "pppd", "\"flip_history\": 2, \"thresholds\": {\"cooldown_s\": 10}");
	scheduled(&e, 2, "first");
	scheduled(&e, 2, "second");
	scheduled(&e, -1, "third");      /* applied: a move towards decode */
	d = doc(&e);
	g_assert_cmpuint(json_array_size(json_object_get(d, "proposals")), ==, 2);
	g_assert_cmpstr(json_string_value(json_object_get(
		json_array_get(json_object_get(d, "proposals"), 0), "reason")), ==, "second");
	g_assert_cmpint(json_integer_value(json_object_get(json_object_get(d, "proposals_kept"),
	                                                   "total")), ==, 3);
	json_decref(d);

	next = nw_config_load_string(
		"{\"serving\": {\"admission\": \"open\"}, \"controller\": {\"policy\": \"static\", "
		"\"flip_history\": 1, \"thresholds\": {\"cooldown_s\": 10}}, "
		"\"fleet\": {\"engines\": [{\"id\": \"p0\", \"url\": \"http://127.0.0.1:1\", "
		"\"role\": \"prefill\"}, {\"id\": \"d1\", \"url\": \"http://127.0.0.1:2\", "
		"\"role\": \"decode\"}]}}", "next.json", &problems);
	g_assert_nonnull(next);
	g_ptr_array_unref(problems);
	nw_controller_configure(e.c, next);
	d = doc(&e);
	g_assert_cmpstr(json_string_value(json_object_get(d, "policy")), ==, "static");
	g_assert_cmpuint(json_array_size(json_object_get(d, "proposals")), ==, 1);
	g_assert_cmpstr(json_string_value(json_object_get(
		json_array_get(json_object_get(d, "proposals"), 0), "reason")), ==, "third");
	json_decref(d);
	/* The cooldown started at T0 goes on across the reload. */
	e.now = T0 + S(3);
	g_assert_cmpuint(scheduled(&e, -1, "again"), ==, 0);
	assert_last(&e, "refused", "cooldown");
	nw_config_free(next);
	env_clear(&e);
}

/* Issue 13, "Exposure": a plugin's reason is recorded bounded (31 bytes)
 * and printable; the state shows the last evaluation's priced inputs
 * (loads, demand, evidence, worst ratios now and proposed) and the
 * plugin's own ratio. */
static void
test_reason_bounded_and_inputs_shown(void)
{
	struct env e;
	json_t *d, *in;
	const char *reason;

	env_init(&e, "pddd", NULL);
	offers(&e, 30, 900, 1000, 100, 16);
	e.f->engines[0].prefill_load = 1.5;
	e.script.worst = 0.7;
	{
		struct nw_controller_pass p = pass_of(&e);

		e.script.fill = true;
		e.script.dp = 1;
		e.script.reason = "a\nreason-far-longer-than-thirty-one-bytes";
		nw_controller_scheduled(e.c, &p, e.out, MAX_ENGINES);
	}
	d = doc(&e);
	reason = json_string_value(json_object_get(json_object_get(d, "last"), "reason"));
	g_assert_cmpuint(strlen(reason), ==, 31);
	g_assert_true(g_str_has_prefix(reason, "a?reason-far"));
	in = json_object_get(json_object_get(d, "last"), "inputs");
	g_assert_cmpfloat(json_real_value(json_object_get(json_object_get(in, "loads"),
	                                                  "prefill")), ==, 1.5);
	g_assert_true(json_is_null(json_object_get(json_object_get(in, "loads"), "decode")));
	g_assert_cmpfloat_with_epsilon(
		json_real_value(json_object_get(json_object_get(json_object_get(in, "demand"), "long"),
		                                "arrivals_per_s")), 30.0 / 120, 0.01);
	/* the dispersion it was priced with: a number or null, never absent */
	g_assert_true(json_is_number(json_object_get(
		json_object_get(json_object_get(in, "demand"), "long"), "dispersion")) ||
	              json_is_null(json_object_get(
		json_object_get(json_object_get(in, "demand"), "long"), "dispersion")));
	g_assert_true(json_is_real(json_object_get(in, "worst_ratio_current")));
	g_assert_true(json_is_real(json_object_get(in, "worst_ratio_proposed")));
	g_assert_cmpfloat(json_real_value(json_object_get(in, "plugin_worst_ratio")), ==, 0.7);
	g_assert_nonnull(json_object_get(d, "evidence"));
	g_assert_nonnull(json_object_get(json_object_get(d, "demand"), "short"));
	json_decref(d);
	env_clear(&e);
}

/* Spec 7.6: a decode-recovery move (floor repair towards decode) restarts
 * the evidence window, reason "decode_recovery"; another caller's move
 * towards decode, or one not applied, does not. */
static void
test_decode_recovery_resets_evidence(void)
{
	struct env e;
	struct nw_demand_evidence ev;
	struct nw_role_change c = {
		.engine = 0, .from = P, .to = D, .at_ns = S(10), .caller = "operator",
		.reason = "admin_api", .applied = true,
	};

	env_init(&e, "ppd", NULL);
	nw_controller_note_change(e.c, e.demand, &c);
	c.caller = "floor_repair";
	c.applied = false;
	nw_controller_note_change(e.c, e.demand, &c);
	nw_demand_evidence(e.demand, S(20), &ev);
	g_assert_cmpuint(ev.resets, ==, 0);
	c.applied = true;
	nw_controller_note_change(e.c, e.demand, &c);
	nw_demand_evidence(e.demand, S(20), &ev);
	g_assert_cmpuint(ev.resets, ==, 1);
	g_assert_cmpstr(ev.last_reset, ==, "decode_recovery");
	g_assert_cmpfloat_with_epsilon(ev.span_s, 10.0, 1e-9);
	/* A move to prefill does nothing of the sort. */
	c.to = P;
	c.from = D;
	nw_controller_note_change(e.c, e.demand, &c);
	nw_demand_evidence(e.demand, S(20), &ev);
	g_assert_cmpuint(ev.resets, ==, 1);
	env_clear(&e);
}

/* docs/metrics.md, "Controller": the summary the metrics route reads. */
static void
test_summary(void)
{
	struct env e;
	struct nw_controller_summary s;

	env_init(&e, "pddd", NULL);
	nw_controller_summary(e.c, &s);
	g_assert_false(s.has_last);
	g_assert_true(isnan(s.worst_ratio_current));
	offers(&e, 30, 900, 1000, 100, 16);
	scheduled(&e, 1, "expand");
	nw_controller_summary(e.c, &s);
	g_assert_true(s.has_last);
	g_assert_cmpuint(s.proposed_prefill, ==, 2);
	g_assert_cmpuint(s.proposed_decode, ==, 2);
	g_assert_cmpuint(s.results[0][1], ==, 1);  /* applied */
	g_assert_null(s.gate);
	g_assert_cmpfloat(s.worst_ratio_current, >, 0);
	g_assert_cmpfloat(s.worst_ratio_proposed, >, 0);
	g_assert_cmpfloat_with_epsilon(s.demand_long, 0.25, 0.01);
	env_clear(&e);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/controller/abi-2.2/inputs", test_inputs);
	g_test_add_func("/controller/spec-7.6/inputs-open-evidence", test_inputs_open_evidence);
	g_test_add_func("/controller/issue-13/unchanged-and-failed", test_unchanged_and_failed);
	g_test_add_func("/controller/guards/applied-lightest-donor", test_applied_lightest_donor);
	g_test_add_func("/controller/role-control/one-adjacent-move", test_one_adjacent_move);
	g_test_add_func("/controller/role-control/below-floor-several",
	                test_below_floor_moves_several);
	g_test_add_func("/controller/spec-7.2/guards-pins-dwell-floors",
	                test_guards_pins_dwell_floors);
	g_test_add_func("/controller/guards/resident-guard-lightest-eligible",
	                test_resident_guard_lightest_eligible);
	g_test_add_func("/controller/spec-7.3/resident-work-domain", test_resident_work_domain);
	g_test_add_func("/controller/spec-7/cooldown-and-panic", test_cooldown_and_panic);
	g_test_add_func("/controller/spec-7.4/advisory", test_advisory);
	g_test_add_func("/controller/issue-13/ring-and-reload", test_ring_and_reload);
	g_test_add_func("/controller/issue-13/reason-bounded-inputs-shown",
	                test_reason_bounded_and_inputs_shown);
	g_test_add_func("/controller/spec-7.6/decode-recovery-resets-evidence",
	                test_decode_recovery_resets_evidence);
	g_test_add_func("/controller/metrics/summary", test_summary);
	return g_test_run();
}
