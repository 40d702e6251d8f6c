/*
 * A concurrent pair (the sglang dialect: NARWHAL_DIALECT_HANDOFF_CONCURRENT)
 * whose two legs fail in either order, through Narwhal against a SGLang
 * prefill and decode engine of narwhal-sim. Spec 4.3: a prefill failure
 * is an HTTP error, and a client error from the engine reaches the client
 * as one (issue 9: 400 engine_rejected, the engine's message but never its
 * address); spec 4.2: only retryable failures are retried. A decode engine
 * hears of its prefill engine's refusal through the bootstrap server, so
 * its own failure can reach Narwhal before the refusal does: the decode
 * leg's failure is then held until the prefill engine answers
 * (src/serve/pair.c, docs/dialects.md "SGLang").
 *
 * The orderings (P: the prefill leg, D: the decode leg; "first" is the
 * order in which Narwhal sees the two ends) and what the client gets:
 *
 *   first           then                client gets                 test
 *   P 4xx           D anything          P's 4xx (D cancelled)       test-serve-dialects,
 *                                                                   client-errors
 *   P 5xx           D anything          P's failure (D cancelled)   test-serve-plugins,
 *                                                                   concurrent-prefill-failure
 *   P ok            D ok                the answer                  test-serve-dialects
 *   P ok            D error             D's failure; a stream's     decode-failure-after-
 *                                       200 and an error event      prefill-success
 *   D ok (answer)   P still out         the answer (P cancelled)    test-serve-plugins,
 *                                                                   concurrent-pair
 *   D error/drop    P 4xx               P's 4xx, not retried        refusal-after-*
 *   D error         P ok                D's failure, as if alone    success-after-decode-failure
 *   D error         P 5xx/drop/timeout  D's failure, as if alone    failure-after-decode-failure
 *   D error         deadline            504 expired                 deadline-while-held
 *   D error         client leaves       nothing; both legs freed    client-leaves-while-held
 *   D refused conn. P anything          D's failure at once (the    refused-decode-not-held
 *                                       engine never had it)
 *
 * Each case runs streamed and not: a stream's 200 waits for the prefill
 * engine's success, so every failure before it is an HTTP status for both.
 * No case leaves a leg open on either engine or a request undecided.
 */
#include "build-config.h"

#include <string.h>
#include <unistd.h>

#include <glib.h>

#include "integration/test-serve-common.h"

#define WAIT_MS 8000
/* Model seconds at --time-scale 50: 25 model seconds are 500 ms, well
 * after the decode engine's failure, even on a loaded machine. */
#define TIME_SCALE "50"
#define LATE "25"
#define LATE_MS 500

/* Engine 0 is the prefill engine, engine 1 the decode engine. */
enum { PREFILL, DECODE };

static gboolean
start(struct serve_env *e, const char *const *more_sim_args, const char *config_json)
{
	g_autoptr(GPtrArray) args = g_ptr_array_new();
	g_autofree char *config = serve_json_merged_text(
		"{\"controller\":{\"monitor_interval_s\":0.1}}", config_json);

	g_ptr_array_add(args, (gpointer) "--time-scale");
	g_ptr_array_add(args, (gpointer)TIME_SCALE);
	for (const char *const *a = more_sim_args; a && *a; a++)
		g_ptr_array_add(args, (gpointer)*a);
	g_ptr_array_add(args, NULL);
	if (!serve_start_dialects(e, "ss", "pd", (const char *const *)args->pdata, config))
		return FALSE;
	if (!serve_wait_all_available(e, WAIT_MS)) {
		g_autofree char *log = serve_log(e);

		g_error("the engines did not all become available:\n%s", log);
	}
	return TRUE;
}

static const char *
engine_id(struct serve_env *e, unsigned engine)
{
	return json_string_value(json_object_get(
		json_array_get(json_object_get(e->sim.fleet, "engines"), engine), "id"));
}

static void
set_faults(struct serve_env *e, unsigned engine, const char *faults)
{
	g_assert_cmpint(sim_set_faults(&e->sim, engine, faults), ==, 200);
}

static json_int_t
stat_of(struct serve_env *e, unsigned engine, const char *key)
{
	return sim_engine_stat(&e->sim, engine, key);
}

/* Every request decided and every engine call closed on both engines,
 * within a bound: neither leg leaked. */
