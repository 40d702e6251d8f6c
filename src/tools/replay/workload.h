/*
 * Synthetic workloads: a sequence of phases, each with its own arrival
 * process (Poisson, or gamma with a coefficient of variation), its own
 * prompt and output length distributions, and a duration. Generated into
 * an ordinary rp_trace so the replay treats it like a file.
 *
 * Spec syntax (--synthetic), phases separated by ';', keys by ',':
 *   rate=R,arrival=poisson|gamma,cv=C,duration=S,input=DIST,output=DIST,
 *   lengths=trace:FILE,name=NAME
 *   DIST := N | fixed:N | uniform:A:B | lognormal:MEDIAN:SIGMA | trace:FILE
 * The JSON file (--workload) holds {"repeat": N, "phases": [{same keys}]}.
 */
#ifndef NW_REPLAY_WORKLOAD_H
#define NW_REPLAY_WORKLOAD_H

#include <stdbool.h>
#include <stdint.h>

#include <glib.h>
#include <jansson.h>

#include "tools/replay/trace.h"

enum rp_dist_kind {
	RP_DIST_FIXED = 0,
	RP_DIST_UNIFORM,    /* integers a..b inclusive */
	RP_DIST_LOGNORMAL,  /* a = median, b = sigma of the log */
	RP_DIST_SAMPLE,     /* uniformly one of samples */
};

struct rp_dist {
	enum rp_dist_kind kind;
	double a, b;
	GArray *samples;    /* uint32_t, RP_DIST_SAMPLE only */
};

struct rp_phase {
	char *name;
	double rate;        /* requests/s; 0 = an idle phase */
	double cv;          /* of the inter-arrival gaps; 1 = Poisson */
	bool gamma;         /* gamma gaps with cv; false = exponential */
	double duration;    /* seconds; <= 0 = open-ended (last phase only) */
	struct rp_dist input, output;
	GArray *pairs;      /* lengths=trace: (input, output) uint32 pairs, or NULL */
};

struct rp_workload {
	GPtrArray *phases;  /* struct rp_phase * */
	unsigned repeat;    /* times the phase sequence runs; >= 1 */
};

struct rp_workload *rp_workload_parse_spec(const char *spec, GError **error);
struct rp_workload *rp_workload_load_file(const char *path, GError **error);
struct rp_workload *rp_workload_from_json(const json_t *doc, const char *what, GError **error);
void rp_workload_free(struct rp_workload *w);

/* Parse one DIST; what names it in errors; output picks the column that
 * trace:FILE samples. */
bool rp_dist_parse(struct rp_dist *d, const char *text, const char *what, bool output,
                   GError **error);
void rp_dist_clear(struct rp_dist *d);
uint32_t rp_dist_sample(const struct rp_dist *d, GRand *rng);

/* One inter-arrival gap in seconds for a mean rate and a CV (gamma when
 * gamma is true, exponential otherwise; cv 0 gives constant gaps). */
double rp_sample_gap(GRand *rng, double rate, double cv, bool gamma);

/* Requests arriving before time_limit (seconds; <= 0: none) and at most
 * max_requests (0: none). Fails when neither bound nor the phases end it. */
struct rp_trace *rp_workload_generate(const struct rp_workload *w, uint64_t seed,
                                      double time_limit, uint64_t max_requests,
                                      GError **error);

/* The longest run narwhal-replay will generate, as a guard. */
#define RP_MAX_GENERATED 10000000u

#endif /* NW_REPLAY_WORKLOAD_H */
