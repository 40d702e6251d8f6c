/*
 * The host services table handed to plugins (struct narwhal_host), backed
 * by the daemon's clock, log, metrics and fleet registry. Each plugin
 * instance gets its own table so its log lines and metrics carry its name.
 */
#ifndef NW_HOST_H
#define NW_HOST_H

#include <narwhal/plugin-abi.h>

#include <glib.h>

#include "core/config.h"

/* The fleet registry as plugins see it. Owned by the daemon. */
struct nw_fleet {
	struct narwhal_fleet_view view;
	struct narwhal_engine_view *engines;
	char **ids;
};

struct nw_fleet *nw_fleet_new(const struct nw_config *cfg, int64_t now_ns);
void nw_fleet_free(struct nw_fleet *fleet);

/* A clock: the daemon's monotonic clock, or a virtual one in a replay. */
typedef int64_t (*nw_clock_fn)(void *data);
int64_t nw_clock_monotonic_ns(void *unused);

/* Plugin metric values recorded through the host table. */
struct nw_plugin_metrics;
struct nw_plugin_metrics *nw_plugin_metrics_new(void);
void nw_plugin_metrics_free(struct nw_plugin_metrics *m);
/* Current value of a metric by full name, e.g.
 * "narwhal_plugin_admission_open_refusals"; NAN when unknown. */
double nw_plugin_metrics_get(const struct nw_plugin_metrics *m, const char *name);

struct nw_host;

/* A host table for one plugin instance. fleet and metrics are borrowed and
 * must outlive the table. */
struct nw_host *nw_host_new(narwhal_plugin_kind kind, const char *plugin_name,
                            nw_clock_fn clock, void *clock_data, struct nw_fleet *fleet,
                            struct nw_plugin_metrics *metrics);
const struct narwhal_host *nw_host_table(const struct nw_host *host);
void nw_host_free(struct nw_host *host);

#endif /* NW_HOST_H */
