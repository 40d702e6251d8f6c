/*
 * One simulated engine's scheduler, after vLLM's V1 scheduler: running
 * requests first (decodes and unfinished prefill chunks, in the order they
 * were scheduled), then waiting requests FIFO into what is left of the
 * token budget. KV is counted in blocks; a running request that cannot get
 * a block preempts the most recently scheduled one (recompute).
 *
 * Everything here is O(requests touched) per step and allocates nothing per
 * token: the running array and the step's entries grow to the largest batch
 * seen and are then reused.
 */
#include "build-config.h"

#include <math.h>
#include <string.h>

#include "sim/engine.h"

enum req_state {
	ST_IDLE = 0,   /* not in the engine (never submitted, finished, aborted) */
	ST_PENDING,    /* remote decode whose KV has not arrived yet */
	ST_WAITING,
	ST_RUNNING,
};

enum req_flags {
	RF_DECODING = 1u << 0, /* prefill done: each step processes one token */
	RF_LOCAL_KV = 1u << 1, /* remote decode preempted: recompute here */
};

#define NO_SLOT UINT32_MAX

/* One request's work in the current step. req is NULLed by an abort. */
struct step_entry {
	struct sim_request *req;
	uint32_t chunk;   /* tokens processed */
};

struct list {
	struct sim_request *head, *tail;
	uint32_t n;
};

struct lease {
	uint64_t id;      /* the key of the table */
	uint64_t blocks;
	uint32_t tokens;
	double expiry_s;
	GList *link;      /* in lease_order */
};

struct sim_engine {
	struct sim_model model;
	struct sim_engine_callbacks cb;
	double noise_sigma;
	GRand *rand;
	double lease_s;

	uint64_t blocks_total;
	uint64_t blocks_used;      /* running and leased */
	uint64_t leased_blocks;

	struct list waiting;       /* schedulable, FIFO; preempted go first */
	struct list pending;       /* remote decodes, by kv_ready_s */

	/* Running requests in scheduling order; aborts and finishes leave NULL
	 * holes, closed at the next begin_step. */
	struct sim_request **running;
	uint32_t n_slots, slots_cap, n_running;

	struct step_entry *step;
	uint32_t n_step, step_cap;
	bool in_step;
	bool ending;               /* inside end_step's callbacks */

	GHashTable *leases;        /* &lease->id -> struct lease */
	GQueue lease_order;        /* by expiry_s */

	uint64_t preemptions_total;
	uint64_t prompt_tokens_total;
	uint64_t generation_tokens_total;
	uint64_t steps_total;
};

/* ----------------------------------------------------------- helpers --- */

static uint64_t
blocks_for(const struct sim_engine *e, uint64_t tokens)
{
	return (tokens + e->model.block_tokens - 1) / e->model.block_tokens;
}

static uint64_t
free_blocks(const struct sim_engine *e)
{
	return e->blocks_total - e->blocks_used;
}

/* Tokens of the sequence so far: what a recompute has to prefill again. */
static uint32_t
seq_len(const struct sim_request *r)
{
	return r->prompt_tokens + r->generated;
}

static void
list_push_back(struct list *l, struct sim_request *r)
{
	r->priv.next = NULL;
	r->priv.prev = l->tail;
	if (l->tail)
		l->tail->priv.next = r;
	else
		l->head = r;
	l->tail = r;
	l->n++;
}

static void
list_push_front(struct list *l, struct sim_request *r)
{
	r->priv.prev = NULL;
	r->priv.next = l->head;
	if (l->head)
		l->head->priv.prev = r;
	else
		l->tail = r;
	l->head = r;
	l->n++;
}

static void
list_remove(struct list *l, struct sim_request *r)
{
	if (r->priv.prev)
		r->priv.prev->priv.next = r->priv.next;
	else
		l->head = r->priv.next;
	if (r->priv.next)
		r->priv.next->priv.prev = r->priv.prev;
	else
		l->tail = r->priv.prev;
	r->priv.prev = r->priv.next = NULL;
	l->n--;
}

/* Pending requests stay sorted by kv_ready_s. They mostly arrive in
 * order, so the walk from the tail is short. */
