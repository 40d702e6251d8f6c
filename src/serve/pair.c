#include "build-config.h"

#include "serve/pair.h"

#include <string.h>

#include "core/log.h"
#include "serve/phases.h"
#include "serve/request.h"
#include "serve/serve-internal.h"

/* Only an error answer is kept, and only its start. */
#define PAIR_ERROR_MAX (16u << 10)

#define BIT(st) (1u << (st))

static const unsigned legal_next[NW_PAIR_N_STATES] = {
	[NW_PAIR_IDLE] = BIT(NW_PAIR_OUT),
	[NW_PAIR_OUT] = BIT(NW_PAIR_IDLE) | BIT(NW_PAIR_HOLDING),
	[NW_PAIR_HOLDING] = BIT(NW_PAIR_IDLE),
};

bool
nw_pair_transition_legal(nw_pair_state from, nw_pair_state to)
{
	return from < NW_PAIR_N_STATES && to < NW_PAIR_N_STATES && (legal_next[from] & BIT(to));
}

/* The one way pair.state changes. Leaving HOLDING drops the held failure. */
static void
set_state(struct nw_pair_leg *p, nw_pair_state next)
{
	g_return_if_fail(nw_pair_transition_legal(p->state, next));
	if (p->state == NW_PAIR_HOLDING)
		g_clear_pointer(&p->held_message, g_free);
	p->state = next;
}

/* A refusal of the client's own request: the client gets a 4xx for it
 * (request.c, failure_answer). */
static bool
client_error(nw_fail_kind kind, long engine_status)
{
	return kind == NW_FAIL_CONTEXT || nw_fail_passes_on(kind, engine_status);
}

bool
nw_pair_holds(nw_fail_kind kind, long engine_status)
{
	switch (kind) {
	case NW_FAIL_TRANSPORT:
	case NW_FAIL_STATUS:
	case NW_FAIL_PERMANENT:
	case NW_FAIL_BAD_RESPONSE:
	case NW_FAIL_TOO_LARGE:
	case NW_FAIL_FIRST_TOKEN:
	case NW_FAIL_READ_GAP:
		return !client_error(kind, engine_status);
	case NW_FAIL_CONNECT:
		/* The decode engine never had the request: its failure is its
		 * own, and holding it would only delay the retry elsewhere. */
		return false;
	default:
		return false; /* Narwhal's own ends, or not a decode leg's */
	}
}

/* Whether a failure can be the prefill leg's answer (on_done below). */
static bool
prefill_failure(nw_fail_kind kind)
{
	switch (kind) {
	case NW_FAIL_TRANSPORT:
	case NW_FAIL_CONNECT:
	case NW_FAIL_STATUS:
	case NW_FAIL_PERMANENT:
	case NW_FAIL_CONTEXT:
	case NW_FAIL_BAD_RESPONSE:
	case NW_FAIL_PREFILL_TIMEOUT:
		return true;
	default:
		return false;
	}
}

/* Decide with the held decode failure, as it would have been decided had
 * the prefill leg not been out (its engine blamed, retried or answered). */
static void
replay_held(struct nw_request *r)
{
	struct nw_pair_leg *p = &r->pair;
	g_autofree char *message = g_steal_pointer(&p->held_message);

	r->fault_engine = p->held_fault_engine;
	set_state(p, NW_PAIR_IDLE);
	nw_request_fail(r, p->held_kind, p->held_status, message);
}

static void
on_response(void *data, long status)
{
	struct nw_request *r = data;

	r->pair.status = status;
}

static bool
on_data(void *data, const char *bytes, size_t len)
{
	struct nw_request *r = data;
	struct nw_pair_leg *p = &r->pair;

	if (p->status >= 200 && p->status < 300)
		return true; /* a success says nothing the decode leg needs */
	if (p->error_body->len < PAIR_ERROR_MAX)
		g_string_append_len(p->error_body, bytes,
		                    (gssize)MIN(len, PAIR_ERROR_MAX - p->error_body->len));
	return true;
}

