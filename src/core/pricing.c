/*
 * Pricing work on the fleet (core/pricing.h; docs/profiles.md, "How the
 * router uses the store").
 *
 * The prefill ledger. A request's prefill work is charged in exactly one
 * place at a time, which its hold records:
 *
 *   admitted or admission-queued  -> the pool (pending), on the mean profile
 *   waiting for an engine's slots -> that engine's queued work
 *   holding a prefill slot        -> that engine's resident work
 *   prefilled, ended              -> nowhere
 *
 * A failure, cancel or retry before the prefill completed puts it back in
 * the pool; the request's end takes it out wherever it is. Amounts on an
 * engine are priced on that engine's profile (on the mean one when it has
 * none).
 *
 * The FIFO projection (plugin-abi.h, prefill_queue_seconds; the
 * role-control document, "Prefill queue projections") serves the engine's
 * work in order, one prompt after the other: the resident work less the
 * progress made on it since the engine last completed a prefill (or since
 * work came to it idle), the queued work, the engine's share of the
 * pool's work, then the prompt's own prefill and, when the profile measured
 * it, the handoff. An engine prefills several prompts per step in practice
 * (narwhal-sim: a + b*sum(L) + c*sum(L^2) per step), paying the step's
 * fixed cost once: the serial sum is the conservative side of that.
 */
#include "build-config.h"

#include "core/pricing.h"

#include <math.h>
#include <string.h>

#include <glib.h>

#include "core/estimate.h"
#include "core/host.h"

void
nw_pricing_init(struct nw_fleet *f, double correction_min, double correction_max,
                double correction_alpha, uint32_t correction_min_samples)
{
	struct nw_fleet_pricing *pr = &f->pricing;

	memset(pr, 0, sizeof *pr);
	pr->correction_min = correction_min;
	pr->correction_max = correction_max;
	pr->correction_alpha = correction_alpha;
	pr->correction_min_samples = MAX(correction_min_samples, 1);
	pr->epoch = 1; /* the pool is counted at the first use */
	pr->mean_stale = true;
	for (uint32_t i = 0; i < f->view.n_engines; i++) {
		memset(&f->ledger[i], 0, sizeof f->ledger[i]);
		f->ledger[i].correction = 1.0;
	}
}

void
nw_pricing_profiles_changed(struct nw_fleet *f)
{
	f->pricing.mean_stale = true;
}

const struct nw_engine_profile *
nw_pricing_mean(struct nw_fleet *f)
{
	struct nw_fleet_pricing *pr = &f->pricing;

	if (pr->mean_stale) {
		g_autofree const struct nw_engine_profile **have =
			g_new(const struct nw_engine_profile *, MAX(f->view.n_engines, 1));
		size_t n = 0;

		for (uint32_t i = 0; i < f->view.n_engines; i++) {
			if (f->profiles[i] != NULL)
				have[n++] = f->profiles[i];
		}
		pr->has_mean = nw_profile_mean(have, n, &pr->mean);
		pr->mean_stale = false;
	}
	return pr->has_mean ? &pr->mean : NULL;
}

/* The most nanoseconds a time priced on a profile counts for on the host
 * clock (about 31 years): beyond any deadline, and far from overflow. */
#define NW_PRICE_NS_MAX ((int64_t)1000000000000000000)

/* Seconds as nanoseconds of the host clock, 0 for what is not a positive
 * number, at most NW_PRICE_NS_MAX: a profile may price a prompt at more
 * seconds than an int64_t of nanoseconds holds (any finite coefficient is
 * valid), and such a time is beyond any deadline the clock reaches. */
static int64_t
ns_of(double s)
{
	if (!(s > 0))
		return 0;
	return s >= (double)NW_PRICE_NS_MAX / 1e9 ? NW_PRICE_NS_MAX : (int64_t)(s * 1e9);
}

