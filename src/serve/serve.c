/*
 * The serving context and the client routes: what is refused before any
 * body is read (method, API key, the connection ceiling, a declared body
 * above serving.max_request_bytes), GET /v1/models, and the hand-off of
 * completion requests to their state machine (request.c).
 */
#include "build-config.h"

#include "serve/serve.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <gio/gio.h>

#include "core/access-log.h"
#include "core/log.h"
#include "serve/request.h"
#include "serve/serve-internal.h"

#define PATH_COMPLETIONS "/v1/completions"
#define PATH_CHAT "/v1/chat/completions"
#define PATH_MODELS "/v1/models"

/* The demand ledger keeps whole request ids. */
G_STATIC_ASSERT(NW_DEMAND_ID_MAX >= NW_REQUEST_ID_MAX);

struct nw_serve *
nw_serve_new(const struct nw_serve_options *o, GError **error)
{
	struct nw_serve *s = g_new0(struct nw_serve, 1);
	const struct nw_config *cfg = o->cfg;
	uint32_t n = o->fleet->view.n_engines;

	s->cfg = cfg;
	s->fleet = o->fleet;
	s->admission = o->admission;
	s->placement = o->placement;
	s->serving_pool = o->serving_pool;
	if (o->metrics == NULL)
		s->own_metrics = g_new0(struct nw_serve_metrics, 1);
	s->metrics = o->metrics ? o->metrics : s->own_metrics;
	if (o->demand == NULL) {
		struct nw_demand_windows w;

		nw_demand_windows_from_config(cfg, &w);
		s->own_demand = nw_demand_new(&w, g_get_monotonic_time() * 1000);
	}
	s->demand = o->demand ? o->demand : s->own_demand;
	s->ttft_breach = o->ttft_breach;
	s->ttft_breach_data = o->ttft_breach_data;
	s->api_keys = o->api_keys ? g_strdupv(o->api_keys) : NULL;
	s->dialects = o->dialects;
	s->router_keys = nw_dialects_router_keys(s->dialects, n);
	s->timers = nw_timers_new(true);
	s->rng = g_rand_new();
	nw_retry_budget_init(&s->budget, cfg->serving.retry_budget, cfg->serving.retry_replenish);
	s->ceiling = cfg->serving.max_connections + cfg->serving.queue_capacity;
	nw_resource_init(&s->admitted, nw_config_admission_limit(cfg), cfg->serving.queue_capacity);
	nw_resource_init(&s->pool, cfg->serving.max_connections, UINT32_MAX);
	nw_wait_line_init(&s->prefill_line);
	nw_wait_line_init(&s->decode_line);
	s->eligible = g_new0(uint32_t, MAX(n, 1));
	g_queue_init(&s->requests);
	s->created = g_get_real_time() / G_USEC_PER_SEC;
	return s;
}

void
nw_serve_set_http(struct nw_serve *s, struct nw_http_server *http)
{
	s->http = http;
}

void
nw_serve_free(struct nw_serve *s)
{
	if (s == NULL)
		return;
	nw_timers_free(s->timers);
	g_rand_free(s->rng);
	g_free(s->eligible);
	g_free(s->router_keys);
	g_strfreev(s->api_keys);
	g_free(s->own_metrics);
	nw_demand_free(s->own_demand);
	g_free(s);
}

const struct nw_dialect *
nw_serve_dialect(const struct nw_serve *s, uint32_t engine)
{
	return &s->dialects[engine];
}

void
nw_serve_plugin_failed(struct nw_serve *s, const char *kind, const char *plugin,
                       const char *slot, int rc, const char *engine, const char *request_id)
{
	char code[16];
	nw_plugin_failure_kind k = NW_PLUGIN_FAILURE_OTHER;

	for (uint32_t i = 0; i < NW_PLUGIN_FAILURE_OTHER; i++) {
		if (strcmp(kind, nw_plugin_failure_kinds[i]) == 0)
			k = (nw_plugin_failure_kind)i;
	}
	g_snprintf(code, sizeof code, "%d", rc);
	s->metrics->counters.plugin_call_errors++;
	s->metrics->plugin_failures[k]++;
	nw_log(NARWHAL_LOG_WARNING, "plugin_call_failed", "plugin", plugin, "kind", kind,
	       "slot", slot, "rc", code, "request_id", request_id ? request_id : "-",
	       /* a NULL key ends the list: no engine field */
	       engine ? "engine" : NULL, engine, NULL);
}

unsigned
nw_serve_retained(const struct nw_serve *s)
{
	return s->retained;
}

void
nw_serve_set_draining(struct nw_serve *s)
{
	if (s->stop == NW_SERVE_RUNNING)
		s->stop = NW_SERVE_DRAINING;
}

