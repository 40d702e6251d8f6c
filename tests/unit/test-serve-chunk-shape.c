/*
 * The chunk shape (src/serve/chunk-shape.c): the collector merges most
 * token chunks by comparing their bytes with a learnt head and tail and
 * decoding the one string between them. The decoder must read strings
 * exactly as jansson does (jansson parses the chunks that do not match),
 * so jansson is the oracle here; learn must refuse every chunk whose
 * string it cannot single out.
 */
#include "build-config.h"

#include <stdbool.h>
#include <string.h>

#include <glib.h>
#include <jansson.h>

#include "serve/chunk-shape.h"

/* Printable form of body for failure messages: bytes may be anything. */
static char *
show(const char *body, size_t len)
{
	GString *s = g_string_new(NULL);

	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)body[i];

		if (c >= 0x20 && c < 0x7f && c != '\\')
			g_string_append_c(s, (char)c);
		else
			g_string_append_printf(s, "\\x%02x", c);
	}
	return g_string_free(s, FALSE);
}

/* jansson's reading of body as a string literal, appended to out. */
static bool
jansson_decode(const char *body, size_t len, GString *out)
{
	GString *lit = g_string_sized_new(len + 2);
	json_error_t err;
	json_t *j;

	g_string_append_c(lit, '"');
	g_string_append_len(lit, body, (gssize)len);
	g_string_append_c(lit, '"');
	j = json_loadb(lit->str, lit->len, JSON_DECODE_ANY, &err);
	g_string_free(lit, TRUE);
	if (j == NULL)
		return false;
	g_assert_true(json_is_string(j));
	g_string_append_len(out, json_string_value(j), (gssize)json_string_length(j));
	json_decref(j);
	return true;
}

/*
 * Decode body with ours and with jansson, both into a buffer that already
 * holds "keep": the verdicts and the buffers must be equal, which also
 * holds ours to leaving the buffer alone on reject. Reports a mismatch
 * (quiet past the first few, for the exhaustive sweeps) and returns
 * whether both agreed; *accepted is jansson's verdict.
 */
static guint mismatches;

static bool
agree(const char *body, size_t len, bool *accepted)
{
	GString *got = g_string_new("keep");
	GString *want = g_string_new("keep");
	bool ours = nw_json_string_decode(body, len, got);
	bool theirs = jansson_decode(body, len, want);
	bool same = ours == theirs && g_string_equal(got, want);

	if (!same) {
		if (mismatches++ < 20) {
			char *b = show(body, len);
			char *g = show(got->str, got->len);
			char *w = show(want->str, want->len);

			g_test_message("body \"%s\": ours %s \"%s\", jansson %s \"%s\"", b,
			               ours ? "accepts" : "rejects", g,
			               theirs ? "accepts" : "rejects", w);
			g_free(b);
			g_free(g);
			g_free(w);
		}
		g_test_fail();
	}
	if (accepted != NULL)
		*accepted = theirs;
	g_string_free(got, TRUE);
	g_string_free(want, TRUE);
	return same;
}

struct decode_case {
	const char *body;
	size_t len;
	bool accept; /* what the JSON grammar says, to check the oracle too */
};

#define YES(s) { s, sizeof s - 1, true }
#define NO(s) { s, sizeof s - 1, false }

