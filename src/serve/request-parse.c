/*
 * Client request validation: content type, body framing, one JSON parse,
 * then the body's fields. The route's defining field (prompt or messages)
 * and model are checked first; every other known field is type-checked in
 * body order through one sorted table; unknown fields pass through, as
 * vLLM accepts them. The first problem found is reported.
 *
 * Hot path: one parse (core/json-read.h: json_loadb's verdicts and error
 * positions, read faster), borrowed pointers into its result, no copies
 * and no allocation of our own; messages are formatted only on error.
 */
#include "build-config.h"

#include "serve/request-parse.h"

#include "core/json-read.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOKEN_ID_MAX INT32_MAX

/* Characters (code points) in text already checked to be UTF-8. */
static size_t
utf8_chars(const char *s, size_t n)
{
	size_t count = 0;

	for (size_t i = 0; i < n; i++)
		count += ((unsigned char)s[i] & 0xc0) != 0x80;
	return count;
}

/* --------------------------------------------------------- the walk --- */

struct ctx {
	narwhal_route route;
	uint32_t max_tokens_limit;
	struct nw_client_request *out;
	struct nw_client_error *err;
	/* seen during the walk, judged after it */
	const json_t *stream_options;
	bool max_tokens_set, mct_set, min_tokens_set;
	uint32_t max_tokens, mct;
	json_int_t min_tokens;
};

G_GNUC_PRINTF(4, 5)
static int
bad(struct ctx *c, const char *code, const char *param, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	nw_client_error_vset(c->err, 400, code, param, fmt, ap);
	va_end(ap);
	return -1;
}

static int
wrong_type(struct ctx *c, const char *param, const char *expected, const json_t *v)
{
	char d[NW_CLIENT_QUOTE_MAX + 40];

	return bad(c, "invalid_type", param, "%s must be %s; found %s", param, expected,
	           nw_client_describe_json(v, d, sizeof d));
}

/* max_tokens and max_completion_tokens: a positive integer up to the limit. */
static int
token_count(struct ctx *c, const char *param, const json_t *v, uint32_t *value)
{
	json_int_t n;

	if (!json_is_integer(v))
		return wrong_type(c, param, "a positive integer", v);
	n = json_integer_value(v);
	if (n <= 0)
		return bad(c, "invalid_value", param,
		           "%s: %" JSON_INTEGER_FORMAT " is out of range: give a positive integer",
		           param, n);
	if (n > (json_int_t)c->max_tokens_limit)
		return bad(c, "invalid_value", param,
		           "%s: %" JSON_INTEGER_FORMAT " is out of range: give a positive integer "
		           "no larger than %u", param, n, c->max_tokens_limit);
	*value = (uint32_t)n;
	return 0;
}

/* n and best_of: Narwhal runs one sequence per request. */
static int
only_one(struct ctx *c, const char *param, const json_t *v)
{
	json_int_t n;

	if (!json_is_integer(v))
		return wrong_type(c, param, "the integer 1", v);
	n = json_integer_value(v);
	if (n < 1)
		return bad(c, "invalid_value", param,
		           "%s: %" JSON_INTEGER_FORMAT " is out of range: the only accepted value "
		           "is 1", param, n);
	if (n > 1)
		return bad(c, "unsupported_value", param,
		           "%s: %" JSON_INTEGER_FORMAT " is not supported: Narwhal serves one "
		           "sequence per request, since several cannot share one prefill/decode "
		           "handoff; send separate requests, and give %s as 1 or omit it",
		           param, n, param);
	return 0;
}

/* Each element of array v must satisfy is(); param[i] names a bad one. */
static int
each(struct ctx *c, const char *param, const json_t *v, int (*is)(const json_t *),
     const char *expected)
{
	size_t i;
	const json_t *e;

	json_array_foreach(v, i, e) {
		if (!is(e)) {
			char p[NW_CLIENT_PARAM_MAX];
			snprintf(p, sizeof p, "%s[%zu]", param, i);
			return wrong_type(c, p, expected, e);
		}
	}
	return 0;
}

/* jansson's type tests are macros; each() needs functions */
static int
is_string(const json_t *v)
{
	return json_is_string(v);
}

static int
is_integer(const json_t *v)
{
	return json_is_integer(v);
}

