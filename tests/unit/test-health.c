/* One engine's health and lifecycle holds (src/control/health.h): every
 * rule of issue 10 and spec sections 5 and 6 it implements, on a fake
 * clock (times in seconds, converted to the ns the module takes). */
#include "build-config.h"

#include <math.h>
#include <string.h>

#include <glib.h>

#include "control/health.h"

#define S(x) ((int64_t)((x) * 1e9))

/* The defaults of docs/configuration.md, section recovery (quarantine
 * off); each test changes what its rule needs. */
static struct nw_health_rules
default_rules(void)
{
	return (struct nw_health_rules){
		.probe_failures = 2,
		.passive_failures = 3,
		.window_s = 30,
		.min_samples = 10,
		.failure_ratio = 0.5,
		.quarantine_s = 0,
		.backoff_s = 1,
		.backoff_max_s = 30,
	};
}

/* An engine under test: its rules, its health and the fake clock. */
struct fx {
	struct nw_health_rules rules;
	struct nw_engine_health h;
	int64_t now;
};

static void
fx_init(struct fx *f, const struct nw_health_rules *rules)
{
	f->rules = *rules;
	f->now = 0;
	nw_health_init(&f->h, &f->rules, 1.0, f->now);
}

static bool
fx_step_detail(struct fx *f, nw_health_event_kind kind, double at_s, const char *detail)
{
	struct nw_health_event ev = { .kind = kind };

	f->now = S(at_s);
	return nw_health_step(&f->h, &f->rules, &ev, f->now, detail);
}

static bool
fx_step(struct fx *f, nw_health_event_kind kind, double at_s)
{
	return fx_step_detail(f, kind, at_s, NULL);
}

static bool
fx_start_time(struct fx *f, double at_s, double start_time_s)
{
	struct nw_health_event ev = { .kind = NW_HEALTH_START_TIME, .start_time_s = start_time_s };

	f->now = S(at_s);
	return nw_health_step(&f->h, &f->rules, &ev, f->now, NULL);
}

static void
assert_state(const struct fx *f, nw_health_state state, nw_health_reason reason)
{
	g_assert_cmpstr(nw_health_state_name(f->h.state), ==, nw_health_state_name(state));
	g_assert_cmpstr(nw_health_reason_name(f->h.reason), ==, nw_health_reason_name(reason));
}

/* Drive an ejected engine through verification to LIVE at at_s. */
static void
fx_verify(struct fx *f, double at_s)
{
	g_assert_true(nw_health_verify_due(&f->h, S(at_s)));
	g_assert_true(fx_step(f, NW_HEALTH_VERIFY_START, at_s));
	g_assert_true(fx_step(f, NW_HEALTH_VERIFY_OK, at_s));
	assert_state(f, NW_HEALTH_LIVE, NW_HEALTH_REASON_NONE);
}

/* docs/configuration.md, section recovery: each field lands in its rule. */
static void
test_rules_from_config(void)
{
	struct nw_config cfg;
	struct nw_health_rules r;

	memset(&cfg, 0, sizeof(cfg));
	cfg.recovery.probe_failures = 4;
	cfg.recovery.passive_failures = 5;
	cfg.recovery.health.window_s = 12.5;
	cfg.recovery.health.min_samples = 7;
	cfg.recovery.health.failure_ratio = 0.25;
	cfg.recovery.failure_quarantine_s = 3.5;
	cfg.recovery.verify_backoff_s = 0.75;
	cfg.recovery.verify_backoff_max_s = 9;
	nw_health_rules_from_config(&r, &cfg);
	g_assert_cmpuint(r.probe_failures, ==, 4);
	g_assert_cmpuint(r.passive_failures, ==, 5);
	g_assert_cmpfloat(r.window_s, ==, 12.5);
	g_assert_cmpuint(r.min_samples, ==, 7);
	g_assert_cmpfloat(r.failure_ratio, ==, 0.25);
	g_assert_cmpfloat(r.quarantine_s, ==, 3.5);
	g_assert_cmpfloat(r.backoff_s, ==, 0.75);
	g_assert_cmpfloat(r.backoff_max_s, ==, 9);
}

/* The window holds one residual per pass over window_s, plus one; at
 * least min_samples; at most 65536. A new engine is live and available. */
static void
test_init(void)
{
	struct nw_health_rules r = default_rules();
	struct nw_engine_health h;

	nw_health_init(&h, &r, 1.0, S(7));
	g_assert_cmpuint(h.window_cap, ==, 31);
	g_assert_cmpint(h.state, ==, NW_HEALTH_LIVE);
	g_assert_cmpint(h.reason, ==, NW_HEALTH_REASON_NONE);
	g_assert_true(isnan(h.start_time_s));
	g_assert_cmpint(h.changed_ns, ==, S(7));
	g_assert_true(nw_health_available(&h, S(7)));
	g_assert_false(nw_health_verify_due(&h, S(7)));
	nw_health_clear(&h);

	nw_health_init(&h, &r, 0.4, 0);
	g_assert_cmpuint(h.window_cap, ==, 76); /* ceil(75) + 1 */
	nw_health_clear(&h);

	r.min_samples = 100;
	nw_health_init(&h, &r, 1.0, 0);
	g_assert_cmpuint(h.window_cap, ==, 100);
	nw_health_clear(&h);

	r.window_s = 1e6;
	nw_health_init(&h, &r, 0.001, 0);
	g_assert_cmpuint(h.window_cap, ==, 65536);
	nw_health_clear(&h);
}

