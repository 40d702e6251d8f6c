/*
 * narwhal-sim's timing model: presets, the JSON override file, and the
 * DistServe-form step times. See docs/simulator-model.md for where every
 * number comes from.
 */
#include "build-config.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#include "core/config-fields.h"
#include "sim/model.h"

G_DEFINE_QUARK(narwhal-sim-model-error-quark, sim_model_error)

/* vLLM's default gpu_memory_utilization: the share of HBM it may use. */
#define GPU_MEMORY_SHARE 0.9

static const char *const preset_names[] = {
	"opt-13b-a100",
	"llama2-70b-tp8-h100",
	"llama3-8b-h100",
	NULL,
};

const char *const *
sim_model_preset_names(void)
{
	return preset_names;
}

/* KV capacity in tokens, whole blocks only: the memory vLLM would give the
 * cache (GPU_MEMORY_SHARE of what the weights leave), decimal GB. */
static uint64_t
kv_tokens(double hbm_gb, double weights_gb, uint32_t bytes_per_token, uint32_t block)
{
	double tokens = GPU_MEMORY_SHARE * (hbm_gb - weights_gb) * 1e9 / bytes_per_token;
	uint64_t blocks = (uint64_t)(tokens / block);

	return blocks * block;
}

/* What the presets share: vLLM's defaults on an 80 GB GPU and one 400 Gb/s
 * NIC for the handoff. */
static void
common_defaults(struct sim_model *m)
{
	memset(m, 0, sizeof(*m));
	m->decode_batch_split = 95;
	/* The fits are whole measured step times; their intercepts already
	 * hold the per-step fixed cost, so adding more would count it twice. */
	m->step_overhead_ms = 0.0;
	m->block_tokens = 16;
	m->max_num_batched_tokens = 8192;
	m->max_num_seqs = 256;
	m->kv_bandwidth_gbs = 45.0;
	m->kv_setup_ms = 1.0;
}

static void
set_decode(double *d, double d0, double d1, double d2)
{
	d[0] = d0;
	d[1] = d1;
	d[2] = d2;
}

bool
sim_model_preset(const char *name, struct sim_model *out)
{
	struct sim_model m;

	if (!name)
		return false;
	common_defaults(&m);
	if (strcmp(name, "opt-13b-a100") == 0) {
		g_strlcpy(m.source, "measured: DistServe profile fit, OPT-13B TP1 on A100-80GB "
		          "(LLMServe/DistServe simdistserve time_estimator)", sizeof(m.source));
		m.calibrated = true;
		m.prefill_a_ms = 18.10;
		m.prefill_b_ms = 0.10191;
		m.prefill_c_ms = 7.122e-6;
		set_decode(m.decode_small, 19.93, 6.269e-4, 0.03851);
		set_decode(m.decode_large, 7.17, 5.798e-4, 0.1583);
		m.kv_bytes_per_token = 800 * 1024;
		m.max_model_len = 2048;
		m.kv_capacity_tokens = kv_tokens(80, 26, m.kv_bytes_per_token, m.block_tokens);
	} else if (strcmp(name, "llama2-70b-tp8-h100") == 0) {
		g_strlcpy(m.source, "measured: least-squares fit of Splitwise perf_model.csv, "
		          "Llama-2-70B TP8 on DGX-H100 (prompts >= 512)", sizeof(m.source));
		m.calibrated = true;
		m.prefill_a_ms = 4.8;
		m.prefill_b_ms = 0.0699;
		m.prefill_c_ms = 4.08e-6;
		/* Fitted on batch size alone (512-token prompts): one set, no
		 * context term. */
		set_decode(m.decode_small, 29.6, 0.0, 0.312);
		set_decode(m.decode_large, 29.6, 0.0, 0.312);
		m.kv_bytes_per_token = 320 * 1024;
		m.max_model_len = 4096;
		m.kv_capacity_tokens = kv_tokens(8 * 80, 140, m.kv_bytes_per_token, m.block_tokens);
	} else if (strcmp(name, "llama3-8b-h100") == 0) {
		g_strlcpy(m.source, "derived, uncalibrated: roofline at 55% MFU of 989 TFLOPS "
		          "(prefill) and 75% of 3.35 TB/s (decode), Llama-3-8B on H100-80GB",
		          sizeof(m.source));
		m.calibrated = false;
		m.prefill_a_ms = 3.0;
		m.prefill_b_ms = 1.606e10 / (0.55 * 989e12) * 1e3;
		m.prefill_c_ms = 2.62e5 / (0.55 * 989e12) * 1e3;
		set_decode(m.decode_small, 6.39, 5.2e-5, 0.032);
		set_decode(m.decode_large, 6.39, 5.2e-5, 0.032);
		m.kv_bytes_per_token = 128 * 1024;
		m.max_model_len = 8192;
		m.kv_capacity_tokens = kv_tokens(80, 16, m.kv_bytes_per_token, m.block_tokens);
	} else {
		return false;
	}
	g_strlcpy(m.name, name, sizeof(m.name));
	*out = m;
	return true;
}

