/*
 * Spec 4.3, non-streaming answers: Narwhal streams from the engine even
 * when the client asked for stream:false, and the answer is assembled from
 * the engine's SSE chunks (src/serve/assemble.c). Chunks are written the
 * way vLLM sends them; whole bodies are compared.
 */
#include "build-config.h"

#include <stdlib.h>
#include <string.h>

#include <glib.h>

#include "serve/assemble.h"

/* Feed chunks (NULL-terminated JSON texts) into a. */
static void
feed(struct nw_assembly *a, const char *const *chunks)
{
	for (; *chunks; chunks++) {
		json_error_t err;
		json_t *c = json_loads(*chunks, 0, &err);

		if (!c)
			g_error("bad test chunk: %s: %s", err.text, *chunks);
		g_assert_cmpint(nw_assembly_add(a, c), ==, 0);
		json_decref(c);
	}
}

/* The body as written, parsed back (new reference). Writing it again
 * gives the same bytes, and those are jansson's compact encoding of the
 * same tree in the same key order. */
static json_t *
finish(const struct nw_assembly *a)
{
	GString *text = g_string_new(NULL);
	GString *again = g_string_new(NULL);
	json_error_t err;
	json_t *body;
	char *encoded;

	nw_assembly_write(a, text);
	nw_assembly_write(a, again);
	g_assert_cmpstr(text->str, ==, again->str);
	body = json_loadb(text->str, text->len, 0, &err);
	if (body == NULL)
		g_error("the written body is not JSON: %s: %s", err.text, text->str);
	encoded = json_dumps(body, JSON_COMPACT);
	g_assert_cmpstr(text->str, ==, encoded);
	free(encoded);
	g_string_free(text, TRUE);
	g_string_free(again, TRUE);
	return body;
}

static void
assert_body(const json_t *got, const char *want_text)
{
	json_error_t err;
	json_t *want = json_loads(want_text, 0, &err);

	if (!want)
		g_error("bad expected body: %s: %s", err.text, want_text);
	if (!json_equal(got, want)) {
		char *g = json_dumps(got, JSON_SORT_KEYS);
		char *w = json_dumps(want, JSON_SORT_KEYS);

		g_test_message("got:  %s", g);
		g_test_message("want: %s", w);
		free(g);
		free(w);
		g_test_fail();
	}
	json_decref(want);
}

/* Assemble chunks for route and compare with want. */
static void
check(narwhal_route route, const char *const *chunks, const char *want)
{
	struct nw_assembly *a = nw_assembly_new(route);
	json_t *body;
	guint n = 0;

	while (chunks[n])
		n++;
	feed(a, chunks);
	g_assert_cmpuint(nw_assembly_chunks(a), ==, n);
	body = finish(a);
	assert_body(body, want);
	json_decref(body);
	nw_assembly_free(a);
}

#define CMPL_HEAD "\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1700000000,\"model\":\"m\""
#define CHAT_HEAD "\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"m\""
#define CHAT_OUT "\"id\":\"chatcmpl-1\",\"object\":\"chat.completion\",\"created\":1700000000,\"model\":\"m\""
#define CMPL_TOK(text, fin) \
	"{" CMPL_HEAD ",\"choices\":[{\"index\":0,\"text\":\"" text "\",\"logprobs\":null," \
	"\"finish_reason\":" fin ",\"stop_reason\":null}]}"
#define CHAT_DELTA(idx, delta, fin) \
	"{" CHAT_HEAD ",\"choices\":[{\"index\":" #idx ",\"delta\":" delta ",\"logprobs\":null," \
	"\"finish_reason\":" fin "}]}"

static void
test_completions_text(void)
{
	const char *const chunks[] = {
		CMPL_TOK("Hello", "null"),
		CMPL_TOK(",", "null"),
		CMPL_TOK(" world", "\"length\""),
		"{" CMPL_HEAD ",\"choices\":[],\"usage\":{\"prompt_tokens\":17,"
		"\"total_tokens\":20,\"completion_tokens\":3}}",
		NULL
	};

	g_test_summary("/serve/assemble/completions-text: a non-streamed completions answer is "
	               "assembled from the engine's stream: text concatenated, the last "
	               "finish_reason and the usage chunk kept");
	check(NARWHAL_ROUTE_COMPLETIONS, chunks,
	      "{" CMPL_HEAD ",\"choices\":[{\"index\":0,\"text\":\"Hello, world\","
	      "\"logprobs\":null,\"finish_reason\":\"length\",\"stop_reason\":null}],"
	      "\"usage\":{\"prompt_tokens\":17,\"total_tokens\":20,\"completion_tokens\":3}}");
}

