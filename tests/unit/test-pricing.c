/* The pricing ledger and its estimators (src/core/pricing.h; issue 12,
 * "The estimators in core"; the role-control document's "Prefill queue
 * projections" and "Aggregate fallback from an idle decode engine"; spec
 * 4.1, 7.1, 7.7; plugin-abi.h, prefill_queue_seconds). Every clock is a
 * fake one: the tests pass now_ns. */
#include "build-config.h"

#include <math.h>
#include <string.h>

#include <glib.h>

#include "core/config.h"
#include "core/host.h"
#include "core/pricing.h"

#define MS 1000000LL /* nanoseconds */
#define T0 (1000 * MS)

/* prefill_s = 0.01 + 1e-4 * L over 10..4096 tokens; interval_s = 0.02 +
 * 1e-6 * T + 0.001 * B over 1..64 requests and 0..100000 KV tokens. */
static struct nw_engine_profile
profile(void)
{
	struct nw_engine_profile p = { 0 };

	p.prefill = (struct nw_prefill_profile){ .a_s = 0.01, .b_s = 1e-4, .c_s = 0,
		                                     .min_tokens = 10, .max_tokens = 4096,
		                                     .samples = 10 };
	p.decode = (struct nw_decode_profile){ .d0_s = 0.02, .d1_s = 1e-6, .d2_s = 0.001,
		                                   .min_active = 1, .max_active = 64,
		                                   .min_kv_tokens = 0, .max_kv_tokens = 100000,
		                                   .samples = 10 };
	return p;
}

/* What a prompt of L tokens charges the ledger on profile(): b*L and its
 * share L / 4096 (the longest prompt measured) of a step's fixed cost a
 * (nw_pricing_work_ns), for L up to 4096. */
#define CHARGE(l) (0.01 * (double)(l) / 4096.0 + 1e-4 * (double)(l))

/* prefill seconds of L tokens on profile(): its own step, a included */
static double
work(uint64_t l)
{
	return 0.01 + 1e-4 * (double)l;
}

struct env {
	struct nw_config *cfg;
	struct nw_fleet *f;
	struct nw_engine_profile prof[4];
};

/* Engines p0, p1 (prefill) and d0 (decode), each with profile() unless
 * profiled is false; the settings of spec 7.7 and the SLOs as given. */
static void
env_init(struct env *e, const char *settings, bool profiled)
{
	g_autofree char *text = g_strdup_printf(
		"{\"serving\": {\"admission\": \"open\"}, \"controller\": {\"policy\": \"static\"%s%s},"
		" \"slo\": {\"ttft_s\": 2.0, \"tpot_s\": 0.1},"
		" \"fleet\": {\"engines\": [{\"id\": \"p0\", \"url\": \"http://127.0.0.1:1\", \"role\": \"prefill\"},"
		" {\"id\": \"p1\", \"url\": \"http://127.0.0.1:2\", \"role\": \"prefill\"},"
		" {\"id\": \"d0\", \"url\": \"http://127.0.0.1:3\", \"role\": \"decode\"}]}}",
		settings ? ", " : "", settings ? settings : "");
	GPtrArray *problems = NULL;

	e->cfg = nw_config_load_string(text, "test.json", &problems);
	if (e->cfg == NULL)
		g_error("config: %s", (char *)g_ptr_array_index(problems, 0));
	g_ptr_array_unref(problems);
	e->f = nw_fleet_new(e->cfg, 0);
	for (uint32_t i = 0; i < 3; i++) {
		e->prof[i] = profile();
		if (profiled)
			nw_fleet_set_profile(e->f, i, &e->prof[i]);
	}
}

static void
env_clear(struct env *e)
{
	nw_fleet_free(e->f);
	nw_config_free(e->cfg);
}

/* Every amount of the ledger is zero. */
static void
assert_ledger_zero(const struct nw_fleet *f)
{
	g_assert_cmpint(f->pricing.pending_ns, ==, 0);
	g_assert_cmpuint(f->pricing.pending, ==, 0);
	for (uint32_t i = 0; i < f->view.n_engines; i++) {
		const struct nw_engine_ledger *l = &f->ledger[i];

		g_assert_cmpint(l->resident_prefill_ns, ==, 0);
		g_assert_cmpint(l->queued_prefill_ns, ==, 0);
		g_assert_cmpuint(l->prefill_holds, ==, 0);
		g_assert_cmpuint(l->reserved_output_tokens, ==, 0);
		g_assert_cmpuint(f->engines[i].resident_kv_tokens, ==, 0);
		g_assert_cmpuint(f->engines[i].resident_prefill, ==, 0);
	}
}

/* A scripted ledger event on hold h. */
typedef enum op {
	END = 0,
	PENDING,    /* admitted: tokens */
	QUEUED,     /* waits for engine's slots */
	RESIDENT,   /* holds a slot on engine */
	DONE,       /* its prefill completed */
	UNPLACED,   /* its prefill ended without completing */
	DECODE,     /* decodes on engine with tokens of prompt and arg reserved */
	LEAVE,      /* its decode ended */
	RELEASE,    /* the request ended */
	ADVANCE,    /* the clock moves on by arg ms */
} op;

struct step {
	op op;
	int hold;
	uint32_t engine;
	uint64_t tokens;
	uint64_t arg;
};

