/*
 * The profile store (docs/profiles.md; ARCHITECTURE.md, section 6; spec
 * 7.7): what narwhal-profile measured of each engine, the models fitted
 * to it and the domain each was measured over, read by the daemon from
 * profiles.path. Times are seconds. The estimators (core/estimate.h) price
 * on these and say "outside the measured domain" rather than extrapolate.
 */
#ifndef NW_PROFILE_H
#define NW_PROFILE_H

#include <stdbool.h>
#include <stdint.h>

#include <glib.h>
#include <jansson.h>

/* The store's format version; a store of another major version is
 * refused with a message that says to profile again. */
#define NW_PROFILE_STORE_VERSION 1

/* prefill_s = a + b*L + c*L^2 for one prompt of L tokens (the quadratic
 * form, spec 7.7), fitted over prompts of min_tokens..max_tokens. */
struct nw_prefill_profile {
	double a_s, b_s, c_s;
	uint64_t min_tokens, max_tokens;
	uint32_t samples;          /* measurements the fit used */
	double rel_rms_error;      /* root mean square of (fit - measured) / measured */
};

/* interval_s = d0 + d1*T + d2*B: the token interval with B active
 * requests holding T resident KV tokens between them (separate inputs,
 * spec 7.7), fitted over the grid min..max of each. */
struct nw_decode_profile {
	double d0_s, d1_s, d2_s;
	uint32_t min_active, max_active;
	uint64_t min_kv_tokens, max_kv_tokens;
	uint32_t samples;
	double rel_rms_error;
};

/* handoff_s = setup + per_token * L: prefill end to the decode engine's
 * first token beyond its own decode step, for prompts up to max_tokens.
 * samples 0: not measured. */
struct nw_handoff_profile {
	double setup_s, per_token_s;
	uint64_t max_tokens;
	uint32_t samples;
};

struct nw_engine_profile {
	char *engine;              /* fleet.engines[].id */
	char *url;                 /* as configured when measured */
	char *dialect;
	char *model;               /* the served model the engine named */
	char *hardware;            /* what the engine said of itself; NULL: unknown */
	uint64_t kv_capacity_tokens; /* 0: unknown */
	char *measured_at;         /* UTC, ISO 8601 */
	struct nw_prefill_profile prefill;
	struct nw_decode_profile decode;
	struct nw_handoff_profile handoff;
};

struct nw_profile_store {
	uint32_t version;          /* NW_PROFILE_STORE_VERSION when written */
	char *created_at;          /* UTC, ISO 8601 */
	char *tool;                /* "narwhal-profile <version>" */
	GPtrArray *engines;        /* struct nw_engine_profile *, owned */
};

struct nw_profile_store *nw_profile_store_new(void);
void nw_profile_store_free(struct nw_profile_store *s);
/* Takes p (owned); replaces a profile of the same engine. */
void nw_profile_store_put(struct nw_profile_store *s, struct nw_engine_profile *p);
const struct nw_engine_profile *nw_profile_store_find(const struct nw_profile_store *s,
                                                      const char *engine);
void nw_engine_profile_free(struct nw_engine_profile *p);

/* Read and check a store. NULL with error set, its message
 * "file: json.path: problem: what is valid" (docs/profiles.md). */
struct nw_profile_store *nw_profile_store_load(const char *file, GError **error);
/* Write it atomically (a temporary file beside it, then rename), so a
 * reader never sees half a store. */
gboolean nw_profile_store_save(const struct nw_profile_store *s, const char *file,
                               GError **error);
/* The store as written (transfer full). */
json_t *nw_profile_store_to_json(const struct nw_profile_store *s);

#endif /* NW_PROFILE_H */
