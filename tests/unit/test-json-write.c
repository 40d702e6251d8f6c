/*
 * The request path's JSON writer (src/core/json-write.c, issue 15): the
 * bytes of json_dumps(v, JSON_COMPACT), since engines and clients get
 * them in place of jansson's. Each case states the expected text and
 * json_dumps is checked to give it too, so a case cannot pass by both
 * writers being wrong the same way.
 */
#include "build-config.h"

#include <math.h>
#include <stdint.h>
#include <stdbool.h>
#include <string.h>

#include <glib.h>
#include <jansson.h>

#include "core/json-write.h"

#define COMPACT JSON_COMPACT
#define ANY (JSON_COMPACT | JSON_ENCODE_ANY)

/* Ours and jansson's for v: both want (NULL: both refuse). Ours appends,
 * so it writes after a prefix, which a refusal must leave alone. */
static void
expect(const json_t *v, size_t flags, const char *want)
{
	char *theirs = json_dumps(v, flags);
	GString *out = g_string_new("pre");
	size_t len = 99;
	char *dumped;
	int rc = nw_json_write(v, out, flags);

	g_assert_cmpstr(theirs, ==, want);
	if (want == NULL) {
		g_assert_cmpint(rc, ==, -1);
		g_assert_cmpstr(out->str, ==, "pre");
	} else {
		g_assert_cmpint(rc, ==, 0);
		g_assert_cmpstr(out->str + 3, ==, want);
		g_assert_cmpuint(out->len, ==, 3 + strlen(want));
	}
	dumped = nw_json_dumps(v, flags, &len);
	g_assert_cmpstr(dumped, ==, want);
	g_assert_cmpuint(len, ==, want ? strlen(want) : 0);
	free(dumped);
	free(theirs);
	g_string_free(out, TRUE);
}

static void
expect_new(json_t *v, size_t flags, const char *want)
{
	expect(v, flags, want);
	json_decref(v);
}

/* RFC 8259 section 7 allows any escape; jansson (so ours) escapes only
 * what must be: '"', '\\' and the control characters, the usual five by
 * name and the others as \u00XX in upper case. Not '/', not DEL, not
 * non-ASCII. */
static void
test_strings(void)
{
	static const struct {
		const char *s;
		size_t len;
		const char *want;
	} cases[] = {
		{ "", 0, "\"\"" },
		{ "plain text, long enough for a run of words", 0,
		  "\"plain text, long enough for a run of words\"" },
		{ "\"\\", 0, "\"\\\"\\\\\"" },
		{ "\b\f\n\r\t", 0, "\"\\b\\f\\n\\r\\t\"" },
		{ "\x01\x1f\x0b", 0, "\"\\u0001\\u001F\\u000B\"" },
		{ "a\0b", 3, "\"a\\u0000b\"" },
		{ "/\x7f", 0, "\"/\x7f\"" },
		{ "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 0,
		  "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"" },
		{ "12345678\n12345678\"", 0, "\"12345678\\n12345678\\\"\"" },
	};

	for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
		size_t len = cases[i].len ? cases[i].len : strlen(cases[i].s);
		GString *out = g_string_new(NULL);

		expect_new(json_stringn(cases[i].s, len), ANY, cases[i].want);
		/* the string writer alone, as assemble.c calls it */
		g_assert_cmpint(nw_json_write_string(out, cases[i].s, len), ==, 0);
		g_assert_cmpstr(out->str, ==, cases[i].want);
		g_string_free(out, TRUE);
	}
}

/* jansson 2.14's jsonp_dtostr: "%.17g", ".0" when neither a point nor an
 * exponent shows, the exponent without '+' or leading zeros. */
static void
test_numbers(void)
{
	static const struct {
		double d;
		const char *want;
	} reals[] = {
		{ 0.0, "0.0" },
		{ -0.0, "-0.0" },
		{ 1.0, "1.0" },
		{ 100.0, "100.0" },
		{ 1.5, "1.5" },
		{ 0.1, "0.10000000000000001" },
		{ 0.7, "0.69999999999999996" },
		{ 1e22, "1e22" },
		{ 1e17, "1e17" },
		{ 123456789012345680000.0, "1.2345678901234568e20" },
		{ 1e-5, "1.0000000000000001e-5" },
		{ 1e-7, "9.9999999999999995e-8" },
		{ 1e100, "1e100" },
		{ -1e-100, "-1e-100" },
		{ 5e-324, "4.9406564584124654e-324" },
		{ 1.7976931348623157e308, "1.7976931348623157e308" },
	};
	static const struct {
		json_int_t i;
		const char *want;
	} ints[] = {
		{ 0, "0" },
		{ -1, "-1" },
		{ 1234567890, "1234567890" },
		{ INT64_MAX, "9223372036854775807" },
		{ INT64_MIN, "-9223372036854775808" },
	};

	for (size_t i = 0; i < G_N_ELEMENTS(reals); i++)
		expect_new(json_real(reals[i].d), ANY, reals[i].want);
	for (size_t i = 0; i < G_N_ELEMENTS(ints); i++)
		expect_new(json_integer(ints[i].i), ANY, ints[i].want);
}

