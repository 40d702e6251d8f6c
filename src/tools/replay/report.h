/*
 * narwhal-replay's outputs: the JSON summary, the readable table, the
 * per-request CSV, and the gnuplot plot. A report holds one run, or one
 * per rate scale of a --rate-sweep.
 */
#ifndef NW_REPLAY_REPORT_H
#define NW_REPLAY_REPORT_H

#include <stdbool.h>
#include <stdio.h>

#include <glib.h>
#include <jansson.h>

#include "tools/replay/client.h"
#include "tools/replay/stats.h"
#include "tools/replay/trace.h"

struct rp_report_run {
	double scale;
	struct rp_schedule schedule;
	struct rp_run run;
	struct rp_summary summary;
	json_t *what_if;          /* the what-if mode's run object, or NULL (owned) */
	char *what_if_line;       /* its line in the table, or NULL (owned) */
};

struct rp_report {
	const char *url;
	const char *api;          /* "completions" or "chat" */
	const char *model;
	bool stream;
	const char *source;       /* the trace's label */
	uint64_t seed;
	uint32_t prompt_overhead;
	struct rp_slo slo;
	const GPtrArray *phase_names; /* synthetic phases, or NULL */
	GPtrArray *runs;          /* struct rp_report_run * */
	json_t *what_if;          /* the what-if mode's setup, or NULL (borrowed) */
};

/* Fill a run's summary from its results. */
void rp_report_summarize(struct rp_report *rep, struct rp_report_run *rr);

json_t *rp_report_json(const struct rp_report *rep);
void rp_report_table(FILE *f, const struct rp_report *rep);
bool rp_report_write_json(const char *path, const struct rp_report *rep, GError **error);
bool rp_report_write_csv(const char *path, const struct rp_report *rep, GError **error);

/* One CSV field, quoted when it needs to be (exposed for tests). */
void rp_csv_field(GString *out, const char *text);

/* A .png or .svg of latency over time and, for sweeps, attainment and
 * goodput against rate, drawn by gnuplot ($NARWHAL_GNUPLOT or gnuplot on
 * PATH). Fails with a clear message when gnuplot is missing. */
bool rp_report_plot(const char *path, const struct rp_report *rep, GError **error);
bool rp_plot_path_ok(const char *path);

#endif /* NW_REPLAY_REPORT_H */
