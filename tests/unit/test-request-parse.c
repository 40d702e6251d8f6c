/*
 * Request validation tests, table-driven: one row per rule with the body,
 * the expected status, code, param and a message substring; then accepted
 * bodies and the fields parsed from them; then a wrong and a right value
 * for every known field, and the error helpers. Bodies are copied into
 * buffers of exactly their length, so a read past the end fails under
 * ASan. Rows are written from docs/api.md ("Request validation"), not read
 * from the parser's tables.
 */
#include "build-config.h"

#include <string.h>

#include <glib.h>
#include <jansson.h>

#include "net/http-server.h"
#include "serve/request-parse.h"

#define CMPL NARWHAL_ROUTE_COMPLETIONS
#define CHAT NARWHAL_ROUTE_CHAT_COMPLETIONS
#define JSON "application/json"

/* Bodies: a valid request with a fragment of more fields. */
#define M "\"model\": \"m\""
#define P "\"prompt\": \"hi\""
#define MSGS "\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]"
#define C_BODY(frag) "{" M ", " P ", " frag "}"
#define H_BODY(frag) "{" M ", " MSGS ", " frag "}"
#define H_MSG(msg) "{" M ", \"messages\": [" msg "]}"

/* ------------------------------------------------------------ helpers --- */

struct parsed {
	int rc;
	struct nw_client_request req;
	struct nw_client_error err;
};

/* Parse from a heap copy of exactly len bytes. */
static struct parsed
parse_n(narwhal_route route, const char *ctype, const char *body, size_t len,
        const struct nw_parse_limits *lim)
{
	struct parsed p;
	char *copy = len ? g_memdup2(body, len) : NULL;

	memset(&p, 0x5a, sizeof p); /* the parser must set what it returns */
	p.rc = nw_request_parse(route, ctype, copy, len, lim, &p.req, &p.err);
	g_free(copy);
	return p;
}

/* The keys the vllm dialect owns (its router_keys slot), as the serve
 * layer passes them for a vllm fleet. */
static const char *const vllm_router_keys[] = { "kv_transfer_params", NULL };
static const struct nw_parse_limits vllm_limits = { .router_keys = vllm_router_keys };

static struct parsed
parse(narwhal_route route, const char *ctype, const char *body)
{
	return parse_n(route, ctype, body, strlen(body), &vllm_limits);
}

/* A message must serialise in the envelope and read well. */
static void
check_envelope(const struct nw_client_error *e)
{
	json_t *env, *inner;

	g_assert_true(g_utf8_validate(e->message, -1, NULL));
	g_assert_true(g_utf8_validate(e->param, -1, NULL));
	for (const char *s = e->message; *s; s++)
		g_assert_cmpint((unsigned char)*s, >=, 0x20);
	g_assert_cmpuint(strlen(e->message), >, 10);
	g_assert_nonnull(e->type);
	g_assert_nonnull(e->code);
	env = nw_http_error_body(e->type, e->code, e->param[0] ? e->param : NULL, e->message);
	g_assert_nonnull(env);
	inner = json_object_get(env, "error");
	g_assert_true(json_is_string(json_object_get(inner, "code")));
	g_assert_true(e->param[0] ? json_is_string(json_object_get(inner, "param")) :
	                            json_is_null(json_object_get(inner, "param")));
	json_decref(env);
}

static void
expect_error(const struct parsed *p, unsigned status, const char *code, const char *param,
             const char *substring)
{
	g_test_message("status %u code %s param '%s': %s", p->err.status, p->err.code,
	               p->err.param, p->err.message);
	g_assert_cmpint(p->rc, ==, -1);
	g_assert_null(p->req.body);
	g_assert_null(p->req.model);
	g_assert_cmpuint(p->err.status, ==, status);
	g_assert_cmpstr(p->err.type, ==, "invalid_request_error");
	g_assert_cmpstr(p->err.code, ==, code);
	g_assert_cmpstr(p->err.param, ==, param ? param : "");
	if (!strstr(p->err.message, substring))
		g_test_message("expected the message to hold: %s", substring);
	g_assert_nonnull(strstr(p->err.message, substring));
	check_envelope(&p->err);
}

static char *
test_name(const char *prefix, narwhal_route route, const char *name)
{
	char *n = g_strdup(name), *out;

	g_strdelimit(n, "/", '_');
	out = g_strdup_printf("/request-parse/%s/%s/%s", prefix,
	                      route == CMPL ? "completions" : "chat", n);
	g_free(n);
	return out;
}

/* ------------------------------------------------------- refused rows --- */

struct bad_case {
	const char *name;
	narwhal_route route;
	const char *ctype;
	const char *body;
	size_t len;          /* 0: strlen(body) */
	unsigned status;
	const char *code;
	const char *param;   /* NULL: JSON null */
	const char *message; /* substring */
};

#define BAD(name, route, body, code, param, msg) \
	{ name, route, JSON, body, 0, 400, code, param, msg }
#define CT(name, ctype) \
	{ "content-type " name, CMPL, ctype, C_BODY("\"n\": 1"), 0, 415, \
	  "unsupported_media_type", NULL, "send application/json" }
#define RAW(name, body, msg) \
	{ name, CMPL, JSON, body, sizeof(body) - 1, 400, "invalid_json", NULL, msg }

