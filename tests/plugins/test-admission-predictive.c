/*
 * The "predictive" admission policy in isolation (spec 4.1; issue 12;
 * docs/admission.md): the built .so, loaded by the real loader, driven
 * against the mock host with a fleet the test builds and estimator answers
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
#define PREFILL NARWHAL_ROLE_PREFILL
#define DECODE NARWHAL_ROLE_DECODE

/* One scripted answer; one not given is the mock's default, "no profile". */
struct est {
	bool given;
	narwhal_estimate_status st;
	double v;
};

/* One engine of a scenario and what the estimators say of it. */
struct eng {
	const char *id;
	narwhal_role role;
	bool down;        /* not NARWHAL_ENGINE_AVAILABLE */
	bool unprofiled;  /* no NARWHAL_ENGINE_PROFILED */
	uint32_t kind;    /* NARWHAL_ENGINE_WHOLE_ONLY or _PAIR_ONLY, or 0 */
	uint32_t resident_decode;
	uint64_t resident_kv_tokens;
	struct est queue;   /* prefill_queue_seconds */
	struct est prefill; /* prefill_seconds */
	struct est decode;  /* decode_interval_seconds */
	uint64_t decode_max_kv;     /* its measured decode domain; 0: unbounded */
	uint32_t decode_max_active;
};

struct fleet {
	struct narwhal_engine_view engines[N_MAX];
	struct narwhal_fleet_view view;
};

static void
fleet_init(struct fleet *f, const struct eng *engs, double ttft_s)
{
	uint32_t n = 0;

	memset(f, 0, sizeof *f);
	for (; n < N_MAX && engs[n].id != NULL; n++) {
		struct narwhal_engine_view *e = &f->engines[n];

		e->struct_size = sizeof *e;
		e->index = n;
		e->id = engs[n].id;
		e->role = engs[n].role;
		e->flags = (engs[n].down ? 0 : NARWHAL_ENGINE_AVAILABLE) |
		           (engs[n].unprofiled ? 0 : NARWHAL_ENGINE_PROFILED) | engs[n].kind;
		e->resident_decode = engs[n].resident_decode;
		e->resident_kv_tokens = engs[n].resident_kv_tokens;
		e->prefill_load = NAN;
		e->decode_load = NAN;
	}
	f->view.struct_size = sizeof f->view;
	f->view.engine_view_size = sizeof(struct narwhal_engine_view);
	f->view.n_engines = n;
	f->view.engines = f->engines;
	f->view.ttft_target_s = ttft_s;
	f->view.tpot_target_s = 0.05;
}

static void
script(struct narwhal_mock_host *mh, const struct eng *engs)
{
	narwhal_mock_host_clear_engine_estimates(mh);
	for (uint32_t i = 0; i < N_MAX && engs[i].id != NULL; i++) {
		const struct eng *e = &engs[i];

		if (e->queue.given)
			narwhal_mock_host_set_engine_estimate(mh, NARWHAL_MOCK_PREFILL_QUEUE_SECONDS, i,
			                                 e->queue.st, e->queue.v);
		if (e->prefill.given)
			narwhal_mock_host_set_engine_estimate(mh, NARWHAL_MOCK_PREFILL_SECONDS, i, e->prefill.st,
			                                 e->prefill.v);
		if (e->decode.given)
			narwhal_mock_host_set_engine_estimate(mh, NARWHAL_MOCK_DECODE_INTERVAL_SECONDS, i,
			                                 e->decode.st, e->decode.v);
		narwhal_mock_host_set_engine_domain(mh, NARWHAL_MOCK_DECODE_INTERVAL_SECONDS, i,
		                               e->decode_max_kv, e->decode_max_active);
	}
}

/* Load predictive, give the mock host the fleet, then create it. */
static struct nw_harness *
predictive_with(struct fleet *f, const char *config_json)
{
	struct nw_harness *h = nw_harness_new(NARWHAL_KIND_ADMISSION, "predictive");
	g_autoptr(GError) error = NULL;

	if (h == NULL)
		return NULL;
	narwhal_mock_host_set_fleet(h->host, f != NULL ? &f->view : NULL);
	g_assert_true(nw_harness_create(h, config_json, &error));
	g_assert_no_error(error);
	return h;
}

static struct narwhal_admission_request
request(uint64_t prompt_tokens)
{
	struct narwhal_admission_request req = {
		.struct_size = sizeof req,
		.request = 7,
		.request_id = "req-1",
		.prompt_tokens = prompt_tokens,
		.prompt_tokens_exact = true,
		.max_tokens = 64,
		.deadline_ns = 30 * G_GINT64_CONSTANT(1000000000),
		.admitted = 0,
		.admitted_limit = 8,
	};
	return req;
}

static int
decide_rc(struct nw_harness *h, uint64_t prompt_tokens, struct narwhal_admission_decision *out)
{
	struct narwhal_admission_request req = request(prompt_tokens);

	/* Poisoned, so a field the plugin forgets shows up. */
	*out = (struct narwhal_admission_decision){
		.struct_size = sizeof *out,
		.verdict = (narwhal_admission_verdict)99,
		.retry_after_s = -7.0,
		.projected_ttft_s = -7.0,
		.reason = NULL,
	};
	return nw_harness_ops(h)->admission.decide(nw_harness_ctx(h), &req, out);
}

static struct narwhal_admission_decision
decide(struct nw_harness *h, uint64_t prompt_tokens)
{
	struct narwhal_admission_decision out;

	g_assert_cmpint(decide_rc(h, prompt_tokens, &out), ==, 0);
	g_assert_cmpuint(out.struct_size, ==, sizeof out);
	g_assert_nonnull(out.reason);
	g_assert_cmpfloat(out.projected_ttft_s, !=, -7.0);
	g_assert_cmpfloat(out.retry_after_s, >=, 0.0);
	return out;
}

