/*
 * What the dialects of OpenAI-compatible engines share (vLLM, SGLang,
 * llama.cpp): the generation routes, the check of an empty configuration,
 * the error shapes and their classes (spec 4.2) with what a client may read
 * of them, the model list and the SSE events. Compiled into each dialect
 * that uses it; nothing here is exported from a plugin. Reference:
 * engine-wire-formats sections 4 and 5.
 */
#define _GNU_SOURCE /* memmem */
#include "openai.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/json-read.h"

/* ---- requests ----------------------------------------------------------- */

const char *
oai_route_path(narwhal_route route)
{
	switch (route) {
	case NARWHAL_ROUTE_COMPLETIONS: return "/v1/completions";
	case NARWHAL_ROUTE_CHAT_COMPLETIONS: return "/v1/chat/completions";
	}
	return NULL;
}

void
oai_set_call(struct narwhal_http_call *out, const char *method, const char *path, json_t *body)
{
	out->flags = 0;
	out->method = method;
	out->path = path;
	out->body = body;
}

bool
oai_is_token_ids(const json_t *prompt)
{
	size_t i;
	json_t *v;

	if (!json_is_array(prompt) || json_array_size(prompt) == 0)
		return false;
	json_array_foreach(prompt, i, v) {
		if (!json_is_integer(v))
			return false;
	}
	return true;
}

int
oai_copy_key(json_t *body, const json_t *client_body, const char *key)
{
	const json_t *v = json_object_get(client_body, key);

	if (v == NULL || json_is_null(v))
		return 0;
	return json_object_set_new(body, key, json_deep_copy(v));
}

/* ---- configuration ----------------------------------------------------- */

/* Longest key or ID a message shows, in characters (OAI_SHOWN_MAX). */
#define NAME_SHOWN 40

void
oai_shown_name(char *buf, size_t size, const char *name)
{
	size_t o = 0, chars = 0;

	for (const unsigned char *p = (const unsigned char *)name; *p != '\0'; p++) {
		char piece[8];
		size_t n;

		if ((*p & 0xc0) != 0x80 && chars++ == NAME_SHOWN) {
			snprintf(piece, sizeof piece, "...");
		} else if (*p == '"' || *p == '\\') {
			snprintf(piece, sizeof piece, "\\%c", *p);
		} else if (*p < 0x20 || *p == 0x7f) {
			snprintf(piece, sizeof piece, "\\u%04x", *p);
		} else {
			piece[0] = (char)*p;
			piece[1] = '\0';
		}
		n = strlen(piece);
		if (o + n >= size)
			break;
		memcpy(buf + o, piece, n);
		o += n;
		if (chars > NAME_SHOWN)
			break;
	}
	buf[o] = '\0';
}

bool
oai_config_empty(const char *dialect, const json_t *config, char *err, size_t err_len)
{
	const char *key;
	json_t *value;

	if (config == NULL || json_is_null(config))
		return true;
	if (!json_is_object(config)) {
		snprintf(err, err_len, "config must be an empty object: the %s dialect takes no "
		         "options", dialect);
		return false;
	}
	/* Read-only walk; the cast only satisfies the macro's type. */
	json_object_foreach((json_t *)config, key, value) {
		char shown[OAI_SHOWN_MAX];

		(void)value;
		oai_shown_name(shown, sizeof shown, key);
		snprintf(err, err_len, "%s: unknown key: the %s dialect takes no options (none, "
		         "null or {})", shown, dialect);
		return false;
	}
	return true;
}

/* ---- text ------------------------------------------------------------- */

/* Whether hay holds needle; no allocation. This runs on every relayed
 * token event: glibc's memmem is several times faster here than memchr
 * for the first byte, which stops at every quote of the event. */
static bool
contains(const char *hay, size_t len, const char *needle, size_t n)
{
	return memmem(hay, len, needle, n) != NULL;
}

