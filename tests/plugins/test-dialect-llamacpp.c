/*
 * The "llamacpp" dialect in isolation: the built .so, loaded by the real
 * loader, driven against the mock host. Engine calls are checked as exact
 * JSON; the answers, SSE payloads, error bodies and metrics pages are the
 * shapes the engine-wire-formats reference records for llama.cpp's server
 * (sections 3, 4.4, 4.5, 5.3). Paths name the spec section ("spec-4.2"),
 * the reference section ("ref-5.3") or the issue item a test holds the
 * plugin to.
 */
#include "build-config.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "plugins/harness.h"

/* ------------------------------------------------------------- helpers --- */

static struct nw_harness *
llamacpp_with(const char *config_json)
{
	struct nw_harness *h = nw_harness_new(NARWHAL_KIND_DIALECT, "llamacpp");
	g_autoptr(GError) error = NULL;

	if (h == NULL)
		return NULL;
	g_assert_true(nw_harness_create(h, config_json, &error));
	g_assert_no_error(error);
	return h;
}

static const struct narwhal_engine_ref test_engine = {
	.struct_size = sizeof test_engine, .index = 0, .id = "e0", .url = "http://127.0.0.1:1",
};

#define TGT(route_, body_)                                                          \
	(&(struct narwhal_dialect_target){ .struct_size = sizeof(struct narwhal_dialect_target), \
	                                   .request = 1, .request_id = "t", .route = (route_), \
	                                   .client_body = (body_), .engine = &test_engine })

#define C NARWHAL_ROUTE_COMPLETIONS
#define CHAT NARWHAL_ROUTE_CHAT_COMPLETIONS

/* A call poisoned so that a field the plugin forgets shows up. */
static struct narwhal_http_call
poisoned_call(void)
{
	return (struct narwhal_http_call){ .struct_size = sizeof(struct narwhal_http_call),
	                                   .flags = 0x80000000u, .method = "POISON",
	                                   .path = "/poison", .body = NULL };
}

/* build_tokenize on client JSON text: the plugin's code; on 0 the call must
 * be POST /tokenize with exactly expected_text as its body. The client body
 * is borrowed and must come back untouched. */
static void
expect_tokenize(struct nw_harness *h, narwhal_route route, const char *client_text,
                int expected_rc, const char *expected_text)
{
	json_t *client = nw_harness_json(client_text);
	json_t *pristine = json_deep_copy(client);
	struct narwhal_http_call call = poisoned_call();
	int rc = nw_harness_dialect(h)->build_tokenize(nw_harness_ctx(h), TGT(route, client), &call);

	g_assert_true(json_equal(client, pristine));
	if (rc != expected_rc)
		g_error("build_tokenize: %d, expected %d, for %s", rc, expected_rc, client_text);
	if (rc == 0) {
		json_t *expected = nw_harness_json(expected_text);

		g_assert_cmpstr(call.method, ==, "POST");
		g_assert_cmpstr(call.path, ==, "/tokenize");
		g_assert_cmpuint(call.flags, ==, 0);
		if (!json_equal(call.body, expected)) {
			g_autofree char *got = json_dumps(call.body, JSON_SORT_KEYS);

			g_error("tokenize body %s, expected %s", got, expected_text);
		}
		json_decref(expected);
		json_decref(call.body);
	}
	json_decref(client);
	json_decref(pristine);
}

/* ---------------------------------------------------- descriptor, config --- */

/* Issue 14: aggregate-only, so the handoff trio is absent and every other
 * slot a monitor and the request path use is there. */
static void
test_descriptor(void)
{
	struct nw_harness *h = llamacpp_with(NULL);

	if (h == NULL)
		return;
	g_assert_cmpstr(h->plugin->desc->name, ==, "llamacpp");
	g_assert_cmpuint(h->plugin->desc->abi_major, ==, NARWHAL_ABI_MAJOR);
	g_assert_cmpuint(h->plugin->desc->abi_minor, ==, NARWHAL_ABI_MINOR);
	g_assert_null(nw_harness_dialect(h)->build_prefill);
	g_assert_null(nw_harness_dialect(h)->build_decode);
	g_assert_null(nw_harness_dialect(h)->parse_prefill);
	g_assert_null(nw_harness_dialect(h)->router_keys);
	g_assert_null(nw_harness_dialect(h)->whole_body_only);
	g_assert_nonnull(nw_harness_dialect(h)->build_tokenize);
	g_assert_nonnull(nw_harness_dialect(h)->parse_tokenize);
	g_assert_nonnull(nw_harness_dialect(h)->build_aggregate);
	g_assert_nonnull(nw_harness_dialect(h)->build_health);
	g_assert_nonnull(nw_harness_dialect(h)->parse_sse);
	g_assert_nonnull(nw_harness_dialect(h)->parse_sse_json);
	g_assert_nonnull(nw_harness_dialect(h)->sniff_sse);
	g_assert_nonnull(nw_harness_dialect(h)->parse_error);
	g_assert_nonnull(nw_harness_dialect(h)->build_models);
	g_assert_nonnull(nw_harness_dialect(h)->parse_models);
	g_assert_nonnull(nw_harness_dialect(h)->build_metrics);
	g_assert_nonnull(nw_harness_dialect(h)->parse_metrics);
	nw_harness_free(h);
}

/* Issue 14: llama.cpp has no remote KV handoff, so its capabilities offer
 * none and the engine is aggregate-only (plugin-abi.h). */
static void
test_capabilities(void)
{
	struct nw_harness *h = llamacpp_with("{}");

	if (h == NULL)
		return;
	g_assert_cmpuint(nw_harness_dialect(h)->capabilities(nw_harness_ctx(h), &test_engine), ==, 0);
	nw_harness_free(h);
}

static void
test_empty_configs(void)
{
	const char *configs[] = { NULL, "null", "{}" };

	for (guint i = 0; i < G_N_ELEMENTS(configs); i++) {
		struct nw_harness *h = llamacpp_with(configs[i]);

		if (h == NULL)
			return;
		g_assert_cmpuint(narwhal_mock_host_n_logs(h->host), ==, 0);
		nw_harness_free(h);
	}
}

