/*
 * The engine stream behind a non-streamed answer (collect.c). Internal to
 * the serve layer.
 */
#ifndef NW_SERVE_COLLECT_H
#define NW_SERVE_COLLECT_H

#include <stdbool.h>
#include <stddef.h>

#include <glib.h>
#include <jansson.h>

#include "net/sse.h"
#include "serve/assemble.h"
#include "serve/chunk-shape.h"

struct nw_request;

/* The engine stream behind a non-streamed answer (collect.c). */
struct nw_collect {
	struct nw_sse sse;
	struct nw_assembly *assembly;
	struct nw_chunk_shape shape; /* of this attempt's token chunks */
	json_int_t shape_choice;     /* the choice the shape's text belongs to */
	GString *text;               /* scratch for a matched chunk's text */
	size_t max_bytes;       /* serving.max_response_bytes */
	size_t taken;           /* event payload bytes of this attempt */
	bool first_token;
	bool done;              /* the success terminator came */
};

void nw_collect_init(struct nw_collect *c, size_t max_bytes);
void nw_collect_clear(struct nw_collect *c);
/* A decode or aggregate leg answered 2xx: start a fresh assembly. */
void nw_collect_begin(struct nw_request *r);
/* Engine bytes of the stream (always taken). */
bool nw_collect_feed(struct nw_request *r, const char *bytes, size_t len);
/* The transfer ended: whether the terminator came. */
bool nw_collect_end(struct nw_request *r);
/* Answer 200 with the assembled body and finish the request. */
void nw_collect_answer(struct nw_request *r);

#endif /* NW_SERVE_COLLECT_H */
