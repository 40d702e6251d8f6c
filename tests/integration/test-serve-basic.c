/*
 * The data plane against real narwhal-sim engines, the paths that work:
 * disaggregated and aggregate round trips, streamed and not, X-Request-Id,
 * GET /v1/models, the front end's refusals (bad input, unknown model,
 * route and method, 413, 401 with API keys). Each test names its clause.
 */
#include "build-config.h"

#include <arpa/inet.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <curl/curl.h>

#include "integration/test-serve-common.h"

static const char *const sim_fast[] = { "--engines", "2", "--time-scale", "50", NULL };

static char *
completion_body(const struct serve_env *e, const char *extra)
{
	return g_strdup_printf("{\"model\":\"%s\",\"prompt\":\"The quick brown fox jumps\","
	                       "\"max_tokens\":6%s}", e->model, extra ? extra : "");
}

static void
assert_usage(json_t *usage, json_int_t completion)
{
	g_assert_true(json_is_object(usage));
	g_assert_cmpint(json_integer_value(json_object_get(usage, "completion_tokens")), ==,
	                completion);
	g_assert_cmpint(json_integer_value(json_object_get(usage, "prompt_tokens")), >, 0);
}

static void
test_disagg_nonstream(void)
{
	struct serve_env e;
	struct sim_reply r;
	g_autofree char *body = NULL, *rid = NULL;
	const char *hdr[] = { "X-Request-Id: test-rt-1", NULL };
	json_t *doc, *stats;

	g_test_summary("/serve/spec-4.3/disagg-nonstream: prefill on one engine, decode with "
	               "the handoff on the other, usage, the request id echoed and used by the "
	               "engines");
	if (!serve_start(&e, sim_fast, "pd", NULL))
		return;
	body = completion_body(&e, NULL);
	serve_post(&e, "/v1/completions", body, hdr, 10000, &r);
	g_assert_cmpint(r.status, ==, 200);
	rid = sim_reply_header(&r, "X-Request-Id");
	g_assert_cmpstr(rid, ==, "test-rt-1");
	doc = sim_json(r.body->str);
	/* The decode engine named the answer after the id it was sent. */
	g_assert_cmpstr(json_string_value(json_object_get(doc, "id")), ==, "cmpl-test-rt-1");
	assert_usage(json_object_get(doc, "usage"), 6);
	json_decref(doc);
	sim_reply_clear(&r);
	/* Each engine did its phase: the prefill engine produced one token and
	 * served one KV pull, the decode engine generated the six. */
	stats = sim_engine_stats(&e.sim, 0);
	g_assert_cmpint(json_integer_value(json_object_get(stats, "generation_tokens_total")), ==, 1);
	g_assert_cmpint(json_integer_value(json_object_get(stats, "kv_pulls_served")), ==, 1);
	json_decref(stats);
	stats = sim_engine_stats(&e.sim, 1);
	g_assert_cmpint(json_integer_value(json_object_get(stats, "generation_tokens_total")), ==, 6);
	json_decref(stats);
	g_assert_cmpint(serve_counter(&e, "prefill_started"), ==, 1);
	g_assert_cmpint(serve_counter(&e, "decode_started"), ==, 1);
	g_assert_cmpint(serve_counter(&e, "requests_ok"), ==, 1);
	serve_clear(&e);
}

static void
test_disagg_stream(void)
{
	struct serve_env e;
	struct sim_reply r;
	g_autofree char *body = NULL, *rid = NULL, *ctype = NULL;
	GPtrArray *events;
	json_t *last;

	g_test_summary("/serve/spec-4.3/disagg-stream: tokens stream through as SSE events, "
	               "usage when asked, [DONE] at the end, a generated request id echoed");
	if (!serve_start(&e, sim_fast, "pd", NULL))
		return;
	body = g_strdup_printf("{\"model\":\"%s\",\"messages\":[{\"role\":\"user\",\"content\":"
	                       "\"Hello there\"}],\"max_tokens\":5,\"stream\":true,"
	                       "\"stream_options\":{\"include_usage\":true}}", e.model);
	serve_post(&e, "/v1/chat/completions", body, NULL, 10000, &r);
	g_assert_cmpint(r.status, ==, 200);
	ctype = sim_reply_header(&r, "Content-Type");
	g_assert_cmpstr(ctype, ==, "text/event-stream");
	rid = sim_reply_header(&r, "X-Request-Id");
	g_assert_cmpuint(strlen(rid), ==, 32);
	events = sim_sse_events(r.body->str);
	/* role event, 5 tokens, usage, [DONE] */
	g_assert_cmpuint(events->len, ==, 8);
	g_assert_cmpstr(g_ptr_array_index(events, events->len - 1), ==, "[DONE]");
	last = sim_json(g_ptr_array_index(events, events->len - 2));
	assert_usage(json_object_get(last, "usage"), 5);
	g_assert_nonnull(strstr(g_ptr_array_index(events, 1), rid));
	json_decref(last);
	g_ptr_array_free(events, TRUE);
	sim_reply_clear(&r);
	serve_clear(&e);
}

