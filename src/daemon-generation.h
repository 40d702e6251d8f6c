/*
 * A generation: everything the daemon builds from one configuration (the
 * fleet registry, the plugin instances, the dialects, the serve and the
 * monitor). A reload builds a new one and makes it current; the one it
 * supersedes finishes the requests it admitted and is freed when the last
 * has left (docs/deployment.md, "Reloading the configuration").
 *
 * What outlives generations is the daemon's (daemon-internal.h): the
 * clients' HTTP server, the engine pools, the serve's counters, the demand
 * ledger and the plugins' metrics.
 *
 * While generations overlap they share what they know of the engines they
 * have in common (same id and url):
 *  - the newest generation's monitor is the only one that probes; the
 *    older ones' fleets mirror its verdicts and roles, and engines a reload
 *    removed take no new work there (DRAINING); their real legs' outcomes
 *    feed the newest monitor (passive detection);
 *  - each newer fleet counts the residents, queued offers and legs out of
 *    the older generations on top of its own, so placement, the phase
 *    slots and the monitor see one engine's whole load; the monotonic
 *    per-engine counts (legs placed and failed, progress) carry over too.
 * nw_generation_sync keeps this true; the daemon runs it on a short tick
 * while an older generation lives.
 */
#ifndef NW_DAEMON_GENERATION_H
#define NW_DAEMON_GENERATION_H

#include <glib.h>

#include "control/monitor.h"
#include "core/config.h"
#include "core/fleet-dialects.h"
#include "core/host.h"
#include "core/plugin-loader.h"
#include "core/profile.h"
#include "net/http-server.h"
#include "net/upstream.h"
#include "serve/serve.h"

/* One configured plugin: its loaded type, host table and instance. */
struct loaded_plugin {
	struct nw_plugin *plugin;
	struct nw_host *host;
	struct nw_plugin_instance *instance;
};

/* What a generation borrows from the daemon. */
struct nw_generation_shared {
	struct nw_plugin_metrics *plugin_metrics;
	struct nw_serve_metrics *serve_metrics;
	struct nw_demand *demand;
	/* The serve's urgent TTFT hook (serve.h, ttft_breach). */
	void (*ttft_breach)(void *data, uint64_t prompt_tokens, double projected_ttft_s);
	void *ttft_breach_data;
	struct nw_upstream *serving_pool;
	struct nw_upstream *control_pool;
	uint32_t control_connections;      /* the control pool's size */
};

struct nw_generation_carry; /* daemon-generation.c: what an older one lends */

struct nw_generation {
	unsigned number;                   /* 0 at start, +1 a reload */
	struct nw_config *cfg;             /* owned */
	struct nw_fleet *fleet;
	struct nw_profile_store *profiles; /* profiles.path as read; NULL: no store */
	struct loaded_plugin admission, placement, controller;
	struct nw_fleet_dialects *dialects;
	char **api_keys;
	struct nw_serve *serve;
	struct nw_monitor *monitor;

	/* The generation this one superseded, while it still finishes
	 * requests; and what it lends this one (NULL without an older). */
	struct nw_generation *older;
	struct nw_generation_carry *carry;
};

/* Build a generation from cfg (transfer full, also on failure): plugins,
 * dialects, API keys, serve and monitor; nothing runs yet. NULL with
 * error set (its message names the configuration path at fault). */
struct nw_generation *nw_generation_new(struct nw_config *cfg,
                                        const struct nw_generation_shared *shared,
                                        GError **error);

/* The engines of older that g keeps (same id and url): what the monitor
 * learnt, roles and pins, per-engine counts. A role or pin the file
 * changes for an engine is the file's. Fills the engines added and removed
 * (arrays of ids, borrowed from the configurations). Call before
 * nw_generation_start(g) and nw_generation_supersede(older). */
void nw_generation_adopt(struct nw_generation *g, struct nw_generation *older,
                         GPtrArray *added, GPtrArray *removed);

/* Start the monitor (its first pass probes every engine). */
void nw_generation_start(struct nw_generation *g, struct nw_http_server *http);

/* g is no longer current: its monitor stops (call after
 * nw_generation_adopt of the newer); nw_generation_sync then keeps its
 * fleet on the newer one's verdicts. Stopping the superseded monitor at
 * once, rather than when its generation is freed, leaves one monitor
 * probing each engine and one verdict for both generations, so that an
 * operator's drain or an ejection after the reload holds for the old
 * generation's retries too. */
void nw_generation_supersede(struct nw_generation *g);

/* Keep overlapping generations consistent (see above); from the oldest. */
void nw_generation_sync(struct nw_generation *newest);

/* Free the oldest generations that have no request left; returns how many
 * generations still overlap the newest (0: none). */
unsigned nw_generation_reap(struct nw_generation *newest);

/* Requests held by g and the generations it follows (MHD's). */
unsigned nw_generation_retained(const struct nw_generation *g);

void nw_generation_free(struct nw_generation *g);

#endif /* NW_DAEMON_GENERATION_H */