static const struct bad_case bad_cases[] = {
	/* the envelope: content type, body, JSON */
	CT("text_plain", "text/plain"),
	CT("form (curl's default)", "application/x-www-form-urlencoded"),
	CT("latin1 charset", "application/json; charset=latin1"),
	CT("quoted latin1 charset", "application/json;charset=\"iso-8859-1\""),
	CT("json prefix", "application/jsonx"),
	CT("json-seq", "application/json-seq"),
	CT("garbage after type", "application/json garbage"),
	CT("text_json", "text/json"),
	CT("text after a quoted parameter", "application/json; charset=\"utf-8\"x"),
	{ "content-type quotes the header", CMPL, "text/html", "{}", 0, 415,
	  "unsupported_media_type", NULL, "Content-Type \"text/html\" is not supported" },
	{ "content-type before body", CMPL, "text/plain", "", 0, 415, "unsupported_media_type",
	  NULL, "application/json" },
	BAD("empty body", CMPL, "", "empty_body", NULL, "the request body is empty"),
	BAD("blank body", CHAT, " \r\n\t ", "empty_body", NULL, "send a JSON object"),
	BAD("malformed", CMPL, "{\"model\": \"m\", \"prompt\": }", "invalid_json", NULL,
	    "not valid JSON: "),
	BAD("malformed line and column", CMPL, "{\n  \"model\": tru\n}", "invalid_json", NULL,
	    "(line 2, column"),
	BAD("truncated", CHAT, "{\"model\": \"m\"", "invalid_json", NULL, "line 1, column"),
	BAD("trailing garbage", CMPL, C_BODY("\"n\": 1") " x", "invalid_json", NULL,
	    "not valid JSON"),
	BAD("two objects", CMPL, "{} {}", "invalid_json", NULL, "not valid JSON"),
	BAD("single quotes", CMPL, "{'model': 'm'}", "invalid_json", NULL, "not valid JSON"),
	BAD("raw control character", CMPL, "{\"model\": \"m\", \"prompt\": \"a\tb\"}",
	    "invalid_json", NULL, "not valid JSON"),
	RAW("invalid utf-8", "{\"model\": \"m\", \"prompt\": \"\xff\"}", "not valid UTF-8"),
	RAW("overlong utf-8", "{\"model\": \"m\", \"prompt\": \"\xc0\xaf\"}", "not valid UTF-8"),
	RAW("surrogate utf-8", "{\"model\": \"m\", \"prompt\": \"\xed\xa0\x80\"}",
	    "not valid UTF-8"),
	RAW("cut utf-8", "{\"model\": \"m\", \"prompt\": \"\xe4\xb8\"}", "not valid UTF-8"),
	RAW("nul byte in a string", "{\"model\": \"m\", \"prompt\": \"a\0b\"}",
	    "NUL byte at offset 27"),
	RAW("nul byte after the object", "{\"model\": \"m\", \"prompt\": \"a\"}\0",
	    "NUL byte at offset 29"),
	RAW("nul byte alone", "\0", "NUL byte at offset 0"),
	BAD("escaped nul", CMPL, "{\"model\": \"m\\u0000x\", \"prompt\": \"a\"}", "invalid_json",
	    NULL, "\\u0000"),
	BAD("lone surrogate escape", CMPL, "{\"model\": \"m\", \"prompt\": \"\\ud800\"}",
	    "invalid_json", NULL, "not valid JSON"),
	BAD("byte order mark", CMPL, "\xef\xbb\xbf{\"model\": \"m\", \"prompt\": \"a\"}",
	    "invalid_json", NULL, "byte order mark"),
	BAD("duplicate key", CMPL, "{\"model\": \"m\", \"prompt\": \"a\", \"model\": \"other\"}",
	    "invalid_json", NULL,
	    "the body repeats the key \"model\" within one object (line 1, column 37): Narwhal "
	    "refuses duplicate keys"),
	BAD("nested duplicate key", CHAT,
	    "{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"role\": \"system\", "
	    "\"content\": \"x\"}]}", "invalid_json", NULL, "repeats the key \"role\""),
	BAD("integer overflow", CMPL, C_BODY("\"max_tokens\": 99999999999999999999"),
	    "invalid_json", NULL, "integers must fit in 64 bits"),
	BAD("real overflow", CMPL, C_BODY("\"temperature\": 1e999"), "invalid_json", NULL,
	    "out of range"),
	BAD("top level array", CMPL, "[{\"model\": \"m\"}]", "invalid_type", NULL,
	    "the body must be a JSON object; found an array"),
	BAD("top level string", CHAT, "\"hello\"", "invalid_type", NULL,
	    "found the string \"hello\""),
	BAD("top level null", CHAT, "null", "invalid_type", NULL, "found null"),
	BAD("top level number", CMPL, "42", "invalid_type", NULL, "found the integer 42"),

	/* model */
	BAD("model missing", CMPL, "{" P "}", "missing_field", "model", "model is required"),
	BAD("model missing chat", CHAT, "{" MSGS "}", "missing_field", "model",
	    "GET /v1/models"),
	BAD("model null", CMPL, "{\"model\": null, " P "}", "missing_field", "model",
	    "model is required"),
	BAD("model number", CMPL, "{\"model\": 5, " P "}", "invalid_type", "model",
	    "model must be a string; found the integer 5"),
	BAD("model array", CHAT, "{\"model\": [\"m\"], " MSGS "}", "invalid_type", "model",
	    "found an array"),
	BAD("model empty", CMPL, "{\"model\": \"\", " P "}", "invalid_value", "model",
	    "model is empty"),

	/* completions: prompt */
	BAD("prompt missing", CMPL, "{" M "}", "missing_field", "prompt",
	    "prompt is required: give a string or an array of token ids"),
	BAD("prompt null", CMPL, "{" M ", \"prompt\": null}", "missing_field", "prompt",
	    "required"),
	BAD("prompt number", CMPL, "{" M ", \"prompt\": 7}", "invalid_type", "prompt",
	    "prompt must be a string or an array of token ids; found the integer 7"),
	BAD("prompt object", CMPL, "{" M ", \"prompt\": {\"text\": \"x\"}}", "invalid_type",
	    "prompt", "found an object"),
	BAD("prompt empty array", CMPL, "{" M ", \"prompt\": []}", "invalid_value", "prompt",
	    "prompt is an empty array"),
	BAD("prompt batch of strings", CMPL, "{" M ", \"prompt\": [\"a\", \"b\"]}",
	    "unsupported_value", "prompt",
	    "prompt holds 2 prompts: Narwhal serves one sequence per request"),
	BAD("prompt batch of token lists", CMPL, "{" M ", \"prompt\": [[1, 2], [3]]}",
	    "unsupported_value", "prompt", "one sequence per request"),
	BAD("prompt mixed strings", CMPL, "{" M ", \"prompt\": [\"a\", 1]}", "invalid_type",
	    "prompt[1]", "prompt[1] must be a string, like prompt[0]; found the integer 1"),
	BAD("prompt mixed lists", CMPL, "{" M ", \"prompt\": [[1], \"a\"]}", "invalid_type",
	    "prompt[1]", "an array of token ids"),
	BAD("prompt token not integer", CMPL, "{" M ", \"prompt\": [1, \"a\"]}", "invalid_type",
	    "prompt[1]", "prompt[1] must be a token id (an integer)"),
	BAD("prompt token real", CMPL, "{" M ", \"prompt\": [1, 2.5]}", "invalid_type",
	    "prompt[1]", "found the number 2.5"),
	BAD("prompt token negative", CMPL, "{" M ", \"prompt\": [1, -1]}", "invalid_value",
	    "prompt[1]", "prompt[1]: -1 is out of range: token ids are integers from 0 to 2147483647"),
	BAD("prompt token too large", CMPL, "{" M ", \"prompt\": [2147483648]}",
	    "invalid_value", "prompt[0]", "2147483648 is out of range"),
	BAD("prompt first element real", CMPL, "{" M ", \"prompt\": [1.0]}", "invalid_type",
	    "prompt[0]", "prompt[0] must be a string or a token id; found the number 1.0"),
	BAD("prompt first element bool", CMPL, "{" M ", \"prompt\": [true]}", "invalid_type",
	    "prompt[0]", "found true"),
	BAD("prompt nested empty", CMPL, "{" M ", \"prompt\": [[]]}", "invalid_value",
	    "prompt[0]", "prompt[0] is an empty array"),
	BAD("prompt nested bad token", CMPL, "{" M ", \"prompt\": [[1, \"x\"]]}",
	    "invalid_type", "prompt[0][1]", "a token id"),
	BAD("prompt_embeds", CMPL, "{" M ", \"prompt_embeds\": \"AAAA\"}", "unsupported_value",
	    "prompt_embeds", "prompt_embeds is not supported"),
	BAD("prompt_embeds with prompt", CMPL, C_BODY("\"prompt_embeds\": [\"AAAA\"]"),
	    "unsupported_value", "prompt_embeds", "text and token-id prompts only"),

	/* chat: messages */
	BAD("messages missing", CHAT, "{" M "}", "missing_field", "messages",
	    "messages is required"),
	BAD("messages null", CHAT, "{" M ", \"messages\": null}", "missing_field", "messages",
	    "non-empty array"),
	BAD("messages string", CHAT, "{" M ", \"messages\": \"hi\"}", "invalid_type",
	    "messages", "messages must be an array of messages; found the string \"hi\""),
	BAD("messages empty", CHAT, "{" M ", \"messages\": []}", "invalid_value", "messages",
	    "messages is an empty array: give at least one message"),
	BAD("message not object", CHAT, H_MSG("\"hi\""), "invalid_type", "messages[0]",
	    "messages[0] must be an object with role and content"),
	BAD("role missing", CHAT, H_MSG("{\"content\": \"x\"}"), "missing_field",
	    "messages[0].role", "give system, user, assistant, tool or developer"),
	BAD("role null", CHAT, H_MSG("{\"role\": null, \"content\": \"x\"}"), "missing_field",
	    "messages[0].role", "is required"),
	BAD("role number", CHAT, H_MSG("{\"role\": 1, \"content\": \"x\"}"), "invalid_type",
	    "messages[0].role", "found the integer 1"),
	BAD("role unknown", CHAT, H_MSG("{\"role\": \"bot\", \"content\": \"x\"}"),
	    "invalid_value", "messages[0].role",
	    "messages[0].role: \"bot\" is not a valid role"),
	BAD("role function", CHAT, H_MSG("{\"role\": \"function\", \"content\": \"x\"}"),
	    "invalid_value", "messages[0].role", "not a valid role"),
	BAD("role case", CHAT, H_MSG("{\"role\": \"User\", \"content\": \"x\"}"),
	    "invalid_value", "messages[0].role", "\"User\""),
	BAD("second message", CHAT,
	    H_MSG("{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"assistant\"}"),
	    "missing_field", "messages[1].content", "messages[1].content is required"),
	BAD("content missing", CHAT, H_MSG("{\"role\": \"user\"}"), "missing_field",
	    "messages[0].content", "only an assistant message with tool_calls may leave it null"),
	BAD("content null", CHAT, H_MSG("{\"role\": \"user\", \"content\": null}"),
	    "missing_field", "messages[0].content", "is required"),
	BAD("assistant null content no tools", CHAT,
	    H_MSG("{\"role\": \"assistant\", \"content\": null}"), "missing_field",
	    "messages[0].content", "tool_calls"),
	BAD("assistant null content empty tools", CHAT,
	    H_MSG("{\"role\": \"assistant\", \"content\": null, \"tool_calls\": []}"),
	    "missing_field", "messages[0].content", "tool_calls"),
	BAD("tool null content", CHAT,
	    H_MSG("{\"role\": \"tool\", \"content\": null, \"tool_calls\": [{}]}"),
	    "missing_field", "messages[0].content", "is required"),
	BAD("content number", CHAT, H_MSG("{\"role\": \"user\", \"content\": 3}"), "invalid_type",
	    "messages[0].content", "a string or an array of text parts; found the integer 3"),
	BAD("content object", CHAT, H_MSG("{\"role\": \"user\", \"content\": {\"text\": \"x\"}}"),
	    "invalid_type", "messages[0].content", "found an object"),
	BAD("part image", CHAT,
	    H_MSG("{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, "
	          "{\"type\": \"image_url\", \"image_url\": {\"url\": \"http://x\"}}]}"),
	    "unsupported_value", "messages[0].content[1].type",
	    "\"image_url\" is not supported: Narwhal sizes prompts from text only"),
	BAD("part audio", CHAT,
	    H_MSG("{\"role\": \"user\", \"content\": [{\"type\": \"input_audio\"}]}"),
	    "unsupported_value", "messages[0].content[0].type", "text only"),
	BAD("part not object", CHAT, H_MSG("{\"role\": \"user\", \"content\": [\"x\"]}"),
	    "invalid_type", "messages[0].content[0]", "found the string \"x\""),
	BAD("part type missing", CHAT, H_MSG("{\"role\": \"user\", \"content\": [{\"x\": 1}]}"),
	    "missing_field", "messages[0].content[0].type", "is required"),
	BAD("part type number", CHAT, H_MSG("{\"role\": \"user\", \"content\": [{\"type\": 1}]}"),
	    "invalid_type", "messages[0].content[0].type", "must be a string"),
	BAD("part text missing", CHAT,
	    H_MSG("{\"role\": \"user\", \"content\": [{\"type\": \"text\"}]}"), "missing_field",
	    "messages[0].content[0].text", "required for a text part"),
	BAD("part text number", CHAT,
	    H_MSG("{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": 5}]}"),
	    "invalid_type", "messages[0].content[0].text", "found the integer 5"),
	BAD("part text null", CHAT,
	    H_MSG("{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": null}]}"),
	    "invalid_type", "messages[0].content[0].text", "found null"),
	BAD("part refusal missing", CHAT,
	    H_MSG("{\"role\": \"assistant\", \"content\": [{\"type\": \"refusal\"}]}"),
	    "missing_field", "messages[0].content[0].refusal", "required for a refusal part"),
	BAD("name number", CHAT, H_MSG("{\"role\": \"user\", \"content\": \"x\", \"name\": 1}"),
	    "invalid_type", "messages[0].name", "must be a string"),
	BAD("tool_calls object", CHAT,
	    H_MSG("{\"role\": \"assistant\", \"content\": null, \"tool_calls\": {}}"),
	    "invalid_type", "messages[0].tool_calls", "must be an array"),

	/* max_tokens, max_completion_tokens, min_tokens */
	BAD("max_tokens negative", CMPL, C_BODY("\"max_tokens\": -5"), "invalid_value",
	    "max_tokens", "max_tokens: -5 is out of range: give a positive integer"),
	BAD("max_tokens zero", CMPL, C_BODY("\"max_tokens\": 0"), "invalid_value", "max_tokens",
	    "0 is out of range"),
	BAD("max_tokens absurd", CMPL, C_BODY("\"max_tokens\": 16777217"), "invalid_value",
	    "max_tokens", "16777217 is out of range: give a positive integer no larger than 16777216"),
	BAD("max_tokens huge", CHAT, H_BODY("\"max_tokens\": 9223372036854775807"),
	    "invalid_value", "max_tokens", "no larger than"),
	BAD("max_tokens real", CMPL, C_BODY("\"max_tokens\": 1.5"), "invalid_type",
	    "max_tokens", "max_tokens must be a positive integer; found the number 1.5"),
	BAD("max_tokens integral real", CMPL, C_BODY("\"max_tokens\": 10.0"), "invalid_type",
	    "max_tokens", "found the number 10.0"),
	BAD("max_tokens exponent", CMPL, C_BODY("\"max_tokens\": 1e3"), "invalid_type",
	    "max_tokens", "found the number 1000.0"),
	BAD("max_tokens string", CMPL, C_BODY("\"max_tokens\": \"10\""), "invalid_type",
	    "max_tokens", "found the string \"10\""),
	BAD("max_tokens bool", CHAT, H_BODY("\"max_tokens\": true"), "invalid_type",
	    "max_tokens", "found true"),
	BAD("max_completion_tokens negative", CHAT, H_BODY("\"max_completion_tokens\": -1"),
	    "invalid_value", "max_completion_tokens", "max_completion_tokens: -1 is out of range"),
	BAD("max_completion_tokens string", CHAT, H_BODY("\"max_completion_tokens\": \"x\""),
	    "invalid_type", "max_completion_tokens", "must be a positive integer"),
	BAD("max_tokens wrong beside max_completion_tokens", CHAT,
	    H_BODY("\"max_completion_tokens\": 5, \"max_tokens\": 0"), "invalid_value",
	    "max_tokens", "0 is out of range"),
	BAD("min_tokens negative", CMPL, C_BODY("\"min_tokens\": -1"), "invalid_value",
	    "min_tokens", "min_tokens: -1 is out of range: give an integer from 0"),
	BAD("min_tokens real", CMPL, C_BODY("\"min_tokens\": 0.5"), "invalid_type",
	    "min_tokens", "must be an integer"),
	BAD("min_tokens above max_tokens", CMPL, C_BODY("\"min_tokens\": 5, \"max_tokens\": 3"),
	    "invalid_value", "min_tokens",
	    "min_tokens: 5 is more than max_tokens allows (3): give at most 3"),
	BAD("min_tokens above max_completion_tokens", CHAT,
	    H_BODY("\"max_tokens\": 50, \"min_tokens\": 10, \"max_completion_tokens\": 5"),
	    "invalid_value", "min_tokens", "more than max_completion_tokens allows (5)"),

	/* stream, stream_options */
	BAD("stream string", CMPL, C_BODY("\"stream\": \"true\""), "invalid_type", "stream",
	    "stream must be a boolean; found the string \"true\""),
	BAD("stream number", CHAT, H_BODY("\"stream\": 1"), "invalid_type", "stream",
	    "found the integer 1"),
	BAD("stream_options without stream", CMPL, C_BODY("\"stream_options\": {}"),
	    "invalid_value", "stream_options", "only allowed when stream is true"),
	BAD("stream_options with stream false", CHAT,
	    H_BODY("\"stream\": false, \"stream_options\": {\"include_usage\": true}"),
	    "invalid_value", "stream_options", "only allowed when stream is true"),
	BAD("stream_options string", CMPL,
	    C_BODY("\"stream\": true, \"stream_options\": \"usage\""), "invalid_type",
	    "stream_options", "must be an object"),
	BAD("include_usage string", CHAT,
	    H_BODY("\"stream\": true, \"stream_options\": {\"include_usage\": \"yes\"}"),
	    "invalid_type", "stream_options.include_usage", "must be a boolean"),
	BAD("continuous_usage_stats number", CMPL,
	    C_BODY("\"stream\": true, \"stream_options\": {\"continuous_usage_stats\": 1}"),
	    "invalid_type", "stream_options.continuous_usage_stats", "must be a boolean"),

	/* n, best_of */
	BAD("n two", CMPL, C_BODY("\"n\": 2"), "unsupported_value", "n",
	    "n: 2 is not supported: Narwhal serves one sequence per request"),
	BAD("n many chat", CHAT, H_BODY("\"n\": 8"), "unsupported_value", "n",
	    "prefill/decode handoff"),
	BAD("n zero", CMPL, C_BODY("\"n\": 0"), "invalid_value", "n",
	    "n: 0 is out of range: the only accepted value is 1"),
	BAD("n negative", CHAT, H_BODY("\"n\": -3"), "invalid_value", "n", "-3 is out of range"),
	BAD("n real", CMPL, C_BODY("\"n\": 1.0"), "invalid_type", "n",
	    "n must be the integer 1; found the number 1.0"),
	BAD("n string", CMPL, C_BODY("\"n\": \"1\""), "invalid_type", "n", "found the string"),
	BAD("best_of three", CMPL, C_BODY("\"best_of\": 3"), "unsupported_value", "best_of",
	    "best_of: 3 is not supported"),
	BAD("best_of zero", CMPL, C_BODY("\"best_of\": 0"), "invalid_value", "best_of",
	    "only accepted value is 1"),

	/* router-owned */
	BAD("kv_transfer_params", CMPL,
	    C_BODY("\"kv_transfer_params\": {\"do_remote_decode\": true}"), "unsupported_value",
	    "kv_transfer_params",
	    "kv_transfer_params may not come from a client: Narwhal sets it"),
	BAD("kv_transfer_params chat", CHAT, H_BODY("\"kv_transfer_params\": {}"),
	    "unsupported_value", "kv_transfer_params", "remove it"),
	BAD("kv_transfer_params null", CMPL, C_BODY("\"kv_transfer_params\": null"),
	    "unsupported_value", "kv_transfer_params", "may not come from a client"),

	/* element types of known list fields */
	BAD("stop element", CMPL, C_BODY("\"stop\": [\"a\", 1]"), "invalid_type", "stop[1]",
	    "stop[1] must be a string; found the integer 1"),
	BAD("stop_token_ids element", CHAT, H_BODY("\"stop_token_ids\": [1, \"2\"]"),
	    "invalid_type", "stop_token_ids[1]", "must be an integer"),
	BAD("bad_words element", CMPL, C_BODY("\"bad_words\": [null]"), "invalid_type",
	    "bad_words[0]", "found null"),
	BAD("logprobs bool in completions", CMPL, C_BODY("\"logprobs\": true"), "invalid_type",
	    "logprobs", "must be an integer"),
	BAD("logprobs integer in chat", CHAT, H_BODY("\"logprobs\": 5"), "invalid_type",
	    "logprobs", "must be a boolean"),

	/* client strings are quoted briefly and safely */
	BAD("long role quoted", CHAT,
	    H_MSG("{\"role\": \"" "0123456789012345678901234567890123456789"
	          "0123456789012345678901234567890123456789" "\", \"content\": \"x\"}"),
	    "invalid_value", "messages[0].role", "901234567...\" is not a valid role"),
	BAD("control characters quoted", CHAT,
	    H_MSG("{\"role\": \"a\\nb\\u0001\", \"content\": \"x\"}"), "invalid_value",
	    "messages[0].role", "\"a?b?\" is not a valid role"),
	BAD("real needing 17 digits", CMPL, C_BODY("\"max_tokens\": 0.30000000000000004"),
	    "invalid_type", "max_tokens", "found the number 0.30000000000000004"),
	BAD("three-byte role quoted", CHAT,
	    H_MSG("{\"role\": \"\xe4\xb8\x96\", \"content\": \"x\"}"), "invalid_value",
	    "messages[0].role", "\"\xe4\xb8\x96\" is not a valid role"),
	BAD("unicode quoted", CMPL, C_BODY("\"stream\": \"\xc3\xa9t\xc3\xa9\""), "invalid_type",
	    "stream", "found the string \"\xc3\xa9t\xc3\xa9\""),
};

