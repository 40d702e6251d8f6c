/*
 * One engine call of a request (tokenise, prefill, decode or aggregate) on
 * the serving pool: wait FIFO for a pool connection (engine.pool_timeout_s,
 * kept by the request's timer), send with engine.connect_timeout_s and the
 * request's X-Request-Id, then either collect the body (bounded by
 * serving.max_response_bytes) or, for the 2xx stream of a decode or
 * aggregate leg, hand the bytes as they come to the relay (a streamed
 * request) or to the collector (a non-streamed one).
 */
#include "build-config.h"

#include <string.h>

#include "core/log.h"
#include "serve/request.h"
#include "serve/phases.h"
#include "serve/serve-internal.h"

/* Error bodies are kept only to be classified and quoted. */
#define ERROR_BODY_MAX (64u << 10)

static void
on_pool_granted(void *data)
{
	struct nw_request *r = data;

	/* Only record: releasing code must never re-enter another request. */
	r->wake |= NW_WAKE_POOL;
	nw_timer_set(r->serve->timers, &r->timer, 0);
}

/* Whether the leg asked the engine for a stream (phases.c builds it so). */
static bool
leg_streams(const struct nw_request *r)
{
	return (r->leg.kind == NW_LEG_DECODE || r->leg.kind == NW_LEG_AGGREGATE) &&
	       nw_phase_streams(r);
}

/* The leg is the decode leg of a pair whose prefill leg runs beside it. */
static bool
concurrent_decode(const struct nw_request *r)
{
	return r->leg.kind == NW_LEG_DECODE && nw_phase_pair_concurrent(r);
}

/* Why a 2xx answer to a stream leg cannot be read as one (docs/api.md,
 * "Event data that is not JSON"), or NULL: a Content-Type other than
 * text/event-stream (a JSON body, a web page) or a content coding. An
 * answer without a Content-Type is taken as the stream asked for. */
static const char *
not_a_stream(struct nw_upstream_call *call)
{
	static const char sse[] = "text/event-stream";
	const char *type = call != NULL ? nw_upstream_header(call, "Content-Type") : NULL;
	const char *coding = call != NULL ? nw_upstream_header(call, "Content-Encoding") : NULL;

	if (type != NULL) {
		type += strspn(type, " \t");
		if (g_ascii_strncasecmp(type, sse, sizeof sse - 1) != 0 ||
		    (type[sizeof sse - 1] != '\0' && strchr("; \t", type[sizeof sse - 1]) == NULL))
			return "the engine answered the stream it was asked for with another "
			       "Content-Type";
	}
	if (coding != NULL && coding[strspn(coding, " \t")] != '\0' &&
	    g_ascii_strcasecmp(coding + strspn(coding, " \t"), "identity") != 0)
		return "the engine answered the stream it was asked for with a Content-Encoding";
	return NULL;
}

static void
on_response(void *data, long status)
{
	struct nw_request *r = data;
	struct nw_serve *s = r->serve;

	r->leg.status = status;
	if (status >= 200 && status < 300)
		s->metrics->counters.engine_status_2xx++;
	else if (status >= 400 && status < 500)
		s->metrics->counters.engine_status_4xx++;
	else if (status >= 500)
		s->metrics->counters.engine_status_5xx++;
	if (status < 200 || status >= 300 || !leg_streams(r))
		return;
	{
		const char *why = not_a_stream(r->leg.call);

		if (why != NULL) {
			nw_request_fail_engine(r, NW_FAIL_BAD_RESPONSE, status, why, NULL);
			return;
		}
	}
	if (!r->parsed.stream) {
		r->leg.collecting = true;
		nw_collect_begin(r);
		return;
	}
	r->leg.relaying = true;
	nw_relay_begin(r);
	/* An aggregate stream commits on the engine's 200: before it, a
	 * failure can still be retried. With serving.stream_commit
	 * first_event every stream waits for its first event (relay.c). A
	 * concurrent pair's decode engine answers 200 before its prefill
	 * engine is done: that pair commits on the prefill's answer (pair.c). */
	if (!nw_request_streaming(r) && !concurrent_decode(r) &&
	    s->cfg->serving.stream_commit == NW_STREAM_COMMIT_BEFORE_DECODE)
		nw_request_commit_stream(r);
}

