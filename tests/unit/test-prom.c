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
	struct nw_prom_histogram h;
	GString *out = g_string_new(NULL);
	const char *labels[] = { "route", "chat", NULL };

	nw_prom_histogram_init(&h, bounds, G_N_ELEMENTS(bounds));
	nw_prom_histogram_observe(&h, 0.05);
	nw_prom_histogram_observe(&h, 0.1);  /* on a bound: that bucket */
	nw_prom_histogram_observe(&h, 0.7);
	nw_prom_histogram_observe(&h, 3);
	nw_prom_histogram_observe(&h, NAN); /* ignored */
	nw_prom_histogram_write(out, "narwhal_ttft_seconds", labels, &h);
	g_assert_cmpstr(out->str, ==,
	                "narwhal_ttft_seconds_bucket{route=\"chat\",le=\"0.1\"} 2\n"
	                "narwhal_ttft_seconds_bucket{route=\"chat\",le=\"0.5\"} 2\n"
	                "narwhal_ttft_seconds_bucket{route=\"chat\",le=\"1\"} 3\n"
	                "narwhal_ttft_seconds_bucket{route=\"chat\",le=\"+Inf\"} 4\n"
	                "narwhal_ttft_seconds_sum{route=\"chat\"} 3.85\n"
	                "narwhal_ttft_seconds_count{route=\"chat\"} 4\n");
	nw_prom_histogram_clear(&h);
	g_string_free(out, TRUE);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/prom/issue-11/family-and-escaping", test_family_and_escaping);
	g_test_add_func("/prom/issue-11/values", test_values);
	g_test_add_func("/prom/issue-11/names", test_names);
	g_test_add_func("/prom/issue-11/histogram", test_histogram);
	return g_test_run();
}
