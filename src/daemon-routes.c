#include "build-config.h"

#include "daemon-internal.h"

#include <math.h>
#include <string.h>

#include "admin/admin.h"
#include "obs/exposition.h"
#include "obs/state.h"

/* A plugin's name and version; its file only for operators (the admin
 * listener), never on the clients' listener. */
static json_t *
plugin_json(const struct nw_plugin *p, bool operator)
{
	json_t *o = json_pack("{s:s, s:s}", "name", p->desc->name, "version", p->desc->version);

	if (operator && p->path != NULL)
		json_object_set_new(o, "path", json_string(p->path));
	return o;
}

struct prefixed {
	const char *prefix;
	size_t len;
	json_t *out;
};

static void
add_prefixed(const char *name, double value, void *data)
{
	struct prefixed *p = data;

	if (strncmp(name, p->prefix, p->len) == 0 && isfinite(value))
		json_object_set_new(p->out, name + p->len, json_real(value));
}

/* A policy plugin as plugin_json says, with the metrics it keeps through
 * the host (their names without narwhal_plugin_<kind>_<name>_): what it
 * says of itself, e.g. the predictive admission's "unpriced" gauge
 * (docs/admission.md). */
static json_t *
policy_json(const struct nw_daemon *d, const struct loaded_plugin *lp, bool operator)
{
	const char *prefix = nw_host_metric_prefix(lp->host);
	struct prefixed p = { prefix, strlen(prefix), json_object() };
	json_t *o = plugin_json(lp->plugin, operator);

	nw_plugin_metrics_foreach(d->plugin_metrics, add_prefixed, &p);
	json_object_set_new(o, "metrics", p.out);
	return o;
}

/* The plugins loaded by the configuration in force: {"admission",
 * "placement", "controller", "dialects": {name: ...}} (transfer full). */
static json_t *
plugins_json(struct nw_daemon *d, bool operator)
{
	json_t *dialects = json_object();

	for (guint k = 0; k < d->gen->dialects->loaded->len; k++) {
		const struct nw_loaded_dialect *ld = g_ptr_array_index(d->gen->dialects->loaded, k);

		json_object_set_new(dialects, ld->plugin->desc->name, plugin_json(ld->plugin, operator));
	}
	return json_pack("{s:o, s:o, s:o, s:o}",
	                 "admission", policy_json(d, &d->gen->admission, operator),
	                 "placement", policy_json(d, &d->gen->placement, operator),
	                 "controller", policy_json(d, &d->gen->controller, operator),
	                 "dialects", dialects);
}

json_t *
nw_daemon_state_json(struct nw_daemon *d, bool operator)
{
	json_t *plugins = plugins_json(d, operator);
	json_t *history = nw_admin_history_json(d->admin, operator);
	const struct nw_state_sources src = {
		.serve = nw_daemon_serve(d), .monitor = nw_daemon_monitor(d),
		.fleet = nw_daemon_fleet(d), .cfg = nw_daemon_config(d), .controller = d->controller,
		.plugins = plugins, .operator_history = history,
		.uptime_s = (g_get_monotonic_time() - d->started_us) / 1e6, .operator = operator,
	};
	json_t *doc = nw_state_to_json(&src);

	json_decref(plugins);
	json_decref(history);
	return doc;
}

/* GET /narwhal/health (docs/api.md, docs/recovery.md): 200 while Narwhal
 * can serve ("ok" or "degraded"), 503 when it cannot ("unavailable"), so a
 * load balancer in front can route around it. */
