/*
 * Data-plane counters, one uint64 per outcome: GET /narwhal/health shows
 * them as "counters" and GET /metrics as narwhal_<name>_total
 * (docs/metrics.md). The list below is the one place a counter is named:
 * the struct and the JSON come from it (docs/api.md lists the names).
 */
#ifndef NW_SERVE_COUNTERS_H
#define NW_SERVE_COUNTERS_H

#include <stdint.h>

#include <jansson.h>

#include "core/histogram.h"
#include "core/host.h"

#define NW_SERVE_COUNTER_LIST(X) \
	X(requests_completions)          /* POST /v1/completions received */ \
	X(requests_chat)                 /* POST /v1/chat/completions received */ \
	X(requests_models)               /* GET /v1/models */ \
	X(requests_other)                /* 404 and 405 answers */ \
	X(requests_ok)                   /* completions answered in full */ \
	X(requests_failed)               /* completions that ended in an error */ \
	X(refused_before_body)           /* completions answered before their body was \
	                                  * read (401, 429 ceiling, 503 stopping, 413 \
	                                  * declared): neither ok nor failed */ \
	X(client_errors)                 /* 4xx from validation (400, 404, 415) */ \
	X(unauthorized)                  /* 401: missing or wrong API key */ \
	X(ceiling_refusals)              /* 429 at the connection ceiling: unsized offers */ \
	X(too_large)                     /* 413 */ \
	X(admitted)                      /* admission said admit (now or after a wait) */ \
	X(queued)                        /* admission said wait */ \
	X(refused_admission)             /* 429 from the admission plugin */ \
	X(refused_too_long)              /* 400: cannot meet the TTFT target */ \
	X(queue_full)                    /* 429: admission queue full */ \
	X(queue_timeouts)                /* 429: waited queue_timeout_s */ \
	X(tokenize_calls)                /* dialect tokenise legs started */ \
	X(tokenize_fallbacks)            /* sized by chars_per_token instead */ \
	X(phase_waits)                   /* waited for a prefill or decode slot */ \
	X(prefill_started)               \
	X(prefill_failed_transport)      \
	X(prefill_failed_status)         \
	X(prefill_timeouts)              \
	X(decode_started)                \
	X(decode_failed_transport)       \
	X(decode_failed_status)          \
	X(aggregate_started)             \
	X(retries)                       /* attempts after the first */ \
	X(retry_budget_denied)           /* a retry refused for want of credit */ \
	X(handoff_expired)               /* handoff_timeout_s passed before decode */ \
	X(first_token_timeouts)          \
	X(read_gap_timeouts)             /* decode_read_timeout_s silent gaps */ \
	X(deadline_expired)              /* request_timeout_s passed */ \
	X(context_too_long)              /* engine said the prompt does not fit */ \
	X(refused_context_length)        /* 400 before any leg: cannot fit the model */ \
	X(refused_degraded)              /* 503: admission stopped (monitoring failures) */ \
	X(handoff_load_failed)           /* a decode engine could not load its handoff */ \
	X(handoff_missing)               /* a 2xx prefill answer without a handoff */ \
	X(pair_decode_held)              /* a concurrent pair's decode failure waited \
	                                  * for its prefill leg's answer (pair.c) */ \
	X(permanent_errors)              /* other engine errors not retried */ \
	X(client_disconnects)            \
	X(backpressure_closes)           /* a stream client stopped reading */ \
	X(pool_starvation)               /* pool_timeout_s waiting for a connection */ \
	X(no_engine)                     /* no engine could take the request */ \
	X(stream_errors)                 /* terminal error events sent */ \
	X(engine_status_2xx)             \
	X(engine_status_4xx)             \
	X(engine_status_5xx)             \
	X(shutdown_aborts)               /* requests cut by a stop signal */ \
	X(plugin_call_errors)            /* a plugin slot failed (logged) */

struct nw_serve_counters {
#define NW_SERVE_COUNTER_FIELD(name) uint64_t name;
	NW_SERVE_COUNTER_LIST(NW_SERVE_COUNTER_FIELD)
#undef NW_SERVE_COUNTER_FIELD
};

