/*
 * The scene the "reactive" controller's isolation tests play on
 * (tests/plugins/test-controller-reactive*.c): the built .so loaded by the
 * real loader against the mock host, its clock, scripted split prices and
 * the controller input a pass hands it (2 prefill and 4 decode engines).
 */
#ifndef NW_TESTS_REACTIVE_SCENE_H
#define NW_TESTS_REACTIVE_SCENE_H

#include <math.h>
#include <string.h>

#include "plugins/harness.h"

#define S_NS G_GINT64_CONSTANT(1000000000)

/* A fleet of 2 prefill and 4 decode engines, so both adjacent splits
 * exist: P+1 is 3/3, D+1 is 1/5. */
#define LIVE_P 2
#define LIVE_D 4

struct scene {
	struct nw_harness *h;
	struct narwhal_mock_host *mh;
	struct narwhal_controller_input in;
};

gboolean scene_init(struct scene *sc, const char *config_json);

void scene_clear(struct scene *sc);

/* A price whose worst ratio is worst (TTFT's), with these projected loads,
 * inside the measured domain and meeting the TPOT target. */
struct narwhal_split_price price_of(double worst, double prefill_load, double decode_load);

void script(struct scene *sc, uint32_t prefill, uint32_t decode, struct narwhal_split_price p);

/* The usual prices: the live split at 1.0, P+1 (3/3) and D+1 (1/5) as
 * given (worst ratio, projected prefill and decode load). */
void script_three(struct scene *sc, double p1_worst, double p1_decode_load, double d1_worst,
		  double d1_prefill_load);

struct narwhal_controller_proposal call(struct scene *sc);

/* A scheduled pass one step_s (the default, 5 s) after the last. */
struct narwhal_controller_proposal step(struct scene *sc);

struct narwhal_controller_proposal urgent(struct scene *sc, uint64_t prompt_tokens);

void assert_no_change(const struct narwhal_controller_proposal *out, const char *reason);

void assert_move(const struct narwhal_controller_proposal *out, const char *reason, uint32_t prefill,
		 uint32_t decode, double ratio);

void step_no_change(struct scene *sc, const char *reason);

void urgent_no_change(struct scene *sc, uint64_t prompt_tokens, const char *reason);

void step_move(struct scene *sc, const char *reason, uint32_t prefill, uint32_t decode, double ratio);

void urgent_move(struct scene *sc, uint64_t prompt_tokens, const char *reason, uint32_t prefill,
		 uint32_t decode, double ratio);

/* Passes of the default three confirmations (max(confirmations 2,
 * sustained_intervals 3)): two "confirming", then the return of the third. */
struct narwhal_controller_proposal confirm_three(struct scene *sc);

#endif /* NW_TESTS_REACTIVE_SCENE_H */
