/*
 * The data plane against narwhal-sim engines that misbehave (fault
 * injection through the simulator's admin API): retries, timeouts,
 * streaming failure semantics, the ceiling, queueing, phase slots, the
 * deadline, clients that leave or stop reading, and shutdown with work in
 * flight. Each test names its spec clause.
 */
#include "build-config.h"

#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <curl/curl.h>

#include "integration/test-serve-common.h"

static void
test_retry_503(void)
{
	const char *const args[] = { "--engines", "3", "--time-scale", "50", NULL };
	const char *hdr[] = { "X-Request-Id: retry-me", NULL };
	struct serve_env e;
	struct sim_reply r;
	g_autofree char *body = NULL, *rid = NULL;
	json_t *doc;

	g_test_summary("/serve/spec-4.2/retry-503-then-success: a prefill engine answering 503 "
	               "is retried on another with the same request id; the client sees one "
	               "clean answer");
	if (!serve_start(&e, args, "ppd", "{\"serving\":{\"max_attempts\":2,\"handoff_timeout_s\":5,"
	                 "\"retry_base_s\":0.01,\"retry_cap_s\":0.02}}"))
		return;
	/* Least-loaded ties go to the lowest id: sim-0 is tried first. */
	g_assert_cmpint(sim_set_faults(&e.sim, 0, "{\"error_rate\":1,\"error_status\":503}"), ==, 200);
	body = serve_completion_body(&e, 4, FALSE);
	serve_post(&e, "/v1/completions", body, hdr, 10000, &r);
	g_assert_cmpint(r.status, ==, 200);
	rid = sim_reply_header(&r, "X-Request-Id");
	g_assert_cmpstr(rid, ==, "retry-me");
	doc = sim_json(r.body->str);
	g_assert_cmpstr(json_string_value(json_object_get(doc, "id")), ==, "cmpl-retry-me");
	g_assert_cmpint(json_integer_value(json_object_get(json_object_get(doc, "usage"),
	                                                   "completion_tokens")), ==, 4);
	json_decref(doc);
	sim_reply_clear(&r);
	g_assert_cmpint(serve_counter(&e, "retries"), ==, 1);
	g_assert_cmpint(serve_counter(&e, "prefill_failed_status"), ==, 1);
	g_assert_true(serve_wait_log(&e, "\"event\":\"request_retry\",\"request_id\":\"retry-me\"", 1000));

	/* A prefill engine that dies (500) logs the id it was sent: the
	 * engines see the client's id, and the retry succeeds elsewhere. */
	g_assert_cmpint(sim_set_faults(&e.sim, 0, "{\"error_rate\":0,\"die_after_tokens\":0}"), ==, 200);
	{
		const char *hdr2[] = { "X-Request-Id: retry-me-2", NULL };

		serve_post(&e, "/v1/completions", body, hdr2, 10000, &r);
		g_assert_cmpint(r.status, ==, 200);
		g_assert_nonnull(strstr(r.body->str, "\"cmpl-retry-me-2\""));
		sim_reply_clear(&r);
	}
	g_assert_true(sim_wait_log(&e.sim, "\"event\":\"fault_died\",\"engine\":\"sim-0\","
	                           "\"request_id\":\"retry-me-2\"", 2000));
	g_assert_cmpint(serve_counter(&e, "retries"), ==, 2);
	serve_clear(&e);
}

/* Occurrences of needle in a narwhal-sim's log. */
static unsigned
sim_log_count(const struct sim_proc *p, const char *needle)
{
	g_autofree char *text = NULL;
	unsigned n = 0;

	if (!g_file_get_contents(p->err_path, &text, NULL, NULL))
		return 0;
	for (const char *at = strstr(text, needle); at != NULL; at = strstr(at + 1, needle))
		n++;
	return n;
}

