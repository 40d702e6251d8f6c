/*
 * Pricing a prefill/decode split (core/split-price.h; docs/controller.md,
 * "How a split is priced"; spec 7.1, 7.3, 7.5 to 7.7).
 *
 * Everything is priced on the fleet's mean profile M (spec 7.7: one
 * hardware and TP shape). The prefill side is a queue per prefill engine
 * fed at lambda / p, whose service is the throughput charge of a mean
 * prompt (nw_pricing_work_ns), behind the prefill work the live pool holds
 * now spread over the p engines. Its wait is the M/D/1 wait scaled by the
 * arrivals' index of dispersion, as Kingman's approximation scales a
 * queue's wait with the squared variation of its arrivals: bursts wait
 * longer than Poisson arrivals of the same mean rate. The decode side is
 * the steady batch of a decode engine (Little's law against the decode
 * interval it causes), bounded by the usable batch, with the decode work
 * held now as its floor.
 * Overload is priced past its edge by a finite figure that grows with it,
 * so two overloaded splits still compare.
 */
#include "build-config.h"

#include "core/split-price.h"

#include <math.h>

#include <glib.h>

#include "core/estimate.h"
#include "core/host.h"
#include "core/pricing.h"

/* Token counts beyond this are priced as this: far past any measured
 * domain, and small enough that squares stay finite. */
#define TOKENS_MAX 1e12
/* Demand beyond this is priced as this (requests per second). */
#define ARRIVALS_MAX 1e12
/* The prefill utilization up to which the M/D/1 wait holds; beyond it
 * the wait goes on along its tangent there. */
#define RHO_KNEE 0.9
/* Prefill utilizations beyond this are priced as this: far past any
 * overload worth telling apart, and the wait stays finite however small
 * the usable fraction u. */
#define RHO_MAX 1e15
/* Dispersions beyond this are priced as this (a demand horizon's own is
 * below its arrivals: all of them in one bucket). */
#define DISPERSION_MAX 1e6
/* Bisection steps for the decode batch: the usable batch (at most
 * UINT32_MAX) over 2^64 is far below one stream. */
#define BISECT_STEPS 64

/* What the decode side of a split works with. */
struct decode_model {
	const struct nw_decode_profile *d;
	double correction;   /* the live decode engines' mean */
	double kv_per_stream; /* resident KV tokens of a stream, on average */
};

/* M's prefill of a prompt of l tokens on an idle engine, and the handoff
 * when M measured one; *in_domain cleared when l lies beyond what M
 * measured (priced by the model all the same). Below the measured domain:
 * its lower edge, an upper bound. */
static double
own_prefill_s(const struct nw_engine_profile *m, double l, bool *in_domain)
{
	const struct nw_prefill_profile *pf = &m->prefill;
	double s;

	if (nw_estimate_prefill_s(m, (uint64_t)l, &s) != NARWHAL_ESTIMATE_OK) {
		*in_domain = false;
		s = pf->a_s + pf->b_s * l + pf->c_s * l * l;
	}
	s = MAX(s, 0);
	if (m->handoff.samples > 0) {
		if (l > (double)m->handoff.max_tokens)
			*in_domain = false;
		s += MAX(m->handoff.setup_s + m->handoff.per_token_s * l, 0);
	}
	return s;
}

/* The queueing wait of a prefill at utilization rho, W the service of one
 * request: the M/D/1 form W*rho / (2*(1 - rho)) up to RHO_KNEE, then on
 * along its tangent there, finite and strictly increasing. */
static double
prefill_wait_s(double w, double rho)
{
	double at_knee = w * RHO_KNEE / (2 * (1 - RHO_KNEE));
	double slope = w / (2 * (1 - RHO_KNEE) * (1 - RHO_KNEE));

	if (rho <= RHO_KNEE)
		return w * rho / (2 * (1 - rho));
	return at_knee + slope * (rho - RHO_KNEE);
}

/* The decode interval with n streams per engine (n real: a mean batch),
 * corrected: M's model at n active and n streams' KV tokens, below the
 * measured grid at its lower edge, above it extrapolated. */
static double
interval_s(const struct decode_model *dm, double n)
{
	const struct nw_decode_profile *d = dm->d;
	double kv = MAX(n * dm->kv_per_stream, (double)d->min_kv_tokens);
	double active = MAX(n, (double)d->min_active);

	return MAX(d->d0_s + d->d1_s * kv + d->d2_s * active, 0) * dm->correction;
}

/* The steady batch per decode engine: n with n = c * interval(n), c the
 * stream-seconds per second of interval (lambda / d * O), searched on
 * [0, cap]. false when none lies there (the phase is overloaded). */
static bool
steady_batch(const struct decode_model *dm, double c, double cap, double *out)
{
	double lo = 0, hi = cap;

	if (cap - c * interval_s(dm, cap) < 0)
		return false;
	/* n - c * interval(n) is concave (the interval is convex in n) and not
	 * positive at 0: its root below cap is where it turns non-negative. */
	for (int i = 0; i < BISECT_STEPS && hi - lo > 0; i++) {
		double mid = (lo + hi) / 2;

		if (mid - c * interval_s(dm, mid) >= 0)
			hi = mid;
		else
			lo = mid;
	}
	*out = hi;
	return true;
}

/* The urgent prompt's wait and prefill on split q (the role-control
 * document's urgent evaluation "rechecks the current queue"): where
 * predictive admission priced it, the live prefill engine that would
 * serve it soonest, its queue and the protection of what waits there
 * included; on a split with more prefill engines than the live pool, an
 * engine that joins it starts idle. Without a live engine that can price
 * it, the held work spread over the split's engines, then its own. */