static void
assert_settled(struct serve_env *e)
{
	gint64 deadline = g_get_monotonic_time() + 5 * G_USEC_PER_SEC;

	for (;;) {
		gboolean settled = serve_counter(e, "in_progress") == 0 &&
		                   stat_of(e, PREFILL, "active_requests") == 0 &&
		                   stat_of(e, DECODE, "active_requests") == 0;

		if (settled)
			return;
		if (g_get_monotonic_time() >= deadline) {
			g_autofree char *log = serve_log(e);

			g_error("a leg or a request was left open (in_progress %" JSON_INTEGER_FORMAT
			        ", engine calls %" JSON_INTEGER_FORMAT " and %" JSON_INTEGER_FORMAT
			        "):\n%s", serve_counter(e, "in_progress"),
			        stat_of(e, PREFILL, "active_requests"),
			        stat_of(e, DECODE, "active_requests"), log);
		}
		g_usleep(5000);
	}
}

static gboolean
wait_counter(struct serve_env *e, const char *name, json_int_t value, guint timeout_ms)
{
	gint64 deadline = g_get_monotonic_time() + (gint64)timeout_ms * 1000;

	while (serve_counter(e, name) != value) {
		if (g_get_monotonic_time() >= deadline)
			return FALSE;
		g_usleep(2000);
	}
	return TRUE;
}

/* The error message of a reply's envelope (owned), or NULL. */
static char *
error_message(const struct sim_reply *r)
{
	json_t *doc = sim_json(r->body->str);
	char *msg = g_strdup(json_string_value(json_object_get(json_object_get(doc, "error"),
	                                                       "message")));

	json_decref(doc);
	return msg;
}

/* One request, streamed or not, answered with status and code; its
 * message contains words. Returns how long the answer took, in ms. */
static gint64
expect(struct serve_env *e, gboolean stream, long status, const char *code, const char *words)
{
	g_autofree char *body = serve_completion_body(e, 4, stream);
	g_autofree char *msg = NULL;
	gint64 t0 = g_get_monotonic_time();
	struct sim_reply r;
	gint64 took;

	serve_post(e, "/v1/completions", body, NULL, 10000, &r);
	took = (g_get_monotonic_time() - t0) / 1000;
	serve_assert_error(&r, status, code);
	msg = error_message(&r);
	if (msg == NULL || strstr(msg, words) == NULL) {
		g_autofree char *log = serve_log(e);

		g_error("want a message with \"%s\", got %s\nnarwhal log:\n%s", words, r.body->str,
		        log);
	}
	/* Issue 9: never an engine's address. */
	g_assert_null(strstr(r.body->str, "127.0.0.1"));
	sim_reply_clear(&r);
	return took;
}

/* The prefill engine refuses the client's request late (error_delay_s),
 * after the decode leg has failed; how the decode leg fails is the
 * variant. */
struct refusal_case {
	const char *decode_faults;        /* NULL: none */
	const char *const *sim_args;
};

static const char *const short_wait[] = { "--disaggregation-waiting-timeout", "2", NULL };

/* The decode engine answers 503 at once. */
static const struct refusal_case decode_error = {
	"{\"error_rate\": 1, \"error_status\": 503}", NULL
};
/* The decode engine waits on the bootstrap room (2 model seconds, 40 ms)
 * and fails the request with 500 before the prefill engine's refusal
 * comes: as a SGLang decode engine that hears of its prefill's failure. */
static const struct refusal_case decode_waits = { NULL, short_wait };

/* Spec 4.3 and 4.2: the prefill engine's refusal of the client's own
 * request reaches the client as that 4xx (400 engine_rejected with the
 * engine's words), streamed or not, and is not retried, even when the
 * decode leg's failure arrived first and would have been retried. */
