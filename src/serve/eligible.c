#include "build-config.h"

#include "serve/eligible.h"

bool
nw_eligible_fleet_pairs(const struct nw_fleet *f, const struct nw_dialect *dialects)
{
	uint32_t n = f->view.n_engines;

	for (uint32_t p = 0; p < n; p++) {
		if (f->engines[p].role != NARWHAL_ROLE_PREFILL || !nw_engine_available(f, p) ||
		    !nw_dialect_pairs(&dialects[p]))
			continue;
		for (uint32_t d = 0; d < n; d++) {
			if (f->engines[d].role == NARWHAL_ROLE_DECODE && nw_engine_available(f, d) &&
			    nw_dialect_compatible(&dialects[p], &dialects[d]))
				return true;
		}
	}
	return false;
}

uint32_t
nw_eligible_phase_limit(const struct nw_config *cfg, narwhal_phase phase)
{
	return phase == NARWHAL_PHASE_DECODE ? cfg->serving.decode_concurrency
	                                     : cfg->serving.prefill_concurrency;
}

static bool
role_fits(const struct nw_fleet *f, const struct nw_dialect *dialects, uint32_t i,
          narwhal_phase phase, int32_t prefill_pair)
{
	const struct narwhal_engine_view *e = &f->engines[i];

	switch (phase) {
	case NARWHAL_PHASE_PREFILL:
		return !nw_dialect_pairs(&dialects[i]) || e->role == NARWHAL_ROLE_PREFILL;
	case NARWHAL_PHASE_DECODE:
		return e->role == NARWHAL_ROLE_DECODE && prefill_pair >= 0 &&
		       nw_dialect_compatible(&dialects[prefill_pair], &dialects[i]);
	default:
		/* The aggregate fallback (role-control document, "Floors,
		 * fallback, and degraded capacity"), on engines that can run a
		 * whole request: not one launched to hand off in a fixed role
		 * (SGLang in PD mode, whose builder refuses it: docs/dialects.md). */
		if (nw_dialect_pairs(&dialects[i]) &&
		    !(dialects[i].caps & NARWHAL_DIALECT_PER_REQUEST_ROLES))
			return false;
		return e->role != NARWHAL_ROLE_DECODE || f->stats[i].handoff_decodes == 0;
	}
}

static uint32_t
phase_resident(const struct narwhal_engine_view *e, narwhal_phase phase)
{
	return phase == NARWHAL_PHASE_DECODE ? e->resident_decode : e->resident_prefill;
}

uint32_t
nw_eligible_collect(const struct nw_fleet *f, const struct nw_dialect *dialects,
                    const struct nw_eligible_query *q, uint32_t *out, uint32_t *full)
{
	uint32_t n = 0;

	*full = 0;
	for (uint32_t i = 0; i < f->view.n_engines; i++) {
		if (!role_fits(f, dialects, i, q->phase, q->prefill_pair) ||
		    !nw_engine_available(f, i) || (q->excluded != NULL && q->excluded[i]))
			continue;
		if (q->limit > 0 && phase_resident(&f->engines[i], q->phase) >= q->limit)
			(*full)++;
		else
			out[n++] = i;
	}
	return n;
}
