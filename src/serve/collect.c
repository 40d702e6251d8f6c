/*
 * The engine side of a non-streamed answer. A client that asked for one
 * body still gets its decode (or aggregate) leg as a stream from the
 * engine: only a stream shows the first token and the silences between
 * chunks, so engine.first_token_timeout_s and engine.decode_read_timeout_s
 * bound a non-streamed request as they bound a streamed one (spec 6),
 * rather than the request deadline alone.
 *
 * The events are framed, classified by the dialect (first token, in-band
 * error, terminator) and merged by the assembler (assemble.c) into the
 * body the client asked for. Token chunks that differ from an earlier one
 * only in their text are merged without a parse (chunk-shape.h), and,
 * when the dialect has sniff_sse, without the dialect, as a relayed stream
 * passes them (docs/plugins.md).
 *
 * Nothing is visible to the client before the answer, so an in-band error
 * is an attempt failure like an HTTP error, and may be retried (spec 4.2).
 * serving.max_response_bytes bounds the event payloads an attempt takes
 * in.
 */
#include "build-config.h"

#include <string.h>

#include "core/string-pool.h"
#include "serve/request.h"
#include "serve/phases.h"
#include "serve/serve-internal.h"

static bool on_event(void *data, const char *payload, size_t len);
static bool read_whole(struct nw_request *r, const char *payload, size_t len, bool skipped,
                       struct narwhal_sse_event *ev);

/* The reasons a chunk merged by its shape set (its finish). */
static void
set_reasons(struct nw_collect *c, const struct nw_chunk_match *set)
{
	for (unsigned i = 0; i < set->n; i++) {
		g_string_truncate(c->text, 0);
		/* the match checked the string: it decodes */
		nw_json_string_decode(set->set[i].body, set->set[i].len, c->text);
		nw_assembly_set_reason(c->assembly, c->shape_choice, set->set[i].key,
		                       json_stringn_nocheck(c->text->str, c->text->len));
	}
}

/* A chunk that matched the shape: its text appended, its reasons set.
 * False when the assembly refuses the text (the chunk is then merged
 * whole). */
static bool
merge_matched(struct nw_collect *c, const struct nw_chunk_match *set)
{
	if (nw_assembly_add_text(c->assembly, c->shape_choice, c->text->str, c->text->len) != 0)
		return false;
	set_reasons(c, set);
	return true;
}

void
nw_collect_init(struct nw_collect *c, size_t max_bytes)
{
	memset(c, 0, sizeof *c);
	c->max_bytes = max_bytes;
	nw_sse_init(&c->sse, on_event, NULL);
	nw_sse_set_max_event(&c->sse, max_bytes);
	nw_chunk_shape_init(&c->shape);
	c->text = nw_string_take();
}

void
nw_collect_clear(struct nw_collect *c)
{
	if (c->sse.line == NULL)
		return; /* never initialised: a streamed request */
	nw_sse_clear(&c->sse);
	nw_assembly_free(c->assembly);
	nw_chunk_shape_clear(&c->shape);
	nw_string_give(c->text);
	memset(c, 0, sizeof *c);
}

void
nw_collect_begin(struct nw_request *r)
{
	struct nw_collect *c = &r->collect;

	nw_sse_reset(&c->sse);
	c->sse.fn_data = r;
	nw_assembly_free(c->assembly);
	c->assembly = nw_assembly_new(r->route);
	nw_chunk_shape_reset(&c->shape);
	c->taken = 0;
	c->first_token = false;
	c->done = false;
}

static bool
on_event(void *data, const char *payload, size_t len)
{
	struct nw_request *r = data;
	struct nw_collect *c = &r->collect;
	struct narwhal_sse_event ev;
	struct nw_chunk_match set;
	bool matched = false, skipped;

	c->taken += len;
	if (c->taken > c->max_bytes) {
		nw_request_fail(r, NW_FAIL_TOO_LARGE, 0, "the engine's answer is larger than "
		                "serving.max_response_bytes");
		return false;
	}
	/* After the first token, with a dialect that sniffs, an event with
	 * the bytes of the last token chunk merged whole around another text
	 * (which checks it is valid JSON) is a plain token chunk, as on a
	 * relayed stream, and is merged without the sniff; one that also sets
	 * a reason is merged so only if the sniff lets it pass (docs/plugins.md,
	 * sniff_sse). Anything else is read whole. */
	if (c->first_token && nw_serve_dialect(r->serve, r->leg.engine)->ops->sniff_sse != NULL) {
		g_string_truncate(c->text, 0);
		matched = nw_chunk_shape_match(&c->shape, payload, len, c->text, &set);
		if (matched && set.n == 0 && merge_matched(c, &set))
			return true;
	}
	skipped = nw_event_skipped(r, c->first_token, payload, len, &ev);
	if (skipped && matched && set.n > 0 && merge_matched(c, &set))
		return true;
	return read_whole(r, payload, len, skipped, &ev);
}

