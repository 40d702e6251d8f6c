/*
 * Configuration loader: parse, walk the document against the field table
 * (config-fields.c), load the fleet, derive defaults that depend on other
 * fields, then apply the cross-field rules. Every problem is collected;
 * nothing stops at the first.
 */
#include "core/config.h"
#include "core/config-fields.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

struct loader {
	GPtrArray *problems;
	guint n_errors;        /* errors added by this load */
	struct nw_config *cfg;
	GHashTable *given;     /* displayed paths present in the file */
	GHashTable *bad;       /* displayed paths whose value was refused */
};

static void
error_free(gpointer p)
{
	struct nw_config_error *e = p;

	g_free(e->path);
	g_free(e->message);
	g_free(e);
}

static void add_problem(struct loader *ld, bool warning, const char *path, const char *fmt, ...)
	G_GNUC_PRINTF(4, 5);

void
nw_config_error_add(GPtrArray *problems, bool warning, const char *path, const char *message)
{
	struct nw_config_error *e = g_new0(struct nw_config_error, 1);

	e->path = g_strdup(path);
	e->message = g_strdup(message);
	e->warning = warning;
	g_ptr_array_add(problems, e);
}

static void
add_problem(struct loader *ld, bool warning, const char *path, const char *fmt, ...)
{
	g_autofree char *message = NULL;
	va_list ap;

	va_start(ap, fmt);
	message = g_strdup_vprintf(fmt, ap);
	va_end(ap);
	nw_config_error_add(ld->problems, warning, path, message);
	ld->n_errors += !warning;
}

/* Record that the value at path was refused (see usable()). */
static void
mark_bad(struct loader *ld, const char *path)
{
	g_hash_table_add(ld->bad, g_strdup(path));
}

#define ERROR(ld, path, ...) add_problem((ld), false, (path), __VA_ARGS__)
#define WARN(ld, path, ...) add_problem((ld), true, (path), __VA_ARGS__)

static bool
given(const struct loader *ld, const char *path)
{
	return g_hash_table_contains(ld->given, path);
}

/* A value cross-field rules may trust: neither it nor a section or array
 * element above it was refused (a refused field keeps its default, and a
 * rule judging the default would only add noise). */
