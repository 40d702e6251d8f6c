/*
 * Client errors: the envelope fields, messages cut to size and made valid
 * UTF-8 whatever bytes a client sent, client values quoted briefly, and the
 * common errors the host raises outside body validation.
 */
#include "build-config.h"

#include "serve/request-parse.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TYPE_INVALID "invalid_request_error"
#define TYPE_SERVER "server_error"

/* ------------------------------------------------------------- UTF-8 --- */

/* Length of the valid UTF-8 sequence at s (n bytes available), or 0. The
 * rules are jansson's (no overlongs, surrogates or code points past
 * U+10FFFF), so a checked message always serialises. */
static size_t
utf8_seq(const unsigned char *s, size_t n)
{
	unsigned c = s[0];
	size_t len;
	uint32_t cp;

	if (c < 0x80)
		return 1;
	if (c < 0xc2)
		return 0; /* a continuation byte, or an overlong lead */
	if (c < 0xe0) {
		len = 2;
		cp = c & 0x1f;
	} else if (c < 0xf0) {
		len = 3;
		cp = c & 0x0f;
	} else if (c < 0xf5) {
		len = 4;
		cp = c & 0x07;
	} else {
		return 0;
	}
	if (len > n)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3f);
	}
	if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
	    (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}

/* Make s valid UTF-8 without control characters, in place: a bad byte
 * becomes '?'. Client bytes may reach a message through the helpers. */
static void
sanitize(char *s)
{
	size_t n = strlen(s);

	for (size_t i = 0; i < n;) {
		unsigned char c = (unsigned char)s[i];
		size_t k = utf8_seq((const unsigned char *)s + i, n - i);

		if (k == 0 || c < 0x20 || c == 0x7f) {
			s[i++] = '?';
			continue;
		}
		i += k;
	}
}

/* Drop a multi-byte character that snprintf cut at the end of s. */
static void
trim_partial(char *s)
{
	size_t n = strlen(s), i = n;

	while (i > 0 && ((unsigned char)s[i - 1] & 0xc0) == 0x80)
		i--;
	if (i > 0 && (unsigned char)s[i - 1] >= 0xc0 &&
	    utf8_seq((const unsigned char *)s + i - 1, n - i + 1) == 0)
		s[i - 1] = '\0';
}

void
nw_client_quote(char *dst, size_t size, const char *s, size_t n)
{
	size_t o = 0, i = 0;

	dst[o++] = '"';
	while (i < n) {
		size_t k = utf8_seq((const unsigned char *)s + i, n - i);
		bool ok = k > 0 && (unsigned char)s[i] >= 0x20 && s[i] != 0x7f;

		if (!ok)
			k = 1;
		/* keep room for "...", the closing quote and the NUL */
		if (i + k > NW_CLIENT_QUOTE_MAX || o + k + 5 > size)
			break;
		if (ok)
			memcpy(dst + o, s + i, k);
		else
			dst[o] = '?';
		o += ok ? k : 1;
		i += k;
	}
	if (i < n) {
		memcpy(dst + o, "...", 3);
		o += 3;
	}
	dst[o++] = '"';
	dst[o] = '\0';
}

/* ------------------------------------------------------------ errors --- */

void
nw_client_error_vset(struct nw_client_error *err, unsigned status, const char *code,
                     const char *param, const char *fmt, va_list ap)
{
	int n;

	err->status = status;
	err->type = status >= 500 ? TYPE_SERVER : TYPE_INVALID;
	err->code = code;
	g_strlcpy(err->param, param ? param : "", sizeof err->param);
	sanitize(err->param);
	n = vsnprintf(err->message, sizeof err->message, fmt, ap);
	if (n < 0)
		g_strlcpy(err->message, "the request is not valid", sizeof err->message);
	else if ((size_t)n >= sizeof err->message)
		trim_partial(err->message);
	sanitize(err->message);
}

void
nw_client_error_set(struct nw_client_error *err, unsigned status, const char *code,
                    const char *param, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	nw_client_error_vset(err, status, code, param, fmt, ap);
	va_end(ap);
}