/* The value of one of an engine's vllm:request_success_total samples. */
static double
sim_finished(const struct sim_proc *p, unsigned engine, const char *reason)
{
	g_autofree char *needle = g_strdup_printf("finished_reason=\"%s\"} ", reason);
	struct sim_reply r;
	const char *at;
	double v = -1;

	sim_http(p->ports[engine], "GET", "/metrics", NULL, NULL, 5000, &r);
	g_assert_cmpint(r.status, ==, 200);
	for (at = strstr(r.body->str, "vllm:request_success_total{"); at != NULL;
	     at = strstr(at + 1, "vllm:request_success_total{")) {
		const char *eol = strchr(at, '\n');
		const char *hit = strstr(at, needle);

		if (hit != NULL && (eol == NULL || hit < eol)) {
			v = g_ascii_strtod(hit + strlen(needle), NULL);
			break;
		}
	}
	sim_reply_clear(&r);
	g_assert_cmpfloat(v, >=, 0);
	return v;
}

static void
test_death_mid_stream(void)
{
	const char *const args[] = { "--engines", "2", "--time-scale", "50", NULL };
	const char *hdr[] = { "X-Request-Id: dies-mid-stream", NULL };
	struct serve_env e;
	struct sim_reply r;
	g_autofree char *body = NULL;
	GPtrArray *events;
	json_t *doc;

	g_test_summary("/serve/spec-4.3/death-mid-stream: a decode engine dying after 3 tokens "
	               "(its connection closes without the terminator) ends the client's stream "
	               "at once with one error event, code engine_unreachable, no [DONE], and "
	               "no retry");
	/* The read-gap limit is far away: only noticing the engine's closed
	 * connection can end the stream within the bound below. */
	if (!serve_start(&e, args, "pd", "{\"serving\":{\"max_attempts\":3,\"handoff_timeout_s\":5},"
	                 "\"engine\":{\"decode_read_timeout_s\":30}}"))
		return;
	g_assert_cmpint(sim_set_faults(&e.sim, 1, "{\"die_after_tokens\":3}"), ==, 200);
	body = serve_completion_body(&e, 10, TRUE);
	serve_post(&e, "/v1/completions", body, hdr, 10000, &r);
	g_test_message("curl %d after %.3f s: %s", r.curl_code, r.seconds, r.body->str);
	/* Narwhal ends the stream properly: the client's transfer is whole. */
	g_assert_cmpint(r.curl_code, ==, CURLE_OK);
	serve_assert_stream_error(&r, "engine_unreachable");
	g_assert_cmpfloat(r.seconds, <, 3.0);
	events = sim_sse_events(r.body->str);
	g_assert_cmpuint(events->len, ==, 4); /* three tokens, then the error */
	for (guint i = 0; i < 3; i++)
		g_assert_null(strstr(g_ptr_array_index(events, i), "\"error\""));
	doc = sim_json(g_ptr_array_index(events, 3));
	g_assert_cmpstr(json_string_value(json_object_get(json_object_get(doc, "error"), "type")),
	                ==, "server_error");
	json_decref(doc);
	g_ptr_array_free(events, TRUE);
	sim_reply_clear(&r);
	g_assert_true(serve_wait_log(&e, "\"event\":\"request_failed\","
	                             "\"request_id\":\"dies-mid-stream\",\"code\":\"engine_unreachable\"",
	                             1000));
	/* One decode, and no retry after visible output: narwhal started one
	 * decode leg and the decode engine saw (and killed) one request. */
	g_assert_cmpint(serve_counter(&e, "retries"), ==, 0);
	g_assert_cmpint(serve_counter(&e, "decode_started"), ==, 1);
	g_assert_cmpint(serve_counter(&e, "decode_failed_transport"), ==, 1);
	g_assert_cmpint(serve_counter(&e, "read_gap_timeouts"), ==, 0);
	g_assert_cmpint(serve_counter(&e, "stream_errors"), ==, 1);
	g_assert_cmpuint(sim_log_count(&e.sim, "\"event\":\"fault_died\""), ==, 1);
	g_assert_cmpuint(sim_log_count(&e.sim, "\"event\":\"fault_died\",\"engine\":\"sim-1\","
	                                      "\"request_id\":\"dies-mid-stream\""), ==, 1);
	g_assert_cmpfloat(sim_finished(&e.sim, 1, "abort"), ==, 1);
	g_assert_cmpfloat(sim_finished(&e.sim, 1, "length"), ==, 0);
	g_assert_true(serve_wait_stat(&e, 1, "active_requests", 0, 2000));
	g_assert_true(serve_wait_stat(&e, 1, "kv_blocks_used", 0, 2000));
	serve_clear(&e);
}

