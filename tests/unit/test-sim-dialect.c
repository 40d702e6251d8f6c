/*
 * narwhal-sim's dialects (issue 14: "narwhal-sim speaks both, chosen per
 * engine, field for field as the reference describes"): the --dialect
 * option and the fleet's roles, each dialect's error shapes, SGLang's and
 * llama.cpp's tokenize answers, SGLang's bootstrap fields and the metric
 * names of each. Section numbers are those of the engine wire-format
 * reference (/work/shared/reference/engine-wire-formats.md).
 */
#include "build-config.h"

#include <string.h>

#include "sim/dialect.h"
#include "sim/metrics.h"

static void
parse_ok(const char *spec, unsigned n, struct sim_engine_dialect *out)
{
	char *error = NULL;

	if (!sim_dialect_parse_spec(spec, n, out, &error))
		g_error("\"%s\" for %u engines: %s", spec, n, error);
}

static void
test_spec(void)
{
	struct sim_engine_dialect d[4];
	char *error = NULL;

	g_test_summary("--dialect takes one dialect for every engine or one per engine; plain "
	               "sglang splits into prefill and decode, a lone one is aggregate");
	parse_ok("vllm", 3, d);
	for (unsigned i = 0; i < 3; i++) {
		g_assert_cmpint(d[i].dialect, ==, SIM_DIALECT_VLLM);
		g_assert_cmpint(d[i].mode, ==, SIM_PD_ANY);
	}
	parse_ok("sglang", 4, d);
	g_assert_cmpint(d[0].mode, ==, SIM_PD_PREFILL);
	g_assert_cmpint(d[1].mode, ==, SIM_PD_PREFILL);
	g_assert_cmpint(d[2].mode, ==, SIM_PD_DECODE);
	g_assert_cmpint(d[3].mode, ==, SIM_PD_DECODE);
	parse_ok("sglang", 1, d);
	g_assert_cmpint(d[0].mode, ==, SIM_PD_NONE);
	parse_ok("sglang:decode, sglang:prefill,llamacpp,sglang:aggregate", 4, d);
	g_assert_cmpint(d[0].mode, ==, SIM_PD_DECODE);
	g_assert_cmpint(d[1].mode, ==, SIM_PD_PREFILL);
	g_assert_cmpint(d[2].dialect, ==, SIM_DIALECT_LLAMACPP);
	g_assert_cmpint(d[2].mode, ==, SIM_PD_NONE);
	g_assert_cmpint(d[3].dialect, ==, SIM_DIALECT_SGLANG);
	g_assert_cmpint(d[3].mode, ==, SIM_PD_NONE);

	g_assert_false(sim_dialect_parse_spec("vllm,sglang", 3, d, &error));
	g_assert_nonnull(strstr(error, "one per engine (3), got 2"));
	g_free(error);
	error = NULL;
	g_assert_false(sim_dialect_parse_spec("tgi", 1, d, &error));
	g_assert_nonnull(strstr(error, "unknown dialect \"tgi\""));
	g_free(error);
}

static void
test_fleet_roles(void)
{
	struct sim_engine_dialect d[6];

	g_test_summary("The fleet line's roles: vLLM engines split among themselves as before, "
	               "SGLang engines keep their launch mode, aggregate-only engines have none");
	parse_ok("vllm", 3, d);
	g_assert_cmpstr(sim_dialect_fleet_role(d, 3, 0), ==, "prefill");
	g_assert_cmpstr(sim_dialect_fleet_role(d, 3, 1), ==, "prefill");
	g_assert_cmpstr(sim_dialect_fleet_role(d, 3, 2), ==, "decode");
	parse_ok("llamacpp,vllm,sglang,vllm,sglang,llamacpp", 6, d);
	g_assert_null(sim_dialect_fleet_role(d, 6, 0));
	g_assert_cmpstr(sim_dialect_fleet_role(d, 6, 1), ==, "prefill");
	g_assert_cmpstr(sim_dialect_fleet_role(d, 6, 2), ==, "prefill");
	g_assert_cmpstr(sim_dialect_fleet_role(d, 6, 3), ==, "decode");
	g_assert_cmpstr(sim_dialect_fleet_role(d, 6, 4), ==, "decode");
	g_assert_null(sim_dialect_fleet_role(d, 6, 5));
	g_assert_cmpstr(sim_dialect_name(SIM_DIALECT_LLAMACPP), ==, "llamacpp");
	g_assert_cmpstr(sim_dialect_name(SIM_DIALECT_SGLANG), ==, "sglang");
}

