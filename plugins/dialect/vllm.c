/*
 * The "vllm" dialect: vLLM's OpenAI-compatible server with the NixlConnector
 * disaggregated flow (docs/plugins.md, "vllm (dialect)").
 *
 * The handoff is sequential. The prefill leg is the client's request with
 * kv_transfer_params {do_remote_decode: true}, no streaming and one output
 * token; the top-level kv_transfer_params object of its answer is the
 * handoff, which the decode leg carries verbatim next to the client's
 * original body. A body without kv_transfer_params is a plain request that
 * does both phases, so any engine can take any role per request and a
 * missing handoff simply makes the decode engine prefill locally.
 *
 * The router owns kv_transfer_params: whatever a client put there is dropped
 * from every engine call.
 *
 * The monitor reads GET /metrics (Prometheus text) for the running and
 * waiting requests, the KV-cache usage and the process start time.
 *
 * Config: none. No section, null or {} is accepted; any key is refused by
 * name.
 */
#include <narwhal/plugin-abi.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vllm-metrics.h"

#define VLLM_MAGIC 0x564c4c4du /* "VLLM" */

#define KV_PARAMS "kv_transfer_params"

struct vllm_dialect {
	unsigned magic;
	const struct narwhal_host *host;
};

static struct vllm_dialect *
vllm_cast(void *instance)
{
	struct vllm_dialect *vd = instance;

	if (vd == NULL || vd->magic != VLLM_MAGIC)
		abort(); /* the host passed something that is not ours */
	return vd;
}

static int
vllm_create(const struct narwhal_host *host, const json_t *config, void **instance,
            char *err, size_t err_len)
{
	struct vllm_dialect *vd;

	if (config != NULL && !json_is_null(config)) {
		const char *key;
		json_t *value;

		if (!json_is_object(config)) {
			snprintf(err, err_len, "config must be an empty object: the vllm dialect "
			         "takes no options");
			return -EINVAL;
		}
		/* Read-only walk; the cast only satisfies the macro's type. */
		json_object_foreach((json_t *)config, key, value) {
			(void)value;
			snprintf(err, err_len, "unknown key \"%s\": the vllm dialect takes no options",
			         key);
			return -EINVAL;
		}
	}
	vd = calloc(1, sizeof *vd);
	if (vd == NULL) {
		snprintf(err, err_len, "out of memory");
		return -ENOMEM;
	}
	vd->magic = VLLM_MAGIC;
	vd->host = host;
	*instance = vd;
	return 0;
}

static void
vllm_destroy(void *instance)
{
	struct vllm_dialect *vd = vllm_cast(instance);

	vd->magic = 0;
	free(vd);
}

static uint32_t
vllm_capabilities(void *instance, const struct narwhal_engine_ref *engine)
{
	(void)engine;
	vllm_cast(instance);
	/* NixlConnector ignores kv_role: kv_transfer_params picks the role. */
	return NARWHAL_DIALECT_HANDOFF_SEQUENTIAL | NARWHAL_DIALECT_PER_REQUEST_ROLES;
}

/* ------------------------------------------------------------------------
 * Requests
 * ------------------------------------------------------------------------ */

/* Generation legs go to the route the client used. */
static const char *
route_path(narwhal_route route)
{
	switch (route) {
	case NARWHAL_ROUTE_COMPLETIONS: return "/v1/completions";
	case NARWHAL_ROUTE_CHAT_COMPLETIONS: return "/v1/chat/completions";
	}
	return NULL;
}

static void
set_call(struct narwhal_http_call *out, const char *method, const char *path, json_t *body)
{
	out->flags = 0;
	out->method = method;
	out->path = path;
	out->body = body;
}

/* A copy of the client body that an engine may see: the router owns
 * kv_transfer_params, so a client's value never gets through. NULL when out
 * of memory. The copy is shallow: the legs only set top-level keys, and
 * the host serialises the body and drops it, never changing what is
 * nested. */
static json_t *
engine_body(const json_t *client_body)
{
	json_t *body = json_copy((json_t *)client_body);

	if (body != NULL)
		json_object_del(body, KV_PARAMS);
	return body;
}