/* ------------------------------------------------------------ the table --- */

#define E(st_, v_) { true, (st_), (v_) }
#define NONE E(NP, 0)

struct scenario {
	const char *name;   /* the clause it checks */
	const char *config; /* plugins.admission.config, NULL: none */
	double ttft_s;
	struct eng engines[N_MAX + 1];
	narwhal_admission_verdict verdict;
	const char *reason;
	double projected_s; /* NaN: not priced */
	double retry_after_s;
};

static const struct scenario scenarios[] = {
	{ "spec 4.1: the least prefill path within the TTFT budget is admitted", NULL, 1.0,
	  { { "p0", PREFILL, .queue = E(OK, 0.8), .prefill = E(OK, 0.1) },
	    { "p1", PREFILL, .queue = E(OK, 0.5), .prefill = E(OK, 0.1) },
	    { "d0", DECODE, .decode = E(OK, 0.05) } },
	  NARWHAL_ADMIT, "priced", 0.55, 0.0 },
	{ "spec 4.1: a path exactly at the budget is admitted", NULL, 1.0,
	  { { "p0", PREFILL, .queue = E(OK, 0.75), .prefill = E(OK, 0.1) },
	    { "d0", DECODE, .decode = E(OK, 0.25) } },
	  NARWHAL_ADMIT, "priced", 1.0, 0.0 },
	{ "spec 4.1: serving.admission_margin widens the budget", "{\"admission_margin\": 0.25}",
	  1.0,
	  { { "p0", PREFILL, .queue = E(OK, 1.15), .prefill = E(OK, 0.1) },
	    { "d0", DECODE, .decode = E(OK, 0.05) } },
	  NARWHAL_ADMIT, "priced", 1.2, 0.0 },
	{ "spec 4.1: without the margin the same path is a backlog refusal", NULL, 1.0,
	  { { "p0", PREFILL, .queue = E(OK, 1.15), .prefill = E(OK, 0.1) },
	    { "d0", DECODE, .decode = E(OK, 0.05) } },
	  NARWHAL_REFUSE, "backlog", 1.2, 0.2 },
	{ "spec 4.1: backlog refusal: Retry-After is projected minus budget", NULL, 2.0,
	  { { "p0", PREFILL, .queue = E(OK, 5.0), .prefill = E(OK, 0.2) },
	    { "p1", PREFILL, .queue = E(OK, 3.5), .prefill = E(OK, 0.2) },
	    { "d0", DECODE, .decode = E(OK, 0.5) } },
	  NARWHAL_REFUSE, "backlog", 4.0, 2.0 },
	{ "spec 4.1: too long even at zero backlog", NULL, 1.0,
	  { { "p0", PREFILL, .queue = E(OK, 1.2), .prefill = E(OK, 1.0) },
	    { "p1", PREFILL, .queue = E(OK, 1.4), .prefill = E(OK, 0.99) },
	    { "d0", DECODE, .decode = E(OK, 0.02) } },
	  NARWHAL_REFUSE_TOO_LONG, "too_long", 1.22, 0.0 },
	{ "spec 4.1: one candidate that fits when idle makes it a backlog, not too long", NULL,
	  1.0,
	  { { "p0", PREFILL, .queue = E(OK, 1.2), .prefill = E(OK, 1.5) },
	    { "p1", PREFILL, .queue = E(OK, 1.4), .prefill = E(OK, 0.9) },
	    { "d0", DECODE, .decode = E(OK, 0.02) } },
	  NARWHAL_REFUSE, "backlog", 1.22, 0.22 },
	{ "spec 4.1: the idle decode interval counts toward too long", NULL, 1.0,
	  { { "p0", PREFILL, .queue = E(OK, 1.2), .prefill = E(OK, 0.9) },
	    { "d0", DECODE, .decode = E(OK, 0.2) } },
	  NARWHAL_REFUSE_TOO_LONG, "too_long", 1.4, 0.0 },
	{ "spec 4.1 (issue 12): a prompt outside every measured prefill domain is answered at "
	  "once as too long, never admitted unpriced", NULL, 1.0,
	  { { "p0", PREFILL, .queue = E(OOD, 0), .prefill = E(OOD, 0) },
	    { "p1", PREFILL, .queue = E(OOD, 0), .prefill = E(OOD, 0) },
	    { "d0", DECODE, .decode = E(OK, 0.02) } },
	  NARWHAL_REFUSE_TOO_LONG, "outside_measured_domain", NAN, 0.0 },
	{ "issue 12: load outside the measured domain (resident decode work, outside the "
	  "single-phase region until it drains) is refused with Retry-After, never admitted "
	  "unpriced", NULL, 1.5,
	  { { "p0", PREFILL, .resident_decode = 1, .queue = E(OOD, 0), .prefill = E(OK, 0.1) },
	    { "d0", DECODE, .decode = E(OK, 0.02) } },
	  NARWHAL_REFUSE, "outside_measured_domain", NAN, 1.5 },
	{ "spec 4.1 (issue 12): a prompt the projection cannot price on any prefill engine "
	  "without resident decode work (beyond the measured handoff, plugin-abi.h) is answered "
	  "at once as too long: no load will ever price it", NULL, 1.5,
	  { { "p0", PREFILL, .queue = E(OOD, 0), .prefill = E(OK, 0.1) },
	    { "p1", PREFILL, .queue = E(OOD, 0), .prefill = E(OK, 0.1) },
	    { "d0", DECODE, .decode = E(OK, 0.02) } },
	  NARWHAL_REFUSE_TOO_LONG, "outside_measured_domain", NAN, 0.0 },
	{ "issue 12: one prefill engine out only by its resident decode work makes it a 429",
	  NULL, 1.5,
	  { { "p0", PREFILL, .queue = E(OOD, 0), .prefill = E(OK, 0.1) },
	    { "p1", PREFILL, .resident_decode = 2, .queue = E(OOD, 0), .prefill = E(OK, 0.1) },
	    { "d0", DECODE, .decode = E(OK, 0.02) } },
	  NARWHAL_REFUSE, "outside_measured_domain", NAN, 1.5 },
	{ "issue 12: a decode engine busier than its measured grid prices the first token's "
	  "step at slo.tpot_s (0.05 s), twice while it decodes: the load is unpriced, not the "
	  "request", NULL, 1.0,
	  { { "p0", PREFILL, .queue = E(OK, 0.1), .prefill = E(OK, 0.1) },
	    { "d0", DECODE, .resident_decode = 64, .decode = E(OK, 0.02),
	      .decode_max_active = 64 } },
	  NARWHAL_ADMIT, "priced", 0.2, 0.0 },
	{ "spec 4.1 (issue 12): a prompt whose KV tokens alone are beyond every decode engine's "
	  "measured grid is answered at once as too long: no load will ever price it", NULL, 1.0,
	  { { "p0", PREFILL, .queue = E(OK, 0.1), .prefill = E(OK, 0.1) },
	    { "d0", DECODE, .decode = E(OK, 0.02), .decode_max_kv = 999 },
	    { "d1", DECODE, .resident_decode = 1, .decode = E(OK, 0.02), .decode_max_kv = 999 } },
	  NARWHAL_REFUSE_TOO_LONG, "outside_measured_domain", NAN, 0.0 },
	{ "issue 12: one decode engine whose grid holds the prompt idle keeps it priced: its "
	  "load beyond the grid prices the first step at slo.tpot_s", NULL, 1.0,
	  { { "p0", PREFILL, .queue = E(OK, 0.1), .prefill = E(OK, 0.1) },
	    { "d0", DECODE, .decode = E(OK, 0.02), .decode_max_kv = 999 },
	    { "d1", DECODE, .resident_decode = 2, .resident_kv_tokens = 5000,
	      .decode = E(OK, 0.02), .decode_max_kv = 5500 } },
	  NARWHAL_ADMIT, "priced", 0.2, 0.0 },
	{ "issue 12: an out-of-domain path is not priced; the others are", NULL, 1.0,
	  { { "p0", PREFILL, .queue = E(OOD, 0), .prefill = E(OK, 0.1) },
	    { "p1", PREFILL, .queue = E(OK, 0.3), .prefill = E(OK, 0.1) },
	    { "d0", DECODE, .decode = E(OK, 0.05) } },
	  NARWHAL_ADMIT, "priced", 0.35, 0.0 },
	{ "issue 12: a projection that is no number of seconds prices nothing", NULL, 1.0,
	  { { "p0", PREFILL, .queue = E(OK, NAN), .prefill = E(OK, 0.1) },
	    { "p1", PREFILL, .queue = E(OK, -0.5), .prefill = E(OK, 0.1) },
	    { "p2", PREFILL, .queue = E(OK, 0.7), .prefill = E(OK, 0.1) },
	    { "d0", DECODE, .decode = E(OK, 0.05) } },
	  NARWHAL_ADMIT, "priced", 0.75, 0.0 },
	{ "spec 4.1: the first decode interval is the best live decode engine's", NULL, 1.0,
	  { { "p0", PREFILL, .queue = E(OK, 0.5), .prefill = E(OK, 0.1) },
	    { "d0", DECODE, .resident_decode = 3, .resident_kv_tokens = 9000,
	      .decode = E(OK, 0.2) },
	    { "d1", DECODE, .resident_decode = 1, .decode = E(OK, 0.04) },
	    { "d2", DECODE, .down = true, .decode = E(OK, 0.001) } },
	  /* d1 is decoding: its interval counts twice (the step in
	   * progress, then the first token's own), 0.5 + 2 * 0.04 */
	  NARWHAL_ADMIT, "priced", 0.58, 0.0 },
	{ "spec 4.1: an idle decode engine's first token takes one interval", NULL, 1.0,
	  { { "p0", PREFILL, .queue = E(OK, 0.5), .prefill = E(OK, 0.1) },
	    { "d0", DECODE, .resident_decode = 1, .decode = E(OK, 0.04) },
	    { "d1", DECODE, .decode = E(OK, 0.06) } },
	  NARWHAL_ADMIT, "priced", 0.56, 0.0 },
	{ "spec 4.1: an unavailable prefill engine is no path", NULL, 1.0,
	  { { "p0", PREFILL, .down = true, .queue = E(OK, 0.1), .prefill = E(OK, 0.1) },
	    { "p1", PREFILL, .queue = E(OK, 1.2), .prefill = E(OK, 0.1) },
	    { "d0", DECODE, .decode = E(OK, 0.05) } },
	  NARWHAL_REFUSE, "backlog", 1.25, 0.25 },
	{ "spec 4.1: aggregate mode (no live decode engine): prefill engines run whole "
	  "requests, no handoff interval", NULL, 1.0,
	  { { "p0", PREFILL, .queue = E(OK, 0.4), .prefill = E(OK, 0.1) },
	    { "p1", PREFILL, .queue = E(OK, 0.6), .prefill = E(OK, 0.1) },
	    { "d0", DECODE, .down = true, .queue = E(OK, 0.01), .decode = E(OK, 0.5) } },
	  NARWHAL_ADMIT, "priced", 0.4, 0.0 },
	{ "role-control: aggregate fallback on an idle decode engine; one with resident decode "
	  "is no candidate", NULL, 1.0,
	  { { "p0", PREFILL, .down = true, .queue = E(OK, 0.01), .prefill = E(OK, 0.01) },
	    { "d0", DECODE, .queue = E(OK, 0.3), .prefill = E(OK, 0.1), .decode = E(OK, 0.05) },
	    { "d1", DECODE, .resident_decode = 2, .queue = E(OK, 0.1), .prefill = E(OK, 0.1),
	      .decode = E(OK, 0.05) } },
	  NARWHAL_ADMIT, "priced", 0.3, 0.0 },
	{ "role-control: predictive refuses new work on a decode engine until its resident "
	  "decode drains", NULL, 2.0,
	  { { "p0", PREFILL, .down = true, .queue = E(OK, 0.01), .prefill = E(OK, 0.01) },
	    { "d0", DECODE, .resident_decode = 1, .queue = E(OK, 0.1), .prefill = E(OK, 0.1),
	      .decode = E(OK, 0.05) } },
	  NARWHAL_REFUSE, "no_engine", NAN, 2.0 },
	{ "issue 12: without_profiles \"open\": an unprofiled path is admitted unpriced",
	  "{\"without_profiles\": \"open\"}", 1.0,
	  { { "p0", PREFILL, .unprofiled = true, .queue = NONE, .prefill = NONE },
	    { "d0", DECODE, .unprofiled = true, .decode = NONE } },
	  NARWHAL_ADMIT, "unpriced", NAN, 0.0 },
	{ "issue 12: without_profiles \"open\" still prices the profiled paths",
	  "{\"without_profiles\": \"open\"}", 1.0,
	  { { "p0", PREFILL, .queue = E(OK, 0.2), .prefill = E(OK, 0.1) },
	    { "p1", PREFILL, .unprofiled = true, .queue = NONE, .prefill = NONE },
	    { "d0", DECODE, .decode = E(OK, 0.05) } },
	  NARWHAL_ADMIT, "priced", 0.25, 0.0 },
	{ "issue 12: without_profiles \"open\": over budget on the priced paths, an unprofiled "
	  "one still admits", "{\"without_profiles\": \"open\"}", 1.0,
	  { { "p0", PREFILL, .queue = E(OK, 3.0), .prefill = E(OK, 0.1) },
	    { "p1", PREFILL, .unprofiled = true, .queue = NONE, .prefill = NONE },
	    { "d0", DECODE, .decode = E(OK, 0.05) } },
	  NARWHAL_ADMIT, "unpriced", 3.05, 0.0 },
	{ "issue 12: without_profiles \"open\": an unprofiled decode pool leaves paths unpriced",
	  "{\"without_profiles\": \"open\"}", 1.0,
	  { { "p0", PREFILL, .queue = E(OK, 0.2), .prefill = E(OK, 0.1) },
	    { "d0", DECODE, .unprofiled = true, .decode = NONE } },
	  NARWHAL_ADMIT, "unpriced", NAN, 0.0 },
};