static void
pending_insert(struct list *l, struct sim_request *r)
{
	struct sim_request *after = l->tail;

	while (after && after->kv_ready_s > r->kv_ready_s)
		after = after->priv.prev;
	if (!after) {
		list_push_front(l, r);
		return;
	}
	r->priv.prev = after;
	r->priv.next = after->priv.next;
	if (after->priv.next)
		after->priv.next->priv.prev = r;
	else
		l->tail = r;
	after->priv.next = r;
	l->n++;
}

static void
release_blocks(struct sim_engine *e, struct sim_request *r)
{
	e->blocks_used -= r->blocks;
	r->blocks = 0;
}

/* A standard normal deviate (Box-Muller; one of the pair is dropped so
 * that each step draws the same amount of randomness). */
static double
gauss(GRand *rand)
{
	double u1 = 1.0 - g_rand_double(rand); /* (0, 1]: log is finite */
	double u2 = g_rand_double(rand);

	return sqrt(-2.0 * log(u1)) * cos(2.0 * G_PI * u2);
}

/* ---------------------------------------------------------- lifecycle --- */

struct sim_engine *
sim_engine_new(const struct sim_model *model, const struct sim_engine_callbacks *cb,
               double noise_sigma, uint64_t seed)
{
	struct sim_engine *e;
	guint32 seeds[2] = { (guint32)seed, (guint32)(seed >> 32) };

	g_return_val_if_fail(model && model->block_tokens > 0, NULL);
	g_return_val_if_fail(model->kv_capacity_tokens >= model->block_tokens, NULL);
	g_return_val_if_fail(model->max_num_batched_tokens > 0 && model->max_num_seqs > 0, NULL);
	g_return_val_if_fail(noise_sigma >= 0.0, NULL);

	e = g_new0(struct sim_engine, 1);
	e->model = *model;
	if (cb)
		e->cb = *cb;
	e->noise_sigma = noise_sigma;
	e->rand = g_rand_new_with_seed_array(seeds, 2);
	e->lease_s = 30.0;
	e->blocks_total = model->kv_capacity_tokens / model->block_tokens;
	e->leases = g_hash_table_new_full(g_int64_hash, g_int64_equal, NULL, g_free);
	g_queue_init(&e->lease_order);
	return e;
}

void
sim_engine_free(struct sim_engine *e)
{
	if (!e)
		return;
	g_queue_clear(&e->lease_order);
	g_hash_table_destroy(e->leases);
	g_rand_free(e->rand);
	g_free(e->running);
	g_free(e->step);
	g_free(e);
}

const struct sim_model *
sim_engine_model(const struct sim_engine *e)
{
	return &e->model;
}

bool
sim_engine_submit(struct sim_engine *e, struct sim_request *r)
{
	uint64_t total;

	g_return_val_if_fail(e && r, false);
	total = (uint64_t)r->prompt_tokens + r->max_tokens;
	if (r->prompt_tokens == 0 || r->max_tokens == 0 || total > e->model.max_model_len ||
	    blocks_for(e, total) > e->blocks_total)
		return false;

	r->prefilled = 0;
	r->generated = 0;
	r->blocks = 0;
	r->first_token_s = -1.0;
	r->scheduled_s = -1.0;
	r->preemptions = 0;
	memset(&r->priv, 0, sizeof(r->priv));
	r->priv.step_slot = NO_SLOT;
	r->priv.run_slot = NO_SLOT;
	if (r->kind == SIM_REMOTE_DECODE) {
		r->state = ST_PENDING;
		pending_insert(&e->pending, r);
	} else {
		r->state = ST_WAITING;
		list_push_back(&e->waiting, r);
	}
	return true;
}

/* Take r out of the running array (a hole until the next compaction). */
static void
running_remove(struct sim_engine *e, struct sim_request *r)
{
	e->running[r->priv.run_slot] = NULL;
	r->priv.run_slot = NO_SLOT;
	e->n_running--;
}

/* Forget r's entry in the current step, so its end does not touch r. */
static void
step_forget(struct sim_engine *e, struct sim_request *r)
{
	uint32_t s = r->priv.step_slot;

	if (s != NO_SLOT && s < e->n_step && e->step[s].req == r)
		e->step[s].req = NULL;
	r->priv.step_slot = NO_SLOT;
}

