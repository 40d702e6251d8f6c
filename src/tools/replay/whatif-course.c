/*
 * A request's course under virtual time, as the daemon runs it (serve/
 * phases.c, placement.c, request.c, leg.c; docs/admission.md,
 * docs/placement.md): the connection ceiling, sizing, the demand offer,
 * the context check, the admission plugin's decision and the admission
 * ledger with its queue, pending pricing, placement of the prefill phase
 * by the placement plugin over the eligible set (serve/eligible.h) with
 * the per-engine phase slots and their FIFO wait lines, the prefill leg on
 * its engine's model (SIM_PREFILL_ONLY), the handoff to the decode engine
 * the plugin chooses (SIM_REMOTE_DECODE, its KV landing after the model's
 * transfer time), or one aggregate leg when the fleet cannot pair; the
 * deadlines (request, queue, prefill, handoff, first token, and the
 * client's --timeout); and the end, which releases what the request held
 * in the order the daemon does and writes narwhal-replay's result.
 *
 * Not modelled: retries (serving.max_attempts above 1), the serving pool
 * (engine.pool_timeout_s), concurrent handoffs (taken as sequential), and
 * network time: an engine call reaches its engine at once.
 */
#include "build-config.h"

#include <math.h>
#include <string.h>

#include "serve/eligible.h"
#include "tools/replay/whatif-internal.h"

/* --- references, events, deadlines ----------------------------------- */

static void
request_unref(struct wi_request *r)
{
	if (--r->refs == 0)
		g_free(r);
}

void
wi_request_push(struct wi_request *r, int64_t at_ns, uint32_t kind, uint32_t stamp)
{
	r->refs++;
	wi_queue_push(&r->w->queue, at_ns, kind, r, stamp);
}

static int64_t
now_ns(const struct wi_request *r)
{
	return r->w->queue.now_ns;
}

static int64_t
earliest(int64_t a, int64_t b)
{
	if (a < 0)
		return b;
	if (b < 0)
		return a;
	return MIN(a, b);
}

/* One timer event for the earliest deadline (request.c, nw_request_rearm). */
static void
rearm(struct wi_request *r)
{
	int64_t when = r->deadline_ns;

	when = earliest(when, r->client_until_ns);
	when = earliest(when, r->queue_until_ns);
	when = earliest(when, r->prefill_until_ns);
	when = earliest(when, r->handoff_until_ns);
	when = earliest(when, r->ft_until_ns);
	if (when == r->timer_at)
		return;
	r->timer_at = when;
	r->timer_stamp++;
	if (when >= 0)
		wi_request_push(r, when, WI_EV_TIMER, r->timer_stamp);
}

static int64_t
after(const struct wi_request *r, double seconds)
{
	return now_ns(r) + wi_ns(seconds);
}

/* --- the end ------------------------------------------------------------ */

static void
release_prefill_slot(struct wi_request *r)
{
	struct wi_world *w = r->w;

	w->fleet->engines[r->prefill_engine].resident_prefill--;
	r->prefill_engine = -1;
	/* Not completed: back to the pool, or released with the request. */
	nw_pricing_unplaced(w->fleet, &r->price);
	nw_wait_line_kick(&w->prefill_line);
}

static void
release_decode_slot(struct wi_request *r)
{
	struct wi_world *w = r->w;
	uint32_t e = (uint32_t)r->decode_engine;

	w->fleet->engines[e].resident_decode--;
	if (!r->aggregate && --w->fleet->stats[e].handoff_decodes == 0)
		nw_fleet_changed(w->fleet);
	/* A decode that ended well shows its engine's token gaps (spec 7.7). */
	if (r->ok && r->tokens >= 2)
		nw_pricing_decode_observe(w->fleet, &r->price, r->last_token_ns, r->tokens);
	nw_pricing_decode_leave(w->fleet, &r->price);
	r->decode_engine = -1;
	nw_wait_line_kick(&w->decode_line);
}

static void
leave_line(struct wi_request *r)
{
	if (r->phase_line != NULL) {
		nw_wait_line_leave(r->phase_line, &r->phase_wait);
		r->phase_line = NULL;
	}
}

static void
unqueue(struct wi_request *r)
{
	if (r->queued_on >= 0) {
		r->w->fleet->engines[r->queued_on].queued_prefill--;
		r->queued_on = -1;
		nw_pricing_unplaced(r->w->fleet, &r->price);
	}
}