static void
test_bad(gconstpointer data)
{
	const struct bad_case *c = data;
	size_t len = c->len ? c->len : strlen(c->body);
	struct parsed p = parse_n(c->route, c->ctype, c->body, len, &vllm_limits);

	expect_error(&p, c->status, c->code, c->param, c->message);
}

/* Router-owned keys come from the fleet's dialects (router_keys): without
 * a dialect that owns kv_transfer_params it is an unknown key, passed
 * through like any other; with one it is refused. */
static void
test_router_keys_from_dialects(void)
{
	static const char body[] = "{\"model\": \"m\", \"prompt\": \"x\","
	                           " \"bootstrap_room\": 7, \"kv_transfer_params\": {}}";
	static const char *const sglang_like[] = { "bootstrap_room", NULL };
	const struct nw_parse_limits lim = { .router_keys = sglang_like };
	struct parsed p = parse_n(CMPL, NULL, body, strlen(body), NULL);

	g_assert_cmpint(p.rc, ==, 0);
	nw_client_request_clear(&p.req);
	p = parse_n(CMPL, NULL, body, strlen(body), &lim);
	expect_error(&p, 400, "unsupported_value", "bootstrap_room", "may not come from a client");
}

/* ------------------------------------------------------ accepted rows --- */

struct ok_case {
	const char *name;
	narwhal_route route;
	const char *ctype;
	const char *body;
	/* what the parse must find */
	bool stream, include_usage, max_tokens_set;
	uint32_t max_tokens;
	const char *prompt;   /* NULL: none */
	size_t prompt_len, prompt_chars;
	uint32_t token_ids;
	uint32_t chat_messages;
	size_t chat_chars;
};