static void
test_usage_null(void)
{
	const char *const without[] = {
		"{" CMPL_HEAD ",\"choices\":[{\"index\":0,\"text\":\"a\"}],\"usage\":null}",
		"{" CMPL_HEAD ",\"choices\":[{\"index\":0,\"text\":\"b\",\"finish_reason\":\"stop\"}],"
		"\"usage\":null}",
		NULL
	};
	const char *const with[] = {
		"{" CMPL_HEAD ",\"choices\":[{\"index\":0,\"text\":\"a\"}],\"usage\":null}",
		"{" CMPL_HEAD ",\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"total_tokens\":2,"
		"\"completion_tokens\":1}}",
		"{" CMPL_HEAD ",\"choices\":[],\"usage\":null}",
		NULL
	};

	g_test_summary("/serve/assemble/usage-null: usage:null never replaces a usage object, "
	               "and the non-streamed answer has no usage when the stream had none");
	check(NARWHAL_ROUTE_COMPLETIONS, without,
	      "{" CMPL_HEAD ",\"choices\":[{\"index\":0,\"text\":\"ab\",\"logprobs\":null,"
	      "\"finish_reason\":\"stop\"}]}");
	check(NARWHAL_ROUTE_COMPLETIONS, with,
	      "{" CMPL_HEAD ",\"choices\":[{\"index\":0,\"text\":\"a\",\"logprobs\":null,"
	      "\"finish_reason\":null}],"
	      "\"usage\":{\"prompt_tokens\":1,\"total_tokens\":2,\"completion_tokens\":1}}");
}

static void
test_completions_logprobs(void)
{
	const char *const chunks[] = {
		"{" CMPL_HEAD ",\"choices\":[{\"index\":0,\"text\":\" a\",\"logprobs\":"
		"{\"tokens\":[\" a\"],\"token_logprobs\":[-0.5],\"top_logprobs\":[{\" a\":-0.5}],"
		"\"text_offset\":[5]},\"finish_reason\":null}]}",
		"{" CMPL_HEAD ",\"choices\":[{\"index\":0,\"text\":\"\",\"logprobs\":null,"
		"\"finish_reason\":null}]}",
		"{" CMPL_HEAD ",\"choices\":[{\"index\":0,\"text\":\" b\",\"logprobs\":"
		"{\"tokens\":[\" b\"],\"token_logprobs\":[-1.25],\"top_logprobs\":[{\" b\":-1.25}],"
		"\"text_offset\":[7]},\"finish_reason\":\"length\"}]}",
		NULL
	};

	g_test_summary("/serve/assemble/completions-logprobs: the logprobs arrays of every "
	               "chunk are concatenated key by key; a null logprobs changes nothing");
	check(NARWHAL_ROUTE_COMPLETIONS, chunks,
	      "{" CMPL_HEAD ",\"choices\":[{\"index\":0,\"text\":\" a b\",\"logprobs\":"
	      "{\"tokens\":[\" a\",\" b\"],\"token_logprobs\":[-0.5,-1.25],"
	      "\"top_logprobs\":[{\" a\":-0.5},{\" b\":-1.25}],\"text_offset\":[5,7]},"
	      "\"finish_reason\":\"length\"}]}");
}

