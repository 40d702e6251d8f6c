/*
 * The "vllm" dialect in isolation: the built .so, loaded by the real loader,
 * driven against the mock host. Every engine call is checked as exact JSON;
 * the responses, SSE payloads and error bodies are the shapes the
 * engine-wire-formats reference records for vLLM (sections 1.2, 3, 4, 5.1).
 * Paths name the spec section ("spec-4.2") or the reference section
 * ("ref-1.2") a test holds the plugin to.
 */
#include "build-config.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "plugins/harness.h"

/* ------------------------------------------------------------- helpers --- */

static struct nw_harness *
vllm_with(const char *config_json)
{
	struct nw_harness *h = nw_harness_new(NARWHAL_KIND_DIALECT, "vllm");
	g_autoptr(GError) error = NULL;

	if (h == NULL)
		return NULL;
	g_assert_true(nw_harness_create(h, config_json, &error));
	g_assert_no_error(error);
	return h;
}

/* The engine every test builds for. */
static const struct narwhal_engine_ref test_engine = {
	.struct_size = sizeof test_engine, .index = 0, .id = "e0", .url = "http://127.0.0.1:1",
};

/* A target for the test engine: the route and the client body. */
#define TGT(route_, body_)                                                          \
	(&(struct narwhal_dialect_target){ .struct_size = sizeof(struct narwhal_dialect_target), \
	                                   .request = 1, .request_id = "t", .route = (route_), \
	                                   .client_body = (body_), .engine = &test_engine })

/* A call poisoned so that a field the plugin forgets shows up. */
static struct narwhal_http_call
poisoned_call(void)
{
	struct narwhal_http_call call = {
		.struct_size = sizeof call,
		.flags = 0x80000000u,
		.method = "POISON",
		.path = "/poison",
		.body = NULL,
	};
	return call;
}

typedef enum leg { LEG_TOKENIZE, LEG_PREFILL, LEG_DECODE, LEG_AGGREGATE } leg;

/* Build one leg from client JSON text (and handoff JSON text for decode;
 * NULL: no handoff). Returns the plugin's code; on 0 the call is checked
 * for method and path, the body is stored in *body (caller frees), and the
 * client body is checked to be untouched. */
static int
build(struct nw_harness *h, leg which, narwhal_route route, const char *client_text,
      const char *handoff_text, json_t **body)
{
	json_t *client = nw_harness_json(client_text);
	json_t *pristine = json_deep_copy(client);
	json_t *handoff = handoff_text ? nw_harness_json(handoff_text) : NULL;
	struct narwhal_http_call call = poisoned_call();
	int rc = -9999;

	switch (which) {
	case LEG_TOKENIZE:
		rc = nw_harness_dialect(h)->build_tokenize(nw_harness_ctx(h), TGT(route, client), &call);
		break;
	case LEG_PREFILL:
		rc = nw_harness_dialect(h)->build_prefill(nw_harness_ctx(h), TGT(route, client), &call);
		break;
	case LEG_DECODE:
		rc = nw_harness_dialect(h)->build_decode(nw_harness_ctx(h), TGT(route, client), handoff, &call);
		break;
	case LEG_AGGREGATE:
		rc = nw_harness_dialect(h)->build_aggregate(nw_harness_ctx(h), TGT(route, client), &call);
		break;
	}
	/* The client body is borrowed: never changed. */
	g_assert_true(json_equal(client, pristine));
	json_decref(client);
	json_decref(pristine);
	json_decref(handoff);
	*body = NULL;
	if (rc != 0)
		return rc;
	g_assert_cmpuint(call.struct_size, ==, sizeof call);
	g_assert_cmpstr(call.method, ==, "POST");
	if (which == LEG_TOKENIZE)
		g_assert_cmpstr(call.path, ==, "/tokenize");
	else if (route == NARWHAL_ROUTE_COMPLETIONS)
		g_assert_cmpstr(call.path, ==, "/v1/completions");
	else
		g_assert_cmpstr(call.path, ==, "/v1/chat/completions");
	/* A body the dialect sends unchanged is the client's: a copy stands
	 * for it here. */
	if (call.flags & NARWHAL_CALL_CLIENT_BODY) {
		g_assert_cmpuint(call.flags, ==, NARWHAL_CALL_CLIENT_BODY);
		g_assert_null(call.body);
		*body = nw_harness_json(client_text);
		return 0;
	}
	g_assert_cmpuint(call.flags, ==, 0);
	g_assert_nonnull(call.body);
	*body = call.body;
	return 0;
}

/* Build, expect success and exactly this body. */
static void
expect_body(struct nw_harness *h, leg which, narwhal_route route, const char *client_text,
            const char *handoff_text, const char *expected_text)
{
	json_t *body = NULL;

	g_assert_cmpint(build(h, which, route, client_text, handoff_text, &body), ==, 0);
	nw_harness_assert_json(body, expected_text);
	json_decref(body);
}

static void
expect_build_error(struct nw_harness *h, leg which, narwhal_route route,
                   const char *client_text, const char *handoff_text, int expected)
{
	json_t *body = NULL;

	g_assert_cmpint(build(h, which, route, client_text, handoff_text, &body), ==, expected);
	g_assert_null(body);
}

#define C NARWHAL_ROUTE_COMPLETIONS
#define CHAT NARWHAL_ROUTE_CHAT_COMPLETIONS

/* What the prefill side is told, as vLLM's reference proxy sends it. */
#define PREFILL_KV                                                                  \
	"\"kv_transfer_params\": {\"do_remote_decode\": true, \"do_remote_prefill\": false," \
	" \"remote_engine_id\": null, \"remote_block_ids\": null, \"remote_host\": null,"   \
	" \"remote_port\": null}"

/* The newest handoff shape: list-of-lists block IDs and every new field. */
#define HANDOFF_NEW                                                                 \
	"{\"do_remote_prefill\": true, \"do_remote_decode\": false,"                   \
	" \"remote_block_ids\": [[12, 13, 14], [40, 41]],"                              \
	" \"remote_engine_id\": \"p-engine-7\", \"remote_request_id\": \"cmpl-r1-0-ab12\"," \
	" \"remote_host\": \"10.0.0.7\", \"remote_port\": 5600,"                       \
	" \"tp_size\": 1, \"dcp_size\": 1, \"pp_size\": 1,"                             \
	" \"remote_num_tokens\": 1234, \"remote_blocks_expiry_time\": null,"            \
	" \"transfer_mode\": \"pull\","                                                 \
	" \"future\": {\"nested\": [1, {\"deep\": [\"x\", null, 2.5]}], \"flag\": true}}"

/* An older handoff: flat block IDs, none of the new fields. */
#define HANDOFF_OLD                                                                 \
	"{\"do_remote_prefill\": true, \"do_remote_decode\": false,"                   \
	" \"remote_block_ids\": [1, 2, 3], \"remote_engine_id\": \"p0\","               \
	" \"remote_host\": \"localhost\", \"remote_port\": 5601, \"tp_size\": 2}"

/* A client's attempt to steer the transfer, which must never get through. */
#define CLIENT_KV                                                                   \
	"\"kv_transfer_params\": {\"do_remote_prefill\": true,"                        \
	" \"remote_host\": \"evil.example\", \"remote_port\": 1}"

/* ---------------------------------------------------- descriptor, config --- */

static void
test_descriptor(void)
{
	struct nw_harness *h = vllm_with(NULL);

	if (h == NULL)
		return;
	g_assert_cmpstr(h->plugin->desc->name, ==, "vllm");
	g_assert_cmpuint(h->plugin->desc->abi_major, ==, NARWHAL_ABI_MAJOR);
	g_assert_cmpuint(h->plugin->desc->abi_minor, ==, NARWHAL_ABI_MINOR);
	/* Every slot, the optional tokenise pair included. */
	g_assert_nonnull(nw_harness_dialect(h)->build_tokenize);
	g_assert_nonnull(nw_harness_dialect(h)->parse_tokenize);
	g_assert_nonnull(nw_harness_dialect(h)->build_prefill);
	g_assert_nonnull(nw_harness_dialect(h)->build_decode);
	g_assert_nonnull(nw_harness_dialect(h)->build_aggregate);
	g_assert_nonnull(nw_harness_dialect(h)->build_health);
	g_assert_nonnull(nw_harness_dialect(h)->parse_prefill);
	g_assert_nonnull(nw_harness_dialect(h)->parse_sse);
	g_assert_nonnull(nw_harness_dialect(h)->parse_sse_json);
	g_assert_nonnull(nw_harness_dialect(h)->sniff_sse);
	g_assert_nonnull(nw_harness_dialect(h)->parse_error);
	g_assert_nonnull(nw_harness_dialect(h)->build_models);
	g_assert_nonnull(nw_harness_dialect(h)->parse_models);
	g_assert_nonnull(nw_harness_dialect(h)->router_keys);
	g_assert_nonnull(nw_harness_dialect(h)->build_metrics);
	g_assert_nonnull(nw_harness_dialect(h)->parse_metrics);
	nw_harness_free(h);
}

/* Reference 1.4: NixlConnector ignores kv_role, so roles are per request. */
static void
test_capabilities(void)
{
	struct nw_harness *h = vllm_with("{}");

	if (h == NULL)
		return;
	g_assert_cmpuint(nw_harness_dialect(h)->capabilities(nw_harness_ctx(h), &test_engine), ==,
	                 NARWHAL_DIALECT_HANDOFF_SEQUENTIAL | NARWHAL_DIALECT_PER_REQUEST_ROLES);
	nw_harness_free(h);
}

static void
test_empty_configs(void)
{
	const char *configs[] = { NULL, "null", "{}" };

	for (guint i = 0; i < G_N_ELEMENTS(configs); i++) {
		struct nw_harness *h = vllm_with(configs[i]);

		if (h == NULL)
			return;
		g_assert_cmpuint(narwhal_mock_host_n_logs(h->host), ==, 0);
		nw_harness_free(h);
	}
}

static void
expect_config_error(const char *config_json, const char *reason)
{
	nw_harness_expect_config_error(NARWHAL_KIND_DIALECT, "vllm", config_json, reason);
}

static void
test_config_errors(void)
{
	/* RULES: "json.path: problem: what is valid", on one line. */
	expect_config_error("{\"timeout\": 1}",
	                    "timeout: unknown key: the vllm dialect takes no options");
	expect_config_error("{\"a\": null}", "a: unknown key");
	expect_config_error("{\"a\\tb\": 1}", "a\\u0009b: unknown key");
	expect_config_error("[]", "config must be an empty object");
	expect_config_error("\"vllm\"", "config must be an empty object");
}

/* ------------------------------------------------------------ tokenise --- */

/* Reference 3: POST /tokenize, completion form. */
static void
test_tokenize_completions(void)
{
	struct nw_harness *h = vllm_with(NULL);

	if (h == NULL)
		return;
	expect_body(h, LEG_TOKENIZE, C,
	            "{\"model\": \"m\", \"prompt\": \"Hello there\", \"max_tokens\": 8,"
	            " \"stream\": true, " CLIENT_KV "}",
	            NULL,
	            "{\"model\": \"m\", \"prompt\": \"Hello there\", \"add_special_tokens\": true}");
	/* The client's add_special_tokens is what the engine will use. */
	expect_body(h, LEG_TOKENIZE, C,
	            "{\"model\": \"m\", \"prompt\": \"x\", \"add_special_tokens\": false}", NULL,
	            "{\"model\": \"m\", \"prompt\": \"x\", \"add_special_tokens\": false}");
	/* A batch of one is one prompt; an empty prompt is still a prompt. */
	expect_body(h, LEG_TOKENIZE, C, "{\"model\": \"m\", \"prompt\": [\"only\"]}", NULL,
	            "{\"model\": \"m\", \"prompt\": \"only\", \"add_special_tokens\": true}");
	expect_body(h, LEG_TOKENIZE, C, "{\"model\": \"m\", \"prompt\": \"\"}", NULL,
	            "{\"model\": \"m\", \"prompt\": \"\", \"add_special_tokens\": true}");
	/* model is optional to /tokenize. */
	expect_body(h, LEG_TOKENIZE, C, "{\"prompt\": \"x\"}", NULL,
	            "{\"prompt\": \"x\", \"add_special_tokens\": true}");
	nw_harness_free(h);
}

