/*
 * narwhal-sim's vLLM surface, against real simulator processes on loopback
 * ephemeral ports: the fleet description, every endpoint, streaming with
 * and without include_usage, X-Request-Id, /tokenize against usage, the
 * error shapes and statuses, the time scale, abort on client disconnect,
 * and clean exits on SIGTERM and SIGINT. Test paths name the clause of
 * issue 3 they check.
 */
#include "build-config.h"

#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>
#include <glib/gstdio.h>

#include "integration/sim-client.h"

static const char *const fast[] = { "--time-scale", "50", NULL };

static void
assert_error(const struct sim_reply *r, long status, const char *type, const char *param)
{
	json_t *doc = sim_json(r->body->str);
	json_t *err = json_object_get(doc, "error");

	g_assert_cmpint(r->status, ==, status);
	g_assert_true(json_is_object(err));
	g_assert_true(json_is_string(json_object_get(err, "message")));
	g_assert_cmpstr(json_string_value(json_object_get(err, "type")), ==, type);
	g_assert_cmpint(json_integer_value(json_object_get(err, "code")), ==, status);
	if (param)
		g_assert_cmpstr(json_string_value(json_object_get(err, "param")), ==, param);
	else
		g_assert_true(json_is_null(json_object_get(err, "param")));
	json_decref(doc);
}

static void
test_fleet(void)
{
	struct sim_proc p;
	g_autofree char *dir = g_dir_make_tmp("narwhal-sim-fleet-XXXXXX", NULL);
	g_autofree char *file = g_build_filename(dir, "fleet.json", NULL);
	const char *args[] = { "--engines", "3", "--fleet-out", file, "--no-delay", NULL };
	g_autofree char *written = NULL;
	json_t *engines, *from_file, *before, *after;
	struct sim_reply r;

	g_test_summary("/sim/issue3/fleet-description: many engines in one process, each with "
	               "its own state; the printed fleet pastes into Narwhal's config");
	g_assert_true(sim_start(&p, args));
	g_assert_cmpstr(json_string_value(json_object_get(p.fleet, "model")), ==, "opt-13b-a100");
	engines = json_object_get(p.fleet, "engines");
	g_assert_cmpuint(json_array_size(engines), ==, 3);
	for (unsigned i = 0; i < 3; i++) {
		json_t *e = json_array_get(engines, i);
		g_autofree char *id = g_strdup_printf("sim-%u", i);
		g_autofree char *url = g_strdup_printf("http://127.0.0.1:%u", p.ports[i]);

		g_assert_cmpstr(json_string_value(json_object_get(e, "id")), ==, id);
		g_assert_cmpstr(json_string_value(json_object_get(e, "url")), ==, url);
		g_assert_cmpstr(json_string_value(json_object_get(e, "dialect")), ==, "vllm");
		g_assert_cmpstr(json_string_value(json_object_get(e, "role")), ==,
		                i < 2 ? "prefill" : "decode");
		g_assert_cmpfloat(json_number_value(json_object_get(e, "kv_lease_s")), ==, 30.0);
		g_assert_cmpuint(json_object_size(e), ==, 5);
		sim_http(p.ports[i], "GET", "/health", NULL, NULL, 5000, &r);
		g_assert_cmpint(r.status, ==, 200);
		sim_reply_clear(&r);
	}
	/* Only the keys Narwhal's fleet section takes. */
	g_assert_cmpuint(json_object_size(p.fleet), ==, 2);
	g_assert_true(g_file_get_contents(file, &written, NULL, NULL));
	from_file = sim_json(written);
	g_assert_true(json_equal(from_file, p.fleet));
	json_decref(from_file);

	/* Engines keep separate state. */
	before = sim_engine_stats(&p, 1);
	sim_http(p.ports[0], "POST", "/v1/completions", "{\"prompt\":\"a b c\",\"max_tokens\":3}",
	         NULL, 5000, &r);
	g_assert_cmpint(r.status, ==, 200);
	sim_reply_clear(&r);
	after = sim_engine_stats(&p, 1);
	g_assert_true(json_equal(json_object_get(before, "generation_tokens_total"),
	                         json_object_get(after, "generation_tokens_total")));
	json_decref(before);
	json_decref(after);
	after = sim_engine_stats(&p, 0);
	g_assert_cmpint(json_integer_value(json_object_get(after, "generation_tokens_total")), ==, 3);
	json_decref(after);

	g_assert_cmpint(sim_stop(&p, SIGTERM, 10000), ==, 0);
	sim_clear(&p);
	g_unlink(file);
	g_rmdir(dir);
}

