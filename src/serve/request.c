/*
 * One request's lifecycle around its phases (phases.c): creation at the
 * headers, the body, the answer, the one timer, failure with retry before
 * visible output, and the release of every reservation on every exit path.
 */
#include "build-config.h"

#include <math.h>
#include <string.h>
#include <sys/socket.h>

#include "core/access-log.h"
#include "core/log.h"
#include "core/process.h"
#include "serve/request.h"
#include "serve/phases.h"
#include "serve/serve-internal.h"

/* --- the state machine ---------------------------------------------- */

#define BIT(st) (1u << (st))
/* Every working state may end decided (a refusal, a failure, the client
 * leaving). */
#define DECIDED (BIT(NW_REQ_RESPONDING))

static const unsigned legal_next[NW_REQ_N_STATES] = {
	[NW_REQ_READING] = BIT(NW_REQ_SIZING) | DECIDED,
	[NW_REQ_SIZING] = BIT(NW_REQ_QUEUED) | BIT(NW_REQ_PLACING) | DECIDED,
	[NW_REQ_QUEUED] = BIT(NW_REQ_PLACING) | DECIDED,
	/* An expired handoff fails a decode placement: BACKOFF. */
	[NW_REQ_PLACING] = BIT(NW_REQ_PLACING) | BIT(NW_REQ_PREFILL) | BIT(NW_REQ_DECODE) |
	                   BIT(NW_REQ_BACKOFF) | DECIDED,
	[NW_REQ_PREFILL] = BIT(NW_REQ_PLACING) | BIT(NW_REQ_BACKOFF) | DECIDED,
	[NW_REQ_DECODE] = BIT(NW_REQ_STREAMING) | BIT(NW_REQ_BACKOFF) | DECIDED,
	[NW_REQ_BACKOFF] = BIT(NW_REQ_PLACING) | DECIDED,
	/* Past the 200 there is no retry: only the end of the stream. */
	[NW_REQ_STREAMING] = BIT(NW_REQ_STREAM_ENDING),
	[NW_REQ_RESPONDING] = BIT(NW_REQ_DONE),
	[NW_REQ_STREAM_ENDING] = BIT(NW_REQ_DONE),
	[NW_REQ_DONE] = 0,
};

static const char *const state_names[NW_REQ_N_STATES] = {
	[NW_REQ_READING] = "reading", [NW_REQ_SIZING] = "sizing", [NW_REQ_QUEUED] = "queued",
	[NW_REQ_PLACING] = "placing", [NW_REQ_PREFILL] = "prefill", [NW_REQ_DECODE] = "decode",
	[NW_REQ_BACKOFF] = "backoff", [NW_REQ_STREAMING] = "streaming",
	[NW_REQ_RESPONDING] = "responding", [NW_REQ_STREAM_ENDING] = "stream_ending",
	[NW_REQ_DONE] = "done",
};

bool
nw_req_transition_legal(nw_req_state from, nw_req_state to)
{
	return from < NW_REQ_N_STATES && to < NW_REQ_N_STATES && (legal_next[from] & BIT(to));
}

const char *
nw_req_state_name(nw_req_state state)
{
	return state < NW_REQ_N_STATES ? state_names[state] : "invalid";
}

void
nw_request_set_state(struct nw_request *r, nw_req_state next)
{
	if (nw_log_enabled(NARWHAL_LOG_DEBUG) && next != r->state)
		nw_log(NARWHAL_LOG_DEBUG, "request_state", "request_id", r->id, "from",
		       nw_req_state_name(r->state), "to", nw_req_state_name(next), NULL);
	g_return_if_fail(nw_req_transition_legal(r->state, next));
	r->state = next;
}

/* --- creation and release ------------------------------------------ */

static void on_timer(void *data);

static void
on_admitted(void *data)
{
	struct nw_request *r = data;

	r->wake |= NW_WAKE_ADMITTED;
	nw_timer_set(r->serve->timers, &r->timer, 0);
}

static void
on_kicked(void *data)
{
	struct nw_request *r = data;

	r->wake |= NW_WAKE_KICK;
	nw_timer_set(r->serve->timers, &r->timer, 0);
}