void
sim_engine_abort(struct sim_engine *e, struct sim_request *r)
{
	g_return_if_fail(e && r);
	switch (r->state) {
	case ST_PENDING:
		list_remove(&e->pending, r);
		break;
	case ST_WAITING:
		list_remove(&e->waiting, r);
		break;
	case ST_RUNNING:
		running_remove(e, r);
		step_forget(e, r);
		release_blocks(e, r);
		break;
	default:
		return;
	}
	r->state = ST_IDLE;
}

/* -------------------------------------------------------------- steps --- */

static void
running_compact(struct sim_engine *e)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < e->n_slots; i++) {
		struct sim_request *r = e->running[i];

		if (!r)
			continue;
		r->priv.run_slot = n;
		e->running[n++] = r;
	}
	e->n_slots = n;
}

static void
running_append(struct sim_engine *e, struct sim_request *r)
{
	if (e->n_slots == e->slots_cap) {
		e->slots_cap = MAX(16u, e->slots_cap * 2);
		e->running = g_renew(struct sim_request *, e->running, e->slots_cap);
	}
	r->priv.run_slot = e->n_slots;
	e->running[e->n_slots++] = r;
	e->n_running++;
	r->state = ST_RUNNING;
}

/* Recompute preemption of the most recently scheduled running request:
 * its KV is dropped and it goes back to the front of the waiting queue,
 * keeping its generated tokens, which it will prefill again. */
static struct sim_request *
preempt_last(struct sim_engine *e)
{
	struct sim_request *v = e->running[--e->n_slots];

	e->n_running--;
	v->priv.run_slot = NO_SLOT;
	release_blocks(e, v);
	v->priv.computed = 0;
	v->prefilled = 0;
	v->priv.flags &= ~(uint32_t)RF_DECODING;
	if (v->kind == SIM_REMOTE_DECODE)
		v->priv.flags |= RF_LOCAL_KV;
	v->preemptions++;
	e->preemptions_total++;
	v->state = ST_WAITING;
	list_push_front(&e->waiting, v);
	return v;
}

/* A step being planned: when it starts and what its time is made of. */
struct step_plan {
	double now_s;
	uint32_t budget;
	uint64_t prefill_tokens;
	double prefill_squares;
	uint64_t decode_context;
	uint32_t decode_batch;
};

static void
step_add(struct sim_engine *e, struct step_plan *c, struct sim_request *r, uint32_t chunk)
{
	uint32_t done = r->priv.computed;

	if (e->n_step == e->step_cap) {
		e->step_cap = MAX(16u, e->step_cap * 2);
		e->step = g_renew(struct step_entry, e->step, e->step_cap);
	}
	r->priv.step_slot = e->n_step;
	e->step[e->n_step++] = (struct step_entry){ r, chunk };
	c->budget -= chunk;
	if (r->scheduled_s < 0)
		r->scheduled_s = c->now_s;

	if (r->priv.flags & RF_DECODING) {
		c->decode_batch++;
		c->decode_context += (uint64_t)done + 1;
	} else {
		/* A chunk at offset o attends to everything before it: its
		 * quadratic term is (o+l)^2 - o^2, so a prompt costs c*L^2 in
		 * total however it is chunked. */
		double o = done, l = chunk;

		c->prefill_tokens += chunk;
		c->prefill_squares += (o + l) * (o + l) - o * o;
	}
}

/* Blocks r needs on top of what it holds to store through its chunk. */
static uint64_t
extra_blocks(const struct sim_engine *e, const struct sim_request *r, uint32_t chunk)
{
	uint64_t need = blocks_for(e, (uint64_t)r->priv.computed + chunk);

	return need > r->blocks ? need - r->blocks : 0;
}

static void
grant_blocks(struct sim_engine *e, struct sim_request *r, uint64_t extra)
{
	r->blocks += (uint32_t)extra;
	e->blocks_used += extra;
}

/* Schedule running requests in order; true when KV ran out and requests
 * were preempted. */