static void
test_aggregate_single(void)
{
	const char *const args[] = { "--engines", "1", "--time-scale", "50", NULL };
	struct serve_env e;
	struct sim_reply r;
	g_autofree char *body = NULL;
	json_t *doc;

	g_test_summary("/serve/spec-7.2/aggregate-single-engine: one engine with both floors "
	               "at 1 serves whole requests, streamed and not");
	if (!serve_start(&e, args, NULL, NULL))
		return;
	body = completion_body(&e, NULL);
	serve_post(&e, "/v1/completions", body, NULL, 10000, &r);
	g_assert_cmpint(r.status, ==, 200);
	doc = sim_json(r.body->str);
	assert_usage(json_object_get(doc, "usage"), 6);
	json_decref(doc);
	sim_reply_clear(&r);
	g_free(body);
	body = completion_body(&e, ",\"stream\":true");
	serve_post(&e, "/v1/completions", body, NULL, 10000, &r);
	g_assert_cmpint(r.status, ==, 200);
	g_assert_nonnull(strstr(r.body->str, "data: [DONE]\n\n"));
	sim_reply_clear(&r);
	g_assert_cmpint(serve_counter(&e, "aggregate_started"), ==, 2);
	g_assert_cmpint(serve_counter(&e, "prefill_started"), ==, 0);
	serve_clear(&e);
}

static void
test_models(void)
{
	struct serve_env e;
	struct sim_reply r;
	json_t *doc, *m;

	g_test_summary("/serve/models: GET /v1/models lists the fleet's model, learnt from the "
	               "first engine when fleet.model is null");
	if (!serve_start(&e, sim_fast, NULL, NULL))
		return;
	sim_http(e.port, "GET", "/v1/models", NULL, NULL, 5000, &r);
	g_assert_cmpint(r.status, ==, 200);
	doc = sim_json(r.body->str);
	m = json_array_get(json_object_get(doc, "data"), 0);
	g_assert_cmpstr(json_string_value(json_object_get(m, "id")), ==, e.model);
	g_assert_cmpstr(json_string_value(json_object_get(m, "owned_by")), ==, "narwhal");
	g_assert_cmpint(json_integer_value(json_object_get(m, "max_model_len")), >, 0);
	json_decref(doc);
	sim_reply_clear(&r);
	sim_http(e.port, "DELETE", "/v1/models", NULL, NULL, 5000, &r);
	g_assert_cmpint(r.status, ==, 405);
	sim_reply_clear(&r);
	serve_clear(&e);
}

struct bad_case {
	const char *path;
	const char *method;
	const char *body; /* %s: the model */
	long status;
	const char *code;
};

