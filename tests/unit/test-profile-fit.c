/*
 * The profile fits (core/profile-fit.h; issue 12, "narwhal-profile ...
 * fits the models (the quadratic prefill form; decode with active
 * requests and resident KV tokens as separate inputs); records the
 * measured domain of each"; docs/profiles.md, "Fitting"), checked on
 * exact data, on narwhal-sim's own timing model with noise, and on the
 * inputs they must refuse.
 */
#include "build-config.h"

#include <math.h>
#include <string.h>

#include "core/profile-fit.h"
#include "sim/model.h"

/* The noisy cases use one fixed seed so a failure reproduces. */
#ifndef FIT_SEED
#define FIT_SEED 20261201u
#endif

/* 5% multiplicative log-normal noise: a timing's jitter grows with it. */
#define NOISE_SIGMA 0.05

static double
rel_err(double got, double want)
{
	return fabs(got / want - 1.0);
}

static void
assert_rel(const char *what, double got, double want, double tol)
{
	if (!(rel_err(got, want) <= tol))
		g_error("%s: fitted %.6g, true %.6g (%.3f%% off, allowed %.3f%%)", what, got, want,
		        100 * rel_err(got, want), 100 * tol);
}

/* exp(sigma * N(0, 1)), the normal drawn by Box-Muller. */
static double
noise(GRand *r)
{
	double u1 = g_rand_double_range(r, 1e-12, 1.0), u2 = g_rand_double(r);

	return exp(NOISE_SIGMA * sqrt(-2.0 * log(u1)) * cos(2 * G_PI * u2));
}

/* ---- exact data ---- */

/* Issue 12, "fits the models (the quadratic prefill form)": noiseless
 * data over 1..32k tokens gives the coefficients back to rounding. */
static void
test_prefill_exact(void)
{
	const double a = 0.004, b = 3e-5, c = 5e-10;
	struct nw_prefill_sample s[64];
	struct nw_prefill_profile p;
	size_t n = 0;

	for (uint64_t L = 1; L <= 32768; L *= 2) {
		s[n++] = (struct nw_prefill_sample){ L, a + b * L + c * (double)L * L };
		if (L > 1)
			s[n++] = (struct nw_prefill_sample){ L + L / 2,
			                                     a + b * (L + L / 2) + c * (double)(L + L / 2) * (L + L / 2) };
	}
	g_assert_true(nw_fit_prefill(s, n, &p));
	assert_rel("a", p.a_s, a, 1e-9);
	assert_rel("b", p.b_s, b, 1e-9);
	assert_rel("c", p.c_s, c, 1e-9);
	g_assert_cmpfloat(p.rel_rms_error, <, 1e-12);
}

/* Issue 12, "decode with active requests and resident KV tokens as
 * separate inputs": noiseless data over a B x T grid gives d0, d1 and d2
 * back to rounding. */
static void
test_decode_exact(void)
{
	const double d0 = 0.0064, d1 = 5.2e-8, d2 = 3.2e-5;
	struct nw_decode_sample s[64];
	struct nw_decode_profile p;
	size_t n = 0;

	for (uint32_t B = 1; B <= 64; B *= 2)
		for (uint64_t ctx = 128; ctx <= 8192; ctx *= 4) {
			uint64_t T = B * ctx;

			s[n++] = (struct nw_decode_sample){ B, T, d0 + d1 * T + d2 * B };
		}
	g_assert_true(nw_fit_decode(s, n, &p));
	assert_rel("d0", p.d0_s, d0, 1e-9);
	assert_rel("d1", p.d1_s, d1, 1e-9);
	assert_rel("d2", p.d2_s, d2, 1e-9);
	g_assert_cmpfloat(p.rel_rms_error, <, 1e-12);
}

/* ---- narwhal-sim's presets with noise ---- */

