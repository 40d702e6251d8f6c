/*
 * NIXL-style KV handoff between simulated engines, in pull mode.
 *
 * Producer: a do_remote_decode request prefills, answers one token and the
 * newest kv_transfer_params object, and leaves its KV blocks held under a
 * lease. Consumer: a do_remote_prefill request carrying those params asks
 * the producer for the KV over HTTP (POST /sim/kv/pull on the producer's
 * own port, standing in for NIXL's side channel and RDMA read), waits the
 * model's transfer time for that many tokens, then decodes. The producer
 * frees the blocks when pulled or when the lease lapses. When the KV
 * cannot be had, --kv-load-failure-policy decides: fail or recompute.
 */
#include "build-config.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "sim/server.h"

#define PULL_CONNECT_TIMEOUT_MS 1000
#define PULL_TIMEOUT_MS 10000
#define PULL_MAX_ANSWER 4096

const char *
sim_kv_params_invalid(const json_t *params)
{
	const json_t *port = json_object_get(params, "remote_port");

	/* The five keys a vLLM decode engine insists on before transferring. */
	if (!json_is_array(json_object_get(params, "remote_block_ids")))
		return "remote_block_ids is missing or not a list";
	if (!json_is_string(json_object_get(params, "remote_engine_id")))
		return "remote_engine_id is missing or not a string";
	if (!json_is_string(json_object_get(params, "remote_request_id")))
		return "remote_request_id is missing or not a string";
	if (!json_is_string(json_object_get(params, "remote_host")) ||
	    *json_string_value(json_object_get(params, "remote_host")) == '\0')
		return "remote_host is missing or not a string";
	if (!json_is_integer(port) || json_integer_value(port) < 1 ||
	    json_integer_value(port) > 65535)
		return "remote_port is missing or not a port number";
	return NULL;
}

json_t *
sim_kv_params_out(struct sim_call *call)
{
	struct sim_node *node = call->node;
	const struct sim_model *model = &node->fleet->model;
	uint32_t block_tokens = model->block_tokens ? model->block_tokens : 16;
	uint32_t n_blocks = (call->prompt_tokens + block_tokens - 1) / block_tokens;
	uint64_t total = MAX(model->kv_capacity_tokens / block_tokens, 1);
	g_autofree char *internal = g_strdup_printf("%s-%" PRIu64, node->id, call->req.id);
	double expiry = sim_fleet_unix_s(node->fleet, node->step_end_v + sim_node_lease_s(node));
	json_t *ids = json_array();

	/* Block ids are for show (the producer keys the lease by request);
	 * hand out running numbers that wrap at the cache size. */
	for (uint32_t i = 0; i < n_blocks; i++)
		json_array_append_new(ids, json_integer((json_int_t)(node->next_block_id++ % total)));
	return json_pack("{s:b, s:b, s:[o], s:s, s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:f, s:s}",
	                 "do_remote_prefill", 1,
	                 "do_remote_decode", 0,
	                 "remote_block_ids", ids,
	                 "remote_engine_id", node->id,
	                 "remote_request_id", internal,
	                 "remote_host", node->fleet->opts->host,
	                 "remote_port", (json_int_t)node->port,
	                 "tp_size", 1,
	                 "dcp_size", 1,
	                 "pp_size", 1,
	                 "remote_num_tokens", (json_int_t)call->prompt_tokens,
	                 "remote_blocks_expiry_time", (double)(int64_t)(expiry * 1000) / 1000,
	                 "transfer_mode", "pull");
}

void
sim_kv_load_failed(struct sim_call *call, const char *why)
{
	struct sim_node *node = call->node;
	bool recompute = node->fleet->opts->kv_policy == SIM_KV_POLICY_RECOMPUTE;

	nw_log(NARWHAL_LOG_WARNING, "kv_load_failed", "engine", node->id,
	       "request_id", call->request_id, "reason", why,
	       "policy", recompute ? "recompute" : "fail", NULL);
	if (recompute) {
		/* Prefill locally, as an aggregate request. */
		sim_call_submit(call, SIM_AGGREGATE, 0);
		return;
	}
	g_autofree char *msg = g_strdup_printf("Failed to load the remote KV cache: %s "
	                                       "(kv_load_failure_policy=fail).", why);
	sim_call_fail(call, 500, NULL, msg);
}

static bool
on_pull_data(void *data, const char *bytes, size_t len)
{
	struct sim_call *call = data;

	if (call->pull_body->len + len <= PULL_MAX_ANSWER)
		g_string_append_len(call->pull_body, bytes, (gssize)len);
	return true;
}

