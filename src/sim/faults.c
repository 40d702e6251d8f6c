/*
 * Fault injection per engine, and the process's admin API that sets it.
 *
 * The admin API listens on its own port (--admin-port), because one fault
 * (refuse_connections) takes an engine's own port away:
 *
 *   GET    /sim/engines                 every engine: id, url, stats, faults
 *   GET    /sim/engines/<id>            one engine
 *   GET    /sim/engines/<id>/faults     its faults
 *   POST   /sim/engines/<id>/faults     merge a fault object (strictly checked)
 *   DELETE /sim/engines/<id>/faults     clear its faults
 *   POST   /sim/reset                   clear every engine's faults
 */
#include "build-config.h"

#include <math.h>
#include <string.h>

#include "core/log.h"
#include "sim/server.h"
#include "sim/sim.h"

#define MAX_ADMIN_BODY (64u << 10)

void
sim_faults_clear(struct sim_faults *f)
{
	memset(f, 0, sizeof *f);
	f->error_status = 503;
	f->latency_multiplier = 1.0;
	f->hang_s = -1;
	f->die_after_tokens = -1;
	f->error_after_tokens = -1;
}

static const char *const fault_keys[] = {
	"error_rate", "error_status", "error_delay_s", "latency_multiplier",
	"hang_before_first_token", "die_after_tokens", "error_after_tokens", "refuse_connections",
	"flap_health_period_s", "kv_lease_s", "unhealthy", NULL,
};

