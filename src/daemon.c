#include "build-config.h"

#include "daemon.h"
#include "daemon-internal.h"

#include <signal.h>
#include <string.h>

#include <glib-unix.h>

#include "admin/admin.h"
#include "control/monitor.h"
#include "core/dialect.h"
#include "core/fleet-dialects.h"
#include "core/host.h"
#include "core/log.h"
#include "core/plugin-loader.h"
#include "net/http-server.h"
#include "net/upstream.h"
#include "obs/exposition.h"
#include "serve/serve.h"

/* How long a stop signal waits for answered requests to leave. */
#define STOP_GRACE_US (2 * G_USEC_PER_SEC)

/* The plugin kinds chosen once for the daemon; dialects are per engine. */
struct plugin_slot {
	narwhal_plugin_kind kind;
	const char *config_path; /* for messages */
	const struct nw_plugin_config *(*select)(const struct nw_config *cfg);
};

static const struct nw_plugin_config *
select_admission(const struct nw_config *cfg)
{
	return &cfg->plugins.admission;
}

static const struct nw_plugin_config *
select_placement(const struct nw_config *cfg)
{
	return &cfg->plugins.placement;
}

static const struct nw_plugin_config *
select_controller(const struct nw_config *cfg)
{
	return &cfg->plugins.controller;
}

enum { SLOT_ADMISSION, SLOT_PLACEMENT, SLOT_CONTROLLER };

static const struct plugin_slot plugin_slots[] = {
	[SLOT_ADMISSION] = { NARWHAL_KIND_ADMISSION, "plugins.admission", select_admission },
	[SLOT_PLACEMENT] = { NARWHAL_KIND_PLACEMENT, "plugins.placement", select_placement },
	[SLOT_CONTROLLER] = { NARWHAL_KIND_CONTROLLER, "plugins.controller", select_controller },
};

static void
loaded_plugin_clear(struct loaded_plugin *lp)
{
	nw_plugin_instance_free(lp->instance);
	nw_host_free(lp->host);
	nw_plugin_free(lp->plugin);
	memset(lp, 0, sizeof *lp);
}

static gboolean
load_plugin(const struct nw_config *cfg, const struct plugin_slot *slot, struct nw_fleet *fleet,
            struct nw_plugin_metrics *metrics, struct loaded_plugin *out, GError **error)
{
	const struct nw_plugin_config *pc = slot->select(cfg);
	g_autofree char *file = nw_plugin_resolve(slot->kind, pc->name, pc->path, cfg->plugins.dir);
	struct loaded_plugin lp = { 0 };

	lp.plugin = nw_plugin_load(slot->kind, pc->path ? NULL : pc->name, file, error);
	if (lp.plugin == NULL)
		return FALSE;
	lp.host = nw_host_new(slot->kind, lp.plugin->desc->name, NULL, NULL, fleet, metrics);
	lp.instance = nw_plugin_instance_new(lp.plugin, nw_host_table(lp.host), pc->config, error);
	if (lp.instance == NULL) {
		loaded_plugin_clear(&lp);
		return FALSE;
	}
	*out = lp;
	return TRUE;
}

/* The distinct dialect names of the fleet, in fleet order. */
static GPtrArray *
fleet_dialects(const struct nw_config *cfg)
{
	GPtrArray *names = g_ptr_array_new();

	for (uint32_t i = 0; i < cfg->fleet.n_engines; i++) {
		const char *d = cfg->fleet.engines[i].dialect;
		gboolean seen = FALSE;

		for (guint k = 0; k < names->len && !seen; k++)
			seen = strcmp(g_ptr_array_index(names, k), d) == 0;
		if (!seen)
			g_ptr_array_add(names, (gpointer)d);
	}
	return names;
}

static void
add_problem(GPtrArray *problems, const char *path, const char *message)
{
	struct nw_config_error *e = g_new0(struct nw_config_error, 1);

	e->path = g_strdup(path);
	e->message = g_strdup(message);
	g_ptr_array_add(problems, e);
}

gboolean
nw_daemon_check_plugins(const struct nw_config *cfg, GPtrArray *problems)
{
	struct nw_fleet *fleet = nw_fleet_new(cfg, 0);
	struct nw_plugin_metrics *metrics = nw_plugin_metrics_new();
	gboolean ok = TRUE;

	for (size_t i = 0; i < G_N_ELEMENTS(plugin_slots); i++) {
		struct loaded_plugin lp = { 0 };
		GError *error = NULL;

		if (load_plugin(cfg, &plugin_slots[i], fleet, metrics, &lp, &error)) {
			loaded_plugin_clear(&lp);
			continue;
		}
		add_problem(problems, plugin_slots[i].config_path, error->message);
		g_error_free(error);
		ok = FALSE;
	}
	{
		g_autoptr(GPtrArray) names = fleet_dialects(cfg);

		for (guint k = 0; k < names->len; k++) {
			GError *error = NULL;
			struct nw_loaded_dialect *ld = nw_loaded_dialect_new(cfg, g_ptr_array_index(names, k),
			                                                     fleet, metrics, &error);

			if (ld != NULL) {
				nw_loaded_dialect_free(ld);
				continue;
			}
			/* The message starts with plugins.dialects.<name>. */
			add_problem(problems, NULL, error->message);
			g_error_free(error);
			ok = FALSE;
		}
	}
	nw_plugin_metrics_free(metrics);
	nw_fleet_free(fleet);
	return ok;
}

