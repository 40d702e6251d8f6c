/*
 * Least-squares fits of the profile models (docs/profiles.md, "Fitting").
 *
 * Both models are linear in three coefficients, so each fit is a
 * three-column least-squares problem. Two choices keep it well
 * conditioned and honest:
 *
 *  - the inputs are scaled to [0, 1] by their largest value before the
 *    design matrix is formed, so the L^2 column of a 32k-token sweep
 *    (about 1e9) does not swamp the constant column, and the problem is
 *    solved by a QR factorisation built one row at a time with Givens
 *    rotations rather than through the normal equations, which would
 *    square its condition number;
 *  - each row is divided by its time, so what is minimised is the sum
 *    of squared relative errors: timings span orders of magnitude across
 *    a sweep and their noise grows with them, and this is the figure the
 *    fit reports (rel_rms_error).
 *
 * Nothing is allocated: the factor is a 3x3 triangle and its right-hand
 * side.
 */
#include "build-config.h"

#include <math.h>
#include <string.h>

#include <glib.h>

#include "core/profile-fit.h"

/* A column whose part outside the span of the columns before it is below
 * this share of its length makes the system singular for our purposes:
 * the data cannot tell its coefficient from the others'. */
#define RANK_TOLERANCE 1e-9

/* The upper-triangular factor R of the weighted design matrix with the
 * transformed right-hand side as a fourth column, and the squared length
 * of each design column (for the rank test). */
struct lsq3 {
	double r[3][4];
	double col_sq[3];
};

/* Rotate one row (x0, x1, x2 | y) into the factor. */
static void
lsq3_add(struct lsq3 *q, const double x[3], double y)
{
	double v[4] = { x[0], x[1], x[2], y };

	for (int k = 0; k < 3; k++)
		q->col_sq[k] += x[k] * x[k];
	for (int k = 0; k < 3; k++) {
		double h, c, s;

		if (v[k] == 0.0)
			continue;
		h = hypot(q->r[k][k], v[k]);
		c = q->r[k][k] / h;
		s = v[k] / h;
		for (int j = k; j < 4; j++) {
			double rk = q->r[k][j];

			q->r[k][j] = c * rk + s * v[j];
			v[j] = c * v[j] - s * rk;
		}
	}
}

/* Back-substitute R beta = rhs; false when a column is (numerically)
 * dependent on the ones before it. */
static bool
lsq3_solve(const struct lsq3 *q, double beta[3])
{
	for (int k = 2; k >= 0; k--) {
		double sum = q->r[k][3];

		if (!(fabs(q->r[k][k]) > RANK_TOLERANCE * sqrt(q->col_sq[k])))
			return false;
		for (int j = k + 1; j < 3; j++)
			sum -= q->r[k][j] * beta[j];
		beta[k] = sum / q->r[k][k];
		if (!isfinite(beta[k]))
			return false;
	}
	return true;
}

static bool
valid_seconds(double s)
{
	return isfinite(s) && s > 0.0;
}

/* One sample as a design row (scaled inputs) and its measured time. */
typedef void (*row_fn)(const void *samples, size_t i, const double scale[2], double x[3],
                       double *y);

static double
dot3(const double x[3], const double beta[3])
{
	return x[0] * beta[0] + x[1] * beta[1] + x[2] * beta[2];
}

/* One weighted least-squares solve; each row is divided by prev's fit of
 * it when prev is given and positive there, else by the measurement. */
static bool
solve_pass(const void *samples, size_t n, row_fn row, const double scale[2],
           const double *prev, double beta[3])
{
	struct lsq3 q;

	memset(&q, 0, sizeof(q));
	for (size_t i = 0; i < n; i++) {
		double x[3], y, f = 0.0, w;

		row(samples, i, scale, x, &y);
		if (prev)
			f = dot3(x, prev);
		w = 1.0 / (f > 0.0 ? f : y);
		for (int k = 0; k < 3; k++)
			x[k] *= w;
		lsq3_add(&q, x, w * y);
	}
	return lsq3_solve(&q, beta);
}

/* The fit in scaled inputs, and the root mean square of its relative
 * error. Weighting by the noisy measurements biases the fit low (by
 * about 1.5 sigma^2 under log-normal noise), so a second pass weights by
 * the first pass's fitted times instead. */
