/*
 * The request path's JSON reader: jansson's json_loadb, read from the
 * buffer in runs.
 *
 * Why by hand. jansson stays (the plugin ABI passes json_t), but its
 * reader lexes one byte at a time: every byte goes through a callback,
 * UTF-8 is checked and the byte appended to a growing token buffer, and
 * a string is then copied out of that buffer: about 8.6 ns a byte of
 * plain string and 70 ns a value. With its writer it was over a quarter
 * of the daemon's CPU for a two-leg request (issue 15). Here strings are
 * scanned eight bytes at a time and built straight from the input,
 * numbers are converted in place, and the tree is built with jansson's
 * own constructors, which now take most of the time. bench/json/README.md
 * measures both: a vLLM prefill answer (669 bytes) 12 us with json_loadb,
 * 2.7 us here; a token chunk (211 bytes) 3.7 and 0.8 us; a client body
 * (120 bytes) 2.0 and 0.4 us.
 *
 * What "exactly" means. The same verdict and the same tree as json_loadb
 * with the same flags, and on error the same json_error_t. So the reader
 * follows jansson's lexer token by token, including the order in which
 * it looks at bytes (which of two faults is reported), its lookahead
 * (one byte after a number or a word), its two passes over a string (a
 * bad \u escape is reported after the string's closing quote, a byte
 * that is not UTF-8 where it stands) and its error context (the token
 * read so far, when at most 20 bytes). One quirk is kept on purpose: a
 * NUL byte right after a number or true/false/null is dropped, as
 * jansson's stream loses a pushed-back NUL. tests/fuzz/fuzz-json-read.c
 * holds both readers to all of this on random input.
 */
#include "build-config.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/json-read.h"
#include "core/json-bytes.h"

/* jansson's JSON_PARSER_MAX_DEPTH (its private header) */
#define MAX_DEPTH 2048
/* jansson quotes the token in an error only up to this length */
#define CONTEXT_MAX 20

enum {
	TK_INVALID = -1,
	TK_EOF = 0,
	/* '{', '}', '[', ']', ':' and ',' stand for themselves */
	TK_STRING = 256,
	TK_INTEGER,
	TK_REAL,
	TK_TRUE,
	TK_FALSE,
	TK_NULL,
};

/* A lookahead that ran into bytes that are not UTF-8. */
#define LOOK_BAD (-2)
#define LOOK_EOF (-1)

/* Decoded escaped strings; the common ones fit on the stack. */
struct scratch {
	char *buf;
	size_t len, cap;
	char stack[256];
};

struct rd {
	const unsigned char *s;
	size_t len;
	size_t p;               /* the next byte to read */
	size_t flags;
	json_error_t *err;
	bool failed;
	/* the current token: its text is s[tok_at, p) */
	int tok;
	size_t tok_at;
	size_t str_at, str_len; /* TK_STRING: raw body, or decoded in scratch */
	bool str_decoded;
	json_int_t ival;
	double rval;
	size_t depth;
	bool nul_after;         /* the token's lookahead was a NUL byte */
	GArray *dropped;        /* offsets of NUL bytes dropped (see put_back) */
	struct scratch sc;
};

/* ------------------------------------------------------------ errors --- */

/* Where jansson's stream stands after reading s[0, at): line, column
 * (characters since the last newline) and byte position, neither
 * counting dropped NUL bytes. */
static void
where(const struct rd *r, size_t at, json_error_t *err)
{
	size_t dropped = r->dropped ? r->dropped->len : 0, k = 0;
	int line = 1, column = 0;

	for (size_t i = 0; i < at; i++) {
		unsigned char c = r->s[i];

		if (k < dropped && g_array_index(r->dropped, size_t, k) == i) {
			k++;
			continue;
		}
		if (c == '\n') {
			line++;
			column = 0;
		} else if (c < 0x80 || (c >= 0xC2 && c <= 0xF4)) {
			column++; /* a character's first byte */
		}
	}
	err->line = line;
	err->column = column;
	err->position = (int)(at - dropped);
}

/* Record an error found with s[0, at) read, unless one already was (the
 * first one stands, as in jansson). The message gets jansson's context:
 * the token read so far, or "end of file" when there is none. */
