/*
 * How a request's body is framed (RFC 9112 section 6), decided from its
 * header fields alone: a pure function, so it can be fuzzed and tested
 * without a socket. libmicrohttpd reads only the first Content-Length and
 * treats any Transfer-Encoding as "read to the end"; the server refuses
 * before the body what it would otherwise misread (docs/api.md, "Framing").
 */
#ifndef NW_HTTP_FRAMING_H
#define NW_HTTP_FRAMING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
	NW_FRAMING_NONE,          /* no body */
	NW_FRAMING_LENGTH,        /* Content-Length bytes (length > 0) */
	NW_FRAMING_CHUNKED,       /* Transfer-Encoding: chunked */
	NW_FRAMING_BOTH,          /* 400: Content-Length and Transfer-Encoding */
	NW_FRAMING_BAD_LENGTH,    /* 400: malformed or conflicting Content-Length */
	NW_FRAMING_BAD_CHUNKED,   /* 400: chunked not last, twice, or an empty coding */
	NW_FRAMING_UNKNOWN_CODING, /* 501: a transfer coding other than chunked */
	NW_FRAMING_BAD_NAME       /* 400: a field name with a space or tab (RFC 9112 5.1):
	                           * "Content-Length :" is a length to another hop */
} nw_framing_verdict;

/* The framing fields seen so far; zero-initialise, then add every field. */
struct nw_framing {
	uint64_t length;       /* the Content-Length, when consistent */
	unsigned n_length;     /* Content-Length values seen (list elements) */
	bool length_bad;       /* a value not 1*DIGIT, too large, or unequal */
	unsigned n_codings;    /* transfer codings seen, over every field */
	bool chunked_last;     /* the last coding seen is chunked */
	bool chunked_early;    /* chunked seen before another coding */
	bool coding_unknown;   /* a coding other than chunked */
	bool te_seen;          /* a Transfer-Encoding field, even an empty one */
	bool name_bad;         /* a field name with whitespace in it */
};

/* Add one header field; fields other than Content-Length and
 * Transfer-Encoding are ignored, except that any name with a space or tab
 * in it is refused. Names compare case-insensitively. */
void nw_framing_add(struct nw_framing *f, const char *name, size_t name_len,
                    const char *value, size_t value_len);

nw_framing_verdict nw_framing_verdict_of(const struct nw_framing *f);

/* The status a refused verdict gets (400 or 501), 0 for an accepted one. */
unsigned nw_framing_status(nw_framing_verdict v);
/* The error code and message a refused verdict gets (NULL if accepted). */
const char *nw_framing_code(nw_framing_verdict v);
const char *nw_framing_message(nw_framing_verdict v);

#endif /* NW_HTTP_FRAMING_H */