enum kind {
	K_EARLY,          /* model, prompt, messages, prompt_embeds: checked before the walk */
	K_BOOL,
	K_INT,
	K_NUMBER,
	K_STRING,
	K_OBJECT,
	K_ARRAY,
	K_STRINGS,        /* a string or an array of strings */
	K_STRING_LIST,
	K_INT_LIST,
	K_STRING_OR_OBJECT,
	K_LOGPROBS,       /* completions: an integer; chat: a boolean */
	K_MAX_TOKENS,
	K_MCT,
	K_MIN_TOKENS,
	K_STREAM,
	K_STREAM_OPTIONS,
	K_ONE,            /* n, best_of */
};

#define CMPL (1u << NARWHAL_ROUTE_COMPLETIONS)
#define CHAT (1u << NARWHAL_ROUTE_CHAT_COMPLETIONS)
#define BOTH (CMPL | CHAT)

struct field {
	const char *name;
	uint8_t kind;
	uint8_t routes;
};

/* The OpenAI and vLLM request fields Narwhal knows, sorted by name for
 * bsearch. A field outside its route is unknown there and passes through. */
static const struct field fields[] = {
	{ "add_generation_prompt", K_BOOL, CHAT },
	{ "add_special_tokens", K_BOOL, BOTH },
	{ "allowed_token_ids", K_INT_LIST, BOTH },
	{ "bad_words", K_STRING_LIST, BOTH },
	{ "best_of", K_ONE, BOTH },
	{ "chat_template", K_STRING, CHAT },
	{ "chat_template_kwargs", K_OBJECT, CHAT },
	{ "continue_final_message", K_BOOL, CHAT },
	{ "documents", K_ARRAY, CHAT },
	{ "echo", K_BOOL, BOTH },
	{ "frequency_penalty", K_NUMBER, BOTH },
	{ "ignore_eos", K_BOOL, BOTH },
	{ "include_stop_str_in_output", K_BOOL, BOTH },
	{ "length_penalty", K_NUMBER, BOTH },
	{ "logit_bias", K_OBJECT, BOTH },
	{ "logprobs", K_LOGPROBS, BOTH },
	{ "max_completion_tokens", K_MCT, CHAT },
	{ "max_tokens", K_MAX_TOKENS, BOTH },
	{ "messages", K_EARLY, CHAT },
	{ "metadata", K_OBJECT, BOTH },
	{ "min_p", K_NUMBER, BOTH },
	{ "min_tokens", K_MIN_TOKENS, BOTH },
	{ "model", K_EARLY, BOTH },
	{ "n", K_ONE, BOTH },
	{ "parallel_tool_calls", K_BOOL, CHAT },
	{ "presence_penalty", K_NUMBER, BOTH },
	{ "priority", K_INT, BOTH },
	{ "prompt", K_EARLY, CMPL },
	{ "prompt_embeds", K_EARLY, CMPL },
	{ "prompt_logprobs", K_INT, BOTH },
	{ "reasoning_effort", K_STRING, CHAT },
	{ "repetition_penalty", K_NUMBER, BOTH },
	{ "request_id", K_STRING, BOTH },
	{ "response_format", K_OBJECT, BOTH },
	{ "seed", K_INT, BOTH },
	{ "skip_special_tokens", K_BOOL, BOTH },
	{ "spaces_between_special_tokens", K_BOOL, BOTH },
	{ "stop", K_STRINGS, BOTH },
	{ "stop_token_ids", K_INT_LIST, BOTH },
	{ "stream", K_STREAM, BOTH },
	{ "stream_options", K_STREAM_OPTIONS, BOTH },
	{ "suffix", K_STRING, CMPL },
	{ "temperature", K_NUMBER, BOTH },
	{ "tool_choice", K_STRING_OR_OBJECT, CHAT },
	{ "tools", K_ARRAY, CHAT },
	{ "top_k", K_INT, BOTH },
	{ "top_logprobs", K_INT, CHAT },
	{ "top_p", K_NUMBER, BOTH },
	{ "truncate_prompt_tokens", K_INT, BOTH },
	{ "use_beam_search", K_BOOL, BOTH },
	{ "user", K_STRING, BOTH },
};

static int
field_cmp(const void *key, const void *elem)
{
	return strcmp(key, ((const struct field *)elem)->name);
}

