/*
 * A request's phases (phases.c): validation, sizing, admission,
 * placement and the end of each engine leg. Internal to the serve layer.
 */
#ifndef NW_SERVE_PHASES_H
#define NW_SERVE_PHASES_H

#include <narwhal/plugin-abi.h>

#include <stdbool.h>
#include <stddef.h>

#include <glib.h>

#include "serve/request-parse.h"
#include "serve/retry.h"

struct nw_request;
struct nw_dialect;

/* The body is complete: parse, check, then size. */
void nw_phase_begin(struct nw_request *r);
void nw_phase_size_by_chars(struct nw_request *r);
void nw_phase_begin_attempt(struct nw_request *r);
/* Whether the request's decode or aggregate legs stream from the engine:
 * always for a streamed request, else as engine.stream_decode says. */
bool nw_phase_streams(const struct nw_request *r);
void nw_phase_place(struct nw_request *r, narwhal_phase phase);
void nw_phase_release_slot(struct nw_request *r, narwhal_phase phase);
/* The prefill on its slot completed at now_us (a handoff, an aggregate
 * leg's first token): its priced work leaves the ledger, then the slot is
 * released. */
void nw_phase_prefill_done(struct nw_request *r, int64_t now_us);
/* The output tokens a decode reserves in its engine's resident KV
 * (docs/profiles.md): max_tokens when the client set it, else none. */
uint64_t nw_phase_reserved_output(const struct nw_request *r);
/* An engine answered an error status: read it with the dialect and fail
 * the attempt as its class says (retryable, context, the client's own, or
 * permanent; docs/api.md). */
void nw_phase_fail_by_status(struct nw_request *r, const struct nw_dialect *d, long status,
                             const GString *answer);
void nw_phase_unqueue(struct nw_request *r);

/* Whether this attempt's pair sends both legs at once (its prefill
 * engine's dialect says so). */
bool nw_phase_pair_concurrent(const struct nw_request *r);
/* The first-token deadline of a decode stream whose clock starts at now
 * (engine.first_token_timeout_s, spec 6). */
int64_t nw_phase_first_token_due(const struct nw_request *r, int64_t now);
/* Build and send the leg of phase on engine (placed). */
void nw_phase_start_leg(struct nw_request *r, narwhal_phase phase, uint32_t engine);

/* Passive detection (docs/recovery.md): a leg on engine ended well, or a
 * failure of kind is reported against engine (-1: none) when the engine is
 * at fault. */
void nw_phase_report_ok(struct nw_request *r, int32_t engine);
void nw_phase_report_failure(struct nw_request *r, nw_fail_kind kind, long engine_status,
                             int32_t engine, const char *detail);
void nw_phase_leave_line(struct nw_request *r);
/* Admission granted at now (its wait observed; now is unread when the
 * request never queued). */
void nw_phase_note_admitted(struct nw_request *r, int64_t now);
/* The client's view of a context-length refusal: its own prompt and
 * max_tokens, never an engine leg's. */
void nw_phase_context_error(const struct nw_request *r, struct nw_client_error *err);
/* An engine's in-band error event (relay and collector): classified by the
 * dialect, logged in full, failed with Narwhal's own message. */
void nw_phase_fail_in_band(struct nw_request *r, const struct narwhal_sse_event *ev,
                           const char *payload, size_t len);

#endif /* NW_SERVE_PHASES_H */
