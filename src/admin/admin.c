#include "build-config.h"

#include "admin/admin.h"

#include <gio/gio.h>
#include <netdb.h>
#include <string.h>
#include <sys/socket.h>

#include "control/roles.h"
#include "core/log.h"
#include "daemon-internal.h"
#include "obs/state.h"

/* Admin bodies are a role at most; anything longer is not ours. */
#define ADMIN_MAX_BODY 4096

/* How much of a path or method a call's log line and history entry keep
 * (in characters): any caller, token or not, chooses them. */
#define ADMIN_PATH_SHOWN 256

/* The listener serves a few operators, never clients. */
#define ADMIN_CONNECTIONS 16
#define ADMIN_TIMEOUT_S 10

/* The admin API answers fewer distinct results than this. */
#define ADMIN_RESULTS 32

struct nw_admin {
	struct nw_daemon *daemon;
	char *token;
	struct nw_http_server *http;
	/* The operator history: a bounded queue of json objects, oldest
	 * first, capacity controller.flip_history as the flip history's. */
	GQueue history;
	uint32_t capacity;
	uint64_t total;
	/* Calls without the right token: counted apart, so a caller without
	 * the token cannot push the operators' actions out of the history. */
	uint64_t unauthorized;
	char *unauthorized_at, *unauthorized_peer; /* the last one */
	/* Calls by result: a bounded set of static codes (the last slot
	 * takes any beyond it as "other"). */
	struct {
		const char *result;
		uint64_t n;
	} calls[ADMIN_RESULTS];
};

/* One request: its body as it arrives. */
struct admin_request {
	GString *body;
};

/* One call as it is logged and recorded. */
struct admin_call {
	struct nw_admin *a;
	struct MHD_Connection *conn;
	const char *method;
	const char *url;
	const char *engine;    /* the configured id, once found; NULL: none */
};

/* --- answers, the log and the history ----------------------------------- */

static void
peer_address(struct MHD_Connection *conn, char *out, size_t size)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	const struct sockaddr *sa = ci != NULL ? ci->client_addr : NULL;
	socklen_t len = sa == NULL ? 0
	                : sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
	                                            : sizeof(struct sockaddr_in);

	if (sa == NULL || getnameinfo(sa, len, out, (socklen_t)size, NULL, 0, NI_NUMERICHOST) != 0)
		g_strlcpy(out, "unknown", size);
}

/* A path or method as the log and the history show it: valid UTF-8 (both
 * are JSON; MHD hands over the path %-decoded) and at most
 * ADMIN_PATH_SHOWN characters, so a caller cannot grow either by the size
 * of its request line (transfer full). */
static char *
shown(const char *text)
{
	g_autofree char *valid = g_utf8_make_valid(text, -1);
	g_autofree char *head = NULL;

	if (g_utf8_strlen(valid, -1) <= ADMIN_PATH_SHOWN)
		return g_steal_pointer(&valid);
	head = g_utf8_substring(valid, 0, ADMIN_PATH_SHOWN);
	return g_strconcat(head, "...", NULL);
}

static void
count_call(struct nw_admin *a, const char *result)
{
	size_t k;

	for (k = 0; k < ADMIN_RESULTS - 1 && a->calls[k].result != NULL; k++) {
		if (strcmp(a->calls[k].result, result) == 0)
			break;
	}
	if (a->calls[k].result == NULL)
		a->calls[k].result = k < ADMIN_RESULTS - 1 ? result : "other";
	a->calls[k].n++;
}

static void
record(struct admin_call *c, unsigned status, const char *result)
{
	struct nw_admin *a = c->a;
	g_autoptr(GDateTime) now = g_date_time_new_now_utc();
	g_autofree char *at = g_date_time_format_iso8601(now);
	g_autofree char *path = shown(c->url), *method = shown(c->method);
	char peer[64], code[8];

