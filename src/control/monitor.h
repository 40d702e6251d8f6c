/*
 * The monitor (docs/recovery.md; spec 6 and 7): one pass every
 * controller.monitor_interval_s on the control pool. Each pass probes every
 * engine's health through its dialect, asks an engine that has not said
 * which model it serves, reads the engine's own metrics where the dialect
 * can, verifies ejected engines before readmitting them, repairs the role
 * floors, and keeps the degraded state. The data plane reports real legs'
 * ends (passive detection) through the fleet registry's leg_outcome hook.
 *
 * What the monitor decides it writes into the fleet registry
 * (core/host.h): each engine's availability flags and role, the served
 * model, and whether admission is stopped.
 */
#ifndef NW_CONTROL_MONITOR_H
#define NW_CONTROL_MONITOR_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "control/health.h"
#include "control/roles.h"
#include "core/config.h"
#include "core/dialect.h"
#include "core/host.h"
#include "net/upstream.h"

struct nw_monitor;

struct nw_monitor_options {
	const struct nw_config *cfg;        /* borrowed, outlives the monitor */
	struct nw_fleet *fleet;             /* borrowed: the monitor keeps it current */
	const struct nw_dialect *dialects;  /* one per engine, borrowed */
	struct nw_upstream *control_pool;   /* borrowed; the monitor's own calls */
	nw_clock_fn clock;                  /* the host clock */
	void *clock_data;
	uint32_t control_connections;       /* the control pool's size; 0: from cfg
	                                     * (a reload keeps the pool made at start) */
};

struct nw_monitor *nw_monitor_new(const struct nw_monitor_options *opts);
/* The first pass runs at once, then one every monitor_interval_s. */
void nw_monitor_start(struct nw_monitor *m);
/* No more passes; calls in flight are cancelled. */
void nw_monitor_stop(struct nw_monitor *m);
void nw_monitor_free(struct nw_monitor *m);

/* A reload (docs/deployment.md): before m starts, take over what old (the
 * superseded generation's monitor) learnt about each engine that stays:
 * new_of_old[i] is old engine i's index in m's fleet, UINT32_MAX when the
 * reload removed it. Health, holds (operator drains), the model it
 * serves, its metrics, its role and role time and its pin; the flip
 * history, the degraded state, the served model and the pass count. An
 * engine the reload added is held out of placement until its first health
 * probe passes (NW_HOLD_UNPROBED). old should be stopped first. */
void nw_monitor_adopt(struct nw_monitor *m, const struct nw_monitor *old,
                      const uint32_t *new_of_old);

/* Run one pass now (tests and the operator's readmission). */
void nw_monitor_pass(struct nw_monitor *m);

/* The controller's pass runs on the same tick (ARCHITECTURE.md, section
 * 9): called at the end of every pass. */
typedef void (*nw_monitor_pass_fn)(void *data, struct nw_monitor *m, int64_t now_ns);
void nw_monitor_on_pass(struct nw_monitor *m, nw_monitor_pass_fn fn, void *data);

/* Every role change the monitor records (floor repair, readmission, the
 * operator, the controller; applied or only advised), once it is
 * applied: the controller host's cooldown and evidence window hear of
 * them (control/controller.h, nw_controller_note_change). */
typedef void (*nw_monitor_change_fn)(void *data, const struct nw_role_change *change);
void nw_monitor_on_change(struct nw_monitor *m, nw_monitor_change_fn fn, void *data);

/* The engines as the role rules see them now (live, pinned, movable,
 * role time, resident work), one per engine in fleet order: the
 * controller host's view (borrowed, until the next call on m). */
const struct nw_role_engine *nw_monitor_role_engines(struct nw_monitor *m);

/* A change the controller host returned (nw_controller_scheduled,
 * nw_controller_urgent): recorded in the flip history and logged
 * (role_change, or role_change_advised when not applied: advisory mode
 * records the same move once), and applied to the fleet when applied. */
void nw_monitor_apply_role_change(struct nw_monitor *m, const struct nw_role_change *c);
/* Time 0 of the flip history's at_s (the first monitor's start; a reload
 * keeps it). */
int64_t nw_monitor_start_ns(const struct nw_monitor *m);

