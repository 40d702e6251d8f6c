/*
 * The "sglang" dialect: SGLang's OpenAI-compatible server with its PD
 * disaggregation (docs/dialects.md, "SGLang"; engine-wire-formats
 * sections 2 to 6).
 *
 * The handoff is concurrent. Narwhal places both engines first, then sends
 * one body to both at once: the client's request plus bootstrap_host and
 * bootstrap_port (where the prefill engine's bootstrap server listens) and
 * bootstrap_room, a 63-bit number that pairs the two legs on that server.
 * The decode engine's answer goes to the client; the prefill engine's is
 * only checked for its status. Roles are fixed when an engine starts
 * (--disaggregation-mode prefill or decode), so no engine changes role per
 * request; an engine started without that flag serves whole requests and
 * is never paired.
 *
 * The router owns the three bootstrap keys and disagg_prefill_dp_rank:
 * whatever a client put there is dropped from every engine call.
 *
 * Config (plugins.dialects.sglang), every key optional:
 *   bootstrap_port  the prefill engines' --disaggregation-bootstrap-port
 *                   (1 to 65535, default 8998)
 *   disaggregation  whether the engines run with --disaggregation-mode
 *                   (default true; false: aggregate engines)
 *   engines         engine ID to {bootstrap_port, bootstrap_host,
 *                   disaggregation}: one engine's own values
 * bootstrap_host defaults to the host of the engine's URL. The settings
 * are read in sglang-config.c.
 */
#include <narwhal/plugin-abi.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine-metrics.h"
#include "openai.h"
#include "sglang-config.h"

#define SGLANG_MAGIC 0x53474c47u /* "SGLG" */

/* Rooms are drawn from [0, 2^63). */
#define ROOM_MASK ((UINT64_C(1) << 63) - 1)

struct sglang_dialect {
	unsigned magic;
	struct sglang_config cfg;
	uint64_t room_key;
};

static struct sglang_dialect *
sglang_cast(void *instance)
{
	struct sglang_dialect *sd = instance;

	if (sd == NULL || sd->magic != SGLANG_MAGIC)
		abort(); /* the host passed something that is not ours */
	return sd;
}

/* ------------------------------------------------------------------------
 * Instances (their settings: sglang-config.c)
 * ------------------------------------------------------------------------ */

static void
sglang_free(struct sglang_dialect *sd)
{
	sglang_config_clear(&sd->cfg);
	sd->magic = 0;
	free(sd);
}

/* A bijection of [0, 2^63): xor-shifts and odd multipliers modulo 2^63
 * (each step can be undone), so distinct inputs give distinct rooms. */
static uint64_t
room_mix(uint64_t x)
{
	x &= ROOM_MASK;
	x ^= x >> 31;
	x = (x * UINT64_C(0x7fb5d329728ea185)) & ROOM_MASK;
	x ^= x >> 27;
	x = (x * UINT64_C(0x81dadef4bc2dd44d)) & ROOM_MASK;
	x ^= x >> 33;
	return x;
}

static int
sglang_create(const struct narwhal_host *host, const json_t *config, void **instance,
              char *err, size_t err_len)
{
	struct sglang_dialect *sd = calloc(1, sizeof *sd);

	if (sd == NULL) {
		snprintf(err, err_len, "out of memory");
		return -ENOMEM;
	}
	sd->magic = SGLANG_MAGIC;
	if (!sglang_config_read(&sd->cfg, host, config, err, err_len)) {
		sglang_free(sd);
		return -EINVAL;
	}
	/* The ABI has no random source; the host clock at start keys the
	 * rooms (docs/dialects.md), so a restarted router does not reuse the
	 * rooms of its last run on engines that still hold them. */
	sd->room_key = room_mix((uint64_t)host->now_ns(host->host_ctx) ^ UINT64_C(0x5347524f4f4d));
	*instance = sd;
	return 0;
}

static void
sglang_destroy(void *instance)
{
	sglang_free(sglang_cast(instance));
}