void
nw_serve_set_older(struct nw_serve *s, struct nw_serve *older)
{
	s->older = older;
}

unsigned
nw_serve_busy(const struct nw_serve *s)
{
	return s->allocated;
}

void
nw_serve_room_changed(struct nw_serve *s)
{
	nw_wait_line_kick(&s->prefill_line);
	nw_wait_line_kick(&s->decode_line);
}

json_t *
nw_serve_counters_to_json(const struct nw_serve *s)
{
	json_t *o = nw_serve_counters_json(&s->metrics->counters);
	json_int_t undecided = 0, retained = 0, admitted = 0, queued = 0;

	/* The gauges count every generation's requests (a reload's overlap). */
	for (const struct nw_serve *g = s; g != NULL; g = g->older) {
		for (GList *l = g->requests.head; l != NULL; l = l->next)
			undecided += !nw_request_decided(l->data);
		retained += g->retained;
		admitted += g->admitted.in_use;
		queued += nw_resource_waiting(&g->admitted);
	}
	json_object_set_new(o, "plugin_call_errors",
	                    json_integer((json_int_t)(s->metrics->counters.plugin_call_errors +
	                                              s->fleet->monitor_plugin_errors)));
	json_object_set_new(o, "retained", json_integer(retained));
	json_object_set_new(o, "in_progress", json_integer(undecided));
	json_object_set_new(o, "admitted_now", json_integer(admitted));
	json_object_set_new(o, "queued_now", json_integer(queued));
	json_object_set_new(o, "retry_credits", json_real(nw_retry_budget_credits(&s->budget)));
	return o;
}

void
nw_serve_gauges(const struct nw_serve *s, struct nw_serve_gauges *g)
{
	/* Requests wait on every generation's lines during a reload's overlap. */
	g->prefill_waiting = g->decode_waiting = 0;
	for (const struct nw_serve *o = s; o != NULL; o = o->older) {
		g->prefill_waiting += nw_wait_line_length(&o->prefill_line);
		g->decode_waiting += nw_wait_line_length(&o->decode_line);
	}
	g->prefill_slots = s->cfg->serving.prefill_concurrency;
	g->decode_slots = s->cfg->serving.decode_concurrency;
	g->retry_budget = s->cfg->serving.retry_budget;
}

const struct nw_serve_metrics *
nw_serve_metrics(const struct nw_serve *s)
{
	return s->metrics;
}

const struct nw_demand *
nw_serve_demand(const struct nw_serve *s)
{
	return s->demand;
}

/* --- API keys -------------------------------------------------------- */

char **
nw_serve_read_api_keys(const char *env_name, GError **error)
{
	const char *value = g_getenv(env_name);
	GPtrArray *keys;
	g_auto(GStrv) parts = NULL;

	if (value == NULL) {
		g_set_error(error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND,
		            "server.api_keys_env: the environment variable %s is not set: export "
		            "it with a comma-separated list of client keys", env_name);
		return NULL;
	}
	keys = g_ptr_array_new();
	parts = g_strsplit(value, ",", -1);
	for (char **p = parts; *p; p++) {
		char *k = g_strstrip(g_strdup(*p));

		if (*k == '\0')
			g_free(k);
		else
			g_ptr_array_add(keys, k);
	}
	if (keys->len == 0) {
		g_ptr_array_free(keys, TRUE);
		g_set_error(error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
		            "server.api_keys_env: the environment variable %s holds no key: give a "
		            "comma-separated list of client keys", env_name);
		return NULL;
	}
	g_ptr_array_add(keys, NULL);
	return (char **)g_ptr_array_free(keys, FALSE);
}

/* Equal strings, in time that depends only on the lengths. */
static bool
same_secret(const char *a, size_t alen, const char *b)
{
	size_t blen = strlen(b);
	unsigned char diff = alen != blen;

	for (size_t i = 0; i < blen; i++)
		diff |= (unsigned char)(b[i] ^ (i < alen ? a[i] : 0));
	return diff == 0;
}

bool
nw_serve_key_ok(char *const *keys, const char *authorization)
{
	const char *given;
	bool ok = false;

	if (authorization == NULL || g_ascii_strncasecmp(authorization, "Bearer ", 7) != 0)
		return false;
	given = authorization + 7;
	while (*given == ' ')
		given++;
	/* Every key is compared, so the time says nothing of which matched. */
	for (char *const *k = keys; *k; k++)
		ok |= same_secret(given, strlen(given), *k);
	return ok;
}

/* --- early answers ---------------------------------------------------- */

