/*
 * X-Request-Id: a client's id is kept when it is printable ASCII of at
 * most NW_REQUEST_ID_MAX bytes (it reaches engines and logs verbatim);
 * anything else is replaced by a fresh id of 32 hex digits.
 */
#ifndef NW_SERVE_REQUEST_ID_H
#define NW_SERVE_REQUEST_ID_H

#include <stdbool.h>
#include <stddef.h>

#include <glib.h>

#define NW_REQUEST_ID_MAX 128

/* Whether a client's value may be used as is. */
bool nw_request_id_valid(const char *id);

/* A new id of 32 lowercase hex digits into out (at least 33 bytes). */
void nw_request_id_generate(GRand *rng, char out[static 33]);

/* The id for a request: given when valid, else a generated one; out must
 * hold NW_REQUEST_ID_MAX + 1 bytes. Returns true when given was kept. */
bool nw_request_id_choose(GRand *rng, const char *given, char out[static NW_REQUEST_ID_MAX + 1]);

#endif /* NW_SERVE_REQUEST_ID_H */