/* One real as json_dumps writes it. */
static void
expect_real_as_jansson(double d)
{
	json_t *v = json_real(d);
	char *want = json_dumps(v, ANY);

	expect(v, ANY, want);
	free(want);
	json_decref(v);
}

/* Reals from 1 to 2^53, which the writer formats without printf: the
 * same bytes as jansson's "%.17g" for every binary exponent, for integers,
 * on both sides of each power of ten (where the digit count changes), and
 * for values whose 18th significant digit is an exact 5 (a tie, rounded
 * to even). */
static void
test_reals_without_printf(void)
{
	GRand *rand = g_rand_new_with_seed(1517);

	for (int exp2 = 0; exp2 < 53; exp2++) {
		for (int i = 0; i < 400; i++) {
			double d = ldexp(1.0 + g_rand_double(rand), exp2);

			if (d < 9007199254740992.0) {
				expect_real_as_jansson(d);
				expect_real_as_jansson(-d);
				expect_real_as_jansson(floor(d));
			}
		}
	}
	for (int k = 0; k <= 15; k++) {
		double p = pow(10, k), below = p, above = p;

		for (int i = 0; i < 8; i++) {
			below = nextafter(below, 0);
			above = nextafter(above, INFINITY);
			if (below >= 1.0)
				expect_real_as_jansson(below);
			expect_real_as_jansson(above);
		}
		expect_real_as_jansson(p);
	}
	/* 13 integer digits and 5 fraction digits ending in 5: 18 digits */
	expect_real_as_jansson(1234567890123.03125);
	expect_real_as_jansson(1234567890123.09375);
	expect_real_as_jansson(1234567890122.03125);
	for (int i = 0; i < 4000; i++) {
		/* an integer part of up to 13 digits and a fraction of a few bits */
		uint64_t ipart = (uint64_t)(g_rand_int(rand) % 100000000u) * 100000u +
		                 g_rand_int(rand) % 100000u;
		int bits = g_rand_int_range(rand, 1, 12);
		double d = (double)ipart + ldexp((double)g_rand_int_range(rand, 0, 1 << bits), -bits);

		if (d >= 1.0)
			expect_real_as_jansson(d);
	}
	expect_real_as_jansson(1796275447.066);
	expect_real_as_jansson(9007199254740991.0);
	expect_real_as_jansson(9007199254740992.0); /* printf's path from here */
	g_rand_free(rand);
}

/* Containers, compact, keys in the object's order (a replaced key keeps
 * its place). */
static void
test_containers(void)
{
	json_t *o = json_object();

	expect_new(json_array(), COMPACT, "[]");
	expect_new(json_object(), COMPACT, "{}");
	expect_new(json_pack("[n,b,b,i,f,s,[],{}]", 1, 0, 7, 2.5, "x"), COMPACT,
	           "[null,true,false,7,2.5,\"x\",[],{}]");
	json_object_set_new(o, "z", json_integer(1));
	json_object_set_new(o, "a", json_pack("{s:[i,{s:s}]}", "k", 2, "\"q\"", "v"));
	json_object_set_new(o, "z", json_integer(3));
	json_object_set_new(o, "k\xc3\xa9y\n", json_null());
	expect_new(o, COMPACT, "{\"z\":3,\"a\":{\"k\":[2,{\"\\\"q\\\"\":\"v\"}]},\"k\xc3\xa9y\\n\":null}");
}

