/*
 * What clients see of a non-streamed answer (issue 9, "What clients see"):
 * assembled from the decode stream, it is field for field the engine's own
 * non-streamed answer for the same request, with tool calls, reasoning
 * content, log-probabilities and usage details; a request with
 * prompt_logprobs gets a non-streamed decode leg; and decode event data
 * that is not valid UTF-8 JSON fails the leg, streamed or not.
 */
#include "build-config.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <curl/curl.h>

#include "integration/test-serve-common.h"

#define PROMPT "Tell me about the narwhal's tusk"

/*
 * Drop what may differ between two answers to the same request: ids,
 * created timestamps and system_fingerprint at the top; and, anywhere, a
 * key that one side has as null or an empty array and the other leaves
 * out (vLLM's non-streamed body spells out "tool_calls":[] and
 * "reasoning_content":null; an assembled body leaves out what no chunk
 * carried).
 */
static void
normalise(json_t *a, json_t *b)
{
	const char *key;
	json_t *v;
	void *tmp;

	if (json_is_array(a) && json_is_array(b) && json_array_size(a) == json_array_size(b)) {
		for (size_t i = 0; i < json_array_size(a); i++)
			normalise(json_array_get(a, i), json_array_get(b, i));
		return;
	}
	if (!json_is_object(a) || !json_is_object(b))
		return;
	for (int side = 0; side < 2; side++) {
		json_t *x = side ? b : a, *y = side ? a : b;

		json_object_foreach_safe(x, tmp, key, v) {
			bool empty = json_is_null(v) || (json_is_array(v) && json_array_size(v) == 0);

			if (empty && json_object_get(y, key) == NULL)
				json_object_del(x, key);
		}
	}
	json_object_foreach(a, key, v)
		normalise(v, json_object_get(b, key));
}

static void
assert_same_answer(json_t *want, json_t *got)
{
	static const char *const volatile_keys[] = { "id", "created", "system_fingerprint" };

	for (size_t i = 0; i < G_N_ELEMENTS(volatile_keys); i++) {
		json_object_del(want, volatile_keys[i]);
		json_object_del(got, volatile_keys[i]);
	}
	normalise(want, got);
	if (!json_equal(want, got)) {
		g_autofree char *w = json_dumps(want, JSON_COMPACT | JSON_SORT_KEYS);
		g_autofree char *g = json_dumps(got, JSON_COMPACT | JSON_SORT_KEYS);

		g_test_message("engine:    %s", w);
		g_test_message("assembled: %s", g);
		g_test_fail();
	}
}

struct same_case {
	const char *name;
	const char *summary;
	bool chat;
	const char *roles;     /* "pd" or NULL: one aggregate engine */
	const char *fields;    /* extra request fields, JSON members */
	const char *must;      /* a path that must be non-null in the answer */
};

/* The value at a dotted path, "choices.0.message.tool_calls" (borrowed). */
static json_t *
at_path(json_t *doc, const char *path)
{
	g_auto(GStrv) parts = g_strsplit(path, ".", -1);

	for (char **p = parts; *p && doc; p++)
		doc = json_is_array(doc) ? json_array_get(doc, strtoul(*p, NULL, 10))
		                         : json_object_get(doc, *p);
	return doc;
}

static void
test_same_answer(gconstpointer data)
{
	const struct same_case *c = data;
	const char *const args[] = { "--engines", c->roles ? "2" : "1", "--time-scale", "50",
	                             "--enable-prompt-tokens-details", NULL };
	const char *path = c->chat ? "/v1/chat/completions" : "/v1/completions";
	struct serve_env e;
	struct sim_reply direct, routed;
	g_autofree char *body = NULL;
	json_t *want, *got;

	g_test_summary(c->summary);
	if (!serve_start(&e, args, c->roles, c->roles ? NULL :
	                 "{\"controller\":{\"min_prefill\":1,\"min_decode\":1}}"))
		return;
	if (c->chat)
		body = g_strdup_printf("{\"model\":\"%s\",\"messages\":[{\"role\":\"user\",\"content\":"
		                       "\"" PROMPT "\"}],\"max_tokens\":7%s%s}", e.model,
		                       c->fields ? "," : "", c->fields ? c->fields : "");
	else
		body = g_strdup_printf("{\"model\":\"%s\",\"prompt\":\"" PROMPT "\",\"max_tokens\":7"
		                       "%s%s}", e.model, c->fields ? "," : "",
		                       c->fields ? c->fields : "");
	sim_http(e.sim.ports[c->roles ? 1 : 0], "POST", path, body, NULL, 10000, &direct);
	g_assert_cmpint(direct.status, ==, 200);
	serve_post(&e, path, body, NULL, 10000, &routed);
	g_assert_cmpint(routed.status, ==, 200);
	want = sim_json(direct.body->str);
	got = sim_json(routed.body->str);
	/* The feature under test is really there, not equal by absence. */
	g_assert_nonnull(at_path(got, c->must));
	g_assert_false(json_is_null(at_path(got, c->must)));
	/* usage details are assembled too */
	g_assert_true(json_is_integer(at_path(got, "usage.prompt_tokens_details.cached_tokens")));
	assert_same_answer(want, got);
	json_decref(want);
	json_decref(got);
	sim_reply_clear(&direct);
	sim_reply_clear(&routed);
	g_assert_cmpint(serve_counter(&e, "requests_ok"), ==, 1);
	serve_clear(&e);
}