/* issue 10, recovery.probe_failures: that many failed probes in a row
 * eject; fewer leave the engine in placement. */
static void
test_probe_failures_in_a_row(void)
{
	struct nw_health_rules r = default_rules();
	struct fx f;

	r.probe_failures = 3;
	fx_init(&f, &r);
	g_assert_false(fx_step_detail(&f, NW_HEALTH_PROBE_FAILED, 1, "connect refused"));
	g_assert_false(fx_step(&f, NW_HEALTH_PROBE_FAILED, 2));
	assert_state(&f, NW_HEALTH_LIVE, NW_HEALTH_REASON_NONE);
	g_assert_true(nw_health_available(&f.h, f.now));
	g_assert_cmpuint(f.h.probe_failures, ==, 2);

	g_assert_true(fx_step_detail(&f, NW_HEALTH_PROBE_FAILED, 3, "timed out"));
	assert_state(&f, NW_HEALTH_EJECTED, NW_HEALTH_REASON_PROBE_FAILURES);
	g_assert_false(nw_health_available(&f.h, f.now));
	g_assert_cmpint(f.h.changed_ns, ==, S(3));
	g_assert_cmpint(f.h.next_verify_ns, ==, S(4)); /* backoff_s = 1 */
	g_assert_cmpuint(f.h.ejections, ==, 1);
	g_assert_cmpstr(f.h.last_error, ==, "timed out");

	/* Further failures while ejected change nothing but the count. */
	g_assert_false(fx_step(&f, NW_HEALTH_PROBE_FAILED, 4));
	assert_state(&f, NW_HEALTH_EJECTED, NW_HEALTH_REASON_PROBE_FAILURES);
	g_assert_cmpuint(f.h.probe_failures, ==, 4);
	g_assert_cmpuint(f.h.ejections, ==, 1);
	g_assert_cmpstr(f.h.last_error, ==, "health probe failed");
	nw_health_clear(&f.h);
}

/* issue 10, recovery.health.min_samples and failure_ratio: the window
 * ejects only once it holds min_samples residuals with a failure share at
 * or above the ratio. */
static void
test_window_min_samples(void)
{
	struct nw_health_rules r = default_rules();
	struct fx f;
	uint32_t n;
	double t = 0;

	r.probe_failures = 1000; /* only the window ejects here */
	fx_init(&f, &r);
	for (int i = 0; i < 2; i++)
		fx_step(&f, NW_HEALTH_PROBE_OK, t += 1);
	/* Failures 1 to 7: share above 0.5 from the second on, but fewer
	 * than 10 residuals. */
	for (int i = 0; i < 7; i++)
		g_assert_false(fx_step(&f, NW_HEALTH_PROBE_FAILED, t += 1));
	assert_state(&f, NW_HEALTH_LIVE, NW_HEALTH_REASON_NONE);
	g_assert_cmpfloat_with_epsilon(nw_health_window_failure_share(&f.h, &f.rules, f.now, &n),
	                               7.0 / 9.0, 1e-12);
	g_assert_cmpuint(n, ==, 9);
	/* The tenth residual fills the window. */
	g_assert_true(fx_step(&f, NW_HEALTH_PROBE_FAILED, t += 1));
	assert_state(&f, NW_HEALTH_EJECTED, NW_HEALTH_REASON_HEALTH_WINDOW);
	g_assert_cmpint(f.h.changed_ns, ==, S(10));
	nw_health_clear(&f.h);
}

/* issue 10, recovery.health.failure_ratio: a full window below the ratio
 * keeps the engine; at the ratio exactly it ejects. */
static void
test_window_ratio(void)
{
	struct nw_health_rules r = default_rules();
	struct fx f;
	double t = 0;

	r.probe_failures = 1000;
	r.min_samples = 4;
	fx_init(&f, &r);
	for (int i = 0; i < 3; i++)
		fx_step(&f, NW_HEALTH_PROBE_OK, t += 1);
	g_assert_false(fx_step(&f, NW_HEALTH_PROBE_FAILED, t += 1)); /* 1 of 4 */
	g_assert_false(fx_step(&f, NW_HEALTH_PROBE_FAILED, t += 1)); /* 2 of 5 */
	assert_state(&f, NW_HEALTH_LIVE, NW_HEALTH_REASON_NONE);
	g_assert_true(fx_step(&f, NW_HEALTH_PROBE_FAILED, t += 1));  /* 3 of 6 */
	assert_state(&f, NW_HEALTH_EJECTED, NW_HEALTH_REASON_HEALTH_WINDOW);
	nw_health_clear(&f.h);
}

/* issue 10, recovery.health.window_s: residuals window_s old or older no
 * longer count, and a full ring drops its oldest. */