int64_t
nw_pricing_work_ns(const struct nw_engine_profile *p, uint64_t tokens)
{
	double l = (double)tokens, s, share;

	if (p == NULL)
		return 0;
	/* The step's fixed cost a is shared by the prompts of one step: each
	 * is charged its tokens' part of a step as long as the longest prompt
	 * measured (a lower bound on the engine's tokens per step, so the
	 * share errs high). */
	share = p->prefill.max_tokens > 0 ? MIN(l / (double)p->prefill.max_tokens, 1.0) : 1.0;
	s = p->prefill.a_s * share + p->prefill.b_s * l + p->prefill.c_s * l * l;
	if (!(s > 0)) /* negative (a fit's coefficient outside its domain), NaN */
		return 0;
	return (int64_t)llround(MIN(s, NW_PRICE_WORK_MAX_S) * 1e9);
}

/* --- the live prefill pool ----------------------------------------------- */

static bool
available(const struct narwhal_engine_view *v)
{
	return (v->flags & NARWHAL_ENGINE_AVAILABLE) != 0;
}

/* Whether engine i is in the live prefill pool: an available prefill
 * engine, or when no pair can be made (no live engine of one role) an
 * engine that takes aggregate work: any available one, a decode engine
 * once its handoff decodes drained (the role-control document, "Aggregate
 * fallback from an idle decode engine"). */
static bool
in_pool(const struct nw_fleet *f, uint32_t i)
{
	const struct narwhal_engine_view *v = &f->engines[i];

	if (!available(v))
		return false;
	if (f->pricing.pool_paired)
		return v->role == NARWHAL_ROLE_PREFILL;
	return v->role != NARWHAL_ROLE_DECODE || f->stats[i].handoff_decodes == 0;
}

/* The mean correction of the available decode engines (roles and flags
 * change with the epoch, corrections at each pass). */
static void
decode_correction_refresh(struct nw_fleet *f)
{
	double sum = 0;
	uint32_t n = 0;

	for (uint32_t i = 0; i < f->view.n_engines; i++) {
		const struct narwhal_engine_view *v = &f->engines[i];

		if (available(v) && v->role == NARWHAL_ROLE_DECODE) {
			sum += f->ledger[i].correction;
			n++;
		}
	}
	f->pricing.decode_correction = n > 0 ? sum / n : 1.0;
}

/* Count the pool again when the fleet changed since (nw_fleet_changed). */
static void
pool_refresh(struct nw_fleet *f)
{
	struct nw_fleet_pricing *pr = &f->pricing;
	bool prefill = false, decode = false;

	if (pr->pool_epoch == pr->epoch)
		return;
	for (uint32_t i = 0; i < f->view.n_engines; i++) {
		const struct narwhal_engine_view *v = &f->engines[i];

		prefill |= available(v) && v->role == NARWHAL_ROLE_PREFILL;
		decode |= available(v) && v->role == NARWHAL_ROLE_DECODE;
	}
	pr->pool_paired = prefill && decode;
	pr->pool_n = 0;
	for (uint32_t i = 0; i < f->view.n_engines; i++)
		pr->pool_n += in_pool(f, i);
	pr->pool_epoch = pr->epoch;
	decode_correction_refresh(f);
}

/* Whether engine's prefills end in a handoff its profile measured: a
 * prefill engine of a pair (an aggregate leg hands nothing off). */
static bool
hands_off(struct nw_fleet *f, uint32_t engine, const struct nw_engine_profile *p)
{
	pool_refresh(f);
	return f->pricing.pool_paired && f->engines[engine].role == NARWHAL_ROLE_PREFILL &&
	       p->handoff.samples > 0;
}

static double
handoff_s(const struct nw_engine_profile *p, uint64_t tokens)
{
	return MAX(p->handoff.setup_s + p->handoff.per_token_s * (double)tokens, 0);
}

/* What a prompt's first token waits for once its prefill on engine
 * ended: the handoff (when the profile measured it and the engine hands
 * off) and two idle decode steps, corrected (a busy decode engine ends
 * the step in progress first). 0 for what is not known. */
