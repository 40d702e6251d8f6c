/*
 * Configuration reload (docs/deployment.md, "Reloading the
 * configuration"): SIGHUP and the admin API both call nw_daemon_reload.
 * The file is read and checked whole, a new generation is built from it
 * (daemon-generation.h) and made current; an invalid file, or one that
 * changes what only a restart can, changes nothing and says why.
 */
#include "build-config.h"

#include "daemon-internal.h"

#include <string.h>

#include "core/access-log.h"
#include "core/log.h"
#include "daemon.h"

/* Fields fixed when the listener or the engine pools were made: a change
 * is refused (docs/deployment.md lists them). "admin" is the admin
 * listener's section, whole. */
static const char *const restart_fields[] = {
	"server.host",
	"server.port",
	"server.client_timeout_s",         /* libmicrohttpd's connection timeout */
	"server.max_pending_connections",  /* part of the listener's connection limit */
	"serving.max_connections",         /* the serving pool and the connection limit */
	"serving.queue_capacity",          /* the listener's connection limit */
	"engine.tls_ca_file",              /* the pools' TLS settings */
	"engine.tls_verify",
	"engine.control_connections",      /* the control pool */
	"admin",
};

/* The value at a dotted path of the effective configuration, or NULL. */
static json_t *
path_get(json_t *root, const char *path)
{
	g_auto(GStrv) parts = g_strsplit(path, ".", -1);

	for (char **p = parts; *p != NULL && root != NULL; p++)
		root = json_object_get(root, *p);
	return root;
}

static char *
value_text(const json_t *v)
{
	char *text = v ? json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
	char *out = g_strdup(text ? text : "(absent)");

	free(text);
	return out;
}

/* Returns the number of fields refused. */
static guint
check_restart_fields(json_t *running, json_t *next, GPtrArray *problems)
{
	guint refused = 0;

	for (size_t i = 0; i < G_N_ELEMENTS(restart_fields); i++) {
		json_t *a = path_get(running, restart_fields[i]), *b = path_get(next, restart_fields[i]);
		g_autofree char *was = NULL, *now = NULL, *message = NULL;

		if ((a == NULL && b == NULL) || (a != NULL && b != NULL && json_equal(a, b)))
			continue;
		was = value_text(a);
		now = value_text(b);
		message = g_strdup_printf("cannot change without a restart (running: %s, file: %s): "
		                          "restore the running value to reload, or restart Narwhal",
		                          was, now);
		nw_config_error_add(problems, false, restart_fields[i], message);
		refused++;
	}
	return refused;
}

/* The dotted paths whose values differ, objects compared field by field;
 * the engines are compared by id (added and removed ones are told apart). */
static void
diff(json_t *a, json_t *b, const char *prefix, GPtrArray *out)
{
	const char *key;
	json_t *v;

	if (json_is_object(a) && json_is_object(b)) {
		json_object_foreach(a, key, v) {
			g_autofree char *path = *prefix ? g_strdup_printf("%s.%s", prefix, key)
			                                : g_strdup(key);

			diff(v, json_object_get(b, key), path, out);
		}
		json_object_foreach(b, key, v) {
			if (json_object_get(a, key) == NULL)
				g_ptr_array_add(out, *prefix ? g_strdup_printf("%s.%s", prefix, key)
				                             : g_strdup(key));
		}
		return;
	}
	if (strcmp(prefix, "fleet.engines") == 0 && json_is_array(a) && json_is_array(b)) {
		size_t i, k;
		json_t *e, *f;

		json_array_foreach(a, i, e) {
			json_array_foreach(b, k, f) {
				const char *id = json_string_value(json_object_get(e, "id"));

				if (g_strcmp0(id, json_string_value(json_object_get(f, "id"))) == 0) {
					g_autofree char *path = g_strdup_printf("fleet.engines[%s]", id);

					diff(e, f, path, out);
				}
			}
		}
		return;
	}
	if (a == NULL || b == NULL || !json_equal(a, b))
		g_ptr_array_add(out, g_strdup(prefix));
}

/* "admission: open -> predictive", "placement (config)", per plugin kind
 * whose choice or configuration changed; and the dialects'. */
