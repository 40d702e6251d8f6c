/*
 * narwhal-replay's what-if mode (docs/replay.md, "What-if mode"; beyond the
 * spec): the schedule a replay would send to a live endpoint runs instead
 * in one process on a virtual clock, through the daemon's own admission,
 * placement and controller plugins (loaded from the daemon's configuration
 * by the same loader, with the same host services), its pricing and demand
 * ledgers, its floor repair and controller host, in front of narwhal-sim's
 * engine model. The results are narwhal-replay's own (struct rp_run), so
 * the report of a what-if run and of a real run compare directly.
 */
#ifndef NW_REPLAY_WHATIF_H
#define NW_REPLAY_WHATIF_H

#include <stdbool.h>
#include <stdint.h>

#include <glib.h>
#include <jansson.h>

#include "tools/replay/client.h"
#include "tools/replay/trace.h"

struct wi_options {
	const char *config;        /* the daemon's configuration file */
	const char *preset;        /* narwhal-sim's --preset; NULL: opt-13b-a100 */
	const char *model_file;    /* narwhal-sim's --model-file; NULL: none */
	double noise_sigma;        /* narwhal-sim's --noise-sigma */
	uint64_t seed;             /* narwhal-sim's --seed */
	double time_scale;         /* narwhal-sim's --time-scale (> 0) */
	uint32_t engines;          /* replace the fleet by this many; 0: as configured */
	bool aggregate;            /* no engine hands off: every request runs whole */
};

/* What every run of a sweep shares: the configuration (with --engines
 * applied), the engine model and the profile store. */
struct wi_setup;

/* Load and check; NULL with error set, its message naming the file or
 * option at fault (configuration problems are printed to stderr first, as
 * the daemon prints them). */
struct wi_setup *wi_setup_new(const struct wi_options *o, GError **error);
void wi_setup_free(struct wi_setup *s);
/* "what-if:CONFIG", the report's target. */
const char *wi_setup_target(const struct wi_setup *s);
/* The served model's name, for the report. */
const char *wi_setup_model(const struct wi_setup *s);
/* The report's top-level "what_if" object (transfer full). */
json_t *wi_setup_json(const struct wi_setup *s);

struct wi_run_opts {
	uint32_t id_base;          /* request ids are replay-<id_base + i> */
	double timeout_s;          /* narwhal-replay's --timeout, virtual seconds */
	bool stream;               /* false: TTFT is the whole answer, as --no-stream */
	uint32_t prompt_overhead;  /* tokens the server adds (sizing by characters) */
};

/* Run one schedule to its end on a fresh fleet: every request answered,
 * refused, failed or timed out. *what_if is the run's "what_if" object
 * (transfer full): virtual duration, wall time, role changes, proposals.
 * false only when the world could not be made (a plugin that will not
 * load). */
bool wi_run(const struct wi_setup *s, const struct rp_schedule *sched,
            const struct wi_run_opts *o, struct rp_run *out, json_t **what_if, GError **error);

/* One line for the table: virtual and wall time, role changes. */
char *wi_run_summary_line(const json_t *what_if);

#endif /* NW_REPLAY_WHATIF_H */
