/* The estimators on one profile (issue 12, "The estimators in core":
 * "They say 'outside the measured domain' rather than extrapolate";
 * spec 7.7, "Demand pricing uses the mean profile across configured
 * engines"; docs/profiles.md). */
#include "build-config.h"

#include <glib.h>
#include <math.h>

#include "core/estimate.h"

static struct nw_engine_profile
profile(void)
{
	struct nw_engine_profile p = { 0 };

	p.prefill = (struct nw_prefill_profile){ .a_s = 0.01, .b_s = 1e-4, .c_s = 1e-8,
		                                     .min_tokens = 16, .max_tokens = 8192,
		                                     .samples = 30 };
	p.decode = (struct nw_decode_profile){ .d0_s = 0.01, .d1_s = 1e-8, .d2_s = 1e-4,
		                                   .min_active = 1, .max_active = 64,
		                                   .min_kv_tokens = 0, .max_kv_tokens = 100000,
		                                   .samples = 40 };
	return p;
}

/* Prefill: inside the domain (both edges included) the quadratic form;
 * one token above it, OUT_OF_DOMAIN and *out untouched; below it, the
 * lower edge's price (an upper bound: a shorter prompt is never slower). */
static void
test_prefill(void)
{
	struct nw_engine_profile p = profile();
	static const struct {
		uint64_t tokens;
		narwhal_estimate_status status;
	} cases[] = {
		{ 0, NARWHAL_ESTIMATE_OK },               { 15, NARWHAL_ESTIMATE_OK },
		{ 16, NARWHAL_ESTIMATE_OK },              { 1000, NARWHAL_ESTIMATE_OK },
		{ 8192, NARWHAL_ESTIMATE_OK },            { 8193, NARWHAL_ESTIMATE_OUT_OF_DOMAIN },
		{ UINT64_MAX, NARWHAL_ESTIMATE_OUT_OF_DOMAIN },
	};

	for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
		double out = -1, l = (double)MAX(cases[i].tokens, 16);

		g_assert_cmpint(nw_estimate_prefill_s(&p, cases[i].tokens, &out), ==, cases[i].status);
		if (cases[i].status == NARWHAL_ESTIMATE_OK)
			g_assert_cmpfloat_with_epsilon(out, 0.01 + 1e-4 * l + 1e-8 * l * l, 1e-12);
		else
			g_assert_cmpfloat(out, ==, -1);
	}
}

/* Decode: each input checked against its own range, edges included;
 * below a range, its lower edge. */
static void
test_decode(void)
{
	struct nw_engine_profile p = profile();
	static const struct {
		uint32_t active;
		uint64_t kv;
		narwhal_estimate_status status;
	} cases[] = {
		{ 0, 500, NARWHAL_ESTIMATE_OK },             { 1, 0, NARWHAL_ESTIMATE_OK },
		{ 64, 100000, NARWHAL_ESTIMATE_OK },         { 65, 500, NARWHAL_ESTIMATE_OUT_OF_DOMAIN },
		{ 8, 100001, NARWHAL_ESTIMATE_OUT_OF_DOMAIN }, { 8, 50000, NARWHAL_ESTIMATE_OK },
	};

	for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
		double out = -1;

		g_assert_cmpint(nw_estimate_decode_interval_s(&p, cases[i].active, cases[i].kv, &out),
		                ==, cases[i].status);
		if (cases[i].status == NARWHAL_ESTIMATE_OK)
			g_assert_cmpfloat_with_epsilon(
				out, 0.01 + 1e-8 * (double)cases[i].kv + 1e-4 * MAX(cases[i].active, 1),
				1e-12);
		else
			g_assert_cmpfloat(out, ==, -1);
	}

	/* a KV floor above 0: below it, priced at the floor */
	p.decode.min_kv_tokens = 1000;
	{
		double out = -1;

		g_assert_cmpint(nw_estimate_decode_interval_s(&p, 2, 999, &out), ==,
		                NARWHAL_ESTIMATE_OK);
		g_assert_cmpfloat_with_epsilon(out, 0.01 + 1e-8 * 1000 + 1e-4 * 2, 1e-12);
	}
}

/* No profile: NO_PROFILE from both, whatever the inputs. */
static void
test_no_profile(void)
{
	double out = -1;

	g_assert_cmpint(nw_estimate_prefill_s(NULL, 100, &out), ==, NARWHAL_ESTIMATE_NO_PROFILE);
	g_assert_cmpint(nw_estimate_decode_interval_s(NULL, 1, 0, &out), ==,
	                NARWHAL_ESTIMATE_NO_PROFILE);
	g_assert_cmpfloat(out, ==, -1);
}

/* The mean profile (spec 7.7): coefficients averaged, each domain the
 * intersection; none for no engines or an empty intersection. */
