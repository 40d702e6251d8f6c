/*
 * The data plane's failure rules through every engine backend (issue 14:
 * "the same integration suite runs through Narwhal for vLLM, SGLang and
 * llama.cpp fleets"; tests/integration/test-serve-faults.c is the vLLM
 * suite). Each scenario runs on narwhal-sim fleets whose engines speak
 * their dialect: SGLang prefill/decode pairs (two of each role, so that a
 * retry has somewhere else to go), two SGLang aggregate engines, two
 * llama.cpp engines, and a llama.cpp engine beside a vLLM pair. Faults are
 * set through the simulator's admin API: engines that refuse (503, 429),
 * die before answering or mid-stream, hang or crawl, a client that stops
 * reading, and for SGLang pairs a prefill engine that fails while its
 * decode engine waits for the KV. Each test names its spec clause.
 *
 * Placement breaks ties by engine index, so the first request of a quiet
 * fleet goes to the fleet's `first` engine and is generated on `gen`;
 * those are the engines a fault is set on, and a retry finds the other.
 */
#include "build-config.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>

#include "integration/test-serve-common.h"

struct fleet {
	const char *name;
	const char *dialects; /* serve_start_dialects */
	const char *roles;
	gboolean pairs;       /* requests run as prefill/decode pairs */
	unsigned first;       /* takes a quiet fleet's first request (prefill, or whole) */
	unsigned gen;         /* generates that request's tokens (its decode, or first) */
};

static const struct fleet fleets[] = {
	{ "sglang-pd", "ssss", "ppdd", TRUE, 0, 2 },
	{ "sglang-aggregate", "ss", "aa", FALSE, 0, 0 },
	{ "llamacpp", "ll", "aa", FALSE, 0, 0 },
	/* The llama.cpp engine wins ties against the vLLM prefill engine (a
	 * lower index): a request it fails is retried on the vLLM pair. */
	{ "mixed", "lvv", "dpd", FALSE, 0, 0 },
};

#define WAIT_MS 8000

/* A fast monitor; retries with a short backoff; no passive ejection, so
 * that every request of a scenario meets the fault it sets; sizing by
 * characters, so that an engine's work is only the legs it was given. */
static const char base_config[] =
	"{\"controller\": {\"monitor_interval_s\": 0.1},"
	" \"engine\": {\"tokenize\": false},"
	" \"recovery\": {\"passive_failures\": 0},"
	" \"serving\": {\"max_attempts\": 2, \"handoff_timeout_s\": 5,"
	"               \"retry_base_s\": 0.01, \"retry_cap_s\": 0.02}}";

static const char *const fast_sim[] = { "--time-scale", "50", NULL };

static char *
config_with(const char *extra)
{
	return serve_json_merged_text(base_config, extra);
}

static gboolean
start(struct serve_env *e, const struct fleet *f, const char *const *sim_args, const char *extra)
{
	g_autofree char *cfg = config_with(extra);

	if (!serve_start_dialects(e, f->dialects, f->roles, sim_args ? sim_args : fast_sim, cfg))
		return FALSE;
	if (!serve_wait_all_available(e, WAIT_MS))
		serve_fail(e, "the engines did not all become available");
	return TRUE;
}

static void
set_faults(struct serve_env *e, unsigned engine, const char *faults)
{
	g_assert_cmpint(sim_set_faults(&e->sim, engine, faults), ==, 200);
}

/* Faults cleared and a fresh daemon (counters from zero, every engine
 * live), for the next part of a scenario. */
static void
fresh_daemon(struct serve_env *e, const char *extra)
{
	g_autofree char *cfg = config_with(extra);

	g_assert_cmpint(sim_reset_faults(&e->sim), ==, 200);
	g_assert_cmpint(serve_stop_daemon(e, SIGTERM, 10000), ==, 0);
	if (!serve_start_daemon(e, cfg, NULL) || !serve_wait_all_available(e, WAIT_MS))
		serve_fail(e, "narwhal did not come back with every engine available");
}

/* Nothing left running on any engine: no leg was abandoned there (an
 * SGLang decode leg whose prefill failed would otherwise wait for its KV
 * until the engine's own timeout). */