/* completions with a text prompt; chat; plain fields otherwise */
#define OKC(name, ctype, body, prompt, bytes, chars) \
	{ name, CMPL, ctype, body, false, false, false, 0, prompt, bytes, chars, 0, 0, 0 }
#define OKH(name, body, n, chars) \
	{ name, CHAT, JSON, body, false, false, false, 0, NULL, 0, 0, 0, n, chars }
#define OKS(name, route, body, stream, usage, set, max) \
	{ name, route, JSON, body, stream, usage, set, max, \
	  route == CMPL ? "hi" : NULL, route == CMPL ? 2 : 0, route == CMPL ? 2 : 0, 0, \
	  route == CHAT ? 1 : 0, route == CHAT ? 2 : 0 }
#define OKT(name, body, n) \
	{ name, CMPL, JSON, body, false, false, false, 0, NULL, 0, 0, n, 0, 0 }

static const struct ok_case ok_cases[] = {
	OKC("minimal", JSON, "{" M ", " P "}", "hi", 2, 2),
	OKC("no content type", NULL, "{" M ", " P "}", "hi", 2, 2),
	OKC("empty content type", "", "{" M ", " P "}", "hi", 2, 2),
	OKC("content type case", "Application/JSON; Charset=UTF-8", "{" M ", " P "}", "hi", 2, 2),
	OKC("content type utf8", "application/json;charset=utf8", "{" M ", " P "}", "hi", 2, 2),
	OKC("content type quoted", "application/json; charset=\"utf-8\"", "{" M ", " P "}",
	    "hi", 2, 2),
	OKC("content type spaced parameter", "application/json; charset = \"UTF-8\" ",
	    "{" M ", " P "}", "hi", 2, 2),
	OKC("content type other parameter", " application/json ; foo=bar ;x", "{" M ", " P "}",
	    "hi", 2, 2),
	OKC("surrounding whitespace", JSON, "\n {" M ", " P "} \r\n", "hi", 2, 2),
	OKC("unicode prompt", JSON, "{" M ", \"prompt\": \"h\xc3\xa9llo \xe4\xb8\x96\xf0\x9f\x90\x8b\"}",
	    "h\xc3\xa9llo \xe4\xb8\x96\xf0\x9f\x90\x8b", 14, 8),
	OKC("escaped prompt", JSON, "{" M ", \"prompt\": \"a\\nb\\u00e9\"}", "a\nb\xc3\xa9", 5, 4),
	OKC("empty prompt is the engine's call", JSON, "{" M ", \"prompt\": \"\"}", "", 0, 0),
	OKC("one-string list", JSON, "{" M ", \"prompt\": [\"one\"]}", "one", 3, 3),
	OKC("unicode model", JSON, "{\"model\": \"\xe6\xa8\xa1\xe5\x9e\x8b\", " P "}", "hi", 2, 2),
	OKT("token ids", "{" M ", \"prompt\": [1, 2, 3]}", 3),
	OKT("token id bounds", "{" M ", \"prompt\": [0, 2147483647]}", 2),
	OKT("one token-id list", "{" M ", \"prompt\": [[5, 6]]}", 2),
	OKC("unknown fields pass", JSON,
	    C_BODY("\"foo\": {\"bar\": [1, null]}, \"x-custom\": \"y\", \"guided_json\": 5"),
	    "hi", 2, 2),
	OKC("nulls are absent", JSON,
	    C_BODY("\"temperature\": null, \"max_tokens\": null, \"stream\": null, \"n\": null, "
	           "\"stop\": null, \"stream_options\": null, \"best_of\": null, "
	           "\"prompt_embeds\": null, \"min_tokens\": null"),
	    "hi", 2, 2),
	OKC("chat fields are unknown in completions", JSON,
	    C_BODY("\"max_completion_tokens\": \"x\", \"messages\": 5, \"tools\": 1"), "hi", 2, 2),
	OKC("sampling fields", JSON,
	    C_BODY("\"temperature\": 0, \"top_p\": 0.9, \"top_k\": -1, \"seed\": 7, "
	           "\"stop\": \"\\n\", \"logprobs\": 2, \"echo\": false, \"n\": 1, \"best_of\": 1, "
	           "\"presence_penalty\": -0.5, \"logit_bias\": {\"50256\": -100}, "
	           "\"user\": \"u\", \"suffix\": \"s\", \"priority\": 0, \"min_tokens\": 0"),
	    "hi", 2, 2),
	OKS("max_tokens", CMPL, C_BODY("\"max_tokens\": 128"), false, false, true, 128),
	OKS("max_tokens one", CMPL, C_BODY("\"max_tokens\": 1"), false, false, true, 1),
	OKS("max_tokens at the limit", CHAT, H_BODY("\"max_tokens\": 16777216"), false, false,
	    true, 16777216),
	OKS("max_completion_tokens preferred", CHAT,
	    H_BODY("\"max_tokens\": 100, \"max_completion_tokens\": 20"), false, false, true, 20),
	OKS("max_completion_tokens first", CHAT,
	    H_BODY("\"max_completion_tokens\": 20, \"max_tokens\": 100"), false, false, true, 20),
	OKS("max_completion_tokens null", CHAT,
	    H_BODY("\"max_completion_tokens\": null, \"max_tokens\": 100"), false, false, true, 100),
	OKS("max_completion_tokens alone", CHAT, H_BODY("\"max_completion_tokens\": 9"), false,
	    false, true, 9),
	OKS("min_tokens equal", CMPL, C_BODY("\"min_tokens\": 3, \"max_tokens\": 3"), false,
	    false, true, 3),
	OKS("min_tokens without max", CHAT, H_BODY("\"min_tokens\": 300"), false, false, false, 0),
	OKS("stream", CMPL, C_BODY("\"stream\": true"), true, false, false, 0),
	OKS("stream false", CHAT, H_BODY("\"stream\": false"), false, false, false, 0),
	OKS("stream_options empty asks usage", CHAT, H_BODY("\"stream\": true, \"stream_options\": {}"),
	    true, true, false, 0),
	OKS("include_usage true", CMPL,
	    C_BODY("\"stream_options\": {\"include_usage\": true}, \"stream\": true"), true, true,
	    false, 0),
	OKS("include_usage false", CHAT,
	    H_BODY("\"stream\": true, \"stream_options\": {\"include_usage\": false, "
	           "\"continuous_usage_stats\": true}"), true, false, false, 0),
	OKS("include_usage null", CMPL,
	    C_BODY("\"stream\": true, \"stream_options\": {\"include_usage\": null}"), true, false,
	    false, 0),
	OKS("stream_options null without stream", CHAT, H_BODY("\"stream_options\": null"), false,
	    false, false, 0),
	OKH("chat minimal", "{" M ", " MSGS "}", 1, 2),
	OKH("chat roles", H_MSG("{\"role\": \"system\", \"content\": \"ab\"}, "
	                        "{\"role\": \"developer\", \"content\": \"c\"}, "
	                        "{\"role\": \"user\", \"content\": \"d\xc3\xa9\"}, "
	                        "{\"role\": \"assistant\", \"content\": \"\"}, "
	                        "{\"role\": \"tool\", \"content\": \"ef\", \"tool_call_id\": \"1\"}"),
	    5, 7),
	OKH("chat text parts", H_MSG("{\"role\": \"user\", \"content\": [{\"type\": \"text\", "
	                             "\"text\": \"abc\"}, {\"text\": \"de\"}, "
	                             "{\"type\": \"text\", \"text\": \"\xe4\xb8\x96\"}]}"),
	    1, 6),
	OKH("chat refusal part", H_MSG("{\"role\": \"assistant\", \"content\": "
	                               "[{\"type\": \"refusal\", \"refusal\": \"no\"}]}"), 1, 2),
	OKH("chat empty parts", H_MSG("{\"role\": \"user\", \"content\": []}"), 1, 0),
	OKH("chat tool call without content",
	    H_MSG("{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", "
	          "\"tool_calls\": [{\"id\": \"1\", \"type\": \"function\", \"function\": "
	          "{\"name\": \"f\", \"arguments\": \"{}\"}}]}, "
	          "{\"role\": \"tool\", \"content\": \"42\", \"tool_call_id\": \"1\"}"),
	    3, 3),
	OKH("chat tool call null content",
	    H_MSG("{\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{}]}"), 1, 0),
	OKH("chat function_call null content",
	    H_MSG("{\"role\": \"assistant\", \"content\": null, \"function_call\": "
	          "{\"name\": \"f\"}}"), 1, 0),
	OKH("chat message extras pass",
	    H_MSG("{\"role\": \"user\", \"content\": \"ab\", \"name\": \"n\", \"x\": [1]}"), 1, 2),
	OKH("chat fields", "{" M ", " MSGS ", \"logprobs\": true, \"top_logprobs\": 2, "
	                   "\"tools\": [], \"tool_choice\": \"auto\", \"response_format\": "
	                   "{\"type\": \"json_object\"}, \"chat_template_kwargs\": {}, "
	                   "\"prompt\": 5, \"suffix\": 1}", 1, 2),
	OKH("chat tool_choice object", H_BODY("\"tool_choice\": {\"type\": \"function\"}"), 1, 2),
};

