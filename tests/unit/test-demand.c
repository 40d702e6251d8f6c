/*
 * The demand ledger (src/core/demand.c) on a fake clock: every time is
 * given, so each case is a script of events and the readings expected at
 * given times. Each test names the clause it defends: issue 12, "Demand
 * accounting in core" (the role-control document's demand contract), spec
 * 4.2 (unsized offers at the ceiling), spec 5 (unserved placements), spec
 * 7.6 (short and long demand estimates, refused offers as demand, the
 * arrival-evidence window) and spec 7.7 (the windows' fields).
 */
#include "build-config.h"

#include <math.h>
#include <string.h>

#include <glib.h>

#include "core/demand.h"

#define S(x) ((int64_t)llround((x) * 1e9))

/* controller.reactive's defaults: a 120 s long horizon (1 s buckets), a
 * 60 s short one (0.5 s buckets), evidence after 60 s and 10 arrivals, or
 * 120 s. */
static const struct nw_demand_windows defaults = {
	.long_s = 120, .short_s = 60, .evidence_span_s = 60, .evidence_max_span_s = 120,
	.evidence_min_arrivals = 10,
};

/* --- scripted events ----------------------------------------------------- */

typedef enum {
	EV_END_OF_SCRIPT,
	EV_OFFER,      /* a sized offer: tokens, max */
	EV_UNSIZED,    /* an unsized offer refused at the ceiling */
	EV_REFUSED,    /* a sized offer the admission plugin refuses */
	EV_COMPLETE,   /* a sized offer admitted at once that completes at t: tokens out */
} ev_kind;

struct event {
	double t;
	ev_kind kind;
	uint64_t tokens;
	uint32_t max;
};

struct reading {
	double t;
	nw_demand_horizon h;
	uint64_t arrivals, unsized, prompt_tokens, output_requested, output_delivered;
	double covered_s;
	double arrivals_per_s;
};

struct estimate_case {
	const char *name;
	const struct event *events;
	const struct reading *readings;
};

static void
play(struct nw_demand *d, const struct event *ev)
{
	for (; ev->kind != EV_END_OF_SCRIPT; ev++) {
		struct nw_demand_ticket t = { 0 };

		switch (ev->kind) {
		case EV_OFFER:
			nw_demand_offer(d, &t, S(ev->t), ev->tokens, true, ev->max);
			break;
		case EV_UNSIZED:
			nw_demand_refuse_unsized(d, S(ev->t), NW_DEMAND_REFUSED_CEILING);
			break;
		case EV_REFUSED:
			nw_demand_offer(d, &t, S(ev->t), ev->tokens, true, ev->max);
			nw_demand_refuse(d, &t, NW_DEMAND_REFUSED_ADMISSION);
			break;
		case EV_COMPLETE:
			nw_demand_offer(d, &t, S(ev->t), 0, true, 0);
			nw_demand_admit(d, &t);
			nw_demand_end(d, &t, S(ev->t), true, (int64_t)ev->tokens);
			break;
		default:
			g_assert_not_reached();
		}
	}
}

static void
check_readings(const struct nw_demand *d, const struct reading *r, const char *name)
{
	for (; r->t >= 0; r++) {
		struct nw_demand_estimate e;

		nw_demand_estimate(d, S(r->t), r->h, &e);
		g_test_message("%s at %g s (%s): arrivals %" G_GUINT64_FORMAT ", covered %g s", name,
		               r->t, r->h == NW_DEMAND_SHORT ? "short" : "long", e.arrivals,
		               e.covered_s);
		g_assert_cmpuint(e.arrivals, ==, r->arrivals);
		g_assert_cmpuint(e.unsized, ==, r->unsized);
		g_assert_cmpuint(e.prompt_tokens, ==, r->prompt_tokens);
		g_assert_cmpuint(e.output_requested, ==, r->output_requested);
		g_assert_cmpuint(e.output_delivered, ==, r->output_delivered);
		g_assert_cmpfloat_with_epsilon(e.covered_s, r->covered_s, 1e-9);
		g_assert_cmpfloat_with_epsilon(e.arrivals_per_s, r->arrivals_per_s, 1e-9);
		g_assert_cmpfloat_with_epsilon(e.prompt_tokens_per_s,
		                               (double)r->prompt_tokens / r->covered_s, 1e-9);
		g_assert_cmpfloat_with_epsilon(e.output_delivered_per_s,
		                               (double)r->output_delivered / r->covered_s, 1e-9);
		g_assert_cmpfloat(e.horizon_s, ==, r->h == NW_DEMAND_SHORT ? 60 : 120);
		g_assert_cmpfloat(e.bucket_s, ==, r->h == NW_DEMAND_SHORT ? 0.5 : 1);
	}
}