static enum MHD_Result
on_request(void *data, struct MHD_Connection *conn, const char *url, const char *method,
           const char *version, const char *upload, size_t *upload_size, void **request)
{
	struct nw_daemon *d = data;

	/* Answer on the first call; a body sent with these routes is ignored. */
	if (*request == NULL && nw_daemon_routes_own(url))
		return nw_daemon_routes_handle(d, conn, url, method);
	if (*request != NULL || nw_serve_owns(url))
		return nw_serve_handle(d->serve, conn, url, method, upload, upload_size, request);
	return nw_serve_no_route(d->serve, conn, url, method);
}

static void
on_request_completed(void *data, struct MHD_Connection *conn, void **request,
                     enum MHD_RequestTerminationCode why)
{
	struct nw_daemon *d = data;

	nw_serve_completed(d->serve, request, why);
}

/* --- lifecycle ------------------------------------------------------- */

/* Stop once every answered request has left, or after the grace time. */
static gboolean
on_stop_poll(gpointer data)
{
	struct nw_daemon *d = data;

	if (nw_serve_retained(d->serve) > 0 &&
	    g_get_monotonic_time() - d->stop_started_us < STOP_GRACE_US)
		return G_SOURCE_CONTINUE;
	d->stop_poll = 0;
	g_main_loop_quit(d->loop);
	return G_SOURCE_REMOVE;
}

static gboolean
on_stop_signal(gpointer data)
{
	struct nw_daemon *d = data;
	char inflight[16];

	if (d->stop_poll != 0)
		return G_SOURCE_CONTINUE;
	/* Every request in flight gets its answer (503, or an error event)
	 * and its engine calls are cancelled; the loop runs on to send them. */
	g_snprintf(inflight, sizeof inflight, "%u", nw_serve_retained(d->serve));
	nw_log(NARWHAL_LOG_INFO, "stopping", "reason", "signal", "in_flight", inflight, NULL);
	nw_monitor_stop(d->monitor);
	nw_serve_shutdown(d->serve);
	d->stop_started_us = g_get_monotonic_time();
	d->stop_poll = g_timeout_add(5, on_stop_poll, d);
	return G_SOURCE_CONTINUE;
}

/* Configuration reload does not exist yet: SIGHUP, which would otherwise
 * end the process, is logged and ignored (docs/deployment.md). */
static gboolean
on_hangup_signal(gpointer data)
{
	nw_log(NARWHAL_LOG_WARNING, "sighup_ignored", "message",
	       "configuration reload is not supported: SIGHUP ignored, restart to apply "
	       "a new configuration", NULL);
	return G_SOURCE_CONTINUE;
}