static int64_t
run(struct env *e, struct nw_price_hold *holds, const struct step *s, int64_t now)
{
	for (; s->op != END; s++) {
		struct nw_price_hold *h = &holds[s->hold];

		/* the data plane's slot count, beside the ledger (placement.c) */
		if (h->where == NW_PRICE_RESIDENT && s->op != RESIDENT && s->op != DECODE &&
		    s->op != LEAVE && s->op != ADVANCE)
			e->f->engines[h->engine].resident_prefill--;
		switch (s->op) {
		case PENDING: nw_pricing_pending(e->f, h, s->tokens); break;
		case QUEUED: nw_pricing_queued(e->f, h, s->engine); break;
		case RESIDENT:
			if (h->where == NW_PRICE_RESIDENT)
				e->f->engines[h->engine].resident_prefill--;
			nw_pricing_resident(e->f, h, s->engine, now);
			e->f->engines[s->engine].resident_prefill++;
			break;
		case DONE: nw_pricing_prefill_done(e->f, h, now); break;
		case UNPLACED: nw_pricing_unplaced(e->f, h); break;
		case DECODE: nw_pricing_decode_enter(e->f, h, s->engine, s->tokens, s->arg); break;
		case LEAVE: nw_pricing_decode_leave(e->f, h); break;
		case RELEASE: nw_pricing_release(e->f, h); break;
		case ADVANCE: now += (int64_t)s->arg * MS; break;
		case END: break;
		}
	}
	return now;
}

/* The role-control document, "Prefill queue projections": the FIFO
 * completion projection on p0 is the resident work less the progress
 * made since the last completion, the queued work, p0's share of the
 * admitted work not yet placed over the live prefill pool (p0 and p1),
 * then the prompt's own prefill (plugin-abi.h, prefill_queue_seconds). */
static void
test_fifo_projection(void)
{
	static const struct {
		const char *clause;
		struct step script[8];
		uint64_t prompt;
		double expect_s;
	} cases[] = {
		{ "an idle engine: the prompt's own prefill", { { END } }, 1000, 0.11 },
		{ "a resident request ahead of it",
		  { { PENDING, 0, 0, 1000 }, { RESIDENT, 0, 0 }, { END } }, 1000, CHARGE(1000) + 0.11 },
		{ "progress credit since the work arrived on an idle engine",
		  { { PENDING, 0, 0, 1000 }, { RESIDENT, 0, 0 }, { ADVANCE, 0, 0, 0, 50 }, { END } },
		  1000, CHARGE(1000) - 0.05 + 0.11 },
		{ "the credit never exceeds the resident work",
		  { { PENDING, 0, 0, 1000 }, { RESIDENT, 0, 0 }, { ADVANCE, 0, 0, 0, 900 }, { END } },
		  500, 0.06 },
		{ "the credit restarts at a completion",
		  { { PENDING, 0, 0, 1000 }, { RESIDENT, 0, 0 }, { PENDING, 1, 0, 2000 },
		    { RESIDENT, 1, 0 }, { ADVANCE, 0, 0, 0, 100 }, { DONE, 0 },
		    { ADVANCE, 0, 0, 0, 10 }, { END } },
		  1000, CHARGE(2000) - 0.01 + 0.11 },
		{ "queued work waiting for its slots",
		  { { PENDING, 0, 0, 2000 }, { QUEUED, 0, 0 }, { ADVANCE, 0, 0, 0, 500 }, { END } },
		  1000, CHARGE(2000) + 0.11 },
		{ "its share of the pool's admitted work not yet placed",
		  { { PENDING, 0, 0, 1000 }, { PENDING, 1, 0, 3000 }, { END } }, 1000,
		  (CHARGE(1000) + CHARGE(3000)) / 2 + 0.11 },
		{ "another engine's work is not p0's",
		  { { PENDING, 0, 0, 1000 }, { RESIDENT, 0, 1 }, { PENDING, 1, 0, 900 },
		    { QUEUED, 1, 1 }, { END } }, 100, 0.02 },
	};

	for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
		struct env e;
		struct nw_price_hold holds[4] = { 0 };
		double out = -1;
		int64_t now;

		g_test_message("%s", cases[i].clause);
		env_init(&e, NULL, true);
		now = run(&e, holds, cases[i].script, T0);
		g_assert_cmpint(nw_pricing_prefill_queue_s(e.f, 0, cases[i].prompt, now, &out), ==,
		                NARWHAL_ESTIMATE_OK);
		g_assert_cmpfloat_with_epsilon(out, cases[i].expect_s, 1e-9);
		for (int k = 0; k < 4; k++)
			run(&e, holds, (const struct step[]){ { RELEASE, k }, { END } }, now);
		assert_ledger_zero(e.f);
		env_clear(&e);
	}
}

/* "They say 'outside the measured domain' rather than extrapolate"
 * (issue 12): a prompt outside the engine's prefill domain is
 * OUT_OF_DOMAIN, an engine without a profile NO_PROFILE; *out untouched. */