static char *
plugins_changed(json_t *running, json_t *next)
{
	static const char *const kinds[] = { "admission", "placement", "controller" };
	GString *out = g_string_new(NULL);
	json_t *ra = path_get(running, "plugins.dialects"), *na = path_get(next, "plugins.dialects");
	const char *key;
	json_t *v;

	for (size_t i = 0; i < G_N_ELEMENTS(kinds); i++) {
		json_t *r = json_object_get(path_get(running, "plugins"), kinds[i]);
		json_t *n = json_object_get(path_get(next, "plugins"), kinds[i]);
		const char *rn = json_string_value(json_object_get(r, "name"));
		const char *nn = json_string_value(json_object_get(n, "name"));

		/* The controller is named by controller.policy, not in its
		 * plugins section. */
		if (json_equal(r, n) &&
		    (i != 2 || json_equal(path_get(running, "controller.policy"),
		                          path_get(next, "controller.policy"))))
			continue;
		if (out->len > 0)
			g_string_append(out, ", ");
		if (rn == NULL && nn == NULL && i == 2) {
			rn = json_string_value(path_get(running, "controller.policy"));
			nn = json_string_value(path_get(next, "controller.policy"));
		}
		if (g_strcmp0(rn, nn) != 0 ||
		    !json_equal(json_object_get(r, "path"), json_object_get(n, "path")))
			g_string_append_printf(out, "%s: %s -> %s", kinds[i], rn ? rn : "(path)",
			                       nn ? nn : "(path)");
		else
			g_string_append_printf(out, "%s: %s (config)", kinds[i], nn ? nn : "(path)");
	}
	json_object_foreach(na, key, v) {
		if (json_equal(v, json_object_get(ra, key)))
			continue;
		g_string_append_printf(out, "%sdialect %s (%s)", out->len ? ", " : "", key,
		                       json_object_get(ra, key) ? "config" : "new");
	}
	return g_string_free(out, FALSE);
}

static char *
join(GPtrArray *items, const char *sep)
{
	char *s;

	g_ptr_array_add(items, NULL);
	s = g_strjoinv(sep, (char **)items->pdata);
	g_ptr_array_remove_index(items, items->len - 1);
	return s;
}

static gboolean
refuse(GError **error, int code, const char *file, GPtrArray *problems, const char *single)
{
	GPtrArray *lines = g_ptr_array_new_with_free_func(g_free);
	g_autofree char *text = NULL;

	for (guint i = 0; problems != NULL && i < problems->len; i++) {
		const struct nw_config_error *e = g_ptr_array_index(problems, i);

		if (!e->warning)
			g_ptr_array_add(lines, nw_config_error_format(file, e));
	}
	if (single != NULL)
		g_ptr_array_add(lines, g_strdup_printf("%s: %s", file, single));
	text = join(lines, "; ");
	g_ptr_array_unref(lines);
	nw_log(NARWHAL_LOG_ERROR, "reload_failed", "file", file, "error", text,
	       "message", "nothing changed: the running configuration stays in force", NULL);
	g_set_error(error, G_FILE_ERROR, code, "%s", text);
	return FALSE;
}

static void
log_warnings(const char *file, GPtrArray *problems)
{
	for (guint i = 0; problems != NULL && i < problems->len; i++) {
		const struct nw_config_error *e = g_ptr_array_index(problems, i);
		g_autofree char *line = NULL;

		if (!e->warning)
			continue;
		line = nw_config_error_format(file, e);
		nw_log(NARWHAL_LOG_WARNING, "config_warning", "problem", line, NULL);
	}
}

static json_t *
string_array(GPtrArray *items)
{
	json_t *a = json_array();

	for (guint i = 0; i < items->len; i++)
		json_array_append_new(a, json_string(g_ptr_array_index(items, i)));
	return a;
}

/* What the new generation changes, logged once it is current; returned
 * as the reload's summary (transfer full). */
