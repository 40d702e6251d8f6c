/*
 * A request's course in the what-if mode, on the virtual clock (issue 13,
 * "A what-if mode under virtual time"; docs/replay.md, "What-if mode"):
 * the daemon's course (serve/phases.c, placement.c, request.c) through the
 * real plugins and narwhal-sim's engine model, with timings the model's
 * formulas give exactly, the admission ledger and its queue, the phase
 * slots, the deadlines, the floor repair at the first monitor pass, a fleet
 * made by --engines, and the ledgers all back at zero when the run ends.
 * The plugins come from $NARWHAL_PLUGIN_DIR (set by make check).
 */
#include "build-config.h"

#include <math.h>
#include <string.h>

#include <glib.h>
#include <glib/gstdio.h>

#include "tools/replay/whatif-internal.h"

#define OPT "opt-13b-a100"
/* What queueing requires besides (config.c's cross-field rules). */
#define QUEUEING "\"prefill_concurrency\": 8, \"decode_concurrency\": 64, \"handoff_timeout_s\": 20"

struct fixture {
	char *dir;
	char *config;
	struct wi_setup *setup;
	struct wi_run_opts opts;
	struct wi_world *w;
	struct rp_trace *trace;
	struct rp_schedule sched;
	struct sim_model m;
};

/* A configuration: engines "p0:prefill,d0:decode,...", fields added to
 * serving and to plugins. */
static void
fixture_config(struct fixture *f, const char *engines, const char *serving, const char *plugins,
               uint32_t scaled)
{
	g_auto(GStrv) list = g_strsplit(engines, ",", -1);
	GString *fleet = g_string_new(NULL);
	GError *error = NULL;
	struct wi_options o = { .time_scale = 1.0, .seed = 1, .engines = scaled };
	g_autofree char *text = NULL;

	for (guint i = 0; list[i] != NULL; i++) {
		g_auto(GStrv) kv = g_strsplit(list[i], ":", 2);

		g_string_append_printf(fleet, "%s{\"id\": \"%s\", \"url\": \"http://127.0.0.1:%u\", "
		                       "\"role\": \"%s\"}", i ? ", " : "", kv[0], 9000 + i, kv[1]);
	}
	f->dir = g_dir_make_tmp("narwhal-whatif-test-XXXXXX", &error);
	g_assert_no_error(error);
	f->config = g_build_filename(f->dir, "narwhal.json", NULL);
	text = g_strdup_printf("{\"slo\": {\"ttft_s\": 1.0, \"tpot_s\": 0.1},"
	                       " \"controller\": {\"policy\": \"static\"},"
	                       " \"serving\": {\"admission\": \"open\"%s},"
	                       " \"plugins\": {\"placement\": {\"name\": \"least-loaded\"}%s},"
	                       " \"profiles\": {\"path\": \"%s/none.json\"},"
	                       " \"fleet\": {\"engines\": [%s]}}",
	                       serving ? serving : "", plugins ? plugins : "", f->dir, fleet->str);
	g_string_free(fleet, TRUE);
	g_assert_true(g_file_set_contents(f->config, text, -1, NULL));
	o.config = f->config;
	f->setup = wi_setup_new(&o, &error);
	g_assert_no_error(error);
	g_assert_nonnull(f->setup);
	g_assert_true(sim_model_preset(OPT, &f->m));
	f->opts = (struct wi_run_opts){ .timeout_s = 600, .stream = true, .prompt_overhead = 1 };
	f->trace = rp_trace_new("test");
}

static void
fixture_add(struct fixture *f, double at, uint32_t input, uint32_t output)
{
	rp_trace_add(f->trace, at, input, output, 0, NULL, 0);
}

/* Run what was added; the world stays for the checks. */
static void
fixture_run(struct fixture *f)
{
	struct rp_schedule_opts so = { .rate_scale = 1 };
	GError *error = NULL;

	rp_trace_finish(f->trace);
	rp_schedule_build(&f->sched, f->trace, &so);
	f->w = wi_world_new(f->setup, &f->opts, &error);
	g_assert_no_error(error);
	wi_world_run(f->w, &f->sched);
}

static const struct rp_result *
result(const struct fixture *f, guint i)
{
	g_assert_cmpuint(i, <, f->sched.items->len);
	return &f->w->results[i];
}

/* Whatever the run did, the daemon's ledgers hold nothing once every
 * request has ended (core/pricing.h: an idle fleet's ledger is exactly
 * zero). */