static void
test_domain_refusal(void)
{
	static const struct {
		uint64_t tokens;
		narwhal_estimate_status status;
	} cases[] = {
		{ 9, NARWHAL_ESTIMATE_OK },             { 10, NARWHAL_ESTIMATE_OK },
		{ 4096, NARWHAL_ESTIMATE_OK },          { 4097, NARWHAL_ESTIMATE_OUT_OF_DOMAIN },
		{ 0, NARWHAL_ESTIMATE_OK }, /* below: priced at the lower edge */
	};
	struct env e;
	double out = -1;

	env_init(&e, NULL, true);
	for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
		out = -1;
		g_assert_cmpint(nw_pricing_prefill_queue_s(e.f, 0, cases[i].tokens, T0, &out), ==,
		                cases[i].status);
		if (cases[i].status != NARWHAL_ESTIMATE_OK)
			g_assert_cmpfloat(out, ==, -1);
	}
	nw_fleet_set_profile(e.f, 1, NULL);
	out = -1;
	g_assert_cmpint(nw_pricing_prefill_queue_s(e.f, 1, 100, T0, &out), ==,
	                NARWHAL_ESTIMATE_NO_PROFILE);
	g_assert_cmpint(nw_pricing_prefill_queue_s(e.f, 7, 100, T0, &out), ==,
	                NARWHAL_ESTIMATE_NO_PROFILE);
	g_assert_cmpint(nw_pricing_decode_interval_s(e.f, 1, 1, 0, &out), ==,
	                NARWHAL_ESTIMATE_NO_PROFILE);
	g_assert_cmpfloat(out, ==, -1);
	env_clear(&e);
}

/* Spec 4.1 (aggregate placement confined to the single-phase region) and
 * the role-control document's "Aggregate fallback from an idle decode
 * engine": with the prefill pool gone, d0 takes aggregate work, but is
 * not priced while it has resident decode work; once that drains it is,
 * and the whole pool's pending work is its own. */
static void
test_single_phase_refusal(void)
{
	struct env e;
	struct nw_price_hold h = { 0 };
	double out = -1;

	env_init(&e, NULL, true);
	nw_pricing_pending(e.f, &h, 1000);
	/* p0 and p1 fail: aggregate mode, d0 the pool */
	e.f->engines[0].flags &= ~(uint32_t)NARWHAL_ENGINE_AVAILABLE;
	e.f->engines[1].flags &= ~(uint32_t)NARWHAL_ENGINE_AVAILABLE;
	e.f->engines[2].resident_decode = 2;
	e.f->stats[2].handoff_decodes = 2;
	nw_fleet_changed(e.f);
	g_assert_cmpint(nw_pricing_prefill_queue_s(e.f, 2, 100, T0, &out), ==,
	                NARWHAL_ESTIMATE_OUT_OF_DOMAIN);
	g_assert_cmpfloat(out, ==, -1);
	/* one left: still refused */
	e.f->engines[2].resident_decode = 1;
	e.f->stats[2].handoff_decodes = 1;
	g_assert_cmpint(nw_pricing_prefill_queue_s(e.f, 2, 100, T0, &out), ==,
	                NARWHAL_ESTIMATE_OUT_OF_DOMAIN);
	/* drained: priced for aggregate prefill, with the pool's work and no
	 * handoff (none is made) */
	e.f->engines[2].resident_decode = 0;
	e.f->stats[2].handoff_decodes = 0;
	nw_fleet_changed(e.f);
	g_assert_cmpint(nw_pricing_prefill_queue_s(e.f, 2, 100, T0, &out), ==,
	                NARWHAL_ESTIMATE_OK);
	g_assert_cmpfloat_with_epsilon(out, CHARGE(1000) + work(100), 1e-9);
	/* a prefill engine decoding an aggregate leg is refused too */
	e.f->engines[0].flags |= NARWHAL_ENGINE_AVAILABLE;
	e.f->engines[0].resident_decode = 1;
	nw_fleet_changed(e.f);
	g_assert_cmpint(nw_pricing_prefill_queue_s(e.f, 0, 100, T0, &out), ==,
	                NARWHAL_ESTIMATE_OUT_OF_DOMAIN);
	e.f->engines[0].resident_decode = 0;
	nw_pricing_release(e.f, &h);
	assert_ledger_zero(e.f);
	env_clear(&e);
}

/* plugin-abi.h, prefill_queue_seconds: "then its own prefill and, when
 * measured, the handoff" (struct nw_handoff_profile): added on a prefill
 * engine of a pair, not beyond the lengths it was measured for, not
 * without a measurement, not for an aggregate leg. */
static void
test_handoff_added(void)
{
	static const struct {
		const char *clause;
		uint32_t samples;
		bool paired;
		uint64_t tokens;
		narwhal_estimate_status status;
		double expect_s;
	} cases[] = {
		{ "measured: added", 5, true, 1000, NARWHAL_ESTIMATE_OK, 0.11 + 0.005 + 0.01 },
		{ "at its longest measured prompt", 5, true, 2000, NARWHAL_ESTIMATE_OK,
		  0.21 + 0.005 + 0.02 },
		{ "beyond it: outside the domain", 5, true, 2001, NARWHAL_ESTIMATE_OUT_OF_DOMAIN, 0 },
		{ "not measured: the prefill only", 0, true, 3000, NARWHAL_ESTIMATE_OK, 0.31 },
		{ "aggregate (no live decode engine): no handoff", 5, false, 3000,
		  NARWHAL_ESTIMATE_OK, 0.31 },
	};

	for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
		struct env e;
		double out = -1;

		g_test_message("%s", cases[i].clause);
		env_init(&e, NULL, true);
		e.prof[0].handoff = (struct nw_handoff_profile){ .setup_s = 0.005, .per_token_s = 1e-5,
			                                             .max_tokens = 2000,
			                                             .samples = cases[i].samples };
		if (!cases[i].paired) {
			e.f->engines[2].flags &= ~(uint32_t)NARWHAL_ENGINE_AVAILABLE;
			nw_fleet_changed(e.f);
		}
		g_assert_cmpint(nw_pricing_prefill_queue_s(e.f, 0, cases[i].tokens, T0, &out), ==,
		                cases[i].status);
		if (cases[i].status == NARWHAL_ESTIMATE_OK)
			g_assert_cmpfloat_with_epsilon(out, cases[i].expect_s, 1e-9);
		/* prefill_seconds is the same at zero backlog (plugin-abi.h:
		 * what the prompt costs there, handoff included) */
		out = -1;
		g_assert_cmpint(nw_pricing_prefill_s(e.f, 0, cases[i].tokens, &out), ==,
		                cases[i].status);
		if (cases[i].status == NARWHAL_ESTIMATE_OK)
			g_assert_cmpfloat_with_epsilon(out, cases[i].expect_s, 1e-9);
		env_clear(&e);
	}
}