/* Shared argument checks for the builders; the path, or NULL. */
static const char *
check_build(void *instance, const struct narwhal_dialect_target *target,
            const struct narwhal_http_call *out)
{
	vllm_cast(instance);
	if (target == NULL || !json_is_object(target->client_body) || out == NULL)
		return NULL;
	return route_path(target->route);
}

/* A prompt that is already token IDs: a non-empty list of integers. */
static bool
is_token_ids(const json_t *prompt)
{
	size_t i;
	json_t *v;

	if (!json_is_array(prompt) || json_array_size(prompt) == 0)
		return false;
	json_array_foreach(prompt, i, v) {
		if (!json_is_integer(v))
			return false;
	}
	return true;
}

/* Copy client_body[key] into body when the client gave it (a null is not
 * given). Returns -1 only when out of memory. */
static int
copy_key(json_t *body, const json_t *client_body, const char *key)
{
	const json_t *v = json_object_get(client_body, key);

	if (v == NULL || json_is_null(v))
		return 0;
	return json_object_set_new(body, key, json_deep_copy(v));
}

/* Client fields that change how vLLM renders a chat prompt, so the count
 * matches what the generation leg will use. */
static const char *const chat_render_keys[] = {
	"chat_template",
	"chat_template_kwargs",
	"tools",
	"add_generation_prompt",
	"continue_final_message",
	"add_special_tokens",
};

/*
 * POST /tokenize. The completions form sends one string prompt; a prompt of
 * token IDs needs no call (-EALREADY: its count is its length) and a batch
 * of several prompts has no single count (-ENOTSUP: size it by characters).
 * The chat form sends the messages with whatever the client gave that
 * changes the rendered prompt.
 */
static int
vllm_build_tokenize(void *instance, const struct narwhal_dialect_target *target,
                    struct narwhal_http_call *out)
{
	const json_t *client_body;
	const json_t *prompt;
	json_t *body;
	int rc = 0;

	if (check_build(instance, target, out) == NULL)
		return -EINVAL;
	client_body = target->client_body;
	body = json_object();
	if (body == NULL)
		return -ENOMEM;
	rc |= copy_key(body, client_body, "model");
	if (target->route == NARWHAL_ROUTE_COMPLETIONS) {
		prompt = json_object_get(client_body, "prompt");
		/* A batch of one is one prompt. */
		if (json_is_array(prompt) && json_array_size(prompt) == 1 &&
		    json_is_string(json_array_get(prompt, 0)))
			prompt = json_array_get(prompt, 0);
		if (!json_is_string(prompt)) {
			json_decref(body);
			if (prompt == NULL)
				return -EINVAL;
			return is_token_ids(prompt) ? -EALREADY : -ENOTSUP;
		}
		rc |= json_object_set_new(body, "prompt", json_deep_copy(prompt));
		rc |= copy_key(body, client_body, "add_special_tokens");
		if (json_object_get(body, "add_special_tokens") == NULL)
			rc |= json_object_set_new(body, "add_special_tokens", json_true());
	} else {
		if (!json_is_array(json_object_get(client_body, "messages"))) {
			json_decref(body);
			return -EINVAL;
		}
		rc |= copy_key(body, client_body, "messages");
		for (size_t i = 0; i < sizeof chat_render_keys / sizeof chat_render_keys[0]; i++)
			rc |= copy_key(body, client_body, chat_render_keys[i]);
		if (json_object_get(body, "add_generation_prompt") == NULL)
			rc |= json_object_set_new(body, "add_generation_prompt", json_true());
	}
	if (rc != 0) {
		json_decref(body);
		return -ENOMEM;
	}
	set_call(out, "POST", "/tokenize", body);
	return 0;
}

/* What the prefill side is told; only do_remote_decode matters to vLLM, the
 * rest is the shape its reference proxy sends. */
static json_t *
prefill_params(void)
{
	return json_pack("{s:b, s:b, s:n, s:n, s:n, s:n}",
	                 "do_remote_decode", 1, "do_remote_prefill", 0,
	                 "remote_engine_id", "remote_block_ids", "remote_host", "remote_port");
}

static int
vllm_build_prefill(void *instance, const struct narwhal_dialect_target *target,
                   struct narwhal_http_call *out)
{
	const char *path = check_build(instance, target, out);
	json_t *body;
	int rc = 0;