/* Prompts the host must size without a tokenise call. */
static void
test_tokenize_not_needed(void)
{
	struct nw_harness *h = vllm_with(NULL);

	if (h == NULL)
		return;
	/* Token IDs: the count is the list's length. */
	expect_build_error(h, LEG_TOKENIZE, C, "{\"model\": \"m\", \"prompt\": [1, 2, 3]}", NULL,
	                   -EALREADY);
	/* A batch has no single count. */
	expect_build_error(h, LEG_TOKENIZE, C, "{\"model\": \"m\", \"prompt\": [\"a\", \"b\"]}",
	                   NULL, -ENOTSUP);
	expect_build_error(h, LEG_TOKENIZE, C, "{\"model\": \"m\", \"prompt\": [[1, 2], [3]]}",
	                   NULL, -ENOTSUP);
	expect_build_error(h, LEG_TOKENIZE, C, "{\"model\": \"m\", \"prompt\": []}", NULL,
	                   -ENOTSUP);
	/* No prompt at all is not a completion request. */
	expect_build_error(h, LEG_TOKENIZE, C, "{\"model\": \"m\"}", NULL, -EINVAL);
	expect_build_error(h, LEG_TOKENIZE, CHAT, "{\"model\": \"m\"}", NULL, -EINVAL);
	expect_build_error(h, LEG_TOKENIZE, CHAT, "{\"model\": \"m\", \"messages\": \"hi\"}",
	                   NULL, -EINVAL);
	nw_harness_free(h);
}

/* Reference 3: chat form, with what changes the rendered prompt. */
static void
test_tokenize_chat(void)
{
	struct nw_harness *h = vllm_with(NULL);

	if (h == NULL)
		return;
	expect_body(h, LEG_TOKENIZE, CHAT,
	            "{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}],"
	            " \"max_completion_tokens\": 9, \"stream\": true, " CLIENT_KV "}",
	            NULL,
	            "{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}],"
	            " \"add_generation_prompt\": true}");
	expect_body(h, LEG_TOKENIZE, CHAT,
	            "{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}],"
	            " \"chat_template\": \"{{ messages }}\","
	            " \"chat_template_kwargs\": {\"enable_thinking\": false},"
	            " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}],"
	            " \"temperature\": 0.5}",
	            NULL,
	            "{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}],"
	            " \"chat_template\": \"{{ messages }}\","
	            " \"chat_template_kwargs\": {\"enable_thinking\": false},"
	            " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}],"
	            " \"add_generation_prompt\": true}");
	/* Continuing the last message: the client's own flags, as the engine
	 * will render it (both generation flags true is a 400 in vLLM). */
	expect_body(h, LEG_TOKENIZE, CHAT,
	            "{\"model\": \"m\", \"messages\": [], \"add_generation_prompt\": false,"
	            " \"continue_final_message\": true, \"add_special_tokens\": true,"
	            " \"tools\": null}",
	            NULL,
	            "{\"model\": \"m\", \"messages\": [], \"add_generation_prompt\": false,"
	            " \"continue_final_message\": true, \"add_special_tokens\": true}");
	nw_harness_free(h);
}

static void
expect_count(struct nw_harness *h, const char *response_text, int expected_rc,
             uint64_t expected)
{
	json_t *response = nw_harness_json(response_text);
	uint64_t n = 987654321;

	g_assert_cmpint(nw_harness_dialect(h)->parse_tokenize(nw_harness_ctx(h), response, &n), ==, expected_rc);
	g_assert_cmpuint(n, ==, expected_rc == 0 ? expected : 987654321);
	json_decref(response);
}

static void
test_parse_tokenize(void)
{
	struct nw_harness *h = vllm_with(NULL);

	if (h == NULL)
		return;
	expect_count(h, "{\"count\": 7, \"max_model_len\": 32768, \"tokens\": [1, 2, 3, 4, 5, 6, 7],"
	             " \"token_strs\": null}", 0, 7);
	expect_count(h, "{\"count\": 0, \"tokens\": []}", 0, 0);
	expect_count(h, "{\"count\": 4000000000}", 0, 4000000000u);
	expect_count(h, "{\"count\": -1}", -EPROTO, 0);
	/* Beyond 2^53 no count is exact in the host's sums. */
	expect_count(h, "{\"count\": 9007199254740993}", -EPROTO, 0);
	expect_count(h, "{\"count\": 7.0}", -EPROTO, 0);
	expect_count(h, "{\"count\": \"7\"}", -EPROTO, 0);
	expect_count(h, "{\"count\": null}", -EPROTO, 0);
	expect_count(h, "{\"tokens\": [1, 2]}", -EPROTO, 0);
	expect_count(h, "[7]", -EPROTO, 0);
	expect_count(h, "7", -EPROTO, 0);
	nw_harness_free(h);
}

/* ------------------------------------------------------------- prefill --- */

/* Reference 1.2 step 1, completions: the client's body with the prefill
 * kv_transfer_params, no streaming, one token, and without what the
 * prefill side rejects or ignores. */
static void
test_prefill_completions(void)
{
	struct nw_harness *h = vllm_with(NULL);

	if (h == NULL)
		return;
	expect_body(h, LEG_PREFILL, C,
	            "{\"model\": \"m\", \"prompt\": \"Hello\", \"max_tokens\": 200,"
	            " \"stream\": true, \"stream_options\": {\"include_usage\": true},"
	            " \"min_tokens\": 10, \"temperature\": 0.7, \"n\": 1, \"echo\": false,"
	            " \"priority\": 3, " CLIENT_KV "}",
	            NULL,
	            "{\"model\": \"m\", \"prompt\": \"Hello\", \"max_tokens\": 1,"
	            " \"stream\": false, \"temperature\": 0.7, \"n\": 1, \"echo\": false,"
	            " \"priority\": 3, " PREFILL_KV "}");
	/* Non-streaming client without max_tokens: both are set anyway. */
	expect_body(h, LEG_PREFILL, C, "{\"model\": \"m\", \"prompt\": [1, 2, 3]}", NULL,
	            "{\"model\": \"m\", \"prompt\": [1, 2, 3], \"max_tokens\": 1,"
	            " \"stream\": false, " PREFILL_KV "}");
	nw_harness_free(h);
}

/* The prefill kv_transfer_params are one value the instance shares with
 * every prefill body (docs/plugins.md, "The host only serialises a call's
 * body"): each body holds its own reference, so bodies outlive each other
 * and the instance, and a body dropped does not change the next one. */
static void
test_prefill_params_shared(void)
{
	struct nw_harness *h = vllm_with(NULL);
	struct narwhal_http_call first = poisoned_call(), second = poisoned_call();
	json_t *client;

	if (h == NULL)
		return;
	client = nw_harness_json("{\"model\": \"m\", \"prompt\": \"x\"}");
	g_assert_cmpint(nw_harness_dialect(h)->build_prefill(nw_harness_ctx(h), TGT(C, client), &first), ==, 0);
	g_assert_cmpint(nw_harness_dialect(h)->build_prefill(nw_harness_ctx(h), TGT(C, client), &second), ==, 0);
	/* one value, held by the instance and by each body */
	g_assert_true(json_object_get(first.body, "kv_transfer_params") ==
	              json_object_get(second.body, "kv_transfer_params"));
	g_assert_cmpuint(json_object_get(first.body, "kv_transfer_params")->refcount, ==, 3);
	json_decref(first.body);
	nw_harness_free(h);
	json_decref(client);
	nw_harness_assert_json(second.body,
	            "{\"model\": \"m\", \"prompt\": \"x\", \"max_tokens\": 1, \"stream\": false, "
	            PREFILL_KV "}");
	json_decref(second.body);
}

/* Reference 1.2 step 1, chat: max_completion_tokens is capped too when the
 * client used it, and min_completion_tokens goes. */
static void
test_prefill_chat(void)
{
	struct nw_harness *h = vllm_with(NULL);

	if (h == NULL)
		return;
	expect_body(h, LEG_PREFILL, CHAT,
	            "{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}],"
	            " \"max_completion_tokens\": 300, \"min_completion_tokens\": 5,"
	            " \"min_tokens\": 5, \"stream\": true,"
	            " \"stream_options\": {\"include_usage\": true, \"continuous_usage_stats\": true},"
	            " \"chat_template_kwargs\": {\"enable_thinking\": true}}",
	            NULL,
	            "{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}],"
	            " \"max_completion_tokens\": 1, \"max_tokens\": 1, \"stream\": false,"
	            " \"chat_template_kwargs\": {\"enable_thinking\": true}, " PREFILL_KV "}");
	/* Only max_tokens given: max_completion_tokens is not invented. */
	expect_body(h, LEG_PREFILL, CHAT,
	            "{\"model\": \"m\", \"messages\": [], \"max_tokens\": 40, \"stream\": false}",
	            NULL,
	            "{\"model\": \"m\", \"messages\": [], \"max_tokens\": 1, \"stream\": false, "
	            PREFILL_KV "}");
	/* Both given, one of them null: both become 1. */
	expect_body(h, LEG_PREFILL, CHAT,
	            "{\"model\": \"m\", \"messages\": [], \"max_tokens\": null,"
	            " \"max_completion_tokens\": null}",
	            NULL,
	            "{\"model\": \"m\", \"messages\": [], \"max_tokens\": 1,"
	            " \"max_completion_tokens\": 1, \"stream\": false, " PREFILL_KV "}");
	nw_harness_free(h);
}

/* -------------------------------------------------------------- decode --- */

/* Reference 1.2 step 3: the client's original body (stream, max_tokens,
 * stream_options, min_tokens as sent) plus the handoff, unchanged, unknown
 * nested fields and list-of-lists block IDs included. */
static void
test_decode_verbatim_handoff(void)
{
	struct nw_harness *h = vllm_with(NULL);

	if (h == NULL)
		return;
	expect_body(h, LEG_DECODE, C,
	            "{\"model\": \"m\", \"prompt\": \"Hello\", \"max_tokens\": 200,"
	            " \"stream\": true, \"stream_options\": {\"include_usage\": true},"
	            " \"min_tokens\": 10, \"temperature\": 0.7}",
	            HANDOFF_NEW,
	            "{\"model\": \"m\", \"prompt\": \"Hello\", \"max_tokens\": 200,"
	            " \"stream\": true, \"stream_options\": {\"include_usage\": true},"
	            " \"min_tokens\": 10, \"temperature\": 0.7,"
	            " \"kv_transfer_params\": " HANDOFF_NEW "}");
	expect_body(h, LEG_DECODE, CHAT,
	            "{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}],"
	            " \"max_completion_tokens\": 300, \"min_completion_tokens\": 5,"
	            " \"stream\": false}",
	            HANDOFF_OLD,
	            "{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}],"
	            " \"max_completion_tokens\": 300, \"min_completion_tokens\": 5,"
	            " \"stream\": false, \"kv_transfer_params\": " HANDOFF_OLD "}");
	/* Push mode carries no block IDs; still passed as is. */
	expect_body(h, LEG_DECODE, C, "{\"model\": \"m\", \"prompt\": \"x\"}",
	            "{\"do_remote_prefill\": true, \"transfer_mode\": \"push\", \"tp_size\": 1}",
	            "{\"model\": \"m\", \"prompt\": \"x\", \"kv_transfer_params\":"
	            " {\"do_remote_prefill\": true, \"transfer_mode\": \"push\", \"tp_size\": 1}}");
	nw_harness_free(h);
}