#define END { 0, EV_END_OF_SCRIPT, 0, 0 }
#define NO_MORE { -1, 0, 0, 0, 0, 0, 0, 0, 0 }

/* Bucket expiry: an arrival leaves the long horizon with its 1 s bucket
 * 120 s on, the short one with its 0.5 s bucket 60 s on; a horizon's
 * figures cover its whole buckets and the newest one begun, so covered_s
 * runs from the oldest one's start. */
static const struct event expiry_events[] = {
	{ 0.5, EV_OFFER, 100, 10 }, { 30.5, EV_OFFER, 200, 20 }, { 90.5, EV_OFFER, 400, 40 }, END,
};
static const struct reading expiry_readings[] = {
	/* t, horizon, arrivals, unsized, prompt, requested, delivered, covered, rate */
	{ 100.5, NW_DEMAND_LONG, 3, 0, 700, 70, 0, 100.5, 3 / 100.5 },
	{ 100.5, NW_DEMAND_SHORT, 1, 0, 400, 40, 0, 59.5, 1 / 59.5 },
	/* At 120.5 the long horizon's buckets are 1..120: bucket 0 (0.5 s) is out. */
	{ 120.5, NW_DEMAND_LONG, 2, 0, 600, 60, 0, 119.5, 2 / 119.5 },
	{ 150.5, NW_DEMAND_LONG, 1, 0, 400, 40, 0, 119.5, 1 / 119.5 },
	{ 150.5, NW_DEMAND_SHORT, 0, 0, 0, 0, 0, 59.5, 0 },
	{ 300, NW_DEMAND_LONG, 0, 0, 0, 0, 0, 119, 0 },
	NO_MORE,
};

/* Short against long: a steady 1/s for two minutes then 3/s for one. The
 * short horizon sees the rise at once; the long one averages it. */
static struct event rise_events[180 + 60 * 2 + 1];
static const struct reading rise_readings[] = {
	/* Buckets 61..180 of the long horizon: 59 at 1/s, 180 at 3/s. */
	{ 180.5, NW_DEMAND_LONG, 59 + 180, 0, 59 + 180, 0, 0, 119.5, 239 / 119.5 },
	/* The short one from 121.0 s: 59 whole seconds at 3/s. */
	{ 180.5, NW_DEMAND_SHORT, 177, 0, 177, 0, 0, 59.5, 177 / 59.5 },
	NO_MORE,
};

/* Spec 7.6: refused offers count toward offered demand; spec 4.2: an
 * unsized offer is an arrival whose work is unknown (no tokens). */
static const struct event refused_events[] = {
	{ 1.5, EV_OFFER, 100, 16 }, { 2.5, EV_REFUSED, 300, 32 }, { 3.5, EV_UNSIZED, 0, 0 },
	{ 3.7, EV_UNSIZED, 0, 0 }, END,
};
static const struct reading refused_readings[] = {
	{ 10.5, NW_DEMAND_LONG, 4, 2, 400, 48, 0, 10.5, 4 / 10.5 },
	{ 10.5, NW_DEMAND_SHORT, 4, 2, 400, 48, 0, 10.5, 4 / 10.5 },
	NO_MORE,
};

/* Delivered output tokens enter at completion. A just-started ledger
 * rates over one bucket at least. */