static void
test_refusal_after_decode_failure(gconstpointer data)
{
	const struct refusal_case *c = data;
	struct serve_env e;

	/* Retries on: the decode engine's failure alone would be retried. */
	if (!start(&e, c->sim_args, "{\"serving\":{\"max_attempts\":2,\"handoff_timeout_s\":20}}"))
		return;
	set_faults(&e, PREFILL, "{\"error_rate\": 1, \"error_status\": 400, \"error_delay_s\": "
	                        LATE "}");
	if (c->decode_faults != NULL)
		set_faults(&e, DECODE, c->decode_faults);
	for (int stream = 0; stream < 2; stream++) {
		gint64 took = expect(&e, stream, 400, "engine_rejected", "answers 400");

		/* The refusal did come last, when it was asked for. */
		g_assert_cmpint(took, >=, LATE_MS - 50);
	}
	g_assert_cmpint(serve_counter(&e, "pair_decode_held"), ==, 2);
	g_assert_cmpint(serve_counter(&e, "retries"), ==, 0);
	g_assert_cmpint(serve_counter(&e, "requests_failed"), ==, 2);
	assert_settled(&e);
	serve_clear(&e);
}

/* As above, the decode leg cut instead: the decode engine stops listening
 * while the leg waits on its room, which cuts the connection (after the
 * 200 headers of a stream). One request per fleet: the engine is gone
 * after it. */
static void
test_refusal_after_decode_drop(gconstpointer data)
{
	gboolean stream = GPOINTER_TO_INT(data);
	struct serve_env e;
	g_autofree char *body = NULL;
	struct serve_async *a;
	struct sim_reply r;

	if (!start(&e, NULL, "{\"serving\":{\"max_attempts\":2,\"handoff_timeout_s\":20}}"))
		return;
	/* 1 s: time to cut the decode leg first. */
	set_faults(&e, PREFILL, "{\"error_rate\": 1, \"error_status\": 400, "
	                        "\"error_delay_s\": 50}");
	body = serve_completion_body(&e, 4, stream);
	a = serve_post_async(&e, "/v1/completions", body, 10000);
	g_assert_true(serve_wait_stat(&e, DECODE, "active_requests", 1, WAIT_MS));
	set_faults(&e, DECODE, "{\"refuse_connections\": true}");
	serve_async_join(a, &r, NULL);
	serve_assert_error(&r, 400, "engine_rejected");
	sim_reply_clear(&r);
	g_assert_cmpint(serve_counter(&e, "pair_decode_held"), ==, 1);
	g_assert_cmpint(serve_counter(&e, "decode_failed_transport"), ==, 1);
	g_assert_cmpint(serve_counter(&e, "retries"), ==, 0);
	assert_settled(&e);
	serve_clear(&e);
}

/* The prefill engine succeeds after the decode leg failed: the decode
 * engine's failure is decided as it would be alone (spec 4.2: its 503 is
 * the engine's error, 502 on the last attempt, blamed on the decode
 * engine), and a stream does not commit its 200 on the prefill's success. */
static void
test_success_after_decode_failure(void)
{
	struct serve_env e;
	g_autofree char *words = NULL;

	if (!start(&e, NULL, NULL))
		return;
	set_faults(&e, PREFILL, "{\"hang_before_first_token\": " LATE "}");
	set_faults(&e, DECODE, "{\"error_rate\": 1, \"error_status\": 503}");
	words = g_strdup_printf("engine %s failed with HTTP 503", engine_id(&e, DECODE));
	for (int stream = 0; stream < 2; stream++) {
		gint64 took = expect(&e, stream, 502, "engine_error", words);

		/* Decided on the prefill's answer, not before. */
		g_assert_cmpint(took, >=, LATE_MS - 50);
	}
	g_assert_cmpint(serve_counter(&e, "pair_decode_held"), ==, 2);
	assert_settled(&e);
	serve_clear(&e);
}

/* The prefill leg fails as an engine fails (a 5xx, a cut connection, its
 * timeout) after the decode leg failed: the decode engine's failure
 * decides, as if the prefill leg had not been out, and the wait is
 * bounded by the prefill leg's own bound (serving.prefill_timeout_s). */
