/*
 * One simulated engine's scheduler: continuous batching, one step at a
 * time, with a token budget per step, chunked prefill, KV capacity in
 * blocks, preemption (recompute) when KV runs out, and KV held under a
 * lease after prefill-only requests. Pure logic on virtual time: no I/O,
 * no clock; the caller runs steps and turns their results into HTTP.
 *
 * Driving it:
 *   d = sim_engine_begin_step(e, now_s)   // < 0: idle, nothing to do
 *   ... after d seconds (scaled by the caller) ...
 *   sim_engine_end_step(e, now_s)         // emits on_tokens / on_finished
 *
 * Callbacks may submit and abort requests on the same engine (the step
 * being ended is not disturbed), but must not begin or end a step.
 */
#ifndef NW_SIM_ENGINE_H
#define NW_SIM_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "sim/model.h"

typedef enum sim_request_kind {
	SIM_AGGREGATE = 0,     /* prefill then decode here */
	SIM_PREFILL_ONLY = 1,  /* do_remote_decode: prefill, one token, hold KV under a lease */
	SIM_REMOTE_DECODE = 2, /* do_remote_prefill: KV arrives at kv_ready_s, then decode */
} sim_request_kind;

typedef enum sim_finish {
	SIM_FINISH_LENGTH = 0,  /* max_tokens reached */
	SIM_FINISH_ABORTED = 1, /* for callers' use: sim_engine_abort itself
	                         * reports nothing */
	SIM_FINISH_REJECTED = 2,/* cannot ever fit (prompt + max_tokens above capacity);
	                         * the engine reports this by submit returning false,
	                         * never through on_finished */
} sim_finish;

/* Engine-private bookkeeping inside struct sim_request; do not touch. */
struct sim_request_private {
	struct sim_request *prev, *next; /* waiting or pending list */
	uint32_t computed;          /* tokens whose KV is in the cache */
	uint32_t run_slot;          /* index in the running array */
	uint32_t step_slot;         /* index in the current step, or UINT32_MAX */
	uint32_t flags;
};

struct sim_request {
	/* Set by the caller before submit. */
	uint64_t id;
	sim_request_kind kind;
	uint32_t prompt_tokens;
	uint32_t max_tokens;
	double arrival_s;
	double kv_ready_s;          /* SIM_REMOTE_DECODE: when the pulled KV is in place */
	void *owner;                /* caller's context */
	/* Maintained by the engine. */
	uint32_t prefilled;         /* prompt tokens whose KV is computed (reset
	                             * to 0 by a preemption) */
	uint32_t generated;         /* output tokens so far */
	uint32_t blocks;            /* KV blocks held */
	double first_token_s;       /* < 0 until the first token */
	double scheduled_s;         /* first scheduled, < 0 before */
	uint32_t preemptions;
	int state;                  /* engine-private */
	struct sim_request_private priv;
};

struct sim_engine_callbacks {
	/* At the end of a step: the request produced n new tokens (n >= 1). */
	void (*on_tokens)(void *owner, struct sim_request *req, uint32_t n);
	/* The request left the engine (after its last on_tokens). For
	 * SIM_PREFILL_ONLY with SIM_FINISH_LENGTH its blocks stay held under a
	 * lease (see sim_engine_lease_*) rather than freed. */
	void (*on_finished)(void *owner, struct sim_request *req, sim_finish why);
};

struct sim_engine_stats {
	uint32_t running;
	uint32_t waiting;
	uint64_t kv_blocks_used;    /* includes leased blocks */
	uint64_t kv_blocks_total;
	uint32_t block_tokens;      /* tokens per KV block */
	uint64_t leased_blocks;
	uint32_t leases;
	uint64_t preemptions_total;
	uint64_t prompt_tokens_total;
	uint64_t generation_tokens_total;
	uint64_t steps_total;
};

struct sim_engine;

/* noise_sigma: log-normal multiplicative noise on step times, a factor
 * exp(sigma * N(0, 1)) with median 1 (0: none), drawn from a generator
 * seeded with seed. The model is copied. */
struct sim_engine *sim_engine_new(const struct sim_model *model,
                                  const struct sim_engine_callbacks *cb,
                                  double noise_sigma, uint64_t seed);
void sim_engine_free(struct sim_engine *e);

/* Queue a request (borrowed until on_finished or sim_engine_abort; a
 * request must not be submitted again while queued). Returns false, without
 * queueing, when prompt_tokens or max_tokens is 0, prompt_tokens +
 * max_tokens exceed max_model_len, or their blocks exceed the whole KV
 * cache. SIM_PREFILL_ONLY produces one token whatever max_tokens says. */
bool sim_engine_submit(struct sim_engine *e, struct sim_request *req);

/* Remove a request at once and free its KV; no callback follows. Safe in
 * the middle of a step and from callbacks; a no-op for a request that is
 * not in the engine (finished, aborted, never submitted). */
void sim_engine_abort(struct sim_engine *e, struct sim_request *req);

/* Start a step at now_s; returns its duration in seconds (0 with a
 * zero-delay model), or a negative value when there is nothing to run:
 * then the caller waits for a submit, an abort, the earliest kv_ready_s
 * (sim_engine_next_ready) or, when leases hold the KV that waiting work
 * needs, the next lease expiry (sim_engine_next_lease_expiry). */
double sim_engine_begin_step(struct sim_engine *e, double now_s);
void sim_engine_end_step(struct sim_engine *e, double now_s);
bool sim_engine_in_step(const struct sim_engine *e);

/* Earliest kv_ready_s of a waiting SIM_REMOTE_DECODE request, or < 0. */
double sim_engine_next_ready(const struct sim_engine *e);

/* Leases: when a SIM_PREFILL_ONLY request finishes, its blocks stay held
 * under a lease keyed by its id, expiring lease_s after the finishing step
 * (default 30 s, vLLM's kv_lease_duration). Taking a lease frees its blocks
 * and returns its prompt token count; false when unknown or already freed
 * by sim_engine_lease_expire (the caller runs expiry on a timer). A new
 * lease under an id that still holds one replaces it (the old blocks are
 * freed). set_lease applies to leases created afterwards. */
void sim_engine_set_lease(struct sim_engine *e, double lease_s);
bool sim_engine_lease_take(struct sim_engine *e, uint64_t id, uint32_t *tokens);
/* Free every lease expired at now_s; returns how many. */
unsigned sim_engine_lease_expire(struct sim_engine *e, double now_s);
/* Earliest lease expiry, or < 0 when none. */
double sim_engine_next_lease_expiry(const struct sim_engine *e);

void sim_engine_stats(const struct sim_engine *e, struct sim_engine_stats *out);

/* The engine's copy of its model. */
const struct sim_model *sim_engine_model(const struct sim_engine *e);

#endif /* NW_SIM_ENGINE_H */