static void
assert_engines_idle(struct serve_env *e)
{
	if (!sim_wait_fleet_stat(&e->sim, "active_requests", 0, 2000))
		serve_fail(e, "an engine still holds a request Narwhal gave up");
}

static json_int_t
work_of(struct serve_env *e, unsigned engine)
{
	return sim_engine_stat(&e->sim, engine, "work_requests_total");
}

/* Spec 4.2: "Before any visible output, Narwhal may retry ... HTTP 429 ...
 * HTTP 503", and a retry avoids the engine that failed. First the engine
 * that takes new work answers 503 (for a pair: its prefill engine), then
 * the engine that generates answers 429 (a pair's decode engine, which
 * SGLang sends its leg at the same time as the prefill's); streamed and
 * not, every request succeeds whole on another engine. */
static void
test_refusal_retried(gconstpointer data)
{
	const struct fleet *f = data;
	struct serve_env e;

	if (!start(&e, f, NULL, NULL))
		return;
	for (int pass = 0; pass < 2; pass++) {
		unsigned victim = pass == 0 ? f->first : f->gen;
		g_autofree char *fault = g_strdup_printf("{\"error_rate\": 1, \"error_status\": %d}",
		                                         pass == 0 ? 503 : 429);
		json_int_t retries = serve_counter(&e, "retries"), work;

		if (f->pairs && pass == 1) {
			/* Slow prefills: the decode engine's refusal comes before the
			 * prefill's answer, while the stream is not yet committed
			 * (docs/api.md, "Streams and their 200"). */
			set_faults(&e, 0, "{\"latency_multiplier\": 50}");
			set_faults(&e, 1, "{\"latency_multiplier\": 50}");
		}
		set_faults(&e, victim, fault);
		work = work_of(&e, victim);
		serve_request_whole(&e, FALSE, 4);
		serve_request_whole(&e, TRUE, 4);
		g_assert_cmpint(serve_counter(&e, "retries"), ==, retries + 2);
		/* Tried once per request, never by the retry. */
		g_assert_cmpint(work_of(&e, victim), ==, work + 2);
		g_assert_cmpint(sim_reset_faults(&e.sim), ==, 200);
	}
	assert_engines_idle(&e);
	serve_finish(&e);
}

/* Spec 4.2 (transient transport failures are retried before any visible
 * output) and 4.3 (a failure after output is a terminal error event, not
 * retried; the stream ends without [DONE]). An engine that refuses
 * connections, or the generating engine dying at its first token: every
 * request succeeds elsewhere. The generating engine dying after three
 * tokens: a stream gets the three, then one error event
 * engine_unreachable, at once; a request not streamed is retried and
 * succeeds (its partial answer was never shown). */
static void
test_engine_dies(gconstpointer data)
{
	const struct fleet *f = data;
	g_autofree char *body = NULL;
	struct serve_env e;
	struct sim_reply r;
	GPtrArray *events;

	if (!start(&e, f, NULL, NULL))
		return;
	set_faults(&e, f->first, "{\"refuse_connections\": true}");
	serve_request_whole(&e, FALSE, 4);
	serve_request_whole(&e, TRUE, 4);
	g_assert_cmpint(serve_counter(&e, "retries"), >=, 1);
	g_assert_cmpint(serve_counter(&e, "requests_failed"), ==, 0);
	assert_engines_idle(&e);

	/* Dying at its first token, before any output: retried. */
	fresh_daemon(&e, NULL);
	set_faults(&e, f->gen, "{\"die_after_tokens\": 0}");
	serve_request_whole(&e, FALSE, 4);
	g_assert_cmpint(serve_counter(&e, "retries"), ==, 1);
	assert_engines_idle(&e);

	fresh_daemon(&e, NULL);
	set_faults(&e, f->gen, "{\"die_after_tokens\": 3}");
	body = serve_completion_body(&e, 10, TRUE);
	serve_post(&e, "/v1/completions", body, NULL, 10000, &r);
	g_assert_cmpint(r.curl_code, ==, CURLE_OK);
	serve_assert_stream_error(&r, "engine_unreachable");
	g_assert_cmpfloat(r.seconds, <, 3.0);
	events = sim_sse_events(r.body->str);
	g_assert_cmpuint(events->len, ==, 4); /* three tokens, then the error */
	g_ptr_array_free(events, TRUE);
	sim_reply_clear(&r);
	g_assert_cmpint(serve_counter(&e, "retries"), ==, 0);

	serve_request_whole(&e, FALSE, 10);
	g_assert_cmpint(serve_counter(&e, "retries"), ==, 1);
	assert_engines_idle(&e);
	serve_finish(&e);
}

