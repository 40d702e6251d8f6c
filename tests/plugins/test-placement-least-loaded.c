/*
 * The "least-loaded" placement in isolation: the built .so, loaded by the
 * real loader, driven against the mock host with fleets the test builds.
 */
#include "build-config.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "plugins/harness.h"

#define N_MAX 8

/* A fleet view over engines the test fills in. */
struct fleet {
	struct narwhal_engine_view engines[N_MAX];
	struct narwhal_fleet_view view;
};

struct load {
	const char *id;
	uint32_t resident_prefill;
	uint32_t queued_prefill;
	uint32_t resident_decode;
};

static void
fleet_init(struct fleet *f, const struct load *loads, uint32_t n)
{
	g_assert_cmpuint(n, <=, N_MAX);
	memset(f, 0, sizeof *f);
	for (uint32_t i = 0; i < n; i++) {
		struct narwhal_engine_view *e = &f->engines[i];

		e->struct_size = sizeof *e;
		e->index = i;
		e->id = loads[i].id;
		e->role = NARWHAL_ROLE_PREFILL;
		e->flags = NARWHAL_ENGINE_AVAILABLE;
		e->resident_prefill = loads[i].resident_prefill;
		e->queued_prefill = loads[i].queued_prefill;
		e->resident_decode = loads[i].resident_decode;
		e->resident_kv_tokens = 1000u * loads[i].resident_decode;
		e->prefill_load = NAN;
		e->decode_load = NAN;
	}
	f->view.struct_size = sizeof f->view;
	f->view.engine_view_size = sizeof(struct narwhal_engine_view);
	f->view.n_engines = n;
	f->view.engines = f->engines;
	f->view.ttft_target_s = 1.0;
	f->view.tpot_target_s = 0.05;
}

static struct nw_harness *
least_with(const char *config_json)
{
	struct nw_harness *h = nw_harness_new(NARWHAL_KIND_PLACEMENT, "least-loaded");
	g_autoptr(GError) error = NULL;

	if (h == NULL)
		return NULL;
	g_assert_true(nw_harness_create(h, config_json, &error));
	g_assert_no_error(error);
	return h;
}

static int
place_rc(struct nw_harness *h, narwhal_phase phase, const uint32_t *eligible, uint32_t n,
         struct narwhal_placement_result *out)
{
	struct narwhal_placement_request req = {
		.struct_size = sizeof req,
		.request_id = "req-1",
		.phase = phase,
		.prompt_tokens = 1000,
		.max_tokens = 64,
		.eligible = eligible,
		.n_eligible = n,
	};

	/* Poisoned, so a field the plugin forgets shows up. */
	*out = (struct narwhal_placement_result){
		.struct_size = sizeof *out,
		.engine = 777,
		.cost = -1.0,
		.projected_slo_ratio = -1.0,
		.unserved = true,
	};
	return nw_harness_ops(h)->placement.place(nw_harness_ctx(h), &req, out);
}

/* Place and return the chosen engine, checking the result fields. */
static uint32_t
place(struct nw_harness *h, narwhal_phase phase, const uint32_t *eligible, uint32_t n,
      double expected_cost)
{
	struct narwhal_placement_result out;

	g_assert_cmpint(place_rc(h, phase, eligible, n, &out), ==, 0);
	g_assert_cmpuint(out.struct_size, ==, sizeof out);
	g_assert_cmpfloat(out.cost, ==, expected_cost);
	g_assert_true(isnan(out.projected_slo_ratio));
	g_assert_false(out.unserved);
	return out.engine;
}

static const uint32_t all4[] = { 0, 1, 2, 3 };

static void
test_descriptor(void)
{
	struct nw_harness *h = nw_harness_new(NARWHAL_KIND_PLACEMENT, "least-loaded");

	if (h == NULL)
		return;
	g_assert_cmpstr(h->plugin->desc->name, ==, "least-loaded");
	g_assert_cmpuint(h->plugin->desc->abi_major, ==, NARWHAL_ABI_MAJOR);
	g_assert_cmpuint(h->plugin->desc->abi_minor, ==, NARWHAL_ABI_MINOR);
	g_assert_nonnull(h->plugin->ops.placement.place);
	nw_harness_free(h);
}