static void
on_pull_done(void *data, const struct nw_upstream_result *res)
{
	struct sim_call *call = data;
	struct sim_node *node = call->node;
	json_t *doc = NULL;
	json_int_t tokens;
	double transfer_s;

	call->pull = NULL;
	if (res->code != NW_UPSTREAM_OK) {
		g_autofree char *why = g_strdup_printf("the producer did not answer (%s)", res->error);
		sim_kv_load_failed(call, why);
		return;
	}
	if (res->status != 200) {
		g_autofree char *why = g_strdup_printf(
			"the producer answered %ld (%s)", res->status,
			res->status == 410 ? "lease expired or already taken" : "unknown request");
		sim_kv_load_failed(call, why);
		return;
	}
	doc = json_loadb(call->pull_body->str, call->pull_body->len, 0, NULL);
	tokens = json_integer_value(json_object_get(doc, "tokens"));
	json_decref(doc);
	if (tokens < 1) {
		sim_kv_load_failed(call, "the producer's answer has no token count");
		return;
	}
	if ((uint64_t)tokens != call->prompt_tokens && nw_log_enabled(NARWHAL_LOG_WARNING)) {
		char pulled[24], prompt[24];

		g_snprintf(pulled, sizeof pulled, "%" JSON_INTEGER_FORMAT, tokens);
		g_snprintf(prompt, sizeof prompt, "%" PRIu32, call->prompt_tokens);
		nw_log(NARWHAL_LOG_WARNING, "kv_token_mismatch", "engine", node->id,
		       "request_id", call->request_id, "pulled", pulled, "prompt", prompt, NULL);
	}
	transfer_s = sim_model_kv_transfer_ms(&node->fleet->model, (uint64_t)tokens) / 1e3;
	sim_call_submit(call, SIM_REMOTE_DECODE, sim_fleet_now(node->fleet) + transfer_s);
}

static const struct nw_upstream_handlers pull_handlers = {
	.on_data = on_pull_data,
	.on_done = on_pull_done,
};

void
sim_kv_pull_start(struct sim_call *call)
{
	const json_t *kv = call->kv_in;
	const char *host = json_string_value(json_object_get(kv, "remote_host"));
	json_int_t port = json_integer_value(json_object_get(kv, "remote_port"));
	const char *scheme = call->node->fleet->opts->tls_cert_pem ? "https" : "http";
	g_autofree char *url = strchr(host, ':')
		? g_strdup_printf("%s://[%s]:%" JSON_INTEGER_FORMAT "/sim/kv/pull", scheme, host, port)
		: g_strdup_printf("%s://%s:%" JSON_INTEGER_FORMAT "/sim/kv/pull", scheme, host, port);
	json_t *body = json_pack("{s:O, s:O}", "remote_engine_id",
	                         json_object_get(kv, "remote_engine_id"), "remote_request_id",
	                         json_object_get(kv, "remote_request_id"));
	char *text = json_dumps(body, JSON_COMPACT);
	struct nw_upstream_request req = {
		.method = "POST",
		.url = url,
		.request_id = call->request_id,
		.body = text,
		.body_len = strlen(text),
		.connect_timeout_ms = PULL_CONNECT_TIMEOUT_MS,
		.timeout_ms = PULL_TIMEOUT_MS,
	};

	json_decref(body);
	if (call->pull_body == NULL)
		call->pull_body = g_string_new(NULL);
	call->pull = nw_upstream_start(call->node->fleet->pulls, &req, &pull_handlers, call);
	free(text);
	if (call->pull == NULL)
		sim_kv_load_failed(call, "cannot start the KV pull");
}

static enum MHD_Result
pull_error(struct MHD_Connection *conn, unsigned status, const char *message)
{
	return sim_respond_error(conn, SIM_DIALECT_VLLM, status, NULL, message, NULL);
}

enum MHD_Result
sim_kv_route_pull(struct sim_node *node, struct MHD_Connection *conn, const char *body,
                  size_t len)
{
	json_t *doc = json_loadb(body, len, 0, NULL);
	const char *engine = json_string_value(json_object_get(doc, "remote_engine_id"));
	const char *internal = json_string_value(json_object_get(doc, "remote_request_id"));
	size_t prefix = strlen(node->id);
	char *end = NULL;
	uint64_t id;
	uint32_t tokens = 0;
	enum MHD_Result ret;

	if (engine == NULL || internal == NULL) {
		json_decref(doc);
		return pull_error(conn, 400, "Give remote_engine_id and remote_request_id.");
	}
	if (strcmp(engine, node->id) != 0 || strncmp(internal, node->id, prefix) != 0 ||
	    internal[prefix] != '-' || internal[prefix + 1] < '0' || internal[prefix + 1] > '9') {
		json_decref(doc);
		return pull_error(conn, 404, "No such engine or request here.");
	}
	id = g_ascii_strtoull(internal + prefix + 1, &end, 10);
	if (end == NULL || *end != '\0' || id == 0 || id >= node->next_request_id) {
		json_decref(doc);
		return pull_error(conn, 404, "No such request on this engine.");
	}
	json_decref(doc);
	/* A lease that lapsed since the last timer tick must not be served. */
	sim_engine_lease_expire(node->engine, sim_fleet_now(node->fleet));
	if (!sim_engine_lease_take(node->engine, id, &tokens))
		return pull_error(conn, 410, "The KV lease expired or was already taken.");
	node->kv_pulls_served++;
	sim_node_kick(node); /* freed blocks may let waiting requests in */
	{
		json_t *answer = json_pack("{s:I}", "tokens", (json_int_t)tokens);

		ret = sim_respond_json(conn, 200, answer);
		json_decref(answer);
	}
	return ret;
}
