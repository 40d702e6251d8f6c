/*
 * The what-if mode's event core (issue 13, "A what-if mode under virtual
 * time": an event queue, O(log n), drives everything on a virtual clock;
 * docs/replay.md, "What-if mode"): time order, the push-order tie-break
 * that makes a run repeatable, the clock that follows the events and never
 * goes back, lazy cancelling by stamp, and the engine model stepped on that
 * clock as narwhal-sim steps it.
 */
#include "build-config.h"

#include <math.h>

#include <glib.h>

#include "tools/replay/whatif-engines.h"
#include "tools/replay/whatif-events.h"

static void
test_order(void)
{
	struct wi_queue q;
	struct wi_event ev;
	int64_t at;

	wi_queue_init(&q);
	g_assert_false(wi_queue_pop(&q, &ev));
	g_assert_false(wi_queue_peek(&q, &at));
	wi_queue_push(&q, 30, 1, NULL, 0);
	wi_queue_push(&q, 10, 2, NULL, 0);
	wi_queue_push(&q, 20, 3, NULL, 0);
	wi_queue_push(&q, 10, 4, NULL, 0); /* same time as kind 2, pushed later */
	g_assert_true(wi_queue_peek(&q, &at));
	g_assert_cmpint(at, ==, 10);
	g_assert_true(wi_queue_pop(&q, &ev));
	g_assert_cmpuint(ev.kind, ==, 2);
	g_assert_cmpint(q.now_ns, ==, 10);
	g_assert_true(wi_queue_pop(&q, &ev));
	g_assert_cmpuint(ev.kind, ==, 4);
	g_assert_true(wi_queue_pop(&q, &ev));
	g_assert_cmpuint(ev.kind, ==, 3);
	g_assert_cmpint(wi_queue_clock(&q), ==, 20);
	/* An event for the past runs now, never before what already ran. */
	wi_queue_push(&q, 5, 5, NULL, 0);
	g_assert_true(wi_queue_pop(&q, &ev));
	g_assert_cmpuint(ev.kind, ==, 5);
	g_assert_cmpint(ev.at_ns, ==, 20);
	g_assert_true(wi_queue_pop(&q, &ev));
	g_assert_cmpuint(ev.kind, ==, 1);
	g_assert_cmpint(q.now_ns, ==, 30);
	g_assert_false(wi_queue_pop(&q, &ev));
	wi_queue_clear(&q);
}

/* Many events in random order come out sorted by (time, push order), the
 * clock never going back; times drawn from a small range so that ties are
 * common. */
static void
test_heap_against_sort(void)
{
	GRand *rng = g_rand_new_with_seed(7);
	struct wi_queue q;
	struct wi_event ev, prev = { .at_ns = -1 };
	guint n = 0;

	wi_queue_init(&q);
	for (guint i = 0; i < 20000; i++)
		wi_queue_push(&q, g_rand_int_range(rng, 0, 500), 0, NULL, i);
	/* Interleave pops with pushes after the clock, as a run does. */
	while (wi_queue_pop(&q, &ev)) {
		g_assert_true(ev.at_ns > prev.at_ns || (ev.at_ns == prev.at_ns && ev.seq > prev.seq));
		g_assert_cmpint(q.now_ns, ==, ev.at_ns);
		if (n < 5000)
			wi_queue_push(&q, ev.at_ns + g_rand_int_range(rng, 0, 50), 0, NULL, 0);
		prev = ev;
		n++;
	}
	g_assert_cmpuint(n, ==, 25000);
	wi_queue_clear(&q);
	g_rand_free(rng);
}

static void
test_stale(void)
{
	struct wi_queue q;
	struct wi_event ev;
	uint32_t owner = 1;

	wi_queue_init(&q);
	wi_queue_push(&q, 10, 0, NULL, owner);
	owner++; /* the owner forgets what it pushed */
	wi_queue_push(&q, 20, 0, NULL, owner);
	g_assert_true(wi_queue_pop(&q, &ev));
	g_assert_true(wi_event_stale(&ev, owner));
	g_assert_true(wi_queue_pop(&q, &ev));
	g_assert_false(wi_event_stale(&ev, owner));
	wi_queue_clear(&q);
	g_assert_cmpint(wi_ns(1.5), ==, 1500000000);
	g_assert_cmpfloat(wi_s(2500000000), ==, 2.5);
}

/* --- the engine model on the virtual clock ---------------------------- */

struct seen {
	double first_s, last_s; /* virtual seconds of the tokens */
	uint32_t tokens;
	bool finished;
	struct wi_queue *q;
};