/* Everything the request holds, in the order request.c releases it. */
static void
release_all(struct wi_request *r)
{
	struct wi_world *w = r->w;
	const struct narwhal_admission_ops *ops = &w->admission.plugin->ops.admission;

	if (r->leg_engine >= 0) {
		sim_engine_abort(w->engines.engines[r->leg_engine].sim, &r->sim);
		r->leg_engine = -1;
	}
	leave_line(r);
	unqueue(r);
	if (r->prefill_engine >= 0)
		release_prefill_slot(r);
	if (r->decode_engine >= 0)
		release_decode_slot(r);
	nw_pricing_release(w->fleet, &r->price);
	nw_resource_leave(&w->admitted, &r->admit_wait);
	if (r->admit_wait.granted) {
		r->admit_wait.granted = false;
		r->admitted = true;
	}
	if (r->admitted) {
		r->admitted = false;
		nw_resource_release(&w->admitted);
		if (ops->finished != NULL)
			ops->finished(w->admission.instance->ctx, r->handle, r->ok);
	}
}

/* The answer is final: the result, the demand ledger, the reference. */
static void
end(struct wi_request *r, enum rp_outcome outcome, long status, const char *error)
{
	struct wi_world *w = r->w;
	struct rp_result *res = &w->results[r->index];
	int64_t now = now_ns(r);
	int64_t delivered = r->ok || r->committed ? (int64_t)r->tokens : -1;

	release_all(r);
	nw_demand_end(w->demand, &r->demand, now, r->ok, delivered);
	r->state = WI_REQ_ENDED;
	r->timer_stamp++;
	res->outcome = outcome;
	res->status = status;
	res->finished = wi_s(now);
	if (error != NULL)
		res->error = g_strdup(error);
	if (r->first_token_ns >= 0 && w->opts->stream)
		res->ttft = wi_s(r->first_token_ns - r->arrival_ns);
	w->live--;
	request_unref(r);
}

static void
succeed(struct wi_request *r)
{
	struct rp_result *res = &r->w->results[r->index];
	int64_t now = now_ns(r);

	r->ok = true;
	res->e2e = wi_s(now - r->arrival_ns);
	res->output_tokens = r->tokens;
	res->usage_prompt = r->input_tokens;
	res->usage_completion = r->tokens;
	if (r->w->opts->stream) {
		if (r->tokens >= 2)
			res->tpot = wi_s(r->last_token_ns - r->first_token_ns) / (r->tokens - 1);
	} else {
		res->ttft = res->e2e; /* the first token is seen with the last */
	}
	end(r, RP_OUT_OK, 200, NULL);
}

/* Refused before any engine work: 429 and 503 carry Retry-After in whole
 * seconds, at least 1 (request.c, set_retry_after). */
static void
refuse(struct wi_request *r, long status, double retry_after_s, const char *error)
{
	struct rp_result *res = &r->w->results[r->index];

	if (status == 429 || status == 503)
		res->retry_after = MAX(1.0, MIN(ceil(isfinite(retry_after_s) ? retry_after_s : 1.0),
		                                86400.0));
	end(r, RP_OUT_HTTP, status, error);
}

/* A failure of the attempt: a status before the stream committed (spec
 * 4.3: when the decode leg goes out), an in-band error after it. */
static void
fail(struct wi_request *r, long status, const char *error)
{
	if (r->committed)
		end(r, RP_OUT_ERROR_EVENT, 200, error);
	else
		end(r, RP_OUT_HTTP, status, error);
}

/* --- placement ---------------------------------------------------------- */

static void begin_attempt(struct wi_request *r);
static void start_leg(struct wi_request *r, narwhal_phase phase, uint32_t engine);

/* The placement plugin's choice among w->eligible[0, n), or -1 when it
 * failed or named an engine that is not eligible (placement.c, choose). */