static const struct event delivered_events[] = {
	{ 0.2, EV_COMPLETE, 64, 0 }, { 5.5, EV_COMPLETE, 36, 0 }, END,
};
static const struct reading delivered_readings[] = {
	{ 0.4, NW_DEMAND_LONG, 1, 0, 0, 0, 64, 1, 1 },
	{ 6.5, NW_DEMAND_LONG, 2, 0, 0, 0, 100, 6.5, 2 / 6.5 },
	NO_MORE,
};

/* Out of order: an arrival stamped before the newest bucket (its
 * request's arrival, recorded once sized) still lands in its own bucket;
 * one older than the horizon counts only in the totals. */
static const struct event late_events[] = {
	{ 200.5, EV_OFFER, 10, 0 }, { 199.5, EV_OFFER, 10, 0 }, { 40.5, EV_OFFER, 10, 0 }, END,
};
static const struct reading late_readings[] = {
	{ 200.6, NW_DEMAND_SHORT, 2, 0, 20, 0, 0, 59.6, 2 / 59.6 },
	{ 200.6, NW_DEMAND_LONG, 2, 0, 20, 0, 0, 119.6, 2 / 119.6 },
	{ 260.6, NW_DEMAND_SHORT, 0, 0, 0, 0, 0, 59.6, 0 },
	NO_MORE,
};

static const struct estimate_case estimate_cases[] = {
	{ "bucket expiry", expiry_events, expiry_readings },
	{ "short against long", rise_events, rise_readings },
	{ "refused and unsized offers", refused_events, refused_readings },
	{ "delivered tokens", delivered_events, delivered_readings },
	{ "late arrivals", late_events, late_readings },
};

static void
test_estimates(void)
{
	size_t n = 0;

	for (int i = 0; i < 180; i++)
		rise_events[n++] = (struct event){ i + 0.5, EV_OFFER, 1, 0 };
	for (int i = 0; i < 60; i++) {
		rise_events[n++] = (struct event){ 120 + i + 0.25, EV_OFFER, 1, 0 };
		rise_events[n++] = (struct event){ 120 + i + 0.75, EV_OFFER, 1, 0 };
	}
	rise_events[n] = (struct event)END;
	for (size_t c = 0; c < G_N_ELEMENTS(estimate_cases); c++) {
		struct nw_demand *d = nw_demand_new(&defaults, 0);

		play(d, estimate_cases[c].events);
		check_readings(d, estimate_cases[c].readings, estimate_cases[c].name);
		nw_demand_free(d);
	}
}

/* docs/controller.md, "How a split is priced" (beyond the spec): the
 * arrivals' index of dispersion over a horizon's whole buckets, variance
 * over mean of their counts: 0 for arrivals one a bucket, N (1 - 1/m) for
 * N arrivals in one of m buckets, about 1 for Poisson arrivals;
 * the bucket still filling is left out; NaN before two whole buckets or
 * without an arrival in them. */