static void
run_scenario(gconstpointer data)
{
	const struct scenario *sc = data;
	struct nw_harness *h;
	struct narwhal_admission_decision out;
	struct fleet f;

	g_test_message("%s", sc->name);
	fleet_init(&f, sc->engines, sc->ttft_s);
	h = predictive_with(&f, sc->config);
	if (h == NULL)
		return;
	script(h->host, sc->engines);
	out = decide(h, 1000);
	g_assert_cmpint(out.verdict, ==, sc->verdict);
	g_assert_cmpstr(out.reason, ==, sc->reason);
	if (isnan(sc->projected_s))
		g_assert_true(isnan(out.projected_ttft_s));
	else
		g_assert_cmpfloat_with_epsilon(out.projected_ttft_s, sc->projected_s, 1e-9);
	g_assert_cmpfloat_with_epsilon(out.retry_after_s, sc->retry_after_s, 1e-9);
	/* Spec 4.1 gives Retry-After only to backlog-driven refusals. */
	if (sc->verdict != NARWHAL_REFUSE)
		g_assert_cmpfloat(out.retry_after_s, ==, 0.0);
	nw_harness_free(h);
}

/* ----------------------------------------------------------- the others --- */

static const struct eng two_priced[] = {
	{ "p0", PREFILL, .queue = E(OK, 0.5), .prefill = E(OK, 0.1) },
	{ "d0", DECODE, .resident_decode = 4, .resident_kv_tokens = 5000, .decode = E(OK, 0.05) },
	{ NULL },
};