static int32_t
choose(struct wi_request *r, narwhal_phase phase, uint32_t n, bool binding)
{
	struct wi_world *w = r->w;
	const struct narwhal_placement_ops *ops = &w->placement.plugin->ops.placement;
	struct narwhal_placement_request req = {
		.struct_size = sizeof req, .request = r->handle, .request_id = r->id,
		.phase = phase, .prompt_tokens = r->prompt_tokens, .max_tokens = r->max_tokens,
		.eligible = w->eligible, .n_eligible = n,
		.paired_engine = phase == NARWHAL_PHASE_DECODE ? r->prefill_pair : -1,
	};
	struct narwhal_placement_result out = {
		.struct_size = sizeof out, .engine = UINT32_MAX, .cost = 0,
		.projected_slo_ratio = NAN, .unserved = false,
	};
	int rc = ops->place(w->placement.instance->ctx, &req, &out);

	for (uint32_t i = 0; rc == 0 && i < n; i++) {
		if (w->eligible[i] != out.engine)
			continue;
		nw_demand_note_placement(w->demand, now_ns(r), r->id, phase, r->prompt_tokens,
		                         r->prompt_tokens_exact, w->cfg->fleet.engines[out.engine].id,
		                         binding, &out);
		return (int32_t)out.engine;
	}
	return -1;
}

static uint32_t
collect(struct wi_request *r, narwhal_phase phase, bool room, uint32_t *full)
{
	struct wi_world *w = r->w;
	struct nw_eligible_query q = {
		.phase = phase, .prefill_pair = r->prefill_pair,
		.limit = room ? nw_eligible_phase_limit(w->cfg, phase) : 0,
	};

	return nw_eligible_collect(w->fleet, w->dialects->dialects, &q, w->eligible, full);
}

static void
join_line(struct wi_request *r, struct nw_wait_line *line)
{
	if (r->phase_line == line)
		return;
	leave_line(r);
	nw_wait_line_push(line, &r->phase_wait);
	r->phase_line = line;
}

/* placement.c, nw_phase_place. */
static void
place(struct wi_request *r, narwhal_phase phase)
{
	struct wi_world *w = r->w;
	struct nw_fleet *f = w->fleet;
	struct nw_wait_line *line = phase == NARWHAL_PHASE_DECODE ? &w->decode_line
	                                                          : &w->prefill_line;
	uint32_t n, full;
	int32_t engine;

	r->state = WI_REQ_PLACING;
	r->placing = phase;
	/* FIFO: whoever waits already goes first. */
	if (r->phase_line != line && !nw_wait_line_empty(line)) {
		join_line(r, line);
		return;
	}
	if (r->phase_line == line && !nw_wait_line_is_first(line, &r->phase_wait))
		return;
	n = collect(r, phase, true, &full);
	if (n == 0) {
		if (full == 0) {
			leave_line(r);
			fail(r, 503, "no available engine can take the request");
			return;
		}
		join_line(r, line);
		/* A prefill offer waiting for a slot still counts as demand on the
		 * engine placement would pick. */
		if (phase != NARWHAL_PHASE_DECODE && r->queued_on < 0) {
			uint32_t m = collect(r, phase, false, &full);

			if (m > 0) {
				nw_pricing_placing(f, &r->price);
				r->queued_on = choose(r, phase, m, false);
			}
			if (r->queued_on >= 0) {
				f->engines[r->queued_on].queued_prefill++;
				nw_pricing_queued(f, &r->price, (uint32_t)r->queued_on);
			} else if (m > 0) {
				nw_pricing_pending(f, &r->price, r->prompt_tokens);
			}
		}
		return;
	}
	if (phase != NARWHAL_PHASE_DECODE)
		nw_pricing_placing(f, &r->price);
	engine = choose(r, phase, n, true);
	leave_line(r);
	unqueue(r);
	if (engine < 0) {
		nw_wait_line_kick(line);
		fail(r, 500, "the placement policy could not choose an engine");
		return;
	}
	if (phase == NARWHAL_PHASE_DECODE) {
		f->engines[engine].resident_decode++;
		if (f->stats[engine].handoff_decodes++ == 0)
			nw_fleet_changed(f);
		r->decode_engine = engine;
		nw_pricing_decode_enter(f, &r->price, (uint32_t)engine, r->prompt_tokens, r->max_tokens);
	} else {
		f->engines[engine].resident_prefill++;
		r->prefill_engine = engine;
		nw_pricing_resident(f, &r->price, (uint32_t)engine, now_ns(r));
		/* An engine that cannot pair runs the request whole. */
		if (phase == NARWHAL_PHASE_PREFILL &&
		    !nw_dialect_pairs(&w->dialects->dialects[engine])) {
			r->aggregate = true;
			phase = NARWHAL_PHASE_AGGREGATE;
		}
		if (phase == NARWHAL_PHASE_PREFILL)
			r->prefill_pair = engine;
	}
	/* Another slot may be free for the next in line. */
	nw_wait_line_kick(line);
	start_leg(r, phase, (uint32_t)engine);
}

