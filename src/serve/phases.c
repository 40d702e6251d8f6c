/*
 * A request's phases: validation, sizing (the dialect's tokenise call or
 * chars_per_token), admission (the plugin, the FIFO queue), placement with
 * per-engine phase slots (FIFO wait lines), and what each engine leg's end
 * means: a handoff, a relayed stream, a collected answer, or a failure
 * classified by the dialect.
 */
#include "build-config.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "core/log.h"
#include "serve/request.h"
#include "serve/phases.h"
#include "serve/serve-internal.h"

/* --- validation ----------------------------------------------------- */

static void
answer_client_error(struct nw_request *r, const struct nw_client_error *err)
{
	r->serve->metrics->counters.client_errors++;
	nw_request_finish(r, false);
	nw_request_answer_error(r, err->status, err->type, err->code,
	                        err->param[0] ? err->param : NULL, err->message);
}

static void start_sizing(struct nw_request *r);

void
nw_phase_begin(struct nw_request *r)
{
	struct nw_serve *s = r->serve;
	struct nw_client_error err;
	const struct nw_parse_limits lim = { .router_keys = s->router_keys };
	const char *ctype = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND,
	                                                MHD_HTTP_HEADER_CONTENT_TYPE);

	if (nw_request_parse(r->route, ctype, r->body_in->str, r->body_in->len, &lim, &r->parsed,
	                     &err) != 0) {
		answer_client_error(r, &err);
		return;
	}
	/* The text stays too: an engine leg whose body is the client's own
	 * sends these bytes instead of encoding the tree again (leg.c). */
	if (!r->parsed.stream)
		r->whole_body_only = nw_dialects_whole_body_only(s->dialects, s->fleet->view.n_engines,
		                                                 r->parsed.body);
	if (s->fleet->model != NULL && strcmp(r->parsed.model, s->fleet->model) != 0) {
		nw_client_error_model_not_found(&err, r->parsed.model, s->fleet->model);
		answer_client_error(r, &err);
		return;
	}
	if (r->parsed.stream)
		nw_relay_init(&r->relay, (size_t)MIN(s->cfg->serving.max_response_bytes, G_MAXSIZE));
	else if (nw_phase_streams(r))
		nw_collect_init(&r->collect, (size_t)MIN(s->cfg->serving.max_response_bytes, G_MAXSIZE));
	start_sizing(r);
}

/* --- sizing ---------------------------------------------------------- */

static void admission(struct nw_request *r);

/* The largest count chars_per_token sizes a prompt at: 2^53. */
#define SIZED_BY_CHARS_MAX 9007199254740992.0

void
nw_phase_size_by_chars(struct nw_request *r)
{
	struct nw_serve *s = r->serve;
	size_t chars = r->route == NARWHAL_ROUTE_COMPLETIONS ? r->parsed.prompt_chars
	                                                     : r->parsed.chat_chars;
	double estimate = ceil((double)chars / s->cfg->engine.chars_per_token);

	s->metrics->counters.tokenize_fallbacks++;
	/* Any positive ratio is valid (spec 6), so the estimate can be beyond
	 * what a count holds: it is then the largest count a double, JSON
	 * and the demand sums keep exact, which no engine serves either. */
	r->prompt_tokens = estimate < SIZED_BY_CHARS_MAX ? (uint64_t)estimate
	                                                 : (uint64_t)SIZED_BY_CHARS_MAX;
	r->prompt_tokens_exact = false;
	admission(r);
}

/* What a dialect call is built for: this request on engine, within the
 * attempt's pair (prefill and decode engines, -1 when not placed). */
static struct narwhal_dialect_target
target_for(const struct nw_request *r, uint32_t engine, const json_t *body)
{
	const struct nw_serve *s = r->serve;

	return (struct narwhal_dialect_target){
		.struct_size = sizeof(struct narwhal_dialect_target),
		.request = r->handle,
		.request_id = r->id,
		.attempt = r->attempt,
		.route = r->route,
		.client_body = body,
		.engine = &s->dialects[engine].ref,
		.prefill = r->prefill_pair >= 0 && !r->aggregate
		                   ? &s->dialects[r->prefill_pair].ref : NULL,
		.decode = r->decode_engine >= 0 && !r->aggregate
		                  ? &s->dialects[r->decode_engine].ref : NULL,
		.pair_id = r->aggregate || r->prefill_pair < 0 ? 0
		                                               : (r->handle << 2) | (r->attempt & 3u),
	};
}

/* Whether this attempt's pair sends both legs at once (its prefill
 * engine's dialect says so). */
