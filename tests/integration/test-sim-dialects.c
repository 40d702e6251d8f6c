/*
 * narwhal-sim speaking SGLang and llama.cpp (issue 14: "narwhal-sim speaks
 * both, chosen per engine (--dialect), field for field as the reference
 * describes"), against real simulator processes on loopback ephemeral
 * ports: SGLang's bootstrap handoff with the legs in either order, its
 * refusals, routes and error shapes; llama.cpp as an aggregate-only
 * engine; a mixed fleet's description. Section numbers are those of the
 * engine wire-format reference.
 */
#include "build-config.h"

#include <signal.h>
#include <string.h>

#include <curl/curl.h>

#include "integration/sim-client.h"

static const char *const sglang_pd[] = { "--dialect", "sglang", "--engines", "2",
                                         "--time-scale", "20", NULL };

static json_int_t
stat_of(const struct sim_proc *p, unsigned engine, const char *key)
{
	json_t *st = sim_engine_stats(p, engine);
	json_int_t v = json_integer_value(json_object_get(st, key));

	json_decref(st);
	return v;
}

static const json_t *
fleet_engine(const struct sim_proc *p, unsigned i)
{
	return json_array_get(json_object_get(p->fleet, "engines"), i);
}

static const char *
str_at(const json_t *doc, const char *key)
{
	return json_string_value(json_object_get(doc, key));
}

static json_int_t
usage_of(const json_t *doc, const char *key)
{
	return json_integer_value(json_object_get(json_object_get(doc, "usage"), key));
}

/* One request whose answer must be status, as JSON. */
static json_t *
ask(guint16 port, const char *method, const char *path, const char *body, long status)
{
	struct sim_reply r;
	json_t *doc;

	sim_http(port, method, path, body, NULL, 10000, &r);
	if (r.status != status)
		g_error("%s %s: %ld, want %ld: %s", method, path, r.status, status, r.body->str);
	doc = r.body->len ? sim_json(r.body->str) : NULL;
	sim_reply_clear(&r);
	return doc;
}

/* A leg sent from a thread of its own, so that both go at once. */
struct leg {
	guint16 port;
	char *body;
	long timeout_ms;
	struct sim_reply r;
};

static gpointer
run_leg(gpointer data)
{
	struct leg *leg = data;

	sim_http(leg->port, "POST", "/v1/completions", leg->body, NULL, leg->timeout_ms, &leg->r);
	return NULL;
}

static char *
pd_body(guint64 room, int max_tokens, gboolean stream)
{
	return g_strdup_printf("{\"prompt\":\"SGLang pairs engines by room\",\"max_tokens\":%d,"
	                       "\"stream\":%s,\"bootstrap_host\":\"127.0.0.1\","
	                       "\"bootstrap_port\":8998,\"bootstrap_room\":%" G_GUINT64_FORMAT "}",
	                       max_tokens, stream ? "true" : "false", room);
}