#define TOOLS "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"find_pod\"}}," \
	"{\"type\":\"function\",\"function\":{\"name\":\"measure_tusk\"}}," \
	"{\"type\":\"function\",\"function\":{\"name\":\"dive\"}}]"

static const struct same_case same_cases[] = {
	{ "completions-logprobs",
	  "/serve/issue-9/assembled-completions-logprobs: a non-streamed completion with logprobs "
	  "assembled from a disaggregated decode stream equals the engine's own body: logprobs "
	  "arrays concatenated, text_offset continuous",
	  false, "pd", "\"logprobs\":3", "choices.0.logprobs.text_offset" },
	{ "chat-plain",
	  "/serve/issue-9/assembled-chat: a non-streamed chat answer without tools equals the "
	  "engine's own body",
	  true, NULL, NULL, "choices.0.message.content" },
	{ "chat-one-tool-call",
	  "/serve/issue-9/assembled-chat-tool-call: a named tool_choice's call, streamed as "
	  "deltas, is assembled into the engine's own tool_calls (id, type, name, arguments), "
	  "content null and finish_reason tool_calls",
	  true, "pd", TOOLS ",\"tool_choice\":{\"type\":\"function\",\"function\":"
	  "{\"name\":\"measure_tusk\"}}", "choices.0.message.tool_calls.0.function.arguments" },
	{ "chat-several-tool-calls",
	  "/serve/issue-9/assembled-chat-tool-calls: several tool calls, merged by their index, "
	  "equal the engine's own list",
	  true, NULL, TOOLS ",\"tool_choice\":\"required\"",
	  "choices.0.message.tool_calls.2.function.name" },
	{ "chat-reasoning",
	  "/serve/issue-9/assembled-chat-reasoning: reasoning_content deltas are concatenated "
	  "into the engine's own reasoning_content",
	  true, NULL, "\"chat_template_kwargs\":{\"enable_thinking\":true}",
	  "choices.0.message.reasoning_content" },
	{ "chat-logprobs",
	  "/serve/issue-9/assembled-chat-logprobs: chat logprobs.content entries (with "
	  "top_logprobs) are concatenated into the engine's own list",
	  true, "pd", "\"logprobs\":true,\"top_logprobs\":2", "choices.0.logprobs.content.6" },
	{ "completions-prompt-logprobs",
	  "/serve/issue-9/prompt-logprobs-leg: a non-streamed completion with prompt_logprobs, "
	  "which engines refuse on a stream, gets a non-streamed decode leg and the engine's "
	  "prompt_logprobs",
	  false, "pd", "\"prompt_logprobs\":2,\"logprobs\":1", "choices.0.prompt_logprobs.1" },
	{ "chat-prompt-logprobs",
	  "/serve/issue-9/prompt-logprobs-leg-chat: a non-streamed chat request with "
	  "prompt_logprobs gets a non-streamed leg and the engine's top-level prompt_logprobs",
	  true, NULL, "\"prompt_logprobs\":1", "prompt_logprobs.1" },
};

/* --- a fake engine that sends bad event data ------------------------- */

/* One engine on loopback: a completion answers a stream of a good token
 * event, then an event chosen by the prompt ("utf8": the same shape with
 * invalid UTF-8 in its text; "json": an event cut in the middle), then
 * another token and [DONE]. It answers the model probe too. */
struct fake_engine {
	struct serve_fake_engine srv;
	gint completions;
};

#define FAKE_EVENT(text) "data: {\"id\":\"cmpl-fake\",\"object\":\"text_completion\"," \
	"\"created\":1,\"model\":\"opt-13b-a100\",\"choices\":[{\"index\":0,\"text\":\"" text \
	"\",\"logprobs\":null,\"finish_reason\":null,\"stop_reason\":null}]}\n\n"