struct nw_request *
nw_request_new(struct nw_serve *s, struct MHD_Connection *conn, narwhal_route route,
               const char *id)
{
	struct nw_request *r = g_new0(struct nw_request, 1);

	r->serve = s;
	r->conn = conn;
	r->refs = 1;
	r->route = route;
	r->state = NW_REQ_READING;
	g_strlcpy(r->id, id, sizeof r->id);
	r->handle = ++s->next_handle;
	r->arrival_us = g_get_monotonic_time();
	r->deadline_us = r->arrival_us + (int64_t)(s->cfg->serving.request_timeout_s * 1e6);
	r->body_in = g_string_new(NULL);
	r->excluded = g_new0(uint8_t, MAX(s->fleet->view.n_engines, 1));
	r->queued_on = r->prefill_engine = r->decode_engine = r->prefill_pair = -1;
	r->fault_engine = -1;
	r->handoff_until_us = -1;
	r->ft_until_us = -1;
	r->last_chunk_us = -1;
	r->stall_until_us = -1;
	r->gap_us = (int64_t)(s->cfg->engine.decode_read_timeout_s * 1e6);
	r->answer_code = nw_outcome_code_none();
	r->queued_us = r->first_token_us = r->prefill_end_us = -1;
	r->queue_s = NAN;
	r->usage_prompt = r->usage_completion = -1;
	r->last_prefill = r->last_decode = -1;
	nw_waiter_init(&r->admit_wait, on_admitted, r);
	nw_waiter_init(&r->phase_wait, on_kicked, r);
	nw_waiter_init(&r->leg.pool_wait, NULL, r);
	/* Every line serves requests in arrival order (spec 4.2 FIFO). */
	r->admit_wait.order = r->phase_wait.order = r->arrival_us;
	nw_timer_init(&r->timer, on_timer, r);
	r->link.data = r;
	g_queue_push_tail_link(&s->requests, &r->link);
	s->retained++;
	s->allocated++;
	nw_process_load_up(NW_LOAD_REQUESTS);
	/* The body read is bounded by the request deadline too. */
	nw_request_rearm(r);
	nw_log(NARWHAL_LOG_DEBUG, "request_arrived", "request_id", r->id, NULL);
	return r;
}

static void
request_free(struct nw_request *r)
{
	nw_timer_cancel(r->serve->timers, &r->timer);
	nw_client_request_clear(&r->parsed);
	g_string_free(r->body_in, TRUE);
	if (r->leg.collected)
		g_string_free(r->leg.collected, TRUE);
	nw_relay_clear(&r->relay);
	nw_collect_clear(&r->collect);
	json_decref(r->stream_body);
	json_decref(r->handoff);
	nw_pair_clear(&r->pair);
	free(r->resp_body);
	g_free(r->excluded);
	r->serve->allocated--; /* the last use of the serve */
	g_free(r);
	nw_process_load_down(NW_LOAD_REQUESTS);
}

void
nw_request_unref(struct nw_request *r)
{
	if (--r->refs == 0)
		request_free(r);
}

/* Give back what one attempt holds: the leg, phase slots and lines, the
 * handoff. The admission reservation stays (spec 4.2: retries keep it). */
void
nw_request_release_attempt(struct nw_request *r)
{
	nw_leg_release(r);
	nw_pair_release(r);
	nw_phase_leave_line(r);
	nw_phase_unqueue(r);
	if (r->prefill_engine >= 0)
		nw_phase_release_slot(r, NARWHAL_PHASE_PREFILL);
	if (r->decode_engine >= 0)
		nw_phase_release_slot(r, NARWHAL_PHASE_DECODE);
	json_decref(r->handoff);
	r->handoff = NULL;
	r->prefill_pair = -1;
	r->fault_engine = -1;
	r->handoff_until_us = -1;
	r->ft_until_us = -1;
	r->last_chunk_us = -1;
	r->stall_until_us = -1;
	r->prefill_end_us = -1;
	r->phase = NW_PT_NONE;
	r->wake &= ~(unsigned)(NW_WAKE_KICK | NW_WAKE_POOL);
}

/* Everything: the attempt, the admission unit or queue place. */
static void
release_all(struct nw_request *r)
{
	struct nw_serve *s = r->serve;
	const struct narwhal_admission_ops *ops = &s->admission->plugin->ops.admission;

	nw_request_release_attempt(r);
	nw_pricing_release(s->fleet, &r->price);
	nw_resource_leave(&s->admitted, &r->admit_wait);
	if (r->admit_wait.granted) {
		r->admit_wait.granted = false;
		r->admitted = true;
	}
	if (r->admitted) {
		r->admitted = false;
		nw_resource_release(&s->admitted);
		if (ops->finished != NULL)
			ops->finished(s->admission->ctx, r->handle, r->ok);
	}
	r->wake = 0;
	nw_timer_cancel(s->timers, &r->timer);
}

/* --- the timer ----------------------------------------------------- */

static int64_t
earliest(int64_t a, int64_t b)
{
	if (a < 0)
		return b;
	if (b < 0)
		return a;
	return MIN(a, b);
}