static void
test_sglang_handoff(void)
{
	struct sim_proc p;
	struct leg decode = { 0 };
	GThread *thread;
	json_t *doc;
	g_autofree char *body = pd_body(G_GUINT64_CONSTANT(9223372036854775000), 6, FALSE);
	g_autofree char *streamed = pd_body(42, 3, TRUE);

	g_test_summary("/sim/issue14/sglang-pd-handoff: the same body with bootstrap fields to "
	               "a prefill and a decode engine at once; the decode waits for the room's "
	               "KV and streams or answers in full; the prefill's KV is freed");
	g_assert_true(sim_start(&p, sglang_pd));
	g_assert_cmpstr(str_at(fleet_engine(&p, 0), "dialect"), ==, "sglang");
	g_assert_cmpstr(str_at(fleet_engine(&p, 0), "role"), ==, "prefill");
	g_assert_true(json_is_true(json_object_get(fleet_engine(&p, 0), "pinned")));
	g_assert_cmpstr(str_at(fleet_engine(&p, 1), "role"), ==, "decode");

	/* Decode first: it waits until the prefill has run. */
	decode.port = p.ports[1];
	decode.body = body;
	decode.timeout_ms = 10000;
	thread = g_thread_new("decode-leg", run_leg, &decode);
	{
		gint64 deadline = g_get_monotonic_time() + 5 * G_USEC_PER_SEC;

		while (stat_of(&p, 1, "active_requests") < 1 && g_get_monotonic_time() < deadline)
			g_usleep(10000);
		g_assert_cmpint(stat_of(&p, 1, "active_requests"), ==, 1);
	}
	doc = ask(p.ports[0], "POST", "/v1/completions", body, 200);
	g_assert_cmpint(usage_of(doc, "completion_tokens"), ==, 1);
	g_assert_null(json_object_get(doc, "kv_transfer_params"));
	json_decref(doc);
	g_thread_join(thread);
	g_assert_cmpint(decode.r.status, ==, 200);
	doc = sim_json(decode.r.body->str);
	g_assert_cmpint(usage_of(doc, "completion_tokens"), ==, 6);
	json_decref(doc);
	sim_reply_clear(&decode.r);
	g_assert_cmpint(stat_of(&p, 0, "leases"), ==, 0);
	g_assert_cmpint(stat_of(&p, 0, "kv_blocks_used"), ==, 0);
	g_assert_cmpint(stat_of(&p, 0, "kv_pulls_served"), ==, 1);

	/* Prefill first (its KV waits in the room), then the decode; both
	 * stream, as the body asks. */
	{
		struct sim_reply r;
		GPtrArray *ev;

		sim_http(p.ports[0], "POST", "/v1/completions", streamed, NULL, 10000, &r);
		g_assert_cmpint(r.status, ==, 200);
		ev = sim_sse_events(r.body->str);
		g_assert_cmpuint(ev->len, ==, 1 + 1);
		g_ptr_array_unref(ev);
		sim_reply_clear(&r);
		g_assert_cmpint(stat_of(&p, 0, "leases"), ==, 1);

		sim_http(p.ports[1], "POST", "/v1/completions", streamed, NULL, 10000, &r);
		g_assert_cmpint(r.status, ==, 200);
		ev = sim_sse_events(r.body->str);
		g_assert_cmpuint(ev->len, ==, 3 + 1);
		g_assert_cmpstr(g_ptr_array_index(ev, 3), ==, "[DONE]");
		g_ptr_array_unref(ev);
		sim_reply_clear(&r);
	}
	g_assert_cmpint(stat_of(&p, 0, "leases"), ==, 0);
	g_assert_cmpint(stat_of(&p, 0, "kv_pulls_served"), ==, 2);
	g_assert_cmpint(sim_stop(&p, SIGTERM, 10000), ==, 0);
	sim_clear(&p);
}

static void
test_sglang_refusals(void)
{
	const char *args[] = { "--dialect", "sglang", "--engines", "2", "--time-scale", "20",
	                       "--disaggregation-waiting-timeout", "2", NULL };
	struct sim_proc p;
	struct leg decode = { 0 };
	GThread *thread;
	json_t *doc;
	g_autofree char *body = pd_body(7, 4, FALSE);
	struct sim_reply r;
	gint64 t0;

	g_test_summary("/sim/issue14/sglang-pd-refusals: a PD engine refuses a request without "
	               "bootstrap fields (400, flat error); a decode leg whose prefill never "
	               "comes times out, and one whose prefill is abandoned fails at once (500)");
	g_assert_true(sim_start(&p, args));
	for (unsigned i = 0; i < 2; i++) {
		doc = ask(p.ports[i], "POST", "/v1/completions",
		          "{\"prompt\":\"no room\",\"max_tokens\":2}", 400);
		g_assert_cmpstr(str_at(doc, "object"), ==, "error");
		g_assert_cmpint(json_integer_value(json_object_get(doc, "code")), ==, 400);
		g_assert_nonnull(strstr(str_at(doc, "message"), "bootstrap_room"));
		json_decref(doc);
	}
	doc = ask(p.ports[1], "POST", "/v1/completions",
	          "{\"prompt\":\"x\",\"bootstrap_room\":3}", 400);
	g_assert_cmpstr(str_at(doc, "object"), ==, "error");
	json_decref(doc);

	/* No prefill: the wait (2 model seconds, 0.1 s of wall time) ends in 500. */
	doc = ask(p.ports[1], "POST", "/v1/completions", body, 500);
	g_assert_cmpstr(str_at(doc, "object"), ==, "error");
	g_assert_cmpstr(str_at(doc, "type"), ==, "InternalServerError");
	g_assert_nonnull(strstr(str_at(doc, "message"), "timed out"));
	json_decref(doc);

	/* A prefill leg whose client leaves while it hangs: the waiting decode
	 * fails at once, long before its timeout. */
	g_assert_cmpint(sim_stop(&p, SIGTERM, 10000), ==, 0);
	sim_clear(&p);
	{
		const char *slow[] = { "--dialect", "sglang", "--engines", "2", NULL };

		g_assert_true(sim_start(&p, slow)); /* waiting timeout 300 s of wall time */
	}
	g_assert_cmpint(sim_set_faults(&p, 0, "{\"hang_before_first_token\":true}"), ==, 200);
	decode.port = p.ports[1];
	decode.body = body;
	decode.timeout_ms = 20000;
	t0 = g_get_monotonic_time();
	thread = g_thread_new("decode-leg", run_leg, &decode);
	sim_http(p.ports[0], "POST", "/v1/completions", body, NULL, 300, &r);
	g_assert_cmpint(r.status, ==, 0); /* the client gave up */
	sim_reply_clear(&r);
	g_thread_join(thread);
	g_assert_cmpint(decode.r.status, ==, 500);
	g_assert_nonnull(strstr(decode.r.body->str, "the prefill request failed"));
	g_assert_cmpfloat((double)(g_get_monotonic_time() - t0) / 1e6, <, 10.0);
	sim_reply_clear(&decode.r);
	g_assert_cmpint(sim_stop(&p, SIGTERM, 10000), ==, 0);
	sim_clear(&p);
}