static int
check_stream_options(struct ctx *c, const json_t *v)
{
	static const char *const flags[] = { "include_usage", "continuous_usage_stats" };

	if (!json_is_object(v))
		return wrong_type(c, "stream_options", "an object", v);
	for (size_t i = 0; i < G_N_ELEMENTS(flags); i++) {
		const json_t *f = json_object_get(v, flags[i]);
		if (f && !json_is_boolean(f) && !json_is_null(f)) {
			char p[NW_CLIENT_PARAM_MAX];
			snprintf(p, sizeof p, "stream_options.%s", flags[i]);
			return wrong_type(c, p, "a boolean", f);
		}
	}
	c->stream_options = v;
	return 0;
}

static int
check_field(struct ctx *c, const struct field *f, const json_t *v)
{
	const char *p = f->name;

	switch ((enum kind)f->kind) {
	case K_EARLY:
		return 0;
	case K_BOOL:
		return json_is_boolean(v) ? 0 : wrong_type(c, p, "a boolean", v);
	case K_INT:
		return json_is_integer(v) ? 0 : wrong_type(c, p, "an integer", v);
	case K_NUMBER:
		return json_is_number(v) ? 0 : wrong_type(c, p, "a number", v);
	case K_STRING:
		return json_is_string(v) ? 0 : wrong_type(c, p, "a string", v);
	case K_OBJECT:
		return json_is_object(v) ? 0 : wrong_type(c, p, "an object", v);
	case K_ARRAY:
		return json_is_array(v) ? 0 : wrong_type(c, p, "an array", v);
	case K_STRINGS:
		if (json_is_string(v))
			return 0;
		if (json_is_array(v))
			return each(c, p, v, is_string, "a string");
		return wrong_type(c, p, "a string or an array of strings", v);
	case K_STRING_LIST:
		if (!json_is_array(v))
			return wrong_type(c, p, "an array of strings", v);
		return each(c, p, v, is_string, "a string");
	case K_INT_LIST:
		if (!json_is_array(v))
			return wrong_type(c, p, "an array of integers", v);
		return each(c, p, v, is_integer, "an integer");
	case K_STRING_OR_OBJECT:
		if (json_is_string(v) || json_is_object(v))
			return 0;
		return wrong_type(c, p, "a string or an object", v);
	case K_LOGPROBS:
		if (c->route == NARWHAL_ROUTE_CHAT_COMPLETIONS)
			return json_is_boolean(v) ? 0 : wrong_type(c, p, "a boolean", v);
		return json_is_integer(v) ? 0 : wrong_type(c, p, "an integer", v);
	case K_MAX_TOKENS:
		c->max_tokens_set = true;
		return token_count(c, p, v, &c->max_tokens);
	case K_MCT:
		c->mct_set = true;
		return token_count(c, p, v, &c->mct);
	case K_MIN_TOKENS:
		if (!json_is_integer(v))
			return wrong_type(c, p, "an integer", v);
		c->min_tokens = json_integer_value(v);
		c->min_tokens_set = true;
		if (c->min_tokens < 0)
			return bad(c, "invalid_value", p,
			           "min_tokens: %" JSON_INTEGER_FORMAT " is out of range: give an "
			           "integer from 0", c->min_tokens);
		return 0;
	case K_STREAM:
		if (!json_is_boolean(v))
			return wrong_type(c, p, "a boolean", v);
		c->out->stream = json_is_true(v);
		return 0;
	case K_STREAM_OPTIONS:
		return check_stream_options(c, v);
	case K_ONE:
		return only_one(c, p, v);
	}
	return bad(c, "unsupported_value", p, "%s is not a field Narwhal knows", p);
}

/* Whether key is one the dialects own (struct nw_parse_limits). */
static bool
router_owned(const char *const *keys, const char *key)
{
	for (; keys != NULL && *keys != NULL; keys++) {
		if (strcmp(*keys, key) == 0)
			return true;
	}
	return false;
}

/* ------------------------------------------------------ model, prompt --- */

static int
check_model(struct ctx *c, const json_t *body)
{
	const json_t *v = json_object_get(body, "model");

	if (!v || json_is_null(v))
		return bad(c, "missing_field", "model",
		           "model is required: give the name of a served model (GET /v1/models "
		           "lists them)");
	if (!json_is_string(v))
		return wrong_type(c, "model", "a string", v);
	if (json_string_length(v) == 0)
		return bad(c, "invalid_value", "model",
		           "model is empty: give the name of a served model (GET /v1/models lists "
		           "them)");
	c->out->model = json_string_value(v);
	return 0;
}