static void
test_ok(gconstpointer data)
{
	const struct ok_case *c = data;
	struct parsed p = parse(c->route, c->ctype, c->body);
	json_error_t je;
	json_t *orig;

	if (p.rc != 0)
		g_test_message("refused: %s (%s, %s)", p.err.message, p.err.code, p.err.param);
	g_assert_cmpint(p.rc, ==, 0);
	g_assert_cmpint(p.req.route, ==, c->route);
	g_assert_nonnull(p.req.body);
	g_assert_cmpint(p.req.body->refcount, ==, 1);
	/* the body is forwarded exactly as the client sent it */
	orig = json_loads(c->body, JSON_DECODE_ANY, &je);
	g_assert_nonnull(orig);
	g_assert_true(json_equal(orig, p.req.body));
	json_decref(orig);
	g_assert_cmpstr(p.req.model, ==, json_string_value(json_object_get(p.req.body, "model")));
	g_assert_cmpint(p.req.stream, ==, c->stream);
	g_assert_cmpint(p.req.include_usage, ==, c->include_usage);
	g_assert_cmpint(p.req.max_tokens_set, ==, c->max_tokens_set);
	g_assert_cmpuint(p.req.max_tokens, ==, c->max_tokens);
	g_assert_cmpstr(p.req.prompt, ==, c->prompt);
	g_assert_cmpuint(p.req.prompt_len, ==, c->prompt_len);
	g_assert_cmpuint(p.req.prompt_chars, ==, c->prompt_chars);
	g_assert_cmpuint(p.req.prompt_token_ids, ==, c->token_ids);
	g_assert_cmpuint(p.req.chat_messages, ==, c->chat_messages);
	g_assert_cmpuint(p.req.chat_chars, ==, c->chat_chars);
	nw_client_request_clear(&p.req);
	g_assert_null(p.req.body);
	nw_client_request_clear(&p.req); /* twice is harmless */
}

