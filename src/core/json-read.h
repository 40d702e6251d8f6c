/*
 * A JSON reader for the request path that builds jansson's json_t (the
 * plugin ABI hands json_t to plugins) and reads exactly as json_loadb
 * does, several times faster: see json-read.c for why it exists and for
 * what "exactly" covers.
 */
#ifndef NW_CORE_JSON_READ_H
#define NW_CORE_JSON_READ_H

#include <stdbool.h>
#include <stddef.h>

#include <glib.h>
#include <jansson.h>

/* The jansson flags nw_json_read takes; any other is refused. */
#define NW_JSON_READ_FLAGS (JSON_REJECT_DUPLICATES | JSON_DECODE_ANY | JSON_ALLOW_NUL)

/*
 * json_loadb(text, len, flags, err) without jansson's lexer: the same
 * verdict, the same tree (json_equal, and the same key order), and on
 * error the same json_error_t (code, text, line, column and position;
 * source "<buffer>"). text need not be NUL-terminated; only its len
 * bytes are read. flags: a subset of NW_JSON_READ_FLAGS. err may be NULL.
 */
json_t *nw_json_read(const char *text, size_t len, size_t flags, json_error_t *err);

/*
 * Decode the body of a JSON string literal (the bytes between the quotes)
 * and append it to out, as strictly as jansson reads strings: no raw
 * quote or control character, known escapes only, \u escapes with proper
 * surrogate pairs and never U+0000, and valid UTF-8. False leaves out as
 * it was; out NULL only checks.
 */
bool nw_json_string_decode(const char *body, size_t len, GString *out);

#endif /* NW_CORE_JSON_READ_H */