static bool
bad(char **error, const char *key, const char *want, const json_t *got)
{
	char *text = got ? json_dumps(got, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;

	*error = g_strdup_printf("faults.%s: expected %s, got %s", key, want, text ? text : "?");
	free(text);
	return false;
}

/* A number within [lo, hi]; integers are numbers too. */
static bool
number_in(const json_t *v, double lo, double hi, double *out)
{
	double d;

	if (!json_is_number(v))
		return false;
	d = json_number_value(v);
	if (!isfinite(d) || d < lo || d > hi)
		return false;
	*out = d;
	return true;
}

bool
sim_faults_merge(struct sim_faults *f, const json_t *doc, double now_v, char **error)
{
	struct sim_faults next = *f;
	const char *key;
	json_t *v;

	if (!json_is_object(doc)) {
		*error = g_strdup("faults: expected a JSON object");
		return false;
	}
	json_object_foreach((json_t *)doc, key, v) {
		bool known = false;
		double d = 0;

		for (size_t i = 0; fault_keys[i] && !known; i++)
			known = strcmp(key, fault_keys[i]) == 0;
		if (!known) {
			g_autofree char *list = g_strjoinv(", ", (char **)fault_keys);

			*error = g_strdup_printf("faults.%s: unknown fault; known faults are: %s",
			                         key, list);
			return false;
		}
		if (json_is_null(v)) {
			/* null puts one fault back to its default. */
			struct sim_faults def;

			sim_faults_clear(&def);
			if (strcmp(key, "error_rate") == 0) next.error_rate = def.error_rate;
			else if (strcmp(key, "error_status") == 0) next.error_status = def.error_status;
			else if (strcmp(key, "error_delay_s") == 0) next.error_delay_s = 0;
			else if (strcmp(key, "latency_multiplier") == 0)
				next.latency_multiplier = def.latency_multiplier;
			else if (strcmp(key, "hang_before_first_token") == 0) next.hang_s = def.hang_s;
			else if (strcmp(key, "die_after_tokens") == 0)
				next.die_after_tokens = def.die_after_tokens;
			else if (strcmp(key, "error_after_tokens") == 0)
				next.error_after_tokens = def.error_after_tokens;
			else if (strcmp(key, "refuse_connections") == 0)
				next.refuse_connections = false;
			else if (strcmp(key, "flap_health_period_s") == 0) next.flap_period_s = 0;
			else if (strcmp(key, "kv_lease_s") == 0) next.kv_lease_s = 0;
			else if (strcmp(key, "unhealthy") == 0) next.unhealthy = false;
			continue;
		}
		if (strcmp(key, "error_rate") == 0) {
			if (!number_in(v, 0, 1, &next.error_rate))
				return bad(error, key, "a probability from 0 to 1", v);
		} else if (strcmp(key, "error_status") == 0) {
			if (!json_is_integer(v) || json_integer_value(v) < 400 ||
			    json_integer_value(v) > 599)
				return bad(error, key, "an HTTP error status from 400 to 599", v);
			next.error_status = (unsigned)json_integer_value(v);
		} else if (strcmp(key, "error_delay_s") == 0) {
			if (!number_in(v, 0, 86400, &next.error_delay_s))
				return bad(error, key, "model seconds from 0 (at once) to 86400", v);
		} else if (strcmp(key, "latency_multiplier") == 0) {
			if (!number_in(v, 1, 1000, &next.latency_multiplier))
				return bad(error, key, "a number from 1 to 1000", v);
		} else if (strcmp(key, "hang_before_first_token") == 0) {
			if (json_is_boolean(v))
				next.hang_s = json_is_true(v) ? INFINITY : -1;
			else if (number_in(v, 0, 86400, &d))
				next.hang_s = d > 0 ? d : -1;
			else
				return bad(error, key, "true (until the client leaves), false, or "
				           "model seconds from 0 to 86400", v);
		} else if (strcmp(key, "die_after_tokens") == 0) {
			if (!json_is_integer(v) || json_integer_value(v) < 0 ||
			    json_integer_value(v) > G_MAXUINT32)
				return bad(error, key, "a token count of 0 or more, or null (off)", v);
			next.die_after_tokens = json_integer_value(v);
		} else if (strcmp(key, "error_after_tokens") == 0) {
			if (!json_is_integer(v) || json_integer_value(v) < 0 ||
			    json_integer_value(v) > G_MAXUINT32)
				return bad(error, key, "a token count of 0 or more, or null (off)", v);
			next.error_after_tokens = json_integer_value(v);
		} else if (strcmp(key, "refuse_connections") == 0) {
			if (!json_is_boolean(v))
				return bad(error, key, "true or false", v);
			next.refuse_connections = json_is_true(v);
		} else if (strcmp(key, "flap_health_period_s") == 0) {
			if (!number_in(v, 0, 86400, &d))
				return bad(error, key, "model seconds from 0 (off) to 86400", v);
			if (d > 0 && d != f->flap_period_s)
				next.flap_since_v = now_v;
			next.flap_period_s = d;
		} else if (strcmp(key, "kv_lease_s") == 0) {
			if (!number_in(v, 0, 86400, &d) || d <= 0)
				return bad(error, key, "model seconds above 0, up to 86400, or null "
				           "(the --kv-lease-duration default)", v);
			next.kv_lease_s = d;
		} else if (strcmp(key, "unhealthy") == 0) {
			if (!json_is_boolean(v))
				return bad(error, key, "true or false", v);
			next.unhealthy = json_is_true(v);
		}
	}
	*f = next;
	return true;
}

json_t *
sim_faults_json(const struct sim_faults *f)
{
	json_t *hang = f->hang_s < 0 ? json_false()
	             : isinf(f->hang_s) ? json_true() : json_real(f->hang_s);

	return json_pack("{s:f, s:i, s:f, s:f, s:o, s:o, s:o, s:b, s:f, s:o, s:b}",
	                 "error_rate", f->error_rate,
	                 "error_status", (json_int_t)f->error_status,
	                 "error_delay_s", f->error_delay_s,
	                 "latency_multiplier", f->latency_multiplier,
	                 "hang_before_first_token", hang,
	                 "die_after_tokens", f->die_after_tokens < 0
	                     ? json_null() : json_integer(f->die_after_tokens),
	                 "error_after_tokens", f->error_after_tokens < 0
	                     ? json_null() : json_integer(f->error_after_tokens),
	                 "refuse_connections", f->refuse_connections,
	                 "flap_health_period_s", f->flap_period_s,
	                 "kv_lease_s", f->kv_lease_s > 0 ? json_real(f->kv_lease_s) : json_null(),
	                 "unhealthy", f->unhealthy);
}

bool
sim_faults_health_down(const struct sim_faults *f, double now_v)
{
	if (f->unhealthy)
		return true;
	if (f->flap_period_s <= 0)
		return false;
	/* Down for the first period, up for the next, and so on: the fault
	 * shows at once. */
	return ((int64_t)floor((now_v - f->flap_since_v) / f->flap_period_s)) % 2 == 0;
}

static void
apply(struct sim_node *node)
{
	sim_node_apply_lease(node);
	sim_node_sync_listener(node);
}

bool
sim_node_set_faults(struct sim_node *node, const json_t *doc, char **error)
{
	char *text;

	if (!sim_faults_merge(&node->faults, doc, sim_fleet_now(node->fleet), error))
		return false;
	text = json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS);
	nw_log(NARWHAL_LOG_INFO, "faults_set", "engine", node->id, "faults", text, NULL);
	free(text);
	apply(node);
	return true;
}

