/*
 * The "slo-cost" placement in isolation (spec 5; issue 12;
 * docs/placement.md): the built .so, loaded by the real loader, driven
 * against the mock host with fleets the test builds and estimator answers
 * scripted per engine.
 */
#include "build-config.h"

#include <errno.h>
#include <malloc.h>
#include <math.h>
#include <string.h>

#include "plugins/harness.h"

#define N_MAX 6
#define OK NARWHAL_ESTIMATE_OK
#define NP NARWHAL_ESTIMATE_NO_PROFILE
#define OOD NARWHAL_ESTIMATE_OUT_OF_DOMAIN
#define TTFT_S 1.0
#define TPOT_S 0.05

/* One engine: its counts and the one answer its phase's estimator gives
 * (prefill_queue_seconds for prefill and aggregate, decode_interval_seconds
 * for decode); an answer not given is the mock's "no profile". */
struct eng {
	const char *id;
	uint32_t resident_prefill, queued_prefill, resident_decode;
	bool given;
	narwhal_estimate_status st;
	double v;
};

struct fleet {
	struct narwhal_engine_view engines[N_MAX];
	struct narwhal_fleet_view view;
};

static uint32_t
fleet_init(struct fleet *f, const struct eng *engs)
{
	uint32_t n = 0;

	memset(f, 0, sizeof *f);
	for (; n < N_MAX && engs[n].id != NULL; n++) {
		struct narwhal_engine_view *e = &f->engines[n];

		e->struct_size = sizeof *e;
		e->index = n;
		e->id = engs[n].id;
		e->role = NARWHAL_ROLE_PREFILL;
		e->flags = NARWHAL_ENGINE_AVAILABLE | NARWHAL_ENGINE_PROFILED;
		e->resident_prefill = engs[n].resident_prefill;
		e->queued_prefill = engs[n].queued_prefill;
		e->resident_decode = engs[n].resident_decode;
		e->resident_kv_tokens = 1000u * engs[n].resident_decode;
		e->prefill_load = NAN;
		e->decode_load = NAN;
	}
	f->view.struct_size = sizeof f->view;
	f->view.engine_view_size = sizeof(struct narwhal_engine_view);
	f->view.n_engines = n;
	f->view.engines = f->engines;
	f->view.ttft_target_s = TTFT_S;
	f->view.tpot_target_s = TPOT_S;
	return n;
}

static narwhal_mock_estimator
estimator_of(narwhal_phase phase)
{
	return phase == NARWHAL_PHASE_DECODE ? NARWHAL_MOCK_DECODE_INTERVAL_SECONDS
	                                     : NARWHAL_MOCK_PREFILL_QUEUE_SECONDS;
}

static void
script(struct narwhal_mock_host *mh, const struct eng *engs, narwhal_phase phase)
{
	narwhal_mock_host_clear_engine_estimates(mh);
	for (uint32_t i = 0; i < N_MAX && engs[i].id != NULL; i++) {
		if (engs[i].given)
			narwhal_mock_host_set_engine_estimate(mh, estimator_of(phase), i, engs[i].st,
			                                 engs[i].v);
	}
}

