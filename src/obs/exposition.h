/*
 * GET /metrics (docs/metrics.md): the router's state in the Prometheus
 * text format, from the data plane's counters, the fleet registry, the
 * monitor's verdicts and the metrics plugins record through the host.
 */
#ifndef NW_OBS_EXPOSITION_H
#define NW_OBS_EXPOSITION_H

#include <glib.h>

#include "control/controller.h"
#include "control/monitor.h"
#include "core/host.h"
#include "serve/serve.h"

/* A label value and its count. */
struct nw_exposition_count {
	const char *label;
	uint64_t n;
};

/* The daemon's own figures (docs/metrics.md, "Daemon"), filled by the
 * metrics route so that obs needs none of the daemon's internals. */
struct nw_exposition_daemon {
	bool draining;                /* a stop signal started the drain */
	unsigned generation;          /* the configuration's: 0 at start, +1 a reload */
	unsigned superseded;          /* older generations still finishing requests */
	unsigned superseded_requests; /* the requests they hold */
	uint64_t reloads_applied, reloads_failed, reloads_refused;
	double loaded_unix_s;         /* the last successful load (start or reload) */
	/* Admin API calls by result ("ok" or the error code); NULL: no
	 * admin listener. */
	const struct nw_exposition_count *admin_calls;
	size_t n_admin_calls;
};

struct nw_exposition_sources {
	struct nw_serve *serve;
	const struct nw_monitor *monitor;
	const struct nw_fleet *fleet;
	const struct nw_plugin_metrics *plugin_metrics;
	const struct nw_controller *controller;     /* NULL: its families are left out */
	const struct nw_exposition_daemon *daemon;  /* NULL: its families are left out */
};

/* The whole scrape (transfer full). */
GString *nw_exposition_render(const struct nw_exposition_sources *src);

#endif /* NW_OBS_EXPOSITION_H */