static void G_GNUC_PRINTF(4, 5)
fail_at(struct rd *r, enum json_error_code code, size_t at, const char *fmt, ...)
{
	char msg[JSON_ERROR_TEXT_LENGTH], text[JSON_ERROR_TEXT_LENGTH + CONTEXT_MAX + 32];
	const char *ctx = (const char *)r->s + r->tok_at;
	size_t n = at > r->tok_at ? at - r->tok_at : 0;
	va_list ap;

	if (r->failed)
		return;
	r->failed = true;
	if (r->err == NULL)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (n > 0 && ctx[0] != '\0') {
		if (n <= CONTEXT_MAX)
			snprintf(text, sizeof text, "%s near '%.*s'", msg, (int)strnlen(ctx, n), ctx);
		else
			g_strlcpy(text, msg, sizeof text);
	} else {
		if (code == json_error_invalid_syntax)
			code = json_error_premature_end_of_input;
		if (code == json_error_invalid_utf8)
			g_strlcpy(text, msg, sizeof text);
		else
			snprintf(text, sizeof text, "%s near end of file", msg);
	}
	where(r, at, r->err);
	g_strlcpy(r->err->text, text, JSON_ERROR_TEXT_LENGTH - 1);
	r->err->text[JSON_ERROR_TEXT_LENGTH - 1] = (char)code;
}

/* An error about the current token, read whole. */
#define fail(r, code, ...) fail_at((r), (code), (r)->p, __VA_ARGS__)

static void
out_of_memory(struct rd *r)
{
	fail(r, json_error_out_of_memory, "out of memory");
}

/* ------------------------------------------------------------- bytes --- */

/* The byte at p without taking it: LOOK_EOF at the end, LOOK_BAD (and
 * the error) when it starts no UTF-8 sequence, as jansson's stream
 * checks a sequence when it first reads its first byte. */
static inline int
look(struct rd *r)
{
	unsigned char c;

	if (r->p >= r->len)
		return LOOK_EOF;
	c = r->s[r->p];
	if (c >= 0x80 && nw_utf8_len(r->s + r->p, r->len - r->p) == 0) {
		fail_at(r, json_error_invalid_utf8, r->p, "unable to decode byte 0x%x", c);
		return LOOK_BAD;
	}
	return c;
}

/* ----------------------------------------------------------- scratch --- */

static bool
scratch_reserve(struct scratch *sc, size_t more)
{
	size_t cap;
	char *buf;

	if (sc->cap - sc->len >= more)
		return true;
	cap = MAX(sc->cap * 2, sc->len + more);
	if (sc->buf == sc->stack) {
		buf = g_try_malloc(cap);
		if (buf != NULL)
			memcpy(buf, sc->stack, sc->len);
	} else {
		buf = g_try_realloc(sc->buf, cap);
	}
	if (buf == NULL)
		return false;
	sc->buf = buf;
	sc->cap = cap;
	return true;
}

/* ------------------------------------------------------------ strings --- */

static uint32_t
hex4(const unsigned char *p)
{
	uint32_t v = 0;

	for (int i = 0; i < 4; i++)
		v = v * 16 + (uint32_t)g_ascii_xdigit_value((char)p[i]);
	return v;
}

/*
 * Decode body[0, len), a string body whose escapes are known to be well
 * formed, into out (room for len bytes): its length, or -1 with the
 * offending escape's value(s) in *bad and *bad2 (*bad2 > 0xFFFF: none)
 * when a \u escape is half a surrogate pair. jansson's second pass.
 */
