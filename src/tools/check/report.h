/*
 * narwhal-check's results (docs/check.md): one record per check with its
 * verdict, a reason an operator can act on and its measurements; the
 * readable report (a line per check as it ends, then a summary), the JSON
 * document, and a progress line on standard error while it is a terminal.
 */
#ifndef NW_CHECK_REPORT_H
#define NW_CHECK_REPORT_H

#include <stdbool.h>
#include <stdio.h>

#include <glib.h>
#include <jansson.h>

typedef enum nw_check_verdict {
	NW_CHECK_PASS = 0,
	NW_CHECK_WARN,   /* passes, with something to look at */
	NW_CHECK_FAIL,
	NW_CHECK_SKIP,   /* could not run; the reason says why */
} nw_check_verdict;

struct nw_check_report;

/* text: print each check's line to out as it ends (else only the JSON
 * document at the end); progress: a progress line on err. */
struct nw_check_report *nw_check_report_new(FILE *out, FILE *err, bool json, bool progress);
void nw_check_report_free(struct nw_check_report *r);

/* Record one check. subject (transfer full) names what was checked, e.g.
 * {"engine": "sim-0", "url": ...} or {"prefill": ..., "decode": ...};
 * measurements (transfer full, may be NULL). */
void nw_check_report_add(struct nw_check_report *r, const char *check, json_t *subject,
                         nw_check_verdict verdict, json_t *measurements, const char *fmt, ...)
	G_GNUC_PRINTF(6, 7);

/* Replace the progress line (nothing unless progress is on). */
void nw_check_report_progress(struct nw_check_report *r, const char *fmt, ...) G_GNUC_PRINTF(2, 3);

/* The summary (text) or the whole document (JSON); config names the file
 * checked. Returns the exit status: 0 when nothing failed, else 1. */
int nw_check_report_finish(struct nw_check_report *r, const char *config, double seconds);

const char *nw_check_verdict_name(nw_check_verdict v); /* "pass", ... */

#endif /* NW_CHECK_REPORT_H */