/* A token-id prompt: a non-empty array of ids in 0..2^31-1. */
static int
token_ids(struct ctx *c, const char *param, const json_t *v)
{
	size_t i, n = json_array_size(v);
	const json_t *e;

	if (n == 0)
		return bad(c, "invalid_value", param,
		           "%s is an empty array: give a string, or an array of at least one "
		           "token id", param);
	if (n > UINT32_MAX)
		return bad(c, "invalid_value", param, "%s holds too many token ids", param);
	json_array_foreach(v, i, e) {
		char p[NW_CLIENT_PARAM_MAX];

		if (json_is_integer(e) && json_integer_value(e) >= 0 &&
		    json_integer_value(e) <= TOKEN_ID_MAX)
			continue;
		snprintf(p, sizeof p, "%s[%zu]", param, i);
		if (!json_is_integer(e))
			return wrong_type(c, p, "a token id (an integer)", e);
		return bad(c, "invalid_value", p,
		           "%s: %" JSON_INTEGER_FORMAT " is out of range: token ids are integers "
		           "from 0 to %d", p, json_integer_value(e), TOKEN_ID_MAX);
	}
	c->out->prompt_token_ids = (uint32_t)n;
	return 0;
}

static void
prompt_text(struct ctx *c, const json_t *s)
{
	c->out->prompt = json_string_value(s);
	c->out->prompt_len = json_string_length(s);
	c->out->prompt_chars = utf8_chars(c->out->prompt, c->out->prompt_len);
}

static int
check_prompt(struct ctx *c, const json_t *body)
{
	const json_t *v = json_object_get(body, "prompt");
	const json_t *emb = json_object_get(body, "prompt_embeds");
	const json_t *first;
	size_t n;

	if (emb && !json_is_null(emb))
		return bad(c, "unsupported_value", "prompt_embeds",
		           "prompt_embeds is not supported: Narwhal routes text and token-id "
		           "prompts only; give prompt instead");
	if (!v || json_is_null(v))
		return bad(c, "missing_field", "prompt",
		           "prompt is required: give a string or an array of token ids");
	if (json_is_string(v)) {
		prompt_text(c, v);
		return 0;
	}
	if (!json_is_array(v))
		return wrong_type(c, "prompt", "a string or an array of token ids", v);
	n = json_array_size(v);
	first = json_array_get(v, 0);
	if (n == 0 || json_is_integer(first))
		return token_ids(c, "prompt", v);
	if (json_is_string(first) || json_is_array(first)) {
		/* A list of prompts: one is that prompt, more is a batch. */
		int (*is)(const json_t *) = json_is_string(first) ? is_string : NULL;
		size_t i;
		const json_t *e;

		json_array_foreach(v, i, e) {
			if (is ? is(e) : json_is_array(e))
				continue;
			char p[NW_CLIENT_PARAM_MAX];
			snprintf(p, sizeof p, "prompt[%zu]", i);
			return wrong_type(c, p, is ? "a string, like prompt[0]" :
			                  "an array of token ids, like prompt[0]", e);
		}
		if (n > 1)
			return bad(c, "unsupported_value", "prompt",
			           "prompt holds %zu prompts: Narwhal serves one sequence per "
			           "request; send each prompt in its own request", n);
		if (is) {
			prompt_text(c, first);
			return 0;
		}
		return token_ids(c, "prompt[0]", first);
	}
	return wrong_type(c, "prompt[0]", "a string or a token id", first);
}

/* --------------------------------------------------------- messages --- */

static bool
known_role(const char *role)
{
	static const char *const roles[] = { "system", "user", "assistant", "tool", "developer" };

	for (size_t i = 0; i < G_N_ELEMENTS(roles); i++)
		if (strcmp(role, roles[i]) == 0)
			return true;
	return false;
}

/* One content part: text (and refusal) is counted; anything else would
 * need sizing the router cannot do. */