static ssize_t
decode_escaped(const unsigned char *body, size_t len, char *out, uint32_t *bad,
               uint32_t *bad2)
{
	size_t i = 0, o = 0;

	while (i < len) {
		const unsigned char *esc = memchr(body + i, '\\', len - i);
		size_t run = esc ? (size_t)(esc - body) - i : len - i;
		unsigned char c;
		uint32_t v, lo;

		memcpy(out + o, body + i, run);
		o += run;
		i += run;
		if (i >= len)
			break;
		c = body[i + 1];
		i += 2;
		switch (c) {
		case 'b': out[o++] = '\b'; continue;
		case 'f': out[o++] = '\f'; continue;
		case 'n': out[o++] = '\n'; continue;
		case 'r': out[o++] = '\r'; continue;
		case 't': out[o++] = '\t'; continue;
		case 'u': break;
		default: out[o++] = (char)c; continue; /* '"', '\\' or '/' */
		}
		v = hex4(body + i);
		i += 4;
		if (v >= 0xD800 && v <= 0xDBFF) {
			if (i + 1 < len && body[i] == '\\' && body[i + 1] == 'u') {
				lo = hex4(body + i + 2);
				i += 6;
				if (lo < 0xDC00 || lo > 0xDFFF) {
					*bad = v;
					*bad2 = lo;
					return -1;
				}
				v = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
			} else {
				*bad = v;
				*bad2 = 0x10000;
				return -1;
			}
		} else if (v >= 0xDC00 && v <= 0xDFFF) {
			*bad = v;
			*bad2 = 0x10000;
			return -1;
		}
		o += (size_t)g_unichar_to_utf8(v, out + o);
	}
	return (ssize_t)o;
}

/*
 * A string token, its opening quote read: jansson's first pass (the
 * token's extent, control characters, escapes' form, UTF-8) in runs,
 * then its second (decoding), only when there are escapes.
 */
static void
scan_string(struct rd *r)
{
	const unsigned char *s = r->s;
	size_t p = r->p, len = r->len;
	bool escaped = false;

	r->tok = TK_INVALID;
	for (;;) {
		unsigned char c;
		int d;

		p = nw_json_skip_plain(s, p, len);
		if (p >= len) {
			r->p = len;
			fail(r, json_error_premature_end_of_input, "premature end of input");
			return;
		}
		c = s[p];
		if (c == '"')
			break;
		if (c >= 0x80) {
			size_t n = nw_utf8_len(s + p, len - p);

			if (n == 0) {
				r->p = p;
				fail(r, json_error_invalid_utf8, "unable to decode byte 0x%x", c);
				return;
			}
			p += n;
			continue;
		}
		if (c < 0x20) {
			r->p = p; /* jansson puts the control character back */
			if (c == '\n')
				fail(r, json_error_invalid_syntax, "unexpected newline");
			else
				fail(r, json_error_invalid_syntax, "control character 0x%x", c);
			return;
		}
		/* a backslash: the escape's form, read as jansson reads it
		 * (a byte it reads is part of the error's context) */
		escaped = true;
		r->p = p + 1;
		d = look(r);
		if (d == LOOK_BAD)
			return;
		if (d == 'u') {
			r->p++;
			for (int i = 0; i < 4; i++) {
				d = look(r);
				if (d == LOOK_BAD)
					return;
				if (!g_ascii_isxdigit(d)) {
					if (d != LOOK_EOF)
						r->p++;
					fail(r, json_error_invalid_syntax, "invalid escape");
					return;
				}
				r->p++;
			}
			p = r->p;
			continue;
		}
		if (d == '"' || d == '\\' || d == '/' || d == 'b' || d == 'f' || d == 'n' ||
		    d == 'r' || d == 't') {
			p = r->p + 1;
			continue;
		}
		if (d != LOOK_EOF)
			r->p++;
		fail(r, json_error_invalid_syntax, "invalid escape");
		return;
	}
	r->p = p + 1;
	r->str_at = r->tok_at + 1;
	r->str_len = p - r->str_at;
	r->str_decoded = false;
	if (escaped) {
		uint32_t bad = 0, bad2 = 0;
		ssize_t n;

		if (!scratch_reserve(&r->sc, r->str_len)) {
			out_of_memory(r);
			return;
		}
		n = decode_escaped(s + r->str_at, r->str_len, r->sc.buf + r->sc.len, &bad, &bad2);
		if (n < 0) {
			if (bad2 <= 0xFFFF)
				fail(r, json_error_invalid_syntax, "invalid Unicode '\\u%04X\\u%04X'",
				     bad, bad2);
			else
				fail(r, json_error_invalid_syntax, "invalid Unicode '\\u%04X'", bad);
			return;
		}
		r->str_at = r->sc.len;
		r->str_len = (size_t)n;
		r->str_decoded = true;
	}
	r->tok = TK_STRING;
}

