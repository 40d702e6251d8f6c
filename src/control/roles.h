/*
 * Role floors and the record of role changes (spec 7.2, role-control
 * document "Floors, fallback, and degraded capacity"; docs/recovery.md):
 * the host's floor repair, which runs with any controller, the role a
 * readmitted engine takes, the safest reachable split when a floor cannot
 * be met, and the bounded flip history (controller.flip_history). Pure: no
 * I/O, time from the caller; the monitor applies what it returns.
 */
#ifndef NW_CONTROL_ROLES_H
#define NW_CONTROL_ROLES_H

#include <narwhal/plugin-abi.h>

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

/* What the rules need to know about one engine. */
struct nw_role_engine {
	narwhal_role role;         /* NARWHAL_ROLE_PREFILL or NARWHAL_ROLE_DECODE */
	bool live;                 /* available to placement now */
	bool pinned;               /* role fixed by the operator */
	bool movable;              /* its dialect allows per-request roles */
	bool aggregate_only;       /* its dialect cannot pair: it runs whole
	                            * requests, outside the prefill/decode split */
	int64_t role_since_ns;     /* when its role last changed (dwell) */
	uint32_t resident;         /* requests resident in its current phase */
};

struct nw_role_rules {
	uint32_t min_prefill;      /* controller.min_prefill */
	uint32_t min_decode;       /* controller.min_decode */
	double dwell_s;            /* controller.thresholds.dwell_s */
	bool advisory;             /* controller.advisory: record, do not apply */
	uint32_t flip_resident_guard; /* controller.thresholds.flip_resident_guard; 0: none */
};

struct nw_config;
struct nw_dialect;

/* The rules as the configuration sets them (the fields' comments above). */
void nw_role_rules_from_config(struct nw_role_rules *out, const struct nw_config *cfg);
/* One engine as the rules see it, from its view in the fleet and its
 * dialect: live is the view's availability; only an engine whose dialect
 * takes either role per request can move without a restart
 * (plugin-abi.h); resident is its decode streams, or its prefill work
 * resident and waiting for its slots. The monitor and narwhal-replay's
 * what-if mode fill their views alike. */
struct nw_role_engine nw_role_engine_of(const struct narwhal_engine_view *v,
                                        const struct nw_dialect *d);

/* Why a role move is refused (nw_roles_check_move); OK when it may go. */
typedef enum nw_role_guard {
	NW_ROLE_GUARD_OK = 0,
	NW_ROLE_GUARD_SAME_ROLE,      /* it has that role already */
	NW_ROLE_GUARD_NOT_LIVE,       /* out of placement: ejected, held, drained */
	NW_ROLE_GUARD_NOT_MOVABLE,    /* its dialect does not allow per-request roles */
	NW_ROLE_GUARD_PINNED,         /* pinned (at its current role) */
	NW_ROLE_GUARD_PREFILL_FLOOR,  /* the live prefill engines would fall below min_prefill */
	NW_ROLE_GUARD_DECODE_FLOOR,   /* the live decode engines would fall below min_decode */
	NW_ROLE_GUARD_DWELL,          /* changed role less than dwell_s ago */
	NW_ROLE_GUARD_RESIDENT,       /* decode to prefill while carrying more
	                               * streams than flip_resident_guard */
} nw_role_guard;

/* The host's guards on one role move of engine i to role to at now_ns
 * (role-control document, "Guards on role changes"; docs/admin.md): the
 * engine is live, movable and not pinned; the phase it leaves keeps at
 * least its floor of live engines (the phase it joins only gains);
 * dwell_s has passed since its last change; a decode-to-prefill move
 * carries at most flip_resident_guard resident streams. The first guard
 * that refuses, in that order. The operator's moves and the controller's
 * go through it; floor repair has its own rules (above). */
nw_role_guard nw_roles_check_move(const struct nw_role_engine *engines, uint32_t n, uint32_t i,
                                  narwhal_role to, const struct nw_role_rules *rules,
                                  int64_t now_ns);
/* The same for many engines of one fleet: the live engines by role,
 * counted once (nw_roles_count), and engine e checked against them, so
 * that checking every engine stays O(n) (the controller host weighs every
 * candidate donor each evaluation, docs/controller.md). */
struct nw_role_counts {
	uint32_t prefill, decode;     /* live, by role */
};
void nw_roles_count(const struct nw_role_engine *engines, uint32_t n, struct nw_role_counts *out);
nw_role_guard nw_roles_check_counted(const struct nw_role_counts *counts,
                                     const struct nw_role_engine *e, narwhal_role to,
                                     const struct nw_role_rules *rules, int64_t now_ns);
/* "same_role", "engine_not_live", "engine_not_movable", "engine_pinned",
 * "prefill_floor", "decode_floor", "dwell", "resident_guard"; NULL for OK. */
const char *nw_role_guard_code(nw_role_guard g);
/* A sentence for people: what refused the move and what would allow it. */
const char *nw_role_guard_message(nw_role_guard g);

