/* Pricing a prefill/decode split (src/core/split-price.h; docs/controller.md,
 * "How a split is priced"; spec 7.1, 7.3, 7.5 to 7.7; the role-control
 * document's "Role control" and "Prefill queue projections"; plugin-abi.h,
 * price_split). Every clock is a fake one: the tests pass now_ns. */
#include "build-config.h"

#include <math.h>
#include <string.h>

#include <glib.h>

#include "core/config.h"
#include "core/host.h"
#include "core/pricing.h"
#include "core/split-price.h"

#define MS 1000000LL /* nanoseconds */
#define T0 (1000 * MS)
#define TTFT 2.0
#define TPOT 0.1

/* prefill_s = 0.01 + 1e-4 * L over 10..4096 tokens; interval_s = 0.02 +
 * 1e-6 * T + 0.001 * B over 1..64 requests and 0..100000 KV tokens (the
 * profile of test-pricing.c). */
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

/* The profile's prefill of L tokens on an idle engine. */
static double
own(double l)
{
	return 0.01 + 1e-4 * MAX(l, 10);
}

/* What a prompt of L tokens charges the ledger (nw_pricing_work_ns): b*L
 * and its share L / 4096 of a step's fixed cost. */
static double
charge(double l)
{
	return 0.01 * l / 4096.0 + 1e-4 * l;
}

/* The profile's decode interval at n streams of kv tokens each. */
static double
interval(double n, double kv)
{
	return 0.02 + 1e-6 * n * kv + 0.001 * MAX(n, 1);
}

/* The M/D/1 wait below the knee. */
static double
md1(double w, double rho)
{
	return w * rho / (2 * (1 - rho));
}

struct env {
	struct nw_config *cfg;
	struct nw_fleet *f;
	struct nw_engine_profile prof[8];
};

