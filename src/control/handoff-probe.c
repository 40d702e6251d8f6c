/*
 * One prefill-to-decode handoff outside any client request (handoff-probe.h):
 * the legs are built by the engines' dialects from a small client body of
 * our own and sent on the given pool. One deadline source per probe bounds
 * the decode leg and, once the probe has ended, delivers the result from the
 * loop, so done never runs inside a callback of the probe's own calls.
 */
#include "build-config.h"

#include "control/handoff-probe.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "net/loop.h"
#include "net/sse.h"

#define PROBE_PROMPT "Narwhal checks that a prefill engine hands its KV cache to a decode " \
	"engine."
/* A probe's answers are tiny: anything larger is not the answer we asked for. */
#define PROBE_BODY_MAX (1u << 20)
#define PROBE_ERROR_MAX (16u << 10)

enum leg_kind { LEG_PREFILL, LEG_DECODE };

struct probe_leg {
	struct nw_handoff_probe *p;
	enum leg_kind kind;
	const struct nw_dialect *d;      /* the dialect of the engine called */
	struct nw_upstream_call *call;   /* NULL when none is out */
	long status;                     /* 0 until the engine's headers */
	bool streaming;                  /* a 2xx decode stream: bytes go to sse */
	bool ended;                      /* its call ended well */
	GString *body;                   /* the prefill answer, or an error body */
	bool overflow;
	int64_t started_us;
};

struct nw_handoff_probe {
	struct nw_handoff_probe_options opts; /* strings copied below */
	char *model;
	char *prompt;
	char *request_id;
	nw_handoff_probe_done_fn done;
	void *data;
	bool concurrent;                 /* both legs at once */
	bool aggregate;                  /* one aggregate leg */
	json_t *prefill_body;            /* the client bodies the dialects build from */
	json_t *decode_body;
	json_t *handoff;
	struct probe_leg prefill, decode;
	struct nw_sse sse;
	bool first_token;
	bool saw_done;
	int64_t started_us;
	GSource *timer;                  /* the decode bound; then delivery */
	bool finished;                   /* res is final; the timer delivers it */
	struct nw_handoff_probe_result res;
};

const char *
nw_handoff_probe_stage_name(nw_handoff_probe_stage s)
{
	switch (s) {
	case NW_PROBE_STAGE_NONE: return "none";
	case NW_PROBE_STAGE_BUILD: return "build";
	case NW_PROBE_STAGE_PREFILL: return "prefill";
	case NW_PROBE_STAGE_HANDOFF: return "handoff";
	case NW_PROBE_STAGE_DECODE: return "decode";
	case NW_PROBE_STAGE_STREAM: return "stream";
	}
	return "unknown";
}

static double
seconds_since(int64_t from_us, int64_t to_us)
{
	return from_us < 0 ? 0.0 : (double)(to_us - from_us) / 1e6;
}

static void
leg_cancel(struct probe_leg *leg)
{
	if (leg->call != NULL) {
		nw_upstream_cancel(leg->call);
		leg->call = NULL;
	}
}

/* The probe has its outcome: stop everything still out and let the timer
 * hand the result over on the next loop iteration. */
static void
finish(struct nw_handoff_probe *p)
{
	int64_t now = g_get_monotonic_time();

	if (p->finished)
		return;
	p->finished = true;
	leg_cancel(&p->prefill);
	leg_cancel(&p->decode);
	p->res.ok = p->res.stage == NW_PROBE_STAGE_NONE;
	p->res.total_s = seconds_since(p->started_us, now);
	p->res.handoff = p->opts.abandon ? p->handoff : NULL;
	nw_deadline_source_set_in(p->timer, 0);
}

static void G_GNUC_PRINTF(4, 5)
fail(struct nw_handoff_probe *p, nw_handoff_probe_stage stage, long status, const char *fmt, ...)
{
	va_list ap;

	if (p->finished)
		return;
	p->res.stage = stage;
	p->res.status = status;
	va_start(ap, fmt);
	g_vsnprintf(p->res.error, sizeof p->res.error, fmt, ap);
	va_end(ap);
	finish(p);
}

/* The stage a decode (or aggregate) leg's failure is charged to. */
static nw_handoff_probe_stage
decode_stage(const struct nw_handoff_probe *p)
{
	if (p->first_token)
		return NW_PROBE_STAGE_STREAM;
	return p->aggregate ? NW_PROBE_STAGE_PREFILL : NW_PROBE_STAGE_DECODE;
}

static nw_handoff_probe_stage
leg_stage(const struct probe_leg *leg)
{
	return leg->kind == LEG_PREFILL ? NW_PROBE_STAGE_PREFILL : decode_stage(leg->p);
}