/* One decode leg on d0 alone, started at T0 with kv KV tokens (prompt,
 * no reserve), ending well with gaps token gaps of interval_s each. */
static void
observe(struct env *e, uint64_t kv, uint64_t gaps, double interval_s)
{
	struct nw_price_hold h = { 0 };

	e->f->engines[2].resident_decode++;
	nw_pricing_decode_enter(e->f, &h, 2, kv, 0);
	nw_pricing_decode_started(e->f, &h, T0);
	nw_pricing_decode_observe(e->f, &h, T0 + (int64_t)llround(interval_s * 1e9 * gaps),
	                          gaps + 1);
	nw_pricing_release(e->f, &h);
	e->f->engines[2].resident_decode--;
}

#define CORRECTION_SETTINGS                                                              \
	"\"reactive\": {\"decode_correction_min\": 0.8, \"decode_correction_max\": 2.0,"  \
	" \"decode_correction_alpha\": 0.5, \"decode_correction_min_samples\": 8}"

/* Spec 7.7: "Required decode gaps before a window updates the
 * correction" and "Lower/Upper bound on live/profile decode correction":
 * a window (one pass) with fewer than min_samples gaps the profile
 * covers leaves it; the result is bounded; decode_interval_seconds is the
 * profile's estimate times it. */
static void
test_correction_bounded(void)
{
	/* the profile at 1 request and 1000 KV tokens: 0.022 s */
	static const struct {
		const char *clause;
		uint64_t gaps;
		double ratio;       /* observed / profiled */
		uint64_t kv;
		double expect;
	} cases[] = {
		{ "7 gaps: below min_samples, unchanged", 7, 2.0, 1000, 1.0 },
		{ "8 gaps: a step", 8, 2.0, 1000, 1.5 },
		{ "far above: bounded by decode_correction_max", 8, 10.0, 1000, 2.0 },
		{ "far below: bounded by decode_correction_min", 8, 0.01, 1000, 0.8 },
		{ "outside the profile's domain at the start: not a sample", 100, 2.0, 200000, 1.0 },
	};

	for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
		struct env e;
		double out = -1, profiled = 0.02 + 1e-6 * (double)cases[i].kv + 0.001;

		g_test_message("%s", cases[i].clause);
		env_init(&e, CORRECTION_SETTINGS, true);
		observe(&e, cases[i].kv, cases[i].gaps, profiled * cases[i].ratio);
		nw_pricing_pass(e.f, T0);
		g_assert_cmpfloat_with_epsilon(e.f->ledger[2].correction, cases[i].expect, 1e-9);
		g_assert_cmpint(nw_pricing_decode_interval_s(e.f, 2, 1, 1000, &out), ==,
		                NARWHAL_ESTIMATE_OK);
		g_assert_cmpfloat_with_epsilon(out, 0.022 * cases[i].expect, 1e-12);
		/* the next window has no gaps: the correction stays */
		nw_pricing_pass(e.f, T0 + 1000 * MS);
		g_assert_cmpfloat_with_epsilon(e.f->ledger[2].correction, cases[i].expect, 1e-9);
		assert_ledger_zero(e.f);
		env_clear(&e);
	}
}

/* Spec 7.7, decode_correction_alpha: "Fraction of each qualifying
 * observation window applied to the correction": correction += alpha *
 * (observed / profiled - correction), window after window. */
static void
test_alpha_step(void)
{
	static const struct {
		const char *alpha;
		double ratio;
		double expect[3];
	} cases[] = {
		{ "0.5", 1.8, { 1.4, 1.6, 1.7 } },
		{ "1", 1.8, { 1.8, 1.8, 1.8 } },
		{ "0.2", 0.5, { 0.9, 0.82, 0.756 } },
	};

	for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
		g_autofree char *settings = g_strdup_printf(
			"\"reactive\": {\"decode_correction_min\": 0.5, \"decode_correction_max\": 2.0,"
			" \"decode_correction_alpha\": %s, \"decode_correction_min_samples\": 4}",
			cases[i].alpha);
		struct env e;

		env_init(&e, settings, true);
		for (int w = 0; w < 3; w++) {
			observe(&e, 0, 4, 0.021 * cases[i].ratio);
			nw_pricing_pass(e.f, T0 + w * 1000 * MS);
			g_assert_cmpfloat_with_epsilon(e.f->ledger[2].correction, cases[i].expect[w],
			                               1e-9);
		}
		env_clear(&e);
	}
}

/* Spec 7.1, "Load definitions": decode load = (interval - floor) / (tpot
 * - floor), at least 0; the raw interval / tpot when the floor reaches
 * the target; NaN when it cannot be priced. */