static void
test_sglang_routes(void)
{
	const char *args[] = { "--dialect", "sglang:aggregate", "--time-scale", "20",
	                       "--max-model-len", "64", NULL };
	struct sim_proc p;
	struct sim_reply r;
	json_t *doc;
	guint16 port;

	g_test_summary("/sim/issue14/sglang-routes: an aggregate SGLang engine serves whole "
	               "requests (bootstrap fields ignored); /v1/tokenize and /tokenize, "
	               "/health and /health_generate, sglang: metrics, models, flat errors, "
	               "in-band stream errors nested");
	g_assert_true(sim_start(&p, args));
	port = p.ports[0];
	g_assert_null(json_object_get(fleet_engine(&p, 0), "role"));
	doc = ask(port, "POST", "/v1/completions",
	          "{\"prompt\":\"whole\",\"max_tokens\":3,\"bootstrap_host\":\"h\","
	          "\"bootstrap_room\":1}", 200);
	g_assert_cmpint(usage_of(doc, "completion_tokens"), ==, 3);
	g_assert_null(json_object_get(doc, "kv_transfer_params"));
	json_decref(doc);

	for (unsigned i = 0; i < 2; i++) {
		doc = ask(port, "POST", i ? "/tokenize" : "/v1/tokenize", "{\"prompt\":\"hello\"}",
		          200);
		g_assert_cmpint(json_integer_value(json_object_get(doc, "count")), ==, 3);
		g_assert_cmpint(json_integer_value(json_object_get(doc, "max_model_len")), ==, 64);
		g_assert_cmpuint(json_array_size(json_object_get(doc, "tokens")), ==, 3);
		json_decref(doc);
	}
	doc = ask(port, "POST", "/v1/detokenize", "{\"tokens\":[1]}", 501);
	g_assert_cmpstr(str_at(doc, "object"), ==, "error");
	json_decref(doc);

	sim_http(port, "GET", "/health", NULL, NULL, 5000, &r);
	g_assert_cmpint(r.status, ==, 200);
	g_assert_cmpuint(r.body->len, ==, 0);
	sim_reply_clear(&r);
	g_assert_cmpint(sim_set_faults(&p, 0, "{\"unhealthy\":true}"), ==, 200);
	sim_http(port, "GET", "/health_generate", NULL, NULL, 5000, &r);
	g_assert_cmpint(r.status, ==, 503);
	sim_reply_clear(&r);
	g_assert_cmpint(sim_set_faults(&p, 0, "{\"unhealthy\":false}"), ==, 200);

	g_assert_cmpfloat(sim_metric(port, "sglang:generation_tokens_total{"), ==, 3);
	g_assert_cmpfloat(sim_metric(port, "sglang:num_running_reqs{"), ==, 0);
	g_assert_cmpfloat(sim_metric(port, "sglang:time_to_first_token_seconds_count{"), ==, 1);
	doc = ask(port, "GET", "/v1/models", NULL, 200);
	g_assert_cmpstr(str_at(json_array_get(json_object_get(doc, "data"), 0), "owned_by"), ==,
	                "sglang");
	g_assert_cmpint(json_integer_value(json_object_get(json_array_get(
		json_object_get(doc, "data"), 0), "max_model_len")), ==, 64);
	json_decref(doc);
	doc = ask(port, "GET", "/get_model_info", NULL, 200);
	g_assert_true(json_is_true(json_object_get(doc, "is_generation")));
	json_decref(doc);

	/* Errors: flat, with FastAPI's detail on an unknown route; context
	 * length named as the reference advises matching (4.5). */
	doc = ask(port, "GET", "/version", NULL, 404);
	g_assert_cmpstr(str_at(doc, "object"), ==, "error");
	g_assert_cmpstr(str_at(doc, "detail"), ==, "Not Found");
	json_decref(doc);
	doc = ask(port, "POST", "/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":100}", 400);
	g_assert_cmpstr(str_at(doc, "object"), ==, "error");
	g_assert_nonnull(strstr(str_at(doc, "message"), "context length"));
	json_decref(doc);
	g_assert_cmpint(sim_set_faults(&p, 0, "{\"error_after_tokens\":1}"), ==, 200);
	sim_http(port, "POST", "/v1/completions",
	         "{\"prompt\":\"x\",\"max_tokens\":4,\"stream\":true}", NULL, 5000, &r);
	g_assert_cmpint(r.status, ==, 200);
	{
		GPtrArray *ev = sim_sse_events(r.body->str);
		json_t *err;

		g_assert_cmpuint(ev->len, ==, 3);
		err = sim_json(g_ptr_array_index(ev, 1));
		g_assert_cmpint(json_integer_value(json_object_get(json_object_get(err, "error"),
		                                                   "code")), ==, 500);
		json_decref(err);
		g_assert_cmpstr(g_ptr_array_index(ev, 2), ==, "[DONE]");
		g_ptr_array_unref(ev);
	}
	sim_reply_clear(&r);
	g_assert_cmpint(sim_stop(&p, SIGTERM, 10000), ==, 0);
	sim_clear(&p);
}