static inline const char *
str_value(const struct rd *r)
{
	return r->str_decoded ? r->sc.buf + r->str_at : (const char *)r->s + r->str_at;
}

/* ------------------------------------------------------------ numbers --- */

static const double exact_pow10[] = {
	1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
	1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
};

/*
 * The double nearest to the real number text t[0, n) (JSON grammar,
 * checked). When the digits make an integer below 2^53 and the scale is
 * a power of ten up to 1e22, both are exact doubles and one IEEE
 * multiply or divide rounds correctly, which is what strtod gives.
 * Otherwise strtod itself, without the locale (jansson converts the
 * decimal point for its locale, so both read '.').
 */
static double
real_value(const unsigned char *t, size_t n)
{
#if FLT_EVAL_METHOD == 0
	uint64_t m = 0;
	int digits = 0, scale = 0, e = 0;
	bool neg = false, eneg = false, seen = false;
	size_t i = 0;

	if (t[i] == '-') {
		neg = true;
		i++;
	}
	for (; i < n && g_ascii_isdigit(t[i]); i++) {
		seen = seen || t[i] != '0';
		if (seen && ++digits > 19)
			goto slow;
		m = m * 10 + (uint64_t)(t[i] - '0');
	}
	if (i < n && t[i] == '.') {
		for (i++; i < n && g_ascii_isdigit(t[i]); i++) {
			seen = seen || t[i] != '0';
			if (seen && ++digits > 19)
				goto slow;
			m = m * 10 + (uint64_t)(t[i] - '0');
			scale--;
		}
	}
	if (i < n) { /* 'e' or 'E' */
		i++;
		if (t[i] == '+' || t[i] == '-')
			eneg = t[i++] == '-';
		for (; i < n; i++) {
			if (e > 1000)
				goto slow;
			e = e * 10 + (t[i] - '0');
		}
	}
	scale += eneg ? -e : e;
	if (m <= (UINT64_C(1) << 53) && scale >= -22 && scale <= 22) {
		double d = (double)m;

		d = scale >= 0 ? d * exact_pow10[scale] : d / exact_pow10[-scale];
		return neg ? -d : d;
	}
slow:
#endif
	{
		char stack[64];
		char *copy = n < sizeof stack ? stack : g_malloc(n + 1);
		double d;

		memcpy(copy, t, n);
		copy[n] = '\0';
		d = g_ascii_strtod(copy, NULL);
		if (copy != stack)
			g_free(copy);
		return d;
	}
}

/* The lookahead after a number or a word: jansson puts it back, and a
 * NUL put back is lost (its stream takes a NUL in its one-character
 * buffer for "empty"), so the next token starts after it. */
static inline void
put_back(struct rd *r, int c)
{
	r->nul_after = c == 0;
}

/*
 * A number token, its first byte ('-' or a digit) at tok_at. Follows
 * jansson's lex_scan_number: what it reads, what it puts back, and that
 * a malformed number is an invalid token reported by the parser.
 */
