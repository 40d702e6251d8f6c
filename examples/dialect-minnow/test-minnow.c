/* The minnow dialect against Narwhal's plugin test kit: the plugin's
 * source is linked in and driven through its descriptor, on the kit's mock
 * host, with answers recorded from a Minnow server (answers/, README.md). */
#include <narwhal/plugin-test.h>

#include <errno.h>
#include <string.h>

struct scene {
	struct narwhal_mock_host *mh;
	const struct narwhal_dialect_ops *ops;
	void *inst;
};

static const struct narwhal_engine_ref engine = {
	.struct_size = sizeof engine, .index = 0, .id = "m0", .url = "http://127.0.0.1:9",
};

/* An instance with the configuration of the test data (NULL: none). */
static void
scene_setup(struct scene *s, gconstpointer config_json)
{
	const struct narwhal_plugin_descriptor *d = narwhal_plugin_entry();
	json_t *config = config_json != NULL ? json_loads(config_json, 0, NULL) : NULL;
	char err[NARWHAL_ERROR_MAX] = "";

	g_assert_cmpuint(d->kind, ==, NARWHAL_KIND_DIALECT);
	g_assert_cmpstr(d->name, ==, "minnow");
	s->ops = d->ops;
	s->mh = narwhal_mock_host_new();
	if (s->ops->create(narwhal_mock_host_table(s->mh), config, &s->inst, err, sizeof err) != 0)
		g_error("create refused %s: %s", (const char *)config_json, err);
	json_decref(config); /* borrowed: the plugin must not keep it */
}

static void
scene_teardown(struct scene *s, gconstpointer unused)
{
	(void)unused;
	s->ops->destroy(s->inst);
	/* A dialect reads no clock and logs nothing here. */
	g_assert_cmpuint(narwhal_mock_host_clock_reads(s->mh), ==, 0);
	g_assert_cmpuint(narwhal_mock_host_n_logs(s->mh), ==, 0);
	narwhal_mock_host_free(s->mh);
}

/* A recorded answer, from answers/ beside this file (G_TEST_SRCDIR). */
static char *
answer(const char *name, size_t *len)
{
	g_autofree char *path = g_test_build_filename(G_TEST_DIST, "answers", name, NULL);
	GError *error = NULL;
	char *text = NULL;
	gsize n = 0;

	if (!g_file_get_contents(path, &text, &n, &error))
		g_error("%s", error->message);
	if (len != NULL)
		*len = n;
	return text;
}

static json_t *
answer_json(const char *name)
{
	g_autofree char *text = answer(name, NULL);
	json_t *doc = json_loads(text, 0, NULL);

	g_assert_nonnull(doc);
	return doc;
}

/* A call built for the client body with its target. */
static int
build(struct scene *s, narwhal_route route, const char *client_json,
      int (*builder)(void *, const struct narwhal_dialect_target *, struct narwhal_http_call *),
      struct narwhal_http_call *out)
{
	json_t *body = json_loads(client_json, 0, NULL);
	struct narwhal_dialect_target t = { .struct_size = sizeof t, .request = 1,
		                            .request_id = "t", .route = route,
		                            .client_body = body, .engine = &engine };
	int rc;

	*out = (struct narwhal_http_call){ .struct_size = sizeof *out };
	rc = builder(s->inst, &t, out);
	json_decref(body);
	return rc;
}

/* Minnow has no handoff: aggregate-only, whole requests sent as they came. */
static void
test_aggregate(struct scene *s, gconstpointer unused)
{
	struct narwhal_http_call c;

	(void)unused;
	g_assert_cmpuint(s->ops->capabilities(s->inst, &engine), ==, 0);
	g_assert_cmpint(build(s, NARWHAL_ROUTE_COMPLETIONS, "{\"prompt\": \"hi\"}",
	                      s->ops->build_aggregate, &c), ==, 0);
	g_assert_cmpstr(c.method, ==, "POST");
	g_assert_cmpstr(c.path, ==, "/v1/completions");
	g_assert_cmpuint(c.flags, ==, NARWHAL_CALL_CLIENT_BODY);
	g_assert_null(c.body);
	g_assert_cmpint(build(s, NARWHAL_ROUTE_CHAT_COMPLETIONS, "{\"messages\": []}",
	                      s->ops->build_aggregate, &c), ==, 0);
	g_assert_cmpstr(c.path, ==, "/v1/chat/completions");
}

/* POST /count for a text prompt; the other prompts need no call or cannot
 * be counted by Minnow. */
