/*
 * Prompt synthesis and request bodies.
 *
 * A prompt of N tokens is N - overhead words, each a space and four
 * lowercase letters: narwhal-sim's tokeniser (src/sim/tokenize.h) counts
 * each such word as exactly one token, and BPE tokenisers of real models
 * come close. overhead is what the server adds itself (1: the BOS token
 * vLLM adds to completions prompts), so usage.prompt_tokens equals N.
 *
 * Token position p (BOS included) lies in 512-token block p / 512. With
 * Mooncake hash_ids the words of block b derive from hash_ids[b] alone, so
 * requests that share prefix blocks in the trace share prefix text here
 * too; otherwise every request's words are its own.
 */
#ifndef NW_REPLAY_PROMPT_H
#define NW_REPLAY_PROMPT_H

#include <stdbool.h>
#include <stdint.h>

#include <glib.h>
#include <jansson.h>

#define RP_BLOCK_TOKENS 512u

enum rp_api { RP_API_COMPLETIONS = 0, RP_API_CHAT };

struct rp_body_opts {
	enum rp_api api;
	const char *model;         /* NULL: no "model" field */
	bool stream;               /* with stream_options.include_usage */
	bool ignore_eos;           /* vLLM's ignore_eos: run to max_tokens */
	uint32_t prompt_overhead;  /* tokens the server adds to the prompt */
	uint64_t seed;
	const json_t *extra;       /* object merged into every body, or NULL */
};

/* Words for a prompt of `tokens` tokens: max(tokens - overhead, 1). */
uint32_t rp_prompt_words(uint32_t tokens, uint32_t overhead);

/* Append the prompt text; unique tells requests apart when there are no
 * hash ids (or fewer than blocks). */
void rp_prompt_append(GString *out, uint32_t tokens, uint32_t overhead,
                      const uint32_t *hash_ids, uint32_t n_hash, uint64_t seed,
                      uint64_t unique);

/* The JSON body for one request; free with g_free. */
char *rp_body_build(const struct rp_body_opts *o, uint32_t input_tokens, uint32_t max_tokens,
                    const uint32_t *hash_ids, uint32_t n_hash, uint64_t unique,
                    size_t *len);

/* The endpoint path for an API. */
const char *rp_api_path(enum rp_api api);

#endif /* NW_REPLAY_PROMPT_H */