void
sim_node_reset_faults(struct sim_node *node)
{
	sim_faults_clear(&node->faults);
	apply(node);
}

/* --- admin API ----------------------------------------------------------- */

struct admin_request {
	GString *body;
	bool too_large;
};

static enum MHD_Result
respond_owned(struct MHD_Connection *conn, unsigned status, json_t *doc)
{
	enum MHD_Result ret = sim_respond_json(conn, status, doc);

	json_decref(doc);
	return ret;
}

static enum MHD_Result
method_not_allowed(struct MHD_Connection *conn, const char *allow)
{
	g_autofree char *msg = g_strdup_printf("Use %s here.", allow);
	char *text = sim_error_text(SIM_DIALECT_VLLM, 405, NULL, msg);
	struct MHD_Response *resp = MHD_create_response_from_buffer_with_free_callback(
		strlen(text), text, g_free);
	enum MHD_Result ret;

	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
	MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
	ret = MHD_queue_response(conn, 405, resp);
	MHD_destroy_response(resp);
	return ret;
}

static json_t *
engines_json(const struct sim_fleet *fleet)
{
	json_t *list = json_array();

	for (unsigned i = 0; i < fleet->n_nodes; i++)
		json_array_append_new(list, sim_node_stats_json(fleet->nodes[i]));
	return json_pack("{s:s, s:f, s:o}", "model", fleet->model_name,
	                 "time_s", sim_fleet_now(fleet), "engines", list);
}

static enum MHD_Result
route_faults(struct sim_node *node, struct MHD_Connection *conn, const char *method,
             const struct admin_request *ar)
{
	json_t *doc;
	json_error_t je;
	char *error = NULL;

	if (strcmp(method, "GET") == 0)
		return respond_owned(conn, 200, sim_faults_json(&node->faults));
	if (strcmp(method, "DELETE") == 0) {
		sim_node_reset_faults(node);
		nw_log(NARWHAL_LOG_INFO, "faults_cleared", "engine", node->id, NULL);
		return respond_owned(conn, 200, sim_faults_json(&node->faults));
	}
	if (strcmp(method, "POST") != 0)
		return method_not_allowed(conn, "GET, POST, DELETE");
	if (ar->too_large)
		return sim_respond_error(conn, SIM_DIALECT_VLLM, 413, NULL,
		                         "The fault object is too large.", NULL);
	doc = json_loadb(ar->body->str, ar->body->len, 0, &je);
	if (doc == NULL) {
		g_autofree char *msg = g_strdup_printf("The body is not valid JSON: %s", je.text);
		return sim_respond_error(conn, SIM_DIALECT_VLLM, 400, NULL, msg, NULL);
	}
	if (!sim_node_set_faults(node, doc, &error)) {
		enum MHD_Result ret = sim_respond_error(conn, SIM_DIALECT_VLLM, 400, NULL, error,
		                                        NULL);

		g_free(error);
		json_decref(doc);
		return ret;
	}
	json_decref(doc);
	return respond_owned(conn, 200, sim_faults_json(&node->faults));
}

