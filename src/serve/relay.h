/*
 * The client side of a streamed answer (relay.c, spec 4.3). Internal to
 * the serve layer.
 */
#ifndef NW_SERVE_RELAY_H
#define NW_SERVE_RELAY_H

#include <narwhal/plugin-abi.h>

#include <stdbool.h>
#include <stddef.h>

#include <glib.h>
#include <microhttpd.h>

#include "net/sse.h"
#include "serve/chunk-shape.h"

struct nw_request;

/* The client side of a streamed answer. */
struct nw_relay {
	char *buf;              /* bytes for the client */
	size_t len, cap;        /* buf[0, len) filled of cap allocated */
	size_t sent;            /* buf[0, sent) already handed to MHD */
	size_t committed;       /* buf[sent, committed): whole events to send */
	struct nw_sse sse;
	size_t chunk_base;      /* buf length before the chunk being framed */
	bool first_token;
	bool engine_error;      /* an in-band error event was relayed */
	bool done;              /* the success terminator came (and is queued) */
	bool finished;          /* nothing more will be added */
	bool abort;             /* close without the final chunk */
	bool paused;            /* the engine leg waits for the client to drain */
	bool refused;           /* ... past the hard bound: a stall closes */
	bool absorbing;         /* the client stalled: read up to the hard bound */
	bool bad_event;         /* an event the dialect could not read: fail the leg */
	struct nw_chunk_shape shape; /* of the token events: valid without a parse */
};

void nw_relay_init(struct nw_relay *rl, size_t max_event);
/* How nw_event_read found an event. */
typedef enum nw_event_reading {
	NW_EVENT_SKIPPED = 0,   /* not parsed: taken for a token (ev->kind TOKENS) */
	NW_EVENT_PARSED,        /* ev says what it is */
	NW_EVENT_BAD,           /* unreadable (not JSON, not UTF-8): fails the leg */
} nw_event_reading;

/* The dialect's reading of an engine event (relay and collector). With
 * after_first_token only an event the dialect's sniff_sse says may matter
 * (a terminator, an error) is parsed, since most are tokens and a JSON
 * parse of each is wasted; the caller must then check a skipped event's
 * validity itself. */
nw_event_reading nw_event_read(struct nw_request *r, bool after_first_token, const char *payload,
                               size_t len, struct narwhal_sse_event *ev);
/* nw_event_read in two steps, for a caller that needs an event's JSON
 * itself. nw_event_skipped presets *ev (a token event) and says whether
 * the sniff lets the event pass unparsed; nw_event_parse has the dialect
 * read it, from doc (the payload read by nw_json_read with no flags, or
 * NULL) when the dialect takes a tree (ABI 2.4 parse_sse_json), so the
 * payload is read once for both. */
bool nw_event_skipped(struct nw_request *r, bool after_first_token, const char *payload,
                      size_t len, struct narwhal_sse_event *ev);
nw_event_reading nw_event_parse(struct nw_request *r, const char *payload, size_t len,
                                const json_t *doc, struct narwhal_sse_event *ev);
void nw_relay_clear(struct nw_relay *rl);
/* A decode or aggregate leg answered 2xx: before the 200 is committed,
 * start the relay afresh (serving.stream_commit first_event retries). */
void nw_relay_begin(struct nw_request *r);
/* Engine bytes of a 2xx stream; false when the relay is full and the
 * transfer must pause (curl hands the same bytes back later). */
bool nw_relay_feed(struct nw_request *r, const char *bytes, size_t len);
/* The engine's transfer ended after its terminator: end the client's stream
 * once drained. */
void nw_relay_end(struct nw_request *r);
/* Drop a partial event, append an error event and finish. */
void nw_relay_error(struct nw_request *r, const char *type, const char *code,
                    const char *message);
/* The MHD response that reads the relay (the request gets a ref). */
struct MHD_Response *nw_relay_response(struct nw_request *r);
/* The stall clock ran out (the client took nothing meanwhile): true when
 * the client is to be closed; false when the engine is read again, up to
 * the hard bound, first. */
bool nw_relay_stalled(struct nw_request *r);
/* Close a client that stopped reading, at once. */
void nw_relay_close_client(struct nw_request *r);

#endif /* NW_SERVE_RELAY_H */