/* Spec 6: serving.prefill_timeout_s bounds a prefill leg and
 * engine.first_token_timeout_s the first token, and spec 4.2 retries
 * either before visible output. A hung engine that takes new work: the
 * request is retried elsewhere once its limit passes (a pair's prefill
 * timeout; a whole request's first-token timeout). A hung generating
 * engine under a committed stream: one error event first_token_timeout.
 * An engine slowed a thousandfold misses its first token and the request
 * is retried. Every abandoned leg is cancelled on its engine. */
static void
test_slow_engine(gconstpointer data)
{
	/* The prefill limit below the first-token limit: a SGLang decode leg
	 * waits out its pair's prefill, and its first-token clock must not
	 * pass first (see test_sglang_slow_prefill). */
	static const char hung_first[] = "{\"serving\": {\"prefill_timeout_s\": 0.3},"
	                                 " \"engine\": {\"first_token_timeout_s\": 0.6}}";
	static const char timeouts[] = "{\"serving\": {\"prefill_timeout_s\": 0.3},"
	                               " \"engine\": {\"first_token_timeout_s\": 0.3}}";
	const struct fleet *f = data;
	g_autofree char *stream = NULL;
	struct serve_env e;
	struct sim_reply r;

	if (!start(&e, f, NULL, hung_first))
		return;
	set_faults(&e, f->first, "{\"hang_before_first_token\": true}");
	{
		g_autofree char *body = serve_completion_body(&e, 3, FALSE);

		serve_post(&e, "/v1/completions", body, NULL, 10000, &r);
		if (r.status != 200)
			serve_fail(&e, "a request whose engine hung was not retried");
		g_assert_cmpfloat(r.seconds, >=, 0.3);
		g_assert_cmpfloat(r.seconds, <, 3.0);
		sim_reply_clear(&r);
	}
	g_assert_cmpint(serve_counter(&e, f->pairs ? "prefill_timeouts" : "first_token_timeouts"),
	                ==, 1);
	g_assert_cmpint(serve_counter(&e, "retries"), ==, 1);
	assert_engines_idle(&e);

	fresh_daemon(&e, timeouts);
	set_faults(&e, f->gen, "{\"hang_before_first_token\": true}");
	stream = serve_completion_body(&e, 3, TRUE);
	serve_post(&e, "/v1/completions", stream, NULL, 10000, &r);
	serve_assert_stream_error(&r, "first_token_timeout");
	g_assert_cmpfloat(r.seconds, >=, 0.3);
	g_assert_cmpfloat(r.seconds, <, 3.0);
	sim_reply_clear(&r);
	g_assert_cmpint(serve_counter(&e, "first_token_timeouts"), ==, 1);
	g_assert_cmpint(serve_counter(&e, "retries"), ==, 0);
	assert_engines_idle(&e);

	/* 20 ms model steps a thousand times longer at time scale 50: 0.4 s
	 * to the first token. */
	fresh_daemon(&e, timeouts);
	set_faults(&e, f->gen, "{\"latency_multiplier\": 1000}");
	serve_request_whole(&e, FALSE, 3);
	g_assert_cmpint(serve_counter(&e, "first_token_timeouts"), ==, 1);
	g_assert_cmpint(serve_counter(&e, "retries"), ==, 1);
	assert_engines_idle(&e);
	serve_finish(&e);
}