static enum MHD_Result
respond(struct MHD_Connection *conn, const struct nw_client_error *err, const char *request_id,
        const char *allow, const char *retry_after)
{
	json_t *body = nw_http_error_body(err->type, err->code, err->param[0] ? err->param : NULL,
	                                  err->message);
	const char *const headers[] = {
		"X-Request-Id", request_id,
		MHD_HTTP_HEADER_ALLOW, allow,
		MHD_HTTP_HEADER_RETRY_AFTER, retry_after,
		MHD_HTTP_HEADER_WWW_AUTHENTICATE, err->status == 401 ? "Bearer" : NULL,
		/* Stopping: the client takes its next request elsewhere. */
		MHD_HTTP_HEADER_CONNECTION,
		g_strcmp0(err->code, "shutting_down") == 0 ? "close" : NULL,
		NULL,
	};
	enum MHD_Result ret = nw_http_respond_json_with(conn, err->status, body, headers);

	json_decref(body);
	return ret;
}

static nw_metric_route
route_of(const char *url)
{
	if (strcmp(url, PATH_COMPLETIONS) == 0)
		return NW_METRIC_ROUTE_COMPLETIONS;
	if (strcmp(url, PATH_CHAT) == 0)
		return NW_METRIC_ROUTE_CHAT;
	if (strcmp(url, PATH_MODELS) == 0)
		return NW_METRIC_ROUTE_MODELS;
	return NW_METRIC_ROUTE_OTHER;
}

/* A completion request answered before its body was read: its outcome
 * and access-log line (docs/metrics.md), as a request's end does. */
static enum MHD_Result
refuse_early(struct nw_serve *s, struct MHD_Connection *conn, const char *url,
             const struct nw_client_error *err, const char *request_id,
             const char *retry_after)
{
	nw_serve_metrics_outcome(s->metrics, route_of(url), err->status,
	                         nw_outcome_code_index(err->code));
	if (nw_access_log_enabled()) {
		const struct nw_access_record rec = {
			.request_id = request_id, .route = url, .status = (int)err->status,
			.error_code = err->code, .prompt_tokens = -1, .output_tokens = -1,
			.queue_s = NAN, .ttft_s = NAN, .tpot_s = NAN,
			.total_s = 0, /* answered at its headers */
		};

		nw_access_log(&rec);
	}
	return respond(conn, err, request_id, NULL, retry_after);
}

bool
nw_serve_owns(const char *url)
{
	return strcmp(url, PATH_COMPLETIONS) == 0 || strcmp(url, PATH_CHAT) == 0 ||
	       strcmp(url, PATH_MODELS) == 0;
}

enum MHD_Result
nw_serve_no_route(struct nw_serve *s, struct MHD_Connection *conn, const char *url,
                  const char *method)
{
	struct nw_client_error err;

	s->metrics->counters.requests_other++;
	nw_client_error_no_route(&err, method, url);
	nw_serve_metrics_outcome(s->metrics, NW_METRIC_ROUTE_OTHER, err.status,
	                         nw_outcome_code_index(err.code));
	return respond(conn, &err, NULL, NULL, NULL);
}

enum MHD_Result
nw_serve_method_not_allowed(struct nw_serve *s, struct MHD_Connection *conn, const char *url,
                            const char *method, const char *allow)
{
	struct nw_client_error err;

	s->metrics->counters.requests_other++;
	nw_client_error_method_not_allowed(&err, method, url, allow);
	nw_serve_metrics_outcome(s->metrics, route_of(url), err.status,
	                         nw_outcome_code_index(err.code));
	return respond(conn, &err, NULL, allow, NULL);
}

/* --- GET /v1/models ----------------------------------------------------- */

static enum MHD_Result
route_models(struct nw_serve *s, struct MHD_Connection *conn)
{
	json_t *model = json_pack("{s:s?, s:s, s:I, s:s}", "id", s->fleet->model, "object", "model",
	                          "created", (json_int_t)s->created, "owned_by", "narwhal");
	json_t *body;
	enum MHD_Result ret;

	s->metrics->counters.requests_models++;
	nw_serve_metrics_outcome(s->metrics, NW_METRIC_ROUTE_MODELS, MHD_HTTP_OK,
	                         nw_outcome_code_none());
	if (s->fleet->max_model_len > 0)
		json_object_set_new(model, "max_model_len", json_integer(s->fleet->max_model_len));
	body = json_pack("{s:s, s:[o]}", "object", "list", "data", model);
	if (s->fleet->model == NULL) /* not known yet: the list is empty */
		json_array_clear(json_object_get(body, "data"));
	ret = nw_http_respond_json(conn, MHD_HTTP_OK, body);
	json_decref(body);
	return ret;
}

/* --- completions -------------------------------------------------------- */

