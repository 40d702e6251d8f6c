/*
 * Pricing work on the fleet (ARCHITECTURE.md, section 6; spec 4.1, 5, 7.1,
 * 7.7; the role-control document's "Prefill queue projections";
 * docs/profiles.md, "How the router uses the store"): a ledger of the
 * prefill work each engine holds and each request charged, the FIFO
 * prefill projection, the decode interval with its bounded live
 * correction, and the loads of spec 7.1.
 *
 * Pure over the fleet registry (core/host.h) and a now_ns argument: no
 * clock is read here, so the same code runs under virtual time. Every
 * event is O(1) and allocates nothing; a projection is O(1) once the live
 * prefill pool is known (counted again, O(engines), only after the fleet's
 * flags or roles changed: nw_fleet_changed).
 *
 * Amounts are integer nanoseconds, so what a request charges and later
 * releases cancel exactly and an idle fleet's ledger is exactly zero.
 */
#ifndef NW_PRICING_H
#define NW_PRICING_H

#include <narwhal/plugin-abi.h>

#include <stdbool.h>
#include <stdint.h>

#include "core/profile.h"

struct nw_fleet;

/* Where a request's prefill work is charged. */
typedef enum nw_price_where {
	NW_PRICE_NONE = 0,   /* nowhere: not admitted yet, prefilled, or ended */
	NW_PRICE_PENDING,    /* admitted or admission-queued, not placed: the pool's */
	NW_PRICE_QUEUED,     /* waiting for engine's prefill slots (its queued_prefill) */
	NW_PRICE_RESIDENT,   /* holding a prefill (or aggregate) slot on engine */
} nw_price_where;

/* What one request has charged to its fleet's ledger, kept on the request
 * so that it releases exactly that, on every path. All zero: nothing. */
struct nw_price_hold {
	uint8_t where;             /* nw_price_where of its prefill work */
	bool decoding;             /* counted in decode_engine's resident KV */
	bool started;              /* its decode's first token came (the fields below) */
	uint32_t engine;           /* for NW_PRICE_QUEUED and NW_PRICE_RESIDENT */
	uint32_t decode_engine;    /* while decoding */
	uint64_t tokens;           /* the prompt priced */
	int64_t arrival_ns;        /* the request's arrival, set by the serve before
	                            * nw_pricing_pending: its TTFT deadline */
	int64_t due_ns;            /* while resident: when its prefill must end for
	                            * its first token to meet slo.ttft_s */
	struct nw_price_hold *prev, *next; /* engine's resident holds, in order */
	int64_t prefill_ns;        /* what it charged where it is */
	uint64_t kv_tokens;        /* what it added to decode_engine's resident_kv_tokens */
	uint64_t reserved;         /* of which reserved output (max_tokens) */
	/* Its decode, from the first token: for the gap observation. */
	int64_t first_token_ns;
	uint32_t active_at_start;  /* decode_engine's resident decodes then, itself included */
	uint64_t kv_at_start;      /* and their resident KV tokens */
};

/* One engine's ledger and decode correction. */
struct nw_engine_ledger {
	int64_t resident_prefill_ns; /* prefill work on its slots */
	int64_t queued_prefill_ns;   /* prefill work waiting for its slots */
	uint32_t prefill_holds;      /* requests in resident_prefill_ns */
	struct nw_price_hold *first, *last; /* its resident holds, oldest first */
	int64_t progress_since_ns;   /* its head resident runs since (the last
	                              * completion, or when work arrived on an
	                              * idle engine) */
	uint64_t reserved_output_tokens; /* resident decodes' max_tokens, part of
	                                  * the view's resident_kv_tokens */
	/* Decode gaps observed since the last monitor pass (the window). */
	uint64_t window_gaps;
	double window_s;             /* their total seconds */
	uint64_t window_priced_gaps; /* those whose start the profile covers */
	double window_priced_s;      /* their observed seconds */
	double window_profiled_s;    /* the profile's estimate for the same gaps */
	double correction;           /* live / profiled decode interval, bounded; 1 at first */
};