static void
test_hung_prefill(void)
{
	const char *const args[] = { "--engines", "3", "--time-scale", "50", NULL };
	struct serve_env e;
	struct sim_reply r;
	g_autofree char *body = NULL;

	g_test_summary("/serve/spec-6/prefill-timeout-retry: a hung prefill times out after "
	               "prefill_timeout_s and the retry runs on the other prefill engine");
	if (!serve_start(&e, args, "ppd", "{\"serving\":{\"max_attempts\":2,\"handoff_timeout_s\":5,"
	                 "\"prefill_timeout_s\":0.3,\"retry_base_s\":0.01,\"retry_cap_s\":0.02}}"))
		return;
	g_assert_cmpint(sim_set_faults(&e.sim, 0, "{\"hang_before_first_token\":true}"), ==, 200);
	body = serve_completion_body(&e, 3, FALSE);
	serve_post(&e, "/v1/completions", body, NULL, 10000, &r);
	g_assert_cmpint(r.status, ==, 200);
	g_assert_cmpfloat(r.seconds, >=, 0.3);
	g_assert_cmpfloat(r.seconds, <, 3.0);
	sim_reply_clear(&r);
	g_assert_cmpint(serve_counter(&e, "prefill_timeouts"), ==, 1);
	g_assert_cmpint(serve_counter(&e, "retries"), ==, 1);
	/* The abandoned prefill was aborted on the hung engine. */
	g_assert_true(serve_wait_stat(&e, 0, "active_requests", 0, 2000));
	serve_clear(&e);
}

static void
test_first_token_timeout(void)
{
	const char *const args[] = { "--engines", "2", "--time-scale", "50", NULL };
	struct serve_env e;
	struct sim_reply r;
	g_autofree char *body = NULL;

	g_test_summary("/serve/spec-6/first-token-timeout: a decode that hangs before its first "
	               "token ends the committed stream with code first_token_timeout");
	if (!serve_start(&e, args, "pd", "{\"engine\":{\"first_token_timeout_s\":0.3}}"))
		return;
	g_assert_cmpint(sim_set_faults(&e.sim, 1, "{\"hang_before_first_token\":true}"), ==, 200);
	body = serve_completion_body(&e, 3, TRUE);
	serve_post(&e, "/v1/completions", body, NULL, 10000, &r);
	serve_assert_stream_error(&r, "first_token_timeout");
	g_assert_cmpfloat(r.seconds, >=, 0.3);
	g_assert_cmpfloat(r.seconds, <, 3.0);
	sim_reply_clear(&r);
	g_assert_cmpint(serve_counter(&e, "first_token_timeouts"), ==, 1);
	g_assert_true(serve_wait_stat(&e, 1, "active_requests", 0, 2000));
	serve_clear(&e);
}

static void
test_handoff_expired(void)
{
	const char *const args[] = { "--engines", "2", "--time-scale", "20", NULL };
	struct serve_env e;
	struct sim_reply r;
	struct serve_async *hold;
	g_autofree char *long_body = NULL, *body = NULL;

	g_test_summary("/serve/spec-4.2/handoff-expired: when decode placement waits longer "
	               "than handoff_timeout_s, the handoff is abandoned and the request fails "
	               "504 handoff_expired (no attempts left)");
	if (!serve_start(&e, args, "pd", "{\"serving\":{\"decode_concurrency\":1,"
	                 "\"handoff_timeout_s\":0.3}}"))
		return;
	/* One long decode holds the only decode slot. */
	long_body = serve_completion_body(&e, 400, FALSE);
	hold = serve_post_async(&e, "/v1/completions", long_body, 20000);
	g_assert_true(serve_wait_stat(&e, 1, "running", 1, 3000));
	body = serve_completion_body(&e, 2, FALSE);
	serve_post(&e, "/v1/completions", body, NULL, 10000, &r);
	serve_assert_error(&r, 504, "handoff_expired");
	sim_reply_clear(&r);
	g_assert_cmpint(serve_counter(&e, "handoff_expired"), ==, 1);
	g_assert_cmpint(serve_counter(&e, "phase_waits"), ==, 1);
	serve_async_join(hold, &r, NULL);
	if (r.status != 200) {
		g_autofree char *log = serve_log(&e);

		g_printerr("%s\n", log);
		g_error("held request: %ld (curl %d) %s", r.status, r.curl_code, r.body->str);
	}
	sim_reply_clear(&r);
	serve_clear(&e);
}

