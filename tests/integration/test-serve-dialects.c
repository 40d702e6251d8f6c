/*
 * One scenario suite through Narwhal for every engine backend (issue 14:
 * "the same integration suite runs through Narwhal for vLLM, SGLang and
 * llama.cpp fleets", and "a fleet that mixes dialects works"). Each
 * scenario runs against four narwhal-sim fleets whose engines speak their
 * dialect (narwhal-sim --dialect): a vLLM prefill/decode pair, a SGLang
 * pair launched in its roles, two SGLang aggregate engines, two llama.cpp
 * engines (aggregate only), and a vLLM pair beside a llama.cpp engine. The client sees the same API
 * whatever the engines speak (spec 4: completions and chat, streamed and
 * not, usage, error envelopes, cancellation, /v1/models), and the monitor
 * reads every engine's /metrics page.
 */
#include "build-config.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <glib.h>

#include "integration/test-serve-common.h"

struct fleet {
	const char *name;
	const char *dialects; /* serve_start_dialects */
	const char *roles;
	unsigned pairs;       /* 1: requests run as a prefill/decode pair */
};

static const struct fleet fleets[] = {
	{ "vllm", "vv", "pd", 1 },
	{ "sglang", "ss", "pd", 1 },
	/* SGLang without --disaggregation-mode: the dialect is told so. */
	{ "sglang-aggregate", "ss", "aa", 0 },
	{ "llamacpp", "ll", "aa", 0 },
	/* The llama.cpp engine comes first: it ties with the vLLM prefill
	 * engine on load and the lower index wins, so it serves whole requests
	 * beside the pair (tests/integration/test-serve-mixed-fleet.c drains it
	 * to make the pair work). */
	{ "mixed", "lvv", "dpd", 0 },
};

#define WAIT_MS 8000
/* A monitor pass every 100 ms, so its readings are seen within a test. */
#define FAST_MONITOR "{\"controller\":{\"monitor_interval_s\":0.1}}"

static gboolean
start(struct serve_env *e, const struct fleet *f, const char *const *sim_args,
      const char *config_json)
{
	static const char *const fast[] = { "--time-scale", "50", NULL };

	if (!serve_start_dialects(e, f->dialects, f->roles, sim_args ? sim_args : fast,
	                          config_json ? config_json : FAST_MONITOR))
		return FALSE;
	if (!serve_wait_all_available(e, WAIT_MS)) {
		g_autofree char *log = serve_log(e);

		g_error("%s: the engines did not all become available:\n%s", f->name, log);
	}
	return TRUE;
}

/* No dialect call failed and no monitor stage failed (an engine whose
 * /metrics page its dialect cannot read fails the metrics stage). */
static void
assert_no_dialect_failures(struct serve_env *e)
{
	g_autofree char *log = serve_log(e);
	g_auto(GStrv) lines = g_strsplit(log, "\n", -1);

	for (guint i = 0; lines[i] != NULL; i++) {
		if (strstr(lines[i], "\"event\":\"plugin_call_failed\"") != NULL ||
		    strstr(lines[i], "\"event\":\"monitor_failure\"") != NULL)
			g_error("%s", lines[i]);
	}
}

/* The work went where the fleet sends it: n requests, each as a pair
 * whose decode engine took the prefill engine's KV, or each whole on one
 * engine that never took part in a handoff. */
static void
assert_placed(struct serve_env *e, const struct fleet *f, json_int_t n)
{
	g_assert_cmpint(serve_counter(e, "requests_ok"), ==, n);
	if (f->pairs) {
		g_assert_cmpint(serve_counter(e, "prefill_started"), ==, n);
		g_assert_cmpint(serve_counter(e, "decode_started"), ==, n);
		g_assert_cmpint(serve_counter(e, "aggregate_started"), ==, 0);
		/* The handoff happened: the decode engine did not recompute. */
		g_assert_cmpint(sim_engine_stat(&e->sim, 0, "kv_pulls_served"), ==, n);
	} else {
		g_assert_cmpint(serve_counter(e, "aggregate_started"), ==, n);
		g_assert_cmpint(serve_counter(e, "prefill_started"), ==, 0);
		g_assert_cmpint(sim_fleet_stat(&e->sim, "kv_pulls_served"), ==, 0);
		g_assert_cmpint(sim_fleet_stat(&e->sim, "leases"), ==, 0);
	}
}