	count_call(a, result);
	peer_address(c->conn, peer, sizeof peer);
	g_snprintf(code, sizeof code, "%u", status);
	nw_log(status < 400 ? NARWHAL_LOG_INFO : NARWHAL_LOG_WARNING, "admin_call", "method",
	       method, "path", path, "status", code, "result", result, "peer", peer,
	       c->engine != NULL ? "engine" : NULL, c->engine, NULL);
	/* A read that was answered (GET or HEAD) changes nothing: logged, but
	 * kept out of the history so a polling dashboard cannot push the
	 * actions out. */
	if ((strcmp(c->method, "GET") == 0 || strcmp(c->method, "HEAD") == 0) && status < 400)
		return;
	if (status == MHD_HTTP_UNAUTHORIZED) {
		a->unauthorized++;
		g_free(a->unauthorized_at);
		g_free(a->unauthorized_peer);
		a->unauthorized_at = g_steal_pointer(&at);
		a->unauthorized_peer = g_strdup(peer);
		return;
	}
	g_queue_push_tail(&a->history,
	                  json_pack("{s:s, s:s, s:s, s:s?, s:i, s:s, s:s}", "at", at, "method",
	                            method, "path", path, "engine", c->engine, "status",
	                            (int)status, "result", result, "peer", peer));
	if (g_queue_get_length(&a->history) > a->capacity)
		json_decref(g_queue_pop_head(&a->history));
	a->total++;
}

/* Answer body (stolen) with status, and record the call. */
static enum MHD_Result
reply(struct admin_call *c, unsigned status, json_t *body, const char *result,
      const char *allow)
{
	const char *const headers[] = {
		MHD_HTTP_HEADER_ALLOW, allow,
		/* RFC 6750: a missing or wrong token names the scheme it wants. */
		MHD_HTTP_HEADER_WWW_AUTHENTICATE, status == MHD_HTTP_UNAUTHORIZED ? "Bearer" : NULL,
		NULL,
	};
	enum MHD_Result ret;

	record(c, status, result);
	ret = body != NULL ? nw_http_respond_json_with(c->conn, status, body, headers) : MHD_NO;
	json_decref(body);
	return ret;
}

/* The clients' error envelope (docs/api.md, "Errors"), with param. */
static enum MHD_Result
reply_error_param(struct admin_call *c, unsigned status, const char *code, const char *param,
                  const char *message, const char *allow)
{
	return reply(c, status,
	             nw_http_error_body(status >= 500 ? "server_error" : "invalid_request_error",
	                                code, param, message),
	             code, allow);
}

static enum MHD_Result
reply_error(struct admin_call *c, unsigned status, const char *code, const char *message)
{
	return reply_error_param(c, status, code, NULL, message, NULL);
}

/* --- engines --------------------------------------------------------------- */

static int64_t
engine_index(struct nw_daemon *d, const char *id)
{
	const struct nw_fleet *f = nw_daemon_fleet(d);

	for (uint32_t i = 0; i < f->view.n_engines; i++) {
		if (strcmp(f->ids[i], id) == 0)
			return i;
	}
	return -1;
}

/* 404 naming the ids there are (the admin listener is the operator's: the
 * fleet's ids are no secret there). */
static enum MHD_Result
reply_engine_not_found(struct admin_call *c)
{
	const struct nw_fleet *f = nw_daemon_fleet(c->a->daemon);
	g_autoptr(GString) msg = g_string_new("no engine has this id: the ids of fleet.engines are ");

	for (uint32_t i = 0; i < f->view.n_engines; i++)
		g_string_append_printf(msg, "%s\"%s\"", i == 0 ? "" : ", ", f->ids[i]);
	return reply_error(c, MHD_HTTP_NOT_FOUND, "engine_not_found", msg->str);
}

/* What an engine action answers: the engine's state entry after it. */
static enum MHD_Result
reply_engine(struct admin_call *c, uint32_t i, const char *action, bool changed)
{
	json_t *state = nw_daemon_state_json(c->a->daemon, true);
	json_t *entry = json_array_get(json_object_get(state, "engines"), i);
	json_t *body = json_pack("{s:s, s:s, s:b, s:O}", "engine", c->engine, "action", action,
	                         "changed", changed, "state", entry);

	json_decref(state);
	return reply(c, MHD_HTTP_OK, body, "ok", NULL);
}

/* The body of an engine action: empty or an object whose only key may be
 * "role" ("prefill" or "decode"). *role stays 0 when none is given. */