void
nw_request_rearm(struct nw_request *r)
{
	int64_t when = -1;

	if (nw_request_decided(r)) {
		nw_timer_cancel(r->serve->timers, &r->timer);
		return;
	}
	when = r->deadline_us;
	if (r->wake != 0)
		when = 0;
	if (r->phase != NW_PT_NONE)
		when = earliest(when, r->phase_until_us);
	when = earliest(when, r->handoff_until_us);
	when = earliest(when, r->ft_until_us);
	when = earliest(when, r->stall_until_us);
	/* The gap limit is lazy: chunks only move last_chunk_us, and an early
	 * wake-up re-arms. */
	if (r->last_chunk_us >= 0 && r->gap_us > 0)
		when = earliest(when, r->last_chunk_us + r->gap_us);
	nw_timer_set(r->serve->timers, &r->timer, when);
}

static void
on_wake(struct nw_request *r, unsigned wake, int64_t now)
{
	if ((wake & NW_WAKE_ADMITTED) && r->admit_wait.granted && r->state == NW_REQ_QUEUED) {
		r->admit_wait.granted = false;
		r->admitted = true;
		r->phase = NW_PT_NONE;
		r->serve->metrics->counters.admitted++;
		nw_demand_admit(r->serve->demand, &r->demand);
		nw_phase_note_admitted(r, now);
		nw_phase_begin_attempt(r);
	}
	if (nw_request_decided(r))
		return;
	if (wake & NW_WAKE_POOL)
		nw_leg_pool_granted(r);
	if (nw_request_decided(r))
		return;
	if ((wake & NW_WAKE_KICK) && r->state == NW_REQ_PLACING)
		nw_phase_place(r, r->placing);
}

static void
on_phase_expired(struct nw_request *r)
{
	struct nw_serve *s = r->serve;
	nw_phase_timer phase = r->phase;

	r->phase = NW_PT_NONE;
	switch (phase) {
	case NW_PT_NONE:
		break;
	case NW_PT_TOKENIZE:
		nw_leg_release(r);
		nw_phase_size_by_chars(r);
		break;
	case NW_PT_QUEUE:
		s->metrics->counters.queue_timeouts++;
		nw_demand_refuse(s->demand, &r->demand, NW_DEMAND_REFUSED_QUEUE_TIMEOUT);
		nw_request_refuse(r, 429, "queue_timeout", s->cfg->serving.queue_timeout_s,
		                  "the request waited serving.queue_timeout_s for admission: the "
		                  "fleet is saturated, retry later");
		break;
	case NW_PT_POOL:
		s->metrics->counters.pool_starvation++;
		nw_request_fail(r, NW_FAIL_POOL, 0, "no engine connection came free within "
		                "engine.pool_timeout_s");
		break;
	case NW_PT_PREFILL:
		s->metrics->counters.prefill_timeouts++;
		nw_request_fail(r, NW_FAIL_PREFILL_TIMEOUT, 0, "the prefill leg took longer than "
		                "serving.prefill_timeout_s");
		break;
	case NW_PT_BACKOFF:
		nw_phase_begin_attempt(r);
		break;
	}
}

static void
on_timer(void *data)
{
	struct nw_request *r = data;
	struct nw_serve *s = r->serve;
	int64_t now = g_get_monotonic_time();
	unsigned wake = r->wake;

	if (nw_request_decided(r))
		return;
	r->wake = 0;
	if (wake != 0)
		on_wake(r, wake, now);
	if (nw_request_decided(r))
		return;
	if (now >= r->deadline_us) {
		s->metrics->counters.deadline_expired++;
		nw_request_fail(r, NW_FAIL_DEADLINE, 0, "the request took longer than "
		                "serving.request_timeout_s");
		return;
	}
	if (r->handoff_until_us >= 0 && now >= r->handoff_until_us) {
		if (r->leg.kind == NW_LEG_PREFILL) {
			/* The cap passed while the prefill was still out: any handoff
			 * it gives is expired already. A prefill failure of that
			 * engine, which the retry then avoids. */
			s->metrics->counters.prefill_timeouts++;
			nw_request_fail(r, NW_FAIL_PREFILL_TIMEOUT, 0, "the prefill leg did not "
			                "answer within serving.handoff_timeout_s: its handoff would "
			                "be expired");
			return;
		}
		s->metrics->counters.handoff_expired++;
		nw_request_fail(r, NW_FAIL_HANDOFF, 0, "the KV handoff outlived "
		                "serving.handoff_timeout_s before its decode leg started");
		return;
	}
	if (r->ft_until_us >= 0 && now >= r->ft_until_us) {
		if (nw_pair_hold_expired(r))
			return;
		s->metrics->counters.first_token_timeouts++;
		/* Spec 7.6: the consolidation evidence starts again. */
		nw_demand_evidence_reset(s->demand, now * 1000, "first_token_timeout");
		nw_request_fail(r, NW_FAIL_FIRST_TOKEN, 0, "no token within "
		                "engine.first_token_timeout_s of starting the decode leg");
		return;
	}
	if (r->phase != NW_PT_NONE && now >= r->phase_until_us) {
		on_phase_expired(r);
		if (nw_request_decided(r))
			return;
	}
	if (r->stall_until_us >= 0 && now >= r->stall_until_us && nw_relay_stalled(r)) {
		s->metrics->counters.backpressure_closes++;
		nw_log(NARWHAL_LOG_WARNING, "client_backpressure", "request_id", r->id, NULL);
		r->client_gone = true;
		nw_request_fail(r, NW_FAIL_CLIENT, 0, "the client stopped reading");
		nw_relay_close_client(r);
		return;
	}
	if (r->last_chunk_us >= 0 && r->gap_us > 0 && now >= r->last_chunk_us + r->gap_us) {
		s->metrics->counters.read_gap_timeouts++;
		nw_request_fail(r, NW_FAIL_READ_GAP, 0, "the engine's stream was silent for "
		                "engine.decode_read_timeout_s");
		return;
	}
	nw_request_rearm(r);
}