void
sim_model_zero_delay(struct sim_model *m)
{
	m->prefill_a_ms = m->prefill_b_ms = m->prefill_c_ms = 0.0;
	set_decode(m->decode_small, 0, 0, 0);
	set_decode(m->decode_large, 0, 0, 0);
	m->step_overhead_ms = 0.0;
	m->kv_bandwidth_gbs = 0.0;
	m->kv_setup_ms = 0.0;
}

double
sim_model_prefill_ms(const struct sim_model *m, uint64_t sum_tokens, double sum_squares)
{
	if (sum_tokens == 0)
		return 0.0;
	return m->prefill_a_ms + m->prefill_b_ms * (double)sum_tokens +
	       m->prefill_c_ms * sum_squares;
}

double
sim_model_decode_ms(const struct sim_model *m, uint64_t sum_context, uint32_t batch)
{
	const double *d;

	if (batch == 0)
		return 0.0;
	d = batch < m->decode_batch_split ? m->decode_small : m->decode_large;
	return d[0] + d[1] * (double)sum_context + d[2] * (double)batch;
}

double
sim_model_kv_transfer_ms(const struct sim_model *m, uint64_t tokens)
{
	double bytes = (double)tokens * m->kv_bytes_per_token;

	if (m->kv_bandwidth_gbs <= 0.0)
		return m->kv_setup_ms;
	return m->kv_setup_ms + bytes / (m->kv_bandwidth_gbs * 1e9) * 1e3;
}

/* ------------------------------------------------------------ the file --- */

typedef enum field_type {
	FT_STRING,  /* char[size] */
	FT_BOOL,
	FT_DOUBLE,
	FT_U32,
	FT_U64,
	FT_TRIPLE,  /* double[3] */
} field_type;

struct field {
	const char *key;
	field_type type;
	size_t offset;
	size_t size;       /* strings: the buffer */
	double min, max;   /* numbers (and string lengths) */
	bool timing;       /* a time coefficient: overriding it uncalibrates */
};

#define OFF(member) offsetof(struct sim_model, member)
#define STR(member) sizeof(((struct sim_model *)0)->member)
#define BIG 1e15
#define TOKENS_MAX 67108864.0 /* 2^26: far beyond any context window */

