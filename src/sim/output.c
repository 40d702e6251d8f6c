#include "build-config.h"

#include <inttypes.h>
#include <string.h>

#include "sim/output.h"
#include "sim/tokenize.h"

void
sim_output_plan(struct sim_output *o, uint32_t tokens, bool reasoning, GPtrArray *names)
{
	uint32_t rest;

	o->tokens = tokens;
	o->reasoning = reasoning ? tokens / 2 : 0;
	rest = tokens - o->reasoning;
	o->n_calls = names ? MIN(names->len, rest) : 0;
	o->call_names = NULL;
	if (names != NULL) {
		/* Names past the calls that fit are dropped. */
		while (names->len > o->n_calls)
			g_ptr_array_remove_index(names, names->len - 1);
		g_ptr_array_add(names, NULL);
		o->call_names = (char **)g_ptr_array_free(names, FALSE);
	}
}

void
sim_output_clear(struct sim_output *o)
{
	g_strfreev(o->call_names);
	o->call_names = NULL;
	o->n_calls = 0;
}

uint32_t
sim_output_call_first(const struct sim_output *o, unsigned c)
{
	uint64_t span = o->tokens - o->reasoning;

	return o->reasoning + (uint32_t)(span * c / o->n_calls);
}

uint32_t
sim_output_call_last(const struct sim_output *o, unsigned c)
{
	return sim_output_call_first(o, c + 1) - 1;
}

sim_out_kind
sim_output_kind(const struct sim_output *o, uint32_t i, unsigned *call)
{
	if (i < o->reasoning)
		return SIM_OUT_REASONING;
	if (o->n_calls == 0)
		return SIM_OUT_CONTENT;
	*call = 0;
	while (*call + 1 < o->n_calls && sim_output_call_first(o, *call + 1) <= i)
		(*call)++;
	return SIM_OUT_TOOL;
}

void
sim_output_append_args(const struct sim_output *o, uint64_t seed, uint32_t i, GString *out)
{
	unsigned c = 0;

	sim_output_kind(o, i, &c);
	if (i == sim_output_call_first(o, c))
		g_string_append(out, "{\\\"text\\\": \\\"");
	g_string_append(out, sim_token_piece(seed, i));
	if (i == sim_output_call_last(o, c))
		g_string_append(out, "\\\"}");
}

void
sim_output_append_call_id(uint64_t seed, unsigned c, GString *out)
{
	g_string_append_printf(out, "chatcmpl-tool-%016" PRIx64,
	                       sim_mix64(sim_mix64(seed ^ 0x746f6f6c) + c));
}

double
sim_output_logprob(uint64_t seed, uint32_t i, unsigned k)
{
	uint64_t h = sim_mix64(sim_mix64(seed ^ 0x6c6f6770726f62) + i);

	/* In (-4, 0], in steps of 1/1024; each alternative half a nat below. */
	return -(double)(h % 4096) / 1024.0 - 0.5 * k;
}

static void
append_number(GString *out, double v)
{
	char buf[G_ASCII_DTOSTR_BUF_SIZE];

	g_string_append(out, g_ascii_dtostr(buf, sizeof buf, v));
}

static const char *
piece_or_alternative(uint64_t seed, uint32_t i, unsigned k)
{
	return k == 0 ? sim_token_piece(seed, i) : sim_token_alternative(seed, i, k);
}

static void
append_chat_entry(GString *out, uint64_t seed, uint32_t i, unsigned k)
{
	const char *piece = piece_or_alternative(seed, i, k);

	g_string_append(out, "{\"token\":\"");
	g_string_append(out, piece);
	g_string_append(out, "\",\"logprob\":");
	append_number(out, sim_output_logprob(seed, i, k));
	g_string_append(out, ",\"bytes\":[");
	for (const char *p = piece; *p; p++)
		g_string_append_printf(out, p == piece ? "%u" : ",%u", (unsigned char)*p);
	g_string_append_c(out, ']');
}

void
sim_output_append_chat_logprob(const struct sim_output *o, uint64_t seed, uint32_t i,
                               GString *out)
{
	append_chat_entry(out, seed, i, 0);
	/* vLLM lists the first top_logprobs entries of the token's logprobs,
	 * whose first is the sampled token itself. */
	g_string_append(out, ",\"top_logprobs\":[");
	for (int k = 0; k < o->top; k++) {
		if (k > 0)
			g_string_append_c(out, ',');
		append_chat_entry(out, seed, i, (unsigned)k);
		g_string_append_c(out, '}');
	}
	g_string_append(out, "]}");
}

