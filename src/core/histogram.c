#include "build-config.h"

#include "core/histogram.h"

#include <math.h>

void
nw_histogram_observe(struct nw_histogram *h, const struct nw_histogram_scale *scale,
                     double value)
{
	uint32_t lo = 0, hi = scale->n;

	if (isnan(value))
		return;
	/* The first bound at or above the value (Prometheus' le). */
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (scale->bounds[mid] < value)
			lo = mid + 1;
		else
			hi = mid;
	}
	h->counts[lo]++;
	h->count++;
	h->sum += value;
}