static const struct field fields[] = {
	{ "name", FT_STRING, OFF(name), STR(name), 1, STR(name) - 1, false },
	{ "source", FT_STRING, OFF(source), STR(source), 0, STR(source) - 1, false },
	{ "calibrated", FT_BOOL, OFF(calibrated), 0, 0, 0, false },
	{ "prefill_a_ms", FT_DOUBLE, OFF(prefill_a_ms), 0, 0, BIG, true },
	{ "prefill_b_ms", FT_DOUBLE, OFF(prefill_b_ms), 0, 0, BIG, true },
	{ "prefill_c_ms", FT_DOUBLE, OFF(prefill_c_ms), 0, 0, BIG, true },
	{ "decode_small", FT_TRIPLE, OFF(decode_small), 0, 0, BIG, true },
	{ "decode_large", FT_TRIPLE, OFF(decode_large), 0, 0, BIG, true },
	{ "decode_batch_split", FT_U32, OFF(decode_batch_split), 0, 1, UINT32_MAX, true },
	{ "step_overhead_ms", FT_DOUBLE, OFF(step_overhead_ms), 0, 0, BIG, true },
	{ "kv_bytes_per_token", FT_U32, OFF(kv_bytes_per_token), 0, 1, UINT32_MAX, false },
	{ "kv_capacity_tokens", FT_U64, OFF(kv_capacity_tokens), 0, 1, BIG, false },
	{ "block_tokens", FT_U32, OFF(block_tokens), 0, 1, 4096, false },
	{ "max_model_len", FT_U32, OFF(max_model_len), 0, 1, TOKENS_MAX, false },
	{ "max_num_batched_tokens", FT_U32, OFF(max_num_batched_tokens), 0, 1, TOKENS_MAX, false },
	{ "max_num_seqs", FT_U32, OFF(max_num_seqs), 0, 1, 1048576, false },
	{ "kv_bandwidth_gbs", FT_DOUBLE, OFF(kv_bandwidth_gbs), 0, 0, BIG, false },
	{ "kv_setup_ms", FT_DOUBLE, OFF(kv_setup_ms), 0, 0, BIG, false },
};

/* Keys that are not fields: the base preset, both decode sets at once, and
 * the KV cache size in GB (converted to tokens with kv_bytes_per_token). */
#define KEY_BASE "base"
#define KEY_DECODE "decode"
#define KEY_CACHE_GB "kv_cache_gb"
static const struct field cache_gb_field = {
	KEY_CACHE_GB, FT_DOUBLE, 0, 0, 1e-3, 1e6, false,
};

#define AT(m, f, type) ((type *)((char *)(m) + (f)->offset))

static const struct field *
field_find(const char *key)
{
	for (size_t i = 0; i < G_N_ELEMENTS(fields); i++)
		if (strcmp(fields[i].key, key) == 0)
			return &fields[i];
	return NULL;
}

static void
value_error(GError **error, const char *what, const char *key, const char *problem,
            const json_t *v)
{
	g_autofree char *got = v ? nw_json_describe(v) : NULL;

	if (got)
		g_set_error(error, SIM_MODEL_ERROR, SIM_MODEL_ERROR_VALUE,
		            "%s: key \"%s\": %s, got %s", what, key, problem, got);
	else
		g_set_error(error, SIM_MODEL_ERROR, SIM_MODEL_ERROR_VALUE,
		            "%s: key \"%s\": %s", what, key, problem);
}

static char *
range_text(const struct field *f)
{
	const char *kind = f->type == FT_U32 || f->type == FT_U64 ? "an integer" : "a number";
	g_autofree char *lo = nw_number_text(f->min);
	g_autofree char *hi = nw_number_text(f->max);

	if (f->max >= BIG)
		return g_strdup_printf("%s >= %s", kind, lo);
	return g_strdup_printf("%s from %s to %s", kind, lo, hi);
}

static bool
number_in(const struct field *f, const json_t *v, double *out)
{
	double x;

	if (f->type == FT_U32 || f->type == FT_U64) {
		if (!json_is_integer(v))
			return false;
		x = (double)json_integer_value(v);
	} else {
		if (!json_is_number(v))
			return false;
		x = json_number_value(v);
	}
	if (!isfinite(x) || x < f->min || x > f->max)
		return false;
	*out = x;
	return true;
}

