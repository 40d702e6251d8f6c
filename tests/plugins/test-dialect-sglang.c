/*
 * The "sglang" dialect in isolation: the built .so, loaded by the real
 * loader, driven against the mock host. Engine calls are checked as exact
 * JSON; the engine answers are recorded fixtures (tests/plugins/fixtures/
 * sglang/) in the shapes the engine-wire-formats reference records for
 * SGLang (sections 2 to 5). Paths name the reference section ("ref-2") or
 * the spec section ("spec-4.2") a test holds the plugin to; the issue is
 * issue 14 ("the sglang dialect plugin").
 */
#include "build-config.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "plugins/harness.h"

/* ------------------------------------------------------------- helpers --- */

/* The dialect created from config_json at host time now_ns. */
static struct nw_harness *
sglang_at(const char *config_json, int64_t now_ns)
{
	struct nw_harness *h = nw_harness_new(NARWHAL_KIND_DIALECT, "sglang");
	g_autoptr(GError) error = NULL;

	if (h == NULL)
		return NULL;
	narwhal_mock_host_set_time(h->host, now_ns);
	g_assert_true(nw_harness_create(h, config_json, &error));
	g_assert_no_error(error);
	return h;
}

static struct nw_harness *
sglang_with(const char *config_json)
{
	return sglang_at(config_json, 1000);
}

/* A recorded engine answer (tests/plugins/fixtures/sglang/name). */
static char *
fixture(const char *name, size_t *len)
{
	g_autofree char *path = g_test_build_filename(G_TEST_DIST, "plugins", "fixtures", "sglang",
	                                              name, NULL);
	g_autoptr(GError) error = NULL;
	char *text = NULL;
	gsize n = 0;

	if (!g_file_get_contents(path, &text, &n, &error))
		g_error("fixture %s: %s", path, error->message);
	if (len != NULL)
		*len = n;
	return text;
}

static json_t *
fixture_json(const char *name)
{
	g_autofree char *text = fixture(name, NULL);

	return nw_harness_json(text);
}

/* The fleet of the tests: a prefill engine, a decode engine, an engine
 * addressed by IPv6 and one by name. */
static const struct narwhal_engine_ref eng_p = {
	.struct_size = sizeof eng_p, .index = 0, .id = "p0", .url = "http://10.0.0.7:30000",
};
static const struct narwhal_engine_ref eng_d = {
	.struct_size = sizeof eng_d, .index = 1, .id = "d0", .url = "http://10.0.0.8:30001",
};
static const struct narwhal_engine_ref eng_v6 = {
	.struct_size = sizeof eng_v6, .index = 2, .id = "p6", .url = "https://[fd00::17]:30000",
};
static const struct narwhal_engine_ref eng_named = {
	.struct_size = sizeof eng_named, .index = 3, .id = "agg", .url = "http://gpu-7.lab:8080",
};

#define C NARWHAL_ROUTE_COMPLETIONS
#define CHAT NARWHAL_ROUTE_CHAT_COMPLETIONS

static struct narwhal_dialect_target
target(narwhal_route route, const json_t *body, const struct narwhal_engine_ref *engine,
       const struct narwhal_engine_ref *prefill, const struct narwhal_engine_ref *decode,
       uint64_t pair_id)
{
	return (struct narwhal_dialect_target){
		.struct_size = sizeof(struct narwhal_dialect_target),
		.request = 7, .request_id = "t", .route = route, .client_body = body,
		.engine = engine, .prefill = prefill, .decode = decode, .pair_id = pair_id,
	};
}

/* A call poisoned so that a field the plugin forgets shows up. */
static struct narwhal_http_call
poisoned_call(void)
{
	return (struct narwhal_http_call){
		.struct_size = sizeof(struct narwhal_http_call), .flags = 0x80000000u,
		.method = "POISON", .path = "/poison", .body = NULL,
	};
}

typedef enum leg { LEG_TOKENIZE, LEG_PREFILL, LEG_DECODE, LEG_AGGREGATE } leg;

/* Build one leg for t (its client body borrowed). Returns the plugin's
 * code; on 0 the call is checked for method and path and its body stored
 * in *body (caller frees; a copy of the client body when the call sends
 * it unchanged). The client body must come back untouched. */
static int
build_t(struct nw_harness *h, leg which, const struct narwhal_dialect_target *t, json_t **body)
{
	json_t *pristine = json_deep_copy(t->client_body);
	struct narwhal_http_call call = poisoned_call();
	int rc = -9999;

	switch (which) {
	case LEG_TOKENIZE:
		rc = nw_harness_dialect(h)->build_tokenize(nw_harness_ctx(h), t, &call);
		break;
	case LEG_PREFILL:
		rc = nw_harness_dialect(h)->build_prefill(nw_harness_ctx(h), t, &call);
		break;
	case LEG_DECODE:
		rc = nw_harness_dialect(h)->build_decode(nw_harness_ctx(h), t, NULL, &call);
		break;
	case LEG_AGGREGATE:
		rc = nw_harness_dialect(h)->build_aggregate(nw_harness_ctx(h), t, &call);
		break;
	}
	g_assert_true(json_equal(t->client_body, pristine));
	json_decref(pristine);
	*body = NULL;
	if (rc != 0)
		return rc;
	g_assert_cmpstr(call.method, ==, "POST");
	if (which == LEG_TOKENIZE)
		g_assert_cmpstr(call.path, ==, "/v1/tokenize");
	else if (t->route == C)
		g_assert_cmpstr(call.path, ==, "/v1/completions");
	else
		g_assert_cmpstr(call.path, ==, "/v1/chat/completions");
	if (call.flags & NARWHAL_CALL_CLIENT_BODY) {
		g_assert_cmpuint(call.flags, ==, NARWHAL_CALL_CLIENT_BODY);
		g_assert_null(call.body);
		*body = json_deep_copy(t->client_body);
		return 0;
	}
	g_assert_cmpuint(call.flags, ==, 0);
	g_assert_nonnull(call.body);
	*body = call.body;
	return 0;
}

/* A pair leg (p0 then d0, pair 12) from client text. */
static int
build_pair_leg(struct nw_harness *h, leg which, narwhal_route route, const char *client_text,
               json_t **body)
{
	json_t *client = nw_harness_json(client_text);
	struct narwhal_dialect_target t =
		target(route, client, which == LEG_DECODE ? &eng_d : &eng_p, &eng_p, &eng_d, 12);
	int rc = build_t(h, which, &t, body);

	json_decref(client);
	return rc;
}

/* A leg with no pair (tokenise, aggregate) on engine. */
static int
build_single(struct nw_harness *h, leg which, narwhal_route route,
             const struct narwhal_engine_ref *engine, const char *client_text, json_t **body)
{
	json_t *client = nw_harness_json(client_text);
	struct narwhal_dialect_target t = target(route, client, engine, NULL, NULL, 0);
	int rc = build_t(h, which, &t, body);

	json_decref(client);
	return rc;
}

/* The room both legs of pair 12 get from h. */
static json_int_t
room_of_pair(struct nw_harness *h, uint64_t pair_id)
{
	json_t *client = nw_harness_json("{\"model\": \"m\", \"prompt\": \"x\"}");
	struct narwhal_dialect_target t = target(C, client, &eng_p, &eng_p, &eng_d, pair_id);
	json_t *body = NULL;
	json_int_t room;

	g_assert_cmpint(build_t(h, LEG_PREFILL, &t, &body), ==, 0);
	room = json_integer_value(json_object_get(body, "bootstrap_room"));
	g_assert_true(json_is_integer(json_object_get(body, "bootstrap_room")));
	json_decref(body);
	json_decref(client);
	return room;
}

/* ---------------------------------------------------- descriptor, config --- */

