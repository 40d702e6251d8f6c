/*
 * narwhal-profile's plan (src/tools/profile/plan.h; docs/profiles.md, "The
 * measured domain, and why"): the prompt lengths stay within the model's
 * length and the per-step token budget, the decode grid below narwhal-sim's
 * decode_batch_split and within its bound of resident KV tokens, T varies
 * apart from B, and every load is bounded (issue 12: "narwhal-profile").
 */
#include "build-config.h"

#include <glib.h>

#include "tools/profile/plan.h"

/* Issue 12: prefill lengths within max_num_batched_tokens (8192) and the
 * model's length, two output tokens of a handoff sample included. */
static void
test_prompt_max(void)
{
	g_assert_cmpuint(nw_prof_prompt_max(2048, NW_PROF_PROMPT_CAP), ==, 2046);
	g_assert_cmpuint(nw_prof_prompt_max(32768, NW_PROF_PROMPT_CAP), ==, 8192);
	g_assert_cmpuint(nw_prof_prompt_max(8192, NW_PROF_PROMPT_CAP), ==, 8190);
	g_assert_cmpuint(nw_prof_prompt_max(32768, 2048), ==, 2048);
	/* Unknown length: the cap alone. */
	g_assert_cmpuint(nw_prof_prompt_max(-1, NW_PROF_PROMPT_CAP), ==, NW_PROF_PROMPT_CAP);
}

/* The sweep's lengths: ascending, distinct, from lo to hi, with short ones
 * (the fixed cost) and several past a quarter of hi (the quadratic term). */
static void
test_prefill_lengths(void)
{
	static const uint64_t ranges[][2] = { { 8, 2046 }, { 8, 8190 }, { 20, 100 }, { 8, 9 } };

	for (int quick = 0; quick < 2; quick++)
		for (size_t r = 0; r < G_N_ELEMENTS(ranges); r++) {
			uint64_t lo = ranges[r][0], hi = ranges[r][1];
			uint64_t v[NW_PROF_LENGTHS_MAX];
			size_t n = nw_prof_prefill_lengths(quick, lo, hi, v, G_N_ELEMENTS(v));
			unsigned upper = 0;

			g_assert_cmpuint(n, >=, MIN(hi - lo + 1, 3));
			g_assert_cmpuint(v[0], ==, lo);
			g_assert_cmpuint(v[n - 1], ==, hi);
			for (size_t i = 1; i < n; i++)
				g_assert_cmpuint(v[i], >, v[i - 1]);
			for (size_t i = 0; i < n; i++)
				upper += v[i] >= hi / 4;
			if (hi - lo > 100)
				g_assert_cmpuint(upper, >=, 4);
		}
	/* --quick measures fewer lengths than the full sweep. */
	{
		uint64_t v[NW_PROF_LENGTHS_MAX];

		g_assert_cmpuint(nw_prof_prefill_lengths(true, 8, 8190, v, G_N_ELEMENTS(v)), <,
		                 nw_prof_prefill_lengths(false, 8, 8190, v, G_N_ELEMENTS(v)));
	}
	/* Nothing to measure in an empty range. */
	{
		uint64_t v[4];

		g_assert_cmpuint(nw_prof_prefill_lengths(true, 10, 9, v, G_N_ELEMENTS(v)), ==, 0);
	}
}

/* Issue 12: the decode grid reaches the active requests asked for
 * (--max-decode-streams; by default 94, below narwhal-sim's
 * decode_batch_split, 95) and stays within its T bound, starts with one
 * stream of the longest prompt (the KV capacity estimate), and varies T
 * apart from B: some B has two cells with different T, and cells with
 * different B share a T range. */
