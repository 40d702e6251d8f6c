/*
 * Configuration loader: parse, walk the document against the field table
 * (config-fields.c), load the fleet, derive defaults that depend on other
 * fields, then apply the cross-field rules. Every problem is collected;
 * nothing stops at the first.
 */
#include "core/config.h"
#include "core/config-fields.h"
#include "core/config-loader.h"
#include "core/regular-file.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static void
error_free(gpointer p)
{
	struct nw_config_error *e = p;

	g_free(e->path);
	g_free(e->message);
	g_free(e);
}

void
nw_config_error_add(GPtrArray *problems, bool warning, const char *path, const char *message)
{
	struct nw_config_error *e = g_new0(struct nw_config_error, 1);

	e->path = g_strdup(path);
	e->message = g_strdup(message);
	e->warning = warning;
	g_ptr_array_add(problems, e);
}

void
nw_loader_problem(struct loader *ld, bool warning, const char *path, const char *fmt, ...)
{
	g_autofree char *message = NULL;
	va_list ap;

	va_start(ap, fmt);
	message = g_strdup_vprintf(fmt, ap);
	va_end(ap);
	nw_config_error_add(ld->problems, warning, path, message);
	ld->n_errors += !warning;
}

void
nw_loader_mark_bad(struct loader *ld, const char *path)
{
	g_hash_table_add(ld->bad, g_strdup(path));
}

bool
nw_loader_given(const struct loader *ld, const char *path)
{
	return g_hash_table_contains(ld->given, path);
}

bool
nw_loader_usable(const struct loader *ld, const char *path)
{
	for (size_t i = 0;; i++) {
		if (path[i] == '.' || path[i] == '[' || path[i] == '\0') {
			char *prefix = g_strndup(path, i);
			bool bad = g_hash_table_contains(ld->bad, prefix);
			g_free(prefix);
			if (bad)
				return false;
		}
		if (path[i] == '\0')
			return true;
	}
}

/* ------------------------------------------------------------ walking --- */

static char *
join(const char *prefix, const char *key)
{
	return *prefix ? g_strconcat(prefix, ".", key, NULL) : g_strdup(key);
}

static void load_engines(struct loader *ld, const json_t *v, const char *shown);

static void
walk(struct loader *ld, const struct nw_table *t, void *base, const json_t *obj,
     const char *rel, const char *shown)
{
	const char *key;
	json_t *v;

	json_object_foreach((json_t *)obj, key, v) {
		char *safe = nw_text_escape(key, 0); /* a path stays one printable line */
		char *r = join(rel, key), *s = join(shown, safe);
		const struct nw_field *f = strchr(key, '.') ? NULL : nw_field_find(t, r);

		if (f || nw_field_is_section(t, r))
			g_hash_table_add(ld->given, g_strdup(s));
		if (f && f->type == NW_FT_ENGINES) {
			load_engines(ld, v, s);
		} else if (f) {
			char *problem = nw_field_store(f, base, v);
			if (problem) {
				ERROR(ld, s, "%s", problem);
				nw_loader_mark_bad(ld, s);
			}
			g_free(problem);
		} else if (!strchr(key, '.') && nw_field_is_section(t, r)) {
			if (json_is_object(v)) {
				walk(ld, t, base, v, r, s);
			} else {
				char *d = nw_json_describe(v);
				ERROR(ld, s, "wrong type, found %s: an object", d);
				nw_loader_mark_bad(ld, s);
				g_free(d);
			}
		} else {
			char *msg = nw_field_unknown_key(t, rel, safe);
			ERROR(ld, s, "%s", msg);
			g_free(msg);
		}
		g_free(r);
		g_free(s);
		g_free(safe);
	}
}

/* Required keys of a table whose section was present. */
static void
check_required(struct loader *ld, const struct nw_table *t, const char *shown)
{
	for (size_t i = 0; i < t->n_fields; i++) {
		const struct nw_field *f = &t->fields[i];
		char *s;

		if (!(f->flags & NW_FF_REQUIRED))
			continue;
		s = join(shown, f->path);
		if (!nw_loader_given(ld, s))
			ERROR(ld, s, "missing: %s", f->valid);
		g_free(s);
	}
}