static void
test_descriptor(void)
{
	struct nw_harness *h = sglang_with(NULL);

	if (h == NULL)
		return;
	g_assert_cmpstr(h->plugin->desc->name, ==, "sglang");
	g_assert_cmpuint(h->plugin->desc->abi_major, ==, NARWHAL_ABI_MAJOR);
	g_assert_cmpuint(h->plugin->desc->abi_minor, ==, NARWHAL_ABI_MINOR);
	g_assert_nonnull(nw_harness_dialect(h)->build_tokenize);
	g_assert_nonnull(nw_harness_dialect(h)->parse_tokenize);
	g_assert_nonnull(nw_harness_dialect(h)->build_prefill);
	g_assert_nonnull(nw_harness_dialect(h)->build_decode);
	g_assert_nonnull(nw_harness_dialect(h)->parse_prefill);
	g_assert_nonnull(nw_harness_dialect(h)->build_aggregate);
	g_assert_nonnull(nw_harness_dialect(h)->build_health);
	g_assert_nonnull(nw_harness_dialect(h)->parse_sse);
	g_assert_nonnull(nw_harness_dialect(h)->parse_sse_json);
	g_assert_nonnull(nw_harness_dialect(h)->sniff_sse);
	g_assert_nonnull(nw_harness_dialect(h)->parse_error);
	g_assert_nonnull(nw_harness_dialect(h)->build_models);
	g_assert_nonnull(nw_harness_dialect(h)->parse_models);
	g_assert_nonnull(nw_harness_dialect(h)->router_keys);
	g_assert_nonnull(nw_harness_dialect(h)->build_metrics);
	g_assert_nonnull(nw_harness_dialect(h)->parse_metrics);
	nw_harness_free(h);
}

/* Reference 2: roles are fixed at launch. A PD engine hands off
 * concurrently and never per request; an engine without
 * --disaggregation-mode is aggregate-only (no handoff flag), per dialect
 * or per engine. */
static void
test_capabilities(void)
{
	struct nw_harness *h = sglang_with("{\"engines\": {\"agg\": {\"disaggregation\": false}}}");
	struct nw_harness *agg = sglang_with("{\"disaggregation\": false,"
	                                     " \"engines\": {\"p0\": {\"disaggregation\": true}}}");

	if (h == NULL || agg == NULL) {
		nw_harness_free(h);
		nw_harness_free(agg);
		return;
	}
	g_assert_cmpuint(nw_harness_dialect(h)->capabilities(nw_harness_ctx(h), &eng_p), ==,
	                 NARWHAL_DIALECT_HANDOFF_CONCURRENT);
	g_assert_cmpuint(nw_harness_dialect(h)->capabilities(nw_harness_ctx(h), &eng_d), ==,
	                 NARWHAL_DIALECT_HANDOFF_CONCURRENT);
	g_assert_cmpuint(nw_harness_dialect(h)->capabilities(nw_harness_ctx(h), &eng_named), ==, 0);
	g_assert_cmpuint(nw_harness_dialect(agg)->capabilities(nw_harness_ctx(agg), &eng_p), ==,
	                 NARWHAL_DIALECT_HANDOFF_CONCURRENT);
	g_assert_cmpuint(nw_harness_dialect(agg)->capabilities(nw_harness_ctx(agg), &eng_d), ==, 0);
	nw_harness_free(h);
	nw_harness_free(agg);
}

static void
test_good_configs(void)
{
	const char *configs[] = {
		NULL, "null", "{}", "{\"bootstrap_port\": 1}", "{\"bootstrap_port\": 65535}",
		"{\"disaggregation\": true, \"engines\": {}}",
		"{\"engines\": {\"p0\": {}, \"d0\": {\"bootstrap_port\": 9000},"
		" \"p6\": {\"bootstrap_host\": \"fd00::17%eth0\"}}}",
	};

	for (guint i = 0; i < G_N_ELEMENTS(configs); i++) {
		struct nw_harness *h = sglang_with(configs[i]);

		if (h == NULL)
			return;
		g_assert_cmpuint(narwhal_mock_host_n_logs(h->host), ==, 0);
		nw_harness_free(h);
	}
}

static void
expect_config_error(const char *config_json, const char *reason)
{
	nw_harness_expect_config_error(NARWHAL_KIND_DIALECT, "sglang", config_json, reason);
}

/* Issue 14: bad configuration is refused with a message that names the
 * key and what is valid. */
static void
test_config_errors(void)
{
	expect_config_error("[]", "config must be an object");
	expect_config_error("\"sglang\"", "config must be an object");
	expect_config_error("{\"bootstrap_prot\": 8998}",
	                    "bootstrap_prot: unknown key: valid keys are bootstrap_port, "
	                    "disaggregation and engines");
	expect_config_error("{\"bootstrap_port\": 0}",
	                    "bootstrap_port: must be an integer from 1 to 65535");
	expect_config_error("{\"bootstrap_port\": 65536}", "bootstrap_port: must be an integer");
	expect_config_error("{\"bootstrap_port\": \"8998\"}", "bootstrap_port: must be an integer");
	expect_config_error("{\"bootstrap_port\": 8998.0}", "bootstrap_port: must be an integer");
	expect_config_error("{\"disaggregation\": \"prefill\"}",
	                    "disaggregation: must be true (the engine runs with "
	                    "--disaggregation-mode) or false");
	expect_config_error("{\"engines\": []}",
	                    "engines: must be an object from engine ID to settings");
	expect_config_error("{\"engines\": {\"p0\": 8998}}", "engines.p0: must be an object");
	expect_config_error("{\"engines\": {\"p0\": {\"bootstrap_port\": -1}}}",
	                    "engines.p0.bootstrap_port: must be an integer from 1 to 65535");
	expect_config_error("{\"engines\": {\"p0\": {\"disaggregation\": null}}}",
	                    "engines.p0.disaggregation: must be true");
	expect_config_error("{\"engines\": {\"p0\": {\"bootstrap_host\": \"\"}}}",
	                    "engines.p0.bootstrap_host: must be a host name or an IPv4");
	expect_config_error("{\"engines\": {\"p0\": {\"bootstrap_host\": \"http://p0\"}}}",
	                    "engines.p0.bootstrap_host: must be a host name or an IPv4");
	expect_config_error("{\"engines\": {\"p0\": {\"bootstrap_host\": 7}}}",
	                    "engines.p0.bootstrap_host: must be a host name or an IPv4");
	expect_config_error("{\"engines\": {\"p0\": {\"port\": 1}}}",
	                    "engines.p0.port: unknown key: valid keys are bootstrap_port, "
	                    "bootstrap_host and disaggregation");
}

/* RULES: a configuration error reads "json.path: problem: what is valid"
 * on one line: a key or engine ID with control characters or quotes is
 * shown escaped, a long ID shortened so that the key after it stays in
 * the message; and a bootstrap_host must be one a decode engine can dial
 * (a host:port, which the engine would dial with the port again, is
 * not). */
static void
test_config_error_text(void)
{
	g_autofree char *long_id = g_strnfill(300, 'p');
	g_autofree char *long_cfg =
		g_strdup_printf("{\"engines\": {\"%s\": {\"bootstrap_port\": 0}}}", long_id);
	g_autofree char *long_msg = g_strdup_printf(
		"engines.%.40s....bootstrap_port: must be an integer from 1 to 65535", long_id);

	expect_config_error("{\"engines\": {\"a\\nb\": {\"bootstrap_port\": 0}}}",
	                    "engines.a\\u000ab.bootstrap_port: must be an integer from 1 to 65535");
	expect_config_error("{\"engines\": {\"p0\": {\"x\\\"y\\u001b\": 1}}}",
	                    "engines.p0.x\\\"y\\u001b: unknown key: valid keys are");
	expect_config_error("{\"bootstrap\\rport\": 1}", "bootstrap\\u000dport: unknown key");
	expect_config_error(long_cfg, long_msg);
	for (const char *const *bad = (const char *const[]){ "10.0.0.7:8998", "gpu-7..lab",
	                                                     "-gpu", "gpu-.lab", "fd00::17%",
	                                                     "[fd00::17]", "fd00::zz", NULL };
	     *bad != NULL; bad++) {
		g_autofree char *cfg = g_strdup_printf(
			"{\"engines\": {\"p0\": {\"bootstrap_host\": \"%s\"}}}", *bad);

		expect_config_error(cfg, "engines.p0.bootstrap_host: must be a host name or an "
		                         "IPv4 address, or an IPv6 address without brackets");
	}
	for (const char *const *good = (const char *const[]){ "gpu-7.lab", "gpu_7", "10.0.0.7",
	                                                      "fd00::17", "fe80::1%eth0",
	                                                      "gpu.lab.", NULL };
	     *good != NULL; good++) {
		g_autofree char *cfg = g_strdup_printf(
			"{\"engines\": {\"p0\": {\"bootstrap_host\": \"%s\"}}}", *good);
		struct nw_harness *h = sglang_with(cfg);

		if (h == NULL)
			return;
		nw_harness_free(h);
	}
}

