/*
 * Non-streamed requests, whose decode (or aggregate) leg still streams from
 * the engine so that the first-token and read-gap limits of spec 6 bound
 * it; Narwhal assembles the body the client asked for. Checked against
 * narwhal-sim: the assembled answer matches the engine's own non-streamed
 * answer, and the stream-only limits and failures behave as spec 4.2 and
 * 6 say for a request with no visible output yet.
 */
#include "build-config.h"

#include <string.h>

#include <curl/curl.h>

#include "integration/test-serve-common.h"

#define PROMPT "Tell me about the narwhal's tusk"

/* The first choice of a completion answer (borrowed from doc). */
static json_t *
first_choice(json_t *doc)
{
	json_t *choices = json_object_get(doc, "choices");

	g_assert_true(json_is_array(choices));
	g_assert_cmpuint(json_array_size(choices), ==, 1);
	return json_array_get(choices, 0);
}

static json_int_t
usage_of(json_t *doc, const char *field)
{
	return json_integer_value(json_object_get(json_object_get(doc, "usage"), field));
}

static void
test_same_as_engine(void)
{
	const char *const args[] = { "--engines", "2", "--time-scale", "50", NULL };
	struct serve_env e;
	struct sim_reply direct, routed;
	g_autofree char *body = NULL;
	json_t *want, *got, *wc, *gc;

	g_test_summary("/serve/spec-4.3/unstreamed-assembled: a non-streamed completion is "
	               "decoded as a stream and assembled into the body the engine itself "
	               "answers: same text, finish reason and usage");
	if (!serve_start(&e, args, "pd", NULL))
		return;
	body = serve_completion_body(&e, 7, FALSE);
	/* The simulator's text depends only on the prompt. */
	sim_http(e.sim.ports[1], "POST", "/v1/completions", body, NULL, 10000, &direct);
	g_assert_cmpint(direct.status, ==, 200);
	serve_post(&e, "/v1/completions", body, NULL, 10000, &routed);
	g_assert_cmpint(routed.status, ==, 200);
	want = sim_json(direct.body->str);
	got = sim_json(routed.body->str);
	g_assert_cmpstr(json_string_value(json_object_get(got, "object")), ==, "text_completion");
	g_assert_cmpstr(json_string_value(json_object_get(got, "model")), ==,
	                json_string_value(json_object_get(want, "model")));
	wc = first_choice(want);
	gc = first_choice(got);
	g_assert_cmpstr(json_string_value(json_object_get(gc, "text")), ==,
	                json_string_value(json_object_get(wc, "text")));
	g_assert_cmpuint(strlen(json_string_value(json_object_get(gc, "text"))), >, 0);
	g_assert_cmpstr(json_string_value(json_object_get(gc, "finish_reason")), ==, "length");
	g_assert_cmpint(usage_of(got, "completion_tokens"), ==, 7);
	g_assert_cmpint(usage_of(got, "prompt_tokens"), ==, usage_of(want, "prompt_tokens"));
	g_assert_cmpint(usage_of(got, "total_tokens"), ==, usage_of(want, "total_tokens"));
	json_decref(want);
	json_decref(got);
	sim_reply_clear(&direct);
	sim_reply_clear(&routed);
	g_assert_cmpint(serve_counter(&e, "requests_ok"), ==, 1);
	serve_clear(&e);
}

static void
test_chat_assembled(void)
{
	const char *const args[] = { "--engines", "1", "--time-scale", "50", NULL };
	struct serve_env e;
	struct sim_reply direct, routed;
	g_autofree char *body = NULL;
	json_t *want, *got, *msg;

	g_test_summary("/serve/spec-4.3/unstreamed-chat-assembled: a non-streamed chat "
	               "completion on one aggregate engine is assembled into a chat.completion "
	               "with the assistant's whole message");
	if (!serve_start(&e, args, NULL, "{\"controller\":{\"min_prefill\":1,\"min_decode\":1}}"))
		return;
	body = g_strdup_printf("{\"model\":\"%s\",\"messages\":[{\"role\":\"user\",\"content\":"
	                       "\"" PROMPT "\"}],\"max_tokens\":5}", e.model);
	sim_http(e.sim.ports[0], "POST", "/v1/chat/completions", body, NULL, 10000, &direct);
	g_assert_cmpint(direct.status, ==, 200);
	serve_post(&e, "/v1/chat/completions", body, NULL, 10000, &routed);
	g_assert_cmpint(routed.status, ==, 200);
	want = sim_json(direct.body->str);
	got = sim_json(routed.body->str);
	g_assert_cmpstr(json_string_value(json_object_get(got, "object")), ==, "chat.completion");
	msg = json_object_get(first_choice(got), "message");
	g_assert_cmpstr(json_string_value(json_object_get(msg, "role")), ==, "assistant");
	g_assert_cmpstr(json_string_value(json_object_get(msg, "content")), ==,
	                json_string_value(json_object_get(json_object_get(first_choice(want),
	                                                                  "message"), "content")));
	g_assert_cmpstr(json_string_value(json_object_get(first_choice(got), "finish_reason")), ==,
	                "length");
	g_assert_cmpint(usage_of(got, "completion_tokens"), ==, 5);
	json_decref(want);
	json_decref(got);
	sim_reply_clear(&direct);
	sim_reply_clear(&routed);
	serve_clear(&e);
}

