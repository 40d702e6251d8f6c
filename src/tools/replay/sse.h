/*
 * Server-sent events as OpenAI-compatible servers send them, read from
 * chunks that split events, lines and CR LF pairs anywhere.
 *
 * rp_sse is the framing, a thin wrapper of the shared nw_sse
 * (src/net/sse.h): lines ending in LF, CR LF or CR; "data:" lines joined by
 * LF; a blank line ends an event; comments and other fields are ignored.
 *
 * rp_event reads one data payload: [DONE], an error object (in-band
 * failures: {"error": {...}}), or a chunk with choices (text or delta
 * content) and possibly usage (the final chunk has "choices": []).
 *
 * rp_stream applies both to one response and keeps what the replay
 * measures: when the first and last generated text arrived, how many
 * pieces, the usage, [DONE], and any error event.
 */
#ifndef NW_REPLAY_SSE_H
#define NW_REPLAY_SSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <glib.h>

#include "net/sse.h"

/* The framing is the shared one (src/net/sse.h); these names keep the
 * replay's code and tests as they were. rp_sse callbacks return nothing,
 * so they are wrapped. */
#define RP_SSE_MAX_EVENT NW_SSE_MAX_EVENT

typedef void (*rp_sse_fn)(void *data, const char *payload, size_t len);

struct rp_sse {
	struct nw_sse framer;
	bool overflow;      /* an event outgrew RP_SSE_MAX_EVENT */
	rp_sse_fn fn;
	void *fn_data;
};

void rp_sse_init(struct rp_sse *p, rp_sse_fn fn, void *data);
void rp_sse_clear(struct rp_sse *p);
/* False once an event outgrew RP_SSE_MAX_EVENT (the rest is ignored). */
bool rp_sse_feed(struct rp_sse *p, const char *bytes, size_t len);
/* End of the body: a last line or event without its terminator still
 * counts (lenient; the spec would drop it). */
void rp_sse_finish(struct rp_sse *p);

enum rp_event_kind {
	RP_EV_DATA = 0,     /* a chunk (or a whole non-streamed response) */
	RP_EV_DONE,         /* data: [DONE] */
	RP_EV_ERROR,        /* an error object */
	RP_EV_INVALID,      /* not JSON, or not an object */
};

struct rp_event {
	enum rp_event_kind kind;
	uint32_t pieces;          /* choices that carry generated text */
	int64_t prompt_tokens;    /* from usage; -1 when absent */
	int64_t completion_tokens;
	char *error;              /* RP_EV_ERROR: the message */
	long error_code;          /* its numeric code, 0 when none */
};

void rp_event_parse(const char *payload, size_t len, struct rp_event *ev);
void rp_event_clear(struct rp_event *ev);

struct rp_stream {
	struct rp_sse sse;
	int64_t now_us;           /* arrival time of the bytes being fed */
	int64_t first_us;         /* first event with generated text; 0: none */
	int64_t last_us;          /* last such event */
	uint32_t pieces;          /* events with generated text */
	uint32_t events;
	uint32_t invalid;         /* data payloads that were not JSON objects */
	int64_t usage_prompt;     /* -1 until a usage object arrives */
	int64_t usage_completion;
	bool done;                /* [DONE] arrived */
	bool error_event;         /* an in-band error arrived */
	char *error;              /* its message (the first one) */
	long error_code;
};

void rp_stream_init(struct rp_stream *s);
void rp_stream_clear(struct rp_stream *s);
bool rp_stream_feed(struct rp_stream *s, int64_t now_us, const char *bytes, size_t len);
void rp_stream_finish(struct rp_stream *s, int64_t now_us);

/* Output tokens: usage.completion_tokens when sent, else text events. */
uint32_t rp_stream_tokens(const struct rp_stream *s);

#endif /* NW_REPLAY_SSE_H */