/* An engines entry must name an engine of the fleet when the host shows
 * one: a typo would otherwise send a pair to the default port. */
static void
test_config_unknown_engine(void)
{
	struct nw_harness *h = nw_harness_new(NARWHAL_KIND_DIALECT, "sglang");
	struct narwhal_engine_view views[2] = {
		{ .struct_size = sizeof views[0], .index = 0, .id = "p0", .role = NARWHAL_ROLE_PREFILL },
		{ .struct_size = sizeof views[1], .index = 1, .id = "d0", .role = NARWHAL_ROLE_DECODE },
	};
	struct narwhal_fleet_view fleet = {
		.struct_size = sizeof fleet, .engine_view_size = sizeof views[0], .n_engines = 2,
		.engines = views,
	};
	g_autoptr(GError) error = NULL;

	if (h == NULL)
		return;
	narwhal_mock_host_set_fleet(h->host, &fleet);
	g_assert_false(nw_harness_create(h, "{\"engines\": {\"p0\": {}, \"p1\": {}}}", &error));
	g_assert_nonnull(error);
	g_assert_nonnull(strstr(error->message, "engines.p1: no engine of the fleet has this ID"));
	g_clear_error(&error);
	g_assert_true(nw_harness_create(h, "{\"engines\": {\"p0\": {}, \"d0\": {}}}", &error));
	g_assert_no_error(error);
	nw_harness_free(h);
}

/* ------------------------------------------------------ the pair's legs --- */

/* Reference 2: one body for both engines, the client's request plus the
 * prefill engine's bootstrap host (from its URL), its bootstrap port (8998
 * by default) and the pair's room; both legs at the client's route. */
static void
test_pair_legs(void)
{
	static const char *const client =
		"{\"model\": \"m\", \"prompt\": \"The capital of France is\", \"max_tokens\": 16,"
		" \"stream\": true, \"stream_options\": {\"include_usage\": true}}";
	struct nw_harness *h = sglang_with(NULL);
	json_t *p = NULL, *d = NULL;
	g_autofree char *expected = NULL;
	json_int_t room;

	if (h == NULL)
		return;
	g_assert_cmpint(build_pair_leg(h, LEG_PREFILL, C, client, &p), ==, 0);
	g_assert_cmpint(build_pair_leg(h, LEG_DECODE, C, client, &d), ==, 0);
	/* The identical body, the same room. */
	g_assert_true(json_equal(p, d));
	room = json_integer_value(json_object_get(p, "bootstrap_room"));
	g_assert_cmpint(room, >=, 0);
	expected = g_strdup_printf(
		"{\"model\": \"m\", \"prompt\": \"The capital of France is\", \"max_tokens\": 16,"
		" \"stream\": true, \"stream_options\": {\"include_usage\": true},"
		" \"bootstrap_host\": \"10.0.0.7\", \"bootstrap_port\": 8998,"
		" \"bootstrap_room\": %" G_GINT64_FORMAT "}", (gint64)room);
	nw_harness_assert_json(p, expected);
	json_decref(p);
	json_decref(d);

	/* Chat: the same three keys on the chat body. */
	g_assert_cmpint(build_pair_leg(h, LEG_DECODE, CHAT,
	                               "{\"model\": \"m\", \"messages\": [{\"role\": \"user\","
	                               " \"content\": \"hi\"}], \"max_completion_tokens\": 9}",
	                               &d), ==, 0);
	g_free(expected);
	expected = g_strdup_printf(
		"{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}],"
		" \"max_completion_tokens\": 9, \"bootstrap_host\": \"10.0.0.7\","
		" \"bootstrap_port\": 8998, \"bootstrap_room\": %" G_GINT64_FORMAT "}", (gint64)room);
	nw_harness_assert_json(d, expected);
	json_decref(d);
	nw_harness_free(h);
}

/* The bootstrap port per dialect and per engine, the host per engine or
 * from the URL (an IPv6 literal without its brackets). */
static void
test_bootstrap_address(void)
{
	struct nw_harness *h = sglang_with(
		"{\"bootstrap_port\": 9100, \"engines\": {\"p6\": {\"bootstrap_port\": 9200},"
		" \"agg\": {\"bootstrap_host\": \"10.1.2.3\"}}}");
	json_t *client = nw_harness_json("{\"model\": \"m\", \"prompt\": \"x\"}");
	const struct {
		const struct narwhal_engine_ref *prefill;
		const char *host;
		int port;
	} cases[] = {
		{ &eng_p, "10.0.0.7", 9100 },
		{ &eng_v6, "fd00::17", 9200 },
		{ &eng_named, "10.1.2.3", 9100 },
	};

	if (h == NULL) {
		json_decref(client);
		return;
	}
	for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
		struct narwhal_dialect_target t =
			target(C, client, &eng_d, cases[i].prefill, &eng_d, 40 + i);
		json_t *body = NULL;

		g_assert_cmpint(build_t(h, LEG_DECODE, &t, &body), ==, 0);
		g_assert_cmpstr(json_string_value(json_object_get(body, "bootstrap_host")), ==,
		                cases[i].host);
		g_assert_cmpint(json_integer_value(json_object_get(body, "bootstrap_port")), ==,
		                cases[i].port);
		json_decref(body);
	}
	json_decref(client);
	nw_harness_free(h);
}

/* Reference 2: the room is a random integer in [0, 2^63). The ABI has no
 * random source, so rooms are keyed by the host clock at create: both legs
 * share one, every pair ID gets its own, a router started at another time
 * draws others, and virtual time replays the same. */
static void
test_rooms(void)
{
	struct nw_harness *a = sglang_at(NULL, 1000);
	struct nw_harness *again = sglang_at(NULL, 1000);
	struct nw_harness *later = sglang_at(NULL, 1001);
	g_autoptr(GHashTable) seen = g_hash_table_new(g_int64_hash, g_int64_equal);
	gint64 *rooms = g_new(gint64, 4096);
	guint high = 0, differ = 0;

	if (a == NULL || again == NULL || later == NULL)
		goto out;
	for (guint i = 0; i < 4096; i++) {
		/* The host's pair IDs: the request handle and the attempt. */
		uint64_t pair_id = ((uint64_t)(i / 4 + 1) << 2) | (i % 4);

		rooms[i] = room_of_pair(a, pair_id);
		g_assert_cmpint(rooms[i], >=, 0);
		g_assert_false(g_hash_table_contains(seen, &rooms[i]));
		g_hash_table_add(seen, &rooms[i]);
		if ((uint64_t)rooms[i] >> 62)
			high++;
		g_assert_cmpint(room_of_pair(again, pair_id), ==, rooms[i]);
		if (room_of_pair(later, pair_id) != rooms[i])
			differ++;
	}
	/* Spread over the range, not counting up from the handle. */
	g_assert_cmpuint(high, >, 4096 / 4);
	g_assert_cmpuint(high, <, 4096 * 3 / 4);
	g_assert_cmpuint(differ, ==, 4096);
	/* One clock read, at create; none per request. */
	g_assert_cmpuint(narwhal_mock_host_clock_reads(a->host), ==, 1);
out:
	g_free(rooms);
	nw_harness_free(a);
	nw_harness_free(again);
	nw_harness_free(later);
}

/* The router owns the bootstrap keys, and disagg_prefill_dp_rank, which
 * tells the decode engine which of the prefill engine's data-parallel
 * ranks holds the KV cache: a client's are refused by the host
 * (router_keys) and, should one get through, replaced or dropped on a
 * pair leg and dropped from an aggregate one. */
