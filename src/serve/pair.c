#include "build-config.h"

#include "serve/pair.h"

#include <string.h>

#include "core/log.h"
#include "serve/phases.h"
#include "serve/request.h"
#include "serve/serve-internal.h"

/* Only an error answer is kept, and only its start. */
#define PAIR_ERROR_MAX (16u << 10)

static void
on_response(void *data, long status)
{
	struct nw_request *r = data;

	r->pair.status = status;
}

static bool
on_data(void *data, const char *bytes, size_t len)
{
	struct nw_request *r = data;
	struct nw_pair_leg *p = &r->pair;

	if (p->status >= 200 && p->status < 300)
		return true; /* a success says nothing the decode leg needs */
	if (p->error_body->len < PAIR_ERROR_MAX)
		g_string_append_len(p->error_body, bytes,
		                    (gssize)MIN(len, PAIR_ERROR_MAX - p->error_body->len));
	return true;
}

static void
on_done(void *data, const struct nw_upstream_result *res)
{
	struct nw_request *r = data;
	struct nw_serve *s = r->serve;
	struct nw_pair_leg *p = &r->pair;
	int64_t now;

	p->call = NULL; /* freed by upstream right after this */
	now = nw_leg_note_call(s, p->engine, NW_CALL_PREFILL, p->started_us);
	if (nw_request_decided(r))
		return;
	if (res->code == NW_UPSTREAM_OK && p->status >= 200 && p->status < 300) {
		/* The engine has its KV on the way: its prefill slot is free. */
		if (r->prefill_engine >= 0)
			nw_phase_prefill_done(r, now);
		/* Spec 4.3: the prefill is done and decode starts, so a stream
		 * commits its 200 now (leg.c holds it while the prefill runs, so
		 * that a prefill failure is an HTTP error). */
		if (r->parsed.stream && !nw_request_streaming(r) &&
		    s->cfg->serving.stream_commit == NW_STREAM_COMMIT_BEFORE_DECODE)
			nw_request_commit_stream(r);
		return;
	}
	r->fault_engine = (int32_t)p->engine;
	if (res->code == NW_UPSTREAM_TIMEOUT) {
		s->metrics->counters.prefill_timeouts++;
		nw_request_fail_engine(r, NW_FAIL_PREFILL_TIMEOUT, 0, res->error, NULL);
		return;
	}
	if (res->code != NW_UPSTREAM_OK) {
		s->metrics->counters.prefill_failed_transport++;
		nw_request_fail_engine(r, res->code == NW_UPSTREAM_BAD_RESPONSE ? NW_FAIL_BAD_RESPONSE
		                          : res->code == NW_UPSTREAM_CONNECT  ? NW_FAIL_CONNECT
		                                                              : NW_FAIL_TRANSPORT,
		                       0, res->error, NULL);
		return;
	}
	s->metrics->counters.prefill_failed_status++;
	nw_phase_fail_by_status(r, nw_serve_dialect(s, p->engine), p->status, p->error_body);
}

static const struct nw_upstream_handlers pair_handlers = {
	.on_response = on_response,
	.on_data = on_data,
	.on_done = on_done,
};

bool
nw_pair_start(struct nw_request *r, uint32_t engine, struct narwhal_http_call *call)
{
	struct nw_serve *s = r->serve;
	struct nw_pair_leg *p = &r->pair;
	g_autofree char *url = g_strconcat(s->dialects[engine].ref.url, call->path, NULL);
	char *body = NULL;
	struct nw_upstream_request req = {
		.method = call->method != NULL ? call->method : "POST",
		.url = url,
		.request_id = r->id,
		.connect_timeout_ms = MAX(1, (long)(s->cfg->engine.connect_timeout_s * 1000.0 + 0.5)),
		/* The whole prefill leg is bounded like a sequential one. */
		.timeout_ms = MAX(1, (long)(s->cfg->serving.prefill_timeout_s * 1000.0 + 0.5)),
	};

	nw_pair_release(r);
	if ((call->flags & NARWHAL_CALL_CLIENT_BODY) && call->body == r->parsed.body) {
		body = g_memdup2(r->body_in->str, r->body_in->len);
		req.body_len = r->body_in->len;
	} else if (call->body != NULL) {
		body = nw_json_dumps(call->body, JSON_COMPACT, &req.body_len);
	}
	json_decref(call->body);
	call->body = NULL;
	req.owned_body = body;
	p->engine = engine;
	p->status = 0;
	if (p->error_body == NULL)
		p->error_body = g_string_new(NULL);
	g_string_truncate(p->error_body, 0);
	s->metrics->counters.prefill_started++;
	s->metrics->engine_bytes_out += req.body_len;
	p->started_us = g_get_monotonic_time();
	p->call = nw_upstream_start(s->serving_pool, &req, &pair_handlers, r);
	if (p->call == NULL) {
		nw_request_fail(r, NW_FAIL_INTERNAL, 0, "could not start an engine call");
		return false;
	}
	return true;
}

void
nw_pair_release(struct nw_request *r)
{
	if (r->pair.call != NULL) {
		nw_upstream_cancel(r->pair.call);
		r->pair.call = NULL;
	}
}

void
nw_pair_clear(struct nw_pair_leg *p)
{
	if (p->call != NULL)
		nw_upstream_cancel(p->call);
	if (p->error_body != NULL)
		g_string_free(p->error_body, TRUE);
	memset(p, 0, sizeof *p);
}