/* The fleet's pricing state (struct nw_fleet.pricing). */
struct nw_fleet_pricing {
	int64_t pending_ns;          /* admitted or admission-queued prefill work not
	                              * yet placed, priced on the mean profile */
	uint32_t pending;            /* requests holding it */
	/* Spec 7.7: the mean profile across the configured engines that have
	 * one, for demand pricing; has_mean false when none can be made. */
	struct nw_engine_profile mean;
	bool has_mean, mean_stale;
	/* controller.reactive.decode_correction_* (spec 7.7). */
	double correction_min, correction_max, correction_alpha;
	uint32_t correction_min_samples;
	/* The live prefill pool, counted at pool_epoch (core/host.h,
	 * nw_fleet_changed). */
	uint64_t epoch, pool_epoch;
	uint32_t pool_n;
	bool pool_paired;
	/* The mean correction of the live decode engines, made again when
	 * the pool is counted and at each pass (1 without one). */
	double decode_correction;
	/* Bumped by every change of the ledger's prefill amounts, so that
	 * the pool's held work (nw_pricing_pool_backlog_s) is summed again
	 * only after the ledger, the pool or the clock moved. (The progress
	 * credit also reads the view's resident_prefill, which the data
	 * plane moves beside a ledger event on the same request.) */
	uint64_t ledger_gen;
	uint64_t held_gen, held_epoch;
	int64_t held_at_ns, held_sum_ns;
	bool held_valid;
};

/* Reset the ledger (every amount 0, corrections 1) and take the
 * correction settings. */
void nw_pricing_init(struct nw_fleet *f, double correction_min, double correction_max,
                     double correction_alpha, uint32_t correction_min_samples);
/* The engines' profiles changed (nw_fleet_set_profile): the mean is made
 * again when next asked for. */
void nw_pricing_profiles_changed(struct nw_fleet *f);
/* Spec 7.7's mean profile (demand pricing uses it): over the configured
 * engines that have a profile (nw_profile_mean), NULL when none has or
 * their domains do not overlap. Borrowed from the fleet. */
const struct nw_engine_profile *nw_pricing_mean(struct nw_fleet *f);

/* The amount a prompt of tokens charges on profile p: its prefill model
 * at that length, b*L + c*L^2, plus its share of the step's fixed cost a
 * (L over prefill.max_tokens, at most all of it: the prompts of one step
 * pay a once), even outside the measured domain (a ledger needs an
 * amount for every request it holds), never negative, at most
 * NW_PRICE_WORK_MAX_S; 0 without a profile. */
#define NW_PRICE_WORK_MAX_S 1e5
int64_t nw_pricing_work_ns(const struct nw_engine_profile *p, uint64_t tokens);

/* --- the request's events (O(1); core/pricing.c says what each moves) --- */

/* Admitted or admission-queued, or back to waiting for placement (a
 * retry, an unqueue): its prefill work is the pool's, on the mean
 * profile. tokens is the prompt (sized exactly or by chars_per_token:
 * priced the same); a hold already pending stays as it is. */
void nw_pricing_pending(struct nw_fleet *f, struct nw_price_hold *h, uint64_t tokens);
/* Placement is choosing an engine for it now: its pool (or queued)
 * charge leaves the ledger, so the projections it is placed by do not count its own
 * work twice; nw_pricing_queued or nw_pricing_resident charges it again
 * (or nw_pricing_pending, when nothing was chosen). */
void nw_pricing_placing(struct nw_fleet *f, struct nw_price_hold *h);
/* It waits for engine's prefill slots. */
void nw_pricing_queued(struct nw_fleet *f, struct nw_price_hold *h, uint32_t engine);
/* It holds a prefill or aggregate slot on engine. */
void nw_pricing_resident(struct nw_fleet *f, struct nw_price_hold *h, uint32_t engine,
                         int64_t now_ns);
/* Its prefill completed (the handoff came, or an aggregate leg's first
 * token): the work leaves the ledger and the engine's next resident
 * starts now. */
void nw_pricing_prefill_done(struct nw_fleet *f, struct nw_price_hold *h, int64_t now_ns);
/* Its queued or resident prefill ended without completing (a failure, a
 * cancel, a retry): back to the pool, as a request still to place. */
void nw_pricing_unplaced(struct nw_fleet *f, struct nw_price_hold *h);

/* It decodes on engine, holding tokens of prompt and reserved output
 * tokens (its max_tokens) of KV there. */
void nw_pricing_decode_enter(struct nw_fleet *f, struct nw_price_hold *h, uint32_t engine,
                             uint64_t prompt_tokens, uint64_t reserved);
