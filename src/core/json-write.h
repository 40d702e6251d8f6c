/*
 * A JSON writer for the request path: the bytes json_dumps gives with
 * JSON_COMPACT, several times faster (see json-write.c).
 */
#ifndef NW_CORE_JSON_WRITE_H
#define NW_CORE_JSON_WRITE_H

#include <stddef.h>

#include <glib.h>
#include <jansson.h>

/*
 * Append v to out as json_dumps(v, flags) writes it. flags must hold
 * JSON_COMPACT and may hold JSON_ENCODE_ANY; nothing else. 0, or -1 (out
 * left as it was) where json_dumps gives NULL: v NULL, a string or key
 * that is not UTF-8, a container inside itself, or a value that is not
 * an array or object without JSON_ENCODE_ANY.
 */
int nw_json_write(const json_t *v, GString *out, size_t flags);

/* The text json_dumps(v, flags) returns, malloc'd (free() or g_free()
 * it), its length in *len; NULL as json_dumps. */
char *nw_json_dumps(const json_t *v, size_t flags, size_t *len);

/* Append s[0, len) as a JSON string literal, escaped as jansson escapes
 * it; -1 (out left as it was) when s is not UTF-8. */
int nw_json_write_string(GString *out, const char *s, size_t len);

/* Append v in decimal, as jansson writes an integer. */
void nw_json_write_integer(GString *out, json_int_t v);

#endif /* NW_CORE_JSON_WRITE_H */