/* The decode body owns its copy: the host may free or reuse the handoff. */
static void
test_decode_handoff_copied(void)
{
	struct nw_harness *h = vllm_with(NULL);
	struct narwhal_http_call call = poisoned_call();
	json_t *client, *handoff;

	if (h == NULL)
		return;
	client = nw_harness_json("{\"model\": \"m\", \"prompt\": \"x\", \"stream\": true}");
	handoff = nw_harness_json(HANDOFF_NEW);
	g_assert_cmpint(nw_harness_dialect(h)->build_decode(nw_harness_ctx(h), TGT(C, client), handoff, &call), ==, 0);
	json_array_clear(json_array_get(json_object_get(handoff, "remote_block_ids"), 0));
	json_decref(handoff);
	json_object_set_new(client, "stream", json_false());
	json_decref(client);
	nw_harness_assert_json(call.body,
	            "{\"model\": \"m\", \"prompt\": \"x\", \"stream\": true,"
	            " \"kv_transfer_params\": " HANDOFF_NEW "}");
	json_decref(call.body);
	nw_harness_free(h);
}

/* Reference 1.2: no handoff (the prefill returned none) sends the decode
 * engine the plain request, which it prefills locally. */
static void
test_decode_null_handoff(void)
{
	struct nw_harness *h = vllm_with(NULL);

	if (h == NULL)
		return;
	expect_body(h, LEG_DECODE, C,
	            "{\"model\": \"m\", \"prompt\": \"x\", \"stream\": true, \"min_tokens\": 2,"
	            " " CLIENT_KV "}",
	            NULL,
	            "{\"model\": \"m\", \"prompt\": \"x\", \"stream\": true, \"min_tokens\": 2}");
	/* A JSON null handoff means the same. */
	expect_body(h, LEG_DECODE, CHAT, "{\"model\": \"m\", \"messages\": []}", "null",
	            "{\"model\": \"m\", \"messages\": []}");
	/* Anything but an object or nothing is not a handoff. */
	expect_build_error(h, LEG_DECODE, C, "{\"model\": \"m\", \"prompt\": \"x\"}", "[1]",
	                   -EINVAL);
	expect_build_error(h, LEG_DECODE, C, "{\"model\": \"m\", \"prompt\": \"x\"}",
	                   "\"params\"", -EINVAL);
	nw_harness_free(h);
}

/* ----------------------------------------------------- aggregate, health --- */

/* vLLM takes the client's request as it is: the aggregate leg is the
 * client's body unchanged (NARWHAL_CALL_CLIENT_BODY), so the host sends the
 * client's bytes. A client kv_transfer_params should never get this far
 * (the host refuses it, since router_keys names it); if it does, the leg
 * is a copy without it (test_client_kv_params_stripped). */
static void
test_aggregate(void)
{
	struct nw_harness *h = vllm_with(NULL);
	json_t *client;
	struct narwhal_http_call call = poisoned_call();

	if (h == NULL)
		return;
	expect_body(h, LEG_AGGREGATE, C,
	            "{\"model\": \"m\", \"prompt\": \"x\", \"stream\": true,"
	            " \"stream_options\": {\"include_usage\": true}, \"min_tokens\": 3,"
	            " \"max_tokens\": 9}",
	            NULL,
	            "{\"model\": \"m\", \"prompt\": \"x\", \"stream\": true,"
	            " \"stream_options\": {\"include_usage\": true}, \"min_tokens\": 3,"
	            " \"max_tokens\": 9}");
	client = json_pack("{s:s, s:[]}", "model", "m", "messages");
	g_assert_cmpint(nw_harness_dialect(h)->build_aggregate(nw_harness_ctx(h), TGT(CHAT, client), &call), ==, 0);
	g_assert_cmpuint(call.flags, ==, NARWHAL_CALL_CLIENT_BODY);
	g_assert_null(call.body);
	g_assert_cmpstr(call.path, ==, "/v1/chat/completions");
	json_decref(client);
	nw_harness_free(h);
}

/* The handoff's key is the router's: named by router_keys. */
static void
test_router_keys(void)
{
	struct nw_harness *h = vllm_with(NULL);
	const char *const *keys;

	if (h == NULL)
		return;
	keys = nw_harness_dialect(h)->router_keys(nw_harness_ctx(h));
	g_assert_nonnull(keys);
	g_assert_cmpstr(keys[0], ==, "kv_transfer_params");
	g_assert_null(keys[1]);
	nw_harness_free(h);
}

/* The models answer: the served model and its maximum length. */
static void
test_models(void)
{
	struct nw_harness *h = vllm_with(NULL);
	struct narwhal_http_call call = poisoned_call();
	struct narwhal_model_info info;
	json_t *doc;

	if (h == NULL)
		return;
	g_assert_cmpint(nw_harness_dialect(h)->build_models(nw_harness_ctx(h), &test_engine, &call), ==, 0);
	g_assert_cmpstr(call.method, ==, "GET");
	g_assert_cmpstr(call.path, ==, "/v1/models");
	g_assert_null(call.body);

	info = (struct narwhal_model_info){ .struct_size = sizeof info, .max_model_len = -1 };
	doc = nw_harness_json("{\"object\": \"list\", \"data\": [{\"id\": \"llama\", \"object\": \"model\","
	            " \"max_model_len\": 8192}, {\"id\": \"other\"}]}");
	g_assert_cmpint(nw_harness_dialect(h)->parse_models(nw_harness_ctx(h), doc, &info), ==, 0);
	g_assert_cmpstr(info.name, ==, "llama");
	g_assert_cmpint(info.max_model_len, ==, 8192);
	json_decref(doc);

	/* No length: the preset stays. */
	info = (struct narwhal_model_info){ .struct_size = sizeof info, .max_model_len = -1 };
	doc = nw_harness_json("{\"data\": [{\"id\": \"m\"}]}");
	g_assert_cmpint(nw_harness_dialect(h)->parse_models(nw_harness_ctx(h), doc, &info), ==, 0);
	g_assert_cmpint(info.max_model_len, ==, -1);
	json_decref(doc);

	/* Nothing readable. */
	doc = nw_harness_json("{\"data\": []}");
	g_assert_cmpint(nw_harness_dialect(h)->parse_models(nw_harness_ctx(h), doc, &info), ==, -EPROTO);
	json_decref(doc);
	doc = nw_harness_json("{\"data\": [{\"id\": 7}]}");
	g_assert_cmpint(nw_harness_dialect(h)->parse_models(nw_harness_ctx(h), doc, &info), ==, -EPROTO);
	json_decref(doc);
	nw_harness_free(h);
}

/* vLLM refuses prompt_logprobs on a stream: such a request gets a whole
 * body (issue 9, "a request whose fields an engine refuses on a stream"). */
static void
test_whole_body_only(void)
{
	struct nw_harness *h = vllm_with(NULL);
	json_t *with, *null_value, *without;

	if (h == NULL)
		return;
	with = nw_harness_json("{\"model\": \"m\", \"prompt\": \"x\", \"prompt_logprobs\": 2}");
	null_value = nw_harness_json("{\"model\": \"m\", \"prompt\": \"x\", \"prompt_logprobs\": null}");
	without = nw_harness_json("{\"model\": \"m\", \"prompt\": \"x\", \"logprobs\": 2}");
	g_assert_true(nw_harness_dialect(h)->whole_body_only(nw_harness_ctx(h), with));
	g_assert_false(nw_harness_dialect(h)->whole_body_only(nw_harness_ctx(h), null_value));
	g_assert_false(nw_harness_dialect(h)->whole_body_only(nw_harness_ctx(h), without));
	json_decref(with);
	json_decref(null_value);
	json_decref(without);
	nw_harness_free(h);
}

/* sniff_sse must say yes to every terminator and error (else the host
 * would miss them after the first token), and may say no to token events. */
static void
test_sniff(void)
{
	struct nw_harness *h = vllm_with(NULL);
	static const char *const must[] = {
		"[DONE]", " [DONE] ",
		"{\"error\": {\"message\": \"x\", \"code\": 500}}",
		"{\"object\": \"error\", \"error\": \"boom\"}",
	};
	static const char *const may_skip[] = {
		"{\"id\":\"c\",\"choices\":[{\"index\":0,\"text\":\"hi\"}]}",
		"{\"id\":\"c\",\"choices\":[{\"index\":0,\"text\":\"an \\\"error\\\" here\"}]}",
	};

	if (h == NULL)
		return;
	for (size_t i = 0; i < G_N_ELEMENTS(must); i++)
		g_assert_true(nw_harness_dialect(h)->sniff_sse(nw_harness_ctx(h), must[i], strlen(must[i])));
	for (size_t i = 0; i < G_N_ELEMENTS(may_skip); i++)
		g_assert_false(nw_harness_dialect(h)->sniff_sse(nw_harness_ctx(h), may_skip[i], strlen(may_skip[i])));
	nw_harness_free(h);
}

static void
test_health(void)
{
	struct nw_harness *h = vllm_with(NULL);
	struct narwhal_http_call call = poisoned_call();

	if (h == NULL)
		return;
	g_assert_cmpint(nw_harness_dialect(h)->build_health(nw_harness_ctx(h), &test_engine, &call), ==, 0);
	g_assert_cmpstr(call.method, ==, "GET");
	g_assert_cmpstr(call.path, ==, "/health");
	g_assert_null(call.body);
	nw_harness_free(h);
}

/* The router owns kv_transfer_params: a client's value reaches no engine,
 * whatever its type, on any leg or route. */
static void
test_client_kv_params_stripped(void)
{
	static const char *const values[] = {
		"{\"do_remote_prefill\": true, \"remote_host\": \"evil.example\"}",
		"{\"do_remote_decode\": true}",
		"null", "\"x\"", "[1]", "{}",
	};
	struct nw_harness *h = vllm_with(NULL);

	if (h == NULL)
		return;
	for (guint i = 0; i < G_N_ELEMENTS(values); i++) {
		g_autofree char *comp = g_strdup_printf(
			"{\"model\": \"m\", \"prompt\": \"x\", \"kv_transfer_params\": %s}", values[i]);
		g_autofree char *chat = g_strdup_printf(
			"{\"model\": \"m\", \"messages\": [], \"kv_transfer_params\": %s}", values[i]);

		expect_body(h, LEG_TOKENIZE, C, comp, NULL,
		            "{\"model\": \"m\", \"prompt\": \"x\", \"add_special_tokens\": true}");
		expect_body(h, LEG_TOKENIZE, CHAT, chat, NULL,
		            "{\"model\": \"m\", \"messages\": [], \"add_generation_prompt\": true}");
		expect_body(h, LEG_PREFILL, C, comp, NULL,
		            "{\"model\": \"m\", \"prompt\": \"x\", \"max_tokens\": 1,"
		            " \"stream\": false, " PREFILL_KV "}");
		expect_body(h, LEG_PREFILL, CHAT, chat, NULL,
		            "{\"model\": \"m\", \"messages\": [], \"max_tokens\": 1,"
		            " \"stream\": false, " PREFILL_KV "}");
		expect_body(h, LEG_DECODE, C, comp, HANDOFF_OLD,
		            "{\"model\": \"m\", \"prompt\": \"x\", \"kv_transfer_params\": "
		            HANDOFF_OLD "}");
		expect_body(h, LEG_DECODE, CHAT, chat, NULL, "{\"model\": \"m\", \"messages\": []}");
		expect_body(h, LEG_AGGREGATE, C, comp, NULL, "{\"model\": \"m\", \"prompt\": \"x\"}");
		expect_body(h, LEG_AGGREGATE, CHAT, chat, NULL,
		            "{\"model\": \"m\", \"messages\": []}");
	}
	nw_harness_free(h);
}

