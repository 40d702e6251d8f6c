/*
 * Percentile math, the run summary (counts, statuses, Retry-After, rates),
 * SLO attainment and goodput by hand-computed examples, and the outputs:
 * the JSON summary, the CSV rows (quoting included), and the table.
 */
#include "build-config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include <glib/gstdio.h>

#include "tools/replay/report.h"
#include "tools/replay/stats.h"

static void
test_percentiles(void)
{
	const double v[] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 };
	const double unsorted[] = { 10, NAN, 1, 5, 3, 9, 2, 8, 4, 7, 6, INFINITY };
	struct rp_latency l;

	/* rank = p/100 * (n - 1), interpolated: p50 of 1..10 is 5.5. */
	g_assert_cmpfloat_with_epsilon(rp_percentile(v, 10, 50), 5.5, 1e-12);
	g_assert_cmpfloat_with_epsilon(rp_percentile(v, 10, 90), 9.1, 1e-12);
	g_assert_cmpfloat_with_epsilon(rp_percentile(v, 10, 99), 9.91, 1e-12);
	g_assert_cmpfloat(rp_percentile(v, 10, 0), ==, 1);
	g_assert_cmpfloat(rp_percentile(v, 10, 100), ==, 10);
	g_assert_cmpfloat(rp_percentile(v, 1, 99), ==, 1);
	g_assert_true(isnan(rp_percentile(v, 0, 50)));
	/* The summary sorts and skips what is not finite. */
	rp_latency_of(unsorted, G_N_ELEMENTS(unsorted), &l);
	g_assert_cmpuint(l.n, ==, 10);
	g_assert_cmpfloat_with_epsilon(l.mean, 5.5, 1e-12);
	g_assert_cmpfloat_with_epsilon(l.p50, 5.5, 1e-12);
	g_assert_cmpfloat_with_epsilon(l.p90, 9.1, 1e-12);
	g_assert_cmpfloat(l.max, ==, 10);
	rp_latency_of(unsorted, 0, &l);
	g_assert_cmpuint(l.n, ==, 0);
	g_assert_true(isnan(l.p50) && isnan(l.mean));
}

static struct rp_result
ok_result(uint32_t id, double sent, double ttft, double tpot, double e2e, uint32_t tokens)
{
	struct rp_result r = {
		.id = id, .scheduled = sent, .sent = sent, .finished = sent + e2e, .status = 200,
		.outcome = RP_OUT_OK, .ttft = ttft, .tpot = tpot, .e2e = e2e, .output_tokens = tokens,
		.usage_prompt = 100, .usage_completion = tokens, .retry_after = NAN,
		.input_tokens = 100, .max_tokens = tokens,
	};

	return r;
}

/* Ten requests over 9 s: six ok (two miss TTFT, one misses TPOT), a 429
 * with Retry-After, an in-band error, a stream without [DONE], and one
 * cancelled by the operator. */
static void
fill(struct rp_result *r)
{
	r[0] = ok_result(0, 0, 0.10, 0.020, 1.0, 46);
	r[1] = ok_result(1, 1, 0.20, 0.030, 2.0, 61);
	r[2] = ok_result(2, 2, 0.60, 0.020, 1.5, 46);  /* TTFT miss */
	r[3] = ok_result(3, 3, 0.30, 0.080, 4.0, 46);  /* TPOT miss */
	r[4] = ok_result(4, 4, 0.90, 0.090, 5.0, 46);  /* both miss */
	r[5] = ok_result(5, 5, 0.40, NAN, 0.4, 1);     /* one token: TPOT passes */
	r[6] = ok_result(6, 6, NAN, NAN, 0.01, 0);
	r[6].outcome = RP_OUT_HTTP;
	r[6].status = 429;
	r[6].retry_after = 7;
	r[6].error = (char *)"rate limited, \"slow down\"";
	r[7] = ok_result(7, 7, 0.1, 0.02, 0.5, 10);
	r[7].outcome = RP_OUT_ERROR_EVENT;
	r[8] = ok_result(8, 8, 0.1, 0.02, 0.5, 10);
	r[8].outcome = RP_OUT_INCOMPLETE;
	r[8].late = true;
	r[9] = ok_result(9, 9, NAN, NAN, NAN, 0);
	r[9].outcome = RP_OUT_CANCELLED;
	r[9].finished = 9.5;
}