static int
check_part(struct ctx *c, size_t mi, size_t pi, const json_t *part)
{
	char p[NW_CLIENT_PARAM_MAX];
	const json_t *type, *text;
	const char *t, *member = "text";

	snprintf(p, sizeof p, "messages[%zu].content[%zu]", mi, pi);
	if (!json_is_object(part))
		return wrong_type(c, p, "an object like {\"type\": \"text\", \"text\": \"...\"}", part);
	type = json_object_get(part, "type");
	if (!type || json_is_null(type)) {
		/* vLLM reads a bare {"text": ...} as a text part */
		if (!json_is_string(json_object_get(part, "text"))) {
			g_strlcat(p, ".type", sizeof p);
			return bad(c, "missing_field", p, "%s is required: give \"text\"", p);
		}
		t = "text";
	} else if (!json_is_string(type)) {
		g_strlcat(p, ".type", sizeof p);
		return wrong_type(c, p, "a string", type);
	} else {
		t = json_string_value(type);
	}
	if (strcmp(t, "refusal") == 0) {
		member = "refusal";
	} else if (strcmp(t, "text") != 0) {
		char q[NW_CLIENT_QUOTE_MAX + 8];

		g_strlcat(p, ".type", sizeof p);
		nw_client_quote(q, sizeof q, t, json_string_length(type));
		return bad(c, "unsupported_value", p,
		           "%s: %s is not supported: Narwhal sizes prompts from text only; send "
		           "text parts", p, q);
	}
	text = json_object_get(part, member);
	g_strlcat(p, ".", sizeof p);
	g_strlcat(p, member, sizeof p);
	if (!text)
		return bad(c, "missing_field", p, "%s is required for a %s part", p, t);
	if (!json_is_string(text))
		return wrong_type(c, p, "a string", text);
	c->out->chat_chars += utf8_chars(json_string_value(text), json_string_length(text));
	return 0;
}

static int
check_message(struct ctx *c, size_t i, const json_t *m)
{
	char p[NW_CLIENT_PARAM_MAX];
	const json_t *role, *content, *calls, *v;

	snprintf(p, sizeof p, "messages[%zu]", i);
	if (!json_is_object(m))
		return wrong_type(c, p, "an object with role and content", m);

	snprintf(p, sizeof p, "messages[%zu].role", i);
	role = json_object_get(m, "role");
	if (!role || json_is_null(role))
		return bad(c, "missing_field", p,
		           "%s is required: give system, user, assistant, tool or developer", p);
	if (!json_is_string(role))
		return wrong_type(c, p, "a string", role);
	if (!known_role(json_string_value(role))) {
		char q[NW_CLIENT_QUOTE_MAX + 8];
		nw_client_quote(q, sizeof q, json_string_value(role), json_string_length(role));
		return bad(c, "invalid_value", p,
		           "%s: %s is not a valid role: give system, user, assistant, tool or "
		           "developer", p, q);
	}

	v = json_object_get(m, "name");
	if (v && !json_is_null(v) && !json_is_string(v)) {
		snprintf(p, sizeof p, "messages[%zu].name", i);
		return wrong_type(c, p, "a string", v);
	}
	calls = json_object_get(m, "tool_calls");
	if (calls && !json_is_null(calls) && !json_is_array(calls)) {
		snprintf(p, sizeof p, "messages[%zu].tool_calls", i);
		return wrong_type(c, p, "an array", calls);
	}

	snprintf(p, sizeof p, "messages[%zu].content", i);
	content = json_object_get(m, "content");
	if (!content || json_is_null(content)) {
		/* only an assistant turn that calls tools may carry no content */
		const json_t *fc = json_object_get(m, "function_call");
		if (strcmp(json_string_value(role), "assistant") == 0 &&
		    (json_array_size(calls) > 0 || (fc && !json_is_null(fc))))
			return 0;
		return bad(c, "missing_field", p,
		           "%s is required: give a string or an array of text parts (only an "
		           "assistant message with tool_calls may leave it null)", p);
	}
	if (json_is_string(content)) {
		c->out->chat_chars +=
			utf8_chars(json_string_value(content), json_string_length(content));
		return 0;
	}
	if (json_is_array(content)) {
		size_t j;
		const json_t *part;

		json_array_foreach(content, j, part)
			if (check_part(c, i, j, part) < 0)
				return -1;
		return 0;
	}
	return wrong_type(c, p, "a string or an array of text parts", content);
}