static void
test_descriptor(void)
{
	struct nw_harness *h = nw_harness_new(NARWHAL_KIND_ADMISSION, "predictive");

	if (h == NULL)
		return;
	g_assert_cmpstr(h->plugin->desc->name, ==, "predictive");
	g_assert_cmpuint(h->plugin->desc->abi_major, ==, NARWHAL_ABI_MAJOR);
	g_assert_cmpuint(h->plugin->desc->abi_minor, ==, NARWHAL_ABI_MINOR);
	g_assert_nonnull(h->plugin->ops.admission.decide);
	nw_harness_free(h);
}

/* The estimators are asked about the request as spec 4.1 prices it: the
 * prompt on each candidate, the first decode interval with the decode
 * engine's residents plus this request. */
static void
test_estimator_arguments(void)
{
	const struct narwhal_mock_estimate_call *c;
	struct fleet f;
	struct nw_harness *h;

	fleet_init(&f, two_priced, 1.0);
	h = predictive_with(&f, NULL);
	if (h == NULL)
		return;
	script(h->host, two_priced);
	decide(h, 1234);
	c = narwhal_mock_host_last_estimate_for(h->host, NARWHAL_MOCK_PREFILL_QUEUE_SECONDS, 0);
	g_assert_nonnull(c);
	g_assert_cmpuint(c->tokens, ==, 1234);
	c = narwhal_mock_host_last_estimate_for(h->host, NARWHAL_MOCK_DECODE_INTERVAL_SECONDS, 1);
	g_assert_nonnull(c);
	g_assert_cmpuint(c->active_requests, ==, 5);
	g_assert_cmpuint(c->tokens, ==, 5000 + 1234);
	/* A decode engine is no prefill path while the fleet hands off. */
	g_assert_cmpuint(narwhal_mock_host_estimate_calls_for(h->host, NARWHAL_MOCK_PREFILL_QUEUE_SECONDS, 1),
	                 ==, 0);
	/* Admitted: the idle price is not needed. */
	g_assert_cmpuint(narwhal_mock_host_estimate_calls(h->host, NARWHAL_MOCK_PREFILL_SECONDS), ==, 0);
	nw_harness_free(h);
}