static void
expect_config_error(const char *config_json, const char *reason)
{
	nw_harness_expect_config_error(NARWHAL_KIND_DIALECT, "llamacpp", config_json, reason);
}

/* Bad configuration is refused with a message naming the problem. */
static void
test_config_errors(void)
{
	/* RULES: "json.path: problem: what is valid", on one line. */
	expect_config_error("{\"n_ctx\": 4096}",
	                    "n_ctx: unknown key: the llamacpp dialect takes no options");
	expect_config_error("{\"a\": null}", "a: unknown key");
	expect_config_error("{\"a\\nb\\\"\": 1}", "a\\u000ab\\\": unknown key");
	expect_config_error("[]", "config must be an empty object");
	expect_config_error("\"llamacpp\"", "config must be an empty object");
	expect_config_error("7", "config must be an empty object");
}

/* ------------------------------------------------------------ tokenise --- */

/* Reference 3: POST /tokenize {"content"}, with add_special on, since the
 * completion routes add BOS and /tokenize by default does not. */
static void
test_tokenize_completions(void)
{
	struct nw_harness *h = llamacpp_with(NULL);

	if (h == NULL)
		return;
	expect_tokenize(h, C, "{\"model\": \"m\", \"prompt\": \"Hello there\", \"max_tokens\": 8,"
	                " \"stream\": true, \"temperature\": 0.2}", 0,
	                "{\"model\": \"m\", \"content\": \"Hello there\", \"add_special\": true,"
	                " \"parse_special\": true}");
	/* A batch of one is one prompt; an empty prompt is still a prompt;
	 * model is optional. */
	expect_tokenize(h, C, "{\"prompt\": [\"only\"]}", 0,
	                "{\"content\": \"only\", \"add_special\": true, \"parse_special\": true}");
	expect_tokenize(h, C, "{\"model\": \"m\", \"prompt\": \"\"}", 0,
	                "{\"model\": \"m\", \"content\": \"\", \"add_special\": true,"
	                " \"parse_special\": true}");
	/* A model that is not a name is not passed on. */
	expect_tokenize(h, C, "{\"model\": 3, \"prompt\": \"x\"}", 0,
	                "{\"content\": \"x\", \"add_special\": true, \"parse_special\": true}");
	nw_harness_free(h);
}

