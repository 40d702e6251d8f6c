#include "engine-metrics.h"

#include <errno.h>
#include <locale.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/*
 * A reader of the Prometheus text exposition format (version 0.0.4, what
 * the engines' prometheus_client serves), strict about the lines it takes
 * and allocation-free: it walks the body in place. A line is blank, a comment
 * ('#' first: HELP, TYPE or anything else), or a sample
 *     name [{label="value",...}] value [timestamp]
 * Samples of the metrics below are read in full and must be well formed;
 * other samples need only start with a metric name and close their quoted
 * strings, so a family an engine adds later cannot break monitoring and a
 * label value with a raw newline cannot pass its lines off as samples.
 * Reference:
 * engine-wire-formats sections 5.1 and 5.2.
 */

/* The metrics a dialect reads. */
enum engine_metric {
	M_RUNNING,
	M_WAITING,
	M_KV,
	M_KV_OLD, /* the older name: read only when the new one is absent */
	M_START,
	M_COUNT,
};

/* The process collector's start time, the same for every engine. */
#define START_TIME "process_start_time_seconds"

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

/* Whether every quoted string of the rest of the line ends on it (a
 * backslash escapes the next character). */
static bool
quotes_closed(const struct scan *s)
{
	bool quoted = false;

	for (const char *p = s->p; p < s->end; p++) {
		if (quoted && *p == '\\') {
			if (++p == s->end)
				return false;
		} else if (*p == '"') {
			quoted = !quoted;
		}
	}
	return !quoted;
}

/* What the body says, summed or maxed across series. */
struct metrics_seen {
	bool seen[M_COUNT];
	double value[M_COUNT];
};

/* Counts stay exact as doubles, and far from overflowing int64. */
#define MAX_COUNT 9007199254740992.0 /* 2^53 */

/* Whether v is valid for metric m. */
static bool
value_fits(enum engine_metric m, double v)
{
	switch (m) {
	case M_RUNNING:
	case M_WAITING:
		return v >= 0 && v <= MAX_COUNT && v == (double)(int64_t)v;
	case M_KV:
	case M_KV_OLD:
		return v >= 0 && v <= 1;
	case M_START:
		return v > 0 && isfinite(v);
	case M_COUNT:
		break;
	}
	return false;
}

/* Several series of one metric (one per model_name or engine label): the
 * counts add up, the cache usage and the start time are the highest. False
 * when a sum of counts leaves the range. */
static bool
merge_value(struct metrics_seen *ms, enum engine_metric m, double v)
{
	if (!ms->seen[m])
		ms->value[m] = v;
	else if (m == M_RUNNING || m == M_WAITING)
		ms->value[m] += v;
	else if (v > ms->value[m])
		ms->value[m] = v;
	ms->seen[m] = true;
	return ms->value[m] <= MAX_COUNT || (m != M_RUNNING && m != M_WAITING);
}

/* One line. False when it is malformed where that matters: a line that is
 * neither blank, a comment nor a sample, or a sample of a metric we read
 * that does not follow the format or whose value does not fit. */
static bool
read_line(struct scan *s, const char *const names[M_COUNT], struct metrics_seen *ms)
{
	const char *name, *tok;
	size_t n, len;
	double v;
	int m;

	skip_blanks(s);
	if (s->p == s->end || *s->p == '#')
		return true;
	name = s->p;
	n = scan_name(s, true);
	if (n == 0)
		return false;
	for (m = 0; m < M_COUNT; m++) {
		if (names[m] != NULL && strlen(names[m]) == n && memcmp(name, names[m], n) == 0)
			break;
	}
	/* Another metric's sample may hold what it likes (a later format's
	 * exemplar, say), but a quoted value must end on its line, or the
	 * lines inside it would pass for samples. */
	if (m == M_COUNT)
		return quotes_closed(s);
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
	if (len == 0 || !parse_value(tok, len, &v) || !value_fits((enum engine_metric)m, v))
		return false;
	len = scan_token(s, &tok);
	if (len > 0 && !is_timestamp(tok, len))
		return false;
	if (scan_token(s, &tok) != 0)
		return false;
	return merge_value(ms, (enum engine_metric)m, v);
}

/* GET /metrics: running and waiting requests, KV-cache usage and the
 * process start time, summed or maxed across the engine's series. */
int
engine_metrics_read(const char *body, size_t len, const struct engine_metric_names *which,
                    struct narwhal_engine_metrics *out)
{
	struct metrics_seen ms = { { false } };
	const char *names[M_COUNT];
	const char *p, *end;

	if (out == NULL || which == NULL || (body == NULL && len > 0))
		return -EINVAL;
	names[M_RUNNING] = which->running;
	names[M_WAITING] = which->waiting;
	names[M_KV] = which->kv_usage;
	names[M_KV_OLD] = which->kv_usage_old;
	names[M_START] = START_TIME;
	for (p = body, end = body + len; p < end;) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		struct scan s = { p, nl != NULL ? nl : end };

		/* A CRLF body: the CR is not part of the line. */
		if (s.end > s.p && s.end[-1] == '\r')
			s.end--;
		if (!read_line(&s, names, &ms))
			return -EPROTO;
		p = nl != NULL ? nl + 1 : end;
	}
	/* The process start time alone is any Prometheus client's: the page
	 * is the engine's only when it names one of the dialect's own. */
	if (!ms.seen[M_RUNNING] && !ms.seen[M_WAITING] && !ms.seen[M_KV] && !ms.seen[M_KV_OLD])
		return -EPROTO;
	if (ms.seen[M_RUNNING])
		out->running = (int64_t)ms.value[M_RUNNING];
	if (ms.seen[M_WAITING])
		out->waiting = (int64_t)ms.value[M_WAITING];
	if (ms.seen[M_KV])
		out->kv_usage = ms.value[M_KV];
	else if (ms.seen[M_KV_OLD])
		out->kv_usage = ms.value[M_KV_OLD];
	if (ms.seen[M_START])
		out->start_time_s = ms.value[M_START];
	return 0;
}

