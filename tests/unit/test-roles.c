/* Role floors, readmission roles and the flip history (spec 7.2;
 * role-control document "Guards on role changes" and "Floors, fallback,
 * and degraded capacity"). A fake clock: times are plain nanoseconds. */
#include "build-config.h"

#include <glib.h>

#include "control/roles.h"

#define P NARWHAL_ROLE_PREFILL
#define D NARWHAL_ROLE_DECODE
#define S(x) ((int64_t)(x) * 1000000000)

/* A live, movable, unpinned engine that took its role at time 0. */
static struct nw_role_engine
eng(narwhal_role role)
{
	return (struct nw_role_engine){ .role = role, .live = true, .movable = true };
}

static const struct nw_role_rules floors11 = { .min_prefill = 1, .min_decode = 1 };

/* What the monitor does with the changes: applied ones take effect and
 * stamp the dwell timestamp. */
static void
apply(struct nw_role_engine *e, const struct nw_role_change *c, uint32_t n)
{
	for (uint32_t k = 0; k < n; k++) {
		if (!c[k].applied)
			continue;
		g_assert_cmpuint(e[c[k].engine].role, ==, c[k].from);
		e[c[k].engine].role = c[k].to;
		e[c[k].engine].role_since_ns = c[k].at_ns;
	}
}

static void
assert_report(const struct nw_floor_report *r, uint32_t lp, uint32_t ld, bool pb, bool db,
              uint32_t rp, uint32_t rd)
{
	g_assert_cmpuint(r->live_prefill, ==, lp);
	g_assert_cmpuint(r->live_decode, ==, ld);
	g_assert_cmpint(r->prefill_breach, ==, pb);
	g_assert_cmpint(r->decode_breach, ==, db);
	g_assert_cmpuint(r->reachable_prefill, ==, rp);
	g_assert_cmpuint(r->reachable_decode, ==, rd);
}

/* Floors met: nothing moves, nothing is breached. */
static void
test_floors_met(void)
{
	struct nw_role_engine e[] = { eng(P), eng(D), eng(D) };
	struct nw_role_change c[4];
	struct nw_floor_report r;

	g_assert_cmpuint(nw_roles_repair_floors(e, 3, &floors11, S(5), c, 4, &r), ==, 0);
	assert_report(&r, 1, 2, false, false, 1, 2);
}

/* spec 7.2: decode-floor recovery observes per-engine dwell. */
static void
test_decode_repair_observes_dwell(void)
{
	struct nw_role_rules rules = { .min_prefill = 1, .min_decode = 1, .dwell_s = 10 };
	struct nw_role_engine e[] = { eng(P), eng(P), eng(P), eng(D) };
	struct nw_role_change c[4];
	struct nw_floor_report r;

	e[3].live = false;               /* the only decode engine failed */
	e[0].role_since_ns = S(95);      /* all three moved recently */
	e[1].role_since_ns = S(92);
	e[2].role_since_ns = S(91);
	g_assert_cmpuint(nw_roles_repair_floors(e, 4, &rules, S(100), c, 4, &r), ==, 0);
	assert_report(&r, 3, 0, false, true, 2, 1);

	/* At 101 s engine 2 has dwelt 10 s: it moves, though engine 1 carries
	 * less work, because engine 1 has not. */
	e[1].resident = 0;
	e[2].resident = 7;
	g_assert_cmpuint(nw_roles_repair_floors(e, 4, &rules, S(101), c, 4, &r), ==, 1);
	g_assert_cmpuint(c[0].engine, ==, 2);
	g_assert_cmpuint(c[0].from, ==, P);
	g_assert_cmpuint(c[0].to, ==, D);
	g_assert_cmpint(c[0].at_ns, ==, S(101));   /* the dwell timestamp */
	g_assert_cmpstr(c[0].caller, ==, "floor_repair");
	g_assert_cmpstr(c[0].reason, ==, "decode_below_floor");
	g_assert_true(c[0].applied);
	g_assert_cmpuint(c[0].prefill_after, ==, 2);
	g_assert_cmpuint(c[0].decode_after, ==, 1);
	assert_report(&r, 2, 1, false, false, 2, 1);
}

