/*
 * The controller host's urgent path (src/control/controller.h) on a fake
 * clock, with the fixture of test-controller.c: the role-control
 * document's "Prefill queue projections" (one coalesced evaluation
 * between passes, the recheck, at most one move, strict improvement) and
 * issue 13 ("The urgent evaluation").
 */
#include "build-config.h"

#include <math.h>
#include <string.h>

#include <glib.h>

#include "controller-fixture.h"

/* --- the urgent path ---------------------------------------------------------- */

/* Role-control document, "Prefill queue projections": triggers coalesce
 * into one pending evaluation (the first is evaluated); the wake runs
 * once, clearing it; a wake with nothing pending does nothing. */
static void
test_urgent_coalesces(void)
{
	struct env e;

	env_init(&e, "pdd", NULL);
	g_assert_false(nw_controller_urgent_pending(e.c));
	g_assert_true(nw_controller_urgent_note(e.c, T0, 3000, 2.5));
	g_assert_false(nw_controller_urgent_note(e.c, T0 + 1, 100, 9.0));
	g_assert_true(nw_controller_urgent_pending(e.c));
	urgent(&e, 1, "urgent_expand");
	g_assert_false(nw_controller_urgent_pending(e.c));
	g_assert_cmpuint(urgent(&e, 1, "urgent_expand"), ==, 0);
	/* Armed again after the next scheduled pass (below). */
	pass(&e);
	g_assert_true(nw_controller_urgent_note(e.c, T0 + 2, 100, 2.5));
	env_clear(&e);
}

/* Role-control document: "one coalesced controller evaluation between
 * regular controller passes". A flood of breaches, each after the wake of
 * the one before (as a stream of requests arrives between passes), makes
 * one urgent evaluation until the next scheduled pass, which lets the
 * next breach arm another; a pass answered "step" is a regular pass too. */
static void
test_urgent_once_between_passes(void)
{
	struct env e;
	struct nw_controller_summary s;

	env_init(&e, "pdd", NULL);
	g_assert_true(nw_controller_urgent_note(e.c, T0, 1000, 2.5));
	urgent(&e, 0, "hold");
	for (int k = 0; k < 100; k++) {
		g_assert_false(nw_controller_urgent_note(e.c, T0 + k, 1000, 2.5));
		g_assert_false(nw_controller_urgent_pending(e.c));
		urgent(&e, 0, "hold");
	}
	nw_controller_summary(e.c, &s);
	g_assert_cmpuint(s.evaluations[1], ==, 1);
	scheduled(&e, 0, "step");
	g_assert_true(nw_controller_urgent_note(e.c, T0 + 200, 1000, 2.5));
	urgent(&e, 0, "hold");
	g_assert_false(nw_controller_urgent_note(e.c, T0 + 201, 1000, 2.5));
	nw_controller_summary(e.c, &s);
	g_assert_cmpuint(s.evaluations[1], ==, 2);
	env_clear(&e);
}

/* Role-control document: the trigger disappears when the queue drains
 * before the evaluation: the prompt now projects within slo.ttft_s on the
 * current split, and the plugin is not asked. */
static void
test_urgent_dismissed_when_drained(void)
{
	struct env e;
	struct nw_controller_summary s;

	env_init(&e, "pdd", NULL);
	nw_controller_urgent_note(e.c, T0, 1000, 2.5);
	g_assert_cmpuint(urgent(&e, 1, "urgent_expand"), ==, 0);
	g_assert_cmpuint(e.script.calls, ==, 0);
	assert_last(&e, "dismissed", NULL);
	g_assert_cmpuint(n_proposals(&e), ==, 0);
	nw_controller_summary(e.c, &s);
	g_assert_cmpuint(s.evaluations[1], ==, 1);
	g_assert_cmpuint(s.results[1][5], ==, 1);
	env_clear(&e);
}

/* Role-control document: with prefill work queued the prompt still
 * breaches; the plugin is called with urgent set, the prompt and its
 * projection on the current split, and one adjacent decode-to-prefill
 * move is applied as "controller_urgent". */