static void
fake_connection(int fd, gpointer data)
{
	struct fake_engine *f = data;
	GString *in = g_string_new(NULL);

	for (;;) {
		size_t len = serve_fake_read_request(fd, in);
		int control;
		const char *bad;

		if (len == 0)
			break;
		control = serve_fake_answer_control(fd, in->str, FALSE);
		if (control == 0)
			break;
		if (control > 0) {
			/* the monitor's call: answered */
		} else if (g_str_has_prefix(in->str, "POST /v1/completions")) {
			g_atomic_int_inc(&f->completions);
			bad = strstr(in->str, "\"utf8\"") ? FAKE_EVENT("\xff\xfe tusk")
			      : "data: {\"id\":\"cmpl-fake\",\"object\":\"text_com\n\n";
			/* Close after it: the answer is read to its end. */
			if (!serve_send_all(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
			              "Connection: close\r\n\r\n") ||
			    !serve_send_all(fd, FAKE_EVENT(" whale")) || !serve_send_all(fd, bad) ||
			    !serve_send_all(fd, FAKE_EVENT(" pod")) || !serve_send_all(fd, "data: [DONE]\n\n"))
				break;
			break;
		} else if (!serve_send_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")) {
			break;
		}
		g_string_erase(in, 0, (gssize)len);
	}
	close(fd);
	g_string_free(in, TRUE);
}

static void
fake_engine_start(struct fake_engine *f)
{
	memset(f, 0, sizeof *f);
	serve_fake_engine_start(&f->srv, fake_connection, f);
}

static void
test_bad_event_data(void)
{
	const char *const args[] = { "--engines", "1", NULL };
	struct serve_env e;
	struct fake_engine f;
	struct sim_reply r;
	g_autofree char *config = NULL;
	static const char *const kinds[] = { "utf8", "json" };

	g_test_summary("/serve/issue-9/bad-event-data: a decode event that is not valid UTF-8 "
	               "JSON, after a first token (where the relay parses least), fails the leg: "
	               "a streamed client gets an error event and no [DONE], a non-streamed one "
	               "502 engine_bad_response; neither sees the bad bytes or later tokens");
	if (!serve_start(&e, args, NULL, NULL))
		return;
	fake_engine_start(&f);
	g_assert_cmpint(serve_stop_daemon(&e, SIGTERM, 10000), ==, 0);
	/* Passive detection off (docs/recovery.md): every request here fails
	 * on the one engine by design, and must meet it. */
	config = g_strdup_printf("{\"engine\":{\"tokenize\":false},"
	                         "\"recovery\":{\"passive_failures\":0},"
	                         "\"controller\":{\"min_prefill\":1,\"min_decode\":1},"
	                         "\"fleet\":{\"model\":\"opt-13b-a100\",\"engines\":[{\"id\":\"fake\","
	                         "\"url\":\"http://127.0.0.1:%u\",\"role\":\"prefill\"}]}}", f.srv.port);
	g_assert_true(serve_start_daemon(&e, config, NULL));
	for (size_t i = 0; i < G_N_ELEMENTS(kinds); i++) {
		g_autofree char *stream = g_strdup_printf("{\"model\":\"opt-13b-a100\",\"prompt\":"
		                                          "\"%s\",\"max_tokens\":3,\"stream\":true}",
		                                          kinds[i]);
		g_autofree char *plain = g_strdup_printf("{\"model\":\"opt-13b-a100\",\"prompt\":"
		                                         "\"%s\",\"max_tokens\":3}", kinds[i]);

		serve_post(&e, "/v1/completions", stream, NULL, 10000, &r);
		g_assert_cmpint(r.status, ==, 200);
		g_assert_nonnull(strstr(r.body->str, "\" whale\""));
		g_assert_nonnull(strstr(r.body->str, "engine_bad_response"));
		g_assert_null(strstr(r.body->str, "[DONE]"));
		g_assert_null(strstr(r.body->str, "\" pod\""));
		g_assert_null(strstr(r.body->str, "text_com\n"));
		g_assert_true(g_utf8_validate(r.body->str, (gssize)r.body->len, NULL));
		sim_reply_clear(&r);

		serve_post(&e, "/v1/completions", plain, NULL, 10000, &r);
		serve_assert_error(&r, 502, "engine_bad_response");
		sim_reply_clear(&r);
	}
	g_assert_cmpint(serve_counter(&e, "requests_ok"), ==, 0);
	serve_clear(&e);
	serve_fake_engine_stop(&f.srv);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	for (size_t i = 0; i < G_N_ELEMENTS(same_cases); i++) {
		g_autofree char *name = g_strdup_printf("/serve/issue-9/assembled/%s",
		                                        same_cases[i].name);

		g_test_add_data_func(name, &same_cases[i], test_same_answer);
	}
	g_test_add_func("/serve/issue-9/bad-event-data", test_bad_event_data);
	return g_test_run();
}
