/*
 * The routes of an engine besides generation, in its dialect: tokenize,
 * detokenize, models, health, metrics and the dialect's extras, and the
 * answers for unknown routes and methods (docs/simulator.md, "Dialects").
 */
#include "build-config.h"

#include <inttypes.h>
#include <string.h>

#include "sim/metrics.h"
#include "sim/server.h"

#define VLLM (1u << SIM_DIALECT_VLLM)
#define SGLANG (1u << SIM_DIALECT_SGLANG)
#define LLAMACPP (1u << SIM_DIALECT_LLAMACPP)

struct route_def {
	const char *path;
	enum sim_route route;
	bool post;            /* POST with a body; otherwise GET or HEAD */
	unsigned dialects;    /* the dialects that serve it */
};

/* Wire formats 3, 5 and 7 for each dialect's paths. */
static const struct route_def routes[] = {
	{ "/v1/completions", R_COMPLETIONS, true, VLLM | SGLANG | LLAMACPP },
	{ "/v1/chat/completions", R_CHAT, true, VLLM | SGLANG | LLAMACPP },
	{ "/tokenize", R_TOKENIZE, true, VLLM | SGLANG | LLAMACPP },
	{ "/v1/tokenize", R_TOKENIZE, true, SGLANG },
	{ "/detokenize", R_DETOKENIZE, true, VLLM | SGLANG | LLAMACPP },
	{ "/v1/detokenize", R_DETOKENIZE, true, SGLANG },
	{ "/v1/models", R_MODELS, false, VLLM | SGLANG | LLAMACPP },
	{ "/models", R_MODELS, false, LLAMACPP },
	{ "/health", R_HEALTH, false, VLLM | SGLANG | LLAMACPP },
	{ "/health_generate", R_HEALTH, false, SGLANG },
	{ "/v1/health", R_HEALTH, false, LLAMACPP },
	{ "/version", R_VERSION, false, VLLM },
	{ "/get_model_info", R_MODEL_INFO, false, SGLANG },
	{ "/props", R_PROPS, false, LLAMACPP },
	{ "/metrics", R_METRICS, false, VLLM | SGLANG | LLAMACPP },
	{ "/sim/kv/pull", R_KV_PULL, true, VLLM },
};

/* SGLang's and llama.cpp's tokenize forms (dialect.c). */
static enum MHD_Result
tokenize_other(struct sim_call *call, json_t *doc)
{
	struct sim_dialect_fail df = { 0 };
	json_t *answer = call->node->dialect == SIM_DIALECT_SGLANG
		? sim_sglang_tokenize(doc, call->node->fleet->model.max_model_len, &df)
		: sim_llamacpp_tokenize(doc, &df);
	enum MHD_Result ret;

	json_decref(doc);
	if (answer == NULL) {
		struct sim_fail f = { .status = df.status, .message = df.message };

		return sim_respond_fail(call, &f);
	}
	ret = sim_respond_json(call->conn, 200, answer);
	json_decref(answer);
	return ret;
}

enum MHD_Result
sim_route_tokenize(struct sim_call *call)
{
	struct sim_fail f = { 0 };
	json_t *doc = sim_parse_body(call, &f);
	GArray *ids;
	GString *out;
	uint64_t seed;
	uint32_t count = 0;
	bool chat;

	if (doc == NULL)
		return sim_respond_fail(call, &f);
	if (call->node->dialect != SIM_DIALECT_VLLM)
		return tokenize_other(call, doc);
	chat = json_object_get(doc, "messages") != NULL;
	ids = g_array_new(FALSE, FALSE, sizeof(guint32));
	if (!sim_check_model(call->node, doc, &f) ||
	    !sim_parse_prompt(doc, chat, ids, &count, &seed, NULL, &f)) {
		g_array_free(ids, TRUE);
		json_decref(doc);
		return sim_respond_fail(call, &f);
	}
	json_decref(doc);
	out = g_string_sized_new(64 + ids->len * 7);
	g_string_append_printf(out, "{\"count\":%" PRIu32 ",\"max_model_len\":%" PRIu32
	                       ",\"tokens\":[", count, call->node->fleet->model.max_model_len);
	for (guint i = 0; i < ids->len; i++)
		g_string_append_printf(out, i ? ",%u" : "%u", g_array_index(ids, guint32, i));
	g_string_append(out, "],\"token_strs\":null}");
	g_array_free(ids, TRUE);
	count = (uint32_t)out->len;
	return sim_respond_text(call->conn, 200, "application/json", g_string_free(out, FALSE),
	                        count, NULL);
}

