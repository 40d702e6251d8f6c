/*
 * The request path's JSON reader (src/core/json-read.c, issue 15): it must
 * accept and refuse exactly what json_loadb does with the flags the
 * request path uses, give the same tree in the same key order, and the
 * same json_error_t, since request-parse.c shows its line, column and
 * text to clients. Each case states what RFC 8259 (or jansson, where it
 * is stricter or quirky) says, and jansson is checked to agree, so a case
 * cannot pass by both readers being wrong the same way.
 */
#include "build-config.h"

#include <locale.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <glib.h>
#include <jansson.h>

#include "core/json-read.h"

#define ANY JSON_DECODE_ANY
#define DUPS JSON_REJECT_DUPLICATES
#define NUL JSON_ALLOW_NUL

static char *
dump(const json_t *v)
{
	return json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
}

/* Both readers on text[0, len): the same verdict, tree or error. Returns
 * ours (the caller's to free) and its error in *err. */
static json_t *
read_both(const char *text, size_t len, size_t flags, json_error_t *err)
{
	json_error_t theirs;
	json_t *want = json_loadb(text, len, flags, &theirs);
	json_t *got = nw_json_read(text, len, flags, err);

	g_assert_true((want == NULL) == (got == NULL));
	if (got != NULL) {
		char *a = dump(want), *b = dump(got);

		g_assert_true(json_equal(want, got));
		g_assert_cmpstr(a, ==, b); /* the key order too */
		g_assert_cmpint(theirs.position, ==, err->position);
		free(a);
		free(b);
	} else {
		g_assert_cmpint(json_error_code(&theirs), ==, json_error_code(err));
		g_assert_cmpstr(theirs.text, ==, err->text);
		g_assert_cmpint(theirs.line, ==, err->line);
		g_assert_cmpint(theirs.column, ==, err->column);
		g_assert_cmpint(theirs.position, ==, err->position);
		g_assert_cmpstr(theirs.source, ==, err->source);
	}
	json_decref(want);
	return got;
}

/* ------------------------------------------------------------ accepts --- */

struct accept_case {
	const char *name;
	const char *text;
	size_t len; /* 0: strlen */
	size_t flags;
	const char *tree; /* its compact encoding */
};

#define A(name, text, flags, tree) { name, text, 0, flags, tree }
#define AN(name, text, flags, tree) { name, text, sizeof text - 1, flags, tree }

static const struct accept_case accepts[] = {
	/* RFC 8259 section 2: values, and whitespace around them */
	A("empty object", "{}", 0, "{}"),
	A("empty array", "[]", 0, "[]"),
	A("the four whitespace bytes", " \t\r\n[ \t\r\n1 \t\r\n, {\n\"a\"\r:\ttrue } ]\n\n", 0,
	  "[1,{\"a\":true}]"),
	A("literals", "[true,false,null]", 0, "[true,false,null]"),
	A("nesting", "{\"a\":[{\"b\":[[],{}]}],\"c\":{\"d\":{}}}", 0,
	  "{\"a\":[{\"b\":[[],{}]}],\"c\":{\"d\":{}}}"),
	/* section 6: numbers */
	A("integers", "[0,-0,7,-7,1234567890]", 0, "[0,0,7,-7,1234567890]"),
	A("int64 bounds", "[9223372036854775807,-9223372036854775808]", 0,
	  "[9223372036854775807,-9223372036854775808]"),
	A("a fraction makes a real", "[1.0,-0.0,0.5]", 0, "[1.0,-0.0,0.5]"),
	A("exponents make reals", "[1e2,1E2,1e+2,1e-2,0e0,-1E-0]", 0,
	  "[100.0,100.0,100.0,0.01,0.0,-1.0]"),
	A("real bounds", "[1.7976931348623157e308,2.2250738585072014e-308,5e-324]", 0,
	  "[1.7976931348623157e308,2.2250738585072014e-308,4.9406564584124654e-324]"),
	A("underflow is zero, not an error", "[1e-400,-1e-400]", 0, "[0.0,-0.0]"),
	A("long mantissas round to nearest", "[0.30000000000000004,9007199254740993,"
	  "9007199254740993.0,123456789012345678901234567890.0]", 0, NULL),
	/* section 7: strings */
	A("every short escape", "[\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"]", 0,
	  "[\"\\\"\\\\/\\b\\f\\n\\r\\t\"]"),
	A("\\u escapes, either case", "[\"\\u00e9\\u00E9\\u20ac\\u0041\"]", 0,
	  "[\"\xc3\xa9\xc3\xa9\xe2\x82\xac" "A\"]"),
	A("a surrogate pair", "[\"\\ud83d\\ude00\"]", 0, "[\"\xf0\x9f\x98\x80\"]"),
	A("raw UTF-8 of every length", "[\"a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"]", 0,
	  "[\"a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"]"),
	A("DEL and U+FFFF are plain", "[\"\x7f\xef\xbf\xbf\"]", 0, "[\"\x7f\xef\xbf\xbf\"]"),
	A("a long plain string", "[\"0123456789abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJ"
	  "KLMNOPQRSTUVWXYZ\"]", 0, "[\"0123456789abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGH"
	  "IJKLMNOPQRSTUVWXYZ\"]"),
	A("escaped keys", "{\"k\\u00e9y\":1,\"a\\nb\":2}", 0, "{\"k\xc3\xa9y\":1,\"a\\nb\":2}"),
	/* section 4: duplicate names; jansson keeps the last value where the
	 * first one stood */
	A("a repeated key: last value, first place", "{\"b\":1,\"a\":2,\"b\":3}", 0,
	  "{\"b\":3,\"a\":2}"),
	A("repeated keys in different objects", "{\"a\":{\"a\":1},\"b\":{\"a\":2}}", DUPS,
	  "{\"a\":{\"a\":1},\"b\":{\"a\":2}}"),
	/* section 2: any value at the top, with JSON_DECODE_ANY */
	A("a top-level string", " \"s\" ", ANY, "\"s\""),
	A("a top-level number", "-12.5e1", ANY, "-125.0"),
	A("a top-level literal", "null", ANY, "null"),
	/* JSON_ALLOW_NUL lets a value, never a key, hold U+0000 */
	A("U+0000 with JSON_ALLOW_NUL", "[\"a\\u0000b\"]", NUL, "[\"a\\u0000b\"]"),
	/* jansson's quirk: a NUL byte right after a number or a literal is
	 * dropped (its stream loses a pushed-back NUL) */
	AN("a NUL after a number", "[1\0,2]", 0, "[1,2]"),
	AN("a NUL after a literal", "[true\0]", 0, "[true]"),
	AN("a NUL after a top-level number", "1.5\0", ANY, "1.5"),
};

