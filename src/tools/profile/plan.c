#include "build-config.h"

#include "tools/profile/plan.h"

#include <math.h>
#include <stdlib.h>

#include <glib.h>

/* Active requests of the grid's cells, those below the largest asked for
 * (which is measured too). */
static const uint32_t quick_active[] = { 1, 32 };
static const uint32_t full_active[] = { 1,   2,   4,   8,   16,  32,   48,   64,   80,  96,
	                                128, 160, 192, 256, 384, 512, 768, 1024, 2048 };

void
nw_prof_sizes(bool quick, struct nw_prof_sizes *out)
{
	if (quick)
		*out = (struct nw_prof_sizes){
			.prefill_reps = 5, .window = 16, .cell_prefill_s = 0.75, .kv_tokens_max = 65536,
		};
	else
		*out = (struct nw_prof_sizes){
			.prefill_reps = 5, .window = 48, .cell_prefill_s = 8.0, .kv_tokens_max = 262144,
		};
}

static size_t
add_distinct(uint64_t *out, size_t n, size_t cap, uint64_t v)
{
	for (size_t i = 0; i < n; i++)
		if (out[i] == v)
			return n;
	if (n < cap)
		out[n++] = v;
	return n;
}

static int
cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

size_t
nw_prof_prefill_lengths(bool quick, uint64_t lo, uint64_t hi, uint64_t *out, size_t cap)
{
	unsigned geometric = quick ? 3 : 6, even = quick ? 3 : 12;
	uint64_t knee = MAX(lo, hi / 4);
	size_t n = 0;

	if (lo < 1 || hi < lo)
		return 0;
	for (unsigned i = 0; i < geometric && knee > lo; i++)
		n = add_distinct(out, n, cap, (uint64_t)llround((double)lo *
		                 pow((double)knee / (double)lo, (double)i / geometric)));
	for (unsigned i = 0; i <= even; i++)
		n = add_distinct(out, n, cap, knee + (uint64_t)llround((double)(hi - knee) * i / even));
	qsort(out, n, sizeof *out, cmp_u64);
	return n;
}

uint64_t
nw_prof_prompt_max(int64_t max_model_len, uint64_t prompt_cap)
{
	if (max_model_len <= 2)
		return prompt_cap;
	return MIN(prompt_cap, (uint64_t)max_model_len - 2);
}

uint64_t
nw_prof_kv_tokens_max(const struct nw_prof_sizes *sz, const struct nw_prefill_profile *pf,
                      uint64_t kv_capacity)
{
	uint64_t t = sz->kv_tokens_max;

	if (kv_capacity > 0)
		t = MIN(t, kv_capacity / 2);
	/* Prefill of T tokens in prompts too short for the quadratic term to
	 * matter: a + b*T. */
	if (pf->b_s > 0) {
		double by_time = (sz->cell_prefill_s - MAX(pf->a_s, 0.0)) / pf->b_s;

		t = MIN(t, by_time > 0 ? (uint64_t)by_time : 0);
	}
	return t / 1024 * 1024;
}

static size_t
add_cell(struct nw_prof_cell *out, size_t n, size_t cap, uint32_t active, uint64_t p)
{
	for (size_t i = 0; i < n; i++)
		if (out[i].active == active && out[i].prompt_tokens == p)
			return n;
	if (n < cap)
		out[n++] = (struct nw_prof_cell){ .active = active, .prompt_tokens = p };
	return n;
}

/* A level of the grid: B of the i-th cell row, 0 past the last. */
static uint32_t
active_level(bool quick, uint32_t active_max, size_t i)
{
	const uint32_t *levels = quick ? quick_active : full_active;
	size_t n_levels = quick ? G_N_ELEMENTS(quick_active) : G_N_ELEMENTS(full_active);
	size_t below = 0;

	while (below < n_levels && levels[below] < active_max)
		below++;
	if (i < below)
		return levels[i];
	return i == below ? active_max : 0;
}

size_t
nw_prof_decode_cells(bool quick, uint32_t active_max, uint64_t p_min, uint64_t p_max,
                     uint64_t t_max, struct nw_prof_cell *out, size_t cap)
{
	uint32_t b;
	size_t n = 0;

	if (p_min < 1 || p_max < p_min || active_max < 1)
		return 0;
	n = add_cell(out, n, cap, 1, p_max);
	for (size_t i = 0; (b = active_level(quick, active_max, i)) != 0; i++) {
		uint64_t lo = p_min;
		uint64_t hi = CLAMP(t_max / b, p_min, p_max);
		/* Quick: the ends; full: four geometric levels. */
		unsigned steps = quick ? 1 : 3;

		for (unsigned k = 0; k <= steps; k++) {
			double p = (double)lo * pow((double)hi / (double)lo, (double)k / steps);

			n = add_cell(out, n, cap, b, CLAMP((uint64_t)llround(p), lo, hi));
		}
	}
	return n;
}

uint32_t
nw_prof_stream_tokens(const struct nw_prof_sizes *sz, const struct nw_prof_cell *c,
                      int64_t max_model_len)
{
	uint64_t want = 4 * ((uint64_t)sz->window + c->active) + 64;

	if (max_model_len > 0 && (uint64_t)max_model_len > c->prompt_tokens)
		want = MIN(want, (uint64_t)max_model_len - c->prompt_tokens);
	return (uint32_t)MIN(want, UINT32_MAX);
}
