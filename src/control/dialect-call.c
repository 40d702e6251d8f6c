#include "build-config.h"

#include "control/dialect-call.h"

#include <string.h>

struct nw_dialect_call {
	struct nw_upstream_call *call;
	nw_dialect_answer_fn fn;
	void *data;
	long status;
	GString *body;
	size_t body_max;
	bool truncated;
	int64_t started_us;
};

static void
call_free(struct nw_dialect_call *c)
{
	g_string_free(c->body, TRUE);
	g_free(c);
}

static void
on_response(void *data, long status)
{
	((struct nw_dialect_call *)data)->status = status;
}

static bool
on_data(void *data, const char *bytes, size_t len)
{
	struct nw_dialect_call *c = data;

	if (c->body->len + len > c->body_max) {
		c->truncated = true;
		len = c->body_max - MIN(c->body->len, c->body_max);
	}
	g_string_append_len(c->body, bytes, (gssize)len);
	return true;
}

static void
on_done(void *data, const struct nw_upstream_result *res)
{
	struct nw_dialect_call *c = data;
	struct nw_dialect_answer a = {
		.code = res->code, .status = c->status, .error = res->error, .body = c->body,
		.truncated = c->truncated,
		.seconds = (double)(g_get_monotonic_time() - c->started_us) / 1e6,
	};

	c->call = NULL;
	c->fn(c->data, &a);
	call_free(c);
}

static const struct nw_upstream_handlers handlers = {
	.on_response = on_response,
	.on_data = on_data,
	.on_done = on_done,
};

struct nw_dialect_call *
nw_dialect_call_start(const struct nw_dialect_call_options *o, struct narwhal_http_call *call,
                      nw_dialect_answer_fn fn, void *data)
{
	struct nw_dialect_call *c;
	g_autofree char *url = g_strconcat(o->dialect->ref.url, call->path, NULL);
	char *body = call->body != NULL ? json_dumps(call->body, JSON_COMPACT) : NULL;
	struct nw_upstream_request req = {
		.method = call->method != NULL ? call->method : (body != NULL ? "POST" : "GET"),
		.url = url,
		.request_id = o->request_id,
		.owned_body = body,
		.body_len = body != NULL ? strlen(body) : 0,
		.connect_timeout_ms = MAX(1, (long)(o->connect_timeout_s * 1000 + 0.5)),
		.timeout_ms = MAX(1, (long)(o->timeout_s * 1000 + 0.5)),
	};

	json_decref(call->body);
	call->body = NULL;
	c = g_new0(struct nw_dialect_call, 1);
	c->fn = fn;
	c->data = data;
	c->body = g_string_new(NULL);
	c->body_max = o->body_max;
	c->started_us = g_get_monotonic_time();
	c->call = nw_upstream_start(o->pool, &req, &handlers, c);
	if (c->call == NULL) {
		call_free(c);
		return NULL;
	}
	return c;
}

void
nw_dialect_call_cancel(struct nw_dialect_call *c)
{
	if (c == NULL)
		return;
	nw_upstream_cancel(c->call);
	call_free(c);
}

char *
nw_dialect_answer_problem(const struct nw_dialect *d, const struct nw_dialect_answer *a,
                          const char *timeout_field, double timeout_s)
{
	struct narwhal_engine_error err;

	if (a->code == NW_UPSTREAM_TIMEOUT)
		return g_strdup_printf("no answer within %s (%g s)", timeout_field, timeout_s);
	if (a->code != NW_UPSTREAM_OK)
		return g_strdup(a->error != NULL ? a->error : "the call failed");
	nw_dialect_read_error(d, a->status, a->body->str, a->body->len, &err);
	return g_strdup_printf("HTTP %ld%s%s", a->status, err.message[0] ? ": " : "",
	                       err.message);
}