static void
test_accepts(void)
{
	for (size_t i = 0; i < G_N_ELEMENTS(accepts); i++) {
		const struct accept_case *c = &accepts[i];
		size_t len = c->len ? c->len : strlen(c->text);
		json_error_t err;
		json_t *v;

		g_test_message("accept: %s", c->name);
		v = read_both(c->text, len, c->flags, &err);
		g_assert_nonnull(v);
		if (c->tree != NULL) {
			char *text = dump(v);

			g_assert_cmpstr(text, ==, c->tree);
			free(text);
		}
		/* on success only the position is set: all of the text (but
		 * for a dropped NUL, which jansson does not count) */
		if (c->len == 0)
			g_assert_cmpint(err.position, ==, (int)len);
		g_assert_cmpstr(err.text, ==, "");
		json_decref(v);
	}
}

/* ------------------------------------------------------------ refusals --- */

struct reject_case {
	const char *name;
	const char *text;
	size_t len; /* 0: strlen */
	size_t flags;
	enum json_error_code code;
	const char *message; /* the whole text */
};

#define R(name, text, flags, code, msg) { name, text, 0, flags, json_error_##code, msg }
#define RN(name, text, flags, code, msg) { name, text, sizeof text - 1, flags, json_error_##code, msg }

static const struct reject_case rejects[] = {
	/* section 2: a JSON text is one value */
	R("empty", "", ANY, premature_end_of_input, "unexpected token near end of file"),
	R("whitespace only", " \n ", 0, premature_end_of_input,
	  "'[' or '{' expected near end of file"),
	R("a scalar at the top without JSON_DECODE_ANY", "1", 0, invalid_syntax,
	  "'[' or '{' expected near '1'"),
	R("two values", "{} {}", 0, end_of_input_expected, "end of file expected near '{'"),
	R("trailing garbage", "[1] x", 0, end_of_input_expected, "end of file expected near 'x'"),
	R("a byte order mark", "\xef\xbb\xbf{}", 0, invalid_syntax,
	  "'[' or '{' expected near '\xef\xbb\xbf'"),
	/* section 4 and 5: structure */
	R("a trailing comma in an array", "[1,]", 0, invalid_syntax, "unexpected token near ']'"),
	R("a trailing comma in an object", "{\"a\":1,}", 0, invalid_syntax,
	  "string or '}' expected near '}'"),
	R("a missing comma", "[1 2]", 0, invalid_syntax, "']' expected near '2'"),
	R("a missing colon", "{\"a\" 1}", 0, invalid_syntax, "':' expected near '1'"),
	R("an unquoted key", "{a:1}", 0, invalid_syntax, "string or '}' expected near 'a'"),
	R("a number as key", "{1:1}", 0, invalid_syntax, "string or '}' expected near '1'"),
	R("single quotes", "['a']", 0, invalid_syntax, "invalid token near '''"),
	R("an unclosed array", "[1,", 0, premature_end_of_input, "']' expected near end of file"),
	R("an unclosed object", "{\"a\":1", 0, premature_end_of_input,
	  "'}' expected near end of file"),
	R("a comment", "[1]//", 0, end_of_input_expected, "end of file expected near '/'"),
	/* section 6: numbers */
	R("a leading zero", "[01]", 0, invalid_syntax, "invalid token near '0'"),
	R("a leading zero after minus", "[-01]", 0, invalid_syntax, "invalid token near '-0'"),
	R("a point without digits", "[1.]", 0, invalid_syntax, "invalid token near '1.'"),
	R("a point first", "[.5]", 0, invalid_syntax, "invalid token near '.'"),
	R("a plus sign", "[+1]", 0, invalid_syntax, "invalid token near '+'"),
	R("an exponent without digits", "[1e]", 0, invalid_syntax, "invalid token near '1e'"),
	R("a signed exponent without digits", "[1e+]", 0, invalid_syntax,
	  "invalid token near '1e+'"),
	R("a lone minus", "[-]", 0, invalid_syntax, "invalid token near '-'"),
	R("hexadecimal", "[0x10]", 0, invalid_syntax, "']' expected near 'x'"),
	R("NaN", "[NaN]", 0, invalid_syntax, "invalid token near 'NaN'"),
	R("Infinity", "[-Infinity]", 0, invalid_syntax, "invalid token near '-'"),
	R("an integer above int64", "[9223372036854775808]", 0, numeric_overflow,
	  "too big integer near '9223372036854775808'"),
	R("an integer below int64", "[-9223372036854775809]", 0, numeric_overflow,
	  "too big negative integer near '-9223372036854775809'"),
	R("a real beyond double", "[1e309]", 0, numeric_overflow,
	  "real number overflow near '1e309'"),
	R("a negative real beyond double", "[-1.8e308]", 0, numeric_overflow,
	  "real number overflow near '-1.8e308'"),
	R("a misspelt literal", "[tru]", 0, invalid_syntax, "invalid token near 'tru'"),
	R("a literal in capitals", "[True]", 0, invalid_syntax, "invalid token near 'True'"),
	/* section 7: strings */
	R("an unclosed string", "[\"abc", 0, premature_end_of_input,
	  "premature end of input near '\"abc'"),
	R("a raw tab", "[\"a\tb\"]", 0, invalid_syntax, "control character 0x9 near '\"a'"),
	R("a raw newline", "[\"a\nb\"]", 0, invalid_syntax, "unexpected newline near '\"a'"),
	RN("a raw NUL", "[\"a\0\"]", 0, invalid_syntax, "control character 0x0 near '\"a'"),
	R("an unknown escape", "[\"\\x\"]", 0, invalid_syntax, "invalid escape near '\"\\x'"),
	R("a short \\u escape", "[\"\\u12\"]", 0, invalid_syntax,
	  "invalid escape near '\"\\u12\"'"),
	R("a lone high surrogate", "[\"\\ud800\"]", 0, invalid_syntax,
	  "invalid Unicode '\\uD800' near '\"\\ud800\"'"),
	R("a lone low surrogate", "[\"\\uDC00\"]", 0, invalid_syntax,
	  "invalid Unicode '\\uDC00' near '\"\\uDC00\"'"),
	R("a high surrogate and no low one", "[\"\\ud800\\u0041\"]", 0, invalid_syntax,
	  "invalid Unicode '\\uD800\\u0041' near '\"\\ud800\\u0041\"'"),
	R("U+0000 without JSON_ALLOW_NUL", "[\"a\\u0000\"]", 0, null_character,
	  "\\u0000 is not allowed without JSON_ALLOW_NUL near '\"a\\u0000\"'"),
	R("U+0000 in a key, even with JSON_ALLOW_NUL", "{\"a\\u0000\":1}", NUL,
	  null_byte_in_key, "NUL byte in object key not supported near '\"a\\u0000\"'"),
	/* section 8.1: UTF-8, checked where it stands */
	R("a stray continuation byte", "[\"\x80\"]", 0, invalid_utf8,
	  "unable to decode byte 0x80 near '\"'"),
	R("an overlong form", "[\"\xc0\xaf\"]", 0, invalid_utf8,
	  "unable to decode byte 0xc0 near '\"'"),
	R("an encoded surrogate", "[\"\xed\xa0\x80\"]", 0, invalid_utf8,
	  "unable to decode byte 0xed near '\"'"),
	R("beyond U+10FFFF", "[\"\xf4\x90\x80\x80\"]", 0, invalid_utf8,
	  "unable to decode byte 0xf4 near '\"'"),
	R("a cut sequence", "[\"\xe2\x82\"]", 0, invalid_utf8,
	  "unable to decode byte 0xe2 near '\"'"),
	R("not UTF-8 outside a string", "[1,\xff]", 0, invalid_utf8, "unable to decode byte 0xff"),
	R("not UTF-8 right after a number", "[-\xff]", 0, invalid_utf8,
	  "unable to decode byte 0xff near '-'"),
	/* jansson's options */
	R("a repeated key with JSON_REJECT_DUPLICATES", "{\"a\":1,\"a\":2}", DUPS, duplicate_key,
	  "duplicate object key near '\"a\"'"),
	RN("a NUL where a value should be", "[\0]", 0, premature_end_of_input,
	   "invalid token near end of file"),
	RN("two NULs after a number", "[1\0\0]", 0, premature_end_of_input,
	   "']' expected near end of file"),
	/* dropped NUL bytes count in neither column nor position */
	RN("many dropped NULs, then a fault", "[1\0,2\0,3\0,4\0,5\0,6\0,7\0,8\0,9\0,true\0,"
	   "false\0,null\0,1\0,2\0,3\0,4\0,5\0,6\0,7\0,8\0,x]", 0, invalid_syntax,
	   "invalid token near 'x'"),
};