static void
test_summary(void)
{
	struct rp_result r[11];
	struct rp_slo slo = { .ttft = 0.5, .tpot = 0.05 };
	struct rp_summary s;

	fill(r);
	r[10] = ok_result(10, 10, NAN, NAN, NAN, 0);
	r[10].outcome = RP_OUT_NOT_SENT;
	r[10].sent = r[10].finished = NAN;
	rp_summary_compute(r, 11, 10.0, &slo, &s);
	g_assert_cmpuint(s.scheduled, ==, 11);
	g_assert_cmpuint(s.sent, ==, 10);
	g_assert_cmpuint(s.ok, ==, 6);
	g_assert_cmpuint(s.failed, ==, 3); /* the cancelled one is neither */
	g_assert_cmpuint(s.late, ==, 1);
	g_assert_cmpuint(s.by_outcome[RP_OUT_HTTP], ==, 1);
	g_assert_cmpuint(s.by_outcome[RP_OUT_CANCELLED], ==, 1);
	g_assert_cmpuint(s.by_outcome[RP_OUT_NOT_SENT], ==, 1);
	g_assert_cmpuint(s.statuses->len, ==, 2);
	g_assert_cmpint(g_array_index(s.statuses, struct rp_status_count, 0).status, ==, 200);
	g_assert_cmpuint(g_array_index(s.statuses, struct rp_status_count, 0).n, ==, 9);
	g_assert_cmpint(g_array_index(s.statuses, struct rp_status_count, 1).status, ==, 429);
	g_assert_cmpuint(s.retry_after_n, ==, 1);
	g_assert_cmpfloat(s.retry_after_max, ==, 7);
	/* Latency over the six ok requests. */
	g_assert_cmpuint(s.ttft.n, ==, 6);
	g_assert_cmpfloat_with_epsilon(s.ttft.mean, (0.1 + 0.2 + 0.6 + 0.3 + 0.9 + 0.4) / 6, 1e-12);
	g_assert_cmpfloat_with_epsilon(s.ttft.p50, 0.35, 1e-12);
	g_assert_cmpuint(s.tpot.n, ==, 5);
	g_assert_cmpfloat_with_epsilon(s.tpot.p50, 0.03, 1e-12);
	g_assert_cmpfloat(s.e2e.max, ==, 5.0);
	/* Elapsed: the last end is request 4 at 4 + 5 = 9 s, then 9.5 (cancel). */
	g_assert_cmpfloat_with_epsilon(s.elapsed, 9.5, 1e-12);
	g_assert_cmpfloat_with_epsilon(s.offered_rate, 10.0 / 10.0, 1e-12);
	g_assert_cmpfloat_with_epsilon(s.throughput, 6 / 9.5, 1e-12);
	g_assert_cmpfloat_with_epsilon(s.output_token_rate, (46 * 4 + 61 + 1) / 9.5, 1e-9);
	/* SLO: 9 counted (sent, not cancelled). Met both: 0, 1, 5. TTFT: 0, 1,
	 * 3, 5. TPOT: 0, 1, 2, 5. */
	g_assert_true(s.slo_set);
	g_assert_cmpuint(s.met, ==, 3);
	g_assert_cmpuint(s.met_ttft, ==, 4);
	g_assert_cmpuint(s.met_tpot, ==, 4);
	g_assert_cmpfloat_with_epsilon(s.attainment, 3.0 / 9, 1e-12);
	g_assert_cmpfloat_with_epsilon(s.attainment_ttft, 4.0 / 9, 1e-12);
	g_assert_cmpfloat_with_epsilon(s.goodput, 3 / 9.5, 1e-12);
	rp_summary_clear(&s);

	/* Only a TTFT target: TPOT does not count. */
	slo.tpot = 0;
	rp_summary_compute(r, 11, 10.0, &slo, &s);
	g_assert_cmpuint(s.met, ==, 4);
	rp_summary_clear(&s);
	/* No target: attainment is the success ratio. */
	slo.ttft = 0;
	rp_summary_compute(r, 11, 10.0, &slo, &s);
	g_assert_false(s.slo_set);
	g_assert_cmpuint(s.met, ==, 6);
	rp_summary_clear(&s);
	/* Nothing at all. */
	rp_summary_compute(r, 0, 0, &slo, &s);
	g_assert_cmpuint(s.sent, ==, 0);
	g_assert_true(isnan(s.attainment) && isnan(s.offered_rate));
	rp_summary_clear(&s);
}