/* --- answers ------------------------------------------------------- */

void
nw_request_wake_client(struct nw_request *r)
{
	if (r->suspended && r->conn != NULL) {
		r->suspended = false;
		nw_http_server_resume(r->serve->http, r->conn);
	}
}

static void
on_hangup(void *data)
{
	struct nw_request *r = data;

	/* A stream whose terminator was already handed to the connection was
	 * answered: a client that leaves on reading [DONE] succeeded, even if
	 * the engine's transfer has not quite ended. */
	if (!nw_request_decided(r) && r->relay.done && r->relay.sent == r->relay.committed)
		nw_request_finish(r, true);
	/* The server stopped watching; resuming is ours to do. */
	if (!r->client_gone) {
		r->client_gone = true;
		r->serve->metrics->counters.client_disconnects++;
		nw_log(NARWHAL_LOG_INFO, "client_disconnected", "request_id", r->id, NULL);
	}
	r->relay.abort = true;
	nw_request_fail(r, NW_FAIL_CLIENT, 0, "the client left");
	nw_request_wake_client(r);
}

void
nw_request_suspend(struct nw_request *r)
{
	r->suspended = true;
	nw_http_server_suspend(r->serve->http, r->conn, on_hangup, r);
}

/* The final answer of a request that is not a stream (takes body, len
 * bytes long: an engine answer is never scanned again). */
static void
answer(struct nw_request *r, unsigned status, char *body, size_t len)
{
	free(r->resp_body);
	r->resp_status = status;
	r->resp_body = body;
	r->resp_len = body ? len : 0;
	/* The outcome was decided first (nw_request_finish). */
	g_warn_if_fail(r->state == NW_REQ_RESPONDING);
	nw_request_wake_client(r);
}

void
nw_request_answer_error(struct nw_request *r, unsigned status, const char *type,
                        const char *code, const char *param, const char *message)
{
	json_t *body = nw_http_error_body(type, code, param, message);
	size_t len;
	char *text = nw_json_dumps(body, JSON_COMPACT, &len);

	r->answer_code = nw_outcome_code_index(code);
	answer(r, status, text, len);
	json_decref(body);
}

void
nw_request_answer_text(struct nw_request *r, char *text, size_t len)
{
	answer(r, 200, text, len);
}

static void
set_retry_after(struct nw_request *r, double retry_after_s)
{
	double secs = ceil(isfinite(retry_after_s) ? retry_after_s : 1.0);

	g_snprintf(r->retry_after, sizeof r->retry_after, "%.0f", MAX(1.0, MIN(secs, 86400.0)));
}

/* A refusal: 429 or 503 with Retry-After in whole seconds, at least 1 (or
 * 400 without). */
void
nw_request_refuse(struct nw_request *r, unsigned status, const char *code, double retry_after_s,
                  const char *message)
{
	if (status == 429 || status == 503)
		set_retry_after(r, retry_after_s);
	nw_request_finish(r, false);
	/* A 503 is Narwhal's state, not the client's mistake. */
	nw_request_answer_error(r, status, status >= 500 ? "server_error" : "invalid_request_error",
	                        code, NULL, message);
}

