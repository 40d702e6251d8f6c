/*
 * HTTP/1.1 response parsing for the engine client (RFC 9112): the status
 * line and header block, then the body by its framing (Content-Length,
 * chunked, or until the engine closes). Pure functions over byte buffers,
 * so the client, the unit tests and the fuzz target share them.
 *
 * Body decoding never changes its state by itself: nw_h1_body_step says
 * what the next bytes are and what the state would become, and the caller
 * commits that only when it has taken the bytes. That is how a paused
 * transfer hands the same bytes back later.
 */
#ifndef NW_HTTP1_PARSE_H
#define NW_HTTP1_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Longest response head accepted (status line and headers). */
#define NW_H1_MAX_HEAD (64u * 1024u)

enum nw_h1_framing {
	NW_H1_NO_BODY,      /* 1xx, 204, 304, or a HEAD request */
	NW_H1_LENGTH,       /* Content-Length */
	NW_H1_CHUNKED,      /* Transfer-Encoding: chunked */
	NW_H1_UNTIL_CLOSE,  /* neither: the body ends when the engine closes */
};

struct nw_h1_head {
	unsigned minor;            /* HTTP/1.<minor> */
	long status;
	enum nw_h1_framing framing;
	uint64_t content_length;   /* with NW_H1_LENGTH */
	bool close;                /* the connection cannot carry another request */
};

/* nw_h1_parse_head's failures: a malformed head, or one longer than
 * NW_H1_MAX_HEAD; a well-formed head whose body has a transfer coding the
 * client cannot decode (anything but a single chunked). */
#define NW_H1_HEAD_MALFORMED (-1)
#define NW_H1_HEAD_CODING (-2)

/* Parses the head at the start of buf. Returns its length in bytes (the
 * body starts there), 0 when the head is not complete yet, or one of the
 * failures above. */
ssize_t nw_h1_parse_head(const char *buf, size_t len, bool head_request,
                         struct nw_h1_head *head);

/* The value of header `name` (case-insensitive) in a head parsed above,
 * with surrounding blanks removed; NULL when absent. */
const char *nw_h1_find_header(const char *head, size_t head_len, const char *name,
                              size_t *value_len);

/* Counts the codings of one Transfer-Encoding value [v, e) into *codings,
 * clearing *all_chunked when one is not chunked (empty list elements do
 * not count, RFC 9110 5.6.1). A body is decodable when all the values of
 * a head count exactly one coding, chunked. */
void nw_h1_count_codings(const char *v, const char *e, unsigned *codings, bool *all_chunked);

struct nw_h1_body {
	enum nw_h1_framing framing;
	int state;                 /* chunked: where in the chunk syntax */
	uint64_t left;             /* bytes left of the body or of this chunk */
};

void nw_h1_body_init(struct nw_h1_body *body, const struct nw_h1_head *head);

enum nw_h1_step_kind {
	NW_H1_MORE,     /* nothing usable in buf: read more */
	NW_H1_DATA,     /* body bytes at the start of buf, data_len long */
	NW_H1_FRAMING,  /* only chunk syntax: commit `used` bytes, no data */
	NW_H1_DONE,     /* the body has ended after `used` bytes */
	NW_H1_INVALID,  /* malformed chunk syntax */
};

struct nw_h1_step {
	enum nw_h1_step_kind kind;
	size_t data_len;
	size_t used;               /* bytes of buf this step accounts for */
	struct nw_h1_body next;    /* the state once the step is committed */
};

/* What the next bytes of buf hold; `body` is not changed. With
 * NW_H1_UNTIL_CLOSE the body never ends here: the caller ends it at EOF. */
void nw_h1_body_step(const struct nw_h1_body *body, const char *buf, size_t len,
                     struct nw_h1_step *step);

#endif /* NW_HTTP1_PARSE_H */