static void
test_failure_after_decode_failure(void)
{
	static const struct {
		const char *prefill_faults;
		gboolean stream_only;
	} cases[] = {
		{ "{\"error_rate\": 1, \"error_status\": 500, \"error_delay_s\": " LATE "}", FALSE },
		/* A streamed prefill leg is cut after its 200. */
		{ "{\"hang_before_first_token\": " LATE ", \"die_after_tokens\": 0}", TRUE },
		/* Hung: its 1.5 s prefill_timeout_s ends it. */
		{ "{\"hang_before_first_token\": true}", FALSE },
	};
	struct serve_env e;
	g_autofree char *words = NULL;
	json_int_t held = 0;

	if (!start(&e, NULL, "{\"serving\":{\"prefill_timeout_s\":1.5}}"))
		return;
	set_faults(&e, DECODE, "{\"error_rate\": 1, \"error_status\": 503}");
	words = g_strdup_printf("engine %s failed with HTTP 503", engine_id(&e, DECODE));
	for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
		g_assert_cmpint(sim_set_faults(&e.sim, PREFILL, "{\"error_rate\": 0, "
		                               "\"hang_before_first_token\": false, "
		                               "\"die_after_tokens\": null}"), ==, 200);
		set_faults(&e, PREFILL, cases[i].prefill_faults);
		for (int stream = cases[i].stream_only; stream < 2; stream++) {
			gint64 took = expect(&e, stream, 502, "engine_error", words);

			g_assert_cmpint(took, <, 5000);
			held++;
		}
	}
	g_assert_cmpint(serve_counter(&e, "pair_decode_held"), ==, held);
	/* The prefill legs' own ends are counted as they happened. */
	g_assert_cmpint(serve_counter(&e, "prefill_timeouts"), ==, 2);
	assert_settled(&e);
	serve_clear(&e);
}

/* A prefill engine that neither refuses nor answers: the held decode
 * failure waits no longer than the decode leg had for its first token
 * (engine.first_token_timeout_s), not the prefill leg's whole bound. An
 * engine refuses a request as it arrives; one still busy is not refusing. */
static void
test_hold_bounded_by_first_token(void)
{
	struct serve_env e;
	g_autofree char *words = NULL;

	if (!start(&e, NULL, "{\"serving\":{\"prefill_timeout_s\":60,"
	           "\"request_timeout_s\":120},\"engine\":{\"first_token_timeout_s\":1}}"))
		return;
	set_faults(&e, DECODE, "{\"error_rate\": 1, \"error_status\": 503}");
	set_faults(&e, PREFILL, "{\"hang_before_first_token\": true}");
	words = g_strdup_printf("engine %s failed with HTTP 503", engine_id(&e, DECODE));
	for (int stream = 0; stream < 2; stream++) {
		gint64 took = expect(&e, stream, 502, "engine_error", words);

		/* Held until the first-token deadline, and not much beyond. */
		g_assert_cmpint(took, >=, 900);
		g_assert_cmpint(took, <, 30000);
	}
	g_assert_cmpint(serve_counter(&e, "pair_decode_held"), ==, 2);
	g_assert_cmpint(serve_counter(&e, "prefill_timeouts"), ==, 0);
	g_assert_cmpint(serve_counter(&e, "first_token_timeouts"), ==, 0);
	assert_settled(&e);
	serve_clear(&e);
}

/* The usual order, for contrast: the prefill engine succeeds, the decode
 * engine fails after its first token. Nothing to hold for (whichever end
 * Narwhal reads first, the prefill is a success): the decode failure is
 * an HTTP error, or, once a stream's first event committed its 200, the
 * stream's terminal error event (spec 4.3). */
static void
test_decode_failure_after_prefill_success(void)
{
	struct serve_env e;
	g_autofree char *words = NULL, *body = NULL;
	struct sim_reply r;

	if (!start(&e, NULL, NULL))
		return;
	set_faults(&e, DECODE, "{\"error_after_tokens\": 1}");
	words = g_strdup_printf("engine %s reported an error in its stream", engine_id(&e, DECODE));
	expect(&e, FALSE, 502, "engine_error", words);
	body = serve_completion_body(&e, 4, TRUE);
	serve_post(&e, "/v1/completions", body, NULL, 10000, &r);
	g_assert_cmpint(r.status, ==, 200);
	g_assert_nonnull(strstr(r.body->str, "\"engine_error\""));
	g_assert_null(strstr(r.body->str, "[DONE]"));
	sim_reply_clear(&r);
	g_assert_cmpint(serve_counter(&e, "requests_failed"), ==, 2);
	assert_settled(&e);
	serve_clear(&e);
}

/* The request deadline (spec 4.2) still ends a request whose decode
 * failure waits for a prefill leg that never answers: 504 expired. */
