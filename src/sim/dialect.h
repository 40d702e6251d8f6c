/*
 * The engine dialects narwhal-sim speaks: vLLM, SGLang and llama.cpp, as
 * /work/shared/reference/engine-wire-formats.md describes them (the
 * reference, below: "wire formats"). This module holds what does no I/O:
 * the --dialect option, the fleet roles, each dialect's error bodies and
 * tokenize answers, and SGLang's bootstrap fields. docs/simulator.md,
 * "Dialects", is the manual.
 */
#ifndef NW_SIM_DIALECT_H
#define NW_SIM_DIALECT_H

#include <stdbool.h>
#include <stdint.h>

#include <glib.h>
#include <jansson.h>

typedef enum sim_dialect {
	SIM_DIALECT_VLLM = 0,
	SIM_DIALECT_SGLANG,
	SIM_DIALECT_LLAMACPP,
} sim_dialect;

/* How an engine takes part in disaggregation. */
typedef enum sim_pd_mode {
	SIM_PD_ANY = 0,   /* vLLM with NIXL: the role is chosen per request */
	SIM_PD_PREFILL,   /* SGLang --disaggregation-mode prefill */
	SIM_PD_DECODE,    /* SGLang --disaggregation-mode decode */
	SIM_PD_NONE,      /* aggregate only: SGLang without PD, llama.cpp */
	SIM_PD_AUTO,      /* plain "sglang" while parsing, before the split */
} sim_pd_mode;

struct sim_engine_dialect {
	sim_dialect dialect;
	sim_pd_mode mode;
};

const char *sim_dialect_name(sim_dialect d);

/*
 * Parse --dialect: a comma list of one entry (for every engine) or of
 * exactly n entries (one per engine), each "vllm", "llamacpp", "sglang",
 * "sglang:prefill", "sglang:decode" or "sglang:aggregate". Plain "sglang"
 * engines split as the fleet does, the first half (rounded up) prefill and
 * the rest decode, except that a lone one serves whole requests. false
 * with *error naming the entry.
 */
bool sim_dialect_parse_spec(const char *spec, unsigned n, struct sim_engine_dialect *out,
                            char **error);

/* The role engine i starts in, for the fleet description: "prefill",
 * "decode", or NULL for an aggregate-only engine. vLLM engines split as
 * before (the first half of the vLLM engines, rounded up, prefill). */
const char *sim_dialect_fleet_role(const struct sim_engine_dialect *all, unsigned n,
                                   unsigned i);

/*
 * An error body in dialect d's shape (wire formats 4.4):
 *   vLLM      {"error":{"message","type","param","code"}}
 *   SGLang    {"object":"error","message","type","param","code"}, and
 *             nested as vLLM's when in_band (inside a stream)
 *   llama.cpp {"error":{"code","message","type"}}, with "n_prompt_tokens"
 *             and "n_ctx" when n_ctx > 0 (a context-size error)
 * Caller frees.
 */
char *sim_dialect_error_text(sim_dialect d, unsigned status, const char *param,
                             const char *message, bool in_band, uint32_t n_prompt,
                             uint32_t n_ctx);
/* vLLM's (and SGLang's) error type name for an HTTP status. */
const char *sim_error_type(unsigned status);
/* llama.cpp's error type name for an HTTP status. */
const char *sim_llamacpp_error_type(unsigned status);

/* A tokenize request that failed: status and message (owned). */
struct sim_dialect_fail {
	unsigned status;
	char *message;
};

/* SGLang's POST /v1/tokenize: {"prompt": str | [str], "add_special_tokens"}
 * answers {"tokens", "count", "max_model_len"} (lists for a list of
 * prompts). NULL with f set. */
json_t *sim_sglang_tokenize(const json_t *req, uint32_t max_model_len,
                            struct sim_dialect_fail *f);
/* llama.cpp's POST /tokenize: {"content", "add_special", "with_pieces"}
 * answers {"tokens": [id, ...]} or, with pieces, [{"id", "piece"}, ...].
 * NULL with f set. */
json_t *sim_llamacpp_tokenize(const json_t *req, struct sim_dialect_fail *f);

/*
 * SGLang's bootstrap fields (wire formats 2): 0 when the request has none
 * of bootstrap_host, bootstrap_port and bootstrap_room (or all null); 1
 * when bootstrap_host is a non-empty string, bootstrap_room an integer from
 * 0 to 2^63-1 and bootstrap_port absent, null or a port, with *room set;
 * -1 with f set (400) otherwise. Lists (batches) are refused: the
 * simulator serves one prompt per request.
 */
int sim_sglang_bootstrap(const json_t *req, uint64_t *room, struct sim_dialect_fail *f);

#endif /* NW_SIM_DIALECT_H */
