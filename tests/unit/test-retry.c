/* Retry policy: spec 4.2 statuses, full-jitter backoff, the retry budget. */
#include "build-config.h"

#include "core/dialect.h"
#include "serve/retry.h"

static void
test_retryable_statuses(void)
{
	static const struct { long status; bool retryable; } rows[] = {
		{ 0, true }, { 408, true }, { 429, true }, { 500, true }, { 502, true },
		{ 503, true }, { 504, true },
		{ 200, false }, { 400, false }, { 401, false }, { 404, false },
		{ 413, false }, { 422, false }, { 501, false }, { 505, false },
	};

	for (size_t i = 0; i < G_N_ELEMENTS(rows); i++)
		g_assert_cmpint(nw_engine_status_retryable(rows[i].status), ==, rows[i].retryable);
}

static void
test_backoff_ceiling(void)
{
	/* Defaults: base 0.1 s, cap 1.0 s. */
	g_assert_cmpfloat_with_epsilon(nw_backoff_ceiling(0.1, 1.0, 0), 0.1, 1e-12);
	g_assert_cmpfloat_with_epsilon(nw_backoff_ceiling(0.1, 1.0, 1), 0.2, 1e-12);
	g_assert_cmpfloat_with_epsilon(nw_backoff_ceiling(0.1, 1.0, 3), 0.8, 1e-12);
	g_assert_cmpfloat_with_epsilon(nw_backoff_ceiling(0.1, 1.0, 4), 1.0, 1e-12);
	g_assert_cmpfloat_with_epsilon(nw_backoff_ceiling(0.1, 1.0, 1000), 1.0, 1e-12);
	g_assert_cmpfloat(nw_backoff_ceiling(0.0, 1.0, 5), ==, 0.0);
}

/* Full jitter: samples cover [0, ceiling] uniformly, never above it. */
static void
test_backoff_full_jitter(void)
{
	GRand *rng = g_rand_new_with_seed(42);
	double sum = 0, lo = 1, hi = 0;
	const int n = 20000;

	for (int i = 0; i < n; i++) {
		double s = nw_backoff_sample(rng, 0.1, 1.0, 2); /* ceiling 0.4 */
		g_assert_cmpfloat(s, >=, 0.0);
		g_assert_cmpfloat(s, <=, 0.4);
		sum += s;
		lo = MIN(lo, s);
		hi = MAX(hi, s);
	}
	g_assert_cmpfloat_with_epsilon(sum / n, 0.2, 0.01);
	g_assert_cmpfloat(lo, <, 0.01);
	g_assert_cmpfloat(hi, >, 0.39);
	g_assert_cmpfloat(nw_backoff_sample(rng, 0.0, 0.0, 3), ==, 0.0);
	g_rand_free(rng);
}

static void
test_budget_spends_and_denies(void)
{
	struct nw_retry_budget b;

	nw_retry_budget_init(&b, 3, 0.1);
	g_assert_true(nw_retry_budget_take(&b));
	g_assert_true(nw_retry_budget_take(&b));
	g_assert_true(nw_retry_budget_take(&b));
	g_assert_false(nw_retry_budget_take(&b));
	/* A refusal spends nothing: still no credit for the next one. */
	g_assert_cmpfloat(nw_retry_budget_credits(&b), <, 1.0);
	g_assert_cmpfloat(nw_retry_budget_credits(&b), >=, 0.0);
	g_assert_false(nw_retry_budget_take(&b));
}

/* One credit per retry, retry_replenish per success, capped at the pool. */
static void
test_budget_replenish_capped(void)
{
	struct nw_retry_budget b;

	nw_retry_budget_init(&b, 2, 0.5);
	g_assert_true(nw_retry_budget_take(&b));
	g_assert_true(nw_retry_budget_take(&b));
	g_assert_false(nw_retry_budget_take(&b));
	nw_retry_budget_success(&b);
	g_assert_false(nw_retry_budget_take(&b)); /* 0.5 credit is not a retry */
	nw_retry_budget_success(&b);
	g_assert_true(nw_retry_budget_take(&b));
	for (int i = 0; i < 100; i++)
		nw_retry_budget_success(&b);
	g_assert_cmpfloat(nw_retry_budget_credits(&b), ==, 2.0);
}

