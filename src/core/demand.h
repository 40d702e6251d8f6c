/*
 * Demand accounting (the role-control document's demand contract,
 * ARCHITECTURE.md section 6): the ledger of every completion offer and what
 * became of it, the short- and long-horizon demand estimates the controller
 * prices splits on (spec 7.6, 7.7), the arrival-evidence window that gates
 * decode-to-prefill consolidation (spec 7.6), unserved placements (spec 5),
 * and what each admission and placement decision was priced on.
 *
 * Pure: every call takes the time (now_ns or at_ns, the host clock's
 * nanoseconds), nothing reads a clock, so the ledger runs unchanged under
 * virtual time (ARCHITECTURE.md section 10). Every event is O(1) and
 * allocates nothing: counts go to fixed slots, estimates to a fixed ring of
 * time buckets, decision records to a fixed ring. Records are counts and
 * sums, so ledgers of several routers can be merged (section 11).
 *
 * What an offer is: a completion request that reached sizing (a sized
 * offer: prompt tokens and max_tokens known), or one refused at the
 * connection ceiling before its body was read (an unsized offer, spec 4.2).
 * A request that never became valid (401, 413, 400 validation), one refused
 * while Narwhal stops and one whose client left before it was sized are
 * not. Every offer counts as arrival demand, refused ones included (spec
 * 7.6). docs/state.md, "demand", says the same for operators.
 */
#ifndef NW_CORE_DEMAND_H
#define NW_CORE_DEMAND_H

#include <narwhal/plugin-abi.h>

#include <stdbool.h>
#include <stdint.h>

#include "core/config.h"

struct nw_demand;

/* Why an offer was refused. The names are narwhal_refusals_total's reason
 * labels (docs/metrics.md). */
typedef enum nw_demand_refusal {
	NW_DEMAND_REFUSED_CEILING,        /* 429 before the body: an unsized offer */
	NW_DEMAND_REFUSED_ADMISSION,      /* 429 overloaded: the admission plugin */
	NW_DEMAND_REFUSED_TTFT_TARGET,    /* 400 prompt_too_long */
	NW_DEMAND_REFUSED_QUEUE_FULL,     /* 429 queue_full */
	NW_DEMAND_REFUSED_QUEUE_TIMEOUT,  /* 429 queue_timeout */
	NW_DEMAND_REFUSED_CONTEXT_LENGTH, /* 400 before any engine call */
	NW_DEMAND_REFUSED_DEGRADED,       /* 503 degraded */
	NW_DEMAND_REFUSED_UNAVAILABLE,    /* 503: the admission plugin failed */
	NW_DEMAND_REFUSALS
} nw_demand_refusal;
extern const char *const nw_demand_refusal_names[NW_DEMAND_REFUSALS];

/* Placement phases, NARWHAL_PHASE_* - 1. */
#define NW_DEMAND_PHASES 3
extern const char *const nw_demand_phase_names[NW_DEMAND_PHASES];

/* The windows, from controller.reactive (spec 7.7). */
struct nw_demand_windows {
	double long_s;                 /* window_s: the long horizon */
	double short_s;                /* evidence_span_s: the short horizon */
	double evidence_span_s;
	double evidence_max_span_s;
	uint32_t evidence_min_arrivals;
};
void nw_demand_windows_from_config(const struct nw_config *cfg, struct nw_demand_windows *w);

/* Each horizon is cut into this many buckets of its own. */
#define NW_DEMAND_BUCKETS 120

struct nw_demand *nw_demand_new(const struct nw_demand_windows *w, int64_t now_ns);
void nw_demand_free(struct nw_demand *d);
/* New windows (a reload). A horizon whose length changes starts again
 * from now; the totals and the decisions are kept; new evidence rules
 * reopen the evidence window (reason "reconfigured"). */
void nw_demand_configure(struct nw_demand *d, const struct nw_demand_windows *w,
                         int64_t now_ns);

