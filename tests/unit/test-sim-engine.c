/*
 * narwhal-sim's engine scheduler on virtual time: step times from the
 * model, interference, chunked prefill, preemption, leases, remote decode,
 * aborts (also from callbacks), rejection and noise.
 */
#include "build-config.h"

#include <math.h>
#include <string.h>

#include "sim/engine.h"

#define MAX_TIMES 64

/* One request and what the engine told us about it. */
struct rec {
	struct sim_request req;
	struct harness *h;
	uint32_t tokens;
	double times[MAX_TIMES];  /* when each of the first tokens came */
	int finished;
	sim_finish why;
	double finish_s;
};

struct harness {
	struct sim_engine *e;
	double now;
	uint64_t next_id;
	GPtrArray *recs;          /* owns struct rec */
	/* hooks for the re-entrancy tests */
	struct rec *abort_on_token_of, *abort_victim;
	bool submit_on_finish;
	uint32_t submits_left;
	uint32_t closed_loop_prompt;
};

static void
on_tokens(void *owner, struct sim_request *req, uint32_t n)
{
	struct rec *r = owner;
	struct harness *h = r->h;

	g_assert_true(&r->req == req);
	g_assert_cmpuint(n, ==, 1);
	g_assert_cmpint(r->finished, ==, 0);
	if (r->tokens < MAX_TIMES)
		r->times[r->tokens] = h->now;
	r->tokens += n;
	g_assert_cmpuint(r->tokens, ==, req->generated);
	if (h->abort_on_token_of == r) {
		h->abort_on_token_of = NULL;
		sim_engine_abort(h->e, &h->abort_victim->req);
	}
}

static struct rec *submit(struct harness *h, sim_request_kind kind, uint32_t prompt,
                          uint32_t max_tokens);

static void
on_finished(void *owner, struct sim_request *req, sim_finish why)
{
	struct rec *r = owner;
	struct harness *h = r->h;

	g_assert_true(&r->req == req);
	r->finished++;
	r->why = why;
	r->finish_s = h->now;
	if (h->submit_on_finish && h->submits_left > 0) {
		h->submits_left--;
		submit(h, SIM_AGGREGATE, h->closed_loop_prompt, 8);
	}
}

static const struct sim_engine_callbacks callbacks = { on_tokens, on_finished };

static struct harness *
harness_new(const struct sim_model *m, double sigma, uint64_t seed)
{
	struct harness *h = g_new0(struct harness, 1);

	h->e = sim_engine_new(m, &callbacks, sigma, seed);
	h->recs = g_ptr_array_new_with_free_func(g_free);
	return h;
}

static void
harness_free(struct harness *h)
{
	sim_engine_free(h->e);
	g_ptr_array_unref(h->recs);
	g_free(h);
}

static struct rec *
submit_at(struct harness *h, sim_request_kind kind, uint32_t prompt, uint32_t max_tokens,
          double kv_ready_s)
{
	struct rec *r = g_new0(struct rec, 1);

	r->h = h;
	r->req.id = ++h->next_id;
	r->req.kind = kind;
	r->req.prompt_tokens = prompt;
	r->req.max_tokens = max_tokens;
	r->req.arrival_s = h->now;
	r->req.kv_ready_s = kv_ready_s;
	r->req.owner = r;
	g_ptr_array_add(h->recs, r);
	if (!sim_engine_submit(h->e, &r->req))
		return NULL;
	return r;
}

static struct rec *
submit(struct harness *h, sim_request_kind kind, uint32_t prompt, uint32_t max_tokens)
{
	return submit_at(h, kind, prompt, max_tokens, 0.0);
}

/* One step; its duration in seconds, or < 0 when idle. */
static double
step(struct harness *h)
{
	double d = sim_engine_begin_step(h->e, h->now);

	if (d < 0)
		return d;
	h->now += d;
	sim_engine_end_step(h->e, h->now);
	return d;
}

/* Steps until idle, expiring leases as a server's timer would, and
 * jumping to kv_ready_s and lease expiries when idle. */