bool
nw_phase_pair_concurrent(const struct nw_request *r)
{
	return !r->aggregate && r->prefill_pair >= 0 &&
	       nw_dialect_concurrent(&r->serve->dialects[r->prefill_pair]);
}

int64_t
nw_phase_first_token_due(const struct nw_request *r, int64_t now)
{
	return now + (int64_t)(r->serve->cfg->engine.first_token_timeout_s * 1e6);
}

/* A dialect slot failed: logged and counted, never silent. */
static void
dialect_failed(struct nw_request *r, const struct nw_dialect *d, const char *slot, int rc)
{
	nw_serve_plugin_failed(r->serve, "dialect", d->name, slot, rc, d->ref.id, r->id);
}

static void
start_sizing(struct nw_request *r)
{
	struct nw_serve *s = r->serve;
	uint32_t n = s->fleet->view.n_engines, engine = 0;
	struct narwhal_http_call call = { .struct_size = sizeof call };
	const struct nw_dialect *d;
	bool found = false;
	int rc;

	nw_request_set_state(r, NW_REQ_SIZING);
	if (r->parsed.prompt_token_ids > 0) {
		r->prompt_tokens = r->parsed.prompt_token_ids;
		r->prompt_tokens_exact = true;
		admission(r);
		return;
	}
	if (!s->cfg->engine.tokenize) {
		nw_phase_size_by_chars(r);
		return;
	}
	/* Any available engine whose dialect can count tokens does; spread
	 * the calls. */
	for (uint32_t k = 0; k < n && !found; k++) {
		engine = (s->next_tokenize + k) % n;
		found = nw_serve_engine_available(s, engine) && s->dialects[engine].ops->build_tokenize != NULL;
	}
	s->next_tokenize = (engine + 1) % MAX(n, 1);
	/* No dialect in the fleet has the tokenise pair: by characters. */
	if (!found) {
		nw_phase_size_by_chars(r);
		return;
	}
	d = nw_serve_dialect(s, engine);
	{
		struct narwhal_dialect_target target = target_for(r, engine, r->parsed.body);

		rc = d->ops->build_tokenize(d->ctx, &target, &call);
	}
	if (rc != 0) {
		json_decref(call.body);
		/* -ENOTSUP and -EALREADY are answers, not failures (a prompt of
		 * token IDs never gets here: its length is its count). */
		if (rc != -ENOTSUP && rc != -EALREADY)
			dialect_failed(r, d, "build_tokenize", rc);
		nw_phase_size_by_chars(r);
		return;
	}
	s->metrics->counters.tokenize_calls++;
	nw_leg_start(r, NW_LEG_TOKENIZE, engine, &call);
}

static void
tokenize_done(struct nw_request *r, const struct nw_upstream_result *res)
{
	const struct nw_dialect *d = nw_serve_dialect(r->serve, r->leg.engine);
	json_t *doc = NULL;
	uint64_t count = 0;
	int rc = 0;

	r->phase = NW_PT_NONE;
	if (res->code == NW_UPSTREAM_OK && r->leg.status == 200)
		doc = nw_json_read(r->leg.collected->str, r->leg.collected->len, 0, NULL);
	if (doc != NULL && (rc = d->ops->parse_tokenize(d->ctx, doc, &count)) == 0) {
		json_decref(doc);
		nw_leg_release(r);
		r->prompt_tokens = count;
		r->prompt_tokens_exact = true;
		admission(r);
		return;
	}
	if (rc != 0)
		dialect_failed(r, d, "parse_tokenize", rc);
	json_decref(doc);
	nw_leg_release(r);
	nw_phase_size_by_chars(r);
}

/* --- admission ------------------------------------------------------- */

void
nw_phase_note_admitted(struct nw_request *r, int64_t now)
{
	struct nw_serve_metrics *m = r->serve->metrics;

	r->queue_s = r->queued_us >= 0 ? (double)(now - r->queued_us) / 1e6 : 0;
	nw_histogram_observe(&m->queue_wait, &nw_scale_queue, r->queue_s);
}

static void
admit_now(struct nw_request *r)
{
	r->admitted = true;
	r->serve->metrics->counters.admitted++;
	nw_demand_admit(r->serve->demand, &r->demand);
	nw_phase_note_admitted(r, 0);
	nw_phase_begin_attempt(r);
}