/* The client routes as the metrics label them (docs/metrics.md). */
typedef enum nw_metric_route {
	NW_METRIC_ROUTE_COMPLETIONS,
	NW_METRIC_ROUTE_CHAT,
	NW_METRIC_ROUTE_MODELS,
	NW_METRIC_ROUTE_OTHER,      /* 404 and 405 */
	NW_METRIC_ROUTE_N
} nw_metric_route;
extern const char *const nw_metric_route_names[NW_METRIC_ROUTE_N];

/* The answer codes of docs/api.md, sorted, plus "none" (served in full),
 * "client_disconnected" (the client left first) and "other" (a code not in
 * the list): a fixed label set, so counting an outcome is an array
 * increment. */
#define NW_OUTCOME_N_CODES 37
extern const char *const nw_outcome_codes[NW_OUTCOME_N_CODES];
/* The index of code in nw_outcome_codes: NULL is "none", an unknown code
 * "other". */
uint32_t nw_outcome_code_index(const char *code);
/* The index of "none" (served in full), looked up once: every request
 * starts with it. */
uint32_t nw_outcome_code_none(void);

/* The statuses an answer can have, and "other". 499 is the nginx
 * convention for a client that left before its answer. */
#define NW_OUTCOME_N_STATUSES 15
extern const unsigned nw_outcome_statuses[NW_OUTCOME_N_STATUSES]; /* 0: other */
uint32_t nw_outcome_status_index(unsigned status);
#define NW_STATUS_CLIENT_GONE 499

/* Plugin kinds whose call failures are counted apart. */
typedef enum nw_plugin_failure_kind {
	NW_PLUGIN_FAILURE_ADMISSION,
	NW_PLUGIN_FAILURE_PLACEMENT,
	NW_PLUGIN_FAILURE_DIALECT,
	NW_PLUGIN_FAILURE_CONTROLLER, /* the daemon counts them (docs/controller.md) */
	NW_PLUGIN_FAILURE_OTHER,
	NW_PLUGIN_FAILURE_N
} nw_plugin_failure_kind;
extern const char *const nw_plugin_failure_kinds[NW_PLUGIN_FAILURE_N];

/* Bucket bounds fit for LLM serving (docs/metrics.md): time to first
 * token up to a minute, time per output token from 1 ms to 1 s, end to end
 * up to ten minutes, the admission queue's wait, one engine call, and the
 * handoff (prefill end to decode start). */
extern const struct nw_histogram_scale nw_scale_ttft, nw_scale_tpot, nw_scale_e2e,
	nw_scale_queue, nw_scale_call, nw_scale_handoff;

/* What the data plane records for the metrics route and /narwhal/health.
 * The daemon owns it and lends it to the serving context, so the counts
 * carry over when a reload replaces the context (docs/deployment.md).
 * Zero is a valid start; every update is an addition to a fixed slot (no
 * allocation, no lock: the loop is the only writer). */
struct nw_serve_metrics {
	struct nw_serve_counters counters;
	/* Requests by route, answer code and status, counted once each when
	 * its answer is final. */
	uint64_t outcomes[NW_METRIC_ROUTE_N][NW_OUTCOME_N_CODES][NW_OUTCOME_N_STATUSES];
	struct nw_histogram ttft;        /* streams: first token released to the client */
	struct nw_histogram tpot;        /* streams served in full with two or more tokens */
	struct nw_histogram e2e;         /* completion requests served in full */
	struct nw_histogram queue_wait;  /* every admitted request (0: at once) */
	struct nw_histogram handoff;     /* prefill answer to decode call */
	struct nw_histogram calls[NW_CALL_KINDS]; /* engine calls that ended */
	uint64_t client_bytes_in[NW_METRIC_ROUTE_N];  /* request bodies */
	uint64_t client_bytes_out[NW_METRIC_ROUTE_N]; /* answer bodies and stream bytes */
	uint64_t engine_bytes_out;       /* engine call bodies sent */
	uint64_t engine_bytes_in;        /* engine answer bytes received */
	uint64_t plugin_failures[NW_PLUGIN_FAILURE_N];
};

/* Count one final answer. */
static inline void
nw_serve_metrics_outcome(struct nw_serve_metrics *m, nw_metric_route route, unsigned status,
                         uint32_t code)
{
	m->outcomes[route][code][nw_outcome_status_index(status)]++;
}

/* {"name": value, ...} (transfer full). */
json_t *nw_serve_counters_json(const struct nw_serve_counters *c);

#endif /* NW_SERVE_COUNTERS_H */