static int
check_messages(struct ctx *c, const json_t *body)
{
	const json_t *v = json_object_get(body, "messages"), *m;
	size_t i;

	if (!v || json_is_null(v))
		return bad(c, "missing_field", "messages",
		           "messages is required: give a non-empty array of {\"role\", "
		           "\"content\"} objects");
	if (!json_is_array(v))
		return wrong_type(c, "messages", "an array of messages", v);
	if (json_array_size(v) == 0)
		return bad(c, "invalid_value", "messages",
		           "messages is an empty array: give at least one message");
	if (json_array_size(v) > UINT32_MAX)
		return bad(c, "invalid_value", "messages", "messages holds too many messages");
	json_array_foreach(v, i, m)
		if (check_message(c, i, m) < 0)
			return -1;
	c->out->chat_messages = (uint32_t)json_array_size(v);
	return 0;
}

/* ---------------------------------------------------- the body itself --- */

static bool
ows(char ch)
{
	return ch == ' ' || ch == '\t';
}

/* application/json, any case, optionally with parameters; a charset, if
 * given, must be UTF-8 since JSON is (RFC 8259). */
static bool
content_type_is_json(const char *ct)
{
	const char *p = ct;

	while (ows(*p))
		p++;
	if (g_ascii_strncasecmp(p, "application/json", 16) != 0)
		return false;
	p += 16;
	while (ows(*p))
		p++;
	while (*p == ';') {
		const char *name, *val;
		size_t nlen, vlen;

		for (p++; ows(*p); p++)
			;
		for (name = p; *p && *p != '=' && *p != ';' && !ows(*p); p++)
			;
		nlen = (size_t)(p - name);
		while (ows(*p))
			p++;
		val = p;
		vlen = 0;
		if (*p == '=') {
			for (p++; ows(*p); p++)
				;
			if (*p == '"') {
				val = ++p;
				while (*p && *p != '"')
					p++;
				vlen = (size_t)(p - val);
				if (*p == '"')
					p++;
			} else {
				for (val = p; *p && *p != ';' && !ows(*p); p++)
					;
				vlen = (size_t)(p - val);
			}
		}
		if (nlen == 7 && g_ascii_strncasecmp(name, "charset", 7) == 0 &&
		    !(vlen == 5 && g_ascii_strncasecmp(val, "utf-8", 5) == 0) &&
		    !(vlen == 4 && g_ascii_strncasecmp(val, "utf8", 4) == 0))
			return false;
		while (ows(*p))
			p++;
		if (*p && *p != ';')
			return false;
	}
	return *p == '\0';
}

static bool
blank(const char *data, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (data[i] != ' ' && data[i] != '\t' && data[i] != '\n' && data[i] != '\r')
			return false;
	return true;
}

