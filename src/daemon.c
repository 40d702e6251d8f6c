#include "build-config.h"

#include "daemon.h"
#include "daemon-internal.h"

#include <signal.h>
#include <glib-unix.h>

#include "admin/admin.h"
#include "core/log.h"
#include "daemon-generation.h"
#include "net/http-server.h"
#include "net/upstream.h"
#include "serve/serve.h"

/* Once the drain has ended the rest, how long their answers (503s and
 * terminal error events) may take to leave. */
#define STOP_GRACE_US (2 * G_USEC_PER_SEC)
/* How often overlapping generations are kept consistent, and the stop
 * checks whether everything has left (ms). */
#define OVERLAP_TICK_MS 20
#define STOP_POLL_MS 10

/* A request's later calls and its completion go to the serve that took
 * it: *request is the serve's own request, which knows its serve (a
 * reload may have made another serve current since); the serve passed
 * along is only used for a request's first call. */
static enum MHD_Result
on_request(void *data, struct MHD_Connection *conn, const char *url, const char *method,
           const char *version, const char *upload, size_t *upload_size, void **request)
{
	struct nw_daemon *d = data;
	struct nw_serve *serve = d->gen->serve;

	/* Answer on the first call; a body sent with these routes is ignored. */
	if (*request == NULL && nw_daemon_routes_own(url))
		return nw_daemon_routes_handle(d, conn, url, method);
	if (*request != NULL || nw_serve_owns(url))
		return nw_serve_handle(serve, conn, url, method, upload, upload_size, request);
	return nw_serve_no_route(serve, conn, url, method);
}

static void
on_request_completed(void *data, struct MHD_Connection *conn, void **request,
                     enum MHD_RequestTerminationCode why)
{
	struct nw_daemon *d = data;

	nw_serve_completed(d->gen->serve, request, why);
}

/* --- generations ------------------------------------------------------- */

static gboolean
on_overlap_tick(gpointer data)
{
	struct nw_daemon *d = data;

	nw_generation_sync(d->gen);
	if (nw_generation_reap(d->gen) > 0)
		return G_SOURCE_CONTINUE;
	d->overlap_tick = 0;
	return G_SOURCE_REMOVE;
}

void
nw_daemon_generation_switch(struct nw_daemon *d, struct nw_generation *g)
{
	struct nw_generation *old = d->gen;
	struct nw_demand_windows w;

	/* The ledger goes on under the new windows (spec 7.7), the controller
	 * host under the new rules (docs/controller.md). */
	nw_demand_windows_from_config(g->cfg, &w);
	nw_demand_configure(d->demand, &w, g_get_monotonic_time() * 1000);
	nw_controller_configure(d->controller, g->cfg);
	nw_daemon_controller_attach(d, g);
	nw_generation_supersede(old);
	nw_generation_start(g, d->http);
	d->gen = g;
	if (d->state != NW_DAEMON_SERVING)
		nw_serve_set_draining(g->serve);
	nw_http_server_set_slow_timeouts(d->http, g->cfg->server.head_timeout_s,
	                                 g->cfg->server.body_timeout_s);
	nw_generation_sync(g);
	if (d->overlap_tick == 0)
		d->overlap_tick = g_timeout_add(OVERLAP_TICK_MS, on_overlap_tick, d);
}

/* --- stopping ---------------------------------------------------------- */

static unsigned
retained(const struct nw_daemon *d)
{
	return nw_generation_retained(d->gen);
}

static void
log_count(const char *event, narwhal_log_level level, const char *k1, unsigned v1, const char *k2,
          double v2)
{
	char a[16], b[32];

	g_snprintf(a, sizeof a, "%u", v1);
	g_snprintf(b, sizeof b, "%.3f", v2);
	nw_log(level, event, k1, a, k2, b, NULL);
}

static double
since_s(int64_t us)
{
	return (double)(g_get_monotonic_time() - us) / G_USEC_PER_SEC;
}

/* End what is left: every request in flight gets its answer (503, or a
 * terminal error event) and its engine calls are cancelled. */
