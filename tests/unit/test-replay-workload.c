/*
 * Synthetic workloads and prompts: Poisson and gamma arrivals against
 * their mean and CV with a fixed seed, the length distributions, the spec
 * and JSON forms with their errors, phase sequences (rates and lengths per
 * phase, idle phases, repeat), generation bounds, prompt synthesis to an
 * exact token count with shared Mooncake prefixes, and request bodies.
 */
#include "build-config.h"

#include <math.h>
#include <string.h>

#include <glib/gstdio.h>

#include "tools/replay/prompt.h"
#include "tools/replay/workload.h"

static void
gap_stats(double rate, double cv, bool gamma, guint n, double *mean, double *out_cv)
{
	GRand *rng = g_rand_new_with_seed(12345);
	double s = 0, s2 = 0;

	for (guint i = 0; i < n; i++) {
		double g = rp_sample_gap(rng, rate, cv, gamma);

		g_assert_cmpfloat(g, >=, 0);
		s += g;
		s2 += g * g;
	}
	*mean = s / n;
	*out_cv = sqrt(s2 / n - *mean * *mean) / *mean;
	g_rand_free(rng);
}

static void
test_arrivals(void)
{
	double mean, cv;

	/* Poisson: exponential gaps, CV 1. 200k samples: ~0.3% error. */
	gap_stats(10, 1, false, 200000, &mean, &cv);
	g_assert_cmpfloat(fabs(mean - 0.1) / 0.1, <, 0.01);
	g_assert_cmpfloat(fabs(cv - 1.0), <, 0.02);
	/* Gamma, bursty and smooth. */
	gap_stats(4, 2, true, 200000, &mean, &cv);
	g_assert_cmpfloat(fabs(mean - 0.25) / 0.25, <, 0.02);
	g_assert_cmpfloat(fabs(cv - 2.0) / 2.0, <, 0.05);
	gap_stats(4, 0.5, true, 200000, &mean, &cv);
	g_assert_cmpfloat(fabs(mean - 0.25) / 0.25, <, 0.01);
	g_assert_cmpfloat(fabs(cv - 0.5) / 0.5, <, 0.02);
	gap_stats(4, 1, true, 200000, &mean, &cv);
	g_assert_cmpfloat(fabs(cv - 1.0), <, 0.02);
	/* CV 0: a metronome. */
	gap_stats(5, 0, true, 100, &mean, &cv);
	g_assert_cmpfloat_with_epsilon(mean, 0.2, 1e-12);
}

static void
test_arrivals_generated(void)
{
	GError *error = NULL;
	struct rp_workload *w = rp_workload_parse_spec("rate=20,arrival=gamma,cv=3", &error);
	struct rp_trace *t, *again;
	double prev = 0, s = 0, s2 = 0;
	guint n;

	g_assert_no_error(error);
	t = rp_workload_generate(w, 7, 2000, 0, &error);
	g_assert_no_error(error);
	n = t->reqs->len;
	/* About 20/s for 2000 s; the count of a CV-3 renewal process varies
	 * more than Poisson's, hence 5%. */
	g_assert_cmpfloat(fabs(n - 40000.0) / 40000.0, <, 0.05);
	for (guint i = 0; i < n; i++) {
		double at = g_array_index(t->reqs, struct rp_request, i).t, g = at - prev;

		g_assert_cmpfloat(at, <, 2000);
		s += g;
		s2 += g * g;
		prev = at;
	}
	g_assert_cmpfloat(fabs(sqrt(s2 / n - (s / n) * (s / n)) / (s / n) - 3) / 3, <, 0.08);
	/* A fixed seed repeats itself. */
	again = rp_workload_generate(w, 7, 2000, 0, &error);
	g_assert_cmpuint(again->reqs->len, ==, n);
	g_assert_cmpfloat(g_array_index(again->reqs, struct rp_request, n / 2).t, ==,
	                  g_array_index(t->reqs, struct rp_request, n / 2).t);
	rp_trace_free(again);
	rp_trace_free(t);
	rp_workload_free(w);
}