static void
test_signals(void)
{
	struct sim_proc p;

	g_test_summary("/sim/issue3/clean-exit: SIGTERM and SIGINT stop cleanly with status 0");
	g_assert_true(sim_start(&p, fast));
	g_assert_cmpint(sim_stop(&p, SIGINT, 10000), ==, 0);
	sim_clear(&p);
	/* With requests in flight: a stream, a waiting non-streaming request,
	 * and a prefill-only lease. */
	g_assert_true(sim_start(&p, NULL));
	{
		int s1 = sim_raw_request(p.ports[0], "/v1/completions",
		                         "{\"prompt\":\"a\",\"max_tokens\":1900,\"stream\":true}",
		                         5000);
		int s2 = sim_raw_request(p.ports[0], "/v1/completions",
		                         "{\"prompt\":\"b\",\"max_tokens\":1900}", 100);
		struct sim_reply r;

		sim_http(p.ports[0], "POST", "/v1/completions", "{\"prompt\":\"c\",\"max_tokens\":1,"
		         "\"kv_transfer_params\":{\"do_remote_decode\":true}}", NULL, 5000, &r);
		g_assert_cmpint(r.status, ==, 200);
		sim_reply_clear(&r);
		g_assert_cmpint(s1, >=, 0);
		g_assert_cmpint(s2, >=, 0);
		g_assert_cmpint(sim_stop(&p, SIGTERM, 10000), ==, 0);
		close(s1);
		close(s2);
	}
	g_assert_true(sim_wait_log(&p, "\"event\":\"stopped\"", 1000));
	sim_clear(&p);
}

static json_t *
post_ok(guint16 port, const char *path, const char *body, const char *const *headers,
        struct sim_reply *r)
{
	sim_http(port, "POST", path, body, headers, 10000, r);
	if (r->status != 200)
		g_error("POST %s -> %ld: %s", path, r->status, r->body->str);
	return sim_json(r->body->str);
}

static void
test_completions(void)
{
	struct sim_proc p;
	struct sim_reply r, again;
	const char *const hdr[] = { "X-Request-Id: test-req-42", NULL };
	const char *body = "{\"model\":\"opt-13b-a100\",\"prompt\":\"The quick brown fox\","
	                   "\"max_tokens\":7}";
	json_t *doc, *choice, *usage, *tok;
	g_autofree char *echoed = NULL;

	g_test_summary("/sim/issue3/completions: vLLM's completion body field for field, "
	               "X-Request-Id honoured and echoed, usage, deterministic text");
	g_assert_true(sim_start(&p, fast));
	doc = post_ok(p.ports[0], "/v1/completions", body, hdr, &r);
	echoed = sim_reply_header(&r, "X-Request-Id");
	g_assert_cmpstr(echoed, ==, "test-req-42");
	g_assert_cmpstr(json_string_value(json_object_get(doc, "id")), ==, "cmpl-test-req-42");
	g_assert_cmpstr(json_string_value(json_object_get(doc, "object")), ==, "text_completion");
	g_assert_true(json_is_integer(json_object_get(doc, "created")));
	g_assert_cmpstr(json_string_value(json_object_get(doc, "model")), ==, "opt-13b-a100");
	g_assert_true(json_is_null(json_object_get(doc, "kv_transfer_params")));
	choice = json_array_get(json_object_get(doc, "choices"), 0);
	g_assert_cmpint(json_integer_value(json_object_get(choice, "index")), ==, 0);
	g_assert_true(json_is_string(json_object_get(choice, "text")));
	g_assert_true(json_is_null(json_object_get(choice, "logprobs")));
	g_assert_cmpstr(json_string_value(json_object_get(choice, "finish_reason")), ==, "length");
	g_assert_true(json_is_null(json_object_get(choice, "stop_reason")));
	usage = json_object_get(doc, "usage");
	g_assert_cmpint(json_integer_value(json_object_get(usage, "completion_tokens")), ==, 7);
	g_assert_cmpint(json_integer_value(json_object_get(usage, "total_tokens")), ==,
	                json_integer_value(json_object_get(usage, "prompt_tokens")) + 7);

	/* The same prompt gives the same text. */
	sim_http(p.ports[0], "POST", "/v1/completions", body, NULL, 10000, &again);
	{
		json_t *doc2 = sim_json(again.body->str);

		g_assert_cmpstr(json_string_value(json_object_get(json_array_get(
			json_object_get(doc2, "choices"), 0), "text")), ==,
			json_string_value(json_object_get(choice, "text")));
		g_assert_true(g_str_has_prefix(json_string_value(json_object_get(doc2, "id")),
		                               "cmpl-"));
		json_decref(doc2);
	}
	sim_reply_clear(&again);

	/* /tokenize counts what usage reports. */
	sim_reply_clear(&r);
	tok = post_ok(p.ports[0], "/tokenize", "{\"prompt\":\"The quick brown fox\"}", NULL, &r);
	g_assert_cmpint(json_integer_value(json_object_get(tok, "count")), ==,
	                json_integer_value(json_object_get(usage, "prompt_tokens")));
	json_decref(tok);
	json_decref(doc);
	sim_reply_clear(&r);
	g_assert_cmpint(sim_stop(&p, SIGTERM, 10000), ==, 0);
	sim_clear(&p);
}

