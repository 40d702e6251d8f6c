/*
 * NIXL-style KV handoff between two narwhal-sim processes: prefill on A
 * (do_remote_decode), decode on B with A's kv_transfer_params (the KV is
 * pulled from A over HTTP), A's blocks freed by the pull or by lease
 * expiry, and kv_load_failure_policy for expired or invalid params.
 */
#include "build-config.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>

#include "integration/sim-client.h"

static const char *prompt = "Disaggregated serving splits prefill from decode";

static json_t *
prefill_on(const struct sim_proc *a, unsigned engine, const char *request_id)
{
	g_autofree char *hdr = g_strdup_printf("X-Request-Id: %s", request_id);
	const char *const headers[] = { hdr, NULL };
	g_autofree char *body = g_strdup_printf(
		"{\"prompt\":\"%s\",\"max_tokens\":1,\"stream\":false,"
		"\"kv_transfer_params\":{\"do_remote_decode\":true,\"do_remote_prefill\":false,"
		"\"remote_engine_id\":null,\"remote_block_ids\":null,\"remote_host\":null,"
		"\"remote_port\":null}}", prompt);
	struct sim_reply r;
	json_t *doc, *kv;

	sim_http(a->ports[engine], "POST", "/v1/completions", body, headers, 10000, &r);
	g_assert_cmpint(r.status, ==, 200);
	doc = sim_json(r.body->str);
	g_assert_cmpint(json_integer_value(json_object_get(json_object_get(doc, "usage"),
	                "completion_tokens")), ==, 1);
	kv = json_incref(json_object_get(doc, "kv_transfer_params"));
	json_decref(doc);
	sim_reply_clear(&r);
	g_assert_true(json_is_object(kv));
	return kv;
}

static char *
decode_body(const json_t *kv, gboolean stream, int max_tokens)
{
	g_autofree char *params = json_dumps(kv, JSON_COMPACT);

	return g_strdup_printf("{\"prompt\":\"%s\",\"max_tokens\":%d,\"stream\":%s,"
	                       "\"stream_options\":%s,\"kv_transfer_params\":%s}",
	                       prompt, max_tokens, stream ? "true" : "false",
	                       stream ? "{\"include_usage\":true}" : "null", params);
}

static json_int_t
stat_of(const struct sim_proc *p, unsigned engine, const char *key)
{
	json_t *st = sim_engine_stats(p, engine);
	json_int_t v = json_integer_value(json_object_get(st, key));

	json_decref(st);
	return v;
}