/* The settings the engines object gives this engine, or NULL. */
static const struct sglang_engine_settings *
settings_of(const struct sglang_dialect *sd, const struct narwhal_engine_ref *engine)
{
	for (size_t i = 0; i < sd->cfg.n_engines; i++) {
		if (engine->id != NULL && strcmp(sd->cfg.engines[i].id, engine->id) == 0)
			return &sd->cfg.engines[i];
	}
	return NULL;
}

static bool
disaggregated(const struct sglang_dialect *sd, const struct narwhal_engine_ref *engine)
{
	const struct sglang_engine_settings *es = settings_of(sd, engine);

	return es != NULL && es->disaggregate >= 0 ? es->disaggregate == 1 : sd->cfg.disaggregate;
}

static uint32_t
sglang_capabilities(void *instance, const struct narwhal_engine_ref *engine)
{
	struct sglang_dialect *sd = sglang_cast(instance);

	/* Roles are fixed at launch: no NARWHAL_DIALECT_PER_REQUEST_ROLES. */
	if (engine == NULL || !disaggregated(sd, engine))
		return 0;
	return NARWHAL_DIALECT_HANDOFF_CONCURRENT;
}

/* ------------------------------------------------------------------------
 * Requests
 * ------------------------------------------------------------------------ */

/* The bootstrap fields, and the hint that tells a decode engine which of
 * the prefill engine's data-parallel ranks holds the KV cache: a client's
 * value would steer the transfer. */
static const char *const router_keys[] = {
	"bootstrap_host", "bootstrap_port", "bootstrap_room", "disagg_prefill_dp_rank", NULL,
};

static bool
has_router_key(const json_t *client_body)
{
	for (size_t i = 0; router_keys[i] != NULL; i++) {
		if (json_object_get(client_body, router_keys[i]) != NULL)
			return true;
	}
	return false;
}

/* A copy of the client body without the router's keys; NULL when out of
 * memory. Shallow: only top-level keys are set, and the host serialises the
 * body and drops it. */
static json_t *
engine_body(const json_t *client_body)
{
	json_t *body = json_copy((json_t *)client_body);

	for (size_t i = 0; body != NULL && router_keys[i] != NULL; i++)
		json_object_del(body, router_keys[i]);
	return body;
}

/* The host part of an engine URL ("http://host:port", "https://[v6]:port"):
 * a pointer into url and its length, 0 when there is none. */
static size_t
url_host(const char *url, const char **host)
{
	const char *p = url != NULL ? strstr(url, "://") : NULL;
	const char *end;

	if (p == NULL)
		return 0;
	p += 3;
	if (*p == '[') {
		end = strchr(++p, ']');
		if (end == NULL)
			return 0;
	} else {
		end = p + strcspn(p, ":/");
	}
	*host = p;
	return (size_t)(end - p);
}

/* Add the bootstrap fields that pair the two legs on the prefill engine's
 * bootstrap server: its host and port, and the room of this attempt's
 * pair. -EINVAL when the prefill engine has no host, -ENOMEM. */
static int
add_bootstrap(const struct sglang_dialect *sd, const struct narwhal_dialect_target *target,
              json_t *body)
{
	const struct sglang_engine_settings *es = settings_of(sd, target->prefill);
	const char *host = es != NULL ? es->host : NULL;
	size_t host_len = host != NULL ? strlen(host) : url_host(target->prefill->url, &host);
	int port = es != NULL && es->port > 0 ? es->port : sd->cfg.port;
	/* The pair ID is unique per attempt of a pair and the same for both
	 * legs, so both get one room, and a retry gets a fresh one. */
	uint64_t room = room_mix(target->pair_id ^ sd->room_key);
	int rc = 0;

	if (host_len == 0)
		return -EINVAL;
	rc |= json_object_set_new(body, "bootstrap_host", json_stringn(host, host_len));
	rc |= json_object_set_new(body, "bootstrap_port", json_integer(port));
	rc |= json_object_set_new(body, "bootstrap_room", json_integer((json_int_t)room));
	return rc != 0 ? -ENOMEM : 0;
}

