/*
 * What clients see when engines fail (issue 9): context length checked
 * before any leg, length refusals in the client's own terms, engine text
 * and addresses kept out of answers (and in the log), 4xx validation
 * passed on, serving.stream_commit, an expired handoff charged to its
 * producer, and read-gap retries. Against narwhal-sim (fault injection,
 * docs/simulator.md) and a scripted fake engine for bodies the simulator
 * does not send.
 */
#include "build-config.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "integration/test-serve-common.h"

/* Config merged over the harness's: no monitor pass during a test after
 * the first, and no passive detection (docs/recovery.md), so a faulted
 * engine stays in the fleet and its failure is the request's. */
#define QUIET_MONITOR "\"controller\":{\"monitor_interval_s\":600}," \
                      "\"recovery\":{\"passive_failures\":0}"

static void
assert_absent(const struct sim_reply *r, const char *needle)
{
	if (strstr(r->body->str, needle) != NULL) {
		g_printerr("the client saw \"%s\" in: %s\n", needle, r->body->str);
		g_assert_not_reached();
	}
}

static json_t *
error_of(const char *text)
{
	json_t *doc = sim_json(text);
	json_t *err = json_incref(json_object_get(doc, "error"));

	json_decref(doc);
	g_assert_true(json_is_object(err));
	return err;
}

/* The last event of a stream (owned JSON). */
static json_t *
last_event(const struct sim_reply *r)
{
	GPtrArray *events = sim_sse_events(r->body->str);
	json_t *doc;

	g_assert_cmpuint(events->len, >, 0);
	doc = sim_json(g_ptr_array_index(events, events->len - 1));
	g_ptr_array_free(events, TRUE);
	return doc;
}

/* --- a scripted fake engine ----------------------------------------- */

/* Answers the monitor's calls, and every POST with the raw HTTP response it
 * holds, then closes the connection. */
struct fake_engine {
	struct serve_fake_engine srv;
	const char *response;
	const char *tokenize; /* the answer to POST /tokenize; NULL: response */
};

static void
fake_connection(int fd, gpointer data)
{
	struct fake_engine *f = data;
	GString *in = g_string_new(NULL);
	char buf[4096];
	ssize_t n;

	while (strstr(in->str, "\r\n\r\n") == NULL && (n = recv(fd, buf, sizeof buf, 0)) > 0)
		g_string_append_len(in, buf, n);
	if (serve_fake_answer_control(fd, in->str, TRUE) >= 0) {
		/* the monitor's call: answered */
	} else if (strstr(in->str, "\r\n\r\n") != NULL) {
		serve_send_all(fd, f->tokenize != NULL && g_str_has_prefix(in->str, "POST /tokenize ")
		                           ? f->tokenize : f->response);
	}
	shutdown(fd, SHUT_WR);
	while (recv(fd, buf, sizeof buf, 0) > 0)
		;
	close(fd);
	g_string_free(in, TRUE);
}

static void
fake_engine_start(struct fake_engine *f, const char *response, const char *tokenize)
{
	memset(f, 0, sizeof *f);
	f->response = response;
	f->tokenize = tokenize;
	serve_fake_engine_start(&f->srv, fake_connection, f);
}

/* narwhal alone in front of the fake engine (the sim only to satisfy the
 * harness, stopped right away), with serving settings when serving is not
 * NULL (the members of the "serving" object), and with engine.tokenize on,
 * answered by tokenize, when tokenize is not NULL. */
static gboolean
start_with_fake_engine(struct serve_env *e, struct fake_engine *f, const char *response,
                       const char *tokenize, const char *serving)
{
	const char *const args[] = { "--engines", "1", NULL };
	g_autofree char *config = NULL;

	if (!serve_start(e, args, NULL, NULL))
		return FALSE;
	fake_engine_start(f, response, tokenize);
	g_assert_cmpint(serve_stop_daemon(e, SIGTERM, 10000), ==, 0);
	config = g_strdup_printf("{\"engine\":{\"tokenize\":%s},"
	                         "\"controller\":{\"min_prefill\":1,\"min_decode\":1,"
	                         "\"monitor_interval_s\":600},\"serving\":{%s},"
	                         "\"fleet\":{\"model\":\"opt-13b-a100\",\"engines\":[{\"id\":\"fake\","
	                         "\"url\":\"http://127.0.0.1:%u\",\"role\":\"prefill\"}]}}",
	                         tokenize != NULL ? "true" : "false", serving != NULL ? serving : "",
	                         f->srv.port);
	g_assert_true(serve_start_daemon(e, config, NULL));
	return TRUE;
}

static gboolean
start_with_fake_serving(struct serve_env *e, struct fake_engine *f, const char *response,
                        const char *serving)
{
	return start_with_fake_engine(e, f, response, NULL, serving);
}