/* Spec 5: the lowest-cost eligible engine. */
static void
test_lowest_load(void)
{
	static const struct load loads[] = {
		{ "e0", 3, 0, 0 }, { "e1", 1, 0, 0 }, { "e2", 2, 0, 0 }, { "e3", 5, 0, 0 },
	};
	struct nw_harness *h = least_with(NULL);
	struct fleet f;

	if (h == NULL)
		return;
	fleet_init(&f, loads, 4);
	narwhal_mock_host_set_fleet(h->host, &f.view);
	g_assert_cmpuint(place(h, NARWHAL_PHASE_PREFILL, all4, 4, 1.0), ==, 1);
	/* Loads change between calls; each call reads the fleet afresh. */
	f.engines[1].resident_prefill = 9;
	g_assert_cmpuint(place(h, NARWHAL_PHASE_PREFILL, all4, 4, 2.0), ==, 2);
	f.engines[3].resident_prefill = 0;
	g_assert_cmpuint(place(h, NARWHAL_PHASE_PREFILL, all4, 4, 0.0), ==, 3);
	g_assert_cmpuint(narwhal_mock_host_fleet_reads(h->host), ==, 3);
	nw_harness_free(h);
}

/* Each phase has its own load, so each picks a different engine here. */
static void
test_phases(void)
{
	static const struct load loads[] = {
		/* id    rp  qp  rd      prefill  decode  aggregate */
		{ "a", 0, 5, 3 },  /*  5        3       3 */
		{ "b", 2, 0, 9 },  /*  2        9      11 */
		{ "c", 4, 0, 0 },  /*  4        0       4 */
		{ "d", 1, 3, 1 },  /*  4        1       2 */
	};
	struct nw_harness *h = least_with("{}");
	struct fleet f;

	if (h == NULL)
		return;
	fleet_init(&f, loads, 4);
	narwhal_mock_host_set_fleet(h->host, &f.view);
	/* Prefill counts queued offers too. */
	g_assert_cmpuint(place(h, NARWHAL_PHASE_PREFILL, all4, 4, 2.0), ==, 1);
	g_assert_cmpuint(place(h, NARWHAL_PHASE_DECODE, all4, 4, 0.0), ==, 2);
	/* Aggregate counts both resident phases, not queued offers. */
	g_assert_cmpuint(place(h, NARWHAL_PHASE_AGGREGATE, all4, 4, 2.0), ==, 3);
	nw_harness_free(h);
}

/* Only the eligible engines count, in whatever order the host lists them. */
static void
test_eligible_subset(void)
{
	static const struct load loads[] = {
		{ "e0", 0, 0, 0 }, { "e1", 4, 0, 4 }, { "e2", 2, 0, 2 }, { "e3", 3, 0, 3 },
	};
	static const uint32_t some[] = { 3, 1, 2 };
	static const uint32_t one[] = { 1 };
	struct nw_harness *h = least_with(NULL);
	struct fleet f;

	if (h == NULL)
		return;
	fleet_init(&f, loads, 4);
	narwhal_mock_host_set_fleet(h->host, &f.view);
	g_assert_cmpuint(place(h, NARWHAL_PHASE_DECODE, some, 3, 2.0), ==, 2);
	g_assert_cmpuint(place(h, NARWHAL_PHASE_PREFILL, one, 1, 4.0), ==, 1);
	nw_harness_free(h);
}

/* Spec 5: equal costs go to the lowest instance ID, whatever the order of
 * the fleet or of the eligible list. */