static void
test_router_keys(void)
{
	static const char *const forged =
		"{\"model\": \"m\", \"prompt\": \"x\", \"bootstrap_host\": \"evil.example\","
		" \"bootstrap_port\": 1, \"bootstrap_room\": 5, \"disagg_prefill_dp_rank\": 3}";
	struct nw_harness *h = sglang_with("{\"disaggregation\": false,"
	                                   " \"engines\": {\"p0\": {\"disaggregation\": true},"
	                                   " \"d0\": {\"disaggregation\": true}}}");
	const char *const *keys;
	json_t *body = NULL;

	if (h == NULL)
		return;
	keys = nw_harness_dialect(h)->router_keys(nw_harness_ctx(h));
	g_assert_cmpstr(keys[0], ==, "bootstrap_host");
	g_assert_cmpstr(keys[1], ==, "bootstrap_port");
	g_assert_cmpstr(keys[2], ==, "bootstrap_room");
	g_assert_cmpstr(keys[3], ==, "disagg_prefill_dp_rank");
	g_assert_null(keys[4]);
	g_assert_cmpint(build_pair_leg(h, LEG_PREFILL, C, forged, &body), ==, 0);
	g_assert_cmpstr(json_string_value(json_object_get(body, "bootstrap_host")), ==, "10.0.0.7");
	g_assert_cmpint(json_integer_value(json_object_get(body, "bootstrap_port")), ==, 8998);
	g_assert_cmpint(json_integer_value(json_object_get(body, "bootstrap_room")), !=, 5);
	g_assert_null(json_object_get(body, "disagg_prefill_dp_rank"));
	json_decref(body);
	g_assert_cmpint(build_pair_leg(h, LEG_DECODE, C, forged, &body), ==, 0);
	g_assert_null(json_object_get(body, "disagg_prefill_dp_rank"));
	json_decref(body);
	g_assert_cmpint(build_single(h, LEG_AGGREGATE, C, &eng_named, forged, &body), ==, 0);
	nw_harness_assert_json(body, "{\"model\": \"m\", \"prompt\": \"x\"}");
	json_decref(body);
	nw_harness_free(h);
}

/* One pair carries one sequence: SGLang takes a request of several (a
 * batch of prompts, n above 1) only with a list of bootstrap rooms, one
 * per sequence, and fails it with one room. Such a request is never a
 * pair's (-ENOTSUP; the host refuses it from clients too). */
static void
test_pair_one_sequence(void)
{
	static const char *const several[] = {
		"{\"prompt\": [\"a\", \"b\"]}", "{\"prompt\": [[1, 2], [3]]}",
		"{\"prompt\": \"a\", \"n\": 2}", "{\"prompt\": \"a\", \"best_of\": 3}",
		"{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"n\": 4}",
	};
	static const char *const one[] = {
		"{\"prompt\": [\"a\"]}", "{\"prompt\": [[1, 2]]}", "{\"prompt\": [1, 2]}",
		"{\"prompt\": \"a\", \"n\": 1, \"best_of\": null}",
	};
	struct nw_harness *h = sglang_with(NULL);
	json_t *body = NULL;

	if (h == NULL)
		return;
	for (guint i = 0; i < G_N_ELEMENTS(several); i++) {
		narwhal_route route = strstr(several[i], "messages") ? CHAT : C;

		g_assert_cmpint(build_pair_leg(h, LEG_PREFILL, route, several[i], &body), ==,
		                -ENOTSUP);
		g_assert_cmpint(build_pair_leg(h, LEG_DECODE, route, several[i], &body), ==,
		                -ENOTSUP);
	}
	for (guint i = 0; i < G_N_ELEMENTS(one); i++) {
		g_assert_cmpint(build_pair_leg(h, LEG_DECODE, C, one[i], &body), ==, 0);
		json_decref(body);
	}
	nw_harness_free(h);
}

/* Legs the dialect refuses: no pair, the wrong engine for the leg, a PD
 * leg to an aggregate engine, a handoff where none exists. */
static void
test_pair_leg_errors(void)
{
	struct nw_harness *h = sglang_with("{\"engines\": {\"agg\": {\"disaggregation\": false}}}");
	json_t *client = nw_harness_json("{\"model\": \"m\", \"prompt\": \"x\"}");
	json_t *handoff = nw_harness_json("{\"anything\": 1}");
	struct narwhal_http_call call = poisoned_call();
	struct narwhal_dialect_target t;
	json_t *body = NULL;

	if (h == NULL) {
		json_decref(client);
		json_decref(handoff);
		return;
	}
	t = target(C, client, &eng_p, &eng_p, &eng_d, 0);
	g_assert_cmpint(build_t(h, LEG_PREFILL, &t, &body), ==, -EINVAL);
	t = target(C, client, &eng_p, &eng_p, NULL, 12);
	g_assert_cmpint(build_t(h, LEG_PREFILL, &t, &body), ==, -EINVAL);
	t = target(C, client, &eng_d, &eng_p, &eng_d, 12);
	g_assert_cmpint(build_t(h, LEG_PREFILL, &t, &body), ==, -EINVAL);
	t = target(C, client, &eng_p, &eng_p, &eng_d, 12);
	g_assert_cmpint(build_t(h, LEG_DECODE, &t, &body), ==, -EINVAL);
	t = target((narwhal_route)9, client, &eng_p, &eng_p, &eng_d, 12);
	g_assert_cmpint(build_t(h, LEG_PREFILL, &t, &body), ==, -EINVAL);
	t = target(C, client, &eng_named, &eng_named, &eng_d, 12);
	g_assert_cmpint(build_t(h, LEG_PREFILL, &t, &body), ==, -ENOTSUP);
	t = target(C, client, &eng_d, &eng_p, &eng_d, 12);
	g_assert_cmpint(nw_harness_dialect(h)->build_decode(nw_harness_ctx(h), &t, handoff, &call), ==, -EINVAL);
	g_assert_cmpint(nw_harness_dialect(h)->build_prefill(nw_harness_ctx(h), NULL, &call), ==, -EINVAL);
	g_assert_cmpint(nw_harness_dialect(h)->build_prefill(nw_harness_ctx(h), &t, NULL), ==, -EINVAL);
	g_assert_null(body);
	json_decref(client);
	json_decref(handoff);
	nw_harness_free(h);
}

/* The prefill answer (fixture) carries no handoff: the KV cache goes
 * engine to engine. */
static void
test_parse_prefill(void)
{
	struct nw_harness *h = sglang_with(NULL);
	json_t *answer = fixture_json("prefill-answer.json");
	json_t *handoff = json_true();

	if (h == NULL) {
		json_decref(answer);
		return;
	}
	g_assert_cmpint(nw_harness_dialect(h)->parse_prefill(nw_harness_ctx(h), answer, &handoff), ==, 0);
	g_assert_null(handoff);
	g_assert_cmpint(nw_harness_dialect(h)->parse_prefill(nw_harness_ctx(h), answer, NULL), ==, -EINVAL);
	json_decref(answer);
	nw_harness_free(h);
}

/* ---------------------------------------------------------- aggregate --- */

/* Issue 14: aggregate engines (no PD mode) serve whole requests, sent as
 * the client sent them; a PD engine cannot. */
static void
test_aggregate(void)
{
	struct nw_harness *h = sglang_with("{\"engines\": {\"agg\": {\"disaggregation\": false}}}");
	static const char *const client =
		"{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}],"
		" \"stream\": true}";
	json_t *body = NULL;

	if (h == NULL)
		return;
	g_assert_cmpint(build_single(h, LEG_AGGREGATE, CHAT, &eng_named, client, &body), ==, 0);
	nw_harness_assert_json(body, client);
	json_decref(body);
	g_assert_cmpint(build_single(h, LEG_AGGREGATE, C, &eng_named,
	                             "{\"model\": \"m\", \"prompt\": \"x\"}", &body), ==, 0);
	json_decref(body);
	g_assert_cmpint(build_single(h, LEG_AGGREGATE, C, &eng_p,
	                             "{\"model\": \"m\", \"prompt\": \"x\"}", &body), ==, -ENOTSUP);
	g_assert_cmpint(build_single(h, LEG_AGGREGATE, C, &eng_d,
	                             "{\"model\": \"m\", \"prompt\": \"x\"}", &body), ==, -ENOTSUP);
	g_assert_cmpint(build_single(h, LEG_AGGREGATE, C, &eng_named, "[1]", &body), ==, -EINVAL);
	nw_harness_free(h);
}

/* ----------------------------------------------------------- tokenise --- */

