/*
 * narwhal-sim's deterministic tokeniser (documented in docs/simulator.md).
 * The same text always gives the same tokens, /tokenize counts equal the
 * prompt tokens reported in usage, and narwhal-replay can synthesise a
 * prompt of an exact token count.
 */
#ifndef NW_SIM_TOKENIZE_H
#define NW_SIM_TOKENIZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <glib.h>
#include <jansson.h>

/* Token ids of text (no special tokens) appended to ids (guint32). */
void sim_tokenize(const char *text, size_t len, GArray *ids);
uint32_t sim_tokenize_count(const char *text, size_t len);
/* The length in bytes of the token that starts at text[at] (at < len). */
size_t sim_token_len(const char *text, size_t len, size_t at);

/* The id of the beginning-of-sequence token added with add_special_tokens. */
#define SIM_TOKEN_BOS 1u

/* The chat template: the prompt text the engine would see for messages
 * (an array of {role, content}); caller frees. NULL when messages is not a
 * valid array of objects with string role and string (or array-of-text-
 * parts) content, with *error set to a message. */
char *sim_chat_prompt(const json_t *messages, bool add_generation_prompt, const char **error);

/* Deterministic generated text: the piece for output token index of the
 * request with this seed. Each piece is exactly one token. */
const char *sim_token_piece(uint64_t seed, uint32_t index);
/* The k-th alternative (k >= 1) to that piece, for log-probabilities:
 * distinct from the piece and from the other alternatives for k < 80. */
const char *sim_token_alternative(uint64_t seed, uint32_t index, unsigned k);
/* splitmix64's finaliser, the simulator's hash of choice. */
uint64_t sim_mix64(uint64_t x);

#endif /* NW_SIM_TOKENIZE_H */