/* Prompts sized without a call, or by characters. */
static void
test_tokenize_not_needed(void)
{
	struct nw_harness *h = llamacpp_with(NULL);

	if (h == NULL)
		return;
	/* Token IDs: the count is the list's length. */
	expect_tokenize(h, C, "{\"prompt\": [1, 2, 3]}", -EALREADY, NULL);
	/* A batch has no single count. */
	expect_tokenize(h, C, "{\"prompt\": [\"a\", \"b\"]}", -ENOTSUP, NULL);
	expect_tokenize(h, C, "{\"prompt\": [[1, 2], [3]]}", -ENOTSUP, NULL);
	expect_tokenize(h, C, "{\"prompt\": []}", -ENOTSUP, NULL);
	/* llama.cpp's /tokenize has no chat form: chat is sized by characters. */
	expect_tokenize(h, CHAT, "{\"model\": \"m\", \"messages\": [{\"role\": \"user\","
	                " \"content\": \"hi\"}]}", -ENOTSUP, NULL);
	/* Not a request of its route at all. */
	expect_tokenize(h, C, "{\"model\": \"m\"}", -EINVAL, NULL);
	expect_tokenize(h, CHAT, "{\"model\": \"m\"}", -EINVAL, NULL);
	expect_tokenize(h, CHAT, "{\"messages\": \"hi\"}", -EINVAL, NULL);
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

/* Reference 3: {"tokens": [...]}, plain IDs or {"id", "piece"} objects
 * (a piece may be a byte list). */
static void
test_parse_tokenize(void)
{
	struct nw_harness *h = llamacpp_with(NULL);

	if (h == NULL)
		return;
	expect_count(h, "{\"tokens\": [1, 15043, 727]}", 0, 3);
	expect_count(h, "{\"tokens\": []}", 0, 0);
	expect_count(h, "{\"tokens\": [{\"id\": 15043, \"piece\": \"Hello\"},"
	             " {\"id\": 243, \"piece\": [226, 130]}]}", 0, 2);
	expect_count(h, "{\"tokens\": [1, \"2\"]}", -EPROTO, 0);
	expect_count(h, "{\"tokens\": [{\"piece\": \"x\"}]}", -EPROTO, 0);
	expect_count(h, "{\"tokens\": 3}", -EPROTO, 0);
	expect_count(h, "{\"count\": 3}", -EPROTO, 0);
	expect_count(h, "[1, 2]", -EPROTO, 0);
	g_assert_cmpint(nw_harness_dialect(h)->parse_tokenize(nw_harness_ctx(h), NULL, NULL), ==, -EINVAL);
	nw_harness_free(h);
}

/* ----------------------------------------------------- other requests --- */

/* The whole request goes to the route the client used, as the client sent
 * it: llama.cpp serves the OpenAI shape. */
static void
test_aggregate(void)
{
	struct nw_harness *h = llamacpp_with(NULL);
	json_t *client = nw_harness_json("{\"model\": \"m\", \"prompt\": \"x\", \"stream\": true}");
	struct narwhal_http_call call = poisoned_call();

	if (h == NULL) {
		json_decref(client);
		return;
	}
	g_assert_cmpint(nw_harness_dialect(h)->build_aggregate(nw_harness_ctx(h), TGT(C, client), &call), ==, 0);
	g_assert_cmpstr(call.method, ==, "POST");
	g_assert_cmpstr(call.path, ==, "/v1/completions");
	g_assert_cmpuint(call.flags, ==, NARWHAL_CALL_CLIENT_BODY);
	g_assert_null(call.body);
	call = poisoned_call();
	g_assert_cmpint(nw_harness_dialect(h)->build_aggregate(nw_harness_ctx(h), TGT(CHAT, client), &call), ==, 0);
	g_assert_cmpstr(call.path, ==, "/v1/chat/completions");
	g_assert_cmpuint(call.flags, ==, NARWHAL_CALL_CLIENT_BODY);
	/* Bad arguments. */
	g_assert_cmpint(nw_harness_dialect(h)->build_aggregate(nw_harness_ctx(h), TGT(7, client), &call), ==,
	                -EINVAL);
	g_assert_cmpint(nw_harness_dialect(h)->build_aggregate(nw_harness_ctx(h), TGT(C, NULL), &call), ==,
	                -EINVAL);
	g_assert_cmpint(nw_harness_dialect(h)->build_aggregate(nw_harness_ctx(h), NULL, &call), ==, -EINVAL);
	g_assert_cmpint(nw_harness_dialect(h)->build_aggregate(nw_harness_ctx(h), TGT(C, client), NULL), ==,
	                -EINVAL);
	json_decref(client);
	nw_harness_free(h);
}

/* A bodiless GET to path from one of the engine builders. */
static void
expect_get(struct nw_harness *h,
           int (*builder)(void *, const struct narwhal_engine_ref *, struct narwhal_http_call *),
           const char *path)
{
	struct narwhal_http_call call = poisoned_call();

	g_assert_cmpint(builder(nw_harness_ctx(h), &test_engine, &call), ==, 0);
	g_assert_cmpstr(call.method, ==, "GET");
	g_assert_cmpstr(call.path, ==, path);
	g_assert_cmpuint(call.flags, ==, 0);
	g_assert_null(call.body);
	g_assert_cmpint(builder(nw_harness_ctx(h), &test_engine, NULL), ==, -EINVAL);
}

/* Without --alias, llama-server's model id is the model file's path, which
 * Narwhal would serve to every client as the model's name (GET
 * /v1/models): the name is the file's own, without its directory (the
 * engine takes any name in a request). */
static void
test_models_path(void)
{
	static const struct {
		const char *id;
		const char *name;
	} cases[] = {
		{ "/models/llama-3-8b.Q4_K_M.gguf", "llama-3-8b.Q4_K_M.gguf" },
		{ "../models/q.gguf", "q.gguf" },
		{ "C:\\\\models\\\\q.gguf", "q.gguf" },
		{ "models/qwen/", "qwen" },
		{ "qwen2.5-7b", "qwen2.5-7b" },
	};
	struct nw_harness *h = llamacpp_with(NULL);

	if (h == NULL)
		return;
	for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
		struct narwhal_model_info info = { .struct_size = sizeof info, .max_model_len = -1 };
		g_autofree char *text = g_strdup_printf("{\"data\": [{\"id\": \"%s\"}]}", cases[i].id);
		json_t *doc = nw_harness_json(text);

		g_assert_cmpint(nw_harness_dialect(h)->parse_models(nw_harness_ctx(h), doc, &info), ==,
		                0);
		g_assert_cmpstr(info.name, ==, cases[i].name);
		json_decref(doc);
	}
	for (const char *const *bad = (const char *const[]){ "/", "//", "\\\\", NULL }; *bad;
	     bad++) {
		struct narwhal_model_info info = { .struct_size = sizeof info, .max_model_len = -1 };
		g_autofree char *text = g_strdup_printf("{\"data\": [{\"id\": \"%s\"}]}", *bad);
		json_t *doc = nw_harness_json(text);

		g_assert_cmpint(nw_harness_dialect(h)->parse_models(nw_harness_ctx(h), doc, &info), ==,
		                -EPROTO);
		json_decref(doc);
	}
	nw_harness_free(h);
}

/* Reference 5.3: GET /health (200 {"status":"ok"}, 503 while loading). */
static void
test_health(void)
{
	struct nw_harness *h = llamacpp_with(NULL);

	if (h == NULL)
		return;
	expect_get(h, nw_harness_dialect(h)->build_health, "/health");
	nw_harness_free(h);
}

/* GET /v1/models: the served model's name. n_ctx_train is the training
 * context, not the server's window, so no maximum length is claimed. */
static void
test_models(void)
{
	struct nw_harness *h = llamacpp_with(NULL);
	struct narwhal_model_info info;
	json_t *doc;

	if (h == NULL)
		return;
	expect_get(h, nw_harness_dialect(h)->build_models, "/v1/models");
	info = (struct narwhal_model_info){ .struct_size = sizeof info, .max_model_len = -1 };
	doc = nw_harness_json("{\"object\": \"list\", \"data\": [{\"id\": \"qwen2.5-7b\", \"object\": \"model\","
	            " \"created\": 1751234567, \"owned_by\": \"llamacpp\", \"meta\": {\"vocab_type\": 2,"
	            " \"n_vocab\": 152064, \"n_ctx_train\": 32768, \"n_embd\": 3584,"
	            " \"n_params\": 7615616512, \"size\": 4677120000}}]}");
	g_assert_cmpint(nw_harness_dialect(h)->parse_models(nw_harness_ctx(h), doc, &info), ==, 0);
	g_assert_cmpstr(info.name, ==, "qwen2.5-7b");
	g_assert_cmpint(info.max_model_len, ==, -1);
	json_decref(doc);
	doc = nw_harness_json("{\"data\": []}");
	g_assert_cmpint(nw_harness_dialect(h)->parse_models(nw_harness_ctx(h), doc, &info), ==, -EPROTO);
	json_decref(doc);
	doc = nw_harness_json("{\"data\": [{\"id\": \"\"}]}");
	g_assert_cmpint(nw_harness_dialect(h)->parse_models(nw_harness_ctx(h), doc, &info), ==, -EPROTO);
	json_decref(doc);
	nw_harness_free(h);
}

/* ----------------------------------------------------------------- SSE --- */