static enum MHD_Result
queue_answer(struct nw_request *r)
{
	struct MHD_Response *resp;
	enum MHD_Result ret;
	unsigned status = 200;

	if (nw_request_streaming(r)) {
		resp = nw_relay_response(r);
	} else {
		/* A client that left before its answer has nobody to tell: the
		 * connection closes and the request is recorded as gone (499),
		 * not as a failure of Narwhal's. */
		if (r->resp_body == NULL && r->client_gone)
			return MHD_NO;
		if (r->resp_body == NULL) {
			json_t *b = nw_http_error_body("server_error", "internal_error", NULL,
			                               "the request ended without an answer");
			r->resp_body = nw_json_dumps(b, JSON_COMPACT, &r->resp_len);
			r->resp_status = 500;
			r->answer_code = nw_outcome_code_index("internal_error");
			json_decref(b);
		}
		status = r->resp_status;
		r->serve->metrics->client_bytes_out[nw_request_metric_route(r)] += r->resp_len;
		resp = MHD_create_response_from_buffer(r->resp_len, r->resp_body,
		                                       MHD_RESPMEM_MUST_FREE);
		if (resp != NULL)
			r->resp_body = NULL;
		else
			return MHD_NO;
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
		MHD_add_response_header(resp, "X-Request-Id", r->id);
		if (r->retry_after[0] != '\0')
			MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, r->retry_after);
	}
	if (resp == NULL)
		return MHD_NO;
	if (nw_log_enabled(NARWHAL_LOG_DEBUG)) {
		char st[8];

		g_snprintf(st, sizeof st, "%u", status);
		nw_log(NARWHAL_LOG_DEBUG, "request_answer", "request_id", r->id, "status", st, NULL);
	}
	ret = MHD_queue_response(r->conn, status, resp);
	MHD_destroy_response(resp);
	r->response_queued = true;
	return ret;
}

/* --- outcome, failure, retry ---------------------------------------- */

void
nw_request_finish(struct nw_request *r, bool ok)
{
	struct nw_serve *s = r->serve;

	if (nw_request_decided(r))
		return;
	r->ok = ok;
	if (ok) {
		/* The leg that delivered the answer ended well, and so did the
		 * prefill whose handoff it loaded (phases.c, prefill_done). */
		if (r->leg.kind == NW_LEG_DECODE || r->leg.kind == NW_LEG_AGGREGATE)
			nw_phase_report_ok(r, (int32_t)r->leg.engine);
		if (r->leg.kind == NW_LEG_DECODE && !r->aggregate && r->prefill_pair >= 0 &&
		    r->prefill_pair != (int32_t)r->leg.engine)
			nw_phase_report_ok(r, r->prefill_pair);
		s->metrics->counters.requests_ok++;
		nw_retry_budget_success(&s->budget);
	} else {
		s->metrics->counters.requests_failed++;
	}
	release_all(r);
	nw_request_set_state(r, r->state == NW_REQ_STREAMING ? NW_REQ_STREAM_ENDING
	                                                      : NW_REQ_RESPONDING);
}

/* The client's status, type and code for a failure. */
static void
failure_answer(nw_fail_kind kind, long engine_status, unsigned *status, const char **type,
               const char **code)
{
	*type = "server_error";
	switch (kind) {
	case NW_FAIL_TRANSPORT:
	case NW_FAIL_CONNECT: *status = 502; *code = "engine_unreachable"; break;
	case NW_FAIL_STATUS: *status = 502; *code = "engine_error"; break;
	case NW_FAIL_PERMANENT:
		/* An engine's validation of the client's own request (issue 9);
		 * any other 4xx is a refusal of what Narwhal sent. */
		if (nw_fail_passes_on(NW_FAIL_PERMANENT, engine_status)) {
			*status = 400;
			*type = "invalid_request_error";
			*code = "engine_rejected";
		} else {
			*status = 502;
			*code = "engine_error";
		}
		break;
	case NW_FAIL_CONTEXT:
		*status = 400;
		*type = "invalid_request_error";
		*code = "context_length_exceeded";
		break;
	case NW_FAIL_BAD_RESPONSE: *status = 502; *code = "engine_bad_response"; break;
	case NW_FAIL_TOO_LARGE: *status = 502; *code = "response_too_large"; break;
	case NW_FAIL_PREFILL_TIMEOUT: *status = 504; *code = "prefill_timeout"; break;
	case NW_FAIL_FIRST_TOKEN: *status = 504; *code = "first_token_timeout"; break;
	case NW_FAIL_READ_GAP: *status = 504; *code = "read_timeout"; break;
	case NW_FAIL_HANDOFF: *status = 504; *code = "handoff_expired"; break;
	case NW_FAIL_DEADLINE: *status = 504; *code = "expired"; break;
	case NW_FAIL_POOL: *status = 503; *code = "pool_exhausted"; break;
	case NW_FAIL_NO_ENGINE: *status = 503; *code = "no_engine"; break;
	case NW_FAIL_SHUTDOWN: *status = 503; *code = "shutting_down"; break;
	case NW_FAIL_CLIENT:
	case NW_FAIL_INTERNAL:
	default: *status = 500; *code = "internal_error"; break;
	}
}

