/*
 * The "reactive" controller in isolation: the built .so, loaded by the real
 * loader, driven against the mock host on its fake clock with scripted
 * split prices (price_split, ABI 2.2). Each scenario names the clause it
 * checks: spec 7.5 to 7.7 and the role-control document (../shared/spec),
 * as docs/controller-reactive.md states them. The urgent evaluation is
 * test-controller-reactive-urgent.c's.
 */
#include "build-config.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "reactive-scene.h"

/* --- loading and configuration ------------------------------------------- */

static void
test_descriptor(void)
{
	struct nw_harness *h = nw_harness_new(NARWHAL_KIND_CONTROLLER, "reactive");

	if (h == NULL)
		return;
	g_assert_cmpstr(h->plugin->desc->name, ==, "reactive");
	g_assert_cmpuint(h->plugin->desc->abi_major, ==, NARWHAL_ABI_MAJOR);
	g_assert_cmpuint(h->plugin->desc->abi_minor, ==, NARWHAL_ABI_MINOR);
	nw_harness_free(h);
}

/* What the host hands over (docs/plugins.md, "Its settings"): every
 * controller.reactive and controller.thresholds field, as the daemon's
 * nw_config_to_json writes them, is accepted; absent keys take the spec's
 * defaults (spec 7 and 7.7), shown in the start line. */
static void
test_config_accepts_host_sections(void)
{
	static const char *const configs[] = {
		NULL, "null", "{}", "{\"reactive\": {}, \"thresholds\": {}}",
		"{\"reactive\": {\"window_s\": 120.0, \"confirmations\": 2, \"utilization\": 0.8,"
		" \"min_arrivals\": 10, \"demand_floor\": 0.5, \"movement_margin\": 0.05,"
		" \"step_s\": 5.0, \"evidence_span_s\": 60.0, \"evidence_max_span_s\": 120.0,"
		" \"evidence_min_arrivals\": 10, \"demand_rise_tolerance\": 0.25,"
		" \"decode_correction_min\": 0.5, \"decode_correction_max\": 2.0,"
		" \"decode_correction_alpha\": 0.2, \"decode_correction_min_samples\": 8},"
		" \"thresholds\": {\"expand\": 1.0, \"shrink\": 0.5, \"cooldown_s\": 10.0,"
		" \"sustained_intervals\": 3, \"dwell_s\": 0.0, \"panic_ratio\": 0.0,"
		" \"flip_resident_guard\": 0}}",
	};

	for (size_t i = 0; i < G_N_ELEMENTS(configs); i++) {
		struct scene sc;

		if (!scene_init(&sc, configs[i]))
			return;
		g_assert_true(narwhal_mock_host_logged(sc.mh, NARWHAL_LOG_DEBUG,
		                                  "step_s=5 confirmations=3 movement_margin=0.05 "
		                                  "utilization=0.8 expand=1 shrink=0.5"));
		scene_clear(&sc);
	}
}

/* The values given are the ones used: confirmations is the larger of the
 * two counts (spec 7.5), step_s and utilization reach the decisions. */
static void
test_config_values_used(void)
{
	struct scene sc;

	if (!scene_init(&sc, "{\"reactive\": {\"confirmations\": 7, \"step_s\": 0.5,"
	                     " \"utilization\": 0.6, \"movement_margin\": 0},"
	                     " \"thresholds\": {\"sustained_intervals\": 4, \"expand\": 2,"
	                     " \"shrink\": 1.5, \"panic_ratio\": 1.5}}"))
		return;
	g_assert_true(narwhal_mock_host_logged(sc.mh, NARWHAL_LOG_DEBUG,
	                                  "step_s=0.5 confirmations=7 movement_margin=0 "
	                                  "utilization=0.6 expand=2 shrink=1.5"));
	script_three(&sc, 0.9, 0.2, 2.0, 2.0);
	(void)step(&sc);
	g_assert_cmpfloat(narwhal_mock_host_last_split_query(sc.mh)->utilization, ==, 0.6);
	scene_clear(&sc);
}

static void
expect_config_error(const char *config_json, const char *reason)
{
	nw_harness_expect_config_error(NARWHAL_KIND_CONTROLLER, "reactive", config_json, reason);
}

/* Every key is checked for type and range as docs/configuration.md gives
 * them, unknown keys are refused by name, and the rules between fields
 * hold for a section written by hand. */