static void
assert_ledgers_empty(const struct fixture *f)
{
	const struct nw_fleet *fl = f->w->fleet;

	g_assert_cmpuint(f->w->live, ==, 0);
	g_assert_cmpuint(f->w->admitted.in_use, ==, 0);
	g_assert_cmpint(fl->pricing.pending_ns, ==, 0);
	g_assert_cmpuint(fl->pricing.pending, ==, 0);
	for (uint32_t i = 0; i < fl->view.n_engines; i++) {
		g_assert_cmpuint(fl->engines[i].resident_prefill, ==, 0);
		g_assert_cmpuint(fl->engines[i].resident_decode, ==, 0);
		g_assert_cmpuint(fl->engines[i].queued_prefill, ==, 0);
		g_assert_cmpuint(fl->engines[i].resident_kv_tokens, ==, 0);
		g_assert_cmpuint(fl->stats[i].handoff_decodes, ==, 0);
		g_assert_cmpint(fl->ledger[i].resident_prefill_ns, ==, 0);
		g_assert_cmpint(fl->ledger[i].queued_prefill_ns, ==, 0);
	}
}

static void
fixture_clear(struct fixture *f)
{
	wi_world_free(f->w);
	rp_schedule_clear(&f->sched);
	rp_trace_free(f->trace);
	wi_setup_free(f->setup);
	g_unlink(f->config);
	g_rmdir(f->dir);
	g_free(f->config);
	g_free(f->dir);
}

static double
step_s(const struct sim_model *m, double ms)
{
	return (ms + m->step_overhead_ms) / 1e3;
}

/* Idle 1P+1D fleet: TTFT is the prefill step, the KV transfer and the
 * decode engine's first step over the prompt; TPOT the mean of the decode
 * steps after it (sim/engine.h; src/sim/kv-handoff.c pulls, then waits the
 * transfer time). */
static void
test_disaggregated_timing(void)
{
	struct fixture f = { 0 };
	const struct nw_demand_totals *t;
	double ttft, steps = 0;
	const uint32_t L = 800, N = 6;

	fixture_config(&f, "p0:prefill,d0:decode", NULL, NULL, 0);
	fixture_add(&f, 1.0, L, N);
	fixture_run(&f);
	g_assert_cmpint(result(&f, 0)->outcome, ==, RP_OUT_OK);
	g_assert_cmpint(result(&f, 0)->status, ==, 200);
	g_assert_cmpuint(result(&f, 0)->output_tokens, ==, N);
	ttft = step_s(&f.m, sim_model_prefill_ms(&f.m, L, (double)L * L)) +
	       sim_model_kv_transfer_ms(&f.m, L) / 1e3 +
	       step_s(&f.m, sim_model_decode_ms(&f.m, L, 1));
	g_assert_cmpfloat(fabs(result(&f, 0)->ttft - ttft), <, 1e-8);
	for (uint32_t j = 1; j < N; j++)
		steps += step_s(&f.m, sim_model_decode_ms(&f.m, L + j, 1));
	g_assert_cmpfloat(fabs(result(&f, 0)->tpot - steps / (N - 1)), <, 1e-8);
	g_assert_cmpfloat(fabs(result(&f, 0)->e2e - (ttft + steps)), <, 1e-8);
	/* One offer, admitted and completed; placed once per phase. */
	t = nw_demand_totals(f.w->demand);
	g_assert_cmpuint(t->offers_sized, ==, 1);
	g_assert_cmpuint(t->admitted, ==, 1);
	g_assert_cmpuint(t->completed_ok, ==, 1);
	g_assert_cmpuint(t->placements[NARWHAL_PHASE_PREFILL - 1], ==, 1);
	g_assert_cmpuint(t->placements[NARWHAL_PHASE_DECODE - 1], ==, 1);
	assert_ledgers_empty(&f);
	fixture_clear(&f);
}

/* Spec 7.2: a single engine serves whole requests (aggregate): TTFT is the
 * prompt's step, no handoff. */
static void
test_aggregate_single_engine(void)
{
	struct fixture f = { 0 };
	const uint32_t L = 300;

	fixture_config(&f, "e0:prefill", NULL, NULL, 0);
	fixture_add(&f, 0.5, L, 3);
	fixture_run(&f);
	g_assert_cmpint(result(&f, 0)->outcome, ==, RP_OUT_OK);
	g_assert_cmpfloat(fabs(result(&f, 0)->ttft -
	                       step_s(&f.m, sim_model_prefill_ms(&f.m, L, (double)L * L))), <, 1e-8);
	g_assert_cmpuint(nw_demand_totals(f.w->demand)->placements[NARWHAL_PHASE_AGGREGATE - 1], ==,
	                 1);
	assert_ledgers_empty(&f);
	fixture_clear(&f);
}

/* Spec 4.1, 4.2: the admission limit holds; a request beyond it waits in
 * the FIFO queue, and one beyond the queue's capacity is refused with 429
 * and Retry-After. */