static void
enqueue(struct nw_request *r)
{
	struct nw_serve *s = r->serve;

	if (!nw_resource_wait(&s->admitted, &r->admit_wait)) {
		s->metrics->counters.queue_full++;
		nw_demand_refuse(s->demand, &r->demand, NW_DEMAND_REFUSED_QUEUE_FULL);
		nw_request_refuse(r, 429, "queue_full", 1.0, "the fleet is saturated and the "
		                  "admission queue is full: retry later");
		return;
	}
	s->metrics->counters.queued++;
	nw_demand_queue(s->demand, &r->demand);
	nw_request_set_state(r, NW_REQ_QUEUED);
	r->phase = NW_PT_QUEUE;
	r->queued_us = g_get_monotonic_time();
	r->phase_until_us = r->queued_us + (int64_t)(s->cfg->serving.queue_timeout_s * 1e6);
	nw_request_rearm(r);
}

static const char *
prompt_param(const struct nw_request *r)
{
	return r->route == NARWHAL_ROUTE_COMPLETIONS ? "prompt" : "messages";
}

/* Whether the request provably cannot fit the model: its exact token
 * count and the model's length (learnt from the models answer) known. */
static bool
context_exceeded(const struct nw_request *r)
{
	int64_t max_len = r->serve->fleet->max_model_len;

	if (max_len <= 0 || !r->prompt_tokens_exact)
		return false;
	if (r->prompt_tokens >= (uint64_t)max_len)
		return true;
	return r->parsed.max_tokens_set &&
	       r->prompt_tokens + r->parsed.max_tokens > (uint64_t)max_len;
}

void
nw_phase_context_error(const struct nw_request *r, struct nw_client_error *err)
{
	int64_t max_len = r->serve->fleet->max_model_len;
	const char *what = prompt_param(r);
	bool known = max_len > 0 && r->prompt_tokens_exact;

	/* The client's own request, never an engine leg's rewritten one (a
	 * prefill leg asks for 1 output token). The sums are shown only when
	 * they agree with the engine's refusal: an engine that counts more
	 * (a template, its own tokenizer) still refused. */
	if (known && r->prompt_tokens >= (uint64_t)max_len)
		nw_client_error_set(err, 400, "context_length_exceeded", what,
		                    "the prompt has %" G_GUINT64_FORMAT " tokens and the model's "
		                    "context length is %" G_GINT64_FORMAT " tokens: shorten the %s",
		                    r->prompt_tokens, max_len, what);
	else if (known && r->parsed.max_tokens_set &&
	         r->prompt_tokens + r->parsed.max_tokens > (uint64_t)max_len)
		nw_client_error_set(err, 400, "context_length_exceeded", "max_tokens",
		                    "the prompt has %" G_GUINT64_FORMAT " tokens and max_tokens asks "
		                    "for %u more, but the model's context length is %" G_GINT64_FORMAT
		                    " tokens: lower max_tokens to at most %" G_GUINT64_FORMAT
		                    " or shorten the %s", r->prompt_tokens, r->parsed.max_tokens,
		                    max_len, (uint64_t)max_len - r->prompt_tokens, what);
	else if (r->parsed.max_tokens_set)
		nw_client_error_set(err, 400, "context_length_exceeded", "max_tokens",
		                    "the prompt (%s%" G_GUINT64_FORMAT " tokens) with max_tokens %u "
		                    "does not fit the model's context length: lower max_tokens or "
		                    "shorten the %s", r->prompt_tokens_exact ? "" : "about ",
		                    r->prompt_tokens, r->parsed.max_tokens, what);
	else
		nw_client_error_set(err, 400, "context_length_exceeded", what,
		                    "the prompt (%s%" G_GUINT64_FORMAT " tokens) does not fit the "
		                    "model's context length: shorten the %s",
		                    r->prompt_tokens_exact ? "" : "about ", r->prompt_tokens, what);
}