struct nw_daemon *
nw_daemon_new(struct nw_config *cfg, GError **error)
{
	struct nw_daemon *d = g_new0(struct nw_daemon, 1);
	struct nw_http_server_options http = { 0 };
	struct nw_upstream_options pool = { 0 };
	struct nw_serve_options so = { 0 };
	char port[8];

	d->cfg = cfg;
	d->started_us = g_get_monotonic_time();
	d->loop = g_main_loop_new(NULL, FALSE);
	d->fleet = nw_fleet_new(cfg, nw_clock_monotonic_ns(NULL));
	d->plugin_metrics = nw_plugin_metrics_new();

	if (!load_plugin(cfg, &plugin_slots[SLOT_ADMISSION], d->fleet, d->plugin_metrics,
	                 &d->admission, error) ||
	    !load_plugin(cfg, &plugin_slots[SLOT_PLACEMENT], d->fleet, d->plugin_metrics,
	                 &d->placement, error) ||
	    !load_plugin(cfg, &plugin_slots[SLOT_CONTROLLER], d->fleet, d->plugin_metrics,
	                 &d->controller, error) ||
	    (d->dialects = nw_fleet_dialects_load(cfg, d->fleet, d->plugin_metrics, error)) == NULL)
		goto fail;
	if (cfg->server.api_keys_env != NULL) {
		d->api_keys = nw_serve_read_api_keys(cfg->server.api_keys_env, error);
		if (d->api_keys == NULL)
			goto fail;
	}

	pool.tls_ca_file = cfg->engine.tls_ca_file;
	pool.tls_no_verify = !cfg->engine.tls_verify;
	pool.max_connections = cfg->serving.max_connections;
	d->serving_pool = nw_upstream_new(&pool);
	pool.max_connections = nw_config_control_connections(cfg);
	d->control_pool = nw_upstream_new(&pool);

	so.cfg = cfg;
	so.fleet = d->fleet;
	so.admission = d->admission.instance;
	so.placement = d->placement.instance;
	so.dialects = d->dialects->dialects;
	so.serving_pool = d->serving_pool;
	so.api_keys = d->api_keys;
	so.metrics = &d->serve_metrics;
	d->serve = nw_serve_new(&so, error);
	if (d->serve == NULL)
		goto fail;

	http.host = cfg->server.host;
	http.port = (uint16_t)cfg->server.port;
	http.connection_timeout_s = (unsigned)MAX(1.0, cfg->server.client_timeout_s);
	/* Completion requests, queued ones and a margin for control routes;
	 * connections still sending their head are capped apart. */
	http.connection_limit = cfg->serving.max_connections + cfg->serving.queue_capacity + 64;
	http.head_timeout_s = cfg->server.head_timeout_s;
	http.body_timeout_s = cfg->server.body_timeout_s;
	http.max_pending = cfg->server.max_pending_connections;
	d->http = nw_http_server_start(&http, on_request, on_request_completed, d, error);
	if (d->http == NULL)
		goto fail;
	nw_serve_set_http(d->serve, d->http);
	{
		struct nw_monitor_options mo = {
			.cfg = cfg, .fleet = d->fleet, .dialects = d->dialects->dialects,
			.control_pool = d->control_pool, .clock = nw_clock_monotonic_ns,
		};

		d->monitor = nw_monitor_new(&mo);
		nw_monitor_start(d->monitor);
	}
	/* The admin API (docs/admin.md): none unless a token is configured. */
	{
		GError *admin_error = NULL;

		d->admin = nw_admin_start(d, &admin_error);
		if (admin_error != NULL) {
			g_propagate_error(error, admin_error);
			goto fail;
		}
	}

	/* A client that vanishes must not kill the daemon with SIGPIPE. */
	signal(SIGPIPE, SIG_IGN);
	d->sigterm = g_unix_signal_add(SIGTERM, on_stop_signal, d);
	d->sigint = g_unix_signal_add(SIGINT, on_stop_signal, d);
	d->sighup = g_unix_signal_add(SIGHUP, on_hangup_signal, d);

	g_snprintf(port, sizeof port, "%u", nw_http_server_port(d->http));
	nw_log(NARWHAL_LOG_INFO, "listening", "host", cfg->server.host, "port", port,
	       "admission", d->admission.plugin->desc->name,
	       "placement", d->placement.plugin->desc->name,
	       "controller", d->controller.plugin->desc->name,
	       "api_keys", d->api_keys ? "required" : "off", NULL);
	return d;

fail:
	nw_daemon_free(d);
	return NULL;
}

struct nw_serve *
nw_daemon_serve(struct nw_daemon *d)
{
	return d->serve;
}

struct nw_monitor *
nw_daemon_monitor(struct nw_daemon *d)
{
	return d->monitor;
}

struct nw_fleet *
nw_daemon_fleet(struct nw_daemon *d)
{
	return d->fleet;
}

const struct nw_config *
nw_daemon_config(struct nw_daemon *d)
{
	return d->cfg;
}

gboolean
nw_daemon_reload(struct nw_daemon *d, GError **error)
{
	(void)d;
	g_set_error(error, G_FILE_ERROR, G_FILE_ERROR_NOSYS,
	            "configuration reload is not supported yet: restart to apply a new configuration");
	return FALSE;
}

int
nw_daemon_run(struct nw_daemon *d)
{
	g_main_loop_run(d->loop);
	return d->exit_status;
}

void
nw_daemon_free(struct nw_daemon *d)
{
	if (d == NULL)
		return;
	if (d->sigterm)
		g_source_remove(d->sigterm);
	if (d->sigint)
		g_source_remove(d->sigint);
	if (d->sighup)
		g_source_remove(d->sighup);
	if (d->stop_poll)
		g_source_remove(d->stop_poll);
	/* Requests still held are answered and cancelled before MHD lets
	 * them go; they need the serve, which needs the pools. */
	if (d->monitor != NULL)
		nw_monitor_stop(d->monitor);
	if (d->serve != NULL)
		nw_serve_shutdown(d->serve);
	nw_admin_free(d->admin);
	nw_http_server_stop(d->http);
	nw_serve_free(d->serve);
	nw_monitor_free(d->monitor);
	nw_upstream_free(d->serving_pool);
	nw_upstream_free(d->control_pool);
	nw_fleet_dialects_free(d->dialects);
	g_strfreev(d->api_keys);
	loaded_plugin_clear(&d->admission);
	loaded_plugin_clear(&d->placement);
	loaded_plugin_clear(&d->controller);
	nw_plugin_metrics_free(d->plugin_metrics);
	nw_fleet_free(d->fleet);
	g_main_loop_unref(d->loop);
	nw_config_free(d->cfg);
	g_free(d);
}