static void
test_lengths(void)
{
	GError *error = NULL;
	struct rp_dist d;
	GRand *rng = g_rand_new_with_seed(99);
	guint below = 0, n = 100000;
	uint32_t lo = UINT32_MAX, hi = 0;
	double sum = 0;

	g_assert_true(rp_dist_parse(&d, "300", "t", false, &error));
	g_assert_cmpuint(rp_dist_sample(&d, rng), ==, 300);
	rp_dist_clear(&d);
	g_assert_true(rp_dist_parse(&d, "fixed:42", "t", false, &error));
	g_assert_cmpuint(rp_dist_sample(&d, rng), ==, 42);
	rp_dist_clear(&d);

	g_assert_true(rp_dist_parse(&d, "uniform:10:20", "t", false, &error));
	for (guint i = 0; i < n; i++) {
		uint32_t v = rp_dist_sample(&d, rng);

		lo = MIN(lo, v);
		hi = MAX(hi, v);
		sum += v;
	}
	g_assert_cmpuint(lo, ==, 10); /* both ends inclusive */
	g_assert_cmpuint(hi, ==, 20);
	g_assert_cmpfloat(fabs(sum / n - 15), <, 0.1);
	rp_dist_clear(&d);

	/* Log-normal: half below the median; the mean is median*exp(s^2/2). */
	g_assert_true(rp_dist_parse(&d, "lognormal:1000:0.5", "t", false, &error));
	sum = 0;
	for (guint i = 0; i < n; i++) {
		uint32_t v = rp_dist_sample(&d, rng);

		below += v < 1000;
		sum += v;
	}
	g_assert_cmpfloat(fabs(below / (double)n - 0.5), <, 0.01);
	g_assert_cmpfloat(fabs(sum / n - 1000 * exp(0.125)) / (1000 * exp(0.125)), <, 0.01);
	rp_dist_clear(&d);

	for (const char *const *bad = (const char *const[]){ "0", "uniform:5:4", "lognormal:0:1",
	                                                    "gauss:1:2", "fixed:", "12x", NULL };
	     *bad; bad++) {
		g_assert_false(rp_dist_parse(&d, *bad, "phase 1 input", false, &error));
		g_assert_error(error, RP_ERROR, RP_ERROR_PARSE);
		g_assert_nonnull(strstr(error->message, "phase 1 input"));
		g_clear_error(&error);
	}
	g_rand_free(rng);
}

static void
test_lengths_from_trace(void)
{
	GError *error = NULL;
	g_autofree char *dir = g_dir_make_tmp("replay-wl-XXXXXX", &error);
	g_autofree char *csv = g_build_filename(dir, "t.csv", NULL);
	g_autofree char *spec = NULL;
	struct rp_workload *w;
	struct rp_trace *t;
	struct rp_dist d;
	GRand *rng = g_rand_new_with_seed(3);

	g_assert_true(g_file_set_contents(csv, "TIMESTAMP,ContextTokens,GeneratedTokens\n"
	                                  "2023-11-16 18:00:00.0,111,11\n"
	                                  "2023-11-16 18:00:01.0,222,22", -1, NULL));
	{
		g_autofree char *text = g_strconcat("trace:", csv, NULL);

		g_assert_true(rp_dist_parse(&d, text, "t", true, &error));
		for (int i = 0; i < 50; i++) {
			uint32_t v = rp_dist_sample(&d, rng);

			g_assert_true(v == 11 || v == 22); /* the output column */
		}
		rp_dist_clear(&d);
	}
	/* lengths=trace: keeps input and output paired. */
	spec = g_strdup_printf("rate=100,lengths=trace:%s", csv);
	w = rp_workload_parse_spec(spec, &error);
	g_assert_no_error(error);
	t = rp_workload_generate(w, 1, 0, 200, &error);
	g_assert_no_error(error);
	g_assert_cmpuint(t->reqs->len, ==, 200);
	for (guint i = 0; i < t->reqs->len; i++) {
		const struct rp_request *r = &g_array_index(t->reqs, struct rp_request, i);

		g_assert_true((r->input_tokens == 111 && r->output_tokens == 11) ||
		              (r->input_tokens == 222 && r->output_tokens == 22));
	}
	rp_trace_free(t);
	rp_workload_free(w);
	g_rand_free(rng);
	g_unlink(csv);
	g_rmdir(dir);
}