static const struct decode_case decode_cases[] = {
	YES(""),
	YES("plain ascii text"),
	YES("\\\""),
	YES("\\\\"),
	YES("\\/"),
	YES("\\b\\f\\n\\r\\t"),
	YES("a\\\"b\\\\c\\/d\\be\\ff\\ng\\rh\\ti"),
	YES("\\u00e9"),
	YES("\\u00E9"),
	YES("\\u20ac"),
	YES("\\u0041\\u007f\\u0080\\u07ff\\u0800\\uffff"),
	YES("\\ud83d\\ude00"),
	YES("\\uD83D\\uDE00"),
	YES("\\udbff\\udfff"),
	YES("x\\ud800\\udc00y"),
	NO("\\ud83d"),
	NO("\\ud83dx"),
	NO("\\ud83d\\n"),
	NO("\\ud83d\\ud83d"),
	NO("\\ud83d\\u0041"),
	NO("\\ud83d\\ude0"),
	NO("\\ude00"),
	NO("\\ude00\\ud83d"),
	NO("\\u0000"),
	NO("a\\u0000b"),
	NO("\\x"),
	NO("\\U00e9"),
	NO("\\'"),
	NO("\\u12"),
	NO("\\u12g4"),
	NO("\\u"),
	NO("\\"),
	NO("abc\\"),
	NO("\\\\\\"),
	NO("\""),
	NO("a\"b"),
	NO("a\","),
	NO("\x01"),
	NO("a\x1f"),
	NO("\t"),
	NO("a\nb"),
	NO("\r"),
	NO("a\0b"),
	YES("\x7f"),
	YES("\xc3\xa9"),
	YES("caf\xc3\xa9 \xf0\x9f\x98\x80"),
	YES("\xef\xbf\xbf"),
	YES("\xf4\x8f\xbf\xbf"),
	NO("\xff"),
	NO("\xfe"),
	NO("\x80"),
	NO("a\xc3"),
	NO("\xc3" "a"),
	NO("\xc3\\n"),
	NO("\xc0\xaf"),
	NO("\xc1\xbf"),
	NO("\xe0\x80\xaf"),
	NO("\xf0\x80\x80\xaf"),
	NO("\xed\xa0\x80"),
	NO("\xed\xbf\xbf"),
	NO("\xf4\x90\x80\x80"),
	NO("\xf5\x80\x80\x80"),
	NO("\xe2\x82"),
	NO("ok\\n then \xff"),
};

static void
test_decode_table(void)
{
	g_test_summary("/serve/chunk-shape/decode-table: string bodies with every escape, bad "
	               "escapes, surrogates, control characters and good and bad UTF-8 are "
	               "read as jansson reads them, and a rejected body leaves the buffer alone");
	for (size_t i = 0; i < G_N_ELEMENTS(decode_cases); i++) {
		const struct decode_case *c = &decode_cases[i];
		bool accepted;

		if (agree(c->body, c->len, &accepted) && accepted != c->accept) {
			char *b = show(c->body, c->len);

			/* The oracle itself disagrees with the grammar: a bad case. */
			g_test_message("body \"%s\": jansson %s it", b,
			               accepted ? "accepts" : "rejects");
			g_free(b);
			g_test_fail();
		}
	}
}

static void
test_decode_sweep(void)
{
	char b[16];

	g_test_summary("/serve/chunk-shape/decode-sweep: every body of one and two bytes, "
	               "every single \\u escape, every high surrogate before a few second "
	               "escapes, and short runs of non-ASCII bytes are read as jansson reads them");
	mismatches = 0;
	for (unsigned x = 0; x < 256; x++) {
		b[0] = (char)x;
		agree(b, 1, NULL);
		for (unsigned y = 0; y < 256; y++) {
			b[1] = (char)y;
			agree(b, 2, NULL);
		}
	}
	for (unsigned u = 0; u <= 0xffff; u++) {
		g_snprintf(b, sizeof b, "\\u%04x", u);
		agree(b, 6, NULL);
	}
	for (unsigned hi = 0xd800; hi <= 0xdbff; hi++) {
		static const unsigned second[] = { 0xdc00, 0xdfff, 0xdbff, 0xd800, 0xe000,
		                                   0x0041, 0x0000 };

		for (size_t k = 0; k < G_N_ELEMENTS(second); k++) {
			g_snprintf(b, sizeof b, "\\u%04x\\u%04x", hi, second[k]);
			agree(b, 12, NULL);
		}
	}
	/* Three-byte runs around the multibyte leads and continuation range. */
	for (unsigned x = 0xc0; x <= 0xff; x++) {
		b[0] = (char)x;
		for (unsigned y = 0x70; y <= 0xcf; y++) {
			b[1] = (char)y;
			for (unsigned z = 0x70; z <= 0xcf; z++) {
				b[2] = (char)z;
				agree(b, 3, NULL);
			}
		}
	}
	/* Four-byte sequences: the edges of each continuation byte. */
	for (unsigned x = 0xf0; x <= 0xf8; x++) {
		static const unsigned edge[] = { 0x7f, 0x80, 0x8f, 0x90, 0xbf, 0xc0 };

		b[0] = (char)x;
		for (size_t i = 0; i < G_N_ELEMENTS(edge); i++)
			for (size_t j = 0; j < G_N_ELEMENTS(edge); j++)
				for (size_t k = 0; k < G_N_ELEMENTS(edge); k++) {
					b[1] = (char)edge[i];
					b[2] = (char)edge[j];
					b[3] = (char)edge[k];
					agree(b, 4, NULL);
				}
	}
	if (mismatches > 0)
		g_test_message("%u bodies read differently", mismatches);
}

