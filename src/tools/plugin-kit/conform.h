/*
 * narwhal-plugin-check's conformance checks (docs/plugins.md, "Checking a
 * plugin"): each kind has a scripted scenario that drives one instance
 * against a mock host and a scripted fleet, writing every result to a
 * transcript and every broken rule to a list of problems; conform.c runs
 * the scenarios on fresh, disturbed and repeated instances and turns what
 * they saw into verdicts, one check at a time.
 */
#ifndef NW_KIT_CONFORM_H
#define NW_KIT_CONFORM_H

#include <narwhal/plugin-test.h>

#include <jansson.h>
#include <stdio.h>

#include "core/plugin-loader.h"

/* The world one instance lives in: its own host and fleet. */
struct kit_world {
	struct narwhal_mock_host *mh;
	struct narwhal_test_fleet *fleet;
};

/* What a scenario saw. */
struct kit_seen {
	GString *transcript;  /* every result, to compare between instances */
	GString *slots;       /* a required slot that did not answer: one line each */
	GString *range;       /* a result out of range or outside the eligible set */
};

/* Drive inst (created by p in world w) with the kind's script; disturb
 * picks a different, heavier script, for the isolation check. */
typedef void (*kit_scenario_fn)(const struct nw_plugin *p, void *inst, struct kit_world *w,
                                gboolean disturb, struct kit_seen *seen);

kit_scenario_fn kit_scenario_for(narwhal_plugin_kind kind);

/* The kinds' scenarios (scenarios.c, dialect-scenario.c). */
void kit_scenario_admission(const struct nw_plugin *p, void *inst, struct kit_world *w,
                            gboolean disturb, struct kit_seen *seen);
void kit_scenario_placement(const struct nw_plugin *p, void *inst, struct kit_world *w,
                            gboolean disturb, struct kit_seen *seen);
void kit_scenario_controller(const struct nw_plugin *p, void *inst, struct kit_world *w,
                             gboolean disturb, struct kit_seen *seen);
void kit_scenario_dialect(const struct nw_plugin *p, void *inst, struct kit_world *w,
                          gboolean disturb, struct kit_seen *seen);

/* Appends one line to a problem list (at most a few are kept). */
void kit_problem(GString *list, const char *fmt, ...) G_GNUC_PRINTF(2, 3);

/* The configuration the daemon would hand a plugin of this kind, from the
 * user's object (NULL: none): a controller's gets the host's "reactive" and
 * "thresholds" sections, an admission plugin's "admission_margin"
 * (docs/plugins.md, section 7), a dialect's loses its "path" and is NULL
 * when the user gives none. New reference, or NULL. */
json_t *kit_daemon_config(narwhal_plugin_kind kind, const json_t *user);

/* What every check is given: the loaded plugin, the configuration the
 * daemon would hand it, and that configuration with an unknown key. */
struct kit_plan {
	const struct nw_plugin *p;
	json_t *cfg;
	json_t *bad;
	char *cfg_text;           /* cfg as compact JSON, for messages */
};

void kit_plan_init(struct kit_plan *plan, const struct nw_plugin *p, const json_t *user);
void kit_plan_clear(struct kit_plan *plan);

/* One conformance check: drives fresh instances and prints its verdict,
 * one line "PASS  name: ..." or "FAIL  name: ...", to out. narwhal-plugin-
 * check runs each in a process of its own (sandbox.h). */
struct kit_check {
	const char *name;
	void (*run)(const struct kit_plan *plan, FILE *out);
};

/* The checks after load, in the order they run; create comes first, and
 * the others are not run when it fails. clock and blocking come last:
 * they judge the clock reads and waits noted in every check before them. */
extern const struct kit_check kit_checks[];
extern const guint kit_n_checks;

/* Prints a verdict line. */
void kit_verdict(FILE *out, gboolean ok, const char *check, const char *fmt, ...)
	G_GNUC_PRINTF(4, 5);

#endif /* NW_KIT_CONFORM_H */
