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

#include "control/controller.h"
#include "control/monitor.h"
#include "daemon-generation.h"
#include "core/config.h"
#include "core/fleet-dialects.h"
#include "core/host.h"
#include "core/plugin-loader.h"
#include "net/http-server.h"
#include "net/upstream.h"
#include "serve/serve.h"

struct nw_daemon;
struct nw_admin;

/* The daemon's lifecycle (docs/deployment.md, "Signals"). */
typedef enum nw_daemon_state {
	NW_DAEMON_SERVING = 0,
	NW_DAEMON_DRAINING,   /* a stop signal: in flight requests finish */
	NW_DAEMON_ENDING,     /* the rest were ended; waiting for them to leave */
} nw_daemon_state;

struct nw_daemon {
	char *config_file;                     /* re-read by a reload */
	GMainLoop *loop;
	int64_t started_us;
	bool listening; /* "listening" was logged: "stopped" closes it */
	/* What outlives a reload: */
	struct nw_plugin_metrics *plugin_metrics;
	struct nw_serve_metrics serve_metrics; /* shared by every generation */
	struct nw_demand *demand;              /* the demand ledger, likewise */
	struct nw_controller *controller;      /* the controller host, likewise */
	guint urgent_wake;                     /* the urgent evaluation armed; 0: none */
	struct nw_upstream *serving_pool;
	struct nw_upstream *control_pool;
	uint32_t control_connections;          /* the control pool's size */
	struct nw_http_server *http;
	/* The configuration in force, and the generations it superseded that
	 * still finish requests (gen->older...). */
	struct nw_generation *gen;
	guint overlap_tick;                    /* while generations overlap */
	/* Reloads not applied (docs/metrics.md): an invalid file, or one
	 * refused (a field that needs a restart, or Narwhal stopping). Those
	 * applied are gen->number; when the configuration in force was read
	 * is its own loaded_unix_us. */
	uint64_t reloads_failed, reloads_refused;
	struct nw_admin *admin;                /* the admin API's listener; NULL: none */
	guint sigterm, sigint, sighup;
	/* Stopping (a signal's drain, then the end). */
	nw_daemon_state state;
	guint stop_poll;
	int64_t drain_started_us, end_started_us;
	double drain_timeout_s;                /* as in force at the signal */
	unsigned drain_in_flight, ended;       /* held at the signal; ended by force */
	int exit_status;
};

/* What a generation borrows from the daemon. */
struct nw_generation_shared nw_daemon_shared(struct nw_daemon *d);
/* Make g (adopted from the current generation) current: the current one
 * is superseded and finishes its requests (daemon-reload.c). */
void nw_daemon_generation_switch(struct nw_daemon *d, struct nw_generation *g);

/* The controller host (daemon-controller.c; docs/controller.md): g's
 * monitor evaluates the controller on each pass and tells it of every
 * role change; call before g starts. */
void nw_daemon_controller_attach(struct nw_daemon *d, struct nw_generation *g);
/* The serve's urgent TTFT hook (struct nw_serve_options.ttft_breach;
 * data is the daemon). */
void nw_daemon_ttft_breach(void *data, uint64_t prompt_tokens, double projected_ttft_s);

/* The parts in force now. */
struct nw_serve *nw_daemon_serve(struct nw_daemon *d);
struct nw_monitor *nw_daemon_monitor(struct nw_daemon *d);
struct nw_fleet *nw_daemon_fleet(struct nw_daemon *d);
const struct nw_config *nw_daemon_config(struct nw_daemon *d);

/* Reload the configuration file the daemon started with (SIGHUP and the
 * admin API; docs/deployment.md). On success *summary (may be NULL) is
 * {"generation", "engines_added", "engines_removed", "plugins", "fields":
 * the dotted paths changed, "in_flight_old"} (transfer full). FALSE with
 * error set, and nothing changed, when it cannot apply: G_FILE_ERROR_INVAL
 * for an invalid file, G_FILE_ERROR_PERM when the file changes what needs
 * a restart, G_FILE_ERROR_AGAIN while Narwhal is stopping. */
gboolean nw_daemon_reload(struct nw_daemon *d, json_t **summary, GError **error);

/* The state document (docs/state.md) as the clients' listener shows it
 * (operator false) or the admin API (true: engine addresses, plugin
 * files, engine errors, callers' addresses); transfer full. */
json_t *nw_daemon_state_json(struct nw_daemon *d, bool operator);

/* The daemon's own routes on the clients' listener (docs/api.md):
 * /narwhal/health, /narwhal/health/ready, /narwhal/state and /metrics. */
bool nw_daemon_routes_own(const char *url);
enum MHD_Result nw_daemon_routes_handle(struct nw_daemon *d, struct MHD_Connection *conn,
                                        const char *url, const char *method);

#endif /* NW_DAEMON_INTERNAL_H */
