#include "build-config.h"

#include "core/estimate.h"

#include <string.h>

#include <glib.h>

narwhal_estimate_status
nw_estimate_prefill_s(const struct nw_engine_profile *p, uint64_t tokens, double *out)
{
	const struct nw_prefill_profile *f;
	double l;

	if (p == NULL)
		return NARWHAL_ESTIMATE_NO_PROFILE;
	f = &p->prefill;
	if (tokens > f->max_tokens)
		return NARWHAL_ESTIMATE_OUT_OF_DOMAIN;
	/* Below the domain, its lower edge: a shorter prompt never takes
	 * longer, so that is an upper bound, not an extrapolation. */
	l = (double)MAX(tokens, f->min_tokens);
	*out = f->a_s + f->b_s * l + f->c_s * l * l;
	return NARWHAL_ESTIMATE_OK;
}

narwhal_estimate_status
nw_estimate_decode_interval_s(const struct nw_engine_profile *p, uint32_t active,
                              uint64_t kv_tokens, double *out)
{
	const struct nw_decode_profile *f;

	if (p == NULL)
		return NARWHAL_ESTIMATE_NO_PROFILE;
	f = &p->decode;
	if (active > f->max_active || kv_tokens > f->max_kv_tokens)
		return NARWHAL_ESTIMATE_OUT_OF_DOMAIN;
	/* Below the grid, its lower edge (fewer requests or less KV never
	 * decode slower): an upper bound. */
	*out = f->d0_s + f->d1_s * (double)MAX(kv_tokens, f->min_kv_tokens) +
	       f->d2_s * (double)MAX(active, f->min_active);
	return NARWHAL_ESTIMATE_OK;
}

bool
nw_profile_mean(const struct nw_engine_profile *const *profiles, size_t n,
                struct nw_engine_profile *out)
{
	struct nw_engine_profile m = { 0 };
	struct nw_prefill_profile *pf = &m.prefill;
	struct nw_decode_profile *d = &m.decode;
	struct nw_handoff_profile *h = &m.handoff;
	size_t handoffs = 0;

	if (n == 0)
		return false;
	pf->max_tokens = d->max_kv_tokens = h->max_tokens = UINT64_MAX;
	d->max_active = pf->samples = d->samples = h->samples = UINT32_MAX;
	for (size_t i = 0; i < n; i++) {
		const struct nw_engine_profile *p = profiles[i];

		if (p == NULL)
			return false;
		pf->a_s += p->prefill.a_s / (double)n;
		pf->b_s += p->prefill.b_s / (double)n;
		pf->c_s += p->prefill.c_s / (double)n;
		pf->min_tokens = MAX(pf->min_tokens, p->prefill.min_tokens);
		pf->max_tokens = MIN(pf->max_tokens, p->prefill.max_tokens);
		pf->samples = MIN(pf->samples, p->prefill.samples);
		pf->rel_rms_error = MAX(pf->rel_rms_error, p->prefill.rel_rms_error);
		d->d0_s += p->decode.d0_s / (double)n;
		d->d1_s += p->decode.d1_s / (double)n;
		d->d2_s += p->decode.d2_s / (double)n;
		d->min_active = MAX(d->min_active, p->decode.min_active);
		d->max_active = MIN(d->max_active, p->decode.max_active);
		d->min_kv_tokens = MAX(d->min_kv_tokens, p->decode.min_kv_tokens);
		d->max_kv_tokens = MIN(d->max_kv_tokens, p->decode.max_kv_tokens);
		d->samples = MIN(d->samples, p->decode.samples);
		d->rel_rms_error = MAX(d->rel_rms_error, p->decode.rel_rms_error);
		if (p->handoff.samples > 0) {
			handoffs++;
			h->setup_s += p->handoff.setup_s;
			h->per_token_s += p->handoff.per_token_s;
			h->max_tokens = MIN(h->max_tokens, p->handoff.max_tokens);
			h->samples = MIN(h->samples, p->handoff.samples);
		}
		m.kv_capacity_tokens = i == 0 ? p->kv_capacity_tokens
		                              : MIN(m.kv_capacity_tokens, p->kv_capacity_tokens);
	}
	if (pf->min_tokens > pf->max_tokens || d->min_active > d->max_active ||
	    d->min_kv_tokens > d->max_kv_tokens)
		return false;
	if (handoffs > 0) {
		h->setup_s /= (double)handoffs;
		h->per_token_s /= (double)handoffs;
	} else {
		memset(h, 0, sizeof *h);
	}
	*out = m;
	return true;
}