static bool
fit3(const void *samples, size_t n, row_fn row, const double scale[2], double beta[3],
     double *rel_rms)
{
	double first[3], sum_sq = 0.0;

	if (!solve_pass(samples, n, row, scale, NULL, first) ||
	    !solve_pass(samples, n, row, scale, first, beta))
		return false;
	for (size_t i = 0; i < n; i++) {
		double x[3], y, e;

		row(samples, i, scale, x, &y);
		e = dot3(x, beta) / y - 1.0;
		sum_sq += e * e;
	}
	*rel_rms = sqrt(sum_sq / (double)n);
	return isfinite(*rel_rms);
}

/* Prefill: a + b*L + c*L^2 with x = L / max_tokens. */
static void
prefill_row(const void *samples, size_t i, const double scale[2], double x[3], double *y)
{
	const struct nw_prefill_sample *s = (const struct nw_prefill_sample *)samples + i;
	double l = (double)s->tokens / scale[0];

	x[0] = 1.0;
	x[1] = l;
	x[2] = l * l;
	*y = s->seconds;
}

bool
nw_fit_prefill(const struct nw_prefill_sample *s, size_t n, struct nw_prefill_profile *out)
{
	struct nw_prefill_profile p;
	uint64_t seen[2] = { 0, 0 };
	size_t distinct = 0;
	double beta[3], scale[2];

	if (!s || !out || n < 3 || n > UINT32_MAX)
		return false;
	memset(&p, 0, sizeof(p));
	p.min_tokens = UINT64_MAX;
	for (size_t i = 0; i < n; i++) {
		uint64_t L = s[i].tokens;

		if (!valid_seconds(s[i].seconds))
			return false;
		p.min_tokens = MIN(p.min_tokens, L);
		p.max_tokens = MAX(p.max_tokens, L);
		/* Only whether there are three distinct lengths matters. */
		if (distinct < 3 && (distinct < 1 || L != seen[0]) && (distinct < 2 || L != seen[1])) {
			if (distinct < 2)
				seen[distinct] = L;
			distinct++;
		}
	}
	if (distinct < 3)
		return false;

	scale[0] = (double)p.max_tokens;
	scale[1] = 1.0;
	if (!fit3(s, n, prefill_row, scale, beta, &p.rel_rms_error))
		return false;
	p.a_s = beta[0];
	p.b_s = beta[1] / scale[0];
	p.c_s = beta[2] / (scale[0] * scale[0]);
	p.samples = (uint32_t)n;
	if (!isfinite(p.b_s) || !isfinite(p.c_s))
		return false;
	*out = p;
	return true;
}

/* Decode: d0 + d1*T + d2*B with T and B each scaled by its largest value. */
static void
decode_row(const void *samples, size_t i, const double scale[2], double x[3], double *y)
{
	const struct nw_decode_sample *s = (const struct nw_decode_sample *)samples + i;

	x[0] = 1.0;
	x[1] = (double)s->kv_tokens / scale[0];
	x[2] = (double)s->active / scale[1];
	*y = s->seconds;
}

bool
nw_fit_decode(const struct nw_decode_sample *s, size_t n, struct nw_decode_profile *out)
{
	struct nw_decode_profile p;
	double beta[3], scale[2];

	if (!s || !out || n < 3 || n > UINT32_MAX)
		return false;
	memset(&p, 0, sizeof(p));
	p.min_active = UINT32_MAX;
	p.min_kv_tokens = UINT64_MAX;
	for (size_t i = 0; i < n; i++) {
		if (!valid_seconds(s[i].seconds))
			return false;
		p.min_active = MIN(p.min_active, s[i].active);
		p.max_active = MAX(p.max_active, s[i].active);
		p.min_kv_tokens = MIN(p.min_kv_tokens, s[i].kv_tokens);
		p.max_kv_tokens = MAX(p.max_kv_tokens, s[i].kv_tokens);
	}
	/* A column of zeros cannot be scaled; it is rank-deficient anyway. */
	if (p.max_active == 0 || p.max_kv_tokens == 0)
		return false;

	scale[0] = (double)p.max_kv_tokens;
	scale[1] = (double)p.max_active;
	/* A grid that moves B and T together (or holds either fixed) leaves
	 * a column in the span of the others: refused by the solve. */
	if (!fit3(s, n, decode_row, scale, beta, &p.rel_rms_error))
		return false;
	p.d0_s = beta[0];
	p.d1_s = beta[1] / scale[0];
	p.d2_s = beta[2] / scale[1];
	p.samples = (uint32_t)n;
	if (!isfinite(p.d1_s) || !isfinite(p.d2_s))
		return false;
	*out = p;
	return true;
}