static struct narwhal_sse_event
sse(struct nw_harness *h, const char *data)
{
	/* Poisoned, so a field the plugin forgets shows up. */
	struct narwhal_sse_event ev = {
		.struct_size = sizeof ev,
		.kind = (narwhal_sse_kind)99,
		.tokens = 777,
		.prompt_tokens = -777,
		.completion_tokens = -777,
		.error_class = (narwhal_error_class)99,
	};
	size_t len = strlen(data);
	g_autofree char *copy = g_memdup2(data, len > 0 ? len : 1);

	g_assert_cmpint(nw_harness_dialect(h)->parse_sse(nw_harness_ctx(h), copy, len, &ev), ==, 0);
	return ev;
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

/* Reference 4.2 and 4.3 as llama.cpp's server streams them: chat deltas
 * (a role-only first chunk), completion text, a last chunk with the finish
 * reason, usage and timings, a usage-only chunk, and the terminator. */
static void
test_sse_stream(void)
{
	struct nw_harness *h = llamacpp_with(NULL);

	if (h == NULL)
		return;
	expect_sse(h, "{\"choices\":[{\"finish_reason\":null,\"index\":0,\"delta\":{\"role\":"
	           "\"assistant\",\"content\":null}}],\"created\":1751234567,\"id\":"
	           "\"chatcmpl-abc\",\"model\":\"m\",\"system_fingerprint\":\"b6000-abc\","
	           "\"object\":\"chat.completion.chunk\"}", NARWHAL_SSE_OTHER, 0, -1, -1);
	expect_sse(h, "{\"choices\":[{\"finish_reason\":null,\"index\":0,\"delta\":{\"content\":"
	           "\"Hello\"}}],\"object\":\"chat.completion.chunk\"}", NARWHAL_SSE_TOKENS, 1, -1,
	           -1);
	expect_sse(h, "{\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"hmm\"}}]}",
	           NARWHAL_SSE_TOKENS, 1, -1, -1);
	expect_sse(h, "{\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,"
	           "\"function\":{\"arguments\":\"{\"}}]}}]}", NARWHAL_SSE_TOKENS, 1, -1, -1);
	expect_sse(h, "{\"choices\":[{\"text\":\" world\",\"index\":0,\"logprobs\":null,"
	           "\"finish_reason\":null}],\"object\":\"text_completion\"}", NARWHAL_SSE_TOKENS,
	           1, -1, -1);
	expect_sse(h, "{\"choices\":[{\"finish_reason\":\"stop\",\"index\":0,\"delta\":{}}],"
	           "\"object\":\"chat.completion.chunk\",\"usage\":{\"completion_tokens\":12,"
	           "\"prompt_tokens\":9,\"total_tokens\":21},\"timings\":{\"prompt_n\":9,"
	           "\"prompt_ms\":20.1,\"predicted_n\":12,\"predicted_ms\":180.5}}",
	           NARWHAL_SSE_USAGE, 0, 9, 12);
	expect_sse(h, "{\"choices\":[],\"object\":\"chat.completion.chunk\",\"usage\":"
	           "{\"completion_tokens\":3,\"prompt_tokens\":4,\"total_tokens\":7,"
	           "\"prompt_tokens_details\":{\"cached_tokens\":2}}}", NARWHAL_SSE_USAGE, 0, 4, 3);
	expect_sse(h, "{\"choices\":[{\"finish_reason\":\"length\",\"index\":0}]}",
	           NARWHAL_SSE_OTHER, 0, -1, -1);
	expect_sse(h, "[DONE]", NARWHAL_SSE_DONE, 0, -1, -1);
	expect_sse(h, " [DONE]\r\n", NARWHAL_SSE_DONE, 0, -1, -1);
	nw_harness_free(h);
}

/* Usage counts beyond 2^53 are no counts an engine reports: they read as
 * absent (the host's accounting keeps counts exact as doubles). */
static void
test_sse_usage_bounds(void)
{
	struct nw_harness *h = llamacpp_with(NULL);

	if (h == NULL)
		return;
	expect_sse(h, "{\"choices\":[],\"usage\":{\"prompt_tokens\":9007199254740992,"
	           "\"completion_tokens\":9223372036854775807}}", NARWHAL_SSE_USAGE, 0,
	           INT64_C(9007199254740992), -1);
	expect_sse(h, "{\"choices\":[],\"usage\":{\"prompt_tokens\":9007199254740993,"
	           "\"completion_tokens\":1e3}}", NARWHAL_SSE_USAGE, 0, -1, -1);
	nw_harness_free(h);
}

/* Spec 4.3: an error after the stream started arrives in-band in
 * llama.cpp's nested shape, classed by its code or type. */
static void
test_sse_errors(void)
{
	static const struct {
		const char *data;
		narwhal_error_class cls;
	} cases[] = {
		{ "{\"error\":{\"code\":500,\"message\":\"llama_decode failed\",\"type\":"
		  "\"server_error\"}}", NARWHAL_ERROR_RETRYABLE },
		{ "{\"error\":{\"code\":503,\"message\":\"Loading model\",\"type\":"
		  "\"unavailable_error\"}}", NARWHAL_ERROR_RETRYABLE },
		{ "{\"error\":{\"message\":\"x\",\"type\":\"not_supported_error\"}}",
		  NARWHAL_ERROR_PERMANENT },
		{ "{\"error\":{\"code\":400,\"message\":\"request (9412 tokens) exceeds the available"
		  " context size (8192 tokens), try increasing it\",\"type\":"
		  "\"exceed_context_size_error\",\"n_prompt_tokens\":9412,\"n_ctx\":8192}}",
		  NARWHAL_ERROR_CONTEXT_TOO_LONG },
		{ "{\"error\":\"boom\"}", NARWHAL_ERROR_PERMANENT },
	};
	struct nw_harness *h = llamacpp_with(NULL);

	if (h == NULL)
		return;
	for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
		struct narwhal_sse_event ev = sse(h, cases[i].data);

		if (ev.kind != NARWHAL_SSE_ERROR || ev.error_class != cases[i].cls)
			g_error("kind %d class %d for %s", ev.kind, ev.error_class, cases[i].data);
		g_assert_cmpuint(ev.tokens, ==, 0);
	}
	nw_harness_free(h);
}