static void
test_window_ages_out(void)
{
	struct nw_health_rules r = default_rules();
	struct fx f;
	uint32_t n;

	r.probe_failures = 1000;
	r.window_s = 10;
	r.min_samples = 4;
	fx_init(&f, &r);
	g_assert_cmpuint(f.h.window_cap, ==, 11);
	fx_step(&f, NW_HEALTH_PROBE_FAILED, 0);
	fx_step(&f, NW_HEALTH_PROBE_FAILED, 1);
	fx_step(&f, NW_HEALTH_PROBE_FAILED, 2);
	nw_health_window_failure_share(&f.h, &f.rules, S(9.999), &n);
	g_assert_cmpuint(n, ==, 3);
	nw_health_window_failure_share(&f.h, &f.rules, S(10), &n);
	g_assert_cmpuint(n, ==, 2); /* exactly window_s old: out */
	/* At 11.5 the residuals of 0 and 1 are out: with this one, two of the
	 * four needed; counted from the start it would have been four. */
	g_assert_false(fx_step(&f, NW_HEALTH_PROBE_FAILED, 11.5));
	assert_state(&f, NW_HEALTH_LIVE, NW_HEALTH_REASON_NONE);
	nw_health_window_failure_share(&f.h, &f.rules, f.now, &n);
	g_assert_cmpuint(n, ==, 2);
	/* An empty window's share is 0. */
	g_assert_cmpfloat(nw_health_window_failure_share(&f.h, &f.rules, S(100), &n), ==, 0.0);
	g_assert_cmpuint(n, ==, 0);
	nw_health_clear(&f.h);

	/* The ring keeps its newest window_cap residuals. */
	fx_init(&f, &r);
	for (int i = 0; i < 20; i++)
		fx_step(&f, NW_HEALTH_PROBE_OK, 0.1 * i);
	g_assert_cmpuint(f.h.window_len, ==, 11);
	nw_health_window_failure_share(&f.h, &f.rules, f.now, &n);
	g_assert_cmpuint(n, ==, 11);
	g_assert_cmpint(f.h.window[f.h.window_head].at_ns, ==, S(0.9));
	nw_health_clear(&f.h);
}

/* issue 10: a readmitted engine starts afresh; the failures that ejected
 * it are no longer in its window. */
static void
test_verification_clears_window(void)
{
	struct nw_health_rules r = default_rules();
	struct fx f;
	uint32_t n;

	r.probe_failures = 1000;
	r.min_samples = 3;
	fx_init(&f, &r);
	fx_step(&f, NW_HEALTH_PROBE_OK, 1);
	fx_step(&f, NW_HEALTH_PROBE_FAILED, 2);
	g_assert_true(fx_step(&f, NW_HEALTH_PROBE_FAILED, 3));
	assert_state(&f, NW_HEALTH_EJECTED, NW_HEALTH_REASON_HEALTH_WINDOW);
	fx_step(&f, NW_HEALTH_PROBE_FAILED, 3.5);
	fx_verify(&f, 4);
	nw_health_window_failure_share(&f.h, &f.rules, f.now, &n);
	g_assert_cmpuint(n, ==, 0);
	g_assert_cmpuint(f.h.probe_failures, ==, 0);
	/* With the old residuals this would be 4 failures of 5. */
	g_assert_false(fx_step(&f, NW_HEALTH_PROBE_FAILED, 5));
	assert_state(&f, NW_HEALTH_LIVE, NW_HEALTH_REASON_NONE);
	nw_health_clear(&f.h);
}

/* issue 10, passive detection (recovery.passive_failures): real legs
 * failing in a row eject at once; a completed leg resets the count; 0
 * turns it off. */
static void
test_passive_detection(void)
{
	struct nw_health_rules r = default_rules();
	struct fx f;

	fx_init(&f, &r);
	g_assert_false(fx_step_detail(&f, NW_HEALTH_LEG_FAILED, 1, "reset"));
	g_assert_false(fx_step(&f, NW_HEALTH_LEG_FAILED, 1.1));
	g_assert_false(fx_step(&f, NW_HEALTH_LEG_OK, 1.2));
	g_assert_cmpuint(f.h.leg_failures, ==, 0);
	g_assert_false(fx_step(&f, NW_HEALTH_LEG_FAILED, 1.3));
	g_assert_false(fx_step(&f, NW_HEALTH_LEG_FAILED, 1.4));
	assert_state(&f, NW_HEALTH_LIVE, NW_HEALTH_REASON_NONE);
	g_assert_true(fx_step_detail(&f, NW_HEALTH_LEG_FAILED, 1.5, "HTTP 503"));
	assert_state(&f, NW_HEALTH_EJECTED, NW_HEALTH_REASON_LEG_FAILURES);
	g_assert_cmpint(f.h.changed_ns, ==, S(1.5));
	g_assert_cmpint(f.h.next_verify_ns, ==, S(2.5));
	g_assert_cmpuint(f.h.leg_failures, ==, 0);
	g_assert_cmpuint(f.h.ejections, ==, 1);
	g_assert_cmpstr(f.h.last_error, ==, "HTTP 503");
	nw_health_clear(&f.h);

	r.passive_failures = 0;
	fx_init(&f, &r);
	for (int i = 0; i < 50; i++)
		g_assert_false(fx_step(&f, NW_HEALTH_LEG_FAILED, i));
	assert_state(&f, NW_HEALTH_LIVE, NW_HEALTH_REASON_NONE);
	g_assert_cmpuint(f.h.leg_failures, ==, 50);
	nw_health_clear(&f.h);
}

/* spec 6, recovery.failure_quarantine_s: "Time a failed engine remains
 * excluded from placement"; each failure restarts it; verification
 * clears it. */