#define CMPL_CHUNK(text, fin) \
	"{\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1,\"model\":\"m\"," \
	"\"choices\":[{\"index\":0,\"text\":\"" text "\",\"logprobs\":null," \
	"\"finish_reason\":" fin ",\"stop_reason\":null}]}"
#define CHAT_CHUNK(content) \
	"{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\"," \
	"\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" content "\"},\"logprobs\":null," \
	"\"finish_reason\":null}]}"

/* Match payload against s; on a match text must have grown by want. */
static void
assert_match(const struct nw_chunk_shape *s, const char *payload, const char *want)
{
	GString *text = g_string_new("so far");
	bool matched = nw_chunk_shape_match(s, payload, strlen(payload), text, NULL);

	if (want == NULL) {
		if (matched)
			g_test_message("matched: %s", payload);
		g_assert_false(matched);
		g_assert_cmpstr(text->str, ==, "so far");
	} else {
		char *whole = g_strconcat("so far", want, NULL);

		if (!matched)
			g_test_message("no match: %s", payload);
		g_assert_true(matched);
		g_assert_cmpstr(text->str, ==, whole);
		g_free(whole);
	}
	g_string_free(text, TRUE);
}

static bool
learn(struct nw_chunk_shape *s, const char *payload, const char *key)
{
	return nw_chunk_shape_learn(s, payload, strlen(payload), key, NULL);
}

/* The learnt bytes before the text's body (up to its opening quote). */
static char *
head_of(const struct nw_chunk_shape *s)
{
	return g_strndup(s->bytes->str, s->hole[0].at);
}

/* The learnt bytes from the text's closing quote to the end. */
static const char *
tail_of(const struct nw_chunk_shape *s)
{
	return s->bytes->str + s->hole[0].at + s->hole[0].len;
}

static void
test_completions(void)
{
	const char *learnt = CMPL_CHUNK(" the", "null");
	struct nw_chunk_shape s;
	GString *short_one;

	g_test_summary("/serve/chunk-shape/completions: a vLLM completions chunk is learnt "
	               "around its text; a chunk differing only in its text matches and its "
	               "text is decoded, anything else does not match");
	nw_chunk_shape_init(&s);
	g_assert_true(learn(&s, learnt, "text"));
	g_assert_true(s.known);
	assert_match(&s, learnt, " the");
	assert_match(&s, CMPL_CHUNK(" whale\\\"s \\u00e9", "null"), " whale\"s \xc3\xa9");
	assert_match(&s, CMPL_CHUNK("", "null"), "");
	assert_match(&s, CMPL_CHUNK(" the", "\"length\""), NULL);
	assert_match(&s, CMPL_CHUNK("a\",\"x\":\"b", "null"), NULL);
	assert_match(&s, CMPL_CHUNK("bad \\x escape", "null"), NULL);
	assert_match(&s, CMPL_CHUNK("ends in \\", "null"), NULL);
	assert_match(&s, "{\"id\":\"cmpl-2\",\"object\":\"text_completion\",\"created\":1,"
	             "\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":\" the\","
	             "\"logprobs\":null,\"finish_reason\":null,\"stop_reason\":null}]}", NULL);
	/* The same length as the learnt chunk, differing in the tail alone. */
	assert_match(&s, "{\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1,"
	             "\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":\" the\","
	             "\"logprobs\":null,\"finish_reason\":null,\"stop_reason\":1234}]}", NULL);
	assert_match(&s, "{\"id\":\"cmpl-1\"}", NULL);
	assert_match(&s, "", NULL);

	/* Head and the tail without its first quote: it starts with the head
	 * and ends with the tail (sharing the quote), but is one byte short. */
	short_one = g_string_new(NULL);
	g_string_append_len(short_one, s.bytes->str, (gssize)s.hole[0].at);
	g_string_append(short_one, tail_of(&s) + 1);
	assert_match(&s, short_one->str, NULL);
	g_string_free(short_one, TRUE);
	nw_chunk_shape_clear(&s);
}

