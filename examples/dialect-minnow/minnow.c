/* minnow.c: a Narwhal dialect plugin for Minnow, a made-up engine whose
 * wire format README.md describes. Minnow generates through the OpenAI
 * routes and differs at the edges: its own token count, health, model and
 * statistics routes and its own error shape, and no KV handoff, so every
 * engine of this dialect runs whole requests. Config: {"count": boolean},
 * optional (default true; false for a Minnow without POST /count). Built
 * against plugin ABI 2. */
#include <narwhal/plugin-abi.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if NARWHAL_ABI_MAJOR != 2
#error "minnow.c is written for plugin ABI 2"
#endif

struct minnow {
	bool count; /* the engine has POST /count */
};

static int
minnow_create(const struct narwhal_host *host, const json_t *config, void **instance,
              char *err, size_t err_len)
{
	struct minnow *m;
	bool count = true;
	const char *key;
	json_t *value;

	(void)host; /* no clock, log or fleet needed */
	if (config != NULL && !json_is_null(config) && !json_is_object(config)) {
		snprintf(err, err_len, "config must be an object");
		return -EINVAL;
	}
	json_object_foreach((json_t *)config, key, value) {
		if (strcmp(key, "count") != 0) {
			snprintf(err, err_len, "unknown key \"%s\": only count is accepted", key);
			return -EINVAL;
		}
		if (!json_is_boolean(value)) {
			snprintf(err, err_len, "count: must be true or false");
			return -EINVAL;
		}
		count = json_is_true(value);
	}
	m = calloc(1, sizeof *m);
	if (m == NULL) {
		snprintf(err, err_len, "out of memory");
		return -ENOMEM;
	}
	m->count = count;
	*instance = m;
	return 0;
}

static void
minnow_destroy(void *instance)
{
	free(instance);
}

/* No KV handoff: aggregate-only, never paired (docs/plugins.md, section 5). */
static uint32_t
minnow_capabilities(void *instance, const struct narwhal_engine_ref *engine)
{
	(void)instance;
	(void)engine;
	return 0;
}

static void
set_call(struct narwhal_http_call *out, const char *method, const char *path, json_t *body)
{
	out->flags = 0;
	out->method = method;
	out->path = path;
	out->body = body;
}

/* ---- requests ------------------------------------------------------------ */

/* POST /count {"text": prompt}. A prompt of token IDs needs no call; a
 * batch or a chat (Minnow counts plain text only) is sized by characters. */
static int
minnow_build_tokenize(void *instance, const struct narwhal_dialect_target *target,
                      struct narwhal_http_call *out)
{
	struct minnow *m = instance;
	const json_t *prompt = json_object_get(target->client_body, "prompt");
	json_t *body;

	if (json_is_array(prompt) && json_array_size(prompt) > 0 &&
	    json_is_integer(json_array_get(prompt, 0)))
		return -EALREADY;
	if (!m->count || target->route != NARWHAL_ROUTE_COMPLETIONS || !json_is_string(prompt))
		return -ENOTSUP;
	body = json_pack("{s:O}", "text", prompt);
	if (body == NULL)
		return -ENOMEM;
	set_call(out, "POST", "/count", body);
	return 0;
}

/* {"n": 7} */
static int
minnow_parse_tokenize(void *instance, const json_t *response, uint64_t *prompt_tokens)
{
	const json_t *n = json_object_get(response, "n");

	(void)instance;
	if (!json_is_integer(n) || json_integer_value(n) < 0)
		return -EPROTO;
	*prompt_tokens = (uint64_t)json_integer_value(n);
	return 0;
}

/* The client's body as it came: Minnow takes the OpenAI request. */
static int
minnow_build_aggregate(void *instance, const struct narwhal_dialect_target *target,
                       struct narwhal_http_call *out)
{
	(void)instance;
	switch (target->route) {
	case NARWHAL_ROUTE_COMPLETIONS:
		set_call(out, "POST", "/v1/completions", NULL);
		break;
	case NARWHAL_ROUTE_CHAT_COMPLETIONS:
		set_call(out, "POST", "/v1/chat/completions", NULL);
		break;
	default:
		return -EINVAL;
	}
	out->flags = NARWHAL_CALL_CLIENT_BODY;
	return 0;
}