/* --- one offer's course ------------------------------------------------ */

/* Kept by the request: where its offer is, so that each offer ends once
 * (admitted and completed, refused, or withdrawn) whichever path ends it.
 * Zero-initialised is "not offered". */
struct nw_demand_ticket {
	uint8_t stage;
};

/* A sized offer, at its arrival. max_tokens 0: the client set none. */
void nw_demand_offer(struct nw_demand *d, struct nw_demand_ticket *t, int64_t at_ns,
                     uint64_t prompt_tokens, bool prompt_tokens_exact, uint32_t max_tokens);
/* An unsized offer refused at once (the connection ceiling). */
void nw_demand_refuse_unsized(struct nw_demand *d, int64_t at_ns, nw_demand_refusal why);
/* The offer waits in the admission queue. */
void nw_demand_queue(struct nw_demand *d, struct nw_demand_ticket *t);
/* The offer is admitted (at once or after its wait). */
void nw_demand_admit(struct nw_demand *d, struct nw_demand_ticket *t);
/* The offer is refused before any engine work. */
void nw_demand_refuse(struct nw_demand *d, struct nw_demand_ticket *t, nw_demand_refusal why);
/* The request has ended: an admitted one completes (ok: answered in full;
 * output_tokens delivered, negative when unknown); one offered but never
 * decided was withdrawn (the client left, the deadline passed, Narwhal
 * stopped); anything else was counted already. */
void nw_demand_end(struct nw_demand *d, struct nw_demand_ticket *t, int64_t now_ns, bool ok,
                   int64_t output_tokens);

/* --- what decisions were priced on ------------------------------------ */

/* One admission or placement decision. */
typedef enum nw_decision_kind {
	NW_DECISION_ADMISSION,
	NW_DECISION_PLACEMENT,
} nw_decision_kind;

#define NW_DEMAND_DECISIONS 64       /* records kept */
#define NW_DEMAND_REASON_MAX 31      /* a plugin's reason, truncated beyond; bytes
                                      * outside printable ASCII read '?' */
#define NW_DEMAND_ID_MAX 128         /* request ids (NW_REQUEST_ID_MAX) */

struct nw_demand_decision {
	int64_t at_ns;
	nw_decision_kind kind;
	narwhal_phase phase;                /* placement: the phase; admission: 0 */
	narwhal_admission_verdict verdict;  /* admission */
	const char *engine;                 /* placement: the engine's id (interned) */
	bool binding;                       /* placement: the request goes there (false:
	                                     * priced for a request waiting for a slot) */
	bool unserved;                      /* placement */
	bool prompt_tokens_exact;
	uint64_t prompt_tokens;
	double projected_ttft_s;            /* admission; NaN: not priced */
	double budget_s;                    /* admission: slo.ttft_s * (1 + admission_margin) */
	double retry_after_s;               /* admission */
	double cost;                        /* placement */
	double projected_slo_ratio;         /* placement; NaN: unknown */
	char reason[NW_DEMAND_REASON_MAX + 1];        /* admission: the plugin's; "" none */
	char request_id[NW_DEMAND_ID_MAX + 1];        /* the operator's eyes only */
};

/* The admission plugin's decision on a sized request. */
void nw_demand_note_admission(struct nw_demand *d, int64_t now_ns, const char *request_id,
                              uint64_t prompt_tokens, bool prompt_tokens_exact,
                              double budget_s, const struct narwhal_admission_decision *dec);
/* The placement plugin's choice of engine_id for a phase; a binding one
 * counts as a placement of the phase, unserved or not (spec 5). */
void nw_demand_note_placement(struct nw_demand *d, int64_t now_ns, const char *request_id,
                              narwhal_phase phase, uint64_t prompt_tokens,
                              bool prompt_tokens_exact, const char *engine_id, bool binding,
                              const struct narwhal_placement_result *res);