static gboolean
start_with_fake(struct serve_env *e, struct fake_engine *f, const char *response)
{
	return start_with_fake_serving(e, f, response, NULL);
}

#define PLAIN "{\"model\":\"opt-13b-a100\",\"prompt\":\"Hi\",\"max_tokens\":2}"
#define STREAM "{\"model\":\"opt-13b-a100\",\"prompt\":\"Hi\",\"max_tokens\":2,\"stream\":true}"

/* --- context length ------------------------------------------------- */

static void
test_context_before_any_leg(void)
{
	const char *const args[] = { "--engines", "2", "--time-scale", "50",
	                             "--max-model-len", "64", NULL };
	const char *hdr[] = { "X-Request-Id: too-long", NULL };
	struct serve_env e;
	struct sim_reply r;
	g_autofree char *fits_not = NULL, *long_prompt = NULL;
	GString *words = g_string_new(NULL);
	json_t *err, *stats;

	g_test_summary("/serve/issue-9/context-before-any-leg: with the exact token count and "
	               "the model's max_model_len known, a streamed request that cannot fit gets "
	               "HTTP 400 context_length_exceeded naming max_tokens (or the prompt) before "
	               "any leg: no 200, and the engines saw no prefill");
	if (!serve_start(&e, args, "pd", "{" QUIET_MONITOR "}"))
		return;
	g_assert_true(serve_wait_log(&e, "\"event\":\"model_discovered\"", 5000));
	fits_not = g_strdup_printf("{\"model\":\"%s\",\"prompt\":\"Tell me about whales\","
	                           "\"max_tokens\":500,\"stream\":true}", e.model);
	serve_post(&e, "/v1/completions", fits_not, hdr, 10000, &r);
	serve_assert_error(&r, 400, "context_length_exceeded");
	err = error_of(r.body->str);
	g_assert_cmpstr(json_string_value(json_object_get(err, "param")), ==, "max_tokens");
	g_assert_nonnull(strstr(json_string_value(json_object_get(err, "message")), "500"));
	g_assert_nonnull(strstr(json_string_value(json_object_get(err, "message")), "64"));
	json_decref(err);
	sim_reply_clear(&r);

	for (int i = 0; i < 100; i++)
		g_string_append(words, "whale ");
	long_prompt = g_strdup_printf("{\"model\":\"%s\",\"messages\":[{\"role\":\"user\","
	                              "\"content\":\"%s\"}],\"stream\":true}", e.model, words->str);
	serve_post(&e, "/v1/chat/completions", long_prompt, NULL, 10000, &r);
	serve_assert_error(&r, 400, "context_length_exceeded");
	err = error_of(r.body->str);
	g_assert_cmpstr(json_string_value(json_object_get(err, "param")), ==, "messages");
	json_decref(err);
	sim_reply_clear(&r);

	g_assert_cmpint(serve_counter(&e, "refused_context_length"), ==, 2);
	g_assert_cmpint(serve_counter(&e, "prefill_started"), ==, 0);
	g_assert_cmpint(serve_counter(&e, "aggregate_started"), ==, 0);
	stats = sim_engine_stats(&e.sim, 0);
	g_assert_cmpint(json_integer_value(json_object_get(stats, "prompt_tokens_total")), ==, 0);
	json_decref(stats);
	g_string_free(words, TRUE);
	serve_clear(&e);
}

/* Issue 10 (the monitor): "an engine that was not listening when Narwhal
 * started is asked again". The model's maximum length comes from the
 * engines' models answer; with every engine down at start nothing is
 * known, and once one comes up the monitor asks it, so the context check
 * before any leg then applies. */