static void
test_config_errors(void)
{
	expect_config_error("[]", "config must be an object with the optional keys "
	                          "\"reactive\" and \"thresholds\"");
	expect_config_error("{\"step_s\": 5}", "unknown key \"step_s\": the reactive controller "
	                                       "takes only \"reactive\" and \"thresholds\"");
	expect_config_error("{\"reactive\": 5}", "reactive: must be an object of "
	                                         "controller.reactive fields");
	expect_config_error("{\"thresholds\": []}", "thresholds: must be an object");
	expect_config_error("{\"reactive\": {\"stepp_s\": 5}}",
	                    "unknown key \"reactive.stepp_s\": not a field of controller.reactive");
	expect_config_error("{\"thresholds\": {\"step_s\": 5}}",
	                    "unknown key \"thresholds.step_s\"");
	/* Types. */
	expect_config_error("{\"reactive\": {\"step_s\": \"5\"}}",
	                    "reactive.step_s: must be a number of seconds greater than 0 and "
	                    "at most 1e9");
	expect_config_error("{\"reactive\": {\"confirmations\": 2.5}}",
	                    "reactive.confirmations: must be an integer from 1 to 1000000");
	expect_config_error("{\"thresholds\": {\"flip_resident_guard\": true}}",
	                    "thresholds.flip_resident_guard: must be an integer from 0 to 1000000");
	/* Ranges, one of each kind. */
	expect_config_error("{\"reactive\": {\"step_s\": 0}}",
	                    "reactive.step_s: 0 is out of range: must be a number of seconds "
	                    "greater than 0");
	expect_config_error("{\"reactive\": {\"window_s\": 2e9}}", "reactive.window_s: 2e+09 is "
	                                                           "out of range");
	expect_config_error("{\"thresholds\": {\"cooldown_s\": -1}}",
	                    "thresholds.cooldown_s: -1 is out of range: must be a number of "
	                    "seconds from 0 to 1e9");
	expect_config_error("{\"reactive\": {\"demand_floor\": 0}}",
	                    "reactive.demand_floor: 0 is out of range: must be a number greater "
	                    "than 0");
	expect_config_error("{\"reactive\": {\"demand_rise_tolerance\": -0.1}}",
	                    "must be a number of at least 0");
	expect_config_error("{\"reactive\": {\"utilization\": 1.2}}",
	                    "reactive.utilization: 1.2 is out of range: must be a number greater "
	                    "than 0 and at most 1");
	expect_config_error("{\"reactive\": {\"utilization\": 0}}", "reactive.utilization: 0 is");
	expect_config_error("{\"reactive\": {\"movement_margin\": 1}}",
	                    "reactive.movement_margin: 1 is out of range: must be a number from 0 "
	                    "up to but not including 1");
	expect_config_error("{\"thresholds\": {\"panic_ratio\": 0.5}}",
	                    "thresholds.panic_ratio: 0.5 is out of range: must be 0 (off) or a "
	                    "number of at least 1");
	expect_config_error("{\"reactive\": {\"min_arrivals\": 0}}",
	                    "reactive.min_arrivals: 0 is out of range: must be an integer from 1");
	expect_config_error("{\"thresholds\": {\"sustained_intervals\": 1000001}}",
	                    "thresholds.sustained_intervals: 1000001 is out of range");
	expect_config_error("{\"thresholds\": {\"flip_resident_guard\": -1}}",
	                    "thresholds.flip_resident_guard: -1 is out of range");
	/* Rules between fields. */
	expect_config_error("{\"thresholds\": {\"shrink\": 1.0}}",
	                    "thresholds.shrink: 1 must be below thresholds.expand (1)");
	expect_config_error("{\"reactive\": {\"evidence_span_s\": 130}}",
	                    "reactive.evidence_span_s: 130 must be at most "
	                    "reactive.evidence_max_span_s (120)");
	expect_config_error("{\"reactive\": {\"window_s\": 100}}",
	                    "reactive.evidence_max_span_s: 120 must be at most reactive.window_s "
	                    "(100)");
	expect_config_error("{\"reactive\": {\"decode_correction_max\": 0.4}}",
	                    "reactive.decode_correction_max: 0.4 must be at least "
	                    "reactive.decode_correction_min (0.5)");
}

static void
test_bad_arguments(void)
{
	struct scene sc;
	struct narwhal_controller_proposal out = { .struct_size = sizeof out };
	const struct narwhal_controller_ops *ops;

	if (!scene_init(&sc, NULL))
		return;
	ops = &nw_harness_ops(sc.h)->controller;
	g_assert_cmpint(ops->propose(nw_harness_ctx(sc.h), NULL, &out), ==, -EINVAL);
	g_assert_cmpint(ops->propose(nw_harness_ctx(sc.h), &sc.in, NULL), ==, -EINVAL);
	/* An input from before ABI 2.2 lacks the fields the decision needs. */
	sc.in.struct_size = offsetof(struct narwhal_controller_input, arrivals_short);
	g_assert_cmpint(ops->propose(nw_harness_ctx(sc.h), &sc.in, &out), ==, -EINVAL);
	g_assert_cmpuint(narwhal_mock_host_split_price_calls(sc.mh), ==, 0);
	scene_clear(&sc);
}

