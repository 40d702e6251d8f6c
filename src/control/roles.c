/*
 * Role floors and the flip history (spec 7.2; role-control document
 * "Guards on role changes" and "Floors, fallback, and degraded capacity").
 * Pure: the monitor passes the clock and applies what comes back.
 */
#include "build-config.h"

#include "control/roles.h"

#include <string.h>

#include <glib.h>

#include "core/config.h"
#include "core/dialect.h"

/* The split and the engines that may change role, counted once per call.
 * Only engines that can pair are in it: an aggregate-only engine runs
 * whole requests whatever its label, so it is neither prefill nor decode
 * capacity for a handoff (issue 14, a fleet that mixes dialects). */
struct split {
	uint32_t prefill, decode;         /* live, by role */
	uint32_t movable_prefill;         /* live, unpinned, movable */
	uint32_t movable_decode;
	bool pairs;                       /* some engine, live or not, can pair */
};

static bool
eligible(const struct nw_role_engine *e)
{
	return e->live && !e->pinned && e->movable;
}

static struct split
count_split(const struct nw_role_engine *engines, uint32_t n)
{
	struct split s = { 0 };

	for (uint32_t i = 0; i < n; i++) {
		const struct nw_role_engine *e = &engines[i];

		s.pairs |= !e->aggregate_only;
		if (!e->live || e->aggregate_only)
			continue;
		if (e->role == NARWHAL_ROLE_PREFILL) {
			s.prefill++;
			s.movable_prefill += eligible(e);
		} else if (e->role == NARWHAL_ROLE_DECODE) {
			s.decode++;
			s.movable_decode += eligible(e);
		}
	}
	return s;
}

/* The safest split the movable engines can reach, dwell aside: decode up
 * to its floor from movable prefill engines above the prefill floor, then
 * prefill up to its floor from movable decode engines above the decode
 * floor (spec 7.2: each repair preserves the other floor). */
static void
reachable_split(const struct split *s, const struct nw_role_rules *r,
                uint32_t *prefill, uint32_t *decode)
{
	uint32_t p = s->prefill, d = s->decode;
	uint32_t spare_p = p > r->min_prefill ? p - r->min_prefill : 0;
	uint32_t take = d < r->min_decode ? MIN(MIN(r->min_decode - d, s->movable_prefill), spare_p)
	                                  : 0;
	uint32_t spare_d, give;

	p -= take;
	d += take;
	spare_d = d > r->min_decode ? d - r->min_decode : 0;
	give = p < r->min_prefill ? MIN(MIN(r->min_prefill - p, s->movable_decode), spare_d) : 0;
	*prefill = p + give;
	*decode = d - give;
}

static bool
dwell_over(const struct nw_role_engine *e, const struct nw_role_rules *r, int64_t now_ns)
{
	return (double)now_ns - (double)e->role_since_ns >= r->dwell_s * 1e9;
}

/* Does (resident, index) of a come before b's? Least resident first, ties
 * to the lowest index. */
static bool
before(const struct nw_role_engine *engines, uint32_t a, uint32_t b)
{
	return engines[a].resident < engines[b].resident ||
	       (engines[a].resident == engines[b].resident && a < b);
}

/* The next engine of role from that may move, in (resident, index) order
 * after engine after (UINT32_MAX: from the start); UINT32_MAX when none. */
static uint32_t
next_candidate(const struct nw_role_engine *engines, uint32_t n, narwhal_role from,
               bool observe_dwell, const struct nw_role_rules *r, int64_t now_ns,
               uint32_t after)
{
	uint32_t best = UINT32_MAX;

	for (uint32_t i = 0; i < n; i++) {
		const struct nw_role_engine *e = &engines[i];

		if (e->role != from || !eligible(e) ||
		    (observe_dwell && !dwell_over(e, r, now_ns)))
			continue;
		if (after != UINT32_MAX && !before(engines, after, i))
			continue;
		if (best == UINT32_MAX || before(engines, i, best))
			best = i;
	}
	return best;
}