/* The records kept, oldest first (i < nw_demand_decision_count). */
uint32_t nw_demand_decision_count(const struct nw_demand *d);
const struct nw_demand_decision *nw_demand_decision_at(const struct nw_demand *d, uint32_t i);

/* --- reading the ledger ------------------------------------------------ */

/* Since the ledger was made (a reload keeps it). */
struct nw_demand_totals {
	uint64_t offers_sized;
	uint64_t offers_unsized;
	uint64_t offers_estimated;       /* sized by engine.chars_per_token */
	uint64_t offers_unbounded;       /* without max_tokens */
	uint64_t prompt_tokens;          /* of sized offers */
	uint64_t output_requested;       /* max_tokens of sized offers */
	uint64_t queued;
	uint64_t admitted;
	uint64_t refused[NW_DEMAND_REFUSALS];
	uint64_t withdrawn;
	uint64_t completed_ok;
	uint64_t completed_failed;
	uint64_t output_delivered;
	uint64_t placements[NW_DEMAND_PHASES];   /* binding placements */
	uint64_t unserved[NW_DEMAND_PHASES];
	uint64_t decisions;              /* records ever made */
};
const struct nw_demand_totals *nw_demand_totals(const struct nw_demand *d);

typedef enum nw_demand_horizon {
	NW_DEMAND_SHORT = 0,
	NW_DEMAND_LONG = 1,
} nw_demand_horizon;

/* A horizon's demand at now_ns: what arrived in its buckets, and rates
 * over the time they cover (the horizon, or the time since the estimates
 * started when that is shorter, at least one bucket). */
struct nw_demand_estimate {
	double horizon_s;
	double bucket_s;                 /* horizon_s / NW_DEMAND_BUCKETS */
	double covered_s;
	uint64_t arrivals;               /* offers, sized and unsized */
	uint64_t unsized;                /* of which unsized: their work is unknown */
	uint64_t bounded;                /* sized offers that set max_tokens */
	uint64_t prompt_tokens;          /* sized offers' */
	uint64_t output_requested;       /* sized offers' max_tokens */
	uint64_t output_delivered;       /* completions' */
	uint64_t completions;
	double arrivals_per_s;
	double prompt_tokens_per_s;
	double output_requested_per_s;
	double output_delivered_per_s;
	/* The index of dispersion of arrivals: the variance of the arrival
	 * counts of the horizon's whole buckets over their mean. About 1 for
	 * Poisson arrivals, far more for bursts (docs/controller.md, "How a
	 * split is priced"); NaN with fewer than two whole buckets or no
	 * arrival in them. */
	double dispersion;
};
void nw_demand_estimate(const struct nw_demand *d, int64_t now_ns, nw_demand_horizon h,
                        struct nw_demand_estimate *out);

/* --- the arrival-evidence window (spec 7.6) ---------------------------- */

/* It opens at the ledger's start and at each reset, counts the offers
 * that arrive from then on, and is closed once evidence_span_s has passed
 * with at least evidence_min_arrivals of them, or once evidence_max_span_s
 * has passed (sparse traffic). */
struct nw_demand_evidence {
	double span_s;                   /* since it opened */
	uint64_t arrivals;
	bool closed;
	const char *closed_by;           /* "span_and_arrivals", "max_span"; NULL: open */
	double closed_after_s;           /* the span at which it closed; NaN: open */
	uint64_t resets;
	const char *last_reset;          /* the last reset's reason; NULL: none */
};
void nw_demand_evidence(const struct nw_demand *d, int64_t now_ns,
                        struct nw_demand_evidence *out);
/* Open it again (spec 7.6: a first-token timeout, a prefill-to-decode
 * recovery move). reason: a static string. */
void nw_demand_evidence_reset(struct nw_demand *d, int64_t now_ns, const char *reason);
const struct nw_demand_windows *nw_demand_windows(const struct nw_demand *d);

#endif /* NW_CORE_DEMAND_H */
