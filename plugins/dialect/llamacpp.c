/*
 * The "llamacpp" dialect: llama.cpp's server (llama-server) and its
 * OpenAI-compatible routes (docs/dialects.md, "llama.cpp").
 *
 * llama.cpp has no remote KV handoff, so every engine of this dialect is
 * aggregate-only: capabilities() offers no handoff flag, the host never
 * gives it a prefill or decode leg, and the role controller never moves
 * it. Each request runs whole on one engine, sent as the client wrote it.
 *
 * Sizing uses POST /tokenize, which takes one string ("content") and
 * answers the token list; the monitor reads GET /metrics (only served with
 * --metrics) for the busy slots, the deferred requests and, where the
 * build exports it, the KV-cache usage. Reference: engine-wire-formats
 * sections 3, 4.4, 4.5, 5.3 and 6.
 *
 * Config: none. No section, null or {} is accepted; any key is refused by
 * name.
 */
#include <narwhal/plugin-abi.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine-metrics.h"
#include "openai.h"

#define LLAMACPP_MAGIC 0x4c4c4350u /* "LLCP" */

struct llamacpp_dialect {
	unsigned magic;
	const struct narwhal_host *host;
};

static struct llamacpp_dialect *
llamacpp_cast(void *instance)
{
	struct llamacpp_dialect *ld = instance;

	if (ld == NULL || ld->magic != LLAMACPP_MAGIC)
		abort(); /* the host passed something that is not ours */
	return ld;
}

static int
llamacpp_create(const struct narwhal_host *host, const json_t *config, void **instance,
                char *err, size_t err_len)
{
	struct llamacpp_dialect *ld;

	if (!oai_config_empty("llamacpp", config, err, err_len))
		return -EINVAL;
	ld = calloc(1, sizeof *ld);
	if (ld == NULL) {
		snprintf(err, err_len, "out of memory");
		return -ENOMEM;
	}
	ld->magic = LLAMACPP_MAGIC;
	ld->host = host;
	*instance = ld;
	return 0;
}

static void
llamacpp_destroy(void *instance)
{
	struct llamacpp_dialect *ld = llamacpp_cast(instance);

	ld->magic = 0;
	free(ld);
}

/* No remote KV handoff in llama.cpp: whole requests only. */
static uint32_t
llamacpp_capabilities(void *instance, const struct narwhal_engine_ref *engine)
{
	(void)engine;
	llamacpp_cast(instance);
	return 0;
}

/* ------------------------------------------------------------------------
 * Requests
 * ------------------------------------------------------------------------ */

/*
 * POST /tokenize with {"content": prompt}. add_special is sent true, since
 * the completion routes add the model's BOS and /tokenize by default does
 * not (the count would be one short); parse_special true, as the
 * completion routes parse special tokens in the prompt. A prompt of token
 * IDs needs no call (-EALREADY) and a batch has no single count
 * (-ENOTSUP). llama.cpp's /tokenize has no chat form, and rendering the
 * template first (/apply-template) would be a second call: chat requests
 * are sized by characters (-ENOTSUP).
 */
static int
llamacpp_build_tokenize(void *instance, const struct narwhal_dialect_target *target,
                        struct narwhal_http_call *out)
{
	const json_t *client_body, *prompt, *model;
	json_t *body;