static void
test_decode_load_formula(void)
{
	static const struct {
		double interval, floor, tpot, expect;
	} cases[] = {
		{ 0.06, 0.02, 0.1, 0.5 },    /* half the budget above the floor */
		{ 0.10, 0.02, 0.1, 1.0 },    /* 1.0: the target reached */
		{ 0.01, 0.02, 0.1, 0.0 },    /* below the floor: at least 0 */
		{ 0.15, 0.12, 0.1, 1.5 },    /* floor above tpot: raw ratio */
		{ 0.10, 0.10, 0.1, 1.0 },    /* floor at tpot: raw ratio */
	};

	for (size_t i = 0; i < G_N_ELEMENTS(cases); i++)
		g_assert_cmpfloat_with_epsilon(nw_pricing_decode_load_of(cases[i].interval,
		                                                         cases[i].floor,
		                                                         cases[i].tpot),
		                               cases[i].expect, 1e-12);
	g_assert_true(isnan(nw_pricing_decode_load_of(NAN, 0.02, 0.1)));
	g_assert_true(isnan(nw_pricing_decode_load_of(0.05, NAN, 0.1)));
}

/* Spec 7.1 through the monitor's pass: prefill load = predicted prefill
 * work / TTFT target; decode load from the window's observed interval
 * over the corrected floor (the profile's interval at the least
 * contention it measured, times the correction), or from the corrected
 * estimate of what the engine holds when too few gaps were seen, 0 when
 * it decodes nothing; NaN without a profile. Pool loads are the mean
 * over the live engines of each role. */
static void
test_loads_pass(void)
{
	struct env e;
	struct nw_price_hold h[2] = { { 0 } };
	double pool_p, pool_d;

	env_init(&e, CORRECTION_SETTINGS, true);
	/* 4000 tokens resident on p0, 2000 pending: each prefill engine has
	 * half the pending */
	nw_pricing_pending(e.f, &h[0], 4000);
	nw_pricing_resident(e.f, &h[0], 0, T0);
	e.f->engines[0].resident_prefill = 1;
	nw_pricing_pending(e.f, &h[1], 2000);
	/* d0: 8 gaps at 0.071 s with the floor 0.021 and tpot 0.1: but the
	 * correction moves first (0.071 / 0.021 is above the bound 2.0) */
	observe(&e, 0, 8, 0.071);
	nw_pricing_pass(e.f, T0);
	g_assert_cmpfloat_with_epsilon(e.f->engines[0].prefill_load,
	                               (CHARGE(4000) + CHARGE(2000) / 2) / 2.0, 1e-9);
	g_assert_cmpfloat_with_epsilon(e.f->engines[1].prefill_load, CHARGE(2000) / 2 / 2.0, 1e-9);
	g_assert_cmpfloat_with_epsilon(e.f->ledger[2].correction, 2.0, 1e-12);
	g_assert_cmpfloat_with_epsilon(e.f->engines[2].decode_load,
	                               (0.071 - 0.042) / (0.1 - 0.042), 1e-9);
	/* the prefill engines decode nothing: 0 */
	g_assert_cmpfloat(e.f->engines[0].decode_load, ==, 0);
	nw_pricing_pool_loads(e.f, &pool_p, &pool_d);
	g_assert_cmpfloat_with_epsilon(pool_p, ((CHARGE(4000) + CHARGE(2000) / 2) / 2.0 +
	                                        CHARGE(2000) / 2 / 2.0) / 2, 1e-9);
	g_assert_cmpfloat_with_epsilon(pool_d, e.f->engines[2].decode_load, 1e-12);

	/* no gaps in the next window, 3 requests holding 30000 tokens:
	 * the corrected estimate 2 * (0.02 + 0.03 + 0.003) = 0.106, and the
	 * floor 0.042 */
	e.f->engines[2].resident_decode = 3;
	e.f->engines[2].resident_kv_tokens = 30000;
	nw_pricing_pass(e.f, T0 + 1000 * MS);
	g_assert_cmpfloat_with_epsilon(e.f->engines[2].decode_load,
	                               (0.106 - 0.042) / (0.1 - 0.042), 1e-9);
	/* the floor reaches the target (a slower engine): the raw ratio */
	e.prof[2].decode.d0_s = 0.06;
	nw_pricing_pass(e.f, T0 + 2000 * MS);
	g_assert_cmpfloat_with_epsilon(e.f->engines[2].decode_load,
	                               2 * (0.06 + 0.03 + 0.003) / 0.1, 1e-9);
	/* outside the decode domain, with nothing observed: unknown */
	e.f->engines[2].resident_kv_tokens = 200000;
	nw_pricing_pass(e.f, T0 + 3000 * MS);
	g_assert_true(isnan(e.f->engines[2].decode_load));
	e.f->engines[2].resident_decode = 0;
	e.f->engines[2].resident_kv_tokens = 0;

	/* no profile: both NaN, and out of the pool loads */
	nw_fleet_set_profile(e.f, 1, NULL);
	nw_pricing_pass(e.f, T0 + 4000 * MS);
	g_assert_true(isnan(e.f->engines[1].prefill_load));
	g_assert_true(isnan(e.f->engines[1].decode_load));
	nw_pricing_pool_loads(e.f, &pool_p, &pool_d);
	g_assert_cmpfloat_with_epsilon(pool_p, e.f->engines[0].prefill_load, 1e-12);
	nw_pricing_release(e.f, &h[0]);
	e.f->engines[0].resident_prefill = 0;
	nw_pricing_release(e.f, &h[1]);
	assert_ledger_zero(e.f);
	env_clear(&e);
}

