/*
 * The what-if mode's simulated fleet: one narwhal-sim engine model
 * (src/sim/engine.h) per configured engine, stepped on the virtual clock
 * exactly as narwhal-sim's node.c steps it on the wall clock. A step of d
 * model seconds ends d / time_scale virtual seconds later, back to back
 * with the next while there is work; an idle engine starts on a request as
 * of its arrival, and wakes when a pulled KV lands (kv_ready_s) or a lease
 * lapses.
 *
 * Model time is virtual time times time_scale (narwhal-sim's --time-scale),
 * so a what-if run reads like a run of narwhal in front of narwhal-sim at
 * that scale: the same configuration, the same profile store and the same
 * narwhal-replay options give comparable reports.
 */
#ifndef NW_REPLAY_WHATIF_ENGINES_H
#define NW_REPLAY_WHATIF_ENGINES_H

#include <stdbool.h>
#include <stdint.h>

#include "sim/engine.h"
#include "tools/replay/whatif-events.h"

struct wi_engine {
	struct sim_engine *sim;
	bool in_step;
	double step_end_model;     /* model seconds: the step's exact end */
	int64_t wake_ns;           /* the wake queued, or -1 */
	double wake_model;         /* the model time it wakes for */
	uint32_t stamp;            /* its queued wake's; older ones are stale */
};

struct wi_engines {
	struct wi_engine *engines;
	uint32_t n;
	double time_scale;         /* model seconds per virtual second */
	struct wi_queue *queue;
	uint32_t wake_kind;        /* the event kind of an engine's wake */
	uint64_t steps;
};

/* n engines of model, each with noise_sigma and the seed seed + index (as
 * narwhal-sim seeds its engines), whose callbacks get cb. Their wakes are
 * events of wake_kind on queue, with the engine as obj. */
void wi_engines_init(struct wi_engines *f, uint32_t n, const struct sim_model *model,
                     const struct sim_engine_callbacks *cb, double noise_sigma, uint64_t seed,
                     double time_scale, struct wi_queue *queue, uint32_t wake_kind);
void wi_engines_clear(struct wi_engines *f);

/* Model seconds now, and the virtual time of a model time. */
double wi_engines_model_now(const struct wi_engines *f);
int64_t wi_engines_virtual_ns(const struct wi_engines *f, double model_s);

/* Work came to engine i (a submit, freed KV): it starts a step now when
 * it is idle. */
void wi_engines_kick(struct wi_engines *f, uint32_t i);

/* An engine's wake event: end its step (the callbacks run), then begin the
 * next one or sleep until there is work. */
void wi_engines_on_wake(struct wi_engines *f, const struct wi_event *ev);

#endif /* NW_REPLAY_WHATIF_ENGINES_H */