static void
test_model_asked_when_engine_comes_up(void)
{
	const char *const args[] = { "--engines", "2", "--time-scale", "50",
	                             "--max-model-len", "64", NULL };
	const char *fast = "{\"controller\":{\"monitor_interval_s\":0.2}}";
	struct serve_env e;
	struct sim_reply r;
	g_autofree char *fits_not = NULL, *log = NULL;

	g_test_summary("/serve/issue-10/model-asked-when-engine-comes-up: engines refusing at "
	               "start are asked for their model once they listen, and the context check "
	               "before any leg then applies");
	if (!serve_start(&e, args, "pd", fast))
		return;
	g_assert_cmpint(serve_stop_daemon(&e, SIGTERM, 10000), ==, 0);
	g_assert_cmpint(sim_set_faults(&e.sim, 0, "{\"refuse_connections\": true}"), ==, 200);
	g_assert_cmpint(sim_set_faults(&e.sim, 1, "{\"refuse_connections\": true}"), ==, 200);
	g_assert_true(serve_start_daemon(&e, fast, NULL));
	g_assert_true(serve_wait_log(&e, "\"event\":\"engine_unavailable\"", 5000));
	log = serve_log(&e);
	g_assert_null(strstr(log, "model_discovered"));
	g_assert_cmpint(sim_set_faults(&e.sim, 0, "{\"refuse_connections\": false}"), ==, 200);
	g_assert_cmpint(sim_set_faults(&e.sim, 1, "{\"refuse_connections\": false}"), ==, 200);
	g_assert_true(serve_wait_log(&e, "\"event\":\"model_discovered\"", 10000));
	/* Verified and readmitted: the exact count needs a tokenise leg. */
	g_assert_true(serve_wait_all_available(&e, 10000));
	fits_not = g_strdup_printf("{\"model\":\"%s\",\"prompt\":\"Tell me about whales\","
	                           "\"max_tokens\":500,\"stream\":true}", e.model);
	serve_post(&e, "/v1/completions", fits_not, NULL, 10000, &r);
	serve_assert_error(&r, 400, "context_length_exceeded");
	sim_reply_clear(&r);
	serve_clear(&e);
}

static void
test_length_refusal_message(void)
{
	const char *const args[] = { "--engines", "2", "--time-scale", "50",
	                             "--max-model-len", "64", NULL };
	struct serve_env e;
	struct sim_reply r;
	GString *words = g_string_new(NULL);
	g_autofree char *plain = NULL, *stream = NULL;

	g_test_summary("/serve/issue-9/length-refusal-message: when the engine refuses for "
	               "length (no exact count to check before), the client's message describes "
	               "its own max_tokens, never the prefill leg's 1 output token; streamed too");
	/* Without tokenise calls the count is an estimate: no check before. */
	if (!serve_start(&e, args, "pd", "{\"engine\":{\"tokenize\":false}," QUIET_MONITOR "}"))
		return;
	for (int i = 0; i < 100; i++)
		g_string_append(words, "whale ");
	plain = g_strdup_printf("{\"model\":\"%s\",\"prompt\":\"%s\",\"max_tokens\":7}", e.model,
	                        words->str);
	stream = g_strdup_printf("{\"model\":\"%s\",\"prompt\":\"%s\",\"max_tokens\":7,"
	                         "\"stream\":true}", e.model, words->str);
	for (int i = 0; i < 2; i++) {
		json_t *err;
		const char *msg;

		serve_post(&e, "/v1/completions", i ? stream : plain, NULL, 10000, &r);
		serve_assert_error(&r, 400, "context_length_exceeded");
		err = error_of(r.body->str);
		msg = json_string_value(json_object_get(err, "message"));
		g_assert_null(strstr(msg, "1 output token"));
		g_assert_nonnull(strstr(msg, "max_tokens 7"));
		json_decref(err);
		sim_reply_clear(&r);
	}
	g_assert_cmpint(serve_counter(&e, "context_too_long"), ==, 2);
	/* The engine's own words are in the log. */
	g_assert_true(serve_wait_log(&e, "1 output tokens", 1000));
	g_string_free(words, TRUE);
	serve_clear(&e);
}

/* --- engine text ---------------------------------------------------- */

#define SECRET_BODY "{\"error\":{\"message\":\"Traceback: File /opt/vllm/engine/core.py, " \
	"line 7: lost 10.9.8.7:5557\",\"type\":\"InternalServerError\",\"code\":500}}"

static void
test_5xx_body_hidden(void)
{
	static const char resp[] = "HTTP/1.1 500 Internal Server Error\r\nContent-Type: "
		"application/json\r\nConnection: close\r\nContent-Length: 132\r\n\r\n" SECRET_BODY;
	const char *hdr[] = { "X-Request-Id: hide-me", NULL };
	struct serve_env e;
	struct fake_engine f;
	struct sim_reply r;

	g_test_summary("/serve/issue-9/5xx-body-hidden: an engine's 5xx body with a path, an "
	               "address and a traceback never reaches the client, streamed or not; the "
	               "client reads the engine's id and the request id, the log the full text");
	g_assert_cmpuint(strlen(SECRET_BODY), ==, 132);
	if (!start_with_fake(&e, &f, resp))
		return;
	for (int i = 0; i < 2; i++) {
		json_t *err;
		const char *msg;

		serve_post(&e, "/v1/completions", i ? STREAM : PLAIN, hdr, 10000, &r);
		/* An aggregate stream commits on the engine's 200: a 500 is a
		 * real status for both. */
		serve_assert_error(&r, 502, "engine_error");
		assert_absent(&r, "/opt/vllm");
		assert_absent(&r, "10.9.8.7");
		assert_absent(&r, "Traceback");
		err = error_of(r.body->str);
		msg = json_string_value(json_object_get(err, "message"));
		g_assert_nonnull(strstr(msg, "fake"));
		g_assert_nonnull(strstr(msg, "hide-me"));
		json_decref(err);
		sim_reply_clear(&r);
	}
	g_assert_true(serve_wait_log(&e, "\"event\":\"engine_error\",\"request_id\":\"hide-me\"",
	                             1000));
	g_assert_true(serve_wait_log(&e, "/opt/vllm/engine/core.py", 1000));
	serve_clear(&e);
	serve_fake_engine_stop(&f.srv);
}