static void
test_build_bad_arguments(void)
{
	struct nw_harness *h = vllm_with(NULL);
	struct narwhal_http_call call = poisoned_call();
	json_t *client, *handoff;
	void *ctx;

	if (h == NULL)
		return;
	ctx = nw_harness_ctx(h);
	client = nw_harness_json("{\"model\": \"m\", \"prompt\": \"x\"}");
	handoff = nw_harness_json(HANDOFF_OLD);
	for (int route = 0; route <= 3; route += 3) {
		g_assert_cmpint(nw_harness_dialect(h)->build_tokenize(ctx, TGT((narwhal_route)route, client), &call), ==,
		                -EINVAL);
		g_assert_cmpint(nw_harness_dialect(h)->build_prefill(ctx, TGT((narwhal_route)route, client), &call), ==,
		                -EINVAL);
		g_assert_cmpint(nw_harness_dialect(h)->build_decode(ctx, TGT((narwhal_route)route, client), handoff,
		                                     &call), ==, -EINVAL);
		g_assert_cmpint(nw_harness_dialect(h)->build_aggregate(ctx, TGT((narwhal_route)route, client), &call),
		                ==, -EINVAL);
	}
	g_assert_cmpint(nw_harness_dialect(h)->build_prefill(ctx, TGT(C, NULL), &call), ==, -EINVAL);
	g_assert_cmpint(nw_harness_dialect(h)->build_prefill(ctx, NULL, &call), ==, -EINVAL);
	/* A client body is an object. */
	g_assert_cmpint(nw_harness_dialect(h)->build_prefill(ctx, TGT(C, json_object_get(handoff,
	                                                               "remote_block_ids")),
	                                      &call), ==, -EINVAL);
	g_assert_cmpint(nw_harness_dialect(h)->build_tokenize(ctx, TGT(C, json_object_get(handoff, "remote_host")),
	                                       &call), ==, -EINVAL);
	g_assert_cmpint(nw_harness_dialect(h)->build_aggregate(ctx, TGT(C, client), NULL), ==, -EINVAL);
	g_assert_cmpint(nw_harness_dialect(h)->build_decode(ctx, TGT(C, client), NULL, NULL), ==, -EINVAL);
	g_assert_cmpint(nw_harness_dialect(h)->build_tokenize(ctx, TGT(C, client), NULL), ==, -EINVAL);
	g_assert_cmpint(nw_harness_dialect(h)->build_health(ctx, &test_engine, NULL), ==, -EINVAL);
	/* Nothing was written on the way. */
	g_assert_cmpstr(call.method, ==, "POISON");
	g_assert_null(call.body);
	json_decref(client);
	json_decref(handoff);
	nw_harness_free(h);
}

/* ------------------------------------------------------- parse_prefill --- */

static int
prefill_answer(struct nw_harness *h, const char *response_text, json_t **handoff)
{
	json_t *response = nw_harness_json(response_text);
	int rc;

	*handoff = (json_t *)0x1; /* poison: must be overwritten */
	rc = nw_harness_dialect(h)->parse_prefill(nw_harness_ctx(h), response, handoff);
	/* The handoff must outlive the response it came from. */
	json_decref(response);
	return rc;
}

/* Reference 1.2 step 2: the answer's top-level kv_transfer_params object
 * is the handoff, whole; null or absent means none. */
static void
test_parse_prefill(void)
{
	struct nw_harness *h = vllm_with(NULL);
	json_t *handoff;

	if (h == NULL)
		return;
	g_assert_cmpint(prefill_answer(h,
	                "{\"id\": \"cmpl-r1\", \"object\": \"text_completion\", \"model\": \"m\","
	                " \"choices\": [{\"index\": 0, \"text\": \"A\", \"finish_reason\": \"length\"}],"
	                " \"usage\": {\"prompt_tokens\": 1234, \"completion_tokens\": 1,"
	                " \"total_tokens\": 1235}, \"kv_transfer_params\": " HANDOFF_NEW "}",
	                &handoff), ==, 0);
	nw_harness_assert_json(handoff, HANDOFF_NEW);
	json_decref(handoff);

	g_assert_cmpint(prefill_answer(h,
	                "{\"id\": \"chatcmpl-r2\", \"object\": \"chat.completion\","
	                " \"choices\": [{\"index\": 0, \"message\": {\"role\": \"assistant\","
	                " \"content\": \"A\"}}], \"kv_transfer_params\": " HANDOFF_OLD "}",
	                &handoff), ==, 0);
	nw_harness_assert_json(handoff, HANDOFF_OLD);
	json_decref(handoff);

	/* Inner fields are not checked: an empty object is passed on too. */
	g_assert_cmpint(prefill_answer(h, "{\"kv_transfer_params\": {}}", &handoff), ==, 0);
	nw_harness_assert_json(handoff, "{}");
	json_decref(handoff);

	/* None: the decode engine will prefill locally. */
	g_assert_cmpint(prefill_answer(h, "{\"id\": \"x\", \"kv_transfer_params\": null}",
	                               &handoff), ==, 0);
	g_assert_null(handoff);
	g_assert_cmpint(prefill_answer(h, "{\"id\": \"x\", \"choices\": []}", &handoff), ==, 0);
	g_assert_null(handoff);

	/* Wrong types are an unreadable answer. */
	g_assert_cmpint(prefill_answer(h, "{\"kv_transfer_params\": [1, 2]}", &handoff), ==,
	                -EPROTO);
	g_assert_null(handoff);
	g_assert_cmpint(prefill_answer(h, "{\"kv_transfer_params\": \"{}\"}", &handoff), ==,
	                -EPROTO);
	g_assert_null(handoff);
	g_assert_cmpint(prefill_answer(h, "{\"kv_transfer_params\": true}", &handoff), ==,
	                -EPROTO);
	g_assert_null(handoff);
	g_assert_cmpint(prefill_answer(h, "[{\"kv_transfer_params\": {}}]", &handoff), ==,
	                -EPROTO);
	g_assert_null(handoff);
	g_assert_cmpint(prefill_answer(h, "null", &handoff), ==, -EPROTO);
	g_assert_null(handoff);

	g_assert_cmpint(nw_harness_dialect(h)->parse_prefill(nw_harness_ctx(h), NULL, &handoff), ==, -EINVAL);
	nw_harness_free(h);
}

/* ----------------------------------------------------------------- SSE --- */

/* Poisoned, so a field the plugin forgets shows up. */
static struct narwhal_sse_event
poisoned_event(void)
{
	return (struct narwhal_sse_event){
		.struct_size = sizeof(struct narwhal_sse_event),
		.kind = (narwhal_sse_kind)99,
		.tokens = 777,
		.prompt_tokens = -777,
		.completion_tokens = -777,
		.error_class = (narwhal_error_class)99,
	};
}

/* plugin-abi.h 2.4: parse_sse_json reads a payload the host read as JSON
 * (json_loadb, no flags) as parse_sse reads its bytes. */
static void
sse_json_agrees(struct nw_harness *h, const char *data, size_t len, int rc,
                const struct narwhal_sse_event *want)
{
	struct narwhal_sse_event ev = poisoned_event();
	json_t *doc = json_loadb(data, len, 0, NULL);

	if (doc == NULL)
		return; /* the host calls parse_sse for it */
	g_assert_cmpint(nw_harness_dialect(h)->parse_sse_json(nw_harness_ctx(h), doc, data, len, &ev),
	                ==, rc);
	json_decref(doc);
	if (rc != 0)
		return;
	g_assert_cmpuint(ev.kind, ==, want->kind);
	g_assert_cmpuint(ev.tokens, ==, want->tokens);
	g_assert_cmpint(ev.prompt_tokens, ==, want->prompt_tokens);
	g_assert_cmpint(ev.completion_tokens, ==, want->completion_tokens);
	if (want->kind == NARWHAL_SSE_ERROR)
		g_assert_cmpuint(ev.error_class, ==, want->error_class);
}

static struct narwhal_sse_event
sse_len(struct nw_harness *h, const char *data, size_t len, int expected_rc)
{
	struct narwhal_sse_event ev = poisoned_event();

	g_assert_cmpint(nw_harness_dialect(h)->parse_sse(nw_harness_ctx(h), data, len, &ev), ==, expected_rc);
	g_assert_cmpuint(ev.struct_size, ==, sizeof ev);
	sse_json_agrees(h, data, len, expected_rc, &ev);
	return ev;
}

static struct narwhal_sse_event
sse(struct nw_harness *h, const char *data)
{
	return sse_len(h, data, strlen(data), 0);
}

static void
expect_sse(struct nw_harness *h, const char *data, narwhal_sse_kind kind, uint32_t tokens,
           int64_t prompt_tokens, int64_t completion_tokens)
{
	struct narwhal_sse_event ev = sse(h, data);

	if (ev.kind != kind)
		g_error("kind %d, expected %d, for %s", ev.kind, kind, data);
	g_assert_cmpuint(ev.tokens, ==, tokens);
	g_assert_cmpint(ev.prompt_tokens, ==, prompt_tokens);
	g_assert_cmpint(ev.completion_tokens, ==, completion_tokens);
	if (kind != NARWHAL_SSE_ERROR)
		g_assert_cmpint(ev.error_class, ==, 99); /* left alone */
}

static void
expect_sse_error(struct nw_harness *h, const char *data, narwhal_error_class cls)
{
	struct narwhal_sse_event ev = sse(h, data);

	if (ev.kind != NARWHAL_SSE_ERROR || ev.error_class != cls)
		g_error("kind %d class %d, expected error class %d, for %s", ev.kind,
		        ev.error_class, cls, data);
	g_assert_cmpuint(ev.tokens, ==, 0);
}

/* Reference 4.2: completion chunks. */
static void
test_sse_completions(void)
{
	struct nw_harness *h = vllm_with(NULL);

	if (h == NULL)
		return;
	expect_sse(h, "{\"id\": \"cmpl-r1\", \"object\": \"text_completion\", \"created\": 1,"
	           " \"model\": \"m\", \"choices\": [{\"index\": 0, \"text\": \" world\","
	           " \"logprobs\": null, \"finish_reason\": null, \"stop_reason\": null}]}",
	           NARWHAL_SSE_TOKENS, 1, -1, -1);
	/* The last chunk may carry text and the finish reason together. */
	expect_sse(h, "{\"object\": \"text_completion\", \"choices\": [{\"index\": 0,"
	           " \"text\": \"!\", \"finish_reason\": \"length\"}]}",
	           NARWHAL_SSE_TOKENS, 1, -1, -1);
	/* A finish-reason-only chunk is metadata. */
	expect_sse(h, "{\"object\": \"text_completion\", \"choices\": [{\"index\": 0,"
	           " \"text\": \"\", \"finish_reason\": \"stop\", \"stop_reason\": null}]}",
	           NARWHAL_SSE_OTHER, 0, -1, -1);
	/* n > 1: a count of the choices with output in this event. */
	expect_sse(h, "{\"object\": \"text_completion\", \"choices\": [{\"index\": 0,"
	           " \"text\": \"a\"}, {\"index\": 1, \"text\": \"b\"}, {\"index\": 2,"
	           " \"text\": \"\"}]}",
	           NARWHAL_SSE_TOKENS, 2, -1, -1);
	/* An ordinary chunk with usage: null carries no usage. */
	expect_sse(h, "{\"choices\": [{\"index\": 0, \"text\": \"a\"}], \"usage\": null,"
	           " \"error\": null}",
	           NARWHAL_SSE_TOKENS, 1, -1, -1);
	nw_harness_free(h);
}

