/*
 * Each engine's monitoring calls on the control pool (docs/recovery.md):
 * the health probe (the dialect's build_health, under
 * engine.health_timeout_s), then, when it passed, the served model for an
 * engine that has not said (build_models, parse_models) and the engine's
 * own metrics (build_metrics, parse_metrics). One call at a time per
 * engine, so a pass adds at most one residual per engine to its health
 * window (spec 7).
 *
 * The control pool is the monitor's own: engine.control_connections, never
 * shared with serving traffic. A call that cannot get a connection within
 * engine.pool_timeout_s is a monitoring failure and leaves the engine's
 * verdict unchanged (spec 6).
 */
#include "build-config.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "control/monitor-internal.h"
#include "core/log.h"

/* Models and metrics answers are read whole; more than this is not an
 * engine's answer to these calls. */
#define PROBE_BODY_MAX (8u << 20)

bool
nw_monitor_pool_take(struct nw_monitor *m, uint32_t n)
{
	if (m->pool_used + n > m->pool_cap)
		return false;
	m->pool_used += n;
	return true;
}

static void start_call(struct nw_monitor_engine *e, nw_probe_kind kind);

void
nw_monitor_pool_give(struct nw_monitor *m, uint32_t n)
{
	m->pool_used -= MIN(n, m->pool_used);
	/* Engines that waited for a connection go first, in index order. */
	for (uint32_t i = 0; i < m->n && !m->stopped; i++) {
		struct nw_monitor_engine *e = &m->engines[i];

		if (e->waiting_since_ns != 0 && e->probe == NW_PROBE_NONE && m->pool_used < m->pool_cap)
			start_call(e, NW_PROBE_HEALTH);
	}
}

static const char *
slot_of(nw_probe_kind kind)
{
	switch (kind) {
	case NW_PROBE_HEALTH: return "health";
	case NW_PROBE_MODELS: return "models";
	case NW_PROBE_METRICS: return "metrics";
	default: return "none";
	}
}

/* A failed dialect call of the monitor: logged and counted like the data
 * plane's (docs/plugins.md, "When a call fails"). */
static void
plugin_failed(struct nw_monitor *m, const struct nw_dialect *d, const char *slot, int rc)
{
	char code[16];

	g_snprintf(code, sizeof code, "%d", rc);
	m->fleet->monitor_plugin_errors++;
	nw_log(NARWHAL_LOG_WARNING, "plugin_call_failed", "plugin", d->name, "kind", "dialect",
	       "slot", slot, "rc", code, "request_id", "-", "engine", d->ref.id, NULL);
}

static void next_after_health(struct nw_monitor_engine *e);
static void next_after_models(struct nw_monitor_engine *e);

/* The end of an engine's calls this pass: an ejected engine whose backoff
 * has passed, and whose health just passed, is verified (verify.c). */
static void
chain_done(struct nw_monitor_engine *e)
{
	if (nw_health_verify_due(&e->health, nw_monitor_now(e->m)))
		nw_verify_start(e->m, e);
}

static void
health_done(struct nw_monitor_engine *e, const struct nw_dialect_answer *res)
{
	struct nw_monitor *m = e->m;
	char detail[160];

	if (res->code == NW_UPSTREAM_OK && res->status >= 200 && res->status < 300) {
		nw_monitor_health_event(m, e->index, NW_HEALTH_PROBE_OK, NULL);
		next_after_health(e);
		return;
	}
	if (res->code == NW_UPSTREAM_OK)
		g_snprintf(detail, sizeof detail, "health answered HTTP %ld", res->status);
	else
		g_snprintf(detail, sizeof detail, "health probe: %s", res->error ? res->error : "failed");
	nw_monitor_health_event(m, e->index, NW_HEALTH_PROBE_FAILED, detail);
}

static void
models_done(struct nw_monitor_engine *e, const struct nw_dialect_answer *res)
{
	struct nw_monitor *m = e->m;
	const struct nw_dialect *d = &m->dialects[e->index];
	struct narwhal_model_info info = {
		.struct_size = sizeof info, .name = "", .max_model_len = -1,
	};
	json_t *doc = NULL;
	int rc = -EPROTO;

	if (res->code == NW_UPSTREAM_OK && res->status >= 200 && res->status < 300)
		doc = json_loadb(res->body->str, res->body->len, 0, NULL);
	if (doc != NULL)
		rc = d->ops->parse_models(d->ctx, doc, &info);
	json_decref(doc);
	info.name[sizeof info.name - 1] = '\0';
	if (doc != NULL && rc != 0)
		plugin_failed(m, d, "parse_models", rc);
	if (rc == 0 && info.name[0] != '\0') {
		nw_monitor_answer_read(m);
		g_free(e->model);
		e->model = g_strdup(info.name);
		e->max_model_len = info.max_model_len > 0 ? info.max_model_len : -1;
		nw_monitor_model_seen(m, e->index);
	} else {
		nw_monitor_failed(m, e->index, "models",
		                  res->code != NW_UPSTREAM_OK ? res->error
		                  : doc == NULL && rc == -EPROTO ? "the model list is not JSON or not 2xx"
		                                                 : "the dialect could not read the model list",
		                  true);
	}
	next_after_models(e);
}