static void
test_chat(void)
{
	struct sim_proc p;
	struct sim_reply r;
	const char *msgs = "[{\"role\":\"system\",\"content\":\"Be brief.\"},"
	                   "{\"role\":\"user\",\"content\":\"Name three colours.\"}]";
	g_autofree char *body = g_strdup_printf("{\"messages\":%s,\"max_completion_tokens\":5}",
	                                        msgs);
	g_autofree char *tok_body = g_strdup_printf("{\"messages\":%s}", msgs);
	json_t *doc, *choice, *msg, *tok;

	g_test_summary("/sim/issue3/chat-completions: chat body with message, usage, and "
	               "/tokenize's chat form equal to usage.prompt_tokens");
	g_assert_true(sim_start(&p, fast));
	doc = post_ok(p.ports[0], "/v1/chat/completions", body, NULL, &r);
	g_assert_true(g_str_has_prefix(json_string_value(json_object_get(doc, "id")), "chatcmpl-"));
	g_assert_cmpstr(json_string_value(json_object_get(doc, "object")), ==, "chat.completion");
	choice = json_array_get(json_object_get(doc, "choices"), 0);
	msg = json_object_get(choice, "message");
	g_assert_cmpstr(json_string_value(json_object_get(msg, "role")), ==, "assistant");
	g_assert_true(json_is_string(json_object_get(msg, "content")));
	g_assert_cmpstr(json_string_value(json_object_get(choice, "finish_reason")), ==, "length");
	g_assert_cmpint(json_integer_value(json_object_get(json_object_get(doc, "usage"),
	                "completion_tokens")), ==, 5);
	sim_reply_clear(&r);
	tok = post_ok(p.ports[0], "/tokenize", tok_body, NULL, &r);
	g_assert_cmpint(json_integer_value(json_object_get(tok, "count")), ==,
	                json_integer_value(json_object_get(json_object_get(doc, "usage"),
	                                                   "prompt_tokens")));
	g_assert_cmpuint(json_array_size(json_object_get(tok, "tokens")), ==,
	                 json_integer_value(json_object_get(tok, "count")));
	json_decref(tok);
	json_decref(doc);
	sim_reply_clear(&r);
	g_assert_cmpint(sim_stop(&p, SIGTERM, 10000), ==, 0);
	sim_clear(&p);
}

/* Check a completed stream and return its events. */
static GPtrArray *
stream(guint16 port, const char *path, const char *body)
{
	struct sim_reply r;
	GPtrArray *events;
	g_autofree char *ctype = NULL;

	sim_http(port, "POST", path, body, NULL, 10000, &r);
	g_assert_cmpint(r.curl_code, ==, CURLE_OK);
	g_assert_cmpint(r.status, ==, 200);
	ctype = sim_reply_header(&r, "Content-Type");
	g_assert_true(g_str_has_prefix(ctype, "text/event-stream"));
	events = sim_sse_events(r.body->str);
	g_assert_cmpuint(events->len, >=, 1);
	g_assert_cmpstr(g_ptr_array_index(events, events->len - 1), ==, "[DONE]");
	sim_reply_clear(&r);
	return events;
}