static void
test_quarantine(void)
{
	struct nw_health_rules r = default_rules();
	struct fx f;
	json_t *j;

	r.quarantine_s = 5;
	fx_init(&f, &r);
	g_assert_true(fx_step(&f, NW_HEALTH_LEG_FAILED, 10));
	assert_state(&f, NW_HEALTH_LIVE, NW_HEALTH_REASON_NONE);
	g_assert_cmpint(f.h.quarantine_until_ns, ==, S(15));
	g_assert_false(nw_health_available(&f.h, S(10)));
	g_assert_false(nw_health_available(&f.h, S(15) - 1));
	g_assert_true(nw_health_available(&f.h, S(15)));
	j = nw_health_to_json(&f.h, &f.rules, S(12.5));
	g_assert_cmpfloat(json_real_value(json_object_get(j, "quarantine_remaining_s")), ==, 2.5);
	g_assert_false(json_is_true(json_object_get(j, "available")));
	json_decref(j);
	j = nw_health_to_json(&f.h, &f.rules, S(20));
	g_assert_cmpfloat(json_real_value(json_object_get(j, "quarantine_remaining_s")), ==, 0);
	json_decref(j);

	/* A second failure extends it from its own time. */
	g_assert_true(fx_step(&f, NW_HEALTH_LEG_FAILED, 13));
	g_assert_cmpint(f.h.quarantine_until_ns, ==, S(18));
	/* The third ejects; verification ends the quarantine with it. */
	g_assert_true(fx_step(&f, NW_HEALTH_LEG_FAILED, 14));
	assert_state(&f, NW_HEALTH_EJECTED, NW_HEALTH_REASON_LEG_FAILURES);
	fx_verify(&f, 15);
	g_assert_cmpint(f.h.quarantine_until_ns, ==, 0);
	g_assert_true(nw_health_available(&f.h, S(15)));
	nw_health_clear(&f.h);
}

/* spec 6, recovery.failure_quarantine_s: 0 disables quarantine. */
static void
test_quarantine_off(void)
{
	struct nw_health_rules r = default_rules();
	struct fx f;

	fx_init(&f, &r);
	g_assert_false(fx_step(&f, NW_HEALTH_LEG_FAILED, 10));
	g_assert_cmpint(f.h.quarantine_until_ns, ==, 0);
	g_assert_true(nw_health_available(&f.h, S(10)));
	nw_health_clear(&f.h);
}

/* spec 6, breaker verification: an ejected engine is readmitted only
 * through verification, started once its wait has passed. */
static void
test_breaker_verification(void)
{
	struct nw_health_rules r = default_rules();
	struct fx f;

	fx_init(&f, &r);
	/* Ejected by its real legs, its health never failing. */
	fx_step(&f, NW_HEALTH_LEG_FAILED, 1);
	fx_step(&f, NW_HEALTH_LEG_FAILED, 1.5);
	g_assert_true(fx_step(&f, NW_HEALTH_LEG_FAILED, 2));
	assert_state(&f, NW_HEALTH_EJECTED, NW_HEALTH_REASON_LEG_FAILURES);

	/* A passing probe does not readmit. */
	g_assert_false(fx_step(&f, NW_HEALTH_PROBE_OK, 2.5));
	assert_state(&f, NW_HEALTH_EJECTED, NW_HEALTH_REASON_LEG_FAILURES);
	/* Before the backoff has passed verification may not start. */
	g_assert_false(nw_health_verify_due(&f.h, S(3) - 1));
	g_assert_false(fx_step(&f, NW_HEALTH_VERIFY_START, 2.9));
	g_assert_cmpint(f.h.state, ==, NW_HEALTH_EJECTED);
	/* Legs may not end a verification that did not start. */
	g_assert_false(fx_step(&f, NW_HEALTH_VERIFY_OK, 2.9));
	g_assert_cmpint(f.h.state, ==, NW_HEALTH_EJECTED);

	g_assert_true(nw_health_verify_due(&f.h, S(3)));
	g_assert_true(fx_step(&f, NW_HEALTH_VERIFY_START, 3));
	assert_state(&f, NW_HEALTH_VERIFYING, NW_HEALTH_REASON_LEG_FAILURES);
	g_assert_false(nw_health_available(&f.h, f.now));
	g_assert_false(nw_health_verify_due(&f.h, f.now));
	g_assert_cmpint(f.h.changed_ns, ==, S(3));
	/* While verifying, a failed probe leaves it to the legs. */
	g_assert_false(fx_step(&f, NW_HEALTH_PROBE_FAILED, 3.1));
	g_assert_cmpint(f.h.state, ==, NW_HEALTH_VERIFYING);

	g_assert_true(fx_step(&f, NW_HEALTH_VERIFY_OK, 3.4));
	assert_state(&f, NW_HEALTH_LIVE, NW_HEALTH_REASON_NONE);
	g_assert_true(nw_health_available(&f.h, f.now));
	g_assert_cmpint(f.h.changed_ns, ==, S(3.4));
	g_assert_cmpuint(f.h.probe_failures, ==, 0);
	g_assert_false(f.h.probe_failed_last);
	g_assert_cmpuint(f.h.ejections, ==, 1);
	nw_health_clear(&f.h);
}

/* issue 10: the backoff between verification attempts grows (doubling
 * from recovery.verify_backoff_s) and is capped at
 * recovery.verify_backoff_max_s; a success starts it over. */
