/*
 * GET /narwhal/state and GET /admin/state (docs/state.md): one JSON
 * document of everything the router knows, from the monitor's verdicts,
 * the fleet registry, the data plane's gauges, the configuration in force
 * and the histories of role changes and operator calls. The clients'
 * listener gets it without engine addresses, plugin files or engine error
 * text; the admin listener (operator) gets them too.
 */
#ifndef NW_OBS_STATE_H
#define NW_OBS_STATE_H

#include <stdbool.h>

#include <jansson.h>

#include "control/controller.h"
#include "control/monitor.h"
#include "core/config.h"
#include "core/host.h"
#include "serve/serve.h"

struct nw_state_sources {
	struct nw_serve *serve;
	const struct nw_monitor *monitor;
	const struct nw_fleet *fleet;
	const struct nw_config *cfg;          /* the configuration in force */
	const struct nw_controller *controller; /* the controller host; NULL: no
	                                       * "controller" section */
	const json_t *plugins;                /* {"admission": {"name", "version"}, ...,
	                                       * "dialects": {...}}; copied */
	const json_t *operator_history;       /* the admin API's calls; copied; NULL: no
	                                       * admin listener */
	double uptime_s;
	bool operator;                        /* addresses, plugin files, errors */
};

/* The whole document (transfer full). */
json_t *nw_state_to_json(const struct nw_state_sources *src);

/* "sha256:" and the hex SHA-256 of the effective configuration as
 * canonical JSON (nw_config_to_json, keys sorted, compact); caller frees. */
char *nw_state_config_digest(const struct nw_config *cfg);

#endif /* NW_OBS_STATE_H */
