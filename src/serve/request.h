/*
 * One request and its lifecycle (request.c), shared by the serve layer's
 * modules; each module's own API is in its header (phases.h, leg.h,
 * relay.h, collect.h, serve-internal.h). Not a public interface: the
 * daemon uses serve/serve.h.
 *
 *   READING -> SIZING -> [QUEUED] -> attempt k:
 *       PLACING(prefill) -> PREFILL -> PLACING(decode) -> DECODE
 *       (or PLACING(aggregate) -> DECODE with an aggregate leg)
 *     -> BACKOFF -> attempt k+1 ...   (before visible output only)
 *   -> [STREAMING] -> RESPONDING or STREAM_ENDING -> DONE
 *
 * r->state is the one record of where a request is; only
 * nw_request_set_state() changes it, and it refuses a transition the
 * diagram does not have. Once the outcome is decided (RESPONDING for a
 * body answer, STREAM_ENDING for a committed stream) the request never
 * goes back to work, and DONE, reached when the HTTP server is finished
 * with it, is never left.
 *
 * Every timer of a request (request deadline, queue, pool, prefill, first
 * token, read gap, handoff, backoff, tokenise, wake-ups) is folded into its
 * one heap timer, armed to the earliest.
 */
#ifndef NW_SERVE_REQUEST_H
#define NW_SERVE_REQUEST_H

#include <narwhal/plugin-abi.h>

#include <stdbool.h>
#include <stdint.h>

#include <glib.h>
#include <jansson.h>
#include <microhttpd.h>

#include "core/demand.h"
#include "net/timers.h"
#include "net/upstream.h"
#include "serve/collect.h"
#include "serve/counters.h"
#include "core/dialect.h"
#include "serve/leg.h"
#include "serve/pair.h"
#include "serve/relay.h"
#include "serve/request-id.h"
#include "serve/request-parse.h"
#include "serve/retry.h"
#include "serve/slots.h"

struct nw_serve;

/* The order matters: every state from NW_REQ_STREAMING on has its answer
 * chosen, every state from NW_REQ_RESPONDING on its outcome decided. */
typedef enum nw_req_state {
	NW_REQ_READING,         /* the body is arriving */
	NW_REQ_SIZING,          /* counting the prompt's tokens */
	NW_REQ_QUEUED,          /* waiting for admission */
	NW_REQ_PLACING,         /* choosing an engine, or waiting for a slot */
	NW_REQ_PREFILL,         /* the prefill leg is out */
	NW_REQ_DECODE,          /* the decode or aggregate leg is out, nothing sent */
	NW_REQ_BACKOFF,         /* between attempts */
	NW_REQ_STREAMING,       /* the 200 is committed: the client sees the stream */
	NW_REQ_RESPONDING,      /* decided: a body answer (or none, client gone) */
	NW_REQ_STREAM_ENDING,   /* decided: the committed stream drains and ends */
	NW_REQ_DONE,            /* the HTTP server is finished with the request */
	NW_REQ_N_STATES
} nw_req_state;

/* Whether the lifecycle has an edge from one state to the other. */
bool nw_req_transition_legal(nw_req_state from, nw_req_state to);
const char *nw_req_state_name(nw_req_state state);

/* Wake-up reasons recorded by callbacks that must not act themselves. */
#define NW_WAKE_ADMITTED (1u << 0)
#define NW_WAKE_POOL     (1u << 1)
#define NW_WAKE_KICK     (1u << 2)

typedef enum nw_phase_timer {
	NW_PT_NONE,
	NW_PT_TOKENIZE,
	NW_PT_QUEUE,
	NW_PT_POOL,
	NW_PT_PREFILL,
	NW_PT_BACKOFF,
} nw_phase_timer;

/* A concurrent pair's decode leg starts its first-token clock when its
 * prefill engine answers, as a sequential decode leg would (spec 6). */
#define NW_FT_AFTER_PREFILL INT64_C(-2)

struct nw_request {
	struct nw_serve *serve;
	struct MHD_Connection *conn;  /* NULL once MHD is done with it */
	GList link;                   /* in serve->requests */
	unsigned refs;                /* MHD's, and a streamed response's */
	nw_req_state state;
	char id[NW_REQUEST_ID_MAX + 1];
	uint64_t handle;              /* host-unique, for plugins' ledgers */
	narwhal_route route;

	GString *body_in;       /* the client's body as it came, kept after parsing */
	struct nw_client_request parsed;

	int64_t arrival_us;
	int64_t deadline_us;
	uint64_t prompt_tokens;
	bool prompt_tokens_exact;

	/* Admission. */
	struct nw_waiter admit_wait;
	bool admitted;                /* holds a unit of serve->admitted */
	struct nw_demand_ticket demand; /* its offer in the demand ledger */

	/* Attempts and placement. */
	unsigned attempt;             /* 0-based */
	uint8_t *excluded;            /* per engine, for this request */
	bool aggregate;               /* this attempt runs one aggregate leg */
	narwhal_phase placing;        /* the phase being placed */
	struct nw_waiter phase_wait;
	struct nw_wait_line *phase_line; /* the line phase_wait is in, or NULL */
	int32_t queued_on;            /* engine whose queued_prefill counts us, -1 */
	int32_t prefill_engine;       /* engine holding our prefill slot, -1 */
	int32_t decode_engine;        /* engine holding our decode slot, -1 */
	int32_t prefill_pair;         /* engine that ran this attempt's prefill, -1 */
	struct nw_price_hold price;   /* what it charged the fleet's ledger (core/pricing.h) */
	bool whole_body_only;         /* a dialect will not stream this request */
	struct nw_pair_leg pair;      /* a concurrent pair's prefill leg and its state
	                               * (pair.h) */
	int32_t fault_engine;         /* the engine a failure is about when it is not
	                               * the leg's (a concurrent prefill), -1 */
	json_t *handoff;
	int64_t handoff_until_us;     /* -1: no cap running */
	int64_t ft_until_us;          /* first-token deadline, -1: none,
	                               * NW_FT_AFTER_PREFILL: armed when a
	                               * concurrent pair's prefill succeeds */