uint32_t
nw_roles_repair_floors(const struct nw_role_engine *engines, uint32_t n,
                       const struct nw_role_rules *rules, int64_t now_ns,
                       struct nw_role_change *out, uint32_t max,
                       struct nw_floor_report *report)
{
	struct split s = count_split(engines, n);
	/* proposed: the split if every change so far were applied; live: the
	 * split as it will be (they differ only in advisory mode). */
	uint32_t proposed_p = s.prefill, proposed_d = s.decode;
	uint32_t live_p = s.prefill, live_d = s.decode;
	uint32_t reach_p, reach_d, count = 0;

	reachable_split(&s, rules, &reach_p, &reach_d);

	/* Decode first, one engine per pass, observing dwell, preserving the
	 * prefill floor (spec 7.2; role-control document, "Decode-floor
	 * repair"). Without a decode engine the prefill engines serve whole
	 * requests (the aggregate fallback), so nothing is gained by breaking
	 * the prefill floor. */
	if (proposed_d < rules->min_decode && proposed_p > rules->min_prefill && count < max) {
		uint32_t i = next_candidate(engines, n, NARWHAL_ROLE_PREFILL, true, rules,
		                            now_ns, UINT32_MAX);

		if (i != UINT32_MAX) {
			proposed_p--;
			proposed_d++;
			out[count++] = (struct nw_role_change){
				.engine = i, .from = NARWHAL_ROLE_PREFILL, .to = NARWHAL_ROLE_DECODE,
				.at_ns = now_ns, .caller = "floor_repair",
				.reason = "decode_below_floor", .applied = !rules->advisory,
				.prefill_after = proposed_p, .decode_after = proposed_d,
			};
		}
	}

	/* Prefill: as many engines as the floor needs in this pass, ignoring
	 * dwell and cooldown, never below the decode floor (spec 7.2;
	 * role-control: "a move may involve more than one engine"). */
	for (uint32_t prev = UINT32_MAX;
	     proposed_p < rules->min_prefill && proposed_d > rules->min_decode && count < max;) {
		uint32_t i = next_candidate(engines, n, NARWHAL_ROLE_DECODE, false, rules,
		                            now_ns, prev);

		if (i == UINT32_MAX)
			break;
		prev = i;
		proposed_p++;
		proposed_d--;
		out[count++] = (struct nw_role_change){
			.engine = i, .from = NARWHAL_ROLE_DECODE, .to = NARWHAL_ROLE_PREFILL,
			.at_ns = now_ns, .caller = "floor_repair", .reason = "prefill_below_floor",
			.applied = !rules->advisory,
			.prefill_after = proposed_p, .decode_after = proposed_d,
		};
	}

	if (!rules->advisory) {
		live_p = proposed_p;
		live_d = proposed_d;
	}
	/* A fleet where no engine can pair has no split to keep floors in. */
	if (report != NULL)
		*report = (struct nw_floor_report){
			.live_prefill = live_p, .live_decode = live_d,
			.prefill_breach = s.pairs && live_p < rules->min_prefill,
			.decode_breach = s.pairs && live_d < rules->min_decode,
			.reachable_prefill = reach_p, .reachable_decode = reach_d,
		};
	return count;
}

void
nw_roles_count(const struct nw_role_engine *engines, uint32_t n, struct nw_role_counts *out)
{
	struct split s = count_split(engines, n);

	*out = (struct nw_role_counts){ .prefill = s.prefill, .decode = s.decode };
}

nw_role_guard
nw_roles_check_counted(const struct nw_role_counts *s, const struct nw_role_engine *e,
                       narwhal_role to, const struct nw_role_rules *rules, int64_t now_ns)
{
	if (e->role == to)
		return NW_ROLE_GUARD_SAME_ROLE;
	if (!e->live)
		return NW_ROLE_GUARD_NOT_LIVE;
	if (!e->movable)
		return NW_ROLE_GUARD_NOT_MOVABLE;
	if (e->pinned)
		return NW_ROLE_GUARD_PINNED;
	/* Spec 7.2: every change preserves the floors; the engine is live, so
	 * it is counted in the phase it leaves. */
	if (e->role == NARWHAL_ROLE_PREFILL && s->prefill - 1 < rules->min_prefill)
		return NW_ROLE_GUARD_PREFILL_FLOOR;
	if (e->role == NARWHAL_ROLE_DECODE && s->decode - 1 < rules->min_decode)
		return NW_ROLE_GUARD_DECODE_FLOOR;
	if (!dwell_over(e, rules, now_ns))
		return NW_ROLE_GUARD_DWELL;
	if (e->role == NARWHAL_ROLE_DECODE && to == NARWHAL_ROLE_PREFILL &&
	    rules->flip_resident_guard > 0 && e->resident > rules->flip_resident_guard)
		return NW_ROLE_GUARD_RESIDENT;
	return NW_ROLE_GUARD_OK;
}