/* An engine's error answer, in its dialect's words. */
static void
fail_status(struct probe_leg *leg)
{
	struct narwhal_engine_error err;

	nw_dialect_read_error(leg->d, leg->status, leg->body->str, leg->body->len, &err);
	fail(leg->p, leg_stage(leg), leg->status, "%s answered HTTP %ld%s%s", leg->d->ref.id,
	     leg->status, err.message[0] ? ": " : "", err.message);
}

/* --- the decode stream ------------------------------------------------ */

/* The stream's bound after a token. */
static double
after_token_s(const struct nw_handoff_probe *p)
{
	return p->opts.gap_timeout_s > 0 ? p->opts.gap_timeout_s : p->opts.leg_timeout_s;
}

static bool
on_event(void *data, const char *payload, size_t len)
{
	struct nw_handoff_probe *p = data;
	const struct nw_dialect *d = p->decode.d;
	struct narwhal_sse_event ev = {
		.struct_size = sizeof ev, .kind = NARWHAL_SSE_OTHER,
		.prompt_tokens = -1, .completion_tokens = -1,
	};

	if (d->ops->parse_sse(d->ctx, payload, len, &ev) != 0) {
		fail(p, decode_stage(p), p->decode.status, "%s sent a stream event its dialect "
		     "(%s) cannot read", d->ref.id, d->name);
		return false;
	}
	switch (ev.kind) {
	case NARWHAL_SSE_TOKENS: {
		int64_t now = g_get_monotonic_time();

		p->res.tokens += ev.tokens;
		if (!p->first_token) {
			p->first_token = true;
			p->res.first_token_s = seconds_since(p->decode.started_us, now);
			/* A sequential handoff lived from the start of its prefill
			 * leg; a concurrent one from both legs' start. */
			if (!p->aggregate)
				p->res.handoff_s = seconds_since(p->prefill.started_us, now);
			/* After the first token the stream has leg_timeout_s again
			 * (or gap_timeout_s to each next token). */
			nw_deadline_source_set_in(p->timer, (int64_t)(after_token_s(p) * 1e6));
		} else if (p->opts.gap_timeout_s > 0) {
			nw_deadline_source_set_in(p->timer, (int64_t)(p->opts.gap_timeout_s * 1e6));
		}
		if (p->opts.on_tokens != NULL && ev.tokens > 0)
			p->opts.on_tokens(p->opts.tokens_data, ev.tokens, now);
		return true;
	}
	case NARWHAL_SSE_ERROR: {
		struct narwhal_engine_error err;

		nw_dialect_read_error(d, 0, payload, len, &err);
		fail(p, decode_stage(p), 0, "%s sent an error event%s%s", d->ref.id,
		     err.message[0] ? ": " : "", err.message);
		return false;
	}
	case NARWHAL_SSE_DONE:
		p->saw_done = true;
		return false;
	default:
		return true;
	}
}

/* --- engine calls ------------------------------------------------------- */

static void
on_response(void *data, long status)
{
	struct probe_leg *leg = data;

	leg->status = status;
	leg->streaming = leg->kind == LEG_DECODE && status >= 200 && status < 300;
}

static bool
on_data(void *data, const char *bytes, size_t len)
{
	struct probe_leg *leg = data;
	size_t bound = leg->status >= 200 && leg->status < 300 ? PROBE_BODY_MAX : PROBE_ERROR_MAX;

	if (leg->streaming) {
		/* Nothing after the terminator matters; a failed event has
		 * already ended the probe. */
		if (!leg->p->saw_done)
			nw_sse_feed(&leg->p->sse, bytes, len);
		return true;
	}
	if (leg->body->len + len > bound) {
		leg->overflow = true;
		len = bound - MIN(bound, leg->body->len);
	}
	g_string_append_len(leg->body, bytes, (gssize)len);
	return true;
}

static void decode_ended(struct nw_handoff_probe *p);
static void prefill_answered(struct nw_handoff_probe *p);

