#include "build-config.h"

#include "net/http1-parse.h"

#include <string.h>

#include <glib.h>

/* Longest chunk-size line and trailer section we accept. */
#define MAX_CHUNK_LINE 4096u
#define MAX_TRAILERS (16u * 1024u)

enum chunk_state {
	CHUNK_SIZE,      /* at a chunk-size line */
	CHUNK_DATA,      /* inside a chunk's data, `left` bytes to go */
	CHUNK_DATA_END,  /* at the CR LF after a chunk's data */
	CHUNK_TRAILERS,  /* after the last chunk, at a trailer line */
	CHUNK_DONE,
};

static bool
is_token_char(unsigned char c)
{
	return g_ascii_isalnum(c) || (c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

/* End of the line starting at p (the LF), or NULL when there is none. */
static const char *
line_end(const char *p, const char *end)
{
	return memchr(p, '\n', (size_t)(end - p));
}

/* [p, e) without the CR before the LF and blanks on both sides. */
static void
trim(const char **p, const char **e)
{
	while (*p < *e && (**p == ' ' || **p == '\t'))
		(*p)++;
	while (*e > *p && ((*e)[-1] == ' ' || (*e)[-1] == '\t' || (*e)[-1] == '\r'))
		(*e)--;
}

static bool
list_has_token(const char *v, const char *e, const char *token)
{
	size_t n = strlen(token);

	while (v < e) {
		const char *comma = memchr(v, ',', (size_t)(e - v));
		const char *item = v, *item_end = comma ? comma : e;

		trim(&item, &item_end);
		if ((size_t)(item_end - item) == n && g_ascii_strncasecmp(item, token, n) == 0)
			return true;
		v = comma ? comma + 1 : e;
	}
	return false;
}

void
nw_h1_count_codings(const char *v, const char *e, unsigned *codings, bool *all_chunked)
{
	while (v <= e) {
		const char *comma = memchr(v, ',', (size_t)(e - v));
		const char *item = v, *item_end = comma ? comma : e;

		trim(&item, &item_end);
		if (item < item_end) {
			(*codings)++;
			if (item_end - item != 7 || g_ascii_strncasecmp(item, "chunked", 7) != 0)
				*all_chunked = false;
		}
		if (comma == NULL)
			break;
		v = comma + 1;
	}
}

static bool
parse_decimal(const char *p, const char *e, uint64_t *out)
{
	uint64_t v = 0;

	if (p == e)
		return false;
	for (; p < e; p++) {
		if (!g_ascii_isdigit(*p) || v > (UINT64_MAX - 9) / 10)
			return false;
		v = v * 10 + (uint64_t)(*p - '0');
	}
	*out = v;
	return true;
}

static bool
parse_status_line(const char *p, const char *e, struct nw_h1_head *head)
{
	if (e > p && e[-1] == '\r')
		e--;
	if (e - p < 12 || memcmp(p, "HTTP/1.", 7) != 0 || !g_ascii_isdigit(p[7]) || p[8] != ' ')
		return false;
	if (!g_ascii_isdigit(p[9]) || !g_ascii_isdigit(p[10]) || !g_ascii_isdigit(p[11]))
		return false;
	if (e - p > 12 && p[12] != ' ')
		return false;
	head->minor = (unsigned)(p[7] - '0');
	head->status = (p[9] - '0') * 100 + (p[10] - '0') * 10 + (p[11] - '0');
	return head->status >= 100;
}

ssize_t
nw_h1_parse_head(const char *buf, size_t len, bool head_request, struct nw_h1_head *head)
{
	const char *end = buf + MIN(len, (size_t)NW_H1_MAX_HEAD);
	const char *p, *nl;
	bool has_length = false, te = false, all_chunked = true, keep_alive = false;
	unsigned codings = 0;

	memset(head, 0, sizeof *head);
	nl = line_end(buf, end);
	if (nl == NULL)
		return len >= NW_H1_MAX_HEAD ? NW_H1_HEAD_MALFORMED : 0;
	/* Make sure the whole head is here before interpreting any of it. */
	for (p = nl + 1;;) {
		const char *next = line_end(p, end);

		if (next == NULL)
			return len >= NW_H1_MAX_HEAD ? NW_H1_HEAD_MALFORMED : 0;
		if (next == p || (next == p + 1 && *p == '\r'))
			break;
		p = next + 1;
	}
	if (!parse_status_line(buf, nl, head))
		return NW_H1_HEAD_MALFORMED;

	for (p = nl + 1;; p = nl + 1) {
		const char *name = p, *colon, *v, *ve;

		nl = line_end(p, end);
		if (nl == p || (nl == p + 1 && *p == '\r'))
			break;
		/* Folded lines (obs-fold) and blank names are refused. */
		for (colon = name; colon < nl && is_token_char((unsigned char)*colon); colon++)
			;
		if (colon == name || colon == nl || *colon != ':')
			return NW_H1_HEAD_MALFORMED;
		v = colon + 1;
		ve = nl;
		trim(&v, &ve);
		switch (colon - name) {
		case 14:
			if (g_ascii_strncasecmp(name, "content-length", 14) == 0) {
				uint64_t n;

				if (!parse_decimal(v, ve, &n) || (has_length && n != head->content_length))
					return NW_H1_HEAD_MALFORMED;
				head->content_length = n;
				has_length = true;
			}
			break;
		case 17:
			if (g_ascii_strncasecmp(name, "transfer-encoding", 17) == 0) {
				te = true;
				nw_h1_count_codings(v, ve, &codings, &all_chunked);
			}
			break;
		case 10:
			if (g_ascii_strncasecmp(name, "connection", 10) == 0) {
				if (list_has_token(v, ve, "close"))
					head->close = true;
				if (list_has_token(v, ve, "keep-alive"))
					keep_alive = true;
			}
			break;
		default:
			break;
		}
	}

	/* HTTP/1.0 keeps a connection only when asked, and never with a
	 * Transfer-Encoding, which it does not have (RFC 9112 6.1). */
	if (head->minor == 0 && (!keep_alive || te))
		head->close = true;
	if (head_request || head->status < 200 || head->status == 204 || head->status == 304) {
		head->framing = NW_H1_NO_BODY;
	} else if (te) {
		/* The one coding the client decodes is chunked, applied once:
		 * anything else (gzip, chunked not last) would reach the caller
		 * still encoded, so the answer is refused (RFC 9112 6.1). */
		if (codings != 1 || !all_chunked)
			return NW_H1_HEAD_CODING;
		head->framing = NW_H1_CHUNKED;
		/* A length beside Transfer-Encoding is ignored, and the
		 * connection is not trusted with another request. */
		if (has_length)
			head->close = true;
	} else if (has_length) {
		head->framing = NW_H1_LENGTH;
	} else {
		head->framing = NW_H1_UNTIL_CLOSE;
		head->close = true;
	}
	return (ssize_t)(nl + 1 - buf);
}

const char *
nw_h1_find_header(const char *head, size_t head_len, const char *name, size_t *value_len)
{
	const char *end = head + head_len;
	const char *p = line_end(head, end);
	size_t n = strlen(name);

	while (p != NULL && ++p < end) {
		const char *nl = line_end(p, end);
		const char *v, *ve;

		if (nl == NULL)
			break;
		if ((size_t)(nl - p) > n && p[n] == ':' && g_ascii_strncasecmp(p, name, n) == 0) {
			v = p + n + 1;
			ve = nl;
			trim(&v, &ve);
			*value_len = (size_t)(ve - v);
			return v;
		}
		p = nl;
	}
	return NULL;
}

void
nw_h1_body_init(struct nw_h1_body *body, const struct nw_h1_head *head)
{
	memset(body, 0, sizeof *body);
	body->framing = head->framing;
	body->left = head->framing == NW_H1_LENGTH ? head->content_length : 0;
	body->state = CHUNK_SIZE;
}

/* A chunk-size line: hex digits, then optional extensions. */
static void
chunk_size_step(const struct nw_h1_body *body, const char *buf, size_t len,
                struct nw_h1_step *step)
{
	const char *nl = memchr(buf, '\n', MIN(len, (size_t)MAX_CHUNK_LINE));
	uint64_t size = 0;
	size_t i = 0, digits = 0;

	if (nl == NULL) {
		step->kind = len >= MAX_CHUNK_LINE ? NW_H1_INVALID : NW_H1_MORE;
		return;
	}
	for (; buf + i < nl && g_ascii_isxdigit(buf[i]); i++) {
		/* Leading zeros are allowed; a value over 15 hex digits is not. */
		if (digits > 0 || buf[i] != '0')
			digits++;
		if (digits > 15) {
			step->kind = NW_H1_INVALID;
			return;
		}
		size = size * 16 + (uint64_t)g_ascii_xdigit_value(buf[i]);
	}
	/* After the digits: extensions, or the line's end (a CR only right
	 * before the LF). */
	if (i == 0 || (buf + i < nl && buf[i] != ';' && buf[i] != ' ' && buf[i] != '\t' &&
	               !(buf[i] == '\r' && buf + i + 1 == nl))) {
		step->kind = NW_H1_INVALID;
		return;
	}
	step->kind = NW_H1_FRAMING;
	step->used = (size_t)(nl + 1 - buf);
	step->next = *body;
	step->next.left = size;
	/* After the last chunk, `left` counts the trailer bytes instead. */
	step->next.state = size == 0 ? CHUNK_TRAILERS : CHUNK_DATA;
}

static void
chunked_step(const struct nw_h1_body *body, const char *buf, size_t len, struct nw_h1_step *step)
{
	switch (body->state) {
	case CHUNK_SIZE:
		chunk_size_step(body, buf, len, step);
		return;
	case CHUNK_DATA:
		if (len == 0)
			return;
		step->kind = NW_H1_DATA;
		step->data_len = (size_t)MIN((uint64_t)len, body->left);
		step->used = step->data_len;
		step->next.left -= step->data_len;
		if (step->next.left == 0)
			step->next.state = CHUNK_DATA_END;
		return;
	case CHUNK_DATA_END:
		if (len < 1 || (buf[0] == '\r' && len < 2))
			return;
		if (buf[0] == '\n' || (buf[0] == '\r' && buf[1] == '\n')) {
			step->kind = NW_H1_FRAMING;
			step->used = buf[0] == '\n' ? 1 : 2;
			step->next.state = CHUNK_SIZE;
		} else {
			step->kind = NW_H1_INVALID;
		}
		return;
	case CHUNK_TRAILERS: {
		const char *nl = memchr(buf, '\n', len);

		if (nl == NULL) {
			if (body->left + len >= MAX_TRAILERS)
				step->kind = NW_H1_INVALID;
			return;
		}
		step->used = (size_t)(nl + 1 - buf);
		if (nl == buf || (nl == buf + 1 && buf[0] == '\r')) {
			step->kind = NW_H1_DONE;
			step->next.state = CHUNK_DONE;
		} else if (body->left + step->used >= MAX_TRAILERS) {
			step->kind = NW_H1_INVALID;
		} else {
			step->kind = NW_H1_FRAMING;
			step->next.left += step->used;
		}
		return;
	}
	default:
		step->kind = NW_H1_DONE;
		return;
	}
}

void
nw_h1_body_step(const struct nw_h1_body *body, const char *buf, size_t len,
                struct nw_h1_step *step)
{
	memset(step, 0, sizeof *step);
	step->kind = NW_H1_MORE;
	step->next = *body;
	switch (body->framing) {
	case NW_H1_NO_BODY:
		step->kind = NW_H1_DONE;
		return;
	case NW_H1_LENGTH:
		if (body->left == 0) {
			step->kind = NW_H1_DONE;
		} else if (len > 0) {
			step->kind = NW_H1_DATA;
			step->data_len = (size_t)MIN((uint64_t)len, body->left);
			step->used = step->data_len;
			step->next.left -= step->data_len;
		}
		return;
	case NW_H1_UNTIL_CLOSE:
		if (len > 0) {
			step->kind = NW_H1_DATA;
			step->data_len = len;
			step->used = len;
		}
		return;
	case NW_H1_CHUNKED:
		chunked_step(body, buf, len, step);
		return;
	}
}
