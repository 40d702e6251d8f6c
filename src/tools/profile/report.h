/*
 * What narwhal-profile shows (docs/profiles.md, "The tool's output"): a
 * progress bar on standard error while it is a terminal, the engines that
 * could not be profiled on standard error as they fail, and at the end a
 * summary per engine (its fitted coefficients, domains, samples and fit
 * errors, and the store written) as text or as one JSON document.
 */
#ifndef NW_PROFILE_REPORT_H
#define NW_PROFILE_REPORT_H

#include <stdbool.h>
#include <stdio.h>

#include <glib.h>
#include <jansson.h>

struct nw_prof_run;
struct nw_prof_report;

/* json: the summary as JSON; progress: a progress bar on err. */
struct nw_prof_report *nw_prof_report_new(FILE *out, FILE *err, bool json, bool progress);
void nw_prof_report_free(struct nw_prof_report *r);

/* Work units: plan adds to the whole, done to what is finished, and the
 * bar shows the share with a line on what runs now. */
void nw_prof_report_plan(struct nw_prof_report *r, double units);
void nw_prof_report_done(struct nw_prof_report *r, double units);
void nw_prof_report_progress(struct nw_prof_report *r, const char *fmt, ...) G_GNUC_PRINTF(2, 3);

/* An engine that could not be profiled, on err at once. */
void nw_prof_report_failed(struct nw_prof_report *r, const char *engine, const char *reason);

/* A line of the run's own (a warning) on err. */
void nw_prof_report_note(struct nw_prof_report *r, const char *fmt, ...) G_GNUC_PRINTF(2, 3);

struct nw_prof_outcome {
	const char *config;
	const char *store;
	bool written;
	GPtrArray *kept;            /* ids of old entries kept (borrowed strings) */
	double seconds;
	json_t *profiles;           /* the written store's JSON (borrowed), or NULL */
};

/* The summary (text or JSON) on out. */
void nw_prof_report_finish(struct nw_prof_report *r, const struct nw_prof_run *run,
                           const struct nw_prof_outcome *o);

#endif /* NW_PROFILE_REPORT_H */
