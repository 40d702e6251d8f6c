/*
 * libFuzzer target for SSE parsing as the stream relay does it: arbitrary
 * bytes, cut into chunks at places the input chooses, go through the shared
 * framer (src/net/sse.c); each event's payload goes through a dialect's
 * parse_sse and sniff_sse (the first byte picks vllm, sglang or llamacpp:
 * dialects.h), and each payload that is JSON goes into the assembler of
 * non-streamed answers (src/serve/assemble.c), whose body is then encoded.
 * A second assembly takes the collector's shortcut
 * (src/serve/chunk-shape.c: chunks of a learnt shape merged without a
 * parse) and must end equal to the first; the dialect never reads a
 * chunk of a token chunk's shape as an error or a terminator. Beyond "no
 * crash, no leak": the boundary the framer reports never passes the
 * chunk, a stopped framer reads nothing more, framing does not depend on
 * where the chunks were cut, the dialect's answer is one of its kinds
 * with its counts in range, an error class only on an error (and a
 * handoff class only from a dialect with a handoff), and never an error
 * or a terminator that sniff_sse would have let pass; parse_sse_json
 * reads a JSON payload as parse_sse does; both assemblies write the same
 * bytes, and those are jansson's compact encoding of the body they write.
 */
#include "build-config.h"

#include <narwhal/plugin-abi.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json-read.h"
#include "dialects.h"
#include "net/sse.h"
#include "serve/assemble.h"
#include "serve/chunk-shape.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct run {
	const struct fuzz_dialect *dialect;
	GString *joined;     /* every payload, NUL-separated */
	struct nw_assembly *assembly;
	/* The collector's way: shortcut first, whole parse otherwise. */
	narwhal_route route;
	struct nw_assembly *fast;
	struct nw_chunk_shape shape;
	json_int_t shape_choice;
	unsigned stop_after; /* 0: never */
	unsigned events;
};

/* As src/serve/collect.c merges an event, given the dialect's reading of
 * it (rc and ev from parse_sse): the shape is learnt from token events
 * only, and a payload of the shape without a reason is taken for a token
 * event without the dialect, so the dialect must never read one as an
 * error or a terminator (docs/plugins.md, sniff_sse). */
static void
fast_merge(struct run *run, const char *payload, size_t len, int rc,
           const struct narwhal_sse_event *ev)
{
	GString *text = g_string_new(NULL);
	struct nw_chunk_match set;
	json_t *chunk;

	if (nw_chunk_shape_match(&run->shape, payload, len, text, &set)) {
		if (set.n == 0 &&
		    (rc != 0 || ev->kind == NARWHAL_SSE_ERROR || ev->kind == NARWHAL_SSE_DONE)) {
			fprintf(stderr, "%s: a token chunk's shape that parse_sse reads as rc %d kind %u\n",
			        run->dialect->name, rc, ev->kind);
			abort();
		}
		/* Whatever the shortcut takes, a whole parse must take too. */
		chunk = json_loadb(payload, len, 0, NULL);
		if (chunk == NULL)
			abort();
		json_decref(chunk);
		if (nw_assembly_add_text(run->fast, run->shape_choice, text->str, text->len) == 0) {
			for (unsigned i = 0; i < set.n; i++) {
				g_string_truncate(text, 0);
				if (!nw_json_string_decode(set.set[i].body, set.set[i].len, text))
					abort(); /* the match checked it */
				nw_assembly_set_reason(run->fast, run->shape_choice, set.set[i].key,
				                       json_stringn(text->str, text->len));
			}
			g_string_free(text, TRUE);
			return;
		}
	}
	g_string_free(text, TRUE);
	chunk = json_loadb(payload, len, 0, NULL);
	if (chunk != NULL && nw_assembly_add(run->fast, chunk) == 0) {
		const char *const *reasons = NULL;
		const char *key = rc == 0 && ev->kind == NARWHAL_SSE_TOKENS ?
		                  nw_chunk_shape_key(run->route, chunk, &run->shape_choice, &reasons) :
		                  NULL;

		if (key == NULL || !nw_chunk_shape_learn(&run->shape, payload, len, key, reasons))
			nw_chunk_shape_reset(&run->shape);
	}
	json_decref(chunk);
}