static void
admission(struct nw_request *r)
{
	struct nw_serve *s = r->serve;
	const struct narwhal_admission_ops *ops = &s->admission->plugin->ops.admission;
	struct narwhal_admission_request req = {
		.struct_size = sizeof req,
		.request = r->handle,
		.request_id = r->id,
		.prompt_tokens = r->prompt_tokens,
		.prompt_tokens_exact = r->prompt_tokens_exact,
		.max_tokens = r->parsed.max_tokens,
		.arrival_ns = r->arrival_us * 1000,
		.deadline_ns = r->deadline_us * 1000,
		.admitted = s->admitted.in_use,
		.admitted_limit = s->admitted.limit,
		.queued = nw_resource_waiting(&s->admitted),
		.queue_capacity = s->cfg->serving.queue_capacity,
	};
	struct narwhal_admission_decision dec = {
		.struct_size = sizeof dec, .verdict = NARWHAL_REFUSE, .retry_after_s = 1.0,
		.projected_ttft_s = NAN, .reason = NULL,
	};
	int rc;

	/* Sized: an offer, demand whatever becomes of it (spec 7.6). */
	nw_demand_offer(s->demand, &r->demand, r->arrival_us * 1000, r->prompt_tokens,
	                r->prompt_tokens_exact, r->parsed.max_tokens_set ? r->parsed.max_tokens : 0);
	/* Before any leg, so that a stream that cannot fit gets its 400 as an
	 * HTTP status (issue 9), not after a 200. */
	if (context_exceeded(r)) {
		struct nw_client_error err;

		s->metrics->counters.refused_context_length++;
		nw_demand_refuse(s->demand, &r->demand, NW_DEMAND_REFUSED_CONTEXT_LENGTH);
		nw_phase_context_error(r, &err);
		answer_client_error(r, &err);
		return;
	}
	/* Degraded (spec 7, controller.monitor_failure_limit): Narwhal cannot
	 * see its engines, so it admits nothing new until a clean pass. */
	if (s->fleet->admission_stopped) {
		s->metrics->counters.refused_degraded++;
		nw_demand_refuse(s->demand, &r->demand, NW_DEMAND_REFUSED_DEGRADED);
		nw_request_refuse(r, 503, "degraded", s->fleet->retry_after_s, "Narwhal cannot "
		                  "currently watch its engines and admits no new work: retry after "
		                  "the time in Retry-After");
		return;
	}
	rc = ops->decide(s->admission->ctx, &req, &dec);
	/* A failing policy refuses (plugin-abi.h): admitting what nobody
	 * priced could break every admitted request's targets. */
	if (rc != 0) {
		nw_serve_plugin_failed(s, "admission", s->admission->plugin->desc->name, "decide", rc,
		                       NULL, r->id);
		nw_demand_refuse(s->demand, &r->demand, NW_DEMAND_REFUSED_UNAVAILABLE);
		nw_request_refuse(r, 503, "admission_unavailable", 0, "the admission policy "
		                  "could not decide on this request: retry later");
		return;
	}
	/* What it was priced on, against the budget spec 4.1 names. */
	nw_demand_note_admission(s->demand, g_get_monotonic_time() * 1000, r->id, r->prompt_tokens,
	                         r->prompt_tokens_exact,
	                         s->cfg->slo.ttft_s * (1 + s->cfg->serving.admission_margin), &dec);
	/* A projected TTFT breach asks the controller for an urgent
	 * evaluation (role-control document, "Prefill queue projections"),
	 * whatever the verdict: a refusal is demand too (spec 7.6). */
	if (s->ttft_breach != NULL && dec.verdict != NARWHAL_REFUSE_TOO_LONG &&
	    dec.projected_ttft_s > s->cfg->slo.ttft_s)
		s->ttft_breach(s->ttft_breach_data, r->prompt_tokens, dec.projected_ttft_s);
	switch (dec.verdict) {
	case NARWHAL_ADMIT:
	case NARWHAL_ADMIT_QUEUE:
		/* Admitted or queued, its prefill is work the pool must do; its
		 * arrival dates its TTFT deadline. */
		r->price.arrival_ns = r->arrival_us * 1000;
		nw_pricing_pending(s->fleet, &r->price, r->prompt_tokens);
		/* The host's own limit holds whatever the policy says: either way,
		 * run now when a unit is free, else wait in the queue. */
		if (nw_resource_try(&s->admitted))
			admit_now(r);
		else
			enqueue(r);
		return;
	case NARWHAL_REFUSE_TOO_LONG:
		s->metrics->counters.refused_too_long++;
		nw_demand_refuse(s->demand, &r->demand, NW_DEMAND_REFUSED_TTFT_TARGET);
		nw_request_finish(r, false);
		nw_request_answer_error(r, 400, "invalid_request_error", "prompt_too_long", NULL,
		                        "the prompt cannot be served within the TTFT target even on "
		                        "an idle fleet: shorten the prompt or raise the TTFT target");
		return;
	case NARWHAL_REFUSE:
	default:
		s->metrics->counters.refused_admission++;
		nw_demand_refuse(s->demand, &r->demand, NW_DEMAND_REFUSED_ADMISSION);
		nw_request_refuse(r, 429, "overloaded", dec.retry_after_s,
		                  "the fleet cannot serve this request within its targets now: "
		                  "retry after the time in Retry-After");
		return;
	}
}

bool
nw_phase_streams(const struct nw_request *r)
{
	/* A request an engine answers only in a whole body (the dialects'
	 * whole_body_only) gets a non-streamed leg, bounded by the request
	 * deadline alone. */
	return r->parsed.stream || (r->serve->cfg->engine.stream_decode && !r->whole_body_only);
}