static void
test_handoff(void)
{
	struct sim_proc a, b;
	const char *args[] = { "--time-scale", "20", NULL };
	json_t *kv, *doc;
	struct sim_reply r;
	g_autofree char *body = NULL;
	g_autofree char *again = NULL;
	json_int_t prompt_tokens;

	g_test_summary("/sim/issue3/handoff-between-processes: prefill on process A answers the "
	               "newest kv_transfer_params; process B pulls the KV and completes; A's KV "
	               "is freed by the pull");
	g_assert_true(sim_start(&a, args));
	g_assert_true(sim_start(&b, args));
	kv = prefill_on(&a, 0, "handoff-1");
	g_assert_true(json_is_true(json_object_get(kv, "do_remote_prefill")));
	g_assert_true(json_is_false(json_object_get(kv, "do_remote_decode")));
	g_assert_true(json_is_array(json_array_get(json_object_get(kv, "remote_block_ids"), 0)));
	g_assert_cmpstr(json_string_value(json_object_get(kv, "remote_engine_id")), ==, "sim-0");
	g_assert_true(json_is_string(json_object_get(kv, "remote_request_id")));
	g_assert_cmpstr(json_string_value(json_object_get(kv, "remote_host")), ==, "127.0.0.1");
	g_assert_cmpint(json_integer_value(json_object_get(kv, "remote_port")), ==, a.ports[0]);
	g_assert_cmpint(json_integer_value(json_object_get(kv, "tp_size")), ==, 1);
	g_assert_cmpint(json_integer_value(json_object_get(kv, "dcp_size")), ==, 1);
	g_assert_cmpint(json_integer_value(json_object_get(kv, "pp_size")), ==, 1);
	g_assert_cmpstr(json_string_value(json_object_get(kv, "transfer_mode")), ==, "pull");
	g_assert_cmpfloat(json_number_value(json_object_get(kv, "remote_blocks_expiry_time")), >,
	                  (double)g_get_real_time() / 1e6);
	prompt_tokens = json_integer_value(json_object_get(kv, "remote_num_tokens"));
	g_assert_cmpint(prompt_tokens, >, 0);
	/* A holds the KV under a lease. */
	g_assert_cmpint(stat_of(&a, 0, "leases"), ==, 1);
	g_assert_cmpint(stat_of(&a, 0, "kv_blocks_used"), >, 0);

	body = decode_body(kv, FALSE, 12);
	sim_http(b.ports[0], "POST", "/v1/completions", body, NULL, 10000, &r);
	g_assert_cmpint(r.status, ==, 200);
	doc = sim_json(r.body->str);
	g_assert_cmpint(json_integer_value(json_object_get(json_object_get(doc, "usage"),
	                "completion_tokens")), ==, 12);
	g_assert_cmpint(json_integer_value(json_object_get(json_object_get(doc, "usage"),
	                "prompt_tokens")), ==, prompt_tokens);
	g_assert_cmpstr(json_string_value(json_object_get(json_array_get(
		json_object_get(doc, "choices"), 0), "finish_reason")), ==, "length");
	json_decref(doc);
	sim_reply_clear(&r);
	/* The pull freed A's blocks at once. */
	g_assert_cmpint(stat_of(&a, 0, "leases"), ==, 0);
	g_assert_cmpint(stat_of(&a, 0, "kv_blocks_used"), ==, 0);
	g_assert_cmpint(stat_of(&a, 0, "kv_pulls_served"), ==, 1);
	sim_http(a.ports[0], "GET", "/metrics", NULL, NULL, 5000, &r);
	g_assert_nonnull(strstr(r.body->str, "vllm:kv_cache_usage_perc{model_name=\"opt-13b-a100\","
	                                     "engine=\"0\"} 0\n"));
	sim_reply_clear(&r);

	/* The same params again: already taken, so policy fail answers 500. */
	again = decode_body(kv, FALSE, 4);
	sim_http(b.ports[0], "POST", "/v1/completions", again, NULL, 10000, &r);
	g_assert_cmpint(r.status, ==, 500);
	doc = sim_json(r.body->str);
	g_assert_cmpstr(json_string_value(json_object_get(json_object_get(doc, "error"), "type")),
	                ==, "InternalServerError");
	json_decref(doc);
	sim_reply_clear(&r);
	json_decref(kv);

	/* A streamed decode after a fresh prefill. */
	kv = prefill_on(&a, 0, "handoff-2");
	g_free(body);
	body = decode_body(kv, TRUE, 5);
	sim_http(b.ports[0], "POST", "/v1/completions", body, NULL, 10000, &r);
	g_assert_cmpint(r.status, ==, 200);
	{
		GPtrArray *ev = sim_sse_events(r.body->str);

		g_assert_cmpuint(ev->len, ==, 5 + 2);
		g_assert_cmpstr(g_ptr_array_index(ev, 6), ==, "[DONE]");
		g_ptr_array_unref(ev);
	}
	sim_reply_clear(&r);
	json_decref(kv);
	g_assert_cmpint(stat_of(&a, 0, "kv_blocks_used"), ==, 0);

	/* A prefill-only request must not stream. */
	sim_http(a.ports[0], "POST", "/v1/completions",
	         "{\"prompt\":\"x\",\"stream\":true,"
	         "\"kv_transfer_params\":{\"do_remote_decode\":true}}",
	         NULL, 5000, &r);
	g_assert_cmpint(r.status, ==, 400);
	sim_reply_clear(&r);
	/* Null params: an ordinary aggregate request. */
	sim_http(b.ports[0], "POST", "/v1/completions",
	         "{\"prompt\":\"x y\",\"max_tokens\":2,\"kv_transfer_params\":null}", NULL, 5000, &r);
	g_assert_cmpint(r.status, ==, 200);
	doc = sim_json(r.body->str);
	g_assert_true(json_is_null(json_object_get(doc, "kv_transfer_params")));
	json_decref(doc);
	sim_reply_clear(&r);

	g_assert_cmpint(sim_stop(&a, SIGTERM, 10000), ==, 0);
	g_assert_cmpint(sim_stop(&b, SIGTERM, 10000), ==, 0);
	sim_clear(&a);
	sim_clear(&b);
}