static void
on_done(void *data, const struct nw_upstream_result *res)
{
	struct nw_request *r = data;
	struct nw_serve *s = r->serve;
	struct nw_pair_leg *p = &r->pair;
	int64_t now;

	p->call = NULL; /* freed by upstream right after this */
	now = nw_leg_note_call(s, p->engine, NW_CALL_PREFILL, p->started_us);
	/* A held decode failure is decided below, with this answer. */
	if (p->state == NW_PAIR_OUT)
		set_state(p, NW_PAIR_IDLE);
	if (nw_request_decided(r))
		return;
	if (res->code == NW_UPSTREAM_OK && p->status >= 200 && p->status < 300) {
		/* The engine has its KV on the way: its prefill slot is free. */
		if (r->prefill_engine >= 0)
			nw_phase_prefill_done(r, now);
		/* The decode leg's first-token clock starts now, unless its
		 * first token came first (phases.c). */
		if (r->ft_until_us == NW_FT_AFTER_PREFILL) {
			r->ft_until_us = nw_phase_first_token_due(r, now);
			nw_request_rearm(r);
		}
		/* The decode leg failed first, and not for want of this prefill. */
		if (p->state == NW_PAIR_HOLDING) {
			replay_held(r);
			return;
		}
		/* Spec 4.3: the prefill is done and decode starts, so a stream
		 * commits its 200 now (leg.c holds it while the prefill runs, so
		 * that a prefill failure is an HTTP error). */
		if (r->parsed.stream && !nw_request_streaming(r) &&
		    s->cfg->serving.stream_commit == NW_STREAM_COMMIT_BEFORE_DECODE)
			nw_request_commit_stream(r);
		return;
	}
	/* A failure: with a decode failure held, nw_pair_on_failure decides
	 * which of the two the client gets. */
	r->fault_engine = (int32_t)p->engine;
	if (res->code == NW_UPSTREAM_TIMEOUT) {
		s->metrics->counters.prefill_timeouts++;
		nw_request_fail_engine(r, NW_FAIL_PREFILL_TIMEOUT, 0, res->error, NULL);
		return;
	}
	if (res->code != NW_UPSTREAM_OK) {
		s->metrics->counters.prefill_failed_transport++;
		nw_request_fail_engine(r, res->code == NW_UPSTREAM_BAD_RESPONSE ? NW_FAIL_BAD_RESPONSE
		                          : res->code == NW_UPSTREAM_CONNECT  ? NW_FAIL_CONNECT
		                                                              : NW_FAIL_TRANSPORT,
		                       0, res->error, NULL);
		return;
	}
	s->metrics->counters.prefill_failed_status++;
	nw_phase_fail_by_status(r, nw_serve_dialect(s, p->engine), p->status, p->error_body);
}

static const struct nw_upstream_handlers pair_handlers = {
	.on_response = on_response,
	.on_data = on_data,
	.on_done = on_done,
};