/* --- the scheduled evaluation ----------------------------------------------- */

/* Spec 7.7 (controller.reactive.step_s) and the role-control document
 * ("rate-limits role evaluations to one per controller.reactive.step_s"):
 * on the host clock, calls in between propose no change ("step") and price
 * nothing; an urgent call is not rate-limited and leaves the step clock. */
static void
test_step_rate_limit(void)
{
	struct scene sc;
	struct narwhal_controller_proposal out;
	guint calls;

	if (!scene_init(&sc, NULL))
		return;
	script_three(&sc, 1.0, 0.2, 1.0, 0.2); /* nothing improves */
	narwhal_mock_host_set_time(sc.mh, 100 * S_NS);
	out = call(&sc);
	assert_no_change(&out, "margin");
	g_assert_cmpfloat(narwhal_mock_host_counter(sc.mh, "evaluations_total"), ==, 1.0);
	calls = narwhal_mock_host_split_price_calls(sc.mh);
	g_assert_cmpuint(calls, ==, 3);

	/* in->now_ns says far later: only the host clock counts. */
	narwhal_mock_host_advance(sc.mh, 4 * S_NS);
	sc.in.now_ns = 1000 * S_NS;
	out = call(&sc);
	assert_no_change(&out, "step");
	g_assert_true(isnan(out.worst_slo_ratio));
	g_assert_cmpuint(narwhal_mock_host_split_price_calls(sc.mh), ==, calls);
	g_assert_cmpfloat(narwhal_mock_host_counter(sc.mh, "evaluations_total"), ==, 1.0);

	/* An urgent call at 104.5 s runs, and does not restart the step. */
	narwhal_mock_host_advance(sc.mh, S_NS / 2);
	out = urgent(&sc, 500);
	g_assert_cmpstr(out.reason, !=, "step");
	g_assert_cmpuint(narwhal_mock_host_split_price_calls(sc.mh), >, calls);
	g_assert_cmpfloat(narwhal_mock_host_counter(sc.mh, "urgent_evaluations_total"), ==, 1.0);

	/* 105 s: step_s after the last scheduled evaluation. */
	narwhal_mock_host_advance(sc.mh, S_NS / 2);
	out = call(&sc);
	assert_no_change(&out, "margin");
	g_assert_cmpfloat(narwhal_mock_host_counter(sc.mh, "evaluations_total"), ==, 2.0);
	g_assert_cmpuint(narwhal_mock_host_clock_reads(sc.mh), >=, 3);
	scene_clear(&sc);
}

/* Spec 7.7 (min_arrivals, demand_floor) and 7.5: the gates before pricing,
 * in order, each naming itself; none of them prices anything. */
static void
test_gates_before_pricing(void)
{
	struct scene sc;
	struct narwhal_controller_proposal out;

	if (!scene_init(&sc, NULL))
		return;
	/* No profile, too little demand and too few arrivals: the first gate. */
	sc.in.arrivals_long = 9;
	sc.in.demand_short = 0.1;
	sc.in.demand_long = 0.2;
	out = step(&sc);
	assert_no_change(&out, "min_arrivals");
	g_assert_true(isnan(out.worst_slo_ratio));

	sc.in.arrivals_long = 10;
	out = step(&sc);
	assert_no_change(&out, "demand_floor");
	g_assert_true(isnan(out.worst_slo_ratio));
	g_assert_cmpuint(narwhal_mock_host_split_price_calls(sc.mh), ==, 0);

	/* The larger of the two estimates is the demand signal. */
	sc.in.demand_short = 0.5;
	out = step(&sc);
	assert_no_change(&out, "no_profile");
	g_assert_true(isnan(out.worst_slo_ratio));
	g_assert_cmpuint(narwhal_mock_host_split_price_calls(sc.mh), ==, 1);
	sc.in.demand_short = 0.1;
	sc.in.demand_long = 0.5;
	out = step(&sc);
	assert_no_change(&out, "no_profile");

	/* No engine on one side: nothing to price (floor repair's case). */
	script_three(&sc, 0.5, 0.2, 0.5, 0.2);
	sc.in.live_prefill = 0;
	out = step(&sc);
	g_assert_cmpstr(out.reason, ==, "no_split");
	g_assert_cmpuint(out.prefill, ==, 0);
	g_assert_cmpuint(out.decode, ==, LIVE_D);
	g_assert_cmpfloat(narwhal_mock_host_counter(sc.mh, "evaluations_total"), ==, 5.0);
	scene_clear(&sc);
}