static void
run(struct harness *h)
{
	for (unsigned guard = 0; guard < 1000000; guard++) {
		double ready, lease;

		sim_engine_lease_expire(h->e, h->now);
		if (step(h) >= 0)
			continue;
		ready = sim_engine_next_ready(h->e);
		lease = sim_engine_next_lease_expiry(h->e);
		if (ready >= 0) {
			h->now = MAX(h->now, ready);
		} else {
			struct sim_engine_stats s;

			sim_engine_stats(h->e, &s);
			if (s.waiting == 0 || lease < 0)
				return;
			h->now = MAX(h->now, lease);
			sim_engine_lease_expire(h->e, h->now);
		}
	}
	g_error("engine did not go idle");
}

static struct sim_model
model(const char *name)
{
	struct sim_model m;

	g_assert_true(sim_model_preset(name, &m));
	return m;
}

static double
prefill_s(const struct sim_model *m, double l)
{
	return sim_model_prefill_ms(m, (uint64_t)l, l * l) / 1e3;
}

static double
decode_s(const struct sim_model *m, uint64_t ctx, uint32_t batch)
{
	return sim_model_decode_ms(m, ctx, batch) / 1e3;
}

#define EPS 1e-9

/* Alone on the engine, TTFT is one prefill step and every later token one
 * decode step whose context grows by one. */
static void
test_single_request_timing(void)
{
	struct sim_model m = model("opt-13b-a100");
	struct harness *h = harness_new(&m, 0.0, 1);
	struct rec *r = submit(h, SIM_AGGREGATE, 1024, 5);
	struct sim_engine_stats s;

	run(h);
	g_assert_cmpuint(r->tokens, ==, 5);
	g_assert_cmpint(r->finished, ==, 1);
	g_assert_cmpint(r->why, ==, SIM_FINISH_LENGTH);
	g_assert_cmpfloat_with_epsilon(r->req.first_token_s, prefill_s(&m, 1024), EPS);
	g_assert_cmpfloat_with_epsilon(r->times[0], 0.130, 0.003); /* the 1k figure */
	for (uint32_t k = 1; k < 5; k++)
		g_assert_cmpfloat_with_epsilon(r->times[k] - r->times[k - 1],
		                               decode_s(&m, 1024 + k, 1), EPS);
	g_assert_cmpfloat(r->req.scheduled_s, ==, 0.0);
	sim_engine_stats(h->e, &s);
	g_assert_cmpuint(s.steps_total, ==, 5);
	g_assert_cmpuint(s.kv_blocks_used, ==, 0);
	g_assert_cmpuint(s.running + s.waiting, ==, 0);
	g_assert_cmpuint(s.prompt_tokens_total, ==, 1024);
	g_assert_cmpuint(s.generation_tokens_total, ==, 5);
	harness_free(h);
}

/* A prefill joining a decode batch makes that step pay both parts: the
 * running request's inter-token gap jumps by the whole prefill. */
static void
test_interference(void)
{
	struct sim_model m = model("opt-13b-a100");
	struct harness *h = harness_new(&m, 0.0, 1);
	struct rec *a = submit(h, SIM_AGGREGATE, 100, 6), *b;
	double mixed;

	step(h); /* a's prefill */
	step(h); /* a decodes alone: context 101 */
	g_assert_cmpfloat_with_epsilon(a->times[1] - a->times[0], decode_s(&m, 101, 1), EPS);
	b = submit(h, SIM_AGGREGATE, 2000, 2);
	mixed = step(h);
	g_assert_cmpfloat_with_epsilon(mixed, prefill_s(&m, 2000) + decode_s(&m, 102, 1), EPS);
	g_assert_cmpfloat_with_epsilon(a->times[2] - a->times[1], mixed, EPS);
	g_assert_cmpfloat_with_epsilon(b->req.first_token_s, a->times[2], EPS);
	/* then both decode together: B = 2, contexts 103 and 2001 */
	g_assert_cmpfloat_with_epsilon(step(h), decode_s(&m, 103 + 2001, 2), EPS);
	run(h);
	g_assert_cmpint(a->finished + b->finished, ==, 2);
	harness_free(h);
}

/* A prompt longer than the token budget is prefilled over several steps;
 * its first token comes with the last chunk. Each chunk pays the intercept
 * and its share of the quadratic term, (o+l)^2 - o^2. */