nw_role_guard
nw_roles_check_move(const struct nw_role_engine *engines, uint32_t n, uint32_t i,
                    narwhal_role to, const struct nw_role_rules *rules, int64_t now_ns)
{
	struct nw_role_counts s;

	nw_roles_count(engines, n, &s);
	return nw_roles_check_counted(&s, &engines[i], to, rules, now_ns);
}

static const struct {
	const char *code;
	const char *message;
} guard_texts[] = {
	[NW_ROLE_GUARD_OK] = { NULL, "the move may go ahead" },
	[NW_ROLE_GUARD_SAME_ROLE] = { "same_role", "the engine has this role already" },
	[NW_ROLE_GUARD_NOT_LIVE] = { "engine_not_live",
		"the engine is out of placement (ejected, verifying, drained or held): only a "
		"live engine changes role" },
	[NW_ROLE_GUARD_NOT_MOVABLE] = { "engine_not_movable",
		"the engine's dialect does not let it take either role per request: its role "
		"changes only with a restart of the engine" },
	[NW_ROLE_GUARD_PINNED] = { "engine_pinned",
		"the engine is pinned at its role: unpin it first" },
	[NW_ROLE_GUARD_PREFILL_FLOOR] = { "prefill_floor",
		"the move would leave fewer live prefill engines than controller.min_prefill" },
	[NW_ROLE_GUARD_DECODE_FLOOR] = { "decode_floor",
		"the move would leave fewer live decode engines than controller.min_decode" },
	[NW_ROLE_GUARD_DWELL] = { "dwell",
		"the engine changed role less than controller.thresholds.dwell_s ago: try again "
		"later" },
	[NW_ROLE_GUARD_RESIDENT] = { "resident_guard",
		"the decode engine carries more resident streams than "
		"controller.thresholds.flip_resident_guard: try again once they finish" },
};

const char *
nw_role_guard_code(nw_role_guard g)
{
	return (size_t)g < G_N_ELEMENTS(guard_texts) ? guard_texts[g].code : NULL;
}

const char *
nw_role_guard_message(nw_role_guard g)
{
	return (size_t)g < G_N_ELEMENTS(guard_texts) ? guard_texts[g].message : "unknown guard";
}

narwhal_role
nw_roles_readmit_role(const struct nw_role_engine *engines, uint32_t n, uint32_t i,
                      const struct nw_role_rules *rules)
{
	narwhal_role current = engines[i].role;
	uint32_t prefill = 0, decode = 0;

	if (engines[i].pinned || !engines[i].movable)
		return current;
	for (uint32_t k = 0; k < n; k++) {
		if (k == i || !engines[k].live || engines[k].aggregate_only)
			continue;
		prefill += engines[k].role == NARWHAL_ROLE_PREFILL;
		decode += engines[k].role == NARWHAL_ROLE_DECODE;
	}
	if (decode < rules->min_decode)
		return NARWHAL_ROLE_DECODE;
	if (prefill < rules->min_prefill)
		return NARWHAL_ROLE_PREFILL;
	if (prefill != decode)
		return prefill < decode ? NARWHAL_ROLE_PREFILL : NARWHAL_ROLE_DECODE;
	return current;
}

const char *const nw_role_callers[NW_ROLE_CALLERS] = {
	"floor_repair", "readmission", "controller", "controller_urgent", "operator", "other",
};

bool
nw_roles_advice_repeats(struct nw_role_change *last_advised, const struct nw_role_change *c)
{
	if (c->applied)
		return false;
	if (last_advised->engine == c->engine && last_advised->to == c->to &&
	    g_strcmp0(last_advised->caller, c->caller) == 0)
		return true;
	*last_advised = *c;
	return false;
}