static void
test_sse_invalid(void)
{
	static const char *const bad[] = { "", "not json", "[1]", "\"x\"", "{\"choices\": " };
	struct nw_harness *h = llamacpp_with(NULL);
	struct narwhal_sse_event ev = { .struct_size = sizeof ev };

	if (h == NULL)
		return;
	for (guint i = 0; i < G_N_ELEMENTS(bad); i++)
		g_assert_cmpint(nw_harness_dialect(h)->parse_sse(nw_harness_ctx(h), bad[i], strlen(bad[i]), &ev), ==,
		                -EPROTO);
	g_assert_cmpint(nw_harness_dialect(h)->parse_sse(nw_harness_ctx(h), NULL, 0, &ev), ==, -EINVAL);
	g_assert_cmpint(nw_harness_dialect(h)->parse_sse(nw_harness_ctx(h), "[DONE]", 6, NULL), ==, -EINVAL);
	nw_harness_free(h);
}

/* sniff_sse says yes to every terminator and error, and may say no to a
 * token event, even one whose text mentions an error. */
static void
test_sniff(void)
{
	static const char *const must[] = {
		"[DONE]", "{\"error\":{\"code\":500,\"message\":\"x\",\"type\":\"server_error\"}}",
		" [DONE]\r\n", "\"error\"", "{\"a\":1,\"error\"", "{\"error\":\"x\"}",
		"{\"choices\":[],\"\\u0065rror\":{}}",
	};
	static const char *const may_skip[] = {
		"{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}",
		"{\"choices\":[{\"index\":0,\"text\":\"an \\\"error\\\" here\"}]}",
		"{\"object\":\"chat.completion.chunk\",\"choices\":[{\"delta\":{\"content\":\"errors\"}}]}",
		"\"erro\"", "error\"", "[DONE]x",
	};
	struct nw_harness *h = llamacpp_with(NULL);

	if (h == NULL)
		return;
	for (size_t i = 0; i < G_N_ELEMENTS(must); i++)
		g_assert_true(nw_harness_dialect(h)->sniff_sse(nw_harness_ctx(h), must[i], strlen(must[i])));
	for (size_t i = 0; i < G_N_ELEMENTS(may_skip); i++)
		g_assert_false(nw_harness_dialect(h)->sniff_sse(nw_harness_ctx(h), may_skip[i], strlen(may_skip[i])));
	nw_harness_free(h);
}

/* ------------------------------------------------------------- errors --- */

/* parse_error from the host's presets (spec 4.2 by status): the class, the
 * return code, and the message the dialect read. */
static narwhal_error_class
classify_rc(struct nw_harness *h, int status, const char *body, int *rc, char *message,
            size_t size)
{
	struct narwhal_engine_error err = {
		.struct_size = sizeof err,
		.error_class = status >= 500 || status == 408 || status == 429 || status <= 0
		                       ? NARWHAL_ERROR_RETRYABLE : NARWHAL_ERROR_PERMANENT,
	};
	size_t len = body ? strlen(body) : 0;
	g_autofree char *copy = body ? g_memdup2(body, len > 0 ? len : 1) : NULL;

	memset(err.param, 'x', sizeof err.param);
	*rc = nw_harness_dialect(h)->parse_error(nw_harness_ctx(h), status, copy, len, &err);
	if (*rc == 0)
		g_assert_cmpstr(err.param, ==, "");
	if (message != NULL)
		g_strlcpy(message, err.message, size);
	return err.error_class;
}

static void
expect_class(struct nw_harness *h, int status, const char *body, narwhal_error_class cls)
{
	int rc;
	narwhal_error_class got = classify_rc(h, status, body, &rc, NULL, 0);

	if (got != cls)
		g_error("status %d body %s: class %d, expected %d", status, body ? body : "(null)",
		        got, cls);
}

/* llama.cpp's error body for a status: {"error": {code, message, type}}. */
static char *
llama_error(int status, const char *type)
{
	return g_strdup_printf("{\"error\":{\"code\":%d,\"message\":\"failed\",\"type\":\"%s\"}}",
	                       status, type);
}

/* Spec 4.2 through reference 4.4's shapes: every type llama.cpp sends,
 * with its status; the retryable statuses stay retryable whatever the
 * body; the status wins over the body's code. */
