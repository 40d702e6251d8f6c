/*
 * narwhal-sim's timing model: the DistServe form (see
 * shared/reference/latency-models.md, 2.1 and 2.6).
 *
 *   prefill_ms = a + b * sum(L_i) + c * sum(L_i^2)   over prefill chunks in a step
 *   decode_ms  = d0 + d1 * sum(ctx_j) + d2 * B       over the B decoding sequences,
 *                with one coefficient set below decode_batch_split and another at or above
 *   step_ms    = prefill_ms (if any prefill) + decode_ms (if any decode)
 *                + step_overhead_ms
 *   kv_ms      = kv_setup_ms + tokens * kv_bytes_per_token / (kv_bandwidth_gbs * 1e9) * 1e3
 *
 * A step that mixes prefill and decode work pays for both: that
 * interference is why disaggregation exists. The functions below return 0
 * for an empty part (no prefill tokens, no decoding sequence), so a step's
 * time is simply their sum plus step_overhead_ms.
 */
#ifndef NW_SIM_MODEL_H
#define NW_SIM_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include <glib.h>
#include <jansson.h>

#define SIM_MODEL_ERROR (sim_model_error_quark())
GQuark sim_model_error_quark(void);

typedef enum sim_model_error_code {
	SIM_MODEL_ERROR_FILE,    /* unreadable or not JSON */
	SIM_MODEL_ERROR_KEY,     /* unknown or missing key */
	SIM_MODEL_ERROR_VALUE,   /* wrong type or out of range */
} sim_model_error_code;

struct sim_model {
	char name[64];
	char source[160];           /* where the coefficients come from */
	bool calibrated;            /* false: derived, not measured */
	double prefill_a_ms, prefill_b_ms, prefill_c_ms;
	double decode_small[3];     /* d0, d1, d2 for B < decode_batch_split */
	double decode_large[3];     /* d0, d1, d2 for B >= decode_batch_split */
	uint32_t decode_batch_split;
	double step_overhead_ms;
	uint32_t kv_bytes_per_token;
	uint64_t kv_capacity_tokens; /* KV cache size, in tokens */
	uint32_t block_tokens;       /* KV block size (vLLM: 16) */
	uint32_t max_model_len;
	uint32_t max_num_batched_tokens; /* token budget per step */
	uint32_t max_num_seqs;           /* running sequences per step */
	double kv_bandwidth_gbs;     /* handoff bandwidth, GB/s; 0: unlimited */
	double kv_setup_ms;
};

/* NULL-terminated preset names: "opt-13b-a100", "llama2-70b-tp8-h100",
 * "llama3-8b-h100". */
const char *const *sim_model_preset_names(void);

/* Fill out with a preset; false when unknown. */
bool sim_model_preset(const char *name, struct sim_model *out);

/* A JSON file: {"base": "<preset>", ...any field of struct sim_model...};
 * unknown keys and out-of-range values are errors naming the key. Decode
 * sets are arrays [d0, d1, d2]; "decode" sets both regimes at once;
 * "kv_cache_gb" gives the cache size in GB instead of kv_capacity_tokens.
 * Overriding a timing coefficient without saying "calibrated" marks the
 * model uncalibrated. out is untouched on failure. */
bool sim_model_load_file(const char *file, struct sim_model *out, GError **error);
/* The same from a parsed object; what names the source in messages. */
bool sim_model_load_json(const json_t *doc, const char *what, struct sim_model *out,
                         GError **error);

/* Every field as a JSON object with the file's keys (no "base": add one
 * to load it back; every field is then overridden). */
json_t *sim_model_to_json(const struct sim_model *m);

/* A model whose steps take no time (benchmarks of the HTTP path): every
 * time coefficient is zeroed, and KV transfer takes no time (bandwidth 0
 * means unlimited). Capacities and limits stay. */
void sim_model_zero_delay(struct sim_model *m);

double sim_model_prefill_ms(const struct sim_model *m, uint64_t sum_tokens, double sum_squares);
double sim_model_decode_ms(const struct sim_model *m, uint64_t sum_context, uint32_t batch);
double sim_model_kv_transfer_ms(const struct sim_model *m, uint64_t tokens);

#endif /* NW_SIM_MODEL_H */
