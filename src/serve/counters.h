/*
 * Data-plane counters, one uint64 per outcome, for the metrics route of a
 * later issue; GET /narwhal/health shows them now as "counters". The list
 * below is the one place a counter is named: the struct and the JSON come
 * from it (docs/api.md lists the names).
 */
#ifndef NW_SERVE_COUNTERS_H
#define NW_SERVE_COUNTERS_H

#include <stdint.h>

#include <jansson.h>

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

/* What the data plane records for the metrics route and /narwhal/health.
 * The daemon owns it and lends it to the serving context, so the counts
 * carry over when a reload replaces the context (docs/deployment.md). */
struct nw_serve_metrics {
	struct nw_serve_counters counters;
};

/* {"name": value, ...} (transfer full). */
json_t *nw_serve_counters_json(const struct nw_serve_counters *c);

#endif /* NW_SERVE_COUNTERS_H */
