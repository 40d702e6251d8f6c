#include "build-config.h"

#include "daemon.h"

#include <signal.h>
#include <string.h>

#include <glib-unix.h>

#include "core/host.h"
#include "core/log.h"
#include "core/plugin-loader.h"
#include "net/http-server.h"
#include "net/upstream.h"

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
	struct loaded_plugin admission;
	struct loaded_plugin controller;
	struct nw_upstream *serving_pool;
	struct nw_upstream *control_pool;
	struct nw_http_server *http;
	guint sigterm, sigint;
	int exit_status;
};

/* The plugin kinds this version of the daemon runs. Placement and dialect
 * plugins join when the data plane does. */
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
select_controller(const struct nw_config *cfg)
{
	return &cfg->plugins.controller;
}

static const struct plugin_slot plugin_slots[] = {
	{ NARWHAL_KIND_ADMISSION, "plugins.admission", select_admission },
	{ NARWHAL_KIND_CONTROLLER, "plugins.controller", select_controller },
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
		struct nw_config_error *e = g_new0(struct nw_config_error, 1);
		e->path = g_strdup(plugin_slots[i].config_path);
		e->message = g_strdup(error->message);
		g_ptr_array_add(problems, e);
		g_error_free(error);
		ok = FALSE;
	}
	nw_plugin_metrics_free(metrics);
	nw_fleet_free(fleet);
	return ok;
}

/* --- routes ---------------------------------------------------------- */

static json_t *
plugin_json(const struct loaded_plugin *lp)
{
	return json_pack("{s:s, s:s, s:s}", "name", lp->plugin->desc->name,
	                 "version", lp->plugin->desc->version, "file", lp->plugin->path);
}

static enum MHD_Result
route_health(struct nw_daemon *d, struct MHD_Connection *conn)
{
	json_t *body = json_pack("{s:s, s:s, s:f, s:i, s:{s:o, s:o}}",
	                         "status", "ok",
	                         "version", PACKAGE_VERSION,
	                         "uptime_s", (g_get_monotonic_time() - d->started_us) / 1e6,
	                         "engines", (json_int_t)d->cfg->fleet.n_engines,
	                         "plugins",
	                         "admission", plugin_json(&d->admission),
	                         "controller", plugin_json(&d->controller));
	enum MHD_Result ret = nw_http_respond_json(conn, MHD_HTTP_OK, body);

	json_decref(body);
	return ret;
}

static enum MHD_Result
respond_method_not_allowed(struct MHD_Connection *conn, const char *allow)
{
	g_autofree char *msg = g_strdup_printf("method not allowed: use %s", allow);
	json_t *body = nw_http_error_body("invalid_request_error", "method_not_allowed", NULL, msg);
	char *text = json_dumps(body, JSON_COMPACT);
	struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(text), text,
	                                                            MHD_RESPMEM_MUST_FREE);
	enum MHD_Result ret;

	json_decref(body);
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
	MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
	ret = MHD_queue_response(conn, MHD_HTTP_METHOD_NOT_ALLOWED, resp);
	MHD_destroy_response(resp);
	return ret;
}

static enum MHD_Result
on_request(void *data, struct MHD_Connection *conn, const char *url, const char *method,
           const char *version, const char *upload, size_t *upload_size, void **request)
{
	struct nw_daemon *d = data;

	/* Answer on the first call; a body sent with these routes is ignored. */
	if (strcmp(url, "/narwhal/health") == 0) {
		if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
			return respond_method_not_allowed(conn, "GET, HEAD");
		return route_health(d, conn);
	}
	g_autofree char *msg = g_strdup_printf("no route for %s %s", method, url);
	return nw_http_respond_error(conn, MHD_HTTP_NOT_FOUND, "invalid_request_error",
	                             "not_found", NULL, msg);
}

static void
on_request_completed(void *data, struct MHD_Connection *conn, void **request,
                     enum MHD_RequestTerminationCode why)
{
}

/* --- lifecycle ------------------------------------------------------- */

static gboolean
on_stop_signal(gpointer data)
{
	struct nw_daemon *d = data;

	nw_log(NARWHAL_LOG_INFO, "stopping", "reason", "signal", NULL);
	g_main_loop_quit(d->loop);
	return G_SOURCE_CONTINUE;
}

struct nw_daemon *
nw_daemon_new(struct nw_config *cfg, GError **error)
{
	struct nw_daemon *d = g_new0(struct nw_daemon, 1);
	struct nw_http_server_options http = { 0 };
	struct nw_upstream_options pool = { 0 };
	char port[8];

	d->cfg = cfg;
	d->started_us = g_get_monotonic_time();
	d->loop = g_main_loop_new(NULL, FALSE);
	d->fleet = nw_fleet_new(cfg, nw_clock_monotonic_ns(NULL));
	d->plugin_metrics = nw_plugin_metrics_new();

	if (!load_plugin(cfg, &plugin_slots[0], d->fleet, d->plugin_metrics, &d->admission, error) ||
	    !load_plugin(cfg, &plugin_slots[1], d->fleet, d->plugin_metrics, &d->controller, error))
		goto fail;

	pool.name = "serving";
	pool.max_connections = cfg->serving.max_connections;
	d->serving_pool = nw_upstream_new(&pool);
	pool.name = "control";
	pool.max_connections = nw_config_control_connections(cfg);
	d->control_pool = nw_upstream_new(&pool);

	http.host = cfg->server.host;
	http.port = (uint16_t)cfg->server.port;
	http.connection_timeout_s = (unsigned)MAX(1.0, cfg->server.client_timeout_s);
	/* Completion requests, queued ones and a margin for control routes. */
	http.connection_limit = cfg->serving.max_connections + cfg->serving.queue_capacity + 64;
	d->http = nw_http_server_start(&http, on_request, on_request_completed, d, error);
	if (d->http == NULL)
		goto fail;

	/* A client that vanishes must not kill the daemon with SIGPIPE. */
	signal(SIGPIPE, SIG_IGN);
	d->sigterm = g_unix_signal_add(SIGTERM, on_stop_signal, d);
	d->sigint = g_unix_signal_add(SIGINT, on_stop_signal, d);

	g_snprintf(port, sizeof port, "%u", nw_http_server_port(d->http));
	nw_log(NARWHAL_LOG_INFO, "listening", "host", cfg->server.host, "port", port,
	       "admission", d->admission.plugin->desc->name,
	       "controller", d->controller.plugin->desc->name, NULL);
	return d;

fail:
	nw_daemon_free(d);
	return NULL;
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
	nw_http_server_stop(d->http);
	nw_upstream_free(d->serving_pool);
	nw_upstream_free(d->control_pool);
	loaded_plugin_clear(&d->admission);
	loaded_plugin_clear(&d->controller);
	nw_plugin_metrics_free(d->plugin_metrics);
	nw_fleet_free(d->fleet);
	g_main_loop_unref(d->loop);
	nw_config_free(d->cfg);
	g_free(d);
}