/* -------------------------------------------------------------- fleet --- */

static void
load_engines(struct loader *ld, const json_t *arr, const char *shown)
{
	struct nw_config *cfg = ld->cfg;
	size_t n;

	if (!json_is_array(arr)) {
		char *d = nw_json_describe(arr);
		ERROR(ld, shown, "wrong type, found %s: an array of at least one engine object", d);
		nw_loader_mark_bad(ld, shown);
		g_free(d);
		return;
	}
	n = json_array_size(arr);
	if (n == 0) {
		ERROR(ld, shown, "no engines: an array of at least one engine object");
		nw_loader_mark_bad(ld, shown);
		return;
	}
	if (n > NW_CONFIG_COUNT_MAX) {
		ERROR(ld, shown, "%zu engines: at most %u", n, NW_CONFIG_COUNT_MAX);
		nw_loader_mark_bad(ld, shown);
		return;
	}
	cfg->fleet.engines = g_new0(struct nw_engine_config, n);
	cfg->fleet.n_engines = (uint32_t)n;

	for (size_t i = 0; i < n; i++) {
		struct nw_engine_config *e = &cfg->fleet.engines[i];
		const json_t *o = json_array_get(arr, i);
		char *es = g_strdup_printf("%s[%zu]", shown, i);
		char *role = g_strconcat(es, ".role", NULL);

		for (size_t k = 0; k < nw_engine_table.n_fields; k++)
			nw_field_set_default(&nw_engine_table.fields[k], e);
		if (!json_is_object(o)) {
			char *d = nw_json_describe(o);
			ERROR(ld, es, "wrong type, found %s: an engine object with id and url", d);
			nw_loader_mark_bad(ld, es);
			g_free(d);
		} else {
			walk(ld, &nw_engine_table, e, o, "", es);
			check_required(ld, &nw_engine_table, es);
			e->role_set = nw_loader_given(ld, role) && nw_loader_usable(ld, role);
			if (e->pinned && !nw_loader_given(ld, role)) {
				char *p = g_strconcat(es, ".pinned", NULL);
				ERROR(ld, p, "a pinned engine needs an explicit role: "
				      "add \"role\": \"prefill\" or \"decode\", or unpin it");
				g_free(p);
			}
		}
		g_free(role);
		g_free(es);
	}

	/* ids name engines in state, metrics and the admin API; one URL listed
	 * twice would count one engine's capacity twice */
	for (size_t i = 1; i < n; i++) {
		const struct nw_engine_config *e = &cfg->fleet.engines[i];
		for (size_t j = 0; j < i; j++) {
			const struct nw_engine_config *o = &cfg->fleet.engines[j];
			if (e->id && o->id && strcmp(e->id, o->id) == 0) {
				char *p = g_strdup_printf("%s[%zu].id", shown, i);
				ERROR(ld, p, "duplicate id \"%s\": ids must be unique", e->id);
				nw_loader_mark_bad(ld, p);
				g_free(p);
				break;
			}
		}
		for (size_t j = 0; j < i; j++) {
			const struct nw_engine_config *o = &cfg->fleet.engines[j];
			if (e->url && o->url && strcmp(e->url, o->url) == 0) {
				char *p = g_strdup_printf("%s[%zu].url", shown, i);
				ERROR(ld, p, "duplicate url \"%s\" (also %s[%zu]): "
				      "each engine has its own URL", e->url, shown, j);
				g_free(p);
				break;
			}
		}
	}
}

/* Engines without a role, in file order, fill prefill up to its floor; the
 * rest decode. Deterministic so a restart gives the same split. */
static void
assign_roles(struct nw_config *cfg)
{
	uint32_t n_prefill = 0;

	for (uint32_t i = 0; i < cfg->fleet.n_engines; i++) {
		const struct nw_engine_config *e = &cfg->fleet.engines[i];
		if (e->role_set && e->role == NW_ROLE_PREFILL)
			n_prefill++;
	}
	for (uint32_t i = 0; i < cfg->fleet.n_engines; i++) {
		struct nw_engine_config *e = &cfg->fleet.engines[i];
		if (e->role_set)
			continue;
		if (n_prefill < cfg->controller.min_prefill) {
			e->role = NW_ROLE_PREFILL;
			n_prefill++;
		} else {
			e->role = NW_ROLE_DECODE;
		}
	}
}