static void
test_slo_edges(void)
{
	struct rp_slo slo = { .ttft = 0.2, .tpot = 0.02 };
	struct rp_result r = ok_result(0, 0, 0.2, 0.02, 1, 10);

	g_assert_true(rp_slo_met(&r, &slo)); /* at the target is within it */
	r.ttft = 0.2000001;
	g_assert_false(rp_slo_met(&r, &slo));
	r.ttft = NAN; /* no token ever came */
	g_assert_false(rp_slo_met_ttft(&r, &slo));
	r = ok_result(0, 0, 0.1, 0.01, 1, 10);
	r.outcome = RP_OUT_INCOMPLETE; /* fast but failed: missed */
	g_assert_false(rp_slo_met(&r, &slo));
}

static struct rp_report *
report_new(struct rp_result *res, size_t n)
{
	struct rp_report *rep = g_new0(struct rp_report, 1);
	struct rp_report_run *rr = g_new0(struct rp_report_run, 1);
	struct rp_trace *t = rp_trace_new("unit");

	rep->url = "http://127.0.0.1:1";
	rep->api = "completions";
	rep->model = "m";
	rep->stream = true;
	rep->source = "unit";
	rep->slo.ttft = 0.5;
	rep->slo.tpot = 0.05;
	rep->runs = g_ptr_array_new();
	rr->scale = 2;
	for (size_t i = 0; i < n; i++)
		rp_trace_add(t, (double)i, 100, 46, 0, NULL, 0);
	rr->schedule.items = g_array_new(FALSE, TRUE, sizeof(struct rp_item));
	rr->schedule.trace = t;
	rr->schedule.span = 10;
	rr->schedule.long_skipped = 3;
	rr->run.results = res;
	rr->run.n = n;
	g_ptr_array_add(rep->runs, rr);
	rp_report_summarize(rep, rr);
	return rep;
}

static void
report_free(struct rp_report *rep)
{
	struct rp_report_run *rr = g_ptr_array_index(rep->runs, 0);

	rp_summary_clear(&rr->summary);
	rp_trace_free((struct rp_trace *)rr->schedule.trace);
	g_array_free(rr->schedule.items, TRUE);
	g_free(rr);
	g_ptr_array_free(rep->runs, TRUE);
	g_free(rep);
}

static void
test_json_output(void)
{
	struct rp_result r[10];
	struct rp_report *rep;
	json_t *doc, *run;
	GError *error = NULL;
	g_autofree char *dir = g_dir_make_tmp("replay-out-XXXXXX", &error);
	g_autofree char *file = g_build_filename(dir, "s.json", NULL);

	fill(r);
	rep = report_new(r, 10);
	g_assert_true(rp_report_write_json(file, rep, &error));
	g_assert_no_error(error);
	doc = json_load_file(file, 0, NULL);
	g_assert_nonnull(doc);
	g_assert_cmpstr(json_string_value(json_object_get(doc, "tool")), ==, "narwhal-replay");
	g_assert_cmpfloat(json_real_value(json_object_get(json_object_get(doc, "slo"), "ttft_s")), ==, 0.5);
	run = json_array_get(json_object_get(doc, "runs"), 0);
	g_assert_cmpfloat(json_real_value(json_object_get(run, "rate_scale")), ==, 2);
	g_assert_cmpint(json_integer_value(json_object_get(json_object_get(run, "counts"), "ok")), ==, 6);
	g_assert_cmpint(json_integer_value(json_object_get(json_object_get(json_object_get(run, "counts"),
	                                                                   "status"), "429")), ==, 1);
	g_assert_cmpint(json_integer_value(json_object_get(json_object_get(json_object_get(run, "counts"),
	                                                                   "outcomes"), "error_event")), ==, 1);
	g_assert_cmpint(json_integer_value(json_object_get(json_object_get(run, "schedule"),
	                                                   "long_prompts_skipped")), ==, 3);
	g_assert_cmpfloat_with_epsilon(json_real_value(json_object_get(json_object_get(run, "ttft_s"),
	                                                               "p50")), 0.35, 1e-9);
	g_assert_cmpfloat_with_epsilon(json_real_value(json_object_get(json_object_get(run, "slo"),
	                                                               "attainment")), 3.0 / 9, 1e-9);
	g_assert_cmpfloat_with_epsilon(json_real_value(json_object_get(json_object_get(run, "slo"),
	                                                               "goodput_rps")), 3 / 9.5, 1e-9);
	json_decref(doc);
	report_free(rep);
	g_unlink(file);
	g_rmdir(dir);
}