/* spec 7.2: prefill-floor recovery ignores cooldown and dwell. */
static void
test_prefill_repair_ignores_dwell(void)
{
	struct nw_role_rules rules = { .min_prefill = 1, .min_decode = 1, .dwell_s = 1000 };
	struct nw_role_engine e[] = { eng(P), eng(D), eng(D) };
	struct nw_role_change c[4];
	struct nw_floor_report r;

	e[0].live = false;               /* the only prefill engine failed */
	e[1].role_since_ns = S(99);      /* both just took decode */
	e[2].role_since_ns = S(99);
	g_assert_cmpuint(nw_roles_repair_floors(e, 3, &rules, S(100), c, 4, &r), ==, 1);
	g_assert_cmpuint(c[0].engine, ==, 1);
	g_assert_cmpuint(c[0].to, ==, P);
	g_assert_cmpstr(c[0].reason, ==, "prefill_below_floor");
	g_assert_cmpint(c[0].at_ns, ==, S(100));
	assert_report(&r, 1, 1, false, false, 1, 1);
}

/* spec 7.2: every role change preserves controller.min_decode. */
static void
test_changes_preserve_min_decode(void)
{
	struct nw_role_rules rules = { .min_prefill = 3, .min_decode = 2 };
	struct nw_role_engine e[] = { eng(D), eng(D), eng(D), eng(P) };
	struct nw_role_change c[4];
	struct nw_floor_report r;

	e[3].live = false;
	/* Three decode, floor 2: only one can go, though prefill needs three. */
	g_assert_cmpuint(nw_roles_repair_floors(e, 4, &rules, 0, c, 4, &r), ==, 1);
	g_assert_cmpuint(c[0].decode_after, ==, 2);
	assert_report(&r, 1, 2, true, false, 1, 2);
	apply(e, c, 1);

	/* At the decode floor: nothing more moves, the breach stays reported. */
	g_assert_cmpuint(nw_roles_repair_floors(e, 4, &rules, S(1), c, 4, &r), ==, 0);
	assert_report(&r, 1, 2, true, false, 1, 2);
}

/* spec 7.2: pins, engine availability and movability still apply; the
 * reachable split counts only engines that can change role. */
static void
test_pins_and_availability_apply(void)
{
	struct nw_role_engine e[] = { eng(P), eng(P), eng(P), eng(P), eng(D) };
	struct nw_role_change c[4];
	struct nw_floor_report r;

	e[0].pinned = true;
	e[1].movable = false;            /* its dialect fixes its role */
	e[2].live = false;               /* ejected, drained or quarantined */
	e[3].pinned = true;
	e[4].live = false;
	g_assert_cmpuint(nw_roles_repair_floors(e, 5, &floors11, S(10), c, 4, &r), ==, 0);
	assert_report(&r, 3, 0, false, true, 3, 0);

	/* Unpin engine 3: it is the one that moves, though pinned engine 0
	 * and unmovable engine 1 carry less work. */
	e[3].pinned = false;
	e[3].resident = 9;
	g_assert_cmpuint(nw_roles_repair_floors(e, 5, &floors11, S(10), c, 4, &r), ==, 1);
	g_assert_cmpuint(c[0].engine, ==, 3);
	assert_report(&r, 2, 1, false, false, 2, 1);
}

/* Among eligible engines the one with the least resident work moves, ties
 * to the lowest index. */
static void
test_least_resident_moves(void)
{
	struct nw_role_rules rules = { .min_prefill = 2, .min_decode = 1 };
	struct nw_role_engine e[] = { eng(D), eng(D), eng(D), eng(D), eng(P) };
	struct nw_role_change c[4];

	e[4].live = false;
	e[0].resident = 5;
	e[1].resident = 2;
	e[2].resident = 5;
	e[3].resident = 2;
	g_assert_cmpuint(nw_roles_repair_floors(e, 5, &rules, 0, c, 4, NULL), ==, 2);
	g_assert_cmpuint(c[0].engine, ==, 1);
	g_assert_cmpuint(c[1].engine, ==, 3);
}

/* spec 7.2: advisory mode still applies: the changes are recorded, not
 * applied, and the report gives the split as it stays. */
static void
test_advisory(void)
{
	struct nw_role_rules rules = { .min_prefill = 2, .min_decode = 1, .advisory = true };
	struct nw_role_engine e[] = { eng(D), eng(D), eng(D), eng(P) };
	struct nw_role_change c[4];
	struct nw_floor_report r;

	e[3].live = false;
	g_assert_cmpuint(nw_roles_repair_floors(e, 4, &rules, S(3), c, 4, &r), ==, 2);
	for (int k = 0; k < 2; k++) {
		g_assert_false(c[k].applied);
		g_assert_cmpstr(c[k].caller, ==, "floor_repair");
		g_assert_cmpstr(c[k].reason, ==, "prefill_below_floor");
	}
	/* The proposed splits, as if applied in turn. */
	g_assert_cmpuint(c[0].prefill_after, ==, 1);
	g_assert_cmpuint(c[0].decode_after, ==, 2);
	g_assert_cmpuint(c[1].prefill_after, ==, 2);
	g_assert_cmpuint(c[1].decode_after, ==, 1);
	assert_report(&r, 0, 3, true, false, 2, 1);
}