static void
test_retry_budget(void)
{
	const char *const args[] = { "--engines", "2", "--time-scale", "50", NULL };
	struct serve_env e;
	struct sim_reply r;
	g_autofree char *body = NULL;

	g_test_summary("/serve/spec-4.2/retry-budget-exhausted: each retry spends a credit; "
	               "with none left the failure is answered at once");
	if (!serve_start(&e, args, "pd", "{\"serving\":{\"max_attempts\":3,\"handoff_timeout_s\":5,"
	                 "\"retry_budget\":1,\"retry_replenish\":0,\"retry_base_s\":0,"
	                 "\"retry_cap_s\":0}}"))
		return;
	g_assert_cmpint(sim_set_faults(&e.sim, 0, "{\"error_rate\":1,\"error_status\":502}"), ==, 200);
	body = serve_completion_body(&e, 2, FALSE);
	serve_post(&e, "/v1/completions", body, NULL, 10000, &r);
	serve_assert_error(&r, 502, "engine_error");
	g_assert_nonnull(strstr(r.body->str, "retry budget"));
	sim_reply_clear(&r);
	g_assert_cmpint(serve_counter(&e, "retries"), ==, 1);
	g_assert_cmpint(serve_counter(&e, "retry_budget_denied"), ==, 1);
	serve_post(&e, "/v1/completions", body, NULL, 10000, &r);
	serve_assert_error(&r, 502, "engine_error");
	sim_reply_clear(&r);
	g_assert_cmpint(serve_counter(&e, "retries"), ==, 1);
	g_assert_cmpint(serve_counter(&e, "retry_budget_denied"), ==, 2);
	serve_clear(&e);
}

static void
test_permanent_error(void)
{
	const char *const args[] = { "--engines", "2", "--time-scale", "50",
	                             "--max-model-len", "64", NULL };
	struct serve_env e;
	struct sim_reply r;
	g_autofree char *body = NULL;

	g_test_summary("/serve/spec-4.2/context-too-long-not-retried: the engine's context-length "
	               "400 reaches the client as 400 context_length_exceeded, without retry");
	if (!serve_start(&e, args, "pd", "{\"serving\":{\"max_attempts\":3,\"handoff_timeout_s\":5}}"))
		return;
	body = serve_completion_body(&e, 500, FALSE);
	serve_post(&e, "/v1/completions", body, NULL, 10000, &r);
	serve_assert_error(&r, 400, "context_length_exceeded");
	g_assert_nonnull(strstr(r.body->str, "context length"));
	sim_reply_clear(&r);
	g_assert_cmpint(serve_counter(&e, "retries"), ==, 0);
	serve_clear(&e);
}

