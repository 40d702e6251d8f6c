/*
 * Writing the Prometheus text exposition format (version 0.0.4), for GET
 * /metrics (docs/metrics.md): metric families with HELP and TYPE, samples
 * with escaped label values, and histograms whose observation costs no
 * allocation and no lock (a bucket array and two sums).
 */
#ifndef NW_OBS_PROM_H
#define NW_OBS_PROM_H

#include <stdbool.h>
#include <stdint.h>

#include <glib.h>

/* "# HELP name help\n# TYPE name type\n"; type is "counter", "gauge",
 * "histogram" or "untyped". Help text is escaped (backslash, newline). */
void nw_prom_family(GString *out, const char *name, const char *type, const char *help);

/* "name{k="v",...} value\n". labels: key, value pairs, NULL-terminated
 * (may be NULL for none); values are escaped (backslash, quote, newline).
 * Values print as integers when whole, +Inf/-Inf/NaN as Prometheus spells
 * them. */
void nw_prom_sample(GString *out, const char *name, const char *const *labels, double value);

/* Whether name is a valid metric name: [a-zA-Z_:][a-zA-Z0-9_:]*. */
bool nw_prom_name_valid(const char *name);

/* A histogram with fixed upper bounds (ascending, finite); +Inf is
 * implied. counts[i] holds observations <= bounds[i] not counted in an
 * earlier bucket; counts[n_bounds] the rest. */
struct nw_prom_histogram {
	const double *bounds;
	uint32_t n_bounds;
	uint64_t *counts;       /* n_bounds + 1 */
	uint64_t count;
	double sum;
};

void nw_prom_histogram_init(struct nw_prom_histogram *h, const double *bounds, uint32_t n);
void nw_prom_histogram_clear(struct nw_prom_histogram *h);
/* No allocation: a bucket search and three additions. NaN is ignored. */
void nw_prom_histogram_observe(struct nw_prom_histogram *h, double value);
/* name_bucket{labels,le="..."} cumulative, name_sum, name_count. */
void nw_prom_histogram_write(GString *out, const char *name, const char *const *labels,
                             const struct nw_prom_histogram *h);

#endif /* NW_OBS_PROM_H */
