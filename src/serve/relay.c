/*
 * The client side of a streamed answer (spec 4.3). Engine bytes are relayed
 * as the engine sent them, but only in whole events: the SSE framer marks
 * where events end, bytes up to there are released to the client and a
 * partial event waits for its end. So an error event that Narwhal adds
 * after a failure always starts on an event boundary.
 *
 * Events are parsed with the dialect only to find the first generated
 * token, in-band errors and the success terminator. The client's
 * stream ends after the terminator once the engine's transfer is complete
 * (so its connection is kept for reuse). After an
 * engine's error event nothing more is relayed (its [DONE] included): a
 * failed stream ends with an error event and without the terminator.
 *
 * The buffer is bounded, in two steps. Past RELAY_BACKLOG_MAX unsent
 * bytes, while MHD is not asking for more, the engine is read no more:
 * what it sends waits in the socket (kernel memory, as with nginx's
 * unbuffered proxying), and the buffer stays small. A client that then
 * takes nothing for RELAY_STALL_US gets the engine read again, up to
 * RELAY_BACKLOG_HARD: the room a stream always had. Past that bound the
 * engine transfer pauses for good (the libcurl client, which cannot stop
 * between reads, gets only this step); a client that then takes nothing
 * for RELAY_STALL_US is closed at once, and the engine leg cancelled (spec
 * 4.3: backpressure closes). The short grace tells a stuck client from an
 * engine burst that arrived within one loop iteration, before MHD could
 * write. The buffer grows only as far as the backlog needs and shrinks
 * back once drained, so an open stream waiting for its next token holds a
 * few KiB.
 */
#include "build-config.h"

#include <string.h>

#include "core/log.h"
#include "serve/request.h"
#include "serve/phases.h"
#include "serve/serve-internal.h"

/* Unsent bytes past which the engine is read no more for now. The bytes
 * its client had already read still come in: one read buffer (16 KiB)
 * more. */
#define RELAY_BACKLOG_MAX (8u << 10)
/* Unsent bytes past which bytes are refused and the stall ends in a
 * close. */
#define RELAY_BACKLOG_HARD (64u << 10)
#define RELAY_STALL_US (200 * 1000)
/* The buffer's size at rest, and the step it grows by. */
#define RELAY_REST (4u << 10)
/* The block libmicrohttpd allocates (and zeroes) with each response. A
 * chunked answer never uses it: the reader fills the connection's own
 * write buffer. Only an HTTP/1.0 client, whose stream ends with the
 * connection, is sent from it, a block per send. */
#define RELAY_BLOCK 1024u

static bool on_event(void *data, const char *payload, size_t len);

bool
nw_event_skipped(struct nw_request *r, bool after_first_token, const char *payload, size_t len,
                 struct narwhal_sse_event *ev)
{
	const struct nw_dialect *d = nw_serve_dialect(r->serve, r->leg.engine);

	*ev = (struct narwhal_sse_event){
		.struct_size = sizeof *ev, .kind = NARWHAL_SSE_TOKENS,
		.prompt_tokens = -1, .completion_tokens = -1,
	};
	/* The dialect says which events may matter; without sniff_sse every
	 * event is parsed. */
	return after_first_token && d->ops->sniff_sse != NULL &&
	       !d->ops->sniff_sse(d->ctx, payload, len);
}

nw_event_reading
nw_event_parse(struct nw_request *r, const char *payload, size_t len, const json_t *doc,
               struct narwhal_sse_event *ev)
{
	const struct nw_dialect *d = nw_serve_dialect(r->serve, r->leg.engine);
	int rc;

	ev->kind = NARWHAL_SSE_OTHER;
	rc = doc != NULL && d->ops->parse_sse_json != NULL ?
	     d->ops->parse_sse_json(d->ctx, doc, payload, len, ev) :
	     d->ops->parse_sse(d->ctx, payload, len, ev);
	/* Decode event data that the dialect cannot read (not JSON, not
	 * UTF-8) is never passed on as a success (docs/api.md). */
	if (rc != 0)
		return NW_EVENT_BAD;
	/* The engine's usage, for the access log (the last one wins). */
	if (ev->completion_tokens >= 0)
		r->usage_completion = ev->completion_tokens;
	if (ev->prompt_tokens >= 0)
		r->usage_prompt = ev->prompt_tokens;
	return NW_EVENT_PARSED;
}