/* Reference 4.2: chat chunks. */
static void
test_sse_chat(void)
{
	struct nw_harness *h = vllm_with(NULL);

	if (h == NULL)
		return;
	/* The role chunk opens the stream and carries no output. */
	expect_sse(h, "{\"id\": \"chatcmpl-r1\", \"object\": \"chat.completion.chunk\","
	           " \"created\": 1, \"model\": \"m\", \"choices\": [{\"index\": 0,"
	           " \"delta\": {\"role\": \"assistant\", \"content\": \"\"}, \"logprobs\": null,"
	           " \"finish_reason\": null}]}",
	           NARWHAL_SSE_OTHER, 0, -1, -1);
	expect_sse(h, "{\"object\": \"chat.completion.chunk\", \"choices\": [{\"index\": 0,"
	           " \"delta\": {\"role\": \"assistant\"}}]}",
	           NARWHAL_SSE_OTHER, 0, -1, -1);
	expect_sse(h, "{\"object\": \"chat.completion.chunk\", \"choices\": [{\"index\": 0,"
	           " \"delta\": {\"content\": \"Hi\"}, \"finish_reason\": null}]}",
	           NARWHAL_SSE_TOKENS, 1, -1, -1);
	/* Reasoning models, both field names. */
	expect_sse(h, "{\"object\": \"chat.completion.chunk\", \"choices\": [{\"index\": 0,"
	           " \"delta\": {\"reasoning\": \"Let me think\"}}]}",
	           NARWHAL_SSE_TOKENS, 1, -1, -1);
	expect_sse(h, "{\"object\": \"chat.completion.chunk\", \"choices\": [{\"index\": 0,"
	           " \"delta\": {\"reasoning_content\": \"Hmm\", \"content\": null}}]}",
	           NARWHAL_SSE_TOKENS, 1, -1, -1);
	/* Tool calls. */
	expect_sse(h, "{\"object\": \"chat.completion.chunk\", \"choices\": [{\"index\": 0,"
	           " \"delta\": {\"tool_calls\": [{\"index\": 0, \"function\":"
	           " {\"arguments\": \"{\\\"a\\\"\"}}]}}]}",
	           NARWHAL_SSE_TOKENS, 1, -1, -1);
	expect_sse(h, "{\"object\": \"chat.completion.chunk\", \"choices\": [{\"index\": 0,"
	           " \"delta\": {\"tool_calls\": []}}]}",
	           NARWHAL_SSE_OTHER, 0, -1, -1);
	/* Finish-reason-only chunk. */
	expect_sse(h, "{\"object\": \"chat.completion.chunk\", \"choices\": [{\"index\": 0,"
	           " \"delta\": {}, \"finish_reason\": \"stop\", \"stop_reason\": null}]}",
	           NARWHAL_SSE_OTHER, 0, -1, -1);
	/* Odd choices are not output. */
	expect_sse(h, "{\"choices\": [null, 3, {\"delta\": \"x\"}, {\"delta\": {\"content\": 5}}]}",
	           NARWHAL_SSE_OTHER, 0, -1, -1);
	nw_harness_free(h);
}

/* Reference 4.2/4.3: usage, on the final chunk or on every chunk. */
static void
test_sse_usage(void)
{
	struct nw_harness *h = vllm_with(NULL);

	if (h == NULL)
		return;
	/* include_usage: a final chunk with no choices. */
	expect_sse(h, "{\"id\": \"cmpl-r1\", \"object\": \"text_completion\", \"created\": 1,"
	           " \"model\": \"m\", \"choices\": [], \"usage\": {\"prompt_tokens\": 12,"
	           " \"completion_tokens\": 34, \"total_tokens\": 46,"
	           " \"prompt_tokens_details\": {\"cached_tokens\": 8}}}",
	           NARWHAL_SSE_USAGE, 0, 12, 34);
	expect_sse(h, "{\"object\": \"chat.completion.chunk\", \"choices\": [],"
	           " \"usage\": {\"prompt_tokens\": 5, \"completion_tokens\": 0,"
	           " \"total_tokens\": 5}}",
	           NARWHAL_SSE_USAGE, 0, 5, 0);
	/* Missing or odd counts read as absent. */
	expect_sse(h, "{\"choices\": [], \"usage\": {\"prompt_tokens\": 5}}",
	           NARWHAL_SSE_USAGE, 0, 5, -1);
	expect_sse(h, "{\"choices\": [], \"usage\": {\"prompt_tokens\": -5,"
	           " \"completion_tokens\": \"3\"}}",
	           NARWHAL_SSE_USAGE, 0, -1, -1);
	expect_sse(h, "{\"usage\": {\"prompt_tokens\": 1, \"completion_tokens\": 2}}",
	           NARWHAL_SSE_USAGE, 0, 1, 2);
	/* continuous_usage_stats: usage on a token chunk. */
	expect_sse(h, "{\"object\": \"chat.completion.chunk\", \"choices\": [{\"index\": 0,"
	           " \"delta\": {\"content\": \"x\"}}], \"usage\": {\"prompt_tokens\": 12,"
	           " \"completion_tokens\": 3, \"total_tokens\": 15}}",
	           NARWHAL_SSE_TOKENS, 1, 12, 3);
	/* ... and on the role chunk. */
	expect_sse(h, "{\"object\": \"chat.completion.chunk\", \"choices\": [{\"index\": 0,"
	           " \"delta\": {\"role\": \"assistant\", \"content\": \"\"}}],"
	           " \"usage\": {\"prompt_tokens\": 12, \"completion_tokens\": 0}}",
	           NARWHAL_SSE_OTHER, 0, 12, 0);
	/* A request that cannot stream arrives whole in one event. */
	expect_sse(h, "{\"id\": \"chatcmpl-r1\", \"object\": \"chat.completion\", \"choices\":"
	           " [{\"index\": 0, \"message\": {\"role\": \"assistant\", \"content\": \"All\"},"
	           " \"finish_reason\": \"stop\"}, {\"index\": 1, \"message\": {\"role\":"
	           " \"assistant\", \"content\": \"of it\"}, \"finish_reason\": \"stop\"}],"
	           " \"usage\": {\"prompt_tokens\": 4, \"completion_tokens\": 9}}",
	           NARWHAL_SSE_TOKENS, 2, 4, 9);
	/* Neither choices nor usage. */
	expect_sse(h, "{}", NARWHAL_SSE_OTHER, 0, -1, -1);
	expect_sse(h, "{\"choices\": []}", NARWHAL_SSE_OTHER, 0, -1, -1);
	nw_harness_free(h);
}

/* Reference 4.2 and 4.4: errors in the stream, both shapes. */
static void
test_sse_errors(void)
{
	struct nw_harness *h = vllm_with(NULL);

	if (h == NULL)
		return;
	expect_sse_error(h, "{\"error\": {\"message\": \"engine failed\", \"type\":"
	                 " \"InternalServerError\", \"param\": null, \"code\": 500}}",
	                 NARWHAL_ERROR_RETRYABLE);
	expect_sse_error(h, "{\"error\": {\"message\": \"busy\", \"type\":"
	                 " \"ServiceUnavailableError\", \"param\": null, \"code\": 503}}",
	                 NARWHAL_ERROR_RETRYABLE);
	expect_sse_error(h, "{\"error\": {\"message\": \"bad logits processor\", \"type\":"
	                 " \"BadRequestError\", \"param\": null, \"code\": 400}}",
	                 NARWHAL_ERROR_CLIENT);
	expect_sse_error(h, "{\"error\": {\"message\": \"This model's maximum context length is"
	                 " 4096 tokens. However, you requested 5000 tokens.\", \"type\":"
	                 " \"BadRequestError\", \"param\": null, \"code\": 400}}",
	                 NARWHAL_ERROR_CONTEXT_TOO_LONG);
	/* Without an integer code the type says it. */
	expect_sse_error(h, "{\"error\": {\"message\": \"x\", \"type\": \"InternalServerError\"}}",
	                 NARWHAL_ERROR_RETRYABLE);
	expect_sse_error(h, "{\"error\": {\"message\": \"x\", \"type\": \"Service Unavailable\","
	                 " \"code\": \"busy\"}}",
	                 NARWHAL_ERROR_RETRYABLE);
	expect_sse_error(h, "{\"error\": {\"message\": \"x\", \"type\": \"NotImplementedError\"}}",
	                 NARWHAL_ERROR_PERMANENT);
	/* The flat shape of vLLM before 0.10.1. */
	expect_sse_error(h, "{\"object\": \"error\", \"message\": \"overloaded\", \"type\":"
	                 " \"ServiceUnavailableError\", \"param\": null, \"code\": 503}",
	                 NARWHAL_ERROR_RETRYABLE);
	expect_sse_error(h, "{\"object\": \"error\", \"message\": \"bad\", \"type\":"
	                 " \"BadRequestError\", \"param\": \"n\", \"code\": 400}",
	                 NARWHAL_ERROR_CLIENT);
	expect_sse_error(h, "{\"object\": \"error\", \"message\": \"You passed 5000 input tokens"
	                 " and requested 100 output tokens. However, the model's context length"
	                 " is only 4096 tokens.\", \"type\": \"BadRequestError\","
	                 " \"param\": \"input_tokens\", \"code\": 400}",
	                 NARWHAL_ERROR_CONTEXT_TOO_LONG);
	/* Nothing to go on: not one of the retryable statuses. */
	expect_sse_error(h, "{\"error\": {\"message\": \"mystery\"}}", NARWHAL_ERROR_PERMANENT);
	expect_sse_error(h, "{\"error\": \"plain text error\"}", NARWHAL_ERROR_PERMANENT);
	expect_sse_error(h, "{\"error\": {\"code\": 200, \"type\": \"weird\"}}",
	                 NARWHAL_ERROR_PERMANENT);
	nw_harness_free(h);
}

static void
test_sse_done(void)
{
	struct nw_harness *h = vllm_with(NULL);

	if (h == NULL)
		return;
	expect_sse(h, "[DONE]", NARWHAL_SSE_DONE, 0, -1, -1);
	expect_sse(h, " [DONE]\r\n", NARWHAL_SSE_DONE, 0, -1, -1);
	/* The payload is a length, not a C string. */
	g_assert_cmpint(sse_len(h, "[DONE]trailing", 6, 0).kind, ==, NARWHAL_SSE_DONE);
	nw_harness_free(h);
}

static void
test_sse_invalid(void)
{
	static const char *const bad[] = {
		"", " ", "{", "{\"choices\": [", "not json", "[DONE", "DONE", "[done]",
		"[]", "[1, 2]", "\"text\"", "42", "null", "{\"a\": 1} {\"b\": 2}",
		"{\"a\": \"\xff\"}",
	};
	struct nw_harness *h = vllm_with(NULL);
	const char *chunk = "{\"choices\": [{\"index\": 0, \"text\": \"x\"}]}";

	if (h == NULL)
		return;
	for (guint i = 0; i < G_N_ELEMENTS(bad); i++)
		sse_len(h, bad[i], strlen(bad[i]), -EPROTO);
	/* A cut-off chunk is invalid; the same bytes with their length are fine. */
	sse_len(h, chunk, strlen(chunk) - 1, -EPROTO);
	g_assert_cmpint(sse_len(h, chunk, strlen(chunk), 0).kind, ==, NARWHAL_SSE_TOKENS);
	sse_len(h, NULL, 0, -EINVAL);
	g_assert_cmpint(nw_harness_dialect(h)->parse_sse(nw_harness_ctx(h), "[DONE]", 6, NULL), ==, -EINVAL);
	nw_harness_free(h);
}