static void
test_count(struct scene *s, gconstpointer unused)
{
	struct narwhal_http_call c;
	json_t *recorded = answer_json("count.json"), *bad = json_pack("{s:s}", "n", "7");
	g_autofree char *sent = NULL;
	uint64_t n = 0;

	(void)unused;
	g_assert_cmpint(build(s, NARWHAL_ROUTE_COMPLETIONS,
	                      "{\"model\": \"minnow-7b\", \"prompt\": \"The capital of France is\"}",
	                      s->ops->build_tokenize, &c), ==, 0);
	g_assert_cmpstr(c.method, ==, "POST");
	g_assert_cmpstr(c.path, ==, "/count");
	sent = json_dumps(c.body, JSON_COMPACT);
	g_assert_cmpstr(sent, ==, "{\"text\":\"The capital of France is\"}");
	json_decref(c.body);
	g_assert_cmpint(build(s, NARWHAL_ROUTE_COMPLETIONS, "{\"prompt\": [791, 6864]}",
	                      s->ops->build_tokenize, &c), ==, -EALREADY);
	g_assert_cmpint(build(s, NARWHAL_ROUTE_COMPLETIONS, "{\"prompt\": [\"a\", \"b\"]}",
	                      s->ops->build_tokenize, &c), ==, -ENOTSUP);
	g_assert_cmpint(build(s, NARWHAL_ROUTE_CHAT_COMPLETIONS, "{\"messages\": []}",
	                      s->ops->build_tokenize, &c), ==, -ENOTSUP);

	g_assert_cmpint(s->ops->parse_tokenize(s->inst, recorded, &n), ==, 0);
	g_assert_cmpuint(n, ==, 7);
	g_assert_cmpint(s->ops->parse_tokenize(s->inst, bad, &n), ==, -EPROTO);
	json_decref(recorded);
	json_decref(bad);
}

/* With {"count": false} every request is sized by characters. */
static void
test_no_count(struct scene *s, gconstpointer unused)
{
	struct narwhal_http_call c;

	(void)unused;
	g_assert_cmpint(build(s, NARWHAL_ROUTE_COMPLETIONS, "{\"prompt\": \"hi\"}",
	                      s->ops->build_tokenize, &c), ==, -ENOTSUP);
}

/* The data payloads of a recorded stream, in order. */
static GPtrArray *
payloads(const char *name)
{
	g_autofree char *text = answer(name, NULL);
	g_auto(GStrv) lines = g_strsplit(text, "\n", -1);
	GPtrArray *out = g_ptr_array_new_with_free_func(g_free);

	for (guint i = 0; lines[i] != NULL; i++)
		if (g_str_has_prefix(lines[i], "data: "))
			g_ptr_array_add(out, g_strdup(lines[i] + 6));
	return out;
}

static struct narwhal_sse_event
event(struct scene *s, const char *data)
{
	struct narwhal_sse_event ev = { .struct_size = sizeof ev, .kind = NARWHAL_SSE_OTHER,
		                        .prompt_tokens = -1, .completion_tokens = -1 };

	g_assert_cmpint(s->ops->parse_sse(s->inst, data, strlen(data), &ev), ==, 0);
	return ev;
}

/* A whole recorded stream: the role chunk, two tokens, usage, [DONE]. */
static void
test_stream(struct scene *s, gconstpointer unused)
{
	static const narwhal_sse_kind kinds[] = { NARWHAL_SSE_OTHER, NARWHAL_SSE_TOKENS,
		                                  NARWHAL_SSE_TOKENS, NARWHAL_SSE_USAGE,
		                                  NARWHAL_SSE_DONE };
	g_autoptr(GPtrArray) data = payloads("stream.sse");
	struct narwhal_sse_event ev;

	(void)unused;
	g_assert_cmpuint(data->len, ==, G_N_ELEMENTS(kinds));
	for (guint i = 0; i < data->len; i++)
		g_assert_cmpuint(event(s, data->pdata[i]).kind, ==, kinds[i]);
	ev = event(s, data->pdata[3]);
	g_assert_cmpint(ev.prompt_tokens, ==, 7);
	g_assert_cmpint(ev.completion_tokens, ==, 2);
	/* After the first token only the terminator needs a parse. */
	g_assert_false(s->ops->sniff_sse(s->inst, data->pdata[2], strlen(data->pdata[2])));
	g_assert_true(s->ops->sniff_sse(s->inst, data->pdata[4], strlen(data->pdata[4])));
	g_assert_cmpint(s->ops->parse_sse(s->inst, "<html>", 6, &ev), ==, -EPROTO);
}

/* A fault in the middle of a stream is an error event, and sniffed. */
static void
test_stream_fault(struct scene *s, gconstpointer unused)
{
	g_autoptr(GPtrArray) data = payloads("stream-fault.sse");
	struct narwhal_sse_event ev;

	(void)unused;
	g_assert_cmpuint(data->len, ==, 2);
	g_assert_cmpuint(event(s, data->pdata[0]).kind, ==, NARWHAL_SSE_TOKENS);
	ev = event(s, data->pdata[1]);
	g_assert_cmpuint(ev.kind, ==, NARWHAL_SSE_ERROR);
	g_assert_cmpuint(ev.error_class, ==, NARWHAL_ERROR_RETRYABLE);
	g_assert_true(s->ops->sniff_sse(s->inst, data->pdata[1], strlen(data->pdata[1])));
}

/* Each recorded fault, with the status Minnow sends it with, gets the class
 * spec 4.2 asks for; an answer that is not Minnow's keeps the host's. */