/* plugins.admission.name and serving.admission name the same thing. */
static void
derive_plugin_names(struct loader *ld)
{
	struct nw_config *cfg = ld->cfg;
	const char *mode = nw_config_admission_name(cfg->serving.admission);
	char *name = cfg->plugins.admission.name;

	if (name && nw_loader_given(ld, "serving.admission") && nw_loader_usable(ld, "serving.admission") &&
	    strcmp(name, mode) != 0) {
		ERROR(ld, "plugins.admission.name",
		      "\"%s\" disagrees with serving.admission (\"%s\"): "
		      "the same name as serving.admission, or leave one of the two out",
		      name, mode);
	} else if (name) {
		for (const struct nw_enum_name *m = nw_admission_names; m->name; m++) {
			if (strcmp(m->name, name) == 0)
				cfg->serving.admission = (nw_admission_mode)m->value;
		}
	} else {
		cfg->plugins.admission.name = g_strdup(mode);
	}
	g_free(cfg->plugins.controller.name);
	cfg->plugins.controller.name = g_strdup(cfg->controller.policy);
}

/* ------------------------------------------------------------ loading --- */

static struct nw_config *
config_new(const char *source)
{
	struct nw_config *cfg = g_new0(struct nw_config, 1);

	cfg->source = g_strdup(source);
	for (size_t i = 0; i < nw_config_table.n_fields; i++)
		nw_field_set_default(&nw_config_table.fields[i], cfg);
	return cfg;
}

static void
loader_begin(struct loader *ld, GPtrArray **problems)
{
	memset(ld, 0, sizeof *ld);
	ld->problems = problems && *problems ? g_ptr_array_ref(*problems)
	                                     : g_ptr_array_new_with_free_func(error_free);
	ld->given = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
	ld->bad = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
}

static struct nw_config *
loader_end(struct loader *ld, GPtrArray **problems)
{
	struct nw_config *cfg = ld->cfg;

	if (ld->n_errors && cfg) {
		nw_config_free(cfg);
		cfg = NULL;
	}
	if (problems && !*problems)
		*problems = g_ptr_array_ref(ld->problems);
	g_ptr_array_unref(ld->problems);
	g_hash_table_unref(ld->given);
	g_hash_table_unref(ld->bad);
	return cfg;
}

static void
load_document(struct loader *ld, const char *text, size_t len, const char *name)
{
	json_error_t jerr;
	json_t *root;

	/* The usual ways a file that looks right is not JSON, said plainly. */
	if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) {
		ERROR(ld, NULL, "starts with a byte-order mark: save the file as UTF-8 without one");
		return;
	}
	if (strspn(text, " \t\r\n") == len) {
		ERROR(ld, NULL, "the file is empty: a JSON object");
		return;
	}
	root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		const char *hint = strstr(jerr.text, "near '/'") != NULL
		                   ? " (comments are not JSON: remove them)" : "";

		ERROR(ld, NULL, "malformed JSON at line %d, column %d: %s%s",
		      jerr.line, jerr.column, jerr.text, hint);
		return;
	}
	if (!json_is_object(root)) {
		char *d = nw_json_describe(root);
		ERROR(ld, NULL, "wrong type at the top level, found %s: an object", d);
		g_free(d);
		json_decref(root);
		return;
	}
	ld->cfg = config_new(name);
	walk(ld, &nw_config_table, ld->cfg, root, "", "");
	json_decref(root);
	check_required(ld, &nw_config_table, "");
	assign_roles(ld->cfg);
	derive_plugin_names(ld);
	nw_config_apply_rules(ld);
}

struct nw_config *
nw_config_load_string(const char *text, const char *name, GPtrArray **problems)
{
	struct loader ld;

	g_return_val_if_fail(text != NULL, NULL);
	loader_begin(&ld, problems);
	load_document(&ld, text, strlen(text), name ? name : "<string>");
	return loader_end(&ld, problems);
}

/* The file's bytes, or NULL with the problem reported (only a regular
 * file, at most NW_CONFIG_FILE_MAX_BYTES: core/regular-file.h). */