/* The engine that a failure is blamed on, to exclude it next attempt. An
 * expired handoff is its producer's: the prefill engine whose KV did not
 * last, not the decode engine that never got to read it (issue 9). */
static int32_t
blamed_engine(const struct nw_request *r, nw_fail_kind kind)
{
	if (kind == NW_FAIL_HANDOFF)
		return r->prefill_pair;
	if (r->fault_engine >= 0)
		return r->fault_engine;
	if (r->leg.kind == NW_LEG_NONE || r->leg.kind == NW_LEG_TOKENIZE)
		return -1;
	return (int32_t)r->leg.engine;
}

static void
retry(struct nw_request *r, int32_t blamed)
{
	struct nw_serve *s = r->serve;
	const struct nw_config *cfg = s->cfg;
	double backoff;
	char attempt[16], wait[32];

	nw_request_release_attempt(r);
	/* Its prefill is to do again, by the pool (a prefill completed or not). */
	nw_pricing_pending(s->fleet, &r->price, r->prompt_tokens);
	if (blamed >= 0)
		r->excluded[blamed] = 1;
	r->attempt++;
	s->metrics->counters.retries++;
	backoff = nw_backoff_sample(s->rng, cfg->serving.retry_base_s, cfg->serving.retry_cap_s,
	                            r->attempt - 1);
	nw_request_set_state(r, NW_REQ_BACKOFF);
	r->phase = NW_PT_BACKOFF;
	r->phase_until_us = g_get_monotonic_time() + (int64_t)(backoff * 1e6);
	g_snprintf(attempt, sizeof attempt, "%u", r->attempt + 1);
	g_snprintf(wait, sizeof wait, "%.3f", backoff);
	nw_log(NARWHAL_LOG_INFO, "request_retry", "request_id", r->id, "attempt", attempt,
	       "backoff_s", wait, "engine",
	       blamed >= 0 ? s->cfg->fleet.engines[blamed].id : "", NULL);
	nw_request_rearm(r);
}

/* Whether the client reads the engine's own message for a failure. */
bool
nw_fail_passes_on(nw_fail_kind kind, long engine_status)
{
	return kind == NW_FAIL_PERMANENT && (engine_status == 400 || engine_status == 422);
}

void
nw_request_fail_engine(struct nw_request *r, nw_fail_kind kind, long engine_status,
                       const char *detail, const char *engine_message)
{
	struct nw_serve *s = r->serve;
	const char *engine = s->cfg->fleet.engines[r->fault_engine >= 0 ? (uint32_t)r->fault_engine
	                                                                  : r->leg.engine].id;
	struct nw_client_error err;
	g_autofree char *text = NULL;
	char st[16];

	if (nw_request_decided(r))
		return;
	g_snprintf(st, sizeof st, "%ld", engine_status);
	/* The full text, which may name addresses, paths and internals, is
	 * the operator's (docs/deployment.md). */
	nw_log(NARWHAL_LOG_WARNING, "engine_error", "request_id", r->id, "engine", engine,
	       "status", st, "detail", detail, NULL);
	if (kind == NW_FAIL_CONTEXT) {
		nw_phase_context_error(r, &err);
		nw_request_fail(r, kind, engine_status, err.message);
		return;
	}
	if (nw_fail_passes_on(kind, engine_status) && engine_message != NULL) {
		nw_request_fail(r, kind, engine_status, engine_message);
		return;
	}
	if (kind == NW_FAIL_TRANSPORT || kind == NW_FAIL_CONNECT)
		text = g_strdup_printf("engine %s could not be reached or cut its answer short "
		                       "(request %s)", engine, r->id);
	else if (kind == NW_FAIL_BAD_RESPONSE)
		text = g_strdup_printf("engine %s sent an answer Narwhal cannot read (request %s)",
		                       engine, r->id);
	else if (engine_status == 0)
		text = g_strdup_printf("engine %s reported an error in its stream (request %s)",
		                       engine, r->id);
	else
		text = g_strdup_printf("engine %s failed with HTTP %ld (request %s)", engine,
		                       engine_status, r->id);
	nw_request_fail(r, kind, engine_status, text);
}

