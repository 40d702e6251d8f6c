/*
 * The dialects' wire details that need no I/O (dialect.h). Section
 * numbers ("wire formats N") are those of
 * /work/shared/reference/engine-wire-formats.md.
 */
#include "build-config.h"

#include "sim/dialect.h"

#include <inttypes.h>
#include <string.h>

#include "sim/tokenize.h"

static const char *const dialect_names[] = { "vllm", "sglang", "llamacpp" };

const char *
sim_dialect_name(sim_dialect d)
{
	return d < G_N_ELEMENTS(dialect_names) ? dialect_names[d] : "vllm";
}

static bool
parse_entry(const char *entry, struct sim_engine_dialect *out)
{
	static const struct {
		const char *name;
		sim_dialect dialect;
		sim_pd_mode mode;
	} entries[] = {
		{ "vllm", SIM_DIALECT_VLLM, SIM_PD_ANY },
		{ "llamacpp", SIM_DIALECT_LLAMACPP, SIM_PD_NONE },
		{ "sglang", SIM_DIALECT_SGLANG, SIM_PD_AUTO },
		{ "sglang:prefill", SIM_DIALECT_SGLANG, SIM_PD_PREFILL },
		{ "sglang:decode", SIM_DIALECT_SGLANG, SIM_PD_DECODE },
		{ "sglang:aggregate", SIM_DIALECT_SGLANG, SIM_PD_NONE },
	};

	for (size_t i = 0; i < G_N_ELEMENTS(entries); i++) {
		if (strcmp(entry, entries[i].name) == 0) {
			out->dialect = entries[i].dialect;
			out->mode = entries[i].mode;
			return true;
		}
	}
	return false;
}

bool
sim_dialect_parse_spec(const char *spec, unsigned n, struct sim_engine_dialect *out,
                       char **error)
{
	g_auto(GStrv) parts = g_strsplit(spec, ",", -1);
	unsigned given = g_strv_length(parts);
	unsigned autos = 0, seen = 0;

	if (given != 1 && given != n) {
		*error = g_strdup_printf("--dialect: expected one dialect for every engine or one per "
		                         "engine (%u), got %u", n, given);
		return false;
	}
	for (unsigned i = 0; i < given; i++) {
		g_strstrip(parts[i]);
		if (!parse_entry(parts[i], &out[i])) {
			*error = g_strdup_printf("--dialect: unknown dialect \"%s\"; expected vllm, "
			                         "sglang, sglang:prefill, sglang:decode, "
			                         "sglang:aggregate or llamacpp", parts[i]);
			return false;
		}
	}
	for (unsigned i = given; i < n; i++)
		out[i] = out[0];
	for (unsigned i = 0; i < n; i++)
		autos += out[i].mode == SIM_PD_AUTO;
	/* A PD pair needs two engines: a lone SGLang engine serves whole
	 * requests, as one launched without --disaggregation-mode does. */
	for (unsigned i = 0; i < n; i++) {
		if (out[i].mode != SIM_PD_AUTO)
			continue;
		out[i].mode = autos == 1 ? SIM_PD_NONE
		              : seen < (autos + 1) / 2 ? SIM_PD_PREFILL : SIM_PD_DECODE;
		seen++;
	}
	return true;
}

const char *
sim_dialect_fleet_role(const struct sim_engine_dialect *all, unsigned n, unsigned i)
{
	unsigned vllm = 0, before = 0;

	switch (all[i].mode) {
	case SIM_PD_PREFILL:
		return "prefill";
	case SIM_PD_DECODE:
		return "decode";
	case SIM_PD_NONE:
		return NULL;
	default:
		break;
	}
	for (unsigned k = 0; k < n; k++) {
		if (all[k].mode != SIM_PD_ANY)
			continue;
		vllm++;
		before += k < i;
	}
	return before < (vllm + 1) / 2 ? "prefill" : "decode";
}

/* --- errors ------------------------------------------------------------- */

