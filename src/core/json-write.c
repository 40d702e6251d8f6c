/*
 * The request path's JSON writer: json_dumps(v, JSON_COMPACT), byte for
 * byte, into a GString.
 *
 * Why by hand. json_dumps hands every piece of its output to a callback
 * that appends it to a buffer, walks strings one code point at a time,
 * keeps a hash table of the containers it is inside (to refuse cycles),
 * formatting each one's address to key it, and copies the result once
 * more at the end. The daemon writes two engine request bodies for each
 * two-leg request; bench/json/README.md measures them: the decode leg's
 * (492 bytes) 5.0 us with json_dumps, 1.3 us here, the prefill leg's
 * (278 bytes) 2.2 and 0.5 us. Here strings are copied in runs checked
 * eight bytes at a time, and the containers being written sit on a small
 * stack.
 *
 * What it writes: what jansson 2.14's dump.c writes under JSON_COMPACT.
 * Strings escape '"', '\\' and the control characters (\b \f \n \r \t,
 * others as \u00XX with upper-case hex) and nothing else: not '/', not
 * non-ASCII. Integers in decimal. Reals as "%.17g" in the C locale, with
 * ".0" added when that shows neither a point nor an exponent, and the
 * exponent's '+' and leading zeros dropped (jansson's jsonp_dtostr).
 * Keys in the object's order. tests/fuzz/fuzz-json-write.c holds it to
 * json_dumps on trees built from random input. One difference, on
 * purpose: a key that is not UTF-8 (only jansson's _nocheck setters make
 * one) is refused like such a string, where json_dumps overlooks its own
 * failure and writes the key without its closing quote.
 */
#include "build-config.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/json-write.h"
#include "core/json-bytes.h"

/* Containers tracked on the stack; a deeper tree spills to a hash set. */
#define PARENTS_INLINE 32

struct wr {
	GString *out;
	size_t depth;
	const json_t *parents[PARENTS_INLINE];
	GHashTable *deep;
};

static int write_value(struct wr *w, const json_t *v);

/* g_string_append_len without its call when the bytes fit, which they
 * mostly do: most puts are a few bytes. */
static inline void
put(GString *out, const char *s, size_t n)
{
	if (out->len + n < out->allocated_len) {
		memcpy(out->str + out->len, s, n);
		out->len += n;
		out->str[out->len] = '\0';
		return;
	}
	g_string_append_len(out, s, (gssize)n);
}

int
nw_json_write_string(GString *out, const char *str, size_t len)
{
	static const char hex[] = "0123456789ABCDEF";
	const unsigned char *s = (const unsigned char *)str;
	size_t start = out->len, from = 0, i = 0;

	g_string_append_c(out, '"');
	for (;;) {
		unsigned char c;
		char esc[6];
		size_t n = 2;

		i = nw_json_skip_plain(s, i, len);
		if (i >= len)
			break;
		c = s[i];
		if (c >= 0x80) {
			size_t k = nw_utf8_len(s + i, len - i);

			if (k == 0) {
				g_string_truncate(out, start);
				return -1;
			}
			i += k;
			continue;
		}
		esc[0] = '\\';
		switch (c) {
		case '"': esc[1] = '"'; break;
		case '\\': esc[1] = '\\'; break;
		case '\b': esc[1] = 'b'; break;
		case '\f': esc[1] = 'f'; break;
		case '\n': esc[1] = 'n'; break;
		case '\r': esc[1] = 'r'; break;
		case '\t': esc[1] = 't'; break;
		default:
			memcpy(esc + 1, "u00", 3);
			esc[4] = hex[c >> 4];
			esc[5] = hex[c & 0xF];
			n = 6;
			break;
		}
		put(out, str + from, i - from);
		put(out, esc, n);
		from = ++i;
	}
	put(out, str + from, len - from);
	g_string_append_c(out, '"');
	return 0;
}