/* spec 7.2: a breach is reported with the safest reachable split. Pins
 * leave too few movable engines for the decode floor. */
static void
test_breach_reports_reachable_split(void)
{
	struct nw_role_rules rules = { .min_prefill = 1, .min_decode = 3 };
	struct nw_role_engine e[] = { eng(P), eng(P), eng(P), eng(P), eng(D) };
	struct nw_role_change c[4];
	struct nw_floor_report r;

	e[0].pinned = true;
	e[1].pinned = true;
	e[2].pinned = true;
	/* 4P + 1D; only engine 3 can move: the best is 3P + 2D. */
	g_assert_cmpuint(nw_roles_repair_floors(e, 5, &rules, 0, c, 4, &r), ==, 1);
	assert_report(&r, 3, 2, false, true, 3, 2);
	apply(e, c, 1);
	g_assert_cmpuint(nw_roles_repair_floors(e, 5, &rules, S(1), c, 4, &r), ==, 0);
	assert_report(&r, 3, 2, false, true, 3, 2);
}

/* spec 7.2 and the role-control document ("Decode-floor repair: ...
 * preserving the prefill floor"): with fewer live engines than the two
 * floors need, decode repair does not take prefill below its floor (the
 * prefill engines serve whole requests meanwhile), and the breach is
 * reported with the split the repair can reach. */
static void
test_decode_repair_preserves_prefill_floor(void)
{
	struct nw_role_rules rules = { .min_prefill = 2, .min_decode = 1 };
	struct nw_role_engine e[] = { eng(P), eng(P), eng(D) };
	struct nw_role_change c[4];
	struct nw_floor_report r;

	e[2].live = false;
	g_assert_cmpuint(nw_roles_repair_floors(e, 3, &rules, 0, c, 4, &r), ==, 0);
	assert_report(&r, 2, 0, false, true, 2, 0);

	/* One engine live of a 1P+1D fleet: it keeps its role. */
	struct nw_role_engine lone[] = { eng(P), eng(D) };

	lone[1].live = false;
	g_assert_cmpuint(nw_roles_repair_floors(lone, 2, &floors11, 0, c, 4, &r), ==, 0);
	assert_report(&r, 1, 0, false, true, 1, 0);

	/* A third prefill engine is spare: it moves. */
	struct nw_role_engine three[] = { eng(P), eng(P), eng(P), eng(D) };

	three[3].live = false;
	g_assert_cmpuint(nw_roles_repair_floors(three, 4, &rules, 0, c, 4, &r), ==, 1);
	g_assert_cmpuint(c[0].to, ==, D);
	assert_report(&r, 2, 1, false, false, 2, 1);
}

/* spec 7.2: decode-floor recovery restores one eligible engine per pass. */
static void
test_decode_one_engine_per_pass(void)
{
	struct nw_role_rules rules = { .min_prefill = 1, .min_decode = 3 };
	struct nw_role_engine e[] = { eng(P), eng(P), eng(P), eng(P), eng(D), eng(D), eng(D) };
	struct nw_role_change c[8];
	struct nw_floor_report r;

	e[4].live = e[5].live = e[6].live = false;
	for (uint32_t pass = 1; pass <= 3; pass++) {
		g_assert_cmpuint(nw_roles_repair_floors(e, 7, &rules, S(pass), c, 8, &r), ==, 1);
		g_assert_cmpuint(r.live_decode, ==, pass);
		g_assert_cmpuint(r.reachable_decode, ==, 3);
		apply(e, c, 1);
	}
	g_assert_cmpuint(nw_roles_repair_floors(e, 7, &rules, S(4), c, 8, &r), ==, 0);
	assert_report(&r, 1, 3, false, false, 1, 3);
}

/* role-control: a move may involve more than one engine when a pool is
 * already below its floor; max bounds what one call writes. */