static void
test_ceiling(void)
{
	const char *const args[] = { "--engines", "2", "--time-scale", "50", NULL };
	struct serve_env e;
	struct sim_reply r, held[2];
	struct serve_async *a[2];
	g_autofree char *body = NULL, *retry_after = NULL;

	g_test_summary("/serve/spec-4.2/ceiling-429: beyond max_connections + queue_capacity "
	               "held requests, the next gets 429 before its body is parsed");
	/* drain_timeout_s 0: the stop below ends the hung requests at once. */
	if (!serve_start(&e, args, "pd", "{\"serving\":{\"max_connections\":2,\"queue_capacity\":0},"
	                 "\"server\":{\"drain_timeout_s\":0}}"))
		return;
	g_assert_cmpint(sim_set_faults(&e.sim, 0, "{\"hang_before_first_token\":true}"), ==, 200);
	body = serve_completion_body(&e, 2, FALSE);
	for (int i = 0; i < 2; i++)
		a[i] = serve_post_async(&e, "/v1/completions", body, 10000);
	g_assert_true(serve_wait_stat(&e, 0, "active_requests", 2, 3000));
	/* Not even JSON: the ceiling answers first. */
	serve_post(&e, "/v1/completions", "not json", NULL, 5000, &r);
	serve_assert_error(&r, 429, "too_many_requests");
	retry_after = sim_reply_header(&r, "Retry-After");
	g_assert_cmpstr(retry_after, ==, "1");
	sim_reply_clear(&r);
	g_assert_cmpint(serve_counter(&e, "ceiling_refusals"), ==, 1);
	/* Releasing the hang lets the held ones finish. */
	g_assert_cmpint(sim_set_faults(&e.sim, 0, "{\"hang_before_first_token\":false}"), ==, 200);
	/* A hang already entered lasts until the client leaves: stop the
	 * daemon, which answers them 503. */
	g_assert_cmpint(serve_stop_daemon(&e, SIGTERM, 10000), ==, 0);
	for (int i = 0; i < 2; i++) {
		serve_async_join(a[i], &held[i], NULL);
		serve_assert_error(&held[i], 503, "shutting_down");
		sim_reply_clear(&held[i]);
	}
	g_assert_true(serve_wait_stat(&e, 0, "active_requests", 0, 2000));
	serve_clear(&e);
}

static void
test_queue_timeout(void)
{
	const char *const args[] = { "--engines", "2", "--time-scale", "50", NULL };
	struct serve_env e;
	struct sim_reply r, held;
	struct serve_async *a;
	g_autofree char *body = NULL;

	g_test_summary("/serve/spec-4.2/queue-timeout: at the admission limit a request waits "
	               "in the queue, at most queue_timeout_s, then gets 429 with Retry-After");
	if (!serve_start(&e, args, "pd", "{\"serving\":{\"max_connections\":1,\"queue_capacity\":1,"
	                 "\"queue_timeout_s\":0.3,\"prefill_concurrency\":4,"
	                 "\"decode_concurrency\":4,\"handoff_timeout_s\":5},"
	                 "\"server\":{\"drain_timeout_s\":0}}"))
		return;
	g_assert_cmpint(sim_set_faults(&e.sim, 0, "{\"hang_before_first_token\":true}"), ==, 200);
	body = serve_completion_body(&e, 2, FALSE);
	a = serve_post_async(&e, "/v1/completions", body, 10000);
	g_assert_true(serve_wait_stat(&e, 0, "active_requests", 1, 3000));
	serve_post(&e, "/v1/completions", body, NULL, 5000, &r);
	serve_assert_error(&r, 429, "queue_timeout");
	g_assert_cmpfloat(r.seconds, >=, 0.3);
	g_assert_cmpfloat(r.seconds, <, 3.0);
	sim_reply_clear(&r);
	g_assert_cmpint(serve_counter(&e, "queued"), ==, 1);
	g_assert_cmpint(serve_counter(&e, "queue_timeouts"), ==, 1);
	g_assert_cmpint(serve_stop_daemon(&e, SIGTERM, 10000), ==, 0);
	serve_async_join(a, &held, NULL);
	serve_assert_error(&held, 503, "shutting_down");
	sim_reply_clear(&held);
	serve_clear(&e);
}

/* Send three requests in arrival order and check that each succeeds and
 * that Narwhal answered them in that order (served one at a time, FIFO).
 * The order is read from Narwhal's debug log, not from when the client
 * threads saw their answers: on a loaded machine a thread can be kept off
 * the CPU for longer than a request takes. */