static void
test_error_event_hidden(void)
{
	static const char resp[] = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
		"Connection: close\r\n\r\n"
		"data: {\"id\":\"cmpl-x\",\"object\":\"text_completion\",\"created\":1,\"model\":"
		"\"opt-13b-a100\",\"choices\":[{\"index\":0,\"text\":\" a\",\"logprobs\":null,"
		"\"finish_reason\":null,\"stop_reason\":null}]}\n\n"
		"data: " SECRET_BODY "\n\n"
		"data: [DONE]\n\n";
	const char *hdr[] = { "X-Request-Id: hide-event", NULL };
	struct serve_env e;
	struct fake_engine f;
	struct sim_reply r;
	json_t *ev;

	g_test_summary("/serve/issue-9/error-event-hidden: an engine's in-band error event "
	               "(path, address) is not relayed; Narwhal's own error event ends the "
	               "stream, naming the engine id and the request id; the log has the text");
	if (!start_with_fake(&e, &f, resp))
		return;
	serve_post(&e, "/v1/completions", STREAM, hdr, 10000, &r);
	g_assert_cmpint(r.status, ==, 200);
	assert_absent(&r, "/opt/vllm");
	assert_absent(&r, "10.9.8.7");
	assert_absent(&r, "[DONE]");
	g_assert_nonnull(strstr(r.body->str, "\" a\""));
	ev = last_event(&r);
	g_assert_nonnull(strstr(json_string_value(json_object_get(json_object_get(ev, "error"),
	                                                          "message")), "hide-event"));
	json_decref(ev);
	sim_reply_clear(&r);
	serve_post(&e, "/v1/completions", PLAIN, hdr, 10000, &r);
	serve_assert_error(&r, 502, "engine_error");
	assert_absent(&r, "/opt/vllm");
	sim_reply_clear(&r);
	g_assert_true(serve_wait_log(&e, "/opt/vllm/engine/core.py", 1000));
	serve_clear(&e);
	serve_fake_engine_stop(&f.srv);
}

/* docs/api.md: an event is bounded by serving.max_response_bytes, all of
 * its lines counted. Comment and event: lines with no blank line between
 * them used to pass both that bound and the relay's backlog bound, so an
 * engine could make one stream hold memory without end. */
static void
test_endless_event_bounded(void)
{
	static const char head[] = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
		"Connection: close\r\n\r\n"
		"data: {\"id\":\"cmpl-x\",\"object\":\"text_completion\",\"created\":1,\"model\":"
		"\"opt-13b-a100\",\"choices\":[{\"index\":0,\"text\":\" a\",\"logprobs\":null,"
		"\"finish_reason\":null,\"stop_reason\":null}]}\n\n";
	const char *hdr[] = { "X-Request-Id: endless", NULL };
	g_autoptr(GString) resp = g_string_new(head);
	struct serve_env e;
	struct fake_engine f;
	struct sim_reply r;
	json_t *ev;

	g_test_summary("/serve/spec-4.3/endless-event-bounded: an engine event that grows "
	               "out of comment and event: lines, with no blank line, ends the stream at "
	               "serving.max_response_bytes with response_too_large, streamed or not");
	/* 64 KiB of lines that are not data, then the terminator. */
	for (int i = 0; i < 4096; i++)
		g_string_append(resp, i % 2 ? ": keepalive\n" : "event: ping\n");
	g_string_append(resp, "data: [DONE]\n\n");
	if (!start_with_fake_serving(&e, &f, resp->str, "\"max_response_bytes\": 8192"))
		return;
	serve_post(&e, "/v1/completions", STREAM, hdr, 10000, &r);
	g_assert_cmpint(r.status, ==, 200);
	g_assert_nonnull(strstr(r.body->str, "\" a\""));
	assert_absent(&r, "[DONE]");
	assert_absent(&r, "keepalive");
	ev = last_event(&r);
	g_assert_cmpstr(json_string_value(json_object_get(json_object_get(ev, "error"), "code")),
	                ==, "response_too_large");
	json_decref(ev);
	sim_reply_clear(&r);
	serve_post(&e, "/v1/completions", PLAIN, hdr, 10000, &r);
	serve_assert_error(&r, 502, "response_too_large");
	sim_reply_clear(&r);
	serve_clear(&e);
	serve_fake_engine_stop(&f.srv);
}