static void
test_phases(void)
{
	GError *error = NULL;
	struct rp_workload *w = rp_workload_parse_spec(
		"name=warm,rate=5,input=100,output=10,duration=100;"
		"rate=0,duration=50;"
		"name=hot,rate=50,arrival=gamma,cv=2,input=uniform:1000:2000,output=300,duration=100",
		&error);
	struct rp_trace *t;
	guint counts[3] = { 0 };

	g_assert_no_error(error);
	g_assert_cmpuint(w->phases->len, ==, 3);
	t = rp_workload_generate(w, 11, 0, 0, &error);
	g_assert_no_error(error);
	g_assert_cmpuint(t->phase_names->len, ==, 3);
	g_assert_cmpstr(g_ptr_array_index(t->phase_names, 0), ==, "warm");
	g_assert_cmpstr(g_ptr_array_index(t->phase_names, 1), ==, "phase2");
	for (guint i = 0; i < t->reqs->len; i++) {
		const struct rp_request *r = &g_array_index(t->reqs, struct rp_request, i);

		counts[r->phase]++;
		if (r->phase == 0) {
			g_assert_cmpfloat(r->t, <, 100);
			g_assert_cmpuint(r->input_tokens, ==, 100);
			g_assert_cmpuint(r->output_tokens, ==, 10);
		} else {
			/* Nothing arrives in the idle phase from 100 s to 150 s. */
			g_assert_cmpuint(r->phase, ==, 2);
			g_assert_cmpfloat(r->t, >=, 150);
			g_assert_cmpfloat(r->t, <, 250);
			g_assert_cmpuint(r->input_tokens, >=, 1000);
			g_assert_cmpuint(r->input_tokens, <=, 2000);
			g_assert_cmpuint(r->output_tokens, ==, 300);
		}
	}
	g_assert_cmpfloat(fabs(counts[0] - 500.0), <, 100);  /* Poisson: sd ~22 */
	g_assert_cmpfloat(fabs(counts[2] - 5000.0), <, 700); /* gamma cv 2: sd ~140 */
	rp_trace_free(t);
	rp_workload_free(w);
}

static void
test_json_workload(void)
{
	GError *error = NULL;
	g_autofree char *dir = g_dir_make_tmp("replay-wl-XXXXXX", &error);
	g_autofree char *file = g_build_filename(dir, "w.json", NULL);
	struct rp_workload *w;
	struct rp_trace *t;
	guint per_phase[2] = { 0 };

	g_assert_true(g_file_set_contents(file,
		"{\"repeat\": 3, \"comment\": \"P:D shift\", \"phases\": ["
		" {\"name\": \"prefill-heavy\", \"rate\": 20, \"duration\": 10, "
		"  \"input\": \"lognormal:4000:0.3\", \"output\": 16},"
		" {\"name\": \"decode-heavy\", \"rate\": 20, \"arrival\": \"gamma\", \"cv\": 1.5,"
		"  \"duration\": 10, \"input\": 200, \"output\": \"uniform:400:600\"}]}", -1, NULL));
	w = rp_workload_load_file(file, &error);
	g_assert_no_error(error);
	g_assert_cmpuint(w->repeat, ==, 3);
	t = rp_workload_generate(w, 5, 0, 0, &error);
	g_assert_no_error(error);
	for (guint i = 0; i < t->reqs->len; i++) {
		const struct rp_request *r = &g_array_index(t->reqs, struct rp_request, i);
		/* 20 s cycles: phase 0 in [20k, 20k+10), phase 1 in [20k+10, 20k+20). */
		guint expect = fmod(r->t, 20.0) < 10.0 ? 0 : 1;

		g_assert_cmpuint(r->phase, ==, expect);
		g_assert_cmpfloat(r->t, <, 60);
		per_phase[r->phase]++;
		if (r->phase == 1)
			g_assert_cmpuint(r->output_tokens, >=, 400);
		else
			g_assert_cmpuint(r->output_tokens, ==, 16);
	}
	g_assert_cmpfloat(fabs(per_phase[0] - 600.0), <, 100);
	g_assert_cmpfloat(fabs(per_phase[1] - 600.0), <, 150);
	rp_trace_free(t);
	rp_workload_free(w);

	/* Errors name the key. */
	g_assert_true(g_file_set_contents(file, "{\"phases\": [{\"rate\": 1, \"burst\": 2}]}", -1, NULL));
	g_assert_null(rp_workload_load_file(file, &error));
	g_assert_nonnull(strstr(error->message, "burst"));
	g_clear_error(&error);
	g_assert_true(g_file_set_contents(file, "{\"phases\": [{\"rate\": 1}, {\"rate\": 2, "
	                                  "\"duration\": 5}]}", -1, NULL));
	g_assert_null(rp_workload_load_file(file, &error));
	g_assert_nonnull(strstr(error->message, "needs a duration"));
	g_clear_error(&error);
	g_unlink(file);
	g_rmdir(dir);
}

