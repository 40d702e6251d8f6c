#include "build-config.h"

#include "tools/replay/trace.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

G_DEFINE_QUARK(narwhal-replay-error-quark, rp_error)

struct rp_trace *
rp_trace_new(const char *label)
{
	struct rp_trace *t = g_new0(struct rp_trace, 1);

	t->reqs = g_array_new(FALSE, TRUE, sizeof(struct rp_request));
	t->hash_ids = g_array_new(FALSE, FALSE, sizeof(uint32_t));
	t->phase_names = g_ptr_array_new_with_free_func(g_free);
	t->label = g_strdup(label);
	return t;
}

void
rp_trace_free(struct rp_trace *t)
{
	if (t == NULL)
		return;
	g_array_free(t->reqs, TRUE);
	g_array_free(t->hash_ids, TRUE);
	g_ptr_array_free(t->phase_names, TRUE);
	g_free(t->label);
	g_free(t);
}

void
rp_trace_add(struct rp_trace *t, double at, uint32_t input, uint32_t output, uint32_t phase,
             const uint32_t *hash_ids, uint32_t n_hash)
{
	struct rp_request r = {
		.t = at, .input_tokens = input, .output_tokens = output, .phase = phase,
		.row = t->reqs->len,
	};

	if (hash_ids != NULL && n_hash > 0) {
		r.hash_off = t->hash_ids->len;
		r.n_hash = n_hash;
		g_array_append_vals(t->hash_ids, hash_ids, n_hash);
	}
	g_array_append_val(t->reqs, r);
}

static int
by_time(const void *a, const void *b)
{
	const struct rp_request *x = a, *y = b;

	if (x->t != y->t)
		return x->t < y->t ? -1 : 1;
	return x->row < y->row ? -1 : x->row > y->row;
}

void
rp_trace_finish(struct rp_trace *t)
{
	double t0;

	if (t->reqs->len == 0)
		return;
	/* The row breaks ties, so equal timestamps keep the file's order. */
	g_array_sort(t->reqs, by_time);
	t0 = g_array_index(t->reqs, struct rp_request, 0).t;
	for (guint i = 0; i < t->reqs->len; i++)
		g_array_index(t->reqs, struct rp_request, i).t -= t0;
}

const uint32_t *
rp_trace_hashes(const struct rp_trace *t, const struct rp_request *r)
{
	if (r->n_hash == 0)
		return NULL;
	return &g_array_index(t->hash_ids, uint32_t, r->hash_off);
}

/* --- Azure CSV ------------------------------------------------------ */

/* Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
 * civil-from-days inverse); avoids mktime and the local time zone. */
static int64_t
days_from_civil(int64_t y, unsigned m, unsigned d)
{
	int64_t era;
	unsigned yoe, doy, doe;

	y -= m <= 2;
	era = (y >= 0 ? y : y - 399) / 400;
	yoe = (unsigned)(y - era * 400);
	doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + (int64_t)doe - 719468;
}

/* Read exactly n digits at *p. */
static bool
digits(const char **p, const char *end, unsigned n, unsigned *out)
{
	unsigned v = 0;

	for (unsigned i = 0; i < n; i++) {
		if (*p >= end || !g_ascii_isdigit(**p))
			return false;
		v = v * 10 + (unsigned)(**p - '0');
		(*p)++;
	}
	*out = v;
	return true;
}

/* Consume one of the separator characters in set. */
static bool
expect(const char **p, const char *end, const char *set)
{
	if (*p >= end || **p == '\0' || strchr(set, **p) == NULL)
		return false;
	(*p)++;
	return true;
}

