#include "build-config.h"

#include <string.h>

#include "serve/chunk-shape.h"

#include "core/string-pool.h"

void
nw_chunk_shape_init(struct nw_chunk_shape *s)
{
	memset(s, 0, sizeof *s);
	s->bytes = nw_string_take();
}

void
nw_chunk_shape_clear(struct nw_chunk_shape *s)
{
	nw_string_give(s->bytes);
	memset(s, 0, sizeof *s);
}

void
nw_chunk_shape_reset(struct nw_chunk_shape *s)
{
	s->known = false;
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

/* The key literal at p[0] == '"' ending at p[end] names one of keys (a
 * NULL-ended list; NULL for none): its index, or -1. */
static int
key_index(const char *p, size_t end, const char *const *keys)
{
	for (int k = 0; keys != NULL && keys[k] != NULL; k++) {
		size_t n = strlen(keys[k]);

		if (end - 1 == n && memcmp(p + 1, keys[k], n) == 0)
			return k;
	}
	return -1;
}

bool
nw_chunk_shape_learn(struct nw_chunk_shape *s, const char *payload, size_t len,
                     const char *key, const char *const *reasons)
{
	const char *const text_key[] = { key, NULL };
	unsigned seen[NW_CHUNK_SHAPE_HOLES] = { 0 };
	unsigned n_reasons = 0;

	while (reasons != NULL && reasons[n_reasons] != NULL)
		n_reasons++;
	if (n_reasons > NW_CHUNK_SHAPE_HOLES - 1)
		return false;
	s->known = false;
	s->holes = 0;
	/* Walk the string literals; a literal followed by ':' is a key. */
	for (size_t i = 0; i < len; i++) {
		size_t end, v, vend;
		int k;

		if (payload[i] != '"')
			continue;
		end = literal_end(payload + i, len - i);
		if (end == 0)
			return false;
		v = skip_space(payload, len, i + end + 1);
		if (v >= len || payload[v] != ':') {
			i += end;
			continue;
		}
		v = skip_space(payload, len, v + 1);
		if (key_index(payload + i, end, text_key) == 0) {
			if (v >= len || payload[v] != '"' || seen[0]++ > 0)
				return false; /* no string here, or a second one */
			vend = literal_end(payload + v, len - v);
			if (vend == 0 || s->holes == NW_CHUNK_SHAPE_HOLES)
				return false;
			s->hole[s->holes++] = (struct nw_shape_hole){ v + 1, vend - 1, NULL };
			i = v + vend;
		} else if ((k = key_index(payload + i, end, reasons)) >= 0) {
			if (len - v < 4 || memcmp(payload + v, "null", 4) != 0 || seen[1 + k]++ > 0 ||
			    s->holes == NW_CHUNK_SHAPE_HOLES)
				return false; /* not null, or a second one */
			s->hole[s->holes++] = (struct nw_shape_hole){ v, 4, reasons[k] };
			i = v + 3;
		} else {
			i += end;
		}
	}
	if (seen[0] != 1 || s->holes != 1 + n_reasons)
		return false;
	g_string_assign(s->bytes, "");
	g_string_append_len(s->bytes, payload, (gssize)len);
	s->known = true;
	return true;
}

/* The value at p of a reason hole: null, or a string literal whose body
 * is valid; its length, or 0. */
static size_t
reason_value(const char *p, size_t len)
{
	size_t end;

	if (len >= 4 && memcmp(p, "null", 4) == 0)
		return 4;
	if (len == 0 || p[0] != '"' || (end = literal_end(p, len)) == 0 ||
	    !nw_json_string_decode(p + 1, end - 1, NULL))
		return 0;
	return end + 1;
}

bool
nw_chunk_shape_match(const struct nw_chunk_shape *s, const char *payload, size_t len,
                     GString *text, struct nw_chunk_match *set)
{
	const char *learnt = s->bytes->str;
	size_t at = 0, from = 0; /* in payload, in the learnt bytes */
	size_t text_at = 0, text_len = 0;

	if (!s->known)
		return false;
	if (set != NULL)
		set->n = 0;
	for (unsigned h = 0; h <= s->holes; h++) {
		/* The learnt bytes up to the next hole (or the end) recur. */
		size_t upto = h < s->holes ? s->hole[h].at : s->bytes->len;
		size_t n = upto - from, v;

		if (len - at < n || memcmp(payload + at, learnt + from, n) != 0)
			return false;
		at += n;
		if (h == s->holes)
			break;
		from = upto + s->hole[h].len;
		if (s->hole[h].key == NULL) {
			/* The text's body runs to its closing quote, which the
			 * learnt bytes after the hole start with; the last
			 * hole's text ends where the learnt tail begins. */
			if (h + 1 == s->holes) {
				size_t tail = s->bytes->len - from;

				if (len - at < tail)
					return false;
				v = len - tail - at;
			} else {
				v = literal_end(payload + at - 1, len - at + 1);
				if (v == 0)
					return false;
				v -= 1;
			}
			text_at = at;
			text_len = v;
		} else {
			v = reason_value(payload + at, len - at);
			if (v == 0)
				return false;
			if (v != 4 && set != NULL) {
				set->set[set->n].key = s->hole[h].key;
				set->set[set->n].body = payload + at + 1;
				set->set[set->n].len = v - 2;
				set->n++;
			}
		}
		at += v;
	}
	if (at != len)
		return false;
	return nw_json_string_decode(payload + text_at, text_len, text);
}

static bool
null_or_absent(json_t *obj, const char *key)
{
	json_t *v = json_object_get(obj, key);

	return v == NULL || json_is_null(v);
}

const char *
nw_chunk_shape_key(narwhal_route route, const json_t *whole, json_int_t *choice,
                   const char *const **reasons)
{
	static const char *const both[] = { "finish_reason", "stop_reason", NULL };
	static const char *const finish[] = { "finish_reason", NULL };
	static const char *const stop[] = { "stop_reason", NULL };
	static const char *const none[] = { NULL };
	json_t *chunk = (json_t *)whole; /* jansson's getters take non-const */
	json_t *choices = json_object_get(chunk, "choices");
	json_t *ch = json_array_get(choices, 0);
	bool chat = route == NARWHAL_ROUTE_CHAT_COMPLETIONS;
	bool has_finish, has_stop;
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
	has_finish = json_object_get(ch, "finish_reason") != NULL;
	has_stop = json_object_get(ch, "stop_reason") != NULL;
	*reasons = has_finish && has_stop ? both : has_finish ? finish : has_stop ? stop : none;
	if (!chat)
		return json_is_string(json_object_get(ch, "text")) ? "text" : NULL;
	delta = json_object_get(ch, "delta");
	if (json_object_size(delta) != 1 || !json_is_string(json_object_get(delta, "content")))
		return NULL;
	return "content";
}
