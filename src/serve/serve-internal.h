/*
 * The serving context as the serve layer's modules see it (serve.c owns
 * it). The daemon uses serve/serve.h.
 */
#ifndef NW_SERVE_INTERNAL_H
#define NW_SERVE_INTERNAL_H

#include <narwhal/plugin-abi.h>

#include <stdbool.h>
#include <stdint.h>

#include <glib.h>

#include "core/config.h"
#include "core/demand.h"
#include "core/dialect.h"
#include "core/host.h"
#include "core/json-read.h"
#include "core/json-write.h"
#include "core/plugin-loader.h"
#include "net/http-server.h"
#include "net/timers.h"
#include "net/upstream.h"
#include "serve/counters.h"
#include "serve/eligible.h"
#include "serve/retry.h"
#include "serve/slots.h"


struct nw_serve {
	const struct nw_config *cfg;
	struct nw_fleet *fleet;
	struct nw_plugin_instance *admission;
	struct nw_plugin_instance *placement;
	const struct nw_dialect *dialects; /* one per engine, borrowed */
	const char **router_keys;        /* keys the dialects own, refused from clients */
	uint64_t next_handle;            /* request handles for plugins */
	struct nw_upstream *serving_pool;
	struct nw_http_server *http;
	char **api_keys;                 /* NULL: no key needed */

	struct nw_timers *timers;
	GRand *rng;
	struct nw_retry_budget budget;
	struct nw_serve_metrics *metrics; /* borrowed, or own_metrics */
	struct nw_serve_metrics *own_metrics; /* when none was lent */
	struct nw_demand *demand;        /* borrowed, or own_demand */
	struct nw_demand *own_demand;    /* when none was lent */
	void (*ttft_breach)(void *data, uint64_t prompt_tokens, double projected_ttft_s);
	void *ttft_breach_data;          /* the urgent TTFT path's listener */

	uint32_t retained;               /* completion requests held (ceiling) */
	uint32_t ceiling;                /* max_connections + queue_capacity */
	struct nw_resource admitted;     /* admission ledger and its queue */
	struct nw_resource pool;         /* serving-pool connections in use */
	struct nw_wait_line prefill_line;/* waiting for a prefill slot */
	struct nw_wait_line decode_line; /* waiting for a decode slot */
	uint32_t *eligible;              /* placement scratch, one per engine */
	uint32_t next_tokenize;          /* round robin over engines */
	GQueue requests;                 /* every live request */
	uint32_t allocated;              /* requests not freed yet (a streamed
	                                  * answer may outlive MHD's completion) */
	/* A stop (docs/deployment.md, "Stopping: the drain"): draining
	 * refuses new requests; stopping also ends those in flight and
	 * retries none. It only moves forward. */
	enum { NW_SERVE_RUNNING, NW_SERVE_DRAINING, NW_SERVE_STOPPING } stop;
	struct nw_serve *older;          /* a superseded serve still finishing
	                                  * (a reload): the gauges sum over it */

	int64_t created;                 /* start time, Unix seconds */
};

const struct nw_dialect *nw_serve_dialect(const struct nw_serve *s, uint32_t engine);

/* Whether placement may use engine i now (serve/eligible.h). */
static inline bool
nw_serve_engine_available(const struct nw_serve *s, uint32_t i)
{
	return nw_engine_available(s->fleet, i);
}

/* A plugin call failed: counted (plugin_call_errors) and logged
 * (plugin_call_failed), never silent (plugin-abi.h, docs/plugins.md).
 * engine may be NULL, request_id too (a call for no request). */
void nw_serve_plugin_failed(struct nw_serve *s, const char *kind, const char *plugin,
                            const char *slot, int rc, const char *engine,
                            const char *request_id);

#endif /* NW_SERVE_INTERNAL_H */