/* Spec 7.5 ("evaluates the current split and each adjacent split"), 7.6
 * ("Candidate pricing uses the larger demand estimate and includes
 * resident plus pending decode work") and 7.7 (utilization): what each
 * query asks; and the arrivals' dispersion, passed on (docs/controller.md,
 * "How a split is priced"; NaN from an input that ends before it). */
static void
test_pricing_queries(void)
{
	struct scene sc;
	const struct narwhal_split_query *q;

	if (!scene_init(&sc, NULL))
		return;
	script_three(&sc, 1.0, 0.2, 1.0, 0.2);
	sc.in.demand_short = 12.5;
	sc.in.demand_long = 8.0;
	sc.in.arrival_dispersion = 6.5;
	(void)step(&sc);
	g_assert_cmpuint(narwhal_mock_host_split_price_calls(sc.mh), ==, 3);
	g_assert_cmpuint(narwhal_mock_host_split_price_calls_for(sc.mh, LIVE_P, LIVE_D), ==, 1);
	g_assert_cmpuint(narwhal_mock_host_split_price_calls_for(sc.mh, LIVE_P + 1, LIVE_D - 1), ==, 1);
	g_assert_cmpuint(narwhal_mock_host_split_price_calls_for(sc.mh, LIVE_P - 1, LIVE_D + 1), ==, 1);
	for (guint i = 0; i < 3; i++) {
		q = narwhal_mock_host_split_query(sc.mh, i);
		g_assert_cmpfloat(q->arrivals_per_s, ==, 12.5);
		g_assert_cmpfloat(q->prompt_tokens, ==, 1000.0);
		g_assert_cmpfloat(q->output_tokens, ==, 200.0);
		g_assert_cmpfloat(q->utilization, ==, 0.8);
		g_assert_cmpuint(q->decode_streams, ==, 5 + 3);
		g_assert_cmpuint(q->urgent_prompt_tokens, ==, 0);
		g_assert_cmpfloat(q->arrival_dispersion, ==, 6.5);
	}
	sc.in.demand_short = 3.0;
	(void)step(&sc);
	g_assert_cmpfloat(narwhal_mock_host_last_split_query(sc.mh)->arrivals_per_s, ==, 8.0);
	sc.in.struct_size = offsetof(struct narwhal_controller_input, arrival_dispersion);
	(void)step(&sc);
	g_assert_true(isnan(narwhal_mock_host_last_split_query(sc.mh)->arrival_dispersion));
	sc.in.struct_size = sizeof sc.in;

	/* A side of one engine gives nothing up: 1/4 has no D+1, 2/1 no P+1. */
	sc.in.live_prefill = 1;
	script(&sc, 1, LIVE_D, price_of(1.0, 0.6, 0.3));
	script(&sc, 2, LIVE_D - 1, price_of(1.0, 0.4, 0.3));
	(void)step(&sc);
	g_assert_cmpuint(narwhal_mock_host_split_price_calls_for(sc.mh, 0, LIVE_D + 1), ==, 0);
	sc.in.live_prefill = 2;
	sc.in.live_decode = 1;
	script(&sc, 2, 1, price_of(1.0, 0.6, 0.3));
	(void)step(&sc);
	g_assert_cmpuint(narwhal_mock_host_split_price_calls_for(sc.mh, 3, 0), ==, 0);
	g_assert_cmpuint(narwhal_mock_host_split_price_calls_for(sc.mh, 1, 2), ==, 1);

	/* One engine on each side: no adjacent split at all. */
	sc.in.live_prefill = 1;
	sc.in.live_decode = 1;
	script(&sc, 1, 1, price_of(1.0, 0.6, 0.3));
	g_assert_cmpstr(step(&sc).reason, ==, "no_candidate");
	scene_clear(&sc);
}

/* Spec 7.5: "reduction in the worst projected SLO ratio of at least
 * controller.reactive.movement_margin", relative to the current ratio
 * (docs/controller-reactive.md), and strictly positive when it is 0. */