void
sim_output_append_completion_logprobs(const struct sim_output *o, uint64_t seed,
                                      uint32_t first, uint32_t n, uint32_t offset,
                                      GString *out)
{
	g_string_append(out, "{\"text_offset\":[");
	for (uint32_t i = first; i < first + n; i++) {
		g_string_append_printf(out, i > first ? ",%" PRIu32 : "%" PRIu32, offset);
		offset += (uint32_t)strlen(sim_token_piece(seed, i));
	}
	g_string_append(out, "],\"token_logprobs\":[");
	for (uint32_t i = first; i < first + n; i++) {
		if (i > first)
			g_string_append_c(out, ',');
		append_number(out, sim_output_logprob(seed, i, 0));
	}
	g_string_append(out, "],\"tokens\":[");
	for (uint32_t i = first; i < first + n; i++)
		g_string_append_printf(out, i > first ? ",\"%s\"" : "\"%s\"",
		                       sim_token_piece(seed, i));
	/* The sampled token and then logprobs alternatives: top + 1 keys. */
	g_string_append(out, "],\"top_logprobs\":[");
	for (uint32_t i = first; i < first + n; i++) {
		g_string_append(out, i > first ? ",{" : "{");
		for (int k = 0; k <= o->top; k++) {
			g_string_append_printf(out, k ? ",\"%s\":" : "\"%s\":",
			                       piece_or_alternative(seed, i, (unsigned)k));
			append_number(out, sim_output_logprob(seed, i, (unsigned)k));
		}
		g_string_append_c(out, '}');
	}
	g_string_append(out, "]}");
}

static guint32
piece_id(const char *piece, size_t len)
{
	g_autoptr(GArray) ids = g_array_new(FALSE, FALSE, sizeof(guint32));

	sim_tokenize(piece, len, ids);
	return ids->len > 0 ? g_array_index(ids, guint32, 0) : 0;
}

static void
set_entry(json_t *entry, guint32 id, double logprob, int rank, json_t *decoded)
{
	char key[16];

	g_snprintf(key, sizeof key, "%u", id);
	if (json_object_get(entry, key) != NULL) {
		json_decref(decoded); /* an alternative that is the token itself */
		return;
	}
	json_object_set_new(entry, key, json_pack("{s:f, s:i, s:o}", "logprob", logprob,
	                                          "rank", rank, "decoded_token", decoded));
}

static json_t *
prompt_entry(guint32 id, json_t *decoded, uint32_t pos, int top, uint64_t seed)
{
	json_t *entry = json_object();

	set_entry(entry, id, sim_output_logprob(seed, pos, 0), 1, decoded);
	for (int k = 1; k <= top; k++) {
		const char *alt = sim_token_alternative(seed, pos, (unsigned)k);

		set_entry(entry, piece_id(alt, strlen(alt)), sim_output_logprob(seed, pos, (unsigned)k),
		          k + 1, json_string(alt));
	}
	return entry;
}

json_t *
sim_output_prompt_logprobs(const char *text, bool bos, const GArray *ids, int top, uint64_t seed)
{
	json_t *list = json_array();
	uint32_t pos = 0;

	/* The first token has nothing before it to be predicted from. */
	if (bos) {
		json_array_append_new(list, json_null());
		pos++;
	}
	if (text == NULL) {
		for (guint i = 0; i < ids->len; i++, pos++)
			json_array_append_new(list, pos == 0 ? json_null() :
			                      prompt_entry(g_array_index(ids, guint32, i), json_null(),
			                                   pos, top, seed ^ 0x70726f6d7074));
		return list;
	}
	for (size_t at = 0, len = strlen(text); at < len; pos++) {
		size_t n = sim_token_len(text, len, at);
		/* A lone byte of a multi-byte character decodes to U+FFFD. */
		json_t *decoded = g_utf8_validate_len(text + at, n, NULL) ?
		                  json_stringn(text + at, n) : json_string("\xef\xbf\xbd");

		if (pos == 0)
			json_array_append_new(list, json_null());
		else
			json_array_append_new(list, prompt_entry(piece_id(text + at, n), decoded, pos,
			                                         top, seed ^ 0x70726f6d7074));
		if (pos == 0)
			json_decref(decoded);
		at += n;
	}
	return list;
}
