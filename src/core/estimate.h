/*
 * The estimators on one measured profile (ARCHITECTURE.md, section 6;
 * spec 7.7; docs/profiles.md). Pure: a profile and the inputs in, seconds
 * out. Above the measured domain of an input they answer
 * NARWHAL_ESTIMATE_OUT_OF_DOMAIN rather than extrapolate; below it they
 * price at its lower edge, an upper bound (less work is never slower);
 * without a profile, NARWHAL_ESTIMATE_NO_PROFILE. *out is written only on
 * OK.
 */
#ifndef NW_ESTIMATE_H
#define NW_ESTIMATE_H

#include <narwhal/plugin-abi.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/profile.h"

/* Seconds to prefill one prompt of tokens tokens: a + b*L + c*L^2 up to
 * prefill.max_tokens, L at least prefill.min_tokens. */
narwhal_estimate_status nw_estimate_prefill_s(const struct nw_engine_profile *p, uint64_t tokens,
                                              double *out);

/* The token interval with active requests holding kv_tokens resident KV
 * tokens between them: d0 + d1*T + d2*B over the decode grid. */
narwhal_estimate_status nw_estimate_decode_interval_s(const struct nw_engine_profile *p,
                                                      uint32_t active, uint64_t kv_tokens,
                                                      double *out);

/* The mean profile across engines (spec 7.7: demand pricing uses it):
 * every coefficient averaged, each domain the intersection of the
 * engines' domains. false (out untouched) when n is 0, a profile is
 * NULL, or an intersection is empty. out's strings are NULL, its sample
 * counts and KV capacity the least of the engines', its fit errors the
 * largest; handoff is averaged over the
 * engines that measured it, up to the least max_tokens among them. */
bool nw_profile_mean(const struct nw_engine_profile *const *profiles, size_t n,
                     struct nw_engine_profile *out);

#endif /* NW_ESTIMATE_H */