/* Spec 4.3: "Client backpressure closes the connection immediately": a
 * stream client that stops reading is closed once the relay's buffer is
 * full, and its engine work is cancelled, whatever the engine speaks. */
static void
test_backpressure(gconstpointer data)
{
	static const char *const sim_args[] = { "--no-delay", "--preset", "llama2-70b-tp8-h100",
	                                        "--max-model-len", "200000", NULL };
	const struct fleet *f = data;
	GString *got = g_string_new(NULL);
	g_autofree char *body = NULL;
	struct serve_env e;
	int fd;

	if (!start(&e, f, sim_args, NULL))
		return;
	body = serve_completion_body(&e, 100000, TRUE);
	fd = serve_raw_post(e.port, "/v1/completions", body, 4096);
	g_assert_cmpint(fd, >=, 0);
	if (!serve_raw_read_until(fd, got, "data:", 5000))
		serve_fail(&e, "no stream");
	/* Never read again: the kernel's buffers fill, then the relay's. */
	if (!serve_wait_log(&e, "\"event\":\"client_backpressure\"", 10000))
		serve_fail(&e, "the client that stopped reading was not closed");
	g_assert_true(sim_wait_fleet_stat(&e.sim, "running", 0, 2000));
	g_assert_cmpint(serve_counter(&e, "backpressure_closes"), ==, 1);
	close(fd);
	assert_engines_idle(&e);
	g_string_free(got, TRUE);
	serve_finish(&e);
}

/* A request to the SGLang pairs that must fail: the status and code, in
 * bounded time, and nothing left on the engines. */
static void
assert_pair_fails(struct serve_env *e, gboolean stream, long status, const char *code)
{
	g_autofree char *body = serve_completion_body(e, 4, stream);
	struct sim_reply r;

	serve_post(e, "/v1/completions", body, NULL, 10000, &r);
	serve_assert_error(&r, status, code);
	g_assert_cmpfloat(r.seconds, <, 3.0);
	sim_reply_clear(&r);
	assert_engines_idle(e);
}

/* SGLang's handoff (docs/dialects.md, "What it sends"; plugins.md, "How a
 * pair runs"): both legs go out at once, and a prefill leg's failure fails
 * the attempt, charged to the prefill engine. Its decode engine meanwhile
 * waits for the room's KV, here for 60 s of wall time: Narwhal must end
 * that leg, not leave it waiting, and answer the client in bounded time.
 * Both prefill engines refuse with 503 (retried, then 502 engine_error),
 * with 400 (the client's request refused: 400 engine_rejected, not
 * retried), or hang (spec 6: prefill_timeout_s, then 504). A prefill
 * failure is an HTTP error for a stream too (spec 4.3). A prefill engine
 * that dies makes a retry on the other. */
static void
test_sglang_prefill_fails(void)
{
	static const char *const sim_args[] = { "--time-scale", "50",
	                                        "--disaggregation-waiting-timeout", "3000", NULL };
	const struct fleet *f = &fleets[0];
	struct serve_env e;
	json_int_t decodes;

	if (!start(&e, f, sim_args, "{\"serving\": {\"prefill_timeout_s\": 0.3}}"))
		return;
	for (unsigned p = 0; p < 2; p++)
		set_faults(&e, p, "{\"error_rate\": 1, \"error_status\": 503}");
	assert_pair_fails(&e, FALSE, 502, "engine_error");
	assert_pair_fails(&e, TRUE, 502, "engine_error");
	g_assert_cmpint(serve_counter(&e, "retries"), ==, 2);
	g_assert_cmpint(serve_counter(&e, "prefill_failed_status"), ==, 4);

	for (unsigned p = 0; p < 2; p++)
		set_faults(&e, p, "{\"error_status\": 400}");
	assert_pair_fails(&e, FALSE, 400, "engine_rejected");
	assert_pair_fails(&e, TRUE, 400, "engine_rejected");
	g_assert_cmpint(serve_counter(&e, "retries"), ==, 2);

	for (unsigned p = 0; p < 2; p++)
		set_faults(&e, p, "{\"error_rate\": 0, \"hang_before_first_token\": true}");
	decodes = work_of(&e, 2) + work_of(&e, 3);
	assert_pair_fails(&e, FALSE, 504, "prefill_timeout");
	assert_pair_fails(&e, TRUE, 504, "prefill_timeout");
	g_assert_cmpint(serve_counter(&e, "prefill_timeouts"), ==, 4);
	/* Each attempt's decode leg went out and waited on its room. */
	g_assert_cmpint(work_of(&e, 2) + work_of(&e, 3), ==, decodes + 4);
	g_assert_cmpint(serve_counter(&e, "requests_ok"), ==, 0);

	/* One prefill engine dies at its first token: the request is retried
	 * on the other. The decode engines reach their rooms 0.1 s late (5
	 * model seconds), after Narwhal has seen the prefill fail: a decode
	 * leg failing first, which the room would make it do at once, is the
	 * race of test-serve-dialects' client errors, not this test's. */
	g_assert_cmpint(sim_reset_faults(&e.sim), ==, 200);
	set_faults(&e, 0, "{\"die_after_tokens\": 0}");
	set_faults(&e, 2, "{\"hang_before_first_token\": 5}");
	set_faults(&e, 3, "{\"hang_before_first_token\": 5}");
	serve_request_whole(&e, FALSE, 4);
	serve_request_whole(&e, TRUE, 4);
	assert_engines_idle(&e);
	serve_finish(&e);
}