static void
test_tie_by_instance_id(void)
{
	static const struct load loads[] = {
		{ "engine-b", 2, 0, 1 }, { "engine-c", 2, 0, 1 },
		{ "engine-a", 2, 0, 1 }, { "engine-d", 1, 1, 1 },
	};
	static const uint32_t orders[][4] = {
		{ 0, 1, 2, 3 }, { 3, 2, 1, 0 }, { 2, 0, 3, 1 }, { 1, 3, 0, 2 }, { 3, 1, 2, 0 },
	};
	struct nw_harness *h = least_with(NULL);
	struct fleet f;

	if (h == NULL)
		return;
	fleet_init(&f, loads, 4);
	narwhal_mock_host_set_fleet(h->host, &f.view);
	for (guint i = 0; i < G_N_ELEMENTS(orders); i++) {
		/* Prefill: all four tie at 2 (engine-d by its queued offer). */
		g_assert_cmpuint(place(h, NARWHAL_PHASE_PREFILL, orders[i], 4, 2.0), ==, 2);
		g_assert_cmpuint(place(h, NARWHAL_PHASE_DECODE, orders[i], 4, 1.0), ==, 2);
		/* Aggregate: engine-d is alone at 2. */
		g_assert_cmpuint(place(h, NARWHAL_PHASE_AGGREGATE, orders[i], 4, 2.0), ==, 3);
	}
	/* Without engine-a, engine-b wins the tie. */
	{
		static const uint32_t no_a[] = { 3, 1, 0 };

		g_assert_cmpuint(place(h, NARWHAL_PHASE_PREFILL, no_a, 3, 2.0), ==, 0);
	}
	nw_harness_free(h);
}

/* The same engines in another fleet order choose the same instance. */
static void
test_tie_independent_of_fleet_order(void)
{
	static const struct load forward[] = {
		{ "p1", 1, 0, 0 }, { "p2", 1, 0, 0 }, { "p3", 1, 0, 0 },
	};
	static const struct load backward[] = {
		{ "p3", 1, 0, 0 }, { "p2", 1, 0, 0 }, { "p1", 1, 0, 0 },
	};
	static const uint32_t three[] = { 0, 1, 2 };
	struct nw_harness *h = least_with(NULL);
	struct fleet f;
	uint32_t e;

	if (h == NULL)
		return;
	fleet_init(&f, forward, 3);
	narwhal_mock_host_set_fleet(h->host, &f.view);
	e = place(h, NARWHAL_PHASE_PREFILL, three, 3, 1.0);
	g_assert_cmpstr(f.engines[e].id, ==, "p1");
	fleet_init(&f, backward, 3);
	e = place(h, NARWHAL_PHASE_PREFILL, three, 3, 1.0);
	g_assert_cmpstr(f.engines[e].id, ==, "p1");
	g_assert_cmpuint(e, ==, 2);
	nw_harness_free(h);
}

/* Spec 5 says "by instance ID": byte order (strcmp), so "engine-10" sorts
 * before "engine-9" and upper case before lower case. */
static void
test_tie_is_strcmp(void)
{
	static const struct load loads[] = {
		{ "engine-9", 0, 0, 0 }, { "engine-10", 0, 0, 0 },
		{ "b", 0, 0, 0 }, { "B", 0, 0, 0 },
	};
	static const uint32_t nines[] = { 0, 1 };
	static const uint32_t bees[] = { 2, 3 };
	struct nw_harness *h = least_with(NULL);
	struct fleet f;

	if (h == NULL)
		return;
	fleet_init(&f, loads, 4);
	narwhal_mock_host_set_fleet(h->host, &f.view);
	g_assert_cmpuint(place(h, NARWHAL_PHASE_DECODE, nines, 2, 0.0), ==, 1);
	g_assert_cmpuint(place(h, NARWHAL_PHASE_DECODE, bees, 2, 0.0), ==, 3);
	nw_harness_free(h);
}

/* Sums are taken in 64 bits: a saturated engine never looks idle. */
static void
test_no_overflow(void)
{
	static const struct load loads[] = {
		{ "a", UINT32_MAX, 1, UINT32_MAX }, { "b", 7, 0, 7 },
	};
	static const uint32_t two[] = { 0, 1 };
	struct nw_harness *h = least_with(NULL);
	struct fleet f;

	if (h == NULL)
		return;
	fleet_init(&f, loads, 2);
	narwhal_mock_host_set_fleet(h->host, &f.view);
	g_assert_cmpuint(place(h, NARWHAL_PHASE_PREFILL, two, 2, 7.0), ==, 1);
	g_assert_cmpuint(place(h, NARWHAL_PHASE_AGGREGATE, two, 2, 14.0), ==, 1);
	f.engines[1].resident_prefill = UINT32_MAX;
	f.engines[1].queued_prefill = UINT32_MAX;
	g_assert_cmpuint(place(h, NARWHAL_PHASE_PREFILL, two, 2, 4294967296.0), ==, 0);
	nw_harness_free(h);
}