static int
minnow_build_health(void *instance, const struct narwhal_engine_ref *engine,
                    struct narwhal_http_call *out)
{
	(void)instance;
	(void)engine;
	set_call(out, "GET", "/ping", NULL);
	return 0;
}

static int
minnow_build_models(void *instance, const struct narwhal_engine_ref *engine,
                    struct narwhal_http_call *out)
{
	(void)instance;
	(void)engine;
	set_call(out, "GET", "/info", NULL);
	return 0;
}

static int
minnow_build_metrics(void *instance, const struct narwhal_engine_ref *engine,
                     struct narwhal_http_call *out)
{
	(void)instance;
	(void)engine;
	set_call(out, "GET", "/stats", NULL);
	return 0;
}

/* ---- answers ------------------------------------------------------------- */

/* Copy a string into a fixed buffer; when it does not fit, cut it short
 * at a character boundary, since the host may show it to a client. */
static void
copy_text(char *dst, size_t size, const char *src)
{
	size_t n = src != NULL ? strlen(src) : 0;

	if (n >= size) {
		n = size - 1;
		while (n > 0 && ((unsigned char)src[n] & 0xc0) == 0x80)
			n--; /* src[n] continues a UTF-8 sequence */
	}
	if (n > 0)
		memcpy(dst, src, n);
	dst[n] = '\0';
}

/* {"model": "minnow-7b", "context": 8192, ...} */
static int
minnow_parse_models(void *instance, const json_t *response, struct narwhal_model_info *out)
{
	const json_t *model = json_object_get(response, "model");
	const json_t *context = json_object_get(response, "context");

	(void)instance;
	if (!json_is_string(model) || json_string_length(model) == 0 ||
	    json_string_length(model) >= sizeof out->name)
		return -EPROTO;
	copy_text(out->name, sizeof out->name, json_string_value(model));
	if (json_is_integer(context) && json_integer_value(context) > 0)
		out->max_model_len = json_integer_value(context);
	return 0;
}

/* A fault's kind, as the host classes it; 0 for a kind this dialect does
 * not know, which keeps the class the HTTP status gives (spec 4.2). */
static narwhal_error_class
fault_class(const char *kind)
{
	if (kind == NULL)
		return 0;
	if (strcmp(kind, "busy") == 0)
		return NARWHAL_ERROR_RETRYABLE;
	if (strcmp(kind, "too_long") == 0)
		return NARWHAL_ERROR_CONTEXT_TOO_LONG;
	if (strcmp(kind, "bad_request") == 0)
		return NARWHAL_ERROR_CLIENT;
	return 0;
}

/* {"fault": {"kind", "detail", "field"}}, in an error body and as an
 * in-band stream event (http_status 0) alike. */
static int
minnow_parse_error(void *instance, int32_t http_status, const char *body, size_t len,
                   struct narwhal_engine_error *out)
{
	json_t *doc = body != NULL ? json_loadb(body, len, 0, NULL) : NULL;
	const json_t *fault = json_object_get(doc, "fault");
	narwhal_error_class fc;

	(void)instance;
	if (!json_is_object(fault)) {
		json_decref(doc);
		return -EPROTO; /* not Minnow's: the class from the status stands */
	}
	fc = fault_class(json_string_value(json_object_get(fault, "kind")));
	if (fc != 0)
		out->error_class = fc;
	else if (http_status == 0)
		out->error_class = NARWHAL_ERROR_PERMANENT;
	copy_text(out->message, sizeof out->message,
	          json_string_value(json_object_get(fault, "detail")));
	copy_text(out->param, sizeof out->param, json_string_value(json_object_get(fault, "field")));
	json_decref(doc);
	return 0;
}

/* GET /stats is JSON: {"active", "queued", "cache_used", "started_at"}. */
static int
minnow_parse_metrics(void *instance, const char *body, size_t len,
                     struct narwhal_engine_metrics *out)
{
	json_t *doc = json_loadb(body, len, 0, NULL);
	const json_t *v;