static void
test_error_mapping(void)
{
	static const struct {
		int status;
		const char *type;
		narwhal_error_class cls;
	} cases[] = {
		{ 400, "invalid_request_error", NARWHAL_ERROR_CLIENT },
		{ 401, "authentication_error", NARWHAL_ERROR_PERMANENT },
		{ 403, "permission_error", NARWHAL_ERROR_PERMANENT },
		{ 404, "not_found_error", NARWHAL_ERROR_PERMANENT },
		{ 500, "server_error", NARWHAL_ERROR_RETRYABLE },
		{ 501, "not_supported_error", NARWHAL_ERROR_PERMANENT },
		{ 503, "unavailable_error", NARWHAL_ERROR_RETRYABLE },
	};
	static const int retryable[] = { 408, 429, 500, 502, 503, 504 };
	struct nw_harness *h = llamacpp_with(NULL);
	char message[64];
	int rc;

	if (h == NULL)
		return;
	for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
		g_autofree char *body = llama_error(cases[i].status, cases[i].type);

		/* By the HTTP status, and in-band (status 0) by the body alone. */
		expect_class(h, cases[i].status, body, cases[i].cls);
		expect_class(h, 0, body, cases[i].cls);
	}
	for (guint i = 0; i < G_N_ELEMENTS(retryable); i++) {
		expect_class(h, retryable[i], NULL, NARWHAL_ERROR_RETRYABLE);
		expect_class(h, retryable[i], "<html>Bad Gateway</html>", NARWHAL_ERROR_RETRYABLE);
	}
	/* llama.cpp's 404 for an unknown route, and its message. */
	g_assert_cmpint(classify_rc(h, 404, "{\"error\":{\"code\":404,\"message\":\"File Not Found\","
	                            "\"type\":\"not_found_error\"}}", &rc, message, sizeof message),
	                ==, NARWHAL_ERROR_PERMANENT);
	g_assert_cmpint(rc, ==, 0);
	g_assert_cmpstr(message, ==, "File Not Found");
	/* The status wins over the body's code. */
	expect_class(h, 400, "{\"error\":{\"code\":503,\"message\":\"x\",\"type\":"
	             "\"unavailable_error\"}}", NARWHAL_ERROR_CLIENT);
	expect_class(h, 503, "{\"error\":{\"code\":400,\"message\":\"x\",\"type\":"
	             "\"invalid_request_error\"}}", NARWHAL_ERROR_RETRYABLE);
	/* Nothing readable: the host's presets stand, and parse_error says so. */
	g_assert_cmpint(classify_rc(h, 502, "upstream down", &rc, NULL, 0), ==,
	                NARWHAL_ERROR_RETRYABLE);
	g_assert_cmpint(rc, ==, -EPROTO);
	g_assert_cmpint(classify_rc(h, 0, "{\"detail\": \"x\"}", &rc, NULL, 0), ==,
	                NARWHAL_ERROR_RETRYABLE);
	g_assert_cmpint(rc, ==, -EPROTO);
	g_assert_cmpint(classify_rc(h, 418, NULL, &rc, NULL, 0), ==, NARWHAL_ERROR_PERMANENT);
	nw_harness_free(h);
}

/* The message of a client error reaches the client: llama.cpp's own words,
 * without the model file's path or an address in them. */
static void
test_error_message_hidden(void)
{
	struct nw_harness *h = llamacpp_with(NULL);
	char message[NARWHAL_ENGINE_MESSAGE_MAX];
	int rc;

	if (h == NULL)
		return;
	g_assert_cmpint(classify_rc(h, 400, "{\"error\":{\"code\":400,\"message\":\"failed to"
	                            " open '/models/llama-3-8b.Q4_K_M.gguf': see"
	                            " http://10.0.0.9:8080/props (C:\\\\models\\\\x.gguf)\","
	                            "\"type\":\"invalid_request_error\"}}", &rc, message,
	                            sizeof message),
	                ==, NARWHAL_ERROR_CLIENT);
	g_assert_cmpint(rc, ==, 0);
	g_assert_cmpstr(message, ==, "failed to open '[hidden]': see [hidden] ([hidden])");
	nw_harness_free(h);
}

/* Reference 4.5: exceed_context_size_error (newer builds), and an older
 * build's invalid_request_error that says the request exceeds the context
 * size; the same words under a server error stay retryable. */
static void
test_context_too_long(void)
{
	struct nw_harness *h = llamacpp_with(NULL);
	char message[NARWHAL_ENGINE_MESSAGE_MAX];
	int rc;

	if (h == NULL)
		return;
	g_assert_cmpint(classify_rc(h, 400, "{\"error\":{\"code\":400,\"type\":"
	                            "\"exceed_context_size_error\",\"message\":\"request (9412 tokens)"
	                            " exceeds the available context size (8192 tokens), try"
	                            " increasing it\",\"n_prompt_tokens\":9412,\"n_ctx\":8192}}",
	                            &rc, message, sizeof message),
	                ==, NARWHAL_ERROR_CONTEXT_TOO_LONG);
	g_assert_cmpint(rc, ==, 0);
	g_assert_nonnull(strstr(message, "exceeds the available context size"));
	expect_class(h, 400, "{\"error\":{\"code\":400,\"message\":\"the request exceeds the"
	             " available context size, try increasing it\",\"type\":"
	             "\"invalid_request_error\"}}", NARWHAL_ERROR_CONTEXT_TOO_LONG);
	expect_class(h, 400, "{\"error\":{\"code\":400,\"message\":\"\\\"prompt\\\" must be a"
	             " string\",\"type\":\"invalid_request_error\"}}", NARWHAL_ERROR_CLIENT);
	expect_class(h, 500, "{\"error\":{\"code\":500,\"message\":\"context size exceeded while"
	             " decoding\",\"type\":\"server_error\"}}", NARWHAL_ERROR_RETRYABLE);
	nw_harness_free(h);
}

/* A message longer than the buffer is cut, at a character boundary. */
static void
test_error_message_cut(void)
{
	struct nw_harness *h = llamacpp_with(NULL);
	g_autoptr(GString) body = g_string_new("{\"error\":{\"code\":400,\"message\":\"");
	char message[NARWHAL_ENGINE_MESSAGE_MAX];
	int rc;

	if (h == NULL)
		return;
	for (guint i = 0; i < NARWHAL_ENGINE_MESSAGE_MAX; i++)
		g_string_append(body, "\xc3\xa9"); /* two bytes each */
	g_string_append(body, "\",\"type\":\"invalid_request_error\"}}");
	classify_rc(h, 400, body->str, &rc, message, sizeof message);
	g_assert_cmpint(rc, ==, 0);
	g_assert_cmpuint(strlen(message), ==, NARWHAL_ENGINE_MESSAGE_MAX - 2);
	g_assert_true(g_utf8_validate(message, -1, NULL));
	nw_harness_free(h);
}

/* ---------------------------------------------------- engine metrics --- */

static struct narwhal_engine_metrics
preset_metrics(void)
{
	return (struct narwhal_engine_metrics){ .struct_size = sizeof(struct narwhal_engine_metrics),
	                                        .running = -1, .waiting = -1,
	                                        .kv_usage = NAN, .start_time_s = NAN };
}