static void
test_lease_expiry(void)
{
	/* A 1 s lease at time scale 2: it lapses 0.5 s of wall time after the
	 * prefill. */
	const char *a_args[] = { "--time-scale", "2", "--kv-lease-duration", "1", NULL };
	const char *fail_args[] = { "--time-scale", "2", NULL };
	const char *recompute_args[] = { "--time-scale", "2", "--kv-load-failure-policy",
	                                 "recompute", NULL };
	struct sim_proc a, fail, recompute;
	json_t *kv1, *kv2, *doc;
	struct sim_reply r;
	g_autofree char *body1 = NULL;
	g_autofree char *body2 = NULL;
	g_autofree char *body3 = NULL;

	g_test_summary("/sim/issue3/lease-expiry: an expired lease frees the producer's KV; the "
	               "decode then fails under policy fail and recomputes under recompute");
	g_assert_true(sim_start(&a, a_args));
	g_assert_true(sim_start(&fail, fail_args));
	g_assert_true(sim_start(&recompute, recompute_args));
	kv1 = prefill_on(&a, 0, "lease-1");
	kv2 = prefill_on(&a, 0, "lease-2");
	g_assert_cmpint(stat_of(&a, 0, "leases"), ==, 2);
	g_assert_cmpfloat(json_number_value(json_object_get(kv1, "remote_blocks_expiry_time")), <,
	                  (double)g_get_real_time() / 1e6 + 0.6);
	/* Freed by the lease timer, without any request: poll (bounded)
	 * rather than race a fixed sleep against the lease clock (issue 9). */
	{
		gint64 until = g_get_monotonic_time() + 5 * G_USEC_PER_SEC;

		while (stat_of(&a, 0, "leases") != 0 && g_get_monotonic_time() < until)
			g_usleep(10 * 1000);
	}
	g_assert_cmpint(stat_of(&a, 0, "leases"), ==, 0);
	g_assert_cmpint(stat_of(&a, 0, "kv_blocks_used"), ==, 0);
	g_assert_true(sim_wait_log(&a, "\"event\":\"kv_lease_expired\"", 1000));

	body1 = decode_body(kv1, FALSE, 3);
	sim_http(fail.ports[0], "POST", "/v1/completions", body1, NULL, 10000, &r);
	g_assert_cmpint(r.status, ==, 500);
	sim_reply_clear(&r);
	g_assert_true(sim_wait_log(&fail, "\"event\":\"kv_load_failed\"", 1000));

	/* Streaming under fail: the error arrives in-band, then [DONE]. */
	body3 = decode_body(kv1, TRUE, 3);
	sim_http(fail.ports[0], "POST", "/v1/completions", body3, NULL, 10000, &r);
	g_assert_cmpint(r.status, ==, 200);
	{
		GPtrArray *ev = sim_sse_events(r.body->str);
		json_t *err;

		g_assert_cmpuint(ev->len, ==, 2);
		err = sim_json(g_ptr_array_index(ev, 0));
		g_assert_cmpint(json_integer_value(json_object_get(json_object_get(err, "error"),
		                "code")), ==, 500);
		json_decref(err);
		g_assert_cmpstr(g_ptr_array_index(ev, 1), ==, "[DONE]");
		g_ptr_array_unref(ev);
	}
	sim_reply_clear(&r);

	body2 = decode_body(kv2, FALSE, 3);
	sim_http(recompute.ports[0], "POST", "/v1/completions", body2, NULL, 10000, &r);
	g_assert_cmpint(r.status, ==, 200);
	doc = sim_json(r.body->str);
	g_assert_cmpint(json_integer_value(json_object_get(json_object_get(doc, "usage"),
	                "completion_tokens")), ==, 3);
	json_decref(doc);
	sim_reply_clear(&r);
	/* Recomputed: the decode engine prefilled the prompt itself. */
	g_assert_true(sim_wait_log(&recompute, "\"policy\":\"recompute\"", 1000));

	json_decref(kv1);
	json_decref(kv2);
	g_assert_cmpint(sim_stop(&a, SIGTERM, 10000), ==, 0);
	g_assert_cmpint(sim_stop(&fail, SIGTERM, 10000), ==, 0);
	g_assert_cmpint(sim_stop(&recompute, SIGTERM, 10000), ==, 0);
	sim_clear(&a);
	sim_clear(&fail);
	sim_clear(&recompute);
}

