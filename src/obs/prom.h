/*
 * Writing the Prometheus text exposition format (version 0.0.4), for GET
 * /metrics (docs/metrics.md): metric families with HELP and TYPE, samples
 * with escaped label values, and histograms (core/histogram.h). Written
 * for a scrape of a large fleet: no printf on the per-sample path, and
 * label text that many samples share can be rendered once.
 */
#ifndef NW_OBS_PROM_H
#define NW_OBS_PROM_H

#include <stdbool.h>
#include <stdint.h>

#include <glib.h>

#include "core/histogram.h"

/* "# HELP name help\n# TYPE name type\n"; type is "counter", "gauge",
 * "histogram" or "untyped". Help text is escaped (backslash, newline). */
void nw_prom_family(GString *out, const char *name, const char *type, const char *help);

/* "name{k="v",...} value\n". labels: key, value pairs, NULL-terminated
 * (may be NULL for none); values are escaped (backslash, quote, newline).
 * Values print as integers when whole, +Inf/-Inf/NaN as Prometheus spells
 * them. */
void nw_prom_sample(GString *out, const char *name, const char *const *labels, double value);

/* The same, with pre (label text from nw_prom_labels_append, may be NULL
 * or empty) before the labels. */
void nw_prom_sample_pre(GString *out, const char *name, const char *pre,
                        const char *const *labels, double value);

/* Append labels as they appear between the braces: k="v",k2="v2". */
void nw_prom_labels_append(GString *out, const char *const *labels);

/* Whether name is a valid metric name: [a-zA-Z_:][a-zA-Z0-9_:]*. */
bool nw_prom_name_valid(const char *name);

/* name_bucket{labels,le="..."} cumulative, with the +Inf bucket equal to
 * name_count; name_sum, name_count. */
void nw_prom_histogram_write(GString *out, const char *name, const char *const *labels,
                             const struct nw_histogram_scale *scale,
                             const struct nw_histogram *h);

#endif /* NW_OBS_PROM_H */
