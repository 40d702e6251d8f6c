#include "prom-text.h"

#include <errno.h>
#include <locale.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/*
 * Strict about the lines it takes and allocation-free. A line is blank, a
 * comment ('#' first: HELP, TYPE or anything else), or a sample
 *     name [{label="value",...}] value [timestamp]
 * Moved here from the vllm dialect so every dialect reads the format one
 * way. Reference: engine-wire-formats sections 5.1 to 5.3.
 */

/* One line of the body: [p, end). */
struct scan {
	const char *p;
	const char *end;
};

static bool
is_blank(char c)
{
	return c == ' ' || c == '\t';
}

static void
skip_blanks(struct scan *s)
{
	while (s->p < s->end && is_blank(*s->p))
		s->p++;
}

static bool
is_name_char(char c, bool first, bool colon)
{
	if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_')
		return true;
	if (colon && c == ':')
		return true;
	return !first && c >= '0' && c <= '9';
}

/* A metric name (colon allowed) or a label name; its length, 0 if none. */
static size_t
scan_name(struct scan *s, bool colon)
{
	const char *start = s->p;

	while (s->p < s->end && is_name_char(*s->p, s->p == start, colon))
		s->p++;
	return (size_t)(s->p - start);
}

/* The label set after '{': names, '=', quoted values whose only escapes are
 * \\, \" and \n; a trailing comma is allowed. */
static bool
scan_labels(struct scan *s)
{
	for (;;) {
		skip_blanks(s);
		if (s->p < s->end && *s->p == '}') {
			s->p++;
			return true;
		}
		if (scan_name(s, false) == 0)
			return false;
		skip_blanks(s);
		if (s->p >= s->end || *s->p != '=')
			return false;
		s->p++;
		skip_blanks(s);
		if (s->p >= s->end || *s->p != '"')
			return false;
		for (s->p++;; s->p++) {
			if (s->p >= s->end)
				return false;
			if (*s->p == '"')
				break;
			if (*s->p == '\\') {
				if (++s->p >= s->end ||
				    (*s->p != '\\' && *s->p != '"' && *s->p != 'n'))
					return false;
			}
		}
		s->p++;
		skip_blanks(s);
		if (s->p < s->end && *s->p == ',')
			s->p++;
		else if (s->p >= s->end || *s->p != '}')
			return false;
	}
}

/* The next blank-separated token; its length, 0 at the end of the line. */
static size_t
scan_token(struct scan *s, const char **token)
{
	skip_blanks(s);
	*token = s->p;
	while (s->p < s->end && !is_blank(*s->p))
		s->p++;
	return (size_t)(s->p - *token);
}

/* [+-]digits[.digits][e[+-]digits] with at least one digit in the mantissa. */
static bool
is_decimal(const char *t, size_t n)
{
	size_t i = 0, digits = 0;

	if (i < n && (t[i] == '+' || t[i] == '-'))
		i++;
	for (; i < n && t[i] >= '0' && t[i] <= '9'; i++)
		digits++;
	if (i < n && t[i] == '.') {
		for (i++; i < n && t[i] >= '0' && t[i] <= '9'; i++)
			digits++;
	}
	if (digits == 0)
		return false;
	if (i < n && (t[i] == 'e' || t[i] == 'E')) {
		size_t exp = 0;

		i++;
		if (i < n && (t[i] == '+' || t[i] == '-'))
			i++;
		for (; i < n && t[i] >= '0' && t[i] <= '9'; i++)
			exp++;
		if (exp == 0)
			return false;
	}
	return i == n;
}

/* A sample value: a decimal float, NaN, +Inf or -Inf (the format's
 * spellings; strtod's hexadecimal and "infinity" forms are not). */