/* Usage counts the dialects pass on: -1 (absent) to 2^53. */
#define MAX_COUNT INT64_C(9007199254740992)

/* The host's presets, with the fields a dialect must set poisoned. */
static struct narwhal_sse_event
poisoned_event(void)
{
	return (struct narwhal_sse_event){
		.struct_size = sizeof(struct narwhal_sse_event), .kind = NARWHAL_SSE_OTHER,
		.tokens = 777, .prompt_tokens = -7, .completion_tokens = -7, .error_class = 99,
	};
}

/* plugin-abi.h 2.4: parse_sse_json reads a payload that is JSON (to the
 * host's reader, with no flags) as parse_sse reads its bytes. */
static void
check_event_json(const struct fuzz_dialect *d, const char *payload, size_t len, int rc,
                 const struct narwhal_sse_event *want)
{
	struct narwhal_sse_event ev = poisoned_event();
	json_t *doc = nw_json_read(payload, len, 0, NULL);

	if (doc == NULL)
		return;
	if (d->ops->parse_sse_json(d->instance, doc, payload, len, &ev) != rc ||
	    (rc == 0 && (ev.kind != want->kind || ev.tokens != want->tokens ||
	                 ev.prompt_tokens != want->prompt_tokens ||
	                 ev.completion_tokens != want->completion_tokens ||
	                 ev.error_class != want->error_class))) {
		fprintf(stderr, "%s: parse_sse_json reads a payload otherwise than parse_sse\n",
		        d->name);
		abort();
	}
	json_decref(doc);
}

/* One payload through the dialect, in an exact-size copy so that a read
 * past it is caught: parse_sse's return value, its reading in *ev. */
static int
check_event(const struct fuzz_dialect *d, const char *payload, size_t len,
            struct narwhal_sse_event *out)
{
	struct narwhal_sse_event ev = poisoned_event();
	char *copy = g_malloc(len > 0 ? len : 1);
	bool sniffed;
	int rc;

	memcpy(copy, payload, len);
	sniffed = d->ops->sniff_sse(d->instance, copy, len);

	rc = d->ops->parse_sse(d->instance, copy, len, &ev);
	check_event_json(d, copy, len, rc, &ev);
	if (rc == 0) {
		if (ev.kind < NARWHAL_SSE_TOKENS || ev.kind > NARWHAL_SSE_OTHER)
			abort();
		if ((ev.kind == NARWHAL_SSE_TOKENS) != (ev.tokens > 0))
			abort();
		if (ev.prompt_tokens < -1 || ev.prompt_tokens > MAX_COUNT ||
		    ev.completion_tokens < -1 || ev.completion_tokens > MAX_COUNT)
			abort();
		if (ev.kind == NARWHAL_SSE_ERROR
		            ? ev.error_class < NARWHAL_ERROR_RETRYABLE ||
		                      ev.error_class > NARWHAL_ERROR_HANDOFF ||
		                      (ev.error_class == NARWHAL_ERROR_HANDOFF && !d->handoff)
		            : ev.error_class != 99)
			abort();
		/* plugin-abi.h: sniff_sse never says no to an error or a
		 * terminator. */
		if ((ev.kind == NARWHAL_SSE_ERROR || ev.kind == NARWHAL_SSE_DONE) && !sniffed) {
			fprintf(stderr, "%s: sniff_sse let pass a payload parse_sse reads as kind %u\n",
			        d->name, ev.kind);
			abort();
		}
	}
	g_free(copy);
	*out = ev;
	return rc;
}

