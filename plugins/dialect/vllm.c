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

#include "engine-metrics.h"
#include "openai.h"

#define VLLM_MAGIC 0x564c4c4du /* "VLLM" */

#define KV_PARAMS "kv_transfer_params"

struct vllm_dialect {
	unsigned magic;
	const struct narwhal_host *host;
	json_t *prefill_params; /* the same for every prefill leg: shared */
};

static struct vllm_dialect *
vllm_cast(void *instance)
{
	struct vllm_dialect *vd = instance;

	if (vd == NULL || vd->magic != VLLM_MAGIC)
		abort(); /* the host passed something that is not ours */
	return vd;
}

/* What the prefill side is told; only do_remote_decode matters to vLLM, the
 * rest is the shape its reference proxy sends. Built once per instance and
 * shared by every prefill body: nothing changes it, and the host only
 * serialises a body and drops it. */
static json_t *
prefill_params(void)
{
	return json_pack("{s:b, s:b, s:n, s:n, s:n, s:n}",
	                 "do_remote_decode", 1, "do_remote_prefill", 0,
	                 "remote_engine_id", "remote_block_ids", "remote_host", "remote_port");
}

static int
vllm_create(const struct narwhal_host *host, const json_t *config, void **instance,
            char *err, size_t err_len)
{
	struct vllm_dialect *vd;

	if (!oai_config_empty("vllm", config, err, err_len))
		return -EINVAL;
	vd = calloc(1, sizeof *vd);
	if (vd == NULL) {
		snprintf(err, err_len, "out of memory");
		return -ENOMEM;
	}
	vd->magic = VLLM_MAGIC;
	vd->host = host;
	vd->prefill_params = prefill_params();
	if (vd->prefill_params == NULL) {
		free(vd);
		snprintf(err, err_len, "out of memory");
		return -ENOMEM;
	}
	*instance = vd;
	return 0;
}

static void
vllm_destroy(void *instance)
{
	struct vllm_dialect *vd = vllm_cast(instance);

	vd->magic = 0;
	json_decref(vd->prefill_params);
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
	return oai_route_path(target->route);
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
	rc |= oai_copy_key(body, client_body, "model");
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
			return oai_is_token_ids(prompt) ? -EALREADY : -ENOTSUP;
		}
		rc |= json_object_set_new(body, "prompt", json_deep_copy(prompt));
		rc |= oai_copy_key(body, client_body, "add_special_tokens");
		if (json_object_get(body, "add_special_tokens") == NULL)
			rc |= json_object_set_new(body, "add_special_tokens", json_true());
	} else {
		if (!json_is_array(json_object_get(client_body, "messages"))) {
			json_decref(body);
			return -EINVAL;
		}
		rc |= oai_copy_key(body, client_body, "messages");
		for (size_t i = 0; i < sizeof chat_render_keys / sizeof chat_render_keys[0]; i++)
			rc |= oai_copy_key(body, client_body, chat_render_keys[i]);
		if (json_object_get(body, "add_generation_prompt") == NULL)
			rc |= json_object_set_new(body, "add_generation_prompt", json_true());
	}
	if (rc != 0) {
		json_decref(body);
		return -ENOMEM;
	}
	oai_set_call(out, "POST", "/tokenize", body);
	return 0;
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
	rc |= json_object_set(body, KV_PARAMS, vllm_cast(instance)->prefill_params);
	rc |= json_object_set_new(body, "stream", json_false());
	rc |= json_object_set_new(body, "max_tokens", json_integer(1));
	if (json_object_get(body, "max_completion_tokens") != NULL)
		rc |= json_object_set_new(body, "max_completion_tokens", json_integer(1));
	if (rc != 0) {
		json_decref(body);
		return -ENOMEM;
	}
	oai_set_call(out, "POST", path, body);
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
	oai_set_call(out, "POST", path, body);
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
		oai_set_call(out, "POST", path, body);
		return 0;
	}
	oai_set_call(out, "POST", path, NULL);
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
	oai_set_call(out, "GET", "/health", NULL);
	return 0;
}