static void
test_movement_margin(void)
{
	struct scene sc;
	struct narwhal_controller_proposal out;

	if (!scene_init(&sc, "{\"reactive\": {\"confirmations\": 1},"
	                     " \"thresholds\": {\"sustained_intervals\": 1}}"))
		return;
	/* Current 2.0; 1.92 is 0.08 lower, more than 0.05 absolute but only
	 * 4% relative: refused. */
	script(&sc, LIVE_P, LIVE_D, price_of(2.0, 0.6, 0.3));
	script(&sc, LIVE_P + 1, LIVE_D - 1, price_of(1.92, 0.4, 0.2));
	out = step(&sc);
	assert_no_change(&out, "margin");
	g_assert_cmpfloat(out.worst_slo_ratio, ==, 2.0);
	/* Exactly 5% lower is enough. */
	script(&sc, LIVE_P + 1, LIVE_D - 1, price_of(1.9, 0.4, 0.2));
	out = step(&sc);
	assert_move(&out, "consolidation", LIVE_P + 1, LIVE_D - 1, 1.9);
	scene_clear(&sc);

	if (!scene_init(&sc, "{\"reactive\": {\"confirmations\": 1, \"movement_margin\": 0},"
	                     " \"thresholds\": {\"sustained_intervals\": 1}}"))
		return;
	/* Margin 0: equal is not an improvement, any strict one is. */
	script_three(&sc, 1.0, 0.2, 1.0, 0.2);
	step_no_change(&sc, "margin");
	script(&sc, LIVE_P - 1, LIVE_D + 1, price_of(0.999, 0.2, 0.2));
	out = step(&sc);
	assert_move(&out, "decode_expansion", LIVE_P - 1, LIVE_D + 1, 0.999);
	/* A current split already at ratio 0 cannot improve. */
	script_three(&sc, 0.0, 0.2, 0.0, 0.2);
	script(&sc, LIVE_P, LIVE_D, price_of(0.0, 0.6, 0.3));
	step_no_change(&sc, "margin");
	scene_clear(&sc);
}

/* Spec 7.5, ordinary consolidation: "projected source pressure at or below
 * controller.thresholds.shrink" and the margin, confirmed max(confirmations,
 * sustained_intervals) times; a log line and a counter for the move. */
static void
test_consolidation(void)
{
	struct scene sc;
	struct narwhal_controller_proposal out;

	if (!scene_init(&sc, NULL))
		return;
	script_three(&sc, 0.7, 0.5, 1.0, 0.2); /* P+1 decode load exactly shrink */
	out = confirm_three(&sc);
	assert_move(&out, "consolidation", LIVE_P + 1, LIVE_D - 1, 0.7);
	g_assert_cmpfloat(narwhal_mock_host_counter(sc.mh, "proposals_consolidation_total"), ==, 1.0);
	g_assert_cmpfloat(narwhal_mock_host_gauge(sc.mh, "confirmations_pending"), ==, 0.0);
	g_assert_true(narwhal_mock_host_logged(sc.mh, NARWHAL_LOG_INFO,
	                                  "proposes 3 prefill / 3 decode (from 2 / 4), reason "
	                                  "consolidation: worst projected SLO ratio 1 -> 0.7"));
	/* The count starts over after a proposal (here the host refused it:
	 * the live split is unchanged). */
	out = step(&sc);
	assert_no_change(&out, "confirming");
	g_assert_cmpfloat(narwhal_mock_host_gauge(sc.mh, "confirmations_pending"), ==, 1.0);

	/* Projected decode load above shrink, no mixed pressure: refused. */
	script(&sc, LIVE_P + 1, LIVE_D - 1, price_of(0.7, 0.4, 0.51));
	out = step(&sc);
	assert_no_change(&out, "source_load");
	g_assert_cmpfloat(narwhal_mock_host_gauge(sc.mh, "confirmations_pending"), ==, 0.0);
	g_assert_true(narwhal_mock_host_logged(sc.mh, NARWHAL_LOG_INFO, "proposes"));
	g_assert_cmpuint(narwhal_mock_host_n_logs(sc.mh), ==, 2); /* the start line and one move */
	scene_clear(&sc);
}

/* Spec 7.5, mixed pressure: measured prefill load at expand, and every
 * engine profiled, lets P+1 go above shrink; the margin still applies. */
static void
test_mixed_pressure(void)
{
	struct scene sc;
	struct narwhal_controller_proposal out;

	if (!scene_init(&sc, NULL))
		return;
	script_three(&sc, 0.8, 0.9, 1.0, 0.2);
	sc.in.prefill_load = 1.0; /* exactly expand */
	out = confirm_three(&sc);
	assert_move(&out, "mixed_pressure", LIVE_P + 1, LIVE_D - 1, 0.8);
	g_assert_cmpfloat(narwhal_mock_host_counter(sc.mh, "proposals_mixed_pressure_total"), ==, 1.0);

	sc.in.profiles_complete = false;
	step_no_change(&sc, "source_load");
	sc.in.profiles_complete = true;
	sc.in.prefill_load = 0.99;
	step_no_change(&sc, "source_load");
	sc.in.prefill_load = NAN; /* unknown */
	step_no_change(&sc, "source_load");
	sc.in.prefill_load = 1.5;
	script(&sc, LIVE_P + 1, LIVE_D - 1, price_of(0.96, 0.4, 0.9));
	step_no_change(&sc, "margin");
	scene_clear(&sc);
}