/* The client body that decode and aggregate legs are built from. With
 * engine.stream_decode a non-streamed request's legs stream too
 * (collect.c), with usage in the last chunk so the assembled answer has
 * it. */
static const json_t *
output_body(struct nw_request *r)
{
	if (r->parsed.stream || !nw_phase_streams(r))
		return r->parsed.body;
	if (r->stream_body == NULL) {
		json_t *options = json_object();

		r->stream_body = json_copy(r->parsed.body);
		json_object_set_new(r->stream_body, "stream", json_true());
		json_object_set_new(options, "include_usage", json_true());
		json_object_set_new(r->stream_body, "stream_options", options);
	}
	return r->stream_body;
}

/* Check what a builder returned (rc, the call's path and flags); on
 * success a call that sends the client's body unchanged gets it. On a
 * failure the attempt fails, logged and counted, and false is returned. */
static bool
built(struct nw_request *r, const struct nw_dialect *d, const char *slot, int rc,
      const struct narwhal_dialect_target *target, struct narwhal_http_call *call)
{
	if (rc == 0 && (call->path == NULL || call->path[0] != '/' ||
	                ((call->flags & NARWHAL_CALL_CLIENT_BODY) && call->body != NULL)))
		rc = -EINVAL;
	if (rc != 0) {
		json_decref(call->body);
		call->body = NULL;
		dialect_failed(r, d, slot, rc);
		nw_request_fail(r, NW_FAIL_INTERNAL, 0, "the dialect could not build the engine "
		                "request");
		return false;
	}
	if (call->flags & NARWHAL_CALL_CLIENT_BODY)
		call->body = json_incref((json_t *)target->client_body);
	return true;
}

/* Per-engine counts for operators and the chaos benchmark (docs/recovery.md). */
static void
note_placed(struct nw_serve *s, uint32_t engine)
{
	s->fleet->stats[engine].legs_placed++;
	s->fleet->stats[engine].last_placed_ns = g_get_monotonic_time() * 1000;
}

/* --- passive detection (docs/recovery.md) --------------------------- */

void
nw_phase_report_ok(struct nw_request *r, int32_t engine)
{
	struct nw_fleet *f = r->serve->fleet;

	if (engine >= 0 && f->leg_outcome != NULL)
		f->leg_outcome(f->leg_outcome_data, (uint32_t)engine, NW_LEG_OK, NULL);
}

/* Whether a failure is the engine's own: it could not be reached or cut
 * its answer, sent what cannot be read, timed out, or answered 5xx. A
 * refusal of the request (4xx, context), an expired handoff deadline of
 * ours, the client or the deadline are not. */
static bool
engine_at_fault(nw_fail_kind kind, long engine_status)
{
	switch (kind) {
	case NW_FAIL_TRANSPORT:
	case NW_FAIL_CONNECT:
	case NW_FAIL_BAD_RESPONSE:
	case NW_FAIL_PREFILL_TIMEOUT:
	case NW_FAIL_FIRST_TOKEN:
	case NW_FAIL_READ_GAP:
		return true;
	case NW_FAIL_STATUS:
		return engine_status >= 500;
	default:
		return false;
	}
}

void
nw_phase_report_failure(struct nw_request *r, nw_fail_kind kind, long engine_status,
                        int32_t engine, const char *detail)
{
	struct nw_fleet *f = r->serve->fleet;
	nw_call_kind call = NW_CALL_PREFILL; /* a concurrent pair's prefill, a handoff */

	if (engine < 0 || !engine_at_fault(kind, engine_status))
		return;
	if ((uint32_t)engine == r->leg.engine && r->leg.kind != NW_LEG_NONE && r->fault_engine < 0)
		call = nw_leg_call_kind(r->leg.kind);
	f->stats[engine].legs_failed++;
	f->stats[engine].call_failures[call]++;
	if (f->leg_outcome != NULL)
		f->leg_outcome(f->leg_outcome_data, (uint32_t)engine,
		               kind == NW_FAIL_CONNECT ? NW_LEG_REFUSED : NW_LEG_FAILED, detail);
}

/* A concurrent pair's prefill leg, built for both engines and sent as the
 * decode leg goes out (pair.c). */