static bool
schedule_running(struct sim_engine *e, struct step_plan *c)
{
	bool preempted = false;

	for (uint32_t i = 0; i < e->n_slots && c->budget > 0; i++) {
		struct sim_request *r = e->running[i];
		uint32_t chunk = MIN(seq_len(r) - r->priv.computed, c->budget);
		uint64_t extra = extra_blocks(e, r, chunk);
		bool self = false;

		while (extra > free_blocks(e) && !self) {
			self = preempt_last(e) == r;
			preempted = true;
		}
		if (self)
			break; /* everything after r went first */
		grant_blocks(e, r, extra);
		step_add(e, c, r, chunk);
	}
	return preempted;
}

/* Admit waiting requests FIFO while their first chunk fits. */
static void
schedule_waiting(struct sim_engine *e, struct step_plan *c)
{
	struct sim_request *r;

	while ((r = e->waiting.head) && c->budget > 0 && e->n_running < e->model.max_num_seqs) {
		bool remote = r->kind == SIM_REMOTE_DECODE && !(r->priv.flags & RF_LOCAL_KV);
		uint32_t chunk;
		uint64_t extra;

		if (remote) {
			/* The pulled KV covers the prompt: one step computes the
			 * last position and samples the first token. */
			r->priv.computed = r->prompt_tokens - 1;
			r->priv.flags |= RF_DECODING;
			chunk = 1;
		} else {
			chunk = MIN(seq_len(r), c->budget);
		}
		extra = extra_blocks(e, r, chunk);
		if (extra > free_blocks(e)) {
			if (remote) {
				r->priv.computed = 0;
				r->priv.flags &= ~(uint32_t)RF_DECODING;
			}
			break; /* FIFO: nothing overtakes the head */
		}
		list_remove(&e->waiting, r);
		if (remote)
			r->prefilled = r->prompt_tokens;
		running_append(e, r);
		grant_blocks(e, r, extra);
		step_add(e, c, r, chunk);
	}
}

double
sim_engine_begin_step(struct sim_engine *e, double now_s)
{
	struct step_plan c = { .now_s = now_s };
	bool preempted;
	double ms;

	g_return_val_if_fail(e && !e->in_step, -1.0);

	running_compact(e);
	while (e->pending.head && e->pending.head->kv_ready_s <= now_s) {
		struct sim_request *r = e->pending.head;

		list_remove(&e->pending, r);
		r->state = ST_WAITING;
		list_push_back(&e->waiting, r);
	}

	e->n_step = 0;
	c.budget = e->model.max_num_batched_tokens;
	preempted = schedule_running(e, &c);
	/* Like vLLM, admit nothing in a step that had to preempt, unless the
	 * step would otherwise be empty (then the freed KV may suit the head). */
	if (!preempted || e->n_step == 0)
		schedule_waiting(e, &c);
	if (e->n_step == 0)
		return -1.0;

	ms = sim_model_prefill_ms(&e->model, c.prefill_tokens, c.prefill_squares) +
	     sim_model_decode_ms(&e->model, c.decode_context, c.decode_batch) +
	     e->model.step_overhead_ms;
	if (e->noise_sigma > 0.0)
		ms *= exp(e->noise_sigma * gauss(e->rand));
	e->in_step = true;
	e->steps_total++;
	return ms / 1e3;
}

static void
lease_free(struct sim_engine *e, struct lease *l)
{
	e->blocks_used -= l->blocks;
	e->leased_blocks -= l->blocks;
	g_queue_delete_link(&e->lease_order, l->link);
	g_hash_table_remove(e->leases, &l->id); /* frees l */
}

/* Keep a finished prefill-only request's blocks under a lease. */
static void
lease_add(struct sim_engine *e, struct sim_request *r, double now_s)
{
	struct lease *l = g_hash_table_lookup(e->leases, &r->id);
	GList *after;

	if (l)
		lease_free(e, l); /* superseded */
	l = g_new0(struct lease, 1);
	l->id = r->id;
	l->blocks = r->blocks;
	l->tokens = r->prompt_tokens;
	l->expiry_s = now_s + e->lease_s;
	e->leased_blocks += r->blocks;
	r->blocks = 0; /* now the lease's */
	for (after = e->lease_order.tail; after; after = after->prev)
		if (((struct lease *)after->data)->expiry_s <= l->expiry_s)
			break;
	if (after)
		g_queue_insert_after(&e->lease_order, after, l);
	else
		g_queue_push_head(&e->lease_order, l);
	l->link = after ? after->next : e->lease_order.head;
	g_hash_table_insert(e->leases, &l->id, l);
}

