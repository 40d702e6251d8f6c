/*
 * Which engines may take a phase of a request now (spec 5; docs/placement.md,
 * "Eligible engines"): role, availability, the request's exclusions, the
 * pairing rules of the dialects and the per-engine phase slots.
 *
 * Pure over the fleet registry and the engines' dialects: no request, no
 * clock. The daemon's placement (placement.c) and narwhal-replay's what-if
 * mode (src/tools/replay/whatif-course.c) build the eligible set with these
 * same functions, so a run under virtual time places over the set the
 * daemon would.
 */
#ifndef NW_SERVE_ELIGIBLE_H
#define NW_SERVE_ELIGIBLE_H

#include <narwhal/plugin-abi.h>

#include <stdbool.h>
#include <stdint.h>

#include "core/config.h"
#include "core/dialect.h"
#include "core/host.h"

/* Whether placement may use engine i now (the monitor's verdict and the
 * holds, docs/recovery.md). */
static inline bool
nw_engine_available(const struct nw_fleet *f, uint32_t i)
{
	return (f->engines[i].flags & NARWHAL_ENGINE_AVAILABLE) != 0;
}

/* Whether some live prefill engine has a live decode engine it can hand
 * off to. Without such a pair (spec 7.2: one engine of each role is
 * missing; or the dialects cannot pair them) every engine serves whole
 * requests. */
bool nw_eligible_fleet_pairs(const struct nw_fleet *f, const struct nw_dialect *dialects);

/* The per-engine slots of a phase (serving.prefill_concurrency for prefill
 * and aggregate legs, serving.decode_concurrency for decode); 0: no limit. */
uint32_t nw_eligible_phase_limit(const struct nw_config *cfg, narwhal_phase phase);

/* What one eligibility question asks. */
struct nw_eligible_query {
	narwhal_phase phase;
	int32_t prefill_pair;      /* decode: the pair's prefill engine; else -1 */
	const uint8_t *excluded;   /* per engine, non-zero: failed this request; NULL: none */
	uint32_t limit;            /* the phase's slots per engine; 0: room is not asked */
};

/* Write into out (one slot per engine) the engines that may take the phase
 * now: role, availability, exclusions and, with a limit, room. Returns
 * their count; *full counts the engines that only lack room. By role: an
 * engine whose dialect cannot pair (aggregate-only) starts requests
 * whatever its role and runs them whole; a decode engine must take the
 * prefill engine's handoff; the aggregate fallback takes a decode engine
 * only once its resident handoff decodes have drained. */
uint32_t nw_eligible_collect(const struct nw_fleet *f, const struct nw_dialect *dialects,
                             const struct nw_eligible_query *q, uint32_t *out, uint32_t *full);

#endif /* NW_SERVE_ELIGIBLE_H */