static void
test_chunked_prefill(void)
{
	struct sim_model m = model("opt-13b-a100");
	struct harness *h;
	struct rec *r;
	struct sim_engine_stats s;
	static const uint32_t chunks[] = { 512, 512, 476 };
	double o = 0, ttft = 0;

	m.max_num_batched_tokens = 512;
	h = harness_new(&m, 0.0, 1);
	r = submit(h, SIM_AGGREGATE, 1500, 2);
	for (size_t i = 0; i < G_N_ELEMENTS(chunks); i++) {
		double l = chunks[i], want = sim_model_prefill_ms(&m, chunks[i],
		                                                  (o + l) * (o + l) - o * o) / 1e3;

		g_assert_cmpfloat_with_epsilon(step(h), want, EPS);
		ttft += want;
		o += l;
		g_assert_cmpuint(r->req.prefilled, ==, (uint32_t)o);
		g_assert_cmpuint(r->tokens, ==, i + 1 == G_N_ELEMENTS(chunks) ? 1 : 0);
		sim_engine_stats(h->e, &s);
		g_assert_cmpuint(s.kv_blocks_used, ==, ((uint64_t)o + 15) / 16);
	}
	g_assert_cmpfloat_with_epsilon(r->req.first_token_s, ttft, EPS);
	/* the whole prompt's quadratic term is paid exactly once */
	g_assert_cmpfloat_with_epsilon(ttft, (3 * m.prefill_a_ms + m.prefill_b_ms * 1500 +
	                                      m.prefill_c_ms * 1500.0 * 1500) / 1e3, EPS);
	run(h);
	g_assert_cmpint(r->finished, ==, 1);
	harness_free(h);
}

/* Decodes take the budget first; a newcomer gets what is left. */
static void
test_budget_shared_with_decodes(void)
{
	struct sim_model m = model("llama3-8b-h100");
	struct harness *h;
	struct rec *a, *b;

	m.max_num_batched_tokens = 100;
	h = harness_new(&m, 0.0, 1);
	a = submit(h, SIM_AGGREGATE, 50, 10);
	step(h);
	b = submit(h, SIM_AGGREGATE, 300, 2);
	step(h); /* a decodes (1 token), b gets 99 */
	g_assert_cmpuint(b->req.prefilled, ==, 99);
	step(h);
	g_assert_cmpuint(b->req.prefilled, ==, 198);
	run(h);
	g_assert_cmpint(a->finished + b->finished, ==, 2);
	harness_free(h);
}

/* KV runs out: the most recently scheduled request is preempted, goes back
 * to the front of the queue, recomputes, and every request still ends with
 * all its tokens, each emitted once. */
static void
test_preemption_and_recovery(void)
{
	struct sim_model m = model("opt-13b-a100");
	struct harness *h;
	struct rec *r[4];
	struct sim_engine_stats s;
	uint32_t preempted = 0;

	m.kv_capacity_tokens = 64 * 16; /* 64 blocks; each request grows to 25 */
	h = harness_new(&m, 0.0, 1);
	for (int i = 0; i < 4; i++)
		r[i] = submit(h, SIM_AGGREGATE, 200, 200);
	run(h);
	sim_engine_stats(h->e, &s);
	g_assert_cmpuint(s.preemptions_total, >, 0);
	for (int i = 0; i < 4; i++) {
		g_assert_cmpint(r[i]->finished, ==, 1);
		g_assert_cmpuint(r[i]->tokens, ==, 200);
		for (uint32_t k = 1; k < MAX_TIMES; k++)
			g_assert_cmpfloat(r[i]->times[k], >, r[i]->times[k - 1]);
		preempted += r[i]->req.preemptions;
	}
	g_assert_cmpuint(preempted, ==, s.preemptions_total);
	/* the first request admitted is never the victim */
	g_assert_cmpuint(r[0]->req.preemptions, ==, 0);
	g_assert_cmpuint(s.kv_blocks_used, ==, 0);
	g_assert_cmpuint(s.generation_tokens_total, ==, 800);
	harness_free(h);
}

/* The victim is the most recently scheduled request; it keeps its output
 * and later prefills prompt + output again in one step, then goes on. */
