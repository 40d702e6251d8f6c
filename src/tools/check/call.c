/*
 * One engine call of a check: what a dialect built (health, models,
 * tokenise, metrics), sent on the check's pool under a timeout, its whole
 * answer collected (bounded), and the reader's words for a failure.
 */
#include "build-config.h"

#include <string.h>

#include "tools/check/checks.h"

/* Metrics pages are the largest answers a check reads. */
#define ANSWER_MAX (16u << 20)

struct check_call {
	nw_check_answer_fn fn;
	void *data;
	long status;
	GString *body;
	int64_t started_us;
};

static void
on_response(void *data, long status)
{
	((struct check_call *)data)->status = status;
}

static bool
on_data(void *data, const char *bytes, size_t len)
{
	struct check_call *c = data;

	if (c->body->len < ANSWER_MAX)
		g_string_append_len(c->body, bytes, (gssize)MIN(len, ANSWER_MAX - c->body->len));
	return true;
}

static void
on_done(void *data, const struct nw_upstream_result *res)
{
	struct check_call *c = data;
	struct nw_check_answer a = {
		.code = res->code, .status = c->status, .error = res->error, .body = c->body,
		.seconds = (double)(g_get_monotonic_time() - c->started_us) / 1e6,
	};

	c->fn(c->data, &a);
	g_string_free(c->body, TRUE);
	g_free(c);
}

static const struct nw_upstream_handlers handlers = {
	.on_response = on_response,
	.on_data = on_data,
	.on_done = on_done,
};

void
nw_check_call(struct nw_check_run *run, const struct nw_dialect *d,
              struct narwhal_http_call *call, double timeout_s, nw_check_answer_fn fn, void *data)
{
	struct check_call *c = g_new0(struct check_call, 1);
	g_autofree char *url = g_strconcat(d->ref.url, call->path, NULL);
	char *body = call->body != NULL ? json_dumps(call->body, JSON_COMPACT) : NULL;
	g_autofree char *request_id = g_strdup_printf("narwhal-check-%" G_GUINT64_FORMAT,
	                                              run->next_handle++);
	struct nw_upstream_request req = {
		.method = call->method != NULL ? call->method : (body != NULL ? "POST" : "GET"),
		.url = url,
		.request_id = request_id,
		.owned_body = body,
		.body_len = body != NULL ? strlen(body) : 0,
		.connect_timeout_ms = MAX(1, (long)(run->cfg->engine.connect_timeout_s * 1000 + 0.5)),
		.timeout_ms = MAX(1, (long)(timeout_s * 1000 + 0.5)),
	};

	json_decref(call->body);
	call->body = NULL;
	c->fn = fn;
	c->data = data;
	c->body = g_string_new(NULL);
	c->started_us = g_get_monotonic_time();
	if (nw_upstream_start(run->pool, &req, &handlers, c) == NULL) {
		struct nw_upstream_result res = {
			.code = NW_UPSTREAM_FAILED, .error = "the call could not start",
		};

		on_done(c, &res);
	}
}

char *
nw_check_answer_problem(const struct nw_dialect *d, const struct nw_check_answer *a,
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

json_t *
nw_check_engine_subject(const struct nw_dialect *d)
{
	return json_pack("{s:s, s:s}", "engine", d->ref.id, "url", d->ref.url);
}

char *
nw_check_seconds(double s)
{
	if (s < 1e-3)
		return g_strdup_printf("%.0f us", s * 1e6);
	if (s < 1.0)
		return g_strdup_printf("%.3g ms", s * 1e3);
	return g_strdup_printf("%.3g s", s);
}

void
nw_check_wait(const bool *flag)
{
	while (!*flag)
		g_main_context_iteration(NULL, TRUE);
}
