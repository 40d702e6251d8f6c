/*
 * The host services table handed to plugins (struct narwhal_host), backed
 * by the daemon's clock, log, metrics and fleet registry. Each plugin
 * instance gets its own table so its log lines and metrics carry its name.
 */
#ifndef NW_HOST_H
#define NW_HOST_H

#include <narwhal/plugin-abi.h>

#include <glib.h>

#include "core/config.h"
#include "core/pricing.h"
#include "core/profile.h"

/* How a real leg on an engine ended, for passive detection. */
typedef enum nw_leg_outcome {
	NW_LEG_OK,       /* completed */
	NW_LEG_FAILED,   /* failed through the engine's fault */
	NW_LEG_REFUSED,  /* no connection: nothing serves there now */
} nw_leg_outcome;

/* Engine calls by kind, for the per-engine call metrics (docs/metrics.md). */
typedef enum nw_call_kind {
	NW_CALL_TOKENIZE,
	NW_CALL_PREFILL,
	NW_CALL_DECODE,
	NW_CALL_AGGREGATE,
	NW_CALL_KINDS
} nw_call_kind;

/* What the data plane counts per engine, for the monitor and operators. */
struct nw_engine_stats {
	uint64_t legs_placed;       /* engine legs started on it */
	uint64_t legs_failed;       /* of those, failed through its fault */
	int64_t last_placed_ns;     /* host clock of the last leg started; 0: none */
	/* The monitor's stall check (docs/recovery.md); plain counts, so the
	 * request path reads no clock for it: */
	uint32_t legs_out;          /* generation legs sent to it, not yet back */
	uint64_t progress;          /* answer chunks its generation legs received */
	uint32_t handoff_decodes;   /* resident decode legs of prefill/decode pairs
	                             * (the aggregate fallback waits for them) */
	/* Calls that ended (answered or cut), their seconds, and the failures
	 * through its fault (those of legs_failed), by kind: a count and a sum
	 * per engine, so a large fleet's scrape stays small; the fleet-wide
	 * histograms are the serve's. */
	uint64_t calls[NW_CALL_KINDS];
	double call_seconds[NW_CALL_KINDS];
	uint64_t call_failures[NW_CALL_KINDS];
};

/* The fleet registry: the engines as plugins see them, plus what the
 * monitor learnt and the data plane needs. Owned by the daemon; the serve
 * and control layers share it on the one loop. */
struct nw_fleet {
	struct narwhal_fleet_view view;
	struct narwhal_engine_view *engines;
	char **ids;
	struct nw_engine_stats *stats;

	char *model;               /* served model: fleet.model, or the engines'
	                            * as discovered; NULL: not known yet */
	int64_t max_model_len;     /* the model's context length; -1: unknown */
	bool admission_stopped;    /* degraded (spec 7: monitor_failure_limit) */
	uint64_t monitor_plugin_errors; /* failed dialect calls of the monitor, counted
	                                 * with the data plane's plugin_call_errors */
	double retry_after_s;      /* what a refusal while stopped says */

	/* Each engine's measured profile, which the estimator services answer
	 * from (docs/profiles.md); NULL: none. The array is the fleet's, the
	 * profiles are borrowed from a store that outlives the fleet. */
	const struct nw_engine_profile **profiles;

	/* What the engines hold, priced, and their decode corrections
	 * (core/pricing.h): one ledger per engine, and the fleet's. */
	struct nw_engine_ledger *ledger;
	struct nw_fleet_pricing pricing;

	/* Passive detection (docs/recovery.md): the data plane reports the
	 * end of each real leg on an engine. NULL: nobody listens. */
	void (*leg_outcome)(void *data, uint32_t engine, nw_leg_outcome outcome,
	                    const char *detail);
	void *leg_outcome_data;
};

/* What an engine's flags say of the engine itself, not of its state:
 * its profile and what its dialect lets it run (set when the dialects
 * load, fleet-dialects.c). Kept when the state flags are worked out again. */
#define NW_ENGINE_OWN_FLAGS \
	((uint32_t)(NARWHAL_ENGINE_PROFILED | NARWHAL_ENGINE_WHOLE_ONLY | NARWHAL_ENGINE_PAIR_ONLY))

/* An engine's flags taken over from another generation's view of the same
 * engine (a reload, docs/deployment.md): the monitor's verdict (available,
 * draining, quarantined, pinned) comes from `from`; the own flags stay
 * `own`, since each generation answers from its own profile store and
 * dialects. */
static inline uint32_t
nw_engine_flags_follow(uint32_t own, uint32_t from)
{
	return (from & ~NW_ENGINE_OWN_FLAGS) | (own & NW_ENGINE_OWN_FLAGS);
}

/* An engine's flags or role changed (or, for the aggregate fallback, its
 * handoff decodes drained or began): the pricing counts the live prefill
 * pool again when next asked (core/pricing.h). */
static inline void
nw_fleet_changed(struct nw_fleet *fleet)
{
	fleet->pricing.epoch++;
}

/* Engine i serves role to from at_ns (also its dwell timestamp): new
 * placements see it at once, resident requests keep their engine and
 * reservation (spec 5). */
static inline void
nw_fleet_set_role(struct nw_fleet *fleet, uint32_t i, narwhal_role to, int64_t at_ns)
{
	fleet->engines[i].role = to;
	fleet->engines[i].role_since_ns = at_ns;
	nw_fleet_changed(fleet);
}

struct nw_fleet *nw_fleet_new(const struct nw_config *cfg, int64_t now_ns);
void nw_fleet_free(struct nw_fleet *fleet);
/* Give engine i its profile (borrowed; NULL: none) and set or clear
 * NARWHAL_ENGINE_PROFILED in its view to match. */
void nw_fleet_set_profile(struct nw_fleet *fleet, uint32_t i, const struct nw_engine_profile *p);

/* A clock: the daemon's monotonic clock, or a virtual one in a replay. */
typedef int64_t (*nw_clock_fn)(void *data);
int64_t nw_clock_monotonic_ns(void *unused);

/* Plugin metric values recorded through the host table. */
struct nw_plugin_metrics;
struct nw_plugin_metrics *nw_plugin_metrics_new(void);
void nw_plugin_metrics_free(struct nw_plugin_metrics *m);
/* Current value of a metric by full name, e.g.
 * "narwhal_plugin_admission_open_refusals"; NAN when unknown. */
double nw_plugin_metrics_get(const struct nw_plugin_metrics *m, const char *name);
/* Every metric recorded, in name order: fn(name, value, data). */
void nw_plugin_metrics_foreach(const struct nw_plugin_metrics *m,
                               void (*fn)(const char *name, double value, void *data),
                               void *data);

struct nw_host;

/* A host table for one plugin instance. fleet and metrics are borrowed and
 * must outlive the table. */
struct nw_host *nw_host_new(narwhal_plugin_kind kind, const char *plugin_name,
                            nw_clock_fn clock, void *clock_data, struct nw_fleet *fleet,
                            struct nw_plugin_metrics *metrics);
const struct narwhal_host *nw_host_table(const struct nw_host *host);
/* A host for a plugin created only to check its configuration, before the
 * daemon creates it again: its log lines are dropped, so that they are not
 * logged twice. */
void nw_host_set_quiet(struct nw_host *host, bool quiet);
/* The prefix of the plugin's metric names, "narwhal_plugin_<kind>_<name>_". */
const char *nw_host_metric_prefix(const struct nw_host *host);
void nw_host_free(struct nw_host *host);

#endif /* NW_HOST_H */
