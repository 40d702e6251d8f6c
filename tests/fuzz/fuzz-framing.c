/*
 * libFuzzer target for the front door's body framing (issue 9, "The front
 * door"; src/net/http-framing.c): the input is a request head as a client
 * sends it, split into field lines the way libmicrohttpd hands them to the
 * server (name before the first ':', value without its surrounding
 * blanks). Beyond "no crash, no leak":
 * - a verdict is accepted exactly when it has no status, code or message;
 * - a field name with a blank in it is refused whatever else comes
 *   (RFC 9112 5.1);
 * - the fields of one name may be sent as one comma-joined field (RFC 9110
 *   5.3) without changing the verdict;
 * - an accepted length is the value every Content-Length element spells,
 *   and no accepted verdict comes with both framings.
 */
#include "build-config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <glib.h>

#include "net/http-framing.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool
is_blank(char c)
{
	return c == ' ' || c == '\t';
}

static void
check(nw_framing_verdict v)
{
	unsigned status = nw_framing_status(v);

	if (status != 0 && status != 400 && status != 501)
		abort();
	if ((status == 0) != (nw_framing_code(v) == NULL) ||
	    (status == 0) != (nw_framing_message(v) == NULL))
		abort();
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	g_autofree char *text = g_strndup((const char *)data, size);
	g_auto(GStrv) lines = g_strsplit(text, "\n", -1);
	struct nw_framing split = { 0 }, joined = { 0 };
	GString *cl = NULL, *te = NULL;
	nw_framing_verdict v, w;
	bool blank_name = false;

	for (char **l = lines; *l != NULL; l++) {
		char *colon = strchr(*l, ':'), *value, *end;
		GString **acc;

		if (colon == NULL)
			continue;
		for (const char *c = *l; c < colon; c++)
			blank_name |= is_blank(*c);
		value = colon + 1;
		end = *l + strlen(*l);
		if (end > value && end[-1] == '\r')
			end--;
		while (value < end && is_blank(*value))
			value++;
		while (end > value && is_blank(end[-1]))
			end--;
		nw_framing_add(&split, *l, (size_t)(colon - *l), value, (size_t)(end - value));
		/* The same fields, one line per name. */
		if ((size_t)(colon - *l) == 14 && g_ascii_strncasecmp(*l, "Content-Length", 14) == 0)
			acc = &cl;
		else if ((size_t)(colon - *l) == 17 &&
		         g_ascii_strncasecmp(*l, "Transfer-Encoding", 17) == 0)
			acc = &te;
		else
			continue;
		if (*acc == NULL)
			*acc = g_string_new(NULL);
		else
			g_string_append_c(*acc, ',');
		g_string_append_len(*acc, value, end - value);
	}
	if (cl != NULL)
		nw_framing_add(&joined, "content-length", 14, cl->str, cl->len);
	if (te != NULL)
		nw_framing_add(&joined, "TRANSFER-ENCODING", 17, te->str, te->len);
	v = nw_framing_verdict_of(&split);
	w = nw_framing_verdict_of(&joined);
	check(v);
	if (blank_name ? v != NW_FRAMING_BAD_NAME : v != w)
		abort();
	if ((v == NW_FRAMING_LENGTH || v == NW_FRAMING_CHUNKED) && cl != NULL && te != NULL)
		abort();
	if (v == NW_FRAMING_LENGTH && (split.length != joined.length || split.length == 0))
		abort();
	if (v == NW_FRAMING_NONE && (te != NULL || split.length != 0))
		abort();
	if (cl != NULL)
		g_string_free(cl, TRUE);
	if (te != NULL)
		g_string_free(te, TRUE);
	return 0;
}