static double
after_prefill_s(struct nw_fleet *f, uint32_t engine, uint64_t tokens)
{
	const struct nw_engine_profile *p = f->profiles[engine];
	double tail = 0, step;

	if (p == NULL)
		return 0;
	if (hands_off(f, engine, p))
		tail += handoff_s(p, tokens);
	if (nw_estimate_decode_interval_s(p, p->decode.min_active, p->decode.min_kv_tokens, &step) ==
	    NARWHAL_ESTIMATE_OK)
		tail += 2 * MAX(step * f->ledger[engine].correction, 0);
	return tail;
}

/* --- the request's events ------------------------------------------------- */

/* The profile an engine's amounts are priced on. */
static const struct nw_engine_profile *
charge_profile(struct nw_fleet *f, uint32_t engine)
{
	return f->profiles[engine] != NULL ? f->profiles[engine] : nw_pricing_mean(f);
}

/* Take the hold's prefill charge out of wherever it is. */
static void
prefill_take(struct nw_fleet *f, struct nw_price_hold *h)
{
	struct nw_engine_ledger *l = &f->ledger[h->engine];

	/* Every event that moves a prefill amount passes here. */
	f->pricing.ledger_gen++;
	switch ((nw_price_where)h->where) {
	case NW_PRICE_NONE:
		return;
	case NW_PRICE_PENDING:
		f->pricing.pending_ns -= h->prefill_ns;
		f->pricing.pending--;
		break;
	case NW_PRICE_QUEUED:
		l->queued_prefill_ns -= h->prefill_ns;
		break;
	case NW_PRICE_RESIDENT:
		l->resident_prefill_ns -= h->prefill_ns;
		l->prefill_holds--;
		*(h->prev ? &h->prev->next : &l->first) = h->next;
		*(h->next ? &h->next->prev : &l->last) = h->prev;
		h->prev = h->next = NULL;
		break;
	}
	h->where = NW_PRICE_NONE;
	h->prefill_ns = 0;
}

void
nw_pricing_pending(struct nw_fleet *f, struct nw_price_hold *h, uint64_t tokens)
{
	if (h->where == NW_PRICE_PENDING)
		return;
	prefill_take(f, h);
	h->tokens = tokens;
	h->prefill_ns = nw_pricing_work_ns(nw_pricing_mean(f), tokens);
	h->where = NW_PRICE_PENDING;
	f->pricing.pending_ns += h->prefill_ns;
	f->pricing.pending++;
}

void
nw_pricing_placing(struct nw_fleet *f, struct nw_price_hold *h)
{
	if (h->where == NW_PRICE_PENDING || h->where == NW_PRICE_QUEUED)
		prefill_take(f, h);
}

void
nw_pricing_queued(struct nw_fleet *f, struct nw_price_hold *h, uint32_t engine)
{
	prefill_take(f, h);
	h->engine = engine;
	h->prefill_ns = nw_pricing_work_ns(charge_profile(f, engine), h->tokens);
	h->where = NW_PRICE_QUEUED;
	f->ledger[engine].queued_prefill_ns += h->prefill_ns;
}

void
nw_pricing_resident(struct nw_fleet *f, struct nw_price_hold *h, uint32_t engine, int64_t now_ns)
{
	struct nw_engine_ledger *l = &f->ledger[engine];

	prefill_take(f, h);
	h->engine = engine;
	h->prefill_ns = nw_pricing_work_ns(charge_profile(f, engine), h->tokens);
	h->where = NW_PRICE_RESIDENT;
	h->due_ns = h->arrival_ns + ns_of(f->view.ttft_target_s) -
	            ns_of(after_prefill_s(f, engine, h->tokens));
	h->prev = l->last;
	h->next = NULL;
	*(l->last ? &l->last->next : &l->first) = h;
	l->last = h;
	/* Work that comes to an idle engine starts at once. */
	if (l->prefill_holds++ == 0)
		l->progress_since_ns = now_ns;
	l->resident_prefill_ns += h->prefill_ns;
}