static void
end_now(struct nw_daemon *d, const char *why)
{
	char n[16];

	d->state = NW_DAEMON_ENDING;
	d->end_started_us = g_get_monotonic_time();
	d->ended = retained(d);
	g_snprintf(n, sizeof n, "%u", d->ended);
	nw_log(NARWHAL_LOG_WARNING, "drain_cut", "reason", why, "in_flight", n, NULL);
	for (struct nw_generation *g = d->gen; g != NULL; g = g->older)
		nw_serve_shutdown(g->serve);
}

/* Quit once everything has left: while draining, or after the end (for
 * at most STOP_GRACE_US: the answers are queued by then). */
static gboolean
on_stop_poll(gpointer data)
{
	struct nw_daemon *d = data;
	unsigned left = retained(d);

	if (d->state == NW_DAEMON_DRAINING && left > 0) {
		if (since_s(d->drain_started_us) < d->drain_timeout_s)
			return G_SOURCE_CONTINUE;
		end_now(d, "drain_timeout");
		left = retained(d);
	}
	if (left > 0 && g_get_monotonic_time() - d->end_started_us < STOP_GRACE_US)
		return G_SOURCE_CONTINUE;
	if (d->state == NW_DAEMON_DRAINING)
		log_count("drained", NARWHAL_LOG_INFO, "finished", d->drain_in_flight, "duration_s",
		          since_s(d->drain_started_us));
	d->stop_poll = 0;
	g_main_loop_quit(d->loop);
	return G_SOURCE_REMOVE;
}

/* SIGTERM and SIGINT (docs/deployment.md, "Stopping: the drain"): the
 * first starts the drain, the next ends what is left at once. */
static gboolean
on_stop_signal(gpointer data)
{
	struct nw_daemon *d = data;
	char n[16], t[32];

	if (d->state == NW_DAEMON_DRAINING) {
		end_now(d, "second_signal");
		return G_SOURCE_CONTINUE;
	}
	if (d->state != NW_DAEMON_SERVING)
		return G_SOURCE_CONTINUE;
	d->state = NW_DAEMON_DRAINING;
	d->drain_started_us = g_get_monotonic_time();
	d->drain_timeout_s = d->gen->cfg->server.drain_timeout_s;
	d->drain_in_flight = retained(d);
	/* New connections are refused; new requests on open ones get 503. */
	nw_http_server_quiesce(d->http);
	for (struct nw_generation *g = d->gen; g != NULL; g = g->older)
		nw_serve_set_draining(g->serve);
	g_snprintf(n, sizeof n, "%u", d->drain_in_flight);
	g_snprintf(t, sizeof t, "%g", d->drain_timeout_s);
	nw_log(NARWHAL_LOG_INFO, "draining", "in_flight", n, "drain_timeout_s", t, NULL);
	if (d->drain_timeout_s <= 0)
		end_now(d, "drain_timeout");
	d->stop_poll = g_timeout_add(STOP_POLL_MS, on_stop_poll, d);
	return G_SOURCE_CONTINUE;
}

/* SIGHUP: reload the configuration file (docs/deployment.md); the outcome
 * is logged either way. */
static gboolean
on_hangup_signal(gpointer data)
{
	g_autoptr(GError) error = NULL;

	(void)nw_daemon_reload(data, NULL, &error);
	return G_SOURCE_CONTINUE;
}

struct nw_generation_shared
nw_daemon_shared(struct nw_daemon *d)
{
	return (struct nw_generation_shared){
		.plugin_metrics = d->plugin_metrics, .serve_metrics = &d->serve_metrics,
		.demand = d->demand,
		.ttft_breach = nw_daemon_ttft_breach, .ttft_breach_data = d,
		.serving_pool = d->serving_pool, .control_pool = d->control_pool,
		.control_connections = d->control_connections,
	};
}