static void
check_not_a_stream(const char *response, const char *name)
{
	struct serve_env e;
	struct fake_engine f;
	struct sim_reply r;

	if (!start_with_fake(&e, &f, response))
		return;
	serve_post(&e, "/v1/completions", STREAM, NULL, 10000, &r);
	serve_assert_error(&r, 502, "engine_bad_response");
	sim_reply_clear(&r);
	serve_post(&e, "/v1/completions", PLAIN, NULL, 10000, &r);
	serve_assert_error(&r, 502, "engine_bad_response");
	assert_absent(&r, "whale");
	sim_reply_clear(&r);
	g_assert_true(serve_wait_log(&e, name, 1000));
	serve_clear(&e);
	serve_fake_engine_stop(&f.srv);
}

/* docs/api.md: a 2xx answer that is not the event stream asked for is an
 * answer Narwhal cannot read (502 engine_bad_response, not retried), not a
 * cut transfer (engine_unreachable). */
static void
test_not_a_stream(void)
{
	g_test_summary("/serve/issue-9/not-a-stream: a complete 2xx answer to a stream leg "
	               "with another Content-Type, or with a Content-Encoding, is 502 "
	               "engine_bad_response, streamed or not");
	check_not_a_stream("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 21\r\n"
	                   "Connection: close\r\n\r\n<html>whale page</ht>", "Content-Type");
	check_not_a_stream("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
	                   "Content-Encoding: gzip\r\nConnection: close\r\n\r\n"
	                   "\x1f\x8b whale", "Content-Encoding");
}

/* docs/api.md: a non-streamed answer is assembled from the engine's
 * chunks; a stream that ends before any is an answer Narwhal cannot read,
 * not a 200 with no choice. */
static void
test_no_chunk(void)
{
	g_test_summary("/serve/issue-9/no-chunk: a decode stream with [DONE] and no chunk before "
	               "it gives a non-streamed client 502 engine_bad_response, not an empty 200");
	static const char resp[] = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
		"Connection: close\r\n\r\n\n\n: ping\n\ndata: [DONE]\n\n";
	struct serve_env e;
	struct fake_engine f;
	struct sim_reply r;

	if (!start_with_fake(&e, &f, resp))
		return;
	serve_post(&e, "/v1/completions", PLAIN, NULL, 10000, &r);
	serve_assert_error(&r, 502, "engine_bad_response");
	sim_reply_clear(&r);
	g_assert_true(serve_wait_log(&e, "before any chunk", 1000));
	serve_clear(&e);
	serve_fake_engine_stop(&f.srv);
}

/* docs/dialects.md: in a stream the code or the type gives the status; an
 * engine's refusal of the client's own request, sent as the stream's first
 * event, reaches the client as a 400's words do, its addresses hidden. */
static void
test_in_band_400_passed_on(void)
{
	static const char resp[] = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
		"Connection: close\r\n\r\n"
		"data: {\"error\":{\"message\":\"top_k must be -1 or at least 1, got 0 "
		"(at http://10.9.8.7:8000)\",\"type\":\"BadRequestError\",\"code\":400}}\n\n";
	struct serve_env e;
	struct fake_engine f;
	struct sim_reply r;
	json_t *err;

	g_test_summary("/serve/issue-9/in-band-400-passed-on: an error event of code 400 about "
	               "the client's own request gives it 400 engine_rejected with the engine's "
	               "words, addresses hidden, as an HTTP 400 does");
	if (!start_with_fake_serving(&e, &f, resp, "\"stream_commit\": \"first_event\""))
		return;
	for (int i = 0; i < 2; i++) {
		serve_post(&e, "/v1/completions", i ? STREAM : PLAIN, NULL, 10000, &r);
		serve_assert_error(&r, 400, "engine_rejected");
		err = error_of(r.body->str);
		g_assert_nonnull(strstr(json_string_value(json_object_get(err, "message")),
		                        "top_k must be -1"));
		json_decref(err);
		assert_absent(&r, "10.9.8.7");
		sim_reply_clear(&r);
	}
	serve_clear(&e);
	serve_fake_engine_stop(&f.srv);
}

/* An engine that counts the prompt longer than Narwhal did (a template,
 * its own tokenizer) refuses for length a request whose sums fit: the
 * client's message must not show those sums as if they did not. */