/* What narwhal-profile would measure of one preset, with 5% log-normal
 * noise on every measurement, in seconds:
 *  - prefill: one prompt a step, PREFILL_LENGTHS lengths from 16 tokens
 *    to the model's limit (prefill_length), each measured PREFILL_REPEATS
 *    times;
 *  - decode: a grid of batch sizes below decode_batch_split (so one of
 *    the simulator's two regimes is measured) by resident KV tokens
 *    log-spaced up to the KV cache, where the batch can hold them (16 to
 *    max_model_len tokens a request), each measured DECODE_REPEATS times.
 * The c and d2 terms are at most about an eighth of a measured time, so
 * with 5% noise on each measurement they need many measurements to pin
 * within 5% (docs/profiles.md, "Fitting"). */
#define PREFILL_SHORT 8
#define PREFILL_LONG 24
#define PREFILL_LENGTHS (PREFILL_SHORT + PREFILL_LONG)
#define PREFILL_REPEATS 1280
#define DECODE_BATCHES 8
#define DECODE_KV_POINTS 10
#define DECODE_REPEATS 320

/* The i-th length: the first PREFILL_SHORT log-spaced from 16 tokens up
 * to a PREFILL_LONG-th of the limit (where a and b show), the rest evenly
 * spaced up to the limit (where c shows). */
static uint64_t
prefill_length(const struct sim_model *m, int i)
{
	double step = m->max_model_len / (double)PREFILL_LONG;

	if (i < PREFILL_SHORT)
		return (uint64_t)llround(16 * pow(step / 16, i / (double)PREFILL_SHORT));
	return (uint64_t)llround(step * (i - PREFILL_SHORT + 1));
}

static size_t
sweep_prefill(const struct sim_model *m, GRand *r, struct nw_prefill_sample *s)
{
	size_t n = 0;

	for (int i = 0; i < PREFILL_LENGTHS; i++) {
		uint64_t L = prefill_length(m, i);

		for (int k = 0; k < PREFILL_REPEATS; k++) {
			double ms = sim_model_prefill_ms(m, L, (double)L * L);

			s[n++] = (struct nw_prefill_sample){ L, ms / 1e3 * noise(r) };
		}
	}
	return n;
}

static size_t
sweep_decode(const struct sim_model *m, GRand *r, struct nw_decode_sample *s)
{
	static const uint32_t batches[DECODE_BATCHES] = { 1, 2, 4, 8, 16, 32, 64, 90 };
	size_t n = 0;

	for (int i = 0; i < DECODE_BATCHES; i++) {
		uint32_t B = batches[i];

		g_assert_cmpuint(B, <, m->decode_batch_split);
		for (int j = 0; j < DECODE_KV_POINTS; j++) {
			double span = m->kv_capacity_tokens / 512.0;
			uint64_t T = (uint64_t)llround(512 * pow(span, j / (DECODE_KV_POINTS - 1.0)));

			if (T < 16u * B || T > (uint64_t)B * m->max_model_len)
				continue;
			for (int k = 0; k < DECODE_REPEATS; k++) {
				double ms = sim_model_decode_ms(m, T, B);

				s[n++] = (struct nw_decode_sample){ B, T, ms / 1e3 * noise(r) };
			}
		}
	}
	return n;
}

/* The largest relative miss of a fit's prediction against the preset
 * over the measured points (what an estimator would be asked). */
static double
prefill_miss(const struct sim_model *m, const struct nw_prefill_profile *p)
{
	double worst = 0;

	for (int i = 0; i < PREFILL_LENGTHS; i++) {
		double L = (double)prefill_length(m, i);
		double want = sim_model_prefill_ms(m, (uint64_t)L, L * L) / 1e3;

		worst = MAX(worst, rel_err(p->a_s + p->b_s * L + p->c_s * L * L, want));
	}
	return worst;
}

static double
decode_miss(const struct sim_model *m, const struct nw_decode_sample *s, size_t n,
            const struct nw_decode_profile *d)
{
	double worst = 0;

	for (size_t i = 0; i < n; i++) {
		double want = sim_model_decode_ms(m, s[i].kv_tokens, s[i].active) / 1e3;
		double got = d->d0_s + d->d1_s * (double)s[i].kv_tokens + d->d2_s * s[i].active;

		worst = MAX(worst, rel_err(got, want));
	}
	return worst;
}

