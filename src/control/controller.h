/*
 * The controller host (spec 7 to 7.7 and the role-control document;
 * docs/controller.md): it calls the controller plugin with the priced
 * inputs (loads, demand, evidence), applies the host's guards to whatever
 * the plugin proposes, records every proposal with its caller, reason and
 * result, and answers the urgent TTFT path.
 *
 * Pure: no I/O, no clock, no main loop. The daemon's monitor pass and the
 * what-if mode under virtual time call it alike; the caller applies the
 * role changes it returns (to the fleet and the flip history) and arms the
 * urgent wake it asks for.
 *
 * The host's guards, applied to every proposal whatever plugin made it
 * (role-control document, "Guards on role changes"):
 *   - one adjacent move per evaluation, except that a move may take more
 *     than one engine while the pool it feeds is below its floor;
 *   - each engine that moves passes nw_roles_check_move (live, movable,
 *     not pinned, both floors, dwell_s, flip_resident_guard); among the
 *     engines that pass, the one with the least resident work moves (ties:
 *     the lowest index), so flip_resident_guard is judged on the lightest
 *     eligible decode donor;
 *   - a decode-to-prefill move passes spec 7.3: the split it leaves is
 *     inside the measured domain and its decode engines' KV capacity holds
 *     the resident decode work (nw_split_price's in_domain);
 *   - a prefill-to-decode move waits controller.thresholds.cooldown_s after
 *     the last move towards decode, unless panic_ratio is set, the decode
 *     load is at least panic_ratio and the prefill load below shrink;
 *   - controller.advisory: the move is recorded as advised, no role changes.
 * A role change affects new placements only: resident requests keep their
 * engine and reservation (the caller changes the role in the fleet view and
 * nothing else).
 */
#ifndef NW_CONTROL_CONTROLLER_H
#define NW_CONTROL_CONTROLLER_H

#include <narwhal/plugin-abi.h>

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "control/roles.h"
#include "core/config.h"

struct nw_fleet;
struct nw_demand;
struct nw_controller;

struct nw_controller *nw_controller_new(const struct nw_config *cfg);
/* A reload: new floors, thresholds, advisory flag and record capacity;
 * the records, the last move towards decode and a pending urgent trigger
 * are kept. */
void nw_controller_configure(struct nw_controller *c, const struct nw_config *cfg);
void nw_controller_free(struct nw_controller *c);

/* The plugin the host calls (a generation's controller instance). */
struct nw_controller_plugin {
	const char *name;                         /* for the records */
	const struct narwhal_controller_ops *ops;
	void *instance;
};

/* What one evaluation reads. */
struct nw_controller_pass {
	struct nw_fleet *fleet;
	struct nw_demand *demand;
	/* The engines as the guards see them, in fleet order (the monitor's
	 * view: live, pinned, movable, dwell, resident work). */
	const struct nw_role_engine *engines;
	uint32_t n;
	const struct nw_controller_plugin *plugin;
	int64_t now_ns;
};

/* A scheduled evaluation (each monitor pass, after floor repair): call the
 * plugin, apply the guards, record the proposal. Writes the role changes
 * the caller must apply into out (applied, or not applied in advisory
 * mode: the caller records those in the flip history without changing a
 * role), at most max; returns their count. Caller "controller". */
uint32_t nw_controller_scheduled(struct nw_controller *c, const struct nw_controller_pass *p,
                                 struct nw_role_change *out, uint32_t max);

/* --- the urgent TTFT path (role-control document, "Prefill queue
 * projections") -------------------------------------------------------- */

/* A request's projected TTFT (projected_ttft_s) breached slo.ttft_s at
 * now_ns. Returns true when this arms a new urgent evaluation (the caller
 * schedules one wake, to run between monitor passes); false when one is
 * pending already (coalesced: the first trigger is the one evaluated) or
 * one has run since the last scheduled evaluation (one urgent evaluation
 * between two regular passes; the next nw_controller_scheduled lets a
 * trigger arm it again). */
bool nw_controller_urgent_note(struct nw_controller *c, int64_t now_ns, uint64_t prompt_tokens,
                               double projected_ttft_s);
bool nw_controller_urgent_pending(const struct nw_controller *c);

/* The urgent evaluation, at the wake: recheck the triggering prompt on the
 * current split (dismissed, no plugin call, when the queue has drained and
 * it now meets slo.ttft_s), call the plugin with urgent set, and apply at
 * most one adjacent decode-to-prefill move through every guard. Clears the
 * trigger. As nw_controller_scheduled otherwise; caller
 * "controller_urgent". */
uint32_t nw_controller_urgent(struct nw_controller *c, const struct nw_controller_pass *p,
                              struct nw_role_change *out, uint32_t max);

/* Every applied role change, whatever its caller, once the caller has
 * applied it: a move towards decode starts the cooldown; a decode-floor
 * repair (caller "floor_repair", to decode) restarts the evidence window
 * of demand (spec 7.6, reason "decode_recovery"). */
void nw_controller_note_change(struct nw_controller *c, struct nw_demand *demand,
                               const struct nw_role_change *change);

/* --- exposure (spec 7.4, 7.6; docs/state.md "controller") --------------- */

/* {"policy", "advisory", "gate": what blocks movement now (the plugin's
 * reason for proposing no change, or the guard that refused), "last": the
 * last evaluation with its priced inputs, "demand": {short, long},
 * "evidence": {...}, "urgent": {pending, evaluations, moves, dismissed},
 * "proposals": [the proposals that would change the split, oldest first:
 * at_s, caller, reason, split before and proposed, result, refused_by,
 * priced inputs]} (transfer full). ids[i] names engine i; times are
 * seconds since start_ns. */
json_t *nw_controller_to_json(const struct nw_controller *c, const char *const *ids,
                              int64_t start_ns);

/* Counts for the metrics route (docs/metrics.md, "Controller"). */
#define NW_CONTROLLER_RESULTS 6
/* "unchanged", "applied", "advised", "refused", "failed", "dismissed" */
extern const char *const nw_controller_result_names[NW_CONTROLLER_RESULTS];
struct nw_controller_summary {
	uint64_t evaluations[2];        /* scheduled, urgent */
	uint64_t results[2][NW_CONTROLLER_RESULTS]; /* by caller (scheduled, urgent) */
	const char *gate;               /* as "gate" above; NULL: none */
	bool has_last;
	uint32_t proposed_prefill, proposed_decode; /* the last proposal */
	double prefill_load, decode_load;           /* its priced inputs */
	double demand_short, demand_long;
	bool evidence_closed;
	double worst_ratio_current, worst_ratio_proposed;
};
void nw_controller_summary(const struct nw_controller *c, struct nw_controller_summary *out);

#endif /* NW_CONTROL_CONTROLLER_H */
