/*
 * narwhal-sim's tokeniser. The rules, in full (docs/simulator-model.md):
 *
 *   - A space followed by an ASCII letter or digit starts a word token:
 *     the space and up to 4 letters or digits.
 *   - Otherwise an ASCII letter or digit starts a token of up to 4 letters
 *     or digits.
 *   - Any other byte is a token by itself: punctuation, a space not
 *     followed by a letter or digit, tabs and newlines, and each byte of a
 *     non-ASCII (UTF-8) character.
 *
 * A token's id is a 32-bit FNV-1a hash of its bytes folded into [2, 50000)
 * (0 is unused, 1 is BOS). Ids may collide; counts never depend on ids.
 */
#include "build-config.h"

#include <string.h>

#include "sim/tokenize.h"

#define WORD_MAX 4
#define ID_FIRST 2u
#define ID_END 50000u

static inline bool
is_alnum(unsigned char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* Length of the token starting at text[i] (i < len). */
static inline size_t
token_len(const unsigned char *text, size_t len, size_t i)
{
	size_t j = i;

	if (text[j] == ' ' && j + 1 < len && is_alnum(text[j + 1]))
		j++;
	else if (!is_alnum(text[j]))
		return 1;
	for (size_t k = 0; k < WORD_MAX && j < len && is_alnum(text[j]); k++)
		j++;
	return j - i;
}

static uint32_t
piece_id(const unsigned char *p, size_t n)
{
	uint32_t h = 2166136261u;

	for (size_t i = 0; i < n; i++) {
		h ^= p[i];
		h *= 16777619u;
	}
	return ID_FIRST + h % (ID_END - ID_FIRST);
}

void
sim_tokenize(const char *text, size_t len, GArray *ids)
{
	const unsigned char *t = (const unsigned char *)text;

	for (size_t i = 0; i < len;) {
		size_t n = token_len(t, len, i);
		guint32 id = piece_id(t + i, n);

		g_array_append_val(ids, id);
		i += n;
	}
}

size_t
sim_token_len(const char *text, size_t len, size_t at)
{
	return token_len((const unsigned char *)text, len, at);
}

uint32_t
sim_tokenize_count(const char *text, size_t len)
{
	const unsigned char *t = (const unsigned char *)text;
	uint32_t count = 0;

	for (size_t i = 0; i < len; count++)
		i += token_len(t, len, i);
	return count;
}

/* ------------------------------------------------------- chat template --- */

/* The text of a message's content: a string, or an array of text parts
 * joined by newlines. */
static bool
append_content(GString *out, const json_t *content, const char **error)
{
	size_t i;
	const json_t *part;

	if (json_is_string(content)) {
		g_string_append_len(out, json_string_value(content),
		                    (gssize)json_string_length(content));
		return true;
	}
	if (!json_is_array(content)) {
		*error = "each message's content must be a string or an array of text parts";
		return false;
	}
	json_array_foreach(content, i, part) {
		const json_t *type = json_object_get(part, "type");
		const json_t *text = json_object_get(part, "text");

		if (!json_is_object(part) || !json_is_string(type) || !json_is_string(text) ||
		    strcmp(json_string_value(type), "text") != 0) {
			*error = "content parts must be objects {\"type\": \"text\", \"text\": string}";
			return false;
		}
		if (i > 0)
			g_string_append_c(out, '\n');
		g_string_append_len(out, json_string_value(text), (gssize)json_string_length(text));
	}
	return true;
}

char *
sim_chat_prompt(const json_t *messages, bool add_generation_prompt, const char **error)
{
	const char *ignored;
	GString *out;
	size_t i;
	const json_t *m;

	if (!error)
		error = &ignored;
	if (!json_is_array(messages) || json_array_size(messages) == 0) {
		*error = "messages must be a non-empty array";
		return NULL;
	}
	out = g_string_new(NULL);
	json_array_foreach(messages, i, m) {
		const json_t *role;

		if (!json_is_object(m)) {
			*error = "each message must be an object";
			goto fail;
		}
		role = json_object_get(m, "role");
		if (!json_is_string(role) || json_string_length(role) == 0) {
			*error = "each message needs a non-empty string role";
			goto fail;
		}
		g_string_append(out, "<|");
		g_string_append_len(out, json_string_value(role), (gssize)json_string_length(role));
		g_string_append(out, "|>\n");
		if (!append_content(out, json_object_get(m, "content"), error))
			goto fail;
		g_string_append_c(out, '\n');
	}
	if (add_generation_prompt)
		g_string_append(out, "<|assistant|>\n");
	return g_string_free(out, FALSE);
fail:
	g_string_free(out, TRUE);
	return NULL;
}

/* ------------------------------------------------------ generated text --- */

/* Each piece is one token: a space and at most four letters, or a single
 * punctuation byte. Punctuation is rarer, as in prose. */
static const char *const pieces[] = {
	" the", " a", " of", " and", " to", " in", " is", " it", " that", " was",
	" for", " on", " are", " with", " as", " at", " be", " this", " have", " from",
	" or", " one", " had", " by", " word", " but", " not", " what", " all", " were",
	" we", " when", " your", " can", " said", " here", " use", " an", " each", " whom",
	" she", " do", " how", " way", " if", " will", " up", " ask", " far", " out",
	" many", " then", " them", " some", " so", " make", " like", " him", " into", " time",
	" has", " look", " two", " more", " go", " see", " no", " long", " who", " oil",
	" sea", " fish", " reef", " tide", " ice", " cold", " deep", " tusk", " pod", " swim",
	".", ",",
};

/* splitmix64's finaliser: a good mix of (seed, index) from two words. */
uint64_t
sim_mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return x;
}

const char *
sim_token_piece(uint64_t seed, uint32_t index)
{
	uint64_t h = sim_mix64(sim_mix64(seed) + index);

	return pieces[h % G_N_ELEMENTS(pieces)];
}

const char *
sim_token_alternative(uint64_t seed, uint32_t index, unsigned k)
{
	uint64_t h = sim_mix64(sim_mix64(seed) + index);

	/* The k pieces after the chosen one in the list: distinct from it
	 * and from each other for k below the list's length. */
	return pieces[(h % G_N_ELEMENTS(pieces) + k) % G_N_ELEMENTS(pieces)];
}
