/*
 * The controller host's test fixture (tests/unit/test-controller*.c): a
 * controller plugin that proposes what a test scripts, a real fleet made
 * from a configuration with real role rules, a real demand ledger and
 * profiles as tests/unit/test-pricing.c makes them, on a fake clock.
 */
#ifndef NW_TESTS_CONTROLLER_FIXTURE_H
#define NW_TESTS_CONTROLLER_FIXTURE_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include <glib.h>
#include <jansson.h>

#include "control/controller.h"
#include "control/roles.h"
#include "core/config.h"
#include "core/demand.h"
#include "core/host.h"
#include "core/pricing.h"

#define P NARWHAL_ROLE_PREFILL
#define D NARWHAL_ROLE_DECODE
#define S(x) ((int64_t)llround((double)(x) * 1e9))
#define T0 S(1000)
#define MAX_ENGINES 8

/* What the scripted plugin proposes and what it saw. */
struct script {
	uint32_t calls;
	int rc;                      /* propose's return */
	bool fill;                   /* false: leave the host's presets */
	int dp;                      /* prefill engines more (decode engines less) */
	int extra_decode;            /* decode engines more still (an invalid split) */
	const char *reason;
	double worst;
	struct narwhal_controller_input in;      /* the last input seen */
	struct narwhal_controller_proposal preset; /* the proposal as the host preset it */
};

struct env {
	struct nw_config *cfg;
	struct nw_fleet *f;
	struct nw_demand *demand;
	struct nw_controller *c;
	struct nw_engine_profile prof[MAX_ENGINES];
	struct nw_role_engine roles[MAX_ENGINES];
	bool unmovable[MAX_ENGINES];
	struct script script;
	struct nw_controller_plugin plugin;
	struct nw_role_change out[MAX_ENGINES];
	int64_t now;
};

/* The profile every engine gets (tests/unit/test-pricing.c's). */
struct nw_engine_profile profile(void);
/* Engines of the roles given ("ppdd"), each profiled, live and movable;
 * the controller settings given (JSON members, or NULL); the clock at T0. */
void env_init(struct env *e, const char *roles, const char *controller);
void env_clear(struct env *e);
/* The guards' view of the fleet, from its views and e->unmovable. */
void fill_roles(struct env *e);
/* Apply the first n changes of e->out to the fleet. */
void apply(struct env *e, uint32_t n);
/* One pass's inputs at e->now. */
struct nw_controller_pass pass_of(struct env *e);
/* A scheduled pass with the plugin scripted to move dp engines towards
 * prefill with reason; how many changes came back. */
uint32_t scheduled(struct env *e, int dp, const char *reason);
/* The same through the urgent path. */
uint32_t urgent(struct env *e, int dp, const char *reason);
/* A scheduled pass that proposes nothing. */
void pass(struct env *e);
/* count sized offers spread evenly over [from_s, to_s). */
void offers(struct env *e, uint32_t count, double from_s, double to_s, uint64_t prompt, uint32_t max);
/* Live engines of role r. */
uint32_t live_of(const struct env *e, narwhal_role r);
/* The controller's /narwhal/state document (json_decref it). */
json_t *doc(struct env *e);
/* The last evaluation's result and refused_by (NULL: null). */
void assert_last(struct env *e, const char *result, const char *refused_by);
/* Proposals kept in the record ring. */
size_t n_proposals(struct env *e);
/* The gate of the summary. */
const char *gate(struct env *e);

#endif /* NW_TESTS_CONTROLLER_FIXTURE_H */