/* The aggregate fallback asks no decode interval, and never prices the
 * decode engine whose resident decode has not drained. */
static void
test_aggregate_candidates(void)
{
	static const struct eng engs[] = {
		{ "d0", DECODE, .queue = E(OK, 0.3), .prefill = E(OK, 0.1) },
		{ "d1", DECODE, .resident_decode = 2, .queue = E(OK, 0.1), .prefill = E(OK, 0.1) },
		{ NULL },
	};
	struct fleet f;
	struct nw_harness *h;
	struct narwhal_admission_decision out;

	fleet_init(&f, engs, 1.0);
	h = predictive_with(&f, NULL);
	if (h == NULL)
		return;
	script(h->host, engs);
	out = decide(h, 100);
	g_assert_cmpint(out.verdict, ==, NARWHAL_ADMIT);
	g_assert_cmpfloat(out.projected_ttft_s, ==, 0.3);
	g_assert_cmpuint(narwhal_mock_host_estimate_calls_for(h->host, NARWHAL_MOCK_PREFILL_QUEUE_SECONDS, 1),
	                 ==, 0);
	g_assert_cmpuint(narwhal_mock_host_estimate_calls(h->host, NARWHAL_MOCK_DECODE_INTERVAL_SECONDS), ==,
	                 0);
	/* Once d1 drains it is a candidate, and the cheaper one. */
	f.engines[1].resident_decode = 0;
	out = decide(h, 100);
	g_assert_cmpfloat(out.projected_ttft_s, ==, 0.1);
	nw_harness_free(h);
}

/* Issue 14, mixed fleets (ABI 2.3 flags): admission prices a request on
 * the engines the host would give it. An engine that only runs whole
 * requests (llama.cpp) is a candidate in either mode and makes no pair
 * live; an engine that only hands off (SGLang in PD mode) is never priced
 * for a whole request. */
static void
test_mixed_fleet_candidates(void)
{
	/* A SGLang PD pair whose prefill engine is down, a llama.cpp engine
	 * labelled decode: no live pair, so requests run whole; the idle PD
	 * decode engine (0.05 s) cannot take one, the llama.cpp engine can. */
	static const struct eng degraded[] = {
		{ "sg-p", PREFILL, .down = true, .kind = NARWHAL_ENGINE_PAIR_ONLY,
		  .queue = E(OK, 0.01), .prefill = E(OK, 0.01) },
		{ "sg-d", DECODE, .kind = NARWHAL_ENGINE_PAIR_ONLY, .queue = E(OK, 0.05),
		  .prefill = E(OK, 0.05) },
		{ "llama", DECODE, .kind = NARWHAL_ENGINE_WHOLE_ONLY, .queue = E(OK, 0.4),
		  .prefill = E(OK, 0.1) },
		{ NULL },
	};
	/* A live vLLM pair beside the llama.cpp engine: the pair's path costs
	 * 0.5 s + 0.02 s, the whole request on llama.cpp 0.3 s + 0.02 s (the
	 * pair's decode interval: the policy adds it to every path). */
	static const struct eng pairs[] = {
		{ "p0", PREFILL, .queue = E(OK, 0.5), .prefill = E(OK, 0.1) },
		{ "d0", DECODE, .decode = E(OK, 0.02) },
		{ "llama", DECODE, .kind = NARWHAL_ENGINE_WHOLE_ONLY, .queue = E(OK, 0.3),
		  .prefill = E(OK, 0.1), .decode = E(OK, 0.001) },
		{ NULL },
	};
	struct fleet f;
	struct nw_harness *h;
	struct narwhal_admission_decision out;

	fleet_init(&f, degraded, 1.0);
	h = predictive_with(&f, NULL);
	if (h == NULL)
		return;
	script(h->host, degraded);
	out = decide(h, 100);
	g_assert_cmpint(out.verdict, ==, NARWHAL_ADMIT);
	g_assert_cmpfloat(out.projected_ttft_s, ==, 0.4);
	g_assert_cmpuint(narwhal_mock_host_estimate_calls_for(h->host, NARWHAL_MOCK_PREFILL_QUEUE_SECONDS, 1),
	                 ==, 0);
	nw_harness_free(h);

	fleet_init(&f, pairs, 1.0);
	h = predictive_with(&f, NULL);
	if (h == NULL)
		return;
	script(h->host, pairs);
	out = decide(h, 100);
	g_assert_cmpint(out.verdict, ==, NARWHAL_ADMIT);
	g_assert_cmpfloat(out.projected_ttft_s, ==, 0.3 + 0.02);
	/* The llama.cpp engine is no decode engine of the pairs. */
	g_assert_cmpuint(narwhal_mock_host_estimate_calls_for(h->host,
	                 NARWHAL_MOCK_DECODE_INTERVAL_SECONDS, 2), ==, 0);
	nw_harness_free(h);
}

/* Spec 4.1 prices the prefill path; a decode pool busier than its
 * profile's grid (here 64 requests) leaves the first token's step
 * unpriced, not the request: that step is then priced at slo.tpot_s
 * (0.05 s here), twice on a busy engine, and the request is admitted on
 * its prefill path. A prompt the grid cannot hold even idle is still
 * outside (the scenario "every decode engine outside its measured
 * grid"). */