const char *
sim_error_type(unsigned status)
{
	switch (status) {
	case 400: return "BadRequestError";
	case 401: return "AuthenticationError";
	case 403: return "PermissionDeniedError";
	case 404: return "NotFoundError";
	case 405: return "MethodNotAllowedError";
	case 408: return "RequestTimeoutError";
	case 409: return "ConflictError";
	case 413: return "RequestEntityTooLargeError";
	case 422: return "UnprocessableEntityError";
	case 429: return "RateLimitError";
	case 501: return "NotImplementedError";
	case 502: return "BadGatewayError";
	case 503: return "ServiceUnavailableError";
	case 504: return "GatewayTimeoutError";
	default: return status >= 500 ? "InternalServerError" : "BadRequestError";
	}
}

/* llama.cpp's error types (its server's error_type enum, wire formats 4.4
 * and 5.3 give not_found_error, unavailable_error and
 * exceed_context_size_error). */
const char *
sim_llamacpp_error_type(unsigned status)
{
	switch (status) {
	case 401: return "authentication_error";
	case 403: return "permission_error";
	case 404: return "not_found_error";
	case 501: return "not_supported_error";
	case 503: return "unavailable_error";
	default: return status >= 500 ? "server_error" : "invalid_request_error";
	}
}

char *
sim_dialect_error_text(sim_dialect d, unsigned status, const char *param, const char *message,
                       bool in_band, uint32_t n_prompt, uint32_t n_ctx)
{
	json_t *doc, *err;
	char *dumped, *text;

	if (d == SIM_DIALECT_LLAMACPP) {
		err = json_pack("{s:i, s:s, s:s}", "code", (int)status, "message", message, "type",
		                n_ctx > 0 ? "exceed_context_size_error"
		                          : sim_llamacpp_error_type(status));
		if (n_ctx > 0) {
			json_object_set_new(err, "n_prompt_tokens", json_integer(n_prompt));
			json_object_set_new(err, "n_ctx", json_integer(n_ctx));
		}
		doc = json_pack("{s:o}", "error", err);
	} else {
		err = json_pack("{s:s, s:s, s:o, s:i}", "message", message, "type",
		                sim_error_type(status), "param",
		                param ? json_string(param) : json_null(), "code", (int)status);
		if (d == SIM_DIALECT_SGLANG && !in_band) {
			/* SGLang's ErrorResponse is flat, "object" first. */
			doc = json_pack("{s:s}", "object", "error");
			json_object_update(doc, err);
			json_decref(err);
		} else {
			doc = json_pack("{s:o}", "error", err);
		}
	}
	dumped = json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(doc);
	text = g_strdup(dumped);
	free(dumped);
	return text;
}

/* --- tokenize ------------------------------------------------------------ */

static json_t *
fail(struct sim_dialect_fail *f, unsigned status, const char *message)
{
	f->status = status;
	f->message = g_strdup(message);
	return NULL;
}

static json_t *
token_list(const char *text, bool special, uint32_t *count)
{
	GArray *ids = g_array_new(FALSE, FALSE, sizeof(guint32));
	json_t *list = json_array();

	if (special) {
		guint32 bos = SIM_TOKEN_BOS;

		g_array_append_val(ids, bos);
	}
	sim_tokenize(text, strlen(text), ids);
	for (guint i = 0; i < ids->len; i++)
		json_array_append_new(list, json_integer(g_array_index(ids, guint32, i)));
	*count = ids->len;
	g_array_free(ids, TRUE);
	return list;
}

static bool
optional_bool(const json_t *req, const char *key, bool def, bool *out,
              struct sim_dialect_fail *f)
{
	const json_t *v = json_object_get(req, key);

	*out = def;
	if (v == NULL || json_is_null(v))
		return true;
	if (!json_is_boolean(v)) {
		g_autofree char *msg = g_strdup_printf("'%s' must be a boolean.", key);
		fail(f, 400, msg);
		return false;
	}
	*out = json_is_true(v);
	return true;
}