static void
test_prefill_several_engines(void)
{
	struct nw_role_rules rules = { .min_prefill = 3, .min_decode = 1 };
	struct nw_role_engine e[] = { eng(D), eng(D), eng(D), eng(D), eng(D) };
	struct nw_role_change c[8];
	struct nw_floor_report r;

	g_assert_cmpuint(nw_roles_repair_floors(e, 5, &rules, 0, c, 8, &r), ==, 3);
	g_assert_cmpuint(c[0].engine, ==, 0);
	g_assert_cmpuint(c[1].engine, ==, 1);
	g_assert_cmpuint(c[2].engine, ==, 2);
	g_assert_cmpuint(c[2].prefill_after, ==, 3);
	g_assert_cmpuint(c[2].decode_after, ==, 2);
	assert_report(&r, 3, 2, false, false, 3, 2);

	/* Room for one change: the report counts only what is returned. */
	g_assert_cmpuint(nw_roles_repair_floors(e, 5, &rules, 0, c, 1, &r), ==, 1);
	assert_report(&r, 1, 4, true, false, 3, 2);
}

/* Random fleets, repaired pass after pass with the clock past dwell,
 * settle on the reported reachable split; no change takes decode below its
 * floor once it is met, and a pass breaks the prefill floor only when
 * fewer live engines than min_prefill + min_decode remain. */
static void
test_repair_reaches_reachable_split(void)
{
	GRand *rng = g_rand_new_with_seed(7);

	for (int round = 0; round < 2000; round++) {
		struct nw_role_engine e[8];
		struct nw_role_rules rules = {
			.min_prefill = (uint32_t)g_rand_int_range(rng, 1, 4),
			.min_decode = (uint32_t)g_rand_int_range(rng, 1, 4),
			.dwell_s = 1,
		};
		uint32_t n = (uint32_t)g_rand_int_range(rng, 1, 9), live = 0;
		struct nw_role_change c[8];
		struct nw_floor_report first, prev, r;

		for (uint32_t k = 0; k < n; k++) {
			e[k] = eng(g_rand_boolean(rng) ? P : D);
			e[k].live = g_rand_int_range(rng, 0, 4) != 0;
			e[k].pinned = g_rand_int_range(rng, 0, 4) == 0;
			e[k].movable = g_rand_int_range(rng, 0, 5) != 0;
			e[k].resident = (uint32_t)g_rand_int_range(rng, 0, 3);
			live += e[k].live;
		}
		nw_roles_repair_floors(e, n, &rules, 0, c, 0, &first);
		prev = first;
		for (int pass = 1; pass <= 10; pass++) {
			uint32_t k = nw_roles_repair_floors(e, n, &rules, S(2 * pass), c, 8, &r);

			if (prev.live_decode >= rules.min_decode)
				g_assert_cmpuint(r.live_decode, >=, rules.min_decode);
			if (prev.live_prefill >= rules.min_prefill && r.live_prefill < rules.min_prefill)
				g_assert_cmpuint(live, <, rules.min_prefill + rules.min_decode);
			g_assert_cmpuint(r.reachable_prefill, ==, first.reachable_prefill);
			g_assert_cmpuint(r.reachable_decode, ==, first.reachable_decode);
			apply(e, c, k);
			prev = r;
		}
		g_assert_cmpuint(r.live_prefill, ==, first.reachable_prefill);
		g_assert_cmpuint(r.live_decode, ==, first.reachable_decode);
	}
	g_rand_free(rng);
}

/* Readmission (role-control: "assigns its role according to current
 * demand"; issue 10: the fewer-loaded phase while no controller prices it). */
static void
test_readmit_role(void)
{
	struct nw_role_rules rules = { .min_prefill = 1, .min_decode = 2 };
	struct nw_role_engine e[] = { eng(P), eng(P), eng(D), eng(D), eng(P) };

	/* A phase below its floor first: one live decode, floor 2. */
	e[3].live = false;
	e[4].live = false;
	g_assert_cmpuint(nw_roles_readmit_role(e, 5, 4, &rules), ==, D);
	g_assert_cmpuint(nw_roles_readmit_role(e, 5, 3, &rules), ==, D);

	/* Decode first when both are below. */
	e[0].live = e[1].live = false;
	g_assert_cmpuint(nw_roles_readmit_role(e, 5, 0, &rules), ==, D);

	/* Prefill below its floor, decode met. */
	e[3].live = true;
	g_assert_cmpuint(nw_roles_readmit_role(e, 5, 0, &rules), ==, P);
	g_assert_cmpuint(nw_roles_readmit_role(e, 5, 4, &rules), ==, P);
}

/* Readmission with both floors met: the phase with fewer live engines; a
 * tie keeps the role; engine i's own live flag is not counted; pinned and
 * unmovable engines keep their role. */
