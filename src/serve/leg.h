/*
 * One engine call of a request (leg.c): its kind, its engine and its
 * serving-pool connection. Internal to the serve layer.
 */
#ifndef NW_SERVE_LEG_H
#define NW_SERVE_LEG_H

#include <narwhal/plugin-abi.h>

#include <stdbool.h>
#include <stdint.h>

#include <glib.h>

#include "core/host.h"
#include "net/upstream.h"
#include "serve/slots.h"

struct nw_request;
struct nw_serve;

/* What the current engine leg is. */
typedef enum nw_leg_kind {
	NW_LEG_NONE,
	NW_LEG_TOKENIZE,
	NW_LEG_PREFILL,
	NW_LEG_DECODE,
	NW_LEG_AGGREGATE,
} nw_leg_kind;

/* The one engine call a request has at a time. */
struct nw_leg {
	nw_leg_kind kind;
	uint32_t engine;
	char *url;
	char *body;
	size_t body_len;
	struct nw_upstream_call *call;
	struct nw_waiter pool_wait;
	bool holds_pool;        /* one serving-pool unit */
	long status;            /* engine HTTP status, 0 until headers */
	bool relaying;          /* a 2xx stream: bytes go to the relay */
	bool collecting;        /* a 2xx stream: bytes go to the collector */
	GString *collected;     /* non-streamed or error body */
	bool overflow;          /* collected hit its bound */
	int64_t started_us;     /* the HTTP request went out */
};

/* The call kind of a leg kind other than NW_LEG_NONE, for the per-engine
 * call metrics (core/host.h). */
static inline nw_call_kind
nw_leg_call_kind(nw_leg_kind kind)
{
	return (nw_call_kind)(kind - NW_LEG_TOKENIZE);
}

/* An engine call of kind on engine, sent at started_us, ended: counted
 * and timed (docs/metrics.md). Returns the time it ended. */
int64_t nw_leg_note_call(struct nw_serve *s, uint32_t engine, nw_call_kind kind,
                         int64_t started_us);

/* Start the leg described by r->leg (kind, engine) with a built call
 * (body transfer full). Waits for a pool connection when needed. */
void nw_leg_start(struct nw_request *r, nw_leg_kind kind, uint32_t engine,
                  struct narwhal_http_call *call);
/* The pool granted a connection (from the request's timer). */
void nw_leg_pool_granted(struct nw_request *r);
/* Cancel the call and give back the pool unit (or leave the pool's line);
 * the leg's kind and engine stay, for a failure that names them
 * (pair.c holds a decode leg's failure so). */
void nw_leg_cancel(struct nw_request *r);
/* nw_leg_cancel, then forget the leg. */
void nw_leg_release(struct nw_request *r);

#endif /* NW_SERVE_LEG_H */