static void
test_rejects(void)
{
	for (size_t i = 0; i < G_N_ELEMENTS(rejects); i++) {
		const struct reject_case *c = &rejects[i];
		json_error_t err;

		g_test_message("reject: %s", c->name);
		g_assert_null(read_both(c->text, c->len ? c->len : strlen(c->text), c->flags, &err));
		g_assert_cmpint(json_error_code(&err), ==, c->code);
		g_assert_cmpstr(err.text, ==, c->message);
		g_assert_cmpstr(err.source, ==, "<buffer>");
	}
}

/* The position shown to clients (request-parse.c): line, column in
 * characters, byte offset, all after the token at fault. */
static void
test_positions(void)
{
	static const struct {
		const char *text;
		int line, column, position;
	} cases[] = {
		{ "{\"model\": \"m\", \"prompt\": ]", 1, 26, 26 },
		{ "{\n  \"model\": tru\n}", 2, 14, 16 },
		{ "[\"\xc3\xa9\xc3\xa9\", x]", 1, 8, 10 },   /* columns count characters */
		{ "[\n\"a\nb\"]", 2, 2, 4 },                 /* at the newline, before it */
		{ "[\"\\u12", 1, 6, 6 },                     /* the end, not "premature" */
	};

	for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
		json_error_t err;

		g_assert_null(read_both(cases[i].text, strlen(cases[i].text), 0, &err));
		g_assert_cmpint(err.line, ==, cases[i].line);
		g_assert_cmpint(err.column, ==, cases[i].column);
		g_assert_cmpint(err.position, ==, cases[i].position);
	}
}