static bool
on_data(void *data, const char *bytes, size_t len)
{
	struct nw_request *r = data;
	struct nw_leg *leg = &r->leg;
	size_t bound;

	r->serve->metrics->engine_bytes_in += len;
	/* The engine generates: not stalled (docs/recovery.md). */
	if (leg->kind != NW_LEG_TOKENIZE)
		r->serve->fleet->stats[leg->engine].progress++;
	if (leg->relaying || leg->collecting) {
		r->last_chunk_us = r->last_chunk_us >= 0 ? g_get_monotonic_time() : -1;
		return leg->relaying ? nw_relay_feed(r, bytes, len) : nw_collect_feed(r, bytes, len);
	}
	bound = leg->status >= 200 && leg->status < 300 ? r->serve->cfg->serving.max_response_bytes
	                                                : ERROR_BODY_MAX;
	if (leg->collected->len + len > bound) {
		/* An error body is only read for its class: its start will do. */
		if (leg->status >= 200 && leg->status < 300)
			leg->overflow = true;
		else if (leg->collected->len < bound)
			g_string_append_len(leg->collected, bytes, (gssize)(bound - leg->collected->len));
		if (leg->overflow) {
			nw_request_fail(r, NW_FAIL_TOO_LARGE, leg->status,
			                "the engine's answer is larger than serving.max_response_bytes");
		}
		return true;
	}
	g_string_append_len(leg->collected, bytes, (gssize)len);
	return true;
}

/* Generation legs out on each engine, for the monitor's stall check
 * (docs/recovery.md). A leg waiting for a connection of ours is not out,
 * and tokenise legs do not count: a hung engine may still tokenise. */
static void
leg_out(struct nw_serve *s, const struct nw_leg *leg)
{
	if (leg->kind != NW_LEG_TOKENIZE)
		s->fleet->stats[leg->engine].legs_out++;
}

static void
leg_back(struct nw_serve *s, const struct nw_leg *leg)
{
	if (leg->kind != NW_LEG_TOKENIZE)
		s->fleet->stats[leg->engine].legs_out--;
}

int64_t
nw_leg_note_call(struct nw_serve *s, uint32_t engine, nw_call_kind kind, int64_t started_us)
{
	struct nw_engine_stats *st = &s->fleet->stats[engine];
	int64_t now = g_get_monotonic_time();
	double took = (double)(now - started_us) / 1e6;

	st->calls[kind]++;
	st->call_seconds[kind] += took;
	nw_histogram_observe(&s->metrics->calls[kind], &nw_scale_call, took);
	return now;
}

static void
on_done(void *data, const struct nw_upstream_result *res)
{
	struct nw_request *r = data;
	struct nw_leg *leg = &r->leg;
	int64_t now;

	leg->call = NULL; /* freed by upstream right after this */
	leg_back(r->serve, leg);
	now = nw_leg_note_call(r->serve, leg->engine, nw_leg_call_kind(leg->kind), leg->started_us);
	/* The handoff runs from here to the decode call (docs/metrics.md). */
	if (leg->kind == NW_LEG_PREFILL)
		r->prefill_end_us = now;
	nw_request_on_leg_done(r, res);
}

static const struct nw_upstream_handlers leg_handlers = {
	.on_response = on_response,
	.on_data = on_data,
	.on_done = on_done,
};

static void
send_call(struct nw_request *r)
{
	struct nw_serve *s = r->serve;
	struct nw_leg *leg = &r->leg;
	struct nw_upstream_request req = {
		.method = "POST",
		.url = leg->url,
		.request_id = r->id,
		.owned_body = leg->body,
		.body_len = leg->body_len,
		.connect_timeout_ms = (long)(s->cfg->engine.connect_timeout_s * 1000.0 + 0.5),
	};

	if (req.connect_timeout_ms < 1)
		req.connect_timeout_ms = 1;
	if (leg->body == NULL)
		req.method = "GET";
	leg->started_us = g_get_monotonic_time();
	s->metrics->engine_bytes_out += leg->body_len;
	if (leg->kind == NW_LEG_DECODE && r->prefill_end_us >= 0) {
		nw_histogram_observe(&s->metrics->handoff, &nw_scale_handoff,
		                     (double)(leg->started_us - r->prefill_end_us) / 1e6);
		r->prefill_end_us = -1;
	}
	leg->call = nw_upstream_start(s->serving_pool, &req, &leg_handlers, r);
	/* The call took the body, started or not. */
	leg->body = NULL;
	leg->body_len = 0;
	if (leg->call == NULL) {
		nw_request_fail(r, NW_FAIL_INTERNAL, 0, "could not start an engine call");
		return;
	}
	leg_out(s, leg);
	/* Spec 4.3: a disaggregated stream commits its 200 before decode
	 * starts, and no earlier: the slot and connection waits and the
	 * handoff check before this can still be retried. serving.stream_commit
	 * first_event holds it until the first event (relay.c). A concurrent
	 * pair's prefill leg is still running: prefill failures are HTTP
	 * errors (spec 4.3), so that pair commits on its answer (pair.c). */
	if (leg->kind == NW_LEG_DECODE && r->parsed.stream && !nw_request_streaming(r) &&
	    !concurrent_decode(r) &&
	    s->cfg->serving.stream_commit == NW_STREAM_COMMIT_BEFORE_DECODE)
		nw_request_commit_stream(r);
	/* The handoff cap runs from the start of the prefill HTTP request. */
	if (leg->kind == NW_LEG_PREFILL && s->cfg->serving.handoff_timeout_s > 0)
		r->handoff_until_us = leg->started_us +
		                      (int64_t)(s->cfg->serving.handoff_timeout_s * 1e6);
	if (leg->kind == NW_LEG_DECODE)
		r->handoff_until_us = -1; /* the handoff is on its way */
	/* Leg deadlines run from the moment the request goes out; the pool
	 * wait before it has its own bound. */
	if (leg->kind == NW_LEG_TOKENIZE) {
		r->phase = NW_PT_TOKENIZE;
		r->phase_until_us = leg->started_us + (int64_t)(s->cfg->engine.tokenize_timeout_s * 1e6);
	} else if (leg->kind == NW_LEG_PREFILL) {
		r->phase = NW_PT_PREFILL;
		r->phase_until_us = leg->started_us + (int64_t)(s->cfg->serving.prefill_timeout_s * 1e6);
	}
	nw_request_rearm(r);
}