static void
test_dispersion(void)
{
	struct nw_demand_estimate e;
	struct nw_demand *d = nw_demand_new(&defaults, 0);
	GRand *rng = g_rand_new_with_seed(7);
	double at = 0;

	nw_demand_estimate(d, S(0.5), NW_DEMAND_LONG, &e);
	g_assert_true(isnan(e.dispersion));
	/* One arrival in the middle of each of the first 120 seconds. */
	for (int i = 0; i < 120; i++)
		nw_demand_offer(d, &(struct nw_demand_ticket){ 0 }, S(i + 0.5), 10, true, 1);
	nw_demand_estimate(d, S(1.5), NW_DEMAND_LONG, &e);
	g_assert_true(isnan(e.dispersion)); /* one whole bucket */
	nw_demand_estimate(d, S(120.5), NW_DEMAND_LONG, &e);
	g_assert_cmpfloat_with_epsilon(e.dispersion, 0, 1e-12);
	nw_demand_free(d);

	/* 240 arrivals in one second, the horizon's first: 119 whole buckets
	 * at 121 s, one holding them all. */
	d = nw_demand_new(&defaults, 0);
	for (int i = 0; i < 240; i++)
		nw_demand_offer(d, &(struct nw_demand_ticket){ 0 }, S(2 + i / 1000.0), 10, true, 1);
	nw_demand_estimate(d, S(121), NW_DEMAND_LONG, &e);
	g_assert_cmpfloat_with_epsilon(e.dispersion, 240 * (1 - 1 / 119.0), 1e-9);
	/* The burst seen from its own bucket, still filling: unmeasured. */
	nw_demand_estimate(d, S(2.5), NW_DEMAND_LONG, &e);
	g_assert_true(isnan(e.dispersion));
	nw_demand_free(d);

	/* Poisson arrivals at 20 a second: about 1. */
	d = nw_demand_new(&defaults, 0);
	while ((at += -log(1 - g_rand_double(rng)) / 20) < 600)
		nw_demand_offer(d, &(struct nw_demand_ticket){ 0 }, S(at), 10, true, 1);
	nw_demand_estimate(d, S(600), NW_DEMAND_LONG, &e);
	g_assert_cmpfloat(e.dispersion, >, 0.7);
	g_assert_cmpfloat(e.dispersion, <, 1.3);
	nw_demand_free(d);
	g_rand_free(rng);
}

/* Spec 4.2 and 7.6: the totals since start count every offer (sized or
 * unsized), refusals by reason, queueing, admissions, withdrawals and
 * completions, each offer's end once whichever path reports it. */
static void
test_totals(void)
{
	struct nw_demand *d = nw_demand_new(&defaults, 0);
	const struct nw_demand_totals *tot = nw_demand_totals(d);
	struct nw_demand_ticket a = { 0 }, b = { 0 }, c = { 0 }, w = { 0 }, never = { 0 };

	nw_demand_offer(d, &a, S(1), 100, true, 10);
	nw_demand_offer(d, &a, S(1), 100, true, 10); /* once only */
	nw_demand_queue(d, &a);
	nw_demand_admit(d, &a);
	nw_demand_admit(d, &a);                      /* once only */
	nw_demand_refuse(d, &a, NW_DEMAND_REFUSED_QUEUE_TIMEOUT); /* admitted: not refused */
	nw_demand_end(d, &a, S(2), true, 9);
	nw_demand_end(d, &a, S(2), true, 9);         /* once only */

	nw_demand_offer(d, &b, S(1), 50, false, 0);  /* estimated size, no max_tokens */
	nw_demand_queue(d, &b);
	nw_demand_refuse(d, &b, NW_DEMAND_REFUSED_QUEUE_TIMEOUT);
	nw_demand_admit(d, &b);                      /* refused: stays refused */
	nw_demand_end(d, &b, S(3), false, -1);

	nw_demand_offer(d, &c, S(1), 10, true, 5);
	nw_demand_admit(d, &c);
	nw_demand_end(d, &c, S(4), false, -1);       /* failed, output unknown */

	nw_demand_offer(d, &w, S(1), 10, true, 5);
	nw_demand_queue(d, &w);
	nw_demand_end(d, &w, S(5), false, -1);       /* the client left while queued */

	nw_demand_end(d, &never, S(5), false, -1);   /* never offered: nothing */
	nw_demand_refuse_unsized(d, S(6), NW_DEMAND_REFUSED_CEILING);

	g_assert_cmpuint(tot->offers_sized, ==, 4);
	g_assert_cmpuint(tot->offers_unsized, ==, 1);
	g_assert_cmpuint(tot->offers_estimated, ==, 1);
	g_assert_cmpuint(tot->offers_unbounded, ==, 1);
	g_assert_cmpuint(tot->prompt_tokens, ==, 170);
	g_assert_cmpuint(tot->output_requested, ==, 20);
	g_assert_cmpuint(tot->queued, ==, 3);
	g_assert_cmpuint(tot->admitted, ==, 2);
	g_assert_cmpuint(tot->refused[NW_DEMAND_REFUSED_QUEUE_TIMEOUT], ==, 1);
	g_assert_cmpuint(tot->refused[NW_DEMAND_REFUSED_CEILING], ==, 1);
	g_assert_cmpuint(tot->refused[NW_DEMAND_REFUSED_ADMISSION], ==, 0);
	g_assert_cmpuint(tot->withdrawn, ==, 1);
	g_assert_cmpuint(tot->completed_ok, ==, 1);
	g_assert_cmpuint(tot->completed_failed, ==, 1);
	g_assert_cmpuint(tot->output_delivered, ==, 9);
	/* Every offer ended one way: admitted, refused or withdrawn. */
	g_assert_cmpuint(tot->offers_sized + tot->offers_unsized, ==,
	                 tot->admitted + tot->refused[NW_DEMAND_REFUSED_QUEUE_TIMEOUT] +
	                 tot->refused[NW_DEMAND_REFUSED_CEILING] + tot->withdrawn);
	for (int i = 0; i < NW_DEMAND_REFUSALS; i++)
		g_assert_nonnull(nw_demand_refusal_names[i]);
	nw_demand_free(d);
}

