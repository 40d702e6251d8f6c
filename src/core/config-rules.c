/*
 * The configuration's cross-field rules: what no single field's range can
 * say (spec sections 4, 5 and 7; docs/configuration.md). Each judges only
 * values that loaded (nw_loader_usable), so a refused field is reported
 * once, by the walk, not again by every rule that reads it.
 */
#include "core/config-loader.h"
#include "core/config-fields.h"

#include <arpa/inet.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define USABLE2(ld, a, b) (nw_loader_usable((ld), (a)) && nw_loader_usable((ld), (b)))

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

	if (!nw_loader_usable(ld, "serving.queue_capacity") || q == 0)
		return;
	if (nw_loader_usable(ld, "serving.queue_timeout_s") && c->serving.queue_timeout_s <= 0)
		ERROR(ld, "serving.queue_timeout_s",
		      "0 is not allowed while queueing is on (serving.queue_capacity is %u): "
		      "a number of seconds greater than 0, or serving.queue_capacity 0", q);
	if (nw_loader_usable(ld, "serving.prefill_concurrency") && c->serving.prefill_concurrency == 0)
		ERROR(ld, "serving.prefill_concurrency",
		      "0 is not allowed while queueing is on (serving.queue_capacity is %u): "
		      "the measured number of resident prefill requests per engine", q);
	if (nw_loader_usable(ld, "serving.decode_concurrency") && c->serving.decode_concurrency == 0)
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

	if (!nw_loader_usable(ld, "serving.handoff_timeout_s"))
		return;
	if (h <= 0) {
		bool queue = nw_loader_usable(ld, "serving.queue_capacity") && c->serving.queue_capacity > 0;
		bool retry = nw_loader_usable(ld, "serving.max_attempts") && c->serving.max_attempts > 1;
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
		if (nw_loader_usable(ld, p) && (!shortest || e->kv_lease_s < shortest->kv_lease_s)) {
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

	if (!nw_loader_usable(ld, "serving.request_timeout_s"))
		return;
	rs = nw_number_text(req);
	if (nw_loader_usable(ld, "serving.prefill_timeout_s") && c->serving.prefill_timeout_s > req) {
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

	if (!nw_loader_usable(ld, "recovery.health.min_samples") || !nw_loader_usable(ld, "recovery.health.window_s") ||
	    !nw_loader_usable(ld, "controller.monitor_interval_s"))
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

	if (n == 0 || !nw_loader_usable(ld, "fleet.engines") ||
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

	if (!nw_loader_usable(ld, "plugins.dialects"))
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
			json_t *path = json_object_get(v, "path");

			/* path is Narwhal's, as plugins.<kind>.path is for the
			 * other kinds (docs/configuration.md). */
			if (path != NULL && !json_is_null(path) &&
			    (!json_is_string(path) || json_string_length(path) == 0)) {
				char *d = nw_json_describe(path);
				char *pp = g_strconcat(p, ".path", NULL);

				if (json_is_string(path))
					ERROR(ld, pp, "empty string: null (find the plugin by name) or "
					      "the path of a plugin .so file");
				else
					ERROR(ld, pp, "wrong type, found %s: null (find the plugin by "
					      "name) or the path of a plugin .so file", d);
				g_free(pp);
				g_free(d);
			}
			for (uint32_t i = 0; i < c->fleet.n_engines && !used; i++)
				used = g_strcmp0(c->fleet.engines[i].dialect, name) == 0;
			if (!used && nw_loader_usable(ld, "fleet.engines"))
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

	if (!nw_loader_usable(ld, "plugins.controller.config") || !json_is_object(config))
		return;
	for (size_t i = 0; i < G_N_ELEMENTS(controller_host_fields); i++) {
		const char *name = controller_host_fields[i];
		g_autofree char *section = g_strndup(name, strcspn(name, "."));
		g_autofree char *path = g_strconcat("controller.", name, NULL);
		const json_t *set = json_object_get(json_object_get(config, section),
		                                    name + strlen(section) + 1);
		json_t *own;

		if (set == NULL || !nw_loader_usable(ld, path))
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

void
nw_config_apply_rules(struct loader *ld)
{
	for (size_t i = 0; i < G_N_ELEMENTS(rules); i++)
		rules[i](ld);
}