/* ------------------------------------------- every known field's type --- */

struct field_case {
	const char *name;
	unsigned routes; /* 1: completions, 2: chat */
	const char *wrong, *expected, *right;
};

static const struct field_case field_cases[] = {
	{ "add_generation_prompt", 2, "1", "a boolean", "false" },
	{ "add_special_tokens", 3, "\"no\"", "a boolean", "true" },
	{ "allowed_token_ids", 3, "5", "an array of integers", "[1, 2]" },
	{ "bad_words", 3, "\"w\"", "an array of strings", "[\"w\"]" },
	{ "best_of", 3, "[1]", "the integer 1", "1" },
	{ "chat_template", 2, "{}", "a string", "\"{{x}}\"" },
	{ "chat_template_kwargs", 2, "[]", "an object", "{\"enable_thinking\": false}" },
	{ "continue_final_message", 2, "0", "a boolean", "false" },
	{ "documents", 2, "{}", "an array", "[]" },
	{ "echo", 3, "\"yes\"", "a boolean", "false" },
	{ "frequency_penalty", 3, "\"x\"", "a number", "0.5" },
	{ "ignore_eos", 3, "1", "a boolean", "true" },
	{ "include_stop_str_in_output", 3, "1", "a boolean", "true" },
	{ "length_penalty", 3, "true", "a number", "1" },
	{ "logit_bias", 3, "[]", "an object", "{}" },
	{ "max_completion_tokens", 2, "\"9\"", "a positive integer", "9" },
	{ "max_tokens", 3, "[]", "a positive integer", "9" },
	{ "metadata", 3, "\"m\"", "an object", "{\"k\": \"v\"}" },
	{ "min_p", 3, "\"0\"", "a number", "0.1" },
	{ "min_tokens", 3, "false", "an integer", "1" },
	{ "n", 3, "true", "the integer 1", "1" },
	{ "parallel_tool_calls", 2, "\"t\"", "a boolean", "true" },
	{ "presence_penalty", 3, "{}", "a number", "-1" },
	{ "priority", 3, "1.5", "an integer", "-3" },
	{ "prompt_logprobs", 3, "true", "an integer", "1" },
	{ "reasoning_effort", 2, "1", "a string", "\"low\"" },
	{ "repetition_penalty", 3, "\"1\"", "a number", "1.1" },
	{ "request_id", 3, "1", "a string", "\"abc\"" },
	{ "response_format", 3, "\"json\"", "an object", "{\"type\": \"text\"}" },
	{ "seed", 3, "1.5", "an integer", "-1" },
	{ "skip_special_tokens", 3, "\"t\"", "a boolean", "false" },
	{ "spaces_between_special_tokens", 3, "0", "a boolean", "true" },
	{ "stop", 3, "5", "a string or an array of strings", "[\"a\", \"b\"]" },
	{ "stop_token_ids", 3, "{}", "an array of integers", "[2]" },
	{ "stream", 3, "\"false\"", "a boolean", "false" },
	{ "suffix", 1, "[]", "a string", "\"s\"" },
	{ "temperature", 3, "\"hot\"", "a number", "0.7" },
	{ "tool_choice", 2, "1", "a string or an object", "\"none\"" },
	{ "tools", 2, "{}", "an array", "[]" },
	{ "top_k", 3, "0.5", "an integer", "40" },
	{ "top_logprobs", 2, "true", "an integer", "3" },
	{ "top_p", 3, "[]", "a number", "1" },
	{ "truncate_prompt_tokens", 3, "\"5\"", "an integer", "5" },
	{ "use_beam_search", 3, "1", "a boolean", "false" },
	{ "user", 3, "7", "a string", "\"u\"" },
};