void
nw_json_write_integer(GString *out, json_int_t v)
{
	char buf[24];
	char *p = buf + sizeof buf;
	uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;

	do {
		*--p = (char)('0' + u % 10);
		u /= 10;
	} while (u != 0);
	if (v < 0)
		*--p = '-';
	put(out, p, (size_t)(buf + sizeof buf - p));
}

/*
 * "%.17g" of v as glibc prints it, for 1 <= |v| < 2^53 (a timestamp with
 * a fraction, say), without printf's arbitrary-precision arithmetic: v is
 * m * 2^-s exactly (m < 2^53, 0 <= s <= 52), so its 17 significant digits
 * are m * 10^k / 2^s rounded, which 128 bits hold (m * 10^16 < 2^107).
 * Rounding is to nearest with ties to even, as glibc's in the default
 * rounding mode. The notation is fixed ("%g" switches to an exponent only
 * from 10^17 or below 10^-4), trailing zeros of the fraction dropped, and
 * the point too when nothing follows it. The length written to buf (at
 * least 24 bytes), or 0 for any other v, which printf then formats.
 */
static size_t
format_real17(char *buf, double v)
{
	static const uint64_t pow10[] = {
		1ull, 10ull, 100ull, 1000ull, 10000ull, 100000ull, 1000000ull, 10000000ull,
		100000000ull, 1000000000ull, 10000000000ull, 100000000000ull,
		1000000000000ull, 10000000000000ull, 100000000000000ull,
		1000000000000000ull, 10000000000000000ull, 100000000000000000ull,
	};
	double a = fabs(v);
	unsigned __int128 scaled, q, rem, half;
	uint64_t m, ipart, d;
	char digits[17];
	int exp2, ints = 1, frac, shift;
	size_t n = 0;

	if (!(a >= 1.0 && a < 9007199254740992.0))
		return 0;
	/* a = f * 2^exp2 with f in [0.5, 1): m = f * 2^53 is an integer */
	m = (uint64_t)ldexp(frexp(a, &exp2), 53);
	shift = 53 - exp2;
	for (ipart = (uint64_t)a; ints < 16 && ipart >= pow10[ints]; ints++)
		;
	frac = 17 - ints;
	scaled = (unsigned __int128)m * pow10[frac];
	q = scaled >> shift;
	if (shift > 0) {
		rem = scaled & (((unsigned __int128)1 << shift) - 1);
		half = (unsigned __int128)1 << (shift - 1);
		if (rem > half || (rem == half && (q & 1) != 0))
			q++;
	}
	/* q < 10^17: a below 10^ints rounds to at most 10^17 - 1 units, since
	 * the double below a power of ten is more than half a unit of the
	 * 17th digit away from it. */
	d = (uint64_t)q;
	for (int i = 16; i >= 0; i--) {
		digits[i] = (char)('0' + d % 10);
		d /= 10;
	}
	while (frac > 0 && digits[ints + frac - 1] == '0')
		frac--;
	if (v < 0)
		buf[n++] = '-';
	memcpy(buf + n, digits, (size_t)ints);
	n += (size_t)ints;
	if (frac > 0) {
		buf[n++] = '.';
		memcpy(buf + n, digits + ints, (size_t)frac);
		n += (size_t)frac;
	}
	buf[n] = '\0';
	return n;
}

/* jansson's jsonp_dtostr at its default precision. */
static void
write_real(GString *out, double v)
{
	char buf[G_ASCII_DTOSTR_BUF_SIZE + 4];
	size_t n;
	char *e;

	n = format_real17(buf, v);
	if (n == 0) {
		g_ascii_formatd(buf, sizeof buf - 3, "%.17g", v);
		n = strlen(buf);
	}
	if (strchr(buf, '.') == NULL && strchr(buf, 'e') == NULL) {
		memcpy(buf + n, ".0", 3);
		n += 2;
	}
	e = strchr(buf, 'e');
	if (e != NULL) {
		/* "e+05" -> "e5", "e-05" -> "e-5" */
		char *from = e + 1, *to = e + 1;

		if (*from == '+' || *from == '-') {
			if (*from == '-')
				to++;
			from++;
		}
		while (*from == '0' && from[1] != '\0')
			from++;
		memmove(to, from, (size_t)(buf + n - from) + 1);
		n -= (size_t)(from - to);
	}
	put(out, buf, n);
}