/* Reference 3: POST /v1/tokenize with one string prompt. */
static void
test_tokenize(void)
{
	struct nw_harness *h = sglang_with(NULL);
	json_t *body = NULL;

	if (h == NULL)
		return;
	g_assert_cmpint(build_single(h, LEG_TOKENIZE, C, &eng_p,
	                             "{\"model\": \"m\", \"prompt\": \"hello\", \"max_tokens\": 8,"
	                             " \"stream\": true, \"bootstrap_room\": 3}", &body), ==, 0);
	nw_harness_assert_json(body, "{\"model\": \"m\", \"prompt\": \"hello\", \"add_special_tokens\": true}");
	json_decref(body);
	g_assert_cmpint(build_single(h, LEG_TOKENIZE, C, &eng_p,
	                             "{\"prompt\": [\"only\"], \"add_special_tokens\": false}",
	                             &body), ==, 0);
	nw_harness_assert_json(body, "{\"prompt\": \"only\", \"add_special_tokens\": false}");
	json_decref(body);
	/* Sized without a call: token IDs (-EALREADY); a batch, and chat,
	 * which SGLang's tokenize does not take (-ENOTSUP). */
	g_assert_cmpint(build_single(h, LEG_TOKENIZE, C, &eng_p, "{\"prompt\": [1, 2, 3]}", &body),
	                ==, -EALREADY);
	g_assert_cmpint(build_single(h, LEG_TOKENIZE, C, &eng_p, "{\"prompt\": [\"a\", \"b\"]}",
	                             &body), ==, -ENOTSUP);
	g_assert_cmpint(build_single(h, LEG_TOKENIZE, CHAT, &eng_p, "{\"messages\": []}", &body),
	                ==, -ENOTSUP);
	g_assert_cmpint(build_single(h, LEG_TOKENIZE, C, &eng_p, "{\"model\": \"m\"}", &body), ==,
	                -EINVAL);
	g_assert_cmpint(build_single(h, LEG_TOKENIZE, CHAT, &eng_p, "{\"model\": \"m\"}", &body),
	                ==, -EINVAL);
	nw_harness_free(h);
}

static void
expect_count(struct nw_harness *h, const char *response_text, int expected_rc,
             uint64_t expected)
{
	json_t *response = nw_harness_json(response_text);
	uint64_t n = 987654321;

	g_assert_cmpint(nw_harness_dialect(h)->parse_tokenize(nw_harness_ctx(h), response, &n), ==, expected_rc);
	g_assert_cmpuint(n, ==, expected_rc == 0 ? expected : 987654321);
	json_decref(response);
}

static void
test_parse_tokenize(void)
{
	struct nw_harness *h = sglang_with(NULL);
	g_autofree char *recorded = fixture("tokenize.json", NULL);

	if (h == NULL)
		return;
	expect_count(h, recorded, 0, 3);
	expect_count(h, "{\"tokens\": [5, 6], \"max_model_len\": 100}", 0, 2);
	expect_count(h, "{\"tokens\": []}", 0, 0);
	expect_count(h, "{\"count\": -1}", -EPROTO, 0);
	expect_count(h, "{\"count\": \"3\", \"tokens\": [1, 2, 3]}", -EPROTO, 0);
	expect_count(h, "{\"tokens\": [[1, 2], [3]]}", -EPROTO, 0);
	expect_count(h, "{\"max_model_len\": 100}", -EPROTO, 0);
	expect_count(h, "[3]", -EPROTO, 0);
	nw_harness_free(h);
}

/* Counts the host can use: at most 2^53 (its demand sums are doubles, and
 * so is its cap on a count sized by characters), and a count that is the
 * token list's length when the answer has both. */
static void
test_parse_tokenize_bounds(void)
{
	struct nw_harness *h = sglang_with(NULL);

	if (h == NULL)
		return;
	expect_count(h, "{\"count\": 9007199254740992}", 0, UINT64_C(9007199254740992));
	expect_count(h, "{\"count\": 9007199254740993}", -EPROTO, 0);
	expect_count(h, "{\"tokens\": [1], \"count\": 9223372036854775807}", -EPROTO, 0);
	expect_count(h, "{\"tokens\": [1, 2], \"count\": 3}", -EPROTO, 0);
	expect_count(h, "{\"tokens\": [1, 2, 3], \"count\": 3}", 0, 3);
	nw_harness_free(h);
}

/* ---------------------------------------------- health, models, metrics --- */

static void
expect_get(int rc, const struct narwhal_http_call *call, const char *path)
{
	g_assert_cmpint(rc, ==, 0);
	g_assert_cmpstr(call->method, ==, "GET");
	g_assert_cmpstr(call->path, ==, path);
	g_assert_cmpuint(call->flags, ==, 0);
	g_assert_null(call->body);
}

/* Reference 5.2: GET /health, GET /v1/models (the card's max_model_len),
 * GET /metrics. */
static void
test_health_models(void)
{
	struct nw_harness *h = sglang_with(NULL);
	struct narwhal_http_call call = poisoned_call();
	struct narwhal_model_info info = { .struct_size = sizeof info, .max_model_len = -1 };
	json_t *models = fixture_json("models.json");

	if (h == NULL) {
		json_decref(models);
		return;
	}
	expect_get(nw_harness_dialect(h)->build_health(nw_harness_ctx(h), &eng_p, &call), &call, "/health");
	call = poisoned_call();
	expect_get(nw_harness_dialect(h)->build_models(nw_harness_ctx(h), &eng_p, &call), &call, "/v1/models");
	call = poisoned_call();
	expect_get(nw_harness_dialect(h)->build_metrics(nw_harness_ctx(h), &eng_p, &call), &call, "/metrics");
	g_assert_cmpint(nw_harness_dialect(h)->build_health(nw_harness_ctx(h), &eng_p, NULL), ==, -EINVAL);
	g_assert_cmpint(nw_harness_dialect(h)->parse_models(nw_harness_ctx(h), models, &info), ==, 0);
	g_assert_cmpstr(info.name, ==, "meta-llama/Llama-3.1-8B-Instruct");
	g_assert_cmpint(info.max_model_len, ==, 131072);
	json_decref(models);
	nw_harness_free(h);
}

static struct narwhal_engine_metrics
preset_metrics(void)
{
	return (struct narwhal_engine_metrics){ .struct_size = sizeof(struct narwhal_engine_metrics),
	                                        .running = -1, .waiting = -1,
	                                        .kv_usage = NAN, .start_time_s = NAN };
}

/* parse_metrics on text in a buffer of exactly its length. */
static int
metrics(struct nw_harness *h, const char *text, size_t len, struct narwhal_engine_metrics *out)
{
	g_autofree char *body = g_memdup2(text, len > 0 ? len : 1);

	*out = preset_metrics();
	return nw_harness_dialect(h)->parse_metrics(nw_harness_ctx(h), body, len, out);
}

/* Reference 5.2: sglang:num_running_reqs, sglang:num_queue_reqs and
 * sglang:token_usage out of a recorded scrape; vLLM's names are not
 * SGLang's, and a malformed sample of a read metric refuses the body. */
static void
test_metrics(void)
{
	struct nw_harness *h = sglang_with(NULL);
	struct narwhal_engine_metrics m;
	size_t len;
	g_autofree char *scrape = fixture("metrics.txt", &len);

	if (h == NULL)
		return;
	g_assert_cmpint(metrics(h, scrape, len, &m), ==, 0);
	g_assert_cmpint(m.running, ==, 5);
	g_assert_cmpint(m.waiting, ==, 3);
	g_assert_cmpfloat(m.kv_usage, ==, 0.3125);
	g_assert_cmpfloat_with_epsilon(m.start_time_s, 1764633600.12, 1e-3);
	/* Data-parallel ranks: counts add up, usage is the highest. */
	{
		static const char dp[] =
			"sglang:num_running_reqs{dp_rank=\"0\"} 2\n"
			"sglang:num_running_reqs{dp_rank=\"1\"} 3\n"
			"sglang:token_usage{dp_rank=\"0\"} 0.5\n"
			"sglang:token_usage{dp_rank=\"1\"} 0.25\n";

		g_assert_cmpint(metrics(h, dp, sizeof dp - 1, &m), ==, 0);
		g_assert_cmpint(m.running, ==, 5);
		g_assert_cmpint(m.waiting, ==, -1);
		g_assert_cmpfloat(m.kv_usage, ==, 0.5);
	}
	{
		static const char vllm[] = "vllm:num_requests_running 4\n";
		static const char bad[] = "sglang:token_usage 1.5\n";

		g_assert_cmpint(metrics(h, vllm, sizeof vllm - 1, &m), ==, -EPROTO);
		g_assert_cmpint(m.running, ==, -1);
		g_assert_cmpint(metrics(h, bad, sizeof bad - 1, &m), ==, -EPROTO);
		g_assert_true(isnan(m.kv_usage));
	}
	nw_harness_free(h);
}