static void
test_preempted_request_recomputes(void)
{
	struct sim_model m = model("opt-13b-a100");
	struct harness *h;
	struct rec *a, *b;
	struct sim_engine_stats s;
	uint32_t g;

	m.kv_capacity_tokens = 24 * 16;
	h = harness_new(&m, 0.0, 1);
	a = submit(h, SIM_AGGREGATE, 160, 200);
	b = submit(h, SIM_AGGREGATE, 160, 200);
	while (b->req.preemptions == 0)
		g_assert_cmpfloat(step(h), >=, 0);
	g = b->req.generated;
	g_assert_cmpuint(g, ==, b->tokens);
	g_assert_cmpuint(g, >, 1);
	g_assert_cmpuint(a->req.preemptions, ==, 0);
	g_assert_cmpuint(b->req.prefilled, ==, 0);
	g_assert_cmpuint(b->req.blocks, ==, 0);
	sim_engine_stats(h->e, &s);
	g_assert_cmpuint(s.waiting, ==, 1);
	g_assert_cmpuint(s.preemptions_total, ==, 1);
	while (!a->finished)
		g_assert_cmpfloat(step(h), >=, 0);
	g_assert_cmpuint(b->tokens, ==, g); /* starved while a ran */
	g_assert_cmpfloat_with_epsilon(step(h), prefill_s(&m, 160 + g), EPS);
	g_assert_cmpuint(b->tokens, ==, g + 1);
	g_assert_cmpuint(b->req.prefilled, ==, 160);
	run(h);
	g_assert_cmpuint(b->tokens, ==, 200);
	harness_free(h);
}

/* Many requests of every kind on a small cache with aborts at random
 * moments: KV accounting stays exact and every request ends one way. */
static void
test_random_workload(void)
{
	struct sim_model m = model("llama3-8b-h100");
	struct harness *h;
	GRand *rand = g_rand_new_with_seed(2024);
	struct sim_engine_stats s;
	uint32_t aborted = 0, submitted = 0;

	m.kv_capacity_tokens = 4096;
	m.max_model_len = 2048;
	m.max_num_batched_tokens = 1024;
	m.max_num_seqs = 16;
	h = harness_new(&m, 0.05, 9);
	sim_engine_set_lease(h->e, 0.5);
	for (int round = 0; round < 3000; round++) {
		double d;

		if (g_rand_int_range(rand, 0, 3) == 0 && submitted < 1500) {
			sim_request_kind kind = (sim_request_kind)g_rand_int_range(rand, 0, 3);
			uint32_t p = (uint32_t)g_rand_int_range(rand, 1, 1500);
			uint32_t n = (uint32_t)g_rand_int_range(rand, 1, 2048 - (int)p + 1);

			g_assert_nonnull(submit_at(h, kind, p, n,
			                           h->now + g_rand_double_range(rand, 0, 0.05)));
			submitted++;
		}
		sim_engine_lease_expire(h->e, h->now);
		d = sim_engine_begin_step(h->e, h->now);
		if (h->recs->len > 0 && g_rand_int_range(rand, 0, 10) == 0) {
			struct rec *r = g_ptr_array_index(h->recs,
			                                  g_rand_int_range(rand, 0, (int)h->recs->len));

			if (!r->finished && r->tokens < r->req.max_tokens) {
				sim_engine_abort(h->e, &r->req);
				r->finished = -1;
				aborted++;
			}
		}
		if (d >= 0) {
			h->now += d;
			sim_engine_end_step(h->e, h->now);
		} else {
			h->now += 0.01;
		}
		sim_engine_stats(h->e, &s);
		g_assert_cmpuint(s.kv_blocks_used, <=, s.kv_blocks_total);
		g_assert_cmpuint(s.running, <=, 16);
	}
	run(h);
	sim_engine_lease_expire(h->e, h->now + 1.0);
	sim_engine_stats(h->e, &s);
	g_assert_cmpuint(s.kv_blocks_used, ==, 0);
	g_assert_cmpuint(s.running + s.waiting + s.leases, ==, 0);
	g_assert_cmpuint(s.preemptions_total, >, 0);
	for (guint i = 0; i < h->recs->len; i++) {
		struct rec *r = g_ptr_array_index(h->recs, i);

		if (r->finished == -1)
			continue;
		g_assert_cmpint(r->finished, ==, 1);
		g_assert_cmpuint(r->tokens, ==,
		                 r->req.kind == SIM_PREFILL_ONLY ? 1 : r->req.max_tokens);
	}
	g_assert_cmpuint(aborted, >, 0);
	g_rand_free(rand);
	harness_free(h);
}