static GBytes *
read_config_file(struct loader *ld, const char *file)
{
	struct nw_file_read how;
	GBytes *bytes = nw_regular_file_read(file, NW_CONFIG_FILE_MAX_BYTES, &how);

	switch (how.result) {
	case NW_FILE_READ_OK:
		break;
	case NW_FILE_OPEN_FAILED:
		ERROR(ld, NULL, "cannot open the file: %s", g_strerror(how.errno_value));
		break;
	case NW_FILE_NOT_REGULAR:
		ERROR(ld, NULL, "is not a regular file (%s): a JSON file",
		      how.is_dir ? "a directory" : "a pipe, socket or device");
		break;
	case NW_FILE_TOO_LARGE:
		ERROR(ld, NULL, "is larger than %u MiB: a configuration file of at most %u MiB",
		      NW_CONFIG_FILE_MAX_BYTES >> 20, NW_CONFIG_FILE_MAX_BYTES >> 20);
		break;
	case NW_FILE_READ_FAILED:
		ERROR(ld, NULL, "cannot read the file: %s", g_strerror(how.errno_value));
		break;
	}
	return bytes;
}

struct nw_config *
nw_config_load_file(const char *file, GPtrArray **problems)
{
	struct loader ld;
	struct nw_config *cfg;
	GBytes *bytes;

	g_return_val_if_fail(file != NULL, NULL);
	loader_begin(&ld, problems);
	bytes = read_config_file(&ld, file);
	if (bytes != NULL) {
		gsize len;
		const char *text = g_bytes_get_data(bytes, &len);

		load_document(&ld, len > 0 ? text : "", len, file);
		g_bytes_unref(bytes);
	}
	cfg = loader_end(&ld, problems);
	if (cfg != NULL)
		cfg->loaded_unix_us = g_get_real_time(); /* docs/state.md, docs/metrics.md */
	return cfg;
}

/* ---------------------------------------------------------------- API --- */

void
nw_config_free(struct nw_config *cfg)
{
	if (!cfg)
		return;
	for (uint32_t i = 0; i < cfg->fleet.n_engines; i++) {
		for (size_t k = 0; k < nw_engine_table.n_fields; k++)
			nw_field_free(&nw_engine_table.fields[k], &cfg->fleet.engines[i]);
	}
	g_free(cfg->fleet.engines);
	for (size_t i = 0; i < nw_config_table.n_fields; i++)
		nw_field_free(&nw_config_table.fields[i], cfg);
	g_free(cfg->plugins.controller.name);
	g_free(cfg->source);
	g_free(cfg);
}

char *
nw_config_error_format(const char *file, const struct nw_config_error *e)
{
	GString *s = g_string_new(file ? file : "<config>");

	if (e->path && *e->path)
		g_string_append_printf(s, ": %s", e->path);
	g_string_append_printf(s, ": %s", e->message);
	return g_string_free(s, FALSE);
}

void
nw_config_print_problems(const char *file, const GPtrArray *problems, gboolean warnings_only)
{
	for (guint i = 0; problems != NULL && i < problems->len; i++) {
		const struct nw_config_error *e = g_ptr_array_index(problems, i);
		g_autofree char *line = NULL;

		if (warnings_only && !e->warning)
			continue;
		line = nw_config_error_format(file, e);
		fprintf(stderr, "%s%s\n", e->warning ? "warning: " : "", line);
	}
}

struct nw_config *
nw_config_load_reported(const char *file)
{
	GPtrArray *problems = NULL;
	struct nw_config *cfg = nw_config_load_file(file, &problems);

	nw_config_print_problems(file, problems, cfg != NULL);
	if (problems != NULL)
		g_ptr_array_unref(problems);
	return cfg;
}

guint
nw_config_error_count(const GPtrArray *problems)
{
	guint n = 0;

	for (guint i = 0; problems && i < problems->len; i++)
		n += !((const struct nw_config_error *)problems->pdata[i])->warning;
	return n;
}