/* A newer host's engine views are larger: the plugin must step by
 * engine_view_size, never by its own sizeof. */
struct wide_engine {
	struct narwhal_engine_view v;
	uint64_t future[5]; /* fields a later minor might add */
};

static void
test_stride(void)
{
	static const char *const ids[] = { "w0", "w1", "w2", "w3" };
	static const uint32_t decode[] = { 6, 4, 1, 3 };
	struct wide_engine wide[4];
	struct narwhal_fleet_view view;
	struct nw_harness *h = least_with(NULL);

	if (h == NULL)
		return;
	/* Zeroed padding reads as an idle, nameless engine to a plugin that
	 * steps by its own sizeof. */
	memset(wide, 0, sizeof wide);
	for (guint i = 0; i < 4; i++) {
		wide[i].v.struct_size = sizeof wide[i];
		wide[i].v.index = i;
		wide[i].v.id = ids[i];
		wide[i].v.role = NARWHAL_ROLE_DECODE;
		wide[i].v.flags = NARWHAL_ENGINE_AVAILABLE;
		wide[i].v.resident_decode = decode[i];
		wide[i].v.resident_prefill = 2 * decode[i];
		wide[i].v.prefill_load = NAN;
		wide[i].v.decode_load = NAN;
	}
	view = (struct narwhal_fleet_view){
		.struct_size = sizeof view,
		.engine_view_size = sizeof(struct wide_engine),
		.n_engines = 4,
		.engines = &wide[0].v,
		.ttft_target_s = 1.0,
		.tpot_target_s = 0.05,
	};
	narwhal_mock_host_set_fleet(h->host, &view);
	g_assert_cmpuint(place(h, NARWHAL_PHASE_DECODE, all4, 4, 1.0), ==, 2);
	g_assert_cmpuint(place(h, NARWHAL_PHASE_PREFILL, all4, 4, 2.0), ==, 2);
	g_assert_cmpuint(place(h, NARWHAL_PHASE_AGGREGATE, all4, 4, 3.0), ==, 2);
	wide[2].v.resident_decode = 9;
	g_assert_cmpuint(place(h, NARWHAL_PHASE_DECODE, all4, 4, 3.0), ==, 3);
	nw_harness_free(h);
}

/* No candidate: -ENOENT, and out untouched. */
static void
test_empty(void)
{
	static const struct load loads[] = { { "e0", 0, 0, 0 }, { "e1", 0, 0, 0 } };
	static const uint32_t outside[] = { 2, 99, UINT32_MAX };
	static const uint32_t mixed[] = { 7, 1 };
	struct nw_harness *h = least_with(NULL);
	struct narwhal_placement_result out;
	struct fleet f;

	if (h == NULL)
		return;
	/* No fleet at all. */
	g_assert_cmpint(place_rc(h, NARWHAL_PHASE_PREFILL, all4, 2, &out), ==, -ENOENT);
	fleet_init(&f, loads, 2);
	narwhal_mock_host_set_fleet(h->host, &f.view);
	g_assert_cmpint(place_rc(h, NARWHAL_PHASE_PREFILL, all4, 0, &out), ==, -ENOENT);
	g_assert_cmpint(place_rc(h, NARWHAL_PHASE_DECODE, NULL, 0, &out), ==, -ENOENT);
	g_assert_cmpuint(out.engine, ==, 777);
	/* Indices that name no engine are skipped. */
	g_assert_cmpint(place_rc(h, NARWHAL_PHASE_AGGREGATE, outside, 3, &out), ==, -ENOENT);
	g_assert_cmpuint(out.engine, ==, 777);
	g_assert_cmpuint(place(h, NARWHAL_PHASE_PREFILL, mixed, 2, 0.0), ==, 1);
	nw_harness_free(h);
}