static void
test_chat_content(void)
{
	const char *const text[] = {
		CHAT_DELTA(0, "{\"role\":\"assistant\",\"content\":\"\"}", "null"),
		CHAT_DELTA(0, "{\"role\":\"assistant\",\"content\":\"Hi\"}", "null"),
		CHAT_DELTA(0, "{\"content\":\" there\"}", "null"),
		CHAT_DELTA(0, "{}", "\"stop\""),
		NULL
	};
	const char *const calls_only[] = {
		CHAT_DELTA(0, "{\"role\":\"assistant\",\"content\":\"\"}", "null"),
		CHAT_DELTA(0, "{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\","
		           "\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}", "\"tool_calls\""),
		NULL
	};
	const char *const no_content[] = {
		CHAT_DELTA(0, "{\"role\":\"assistant\"}", "null"),
		CHAT_DELTA(0, "{}", "\"length\""),
		NULL
	};

	g_test_summary("/serve/assemble/chat-content: a non-streamed chat answer is assembled "
	               "from the engine's stream: role from the first delta (a repeated role "
	               "replaces it), content concatenated, and content null when only tool calls came");
	check(NARWHAL_ROUTE_CHAT_COMPLETIONS, text,
	      "{" CHAT_OUT ",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\","
	      "\"content\":\"Hi there\"},\"logprobs\":null,\"finish_reason\":\"stop\"}]}");
	check(NARWHAL_ROUTE_CHAT_COMPLETIONS, calls_only,
	      "{" CHAT_OUT ",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\","
	      "\"content\":null,\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\","
	      "\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},\"logprobs\":null,"
	      "\"finish_reason\":\"tool_calls\"}]}");
	check(NARWHAL_ROUTE_CHAT_COMPLETIONS, no_content,
	      "{" CHAT_OUT ",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\","
	      "\"content\":null},\"logprobs\":null,\"finish_reason\":\"length\"}]}");
}

static void
test_chat_tool_calls(void)
{
	const char *const chunks[] = {
		CHAT_DELTA(0, "{\"role\":\"assistant\",\"content\":\"\"}", "null"),
		CHAT_DELTA(0, "{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\","
		           "\"function\":{\"name\":\"get_weather\",\"arguments\":\"\"}}]}", "null"),
		CHAT_DELTA(0, "{\"tool_calls\":[{\"index\":1,\"id\":\"call_2\",\"type\":\"function\","
		           "\"function\":{\"name\":\"get_time\",\"arguments\":\"{\\\"tz\"}}]}", "null"),
		CHAT_DELTA(0, "{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"ci\"}}]}",
		           "null"),
		CHAT_DELTA(0, "{\"tool_calls\":[{\"index\":1,\"id\":\"\",\"function\":{\"name\":\"\","
		           "\"arguments\":\"\\\":\\\"UTC\\\"}\"}},"
		           "{\"index\":0,\"function\":{\"arguments\":\"ty\\\":\\\"Oslo\\\"}\"}}]}",
		           "null"),
		CHAT_DELTA(0, "{}", "\"tool_calls\""),
		NULL
	};

	g_test_summary("/serve/assemble/chat-tool-calls: two interleaved tool calls merge by "
	               "index: ids and names kept, arguments concatenated, sorted by index");
	check(NARWHAL_ROUTE_CHAT_COMPLETIONS, chunks,
	      "{" CHAT_OUT ",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\","
	      "\"content\":null,\"tool_calls\":["
	      "{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
	      "\"arguments\":\"{\\\"city\\\":\\\"Oslo\\\"}\"}},"
	      "{\"id\":\"call_2\",\"type\":\"function\",\"function\":{\"name\":\"get_time\","
	      "\"arguments\":\"{\\\"tz\\\":\\\"UTC\\\"}\"}}]},"
	      "\"logprobs\":null,\"finish_reason\":\"tool_calls\"}]}");
}

static void
test_chat_logprobs_usage_details(void)
{
	const char *const chunks[] = {
		CHAT_DELTA(0, "{\"role\":\"assistant\",\"content\":\"\"}", "null"),
		"{" CHAT_HEAD ",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" a\"},"
		"\"logprobs\":{\"content\":[{\"token\":\" a\",\"logprob\":-0.5,\"bytes\":[32,97],"
		"\"top_logprobs\":[]}]},\"finish_reason\":null}]}",
		"{" CHAT_HEAD ",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" b\"},"
		"\"logprobs\":{\"content\":[{\"token\":\" b\",\"logprob\":-1.25,\"bytes\":[32,98],"
		"\"top_logprobs\":[]}]},\"finish_reason\":\"length\"}]}",
		"{" CHAT_HEAD ",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"total_tokens\":5,"
		"\"completion_tokens\":2,\"prompt_tokens_details\":{\"cached_tokens\":2}}}",
		NULL
	};

	g_test_summary("/serve/assemble/chat-logprobs-usage-details: issue 9, chat "
	               "logprobs.content entries concatenate in order, and usage keeps its "
	               "prompt_tokens_details");
	check(NARWHAL_ROUTE_CHAT_COMPLETIONS, chunks,
	      "{" CHAT_OUT ",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\","
	      "\"content\":\" a b\"},\"logprobs\":{\"content\":["
	      "{\"token\":\" a\",\"logprob\":-0.5,\"bytes\":[32,97],\"top_logprobs\":[]},"
	      "{\"token\":\" b\",\"logprob\":-1.25,\"bytes\":[32,98],\"top_logprobs\":[]}]},"
	      "\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":3,\"total_tokens\":5,"
	      "\"completion_tokens\":2,\"prompt_tokens_details\":{\"cached_tokens\":2}}}");
}