static void
test_invalid_params(void)
{
	const char *fail_args[] = { "--no-delay", NULL };
	const char *recompute_args[] = { "--no-delay", "--kv-load-failure-policy", "recompute",
	                                 NULL };
	struct sim_proc fail, recompute;
	/* remote_request_id is missing. */
	const char *body = "{\"prompt\":\"a b c\",\"max_tokens\":2,\"kv_transfer_params\":"
	                   "{\"do_remote_prefill\":true,\"remote_block_ids\":[[1]],"
	                   "\"remote_engine_id\":\"sim-0\",\"remote_host\":\"127.0.0.1\","
	                   "\"remote_port\":9}}";
	const char *stream_body = "{\"prompt\":\"a b c\",\"max_tokens\":2,\"stream\":true,"
	                          "\"kv_transfer_params\":{\"do_remote_prefill\":true}}";
	struct sim_reply r;

	g_test_summary("/sim/issue3/invalid-kv-params: params missing a required key are invalid; "
	               "fail answers 500 (or in-band when streaming), recompute runs aggregate");
	g_assert_true(sim_start(&fail, fail_args));
	g_assert_true(sim_start(&recompute, recompute_args));
	sim_http(fail.ports[0], "POST", "/v1/completions", body, NULL, 5000, &r);
	g_assert_cmpint(r.status, ==, 500);
	sim_reply_clear(&r);
	g_assert_true(sim_wait_log(&fail, "\"event\":\"invalid_kv_transfer_params\"", 1000));
	sim_http(fail.ports[0], "POST", "/v1/completions", stream_body, NULL, 5000, &r);
	g_assert_cmpint(r.status, ==, 200);
	g_assert_true(g_str_has_prefix(r.body->str, "data: {\"error\":"));
	g_assert_true(g_str_has_suffix(r.body->str, "data: [DONE]\n\n"));
	sim_reply_clear(&r);
	sim_http(recompute.ports[0], "POST", "/v1/completions", body, NULL, 5000, &r);
	g_assert_cmpint(r.status, ==, 200);
	sim_reply_clear(&r);
	g_assert_cmpint(sim_stop(&fail, SIGTERM, 10000), ==, 0);
	g_assert_cmpint(sim_stop(&recompute, SIGTERM, 10000), ==, 0);
	sim_clear(&fail);
	sim_clear(&recompute);
}

static void
test_same_process(void)
{
	const char *args[] = { "--engines", "2", "--no-delay", NULL };
	struct sim_proc p;
	json_t *kv;
	struct sim_reply r;
	g_autofree char *body = NULL;

	g_test_summary("/sim/issue3/handoff-within-process: any engine serves either role; a "
	               "decode engine pulls from a prefill engine of the same process");
	g_assert_true(sim_start(&p, args));
	/* Engine 1 is printed as "decode", yet it can prefill too. */
	kv = prefill_on(&p, 1, "roles-1");
	body = decode_body(kv, FALSE, 3);
	sim_http(p.ports[0], "POST", "/v1/completions", body, NULL, 5000, &r);
	g_assert_cmpint(r.status, ==, 200);
	sim_reply_clear(&r);
	g_assert_cmpint(stat_of(&p, 1, "leases"), ==, 0);
	json_decref(kv);
	g_assert_cmpint(sim_stop(&p, SIGTERM, 10000), ==, 0);
	sim_clear(&p);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	g_test_add_func("/sim/issue3/handoff-between-processes", test_handoff);
	g_test_add_func("/sim/issue3/lease-expiry", test_lease_expiry);
	g_test_add_func("/sim/issue3/invalid-kv-params", test_invalid_params);
	g_test_add_func("/sim/issue3/handoff-within-process", test_same_process);
	int status = g_test_run();
	curl_global_cleanup();
	return status;
}
