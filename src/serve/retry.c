#include "build-config.h"

#include "serve/retry.h"

#include <math.h>


double
nw_backoff_ceiling(double base_s, double cap_s, unsigned k)
{
	/* 2^k overflows nothing that matters: cap wins long before. */
	double ceiling = base_s * ldexp(1.0, (int)MIN(k, 60u));

	return MIN(cap_s, ceiling);
}

double
nw_backoff_sample(GRand *rng, double base_s, double cap_s, unsigned k)
{
	double ceiling = nw_backoff_ceiling(base_s, cap_s, k);

	if (ceiling <= 0.0)
		return 0.0;
	/* g_rand_double_range is [begin, end); the closed end does not matter. */
	return g_rand_double_range(rng, 0.0, ceiling);
}

void
nw_retry_budget_init(struct nw_retry_budget *b, uint32_t budget, double replenish)
{
	b->units = (uint64_t)budget * NW_RETRY_CREDIT_UNITS;
	b->max_units = b->units;
	/* The configuration bounds replenish to [0, 1]. */
	b->replenish_units = (uint64_t)llround(CLAMP(replenish, 0.0, 1.0) * NW_RETRY_CREDIT_UNITS);
}

bool
nw_retry_budget_take(struct nw_retry_budget *b)
{
	if (b->units < NW_RETRY_CREDIT_UNITS)
		return false;
	b->units -= NW_RETRY_CREDIT_UNITS;
	return true;
}

void
nw_retry_budget_success(struct nw_retry_budget *b)
{
	b->units = MIN(b->max_units, b->units + b->replenish_units);
}

double
nw_retry_budget_credits(const struct nw_retry_budget *b)
{
	return (double)b->units / NW_RETRY_CREDIT_UNITS;
}

bool
nw_fail_retryable(nw_fail_kind kind)
{
	switch (kind) {
	case NW_FAIL_TRANSPORT:
	case NW_FAIL_CONNECT:
	case NW_FAIL_STATUS:
	case NW_FAIL_PREFILL_TIMEOUT:
	case NW_FAIL_FIRST_TOKEN:
	case NW_FAIL_HANDOFF:
	case NW_FAIL_READ_GAP:
		return true;
	default:
		return false;
	}
}
