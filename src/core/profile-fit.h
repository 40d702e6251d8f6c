/*
 * Fitting the profile models to measurements (docs/profiles.md): least
 * squares for the quadratic prefill form and the decode form with active
 * requests and resident KV tokens as separate inputs (spec 7.7). Pure:
 * measurements in, coefficients, measured domain and fit error out.
 */
#ifndef NW_PROFILE_FIT_H
#define NW_PROFILE_FIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/profile.h"

struct nw_prefill_sample {
	uint64_t tokens;           /* prompt length L */
	double seconds;            /* measured prefill time */
};

struct nw_decode_sample {
	uint32_t active;           /* B */
	uint64_t kv_tokens;        /* T */
	double seconds;            /* measured token interval */
};

/* Fit prefill_s = a + b*L + c*L^2. false (out untouched) when the samples
 * cannot determine the three coefficients (fewer than three distinct
 * lengths) or the fit is not finite. A negative coefficient the data
 * implies is kept: the domain bounds where the model is used. */
bool nw_fit_prefill(const struct nw_prefill_sample *s, size_t n, struct nw_prefill_profile *out);
/* Fit interval_s = d0 + d1*T + d2*B over a grid that varies B and T apart. */
bool nw_fit_decode(const struct nw_decode_sample *s, size_t n, struct nw_decode_profile *out);

#endif /* NW_PROFILE_FIT_H */