/* --- the evidence window (spec 7.6) ------------------------------------- */

struct evidence_check {
	double t;
	bool closed;
	const char *closed_by;
	double closed_after_s;   /* when closed */
	uint64_t arrivals;
};

struct evidence_case {
	const char *name;
	double arrivals[8];      /* arrival times; a negative one ends them */
	struct evidence_check checks[4];
};

/* evidence_span_s 10, evidence_max_span_s 30, evidence_min_arrivals 3. */
static const struct evidence_case evidence_cases[] = {
	{ "span and arrivals: closes when the span has passed",
	  { 1, 2, 3, -1 },
	  { { 9.9, false, NULL, 0, 3 }, { 10, true, "span_and_arrivals", 10, 3 },
	    { 50, true, "span_and_arrivals", 10, 3 }, { -1 } } },
	{ "span and arrivals: closes at the arrival that makes the count",
	  { 1, 2, 15, 16, -1 },
	  { { 14.9, false, NULL, 0, 2 }, { 15, true, "span_and_arrivals", 15, 3 },
	    { 20, true, "span_and_arrivals", 15, 4 }, { -1 } } },
	{ "sparse traffic: closes at the maximum span",
	  { 1, 2, -1 },
	  { { 29.9, false, NULL, 0, 2 }, { 30, true, "max_span", 30, 2 }, { -1 } } },
	{ "no traffic at all: closes at the maximum span",
	  { -1 },
	  { { 10, false, NULL, 0, 0 }, { 30, true, "max_span", 30, 0 }, { -1 } } },
	{ "the count is made only after the maximum span",
	  { 1, 29, 31, -1 },
	  { { 31, true, "max_span", 30, 3 }, { -1 } } },
};

static const struct nw_demand_windows evidence_windows = {
	.long_s = 120, .short_s = 10, .evidence_span_s = 10, .evidence_max_span_s = 30,
	.evidence_min_arrivals = 3,
};

static void
test_evidence(void)
{
	for (size_t c = 0; c < G_N_ELEMENTS(evidence_cases); c++) {
		const struct evidence_case *ec = &evidence_cases[c];
		struct nw_demand *d = nw_demand_new(&evidence_windows, 0);
		size_t next = 0;

		g_test_message("%s", ec->name);
		for (const struct evidence_check *k = ec->checks; k->t >= 0; k++) {
			struct nw_demand_evidence ev;

			for (; ec->arrivals[next] >= 0 && ec->arrivals[next] <= k->t; next++) {
				struct nw_demand_ticket t = { 0 };

				nw_demand_offer(d, &t, S(ec->arrivals[next]), 1, true, 1);
			}
			nw_demand_evidence(d, S(k->t), &ev);
			g_assert_cmpint(ev.closed, ==, k->closed);
			g_assert_cmpstr(ev.closed_by, ==, k->closed_by);
			g_assert_cmpuint(ev.arrivals, ==, k->arrivals);
			g_assert_cmpfloat_with_epsilon(ev.span_s, k->t, 1e-9);
			if (k->closed)
				g_assert_cmpfloat_with_epsilon(ev.closed_after_s, k->closed_after_s, 1e-9);
			else
				g_assert_true(isnan(ev.closed_after_s));
			g_assert_cmpuint(ev.resets, ==, 0);
			g_assert_null(ev.last_reset);
		}
		nw_demand_free(d);
	}
}

