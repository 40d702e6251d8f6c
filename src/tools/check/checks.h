/*
 * narwhal-check's checks (docs/check.md), run in order on the GLib loop:
 * each engine's health, served model and tokenise (engine-checks.c), every
 * crossed prefill-to-decode pair with real handoffs (pair-checks.c), and
 * the release of an abandoned handoff when its lease expires
 * (lease-check.c). Every check ends in one report record.
 */
#ifndef NW_CHECK_CHECKS_H
#define NW_CHECK_CHECKS_H

#include <narwhal/plugin-abi.h>

#include <stdbool.h>
#include <stdint.h>

#include <glib.h>

#include "control/dialect-call.h"
#include "core/config.h"
#include "core/fleet-dialects.h"
#include "net/upstream.h"
#include "tools/check/report.h"

struct nw_check_options {
	unsigned samples;      /* handoffs per pair (--samples) */
	bool lease_check;      /* --no-lease-check turns it off */
	double lease_wait_s;   /* the longest lease wait (--lease-wait-s) */
};

struct nw_check_run {
	const struct nw_config *cfg;
	const struct nw_check_options *opts;
	struct nw_fleet_dialects *fleet; /* the engines' dialects */
	struct nw_upstream *pool;
	struct nw_check_report *report;
	bool *healthy;         /* per engine: its health check passed */
	char *model;           /* the model the probes ask for, or NULL */
	uint64_t next_handle;  /* probe handles */
};

/* The checks, in the order they run. */
void nw_check_engines(struct nw_check_run *run);
void nw_check_pairs(struct nw_check_run *run);
void nw_check_leases(struct nw_check_run *run);

/* Run the loop until *flag is true (the checks' callbacks set it). */
void nw_check_wait(const bool *flag);

/* --- one engine call of a check (call.c) --------------------------------- */

/* Send a call a dialect built (body transfer full) to engine d under
 * timeout_s (control/dialect-call.h); fn is called once, from the loop, or
 * at once when the call cannot start. */
void nw_check_call(struct nw_check_run *run, const struct nw_dialect *d,
                   struct narwhal_http_call *call, double timeout_s, nw_dialect_answer_fn fn,
                   void *data);

/* {"engine": id, "url": url} (transfer full). */
json_t *nw_check_engine_subject(const struct nw_dialect *d);

/* Human-readable seconds: "850 us", "12 ms", "2.5 s". */
char *nw_check_seconds(double s);

#endif /* NW_CHECK_CHECKS_H */
