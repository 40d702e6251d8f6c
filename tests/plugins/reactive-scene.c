/*
 * The "reactive" controller's test scene (reactive-scene.h).
 */
#include "build-config.h"

#include "reactive-scene.h"

gboolean
scene_init(struct scene *sc, const char *config_json)
{
	g_autoptr(GError) error = NULL;

	memset(sc, 0, sizeof *sc);
	sc->h = nw_harness_new(NARWHAL_KIND_CONTROLLER, "reactive");
	if (sc->h == NULL)
		return FALSE;
	sc->mh = sc->h->host;
	g_assert_true(nw_harness_create(sc->h, config_json, &error));
	g_assert_no_error(error);
	/* Demand well above the gates, evidence closed, engines movable. */
	sc->in = (struct narwhal_controller_input){
		.struct_size = sizeof sc->in,
		.live_prefill = LIVE_P,
		.live_decode = LIVE_D,
		.prefill_load = 0.4, /* at most shrink: decode expansion may go */
		.decode_load = 0.3,
		.demand_short = 10.0,
		.demand_long = 10.0,
		.evidence_closed = true,
		.arrivals_short = 100,
		.arrivals_long = 600,
		.prompt_tokens_mean = 1000.0,
		.output_tokens_mean = 200.0,
		.resident_decode = 5,
		.pending_decode = 3,
		.profiles_complete = true,
		.movable_to_prefill = 1,
		.movable_to_decode = 1,
		.urgent_ttft_s = NAN,
	};
	return TRUE;
}

void
scene_clear(struct scene *sc)
{
	nw_harness_free(sc->h);
}

/* A price whose worst ratio is worst (TTFT's), with these projected loads,
 * inside the measured domain and meeting the TPOT target. */
struct narwhal_split_price
price_of(double worst, double prefill_load, double decode_load)
{
	return (struct narwhal_split_price){
		.struct_size = sizeof(struct narwhal_split_price),
		.ttft_s = worst,
		.tpot_s = 0.01,
		.ttft_ratio = worst,
		.tpot_ratio = 0.2,
		.worst_ratio = worst,
		.prefill_load = prefill_load,
		.decode_load = decode_load,
		.urgent_ttft_s = NAN,
		.in_domain = true,
	};
}

void
script(struct scene *sc, uint32_t prefill, uint32_t decode, struct narwhal_split_price p)
{
	narwhal_mock_host_set_split_price(sc->mh, prefill, decode, &p);
}

/* The usual prices: the live split at 1.0, P+1 (3/3) and D+1 (1/5) as
 * given (worst ratio, projected prefill and decode load). */
void
script_three(struct scene *sc, double p1_worst, double p1_decode_load, double d1_worst,
             double d1_prefill_load)
{
	script(sc, LIVE_P, LIVE_D, price_of(1.0, 0.6, 0.3));
	script(sc, LIVE_P + 1, LIVE_D - 1, price_of(p1_worst, 0.4, p1_decode_load));
	script(sc, LIVE_P - 1, LIVE_D + 1, price_of(d1_worst, d1_prefill_load, 0.2));
}

struct narwhal_controller_proposal
call(struct scene *sc)
{
	/* Poisoned, so a field the plugin forgets shows up. */
	struct narwhal_controller_proposal out = {
		.struct_size = sizeof out,
		.prefill = 777,
		.decode = 777,
		.worst_slo_ratio = -1.0,
		.reason = NULL,
	};

	sc->in.now_ns = 0; /* the plugin must take time from the host clock */
	g_assert_cmpint(nw_harness_ops(sc->h)->controller.propose(nw_harness_ctx(sc->h), &sc->in,
	                                                          &out), ==, 0);
	g_assert_cmpuint(out.struct_size, ==, sizeof out);
	g_assert_nonnull(out.reason);
	return out;
}

/* A scheduled pass one step_s (the default, 5 s) after the last. */
struct narwhal_controller_proposal
step(struct scene *sc)
{
	narwhal_mock_host_advance(sc->mh, 5 * S_NS);
	sc->in.urgent = false;
	return call(sc);
}

struct narwhal_controller_proposal
urgent(struct scene *sc, uint64_t prompt_tokens)
{
	struct narwhal_controller_proposal out;

	sc->in.urgent = true;
	sc->in.urgent_prompt_tokens = prompt_tokens;
	out = call(sc);
	sc->in.urgent = false;
	sc->in.urgent_prompt_tokens = 0;
	return out;
}

void
assert_no_change(const struct narwhal_controller_proposal *out, const char *reason)
{
	g_assert_cmpstr(out->reason, ==, reason);
	g_assert_cmpuint(out->prefill, ==, LIVE_P);
	g_assert_cmpuint(out->decode, ==, LIVE_D);
}

void
assert_move(const struct narwhal_controller_proposal *out, const char *reason, uint32_t prefill,
            uint32_t decode, double ratio)
{
	g_assert_cmpstr(out->reason, ==, reason);
	g_assert_cmpuint(out->prefill, ==, prefill);
	g_assert_cmpuint(out->decode, ==, decode);
	g_assert_cmpfloat_with_epsilon(out->worst_slo_ratio, ratio, 1e-12);
}

void
step_no_change(struct scene *sc, const char *reason)
{
	struct narwhal_controller_proposal out = step(sc);

	assert_no_change(&out, reason);
}

void
urgent_no_change(struct scene *sc, uint64_t prompt_tokens, const char *reason)
{
	struct narwhal_controller_proposal out = urgent(sc, prompt_tokens);

	assert_no_change(&out, reason);
}

void
step_move(struct scene *sc, const char *reason, uint32_t prefill, uint32_t decode, double ratio)
{
	struct narwhal_controller_proposal out = step(sc);

	assert_move(&out, reason, prefill, decode, ratio);
}

void
urgent_move(struct scene *sc, uint64_t prompt_tokens, const char *reason, uint32_t prefill,
            uint32_t decode, double ratio)
{
	struct narwhal_controller_proposal out = urgent(sc, prompt_tokens);

	assert_move(&out, reason, prefill, decode, ratio);
}

/* Passes of the default three confirmations (max(confirmations 2,
 * sustained_intervals 3)): two "confirming", then the return of the third. */
struct narwhal_controller_proposal
confirm_three(struct scene *sc)
{
	for (int i = 0; i < 2; i++) {
		struct narwhal_controller_proposal out = step(sc);

		assert_no_change(&out, "confirming");
		g_assert_cmpfloat(out.worst_slo_ratio, ==, 1.0); /* the live split's */
	}
	return step(sc);
}