struct field_test {
	const struct field_case *f;
	narwhal_route route;
};

static char *
field_body(const struct field_test *t, const char *value)
{
	return g_strdup_printf("{%s, %s, \"%s\": %s}", M, t->route == CMPL ? P : MSGS,
	                       t->f->name, value);
}

static void
test_field(gconstpointer data)
{
	const struct field_test *t = data;
	char *body = field_body(t, t->f->wrong);
	char *want = g_strdup_printf("%s must be %s; found ", t->f->name, t->f->expected);
	struct parsed p = parse(t->route, JSON, body);

	expect_error(&p, 400, "invalid_type", t->f->name, want);
	g_free(body);
	g_free(want);

	body = field_body(t, t->f->right);
	p = parse(t->route, JSON, body);
	if (p.rc)
		g_test_message("refused: %s", p.err.message);
	g_assert_cmpint(p.rc, ==, 0);
	nw_client_request_clear(&p.req);
	g_free(body);
}

/* A field of one route only is unknown on the other, so a wrong value
 * passes through there. */
static void
test_field_other_route(gconstpointer data)
{
	const struct field_test *t = data;
	char *body = field_body(t, t->f->wrong);
	struct parsed p = parse(t->route, JSON, body);

	if (p.rc)
		g_test_message("refused: %s", p.err.message);
	g_assert_cmpint(p.rc, ==, 0);
	nw_client_request_clear(&p.req);
	g_free(body);
}

/* ------------------------------------------------------------- others --- */

static void
test_limit(void)
{
	const char *body = C_BODY("\"max_tokens\": 101");
	struct nw_parse_limits lim = { .max_tokens_limit = 100 };
	struct parsed p = parse_n(CMPL, JSON, body, strlen(body), &lim);

	expect_error(&p, 400, "invalid_value", "max_tokens",
	             "max_tokens: 101 is out of range: give a positive integer no larger than 100");
	lim.max_tokens_limit = 101;
	p = parse_n(CMPL, JSON, body, strlen(body), &lim);
	g_assert_cmpint(p.rc, ==, 0);
	g_assert_cmpuint(p.req.max_tokens, ==, 101);
	nw_client_request_clear(&p.req);
	lim.max_tokens_limit = 0; /* the default */
	p = parse_n(CMPL, JSON, body, strlen(body), &lim);
	g_assert_cmpint(p.rc, ==, 0);
	nw_client_request_clear(&p.req);
}

/* The exact words of the rule the brief quotes. */
static void
test_message_text(void)
{
	struct parsed p = parse(CMPL, JSON, C_BODY("\"max_tokens\": -5"));

	g_assert_cmpstr(p.err.message, ==, "max_tokens: -5 is out of range: give a positive integer");
	p = parse(CHAT, "text/plain", "{}");
	g_assert_cmpstr(p.err.message, ==,
	                "Content-Type \"text/plain\" is not supported: send application/json");
	p = parse(CMPL, JSON, "{\"model\": \"m\", \"prompt\": ]");
	g_assert_cmpstr(p.err.message, ==,
	                "the body is not valid JSON: unexpected token near ']' (line 1, column 26)");
}

/* Only the given bytes are read: a prefix of a longer buffer parses alone. */
static void
test_length_bound(void)
{
	const char *full = "{" M ", " P "}garbage";
	struct parsed p = parse_n(CMPL, JSON, full, strlen(full) - 7, NULL);

	g_assert_cmpint(p.rc, ==, 0);
	nw_client_request_clear(&p.req);
	p = parse_n(CMPL, JSON, full, 0, NULL);
	expect_error(&p, 400, "empty_body", NULL, "empty");
	/* data may be NULL when there is no body */
	g_assert_cmpint(nw_request_parse(CHAT, NULL, NULL, 0, NULL, &p.req, &p.err), ==, -1);
	g_assert_cmpstr(p.err.code, ==, "empty_body");
}

static void
test_bad_route(void)
{
	struct parsed p = parse((narwhal_route)7, JSON, "{" M ", " P "}");

	g_assert_cmpint(p.rc, ==, -1);
	g_assert_cmpuint(p.err.status, ==, 404);
	g_assert_cmpstr(p.err.code, ==, "not_found");
	g_assert_null(p.req.body);
}

static void
test_route_for_path(void)
{
	narwhal_route r = 0;

	g_assert_true(nw_request_route_for_path("/v1/completions", &r));
	g_assert_cmpint(r, ==, CMPL);
	g_assert_true(nw_request_route_for_path("/v1/chat/completions", &r));
	g_assert_cmpint(r, ==, CHAT);
	g_assert_false(nw_request_route_for_path("/v1/completions/", &r));
	g_assert_false(nw_request_route_for_path("/v1/embeddings", &r));
	g_assert_false(nw_request_route_for_path("", &r));
}