static int
parse_body(const char *data, size_t len, struct nw_client_error *err, json_t **root)
{
	const char *nul;
	json_error_t je;

	if (len == 0 || blank(data, len)) {
		nw_client_error_set(err, 400, "empty_body", NULL,
		                    "the request body is empty: send a JSON object");
		return -1;
	}
	/* jansson would also refuse these, in less helpful words */
	nul = memchr(data, '\0', len);
	if (nul) {
		nw_client_error_set(err, 400, "invalid_json", NULL,
		                    "the body holds a NUL byte at offset %zu: JSON text cannot "
		                    "contain one", (size_t)(nul - data));
		return -1;
	}
	if (len >= 3 && memcmp(data, "\xef\xbb\xbf", 3) == 0) {
		nw_client_error_set(err, 400, "invalid_json", NULL,
		                    "the body starts with a UTF-8 byte order mark: send the JSON "
		                    "without it");
		return -1;
	}
	*root = nw_json_read(data, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
	if (!*root) {
		if (json_error_code(&je) == json_error_out_of_memory)
			nw_client_error_set(err, 500, "internal_error", NULL,
			                    "out of memory while reading the request");
		else
			nw_client_error_from_json(err, &je);
		return -1;
	}
	if (!json_is_object(*root)) {
		char d[NW_CLIENT_QUOTE_MAX + 40];

		nw_client_error_set(err, 400, "invalid_type", NULL,
		                    "the body must be a JSON object; found %s",
		                    nw_client_describe_json(*root, d, sizeof d));
		json_decref(*root);
		*root = NULL;
		return -1;
	}
	return 0;
}

/* Rules that span fields, after the walk has seen them all. */
static int
check_across(struct ctx *c)
{
	struct nw_client_request *out = c->out;

	if (c->stream_options && !out->stream)
		return bad(c, "invalid_value", "stream_options",
		           "stream_options is only allowed when stream is true");
	if (c->stream_options) {
		/* vLLM's default: a stream_options object asks for usage */
		const json_t *iu = json_object_get(c->stream_options, "include_usage");
		out->include_usage = !iu || json_is_true(iu);
	}
	if (c->route == NARWHAL_ROUTE_CHAT_COMPLETIONS && c->mct_set) {
		out->max_tokens_set = true;
		out->max_tokens = c->mct;
	} else if (c->max_tokens_set) {
		out->max_tokens_set = true;
		out->max_tokens = c->max_tokens;
	}
	if (c->min_tokens_set && out->max_tokens_set &&
	    c->min_tokens > (json_int_t)out->max_tokens)
		return bad(c, "invalid_value", "min_tokens",
		           "min_tokens: %" JSON_INTEGER_FORMAT " is more than %s allows (%u): "
		           "give at most %u", c->min_tokens,
		           c->route == NARWHAL_ROUTE_CHAT_COMPLETIONS && c->mct_set ?
		           "max_completion_tokens" : "max_tokens", out->max_tokens, out->max_tokens);
	return 0;
}

bool
nw_request_route_for_path(const char *path, narwhal_route *route)
{
	if (strcmp(path, "/v1/completions") == 0)
		*route = NARWHAL_ROUTE_COMPLETIONS;
	else if (strcmp(path, "/v1/chat/completions") == 0)
		*route = NARWHAL_ROUTE_CHAT_COMPLETIONS;
	else
		return false;
	return true;
}

const char *
nw_request_path_for_route(narwhal_route route)
{
	return route == NARWHAL_ROUTE_CHAT_COMPLETIONS ? "/v1/chat/completions" : "/v1/completions";
}

int
nw_request_parse(narwhal_route route, const char *content_type, const char *data, size_t len,
                 const struct nw_parse_limits *lim, struct nw_client_request *out,
                 struct nw_client_error *err)
{
	struct ctx c = { .route = route, .out = out, .err = err };
	unsigned bit;
	json_t *root = NULL, *v;
	const char *key;

	memset(out, 0, sizeof *out);
	c.max_tokens_limit = lim && lim->max_tokens_limit ? lim->max_tokens_limit :
	                     NW_MAX_TOKENS_LIMIT_DEFAULT;
	if (route != NARWHAL_ROUTE_COMPLETIONS && route != NARWHAL_ROUTE_CHAT_COMPLETIONS) {
		nw_client_error_set(err, 404, "not_found", NULL, "no such completion route");
		return -1;
	}
	bit = 1u << route;
	/* An absent or empty Content-Type is read as JSON, as vLLM does. */
	if (content_type && content_type[0] && !content_type_is_json(content_type)) {
		char q[NW_CLIENT_QUOTE_MAX + 8];
		nw_client_quote(q, sizeof q, content_type, strlen(content_type));
		nw_client_error_set(err, 415, "unsupported_media_type", NULL,
		                    "Content-Type %s is not supported: send application/json", q);
		return -1;
	}
	if (parse_body(data, len, err, &root) < 0)
		return -1;

	out->route = route;
	if (check_model(&c, root) < 0)
		goto fail;
	if (route == NARWHAL_ROUTE_COMPLETIONS ? check_prompt(&c, root) < 0 :
	    check_messages(&c, root) < 0)
		goto fail;
	json_object_foreach(root, key, v) {
		const struct field *f;

		/* Refused even as null: only the router sets a handoff. */
		if (router_owned(lim ? lim->router_keys : NULL, key)) {
			bad(&c, "unsupported_value", key, "%s may not come from a client: Narwhal "
			    "sets it for the prefill/decode handoff; remove it", key);
			goto fail;
		}
		f = bsearch(key, fields, G_N_ELEMENTS(fields), sizeof fields[0], field_cmp);
		if (!f || !(f->routes & bit))
			continue; /* unknown here: passed through, as vLLM accepts it */
		/* null is absent for optional fields, as in vLLM */
		if (json_is_null(v))
			continue;
		if (check_field(&c, f, v) < 0)
			goto fail;
	}
	if (check_across(&c) < 0)
		goto fail;
	out->body = root;
	return 0;

fail:
	json_decref(root);
	memset(out, 0, sizeof *out);
	return -1;
}

void
nw_client_request_clear(struct nw_client_request *r)
{
	json_decref(r->body);
	memset(r, 0, sizeof *r);
}