/* Engines p0, p1 (prefill) and d0, d1 (decode), each with profile(). */
static void
env_init(struct env *e, bool profiled)
{
	g_autofree char *text = g_strdup_printf(
		"{\"serving\": {\"admission\": \"open\"}, \"controller\": {\"policy\": \"static\"},"
		" \"slo\": {\"ttft_s\": %g, \"tpot_s\": %g},"
		" \"fleet\": {\"engines\": [{\"id\": \"p0\", \"url\": \"http://127.0.0.1:1\", \"role\": \"prefill\"},"
		" {\"id\": \"p1\", \"url\": \"http://127.0.0.1:2\", \"role\": \"prefill\"},"
		" {\"id\": \"d0\", \"url\": \"http://127.0.0.1:3\", \"role\": \"decode\"},"
		" {\"id\": \"d1\", \"url\": \"http://127.0.0.1:4\", \"role\": \"decode\"}]}}",
		TTFT, TPOT);
	GPtrArray *problems = NULL;

	e->cfg = nw_config_load_string(text, "test.json", &problems);
	if (e->cfg == NULL)
		g_error("config: %s", (char *)g_ptr_array_index(problems, 0));
	g_ptr_array_unref(problems);
	e->f = nw_fleet_new(e->cfg, 0);
	for (uint32_t i = 0; i < 4; i++) {
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

/* Every engine's profile changed to what e->prof holds now. */
static void
profiles_changed(struct env *e)
{
	nw_pricing_profiles_changed(e->f);
}

static struct narwhal_split_query
query(uint32_t p, uint32_t d, double lambda, double l, double o)
{
	return (struct narwhal_split_query){
		.struct_size = sizeof(struct narwhal_split_query),
		.prefill = p, .decode = d, .arrivals_per_s = lambda,
		.prompt_tokens = l, .output_tokens = o, .utilization = 0.8,
	};
}

static struct narwhal_split_price
price_at(struct env *e, const struct narwhal_split_query *q, int64_t now)
{
	struct narwhal_split_price out = { .struct_size = sizeof out };

	g_assert_cmpint(nw_split_price(e->f, q, now, &out), ==, NARWHAL_ESTIMATE_OK);
	g_assert_cmpuint(out.struct_size, ==, sizeof out);
	g_assert_true(isfinite(out.ttft_s) && isfinite(out.tpot_s));
	g_assert_true(isfinite(out.prefill_load) && isfinite(out.decode_load));
	g_assert_cmpfloat(out.worst_ratio, ==, MAX(out.ttft_ratio, out.tpot_ratio));
	return out;
}

static struct narwhal_split_price
price(struct env *e, const struct narwhal_split_query *q)
{
	return price_at(e, q, T0);
}

#define EPS 1e-9

/* Spec 7.1 and 7.7: an idle fleet (no demand, nothing held) prices a
 * request at its idle times on the mean profile: its own prefill, then one
 * decode step at the least contention measured; the loads are the idle
 * prefill over the TTFT target and 0. */
static void
test_idle(void)
{
	struct env e;
	struct narwhal_split_query q = query(2, 2, 0, 1000, 200);
	struct narwhal_split_price r;

	env_init(&e, true);
	r = price(&e, &q);
	g_assert_cmpfloat_with_epsilon(r.tpot_s, interval(0, 0), EPS);
	g_assert_cmpfloat_with_epsilon(r.ttft_s, own(1000) + interval(0, 0), EPS);
	g_assert_cmpfloat_with_epsilon(r.ttft_ratio, r.ttft_s / TTFT, EPS);
	g_assert_cmpfloat_with_epsilon(r.tpot_ratio, r.tpot_s / TPOT, EPS);
	g_assert_cmpfloat_with_epsilon(r.prefill_load, own(1000) / TTFT, EPS);
	g_assert_cmpfloat(r.decode_load, ==, 0);
	g_assert_true(isnan(r.urgent_ttft_s));
	g_assert_true(r.in_domain);
	/* below the measured prompt lengths: its lower edge, still inside */
	q.prompt_tokens = 3;
	r = price(&e, &q);
	g_assert_cmpfloat_with_epsilon(r.ttft_s, own(10) + interval(0, 0), EPS);
	g_assert_true(r.in_domain);
	env_clear(&e);
}

/* Little's law on a decode engine: the steady batch n solves n = lambda /
 * d * O * interval(n), the interval at n streams of L + O/2 tokens; the
 * prefill wait is the M/D/1 form at rho = lambda * W / (p * u). */
static void
test_steady_state(void)
{
	struct env e;
	struct narwhal_split_query q = query(1, 1, 1, 1000, 100);
	struct narwhal_split_price r;
	/* n = 100 * (0.02 + 0.00205 n) */
	double n = 2 / (1 - 100 * 0.00205), w = charge(1000), rho = 1 * w / (1 * 0.8);

	env_init(&e, true);
	r = price(&e, &q);
	g_assert_cmpfloat_with_epsilon(r.tpot_s, interval(n, 1050), 1e-9);
	g_assert_cmpfloat_with_epsilon(r.ttft_s, own(1000) + md1(w, rho) + r.tpot_s, 1e-9);
	g_assert_cmpfloat_with_epsilon(r.prefill_load, (own(1000) + md1(w, rho)) / TTFT, 1e-9);
	/* spec 7.1: the interval above the idle floor over what the target
	 * leaves above it */
	g_assert_cmpfloat_with_epsilon(r.decode_load, (r.tpot_s - 0.021) / (TPOT - 0.021), 1e-9);
	g_assert_true(r.in_domain);
	env_clear(&e);
}

/* docs/controller.md, "How a split is priced" (beyond the spec): the
 * prefill queueing wait scales with the arrivals' index of dispersion, as
 * Kingman's approximation scales it with their squared variation; 1
 * (Poisson) when the query's is below 1 or not finite (test_host_service:
 * or absent); the decode side is the same. */
static void
test_arrival_dispersion(void)
{
	struct env e;
	struct narwhal_split_query q = query(1, 1, 1, 1000, 100);
	struct narwhal_split_price poisson, bursty, r;
	double w = charge(1000), rho = 1 * w / (1 * 0.8);
	const double as_poisson[] = { 0, 0.5, 1, NAN, INFINITY * 0 };

	env_init(&e, true);
	poisson = price(&e, &q);
	q.arrival_dispersion = 4;
	bursty = price(&e, &q);
	g_assert_cmpfloat_with_epsilon(bursty.ttft_s - poisson.ttft_s, 3 * md1(w, rho), 1e-9);
	g_assert_cmpfloat(bursty.ttft_ratio, >, poisson.ttft_ratio);
	g_assert_cmpfloat(bursty.tpot_s, ==, poisson.tpot_s);
	g_assert_cmpfloat(bursty.decode_load, ==, poisson.decode_load);
	for (size_t i = 0; i < G_N_ELEMENTS(as_poisson); i++) {
		q.arrival_dispersion = as_poisson[i];
		r = price(&e, &q);
		g_assert_cmpfloat(r.ttft_s, ==, poisson.ttft_s);
	}
	/* Huge: finite all the same. */
	q.arrival_dispersion = INFINITY;
	r = price(&e, &q);
	g_assert_cmpfloat(r.ttft_s, >, bursty.ttft_s);
	env_clear(&e);
}

/* Spec 7.5: adjacent splits compare by their projected SLO ratios: with
 * prefill demand, one more prefill engine lowers the TTFT ratio; with
 * decode demand, one more decode engine lowers the TPOT ratio. */
static void
test_more_engines_lower_ratio(void)
{
	struct env e;
	struct narwhal_split_query q1 = query(1, 2, 2, 1000, 200), q2 = query(2, 2, 2, 1000, 200);
	struct narwhal_split_query d1 = query(2, 1, 2, 1000, 200), d2 = query(2, 2, 2, 1000, 200);
	struct narwhal_split_price a, b;

	env_init(&e, true);
	a = price(&e, &q1);
	b = price(&e, &q2);
	g_assert_cmpfloat(b.ttft_ratio, <, a.ttft_ratio);
	g_assert_cmpfloat(b.prefill_load, <, a.prefill_load);
	g_assert_cmpfloat(b.tpot_ratio, ==, a.tpot_ratio); /* the decode side is the same */
	a = price(&e, &d1);
	b = price(&e, &d2);
	g_assert_true(a.in_domain); /* neither is overloaded */
	g_assert_cmpfloat(b.tpot_ratio, <, a.tpot_ratio);
	g_assert_cmpfloat(b.decode_load, <, a.decode_load);
	g_assert_cmpfloat(b.worst_ratio, <=, a.worst_ratio);
	env_clear(&e);
}

/* plugin-abi.h, struct narwhal_split_price: "an overloaded phase has a
 * finite ratio that grows with the overload, so two overloaded splits
 * still compare". Past the usable batch (utilization * the largest batch
 * measured) the interval there is stretched by rho_d = offered / usable;
 * past the knee the prefill wait goes on along the M/D/1 tangent. An
 * overloaded decode phase is outside the measured domain (spec 7.3). */
static void
test_overload_finite_ordered(void)
{
	struct env e;
	struct narwhal_split_query q = query(1, 1, 10, 1000, 100);
	struct narwhal_split_price r, more;
	double cap = 0.8 * 64, at_cap = interval(cap, 1050), rho_d = 1000 * at_cap / cap;
	double w = charge(1000), rho = 10 * w / 0.8;

	env_init(&e, true);
	r = price(&e, &q);
	g_assert_cmpfloat(rho_d, >, 1);
	g_assert_cmpfloat_with_epsilon(r.tpot_s, at_cap * rho_d, 1e-9);
	g_assert_cmpfloat(rho, >, 1);
	g_assert_cmpfloat_with_epsilon(r.ttft_s - r.tpot_s - own(1000),
	                               w * 0.9 / 0.2 + w / 0.02 * (rho - 0.9), 1e-6);
	g_assert_false(r.in_domain);
	/* more overload: a larger, still finite price */
	q.arrivals_per_s = 20;
	more = price(&e, &q);
	g_assert_cmpfloat(more.tpot_ratio, >, r.tpot_ratio);
	g_assert_cmpfloat(more.ttft_ratio, >, r.ttft_ratio);
	/* two overloaded splits order by their overload */
	for (uint32_t k = 1; k < 4; k++) {
		struct narwhal_split_query a = query(k, k, 40, 1000, 100);
		struct narwhal_split_query b = query(k + 1, k + 1, 40, 1000, 100);
		struct narwhal_split_price pa = price(&e, &a), pb = price(&e, &b);

		g_assert_false(pa.in_domain);
		g_assert_cmpfloat(pb.ttft_ratio, <, pa.ttft_ratio);
		g_assert_cmpfloat(pb.tpot_ratio, <, pa.tpot_ratio);
	}
	/* continuous at the edge: just below it the batch is at the cap */
	q.arrivals_per_s = cap / (100 * at_cap) * (1 - 1e-9);
	r = price(&e, &q);
	g_assert_cmpfloat_with_epsilon(r.tpot_s, at_cap, 1e-6);
	q.arrivals_per_s = cap / (100 * at_cap) * (1 + 1e-9);
	more = price(&e, &q);
	g_assert_cmpfloat_with_epsilon(more.tpot_s, at_cap, 1e-6);
	env_clear(&e);
}

/* Spec 7.5 (the projections that decide must compare across demand): every
 * ratio is non-decreasing in the arrival rate, strictly increasing for
 * TTFT once there is demand, across the knee and into overload. */
static void
test_monotone_in_arrivals(void)
{
	struct env e;
	struct narwhal_split_price last = { 0 };

	env_init(&e, true);
	for (int i = 0; i <= 400; i++) {
		struct narwhal_split_query q = query(2, 2, i * 0.05, 1500, 300);
		struct narwhal_split_price r = price(&e, &q);

		if (i > 0) {
			g_assert_cmpfloat(r.ttft_ratio, >, last.ttft_ratio);
			g_assert_cmpfloat(r.tpot_ratio, >=, last.tpot_ratio);
			g_assert_cmpfloat(r.worst_ratio, >=, last.worst_ratio);
			g_assert_cmpfloat(r.prefill_load, >, last.prefill_load);
			g_assert_cmpfloat(r.decode_load, >=, last.decode_load);
		}
		last = r;
	}
	/* the sweep went past the knee and into overload on both sides */
	g_assert_false(last.in_domain);
	g_assert_cmpfloat(last.tpot_ratio, >, 10);
	g_assert_cmpfloat(last.ttft_ratio, >, 4);
	env_clear(&e);
}

/* The role-control document, "Prefill queue projections": the prefill work
 * the live pool holds now (resident less progress, queued, admitted and
 * not yet placed) is ahead of every prompt, and drains over the split's p
 * prefill engines. Held work on an engine outside the live pool is not the
 * pool's. */
static void
test_backlog_spreads_over_p(void)
{
	struct env e;
	struct nw_price_hold h[4] = { 0 };
	struct narwhal_split_query q1 = query(1, 2, 0, 1000, 200), q2 = query(2, 2, 0, 1000, 200);
	struct narwhal_split_price idle, a, b;
	double held;

	env_init(&e, true);
	idle = price(&e, &q1);
	nw_pricing_pending(e.f, &h[0], 2000);
	nw_pricing_pending(e.f, &h[1], 1000);
	nw_pricing_queued(e.f, &h[1], 1);
	nw_pricing_pending(e.f, &h[2], 3000);
	nw_pricing_resident(e.f, &h[2], 0, T0);
	e.f->engines[0].resident_prefill++;
	held = charge(2000) + charge(1000) + charge(3000);
	/* the pool holds it all now, whatever the clock */
	a = price(&e, &q1);
	b = price(&e, &q2);
	g_assert_cmpfloat_with_epsilon(a.ttft_s - idle.ttft_s, held, 1e-6);
	g_assert_cmpfloat_with_epsilon(b.ttft_s - idle.ttft_s, held / 2, 1e-6);
	g_assert_cmpfloat_with_epsilon(a.prefill_load - idle.prefill_load, held / TTFT, 1e-6);
	/* 100 ms on: the resident one progressed */
	a = price_at(&e, &q1, T0 + 100 * MS);
	g_assert_cmpfloat_with_epsilon(a.ttft_s - idle.ttft_s, held - 0.1, 1e-6);
	/* the same instant again after the ledger moved: priced anew */
	nw_pricing_release(e.f, &h[0]);
	a = price_at(&e, &q1, T0 + 100 * MS);
	g_assert_cmpfloat_with_epsilon(a.ttft_s - idle.ttft_s, held - 0.1 - charge(2000), 1e-6);
	/* p1 leaves the live pool: its queued work is not the pool's */
	e.f->engines[1].flags &= ~(uint32_t)NARWHAL_ENGINE_AVAILABLE;
	nw_fleet_changed(e.f);
	a = price_at(&e, &q1, T0 + 100 * MS);
	g_assert_cmpfloat_with_epsilon(a.ttft_s - idle.ttft_s, charge(3000) - 0.1, 1e-6);
	e.f->engines[0].resident_prefill--;
	nw_pricing_release(e.f, &h[1]);
	nw_pricing_release(e.f, &h[2]);
	env_clear(&e);
}

/* Spec 7.6: "candidate pricing ... includes resident plus pending decode
 * work": decode_streams / d streams per engine is a floor on the batch. */
static void
test_decode_streams_floor(void)
{
	struct env e;
	struct narwhal_split_query q = query(2, 1, 0, 1000, 200);
	struct narwhal_split_price idle, held, spread;

	env_init(&e, true);
	idle = price(&e, &q);
	q.decode_streams = 40;
	held = price(&e, &q);
	g_assert_cmpfloat_with_epsilon(held.tpot_s, interval(40, 1100), 1e-9);
	g_assert_cmpfloat(held.tpot_ratio, >, idle.tpot_ratio);
	g_assert_cmpfloat(held.decode_load, >, 0);
	/* the same work over two decode engines */
	q.decode = 2;
	spread = price(&e, &q);
	g_assert_cmpfloat_with_epsilon(spread.tpot_s, interval(20, 1100), 1e-9);
	/* under demand that alone would batch fewer, the floor holds */
	q.arrivals_per_s = 0.5;
	spread = price(&e, &q);
	g_assert_cmpfloat_with_epsilon(spread.tpot_s, interval(20, 1100), 1e-9);
	env_clear(&e);
}

/* Spec 7.7: "Recent token intervals apply a bounded correction to the
 * profile estimate": the mean correction of the live decode engines
 * multiplies the decode interval (prefill engines' corrections are not
 * theirs to give). */
static void
test_decode_correction(void)
{
	struct env e;
	struct narwhal_split_query q = query(2, 2, 0, 1000, 200);
	struct narwhal_split_price r;

	env_init(&e, true);
	e.f->ledger[0].correction = 2.0;
	e.f->ledger[2].correction = 1.5;
	e.f->ledger[3].correction = 0.5;
	nw_pricing_pass(e.f, T0);
	r = price(&e, &q);
	g_assert_cmpfloat_with_epsilon(r.tpot_s, interval(0, 0) * 1.0, EPS);
	e.f->ledger[3].correction = 1.5;
	e.f->engines[2].flags &= ~(uint32_t)NARWHAL_ENGINE_AVAILABLE;
	nw_fleet_changed(e.f);
	r = price(&e, &q);
	g_assert_cmpfloat_with_epsilon(r.tpot_s, interval(0, 0) * 1.5, EPS);
	g_assert_cmpfloat(r.decode_load, ==, 0); /* the floor is corrected alike */
	env_clear(&e);
}

/* Spec 7.3: a split is in the measured domain when the mean prompt lies
 * inside the measured prefill lengths, the decode batch per engine inside
 * the measured decode grid (active count and KV tokens), and the KV
 * capacity holds the decode work held now. */
static void
test_domain(void)
{
	struct env e;
	struct narwhal_split_query q = query(2, 2, 0, 1000, 200);
	struct narwhal_split_price r;

	env_init(&e, true);
	g_assert_true(price(&e, &q).in_domain);
	/* a prompt longer than measured: the model extrapolates, out of domain */
	q.prompt_tokens = 5000;
	r = price(&e, &q);
	g_assert_false(r.in_domain);
	g_assert_cmpfloat_with_epsilon(r.ttft_s, own(5000) + interval(0, 0), EPS);
	q.prompt_tokens = 4096; /* the upper edge is inside */
	g_assert_true(price(&e, &q).in_domain);
	/* the held decode work: 2 * 60 streams, 60 per engine, beyond 64 * 0.8
	 * usable but inside the 64 measured: priced, in domain */
	q.prompt_tokens = 1000;
	q.decode_streams = 120;
	r = price(&e, &q);
	g_assert_true(r.in_domain);
	g_assert_cmpfloat_with_epsilon(r.tpot_s, interval(60, 1100), 1e-9);
	/* 66 per engine: more active than measured */
	q.decode_streams = 132;
	g_assert_false(price(&e, &q).in_domain);
	/* 40 per engine of 3000 tokens: more KV than measured */
	q.decode_streams = 80;
	q.prompt_tokens = 2500;
	q.output_tokens = 1000;
	g_assert_false(price(&e, &q).in_domain);
	q.decode_streams = 40;
	g_assert_true(price(&e, &q).in_domain);
	/* KV capacity: 20 streams of 3500 tokens per engine need 70000 */
	for (uint32_t i = 0; i < 4; i++)
		e.prof[i].kv_capacity_tokens = 69999;
	profiles_changed(&e);
	g_assert_false(price(&e, &q).in_domain);
	/* 39 streams over 2: the busiest engine holds 20 of them */
	q.decode_streams = 39;
	g_assert_false(price(&e, &q).in_domain);
	q.decode_streams = 40;
	for (uint32_t i = 0; i < 4; i++)
		e.prof[i].kv_capacity_tokens = 70000;
	profiles_changed(&e);
	g_assert_true(price(&e, &q).in_domain);
	/* 41 streams over 2: 21 on the busiest */
	q.decode_streams = 41;
	g_assert_false(price(&e, &q).in_domain);
	env_clear(&e);
}

/* Spec 7.3 and the usable batch: the KV capacity bounds the batch a
 * decode engine can take (utilization of it), so demand beyond it is an
 * overload, out of the domain. */
static void
test_kv_capacity_caps_batch(void)
{
	struct env e;
	struct narwhal_split_query q = query(2, 1, 0.5, 1000, 200);
	struct narwhal_split_price roomy, tight;

	env_init(&e, true);
	roomy = price(&e, &q);
	g_assert_true(roomy.in_domain);
	/* room for 0.8 * 3600 / 1200 = 2.4 streams: far below the steady batch */
	for (uint32_t i = 0; i < 4; i++)
		e.prof[i].kv_capacity_tokens = 3600;
	profiles_changed(&e);
	tight = price(&e, &q);
	g_assert_false(tight.in_domain);
	g_assert_cmpfloat(tight.tpot_ratio, >, roomy.tpot_ratio);
	env_clear(&e);
}

/* The role-control document's urgent evaluation ("rechecks the current
 * queue", "compares projected service for the request that triggered the
 * evaluation"): the prompt is priced where predictive admission would
 * place it, the live prefill engine that serves it soonest (its queue
 * included), then the first decode step; a split with more prefill engines
 * than the live pool adds an idle one; without a live engine that can
 * price it, the held work spread over the split's engines. */
static void
test_urgent_projection(void)
{
	struct env e;
	struct nw_price_hold h0 = { 0 }, h1 = { 0 };
	struct narwhal_split_query q = query(2, 2, 0, 1000, 200);
	struct narwhal_split_price live, more;
	double best, q0, q1;

	env_init(&e, true);
	/* p0 holds 3000 tokens, p1 1000: p1 is the soonest. */
	nw_pricing_pending(e.f, &h0, 3000);
	nw_pricing_resident(e.f, &h0, 0, T0);
	e.f->engines[0].resident_prefill++;
	nw_pricing_pending(e.f, &h1, 1000);
	nw_pricing_resident(e.f, &h1, 1, T0);
	e.f->engines[1].resident_prefill++;
	q.urgent_prompt_tokens = 4000;
	g_assert_cmpint(nw_pricing_prefill_queue_s(e.f, 0, 4000, T0, &q0), ==, NARWHAL_ESTIMATE_OK);
	g_assert_cmpint(nw_pricing_prefill_queue_s(e.f, 1, 4000, T0, &q1), ==, NARWHAL_ESTIMATE_OK);
	g_assert_cmpfloat(q1, <, q0);
	g_assert_cmpint(nw_pricing_pool_best_queue_s(e.f, 4000, T0, &best), ==,
	                NARWHAL_ESTIMATE_OK);
	g_assert_cmpfloat(best, ==, q1);
	g_assert_cmpfloat(q1, >=, charge(1000) + own(4000) - 1e-9);
	live = price(&e, &q);
	g_assert_cmpfloat_with_epsilon(live.urgent_ttft_s, q1 + live.tpot_s, 1e-9);
	/* one more prefill engine: it starts idle */
	q.prefill = 3;
	q.decode = 1;
	more = price(&e, &q);
	g_assert_cmpfloat_with_epsilon(more.urgent_ttft_s, own(4000) + more.tpot_s, 1e-9);
	g_assert_cmpfloat(more.urgent_ttft_s - more.tpot_s, <, live.urgent_ttft_s - live.tpot_s);
	/* a prompt whose prefill alone exceeds the target: an idle engine
	 * still spares it the queue, and no more */
	q.urgent_prompt_tokens = 30000;
	more = price(&e, &q);
	g_assert_cmpfloat_with_epsilon(more.urgent_ttft_s, own(30000) + more.tpot_s, 1e-9);
	g_assert_cmpfloat(more.urgent_ttft_s, >, TTFT);
	/* no live engine can price it (both decoding, the single-phase
	 * region): the held work over the split's engines */
	e.f->engines[0].resident_decode = 1;
	e.f->engines[1].resident_decode = 1;
	q.urgent_prompt_tokens = 4000;
	q.prefill = 2;
	q.decode = 2;
	g_assert_cmpint(nw_pricing_pool_best_queue_s(e.f, 4000, T0, &best), ==,
	                NARWHAL_ESTIMATE_NO_PROFILE);
	live = price(&e, &q);
	g_assert_cmpfloat_with_epsilon(live.urgent_ttft_s, (charge(3000) + charge(1000)) / 2 +
	                               own(4000) + live.tpot_s, 1e-6);
	e.f->engines[0].resident_decode = 0;
	e.f->engines[1].resident_decode = 0;
	e.f->engines[0].resident_prefill--;
	e.f->engines[1].resident_prefill--;
	nw_pricing_release(e.f, &h0);
	nw_pricing_release(e.f, &h1);
	env_clear(&e);
}

/* A measured handoff (docs/profiles.md) is part of the prompt's own price;
 * a prompt longer than the longest handoff measured is out of domain. */
static void
test_handoff(void)
{
	struct env e;
	struct narwhal_split_query q = query(2, 2, 0, 1000, 200);
	struct narwhal_split_price r;

	env_init(&e, true);
	for (uint32_t i = 0; i < 4; i++)
		e.prof[i].handoff = (struct nw_handoff_profile){ .setup_s = 0.002,
			                                             .per_token_s = 1e-6,
			                                             .max_tokens = 2000, .samples = 4 };
	profiles_changed(&e);
	r = price(&e, &q);
	g_assert_cmpfloat_with_epsilon(r.ttft_s, own(1000) + 0.003 + interval(0, 0), EPS);
	g_assert_true(r.in_domain);
	q.prompt_tokens = 3000;
	g_assert_false(price(&e, &q).in_domain);
	env_clear(&e);
}

/* core/split-price.h: NO_PROFILE without a mean profile or for a query
 * without sense, *out untouched; OK otherwise (lambda 0 included). */
static void
test_no_profile(void)
{
	struct env e;
	struct narwhal_split_price out = { .ttft_s = -7 };
	struct narwhal_split_query q = query(2, 2, 1, 1000, 200);
	static const struct {
		const char *what;
		uint32_t p, d;
		double lambda, l, o, u;
	} bad[] = {
		{ "no prefill engine", 0, 2, 1, 1000, 200, 0.8 },
		{ "no decode engine", 2, 0, 1, 1000, 200, 0.8 },
		{ "utilization 0", 2, 2, 1, 1000, 200, 0 },
		{ "utilization above 1", 2, 2, 1, 1000, 200, 1.01 },
		{ "utilization NaN", 2, 2, 1, 1000, 200, NAN },
		{ "negative demand", 2, 2, -1, 1000, 200, 0.8 },
		{ "infinite demand", 2, 2, INFINITY, 1000, 200, 0.8 },
		{ "NaN demand", 2, 2, NAN, 1000, 200, 0.8 },
		{ "negative prompt", 2, 2, 1, -1, 200, 0.8 },
		{ "infinite prompt", 2, 2, 1, INFINITY, 200, 0.8 },
		{ "NaN output", 2, 2, 1, 1000, NAN, 0.8 },
		{ "negative output", 2, 2, 1, 1000, -5, 0.8 },
	};

	env_init(&e, false);
	g_assert_cmpint(nw_split_price(e.f, &q, T0, &out), ==, NARWHAL_ESTIMATE_NO_PROFILE);
	g_assert_cmpfloat(out.ttft_s, ==, -7);
	env_clear(&e);

	/* profiles whose decode grids do not overlap: no mean can be made */
	env_init(&e, true);
	e.prof[0].decode.min_active = 65;
	e.prof[0].decode.max_active = 128;
	profiles_changed(&e);
	g_assert_cmpint(nw_split_price(e.f, &q, T0, &out), ==, NARWHAL_ESTIMATE_NO_PROFILE);
	e.prof[0] = profile();
	profiles_changed(&e);
	for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
		struct narwhal_split_query b = query(bad[i].p, bad[i].d, bad[i].lambda, bad[i].l,
		                                     bad[i].o);

		b.utilization = bad[i].u;
		g_test_message("%s", bad[i].what);
		g_assert_cmpint(nw_split_price(e.f, &b, T0, &out), ==, NARWHAL_ESTIMATE_NO_PROFILE);
		g_assert_cmpfloat(out.ttft_s, ==, -7);
	}
	/* at the edges of sense: utilization 1, no demand, empty requests */
	q = query(1, 1, 0, 0, 0);
	q.utilization = 1;
	g_assert_cmpint(nw_split_price(e.f, &q, T0, &out), ==, NARWHAL_ESTIMATE_OK);
	g_assert_cmpfloat_with_epsilon(out.ttft_s, own(1) + interval(0, 0), EPS);
	/* absurd but finite sizes and demand: finite prices */
	q = query(1, 1, 1e300, 1e300, 1e300);
	q.urgent_prompt_tokens = UINT64_MAX;
	g_assert_cmpint(nw_split_price(e.f, &q, T0, &out), ==, NARWHAL_ESTIMATE_OK);
	g_assert_true(isfinite(out.worst_ratio) && isfinite(out.urgent_ttft_s));
	g_assert_false(out.in_domain);
	/* the least usable fraction there is (controller.reactive.utilization
	 * takes any number above 0): still finite */
	q.utilization = 1e-300;
	g_assert_cmpint(nw_split_price(e.f, &q, T0, &out), ==, NARWHAL_ESTIMATE_OK);
	g_assert_true(isfinite(out.ttft_s) && isfinite(out.worst_ratio) &&
	              isfinite(out.prefill_load) && isfinite(out.urgent_ttft_s));
	env_clear(&e);
}

static int64_t
fake_clock(void *data)
{
	return *(const int64_t *)data;
}

/* plugin-abi.h, price_split: the host service answers nw_split_price at
 * the host clock, reading the query up to its struct_size. */
static void
test_host_service(void)
{
	struct env e;
	struct nw_host *host;
	const struct narwhal_host *t;
	struct nw_price_hold h = { 0 };
	struct narwhal_split_query q = query(1, 2, 0, 1000, 200);
	struct narwhal_split_price direct, served = { .struct_size = sizeof served };
	int64_t now = T0 + 50 * MS;

	env_init(&e, true);
	host = nw_host_new(NARWHAL_KIND_CONTROLLER, "test", fake_clock, &now, e.f, NULL);
	t = nw_host_table(host);
	nw_pricing_pending(e.f, &h, 2000);
	nw_pricing_resident(e.f, &h, 0, T0);
	e.f->engines[0].resident_prefill++;
	g_assert_nonnull(t->price_split);
	direct = price_at(&e, &q, now);
	g_assert_cmpint(t->price_split(t->host_ctx, &q, &served), ==, NARWHAL_ESTIMATE_OK);
	g_assert_cmpfloat(served.ttft_s, ==, direct.ttft_s);
	g_assert_cmpfloat(served.tpot_s, ==, direct.tpot_s);
	g_assert_cmpfloat(served.worst_ratio, ==, direct.worst_ratio);
	g_assert_cmpfloat(served.prefill_load, ==, direct.prefill_load);
	g_assert_cmpfloat(served.decode_load, ==, direct.decode_load);
	g_assert_true(isnan(served.urgent_ttft_s));
	g_assert_true(served.in_domain == direct.in_domain);
	/* the clock is the host's: 50 ms of progress on the resident */
	g_assert_cmpfloat_with_epsilon(served.ttft_s, charge(2000) - 0.05 + own(1000) +
	                               interval(0, 0), 1e-6);
	/* a query that ends before arrival_dispersion is priced as Poisson */
	q = query(1, 2, 1, 1000, 200);
	direct = price_at(&e, &q, now);
	q.arrival_dispersion = 4;
	q.struct_size = offsetof(struct narwhal_split_query, arrival_dispersion);
	g_assert_cmpint(t->price_split(t->host_ctx, &q, &served), ==, NARWHAL_ESTIMATE_OK);
	g_assert_cmpfloat(served.ttft_s, ==, direct.ttft_s);
	q.struct_size = sizeof q;
	g_assert_cmpint(t->price_split(t->host_ctx, &q, &served), ==, NARWHAL_ESTIMATE_OK);
	g_assert_cmpfloat(served.ttft_s, >, direct.ttft_s);
	/* a query that ends before the split's sizes makes no sense */
	q.struct_size = offsetof(struct narwhal_split_query, decode);
	served.ttft_s = -7;
	g_assert_cmpint(t->price_split(t->host_ctx, &q, &served), ==,
	                NARWHAL_ESTIMATE_NO_PROFILE);
	g_assert_cmpfloat(served.ttft_s, ==, -7);
	e.f->engines[0].resident_prefill--;
	nw_pricing_release(e.f, &h);
	nw_host_free(host);
	env_clear(&e);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/split-price/idle", test_idle);
	g_test_add_func("/split-price/steady-state", test_steady_state);
	g_test_add_func("/split-price/issue-13/arrival-dispersion", test_arrival_dispersion);
	g_test_add_func("/split-price/more-engines-lower-ratio", test_more_engines_lower_ratio);
	g_test_add_func("/split-price/overload-finite-ordered", test_overload_finite_ordered);
	g_test_add_func("/split-price/monotone-in-arrivals", test_monotone_in_arrivals);
	g_test_add_func("/split-price/backlog-spreads-over-p", test_backlog_spreads_over_p);
	g_test_add_func("/split-price/decode-streams-floor", test_decode_streams_floor);
	g_test_add_func("/split-price/decode-correction", test_decode_correction);
	g_test_add_func("/split-price/domain", test_domain);
	g_test_add_func("/split-price/kv-capacity-caps-batch", test_kv_capacity_caps_batch);
	g_test_add_func("/split-price/urgent-projection", test_urgent_projection);
	g_test_add_func("/split-price/handoff", test_handoff);
	g_test_add_func("/split-price/no-profile", test_no_profile);
	g_test_add_func("/split-price/host-service", test_host_service);
	return g_test_run();
}