static void
test_length_refusal_despite_sums(void)
{
	static const char refusal[] = "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n"
		"Connection: close\r\nContent-Length: 154\r\n\r\n"
		"{\"object\":\"error\",\"message\":\"This model's maximum context length is 2048 "
		"tokens. However, you requested 2100 tokens.\",\"type\":\"BadRequestError\",\"code\":400}";
	static const char tokenized[] = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
		"Connection: close\r\nContent-Length: 49\r\n\r\n"
		"{\"count\":5,\"max_model_len\":2048,\"tokens\":[1,2,3]}";
	struct serve_env e;
	struct fake_engine f;
	struct sim_reply r;
	json_t *err;
	const char *msg;

	g_test_summary("/serve/issue-9/length-refusal-despite-sums: an engine's length refusal "
	               "of a request whose exact sums fit is 400 context_length_exceeded without "
	               "the contradicting arithmetic");
	if (!start_with_fake_engine(&e, &f, refusal, tokenized, NULL))
		return;
	g_assert_true(serve_wait_log(&e, "\"event\":\"model_discovered\"", 5000));
	serve_post(&e, "/v1/completions", PLAIN, NULL, 10000, &r);
	serve_assert_error(&r, 400, "context_length_exceeded");
	err = error_of(r.body->str);
	msg = json_string_value(json_object_get(err, "message"));
	g_test_message("%s", msg);
	g_assert_null(strstr(msg, "at most"));
	g_assert_nonnull(strstr(msg, "max_tokens 2"));
	json_decref(err);
	sim_reply_clear(&r);
	serve_clear(&e);
	serve_fake_engine_stop(&f.srv);
}

static void
test_4xx_passed_on(void)
{
	static const char resp[] = "HTTP/1.1 422 Unprocessable Entity\r\nContent-Type: "
		"application/json\r\nConnection: close\r\nContent-Length: 73\r\n\r\n"
		"{\"error\":{\"message\":\"top_k must be -1 or at least 1, got 0.\",\"code\":422}}";
	struct serve_env e;
	struct fake_engine f;
	struct sim_reply r;
	json_t *err;

	g_test_summary("/serve/issue-9/4xx-passed-on: an engine's validation message about the "
	               "client's own request reaches the client, as 400 engine_rejected");
	if (!start_with_fake(&e, &f, resp))
		return;
	serve_post(&e, "/v1/completions", PLAIN, NULL, 10000, &r);
	serve_assert_error(&r, 400, "engine_rejected");
	err = error_of(r.body->str);
	g_assert_cmpstr(json_string_value(json_object_get(err, "message")), ==,
	                "top_k must be -1 or at least 1, got 0.");
	json_decref(err);
	sim_reply_clear(&r);
	serve_clear(&e);
	serve_fake_engine_stop(&f.srv);
}

static void
test_transport_error_hidden(void)
{
	const char *const args[] = { "--engines", "2", "--time-scale", "50", NULL };
	struct serve_env e;
	struct sim_reply r;
	g_autofree char *plain = NULL, *stream = NULL, *port = NULL;

	g_test_summary("/serve/issue-9/transport-error-hidden: a refused connection to "
	               "127.0.0.1:PORT is reported to the client without the address or port, "
	               "streamed (error event) and not; the log has both");
	if (!serve_start(&e, args, "pd", "{" QUIET_MONITOR "}"))
		return;
	port = g_strdup_printf("%u", e.sim.ports[1]);
	g_assert_cmpint(sim_set_faults(&e.sim, 1, "{\"refuse_connections\":true}"), ==, 200);
	plain = serve_completion_body(&e, 3, FALSE);
	stream = serve_completion_body(&e, 3, TRUE);
	serve_post(&e, "/v1/completions", plain, NULL, 10000, &r);
	serve_assert_error(&r, 502, "engine_unreachable");
	assert_absent(&r, "127.0.0.1");
	assert_absent(&r, port);
	g_assert_nonnull(strstr(r.body->str, "sim-1"));
	sim_reply_clear(&r);
	serve_post(&e, "/v1/completions", stream, NULL, 10000, &r);
	/* spec 4.3: the 200 went out before the decode leg. */
	g_assert_cmpint(r.status, ==, 200);
	assert_absent(&r, "127.0.0.1");
	assert_absent(&r, port);
	g_assert_nonnull(strstr(r.body->str, "engine_unreachable"));
	sim_reply_clear(&r);
	g_assert_true(serve_wait_log(&e, "\"event\":\"engine_error\"", 1000));
	{
		g_autofree char *log = serve_log(&e);
		const char *line = strstr(log, "\"event\":\"engine_error\"");

		g_assert_nonnull(line);
		if (strstr(line, port) == NULL)
			g_printerr("log:\n%s\n", log);
		g_assert_nonnull(strstr(line, port));
	}
	serve_clear(&e);
}

/* --- serving.stream_commit ------------------------------------------ */

