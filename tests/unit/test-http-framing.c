/*
 * The front door's framing verdict (src/net/http-framing.c), field by
 * field: issue 9, "The front door": Content-Length with Transfer-Encoding,
 * conflicting lengths (as fields and as a list), and codings other than
 * chunked are refused; RFC 9112 section 6 for the rest.
 */
#include "build-config.h"

#include <string.h>

#include <glib.h>

#include "net/http-framing.h"

struct framing_case {
	const char *fields; /* "Name: value" lines, separated by '|' */
	nw_framing_verdict verdict;
	uint64_t length;
};

static const struct framing_case cases[] = {
	{ "", NW_FRAMING_NONE, 0 },
	{ "Host: x|Content-Type: application/json", NW_FRAMING_NONE, 0 },
	{ "Content-Length: 0", NW_FRAMING_NONE, 0 },
	{ "Content-Length: 42", NW_FRAMING_LENGTH, 42 },
	{ "content-length:  42 ", NW_FRAMING_LENGTH, 42 },
	{ "Content-Length: 42|Content-Length: 42", NW_FRAMING_LENGTH, 42 },
	{ "Content-Length: 42, 42", NW_FRAMING_LENGTH, 42 },
	{ "Content-Length: 18446744073709551615", NW_FRAMING_LENGTH, UINT64_MAX },
	{ "Transfer-Encoding: chunked", NW_FRAMING_CHUNKED, 0 },
	{ "Transfer-Encoding: CHUNKED", NW_FRAMING_CHUNKED, 0 },
	{ "Transfer-Encoding: |Transfer-Encoding: chunked", NW_FRAMING_CHUNKED, 0 },
	{ "Transfer-Encoding: ,chunked,", NW_FRAMING_CHUNKED, 0 },
	/* issue 9: both framings at once (request smuggling) */
	{ "Content-Length: 5|Transfer-Encoding: chunked", NW_FRAMING_BOTH, 0 },
	{ "Transfer-Encoding: chunked|Content-Length: 0", NW_FRAMING_BOTH, 0 },
	{ "Transfer-Encoding: gzip|Content-Length: 5", NW_FRAMING_BOTH, 0 },
	/* issue 9: two different lengths, as fields or as a list */
	{ "Content-Length: 5|Content-Length: 7", NW_FRAMING_BAD_LENGTH, 0 },
	{ "Content-Length: 5, 7", NW_FRAMING_BAD_LENGTH, 0 },
	{ "Content-Length: 5,", NW_FRAMING_BAD_LENGTH, 0 },
	{ "Content-Length: ", NW_FRAMING_BAD_LENGTH, 0 },
	{ "Content-Length: +5", NW_FRAMING_BAD_LENGTH, 0 },
	{ "Content-Length: 0x10", NW_FRAMING_BAD_LENGTH, 0 },
	{ "Content-Length: 99999999999999999999", NW_FRAMING_BAD_LENGTH, 0 },
	/* issue 9: codings other than chunked (501), chunked misplaced (400) */
	{ "Transfer-Encoding: gzip", NW_FRAMING_UNKNOWN_CODING, 0 },
	{ "Transfer-Encoding: gzip, chunked", NW_FRAMING_UNKNOWN_CODING, 0 },
	{ "Transfer-Encoding: gzip|Transfer-Encoding: chunked", NW_FRAMING_UNKNOWN_CODING, 0 },
	{ "Transfer-Encoding: chunked;ext=1", NW_FRAMING_UNKNOWN_CODING, 0 },
	{ "Transfer-Encoding: chunked, gzip", NW_FRAMING_BAD_CHUNKED, 0 },
	{ "Transfer-Encoding: chunked, chunked", NW_FRAMING_BAD_CHUNKED, 0 },
	{ "Transfer-Encoding: chunked|Transfer-Encoding: chunked", NW_FRAMING_BAD_CHUNKED, 0 },
	{ "Transfer-Encoding: ", NW_FRAMING_BAD_CHUNKED, 0 },
	/* RFC 9112 5.1: whitespace between a name and its colon, on any field */
	{ "Content-Length : 5", NW_FRAMING_BAD_NAME, 0 },
	{ "Content-Length\t: 5", NW_FRAMING_BAD_NAME, 0 },
	{ "Transfer-Encoding : chunked", NW_FRAMING_BAD_NAME, 0 },
	{ "Host : x|Content-Length: 5", NW_FRAMING_BAD_NAME, 0 },
};

static nw_framing_verdict
verdict_of(const char *fields, struct nw_framing *f)
{
	g_auto(GStrv) lines = g_strsplit(fields, "|", -1);

	memset(f, 0, sizeof *f);
	for (char **l = lines; *l != NULL; l++) {
		const char *colon = strchr(*l, ':');

		if (colon == NULL)
			continue;
		nw_framing_add(f, *l, (size_t)(colon - *l), colon + 1, strlen(colon + 1));
	}
	return nw_framing_verdict_of(f);
}

static void
test_verdicts(void)
{
	g_test_summary("issue 9, front door: every framing case gets its verdict, status and "
	               "error code");
	for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
		struct nw_framing f;
		nw_framing_verdict v = verdict_of(cases[i].fields, &f);
		unsigned status = nw_framing_status(v);

		if (v != cases[i].verdict)
			g_test_message("case \"%s\": verdict %d, wanted %d", cases[i].fields, v,
			               cases[i].verdict);
		g_assert_cmpint(v, ==, cases[i].verdict);
		if (v == NW_FRAMING_LENGTH)
			g_assert_cmpuint(f.length, ==, cases[i].length);
		g_assert_cmpuint(status, ==, v == NW_FRAMING_UNKNOWN_CODING ? 501
		                             : v >= NW_FRAMING_BOTH ? 400 : 0);
		g_assert_true((status == 0) == (nw_framing_code(v) == NULL));
		g_assert_true((status == 0) == (nw_framing_message(v) == NULL));
	}
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/net/framing/verdicts", test_verdicts);
	return g_test_run();
}
