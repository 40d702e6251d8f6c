/*
 * What narwhal-profile measures (docs/profiles.md, "How to profile a
 * fleet"): the prompt lengths of the prefill sweep and the cells (active
 * requests B by resident KV tokens T) of the decode grid, chosen from what
 * the engine reports (its maximum model length), the prefill it has just
 * shown and its KV capacity when known. Pure: numbers in, a plan out.
 */
#ifndef NW_PROFILE_PLAN_H
#define NW_PROFILE_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/profile.h"

/* The shortest prompt the sweeps aim for; the shortest a prompt builder
 * can make may be longer. */
#define NW_PROF_PROMPT_FLOOR 8
/* The longest prompt measured unless --max-prompt-tokens says otherwise:
 * vLLM's default per-step token budget (max_num_batched_tokens) on large
 * GPUs, and narwhal-sim's. A longer prompt is prefilled in chunks, each
 * step paying its fixed cost again, which the quadratic form does not
 * describe. */
#define NW_PROF_PROMPT_CAP 8192
/* The most active requests in the decode grid unless --max-decode-streams
 * says otherwise: below narwhal-sim's decode_batch_split (95), where most
 * of its presets switch coefficient sets, so that one linear model holds. */
#define NW_PROF_ACTIVE_DEFAULT 94
/* The range of --max-decode-streams. */
#define NW_PROF_ACTIVE_LIMIT 4096
#define NW_PROF_CELLS_MAX 128
#define NW_PROF_LENGTHS_MAX 32

struct nw_prof_sizes {
	unsigned prefill_reps;     /* measurements of each prompt length */
	unsigned window;           /* token intervals timed in each decode cell */
	double cell_prefill_s;     /* a cell's prompts take about this long to prefill */
	uint64_t kv_tokens_max;    /* no cell holds more resident KV tokens */
};

/* The sizes of a --quick or a full run. */
void nw_prof_sizes(bool quick, struct nw_prof_sizes *out);

/* The prompt lengths of the prefill sweep from lo to hi (inclusive, lo <=
 * hi), ascending and distinct: geometric up to hi/4, where the fixed cost
 * shows, then even steps to hi, where the quadratic term does. Returns
 * how many were written (at most cap). */
size_t nw_prof_prefill_lengths(bool quick, uint64_t lo, uint64_t hi, uint64_t *out, size_t cap);

/* The longest prompt of a sweep: the two output tokens of a handoff
 * sample must still fit the model's length, and no longer than
 * prompt_cap. max_model_len <= 2: unknown (prompt_cap then). */
uint64_t nw_prof_prompt_max(int64_t max_model_len, uint64_t prompt_cap);

struct nw_prof_cell {
	uint32_t active;           /* B streams */
	uint64_t prompt_tokens;    /* each stream's prompt (p); T = B * p + generated */
};

/* The resident KV tokens a cell may reach: the run's bound, half the
 * engine's KV capacity when known (kv_capacity 0: unknown), and what its
 * prompts prefill in about cell_prefill_s by the prefill model; rounded
 * down to a multiple of 1024 so that the plan does not follow the noise of
 * the prefill fit. */
uint64_t nw_prof_kv_tokens_max(const struct nw_prof_sizes *sz, const struct nw_prefill_profile *pf,
                               uint64_t kv_capacity);

/* The decode grid: for each B up to active_max (the levels below it, then
 * active_max itself), prompts of p_min..p_max tokens with T = B * p at
 * most t_max, at two (quick) or four levels, so that T varies apart from
 * B. The first cell is one stream of p_max tokens, which the engine's KV
 * capacity is estimated from. Returns how many were written. */
size_t nw_prof_decode_cells(bool quick, uint32_t active_max, uint64_t p_min, uint64_t p_max,
                            uint64_t t_max, struct nw_prof_cell *out, size_t cap);

/* Output tokens a stream of a cell asks for: enough to reach the timed
 * window after the other streams' prefill (it is cancelled once the window
 * is timed), within the model's length. */
uint32_t nw_prof_stream_tokens(const struct nw_prof_sizes *sz, const struct nw_prof_cell *c,
                               int64_t max_model_len);

#endif /* NW_PROFILE_PLAN_H */