static void
test_first_token_timeout_retried(void)
{
	const char *const args[] = { "--engines", "3", "--time-scale", "50", NULL };
	struct serve_env e;
	struct sim_reply r;
	g_autofree char *body = NULL;
	json_t *doc;

	g_test_summary("/serve/spec-6/first-token-timeout-unstreamed: a non-streamed request "
	               "whose decode hangs before its first token times out after "
	               "first_token_timeout_s, not the request deadline, and is retried on the "
	               "other decode engine (spec 4.2: no output was visible)");
	if (!serve_start(&e, args, "pdd", "{\"engine\":{\"first_token_timeout_s\":0.3},"
	                 "\"serving\":{\"max_attempts\":2,\"handoff_timeout_s\":5,"
	                 "\"retry_base_s\":0.01,\"retry_cap_s\":0.02}}"))
		return;
	/* Ties go to the lower instance ID: engine 1 gets the first decode. */
	g_assert_cmpint(sim_set_faults(&e.sim, 1, "{\"hang_before_first_token\":true}"), ==, 200);
	body = serve_completion_body(&e, 4, FALSE);
	serve_post(&e, "/v1/completions", body, NULL, 10000, &r);
	g_assert_cmpint(r.status, ==, 200);
	g_assert_cmpfloat(r.seconds, >=, 0.3);
	g_assert_cmpfloat(r.seconds, <, 3.0);
	doc = sim_json(r.body->str);
	g_assert_cmpint(usage_of(doc, "completion_tokens"), ==, 4);
	json_decref(doc);
	sim_reply_clear(&r);
	g_assert_cmpint(serve_counter(&e, "first_token_timeouts"), ==, 1);
	g_assert_cmpint(serve_counter(&e, "retries"), ==, 1);
	/* The abandoned decode was aborted on the hung engine. */
	g_assert_true(serve_wait_stat(&e, 1, "active_requests", 0, 2000));
	serve_clear(&e);
}

static void
test_read_gap(void)
{
	const char *const args[] = { "--engines", "2", NULL };
	struct serve_env e;
	struct sim_reply r;
	g_autofree char *body = NULL;

	g_test_summary("/serve/spec-6/read-gap-unstreamed: a non-streamed request whose decode "
	               "goes silent between tokens for longer than decode_read_timeout_s fails "
	               "with 504 read_timeout");
	if (!serve_start(&e, args, "pd", "{\"engine\":{\"first_token_timeout_s\":20,"
	                 "\"decode_read_timeout_s\":0.2}}"))
		return;
	/* Every step of the decode engine takes 50 times as long: a few
	 * hundred milliseconds between tokens. */
	g_assert_cmpint(sim_set_faults(&e.sim, 1, "{\"latency_multiplier\":50}"), ==, 200);
	body = serve_completion_body(&e, 20, FALSE);
	serve_post(&e, "/v1/completions", body, NULL, 30000, &r);
	serve_assert_error(&r, 504, "read_timeout");
	g_assert_cmpfloat(r.seconds, <, 15.0);
	sim_reply_clear(&r);
	g_assert_cmpint(serve_counter(&e, "read_gap_timeouts"), ==, 1);
	g_assert_true(serve_wait_stat(&e, 1, "active_requests", 0, 2000));
	serve_clear(&e);
}

/* A fault on decode engine 1 of a "pdd" fleet makes the request retry on
 * engine 2; the answer must be engine 2's alone, with nothing of the failed
 * attempt's partial text. */
static void
check_retried_clean(const char *fault, const char *summary)
{
	const char *const args[] = { "--engines", "3", "--time-scale", "50", NULL };
	struct serve_env e;
	struct sim_reply direct, routed;
	g_autofree char *body = NULL;
	json_t *want, *got;

	g_test_summary(summary);
	if (!serve_start(&e, args, "pdd", "{\"serving\":{\"max_attempts\":2,\"handoff_timeout_s\":5,"
	                 "\"retry_base_s\":0.01,\"retry_cap_s\":0.02}}"))
		return;
	body = serve_completion_body(&e, 6, FALSE);
	sim_http(e.sim.ports[2], "POST", "/v1/completions", body, NULL, 10000, &direct);
	g_assert_cmpint(direct.status, ==, 200);
	g_assert_cmpint(sim_set_faults(&e.sim, 1, fault), ==, 200);
	serve_post(&e, "/v1/completions", body, NULL, 10000, &routed);
	g_assert_cmpint(routed.status, ==, 200);
	want = sim_json(direct.body->str);
	got = sim_json(routed.body->str);
	g_assert_cmpstr(json_string_value(json_object_get(first_choice(got), "text")), ==,
	                json_string_value(json_object_get(first_choice(want), "text")));
	g_assert_cmpint(usage_of(got, "completion_tokens"), ==, 6);
	json_decref(want);
	json_decref(got);
	sim_reply_clear(&direct);
	sim_reply_clear(&routed);
	g_assert_cmpint(serve_counter(&e, "retries"), ==, 1);
	g_assert_cmpint(serve_counter(&e, "requests_ok"), ==, 1);
	serve_clear(&e);
}

