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

/* HTTP statuses that may be retried before visible output: 408, 429, 500,
 * 502, 503, 504. Transport failures (status 0) are retryable too. */
bool nw_retry_status_retryable(long status);

/* The backoff ceiling before retry k (k = 0 for the first retry):
 * min(cap, base * 2^k). */
double nw_backoff_ceiling(double base_s, double cap_s, unsigned k);

/* Full jitter: uniform in [0, ceiling]. */
double nw_backoff_sample(GRand *rng, double base_s, double cap_s, unsigned k);

/* The retry-credit pool: starts full at budget, each retry spends one
 * credit, each successful original request adds replenish, never above the
 * initial pool. */
struct nw_retry_budget {
	double credits;
	double max;
	double replenish;
	uint64_t spent;   /* retries allowed */
	uint64_t denied;  /* retries refused for want of credit */
};

void nw_retry_budget_init(struct nw_retry_budget *b, uint32_t budget, double replenish);

/* Spend one credit for a retry; false (and counted) when less than one
 * credit is left. */
bool nw_retry_budget_take(struct nw_retry_budget *b);

/* An original request succeeded. */
void nw_retry_budget_success(struct nw_retry_budget *b);

#endif /* NW_RETRY_H */