static void
check_error(sim_dialect d, unsigned status, const char *param, bool in_band, uint32_t n_ctx,
            const char *want)
{
	g_autofree char *text = sim_dialect_error_text(d, status, param, "It \"broke\".", in_band,
	                                               n_ctx ? 9412 : 0, n_ctx);

	g_assert_cmpstr(text, ==, want);
}

static void
test_errors(void)
{
	g_test_summary("Error bodies (wire formats 4.4): vLLM nested, SGLang flat and nested "
	               "in-band, llama.cpp nested with its own types and context fields");
	check_error(SIM_DIALECT_VLLM, 400, "max_tokens", false, 0,
	            "{\"error\":{\"message\":\"It \\\"broke\\\".\",\"type\":\"BadRequestError\","
	            "\"param\":\"max_tokens\",\"code\":400}}");
	check_error(SIM_DIALECT_SGLANG, 404, NULL, false, 0,
	            "{\"object\":\"error\",\"message\":\"It \\\"broke\\\".\",\"type\":"
	            "\"NotFoundError\",\"param\":null,\"code\":404}");
	check_error(SIM_DIALECT_SGLANG, 500, NULL, true, 0,
	            "{\"error\":{\"message\":\"It \\\"broke\\\".\",\"type\":"
	            "\"InternalServerError\",\"param\":null,\"code\":500}}");
	check_error(SIM_DIALECT_LLAMACPP, 503, NULL, false, 0,
	            "{\"error\":{\"code\":503,\"message\":\"It \\\"broke\\\".\",\"type\":"
	            "\"unavailable_error\"}}");
	check_error(SIM_DIALECT_LLAMACPP, 400, "input_tokens", false, 8192,
	            "{\"error\":{\"code\":400,\"message\":\"It \\\"broke\\\".\",\"type\":"
	            "\"exceed_context_size_error\",\"n_prompt_tokens\":9412,\"n_ctx\":8192}}");
	g_assert_cmpstr(sim_llamacpp_error_type(400), ==, "invalid_request_error");
	g_assert_cmpstr(sim_llamacpp_error_type(404), ==, "not_found_error");
	g_assert_cmpstr(sim_llamacpp_error_type(500), ==, "server_error");
	g_assert_cmpstr(sim_llamacpp_error_type(501), ==, "not_supported_error");
	g_assert_cmpstr(sim_error_type(429), ==, "RateLimitError");
}

static json_t *
doc(const char *text)
{
	json_t *j = json_loads(text, 0, NULL);

	g_assert_nonnull(j);
	return j;
}

static char *
dump(const json_t *j)
{
	char *t = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
	char *copy = g_strdup(t);

	free(t);
	return copy;
}

static void
test_sglang_tokenize(void)
{
	struct sim_dialect_fail f = { 0 };
	json_t *req, *ans;
	g_autofree char *one = NULL;
	g_autofree char *many = NULL;

	g_test_summary("SGLang's /v1/tokenize (wire formats 3): tokens, count and "
	               "max_model_len, lists for a list of prompts; no chat form");
	req = doc("{\"model\":\"default\",\"prompt\":\"hello\"}");
	ans = sim_sglang_tokenize(req, 65536, &f);
	one = dump(ans);
	/* add_special_tokens defaults to true: BOS (1) first. */
	g_assert_cmpstr(one, ==, "{\"count\":3,\"max_model_len\":65536,\"tokens\":[1,17400,25008]}");
	json_decref(ans);
	json_decref(req);

	req = doc("{\"prompt\":[\"hello\",\"a\"],\"add_special_tokens\":false}");
	ans = sim_sglang_tokenize(req, 2048, &f);
	many = dump(ans);
	g_assert_cmpstr(many, ==, "{\"count\":[2,1],\"max_model_len\":2048,"
	                          "\"tokens\":[[17400,25008],[5268]]}");
	json_decref(ans);
	json_decref(req);

	req = doc("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}");
	g_assert_null(sim_sglang_tokenize(req, 2048, &f));
	g_assert_cmpuint(f.status, ==, 400);
	g_assert_nonnull(strstr(f.message, "'prompt'"));
	g_free(f.message);
	json_decref(req);
}