static void
test_chat(void)
{
	struct nw_chunk_shape s;

	g_test_summary("/serve/chunk-shape/chat: a vLLM chat chunk is learnt around its delta "
	               "content and later content chunks match");
	nw_chunk_shape_init(&s);
	g_assert_false(learn(&s, CHAT_CHUNK(" hi"), "text"));
	g_assert_true(learn(&s, CHAT_CHUNK(" hi"), "content"));
	assert_match(&s, CHAT_CHUNK(" there\\n"), " there\n");
	assert_match(&s, CHAT_CHUNK("\\ud83d\\ude00"), "\xf0\x9f\x98\x80");
	assert_match(&s, CHAT_CHUNK("\\ud83d"), NULL);
	assert_match(&s, CMPL_CHUNK(" hi", "null"), NULL);
	nw_chunk_shape_clear(&s);
}

static const char *const both_reasons[] = { "finish_reason", "stop_reason", NULL };

/* Match payload against s learnt with reasons: text must have grown by
 * want and the reasons set must be those in set_want ("key=value" each,
 * NULL-ended; NULL: none); want NULL means no match. */
static void
assert_match_reasons(const struct nw_chunk_shape *s, const char *payload, const char *want,
                     const char *const *set_want)
{
	GString *text = g_string_new(NULL);
	struct nw_chunk_match set = { .n = 99 };
	bool matched = nw_chunk_shape_match(s, payload, strlen(payload), text, &set);
	unsigned n = 0;

	if (matched != (want != NULL))
		g_test_message("%s: %s", matched ? "matched" : "no match", payload);
	g_assert_true(matched == (want != NULL));
	if (want == NULL) {
		g_assert_cmpuint(text->len, ==, 0);
		g_string_free(text, TRUE);
		return;
	}
	g_assert_cmpstr(text->str, ==, want);
	while (set_want != NULL && set_want[n] != NULL)
		n++;
	g_assert_cmpuint(set.n, ==, n);
	for (unsigned i = 0; i < n; i++) {
		char *got = g_strdup_printf("%s=%.*s", set.set[i].key, (int)set.set[i].len,
		                            set.set[i].body);

		g_assert_cmpstr(got, ==, set_want[i]);
		g_free(got);
	}
	g_string_free(text, TRUE);
}

