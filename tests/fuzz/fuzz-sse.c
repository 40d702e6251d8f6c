/*
 * libFuzzer target for SSE parsing as the stream relay does it: arbitrary
 * bytes, cut into chunks at places the input chooses, go through the shared
 * framer (src/net/sse.c); each event's payload goes through the vllm
 * dialect's parse_sse, and each payload that is JSON goes into the
 * assembler of non-streamed answers (src/serve/assemble.c), whose body is
 * then encoded. Beyond "no crash, no leak": the boundary the framer
 * reports never passes the chunk, a stopped framer reads nothing more, the
 * dialect's answer is one of its kinds, and framing does not depend on
 * where the chunks were cut.
 */
#include "build-config.h"

#include <narwhal/plugin-abi.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "net/sse.h"
#include "serve/assemble.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct run {
	const struct narwhal_dialect_ops *ops;
	void *dialect;
	GString *joined;     /* every payload, NUL-separated */
	struct nw_assembly *assembly;
	unsigned stop_after; /* 0: never */
	unsigned events;
};

static bool
on_event(void *cls, const char *payload, size_t len)
{
	struct run *run = cls;
	struct narwhal_sse_event ev = { .struct_size = sizeof ev };
	json_t *chunk;

	g_string_append_len(run->joined, payload, (gssize)len);
	g_string_append_c(run->joined, '\0');
	if (run->ops->parse_sse(run->dialect, payload, len, &ev) == 0 &&
	    (ev.kind < NARWHAL_SSE_TOKENS || ev.kind > NARWHAL_SSE_OTHER))
		abort();
	chunk = json_loadb(payload, len, 0, NULL);
	if (chunk != NULL && run->assembly != NULL) {
		unsigned before = nw_assembly_chunks(run->assembly);
		int rc = nw_assembly_add(run->assembly, chunk);

		/* A refused chunk is not counted; a taken one is. */
		if (nw_assembly_chunks(run->assembly) != before + (rc == 0 ? 1u : 0u))
			abort();
	}
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
	static const struct narwhal_dialect_ops *ops;
	static void *dialect;
	struct run a = { 0 }, b = { 0 };
	char err[NARWHAL_ERROR_MAX];
	size_t step;

	if (ops == NULL) {
		ops = narwhal_plugin_entry()->ops;
		if (ops->create(NULL, NULL, &dialect, err, sizeof err) != 0)
			abort();
	}
	if (size < 2)
		return 0;
	step = data[0] % 17;
	a.ops = b.ops = ops;
	a.dialect = b.dialect = dialect;
	a.joined = g_string_new(NULL);
	b.joined = g_string_new(NULL);
	a.stop_after = data[1] % 5;
	/* Chat or completions, by the second byte. */
	b.assembly = nw_assembly_new(data[1] & 0x80 ? NARWHAL_ROUTE_CHAT_COMPLETIONS
	                                            : NARWHAL_ROUTE_COMPLETIONS);
	frame(&a, (const char *)data + 2, size - 2, step, 4096);
	/* The same bytes in one piece, read to the end: the events seen before
	 * a stop must be the same ones. */
	frame(&b, (const char *)data + 2, size - 2, 0, 4096);
	if (a.joined->len > b.joined->len || memcmp(a.joined->str, b.joined->str, a.joined->len) != 0)
		abort();
	if (a.stop_after == 0 && (a.joined->len != b.joined->len || a.events != b.events))
		abort();
	{
		json_t *body = nw_assembly_finish(b.assembly);
		char *text = json_dumps(body, JSON_COMPACT);

		if (body == NULL || text == NULL)
			abort();
		free(text);
		json_decref(body);
	}
	nw_assembly_free(b.assembly);
	g_string_free(a.joined, TRUE);
	g_string_free(b.joined, TRUE);
	return 0;
}