static void
test_backoff_grows_and_is_capped(void)
{
	static const struct { double fail_at, next_at; } attempts[] = {
		{ 1.5, 3.5 },   /* 2 s */
		{ 4.0, 8.0 },   /* 4 s */
		{ 9.0, 14.0 },  /* 8 s, capped at 5 */
		{ 15.0, 20.0 }, /* capped */
	};
	struct nw_health_rules r = default_rules();
	struct fx f;
	double t;

	r.backoff_max_s = 5;
	fx_init(&f, &r);
	fx_step(&f, NW_HEALTH_LEG_FAILED, 0);
	fx_step(&f, NW_HEALTH_LEG_FAILED, 0);
	fx_step(&f, NW_HEALTH_LEG_FAILED, 0);
	g_assert_cmpint(f.h.next_verify_ns, ==, S(1));
	t = 1;
	for (size_t i = 0; i < G_N_ELEMENTS(attempts); i++) {
		g_assert_true(fx_step(&f, NW_HEALTH_VERIFY_START, t));
		g_assert_true(fx_step_detail(&f, NW_HEALTH_VERIFY_FAILED, attempts[i].fail_at,
		                             "decode leg: no first token"));
		assert_state(&f, NW_HEALTH_EJECTED, NW_HEALTH_REASON_VERIFY_FAILED);
		g_assert_cmpuint(f.h.verify_failures, ==, i + 1);
		g_assert_cmpint(f.h.next_verify_ns, ==, S(attempts[i].next_at));
		t = attempts[i].next_at;
	}
	g_assert_cmpstr(f.h.last_error, ==, "decode leg: no first token");
	/* A failed verification is no new ejection. */
	g_assert_cmpuint(f.h.ejections, ==, 1);

	fx_verify(&f, t);
	g_assert_cmpuint(f.h.verify_failures, ==, 0);
	fx_step(&f, NW_HEALTH_LEG_FAILED, 30);
	fx_step(&f, NW_HEALTH_LEG_FAILED, 30);
	fx_step(&f, NW_HEALTH_LEG_FAILED, 30);
	g_assert_cmpint(f.h.next_verify_ns, ==, S(31));
	g_assert_cmpuint(f.h.ejections, ==, 2);
	nw_health_clear(&f.h);
}

/* issue 10, passive detection: a refused connection ejects at once (nothing
 * listens there); with passive detection off it only counts. */
static void
test_refused_ejects_at_once(void)
{
	struct nw_health_rules r = default_rules();
	struct fx f;

	fx_init(&f, &r);
	g_assert_true(fx_step(&f, NW_HEALTH_LEG_REFUSED, 1));
	assert_state(&f, NW_HEALTH_EJECTED, NW_HEALTH_REASON_LEG_FAILURES);
	g_assert_cmpuint(f.h.ejections, ==, 1);
	nw_health_clear(&f.h);

	r.passive_failures = 0;
	fx_init(&f, &r);
	g_assert_false(fx_step(&f, NW_HEALTH_LEG_REFUSED, 1));
	assert_state(&f, NW_HEALTH_LIVE, NW_HEALTH_REASON_NONE);
	g_assert_cmpuint(f.h.leg_failures, ==, 1);
	nw_health_clear(&f.h);
}

/* issue 10 (a hung engine whose health passes): the monitor's stall check
 * ejects it with its backoff; nothing happens to an engine already out. */
static void
test_stalled(void)
{
	struct nw_health_rules r = default_rules();
	struct fx f;

	fx_init(&f, &r);
	g_assert_true(fx_step(&f, NW_HEALTH_STALLED, 4));
	assert_state(&f, NW_HEALTH_EJECTED, NW_HEALTH_REASON_STALLED);
	g_assert_cmpint(f.h.next_verify_ns, ==, S(5));
	g_assert_false(fx_step(&f, NW_HEALTH_STALLED, 4.5));
	g_assert_cmpuint(f.h.ejections, ==, 1);
	nw_health_clear(&f.h);
}

/* issue 10: restart hold (health answers after failing): an engine that
 * failed its probes until ejected and answers again has restarted, and is
 * verified at once, without its backoff. One lost probe of a live engine
 * is no restart; an engine the window ejected (flapping) keeps its
 * backoff. */
static void
test_restart_hold_answers_after_failing(void)
{
	struct nw_health_rules r = default_rules();
	struct fx f;

	fx_init(&f, &r);
	g_assert_false(fx_step(&f, NW_HEALTH_PROBE_OK, 1));
	g_assert_false(fx_step(&f, NW_HEALTH_PROBE_FAILED, 2));
	g_assert_true(f.h.probe_failed_last);
	g_assert_false(fx_step(&f, NW_HEALTH_PROBE_OK, 3));
	assert_state(&f, NW_HEALTH_LIVE, NW_HEALTH_REASON_NONE);

	/* Down: ejected by probes in a row, backoff pending. */
	g_assert_false(fx_step(&f, NW_HEALTH_PROBE_FAILED, 4));
	g_assert_true(fx_step(&f, NW_HEALTH_PROBE_FAILED, 5));
	assert_state(&f, NW_HEALTH_EJECTED, NW_HEALTH_REASON_PROBE_FAILURES);
	g_assert_cmpint(f.h.next_verify_ns, >, S(5));
	/* Back: a restart, verified at once. */
	g_assert_false(fx_step(&f, NW_HEALTH_PROBE_OK, 5.5));
	assert_state(&f, NW_HEALTH_EJECTED, NW_HEALTH_REASON_RESTART);
	g_assert_cmpint(f.h.next_verify_ns, ==, S(5.5));
	g_assert_true(nw_health_verify_due(&f.h, S(5.5)));
	g_assert_false(f.h.probe_failed_last);
	g_assert_cmpuint(f.h.probe_failures, ==, 0);
	g_assert_cmpuint(f.h.ejections, ==, 1);
	fx_verify(&f, 5.7);
	g_assert_true(nw_health_available(&f.h, f.now));
	nw_health_clear(&f.h);
}

