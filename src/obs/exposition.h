/*
 * GET /metrics (docs/metrics.md): the router's state in the Prometheus
 * text format, from the data plane's counters, the fleet registry, the
 * monitor's verdicts and the metrics plugins record through the host.
 */
#ifndef NW_OBS_EXPOSITION_H
#define NW_OBS_EXPOSITION_H

#include <glib.h>

#include "control/monitor.h"
#include "core/host.h"
#include "serve/serve.h"

struct nw_exposition_sources {
	struct nw_serve *serve;
	const struct nw_monitor *monitor;
	const struct nw_fleet *fleet;
	const struct nw_plugin_metrics *plugin_metrics;
};

/* The whole scrape (transfer full). */
GString *nw_exposition_render(const struct nw_exposition_sources *src);

#endif /* NW_OBS_EXPOSITION_H */