static bool
parse_role_body(struct admin_call *c, const GString *body, narwhal_role *role,
                enum MHD_Result *ret)
{
	json_error_t jerr;
	json_t *doc, *v;
	const char *key;
	g_autofree char *msg = NULL;

	*role = 0;
	if (body->len == 0)
		return true;
	/* A key given twice is ambiguous: refused, not the last one taken. */
	doc = json_loadb(body->str, body->len, JSON_REJECT_DUPLICATES, &jerr);
	if (!json_is_object(doc)) {
		msg = doc == NULL ? g_strdup_printf("the body is not JSON (%s): an object such as "
		                                    "{\"role\": \"decode\"}, or no body", jerr.text)
		                  : g_strdup("the body is not a JSON object: an object such as "
		                             "{\"role\": \"decode\"}, or no body");
		json_decref(doc);
		*ret = reply_error(c, MHD_HTTP_BAD_REQUEST, "invalid_json", msg);
		return false;
	}
	json_object_foreach(doc, key, v) {
		if (strcmp(key, "role") != 0) {
			*ret = reply_error_param(c, MHD_HTTP_BAD_REQUEST, "unknown_field", key,
			                         "unknown field: the only field is \"role\"", NULL);
			json_decref(doc);
			return false;
		}
		if (g_strcmp0(json_string_value(v), "prefill") == 0)
			*role = NARWHAL_ROLE_PREFILL;
		else if (g_strcmp0(json_string_value(v), "decode") == 0)
			*role = NARWHAL_ROLE_DECODE;
		else {
			*ret = reply_error_param(c, MHD_HTTP_BAD_REQUEST, "invalid_value", "role",
			                         "role must be \"prefill\" or \"decode\"", NULL);
			json_decref(doc);
			return false;
		}
	}
	json_decref(doc);
	return true;
}

/* 409 with the guard's code and sentence. */
static enum MHD_Result
reply_guard(struct admin_call *c, nw_role_guard g)
{
	return reply_error(c, MHD_HTTP_CONFLICT, nw_role_guard_code(g), nw_role_guard_message(g));
}

static enum MHD_Result
engine_action(struct admin_call *c, uint32_t i, const char *action, const GString *body)
{
	struct nw_monitor *m = nw_daemon_monitor(c->a->daemon);
	narwhal_role current = nw_daemon_fleet(c->a->daemon)->engines[i].role;
	narwhal_role role;
	enum MHD_Result ret;
	nw_role_guard g;

	if (!parse_role_body(c, body, &role, &ret))
		return ret;
	if (role != 0 && strcmp(action, "role") != 0 && strcmp(action, "pin") != 0)
		return reply_error_param(c, MHD_HTTP_BAD_REQUEST, "unknown_field", "role",
		                         "this action takes no body", NULL);

	if (strcmp(action, "drain") == 0 || strcmp(action, "undrain") == 0) {
		bool drain = action[0] == 'd', was = nw_monitor_draining(m, i);

		nw_monitor_drain(m, i, drain);
		return reply_engine(c, i, action, was != drain);
	}
	if (strcmp(action, "pin") == 0) {
		bool was = nw_monitor_pinned_by(m, i) != NULL;

		/* Pinned at a role: the move goes through the guards first. */
		if (role != 0 && role != current &&
		    (g = nw_monitor_set_role(m, i, role, "operator", "operator_pin")) != NW_ROLE_GUARD_OK)
			return reply_guard(c, g);
		nw_monitor_pin(m, i, true);
		return reply_engine(c, i, action, !was || (role != 0 && role != current));
	}
	if (strcmp(action, "unpin") == 0) {
		bool was = nw_monitor_pinned_by(m, i) != NULL;

		nw_monitor_pin(m, i, false);
		return reply_engine(c, i, action, was);
	}
	if (strcmp(action, "role") == 0) {
		if (role == 0)
			return reply_error_param(c, MHD_HTTP_BAD_REQUEST, "missing_field", "role",
			                         "the body must name the role: {\"role\": \"prefill\"} "
			                         "or {\"role\": \"decode\"}", NULL);
		if (role == current)
			return reply_engine(c, i, action, false);
		g = nw_monitor_set_role(m, i, role, "operator", "operator_request");
		if (g != NW_ROLE_GUARD_OK)
			return reply_guard(c, g);
		return reply_engine(c, i, action, true);
	}
	if (strcmp(action, "eject") == 0) {
		const struct nw_engine_health *h = nw_monitor_engine_health(m, i);
		bool was = h->state == NW_HEALTH_EJECTED && h->reason == NW_HEALTH_REASON_OPERATOR;

		nw_monitor_eject(m, i);
		return reply_engine(c, i, action, !was);
	}
	/* readmit: the breaker verifies the engine before it takes work
	 * (docs/recovery.md); the next pass starts it. */
	switch (nw_monitor_engine_health(m, i)->state) {
	case NW_HEALTH_EJECTED:
		/* changed false: a readmit already waits for the next pass */
		return reply_engine(c, i, action, nw_monitor_readmit(m, i));
	case NW_HEALTH_VERIFYING:
		return reply_engine(c, i, action, false);
	case NW_HEALTH_LIVE:
	default:
		return reply_error(c, MHD_HTTP_CONFLICT, "engine_not_ejected",
		                   "the engine is not ejected: only an ejected engine is readmitted");
	}
}