static void
test_front_end_errors(void)
{
	static const struct bad_case cases[] = {
		{ "/v1/completions", "POST", "", 400, "empty_body" },
		{ "/v1/completions", "POST", "{\"model\":", 400, "invalid_json" },
		{ "/v1/completions", "POST", "[1]", 400, "invalid_type" },
		{ "/v1/completions", "POST", "{\"prompt\":\"x\"}", 400, "missing_field" },
		{ "/v1/completions", "POST", "{\"model\":\"%s\"}", 400, "missing_field" },
		{ "/v1/chat/completions", "POST", "{\"model\":\"%s\",\"messages\":[]}", 400,
		  "invalid_value" },
		{ "/v1/completions", "POST", "{\"model\":\"%s\",\"prompt\":\"x\",\"max_tokens\":-3}",
		  400, "invalid_value" },
		{ "/v1/completions", "POST", "{\"model\":\"%s\",\"prompt\":\"x\",\"stream\":\"yes\"}",
		  400, "invalid_type" },
		{ "/v1/completions", "POST", "{\"model\":\"other-model\",\"prompt\":\"x\"}", 404,
		  "model_not_found" },
		{ "/v1/completions", "GET", NULL, 405, "method_not_allowed" },
		{ "/v1/embeddings", "POST", "{}", 404, "not_found" },
		{ "/nowhere", "GET", NULL, 404, "not_found" },
	};
	struct serve_env e;
	json_int_t posts = 0, chats = 0;

	g_test_summary("/serve/front-end/bad-inputs: representative bad requests get the "
	               "OpenAI envelope with the right status and code, before any engine work; "
	               "only POSTs count as completion and chat requests");
	if (!serve_start(&e, sim_fast, NULL, NULL))
		return;
	for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
		struct sim_reply r;
		g_autofree char *body = NULL;
		g_autofree char *code = NULL;

		if (cases[i].body != NULL) {
			g_auto(GStrv) parts = g_strsplit(cases[i].body, "%s", -1);

			body = g_strjoinv(e.model, parts);
		}
		if (strcmp(cases[i].method, "POST") == 0) {
			posts += strcmp(cases[i].path, "/v1/completions") == 0;
			chats += strcmp(cases[i].path, "/v1/chat/completions") == 0;
		}
		sim_http(e.port, cases[i].method, cases[i].path, body, NULL, 5000, &r);
		g_test_message("%s %s %s -> %ld %s", cases[i].method, cases[i].path,
		               body ? body : "", r.status, r.body->str);
		g_assert_cmpint(r.status, ==, cases[i].status);
		code = serve_error_code(r.body->str);
		g_assert_cmpstr(code, ==, cases[i].code);
		sim_reply_clear(&r);
	}
	g_assert_cmpint(serve_counter(&e, "prefill_started"), ==, 0);
	g_assert_cmpint(serve_counter(&e, "tokenize_calls"), ==, 0);
	g_assert_cmpint(serve_counter(&e, "requests_completions"), ==, posts);
	g_assert_cmpint(serve_counter(&e, "requests_chat"), ==, chats);
	serve_clear(&e);
}

static void
test_too_large(void)
{
	struct serve_env e;
	struct sim_reply r;
	GString *big = g_string_new(NULL);
	g_autofree char *code = NULL;

	g_test_summary("/serve/spec-4.2/413-at-400-bytes: a body above max_request_bytes is "
	               "refused while reading; one just under passes");
	if (!serve_start(&e, sim_fast, NULL, "{\"serving\":{\"max_request_bytes\":400}}"))
		return;
	g_string_printf(big, "{\"model\":\"%s\",\"max_tokens\":2,\"prompt\":\"", e.model);
	while (big->len < 396)
		g_string_append_c(big, 'a');
	g_string_append(big, "\"}");
	g_assert_cmpuint(big->len, ==, 398);
	serve_post(&e, "/v1/completions", big->str, NULL, 10000, &r);
	g_assert_cmpint(r.status, ==, 200);
	sim_reply_clear(&r);
	g_string_insert(big, big->len - 2, "aaa");
	serve_post(&e, "/v1/completions", big->str, NULL, 10000, &r);
	g_assert_cmpint(r.status, ==, 413);
	code = serve_error_code(r.body->str);
	g_assert_cmpstr(code, ==, "request_too_large");
	sim_reply_clear(&r);
	g_assert_cmpint(serve_counter(&e, "too_large"), ==, 1);
	g_string_free(big, TRUE);
	serve_clear(&e);
}

/* A chunked POST of body_len bytes (in 256-byte chunks) on a raw socket. */
static int
post_chunked(guint16 port, const char *path, const char *model, size_t body_len)
{
	struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = htons(port) };
	GString *req = g_string_new(NULL);
	GString *body = g_string_new(NULL);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	gboolean ok;

	g_string_printf(body, "{\"model\":\"%s\",\"max_tokens\":2,\"prompt\":\"", model);
	while (body->len < body_len - 2)
		g_string_append_c(body, 'a');
	g_string_append(body, "\"}");
	g_string_printf(req, "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\n"
	                "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
	                path);
	for (size_t off = 0; off < body->len; off += 256) {
		size_t n = MIN(256, body->len - off);

		g_string_append_printf(req, "%zx\r\n", n);
		g_string_append_len(req, body->str + off, (gssize)n);
		g_string_append(req, "\r\n");
	}
	g_string_append(req, "0\r\n\r\n");
	inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
	ok = fd >= 0 && connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0 &&
	     write(fd, req->str, req->len) == (ssize_t)req->len;
	g_string_free(req, TRUE);
	g_string_free(body, TRUE);
	if (!ok && fd >= 0) {
		close(fd);
		fd = -1;
	}
	return fd;
}