/* parse_metrics on text in a buffer of exactly its length. */
static int
metrics(struct nw_harness *h, const char *text, struct narwhal_engine_metrics *out)
{
	size_t len = strlen(text);
	g_autofree char *body = g_memdup2(text, len > 0 ? len : 1);

	*out = preset_metrics();
	return nw_harness_dialect(h)->parse_metrics(nw_harness_ctx(h), body, len, out);
}

/* A scrape of llama-server --metrics as reference 5.3 names its families:
 * HELP and TYPE comments, counters and gauges around the two read. */
#define SCRAPE                                                                       \
	"# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.\n"      \
	"# TYPE llamacpp:prompt_tokens_total counter\n"                                 \
	"llamacpp:prompt_tokens_total 33065\n"                                          \
	"# HELP llamacpp:prompt_seconds_total Prompt process time\n"                    \
	"# TYPE llamacpp:prompt_seconds_total counter\n"                                \
	"llamacpp:prompt_seconds_total 235.743\n"                                       \
	"# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.\n" \
	"# TYPE llamacpp:tokens_predicted_total counter\n"                              \
	"llamacpp:tokens_predicted_total 7801\n"                                        \
	"# HELP llamacpp:prompt_tokens_seconds Average prompt throughput in tokens/s.\n" \
	"# TYPE llamacpp:prompt_tokens_seconds gauge\n"                                 \
	"llamacpp:prompt_tokens_seconds 140.261\n"                                      \
	"# HELP llamacpp:predicted_tokens_seconds Average generation throughput in tokens/s.\n" \
	"# TYPE llamacpp:predicted_tokens_seconds gauge\n"                              \
	"llamacpp:predicted_tokens_seconds 45.4769\n"                                   \
	"# HELP llamacpp:requests_processing Number of requests processing.\n"          \
	"# TYPE llamacpp:requests_processing gauge\n"                                   \
	"llamacpp:requests_processing 3\n"                                              \
	"# HELP llamacpp:requests_deferred Number of requests deferred.\n"              \
	"# TYPE llamacpp:requests_deferred gauge\n"                                     \
	"llamacpp:requests_deferred 5\n"                                                \
	"# TYPE llamacpp:n_busy_slots_per_decode gauge\n"                               \
	"llamacpp:n_busy_slots_per_decode 1.5\n"                                        \
	"# TYPE llamacpp:n_decode_total counter\n"                                      \
	"llamacpp:n_decode_total 1234\n"                                                \
	"# TYPE llamacpp:n_tokens_max counter\n"                                        \
	"llamacpp:n_tokens_max 4096\n"

/* Issue 14 ("its metrics names for the monitor"): GET /metrics, running
 * from the busy slots, waiting from the deferred requests. No start time
 * or, in current builds, KV usage is exported: those stay unknown. */
static void
test_metrics_scrape(void)
{
	struct nw_harness *h = llamacpp_with(NULL);
	struct narwhal_engine_metrics m;

	if (h == NULL)
		return;
	expect_get(h, nw_harness_dialect(h)->build_metrics, "/metrics");
	g_assert_cmpint(metrics(h, SCRAPE, &m), ==, 0);
	g_assert_cmpint(m.running, ==, 3);
	g_assert_cmpint(m.waiting, ==, 5);
	g_assert_true(isnan(m.kv_usage));
	g_assert_true(isnan(m.start_time_s));
	g_assert_cmpuint(m.struct_size, ==, sizeof m);
	nw_harness_free(h);
}

/* Older builds export llamacpp:kv_cache_usage_ratio (0 to 1). */
static void
test_metrics_kv_ratio(void)
{
	struct nw_harness *h = llamacpp_with(NULL);
	struct narwhal_engine_metrics m;

	if (h == NULL)
		return;
	g_assert_cmpint(metrics(h, "# TYPE llamacpp:kv_cache_usage_ratio gauge\n"
	                        "llamacpp:kv_cache_usage_ratio 0.63\n"
	                        "llamacpp:kv_cache_tokens 1234\n"
	                        "llamacpp:requests_processing 0\n", &m), ==, 0);
	g_assert_cmpfloat(m.kv_usage, ==, 0.63);
	g_assert_cmpint(m.running, ==, 0);
	g_assert_cmpint(m.waiting, ==, -1);
	nw_harness_free(h);
}

/* A page that is not llama.cpp's, or is malformed where it matters, is
 * refused and leaves every preset: a vLLM page, an empty one, a value out
 * of range, a broken sample of a family read. */
static void
test_metrics_refused(void)
{
	static const char *const refused[] = {
		"",
		"# only comments\n",
		"vllm:num_requests_running{engine=\"0\"} 7.0\nprocess_start_time_seconds 1.7e9\n",
		"llamacpp:requests_processing -1\n",
		"llamacpp:requests_processing 1.5\n",
		"llamacpp:requests_deferred NaN\n",
		"llamacpp:kv_cache_usage_ratio 1.5\n",
		"llamacpp:requests_processing\n",
		"llamacpp:requests_processing 1 2 3\n",
		SCRAPE "llamacpp:requests_deferred{broken 2\n",
		"{not a line}\n" SCRAPE,
	};
	struct nw_harness *h = llamacpp_with(NULL);
	struct narwhal_engine_metrics m;

	if (h == NULL)
		return;
	for (guint i = 0; i < G_N_ELEMENTS(refused); i++) {
		if (metrics(h, refused[i], &m) != -EPROTO)
			g_error("parse_metrics took a page it should refuse:\n%s", refused[i]);
		g_assert_cmpint(m.running, ==, -1);
		g_assert_cmpint(m.waiting, ==, -1);
		g_assert_true(isnan(m.kv_usage));
	}
	g_assert_cmpint(nw_harness_dialect(h)->parse_metrics(nw_harness_ctx(h), NULL, 4, &m), ==, -EINVAL);
	g_assert_cmpint(nw_harness_dialect(h)->parse_metrics(nw_harness_ctx(h), "x", 1, NULL), ==, -EINVAL);
	nw_harness_free(h);
}