nw_event_reading
nw_event_read(struct nw_request *r, bool after_first_token, const char *payload, size_t len,
              struct narwhal_sse_event *ev)
{
	if (nw_event_skipped(r, after_first_token, payload, len, ev))
		return NW_EVENT_SKIPPED;
	return nw_event_parse(r, payload, len, NULL, ev);
}

void
nw_relay_init(struct nw_relay *rl, size_t max_event)
{
	memset(rl, 0, sizeof *rl);
	rl->cap = RELAY_REST;
	rl->buf = g_malloc(rl->cap);
	nw_sse_init(&rl->sse, on_event, NULL);
	nw_sse_set_max_event(&rl->sse, max_event);
	nw_chunk_shape_init(&rl->shape);
}

void
nw_relay_begin(struct nw_request *r)
{
	struct nw_relay *rl = &r->relay;

	if (nw_request_streaming(r))
		return;
	/* Whatever an earlier attempt left before the 200 was never sent. */
	nw_sse_reset(&rl->sse);
	rl->len = rl->sent = rl->committed = rl->chunk_base = 0;
	rl->first_token = rl->engine_error = rl->done = rl->finished = false;
	rl->abort = rl->paused = rl->refused = rl->absorbing = false;
}

void
nw_relay_clear(struct nw_relay *rl)
{
	g_free(rl->buf);
	nw_sse_clear(&rl->sse);
	nw_chunk_shape_clear(&rl->shape);
	memset(rl, 0, sizeof *rl);
}

static size_t
unsent(const struct nw_relay *rl)
{
	return rl->committed - rl->sent;
}

/* Appends bytes. The bytes already sent make room first; the buffer grows
 * only when that is not enough: to the next RELAY_REST step, or by half
 * again past RELAY_BACKLOG_HARD (only an event still incomplete grows it
 * that far, up to serving.max_response_bytes, and it is then not copied
 * whole at every read). */
static void
append(struct nw_relay *rl, const void *bytes, size_t n)
{
	if (rl->len + n > rl->cap && rl->sent > 0) {
		memmove(rl->buf, rl->buf + rl->sent, rl->len - rl->sent);
		rl->len -= rl->sent;
		rl->committed -= rl->sent;
		rl->sent = 0;
	}
	if (rl->len + n > rl->cap) {
		size_t want = rl->len + n;

		if (rl->cap >= RELAY_BACKLOG_HARD)
			want = MAX(want, rl->cap + rl->cap / 2);
		rl->cap = (want + RELAY_REST - 1) / RELAY_REST * RELAY_REST;
		rl->buf = g_realloc(rl->buf, rl->cap);
	}
	memcpy(rl->buf + rl->len, bytes, n);
	rl->len += n;
}

/* The engine waits for the client: the stall clock starts. */
static void
pause_engine(struct nw_request *r)
{
	r->relay.paused = true;
	r->stall_until_us = g_get_monotonic_time() + RELAY_STALL_US;
	nw_request_rearm(r);
}

bool
nw_relay_stalled(struct nw_request *r)
{
	struct nw_relay *rl = &r->relay;

	if (rl->refused || rl->absorbing)
		return true;
	/* Stopped before the hard bound: the engine is read again up to it,
	 * so a client that pauses briefly is treated as it always was. */
	rl->absorbing = true;
	rl->paused = false;
	r->stall_until_us = -1;
	if (r->leg.call != NULL)
		nw_upstream_unpause(r->leg.call);
	return false;
}

/*
 * One whole event from the engine: decide whether the client gets it.
 * Every event is checked to be readable before it is released: a token
 * event that has the shape of the last token event parsed (the same bytes
 * around one valid string, chunk-shape.h) is valid JSON without a parse,
 * and the rest go through the dialect.
 */