static void
scan_number(struct rd *r)
{
	const unsigned char *s = r->s;
	int c;

	r->tok = TK_INVALID;
	r->p = r->tok_at + 1;
	c = s[r->tok_at];
	if (c == '-') {
		c = look(r);
		if (c < 0)
			return;
		r->p++;
	}
	if (c == '0') {
		c = look(r);
		if (c == LOOK_BAD)
			return;
		if (g_ascii_isdigit(c))
			return; /* a leading zero: the digit is put back */
	} else if (g_ascii_isdigit(c)) {
		while (r->p < r->len && g_ascii_isdigit(s[r->p]))
			r->p++;
		c = look(r);
		if (c == LOOK_BAD)
			return;
	} else {
		r->p--; /* not a digit after '-': put back */
		return;
	}
	if (c != '.' && c != 'E' && c != 'e') {
		/* an integer: strtoll's range, by hand */
		const unsigned char *d = s + r->tok_at;
		bool neg = *d == '-';
		uint64_t v = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;

		for (d += neg; d < s + r->p; d++) {
			unsigned digit = (unsigned)(*d - '0');

			if (v > (limit - digit) / 10) {
				if (neg)
					fail(r, json_error_numeric_overflow, "too big negative integer");
				else
					fail(r, json_error_numeric_overflow, "too big integer");
				return;
			}
			v = v * 10 + digit;
		}
		r->ival = neg ? (json_int_t)(0 - v) : (json_int_t)v;
		put_back(r, c);
		r->tok = TK_INTEGER;
		return;
	}
	if (c == '.') {
		r->p++;
		c = look(r);
		if (c == LOOK_BAD || !g_ascii_isdigit(c))
			return; /* "1." and no digit: the byte is put back */
		while (r->p < r->len && g_ascii_isdigit(s[r->p]))
			r->p++;
		c = look(r);
		if (c == LOOK_BAD)
			return;
	}
	if (c == 'E' || c == 'e') {
		r->p++;
		c = look(r);
		if (c == LOOK_BAD)
			return;
		if (c == '+' || c == '-') {
			r->p++;
			c = look(r);
			if (c == LOOK_BAD)
				return;
		}
		if (!g_ascii_isdigit(c))
			return;
		while (r->p < r->len && g_ascii_isdigit(s[r->p]))
			r->p++;
		c = look(r);
		if (c == LOOK_BAD)
			return;
	}
	r->rval = real_value(s + r->tok_at, r->p - r->tok_at);
	if (isinf(r->rval)) {
		fail(r, json_error_numeric_overflow, "real number overflow");
		return;
	}
	put_back(r, c);
	r->tok = TK_REAL;
}

/* ------------------------------------------------------------- tokens --- */

/* The next token. */
static int
next_token(struct rd *r)
{
	const unsigned char *s = r->s;
	size_t p = r->p;
	int c;

	if (r->nul_after) {
		/* see put_back */
		if (r->dropped == NULL)
			r->dropped = g_array_new(FALSE, FALSE, sizeof(size_t));
		g_array_append_val(r->dropped, p);
		r->nul_after = false;
		p++;
	}
	while (p < r->len && (s[p] == ' ' || s[p] == '\n' || s[p] == '\r' || s[p] == '\t'))
		p++;
	r->p = p;
	r->tok_at = p;
	c = look(r);
	if (c == LOOK_EOF)
		return r->tok = TK_EOF;
	if (c == LOOK_BAD)
		return r->tok = TK_INVALID;
	r->p++;
	switch (c) {
	case '{': case '}': case '[': case ']': case ':': case ',':
		return r->tok = c;
	case '"':
		scan_string(r);
		return r->tok;
	case '-':
	case '0': case '1': case '2': case '3': case '4':
	case '5': case '6': case '7': case '8': case '9':
		scan_number(r);
		return r->tok;
	default:
		break;
	}
	if (g_ascii_isalpha(c)) {
		/* the whole word, for a clearer error */
		size_t n;

		while (r->p < r->len && g_ascii_isalpha(s[r->p]))
			r->p++;
		c = look(r);
		if (c == LOOK_BAD)
			return r->tok = TK_INVALID;
		n = r->p - r->tok_at;
		if (n == 4 && memcmp(s + r->tok_at, "true", 4) == 0)
			r->tok = TK_TRUE;
		else if (n == 5 && memcmp(s + r->tok_at, "false", 5) == 0)
			r->tok = TK_FALSE;
		else if (n == 4 && memcmp(s + r->tok_at, "null", 4) == 0)
			r->tok = TK_NULL;
		else
			return r->tok = TK_INVALID;
		put_back(r, c);
		return r->tok;
	}
	/* anything else: the token is the whole character */
	if (c >= 0x80)
		r->p = r->tok_at + nw_utf8_len(s + r->tok_at, r->len - r->tok_at);
	return r->tok = TK_INVALID;
}

/* The next token, with compact JSON's common case inline: no whitespace
 * before it, and a punctuation mark or a string, read as next_token reads
 * them. */