static void
test_choices_sorted(void)
{
	const char *const chunks[] = {
		CHAT_DELTA(1, "{\"role\":\"assistant\",\"content\":\"\"}", "null"),
		CHAT_DELTA(0, "{\"role\":\"assistant\",\"content\":\"\"}", "null"),
		CHAT_DELTA(1, "{\"content\":\"B1\"}", "null"),
		CHAT_DELTA(0, "{\"content\":\"A1\"}", "null"),
		CHAT_DELTA(0, "{\"content\":\" A2\"}", "\"stop\""),
		CHAT_DELTA(1, "{\"content\":\" B2\"}", "\"length\""),
		"{" CHAT_HEAD ",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"total_tokens\":7,"
		"\"completion_tokens\":4}}",
		NULL
	};

	g_test_summary("/serve/assemble/choices-sorted: n=2 choices interleaved, the second one "
	               "first, come out separately and sorted by index");
	check(NARWHAL_ROUTE_CHAT_COMPLETIONS, chunks,
	      "{" CHAT_OUT ",\"choices\":["
	      "{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"A1 A2\"},"
	      "\"logprobs\":null,\"finish_reason\":\"stop\"},"
	      "{\"index\":1,\"message\":{\"role\":\"assistant\",\"content\":\"B1 B2\"},"
	      "\"logprobs\":null,\"finish_reason\":\"length\"}],"
	      "\"usage\":{\"prompt_tokens\":3,\"total_tokens\":7,\"completion_tokens\":4}}");
}

static void
test_reasoning(void)
{
	const char *const chunks[] = {
		CHAT_DELTA(0, "{\"role\":\"assistant\",\"content\":\"\"}", "null"),
		CHAT_DELTA(0, "{\"reasoning_content\":\"Think\"}", "null"),
		CHAT_DELTA(0, "{\"reasoning_content\":\"ing.\"}", "null"),
		CHAT_DELTA(0, "{\"content\":\"42\"}", "\"stop\""),
		NULL
	};

	g_test_summary("/serve/assemble/reasoning: reasoning_content deltas are concatenated "
	               "beside the content");
	check(NARWHAL_ROUTE_CHAT_COMPLETIONS, chunks,
	      "{" CHAT_OUT ",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\","
	      "\"content\":\"42\",\"reasoning_content\":\"Thinking.\"},\"logprobs\":null,"
	      "\"finish_reason\":\"stop\"}]}");
}

static void
test_whole_message(void)
{
	const char *const chunks[] = {
		"{" CHAT_HEAD ",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\","
		"\"content\":\"The whole answer.\"},\"logprobs\":null,\"finish_reason\":\"stop\"}]}",
		"{" CHAT_HEAD ",\"choices\":[],\"usage\":{\"prompt_tokens\":3,"
		"\"completion_tokens\":3,\"total_tokens\":6}}",
		NULL
	};

	g_test_summary("/serve/assemble/chat-whole-message: a request that cannot stream "
	               "(vLLM's beam search) arrives as one event holding the whole message, "
	               "which the answer keeps");
	check(NARWHAL_ROUTE_CHAT_COMPLETIONS, chunks,
	      "{" CHAT_OUT ",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\","
	      "\"content\":\"The whole answer.\"},\"logprobs\":null,\"finish_reason\":\"stop\"}],"
	      "\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":3,\"total_tokens\":6}}");
}