/* Spec 7.6: a reset (a first-token timeout, a recovery move) opens the
 * window again: the arrivals before it count no more, the span starts
 * from it, and it closes again by the same rules. Unsized offers are
 * arrivals too. */
static void
test_evidence_reset(void)
{
	struct nw_demand *d = nw_demand_new(&evidence_windows, 0);
	struct nw_demand_evidence ev;

	for (int i = 1; i <= 3; i++)
		nw_demand_refuse_unsized(d, S(i), NW_DEMAND_REFUSED_CEILING);
	nw_demand_evidence(d, S(12), &ev);
	g_assert_true(ev.closed);
	nw_demand_evidence_reset(d, S(40), "first_token_timeout");
	nw_demand_evidence(d, S(41), &ev);
	g_assert_false(ev.closed);
	g_assert_null(ev.closed_by);
	g_assert_cmpuint(ev.arrivals, ==, 0);
	g_assert_cmpfloat_with_epsilon(ev.span_s, 1, 1e-9);
	g_assert_cmpuint(ev.resets, ==, 1);
	g_assert_cmpstr(ev.last_reset, ==, "first_token_timeout");
	/* An arrival stamped before the reset is not evidence of after it. */
	{
		struct nw_demand_ticket t = { 0 };

		nw_demand_offer(d, &t, S(39), 1, true, 1);
	}
	for (int i = 0; i < 3; i++) {
		struct nw_demand_ticket t = { 0 };

		nw_demand_offer(d, &t, S(42 + i), 1, true, 1);
	}
	nw_demand_evidence(d, S(49.9), &ev);
	g_assert_false(ev.closed);
	g_assert_cmpuint(ev.arrivals, ==, 3);
	nw_demand_evidence(d, S(50), &ev);
	g_assert_true(ev.closed);
	g_assert_cmpstr(ev.closed_by, ==, "span_and_arrivals");
	g_assert_cmpfloat_with_epsilon(ev.closed_after_s, 10, 1e-9);
	/* The totals are not the window's: they keep everything. */
	g_assert_cmpuint(nw_demand_totals(d)->offers_sized, ==, 4);
	g_assert_cmpuint(nw_demand_totals(d)->offers_unsized, ==, 3);
	nw_demand_free(d);
}

/* Spec 7.7, a reload: a horizon whose length changes starts again (the
 * other goes on, the totals stay); new evidence rules reopen the window.
 * Each horizon has buckets of its own: a short horizon far below the long
 * one's bucket is still exact. */