static enum MHD_Result
first_call(struct nw_serve *s, struct MHD_Connection *conn, narwhal_route route,
           const char *url, const char *method, void **request)
{
	struct nw_client_error err;
	const char *len = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
	                                              MHD_HTTP_HEADER_CONTENT_LENGTH);
	char id[NW_REQUEST_ID_MAX + 1];
	uint32_t held = 0;

	if (strcmp(method, "POST") != 0)
		return nw_serve_method_not_allowed(s, conn, url, method, "POST");
	/* Only completions count as such (a GET here is a 405). */
	if (route == NARWHAL_ROUTE_COMPLETIONS)
		s->metrics->counters.requests_completions++;
	else
		s->metrics->counters.requests_chat++;
	nw_request_id_choose(s->rng, MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
	                                                         "X-Request-Id"), id);
	/* Before any engine work, and before the body is read. */
	if (s->api_keys != NULL &&
	    !nw_serve_key_ok(s->api_keys, MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
	                                                              "Authorization"))) {
		s->metrics->counters.unauthorized++;
		s->metrics->counters.refused_before_body++;
		nw_client_error_set(&err, 401, "invalid_api_key", NULL,
		                    "a valid API key is required: send Authorization: Bearer <key>");
		return refuse_early(s, conn, url, &err, id, NULL);
	}
	/* Spec 4.2: the ceiling answers before the body is parsed; the
	 * request is an unsized offer. It counts the requests a reload left
	 * finishing on older serves too. */
	for (const struct nw_serve *g = s; g != NULL; g = g->older)
		held += g->retained;
	if (held >= s->ceiling || s->stop != NW_SERVE_RUNNING) {
		bool stopping = s->stop != NW_SERVE_RUNNING;

		s->metrics->counters.refused_before_body++;
		if (stopping)
			s->metrics->counters.shutdown_aborts++;
		else
			s->metrics->counters.ceiling_refusals++;
		if (!stopping)
			nw_demand_refuse_unsized(s->demand, g_get_monotonic_time() * 1000,
			                         NW_DEMAND_REFUSED_CEILING);
		if (stopping)
			nw_client_error_set(&err, 503, "shutting_down", NULL, "Narwhal is shutting down");
		else
			nw_client_error_set(&err, 429, "too_many_requests", NULL,
			                    "Narwhal holds as many requests as it serves and queues "
			                    "(serving.max_connections + serving.queue_capacity): retry "
			                    "later");
		return refuse_early(s, conn, url, &err, id, "1");
	}
	if (len != NULL) {
		char *end;
		guint64 n;

		errno = 0;
		n = g_ascii_strtoull(len, &end, 10);
		if (errno == 0 && end != len && n > s->cfg->serving.max_request_bytes) {
			s->metrics->counters.too_large++;
			s->metrics->counters.refused_before_body++;
			nw_client_error_too_large(&err, s->cfg->serving.max_request_bytes);
			return refuse_early(s, conn, url, &err, id, NULL);
		}
	}
	*request = nw_request_new(s, conn, route, id);
	return MHD_YES;
}

enum MHD_Result
nw_serve_handle(struct nw_serve *s, struct MHD_Connection *conn, const char *url,
                const char *method, const char *upload, size_t *upload_size, void **request)
{
	narwhal_route route;

	if (*request != NULL)
		return nw_request_on_handler(*request, upload, upload_size);
	if (strcmp(url, PATH_MODELS) == 0) {
		if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
			return nw_serve_method_not_allowed(s, conn, url, method, "GET, HEAD");
		if (s->stop != NW_SERVE_RUNNING) {
			struct nw_client_error err;

			s->metrics->counters.requests_models++;
			nw_client_error_set(&err, 503, "shutting_down", NULL, "Narwhal is shutting down");
			nw_serve_metrics_outcome(s->metrics, NW_METRIC_ROUTE_MODELS, err.status,
			                         nw_outcome_code_index(err.code));
			return respond(conn, &err, NULL, NULL, "1");
		}
		return route_models(s, conn);
	}
	if (!nw_request_route_for_path(url, &route))
		return nw_serve_no_route(s, conn, url, method);
	return first_call(s, conn, route, url, method, request);
}

void
nw_serve_completed(struct nw_serve *s, void **request, enum MHD_RequestTerminationCode why)
{
	struct nw_request *r = *request;

	if (r == NULL)
		return;
	*request = NULL;
	nw_request_on_completed(r, why);
}

unsigned
nw_serve_shutdown(struct nw_serve *s)
{
	GList *l, *next;

	s->stop = NW_SERVE_STOPPING;
	for (l = s->requests.head; l != NULL; l = next) {
		next = l->next;
		nw_request_shutdown(l->data);
	}
	return s->retained;
}
