/* rotate.c: a Narwhal placement plugin that hands each phase to the
 * eligible engines in turn, skipping any that already hold skip_busy
 * requests of the phase while another does not. Config: {"skip_busy":
 * integer from 1 to 1000000}, optional (no skipping without it). Built
 * against plugin ABI 2. */
#include <narwhal/plugin-abi.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if NARWHAL_ABI_MAJOR != 2
#error "rotate.c is written for plugin ABI 2"
#endif

#define N_PHASES 4 /* indexed by narwhal_phase; 0 unused */

struct rotate {
	const struct narwhal_host *host;
	uint32_t skip_busy;        /* 0: never skip */
	uint32_t last[N_PHASES];   /* the engine chosen last, per phase */
	bool started[N_PHASES];
};

static int
rotate_create(const struct narwhal_host *host, const json_t *config, void **instance,
              char *err, size_t err_len)
{
	struct rotate *r;
	uint32_t skip_busy = 0;
	const char *key;
	json_t *value;

	if (config != NULL && !json_is_null(config) && !json_is_object(config)) {
		snprintf(err, err_len, "config must be an object");
		return -EINVAL;
	}
	json_object_foreach((json_t *)config, key, value) {
		if (strcmp(key, "skip_busy") != 0) {
			snprintf(err, err_len, "unknown key \"%s\": only skip_busy is accepted", key);
			return -EINVAL;
		}
		if (!json_is_integer(value) || json_integer_value(value) < 1 ||
		    json_integer_value(value) > 1000000) {
			snprintf(err, err_len, "skip_busy: must be an integer from 1 to 1000000");
			return -EINVAL;
		}
		skip_busy = (uint32_t)json_integer_value(value);
	}
	r = calloc(1, sizeof *r);
	if (r == NULL) {
		snprintf(err, err_len, "out of memory");
		return -ENOMEM;
	}
	r->host = host;
	r->skip_busy = skip_busy;
	*instance = r;
	return 0;
}

static void
rotate_destroy(void *instance)
{
	free(instance);
}

static uint32_t
resident(const struct narwhal_engine_view *e, narwhal_phase phase)
{
	switch (phase) {
	case NARWHAL_PHASE_PREFILL: return e->resident_prefill;
	case NARWHAL_PHASE_DECODE: return e->resident_decode;
	default: return e->resident_prefill + e->resident_decode;
	}
}

/* The eligible engine that comes first after the last one chosen for the
 * phase, in index order and wrapping; a busy one only when every eligible
 * engine is busy. */
static int
rotate_place(void *instance, const struct narwhal_placement_request *req,
             struct narwhal_placement_result *out)
{
	struct rotate *r = instance;
	const struct narwhal_fleet_view *fleet = r->host->fleet(r->host->host_ctx);
	uint32_t slot = req->phase < N_PHASES ? req->phase : 0;
	uint64_t best_rank = UINT64_MAX, n, first;
	uint32_t best = UINT32_MAX;

	if (fleet == NULL || fleet->n_engines == 0)
		return -ENOENT;
	n = fleet->n_engines;
	/* The index the turn starts from: after the last choice, or 0. */
	first = r->started[slot] && r->last[slot] < n ? (r->last[slot] + 1ull) % n : 0;
	for (uint32_t i = 0; i < req->n_eligible; i++) {
		uint32_t e = req->eligible[i];
		uint64_t rank;

		if (e >= n)
			continue;
		/* How far e comes after first, busy engines after every other. */
		rank = (e + n - first) % n;
		if (r->skip_busy != 0 &&
		    resident(narwhal_fleet_engine(fleet, e), req->phase) >= r->skip_busy)
			rank += n;
		if (rank < best_rank) {
			best_rank = rank;
			best = e;
		}
	}
	if (best == UINT32_MAX)
		return -ENOENT;
	r->last[slot] = best;
	r->started[slot] = true;
	out->engine = best;
	out->cost = (double)resident(narwhal_fleet_engine(fleet, best), req->phase);
	out->projected_slo_ratio = NAN; /* not priced */
	out->unserved = false;
	return 0;
}

static const struct narwhal_placement_ops rotate_ops = {
	.struct_size = sizeof(struct narwhal_placement_ops),
	.create = rotate_create,
	.destroy = rotate_destroy,
	.place = rotate_place,
};

NARWHAL_PLACEMENT_PLUGIN("rotate", "1.0.0", &rotate_ops)
