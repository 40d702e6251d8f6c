/*
 * narwhal-replay's trace readers and schedules: the Azure CSV (7-digit
 * fractions, a last line without newline, CR LF, header by name), the
 * Mooncake JSONL (ms timestamps, hash ids), format detection, and the
 * schedule: rate scaling by stretching gaps, offset, duration, count, and
 * the prompt and output caps. The copied traces in ../shared/traces are
 * checked against latency-models.md 3.3 when they are present.
 */
#include "build-config.h"

#include <math.h>
#include <string.h>

#include <glib/gstdio.h>

#include "tools/replay/trace.h"

static const struct rp_request *
req(const struct rp_trace *t, guint i)
{
	return &g_array_index(t->reqs, struct rp_request, i);
}

static void
test_azure_time(void)
{
	int64_t a, b;

	g_assert_true(rp_parse_azure_time("2023-11-16 18:17:03.9799600", 27, &a));
	g_assert_true(rp_parse_azure_time("2023-11-16 18:17:04.0319600", 27, &b));
	g_assert_cmpint(b - a, ==, 52000000); /* 0.0520000 s */
	/* 1970-01-01 and a known epoch second (2023-11-16 18:17:03 UTC). */
	g_assert_true(rp_parse_azure_time("1970-01-01 00:00:00", 19, &a));
	g_assert_cmpint(a, ==, 0);
	g_assert_true(rp_parse_azure_time("2023-11-16 18:17:03", 19, &a));
	g_assert_cmpint(a, ==, INT64_C(1700158623) * 1000000000);
	/* The 7th fractional digit survives: 100 ns. */
	g_assert_true(rp_parse_azure_time("2023-11-16 18:17:03.0000001", 27, &b));
	g_assert_cmpint(b - a, ==, 100);
	/* Leap day, across a month, and an ISO 'T'. */
	g_assert_true(rp_parse_azure_time("2024-02-29 00:00:00", 19, &a));
	g_assert_true(rp_parse_azure_time("2024-03-01T00:00:00", 19, &b));
	g_assert_cmpint(b - a, ==, INT64_C(86400) * 1000000000);
	g_assert_false(rp_parse_azure_time("2023-11-16", 10, &a));
	g_assert_false(rp_parse_azure_time("2023-13-16 18:17:03", 19, &a));
	g_assert_false(rp_parse_azure_time("2023-11-16 18:17:03.", 20, &a));
	g_assert_false(rp_parse_azure_time("2023-11-16 18:17:03x", 20, &a));
}

static void
test_azure_parse(void)
{
	/* The real header, 7-digit fractions, and no newline at the end. */
	static const char text[] =
		"TIMESTAMP,ContextTokens,GeneratedTokens\n"
		"2023-11-16 18:17:03.9799600,4808,10\n"
		"2023-11-16 18:17:04.0319600,3180,8\n"
		"2023-11-16 18:17:04.0781490,110,27";
	struct rp_trace *t = rp_trace_new("azure");
	GError *error = NULL;

	g_assert_true(rp_trace_parse_azure(t, text, strlen(text), "x.csv", &error));
	g_assert_no_error(error);
	g_assert_cmpuint(t->reqs->len, ==, 3);
	g_assert_cmpfloat(req(t, 0)->t, ==, 0);
	g_assert_cmpfloat_with_epsilon(req(t, 1)->t, 0.052, 1e-9);
	g_assert_cmpfloat_with_epsilon(req(t, 2)->t, 0.098189, 1e-9);
	g_assert_cmpuint(req(t, 0)->input_tokens, ==, 4808);
	g_assert_cmpuint(req(t, 0)->output_tokens, ==, 10);
	g_assert_cmpuint(req(t, 2)->input_tokens, ==, 110);
	g_assert_cmpuint(req(t, 2)->output_tokens, ==, 27);
	g_assert_cmpuint(req(t, 2)->n_hash, ==, 0);
	rp_trace_free(t);
}

