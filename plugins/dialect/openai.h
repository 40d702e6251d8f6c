/*
 * Shared pieces of the dialects whose engines serve the OpenAI-compatible
 * API (openai.c): vLLM, SGLang and llama.cpp. No state: every function works on its
 * arguments alone, and what differs between the dialects' answers is a
 * struct oai_answers each passes.
 */
#ifndef NW_PLUGIN_OPENAI_H
#define NW_PLUGIN_OPENAI_H

#include <narwhal/plugin-abi.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The generation route the client used, or NULL for an unknown one. */
const char *oai_route_path(narwhal_route route);

/* Fill an outgoing call (flags 0). */
void oai_set_call(struct narwhal_http_call *out, const char *method, const char *path,
                  json_t *body);

/* A prompt that is already token IDs: a non-empty list of integers. */
bool oai_is_token_ids(const json_t *prompt);

/* Copy client_body[key] into body when the client gave it (a null is not
 * given). Returns -1 only when out of memory. */
int oai_copy_key(json_t *body, const json_t *client_body, const char *key);

/* Copy a string into a fixed buffer, cut at a character boundary; NULL
 * gives "". */
void oai_copy_text(char *dst, size_t size, const char *src);

/* A configuration key or ID as a message shows it (one line): quotes,
 * backslashes and control characters escaped as JSON writes them, cut with
 * "..." after 40 characters; buf holds OAI_SHOWN_MAX bytes. */
#define OAI_SHOWN_MAX (40 * 6 + sizeof "...")
void oai_shown_name(char *buf, size_t size, const char *name);

/* For a dialect without settings: true when config is none, null or {};
 * otherwise false with err saying why. */
bool oai_config_empty(const char *dialect, const json_t *config, char *err, size_t err_len);

/* Whether hay contains needle (lower case), ignoring ASCII case. */
bool oai_contains_ci(const char *hay, const char *needle);

/* The parts of an error answer that classification reads. */
struct oai_error {
	const char *message;
	const char *type;
	const char *param;
	const json_t *code;
};

/* A dialect's test for a server error that means the decode engine could
 * not load the handoff (NARWHAL_ERROR_HANDOFF); NULL: none is. */
typedef bool (*oai_handoff_fn)(const struct oai_error *ef);

/* What differs between the dialects in the answers the functions below
 * read. */
struct oai_answers {
	/* The flat {"object": "error", ...} of older vLLM and of SGLang, or
	 * any object with a message, is an error answer too (llama.cpp only
	 * nests its errors). */
	bool flat_errors;
	/* A chunk with usage and choices but no output is NARWHAL_SSE_USAGE
	 * (llama.cpp's last chunk), not NARWHAL_SSE_OTHER. */
	bool usage_beside_choices;
	/* A 400 whose message says "context size" is a request too long for
	 * the context (llama.cpp's older builds); every dialect takes "context
	 * length". */
	bool context_size_words;
	oai_handoff_fn handoff;
	/* The keys the router sets in the engine calls (router_keys),
	 * NULL-terminated; NULL: none. An error that names one refuses what
	 * the router sent, not the client's request. */
	const char *const *router_keys;
};

/* parse_error for the nested {"error": {...}}, {"error": "text"} and, with
 * flat_errors, flat shapes. The message of a NARWHAL_ERROR_CLIENT answer,
 * which the client reads, has its URLs, addresses and paths hidden. */
int oai_parse_error(const struct oai_answers *a, int32_t http_status, const char *body,
                    size_t len, struct narwhal_engine_error *out);

/* parse_models: the first model of GET /v1/models and its max_model_len. */
int oai_parse_models(const json_t *response, struct narwhal_model_info *out);

/* The stream's success terminator, [DONE], stray whitespace around it
 * allowed. */
bool oai_is_done(const char *data, size_t len);

/* v when it is a count: an integer from 0 to 2^53, the largest the host's
 * sums of counts (doubles) keep exact; -1 otherwise. */
int64_t oai_count(const json_t *v);

/* usage[key] when a count; -1 otherwise. */
int64_t oai_usage_count(const json_t *usage, const char *key);

/* sniff_sse, parse_sse and parse_sse_json for OpenAI-style chunks, usage
 * and in-band errors. */
bool oai_sniff_sse(const char *data, size_t len);
int oai_parse_sse(const struct oai_answers *a, const char *data, size_t len,
                  struct narwhal_sse_event *out);
int oai_parse_sse_json(const struct oai_answers *a, const json_t *doc,
                       struct narwhal_sse_event *out);

#endif /* NW_PLUGIN_OPENAI_H */