static char
ascii_lower(char c)
{
	return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

/* No allocation. */
bool
oai_contains_ci(const char *hay, const char *needle)
{
	size_t n = strlen(needle);

	for (; *hay != '\0'; hay++) {
		size_t i = 0;

		while (i < n && ascii_lower(hay[i]) == needle[i])
			i++;
		if (i == n)
			return true;
	}
	return false;
}

void
oai_copy_text(char *dst, size_t size, const char *src)
{
	size_t n;

	if (src == NULL) {
		dst[0] = '\0';
		return;
	}
	n = strlen(src);
	if (n >= size) {
		n = size - 1;
		/* Do not end inside a UTF-8 sequence. */
		while (n > 0 && ((unsigned char)src[n] & 0xc0) == 0x80)
			n--;
	}
	memcpy(dst, src, n);
	dst[n] = '\0';
}

/* ---- error classification ---------------------------------------------- */

static void
read_error_object(const json_t *obj, struct oai_error *ef)
{
	ef->message = json_string_value(json_object_get(obj, "message"));
	ef->type = json_string_value(json_object_get(obj, "type"));
	ef->param = json_string_value(json_object_get(obj, "param"));
	ef->code = json_object_get(obj, "code");
}

/*
 * Find the error in a document: the nested {"error": {...}} of vLLM 0.10.1
 * and later, of llama.cpp and of every in-band stream error, or
 * {"error": "text"}; with flat_errors also the flat {"object": "error", ...}
 * of older vLLM and of SGLang. False when the document has none of these
 * shapes.
 */
static bool
find_error(const struct oai_answers *a, const json_t *doc, struct oai_error *ef)
{
	const json_t *error;

	memset(ef, 0, sizeof *ef);
	if (!json_is_object(doc))
		return false;
	error = json_object_get(doc, "error");
	if (json_is_object(error)) {
		read_error_object(error, ef);
		return true;
	}
	if (json_is_string(error)) {
		ef->message = json_string_value(error);
		return true;
	}
	if (a->flat_errors && json_is_string(json_object_get(doc, "object")) &&
	    strcmp(json_string_value(json_object_get(doc, "object")), "error") == 0) {
		read_error_object(doc, ef);
		return true;
	}
	return false;
}

/* Error type names and the status each stands for: vLLM's exception class
 * names and HTTP reason phrases, the OpenAI-style names and llama.cpp's. */
static const struct {
	const char *type;
	int status;
} type_status[] = {
	{ "BadRequestError", 400 },          { "Bad Request", 400 },
	{ "invalid_request_error", 400 },    { "AuthenticationError", 401 },
	{ "authentication_error", 401 },     { "Unauthorized", 401 },
	{ "PermissionDeniedError", 403 },    { "permission_error", 403 },
	{ "Forbidden", 403 },                { "NotFoundError", 404 },
	{ "not_found_error", 404 },          { "Not Found", 404 },
	{ "MethodNotAllowedError", 405 },    { "Method Not Allowed", 405 },
	{ "RequestTimeoutError", 408 },      { "Request Timeout", 408 },
	{ "ConflictError", 409 },            { "RequestEntityTooLargeError", 413 },
	{ "UnprocessableEntityError", 422 }, { "Unprocessable Entity", 422 },
	{ "RateLimitError", 429 },           { "rate_limit_error", 429 },
	{ "Too Many Requests", 429 },        { "InternalServerError", 500 },
	{ "server_error", 500 },             { "Internal Server Error", 500 },
	{ "NotImplementedError", 501 },      { "not_supported_error", 501 },
	{ "Not Implemented", 501 },          { "BadGatewayError", 502 },
	{ "Bad Gateway", 502 },              { "ServiceUnavailableError", 503 },
	{ "unavailable_error", 503 },        { "Service Unavailable", 503 },
	{ "GatewayTimeoutError", 504 },      { "Gateway Timeout", 504 },
	{ "exceed_context_size_error", 400 }, { "service_unavailable_error", 503 },
};

/* The status an error answer reports about itself: an integer code that is
 * an HTTP error status, else its type's status, else 0 (unknown). */
static int
reported_status(const struct oai_error *ef)
{
	if (json_is_integer(ef->code)) {
		json_int_t code = json_integer_value(ef->code);

		if (code >= 400 && code <= 599)
			return (int)code;
	}
	if (ef->type != NULL) {
		for (size_t i = 0; i < sizeof type_status / sizeof type_status[0]; i++) {
			if (strcmp(ef->type, type_status[i].type) == 0)
				return type_status[i].status;
		}
	}
	return 0;
}

/* The parameters vLLM names when a request does not fit the context. */
static bool
is_length_param(const char *param)
{
	return param != NULL &&
	       (strcmp(param, "input_tokens") == 0 || strcmp(param, "input_text") == 0 ||
	        strcmp(param, "max_tokens") == 0);
}

/*
 * A 400 that means "does not fit the model's context". vLLM's wording has
 * changed several times but always says "context length"; with a length
 * parameter named, any mention of the context will do. llama.cpp has a
 * type for it, and its older builds say "context size". The OpenAI-style
 * code string is a shape, not text, and is taken as well.
 */
static bool
is_context_too_long(const struct oai_answers *a, const struct oai_error *ef)
{
	if (json_is_string(ef->code) &&
	    strcmp(json_string_value(ef->code), "context_length_exceeded") == 0)
		return true;
	if (ef->type != NULL && strcmp(ef->type, "exceed_context_size_error") == 0)
		return true;
	if (ef->message == NULL)
		return false;
	if (oai_contains_ci(ef->message, "context length") ||
	    (a->context_size_words && oai_contains_ci(ef->message, "context size")))
		return true;
	return is_length_param(ef->param) && oai_contains_ci(ef->message, "context");
}

/* Spec 4.2: only these may be retried. A 400, 413 or 422 refuses the
 * client's own request (validation), whose message the client may see;
 * every other status is permanent. */
static narwhal_error_class
status_class(int status)
{
	switch (status) {
	case 408:
	case 429:
	case 500:
	case 502:
	case 503:
	case 504:
		return NARWHAL_ERROR_RETRYABLE;
	case 400:
	case 413:
	case 422:
		return NARWHAL_ERROR_CLIENT;
	default:
		return NARWHAL_ERROR_PERMANENT;
	}
}

/* Whether the error names one of the keys the router sets: its param is
 * one, or its message mentions one. */
static bool
names_router_key(const struct oai_answers *a, const struct oai_error *ef)
{
	for (size_t i = 0; a->router_keys != NULL && a->router_keys[i] != NULL; i++) {
		if ((ef->param != NULL && strcmp(ef->param, a->router_keys[i]) == 0) ||
		    (ef->message != NULL && strstr(ef->message, a->router_keys[i]) != NULL))
			return true;
	}
	return false;
}

/* Class of an error whose HTTP status is status (0: take the one the body
 * reports) in a dialect's answers. The client never sends a router key
 * (the host refuses it), so a refusal of one is the router's request
 * failing, not the client's: permanent, and its words (the bootstrap
 * address, the handoff) are not the client's to read. */
static narwhal_error_class
classify(const struct oai_answers *a, int status, const struct oai_error *ef)
{
	narwhal_error_class c;

	if (status == 0)
		status = reported_status(ef);
	if (status == 400 && is_context_too_long(a, ef))
		return NARWHAL_ERROR_CONTEXT_TOO_LONG;
	if ((status == 0 || status >= 500) && a->handoff != NULL && a->handoff(ef))
		return NARWHAL_ERROR_HANDOFF;
	c = status_class(status);
	return c == NARWHAL_ERROR_CLIENT && names_router_key(a, ef) ? NARWHAL_ERROR_PERMANENT : c;
}

/* ---- what a client may read of an engine's message ---------------------- */

static bool
is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static bool
is_host_char(char c)
{
	return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '.' ||
	       c == '-' || c == '_';
}

/* A dotted quad somewhere in w[0..n). */
static bool
has_ipv4(const char *w, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		size_t j = i;
		int groups = 0;

		if (i > 0 && (is_digit(w[i - 1]) || w[i - 1] == '.'))
			continue;
		while (groups < 4) {
			size_t digits = 0;

			while (j < n && is_digit(w[j]) && digits < 4) {
				j++;
				digits++;
			}
			if (digits == 0 || digits > 3)
				break;
			if (++groups < 4 && (j >= n || w[j++] != '.'))
				break;
		}
		if (groups == 4 && (j >= n || !is_digit(w[j])))
			return true;
	}
	return false;
}