static void
test_llamacpp_tokenize(void)
{
	struct sim_dialect_fail f = { 0 };
	json_t *req, *ans;
	g_autofree char *plain = NULL;
	g_autofree char *pieces = NULL;

	g_test_summary("llama.cpp's /tokenize (wire formats 3): content in, tokens out, "
	               "add_special off by default, pieces as strings or bytes");
	req = doc("{\"content\":\"hello\"}");
	ans = sim_llamacpp_tokenize(req, &f);
	plain = dump(ans);
	g_assert_cmpstr(plain, ==, "{\"tokens\":[17400,25008]}");
	json_decref(ans);
	json_decref(req);

	req = doc("{\"content\":\"hi\\u00e9\",\"with_pieces\":true,\"add_special\":true}");
	ans = sim_llamacpp_tokenize(req, &f);
	pieces = dump(json_object_get(ans, "tokens"));
	/* BOS, "hi", then the two bytes of e-acute, each not UTF-8 alone. */
	g_assert_cmpuint(json_array_size(json_object_get(ans, "tokens")), ==, 4);
	g_assert_nonnull(strstr(pieces, "\"piece\":\"hi\""));
	g_assert_nonnull(strstr(pieces, "\"piece\":[195]"));
	g_assert_nonnull(strstr(pieces, "\"piece\":[169]"));
	g_assert_nonnull(strstr(pieces, "{\"id\":1,"));
	json_decref(ans);
	json_decref(req);

	req = doc("{\"prompt\":\"hello\"}");
	g_assert_null(sim_llamacpp_tokenize(req, &f));
	g_assert_cmpuint(f.status, ==, 400);
	g_free(f.message);
	json_decref(req);
}

static int
bootstrap(const char *text, uint64_t *room)
{
	struct sim_dialect_fail f = { 0 };
	json_t *req = doc(text);
	int has = sim_sglang_bootstrap(req, room, &f);

	if (has < 0) {
		g_assert_cmpuint(f.status, ==, 400);
		g_assert_nonnull(f.message);
	}
	g_free(f.message);
	json_decref(req);
	return has;
}

static void
test_bootstrap(void)
{
	uint64_t room = 0;

	g_test_summary("SGLang's bootstrap fields (wire formats 2): host and room required "
	               "together, port may be null, rooms up to 2^63-1, no batches");
	g_assert_cmpint(bootstrap("{\"prompt\":\"x\"}", &room), ==, 0);
	g_assert_cmpint(bootstrap("{\"bootstrap_host\":null,\"bootstrap_room\":null}", &room), ==,
	                0);
	g_assert_cmpint(bootstrap("{\"bootstrap_host\":\"10.0.0.1\",\"bootstrap_port\":8998,"
	                          "\"bootstrap_room\":9223372036854775807}", &room), ==, 1);
	g_assert_cmpuint(room, ==, G_GUINT64_CONSTANT(9223372036854775807));
	g_assert_cmpint(bootstrap("{\"bootstrap_host\":\"p\",\"bootstrap_port\":null,"
	                          "\"bootstrap_room\":7}", &room), ==, 1);
	g_assert_cmpuint(room, ==, 7);
	g_assert_cmpint(bootstrap("{\"bootstrap_room\":7}", &room), ==, -1);
	g_assert_cmpint(bootstrap("{\"bootstrap_host\":\"p\"}", &room), ==, -1);
	g_assert_cmpint(bootstrap("{\"bootstrap_host\":\"p\",\"bootstrap_room\":-1}", &room), ==,
	                -1);
	g_assert_cmpint(bootstrap("{\"bootstrap_host\":\"p\",\"bootstrap_port\":0,"
	                          "\"bootstrap_room\":1}", &room), ==, -1);
	g_assert_cmpint(bootstrap("{\"bootstrap_host\":[\"p\"],\"bootstrap_room\":[1]}", &room),
	                ==, -1);
}