static void
test_streaming(void)
{
	struct sim_proc p;
	GPtrArray *ev;
	json_t *chunk, *usage;
	GString *text = g_string_new(NULL);
	struct sim_reply r;
	json_t *whole;

	g_test_summary("/sim/issue3/streaming: SSE chunks per token, finish_reason on the last, "
	               "a usage chunk only with include_usage, then [DONE]");
	g_assert_true(sim_start(&p, fast));
	ev = stream(p.ports[0], "/v1/completions",
	            "{\"prompt\":\"one two three\",\"max_tokens\":6,\"stream\":true}");
	g_assert_cmpuint(ev->len, ==, 6 + 1);
	for (guint i = 0; i < 6; i++) {
		json_t *c;

		chunk = sim_json(g_ptr_array_index(ev, i));
		g_assert_cmpstr(json_string_value(json_object_get(chunk, "object")), ==,
		                "text_completion");
		g_assert_null(json_object_get(chunk, "usage"));
		c = json_array_get(json_object_get(chunk, "choices"), 0);
		g_string_append(text, json_string_value(json_object_get(c, "text")));
		g_assert_true(json_is_null(json_object_get(c, "logprobs")));
		g_assert_true(json_is_null(json_object_get(c, "stop_reason")));
		if (i == 5)
			g_assert_cmpstr(json_string_value(json_object_get(c, "finish_reason")), ==,
			                "length");
		else
			g_assert_true(json_is_null(json_object_get(c, "finish_reason")));
		json_decref(chunk);
	}
	g_ptr_array_unref(ev);
	/* The streamed text is the non-streamed text. */
	sim_http(p.ports[0], "POST", "/v1/completions",
	         "{\"prompt\":\"one two three\",\"max_tokens\":6}", NULL, 10000, &r);
	whole = sim_json(r.body->str);
	g_assert_cmpstr(json_string_value(json_object_get(json_array_get(
		json_object_get(whole, "choices"), 0), "text")), ==, text->str);
	json_decref(whole);
	sim_reply_clear(&r);
	g_string_free(text, TRUE);

	g_test_message("/sim/issue3/include-usage");
	ev = stream(p.ports[0], "/v1/completions",
	            "{\"prompt\":\"one two three\",\"max_tokens\":4,\"stream\":true,"
	            "\"stream_options\":{\"include_usage\":true}}");
	g_assert_cmpuint(ev->len, ==, 4 + 2);
	chunk = sim_json(g_ptr_array_index(ev, 4));
	g_assert_cmpuint(json_array_size(json_object_get(chunk, "choices")), ==, 0);
	usage = json_object_get(chunk, "usage");
	g_assert_cmpint(json_integer_value(json_object_get(usage, "completion_tokens")), ==, 4);
	g_assert_cmpint(json_integer_value(json_object_get(usage, "total_tokens")), ==,
	                4 + json_integer_value(json_object_get(usage, "prompt_tokens")));
	json_decref(chunk);
	g_ptr_array_unref(ev);

	g_test_message("chat stream: the role first, then content");
	ev = stream(p.ports[0], "/v1/chat/completions",
	            "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":3,"
	            "\"stream\":true,\"stream_options\":{\"include_usage\":true}}");
	g_assert_cmpuint(ev->len, ==, 1 + 3 + 1 + 1);
	for (guint i = 0; i < 4; i++) {
		json_t *delta;

		chunk = sim_json(g_ptr_array_index(ev, i));
		g_assert_cmpstr(json_string_value(json_object_get(chunk, "object")), ==,
		                "chat.completion.chunk");
		delta = json_object_get(json_array_get(json_object_get(chunk, "choices"), 0), "delta");
		if (i == 0)
			g_assert_cmpstr(json_string_value(json_object_get(delta, "role")), ==,
			                "assistant");
		else
			g_assert_null(json_object_get(delta, "role"));
		g_assert_true(json_is_string(json_object_get(delta, "content")));
		json_decref(chunk);
	}
	chunk = sim_json(g_ptr_array_index(ev, 4));
	g_assert_cmpuint(json_array_size(json_object_get(chunk, "choices")), ==, 0);
	json_decref(chunk);
	g_ptr_array_unref(ev);
	g_assert_cmpint(sim_stop(&p, SIGTERM, 10000), ==, 0);
	sim_clear(&p);
}