static void
test_csv_output(void)
{
	struct rp_result r[10];
	struct rp_report *rep;
	GError *error = NULL;
	g_autofree char *dir = g_dir_make_tmp("replay-out-XXXXXX", &error);
	g_autofree char *file = g_build_filename(dir, "r.csv", NULL);
	g_autofree char *text = NULL;
	g_auto(GStrv) lines = NULL;
	GString *f = g_string_new(NULL);

	rp_csv_field(f, "plain");
	g_string_append_c(f, '|');
	rp_csv_field(f, "a,\"b\"\nc");
	g_assert_cmpstr(f->str, ==, "plain|\"a,\"\"b\"\"\nc\"");
	g_string_free(f, TRUE);

	fill(r);
	rep = report_new(r, 10);
	g_assert_true(rp_report_write_csv(file, rep, &error));
	g_assert_true(g_file_get_contents(file, &text, NULL, NULL));
	lines = g_strsplit(text, "\n", -1);
	g_assert_cmpuint(g_strv_length(lines), ==, 12); /* header, 10 rows, "" */
	g_assert_true(g_str_has_prefix(lines[0], "rate_scale,id,request_id,phase,scheduled_s"));
	g_assert_cmpstr(lines[1], ==, "2,0,replay-0,,0.000000,0.000000,0,100,46,200,ok,0.100000,"
	                              "0.020000,1.000000,46,100,46,,1,");
	g_assert_cmpstr(lines[3], ==, "2,2,replay-2,,2.000000,2.000000,0,100,46,200,ok,0.600000,"
	                              "0.020000,1.500000,46,100,46,,0,");
	g_assert_cmpstr(lines[7], ==, "2,6,replay-6,,6.000000,6.000000,0,100,0,429,http_error,,,"
	                              "0.010000,0,100,0,7.000000,0,\"rate limited, \"\"slow down\"\"\"");
	g_assert_true(g_str_has_suffix(lines[10], ",cancelled,,,,0,100,0,,,"));
	report_free(rep);
	g_unlink(file);
	g_rmdir(dir);
}

static void
test_table(void)
{
	struct rp_result r[10];
	struct rp_report *rep;
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	fill(r);
	rep = report_new(r, 10);
	rp_report_table(f, rep);
	fclose(f);
	g_assert_nonnull(strstr(buf, "rate scale 2: 10 scheduled, 10 sent, 6 ok, 3 failed, 1 late"));
	g_assert_nonnull(strstr(buf, "429 x1 (Retry-After on 1, max 7 s)"));
	g_assert_nonnull(strstr(buf, "attainment 33.3%"));
	g_assert_nonnull(strstr(buf, "3 long prompts skipped"));
	g_assert_nonnull(strstr(buf, "  TTFT         6      416.7     350.0"));
	free(buf);
	report_free(rep);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/replay/stats/percentiles", test_percentiles);
	g_test_add_func("/replay/stats/summary", test_summary);
	g_test_add_func("/replay/stats/slo-edges", test_slo_edges);
	g_test_add_func("/replay/report/json", test_json_output);
	g_test_add_func("/replay/report/csv", test_csv_output);
	g_test_add_func("/replay/report/table", test_table);
	return g_test_run();
}