static void
test_in_band_error_retried(void)
{
	check_retried_clean("{\"error_after_tokens\":2}",
	                    "/serve/spec-4.2/unstreamed-in-band-error-retried: an error event in "
	                    "the middle of a non-streamed request's decode stream discards the "
	                    "partial answer and retries; the client sees one clean body");
}

static void
test_death_retried(void)
{
	check_retried_clean("{\"die_after_tokens\":3}",
	                    "/serve/spec-4.2/unstreamed-death-retried: a decode engine that dies "
	                    "mid-stream under a non-streamed request is retried elsewhere, and "
	                    "the answer holds the retry's text alone");
}

static void
test_response_bound(void)
{
	const char *const args[] = { "--engines", "2", "--time-scale", "50", NULL };
	struct serve_env e;
	struct sim_reply r;
	g_autofree char *body = NULL;

	g_test_summary("/serve/spec-4.2/unstreamed-max-response-bytes: the event payloads a "
	               "non-streamed attempt takes in are bounded by serving.max_response_bytes: "
	               "beyond it, 502 response_too_large");
	if (!serve_start(&e, args, "pd", "{\"serving\":{\"max_response_bytes\":2000}}"))
		return;
	body = serve_completion_body(&e, 40, FALSE);
	serve_post(&e, "/v1/completions", body, NULL, 10000, &r);
	serve_assert_error(&r, 502, "response_too_large");
	sim_reply_clear(&r);
	/* A short answer fits. */
	g_free(body);
	body = serve_completion_body(&e, 2, FALSE);
	serve_post(&e, "/v1/completions", body, NULL, 10000, &r);
	g_assert_cmpint(r.status, ==, 200);
	sim_reply_clear(&r);
	serve_clear(&e);
}

static void
test_stream_decode_off(void)
{
	const char *const args[] = { "--engines", "2", "--time-scale", "50", NULL };
	struct serve_env e;
	struct sim_reply r;
	g_autofree char *body = NULL;
	json_t *doc;

	g_test_summary("/serve/config/stream-decode-off: with engine.stream_decode false a "
	               "non-streamed request's decode leg is answered in one body, passed on "
	               "as the engine sent it; a hung decode is then bounded by the request "
	               "deadline alone (504 expired), not by first_token_timeout_s");
	if (!serve_start(&e, args, "pd", "{\"engine\":{\"stream_decode\":false,"
	                 "\"first_token_timeout_s\":0.2},"
	                 "\"serving\":{\"request_timeout_s\":1.5}}"))
		return;
	body = serve_completion_body(&e, 5, FALSE);
	serve_post(&e, "/v1/completions", body, NULL, 10000, &r);
	g_assert_cmpint(r.status, ==, 200);
	doc = sim_json(r.body->str);
	/* The engine's own non-streamed body: it carries kv_transfer_params,
	 * which an assembled answer does not. */
	g_assert_true(json_object_get(doc, "kv_transfer_params") != NULL);
	g_assert_cmpint(usage_of(doc, "completion_tokens"), ==, 5);
	json_decref(doc);
	sim_reply_clear(&r);
	g_assert_cmpint(sim_set_faults(&e.sim, 1, "{\"hang_before_first_token\":true}"), ==, 200);
	serve_post(&e, "/v1/completions", body, NULL, 10000, &r);
	serve_assert_error(&r, 504, "expired");
	g_assert_cmpfloat(r.seconds, >=, 1.4);
	sim_reply_clear(&r);
	g_assert_cmpint(serve_counter(&e, "first_token_timeouts"), ==, 0);
	serve_clear(&e);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	g_test_add_func("/serve/spec-4.3/unstreamed-assembled", test_same_as_engine);
	g_test_add_func("/serve/spec-4.3/unstreamed-chat-assembled", test_chat_assembled);
	g_test_add_func("/serve/spec-6/first-token-timeout-unstreamed",
	                test_first_token_timeout_retried);
	g_test_add_func("/serve/spec-6/read-gap-unstreamed", test_read_gap);
	g_test_add_func("/serve/spec-4.2/unstreamed-in-band-error-retried",
	                test_in_band_error_retried);
	g_test_add_func("/serve/spec-4.2/unstreamed-death-retried", test_death_retried);
	g_test_add_func("/serve/spec-4.2/unstreamed-max-response-bytes", test_response_bound);
	g_test_add_func("/serve/config/stream-decode-off", test_stream_decode_off);
	return g_test_run();
}