/* One role change, proposed or applied. */
struct nw_role_change {
	uint32_t engine;
	narwhal_role from, to;
	int64_t at_ns;             /* also the dwell timestamp when applied */
	const char *caller;        /* static: "floor_repair", "readmission",
	                            * "controller", "controller_urgent", "operator" */
	const char *reason;        /* static: e.g. "decode_below_floor" */
	bool applied;              /* false in advisory mode */
	uint32_t prefill_after;    /* live split after the change */
	uint32_t decode_after;
};

/* The live split and whether the floors hold (spec 7.2: a breach is
 * reported with the safest reachable split). */
struct nw_floor_report {
	/* Live engines by role once this pass's applied changes are made (in
	 * advisory mode, the split as it stays). */
	uint32_t live_prefill, live_decode;
	bool prefill_breach, decode_breach;   /* of that split */
	/* The split the repair reaches in time, dwell aside, where only live,
	 * unpinned, movable engines change role: decode up to min_decode from
	 * the prefill engines above the prefill floor, then prefill up to
	 * min_prefill from the decode engines above the decode floor. */
	uint32_t reachable_prefill, reachable_decode;
};

/* One monitor pass of floor repair. Fills report (may be NULL), and
 * writes up to max changes into out (applied is !rules->advisory; the
 * caller applies the applied ones to the fleet and stores at_ns, which is
 * now_ns, as their dwell timestamp). Decode first: decode below its floor
 * moves one eligible prefill engine to decode, observing dwell, while the
 * prefill floor holds (role-control document, "Decode-floor repair").
 * Prefill below its floor moves as many eligible decode engines to prefill
 * as it needs in this pass, ignoring dwell (and cooldown), while the decode
 * floor holds. An eligible engine is live, unpinned and movable; among
 * several the one with the least resident work moves, ties to the lowest
 * index. Each change's prefill_after and decode_after are the live split
 * once it and the changes before it are applied. Returns the number of
 * changes. */
uint32_t nw_roles_repair_floors(const struct nw_role_engine *engines, uint32_t n,
                                const struct nw_role_rules *rules, int64_t now_ns,
                                struct nw_role_change *out, uint32_t max,
                                struct nw_floor_report *report);

/* The role a readmitted engine (index i; its own live flag is ignored, it
 * is never counted) takes: a phase below its floor among the other live
 * engines first (decode first); else, while no controller prices demand,
 * the phase with fewer live engines; a tie keeps its role. A pinned or
 * unmovable engine keeps its role. */
narwhal_role nw_roles_readmit_role(const struct nw_role_engine *engines, uint32_t n,
                                   uint32_t i, const struct nw_role_rules *rules);

/* Who changes roles (nw_role_change.caller), for the counts by caller
 * (docs/metrics.md): a caller outside the list is counted as "other". */
#define NW_ROLE_CALLERS 6
extern const char *const nw_role_callers[NW_ROLE_CALLERS];
/* caller's index in nw_role_callers; the last ("other") when not listed. */
uint32_t nw_role_caller_index(const char *caller);

/* The flip history: the last cap role changes (controller.flip_history),
 * oldest first; when full, the oldest gives way. */
struct nw_flip_history {
	struct nw_role_change *ring;
	uint32_t cap, len, head;
	uint64_t total;            /* every change ever recorded */
	/* ... by caller (nw_role_callers) and applied (1) or advised (0) */
	uint64_t by_caller[NW_ROLE_CALLERS][2];
};

/* Advisory mode proposes the same move every pass and it is recorded
 * once: true when c is advice repeating *last_advised (the same engine,
 * target and caller), to be dropped; otherwise, when c is advice, it
 * becomes *last_advised. The monitor and the what-if mode keep one each. */
bool nw_roles_advice_repeats(struct nw_role_change *last_advised, const struct nw_role_change *c);

void nw_flip_history_init(struct nw_flip_history *h, uint32_t capacity); /* 0 is taken as 1 */
void nw_flip_history_clear(struct nw_flip_history *h); /* frees the ring */
void nw_flip_history_add(struct nw_flip_history *h, const struct nw_role_change *c);
/* Take over src's changes (a reload): those of engines that remain, whose
 * index was i and is now new_of_old[i] (UINT32_MAX: removed, dropped),
 * oldest first, as many as dst holds; total and the counts by caller
 * carry on. */
void nw_flip_history_adopt(struct nw_flip_history *dst, const struct nw_flip_history *src,
                           const uint32_t *new_of_old);
/* [{"engine": id, "from", "to", "at_s": seconds since start_ns, "caller",
 * "reason", "applied", "prefill", "decode": the split after it}, ...]
 * oldest first (transfer full). ids[i] names engine i. */
json_t *nw_flip_history_to_json(const struct nw_flip_history *h, const char *const *ids,
                                int64_t start_ns);

const char *nw_role_name(narwhal_role r); /* "prefill", "decode", else "unknown" */

#endif /* NW_CONTROL_ROLES_H */
