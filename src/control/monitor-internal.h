/*
 * The monitor as its modules see it: monitor.c (passes, availability,
 * degraded state), monitor-roles.c (floors, roles, the flip history),
 * engine-probe.c (each engine's health, model and
 * metrics calls on the control pool) and verify.c (the breaker's
 * verification legs).
 */
#ifndef NW_CONTROL_MONITOR_INTERNAL_H
#define NW_CONTROL_MONITOR_INTERNAL_H

#include <glib.h>

#include "control/dialect-call.h"
#include "control/handoff-probe.h"
#include "control/health.h"
#include "control/monitor.h"
#include "control/roles.h"

/* The control-pool call an engine has in flight, at most one at a time:
 * health first, then (when it passed) the model, then the metrics. */
typedef enum nw_probe_kind {
	NW_PROBE_NONE = 0,
	NW_PROBE_HEALTH,
	NW_PROBE_MODELS,
	NW_PROBE_METRICS,
} nw_probe_kind;

/* Monitoring stages, for the failures that make a pass fail. */
#define NW_MONITOR_FAILURES_KEPT 16

struct nw_monitor_failure {
	uint32_t engine;
	const char *stage;            /* static: "health", "models", "metrics", "control_pool", ... */
	char error[160];
};

struct nw_monitor_engine {
	struct nw_monitor *m;
	uint32_t index;
	struct nw_engine_health health;

	nw_probe_kind probe;          /* the call in flight, NONE: idle */
	struct nw_dialect_call *call;
	int64_t waiting_since_ns;     /* for a control connection; 0: not waiting */

	/* The stall check, at pass granularity (monitor.c): */
	uint64_t seen_progress;       /* stats.progress at the pass it last moved */
	int64_t progress_at_ns;       /* that pass */
	int64_t busy_since_ns;        /* first pass with legs out since then; 0: none */
	int64_t idle_since_ns;        /* first pass with none out; 0: legs out */
	char *model;                  /* what it says it serves; NULL: not asked yet */
	int64_t max_model_len;
	struct narwhal_engine_metrics metrics;
	int64_t metrics_at_ns;        /* 0: never read */

	/* The operator's word (admin API, docs/admin.md): */
	bool operator_pin;            /* pinned by the operator, not the configuration */
	bool drain_reported;          /* this drain's completion was logged */

	/* Verification: up to two handoff probes (prefill leg, decode leg). */
	struct nw_handoff_probe *verify[2];
	bool verify_failed;
	char verify_error[256];
};

struct nw_monitor {
	const struct nw_config *cfg;
	struct nw_fleet *fleet;
	const struct nw_dialect *dialects;
	struct nw_upstream *pool;
	nw_clock_fn clock;
	void *clock_data;
	int64_t start_ns;

	struct nw_health_rules rules;
	struct nw_role_rules role_rules;
	struct nw_monitor_engine *engines;
	uint32_t n;
	struct nw_role_engine *role_scratch;
	struct nw_role_change *change_scratch;
	struct nw_flip_history history;
	struct nw_floor_report floors;
	bool model_seen;              /* some engine said which model it serves */
	struct nw_role_change last_advised;  /* advisory mode: the last proposal recorded */

	uint32_t pool_cap;            /* control connections the monitor may hold */
	uint32_t pool_used;
	uint64_t next_probe_handle;

	guint tick;                   /* GLib source of the next pass, 0: stopped */
	uint64_t passes;
	uint64_t passes_before;       /* passes of the monitors a reload replaced */
	uint32_t failed_passes;       /* in a row, with any monitoring failure */
	bool stopped;
	/* This pass's monitoring failures (the first few kept), and the last
	 * failed pass's, for operators. */
	struct nw_monitor_failure failures[NW_MONITOR_FAILURES_KEPT];
	uint32_t n_failures;          /* the monitor's own failures this pass */
	uint32_t answers_failed;      /* engines' model or metrics answers unreadable */
	uint32_t answers_read;        /* ... and read */
	struct nw_monitor_failure last_failures[NW_MONITOR_FAILURES_KEPT];
	uint32_t n_last_failures;
	uint64_t failures_total[NW_MONITOR_STAGES]; /* by stage, across reloads */

	nw_monitor_pass_fn on_pass;
	void *on_pass_data;
	nw_monitor_change_fn on_change;
	void *on_change_data;
};

static inline int64_t
nw_monitor_now(const struct nw_monitor *m)
{
	return m->clock(m->clock_data);
}

/* monitor.c */
/* A monitoring stage failed. answer: an engine's own answer could not be
 * read (its model list or metrics), which fails the pass only when no
 * engine's could; else the monitor itself failed (a control connection, a
 * dialect's builder), which fails the pass. */
void nw_monitor_failed(struct nw_monitor *m, uint32_t engine, const char *stage,
                       const char *error, bool answer);
void nw_monitor_answer_read(struct nw_monitor *m);
void nw_monitor_health_event(struct nw_monitor *m, uint32_t engine, nw_health_event_kind kind,
                             const char *detail);
void nw_monitor_health_step(struct nw_monitor *m, uint32_t engine,
                            const struct nw_health_event *ev, const char *detail);
void nw_monitor_refresh(struct nw_monitor *m);
void nw_monitor_model_seen(struct nw_monitor *m, uint32_t engine);
/* Live engines of a role. */
uint32_t nw_monitor_live_of(const struct nw_monitor *m, narwhal_role role);
/* Live engines of a role that can pair: the split the floors keep
 * (docs/recovery.md, "Role floors"); an aggregate-only engine is outside it. */
uint32_t nw_monitor_split_of(const struct nw_monitor *m, narwhal_role role);

/* monitor-roles.c */
/* A pass's floor repair (spec 7.2). */
void nw_monitor_repair_floors(struct nw_monitor *m, int64_t now);
/* An ejected engine is back: the role it takes. */
void nw_monitor_readmitted(struct nw_monitor *m, uint32_t engine);

/* engine-probe.c */
void nw_engine_probe_pass(struct nw_monitor_engine *e);
void nw_engine_probe_cancel(struct nw_monitor_engine *e);
/* Take n control connections for the monitor's own accounting. */
bool nw_monitor_pool_take(struct nw_monitor *m, uint32_t n);
void nw_monitor_pool_give(struct nw_monitor *m, uint32_t n);

/* verify.c */
void nw_verify_start(struct nw_monitor *m, struct nw_monitor_engine *e);
void nw_verify_cancel(struct nw_monitor_engine *e);

#endif /* NW_CONTROL_MONITOR_INTERNAL_H */