void
nw_request_fail(struct nw_request *r, nw_fail_kind kind, long engine_status, const char *message)
{
	struct nw_serve *s = r->serve;
	const char *type, *code;
	unsigned status;
	bool streaming = nw_request_streaming(r), reading = r->state == NW_REQ_READING;
	g_autofree char *text = NULL;
	struct nw_client_error ctx;
	const char *param = NULL;

	if (nw_request_decided(r))
		return;
	if (kind == NW_FAIL_CLIENT) {
		nw_request_finish(r, false);
		return;
	}
	if (r->relay.done) {
		/* The terminator was relayed; only the engine's transfer end
		 * was missing (gap, deadline, shutdown): still a success. */
		nw_leg_release(r);
		nw_request_finish(r, true);
		nw_relay_end(r);
		return;
	}
	if (r->collect.done && r->leg.collecting) {
		/* Likewise for an assembled answer: it is whole. */
		nw_collect_answer(r);
		return;
	}
	/* A concurrent pair's legs can fail in either order (pair.c). */
	if (r->pair.state != NW_PAIR_IDLE && nw_pair_on_failure(r, kind, engine_status, message))
		return;
	nw_phase_report_failure(r, kind, engine_status, blamed_engine(r, kind), message);
	if (kind == NW_FAIL_NO_ENGINE)
		set_retry_after(r, s->fleet->retry_after_s);
	if (!streaming && nw_fail_retryable(kind) &&
	    r->attempt + 1 < s->cfg->serving.max_attempts && s->stop != NW_SERVE_STOPPING) {
		if (nw_retry_budget_take(&s->budget)) {
			retry(r, blamed_engine(r, kind));
			return;
		}
		s->metrics->counters.retry_budget_denied++;
		text = g_strdup_printf("%s (not retried: the retry budget is spent)", message);
		message = text;
	}
	failure_answer(kind, engine_status, &status, &type, &code);
	if (kind == NW_FAIL_CONTEXT) {
		nw_phase_context_error(r, &ctx);
		param = ctx.param[0] ? ctx.param : NULL;
	}
	nw_log(NARWHAL_LOG_WARNING, "request_failed", "request_id", r->id, "code", code,
	       "message", message, NULL);
	nw_request_finish(r, false);
	r->answer_code = nw_outcome_code_index(code);
	if (!streaming)
		r->resp_status = status;
	if (reading) {
		/* Still reading the body: MHD takes no answer now. Close. */
		nw_http_server_abort(r->conn);
		return;
	}
	if (streaming)
		nw_relay_error(r, type, code, message);
	else
		nw_request_answer_error(r, status, type, code, param, message);
}

void
nw_request_commit_stream(struct nw_request *r)
{
	nw_request_set_state(r, NW_REQ_STREAMING);
	nw_request_wake_client(r);
}

void
nw_request_shutdown(struct nw_request *r)
{
	if (nw_request_decided(r))
		return;
	r->serve->metrics->counters.shutdown_aborts++;
	nw_request_fail(r, NW_FAIL_SHUTDOWN, 0, "Narwhal is shutting down");
}

/* --- the end: metrics and the access log ----------------------------- */

nw_metric_route
nw_request_metric_route(const struct nw_request *r)
{
	return r->route == NARWHAL_ROUTE_CHAT_COMPLETIONS ? NW_METRIC_ROUTE_CHAT
	                                                  : NW_METRIC_ROUTE_COMPLETIONS;
}

static const char *
engine_id(const struct nw_request *r, int32_t engine)
{
	return engine >= 0 ? r->serve->cfg->fleet.engines[engine].id : NULL;
}

/* Output tokens: the engine's usage, else a stream's token events (one
 * token each for vLLM, plugin-abi.h); -1 when neither is known. */
static int64_t
output_tokens(const struct nw_request *r, bool streamed)
{
	if (r->usage_completion >= 0)
		return r->usage_completion;
	return streamed ? (int64_t)r->token_events : -1;
}

/* The request's answer is final and its last byte gone (docs/metrics.md):
 * count its outcome, observe its latencies, write its access-log line.
 * The one clock read here is the end time. */