static void
test_reasons(void)
{
	static const char *const length[] = { "finish_reason=length", NULL };
	static const char *const stop_both[] = { "finish_reason=stop", "stop_reason=</s>", NULL };
	static const char *const finish_only[] = { "finish_reason", NULL };
	static const char *const refused[] = {
		/* a reason that is not null when learnt */
		CMPL_CHUNK("a", "\"length\""),
		/* a reason key twice */
		"{\"finish_reason\":null,\"choices\":[{\"index\":0,\"text\":\"a\","
		"\"finish_reason\":null,\"stop_reason\":null}]}",
		/* a reason key missing */
		"{\"choices\":[{\"index\":0,\"text\":\"a\",\"finish_reason\":null}]}",
		/* a reason key only as a value or inside a string */
		"{\"x\":\"finish_reason\",\"choices\":[{\"text\":\"a\",\"stop_reason\":null}]}",
		NULL
	};
	struct nw_chunk_shape s;
	const char *learnt = CMPL_CHUNK(" the", "null");

	g_test_summary("/serve/chunk-shape/reasons: learnt with its null finish and stop "
	               "reasons open, a shape matches the last token chunk, which sets them "
	               "(a string or null; anything else, or a bad string, does not match), "
	               "and text that imitates the layout stays text");
	nw_chunk_shape_init(&s);
	g_assert_true(nw_chunk_shape_learn(&s, learnt, strlen(learnt), "text", both_reasons));
	g_assert_cmpuint(s.holes, ==, 3);
	assert_match_reasons(&s, learnt, " the", NULL);
	assert_match_reasons(&s, CMPL_CHUNK(" ice", "\"length\""), " ice", length);
	assert_match_reasons(&s, CMPL_CHUNK("", "\"length\""), "", length);
	assert_match_reasons(&s, "{\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1,"
	                     "\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":\".\","
	                     "\"logprobs\":null,\"finish_reason\":\"stop\",\"stop_reason\":\"</s>\"}]}",
	                     ".", stop_both);
	/* A stop reason that is a token id, an object, a bad string: parsed whole. */
	assert_match_reasons(&s, "{\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1,"
	                     "\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":\".\","
	                     "\"logprobs\":null,\"finish_reason\":\"stop\",\"stop_reason\":2}]}",
	                     NULL, NULL);
	assert_match_reasons(&s, CMPL_CHUNK(".", "{}"), NULL, NULL);
	assert_match_reasons(&s, CMPL_CHUNK(".", "\"bad \\x\""), NULL, NULL);
	assert_match_reasons(&s, CMPL_CHUNK(".", "\"\xff\""), NULL, NULL);
	assert_match_reasons(&s, CMPL_CHUNK(".", "\"open"), NULL, NULL);
	assert_match_reasons(&s, CMPL_CHUNK(".", "nul"), NULL, NULL);
	/* Text that spells the layout, escaped, is text; unescaped, no match. */
	assert_match_reasons(&s, CMPL_CHUNK("a\\\",\\\"finish_reason\\\":\\\"x", "null"),
	                     "a\",\"finish_reason\":\"x", NULL);
	assert_match_reasons(&s, CMPL_CHUNK("a\",\"finish_reason\":\"x", "null"), NULL, NULL);
	assert_match_reasons(&s, CMPL_CHUNK("bad \\x", "\"length\""), NULL, NULL);
	/* The relay's shape (no reasons) still refuses the last chunk. */
	g_assert_true(nw_chunk_shape_learn(&s, learnt, strlen(learnt), "text", NULL));
	assert_match_reasons(&s, CMPL_CHUNK(" ice", "\"length\""), NULL, NULL);
	/* Chat, with its finish reason alone. */
	g_assert_true(nw_chunk_shape_learn(&s, CHAT_CHUNK("x"), strlen(CHAT_CHUNK("x")), "content",
	                                   finish_only));
	assert_match_reasons(&s, "{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,"
	                     "\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"!\"},"
	                     "\"logprobs\":null,\"finish_reason\":\"stop\"}]}", "!",
	                     (const char *const[]){ "finish_reason=stop", NULL });
	for (size_t i = 0; refused[i] != NULL; i++) {
		if (nw_chunk_shape_learn(&s, refused[i], strlen(refused[i]), "text", both_reasons))
			g_test_message("learnt: %s", refused[i]);
		g_assert_false(s.known);
	}
	nw_chunk_shape_clear(&s);
}