static void
test_llamacpp(void)
{
	const char *args[] = { "--dialect", "llamacpp", "--engines", "2", "--time-scale", "20",
	                       "--max-model-len", "64", NULL };
	struct sim_proc p;
	struct sim_reply r;
	json_t *doc, *err;
	guint16 port;

	g_test_summary("/sim/issue14/llamacpp: aggregate only (a disaggregated leg of either "
	               "protocol is refused in llama.cpp's error shape); /tokenize, /health, "
	               "/v1/health, /props, llamacpp: metrics, its 404 and context errors");
	g_assert_true(sim_start(&p, args));
	port = p.ports[0];
	g_assert_cmpstr(str_at(fleet_engine(&p, 1), "dialect"), ==, "llamacpp");
	g_assert_null(json_object_get(fleet_engine(&p, 1), "role"));

	doc = ask(port, "POST", "/v1/chat/completions",
	          "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":2}", 200);
	g_assert_cmpint(usage_of(doc, "completion_tokens"), ==, 2);
	g_assert_null(json_object_get(doc, "kv_transfer_params"));
	json_decref(doc);
	/* Past the context, llama.cpp stops at its end instead of refusing. */
	doc = ask(port, "POST", "/v1/completions", "{\"prompt\":\"hello\",\"max_tokens\":500}",
	          200);
	g_assert_cmpint(usage_of(doc, "completion_tokens"), ==, 64 - 3);
	json_decref(doc);

	doc = ask(port, "POST", "/v1/completions",
	          "{\"prompt\":\"x\",\"kv_transfer_params\":{\"do_remote_decode\":true}}", 400);
	err = json_object_get(doc, "error");
	g_assert_cmpint(json_integer_value(json_object_get(err, "code")), ==, 400);
	g_assert_cmpstr(str_at(err, "type"), ==, "invalid_request_error");
	json_decref(doc);
	doc = ask(port, "POST", "/v1/completions",
	          "{\"prompt\":\"x\",\"bootstrap_host\":\"h\",\"bootstrap_port\":1,"
	          "\"bootstrap_room\":2}", 400);
	g_assert_cmpstr(str_at(json_object_get(doc, "error"), "type"), ==, "invalid_request_error");
	json_decref(doc);
	{
		GString *big = g_string_new("{\"prompt\":\"");

		for (int i = 0; i < 70; i++)
			g_string_append(big, " word");
		g_string_append(big, "\"}");
		doc = ask(port, "POST", "/v1/completions", big->str, 400);
		g_string_free(big, TRUE);
	}
	err = json_object_get(doc, "error");
	g_assert_cmpstr(str_at(err, "type"), ==, "exceed_context_size_error");
	g_assert_cmpint(json_integer_value(json_object_get(err, "n_ctx")), ==, 64);
	g_assert_cmpint(json_integer_value(json_object_get(err, "n_prompt_tokens")), ==, 71);
	json_decref(doc);
	doc = ask(port, "GET", "/nowhere", NULL, 404);
	g_assert_cmpstr(str_at(json_object_get(doc, "error"), "message"), ==, "File Not Found");
	g_assert_cmpstr(str_at(json_object_get(doc, "error"), "type"), ==, "not_found_error");
	json_decref(doc);

	doc = ask(port, "POST", "/tokenize", "{\"content\":\"hello\",\"add_special\":true}", 200);
	g_assert_cmpuint(json_array_size(json_object_get(doc, "tokens")), ==, 3);
	g_assert_null(json_object_get(doc, "count"));
	json_decref(doc);
	for (unsigned i = 0; i < 2; i++) {
		doc = ask(port, "GET", i ? "/v1/health" : "/health", NULL, 200);
		g_assert_cmpstr(str_at(doc, "status"), ==, "ok");
		json_decref(doc);
	}
	g_assert_cmpint(sim_set_faults(&p, 0, "{\"unhealthy\":true}"), ==, 200);
	doc = ask(port, "GET", "/health", NULL, 503);
	g_assert_cmpstr(str_at(json_object_get(doc, "error"), "type"), ==, "unavailable_error");
	json_decref(doc);
	doc = ask(port, "GET", "/props", NULL, 200);
	g_assert_cmpint(json_integer_value(json_object_get(json_object_get(doc,
	                "default_generation_settings"), "n_ctx")), ==, 64);
	json_decref(doc);
	g_assert_cmpfloat(sim_metric(port, "llamacpp:tokens_predicted_total "), ==, 2 + 61);
	g_assert_cmpfloat(sim_metric(port, "llamacpp:requests_processing "), ==, 0);
	sim_http(port, "GET", "/metrics", NULL, NULL, 5000, &r);
	g_assert_null(strstr(r.body->str, "vllm:"));
	sim_reply_clear(&r);
	g_assert_cmpint(sim_stop(&p, SIGTERM, 10000), ==, 0);
	sim_clear(&p);
}