static void
assert_served_in_order(struct serve_env *e)
{
	g_autofree char *body = serve_completion_body(e, 300, FALSE);
	g_autofree char *log = NULL;
	struct sim_reply r[3];
	struct serve_async *a[3];
	const char *at[3];

	serve_post_in_order(e, body, a, 3);
	for (int i = 0; i < 3; i++) {
		serve_async_join(a[i], &r[i], NULL);
		g_assert_cmpint(r[i].status, ==, 200);
	}
	/* The log's writer thread may still hold the lines an answer has
	 * overtaken (docs/deployment.md, "Logs"): wait for all three first. */
	for (int i = 0; i < 3; i++) {
		g_autofree char *id = sim_reply_header(&r[i], "X-Request-Id");
		g_autofree char *line = g_strdup_printf("\"event\":\"request_answer\","
		                                        "\"request_id\":\"%s\"", id);

		(void)serve_wait_log(e, line, 5000);
	}
	log = serve_log(e);
	for (int i = 0; i < 3; i++) {
		g_autofree char *id = sim_reply_header(&r[i], "X-Request-Id");
		g_autofree char *line = g_strdup_printf("\"event\":\"request_answer\","
		                                        "\"request_id\":\"%s\"", id);

		g_assert_nonnull(id);
		at[i] = strstr(log, line);
		if (at[i] == NULL)
			g_error("no request_answer line for %s in:\n%s", id, log);
	}
	if (!(at[0] < at[1] && at[1] < at[2])) {
		g_autofree char *i0 = sim_reply_header(&r[0], "X-Request-Id");
		g_autofree char *i1 = sim_reply_header(&r[1], "X-Request-Id");
		g_autofree char *i2 = sim_reply_header(&r[2], "X-Request-Id");

		g_error("answered out of arrival order (%s, %s, %s):\n%s", i0, i1, i2, log);
	}
	for (int i = 0; i < 3; i++)
		sim_reply_clear(&r[i]);
}

static void
test_queue_admits_in_order(void)
{
	const char *const args[] = { "--engines", "2", "--time-scale", "10", NULL };
	struct serve_env e;

	g_test_summary("/serve/spec-4.2/queue-fifo: queued requests are admitted in arrival "
	               "order as admitted ones finish, and all succeed");
	/* Sizing by characters: a tokenise call in flight would let a later
	 * arrival find the admission unit free first (see docs/api.md). */
	if (!serve_start(&e, args, "pd", "{\"log\":{\"level\":\"debug\"},"
	                 "\"engine\":{\"tokenize\":false},"
	                 "\"serving\":{\"max_connections\":1,\"queue_capacity\":2,"
	                 "\"queue_timeout_s\":5,\"prefill_concurrency\":1,"
	                 "\"decode_concurrency\":1,\"handoff_timeout_s\":5}}"))
		return;
	assert_served_in_order(&e);
	g_assert_cmpint(serve_counter(&e, "queued"), ==, 2);
	g_assert_cmpint(serve_counter(&e, "requests_ok"), ==, 3);
	serve_clear(&e);
}

static void
test_phase_slots_fifo(void)
{
	const char *const args[] = { "--engines", "2", "--time-scale", "10", NULL };
	struct serve_env e;
	json_t *stats;

	g_test_summary("/serve/spec-4.2/phase-concurrency-fifo: with one prefill and one decode "
	               "slot per engine, requests wait for slots and are served in arrival order");
	if (!serve_start(&e, args, "pd", "{\"log\":{\"level\":\"debug\"},"
	                 "\"engine\":{\"tokenize\":false},"
	                 "\"serving\":{\"prefill_concurrency\":1,\"decode_concurrency\":1}}"))
		return;
	assert_served_in_order(&e);
	g_assert_cmpint(serve_counter(&e, "phase_waits"), >=, 2);
	g_assert_cmpint(serve_counter(&e, "queued"), ==, 0);
	g_assert_cmpint(serve_counter(&e, "requests_ok"), ==, 3);
	/* Never two decodes at once on the one decode engine. */
	stats = sim_engine_stats(&e.sim, 1);
	g_assert_cmpint(json_integer_value(json_object_get(stats, "running")), ==, 0);
	json_decref(stats);
	serve_clear(&e);
}

static void
test_deadline_mid_stream(void)
{
	const char *const args[] = { "--engines", "2", "--time-scale", "1", NULL };
	struct serve_env e;
	struct sim_reply r;
	g_autofree char *body = NULL;

	g_test_summary("/serve/spec-4.3/deadline-expired-mid-stream: the request deadline ends "
	               "a stream with code expired and closes it");
	if (!serve_start(&e, args, "pd", "{\"serving\":{\"request_timeout_s\":0.6,"
	                 "\"prefill_timeout_s\":0.5}}"))
		return;
	body = serve_completion_body(&e, 1000, TRUE);
	serve_post(&e, "/v1/completions", body, NULL, 10000, &r);
	serve_assert_stream_error(&r, "expired");
	g_assert_nonnull(strstr(r.body->str, "\"text\""));
	g_assert_cmpfloat(r.seconds, >=, 0.6);
	g_assert_cmpfloat(r.seconds, <, 3.0);
	sim_reply_clear(&r);
	g_assert_cmpint(serve_counter(&e, "deadline_expired"), ==, 1);
	g_assert_true(serve_wait_stat(&e, 1, "running", 0, 2000));
	serve_clear(&e);
}

