#include "build-config.h"

#include "tools/replay/sse.h"

#include <stdlib.h>
#include <string.h>

#include <jansson.h>

/* --- framing -------------------------------------------------------- */

static bool
forward(void *data, const char *payload, size_t len)
{
	struct rp_sse *p = data;

	p->fn(p->fn_data, payload, len);
	return true;
}

void
rp_sse_init(struct rp_sse *p, rp_sse_fn fn, void *data)
{
	p->fn = fn;
	p->fn_data = data;
	p->overflow = false;
	nw_sse_init(&p->framer, forward, p);
}

void
rp_sse_clear(struct rp_sse *p)
{
	nw_sse_clear(&p->framer);
}

bool
rp_sse_feed(struct rp_sse *p, const char *bytes, size_t len)
{
	bool ok = nw_sse_feed(&p->framer, bytes, len);

	p->overflow = p->framer.overflow;
	return ok;
}

void
rp_sse_finish(struct rp_sse *p)
{
	nw_sse_finish(&p->framer);
}

/* --- payloads ------------------------------------------------------- */

static bool
nonempty_string(json_t *v)
{
	return json_is_string(v) && json_string_length(v) > 0;
}

/* Does a choice carry generated text (streamed delta or whole message)? */
static bool
choice_has_text(json_t *choice)
{
	json_t *delta = json_object_get(choice, "delta");
	json_t *msg = json_object_get(choice, "message");
	json_t *o = delta ? delta : msg;

	if (nonempty_string(json_object_get(choice, "text")))
		return true;
	return o != NULL && (nonempty_string(json_object_get(o, "content")) ||
	                     nonempty_string(json_object_get(o, "reasoning_content")) ||
	                     nonempty_string(json_object_get(o, "reasoning")));
}

static void
read_error(json_t *err, json_t *doc, struct rp_event *ev)
{
	json_t *msg, *code;

	ev->kind = RP_EV_ERROR;
	if (json_is_string(err)) {
		ev->error = g_strdup(json_string_value(err));
		return;
	}
	if (!json_is_object(err))
		err = doc; /* the flat {"object":"error","message":...} shape */
	msg = json_object_get(err, "message");
	code = json_object_get(err, "code");
	ev->error = g_strdup(json_is_string(msg) ? json_string_value(msg) : "error");
	if (json_is_integer(code))
		ev->error_code = (long)json_integer_value(code);
	else if (json_is_string(code))
		ev->error_code = strtol(json_string_value(code), NULL, 10);
}

void
rp_event_parse(const char *payload, size_t len, struct rp_event *ev)
{
	json_t *doc, *choices, *usage, *err;
	size_t i;
	json_t *c;

	memset(ev, 0, sizeof *ev);
	ev->prompt_tokens = ev->completion_tokens = -1;
	while (len > 0 && g_ascii_isspace(payload[len - 1]))
		len--;
	while (len > 0 && g_ascii_isspace(*payload)) {
		payload++;
		len--;
	}
	if (len == 6 && memcmp(payload, "[DONE]", 6) == 0) {
		ev->kind = RP_EV_DONE;
		return;
	}
	doc = json_loadb(payload, len, 0, NULL);
	if (!json_is_object(doc)) {
		ev->kind = RP_EV_INVALID;
		json_decref(doc);
		return;
	}
	err = json_object_get(doc, "error");
	if ((err != NULL && !json_is_null(err)) ||
	    g_strcmp0(json_string_value(json_object_get(doc, "object")), "error") == 0) {
		read_error(err, doc, ev);
		json_decref(doc);
		return;
	}
	ev->kind = RP_EV_DATA;
	choices = json_object_get(doc, "choices");
	json_array_foreach(choices, i, c) {
		if (choice_has_text(c))
			ev->pieces++;
	}
	usage = json_object_get(doc, "usage");
	if (json_is_object(usage)) {
		json_t *pt = json_object_get(usage, "prompt_tokens");
		json_t *ct = json_object_get(usage, "completion_tokens");

		if (json_is_integer(pt))
			ev->prompt_tokens = json_integer_value(pt);
		if (json_is_integer(ct))
			ev->completion_tokens = json_integer_value(ct);
	}
	json_decref(doc);
}

void
rp_event_clear(struct rp_event *ev)
{
	g_free(ev->error);
	ev->error = NULL;
}

/* --- one response ----------------------------------------------------- */

static void
on_event(void *data, const char *payload, size_t len)
{
	struct rp_stream *s = data;
	struct rp_event ev;

	s->events++;
	rp_event_parse(payload, len, &ev);
	switch (ev.kind) {
	case RP_EV_DONE:
		s->done = true;
		break;
	case RP_EV_ERROR:
		if (!s->error_event) {
			s->error_event = true;
			s->error = g_steal_pointer(&ev.error);
			s->error_code = ev.error_code;
		}
		break;
	case RP_EV_INVALID:
		s->invalid++;
		break;
	case RP_EV_DATA:
		if (ev.pieces > 0) {
			if (s->first_us == 0)
				s->first_us = s->now_us;
			s->last_us = s->now_us;
			s->pieces++;
		}
		/* With continuous usage every chunk has it; the last one wins. */
		if (ev.prompt_tokens >= 0)
			s->usage_prompt = ev.prompt_tokens;
		if (ev.completion_tokens >= 0)
			s->usage_completion = ev.completion_tokens;
		break;
	}
	rp_event_clear(&ev);
}

void
rp_stream_init(struct rp_stream *s)
{
	memset(s, 0, sizeof *s);
	rp_sse_init(&s->sse, on_event, s);
	s->usage_prompt = s->usage_completion = -1;
}

void
rp_stream_clear(struct rp_stream *s)
{
	rp_sse_clear(&s->sse);
	g_free(s->error);
	s->error = NULL;
}

bool
rp_stream_feed(struct rp_stream *s, int64_t now_us, const char *bytes, size_t len)
{
	s->now_us = now_us;
	return rp_sse_feed(&s->sse, bytes, len);
}

void
rp_stream_finish(struct rp_stream *s, int64_t now_us)
{
	s->now_us = now_us;
	rp_sse_finish(&s->sse);
}

uint32_t
rp_stream_tokens(const struct rp_stream *s)
{
	if (s->usage_completion >= 0)
		return (uint32_t)MIN(s->usage_completion, (int64_t)UINT32_MAX);
	return s->pieces;
}