/* Never more than max_num_seqs running; the rest wait FIFO. */
static void
test_max_num_seqs(void)
{
	struct sim_model m = model("llama3-8b-h100");
	struct harness *h;
	struct rec *r[3];
	struct sim_engine_stats s;

	m.max_num_seqs = 2;
	h = harness_new(&m, 0.0, 1);
	for (int i = 0; i < 3; i++)
		r[i] = submit(h, SIM_AGGREGATE, 10, 3);
	step(h);
	sim_engine_stats(h->e, &s);
	g_assert_cmpuint(s.running, ==, 2);
	g_assert_cmpuint(s.waiting, ==, 1);
	g_assert_cmpuint(r[2]->tokens, ==, 0);
	run(h);
	g_assert_cmpfloat(r[2]->req.first_token_s, >=, r[0]->finish_s);
	harness_free(h);
}

/* do_remote_decode: one token, finish, blocks kept under a lease that
 * expires lease_s after the finishing step; lease_take works once. */
static void
test_prefill_only_lease(void)
{
	struct sim_model m = model("llama3-8b-h100");
	struct harness *h = harness_new(&m, 0.0, 1);
	struct rec *p = submit(h, SIM_PREFILL_ONLY, 1000, 1);
	struct rec *q = submit(h, SIM_PREFILL_ONLY, 500, 50); /* still one token */
	struct sim_engine_stats s;
	uint32_t tokens = 0;
	double end;

	sim_engine_set_lease(h->e, 5.0);
	run(h);
	end = p->finish_s;
	g_assert_cmpuint(p->tokens, ==, 1);
	g_assert_cmpuint(q->tokens, ==, 1);
	g_assert_cmpint(p->why, ==, SIM_FINISH_LENGTH);
	g_assert_cmpint(q->why, ==, SIM_FINISH_LENGTH);
	sim_engine_stats(h->e, &s);
	g_assert_cmpuint(s.leases, ==, 2);
	g_assert_cmpuint(s.leased_blocks, ==, 63 + 32);
	g_assert_cmpuint(s.kv_blocks_used, ==, 63 + 32);
	g_assert_cmpfloat_with_epsilon(sim_engine_next_lease_expiry(h->e), end + 5.0, EPS);

	g_assert_true(sim_engine_lease_take(h->e, p->req.id, &tokens));
	g_assert_cmpuint(tokens, ==, 1000);
	g_assert_false(sim_engine_lease_take(h->e, p->req.id, &tokens));
	g_assert_false(sim_engine_lease_take(h->e, 999, &tokens));

	g_assert_cmpuint(sim_engine_lease_expire(h->e, end + 4.9), ==, 0);
	g_assert_cmpuint(sim_engine_lease_expire(h->e, end + 5.0), ==, 1);
	g_assert_false(sim_engine_lease_take(h->e, q->req.id, &tokens));
	sim_engine_stats(h->e, &s);
	g_assert_cmpuint(s.leases, ==, 0);
	g_assert_cmpuint(s.kv_blocks_used, ==, 0);
	g_assert_cmpfloat(sim_engine_next_lease_expiry(h->e), <, 0);
	harness_free(h);
}

/* Leases holding the KV keep waiting work out until they expire. */
static void
test_leases_block_until_expiry(void)
{
	struct sim_model m = model("opt-13b-a100");
	struct harness *h;
	struct rec *p, *r;

	m.kv_capacity_tokens = 2048;
	h = harness_new(&m, 0.0, 1);
	sim_engine_set_lease(h->e, 30.0);
	p = submit(h, SIM_PREFILL_ONLY, 1500, 1);
	run(h);
	g_assert_cmpint(p->finished, ==, 1);
	r = submit(h, SIM_AGGREGATE, 1000, 4);
	g_assert_cmpfloat(step(h), <, 0); /* 1000 tokens do not fit beside the lease */
	run(h);                            /* jumps to the expiry */
	g_assert_cmpint(r->finished, ==, 1);
	g_assert_cmpfloat(r->req.first_token_s, >=, p->finish_s + 30.0);
	harness_free(h);
}