static double
urgent_prefill_s(struct nw_fleet *fleet, const struct nw_engine_profile *m,
                 const struct narwhal_split_query *q, double held, int64_t now_ns)
{
	bool ignored = true;
	double fresh = own_prefill_s(m, MIN((double)q->urgent_prompt_tokens, TOKENS_MAX), &ignored);
	double best;

	if (nw_pricing_pool_best_queue_s(fleet, q->urgent_prompt_tokens, now_ns, &best) !=
	    NARWHAL_ESTIMATE_OK)
		best = held / q->prefill + fresh;
	if (q->prefill > nw_pricing_pool_size(fleet))
		best = MIN(best, fresh);
	return best;
}

/* The query's arrival dispersion as priced: 1 (Poisson) when below 1,
 * absent or not finite. */
static double
dispersion_of(const struct narwhal_split_query *q)
{
	if (!(q->arrival_dispersion > 1))
		return 1;
	return MIN(q->arrival_dispersion, DISPERSION_MAX);
}

/* Whether the query makes sense (core/split-price.h). */
static bool
query_valid(const struct narwhal_split_query *q)
{
	return q->prefill > 0 && q->decode > 0 && q->utilization > 0 && q->utilization <= 1 &&
	       isfinite(q->arrivals_per_s) && q->arrivals_per_s >= 0 &&
	       isfinite(q->prompt_tokens) && q->prompt_tokens >= 0 &&
	       isfinite(q->output_tokens) && q->output_tokens >= 0;
}

narwhal_estimate_status
nw_split_price(struct nw_fleet *fleet, const struct narwhal_split_query *q, int64_t now_ns,
               struct narwhal_split_price *out)
{
	const struct nw_engine_profile *m;
	const double tt = fleet->view.ttft_target_s, tp = fleet->view.tpot_target_s;
	struct narwhal_split_price r = { .struct_size = sizeof r };
	struct decode_model dm;
	double lambda, l, o, u, p, d, w, own, rho_p, wait, held;
	double c, cap, n, floor_n, batch, tpot, idle;
	bool in_domain = true, overloaded;

	if (q == NULL || !query_valid(q) || !(tt > 0) || !(tp > 0) ||
	    (m = nw_pricing_mean(fleet)) == NULL)
		return NARWHAL_ESTIMATE_NO_PROFILE;
	lambda = MIN(q->arrivals_per_s, ARRIVALS_MAX);
	l = MAX(round(MIN(q->prompt_tokens, TOKENS_MAX)), 1);
	o = MAX(MIN(q->output_tokens, TOKENS_MAX), 1);
	u = q->utilization;
	p = q->prefill;
	d = q->decode;

	/* Decode: the steady batch per engine, its interval. */
	dm.d = &m->decode;
	dm.correction = nw_pricing_decode_correction(fleet);
	dm.kv_per_stream = l + o / 2;
	c = lambda / d * o;
	cap = u * (double)m->decode.max_active;
	if (m->kv_capacity_tokens > 0)
		cap = MIN(cap, u * (double)m->kv_capacity_tokens / (l + o));
	floor_n = (double)q->decode_streams / d;
	overloaded = !steady_batch(&dm, c, cap, &n);
	if (overloaded) {
		/* Past the usable batch: the interval at it, stretched by how far
		 * the offered streams exceed it (rho_d > 1), or at the held work
		 * when that alone is more. A cap below any stream (no KV room for
		 * one) is taken as 2^-20 of one: a vast price, still finite. */
		double at = MAX(cap, 1.0 / (1 << 20));
		double rho_d = c * interval_s(&dm, at) / at;

		batch = MAX(cap, floor_n);
		tpot = MAX(interval_s(&dm, at) * rho_d, interval_s(&dm, batch));
	} else {
		batch = MAX(n, floor_n);
		tpot = interval_s(&dm, batch);
	}
	/* Spec 7.1's idle floor: M's zero-contention interval (the grid's
	 * lower edge), corrected. */
	idle = interval_s(&dm, 0);

	/* Prefill: the held work over p engines, the queueing wait, its own. */
	w = (double)nw_pricing_work_ns(m, (uint64_t)l) / 1e9;
	own = own_prefill_s(m, l, &in_domain);
	rho_p = MIN(lambda * w / (p * u), RHO_MAX);
	wait = prefill_wait_s(w, rho_p) * dispersion_of(q);
	held = nw_pricing_pool_backlog_s(fleet, now_ns);

	r.tpot_s = tpot;
	r.ttft_s = held / p + wait + own + tpot;
	r.ttft_ratio = r.ttft_s / tt;
	r.tpot_ratio = tpot / tp;
	r.worst_ratio = MAX(r.ttft_ratio, r.tpot_ratio);
	r.prefill_load = (held / p + wait + own) / tt;
	r.decode_load = nw_pricing_decode_load_of(tpot, idle, tp);
	r.urgent_ttft_s = NAN;
	if (q->urgent_prompt_tokens > 0)
		r.urgent_ttft_s = urgent_prefill_s(fleet, m, q, held, now_ns) + tpot;

	/* Spec 7.3: the batch inside M's decode domain, the decode work held
	 * now inside the KV capacity (the busiest engine holds the ceiling). */
	if (overloaded || batch > (double)m->decode.max_active ||
	    batch * dm.kv_per_stream > (double)m->decode.max_kv_tokens)
		in_domain = false;
	if (m->kv_capacity_tokens > 0 &&
	    ceil(floor_n) * (l + o) > (double)m->kv_capacity_tokens)
		in_domain = false;
	r.in_domain = in_domain;
	*out = r;
	return NARWHAL_ESTIMATE_OK;
}