/* host:port as w[0..n): a host name or address (not a number alone, as in
 * a time) and 2 to 5 digits. */
static bool
is_host_port(const char *w, size_t n)
{
	size_t colon = n, digits;
	bool named = false;

	while (colon > 0 && w[colon - 1] != ':')
		colon--;
	if (colon < 2)
		return false;
	digits = n - colon;
	for (size_t i = colon; i < n; i++) {
		if (!is_digit(w[i]))
			return false;
	}
	for (size_t i = 0; i + 1 < colon; i++) {
		if (!is_host_char(w[i]))
			return false;
		named |= !is_digit(w[i]);
	}
	return named && digits >= 2 && digits <= 5;
}

/* Whether a word (no blanks) names a place on the engine's side: a URL,
 * an address, a host and port, a file path. */
static bool
is_private_word(const char *w, size_t n)
{
	if (memchr(w, '\\', n) != NULL || contains(w, n, "://", 3) || contains(w, n, "::", 2))
		return true;
	if (has_ipv4(w, n) || is_host_port(w, n))
		return true;
	/* /dir/file, ~/file, ./file, ../file */
	if (n >= 2 && w[0] == '/' && memchr(w + 1, '/', n - 1) != NULL)
		return true;
	return (n >= 2 && (w[0] == '~' || w[0] == '.') && w[1] == '/') ||
	       (n >= 3 && w[0] == '.' && w[1] == '.' && w[2] == '/');
}