static void
record_end(struct nw_request *r)
{
	struct nw_serve_metrics *m = r->serve->metrics;
	nw_metric_route route = nw_request_metric_route(r);
	bool streamed = r->state == NW_REQ_STREAM_ENDING;
	int64_t now = g_get_monotonic_time();
	int64_t tokens = output_tokens(r, streamed);
	double total = (double)(now - r->arrival_us) / 1e6, ttft = NAN, tpot = NAN;
	unsigned status = streamed ? 200 : r->resp_status;

	if (!r->ok && r->answer_code == nw_outcome_code_none()) {
		/* No answer chose a code: the client left before it. */
		r->answer_code = nw_outcome_code_index("client_disconnected");
		if (!streamed)
			status = NW_STATUS_CLIENT_GONE;
	}
	nw_serve_metrics_outcome(m, route, status, r->answer_code);
	m->client_bytes_in[route] += r->body_in->len;
	if (r->first_token_us >= 0) {
		ttft = (double)(r->first_token_us - r->arrival_us) / 1e6;
		nw_histogram_observe(&m->ttft, &nw_scale_ttft, ttft);
		if (r->ok && tokens >= 2) {
			tpot = (double)(now - r->first_token_us) / 1e6 / (double)(tokens - 1);
			nw_histogram_observe(&m->tpot, &nw_scale_tpot, tpot);
		}
	}
	if (r->ok)
		nw_histogram_observe(&m->e2e, &nw_scale_e2e, total);
	nw_demand_end(r->serve->demand, &r->demand, now * 1000, r->ok, tokens);
	if (nw_access_log_enabled()) {
		struct nw_access_record rec = {
			.request_id = r->id,
			.route = nw_request_path_for_route(r->route),
			.model = r->parsed.model,
			.stream = r->parsed.stream,
			.status = (int)status,
			.error_code = r->ok ? NULL : nw_outcome_codes[r->answer_code],
			.prompt_tokens = r->usage_prompt >= 0 ? r->usage_prompt
			                 : r->prompt_tokens_exact ? (int64_t)r->prompt_tokens : -1,
			.output_tokens = tokens,
			.queue_s = r->queue_s,
			.ttft_s = ttft,
			.tpot_s = tpot,
			.total_s = total,
			.prefill_engine = engine_id(r, r->last_prefill),
			.decode_engine = engine_id(r, r->last_decode),
			.attempts = r->last_prefill >= 0 || r->last_decode >= 0 ? r->attempt + 1 : 0,
		};

		nw_access_log(&rec);
	}
}

/* --- the handler and MHD's completion -------------------------------- */

enum MHD_Result
nw_request_on_handler(struct nw_request *r, const char *upload, size_t *upload_size)
{
	struct nw_serve *s = r->serve;

	if (*upload_size > 0) {
		size_t n = *upload_size;

		*upload_size = 0;
		if (r->state != NW_REQ_READING)
			return MHD_YES; /* already answered: discard */
		if (r->body_in->len + n > s->cfg->serving.max_request_bytes) {
			/* A chunked body has no length to refuse up front, and MHD
			 * takes no answer mid-body: the server sends the 413 and
			 * closes now rather than read the rest (docs/api.md). */
			struct nw_client_error err;
			json_t *body;
			enum MHD_Result ret;

			s->metrics->counters.too_large++;
			nw_log(NARWHAL_LOG_INFO, "request_too_large", "request_id", r->id, NULL);
			nw_client_error_too_large(&err, s->cfg->serving.max_request_bytes);
			nw_request_finish(r, false);
			r->resp_status = err.status;
			r->answer_code = nw_outcome_code_index(err.code);
			body = nw_http_error_body(err.type, err.code, NULL, err.message);
			ret = nw_http_server_refuse(r->conn, err.status, body, r->id);
			json_decref(body);
			return ret;
		}
		g_string_append_len(r->body_in, upload, (gssize)n);
		return MHD_YES;
	}
	if (r->response_queued)
		return MHD_YES;
	if (r->state == NW_REQ_READING)
		nw_phase_begin(r);
	/* A stream is answered once committed, a body once decided. */
	if (r->state >= NW_REQ_STREAMING)
		return queue_answer(r);
	nw_request_suspend(r);
	return MHD_YES;
}

void
nw_request_on_completed(struct nw_request *r, enum MHD_RequestTerminationCode why)
{
	struct nw_serve *s = r->serve;

	if (nw_log_enabled(NARWHAL_LOG_DEBUG)) {
		char code[8];

		g_snprintf(code, sizeof code, "%d", (int)why);
		nw_log(NARWHAL_LOG_DEBUG, "request_done", "request_id", r->id, "termination", code,
		       "outcome", nw_request_decided(r) ? (r->ok ? "ok" : "failed") : "open", NULL);
	}
	/* A stream whose terminator went out is a success even if the
	 * engine's transfer has not quite ended. */
	if (!nw_request_decided(r) && r->relay.done && why == MHD_REQUEST_TERMINATED_COMPLETED_OK)
		nw_request_finish(r, true);
	if (!nw_request_decided(r)) {
		if (!r->client_gone && why != MHD_REQUEST_TERMINATED_COMPLETED_OK) {
			r->client_gone = true;
			s->metrics->counters.client_disconnects++;
			nw_log(NARWHAL_LOG_INFO, "client_disconnected", "request_id", r->id, NULL);
		}
		nw_request_fail(r, NW_FAIL_CLIENT, 0, "the client left");
	}
	release_all(r);
	record_end(r);
	nw_request_set_state(r, NW_REQ_DONE);
	r->conn = NULL;
	r->suspended = false;
	g_queue_unlink(&s->requests, &r->link);
	s->retained--;
	nw_request_unref(r);
}
