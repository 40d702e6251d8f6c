/*
 * What the built-in placements share (spec 5; docs/placement.md): their
 * configuration (none), the request count least-loaded orders by (and
 * slo-cost, for engines it cannot price), and the deterministic tie-break
 * by instance ID. A header of inline functions, so each plugin stays one
 * shared object of its own.
 */
#ifndef NW_PLUGINS_PLACEMENT_COMMON_H
#define NW_PLUGINS_PLACEMENT_COMMON_H

#include <narwhal/plugin-abi.h>

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* A placement that takes no options: no section, null or {} is accepted,
 * anything else refused by name. 0, or -EINVAL with the message in err. */
static inline int
nw_placement_no_options(const char *name, const json_t *config, char *err, size_t err_len)
{
	const char *key;
	json_t *value;

	if (config == NULL || json_is_null(config))
		return 0;
	if (!json_is_object(config)) {
		snprintf(err, err_len, "config must be an empty object: the %s placement takes no "
		         "options", name);
		return -EINVAL;
	}
	/* Read-only walk; the cast only satisfies the macro's type. */
	json_object_foreach((json_t *)config, key, value) {
		(void)value;
		snprintf(err, err_len, "unknown key \"%s\": the %s placement takes no options", key,
		         name);
		return -EINVAL;
	}
	return 0;
}

/* An engine's work of the phase being placed, in requests: 64 bits, so
 * the sums of 32-bit counts cannot wrap. */
static inline uint64_t
nw_placement_phase_load(const struct narwhal_engine_view *e, narwhal_phase phase)
{
	switch (phase) {
	case NARWHAL_PHASE_PREFILL:
		return (uint64_t)e->resident_prefill + e->queued_prefill;
	case NARWHAL_PHASE_DECODE:
		return e->resident_decode;
	case NARWHAL_PHASE_AGGREGATE:
		return (uint64_t)e->resident_prefill + e->resident_decode;
	}
	return 0;
}

/* Whether engine a (fleet position ai) precedes b (bi) among equals:
 * lower instance ID first, so the choice never depends on the order of
 * the fleet or of the eligible list. IDs are unique in a valid fleet; the
 * position settles the rest (a missing ID sorts last) so the order stays
 * total. */
static inline bool
nw_placement_id_precedes(const struct narwhal_engine_view *a, uint32_t ai,
                         const struct narwhal_engine_view *b, uint32_t bi)
{
	int c;

	if (a->id == NULL || b->id == NULL) {
		if (a->id != b->id)
			return a->id != NULL;
		return ai < bi;
	}
	c = strcmp(a->id, b->id);
	return c < 0 || (c == 0 && ai < bi);
}

#endif /* NW_PLUGINS_PLACEMENT_COMMON_H */