static void
test_too_large_chunked(void)
{
	struct serve_env e;
	GString *got = g_string_new(NULL);
	int fd;

	g_test_summary("/serve/spec-4.2/413-chunked-body: a chunked body of 1 KiB at a 400-byte "
	               "limit is answered 413 request_too_large with the error envelope, not "
	               "a closed connection");
	if (!serve_start(&e, sim_fast, NULL, "{\"serving\":{\"max_request_bytes\":400}}"))
		return;
	fd = post_chunked(e.port, "/v1/completions", e.model, 1024);
	g_assert_cmpint(fd, >=, 0);
	g_assert_true(serve_raw_read_until(fd, got, "}}", 10000));
	g_assert_true(g_str_has_prefix(got->str, "HTTP/1.1 413"));
	g_assert_nonnull(strstr(got->str, "\"code\":\"request_too_large\""));
	g_assert_nonnull(strstr(got->str, "\"type\":\"invalid_request_error\""));
	close(fd);
	g_assert_cmpint(serve_counter(&e, "too_large"), ==, 1);
	g_string_free(got, TRUE);
	serve_clear(&e);
}

static void
test_api_keys(void)
{
	const char *env[] = { "NW_TEST_CLIENT_KEYS", "key-one,key-two", NULL };
	const char *good[] = { "Authorization: Bearer key-two", NULL };
	const char *bad[] = { "Authorization: Bearer key-three", NULL };
	struct serve_env e;
	struct sim_reply r;
	g_autofree char *body = NULL, *code = NULL;
	const char *keys_cfg = "{\"server\":{\"api_keys_env\":\"NW_TEST_CLIENT_KEYS\"}}";

	g_test_summary("/serve/api-keys/401: with server.api_keys_env, a missing or wrong key "
	               "gets 401 before any engine work; a right key is served; health stays open");
	if (!serve_start(&e, sim_fast, NULL, NULL))
		return;
	g_assert_cmpint(serve_stop_daemon(&e, SIGTERM, 10000), ==, 0);
	/* Without the variable, the daemon refuses to start. */
	g_assert_false(serve_start_daemon(&e, keys_cfg, NULL));
	serve_stop_daemon(&e, SIGKILL, 1000);
	g_assert_true(serve_start_daemon(&e, keys_cfg, env));
	body = completion_body(&e, NULL);
	serve_post(&e, "/v1/completions", body, NULL, 5000, &r);
	g_assert_cmpint(r.status, ==, 401);
	code = serve_error_code(r.body->str);
	g_assert_cmpstr(code, ==, "invalid_api_key");
	sim_reply_clear(&r);
	serve_post(&e, "/v1/completions", body, bad, 5000, &r);
	g_assert_cmpint(r.status, ==, 401);
	sim_reply_clear(&r);
	serve_post(&e, "/v1/completions", body, good, 10000, &r);
	g_assert_cmpint(r.status, ==, 200);
	sim_reply_clear(&r);
	g_assert_cmpint(serve_counter(&e, "unauthorized"), ==, 2);
	g_assert_cmpint(serve_counter(&e, "tokenize_calls"), ==, 1);
	serve_clear(&e);
}

/* The access lines of narwhal's log so far, parsed, in order (owned). */
static GPtrArray *
access_lines(struct serve_env *e)
{
	g_autofree char *log = serve_log(e);
	g_auto(GStrv) lines = g_strsplit(log, "\n", -1);
	GPtrArray *out = g_ptr_array_new_with_free_func((GDestroyNotify)json_decref);

	for (char **l = lines; *l != NULL; l++) {
		json_t *line;

		if (strstr(*l, "\"event\":\"access\"") == NULL)
			continue;
		line = json_loads(*l, 0, NULL);
		g_assert_nonnull(line); /* one valid JSON object a line */
		g_ptr_array_add(out, line);
	}
	return out;
}

static gboolean
wait_access_lines(struct serve_env *e, guint n, guint timeout_ms)
{
	gint64 deadline = g_get_monotonic_time() + (gint64)timeout_ms * 1000;

	while (g_get_monotonic_time() < deadline) {
		g_autoptr(GPtrArray) lines = access_lines(e);

		if (lines->len >= n)
			return TRUE;
		g_usleep(10000);
	}
	return FALSE;
}

/* Issue 11, "Access log: one structured line per request (id, route,
 * model, status or error code, prompt and output tokens, TTFT, TPOT, total
 * time, engines and attempts), never a prompt or an API key, switchable"
 * (docs/metrics.md, "Access log"). */