static void
test_decode_cells(void)
{
	const uint32_t asked[] = { NW_PROF_ACTIVE_DEFAULT, 256, 100, NW_PROF_ACTIVE_LIMIT };

	for (size_t a = 0; a < G_N_ELEMENTS(asked); a++)
	for (int quick = 0; quick < 2; quick++) {
		struct nw_prof_cell c[NW_PROF_CELLS_MAX];
		size_t n = nw_prof_decode_cells(quick, asked[a], 8, 2022, 24576, c,
		                                G_N_ELEMENTS(c));
		uint32_t most = 0, levels = 0;
		bool two_t = false;

		/* Two cells a level past the first, but for a level whose streams
		 * hold T at the shortest prompt already (4096 * 8 > 24576). */
		g_assert_cmpuint(n, >=, 5);
		g_assert_cmpuint(n, <, NW_PROF_CELLS_MAX);
		g_assert_cmpuint(c[0].active, ==, 1);
		g_assert_cmpuint(c[0].prompt_tokens, ==, 2022);
		for (size_t i = 0; i < n; i++) {
			bool new_level = true;

			g_assert_cmpuint(c[i].active, >=, 1);
			g_assert_cmpuint(c[i].active, <=, asked[a]);
			g_assert_cmpuint(c[i].prompt_tokens, >=, 8);
			g_assert_cmpuint(c[i].prompt_tokens, <=, 2022);
			/* Within the bound, but for the one-stream cell of the
			 * longest prompt and cells of the shortest prompts. */
			if (c[i].prompt_tokens > 8 && c[i].active > 1)
				g_assert_cmpuint(c[i].active * c[i].prompt_tokens, <=, 24576);
			most = MAX(most, c[i].active);
			for (size_t j = 0; j < i; j++) {
				g_assert_false(c[i].active == c[j].active &&
				               c[i].prompt_tokens == c[j].prompt_tokens);
				two_t = two_t || (c[i].active == c[j].active && c[i].active > 1);
				new_level = new_level && c[i].active != c[j].active;
			}
			levels += new_level;
		}
		g_assert_cmpuint(most, ==, asked[a]);
		g_assert_true(two_t);
		/* The full sweep measures more levels than the quick one. */
		g_assert_cmpuint(levels, >=, quick ? 3 : 10);
	}
	g_assert_cmpuint(NW_PROF_ACTIVE_DEFAULT, <, 95);
	/* Nothing to measure: no stream, or no prompt range. */
	g_assert_cmpuint(nw_prof_decode_cells(false, 0, 8, 2022, 24576, NULL, 0), ==, 0);
}

/* The T bound: the run's, half the KV capacity when known, and what
 * prefills in about cell_prefill_s; a multiple of 1024. */
static void
test_kv_tokens_max(void)
{
	struct nw_prof_sizes q;
	struct nw_prefill_profile fast = { .a_s = 0.003, .b_s = 2.95e-5 };
	struct nw_prefill_profile slow = { .a_s = 0.018, .b_s = 1.02e-4 };
	uint64_t t;

	nw_prof_sizes(true, &q);
	t = nw_prof_kv_tokens_max(&q, &slow, 0);
	g_assert_cmpuint(t % 1024, ==, 0);
	g_assert_cmpfloat(slow.a_s + slow.b_s * (double)t, <=, q.cell_prefill_s);
	g_assert_cmpuint(t, >, 4096);
	/* Half of a small cache bounds it. */
	g_assert_cmpuint(nw_prof_kv_tokens_max(&q, &fast, 20000), ==, 9216);
	/* The run's own bound. */
	g_assert_cmpuint(nw_prof_kv_tokens_max(&q, &fast, 0), <=, q.kv_tokens_max);
}

/* Each stream asks for tokens enough for its window, within the model's
 * length, and a bounded number. */
static void
test_stream_tokens(void)
{
	struct nw_prof_sizes q;
	struct nw_prof_cell one = { .active = 1, .prompt_tokens = 2022 };
	struct nw_prof_cell many = { .active = 94, .prompt_tokens = 8 };

	nw_prof_sizes(true, &q);
	g_assert_cmpuint(nw_prof_stream_tokens(&q, &one, 2048), ==, 26);
	g_assert_cmpuint(nw_prof_stream_tokens(&q, &one, 2048), >=, q.window + 2);
	g_assert_cmpuint(nw_prof_stream_tokens(&q, &many, 2048), <=, 2048 - 8);
	g_assert_cmpuint(nw_prof_stream_tokens(&q, &many, -1), ==,
	                 4 * (q.window + many.active) + 64);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/profile/plan/prompt-max", test_prompt_max);
	g_test_add_func("/profile/plan/prefill-lengths", test_prefill_lengths);
	g_test_add_func("/profile/plan/decode-cells", test_decode_cells);
	g_test_add_func("/profile/plan/kv-tokens-max", test_kv_tokens_max);
	g_test_add_func("/profile/plan/stream-tokens", test_stream_tokens);
	return g_test_run();
}