static enum MHD_Result
admin_route(struct sim_fleet *fleet, struct MHD_Connection *conn, const char *url,
            const char *method, const struct admin_request *ar)
{
	static const char engines_prefix[] = "/sim/engines/";
	bool get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;

	if (strcmp(url, "/sim/engines") == 0) {
		if (!get)
			return method_not_allowed(conn, "GET, HEAD");
		return respond_owned(conn, 200, engines_json(fleet));
	}
	if (strcmp(url, "/sim/reset") == 0) {
		if (strcmp(method, "POST") != 0)
			return method_not_allowed(conn, "POST");
		for (unsigned i = 0; i < fleet->n_nodes; i++)
			sim_node_reset_faults(fleet->nodes[i]);
		nw_log(NARWHAL_LOG_INFO, "faults_reset", NULL);
		return respond_owned(conn, 200, json_pack("{s:b, s:i}", "reset", 1,
		                                          "engines", (json_int_t)fleet->n_nodes));
	}
	if (strncmp(url, engines_prefix, sizeof engines_prefix - 1) == 0) {
		const char *rest = url + sizeof engines_prefix - 1;
		const char *slash = strchr(rest, '/');
		g_autofree char *id = slash ? g_strndup(rest, (gsize)(slash - rest)) : g_strdup(rest);
		struct sim_node *node = sim_fleet_find(fleet, id);

		if (node == NULL) {
			g_autofree char *msg = g_strdup_printf("No engine \"%s\" in this process.", id);
			return sim_respond_error(conn, SIM_DIALECT_VLLM, 404, NULL, msg, NULL);
		}
		if (slash == NULL) {
			if (!get)
				return method_not_allowed(conn, "GET, HEAD");
			return respond_owned(conn, 200, sim_node_stats_json(node));
		}
		if (strcmp(slash, "/faults") == 0)
			return route_faults(node, conn, method, ar);
	}
	{
		g_autofree char *msg = g_strdup_printf("No admin route for %s %s.", method, url);
		return sim_respond_error(conn, SIM_DIALECT_VLLM, 404, NULL, msg, NULL);
	}
}

static enum MHD_Result
admin_handler(void *data, struct MHD_Connection *conn, const char *url, const char *method,
              const char *version, const char *upload, size_t *upload_size, void **request)
{
	struct admin_request *ar = *request;

	if (ar == NULL) {
		ar = g_new0(struct admin_request, 1);
		ar->body = g_string_new(NULL);
		*request = ar;
		return MHD_YES;
	}
	if (*upload_size > 0) {
		if (ar->body->len + *upload_size > MAX_ADMIN_BODY)
			ar->too_large = true;
		else
			g_string_append_len(ar->body, upload, (gssize)*upload_size);
		*upload_size = 0;
		return MHD_YES;
	}
	return admin_route(data, conn, url, method, ar);
}

static void
admin_completed(void *data, struct MHD_Connection *conn, void **request,
                enum MHD_RequestTerminationCode why)
{
	struct admin_request *ar = *request;

	if (ar == NULL)
		return;
	g_string_free(ar->body, TRUE);
	g_free(ar);
	*request = NULL;
}

bool
sim_admin_start(struct sim_fleet *fleet, GError **error)
{
	struct nw_http_server_options so = {
		.host = fleet->opts->host,
		.port = (uint16_t)fleet->opts->admin_port,
		.connection_timeout_s = 60,
		.connection_limit = 256,
	};
	char port[8];
	g_autofree char *url = NULL;

	fleet->admin = nw_http_server_start(&so, admin_handler, admin_completed, fleet, error);
	if (fleet->admin == NULL)
		return false;
	g_snprintf(port, sizeof port, "%u", nw_http_server_port(fleet->admin));
	url = g_strdup_printf("http://%s:%s", so.host, port);
	nw_log(NARWHAL_LOG_INFO, "admin_listening", "host", so.host, "port", port, "url", url, NULL);
	return true;
}

void
sim_admin_stop(struct sim_fleet *fleet)
{
	nw_http_server_stop(fleet->admin);
	fleet->admin = NULL;
}