static void
test_learn_refuses(void)
{
	static const char *const refused[] = {
		/* no such key */
		"{\"choices\":[{\"index\":0,\"content\":\"a\"}]}",
		/* twice */
		"{\"text\":\"a\",\"choices\":[{\"index\":0,\"text\":\"b\"}]}",
		/* not a string */
		"{\"choices\":[{\"index\":0,\"text\":null}]}",
		"{\"choices\":[{\"index\":0,\"text\":5}]}",
		"{\"text\":{\"text\":\"a\"}}",
		"{\"text\":\"a\",\"choices\":[{\"text\":null}]}",
		/* only as a value */
		"{\"note\":\"text\",\"choices\":[]}",
		/* only inside another string */
		"{\"x\":\"\\\"text\\\":\\\"y\\\"\"}",
		/* only as a longer key */
		"{\"texts\":\"a\"}",
		NULL
	};
	struct nw_chunk_shape s;

	g_test_summary("/serve/chunk-shape/learn-refuses: learn refuses a chunk without the "
	               "key, with it twice or with a value that is not a string, and forgets "
	               "what it knew; the key's name as a value or inside a string does not count");
	nw_chunk_shape_init(&s);
	for (size_t i = 0; refused[i] != NULL; i++) {
		/* Know a shape first, so that refusing must also forget it. */
		g_assert_true(learn(&s, "{\"text\":\"a\"}", "text"));
		if (learn(&s, refused[i], "text"))
			g_test_message("learnt: %s", refused[i]);
		g_assert_false(s.known);
		assert_match(&s, "{\"text\":\"a\"}", NULL);
		assert_match(&s, refused[i], NULL);
	}

	/* The same decoys beside one real key: that key is the one learnt. */
	g_assert_true(learn(&s, "{\"note\":\"text\",\"text\":\"a\"}", "text"));
	assert_match(&s, "{\"note\":\"text\",\"text\":\"b\"}", "b");
	g_assert_true(learn(&s, "{\"x\":\"\\\"text\\\":\\\"y\\\"\",\"text\":\"a\"}", "text"));
	assert_match(&s, "{\"x\":\"\\\"text\\\":\\\"y\\\"\",\"text\":\"b\"}", "b");
	/* An escaped quote does not end a string: the key after it is real. */
	g_assert_true(learn(&s, "{\"x\":\"\\\"\",\"text\":\"a\"}", "text"));
	assert_match(&s, "{\"x\":\"\\\"\",\"text\":\"b\"}", "b");
	g_assert_true(learn(&s, "{\"x\":\"\\\\\",\"text\":\"a\"}", "text"));
	assert_match(&s, "{\"x\":\"\\\\\",\"text\":\"b\"}", "b");
	g_assert_true(learn(&s, "{\"texts\":\"a\",\"text\":\"a\"}", "text"));
	assert_match(&s, "{\"texts\":\"a\",\"text\":\"cd\"}", "cd");
	assert_match(&s, "{\"texts\":\"cd\",\"text\":\"a\"}", NULL);

	/* Whitespace around the colon is allowed and kept in the shape. */
	g_assert_true(learn(&s, "{\"text\" : \"a\" }", "text"));
	{
		char *head = head_of(&s);

		g_assert_cmpstr(head, ==, "{\"text\" : \"");
		g_free(head);
	}
	g_assert_cmpstr(tail_of(&s), ==, "\" }");
	assert_match(&s, "{\"text\" : \"zz\" }", "zz");
	assert_match(&s, "{\"text\":\"zz\"}", NULL);
	g_assert_true(learn(&s, "{\"text\"\n:\t\"a\"}", "text"));
	assert_match(&s, "{\"text\"\n:\t\"\\t\"}", "\t");
	nw_chunk_shape_clear(&s);
}

static void
test_reset_clear(void)
{
	const char *chunk = CMPL_CHUNK(" the", "null");
	struct nw_chunk_shape s;

	g_test_summary("/serve/chunk-shape/reset-clear: a new shape knows nothing, reset "
	               "forgets the learnt shape, learning again works, and clear frees it all");
	nw_chunk_shape_init(&s);
	g_assert_false(s.known);
	assert_match(&s, chunk, NULL);
	assert_match(&s, "", NULL);
	g_assert_true(learn(&s, chunk, "text"));
	assert_match(&s, chunk, " the");
	nw_chunk_shape_reset(&s);
	g_assert_false(s.known);
	assert_match(&s, chunk, NULL);
	g_assert_true(learn(&s, CHAT_CHUNK("x"), "content"));
	assert_match(&s, CHAT_CHUNK("y"), "y");
	assert_match(&s, chunk, NULL);
	nw_chunk_shape_clear(&s);
	g_assert_null(s.bytes);
	g_assert_false(s.known);

	/* Cleared without ever learning: nothing to leak either. */
	nw_chunk_shape_init(&s);
	nw_chunk_shape_clear(&s);
}

/* Which chunks may teach a shape: only those whose every other field
 * merges by replacement, so that appending the text is the whole merge. */