/* do_remote_prefill: nothing before kv_ready_s; then the prompt's KV is
 * there (blocks for it at admission) and the first step decodes. */
static void
test_remote_decode(void)
{
	struct sim_model m = model("opt-13b-a100");
	struct harness *h = harness_new(&m, 0.0, 1);
	struct rec *r = submit_at(h, SIM_REMOTE_DECODE, 1000, 3, 2.0);
	struct sim_engine_stats s;
	double d;

	sim_engine_stats(h->e, &s);
	g_assert_cmpuint(s.waiting, ==, 1);
	g_assert_cmpfloat(sim_engine_begin_step(h->e, 1.999), <, 0);
	g_assert_false(sim_engine_in_step(h->e));
	g_assert_cmpfloat(sim_engine_next_ready(h->e), ==, 2.0);
	h->now = 2.0;
	d = sim_engine_begin_step(h->e, h->now);
	g_assert_cmpfloat_with_epsilon(d, decode_s(&m, 1000, 1), EPS);
	g_assert_cmpuint(r->req.prefilled, ==, 1000);
	g_assert_cmpuint(r->req.blocks, ==, 63);
	h->now += d;
	sim_engine_end_step(h->e, h->now);
	g_assert_cmpfloat_with_epsilon(r->req.first_token_s, 2.0 + d, EPS);
	g_assert_cmpfloat_with_epsilon(step(h), decode_s(&m, 1001, 1), EPS);
	run(h);
	g_assert_cmpuint(r->tokens, ==, 3);
	g_assert_cmpfloat(sim_engine_next_ready(h->e), <, 0);
	sim_engine_stats(h->e, &s);
	g_assert_cmpuint(s.prompt_tokens_total, ==, 1000);
	harness_free(h);
}

/* Remote decodes become schedulable in kv_ready_s order, and one whose KV
 * is late does not hold up ordinary work. */
static void
test_remote_decode_does_not_block(void)
{
	struct sim_model m = model("llama3-8b-h100");
	struct harness *h = harness_new(&m, 0.0, 1);
	struct rec *late = submit_at(h, SIM_REMOTE_DECODE, 100, 2, 5.0);
	struct rec *soon = submit_at(h, SIM_REMOTE_DECODE, 100, 2, 1.0);
	struct rec *agg = submit(h, SIM_AGGREGATE, 100, 2);

	g_assert_cmpfloat(sim_engine_next_ready(h->e), ==, 1.0);
	run(h);
	g_assert_cmpfloat(agg->req.first_token_s, <, 1.0);
	g_assert_cmpfloat(soon->req.first_token_s, >=, 1.0);
	g_assert_cmpfloat(soon->req.first_token_s, <, 5.0);
	g_assert_cmpfloat(late->req.first_token_s, >=, 5.0);
	harness_free(h);
}

/* Aborts free KV at once, with no callback, also between begin and end of
 * a step the request is part of. */
static void
test_abort(void)
{
	struct sim_model m = model("opt-13b-a100");
	struct harness *h = harness_new(&m, 0.0, 1);
	struct rec *a = submit(h, SIM_AGGREGATE, 800, 10);
	struct rec *b = submit(h, SIM_AGGREGATE, 800, 10);
	struct rec *w = submit_at(h, SIM_REMOTE_DECODE, 800, 10, 100.0);
	struct sim_engine_stats s;
	double d;

	step(h);
	d = sim_engine_begin_step(h->e, h->now);
	g_assert_cmpfloat(d, >, 0);
	sim_engine_abort(h->e, &a->req); /* mid-step */
	sim_engine_stats(h->e, &s);
	g_assert_cmpuint(s.kv_blocks_used, ==, b->req.blocks);
	h->now += d;
	sim_engine_end_step(h->e, h->now);
	g_assert_cmpuint(a->tokens, ==, 1);
	g_assert_cmpuint(b->tokens, ==, 2);
	sim_engine_abort(h->e, &w->req); /* still waiting for its KV */
	g_assert_cmpfloat(sim_engine_next_ready(h->e), <, 0);
	sim_engine_abort(h->e, &b->req);
	sim_engine_abort(h->e, &b->req); /* twice: a no-op */
	sim_engine_stats(h->e, &s);
	g_assert_cmpuint(s.kv_blocks_used, ==, 0);
	g_assert_cmpuint(s.running + s.waiting, ==, 0);
	g_assert_cmpfloat(step(h), <, 0);
	g_assert_cmpint(a->finished + b->finished + w->finished, ==, 0);
	harness_free(h);
}