/* issue 10: restart hold (start time changes); half a second of slack. */
static void
test_restart_hold_start_time(void)
{
	struct nw_health_rules r = default_rules();
	struct fx f;

	fx_init(&f, &r);
	g_assert_false(fx_start_time(&f, 1, 1000.0));
	g_assert_cmpfloat(f.h.start_time_s, ==, 1000.0);
	g_assert_false(fx_start_time(&f, 2, 1000.5));
	g_assert_false(fx_start_time(&f, 2.5, NAN)); /* not a start time */
	g_assert_cmpfloat(f.h.start_time_s, ==, 1000.5);
	assert_state(&f, NW_HEALTH_LIVE, NW_HEALTH_REASON_NONE);
	g_assert_true(fx_start_time(&f, 3, 1001.0625)); /* 0.5625 s later */
	assert_state(&f, NW_HEALTH_EJECTED, NW_HEALTH_REASON_RESTART);
	g_assert_cmpfloat(f.h.start_time_s, ==, 1001.0625);
	g_assert_cmpint(f.h.next_verify_ns, ==, S(3));
	g_assert_cmpuint(f.h.ejections, ==, 1);

	/* Restarting again while verifying: still verifying, for a restart. */
	f.h.reason = NW_HEALTH_REASON_PROBE_FAILURES;
	g_assert_true(fx_step(&f, NW_HEALTH_VERIFY_START, 4));
	g_assert_false(fx_start_time(&f, 4.5, 1010.0));
	assert_state(&f, NW_HEALTH_VERIFYING, NW_HEALTH_REASON_RESTART);

	/* Restarting while ejected for failures: the reason becomes restart,
	 * the backoff stands. */
	g_assert_true(fx_step(&f, NW_HEALTH_VERIFY_FAILED, 5));
	g_assert_cmpint(f.h.next_verify_ns, ==, S(7));
	g_assert_false(fx_start_time(&f, 6, 1020.0));
	assert_state(&f, NW_HEALTH_EJECTED, NW_HEALTH_REASON_RESTART);
	g_assert_cmpint(f.h.next_verify_ns, ==, S(7));
	g_assert_cmpfloat(f.h.start_time_s, ==, 1020.0);
	g_assert_cmpuint(f.h.ejections, ==, 1);
	nw_health_clear(&f.h);
}

/* Operator ejection (spec 5, 7.3 drains and holds): never readmitted
 * automatically; READMIT asks for verification now. */
static void
test_operator_eject_readmit(void)
{
	struct nw_health_rules r = default_rules();
	struct fx f;
	json_t *j;

	fx_init(&f, &r);
	g_assert_false(fx_step(&f, NW_HEALTH_READMIT, 0.5)); /* live: nothing to do */
	g_assert_true(fx_step(&f, NW_HEALTH_EJECT, 1));
	assert_state(&f, NW_HEALTH_EJECTED, NW_HEALTH_REASON_OPERATOR);
	g_assert_cmpuint(f.h.ejections, ==, 1);
	g_assert_false(nw_health_verify_due(&f.h, S(1e9)));
	g_assert_false(fx_step(&f, NW_HEALTH_VERIFY_START, 100));
	j = nw_health_to_json(&f.h, &f.rules, f.now);
	g_assert_true(json_is_null(json_object_get(j, "next_verify_in_s")));
	json_decref(j);
	/* A restart does not turn it into a health ejection. */
	fx_start_time(&f, 101, 5.0);
	fx_start_time(&f, 102, 50.0);
	assert_state(&f, NW_HEALTH_EJECTED, NW_HEALTH_REASON_OPERATOR);
	g_assert_false(fx_step(&f, NW_HEALTH_EJECT, 103));

	g_assert_false(fx_step(&f, NW_HEALTH_READMIT, 200));
	g_assert_true(nw_health_verify_due(&f.h, S(200)));
	g_assert_cmpint(f.h.next_verify_ns, ==, S(200));
	g_assert_true(fx_step(&f, NW_HEALTH_VERIFY_START, 200));
	/* Ejecting a verifying engine abandons the verification. */
	g_assert_true(fx_step(&f, NW_HEALTH_EJECT, 200.5));
	assert_state(&f, NW_HEALTH_EJECTED, NW_HEALTH_REASON_OPERATOR);
	g_assert_false(fx_step(&f, NW_HEALTH_VERIFY_OK, 200.6));
	assert_state(&f, NW_HEALTH_EJECTED, NW_HEALTH_REASON_OPERATOR);
	g_assert_cmpuint(f.h.ejections, ==, 1);

	/* READMIT after failed verifications starts the backoff over. */
	fx_step(&f, NW_HEALTH_READMIT, 300);
	fx_step(&f, NW_HEALTH_VERIFY_START, 300);
	fx_step(&f, NW_HEALTH_VERIFY_FAILED, 301);
	fx_step(&f, NW_HEALTH_VERIFY_START, 303);
	fx_step(&f, NW_HEALTH_VERIFY_FAILED, 304);
	g_assert_cmpuint(f.h.verify_failures, ==, 2);
	g_assert_false(fx_step(&f, NW_HEALTH_READMIT, 305));
	g_assert_cmpuint(f.h.verify_failures, ==, 0);
	g_assert_cmpint(f.h.next_verify_ns, ==, S(305));
	/* The operator changes their mind before verification starts. */
	g_assert_false(fx_step(&f, NW_HEALTH_EJECT, 305));
	g_assert_false(nw_health_verify_due(&f.h, S(1e9)));
	fx_step(&f, NW_HEALTH_READMIT, 306);
	fx_verify(&f, 306);
	g_assert_cmpuint(f.h.ejections, ==, 1);
	nw_health_clear(&f.h);
}