static void
assert_usage(json_t *usage, json_int_t completion)
{
	json_int_t prompt = json_integer_value(json_object_get(usage, "prompt_tokens"));

	g_assert_true(json_is_object(usage));
	g_assert_cmpint(json_integer_value(json_object_get(usage, "completion_tokens")), ==,
	                completion);
	g_assert_cmpint(prompt, >, 0);
	g_assert_cmpint(json_integer_value(json_object_get(usage, "total_tokens")), ==,
	                prompt + completion);
}

/* A whole SSE stream: [DONE] last, the usage chunk before it (owned). */
static json_t *
stream_usage(const struct sim_reply *r, GPtrArray **events_out)
{
	g_autofree char *ctype = sim_reply_header(r, "Content-Type");
	GPtrArray *events = sim_sse_events(r->body->str);
	json_t *last, *usage;

	g_assert_cmpstr(ctype, ==, "text/event-stream");
	g_assert_cmpuint(events->len, >=, 3);
	g_assert_cmpstr(g_ptr_array_index(events, events->len - 1), ==, "[DONE]");
	last = sim_json(g_ptr_array_index(events, events->len - 2));
	usage = json_incref(json_object_get(last, "usage"));
	json_decref(last);
	*events_out = events;
	return usage;
}

static void
post_ok(struct serve_env *e, const char *path, const char *body, struct sim_reply *r)
{
	serve_post(e, path, body, NULL, 10000, r);
	if (r->status != 200) {
		g_autofree char *log = serve_log(e);

		g_error("want 200, got %ld: %s\nnarwhal log:\n%s", r->status, r->body->str, log);
	}
}

/* Spec 4.3 and issue 14: completions, streamed and not, with usage. */
static void
test_completions(gconstpointer data)
{
	const struct fleet *f = data;
	struct serve_env e;
	struct sim_reply r;
	g_autofree char *plain = NULL, *stream = NULL;
	GPtrArray *events;
	json_t *doc, *usage;

	if (!start(&e, f, NULL, NULL))
		return;
	plain = g_strdup_printf("{\"model\":\"%s\",\"prompt\":\"The quick brown fox\","
	                        "\"max_tokens\":6}", e.model);
	post_ok(&e, "/v1/completions", plain, &r);
	doc = sim_json(r.body->str);
	g_assert_cmpstr(json_string_value(json_object_get(doc, "object")), ==, "text_completion");
	g_assert_cmpuint(strlen(json_string_value(json_object_get(
		json_array_get(json_object_get(doc, "choices"), 0), "text"))), >, 0);
	assert_usage(json_object_get(doc, "usage"), 6);
	json_decref(doc);
	sim_reply_clear(&r);

	stream = g_strdup_printf("{\"model\":\"%s\",\"prompt\":\"The quick brown fox\","
	                         "\"max_tokens\":6,\"stream\":true,"
	                         "\"stream_options\":{\"include_usage\":true}}", e.model);
	post_ok(&e, "/v1/completions", stream, &r);
	usage = stream_usage(&r, &events);
	assert_usage(usage, 6);
	/* Six token events, the usage chunk, [DONE]. */
	g_assert_cmpuint(events->len, ==, 8);
	json_decref(usage);
	g_ptr_array_free(events, TRUE);
	sim_reply_clear(&r);

	assert_placed(&e, f, 2);
	assert_no_dialect_failures(&e);
	serve_clear(&e);
}

