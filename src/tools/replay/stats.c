#include "build-config.h"

#include "tools/replay/stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double
rp_percentile(const double *sorted, size_t n, double p)
{
	double rank, frac;
	size_t lo;

	if (n == 0)
		return NAN;
	if (p <= 0)
		return sorted[0];
	if (p >= 100)
		return sorted[n - 1];
	/* The rank p/100 * (n - 1), read between its two neighbours. */
	rank = p / 100.0 * (double)(n - 1);
	lo = (size_t)floor(rank);
	frac = rank - (double)lo;
	if (lo + 1 >= n)
		return sorted[n - 1];
	return sorted[lo] + frac * (sorted[lo + 1] - sorted[lo]);
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

void
rp_latency_of(const double *values, size_t n, struct rp_latency *out)
{
	double *v = g_new(double, MAX(n, 1));
	size_t k = 0;
	double sum = 0;

	for (size_t i = 0; i < n; i++) {
		if (isfinite(values[i])) {
			v[k++] = values[i];
			sum += values[i];
		}
	}
	qsort(v, k, sizeof *v, cmp_double);
	out->n = (uint32_t)k;
	out->mean = k ? sum / (double)k : NAN;
	out->p50 = rp_percentile(v, k, 50);
	out->p90 = rp_percentile(v, k, 90);
	out->p99 = rp_percentile(v, k, 99);
	out->max = k ? v[k - 1] : NAN;
	g_free(v);
}

double
rp_tpot(int64_t first_us, int64_t last_us, uint32_t tokens)
{
	if (tokens < 2 || last_us < first_us)
		return NAN;
	return (double)(last_us - first_us) / 1e6 / (double)(tokens - 1);
}

bool
rp_slo_met_ttft(const struct rp_result *r, const struct rp_slo *slo)
{
	if (r->outcome != RP_OUT_OK)
		return false;
	if (slo->ttft <= 0)
		return true;
	return isfinite(r->ttft) && r->ttft <= slo->ttft;
}

bool
rp_slo_met_tpot(const struct rp_result *r, const struct rp_slo *slo)
{
	if (r->outcome != RP_OUT_OK)
		return false;
	/* One token (or no streaming) leaves no gap to judge: it passes. */
	if (slo->tpot <= 0 || !isfinite(r->tpot))
		return true;
	return r->tpot <= slo->tpot;
}

bool
rp_slo_met(const struct rp_result *r, const struct rp_slo *slo)
{
	return rp_slo_met_ttft(r, slo) && rp_slo_met_tpot(r, slo);
}

static void
count_status(GArray *a, long status)
{
	struct rp_status_count c = { .status = status, .n = 1 };
	guint i;

	for (i = 0; i < a->len; i++) {
		struct rp_status_count *e = &g_array_index(a, struct rp_status_count, i);

		if (e->status == status) {
			e->n++;
			return;
		}
		if (e->status > status)
			break;
	}
	g_array_insert_val(a, i, c);
}

static double
ratio(uint64_t a, uint64_t b)
{
	return b ? (double)a / (double)b : NAN;
}

void
rp_summary_compute(const struct rp_result *res, size_t n, double span,
                   const struct rp_slo *slo, struct rp_summary *out)
{
	double *ttft = g_new(double, MAX(n, 1));
	double *tpot = g_new(double, MAX(n, 1));
	double *e2e = g_new(double, MAX(n, 1));
	uint64_t counted = 0, out_tokens = 0;
	size_t k = 0;

	memset(out, 0, sizeof *out);
	out->statuses = g_array_new(FALSE, FALSE, sizeof(struct rp_status_count));
	out->scheduled = n;
	out->slo_set = slo->ttft > 0 || slo->tpot > 0;
	for (size_t i = 0; i < n; i++) {
		const struct rp_result *r = &res[i];

		out->by_outcome[r->outcome]++;
		if (r->outcome == RP_OUT_NOT_SENT)
			continue;
		out->sent++;
		if (r->late)
			out->late++;
		if (isfinite(r->finished) && r->finished > out->elapsed)
			out->elapsed = r->finished;
		if (r->status != 0)
			count_status(out->statuses, r->status);
		if (isfinite(r->retry_after)) {
			out->retry_after_n++;
			out->retry_after_max = MAX(out->retry_after_max, r->retry_after);
		}
		if (r->outcome == RP_OUT_CANCELLED)
			continue; /* the operator stopped it: neither met nor missed */
		counted++;
		if (r->outcome != RP_OUT_OK) {
			out->failed++;
			continue;
		}
		out->ok++;
		out_tokens += r->output_tokens;
		ttft[k] = r->ttft;
		tpot[k] = r->tpot;
		e2e[k] = r->e2e;
		k++;
		if (rp_slo_met_ttft(r, slo))
			out->met_ttft++;
		if (rp_slo_met_tpot(r, slo))
			out->met_tpot++;
		if (rp_slo_met(r, slo))
			out->met++;
	}
	rp_latency_of(ttft, k, &out->ttft);
	rp_latency_of(tpot, k, &out->tpot);
	rp_latency_of(e2e, k, &out->e2e);
	if (out->elapsed <= 0)
		out->elapsed = span;
	out->offered_rate = n > 1 && span > 0 ? (double)(n - 1) / span : NAN;
	out->throughput = out->elapsed > 0 ? (double)out->ok / out->elapsed : NAN;
	out->output_token_rate = out->elapsed > 0 ? (double)out_tokens / out->elapsed : NAN;
	out->attainment = ratio(out->met, counted);
	out->attainment_ttft = ratio(out->met_ttft, counted);
	out->attainment_tpot = ratio(out->met_tpot, counted);
	out->goodput = out->elapsed > 0 ? (double)out->met / out->elapsed : NAN;
	if (out->retry_after_n == 0)
		out->retry_after_max = NAN;
	g_free(ttft);
	g_free(tpot);
	g_free(e2e);
}

void
rp_summary_clear(struct rp_summary *s)
{
	if (s->statuses)
		g_array_free(s->statuses, TRUE);
	s->statuses = NULL;
}

const char *
rp_outcome_name(enum rp_outcome o)
{
	static const char *const names[RP_OUT_COUNT] = {
		[RP_OUT_OK] = "ok",
		[RP_OUT_HTTP] = "http_error",
		[RP_OUT_ERROR_EVENT] = "error_event",
		[RP_OUT_INCOMPLETE] = "incomplete",
		[RP_OUT_TIMEOUT] = "timeout",
		[RP_OUT_TRANSPORT] = "transport",
		[RP_OUT_CANCELLED] = "cancelled",
		[RP_OUT_NOT_SENT] = "not_sent",
	};

	return o < RP_OUT_COUNT ? names[o] : "unknown";
}