bool
rp_parse_azure_time(const char *s, size_t len, int64_t *out_ns)
{
	const char *p = s, *end = s + len;
	unsigned y, mo, d, h, mi, sec;
	int64_t frac_ns = 0, scale = 100000000;

	while (p < end && *p == ' ')
		p++;
	while (end > p && (end[-1] == ' ' || end[-1] == '"'))
		end--;
	if (p < end && *p == '"')
		p++;
	if (!digits(&p, end, 4, &y) || !expect(&p, end, "-") ||
	    !digits(&p, end, 2, &mo) || !expect(&p, end, "-") ||
	    !digits(&p, end, 2, &d) || !expect(&p, end, " T") ||
	    !digits(&p, end, 2, &h) || !expect(&p, end, ":") ||
	    !digits(&p, end, 2, &mi) || !expect(&p, end, ":") ||
	    !digits(&p, end, 2, &sec))
		return false;
	if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60)
		return false;
	if (p < end && *p == '.') {
		/* Any number of fractional digits; Azure writes 7. */
		p++;
		if (p >= end || !g_ascii_isdigit(*p))
			return false;
		for (; p < end && g_ascii_isdigit(*p); p++) {
			frac_ns += (*p - '0') * scale;
			scale /= 10;
		}
	}
	if (p != end)
		return false;
	*out_ns = ((days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec) *
	           (int64_t)1000000000) + frac_ns;
	return true;
}

/* A non-negative integer field, as uint32. */
static bool
parse_count(const char *s, size_t len, uint32_t *out)
{
	char buf[32];
	char *endp;
	unsigned long long v;

	while (len > 0 && (*s == ' ' || *s == '"')) {
		s++;
		len--;
	}
	while (len > 0 && (s[len - 1] == ' ' || s[len - 1] == '"'))
		len--;
	if (len == 0 || len >= sizeof buf || !g_ascii_isdigit(s[0]))
		return false;
	memcpy(buf, s, len);
	buf[len] = '\0';
	errno = 0;
	v = strtoull(buf, &endp, 10);
	if (errno != 0 || *endp != '\0' || v > UINT32_MAX)
		return false;
	*out = (uint32_t)v;
	return true;
}

/* Split one CSV line (no quoting with commas inside: the traces have none). */
static guint
split_fields(const char *line, size_t len, const char **f, size_t *flen, guint max)
{
	guint n = 0;
	const char *start = line, *end = line + len;

	for (const char *p = line; n < max; p++) {
		if (p == end || *p == ',') {
			f[n] = start;
			flen[n] = (size_t)(p - start);
			n++;
			if (p == end)
				break;
			start = p + 1;
		}
	}
	return n;
}

bool
rp_trace_parse_azure(struct rp_trace *t, const char *text, size_t len, const char *what,
                     GError **error)
{
	const char *p = text, *end = text + len;
	int col_ts = 0, col_in = 1, col_out = 2;
	int64_t t0 = 0;
	bool first_row = true;
	unsigned lineno = 0;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *eol = nl ? nl : end; /* the last line has no newline */
		size_t llen = (size_t)(eol - p);
		const char *f[8];
		size_t flen[8];
		guint nf;
		int64_t ns;
		uint32_t in, out;

		lineno++;
		if (llen > 0 && p[llen - 1] == '\r')
			llen--;
		nf = llen ? split_fields(p, llen, f, flen, G_N_ELEMENTS(f)) : 0;
		if (nf == 0 || (nf == 1 && flen[0] == 0)) {
			p = nl ? nl + 1 : end;
			continue;
		}
		if (lineno == 1 && !g_ascii_isdigit(*p) && *p != '"') {
			/* A header: find the columns by name, whatever their order. */
			col_ts = col_in = col_out = -1;
			for (guint i = 0; i < nf; i++) {
				g_autofree char *name = g_strstrip(g_strndup(f[i], flen[i]));

				if (g_ascii_strcasecmp(name, "TIMESTAMP") == 0)
					col_ts = (int)i;
				else if (g_ascii_strcasecmp(name, "ContextTokens") == 0)
					col_in = (int)i;
				else if (g_ascii_strcasecmp(name, "GeneratedTokens") == 0)
					col_out = (int)i;
			}
			if (col_ts < 0 || col_in < 0 || col_out < 0) {
				g_set_error(error, RP_ERROR, RP_ERROR_PARSE,
				            "%s:1: the header needs TIMESTAMP, ContextTokens and "
				            "GeneratedTokens", what);
				return false;
			}
			p = nl ? nl + 1 : end;
			continue;
		}
		if ((guint)MAX(col_ts, MAX(col_in, col_out)) >= nf) {
			g_set_error(error, RP_ERROR, RP_ERROR_PARSE, "%s:%u: expected %d fields",
			            what, lineno, MAX(col_ts, MAX(col_in, col_out)) + 1);
			return false;
		}
		if (!rp_parse_azure_time(f[col_ts], flen[col_ts], &ns)) {
			g_set_error(error, RP_ERROR, RP_ERROR_PARSE,
			            "%s:%u: bad timestamp \"%.*s\" (want YYYY-MM-DD HH:MM:SS.fffffff)",
			            what, lineno, (int)MIN(flen[col_ts], 40), f[col_ts]);
			return false;
		}
		if (!parse_count(f[col_in], flen[col_in], &in) ||
		    !parse_count(f[col_out], flen[col_out], &out)) {
			g_set_error(error, RP_ERROR, RP_ERROR_PARSE,
			            "%s:%u: token counts must be non-negative integers", what, lineno);
			return false;
		}
		if (first_row) {
			t0 = ns;
			first_row = false;
		}
		/* Relative to the first row in integer ns: absolute epoch seconds in
		 * a double would lose the 7th fractional digit. */
		rp_trace_add(t, (double)(ns - t0) / 1e9, in, out, 0, NULL, 0);
		p = nl ? nl + 1 : end;
	}
	rp_trace_finish(t);
	return true;
}