static void
test_configure(void)
{
	struct nw_demand *d = nw_demand_new(&defaults, 0);
	struct nw_demand_windows w = defaults;
	struct nw_demand_estimate e;
	struct nw_demand_evidence ev;

	for (int i = 0; i < 100; i++) {
		struct nw_demand_ticket t = { 0 };

		nw_demand_offer(d, &t, S(i + 0.5), 1, true, 1);
	}
	w.short_s = 30;
	w.evidence_span_s = 30;
	nw_demand_configure(d, &w, S(100));
	nw_demand_estimate(d, S(100.5), NW_DEMAND_SHORT, &e);
	g_assert_cmpfloat(e.horizon_s, ==, 30);
	g_assert_cmpuint(e.arrivals, ==, 0);
	nw_demand_evidence(d, S(100.5), &ev);
	g_assert_cmpuint(ev.resets, ==, 1);
	g_assert_cmpstr(ev.last_reset, ==, "reconfigured");
	g_assert_cmpuint(ev.arrivals, ==, 0);
	/* The same windows again: nothing moves. */
	nw_demand_configure(d, &w, S(100.6));
	nw_demand_evidence(d, S(100.7), &ev);
	g_assert_cmpuint(ev.resets, ==, 1);
	{
		struct nw_demand_ticket t = { 0 };

		nw_demand_offer(d, &t, S(100.8), 1, true, 1);
	}
	nw_demand_estimate(d, S(101), NW_DEMAND_SHORT, &e);
	g_assert_cmpuint(e.arrivals, ==, 1);
	g_assert_cmpfloat_with_epsilon(e.covered_s, 1, 1e-9);
	nw_demand_estimate(d, S(101), NW_DEMAND_LONG, &e);
	g_assert_cmpuint(e.arrivals, ==, 101);

	w.long_s = 240;
	nw_demand_configure(d, &w, S(101));
	nw_demand_estimate(d, S(101.5), NW_DEMAND_LONG, &e);
	g_assert_cmpuint(e.arrivals, ==, 0);
	g_assert_cmpfloat(e.horizon_s, ==, 240);
	g_assert_cmpfloat(e.bucket_s, ==, 2);
	nw_demand_estimate(d, S(101.5), NW_DEMAND_SHORT, &e);
	g_assert_cmpfloat(e.horizon_s, ==, 30);
	g_assert_cmpuint(e.arrivals, ==, 1);
	g_assert_cmpuint(nw_demand_totals(d)->offers_sized, ==, 101);

	/* Half a second against a 120 s window (spec 7.7 allows it). */
	w = defaults;
	w.short_s = 0.5;
	nw_demand_configure(d, &w, S(200));
	nw_demand_estimate(d, S(200.2), NW_DEMAND_SHORT, &e);
	/* Whole nanoseconds a bucket: within 120 ns. */
	g_assert_cmpfloat_with_epsilon(e.horizon_s, 0.5, 1.2e-7);
	g_assert_cmpfloat_with_epsilon(e.bucket_s, 0.5 / NW_DEMAND_BUCKETS, 1e-9);
	nw_demand_free(d);
}

/* --- decisions ------------------------------------------------------------ */

/* Issue 12, "what each admission and placement decision was priced on":
 * the ring keeps the last NW_DEMAND_DECISIONS, oldest first, with what the
 * plugins returned; reasons are truncated, never overrun, and kept to
 * printable ASCII (they reach JSON). */
static void
test_decision_ring(void)
{
	struct nw_demand *d = nw_demand_new(&defaults, 0);
	const struct nw_demand_decision *rec;
	const char *long_reason = "a-reason-far-longer-than-the-thirty-one-bytes-kept";

	for (int i = 0; i < 100; i++) {
		char id[16];
		struct narwhal_admission_decision dec = {
			.struct_size = sizeof dec, .verdict = NARWHAL_REFUSE, .retry_after_s = i,
			.projected_ttft_s = 0.25 * i,
			.reason = i == 99 ? long_reason : i == 98 ? "bad\tbyte\xc3" : "backlog",
		};

		g_snprintf(id, sizeof id, "req-%d", i);
		nw_demand_note_admission(d, S(i), id, 1000 + (uint64_t)i, i % 2 == 0, 1.5, &dec);
	}
	g_assert_cmpuint(nw_demand_decision_count(d), ==, NW_DEMAND_DECISIONS);
	g_assert_cmpuint(nw_demand_totals(d)->decisions, ==, 100);
	rec = nw_demand_decision_at(d, 0);
	g_assert_cmpstr(rec->request_id, ==, "req-36");
	g_assert_cmpint(rec->at_ns, ==, S(36));
	g_assert_cmpuint(rec->prompt_tokens, ==, 1036);
	g_assert_true(rec->prompt_tokens_exact);
	g_assert_cmpfloat(rec->budget_s, ==, 1.5);
	g_assert_cmpfloat(rec->retry_after_s, ==, 36);
	g_assert_cmpfloat(rec->projected_ttft_s, ==, 9);
	g_assert_cmpuint(rec->verdict, ==, NARWHAL_REFUSE);
	g_assert_cmpstr(rec->reason, ==, "backlog");
	g_assert_true(isnan(rec->cost));
	rec = nw_demand_decision_at(d, NW_DEMAND_DECISIONS - 2);
	g_assert_cmpstr(rec->reason, ==, "bad?byte?");
	rec = nw_demand_decision_at(d, NW_DEMAND_DECISIONS - 1);
	g_assert_cmpstr(rec->request_id, ==, "req-99");
	g_assert_cmpuint(strlen(rec->reason), ==, NW_DEMAND_REASON_MAX);
	g_assert_true(g_str_has_prefix(long_reason, rec->reason));
	g_assert_false(rec->prompt_tokens_exact);
	nw_demand_free(d);
}

