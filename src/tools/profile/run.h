/*
 * narwhal-profile's run (docs/profiles.md, "How to profile a fleet"): the
 * engines it drives through their dialects, what it learns of each and
 * what it measured, and the steps, in the order they run:
 *
 *   engines.c  what each engine serves (build_models), its partner for
 *              handoffs, and its fitted profile at the end
 *   prefill.c  the prefill sweep, one engine at a time; each sample of an
 *              engine that hands off is a real handoff, timed too
 *   decode.c   the decode grid, every engine at once
 *
 * Everything runs on the GLib loop; every call has a timeout from the
 * configuration's engine.* fields.
 */
#ifndef NW_PROFILE_RUN_H
#define NW_PROFILE_RUN_H

#include <narwhal/plugin-abi.h>

#include <stdbool.h>
#include <stdint.h>

#include <glib.h>

#include "control/dialect-call.h"
#include "core/config.h"
#include "core/fleet-dialects.h"
#include "core/profile-fit.h"
#include "core/profile.h"
#include "net/upstream.h"
#include "tools/profile/plan.h"
#include "tools/profile/report.h"

struct nw_prof_options {
	bool quick;
	bool json;
	const char *out;            /* the store's path */
	uint64_t prompt_cap;        /* --max-prompt-tokens */
	uint32_t active_max;        /* --max-decode-streams */
	const bool *selected;       /* per engine: profile it */
};

/* One handoff: prefill end to the decode engine's first token, less that
 * engine's decode step. */
struct nw_prof_handoff_sample {
	uint64_t tokens;
	double seconds;
};

struct nw_prof_engine {
	uint32_t index;
	const struct nw_dialect *d;
	bool selected;
	char *error;                /* why it could not be profiled; NULL: none yet */
	/* what it said */
	char *model;
	int64_t max_model_len;      /* -1: unknown */
	/* the prompt builder's knowledge of its tokeniser (prompt.c) */
	double prompt_overhead;     /* tokens beyond the fillers: nonce, BOS */
	double tokens_per_filler;
	/* the decode engine of its handoffs (itself when no other answers);
	 * -1: it does not hand off, prefill is timed on aggregate legs */
	int partner;
	/* measurements */
	GArray *prefill;            /* struct nw_prefill_sample */
	GArray *decode;             /* struct nw_decode_sample */
	GArray *handoff;            /* struct nw_prof_handoff_sample */
	uint64_t kv_capacity;       /* estimated from its KV usage; 0: unknown */
	bool kv_asked;              /* its KV usage was asked for */
	/* the fits */
	struct nw_prefill_profile fit_prefill;
	struct nw_decode_profile fit_decode;
	struct nw_handoff_profile fit_handoff;
	char *measured_at;          /* when its last measurement ended */
};

struct nw_prof_run {
	const struct nw_config *cfg;
	const struct nw_prof_options *opts;
	struct nw_prof_sizes sizes;
	struct nw_fleet_dialects *fleet;
	struct nw_upstream *pool;
	struct nw_prof_engine *engines;
	uint32_t n_engines;
	struct nw_prof_report *report;
	uint64_t next_handle;       /* probe handles and request ids */
	uint32_t tag;               /* this run's prompt nonce */
	uint64_t next_prompt;
	/* progress planned for each engine before its sweeps are known */
	double prefill_units;       /* one a prefill sample */
	size_t decode_cells;        /* NW_PROF_CELL_UNITS a cell */
};

/* Progress units of a decode cell (a prefill sample is one). */
#define NW_PROF_CELL_UNITS 2.0

/* Record why engine e cannot be profiled (the first reason stays). */
void nw_prof_fail(struct nw_prof_engine *e, const char *fmt, ...) G_GNUC_PRINTF(2, 3);

/* Now in UTC, ISO 8601 ("2026-12-01T21:05:00Z"; transfer full). */
char *nw_prof_utc_now(void);

/* Run the loop until *flag is true. */
void nw_prof_wait(const bool *flag);

/* --- engine calls (call.c) ------------------------------------------- */

/* Send a call a dialect built (its body transfer full) to engine d under
 * timeout_s; fn is called once from the loop. NULL when it could not
 * start (fn is not called then). */
struct nw_dialect_call *nw_prof_call(struct nw_prof_run *run, const struct nw_dialect *d,
                                     struct narwhal_http_call *call, double timeout_s,
                                     nw_dialect_answer_fn fn, void *data);

bool nw_prof_answered_2xx(const struct nw_dialect_answer *a);

/* --- exact prompts (prompt.c) ---------------------------------------- */

/* A prompt the engine counts as exactly tokens tokens, unique in the run
 * (so no engine serves it from a prefix cache), confirmed with the
 * dialect's tokenize call. ok false: error says why. seconds: the round
 * trip of the tokenize call that confirmed it. */
typedef void (*nw_prof_prompt_fn)(void *data, bool ok, char *text, double seconds,
                                  const char *error);

/* fn is called once, from the loop (or at once when no call could be
 * sent); text is transfer full. */
void nw_prof_prompt_build(struct nw_prof_run *run, struct nw_prof_engine *e, uint64_t tokens,
                          nw_prof_prompt_fn fn, void *data);

/* The same, waiting on the loop: the text (transfer full) or NULL with
 * the engine failed. */
char *nw_prof_prompt_wait(struct nw_prof_run *run, struct nw_prof_engine *e, uint64_t tokens,
                          double *seconds);

/* --- the steps ------------------------------------------------------- */

/* engines.c: ask every selected engine what it serves (concurrently) and
 * choose the partners of handoffs. */
void nw_prof_discover(struct nw_prof_run *run);
/* engines.c: the store entry of a profiled engine (transfer full). */
struct nw_engine_profile *nw_prof_engine_profile(const struct nw_prof_engine *e);

/* prefill.c: the prefill sweep of one engine and the fits of its prefill
 * and handoff models. */
void nw_prof_prefill(struct nw_prof_run *run, struct nw_prof_engine *e);

/* decode.c: the decode grid of every engine still fine, all at once, and
 * their decode fits. */
void nw_prof_decode(struct nw_prof_run *run);

#endif /* NW_PROFILE_RUN_H */