static void
test_readmit_fewer_and_ties(void)
{
	struct nw_role_engine e[] = { eng(P), eng(D), eng(D), eng(D) };

	/* Others: 1P + 2D: prefill has fewer. */
	g_assert_cmpuint(nw_roles_readmit_role(e, 4, 3, &floors11), ==, P);
	/* Others of engine 2 with engine 3 out: 1P + 1D, a tie keeps decode
	 * (counting engine 2's own live flag would give 1P + 2D, so prefill). */
	e[3].live = false;
	g_assert_cmpuint(nw_roles_readmit_role(e, 4, 2, &floors11), ==, D);
	e[2].role = P;
	g_assert_cmpuint(nw_roles_readmit_role(e, 4, 2, &floors11), ==, P);

	/* Pinned or unmovable keep their role even below a floor. */
	e[1].live = false;  /* no live decode besides the engine itself */
	e[2].pinned = true;
	g_assert_cmpuint(nw_roles_readmit_role(e, 4, 2, &floors11), ==, P);
	e[2].pinned = false;
	e[2].movable = false;
	g_assert_cmpuint(nw_roles_readmit_role(e, 4, 2, &floors11), ==, P);
	e[2].movable = true;
	g_assert_cmpuint(nw_roles_readmit_role(e, 4, 2, &floors11), ==, D);
}

/* An engine whose dialect cannot pair (llama.cpp's): it runs whole
 * requests whatever its role label, and never moves. */
static struct nw_role_engine
agg(narwhal_role role)
{
	return (struct nw_role_engine){ .role = role, .live = true, .aggregate_only = true };
}

/* Issue 14, a fleet that mixes dialects (spec 7.2): the floors keep engines
 * that can pair in each phase, so an aggregate-only engine labelled
 * prefill does not let the last pairing prefill engine move to decode. */
static void
test_mixed_guard_floors(void)
{
	struct nw_role_engine e[] = { agg(P), eng(P), eng(D), eng(D) };

	g_assert_cmpint(nw_roles_check_move(e, 4, 1, D, &floors11, S(1)), ==,
	                NW_ROLE_GUARD_PREFILL_FLOOR);
	e[0].role = D;
	g_assert_cmpint(nw_roles_check_move(e, 4, 1, D, &floors11, S(1)), ==,
	                NW_ROLE_GUARD_PREFILL_FLOOR);
	/* Two pairing decode engines: one may go. */
	g_assert_cmpint(nw_roles_check_move(e, 4, 2, P, &floors11, S(1)), ==, NW_ROLE_GUARD_OK);
	e[3].live = false;
	g_assert_cmpint(nw_roles_check_move(e, 4, 2, P, &floors11, S(1)), ==,
	                NW_ROLE_GUARD_DECODE_FLOOR);
	/* The aggregate-only engine itself never moves. */
	g_assert_cmpint(nw_roles_check_move(e, 4, 0, P, &floors11, S(1)), ==,
	                NW_ROLE_GUARD_NOT_MOVABLE);
}

/* Issue 14 (spec 7.2): floor repair counts only the engines that can pair.
 * An aggregate-only engine labelled decode is no decode capacity for
 * handoffs, so the pairing decode pool below its floor is repaired from
 * the prefill engines; the split reported is that of the pairing engines. */
static void
test_mixed_floor_repair(void)
{
	struct nw_role_engine e[] = { agg(D), eng(P), eng(P) };
	struct nw_role_change c[4];
	struct nw_floor_report r;

	g_assert_cmpuint(nw_roles_repair_floors(e, 3, &floors11, S(5), c, 4, &r), ==, 1);
	g_assert_cmpuint(c[0].engine, ==, 1);
	g_assert_cmpuint(c[0].to, ==, D);
	assert_report(&r, 1, 1, false, false, 1, 1);
}

/* A fleet of aggregate-only engines has no prefill/decode split: nothing
 * moves and no floor is breached. */
static void
test_all_aggregate_no_breach(void)
{
	struct nw_role_engine e[] = { agg(P), agg(D), agg(D) };
	struct nw_role_change c[4];
	struct nw_floor_report r;

	g_assert_cmpuint(nw_roles_repair_floors(e, 3, &floors11, S(5), c, 4, &r), ==, 0);
	g_assert_false(r.prefill_breach);
	g_assert_false(r.decode_breach);
}

/* Readmission counts the pairing engines only: with the aggregate-only
 * engine labelled decode, the decode pool is empty and takes the engine. */
static void
test_mixed_readmit(void)
{
	struct nw_role_engine e[] = { agg(D), eng(P), eng(P) };

	g_assert_cmpuint(nw_roles_readmit_role(e, 3, 2, &floors11), ==, D);
}