static void
test_azure_variants(void)
{
	/* CR LF, reordered columns, blank lines, a trailing newline, and rows
	 * out of order (sorted on read). */
	static const char text[] =
		"GeneratedTokens,TIMESTAMP,ContextTokens\r\n"
		"5,2023-11-16 18:00:01.5,100\r\n"
		"\r\n"
		"7,2023-11-16 18:00:00.25,200\r\n";
	static const char no_header[] = "2023-11-16 18:00:00,1,2\n2023-11-16 18:00:02,3,4";
	static const char bad_ts[] = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16,1,2\n";
	static const char bad_num[] = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
	                              "2023-11-16 18:00:00,-1,2\n";
	static const char bad_header[] = "TIME,In,Out\n2023-11-16 18:00:00,1,2\n";
	struct rp_trace *t = rp_trace_new("azure");
	GError *error = NULL;

	g_assert_true(rp_trace_parse_azure(t, text, strlen(text), "v.csv", &error));
	g_assert_no_error(error);
	g_assert_cmpuint(t->reqs->len, ==, 2);
	g_assert_cmpuint(req(t, 0)->input_tokens, ==, 200);
	g_assert_cmpuint(req(t, 0)->output_tokens, ==, 7);
	g_assert_cmpfloat_with_epsilon(req(t, 1)->t, 1.25, 1e-9);
	rp_trace_free(t);

	t = rp_trace_new("azure");
	g_assert_true(rp_trace_parse_azure(t, no_header, strlen(no_header), "n.csv", &error));
	g_assert_cmpuint(t->reqs->len, ==, 2);
	g_assert_cmpfloat_with_epsilon(req(t, 1)->t, 2.0, 1e-9);
	rp_trace_free(t);

	t = rp_trace_new("azure");
	g_assert_false(rp_trace_parse_azure(t, bad_ts, strlen(bad_ts), "b.csv", &error));
	g_assert_error(error, RP_ERROR, RP_ERROR_PARSE);
	g_assert_nonnull(strstr(error->message, "b.csv:2"));
	g_clear_error(&error);
	rp_trace_free(t);

	t = rp_trace_new("azure");
	g_assert_false(rp_trace_parse_azure(t, bad_num, strlen(bad_num), "b.csv", &error));
	g_assert_nonnull(strstr(error->message, "b.csv:2"));
	g_clear_error(&error);
	rp_trace_free(t);

	t = rp_trace_new("azure");
	g_assert_false(rp_trace_parse_azure(t, bad_header, strlen(bad_header), "h.csv", &error));
	g_assert_nonnull(strstr(error->message, "header"));
	g_clear_error(&error);
	rp_trace_free(t);
}

static void
test_mooncake_parse(void)
{
	static const char text[] =
		"{\"timestamp\": 0, \"input_length\": 6758, \"output_length\": 500, "
		"\"hash_ids\": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]}\n"
		"{\"timestamp\": 0, \"input_length\": 1000, \"output_length\": 3, \"hash_ids\": [0, 14]}\n"
		"\n"
		"{\"timestamp\": 1500, \"input_length\": 10, \"output_length\": 1}";
	static const char bad[] = "{\"timestamp\": 0, \"input_length\": 1}\n";
	static const char bad_json[] = "{\"timestamp\": 0,\n";
	struct rp_trace *t = rp_trace_new("mooncake");
	GError *error = NULL;
	const uint32_t *h;

	g_assert_true(rp_trace_parse_mooncake(t, text, strlen(text), "m.jsonl", &error));
	g_assert_no_error(error);
	g_assert_cmpuint(t->reqs->len, ==, 3);
	/* Equal timestamps keep the file order. */
	g_assert_cmpuint(req(t, 0)->input_tokens, ==, 6758);
	g_assert_cmpuint(req(t, 1)->input_tokens, ==, 1000);
	g_assert_cmpfloat_with_epsilon(req(t, 2)->t, 1.5, 1e-12); /* ms -> s */
	g_assert_cmpuint(req(t, 0)->n_hash, ==, 14);
	h = rp_trace_hashes(t, req(t, 1));
	g_assert_cmpuint(req(t, 1)->n_hash, ==, 2);
	g_assert_cmpuint(h[0], ==, 0);
	g_assert_cmpuint(h[1], ==, 14);
	g_assert_null(rp_trace_hashes(t, req(t, 2)));
	rp_trace_free(t);

	t = rp_trace_new("mooncake");
	g_assert_false(rp_trace_parse_mooncake(t, bad, strlen(bad), "m.jsonl", &error));
	g_assert_nonnull(strstr(error->message, "m.jsonl:1"));
	g_clear_error(&error);
	rp_trace_free(t);
	t = rp_trace_new("mooncake");
	g_assert_false(rp_trace_parse_mooncake(t, bad_json, strlen(bad_json), "m.jsonl", &error));
	g_clear_error(&error);
	rp_trace_free(t);
}