static struct nw_harness *
load(const char *name, const char *config_json)
{
	struct nw_harness *h = nw_harness_new(NARWHAL_KIND_PLACEMENT, name);
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
		.prompt_tokens = 700,
		.max_tokens = 64,
		.eligible = eligible,
		.n_eligible = n,
		.paired_engine = -1,
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

static struct narwhal_placement_result
place(struct nw_harness *h, narwhal_phase phase, const uint32_t *eligible, uint32_t n)
{
	struct narwhal_placement_result out;

	g_assert_cmpint(place_rc(h, phase, eligible, n, &out), ==, 0);
	g_assert_cmpuint(out.struct_size, ==, sizeof out);
	g_assert_cmpfloat(out.cost, !=, -1.0);
	g_assert_cmpfloat(out.projected_slo_ratio, !=, -1.0);
	return out;
}

static const uint32_t all[] = { 0, 1, 2, 3, 4, 5 };

/* ------------------------------------------------------------ the table --- */

#define P(st_, v_) .given = true, .st = (st_), .v = (v_)

struct scenario {
	const char *name; /* the clause it checks */
	narwhal_phase phase;
	struct eng engines[N_MAX + 1];
	const char *chosen;
	double cost;
	double ratio;     /* NaN: unpriced */
	bool unserved;
};

static const struct scenario scenarios[] = {
	{ "spec 5: the lowest projected completion among those meeting the TTFT target",
	  NARWHAL_PHASE_PREFILL,
	  { { "e0", P(OK, 0.6) }, { "e1", P(OK, 0.3) }, { "e2", P(OK, 0.9) } },
	  "e1", 0.3, 0.3, false },
	{ "spec 5: a projection exactly at the target meets it", NARWHAL_PHASE_PREFILL,
	  { { "e0", P(OK, 1.0) }, { "e1", P(OK, 1.5) } },
	  "e0", 1.0, 1.0, false },
	{ "spec 5: every candidate breaks its projected SLO: unserved, least-cost fallback",
	  NARWHAL_PHASE_PREFILL,
	  { { "e0", P(OK, 2.5) }, { "e1", P(OK, 1.25) }, { "e2", P(OK, 4.0) } },
	  "e1", 1.25, 1.25, true },
	{ "spec 5: aggregate is priced on the prefill queue against the TTFT target",
	  NARWHAL_PHASE_AGGREGATE,
	  { { "e0", P(OK, 0.5) }, { "e1", P(OK, 0.2) } },
	  "e1", 0.2, 0.2, false },
	{ "spec 5: decode is priced on its interval against the TPOT target",
	  NARWHAL_PHASE_DECODE,
	  { { "e0", P(OK, 0.04) }, { "e1", P(OK, 0.03) }, { "e2", P(OK, 0.02), .resident_decode = 1 } },
	  "e2", 0.02, 0.4, false },
	{ "spec 5: decode breaking TPOT everywhere is unserved", NARWHAL_PHASE_DECODE,
	  { { "e0", P(OK, 0.06) }, { "e1", P(OK, 0.075) } },
	  "e0", 0.06, 1.2, true },
	{ "docs/placement.md: a priced engine meeting its SLO beats an idle unprofiled one",
	  NARWHAL_PHASE_PREFILL,
	  { { "e0" }, { "e1", P(OK, 0.7), .resident_prefill = 5 } },
	  "e1", 0.7, 0.7, false },
	{ "docs/placement.md: an unprofiled engine beats one projected to break its SLO",
	  NARWHAL_PHASE_PREFILL,
	  { { "e0", P(OK, 1.5) }, { "e1", .resident_prefill = 3, .queued_prefill = 1 },
	    { "e2", .resident_prefill = 2 } },
	  "e2", 2.0, NAN, false },
	{ "docs/placement.md: unpriced engines are ordered by least-loaded's count",
	  NARWHAL_PHASE_DECODE,
	  { { "e0", .resident_decode = 4 }, { "e1", .resident_decode = 2 },
	    { "e2", .resident_decode = 3 } },
	  "e1", 2.0, NAN, false },
	{ "docs/placement.md: a priced breach is chosen before an engine outside the measured "
	  "domain", NARWHAL_PHASE_DECODE,
	  { { "e0", P(OOD, 0) }, { "e1", P(OK, 0.5), .resident_decode = 7 } },
	  "e1", 0.5, 10.0, true },
	{ "docs/placement.md: with only engines outside the domain, least-loaded's order, not "
	  "unserved", NARWHAL_PHASE_PREFILL,
	  { { "e0", P(OOD, 0), .resident_prefill = 2 }, { "e1", P(OOD, 0), .queued_prefill = 1 } },
	  "e1", 1.0, NAN, false },
	{ "docs/placement.md: a projection that is no number of seconds prices nothing",
	  NARWHAL_PHASE_PREFILL,
	  { { "e0", P(OK, NAN) }, { "e1", P(OK, -1.0) }, { "e2", P(OK, 3.0) } },
	  "e2", 3.0, 3.0, true },
};

static void
run_scenario(gconstpointer data)
{
	const struct scenario *sc = data;
	struct narwhal_placement_result out;
	struct nw_harness *h = load("slo-cost", NULL);
	struct fleet f;
	uint32_t n;

	if (h == NULL)
		return;
	g_test_message("%s", sc->name);
	n = fleet_init(&f, sc->engines);
	narwhal_mock_host_set_fleet(h->host, &f.view);
	script(h->host, sc->engines, sc->phase);
	out = place(h, sc->phase, all, n);
	g_assert_cmpuint(out.engine, <, n);
	g_assert_cmpstr(f.engines[out.engine].id, ==, sc->chosen);
	g_assert_cmpfloat_with_epsilon(out.cost, sc->cost, 1e-12);
	if (isnan(sc->ratio))
		g_assert_true(isnan(out.projected_slo_ratio));
	else
		g_assert_cmpfloat_with_epsilon(out.projected_slo_ratio, sc->ratio, 1e-9);
	g_assert_cmpint(out.unserved, ==, sc->unserved);
	nw_harness_free(h);
}

/* ----------------------------------------------------------- the others --- */

static void
test_descriptor(void)
{
	struct nw_harness *h = nw_harness_new(NARWHAL_KIND_PLACEMENT, "slo-cost");

	if (h == NULL)
		return;
	g_assert_cmpstr(h->plugin->desc->name, ==, "slo-cost");
	g_assert_cmpuint(h->plugin->desc->abi_major, ==, NARWHAL_ABI_MAJOR);
	g_assert_cmpuint(h->plugin->desc->abi_minor, ==, NARWHAL_ABI_MINOR);
	nw_harness_free(h);
}

/* Spec 5: equal costs go to the lowest instance ID (strcmp), whatever the
 * order of the eligible list; in every tier. */
static void
test_tie_by_instance_id(void)
{
	static const struct eng priced[] = {
		{ "engine-b", P(OK, 0.4) }, { "engine-c", P(OK, 0.4) },
		{ "engine-a", P(OK, 0.4) }, { "engine-9", P(OK, 0.5) },
		{ NULL },
	};
	static const struct eng breaking[] = {
		{ "engine-b", P(OK, 2.0) }, { "engine-10", P(OK, 2.0) },
		{ "engine-a", P(OK, 2.0) }, { "engine-9", P(OK, 2.0) },
		{ NULL },
	};
	static const uint32_t orders[][4] = {
		{ 0, 1, 2, 3 }, { 3, 2, 1, 0 }, { 2, 0, 3, 1 }, { 1, 3, 0, 2 }, { 3, 1, 2, 0 },
	};
	struct nw_harness *h = load("slo-cost", "{}");
	struct fleet f;

	if (h == NULL)
		return;
	narwhal_mock_host_set_fleet(h->host, &f.view);
	for (guint i = 0; i < G_N_ELEMENTS(orders); i++) {
		fleet_init(&f, priced);
		script(h->host, priced, NARWHAL_PHASE_PREFILL);
		g_assert_cmpuint(place(h, NARWHAL_PHASE_PREFILL, orders[i], 4).engine, ==, 2);
		/* "engine-10" sorts before "engine-9" and "engine-a". */
		fleet_init(&f, breaking);
		script(h->host, breaking, NARWHAL_PHASE_PREFILL);
		g_assert_cmpuint(place(h, NARWHAL_PHASE_PREFILL, orders[i], 4).engine, ==, 1);
	}
	nw_harness_free(h);
}

/* The decode interval is asked for the engine as it would be with this
 * request: one more active request, its prompt and output resident. */
static void
test_decode_arguments(void)
{
	static const struct eng engs[] = {
		{ "d0", P(OK, 0.01), .resident_decode = 3 }, { NULL },
	};
	static const uint32_t one[] = { 0 };
	const struct narwhal_mock_estimate_call *c;
	struct nw_harness *h = load("slo-cost", NULL);
	struct fleet f;

	if (h == NULL)
		return;
	fleet_init(&f, engs);
	narwhal_mock_host_set_fleet(h->host, &f.view);
	script(h->host, engs, NARWHAL_PHASE_DECODE);
	place(h, NARWHAL_PHASE_DECODE, one, 1);
	c = narwhal_mock_host_last_estimate_for(h->host, NARWHAL_MOCK_DECODE_INTERVAL_SECONDS, 0);
	g_assert_nonnull(c);
	g_assert_cmpuint(c->active_requests, ==, 4);
	g_assert_cmpuint(c->tokens, ==, 3000 + 700 + 64);
	g_assert_cmpuint(narwhal_mock_host_estimate_calls(h->host, NARWHAL_MOCK_PREFILL_QUEUE_SECONDS), ==, 0);
	/* Prefill asks the queue projection for the prompt. */
	place(h, NARWHAL_PHASE_PREFILL, one, 1);
	c = narwhal_mock_host_last_estimate_for(h->host, NARWHAL_MOCK_PREFILL_QUEUE_SECONDS, 0);
	g_assert_nonnull(c);
	g_assert_cmpuint(c->tokens, ==, 700);
	nw_harness_free(h);
}

/* Only the eligible engines are priced (the host filtered role,
 * availability and exclusions). */
static void
test_eligible_only(void)
{
	static const struct eng engs[] = {
		{ "e0", P(OK, 0.1) }, { "e1", P(OK, 0.5) }, { "e2", P(OK, 0.3) }, { NULL },
	};
	static const uint32_t some[] = { 2, 1, 9 };
	struct nw_harness *h = load("slo-cost", NULL);
	struct fleet f;

	if (h == NULL)
		return;
	fleet_init(&f, engs);
	narwhal_mock_host_set_fleet(h->host, &f.view);
	script(h->host, engs, NARWHAL_PHASE_PREFILL);
	g_assert_cmpuint(place(h, NARWHAL_PHASE_PREFILL, some, 3).engine, ==, 2);
	g_assert_cmpuint(narwhal_mock_host_estimate_calls_for(h->host, NARWHAL_MOCK_PREFILL_QUEUE_SECONDS, 0),
	                 ==, 0);
	nw_harness_free(h);
}

/* Docs/placement.md: with no profiles at all slo-cost chooses exactly as
 * least-loaded does, so making it the default changes nothing for an
 * unprofiled fleet. Compared side by side over many fleets. */
static void
test_unpriced_equals_least_loaded(void)
{
	static const char *const ids[] = { "c", "a", "engine-10", "engine-9", "B", "b" };
	struct nw_harness *sc = load("slo-cost", NULL);
	struct nw_harness *ll = load("least-loaded", NULL);
	GRand *rand = g_rand_new_with_seed(12);
	struct fleet f;

	if (sc == NULL || ll == NULL) {
		nw_harness_free(sc);
		nw_harness_free(ll);
		g_rand_free(rand);
		return;
	}
	memset(&f, 0, sizeof f);
	narwhal_mock_host_set_fleet(sc->host, &f.view);
	narwhal_mock_host_set_fleet(ll->host, &f.view);
	for (int round = 0; round < 500; round++) {
		struct eng engs[N_MAX + 1] = { { NULL } };
		uint32_t eligible[N_MAX], n = (uint32_t)g_rand_int_range(rand, 1, N_MAX + 1);

		for (uint32_t i = 0; i < N_MAX; i++) {
			engs[i].id = ids[i];
			engs[i].resident_prefill = (uint32_t)g_rand_int_range(rand, 0, 3);
			engs[i].queued_prefill = (uint32_t)g_rand_int_range(rand, 0, 3);
			engs[i].resident_decode = (uint32_t)g_rand_int_range(rand, 0, 3);
		}
		fleet_init(&f, engs);
		for (uint32_t k = 0; k < n; k++)
			eligible[k] = (uint32_t)g_rand_int_range(rand, 0, N_MAX);
		for (int phase = NARWHAL_PHASE_PREFILL; phase <= NARWHAL_PHASE_AGGREGATE; phase++) {
			struct narwhal_placement_result a, b;

			g_assert_cmpint(place_rc(sc, (narwhal_phase)phase, eligible, n, &a), ==, 0);
			g_assert_cmpint(place_rc(ll, (narwhal_phase)phase, eligible, n, &b), ==, 0);
			g_assert_cmpuint(a.engine, ==, b.engine);
			g_assert_cmpfloat(a.cost, ==, b.cost);
			g_assert_true(isnan(a.projected_slo_ratio));
			g_assert_false(a.unserved);
		}
	}
	g_assert_cmpfloat(narwhal_mock_host_counter(sc->host, "unpriced_total"), ==, 1500.0);
	g_rand_free(rand);
	nw_harness_free(sc);
	nw_harness_free(ll);
}

static void
test_metrics(void)
{
	static const struct eng engs[] = {
		{ "e0", P(OK, 2.0) }, { "e1", P(OK, 3.0) }, { NULL },
	};
	struct nw_harness *h = load("slo-cost", NULL);
	struct fleet f;

	if (h == NULL)
		return;
	fleet_init(&f, engs);
	narwhal_mock_host_set_fleet(h->host, &f.view);
	script(h->host, engs, NARWHAL_PHASE_PREFILL);
	place(h, NARWHAL_PHASE_PREFILL, all, 2);
	place(h, NARWHAL_PHASE_PREFILL, all, 2);
	narwhal_mock_host_set_engine_estimate(h->host, NARWHAL_MOCK_PREFILL_QUEUE_SECONDS, 1, OK, 0.5);
	place(h, NARWHAL_PHASE_PREFILL, all, 2);
	g_assert_cmpfloat(narwhal_mock_host_counter(h->host, "placed_total"), ==, 3.0);
	g_assert_cmpfloat(narwhal_mock_host_counter(h->host, "unserved_total"), ==, 2.0);
	g_assert_true(isnan(narwhal_mock_host_counter(h->host, "unpriced_total")));
	nw_harness_free(h);
}

/* Plugins take time only from the host (plugin-abi.h); pricing needs none. */
static void
test_no_clock_reads(void)
{
	static const struct eng engs[] = {
		{ "e0", P(OK, 0.2) }, { "e1" }, { "e2", P(OOD, 0) }, { NULL },
	};
	struct nw_harness *h = load("slo-cost", NULL);
	struct fleet f;

	if (h == NULL)
		return;
	fleet_init(&f, engs);
	narwhal_mock_host_set_fleet(h->host, &f.view);
	for (int phase = NARWHAL_PHASE_PREFILL; phase <= NARWHAL_PHASE_AGGREGATE; phase++) {
		script(h->host, engs, (narwhal_phase)phase);
		narwhal_mock_host_advance(h->host, 5000);
		place(h, (narwhal_phase)phase, all, 3);
	}
	g_assert_cmpuint(narwhal_mock_host_clock_reads(h->host), ==, 0);
	g_assert_cmpuint(narwhal_mock_host_n_logs(h->host), ==, 0);
	nw_harness_free(h);
}

/* Memory in use after create/destroy and place loops is what it was before
 * them. (Under a sanitizer mallinfo2 says nothing useful; the leak checker
 * covers that build.) */
static void
test_no_allocation_growth(void)
{
	static const struct eng engs[] = {
		{ "e0", P(OK, 0.2) }, { "e1", P(OK, 2.0) }, { "e2" }, { NULL },
	};
	struct nw_harness *h = load("slo-cost", NULL);
	const struct narwhal_placement_ops *ops;
	struct fleet f;
	size_t before = 0, after = 0;

	if (h == NULL)
		return;
	fleet_init(&f, engs);
	narwhal_mock_host_set_fleet(h->host, &f.view);
	script(h->host, engs, NARWHAL_PHASE_PREFILL);
	ops = &nw_harness_ops(h)->placement;
	for (int round = 0; round < 2; round++) {
		/* Round 0 warms up the mock host's tables. */
		before = mallinfo2().uordblks;
		for (int i = 0; i < 500; i++) {
			void *inst = NULL;
			char err[NARWHAL_ERROR_MAX];
			struct narwhal_placement_result out;

			g_assert_cmpint(ops->create(narwhal_mock_host_table(h->host), NULL, &inst, err,
			                            sizeof err), ==, 0);
			ops->destroy(inst);
			g_assert_cmpint(place_rc(h, (narwhal_phase)(1 + i % 3), all, 3, &out), ==, 0);
		}
		after = mallinfo2().uordblks;
	}
	g_assert_cmpuint(after, ==, before);
	nw_harness_free(h);
}

static void
test_empty_and_bad_arguments(void)
{
	static const struct eng engs[] = { { "e0", P(OK, 0.2) }, { NULL } };
	static const uint32_t outside[] = { 1, 99, UINT32_MAX };
	static const uint32_t zero[] = { 0 };
	struct narwhal_placement_result out;
	struct nw_harness *h = load("slo-cost", "null");
	struct fleet f;

	if (h == NULL)
		return;
	/* No fleet at all. */
	g_assert_cmpint(place_rc(h, NARWHAL_PHASE_PREFILL, zero, 1, &out), ==, -ENOENT);
	fleet_init(&f, engs);
	narwhal_mock_host_set_fleet(h->host, &f.view);
	g_assert_cmpint(place_rc(h, NARWHAL_PHASE_PREFILL, zero, 0, &out), ==, -ENOENT);
	g_assert_cmpint(place_rc(h, NARWHAL_PHASE_PREFILL, outside, 3, &out), ==, -ENOENT);
	g_assert_cmpuint(out.engine, ==, 777);
	g_assert_cmpint(place_rc(h, (narwhal_phase)0, zero, 1, &out), ==, -EINVAL);
	g_assert_cmpint(place_rc(h, (narwhal_phase)4, zero, 1, &out), ==, -EINVAL);
	g_assert_cmpint(nw_harness_ops(h)->placement.place(nw_harness_ctx(h), NULL, &out), ==,
	                -EINVAL);
	f.view.tpot_target_s = 0.0;
	g_assert_cmpint(place_rc(h, NARWHAL_PHASE_DECODE, zero, 1, &out), ==, -EINVAL);
	f.view.tpot_target_s = TPOT_S;
	f.view.engine_view_size = 8;
	g_assert_cmpint(place_rc(h, NARWHAL_PHASE_DECODE, zero, 1, &out), ==, -EINVAL);
	nw_harness_free(h);
}

static void
expect_config_error(const char *config_json, const char *reason)
{
	nw_harness_expect_config_error(NARWHAL_KIND_PLACEMENT, "slo-cost", config_json, reason);
}

static void
test_config_errors(void)
{
	expect_config_error("{\"ttft_weight\": 1}",
	                    "unknown key \"ttft_weight\": the slo-cost placement takes no options");
	expect_config_error("[]", "config must be an empty object");
	expect_config_error("true", "config must be an empty object");
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);

	g_test_add_func("/placement/slo-cost/descriptor", test_descriptor);
	for (guint i = 0; i < G_N_ELEMENTS(scenarios); i++) {
		g_autofree char *path = g_strdup_printf("/placement/slo-cost/scenario/%02u", i);

		g_test_add_data_func(path, &scenarios[i], run_scenario);
	}
	g_test_add_func("/placement/slo-cost/spec-5/tie-by-instance-id", test_tie_by_instance_id);
	g_test_add_func("/placement/slo-cost/spec-5/decode-arguments", test_decode_arguments);
	g_test_add_func("/placement/slo-cost/spec-5/eligible-only", test_eligible_only);
	g_test_add_func("/placement/slo-cost/unpriced-equals-least-loaded",
	                test_unpriced_equals_least_loaded);
	g_test_add_func("/placement/slo-cost/metrics", test_metrics);
	g_test_add_func("/placement/slo-cost/abi/no-clock-reads", test_no_clock_reads);
	g_test_add_func("/placement/slo-cost/no-allocation-growth", test_no_allocation_growth);
	g_test_add_func("/placement/slo-cost/empty-and-bad-arguments",
	                test_empty_and_bad_arguments);
	g_test_add_func("/placement/slo-cost/config-errors", test_config_errors);
	return g_test_run();
}