static struct nw_role_change
change(uint32_t engine, int64_t at_ns)
{
	return (struct nw_role_change){
		.engine = engine, .from = P, .to = D, .at_ns = at_ns,
		.caller = "floor_repair", .reason = "decode_below_floor", .applied = true,
		.prefill_after = 1, .decode_after = 1,
	};
}

/* spec 7.2: recovery changes are retained under controller.flip_history;
 * the oldest gives way, the total counts every change. */
static void
test_history_bounded(void)
{
	struct nw_flip_history h;

	nw_flip_history_init(&h, 3);
	for (uint32_t k = 0; k < 2; k++) {
		struct nw_role_change c = change(k, S(k));

		nw_flip_history_add(&h, &c);
	}
	g_assert_cmpuint(h.len, ==, 2);
	for (uint32_t k = 2; k < 7; k++) {
		struct nw_role_change c = change(k, S(k));

		nw_flip_history_add(&h, &c);
	}
	g_assert_cmpuint(h.len, ==, 3);
	g_assert_cmpuint(h.total, ==, 7);

	const char *ids[] = { "e0", "e1", "e2", "e3", "e4", "e5", "e6" };
	json_t *j = nw_flip_history_to_json(&h, ids, 0);

	g_assert_cmpuint(json_array_size(j), ==, 3);
	for (size_t k = 0; k < 3; k++)   /* oldest first: 4, 5, 6 */
		g_assert_cmpstr(json_string_value(json_object_get(json_array_get(j, k), "engine")),
		                ==, ids[4 + k]);
	json_decref(j);
	nw_flip_history_clear(&h);
	g_assert_null(h.ring);
	g_assert_cmpuint(h.len, ==, 0);

	/* A capacity of 0 keeps the latest change. */
	nw_flip_history_init(&h, 0);
	for (uint32_t k = 0; k < 2; k++) {
		struct nw_role_change c = change(k, S(k));

		nw_flip_history_add(&h, &c);
	}
	g_assert_cmpuint(h.len, ==, 1);
	g_assert_cmpuint(h.ring[h.head].engine, ==, 1);
	nw_flip_history_clear(&h);
}

/* The flip history's JSON for /narwhal/state. */
static void
test_history_json(void)
{
	struct nw_flip_history h;
	struct nw_role_change c = {
		.engine = 1, .from = D, .to = P, .at_ns = S(12) + 500000000,
		.caller = "floor_repair", .reason = "prefill_below_floor", .applied = false,
		.prefill_after = 2, .decode_after = 3,
	};
	const char *ids[] = { "a", "b" };

	nw_flip_history_init(&h, 4);
	nw_flip_history_add(&h, &c);
	json_t *j = nw_flip_history_to_json(&h, ids, S(2));
	json_t *want = json_pack("[{s:s, s:s, s:s, s:f, s:s, s:s, s:b, s:i, s:i}]",
	                         "engine", "b", "from", "decode", "to", "prefill",
	                         "at_s", 10.5, "caller", "floor_repair",
	                         "reason", "prefill_below_floor", "applied", 0,
	                         "prefill", 2, "decode", 3);

	g_assert_true(json_equal(j, want));
	json_decref(want);
	json_decref(j);

	/* Empty: an empty array. */
	nw_flip_history_clear(&h);
	nw_flip_history_init(&h, 4);
	j = nw_flip_history_to_json(&h, ids, 0);
	g_assert_true(json_is_array(j));
	g_assert_cmpuint(json_array_size(j), ==, 0);
	json_decref(j);
	nw_flip_history_clear(&h);
}

/* Issue 11 (metrics: role changes by caller and applied): the flip
 * history counts every change by caller, an unlisted caller as "other",
 * and the counts carry over a reload with the total, removed engines'
 * changes included. */