/* Enter container v: -1 when it is already being written (a cycle). */
static int
enter(struct wr *w, const json_t *v)
{
	for (size_t i = 0; i < MIN(w->depth, (size_t)PARENTS_INLINE); i++)
		if (w->parents[i] == v)
			return -1;
	if (w->depth >= PARENTS_INLINE) {
		if (w->deep == NULL)
			w->deep = g_hash_table_new(NULL, NULL);
		if (!g_hash_table_add(w->deep, (gpointer)v))
			return -1;
	} else {
		w->parents[w->depth] = v;
	}
	w->depth++;
	return 0;
}

static void
leave(struct wr *w, const json_t *v)
{
	w->depth--;
	if (w->depth >= PARENTS_INLINE)
		g_hash_table_remove(w->deep, v);
}

static int
write_array(struct wr *w, const json_t *v)
{
	size_t n = json_array_size(v);

	g_string_append_c(w->out, '[');
	for (size_t i = 0; i < n; i++) {
		if (i > 0)
			g_string_append_c(w->out, ',');
		if (write_value(w, json_array_get(v, i)) != 0)
			return -1;
	}
	g_string_append_c(w->out, ']');
	return 0;
}

static int
write_object(struct wr *w, const json_t *v)
{
	void *it = json_object_iter((json_t *)v);

	g_string_append_c(w->out, '{');
	while (it != NULL) {
		if (nw_json_write_string(w->out, json_object_iter_key(it),
		                         json_object_iter_key_len(it)) != 0)
			return -1;
		g_string_append_c(w->out, ':');
		if (write_value(w, json_object_iter_value(it)) != 0)
			return -1;
		it = json_object_iter_next((json_t *)v, it);
		if (it != NULL)
			g_string_append_c(w->out, ',');
	}
	g_string_append_c(w->out, '}');
	return 0;
}

static int
write_value(struct wr *w, const json_t *v)
{
	int rc;

	if (v == NULL)
		return -1;
	switch (json_typeof(v)) {
	case JSON_NULL:
		put(w->out, "null", 4);
		return 0;
	case JSON_TRUE:
		put(w->out, "true", 4);
		return 0;
	case JSON_FALSE:
		put(w->out, "false", 5);
		return 0;
	case JSON_INTEGER:
		nw_json_write_integer(w->out, json_integer_value(v));
		return 0;
	case JSON_REAL:
		write_real(w->out, json_real_value(v));
		return 0;
	case JSON_STRING:
		return nw_json_write_string(w->out, json_string_value(v), json_string_length(v));
	case JSON_ARRAY:
	case JSON_OBJECT:
		if (enter(w, v) != 0)
			return -1;
		rc = json_is_array(v) ? write_array(w, v) : write_object(w, v);
		leave(w, v);
		return rc;
	}
	return -1;
}

int
nw_json_write(const json_t *v, GString *out, size_t flags)
{
	struct wr w = { .out = out };
	size_t start = out->len;
	int rc;

	g_return_val_if_fail((flags & JSON_COMPACT) &&
	                     (flags & ~(size_t)(JSON_COMPACT | JSON_ENCODE_ANY)) == 0, -1);
	if (v == NULL || (!(flags & JSON_ENCODE_ANY) && !json_is_array(v) && !json_is_object(v)))
		return -1;
	rc = write_value(&w, v);
	if (w.deep != NULL)
		g_hash_table_destroy(w.deep);
	if (rc != 0)
		g_string_truncate(out, start);
	return rc;
}

char *
nw_json_dumps(const json_t *v, size_t flags, size_t *len)
{
	GString *out = g_string_sized_new(256);

	if (nw_json_write(v, out, flags) != 0) {
		g_string_free(out, TRUE);
		*len = 0;
		return NULL;
	}
	*len = out->len;
	return g_string_free(out, FALSE);
}