/* JSON_PARSER_MAX_DEPTH is 2048 values deep, a scalar counting as one. */
static void
test_depth(void)
{
	static const struct {
		int arrays;
		bool scalar, ok;
	} cases[] = {
		{ 2048, false, true },
		{ 2047, true, true },
		{ 2048, true, false },
		{ 2049, false, false },
	};

	for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
		GString *s = g_string_new(NULL);
		json_error_t err;
		json_t *v;

		for (int k = 0; k < cases[i].arrays; k++)
			g_string_append_c(s, '[');
		if (cases[i].scalar)
			g_string_append_c(s, '1');
		for (int k = 0; k < cases[i].arrays; k++)
			g_string_append_c(s, ']');
		v = read_both(s->str, s->len, 0, &err);
		g_assert_true((v != NULL) == cases[i].ok);
		if (v == NULL)
			g_assert_cmpint(json_error_code(&err), ==, json_error_stack_overflow);
		json_decref(v);
		g_string_free(s, TRUE);
	}
}

/* Only len bytes are read: no NUL terminator is needed or looked for. */
static void
test_length_bound(void)
{
	json_error_t err;
	json_t *v = read_both("[1]garbage", 3, 0, &err);

	g_assert_nonnull(v);
	json_decref(v);
	g_assert_null(read_both("[\"abc\"]", 5, 0, &err));
	g_assert_cmpint(json_error_code(&err), ==, json_error_premature_end_of_input);
}