static void
test_shape_key(void)
{
	static const struct {
		narwhal_route route;
		const char *chunk;
		const char *key; /* NULL: not a shape */
		json_int_t choice;
	} cases[] = {
		{ NARWHAL_ROUTE_COMPLETIONS, "{\"id\":\"x\",\"choices\":[{\"index\":0,\"text\":\"a\","
		  "\"logprobs\":null,\"finish_reason\":null,\"stop_reason\":null}]}", "text", 0 },
		{ NARWHAL_ROUTE_COMPLETIONS, "{\"choices\":[{\"index\":2,\"text\":\"\"}]}", "text", 2 },
		{ NARWHAL_ROUTE_CHAT_COMPLETIONS, "{\"choices\":[{\"index\":0,\"delta\":"
		  "{\"content\":\"a\"},\"logprobs\":null,\"finish_reason\":null}]}", "content", 0 },
		/* The last chunk: its finish reason is news. */
		{ NARWHAL_ROUTE_COMPLETIONS, "{\"choices\":[{\"index\":0,\"text\":\"a\","
		  "\"finish_reason\":\"length\"}]}", NULL, 0 },
		{ NARWHAL_ROUTE_COMPLETIONS, "{\"choices\":[{\"index\":0,\"text\":\"a\","
		  "\"stop_reason\":7}]}", NULL, 0 },
		/* Logprobs lists concatenate. */
		{ NARWHAL_ROUTE_COMPLETIONS, "{\"choices\":[{\"index\":0,\"text\":\"a\","
		  "\"logprobs\":{\"tokens\":[\"a\"]}}]}", NULL, 0 },
		/* Any other choice field may concatenate (token_ids). */
		{ NARWHAL_ROUTE_COMPLETIONS, "{\"choices\":[{\"index\":0,\"text\":\"a\","
		  "\"token_ids\":[5]}]}", NULL, 0 },
		{ NARWHAL_ROUTE_COMPLETIONS, "{\"choices\":[{\"index\":0,\"text\":\"a\"},"
		  "{\"index\":1,\"text\":\"b\"}]}", NULL, 0 },
		{ NARWHAL_ROUTE_COMPLETIONS, "{\"choices\":[]}", NULL, 0 },
		{ NARWHAL_ROUTE_COMPLETIONS, "{\"choices\":[{\"index\":0,\"text\":null}]}", NULL, 0 },
		/* The other route's field. */
		{ NARWHAL_ROUTE_COMPLETIONS, "{\"choices\":[{\"index\":0,\"delta\":"
		  "{\"content\":\"a\"}}]}", NULL, 0 },
		/* A role, a tool call or reasoning next to the content. */
		{ NARWHAL_ROUTE_CHAT_COMPLETIONS, "{\"choices\":[{\"index\":0,\"delta\":"
		  "{\"role\":\"assistant\",\"content\":\"\"}}]}", NULL, 0 },
		{ NARWHAL_ROUTE_CHAT_COMPLETIONS, "{\"choices\":[{\"index\":0,\"delta\":"
		  "{\"tool_calls\":[]}}]}", NULL, 0 },
		{ NARWHAL_ROUTE_CHAT_COMPLETIONS, "{\"choices\":[{\"index\":0,\"delta\":"
		  "{\"reasoning_content\":\"a\"}}]}", NULL, 0 },
	};

	g_test_summary("/serve/chunk-shape/key: a shape is learnt only from a one-choice chunk "
	               "whose text is its only field that concatenates");
	for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
		json_t *chunk = json_loads(cases[i].chunk, 0, NULL);
		json_int_t choice = -1;
		const char *const *reasons = NULL;
		const char *key;

		g_assert_nonnull(chunk);
		key = nw_chunk_shape_key(cases[i].route, chunk, &choice, &reasons);
		g_assert_cmpstr(key, ==, cases[i].key);
		if (key != NULL)
			g_assert_cmpint(choice, ==, cases[i].choice);
		json_decref(chunk);
	}
	/* The reasons named are those the choice holds (as null). */
	{
		json_t *chunk = json_loads(CMPL_CHUNK("a", "null"), 0, NULL);
		const char *const *reasons = NULL;
		json_int_t choice;

		g_assert_cmpstr(nw_chunk_shape_key(NARWHAL_ROUTE_COMPLETIONS, chunk, &choice,
		                                   &reasons), ==, "text");
		g_assert_cmpstr(reasons[0], ==, "finish_reason");
		g_assert_cmpstr(reasons[1], ==, "stop_reason");
		g_assert_null(reasons[2]);
		json_decref(chunk);
		chunk = json_loads("{\"choices\":[{\"index\":0,\"text\":\"\"}]}", 0, NULL);
		g_assert_nonnull(nw_chunk_shape_key(NARWHAL_ROUTE_COMPLETIONS, chunk, &choice,
		                                    &reasons));
		g_assert_null(reasons[0]);
		json_decref(chunk);
		chunk = json_loads(CHAT_CHUNK("a"), 0, NULL);
		g_assert_nonnull(nw_chunk_shape_key(NARWHAL_ROUTE_CHAT_COMPLETIONS, chunk, &choice,
		                                    &reasons));
		g_assert_cmpstr(reasons[0], ==, "finish_reason");
		g_assert_null(reasons[1]);
		json_decref(chunk);
	}
}