static void
test_decode_beyond_grid(void)
{
	static const struct eng engs[] = {
		{ "p0", PREFILL, .queue = E(OK, 0.5), .prefill = E(OK, 0.1) },
		{ "d0", DECODE, .resident_decode = 80, .decode = E(OK, 0.04),
		  .decode_max_active = 64 },
		{ NULL },
	};
	struct fleet f;
	struct nw_harness *h;
	struct narwhal_admission_decision out;

	fleet_init(&f, engs, 1.0);
	h = predictive_with(&f, NULL);
	if (h == NULL)
		return;
	script(h->host, engs);
	out = decide(h, 100);
	g_assert_cmpint(out.verdict, ==, NARWHAL_ADMIT);
	g_assert_cmpfloat_with_epsilon(out.projected_ttft_s, 0.5 + 2 * 0.05, 1e-12);
	/* Inside the grid again: the engine's own interval. */
	f.engines[1].resident_decode = 10;
	out = decide(h, 100);
	g_assert_cmpfloat_with_epsilon(out.projected_ttft_s, 0.5 + 2 * 0.04, 1e-12);
	nw_harness_free(h);
}

/* Issue 12: with an unprofiled engine and without_profiles "refuse" (the
 * default), create() fails, naming the engines and the two ways out. */
static void
test_unprofiled_refuses_to_start(void)
{
	static const struct eng engs[] = {
		{ "p0", PREFILL, .unprofiled = true }, { "p1", PREFILL },
		{ "d0", DECODE, .unprofiled = true }, { NULL },
	};
	static const char *const configs[] = { NULL, "{}", "{\"without_profiles\": \"refuse\"}" };
	struct fleet f;

	fleet_init(&f, engs, 1.0);
	for (guint i = 0; i < G_N_ELEMENTS(configs); i++) {
		struct nw_harness *h = nw_harness_new(NARWHAL_KIND_ADMISSION, "predictive");
		g_autoptr(GError) error = NULL;

		if (h == NULL)
			return;
		narwhal_mock_host_set_fleet(h->host, &f.view);
		g_assert_false(nw_harness_create(h, configs[i], &error));
		g_assert_error(error, NARWHAL_PLUGIN_ERROR, NW_PLUGIN_ERROR_CREATE);
		g_test_message("%s", error->message);
		g_assert_nonnull(strstr(error->message, "p0, d0 have no measured profile"));
		g_assert_null(strstr(error->message, "p1"));
		g_assert_nonnull(strstr(error->message, "narwhal-profile --config FILE"));
		g_assert_nonnull(strstr(error->message, "docs/profiles.md"));
		g_assert_nonnull(strstr(error->message,
		                        "plugins.admission.config.without_profiles to \"open\""));
		g_assert_cmpuint(narwhal_mock_host_n_logs(h->host), ==, 0);
		nw_harness_free(h);
	}
}

/* A long list of unprofiled engines is cut, never overflows the buffer. */
static void
test_unprofiled_list_is_bounded(void)
{
	enum { N = 200 };
	struct narwhal_engine_view views[N];
	char ids[N][48];
	struct narwhal_fleet_view view = {
		.struct_size = sizeof view, .engine_view_size = sizeof views[0], .n_engines = N,
		.engines = views, .ttft_target_s = 1.0, .tpot_target_s = 0.05,
	};
	struct nw_harness *h = nw_harness_new(NARWHAL_KIND_ADMISSION, "predictive");
	g_autoptr(GError) error = NULL;

	if (h == NULL)
		return;
	memset(views, 0, sizeof views);
	for (guint i = 0; i < N; i++) {
		g_snprintf(ids[i], sizeof ids[i], "an-engine-with-a-rather-long-name-%03u", i);
		views[i].struct_size = sizeof views[i];
		views[i].index = i;
		views[i].id = ids[i];
		views[i].role = PREFILL;
		views[i].flags = NARWHAL_ENGINE_AVAILABLE;
	}
	narwhal_mock_host_set_fleet(h->host, &view);
	g_assert_false(nw_harness_create(h, NULL, &error));
	g_test_message("%s", error->message);
	g_assert_nonnull(strstr(error->message, "an-engine-with-a-rather-long-name-000, "));
	g_assert_nonnull(strstr(error->message, " more have no measured profile"));
	g_assert_nonnull(strstr(error->message, "narwhal-profile"));
	nw_harness_free(h);
}

/* Issue 12: without_profiles "open" starts, says so once in the log and
 * in the gauge "unpriced", and counts what it admits unpriced. */
static void
test_unprofiled_open_mode(void)
{
	static const struct eng engs[] = {
		{ "p0", PREFILL, .unprofiled = true, .queue = NONE, .prefill = NONE },
		{ "d0", DECODE, .decode = E(OK, 0.05) },
		{ NULL },
	};
	struct fleet f;
	struct nw_harness *h;

	fleet_init(&f, engs, 1.0);
	h = predictive_with(&f, "{\"without_profiles\": \"open\"}");
	if (h == NULL)
		return;
	script(h->host, engs);
	g_assert_true(narwhal_mock_host_logged(h->host, NARWHAL_LOG_WARNING,
	                                  "p0 has no measured profile: admitting through it "
	                                  "unpriced"));
	g_assert_cmpfloat(narwhal_mock_host_gauge(h->host, "unpriced"), ==, 1.0);
	narwhal_mock_host_clear_logs(h->host);
	for (int i = 0; i < 3; i++)
		g_assert_cmpint(decide(h, 10).verdict, ==, NARWHAL_ADMIT);
	/* Once, at start: not per request. */
	g_assert_false(narwhal_mock_host_logged(h->host, NARWHAL_LOG_WARNING, "no measured profile"));
	g_assert_cmpfloat(narwhal_mock_host_counter(h->host, "admitted_unpriced_total"), ==, 3.0);
	g_assert_cmpfloat(narwhal_mock_host_counter(h->host, "admitted_total"), ==, 3.0);
	nw_harness_free(h);

	/* A fully profiled fleet is priced: the gauge says 0, no warning. */
	fleet_init(&f, two_priced, 1.0);
	h = predictive_with(&f, "{\"without_profiles\": \"open\"}");
	if (h == NULL)
		return;
	g_assert_cmpfloat(narwhal_mock_host_gauge(h->host, "unpriced"), ==, 0.0);
	g_assert_false(narwhal_mock_host_logged(h->host, NARWHAL_LOG_WARNING, "no measured profile"));
	nw_harness_free(h);
}