/* Issue 12, "Profiling narwhal-sim recovers its preset's coefficients
 * within 5%": the fits over a realistic sweep of the simulator's own
 * model, with 5% noise, are within 5% of each coefficient of the preset. */
static void
test_sim_recovery(gconstpointer data)
{
	const char *name = data;
	static struct nw_prefill_sample ps[PREFILL_LENGTHS * PREFILL_REPEATS];
	static struct nw_decode_sample ds[DECODE_BATCHES * DECODE_KV_POINTS * DECODE_REPEATS];
	struct nw_prefill_profile p;
	struct nw_decode_profile d;
	struct sim_model m;
	GRand *r = g_rand_new_with_seed(FIT_SEED);
	size_t np, nd;

	g_assert_true(sim_model_preset(name, &m));
	np = sweep_prefill(&m, r, ps);
	nd = sweep_decode(&m, r, ds);
	g_rand_free(r);

	g_assert_true(nw_fit_prefill(ps, np, &p));
	assert_rel("prefill a", p.a_s, m.prefill_a_ms / 1e3, 0.05);
	assert_rel("prefill b", p.b_s, m.prefill_b_ms / 1e3, 0.05);
	assert_rel("prefill c", p.c_s, m.prefill_c_ms / 1e3, 0.05);
	/* What the estimators use the fit for: predictions, which are
	 * tighter than the coefficients. */
	g_assert_cmpfloat(prefill_miss(&m, &p), <, 0.01);
	g_test_message("%s prefill: a %.2f%%, b %.2f%%, c %.2f%% off; prediction %.2f%% off at worst; "
	               "rel_rms %.4f", name,
	               100 * rel_err(p.a_s, m.prefill_a_ms / 1e3),
	               100 * rel_err(p.b_s, m.prefill_b_ms / 1e3),
	               100 * rel_err(p.c_s, m.prefill_c_ms / 1e3), 100 * prefill_miss(&m, &p),
	               p.rel_rms_error);

	g_assert_true(nw_fit_decode(ds, nd, &d));
	assert_rel("decode d0", d.d0_s, m.decode_small[0] / 1e3, 0.05);
	assert_rel("decode d1", d.d1_s, m.decode_small[1] / 1e3, 0.05);
	assert_rel("decode d2", d.d2_s, m.decode_small[2] / 1e3, 0.05);
	g_assert_cmpfloat(decode_miss(&m, ds, nd, &d), <, 0.01);
	g_test_message("%s decode: d0 %.2f%%, d1 %.2f%%, d2 %.2f%% off; prediction %.2f%% off at worst; "
	               "rel_rms %.4f", name,
	               100 * rel_err(d.d0_s, m.decode_small[0] / 1e3),
	               100 * rel_err(d.d1_s, m.decode_small[1] / 1e3),
	               100 * rel_err(d.d2_s, m.decode_small[2] / 1e3), 100 * decode_miss(&m, ds, nd, &d),
	               d.rel_rms_error);
}

/* ---- the error figure ---- */

/* docs/profiles.md, "Fitting": rel_rms_error is the root mean square of
 * (fit - measured) / measured, so it is about zero on clean data and near
 * the noise's size (5%) on noisy data. */
