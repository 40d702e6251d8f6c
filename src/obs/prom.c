#include "build-config.h"

#include "obs/prom.h"

#include <math.h>
#include <string.h>

/* Backslash and newline always; the quote inside label values. */
static void
append_escaped(GString *out, const char *s, bool quote)
{
	const char *special = quote ? "\\\n\"" : "\\\n";

	while (*s != '\0') {
		size_t run = strcspn(s, special);

		g_string_append_len(out, s, (gssize)run);
		s += run;
		if (*s == '\0')
			break;
		g_string_append(out, *s == '\\' ? "\\\\" : *s == '\n' ? "\\n" : "\\\"");
		s++;
	}
}

void
nw_prom_family(GString *out, const char *name, const char *type, const char *help)
{
	g_string_append(out, "# HELP ");
	g_string_append(out, name);
	g_string_append_c(out, ' ');
	append_escaped(out, help, false);
	g_string_append(out, "\n# TYPE ");
	g_string_append(out, name);
	g_string_append_c(out, ' ');
	g_string_append(out, type);
	g_string_append_c(out, '\n');
}

/* The shortest of 15 to 17 significant digits that reads back as v, in
 * the C locale. */
static const char *
shortest(char *buf, size_t len, double v)
{
	for (int digits = 15; digits <= 17; digits++) {
		char fmt[8];

		g_snprintf(fmt, sizeof fmt, "%%.%dg", digits);
		g_ascii_formatd(buf, (gint)len, fmt, v);
		if (g_ascii_strtod(buf, NULL) == v)
			break;
	}
	return buf;
}

static void
append_u64(GString *out, uint64_t v)
{
	char buf[24];
	size_t i = sizeof buf;

	do {
		buf[--i] = (char)('0' + v % 10);
		v /= 10;
	} while (v != 0);
	g_string_append_len(out, buf + i, (gssize)(sizeof buf - i));
}

static void
append_value(GString *out, double v)
{
	char buf[G_ASCII_DTOSTR_BUF_SIZE];

	if (isnan(v)) {
		g_string_append(out, "NaN");
	} else if (isinf(v)) {
		g_string_append(out, v > 0 ? "+Inf" : "-Inf");
	} else if (v == floor(v) && fabs(v) < 9007199254740992.0) {
		/* Whole numbers, the counters' and most gauges' values: no
		 * printf on this path (a large fleet's scrape is mostly these). */
		if (v < 0)
			g_string_append_c(out, '-');
		append_u64(out, (uint64_t)fabs(v));
	} else {
		g_string_append(out, shortest(buf, sizeof buf, v));
	}
}

void
nw_prom_labels_append(GString *out, const char *const *labels)
{
	for (size_t i = 0; labels != NULL && labels[i] != NULL && labels[i + 1] != NULL; i += 2) {
		if (i > 0)
			g_string_append_c(out, ',');
		g_string_append(out, labels[i]);
		g_string_append(out, "=\"");
		append_escaped(out, labels[i + 1], true);
		g_string_append_c(out, '"');
	}
}

static void
append_labels(GString *out, const char *pre, const char *const *labels, const char *extra_key,
              const char *extra_value)
{
	bool any = pre != NULL && *pre != '\0';
	bool more = labels != NULL && labels[0] != NULL;

	if (!any && !more && extra_key == NULL)
		return;
	g_string_append_c(out, '{');
	if (any)
		g_string_append(out, pre);
	if (more) {
		if (any)
			g_string_append_c(out, ',');
		nw_prom_labels_append(out, labels);
		any = true;
	}
	if (extra_key != NULL) {
		if (any)
			g_string_append_c(out, ',');
		g_string_append(out, extra_key);
		g_string_append(out, "=\"");
		append_escaped(out, extra_value, true);
		g_string_append_c(out, '"');
	}
	g_string_append_c(out, '}');
}

void
nw_prom_sample_pre(GString *out, const char *name, const char *pre, const char *const *labels,
                   double value)
{
	g_string_append(out, name);
	append_labels(out, pre, labels, NULL, NULL);
	g_string_append_c(out, ' ');
	append_value(out, value);
	g_string_append_c(out, '\n');
}

void
nw_prom_sample(GString *out, const char *name, const char *const *labels, double value)
{
	nw_prom_sample_pre(out, name, NULL, labels, value);
}

bool
nw_prom_name_valid(const char *name)
{
	if (name == NULL || *name == '\0' || g_ascii_isdigit(*name))
		return false;
	for (const char *p = name; *p != '\0'; p++) {
		if (!g_ascii_isalnum(*p) && *p != '_' && *p != ':')
			return false;
	}
	return true;
}

static void
append_suffixed(GString *out, const char *name, const char *suffix)
{
	g_string_append(out, name);
	g_string_append(out, suffix);
}

void
nw_prom_histogram_write(GString *out, const char *name, const char *const *labels,
                        const struct nw_histogram_scale *scale, const struct nw_histogram *h)
{
	uint64_t cumulative = 0;
	char le[G_ASCII_DTOSTR_BUF_SIZE];

	for (uint32_t i = 0; i <= scale->n; i++) {
		cumulative += h->counts[i];
		append_suffixed(out, name, "_bucket");
		if (i < scale->n)
			shortest(le, sizeof le, scale->bounds[i]);
		else
			g_strlcpy(le, "+Inf", sizeof le);
		append_labels(out, NULL, labels, "le", le);
		g_string_append_c(out, ' ');
		append_u64(out, cumulative);
		g_string_append_c(out, '\n');
	}
	append_suffixed(out, name, "_sum");
	append_labels(out, NULL, labels, NULL, NULL);
	g_string_append_c(out, ' ');
	append_value(out, h->sum);
	g_string_append_c(out, '\n');
	append_suffixed(out, name, "_count");
	append_labels(out, NULL, labels, NULL, NULL);
	g_string_append_c(out, ' ');
	append_u64(out, h->count);
	g_string_append_c(out, '\n');
}
