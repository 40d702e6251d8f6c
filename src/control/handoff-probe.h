/*
 * One complete prefill-to-decode handoff outside any client request,
 * through the engines' dialects: the breaker's verification legs (spec 6:
 * a complete prefill leg and a complete decode leg, each under
 * engine.first_token_timeout_s) and narwhal-check's pair checks (spec 4.2:
 * crossed handoffs, their timings, an abandoned handoff). Asynchronous on
 * the GLib loop, through a given upstream pool (the daemon's control pool).
 *
 * Sequential dialects: prefill (build_prefill, parse_prefill), then decode
 * with the handoff (build_decode), streamed until the first generated
 * token and then to the end. Concurrent dialects: both legs at once
 * (build_prefill and build_decode with both engines known). An
 * aggregate-only engine is verified with one build_aggregate leg.
 */
#ifndef NW_CONTROL_HANDOFF_PROBE_H
#define NW_CONTROL_HANDOFF_PROBE_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "core/dialect.h"
#include "net/upstream.h"

/* Request handles of probes: a space apart from client requests' handles
 * (which count up from 1), so a dialect's pair ids never collide. */
#define NW_HANDOFF_PROBE_HANDLE_BASE (UINT64_C(1) << 62)

/* One event of generated tokens on the decode (or aggregate) leg: how many,
 * and g_get_monotonic_time() when it was read (narwhal-profile times token
 * intervals with it). It must not cancel the probe. */
typedef void (*nw_handoff_probe_tokens_fn)(void *data, uint32_t tokens, int64_t at_us);

struct nw_handoff_probe_options {
	struct nw_upstream *pool;
	const struct nw_dialect *prefill;  /* the prefill engine's dialect */
	const struct nw_dialect *decode;   /* the decode engine's (may equal prefill;
	                                    * NULL: prefill) */
	const char *model;                 /* served model name (may be NULL) */
	uint64_t handle;                   /* unique, NW_HANDOFF_PROBE_HANDLE_BASE + n */
	uint32_t max_tokens;               /* output tokens to ask for; 0: 2 */
	const char *prompt;                /* NULL: a short fixed prompt */
	double leg_timeout_s;              /* each leg: engine.first_token_timeout_s
	                                    * (positive) */
	double connect_timeout_s;          /* engine.connect_timeout_s; 0: the
	                                    * engine client's default */
	bool abandon;                      /* prefill only: keep the handoff, send
	                                    * no decode (lease release check) */
	bool aggregate;                    /* one aggregate leg on the prefill
	                                    * engine even when it can hand off */
	double gap_timeout_s;              /* after the first token, the longest
	                                    * wait for the next token and for the
	                                    * terminator; 0: leg_timeout_s from the
	                                    * first token to the end */
	nw_handoff_probe_tokens_fn on_tokens; /* may be NULL */
	void *tokens_data;
};

/* Where a probe stopped. */
typedef enum nw_handoff_probe_stage {
	NW_PROBE_STAGE_NONE = 0,   /* completed */
	NW_PROBE_STAGE_BUILD,      /* a dialect builder failed */
	NW_PROBE_STAGE_PREFILL,    /* the prefill (or aggregate) leg failed */
	NW_PROBE_STAGE_HANDOFF,    /* the prefill answer had no usable handoff */
	NW_PROBE_STAGE_DECODE,     /* the decode leg failed before its first token */
	NW_PROBE_STAGE_STREAM,     /* the decode stream failed after its first token */
} nw_handoff_probe_stage;

struct nw_handoff_probe_result {
	bool ok;
	nw_handoff_probe_stage stage;   /* NONE when ok */
	long status;                    /* the failing leg's HTTP status, 0: none */
	bool timed_out;                 /* a leg passed leg_timeout_s */
	char error[256];                /* what failed, for logs and reports: may
	                                 * name an engine address, never for clients */
	double prefill_s;               /* prefill leg: start to whole answer */
	double first_token_s;           /* decode leg: start to first generated token
	                                 * (the crossed-handoff time narwhal-check
	                                 * compares with first_token_timeout_s) */
	double total_s;                 /* start to end */
	uint32_t tokens;                /* generated tokens seen */
	json_t *handoff;                /* abandon: the handoff kept (borrowed;
	                                 * valid during the callback) */
	double handoff_s;               /* start of the prefill leg to the decode
	                                 * leg's first token: how long the KV
	                                 * handoff lived before it was used,
	                                 * compared with kv_lease_s and
	                                 * serving.handoff_timeout_s; 0 for an
	                                 * aggregate leg */
};

typedef void (*nw_handoff_probe_done_fn)(void *data, const struct nw_handoff_probe_result *res);

struct nw_handoff_probe;

/* Start a probe; done is called exactly once from the loop (never from
 * inside this call), unless the probe is cancelled first. The probe is
 * freed when done returns: do not cancel it from done or after. Never NULL
 * (GLib aborts when out of memory).
 *
 * Bounds: the prefill leg, leg_timeout_s for the whole leg; the decode (or
 * aggregate) leg, leg_timeout_s from the moment it is sent to its first
 * generated token, then leg_timeout_s again from that token to the stream's
 * terminator (with gap_timeout_s: at most gap_timeout_s from each token to
 * the next, and from the last to the terminator). A concurrent pair is
 * complete when both legs are. Failures: a transport failure or a non-2xx
 * answer of the prefill leg is STAGE_PREFILL, and so is an answer that is
 * not JSON; a handoff the dialect cannot read, or none (parse_prefill gives
 * NULL), is STAGE_HANDOFF, since a verification needs a real one; before
 * the first token the decode leg fails at STAGE_DECODE (an aggregate leg at
 * STAGE_PREFILL), after it at STAGE_STREAM. abandon needs a sequential
 * handoff (else STAGE_BUILD). */
struct nw_handoff_probe *nw_handoff_probe_start(const struct nw_handoff_probe_options *opts,
                                                nw_handoff_probe_done_fn done, void *data);

/* Stop a probe: its calls are cancelled and done is not called. */
void nw_handoff_probe_cancel(struct nw_handoff_probe *p);

const char *nw_handoff_probe_stage_name(nw_handoff_probe_stage s); /* "prefill", ... */

#endif /* NW_CONTROL_HANDOFF_PROBE_H */