/* issue 10 / spec 5: drains and model mismatches hold an engine out
 * beside its health; they survive ejection and readmission. */
static void
test_holds(void)
{
	struct nw_health_rules r = default_rules();
	struct fx f;

	fx_init(&f, &r);
	g_assert_true(nw_health_set_hold(&f.h, NW_HOLD_DRAIN, true));
	g_assert_false(nw_health_set_hold(&f.h, NW_HOLD_DRAIN, true));
	g_assert_false(nw_health_available(&f.h, 0));
	g_assert_cmpint(f.h.state, ==, NW_HEALTH_LIVE);
	g_assert_true(nw_health_set_hold(&f.h, NW_HOLD_MODEL_MISMATCH, true));
	g_assert_true(nw_health_set_hold(&f.h, NW_HOLD_DRAIN, false));
	g_assert_false(nw_health_available(&f.h, 0));
	g_assert_true(nw_health_set_hold(&f.h, NW_HOLD_DRAIN, true));

	fx_step(&f, NW_HEALTH_EJECT, 1);
	fx_step(&f, NW_HEALTH_READMIT, 2);
	fx_verify(&f, 2);
	g_assert_cmpuint(f.h.holds, ==, NW_HOLD_DRAIN | NW_HOLD_MODEL_MISMATCH);
	g_assert_false(nw_health_available(&f.h, f.now));
	nw_health_set_hold(&f.h, NW_HOLD_DRAIN, false);
	g_assert_true(nw_health_set_hold(&f.h, NW_HOLD_MODEL_MISMATCH, false));
	g_assert_true(nw_health_available(&f.h, f.now));
	nw_health_clear(&f.h);
}

/* Events that do not apply in the current state change nothing. */
static void
test_invalid_transitions_ignored(void)
{
	static const nw_health_event_kind live_ignores[] = {
		NW_HEALTH_VERIFY_START, NW_HEALTH_VERIFY_OK, NW_HEALTH_VERIFY_FAILED,
		NW_HEALTH_READMIT,
	};
	struct nw_health_rules r = default_rules();
	struct nw_engine_health before;
	struct nw_health_event bogus = { .kind = (nw_health_event_kind)99 };
	struct fx f;

	fx_init(&f, &r);
	fx_step(&f, NW_HEALTH_PROBE_OK, 1);
	memcpy(&before, &f.h, sizeof(before));
	for (size_t i = 0; i < G_N_ELEMENTS(live_ignores); i++) {
		g_assert_false(fx_step(&f, live_ignores[i], 2));
		g_assert_true(memcmp(&before, &f.h, sizeof(before)) == 0);
	}
	g_assert_false(nw_health_step(&f.h, &f.rules, &bogus, S(2), "x"));
	g_assert_true(memcmp(&before, &f.h, sizeof(before)) == 0);

	/* Ejected: the legs' verdicts need a verification under way. */
	fx_step(&f, NW_HEALTH_EJECT, 3);
	memcpy(&before, &f.h, sizeof(before));
	g_assert_false(fx_step(&f, NW_HEALTH_VERIFY_OK, 4));
	g_assert_false(fx_step(&f, NW_HEALTH_VERIFY_FAILED, 4));
	g_assert_true(memcmp(&before, &f.h, sizeof(before)) == 0);
	nw_health_clear(&f.h);
}

/* last_error: the detail, cut at a character boundary to fit, valid
 * UTF-8 even when the engine's text was not; a default without one. */
static void
test_last_error(void)
{
	struct nw_health_rules r = default_rules();
	GString *e_acute = g_string_new(NULL);
	char *long_ascii = g_strnfill(300, 'x');
	struct fx f;

	r.passive_failures = 0;
	fx_init(&f, &r);
	fx_step_detail(&f, NW_HEALTH_LEG_FAILED, 1, long_ascii);
	g_assert_cmpuint(strlen(f.h.last_error), ==, sizeof(f.h.last_error) - 1);
	g_assert_true(strncmp(f.h.last_error, long_ascii, sizeof(f.h.last_error) - 1) == 0);

	for (int i = 0; i < 100; i++)
		g_string_append(e_acute, "\xc3\xa9"); /* é, two bytes */
	fx_step_detail(&f, NW_HEALTH_LEG_FAILED, 2, e_acute->str);
	g_assert_cmpuint(strlen(f.h.last_error), ==, 158); /* 79 whole characters */
	g_assert_true(g_utf8_validate(f.h.last_error, -1, NULL));

	fx_step_detail(&f, NW_HEALTH_LEG_FAILED, 3, "bad \xff byte");
	g_assert_true(g_utf8_validate(f.h.last_error, -1, NULL));
	g_assert_true(g_str_has_prefix(f.h.last_error, "bad "));
	g_assert_true(g_str_has_suffix(f.h.last_error, " byte"));

	fx_step(&f, NW_HEALTH_LEG_FAILED, 4);
	g_assert_cmpstr(f.h.last_error, ==, "leg failed");
	/* Success does not erase what the last failure was. */
	fx_step(&f, NW_HEALTH_LEG_OK, 5);
	g_assert_cmpstr(f.h.last_error, ==, "leg failed");
	g_string_free(e_acute, TRUE);
	g_free(long_ascii);
	nw_health_clear(&f.h);
}