	llamacpp_cast(instance);
	if (target == NULL || !json_is_object(target->client_body) || out == NULL ||
	    oai_route_path(target->route) == NULL)
		return -EINVAL;
	client_body = target->client_body;
	if (target->route == NARWHAL_ROUTE_CHAT_COMPLETIONS)
		return json_is_array(json_object_get(client_body, "messages")) ? -ENOTSUP : -EINVAL;
	prompt = json_object_get(client_body, "prompt");
	/* A batch of one is one prompt. */
	if (json_is_array(prompt) && json_array_size(prompt) == 1 &&
	    json_is_string(json_array_get(prompt, 0)))
		prompt = json_array_get(prompt, 0);
	if (!json_is_string(prompt)) {
		if (prompt == NULL)
			return -EINVAL;
		return oai_is_token_ids(prompt) ? -EALREADY : -ENOTSUP;
	}
	body = json_pack("{s:O, s:b, s:b}", "content", prompt, "add_special", 1,
	                 "parse_special", 1);
	if (body == NULL)
		return -ENOMEM;
	/* In router mode llama-server picks the model by name; a single-model
	 * server ignores the key. */
	model = json_object_get(client_body, "model");
	if (json_is_string(model) &&
	    json_object_set_new(body, "model", json_deep_copy(model)) != 0) {
		json_decref(body);
		return -ENOMEM;
	}
	oai_set_call(out, "POST", "/tokenize", body);
	return 0;
}

/* The client's body, unchanged: llama.cpp takes the OpenAI shape. */
static int
llamacpp_build_aggregate(void *instance, const struct narwhal_dialect_target *target,
                         struct narwhal_http_call *out)
{
	const char *path;

	llamacpp_cast(instance);
	if (target == NULL || !json_is_object(target->client_body) || out == NULL)
		return -EINVAL;
	path = oai_route_path(target->route);
	if (path == NULL)
		return -EINVAL;
	oai_set_call(out, "POST", path, NULL);
	out->flags = NARWHAL_CALL_CLIENT_BODY;
	return 0;
}

/* GET /health: 200 {"status": "ok"} once the model is loaded, 503 while it
 * loads. No API key is needed for it. */
static int
llamacpp_build_health(void *instance, const struct narwhal_engine_ref *engine,
                      struct narwhal_http_call *out)
{
	(void)engine;
	llamacpp_cast(instance);
	if (out == NULL)
		return -EINVAL;
	oai_set_call(out, "GET", "/health", NULL);
	return 0;
}

static int
llamacpp_build_models(void *instance, const struct narwhal_engine_ref *engine,
                      struct narwhal_http_call *out)
{
	(void)engine;
	llamacpp_cast(instance);
	if (out == NULL)
		return -EINVAL;
	oai_set_call(out, "GET", "/v1/models", NULL);
	return 0;
}

static int
llamacpp_build_metrics(void *instance, const struct narwhal_engine_ref *engine,
                       struct narwhal_http_call *out)
{
	(void)engine;
	llamacpp_cast(instance);
	if (out == NULL)
		return -EINVAL;
	oai_set_call(out, "GET", "/metrics", NULL);
	return 0;
}

/* ------------------------------------------------------------------------
 * Responses
 * ------------------------------------------------------------------------ */

/* {"tokens": [...]}: IDs, or {"id", "piece"} objects with with_pieces. The
 * count is the list's length. */
static int
llamacpp_parse_tokenize(void *instance, const json_t *response, uint64_t *prompt_tokens)
{
	const json_t *tokens;
	size_t i;
	json_t *t;

	llamacpp_cast(instance);
	if (response == NULL || prompt_tokens == NULL)
		return -EINVAL;
	tokens = json_object_get(response, "tokens");
	if (!json_is_array(tokens))
		return -EPROTO;
	json_array_foreach(tokens, i, t) {
		if (!json_is_integer(t) && !json_is_integer(json_object_get(t, "id")))
			return -EPROTO;
	}
	*prompt_tokens = json_array_size(tokens);
	return 0;
}

/* data[0].id is the served model: the --alias when given, else the model
 * file's path, whose directory the clients are not to see (GET /v1/models
 * serves this name); the file's own name serves as well, as a single-model
 * server takes any name in a request. meta.n_ctx_train is the model's
 * training context, not the server's -c window, so max_model_len stays
 * unknown and an over-long request is refused by the engine
 * (exceed_context_size_error). */