	if (path == NULL)
		return -EINVAL;
	body = engine_body(target->client_body);
	if (body == NULL)
		return -ENOMEM;
	/* The prefill side must not stream and rejects or ignores these; the
	 * decode leg gets them back from the client body. */
	json_object_del(body, "stream_options");
	json_object_del(body, "min_tokens");
	json_object_del(body, "min_completion_tokens");
	rc |= json_object_set_new(body, KV_PARAMS, prefill_params());
	rc |= json_object_set_new(body, "stream", json_false());
	rc |= json_object_set_new(body, "max_tokens", json_integer(1));
	if (json_object_get(body, "max_completion_tokens") != NULL)
		rc |= json_object_set_new(body, "max_completion_tokens", json_integer(1));
	if (rc != 0) {
		json_decref(body);
		return -ENOMEM;
	}
	set_call(out, "POST", path, body);
	return 0;
}

/* The client's body as sent, plus the handoff untouched: its fields change
 * between vLLM versions, and only the engines need to agree on them. */
static int
vllm_build_decode(void *instance, const struct narwhal_dialect_target *target,
                  const json_t *handoff, struct narwhal_http_call *out)
{
	const char *path = check_build(instance, target, out);
	json_t *body;

	if (path == NULL)
		return -EINVAL;
	/* A JSON null is "no handoff" too; anything else must be what
	 * parse_prefill returns. */
	if (json_is_null(handoff))
		handoff = NULL;
	if (handoff != NULL && !json_is_object(handoff))
		return -EINVAL;
	body = engine_body(target->client_body);
	if (body == NULL)
		return -ENOMEM;
	/* Without a handoff the body has no kv_transfer_params at all, so the
	 * decode engine prefills locally. */
	if (handoff != NULL &&
	    json_object_set_new(body, KV_PARAMS, json_deep_copy(handoff)) != 0) {
		json_decref(body);
		return -ENOMEM;
	}
	set_call(out, "POST", path, body);
	return 0;
}

static int
vllm_build_aggregate(void *instance, const struct narwhal_dialect_target *target,
                     struct narwhal_http_call *out)
{
	const char *path = check_build(instance, target, out);

	if (path == NULL)
		return -EINVAL;
	/* vLLM takes the request as it is, so the host sends it unchanged
	 * (the client's own bytes when nothing was added). The host refuses a
	 * client kv_transfer_params, since router_keys names it; should one
	 * get here all the same, it is dropped. */
	if (json_object_get(target->client_body, KV_PARAMS) != NULL) {
		json_t *body = engine_body(target->client_body);

		if (body == NULL)
			return -ENOMEM;
		set_call(out, "POST", path, body);
		return 0;
	}
	set_call(out, "POST", path, NULL);
	out->flags = NARWHAL_CALL_CLIENT_BODY;
	return 0;
}

/* 200 with an empty body when up, 503 once the engine is dead. */
static int
vllm_build_health(void *instance, const struct narwhal_engine_ref *engine,
                  struct narwhal_http_call *out)
{
	(void)engine;
	vllm_cast(instance);
	if (out == NULL)
		return -EINVAL;
	set_call(out, "GET", "/health", NULL);
	return 0;
}

/* ------------------------------------------------------------------------
 * Responses
 * ------------------------------------------------------------------------ */

static int
vllm_parse_tokenize(void *instance, const json_t *response, uint64_t *prompt_tokens)
{
	const json_t *count;

	vllm_cast(instance);
	if (response == NULL || prompt_tokens == NULL)
		return -EINVAL;
	count = json_object_get(response, "count");
	if (!json_is_integer(count) || json_integer_value(count) < 0)
		return -EPROTO;
	*prompt_tokens = (uint64_t)json_integer_value(count);
	return 0;
}

static int
vllm_parse_prefill(void *instance, const json_t *response, json_t **handoff)
{
	const json_t *params;

	vllm_cast(instance);
	if (response == NULL || handoff == NULL)
		return -EINVAL;
	*handoff = NULL;
	if (!json_is_object(response))
		return -EPROTO;
	/* Top level in vLLM's OpenAI server; some versions and proxies put it
	 * in the first choice instead. */
	params = json_object_get(response, KV_PARAMS);
	if (params == NULL || json_is_null(params))
		params = json_object_get(json_array_get(json_object_get(response, "choices"), 0),
		                         KV_PARAMS);
	/* None: the prefill ended some other way (aborted; in old versions
	 * also an EOS as the first token) and holds no blocks. */
	if (params == NULL || json_is_null(params))
		return 0;
	if (!json_is_object(params))
		return -EPROTO;
	/* Opaque: copied whole, inner fields neither read nor checked. */
	*handoff = json_deep_copy(params);
	return *handoff != NULL ? 0 : -ENOMEM;
}

