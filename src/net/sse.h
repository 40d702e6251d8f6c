/*
 * Server-sent event framing, shared by the router's stream relay and
 * narwhal-replay: bytes in chunks that split events, lines and CR LF pairs
 * anywhere; out come the data payloads of whole events.
 *
 * Lines end in LF, CR LF or CR. "data:" lines (one optional space after
 * the colon) are joined by LF; a blank line ends an event; comments
 * (":...") and other fields (event:, id:, retry:) are ignored. An event
 * with no data line dispatches nothing but still ends at its blank line.
 *
 * The relay needs to know where events end in the byte stream, so that a
 * client only ever receives whole events: nw_sse_feed reports, for the
 * chunk it was given, how many bytes up to and including the last blank
 * line it saw (nw_sse.boundary).
 */
#ifndef NW_SSE_H
#define NW_SSE_H

#include <stdbool.h>
#include <stddef.h>

#include <glib.h>

/* The default bound on one event: every byte of its lines, comments and
 * other fields included, so that an engine cannot grow an event without
 * end out of lines that are not data. */
#define NW_SSE_MAX_EVENT (16u << 20)

/* One event's data payload (not NUL-terminated; len bytes). Return false
 * to stop reading the chunk at this event: nw_sse_feed then returns at
 * once, and the rest of the chunk is left unread. */
typedef bool (*nw_sse_fn)(void *data, const char *payload, size_t len);

struct nw_sse {
	GString *line;      /* the line being read, without its end */
	GString *data;      /* the event's data lines, joined by LF */
	/* An event's only data line so far, where nw_sse_feed's caller has it:
	 * dispatched from there when the event ends in the same chunk, else
	 * copied to data before nw_sse_feed returns. NULL: none. */
	const char *in_place;
	size_t in_place_len;
	size_t event_bytes; /* the event's whole lines so far, with their ends */
	size_t max_event;
	bool has_data;
	bool after_cr;      /* the last byte was CR: an LF next is part of it */
	bool cr_ended_event; /* ... and that CR ended a blank line */
	bool overflow;
	bool stopped;       /* the callback asked to stop */
	/* After nw_sse_feed: bytes of the chunk up to and including the last
	 * event end (blank line) in it, or 0 when no event ended. While a
	 * callback runs: the offset just past the blank line that ended the
	 * event being dispatched. */
	size_t boundary;
	nw_sse_fn fn;
	void *fn_data;
};

void nw_sse_init(struct nw_sse *p, nw_sse_fn fn, void *data);
void nw_sse_clear(struct nw_sse *p);
/* Bound one event to max bytes (0: NW_SSE_MAX_EVENT). */
void nw_sse_set_max_event(struct nw_sse *p, size_t max);
/* Forget a partial line or event, e.g. before a new response. */
void nw_sse_reset(struct nw_sse *p);

/* Feed a chunk. False once an event outgrew the bound (everything after is
 * ignored) or when a callback returned false. */
bool nw_sse_feed(struct nw_sse *p, const char *bytes, size_t len);

/* Whether the bytes fed so far end between events (no partial line or
 * event pending). */
bool nw_sse_at_boundary(const struct nw_sse *p);

/* End of the body: a last line or event without its terminator still
 * counts (lenient: the standard would drop it). */
void nw_sse_finish(struct nw_sse *p);

#endif /* NW_SSE_H */