static void
test_mixed_fleet(void)
{
	const char *args[] = { "--engines", "4", "--dialect", "vllm,sglang:prefill,llamacpp,vllm",
	                       NULL };
	const char *bad[] = { "--engines", "2", "--dialect", "vllm,tgi", NULL };
	struct tool_run run;
	g_autofree char *bin = sim_bin();
	struct sim_proc p;
	struct sim_reply r;

	g_test_summary("/sim/issue14/mixed-fleet: one simulator serves a mixed fleet, the fleet "
	               "line names each engine's dialect and role; a bad --dialect is a usage "
	               "error");
	g_assert_true(sim_start(&p, args));
	g_assert_cmpstr(str_at(fleet_engine(&p, 0), "dialect"), ==, "vllm");
	g_assert_cmpstr(str_at(fleet_engine(&p, 0), "role"), ==, "prefill");
	g_assert_cmpstr(str_at(fleet_engine(&p, 1), "dialect"), ==, "sglang");
	g_assert_cmpstr(str_at(fleet_engine(&p, 2), "dialect"), ==, "llamacpp");
	g_assert_cmpstr(str_at(fleet_engine(&p, 3), "role"), ==, "decode");
	sim_http(p.ports[0], "GET", "/health", NULL, NULL, 5000, &r);
	g_assert_cmpuint(r.body->len, ==, 0);
	sim_reply_clear(&r);
	sim_http(p.ports[2], "GET", "/health", NULL, NULL, 5000, &r);
	g_assert_cmpstr(r.body->str, ==, "{\"status\":\"ok\"}");
	sim_reply_clear(&r);
	sim_http(p.admin_port, "GET", "/sim/engines/sim-2", NULL, NULL, 5000, &r);
	g_assert_cmpint(r.status, ==, 200);
	{
		json_t *entry = sim_json(r.body->str);

		g_assert_cmpstr(str_at(entry, "dialect"), ==, "llamacpp");
		json_decref(entry);
	}
	sim_reply_clear(&r);
	g_assert_cmpint(sim_stop(&p, SIGTERM, 10000), ==, 0);
	sim_clear(&p);

	tool_run(bin, "narwhal-sim", bad, 10, &run);
	g_assert_cmpint(run.status, ==, 2);
	g_assert_nonnull(strstr(run.err, "--dialect: unknown dialect \"tgi\""));
	tool_run_clear(&run);
}

int
main(int argc, char **argv)
{
	int ret;

	g_test_init(&argc, &argv, NULL);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	g_test_add_func("/sim/issue14/sglang-pd-handoff", test_sglang_handoff);
	g_test_add_func("/sim/issue14/sglang-pd-refusals", test_sglang_refusals);
	g_test_add_func("/sim/issue14/sglang-routes", test_sglang_routes);
	g_test_add_func("/sim/issue14/llamacpp", test_llamacpp);
	g_test_add_func("/sim/issue14/mixed-fleet", test_mixed_fleet);
	ret = g_test_run();
	curl_global_cleanup();
	return ret;
}