void
nw_pricing_prefill_done(struct nw_fleet *f, struct nw_price_hold *h, int64_t now_ns)
{
	if (h->where == NW_PRICE_RESIDENT)
		f->ledger[h->engine].progress_since_ns = now_ns;
	prefill_take(f, h);
}

void
nw_pricing_unplaced(struct nw_fleet *f, struct nw_price_hold *h)
{
	if (h->where == NW_PRICE_QUEUED || h->where == NW_PRICE_RESIDENT)
		nw_pricing_pending(f, h, h->tokens);
}

void
nw_pricing_decode_enter(struct nw_fleet *f, struct nw_price_hold *h, uint32_t engine,
                        uint64_t prompt_tokens, uint64_t reserved)
{
	nw_pricing_decode_leave(f, h);
	h->decoding = true;
	h->decode_engine = engine;
	h->kv_tokens = prompt_tokens + reserved;
	h->reserved = reserved;
	f->engines[engine].resident_kv_tokens += h->kv_tokens;
	f->ledger[engine].reserved_output_tokens += reserved;
}

void
nw_pricing_decode_started(struct nw_fleet *f, struct nw_price_hold *h, int64_t now_ns)
{
	const struct narwhal_engine_view *v;

	if (!h->decoding)
		return;
	v = &f->engines[h->decode_engine];
	h->started = true;
	h->first_token_ns = now_ns;
	h->active_at_start = v->resident_decode;
	h->kv_at_start = v->resident_kv_tokens;
}

void
nw_pricing_decode_observe(struct nw_fleet *f, const struct nw_price_hold *h, int64_t last_ns,
                          uint64_t tokens)
{
	struct nw_engine_ledger *l;
	double seconds, profiled;
	uint64_t gaps;

	if (!h->decoding || !h->started || tokens < 2 || last_ns <= h->first_token_ns)
		return;
	l = &f->ledger[h->decode_engine];
	gaps = tokens - 1;
	seconds = (double)(last_ns - h->first_token_ns) / 1e9;
	l->window_gaps += gaps;
	l->window_s += seconds;
	/* Only gaps whose start the profile covers say how far off it is. */
	if (nw_estimate_decode_interval_s(f->profiles[h->decode_engine], h->active_at_start,
	                                  h->kv_at_start, &profiled) == NARWHAL_ESTIMATE_OK &&
	    profiled > 0) {
		l->window_priced_gaps += gaps;
		l->window_priced_s += seconds;
		l->window_profiled_s += profiled * (double)gaps;
	}
}

void
nw_pricing_decode_leave(struct nw_fleet *f, struct nw_price_hold *h)
{
	if (!h->decoding)
		return;
	f->engines[h->decode_engine].resident_kv_tokens -= h->kv_tokens;
	f->ledger[h->decode_engine].reserved_output_tokens -= h->reserved;
	h->decoding = false;
	h->started = false;
	h->kv_tokens = h->reserved = 0;
}

void
nw_pricing_release(struct nw_fleet *f, struct nw_price_hold *h)
{
	prefill_take(f, h);
	nw_pricing_decode_leave(f, h);
}

/* --- estimators -------------------------------------------------------------- */

/* The prefill work engine i holds at now_ns, in nanoseconds: its
 * resident work less the progress made on it, and its queued work. */
static int64_t
held_ns(const struct nw_fleet *f, uint32_t i, int64_t now_ns)
{
	const struct nw_engine_ledger *l = &f->ledger[i];
	int64_t resident = l->resident_prefill_ns;

	/* Progress credit: the head resident has run since progress_since_ns.
	 * With no prefill slot taken on the engine nothing runs, and an
	 * amount left would be a leak: shown, not hidden. */
	if (l->prefill_holds > 0 && f->engines[i].resident_prefill > 0 &&
	    now_ns > l->progress_since_ns)
		resident -= MIN(now_ns - l->progress_since_ns, resident);
	return MAX(resident, 0) + l->queued_prefill_ns;
}