static void
metrics_done(struct nw_monitor_engine *e, const struct nw_dialect_answer *res)
{
	struct nw_monitor *m = e->m;
	const struct nw_dialect *d = &m->dialects[e->index];
	struct narwhal_engine_metrics out = {
		.struct_size = sizeof out, .running = -1, .waiting = -1, .kv_usage = NAN,
		.start_time_s = NAN,
	};
	int rc = -EPROTO;

	if (res->code == NW_UPSTREAM_OK && res->status >= 200 && res->status < 300 &&
	    !res->truncated) {
		rc = d->ops->parse_metrics(d->ctx, res->body->str, res->body->len, &out);
		if (rc != 0)
			plugin_failed(m, d, "parse_metrics", rc);
	}
	if (rc != 0) {
		nw_monitor_failed(m, e->index, "metrics",
		                  res->code != NW_UPSTREAM_OK ? res->error
		                                              : "the engine's metrics could not be read",
		                  true);
	} else {
		nw_monitor_answer_read(m);
		e->metrics = out;
		e->metrics_at_ns = nw_monitor_now(m);
		if (isfinite(out.start_time_s)) {
			struct nw_health_event ev = { .kind = NW_HEALTH_START_TIME,
			                              .start_time_s = out.start_time_s };

			nw_monitor_health_step(m, e->index, &ev, NULL);
		}
	}
	chain_done(e);
}

static void
on_answer(void *data, const struct nw_dialect_answer *res)
{
	struct nw_monitor_engine *e = data;
	nw_probe_kind kind = e->probe;

	e->call = NULL;
	e->probe = NW_PROBE_NONE;
	nw_monitor_pool_give(e->m, 1);
	switch (kind) {
	case NW_PROBE_HEALTH: health_done(e, res); break;
	case NW_PROBE_MODELS: models_done(e, res); break;
	case NW_PROBE_METRICS: metrics_done(e, res); break;
	default: break;
	}
}

static int
build(const struct nw_dialect *d, nw_probe_kind kind, struct narwhal_http_call *call)
{
	switch (kind) {
	case NW_PROBE_HEALTH: return d->ops->build_health(d->ctx, &d->ref, call);
	case NW_PROBE_MODELS: return d->ops->build_models(d->ctx, &d->ref, call);
	case NW_PROBE_METRICS: return d->ops->build_metrics(d->ctx, &d->ref, call);
	default: return -EINVAL;
	}
}

static void
start_call(struct nw_monitor_engine *e, nw_probe_kind kind)
{
	struct nw_monitor *m = e->m;
	const struct nw_config *cfg = m->cfg;
	const struct nw_dialect *d = &m->dialects[e->index];
	struct narwhal_http_call call = { .struct_size = sizeof call };
	const struct nw_dialect_call_options o = {
		.pool = m->pool, .dialect = d,
		.connect_timeout_s = MIN(cfg->engine.connect_timeout_s, cfg->engine.health_timeout_s),
		.timeout_s = cfg->engine.health_timeout_s, .body_max = PROBE_BODY_MAX,
	};
	char why[96], slot[24];
	int64_t now = nw_monitor_now(m);
	int rc;

	if (!nw_monitor_pool_take(m, 1)) {
		/* Only a health probe waits for a connection; the later calls
		 * of a chain come back next pass. */
		if (kind != NW_PROBE_HEALTH)
			return;
		if (e->waiting_since_ns == 0)
			e->waiting_since_ns = now;
		else if ((double)(now - e->waiting_since_ns) / 1e9 >= cfg->engine.pool_timeout_s) {
			e->waiting_since_ns = 0;
			nw_monitor_failed(m, e->index, "control_pool",
			                  "no control connection within engine.pool_timeout_s", false);
		}
		return;
	}
	e->waiting_since_ns = 0;
	rc = build(d, kind, &call);
	if (rc != 0 || call.path == NULL || call.path[0] != '/') {
		json_decref(call.body);
		nw_monitor_pool_give(m, 1);
		g_snprintf(why, sizeof why, "dialect %s: build_%s failed (%d)", d->name, slot_of(kind),
		           rc != 0 ? rc : -EINVAL);
		g_snprintf(slot, sizeof slot, "build_%s", slot_of(kind));
		plugin_failed(m, d, slot, rc != 0 ? rc : -EINVAL);
		nw_monitor_failed(m, e->index, slot_of(kind), why, false);
		return;
	}
	e->probe = kind;
	e->call = nw_dialect_call_start(&o, &call, on_answer, e);
	if (e->call == NULL) {
		e->probe = NW_PROBE_NONE;
		nw_monitor_pool_give(m, 1);
		nw_monitor_failed(m, e->index, slot_of(kind), "the control call could not start",
		                  false);
	}
}

static void
next_after_models(struct nw_monitor_engine *e)
{
	const struct nw_dialect *d = &e->m->dialects[e->index];

	if (d->ops->build_metrics != NULL)
		start_call(e, NW_PROBE_METRICS);
	else
		chain_done(e);
}

static void
next_after_health(struct nw_monitor_engine *e)
{
	const struct nw_dialect *d = &e->m->dialects[e->index];

	if (e->model == NULL && d->ops->build_models != NULL)
		start_call(e, NW_PROBE_MODELS);
	else
		next_after_models(e);
}

void
nw_engine_probe_pass(struct nw_monitor_engine *e)
{
	/* A call still running (a slow engine: health_timeout_s bounds it)
	 * or verification legs in flight: nothing new this pass. */
	if (e->probe != NW_PROBE_NONE || e->verify[0] != NULL || e->verify[1] != NULL)
		return;
	start_call(e, NW_PROBE_HEALTH);
}

void
nw_engine_probe_cancel(struct nw_monitor_engine *e)
{
	if (e->call != NULL) {
		nw_dialect_call_cancel(e->call);
		e->call = NULL;
		nw_monitor_pool_give(e->m, 1);
	}
	e->probe = NW_PROBE_NONE;
	e->waiting_since_ns = 0;
}