static void
on_done(void *data, const struct nw_upstream_result *res)
{
	struct probe_leg *leg = data;
	struct nw_handoff_probe *p = leg->p;

	leg->call = NULL; /* freed by upstream right after this */
	if (p->finished)
		return;
	if (leg->streaming) {
		/* A last event without its blank line still counts. */
		if (!p->saw_done)
			nw_sse_finish(&p->sse);
		if (p->finished)
			return;
		/* The terminator came: a success, whether or not the transfer
		 * then ended cleanly (as the data plane counts it). */
		if (p->saw_done) {
			leg->ended = true;
			decode_ended(p);
			return;
		}
		fail(p, decode_stage(p), leg->status, "%s: %s", leg->d->ref.id,
		     res->code != NW_UPSTREAM_OK ? res->error
		                                 : "the stream ended without its terminator");
		return;
	}
	if (res->code != NW_UPSTREAM_OK) {
		p->res.timed_out = res->code == NW_UPSTREAM_TIMEOUT;
		if (p->res.timed_out)
			fail(p, leg_stage(leg), 0, "%s did not answer within %g s", leg->d->ref.id,
			     p->opts.leg_timeout_s);
		else
			fail(p, leg_stage(leg), 0, "%s: %s", leg->d->ref.id, res->error);
		return;
	}
	if (leg->status < 200 || leg->status >= 300) {
		fail_status(leg);
		return;
	}
	if (leg->kind == LEG_DECODE) {
		/* A 2xx decode leg that was not a stream: not what we asked for. */
		fail(p, decode_stage(p), leg->status, "%s answered the streamed decode leg with "
		     "no stream", leg->d->ref.id);
		return;
	}
	if (leg->overflow) {
		fail(p, NW_PROBE_STAGE_PREFILL, leg->status, "%s: the prefill answer is larger "
		     "than %u bytes", leg->d->ref.id, PROBE_BODY_MAX);
		return;
	}
	leg->ended = true;
	p->res.prefill_s = seconds_since(leg->started_us, g_get_monotonic_time());
	prefill_answered(p);
}

static const struct nw_upstream_handlers probe_handlers = {
	.on_response = on_response,
	.on_data = on_data,
	.on_done = on_done,
};

/* What a leg is built for. A sequential pair's decode engine is placed
 * after the prefill answer, so its prefill leg sees none (decode_known
 * false); a concurrent pair's legs both see both engines. */
static struct narwhal_dialect_target
target_for(const struct nw_handoff_probe *p, const struct nw_dialect *engine, const json_t *body,
           bool decode_known)
{
	return (struct narwhal_dialect_target){
		.struct_size = sizeof(struct narwhal_dialect_target),
		.request = p->opts.handle,
		.request_id = p->request_id,
		.attempt = 0,
		.route = NARWHAL_ROUTE_COMPLETIONS,
		.client_body = body,
		.engine = &engine->ref,
		.prefill = p->aggregate ? NULL : &p->opts.prefill->ref,
		.decode = p->aggregate || !decode_known ? NULL : &p->opts.decode->ref,
		.pair_id = p->aggregate ? 0 : p->opts.handle,
	};
}

/* Send what a builder returned (rc; the call's body transfer full). False
 * when the probe has failed. */
static bool
send_leg(struct nw_handoff_probe *p, struct probe_leg *leg, const char *slot, int rc,
         const struct narwhal_dialect_target *target, struct narwhal_http_call *call,
         long timeout_ms)
{
	g_autofree char *url = NULL;
	char *body = NULL;
	struct nw_upstream_request req = { 0 };

	if (rc == 0 && (call->path == NULL || call->path[0] != '/' ||
	                ((call->flags & NARWHAL_CALL_CLIENT_BODY) && call->body != NULL)))
		rc = -EINVAL;
	if (rc == 0 && (call->flags & NARWHAL_CALL_CLIENT_BODY))
		body = json_dumps(target->client_body, JSON_COMPACT);
	else if (rc == 0 && call->body != NULL)
		body = json_dumps(call->body, JSON_COMPACT);
	json_decref(call->body);
	call->body = NULL;
	if (rc != 0) {
		fail(p, NW_PROBE_STAGE_BUILD, 0, "dialect %s: %s failed for %s (%s)", leg->d->name,
		     slot, leg->d->ref.id, g_strerror(-rc));
		return false;
	}
	url = g_strconcat(leg->d->ref.url, call->path, NULL);
	req.method = call->method != NULL ? call->method : (body != NULL ? "POST" : "GET");
	req.url = url;
	req.request_id = p->request_id;
	req.owned_body = body;
	req.body_len = body != NULL ? strlen(body) : 0;
	/* 0: the engine client's default. */
	req.connect_timeout_ms = p->opts.connect_timeout_s > 0
	                         ? MAX(1, (long)(p->opts.connect_timeout_s * 1000.0 + 0.5)) : 0;
	req.timeout_ms = timeout_ms;
	leg->status = 0;
	leg->started_us = g_get_monotonic_time();
	leg->call = nw_upstream_start(p->opts.pool, &req, &probe_handlers, leg);
	if (leg->call == NULL) {
		fail(p, leg_stage(leg), 0, "could not start a call to %s", leg->d->ref.id);
		return false;
	}
	return true;
}