/* ------------------------------------------------------------------------
 * Responses
 * ------------------------------------------------------------------------ */

static int
vllm_parse_tokenize(void *instance, const json_t *response, uint64_t *prompt_tokens)
{
	int64_t count;

	vllm_cast(instance);
	if (response == NULL || prompt_tokens == NULL)
		return -EINVAL;
	count = oai_count(json_object_get(response, "count"));
	if (count < 0)
		return -EPROTO;
	*prompt_tokens = (uint64_t)count;
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
	/* Opaque: kept whole, inner fields neither read nor checked. A new
	 * reference rather than a copy: the response is the host's to free,
	 * and nothing changes it (build_decode copies what it sends). */
	*handoff = json_incref((json_t *)params);
	return 0;
}

/* ---- errors and SSE events (openai.c) ----------------------------------- */

/* A decode engine that could not load the remote KV cache it was handed
 * (NixlConnector with kv_load_failure_policy=fail: the producer's lease
 * lapsed, or the producer is gone). vLLM's exact wording is not stable;
 * any server error that speaks of loading the remote KV, or names the
 * policy, is one. */
static bool
is_handoff_load_failure(const struct oai_error *ef)
{
	if (ef->message == NULL)
		return false;
	return oai_contains_ci(ef->message, "kv_load_failure") ||
	       (oai_contains_ci(ef->message, "remote kv") && oai_contains_ci(ef->message, "load"));
}

/* The handoff travels in kv_transfer_params: only the router may set it. */
static const char *const router_keys[] = { KV_PARAMS, NULL };

/* Nested errors (0.10.1 and later) and flat ones (older versions). */
static const struct oai_answers vllm_answers = {
	.flat_errors = true,
	.handoff = is_handoff_load_failure,
	.router_keys = router_keys,
};

static int
vllm_parse_error(void *instance, int32_t http_status, const char *body, size_t len,
                 struct narwhal_engine_error *out)
{
	vllm_cast(instance);
	return oai_parse_error(&vllm_answers, http_status, body, len, out);
}

/* After the first token only a terminator or an error changes what the
 * host does. */
static bool
vllm_sniff_sse(void *instance, const char *data, size_t len)
{
	vllm_cast(instance);
	return oai_sniff_sse(data, len);
}

static int
vllm_parse_sse(void *instance, const char *data, size_t len, struct narwhal_sse_event *out)
{
	vllm_cast(instance);
	return oai_parse_sse(&vllm_answers, data, len, out);
}

static int
vllm_parse_sse_json(void *instance, const json_t *doc, const char *data, size_t len,
                     struct narwhal_sse_event *out)
{
	vllm_cast(instance);
	(void)data;
	(void)len;
	return oai_parse_sse_json(&vllm_answers, doc, out);
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
	oai_set_call(out, "GET", "/v1/models", NULL);
	return 0;
}

/* vLLM lists the served model first, with its max_model_len. */
static int
vllm_parse_models(void *instance, const json_t *response, struct narwhal_model_info *out)
{
	vllm_cast(instance);
	return oai_parse_models(response, out);
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
	oai_set_call(out, "GET", "/metrics", NULL);
	return 0;
}

/* GET /metrics (reference 5.1): running and waiting requests, KV-cache
 * usage under its new and its old name, and the process start time
 * (engine-metrics.c). */
static int
vllm_parse_metrics(void *instance, const char *body, size_t len,
                   struct narwhal_engine_metrics *out)
{
	static const struct engine_metric_names names = {
		.running = "vllm:num_requests_running",
		.waiting = "vllm:num_requests_waiting",
		.kv_usage = "vllm:kv_cache_usage_perc",
		.kv_usage_old = "vllm:gpu_cache_usage_perc",
	};

	vllm_cast(instance);
	return engine_metrics_read(body, len, &names, out);
}

static const char *const *
vllm_router_keys(void *instance)
{
	vllm_cast(instance);
	return router_keys;
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
	.parse_sse_json = vllm_parse_sse_json,
};

NARWHAL_DIALECT_PLUGIN("vllm", "2.1.0", &vllm_ops)