/* Spec 4.3 and issue 14: chat completions, streamed and not, with usage. */
static void
test_chat(gconstpointer data)
{
	const struct fleet *f = data;
	struct serve_env e;
	struct sim_reply r;
	g_autofree char *plain = NULL, *stream = NULL;
	GPtrArray *events;
	json_t *doc, *msg, *usage, *first;

	if (!start(&e, f, NULL, NULL))
		return;
	plain = g_strdup_printf("{\"model\":\"%s\",\"messages\":[{\"role\":\"user\","
	                        "\"content\":\"Hello there\"}],\"max_tokens\":5}", e.model);
	post_ok(&e, "/v1/chat/completions", plain, &r);
	doc = sim_json(r.body->str);
	g_assert_cmpstr(json_string_value(json_object_get(doc, "object")), ==, "chat.completion");
	msg = json_object_get(json_array_get(json_object_get(doc, "choices"), 0), "message");
	g_assert_cmpstr(json_string_value(json_object_get(msg, "role")), ==, "assistant");
	g_assert_true(json_is_string(json_object_get(msg, "content")));
	assert_usage(json_object_get(doc, "usage"), 5);
	json_decref(doc);
	sim_reply_clear(&r);

	stream = g_strdup_printf("{\"model\":\"%s\",\"messages\":[{\"role\":\"user\","
	                         "\"content\":\"Hello there\"}],\"max_tokens\":5,\"stream\":true,"
	                         "\"stream_options\":{\"include_usage\":true}}", e.model);
	post_ok(&e, "/v1/chat/completions", stream, &r);
	usage = stream_usage(&r, &events);
	assert_usage(usage, 5);
	/* The role event, five tokens, the usage chunk, [DONE]. */
	g_assert_cmpuint(events->len, ==, 8);
	first = sim_json(g_ptr_array_index(events, 0));
	g_assert_cmpstr(json_string_value(json_object_get(first, "object")), ==,
	                "chat.completion.chunk");
	json_decref(first);
	json_decref(usage);
	g_ptr_array_free(events, TRUE);
	sim_reply_clear(&r);

	assert_placed(&e, f, 2);
	assert_no_dialect_failures(&e);
	serve_clear(&e);
}

static void
assert_hidden(const struct sim_reply *r)
{
	g_assert_null(strstr(r->body->str, "127.0.0.1"));
	g_assert_null(strstr(r->body->str, "http://"));
}

/* Issue 9's error envelopes through every dialect (issue 14, "its error
 * shapes"): a prompt the model's context cannot hold is 400
 * context_length_exceeded, whether Narwhal sees it first (an exact count
 * and a known context) or the engine refuses it in its dialect's words;
 * an engine's refusal of the client's own request is 400 engine_rejected
 * with the engine's message. Streamed and not. */
static void
test_client_errors(gconstpointer data)
{
	static const char *const sim_args[] = { "--time-scale", "50", "--max-model-len", "64",
	                                        NULL };
	const struct fleet *f = data;
	struct serve_env e;
	GString *words = g_string_new(NULL);
	g_autofree char *plain = NULL, *stream = NULL, *fits = NULL;
	const char *bodies[2];

	if (!start(&e, f, sim_args, NULL))
		return;
	for (int i = 0; i < 100; i++)
		g_string_append(words, "whale ");
	plain = g_strdup_printf("{\"model\":\"%s\",\"prompt\":\"%s\",\"max_tokens\":7}", e.model,
	                        words->str);
	stream = g_strdup_printf("{\"model\":\"%s\",\"prompt\":\"%s\",\"max_tokens\":7,"
	                         "\"stream\":true}", e.model, words->str);
	bodies[0] = plain;
	bodies[1] = stream;
	for (int pass = 0; pass < 2; pass++) {
		/* Pass 1: sized by characters, so only the engine can tell. */
		if (pass == 1) {
			g_assert_cmpint(serve_stop_daemon(&e, SIGTERM, 10000), ==, 0);
			g_assert_true(serve_start_daemon(&e, "{\"engine\":{\"tokenize\":false},"
			                                     "\"controller\":{\"monitor_interval_s\":0.1}}",
			                                 NULL));
			g_assert_true(serve_wait_all_available(&e, WAIT_MS));
		}
		for (int i = 0; i < 2; i++) {
			struct sim_reply r;

			serve_post(&e, "/v1/completions", bodies[i], NULL, 10000, &r);
			serve_assert_error(&r, 400, "context_length_exceeded");
			assert_hidden(&r);
			sim_reply_clear(&r);
		}
	}
	/* The engine refused the second pass's two in its own words. */
	g_assert_cmpint(serve_counter(&e, "context_too_long"), ==, 2);

	g_assert_cmpint(serve_counter(&e, "requests_ok"), ==, 0);
	for (unsigned i = 0; i < e.sim.n_engines; i++)
		g_assert_cmpint(sim_set_faults(&e.sim, i, "{\"error_rate\": 1, \"error_status\": 422}"),
		                ==, 200);
	fits = g_strdup_printf("{\"model\":\"%s\",\"prompt\":\"Hi\",\"max_tokens\":2}", e.model);
	for (int i = 0; i < 2; i++) {
		g_autofree char *body = i ? g_strdup_printf("{\"model\":\"%s\",\"prompt\":\"Hi\","
		                                            "\"max_tokens\":2,\"stream\":true}", e.model)
		                          : g_strdup(fits);
		struct sim_reply r;
		json_t *doc;
		const char *msg;

		serve_post(&e, "/v1/completions", body, NULL, 10000, &r);
		serve_assert_error(&r, 400, "engine_rejected");
		doc = sim_json(r.body->str);
		msg = json_string_value(json_object_get(json_object_get(doc, "error"), "message"));
		g_assert_nonnull(msg);
		g_assert_nonnull(strstr(msg, "answers 422"));
		json_decref(doc);
		assert_hidden(&r);
		sim_reply_clear(&r);
	}
	g_string_free(words, TRUE);
	assert_no_dialect_failures(&e);
	serve_clear(&e);
}