static void
test_helpers(void)
{
	struct nw_client_error e;
	char big[600];

	nw_client_error_model_not_found(&e, "llama-9", "qwen");
	g_assert_cmpuint(e.status, ==, 404);
	g_assert_cmpstr(e.code, ==, "model_not_found");
	g_assert_cmpstr(e.param, ==, "model");
	g_assert_cmpstr(e.message, ==, "model \"llama-9\" is not served here: use \"qwen\" "
	                               "(GET /v1/models lists the served models)");
	check_envelope(&e);
	nw_client_error_model_not_found(&e, "bad\xff\xfe\x80\xc3", NULL);
	g_assert_nonnull(strstr(e.message, "\"bad????\" is not served here"));
	check_envelope(&e);

	nw_client_error_no_route(&e, "GET", "/v1/\x01\xc3/x");
	g_assert_cmpuint(e.status, ==, 404);
	g_assert_cmpstr(e.code, ==, "not_found");
	g_assert_cmpstr(e.param, ==, "");
	g_assert_cmpstr(e.message, ==, "no route for GET /v1/?" "?/x");
	check_envelope(&e);

	nw_client_error_method_not_allowed(&e, "PUT", "/v1/completions", "POST");
	g_assert_cmpuint(e.status, ==, 405);
	g_assert_cmpstr(e.code, ==, "method_not_allowed");
	g_assert_cmpstr(e.message, ==, "PUT is not allowed on /v1/completions: use POST");

	nw_client_error_too_large(&e, 4194304);
	g_assert_cmpuint(e.status, ==, 413);
	g_assert_cmpstr(e.code, ==, "request_too_large");
	g_assert_nonnull(strstr(e.message, "4194304 bytes"));

	nw_client_error_set(&e, 503, "unavailable", NULL, "no engine");
	g_assert_cmpstr(e.type, ==, "server_error");

	/* a cut message ends on a whole character */
	for (size_t i = 0; i + 2 < sizeof big; i += 2)
		memcpy(big + i, "\xc3\xa9", 2);
	big[sizeof big - 1 - (sizeof big - 1) % 2] = '\0';
	for (int shift = 0; shift < 4; shift++) {
		nw_client_error_set(&e, 400, "x", "p", "%.*s%s", shift, "abc", big);
		g_assert_true(g_utf8_validate(e.message, -1, NULL));
		g_assert_cmpuint(strlen(e.message), <, NW_CLIENT_MESSAGE_MAX);
		g_assert_cmpuint(strlen(e.message), >=, NW_CLIENT_MESSAGE_MAX - 4);
		g_assert_null(strchr(e.message, '?'));
	}
	/* a long param is cut too */
	memset(big, 'p', sizeof big);
	big[sizeof big - 1] = '\0';
	nw_client_error_set(&e, 400, "x", big, "m");
	g_assert_cmpuint(strlen(e.param), ==, NW_CLIENT_PARAM_MAX - 1);
}

static void
test_quote(void)
{
	char q[NW_CLIENT_QUOTE_MAX + 8], d[NW_CLIENT_QUOTE_MAX + 40];
	char longs[200];
	json_t *v;

	nw_client_quote(q, sizeof q, "ab", 2);
	g_assert_cmpstr(q, ==, "\"ab\"");
	nw_client_quote(q, sizeof q, "", 0);
	g_assert_cmpstr(q, ==, "\"\"");
	memset(longs, 'x', sizeof longs);
	nw_client_quote(q, sizeof q, longs, sizeof longs);
	g_assert_true(g_str_has_suffix(q, "...\""));
	g_assert_cmpuint(strlen(q), <, sizeof q);
	/* four-byte characters are never split */
	for (size_t i = 0; i + 4 <= sizeof longs; i += 4)
		memcpy(longs + i, "\xf0\x9f\x90\x8b", 4);
	nw_client_quote(q, sizeof q, longs, sizeof longs);
	g_assert_true(g_utf8_validate(q, -1, NULL));
	g_assert_true(g_str_has_suffix(q, "...\""));

	v = json_real(0.1);
	g_assert_cmpstr(nw_client_describe_json(v, d, sizeof d), ==, "the number 0.1");
	json_decref(v);
	v = json_real(1e300);
	g_assert_cmpstr(nw_client_describe_json(v, d, sizeof d), ==, "the number 1e+300");
	json_decref(v);
	v = json_real(-2.0);
	g_assert_cmpstr(nw_client_describe_json(v, d, sizeof d), ==, "the number -2.0");
	json_decref(v);
	v = json_false();
	g_assert_cmpstr(nw_client_describe_json(v, d, sizeof d), ==, "false");
	json_decref(v);
	v = json_object();
	g_assert_cmpstr(nw_client_describe_json(v, d, sizeof d), ==, "an object");
	json_decref(v);
}

/* ---------------------------------------------------------------- main --- */

int
main(int argc, char **argv)
{
	GPtrArray *names = g_ptr_array_new_with_free_func(g_free);
	GArray *fts = g_array_new(FALSE, FALSE, sizeof(struct field_test));
	char *n;

	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/request-parse/router-keys-from-dialects", test_router_keys_from_dialects);

	for (size_t i = 0; i < G_N_ELEMENTS(bad_cases); i++) {
		n = test_name("refused", bad_cases[i].route, bad_cases[i].name);
		g_test_add_data_func(n, &bad_cases[i], test_bad);
		g_ptr_array_add(names, n);
	}
	for (size_t i = 0; i < G_N_ELEMENTS(ok_cases); i++) {
		n = test_name("accepted", ok_cases[i].route, ok_cases[i].name);
		g_test_add_data_func(n, &ok_cases[i], test_ok);
		g_ptr_array_add(names, n);
	}
	/* one entry per field and route, kept alive for the run */
	g_array_set_size(fts, 2 * G_N_ELEMENTS(field_cases));
	for (size_t i = 0; i < G_N_ELEMENTS(field_cases); i++) {
		for (unsigned r = CMPL; r <= CHAT; r++) {
			struct field_test *t = &g_array_index(fts, struct field_test, 2 * i + r - 1);
			bool known = field_cases[i].routes & (1u << (r - 1));

			t->f = &field_cases[i];
			t->route = r;
			n = g_strdup_printf("/request-parse/field/%s/%s%s",
			                    r == CMPL ? "completions" : "chat", field_cases[i].name,
			                    known ? "" : "/unknown-here");
			g_test_add_data_func(n, t, known ? test_field : test_field_other_route);
			g_ptr_array_add(names, n);
		}
	}
	g_test_add_func("/request-parse/limit", test_limit);
	g_test_add_func("/request-parse/message-text", test_message_text);
	g_test_add_func("/request-parse/length-bound", test_length_bound);
	g_test_add_func("/request-parse/bad-route", test_bad_route);
	g_test_add_func("/request-parse/route-for-path", test_route_for_path);
	g_test_add_func("/request-parse/helpers", test_helpers);
	g_test_add_func("/request-parse/quote", test_quote);

	int rc = g_test_run();
	g_ptr_array_unref(names);
	g_array_unref(fts);
	return rc;
}
