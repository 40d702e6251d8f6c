/*
 * What the programs of bench/decision share (bench/decision/README.md):
 * the engines' profile and resident work, the clock they time with, the
 * figures they report.
 */
#ifndef NW_BENCH_DECISION_COMMON_H
#define NW_BENCH_DECISION_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include <glib.h>

#include "core/host.h"
#include "core/profile.h"

/* A profile shaped like an 8B model on one accelerator (the numbers do
 * not matter to the cost of a decision, only that every estimate is in
 * domain). */
void bench_profile_init(struct nw_engine_profile *p);
/* Some resident work in the fleet's view: a third of the prefill engines
 * busy and up to two prefills queued on each, decode engines holding up
 * to 64 streams of up to 4,000 tokens each. */
void bench_residents_init(struct nw_fleet *fleet, GRand *rand);

/* CLOCK_MONOTONIC, in nanoseconds. */
int64_t bench_now_ns(void);
/* The q-quantile (0 < q <= 1) of n samples in nanoseconds, in
 * microseconds: the smallest sample that at least q of them do not
 * exceed. Sorts ns. */
double bench_percentile_us(int64_t *ns, size_t n, double q);
/* The median of n values (n > 0). Sorts v. */
double bench_median(double *v, size_t n);

#endif /* NW_BENCH_DECISION_COMMON_H */