/* An event merged whole: read once as JSON for the dialect (unless the
 * sniff let it pass) and the assembly. */
static bool
read_whole(struct nw_request *r, const char *payload, size_t len, bool skipped,
           struct narwhal_sse_event *ev)
{
	struct nw_collect *c = &r->collect;
	json_t *chunk = nw_json_read(payload, len, 0, NULL);

	if (!skipped && nw_event_parse(r, payload, len, chunk, ev) == NW_EVENT_BAD) {
		json_decref(chunk);
		nw_request_fail(r, NW_FAIL_BAD_RESPONSE, 0,
		                "the engine's stream has an event that is not valid JSON");
		return false;
	}
	switch (ev->kind) {
	case NARWHAL_SSE_DONE:
		json_decref(chunk);
		/* A terminator before any chunk leaves nothing to assemble: an
		 * empty "choices" is no answer a client's SDK can read. */
		if (nw_assembly_chunks(c->assembly) == 0) {
			nw_request_fail_engine(r, NW_FAIL_BAD_RESPONSE, r->leg.status,
			                       "the engine's stream ended before any chunk", NULL);
			return false;
		}
		c->done = true;
		return false; /* nothing after the terminator matters */
	case NARWHAL_SSE_ERROR:
		json_decref(chunk);
		nw_phase_fail_in_band(r, ev, payload, len);
		return false;
	case NARWHAL_SSE_TOKENS:
	case NARWHAL_SSE_USAGE:
	case NARWHAL_SSE_OTHER:
		break;
	}
	if (chunk == NULL || nw_assembly_add(c->assembly, chunk) != 0) {
		json_decref(chunk);
		nw_request_fail(r, NW_FAIL_BAD_RESPONSE, 0,
		                "the engine's stream has an event that is not a completion chunk");
		return false;
	}
	/* Learn from the newest chunk merged whole: a shape learnt before it
	 * may hold values this chunk replaced. */
	{
		const char *const *reasons = NULL;
		const char *key = ev->kind == NARWHAL_SSE_TOKENS ?
		                  nw_chunk_shape_key(r->route, chunk, &c->shape_choice, &reasons) :
		                  NULL;

		if (key == NULL || !nw_chunk_shape_learn(&c->shape, payload, len, key, reasons))
			nw_chunk_shape_reset(&c->shape);
	}
	json_decref(chunk);
	if (ev->kind == NARWHAL_SSE_TOKENS && !c->first_token) {
		c->first_token = true;
		nw_request_on_first_token(r);
	}
	return true;
}

bool
nw_collect_feed(struct nw_request *r, const char *bytes, size_t len)
{
	struct nw_collect *c = &r->collect;

	if (c->done || nw_request_decided(r))
		return true; /* after the terminator: let the transfer end */
	if (!nw_sse_feed(&c->sse, bytes, len) && c->sse.overflow && !nw_request_decided(r))
		nw_request_fail(r, NW_FAIL_TOO_LARGE, 0, "an event of the engine's stream is larger "
		                "than serving.max_response_bytes");
	return true;
}

bool
nw_collect_end(struct nw_request *r)
{
	struct nw_collect *c = &r->collect;

	/* An engine that leaves out the blank line after its terminator
	 * still ended its stream. */
	if (!c->done && !nw_request_decided(r))
		nw_sse_finish(&c->sse);
	return c->done;
}

void
nw_collect_answer(struct nw_request *r)
{
	const json_t *usage = nw_assembly_usage(r->collect.assembly);
	json_t *count;
	GString *body;
	size_t len;

	/* The engine's usage, for the access log. */
	count = json_object_get(usage, "completion_tokens");
	if (json_is_integer(count))
		r->usage_completion = json_integer_value(count);
	count = json_object_get(usage, "prompt_tokens");
	if (json_is_integer(count))
		r->usage_prompt = json_integer_value(count);
	body = g_string_sized_new(512);
	nw_assembly_write(r->collect.assembly, body);
	nw_leg_release(r);
	nw_request_finish(r, true);
	len = body->len;
	/* The answer takes the text; GLib allocates with malloc (free()s it). */
	nw_request_answer_text(r, g_string_free(body, FALSE), len);
}