/* ------------------------------------------------------ classify_error --- */

/* The class parse_error gives, from the host's presets (spec 4.2 by status). */
static narwhal_error_class
classify(struct nw_harness *h, int status, const char *body)
{
	struct narwhal_engine_error err = {
		.struct_size = sizeof err,
		.error_class = status >= 500 || status == 408 || status == 429 || status <= 0
		                       ? NARWHAL_ERROR_RETRYABLE : NARWHAL_ERROR_PERMANENT,
	};

	(void)nw_harness_dialect(h)->parse_error(nw_harness_ctx(h), status, body, body ? strlen(body) : 0, &err);
	return err.error_class;
}

static void
expect_class(struct nw_harness *h, int status, const char *body, narwhal_error_class cls)
{
	narwhal_error_class got = classify(h, status, body);

	if (got != cls)
		g_error("status %d body %s: class %d, expected %d", status, body ? body : "(null)",
		        got, cls);
}

/* Error bodies for a status, in every form the router may see. */
static void
expect_class_all_bodies(struct nw_harness *h, int status, narwhal_error_class cls)
{
	g_autofree char *nested = g_strdup_printf(
		"{\"error\": {\"message\": \"failed\", \"type\": \"X\", \"param\": null,"
		" \"code\": %d}}", status);
	g_autofree char *flat = g_strdup_printf(
		"{\"object\": \"error\", \"message\": \"failed\", \"type\": \"X\","
		" \"param\": null, \"code\": %d}", status);

	expect_class(h, status, NULL, cls);
	expect_class(h, status, "", cls);
	expect_class(h, status, nested, cls);
	expect_class(h, status, flat, cls);
	expect_class(h, status, "<html><body>Bad Gateway</body></html>", cls);
	expect_class(h, status, "Internal Server Error", cls);
	expect_class(h, status, "{\"detail\": \"Not Found\"}", cls);
}

/* Spec 4.2: 408, 429, 500, 502, 503, 504 (transport failures are the
 * host's: parse_error is never asked about them, and status 0 means an
 * in-band event, tested with the SSE events). */
static void
test_retryable_statuses(void)
{
	static const int statuses[] = { 408, 429, 500, 502, 503, 504 };
	struct nw_harness *h = vllm_with(NULL);

	if (h == NULL)
		return;
	for (guint i = 0; i < G_N_ELEMENTS(statuses); i++)
		expect_class_all_bodies(h, statuses[i], NARWHAL_ERROR_RETRYABLE);
	/* A negative status is no HTTP answer either. */
	expect_class(h, -1, NULL, NARWHAL_ERROR_RETRYABLE);
	/* A context-length message does not make an engine fault permanent. */
	expect_class(h, 500, "{\"error\": {\"message\": \"maximum context length exceeded\","
	             " \"type\": \"InternalServerError\", \"param\": \"input_tokens\","
	             " \"code\": 500}}", NARWHAL_ERROR_RETRYABLE);
	nw_harness_free(h);
}

/* Spec 4.2: every other status ends the request. 400, 413 and 422 refuse
 * the client's own request (NARWHAL_ERROR_CLIENT: its message may be shown
 * to the client); the rest are the engine's or the router's business. */
static void
test_permanent_statuses(void)
{
	static const int statuses[] = { 401, 403, 404, 405, 409, 415,
	                                451, 499, 501, 505, 507, 599 };
	static const int client[] = { 400, 413, 422 };
	struct nw_harness *h = vllm_with(NULL);

	if (h == NULL)
		return;
	for (guint i = 0; i < G_N_ELEMENTS(statuses); i++)
		expect_class_all_bodies(h, statuses[i], NARWHAL_ERROR_PERMANENT);
	for (guint i = 0; i < G_N_ELEMENTS(client); i++)
		expect_class_all_bodies(h, client[i], NARWHAL_ERROR_CLIENT);
	/* The status wins over the code in the body. */
	expect_class(h, 400, "{\"error\": {\"message\": \"x\", \"type\": \"InternalServerError\","
	             " \"code\": 503}}", NARWHAL_ERROR_CLIENT);
	expect_class(h, 503, "{\"error\": {\"message\": \"x\", \"type\": \"BadRequestError\","
	             " \"code\": 400}}", NARWHAL_ERROR_RETRYABLE);
	/* A 400 about kv_transfer_params refuses what the router sent (the
	 * host refuses the key from clients): permanent, its words (the
	 * prefill engine's address) not the client's to read. */
	expect_class(h, 400, "{\"error\": {\"message\": \"Invalid kv_transfer_params:"
	             " remote_host 10.0.0.7\", \"type\": \"BadRequestError\", \"param\": null,"
	             " \"code\": 400}}", NARWHAL_ERROR_PERMANENT);
	expect_class(h, 422, "{\"object\": \"error\", \"message\": \"bad\", \"param\":"
	             " \"kv_transfer_params\", \"code\": 422}", NARWHAL_ERROR_PERMANENT);
	/* vLLM's unknown-model answer. */
	expect_class(h, 404, "{\"error\": {\"message\": \"The model `x` does not exist.\","
	             " \"type\": \"NotFoundError\", \"param\": \"model\", \"code\": 404}}",
	             NARWHAL_ERROR_PERMANENT);
	nw_harness_free(h);
}

/* Reference 4.4: an error body under a non-error status is read for its
 * own code or type; a body that says nothing leaves the request failed. */
static void
test_error_body_without_error_status(void)
{
	struct nw_harness *h = vllm_with(NULL);

	if (h == NULL)
		return;
	expect_class(h, 200, "{\"error\": {\"message\": \"x\", \"type\": \"X\", \"code\": 503}}",
	             NARWHAL_ERROR_RETRYABLE);
	expect_class(h, 200, "{\"object\": \"error\", \"message\": \"x\", \"code\": 400}",
	             NARWHAL_ERROR_CLIENT);
	expect_class(h, 200, "{\"error\": {\"message\": \"x\", \"type\": \"RateLimitError\"}}",
	             NARWHAL_ERROR_RETRYABLE);
	expect_class(h, 200, "{\"message\": \"x\", \"code\": 504}", NARWHAL_ERROR_RETRYABLE);
	expect_class(h, 200, "{\"object\": \"error\", \"message\": \"This model's maximum context"
	             " length is 2048 tokens.\", \"code\": 400}", NARWHAL_ERROR_CONTEXT_TOO_LONG);
	expect_class(h, 200, "not json", NARWHAL_ERROR_PERMANENT);
	expect_class(h, 200, NULL, NARWHAL_ERROR_PERMANENT);
	expect_class(h, 302, "{\"choices\": []}", NARWHAL_ERROR_PERMANENT);
	nw_harness_free(h);
}

/* ABI 2.1, NARWHAL_ERROR_HANDOFF: a decode engine that could not load the
 * remote KV cache (reference 1.3, kv_load_failure_policy=fail) is the
 * prefill engine's fault; other server errors stay retryable, and a client
 * error that mentions KV does not become one. */
static void
test_handoff_load_failure(void)
{
	struct nw_harness *h = vllm_with(NULL);

	if (h == NULL)
		return;
	expect_class(h, 500, "{\"error\": {\"message\": \"Failed to load the remote KV cache: the"
	             " producer answered 410 (kv_load_failure_policy=fail).\", \"type\":"
	             " \"InternalServerError\", \"code\": 500}}", NARWHAL_ERROR_HANDOFF);
	expect_class(h, 0, "{\"error\": {\"message\": \"Remote KV load failed for request r1\","
	             " \"code\": 500}}", NARWHAL_ERROR_HANDOFF);
	expect_class(h, 500, "{\"error\": {\"message\": \"CUDA out of memory\", \"code\": 500}}",
	             NARWHAL_ERROR_RETRYABLE);
	expect_class(h, 400, "{\"error\": {\"message\": \"kv_load_failure_policy is not a"
	             " request field\", \"code\": 400}}", NARWHAL_ERROR_CLIENT);
	nw_harness_free(h);
}

/* One context-length wording in both error shapes; the param is put in
 * the JSON when given. */
static void
expect_context(struct nw_harness *h, const char *message, const char *param,
               narwhal_error_class cls)
{
	g_autofree char *p = param ? g_strdup_printf("\"%s\"", param) : g_strdup("null");
	g_autofree char *nested = g_strdup_printf(
		"{\"error\": {\"message\": \"%s\", \"type\": \"BadRequestError\", \"param\": %s,"
		" \"code\": 400}}", message, p);
	g_autofree char *flat = g_strdup_printf(
		"{\"object\": \"error\", \"message\": \"%s\", \"type\": \"BadRequestError\","
		" \"param\": %s, \"code\": 400}", message, p);

	expect_class(h, 400, nested, cls);
	expect_class(h, 400, flat, cls);
}

/* Reference 4.5: every vLLM wording family is a 400 that says "context
 * length"; with a length param any mention of the context will do. */