static bool
start_concurrent_prefill(struct nw_request *r)
{
	uint32_t engine = (uint32_t)r->prefill_pair;
	const struct nw_dialect *d = nw_serve_dialect(r->serve, engine);
	struct narwhal_http_call call = { .struct_size = sizeof call };
	struct narwhal_dialect_target target = target_for(r, engine, r->parsed.body);
	int rc;

	rc = d->ops->build_prefill(d->ctx, &target, &call);
	if (!built(r, d, "build_prefill", rc, &target, &call))
		return false;
	note_placed(r->serve, engine);
	r->last_prefill = (int32_t)engine;
	return nw_pair_start(r, engine, &call);
}

void
nw_phase_start_leg(struct nw_request *r, narwhal_phase phase, uint32_t engine)
{
	struct nw_serve *s = r->serve;
	const struct nw_dialect *d = nw_serve_dialect(s, engine);
	struct narwhal_http_call call = { .struct_size = sizeof call };
	struct narwhal_dialect_target target;
	int64_t now = g_get_monotonic_time();
	const char *slot;
	nw_leg_kind kind;
	int rc;

	switch (phase) {
	case NARWHAL_PHASE_PREFILL:
		kind = NW_LEG_PREFILL;
		r->last_prefill = (int32_t)engine;
		r->last_decode = -1;
		s->metrics->counters.prefill_started++;
		nw_request_set_state(r, NW_REQ_PREFILL);
		target = target_for(r, engine, r->parsed.body);
		slot = "build_prefill";
		rc = d->ops->build_prefill(d->ctx, &target, &call);
		break;
	case NARWHAL_PHASE_DECODE:
		if (r->handoff_until_us >= 0 && now >= r->handoff_until_us) {
			s->metrics->counters.handoff_expired++;
			nw_request_fail(r, NW_FAIL_HANDOFF, 0, "the KV handoff outlived "
			                "serving.handoff_timeout_s before its decode leg started");
			return;
		}
		kind = NW_LEG_DECODE;
		r->last_decode = (int32_t)engine;
		s->metrics->counters.decode_started++;
		nw_request_set_state(r, NW_REQ_DECODE);
		if (nw_phase_pair_concurrent(r) && !start_concurrent_prefill(r))
			return;
		target = target_for(r, engine, output_body(r));
		slot = "build_decode";
		rc = d->ops->build_decode(d->ctx, &target, r->handoff, &call);
		break;
	case NARWHAL_PHASE_AGGREGATE:
	default:
		kind = NW_LEG_AGGREGATE;
		r->last_prefill = (int32_t)engine;
		r->last_decode = -1;
		s->metrics->counters.aggregate_started++;
		nw_request_set_state(r, NW_REQ_DECODE);
		target = target_for(r, engine, output_body(r));
		slot = "build_aggregate";
		rc = d->ops->build_aggregate(d->ctx, &target, &call);
		break;
	}
	if (!built(r, d, slot, rc, &target, &call))
		return;
	/* The first-token clock starts before the stream opens (spec 6). A
	 * leg answered in one body shows no first token: the deadline bounds
	 * it. A concurrent pair's decode leg waits on its prefill, whose own
	 * bound runs until it answers (pair.c starts the clock then). */
	if (kind != NW_LEG_PREFILL && nw_phase_streams(r))
		r->ft_until_us = kind == NW_LEG_DECODE && nw_phase_pair_concurrent(r) ?
		                 NW_FT_AFTER_PREFILL :
		                 nw_phase_first_token_due(r, now);
	note_placed(s, engine);
	nw_leg_start(r, kind, engine, &call);
}

void
nw_request_on_first_token(struct nw_request *r)
{
	struct nw_serve *s = r->serve;
	/* TTFT is the client's: the first token a stream releases to it
	 * (docs/metrics.md); a body answer has none. */
	bool streamed = nw_request_streaming(r);
	/* Read here for the decode's gap observation too (placement.c). */
	int64_t now = g_get_monotonic_time();

	r->ft_until_us = -1;
	if (r->gap_us > 0)
		r->last_chunk_us = now;
	if (streamed)
		r->first_token_us = now;
	/* An aggregate leg turns from prefill work into decode work. */
	if (r->leg.kind == NW_LEG_AGGREGATE && r->prefill_engine >= 0) {
		int32_t engine = r->prefill_engine;

		nw_phase_prefill_done(r, now);
		s->fleet->engines[engine].resident_decode++;
		r->decode_engine = engine;
		nw_pricing_decode_enter(s->fleet, &r->price, (uint32_t)engine, r->prompt_tokens,
		                        nw_phase_reserved_output(r));
	}
	nw_pricing_decode_started(s->fleet, &r->price, now * 1000);
	nw_request_rearm(r);
}

/* --- the end of an engine leg ---------------------------------------- */