/* Issue 9: the budget counts in exact arithmetic. In binary floating
 * point ten additions of 0.1 make 0.9999999999999999, not a credit. */
static void
test_budget_exact_tenths(void)
{
	struct nw_retry_budget b;

	nw_retry_budget_init(&b, 1, 0.1);
	g_assert_true(nw_retry_budget_take(&b));
	for (int i = 0; i < 9; i++) {
		nw_retry_budget_success(&b);
		g_assert_false(nw_retry_budget_take(&b));
	}
	nw_retry_budget_success(&b);
	g_assert_cmpfloat(nw_retry_budget_credits(&b), ==, 1.0);
	g_assert_true(nw_retry_budget_take(&b));
	/* The documented resolution: a millionth of a credit. */
	nw_retry_budget_init(&b, 1, 0.000001);
	g_assert_true(nw_retry_budget_take(&b));
	for (int i = 0; i < 999999; i++)
		nw_retry_budget_success(&b);
	g_assert_false(nw_retry_budget_take(&b));
	nw_retry_budget_success(&b);
	g_assert_true(nw_retry_budget_take(&b));
}

static void
test_budget_zero_replenish(void)
{
	struct nw_retry_budget b;

	nw_retry_budget_init(&b, 1, 0.0);
	g_assert_true(nw_retry_budget_take(&b));
	for (int i = 0; i < 10; i++)
		nw_retry_budget_success(&b);
	g_assert_false(nw_retry_budget_take(&b));
}

static void
test_retryable_failures(void)
{
	g_test_summary("/retry/spec-4.2/retryable-failures: transport, retryable statuses and "
	               "the spec 6 timeouts before output are retried; an unreadable engine "
	               "answer, permanent errors, pool starvation and the deadline are not");
	g_assert_true(nw_fail_retryable(NW_FAIL_TRANSPORT));
	g_assert_true(nw_fail_retryable(NW_FAIL_STATUS));
	g_assert_true(nw_fail_retryable(NW_FAIL_PREFILL_TIMEOUT));
	g_assert_true(nw_fail_retryable(NW_FAIL_FIRST_TOKEN));
	g_assert_true(nw_fail_retryable(NW_FAIL_HANDOFF));
	/* Issue 9: a read gap before anything reached the client. */
	g_assert_true(nw_fail_retryable(NW_FAIL_READ_GAP));
	g_assert_false(nw_fail_retryable(NW_FAIL_BAD_RESPONSE));
	g_assert_false(nw_fail_retryable(NW_FAIL_PERMANENT));
	g_assert_false(nw_fail_retryable(NW_FAIL_CONTEXT));
	g_assert_false(nw_fail_retryable(NW_FAIL_TOO_LARGE));
	g_assert_false(nw_fail_retryable(NW_FAIL_POOL));
	g_assert_false(nw_fail_retryable(NW_FAIL_DEADLINE));
	g_assert_false(nw_fail_retryable(NW_FAIL_CLIENT));
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/retry/spec-4.2/retryable-statuses", test_retryable_statuses);
	g_test_add_func("/retry/spec-4.2/retryable-failures", test_retryable_failures);
	g_test_add_func("/retry/spec-4.2/backoff-ceiling", test_backoff_ceiling);
	g_test_add_func("/retry/spec-4.2/full-jitter", test_backoff_full_jitter);
	g_test_add_func("/retry/spec-4.2/budget-spends-and-denies", test_budget_spends_and_denies);
	g_test_add_func("/retry/spec-4.2/budget-replenish-capped", test_budget_replenish_capped);
	g_test_add_func("/retry/spec-4.2/budget-zero-replenish", test_budget_zero_replenish);
	g_test_add_func("/retry/issue-9/budget-exact-tenths", test_budget_exact_tenths);
	return g_test_run();
}