static void
assert_json(json_t *j, const char *want)
{
	char *got = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);

	g_assert_cmpstr(got, ==, want);
	free(got);
	json_decref(j);
}

/* /narwhal/health's per-engine object: every key, its type and value. */
static void
test_json_shape(void)
{
	struct nw_health_rules r = default_rules();
	struct fx f;
	json_t *j;

	r.quarantine_s = 4;
	r.probe_failures = 1000;
	r.min_samples = 4;
	fx_init(&f, &r);
	assert_json(nw_health_to_json(&f.h, &f.rules, 0),
	            "{\"available\":true,\"ejections\":0,\"holds\":[],\"last_error\":null,"
	            "\"leg_failures\":0,\"next_verify_in_s\":null,\"probe_failures\":0,"
	            "\"quarantine_remaining_s\":0.0,\"reason\":null,\"state\":\"live\","
	            "\"verify_failures\":0,\"window\":{\"failure_share\":null,\"samples\":0}}");

	fx_step(&f, NW_HEALTH_PROBE_OK, 1);
	fx_step(&f, NW_HEALTH_PROBE_OK, 2);
	fx_step(&f, NW_HEALTH_PROBE_OK, 2.5);
	fx_step(&f, NW_HEALTH_PROBE_FAILED, 3);
	fx_step_detail(&f, NW_HEALTH_LEG_FAILED, 3, "connect refused");
	nw_health_set_hold(&f.h, NW_HOLD_MODEL_MISMATCH, true);
	nw_health_set_hold(&f.h, NW_HOLD_DRAIN, true);
	assert_json(nw_health_to_json(&f.h, &f.rules, S(4)),
	            "{\"available\":false,\"ejections\":0,"
	            "\"holds\":[\"drain\",\"model_mismatch\"],\"last_error\":\"connect refused\","
	            "\"leg_failures\":1,\"next_verify_in_s\":null,\"probe_failures\":1,"
	            "\"quarantine_remaining_s\":3.0,\"reason\":null,\"state\":\"live\","
	            "\"verify_failures\":0,\"window\":{\"failure_share\":0.25,\"samples\":4}}");

	nw_health_set_hold(&f.h, NW_HOLD_MODEL_MISMATCH, false);
	nw_health_set_hold(&f.h, NW_HOLD_DRAIN, false);
	fx_step(&f, NW_HEALTH_LEG_FAILED, 5);
	fx_step_detail(&f, NW_HEALTH_LEG_FAILED, 5, "reset by peer");
	assert_json(nw_health_to_json(&f.h, &f.rules, S(5.5)),
	            "{\"available\":false,\"ejections\":1,\"holds\":[],"
	            "\"last_error\":\"reset by peer\",\"leg_failures\":0,"
	            "\"next_verify_in_s\":0.5,\"probe_failures\":1,"
	            "\"quarantine_remaining_s\":3.5,\"reason\":\"leg_failures\","
	            "\"state\":\"ejected\",\"verify_failures\":0,"
	            "\"window\":{\"failure_share\":0.25,\"samples\":4}}");
	/* Due: 0, not negative. */
	j = nw_health_to_json(&f.h, &f.rules, S(8));
	g_assert_cmpfloat(json_real_value(json_object_get(j, "next_verify_in_s")), ==, 0.0);
	json_decref(j);
	nw_health_clear(&f.h);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/health/config/rules-from-config", test_rules_from_config);
	g_test_add_func("/health/issue-10/init", test_init);
	g_test_add_func("/health/issue-10/probe-failures-in-a-row", test_probe_failures_in_a_row);
	g_test_add_func("/health/issue-10/window-min-samples", test_window_min_samples);
	g_test_add_func("/health/issue-10/window-ratio", test_window_ratio);
	g_test_add_func("/health/issue-10/window-ages-out", test_window_ages_out);
	g_test_add_func("/health/issue-10/verification-clears-window",
	                test_verification_clears_window);
	g_test_add_func("/health/issue-10/refused-ejects-at-once", test_refused_ejects_at_once);
	g_test_add_func("/health/issue-10/stalled", test_stalled);
	g_test_add_func("/health/issue-10/passive-detection", test_passive_detection);
	g_test_add_func("/health/spec-6/failure-quarantine", test_quarantine);
	g_test_add_func("/health/spec-6/failure-quarantine-off", test_quarantine_off);
	g_test_add_func("/health/spec-6/breaker-verification", test_breaker_verification);
	g_test_add_func("/health/issue-10/backoff-grows-and-is-capped",
	                test_backoff_grows_and_is_capped);
	g_test_add_func("/health/issue-10/restart-hold-answers-after-failing",
	                test_restart_hold_answers_after_failing);
	g_test_add_func("/health/issue-10/restart-hold-start-time", test_restart_hold_start_time);
	g_test_add_func("/health/spec-5/operator-eject-readmit", test_operator_eject_readmit);
	g_test_add_func("/health/spec-5/holds", test_holds);
	g_test_add_func("/health/issue-10/invalid-transitions-ignored",
	                test_invalid_transitions_ignored);
	g_test_add_func("/health/issue-10/last-error", test_last_error);
	g_test_add_func("/health/issue-10/json-shape", test_json_shape);
	return g_test_run();
}