/* Reals read to the very same double as strtod gives: the reader takes a
 * shortcut for short mantissas and small exponents (exact, one rounding)
 * and calls strtod otherwise; both sides of it, on numbers printed from
 * random doubles and on random short decimals. */
static void
test_reals(void)
{
	GRand *rand = g_rand_new_with_seed(15);

	for (int i = 0; i < 20000; i++) {
		char text[64];
		json_error_t err;
		json_t *v;
		double want;

		if (i % 2 == 0) {
			uint64_t bits = ((uint64_t)g_rand_int(rand) << 32) | g_rand_int(rand);
			double d;

			memcpy(&d, &bits, sizeof d);
			if (!isfinite(d))
				continue;
			g_ascii_formatd(text, sizeof text, i % 4 ? "%.17g" : "%.15g", d);
		} else {
			/* up to 17 digits, a point somewhere, an exponent near 0 */
			int digits = g_rand_int_range(rand, 1, 18), point = g_rand_int_range(rand, 1, digits + 1);
			GString *s = g_string_new(g_rand_boolean(rand) ? "-" : "");

			for (int k = 0; k < digits; k++) {
				if (k == point)
					g_string_append_c(s, '.');
				g_string_append_c(s, (char)('0' + (k == 0 ? g_rand_int_range(rand, 1, 10) :
				                                    g_rand_int_range(rand, 0, 10))));
			}
			if (g_rand_boolean(rand))
				g_string_append_printf(s, "e%d", g_rand_int_range(rand, -30, 31));
			g_strlcpy(text, s->str, sizeof text);
			g_string_free(s, TRUE);
		}
		if (!strpbrk(text, ".e"))
			g_strlcat(text, ".0", sizeof text); /* a real, not an integer */
		want = g_ascii_strtod(text, NULL);
		v = read_both(text, strlen(text), ANY, &err);
		g_assert_nonnull(v);
		g_assert_true(json_is_real(v));
		if (memcmp(&want, &(double){ json_real_value(v) }, sizeof want) != 0)
			g_error("%s: read %.17g, strtod %.17g", text, json_real_value(v), want);
		json_decref(v);
	}
	g_rand_free(rand);
}

/* A decimal comma in the locale changes nothing (jansson converts for its
 * locale; ours never looks at it). */
static void
test_locale(void)
{
	static const char *const names[] = { "de_DE.UTF-8", "de_DE.utf8", "fr_FR.UTF-8", "C.UTF-8" };
	char *old = g_strdup(setlocale(LC_NUMERIC, NULL));
	const char *set = NULL;
	json_error_t err;
	json_t *v;

	for (size_t i = 0; i < G_N_ELEMENTS(names) && set == NULL; i++)
		set = setlocale(LC_NUMERIC, names[i]);
	v = nw_json_read("[0.5,1e-3]", 10, 0, &err);
	setlocale(LC_NUMERIC, old);
	g_free(old);
	g_assert_nonnull(v);
	g_assert_cmpfloat(json_real_value(json_array_get(v, 0)), ==, 0.5);
	g_assert_cmpfloat(json_real_value(json_array_get(v, 1)), ==, 1e-3);
	json_decref(v);
	if (set == NULL)
		g_test_message("no locale with a decimal comma here: checked in the C locale");
}

/* jansson's answers to a NULL text or a flag it does not take here. */
static void
test_arguments(void)
{
	json_error_t err;

	g_assert_null(nw_json_read(NULL, 0, 0, &err));
	g_assert_cmpint(json_error_code(&err), ==, json_error_invalid_argument);
	g_assert_cmpstr(err.text, ==, "wrong arguments");
	g_assert_null(nw_json_read("[]", 2, JSON_DISABLE_EOF_CHECK, &err));
	g_assert_cmpint(json_error_code(&err), ==, json_error_invalid_argument);
	/* no error wanted */
	g_assert_null(nw_json_read("[", 1, 0, NULL));
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/json-read/accepts", test_accepts);
	g_test_add_func("/json-read/rejects", test_rejects);
	g_test_add_func("/json-read/positions", test_positions);
	g_test_add_func("/json-read/depth", test_depth);
	g_test_add_func("/json-read/length-bound", test_length_bound);
	g_test_add_func("/json-read/reals", test_reals);
	g_test_add_func("/json-read/locale", test_locale);
	g_test_add_func("/json-read/arguments", test_arguments);
	return g_test_run();
}