/* Spec 6 (serving.prefill_timeout_s bounds the prefill leg) with SGLang's
 * concurrent legs (plugins.md, "How a pair runs": "The prefill leg is
 * bounded by serving.prefill_timeout_s"): a prefill that takes 0.6 s,
 * within its 5 s limit, delays its decode leg's first token by as much.
 * The request must succeed, and no decode engine be charged for the
 * prefill's time. */
static void
test_sglang_slow_prefill(void)
{
	const struct fleet *f = &fleets[0];
	g_autofree char *body = NULL;
	struct serve_env e;
	struct sim_reply r;

	if (!start(&e, f, NULL, "{\"serving\": {\"prefill_timeout_s\": 5, \"max_attempts\": 1},"
	           " \"engine\": {\"first_token_timeout_s\": 0.3}}"))
		return;
	/* 30 model seconds at time scale 50. */
	for (unsigned p = 0; p < 2; p++)
		set_faults(&e, p, "{\"hang_before_first_token\": 30}");
	body = serve_completion_body(&e, 4, FALSE);
	serve_post(&e, "/v1/completions", body, NULL, 10000, &r);
	if (r.status != 200)
		serve_fail(&e, "a prefill within its limit failed the request");
	g_assert_cmpfloat(r.seconds, >=, 0.6);
	sim_reply_clear(&r);
	g_assert_cmpint(serve_counter(&e, "first_token_timeouts"), ==, 0);
	assert_engines_idle(&e);
	serve_finish(&e);
}

int
main(int argc, char **argv)
{
	static const struct {
		const char *path;
		GTestDataFunc fn;
	} scenarios[] = {
		{ "spec-4.2/refusal-retried", test_refusal_retried },
		{ "spec-4.3/engine-dies", test_engine_dies },
		{ "spec-6/slow-engine", test_slow_engine },
		{ "spec-4.3/backpressure-close", test_backpressure },
	};

	g_test_init(&argc, &argv, NULL);
	for (size_t i = 0; i < G_N_ELEMENTS(fleets); i++) {
		for (size_t j = 0; j < G_N_ELEMENTS(scenarios); j++) {
			g_autofree char *path = g_strdup_printf("/serve/dialect-faults/%s/%s",
			                                        fleets[i].name, scenarios[j].path);

			g_test_add_data_func(path, &fleets[i], scenarios[j].fn);
		}
	}
	g_test_add_func("/serve/dialect-faults/sglang-pd/issue-14/prefill-fails-while-decode-waits",
	                test_sglang_prefill_fails);
	g_test_add_func("/serve/dialect-faults/sglang-pd/spec-6/slow-prefill-not-decode-timeout",
	                test_sglang_slow_prefill);
	return g_test_run();
}