/* Issue 12: under "refuse", a path the host cannot price is never
 * admitted: when every path says "no profile" (a host without the queue
 * projection), decide fails and the host answers 503. */
static void
test_refuse_mode_never_admits_unpriced(void)
{
	static const struct eng engs[] = {
		{ "p0", PREFILL, .queue = NONE, .prefill = E(OK, 0.1) },
		{ "d0", DECODE, .decode = E(OK, 0.05) },
		{ NULL },
	};
	struct narwhal_admission_decision out;
	struct fleet f;
	struct nw_harness *h;

	fleet_init(&f, engs, 1.0);
	h = predictive_with(&f, NULL);
	if (h == NULL)
		return;
	script(h->host, engs);
	g_assert_cmpint(decide_rc(h, 10, &out), ==, -ENODATA);
	g_assert_cmpint(out.verdict, !=, NARWHAL_ADMIT);
	nw_harness_free(h);
}

/* Counters by verdict and reason, and the gauge of the last projection. */
static void
test_metrics(void)
{
	static const struct eng engs[] = {
		{ "p0", PREFILL, .queue = E(OK, 0.5), .prefill = E(OK, 0.1) },
		{ "d0", DECODE, .decode = E(OK, 0.05) },
		{ NULL },
	};
	struct fleet f;
	struct nw_harness *h;

	fleet_init(&f, engs, 1.0);
	h = predictive_with(&f, NULL);
	if (h == NULL)
		return;
	script(h->host, engs);
	decide(h, 10);
	decide(h, 10);
	g_assert_cmpfloat(narwhal_mock_host_counter(h->host, "admitted_total"), ==, 2.0);
	g_assert_cmpfloat(narwhal_mock_host_gauge(h->host, "projected_ttft_seconds"), ==, 0.55);
	narwhal_mock_host_set_engine_estimate(h->host, NARWHAL_MOCK_PREFILL_QUEUE_SECONDS, 0, OK, 2.0);
	decide(h, 10);
	g_assert_cmpfloat(narwhal_mock_host_counter(h->host, "refused_backlog_total"), ==, 1.0);
	g_assert_cmpfloat(narwhal_mock_host_gauge(h->host, "projected_ttft_seconds"), ==, 2.05);
	narwhal_mock_host_set_engine_estimate(h->host, NARWHAL_MOCK_PREFILL_SECONDS, 0, OK, 1.5);
	decide(h, 10);
	g_assert_cmpfloat(narwhal_mock_host_counter(h->host, "refused_too_long_total"), ==, 1.0);
	narwhal_mock_host_set_engine_estimate(h->host, NARWHAL_MOCK_PREFILL_QUEUE_SECONDS, 0, OOD, 0);
	narwhal_mock_host_set_engine_estimate(h->host, NARWHAL_MOCK_PREFILL_SECONDS, 0, OOD, 0);
	decide(h, 10);
	g_assert_cmpfloat(narwhal_mock_host_counter(h->host, "refused_outside_domain_total"), ==, 1.0);
	f.engines[0].flags &= ~(uint32_t)NARWHAL_ENGINE_AVAILABLE;
	f.engines[1].flags &= ~(uint32_t)NARWHAL_ENGINE_AVAILABLE;
	decide(h, 10);
	g_assert_cmpfloat(narwhal_mock_host_counter(h->host, "refused_no_engine_total"), ==, 1.0);
	g_assert_cmpfloat(narwhal_mock_host_counter(h->host, "admitted_total"), ==, 2.0);
	g_assert_true(isnan(narwhal_mock_host_counter(h->host, "admitted_unpriced_total")));
	nw_harness_free(h);
}

/* A request beyond the admitted limit is admitted to the queue (the host
 * holds its own limit either way). */
static void
test_queue_verdict(void)
{
	struct narwhal_admission_request req = request(10);
	struct narwhal_admission_decision out = { .struct_size = sizeof out };
	struct fleet f;
	struct nw_harness *h;

	fleet_init(&f, two_priced, 1.0);
	h = predictive_with(&f, NULL);
	if (h == NULL)
		return;
	script(h->host, two_priced);
	req.admitted = req.admitted_limit;
	g_assert_cmpint(nw_harness_ops(h)->admission.decide(nw_harness_ctx(h), &req, &out), ==, 0);
	g_assert_cmpint(out.verdict, ==, NARWHAL_ADMIT_QUEUE);
	nw_harness_free(h);
}

/* Plugins take time only from the host (plugin-abi.h); pricing needs none. */
static void
test_no_clock_reads(void)
{
	struct fleet f;
	struct nw_harness *h;

	fleet_init(&f, two_priced, 1.0);
	h = predictive_with(&f, NULL);
	if (h == NULL)
		return;
	script(h->host, two_priced);
	for (int i = 0; i < 10; i++) {
		narwhal_mock_host_advance(h->host, 1000000);
		decide(h, 100 * (uint64_t)i);
	}
	g_assert_cmpuint(narwhal_mock_host_clock_reads(h->host), ==, 0);
	nw_harness_free(h);
}