/* Operator lifecycle holds (spec 5; the admin API drives them). */
void nw_monitor_drain(struct nw_monitor *m, uint32_t engine, bool drain);
void nw_monitor_eject(struct nw_monitor *m, uint32_t engine);
/* Whether it changed anything: false when the engine is not ejected or its
 * verification is already due (a readmit asked before the next pass). */
bool nw_monitor_readmit(struct nw_monitor *m, uint32_t engine);

/* The operator's pin (admin API, docs/admin.md): a pinned engine keeps its
 * role through floor repair, readmission and the controller. */
void nw_monitor_pin(struct nw_monitor *m, uint32_t engine, bool pinned);
/* "config" (fleet.engines[].pinned), "operator", or NULL when not pinned. */
const char *nw_monitor_pinned_by(const struct nw_monitor *m, uint32_t engine);

/* Move engine to role to (caller, reason: static strings for the flip
 * history) through the host's guards (nw_roles_check_move): applied and
 * recorded when it returns NW_ROLE_GUARD_OK, else nothing changes. It
 * applies whatever controller.advisory says (the operator's word is not
 * advisory); a controller in advisory mode records its proposals instead
 * of calling it. */
nw_role_guard nw_monitor_set_role(struct nw_monitor *m, uint32_t engine, narwhal_role to,
                                  const char *caller, const char *reason);

/* A drain's progress: requests still resident on the engine (prefill and
 * decode), and whether it is drained (a drain hold, none left). The
 * monitor logs engine_drained once per drain, at the pass that sees it. */
uint32_t nw_monitor_residents(const struct nw_monitor *m, uint32_t engine);
bool nw_monitor_draining(const struct nw_monitor *m, uint32_t engine);

/* Health as /narwhal/health shows it (transfer full): {"status": "ok",
 * "degraded" (serving, but something is out or a floor is breached) or
 * "unavailable" (admission is stopped, or no engine can serve), "reasons":
 * [{code, message}], "engines": [...], "roles": {live split, floors, breach,
 * reachable split}, "monitor": {passes, failed passes in a row, the last
 * failed pass's failures}}. Engine errors may name addresses: they are
 * included only for operators (operator true). */
json_t *nw_monitor_to_json(const struct nw_monitor *m, bool operator);

/* Engine i's health (for the metrics route). */
const struct nw_engine_health *nw_monitor_engine_health(const struct nw_monitor *m, uint32_t i);

/* Engine i's last reading of its own metrics (its dialect's
 * parse_metrics) and the reading's age in seconds on the monitor's clock;
 * false when there is none (never read: the dialect reads none, or every
 * read failed). Kept over a reload. */
bool nw_monitor_engine_reading(const struct nw_monitor *m, uint32_t i,
                               struct narwhal_engine_metrics *out, double *age_s);

/* Monitoring stages (what failed in a pass): a stage outside the list is
 * counted as the last, "other". */
#define NW_MONITOR_STAGES 5
extern const char *const nw_monitor_stages[NW_MONITOR_STAGES];

/* The monitor's own figures and the roles' (for the metrics route; the
 * numbers of nw_monitor_to_json's "monitor" and "roles"). Counts run
 * from the daemon's start, across reloads. */
struct nw_monitor_summary {
	const char *status;             /* "ok", "degraded", "unavailable" (static) */
	uint64_t passes;
	uint32_t failed_passes;         /* in a row */
	uint32_t failure_limit;         /* controller.monitor_failure_limit */
	uint64_t failures[NW_MONITOR_STAGES]; /* monitoring failures by stage */
	uint32_t min_prefill, min_decode;
	/* The live split now; the breach and the reachable split of the last
	 * pass. */
	struct nw_floor_report floors;
	/* Role changes by caller (nw_role_callers) and applied (1) or advised. */
	uint64_t role_changes[NW_ROLE_CALLERS][2];
};
void nw_monitor_summary(const struct nw_monitor *m, struct nw_monitor_summary *out);

/* The flip history (controller.flip_history), oldest first. */
json_t *nw_monitor_history_json(const struct nw_monitor *m);

#endif /* NW_CONTROL_MONITOR_H */