struct nw_daemon *
nw_daemon_new(struct nw_config *cfg, GError **error)
{
	struct nw_daemon *d = g_new0(struct nw_daemon, 1);
	struct nw_http_server_options http = { 0 };
	struct nw_upstream_options pool = { 0 };
	struct nw_generation_shared shared;
	char port[8];

	d->config_file = g_strdup(cfg->source);
	d->started_us = g_get_monotonic_time();
	d->loop = g_main_loop_new(NULL, FALSE);
	d->plugin_metrics = nw_plugin_metrics_new();
	{
		struct nw_demand_windows w;

		nw_demand_windows_from_config(cfg, &w);
		d->demand = nw_demand_new(&w, g_get_monotonic_time() * 1000);
	}
	d->controller = nw_controller_new(cfg);

	pool.tls_ca_file = cfg->engine.tls_ca_file;
	pool.tls_no_verify = !cfg->engine.tls_verify;
	pool.max_connections = cfg->serving.max_connections;
	d->serving_pool = nw_upstream_new(&pool);
	d->control_connections = nw_config_control_connections(cfg);
	pool.max_connections = d->control_connections;
	d->control_pool = nw_upstream_new(&pool);

	shared = nw_daemon_shared(d);
	d->gen = nw_generation_new(cfg, &shared, error);
	if (d->gen == NULL)
		goto fail;
	nw_daemon_controller_attach(d, d->gen);

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
	nw_generation_start(d->gen, d->http);
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
	       "admission", d->gen->admission.plugin->desc->name,
	       "placement", d->gen->placement.plugin->desc->name,
	       "controller", d->gen->controller.plugin->desc->name,
	       "api_keys", d->gen->api_keys ? "required" : "off", NULL);
	d->listening = true;
	return d;

fail:
	/* cfg went with the generation, built or not. */
	nw_daemon_free(d);
	return NULL;
}

struct nw_serve *
nw_daemon_serve(struct nw_daemon *d)
{
	return d->gen->serve;
}

struct nw_monitor *
nw_daemon_monitor(struct nw_daemon *d)
{
	return d->gen->monitor;
}

struct nw_fleet *
nw_daemon_fleet(struct nw_daemon *d)
{
	return d->gen->fleet;
}

const struct nw_config *
nw_daemon_config(struct nw_daemon *d)
{
	return d->gen->cfg;
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
	bool ran;
	unsigned reloads;

	if (d == NULL)
		return;
	/* A start that failed logs startup_failed, and no "stopped" before it. */
	ran = d->listening;
	reloads = d->gen != NULL ? d->gen->number : 0; /* one generation a reload */
	if (d->sigterm)
		g_source_remove(d->sigterm);
	if (d->sigint)
		g_source_remove(d->sigint);
	if (d->sighup)
		g_source_remove(d->sighup);
	if (d->stop_poll)
		g_source_remove(d->stop_poll);
	if (d->overlap_tick)
		g_source_remove(d->overlap_tick);
	if (d->urgent_wake)
		g_source_remove(d->urgent_wake);
	/* Requests still held are answered and cancelled before MHD lets
	 * them go; they need their serve, which needs the pools. */
	for (struct nw_generation *g = d->gen; g != NULL; g = g->older) {
		nw_monitor_stop(g->monitor);
		nw_serve_shutdown(g->serve);
	}
	nw_admin_free(d->admin);
	nw_http_server_stop(d->http);
	while (d->gen != NULL) {
		struct nw_generation *g = d->gen;

		d->gen = g->older;
		nw_generation_free(g);
	}
	nw_upstream_free(d->serving_pool);
	nw_upstream_free(d->control_pool);
	nw_plugin_metrics_free(d->plugin_metrics);
	/* After the monitors: their flip histories hold its reasons. */
	nw_controller_free(d->controller);
	nw_demand_free(d->demand);
	g_main_loop_unref(d->loop);
	if (ran) {
		char n[16], e[16], r[16];

		/* Of the requests held at the signal: finished, and ended. */
		g_snprintf(n, sizeof n, "%u", d->drain_in_flight - MIN(d->ended, d->drain_in_flight));
		g_snprintf(e, sizeof e, "%u", d->ended);
		g_snprintf(r, sizeof r, "%u", reloads);
		nw_log(NARWHAL_LOG_INFO, "stopped", "finished", n, "ended", e, "reloads", r, NULL);
	}
	g_free(d->config_file);
	g_free(d);
}