json_t *
sim_sglang_tokenize(const json_t *req, uint32_t max_model_len, struct sim_dialect_fail *f)
{
	const json_t *prompt = json_object_get(req, "prompt");
	json_t *tokens, *count, *v;
	uint32_t n;
	bool special;
	size_t i;

	/* SGLang's tokenize request takes the completion form only (wire
	 * formats 3: no chat messages form). */
	if (!optional_bool(req, "add_special_tokens", true, &special, f))
		return NULL;
	if (json_is_string(prompt)) {
		tokens = token_list(json_string_value(prompt), special, &n);
		return json_pack("{s:o, s:i, s:i}", "tokens", tokens, "count", (int)n,
		                 "max_model_len", (int)max_model_len);
	}
	if (!json_is_array(prompt) || json_array_size(prompt) == 0)
		return fail(f, 400, "'prompt' must be a string or a non-empty list of strings.");
	json_array_foreach(prompt, i, v) {
		if (!json_is_string(v))
			return fail(f, 400, "'prompt' must be a string or a list of strings.");
	}
	tokens = json_array();
	count = json_array();
	json_array_foreach(prompt, i, v) {
		json_array_append_new(tokens, token_list(json_string_value(v), special, &n));
		json_array_append_new(count, json_integer(n));
	}
	return json_pack("{s:o, s:o, s:i}", "tokens", tokens, "count", count, "max_model_len",
	                 (int)max_model_len);
}

/* A piece as llama.cpp shows it: a string when it is valid UTF-8, else
 * its bytes. */
static json_t *
piece_json(const char *p, size_t len)
{
	json_t *bytes;

	if (g_utf8_validate(p, (gssize)len, NULL))
		return json_stringn(p, len);
	bytes = json_array();
	for (size_t i = 0; i < len; i++)
		json_array_append_new(bytes, json_integer((unsigned char)p[i]));
	return bytes;
}

json_t *
sim_llamacpp_tokenize(const json_t *req, struct sim_dialect_fail *f)
{
	const json_t *content = json_object_get(req, "content");
	bool special, pieces;
	const char *text;
	size_t len, at = 0;
	json_t *tokens;

	/* add_special defaults to false here (wire formats 3). */
	if (!optional_bool(req, "add_special", false, &special, f) ||
	    !optional_bool(req, "with_pieces", false, &pieces, f))
		return NULL;
	if (!json_is_string(content))
		return fail(f, 400, "\"content\" must be provided as a string.");
	text = json_string_value(content);
	len = json_string_length(content);
	if (!pieces) {
		uint32_t n;

		return json_pack("{s:o}", "tokens", token_list(text, special, &n));
	}
	tokens = json_array();
	if (special)
		json_array_append_new(tokens, json_pack("{s:i, s:s}", "id", (int)SIM_TOKEN_BOS,
		                                        "piece", "<s>"));
	while (at < len) {
		size_t n = sim_token_len(text, len, at);
		GArray *ids = g_array_new(FALSE, FALSE, sizeof(guint32));

		sim_tokenize(text + at, n, ids);
		json_array_append_new(tokens, json_pack("{s:i, s:o}", "id",
		                                        (int)g_array_index(ids, guint32, 0),
		                                        "piece", piece_json(text + at, n)));
		g_array_free(ids, TRUE);
		at += n;
	}
	return json_pack("{s:o}", "tokens", tokens);
}

/* --- SGLang's bootstrap --------------------------------------------------- */

static bool
absent(const json_t *v)
{
	return v == NULL || json_is_null(v);
}

int
sim_sglang_bootstrap(const json_t *req, uint64_t *room, struct sim_dialect_fail *f)
{
	const json_t *host = json_object_get(req, "bootstrap_host");
	const json_t *port = json_object_get(req, "bootstrap_port");
	const json_t *r = json_object_get(req, "bootstrap_room");

	if (absent(host) && absent(port) && absent(r))
		return 0;
	if (json_is_array(host) || json_is_array(port) || json_is_array(r)) {
		fail(f, 400, "narwhal-sim takes one prompt per request: bootstrap_host, "
		     "bootstrap_port and bootstrap_room must not be lists.");
		return -1;
	}
	if (!json_is_string(host) || json_string_length(host) == 0) {
		fail(f, 400, "bootstrap_host must be a non-empty string.");
		return -1;
	}
	if (!absent(port) && (!json_is_integer(port) || json_integer_value(port) < 1 ||
	                      json_integer_value(port) > 65535)) {
		fail(f, 400, "bootstrap_port must be null or a port number.");
		return -1;
	}
	if (!json_is_integer(r) || json_integer_value(r) < 0) {
		fail(f, 400, "bootstrap_room must be an integer from 0 to 2^63-1.");
		return -1;
	}
	*room = (uint64_t)json_integer_value(r);
	return 1;
}