static int
llamacpp_parse_models(void *instance, const json_t *response, struct narwhal_model_info *out)
{
	const json_t *id;
	const char *name, *end;

	llamacpp_cast(instance);
	if (response == NULL || out == NULL)
		return -EINVAL;
	id = json_object_get(json_array_get(json_object_get(response, "data"), 0), "id");
	if (!json_is_string(id))
		return -EPROTO;
	/* The last part of a path, with '/' or '\\' between parts. */
	name = json_string_value(id);
	end = name + json_string_length(id);
	while (end > name && (end[-1] == '/' || end[-1] == '\\'))
		end--;
	for (const char *p = name; p < end; p++) {
		if (*p == '/' || *p == '\\')
			name = p + 1;
	}
	if (end == name || (size_t)(end - name) >= sizeof out->name)
		return -EPROTO;
	memcpy(out->name, name, (size_t)(end - name));
	out->name[end - name] = '\0';
	return 0;
}

/* ---- errors and SSE events (openai.c) ----------------------------------- */

/* llama.cpp nests every error, {"error": {"code", "message", "type"}}, in a
 * body and in a stream, and its types name their statuses; it has no
 * handoff. A request too long for the context is a 400 of type
 * exceed_context_size_error, or in older builds one that says "context
 * size". Its stream's last chunk carries the finish reason beside the
 * usage (with stream_options.include_usage, or always in older builds). */
static const struct oai_answers llamacpp_answers = {
	.usage_beside_choices = true,
	.context_size_words = true,
};

static int
llamacpp_parse_error(void *instance, int32_t http_status, const char *body, size_t len,
                     struct narwhal_engine_error *out)
{
	llamacpp_cast(instance);
	return oai_parse_error(&llamacpp_answers, http_status, body, len, out);
}

/* ---- engine metrics (ABI 2.1) ------------------------------------------ */

/* Requests in a slot are running; deferred ones wait for a free slot.
 * llamacpp:kv_cache_usage_ratio is exported by older builds only. No start
 * time is exported, so a restart shows only through /health. */
static int
llamacpp_parse_metrics(void *instance, const char *body, size_t len,
                       struct narwhal_engine_metrics *out)
{
	static const struct engine_metric_names names = {
		.running = "llamacpp:requests_processing",
		.waiting = "llamacpp:requests_deferred",
		.kv_usage = "llamacpp:kv_cache_usage_ratio",
	};

	llamacpp_cast(instance);
	return engine_metrics_read(body, len, &names, out);
}

/* After the first token only a terminator or an error matters to the
 * host. */
static bool
llamacpp_sniff_sse(void *instance, const char *data, size_t len)
{
	llamacpp_cast(instance);
	return oai_sniff_sse(data, len);
}

static int
llamacpp_parse_sse(void *instance, const char *data, size_t len,
                   struct narwhal_sse_event *out)
{
	llamacpp_cast(instance);
	return oai_parse_sse(&llamacpp_answers, data, len, out);
}

static int
llamacpp_parse_sse_json(void *instance, const json_t *doc, const char *data, size_t len,
                         struct narwhal_sse_event *out)
{
	llamacpp_cast(instance);
	(void)data;
	(void)len;
	return oai_parse_sse_json(&llamacpp_answers, doc, out);
}

static const struct narwhal_dialect_ops llamacpp_ops = {
	.struct_size = sizeof(struct narwhal_dialect_ops),
	.create = llamacpp_create,
	.destroy = llamacpp_destroy,
	.capabilities = llamacpp_capabilities,
	.build_tokenize = llamacpp_build_tokenize,
	.parse_tokenize = llamacpp_parse_tokenize,
	.build_aggregate = llamacpp_build_aggregate,
	.build_health = llamacpp_build_health,
	.parse_sse = llamacpp_parse_sse,
	.sniff_sse = llamacpp_sniff_sse,
	.parse_error = llamacpp_parse_error,
	.build_models = llamacpp_build_models,
	.parse_models = llamacpp_parse_models,
	.build_metrics = llamacpp_build_metrics,
	.parse_metrics = llamacpp_parse_metrics,
	.parse_sse_json = llamacpp_parse_sse_json,
};

NARWHAL_DIALECT_PLUGIN("llamacpp", "2.1.0", &llamacpp_ops)