/* The prefill work ahead of a new prompt on engine i, in nanoseconds:
 * what it holds and its share of the pool's pending work. */
static int64_t
backlog_ns(struct nw_fleet *f, uint32_t i, int64_t now_ns)
{
	int64_t total = held_ns(f, i, now_ns);

	pool_refresh(f);
	if (f->pricing.pool_n > 0 && in_pool(f, i))
		total += f->pricing.pending_ns / f->pricing.pool_n;
	return total;
}

/* An engine prefills the prompts it holds together, step by step, so a
 * prompt placed now also delays those that have not started: by the FIFO
 * model, the residents whose turn (the engine's progress point plus the
 * work before them) is still ahead of now_ns. When the new prompt's
 * prefill, ending at end_ns, would push the earliest deadline among them
 * back, the prompt must wait until that one has started: a request
 * admitted later never spends the TTFT of one admitted earlier (spec 4.1).
 * That wait in nanoseconds, 0 when nothing is pushed back. */
static int64_t
batched_wait_ns(const struct nw_fleet *f, uint32_t engine, int64_t now_ns, int64_t end_ns)
{
	const struct nw_engine_ledger *l = &f->ledger[engine];
	const struct nw_prefill_profile *p = &f->profiles[engine]->prefill;
	int64_t turn = l->progress_since_ns, due = INT64_MAX, due_turn = 0;

	for (const struct nw_price_hold *h = l->first; h != NULL; h = h->next) {
		double len = (double)h->tokens;

		if (turn > now_ns && h->due_ns < due) {
			due = h->due_ns;
			due_turn = turn;
		}
		/* The one before it ends its own step, fixed cost and all: the
		 * late side of when this one starts. */
		turn += MAX(h->prefill_ns, (int64_t)((p->a_s + p->b_s * len + p->c_s * len * len) * 1e9));
	}
	return end_ns > due ? due_turn - now_ns : 0;
}

narwhal_estimate_status
nw_pricing_prefill_s(struct nw_fleet *f, uint32_t engine, uint64_t tokens, double *out)
{
	const struct nw_engine_profile *p;
	narwhal_estimate_status st;
	double prefill;

	if (engine >= f->view.n_engines || (p = f->profiles[engine]) == NULL)
		return NARWHAL_ESTIMATE_NO_PROFILE;
	st = nw_estimate_prefill_s(p, tokens, &prefill);
	if (st != NARWHAL_ESTIMATE_OK)
		return st;
	prefill = MAX(prefill, 0);
	if (hands_off(f, engine, p)) {
		if (tokens > p->handoff.max_tokens)
			return NARWHAL_ESTIMATE_OUT_OF_DOMAIN;
		prefill += handoff_s(p, tokens);
	}
	*out = prefill;
	return NARWHAL_ESTIMATE_OK;
}