/* A callback aborts another request of the same step (not yet reported)
 * and then the request it is called for; end_step touches neither. */
static void
test_abort_from_callback(void)
{
	struct sim_model m = model("llama3-8b-h100");
	struct harness *h = harness_new(&m, 0.0, 1);
	struct rec *a = submit(h, SIM_AGGREGATE, 64, 5);
	struct rec *b = submit(h, SIM_AGGREGATE, 64, 5);
	struct rec *c = submit(h, SIM_AGGREGATE, 64, 1);
	struct rec *d;
	struct sim_engine_stats s;

	h->abort_on_token_of = a;
	h->abort_victim = b;
	step(h);
	g_assert_cmpuint(a->tokens, ==, 1);
	g_assert_cmpuint(b->tokens, ==, 0);
	g_assert_cmpint(b->finished, ==, 0);
	g_assert_cmpint(c->finished, ==, 1);

	/* d's only token finishes it, but it aborts itself first: no
	 * on_finished follows */
	d = submit(h, SIM_AGGREGATE, 64, 1);
	h->abort_on_token_of = d;
	h->abort_victim = d;
	step(h);
	g_assert_cmpuint(d->tokens, ==, 1);
	g_assert_cmpint(d->finished, ==, 0);
	g_assert_cmpuint(a->tokens, ==, 2);

	h->abort_on_token_of = a;
	h->abort_victim = a;
	step(h);
	g_assert_cmpuint(a->tokens, ==, 3);
	g_assert_cmpint(a->finished, ==, 0);
	sim_engine_stats(h->e, &s);
	g_assert_cmpuint(s.kv_blocks_used, ==, 0);
	g_assert_cmpfloat(step(h), <, 0);
	harness_free(h);
}

/* Closed loop: on_finished submits the next request. */
static void
test_submit_from_callback(void)
{
	struct sim_model m = model("llama3-8b-h100");
	struct harness *h = harness_new(&m, 0.0, 1);
	struct sim_engine_stats s;

	h->submit_on_finish = true;
	h->submits_left = 50;
	h->closed_loop_prompt = 40;
	for (int i = 0; i < 4; i++)
		submit(h, SIM_AGGREGATE, 40, 8);
	run(h);
	g_assert_cmpuint(h->recs->len, ==, 54);
	for (guint i = 0; i < h->recs->len; i++) {
		struct rec *r = g_ptr_array_index(h->recs, i);

		g_assert_cmpint(r->finished, ==, 1);
		g_assert_cmpuint(r->tokens, ==, 8);
	}
	sim_engine_stats(h->e, &s);
	g_assert_cmpuint(s.generation_tokens_total, ==, 54 * 8);
	harness_free(h);
}

/* Requests that could never run are refused at submit. */
static void
test_reject(void)
{
	struct sim_model m = model("opt-13b-a100");
	struct harness *h = harness_new(&m, 0.0, 1);
	struct sim_engine_stats s;

	g_assert_null(submit(h, SIM_AGGREGATE, 2000, 49));  /* 2049 > max_model_len */
	g_assert_nonnull(submit(h, SIM_AGGREGATE, 2000, 48));
	g_assert_null(submit(h, SIM_AGGREGATE, 0, 10));
	g_assert_null(submit(h, SIM_AGGREGATE, 10, 0));
	g_assert_null(submit(h, SIM_PREFILL_ONLY, 2048, 1));
	sim_engine_stats(h->e, &s);
	g_assert_cmpuint(s.waiting, ==, 1);
	harness_free(h);

	m.kv_capacity_tokens = 512; /* below max_model_len: KV is the limit */
	h = harness_new(&m, 0.0, 1);
	g_assert_null(submit(h, SIM_AGGREGATE, 500, 13));
	g_assert_nonnull(submit(h, SIM_AGGREGATE, 500, 12));
	harness_free(h);
}