/* A decode engine could not load its handoff (NARWHAL_ERROR_HANDOFF): the
 * prefill engine's KV was gone, so the failure is the prefill engine's, to
 * exclude and to count (plugin-abi.h). False outside a pair's decode leg. */
static bool
handoff_failed(struct nw_request *r)
{
	if (r->aggregate || r->prefill_pair < 0 || r->leg.kind != NW_LEG_DECODE)
		return false;
	r->serve->metrics->counters.handoff_load_failed++;
	r->fault_engine = r->prefill_pair;
	return true;
}

void
nw_phase_fail_in_band(struct nw_request *r, const struct narwhal_sse_event *ev,
                      const char *payload, size_t len)
{
	struct nw_serve *s = r->serve;
	g_autofree char *detail = g_strndup(payload, len);

	/* A committed stream counts the error event it sends (relay.c). */
	if (!nw_request_streaming(r))
		s->metrics->counters.stream_errors++;
	switch (ev->error_class) {
	case NARWHAL_ERROR_HANDOFF:
		if (handoff_failed(r)) {
			nw_request_fail_engine(r, NW_FAIL_STATUS, 502, detail, NULL);
			break;
		}
		s->metrics->counters.permanent_errors++;
		nw_request_fail_engine(r, NW_FAIL_PERMANENT, 0, detail, NULL);
		break;
	case NARWHAL_ERROR_CONTEXT_TOO_LONG:
		s->metrics->counters.context_too_long++;
		nw_request_fail_engine(r, NW_FAIL_CONTEXT, 0, detail, NULL);
		break;
	case NARWHAL_ERROR_RETRYABLE:
		nw_request_fail_engine(r, NW_FAIL_STATUS, 0, detail, NULL);
		break;
	case NARWHAL_ERROR_CLIENT: {
		/* The client's own request, said in the stream: its words pass
		 * on as a 400's do (docs/dialects.md: in a stream the code or
		 * the type gives the status). */
		const struct nw_dialect *d = nw_serve_dialect(s, r->leg.engine);
		struct narwhal_engine_error err;

		nw_dialect_read_error(d, 0, payload, len, &err);
		s->metrics->counters.permanent_errors++;
		if (err.error_class == NARWHAL_ERROR_CLIENT && err.message[0] != '\0')
			nw_request_fail_engine(r, NW_FAIL_PERMANENT, 400, detail, err.message);
		else
			nw_request_fail_engine(r, NW_FAIL_PERMANENT, 0, detail, NULL);
		break;
	}
	case NARWHAL_ERROR_PERMANENT:
	default:
		s->metrics->counters.permanent_errors++;
		nw_request_fail_engine(r, NW_FAIL_PERMANENT, 0, detail, NULL);
		break;
	}
}

void
nw_phase_fail_by_status(struct nw_request *r, const struct nw_dialect *d, long status,
                        const GString *answer)
{
	struct nw_serve *s = r->serve;
	const char *body = answer->str;
	struct narwhal_engine_error err;

	nw_dialect_read_error(d, status, body, answer->len, &err);
	if (err.error_class == NARWHAL_ERROR_HANDOFF && handoff_failed(r)) {
		nw_request_fail_engine(r, NW_FAIL_STATUS, status, body, NULL);
	} else if (err.error_class == NARWHAL_ERROR_CONTEXT_TOO_LONG) {
		s->metrics->counters.context_too_long++;
		nw_request_fail_engine(r, NW_FAIL_CONTEXT, status, body, NULL);
	} else if (err.error_class == NARWHAL_ERROR_RETRYABLE && nw_engine_status_retryable(status)) {
		nw_request_fail_engine(r, NW_FAIL_STATUS, status, body, NULL);
	} else {
		s->metrics->counters.permanent_errors++;
		/* Only the dialect knows whether the engine refused the client's
		 * own request; only then may the client read its words. */
		nw_request_fail_engine(r, NW_FAIL_PERMANENT, status, body,
		                       err.error_class == NARWHAL_ERROR_CLIENT && err.message[0] != '\0'
		                               ? err.message : NULL);
	}
}

/* A transport failure, or an answer the engine client cannot decode
 * (engine_bad_response, docs/deployment.md). */
static nw_fail_kind
transfer_failure(const struct nw_upstream_result *res)
{
	return res->code == NW_UPSTREAM_BAD_RESPONSE ? NW_FAIL_BAD_RESPONSE
	       : res->code == NW_UPSTREAM_CONNECT    ? NW_FAIL_CONNECT
	                                             : NW_FAIL_TRANSPORT;
}

