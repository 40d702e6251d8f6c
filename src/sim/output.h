/*
 * What a simulated request generates besides plain text (docs/simulator.md,
 * "Tool calls, reasoning and log-probabilities"): which output tokens are
 * reasoning, content or the arguments of a tool call, and the
 * log-probabilities of every token. Everything is a pure function of the
 * request's text seed and the token's index, so a streamed answer and a
 * non-streamed one carry the same tokens and the same values.
 *
 * The fragments appended here are JSON text in vLLM's shapes; pieces are
 * plain ASCII words, so they need no escaping.
 */
#ifndef NW_SIM_OUTPUT_H
#define NW_SIM_OUTPUT_H

#include <stdbool.h>
#include <stdint.h>

#include <glib.h>
#include <jansson.h>

/* The most alternatives a request may ask for per token (vLLM's default
 * max_logprobs). */
#define SIM_MAX_LOGPROBS 20

typedef enum sim_out_kind {
	SIM_OUT_CONTENT = 0,
	SIM_OUT_REASONING,
	SIM_OUT_TOOL,
} sim_out_kind;

struct sim_output {
	uint32_t tokens;          /* the whole output (max_tokens) */
	uint32_t reasoning;       /* the first tokens are reasoning (chat) */
	unsigned n_calls;         /* tool calls sharing the tokens after it */
	char **call_names;        /* their function names as JSON literals */
	int top;                  /* -1: no logprobs; else alternatives asked */
	int prompt_top;           /* -1: no prompt_logprobs; else alternatives */
};

/* Plan an output of tokens tokens: half of it reasoning when asked for,
 * then the tool calls named (names: JSON string literals, taken), each
 * with at least one token; fewer calls when tokens are too few. */
void sim_output_plan(struct sim_output *o, uint32_t tokens, bool reasoning, GPtrArray *names);
void sim_output_clear(struct sim_output *o);

/* What output token i is; *call gets its tool call for SIM_OUT_TOOL. */
sim_out_kind sim_output_kind(const struct sim_output *o, uint32_t i, unsigned *call);
/* The first and last token of tool call c. */
uint32_t sim_output_call_first(const struct sim_output *o, unsigned c);
uint32_t sim_output_call_last(const struct sim_output *o, unsigned c);

/* The arguments text that token i adds to its tool call, escaped for a
 * JSON string: the call's first token opens {"text": " and its last
 * closes the string and the object. */
void sim_output_append_args(const struct sim_output *o, uint64_t seed, uint32_t i, GString *out);
/* The id of tool call c (deterministic). */
void sim_output_append_call_id(uint64_t seed, unsigned c, GString *out);

/* The log-probability of output token i (rank 0) or of its k-th
 * alternative: exact binary fractions, so that they print and parse back
 * the same everywhere. */
double sim_output_logprob(uint64_t seed, uint32_t i, unsigned k);

/* Chat: one element of logprobs.content for token i. */
void sim_output_append_chat_logprob(const struct sim_output *o, uint64_t seed, uint32_t i,
                                    GString *out);
/* Completions: the logprobs object of tokens [first, first + n), whose
 * text starts at character offset. */
void sim_output_append_completion_logprobs(const struct sim_output *o, uint64_t seed,
                                           uint32_t first, uint32_t n, uint32_t offset,
                                           GString *out);
/* prompt_logprobs of a prompt (text, or NULL for a prompt of token ids
 * given in ids): null for the first token, then for each token an object
 * keyed by token id of {logprob, rank, decoded_token}, the prompt's token
 * and top alternatives. New reference. */
json_t *sim_output_prompt_logprobs(const char *text, bool bos, const GArray *ids, int top,
                                   uint64_t seed);

#endif /* NW_SIM_OUTPUT_H */
