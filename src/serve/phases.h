/*
 * A request's phases (phases.c): validation, sizing, admission,
 * placement and the end of each engine leg. Internal to the serve layer.
 */
#ifndef NW_SERVE_PHASES_H
#define NW_SERVE_PHASES_H

#include <narwhal/plugin-abi.h>

#include <stdbool.h>

struct nw_request;

/* The body is complete: parse, check, then size. */
void nw_phase_begin(struct nw_request *r);
void nw_phase_size_by_chars(struct nw_request *r);
void nw_phase_begin_attempt(struct nw_request *r);
/* Whether the request's decode or aggregate legs stream from the engine:
 * always for a streamed request, else as engine.stream_decode says. */
bool nw_phase_streams(const struct nw_request *r);
void nw_phase_place(struct nw_request *r, narwhal_phase phase);
void nw_phase_release_slot(struct nw_request *r, narwhal_phase phase);
void nw_phase_unqueue(struct nw_request *r);
void nw_phase_leave_line(struct nw_request *r);

#endif /* NW_SERVE_PHASES_H */
