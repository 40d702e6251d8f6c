/*
 * One engine call that a dialect built (health, models, metrics, tokenise),
 * sent on a pool under a timeout, its whole answer collected up to a bound:
 * the monitor's calls (engine-probe.c) and narwhal-check's share it.
 * Generation legs have their own paths (serve/leg.c, handoff-probe.c).
 */
#ifndef NW_CONTROL_DIALECT_CALL_H
#define NW_CONTROL_DIALECT_CALL_H

#include <narwhal/plugin-abi.h>

#include <stdbool.h>
#include <stddef.h>

#include <glib.h>

#include "core/dialect.h"
#include "net/upstream.h"

struct nw_dialect_answer {
	enum nw_upstream_code code;
	long status;           /* 0: no HTTP answer */
	const char *error;     /* transport failure (may name an address) */
	const GString *body;   /* the answer, up to body_max */
	bool truncated;        /* the answer was longer than body_max */
	double seconds;        /* sent to answered */
};

typedef void (*nw_dialect_answer_fn)(void *data, const struct nw_dialect_answer *a);

struct nw_dialect_call_options {
	struct nw_upstream *pool;
	const struct nw_dialect *dialect; /* the engine called */
	double connect_timeout_s;
	double timeout_s;                 /* the whole call */
	size_t body_max;
	const char *request_id;           /* X-Request-Id, may be NULL */
};

struct nw_dialect_call;

/* Send *call as the dialect built it (its body is taken). fn is called
 * once, from the loop, unless the call is cancelled first; NULL when the
 * call could not start (fn is not called). */
struct nw_dialect_call *nw_dialect_call_start(const struct nw_dialect_call_options *o,
                                              struct narwhal_http_call *call,
                                              nw_dialect_answer_fn fn, void *data);

/* Abort a call: its connection is closed and fn is not called. */
void nw_dialect_call_cancel(struct nw_dialect_call *c);

/* Why a call failed, for an operator's report (narwhal-check,
 * narwhal-profile): "HTTP 503: message" as the dialect reads the engine's
 * error, "no answer within engine.health_timeout_s (5 s)" for a timeout,
 * or the transport failure (transfer full). */
char *nw_dialect_answer_problem(const struct nw_dialect *d, const struct nw_dialect_answer *a,
                                const char *timeout_field, double timeout_s);

#endif /* NW_CONTROL_DIALECT_CALL_H */