/* ---- error classification ---------------------------------------------- */

/* The parts of an error answer that classification reads. */
struct error_fields {
	const char *message;
	const char *type;
	const char *param;
	const json_t *code;
};

static void
read_error_object(const json_t *obj, struct error_fields *ef)
{
	ef->message = json_string_value(json_object_get(obj, "message"));
	ef->type = json_string_value(json_object_get(obj, "type"));
	ef->param = json_string_value(json_object_get(obj, "param"));
	ef->code = json_object_get(obj, "code");
}

/*
 * Find the error in a document: the nested {"error": {...}} of vLLM 0.10.1
 * and later (and of every in-band stream error), {"error": "text"}, or the
 * flat {"object": "error", ...} of older versions. False when the document
 * has none of these shapes.
 */
static bool
find_error(const json_t *doc, struct error_fields *ef)
{
	const json_t *error;

	memset(ef, 0, sizeof *ef);
	if (!json_is_object(doc))
		return false;
	error = json_object_get(doc, "error");
	if (json_is_object(error)) {
		read_error_object(error, ef);
		return true;
	}
	if (json_is_string(error)) {
		ef->message = json_string_value(error);
		return true;
	}
	if (json_is_string(json_object_get(doc, "object")) &&
	    strcmp(json_string_value(json_object_get(doc, "object")), "error") == 0) {
		read_error_object(doc, ef);
		return true;
	}
	return false;
}

/* Error type names and the status each stands for: vLLM's exception class
 * names and HTTP reason phrases, and the OpenAI-style names. */
static const struct {
	const char *type;
	int status;
} type_status[] = {
	{ "BadRequestError", 400 },          { "Bad Request", 400 },
	{ "invalid_request_error", 400 },    { "AuthenticationError", 401 },
	{ "authentication_error", 401 },     { "Unauthorized", 401 },
	{ "PermissionDeniedError", 403 },    { "permission_error", 403 },
	{ "Forbidden", 403 },                { "NotFoundError", 404 },
	{ "not_found_error", 404 },          { "Not Found", 404 },
	{ "MethodNotAllowedError", 405 },    { "Method Not Allowed", 405 },
	{ "RequestTimeoutError", 408 },      { "Request Timeout", 408 },
	{ "ConflictError", 409 },            { "RequestEntityTooLargeError", 413 },
	{ "UnprocessableEntityError", 422 }, { "Unprocessable Entity", 422 },
	{ "RateLimitError", 429 },           { "rate_limit_error", 429 },
	{ "Too Many Requests", 429 },        { "InternalServerError", 500 },
	{ "server_error", 500 },             { "Internal Server Error", 500 },
	{ "NotImplementedError", 501 },      { "not_supported_error", 501 },
	{ "Not Implemented", 501 },          { "BadGatewayError", 502 },
	{ "Bad Gateway", 502 },              { "ServiceUnavailableError", 503 },
	{ "unavailable_error", 503 },        { "Service Unavailable", 503 },
	{ "GatewayTimeoutError", 504 },      { "Gateway Timeout", 504 },
};

/* The status an error answer reports about itself: an integer code that is
 * an HTTP error status, else its type's status, else 0 (unknown). */
static int
reported_status(const struct error_fields *ef)
{
	if (json_is_integer(ef->code)) {
		json_int_t code = json_integer_value(ef->code);

		if (code >= 400 && code <= 599)
			return (int)code;
	}
	if (ef->type != NULL) {
		for (size_t i = 0; i < sizeof type_status / sizeof type_status[0]; i++) {
			if (strcmp(ef->type, type_status[i].type) == 0)
				return type_status[i].status;
		}
	}
	return 0;
}