void
sim_engine_end_step(struct sim_engine *e, double now_s)
{
	g_return_if_fail(e && e->in_step && !e->ending);
	e->ending = true;

	/* Iterate by index over the step's own entries: callbacks may abort
	 * (which NULLs an entry) or submit (which touches no entry). */
	for (uint32_t i = 0; i < e->n_step; i++) {
		struct sim_request *r = e->step[i].req;
		bool finished;

		if (!r)
			continue;
		r->priv.computed += e->step[i].chunk;
		r->prefilled = MIN(r->priv.computed, r->prompt_tokens);
		if (r->priv.computed < seq_len(r)) {
			r->priv.step_slot = NO_SLOT; /* a prefill chunk, more to come */
			continue;
		}
		/* The whole sequence is in the cache: sample a token. */
		r->generated++;
		r->priv.flags |= RF_DECODING;
		if (r->first_token_s < 0) {
			r->first_token_s = now_s;
			e->prompt_tokens_total += r->prompt_tokens;
		}
		e->generation_tokens_total++;
		finished = r->kind == SIM_PREFILL_ONLY || r->generated >= r->max_tokens;
		if (e->cb.on_tokens) {
			e->cb.on_tokens(r->owner, r, 1);
			if (!e->step[i].req)
				continue; /* aborted by the callback */
		}
		r->priv.step_slot = NO_SLOT;
		if (!finished)
			continue;
		running_remove(e, r);
		e->step[i].req = NULL;
		if (r->kind == SIM_PREFILL_ONLY)
			lease_add(e, r, now_s);
		else
			release_blocks(e, r);
		r->state = ST_IDLE;
		if (e->cb.on_finished)
			e->cb.on_finished(r->owner, r, SIM_FINISH_LENGTH);
	}
	e->n_step = 0;
	e->in_step = false;
	e->ending = false;
}

bool
sim_engine_in_step(const struct sim_engine *e)
{
	return e->in_step;
}

double
sim_engine_next_ready(const struct sim_engine *e)
{
	return e->pending.head ? e->pending.head->kv_ready_s : -1.0;
}

/* ------------------------------------------------------------- leases --- */

void
sim_engine_set_lease(struct sim_engine *e, double lease_s)
{
	g_return_if_fail(e && lease_s >= 0.0);
	e->lease_s = lease_s;
}

bool
sim_engine_lease_take(struct sim_engine *e, uint64_t id, uint32_t *tokens)
{
	struct lease *l = g_hash_table_lookup(e->leases, &id);

	if (!l)
		return false;
	if (tokens)
		*tokens = l->tokens;
	lease_free(e, l);
	return true;
}

unsigned
sim_engine_lease_expire(struct sim_engine *e, double now_s)
{
	unsigned n = 0;
	struct lease *l;

	while ((l = g_queue_peek_head(&e->lease_order)) && l->expiry_s <= now_s) {
		lease_free(e, l);
		n++;
	}
	return n;
}

double
sim_engine_next_lease_expiry(const struct sim_engine *e)
{
	const GList *head = e->lease_order.head;

	return head ? ((const struct lease *)head->data)->expiry_s : -1.0;
}

void
sim_engine_stats(const struct sim_engine *e, struct sim_engine_stats *out)
{
	memset(out, 0, sizeof(*out));
	out->running = e->n_running;
	out->waiting = e->waiting.n + e->pending.n;
	out->kv_blocks_used = e->blocks_used;
	out->kv_blocks_total = e->blocks_total;
	out->block_tokens = e->model.block_tokens;
	out->leased_blocks = e->leased_blocks;
	out->leases = g_hash_table_size(e->leases);
	out->preemptions_total = e->preemptions_total;
	out->prompt_tokens_total = e->prompt_tokens_total;
	out->generation_tokens_total = e->generation_tokens_total;
	out->steps_total = e->steps_total;
}