void
nw_client_error_model_not_found(struct nw_client_error *err, const char *model,
                                const char *served)
{
	char q[NW_CLIENT_QUOTE_MAX + 8], s[NW_CLIENT_QUOTE_MAX + 8];

	nw_client_quote(q, sizeof q, model ? model : "", model ? strlen(model) : 0);
	if (served) {
		nw_client_quote(s, sizeof s, served, strlen(served));
		nw_client_error_set(err, 404, "model_not_found", "model",
		                    "model %s is not served here: use %s (GET /v1/models lists "
		                    "the served models)", q, s);
	} else {
		nw_client_error_set(err, 404, "model_not_found", "model",
		                    "model %s is not served here: GET /v1/models lists the served "
		                    "models", q);
	}
}

void
nw_client_error_no_route(struct nw_client_error *err, const char *method, const char *path)
{
	nw_client_error_set(err, 404, "not_found", NULL, "no route for %s %s", method, path);
}

void
nw_client_error_method_not_allowed(struct nw_client_error *err, const char *method,
                                   const char *path, const char *allow)
{
	nw_client_error_set(err, 405, "method_not_allowed", NULL,
	                    "%s is not allowed on %s: use %s", method, path, allow);
}

void
nw_client_error_too_large(struct nw_client_error *err, uint64_t limit)
{
	nw_client_error_set(err, 413, "request_too_large", NULL,
	                    "the request body is larger than %" G_GUINT64_FORMAT
	                    " bytes, this server's limit", limit);
}

const char *
nw_client_describe_json(const json_t *v, char *buf, size_t size)
{
	char q[NW_CLIENT_QUOTE_MAX + 8];

	switch (json_typeof(v)) {
	case JSON_STRING:
		nw_client_quote(q, sizeof q, json_string_value(v), json_string_length(v));
		snprintf(buf, size, "the string %s", q);
		break;
	case JSON_INTEGER:
		snprintf(buf, size, "the integer %" JSON_INTEGER_FORMAT, json_integer_value(v));
		break;
	case JSON_REAL: {
		/* shortest form that reads back, and always visibly a real */
		double d = json_real_value(v);
		int n = snprintf(buf, size, "the number %.15g", d);
		if (strtod(buf + 11, NULL) != d)
			n = snprintf(buf, size, "the number %.17g", d);
		if (n > 0 && !strpbrk(buf + 11, ".eEin"))
			g_strlcat(buf, ".0", size);
		break;
	}
	case JSON_TRUE:
		g_strlcpy(buf, "true", size);
		break;
	case JSON_FALSE:
		g_strlcpy(buf, "false", size);
		break;
	case JSON_NULL:
		g_strlcpy(buf, "null", size);
		break;
	case JSON_ARRAY:
		g_strlcpy(buf, "an array", size);
		break;
	case JSON_OBJECT:
	default:
		g_strlcpy(buf, "an object", size);
		break;
	}
	return buf;
}

void
nw_client_error_from_json(struct nw_client_error *err, const json_error_t *je)
{
	char text[sizeof je->text];

	switch (json_error_code(je)) {
	case json_error_duplicate_key: {
		/* jansson names the key: ... near '"model"' */
		const char *key = strstr(je->text, " near '");
		int klen = 0;

		if (key) {
			key += 7;
			klen = (int)strlen(key);
			if (klen > 0 && key[klen - 1] == '\'')
				klen--;
		}
		nw_client_error_set(err, 400, "invalid_json", NULL,
		                    "the body repeats the key %.*s%swithin one object (line %d, "
		                    "column %d): Narwhal refuses duplicate keys, since an engine "
		                    "might read another value than the one checked here", klen,
		                    key ? key : "", klen ? " " : "", je->line, je->column);
		return;
	}
	case json_error_invalid_utf8:
		nw_client_error_set(err, 400, "invalid_json", NULL,
		                    "the body is not valid UTF-8 (line %d, column %d, near byte offset %d): "
		                    "JSON text must be UTF-8", je->line, je->column, je->position);
		return;
	case json_error_null_character:
		nw_client_error_set(err, 400, "invalid_json", NULL,
		                    "a string in the body holds \\u0000 (line %d, column %d): NUL "
		                    "characters are not accepted", je->line, je->column);
		return;
	case json_error_numeric_overflow:
		nw_client_error_set(err, 400, "invalid_json", NULL,
		                    "a number in the body is out of range (line %d, column %d): "
		                    "integers must fit in 64 bits, reals in a double",
		                    je->line, je->column);
		return;
	default:
		g_strlcpy(text, je->text, sizeof text);
		nw_client_error_set(err, 400, "invalid_json", NULL,
		                    "the body is not valid JSON: %s (line %d, column %d)", text,
		                    je->line, je->column);
		return;
	}
}