static void
test_endpoints(void)
{
	struct sim_proc p;
	const char *args[] = { "--time-scale", "50", "--served-model-name", "my-model",
	                       "--max-model-len", "4096", NULL };
	struct sim_reply r;
	json_t *doc, *card;

	g_test_summary("/sim/issue3/endpoints: /health, /v1/models, /tokenize, /detokenize, "
	               "/version and /metrics with vLLM's names and labels");
	g_assert_true(sim_start(&p, args));
	sim_http(p.ports[0], "GET", "/health", NULL, NULL, 5000, &r);
	g_assert_cmpint(r.status, ==, 200);
	g_assert_cmpuint(r.body->len, ==, 0);
	sim_reply_clear(&r);

	sim_http(p.ports[0], "GET", "/v1/models", NULL, NULL, 5000, &r);
	g_assert_cmpint(r.status, ==, 200);
	doc = sim_json(r.body->str);
	g_assert_cmpstr(json_string_value(json_object_get(doc, "object")), ==, "list");
	card = json_array_get(json_object_get(doc, "data"), 0);
	g_assert_cmpstr(json_string_value(json_object_get(card, "id")), ==, "my-model");
	g_assert_cmpstr(json_string_value(json_object_get(card, "object")), ==, "model");
	g_assert_cmpstr(json_string_value(json_object_get(card, "owned_by")), ==, "vllm");
	g_assert_cmpint(json_integer_value(json_object_get(card, "max_model_len")), ==, 4096);
	g_assert_true(json_is_array(json_object_get(card, "permission")));
	json_decref(doc);
	sim_reply_clear(&r);

	sim_http(p.ports[0], "POST", "/tokenize", "{\"prompt\":\"a b\",\"add_special_tokens\":false}",
	         NULL, 5000, &r);
	g_assert_cmpint(r.status, ==, 200);
	doc = sim_json(r.body->str);
	g_assert_cmpint(json_integer_value(json_object_get(doc, "max_model_len")), ==, 4096);
	g_assert_true(json_is_null(json_object_get(doc, "token_strs")));
	g_assert_cmpuint(json_array_size(json_object_get(doc, "tokens")), ==,
	                 json_integer_value(json_object_get(doc, "count")));
	json_decref(doc);
	sim_reply_clear(&r);
	sim_http(p.ports[0], "POST", "/tokenize", "{\"model\":\"other\",\"prompt\":\"a\"}",
	         NULL, 5000, &r);
	assert_error(&r, 404, "NotFoundError", "model");
	sim_reply_clear(&r);
	sim_http(p.ports[0], "POST", "/detokenize", "{\"tokens\":[1,2]}", NULL, 5000, &r);
	assert_error(&r, 501, "NotImplementedError", NULL);
	sim_reply_clear(&r);
	sim_http(p.ports[0], "GET", "/version", NULL, NULL, 5000, &r);
	g_assert_cmpint(r.status, ==, 200);
	sim_reply_clear(&r);

	sim_http(p.ports[0], "POST", "/v1/completions",
	         "{\"model\":\"my-model\",\"prompt\":\"x y z\",\"max_tokens\":3}", NULL, 5000, &r);
	g_assert_cmpint(r.status, ==, 200);
	sim_reply_clear(&r);
	sim_http(p.ports[0], "GET", "/metrics", NULL, NULL, 5000, &r);
	g_assert_cmpint(r.status, ==, 200);
	{
		static const char *const names[] = {
			"vllm:num_requests_running{model_name=\"my-model\",engine=\"0\"} 0\n",
			"vllm:num_requests_waiting{model_name=\"my-model\",engine=\"0\"} 0\n",
			"vllm:kv_cache_usage_perc{model_name=\"my-model\",engine=\"0\"} 0\n",
			"vllm:generation_tokens_total{model_name=\"my-model\",engine=\"0\"} 3\n",
			"vllm:prompt_tokens_total{",
			"vllm:num_preemptions_total{",
			"vllm:request_success_total{model_name=\"my-model\",engine=\"0\","
				"finished_reason=\"length\"} 1\n",
			"# TYPE vllm:time_to_first_token_seconds histogram\n",
			"vllm:time_to_first_token_seconds_count{model_name=\"my-model\","
				"engine=\"0\"} 1\n",
			"vllm:time_to_first_token_seconds_bucket{model_name=\"my-model\",engine=\"0\","
				"le=\"+Inf\"} 1\n",
			"vllm:inter_token_latency_seconds_count{model_name=\"my-model\","
				"engine=\"0\"} 2\n",
			"vllm:e2e_request_latency_seconds_count{model_name=\"my-model\","
				"engine=\"0\"} 1\n",
			"vllm:request_queue_time_seconds_count{",
		};

		for (size_t i = 0; i < G_N_ELEMENTS(names); i++) {
			if (strstr(r.body->str, names[i]) == NULL)
				g_error("/metrics lacks %s:\n%s", names[i], r.body->str);
		}
	}
	sim_reply_clear(&r);
	g_assert_cmpint(sim_stop(&p, SIGTERM, 10000), ==, 0);
	sim_clear(&p);
}

static void
test_errors(void)
{
	struct sim_proc p;
	struct sim_reply r;
	static const struct {
		const char *path, *body;
		long status;
		const char *type, *param;
	} cases[] = {
		{ "/v1/completions", "{not json", 400, "BadRequestError", NULL },
		{ "/v1/completions", "[1,2]", 400, "BadRequestError", NULL },
		{ "/v1/completions", "{\"max_tokens\":3}", 400, "BadRequestError", "prompt" },
		{ "/v1/completions", "{\"prompt\":7}", 400, "BadRequestError", "prompt" },
		{ "/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":0}", 400,
		  "BadRequestError", "max_tokens" },
		{ "/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":\"9\"}", 400,
		  "BadRequestError", "max_tokens" },
		{ "/v1/completions", "{\"prompt\":\"a\",\"stream\":\"yes\"}", 400,
		  "BadRequestError", "stream" },
		{ "/v1/completions", "{\"prompt\":\"a\",\"stream_options\":{\"include_usage\":true}}",
		  400, "BadRequestError", "stream_options" },
		{ "/v1/completions", "{\"prompt\":\"a\",\"model\":\"gpt-none\"}", 404,
		  "NotFoundError", "model" },
		{ "/v1/chat/completions", "{\"max_tokens\":3}", 400, "BadRequestError", "messages" },
		{ "/v1/chat/completions", "{\"messages\":\"hi\"}", 400, "BadRequestError",
		  "messages" },
		{ "/v1/completions", "{\"prompt\":\"a\",\"kv_transfer_params\":5}", 400,
		  "BadRequestError", "kv_transfer_params" },
	};

	g_test_summary("/sim/issue3/errors: vLLM's nested error shape with int code and the "
	               "right statuses (400 validation, 404 model and route, 405 method)");
	g_assert_true(sim_start(&p, fast));
	for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
		g_test_message("case %zu: %s", i, cases[i].body);
		sim_http(p.ports[0], "POST", cases[i].path, cases[i].body, NULL, 5000, &r);
		assert_error(&r, cases[i].status, cases[i].type, cases[i].param);
		sim_reply_clear(&r);
	}
	sim_http(p.ports[0], "GET", "/v2/nothing", NULL, NULL, 5000, &r);
	assert_error(&r, 404, "NotFoundError", NULL);
	sim_reply_clear(&r);
	sim_http(p.ports[0], "GET", "/v1/completions", NULL, NULL, 5000, &r);
	assert_error(&r, 405, "MethodNotAllowedError", NULL);
	{
		g_autofree char *allow = sim_reply_header(&r, "Allow");

		g_assert_cmpstr(allow, ==, "POST");
	}
	sim_reply_clear(&r);
	sim_http(p.ports[0], "POST", "/health", "{}", NULL, 5000, &r);
	g_assert_cmpint(r.status, ==, 405);
	sim_reply_clear(&r);
	g_assert_cmpint(sim_stop(&p, SIGTERM, 10000), ==, 0);
	sim_clear(&p);
}

