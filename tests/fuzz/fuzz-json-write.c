/*
 * libFuzzer target: the request path's JSON writer (src/core/json-write.c)
 * against jansson's json_dumps, which it replaces (issue 15). The input is
 * read twice: as JSON text (when jansson reads it, that tree is written),
 * and as a recipe for a tree that text cannot give: strings that are not
 * UTF-8 or hold NUL bytes, any integer or finite real, deep nesting, and
 * (on request) a container placed inside itself. Both writers must give
 * the same bytes, or both refuse; a refusal leaves the output as it was.
 * One deliberate difference: a key that is not UTF-8 (only the _nocheck
 * setters make one) is refused by ours, where json_dumps ignores its own
 * failure and writes the key without its closing quote.
 */
#include "build-config.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json-write.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct recipe {
	const uint8_t *p;
	size_t n;
	json_t *last; /* the container built last, for a cycle */
};

static unsigned
take(struct recipe *r)
{
	if (r->n == 0)
		return 0;
	r->n--;
	return *r->p++;
}

static uint64_t
take64(struct recipe *r)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v = (v << 8) | take(r);
	return v;
}

/* Reals whose printing has edges: exponents, ".0", the shortest forms. */
static const double reals[] = {
	0.1, 1e22, 1e21, 1e17, 5e-324, -0.0, 0.0, 1e-7, 1e-5, 123456789.0, 100.0,
	1.7976931348623157e308, 2.5, 1e100, -1e-100, 0.30000000000000004, 9007199254740993.0,
};

static json_t *
build(struct recipe *r, int depth)
{
	unsigned op = take(r), n;
	char bytes[32];
	json_t *v;

	if (depth > 200)
		op = 0;
	switch (op % 10) {
	case 0:
		return json_null();
	case 1:
		return json_boolean(op & 0x10);
	case 2:
		return json_integer((json_int_t)take64(r));
	case 3: {
		uint64_t bits = take64(r);
		double d;

		memcpy(&d, &bits, sizeof d);
		if (!isfinite(d) || (op & 0x10))
			d = reals[bits % (sizeof reals / sizeof reals[0])];
		return json_real(d);
	}
	case 4:
	case 5:
		n = take(r) % sizeof bytes;
		for (unsigned i = 0; i < n; i++)
			bytes[i] = (char)take(r);
		return json_stringn_nocheck(bytes, n);
	case 6:
		v = json_array();
		n = take(r) % 5;
		for (unsigned i = 0; i < n; i++)
			json_array_append_new(v, build(r, depth + 1));
		r->last = v;
		return v;
	case 7:
		v = json_object();
		n = take(r) % 5;
		for (unsigned i = 0; i < n; i++) {
			unsigned k = take(r) % 8;

			for (unsigned j = 0; j < k; j++)
				bytes[j] = (char)take(r);
			/* a repeated key frees the value it replaces, which may
			 * hold the last container */
			if (json_object_getn(v, bytes, k) != NULL)
				r->last = NULL;
			json_object_setn_new_nocheck(v, bytes, k, build(r, depth + 1));
		}
		r->last = v;
		return v;
	default: {
		/* a chain of arrays, deeper than the writer's inline stack */
		unsigned k = take(r) % 80 + 1;
		json_t *inner = build(r, depth + (int)k);

		for (unsigned i = 0; i < k; i++) {
			v = json_array();
			json_array_append_new(v, inner);
			inner = v;
		}
		return inner;
	}
	}
}

/* Whether some key in v is not UTF-8 (jansson's own check says). */
static bool
has_bad_key(const json_t *v)
{
	const char *key;
	size_t len, i;
	json_t *child;

	if (json_is_array(v)) {
		json_array_foreach(v, i, child)
			if (has_bad_key(child))
				return true;
	} else if (json_is_object(v)) {
		json_object_keylen_foreach((json_t *)v, key, len, child) {
			json_t *s = json_stringn(key, len);

			if (s == NULL || has_bad_key(child)) {
				json_decref(s);
				return true;
			}
			json_decref(s);
		}
	}
	return false;
}

static void
compare(const json_t *v, size_t flags, bool bad_key)
{
	char *want = bad_key ? NULL : json_dumps(v, flags);
	GString *out = g_string_new("prefix:");
	size_t len;
	char *got;
	int rc = nw_json_write(v, out, flags);

	if (want == NULL) {
		if (rc != -1 || strcmp(out->str, "prefix:") != 0)
			abort();
	} else if (rc != 0 || strcmp(out->str + 7, want) != 0 || out->len != 7 + strlen(want)) {
		fprintf(stderr, "jansson: %s\nours:    %s\n", want, out->str + 7);
		abort();
	}
	got = nw_json_dumps(v, flags, &len);
	if ((got == NULL) != (want == NULL) || (got && (strcmp(got, want) != 0 || len != strlen(want))))
		abort();
	free(got);
	free(want);
	g_string_free(out, TRUE);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct recipe r;
	bool bad_key;
	size_t flags;
	json_t *v;

	if (size == 0)
		return 0;
	flags = JSON_COMPACT | ((data[0] & 1) ? JSON_ENCODE_ANY : 0);

	v = json_loadb((const char *)data + 1, size - 1, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
	if (v != NULL) {
		compare(v, flags, false);
		json_decref(v);
	}

	r = (struct recipe){ .p = data + 1, .n = size - 1 };
	v = build(&r, 0);
	bad_key = has_bad_key(v);
	compare(v, flags, bad_key);
	if ((data[0] & 2) && r.last != NULL && r.last != v && json_is_array(r.last) &&
	    (json_is_array(v) || json_is_object(v))) {
		/* the root inside its last container: both must refuse */
		json_array_append(r.last, v);
		compare(v, flags, bad_key);
		json_array_remove(r.last, json_array_size(r.last) - 1);
	}
	json_decref(v);
	return 0;
}