/* Type- and range-check v and store it; key is the name the file used. */
static bool
store(const struct field *f, const char *key, struct sim_model *m, const json_t *v,
      const char *what, GError **error)
{
	double x;

	switch (f->type) {
	case FT_STRING: {
		const char *s = json_string_value(v);
		size_t len = s ? strlen(s) : 0;
		g_autofree char *want = NULL;

		/* an embedded NUL would cut the name short */
		if (!s || len != json_string_length(v) || len < (size_t)f->min ||
		    len > (size_t)f->max) {
			want = g_strdup_printf("must be a string of %u to %u bytes",
			                       (unsigned)f->min, (unsigned)f->max);
			value_error(error, what, key, want, v);
			return false;
		}
		g_strlcpy(AT(m, f, char), s, f->size);
		return true;
	}
	case FT_BOOL:
		if (!json_is_boolean(v)) {
			value_error(error, what, key, "must be true or false", v);
			return false;
		}
		*AT(m, f, bool) = json_is_true(v);
		return true;
	case FT_TRIPLE: {
		double d[3];
		g_autofree char *want = NULL;
		bool ok = json_is_array(v) && json_array_size(v) == 3;

		for (size_t i = 0; ok && i < 3; i++)
			ok = number_in(f, json_array_get(v, i), &d[i]);
		if (!ok) {
			g_autofree char *r = range_text(f);

			want = g_strdup_printf("must be an array [d0, d1, d2], each %s", r);
			value_error(error, what, key, want, v);
			return false;
		}
		memcpy(AT(m, f, double), d, sizeof(d));
		return true;
	}
	case FT_DOUBLE:
	case FT_U32:
	case FT_U64:
		if (!number_in(f, v, &x)) {
			g_autofree char *r = range_text(f);
			g_autofree char *want = g_strdup_printf("must be %s", r);

			value_error(error, what, key, want, v);
			return false;
		}
		if (f->type == FT_DOUBLE)
			*AT(m, f, double) = x;
		else if (f->type == FT_U32)
			*AT(m, f, uint32_t) = (uint32_t)x;
		else
			*AT(m, f, uint64_t) = (uint64_t)x;
		return true;
	}
	return false;
}

static void
unknown_key(GError **error, const char *what, const char *key)
{
	const char *cands[G_N_ELEMENTS(fields) + 3];
	size_t n = 0;
	const char *best;

	cands[n++] = KEY_BASE;
	cands[n++] = KEY_DECODE;
	cands[n++] = KEY_CACHE_GB;
	for (size_t i = 0; i < G_N_ELEMENTS(fields); i++)
		cands[n++] = fields[i].key;
	best = nw_closest(key, cands, n);
	if (best)
		g_set_error(error, SIM_MODEL_ERROR, SIM_MODEL_ERROR_KEY,
		            "%s: unknown key \"%s\" (did you mean \"%s\"?)", what, key, best);
	else
		g_set_error(error, SIM_MODEL_ERROR, SIM_MODEL_ERROR_KEY,
		            "%s: unknown key \"%s\"", what, key);
}

/* Checks across fields, once every override is in. */
static bool
check_whole(const struct sim_model *m, const char *what, GError **error)
{
	uint64_t need = ((uint64_t)m->max_model_len + m->block_tokens - 1) / m->block_tokens *
	                m->block_tokens;

	if (m->kv_capacity_tokens < need) {
		g_set_error(error, SIM_MODEL_ERROR, SIM_MODEL_ERROR_VALUE,
		            "%s: key \"kv_capacity_tokens\": %" G_GUINT64_FORMAT " tokens cannot "
		            "hold one sequence of max_model_len %u in blocks of %u",
		            what, m->kv_capacity_tokens, m->max_model_len, m->block_tokens);
		return false;
	}
	return true;
}