static bool
parse_value(const char *t, size_t n, double *out)
{
	char buf[64];
	char *end;

	if (n == 3 && memcmp(t, "NaN", 3) == 0) {
		*out = NAN;
		return true;
	}
	if ((n == 4 && memcmp(t, "+Inf", 4) == 0) || (n == 3 && memcmp(t, "Inf", 3) == 0)) {
		*out = INFINITY;
		return true;
	}
	if (n == 4 && memcmp(t, "-Inf", 4) == 0) {
		*out = -INFINITY;
		return true;
	}
	if (n >= sizeof buf || !is_decimal(t, n))
		return false;
	memcpy(buf, t, n);
	buf[n] = '\0';
	/* strtod reads the locale's decimal point; the host runs in "C", but
	 * a plugin should not depend on it. */
	if (localeconv()->decimal_point[0] != '.') {
		char *dot = strchr(buf, '.');

		if (dot != NULL)
			*dot = localeconv()->decimal_point[0];
	}
	*out = strtod(buf, &end);
	return *end == '\0';
}

/* An optional timestamp: an integer, milliseconds. */
static bool
is_timestamp(const char *t, size_t n)
{
	size_t i = t[0] == '-' ? 1 : 0;

	if (i == n)
		return false;
	for (; i < n; i++) {
		if (t[i] < '0' || t[i] > '9')
			return false;
	}
	return true;
}

/* Counts stay exact as doubles, and far from overflowing int64. */
#define MAX_COUNT 9007199254740992.0 /* 2^53 */

static bool
value_fits(enum prom_kind kind, double v)
{
	switch (kind) {
	case PROM_COUNT:
		return v >= 0 && v <= MAX_COUNT && v == (double)(int64_t)v;
	case PROM_RATIO:
		return v >= 0 && v <= 1;
	case PROM_TIME:
		return v > 0 && isfinite(v);
	}
	return false;
}

/* Several series of one family: counts add up, the others take the
 * highest. False when a sum of counts leaves the range. */
static bool
merge_value(struct prom_value *pv, enum prom_kind kind, double v)
{
	if (!pv->seen)
		pv->value = v;
	else if (kind == PROM_COUNT)
		pv->value += v;
	else if (v > pv->value)
		pv->value = v;
	pv->seen = true;
	return kind != PROM_COUNT || pv->value <= MAX_COUNT;
}

/* One line; false when it is malformed where that matters. */
static bool
read_line(struct scan *s, const struct prom_family *families, size_t n,
          struct prom_value *out)
{
	const char *name, *tok;
	size_t len, name_len, m;
	double v;

	skip_blanks(s);
	if (s->p == s->end || *s->p == '#')
		return true;
	name = s->p;
	name_len = scan_name(s, true);
	if (name_len == 0)
		return false;
	for (m = 0; m < n; m++) {
		if (strlen(families[m].name) == name_len &&
		    memcmp(name, families[m].name, name_len) == 0)
			break;
	}
	if (m == n)
		return true;
	/* The name ends at a brace or a blank, never inside a longer token. */
	if (s->p == s->end || (*s->p != '{' && !is_blank(*s->p)))
		return false;
	skip_blanks(s);
	if (s->p < s->end && *s->p == '{') {
		s->p++;
		if (!scan_labels(s))
			return false;
	}
	len = scan_token(s, &tok);
	if (len == 0 || !parse_value(tok, len, &v) || !value_fits(families[m].kind, v))
		return false;
	len = scan_token(s, &tok);
	if (len > 0 && !is_timestamp(tok, len))
		return false;
	if (scan_token(s, &tok) != 0)
		return false;
	return merge_value(&out[m], families[m].kind, v);
}

int
prom_text_read(const char *body, size_t len, const struct prom_family *families, size_t n,
               struct prom_value *out)
{
	const char *p, *end;
	bool any = false;

	if (out == NULL || families == NULL || (body == NULL && len > 0))
		return -EINVAL;
	memset(out, 0, n * sizeof *out);
	for (p = body, end = body + len; p < end;) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		struct scan s = { p, nl != NULL ? nl : end };

		/* A CRLF body: the CR is not part of the line. */
		if (s.end > s.p && s.end[-1] == '\r')
			s.end--;
		if (!read_line(&s, families, n, out))
			return -EPROTO;
		p = nl != NULL ? nl + 1 : end;
	}
	for (size_t m = 0; m < n; m++)
		any = any || out[m].seen;
	return any ? 0 : -EPROTO;
}