static enum MHD_Result
route_health(struct nw_daemon *d, struct MHD_Connection *conn)
{
	json_t *body = nw_monitor_to_json(nw_daemon_monitor(d), false);
	struct nw_http_server_counters fc;
	bool serving = strcmp(json_string_value(json_object_get(body, "status")),
	                      "unavailable") != 0;

	nw_http_server_counters(d->http, &fc);
	json_object_update_new(body, json_pack(
		"{s:s, s:f, s:s?, s:o, s:o, s:{s:I, s:I, s:I, s:I, s:I}}",
		"version", PACKAGE_VERSION,
		"uptime_s", (g_get_monotonic_time() - d->started_us) / 1e6,
		"model", nw_daemon_fleet(d)->model,
		"plugins", plugins_json(d, false),
		"counters", nw_serve_counters_to_json(nw_daemon_serve(d)),
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

/* GET /narwhal/health/ready (docs/api.md, docs/deployment.md): whether a
 * load balancer should send new requests here. 503 from the first stop
 * signal on (the drain), and while Narwhal cannot serve. */
static enum MHD_Result
route_ready(struct nw_daemon *d, struct MHD_Connection *conn)
{
	const char *reason = d->state == NW_DAEMON_DRAINING ? "draining"
	                     : d->state == NW_DAEMON_ENDING ? "stopping" : NULL;
	json_t *body;
	enum MHD_Result ret;

	if (reason == NULL) {
		struct nw_monitor_summary health;

		nw_monitor_summary(nw_daemon_monitor(d), &health);
		if (strcmp(health.status, "unavailable") == 0)
			reason = "unavailable";
	}
	body = reason ? json_pack("{s:b, s:s}", "ready", 0, "reason", reason)
	              : json_pack("{s:b}", "ready", 1);
	ret = nw_http_respond_json(conn, reason ? MHD_HTTP_SERVICE_UNAVAILABLE : MHD_HTTP_OK, body);
	json_decref(body);
	return ret;
}

/* GET /narwhal/state (docs/state.md): everything the router knows, without
 * engine addresses, plugin files or engine errors. */
static enum MHD_Result
route_state(struct nw_daemon *d, struct MHD_Connection *conn)
{
	json_t *body = nw_daemon_state_json(d, false);
	enum MHD_Result ret = nw_http_respond_json(conn, MHD_HTTP_OK, body);

	json_decref(body);
	return ret;
}

static void
add_admin_count(const char *result, uint64_t n, void *data)
{
	struct nw_exposition_count c = { result, n };

	g_array_append_val((GArray *)data, c);
}

/* The daemon's figures for the exposition (docs/metrics.md, "Daemon");
 * admin holds the admin API's counts until the scrape is rendered. */
static void
daemon_figures(struct nw_daemon *d, GArray *admin, struct nw_exposition_daemon *out)
{
	*out = (struct nw_exposition_daemon){
		.draining = d->state != NW_DAEMON_SERVING,
		.generation = d->gen->number,
		.superseded_requests = d->gen->older ? nw_generation_retained(d->gen->older) : 0,
		.reloads_applied = d->gen->number, .reloads_failed = d->reloads_failed,
		.reloads_refused = d->reloads_refused,
		.loaded_unix_s = (double)d->gen->cfg->loaded_unix_us / 1e6,
	};
	for (const struct nw_generation *g = d->gen->older; g != NULL; g = g->older)
		out->superseded++;
	if (d->admin == NULL)
		return;
	nw_admin_calls_foreach(d->admin, add_admin_count, admin);
	out->admin_calls = (const struct nw_exposition_count *)(void *)admin->data;
	out->n_admin_calls = admin->len;
}

/* GET /metrics (docs/metrics.md): the Prometheus text format. */
static enum MHD_Result
route_metrics(struct nw_daemon *d, struct MHD_Connection *conn)
{
	GArray *admin = g_array_new(FALSE, FALSE, sizeof(struct nw_exposition_count));
	struct nw_exposition_daemon daemon;
	const struct nw_exposition_sources src = {
		.serve = nw_daemon_serve(d), .monitor = nw_daemon_monitor(d), .fleet = nw_daemon_fleet(d),
		.plugin_metrics = d->plugin_metrics, .controller = d->controller, .daemon = &daemon,
	};
	GString *text;
	size_t len;
	struct MHD_Response *resp;
	enum MHD_Result ret;

	daemon_figures(d, admin, &daemon);
	text = nw_exposition_render(&src);
	g_array_free(admin, TRUE);
	len = text->len;
	resp = MHD_create_response_from_buffer(len, g_string_free(text, FALSE),
	                                       MHD_RESPMEM_MUST_FREE);
	if (resp == NULL)
		return MHD_NO;
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
	                        "text/plain; version=0.0.4; charset=utf-8");
	ret = MHD_queue_response(conn, MHD_HTTP_OK, resp);
	MHD_destroy_response(resp);
	return ret;
}

bool
nw_daemon_routes_own(const char *url)
{
	return strcmp(url, "/narwhal/health") == 0 || strcmp(url, "/narwhal/health/ready") == 0 ||
	       strcmp(url, "/narwhal/state") == 0 ||
	       strcmp(url, "/metrics") == 0;
}

enum MHD_Result
nw_daemon_routes_handle(struct nw_daemon *d, struct MHD_Connection *conn, const char *url,
                        const char *method)
{
	if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
		return nw_serve_method_not_allowed(nw_daemon_serve(d), conn, url, method, "GET, HEAD");
	if (strcmp(url, "/metrics") == 0)
		return route_metrics(d, conn);
	if (strcmp(url, "/narwhal/health/ready") == 0)
		return route_ready(d, conn);
	if (strcmp(url, "/narwhal/state") == 0)
		return route_state(d, conn);
	return route_health(d, conn);
}
