#include "build-config.h"

#include "daemon.h"

#include <signal.h>
#include <string.h>

#include <glib-unix.h>

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
	struct loaded_plugin placement;
	struct loaded_plugin controller;
	struct nw_fleet_dialects *dialects; /* the engines' dialects */
	char **api_keys;
	struct nw_upstream *serving_pool;
	struct nw_upstream *control_pool;
	struct nw_http_server *http;
	struct nw_serve *serve;
	struct nw_monitor *monitor;
	guint sigterm, sigint, sighup;
	guint stop_poll;
	int64_t stop_started_us;
	int exit_status;
};

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

/* --- routes ---------------------------------------------------------- */

/* A plugin's name and version; not its file, since this route is on the
 * clients' listener. */
static json_t *
plugin_json(const struct nw_plugin *p)
{
	return json_pack("{s:s, s:s}", "name", p->desc->name, "version", p->desc->version);
}

/* GET /narwhal/health (docs/api.md, docs/recovery.md): 200 while Narwhal
 * can serve ("ok" or "degraded"), 503 when it cannot ("unavailable"), so a
 * load balancer in front can route around it. */
static enum MHD_Result
route_health(struct nw_daemon *d, struct MHD_Connection *conn)
{
	json_t *dialects = json_object();
	json_t *body = nw_monitor_to_json(d->monitor, false);
	struct nw_http_server_counters fc;
	bool serving = strcmp(json_string_value(json_object_get(body, "status")),
	                      "unavailable") != 0;

	for (guint k = 0; k < d->dialects->loaded->len; k++) {
		const struct nw_loaded_dialect *ld = g_ptr_array_index(d->dialects->loaded, k);

		json_object_set_new(dialects, ld->plugin->desc->name, plugin_json(ld->plugin));
	}
	nw_http_server_counters(d->http, &fc);
	json_object_update_new(body, json_pack(
		"{s:s, s:f, s:s?, s:{s:o, s:o, s:o, s:o}, s:o, s:{s:I, s:I, s:I, s:I, s:I}}",
		"version", PACKAGE_VERSION,
		"uptime_s", (g_get_monotonic_time() - d->started_us) / 1e6,
		"model", d->fleet->model,
		"plugins",
		"admission", plugin_json(d->admission.plugin),
		"placement", plugin_json(d->placement.plugin),
		"controller", plugin_json(d->controller.plugin),
		"dialects", dialects,
		"counters", nw_serve_counters_to_json(d->serve),
		"front_door",
		"framing_refusals", (json_int_t)fc.framing_refusals,
		"head_timeouts", (json_int_t)fc.head_timeouts,
		"body_timeouts", (json_int_t)fc.body_timeouts,
		"pending_evictions", (json_int_t)fc.pending_evictions,
		"lingering_closes", (json_int_t)fc.lingering_closes));
	enum MHD_Result ret = nw_http_respond_json(conn, serving ? MHD_HTTP_OK
	                                                         : MHD_HTTP_SERVICE_UNAVAILABLE, body);

	json_decref(body);
	return ret;
}

/* GET /metrics (docs/metrics.md): the Prometheus text format. */
static enum MHD_Result
route_metrics(struct nw_daemon *d, struct MHD_Connection *conn)
{
	const struct nw_exposition_sources src = {
		.serve = d->serve, .monitor = d->monitor, .fleet = d->fleet,
		.plugin_metrics = d->plugin_metrics,
	};
	GString *text = nw_exposition_render(&src);
	size_t len = text->len;
	struct MHD_Response *resp = MHD_create_response_from_buffer(len, g_string_free(text, FALSE),
	                                                            MHD_RESPMEM_MUST_FREE);
	enum MHD_Result ret;

	if (resp == NULL)
		return MHD_NO;
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
	                        "text/plain; version=0.0.4; charset=utf-8");
	ret = MHD_queue_response(conn, MHD_HTTP_OK, resp);
	MHD_destroy_response(resp);
	return ret;
}

static enum MHD_Result
on_request(void *data, struct MHD_Connection *conn, const char *url, const char *method,
           const char *version, const char *upload, size_t *upload_size, void **request)
{
	struct nw_daemon *d = data;

	/* Answer on the first call; a body sent with these routes is ignored. */
	if (*request == NULL && strcmp(url, "/narwhal/health") == 0) {
		if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
			return nw_serve_method_not_allowed(d->serve, conn, url, method, "GET, HEAD");
		return route_health(d, conn);
	}
	if (*request == NULL && strcmp(url, "/metrics") == 0) {
		if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
			return nw_serve_method_not_allowed(d->serve, conn, url, method, "GET, HEAD");
		return route_metrics(d, conn);
	}
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