static void
test_admission_queue(void)
{
	struct fixture f = { 0 };

	fixture_config(&f, "p0:prefill,d0:decode",
	               ", \"queue_capacity\": 1, \"queue_timeout_s\": 30, " QUEUEING,
	               ", \"admission\": {\"max_inflight\": 1}", 0);
	fixture_add(&f, 0, 400, 20);
	fixture_add(&f, 0, 400, 20);
	fixture_add(&f, 0, 400, 20);
	fixture_run(&f);
	g_assert_cmpint(result(&f, 0)->status, ==, 200);
	g_assert_cmpint(result(&f, 1)->status, ==, 200);
	g_assert_cmpint(result(&f, 2)->status, ==, 429);
	g_assert_cmpint(result(&f, 2)->outcome, ==, RP_OUT_HTTP);
	g_assert_cmpfloat(result(&f, 2)->retry_after, ==, 1.0);
	/* The queued one starts when the first ends. */
	g_assert_cmpfloat(result(&f, 1)->ttft, >, result(&f, 0)->e2e);
	g_assert_cmpuint(nw_demand_totals(f.w->demand)->queued, ==, 1);
	/* open refuses itself once the queue is full (plugins/admission/open.c). */
	g_assert_cmpuint(nw_demand_totals(f.w->demand)->refused[NW_DEMAND_REFUSED_ADMISSION], ==, 1);
	assert_ledgers_empty(&f);
	fixture_clear(&f);
}

/* serving.queue_timeout_s: a queued request that is not admitted in time
 * gets 429 queue_timeout, Retry-After the timeout. */
static void
test_queue_timeout(void)
{
	struct fixture f = { 0 };

	fixture_config(&f, "p0:prefill,d0:decode",
	               ", \"queue_capacity\": 4, \"queue_timeout_s\": 0.5, " QUEUEING,
	               ", \"admission\": {\"max_inflight\": 1}", 0);
	fixture_add(&f, 0, 400, 200); /* several seconds of decode */
	fixture_add(&f, 0.1, 400, 20);
	fixture_run(&f);
	g_assert_cmpint(result(&f, 0)->status, ==, 200);
	g_assert_cmpint(result(&f, 1)->status, ==, 429);
	g_assert_cmpfloat(fabs(result(&f, 1)->finished - 0.6), <, 1e-9);
	g_assert_cmpfloat(result(&f, 1)->retry_after, ==, 1.0);
	assert_ledgers_empty(&f);
	fixture_clear(&f);
}

/* Spec 4.2: serving.decode_concurrency slots per engine; the second decode
 * waits in the FIFO line until the first leaves its slot. */
static void
test_decode_slots(void)
{
	struct fixture f = { 0 };

	fixture_config(&f, "p0:prefill,d0:decode", ", \"decode_concurrency\": 1", NULL, 0);
	fixture_add(&f, 0, 300, 30);
	fixture_add(&f, 0, 300, 30);
	fixture_run(&f);
	g_assert_cmpint(result(&f, 0)->status, ==, 200);
	g_assert_cmpint(result(&f, 1)->status, ==, 200);
	g_assert_cmpfloat(result(&f, 1)->ttft, >, result(&f, 0)->e2e);
	assert_ledgers_empty(&f);
	fixture_clear(&f);
}

/* A request that cannot fit the model's context is refused before any
 * engine work (400, phases.c context_exceeded); the client's --timeout
 * cancels a request in flight, and the engines give everything back. */
static void
test_context_and_timeout(void)
{
	struct fixture f = { 0 };

	fixture_config(&f, "p0:prefill,d0:decode", NULL, NULL, 0);
	f.opts.timeout_s = 1.0;
	fixture_add(&f, 0, 2000, 100); /* opt-13b-a100: 2048 tokens */
	fixture_add(&f, 0, 500, 400);  /* ~40 ms a token: well over 1 s */
	fixture_run(&f);
	g_assert_cmpint(result(&f, 0)->status, ==, 400);
	g_assert_cmpint(result(&f, 1)->outcome, ==, RP_OUT_TIMEOUT);
	g_assert_cmpint(result(&f, 1)->status, ==, 200); /* the stream had committed */
	g_assert_cmpfloat(fabs(result(&f, 1)->finished - 1.0), <, 1e-9);
	g_assert_cmpuint(nw_demand_totals(f.w->demand)->refused[NW_DEMAND_REFUSED_CONTEXT_LENGTH],
	                 ==, 1);
	assert_ledgers_empty(&f);
	for (uint32_t i = 0; i < f.w->engines.n; i++) {
		struct sim_engine_stats st;

		sim_engine_stats(f.w->engines.engines[i].sim, &st);
		g_assert_cmpuint(st.running + st.waiting, ==, 0);
		g_assert_cmpuint(st.kv_blocks_used - st.leased_blocks, ==, 0);
	}
	fixture_clear(&f);
}

