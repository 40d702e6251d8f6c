/*
 * narwhal-sim's timing model against the reference tables in
 * shared/reference/latency-models.md, the presets, and the override file.
 */
#include "build-config.h"

#include <math.h>
#include <string.h>

#include <unistd.h>

#include <glib/gstdio.h>

#include "sim/model.h"

static struct sim_model
preset(const char *name)
{
	struct sim_model m;

	g_assert_true(sim_model_preset(name, &m));
	return m;
}

/* |got/want - 1| <= tol, with a message naming the case. */
static void
assert_close(const char *what, double x, double got, double want, double tol)
{
	double err = fabs(got / want - 1.0);

	if (err > tol)
		g_error("%s at %g: %.2f ms, reference %.2f ms (%.1f%% off, allowed %.1f%%)",
		        what, x, got, want, err * 100, tol * 100);
}

struct point {
	double x;      /* prompt length, or batch size */
	double ms;     /* the reference figure */
	double tol;    /* allowed relative error */
};

static void
check_prefill(const char *name, const struct point *p, size_t n)
{
	struct sim_model m = preset(name);

	for (size_t i = 0; i < n; i++)
		assert_close(name, p[i].x,
		             sim_model_prefill_ms(&m, (uint64_t)p[i].x, p[i].x * p[i].x),
		             p[i].ms, p[i].tol);
}

/* Decode steps with every sequence at the same context. */
static void
check_decode(const char *name, double context, const struct point *p, size_t n)
{
	struct sim_model m = preset(name);

	for (size_t i = 0; i < n; i++)
		assert_close(name, p[i].x,
		             sim_model_decode_ms(&m, (uint64_t)(context * p[i].x), (uint32_t)p[i].x),
		             p[i].ms, p[i].tol);
}

/* 2.2, DistServe engine row: prefill 72 / 130 / 257 ms. */
static void
test_opt13b_prefill(void)
{
	static const struct point p[] = {
		{ 512, 72, 0.02 }, { 1024, 130, 0.02 }, { 2048, 257, 0.02 },
	};

	check_prefill("opt-13b-a100", p, G_N_ELEMENTS(p));
}

/* 2.2: decode at context 1024 each, both coefficient regimes. */
static void
test_opt13b_decode(void)
{
	static const struct point p[] = {
		{ 1, 20.6, 0.02 }, { 8, 25.4, 0.02 }, { 32, 41.7, 0.02 },
		{ 64, 63.5, 0.02 }, { 128, 103.4, 0.02 },
	};

	check_decode("opt-13b-a100", 1024, p, G_N_ELEMENTS(p));
}

/* 2.3: the published least-squares fit is weighted to long prompts; against
 * the measured means it is off by -27% at 512 and +21% at 2k, so short
 * prompts get a 30% tolerance and long ones 6%. Honest, not tight. */
static void
test_llama2_70b_prefill(void)
{
	static const struct point p[] = {
		{ 512, 57, 0.30 }, { 1024, 78, 0.30 }, { 2048, 137, 0.30 },
		{ 4096, 379, 0.06 }, { 8192, 848, 0.06 },
	};

	check_prefill("llama2-70b-tp8-h100", p, G_N_ELEMENTS(p));
}

/* 2.3: decode with 512-token prompts; the fit has no context term. */
static void
test_llama2_70b_decode(void)
{
	static const struct point p[] = {
		{ 1, 29.7, 0.02 }, { 8, 32.4, 0.02 }, { 32, 38.9, 0.02 }, { 64, 50.0, 0.02 },
	};

	check_decode("llama2-70b-tp8-h100", 512, p, G_N_ELEMENTS(p));
}

/* 2.4 (derived): 18 / 34 / 66 / 132 / 277 ms; decode at 1k context. */
static void
test_llama3_8b(void)
{
	static const struct point pre[] = {
		{ 512, 18, 0.05 }, { 1024, 34, 0.05 }, { 2048, 66, 0.05 },
		{ 4096, 132, 0.05 }, { 8192, 277, 0.05 },
	};
	static const struct point dec[] = {
		{ 1, 6.5, 0.05 }, { 8, 7.1, 0.05 }, { 32, 9.1, 0.05 }, { 64, 11.9, 0.05 },
	};

	check_prefill("llama3-8b-h100", pre, G_N_ELEMENTS(pre));
	check_decode("llama3-8b-h100", 1024, dec, G_N_ELEMENTS(dec));
	g_assert_false(preset("llama3-8b-h100").calibrated);
}

