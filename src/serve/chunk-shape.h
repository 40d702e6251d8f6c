/*
 * The shape of an engine's token chunks, to merge most of them without a
 * JSON parse. An engine streams each token as a chunk that repeats the
 * same bytes around one changing string: the token's text. Parsing every
 * chunk whole cost the router more than everything else it does for a
 * non-streamed answer.
 *
 * Each chunk parsed and merged whole replaces the shape (a shape learnt
 * earlier may hold values that chunk replaced): when the chunk holds
 * exactly one "text" (completions) or "content" (chat) string value, the bytes before that value's opening
 * quote and from its closing quote on become the shape. A later chunk
 * whose bytes are that head, one well-formed JSON string body and that
 * tail differs from the learnt chunk in that string alone, so merging it
 * is appending the decoded string. The collector also leaves a finish
 * and a stop reason open (null when learnt, null or a string after), so
 * the last token chunk, which names why the answer ended, needs no parse
 * either. Anything else (usage, logprobs, another layout) does not match
 * and is parsed whole.
 */
#ifndef NW_SERVE_CHUNK_SHAPE_H
#define NW_SERVE_CHUNK_SHAPE_H

#include <stdbool.h>
#include <stddef.h>

#include <glib.h>
#include <narwhal/plugin-abi.h>

/* nw_json_string_decode: how a match reads the text */
#include "core/json-read.h"

/* The most values a shape leaves open: the text and two reasons. */
#define NW_CHUNK_SHAPE_HOLES 3

/*
 * A learnt chunk's bytes with its open values ("holes"), in the order they
 * occur. The first hole listed by role is the text: a string literal whose
 * decoded value a match appends. The others are values learnt as null
 * that a later chunk may set (a finish or stop reason): null or a string.
 */
struct nw_chunk_shape {
	GString *bytes;
	struct nw_shape_hole {
		size_t at, len;   /* the learnt value's bytes (text: its body) */
		const char *key;  /* NULL for the text */
	} hole[NW_CHUNK_SHAPE_HOLES];
	unsigned holes;
	bool known;
};

/* What a matched chunk set besides its text: the raw literal of each
 * reason hole that is not null, by the hole's key. */
struct nw_chunk_match {
	unsigned n;
	struct {
		const char *key;
		const char *body; /* between the quotes */
		size_t len;
	} set[NW_CHUNK_SHAPE_HOLES - 1];
};

/* The key whose string is the only thing a chunk like this one (parsed
 * whole) would change, or NULL: one choice, holding only its index, its
 * text (chat: a delta of content alone) and null logprobs, finish and stop
 * reasons. No field of such a chunk but the text merges by concatenation
 * (assemble.c), so merging another chunk of its shape is appending that
 * chunk's text to the choice (*choice: its index). *reasons (NULL-ended)
 * names the reason keys the choice holds (as null): a later chunk that
 * sets them, its finish, still has the shape when learnt with them. */
const char *nw_chunk_shape_key(narwhal_route route, const json_t *chunk, json_int_t *choice,
                               const char *const **reasons);

void nw_chunk_shape_init(struct nw_chunk_shape *s);
void nw_chunk_shape_clear(struct nw_chunk_shape *s);
/* Forget the learnt shape (a new response). */
void nw_chunk_shape_reset(struct nw_chunk_shape *s);

/* Learn the shape of payload, whose value of key (raw bytes, e.g. "text")
 * is the one string to change, and whose values of the keys in reasons
 * (NULL-ended; NULL for none) are null and may become strings. False
 * (nothing learnt) unless key occurs exactly once as an object key with a
 * string value and each reason key exactly once with null. */
bool nw_chunk_shape_learn(struct nw_chunk_shape *s, const char *payload, size_t len,
                          const char *key, const char *const *reasons);

/* Whether payload has the learnt shape; if so its text, decoded, is
 * appended to text (NULL: only checked) and the reasons it sets go to
 * *set (NULL: not wanted). A payload that matches the shape of a payload
 * that was valid JSON is valid JSON, UTF-8 included. */
bool nw_chunk_shape_match(const struct nw_chunk_shape *s, const char *payload, size_t len,
                          GString *text, struct nw_chunk_match *set);

#endif /* NW_SERVE_CHUNK_SHAPE_H */
