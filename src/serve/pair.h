/*
 * The prefill half of a concurrent handoff (NARWHAL_DIALECT_HANDOFF_CONCURRENT,
 * docs/plugins.md): the prefill leg goes out together with the decode leg,
 * which does not wait for its answer (the engines meet on their own, as in
 * SGLang's bootstrap handoff). Its answer only matters when it is a
 * failure, which fails the attempt and is charged to the prefill engine.
 *
 * The two legs may fail in either order: a decode engine hears of its
 * prefill engine's refusal through the bootstrap server, and its own
 * failure can reach Narwhal first. So a decode leg that fails while the
 * prefill leg is out has its failure held until the prefill engine
 * answers (docs/dialects.md, "SGLang"):
 *
 *   IDLE --start--> OUT --prefill answered, or released--> IDLE
 *                    |
 *                    +--the decode leg failed--> HOLDING
 *                                                   |
 *         prefill answered, or released: IDLE <-----+
 *
 * pair.state is the one record of where the pair is; only pair.c changes
 * it (nw_pair_transition_legal says which edges exist). Internal to the
 * serve layer.
 */
#ifndef NW_SERVE_PAIR_H
#define NW_SERVE_PAIR_H

#include <narwhal/plugin-abi.h>

#include <stdbool.h>
#include <stdint.h>

#include <glib.h>

#include "serve/retry.h"

struct nw_request;
struct nw_upstream_call;

typedef enum nw_pair_state {
	NW_PAIR_IDLE,      /* no prefill leg out (none, answered or released) */
	NW_PAIR_OUT,       /* the prefill leg is out beside the decode leg */
	NW_PAIR_HOLDING,   /* the decode leg failed first: its failure waits for
	                    * the prefill leg's answer */
	NW_PAIR_N_STATES
} nw_pair_state;

struct nw_pair_leg {
	nw_pair_state state;
	struct nw_upstream_call *call; /* out in OUT and HOLDING */
	uint32_t engine;
	long status;                   /* 0 until the engine's headers */
	int64_t started_us;            /* the call went out */
	GString *error_body;           /* a failed answer's start, for its class */
	/* HOLDING: the decode leg's failure, as nw_request_fail got it. */
	nw_fail_kind held_kind;
	long held_status;
	char *held_message;
	int32_t held_fault_engine;     /* r->fault_engine then */
};

/* Whether the pair has an edge from one state to the other. */
bool nw_pair_transition_legal(nw_pair_state from, nw_pair_state to);

/* Whether a decode leg's failure of kind (engine_status: the engine's
 * HTTP status, 0 when none) waits for a prefill leg that is still out:
 * a failure the decode engine may owe to its prefill engine, and not
 * already the client's own error. */
bool nw_pair_holds(nw_fail_kind kind, long engine_status);

/* Send the prefill leg of a concurrent pair to engine (call's body transfer
 * full). False when it could not start (the attempt has failed then). */
bool nw_pair_start(struct nw_request *r, uint32_t engine, struct narwhal_http_call *call);

/* nw_request_fail's first look at a failure while the pair is not IDLE:
 * true when the pair has taken it (held it, or decided with the held one),
 * false when the request goes on to decide with it. */
bool nw_pair_on_failure(struct nw_request *r, nw_fail_kind kind, long engine_status,
                        const char *message);

/* The first-token deadline passed: a held decode failure decides now
 * (true), the prefill leg having said nothing against the request. */
bool nw_pair_hold_expired(struct nw_request *r);

/* Cancel the prefill leg if it is still out, drop a held failure; safe in
 * any state. */
void nw_pair_release(struct nw_request *r);

void nw_pair_clear(struct nw_pair_leg *p);

#endif /* NW_SERVE_PAIR_H */