bool
sim_model_load_json(const json_t *doc, const char *what, struct sim_model *out,
                    GError **error)
{
	struct sim_model m;
	const json_t *base, *v;
	const char *key;
	bool timing = false;
	double cache_gb = 0.0;

	if (!json_is_object(doc)) {
		g_set_error(error, SIM_MODEL_ERROR, SIM_MODEL_ERROR_VALUE,
		            "%s: must be a JSON object", what);
		return false;
	}
	base = json_object_get(doc, KEY_BASE);
	if (!base) {
		g_set_error(error, SIM_MODEL_ERROR, SIM_MODEL_ERROR_KEY,
		            "%s: missing key \"base\" (one of opt-13b-a100, llama2-70b-tp8-h100, "
		            "llama3-8b-h100)", what);
		return false;
	}
	if (!sim_model_preset(json_string_value(base), &m)) {
		value_error(error, what, KEY_BASE, "must name a preset (opt-13b-a100, "
		            "llama2-70b-tp8-h100 or llama3-8b-h100)", base);
		return false;
	}
	g_snprintf(m.source, sizeof(m.source), "%s, with overrides", m.name);

	if (json_object_get(doc, KEY_CACHE_GB) && json_object_get(doc, "kv_capacity_tokens")) {
		g_set_error(error, SIM_MODEL_ERROR, SIM_MODEL_ERROR_KEY,
		            "%s: key \"%s\": give kv_cache_gb or kv_capacity_tokens, not both",
		            what, KEY_CACHE_GB);
		return false;
	}

	/* jansson keeps the file's key order, so the first error is stable */
	json_object_foreach((json_t *)doc, key, v) {
		const struct field *f;

		if (strcmp(key, KEY_BASE) == 0)
			continue;
		if (strcmp(key, KEY_DECODE) == 0) {
			if (!store(field_find("decode_small"), key, &m, v, what, error))
				return false;
			memcpy(m.decode_large, m.decode_small, sizeof(m.decode_large));
			timing = true;
			continue;
		}
		if (strcmp(key, KEY_CACHE_GB) == 0) {
			if (!number_in(&cache_gb_field, v, &cache_gb)) {
				value_error(error, what, key, "must be a number from 0.001 to 1000000", v);
				return false;
			}
			continue;
		}
		f = field_find(key);
		if (!f) {
			unknown_key(error, what, key);
			return false;
		}
		if (!store(f, key, &m, v, what, error))
			return false;
		timing |= f->timing;
	}
	if (timing && !json_object_get(doc, "calibrated"))
		m.calibrated = false;
	if (cache_gb > 0.0)
		m.kv_capacity_tokens = (uint64_t)(cache_gb * 1e9 / m.kv_bytes_per_token /
		                                  m.block_tokens) * m.block_tokens;
	if (!check_whole(&m, what, error))
		return false;
	*out = m;
	return true;
}

bool
sim_model_load_file(const char *file, struct sim_model *out, GError **error)
{
	json_error_t jerr;
	json_t *doc;
	bool ok;

	doc = json_load_file(file, JSON_REJECT_DUPLICATES, &jerr);
	if (!doc) {
		g_set_error(error, SIM_MODEL_ERROR, SIM_MODEL_ERROR_FILE,
		            "%s:%d:%d: %s", file, jerr.line, jerr.column, jerr.text);
		return false;
	}
	ok = sim_model_load_json(doc, file, out, error);
	json_decref(doc);
	return ok;
}

json_t *
sim_model_to_json(const struct sim_model *m)
{
	json_t *o = json_object();

	for (size_t i = 0; i < G_N_ELEMENTS(fields); i++) {
		const struct field *f = &fields[i];
		json_t *v = NULL;

		switch (f->type) {
		case FT_STRING:
			v = json_string(AT(m, f, const char));
			break;
		case FT_BOOL:
			v = json_boolean(*AT(m, f, const bool));
			break;
		case FT_DOUBLE:
			v = json_real(*AT(m, f, const double));
			break;
		case FT_U32:
			v = json_integer(*AT(m, f, const uint32_t));
			break;
		case FT_U64:
			v = json_integer((json_int_t)*AT(m, f, const uint64_t));
			break;
		case FT_TRIPLE: {
			const double *d = AT(m, f, const double);

			v = json_pack("[fff]", d[0], d[1], d[2]);
			break;
		}
		}
		json_object_set_new(o, f->key, v);
	}
	return o;
}