static void
begin_attempt(struct wi_request *r)
{
	r->aggregate = !nw_eligible_fleet_pairs(r->w->fleet, r->w->dialects->dialects);
	r->prefill_pair = -1;
	place(r, r->aggregate ? NARWHAL_PHASE_AGGREGATE : NARWHAL_PHASE_PREFILL);
}

/* --- engine legs ----------------------------------------------------- */

static bool
submit(struct wi_request *r, uint32_t engine, sim_request_kind kind, double kv_ready)
{
	struct wi_world *w = r->w;

	memset(&r->sim, 0, sizeof r->sim);
	r->sim.id = ++w->next_handle;
	r->sim.kind = kind;
	r->sim.prompt_tokens = r->input_tokens;
	/* A prefill-only request answers with exactly one token (sim/server.c). */
	r->sim.max_tokens = kind == SIM_PREFILL_ONLY ? 1 : r->max_tokens;
	r->sim.arrival_s = wi_engines_model_now(&w->engines);
	r->sim.kv_ready_s = kv_ready;
	r->sim.owner = r;
	if (!sim_engine_submit(w->engines.engines[engine].sim, &r->sim))
		return false;
	r->leg_engine = (int32_t)engine;
	wi_engines_kick(&w->engines, engine);
	return true;
}

/* The decode engine pulls the prefill engine's KV (sim/kv-handoff.c): the
 * lease is taken now, and the KV lands after the model's transfer time. */
static bool
pull_kv(struct wi_request *r, double *kv_ready)
{
	struct wi_engines *en = &r->w->engines;
	uint32_t producer = (uint32_t)r->lease_engine;
	uint32_t tokens = 0;
	bool taken;

	r->lease_engine = -1;
	sim_engine_lease_expire(en->engines[producer].sim, wi_engines_model_now(en));
	taken = sim_engine_lease_take(en->engines[producer].sim, r->lease_id, &tokens);
	if (taken)
		wi_engines_kick(en, producer); /* freed blocks may let waiting work in */
	*kv_ready = wi_engines_model_now(en) +
	            sim_model_kv_transfer_ms(&r->w->setup->model, tokens) / 1e3;
	return taken;
}

static void
start_leg(struct wi_request *r, narwhal_phase phase, uint32_t engine)
{
	struct wi_world *w = r->w;
	const struct nw_config *cfg = w->cfg;
	double kv_ready = 0;
	sim_request_kind kind = SIM_AGGREGATE;

	switch (phase) {
	case NARWHAL_PHASE_PREFILL:
		r->state = WI_REQ_PREFILL;
		kind = SIM_PREFILL_ONLY;
		r->prefill_until_ns = after(r, cfg->serving.prefill_timeout_s);
		if (cfg->serving.handoff_timeout_s > 0)
			r->handoff_until_ns = after(r, cfg->serving.handoff_timeout_s);
		break;
	case NARWHAL_PHASE_DECODE:
		if (r->handoff_until_ns >= 0 && now_ns(r) >= r->handoff_until_ns) {
			fail(r, 504, "the KV handoff outlived serving.handoff_timeout_s before its "
			     "decode leg started");
			return;
		}
		r->state = WI_REQ_DECODE;
		r->handoff_until_ns = -1;
		/* Spec 4.3: a disaggregated stream commits its 200 as the decode
		 * leg goes out. */
		r->committed = w->opts->stream;
		if (!pull_kv(r, &kv_ready)) {
			/* narwhal-sim's kv_load_failure_policy fail: a 500 the dialect
			 * reads as a handoff failure (spec 4.2). */
			fail(r, 502, "the decode engine could not load the KV handoff");
			return;
		}
		kind = SIM_REMOTE_DECODE;
		break;
	default:
		r->state = WI_REQ_DECODE;
		w->aggregate_legs++;
		break;
	}
	/* The first-token clock starts as the leg goes out (spec 6). */
	if (phase != NARWHAL_PHASE_PREFILL && w->opts->stream)
		r->ft_until_ns = after(r, cfg->engine.first_token_timeout_s);
	if (!submit(r, engine, kind, kv_ready)) {
		/* narwhal-sim refuses what its KV can never hold: a 400 the
		 * dialect reads as a context error. */
		fail(r, 400, "the request needs more KV cache than the engine has");
		return;
	}
	rearm(r);
}