static char
ascii_lower(char c)
{
	return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

/* Whether hay contains needle (lower case), ignoring ASCII case; no
 * allocation. */
static bool
contains_ci(const char *hay, const char *needle)
{
	size_t n = strlen(needle);

	for (; *hay != '\0'; hay++) {
		size_t i = 0;

		while (i < n && ascii_lower(hay[i]) == needle[i])
			i++;
		if (i == n)
			return true;
	}
	return false;
}

/* The parameters vLLM names when a request does not fit the context. */
static bool
is_length_param(const char *param)
{
	return param != NULL &&
	       (strcmp(param, "input_tokens") == 0 || strcmp(param, "input_text") == 0 ||
	        strcmp(param, "max_tokens") == 0);
}

/*
 * A 400 that means "does not fit the model's context". vLLM's wording has
 * changed several times but always says "context length"; with a length
 * parameter named, any mention of the context will do. The OpenAI-style
 * code string is a shape, not text, and is taken as well.
 */
static bool
is_context_too_long(const struct error_fields *ef)
{
	if (json_is_string(ef->code) &&
	    strcmp(json_string_value(ef->code), "context_length_exceeded") == 0)
		return true;
	if (ef->message == NULL)
		return false;
	if (contains_ci(ef->message, "context length"))
		return true;
	return is_length_param(ef->param) && contains_ci(ef->message, "context");
}

/* Spec 4.2: only these may be retried. A 400, 413 or 422 refuses the
 * client's own request (validation), whose message the client may see;
 * every other status is permanent. */
static narwhal_error_class
status_class(int status)
{
	switch (status) {
	case 408:
	case 429:
	case 500:
	case 502:
	case 503:
	case 504:
		return NARWHAL_ERROR_RETRYABLE;
	case 400:
	case 413:
	case 422:
		return NARWHAL_ERROR_CLIENT;
	default:
		return NARWHAL_ERROR_PERMANENT;
	}
}

/* A decode engine that could not load the remote KV cache it was handed
 * (NixlConnector with kv_load_failure_policy=fail: the producer's lease
 * lapsed, or the producer is gone). vLLM's exact wording is not stable;
 * any server error that speaks of loading the remote KV, or names the
 * policy, is one. */
static bool
is_handoff_load_failure(const struct error_fields *ef)
{
	if (ef->message == NULL)
		return false;
	return contains_ci(ef->message, "kv_load_failure") ||
	       (contains_ci(ef->message, "remote kv") && contains_ci(ef->message, "load"));
}

/* Class of an error whose HTTP status is status (0: take the one the body
 * reports). */
static narwhal_error_class
classify(int status, const struct error_fields *ef)
{
	if (status == 0)
		status = reported_status(ef);
	if (status == 400 && is_context_too_long(ef))
		return NARWHAL_ERROR_CONTEXT_TOO_LONG;
	if ((status == 0 || status >= 500) && is_handoff_load_failure(ef))
		return NARWHAL_ERROR_HANDOFF;
	return status_class(status);
}

/* Copy a string into a fixed buffer, cut at a character boundary. */
static void
copy_text(char *dst, size_t size, const char *src)
{
	size_t n;

	if (src == NULL) {
		dst[0] = '\0';
		return;
	}
	n = strlen(src);
	if (n >= size) {
		n = size - 1;
		/* Do not end inside a UTF-8 sequence. */
		while (n > 0 && ((unsigned char)src[n] & 0xc0) == 0x80)
			n--;
	}
	memcpy(dst, src, n);
	dst[n] = '\0';
}

static int
vllm_parse_error(void *instance, int32_t http_status, const char *body, size_t len,
                 struct narwhal_engine_error *out)
{
	struct error_fields ef;
	json_error_t jerr;
	json_t *doc = NULL;
	bool found;

	vllm_cast(instance);
	if (out == NULL)
		return -EINVAL;
	if (body != NULL && len > 0)
		doc = json_loadb(body, len, 0, &jerr);
	found = find_error(doc, &ef);
	/* An object without a known error shape may still be a flat error. */
	if (!found && json_is_object(doc))
		read_error_object(doc, &ef);
	/* An HTTP error status is the answer; otherwise (an in-band error,
	 * status 0, or an error body under 2xx) a body says its own, and
	 * without one the host's preset stands. */
	if (http_status >= 400 && http_status <= 599)
		out->error_class = classify(http_status, &ef);
	else if (json_is_object(doc))
		out->error_class = classify(0, &ef);
	copy_text(out->message, sizeof out->message, ef.message);
	copy_text(out->param, sizeof out->param, ef.param);
	json_decref(doc);
	return found || ef.message != NULL ? 0 : -EPROTO;
}

/* ---- models ------------------------------------------------------------- */

static int
vllm_build_models(void *instance, const struct narwhal_engine_ref *engine,
                  struct narwhal_http_call *out)
{
	(void)engine;
	vllm_cast(instance);
	if (out == NULL)
		return -EINVAL;
	set_call(out, "GET", "/v1/models", NULL);
	return 0;
}

/* vLLM lists the served model first, with its max_model_len. */
static int
vllm_parse_models(void *instance, const json_t *response, struct narwhal_model_info *out)
{
	const json_t *id, *len;

	vllm_cast(instance);
	if (response == NULL || out == NULL)
		return -EINVAL;
	id = json_object_get(json_array_get(json_object_get(response, "data"), 0), "id");
	if (!json_is_string(id) || json_string_length(id) == 0 ||
	    json_string_length(id) >= sizeof out->name)
		return -EPROTO;
	copy_text(out->name, sizeof out->name, json_string_value(id));
	len = json_object_get(json_array_get(json_object_get(response, "data"), 0),
	                      "max_model_len");
	if (json_is_integer(len) && json_integer_value(len) > 0)
		out->max_model_len = json_integer_value(len);
	return 0;
}

/* ---- engine metrics (ABI 2.1) ----------------------------------------- */

static int
vllm_build_metrics(void *instance, const struct narwhal_engine_ref *engine,
                   struct narwhal_http_call *out)
{
	(void)engine;
	vllm_cast(instance);
	if (out == NULL)
		return -EINVAL;
	set_call(out, "GET", "/metrics", NULL);
	return 0;
}

/* GET /metrics: running and waiting requests, KV-cache usage and the
 * process start time (vllm-metrics.c). */
static int
vllm_parse_metrics(void *instance, const char *body, size_t len,
                   struct narwhal_engine_metrics *out)
{
	vllm_cast(instance);
	return vllm_metrics_read(body, len, out);
}

/* The handoff travels in kv_transfer_params: only the router may set it. */
static const char *const *
vllm_router_keys(void *instance)
{
	static const char *const keys[] = { KV_PARAMS, NULL };

	vllm_cast(instance);
	return keys;
}

/* ---- SSE events --------------------------------------------------------- */

static bool
nonempty_string(const json_t *v)
{
	return json_is_string(v) && json_string_length(v) > 0;
}

/* Whether one choice carries generated output. */
static bool
choice_has_output(const json_t *choice)
{
	const json_t *delta, *tools;

	if (!json_is_object(choice))
		return false;
	/* Completions. */
	if (nonempty_string(json_object_get(choice, "text")))
		return true;
	/* Chat; "message" when a request that cannot stream (beam search)
	 * arrives as one event holding the whole response. */
	delta = json_object_get(choice, "delta");
	if (!json_is_object(delta))
		delta = json_object_get(choice, "message");
	if (!json_is_object(delta))
		return false;
	tools = json_object_get(delta, "tool_calls");
	return nonempty_string(json_object_get(delta, "content")) ||
	       nonempty_string(json_object_get(delta, "reasoning")) ||
	       nonempty_string(json_object_get(delta, "reasoning_content")) ||
	       (json_is_array(tools) && json_array_size(tools) > 0);
}

static int64_t
usage_count(const json_t *usage, const char *key)
{
	const json_t *v = json_object_get(usage, key);

	return json_is_integer(v) && json_integer_value(v) >= 0 ? json_integer_value(v) : -1;
}

static bool
is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

/* The success terminator, allowing stray whitespace around it. */
static bool
is_done(const char *data, size_t len)
{
	while (len > 0 && is_space(data[0])) {
		data++;
		len--;
	}
	while (len > 0 && is_space(data[len - 1]))
		len--;
	return len == 6 && memcmp(data, "[DONE]", 6) == 0;
}

/* Whether hay holds needle; no allocation. This runs on every relayed
 * token event, so memchr finds the candidates. */
static bool
contains(const char *hay, size_t len, const char *needle, size_t n)
{
	while (len >= n) {
		const char *q = memchr(hay, needle[0], len - n + 1);

		if (q == NULL)
			return false;
		if (memcmp(q, needle, n) == 0)
			return true;
		len -= (size_t)(q - hay) + 1;
		hay = q + 1;
	}
	return false;
}

/* After the first token only a terminator or an error changes what the
 * host does, and a token event holds neither text outside its strings
 * (inside them a quote is escaped, so "\"error\"" cannot match there). */
static bool
vllm_sniff_sse(void *instance, const char *data, size_t len)
{
	vllm_cast(instance);
	return contains(data, len, "[DONE]", 6) || contains(data, len, "\"error\"", 7);
}

/*
 * One data payload. tokens counts the choices that carry output in this
 * event; vLLM sends one token per choice per event unless it batches, so it
 * is an event count, and exact totals come from usage. Usage is read from
 * any event that has it (continuous_usage_stats puts it on every chunk).
 */
static int
vllm_parse_sse(void *instance, const char *data, size_t len, struct narwhal_sse_event *out)
{
	const json_t *choices, *usage;
	struct error_fields ef;
	json_error_t jerr;
	json_t *doc;
	size_t i;
	json_t *choice;

	vllm_cast(instance);
	if (data == NULL || out == NULL)
		return -EINVAL;
	out->tokens = 0;
	out->prompt_tokens = -1;
	out->completion_tokens = -1;
	if (is_done(data, len)) {
		out->kind = NARWHAL_SSE_DONE;
		return 0;
	}
	doc = json_loadb(data, len, 0, &jerr);
	if (!json_is_object(doc)) {
		json_decref(doc);
		return -EPROTO;
	}
	usage = json_object_get(doc, "usage");
	if (json_is_object(usage)) {
		out->prompt_tokens = usage_count(usage, "prompt_tokens");
		out->completion_tokens = usage_count(usage, "completion_tokens");
	} else {
		usage = NULL;
	}
	choices = json_object_get(doc, "choices");
	if (find_error(doc, &ef)) {
		/* In-band: the status is already 200, so the body says it. */
		out->kind = NARWHAL_SSE_ERROR;
		out->error_class = classify(0, &ef);
	} else if (json_is_array(choices) && json_array_size(choices) > 0) {
		json_array_foreach(choices, i, choice) {
			if (choice_has_output(choice))
				out->tokens++;
		}
		out->kind = out->tokens > 0 ? NARWHAL_SSE_TOKENS : NARWHAL_SSE_OTHER;
	} else {
		out->kind = usage != NULL ? NARWHAL_SSE_USAGE : NARWHAL_SSE_OTHER;
	}
	json_decref(doc);
	return 0;
}

/* vLLM answers prompt_logprobs only in a whole body: it refuses the key on
 * a stream. */
static bool
vllm_whole_body_only(void *instance, const json_t *client_body)
{
	const json_t *v = json_object_get(client_body, "prompt_logprobs");

	vllm_cast(instance);
	return v != NULL && !json_is_null(v);
}

static const struct narwhal_dialect_ops vllm_ops = {
	.struct_size = sizeof(struct narwhal_dialect_ops),
	.create = vllm_create,
	.destroy = vllm_destroy,
	.capabilities = vllm_capabilities,
	.build_tokenize = vllm_build_tokenize,
	.parse_tokenize = vllm_parse_tokenize,
	.build_prefill = vllm_build_prefill,
	.build_decode = vllm_build_decode,
	.parse_prefill = vllm_parse_prefill,
	.build_aggregate = vllm_build_aggregate,
	.build_health = vllm_build_health,
	.parse_sse = vllm_parse_sse,
	.sniff_sse = vllm_sniff_sse,
	.parse_error = vllm_parse_error,
	.build_models = vllm_build_models,
	.parse_models = vllm_parse_models,
	.router_keys = vllm_router_keys,
	.whole_body_only = vllm_whole_body_only,
	.build_metrics = vllm_build_metrics,
	.parse_metrics = vllm_parse_metrics,
};

NARWHAL_DIALECT_PLUGIN("vllm", "2.1.0", &vllm_ops)