static long
leg_timeout_ms(const struct nw_handoff_probe *p)
{
	return MAX(1, (long)(p->opts.leg_timeout_s * 1000.0 + 0.5));
}

/* The prefill leg, bounded whole by leg_timeout_s. */
static bool
start_prefill(struct nw_handoff_probe *p)
{
	const struct nw_dialect *d = p->opts.prefill;
	struct narwhal_http_call call = { .struct_size = sizeof call };
	struct narwhal_dialect_target target = target_for(p, d, p->prefill_body, p->concurrent);
	int rc = d->ops->build_prefill(d->ctx, &target, &call);

	return send_leg(p, &p->prefill, "build_prefill", rc, &target, &call, leg_timeout_ms(p));
}

/* The streamed decode (or aggregate) leg: leg_timeout_s to its first
 * token, and again after it to the end. */
static bool
start_decode(struct nw_handoff_probe *p)
{
	const struct nw_dialect *d = p->decode.d;
	struct narwhal_http_call call = { .struct_size = sizeof call };
	struct narwhal_dialect_target target = target_for(p, d, p->decode_body, true);
	int rc;

	if (p->aggregate)
		rc = d->ops->build_aggregate(d->ctx, &target, &call);
	else
		rc = d->ops->build_decode(d->ctx, &target, p->handoff, &call);
	if (!send_leg(p, &p->decode, p->aggregate ? "build_aggregate" : "build_decode", rc,
	              &target, &call, 0))
		return false;
	nw_deadline_source_set_in(p->timer, (int64_t)(p->opts.leg_timeout_s * 1e6));
	return true;
}

static void
prefill_answered(struct nw_handoff_probe *p)
{
	const struct nw_dialect *d = p->prefill.d;
	json_t *doc;
	int rc;

	/* A concurrent pair's prefill answer carries nothing the decode leg
	 * needs; it only has to succeed. */
	if (p->concurrent) {
		if (p->decode.ended)
			finish(p);
		return;
	}
	doc = json_loadb(p->prefill.body->str, p->prefill.body->len, 0, NULL);
	if (doc == NULL) {
		fail(p, NW_PROBE_STAGE_PREFILL, p->prefill.status, "%s: the prefill answer is not "
		     "JSON", d->ref.id);
		return;
	}
	rc = d->ops->parse_prefill(d->ctx, doc, &p->handoff);
	json_decref(doc);
	if (rc != 0) {
		fail(p, NW_PROBE_STAGE_HANDOFF, p->prefill.status, "%s: dialect %s cannot read a "
		     "handoff in the prefill answer (parse_prefill: %s)", d->ref.id, d->name,
		     g_strerror(-rc));
		return;
	}
	/* The data plane decodes without a handoff (the decode engine
	 * prefills again), but a verification needs a real one. */
	if (p->handoff == NULL) {
		fail(p, NW_PROBE_STAGE_HANDOFF, p->prefill.status, "%s answered the prefill leg "
		     "without a handoff", d->ref.id);
		return;
	}
	if (p->opts.abandon) {
		finish(p);
		return;
	}
	start_decode(p);
}

static void
decode_ended(struct nw_handoff_probe *p)
{
	if (!p->first_token) {
		fail(p, decode_stage(p), p->decode.status, "%s ended its stream without a "
		     "generated token", p->decode.d->ref.id);
		return;
	}
	/* A concurrent pair is complete when both legs are; its prefill leg
	 * has its own bound (the call's timeout). */
	if (p->concurrent && !p->prefill.ended) {
		nw_deadline_source_set(p->timer, -1);
		return;
	}
	finish(p);
}

/* The timer: the decode bound while the probe runs, then delivery. */
static void
on_timer(void *data)
{
	struct nw_handoff_probe *p = data;

	if (!p->finished) {
		p->res.timed_out = true;
		if (p->first_token && p->opts.gap_timeout_s > 0)
			fail(p, NW_PROBE_STAGE_STREAM, p->decode.status, "%s: no token and no end "
			     "of the stream within %g s of the last token", p->decode.d->ref.id,
			     p->opts.gap_timeout_s);
		else if (p->first_token)
			fail(p, NW_PROBE_STAGE_STREAM, p->decode.status, "%s: the stream did not end "
			     "within %g s of its first token", p->decode.d->ref.id,
			     p->opts.leg_timeout_s);
		else
			fail(p, decode_stage(p), p->decode.status, "%s sent no generated token within "
			     "%g s", p->decode.d->ref.id, p->opts.leg_timeout_s);
		return;
	}
	p->done(p->data, &p->res);
	nw_handoff_probe_cancel(p);
}