/* --- Mooncake JSONL ------------------------------------------------- */

static bool
json_count(json_t *v, uint32_t *out)
{
	double d;

	if (json_is_integer(v)) {
		json_int_t i = json_integer_value(v);

		if (i < 0 || i > UINT32_MAX)
			return false;
		*out = (uint32_t)i;
		return true;
	}
	if (!json_is_real(v))
		return false;
	d = json_real_value(v);
	if (!(d >= 0 && d <= UINT32_MAX) || d != (double)(uint32_t)d)
		return false;
	*out = (uint32_t)d;
	return true;
}

bool
rp_trace_parse_mooncake(struct rp_trace *t, const char *text, size_t len, const char *what,
                        GError **error)
{
	const char *p = text, *end = text + len;
	GArray *hashes = g_array_new(FALSE, FALSE, sizeof(uint32_t));
	unsigned lineno = 0;
	bool ok = true;

	while (p < end && ok) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *eol = nl ? nl : end;
		json_t *row, *ts, *ids;
		json_error_t jerr;
		uint32_t in, out;
		double ms;
		const char *q = p;

		lineno++;
		while (q < eol && g_ascii_isspace(*q))
			q++;
		if (q == eol) {
			p = nl ? nl + 1 : end;
			continue;
		}
		row = json_loadb(p, (size_t)(eol - p), 0, &jerr);
		if (!json_is_object(row)) {
			g_set_error(error, RP_ERROR, RP_ERROR_PARSE, "%s:%u: not a JSON object: %s",
			            what, lineno, row ? "wrong type" : jerr.text);
			json_decref(row);
			ok = false;
			break;
		}
		ts = json_object_get(row, "timestamp");
		if (!json_is_number(ts) || (ms = json_number_value(ts)) < 0 ||
		    !json_count(json_object_get(row, "input_length"), &in) ||
		    !json_count(json_object_get(row, "output_length"), &out)) {
			g_set_error(error, RP_ERROR, RP_ERROR_PARSE,
			            "%s:%u: needs \"timestamp\" (ms), \"input_length\" and "
			            "\"output_length\" as non-negative numbers", what, lineno);
			json_decref(row);
			ok = false;
			break;
		}
		g_array_set_size(hashes, 0);
		ids = json_object_get(row, "hash_ids");
		if (json_is_array(ids)) {
			size_t i;
			json_t *v;

			json_array_foreach(ids, i, v) {
				uint32_t h;

				if (!json_count(v, &h)) {
					g_set_error(error, RP_ERROR, RP_ERROR_PARSE,
					            "%s:%u: hash_ids must hold non-negative integers",
					            what, lineno);
					ok = false;
					break;
				}
				g_array_append_val(hashes, h);
			}
		}
		if (ok)
			rp_trace_add(t, ms / 1000.0, in, out, 0, (const uint32_t *)(void *)hashes->data,
			             hashes->len);
		json_decref(row);
		p = nl ? nl + 1 : end;
	}
	g_array_free(hashes, TRUE);
	if (ok)
		rp_trace_finish(t);
	return ok;
}

/* --- files ---------------------------------------------------------- */

