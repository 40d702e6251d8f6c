#include "build-config.h"

#include "serve/counters.h"

#include <stdlib.h>
#include <string.h>

#include <glib.h>

json_t *
nw_serve_counters_json(const struct nw_serve_counters *c)
{
	json_t *o = json_object();

#define NW_SERVE_COUNTER_JSON(name) \
	json_object_set_new(o, #name, json_integer((json_int_t)c->name));
	NW_SERVE_COUNTER_LIST(NW_SERVE_COUNTER_JSON)
#undef NW_SERVE_COUNTER_JSON
	return o;
}

const char *const nw_metric_route_names[NW_METRIC_ROUTE_N] = {
	"completions", "chat", "models", "other",
};

/* Sorted (strcmp) for the binary search; docs/api.md lists the codes. */
const char *const nw_outcome_codes[NW_OUTCOME_N_CODES] = {
	"admission_unavailable", "client_disconnected", "context_length_exceeded", "degraded",
	"empty_body", "engine_bad_response", "engine_error", "engine_rejected",
	"engine_unreachable", "expired", "first_token_timeout", "handoff_expired",
	"internal_error", "invalid_api_key", "invalid_json", "invalid_type", "invalid_value",
	"method_not_allowed", "missing_field", "model_not_found", "no_engine", "none",
	"not_found", "other", "overloaded", "pool_exhausted", "prefill_timeout",
	"prompt_too_long", "queue_full", "queue_timeout", "read_timeout", "request_too_large",
	"response_too_large", "shutting_down", "too_many_requests", "unsupported_media_type",
	"unsupported_value",
};

static int
code_cmp(const void *key, const void *elem)
{
	return strcmp(key, *(const char *const *)elem);
}

uint32_t
nw_outcome_code_index(const char *code)
{
	const char *const *hit = bsearch(code != NULL ? code : "none", nw_outcome_codes,
	                                 NW_OUTCOME_N_CODES, sizeof *nw_outcome_codes, code_cmp);

	if (hit == NULL)
		hit = bsearch("other", nw_outcome_codes, NW_OUTCOME_N_CODES, sizeof *nw_outcome_codes,
		              code_cmp);
	return (uint32_t)(hit - nw_outcome_codes);
}

uint32_t
nw_outcome_code_none(void)
{
	static uint32_t none = UINT32_MAX;

	if (none == UINT32_MAX)
		none = nw_outcome_code_index(NULL);
	return none;
}

const unsigned nw_outcome_statuses[NW_OUTCOME_N_STATUSES] = {
	0, 200, 400, 401, 404, 405, 413, 415, 429, 499, 500, 501, 502, 503, 504,
};

uint32_t
nw_outcome_status_index(unsigned status)
{
	for (uint32_t i = 1; i < NW_OUTCOME_N_STATUSES; i++) {
		if (nw_outcome_statuses[i] == status)
			return i;
	}
	return 0;
}

const char *const nw_plugin_failure_kinds[NW_PLUGIN_FAILURE_N] = {
	"admission", "placement", "dialect", "controller", "other",
};

#define SCALE(name, ...) \
	static const double name##_bounds[] = { __VA_ARGS__ }; \
	G_STATIC_ASSERT(G_N_ELEMENTS(name##_bounds) <= NW_HISTOGRAM_MAX_BOUNDS); \
	const struct nw_histogram_scale nw_scale_##name = { name##_bounds, \
	                                                    G_N_ELEMENTS(name##_bounds) }

/* Seconds. A prompt of tens of thousands of tokens on a busy engine takes
 * tens of seconds to its first token; a healthy decode step a few to tens
 * of milliseconds; a long answer minutes (serving.request_timeout_s). */
SCALE(ttft, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 7.5,
      10, 15, 20, 30, 45, 60);
SCALE(tpot, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075,
      0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1);
SCALE(e2e, 0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 240,
      300, 450, 600);
SCALE(queue, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120);
SCALE(call, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60,
      120, 300, 600);
SCALE(handoff, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
      30);