/* The model card of SGLang (max_model_len) or llama.cpp (meta). */
static json_t *
model_card_other(const struct sim_node *node, json_int_t created)
{
	const struct sim_fleet *fleet = node->fleet;
	json_int_t len = (json_int_t)fleet->model.max_model_len;

	if (node->dialect == SIM_DIALECT_SGLANG)
		return json_pack("{s:s, s:s, s:I, s:s, s:s, s:I}", "id", fleet->model_name,
		                 "object", "model", "created", created, "owned_by", "sglang",
		                 "root", fleet->model.name, "max_model_len", len);
	return json_pack("{s:s, s:s, s:I, s:s, s:{s:I, s:i}}", "id", fleet->model_name,
	                 "object", "model", "created", created, "owned_by", "llamacpp",
	                 "meta", "n_ctx_train", len, "n_vocab", 50000);
}

static enum MHD_Result
route_models(struct sim_node *node, struct MHD_Connection *conn)
{
	const struct sim_fleet *fleet = node->fleet;
	json_int_t created = (json_int_t)(fleet->start_unix_us / G_USEC_PER_SEC);
	g_autofree char *perm = g_strdup_printf("modelperm-%s", node->id);
	json_t *doc;

	if (node->dialect != SIM_DIALECT_VLLM) {
		enum MHD_Result ret;

		doc = json_pack("{s:s, s:[o]}", "object", "list", "data",
		                model_card_other(node, created));
		ret = sim_respond_json(conn, 200, doc);
		json_decref(doc);
		return ret;
	}
	doc = json_pack(
		"{s:s, s:[{s:s, s:s, s:I, s:s, s:s, s:n, s:i, s:[{s:s, s:s, s:I, s:b, s:b, s:b, "
		"s:b, s:b, s:b, s:s, s:n, s:b}]}]}",
		"object", "list", "data",
		"id", fleet->model_name, "object", "model", "created", created, "owned_by", "vllm",
		"root", fleet->model.name, "parent", "max_model_len",
		(json_int_t)fleet->model.max_model_len, "permission",
		"id", perm, "object", "model_permission", "created", created,
		"allow_create_engine", 0, "allow_sampling", 1, "allow_logprobs", 1,
		"allow_search_indices", 0, "allow_view", 1, "allow_fine_tuning", 0,
		"organization", "*", "group", "is_blocking", 0);
	enum MHD_Result ret = sim_respond_json(conn, 200, doc);

	json_decref(doc);
	return ret;
}

static enum MHD_Result
route_metrics(struct sim_node *node, struct MHD_Connection *conn)
{
	struct sim_engine_stats st;
	GString *out = g_string_sized_new(8192);
	size_t len;

	sim_engine_stats(node->engine, &st);
	sim_metrics_render(node->metrics, &st, node->dialect, node->fleet->model_name,
	                   node->index_label, sim_fleet_now(node->fleet), out);
	sim_metrics_render_process((double)node->fleet->process_start_unix_us / 1e6, out);
	len = out->len;
	return sim_respond_text(conn, 200, "text/plain; version=0.0.4; charset=utf-8",
	                        g_string_free(out, FALSE), len, NULL);
}

/* llama.cpp's /props (its context size and slots) and SGLang's
 * /get_model_info. */