static void
test_client_disconnect(void)
{
	const char *const args[] = { "--engines", "2", "--time-scale", "1", NULL };
	struct serve_env e;
	GString *got = g_string_new(NULL);
	g_autofree char *body = NULL;
	gint64 closed;
	int fd;

	g_test_summary("/serve/spec-4.3/client-disconnect-mid-stream: a client that leaves "
	               "mid-stream gets its engine request aborted within 100 ms");
	if (!serve_start(&e, args, "pd", NULL))
		return;
	body = serve_completion_body(&e, 1000, TRUE);
	fd = serve_raw_post(e.port, "/v1/completions", body, 0);
	g_assert_cmpint(fd, >=, 0);
	g_assert_true(serve_raw_read_until(fd, got, "\"text\"", 5000));
	g_assert_true(serve_wait_stat(&e, 1, "running", 1, 1000));
	close(fd);
	closed = g_get_monotonic_time();
	g_assert_true(serve_wait_stat(&e, 1, "running", 0, 1000));
	g_test_message("engine aborted %.1f ms after the client left",
	               (double)(g_get_monotonic_time() - closed) / 1000.0);
	g_assert_cmpint(g_get_monotonic_time() - closed, <, 100000);
	g_assert_true(serve_wait_log(&e, "\"event\":\"client_disconnected\"", 1000));
	g_assert_cmpint(serve_counter(&e, "client_disconnects"), ==, 1);
	g_assert_cmpint(serve_counter(&e, "retained"), ==, 0);
	g_string_free(got, TRUE);
	serve_clear(&e);

}

static void
test_client_disconnect_whole(void)
{
	const char *const args[] = { "--engines", "2", "--time-scale", "1", NULL };
	struct serve_env e;
	g_autofree char *body = NULL;
	g_autofree char *log = NULL;
	int fd;

	g_test_summary("/serve/spec-4.3/client-disconnect-before-answer: a client that leaves "
	               "before its non-streamed answer is recorded as gone (499, "
	               "client_disconnected), never as a 500 of Narwhal's");
	if (!serve_start(&e, args, "pd", NULL))
		return;
	body = serve_completion_body(&e, 1000, FALSE);
	fd = serve_raw_post(e.port, "/v1/completions", body, 0);
	g_assert_cmpint(fd, >=, 0);
	g_assert_true(serve_wait_stat(&e, 1, "running", 1, 5000));
	close(fd);
	g_assert_true(serve_wait_stat(&e, 1, "running", 0, 2000));
	g_assert_true(serve_wait_log(&e, "\"status\":499,\"error_code\":\"client_disconnected\"",
	                             2000));
	log = serve_log(&e);
	g_assert_null(strstr(log, "\"status\":500"));
	g_assert_cmpint(serve_counter(&e, "client_disconnects"), ==, 1);
	g_assert_cmpint(serve_counter(&e, "retained"), ==, 0);
	serve_clear(&e);
}

static void
test_backpressure(void)
{
	const char *const args[] = { "--engines", "2", "--no-delay", "--preset", "llama2-70b-tp8-h100",
	                             "--max-model-len", "200000",
	                             NULL };
	struct serve_env e;
	GString *got = g_string_new(NULL);
	g_autofree char *body = NULL;
	int fd;

	g_test_summary("/serve/spec-4.3/backpressure-close: a stream client that stops reading "
	               "is closed once the relay buffer is full, and the engine leg cancelled");
	if (!serve_start(&e, args, "pd", NULL))
		return;
	body = serve_completion_body(&e, 100000, TRUE);
	fd = serve_raw_post(e.port, "/v1/completions", body, 4096);
	g_assert_cmpint(fd, >=, 0);
	if (!serve_raw_read_until(fd, got, "data:", 5000))
		g_error("no stream: %s", got->str);
	/* Never read again: the kernel buffers fill, then the relay's. */
	g_assert_true(serve_wait_log(&e, "\"event\":\"client_backpressure\"", 10000));
	g_assert_true(serve_wait_stat(&e, 1, "running", 0, 2000));
	g_assert_cmpint(serve_counter(&e, "backpressure_closes"), ==, 1);
	close(fd);
	g_string_free(got, TRUE);
	serve_clear(&e);
}