static bool
on_event(void *cls, const char *payload, size_t len)
{
	struct run *run = cls;
	struct narwhal_sse_event ev;
	json_t *chunk;
	int parsed;

	g_string_append_len(run->joined, payload, (gssize)len);
	g_string_append_c(run->joined, '\0');
	parsed = check_event(run->dialect, payload, len, &ev);
	chunk = json_loadb(payload, len, 0, NULL);
	if (chunk != NULL && run->assembly != NULL) {
		unsigned before = nw_assembly_chunks(run->assembly);
		int rc = nw_assembly_add(run->assembly, chunk);

		/* A refused chunk is not counted; a taken one is. */
		if (nw_assembly_chunks(run->assembly) != before + (rc == 0 ? 1u : 0u))
			abort();
	}
	if (run->fast != NULL)
		fast_merge(run, payload, len, parsed, &ev);
	json_decref(chunk);
	run->events++;
	return run->stop_after == 0 || run->events < run->stop_after;
}

/* Frame text cut every `step` bytes (0: in one piece). */
static void
frame(struct run *run, const char *text, size_t len, size_t step, size_t max_event)
{
	struct nw_sse p;
	bool stopped = false;

	nw_sse_init(&p, on_event, run);
	nw_sse_set_max_event(&p, max_event);
	for (size_t at = 0; at < len;) {
		size_t n = step ? MIN(step, len - at) : len;
		bool ok = nw_sse_feed(&p, text + at, n);

		if (p.boundary > n)
			abort();
		if (stopped && ok)
			abort(); /* once stopped, nothing more is read */
		stopped = !ok;
		at += n;
	}
	nw_sse_finish(&p);
	nw_sse_clear(&p);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct run a = { 0 }, b = { 0 };
	size_t step;

	if (size < 3)
		return 0;
	/* The dialect, then the chunking (below). */
	a.dialect = b.dialect = fuzz_dialect_pick(data[0]);
	data++;
	size--;
	step = data[0] % 17;
	a.joined = g_string_new(NULL);
	b.joined = g_string_new(NULL);
	a.stop_after = data[1] % 5;
	/* Chat or completions, by the second byte. */
	b.route = data[1] & 0x80 ? NARWHAL_ROUTE_CHAT_COMPLETIONS : NARWHAL_ROUTE_COMPLETIONS;
	b.assembly = nw_assembly_new(b.route);
	b.fast = nw_assembly_new(b.route);
	nw_chunk_shape_init(&b.shape);
	frame(&a, (const char *)data + 2, size - 2, step, 4096);
	/* The same bytes in one piece, read to the end: the events seen before
	 * a stop must be the same ones. */
	frame(&b, (const char *)data + 2, size - 2, 0, 4096);
	if (a.joined->len > b.joined->len || memcmp(a.joined->str, b.joined->str, a.joined->len) != 0)
		abort();
	if (a.stop_after == 0 && (a.joined->len != b.joined->len || a.events != b.events))
		abort();
	{
		/* Both ways give the same bytes, and those are jansson's compact
		 * encoding of what they say. */
		GString *body = g_string_new(NULL);
		GString *fast = g_string_new(NULL);
		json_t *parsed;
		char *again;

		nw_assembly_write(b.assembly, body);
		nw_assembly_write(b.fast, fast);
		if (!g_string_equal(body, fast) ||
		    nw_assembly_chunks(b.assembly) != nw_assembly_chunks(b.fast)) {
			fprintf(stderr, "whole parse: %u chunks %s\nshortcut:    %u chunks %s\n",
			        nw_assembly_chunks(b.assembly), body->str, nw_assembly_chunks(b.fast),
			        fast->str);
			abort();
		}
		parsed = json_loadb(body->str, body->len, 0, NULL);
		again = parsed ? json_dumps(parsed, JSON_COMPACT) : NULL;
		if (again == NULL || strcmp(again, body->str) != 0) {
			fprintf(stderr, "written: %s\nencoded: %s\n", body->str, again ? again : "(none)");
			abort();
		}
		free(again);
		json_decref(parsed);
		g_string_free(body, TRUE);
		g_string_free(fast, TRUE);
	}
	nw_assembly_free(b.assembly);
	nw_assembly_free(b.fast);
	nw_chunk_shape_clear(&b.shape);
	g_string_free(a.joined, TRUE);
	g_string_free(b.joined, TRUE);
	return 0;
}