/* -------------------------------------------------------------- errors --- */

/* The class and message parse_error gives a recorded answer, from the
 * host's presets (spec 4.2 by status). */
static void
expect_error(struct nw_harness *h, int status, const char *name, narwhal_error_class cls,
             const char *message_part)
{
	size_t len;
	g_autofree char *body = fixture(name, &len);
	struct narwhal_engine_error err = {
		.struct_size = sizeof err,
		.error_class = status >= 500 || status == 408 || status == 429 || status <= 0
		                       ? NARWHAL_ERROR_RETRYABLE : NARWHAL_ERROR_PERMANENT,
	};

	g_assert_cmpint(nw_harness_dialect(h)->parse_error(nw_harness_ctx(h), status, body, len, &err), ==, 0);
	if (err.error_class != cls)
		g_error("%s under %d: class %d, expected %d", name, status, err.error_class, cls);
	g_assert_nonnull(strstr(err.message, message_part));
}

/* Reference 4.4 and 4.5: SGLang's flat error answers, each mapped to
 * Narwhal's classes; a request too long for the context is a 400 that says
 * "context length" in either of SGLang's wordings. */
static void
test_errors_flat(void)
{
	struct nw_harness *h = sglang_with(NULL);
	struct narwhal_engine_error err = { .struct_size = sizeof err,
	                                    .error_class = NARWHAL_ERROR_RETRYABLE };

	if (h == NULL)
		return;
	expect_error(h, 400, "error-context.json", NARWHAL_ERROR_CONTEXT_TOO_LONG,
	             "longer than the model's context length");
	expect_error(h, 400, "error-context-total.json", NARWHAL_ERROR_CONTEXT_TOO_LONG,
	             "maximum context length of 8192");
	expect_error(h, 400, "error-validation.json", NARWHAL_ERROR_CLIENT, "non-negative");
	expect_error(h, 404, "error-not-found.json", NARWHAL_ERROR_PERMANENT, "does not exist");
	expect_error(h, 500, "error-internal.json", NARWHAL_ERROR_RETRYABLE, "not responding");
	expect_error(h, 503, "error-internal.json", NARWHAL_ERROR_RETRYABLE, "not responding");
	/* The status wins over the body's code. */
	expect_error(h, 503, "error-validation.json", NARWHAL_ERROR_RETRYABLE, "non-negative");
	/* A body that says nothing: the host's preset stands. */
	g_assert_cmpint(nw_harness_dialect(h)->parse_error(nw_harness_ctx(h), 502, "Bad Gateway", 11, &err), ==,
	                -EPROTO);
	g_assert_cmpint(err.error_class, ==, NARWHAL_ERROR_RETRYABLE);
	nw_harness_free(h);
}

/* The ABI's parse_error contract: a body with no error in it (FastAPI's
 * {"detail": ...}, an empty object, a success body) is -EPROTO with no
 * message; under an HTTP error status the status gives the class (spec
 * 4.2), otherwise every preset stands as the host set it. */
static void
test_errors_unreadable(void)
{
	static const struct {
		int status;
		const char *body;
		narwhal_error_class cls;
	} cases[] = {
		{ 400, "{}", NARWHAL_ERROR_CLIENT },
		{ 422, "{\"detail\": [{\"loc\": [\"body\"], \"msg\": \"x\"}]}", NARWHAL_ERROR_CLIENT },
		{ 500, "{\"param\": \"n\"}", NARWHAL_ERROR_RETRYABLE },
		{ 0, "{\"detail\": \"x\"}", 77 },
		{ 200, "{\"foo\": 1}", 77 },
		{ 0, "[\"error\"]", 77 },
	};
	struct nw_harness *h = sglang_with(NULL);

	if (h == NULL)
		return;
	for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
		struct narwhal_engine_error err = { .struct_size = sizeof err,
		                                    .error_class = (narwhal_error_class)77 };

		g_assert_cmpint(nw_harness_dialect(h)->parse_error(nw_harness_ctx(h), cases[i].status,
		                                                   cases[i].body,
		                                                   strlen(cases[i].body), &err),
		                ==, -EPROTO);
		if (err.error_class != cases[i].cls)
			g_error("%d %s: class %d, expected %d", cases[i].status, cases[i].body,
			        err.error_class, cases[i].cls);
		g_assert_cmpstr(err.message, ==, "");
		g_assert_cmpstr(err.param, ==, "");
	}
	nw_harness_free(h);
}

/* ABI 2.1, NARWHAL_ERROR_HANDOFF: a decode engine whose KV transfer
 * failed blames the prefill engine; a 400 mentioning it does not (and as
 * it names the router's bootstrap_room, it refuses what Narwhal sent, not
 * the client's request: permanent). */
static void
test_errors_transfer(void)
{
	struct nw_harness *h = sglang_with(NULL);

	if (h == NULL)
		return;
	expect_error(h, 500, "error-transfer.json", NARWHAL_ERROR_HANDOFF, "transfer failed");
	expect_error(h, 0, "error-transfer.json", NARWHAL_ERROR_HANDOFF, "transfer failed");
	expect_error(h, 400, "error-transfer.json", NARWHAL_ERROR_PERMANENT, "transfer failed");
	nw_harness_free(h);
}

/* A prefill engine whose KV transfer failed says so too ("Prefill transfer
 * failed ... KVTransferError ...: Decode instance could be dead"): that is
 * the decode engine gone, no failed handoff to blame on the prefill
 * engine, so its server error stays retryable by its status, in a body or
 * in-band. The decode side's wording is the handoff. */
static void
test_errors_prefill_transfer(void)
{
	static const char prefill[] =
		"{\"object\": \"error\", \"message\": \"Prefill transfer failed for request rank=4"
		" req.rid='ca27' req.bootstrap_room=6593551520068383758 with exception"
		" KVTransferError(bootstrap_room=6593551520068383758): Decode instance could be"
		" dead, remote mooncake session 10.99.91.49:15295 is not alive\", \"type\":"
		" \"InternalServerError\", \"param\": null, \"code\": 500}";
	static const char decode[] =
		"{\"error\": {\"message\": \"Decode transfer failed for request rank=8"
		" decode_req.req.rid='63b1' decode_req.req.bootstrap_room=6593551520068383758 with"
		" exception KVTransferError(bootstrap_room=6593551520068383758): Failed to get"
		" kvcache from prefill instance, it might be dead\", \"code\": 500}}";
	struct nw_harness *h = sglang_with(NULL);
	const struct {
		int status;
		const char *body;
		narwhal_error_class cls;
	} cases[] = {
		{ 500, prefill, NARWHAL_ERROR_RETRYABLE },
		{ 0, prefill, NARWHAL_ERROR_RETRYABLE },
		{ 500, decode, NARWHAL_ERROR_HANDOFF },
		{ 0, decode, NARWHAL_ERROR_HANDOFF },
	};

	if (h == NULL)
		return;
	for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
		struct narwhal_engine_error err = { .struct_size = sizeof err,
		                                    .error_class = NARWHAL_ERROR_PERMANENT };
		struct narwhal_sse_event ev = { .struct_size = sizeof ev };

		g_assert_cmpint(nw_harness_dialect(h)->parse_error(nw_harness_ctx(h), cases[i].status,
		                                                   cases[i].body,
		                                                   strlen(cases[i].body), &err),
		                ==, 0);
		if (err.error_class != cases[i].cls)
			g_error("%d %.40s: class %d, expected %d", cases[i].status, cases[i].body,
			        err.error_class, cases[i].cls);
		if (cases[i].status != 0 || cases[i].body == prefill)
			continue;
		g_assert_cmpint(nw_harness_dialect(h)->parse_sse(nw_harness_ctx(h), cases[i].body,
		                                                 strlen(cases[i].body), &ev), ==, 0);
		g_assert_cmpint(ev.kind, ==, NARWHAL_SSE_ERROR);
		g_assert_cmpint(ev.error_class, ==, NARWHAL_ERROR_HANDOFF);
	}
	nw_harness_free(h);
}