/* Spec 7.3 (inside the measured domain) and 7.6 (a closed evidence
 * window; consolidation pauses on a short-horizon rise beyond
 * demand_rise_tolerance once the short horizon holds evidence_min_arrivals),
 * and the host's eligibility (not_movable): each stops a decode-to-prefill
 * move, for both of its rules. */
static void
test_to_prefill_gates(void)
{
	struct scene sc;

	if (!scene_init(&sc, "{\"reactive\": {\"confirmations\": 1},"
	                     " \"thresholds\": {\"sustained_intervals\": 1}}"))
		return;
	for (int mixed = 0; mixed < 2; mixed++) {
		struct narwhal_split_price p1 = price_of(0.7, 0.4, mixed ? 0.9 : 0.3);
		const char *rule = mixed ? "mixed_pressure" : "consolidation";

		sc.in.prefill_load = mixed ? 1.2 : 0.6;
		script_three(&sc, 1.0, 0.2, 1.0, 0.9); /* D+1 never qualifies */
		p1.in_domain = false;
		script(&sc, LIVE_P + 1, LIVE_D - 1, p1);
		step_no_change(&sc, "out_of_domain");
		p1.in_domain = true;
		script(&sc, LIVE_P + 1, LIVE_D - 1, p1);

		sc.in.evidence_closed = false;
		step_no_change(&sc, "evidence_open");
		sc.in.evidence_closed = true;

		/* 12.6 > 10 * 1.25 with 10 arrivals in the short horizon. */
		sc.in.demand_short = 12.6;
		sc.in.arrivals_short = 10;
		step_no_change(&sc, "demand_rising");
		/* Too few short-horizon arrivals to judge a trend. */
		sc.in.arrivals_short = 9;
		g_assert_cmpstr(step(&sc).reason, ==, rule);
		/* Within the tolerance. */
		sc.in.arrivals_short = 100;
		sc.in.demand_short = 12.5;
		g_assert_cmpstr(step(&sc).reason, ==, rule);
		sc.in.demand_short = 10.0;

		sc.in.movable_to_prefill = 0;
		step_no_change(&sc, "not_movable");
		sc.in.movable_to_prefill = 1;
	}
	scene_clear(&sc);
}

/* Spec 7.5 ("Prefill-to-decode moves require prefill pressure at or below
 * shrink": the measured pool load of spec 7.1, not the candidate's
 * projection, which the margin prices) and 7.6 ("Moves toward decode ...
 * may proceed while evidence is still accumulating"); cooldown and
 * panic_ratio are the host's, so a proposal right after another is not
 * held back here. */
static void
test_decode_expansion(void)
{
	struct scene sc;
	struct narwhal_controller_proposal out;

	if (!scene_init(&sc, "{\"reactive\": {\"confirmations\": 1},"
	                     " \"thresholds\": {\"sustained_intervals\": 1, \"cooldown_s\": 600}}"))
		return;
	/* D+1 would load its prefill pool beyond shrink: the margin's business */
	script_three(&sc, 1.0, 0.2, 0.6, 0.9);
	sc.in.prefill_load = 0.5; /* measured prefill pressure exactly shrink */
	sc.in.evidence_closed = false;
	sc.in.demand_short = 20.0; /* rising: no matter towards decode */
	out = step(&sc);
	assert_move(&out, "decode_expansion", LIVE_P - 1, LIVE_D + 1, 0.6);
	out = step(&sc);
	assert_move(&out, "decode_expansion", LIVE_P - 1, LIVE_D + 1, 0.6);
	g_assert_cmpfloat(narwhal_mock_host_counter(sc.mh, "proposals_decode_expansion_total"), ==, 2.0);

	sc.in.prefill_load = 0.51;
	step_no_change(&sc, "source_load");
	sc.in.prefill_load = NAN; /* unknown */
	step_no_change(&sc, "source_load");
	sc.in.prefill_load = 0.3;
	sc.in.movable_to_decode = 0;
	step_no_change(&sc, "not_movable");
	scene_clear(&sc);
}

/* Spec 7.5, "The controller evaluates the current split and each adjacent
 * split": when both qualify, the larger improvement wins; when neither
 * does, the reason is the gate the furthest candidate reached. */