static void
test_deadline_while_held(void)
{
	struct serve_env e;

	if (!start(&e, NULL, "{\"serving\":{\"request_timeout_s\":0.6}}"))
		return;
	set_faults(&e, PREFILL, "{\"hang_before_first_token\": true}");
	set_faults(&e, DECODE, "{\"error_rate\": 1, \"error_status\": 503}");
	for (int stream = 0; stream < 2; stream++)
		expect(&e, stream, 504, "expired", "request_timeout_s");
	g_assert_cmpint(serve_counter(&e, "pair_decode_held"), ==, 2);
	g_assert_cmpint(serve_counter(&e, "deadline_expired"), ==, 2);
	assert_settled(&e);
	serve_clear(&e);
}

/* Spec 4.3 (cancellation): a client that leaves while its decode failure
 * is held has both legs freed: the prefill engine's call is closed. */
static void
test_client_leaves_while_held(void)
{
	struct serve_env e;

	if (!start(&e, NULL, NULL))
		return;
	set_faults(&e, PREFILL, "{\"hang_before_first_token\": true}");
	set_faults(&e, DECODE, "{\"error_rate\": 1, \"error_status\": 503}");
	for (int stream = 0; stream < 2; stream++) {
		g_autofree char *body = serve_completion_body(&e, 4, stream);
		int fd = serve_raw_post(e.port, "/v1/completions", body, 0);

		g_assert_cmpint(fd, >=, 0);
		g_assert_true(wait_counter(&e, "pair_decode_held", stream + 1, WAIT_MS));
		g_assert_true(serve_wait_stat(&e, PREFILL, "active_requests", 1, WAIT_MS));
		close(fd);
		g_assert_true(wait_counter(&e, "client_disconnects", stream + 1, WAIT_MS));
		assert_settled(&e);
	}
	g_assert_cmpint(serve_counter(&e, "requests_ok"), ==, 0);
	serve_clear(&e);
}

/* A decode engine that refuses the connection never had the request, so
 * its failure is not the prefill's doing: it is decided at once (a retry
 * elsewhere should not wait on the prefill engine), and the prefill leg
 * is cancelled. */
static void
test_refused_decode_not_held(void)
{
	struct serve_env e;
	g_autofree char *words = NULL;
	gint64 took;

	if (!start(&e, NULL, NULL))
		return;
	set_faults(&e, PREFILL, "{\"hang_before_first_token\": true}");
	set_faults(&e, DECODE, "{\"refuse_connections\": true}");
	words = g_strdup_printf("engine %s could not be reached", engine_id(&e, DECODE));
	took = expect(&e, FALSE, 502, "engine_unreachable", words);
	g_assert_cmpint(took, <, 2000);
	g_assert_cmpint(serve_counter(&e, "pair_decode_held"), ==, 0);
	assert_settled(&e);
	serve_clear(&e);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_data_func("/serve/concurrent-pair/refusal-after-decode-error", &decode_error,
	                     test_refusal_after_decode_failure);
	g_test_add_data_func("/serve/concurrent-pair/refusal-after-decode-wait-timeout",
	                     &decode_waits, test_refusal_after_decode_failure);
	g_test_add_data_func("/serve/concurrent-pair/refusal-after-decode-drop",
	                     GINT_TO_POINTER(FALSE), test_refusal_after_decode_drop);
	g_test_add_data_func("/serve/concurrent-pair/refusal-after-decode-drop-streamed",
	                     GINT_TO_POINTER(TRUE), test_refusal_after_decode_drop);
	g_test_add_func("/serve/concurrent-pair/success-after-decode-failure",
	                test_success_after_decode_failure);
	g_test_add_func("/serve/concurrent-pair/failure-after-decode-failure",
	                test_failure_after_decode_failure);
	g_test_add_func("/serve/concurrent-pair/decode-failure-after-prefill-success",
	                test_decode_failure_after_prefill_success);
	g_test_add_func("/serve/concurrent-pair/deadline-while-held", test_deadline_while_held);
	g_test_add_func("/serve/concurrent-pair/hold-bounded-by-first-token",
	                test_hold_bounded_by_first_token);
	g_test_add_func("/serve/concurrent-pair/client-leaves-while-held",
	                test_client_leaves_while_held);
	g_test_add_func("/serve/concurrent-pair/refused-decode-not-held",
	                test_refused_decode_not_held);
	return g_test_run();
}