static void
test_detect_and_load(void)
{
	GError *error = NULL;
	g_autofree char *dir = g_dir_make_tmp("replay-trace-XXXXXX", &error);
	g_autofree char *plain = g_build_filename(dir, "trace.txt", NULL);
	g_autofree char *empty = g_build_filename(dir, "empty.csv", NULL);
	struct rp_trace *t;
	rp_trace_format f;

	g_assert_cmpint(rp_trace_detect("a.csv", "{", 1), ==, RP_TRACE_AZURE);
	g_assert_cmpint(rp_trace_detect("a.jsonl", "T", 1), ==, RP_TRACE_MOONCAKE);
	g_assert_cmpint(rp_trace_detect("a", "  {\"timestamp\"", 14), ==, RP_TRACE_MOONCAKE);
	g_assert_cmpint(rp_trace_detect("a", "TIMESTAMP", 9), ==, RP_TRACE_AZURE);
	g_assert_true(rp_trace_format_parse("mooncake", &f));
	g_assert_cmpint(f, ==, RP_TRACE_MOONCAKE);
	g_assert_false(rp_trace_format_parse("csv", &f));

	/* Content decides without a known extension. */
	g_assert_true(g_file_set_contents(plain, "{\"timestamp\": 5, \"input_length\": 3, "
	                                  "\"output_length\": 4}\n", -1, NULL));
	t = rp_trace_load(plain, RP_TRACE_AUTO, &error);
	g_assert_no_error(error);
	g_assert_cmpstr(t->label, ==, "mooncake:trace.txt");
	g_assert_cmpfloat(req(t, 0)->t, ==, 0); /* rebased to the first row */
	rp_trace_free(t);

	g_assert_true(g_file_set_contents(empty, "TIMESTAMP,ContextTokens,GeneratedTokens\n", -1, NULL));
	g_assert_null(rp_trace_load(empty, RP_TRACE_AUTO, &error));
	g_assert_nonnull(strstr(error->message, "no requests"));
	g_clear_error(&error);
	g_assert_null(rp_trace_load("/nonexistent/x.csv", RP_TRACE_AUTO, &error));
	g_clear_error(&error);
	g_unlink(plain);
	g_unlink(empty);
	g_rmdir(dir);
}

/* Ten requests one second apart, prompts 1000, 2000, ... 10000. */
static struct rp_trace *
ladder(void)
{
	struct rp_trace *t = rp_trace_new("ladder");

	for (uint32_t i = 0; i < 10; i++)
		rp_trace_add(t, i, (i + 1) * 1000, (i + 1) * 10, 0, NULL, 0);
	return t;
}

static void
test_schedule_scale(void)
{
	struct rp_trace *t = ladder();
	struct rp_schedule s;
	struct rp_schedule_opts o = { .rate_scale = 2.0 };

	rp_schedule_build(&s, t, &o);
	g_assert_cmpuint(s.items->len, ==, 10);
	/* Twice the rate: every gap halved, the shape kept. */
	for (guint i = 0; i < 10; i++)
		g_assert_cmpfloat_with_epsilon(g_array_index(s.items, struct rp_item, i).t, i * 0.5, 1e-12);
	g_assert_cmpfloat_with_epsilon(s.span, 4.5, 1e-12);
	rp_schedule_clear(&s);

	o.rate_scale = 0.5;
	rp_schedule_build(&s, t, &o);
	g_assert_cmpfloat_with_epsilon(g_array_index(s.items, struct rp_item, 3).t, 6.0, 1e-12);
	rp_schedule_clear(&s);
	rp_trace_free(t);
}

static void
test_schedule_bounds(void)
{
	struct rp_trace *t = ladder();
	struct rp_schedule s;
	struct rp_schedule_opts o = { .rate_scale = 2.0, .start_offset = 2.0, .duration = 2.0 };

	/* Offset in trace time (skips rows 0, 1), duration in run time after
	 * scaling: rows 2..5 land at 0, 0.5, 1.0, 1.5. */
	rp_schedule_build(&s, t, &o);
	g_assert_cmpuint(s.items->len, ==, 4);
	g_assert_cmpuint(s.before_offset, ==, 2);
	g_assert_cmpuint(s.after_duration, ==, 4);
	g_assert_cmpfloat(g_array_index(s.items, struct rp_item, 0).t, ==, 0);
	g_assert_cmpuint(g_array_index(s.items, struct rp_item, 0).input_tokens, ==, 3000);
	rp_schedule_clear(&s);

	o = (struct rp_schedule_opts){ .rate_scale = 1, .max_requests = 3 };
	rp_schedule_build(&s, t, &o);
	g_assert_cmpuint(s.items->len, ==, 3);
	g_assert_cmpuint(s.over_max_requests, ==, 7);
	rp_schedule_clear(&s);
	rp_trace_free(t);
}