static void
on_tokens(void *owner, struct sim_request *req, uint32_t n)
{
	struct seen *s = owner;

	if (s->tokens == 0)
		s->first_s = wi_s(s->q->now_ns);
	s->last_s = wi_s(s->q->now_ns);
	s->tokens += n;
}

static void
on_finished(void *owner, struct sim_request *req, sim_finish why)
{
	struct seen *s = owner;

	g_assert_cmpint(why, ==, SIM_FINISH_LENGTH);
	s->finished = true;
}

static void
drain(struct wi_engines *f)
{
	struct wi_event ev;

	while (wi_queue_pop(f->queue, &ev))
		wi_engines_on_wake(f, &ev);
}

/* One aggregate request on an idle engine at time scale k: its first token
 * comes after the prompt's step, each next one after a decode step of the
 * context so far, each step d model seconds taking d / k virtual seconds,
 * back to back (src/sim/model.h's formulas, node.c's stepping). */
static void
run_one(double k)
{
	struct sim_engine_callbacks cb = { on_tokens, on_finished };
	struct sim_model m;
	struct wi_queue q;
	struct wi_engines f;
	struct seen s = { .q = &q };
	struct sim_request req = { .id = 1, .kind = SIM_AGGREGATE, .prompt_tokens = 500,
	                           .max_tokens = 5, .owner = &s };
	double first, step_sum = 0;

	g_assert_true(sim_model_preset("opt-13b-a100", &m));
	wi_queue_init(&q);
	wi_engines_init(&f, 1, &m, &cb, 0, 1, k, &q, 1);
	/* The clock moves to 2 s (another event), then the request arrives. */
	wi_queue_push(&q, wi_ns(2.0), 9, NULL, 0);
	{
		struct wi_event ev;

		g_assert_true(wi_queue_pop(&q, &ev));
	}
	g_assert_true(sim_engine_submit(f.engines[0].sim, &req));
	wi_engines_kick(&f, 0);
	wi_engines_kick(&f, 0); /* a second kick queues no second wake */
	g_assert_cmpuint(q.len, ==, 1);
	drain(&f);
	g_assert_true(s.finished);
	g_assert_cmpuint(s.tokens, ==, 5);
	first = (sim_model_prefill_ms(&m, 500, 500.0 * 500) + m.step_overhead_ms) / 1e3;
	g_assert_cmpfloat(fabs(s.first_s - (2.0 + first / k)), <, 2e-9);
	for (uint32_t j = 1; j < 5; j++)
		step_sum += (sim_model_decode_ms(&m, 500 + j, 1) + m.step_overhead_ms) / 1e3;
	g_assert_cmpfloat(fabs((s.last_s - s.first_s) - step_sum / k), <, 1e-8);
	g_assert_cmpuint(f.steps, ==, 5);
	wi_engines_clear(&f);
	wi_queue_clear(&q);
}

static void
test_engine_steps(void)
{
	run_one(1.0);
	run_one(4.0); /* narwhal-sim's --time-scale 4: every time a quarter */
}

/* A remote decode whose KV lands later: the idle engine sleeps until then
 * and starts its step as of kv_ready_s, not before. */
static void
test_engine_wakes_for_kv(void)
{
	struct sim_engine_callbacks cb = { on_tokens, on_finished };
	struct sim_model m;
	struct wi_queue q;
	struct wi_engines f;
	struct seen s = { .q = &q };
	struct sim_request req = { .id = 1, .kind = SIM_REMOTE_DECODE, .prompt_tokens = 100,
	                           .max_tokens = 1, .kv_ready_s = 0.5, .owner = &s };
	double step;

	g_assert_true(sim_model_preset("opt-13b-a100", &m));
	wi_queue_init(&q);
	wi_engines_init(&f, 1, &m, &cb, 0, 1, 1.0, &q, 1);
	g_assert_true(sim_engine_submit(f.engines[0].sim, &req));
	wi_engines_kick(&f, 0);
	drain(&f);
	g_assert_true(s.finished);
	step = (sim_model_decode_ms(&m, 100, 1) + m.step_overhead_ms) / 1e3;
	g_assert_cmpfloat(fabs(s.first_s - (0.5 + step)), <, 2e-9);
	wi_engines_clear(&f);
	wi_queue_clear(&q);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/whatif/events/order", test_order);
	g_test_add_func("/whatif/events/heap-against-sort", test_heap_against_sort);
	g_test_add_func("/whatif/events/stale", test_stale);
	g_test_add_func("/whatif/engines/steps-on-virtual-time", test_engine_steps);
	g_test_add_func("/whatif/engines/wakes-for-kv", test_engine_wakes_for_kv);
	return g_test_run();
}