/* Where json_dumps gives NULL, ours refuses and leaves the output alone. */
static void
test_refusals(void)
{
	json_t *a = json_array(), *b = json_array(), *o;

	/* a scalar without JSON_ENCODE_ANY, and no value at all */
	expect_new(json_integer(1), COMPACT, NULL);
	expect_new(json_string("s"), COMPACT, NULL);
	expect(NULL, ANY, NULL);
	/* a string that is not UTF-8, however deep */
	expect_new(json_pack("[{s:[o]}]", "k", json_stringn_nocheck("a\xff", 2)), COMPACT, NULL);
	expect_new(json_stringn_nocheck("\xc0\xaf", 2), ANY, NULL);
	expect_new(json_stringn_nocheck("\xed\xa0\x80", 3), ANY, NULL);
	expect_new(json_stringn_nocheck("\xe2\x82", 2), ANY, NULL);
	/* a container inside itself */
	json_array_append_new(a, json_integer(1));
	json_array_append(a, b);
	json_array_append(b, a);
	expect(a, COMPACT, NULL);
	json_array_remove(b, 0); /* break the cycle to free it */
	expect(a, COMPACT, "[1,[]]");
	json_decref(a);
	json_decref(b);
	/* a key that is not UTF-8: refused, where json_dumps writes the key
	 * without its closing quote (so it is not the oracle here) */
	o = json_object();
	json_object_setn_new_nocheck(o, "k\xff", 2, json_null());
	{
		GString *out = g_string_new("pre");

		g_assert_cmpint(nw_json_write(o, out, COMPACT), ==, -1);
		g_assert_cmpstr(out->str, ==, "pre");
		g_string_free(out, TRUE);
	}
	json_decref(o);
	{
		GString *out = g_string_new("pre");

		g_assert_cmpint(nw_json_write_string(out, "\x80", 1), ==, -1);
		g_assert_cmpstr(out->str, ==, "pre");
		g_string_free(out, TRUE);
	}
}

/* Deeper than the writer's inline stack of containers: written whole,
 * and a cycle from the bottom to the top is still refused. */
static void
test_deep(void)
{
	json_t *top = json_array(), *bottom = top;
	GString *want = g_string_new(NULL), *close = g_string_new(NULL);

	for (int i = 0; i < 100; i++) {
		json_t *next = i % 2 ? json_array() : json_object();

		if (json_is_array(bottom))
			json_array_append_new(bottom, next);
		else
			json_object_set_new(bottom, "k", next);
		bottom = next;
	}
	/* the expected text, from the same chain */
	for (json_t *v = top; v != bottom;) {
		bool array = json_is_array(v);

		g_string_append(want, array ? "[" : "{\"k\":");
		g_string_prepend_c(close, array ? ']' : '}');
		v = array ? json_array_get(v, 0) : json_object_get(v, "k");
	}
	g_string_append(want, json_is_array(bottom) ? "[]" : "{}");
	g_string_append(want, close->str);
	expect(top, COMPACT, want->str);
	json_array_append(bottom, top);
	expect(top, COMPACT, NULL);
	json_array_remove(bottom, 0);
	json_decref(top);
	g_string_free(want, TRUE);
	g_string_free(close, TRUE);
}

/* Random trees (a fixed seed), valid text each: ours equals json_dumps. */
static json_t *
random_tree(GRand *rand, int depth)
{
	static const char *const words[] = { "", "a", "text", "caf\xc3\xa9", "q\"uote",
		                             "tab\there", "\x01", "\xf0\x9f\x98\x80", "slash/" };
	int kind = g_rand_int_range(rand, 0, depth > 6 ? 6 : 8);
	json_t *v;

	switch (kind) {
	case 0: return json_null();
	case 1: return json_boolean(g_rand_boolean(rand));
	case 2: return json_integer((json_int_t)g_rand_int(rand) - G_MAXINT32);
	case 3: return json_real(g_rand_double_range(rand, -1e6, 1e6) *
	                         pow(10, g_rand_int_range(rand, -300, 300)));
	case 4:
	case 5: return json_string(words[g_rand_int_range(rand, 0, G_N_ELEMENTS(words))]);
	case 6:
		v = json_array();
		for (int n = g_rand_int_range(rand, 0, 5); n > 0; n--)
			json_array_append_new(v, random_tree(rand, depth + 1));
		return v;
	default:
		v = json_object();
		for (int n = g_rand_int_range(rand, 0, 5); n > 0; n--)
			json_object_set_new(v, words[g_rand_int_range(rand, 0, G_N_ELEMENTS(words))],
			                    random_tree(rand, depth + 1));
		return v;
	}
}

static void
test_random_trees(void)
{
	GRand *rand = g_rand_new_with_seed(15);

	for (int i = 0; i < 3000; i++) {
		json_t *v = random_tree(rand, 0);
		char *want = json_dumps(v, ANY);

		g_assert_nonnull(want);
		expect(v, ANY, want);
		free(want);
		json_decref(v);
	}
	g_rand_free(rand);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/json-write/strings", test_strings);
	g_test_add_func("/json-write/numbers", test_numbers);
	g_test_add_func("/json-write/reals-without-printf", test_reals_without_printf);
	g_test_add_func("/json-write/containers", test_containers);
	g_test_add_func("/json-write/refusals", test_refusals);
	g_test_add_func("/json-write/deep", test_deep);
	g_test_add_func("/json-write/random-trees", test_random_trees);
	return g_test_run();
}