static void
test_presets_listed(void)
{
	const char *const *names = sim_model_preset_names();
	static const char *const want[] = { "opt-13b-a100", "llama2-70b-tp8-h100",
		                            "llama3-8b-h100" };
	struct sim_model m;

	for (size_t i = 0; i < G_N_ELEMENTS(want); i++) {
		g_assert_cmpstr(names[i], ==, want[i]);
		m = preset(names[i]);
		g_assert_cmpstr(m.name, ==, names[i]);
		g_assert_cmpuint(strlen(m.source), >, 0);
		g_assert_cmpuint(m.block_tokens, ==, 16);
		/* a whole prompt fits in one step's budget */
		g_assert_cmpuint(m.max_num_batched_tokens, >=, m.max_model_len);
		g_assert_cmpuint(m.kv_capacity_tokens % m.block_tokens, ==, 0);
		g_assert_cmpuint(m.kv_capacity_tokens, >=, m.max_model_len);
		g_assert_cmpfloat(m.step_overhead_ms, ==, 0.0);
	}
	g_assert_null(names[G_N_ELEMENTS(want)]);
	g_assert_false(sim_model_preset("opt-13b", &m));
	g_assert_false(sim_model_preset(NULL, &m));
	g_assert_true(preset("opt-13b-a100").calibrated);
	g_assert_true(preset("llama2-70b-tp8-h100").calibrated);
}

/* 0.9 x (HBM - weights) / KV bytes per token, in whole 16-token blocks. */
static void
test_kv_capacity(void)
{
	static const struct {
		const char *name;
		uint32_t max_model_len;
		uint32_t kv_bytes;
		uint64_t tokens;
	} t[] = {
		{ "opt-13b-a100", 2048, 800 * 1024, 59312 },          /* 0.9*54 GB */
		{ "llama2-70b-tp8-h100", 4096, 320 * 1024, 1373280 }, /* 0.9*500 GB */
		{ "llama3-8b-h100", 8192, 128 * 1024, 439440 },       /* 0.9*64 GB */
	};

	for (size_t i = 0; i < G_N_ELEMENTS(t); i++) {
		struct sim_model m = preset(t[i].name);

		g_assert_cmpuint(m.max_model_len, ==, t[i].max_model_len);
		g_assert_cmpuint(m.kv_bytes_per_token, ==, t[i].kv_bytes);
		g_assert_cmpuint(m.kv_capacity_tokens, ==, t[i].tokens);
	}
}

/* 2.5: setup + tokens * bytes / bandwidth; 2k tokens of Llama-3-8B is
 * ~7 ms at 45 GB/s, of a 70B model ~16 ms. */
static void
test_kv_transfer(void)
{
	struct sim_model m = preset("llama3-8b-h100");
	struct sim_model big = preset("llama2-70b-tp8-h100");

	g_assert_cmpfloat_with_epsilon(sim_model_kv_transfer_ms(&m, 2048),
	                               1.0 + 2048.0 * 131072 / 45e9 * 1e3, 1e-9);
	assert_close("llama3 kv", 2048, sim_model_kv_transfer_ms(&m, 2048), 7.0, 0.02);
	assert_close("llama2 kv", 2048, sim_model_kv_transfer_ms(&big, 2048), 16.0, 0.02);
	g_assert_cmpfloat(sim_model_kv_transfer_ms(&m, 0), ==, 1.0);
	m.kv_bandwidth_gbs = 12.5; /* 100 GbE */
	assert_close("llama3 kv 100GbE", 2048, sim_model_kv_transfer_ms(&m, 2048), 22.5, 0.02);
}

static void
test_regimes_and_empty(void)
{
	struct sim_model m = preset("opt-13b-a100");

	g_assert_cmpfloat_with_epsilon(sim_model_decode_ms(&m, 94 * 100, 94),
	                               19.93 + 6.269e-4 * 9400 + 0.03851 * 94, 1e-9);
	g_assert_cmpfloat_with_epsilon(sim_model_decode_ms(&m, 95 * 100, 95),
	                               7.17 + 5.798e-4 * 9500 + 0.1583 * 95, 1e-9);
	g_assert_cmpfloat(sim_model_prefill_ms(&m, 0, 0), ==, 0.0);
	g_assert_cmpfloat(sim_model_decode_ms(&m, 0, 0), ==, 0.0);
}