bool
nw_pair_start(struct nw_request *r, uint32_t engine, struct narwhal_http_call *call)
{
	struct nw_serve *s = r->serve;
	struct nw_pair_leg *p = &r->pair;
	g_autofree char *url = g_strconcat(s->dialects[engine].ref.url, call->path, NULL);
	char *body = NULL;
	struct nw_upstream_request req = {
		.method = call->method != NULL ? call->method : "POST",
		.url = url,
		.request_id = r->id,
		.connect_timeout_ms = MAX(1, (long)(s->cfg->engine.connect_timeout_s * 1000.0 + 0.5)),
		/* The whole prefill leg is bounded like a sequential one. */
		.timeout_ms = MAX(1, (long)(s->cfg->serving.prefill_timeout_s * 1000.0 + 0.5)),
	};

	nw_pair_release(r);
	if ((call->flags & NARWHAL_CALL_CLIENT_BODY) && call->body == r->parsed.body) {
		body = g_memdup2(r->body_in->str, r->body_in->len);
		req.body_len = r->body_in->len;
	} else if (call->body != NULL) {
		body = nw_json_dumps(call->body, JSON_COMPACT, &req.body_len);
	}
	json_decref(call->body);
	call->body = NULL;
	req.owned_body = body;
	p->engine = engine;
	p->status = 0;
	set_state(p, NW_PAIR_OUT);
	if (p->error_body == NULL)
		p->error_body = g_string_new(NULL);
	g_string_truncate(p->error_body, 0);
	s->metrics->counters.prefill_started++;
	s->metrics->engine_bytes_out += req.body_len;
	p->started_us = g_get_monotonic_time();
	p->call = nw_upstream_start(s->serving_pool, &req, &pair_handlers, r);
	if (p->call == NULL) {
		set_state(p, NW_PAIR_IDLE);
		nw_request_fail(r, NW_FAIL_INTERNAL, 0, "could not start an engine call");
		return false;
	}
	return true;
}

bool
nw_pair_on_failure(struct nw_request *r, nw_fail_kind kind, long engine_status,
                   const char *message)
{
	struct nw_pair_leg *p = &r->pair;

	if (p->state == NW_PAIR_HOLDING) {
		/* The decode leg is gone: an engine failure now is the prefill
		 * leg's answer. Its refusal of the client's request is what the
		 * client gets (spec 4.3); any other failure of it leaves the
		 * decode leg's failure to decide, as if it had been alone. A
		 * failure of ours (the deadline, a stop) decides by itself. */
		if (prefill_failure(kind) && !client_error(kind, engine_status)) {
			replay_held(r);
			return true;
		}
		set_state(p, NW_PAIR_IDLE);
		return false;
	}
	if (p->state != NW_PAIR_OUT || r->leg.kind != NW_LEG_DECODE ||
	    nw_request_streaming(r) || !nw_pair_holds(kind, engine_status))
		return false;
	/* The decode leg failed while the prefill leg is out: hold its
	 * failure until the prefill engine answers, for at most
	 * engine.first_token_timeout_s (nw_pair_hold_expired), within the
	 * prefill leg's bound and the request's deadline. An engine refuses a
	 * request as it arrives; a prefill engine still busy after that is
	 * not refusing it. The decode leg's call and connection go now; its
	 * kind and engine stay, for the failure. */
	p->held_kind = kind;
	p->held_status = engine_status;
	p->held_message = g_strdup(message);
	p->held_fault_engine = r->fault_engine;
	set_state(p, NW_PAIR_HOLDING);
	nw_leg_cancel(r);
	r->ft_until_us = nw_phase_first_token_due(r, g_get_monotonic_time());
	r->last_chunk_us = -1;
	r->stall_until_us = -1;
	r->serve->metrics->counters.pair_decode_held++;
	nw_log(NARWHAL_LOG_INFO, "pair_decode_failure_held", "request_id", r->id, "detail",
	       message, NULL);
	nw_request_rearm(r);
	return true;
}

bool
nw_pair_hold_expired(struct nw_request *r)
{
	if (r->pair.state != NW_PAIR_HOLDING)
		return false;
	replay_held(r);
	return true;
}

void
nw_pair_release(struct nw_request *r)
{
	struct nw_pair_leg *p = &r->pair;

	if (p->call != NULL) {
		nw_upstream_cancel(p->call);
		p->call = NULL;
	}
	if (p->state != NW_PAIR_IDLE)
		set_state(p, NW_PAIR_IDLE);
}

void
nw_pair_clear(struct nw_pair_leg *p)
{
	if (p->call != NULL)
		nw_upstream_cancel(p->call);
	if (p->error_body != NULL)
		g_string_free(p->error_body, TRUE);
	g_free(p->held_message);
	memset(p, 0, sizeof *p);
}