static void
test_bad_chunks(void)
{
	const char *const good[] = { CMPL_TOK("ok", "null"), NULL };
	const char *const bad[] = {
		"[1,2]",
		"\"text\"",
		"{\"choices\":{\"index\":0}}",
		"{\"choices\":null}",
		"{\"choices\":[{\"text\":\"x\"}]}",
		"{\"choices\":[{\"index\":-1,\"text\":\"x\"}]}",
		"{\"choices\":[{\"index\":\"0\",\"text\":\"x\"}]}",
		"{\"choices\":[{\"index\":0,\"text\":\"x\"},7]}",
		"{\"id\":\"other\",\"choices\":[{\"index\":0,\"text\":\"x\"},{\"text\":\"y\"}]}",
		NULL
	};
	struct nw_assembly *a = nw_assembly_new(NARWHAL_ROUTE_COMPLETIONS);
	json_t *body;

	g_test_summary("/serve/assemble/bad-chunks: a chunk that is not an object, has choices "
	               "that are not an array, or a choice without a valid index is refused "
	               "and changes nothing");
	feed(a, good);
	for (const char *const *b = bad; *b; b++) {
		json_t *c = json_loads(*b, JSON_DECODE_ANY, NULL);

		g_assert_nonnull(c);
		g_assert_cmpint(nw_assembly_add(a, c), ==, -1);
		json_decref(c);
	}
	g_assert_cmpuint(nw_assembly_chunks(a), ==, 1);
	body = finish(a);
	assert_body(body, "{" CMPL_HEAD ",\"choices\":[{\"index\":0,\"text\":\"ok\","
	            "\"logprobs\":null,\"finish_reason\":null,\"stop_reason\":null}]}");
	json_decref(body);
	nw_assembly_free(a);
	nw_assembly_free(NULL);
}

static void
test_finish_repeatable(void)
{
	const char *const first[] = {
		CHAT_DELTA(0, "{\"role\":\"assistant\",\"content\":\"a\"}", "null"),
		CHAT_DELTA(0, "{\"tool_calls\":[{\"index\":0,\"id\":\"c\",\"function\":"
		           "{\"name\":\"f\",\"arguments\":\"[1\"}}]}", "null"),
		"{" CHAT_HEAD ",\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":"
		"{\"content\":[{\"token\":\"a\",\"logprob\":-1}]},\"finish_reason\":null}]}",
		NULL
	};
	const char *const second[] = {
		"{" CHAT_HEAD ",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,"
		"\"function\":{\"arguments\":\"]\"}}]},\"logprobs\":"
		"{\"content\":[{\"token\":\"b\",\"logprob\":-2}]},\"finish_reason\":\"tool_calls\"}]}",
		NULL
	};
	const char *want_first =
		"{" CHAT_OUT ",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\","
		"\"content\":\"a\",\"tool_calls\":[{\"id\":\"c\",\"type\":\"function\","
		"\"function\":{\"name\":\"f\",\"arguments\":\"[1\"}}]},"
		"\"logprobs\":{\"content\":[{\"token\":\"a\",\"logprob\":-1}]},"
		"\"finish_reason\":null}]}";
	struct nw_assembly *a = nw_assembly_new(NARWHAL_ROUTE_CHAT_COMPLETIONS);
	json_t *one, *two, *three;

	g_test_summary("/serve/assemble/finish-repeatable: writing the body twice gives the "
	               "same bytes; merging may go on after");
	feed(a, first);
	one = finish(a);
	two = finish(a);
	assert_body(one, want_first);
	assert_body(two, want_first);
	json_decref(one);
	json_decref(two);

	feed(a, second);
	g_assert_cmpuint(nw_assembly_chunks(a), ==, 4);
	three = finish(a);
	assert_body(three,
	            "{" CHAT_OUT ",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\","
	            "\"content\":\"a\",\"tool_calls\":[{\"id\":\"c\",\"type\":\"function\","
	            "\"function\":{\"name\":\"f\",\"arguments\":\"[1]\"}}]},"
	            "\"logprobs\":{\"content\":[{\"token\":\"a\",\"logprob\":-1},"
	            "{\"token\":\"b\",\"logprob\":-2}]},\"finish_reason\":\"tool_calls\"}]}");
	json_decref(three);
	nw_assembly_free(a);
}

/* Strings and keys that need escapes, and those that do not, are written
 * as jansson encodes them (finish() compares the bytes). */
