#include "build-config.h"

#include "tools/replay/prompt.h"

#include <stdlib.h>
#include <string.h>

/* splitmix64's finaliser: a cheap, well-mixed hash of a 64-bit key. */
static uint64_t
mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

uint32_t
rp_prompt_words(uint32_t tokens, uint32_t overhead)
{
	/* An empty prompt is refused by servers; keep one word at least. */
	return tokens > overhead ? tokens - overhead : 1;
}

void
rp_prompt_append(GString *out, uint32_t tokens, uint32_t overhead, const uint32_t *hash_ids,
                 uint32_t n_hash, uint64_t seed, uint64_t unique)
{
	uint32_t words = rp_prompt_words(tokens, overhead);
	uint64_t block_key = 0;
	uint32_t block = UINT32_MAX;
	gsize at = out->len;

	g_string_set_size(out, at + (gsize)words * 5);
	for (uint32_t w = 0; w < words; w++) {
		uint32_t pos = w + overhead; /* the BOS sits at position 0 */
		char *p = out->str + at + (gsize)w * 5;
		uint64_t h;

		if (pos / RP_BLOCK_TOKENS != block) {
			block = pos / RP_BLOCK_TOKENS;
			if (hash_ids != NULL && block < n_hash)
				block_key = mix64(seed ^ mix64((uint64_t)hash_ids[block] + 1));
			else
				block_key = mix64(seed ^ mix64(unique * 0x100000001b3ull + block +
				                               0x5bd1e995ull));
		}
		h = mix64(block_key + pos % RP_BLOCK_TOKENS);
		p[0] = ' ';
		for (int i = 1; i <= 4; i++) {
			p[i] = (char)('a' + h % 26);
			h /= 26;
		}
	}
}

static void
append_json_string(GString *out, const char *s)
{
	json_t *v = json_string(s);
	char *text = v ? json_dumps(v, JSON_ENCODE_ANY) : NULL;

	g_string_append(out, text ? text : "\"\"");
	free(text);
	json_decref(v);
}

/* Our own field, unless the extra object overrides it. */
static bool
ours(const struct rp_body_opts *o, const char *key)
{
	return o->extra == NULL || json_object_get(o->extra, key) == NULL;
}

char *
rp_body_build(const struct rp_body_opts *o, uint32_t input_tokens, uint32_t max_tokens,
              const uint32_t *hash_ids, uint32_t n_hash, uint64_t unique, size_t *len)
{
	GString *b = g_string_sized_new(64 + (gsize)input_tokens * 5 + 256);
	const char *key;
	json_t *value;

	/* Built by hand: the prompt needs no escaping and can be 1 MB. */
	g_string_append_c(b, '{');
	if (o->model != NULL && ours(o, "model")) {
		g_string_append(b, "\"model\":");
		append_json_string(b, o->model);
		g_string_append_c(b, ',');
	}
	if (o->api == RP_API_CHAT)
		g_string_append(b, "\"messages\":[{\"role\":\"user\",\"content\":\"");
	else
		g_string_append(b, "\"prompt\":\"");
	rp_prompt_append(b, input_tokens, o->prompt_overhead, hash_ids, n_hash, o->seed, unique);
	g_string_append(b, o->api == RP_API_CHAT ? "\"}]" : "\"");
	if (ours(o, "max_tokens"))
		g_string_append_printf(b, ",\"max_tokens\":%u", max_tokens);
	if (ours(o, "stream"))
		g_string_append_printf(b, ",\"stream\":%s", o->stream ? "true" : "false");
	if (o->stream && ours(o, "stream_options"))
		g_string_append(b, ",\"stream_options\":{\"include_usage\":true}");
	if (o->ignore_eos && ours(o, "ignore_eos"))
		g_string_append(b, ",\"ignore_eos\":true");
	if (o->extra != NULL) {
		json_object_foreach((json_t *)o->extra, key, value) {
			char *text = json_dumps(value, JSON_ENCODE_ANY | JSON_COMPACT);

			if (text == NULL)
				continue;
			g_string_append_c(b, ',');
			append_json_string(b, key);
			g_string_append_c(b, ':');
			g_string_append(b, text);
			free(text);
		}
	}
	g_string_append_c(b, '}');
	*len = b->len;
	return g_string_free(b, FALSE);
}

const char *
rp_api_path(enum rp_api api)
{
	return api == RP_API_CHAT ? "/v1/chat/completions" : "/v1/completions";
}