static void
test_shutdown_in_flight(void)
{
	const char *const args[] = { "--engines", "2", "--time-scale", "1", NULL };
	struct serve_env e;
	GString *got = g_string_new(NULL);
	struct sim_reply r;
	struct serve_async *a;
	g_autofree char *body = NULL, *stream = NULL;
	int fd;

	g_test_summary("/serve/shutdown-in-flight (issue 11, graceful shutdown: the end of the "
	               "drain): with server.drain_timeout_s 0, SIGTERM answers waiting requests "
	               "503, ends streams with an error event, cancels engine work and exits 0");
	if (!serve_start(&e, args, "pd", "{\"server\": {\"drain_timeout_s\": 0}}"))
		return;
	g_assert_cmpint(sim_set_faults(&e.sim, 0, "{\"hang_before_first_token\":true}"), ==, 200);
	body = serve_completion_body(&e, 2, FALSE);
	a = serve_post_async(&e, "/v1/completions", body, 10000);
	g_assert_true(serve_wait_stat(&e, 0, "active_requests", 1, 3000));
	g_assert_cmpint(sim_set_faults(&e.sim, 0, "{\"hang_before_first_token\":false}"), ==, 200);
	stream = serve_completion_body(&e, 1000, TRUE);
	fd = serve_raw_post(e.port, "/v1/completions", stream, 0);
	g_assert_true(serve_raw_read_until(fd, got, "\"text\"", 5000));
	g_assert_cmpint(serve_stop_daemon(&e, SIGTERM, 10000), ==, 0);
	serve_async_join(a, &r, NULL);
	serve_assert_error(&r, 503, "shutting_down");
	sim_reply_clear(&r);
	g_assert_true(serve_raw_read_until(fd, got, "shutting_down", 2000));
	close(fd);
	g_assert_true(serve_wait_stat(&e, 0, "active_requests", 0, 2000));
	g_assert_true(serve_wait_stat(&e, 1, "running", 0, 2000));
	g_string_free(got, TRUE);
	serve_clear(&e);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	g_test_add_func("/serve/spec-4.2/retry-503-then-success", test_retry_503);
	g_test_add_func("/serve/spec-4.2/retry-budget-exhausted", test_retry_budget);
	g_test_add_func("/serve/spec-4.2/context-too-long-not-retried", test_permanent_error);
	g_test_add_func("/serve/spec-4.2/ceiling-429", test_ceiling);
	g_test_add_func("/serve/spec-4.2/queue-timeout", test_queue_timeout);
	g_test_add_func("/serve/spec-4.2/queue-fifo", test_queue_admits_in_order);
	g_test_add_func("/serve/spec-4.2/handoff-expired", test_handoff_expired);
	g_test_add_func("/serve/spec-4.2/phase-concurrency-fifo", test_phase_slots_fifo);
	g_test_add_func("/serve/spec-4.3/death-mid-stream", test_death_mid_stream);
	g_test_add_func("/serve/spec-4.3/deadline-expired-mid-stream", test_deadline_mid_stream);
	g_test_add_func("/serve/spec-4.3/client-disconnect-mid-stream", test_client_disconnect);
	g_test_add_func("/serve/spec-4.3/client-disconnect-before-answer",
	                test_client_disconnect_whole);
	g_test_add_func("/serve/spec-4.3/backpressure-close", test_backpressure);
	g_test_add_func("/serve/spec-6/prefill-timeout-retry", test_hung_prefill);
	g_test_add_func("/serve/spec-6/first-token-timeout", test_first_token_timeout);
	g_test_add_func("/serve/shutdown-in-flight", test_shutdown_in_flight);
	return g_test_run();
}
