/*
 * Pricing a prefill/decode split (spec 7.5 to 7.7; the role-control
 * document's "Role control" and "Prefill queue projections";
 * docs/controller.md, "How a split is priced"): what the live engines,
 * split into q->prefill prefill and q->decode decode engines, would serve
 * a demand at, priced on the mean profile (spec 7.7: every engine shares
 * one hardware and TP shape). The host service price_split (ABI 2.2)
 * answers from here, and so do the controller host's resident-work check
 * (spec 7.3) and the priced inputs it records.
 *
 * Pure over the fleet (its mean profile, its prefill ledger) and now_ns:
 * no clock, no allocation, O(1) in the fleet's size once the live prefill
 * pool is counted, so a 1,024-engine evaluation prices its three splits in
 * microseconds and runs unchanged under virtual time. A query with an
 * urgent prompt is O(engines): it asks each live prefill engine's queue.
 */
#ifndef NW_CORE_SPLIT_PRICE_H
#define NW_CORE_SPLIT_PRICE_H

#include <narwhal/plugin-abi.h>

#include <stdint.h>

struct nw_fleet;

/* The split q names at now_ns, against the fleet's SLO targets
 * (fleet->view.ttft_target_s, tpot_target_s). NO_PROFILE without a mean
 * profile or with a query outside its sense (no engine on a side, a
 * utilization outside (0, 1], a negative or non-finite demand); OK
 * otherwise, with every field of *out set (struct narwhal_split_price). */
narwhal_estimate_status nw_split_price(struct nw_fleet *fleet,
                                       const struct narwhal_split_query *q, int64_t now_ns,
                                       struct narwhal_split_price *out);

#endif /* NW_CORE_SPLIT_PRICE_H */