static void
test_match_new_fields(void)
{
	static const char learnt[] = "{\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":"
	                             "{\"content\":\"a\"},\"logprobs\":null,\"finish_reason\":null}]}";
	static const char *const other[] = {
		/* logprobs, a tool call or reasoning where the plain chunk had none */
		"{\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"b\"},"
		"\"logprobs\":{\"content\":[{\"token\":\"b\",\"logprob\":-1}]},\"finish_reason\":null}]}",
		"{\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,"
		"\"function\":{\"arguments\":\"b\"}}]},\"logprobs\":null,\"finish_reason\":null}]}",
		"{\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"b\"},"
		"\"logprobs\":null,\"finish_reason\":null}]}",
		/* the shape, but invalid UTF-8 or a raw control byte in the string */
		"{\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":"
		"{\"content\":\"\xff\xfe\"},\"logprobs\":null,\"finish_reason\":null}]}",
		"{\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":"
		"{\"content\":\"\x01\"},\"logprobs\":null,\"finish_reason\":null}]}",
	};
	static const char good[] = "{\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":"
	                           "{\"content\":\"\\u00e9t\xc3\xa9\"},\"logprobs\":null,"
	                           "\"finish_reason\":null}]}";
	struct nw_chunk_shape s;

	g_test_summary("/serve/chunk-shape/issue-9-new-fields: a chunk with logprobs, a tool call "
	               "or reasoning never matches a plain text chunk's shape, and a match "
	               "checked without decoding (the relay's) still refuses invalid UTF-8");
	nw_chunk_shape_init(&s);
	g_assert_true(nw_chunk_shape_learn(&s, learnt, strlen(learnt), "content", NULL));
	for (size_t i = 0; i < G_N_ELEMENTS(other); i++) {
		g_assert_false(nw_chunk_shape_match(&s, other[i], strlen(other[i]), NULL, NULL));
		if (i >= 3) /* a full parse refuses these too */
			g_assert_null(json_loads(other[i], 0, NULL));
	}
	g_assert_true(nw_chunk_shape_match(&s, good, strlen(good), NULL, NULL));
	nw_chunk_shape_clear(&s);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/serve/chunk-shape/decode-table", test_decode_table);
	g_test_add_func("/serve/chunk-shape/decode-sweep", test_decode_sweep);
	g_test_add_func("/serve/chunk-shape/completions", test_completions);
	g_test_add_func("/serve/chunk-shape/chat", test_chat);
	g_test_add_func("/serve/chunk-shape/reasons", test_reasons);
	g_test_add_func("/serve/chunk-shape/learn-refuses", test_learn_refuses);
	g_test_add_func("/serve/chunk-shape/reset-clear", test_reset_clear);
	g_test_add_func("/serve/chunk-shape/key", test_shape_key);
	g_test_add_func("/serve/chunk-shape/issue-9-new-fields", test_match_new_fields);
	return g_test_run();
}
