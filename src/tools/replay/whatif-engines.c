#include "build-config.h"

#include "tools/replay/whatif-engines.h"

#include <math.h>

#include <glib.h>

void
wi_engines_init(struct wi_engines *f, uint32_t n, const struct sim_model *model,
                const struct sim_engine_callbacks *cb, double noise_sigma, uint64_t seed,
                double time_scale, struct wi_queue *queue, uint32_t wake_kind)
{
	f->engines = g_new0(struct wi_engine, MAX(n, 1));
	f->n = n;
	f->time_scale = time_scale;
	f->queue = queue;
	f->wake_kind = wake_kind;
	f->steps = 0;
	for (uint32_t i = 0; i < n; i++) {
		struct wi_engine *e = &f->engines[i];

		e->sim = sim_engine_new(model, cb, noise_sigma, seed + i);
		e->wake_ns = -1;
	}
}

void
wi_engines_clear(struct wi_engines *f)
{
	for (uint32_t i = 0; i < f->n; i++)
		sim_engine_free(f->engines[i].sim);
	g_free(f->engines);
	f->engines = NULL;
	f->n = 0;
}

double
wi_engines_model_now(const struct wi_engines *f)
{
	return wi_s(f->queue->now_ns) * f->time_scale;
}

int64_t
wi_engines_virtual_ns(const struct wi_engines *f, double model_s)
{
	/* Rounded up: the event never comes before the model time it is for. */
	return (int64_t)ceil(model_s / f->time_scale * 1e9);
}

static void
arm(struct wi_engines *f, struct wi_engine *e, double model_s)
{
	int64_t at = MAX(wi_engines_virtual_ns(f, model_s), f->queue->now_ns);

	e->stamp++;
	e->wake_ns = at;
	e->wake_model = model_s;
	wi_queue_push(f->queue, at, f->wake_kind, e, e->stamp);
}

void
wi_engines_kick(struct wi_engines *f, uint32_t i)
{
	struct wi_engine *e = &f->engines[i];

	if (e->in_step || (e->wake_ns >= 0 && e->wake_ns <= f->queue->now_ns))
		return;
	arm(f, e, wi_engines_model_now(f));
}

static double
earliest(double a, double b)
{
	if (a < 0)
		return b;
	if (b < 0)
		return a;
	return MIN(a, b);
}

void
wi_engines_on_wake(struct wi_engines *f, const struct wi_event *ev)
{
	struct wi_engine *e = ev->obj;
	double start, d, next;

	if (wi_event_stale(ev, e->stamp))
		return;
	e->wake_ns = -1;
	/* A busy engine starts its next step where the last one ended; an idle
	 * one as of the work that woke it (node.c). */
	start = MAX(wi_engines_model_now(f), e->wake_model);
	if (e->in_step) {
		e->in_step = false;
		start = e->step_end_model;
		sim_engine_end_step(e->sim, e->step_end_model);
	}
	sim_engine_lease_expire(e->sim, start);
	d = sim_engine_begin_step(e->sim, start);
	if (d >= 0) {
		f->steps++;
		e->in_step = true;
		e->step_end_model = start + d;
		arm(f, e, e->step_end_model);
		return;
	}
	/* Idle until a submit kicks it, a pulled KV lands, or a lease that
	 * holds the KV waiting work needs lapses. */
	next = earliest(sim_engine_next_ready(e->sim), sim_engine_next_lease_expiry(e->sim));
	if (next > start)
		arm(f, e, next);
}