static void
test_access_log(void)
{
	const char *env[] = { "NW_TEST_CLIENT_KEYS", "sk-access-secret-77", NULL };
	const char *key[] = { "Authorization: Bearer sk-access-secret-77", NULL };
	const char *cfg = "{\"server\":{\"api_keys_env\":\"NW_TEST_CLIENT_KEYS\"},"
	                  "\"log\":{\"access\":true}}";
	struct serve_env e;
	struct sim_reply r;
	g_autofree char *plain = NULL, *stream = NULL, *log = NULL, *rid = NULL;
	g_autoptr(GPtrArray) lines = NULL;
	json_t *ok, *sse, *refused;

	g_test_summary("/serve/issue-11/access-log: one access line per request with its fields, "
	               "never the prompt or the key; off writes none (test-access-log checks it "
	               "is written whatever log.level says)");
	if (!serve_start(&e, sim_fast, "pd", NULL))
		return;
	g_assert_cmpint(serve_stop_daemon(&e, SIGTERM, 10000), ==, 0);
	g_assert_true(serve_start_daemon(&e, cfg, env));
	g_assert_true(serve_wait_all_available(&e, 10000));
	plain = g_strdup_printf("{\"model\":\"%s\",\"prompt\":\"PROMPT-NEVER-LOGGED zebra\","
	                        "\"max_tokens\":6}", e.model);
	stream = g_strdup_printf("{\"model\":\"%s\",\"prompt\":\"PROMPT-NEVER-LOGGED okapi\","
	                         "\"max_tokens\":6,\"stream\":true}", e.model);
	serve_post(&e, "/v1/completions", plain, key, 10000, &r);
	g_assert_cmpint(r.status, ==, 200);
	rid = sim_reply_header(&r, "X-Request-Id");
	sim_reply_clear(&r);
	serve_post(&e, "/v1/completions", stream, key, 10000, &r);
	g_assert_cmpint(r.status, ==, 200);
	sim_reply_clear(&r);
	serve_post(&e, "/v1/completions", plain, NULL, 10000, &r);
	g_assert_cmpint(r.status, ==, 401);
	sim_reply_clear(&r);
	g_assert_true(wait_access_lines(&e, 3, 5000));

	lines = access_lines(&e);
	g_assert_cmpuint(lines->len, ==, 3);
	ok = g_ptr_array_index(lines, 0);
	sse = g_ptr_array_index(lines, 1);
	refused = g_ptr_array_index(lines, 2);
	g_assert_nonnull(rid);
	g_assert_cmpstr(json_string_value(json_object_get(ok, "request_id")), ==, rid);
	g_assert_cmpstr(json_string_value(json_object_get(ok, "route")), ==, "/v1/completions");
	g_assert_cmpstr(json_string_value(json_object_get(ok, "model")), ==, e.model);
	g_assert_true(json_is_false(json_object_get(ok, "stream")));
	g_assert_cmpint(json_integer_value(json_object_get(ok, "status")), ==, 200);
	g_assert_null(json_object_get(ok, "error_code"));
	g_assert_cmpint(json_integer_value(json_object_get(ok, "prompt_tokens")), >, 0);
	g_assert_cmpint(json_integer_value(json_object_get(ok, "output_tokens")), ==, 6);
	g_assert_cmpfloat(json_number_value(json_object_get(ok, "total_s")), >, 0);
	g_assert_nonnull(json_string_value(json_object_get(ok, "prefill_engine")));
	g_assert_nonnull(json_string_value(json_object_get(ok, "decode_engine")));
	g_assert_cmpint(json_integer_value(json_object_get(ok, "attempts")), ==, 1);

	g_assert_true(json_is_true(json_object_get(sse, "stream")));
	g_assert_cmpfloat(json_number_value(json_object_get(sse, "ttft_s")), >, 0);
	g_assert_cmpfloat(json_number_value(json_object_get(sse, "tpot_s")), >, 0);
	g_assert_cmpfloat(json_number_value(json_object_get(sse, "ttft_s")), <=,
	                  json_number_value(json_object_get(sse, "total_s")));

	g_assert_cmpint(json_integer_value(json_object_get(refused, "status")), ==, 401);
	g_assert_cmpstr(json_string_value(json_object_get(refused, "error_code")), ==,
	                "invalid_api_key");
	g_assert_cmpint(json_integer_value(json_object_get(refused, "attempts")), ==, 0);
	g_assert_null(json_object_get(refused, "prefill_engine"));

	log = serve_log(&e);
	g_assert_null(strstr(log, "PROMPT-NEVER-LOGGED"));
	g_assert_null(strstr(log, "sk-access-secret-77"));

	/* Switched off: no access line at all. */
	g_assert_cmpint(serve_stop_daemon(&e, SIGTERM, 10000), ==, 0);
	g_assert_true(serve_start_daemon(&e, "{\"log\":{\"access\":false}}", NULL));
	g_assert_true(serve_wait_all_available(&e, 10000));
	g_clear_pointer(&plain, g_free);
	plain = completion_body(&e, NULL);
	serve_post(&e, "/v1/completions", plain, NULL, 10000, &r);
	g_assert_cmpint(r.status, ==, 200);
	sim_reply_clear(&r);
	g_ptr_array_unref(lines);
	lines = access_lines(&e);
	g_assert_cmpuint(lines->len, ==, 0);
	serve_clear(&e);
}