void
nw_leg_start(struct nw_request *r, nw_leg_kind kind, uint32_t engine,
             struct narwhal_http_call *call)
{
	struct nw_serve *s = r->serve;
	struct nw_leg *leg = &r->leg;
	const char *base = s->cfg->fleet.engines[engine].url;

	nw_leg_release(r);
	leg->kind = kind;
	leg->engine = engine;
	leg->status = 0;
	leg->relaying = false;
	leg->collecting = false;
	leg->overflow = false;
	leg->started_us = -1;
	/* 255 gives a 512-byte buffer: glibc serves requests under 1 KiB
	 * without first consolidating its fast bins, which at this rate was
	 * 1% of a request's CPU. It grows when an answer is longer. */
	if (leg->collected == NULL)
		leg->collected = g_string_sized_new(255);
	g_string_truncate(leg->collected, 0);
	leg->url = g_strconcat(base, call->path, NULL);
	if ((call->flags & NARWHAL_CALL_CLIENT_BODY) && call->body == r->parsed.body) {
		/* The dialect sends the client's body unchanged: its bytes as
		 * they came. */
		leg->body = g_memdup2(r->body_in->str, r->body_in->len);
		leg->body_len = r->body_in->len;
		json_decref(call->body);
		call->body = NULL;
	} else if (call->body != NULL) {
		leg->body = nw_json_dumps(call->body, JSON_COMPACT, &leg->body_len);
		json_decref(call->body);
		call->body = NULL;
		if (leg->body == NULL) {
			nw_request_fail(r, NW_FAIL_INTERNAL, 0, "could not encode the engine request");
			return;
		}
	}
	if (nw_resource_try(&s->pool)) {
		leg->holds_pool = true;
		send_call(r);
		return;
	}
	/* Sizing never waits for a connection: the character estimate is
	 * there for exactly this. */
	if (kind == NW_LEG_TOKENIZE) {
		nw_leg_release(r);
		nw_phase_size_by_chars(r);
		return;
	}
	/* Every connection is busy: wait FIFO for one, engine.pool_timeout_s. */
	nw_waiter_init(&leg->pool_wait, on_pool_granted, r);
	leg->pool_wait.order = r->arrival_us;
	nw_resource_wait(&s->pool, &leg->pool_wait);
	r->phase = NW_PT_POOL;
	r->phase_until_us = g_get_monotonic_time() + (int64_t)(s->cfg->engine.pool_timeout_s * 1e6);
	nw_request_rearm(r);
}

void
nw_leg_pool_granted(struct nw_request *r)
{
	struct nw_leg *leg = &r->leg;

	if (!leg->pool_wait.granted || leg->kind == NW_LEG_NONE)
		return;
	leg->pool_wait.granted = false;
	leg->holds_pool = true;
	if (r->phase == NW_PT_POOL)
		r->phase = NW_PT_NONE;
	send_call(r);
}

void
nw_leg_cancel(struct nw_request *r)
{
	struct nw_serve *s = r->serve;
	struct nw_leg *leg = &r->leg;

	if (leg->call != NULL) {
		nw_upstream_cancel(leg->call);
		leg->call = NULL;
		leg_back(s, leg);
	}
	nw_resource_leave(&s->pool, &leg->pool_wait);
	if (leg->pool_wait.granted) {
		/* Handed a connection while on its way out: pass it on. */
		leg->pool_wait.granted = false;
		leg->holds_pool = true;
	}
	if (leg->holds_pool) {
		leg->holds_pool = false;
		nw_resource_release(&s->pool);
	}
	if (r->phase == NW_PT_POOL)
		r->phase = NW_PT_NONE;
	leg->relaying = false;
	leg->collecting = false;
}

void
nw_leg_release(struct nw_request *r)
{
	struct nw_leg *leg = &r->leg;

	nw_leg_cancel(r);
	g_free(leg->url);
	leg->url = NULL;
	free(leg->body);
	leg->body = NULL;
	leg->body_len = 0;
	leg->kind = NW_LEG_NONE;
}