/* --- reload ---------------------------------------------------------------- */

static enum MHD_Result
reload(struct admin_call *c, const GString *body)
{
	struct nw_daemon *d = c->a->daemon;
	json_t *summary = NULL;
	GError *error = NULL;
	enum MHD_Result ret;

	/* Reload takes no body, not even {}: one meant to say something (a
	 * path) must not be ignored (docs/admin.md). */
	if (body->len > 0)
		return reply_error(c, MHD_HTTP_BAD_REQUEST, "body_not_allowed",
		                   "reload takes no body: it reads the file narwhal started with "
		                   "(--config) again");
	if (!nw_daemon_reload(d, &summary, &error)) {
		/* Refused whole: the file is invalid (400), or it cannot be
		 * applied now (409: it changes what needs a restart, or Narwhal
		 * is stopping). */
		bool invalid = g_error_matches(error, G_FILE_ERROR, G_FILE_ERROR_INVAL);

		ret = reply_error(c, invalid ? MHD_HTTP_BAD_REQUEST : MHD_HTTP_CONFLICT,
		                  invalid ? "invalid_config" : "reload_refused", error->message);
		g_error_free(error);
		return ret;
	}
	{
		g_autofree char *digest = nw_state_config_digest(nw_daemon_config(d));

		json_object_set_new(summary, "reloaded", json_true());
		json_object_set_new(summary, "digest", json_string(digest));
		return reply(c, MHD_HTTP_OK, summary, "ok", NULL);
	}
}

/* --- routing ----------------------------------------------------------------- */

static const char *const engine_actions[] = {
	"drain", "undrain", "pin", "unpin", "role", "readmit", "eject",
};

static bool
is_engine_action(const char *action)
{
	for (size_t k = 0; k < G_N_ELEMENTS(engine_actions); k++) {
		if (strcmp(engine_actions[k], action) == 0)
			return true;
	}
	return false;
}