static enum MHD_Result
route_info(struct sim_node *node, struct MHD_Connection *conn, int route)
{
	const struct sim_fleet *fleet = node->fleet;
	json_t *doc = route == R_PROPS
		? json_pack("{s:{s:I}, s:I, s:s, s:b}", "default_generation_settings", "n_ctx",
		            (json_int_t)fleet->model.max_model_len, "total_slots",
		            (json_int_t)fleet->model.max_num_seqs, "model_path", fleet->model.name,
		            "is_sleeping", 0)
		: json_pack("{s:s, s:s, s:b}", "model_path", fleet->model.name, "tokenizer_path",
		            fleet->model.name, "is_generation", 1);
	enum MHD_Result ret = sim_respond_json(conn, 200, doc);

	json_decref(doc);
	return ret;
}

enum MHD_Result
sim_route_get(struct sim_node *node, struct MHD_Connection *conn, int route)
{
	switch (route) {
	case R_HEALTH: {
		bool down = sim_faults_health_down(&node->faults, sim_fleet_now(node->fleet));

		/* llama.cpp answers JSON (wire formats 5.3), its 503 as while it
		 * loads the model. */
		if (node->dialect == SIM_DIALECT_LLAMACPP && down)
			return sim_respond_error(conn, node->dialect, 503, NULL, "Loading model", NULL);
		if (node->dialect == SIM_DIALECT_LLAMACPP)
			return sim_respond_text(conn, 200, "application/json",
			                        g_strdup("{\"status\":\"ok\"}"), 15, NULL);
		/* vLLM and SGLang: an empty body either way; 503 when down. */
		return sim_respond_text(conn, down ? 503 : 200, NULL, g_strdup(""), 0, NULL);
	}
	case R_PROPS:
	case R_MODEL_INFO:
		return route_info(node, conn, route);
	case R_MODELS:
		return route_models(node, conn);
	case R_VERSION: {
		json_t *doc = json_pack("{s:s}", "version", PACKAGE_VERSION);
		enum MHD_Result ret = sim_respond_json(conn, 200, doc);

		json_decref(doc);
		return ret;
	}
	case R_METRICS:
		return route_metrics(node, conn);
	default:
		return MHD_NO;
	}
}

/* 404 and 405 carry the dialect's error object; vLLM and SGLang (both
 * FastAPI servers) add FastAPI's "detail", which is what they say for an
 * unknown route; llama.cpp says "File Not Found" (wire formats 4.4). */
enum MHD_Result
sim_respond_no_route(struct MHD_Connection *conn, sim_dialect d, unsigned status,
                     const char *detail, const char *message, const char *allow)
{
	bool llamacpp = d == SIM_DIALECT_LLAMACPP;
	g_autofree char *err = sim_error_text(d, status, NULL,
	                                      llamacpp && status == 404 ? "File Not Found" : message);
	char *text = llamacpp ? g_strdup(err)
	                      : g_strdup_printf("%.*s,\"detail\":\"%s\"}", (int)strlen(err) - 1,
	                                        err, detail);
	struct MHD_Response *resp;
	enum MHD_Result ret;

	resp = MHD_create_response_from_buffer_with_free_callback(strlen(text), text, g_free);
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
	if (allow != NULL)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
	ret = MHD_queue_response(conn, status, resp);
	MHD_destroy_response(resp);
	return ret;
}

/* The route of a request; *not_allowed names the allowed methods when the
 * path exists but the method does not fit. */
int
sim_route_of(sim_dialect d, const char *url, const char *method, const char **not_allowed)
{
	bool get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;

	*not_allowed = NULL;
	for (size_t i = 0; i < G_N_ELEMENTS(routes); i++) {
		if (!(routes[i].dialects & (1u << d)) || strcmp(url, routes[i].path) != 0)
			continue;
		if (routes[i].post ? strcmp(method, "POST") != 0 : !get)
			*not_allowed = routes[i].post ? "POST" : "GET, HEAD";
		return routes[i].route;
	}
	return R_NONE;
}