/* The prefill leg answered (phases.c, prefill_done): its work leaves the
 * ledger, its slot is released, and the decode phase is placed. */
static void
prefill_done(struct wi_request *r)
{
	struct wi_world *w = r->w;

	r->lease_engine = r->leg_engine;
	r->lease_id = r->sim.id;
	r->leg_engine = -1;
	r->prefill_until_ns = -1;
	nw_pricing_prefill_done(w->fleet, &r->price, now_ns(r));
	release_prefill_slot(r);
	place(r, NARWHAL_PHASE_DECODE);
	if (r->state != WI_REQ_ENDED)
		rearm(r);
}

static void
on_tokens(void *owner, struct sim_request *req, uint32_t n)
{
	struct wi_request *r = owner;
	struct wi_world *w = r->w;
	int64_t now = now_ns(r);

	if (req->kind == SIM_PREFILL_ONLY)
		return; /* the router reads its handoff, not its token */
	if (r->tokens == 0) {
		r->first_token_ns = now;
		r->ft_until_ns = -1;
		/* An aggregate leg turns from prefill work into decode work
		 * (phases.c, nw_request_on_first_token). */
		if (r->aggregate && r->prefill_engine >= 0) {
			int32_t engine = r->prefill_engine;

			nw_pricing_prefill_done(w->fleet, &r->price, now);
			release_prefill_slot(r);
			w->fleet->engines[engine].resident_decode++;
			r->decode_engine = engine;
			nw_pricing_decode_enter(w->fleet, &r->price, (uint32_t)engine, r->prompt_tokens,
			                        r->max_tokens);
		}
		nw_pricing_decode_started(w->fleet, &r->price, now);
		rearm(r);
	}
	r->tokens += n;
	r->last_token_ns = now;
}

static void
on_finished(void *owner, struct sim_request *req, sim_finish why)
{
	struct wi_request *r = owner;

	r->refs++; /* what follows may end it */
	if (why != SIM_FINISH_LENGTH) {
		r->leg_engine = -1;
		fail(r, 502, "the engine ended the request");
	} else if (req->kind == SIM_PREFILL_ONLY) {
		prefill_done(r);
	} else {
		r->leg_engine = -1;
		succeed(r);
	}
	request_unref(r);
}

const struct sim_engine_callbacks wi_course_engine_callbacks = {
	.on_tokens = on_tokens,
	.on_finished = on_finished,
};

/* --- arrival and admission ---------------------------------------------- */

static void
on_admission_granted(void *data)
{
	struct wi_request *r = data;

	wi_request_push(r, now_ns(r), WI_EV_ADMITTED, 0);
}

static void
on_line_kicked(void *data)
{
	struct wi_request *r = data;

	wi_request_push(r, now_ns(r), WI_EV_KICK, 0);
}

static void
admit_now(struct wi_request *r)
{
	r->admitted = true;
	nw_demand_admit(r->w->demand, &r->demand);
	begin_attempt(r);
}

static void
enqueue(struct wi_request *r)
{
	struct wi_world *w = r->w;

	if (!nw_resource_wait(&w->admitted, &r->admit_wait)) {
		nw_demand_refuse(w->demand, &r->demand, NW_DEMAND_REFUSED_QUEUE_FULL);
		refuse(r, 429, 1.0, "the fleet is saturated and the admission queue is full");
		return;
	}
	nw_demand_queue(w->demand, &r->demand);
	r->state = WI_REQ_QUEUED;
	r->queue_until_ns = after(r, w->cfg->serving.queue_timeout_s);
	rearm(r);
}

static bool
context_exceeded(const struct wi_request *r)
{
	int64_t max_len = r->w->fleet->max_model_len;

	if (max_len <= 0 || !r->prompt_tokens_exact)
		return false;
	return r->prompt_tokens >= (uint64_t)max_len ||
	       r->prompt_tokens + r->max_tokens > (uint64_t)max_len;
}

