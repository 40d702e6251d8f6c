/*
 * libFuzzer target for the engine client's response parsing
 * (src/net/http1-parse.c). The input is a response, heads and body as an
 * engine might send them. It is decoded twice: with every byte available at
 * once, and fed one byte at a time as the slowest socket would. Beyond "no
 * crash, no leak": a step never claims more bytes than it was given, a
 * data span lies inside them, and both decodings give the same head, the
 * same body bytes and the same ending. Every input is read both as the
 * answer to a GET and to a HEAD.
 */
#include "build-config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <glib.h>

#include "net/http1-parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct outcome {
	ssize_t head_len;          /* of the final head; -1 malformed, 0 none */
	size_t head_off;           /* where the final head starts */
	struct nw_h1_head head;
	GString *body;
	enum nw_h1_step_kind end; /* DONE, INVALID, or MORE when input ran out */
};

/* Decodes buf[0..avail) from *off on; returns false when it needs more. */
static bool
decode(const char *buf, size_t avail, size_t *off, struct nw_h1_body *body, struct outcome *o)
{
	for (;;) {
		struct nw_h1_step st;

		nw_h1_body_step(body, buf + *off, avail - *off, &st);
		if (st.used > avail - *off)
			abort();
		switch (st.kind) {
		case NW_H1_MORE:
			return false;
		case NW_H1_INVALID:
			o->end = NW_H1_INVALID;
			return true;
		case NW_H1_DONE:
			o->end = NW_H1_DONE;
			return true;
		case NW_H1_DATA:
			if (st.data_len == 0 || st.data_len > avail - *off)
				abort();
			g_string_append_len(o->body, buf + *off, (gssize)st.data_len);
			break;
		case NW_H1_FRAMING:
			if (st.used == 0)
				abort();
			break;
		}
		*off += st.used;
		*body = st.next;
	}
}

/* Parses heads (skipping interim ones) and body with `step` bytes made
 * available at a time. */
static void
run(const char *buf, size_t size, size_t step, bool head_request, struct outcome *o)
{
	size_t avail = MIN(step, size), off = 0;
	struct nw_h1_body body;
	bool have_head = false;

	memset(o, 0, sizeof *o);
	o->body = g_string_new(NULL);
	o->end = NW_H1_MORE;
	for (;;) {
		if (!have_head) {
			ssize_t n = nw_h1_parse_head(buf + off, avail - off, head_request, &o->head);

			o->head_len = n;
			o->head_off = off;
			if (n < 0) {
				o->end = NW_H1_INVALID;
				return;
			}
			if (n > 0) {
				off += (size_t)n;
				if (o->head.status >= 200) {
					have_head = true;
					nw_h1_body_init(&body, &o->head);
				}
				continue;
			}
		} else if (decode(buf, avail, &off, &body, o)) {
			return;
		}
		if (avail == size)
			return; /* out of input */
		avail = MIN(avail + step, size);
	}
}

static void
check(const uint8_t *data, size_t size, bool head_request)
{
	struct outcome whole, bytewise;
	size_t len;
	const char *v, *head;

	run((const char *)data, size, size ? size : 1, head_request, &whole);
	run((const char *)data, size, 1, head_request, &bytewise);
	if (whole.end != bytewise.end || whole.head_len != bytewise.head_len ||
	    whole.head_off != bytewise.head_off ||
	    memcmp(&whole.head, &bytewise.head, sizeof whole.head) != 0 ||
	    !g_string_equal(whole.body, bytewise.body))
		abort();
	if (head_request && whole.head_len > 0 && whole.head.status >= 200 && whole.body->len > 0)
		abort(); /* the answer to a HEAD has no body */
	if (whole.head_len > 0) {
		head = (const char *)data + whole.head_off;
		v = nw_h1_find_header(head, (size_t)whole.head_len, "retry-after", &len);
		if (v != NULL && (v < head || v + len > head + whole.head_len))
			abort();
	}
	g_string_free(whole.body, TRUE);
	g_string_free(bytewise.body, TRUE);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	check(data, size, false);
	check(data, size, true);
	return 0;
}
