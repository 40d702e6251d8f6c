/*
 * Retry policy (spec 4.2): which failures may be retried, full-jitter
 * exponential backoff, and the retry budget that keeps retries from
 * multiplying load during an incident.
 */
#ifndef NW_RETRY_H
#define NW_RETRY_H

#include <stdbool.h>
#include <stdint.h>

#include <glib.h>

/* Why an attempt failed. */
typedef enum nw_fail_kind {
	NW_FAIL_TRANSPORT,      /* no HTTP answer: reset, cut, a timeout */
	NW_FAIL_CONNECT,        /* no address accepted a connection (refused,
	                         * unreachable): nothing serves there now */
	NW_FAIL_STATUS,         /* a retryable engine status */
	NW_FAIL_PERMANENT,      /* an engine error not worth retrying */
	NW_FAIL_CONTEXT,        /* the prompt does not fit the model */
	NW_FAIL_BAD_RESPONSE,   /* an engine answer Narwhal cannot read */
	NW_FAIL_TOO_LARGE,      /* an engine answer above max_response_bytes */
	NW_FAIL_PREFILL_TIMEOUT,
	NW_FAIL_FIRST_TOKEN,
	NW_FAIL_READ_GAP,
	NW_FAIL_HANDOFF,
	NW_FAIL_DEADLINE,
	NW_FAIL_POOL,
	NW_FAIL_NO_ENGINE,
	NW_FAIL_SHUTDOWN,
	NW_FAIL_CLIENT,         /* the client left or stopped reading: no answer */
	NW_FAIL_INTERNAL,
} nw_fail_kind;

/* Spec 4.2: transport failures, retryable statuses (408, 429, 5xx as the
 * dialect classifies them), a prefill timeout, an expired handoff and a
 * first-token timeout may be retried, and so may a read-gap timeout
 * (issue 9: a non-streamed answer has sent nothing yet; a committed stream
 * is never retried whatever the kind); an answer Narwhal cannot read is a
 * permanent error, like every other kind. */
bool nw_fail_retryable(nw_fail_kind kind);

/* The backoff ceiling before retry k (k = 0 for the first retry):
 * min(cap, base * 2^k). */
double nw_backoff_ceiling(double base_s, double cap_s, unsigned k);

/* Full jitter: uniform in [0, ceiling]. */
double nw_backoff_sample(GRand *rng, double base_s, double cap_s, unsigned k);

/* The retry-credit pool: starts full at budget, each retry spends one
 * credit, each successful original request adds replenish, never above the
 * initial pool. It counts in millionths of a credit, in integers, so the
 * arithmetic is exact: ten replenishments of 0.1 make one credit.
 * serving.retry_replenish is rounded to the nearest millionth (its
 * documented resolution, docs/configuration.md). */
#define NW_RETRY_CREDIT_UNITS 1000000u

struct nw_retry_budget {
	uint64_t units;         /* credits held, in NW_RETRY_CREDIT_UNITS */
	uint64_t max_units;
	uint64_t replenish_units;
	/* What it allowed and refused is counted by its user (the serve
	 * counters retries and retry_budget_denied), once. */
};

void nw_retry_budget_init(struct nw_retry_budget *b, uint32_t budget, double replenish);

/* Spend one credit for a retry; false when less than one credit is left. */
bool nw_retry_budget_take(struct nw_retry_budget *b);

/* An original request succeeded. */
void nw_retry_budget_success(struct nw_retry_budget *b);

/* The credits held, for reports. */
double nw_retry_budget_credits(const struct nw_retry_budget *b);

#endif /* NW_RETRY_H */