/* Step times of a fixed workload under noise. */
static GArray *
noisy_steps(double sigma, uint64_t seed)
{
	struct sim_model m = model("opt-13b-a100");
	struct harness *h = harness_new(&m, sigma, seed);
	GArray *d = g_array_new(FALSE, FALSE, sizeof(double));
	double x;

	for (int i = 0; i < 8; i++)
		submit(h, SIM_AGGREGATE, 300 + 50 * i, 40);
	while ((x = step(h)) >= 0)
		g_array_append_val(d, x);
	harness_free(h);
	return d;
}

static void
test_noise(void)
{
	GArray *a = noisy_steps(0.1, 42), *b = noisy_steps(0.1, 42);
	GArray *c = noisy_steps(0.1, 43), *z = noisy_steps(0.0, 42);
	double log_ratio = 0;
	bool differs = false;

	g_assert_cmpuint(a->len, ==, z->len);
	g_assert_cmpuint(c->len, ==, z->len);
	for (guint i = 0; i < a->len; i++) {
		double x = g_array_index(a, double, i), y = g_array_index(z, double, i);

		g_assert_cmpfloat(x, ==, g_array_index(b, double, i));
		differs |= x != g_array_index(c, double, i);
		g_assert_cmpfloat(x, !=, y);
		log_ratio += log(x / y);
	}
	g_assert_true(differs);
	/* median factor 1: the mean log over ~47 steps is near 0 (4 sigma) */
	g_assert_cmpfloat(fabs(log_ratio / a->len), <, 4 * 0.1 / sqrt(a->len));
	g_array_unref(a);
	g_array_unref(b);
	g_array_unref(c);
	g_array_unref(z);
}

/* With a zero-delay model every step takes 0 s and work still flows. */
static void
test_zero_delay(void)
{
	struct sim_model m = model("opt-13b-a100");
	struct harness *h;
	struct rec *r;

	sim_model_zero_delay(&m);
	h = harness_new(&m, 0.2, 7);
	r = submit(h, SIM_AGGREGATE, 100, 20);
	g_assert_cmpfloat(step(h), ==, 0.0);
	run(h);
	g_assert_cmpuint(r->tokens, ==, 20);
	g_assert_cmpfloat(h->now, ==, 0.0);
	harness_free(h);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/sim/engine/single-request-ttft-is-one-prefill-tpot-is-decode",
	                test_single_request_timing);
	g_test_add_func("/sim/engine/issue3-mixed-step-pays-both", test_interference);
	g_test_add_func("/sim/engine/issue3-token-budget-chunks-long-prompt",
	                test_chunked_prefill);
	g_test_add_func("/sim/engine/budget-shared-with-decodes", test_budget_shared_with_decodes);
	g_test_add_func("/sim/engine/issue3-kv-preemption-and-recovery",
	                test_preemption_and_recovery);
	g_test_add_func("/sim/engine/preempted-request-recomputes",
	                test_preempted_request_recomputes);
	g_test_add_func("/sim/engine/random-workload-invariants", test_random_workload);
	g_test_add_func("/sim/engine/max-num-seqs", test_max_num_seqs);
	g_test_add_func("/sim/engine/issue3-prefill-only-lease", test_prefill_only_lease);
	g_test_add_func("/sim/engine/leases-block-until-expiry", test_leases_block_until_expiry);
	g_test_add_func("/sim/engine/issue3-remote-decode-waits-for-kv", test_remote_decode);
	g_test_add_func("/sim/engine/remote-decode-does-not-block", test_remote_decode_does_not_block);
	g_test_add_func("/sim/engine/issue3-abort-frees-kv", test_abort);
	g_test_add_func("/sim/engine/abort-from-callback", test_abort_from_callback);
	g_test_add_func("/sim/engine/submit-from-callback", test_submit_from_callback);
	g_test_add_func("/sim/engine/issue3-reject-too-long", test_reject);
	g_test_add_func("/sim/engine/issue3-noise-seeded", test_noise);
	g_test_add_func("/sim/engine/zero-delay", test_zero_delay);
	return g_test_run();
}
