#include "build-config.h"

#include "net/sse.h"

#include <string.h>

#include "core/string-pool.h"

void
nw_sse_init(struct nw_sse *p, nw_sse_fn fn, void *data)
{
	memset(p, 0, sizeof *p);
	p->line = nw_string_take();
	p->data = nw_string_take();
	p->max_event = NW_SSE_MAX_EVENT;
	p->fn = fn;
	p->fn_data = data;
}

void
nw_sse_clear(struct nw_sse *p)
{
	nw_string_give(p->line);
	nw_string_give(p->data);
	memset(p, 0, sizeof *p);
}

void
nw_sse_set_max_event(struct nw_sse *p, size_t max)
{
	p->max_event = max ? max : NW_SSE_MAX_EVENT;
}

void
nw_sse_reset(struct nw_sse *p)
{
	g_string_truncate(p->line, 0);
	g_string_truncate(p->data, 0);
	p->in_place = NULL;
	p->in_place_len = 0;
	p->event_bytes = 0;
	p->has_data = false;
	p->after_cr = false;
	p->cr_ended_event = false;
	p->overflow = false;
	p->stopped = false;
	p->boundary = 0;
}

/* The data line left in the caller's bytes is copied: they are gone once
 * nw_sse_feed returns, or a second data line joins it. */
static void
settle(struct nw_sse *p)
{
	if (p->in_place == NULL)
		return;
	g_string_append_len(p->data, p->in_place, (gssize)p->in_place_len);
	p->in_place = NULL;
	p->in_place_len = 0;
}

/* A blank line: the event ends. */
static void
dispatch(struct nw_sse *p)
{
	bool go_on = true;

	if (p->has_data && p->fn != NULL)
		go_on = p->in_place != NULL ? p->fn(p->fn_data, p->in_place, p->in_place_len)
		                            : p->fn(p->fn_data, p->data->str, p->data->len);
	p->in_place = NULL;
	p->in_place_len = 0;
	p->event_bytes = 0;
	g_string_truncate(p->data, 0);
	p->has_data = false;
	if (!go_on)
		p->stopped = true;
}

/* in_place: line stays where it is until nw_sse_feed returns. */
static void
process_line(struct nw_sse *p, const char *line, size_t len, bool in_place)
{
	const char *colon;
	size_t name_len;

	if (len == 0) {
		dispatch(p);
		return;
	}
	if (line[0] == ':')
		return; /* a comment (keep-alive) */
	colon = memchr(line, ':', len);
	name_len = colon ? (size_t)(colon - line) : len;
	if (name_len != 4 || memcmp(line, "data", 4) != 0)
		return; /* event:, id:, retry: and unknown fields mean nothing here */
	line += name_len;
	len -= name_len;
	if (len > 0) { /* skip the colon and one optional space */
		line++;
		len--;
		if (len > 0 && line[0] == ' ') {
			line++;
			len--;
		}
	}
	if (!p->has_data && in_place) {
		/* Usually the event's only line: not copied. */
		p->in_place = line;
		p->in_place_len = len;
		p->has_data = true;
		return;
	}
	settle(p);
	if (p->has_data)
		g_string_append_c(p->data, '\n');
	g_string_append_len(p->data, line, (gssize)len);
	p->has_data = true;
}

static bool
feed(struct nw_sse *p, const char *bytes, size_t len)
{
	const char *start = bytes, *end = bytes + len;
	size_t last_boundary = 0;

	p->boundary = 0;
	if (p->overflow || p->stopped)
		return false;
	while (bytes < end) {
		const char *q = bytes;
		size_t line_len;

		if (p->after_cr) {
			p->after_cr = false;
			if (*bytes == '\n') { /* the LF of a CR LF split across chunks */
				bytes++;
				if (p->cr_ended_event)
					last_boundary = (size_t)(bytes - start); /* keep the pair whole */
				else
					p->event_bytes++; /* as if the pair had come whole */
				p->cr_ended_event = false;
				continue;
			}
			p->cr_ended_event = false;
		}
		q = memchr(bytes, '\n', (size_t)(end - bytes));
		{
			const char *cr = memchr(bytes, '\r', (size_t)((q ? q : end) - bytes));

			if (cr != NULL)
				q = cr;
		}
		if (q == NULL)
			q = end;
		/* The data so far is part of the event's lines: one bound
		 * covers both. */
		if (p->event_bytes + p->line->len + (size_t)(q - bytes) > p->max_event) {
			p->overflow = true;
			p->boundary = last_boundary;
			return false;
		}
		if (q == end) {
			g_string_append_len(p->line, bytes, (gssize)(q - bytes));
			break;
		}
		p->after_cr = *q == '\r';
		/* A CR LF inside this chunk is consumed whole. */
		if (p->after_cr && q + 1 < end && q[1] == '\n') {
			p->after_cr = false;
			line_len = (size_t)(q - bytes);
			q++;
		} else {
			line_len = (size_t)(q - bytes);
		}
		p->boundary = (size_t)(q + 1 - start);
		/* Counted before the line is processed: a blank line's dispatch
		 * starts the next event at 0. */
		p->event_bytes += p->line->len + (size_t)(q + 1 - bytes);
		if (p->line->len == 0) {
			if (line_len == 0) {
				last_boundary = p->boundary;
				p->cr_ended_event = p->after_cr;
			}
			process_line(p, bytes, line_len, true); /* no copy needed */
		} else {
			g_string_append_len(p->line, bytes, (gssize)line_len);
			process_line(p, p->line->str, p->line->len, false);
			g_string_truncate(p->line, 0);
		}
		bytes = q + 1;
		if (p->stopped) {
			p->boundary = last_boundary;
			return false;
		}
	}
	p->boundary = last_boundary;
	return true;
}

bool
nw_sse_feed(struct nw_sse *p, const char *bytes, size_t len)
{
	bool go_on = feed(p, bytes, len);

	settle(p);
	return go_on;
}

bool
nw_sse_at_boundary(const struct nw_sse *p)
{
	return p->line->len == 0 && !p->has_data;
}

void
nw_sse_finish(struct nw_sse *p)
{
	if (p->overflow || p->stopped)
		return;
	if (p->line->len > 0) {
		g_autofree char *line = g_strndup(p->line->str, p->line->len);
		size_t len = p->line->len;

		g_string_truncate(p->line, 0);
		process_line(p, line, len, false); /* line is freed before the dispatch */
	}
	dispatch(p);
}