static void
test_zero_delay(void)
{
	struct sim_model m = preset("llama2-70b-tp8-h100");
	uint64_t cap = m.kv_capacity_tokens;

	sim_model_zero_delay(&m);
	g_assert_cmpfloat(sim_model_prefill_ms(&m, 4000, 4000.0 * 4000), ==, 0.0);
	g_assert_cmpfloat(sim_model_decode_ms(&m, 100000, 200), ==, 0.0);
	g_assert_cmpfloat(sim_model_decode_ms(&m, 100, 2), ==, 0.0);
	g_assert_cmpfloat(sim_model_kv_transfer_ms(&m, 100000), ==, 0.0);
	g_assert_cmpfloat(m.step_overhead_ms, ==, 0.0);
	g_assert_cmpuint(m.kv_capacity_tokens, ==, cap);
}

/* ------------------------------------------------------ override file --- */

static bool
load_text(const char *text, struct sim_model *m, GError **error)
{
	g_autofree char *path = NULL;
	int fd = g_file_open_tmp("sim-model-XXXXXX.json", &path, NULL);
	bool ok;

	g_assert_cmpint(fd, >=, 0);
	g_assert_true(g_file_set_contents(path, text, -1, NULL));
	close(fd);
	ok = sim_model_load_file(path, m, error);
	g_unlink(path);
	return ok;
}

static void
test_overrides(void)
{
	struct sim_model m;
	GError *error = NULL;

	g_assert_true(load_text("{\"base\": \"opt-13b-a100\", \"prefill_a_ms\": 20,"
	                        " \"decode\": [1, 0.001, 0.5], \"max_num_seqs\": 64,"
	                        " \"name\": \"opt-slow\"}", &m, &error));
	g_assert_no_error(error);
	g_assert_cmpstr(m.name, ==, "opt-slow");
	g_assert_cmpfloat(m.prefill_a_ms, ==, 20.0);
	g_assert_cmpfloat(m.prefill_b_ms, ==, 0.10191);
	g_assert_cmpfloat(m.decode_small[2], ==, 0.5);
	g_assert_cmpfloat(m.decode_large[1], ==, 0.001);
	g_assert_cmpuint(m.max_num_seqs, ==, 64);
	g_assert_false(m.calibrated); /* timing changed, not re-measured */
	g_assert_nonnull(strstr(m.source, "opt-13b-a100"));

	/* limits alone keep the preset's calibration */
	g_assert_true(load_text("{\"base\": \"opt-13b-a100\", \"max_num_batched_tokens\": 512,"
	                        " \"kv_cache_gb\": 8.192}", &m, &error));
	g_assert_true(m.calibrated);
	g_assert_cmpuint(m.max_num_batched_tokens, ==, 512);
	g_assert_cmpuint(m.kv_capacity_tokens, ==, 8192000000ull / 819200 / 16 * 16);

	g_assert_true(load_text("{\"base\": \"llama3-8b-h100\", \"prefill_b_ms\": 0.03,"
	                        " \"calibrated\": true, \"source\": \"our lab, 2025\"}",
	                        &m, &error));
	g_assert_true(m.calibrated);
	g_assert_cmpstr(m.source, ==, "our lab, 2025");
}