static void
prefill_done(struct nw_request *r, const struct nw_upstream_result *res)
{
	struct nw_serve *s = r->serve;
	const struct nw_dialect *d = nw_serve_dialect(s, r->leg.engine);
	json_t *doc;
	int rc;

	r->phase = NW_PT_NONE;
	if (res->code != NW_UPSTREAM_OK) {
		s->metrics->counters.prefill_failed_transport++;
		nw_request_fail_engine(r, transfer_failure(res), 0, res->error, NULL);
		return;
	}
	if (r->leg.status < 200 || r->leg.status >= 300) {
		s->metrics->counters.prefill_failed_status++;
		nw_phase_fail_by_status(r, d, r->leg.status, r->leg.collected);
		return;
	}
	doc = nw_json_read(r->leg.collected->str, r->leg.collected->len, 0, NULL);
	rc = doc != NULL ? d->ops->parse_prefill(d->ctx, doc, &r->handoff) : -EPROTO;
	json_decref(doc);
	if (rc != 0) {
		if (doc != NULL)
			dialect_failed(r, d, "parse_prefill", rc);
		s->metrics->counters.prefill_failed_status++;
		nw_request_fail_engine(r, NW_FAIL_BAD_RESPONSE, r->leg.status,
		                       "the prefill engine's answer has no readable handoff", NULL);
		return;
	}
	/* The dialect expected a handoff and found none: the decode leg goes
	 * on without one (the engine prefills again, which costs the prefill
	 * twice), but the operator should know. */
	if (r->handoff == NULL) {
		s->metrics->counters.handoff_missing++;
		nw_log(NARWHAL_LOG_WARNING, "handoff_missing", "request_id", r->id, "engine",
		       d->ref.id, NULL);
	}
	/* No success reported for the prefill engine yet: a handoff its decode
	 * engine cannot load is still its failure (docs/recovery.md), so its
	 * leg counts as good only once the request completes (request.c). */
	nw_leg_release(r);
	nw_phase_prefill_done(r, r->prefill_end_us);
	/* The stream commits when its decode leg goes out (leg.c), not here:
	 * the decode-slot wait after this can still end in a retry. */
	nw_phase_place(r, NARWHAL_PHASE_DECODE);
	nw_request_rearm(r);
}

static void
decode_done(struct nw_request *r, const struct nw_upstream_result *res)
{
	struct nw_serve *s = r->serve;
	const struct nw_dialect *d = nw_serve_dialect(s, r->leg.engine);

	if (r->leg.relaying || r->leg.collecting) {
		/* The terminator came: a success, whether or not the transfer
		 * then ended cleanly. */
		if (r->leg.relaying && r->relay.done) {
			nw_request_finish(r, true);
			nw_relay_end(r);
			return;
		}
		if (r->leg.collecting && nw_collect_end(r)) {
			nw_collect_answer(r);
			return;
		}
		if (nw_request_decided(r))
			return; /* the collector's last event failed it */
		s->metrics->counters.decode_failed_transport++;
		nw_request_fail_engine(r, NW_FAIL_TRANSPORT, 0, res->code != NW_UPSTREAM_OK ? res->error :
		                       "the engine's stream ended without its terminator", NULL);
		return;
	}
	if (res->code != NW_UPSTREAM_OK) {
		s->metrics->counters.decode_failed_transport++;
		nw_request_fail_engine(r, transfer_failure(res), 0, res->error, NULL);
		return;
	}
	if (r->leg.status < 200 || r->leg.status >= 300) {
		s->metrics->counters.decode_failed_status++;
		nw_phase_fail_by_status(r, d, r->leg.status, r->leg.collected);
		return;
	}
	/* engine.stream_decode off: the engine's body as it came. */
	{
		size_t len = r->leg.collected->len;

		nw_request_finish(r, true);
		nw_request_answer_text(r, g_string_free(g_steal_pointer(&r->leg.collected), FALSE),
		                       len);
	}
}

void
nw_request_on_leg_done(struct nw_request *r, const struct nw_upstream_result *res)
{
	if (nw_request_decided(r))
		return;
	/* The connection is back in the pool. */
	if (r->leg.holds_pool) {
		r->leg.holds_pool = false;
		nw_resource_release(&r->serve->pool);
	}
	switch (r->leg.kind) {
	case NW_LEG_TOKENIZE:
		tokenize_done(r, res);
		break;
	case NW_LEG_PREFILL:
		prefill_done(r, res);
		break;
	case NW_LEG_DECODE:
	case NW_LEG_AGGREGATE:
		decode_done(r, res);
		break;
	case NW_LEG_NONE:
		break;
	}
}