static void
test_error_figure(void)
{
	static struct nw_prefill_sample s[PREFILL_LENGTHS * PREFILL_REPEATS];
	static struct nw_decode_sample ds[DECODE_BATCHES * DECODE_KV_POINTS * DECODE_REPEATS];
	struct nw_prefill_profile clean, noisy;
	struct nw_decode_profile dclean, dnoisy;
	struct sim_model m;
	GRand *r = g_rand_new_with_seed(FIT_SEED);
	size_t n, nd;

	g_assert_true(sim_model_preset("llama3-8b-h100", &m));
	n = sweep_prefill(&m, r, s);
	g_assert_true(nw_fit_prefill(s, n, &noisy));
	nd = sweep_decode(&m, r, ds);
	g_assert_true(nw_fit_decode(ds, nd, &dnoisy));
	g_rand_free(r);

	for (size_t i = 0; i < n; i++)
		s[i].seconds = sim_model_prefill_ms(&m, s[i].tokens, (double)s[i].tokens * s[i].tokens) / 1e3;
	g_assert_true(nw_fit_prefill(s, n, &clean));
	for (size_t i = 0; i < nd; i++)
		ds[i].seconds = sim_model_decode_ms(&m, ds[i].kv_tokens, ds[i].active) / 1e3;
	g_assert_true(nw_fit_decode(ds, nd, &dclean));

	g_assert_cmpfloat(clean.rel_rms_error, <, 1e-9);
	g_assert_cmpfloat(dclean.rel_rms_error, <, 1e-9);
	g_assert_cmpfloat(noisy.rel_rms_error, >, 0.04);
	g_assert_cmpfloat(noisy.rel_rms_error, <, 0.06);
	g_assert_cmpfloat(dnoisy.rel_rms_error, >, 0.04);
	g_assert_cmpfloat(dnoisy.rel_rms_error, <, 0.06);
}

/* ---- the measured domain ---- */

/* Issue 12, "records the measured domain of each": the fits carry the
 * least and greatest length, batch and KV tokens, and the sample count. */
static void
test_domain(void)
{
	struct nw_prefill_sample s[] = {
		{ 512, 0.02 }, { 64, 0.004 }, { 8192, 0.4 }, { 512, 0.021 }, { 2048, 0.07 },
	};
	struct nw_decode_sample d[] = {
		{ 4, 4096, 0.0070 }, { 32, 8192, 0.0085 }, { 4, 65536, 0.0100 },
		{ 32, 262144, 0.0210 }, { 16, 1024, 0.0072 },
	};
	struct nw_prefill_profile p;
	struct nw_decode_profile q;

	g_assert_true(nw_fit_prefill(s, G_N_ELEMENTS(s), &p));
	g_assert_cmpuint(p.min_tokens, ==, 64);
	g_assert_cmpuint(p.max_tokens, ==, 8192);
	g_assert_cmpuint(p.samples, ==, 5);

	g_assert_true(nw_fit_decode(d, G_N_ELEMENTS(d), &q));
	g_assert_cmpuint(q.min_active, ==, 4);
	g_assert_cmpuint(q.max_active, ==, 32);
	g_assert_cmpuint(q.min_kv_tokens, ==, 1024);
	g_assert_cmpuint(q.max_kv_tokens, ==, 262144);
	g_assert_cmpuint(q.samples, ==, 5);
}

/* ---- refusals ---- */

static const struct nw_prefill_profile untouched_prefill = { .a_s = 42, .samples = 7 };
static const struct nw_decode_profile untouched_decode = { .d0_s = 42, .samples = 7 };

static void
assert_prefill_refused(const struct nw_prefill_sample *s, size_t n)
{
	struct nw_prefill_profile p = untouched_prefill;

	g_assert_false(nw_fit_prefill(s, n, &p));
	g_assert_cmpmem(&p, sizeof(p), &untouched_prefill, sizeof(untouched_prefill));
}

static void
assert_decode_refused(const struct nw_decode_sample *s, size_t n)
{
	struct nw_decode_profile p = untouched_decode;

	g_assert_false(nw_fit_decode(s, n, &p));
	g_assert_cmpmem(&p, sizeof(p), &untouched_decode, sizeof(untouched_decode));
}

/* profile-fit.h: "fewer than three distinct lengths" cannot determine
 * three coefficients, however many samples there are. */
