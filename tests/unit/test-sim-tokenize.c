/*
 * narwhal-sim's deterministic tokeniser, chat template and generated text.
 */
#include "build-config.h"

#include <string.h>

#include "sim/tokenize.h"

static uint32_t
count(const char *s)
{
	return sim_tokenize_count(s, strlen(s));
}

/* The documented rules, case by case. */
static void
test_counts(void)
{
	static const struct {
		const char *text;
		uint32_t tokens;
	} t[] = {
		{ "", 0 },
		{ "a", 1 },
		{ "hell", 1 },
		{ "hello", 2 },                /* hell | o */
		{ " hello world", 4 },         /* " hell" | o | " worl" | d */
		{ "Hi, there!", 5 },           /* Hi | , | " ther" | e | ! */
		{ "a  b", 3 },                 /* a | " " | " b" */
		{ "abc123def", 3 },            /* abc1 | 23de | f */
		{ " ", 1 },
		{ "x ", 2 },
		{ "\n\t", 2 },
		{ "caf\xc3\xa9", 3 },          /* caf | two bytes of e-acute */
		{ " \xe2\x9c\x93 ok", 5 },     /* " " | 3 bytes | " ok" */
		{ "<|user|>\nHi\n", 8 },
	};

	for (size_t i = 0; i < G_N_ELEMENTS(t); i++)
		if (count(t[i].text) != t[i].tokens)
			g_error("\"%s\": %u tokens, want %u", t[i].text, count(t[i].text),
			        t[i].tokens);
	/* a NUL inside the text is a byte like any other */
	g_assert_cmpuint(sim_tokenize_count("ab\0cd", 5), ==, 3);
}

static GArray *
ids_of(const char *s)
{
	GArray *ids = g_array_new(FALSE, FALSE, sizeof(guint32));

	sim_tokenize(s, strlen(s), ids);
	return ids;
}

/* Ids are a pure function of the piece, in range, the same every run and
 * in every build; these values are part of the documented behaviour. */
static void
test_ids(void)
{
	static const char text[] = "The quick brown fox, 42 times.\n";
	GArray *a = ids_of(text), *b = ids_of(text), *c = ids_of(" fox fox");

	g_assert_cmpuint(a->len, ==, count(text));
	g_assert_cmpmem(a->data, a->len * 4, b->data, b->len * 4);
	for (guint i = 0; i < a->len; i++) {
		g_assert_cmpuint(g_array_index(a, guint32, i), >=, 2);
		g_assert_cmpuint(g_array_index(a, guint32, i), <, 50000);
	}
	g_assert_cmpuint(c->len, ==, 2);
	g_assert_cmpuint(g_array_index(c, guint32, 0), ==, g_array_index(c, guint32, 1));
	g_assert_cmpuint(g_array_index(c, guint32, 0), ==, g_array_index(a, guint32, 5));
	/* appending keeps what was there */
	sim_tokenize("!", 1, c);
	g_assert_cmpuint(c->len, ==, 3);
	g_array_unref(c);
	c = ids_of("hell o");
	g_assert_cmpuint(g_array_index(c, guint32, 0), ==, 17400); /* FNV-1a("hell") */
	g_assert_cmpuint(g_array_index(c, guint32, 1), ==, 7920);  /* FNV-1a(" o") */
	g_array_unref(a);
	g_array_unref(b);
	g_array_unref(c);
}

static char *
chat(const char *json, bool gen, const char **error)
{
	json_error_t jerr;
	json_t *messages = json_loads(json, 0, &jerr);
	char *out;

	g_assert_nonnull(messages);
	out = sim_chat_prompt(messages, gen, error);
	json_decref(messages);
	return out;
}

static void
test_chat_template(void)
{
	const char *error = NULL;
	g_autofree char *a = chat("[{\"role\": \"system\", \"content\": \"Be brief.\"},"
	                          " {\"role\": \"user\", \"content\": \"Hi\"}]", true, &error);
	g_autofree char *b = chat("[{\"role\": \"user\", \"content\": [{\"type\": \"text\","
	                          " \"text\": \"one\"}, {\"type\": \"text\", \"text\": \"two\"}]}]",
	                          false, &error);
	g_autofree char *c = chat("[{\"role\": \"user\", \"content\": \"\"}]", false, NULL);

	g_assert_cmpstr(a, ==, "<|system|>\nBe brief.\n<|user|>\nHi\n<|assistant|>\n");
	g_assert_cmpstr(b, ==, "<|user|>\none\ntwo\n");
	g_assert_cmpstr(c, ==, "<|user|>\n\n");
	g_assert_null(error);
}

static void
test_chat_errors(void)
{
	static const char *const bad[] = {
		"{\"role\": \"user\", \"content\": \"Hi\"}",
		"[]",
		"[\"Hi\"]",
		"[{\"content\": \"Hi\"}]",
		"[{\"role\": 1, \"content\": \"Hi\"}]",
		"[{\"role\": \"\", \"content\": \"Hi\"}]",
		"[{\"role\": \"user\"}]",
		"[{\"role\": \"user\", \"content\": null}]",
		"[{\"role\": \"user\", \"content\": 5}]",
		"[{\"role\": \"user\", \"content\": [{\"type\": \"image_url\", \"image_url\": {}}]}]",
		"[{\"role\": \"user\", \"content\": [{\"type\": \"text\"}]}]",
		"[{\"role\": \"user\", \"content\": [\"Hi\"]}]",
		"[{\"role\": \"user\", \"content\": \"ok\"}, {\"role\": \"user\", \"content\": {}}]",
	};

	for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
		const char *error = NULL;
		char *out = chat(bad[i], true, &error);

		if (out)
			g_error("accepted %s as \"%s\"", bad[i], out);
		g_assert_nonnull(error);
		g_assert_null(chat(bad[i], true, NULL)); /* error is optional */
	}
}

/* Generated text: each piece one token, so the completion's text
 * tokenises back to exactly its token count. */
static void
test_pieces(void)
{
	GHashTable *distinct = g_hash_table_new(g_str_hash, g_str_equal);
	GString *text = g_string_new(NULL);
	bool differs = false;

	for (uint64_t seed = 0; seed < 20; seed++) {
		g_string_truncate(text, 0);
		for (uint32_t i = 0; i < 500; i++) {
			const char *p = sim_token_piece(seed, i);

			g_assert_cmpuint(count(p), ==, 1);
			g_assert_true(p == sim_token_piece(seed, i));
			differs |= p != sim_token_piece(seed + 1, i);
			g_hash_table_add(distinct, (gpointer)p);
			g_string_append(text, p);
		}
		g_assert_cmpuint(sim_tokenize_count(text->str, text->len), ==, 500);
	}
	g_assert_true(differs);
	g_assert_cmpuint(g_hash_table_size(distinct), >=, 50);
	/* appended to a prompt that ends in a word, counts still add up */
	g_string_assign(text, "Tell me");
	g_string_append(text, sim_token_piece(1, 0));
	g_assert_cmpuint(sim_tokenize_count(text->str, text->len), ==, count("Tell me") + 1);
	g_string_free(text, TRUE);
	g_hash_table_unref(distinct);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/sim/tokenize/issue3-documented-counts", test_counts);
	g_test_add_func("/sim/tokenize/issue3-deterministic-ids", test_ids);
	g_test_add_func("/sim/tokenize/chat-template", test_chat_template);
	g_test_add_func("/sim/tokenize/chat-errors", test_chat_errors);
	g_test_add_func("/sim/tokenize/issue3-pieces-round-trip-one-token-each", test_pieces);
	return g_test_run();
}