/* Issue 12 (this increment): "Each request must release exactly what it
 * charged, on every path": completion, failure, retry, cancel, unqueue,
 * deadline. The engines are priced differently (and d0 has no profile:
 * the mean's amounts), so a release on the wrong engine or at the wrong
 * price shows; after the scripted sequence the ledger is zero. */
static void
test_release_symmetry(void)
{
	static const struct step script[] = {
		/* 0: completes: queued, placed, prefilled, decodes, ends */
		{ PENDING, 0, 0, 1000 }, { QUEUED, 0, 1 }, { UNPLACED, 0 }, { RESIDENT, 0, 1 },
		{ ADVANCE, 0, 0, 0, 30 }, { DONE, 0 }, { DECODE, 0, 2, 1000, 64 },
		/* 1: fails on its prefill, retried, waits for p0's slots */
		{ PENDING, 1, 0, 3000 }, { RESIDENT, 1, 0 }, { UNPLACED, 1 },
		{ PENDING, 1, 0, 3000 }, { QUEUED, 1, 0 },
		/* 2: prefilled, its decode fails, retried (prefill again) */
		{ PENDING, 2, 0, 200 }, { RESIDENT, 2, 0 }, { DONE, 2 }, { DECODE, 2, 2, 200, 0 },
		{ LEAVE, 2 }, { PENDING, 2, 0, 200 }, { RESIDENT, 2, 1 },
		/* 3: an aggregate leg on d0: resident, first token, decode */
		{ PENDING, 3, 0, 50 }, { RESIDENT, 3, 2 }, { DONE, 3 }, { DECODE, 3, 2, 50, 10 },
		/* 4: admission-queued */
		{ PENDING, 4, 0, 4096 },
		{ END },
	}, ends[] = {
		/* 0 completes, 1 is cancelled while queued, 2 fails for good on
		 * its prefill, 3 completes, 4 reaches its deadline in the queue */
		{ ADVANCE, 0, 0, 0, 10 },
		{ LEAVE, 0 }, { RELEASE, 0 }, { RELEASE, 1 }, { UNPLACED, 2 }, { RELEASE, 2 },
		{ RELEASE, 3 }, { RELEASE, 4 },
		{ END },
	};
	struct env e;
	struct nw_price_hold holds[5] = { { 0 } };
	int64_t pending = 0, on[3][2] = { { 0 } }, now;
	uint64_t kv[3] = { 0 };

	env_init(&e, NULL, true);
	e.prof[1].prefill.a_s = 0.05;
	nw_fleet_set_profile(e.f, 2, NULL);
	now = run(&e, holds, script, T0);
	/* part way through, the ledger is what the holds say they charged */
	for (int k = 0; k < 5; k++) {
		const struct nw_price_hold *h = &holds[k];

		if (h->where == NW_PRICE_PENDING)
			pending += h->prefill_ns;
		else if (h->where != NW_PRICE_NONE)
			on[h->engine][h->where == NW_PRICE_RESIDENT] += h->prefill_ns;
		if (h->decoding)
			kv[h->decode_engine] += h->kv_tokens;
	}
	g_assert_cmpint(pending, ==, e.f->pricing.pending_ns);
	g_assert_cmpint(pending, >, 0);
	for (uint32_t i = 0; i < 3; i++) {
		g_assert_cmpint(on[i][0], ==, e.f->ledger[i].queued_prefill_ns);
		g_assert_cmpint(on[i][1], ==, e.f->ledger[i].resident_prefill_ns);
		g_assert_cmpuint(kv[i], ==, e.f->engines[i].resident_kv_tokens);
	}
	g_assert_cmpuint(kv[2], ==, 1064 + 60);
	/* p1 prices on its own profile, d0 (none) on the mean */
	g_assert_cmpint(holds[2].prefill_ns, ==, nw_pricing_work_ns(&e.prof[1], 200));
	run(&e, holds, ends, now);
	assert_ledger_zero(e.f);
	for (int k = 0; k < 5; k++) {
		g_assert_cmpint(holds[k].where, ==, NW_PRICE_NONE);
		g_assert_false(holds[k].decoding);
	}
	env_clear(&e);
}

/* The amounts (core/pricing.h, nw_pricing_work_ns): the model at any
 * length, in or out of the measured domain, with its share of a step's
 * fixed cost (all of it from the longest prompt measured up), never
 * negative, bounded; 0 without a profile. Sizing by chars_per_token gives
 * a token count that is priced the same way (spec 6). */
static void
test_work_amounts(void)
{
	struct nw_engine_profile p = profile();

	g_assert_cmpint(nw_pricing_work_ns(&p, 1000), ==, (int64_t)llround(CHARGE(1000) * 1e9));
	g_assert_cmpint(nw_pricing_work_ns(&p, 4096), ==, (int64_t)llround(0.4196 * 1e9));
	/* 64 prompts of 64 tokens fill one step: they pay a once between them */
	g_assert_cmpint(64 * nw_pricing_work_ns(&p, 64), ==, (int64_t)llround(0.4196 * 1e9));
	g_assert_cmpint(nw_pricing_work_ns(&p, 5), ==, (int64_t)llround(CHARGE(5) * 1e9));
	g_assert_cmpint(nw_pricing_work_ns(&p, 100000), ==, (int64_t)llround(10.01 * 1e9));
	g_assert_cmpint(nw_pricing_work_ns(NULL, 1000), ==, 0);
	p.prefill.a_s = -1.0;
	g_assert_cmpint(nw_pricing_work_ns(&p, 10), ==, 0);
	p.prefill.c_s = 1.0;
	g_assert_cmpint(nw_pricing_work_ns(&p, UINT64_MAX), ==,
	                (int64_t)(NW_PRICE_WORK_MAX_S * 1e9));
}