static void
test_context_length(void)
{
	struct sim_proc p;
	const char *args[] = { "--no-delay", "--max-model-len", "64", NULL };
	struct sim_reply r;
	GString *big = g_string_new("{\"prompt\":\"");
	json_t *doc;
	const char *msg;

	g_test_summary("/sim/issue3/context-length-400: the newest vLLM wording, with param");
	for (int i = 0; i < 100; i++)
		g_string_append(big, "word ");
	g_string_append(big, "\"}");
	g_assert_true(sim_start(&p, args));
	sim_http(p.ports[0], "POST", "/v1/completions", big->str, NULL, 5000, &r);
	assert_error(&r, 400, "BadRequestError", "input_tokens");
	doc = sim_json(r.body->str);
	msg = json_string_value(json_object_get(json_object_get(doc, "error"), "message"));
	g_assert_nonnull(strstr(msg, "You passed "));
	g_assert_nonnull(strstr(msg, "context length is only 64 tokens"));
	json_decref(doc);
	sim_reply_clear(&r);
	sim_http(p.ports[0], "POST", "/v1/completions", "{\"prompt\":\"a b\",\"max_tokens\":63}",
	         NULL, 5000, &r);
	assert_error(&r, 400, "BadRequestError", "max_tokens");
	doc = sim_json(r.body->str);
	msg = json_string_value(json_object_get(json_object_get(doc, "error"), "message"));
	g_assert_nonnull(strstr(msg, "requested 63 output tokens"));
	json_decref(doc);
	sim_reply_clear(&r);
	/* A prompt that fits with room to spare is served. */
	sim_http(p.ports[0], "POST", "/v1/completions", "{\"prompt\":\"a b\",\"max_tokens\":8}",
	         NULL, 5000, &r);
	g_assert_cmpint(r.status, ==, 200);
	sim_reply_clear(&r);
	g_string_free(big, TRUE);
	g_assert_cmpint(sim_stop(&p, SIGTERM, 10000), ==, 0);
	sim_clear(&p);
}

static void
test_time_scale(void)
{
	struct sim_proc p;
	const char *args[] = { "--time-scale", "10", NULL };
	struct sim_reply r;
	double model_s, wall_s;

	g_test_summary("/sim/issue3/time-scale: wall time is model time / --time-scale");
	g_assert_true(sim_start(&p, args));
	sim_http(p.ports[0], "POST", "/v1/completions", "{\"prompt\":\"a b c d\",\"max_tokens\":40}",
	         NULL, 10000, &r);
	g_assert_cmpint(r.status, ==, 200);
	wall_s = r.seconds;
	sim_reply_clear(&r);
	model_s = sim_metric(p.ports[0], "vllm:e2e_request_latency_seconds_sum{");
	g_test_message("model %.3f s, wall %.3f s", model_s, wall_s);
	/* 40 decode steps of OPT-13B are most of a second of model time. */
	g_assert_cmpfloat(model_s, >, 0.5);
	g_assert_cmpfloat(wall_s, >=, model_s / 10 * 0.9);
	g_assert_cmpfloat(wall_s, <, model_s / 10 + 0.5);
	g_assert_cmpint(sim_stop(&p, SIGTERM, 10000), ==, 0);
	sim_clear(&p);
}

/* Poll an engine's stats until running and KV use are back to zero. */
static double
seconds_until_idle(const struct sim_proc *p, double limit_s)
{
	gint64 start = g_get_monotonic_time();

	for (;;) {
		json_t *st = sim_engine_stats(p, 0);
		bool idle = json_integer_value(json_object_get(st, "running")) == 0 &&
		            json_integer_value(json_object_get(st, "waiting")) == 0 &&
		            json_integer_value(json_object_get(st, "kv_blocks_used")) == 0;
		double elapsed = (double)(g_get_monotonic_time() - start) / 1e6;

		json_decref(st);
		if (idle || elapsed > limit_s)
			return elapsed;
		g_usleep(2000);
	}
}