static void
test_best_candidate(void)
{
	struct scene sc;

	if (!scene_init(&sc, "{\"reactive\": {\"confirmations\": 1},"
	                     " \"thresholds\": {\"sustained_intervals\": 1}}"))
		return;
	script_three(&sc, 0.8, 0.2, 0.7, 0.2);
	step_move(&sc, "decode_expansion",
	            LIVE_P - 1, LIVE_D + 1, 0.7);
	script_three(&sc, 0.6, 0.2, 0.7, 0.2);
	step_move(&sc, "consolidation",
	            LIVE_P + 1, LIVE_D - 1, 0.6);
	/* P+1 waits for evidence while D+1 lacks the margin. */
	script_three(&sc, 0.6, 0.2, 0.99, 0.2);
	sc.in.evidence_closed = false;
	step_no_change(&sc, "evidence_open");
	/* P+1 lacks the margin and D+1 is not movable. */
	script_three(&sc, 0.99, 0.2, 0.6, 0.2);
	sc.in.movable_to_decode = 0;
	step_no_change(&sc, "not_movable");
	/* A blocked P+1 leaves a qualifying D+1 free to go. */
	script_three(&sc, 0.5, 0.2, 0.6, 0.2);
	sc.in.movable_to_decode = 1;
	step_move(&sc, "decode_expansion",
	            LIVE_P - 1, LIVE_D + 1, 0.6);
	scene_clear(&sc);
}

/* Spec 7.5: confirmations count max(controller.reactive.confirmations,
 * controller.thresholds.sustained_intervals) consecutive matching
 * evaluations; a change of proposed split, demand completeness or
 * eligibility rule restarts the count; no qualifying candidate, or a
 * failed eligibility check, clears it; calls within step_s neither count
 * nor clear. */
static void
test_confirmations(void)
{
	struct scene sc;
	struct narwhal_controller_proposal out;

	if (!scene_init(&sc, "{\"reactive\": {\"confirmations\": 4}}"))
		return;
	/* The larger count: 4 over sustained_intervals 3. */
	script_three(&sc, 0.7, 0.3, 1.0, 0.2);
	for (int i = 1; i <= 3; i++) {
		step_no_change(&sc, "confirming");
		g_assert_cmpfloat(narwhal_mock_host_gauge(sc.mh, "confirmations_pending"), ==, i);
		/* A call within step_s changes nothing. */
		narwhal_mock_host_advance(sc.mh, S_NS);
		g_assert_cmpstr(call(&sc).reason, ==, "step");
	}
	/* The live split changed (the host moved something else): a new
	 * proposed split starts at 1. */
	sc.in.live_prefill = 3;
	sc.in.live_decode = 3;
	script(&sc, 3, 3, price_of(1.0, 0.6, 0.3));
	script(&sc, 4, 2, price_of(0.7, 0.4, 0.3));
	script(&sc, 2, 4, price_of(1.0, 0.2, 0.2));
	(void)step(&sc);
	g_assert_cmpfloat(narwhal_mock_host_gauge(sc.mh, "confirmations_pending"), ==, 1.0);
	sc.in.live_prefill = LIVE_P;
	sc.in.live_decode = LIVE_D;
	script_three(&sc, 0.7, 0.3, 1.0, 0.2);
	(void)step(&sc);
	g_assert_cmpfloat(narwhal_mock_host_gauge(sc.mh, "confirmations_pending"), ==, 1.0);
	(void)step(&sc);
	g_assert_cmpfloat(narwhal_mock_host_gauge(sc.mh, "confirmations_pending"), ==, 2.0);

	/* The rule changes (consolidation to mixed pressure): back to 1. */
	script(&sc, LIVE_P + 1, LIVE_D - 1, price_of(0.7, 0.4, 0.9));
	sc.in.prefill_load = 1.1;
	(void)step(&sc);
	g_assert_cmpfloat(narwhal_mock_host_gauge(sc.mh, "confirmations_pending"), ==, 1.0);
	(void)step(&sc);
	g_assert_cmpfloat(narwhal_mock_host_gauge(sc.mh, "confirmations_pending"), ==, 2.0);

	/* A failed eligibility check clears the candidate. */
	sc.in.movable_to_prefill = 0;
	step_no_change(&sc, "not_movable");
	g_assert_cmpfloat(narwhal_mock_host_gauge(sc.mh, "confirmations_pending"), ==, 0.0);
	sc.in.movable_to_prefill = 1;
	(void)step(&sc);
	g_assert_cmpfloat(narwhal_mock_host_gauge(sc.mh, "confirmations_pending"), ==, 1.0);
	/* No qualifying candidate clears it too. */
	script(&sc, LIVE_P + 1, LIVE_D - 1, price_of(0.99, 0.4, 0.9));
	step_no_change(&sc, "margin");
	g_assert_cmpfloat(narwhal_mock_host_gauge(sc.mh, "confirmations_pending"), ==, 0.0);
	/* So do the gates before pricing. */
	script(&sc, LIVE_P + 1, LIVE_D - 1, price_of(0.7, 0.4, 0.9));
	(void)step(&sc);
	sc.in.arrivals_long = 1;
	step_no_change(&sc, "min_arrivals");
	g_assert_cmpfloat(narwhal_mock_host_gauge(sc.mh, "confirmations_pending"), ==, 0.0);
	sc.in.arrivals_long = 600;

	/* Four in a row: the move. */
	for (int i = 0; i < 3; i++)
		step_no_change(&sc, "confirming");
	out = step(&sc);
	assert_move(&out, "mixed_pressure", LIVE_P + 1, LIVE_D - 1, 0.7);
	scene_clear(&sc);
}