/* parse_error of a body under status, from the host's preset: the class,
 * with the message in message (NARWHAL_ENGINE_MESSAGE_MAX). */
static narwhal_error_class
error_of(struct nw_harness *h, int status, const char *body, char *message)
{
	struct narwhal_engine_error err = { .struct_size = sizeof err,
	                                    .error_class = NARWHAL_ERROR_PERMANENT };

	g_assert_cmpint(nw_harness_dialect(h)->parse_error(nw_harness_ctx(h), status, body,
	                                                   strlen(body), &err), ==, 0);
	g_strlcpy(message, err.message, NARWHAL_ENGINE_MESSAGE_MAX);
	return err.error_class;
}

/* What a client may read (plugin-abi.h, NARWHAL_ERROR_CLIENT; RULES: never
 * an engine's address, path or internal message): a 400 that refuses one
 * of the router's keys (the bootstrap address and room the dialect added)
 * is the router's failure, not the client's, so permanent; a client
 * error's message keeps its words but not the URLs, addresses and paths in
 * it, and a traceback is dropped whole. */
static void
test_errors_client_message(void)
{
	static const struct {
		const char *body;
		narwhal_error_class cls;
		const char *message;
	} cases[] = {
		{ "{\"object\": \"error\", \"message\": \"bootstrap_port must be null or a port"
		  " number.\", \"type\": \"BadRequestError\", \"param\": \"bootstrap_port\","
		  " \"code\": 400}", NARWHAL_ERROR_PERMANENT, NULL },
		{ "{\"object\": \"error\", \"message\": \"1 validation error: bootstrap_host:"
		  " input_value='10.0.0.7'\", \"code\": 400}", NARWHAL_ERROR_PERMANENT, NULL },
		{ "{\"object\": \"error\", \"message\": \"Cannot reach http://10.0.0.9:30000/x"
		  " or gpu-7.lab:8998 (fd00::17, [fd00::18]:80), see /opt/sglang/srt/server.py\","
		  " \"code\": 400}", NARWHAL_ERROR_CLIENT,
		  "Cannot reach [hidden] or [hidden] ([hidden], [hidden]), see [hidden]" },
		{ "{\"object\": \"error\", \"message\": \"Traceback (most recent call last):\\n"
		  "  File \\\"/opt/sglang/x.py\\\", line 3\\nValueError: bad\", \"code\": 400}",
		  NARWHAL_ERROR_CLIENT, "" },
		{ "{\"object\": \"error\", \"message\": \"'max_tokens' must be at least 1, got -3;"
		  " prompt is a string and/or a list; 1/2 of 3.5 (v0.5.1); text/plain\", \"code\":"
		  " 400}", NARWHAL_ERROR_CLIENT,
		  "'max_tokens' must be at least 1, got -3; prompt is a string and/or a list; 1/2 of"
		  " 3.5 (v0.5.1); text/plain" },
	};
	struct nw_harness *h = sglang_with(NULL);
	char message[NARWHAL_ENGINE_MESSAGE_MAX];

	if (h == NULL)
		return;
	for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
		narwhal_error_class cls = error_of(h, 400, cases[i].body, message);

		if (cls != cases[i].cls)
			g_error("%s: class %d, expected %d", cases[i].body, cls, cases[i].cls);
		if (cases[i].message != NULL)
			g_assert_cmpstr(message, ==, cases[i].message);
	}
	/* A server error's message is not the client's to read: left whole. */
	g_assert_cmpint(error_of(h, 500, "{\"object\": \"error\", \"message\": \"see"
	                         " /opt/sglang/x.py\", \"code\": 500}", message),
	                ==, NARWHAL_ERROR_RETRYABLE);
	g_assert_cmpstr(message, ==, "see /opt/sglang/x.py");
	nw_harness_free(h);
}

/* Reference 4.4: errors in a stream are nested {"error": {...}}; read as
 * an HTTP answer (status 0: in-band) and as an SSE event. */
static void
test_errors_nested(void)
{
	struct nw_harness *h = sglang_with(NULL);
	g_autofree char *ctx = fixture("stream-error-context.json", NULL);
	g_autofree char *busy = fixture("stream-error-busy.json", NULL);
	struct narwhal_sse_event ev = { .struct_size = sizeof ev };

	if (h == NULL)
		return;
	/* One event's payload: the line without its newline. */
	g_strstrip(ctx);
	g_strstrip(busy);
	expect_error(h, 0, "stream-error-context.json", NARWHAL_ERROR_CONTEXT_TOO_LONG,
	             "context length");
	expect_error(h, 0, "stream-error-busy.json", NARWHAL_ERROR_RETRYABLE, "overloaded");
	g_assert_cmpint(nw_harness_dialect(h)->parse_sse(nw_harness_ctx(h), ctx, strlen(ctx), &ev),
	                ==, 0);
	g_assert_cmpint(ev.kind, ==, NARWHAL_SSE_ERROR);
	g_assert_cmpint(ev.error_class, ==, NARWHAL_ERROR_CONTEXT_TOO_LONG);
	g_assert_true(nw_harness_dialect(h)->sniff_sse(nw_harness_ctx(h), busy, strlen(busy)));
	g_assert_cmpint(nw_harness_dialect(h)->parse_sse(nw_harness_ctx(h), busy, strlen(busy), &ev),
	                ==, 0);
	g_assert_cmpint(ev.kind, ==, NARWHAL_SSE_ERROR);
	g_assert_cmpint(ev.error_class, ==, NARWHAL_ERROR_RETRYABLE);
	nw_harness_free(h);
}

/* ----------------------------------------------------------------- SSE --- */

/* Each data payload of a recorded stream, parsed in order: the kinds, the
 * token counts and the usage expected of each. */
struct sse_expect {
	narwhal_sse_kind kind;
	uint32_t tokens;
	int64_t prompt_tokens;
	int64_t completion_tokens;
};

static void
expect_stream(struct nw_harness *h, const char *name, const struct sse_expect *want, guint n)
{
	g_autofree char *text = fixture(name, NULL);
	g_auto(GStrv) lines = g_strsplit(text, "\n", -1);
	guint k = 0;

	for (guint i = 0; lines[i] != NULL; i++) {
		const char *data = lines[i];
		struct narwhal_sse_event ev = {
			.struct_size = sizeof ev, .kind = NARWHAL_SSE_OTHER,
			.prompt_tokens = -1, .completion_tokens = -1,
		};

		if (!g_str_has_prefix(data, "data: "))
			continue;
		data += 6;
		g_assert_cmpuint(k, <, n);
		g_assert_cmpint(nw_harness_dialect(h)->parse_sse(nw_harness_ctx(h), data, strlen(data), &ev), ==, 0);
		if (ev.kind != want[k].kind)
			g_error("%s event %u: kind %d, expected %d", name, k, ev.kind, want[k].kind);
		g_assert_cmpuint(ev.tokens, ==, want[k].tokens);
		g_assert_cmpint(ev.prompt_tokens, ==, want[k].prompt_tokens);
		g_assert_cmpint(ev.completion_tokens, ==, want[k].completion_tokens);
		/* After the first token only these may matter; sniff never
		 * hides one. */
		if (ev.kind == NARWHAL_SSE_DONE || ev.kind == NARWHAL_SSE_ERROR)
			g_assert_true(nw_harness_dialect(h)->sniff_sse(nw_harness_ctx(h), data, strlen(data)));
		k++;
	}
	g_assert_cmpuint(k, ==, n);
}

/* Reference 4.2/4.3 as SGLang streams: the role chunk, reasoning_content,
 * content, the finish chunk, usage with reasoning_tokens, [DONE]. */