static void
test_write_escapes(void)
{
	const char *const chunks[] = {
		"{\"id\":\"q\\\"\\\\/\\n\\u0001\\u001f\\u007f\",\"object\":\"text_completion\","
		"\"sys\\ttem\":\"caf\u00e9 \\u2028 \\ud83d\\ude00\",\"model\":\"org/m \\u007f\",\"n\":-1.5e300,"
		"\"choices\":[{\"index\":0,\"text\":\"a\\\"b\\\\c\\td\\re\\bf\\fg\\u0000\","
		"\"logprobs\":null,\"finish_reason\":null,\"ok\\\"\":[1,true,{}]}]}",
		NULL
	};
	struct nw_assembly *a = nw_assembly_new(NARWHAL_ROUTE_COMPLETIONS);
	json_error_t err;
	json_t *body;

	g_test_summary("/serve/assemble/write-escapes: quotes, backslashes, control "
	               "characters, non-ASCII text, numbers and nested values are written as "
	               "jansson's compact encoding writes them");
	/* \u0000 is refused by the reader: the chunk goes in without it. */
	g_assert_null(json_loads(chunks[0], 0, &err));
	{
		char *fixed = g_strdup(chunks[0]);
		char *nul = strstr(fixed, "\\u0000");
		const char *const one[] = { fixed, NULL };

		memmove(nul, nul + 6, strlen(nul + 6) + 1);
		feed(a, one);
		g_free(fixed);
	}
	body = finish(a);
	g_assert_cmpstr(json_string_value(json_object_get(json_array_get(
		json_object_get(body, "choices"), 0), "text")), ==, "a\"b\\c\td\re\bf\fg");
	json_decref(body);
	nw_assembly_free(a);
}

/* A last token chunk merged by its shape (its text appended, its reasons
 * set) gives the body a whole merge of it gives (chunk-shape.h). */
static void
test_set_reason(void)
{
	const char *const first[] = { CMPL_TOK(" a", "null"), NULL };
	const char *const whole[] = { CMPL_TOK(" a", "null"), CMPL_TOK(" b", "\"length\""), NULL };
	struct nw_assembly *a = nw_assembly_new(NARWHAL_ROUTE_COMPLETIONS);
	struct nw_assembly *b = nw_assembly_new(NARWHAL_ROUTE_COMPLETIONS);
	json_t *want, *got;
	char *want_text;

	g_test_summary("/serve/assemble/set-reason: a last chunk merged as text plus its "
	               "finish reason gives the same body as a whole merge; no choice, -1");
	feed(a, whole);
	feed(b, first);
	g_assert_cmpint(nw_assembly_add_text(b, 0, " b", 2), ==, 0);
	g_assert_cmpint(nw_assembly_set_reason(b, 0, "finish_reason", json_string("length")), ==, 0);
	g_assert_cmpint(nw_assembly_set_reason(b, 3, "finish_reason", json_string("x")), ==, -1);
	g_assert_cmpuint(nw_assembly_chunks(b), ==, 2);
	want = finish(a);
	got = finish(b);
	want_text = json_dumps(want, JSON_COMPACT);
	assert_body(got, want_text);
	g_assert_cmpstr(json_string_value(json_object_get(json_array_get(
		json_object_get(got, "choices"), 0), "finish_reason")), ==, "length");
	free(want_text);
	json_decref(want);
	json_decref(got);
	nw_assembly_free(a);
	nw_assembly_free(b);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/serve/assemble/completions-text", test_completions_text);
	g_test_add_func("/serve/assemble/usage-null", test_usage_null);
	g_test_add_func("/serve/assemble/completions-logprobs", test_completions_logprobs);
	g_test_add_func("/serve/assemble/chat-content", test_chat_content);
	g_test_add_func("/serve/assemble/chat-tool-calls", test_chat_tool_calls);
	g_test_add_func("/serve/assemble/chat-logprobs-usage-details",
	                test_chat_logprobs_usage_details);
	g_test_add_func("/serve/assemble/choices-sorted", test_choices_sorted);
	g_test_add_func("/serve/assemble/reasoning", test_reasoning);
	g_test_add_func("/serve/assemble/chat-whole-message", test_whole_message);
	g_test_add_func("/serve/assemble/bad-chunks", test_bad_chunks);
	g_test_add_func("/serve/assemble/finish-repeatable", test_finish_repeatable);
	g_test_add_func("/serve/assemble/set-reason", test_set_reason);
	g_test_add_func("/serve/assemble/write-escapes", test_write_escapes);
	return g_test_run();
}
