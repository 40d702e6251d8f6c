/*
 * The controller host in the daemon (docs/controller.md): one
 * nw_controller for the daemon's life, as the demand ledger (a reload
 * reconfigures it and its records carry on), evaluated on each pass of
 * the newest generation's monitor with that generation's controller
 * plugin; and the urgent TTFT path, from the serve's admission to one
 * coalesced wake on the main loop.
 */
#include "build-config.h"

#include "daemon-internal.h"

#include "control/controller.h"
#include "core/log.h"
#include "serve/counters.h"

/* The plugin as the controller host calls it, its return kept for the
 * log line of a failed call. */
struct call {
	const struct narwhal_controller_ops *ops;
	void *instance;
	int rc;
};

static int
call_propose(void *instance, const struct narwhal_controller_input *in,
             struct narwhal_controller_proposal *out)
{
	struct call *c = instance;

	c->rc = c->ops->propose(c->instance, in, out);
	return c->rc;
}

static const struct narwhal_controller_ops call_ops = {
	.struct_size = sizeof(struct narwhal_controller_ops),
	.propose = call_propose,
};

/* One evaluation on the newest generation; its changes go through the
 * monitor (flip history, role_change log line, the fleet's roles), which
 * tells the controller host of the applied ones (on_change below). */
static void
evaluate(struct nw_daemon *d, bool urgent, int64_t now_ns)
{
	struct nw_generation *g = d->gen;
	const struct loaded_plugin *lp = &g->controller;
	struct call call = { &lp->plugin->ops.controller, lp->instance->ctx, 0 };
	const struct nw_controller_plugin plugin = { lp->plugin->desc->name, &call_ops, &call };
	uint32_t n = g->fleet->view.n_engines;
	const struct nw_controller_pass pass = {
		.fleet = g->fleet, .demand = d->demand,
		.engines = nw_monitor_role_engines(g->monitor), .n = n,
		.plugin = &plugin, .now_ns = now_ns,
	};
	g_autofree struct nw_role_change *out = g_new(struct nw_role_change, MAX(n, 1));
	uint32_t k = urgent ? nw_controller_urgent(d->controller, &pass, out, n)
	                    : nw_controller_scheduled(d->controller, &pass, out, n);

	if (call.rc != 0) {
		char code[16];

		/* Logged and counted as every plugin failure (docs/plugins.md,
		 * "When a call fails"); no change this pass. */
		g_snprintf(code, sizeof code, "%d", call.rc);
		d->serve_metrics.counters.plugin_call_errors++;
		d->serve_metrics.plugin_failures[NW_PLUGIN_FAILURE_CONTROLLER]++;
		nw_log(NARWHAL_LOG_WARNING, "plugin_call_failed", "plugin", plugin.name, "kind",
		       "controller", "slot", "propose", "rc", code, "request_id", "-", NULL);
	}
	for (uint32_t i = 0; i < k; i++)
		nw_monitor_apply_role_change(g->monitor, &out[i]);
}

/* The controller's pass runs on the monitor's tick, after floor repair
 * (ARCHITECTURE.md, section 9); only the newest monitor runs. */
static void
on_pass(void *data, struct nw_monitor *m, int64_t now_ns)
{
	struct nw_daemon *d = data;

	if (m == d->gen->monitor)
		evaluate(d, false, now_ns);
}

static void
on_change(void *data, const struct nw_role_change *change)
{
	struct nw_daemon *d = data;

	nw_controller_note_change(d->controller, d->demand, change);
}

void
nw_daemon_controller_attach(struct nw_daemon *d, struct nw_generation *g)
{
	nw_monitor_on_pass(g->monitor, on_pass, d);
	nw_monitor_on_change(g->monitor, on_change, d);
}

static gboolean
on_urgent_wake(gpointer data)
{
	struct nw_daemon *d = data;

	d->urgent_wake = 0;
	/* A stopping Narwhal moves no engine. */
	if (d->state == NW_DAEMON_SERVING)
		evaluate(d, true, nw_clock_monotonic_ns(NULL));
	return G_SOURCE_REMOVE;
}

void
nw_daemon_ttft_breach(void *data, uint64_t prompt_tokens, double projected_ttft_s)
{
	struct nw_daemon *d = data;

	/* The first trigger arms one wake between monitor passes; the ones
	 * after it until the next pass are coalesced into it (role-control
	 * document, "Prefill queue projections"; control/controller.h). */
	if (nw_controller_urgent_note(d->controller, nw_clock_monotonic_ns(NULL), prompt_tokens,
	                              projected_ttft_s) &&
	    d->urgent_wake == 0)
		d->urgent_wake = g_timeout_add(0, on_urgent_wake, d);
}
