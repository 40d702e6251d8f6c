/*
 * A reader of an engine's /metrics page in the Prometheus text exposition
 * format (version 0.0.4), shared by the dialects whose engines serve one
 * (parse_metrics, ABI 2.1). Each dialect names the families it reads and
 * what kind of value each is; the reader walks the body in place, with no
 * allocation, and merges the series of one family.
 */
#ifndef NW_PLUGIN_PROM_TEXT_H
#define NW_PLUGIN_PROM_TEXT_H

#include <stdbool.h>
#include <stddef.h>

/* What a family's value is: which values are valid and how the series of
 * one family (one per model or per data-parallel engine) merge. */
enum prom_kind {
	PROM_COUNT, /* a whole number from 0 to 2^53; series add up */
	PROM_RATIO, /* 0 to 1; the highest series wins */
	PROM_TIME,  /* Unix seconds, above 0 and finite; the highest wins */
};

struct prom_family {
	const char *name;
	enum prom_kind kind;
};

/* One family's result: seen is false when the body has no sample of it. */
struct prom_value {
	bool seen;
	double value;
};

/* Read a body of len bytes (not terminated) for the n families, filling
 * out[0..n). 0 when at least one family was seen; -EPROTO when the body is
 * malformed where it matters (a line that is neither blank, a comment nor a
 * sample, or a sample of a family read here that does not follow the format
 * or whose value does not fit its kind) or has none of the families;
 * -EINVAL for bad arguments. Samples of other families need only start
 * with a metric name, so a family an engine adds later cannot break
 * monitoring. */
int prom_text_read(const char *body, size_t len, const struct prom_family *families,
                   size_t n, struct prom_value *out);

#endif /* NW_PLUGIN_PROM_TEXT_H */
