/* What the programs of bench/decision share (common.h). */
#include "build-config.h"

#include "common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void
bench_profile_init(struct nw_engine_profile *p)
{
	memset(p, 0, sizeof *p);
	p->prefill = (struct nw_prefill_profile){ .a_s = 0.012, .b_s = 9.5e-05, .c_s = 1.25e-09,
	                                          .min_tokens = 1, .max_tokens = 32768,
	                                          .samples = 40, .rel_rms_error = 0.03 };
	p->decode = (struct nw_decode_profile){ .d0_s = 0.011, .d1_s = 2e-08, .d2_s = 0.00015,
	                                        .min_active = 1, .max_active = 4096,
	                                        .min_kv_tokens = 0, .max_kv_tokens = 100000000,
	                                        .samples = 96, .rel_rms_error = 0.02 };
}

void
bench_residents_init(struct nw_fleet *fleet, GRand *rand)
{
	for (uint32_t i = 0; i < fleet->view.n_engines; i++) {
		struct narwhal_engine_view *e = &fleet->engines[i];

		if (e->role == NARWHAL_ROLE_PREFILL) {
			e->resident_prefill = g_rand_int_range(rand, 0, 3) == 0 ? 1 : 0;
			e->queued_prefill = (uint32_t)g_rand_int_range(rand, 0, 3);
		} else {
			e->resident_decode = (uint32_t)g_rand_int_range(rand, 0, 65);
			e->resident_kv_tokens = (uint64_t)e->resident_decode *
			                        (uint64_t)g_rand_int_range(rand, 200, 4000);
		}
	}
}

int64_t
bench_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int
cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

double
bench_percentile_us(int64_t *ns, size_t n, double q)
{
	size_t k = (size_t)ceil(q * (double)n);

	qsort(ns, n, sizeof *ns, cmp_i64);
	return (double)ns[k == 0 ? 0 : k - 1] / 1000.0;
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

double
bench_median(double *v, size_t n)
{
	qsort(v, n, sizeof *v, cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}