	struct nw_leg leg;

	/* Timers. */
	struct nw_timer timer;
	nw_phase_timer phase;
	int64_t phase_until_us;
	int64_t gap_us;               /* decode_read_timeout_s; 0: off */
	int64_t last_chunk_us;        /* -1: gap limit not running */
	int64_t stall_until_us;       /* a full relay must drain by then, -1: none */
	unsigned wake;                /* NW_WAKE_* */

	/* The client answer. */
	bool response_queued;         /* MHD has our response */
	bool suspended;               /* we suspended the connection */
	bool client_gone;
	bool ok;                      /* the outcome, once decided */
	unsigned resp_status;
	char *resp_body;              /* malloc'd (MHD frees it) */
	size_t resp_len;
	char retry_after[16];         /* Retry-After value, or "" */
	struct nw_relay relay;
	struct nw_collect collect;    /* for a non-streamed request */
	json_t *stream_body;          /* its body with streaming on, for decode legs */

	/* For the metrics and the access log (docs/metrics.md), from the
	 * clock reads the lifecycle makes anyway. */
	uint32_t answer_code;         /* nw_outcome_codes index; "none" until an error */
	int64_t queued_us;            /* joined the admission queue; -1: never */
	double queue_s;               /* the wait for admission; NAN: not admitted */
	int64_t first_token_us;       /* a stream's first token released; -1: none */
	int64_t prefill_end_us;       /* this attempt's prefill answer came; -1: none */
	uint32_t token_events;        /* token events relayed to the client */
	int64_t usage_prompt;         /* the engine's usage; -1: none seen */
	int64_t usage_completion;
	int32_t last_prefill;         /* engines of the last attempt; -1: none (an */
	int32_t last_decode;          /* aggregate leg is a prefill engine's) */
};

/* --- request.c ----------------------------------------------------- */

/* id: the request id already chosen for the connection (its answers so
 * far carry it). */
struct nw_request *nw_request_new(struct nw_serve *s, struct MHD_Connection *conn,
                                  narwhal_route route, const char *id);
void nw_request_unref(struct nw_request *r);
/* The access handler's calls after the headers (body chunks, the end of
 * the body, calls after a resume). */
enum MHD_Result nw_request_on_handler(struct nw_request *r, const char *upload,
                                      size_t *upload_size);
void nw_request_on_completed(struct nw_request *r, enum MHD_RequestTerminationCode why);
/* Stop: answer 503 (or end the stream with an error event). */
void nw_request_shutdown(struct nw_request *r);

/* The one way r->state changes (a transition the lifecycle lacks is
 * refused with a critical and the state kept). */
void nw_request_set_state(struct nw_request *r, nw_req_state next);

/* The outcome is decided: no more engine work. */
static inline bool
nw_request_decided(const struct nw_request *r)
{
	return r->state >= NW_REQ_RESPONDING;
}

/* The answer is a stream whose 200 is committed. */
static inline bool
nw_request_streaming(const struct nw_request *r)
{
	return r->state == NW_REQ_STREAMING || r->state == NW_REQ_STREAM_ENDING;
}

/* For phases.c, leg.c and relay.c. */
void nw_request_rearm(struct nw_request *r);
void nw_request_suspend(struct nw_request *r);
void nw_request_release_attempt(struct nw_request *r);
/* Decide the outcome and give back every reservation (idempotent). */
void nw_request_finish(struct nw_request *r, bool ok);
void nw_request_answer_error(struct nw_request *r, unsigned status, const char *type,
                             const char *code, const char *param, const char *message);
/* A non-streamed success: its body (malloc'd, taken). */
void nw_request_answer_text(struct nw_request *r, char *text, size_t len);
void nw_request_refuse(struct nw_request *r, unsigned status, const char *code,
                       double retry_after_s, const char *message);
/* message: what the client reads (Narwhal's own words). */
void nw_request_fail(struct nw_request *r, nw_fail_kind kind, long engine_status,
                     const char *message);
/* A failure the leg's engine caused. detail (its body, error event or
 * transport error, which may name addresses and paths) goes to the log
 * only; the client reads engine_message when the failure passes it on
 * (nw_fail_passes_on: a 400 or 422 about the client's own request), a
 * description of its own request for a context-length refusal, and
 * otherwise a message naming the engine's configured id and the request
 * id (docs/api.md, errors). */
void nw_request_fail_engine(struct nw_request *r, nw_fail_kind kind, long engine_status,
                            const char *detail, const char *engine_message);
bool nw_fail_passes_on(nw_fail_kind kind, long engine_status);
void nw_request_wake_client(struct nw_request *r);
void nw_request_on_leg_done(struct nw_request *r, const struct nw_upstream_result *res);
void nw_request_on_first_token(struct nw_request *r);
void nw_request_commit_stream(struct nw_request *r);
/* The route as the metrics label it. */
nw_metric_route nw_request_metric_route(const struct nw_request *r);

#endif /* NW_SERVE_REQUEST_H */
