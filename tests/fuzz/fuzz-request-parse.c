/*
 * libFuzzer target for client request parsing: arbitrary bytes go through
 * nw_request_parse for both routes, with and without a Content-Type, and
 * from a buffer of exactly their length so any over-read trips ASan. The
 * first input byte picks the Content-Type, so the fuzzer explores header
 * parsing as well. Beyond "no crash, no leak", each outcome must keep the
 * parser's promises: an error is a 4xx with a UTF-8 message a client can
 * be sent; a success holds a body object with a non-empty model and sizes
 * that fit the input.
 */
#include "build-config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "serve/request-parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const content_types[] = {
	NULL,
	"application/json",
	"Application/JSON; charset=UTF-8",
	"application/json; charset=latin1",
	"text/plain",
	"",
};

/* The message and param go into a JSON string: they must encode. */
static void
check_error(const struct nw_client_error *err)
{
	json_t *s;

	if (err->status < 400 || err->status > 499 || !err->code || !err->type ||
	    !err->message[0])
		abort();
	if (strlen(err->message) >= sizeof err->message ||
	    strlen(err->param) >= sizeof err->param)
		abort();
	s = json_string(err->message);
	if (!s)
		abort();
	json_decref(s);
	s = json_string(err->param);
	if (!s)
		abort();
	json_decref(s);
	for (const char *p = err->message; *p; p++)
		if ((unsigned char)*p < 0x20)
			abort();
}

static void
check_request(const struct nw_client_request *r, narwhal_route route, size_t size)
{
	if (!json_is_object(r->body) || r->route != route || !r->model || !r->model[0])
		abort();
	if (r->prompt_len > size || r->prompt_chars > r->prompt_len || r->chat_chars > size)
		abort();
	if (route == NARWHAL_ROUTE_COMPLETIONS && !r->prompt && r->prompt_token_ids == 0)
		abort();
	if (route == NARWHAL_ROUTE_CHAT_COMPLETIONS && (r->prompt || r->chat_messages == 0))
		abort();
	if (r->max_tokens_set && (r->max_tokens == 0 || r->max_tokens > NW_MAX_TOKENS_LIMIT_DEFAULT))
		abort();
	if (r->include_usage && !r->stream)
		abort();
}

static void
run(narwhal_route route, const char *ctype, const char *buf, size_t len)
{
	struct nw_client_request req;
	struct nw_client_error err;

	if (nw_request_parse(route, ctype, buf, len, NULL, &req, &err) == 0) {
		check_request(&req, route, len);
		nw_client_request_clear(&req);
	} else {
		if (req.body)
			abort();
		check_error(&err);
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *pick;
	char *buf;

	if (size == 0) {
		run(NARWHAL_ROUTE_COMPLETIONS, NULL, NULL, 0);
		return 0;
	}
	pick = content_types[data[0] % G_N_ELEMENTS(content_types)];
	/* exactly sized, not NUL-terminated */
	buf = malloc(size);
	if (!buf)
		return 0;
	memcpy(buf, data, size);
	for (int route = NARWHAL_ROUTE_COMPLETIONS; route <= NARWHAL_ROUTE_CHAT_COMPLETIONS; route++) {
		run((narwhal_route)route, NULL, buf, size);
		run((narwhal_route)route, pick, buf, size);
		/* the body without the selector byte, too, so seeds stay readable */
		run((narwhal_route)route, "application/json", buf + 1, size - 1);
	}
	free(buf);
	return 0;
}