static enum MHD_Result
dispatch(struct admin_call *c, const GString *body)
{
	static const char engines[] = "/admin/engines/";
	bool get = strcmp(c->method, "GET") == 0 || strcmp(c->method, "HEAD") == 0;
	bool post = strcmp(c->method, "POST") == 0;

	if (strcmp(c->url, "/admin/state") == 0) {
		if (!get)
			return reply_error_param(c, MHD_HTTP_METHOD_NOT_ALLOWED, "method_not_allowed",
			                         NULL, "GET /admin/state only", "GET, HEAD");
		return reply(c, MHD_HTTP_OK, nw_daemon_state_json(c->a->daemon, true), "ok", NULL);
	}
	if (strcmp(c->url, "/admin/reload") == 0) {
		if (!post)
			return reply_error_param(c, MHD_HTTP_METHOD_NOT_ALLOWED, "method_not_allowed",
			                         NULL, "POST /admin/reload only", "POST");
		return reload(c, body);
	}
	if (g_str_has_prefix(c->url, engines)) {
		const char *id = c->url + strlen(engines);
		const char *slash = strrchr(id, '/');
		g_autofree char *name = slash != NULL ? g_strndup(id, (gsize)(slash - id)) : NULL;
		int64_t i;

		if (slash != NULL && *name != '\0' && strchr(name, '/') == NULL &&
		    is_engine_action(slash + 1)) {
			if (!post)
				return reply_error_param(c, MHD_HTTP_METHOD_NOT_ALLOWED,
				                         "method_not_allowed", NULL,
				                         "engine actions take POST", "POST");
			i = engine_index(c->a->daemon, name);
			if (i < 0)
				return reply_engine_not_found(c);
			c->engine = nw_daemon_fleet(c->a->daemon)->ids[i];
			return engine_action(c, (uint32_t)i, slash + 1, body);
		}
	}
	return reply_error(c, MHD_HTTP_NOT_FOUND, "not_found",
	                   "no such admin route: see docs/admin.md");
}

/* The request's Content-Length, 0 when none (libmicrohttpd has refused a
 * malformed one before the handler runs). */
static uint64_t
declared_length(struct MHD_Connection *conn)
{
	const char *v = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
	                                            MHD_HTTP_HEADER_CONTENT_LENGTH);

	return v != NULL ? g_ascii_strtoull(v, NULL, 10) : 0;
}

static enum MHD_Result
refuse_too_large(struct admin_call *c)
{
	json_t *err = nw_http_error_body("invalid_request_error", "request_too_large", NULL,
	                                 "admin bodies are at most 4096 bytes");
	enum MHD_Result ret = nw_http_server_refuse(c->conn, 413, err, NULL);

	record(c, 413, "request_too_large");
	json_decref(err);
	return ret;
}

static enum MHD_Result
on_request(void *data, struct MHD_Connection *conn, const char *url, const char *method,
           const char *version, const char *upload, size_t *upload_size, void **request)
{
	struct nw_admin *a = data;
	struct admin_request *r = *request;
	struct admin_call c = { .a = a, .conn = conn, .method = method, .url = url };
	char *token[] = { a->token, NULL };

	(void)version;
	if (r == NULL) {
		/* The token first, before any body is read (constant time). */
		if (!nw_serve_key_ok(token, MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
		                                                        "Authorization")))
			return reply_error(&c, MHD_HTTP_UNAUTHORIZED, "invalid_admin_token",
			                   "the admin API needs its token: send Authorization: Bearer "
			                   "<the token in the variable admin.token_env names>");
		/* A declared body too large is refused before it is read, as the
		 * client listener does (docs/admin.md, 413). */
		if (declared_length(conn) > ADMIN_MAX_BODY)
			return refuse_too_large(&c);
		r = g_new0(struct admin_request, 1);
		r->body = g_string_new(NULL);
		*request = r;
		return MHD_YES;
	}
	if (*upload_size > 0) {
		if (r->body->len + *upload_size > ADMIN_MAX_BODY)
			return refuse_too_large(&c);
		g_string_append_len(r->body, upload, (gssize)*upload_size);
		*upload_size = 0;
		return MHD_YES;
	}
	return dispatch(&c, r->body);
}

static void
on_completed(void *data, struct MHD_Connection *conn, void **request,
             enum MHD_RequestTerminationCode why)
{
	struct admin_request *r = *request;

	(void)data;
	(void)conn;
	(void)why;
	if (r == NULL)
		return;
	g_string_free(r->body, TRUE);
	g_free(r);
	*request = NULL;
}

/* --- lifecycle ------------------------------------------------------------- */

char *
nw_admin_read_token(const char *token_env, GError **error)
{
	/* Blanks around the token (a secret file's line end) are not part of
	 * it, as with server.api_keys_env's keys. */
	const char *token = g_getenv(token_env);
	char *stripped = token != NULL ? g_strstrip(g_strdup(token)) : NULL;

	if (stripped != NULL && *stripped != '\0')
		return stripped;
	g_free(stripped);
	g_set_error(error, G_FILE_ERROR, G_FILE_ERROR_INVAL,
	            "admin.token_env: the environment variable %s is %s: set it to the admin "
	            "API's bearer token, or set admin.token_env to null to run without the "
	            "admin API", token_env, token == NULL ? "unset" : "empty");
	return NULL;
}