static void
test_history_by_caller(void)
{
	struct nw_flip_history h, next;
	struct nw_role_change c = change(0, S(1));
	const uint32_t new_of_old[] = { UINT32_MAX, 0 };
	uint32_t op = nw_role_caller_index("operator");
	uint32_t other = nw_role_caller_index("someone");

	g_assert_cmpuint(nw_role_caller_index("floor_repair"), ==, 0);
	/* Issue 13: the urgent TTFT evaluation is a caller of its own. */
	g_assert_cmpstr(nw_role_callers[nw_role_caller_index("controller_urgent")], ==,
	                "controller_urgent");
	g_assert_cmpstr(nw_role_callers[op], ==, "operator");
	g_assert_cmpstr(nw_role_callers[other], ==, "other");
	g_assert_cmpuint(nw_role_caller_index(NULL), ==, other);
	nw_flip_history_init(&h, 1);
	nw_flip_history_add(&h, &c);              /* floor_repair, applied */
	c.engine = 1;
	c.caller = "operator";
	nw_flip_history_add(&h, &c);              /* operator, applied */
	c.applied = false;
	c.caller = "controller";
	nw_flip_history_add(&h, &c);              /* controller, advised */
	c.caller = "someone";
	nw_flip_history_add(&h, &c);
	g_assert_cmpuint(h.by_caller[0][1], ==, 1);
	g_assert_cmpuint(h.by_caller[0][0], ==, 0);
	g_assert_cmpuint(h.by_caller[op][1], ==, 1);
	g_assert_cmpuint(h.by_caller[nw_role_caller_index("controller")][0], ==, 1);
	g_assert_cmpuint(h.by_caller[other][0], ==, 1);

	nw_flip_history_init(&next, 4);
	nw_flip_history_adopt(&next, &h, new_of_old);
	g_assert_cmpuint(next.total, ==, 4);
	g_assert_cmpuint(next.by_caller[0][1], ==, 1);  /* engine 0 was removed */
	g_assert_cmpuint(next.by_caller[op][1], ==, 1);
	g_assert_cmpuint(next.by_caller[other][0], ==, 1);
	nw_flip_history_clear(&h);
	nw_flip_history_clear(&next);
}

static void
test_role_name(void)
{
	g_assert_cmpstr(nw_role_name(P), ==, "prefill");
	g_assert_cmpstr(nw_role_name(D), ==, "decode");
	g_assert_cmpstr(nw_role_name(0), ==, "unknown");
}

/* issue 11, admin API role change: the host's guards on one move, in
 * order (role-control document, "Guards on role changes"), with a fake
 * clock. */
static void
test_guard_live_movable_pinned(void)
{
	struct nw_role_engine e[] = { eng(P), eng(P), eng(D), eng(D) };
	const struct nw_role_rules r = floors11;

	g_assert_cmpint(nw_roles_check_move(e, 4, 0, D, &r, S(1)), ==, NW_ROLE_GUARD_OK);
	g_assert_cmpint(nw_roles_check_move(e, 4, 0, P, &r, S(1)), ==, NW_ROLE_GUARD_SAME_ROLE);
	e[0].live = false;
	g_assert_cmpint(nw_roles_check_move(e, 4, 0, D, &r, S(1)), ==, NW_ROLE_GUARD_NOT_LIVE);
	e[0].live = true;
	e[0].movable = false;
	g_assert_cmpint(nw_roles_check_move(e, 4, 0, D, &r, S(1)), ==, NW_ROLE_GUARD_NOT_MOVABLE);
	e[0].movable = true;
	e[0].pinned = true;
	g_assert_cmpint(nw_roles_check_move(e, 4, 0, D, &r, S(1)), ==, NW_ROLE_GUARD_PINNED);
	g_assert_cmpstr(nw_role_guard_code(NW_ROLE_GUARD_PINNED), ==, "engine_pinned");
	g_assert_null(nw_role_guard_code(NW_ROLE_GUARD_OK));
}

/* issue 11, admin API role change (spec 7.2): the phase the engine leaves
 * keeps its floor of live engines; engines out of placement do not count;
 * a move towards a breached floor is allowed. */
static void
test_guard_floors(void)
{
	struct nw_role_engine e[] = { eng(P), eng(P), eng(D), eng(D) };
	struct nw_role_rules r = { .min_prefill = 2, .min_decode = 2 };

	g_assert_cmpint(nw_roles_check_move(e, 4, 0, D, &r, S(1)), ==,
	                NW_ROLE_GUARD_PREFILL_FLOOR);
	g_assert_cmpint(nw_roles_check_move(e, 4, 2, P, &r, S(1)), ==,
	                NW_ROLE_GUARD_DECODE_FLOOR);
	g_assert_cmpstr(nw_role_guard_code(NW_ROLE_GUARD_DECODE_FLOOR), ==, "decode_floor");
	r.min_prefill = 1;
	g_assert_cmpint(nw_roles_check_move(e, 4, 0, D, &r, S(1)), ==, NW_ROLE_GUARD_OK);
	/* The other prefill engine is out: engine 0 is the last live one. */
	e[1].live = false;
	g_assert_cmpint(nw_roles_check_move(e, 4, 0, D, &r, S(1)), ==,
	                NW_ROLE_GUARD_PREFILL_FLOOR);
	/* Decode below its floor: a prefill engine above its own may join it. */
	e[1].live = true;
	e[3].live = false;
	g_assert_cmpint(nw_roles_check_move(e, 4, 0, D, &r, S(1)), ==, NW_ROLE_GUARD_OK);
}

