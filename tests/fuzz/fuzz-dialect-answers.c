/*
 * libFuzzer target for what an engine answers a dialect outside a stream:
 * parse_error (an error body under an HTTP status, or an in-band event),
 * parse_tokenize, parse_prefill and parse_models. The first byte picks
 * the dialect (dialects.h); the second the parser and, for parse_error,
 * the status; the rest is the body (parsed as the host parses it for the
 * parsers that take JSON). Beyond "no crash, no leak, no read past the
 * body", each answer keeps the ABI's promises (plugin-abi.h):
 * - parse_error is 0 or -EPROTO; it leaves message and param empty on
 *   -EPROTO and keeps the preset under a status that is not an error; its
 *   class is one of the five (a handoff only from a dialect with one, a
 *   context or client class only from a 400-class status); message and
 *   param are terminated, valid UTF-8, and a client error's message (which
 *   the client reads) names no URL and none of the router's keys;
 * - parse_tokenize is 0 or -EPROTO, with a count of at most 2^53 (what the
 *   host's sums keep exact);
 * - parse_prefill gives an object or nothing, and nothing on a failure;
 * - parse_models names a model of valid UTF-8 (for llamacpp, without a
 *   directory), and a positive max_model_len or the preset.
 */
#include "dialects.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_COUNT UINT64_C(9007199254740992) /* 2^53 */

/* The statuses parse_error is asked about: in-band (0), a success, and
 * the errors. */
static const int32_t statuses[] = { 0, 200, 400, 401, 404, 408, 413, 422, 429, 500,
                                    501, 502, 503, 504, 418, 599 };

static bool
valid_utf8(const char *s)
{
	json_t *v = json_string(s); /* jansson refuses invalid UTF-8 */
	bool ok = v != NULL;

	json_decref(v);
	return ok;
}

static bool
terminated(const char *buf, size_t size)
{
	return memchr(buf, '\0', size) != NULL;
}

static void
check_error(const struct fuzz_dialect *d, int32_t status, const char *body, size_t len)
{
	struct narwhal_engine_error err = { .struct_size = sizeof err, .error_class = 77 };
	bool client_status = status == 400 || status == 413 || status == 422;
	int rc;

	memset(err.message, 0, sizeof err.message);
	memset(err.param, 0, sizeof err.param);
	rc = d->ops->parse_error(d->instance, status, body, len, &err);
	if (rc != 0 && rc != -EPROTO)
		abort();
	if (!terminated(err.message, sizeof err.message) || !terminated(err.param, sizeof err.param))
		abort();
	if (!valid_utf8(err.message) || !valid_utf8(err.param))
		abort();
	if (rc == -EPROTO && (err.message[0] != '\0' || err.param[0] != '\0'))
		abort();
	if (err.error_class == 77) {
		/* Only a body without an error under a non-error status leaves
		 * the preset. */
		if (rc == 0 || (status >= 400 && status <= 599))
			abort();
		return;
	}
	if (err.error_class < NARWHAL_ERROR_RETRYABLE || err.error_class > NARWHAL_ERROR_HANDOFF)
		abort();
	if (err.error_class == NARWHAL_ERROR_HANDOFF && !d->handoff)
		abort();
	/* A status the host retries is never the client's fault, and a
	 * client's refusal never comes with a server status. */
	if (status >= 400 && status <= 599 &&
	    (err.error_class == NARWHAL_ERROR_CLIENT ||
	     err.error_class == NARWHAL_ERROR_CONTEXT_TOO_LONG) && !client_status)
		abort();
	/* The client may read a client error's message: never a URL, nor a
	 * refusal of what the router added (its router keys). */
	if (err.error_class == NARWHAL_ERROR_CLIENT) {
		const char *const *keys =
			d->ops->router_keys ? d->ops->router_keys(d->instance) : NULL;

		if (strstr(err.message, "://") != NULL)
			abort();
		for (size_t i = 0; keys != NULL && keys[i] != NULL; i++) {
			if (strstr(err.message, keys[i]) != NULL || strcmp(err.param, keys[i]) == 0)
				abort();
		}
	}
}

static void
check_tokenize(const struct fuzz_dialect *d, const json_t *doc)
{
	uint64_t count = 12345;
	int rc;

	if (d->ops->parse_tokenize == NULL)
		return;
	rc = d->ops->parse_tokenize(d->instance, doc, &count);
	if (rc == 0 ? count > MAX_COUNT : rc != -EPROTO || count != 12345)
		abort();
}

static void
check_prefill(const struct fuzz_dialect *d, const json_t *doc)
{
	json_t *handoff = json_true();
	int rc;

	if (d->ops->parse_prefill == NULL)
		return;
	rc = d->ops->parse_prefill(d->instance, doc, &handoff);
	if (rc != 0 && rc != -EPROTO && rc != -ENOMEM)
		abort();
	if (rc != 0 ? handoff != NULL : handoff != NULL && !json_is_object(handoff))
		abort();
	json_decref(handoff);
}

static void
check_models(const struct fuzz_dialect *d, const json_t *doc)
{
	struct narwhal_model_info info = { .struct_size = sizeof info, .max_model_len = -1 };
	int rc;

	memset(info.name, 0, sizeof info.name);
	rc = d->ops->parse_models(d->instance, doc, &info);
	if (rc != 0 && rc != -EPROTO)
		abort();
	if (!terminated(info.name, sizeof info.name) || !valid_utf8(info.name))
		abort();
	if (rc == 0 && info.name[0] == '\0')
		abort();
	/* llama-server's id is the model file's path without --alias, and the
	 * engine takes any model name: clients see only the file's name. */
	if (strcmp(d->name, "llamacpp") == 0 && strpbrk(info.name, "/\\") != NULL)
		abort();
	if (info.max_model_len != -1 && info.max_model_len <= 0)
		abort();
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const struct fuzz_dialect *d;
	unsigned which;
	char *body;
	json_t *doc;

	if (size < 2)
		return 0;
	d = fuzz_dialect_pick(data[0]);
	which = data[1];
	data += 2;
	size -= 2;
	/* An exact-size copy, so a read past the end is caught. */
	body = malloc(size > 0 ? size : 1);
	if (body == NULL)
		return 0;
	memcpy(body, data, size);
	if (which % 4 == 0) {
		check_error(d, statuses[(which / 4) % (sizeof statuses / sizeof statuses[0])], body,
		            size);
		free(body);
		return 0;
	}
	/* The host hands these parsers the JSON it parsed. */
	doc = json_loadb(body, size, 0, NULL);
	free(body);
	if (doc == NULL)
		return 0;
	switch (which % 4) {
	case 1: check_tokenize(d, doc); break;
	case 2: check_prefill(d, doc); break;
	default: check_models(d, doc); break;
	}
	json_decref(doc);
	return 0;
}