uint32_t
nw_role_caller_index(const char *caller)
{
	for (uint32_t k = 0; k + 1 < NW_ROLE_CALLERS; k++) {
		if (g_strcmp0(caller, nw_role_callers[k]) == 0)
			return k;
	}
	return NW_ROLE_CALLERS - 1;
}

void
nw_flip_history_init(struct nw_flip_history *h, uint32_t capacity)
{
	h->cap = MAX(capacity, 1u);
	h->ring = g_new0(struct nw_role_change, h->cap);
	h->len = 0;
	h->head = 0;
	h->total = 0;
	memset(h->by_caller, 0, sizeof h->by_caller);
}

void
nw_flip_history_clear(struct nw_flip_history *h)
{
	g_free(h->ring);
	*h = (struct nw_flip_history){ 0 };
}

void
nw_flip_history_add(struct nw_flip_history *h, const struct nw_role_change *c)
{
	if (h->len < h->cap) {
		h->ring[(h->head + h->len) % h->cap] = *c;
		h->len++;
	} else {
		/* Full: the oldest gives way. */
		h->ring[h->head] = *c;
		h->head = (h->head + 1) % h->cap;
	}
	h->total++;
	h->by_caller[nw_role_caller_index(c->caller)][c->applied]++;
}

void
nw_flip_history_adopt(struct nw_flip_history *dst, const struct nw_flip_history *src,
                      const uint32_t *new_of_old)
{
	for (uint32_t k = 0; k < src->len; k++) {
		struct nw_role_change c = src->ring[(src->head + k) % src->cap];

		if (new_of_old[c.engine] == UINT32_MAX)
			continue;
		c.engine = new_of_old[c.engine];
		nw_flip_history_add(dst, &c);
	}
	/* Every change ever recorded, kept or not. */
	dst->total = src->total;
	memcpy(dst->by_caller, src->by_caller, sizeof dst->by_caller);
}

json_t *
nw_flip_history_to_json(const struct nw_flip_history *h, const char *const *ids,
                        int64_t start_ns)
{
	json_t *arr = json_array();

	for (uint32_t k = 0; k < h->len; k++) {
		const struct nw_role_change *c = &h->ring[(h->head + k) % h->cap];

		json_array_append_new(arr, json_pack("{s:s, s:s, s:s, s:f, s:s, s:s, s:b, s:I, s:I}",
			"engine", ids[c->engine],
			"from", nw_role_name(c->from), "to", nw_role_name(c->to),
			"at_s", (double)(c->at_ns - start_ns) / 1e9,
			"caller", c->caller, "reason", c->reason,
			"applied", (int)c->applied,
			"prefill", (json_int_t)c->prefill_after,
			"decode", (json_int_t)c->decode_after));
	}
	return arr;
}

const char *
nw_role_name(narwhal_role r)
{
	switch (r) {
	case NARWHAL_ROLE_PREFILL:
		return "prefill";
	case NARWHAL_ROLE_DECODE:
		return "decode";
	default:
		return "unknown";
	}
}

void
nw_role_rules_from_config(struct nw_role_rules *out, const struct nw_config *cfg)
{
	*out = (struct nw_role_rules){
		.min_prefill = cfg->controller.min_prefill,
		.min_decode = cfg->controller.min_decode,
		.dwell_s = cfg->controller.thresholds.dwell_s,
		.advisory = cfg->controller.advisory,
		.flip_resident_guard = cfg->controller.thresholds.flip_resident_guard,
	};
}

struct nw_role_engine
nw_role_engine_of(const struct narwhal_engine_view *v, const struct nw_dialect *d)
{
	return (struct nw_role_engine){
		.role = v->role,
		.live = (v->flags & NARWHAL_ENGINE_AVAILABLE) != 0,
		.pinned = (v->flags & NARWHAL_ENGINE_PINNED) != 0,
		.movable = nw_dialect_pairs(d) && (d->caps & NARWHAL_DIALECT_PER_REQUEST_ROLES),
		.aggregate_only = !nw_dialect_pairs(d),
		.role_since_ns = v->role_since_ns,
		.resident = v->role == NARWHAL_ROLE_DECODE ? v->resident_decode
		                                           : v->resident_prefill + v->queued_prefill,
	};
}