/* issue 11, admin API role change: dwell_s since the engine's last change,
 * on the fake clock. */
static void
test_guard_dwell(void)
{
	struct nw_role_engine e[] = { eng(P), eng(P), eng(D), eng(D) };
	struct nw_role_rules r = floors11;

	r.dwell_s = 10;
	e[0].role_since_ns = S(5);
	g_assert_cmpint(nw_roles_check_move(e, 4, 0, D, &r, S(14)), ==, NW_ROLE_GUARD_DWELL);
	g_assert_cmpint(nw_roles_check_move(e, 4, 0, D, &r, S(15)), ==, NW_ROLE_GUARD_OK);
	/* The floor speaks before dwell. */
	r.min_prefill = 2;
	g_assert_cmpint(nw_roles_check_move(e, 4, 0, D, &r, S(14)), ==,
	                NW_ROLE_GUARD_PREFILL_FLOOR);
}

/* issue 11, admin API role change: flip_resident_guard caps the resident
 * streams of a decode engine moved to prefill, and only that direction. */
static void
test_guard_resident(void)
{
	struct nw_role_engine e[] = { eng(P), eng(P), eng(D), eng(D) };
	struct nw_role_rules r = floors11;

	e[2].resident = 3;
	e[0].resident = 9;
	g_assert_cmpint(nw_roles_check_move(e, 4, 2, P, &r, S(1)), ==, NW_ROLE_GUARD_OK);
	r.flip_resident_guard = 2;
	g_assert_cmpint(nw_roles_check_move(e, 4, 2, P, &r, S(1)), ==, NW_ROLE_GUARD_RESIDENT);
	g_assert_cmpint(nw_roles_check_move(e, 4, 0, D, &r, S(1)), ==, NW_ROLE_GUARD_OK);
	r.flip_resident_guard = 3;
	g_assert_cmpint(nw_roles_check_move(e, 4, 2, P, &r, S(1)), ==, NW_ROLE_GUARD_OK);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/roles/floors-met", test_floors_met);
	g_test_add_func("/roles/decode-repair-observes-dwell", test_decode_repair_observes_dwell);
	g_test_add_func("/roles/prefill-repair-ignores-dwell", test_prefill_repair_ignores_dwell);
	g_test_add_func("/roles/changes-preserve-min-decode", test_changes_preserve_min_decode);
	g_test_add_func("/roles/pins-and-availability", test_pins_and_availability_apply);
	g_test_add_func("/roles/least-resident-moves", test_least_resident_moves);
	g_test_add_func("/roles/advisory", test_advisory);
	g_test_add_func("/roles/breach-reachable-split", test_breach_reports_reachable_split);
	g_test_add_func("/roles/spec-7.2/decode-repair-preserves-prefill-floor", test_decode_repair_preserves_prefill_floor);
	g_test_add_func("/roles/decode-one-per-pass", test_decode_one_engine_per_pass);
	g_test_add_func("/roles/prefill-several-engines", test_prefill_several_engines);
	g_test_add_func("/roles/repair-reaches-reachable", test_repair_reaches_reachable_split);
	g_test_add_func("/roles/readmit-floors", test_readmit_role);
	g_test_add_func("/roles/readmit-fewer-and-ties", test_readmit_fewer_and_ties);
	g_test_add_func("/roles/history-bounded", test_history_bounded);
	g_test_add_func("/roles/history-json", test_history_json);
	g_test_add_func("/roles/role-name", test_role_name);
	g_test_add_func("/roles/issue-11/history-by-caller", test_history_by_caller);
	g_test_add_func("/roles/issue-11/guard-live-movable-pinned", test_guard_live_movable_pinned);
	g_test_add_func("/roles/issue-11/guard-floors", test_guard_floors);
	g_test_add_func("/roles/issue-11/guard-dwell", test_guard_dwell);
	g_test_add_func("/roles/issue-11/guard-resident", test_guard_resident);
	g_test_add_func("/roles/issue-14/mixed-guard-floors", test_mixed_guard_floors);
	g_test_add_func("/roles/issue-14/mixed-floor-repair", test_mixed_floor_repair);
	g_test_add_func("/roles/issue-14/all-aggregate-no-breach", test_all_aggregate_no_breach);
	g_test_add_func("/roles/issue-14/mixed-readmit", test_mixed_readmit);
	return g_test_run();
}