rp_trace_format
rp_trace_detect(const char *path, const char *text, size_t len)
{
	if (path && g_str_has_suffix(path, ".csv"))
		return RP_TRACE_AZURE;
	if (path && (g_str_has_suffix(path, ".jsonl") || g_str_has_suffix(path, ".json")))
		return RP_TRACE_MOONCAKE;
	for (size_t i = 0; i < len; i++) {
		if (g_ascii_isspace(text[i]))
			continue;
		return text[i] == '{' ? RP_TRACE_MOONCAKE : RP_TRACE_AZURE;
	}
	return RP_TRACE_AZURE;
}

bool
rp_trace_format_parse(const char *name, rp_trace_format *out)
{
	if (g_strcmp0(name, "auto") == 0)
		*out = RP_TRACE_AUTO;
	else if (g_strcmp0(name, "azure") == 0)
		*out = RP_TRACE_AZURE;
	else if (g_strcmp0(name, "mooncake") == 0)
		*out = RP_TRACE_MOONCAKE;
	else
		return false;
	return true;
}

const char *
rp_trace_format_name(rp_trace_format f)
{
	switch (f) {
	case RP_TRACE_AZURE:
		return "azure";
	case RP_TRACE_MOONCAKE:
		return "mooncake";
	default:
		return "auto";
	}
}

struct rp_trace *
rp_trace_load(const char *path, rp_trace_format format, GError **error)
{
	g_autofree char *text = NULL;
	g_autofree char *base = g_path_get_basename(path);
	g_autofree char *label = NULL;
	struct rp_trace *t;
	gsize len;
	bool ok;

	if (!g_file_get_contents(path, &text, &len, error))
		return NULL;
	if (format == RP_TRACE_AUTO)
		format = rp_trace_detect(path, text, len);
	label = g_strdup_printf("%s:%s", rp_trace_format_name(format), base);
	t = rp_trace_new(label);
	if (format == RP_TRACE_MOONCAKE)
		ok = rp_trace_parse_mooncake(t, text, len, base, error);
	else
		ok = rp_trace_parse_azure(t, text, len, base, error);
	if (ok && t->reqs->len == 0) {
		g_set_error(error, RP_ERROR, RP_ERROR_PARSE, "%s: no requests in the trace", base);
		ok = false;
	}
	if (!ok) {
		rp_trace_free(t);
		return NULL;
	}
	return t;
}

/* --- schedule ------------------------------------------------------- */

void
rp_schedule_build(struct rp_schedule *s, const struct rp_trace *t,
                  const struct rp_schedule_opts *o)
{
	double scale = o->rate_scale > 0 ? o->rate_scale : 1.0;

	memset(s, 0, sizeof *s);
	s->trace = t;
	s->items = g_array_new(FALSE, TRUE, sizeof(struct rp_item));
	for (guint i = 0; i < t->reqs->len; i++) {
		const struct rp_request *r = &g_array_index(t->reqs, struct rp_request, i);
		struct rp_item it = { .req = i };

		if (r->t < o->start_offset) {
			s->before_offset++;
			continue;
		}
		/* Stretching every gap by 1/scale keeps the burst shape. */
		it.t = (r->t - o->start_offset) / scale;
		if (o->duration > 0 && it.t >= o->duration) {
			s->after_duration = t->reqs->len - i;
			break;
		}
		it.input_tokens = r->input_tokens;
		if (o->max_prompt > 0 && it.input_tokens > o->max_prompt) {
			if (o->long_policy == RP_LONG_SKIP) {
				s->long_skipped++;
				continue;
			}
			it.input_tokens = o->max_prompt;
			s->long_truncated++;
		}
		it.output_tokens = MAX(r->output_tokens, 1u);
		if (o->max_output > 0 && it.output_tokens > o->max_output) {
			it.output_tokens = o->max_output;
			s->output_capped++;
		}
		if (o->max_requests > 0 && s->items->len >= o->max_requests) {
			s->over_max_requests = t->reqs->len - i;
			break;
		}
		g_array_append_val(s->items, it);
		s->span = it.t;
	}
}

void
rp_schedule_clear(struct rp_schedule *s)
{
	if (s->items)
		g_array_free(s->items, TRUE);
	memset(s, 0, sizeof *s);
}