static void
test_context_length(void)
{
	struct nw_harness *h = vllm_with(NULL);

	if (h == NULL)
		return;
	/* Oldest. */
	expect_context(h, "This model's maximum context length is 4096 tokens. However, you"
	               " requested 5000 tokens (4000 in the messages, 1000 in the completion)."
	               " Please reduce the length of the messages or completion.",
	               NULL, NARWHAL_ERROR_CONTEXT_TOO_LONG);
	/* Prompt alone too long. */
	expect_context(h, "This model's maximum context length is 4096 tokens. However, your"
	               " request has 5000 input tokens. Please reduce the length of the input"
	               " messages.", NULL, NARWHAL_ERROR_CONTEXT_TOO_LONG);
	/* max_tokens too big. */
	expect_context(h, "'max_tokens' or 'max_completion_tokens' is too large: 4000. This"
	               " model's maximum context length is 4096 tokens and your request has 200"
	               " input tokens (4000 > 4096 - 200).", NULL, NARWHAL_ERROR_CONTEXT_TOO_LONG);
	/* Total too big. */
	expect_context(h, "This model's maximum context length is 4096 tokens. However, you"
	               " requested 1000 output tokens and your prompt contains (at least) 3500"
	               " input tokens, for a total of (at least) 4500 tokens. Please reduce the"
	               " length of the input prompt or the number of requested output tokens.",
	               NULL, NARWHAL_ERROR_CONTEXT_TOO_LONG);
	/* VLLMValidationError: the parameter in the text and in param. */
	expect_context(h, "This model's maximum context length is 4096 tokens. However, your"
	               " request has 5000 input tokens. Please reduce the length of the input"
	               " messages. (parameter=input_tokens, value=5000)",
	               "input_tokens", NARWHAL_ERROR_CONTEXT_TOO_LONG);
	expect_context(h, "'max_tokens' or 'max_completion_tokens' is too large: 4000. This"
	               " model's maximum context length is 4096 tokens and your request has 200"
	               " input tokens (4000 > 4096 - 200). (parameter=max_tokens, value=4000)",
	               "max_tokens", NARWHAL_ERROR_CONTEXT_TOO_LONG);
	/* Newest renderer, tokens and characters. */
	expect_context(h, "You passed 5000 input tokens and requested 100 output tokens. However,"
	               " the model's context length is only 4096 tokens, resulting in a maximum"
	               " input length of 3996 tokens. Please reduce the length of the input"
	               " prompt. (parameter=input_tokens, value=5000)",
	               "input_tokens", NARWHAL_ERROR_CONTEXT_TOO_LONG);
	expect_context(h, "You passed 50000 input characters and requested 100 output tokens."
	               " However, the model's context length is only 4096 tokens. (parameter="
	               "input_text, value=50000)", "input_text", NARWHAL_ERROR_CONTEXT_TOO_LONG);
	/* Case does not matter; a length param with another context phrase. */
	expect_context(h, "CONTEXT LENGTH EXCEEDED", NULL, NARWHAL_ERROR_CONTEXT_TOO_LONG);
	expect_context(h, "The input does not fit the context window.", "input_tokens",
	               NARWHAL_ERROR_CONTEXT_TOO_LONG);
	expect_context(h, "prompt exceeds the available context size", "input_text",
	               NARWHAL_ERROR_CONTEXT_TOO_LONG);
	/* The OpenAI-style code string. */
	expect_class(h, 400, "{\"error\": {\"message\": \"too long\", \"type\":"
	             " \"invalid_request_error\", \"param\": \"messages\", \"code\":"
	             " \"context_length_exceeded\"}}", NARWHAL_ERROR_CONTEXT_TOO_LONG);

	/* Not context errors: a length param about something else, a context
	 * phrase without a length param, other statuses, text outside JSON. */
	expect_context(h, "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)",
	               "max_tokens", NARWHAL_ERROR_CLIENT);
	expect_context(h, "Input tokens must not be empty.", "input_tokens",
	               NARWHAL_ERROR_CLIENT);
	expect_context(h, "prompt exceeds the available context size", NULL,
	               NARWHAL_ERROR_CLIENT);
	expect_context(h, "The context window is full.", "temperature", NARWHAL_ERROR_CLIENT);
	expect_class(h, 422, "{\"error\": {\"message\": \"maximum context length is 4096\","
	             " \"code\": 422}}", NARWHAL_ERROR_CLIENT);
	expect_class(h, 413, "{\"error\": {\"message\": \"maximum context length is 4096\","
	             " \"param\": \"input_tokens\", \"code\": 413}}", NARWHAL_ERROR_CLIENT);
	expect_class(h, 400, "This model's maximum context length is 4096 tokens.",
	             NARWHAL_ERROR_CLIENT);
	expect_class(h, 400, "{\"error\": {\"message\": 42, \"param\": \"input_tokens\"}}",
	             NARWHAL_ERROR_CLIENT);
	/* Message text is never read under another status, even with
	 * "context length" in it. */
	expect_class(h, 503, "{\"error\": {\"message\": \"context length\", \"code\": 400}}",
	             NARWHAL_ERROR_RETRYABLE);
	nw_harness_free(h);
}

/* ------------------------------------------------- engine metrics, 2.1 --- */

/* The host's presets (plugin-abi.h, struct narwhal_engine_metrics). */
static struct narwhal_engine_metrics
preset_metrics(void)
{
	return (struct narwhal_engine_metrics){ .struct_size = sizeof(struct narwhal_engine_metrics),
	                                        .running = -1, .waiting = -1,
	                                        .kv_usage = NAN, .start_time_s = NAN };
}

/* parse_metrics on text, handed over in a buffer of exactly its length (no
 * terminator), so a read past the end shows under the sanitizer. */
static int
metrics(struct nw_harness *h, const char *text, struct narwhal_engine_metrics *out)
{
	size_t len = strlen(text);
	g_autofree char *body = g_memdup2(text, len > 0 ? len : 1);

	*out = preset_metrics();
	return nw_harness_dialect(h)->parse_metrics(nw_harness_ctx(h), body, len, out);
}

/* A failed parse leaves every preset in place. */
static void
expect_metrics_error(struct nw_harness *h, const char *text)
{
	struct narwhal_engine_metrics m;

	if (metrics(h, text, &m) != -EPROTO)
		g_error("parse_metrics took a body it should refuse:\n%s", text);
	g_assert_cmpint(m.running, ==, -1);
	g_assert_cmpint(m.waiting, ==, -1);
	g_assert_true(isnan(m.kv_usage));
	g_assert_true(isnan(m.start_time_s));
}

/* A vLLM scrape as the reference's section 5.1 names it: HELP and TYPE
 * comments, histograms and counters around the gauges, the process
 * collector's series, label values with escaped quotes. */
#define SCRAPE_HEAD                                                                  \
	"# HELP python_gc_objects_collected_total Objects collected during gc\n"        \
	"# TYPE python_gc_objects_collected_total counter\n"                            \
	"python_gc_objects_collected_total{generation=\"0\"} 12345.0\n"                 \
	"# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.\n" \
	"# TYPE process_start_time_seconds gauge\n"                                     \
	"process_start_time_seconds 1.75123456789e+09\n"                                \
	"# HELP vllm:num_requests_running Number of requests in model execution batches.\n" \
	"# TYPE vllm:num_requests_running gauge\n"                                      \
	"vllm:num_requests_running{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B\"} 7.0\n" \
	"# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n" \
	"# TYPE vllm:num_requests_waiting gauge\n"                                      \
	"vllm:num_requests_waiting{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B\"} 2.0\n" \
	"# TYPE vllm:num_requests_waiting_by_reason gauge\n"                            \
	"vllm:num_requests_waiting_by_reason{engine=\"0\",model_name=\"m\",reason=\"capacity\"} 2.0\n" \
	"# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n"  \
	"# TYPE vllm:kv_cache_usage_perc gauge\n"                                       \
	"vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B\"} 0.4375\n"

#define SCRAPE_TAIL                                                                  \
	"# TYPE vllm:time_to_first_token_seconds histogram\n"                           \
	"vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"0.001\",model_name=\"m\"} 0.0\n" \
	"vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"+Inf\",model_name=\"m\"} 31.0\n" \
	"vllm:time_to_first_token_seconds_count{engine=\"0\",model_name=\"m\"} 31.0\n"  \
	"vllm:time_to_first_token_seconds_sum{engine=\"0\",model_name=\"m\"} 4.25\n"    \
	"# TYPE vllm:cache_config_info gauge\n"                                         \
	"vllm:cache_config_info{block_size=\"16\",cache_dtype=\"auto\",note=\"say \\\"hi\\\"\\\\\\n\"} 1.0\n" \
	"# TYPE vllm:prompt_tokens_total counter\n"                                     \
	"vllm:prompt_tokens_total{engine=\"0\",model_name=\"m\"} 1.2345e+06\n"

/* Issue 10 ("reads the engine's own metrics where the dialect can"):
 * GET /metrics, and the four numbers out of a whole scrape. */
static void
test_metrics_scrape(void)
{
	struct nw_harness *h = vllm_with(NULL);
	struct narwhal_http_call call = poisoned_call();
	struct narwhal_engine_metrics m;

	if (h == NULL)
		return;
	g_assert_cmpint(nw_harness_dialect(h)->build_metrics(nw_harness_ctx(h), &test_engine, &call), ==, 0);
	g_assert_cmpstr(call.method, ==, "GET");
	g_assert_cmpstr(call.path, ==, "/metrics");
	g_assert_cmpuint(call.flags, ==, 0);
	g_assert_null(call.body);
	g_assert_cmpint(nw_harness_dialect(h)->build_metrics(nw_harness_ctx(h), &test_engine, NULL), ==, -EINVAL);

	g_assert_cmpint(metrics(h, SCRAPE_HEAD SCRAPE_TAIL, &m), ==, 0);
	g_assert_cmpint(m.running, ==, 7);
	g_assert_cmpint(m.waiting, ==, 2);
	g_assert_cmpfloat(m.kv_usage, ==, 0.4375);
	g_assert_cmpfloat_with_epsilon(m.start_time_s, 1751234567.89, 1e-6);
	g_assert_cmpuint(m.struct_size, ==, sizeof m);
	nw_harness_free(h);
}

/* Several series of one metric (data parallel engines, several models):
 * counts add up, KV usage and start time are the highest. */
static void
test_metrics_series(void)
{
	struct nw_harness *h = vllm_with(NULL);
	struct narwhal_engine_metrics m;

	if (h == NULL)
		return;
	g_assert_cmpint(metrics(h,
		"vllm:num_requests_running{engine=\"0\",model_name=\"a\"} 3\n"
		"vllm:num_requests_running{engine=\"1\",model_name=\"a\"} 4\n"
		"vllm:num_requests_waiting{engine=\"0\",model_name=\"a\"} 0\n"
		"vllm:num_requests_waiting{engine=\"1\",model_name=\"a\"} 5\n"
		"vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"a\"} 0.25\n"
		"vllm:kv_cache_usage_perc{engine=\"1\",model_name=\"a\"} 0.75\n"
		"vllm:kv_cache_usage_perc{engine=\"2\",model_name=\"a\"} 0.5\n", &m), ==, 0);
	g_assert_cmpint(m.running, ==, 7);
	g_assert_cmpint(m.waiting, ==, 5);
	g_assert_cmpfloat(m.kv_usage, ==, 0.75);
	/* Not in the body: the preset stays. */
	g_assert_true(isnan(m.start_time_s));
	nw_harness_free(h);
}

/* Reference 5.1: vllm:gpu_cache_usage_perc is the older name. It is read
 * when the new one is absent, and the new one wins when both are there
 * (mid-2025 versions export both). */
static void
test_metrics_old_kv_name(void)
{
	struct nw_harness *h = vllm_with(NULL);
	struct narwhal_engine_metrics m;

	if (h == NULL)
		return;
	g_assert_cmpint(metrics(h, "vllm:gpu_cache_usage_perc{model_name=\"m\"} 0.125\n", &m), ==, 0);
	g_assert_cmpfloat(m.kv_usage, ==, 0.125);
	g_assert_cmpint(m.running, ==, -1);
	g_assert_cmpint(metrics(h,
		"vllm:gpu_cache_usage_perc{model_name=\"m\"} 0.9\n"
		"vllm:kv_cache_usage_perc{model_name=\"m\"} 0.25\n", &m), ==, 0);
	g_assert_cmpfloat(m.kv_usage, ==, 0.25);
	g_assert_cmpint(metrics(h,
		"vllm:kv_cache_usage_perc{model_name=\"m\"} 0.25\n"
		"vllm:gpu_cache_usage_perc{model_name=\"m\"} 0.9\n", &m), ==, 0);
	g_assert_cmpfloat(m.kv_usage, ==, 0.25);
	nw_harness_free(h);
}

/* The text format's latitude: blank lines and leading blanks, tabs, CRLF,
 * a trailing comma and blanks in a label set, a blank between the name and
 * its labels, timestamps, no final newline, exponents and signs. */
static void
test_metrics_format(void)
{
	struct nw_harness *h = vllm_with(NULL);
	struct narwhal_engine_metrics m;

	if (h == NULL)
		return;
	g_assert_cmpint(metrics(h,
		"\n\n   # a free comment\r\n"
		"\tvllm:num_requests_running { model_name = \"x\" , engine=\"0\", } \t +2e0  1700000000000\r\n"
		"\n"
		"vllm:num_requests_waiting{} 0.0 -5\n"
		"vllm:kv_cache_usage_perc 1\n"
		"process_start_time_seconds\t1700000000.25", &m), ==, 0);
	g_assert_cmpint(m.running, ==, 2);
	g_assert_cmpint(m.waiting, ==, 0);
	g_assert_cmpfloat(m.kv_usage, ==, 1.0);
	g_assert_cmpfloat(m.start_time_s, ==, 1700000000.25);
	/* A name that merely starts like one of ours is another metric. */
	g_assert_cmpint(metrics(h,
		"vllm:num_requests_running_total 9\n"
		"vllm:num_requests_running 1\n", &m), ==, 0);
	g_assert_cmpint(m.running, ==, 1);
	nw_harness_free(h);
}