static inline int
next(struct rd *r)
{
	size_t p = r->p;
	int c;

	if (G_UNLIKELY(r->nul_after || p >= r->len))
		return next_token(r);
	c = r->s[p];
	switch (c) {
	case '{': case '}': case '[': case ']': case ':': case ',':
		r->tok_at = p;
		r->p = p + 1;
		return r->tok = c;
	case '"':
		r->tok_at = p;
		r->p = p + 1;
		scan_string(r);
		return r->tok;
	default:
		return next_token(r);
	}
}

/* ------------------------------------------------------------- parser --- */

static json_t *parse_value(struct rd *r);

static json_t *
parse_object(struct rd *r)
{
	json_t *obj = json_object();

	if (obj == NULL) {
		out_of_memory(r);
		return NULL;
	}
	if (next(r) == '}')
		return obj;
	for (;;) {
		size_t key_at, key_len;
		bool key_decoded;
		json_t *v;

		if (r->tok != TK_STRING) {
			fail(r, json_error_invalid_syntax, "string or '}' expected");
			goto bad;
		}
		key_at = r->str_at;
		key_len = r->str_len;
		key_decoded = r->str_decoded;
		if (key_decoded && memchr(str_value(r), '\0', key_len)) {
			fail(r, json_error_null_byte_in_key, "NUL byte in object key not supported");
			goto bad;
		}
		if ((r->flags & JSON_REJECT_DUPLICATES) &&
		    json_object_getn(obj, str_value(r), key_len) != NULL) {
			fail(r, json_error_duplicate_key, "duplicate object key");
			goto bad;
		}
		/* keep a decoded key in the scratch while the value is read */
		r->tok = TK_INVALID;
		if (key_decoded)
			r->sc.len = key_at + key_len;
		if (next(r) != ':') {
			fail(r, json_error_invalid_syntax, "':' expected");
			goto bad;
		}
		next(r);
		v = parse_value(r);
		if (v == NULL)
			goto bad;
		if (json_object_setn_new_nocheck(obj, key_decoded ? r->sc.buf + key_at :
		                                 (const char *)r->s + key_at, key_len, v) != 0) {
			out_of_memory(r);
			goto bad;
		}
		if (key_decoded)
			r->sc.len = key_at;
		if (next(r) != ',')
			break;
		next(r);
	}
	if (r->tok != '}') {
		fail(r, json_error_invalid_syntax, "'}' expected");
		goto bad;
	}
	return obj;
bad:
	json_decref(obj);
	return NULL;
}

static json_t *
parse_array(struct rd *r)
{
	json_t *arr = json_array();

	if (arr == NULL) {
		out_of_memory(r);
		return NULL;
	}
	if (next(r) == ']')
		return arr;
	while (r->tok != TK_EOF) {
		json_t *v = parse_value(r);

		if (v == NULL)
			goto bad;
		if (json_array_append_new(arr, v) != 0) {
			out_of_memory(r);
			goto bad;
		}
		if (next(r) != ',')
			break;
		next(r);
	}
	if (r->tok != ']') {
		fail(r, json_error_invalid_syntax, "']' expected");
		goto bad;
	}
	return arr;
bad:
	json_decref(arr);
	return NULL;
}

/* The value whose first token is the current one. */
static json_t *
parse_value(struct rd *r)
{
	json_t *v;

	if (r->failed)
		return NULL; /* the lexer found the fault */
	if (++r->depth > MAX_DEPTH) {
		fail(r, json_error_stack_overflow, "maximum parsing depth reached");
		return NULL;
	}
	switch (r->tok) {
	case TK_STRING:
		if (r->str_decoded && !(r->flags & JSON_ALLOW_NUL) &&
		    memchr(str_value(r), '\0', r->str_len)) {
			fail(r, json_error_null_character,
			     "\\u0000 is not allowed without JSON_ALLOW_NUL");
			return NULL;
		}
		v = json_stringn_nocheck(str_value(r), r->str_len);
		break;
	case TK_INTEGER:
		v = json_integer(r->ival);
		break;
	case TK_REAL:
		v = json_real(r->rval);
		break;
	case TK_TRUE:
		v = json_true();
		break;
	case TK_FALSE:
		v = json_false();
		break;
	case TK_NULL:
		v = json_null();
		break;
	case '{':
		v = parse_object(r);
		break;
	case '[':
		v = parse_array(r);
		break;
	case TK_INVALID:
		fail(r, json_error_invalid_syntax, "invalid token");
		return NULL;
	default:
		fail(r, json_error_invalid_syntax, "unexpected token");
		return NULL;
	}
	if (v == NULL) {
		out_of_memory(r); /* unless the container said why */
		return NULL;
	}
	r->depth--;
	return v;
}