/* Spec 7.5: demand completeness (the evidence window's state) is part of
 * what must match, here for a decode expansion, which may run with the
 * window open (7.6). */
static void
test_confirmations_completeness(void)
{
	struct scene sc;
	struct narwhal_controller_proposal out;

	if (!scene_init(&sc, NULL))
		return;
	script_three(&sc, 1.0, 0.2, 0.7, 0.2);
	sc.in.evidence_closed = false;
	(void)step(&sc);
	(void)step(&sc);
	g_assert_cmpfloat(narwhal_mock_host_gauge(sc.mh, "confirmations_pending"), ==, 2.0);
	sc.in.evidence_closed = true;
	out = step(&sc);
	assert_no_change(&out, "confirming");
	g_assert_cmpfloat(narwhal_mock_host_gauge(sc.mh, "confirmations_pending"), ==, 1.0);
	out = step(&sc);
	assert_no_change(&out, "confirming");
	out = step(&sc);
	assert_move(&out, "decode_expansion", LIVE_P - 1, LIVE_D + 1, 0.7);
	scene_clear(&sc);
}

/* Plugins take time only from the host clock and read nothing but their
 * input and price_split (docs/plugins.md, section 4). */
static void
test_host_services_only(void)
{
	struct scene sc;

	if (!scene_init(&sc, NULL))
		return;
	script_three(&sc, 0.7, 0.3, 0.9, 0.2);
	for (int i = 0; i < 4; i++)
		(void)step(&sc);
	(void)urgent(&sc, 100);
	g_assert_cmpuint(narwhal_mock_host_fleet_reads(sc.mh), ==, 0);
	for (guint i = 0; i < NARWHAL_MOCK_N_ESTIMATORS; i++)
		g_assert_cmpuint(narwhal_mock_host_estimate_calls(sc.mh, i), ==, 0);
	/* Only scheduled calls read the clock, once each. */
	g_assert_cmpuint(narwhal_mock_host_clock_reads(sc.mh), ==, 4);
	scene_clear(&sc);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/controller-reactive/descriptor", test_descriptor);
	g_test_add_func("/controller-reactive/config/host-sections",
	                test_config_accepts_host_sections);
	g_test_add_func("/controller-reactive/config/values-used", test_config_values_used);
	g_test_add_func("/controller-reactive/config/errors", test_config_errors);
	g_test_add_func("/controller-reactive/bad-arguments", test_bad_arguments);
	g_test_add_func("/controller-reactive/step", test_step_rate_limit);
	g_test_add_func("/controller-reactive/gates-before-pricing", test_gates_before_pricing);
	g_test_add_func("/controller-reactive/pricing-queries", test_pricing_queries);
	g_test_add_func("/controller-reactive/movement-margin", test_movement_margin);
	g_test_add_func("/controller-reactive/consolidation", test_consolidation);
	g_test_add_func("/controller-reactive/mixed-pressure", test_mixed_pressure);
	g_test_add_func("/controller-reactive/to-prefill-gates", test_to_prefill_gates);
	g_test_add_func("/controller-reactive/decode-expansion", test_decode_expansion);
	g_test_add_func("/controller-reactive/best-candidate", test_best_candidate);
	g_test_add_func("/controller-reactive/confirmations", test_confirmations);
	g_test_add_func("/controller-reactive/confirmations-completeness",
	                test_confirmations_completeness);
	g_test_add_func("/controller-reactive/host-services-only", test_host_services_only);
	return g_test_run();
}