static void
test_sizing(void)
{
	struct serve_env e;
	struct sim_reply r;
	g_autofree char *ids = NULL, *text = NULL;

	g_test_summary("/serve/spec-6/sizing-fallback: with engine.tokenize off the prompt is "
	               "sized by chars_per_token; token-id prompts count themselves");
	if (!serve_start(&e, sim_fast, "pd", "{\"engine\":{\"tokenize\":false}}"))
		return;
	text = completion_body(&e, NULL);
	serve_post(&e, "/v1/completions", text, NULL, 10000, &r);
	g_assert_cmpint(r.status, ==, 200);
	sim_reply_clear(&r);
	ids = g_strdup_printf("{\"model\":\"%s\",\"prompt\":[1,2,3,4],\"max_tokens\":2}", e.model);
	serve_post(&e, "/v1/completions", ids, NULL, 10000, &r);
	g_assert_cmpint(r.status, ==, 200);
	sim_reply_clear(&r);
	g_assert_cmpint(serve_counter(&e, "tokenize_calls"), ==, 0);
	g_assert_cmpint(serve_counter(&e, "tokenize_fallbacks"), ==, 1);
	serve_clear(&e);
}

/* Headers beyond the connection's memory pool are refused by the HTTP
 * layer (431); a large but fitting header and a large body still pass. */
static void
test_header_limit(void)
{
	struct serve_env e;
	struct sim_reply r;
	g_autofree char *body = NULL, *fits = NULL, *over = NULL;
	GString *big = g_string_new(NULL);
	const char *hdr[2] = { NULL, NULL };

	g_test_summary("/serve/http/header-limit: headers of 12 KiB are served, 20 KiB get 431 "
	               "and the daemon goes on serving");
	if (!serve_start(&e, sim_fast, "pd", NULL))
		return;
	body = completion_body(&e, NULL);
	fits = g_strnfill(12 * 1024, 'x');
	over = g_strnfill(20 * 1024, 'x');
	g_string_printf(big, "X-Padding: %s", fits);
	hdr[0] = big->str;
	serve_post(&e, "/v1/completions", body, hdr, 10000, &r);
	g_assert_cmpint(r.status, ==, 200);
	sim_reply_clear(&r);
	g_string_printf(big, "X-Padding: %s", over);
	hdr[0] = big->str;
	serve_post(&e, "/v1/completions", body, hdr, 10000, &r);
	g_assert_cmpint(r.status, ==, 431);
	sim_reply_clear(&r);
	serve_post(&e, "/v1/completions", body, NULL, 10000, &r);
	g_assert_cmpint(r.status, ==, 200);
	sim_reply_clear(&r);
	g_string_free(big, TRUE);
	serve_clear(&e);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	g_test_add_func("/serve/spec-4.3/disagg-nonstream", test_disagg_nonstream);
	g_test_add_func("/serve/spec-4.3/disagg-stream", test_disagg_stream);
	g_test_add_func("/serve/spec-7.2/aggregate-single-engine", test_aggregate_single);
	g_test_add_func("/serve/models", test_models);
	g_test_add_func("/serve/front-end/bad-inputs", test_front_end_errors);
	g_test_add_func("/serve/spec-4.2/413-at-400-bytes", test_too_large);
	g_test_add_func("/serve/spec-4.2/413-chunked-body", test_too_large_chunked);
	g_test_add_func("/serve/api-keys/401", test_api_keys);
	g_test_add_func("/serve/issue-11/access-log", test_access_log);
	g_test_add_func("/serve/http/header-limit", test_header_limit);
	g_test_add_func("/serve/spec-6/sizing-fallback", test_sizing);
	return g_test_run();
}
