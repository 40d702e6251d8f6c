/*
 * Histograms whose observation costs no allocation and no lock: a fixed
 * bucket array, a count and a sum, zero when new. The bucket bounds live
 * apart, in a scale shared by every histogram of one kind, so a zeroed
 * struct (the daemon's metrics, docs/metrics.md) is ready to use and the
 * exposition writer (obs/prom.h) reads both.
 */
#ifndef NW_HISTOGRAM_H
#define NW_HISTOGRAM_H

#include <stdint.h>

#define NW_HISTOGRAM_MAX_BOUNDS 24

/* Upper bounds, ascending and finite; +Inf is implied. */
struct nw_histogram_scale {
	const double *bounds;
	uint32_t n;            /* at most NW_HISTOGRAM_MAX_BOUNDS */
};

struct nw_histogram {
	/* counts[i]: observations <= bounds[i] not in an earlier bucket;
	 * counts[scale->n]: the rest (the +Inf bucket). */
	uint64_t counts[NW_HISTOGRAM_MAX_BOUNDS + 1];
	uint64_t count;
	double sum;
};

/* A bucket search and three additions. NaN is ignored. */
void nw_histogram_observe(struct nw_histogram *h, const struct nw_histogram_scale *scale,
                          double value);

#endif /* NW_HISTOGRAM_H */
