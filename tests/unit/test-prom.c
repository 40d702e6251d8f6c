/*
 * The Prometheus text writer (src/obs/prom.c; issue 11's exposition
 * checks): escaping of help texts and label values, value spelling, metric
 * names, and histogram invariants (cumulative buckets, +Inf equals the
 * count, the sum).
 */
#include "build-config.h"

#include <math.h>
#include <string.h>

#include <glib.h>

#include "obs/prom.h"
#include "serve/counters.h"

static void
test_family_and_escaping(void)
{
	GString *out = g_string_new(NULL);
	const char *labels[] = { "engine", "a\"b\\c\nd", "role", "decode", NULL };

	nw_prom_family(out, "narwhal_x", "gauge", "one \\ two\nthree \"q\"");
	nw_prom_sample(out, "narwhal_x", labels, 3);
	g_assert_cmpstr(out->str, ==,
	                "# HELP narwhal_x one \\\\ two\\nthree \"q\"\n"
	                "# TYPE narwhal_x gauge\n"
	                "narwhal_x{engine=\"a\\\"b\\\\c\\nd\",role=\"decode\"} 3\n");
	g_string_free(out, TRUE);
}

static void
test_values(void)
{
	GString *out = g_string_new(NULL);

	nw_prom_sample(out, "a", NULL, 0.25);
	nw_prom_sample(out, "b", NULL, NAN);
	nw_prom_sample(out, "c", NULL, INFINITY);
	nw_prom_sample(out, "d", NULL, -INFINITY);
	nw_prom_sample(out, "e", NULL, 12345678901.0);
	g_assert_cmpstr(out->str, ==, "a 0.25\nb NaN\nc +Inf\nd -Inf\ne 12345678901\n");
	g_string_free(out, TRUE);
}

static void
test_names(void)
{
	g_assert_true(nw_prom_name_valid("narwhal_plugin_admission_open_refusals_total"));
	g_assert_true(nw_prom_name_valid("vllm:num_requests_running"));
	g_assert_true(nw_prom_name_valid("_x"));
	g_assert_false(nw_prom_name_valid("9x"));
	g_assert_false(nw_prom_name_valid("a-b"));
	g_assert_false(nw_prom_name_valid(""));
	g_assert_false(nw_prom_name_valid(NULL));
}

static void
test_histogram(void)
{
	static const double bounds[] = { 0.1, 0.5, 1 };
	static const struct nw_histogram_scale scale = { bounds, G_N_ELEMENTS(bounds) };
	struct nw_histogram h = { 0 };
	GString *out = g_string_new(NULL);
	const char *labels[] = { "route", "chat", NULL };

	nw_histogram_observe(&h, &scale, 0.05);
	nw_histogram_observe(&h, &scale, 0.1);  /* on a bound: that bucket (le) */
	nw_histogram_observe(&h, &scale, 0.7);
	nw_histogram_observe(&h, &scale, 3);
	nw_histogram_observe(&h, &scale, NAN); /* ignored */
	nw_prom_histogram_write(out, "narwhal_ttft_seconds", labels, &scale, &h);
	g_assert_cmpstr(out->str, ==,
	                "narwhal_ttft_seconds_bucket{route=\"chat\",le=\"0.1\"} 2\n"
	                "narwhal_ttft_seconds_bucket{route=\"chat\",le=\"0.5\"} 2\n"
	                "narwhal_ttft_seconds_bucket{route=\"chat\",le=\"1\"} 3\n"
	                "narwhal_ttft_seconds_bucket{route=\"chat\",le=\"+Inf\"} 4\n"
	                "narwhal_ttft_seconds_sum{route=\"chat\"} 3.85\n"
	                "narwhal_ttft_seconds_count{route=\"chat\"} 4\n");
	g_string_free(out, TRUE);
}

/* Read "name{...le="x"} n" lines back: bucket counts never go down and the
 * +Inf bucket equals _count, for many random observations on a scale of
 * the daemon's shape (issue 11: histogram invariants). */
static void
test_histogram_invariants(void)
{
	static const double bounds[] = { 0.001, 0.01, 0.1, 1, 10, 100 };
	static const struct nw_histogram_scale scale = { bounds, G_N_ELEMENTS(bounds) };
	struct nw_histogram h = { 0 };
	GString *out = g_string_new(NULL);
	g_auto(GStrv) lines = NULL;
	GRand *rng = g_rand_new_with_seed(11);
	uint64_t last = 0, inf = 0, count = 0;
	double sum = 0, seen_sum = -1;
	unsigned buckets = 0;

	for (int i = 0; i < 5000; i++) {
		/* Spread over six decades, some exactly on a bound. */
		double v = i % 97 == 0 ? bounds[i % G_N_ELEMENTS(bounds)]
		                       : pow(10, g_rand_double_range(rng, -4, 3));

		nw_histogram_observe(&h, &scale, v);
		sum += v;
	}
	nw_prom_histogram_write(out, "x_seconds", NULL, &scale, &h);
	lines = g_strsplit(out->str, "\n", -1);
	for (char **l = lines; *l != NULL && **l != '\0'; l++) {
		const char *sp = strrchr(*l, ' ');

		g_assert_nonnull(sp);
		if (g_str_has_prefix(*l, "x_seconds_bucket{le=\"")) {
			uint64_t n = g_ascii_strtoull(sp + 1, NULL, 10);

			g_assert_cmpuint(n, >=, last);
			last = n;
			buckets++;
			if (strstr(*l, "le=\"+Inf\"") != NULL)
				inf = n;
		} else if (g_str_has_prefix(*l, "x_seconds_count ")) {
			count = g_ascii_strtoull(sp + 1, NULL, 10);
		} else if (g_str_has_prefix(*l, "x_seconds_sum ")) {
			seen_sum = g_ascii_strtod(sp + 1, NULL);
		}
	}
	g_assert_cmpuint(buckets, ==, G_N_ELEMENTS(bounds) + 1);
	g_assert_cmpuint(count, ==, 5000);
	g_assert_cmpuint(inf, ==, count);
	g_assert_cmpfloat_with_epsilon(seen_sum, sum, sum * 1e-12);
	/* Every value exactly on a bound landed in that bound's bucket: the
	 * first bucket holds at least the 0.001s. */
	g_assert_cmpuint(h.counts[0], >=, 1);
	g_rand_free(rng);
	g_string_free(out, TRUE);
}

