/*
 * The prefill half of a concurrent handoff (NARWHAL_DIALECT_HANDOFF_CONCURRENT,
 * docs/plugins.md): the prefill leg goes out together with the decode leg,
 * which does not wait for its answer (the engines meet on their own, as in
 * SGLang's bootstrap handoff). Its answer only matters when it is a
 * failure, which fails the attempt and is charged to the prefill engine.
 * Internal to the serve layer.
 */
#ifndef NW_SERVE_PAIR_H
#define NW_SERVE_PAIR_H

#include <narwhal/plugin-abi.h>

#include <stdbool.h>
#include <stdint.h>

#include <glib.h>

struct nw_request;
struct nw_upstream_call;

struct nw_pair_leg {
	struct nw_upstream_call *call; /* NULL when none is out */
	uint32_t engine;
	long status;                   /* 0 until the engine's headers */
	int64_t started_us;            /* the call went out */
	GString *error_body;           /* a failed answer's start, for its class */
};

/* Send the prefill leg of a concurrent pair to engine (call's body transfer
 * full). False when it could not start (the attempt has failed then). */
bool nw_pair_start(struct nw_request *r, uint32_t engine, struct narwhal_http_call *call);

/* Cancel the prefill leg if it is still out; safe when none is. */
void nw_pair_release(struct nw_request *r);

void nw_pair_clear(struct nw_pair_leg *p);

#endif /* NW_SERVE_PAIR_H */