static void
test_abort_on_disconnect(void)
{
	struct sim_proc p;
	json_t *st;
	int fd;
	double took;

	g_test_summary("/sim/issue3/abort-on-disconnect: a client that leaves mid-stream (or "
	               "while waiting) aborts its request and frees its KV within 100 ms");
	g_assert_true(sim_start(&p, NULL)); /* real time: 2000 tokens take about a minute */
	fd = sim_raw_request(p.ports[0], "/v1/completions",
	                     "{\"prompt\":\"hello there\",\"max_tokens\":1900,\"stream\":true}",
	                     5000);
	g_assert_cmpint(fd, >=, 0);
	st = sim_engine_stats(&p, 0);
	g_assert_cmpint(json_integer_value(json_object_get(st, "running")), ==, 1);
	g_assert_cmpint(json_integer_value(json_object_get(st, "kv_blocks_used")), >, 0);
	json_decref(st);
	close(fd);
	took = seconds_until_idle(&p, 2.0);
	g_test_message("streaming: idle %.1f ms after the close", took * 1e3);
	g_assert_cmpfloat(took, <, 0.1);

	fd = sim_raw_request(p.ports[0], "/v1/completions",
	                     "{\"prompt\":\"hello there\",\"max_tokens\":1900}", 200);
	g_assert_cmpint(fd, >=, 0);
	st = sim_engine_stats(&p, 0);
	g_assert_cmpint(json_integer_value(json_object_get(st, "running")), ==, 1);
	json_decref(st);
	close(fd);
	took = seconds_until_idle(&p, 2.0);
	g_test_message("non-streaming: idle %.1f ms after the close", took * 1e3);
	g_assert_cmpfloat(took, <, 0.1);
	{
		struct sim_reply r;

		sim_http(p.ports[0], "GET", "/metrics", NULL, NULL, 5000, &r);
		g_assert_nonnull(strstr(r.body->str, "finished_reason=\"abort\"} 2\n"));
		sim_reply_clear(&r);
	}
	g_assert_cmpint(sim_stop(&p, SIGTERM, 10000), ==, 0);
	sim_clear(&p);
}

/* Fold a chat stream's events into {reasoning, content, calls[] by index,
 * logprobs entries, finish_reason} the way a client would. */
static json_t *
fold_chat_stream(const char *text)
{
	json_t *out = json_pack("{s:s, s:s, s:[], s:[], s:n}", "reasoning_content", "",
	                        "content", "", "tool_calls", "logprobs", "finish_reason");
	g_auto(GStrv) lines = g_strsplit(text, "\n", -1);

	for (char **l = lines; *l; l++) {
		json_t *ev, *ch, *delta, *v;
		size_t i;

		if (!g_str_has_prefix(*l, "data: {"))
			continue;
		ev = sim_json(*l + 6);
		ch = json_array_get(json_object_get(ev, "choices"), 0);
		delta = json_object_get(ch, "delta");
		for (const char *const *k = (const char *const[]){ "reasoning_content", "content",
		                                                   NULL }; *k; k++) {
			if (json_is_string(json_object_get(delta, *k))) {
				g_autofree char *cat = g_strconcat(json_string_value(json_object_get(out, *k)),
				                                   json_string_value(json_object_get(delta, *k)),
				                                   NULL);
				json_object_set_new(out, *k, json_string(cat));
			}
		}
		json_array_foreach(json_object_get(delta, "tool_calls"), i, v) {
			json_t *calls = json_object_get(out, "tool_calls");
			json_int_t idx = json_integer_value(json_object_get(v, "index"));
			json_t *fn = json_object_get(v, "function");

			if (idx == (json_int_t)json_array_size(calls)) {
				/* The first delta of a call carries its id, type and name. */
				g_assert_nonnull(json_object_get(v, "id"));
				json_array_append_new(calls, json_pack("{s:O, s:O, s:{s:O, s:s}}",
				                      "id", json_object_get(v, "id"),
				                      "type", json_object_get(v, "type"), "function",
				                      "name", json_object_get(fn, "name"), "arguments", ""));
			} else {
				g_assert_null(json_object_get(v, "id"));
			}
			{
				json_t *f = json_object_get(json_array_get(calls, (size_t)idx), "function");
				g_autofree char *cat = g_strconcat(
					json_string_value(json_object_get(f, "arguments")),
					json_string_value(json_object_get(fn, "arguments")), NULL);

				json_object_set_new(f, "arguments", json_string(cat));
			}
		}
		json_array_extend(json_object_get(out, "logprobs"),
		                  json_object_get(json_object_get(ch, "logprobs"), "content"));
		if (json_is_string(json_object_get(ch, "finish_reason")))
			json_object_set(out, "finish_reason", json_object_get(ch, "finish_reason"));
		json_decref(ev);
	}
	return out;
}