static void
test_refuse_two_lengths(void)
{
	struct nw_prefill_sample s[] = {
		{ 128, 0.01 }, { 1024, 0.05 }, { 128, 0.011 }, { 1024, 0.052 }, { 128, 0.0105 },
	};

	assert_prefill_refused(s, G_N_ELEMENTS(s));
	assert_prefill_refused(s, 2);
	assert_prefill_refused(s, 0);
	assert_prefill_refused(NULL, 3);
}

/* docs/profiles.md, "Fitting": a numerically singular system is refused.
 * Lengths that differ by one part in 1e9 are three lengths, but the
 * system they give is singular in double precision. */
static void
test_refuse_singular_prefill(void)
{
	const uint64_t base = 1000000000u;
	struct nw_prefill_sample s[] = {
		{ base, 1.0 }, { base + 1, 1.0 }, { base + 2, 1.0 },
	};

	assert_prefill_refused(s, G_N_ELEMENTS(s));
}

/* docs/profiles.md, "Fitting": a measurement that is not a finite time
 * above zero (NaN, infinity, zero, negative) is refused, not fitted
 * around. */
static void
test_refuse_bad_times(void)
{
	const double bad[] = { NAN, INFINITY, 0.0, -0.01 };

	for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
		struct nw_prefill_sample s[] = {
			{ 128, 0.01 }, { 1024, 0.05 }, { 4096, bad[i] }, { 8192, 0.4 },
		};
		struct nw_decode_sample d[] = {
			{ 1, 128, 0.007 }, { 8, 1024, 0.0075 }, { 1, 8192, 0.0072 }, { 8, 128, bad[i] },
		};

		assert_prefill_refused(s, G_N_ELEMENTS(s));
		assert_decode_refused(d, G_N_ELEMENTS(d));
	}
}

/* profile-fit.h, "a grid that varies B and T apart": a grid varying B
 * alone, T alone, or both in step (every request the same context) cannot
 * tell d1 from d2 or from d0, and is refused. */
static void
test_refuse_dependent_grid(void)
{
	struct nw_decode_sample b_only[6], t_only[6], in_step[6];
	struct nw_decode_sample ok[7];

	for (uint32_t i = 0; i < 6; i++) {
		b_only[i] = (struct nw_decode_sample){ 1 + i * 8, 4096, 0.007 + i * 0.0003 };
		t_only[i] = (struct nw_decode_sample){ 16, 1024 + i * 4096, 0.007 + i * 0.0002 };
		in_step[i] = (struct nw_decode_sample){ 1 + i * 8, (1 + i * 8) * 512u, 0.007 + i * 0.0005 };
		ok[i] = in_step[i];
	}
	assert_decode_refused(b_only, G_N_ELEMENTS(b_only));
	assert_decode_refused(t_only, G_N_ELEMENTS(t_only));
	assert_decode_refused(in_step, G_N_ELEMENTS(in_step));
	assert_decode_refused(in_step, 2);

	/* One point off that line is enough to determine the fit. */
	ok[6] = (struct nw_decode_sample){ 1, 8192, 0.0075 };
	{
		struct nw_decode_profile p;

		g_assert_true(nw_fit_decode(ok, G_N_ELEMENTS(ok), &p));
	}
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/profile-fit/prefill/exact", test_prefill_exact);
	g_test_add_func("/profile-fit/decode/exact", test_decode_exact);
	g_test_add_data_func("/profile-fit/sim/llama3-8b-h100", "llama3-8b-h100", test_sim_recovery);
	g_test_add_data_func("/profile-fit/sim/opt-13b-a100", "opt-13b-a100", test_sim_recovery);
	g_test_add_func("/profile-fit/error/clean-and-noisy", test_error_figure);
	g_test_add_func("/profile-fit/domain", test_domain);
	g_test_add_func("/profile-fit/refuse/two-lengths", test_refuse_two_lengths);
	g_test_add_func("/profile-fit/refuse/singular", test_refuse_singular_prefill);
	g_test_add_func("/profile-fit/refuse/bad-times", test_refuse_bad_times);
	g_test_add_func("/profile-fit/refuse/dependent-grid", test_refuse_dependent_grid);
	return g_test_run();
}