/* Its decode's first token came at now_ns: what the engine held then is
 * the start of its gap observation. */
void nw_pricing_decode_started(struct nw_fleet *f, struct nw_price_hold *h, int64_t now_ns);
/* Its decode ended well: tokens generated, the last at last_ns (spec
 * 7.7's decode gaps: tokens - 1 of them since the first token). */
void nw_pricing_decode_observe(struct nw_fleet *f, const struct nw_price_hold *h,
                               int64_t last_ns, uint64_t tokens);
void nw_pricing_decode_leave(struct nw_fleet *f, struct nw_price_hold *h);

/* Everything the request holds leaves the ledger (the request ended). */
void nw_pricing_release(struct nw_fleet *f, struct nw_price_hold *h);

/* --- estimators (NARWHAL_ESTIMATE_*; *out only on OK) ------------------- */

/* plugin-abi.h's prefill_seconds: the prompt's own prefill on an idle
 * engine and, on a prefill engine of a pair whose profile measured it,
 * the handoff (OUT_OF_DOMAIN beyond the longest handoff measured). */
narwhal_estimate_status nw_pricing_prefill_s(struct nw_fleet *f, uint32_t engine,
                                             uint64_t tokens, double *out);
/* plugin-abi.h's prefill_queue_seconds at now_ns. */
narwhal_estimate_status nw_pricing_prefill_queue_s(struct nw_fleet *f, uint32_t engine,
                                                   uint64_t tokens, int64_t now_ns, double *out);
/* plugin-abi.h's decode_interval_seconds: the profile's estimate times
 * the engine's correction. */
narwhal_estimate_status nw_pricing_decode_interval_s(const struct nw_fleet *f, uint32_t engine,
                                                     uint32_t active, uint64_t kv_tokens,
                                                     double *out);
/* The prefill work ahead of a new prompt on engine at now_ns, in seconds
 * (resident less progress, queued, its pool share); NO_PROFILE without a
 * profile. */
narwhal_estimate_status nw_pricing_backlog_s(struct nw_fleet *f, uint32_t engine, int64_t now_ns,
                                             double *out);

/* The prefill work the live prefill pool holds at now_ns, in seconds:
 * every pool engine's backlog (resident less progress, queued) and all of
 * the pool's pending work, what nw_pricing_backlog_s sums engine by
 * engine. Counted over the pool only when the ledger, the pool or now_ns
 * changed since the last answer, so the splits of one evaluation cost
 * O(1) each (core/split-price.h). */
double nw_pricing_pool_backlog_s(struct nw_fleet *f, int64_t now_ns);
/* The live prefill pool: how many engines, and the least
 * nw_pricing_prefill_queue_s of a prompt of tokens over them at now_ns
 * (where predictive admission's best path starts). NO_PROFILE when no
 * engine of the pool could price it. O(engines). */
uint32_t nw_pricing_pool_size(struct nw_fleet *f);
narwhal_estimate_status nw_pricing_pool_best_queue_s(struct nw_fleet *f, uint64_t tokens,
                                                     int64_t now_ns, double *out);
/* The mean live decode correction (spec 7.7) of the available decode
 * engines; 1 without one. */
double nw_pricing_decode_correction(struct nw_fleet *f);

/* --- loads (spec 7.1) and the monitor's pass ---------------------------- */

/* Spec 7.1's decode load: the interval above the corrected idle floor
 * over what the TPOT target leaves above it, at least 0; the raw
 * interval / tpot when the floor reaches the target. NaN in, NaN out. */
double nw_pricing_decode_load_of(double interval_s, double floor_s, double tpot_s);

/* Once a pass (a correction window, spec 7.7): each engine's correction
 * moves by alpha towards its window's observed / profiled ratio when the
 * window has decode_correction_min_samples gaps the profile covers; its
 * loads (spec 7.1) are written into its view; a new window starts. */
void nw_pricing_pass(struct nw_fleet *f, int64_t now_ns);
/* Pool loads from the engines' loads as the last pass wrote them: the
 * mean over the live engines of each role whose load is known; NaN when
 * none is. */
void nw_pricing_pool_loads(const struct nw_fleet *f, double *prefill, double *decode);

#endif /* NW_PRICING_H */