/* The host's floor repair at the monitor's first pass (spec 7.2): a fleet
 * configured all prefill gets a decode engine at 0, before any request,
 * and the requests are then served disaggregated. */
static void
test_floor_repair(void)
{
	struct fixture f = { 0 };
	json_t *doc;
	const json_t *c;

	fixture_config(&f, "a:prefill,b:prefill,c:prefill", NULL, NULL, 0);
	fixture_add(&f, 0.2, 300, 5);
	fixture_run(&f);
	g_assert_cmpint(result(&f, 0)->status, ==, 200);
	g_assert_cmpuint(nw_demand_totals(f.w->demand)->placements[NARWHAL_PHASE_DECODE - 1], ==, 1);
	doc = wi_control_json(f.w->control, f.w);
	c = json_array_get(json_object_get(doc, "role_changes"), 0);
	g_assert_cmpuint(json_array_size(json_object_get(doc, "role_changes")), ==, 1);
	g_assert_cmpstr(json_string_value(json_object_get(c, "caller")), ==, "floor_repair");
	g_assert_cmpstr(json_string_value(json_object_get(c, "to")), ==, "decode");
	g_assert_cmpfloat(json_real_value(json_object_get(c, "at_s")), ==, 0.0);
	g_assert_true(json_object_get(c, "applied") == json_true());
	json_decref(doc);
	assert_ledgers_empty(&f);
	fixture_clear(&f);
}

/* --engines N: N engines made from the first configured one, the
 * configured split scaled (1 of 4 prefill: 3 of 10, rounded). */
static void
test_engines_scaled(void)
{
	struct fixture f = { 0 };
	uint32_t prefill = 0;

	fixture_config(&f, "p0:prefill,d0:decode,d1:decode,d2:decode", NULL, NULL, 10);
	g_assert_cmpuint(f.setup->cfg->fleet.n_engines, ==, 10);
	g_assert_cmpstr(f.setup->cfg->fleet.engines[9].id, ==, "p0-9");
	for (uint32_t i = 0; i < 10; i++)
		prefill += f.setup->cfg->fleet.engines[i].role == NW_ROLE_PREFILL;
	g_assert_cmpuint(prefill, ==, 3);
	for (guint i = 0; i < 40; i++)
		fixture_add(&f, i * 0.05, 300, 10);
	fixture_run(&f);
	for (guint i = 0; i < 40; i++)
		g_assert_cmpint(result(&f, i)->status, ==, 200);
	assert_ledgers_empty(&f);
	fixture_clear(&f);
}

/* The same schedule twice gives the same results, to the nanosecond. */
static void
test_deterministic(void)
{
	struct fixture a = { 0 }, b = { 0 };
	struct fixture *both[2] = { &a, &b };
	GRand *rng;

	for (int k = 0; k < 2; k++) {
		fixture_config(both[k], "p0:prefill,p1:prefill,d0:decode,d1:decode", NULL, NULL, 0);
		rng = g_rand_new_with_seed(3);
		for (guint i = 0; i < 300; i++)
			fixture_add(both[k], i * 0.04, (uint32_t)g_rand_int_range(rng, 10, 1500),
			            (uint32_t)g_rand_int_range(rng, 1, 300));
		g_rand_free(rng);
		fixture_run(both[k]);
	}
	for (guint i = 0; i < 300; i++) {
		const struct rp_result *x = result(&a, i), *y = result(&b, i);

		g_assert_cmpint(x->status, ==, y->status);
		g_assert_true(x->ttft == y->ttft || (isnan(x->ttft) && isnan(y->ttft)));
		g_assert_true(x->tpot == y->tpot || (isnan(x->tpot) && isnan(y->tpot)));
		g_assert_cmpfloat(x->finished, ==, y->finished);
	}
	g_assert_cmpuint(a.w->events, ==, b.w->events);
	assert_ledgers_empty(&a);
	fixture_clear(&a);
	fixture_clear(&b);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/whatif/course/disaggregated-timing", test_disaggregated_timing);
	g_test_add_func("/whatif/course/spec-7.2/aggregate-single-engine",
	                test_aggregate_single_engine);
	g_test_add_func("/whatif/course/spec-4.2/admission-queue", test_admission_queue);
	g_test_add_func("/whatif/course/spec-4.2/queue-timeout", test_queue_timeout);
	g_test_add_func("/whatif/course/spec-4.2/decode-slots", test_decode_slots);
	g_test_add_func("/whatif/course/context-and-timeout", test_context_and_timeout);
	g_test_add_func("/whatif/course/spec-7.2/floor-repair", test_floor_repair);
	g_test_add_func("/whatif/course/engines-scaled", test_engines_scaled);
	g_test_add_func("/whatif/course/deterministic", test_deterministic);
	return g_test_run();
}