static bool
on_event(void *data, const char *payload, size_t len)
{
	struct nw_request *r = data;
	struct nw_relay *rl = &r->relay;
	size_t end = rl->chunk_base + rl->sse.boundary;
	struct narwhal_sse_event ev;
	size_t before = rl->committed;

	if (rl->first_token && nw_chunk_shape_match(&rl->shape, payload, len, NULL, NULL)) {
		rl->committed = end;
		r->token_events++;
		return true; /* a token: relayed as it is */
	}
	if (nw_event_read(r, false, payload, len, &ev) == NW_EVENT_BAD) {
		rl->bad_event = true; /* nw_relay_feed fails the leg */
		return false;
	}
	/* The event is released up to the blank line that ended it. */
	rl->committed = end;
	if (ev.kind == NARWHAL_SSE_ERROR) {
		/* The engine's own words stay out of the client's stream (they
		 * may name addresses and paths): the failure adds Narwhal's
		 * error event instead, or retries before the 200 is committed. */
		rl->committed = before;
		rl->engine_error = true;
		nw_phase_fail_in_band(r, &ev, payload, len);
		return false; /* nothing after it */
	}
	/* serving.stream_commit first_event: the decode engine's first event
	 * commits the 200 (docs/configuration.md). */
	if (r->state == NW_REQ_DECODE)
		nw_request_commit_stream(r);
	switch (ev.kind) {
	case NARWHAL_SSE_TOKENS:
		r->token_events++;
		if (!rl->first_token) {
			rl->first_token = true;
			nw_request_on_first_token(r);
		}
		if (!nw_chunk_shape_learn(&rl->shape, payload, len,
		                          r->route == NARWHAL_ROUTE_CHAT_COMPLETIONS ? "content"
		                                                                     : "text",
		                          NULL))
			nw_chunk_shape_reset(&rl->shape);
		break;
	case NARWHAL_SSE_ERROR:
		break; /* above */
	case NARWHAL_SSE_DONE:
		rl->done = true;
		return false;
	case NARWHAL_SSE_USAGE:
	case NARWHAL_SSE_OTHER:
		break;
	}
	return true;
}

bool
nw_relay_feed(struct nw_request *r, const char *bytes, size_t len)
{
	struct nw_relay *rl = &r->relay;
	bool go_on;

	if (rl->finished || rl->done)
		return true; /* after the terminator or an error: ignore */
	if (unsent(rl) > RELAY_BACKLOG_HARD && !r->suspended) {
		if (!rl->paused)
			pause_engine(r);
		rl->refused = true;
		return false;
	}
	append(rl, bytes, len);
	rl->chunk_base = rl->len - len;
	rl->sse.fn_data = r;
	go_on = nw_sse_feed(&rl->sse, bytes, len);
	/* Comment-only events (keep-alives) end on a boundary too. */
	if (go_on && rl->sse.boundary > 0)
		rl->committed = MAX(rl->committed, rl->chunk_base + rl->sse.boundary);
	if (!go_on) {
		/* Drop whatever followed the last event taken. */
		rl->len = rl->committed;
		if (rl->bad_event) {
			nw_request_fail(r, NW_FAIL_BAD_RESPONSE, 0,
			                "the engine's stream has an event that is not valid JSON");
			return true;
		}
		if (rl->sse.overflow && !rl->engine_error && !rl->done) {
			nw_request_fail(r, NW_FAIL_TOO_LARGE, 0,
			                "an event of the engine's stream is larger than "
			                "serving.max_response_bytes");
			return true;
		}
		/* After the terminator the client's stream ends only with the
		 * engine's transfer (nw_relay_end): cutting it short would cost
		 * the engine connection its keep-alive. The read gap and the
		 * deadline bound an engine that never ends it. After an error
		 * event the request has failed already (on_event). */
	}
	if (unsent(rl) > RELAY_BACKLOG_MAX && !r->suspended && !rl->paused && !rl->absorbing &&
	    go_on) {
		pause_engine(r);
		nw_upstream_pause(r->leg.call);
	}
	if (unsent(rl) > 0 && nw_request_streaming(r))
		nw_request_wake_client(r);
	return true;
}