/* Label text rendered once and shared (the per-engine families), with
 * further labels after it; escaping applies to the shared text too. */
static void
test_shared_labels(void)
{
	GString *pre = g_string_new(NULL), *out = g_string_new(NULL);
	const char *engine[] = { "engine", "p\"0", NULL };
	const char *leg[] = { "leg", "prefill", NULL };

	nw_prom_labels_append(pre, engine);
	g_assert_cmpstr(pre->str, ==, "engine=\"p\\\"0\"");
	nw_prom_sample_pre(out, "a_total", pre->str, leg, 7);
	nw_prom_sample_pre(out, "b", pre->str, NULL, 0);
	nw_prom_sample_pre(out, "c", NULL, leg, -3);
	nw_prom_sample_pre(out, "d", "", NULL, 18446744073709549568.0);
	g_assert_cmpstr(out->str, ==,
	                "a_total{engine=\"p\\\"0\",leg=\"prefill\"} 7\n"
	                "b{engine=\"p\\\"0\"} 0\n"
	                "c{leg=\"prefill\"} -3\n"
	                "d 1.844674407370955e+19\n");
	g_string_free(pre, TRUE);
	g_string_free(out, TRUE);
}

/* A label value may hold any UTF-8 and every special character; an empty
 * value is written as such. */
static void
test_label_values(void)
{
	GString *out = g_string_new(NULL);
	const char *labels[] = { "a", "", "b", "\\\\", "c", "é \"\n\"", NULL };

	nw_prom_sample(out, "x", labels, 1);
	g_assert_cmpstr(out->str, ==, "x{a=\"\",b=\"\\\\\\\\\",c=\"é \\\"\\n\\\"\"} 1\n");
	g_string_free(out, TRUE);
}

/* The outcome label set (serve/counters.c): sorted for its binary search,
 * and holding every code docs/api.md lists in its error tables, so no code
 * a client can get is counted as "other". */
static void
test_outcome_codes(void)
{
	g_autofree char *path = g_test_build_filename(G_TEST_DIST, "..", "docs", "api.md", NULL);
	g_autofree char *api = NULL;
	g_autoptr(GRegex) row = g_regex_new("^\\| [0-9]{3} \\| ([^|]*)\\|", G_REGEX_MULTILINE, 0,
	                                    NULL);
	g_autoptr(GRegex) code = g_regex_new("`([a-z_]+)`", 0, 0, NULL);
	g_autoptr(GMatchInfo) rows = NULL;
	static const char *const framing[] = {
		"ambiguous_framing", "invalid_content_length", "unsupported_transfer_encoding",
		"invalid_transfer_encoding", "invalid_header_name", NULL,
	};
	unsigned seen = 0;

	for (uint32_t i = 1; i < NW_OUTCOME_N_CODES; i++)
		g_assert_cmpint(strcmp(nw_outcome_codes[i - 1], nw_outcome_codes[i]), <, 0);
	for (uint32_t i = 0; i < NW_OUTCOME_N_CODES; i++)
		g_assert_cmpuint(nw_outcome_code_index(nw_outcome_codes[i]), ==, i);
	g_assert_cmpstr(nw_outcome_codes[nw_outcome_code_index(NULL)], ==, "none");
	g_assert_cmpstr(nw_outcome_codes[nw_outcome_code_index("no_such_code")], ==, "other");
	g_assert_cmpuint(nw_outcome_statuses[nw_outcome_status_index(418)], ==, 0);
	g_assert_cmpuint(nw_outcome_statuses[nw_outcome_status_index(504)], ==, 504);

	g_assert_true(g_file_get_contents(path, &api, NULL, NULL));
	g_regex_match(row, api, 0, &rows);
	while (g_match_info_matches(rows)) {
		g_autofree char *cell = g_match_info_fetch(rows, 1);
		g_autoptr(GMatchInfo) codes = NULL;

		g_regex_match(code, cell, 0, &codes);
		while (g_match_info_matches(codes)) {
			g_autofree char *c = g_match_info_fetch(codes, 1);

			/* The framing refusals are answered by the HTTP server
			 * before the data plane sees the request. */
			if (!g_strv_contains(framing, c))
				g_assert_cmpstr(nw_outcome_codes[nw_outcome_code_index(c)], ==, c);
			seen++;
			g_match_info_next(codes, NULL);
		}
		g_match_info_next(rows, NULL);
	}
	g_assert_cmpuint(seen, >=, 30);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/prom/issue-11/family-and-escaping", test_family_and_escaping);
	g_test_add_func("/prom/issue-11/values", test_values);
	g_test_add_func("/prom/issue-11/names", test_names);
	g_test_add_func("/prom/issue-11/histogram", test_histogram);
	g_test_add_func("/prom/issue-11/histogram-invariants", test_histogram_invariants);
	g_test_add_func("/prom/issue-11/shared-labels", test_shared_labels);
	g_test_add_func("/prom/issue-11/label-values", test_label_values);
	g_test_add_func("/prom/issue-11/outcome-codes", test_outcome_codes);
	return g_test_run();
}