narwhal_estimate_status
nw_pricing_prefill_queue_s(struct nw_fleet *f, uint32_t engine, uint64_t tokens, int64_t now_ns,
                           double *out)
{
	const struct nw_engine_profile *p;
	const struct narwhal_engine_view *v;
	narwhal_estimate_status st;
	double prefill, own;
	int64_t backlog, wait;

	if (engine >= f->view.n_engines || (p = f->profiles[engine]) == NULL)
		return NARWHAL_ESTIMATE_NO_PROFILE;
	v = &f->engines[engine];
	/* The single-phase region (spec 4.1): the curves price one phase at
	 * a time, so an engine decoding is not priced for prefill until that
	 * work drains. */
	if (v->resident_decode > 0)
		return NARWHAL_ESTIMATE_OUT_OF_DOMAIN;
	st = nw_estimate_prefill_s(p, tokens, &prefill);
	if (st != NARWHAL_ESTIMATE_OK)
		return st;
	prefill = MAX(prefill, 0);
	own = 0;
	if (hands_off(f, engine, p)) {
		if (tokens > p->handoff.max_tokens)
			return NARWHAL_ESTIMATE_OUT_OF_DOMAIN;
		own = handoff_s(p, tokens);
	}
	backlog = backlog_ns(f, engine, now_ns);
	wait = batched_wait_ns(f, engine, now_ns, now_ns + backlog + ns_of(prefill));
	/* In seconds, not the clock's nanoseconds: a prompt the profile
	 * prices beyond what those hold is still that far over the target. */
	*out = (double)backlog / 1e9 + prefill + own;
	/* A prompt that would make an earlier one miss its target cannot go
	 * there now, whatever its own slack: priced beyond the target by the
	 * wait, so a refusal's Retry-After says when it can. */
	if (wait > 0)
		*out = MAX(*out, f->view.ttft_target_s + (double)wait / 1e9);
	return NARWHAL_ESTIMATE_OK;
}

narwhal_estimate_status
nw_pricing_decode_interval_s(const struct nw_fleet *f, uint32_t engine, uint32_t active,
                             uint64_t kv_tokens, double *out)
{
	narwhal_estimate_status st;
	double est;

	if (engine >= f->view.n_engines)
		return NARWHAL_ESTIMATE_NO_PROFILE;
	st = nw_estimate_decode_interval_s(f->profiles[engine], active, kv_tokens, &est);
	if (st == NARWHAL_ESTIMATE_OK)
		*out = est * f->ledger[engine].correction;
	return st;
}

narwhal_estimate_status
nw_pricing_backlog_s(struct nw_fleet *f, uint32_t engine, int64_t now_ns, double *out)
{
	if (engine >= f->view.n_engines || f->profiles[engine] == NULL)
		return NARWHAL_ESTIMATE_NO_PROFILE;
	*out = (double)backlog_ns(f, engine, now_ns) / 1e9;
	return NARWHAL_ESTIMATE_OK;
}

double
nw_pricing_pool_backlog_s(struct nw_fleet *f, int64_t now_ns)
{
	struct nw_fleet_pricing *pr = &f->pricing;
	int64_t held;

	pool_refresh(f);
	if (pr->held_valid && pr->held_gen == pr->ledger_gen && pr->held_epoch == pr->epoch &&
	    pr->held_at_ns == now_ns)
		return (double)pr->held_sum_ns / 1e9;
	held = pr->pending_ns;
	for (uint32_t i = 0; i < f->view.n_engines; i++) {
		if (in_pool(f, i))
			held += held_ns(f, i, now_ns);
	}
	pr->held_sum_ns = held;
	pr->held_gen = pr->ledger_gen;
	pr->held_epoch = pr->epoch;
	pr->held_at_ns = now_ns;
	pr->held_valid = true;
	return (double)held / 1e9;
}

uint32_t
nw_pricing_pool_size(struct nw_fleet *f)
{
	pool_refresh(f);
	return f->pricing.pool_n;
}

narwhal_estimate_status
nw_pricing_pool_best_queue_s(struct nw_fleet *f, uint64_t tokens, int64_t now_ns, double *out)
{
	double best = INFINITY, s;

	pool_refresh(f);
	for (uint32_t i = 0; i < f->view.n_engines; i++) {
		if (in_pool(f, i) &&
		    nw_pricing_prefill_queue_s(f, i, tokens, now_ns, &s) == NARWHAL_ESTIMATE_OK &&
		    s < best)
			best = s;
	}
	if (isinf(best))
		return NARWHAL_ESTIMATE_NO_PROFILE;
	*out = best;
	return NARWHAL_ESTIMATE_OK;
}

double
nw_pricing_decode_correction(struct nw_fleet *f)
{
	pool_refresh(f);
	return f->pricing.decode_correction;
}