static void
test_urgent_moves_one(void)
{
	struct env e;
	struct nw_price_hold holds[8] = { 0 };
	json_t *d, *u;

	env_init(&e, "pddd", NULL);
	/* 8 prompts of 4000 tokens waiting: 3.2 s of work for one engine. */
	for (int k = 0; k < 8; k++)
		nw_pricing_pending(e.f, &holds[k], 4000);
	nw_controller_urgent_note(e.c, T0, 1000, 3.5);
	g_assert_cmpuint(urgent(&e, 1, "urgent_expand"), ==, 1);
	g_assert_cmpuint(e.script.calls, ==, 1);
	g_assert_true(e.script.in.urgent);
	g_assert_cmpuint(e.script.in.urgent_prompt_tokens, ==, 1000);
	g_assert_cmpfloat(e.script.in.urgent_ttft_s, >, 2.0);
	g_assert_cmpstr(e.out[0].caller, ==, "controller_urgent");
	g_assert_cmpuint(e.out[0].to, ==, P);
	g_assert_cmpuint(live_of(&e, P), ==, 2);
	d = doc(&e);
	u = json_object_get(d, "urgent");
	g_assert_cmpint(json_integer_value(json_object_get(u, "evaluations")), ==, 1);
	g_assert_cmpint(json_integer_value(json_object_get(u, "moves")), ==, 1);
	g_assert_cmpstr(json_string_value(json_object_get(
		json_array_get(json_object_get(d, "proposals"), 0), "caller")), ==,
		"controller_urgent");
	u = json_object_get(json_object_get(json_object_get(d, "last"), "inputs"), "urgent");
	g_assert_cmpint(json_integer_value(json_object_get(u, "prompt_tokens")), ==, 1000);
	g_assert_cmpfloat(json_real_value(json_object_get(u, "trigger_at_s")), ==, 1000.0);
	g_assert_cmpfloat(json_real_value(json_object_get(u, "trigger_ttft_s")), ==, 3.5);
	g_assert_cmpfloat(json_real_value(json_object_get(u, "proposed_ttft_s")), <,
	                  json_real_value(json_object_get(u, "current_ttft_s")));
	json_decref(d);
	for (int k = 0; k < 8; k++)
		nw_pricing_release(e.f, &holds[k]);
	env_clear(&e);
}

/* Role-control document: one urgent wake applies at most one adjacent
 * decode-to-prefill move: a move towards decode or of two engines is
 * refused ("urgent_direction"); the guards apply (the decode floor). */
static void
test_urgent_direction_and_guards(void)
{
	struct env e;
	struct nw_price_hold holds[16] = { 0 };

	env_init(&e, "ppddd", NULL);
	for (int k = 0; k < 16; k++)
		nw_pricing_pending(e.f, &holds[k], 4000);
	nw_controller_urgent_note(e.c, T0, 1000, 3.5);
	g_assert_cmpuint(urgent(&e, -1, "wrong_way"), ==, 0);
	assert_last(&e, "refused", "urgent_direction");
	pass(&e);
	nw_controller_urgent_note(e.c, T0, 1000, 3.5);
	g_assert_cmpuint(urgent(&e, 2, "too_many"), ==, 0);
	assert_last(&e, "refused", "urgent_direction");
	e.f->engines[3].flags &= ~(uint32_t)NARWHAL_ENGINE_AVAILABLE;
	e.f->engines[4].flags &= ~(uint32_t)NARWHAL_ENGINE_AVAILABLE;
	pass(&e);
	nw_controller_urgent_note(e.c, T0, 1000, 3.5);
	g_assert_cmpuint(urgent(&e, 1, "expand"), ==, 0);
	assert_last(&e, "refused", "decode_floor");
	g_assert_cmpuint(live_of(&e, P), ==, 2);
	for (int k = 0; k < 16; k++)
		nw_pricing_release(e.f, &holds[k]);
	env_clear(&e);
}

/* Role-control document: the split stays when one request's prefill
 * alone exceeds the SLO and both splits project the same for it: the
 * move must strictly improve the triggering request's projection. */
static void
test_urgent_needs_improvement(void)
{
	struct env e;

	/* A TTFT target below one 4000-token prompt's own 0.41 s. */
	env_init(&e, "pdd", NULL);
	e.f->view.ttft_target_s = 0.3;
	nw_controller_urgent_note(e.c, T0, 4000, 0.45);
	g_assert_cmpuint(urgent(&e, 1, "expand"), ==, 0);
	g_assert_cmpuint(e.script.calls, ==, 1);
	assert_last(&e, "refused", "no_improvement");
	g_assert_cmpuint(live_of(&e, P), ==, 1);
	env_clear(&e);
}

/* Without any profile the urgent trigger cannot be priced: dismissed. */
static void
test_urgent_unpriced_dismissed(void)
{
	struct env e;

	env_init(&e, "pdd", NULL);
	for (uint32_t i = 0; i < 3; i++)
		nw_fleet_set_profile(e.f, i, NULL);
	nw_controller_urgent_note(e.c, T0, 1000, 3.0);
	g_assert_cmpuint(urgent(&e, 1, "expand"), ==, 0);
	assert_last(&e, "dismissed", NULL);
	env_clear(&e);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/controller/urgent/coalesces", test_urgent_coalesces);
	g_test_add_func("/controller/role-control/urgent-once-between-passes",
	                test_urgent_once_between_passes);
	g_test_add_func("/controller/urgent/dismissed-when-drained",
	                test_urgent_dismissed_when_drained);
	g_test_add_func("/controller/urgent/moves-one", test_urgent_moves_one);
	g_test_add_func("/controller/urgent/direction-and-guards", test_urgent_direction_and_guards);
	g_test_add_func("/controller/urgent/needs-improvement", test_urgent_needs_improvement);
	g_test_add_func("/controller/urgent/unpriced-dismissed", test_urgent_unpriced_dismissed);
	return g_test_run();
}