static void
test_spec_errors(void)
{
	GError *error = NULL;
	struct rp_workload *w;
	const char *bad[] = {
		"", "input=100", "rate=-1", "rate=1,arrival=weibull", "rate=1,foo=2", "rate",
		"rate=1;rate=2,duration=3", "rate=0", "rate=1,cv=abc",
	};

	for (guint i = 0; i < G_N_ELEMENTS(bad); i++) {
		w = rp_workload_parse_spec(bad[i], &error);
		g_assert_null(w);
		g_assert_error(error, RP_ERROR, RP_ERROR_PARSE);
		g_clear_error(&error);
	}
	/* Open-ended and unbounded: refused at generation. */
	w = rp_workload_parse_spec("rate=1", &error);
	g_assert_nonnull(w);
	g_assert_null(rp_workload_generate(w, 1, 0, 0, &error));
	g_assert_error(error, RP_ERROR, RP_ERROR_BOUND);
	g_clear_error(&error);
	rp_workload_free(w);
	/* Bounded by count and by time. */
	w = rp_workload_parse_spec(" rate = 100 ; ", &error);
	g_assert_no_error(error);
	{
		struct rp_trace *t = rp_workload_generate(w, 1, 0, 37, &error);

		g_assert_cmpuint(t->reqs->len, ==, 37);
		rp_trace_free(t);
		t = rp_workload_generate(w, 1, 1.5, 0, &error);
		g_assert_cmpfloat(fabs(t->reqs->len - 150.0), <, 50);
		rp_trace_free(t);
	}
	rp_workload_free(w);
}

/* narwhal-sim's rule (src/sim/tokenize.h): a space and up to four
 * lowercase letters is one token. Count them and check nothing else. */
static guint
sim_words(const char *s, size_t len)
{
	guint n = 0;

	for (size_t i = 0; i < len;) {
		size_t j = i + 1;

		g_assert_cmpint(s[i], ==, ' ');
		while (j < len && j - i <= 4 && g_ascii_islower(s[j]))
			j++;
		g_assert_cmpuint(j - i, ==, 5);
		n++;
		i = j;
	}
	return n;
}

static void
test_prompt(void)
{
	GString *a = g_string_new(NULL), *b = g_string_new(NULL), *c = g_string_new(NULL);
	const uint32_t ha[] = { 7, 8, 9 }, hb[] = { 7, 8, 42 };

	g_assert_cmpuint(rp_prompt_words(1000, 1), ==, 999);
	g_assert_cmpuint(rp_prompt_words(1, 1), ==, 1);
	g_assert_cmpuint(rp_prompt_words(0, 0), ==, 1);
	for (uint32_t n = 1; n < 2000; n += 97) {
		g_string_truncate(a, 0);
		rp_prompt_append(a, n, 1, NULL, 0, 1, n);
		g_assert_cmpuint(sim_words(a->str, a->len) + 1, ==, MAX(n, 2)); /* + BOS */
	}
	/* Mooncake: blocks with equal hash ids have equal text. With the BOS
	 * at position 0, block 0 holds 511 words and block 1 the next 512. */
	g_string_truncate(a, 0);
	rp_prompt_append(a, 1400, 1, ha, 3, 5, 1);
	rp_prompt_append(b, 1400, 1, hb, 3, 5, 2);
	g_assert_cmpint(memcmp(a->str, b->str, (511 + 512) * 5), ==, 0);
	g_assert_cmpint(memcmp(a->str + 1023 * 5, b->str + 1023 * 5, 5 * 376), !=, 0);
	/* Without hash ids, requests share nothing; the same request repeats. */
	rp_prompt_append(c, 1400, 1, NULL, 0, 5, 1);
	g_assert_cmpint(memcmp(a->str, c->str, 25), !=, 0);
	g_string_truncate(a, 0);
	rp_prompt_append(a, 1400, 1, NULL, 0, 5, 1);
	g_assert_cmpstr(a->str, ==, c->str);
	g_string_free(a, TRUE);
	g_string_free(b, TRUE);
	g_string_free(c, TRUE);
}