static void
test_metrics(void)
{
	struct sim_metrics *m = sim_metrics_new();
	struct sim_engine_stats st = { .running = 2, .waiting = 3, .kv_blocks_used = 4,
	                               .kv_blocks_total = 16, .block_tokens = 16,
	                               .prompt_tokens_total = 100,
	                               .generation_tokens_total = 40, .steps_total = 20 };
	GString *out = g_string_new(NULL);

	g_test_summary("Metric names per dialect (wire formats 5.1 to 5.3)");
	sim_metrics_first_token(m, 0.05);
	sim_metrics_finished(m, SIM_REASON_LENGTH, 1.0, 0.0, 0.05, 0.95);
	sim_metrics_request_tokens(m, 300);

	sim_metrics_render(m, &st, SIM_DIALECT_SGLANG, "m", "0", 10.0, out);
	g_assert_nonnull(strstr(out->str, "sglang:num_running_reqs{model_name=\"m\"} 2\n"));
	g_assert_nonnull(strstr(out->str, "sglang:num_queue_reqs{model_name=\"m\"} 3\n"));
	g_assert_nonnull(strstr(out->str, "sglang:token_usage{model_name=\"m\"} 0.25\n"));
	g_assert_nonnull(strstr(out->str, "sglang:num_used_tokens{model_name=\"m\"} 64\n"));
	/* 40 tokens over the 10 model seconds since the (first) scrape window began. */
	g_assert_nonnull(strstr(out->str, "sglang:gen_throughput{model_name=\"m\"} 4\n"));
	g_assert_nonnull(strstr(out->str, "sglang:cache_hit_rate{model_name=\"m\"} 0\n"));
	g_assert_nonnull(strstr(out->str, "sglang:prompt_tokens_total{model_name=\"m\"} 100\n"));
	g_assert_nonnull(strstr(out->str, "sglang:generation_tokens_total{model_name=\"m\"} 40\n"));
	g_assert_nonnull(strstr(out->str,
	                        "sglang:time_to_first_token_seconds_count{model_name=\"m\"} 1\n"));
	g_assert_nonnull(strstr(out->str, "# TYPE sglang:time_per_output_token_seconds "
	                                  "histogram\n"));
	g_assert_nonnull(strstr(out->str,
	                        "sglang:e2e_request_latency_seconds_bucket{model_name=\"m\","
	                        "le=\"+Inf\"} 1\n"));
	g_assert_null(strstr(out->str, "vllm:"));
	/* The next scrape covers only what came since. */
	g_string_truncate(out, 0);
	sim_metrics_render(m, &st, SIM_DIALECT_SGLANG, "m", "0", 12.0, out);
	g_assert_nonnull(strstr(out->str, "sglang:gen_throughput{model_name=\"m\"} 0\n"));

	g_string_truncate(out, 0);
	sim_metrics_render(m, &st, SIM_DIALECT_LLAMACPP, "m", "0", 10.0, out);
	g_assert_nonnull(strstr(out->str, "llamacpp:requests_processing 2\n"));
	g_assert_nonnull(strstr(out->str, "llamacpp:requests_deferred 3\n"));
	g_assert_nonnull(strstr(out->str, "llamacpp:prompt_tokens_total 100\n"));
	g_assert_nonnull(strstr(out->str, "llamacpp:tokens_predicted_total 40\n"));
	g_assert_nonnull(strstr(out->str, "llamacpp:prompt_tokens_seconds 2000\n"));
	g_assert_nonnull(strstr(out->str, "llamacpp:predicted_tokens_seconds 42.1052632\n"));
	g_assert_nonnull(strstr(out->str, "llamacpp:n_busy_slots_per_decode 2\n"));
	g_assert_nonnull(strstr(out->str, "llamacpp:n_decode_total 20\n"));
	g_assert_nonnull(strstr(out->str, "llamacpp:n_tokens_max 300\n"));
	g_assert_null(strstr(out->str, "{"));

	g_string_truncate(out, 0);
	sim_metrics_render(m, &st, SIM_DIALECT_VLLM, "m", "0", 10.0, out);
	g_assert_nonnull(strstr(out->str,
	                        "vllm:num_requests_running{model_name=\"m\",engine=\"0\"} 2\n"));
	g_assert_null(strstr(out->str, "sglang:"));
	g_string_free(out, TRUE);
	sim_metrics_free(m);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/sim/issue14/dialect-spec", test_spec);
	g_test_add_func("/sim/issue14/fleet-roles", test_fleet_roles);
	g_test_add_func("/sim/issue14/error-shapes", test_errors);
	g_test_add_func("/sim/issue14/sglang-tokenize", test_sglang_tokenize);
	g_test_add_func("/sim/issue14/llamacpp-tokenize", test_llamacpp_tokenize);
	g_test_add_func("/sim/issue14/sglang-bootstrap", test_bootstrap);
	g_test_add_func("/sim/issue14/metrics-names", test_metrics);
	return g_test_run();
}