/* --- loads and the pass ------------------------------------------------------ */

double
nw_pricing_decode_load_of(double interval_s, double floor_s, double tpot_s)
{
	if (isnan(interval_s) || isnan(floor_s) || isnan(tpot_s))
		return NAN;
	if (floor_s >= tpot_s)
		return interval_s / tpot_s;
	return MAX((interval_s - floor_s) / (tpot_s - floor_s), 0);
}

/* Engine i's decode load with observed the window's mean interval (NaN:
 * too few gaps): else the corrected estimate for what it holds now, and 0
 * when it decodes nothing. */
static double
decode_load(const struct nw_fleet *f, uint32_t i, double observed)
{
	const struct nw_engine_profile *p = f->profiles[i];
	const struct narwhal_engine_view *v = &f->engines[i];
	double floor_s, interval = observed;

	if (p == NULL)
		return NAN;
	/* The zero-contention interval: the least contention the profile
	 * measured (always inside its domain), corrected. */
	if (nw_pricing_decode_interval_s(f, i, p->decode.min_active, p->decode.min_kv_tokens,
	                                 &floor_s) != NARWHAL_ESTIMATE_OK)
		return NAN;
	if (isnan(interval)) {
		if (v->resident_decode == 0)
			return 0;
		if (nw_pricing_decode_interval_s(f, i, v->resident_decode, v->resident_kv_tokens,
		                                 &interval) != NARWHAL_ESTIMATE_OK)
			return NAN;
	}
	return nw_pricing_decode_load_of(interval, floor_s, f->view.tpot_target_s);
}

/* Spec 7.7: correction += alpha * (observed / profiled - correction),
 * bounded, from a window with enough gaps the profile covers. */
static void
update_correction(const struct nw_fleet_pricing *pr, struct nw_engine_ledger *l)
{
	double c;

	if (l->window_priced_gaps < pr->correction_min_samples || !(l->window_profiled_s > 0))
		return;
	c = l->correction + pr->correction_alpha *
	                    (l->window_priced_s / l->window_profiled_s - l->correction);
	l->correction = CLAMP(c, pr->correction_min, pr->correction_max);
}

void
nw_pricing_pass(struct nw_fleet *f, int64_t now_ns)
{
	const struct nw_fleet_pricing *pr = &f->pricing;

	for (uint32_t i = 0; i < f->view.n_engines; i++) {
		struct nw_engine_ledger *l = &f->ledger[i];
		struct narwhal_engine_view *v = &f->engines[i];
		double backlog, observed = l->window_gaps >= pr->correction_min_samples
		                                   ? l->window_s / (double)l->window_gaps : NAN;

		update_correction(pr, l);
		v->prefill_load = nw_pricing_backlog_s(f, i, now_ns, &backlog) == NARWHAL_ESTIMATE_OK
		                          ? backlog / f->view.ttft_target_s : NAN;
		v->decode_load = decode_load(f, i, observed);
		l->window_gaps = l->window_priced_gaps = 0;
		l->window_s = l->window_priced_s = l->window_profiled_s = 0;
	}
	decode_correction_refresh(f);
}

void
nw_pricing_pool_loads(const struct nw_fleet *f, double *prefill, double *decode)
{
	double sum[2] = { 0, 0 };
	uint32_t n[2] = { 0, 0 };

	for (uint32_t i = 0; i < f->view.n_engines; i++) {
		const struct narwhal_engine_view *v = &f->engines[i];
		double load;
		int k;

		if (!available(v))
			continue;
		k = v->role == NARWHAL_ROLE_DECODE;
		load = k ? v->decode_load : v->prefill_load;
		if (isfinite(load)) {
			sum[k] += load;
			n[k]++;
		}
	}
	*prefill = n[0] > 0 ? sum[0] / n[0] : NAN;
	*decode = n[1] > 0 ? sum[1] / n[1] : NAN;
}