/* The engine running a request's generation (its decode, or whole). */
static unsigned
busy_engine(struct serve_env *e)
{
	for (unsigned i = 0; i < e->sim.n_engines; i++)
		if (sim_engine_stat(&e->sim, i, "running") > 0)
			return i;
	g_error("no engine is running the request");
}

/* GET /narwhal/health's metrics of engine i, as the monitor last read
 * them (owned; JSON null when never read). */
static json_t *
engine_metrics(struct serve_env *e, unsigned i)
{
	json_t *doc = serve_health(e);
	json_t *m = json_incref(json_object_get(json_array_get(json_object_get(doc, "engines"), i),
	                                        "metrics"));

	json_decref(doc);
	return m;
}

/* Spec 4.3 (a client that leaves mid-stream has its engine work
 * cancelled) through every dialect, and issue 14's "its metrics names for
 * the monitor": while the request runs, the monitor reads the busy
 * engine's /metrics page in its dialect and sees it running. */
static void
test_cancel_mid_stream(gconstpointer data)
{
	const struct fleet *f = data;
	struct serve_env e;
	GString *got = g_string_new(NULL);
	g_autofree char *body = NULL;
	gint64 deadline;
	unsigned busy;
	gboolean seen = FALSE;
	int fd;

	if (!start(&e, f, NULL, NULL))
		return;
	/* 20 ms model steps stretched 40 times at time scale 50: 16 ms each,
	 * so the 1000-token answer would take 16 s. */
	for (unsigned i = 0; i < e.sim.n_engines; i++)
		g_assert_cmpint(sim_set_faults(&e.sim, i, "{\"latency_multiplier\": 40}"), ==, 200);
	body = serve_completion_body(&e, 1000, TRUE);
	fd = serve_raw_post(e.port, "/v1/completions", body, 0);
	g_assert_cmpint(fd, >=, 0);
	if (!serve_raw_read_until(fd, got, "\"text\"", 10000))
		g_error("no token event: %s", got->str);
	g_assert_true(sim_wait_fleet_stat(&e.sim, "running", 1, 2000));
	busy = busy_engine(&e);
	deadline = g_get_monotonic_time() + 5 * G_USEC_PER_SEC;
	while (!seen && g_get_monotonic_time() < deadline) {
		json_t *m = engine_metrics(&e, busy);

		seen = json_integer_value(json_object_get(m, "running")) == 1;
		json_decref(m);
		if (!seen)
			g_usleep(20000);
	}
	if (!seen)
		g_error("the monitor never read engine %u running its request", busy);

	close(fd);
	g_assert_true(sim_wait_fleet_stat(&e.sim, "running", 0, 2000));
	g_assert_true(sim_wait_fleet_stat(&e.sim, "active_requests", 0, 2000));
	g_assert_true(serve_wait_log(&e, "\"event\":\"client_disconnected\"", 2000));
	g_assert_cmpint(serve_counter(&e, "client_disconnects"), ==, 1);
	/* Generation stopped well short of the 1000 tokens asked for. */
	g_assert_cmpint(sim_fleet_stat(&e.sim, "generation_tokens_total"), <, 500);
	g_assert_true(sim_wait_fleet_stat(&e.sim, "leases", 0, 2000));
	g_string_free(got, TRUE);
	assert_no_dialect_failures(&e);
	serve_clear(&e);
}