/* Whether a request asks for several sequences: a batch of prompts, or n
 * or best_of above 1. SGLang pairs those only with a list of rooms, one a
 * sequence, and a pair carries one. */
static bool
several_sequences(const json_t *client_body)
{
	const json_t *prompt = json_object_get(client_body, "prompt");
	const json_t *n = json_object_get(client_body, "n");
	const json_t *best_of = json_object_get(client_body, "best_of");

	return (json_is_array(prompt) && json_array_size(prompt) > 1 &&
	        !oai_is_token_ids(prompt)) ||
	       (json_is_integer(n) && json_integer_value(n) > 1) ||
	       (json_is_integer(best_of) && json_integer_value(best_of) > 1);
}

/* Both legs of a pair: the same body, each to its engine at the client's
 * route. The target must be a pair of PD engines with its ID, and the
 * engine called the one of the role the leg is for. */
static int
build_leg(void *instance, const struct narwhal_dialect_target *target,
          const struct narwhal_engine_ref *role_engine, struct narwhal_http_call *out)
{
	struct sglang_dialect *sd = sglang_cast(instance);
	const char *path;
	json_t *body;
	int rc;

	if (target == NULL || out == NULL || !json_is_object(target->client_body) ||
	    target->engine == NULL || target->prefill == NULL || target->decode == NULL ||
	    role_engine == NULL || target->engine->index != role_engine->index ||
	    target->pair_id == 0)
		return -EINVAL;
	path = oai_route_path(target->route);
	if (path == NULL)
		return -EINVAL;
	if (!disaggregated(sd, target->prefill) || !disaggregated(sd, target->decode) ||
	    several_sequences(target->client_body))
		return -ENOTSUP;
	body = engine_body(target->client_body);
	if (body == NULL)
		return -ENOMEM;
	rc = add_bootstrap(sd, target, body);
	if (rc != 0) {
		json_decref(body);
		return rc;
	}
	oai_set_call(out, "POST", path, body);
	return 0;
}

static int
sglang_build_prefill(void *instance, const struct narwhal_dialect_target *target,
                     struct narwhal_http_call *out)
{
	return build_leg(instance, target, target != NULL ? target->prefill : NULL, out);
}

/* A concurrent handoff has none to pass (handoff NULL, or a JSON null). */
static int
sglang_build_decode(void *instance, const struct narwhal_dialect_target *target,
                    const json_t *handoff, struct narwhal_http_call *out)
{
	if (handoff != NULL && !json_is_null(handoff)) {
		sglang_cast(instance);
		return -EINVAL;
	}
	return build_leg(instance, target, target != NULL ? target->decode : NULL, out);
}

/* The prefill answer carries nothing the decode leg needs: the KV cache
 * travels between the engines, paired by the room. */
static int
sglang_parse_prefill(void *instance, const json_t *response, json_t **handoff)
{
	sglang_cast(instance);
	if (response == NULL || handoff == NULL)
		return -EINVAL;
	*handoff = NULL;
	return 0;
}

/* An engine started without --disaggregation-mode takes the request as it
 * is; a PD engine cannot run a whole request (a prefill engine refuses it,
 * a decode engine would wait for a KV cache nobody sends). */
static int
sglang_build_aggregate(void *instance, const struct narwhal_dialect_target *target,
                       struct narwhal_http_call *out)
{
	struct sglang_dialect *sd = sglang_cast(instance);
	const char *path;