static void
test_tools_reasoning_logprobs(void)
{
	struct sim_proc p;
	struct sim_reply whole, streamed, r;
	const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":\"Where is the pod?\"}],"
	                   "\"max_tokens\":9,\"chat_template_kwargs\":{\"enable_thinking\":true},"
	                   "\"logprobs\":true,\"top_logprobs\":2,\"tool_choice\":\"required\","
	                   "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"find\"}},"
	                   "{\"type\":\"function\",\"function\":{\"name\":\"dive\"}}]";
	g_autofree char *plain = g_strconcat(body, "}", NULL);
	g_autofree char *stream = g_strconcat(body, ",\"stream\":true}", NULL);
	json_t *doc, *msg, *folded, *want;

	g_test_summary("/sim/issue-9/tools-reasoning-logprobs: a chat request with tools "
	               "(tool_choice required), enable_thinking and logprobs answers the same "
	               "reasoning, tool calls (one per tool, finish_reason tool_calls) and "
	               "logprob values streamed as deltas by index and in one body");
	g_assert_true(sim_start(&p, fast));
	sim_http(p.ports[0], "POST", "/v1/chat/completions", plain, NULL, 10000, &whole);
	g_assert_cmpint(whole.status, ==, 200);
	sim_http(p.ports[0], "POST", "/v1/chat/completions", stream, NULL, 10000, &streamed);
	g_assert_cmpint(streamed.status, ==, 200);
	doc = sim_json(whole.body->str);
	msg = json_object_get(json_array_get(json_object_get(doc, "choices"), 0), "message");
	g_assert_true(json_is_null(json_object_get(msg, "content")));
	g_assert_cmpuint(strlen(json_string_value(json_object_get(msg, "reasoning_content"))), >, 0);
	g_assert_cmpuint(json_array_size(json_object_get(msg, "tool_calls")), ==, 2);
	folded = fold_chat_stream(streamed.body->str);
	want = json_pack("{s:O, s:s, s:O, s:O, s:O}",
	                 "reasoning_content", json_object_get(msg, "reasoning_content"),
	                 "content", "", "tool_calls", json_object_get(msg, "tool_calls"),
	                 "logprobs", json_object_get(json_object_get(json_array_get(
	                     json_object_get(doc, "choices"), 0), "logprobs"), "content"),
	                 "finish_reason", json_object_get(json_array_get(
	                     json_object_get(doc, "choices"), 0), "finish_reason"));
	g_assert_cmpstr(json_string_value(json_object_get(want, "finish_reason")), ==, "tool_calls");
	g_assert_cmpuint(json_array_size(json_object_get(want, "logprobs")), ==, 9);
	g_assert_true(json_equal(folded, want));
	json_decref(folded);
	json_decref(want);
	json_decref(doc);
	sim_reply_clear(&whole);
	sim_reply_clear(&streamed);

	/* vLLM refuses prompt_logprobs on a stream, and a tool_choice naming
	 * no tool. */
	sim_http(p.ports[0], "POST", "/v1/completions", "{\"prompt\":\"a\",\"prompt_logprobs\":1,"
	         "\"stream\":true}", NULL, 10000, &r);
	g_assert_cmpint(r.status, ==, 400);
	g_assert_nonnull(strstr(r.body->str, "\"param\":\"prompt_logprobs\""));
	sim_reply_clear(&r);
	sim_http(p.ports[0], "POST", "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\","
	         "\"content\":\"a\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":"
	         "\"x\"}}],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"y\"}}}",
	         NULL, 10000, &r);
	g_assert_cmpint(r.status, ==, 400);
	g_assert_nonnull(strstr(r.body->str, "\"param\":\"tool_choice\""));
	sim_reply_clear(&r);
	g_assert_cmpint(sim_stop(&p, SIGTERM, 10000), ==, 0);
	sim_clear(&p);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	g_test_add_func("/sim/issue3/fleet-description", test_fleet);
	g_test_add_func("/sim/issue3/clean-exit", test_signals);
	g_test_add_func("/sim/issue3/completions", test_completions);
	g_test_add_func("/sim/issue-9/tools-reasoning-logprobs", test_tools_reasoning_logprobs);
	g_test_add_func("/sim/issue3/chat-completions", test_chat);
	g_test_add_func("/sim/issue3/streaming", test_streaming);
	g_test_add_func("/sim/issue3/endpoints", test_endpoints);
	g_test_add_func("/sim/issue3/errors", test_errors);
	g_test_add_func("/sim/issue3/context-length-400", test_context_length);
	g_test_add_func("/sim/issue3/time-scale", test_time_scale);
	g_test_add_func("/sim/issue3/abort-on-disconnect", test_abort_on_disconnect);
	int status = g_test_run();
	curl_global_cleanup();
	return status;
}