/* Spec 4.1: GET /v1/models lists the model the engines serve, learnt
 * through each engine's dialect; issue 14: the monitor reads every
 * engine's /metrics page, and Narwhal's own /metrics is served. */
static void
test_models_and_metrics(gconstpointer data)
{
	const struct fleet *f = data;
	struct serve_env e;
	struct sim_reply r;
	json_t *doc, *m, *health;
	gint64 deadline;
	gboolean all = FALSE;

	if (!start(&e, f, NULL, NULL))
		return;
	sim_http(e.port, "GET", "/v1/models", NULL, NULL, 5000, &r);
	g_assert_cmpint(r.status, ==, 200);
	doc = sim_json(r.body->str);
	g_assert_cmpuint(json_array_size(json_object_get(doc, "data")), ==, 1);
	m = json_array_get(json_object_get(doc, "data"), 0);
	g_assert_cmpstr(json_string_value(json_object_get(m, "id")), ==, e.model);
	g_assert_cmpstr(json_string_value(json_object_get(m, "owned_by")), ==, "narwhal");
	json_decref(doc);
	sim_reply_clear(&r);

	/* Every engine's page read at least once, with both load figures. */
	deadline = g_get_monotonic_time() + 5 * G_USEC_PER_SEC;
	while (!all && g_get_monotonic_time() < deadline) {
		all = TRUE;
		for (unsigned i = 0; i < e.sim.n_engines; i++) {
			json_t *x = engine_metrics(&e, i);

			all = all && json_is_integer(json_object_get(x, "running")) &&
			      json_is_integer(json_object_get(x, "waiting"));
			json_decref(x);
		}
		if (!all)
			g_usleep(20000);
	}
	if (!all) {
		g_autofree char *log = serve_log(&e);

		g_error("%s: not every engine's metrics were read:\n%s", f->name, log);
	}
	health = serve_health(&e);
	g_assert_cmpint(json_integer_value(json_object_get(json_object_get(health, "monitor"),
	                                                   "failed_passes")), ==, 0);
	json_decref(health);

	sim_http(e.port, "GET", "/metrics", NULL, NULL, 5000, &r);
	g_assert_cmpint(r.status, ==, 200);
	g_assert_nonnull(strstr(r.body->str, "narwhal_"));
	sim_reply_clear(&r);
	assert_no_dialect_failures(&e);
	serve_clear(&e);
}

int
main(int argc, char **argv)
{
	static const struct {
		const char *name;
		GTestDataFunc fn;
	} scenarios[] = {
		{ "completions", test_completions },
		{ "chat", test_chat },
		{ "client-errors", test_client_errors },
		{ "cancel-mid-stream", test_cancel_mid_stream },
		{ "models-and-metrics", test_models_and_metrics },
	};

	g_test_init(&argc, &argv, NULL);
	for (size_t i = 0; i < G_N_ELEMENTS(fleets); i++) {
		for (size_t j = 0; j < G_N_ELEMENTS(scenarios); j++) {
			g_autofree char *path = g_strdup_printf("/serve/dialects/issue-14/%s/%s",
			                                        fleets[i].name, scenarios[j].name);

			g_test_add_data_func(path, &fleets[i], scenarios[j].fn);
		}
	}
	return g_test_run();
}