/* Put value at a dotted path, creating the objects on the way. */
static void
set_path(json_t *root, const char *path, json_t *value)
{
	char **parts = g_strsplit(path, ".", -1);
	json_t *obj = root;
	guint n = g_strv_length(parts);

	for (guint i = 0; i + 1 < n; i++) {
		json_t *next = json_object_get(obj, parts[i]);
		if (!next) {
			next = json_object();
			json_object_set_new(obj, parts[i], next);
		}
		obj = next;
	}
	json_object_set_new(obj, parts[n - 1], value);
	g_strfreev(parts);
}

static json_t *
engines_to_json(const struct nw_config *cfg)
{
	json_t *arr = json_array();

	for (uint32_t i = 0; i < cfg->fleet.n_engines; i++) {
		json_t *o = json_object();
		for (size_t k = 0; k < nw_engine_table.n_fields; k++) {
			const struct nw_field *f = &nw_engine_table.fields[k];
			json_object_set_new(o, f->path, nw_field_to_json(f, &cfg->fleet.engines[i]));
		}
		json_array_append_new(arr, o);
	}
	return arr;
}

json_t *
nw_config_to_json(const struct nw_config *cfg)
{
	json_t *root = json_object();

	for (size_t i = 0; i < nw_config_table.n_fields; i++) {
		const struct nw_field *f = &nw_config_table.fields[i];
		set_path(root, f->path, f->type == NW_FT_ENGINES ? engines_to_json(cfg)
		                                                 : nw_field_to_json(f, cfg));
	}
	return root;
}

uint32_t
nw_config_control_connections(const struct nw_config *cfg)
{
	uint64_t derived;

	if (cfg->engine.control_connections)
		return cfg->engine.control_connections;
	derived = 2 * (uint64_t)cfg->fleet.n_engines;
	return (uint32_t)MAX(derived, 4);
}

uint32_t
nw_config_admission_limit(const struct nw_config *cfg)
{
	return cfg->plugins.admission_max_inflight ? cfg->plugins.admission_max_inflight
	                                           : cfg->serving.max_connections;
}

/* controller.<name>.* as one object, each field as nw_config_to_json
 * writes it (transfer full). */
static json_t *
controller_section(const struct nw_config *cfg, const char *name)
{
	g_autofree char *prefix = g_strdup_printf("controller.%s.", name);
	size_t len = strlen(prefix);
	json_t *section = json_object();

	for (size_t i = 0; i < nw_config_table.n_fields; i++) {
		const struct nw_field *f = &nw_config_table.fields[i];

		if (strncmp(f->path, prefix, len) == 0)
			json_object_set_new(section, f->path + len, nw_field_to_json(f, cfg));
	}
	return section;
}

json_t *
nw_config_plugin_section(const struct nw_config *cfg, const struct nw_plugin_config *pc,
                         narwhal_plugin_kind kind)
{
	json_t *config;

	if (kind == NARWHAL_KIND_CONTROLLER) {
		config = json_pack("{s:o, s:o}", "reactive", controller_section(cfg, "reactive"),
		                   "thresholds", controller_section(cfg, "thresholds"));
		if (json_is_object(pc->config))
			json_object_update_recursive(config, pc->config);
		return config;
	}
	if (kind != NARWHAL_KIND_ADMISSION || !json_is_object(pc->config) ||
	    json_object_get(pc->config, "admission_margin") != NULL)
		return json_incref(pc->config);
	config = json_copy(pc->config);
	json_object_set_new(config, "admission_margin", json_real(cfg->serving.admission_margin));
	return config;
}

const char *
nw_config_dialect_path(const struct nw_config *cfg, const char *name)
{
	return json_string_value(json_object_get(json_object_get(cfg->plugins.dialects, name),
	                                          "path"));
}

json_t *
nw_config_dialect_section(const struct nw_config *cfg, const char *name)
{
	json_t *entry = json_object_get(cfg->plugins.dialects, name);
	json_t *section;

	if (!json_is_object(entry) || json_object_get(entry, "path") == NULL)
		return json_incref(entry);
	section = json_copy(entry);
	json_object_del(section, "path");
	return section;
}

const char *
nw_config_admission_name(nw_admission_mode mode)
{
	return nw_enum_name_of(nw_admission_names, (int)mode);
}

const char *
nw_config_role_name(nw_engine_role role)
{
	return nw_enum_name_of(nw_role_names, (int)role);
}