static bool
usable(const struct loader *ld, const char *path)
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
				mark_bad(ld, s);
			}
			g_free(problem);
		} else if (!strchr(key, '.') && nw_field_is_section(t, r)) {
			if (json_is_object(v)) {
				walk(ld, t, base, v, r, s);
			} else {
				char *d = nw_json_describe(v);
				ERROR(ld, s, "wrong type, found %s: an object", d);
				mark_bad(ld, s);
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
		if (!given(ld, s))
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
		mark_bad(ld, shown);
		g_free(d);
		return;
	}
	n = json_array_size(arr);
	if (n == 0) {
		ERROR(ld, shown, "no engines: an array of at least one engine object");
		mark_bad(ld, shown);
		return;
	}
	if (n > NW_CONFIG_COUNT_MAX) {
		ERROR(ld, shown, "%zu engines: at most %u", n, NW_CONFIG_COUNT_MAX);
		mark_bad(ld, shown);
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
			mark_bad(ld, es);
			g_free(d);
		} else {
			walk(ld, &nw_engine_table, e, o, "", es);
			check_required(ld, &nw_engine_table, es);
			e->role_set = given(ld, role) && usable(ld, role);
			if (e->pinned && !given(ld, role)) {
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
				mark_bad(ld, p);
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

	if (name && given(ld, "serving.admission") && usable(ld, "serving.admission") &&
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

/* ------------------------------------------------- cross-field rules --- */

#define USABLE2(ld, a, b) (usable((ld), (a)) && usable((ld), (b)))

/* spec 4.1: admission may not admit more than the dispatch pool holds */
static void
rule_admission_limit(struct loader *ld)
{
	const struct nw_config *c = ld->cfg;

	if (!USABLE2(ld, "plugins.admission.max_inflight", "serving.max_connections"))
		return;
	if (c->plugins.admission_max_inflight > c->serving.max_connections)
		ERROR(ld, "plugins.admission.max_inflight",
		      "%u is above serving.max_connections (%u): 0 (use serving.max_connections) "
		      "or an integer from 1 to serving.max_connections",
		      c->plugins.admission_max_inflight, c->serving.max_connections);
}

/* spec 4.2: a queue needs a bounded wait and measured phase concurrency */
static void
rule_queueing(struct loader *ld)
{
	const struct nw_config *c = ld->cfg;
	uint32_t q = c->serving.queue_capacity;

	if (!usable(ld, "serving.queue_capacity") || q == 0)
		return;
	if (usable(ld, "serving.queue_timeout_s") && c->serving.queue_timeout_s <= 0)
		ERROR(ld, "serving.queue_timeout_s",
		      "0 is not allowed while queueing is on (serving.queue_capacity is %u): "
		      "a number of seconds greater than 0, or serving.queue_capacity 0", q);
	if (usable(ld, "serving.prefill_concurrency") && c->serving.prefill_concurrency == 0)
		ERROR(ld, "serving.prefill_concurrency",
		      "0 is not allowed while queueing is on (serving.queue_capacity is %u): "
		      "the measured number of resident prefill requests per engine", q);
	if (usable(ld, "serving.decode_concurrency") && c->serving.decode_concurrency == 0)
		ERROR(ld, "serving.decode_concurrency",
		      "0 is not allowed while queueing is on (serving.queue_capacity is %u): "
		      "the measured number of resident decode requests per engine", q);
}

/* spec 4.2: queueing and retries need a handoff cap, and any cap must end
 * before the producer's KV lease does */
static void
rule_handoff(struct loader *ld)
{
	const struct nw_config *c = ld->cfg;
	double h = c->serving.handoff_timeout_s;
	const struct nw_engine_config *shortest = NULL;
	uint32_t at = 0;

	if (!usable(ld, "serving.handoff_timeout_s"))
		return;
	if (h <= 0) {
		bool queue = usable(ld, "serving.queue_capacity") && c->serving.queue_capacity > 0;
		bool retry = usable(ld, "serving.max_attempts") && c->serving.max_attempts > 1;
		if (queue || retry)
			ERROR(ld, "serving.handoff_timeout_s",
			      "0 is not allowed while %s: a number of seconds greater than 0 "
			      "and below every engine's kv_lease_s",
			      queue && retry ? "queueing and retries are on"
			      : queue ? "queueing is on (serving.queue_capacity > 0)"
			              : "retries are on (serving.max_attempts > 1)");
		return;
	}
	for (uint32_t i = 0; i < c->fleet.n_engines; i++) {
		const struct nw_engine_config *e = &c->fleet.engines[i];
		char *p = g_strdup_printf("fleet.engines[%u].kv_lease_s", i);
		if (usable(ld, p) && (!shortest || e->kv_lease_s < shortest->kv_lease_s)) {
			shortest = e;
			at = i;
		}
		g_free(p);
	}
	if (shortest && h >= shortest->kv_lease_s) {
		char *hs = nw_number_text(h), *ls = nw_number_text(shortest->kv_lease_s);
		ERROR(ld, "serving.handoff_timeout_s",
		      "%s is not below fleet.engines[%u].kv_lease_s (%s): "
		      "a number of seconds below every engine's KV lease", hs, at, ls);
		g_free(hs);
		g_free(ls);
	}
}

static void
rule_retry(struct loader *ld)
{
	const struct nw_config *c = ld->cfg;

	if (USABLE2(ld, "serving.retry_cap_s", "serving.retry_base_s") &&
	    c->serving.retry_cap_s < c->serving.retry_base_s) {
		char *a = nw_number_text(c->serving.retry_cap_s), *b = nw_number_text(c->serving.retry_base_s);
		ERROR(ld, "serving.retry_cap_s",
		      "%s is below serving.retry_base_s (%s): at least serving.retry_base_s", a, b);
		g_free(a);
		g_free(b);
	}
	if (USABLE2(ld, "recovery.verify_backoff_max_s", "recovery.verify_backoff_s") &&
	    c->recovery.verify_backoff_max_s < c->recovery.verify_backoff_s) {
		char *a = nw_number_text(c->recovery.verify_backoff_max_s);
		char *b = nw_number_text(c->recovery.verify_backoff_s);

		ERROR(ld, "recovery.verify_backoff_max_s",
		      "%s is below recovery.verify_backoff_s (%s): at least recovery.verify_backoff_s",
		      a, b);
		g_free(a);
		g_free(b);
	}
	if (USABLE2(ld, "serving.retry_budget", "serving.max_attempts") &&
	    c->serving.max_attempts > 1 && c->serving.retry_budget == 0)
		WARN(ld, "serving.retry_budget",
		     "0 credits means no retry ever runs although serving.max_attempts is %u: "
		     "a budget above 0, or serving.max_attempts 1", c->serving.max_attempts);
}

/* The request deadline caps every other wait; a longer one never fires. */
static void
rule_deadlines(struct loader *ld)
{
	const struct nw_config *c = ld->cfg;
	double req = c->serving.request_timeout_s;
	char *rs;

	if (!usable(ld, "serving.request_timeout_s"))
		return;
	rs = nw_number_text(req);
	if (usable(ld, "serving.prefill_timeout_s") && c->serving.prefill_timeout_s > req) {
		char *v = nw_number_text(c->serving.prefill_timeout_s);
		WARN(ld, "serving.prefill_timeout_s",
		     "%s is above serving.request_timeout_s (%s) and can never fire: "
		     "at most serving.request_timeout_s", v, rs);
		g_free(v);
	}
	if (USABLE2(ld, "serving.queue_timeout_s", "serving.queue_capacity") &&
	    c->serving.queue_capacity > 0 && c->serving.queue_timeout_s > req) {
		char *v = nw_number_text(c->serving.queue_timeout_s);
		WARN(ld, "serving.queue_timeout_s",
		     "%s is above serving.request_timeout_s (%s) and can never fire: "
		     "at most serving.request_timeout_s", v, rs);
		g_free(v);
	}
	g_free(rs);
}

/* spec 7: shrink below expand; 7.7: span <= max span <= window, and the
 * correction bounds in order */
static void
rule_controller_ranges(struct loader *ld)
{
	const struct nw_config *c = ld->cfg;
	const __typeof__(c->controller.reactive) *r = &c->controller.reactive;
	char *a, *b;

	if (USABLE2(ld, "controller.thresholds.shrink", "controller.thresholds.expand") &&
	    c->controller.thresholds.shrink >= c->controller.thresholds.expand) {
		a = nw_number_text(c->controller.thresholds.shrink);
		b = nw_number_text(c->controller.thresholds.expand);
		ERROR(ld, "controller.thresholds.shrink",
		      "%s is not below controller.thresholds.expand (%s): "
		      "a number from 0 up to but not including expand", a, b);
		g_free(a);
		g_free(b);
	}
	if (USABLE2(ld, "controller.reactive.evidence_span_s",
	            "controller.reactive.evidence_max_span_s") &&
	    r->evidence_span_s > r->evidence_max_span_s) {
		a = nw_number_text(r->evidence_span_s);
		b = nw_number_text(r->evidence_max_span_s);
		ERROR(ld, "controller.reactive.evidence_span_s",
		      "%s is above controller.reactive.evidence_max_span_s (%s): "
		      "at most evidence_max_span_s", a, b);
		g_free(a);
		g_free(b);
	}
	if (USABLE2(ld, "controller.reactive.evidence_max_span_s",
	            "controller.reactive.window_s") &&
	    r->evidence_max_span_s > r->window_s) {
		a = nw_number_text(r->evidence_max_span_s);
		b = nw_number_text(r->window_s);
		ERROR(ld, "controller.reactive.evidence_max_span_s",
		      "%s is above controller.reactive.window_s (%s): at most window_s", a, b);
		g_free(a);
		g_free(b);
	}
	if (USABLE2(ld, "controller.reactive.decode_correction_max",
	            "controller.reactive.decode_correction_min") &&
	    r->decode_correction_max < r->decode_correction_min) {
		a = nw_number_text(r->decode_correction_max);
		b = nw_number_text(r->decode_correction_min);
		ERROR(ld, "controller.reactive.decode_correction_max",
		      "%s is below controller.reactive.decode_correction_min (%s): "
		      "at least decode_correction_min", a, b);
		g_free(a);
		g_free(b);
	}
}

/* spec 7 advises: one residual per engine per monitor pass, so a health
 * window holds at most window / interval samples */
static void
rule_health_samples(struct loader *ld)
{
	const struct nw_config *c = ld->cfg;
	double fit;

	if (!usable(ld, "recovery.health.min_samples") || !usable(ld, "recovery.health.window_s") ||
	    !usable(ld, "controller.monitor_interval_s"))
		return;
	/* 1e-9 keeps 0.3 / 0.1 at 3, not 2.9999... */
	fit = floor(c->recovery.health.window_s / c->controller.monitor_interval_s + 1e-9);
	if (c->recovery.health.min_samples > fit)
		WARN(ld, "recovery.health.min_samples",
		     "%u is above floor(recovery.health.window_s / controller.monitor_interval_s) "
		     "= %.0f, so a window may never collect enough samples: at most %.0f, "
		     "or a longer window", c->recovery.health.min_samples, fit, fit);
}

/* spec 7.2: the floors fit the fleet; one engine with both floors at 1
 * serves aggregate. Pins can make a floor unreachable: only a warning, as
 * the controller copes at run time with the best split it can reach. */
static void
rule_floors(struct loader *ld)
{
	const struct nw_config *c = ld->cfg;
	uint64_t minp = c->controller.min_prefill, mind = c->controller.min_decode;
	uint32_t n = c->fleet.n_engines, pinned_p = 0, pinned_d = 0, np = 0, nd = 0;

	if (n == 0 || !usable(ld, "fleet.engines") ||
	    !USABLE2(ld, "controller.min_prefill", "controller.min_decode"))
		return;
	if (n == 1 && minp == 1 && mind == 1)
		return; /* aggregate */
	if (minp + mind > n) {
		ERROR(ld, "controller.min_prefill",
		      "%" G_GUINT64_FORMAT " plus controller.min_decode %" G_GUINT64_FORMAT
		      " needs %" G_GUINT64_FORMAT " engines but fleet.engines has %u: "
		      "floors that add up to at most the number of engines "
		      "(or one engine with both floors at 1)", minp, mind, minp + mind, n);
		return;
	}
	for (uint32_t i = 0; i < n; i++) {
		const struct nw_engine_config *e = &c->fleet.engines[i];
		if (e->pinned && e->role_set && e->role == NW_ROLE_PREFILL)
			pinned_p++;
		if (e->pinned && e->role_set && e->role == NW_ROLE_DECODE)
			pinned_d++;
		np += e->role == NW_ROLE_PREFILL;
		nd += e->role == NW_ROLE_DECODE;
	}
	if (n - pinned_p < mind)
		WARN(ld, "controller.min_decode",
		     "engines pinned to prefill leave %u that can decode, fewer than %" G_GUINT64_FORMAT
		     ": fewer prefill pins or a lower floor", n - pinned_p, mind);
	else if (nd < mind)
		WARN(ld, "controller.min_decode",
		     "the initial roles give %u decode engines, fewer than %" G_GUINT64_FORMAT
		     ", so the controller will move engines at startup: "
		     "initial roles that meet the floor", nd, mind);
	if (n - pinned_d < minp)
		WARN(ld, "controller.min_prefill",
		     "engines pinned to decode leave %u that can prefill, fewer than %" G_GUINT64_FORMAT
		     ": fewer decode pins or a lower floor", n - pinned_d, minp);
	else if (np < minp)
		WARN(ld, "controller.min_prefill",
		     "the initial roles give %u prefill engines, fewer than %" G_GUINT64_FORMAT
		     ", so the controller will move engines at startup: "
		     "initial roles that meet the floor", np, minp);
}

/* plugins.dialects: one config object per dialect name */
static void
rule_dialects(struct loader *ld)
{
	const struct nw_config *c = ld->cfg;
	const char *name;
	json_t *v;

	if (!usable(ld, "plugins.dialects"))
		return;
	json_object_foreach(c->plugins.dialects, name, v) {
		char *safe = nw_text_escape(name, 0);
		char *p = g_strconcat("plugins.dialects.", safe, NULL);
		bool used = false;

		if (*name == '\0' || name[strspn(name, NW_CHARS_PLUGIN)] != '\0') {
			ERROR(ld, p, "\"%s\" is not a dialect name: "
			      "a plugin name of lowercase letters, digits and '-'", safe);
		} else if (!json_is_object(v)) {
			char *d = nw_json_describe(v);
			ERROR(ld, p, "wrong type, found %s: an object, handed to the dialect as it is",
			      d);
			g_free(d);
		} else {
			for (uint32_t i = 0; i < c->fleet.n_engines && !used; i++)
				used = g_strcmp0(c->fleet.engines[i].dialect, name) == 0;
			if (!used && usable(ld, "fleet.engines"))
				WARN(ld, p, "no engine uses dialect \"%s\", so this section is ignored: "
				     "the dialect of an engine in fleet.engines", name);
		}
		g_free(p);
		g_free(safe);
	}
}

/* The admin API changes what the router does: it listens on loopback
 * unless the operator says otherwise (docs/admin.md, beyond the spec). */
static bool
is_loopback(const char *host)
{
	struct in_addr v4;
	struct in6_addr v6;

	if (inet_pton(AF_INET, host, &v4) == 1)
		return (ntohl(v4.s_addr) >> 24) == 127;
	return inet_pton(AF_INET6, host, &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

static void
rule_admin_bind(struct loader *ld)
{
	const struct nw_config *c = ld->cfg;

	if (!USABLE2(ld, "admin.host", "admin.allow_remote") || c->admin.allow_remote ||
	    is_loopback(c->admin.host))
		return;
	ERROR(ld, "admin.host", "\"%s\" is not a loopback address, and the admin API can drain, "
	      "eject and move engines: a loopback address (127.0.0.1, ::1), or set "
	      "admin.allow_remote to true to listen there", c->admin.host);
}

/* plugins.controller.config is merged over the controller.reactive and
 * controller.thresholds sections the plugin is handed, for the plugin
 * alone (docs/configuration.md, "Plugins"). These fields are also
 * Narwhal's own, read by the controller host's guards (control/
 * controller.h), the demand ledger and pricing, which keep the
 * controller.* value: a different one set there splits the two. */
static const char *const controller_host_fields[] = {
	"reactive.window_s", "reactive.utilization", "reactive.evidence_span_s",
	"reactive.evidence_max_span_s", "reactive.evidence_min_arrivals",
	"reactive.decode_correction_min", "reactive.decode_correction_max",
	"reactive.decode_correction_alpha", "reactive.decode_correction_min_samples",
	"thresholds.shrink", "thresholds.cooldown_s", "thresholds.dwell_s",
	"thresholds.panic_ratio", "thresholds.flip_resident_guard",
};

static void
rule_controller_overrides(struct loader *ld)
{
	const json_t *config = ld->cfg->plugins.controller.config;

	if (!usable(ld, "plugins.controller.config") || !json_is_object(config))
		return;
	for (size_t i = 0; i < G_N_ELEMENTS(controller_host_fields); i++) {
		const char *name = controller_host_fields[i];
		g_autofree char *section = g_strndup(name, strcspn(name, "."));
		g_autofree char *path = g_strconcat("controller.", name, NULL);
		const json_t *set = json_object_get(json_object_get(config, section),
		                                    name + strlen(section) + 1);
		json_t *own;

		if (set == NULL || !usable(ld, path))
			continue;
		for (size_t k = 0; k < nw_config_table.n_fields; k++) {
			const struct nw_field *f = &nw_config_table.fields[k];
			g_autofree char *shown = NULL;

			if (strcmp(f->path, path) != 0)
				continue;
			own = nw_field_to_json(f, ld->cfg);
			if (!json_is_number(set) || json_number_value(set) != json_number_value(own)) {
				g_autofree char *where = g_strconcat("plugins.controller.config.", name,
				                                     NULL);

				shown = json_dumps(own, JSON_ENCODE_ANY);
				WARN(ld, where, "given to the plugin alone: Narwhal's own guards and "
				     "estimates keep %s (%s): set %s instead, for both", path, shown, path);
			}
			json_decref(own);
		}
	}
}

static void (*const rules[])(struct loader *) = {
	rule_admission_limit, rule_queueing, rule_handoff, rule_retry, rule_deadlines,
	rule_controller_ranges, rule_controller_overrides, rule_health_samples, rule_floors,
	rule_dialects, rule_admin_bind,
};

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

	root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		ERROR(ld, NULL, "malformed JSON at line %d, column %d: %s",
		      jerr.line, jerr.column, jerr.text);
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
	for (size_t i = 0; i < G_N_ELEMENTS(rules); i++)
		rules[i](ld);
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

struct nw_config *
nw_config_load_file(const char *file, GPtrArray **problems)
{
	struct loader ld;
	struct nw_config *cfg;
	GString *buf;
	char chunk[8192];
	size_t n;
	FILE *fp;

	g_return_val_if_fail(file != NULL, NULL);
	loader_begin(&ld, problems);
	fp = fopen(file, "rb");
	if (!fp) {
		ERROR(&ld, NULL, "cannot open the file: %s", g_strerror(errno));
		return loader_end(&ld, problems);
	}
	buf = g_string_new(NULL);
	while ((n = fread(chunk, 1, sizeof chunk, fp)) > 0)
		g_string_append_len(buf, chunk, (gssize)n);
	if (ferror(fp))
		ERROR(&ld, NULL, "cannot read the file: %s", g_strerror(errno));
	else
		load_document(&ld, buf->str, buf->len, file);
	fclose(fp);
	g_string_free(buf, TRUE);
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
nw_config_admission_name(nw_admission_mode mode)
{
	return nw_enum_name_of(nw_admission_names, (int)mode);
}

const char *
nw_config_role_name(nw_engine_role role)
{
	return nw_enum_name_of(nw_role_names, (int)role);
}