static json_t *
client_body(const struct nw_handoff_probe *p, bool stream)
{
	json_t *body = json_pack("{s:s, s:i, s:b}", "prompt", p->prompt,
	                         "max_tokens", (json_int_t)p->opts.max_tokens, "stream", stream);

	if (body != NULL && p->model != NULL)
		json_object_set_new(body, "model", json_string(p->model));
	return body;
}

static void
leg_init(struct probe_leg *leg, struct nw_handoff_probe *p, enum leg_kind kind,
         const struct nw_dialect *d)
{
	leg->p = p;
	leg->kind = kind;
	leg->d = d;
	leg->body = g_string_new(NULL);
}

struct nw_handoff_probe *
nw_handoff_probe_start(const struct nw_handoff_probe_options *opts,
                       nw_handoff_probe_done_fn done, void *data)
{
	struct nw_handoff_probe *p = g_new0(struct nw_handoff_probe, 1);
	const struct nw_dialect *prefill = opts->prefill;

	p->opts = *opts;
	if (p->opts.decode == NULL)
		p->opts.decode = prefill;
	if (p->opts.max_tokens == 0)
		p->opts.max_tokens = 2;
	p->model = g_strdup(opts->model);
	p->prompt = g_strdup(opts->prompt != NULL ? opts->prompt : PROBE_PROMPT);
	p->opts.model = p->model;
	p->opts.prompt = p->prompt;
	p->request_id = opts->handle >= NW_HANDOFF_PROBE_HANDLE_BASE
	                ? g_strdup_printf("narwhal-probe-%" PRIu64,
	                                  opts->handle - NW_HANDOFF_PROBE_HANDLE_BASE)
	                : g_strdup_printf("narwhal-probe-%" PRIu64, opts->handle);
	p->done = done;
	p->data = data;
	p->aggregate = opts->aggregate || !nw_dialect_pairs(prefill);
	p->concurrent = !p->aggregate && nw_dialect_concurrent(prefill);
	p->prefill_body = client_body(p, false);
	p->decode_body = client_body(p, true);
	p->started_us = g_get_monotonic_time();
	leg_init(&p->prefill, p, LEG_PREFILL, prefill);
	/* An aggregate-only engine runs the whole request itself. */
	leg_init(&p->decode, p, LEG_DECODE, p->aggregate ? prefill : p->opts.decode);
	p->prefill.started_us = p->decode.started_us = -1;
	nw_sse_init(&p->sse, on_event, p);
	nw_sse_set_max_event(&p->sse, PROBE_BODY_MAX);
	p->timer = nw_deadline_source_new("narwhal-handoff-probe", on_timer, p);

	/* Failures below are final at once; the timer still delivers them
	 * from the loop, never from inside this call. */
	if (p->prefill_body == NULL || p->decode_body == NULL)
		fail(p, NW_PROBE_STAGE_BUILD, 0, "out of memory");
	else if (p->aggregate && opts->abandon)
		fail(p, NW_PROBE_STAGE_BUILD, 0, "%s is aggregate-only (dialect %s): it has no "
		     "handoff to abandon", prefill->ref.id, prefill->name);
	else if (p->concurrent && opts->abandon)
		fail(p, NW_PROBE_STAGE_BUILD, 0, "%s hands off concurrently (dialect %s): only a "
		     "sequential handoff can be abandoned", prefill->ref.id, prefill->name);
	else if (!p->aggregate && !nw_dialect_compatible(prefill, p->opts.decode))
		fail(p, NW_PROBE_STAGE_BUILD, 0, "%s (dialect %s) cannot take a handoff from %s "
		     "(dialect %s)", p->opts.decode->ref.id, p->opts.decode->name, prefill->ref.id,
		     prefill->name);
	else if (p->aggregate)
		start_decode(p);
	else if (start_prefill(p) && p->concurrent)
		start_decode(p);
	return p;
}

void
nw_handoff_probe_cancel(struct nw_handoff_probe *p)
{
	if (p == NULL)
		return;
	leg_cancel(&p->prefill);
	leg_cancel(&p->decode);
	nw_deadline_source_destroy(p->timer);
	nw_sse_clear(&p->sse);
	g_string_free(p->prefill.body, TRUE);
	g_string_free(p->decode.body, TRUE);
	json_decref(p->prefill_body);
	json_decref(p->decode_body);
	json_decref(p->handoff);
	g_free(p->model);
	g_free(p->prompt);
	g_free(p->request_id);
	g_free(p);
}
