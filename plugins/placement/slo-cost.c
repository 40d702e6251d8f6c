/*
 * The "slo-cost" placement (spec 5; docs/placement.md): among the engines
 * the host found eligible (role, availability, exclusions), the one with
 * the lowest projected cost that meets its phase's SLO.
 *
 *   phase       cost (seconds)                              SLO ratio
 *   prefill,    prefill_queue_seconds(e, prompt): when the   cost / slo.ttft_s
 *   aggregate   prompt would have finished its prefill
 *   decode      decode_interval_seconds(e, resident_decode   cost / slo.tpot_s
 *               + 1, resident_kv_tokens + prompt +
 *               max_tokens): the interval it would run at
 *
 * The candidates are taken in four tiers; the first tier that has one
 * decides, and within a tier the lowest cost wins, equal costs going to
 * the lowest instance ID (strcmp, as least-loaded):
 *
 *   1. priced, SLO ratio <= 1
 *   2. no profile (NO_PROFILE): cost is least-loaded's request count
 *   3. priced, SLO ratio > 1: the placement is unserved (every candidate
 *      that could be priced breaks its SLO), the least-cost one is chosen
 *   4. outside the measured domain (OUT_OF_DOMAIN): least-loaded's count
 *
 * With no profiles at all every candidate is in tier 2, so slo-cost
 * chooses exactly as least-loaded does.
 *
 * Config: none. No section, null or {} is accepted; any key is refused by
 * name. Metrics: placed_total, unserved_total, unpriced_total.
 */
#include <narwhal/plugin-abi.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

#define SLO_COST_MAGIC 0x534c4f43u /* "SLOC" */

/* The engine view must reach at least the last field read here. */
#define VIEW_NEEDED (offsetof(struct narwhal_engine_view, queued_prefill) + sizeof(uint32_t))

enum tier {
	TIER_MEETS = 0,
	TIER_NO_PROFILE = 1,
	TIER_BREAKS = 2,
	TIER_OUTSIDE = 3,
};

struct slo_cost {
	unsigned magic;
	const struct narwhal_host *host;
};

/* One candidate as priced. */
struct priced {
	uint32_t engine;
	const struct narwhal_engine_view *view;
	enum tier tier;
	double cost;
	double ratio; /* NaN when unpriced */
};

static struct slo_cost *
slo_cost_cast(void *instance)
{
	struct slo_cost *sc = instance;

	if (sc == NULL || sc->magic != SLO_COST_MAGIC)
		abort(); /* the host passed something that is not ours */
	return sc;
}

static int
slo_cost_create(const struct narwhal_host *host, const json_t *config, void **instance,
                char *err, size_t err_len)
{
	struct slo_cost *sc;
	int rc = nw_placement_no_options("slo-cost", config, err, err_len);

	if (rc != 0)
		return rc;
	sc = calloc(1, sizeof *sc);
	if (sc == NULL) {
		snprintf(err, err_len, "out of memory");
		return -ENOMEM;
	}
	sc->magic = SLO_COST_MAGIC;
	sc->host = host;
	*instance = sc;
	return 0;
}

static void
slo_cost_destroy(void *instance)
{
	struct slo_cost *sc = slo_cost_cast(instance);

	sc->magic = 0;
	free(sc);
}

static uint64_t
add_sat(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* Price engine i for the request's phase. */
static struct priced
price(const struct slo_cost *sc, const struct narwhal_fleet_view *fleet,
      const struct narwhal_placement_request *req, uint32_t i)
{
	const struct narwhal_host *host = sc->host;
	const struct narwhal_engine_view *e = narwhal_fleet_engine(fleet, i);
	struct priced c = { .engine = i, .view = e, .ratio = NAN };
	narwhal_estimate_status st;
	double target, v = 0.0;

	if (req->phase == NARWHAL_PHASE_DECODE) {
		uint32_t active = e->resident_decode == UINT32_MAX ? UINT32_MAX
		                                                   : e->resident_decode + 1;
		uint64_t kv = add_sat(add_sat(e->resident_kv_tokens, req->prompt_tokens),
		                      req->max_tokens);

		st = host->decode_interval_seconds(host->host_ctx, i, active, kv, &v);
		target = fleet->tpot_target_s;
	} else {
		st = host->prefill_queue_seconds(host->host_ctx, i, req->prompt_tokens, &v);
		target = fleet->ttft_target_s;
	}
	/* A projection that is no number of seconds prices nothing. */
	if (st == NARWHAL_ESTIMATE_OK && !(isfinite(v) && v >= 0.0))
		st = NARWHAL_ESTIMATE_OUT_OF_DOMAIN;
	if (st == NARWHAL_ESTIMATE_OK) {
		c.cost = v;
		c.ratio = v / target;
		c.tier = c.ratio <= 1.0 ? TIER_MEETS : TIER_BREAKS;
	} else {
		c.cost = (double)nw_placement_phase_load(e, req->phase);
		c.tier = st == NARWHAL_ESTIMATE_NO_PROFILE ? TIER_NO_PROFILE : TIER_OUTSIDE;
	}
	return c;
}

static bool
better(const struct priced *a, const struct priced *b)
{
	if (a->tier != b->tier)
		return a->tier < b->tier;
	if (a->cost != b->cost)
		return a->cost < b->cost;
	return nw_placement_id_precedes(a->view, a->engine, b->view, b->engine);
}

static int
slo_cost_place(void *instance, const struct narwhal_placement_request *req,
               struct narwhal_placement_result *out)
{
	struct slo_cost *sc = slo_cost_cast(instance);
	const struct narwhal_host *host = sc->host;
	const struct narwhal_fleet_view *fleet;
	struct priced best = { 0 };
	bool found = false;

	if (req == NULL || out == NULL)
		return -EINVAL;
	if (req->phase != NARWHAL_PHASE_PREFILL && req->phase != NARWHAL_PHASE_DECODE &&
	    req->phase != NARWHAL_PHASE_AGGREGATE)
		return -EINVAL;
	if (req->n_eligible == 0 || req->eligible == NULL)
		return -ENOENT;
	fleet = host->fleet(host->host_ctx);
	if (fleet == NULL)
		return -ENOENT;
	if (fleet->engine_view_size < VIEW_NEEDED || !(fleet->ttft_target_s > 0.0) ||
	    !(fleet->tpot_target_s > 0.0))
		return -EINVAL;
	for (uint32_t k = 0; k < req->n_eligible; k++) {
		struct priced c;

		/* An index outside the fleet names no engine; skip it. */
		if (req->eligible[k] >= fleet->n_engines)
			continue;
		c = price(sc, fleet, req, req->eligible[k]);
		if (!found || better(&c, &best)) {
			best = c;
			found = true;
		}
	}
	if (!found)
		return -ENOENT;
	out->engine = best.engine;
	out->cost = best.cost;
	out->projected_slo_ratio = best.ratio;
	out->unserved = best.tier == TIER_BREAKS;
	host->counter_add(host->host_ctx, "placed_total", 1.0);
	if (out->unserved)
		host->counter_add(host->host_ctx, "unserved_total", 1.0);
	if (isnan(best.ratio))
		host->counter_add(host->host_ctx, "unpriced_total", 1.0);
	return 0;
}

static const struct narwhal_placement_ops slo_cost_ops = {
	.struct_size = sizeof(struct narwhal_placement_ops),
	.create = slo_cost_create,
	.destroy = slo_cost_destroy,
	.place = slo_cost_place,
};

NARWHAL_PLACEMENT_PLUGIN("slo-cost", "1.0.0", &slo_cost_ops)