static json_t *
log_applied(struct nw_daemon *d, json_t *running, json_t *next, GPtrArray *added,
            GPtrArray *removed)
{
	g_autoptr(GPtrArray) fields = g_ptr_array_new_with_free_func(g_free);
	g_autofree char *plugins = plugins_changed(running, next);
	g_autofree char *a = join(added, ","), *r = join(removed, ",");
	g_autofree char *f = NULL;
	char gen[16], held[16];
	struct nw_generation *old = d->gen->older;

	diff(running, next, "", fields);
	f = join(fields, ",");
	for (guint i = 0; i < removed->len; i++) {
		const char *id = g_ptr_array_index(removed, i);
		uint32_t resident = 0;
		char n[16];

		for (uint32_t j = 0; j < old->fleet->view.n_engines; j++) {
			if (strcmp(old->fleet->ids[j], id) == 0)
				resident = old->fleet->engines[j].resident_prefill +
				           old->fleet->engines[j].resident_decode;
		}
		g_snprintf(n, sizeof n, "%u", resident);
		nw_log(NARWHAL_LOG_WARNING, "engine_removed", "engine", id, "state", "draining",
		       "resident", n, NULL);
	}
	for (guint i = 0; i < added->len; i++)
		nw_log(NARWHAL_LOG_INFO, "engine_added", "engine", g_ptr_array_index(added, i),
		       "state", "unprobed", NULL);
	g_snprintf(gen, sizeof gen, "%u", d->gen->number);
	g_snprintf(held, sizeof held, "%u", nw_generation_retained(old));
	nw_log(NARWHAL_LOG_WARNING, "reload_applied", "generation", gen, "engines_added", a,
	       "engines_removed", r, "plugins", plugins, "fields", f, "in_flight_old", held, NULL);
	return json_pack("{s:I, s:o, s:o, s:s, s:o, s:I}", "generation", (json_int_t)d->gen->number,
	                 "engines_added", string_array(added), "engines_removed",
	                 string_array(removed), "plugins", plugins, "fields", string_array(fields),
	                 "in_flight_old", (json_int_t)nw_generation_retained(old));
}

static gboolean
reload(struct nw_daemon *d, json_t **summary, GError **error)
{
	const char *file = d->config_file;
	GPtrArray *problems = NULL;
	struct nw_config *cfg;
	struct nw_generation *g;
	struct nw_generation_shared shared = nw_daemon_shared(d);
	g_autoptr(GPtrArray) added = g_ptr_array_new(), removed = g_ptr_array_new();
	json_t *running, *next;
	GError *build_error = NULL;
	gboolean ok;

	if (d->state != NW_DAEMON_SERVING)
		return refuse(error, G_FILE_ERROR_AGAIN, file, NULL,
		              "Narwhal is stopping: a reload is not applied");
	cfg = nw_config_load_file(file, &problems);
	if (cfg == NULL) {
		ok = refuse(error, G_FILE_ERROR_INVAL, file, problems, NULL);
		g_ptr_array_unref(problems);
		return ok;
	}
	running = nw_config_to_json(d->gen->cfg);
	next = nw_config_to_json(cfg);
	if (check_restart_fields(running, next, problems) > 0) {
		ok = refuse(error, G_FILE_ERROR_PERM, file, problems, NULL);
		goto out_cfg;
	}
	/* A configuration loaded has no error; its plugins are checked as
	 * --check-config does. */
	if (!nw_daemon_check_plugins(cfg, problems, NULL, TRUE)) {
		ok = refuse(error, G_FILE_ERROR_INVAL, file, problems, NULL);
		goto out_cfg;
	}
	if (nw_config_control_connections(cfg) > d->control_connections)
		nw_log(NARWHAL_LOG_WARNING, "config_warning", "problem",
		       "engine.control_connections: the new fleet would derive more control "
		       "connections than the pool made at start holds: restart to grow it", NULL);
	log_warnings(file, problems);
	g_clear_pointer(&problems, g_ptr_array_unref);

	/* Built whole before anything changes (API keys read, plugins
	 * loaded); a failure here still changes nothing. */
	g = nw_generation_new(cfg, &shared, &build_error);
	cfg = NULL;
	if (g == NULL) {
		ok = refuse(error, G_FILE_ERROR_INVAL, file, NULL, build_error->message);
		g_error_free(build_error);
		goto out;
	}
	nw_generation_adopt(g, d->gen, added, removed);
	nw_daemon_generation_switch(d, g);
	{
		json_t *s = log_applied(d, running, next, added, removed);

		if (summary != NULL)
			*summary = s;
		else
			json_decref(s);
	}
	nw_log_setup(g->cfg->log.level, g->cfg->log.format);
	nw_access_log_setup(g->cfg->log.access);
	ok = TRUE;
	goto out;

out_cfg:
	nw_config_free(cfg);
out:
	if (problems != NULL)
		g_ptr_array_unref(problems);
	json_decref(running);
	json_decref(next);
	return ok;
}

gboolean
nw_daemon_reload(struct nw_daemon *d, json_t **summary, GError **error)
{
	GError *local = NULL;

	if (reload(d, summary, &local))
		return TRUE;
	/* Counted by result for the metrics (docs/metrics.md). */
	if (g_error_matches(local, G_FILE_ERROR, G_FILE_ERROR_INVAL))
		d->reloads_failed++;
	else
		d->reloads_refused++;
	g_propagate_error(error, local);
	return FALSE;
}