/* Spec 5: an unserved placement is counted by phase when the request goes
 * to the engine chosen; a choice priced for a request that waits for a
 * slot is kept as a record but counts no placement. */
static void
test_unserved(void)
{
	struct nw_demand *d = nw_demand_new(&defaults, 0);
	const struct nw_demand_totals *tot = nw_demand_totals(d);
	const struct {
		narwhal_phase phase;
		bool binding, unserved;
	} placed[] = {
		{ NARWHAL_PHASE_PREFILL, true, false },
		{ NARWHAL_PHASE_PREFILL, true, true },
		{ NARWHAL_PHASE_PREFILL, false, true },
		{ NARWHAL_PHASE_DECODE, true, true },
		{ NARWHAL_PHASE_DECODE, true, true },
		{ NARWHAL_PHASE_AGGREGATE, true, false },
	};
	const struct nw_demand_decision *rec;
	g_autofree char *id = g_strdup("engine-7");

	for (size_t i = 0; i < G_N_ELEMENTS(placed); i++) {
		struct narwhal_placement_result res = {
			.struct_size = sizeof res, .engine = 7, .cost = 2.5 + (double)i,
			.projected_slo_ratio = 0.5, .unserved = placed[i].unserved,
		};

		nw_demand_note_placement(d, S(i), "r", placed[i].phase, 300, true, id,
		                         placed[i].binding, &res);
	}
	g_assert_cmpuint(tot->placements[0], ==, 2);
	g_assert_cmpuint(tot->unserved[0], ==, 1);
	g_assert_cmpuint(tot->placements[1], ==, 2);
	g_assert_cmpuint(tot->unserved[1], ==, 2);
	g_assert_cmpuint(tot->placements[2], ==, 1);
	g_assert_cmpuint(tot->unserved[2], ==, 0);
	rec = nw_demand_decision_at(d, 2);
	g_assert_cmpint(rec->kind, ==, NW_DECISION_PLACEMENT);
	g_assert_false(rec->binding);
	g_assert_true(rec->unserved);
	g_assert_cmpfloat(rec->cost, ==, 4.5);
	g_assert_cmpfloat(rec->projected_slo_ratio, ==, 0.5);
	g_assert_true(isnan(rec->projected_ttft_s));
	/* The engine's id outlives the configuration that named it. */
	id[0] = 'X';
	g_assert_cmpstr(rec->engine, ==, "engine-7");
	nw_demand_free(d);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/demand/issue-12/estimates", test_estimates);
	g_test_add_func("/demand/issue-12/totals", test_totals);
	g_test_add_func("/demand/issue-13/dispersion", test_dispersion);
	g_test_add_func("/demand/spec-7.6/evidence-window", test_evidence);
	g_test_add_func("/demand/spec-7.6/evidence-reset", test_evidence_reset);
	g_test_add_func("/demand/spec-7.7/reconfigure", test_configure);
	g_test_add_func("/demand/issue-12/decision-ring", test_decision_ring);
	g_test_add_func("/demand/spec-5/unserved", test_unserved);
	return g_test_run();
}
