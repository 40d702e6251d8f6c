/*
 * The "reactive" controller's urgent evaluation in isolation (the scene of
 * reactive-scene.h): the role-control document's "Prefill queue
 * projections" and the guards it lists, as docs/controller-reactive.md
 * ("An urgent evaluation") states them.
 */
#include "build-config.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "reactive-scene.h"

/* --- the urgent evaluation ---------------------------------------------------- */

/* The role-control document, "Prefill queue projections": an urgent wake
 * prices the current split and P+1 with the triggering prompt and moves,
 * without confirmations, when P+1 strictly improves that prompt's
 * projection; D+1 is never considered. */
static void
test_urgent_moves(void)
{
	struct scene sc;
	struct narwhal_split_price cur = price_of(1.4, 1.3, 0.3);
	struct narwhal_split_price p1 = price_of(1.2, 0.9, 0.5); /* at shrink: decode capacity */
	struct narwhal_controller_proposal out;

	if (!scene_init(&sc, NULL))
		return;
	cur.urgent_ttft_s = 2.5;
	p1.urgent_ttft_s = 1.8;
	script(&sc, LIVE_P, LIVE_D, cur);
	script(&sc, LIVE_P + 1, LIVE_D - 1, p1);
	script(&sc, LIVE_P - 1, LIVE_D + 1, price_of(0.5, 0.2, 0.2));
	sc.in.arrivals_long = 0; /* the scheduled gates do not apply */
	out = urgent(&sc, 3000);
	assert_move(&out, "urgent_ttft", LIVE_P + 1, LIVE_D - 1, 1.2);
	g_assert_cmpuint(narwhal_mock_host_split_price_calls(sc.mh), ==, 2);
	g_assert_cmpuint(narwhal_mock_host_split_price_calls_for(sc.mh, LIVE_P - 1, LIVE_D + 1), ==, 0);
	for (guint i = 0; i < 2; i++) {
		const struct narwhal_split_query *q = narwhal_mock_host_split_query(sc.mh, i);

		g_assert_cmpuint(q->urgent_prompt_tokens, ==, 3000);
		g_assert_cmpfloat(q->arrivals_per_s, ==, 10.0);
		g_assert_cmpuint(q->decode_streams, ==, 8);
	}
	g_assert_cmpfloat(narwhal_mock_host_counter(sc.mh, "proposals_urgent_ttft_total"), ==, 1.0);
	g_assert_cmpfloat(narwhal_mock_host_counter(sc.mh, "urgent_evaluations_total"), ==, 1.0);
	g_assert_true(isnan(narwhal_mock_host_counter(sc.mh, "evaluations_total")));
	g_assert_true(narwhal_mock_host_logged(sc.mh, NARWHAL_LOG_INFO, "reason urgent_ttft"));

	/* "The controller retains the current split when one request's
	 * prefill duration alone exceeds the SLO and both splits produce the
	 * same projection." */
	cur.urgent_ttft_s = 4.0;
	p1.urgent_ttft_s = 4.0;
	script(&sc, LIVE_P, LIVE_D, cur);
	script(&sc, LIVE_P + 1, LIVE_D - 1, p1);
	out = urgent(&sc, 400000);
	assert_no_change(&out, "no_gain");
	g_assert_cmpfloat(out.worst_slo_ratio, ==, 1.4);
	p1.urgent_ttft_s = 4.5;
	script(&sc, LIVE_P + 1, LIVE_D - 1, p1);
	urgent_no_change(&sc, 400000, "no_gain");
	scene_clear(&sc);
}

/* The role-control document, "Guards on role changes": the urgent D-to-P
 * evaluation enforces profile coverage, decode capacity, consolidation
 * evidence and trend, and eligibility (the host adds floors, health,
 * pins, dwell, resident ownership and flip_resident_guard). */
static void
test_urgent_gates(void)
{
	struct scene sc;
	struct narwhal_split_price cur = price_of(1.4, 1.3, 0.3);
	struct narwhal_split_price p1 = price_of(1.2, 0.9, 0.4);

	if (!scene_init(&sc, NULL))
		return;
	cur.urgent_ttft_s = 2.5;
	p1.urgent_ttft_s = 1.8;
	urgent_no_change(&sc, 3000, "no_profile");
	script(&sc, LIVE_P, LIVE_D, cur);
	script(&sc, LIVE_P + 1, LIVE_D - 1, p1);

	sc.in.profiles_complete = false;
	urgent_no_change(&sc, 3000, "no_profile");
	sc.in.profiles_complete = true;

	p1.in_domain = false;
	script(&sc, LIVE_P + 1, LIVE_D - 1, p1);
	urgent_no_change(&sc, 3000, "decode_capacity");
	p1.in_domain = true;
	/* the decode pool left behind loaded beyond shrink (0.5), as ordinary
	 * consolidation may not leave it */
	p1.decode_load = 0.51;
	script(&sc, LIVE_P + 1, LIVE_D - 1, p1);
	urgent_no_change(&sc, 3000, "decode_capacity");
	p1.decode_load = 0.5;
	script(&sc, LIVE_P + 1, LIVE_D - 1, p1);

	sc.in.evidence_closed = false;
	urgent_no_change(&sc, 3000, "evidence_open");
	sc.in.evidence_closed = true;
	sc.in.demand_short = 13.0;
	urgent_no_change(&sc, 3000, "demand_rising");
	sc.in.demand_short = 10.0;
	sc.in.movable_to_prefill = 0;
	urgent_no_change(&sc, 3000, "not_movable");
	sc.in.movable_to_prefill = 1;
	urgent_move(&sc, 3000, "urgent_ttft",
	            LIVE_P + 1, LIVE_D - 1, 1.2);

	/* No decode engine to spare. */
	sc.in.live_decode = 1;
	g_assert_cmpstr(urgent(&sc, 3000).reason, ==, "no_candidate");
	scene_clear(&sc);
}

/* An urgent wake between scheduled passes leaves their confirmation count
 * alone ("consecutive scheduled evaluations", spec 7.5). */
static void
test_urgent_keeps_confirmations(void)
{
	struct scene sc;
	struct narwhal_split_price cur = price_of(1.0, 0.6, 0.3);
	struct narwhal_split_price p1 = price_of(0.7, 0.4, 0.3);

	if (!scene_init(&sc, NULL))
		return;
	cur.urgent_ttft_s = 2.0;
	p1.urgent_ttft_s = 2.0;
	script(&sc, LIVE_P, LIVE_D, cur);
	script(&sc, LIVE_P + 1, LIVE_D - 1, p1);
	(void)step(&sc);
	(void)step(&sc);
	g_assert_cmpfloat(narwhal_mock_host_gauge(sc.mh, "confirmations_pending"), ==, 2.0);
	urgent_no_change(&sc, 100, "no_gain");
	g_assert_cmpfloat(narwhal_mock_host_gauge(sc.mh, "confirmations_pending"), ==, 2.0);
	step_move(&sc, "consolidation",
	            LIVE_P + 1, LIVE_D - 1, 0.7);
	scene_clear(&sc);
}


int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/controller-reactive/urgent/moves", test_urgent_moves);
	g_test_add_func("/controller-reactive/urgent/gates", test_urgent_gates);
	g_test_add_func("/controller-reactive/urgent/keeps-confirmations",
	                test_urgent_keeps_confirmations);
	return g_test_run();
}
