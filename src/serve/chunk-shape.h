/*
 * The shape of an engine's token chunks, to merge most of them without a
 * JSON parse. An engine streams each token as a chunk that repeats the
 * same bytes around one changing string: the token's text. Parsing every
 * chunk whole cost the router more than everything else it does for a
 * non-streamed answer.
 *
 * Each chunk parsed and merged whole replaces the shape (a shape learnt
 * earlier may hold values that chunk replaced): when the chunk holds exactly one "text" (completions)
 * or "content" (chat) string value, the bytes before that value's opening
 * quote and from its closing quote on become the shape. A later chunk
 * whose bytes are that head, one well-formed JSON string body and that
 * tail differs from the learnt chunk in that string alone, so merging it
 * is appending the decoded string. Anything else (a finish reason, usage,
 * logprobs, another layout) does not match and is parsed whole.
 */
#ifndef NW_SERVE_CHUNK_SHAPE_H
#define NW_SERVE_CHUNK_SHAPE_H

#include <stdbool.h>
#include <stddef.h>

#include <glib.h>
#include <narwhal/plugin-abi.h>

struct nw_chunk_shape {
	GString *head;   /* up to and including the opening quote */
	GString *tail;   /* from the closing quote to the end */
	bool known;
};

/* The key whose string is the only thing a chunk like this one (parsed
 * whole) would change, or NULL: one choice, holding only its index, its
 * text (chat: a delta of content alone) and null logprobs, finish and stop
 * reasons. No field of such a chunk but the text merges by concatenation
 * (assemble.c), so merging another chunk of its shape is appending that
 * chunk's text to the choice (*choice: its index). */
const char *nw_chunk_shape_key(narwhal_route route, const json_t *chunk, json_int_t *choice);

void nw_chunk_shape_init(struct nw_chunk_shape *s);
void nw_chunk_shape_clear(struct nw_chunk_shape *s);
/* Forget the learnt shape (a new response). */
void nw_chunk_shape_reset(struct nw_chunk_shape *s);

/* Learn the shape of payload, whose value of key (raw bytes, e.g. "text")
 * is the one string to change. False (nothing learnt) unless the key
 * occurs exactly once as an object key with a string value. */
bool nw_chunk_shape_learn(struct nw_chunk_shape *s, const char *payload, size_t len,
                          const char *key);

/* Whether payload has the learnt shape; if so its string, decoded, is
 * appended to text (NULL: only checked). A payload that matches the shape
 * of a payload that was valid JSON is valid JSON, UTF-8 included. */
bool nw_chunk_shape_match(const struct nw_chunk_shape *s, const char *payload, size_t len,
                          GString *text);

/* Decode the body of a JSON string literal (the bytes between the quotes)
 * and append it to out, as strictly as jansson reads strings: no raw
 * quote or control character, known escapes only, \u escapes with proper
 * surrogate pairs and never U+0000, and valid UTF-8. False leaves out as
 * it was; out NULL only checks. */
bool nw_json_string_decode(const char *body, size_t len, GString *out);

#endif /* NW_SERVE_CHUNK_SHAPE_H */