/* phases.c, admission(). */
static void
admission(struct wi_request *r)
{
	struct wi_world *w = r->w;
	const struct nw_config *cfg = w->cfg;
	const struct narwhal_admission_ops *ops = &w->admission.plugin->ops.admission;
	struct narwhal_admission_request req = {
		.struct_size = sizeof req, .request = r->handle, .request_id = r->id,
		.prompt_tokens = r->prompt_tokens, .prompt_tokens_exact = r->prompt_tokens_exact,
		.max_tokens = r->max_tokens, .arrival_ns = r->arrival_ns,
		.deadline_ns = r->deadline_ns, .admitted = w->admitted.in_use,
		.admitted_limit = w->admitted.limit, .queued = nw_resource_waiting(&w->admitted),
		.queue_capacity = cfg->serving.queue_capacity,
	};
	struct narwhal_admission_decision dec = {
		.struct_size = sizeof dec, .verdict = NARWHAL_REFUSE, .retry_after_s = 1.0,
		.projected_ttft_s = NAN, .reason = NULL,
	};
	int rc;

	nw_demand_offer(w->demand, &r->demand, r->arrival_ns, r->prompt_tokens,
	                r->prompt_tokens_exact, r->max_tokens);
	if (context_exceeded(r)) {
		nw_demand_refuse(w->demand, &r->demand, NW_DEMAND_REFUSED_CONTEXT_LENGTH);
		refuse(r, 400, 0, "the prompt and max_tokens do not fit the model's context length");
		return;
	}
	rc = ops->decide(w->admission.instance->ctx, &req, &dec);
	if (rc != 0) {
		nw_demand_refuse(w->demand, &r->demand, NW_DEMAND_REFUSED_UNAVAILABLE);
		refuse(r, 503, 0, "the admission policy could not decide on this request");
		return;
	}
	nw_demand_note_admission(w->demand, now_ns(r), r->id, r->prompt_tokens,
	                         r->prompt_tokens_exact,
	                         cfg->slo.ttft_s * (1 + cfg->serving.admission_margin), &dec);
	/* A projected breach may wake the controller (role-control document,
	 * "Prefill queue projections"). */
	wi_control_admission_priced(w, r->prompt_tokens, &dec);
	switch (dec.verdict) {
	case NARWHAL_ADMIT:
	case NARWHAL_ADMIT_QUEUE:
		r->price.arrival_ns = r->arrival_ns;
		nw_pricing_pending(w->fleet, &r->price, r->prompt_tokens);
		if (nw_resource_try(&w->admitted))
			admit_now(r);
		else
			enqueue(r);
		return;
	case NARWHAL_REFUSE_TOO_LONG:
		nw_demand_refuse(w->demand, &r->demand, NW_DEMAND_REFUSED_TTFT_TARGET);
		refuse(r, 400, 0, "the prompt cannot be served within the TTFT target even on an "
		       "idle fleet");
		return;
	case NARWHAL_REFUSE:
	default:
		nw_demand_refuse(w->demand, &r->demand, NW_DEMAND_REFUSED_ADMISSION);
		refuse(r, 429, dec.retry_after_s, "the fleet cannot serve this request within its "
		       "targets now");
		return;
	}
}