struct nw_admin *
nw_admin_start(struct nw_daemon *d, GError **error)
{
	const struct nw_config *cfg = nw_daemon_config(d);
	struct nw_http_server_options http = {
		.host = cfg->admin.host, .port = (uint16_t)cfg->admin.port,
		.connection_timeout_s = ADMIN_TIMEOUT_S, .connection_limit = ADMIN_CONNECTIONS,
		.head_timeout_s = ADMIN_TIMEOUT_S, .body_timeout_s = ADMIN_TIMEOUT_S,
		.max_pending = ADMIN_CONNECTIONS,
	};
	g_autofree char *token = NULL;
	struct nw_admin *a;
	GError *local = NULL;
	char port[8];

	if (cfg->admin.token_env == NULL) {
		nw_log(NARWHAL_LOG_INFO, "admin_disabled", "message",
		       "no admin API: admin.token_env is null (docs/admin.md)", NULL);
		return NULL;
	}
	token = nw_admin_read_token(cfg->admin.token_env, error);
	if (token == NULL)
		return NULL;
	a = g_new0(struct nw_admin, 1);
	a->daemon = d;
	a->token = g_steal_pointer(&token);
	a->capacity = MAX(cfg->controller.flip_history, 1u);
	g_queue_init(&a->history);
	/* Present from the start, so that a rate can be taken of them. */
	a->calls[0].result = "ok";
	a->calls[1].result = "invalid_admin_token";
	a->http = nw_http_server_start(&http, on_request, on_completed, a, &local);
	if (a->http == NULL) {
		g_set_error(error, G_FILE_ERROR, G_FILE_ERROR_FAILED, "admin API: %s",
		            local->message);
		g_error_free(local);
		nw_admin_free(a);
		return NULL;
	}
	g_snprintf(port, sizeof port, "%u", nw_admin_port(a));
	nw_log(NARWHAL_LOG_INFO, "admin_listening", "host", cfg->admin.host, "port", port, NULL);
	return a;
}

uint16_t
nw_admin_port(const struct nw_admin *a)
{
	return nw_http_server_port(a->http);
}

json_t *
nw_admin_history_json(const struct nw_admin *a, bool operator)
{
	json_t *entries = json_array();

	if (a == NULL)
		return json_pack("{s:b, s:o}", "enabled", 0, "entries", entries);
	for (GList *l = a->history.head; l != NULL; l = l->next) {
		json_t *e = json_copy(l->data);

		/* Who called is the operators' business. */
		if (!operator)
			json_object_del(e, "peer");
		json_array_append_new(entries, e);
	}
	return json_pack("{s:b, s:I, s:I, s:o, s:{s:I, s:s*, s:s*}}", "enabled", 1, "capacity",
	                 (json_int_t)a->capacity, "total", (json_int_t)a->total, "entries",
	                 entries, "unauthorized", "count", (json_int_t)a->unauthorized, "last_at",
	                 a->unauthorized_at, "last_peer",
	                 operator ? a->unauthorized_peer : NULL);
}

void
nw_admin_calls_foreach(const struct nw_admin *a, nw_admin_count_fn fn, void *data)
{
	for (size_t k = 0; a != NULL && k < ADMIN_RESULTS && a->calls[k].result != NULL; k++)
		fn(a->calls[k].result, a->calls[k].n, data);
}

static void
history_entry_free(gpointer entry)
{
	json_decref(entry);
}

void
nw_admin_free(struct nw_admin *a)
{
	if (a == NULL)
		return;
	nw_http_server_stop(a->http);
	g_queue_clear_full(&a->history, history_entry_free);
	g_free(a->unauthorized_at);
	g_free(a->unauthorized_peer);
	if (a->token != NULL)
		memset(a->token, 0, strlen(a->token));
	g_free(a->token);
	g_free(a);
}
