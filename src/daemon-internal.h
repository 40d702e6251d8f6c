/*
 * The daemon's parts as its own modules see them (daemon.c owns them):
 * the routes of the clients' listener (daemon-routes.c) read the
 * configuration now in force through the accessors below, since a reload
 * replaces it (docs/deployment.md).
 */
#ifndef NW_DAEMON_INTERNAL_H
#define NW_DAEMON_INTERNAL_H

#include <stdbool.h>

#include <microhttpd.h>

#include "control/monitor.h"
#include "core/config.h"
#include "core/fleet-dialects.h"
#include "core/host.h"
#include "core/plugin-loader.h"
#include "net/http-server.h"
#include "net/upstream.h"
#include "serve/serve.h"

struct nw_daemon;
struct nw_admin;

/* One configured plugin: its loaded type, host table and instance. */
struct loaded_plugin {
	struct nw_plugin *plugin;
	struct nw_host *host;
	struct nw_plugin_instance *instance;
};

struct nw_daemon {
	struct nw_config *cfg;
	GMainLoop *loop;
	int64_t started_us;
	struct nw_fleet *fleet;
	struct nw_plugin_metrics *plugin_metrics;
	struct nw_serve_metrics serve_metrics; /* shared by every serving context */
	struct loaded_plugin admission;
	struct loaded_plugin placement;
	struct loaded_plugin controller;
	struct nw_fleet_dialects *dialects; /* the engines' dialects */
	char **api_keys;
	struct nw_upstream *serving_pool;
	struct nw_upstream *control_pool;
	struct nw_http_server *http;
	struct nw_serve *serve;
	struct nw_monitor *monitor;
	struct nw_admin *admin;    /* the admin API's listener; NULL: none */
	guint sigterm, sigint, sighup;
	guint stop_poll;
	int64_t stop_started_us;
	int exit_status;
};

/* The parts in force now. */
struct nw_serve *nw_daemon_serve(struct nw_daemon *d);
struct nw_monitor *nw_daemon_monitor(struct nw_daemon *d);
struct nw_fleet *nw_daemon_fleet(struct nw_daemon *d);
const struct nw_config *nw_daemon_config(struct nw_daemon *d);

/* Reload the configuration file the daemon started with (SIGHUP and the
 * admin API; docs/deployment.md). FALSE with error set, and nothing
 * changed, when the new file is invalid or changes what needs a restart. */
gboolean nw_daemon_reload(struct nw_daemon *d, GError **error);

/* The state document (docs/state.md) as the clients' listener shows it
 * (operator false) or the admin API (true: engine addresses, plugin
 * files, engine errors, callers' addresses); transfer full. */
json_t *nw_daemon_state_json(struct nw_daemon *d, bool operator);

/* The daemon's own routes on the clients' listener (docs/api.md):
 * /narwhal/health, /narwhal/state and /metrics. */
bool nw_daemon_routes_own(const char *url);
enum MHD_Result nw_daemon_routes_handle(struct nw_daemon *d, struct MHD_Connection *conn,
                                        const char *url, const char *method);

#endif /* NW_DAEMON_INTERNAL_H */
