#include "build-config.h"

#include "net/http-framing.h"

#include <string.h>

#include <glib.h>

static bool
name_is(const char *name, size_t len, const char *want)
{
	return len == strlen(want) && g_ascii_strncasecmp(name, want, len) == 0;
}

static bool
is_ows(char c)
{
	return c == ' ' || c == '\t';
}

/* The next comma-separated element of [*p, end), without its OWS. */
static bool
next_element(const char **p, const char *end, const char **elem, size_t *len)
{
	const char *s = *p, *e;

	if (s > end)
		return false;
	e = memchr(s, ',', (size_t)(end - s));
	if (e == NULL)
		e = end;
	*p = e + 1;
	while (s < e && is_ows(*s))
		s++;
	while (e > s && is_ows(e[-1]))
		e--;
	*elem = s;
	*len = (size_t)(e - s);
	return true;
}

static void
add_length(struct nw_framing *f, const char *value, size_t value_len)
{
	const char *p = value, *end = value + value_len, *elem;
	size_t len;

	while (next_element(&p, end, &elem, &len)) {
		uint64_t n = 0;

		/* RFC 9112 6.3: a list of equal values may stand for one; an
		 * empty, non-decimal, overlong or unequal value may not. */
		if (len == 0)
			f->length_bad = true;
		for (size_t i = 0; i < len && !f->length_bad; i++) {
			uint64_t d = (uint64_t)(elem[i] - '0');

			if (!g_ascii_isdigit(elem[i]) || n > (UINT64_MAX - d) / 10)
				f->length_bad = true;
			else
				n = n * 10 + d;
		}
		if (!f->length_bad && f->n_length > 0 && n != f->length)
			f->length_bad = true;
		if (!f->length_bad)
			f->length = n;
		f->n_length++;
	}
}

static void
add_codings(struct nw_framing *f, const char *value, size_t value_len)
{
	const char *p = value, *end = value + value_len, *elem;
	size_t len;

	f->te_seen = true;
	while (next_element(&p, end, &elem, &len)) {
		if (len == 0)
			continue; /* empty list elements are ignored (RFC 9110 5.6.1) */
		if (f->chunked_last)
			f->chunked_early = true; /* something follows chunked */
		f->n_codings++;
		/* A coding may carry parameters ("gzip;q=1"): any is unknown. */
		f->chunked_last = name_is(elem, len, "chunked");
		if (!f->chunked_last)
			f->coding_unknown = true;
	}
}

void
nw_framing_add(struct nw_framing *f, const char *name, size_t name_len, const char *value,
               size_t value_len)
{
	/* RFC 9112 5.1: whitespace between a field name and its colon must be
	 * refused; a hop that trims it would read a length or coding that
	 * libmicrohttpd, which keeps it in the name, does not see. */
	if (memchr(name, ' ', name_len) != NULL || memchr(name, '\t', name_len) != NULL)
		f->name_bad = true;
	if (name_is(name, name_len, "Content-Length"))
		add_length(f, value, value_len);
	else if (name_is(name, name_len, "Transfer-Encoding"))
		add_codings(f, value, value_len);
}

nw_framing_verdict
nw_framing_verdict_of(const struct nw_framing *f)
{
	if (f->name_bad)
		return NW_FRAMING_BAD_NAME;
	if (f->te_seen && f->n_length > 0)
		return NW_FRAMING_BOTH;
	if (f->length_bad)
		return NW_FRAMING_BAD_LENGTH;
	if (!f->te_seen)
		return f->n_length > 0 && f->length > 0 ? NW_FRAMING_LENGTH : NW_FRAMING_NONE;
	/* chunked must come once and last (RFC 9112 6.3); any other coding is
	 * one we cannot decode (501, RFC 9112 6.1). */
	if (f->n_codings == 0 || f->chunked_early)
		return NW_FRAMING_BAD_CHUNKED;
	if (f->coding_unknown)
		return NW_FRAMING_UNKNOWN_CODING;
	return NW_FRAMING_CHUNKED;
}

unsigned
nw_framing_status(nw_framing_verdict v)
{
	switch (v) {
	case NW_FRAMING_NONE:
	case NW_FRAMING_LENGTH:
	case NW_FRAMING_CHUNKED:
		return 0;
	case NW_FRAMING_UNKNOWN_CODING:
		return 501;
	case NW_FRAMING_BOTH:
	case NW_FRAMING_BAD_LENGTH:
	case NW_FRAMING_BAD_CHUNKED:
	case NW_FRAMING_BAD_NAME:
	default:
		return 400;
	}
}

const char *
nw_framing_code(nw_framing_verdict v)
{
	switch (v) {
	case NW_FRAMING_BOTH: return "ambiguous_framing";
	case NW_FRAMING_BAD_LENGTH: return "invalid_content_length";
	case NW_FRAMING_BAD_CHUNKED: return "invalid_transfer_encoding";
	case NW_FRAMING_UNKNOWN_CODING: return "unsupported_transfer_encoding";
	case NW_FRAMING_BAD_NAME: return "invalid_header_name";
	default: return NULL;
	}
}

const char *
nw_framing_message(nw_framing_verdict v)
{
	switch (v) {
	case NW_FRAMING_BOTH:
		return "the request has both Content-Length and Transfer-Encoding: send one";
	case NW_FRAMING_BAD_LENGTH:
		return "the request's Content-Length is malformed or given twice with different "
		       "values: send one decimal length";
	case NW_FRAMING_BAD_CHUNKED:
		return "the request's Transfer-Encoding must be exactly \"chunked\"";
	case NW_FRAMING_UNKNOWN_CODING:
		return "the request uses a transfer coding other than chunked: only chunked is "
		       "supported";
	case NW_FRAMING_BAD_NAME:
		return "a header field name has a space or tab in it (as in \"Content-Length :\"): "
		       "nothing may come between a field name and its colon";
	default:
		return NULL;
	}
}
