#include "build-config.h"

#include "obs/prom.h"

#include <math.h>
#include <string.h>

static void
append_escaped(GString *out, const char *s, bool quote)
{
	for (; *s != '\0'; s++) {
		switch (*s) {
		case '\\': g_string_append(out, "\\\\"); break;
		case '\n': g_string_append(out, "\\n"); break;
		case '"':
			if (quote) {
				g_string_append(out, "\\\"");
				break;
			}
			/* fall through */
		default: g_string_append_c(out, *s); break;
		}
	}
}

void
nw_prom_family(GString *out, const char *name, const char *type, const char *help)
{
	g_string_append_printf(out, "# HELP %s ", name);
	append_escaped(out, help, false);
	g_string_append_printf(out, "\n# TYPE %s %s\n", name, type);
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
append_value(GString *out, double v)
{
	char buf[G_ASCII_DTOSTR_BUF_SIZE];

	if (isnan(v))
		g_string_append(out, "NaN");
	else if (isinf(v))
		g_string_append(out, v > 0 ? "+Inf" : "-Inf");
	else if (v == floor(v) && fabs(v) < 9007199254740992.0)
		g_string_append_printf(out, "%.0f", v);
	else
		g_string_append(out, shortest(buf, sizeof buf, v));
}

static void
append_labels(GString *out, const char *const *labels, const char *extra_key,
              const char *extra_value)
{
	bool any = false;

	if ((labels == NULL || labels[0] == NULL) && extra_key == NULL)
		return;
	g_string_append_c(out, '{');
	for (size_t i = 0; labels != NULL && labels[i] != NULL && labels[i + 1] != NULL; i += 2) {
		g_string_append_printf(out, "%s%s=\"", any ? "," : "", labels[i]);
		append_escaped(out, labels[i + 1], true);
		g_string_append_c(out, '"');
		any = true;
	}
	if (extra_key != NULL) {
		g_string_append_printf(out, "%s%s=\"", any ? "," : "", extra_key);
		append_escaped(out, extra_value, true);
		g_string_append_c(out, '"');
	}
	g_string_append_c(out, '}');
}

void
nw_prom_sample(GString *out, const char *name, const char *const *labels, double value)
{
	g_string_append(out, name);
	append_labels(out, labels, NULL, NULL);
	g_string_append_c(out, ' ');
	append_value(out, value);
	g_string_append_c(out, '\n');
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

void
nw_prom_histogram_init(struct nw_prom_histogram *h, const double *bounds, uint32_t n)
{
	h->bounds = bounds;
	h->n_bounds = n;
	h->counts = g_new0(uint64_t, n + 1);
	h->count = 0;
	h->sum = 0;
}

void
nw_prom_histogram_clear(struct nw_prom_histogram *h)
{
	g_free(h->counts);
	h->counts = NULL;
}

void
nw_prom_histogram_observe(struct nw_prom_histogram *h, double value)
{
	uint32_t lo = 0, hi = h->n_bounds;

	if (isnan(value))
		return;
	/* The first bound at or above the value. */
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (h->bounds[mid] < value)
			lo = mid + 1;
		else
			hi = mid;
	}
	h->counts[lo]++;
	h->count++;
	h->sum += value;
}

void
nw_prom_histogram_write(GString *out, const char *name, const char *const *labels,
                        const struct nw_prom_histogram *h)
{
	g_autofree char *bucket = g_strconcat(name, "_bucket", NULL);
	g_autofree char *sum = g_strconcat(name, "_sum", NULL);
	g_autofree char *count = g_strconcat(name, "_count", NULL);
	uint64_t cumulative = 0;
	char le[G_ASCII_DTOSTR_BUF_SIZE];

	for (uint32_t i = 0; i <= h->n_bounds; i++) {
		cumulative += h->counts[i];
		g_string_append(out, bucket);
		if (i < h->n_bounds)
			shortest(le, sizeof le, h->bounds[i]);
		else
			g_strlcpy(le, "+Inf", sizeof le);
		append_labels(out, labels, "le", le);
		g_string_append_printf(out, " %" G_GUINT64_FORMAT "\n", cumulative);
	}
	nw_prom_sample(out, sum, labels, h->sum);
	g_string_append(out, count);
	append_labels(out, labels, NULL, NULL);
	g_string_append_printf(out, " %" G_GUINT64_FORMAT "\n", h->count);
}