	if (target == NULL || out == NULL || !json_is_object(target->client_body) ||
	    target->engine == NULL)
		return -EINVAL;
	path = oai_route_path(target->route);
	if (path == NULL)
		return -EINVAL;
	if (disaggregated(sd, target->engine))
		return -ENOTSUP;
	/* The host refuses the router's keys from clients (router_keys);
	 * should one get here all the same, it is dropped. */
	if (has_router_key(target->client_body)) {
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

/*
 * POST /v1/tokenize (reference 3): one string prompt, with the client's
 * add_special_tokens (SGLang's default is true). A prompt of token IDs
 * needs no call (-EALREADY); a batch has no single count and SGLang has no
 * chat-messages form (-ENOTSUP: the host sizes by characters).
 */
static int
sglang_build_tokenize(void *instance, const struct narwhal_dialect_target *target,
                      struct narwhal_http_call *out)
{
	const json_t *prompt;
	json_t *body;
	int rc = 0;

	sglang_cast(instance);
	if (target == NULL || out == NULL || !json_is_object(target->client_body))
		return -EINVAL;
	if (target->route == NARWHAL_ROUTE_CHAT_COMPLETIONS) {
		if (!json_is_array(json_object_get(target->client_body, "messages")))
			return -EINVAL;
		return -ENOTSUP;
	}
	if (target->route != NARWHAL_ROUTE_COMPLETIONS)
		return -EINVAL;
	prompt = json_object_get(target->client_body, "prompt");
	/* A batch of one is one prompt. */
	if (json_is_array(prompt) && json_array_size(prompt) == 1 &&
	    json_is_string(json_array_get(prompt, 0)))
		prompt = json_array_get(prompt, 0);
	if (!json_is_string(prompt)) {
		if (prompt == NULL)
			return -EINVAL;
		return oai_is_token_ids(prompt) ? -EALREADY : -ENOTSUP;
	}
	body = json_object();
	if (body == NULL)
		return -ENOMEM;
	rc |= oai_copy_key(body, target->client_body, "model");
	rc |= json_object_set_new(body, "prompt", json_deep_copy(prompt));
	rc |= oai_copy_key(body, target->client_body, "add_special_tokens");
	if (json_object_get(body, "add_special_tokens") == NULL)
		rc |= json_object_set_new(body, "add_special_tokens", json_true());
	if (rc != 0) {
		json_decref(body);
		return -ENOMEM;
	}
	oai_set_call(out, "POST", "/v1/tokenize", body);
	return 0;
}

/* {"tokens": [...], "count": N, "max_model_len": M}; without a count (an
 * older server) the token list's length. A count that is not the list's
 * length, when both are there, is no answer to one prompt. */
static int
sglang_parse_tokenize(void *instance, const json_t *response, uint64_t *prompt_tokens)
{
	const json_t *tokens;
	int64_t count;

	sglang_cast(instance);
	if (response == NULL || prompt_tokens == NULL)
		return -EINVAL;
	tokens = json_object_get(response, "tokens");
	if (json_object_get(response, "count") != NULL) {
		count = oai_count(json_object_get(response, "count"));
		if (count < 0 || (tokens != NULL && (!json_is_array(tokens) ||
		                                     json_array_size(tokens) != (size_t)count)))
			return -EPROTO;
		*prompt_tokens = (uint64_t)count;
		return 0;
	}
	if (!json_is_array(tokens) ||
	    (json_array_size(tokens) > 0 && !oai_is_token_ids(tokens)))
		return -EPROTO;
	*prompt_tokens = json_array_size(tokens);
	return 0;
}

/* 200 when up; 503 while the server starts or shuts down (reference
 * 5.2). */
static int
sglang_build_health(void *instance, const struct narwhal_engine_ref *engine,
                    struct narwhal_http_call *out)
{
	(void)engine;
	sglang_cast(instance);
	if (out == NULL)
		return -EINVAL;
	oai_set_call(out, "GET", "/health", NULL);
	return 0;
}

static int
sglang_build_models(void *instance, const struct narwhal_engine_ref *engine,
                    struct narwhal_http_call *out)
{
	(void)engine;
	sglang_cast(instance);
	if (out == NULL)
		return -EINVAL;
	oai_set_call(out, "GET", "/v1/models", NULL);
	return 0;
}

/* The model card carries max_model_len, as vLLM's does. */
static int
sglang_parse_models(void *instance, const json_t *response, struct narwhal_model_info *out)
{
	sglang_cast(instance);
	return oai_parse_models(response, out);
}

/* ------------------------------------------------------------------------
 * Responses: errors, SSE, metrics
 * ------------------------------------------------------------------------ */

/* A decode engine that could not get the KV cache from its prefill engine:
 * the prefill engine's fault. SGLang aborts such a request with "Decode
 * transfer failed for request ...", its KVTransferError saying "Failed to
 * get kvcache from prefill instance"; the wording is not in the reference
 * (read from SGLang's scheduler and operators' logs), so only server
 * errors that say so count. The prefill side's "Prefill transfer failed
 * ... Decode instance could be dead" is the decode engine gone: no failed
 * handoff, a server error like any other. */
static bool
is_transfer_failure(const struct oai_error *ef)
{
	if (ef->message == NULL)
		return false;
	return oai_contains_ci(ef->message, "decode transfer failed") ||
	       oai_contains_ci(ef->message, "kvcache from prefill");
}

/* The flat {"object": "error", ...} of SGLang's answers and the nested
 * {"error": {...}} of its stream errors (reference 4.4); a request too long
 * for the context is a 400 that says "context length". */
static const struct oai_answers sglang_answers = {
	.flat_errors = true,
	.handoff = is_transfer_failure,
	.router_keys = router_keys,
};

static int
sglang_parse_error(void *instance, int32_t http_status, const char *body, size_t len,
                   struct narwhal_engine_error *out)
{
	sglang_cast(instance);
	return oai_parse_error(&sglang_answers, http_status, body, len, out);
}

static bool
sglang_sniff_sse(void *instance, const char *data, size_t len)
{
	sglang_cast(instance);
	return oai_sniff_sse(data, len);
}

static int
sglang_parse_sse(void *instance, const char *data, size_t len, struct narwhal_sse_event *out)
{
	sglang_cast(instance);
	return oai_parse_sse(&sglang_answers, data, len, out);
}

static int
sglang_parse_sse_json(void *instance, const json_t *doc, const char *data, size_t len,
                       struct narwhal_sse_event *out)
{
	sglang_cast(instance);
	(void)data;
	(void)len;
	return oai_parse_sse_json(&sglang_answers, doc, out);
}

static const char *const *
sglang_router_keys(void *instance)
{
	sglang_cast(instance);
	return router_keys;
}

/* GET /metrics, served with --enable-metrics. */
static int
sglang_build_metrics(void *instance, const struct narwhal_engine_ref *engine,
                     struct narwhal_http_call *out)
{
	(void)engine;
	sglang_cast(instance);
	if (out == NULL)
		return -EINVAL;
	oai_set_call(out, "GET", "/metrics", NULL);
	return 0;
}

/* Reference 5.2: running and queued requests, token usage (the KV pool's
 * fraction in use) and the process start time (engine-metrics.c). */
static int
sglang_parse_metrics(void *instance, const char *body, size_t len,
                     struct narwhal_engine_metrics *out)
{
	static const struct engine_metric_names names = {
		.running = "sglang:num_running_reqs",
		.waiting = "sglang:num_queue_reqs",
		.kv_usage = "sglang:token_usage",
	};

	sglang_cast(instance);
	return engine_metrics_read(body, len, &names, out);
}

static const struct narwhal_dialect_ops sglang_ops = {
	.struct_size = sizeof(struct narwhal_dialect_ops),
	.create = sglang_create,
	.destroy = sglang_destroy,
	.capabilities = sglang_capabilities,
	.build_tokenize = sglang_build_tokenize,
	.parse_tokenize = sglang_parse_tokenize,
	.build_prefill = sglang_build_prefill,
	.build_decode = sglang_build_decode,
	.parse_prefill = sglang_parse_prefill,
	.build_aggregate = sglang_build_aggregate,
	.build_health = sglang_build_health,
	.parse_sse = sglang_parse_sse,
	.sniff_sse = sglang_sniff_sse,
	.parse_error = sglang_parse_error,
	.build_models = sglang_build_models,
	.parse_models = sglang_parse_models,
	.router_keys = sglang_router_keys,
	.build_metrics = sglang_build_metrics,
	.parse_metrics = sglang_parse_metrics,
	.parse_sse_json = sglang_parse_sse_json,
};

NARWHAL_DIALECT_PLUGIN("sglang", "1.0.0", &sglang_ops)