static void
test_mean(void)
{
	struct nw_engine_profile a = profile(), b = profile(), m, untouched = { 0 };
	const struct nw_engine_profile *both[] = { &a, &b }, *with_null[] = { &a, NULL };
	double out;

	b.prefill.a_s = 0.03;
	b.prefill.c_s = 3e-8;
	b.prefill.min_tokens = 32;
	b.prefill.max_tokens = 4096;
	b.prefill.samples = 12;
	b.decode.d2_s = 3e-4;
	b.decode.min_active = 2;
	b.decode.max_active = 128;
	b.decode.max_kv_tokens = 50000;
	b.handoff = (struct nw_handoff_profile){ 0.004, 1e-6, 4096, 5 };

	g_assert_true(nw_profile_mean(both, 2, &m));
	g_assert_cmpfloat_with_epsilon(m.prefill.a_s, 0.02, 1e-15);
	g_assert_cmpfloat_with_epsilon(m.prefill.b_s, 1e-4, 1e-15);
	g_assert_cmpfloat_with_epsilon(m.prefill.c_s, 2e-8, 1e-20);
	g_assert_cmpuint(m.prefill.min_tokens, ==, 32);
	g_assert_cmpuint(m.prefill.max_tokens, ==, 4096);
	g_assert_cmpuint(m.prefill.samples, ==, 12);
	g_assert_cmpfloat_with_epsilon(m.decode.d2_s, 2e-4, 1e-15);
	g_assert_cmpuint(m.decode.min_active, ==, 2);
	g_assert_cmpuint(m.decode.max_active, ==, 64);
	g_assert_cmpuint(m.decode.min_kv_tokens, ==, 0);
	g_assert_cmpuint(m.decode.max_kv_tokens, ==, 50000);
	/* only b measured a handoff: its numbers, not halved */
	g_assert_cmpfloat(m.handoff.setup_s, ==, 0.004);
	g_assert_cmpuint(m.handoff.max_tokens, ==, 4096);
	g_assert_null(m.engine);
	/* the estimators price on it within the intersection only */
	g_assert_cmpint(nw_estimate_prefill_s(&m, 4096, &out), ==, NARWHAL_ESTIMATE_OK);
	g_assert_cmpint(nw_estimate_prefill_s(&m, 4097, &out), ==, NARWHAL_ESTIMATE_OUT_OF_DOMAIN);
	/* below the intersection, its lower edge (32 tokens) */
	g_assert_cmpint(nw_estimate_prefill_s(&m, 31, &out), ==, NARWHAL_ESTIMATE_OK);
	g_assert_cmpfloat_with_epsilon(out, m.prefill.a_s + m.prefill.b_s * 32 +
	                                    m.prefill.c_s * 32 * 32, 1e-12);
	g_assert_cmpint(nw_estimate_decode_interval_s(&m, 65, 10, &out), ==,
	                NARWHAL_ESTIMATE_OUT_OF_DOMAIN);
	/* one request, below the intersection's two: priced at two */
	g_assert_cmpint(nw_estimate_decode_interval_s(&m, 1, 10, &out), ==, NARWHAL_ESTIMATE_OK);
	g_assert_cmpfloat_with_epsilon(out, m.decode.d0_s + m.decode.d1_s * 10 + m.decode.d2_s * 2,
	                               1e-12);

	/* one engine: itself */
	g_assert_true(nw_profile_mean(both, 1, &m));
	g_assert_cmpfloat(m.prefill.a_s, ==, a.prefill.a_s);
	g_assert_cmpuint(m.handoff.samples, ==, 0);

	/* none, a missing profile, and disjoint domains of each input: false,
	 * out untouched */
	m = untouched;
	g_assert_false(nw_profile_mean(both, 0, &m));
	g_assert_false(nw_profile_mean(with_null, 2, &m));
	b.prefill.min_tokens = 8193;
	b.prefill.max_tokens = 9000;
	g_assert_false(nw_profile_mean(both, 2, &m));
	b = profile();
	b.decode.min_active = 65;
	b.decode.max_active = 70;
	g_assert_false(nw_profile_mean(both, 2, &m));
	b = profile();
	b.decode.min_kv_tokens = 100001;
	b.decode.max_kv_tokens = 200000;
	g_assert_false(nw_profile_mean(both, 2, &m));
	g_assert_cmpfloat(m.prefill.a_s, ==, 0);
	g_assert_cmpuint(m.prefill.max_tokens, ==, 0);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/estimate/prefill-domain", test_prefill);
	g_test_add_func("/estimate/decode-domain", test_decode);
	g_test_add_func("/estimate/no-profile", test_no_profile);
	g_test_add_func("/estimate/mean-profile", test_mean);
	return g_test_run();
}