/* Spec 7.7: "Demand pricing uses the mean profile across configured
 * engines": over those that have a profile; pending work is priced on
 * it. */
static void
test_mean_profile(void)
{
	struct env e;
	struct nw_price_hold h = { 0 };

	env_init(&e, NULL, true);
	e.prof[0].prefill.a_s = 0.04;
	nw_fleet_set_profile(e.f, 0, &e.prof[0]);
	nw_fleet_set_profile(e.f, 2, NULL);
	g_assert_nonnull(nw_pricing_mean(e.f));
	g_assert_cmpfloat_with_epsilon(nw_pricing_mean(e.f)->prefill.a_s, 0.025, 1e-15);
	nw_pricing_pending(e.f, &h, 1000);
	/* charged on the mean: a = 0.025, its share 1000/4096 */
	g_assert_cmpint(e.f->pricing.pending_ns, ==, llround((0.025 * 1000 / 4096 + 0.1) * 1e9));
	nw_pricing_release(e.f, &h);
	for (uint32_t i = 0; i < 3; i++)
		nw_fleet_set_profile(e.f, i, NULL);
	g_assert_null(nw_pricing_mean(e.f));
	assert_ledger_zero(e.f);
	env_clear(&e);
}

/* resident_kv_tokens (plugin-abi.h) is maintained for decode residency:
 * prompt tokens plus reserved output (docs/profiles.md), and the
 * decode's start records what the engine held then. */
static void
test_resident_kv(void)
{
	struct env e;
	struct nw_price_hold a = { 0 }, b = { 0 };

	env_init(&e, NULL, true);
	e.f->engines[2].resident_decode = 1;
	nw_pricing_decode_enter(e.f, &a, 2, 1000, 100);
	e.f->engines[2].resident_decode = 2;
	nw_pricing_decode_enter(e.f, &b, 2, 500, 0);
	nw_pricing_decode_started(e.f, &b, T0);
	g_assert_cmpuint(e.f->engines[2].resident_kv_tokens, ==, 1600);
	g_assert_cmpuint(e.f->ledger[2].reserved_output_tokens, ==, 100);
	g_assert_cmpuint(b.active_at_start, ==, 2);
	g_assert_cmpuint(b.kv_at_start, ==, 1600);
	nw_pricing_decode_leave(e.f, &a);
	g_assert_cmpuint(e.f->engines[2].resident_kv_tokens, ==, 500);
	nw_pricing_release(e.f, &b);
	e.f->engines[2].resident_decode = 0;
	assert_ledger_zero(e.f);
	env_clear(&e);
}

/* Spec 4.1 (predictive admission keeps what it admitted within the TTFT
 * target) with the role-control document's FIFO projection: an engine
 * prefills what it holds together, so a prompt placed now delays the
 * residents whose turn has not come. When it would push the earliest
 * deadline among them back, it is priced beyond the target by the wait
 * until that resident starts; once that one's turn came, it no longer
 * is. slo.ttft_s is 2 s; the tail after a prefill is two idle decode
 * steps (0.021 s each, no handoff measured). */
static void
test_batched_wait(void)
{
	struct env e;
	struct nw_price_hold holds[2] = { 0 };
	double out = -1;
	int64_t now;

	env_init(&e, NULL, true);
	holds[0].arrival_ns = T0;
	/* Arrived 1.5 s before it was placed: due by T0 + 2 - 1.5 - 0.042. */
	holds[1].arrival_ns = T0 - 1500 * MS;
	now = run(&e, holds, (const struct step[]){ { PENDING, 0, 0, 1000 }, { RESIDENT, 0, 0 },
		                                    { PENDING, 1, 0, 1000 }, { RESIDENT, 1, 0 },
		                                    { END } }, T0);
	/* A short prompt ends before that deadline: its FIFO projection. */
	g_assert_cmpint(nw_pricing_prefill_queue_s(e.f, 0, 100, now, &out), ==, NARWHAL_ESTIMATE_OK);
	g_assert_cmpfloat_with_epsilon(out, 2 * CHARGE(1000) + 0.02, 1e-9);
	/* A long one would push it back: beyond the target by the time
	 * until hold 1's turn (after hold 0's own step, its fixed cost
	 * whole). */
	g_assert_cmpint(nw_pricing_prefill_queue_s(e.f, 0, 4000, now, &out), ==,
	                NARWHAL_ESTIMATE_OK);
	g_assert_cmpfloat_with_epsilon(out, 2.0 + work(1000), 1e-9);
	/* Another engine is not held back by p0's residents. */
	g_assert_cmpint(nw_pricing_prefill_queue_s(e.f, 1, 4000, now, &out), ==,
	                NARWHAL_ESTIMATE_OK);
	g_assert_cmpfloat_with_epsilon(out, 0.41, 1e-9);
	/* Hold 1's turn came: only the FIFO projection is left. */
	now = run(&e, holds, (const struct step[]){ { ADVANCE, 0, 0, 0, 200 }, { END } }, now);
	g_assert_cmpint(nw_pricing_prefill_queue_s(e.f, 0, 4000, now, &out), ==,
	                NARWHAL_ESTIMATE_OK);
	g_assert_cmpfloat_with_epsilon(out, 2 * CHARGE(1000) - 0.2 + 0.41, 1e-9);
	run(&e, holds, (const struct step[]){ { RELEASE, 0 }, { RELEASE, 1 }, { END } }, now);
	assert_ledger_zero(e.f);
	g_assert_null(e.f->ledger[0].first);
	g_assert_null(e.f->ledger[0].last);
	env_clear(&e);
}