/* Issue 10: a body that is not this engine's metrics is a monitoring
 * failure (-EPROTO, presets untouched), and so is a malformed sample of a
 * metric the dialect reads; oddities in other families are not. */
static void
test_metrics_malformed(void)
{
	static const char *const refused[] = {
		/* None of the four metrics. */
		"",
		"\n\n",
		"# HELP vllm:num_requests_running Number of requests.\n"
		"# TYPE vllm:num_requests_running gauge\n",
		"python_gc_objects_collected_total{generation=\"0\"} 1.0\n",
		/* Not Prometheus text at all. */
		"{\"running\": 3}",
		"<html><body>502 Bad Gateway</body></html>\n",
		"vllm:num_requests_running 1\n<html>\n",
		"7 vllm:num_requests_running\n",
		/* Malformed samples of a metric the dialect reads. */
		"vllm:num_requests_running\n",
		"vllm:num_requests_running \n",
		"vllm:num_requests_running{model_name=\"m\"}\n",
		"vllm:num_requests_running{model_name=\"m\"\n",
		"vllm:num_requests_running{model_name=\"m} 1\n",
		"vllm:num_requests_running{model_name=m} 1\n",
		"vllm:num_requests_running{model_name \"m\"} 1\n",
		"vllm:num_requests_running{=\"m\"} 1\n",
		"vllm:num_requests_running{model-name=\"m\"} 1\n",
		"vllm:num_requests_running{model_name=\"m\" engine=\"0\"} 1\n",
		"vllm:num_requests_running{model_name=\"m\",,} 1\n",
		"vllm:num_requests_running{model_name=\"a\\tb\"} 1\n",
		"vllm:num_requests_running{model_name=\"a\\",
		"vllm:num_requests_running} 1\n",
		"vllm:num_requests_running= 1\n",
		"vllm:num_requests_running one\n",
		"vllm:num_requests_running 0x10\n",
		"vllm:num_requests_running 1e\n",
		"vllm:num_requests_running .\n",
		"vllm:num_requests_running 1.0.0\n",
		"vllm:num_requests_running infinity\n",
		"vllm:num_requests_running 1 2 3\n",
		"vllm:num_requests_running 1 1.5\n",
		"vllm:num_requests_running 1 -\n",
		"vllm:num_requests_running 1 12a\n",
		"vllm:num_requests_running 123456789012345678901234567890123456789012345678901234567890123456789\n",
		/* Values that do not fit. */
		"vllm:num_requests_running -1\n",
		"vllm:num_requests_running 2.5\n",
		"vllm:num_requests_running NaN\n",
		"vllm:num_requests_running +Inf\n",
		"vllm:num_requests_waiting 1e300\n",
		/* Counts whose sum leaves the exact range. */
		"vllm:num_requests_running{engine=\"0\"} 9007199254740992\n"
		"vllm:num_requests_running{engine=\"1\"} 2\n",
		"vllm:kv_cache_usage_perc 1.5\n",
		"vllm:kv_cache_usage_perc -0.1\n",
		"vllm:kv_cache_usage_perc NaN\n",
		"vllm:gpu_cache_usage_perc Inf\n",
		"process_start_time_seconds 0\n",
		"process_start_time_seconds -Inf\n",
		/* One bad sample spoils an otherwise good scrape. */
		SCRAPE_HEAD "vllm:num_requests_waiting{engine=\"1\",model_name=\"m\"} -3\n" SCRAPE_TAIL,
		SCRAPE_HEAD "vllm:kv_cache_usage_perc{engine=\"1\" 0.5\n" SCRAPE_TAIL,
	};
	struct nw_harness *h = vllm_with(NULL);
	struct narwhal_engine_metrics m;

	if (h == NULL)
		return;
	for (guint i = 0; i < G_N_ELEMENTS(refused); i++)
		expect_metrics_error(h, refused[i]);
	/* A family the dialect does not read may carry what it likes after its
	 * name (a later format's exemplar, say). */
	g_assert_cmpint(metrics(h,
		"vllm:time_to_first_token_seconds_bucket{le=\"0.1\"} 8 # {trace_id=\"abc\"} 0.08\n"
		"vllm:other{broken 1\n"
		"vllm:num_requests_running 4\n", &m), ==, 0);
	g_assert_cmpint(m.running, ==, 4);
	/* Bad arguments. */
	g_assert_cmpint(nw_harness_dialect(h)->parse_metrics(nw_harness_ctx(h), NULL, 4, &m), ==, -EINVAL);
	g_assert_cmpint(nw_harness_dialect(h)->parse_metrics(nw_harness_ctx(h), "x", 1, NULL), ==, -EINVAL);
	expect_metrics_error(h, "");
	nw_harness_free(h);
}

/* ----------------------------------------------------------- the rules --- */

/* No clock, no fleet, no estimators, no logs: a pure wire format. */
static void
test_no_host_calls(void)
{
	struct nw_harness *h = vllm_with(NULL);
	json_t *body = NULL, *handoff = NULL;
	struct narwhal_engine_metrics m;
	uint64_t n;

	if (h == NULL)
		return;
	g_assert_cmpint(build(h, LEG_TOKENIZE, C, "{\"model\": \"m\", \"prompt\": \"x\"}", NULL,
	                      &body), ==, 0);
	json_decref(body);
	g_assert_cmpint(build(h, LEG_PREFILL, C, "{\"model\": \"m\", \"prompt\": \"x\"}", NULL,
	                      &body), ==, 0);
	json_decref(body);
	g_assert_cmpint(build(h, LEG_DECODE, CHAT, "{\"model\": \"m\", \"messages\": []}",
	                      HANDOFF_NEW, &body), ==, 0);
	json_decref(body);
	g_assert_cmpint(prefill_answer(h, "{\"kv_transfer_params\": {}}", &handoff), ==, 0);
	json_decref(handoff);
	body = nw_harness_json("{\"count\": 3}");
	g_assert_cmpint(nw_harness_dialect(h)->parse_tokenize(nw_harness_ctx(h), body, &n), ==, 0);
	json_decref(body);
	sse(h, "{\"choices\": [{\"text\": \"x\"}]}");
	sse(h, "[DONE]");
	classify(h, 503, "{\"error\": {\"code\": 503}}");
	g_assert_cmpint(metrics(h, SCRAPE_HEAD, &m), ==, 0);
	g_assert_cmpuint(narwhal_mock_host_clock_reads(h->host), ==, 0);
	g_assert_cmpuint(narwhal_mock_host_fleet_reads(h->host), ==, 0);
	for (guint i = 0; i < NARWHAL_MOCK_N_ESTIMATORS; i++)
		g_assert_cmpuint(narwhal_mock_host_estimate_calls(h->host, i), ==, 0);
	g_assert_cmpuint(narwhal_mock_host_n_logs(h->host), ==, 0);
	nw_harness_free(h);
}

/* Instances share nothing. */
static void
test_two_instances(void)
{
	struct nw_harness *a = vllm_with(NULL);
	struct nw_harness *b = vllm_with("{}");

	if (a == NULL || b == NULL) {
		nw_harness_free(a);
		nw_harness_free(b);
		return;
	}
	g_assert_true(nw_harness_ctx(a) != nw_harness_ctx(b));
	expect_sse(a, "[DONE]", NARWHAL_SSE_DONE, 0, -1, -1);
	nw_harness_free(a);
	expect_sse(b, "{\"choices\": [{\"text\": \"x\"}]}", NARWHAL_SSE_TOKENS, 1, -1, -1);
	nw_harness_free(b);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);

	g_test_add_func("/dialect/vllm/descriptor", test_descriptor);
	g_test_add_func("/dialect/vllm/ref-1.4/capabilities", test_capabilities);
	g_test_add_func("/dialect/vllm/config/empty", test_empty_configs);
	g_test_add_func("/dialect/vllm/config/errors", test_config_errors);

	g_test_add_func("/dialect/vllm/ref-3/tokenize/completions", test_tokenize_completions);
	g_test_add_func("/dialect/vllm/ref-3/tokenize/not-needed", test_tokenize_not_needed);
	g_test_add_func("/dialect/vllm/ref-3/tokenize/chat", test_tokenize_chat);
	g_test_add_func("/dialect/vllm/ref-3/tokenize/parse", test_parse_tokenize);

	g_test_add_func("/dialect/vllm/ref-1.2/prefill/completions", test_prefill_completions);
	g_test_add_func("/dialect/vllm/ref-1.2/prefill/chat", test_prefill_chat);
	g_test_add_func("/dialect/vllm/ref-1.2/decode/verbatim-handoff",
	                test_decode_verbatim_handoff);
	g_test_add_func("/dialect/vllm/ref-1.2/prefill/params-shared", test_prefill_params_shared);
	g_test_add_func("/dialect/vllm/ref-1.2/decode/handoff-copied", test_decode_handoff_copied);
	g_test_add_func("/dialect/vllm/ref-1.2/decode/null-handoff", test_decode_null_handoff);
	g_test_add_func("/dialect/vllm/ref-1.4/aggregate", test_aggregate);
	g_test_add_func("/dialect/vllm/ref-5.1/health", test_health);
	g_test_add_func("/dialect/vllm/abi-2/router-keys", test_router_keys);
	g_test_add_func("/dialect/vllm/abi-2/models", test_models);
	g_test_add_func("/dialect/vllm/abi-2/sniff-sse", test_sniff);
	g_test_add_func("/dialect/vllm/abi-2/whole-body-only", test_whole_body_only);
	g_test_add_func("/dialect/vllm/client-kv-params-stripped", test_client_kv_params_stripped);
	g_test_add_func("/dialect/vllm/build-bad-arguments", test_build_bad_arguments);
	g_test_add_func("/dialect/vllm/ref-1.2/parse-prefill", test_parse_prefill);

	g_test_add_func("/dialect/vllm/ref-4.2/sse/completions", test_sse_completions);
	g_test_add_func("/dialect/vllm/ref-4.2/sse/chat", test_sse_chat);
	g_test_add_func("/dialect/vllm/ref-4.3/sse/usage", test_sse_usage);
	g_test_add_func("/dialect/vllm/spec-4.3/sse/in-band-errors", test_sse_errors);
	g_test_add_func("/dialect/vllm/ref-4.2/sse/done", test_sse_done);
	g_test_add_func("/dialect/vllm/ref-4.2/sse/invalid", test_sse_invalid);

	g_test_add_func("/dialect/vllm/spec-4.2/retryable-statuses", test_retryable_statuses);
	g_test_add_func("/dialect/vllm/spec-4.2/permanent-statuses", test_permanent_statuses);
	g_test_add_func("/dialect/vllm/ref-4.4/error-body-without-error-status",
	                test_error_body_without_error_status);
	g_test_add_func("/dialect/vllm/ref-4.5/context-length", test_context_length);
	g_test_add_func("/dialect/vllm/abi-2.1/handoff-load-failure", test_handoff_load_failure);

	g_test_add_func("/dialect/vllm/ref-5.1/metrics/scrape", test_metrics_scrape);
	g_test_add_func("/dialect/vllm/ref-5.1/metrics/series", test_metrics_series);
	g_test_add_func("/dialect/vllm/ref-5.1/metrics/old-kv-name", test_metrics_old_kv_name);
	g_test_add_func("/dialect/vllm/ref-5.1/metrics/format", test_metrics_format);
	g_test_add_func("/dialect/vllm/ref-5.1/metrics/malformed", test_metrics_malformed);

	g_test_add_func("/dialect/vllm/no-host-calls", test_no_host_calls);
	g_test_add_func("/dialect/vllm/two-instances", test_two_instances);
	return g_test_run();
}