static bool
is_blank_char(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Append n bytes to out (of size bytes, *o used), as many as fit. */
static void
put(char *out, size_t size, size_t *o, const char *s, size_t n)
{
	if (n > size - 1 - *o)
		n = size - 1 - *o;
	memcpy(out + *o, s, n);
	*o += n;
}

/*
 * Hide from a message a client will read what names a place on the
 * engine's side: each word (between blanks, without the quotes,
 * parentheses and punctuation around it) that is a URL, an IP address, a
 * host and port or a file path becomes "[hidden]". A traceback is an
 * internal message as a whole: nothing of it is left.
 */
static void
hide_private(char *msg, size_t size)
{
	/* Room for the worst case: every word a two-byte one hidden. */
	char out[5 * NARWHAL_ENGINE_MESSAGE_MAX];
	size_t o = 0;

	if (strstr(msg, "Traceback (most recent call last)") != NULL ||
	    strstr(msg, "File \"") != NULL) {
		msg[0] = '\0';
		return;
	}
	for (const char *p = msg; *p != '\0';) {
		const char *word = p, *w, *e;

		if (is_blank_char(*p)) {
			put(out, sizeof out, &o, p++, 1);
			continue;
		}
		while (*p != '\0' && !is_blank_char(*p))
			p++;
		/* [w, e): the word without what may wrap it. */
		w = word;
		while (w < p && strchr("\"'`(", *w) != NULL)
			w++;
		e = p;
		while (e > w && strchr("\"'`).,;:!?", e[-1]) != NULL)
			e--;
		put(out, sizeof out, &o, word, (size_t)(w - word));
		if (e > w && is_private_word(w, (size_t)(e - w)))
			put(out, sizeof out, &o, "[hidden]", 8);
		else
			put(out, sizeof out, &o, w, (size_t)(e - w));
		put(out, sizeof out, &o, e, (size_t)(p - e));
	}
	out[o] = '\0';
	oai_copy_text(msg, size, out);
}

int
oai_parse_error(const struct oai_answers *a, int32_t http_status, const char *body, size_t len,
                struct narwhal_engine_error *out)
{
	bool status = http_status >= 400 && http_status <= 599;
	struct oai_error ef;
	json_t *doc = NULL;
	bool found;

	if (out == NULL)
		return -EINVAL;
	if (body != NULL && len > 0)
		doc = nw_json_read(body, len, 0, NULL);
	found = find_error(a, doc, &ef);
	/* Where errors may be flat, an object without a known error shape may
	 * still be one: its fields are read, and it is one when it has a
	 * message. */
	if (!found && a->flat_errors && json_is_object(doc)) {
		read_error_object(doc, &ef);
		found = ef.message != NULL;
	}
	/* An HTTP error status is the answer even without a body to read
	 * (spec 4.2); otherwise (an in-band error, status 0, or an error body
	 * under 2xx) the body says its own, and without one the host's
	 * presets stand. */
	if (status || found)
		out->error_class = classify(a, status ? http_status : 0, &ef);
	if (found) {
		oai_copy_text(out->message, sizeof out->message, ef.message);
		oai_copy_text(out->param, sizeof out->param, ef.param);
		if (out->error_class == NARWHAL_ERROR_CLIENT)
			hide_private(out->message, sizeof out->message);
	}
	json_decref(doc);
	return found ? 0 : -EPROTO;
}

int
oai_parse_models(const json_t *response, struct narwhal_model_info *out)
{
	const json_t *id, *len;

	if (response == NULL || out == NULL)
		return -EINVAL;
	id = json_object_get(json_array_get(json_object_get(response, "data"), 0), "id");
	if (!json_is_string(id) || json_string_length(id) == 0 ||
	    json_string_length(id) >= sizeof out->name)
		return -EPROTO;
	oai_copy_text(out->name, sizeof out->name, json_string_value(id));
	len = json_object_get(json_array_get(json_object_get(response, "data"), 0),
	                      "max_model_len");
	if (json_is_integer(len) && json_integer_value(len) > 0)
		out->max_model_len = json_integer_value(len);
	return 0;
}

/* ---- SSE events --------------------------------------------------------- */

static bool
nonempty_string(const json_t *v)
{
	return json_is_string(v) && json_string_length(v) > 0;
}

/* Whether one choice carries generated output. */
static bool
choice_has_output(const json_t *choice)
{
	const json_t *delta, *tools;

	if (!json_is_object(choice))
		return false;
	/* Completions. */
	if (nonempty_string(json_object_get(choice, "text")))
		return true;
	/* Chat; "message" when a request that cannot stream (beam search)
	 * arrives as one event holding the whole response. */
	delta = json_object_get(choice, "delta");
	if (!json_is_object(delta))
		delta = json_object_get(choice, "message");
	if (!json_is_object(delta))
		return false;
	tools = json_object_get(delta, "tool_calls");
	return nonempty_string(json_object_get(delta, "content")) ||
	       nonempty_string(json_object_get(delta, "reasoning")) ||
	       nonempty_string(json_object_get(delta, "reasoning_content")) ||
	       (json_is_array(tools) && json_array_size(tools) > 0);
}

int64_t
oai_count(const json_t *v)
{
	json_int_t n = json_integer_value(v);

	return json_is_integer(v) && n >= 0 && n <= ((json_int_t)1 << 53) ? (int64_t)n : -1;
}

int64_t
oai_usage_count(const json_t *usage, const char *key)
{
	return oai_count(json_object_get(usage, key));
}

static bool
is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

/* The success terminator, allowing stray whitespace around it. */
bool
oai_is_done(const char *data, size_t len)
{
	while (len > 0 && is_space(data[0])) {
		data++;
		len--;
	}
	while (len > 0 && is_space(data[len - 1]))
		len--;
	return len == 6 && memcmp(data, "[DONE]", 6) == 0;
}

static int
hex_digit(char c)
{
	return c >= '0' && c <= '9' ? c - '0'
	       : c >= 'a' && c <= 'f' ? c - 'a' + 10
	       : c >= 'A' && c <= 'F' ? c - 'A' + 10
	                              : -1;
}

/* Whether the text holds a \u escape of a printable ASCII character, which
 * no engine's JSON writer makes but which can spell a key ("\u0065rror"
 * is "error" to a parser). */
static bool
has_escaped_ascii(const char *p, size_t len)
{
	const char *end = p + len;

	while ((p = memchr(p, '\\', (size_t)(end - p))) != NULL && end - p >= 6) {
		if (p[1] == '\\') {
			p += 2; /* an escaped backslash */
			continue;
		}
		if (p[1] == 'u' && p[2] == '0' && p[3] == '0' && hex_digit(p[4]) >= 2 &&
		    hex_digit(p[4]) <= 7 && hex_digit(p[5]) >= 0)
			return true;
		p++;
	}
	return false;
}

/* Whether "\"error\"" is in the text, found from its 'o' with memchr: a
 * token event holds a dozen at most, and this beats memmem on one. */
static bool
has_error_key(const char *data, size_t len)
{
	const char *end = data + len, *o = data + 4;

	while (len >= 7 && o < end - 2) {
		o = memchr(o, 'o', (size_t)(end - 2 - o));
		if (o == NULL)
			return false;
		if (memcmp(o - 4, "\"error\"", 7) == 0)
			return true;
		o++;
	}
	return false;
}

/* After the first token only the terminator (an event of its own) or an
 * error changes what the host does, and a token event holds no error key
 * outside its strings (inside them a quote is escaped, so "\"error\""
 * cannot match there). A key or value spelt with escapes of plain letters
 * is parsed too. */
bool
oai_sniff_sse(const char *data, size_t len)
{
	return oai_is_done(data, len) || has_error_key(data, len) ||
	       has_escaped_ascii(data, len);
}

/* What every reading of a payload fills: no output, no usage. */
static void
event_clear(struct narwhal_sse_event *out)
{
	out->tokens = 0;
	out->prompt_tokens = -1;
	out->completion_tokens = -1;
}

/*
 * One data payload read as JSON. tokens counts the choices that carry
 * output in this event; the engines send one token per choice per event
 * unless they batch, so it is an event count, and exact totals come from
 * usage. Usage is read from any event that has it (vLLM's
 * continuous_usage_stats puts it on every chunk; llama.cpp's last chunk
 * carries it beside its finish reason).
 */
int
oai_parse_sse_json(const struct oai_answers *a, const json_t *doc, struct narwhal_sse_event *out)
{
	const json_t *choices, *usage;
	struct oai_error ef;
	size_t i;
	json_t *choice;

	if (out == NULL)
		return -EINVAL;
	event_clear(out);
	if (!json_is_object(doc))
		return -EPROTO;
	usage = json_object_get(doc, "usage");
	if (json_is_object(usage)) {
		out->prompt_tokens = oai_usage_count(usage, "prompt_tokens");
		out->completion_tokens = oai_usage_count(usage, "completion_tokens");
	} else {
		usage = NULL;
	}
	choices = json_object_get(doc, "choices");
	if (find_error(a, doc, &ef)) {
		/* In-band: the status is already 200, so the body says it. */
		out->kind = NARWHAL_SSE_ERROR;
		out->error_class = classify(a, 0, &ef);
	} else if (json_is_array(choices) && json_array_size(choices) > 0) {
		json_array_foreach(choices, i, choice) {
			if (choice_has_output(choice))
				out->tokens++;
		}
		out->kind = out->tokens > 0                              ? NARWHAL_SSE_TOKENS
		            : usage != NULL && a->usage_beside_choices ? NARWHAL_SSE_USAGE
		                                                         : NARWHAL_SSE_OTHER;
	} else {
		out->kind = usage != NULL ? NARWHAL_SSE_USAGE : NARWHAL_SSE_OTHER;
	}
	return 0;
}

/* One data payload: the terminator, or an event read as JSON. */
int
oai_parse_sse(const struct oai_answers *a, const char *data, size_t len,
              struct narwhal_sse_event *out)
{
	json_t *doc;
	int rc;

	if (data == NULL || out == NULL)
		return -EINVAL;
	if (oai_is_done(data, len)) {
		event_clear(out);
		out->kind = NARWHAL_SSE_DONE;
		return 0;
	}
	doc = nw_json_read(data, len, 0, NULL);
	rc = oai_parse_sse_json(a, doc, out);
	json_decref(doc);
	return rc;
}