	(void)instance;
	if (!json_is_object(doc)) {
		json_decref(doc);
		return -EPROTO;
	}
	if (json_is_integer(v = json_object_get(doc, "active")) && json_integer_value(v) >= 0)
		out->running = json_integer_value(v);
	if (json_is_integer(v = json_object_get(doc, "queued")) && json_integer_value(v) >= 0)
		out->waiting = json_integer_value(v);
	if (json_is_number(v = json_object_get(doc, "cache_used")) && json_number_value(v) >= 0 &&
	    json_number_value(v) <= 1)
		out->kv_usage = json_number_value(v);
	if (json_is_number(v = json_object_get(doc, "started_at")))
		out->start_time_s = json_number_value(v);
	json_decref(doc);
	return 0;
}

/* ---- stream events ------------------------------------------------------- */

static bool
has_text(const json_t *v)
{
	return json_is_string(v) && json_string_length(v) > 0;
}

/* One "data:" payload: [DONE], an OpenAI chunk, or {"fault": ...}. */
static int
minnow_parse_sse(void *instance, const char *data, size_t len, struct narwhal_sse_event *out)
{
	const json_t *choices, *usage, *fault, *choice;
	json_t *doc;
	size_t i;

	(void)instance;
	if (len == 6 && memcmp(data, "[DONE]", 6) == 0) {
		out->kind = NARWHAL_SSE_DONE;
		return 0;
	}
	doc = json_loadb(data, len, 0, NULL);
	if (!json_is_object(doc)) {
		json_decref(doc);
		return -EPROTO;
	}
	fault = json_object_get(doc, "fault");
	choices = json_object_get(doc, "choices");
	usage = json_object_get(doc, "usage");
	if (json_is_object(fault)) {
		narwhal_error_class fc =
			fault_class(json_string_value(json_object_get(fault, "kind")));

		out->kind = NARWHAL_SSE_ERROR;
		out->error_class = fc != 0 ? fc : NARWHAL_ERROR_PERMANENT;
		json_decref(doc);
		return 0;
	}
	json_array_foreach(choices, i, choice) {
		if (has_text(json_object_get(choice, "text")) ||
		    has_text(json_object_get(json_object_get(choice, "delta"), "content")))
			out->tokens++;
	}
	if (json_is_object(usage)) {
		const json_t *p = json_object_get(usage, "prompt_tokens");
		const json_t *c = json_object_get(usage, "completion_tokens");

		out->prompt_tokens = json_is_integer(p) ? json_integer_value(p) : -1;
		out->completion_tokens = json_is_integer(c) ? json_integer_value(c) : -1;
	}
	out->kind = out->tokens > 0 ? NARWHAL_SSE_TOKENS
	            : json_is_object(usage) ? NARWHAL_SSE_USAGE : NARWHAL_SSE_OTHER;
	json_decref(doc);
	return 0;
}

/* Whether a payload after the first token may be more than a token: the
 * terminator or a fault. A token's text cannot hold "fault" in quotes
 * unescaped. */
static bool
minnow_sniff_sse(void *instance, const char *data, size_t len)
{
	static const char *const marks[] = { "[DONE]", "\"fault\"" };

	(void)instance;
	for (size_t m = 0; m < sizeof marks / sizeof marks[0]; m++) {
		size_t n = strlen(marks[m]);

		for (size_t i = 0; i + n <= len; i++)
			if (memcmp(data + i, marks[m], n) == 0)
				return true;
	}
	return false;
}

static const struct narwhal_dialect_ops minnow_ops = {
	.struct_size = sizeof(struct narwhal_dialect_ops),
	.create = minnow_create,
	.destroy = minnow_destroy,
	.capabilities = minnow_capabilities,
	.build_tokenize = minnow_build_tokenize,
	.parse_tokenize = minnow_parse_tokenize,
	.build_aggregate = minnow_build_aggregate,
	.build_health = minnow_build_health,
	.parse_sse = minnow_parse_sse,
	.sniff_sse = minnow_sniff_sse,
	.parse_error = minnow_parse_error,
	.build_models = minnow_build_models,
	.parse_models = minnow_parse_models,
	.build_metrics = minnow_build_metrics,
	.parse_metrics = minnow_parse_metrics,
};

NARWHAL_DIALECT_PLUGIN("minnow", "1.0.0", &minnow_ops)