/* Label injection: a label value with a raw newline (the format escapes
 * it as \\n) in a metric the dialect does not read would let the lines
 * inside it pass for samples, here 900 waiting requests. Such a page is
 * broken, refused whole: a foreign sample's quoted strings must end on
 * its line (what else it holds is its own business). */
static void
test_metrics_label_injection(void)
{
	static const char *const refused[] = {
		"llamacpp:requests_processing 1\n"
		"llamacpp:n_busy_slots_per_decode{x=\"a\n"
		"llamacpp:requests_deferred 900\n"
		"b\"} 1\n",
		"llamacpp:requests_processing 1\nother{a=\"x 1\n",
	};
	static const char taken[] =
		"llamacpp:requests_processing 1\n"
		"other{a=\"\\\"}\\n\",b=\"llamacpp:requests_deferred 900\",} 1\n"
		"other_total 5 1700000000000\n";
	struct nw_harness *h = llamacpp_with(NULL);
	struct narwhal_engine_metrics m;

	if (h == NULL)
		return;
	for (guint i = 0; i < G_N_ELEMENTS(refused); i++) {
		if (metrics(h, refused[i], &m) != -EPROTO)
			g_error("parse_metrics took a page it should refuse:\n%s", refused[i]);
		g_assert_cmpint(m.waiting, ==, -1);
	}
	g_assert_cmpint(metrics(h, taken, &m), ==, 0);
	g_assert_cmpint(m.running, ==, 1);
	g_assert_cmpint(m.waiting, ==, -1);
	nw_harness_free(h);
}

/* ----------------------------------------------------------- the rules --- */

/* No clock, no fleet, no estimators, no logs: a pure wire format. */
static void
test_no_host_calls(void)
{
	struct nw_harness *h = llamacpp_with(NULL);
	struct narwhal_engine_metrics m;
	json_t *doc;
	uint64_t n;

	if (h == NULL)
		return;
	expect_tokenize(h, C, "{\"prompt\": \"x\"}", 0,
	                "{\"content\": \"x\", \"add_special\": true, \"parse_special\": true}");
	doc = nw_harness_json("{\"tokens\": [1]}");
	g_assert_cmpint(nw_harness_dialect(h)->parse_tokenize(nw_harness_ctx(h), doc, &n), ==, 0);
	json_decref(doc);
	sse(h, "{\"choices\":[{\"delta\":{\"content\":\"x\"}}]}");
	sse(h, "[DONE]");
	expect_class(h, 503, "{\"error\":{\"code\":503}}", NARWHAL_ERROR_RETRYABLE);
	g_assert_cmpint(metrics(h, SCRAPE, &m), ==, 0);
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
	struct nw_harness *a = llamacpp_with(NULL);
	struct nw_harness *b = llamacpp_with("{}");

	if (a == NULL || b == NULL) {
		nw_harness_free(a);
		nw_harness_free(b);
		return;
	}
	g_assert_true(nw_harness_ctx(a) != nw_harness_ctx(b));
	expect_sse(a, "[DONE]", NARWHAL_SSE_DONE, 0, -1, -1);
	nw_harness_free(a);
	expect_sse(b, "{\"choices\":[{\"text\":\"x\"}]}", NARWHAL_SSE_TOKENS, 1, -1, -1);
	nw_harness_free(b);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);

	g_test_add_func("/dialect/llamacpp/descriptor", test_descriptor);
	g_test_add_func("/dialect/llamacpp/issue-14/aggregate-only", test_capabilities);
	g_test_add_func("/dialect/llamacpp/config/empty", test_empty_configs);
	g_test_add_func("/dialect/llamacpp/config/errors", test_config_errors);

	g_test_add_func("/dialect/llamacpp/ref-3/tokenize/completions", test_tokenize_completions);
	g_test_add_func("/dialect/llamacpp/ref-3/tokenize/not-needed", test_tokenize_not_needed);
	g_test_add_func("/dialect/llamacpp/ref-3/tokenize/parse", test_parse_tokenize);

	g_test_add_func("/dialect/llamacpp/aggregate", test_aggregate);
	g_test_add_func("/dialect/llamacpp/ref-5.3/health", test_health);
	g_test_add_func("/dialect/llamacpp/models", test_models);
	g_test_add_func("/dialect/llamacpp/models/path", test_models_path);

	g_test_add_func("/dialect/llamacpp/ref-4.2/sse/stream", test_sse_stream);
	g_test_add_func("/dialect/llamacpp/spec-4.3/sse/in-band-errors", test_sse_errors);
	g_test_add_func("/dialect/llamacpp/ref-4.3/sse/usage-bounds", test_sse_usage_bounds);
	g_test_add_func("/dialect/llamacpp/sse/invalid", test_sse_invalid);
	g_test_add_func("/dialect/llamacpp/sse/sniff", test_sniff);

	g_test_add_func("/dialect/llamacpp/spec-4.2/error-mapping", test_error_mapping);
	g_test_add_func("/dialect/llamacpp/ref-4.5/context-too-long", test_context_too_long);
	g_test_add_func("/dialect/llamacpp/spec-4.2/error-message-hidden", test_error_message_hidden);
	g_test_add_func("/dialect/llamacpp/error-message-cut", test_error_message_cut);

	g_test_add_func("/dialect/llamacpp/ref-5.3/metrics/scrape", test_metrics_scrape);
	g_test_add_func("/dialect/llamacpp/ref-5.3/metrics/kv-ratio", test_metrics_kv_ratio);
	g_test_add_func("/dialect/llamacpp/ref-5.3/metrics/refused", test_metrics_refused);
	g_test_add_func("/dialect/llamacpp/ref-5.3/metrics/label-injection",
	                test_metrics_label_injection);

	g_test_add_func("/dialect/llamacpp/no-host-calls", test_no_host_calls);
	g_test_add_func("/dialect/llamacpp/two-instances", test_two_instances);
	return g_test_run();
}
