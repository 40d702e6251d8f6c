/*
 * The "least-loaded" placement: among the engines the host found eligible,
 * the one with the least work of the phase being placed. Load counts
 * requests, not tokens or seconds:
 *
 *   prefill    resident_prefill + queued_prefill
 *   decode     resident_decode
 *   aggregate  resident_prefill + resident_decode
 *
 * Equal loads go to the lowest instance ID (strcmp), so the choice never
 * depends on the order of the fleet or of the eligible list (spec 5).
 * Nothing is priced: projected_slo_ratio is NaN and no placement is unserved.
 *
 * Config: none. No section, null or {} is accepted; any key is refused by
 * name.
 */
#include <narwhal/plugin-abi.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

#define LEAST_MAGIC 0x4c454153u /* "LEAS" */

/* The engine view must reach at least the last field read here. */
#define VIEW_NEEDED (offsetof(struct narwhal_engine_view, queued_prefill) + sizeof(uint32_t))

struct least_loaded {
	unsigned magic;
	const struct narwhal_host *host;
};

static struct least_loaded *
least_cast(void *instance)
{
	struct least_loaded *ll = instance;

	if (ll == NULL || ll->magic != LEAST_MAGIC)
		abort(); /* the host passed something that is not ours */
	return ll;
}

static int
least_create(const struct narwhal_host *host, const json_t *config, void **instance,
             char *err, size_t err_len)
{
	struct least_loaded *ll;
	int rc = nw_placement_no_options("least-loaded", config, err, err_len);

	if (rc != 0)
		return rc;
	ll = calloc(1, sizeof *ll);
	if (ll == NULL) {
		snprintf(err, err_len, "out of memory");
		return -ENOMEM;
	}
	ll->magic = LEAST_MAGIC;
	ll->host = host;
	*instance = ll;
	return 0;
}

static void
least_destroy(void *instance)
{
	struct least_loaded *ll = least_cast(instance);

	ll->magic = 0;
	free(ll);
}

static int
least_place(void *instance, const struct narwhal_placement_request *req,
            struct narwhal_placement_result *out)
{
	struct least_loaded *ll = least_cast(instance);
	const struct narwhal_fleet_view *fleet;
	const struct narwhal_engine_view *best = NULL;
	uint32_t best_engine = 0;
	uint64_t best_load = 0;

	if (req == NULL || out == NULL)
		return -EINVAL;
	if (req->phase != NARWHAL_PHASE_PREFILL && req->phase != NARWHAL_PHASE_DECODE &&
	    req->phase != NARWHAL_PHASE_AGGREGATE)
		return -EINVAL;
	if (req->n_eligible == 0 || req->eligible == NULL)
		return -ENOENT;
	fleet = ll->host->fleet(ll->host->host_ctx);
	if (fleet == NULL)
		return -ENOENT;
	if (fleet->engine_view_size < VIEW_NEEDED)
		return -EINVAL;
	for (uint32_t i = 0; i < req->n_eligible; i++) {
		uint32_t engine = req->eligible[i];
		const struct narwhal_engine_view *e;
		uint64_t load;

		/* An index outside the fleet names no engine; skip it. */
		if (engine >= fleet->n_engines)
			continue;
		e = narwhal_fleet_engine(fleet, engine);
		load = nw_placement_phase_load(e, req->phase);
		if (best == NULL || load < best_load ||
		    (load == best_load && nw_placement_id_precedes(e, engine, best, best_engine))) {
			best = e;
			best_engine = engine;
			best_load = load;
		}
	}
	if (best == NULL)
		return -ENOENT;
	out->engine = best_engine;
	out->cost = (double)best_load;
	out->projected_slo_ratio = NAN; /* not priced */
	out->unserved = false;
	return 0;
}

static const struct narwhal_placement_ops least_ops = {
	.struct_size = sizeof(struct narwhal_placement_ops),
	.create = least_create,
	.destroy = least_destroy,
	.place = least_place,
};

NARWHAL_PLACEMENT_PLUGIN("least-loaded", "2.0.0", &least_ops)