static void
test_first_event_retries(void)
{
	const char *const args[] = { "--engines", "3", "--time-scale", "50", NULL };
	struct serve_env e;
	struct sim_reply r;
	g_autofree char *stream = NULL;

	g_test_summary("/serve/issue-9/stream-commit-first-event: with first_event a streamed "
	               "request whose decode engine refuses connections is retried on the other "
	               "decode engine and streams in full (before_decode: transport-error-hidden)");
	if (!serve_start(&e, args, "pdd", "{\"serving\":{\"max_attempts\":2,\"handoff_timeout_s\":5,"
	                 "\"retry_base_s\":0.01,\"retry_cap_s\":0.02,\"stream_commit\":\"first_event\"},"
	                 QUIET_MONITOR "}"))
		return;
	/* Ties go to the lowest id: sim-1 is the first decode engine tried. */
	g_assert_cmpint(sim_set_faults(&e.sim, 1, "{\"refuse_connections\":true}"), ==, 200);
	stream = serve_completion_body(&e, 3, TRUE);
	serve_post(&e, "/v1/completions", stream, NULL, 10000, &r);
	g_assert_cmpint(r.status, ==, 200);
	g_assert_nonnull(strstr(r.body->str, "data: [DONE]"));
	assert_absent(&r, "\"error\"");
	sim_reply_clear(&r);
	g_assert_cmpint(serve_counter(&e, "retries"), ==, 1);
	serve_clear(&e);
}

static void
test_commit_modes(void)
{
	const char *const args[] = { "--engines", "2", "--time-scale", "50", NULL };
	struct serve_env e;
	struct sim_reply r;
	g_autofree char *stream = NULL;
	json_t *ev;

	g_test_summary("/serve/issue-9/stream-commit-status: a decode engine answering 503 on "
	               "every attempt: with first_event the client gets HTTP 502 engine_error "
	               "once the attempts run out; with before_decode (spec 4.3) a 200 and an "
	               "in-band engine_error event, not retried");
	if (!serve_start(&e, args, "pd", "{\"serving\":{\"max_attempts\":2,\"handoff_timeout_s\":5,"
	                 "\"retry_base_s\":0.01,\"retry_cap_s\":0.02,\"stream_commit\":\"first_event\"},"
	                 QUIET_MONITOR "}"))
		return;
	g_assert_cmpint(sim_set_faults(&e.sim, 1, "{\"error_rate\":1,\"error_status\":503}"), ==, 200);
	stream = serve_completion_body(&e, 3, TRUE);
	serve_post(&e, "/v1/completions", stream, NULL, 10000, &r);
	serve_assert_error(&r, 502, "engine_error");
	sim_reply_clear(&r);
	g_assert_cmpint(serve_counter(&e, "retries"), ==, 1);
	g_assert_cmpint(serve_counter(&e, "decode_started"), ==, 2);

	g_assert_cmpint(serve_stop_daemon(&e, SIGTERM, 10000), ==, 0);
	g_assert_true(serve_start_daemon(&e, "{\"serving\":{\"max_attempts\":2,"
	                                 "\"handoff_timeout_s\":5,\"retry_base_s\":0.01,"
	                                 "\"retry_cap_s\":0.02}," QUIET_MONITOR "}", NULL));
	serve_post(&e, "/v1/completions", stream, NULL, 10000, &r);
	g_assert_cmpint(r.status, ==, 200);
	assert_absent(&r, "[DONE]");
	ev = last_event(&r);
	g_assert_cmpstr(json_string_value(json_object_get(json_object_get(ev, "error"), "code")),
	                ==, "engine_error");
	json_decref(ev);
	sim_reply_clear(&r);
	g_assert_cmpint(serve_counter(&e, "retries"), ==, 0);
	serve_clear(&e);
}

/* --- retries -------------------------------------------------------- */