static void
test_schedule_caps(void)
{
	struct rp_trace *t = ladder();
	struct rp_schedule s;
	struct rp_schedule_opts o = { .rate_scale = 1, .max_prompt = 4500, .max_output = 50,
	                              .max_requests = 3 };

	/* Skipped prompts do not use up --max-requests. */
	rp_schedule_build(&s, t, &o);
	g_assert_cmpuint(s.items->len, ==, 3);
	g_assert_cmpuint(s.long_skipped, ==, 0);
	rp_schedule_clear(&s);
	o.max_requests = 0;
	rp_schedule_build(&s, t, &o);
	g_assert_cmpuint(s.items->len, ==, 4);
	g_assert_cmpuint(s.long_skipped, ==, 6);
	g_assert_cmpuint(s.output_capped, ==, 0);
	rp_schedule_clear(&s);

	o.long_policy = RP_LONG_TRUNCATE;
	o.max_output = 35;
	rp_schedule_build(&s, t, &o);
	g_assert_cmpuint(s.items->len, ==, 10);
	g_assert_cmpuint(s.long_truncated, ==, 6);
	g_assert_cmpuint(s.output_capped, ==, 7);
	g_assert_cmpuint(g_array_index(s.items, struct rp_item, 9).input_tokens, ==, 4500);
	g_assert_cmpuint(g_array_index(s.items, struct rp_item, 9).output_tokens, ==, 35);
	g_assert_cmpuint(g_array_index(s.items, struct rp_item, 1).output_tokens, ==, 20);
	rp_schedule_clear(&s);
	rp_trace_free(t);
}

/* The copied traces, against the statistics in latency-models.md 3.3. */
static void
check_shared(const char *name, guint rows, double span, double rate, double in_mean,
             double out_mean, uint32_t in_max)
{
	g_autofree char *path = g_build_filename(g_getenv("G_TEST_SRCDIR") ? g_getenv("G_TEST_SRCDIR") : ".",
	                                         "..", "..", "shared", "traces", name, NULL);
	GError *error = NULL;
	struct rp_trace *t;
	double in = 0, out = 0;
	uint32_t max = 0;

	if (!g_file_test(path, G_FILE_TEST_EXISTS)) {
		g_test_skip("the shared traces are not next to the source tree");
		return;
	}
	t = rp_trace_load(path, RP_TRACE_AUTO, &error);
	g_assert_no_error(error);
	g_assert_cmpuint(t->reqs->len, ==, rows);
	for (guint i = 0; i < t->reqs->len; i++) {
		in += req(t, i)->input_tokens;
		out += req(t, i)->output_tokens;
		max = MAX(max, req(t, i)->input_tokens);
		if (i > 0)
			g_assert_cmpfloat(req(t, i)->t, >=, req(t, i - 1)->t);
	}
	g_assert_cmpfloat(fabs(req(t, rows - 1)->t - span), <, 1.0);
	g_assert_cmpfloat(fabs(rows / req(t, rows - 1)->t - rate), <, 0.01);
	g_assert_cmpfloat(fabs(in / rows - in_mean), <, 1.0);
	g_assert_cmpfloat(fabs(out / rows - out_mean), <, 1.0);
	g_assert_cmpuint(max, ==, in_max);
	rp_trace_free(t);
}

static void
test_shared_traces(void)
{
	check_shared("AzureLLMInferenceTrace_code.csv", 8819, 3436, 2.57, 2048, 28, 7437);
	check_shared("AzureLLMInferenceTrace_conv.csv", 19366, 3502, 5.53, 1155, 211, 14050);
	check_shared("conversation_trace.jsonl", 12031, 3537, 3.40, 12035, 343, 126195);
	check_shared("synthetic_trace.jsonl", 3993, 1022, 3.91, 15325, 149, 191378);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/replay/trace/azure-time", test_azure_time);
	g_test_add_func("/replay/trace/azure", test_azure_parse);
	g_test_add_func("/replay/trace/azure-variants", test_azure_variants);
	g_test_add_func("/replay/trace/mooncake", test_mooncake_parse);
	g_test_add_func("/replay/trace/detect-load", test_detect_and_load);
	g_test_add_func("/replay/schedule/scale", test_schedule_scale);
	g_test_add_func("/replay/schedule/bounds", test_schedule_bounds);
	g_test_add_func("/replay/schedule/caps", test_schedule_caps);
	g_test_add_func("/replay/trace/shared", test_shared_traces);
	return g_test_run();
}