/* Memory in use after create/destroy and decide loops is what it was
 * before them: nothing is kept per call. (Under a sanitizer mallinfo2
 * reports nothing useful; the leak checker covers that build.) */
static void
test_no_allocation_growth(void)
{
	struct fleet f;
	struct nw_harness *h;
	json_t *config = json_pack("{s:s, s:f}", "without_profiles", "refuse", "admission_margin",
	                           0.1);
	const struct narwhal_admission_ops *ops;
	size_t before, after;

	fleet_init(&f, two_priced, 1.0);
	h = predictive_with(&f, NULL);
	if (h == NULL) {
		json_decref(config);
		return;
	}
	script(h->host, two_priced);
	ops = &nw_harness_ops(h)->admission;
	for (int round = 0; round < 2; round++) {
		/* Round 0 warms up the mock host's tables. */
		before = mallinfo2().uordblks;
		for (int i = 0; i < 500; i++) {
			void *inst = NULL;
			char err[NARWHAL_ERROR_MAX];
			struct narwhal_admission_decision out = { .struct_size = sizeof out };
			struct narwhal_admission_request req = request(10 + (uint64_t)i);

			g_assert_cmpint(ops->create(narwhal_mock_host_table(h->host), config, &inst, err,
			                            sizeof err), ==, 0);
			narwhal_mock_host_clear_logs(h->host); /* the mock keeps every line */
			g_assert_cmpint(ops->decide(inst, &req, &out), ==, 0);
			ops->destroy(inst);
			g_assert_cmpint(ops->decide(nw_harness_ctx(h), &req, &out), ==, 0);
		}
		after = mallinfo2().uordblks;
	}
	g_assert_cmpuint(after, ==, before);
	json_decref(config);
	nw_harness_free(h);
}

static void
test_bad_arguments(void)
{
	struct narwhal_admission_request req = request(10);
	struct narwhal_admission_decision out = { .struct_size = sizeof out };
	struct fleet f;
	struct nw_harness *h;

	fleet_init(&f, two_priced, 1.0);
	h = predictive_with(&f, NULL);
	if (h == NULL)
		return;
	g_assert_cmpint(nw_harness_ops(h)->admission.decide(nw_harness_ctx(h), NULL, &out), ==,
	                -EINVAL);
	g_assert_cmpint(nw_harness_ops(h)->admission.decide(nw_harness_ctx(h), &req, NULL), ==,
	                -EINVAL);
	/* A view too short for the fields pricing reads. */
	f.view.engine_view_size = 8;
	g_assert_cmpint(decide_rc(h, 10, &out), ==, -EINVAL);
	/* No fleet at all: the policy cannot decide. */
	narwhal_mock_host_set_fleet(h->host, NULL);
	g_assert_cmpint(decide_rc(h, 10, &out), ==, -ENOENT);
	nw_harness_free(h);
}

static void
expect_config_error(const char *config_json, const char *reason)
{
	nw_harness_expect_config_error(NARWHAL_KIND_ADMISSION, "predictive", config_json, reason);
}

static void
test_config_errors(void)
{
	expect_config_error("{\"without_profiles\": \"ignore\"}",
	                    "without_profiles: must be \"refuse\"");
	expect_config_error("{\"without_profiles\": true}", "without_profiles: must be");
	expect_config_error("{\"admission_margin\": -0.1}",
	                    "admission_margin: -0.1 is out of range: must be 0 or more");
	expect_config_error("{\"admission_margin\": \"0.1\"}", "admission_margin: must be a number");
	expect_config_error("{\"margin\": 0.1}",
	                    "unknown key \"margin\": the predictive policy accepts only "
	                    "without_profiles and admission_margin");
	expect_config_error("[]", "config must be an object");
	expect_config_error("\"open\"", "config must be an object");
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);

	g_test_add_func("/admission-predictive/descriptor", test_descriptor);
	for (guint i = 0; i < G_N_ELEMENTS(scenarios); i++) {
		g_autofree char *path = g_strdup_printf("/admission-predictive/scenario/%02u", i);

		g_test_add_data_func(path, &scenarios[i], run_scenario);
	}
	g_test_add_func("/admission-predictive/spec-4.1/estimator-arguments",
	                test_estimator_arguments);
	g_test_add_func("/admission-predictive/spec-4.1/decode-beyond-grid", test_decode_beyond_grid);
	g_test_add_func("/admission-predictive/role-control/aggregate-candidates",
	                test_aggregate_candidates);
	g_test_add_func("/admission-predictive/issue-14/mixed-fleet-candidates",
	                test_mixed_fleet_candidates);
	g_test_add_func("/admission-predictive/issue-12/unprofiled-refuses-to-start",
	                test_unprofiled_refuses_to_start);
	g_test_add_func("/admission-predictive/issue-12/unprofiled-list-bounded",
	                test_unprofiled_list_is_bounded);
	g_test_add_func("/admission-predictive/issue-12/unprofiled-open-mode",
	                test_unprofiled_open_mode);
	g_test_add_func("/admission-predictive/issue-12/refuse-mode-never-admits-unpriced",
	                test_refuse_mode_never_admits_unpriced);
	g_test_add_func("/admission-predictive/metrics", test_metrics);
	g_test_add_func("/admission-predictive/queue-verdict", test_queue_verdict);
	g_test_add_func("/admission-predictive/abi/no-clock-reads", test_no_clock_reads);
	g_test_add_func("/admission-predictive/no-allocation-growth", test_no_allocation_growth);
	g_test_add_func("/admission-predictive/bad-arguments", test_bad_arguments);
	g_test_add_func("/admission-predictive/config-errors", test_config_errors);
	return g_test_run();
}
