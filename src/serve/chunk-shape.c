#include "build-config.h"

#include <string.h>

#include "serve/chunk-shape.h"

void
nw_chunk_shape_init(struct nw_chunk_shape *s)
{
	s->head = g_string_new(NULL);
	s->tail = g_string_new(NULL);
	s->known = false;
}

void
nw_chunk_shape_clear(struct nw_chunk_shape *s)
{
	if (s->head != NULL)
		g_string_free(s->head, TRUE);
	if (s->tail != NULL)
		g_string_free(s->tail, TRUE);
	memset(s, 0, sizeof *s);
}

void
nw_chunk_shape_reset(struct nw_chunk_shape *s)
{
	s->known = false;
}

static int
hex4(const char *p)
{
	int v = 0;

	for (int i = 0; i < 4; i++) {
		int d = g_ascii_xdigit_value(p[i]);

		if (d < 0)
			return -1;
		v = v * 16 + d;
	}
	return v;
}

static inline void
put(GString *out, char c)
{
	if (out)
		g_string_append_c(out, c);
}

bool
nw_json_string_decode(const char *body, size_t len, GString *out)
{
	size_t start = out ? out->len : 0;
	size_t i = 0;

	while (i < len) {
		size_t run = i;

		/* Copy a run of plain bytes at once; check its UTF-8 below. */
		while (run < len && body[run] != '\\' && body[run] != '"' &&
		       (unsigned char)body[run] >= 0x20)
			run++;
		if (run > i) {
			if (!g_utf8_validate_len(body + i, run - i, NULL))
				goto bad;
			if (out)
				g_string_append_len(out, body + i, (gssize)(run - i));
			i = run;
			continue;
		}
		if (body[i] != '\\' || i + 1 >= len)
			goto bad; /* a raw quote or control character, or a lone '\' */
		switch (body[i + 1]) {
		case '"': put(out, '"'); break;
		case '\\': put(out, '\\'); break;
		case '/': put(out, '/'); break;
		case 'b': put(out, '\b'); break;
		case 'f': put(out, '\f'); break;
		case 'n': put(out, '\n'); break;
		case 'r': put(out, '\r'); break;
		case 't': put(out, '\t'); break;
		case 'u': {
			int hi, lo;
			gunichar c;

			if (i + 6 > len || (hi = hex4(body + i + 2)) < 0)
				goto bad;
			if (hi >= 0xD800 && hi <= 0xDBFF) {
				/* A high surrogate needs its low half right after. */
				if (i + 12 > len || body[i + 6] != '\\' || body[i + 7] != 'u' ||
				    (lo = hex4(body + i + 8)) < 0 || lo < 0xDC00 || lo > 0xDFFF)
					goto bad;
				c = 0x10000 + (((gunichar)hi - 0xD800) << 10) + ((gunichar)lo - 0xDC00);
				i += 6;
			} else if ((hi >= 0xDC00 && hi <= 0xDFFF) || hi == 0) {
				goto bad; /* a lone low surrogate, or NUL */
			} else {
				c = (gunichar)hi;
			}
			if (out)
				g_string_append_unichar(out, c);
			i += 6;
			continue;
		}
		default:
			goto bad;
		}
		i += 2;
	}
	return true;
bad:
	if (out)
		g_string_truncate(out, start);
	return false;
}

/* The end of the string literal that starts at p[0] == '"' (the offset
 * of its closing quote), or 0 when it does not end. */
static size_t
literal_end(const char *p, size_t len)
{
	for (size_t i = 1; i < len; i++) {
		if (p[i] == '\\')
			i++;
		else if (p[i] == '"')
			return i;
	}
	return 0;
}

static size_t
skip_space(const char *p, size_t len, size_t i)
{
	while (i < len && (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r'))
		i++;
	return i;
}

bool
nw_chunk_shape_learn(struct nw_chunk_shape *s, const char *payload, size_t len, const char *key)
{
	size_t key_len = strlen(key);
	size_t open = 0, close = 0;
	unsigned found = 0;

	s->known = false;
	/* Walk the string literals; a literal followed by ':' is a key. */
	for (size_t i = 0; i < len; i++) {
		size_t end, v, vend;

		if (payload[i] != '"')
			continue;
		end = literal_end(payload + i, len - i);
		if (end == 0)
			return false;
		end += i;
		v = skip_space(payload, len, end + 1);
		if (v < len && payload[v] == ':' && end - i - 1 == key_len &&
		    memcmp(payload + i + 1, key, key_len) == 0) {
			v = skip_space(payload, len, v + 1);
			if (v >= len || payload[v] != '"')
				return false; /* the key holds no string here */
			vend = literal_end(payload + v, len - v);
			if (vend == 0)
				return false;
			open = v;
			close = v + vend;
			found++;
			end = close;
		}
		i = end;
	}
	if (found != 1)
		return false;
	g_string_assign(s->head, "");
	g_string_append_len(s->head, payload, (gssize)(open + 1));
	g_string_assign(s->tail, "");
	g_string_append_len(s->tail, payload + close, (gssize)(len - close));
	s->known = true;
	return true;
}

bool
nw_chunk_shape_match(const struct nw_chunk_shape *s, const char *payload, size_t len,
                     GString *text)
{
	size_t h, t;

	if (!s->known)
		return false;
	h = s->head->len;
	t = s->tail->len;
	if (len < h + t || memcmp(payload, s->head->str, h) != 0 ||
	    memcmp(payload + len - t, s->tail->str, t) != 0)
		return false;
	return nw_json_string_decode(payload + h, len - h - t, text);
}

static bool
null_or_absent(json_t *obj, const char *key)
{
	json_t *v = json_object_get(obj, key);

	return v == NULL || json_is_null(v);
}

const char *
nw_chunk_shape_key(narwhal_route route, const json_t *whole, json_int_t *choice)
{
	json_t *chunk = (json_t *)whole; /* jansson's getters take non-const */
	json_t *choices = json_object_get(chunk, "choices");
	json_t *ch = json_array_get(choices, 0);
	bool chat = route == NARWHAL_ROUTE_CHAT_COMPLETIONS;
	json_t *delta;
	const char *key;
	json_t *v;

	if (json_array_size(choices) != 1 || !json_is_object(ch) ||
	    !null_or_absent(ch, "logprobs") || !null_or_absent(ch, "finish_reason") ||
	    !null_or_absent(ch, "stop_reason"))
		return NULL;
	json_object_foreach(ch, key, v) {
		if (strcmp(key, "index") != 0 && strcmp(key, chat ? "delta" : "text") != 0 &&
		    strcmp(key, "logprobs") != 0 && strcmp(key, "finish_reason") != 0 &&
		    strcmp(key, "stop_reason") != 0)
			return NULL;
	}
	*choice = json_integer_value(json_object_get(ch, "index"));
	if (!chat)
		return json_is_string(json_object_get(ch, "text")) ? "text" : NULL;
	delta = json_object_get(ch, "delta");
	if (json_object_size(delta) != 1 || !json_is_string(json_object_get(delta, "content")))
		return NULL;
	return "content";
}
