/*
 * Byte tests shared by the JSON reader and writer (json-read.c,
 * json-write.c): what a string copies as it is, and UTF-8 exactly as
 * jansson checks it.
 */
#ifndef NW_CORE_JSON_BYTES_H
#define NW_CORE_JSON_BYTES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <glib.h>

/* The length of the UTF-8 sequence at s (1 to 4 bytes, avail > 0), or 0
 * when it is not one: a stray continuation byte, an overlong form, a
 * surrogate, beyond U+10FFFF or cut short. */
static inline size_t
nw_utf8_len(const unsigned char *s, size_t avail)
{
	unsigned c = s[0];
	uint32_t v;
	size_t n;

	if (c < 0x80)
		return 1;
	if (c < 0xC2 || c > 0xF4)
		return 0;
	n = c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
	if (n > avail)
		return 0;
	v = c & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
	for (size_t i = 1; i < n; i++) {
		if ((s[i] & 0xC0) != 0x80)
			return 0;
		v = (v << 6) | (s[i] & 0x3F);
	}
	if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF) || (n == 3 && v < 0x800) ||
	    (n == 4 && v < 0x10000))
		return 0;
	return n;
}

/* Bytes a string copies as they are: printable ASCII but '"' and '\\'. */
static inline bool
nw_json_plain(unsigned char c)
{
	return c >= 0x20 && c < 0x80 && c != '"' && c != '\\';
}

/* The bytes of w that need a look (a control byte, a quote, a backslash
 * or a byte above 0x7F), each as its high bit. Each test is the classic
 * "has a byte below n" word trick: a borrow can only mark bytes above a
 * marked one, so the lowest mark is exact. */
static inline uint64_t
nw_json_special8(uint64_t w)
{
	const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
	uint64_t quote = w ^ (ones * '"'), bslash = w ^ (ones * '\\');

	return (((w - ones * 0x20) & ~w) | ((quote - ones) & ~quote) |
	        ((bslash - ones) & ~bslash) | w) & highs;
}

/* The first byte of s[i, len) that is not plain, or len: eight at a time. */
static inline size_t
nw_json_skip_plain(const unsigned char *s, size_t i, size_t len)
{
	uint64_t w, m;

	while (i + 8 <= len) {
		memcpy(&w, s + i, 8);
		m = nw_json_special8(w);
		if (m != 0) {
#if G_BYTE_ORDER == G_LITTLE_ENDIAN
			/* the lowest mark is the first byte in memory */
			return i + (size_t)(__builtin_ctzll(m) >> 3);
#else
			break;
#endif
		}
		i += 8;
	}
	while (i < len && nw_json_plain(s[i]))
		i++;
	return i;
}

#endif /* NW_CORE_JSON_BYTES_H */