static void
test_faults(struct scene *s, gconstpointer unused)
{
	static const struct {
		const char *file;
		int32_t status;
		narwhal_error_class class;
		const char *message, *param;
	} cases[] = {
		{ "fault-busy.json", 503, NARWHAL_ERROR_RETRYABLE, "queue full (64 waiting)", "" },
		{ "fault-too-long.json", 400, NARWHAL_ERROR_CONTEXT_TOO_LONG,
		  "9000 tokens do not fit the context of 8192", "prompt" },
		{ "fault-bad-request.json", 400, NARWHAL_ERROR_CLIENT,
		  "max_tokens must be at least 1", "max_tokens" },
	};
	struct narwhal_engine_error e;

	(void)unused;
	for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
		size_t len;
		g_autofree char *body = answer(cases[i].file, &len);

		e = (struct narwhal_engine_error){ .struct_size = sizeof e,
			                           .error_class = NARWHAL_ERROR_PERMANENT };
		g_assert_cmpint(s->ops->parse_error(s->inst, cases[i].status, body, len, &e), ==, 0);
		g_assert_cmpuint(e.error_class, ==, cases[i].class);
		g_assert_cmpstr(e.message, ==, cases[i].message);
		g_assert_cmpstr(e.param, ==, cases[i].param);
	}
	/* A proxy's page in front of the engine: the status decides. */
	e = (struct narwhal_engine_error){ .struct_size = sizeof e,
		                           .error_class = NARWHAL_ERROR_RETRYABLE };
	g_assert_cmpint(s->ops->parse_error(s->inst, 502, "<html>bad gateway</html>", 24, &e), ==,
	                -EPROTO);
	g_assert_cmpuint(e.error_class, ==, NARWHAL_ERROR_RETRYABLE);
}

/* GET /info names the model and its context; GET /stats is the load. */
static void
test_info_and_stats(struct scene *s, gconstpointer unused)
{
	json_t *info = answer_json("info.json");
	struct narwhal_model_info m = { .struct_size = sizeof m, .max_model_len = -1 };
	struct narwhal_engine_metrics load = { .struct_size = sizeof load, .running = -1,
		                               .waiting = -1, .kv_usage = -1,
		                               .start_time_s = -1 };
	struct narwhal_http_call c = { .struct_size = sizeof c };
	size_t len;
	g_autofree char *stats = answer("stats.json", &len);

	(void)unused;
	g_assert_cmpint(s->ops->build_models(s->inst, &engine, &c), ==, 0);
	g_assert_cmpstr(c.path, ==, "/info");
	g_assert_cmpint(s->ops->parse_models(s->inst, info, &m), ==, 0);
	g_assert_cmpstr(m.name, ==, "minnow-7b");
	g_assert_cmpint(m.max_model_len, ==, 8192);

	g_assert_cmpint(s->ops->build_metrics(s->inst, &engine, &c), ==, 0);
	g_assert_cmpstr(c.path, ==, "/stats");
	g_assert_cmpint(s->ops->parse_metrics(s->inst, stats, len, &load), ==, 0);
	g_assert_cmpint(load.running, ==, 3);
	g_assert_cmpint(load.waiting, ==, 2);
	g_assert_cmpfloat(load.kv_usage, ==, 0.41);
	g_assert_cmpfloat(load.start_time_s, ==, 1764650000.5);
	g_assert_cmpint(s->ops->parse_metrics(s->inst, "# TYPE x gauge\n", 15, &load), ==, -EPROTO);

	g_assert_cmpint(s->ops->build_health(s->inst, &engine, &c), ==, 0);
	g_assert_cmpstr(c.method, ==, "GET");
	g_assert_cmpstr(c.path, ==, "/ping");
	json_decref(info);
}

/* Bad settings are refused with a reason that names them. */
static void
test_bad_config(void)
{
	static const char *const bad[][2] = {
		{ "{\"tokenize\": true}", "\"tokenize\"" },
		{ "{\"count\": 1}", "count" },
		{ "[true]", "object" },
	};
	struct narwhal_mock_host *mh = narwhal_mock_host_new();
	const struct narwhal_dialect_ops *ops = narwhal_plugin_entry()->ops;

	for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
		json_t *config = json_loads(bad[i][0], JSON_DECODE_ANY, NULL);
		char err[NARWHAL_ERROR_MAX] = "";
		void *inst = NULL;

		g_assert_cmpint(ops->create(narwhal_mock_host_table(mh), config, &inst, err,
		                            sizeof err), ==, -EINVAL);
		g_assert_nonnull(strstr(err, bad[i][1]));
		json_decref(config);
	}
	narwhal_mock_host_free(mh);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
#define SCENE(path, config, fn) \
	g_test_add(path, struct scene, config, scene_setup, fn, scene_teardown)
	SCENE("/minnow/aggregate", NULL, test_aggregate);
	SCENE("/minnow/count", NULL, test_count);
	SCENE("/minnow/no-count", "{\"count\": false}", test_no_count);
	SCENE("/minnow/stream", NULL, test_stream);
	SCENE("/minnow/stream-fault", NULL, test_stream_fault);
	SCENE("/minnow/faults", NULL, test_faults);
	SCENE("/minnow/info-and-stats", NULL, test_info_and_stats);
	g_test_add_func("/minnow/bad-config", test_bad_config);
	return g_test_run();
}