static void
test_sse(void)
{
	static const struct sse_expect chat[] = {
		{ NARWHAL_SSE_OTHER, 0, -1, -1 },  { NARWHAL_SSE_TOKENS, 1, -1, -1 },
		{ NARWHAL_SSE_TOKENS, 1, -1, -1 }, { NARWHAL_SSE_OTHER, 0, -1, -1 },
		{ NARWHAL_SSE_USAGE, 0, 21, 9 },   { NARWHAL_SSE_DONE, 0, -1, -1 },
	};
	static const struct sse_expect completions[] = {
		{ NARWHAL_SSE_TOKENS, 1, -1, -1 }, { NARWHAL_SSE_TOKENS, 1, -1, -1 },
		{ NARWHAL_SSE_USAGE, 0, 12, 2 },   { NARWHAL_SSE_DONE, 0, -1, -1 },
	};
	struct nw_harness *h = sglang_with(NULL);
	struct narwhal_sse_event ev = { .struct_size = sizeof ev };

	if (h == NULL)
		return;
	expect_stream(h, "sse-chat.txt", chat, G_N_ELEMENTS(chat));
	expect_stream(h, "sse-completions.txt", completions, G_N_ELEMENTS(completions));
	g_assert_cmpint(nw_harness_dialect(h)->parse_sse(nw_harness_ctx(h), "not json", 8, &ev), ==, -EPROTO);
	nw_harness_free(h);
}

/* plugin-abi.h: sniff_sse never says no to a payload parse_sse reads as an
 * error, even one whose key or flat "object" is spelt with \\u escapes
 * (JSON reads "\\u0065rror" as "error"); a token's non-ASCII escapes do not
 * make it say yes. */
static void
test_sniff_escapes(void)
{
	static const char *const errors[] = {
		"{\"\\u0065rror\":{\"message\":\"x\",\"code\":503}}",
		"{\"err\\u006fr\":\"boom\"}",
		"{\"object\":\"\\u0065rror\",\"message\":\"y\",\"code\":500}",
	};
	static const char token[] = "{\"choices\":[{\"index\":0,\"delta\":{\"content\":"
	                            "\"caf\\u00e9 \\u4e2d\\n\"}}]}";
	struct nw_harness *h = sglang_with(NULL);

	if (h == NULL)
		return;
	for (guint i = 0; i < G_N_ELEMENTS(errors); i++) {
		struct narwhal_sse_event ev = { .struct_size = sizeof ev };

		g_assert_cmpint(nw_harness_dialect(h)->parse_sse(nw_harness_ctx(h), errors[i],
		                                                 strlen(errors[i]), &ev), ==, 0);
		g_assert_cmpint(ev.kind, ==, NARWHAL_SSE_ERROR);
		if (!nw_harness_dialect(h)->sniff_sse(nw_harness_ctx(h), errors[i], strlen(errors[i])))
			g_error("sniff_sse let pass the error %s", errors[i]);
	}
	g_assert_false(nw_harness_dialect(h)->sniff_sse(nw_harness_ctx(h), token, strlen(token)));
	nw_harness_free(h);
}

/* ----------------------------------------------------------- the rules --- */

/* No clock after create, no fleet without an engines object, no
 * estimators, no logs: a pure wire format. */
static void
test_no_host_calls(void)
{
	struct nw_harness *h = sglang_with(NULL);
	json_t *body = NULL;
	struct narwhal_engine_metrics m;
	static const char scrape[] = "sglang:num_running_reqs 1\n";

	if (h == NULL)
		return;
	g_assert_cmpuint(narwhal_mock_host_clock_reads(h->host), ==, 1);
	g_assert_cmpint(build_pair_leg(h, LEG_PREFILL, C, "{\"prompt\": \"x\"}", &body), ==, 0);
	json_decref(body);
	g_assert_cmpint(build_pair_leg(h, LEG_DECODE, C, "{\"prompt\": \"x\"}", &body), ==, 0);
	json_decref(body);
	g_assert_cmpint(build_single(h, LEG_TOKENIZE, C, &eng_p, "{\"prompt\": \"x\"}", &body),
	                ==, 0);
	json_decref(body);
	g_assert_cmpint(metrics(h, scrape, sizeof scrape - 1, &m), ==, 0);
	g_assert_cmpuint(narwhal_mock_host_clock_reads(h->host), ==, 1);
	g_assert_cmpuint(narwhal_mock_host_fleet_reads(h->host), ==, 0);
	for (guint i = 0; i < NARWHAL_MOCK_N_ESTIMATORS; i++)
		g_assert_cmpuint(narwhal_mock_host_estimate_calls(h->host, i), ==, 0);
	g_assert_cmpuint(narwhal_mock_host_n_logs(h->host), ==, 0);
	nw_harness_free(h);
}

/* Instances share nothing: each keeps its own settings. */
static void
test_two_instances(void)
{
	struct nw_harness *a = sglang_with("{\"bootstrap_port\": 7001}");
	struct nw_harness *b = sglang_with("{\"bootstrap_port\": 7002}");
	json_t *body = NULL;

	if (a == NULL || b == NULL) {
		nw_harness_free(a);
		nw_harness_free(b);
		return;
	}
	g_assert_true(nw_harness_ctx(a) != nw_harness_ctx(b));
	g_assert_cmpint(build_pair_leg(a, LEG_PREFILL, C, "{\"prompt\": \"x\"}", &body), ==, 0);
	g_assert_cmpint(json_integer_value(json_object_get(body, "bootstrap_port")), ==, 7001);
	json_decref(body);
	nw_harness_free(a);
	g_assert_cmpint(build_pair_leg(b, LEG_PREFILL, C, "{\"prompt\": \"x\"}", &body), ==, 0);
	g_assert_cmpint(json_integer_value(json_object_get(body, "bootstrap_port")), ==, 7002);
	json_decref(body);
	nw_harness_free(b);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);

	g_test_add_func("/dialect/sglang/descriptor", test_descriptor);
	g_test_add_func("/dialect/sglang/ref-2/capabilities", test_capabilities);
	g_test_add_func("/dialect/sglang/config/good", test_good_configs);
	g_test_add_func("/dialect/sglang/config/errors", test_config_errors);
	g_test_add_func("/dialect/sglang/config/unknown-engine", test_config_unknown_engine);
	g_test_add_func("/dialect/sglang/config/error-text", test_config_error_text);

	g_test_add_func("/dialect/sglang/ref-2/pair-legs", test_pair_legs);
	g_test_add_func("/dialect/sglang/ref-2/bootstrap-address", test_bootstrap_address);
	g_test_add_func("/dialect/sglang/ref-2/rooms", test_rooms);
	g_test_add_func("/dialect/sglang/ref-2/router-keys", test_router_keys);
	g_test_add_func("/dialect/sglang/ref-2/pair-leg-errors", test_pair_leg_errors);
	g_test_add_func("/dialect/sglang/ref-2/pair-one-sequence", test_pair_one_sequence);
	g_test_add_func("/dialect/sglang/ref-2/parse-prefill", test_parse_prefill);
	g_test_add_func("/dialect/sglang/ref-2/aggregate", test_aggregate);

	g_test_add_func("/dialect/sglang/ref-3/tokenize", test_tokenize);
	g_test_add_func("/dialect/sglang/ref-3/tokenize/parse", test_parse_tokenize);
	g_test_add_func("/dialect/sglang/ref-3/tokenize/parse-bounds", test_parse_tokenize_bounds);

	g_test_add_func("/dialect/sglang/ref-5.2/health-models", test_health_models);
	g_test_add_func("/dialect/sglang/ref-5.2/metrics", test_metrics);

	g_test_add_func("/dialect/sglang/ref-4.4/errors/flat", test_errors_flat);
	g_test_add_func("/dialect/sglang/ref-4.4/errors/nested", test_errors_nested);
	g_test_add_func("/dialect/sglang/spec-4.2/errors/client-message",
	                test_errors_client_message);
	g_test_add_func("/dialect/sglang/abi-2.1/errors/transfer", test_errors_transfer);
	g_test_add_func("/dialect/sglang/abi-2.1/errors/prefill-transfer",
	                test_errors_prefill_transfer);
	g_test_add_func("/dialect/sglang/abi-2/errors/unreadable", test_errors_unreadable);
	g_test_add_func("/dialect/sglang/ref-4.2/sse", test_sse);
	g_test_add_func("/dialect/sglang/abi-2/sniff-escapes", test_sniff_escapes);

	g_test_add_func("/dialect/sglang/no-host-calls", test_no_host_calls);
	g_test_add_func("/dialect/sglang/two-instances", test_two_instances);
	return g_test_run();
}