/* Placement prices a request against the others' work, not its own: its
 * pool (or queued) charge leaves the ledger while an engine is chosen
 * (nw_pricing_placing), and placing it charges it once on that engine. */
static void
test_placing(void)
{
	struct env e;
	struct nw_price_hold holds[1] = { 0 };
	double out = -1;

	env_init(&e, NULL, true);
	run(&e, holds, (const struct step[]){ { PENDING, 0, 0, 1000 }, { END } }, T0);
	g_assert_cmpint(nw_pricing_prefill_queue_s(e.f, 0, 1000, T0, &out), ==, NARWHAL_ESTIMATE_OK);
	g_assert_cmpfloat_with_epsilon(out, CHARGE(1000) / 2 + 0.11, 1e-9);
	nw_pricing_placing(e.f, &holds[0]);
	g_assert_cmpint(nw_pricing_prefill_queue_s(e.f, 0, 1000, T0, &out), ==, NARWHAL_ESTIMATE_OK);
	g_assert_cmpfloat_with_epsilon(out, 0.11, 1e-9);
	run(&e, holds, (const struct step[]){ { QUEUED, 0, 1 }, { END } }, T0);
	nw_pricing_placing(e.f, &holds[0]);
	g_assert_cmpint(e.f->ledger[1].queued_prefill_ns, ==, 0);
	run(&e, holds, (const struct step[]){ { RESIDENT, 0, 1 }, { END } }, T0);
	g_assert_cmpint(e.f->ledger[1].resident_prefill_ns, ==, (int64_t)llround(CHARGE(1000) * 1e9));
	run(&e, holds, (const struct step[]){ { RELEASE, 0 }, { END } }, T0);
	assert_ledger_zero(e.f);
	env_clear(&e);
}

/* A profile the store accepts (finite, 0 or more over its domain) can
 * still price a prompt at more seconds than a clock in nanoseconds holds
 * (docs/profiles.md, the store's format: any finite coefficient). The
 * projection stays that number of seconds, so predictive admission sees
 * a prompt far over its budget (a 400 too long, not a 429 "outside the
 * measured domain" that a retry never changes); a resident whose tail
 * after the prefill is as long is due before it arrived, with no
 * arithmetic overflow (the sanitizer build traps one). */
static void
test_huge_times(void)
{
	struct env e;
	struct nw_price_hold holds[2] = { 0 };
	double out = -1;

	env_init(&e, NULL, true);
	e.prof[0].prefill.c_s = 1e300;  /* 1e306 s at 1000 tokens */
	e.prof[0].decode.d0_s = 1e300;  /* the tail after a prefill on p0 */
	nw_pricing_profiles_changed(e.f);
	g_assert_cmpint(nw_pricing_prefill_queue_s(e.f, 0, 1000, T0, &out), ==, NARWHAL_ESTIMATE_OK);
	g_assert_cmpfloat(out, >=, 1e306);
	g_assert_true(isfinite(out));
	holds[0].arrival_ns = T0;
	run(&e, holds, (const struct step[]){ { PENDING, 0, 0, 100 }, { RESIDENT, 0, 0 }, { END } },
	    T0);
	g_assert_cmpint(holds[0].due_ns, <, holds[0].arrival_ns);
	/* A prompt behind it is priced with the resident's work ahead. */
	g_assert_cmpint(nw_pricing_prefill_queue_s(e.f, 0, 100, T0, &out), ==, NARWHAL_ESTIMATE_OK);
	g_assert_cmpfloat(out, >=, 1e304 + 1e5);
	g_assert_true(isfinite(out));
	run(&e, holds, (const struct step[]){ { RELEASE, 0 }, { END } }, T0);
	assert_ledger_zero(e.f);
	env_clear(&e);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/pricing/fifo-projection", test_fifo_projection);
	g_test_add_func("/pricing/domain-refusal", test_domain_refusal);
	g_test_add_func("/pricing/single-phase-refusal", test_single_phase_refusal);
	g_test_add_func("/pricing/handoff-added", test_handoff_added);
	g_test_add_func("/pricing/correction-bounded", test_correction_bounded);
	g_test_add_func("/pricing/alpha-step", test_alpha_step);
	g_test_add_func("/pricing/decode-load-formula", test_decode_load_formula);
	g_test_add_func("/pricing/loads-pass", test_loads_pass);
	g_test_add_func("/pricing/release-symmetry", test_release_symmetry);
	g_test_add_func("/pricing/work-amounts", test_work_amounts);
	g_test_add_func("/pricing/mean-profile", test_mean_profile);
	g_test_add_func("/pricing/resident-kv", test_resident_kv);
	g_test_add_func("/pricing/batched-wait", test_batched_wait);
	g_test_add_func("/pricing/placing", test_placing);
	g_test_add_func("/pricing/huge-times", test_huge_times);
	return g_test_run();
}