static void
test_expired_handoff_blames_producer(void)
{
	const char *const args[] = { "--engines", "3", "--time-scale", "50", NULL };
	struct serve_env e;
	struct serve_async *hold;
	struct sim_reply r;
	g_autofree char *body = NULL;
	json_t *stats;

	g_test_summary("/serve/issue-9/expired-handoff-blames-producer: a handoff that expires "
	               "waiting for a decode slot is charged to its prefill engine: the retry's "
	               "prefill goes to the other prefill engine");
	if (!serve_start(&e, args, "ppd", "{\"serving\":{\"max_attempts\":2,"
	                 "\"handoff_timeout_s\":0.3,\"decode_concurrency\":1,"
	                 "\"prefill_concurrency\":4,\"retry_base_s\":0.01,\"retry_cap_s\":0.02},"
	                 "\"engine\":{\"first_token_timeout_s\":30}," QUIET_MONITOR "}"))
		return;
	/* One request holds the only decode slot. */
	g_assert_cmpint(sim_set_faults(&e.sim, 2, "{\"hang_before_first_token\":true}"), ==, 200);
	body = serve_completion_body(&e, 3, FALSE);
	hold = serve_post_async(&e, "/v1/completions", body, 4000);
	g_assert_true(serve_wait_stat(&e, 2, "active_requests", 1, 5000));
	stats = sim_engine_stats(&e.sim, 1);
	g_assert_cmpint(json_integer_value(json_object_get(stats, "prompt_tokens_total")), ==, 0);
	json_decref(stats);

	serve_post(&e, "/v1/completions", body, NULL, 10000, &r);
	serve_assert_error(&r, 504, "handoff_expired");
	sim_reply_clear(&r);
	g_assert_cmpint(serve_counter(&e, "retries"), ==, 1);
	g_assert_true(serve_wait_log(&e, "\"event\":\"request_retry\"", 1000));
	{
		g_autofree char *log = serve_log(&e);
		const char *line = strstr(log, "\"event\":\"request_retry\"");
		const char *eol = line ? strchr(line, '\n') : NULL;
		const char *blamed = line ? strstr(line, "\"engine\":\"sim-0\"") : NULL;

		/* The retry excluded the producer. */
		g_assert_true(blamed != NULL && (eol == NULL || blamed < eol));
	}
	/* The retry's prefill ran on sim-1, the other producer. */
	stats = sim_engine_stats(&e.sim, 1);
	g_assert_cmpint(json_integer_value(json_object_get(stats, "prompt_tokens_total")), >, 0);
	json_decref(stats);
	serve_async_join(hold, &r, NULL);
	sim_reply_clear(&r);
	serve_clear(&e);
}

static void
test_read_gap_retried(void)
{
	const char *const args[] = { "--engines", "3", "--time-scale", "50", NULL };
	struct serve_env e;
	struct sim_reply r;
	g_autofree char *body = NULL;

	g_test_summary("/serve/issue-9/read-gap-retried: a non-streamed request whose decode "
	               "stream goes silent past engine.decode_read_timeout_s, nothing sent to "
	               "the client yet, is retried on another decode engine and answered");
	if (!serve_start(&e, args, "pdd", "{\"serving\":{\"max_attempts\":2,\"handoff_timeout_s\":5,"
	                 "\"retry_base_s\":0.01,\"retry_cap_s\":0.02},"
	                 "\"engine\":{\"decode_read_timeout_s\":0.3,\"first_token_timeout_s\":20},"
	                 QUIET_MONITOR "}"))
		return;
	/* A 20 ms step at time scale 50 is 0.4 ms; a thousand times slower,
	 * 0.4 s: longer than the gap allowed. */
	g_assert_cmpint(sim_set_faults(&e.sim, 1, "{\"latency_multiplier\":1000}"), ==, 200);
	body = serve_completion_body(&e, 4, FALSE);
	serve_post(&e, "/v1/completions", body, NULL, 20000, &r);
	g_assert_cmpint(r.status, ==, 200);
	sim_reply_clear(&r);
	g_assert_cmpint(serve_counter(&e, "read_gap_timeouts"), ==, 1);
	g_assert_cmpint(serve_counter(&e, "retries"), ==, 1);
	serve_clear(&e);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/serve/issue-9/context-before-any-leg", test_context_before_any_leg);
	g_test_add_func("/serve/issue-10/model-asked-when-engine-comes-up", test_model_asked_when_engine_comes_up);
	g_test_add_func("/serve/issue-9/length-refusal-message", test_length_refusal_message);
	g_test_add_func("/serve/issue-9/5xx-body-hidden", test_5xx_body_hidden);
	g_test_add_func("/serve/issue-9/error-event-hidden", test_error_event_hidden);
	g_test_add_func("/serve/issue-9/4xx-passed-on", test_4xx_passed_on);
	g_test_add_func("/serve/spec-4.3/endless-event-bounded", test_endless_event_bounded);
	g_test_add_func("/serve/issue-9/not-a-stream", test_not_a_stream);
	g_test_add_func("/serve/issue-9/no-chunk", test_no_chunk);
	g_test_add_func("/serve/issue-9/in-band-400-passed-on", test_in_band_400_passed_on);
	g_test_add_func("/serve/issue-9/length-refusal-despite-sums",
	                test_length_refusal_despite_sums);
	g_test_add_func("/serve/issue-9/transport-error-hidden", test_transport_error_hidden);
	g_test_add_func("/serve/issue-9/stream-commit-first-event", test_first_event_retries);
	g_test_add_func("/serve/issue-9/stream-commit-status", test_commit_modes);
	g_test_add_func("/serve/issue-9/expired-handoff-blames-producer",
	                test_expired_handoff_blames_producer);
	g_test_add_func("/serve/issue-9/read-gap-retried", test_read_gap_retried);
	return g_test_run();
}