void
wi_course_arrive(struct wi_world *w, size_t i)
{
	const struct rp_item *it = &g_array_index(w->schedule->items, struct rp_item, i);
	const struct nw_config *cfg = w->cfg;
	struct wi_request *r = g_new0(struct wi_request, 1);
	struct rp_result *res = &w->results[i];
	int64_t now = w->queue.now_ns;

	r->w = w;
	r->index = i;
	r->refs = 1;
	r->handle = ++w->next_handle;
	g_snprintf(r->id, sizeof r->id, "replay-%u", w->opts->id_base + (uint32_t)i);
	r->arrival_ns = now;
	r->input_tokens = it->input_tokens;
	r->max_tokens = it->output_tokens;
	r->queued_on = r->prefill_engine = r->decode_engine = r->prefill_pair = -1;
	r->leg_engine = r->lease_engine = -1;
	r->deadline_ns = now + wi_ns(cfg->serving.request_timeout_s);
	r->client_until_ns = now + wi_ns(w->opts->timeout_s);
	r->queue_until_ns = r->prefill_until_ns = r->handoff_until_ns = r->ft_until_ns = -1;
	r->timer_at = -1;
	r->first_token_ns = r->last_token_ns = -1;
	nw_waiter_init(&r->admit_wait, on_admission_granted, r);
	nw_waiter_init(&r->phase_wait, on_line_kicked, r);
	/* Every line serves requests in arrival order (spec 4.2 FIFO). */
	r->admit_wait.order = r->phase_wait.order = now;
	w->live++;
	rearm(r);

	res->id = w->opts->id_base + (uint32_t)i;
	res->phase = g_array_index(w->schedule->trace->reqs, struct rp_request, it->req).phase;
	res->scheduled = res->sent = it->t;
	res->input_tokens = it->input_tokens;
	res->max_tokens = it->output_tokens;
	res->ttft = res->tpot = res->e2e = res->retry_after = NAN;
	res->usage_prompt = res->usage_completion = -1;

	/* The connection ceiling: a 429 before the body is read (spec 4.2). */
	if (w->live > (uint64_t)cfg->serving.max_connections + cfg->serving.queue_capacity) {
		nw_demand_refuse_unsized(w->demand, now, NW_DEMAND_REFUSED_CEILING);
		refuse(r, 429, 1.0, "too many requests in flight");
		return;
	}
	/* Sizing: narwhal-sim's tokeniser counts the replay's prompt exactly;
	 * without engine.tokenize, by characters (5 per word, prompt.h). */
	if (cfg->engine.tokenize) {
		r->prompt_tokens = it->input_tokens;
		r->prompt_tokens_exact = true;
	} else {
		double chars = 5.0 * rp_prompt_words(it->input_tokens, w->opts->prompt_overhead);

		r->prompt_tokens = (uint64_t)ceil(chars / cfg->engine.chars_per_token);
	}
	admission(r);
}

/* --- a request's events ---------------------------------------------------- */

/* request.c, on_timer: the deadlines in the daemon's order; the client's
 * own --timeout first. */
static void
on_timer(struct wi_request *r)
{
	struct wi_world *w = r->w;
	int64_t now = now_ns(r);

	r->timer_at = -1;
	if (r->client_until_ns >= 0 && now >= r->client_until_ns) {
		/* The client leaves: the daemon cancels the legs. */
		end(r, RP_OUT_TIMEOUT, r->committed ? 200 : 0, "--timeout passed");
		return;
	}
	if (now >= r->deadline_ns) {
		fail(r, 504, "the request took longer than serving.request_timeout_s");
		return;
	}
	if (r->handoff_until_ns >= 0 && now >= r->handoff_until_ns) {
		fail(r, 504, r->state == WI_REQ_PREFILL
		                     ? "the prefill leg did not answer within serving.handoff_timeout_s"
		                     : "the KV handoff outlived serving.handoff_timeout_s");
		return;
	}
	if (r->ft_until_ns >= 0 && now >= r->ft_until_ns) {
		/* Spec 7.6: the consolidation evidence starts again. */
		nw_demand_evidence_reset(w->demand, now, "first_token_timeout");
		fail(r, 504, "no token within engine.first_token_timeout_s of starting the decode "
		     "leg");
		return;
	}
	if (r->queue_until_ns >= 0 && now >= r->queue_until_ns && r->state == WI_REQ_QUEUED) {
		nw_demand_refuse(w->demand, &r->demand, NW_DEMAND_REFUSED_QUEUE_TIMEOUT);
		refuse(r, 429, w->cfg->serving.queue_timeout_s, "the request waited "
		       "serving.queue_timeout_s for admission");
		return;
	}
	if (r->prefill_until_ns >= 0 && now >= r->prefill_until_ns && r->state == WI_REQ_PREFILL) {
		fail(r, 504, "the prefill leg took longer than serving.prefill_timeout_s");
		return;
	}
	rearm(r);
}

void
wi_course_on_event(struct wi_world *w, const struct wi_event *ev)
{
	struct wi_request *r = ev->obj;

	if (r->state == WI_REQ_ENDED)
		goto out;
	switch (ev->kind) {
	case WI_EV_TIMER:
		if (!wi_event_stale(ev, r->timer_stamp))
			on_timer(r);
		break;
	case WI_EV_ADMITTED:
		if (r->admit_wait.granted && r->state == WI_REQ_QUEUED) {
			r->admit_wait.granted = false;
			r->queue_until_ns = -1;
			admit_now(r);
			if (r->state != WI_REQ_ENDED)
				rearm(r);
		}
		break;
	case WI_EV_KICK:
		if (r->state == WI_REQ_PLACING)
			place(r, r->placing);
		break;
	default:
		break;
	}
out:
	request_unref(r);
}