json_t *
nw_json_read(const char *text, size_t len, size_t flags, json_error_t *err)
{
	struct rd r = {
		.s = (const unsigned char *)text,
		.len = len,
		.flags = flags,
		.err = err,
		.tok = TK_INVALID,
	};
	json_t *v = NULL;

	if (err != NULL) {
		memset(err, 0, sizeof *err);
		err->line = -1;
		err->column = -1;
		g_strlcpy(err->source, "<buffer>", sizeof err->source);
	}
	if (text == NULL || (flags & ~(size_t)NW_JSON_READ_FLAGS) != 0) {
		if (err != NULL) {
			g_strlcpy(err->text, "wrong arguments", JSON_ERROR_TEXT_LENGTH - 1);
			err->text[JSON_ERROR_TEXT_LENGTH - 1] = (char)json_error_invalid_argument;
		}
		return NULL;
	}
	r.sc.buf = r.sc.stack;
	r.sc.cap = sizeof r.sc.stack;
	next(&r);
	if (!(flags & JSON_DECODE_ANY) && r.tok != '[' && r.tok != '{') {
		fail(&r, json_error_invalid_syntax, "'[' or '{' expected");
		goto out;
	}
	v = parse_value(&r);
	if (v == NULL)
		goto out;
	if (next(&r) != TK_EOF) {
		fail(&r, json_error_end_of_input_expected, "end of file expected");
		json_decref(v);
		v = NULL;
		goto out;
	}
	if (err != NULL)
		err->position = (int)(r.p - (r.dropped ? r.dropped->len : 0));
out:
	if (r.sc.buf != r.sc.stack)
		g_free(r.sc.buf);
	if (r.dropped != NULL)
		g_array_free(r.dropped, TRUE);
	return v;
}

/* ---------------------------------------------------- string bodies --- */

bool
nw_json_string_decode(const char *body, size_t len, GString *out)
{
	const unsigned char *s = (const unsigned char *)body;
	size_t start = out ? out->len : 0;
	size_t i = 0;
	bool escaped = false, ok;
	uint32_t bad, bad2;
	GString *into;
	ssize_t n;

	/* the first pass: form and UTF-8 */
	while (i < len) {
		unsigned char c;

		i = nw_json_skip_plain(s, i, len);
		if (i >= len)
			break;
		c = s[i];
		if (c >= 0x80) {
			size_t k = nw_utf8_len(s + i, len - i);

			if (k == 0)
				return false;
			i += k;
			continue;
		}
		if (c != '\\' || i + 1 >= len)
			return false; /* a raw quote or control byte, or a lone '\' */
		escaped = true;
		c = s[i + 1];
		if (c == 'u') {
			if (i + 6 > len || !g_ascii_isxdigit(s[i + 2]) || !g_ascii_isxdigit(s[i + 3]) ||
			    !g_ascii_isxdigit(s[i + 4]) || !g_ascii_isxdigit(s[i + 5]))
				return false;
			i += 6;
		} else if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' ||
		           c == 'r' || c == 't') {
			i += 2;
		} else {
			return false;
		}
	}
	if (!escaped) {
		if (out)
			g_string_append_len(out, body, (gssize)len);
		return true;
	}
	/* the second: decode, refusing U+0000 */
	into = out ? out : g_string_sized_new(len);
	g_string_set_size(into, start + len);
	n = decode_escaped(s, len, into->str + start, &bad, &bad2);
	ok = n >= 0 && memchr(into->str + start, '\0', (size_t)n) == NULL;
	g_string_truncate(into, ok ? start + (size_t)n : start);
	if (out == NULL)
		g_string_free(into, TRUE);
	return ok;
}