/* Every bad file names the offending key. */
static void
test_override_errors(void)
{
	static const struct {
		const char *text;
		const char *needle1, *needle2;
	} t[] = {
		{ "{\"base\": \"opt-13b-a100\", \"prefil_a_ms\": 1}", "\"prefil_a_ms\"",
		  "did you mean \"prefill_a_ms\"" },
		{ "{\"base\": \"opt-13b-a100\", \"zzz\": 1}", "unknown key \"zzz\"", NULL },
		{ "{\"prefill_a_ms\": 1}", "missing key \"base\"", NULL },
		{ "{\"base\": \"gpt-5\"}", "\"base\"", "string \"gpt-5\"" },
		{ "{\"base\": 7}", "\"base\"", "integer 7" },
		{ "{\"base\": \"opt-13b-a100\", \"prefill_b_ms\": \"fast\"}", "\"prefill_b_ms\"",
		  "a number" },
		{ "{\"base\": \"opt-13b-a100\", \"kv_setup_ms\": -1}", "\"kv_setup_ms\"", "-1" },
		{ "{\"base\": \"opt-13b-a100\", \"block_tokens\": 1.5}", "\"block_tokens\"",
		  "an integer" },
		{ "{\"base\": \"opt-13b-a100\", \"block_tokens\": 0}", "\"block_tokens\"", NULL },
		{ "{\"base\": \"opt-13b-a100\", \"max_num_seqs\": 4294967296}", "\"max_num_seqs\"",
		  NULL },
		{ "{\"base\": \"opt-13b-a100\", \"decode_small\": [1, 2]}", "\"decode_small\"",
		  "[d0, d1, d2]" },
		{ "{\"base\": \"opt-13b-a100\", \"decode\": [1, 2, -3]}", "\"decode\"", NULL },
		{ "{\"base\": \"opt-13b-a100\", \"calibrated\": 1}", "\"calibrated\"", NULL },
		{ "{\"base\": \"opt-13b-a100\", \"name\": \"\"}", "\"name\"", NULL },
		{ "{\"base\": \"opt-13b-a100\", \"kv_capacity_tokens\": 1000}",
		  "\"kv_capacity_tokens\"", "max_model_len 2048" },
		{ "{\"base\": \"opt-13b-a100\", \"kv_cache_gb\": 1, \"kv_capacity_tokens\": 99999}",
		  "\"kv_cache_gb\"", NULL },
		{ "{\"base\": \"opt-13b-a100\", \"kv_cache_gb\": \"big\"}", "\"kv_cache_gb\"", NULL },
		{ "[1, 2]", "JSON object", NULL },
		{ "{\"base\": \"opt-13b-a100\", \"base\": \"opt-13b-a100\"}", "duplicate", NULL },
		{ "{\"base\": ", ":1:", NULL },
	};

	for (size_t i = 0; i < G_N_ELEMENTS(t); i++) {
		struct sim_model m = preset("llama3-8b-h100"), before = m;
		GError *error = NULL;

		if (load_text(t[i].text, &m, &error))
			g_error("accepted: %s", t[i].text);
		g_assert_nonnull(error);
		g_assert_true(error->domain == SIM_MODEL_ERROR);
		if (!strstr(error->message, t[i].needle1) ||
		    (t[i].needle2 && !strstr(error->message, t[i].needle2)))
			g_error("%s: message \"%s\" lacks \"%s\" / \"%s\"", t[i].text, error->message,
			        t[i].needle1, t[i].needle2 ? t[i].needle2 : "");
		g_assert_true(memcmp(&m, &before, sizeof(m)) == 0); /* untouched */
		g_error_free(error);
	}
}

static void
test_missing_file(void)
{
	struct sim_model m;
	GError *error = NULL;

	g_assert_false(sim_model_load_file("/nonexistent/model.json", &m, &error));
	g_assert_error(error, SIM_MODEL_ERROR, SIM_MODEL_ERROR_FILE);
	g_assert_nonnull(strstr(error->message, "/nonexistent/model.json"));
	g_error_free(error);
}

/* to_json plus a base loads back to the same model. */
static void
test_json_round_trip(void)
{
	const char *const *names = sim_model_preset_names();

	for (size_t i = 0; names[i]; i++) {
		struct sim_model m = preset(names[i]), back;
		json_t *doc = sim_model_to_json(&m), *again;
		GError *error = NULL;

		json_object_set_new(doc, "base", json_string("opt-13b-a100"));
		g_assert_true(sim_model_load_json(doc, "round trip", &back, &error));
		g_assert_no_error(error);
		again = sim_model_to_json(&back);
		json_object_del(doc, "base");
		g_assert_true(json_equal(doc, again));
		g_assert_cmpstr(back.name, ==, m.name);
		g_assert_true(back.calibrated == m.calibrated);
		json_decref(doc);
		json_decref(again);
	}
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/sim/model/issue3-opt13b-prefill-within-2pct", test_opt13b_prefill);
	g_test_add_func("/sim/model/opt13b-decode-within-2pct", test_opt13b_decode);
	g_test_add_func("/sim/model/llama2-70b-prefill-fit-vs-measured-30pct",
	                test_llama2_70b_prefill);
	g_test_add_func("/sim/model/llama2-70b-decode-within-2pct", test_llama2_70b_decode);
	g_test_add_func("/sim/model/issue3-llama3-8b-derived-within-5pct", test_llama3_8b);
	g_test_add_func("/sim/model/issue3-presets-listed", test_presets_listed);
	g_test_add_func("/sim/model/kv-capacity", test_kv_capacity);
	g_test_add_func("/sim/model/kv-transfer-time", test_kv_transfer);
	g_test_add_func("/sim/model/decode-regimes-and-empty-parts", test_regimes_and_empty);
	g_test_add_func("/sim/model/zero-delay", test_zero_delay);
	g_test_add_func("/sim/model/issue3-json-overrides", test_overrides);
	g_test_add_func("/sim/model/json-errors-name-the-key", test_override_errors);
	g_test_add_func("/sim/model/json-missing-file", test_missing_file);
	g_test_add_func("/sim/model/json-round-trip", test_json_round_trip);
	return g_test_run();
}