static void
test_body(void)
{
	struct rp_body_opts o = {
		.api = RP_API_COMPLETIONS, .model = "m\"x", .stream = true, .ignore_eos = true,
		.prompt_overhead = 1, .seed = 1,
	};
	size_t len;
	char *text = rp_body_build(&o, 50, 17, NULL, 0, 3, &len);
	json_t *doc = json_loadb(text, len, 0, NULL), *extra;
	const char *prompt;

	g_assert_nonnull(doc);
	g_assert_cmpstr(json_string_value(json_object_get(doc, "model")), ==, "m\"x");
	prompt = json_string_value(json_object_get(doc, "prompt"));
	g_assert_cmpuint(sim_words(prompt, strlen(prompt)), ==, 49);
	g_assert_cmpint(json_integer_value(json_object_get(doc, "max_tokens")), ==, 17);
	g_assert_true(json_is_true(json_object_get(doc, "stream")));
	g_assert_true(json_is_true(json_object_get(json_object_get(doc, "stream_options"),
	                                           "include_usage")));
	g_assert_true(json_is_true(json_object_get(doc, "ignore_eos")));
	json_decref(doc);
	g_free(text);

	/* Chat, not streamed, with extra fields that override ours. */
	extra = json_pack("{s:i, s:{s:b}, s:s}", "max_tokens", 5, "kv_transfer_params",
	                  "do_remote_decode", 1, "priority", "high");
	o.api = RP_API_CHAT;
	o.stream = false;
	o.model = NULL;
	o.extra = extra;
	text = rp_body_build(&o, 10, 17, NULL, 0, 3, &len);
	doc = json_loadb(text, len, 0, NULL);
	g_assert_nonnull(doc);
	g_assert_null(json_object_get(doc, "model"));
	g_assert_null(json_object_get(doc, "stream_options"));
	g_assert_true(json_is_false(json_object_get(doc, "stream")));
	g_assert_cmpint(json_integer_value(json_object_get(doc, "max_tokens")), ==, 5);
	g_assert_cmpstr(json_string_value(json_object_get(doc, "priority")), ==, "high");
	g_assert_cmpstr(json_string_value(json_object_get(
		json_array_get(json_object_get(doc, "messages"), 0), "role")), ==, "user");
	prompt = json_string_value(json_object_get(json_array_get(json_object_get(doc, "messages"),
	                                                          0), "content"));
	g_assert_cmpuint(sim_words(prompt, strlen(prompt)), ==, 9);
	g_assert_cmpstr(rp_api_path(RP_API_CHAT), ==, "/v1/chat/completions");
	json_decref(doc);
	json_decref(extra);
	g_free(text);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/replay/workload/arrivals", test_arrivals);
	g_test_add_func("/replay/workload/arrivals-generated", test_arrivals_generated);
	g_test_add_func("/replay/workload/lengths", test_lengths);
	g_test_add_func("/replay/workload/lengths-from-trace", test_lengths_from_trace);
	g_test_add_func("/replay/workload/phases", test_phases);
	g_test_add_func("/replay/workload/json", test_json_workload);
	g_test_add_func("/replay/workload/spec-errors", test_spec_errors);
	g_test_add_func("/replay/prompt/tokens", test_prompt);
	g_test_add_func("/replay/prompt/body", test_body);
	return g_test_run();
}