static void
test_bad_arguments(void)
{
	static const struct load loads[] = { { "e0", 0, 0, 0 } };
	static const uint32_t zero[] = { 0 };
	struct nw_harness *h = least_with(NULL);
	struct narwhal_placement_result out;
	struct fleet f;

	if (h == NULL)
		return;
	fleet_init(&f, loads, 1);
	narwhal_mock_host_set_fleet(h->host, &f.view);
	g_assert_cmpint(place_rc(h, (narwhal_phase)0, zero, 1, &out), ==, -EINVAL);
	g_assert_cmpint(place_rc(h, (narwhal_phase)4, zero, 1, &out), ==, -EINVAL);
	g_assert_cmpint(nw_harness_ops(h)->placement.place(nw_harness_ctx(h), NULL, &out), ==,
	                -EINVAL);
	{
		struct narwhal_placement_request req = {
			.struct_size = sizeof req, .phase = NARWHAL_PHASE_DECODE,
			.eligible = zero, .n_eligible = 1,
		};

		g_assert_cmpint(nw_harness_ops(h)->placement.place(nw_harness_ctx(h), &req, NULL),
		                ==, -EINVAL);
	}
	/* A view too short to hold the fields placement reads. */
	f.view.engine_view_size = 8;
	g_assert_cmpint(place_rc(h, NARWHAL_PHASE_DECODE, zero, 1, &out), ==, -EINVAL);
	nw_harness_free(h);
}

/* Policy only: no clock, no estimators, no logs, no metrics. */
static void
test_no_other_host_calls(void)
{
	static const struct load loads[] = { { "e0", 1, 0, 0 }, { "e1", 0, 0, 1 } };
	static const uint32_t two[] = { 0, 1 };
	struct nw_harness *h = least_with("null");
	struct fleet f;

	if (h == NULL)
		return;
	fleet_init(&f, loads, 2);
	narwhal_mock_host_set_fleet(h->host, &f.view);
	for (int phase = NARWHAL_PHASE_PREFILL; phase <= NARWHAL_PHASE_AGGREGATE; phase++)
		place(h, (narwhal_phase)phase, two, 2, phase == NARWHAL_PHASE_AGGREGATE ? 1.0 : 0.0);
	g_assert_cmpuint(narwhal_mock_host_clock_reads(h->host), ==, 0);
	for (guint i = 0; i < NARWHAL_MOCK_N_ESTIMATORS; i++)
		g_assert_cmpuint(narwhal_mock_host_estimate_calls(h->host, i), ==, 0);
	g_assert_cmpuint(narwhal_mock_host_n_logs(h->host), ==, 0);
	nw_harness_free(h);
}

static void
expect_config_error(const char *config_json, const char *reason)
{
	nw_harness_expect_config_error(NARWHAL_KIND_PLACEMENT, "least-loaded", config_json, reason);
}

static void
test_config_errors(void)
{
	expect_config_error("{\"max_resident\": 4}",
	                    "unknown key \"max_resident\": the least-loaded placement takes no "
	                    "options");
	expect_config_error("{\"x\": {}}", "unknown key \"x\"");
	expect_config_error("[]", "config must be an empty object");
	expect_config_error("0", "config must be an empty object");
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);

	g_test_add_func("/placement/least-loaded/descriptor", test_descriptor);
	g_test_add_func("/placement/least-loaded/spec-5/lowest-load", test_lowest_load);
	g_test_add_func("/placement/least-loaded/phases", test_phases);
	g_test_add_func("/placement/least-loaded/spec-5/eligible-only", test_eligible_subset);
	g_test_add_func("/placement/least-loaded/spec-5/tie-by-instance-id",
	                test_tie_by_instance_id);
	g_test_add_func("/placement/least-loaded/spec-5/tie-independent-of-fleet-order",
	                test_tie_independent_of_fleet_order);
	g_test_add_func("/placement/least-loaded/spec-5/tie-is-strcmp", test_tie_is_strcmp);
	g_test_add_func("/placement/least-loaded/no-overflow", test_no_overflow);
	g_test_add_func("/placement/least-loaded/abi/stride", test_stride);
	g_test_add_func("/placement/least-loaded/empty", test_empty);
	g_test_add_func("/placement/least-loaded/bad-arguments", test_bad_arguments);
	g_test_add_func("/placement/least-loaded/no-other-host-calls", test_no_other_host_calls);
	g_test_add_func("/placement/least-loaded/config-errors", test_config_errors);
	return g_test_run();
}