void
nw_relay_error(struct nw_request *r, const char *type, const char *code, const char *message)
{
	struct nw_relay *rl = &r->relay;
	json_t *body;
	char *text;
	size_t len;

	if (rl->finished)
		return;
	rl->len = rl->committed;
	body = nw_http_error_body(type, code, NULL, message);
	text = nw_json_dumps(body, JSON_COMPACT, &len);
	json_decref(body);
	if (text != NULL) {
		append(rl, "data: ", 6);
		append(rl, text, len);
		append(rl, "\n\n", 2);
		free(text);
	}
	rl->committed = rl->len;
	rl->finished = true;
	r->serve->metrics->counters.stream_errors++;
	nw_request_wake_client(r);
}

void
nw_relay_end(struct nw_request *r)
{
	r->relay.finished = true;
	nw_request_wake_client(r);
}

static ssize_t
read_relay(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct nw_request *r = cls;
	struct nw_relay *rl = &r->relay;
	size_t n = MIN(unsent(rl), max);

	if (rl->abort || r->client_gone) {
		/* Under TURBO a resumed connection would otherwise keep its fd
		 * until the connection timeout. */
		nw_http_server_abort(r->conn);
		return MHD_CONTENT_READER_END_WITH_ERROR;
	}
	if (n > 0) {
		bool resumed = false;

		memcpy(buf, rl->buf + rl->sent, n);
		rl->sent += n;
		r->serve->metrics->client_bytes_out[nw_request_metric_route(r)] += n;
		if (unsent(rl) == 0) {
			/* The client has caught up: let the engine go on (the
			 * held bytes come back from the loop, or right here:
			 * net/upstream.h, on_data). Waiting until it has taken
			 * everything makes each pause worth a whole backlog. */
			rl->absorbing = false;
			if (rl->paused) {
				rl->paused = rl->refused = false;
				resumed = true;
				r->stall_until_us = -1;
				/* A paused engine is silent through no fault of its own. */
				if (r->last_chunk_us >= 0)
					r->last_chunk_us = g_get_monotonic_time();
				if (r->leg.call != NULL)
					nw_upstream_unpause(r->leg.call);
			}
		} else if (rl->paused) {
			/* A client that takes bytes is not stuck, however slowly
			 * it drains: the stall clock starts again (the timer
			 * checks it lazily). */
			r->stall_until_us = g_get_monotonic_time() + RELAY_STALL_US;
		}
		if (rl->sent == rl->len) {
			/* Everything went out: start over at the front. What a
			 * backlog grew goes back, unless the engine was just let
			 * go on and is about to fill it again. */
			rl->len = rl->sent = rl->committed = 0;
			if (rl->cap > RELAY_REST && !resumed) {
				rl->cap = RELAY_REST;
				rl->buf = g_realloc(rl->buf, rl->cap);
			}
		}
		return (ssize_t)n;
	}
	if (rl->finished)
		return MHD_CONTENT_READER_END_OF_STREAM;
	/* libmicrohttpd polls a reader that returns 0 without a suspend
	 * (net/http-server.h, the handler contract). */
	nw_request_suspend(r);
	return 0;
}

static void
free_relay_ref(void *cls)
{
	nw_request_unref(cls);
}

struct MHD_Response *
nw_relay_response(struct nw_request *r)
{
	struct MHD_Response *resp;

	resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, RELAY_BLOCK, read_relay, r,
	                                         free_relay_ref);
	if (resp == NULL)
		return NULL;
	r->refs++;
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
	MHD_add_response_header(resp, "X-Request-Id", r->id);
	return resp;
}

/* Its socket is full, so MHD would not call the reader again to learn of
 * it: shut the socket, and MHD closes the connection. */
void
nw_relay_close_client(struct nw_request *r)
{
	if (r->conn == NULL)
		return;
	nw_http_server_abort(r->conn);
	r->relay.abort = true;
	nw_request_wake_client(r);
}
