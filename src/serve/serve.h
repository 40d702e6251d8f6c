/*
 * The data plane as the daemon sees it: the client routes
 * (POST /v1/completions, POST /v1/chat/completions, GET /v1/models), each
 * completion request's lifecycle on the engines, and the counters.
 * Everything runs on the daemon's one loop.
 */
#ifndef NW_SERVE_SERVE_H
#define NW_SERVE_SERVE_H

#include <stdbool.h>

#include <glib.h>
#include <jansson.h>
#include <microhttpd.h>

#include "core/config.h"
#include "core/demand.h"
#include "core/dialect.h"
#include "core/host.h"
#include "core/plugin-loader.h"
#include "net/http-server.h"
#include "net/upstream.h"
#include "serve/counters.h"

struct nw_serve;

struct nw_serve_options {
	const struct nw_config *cfg;               /* borrowed, outlives the serve */
	struct nw_fleet *fleet;                    /* borrowed: engine views kept current */
	struct nw_plugin_instance *admission;      /* borrowed */
	struct nw_plugin_instance *placement;      /* borrowed */
	const struct nw_dialect *dialects;         /* one per engine, borrowed */
	struct nw_upstream *serving_pool;          /* data-plane engine calls */
	char **api_keys;                           /* NULL-terminated, copied; NULL: open */
	struct nw_serve_metrics *metrics;          /* borrowed; NULL: the serve keeps its own */
	struct nw_demand *demand;                  /* borrowed; NULL: the serve keeps its own */
	/* The urgent TTFT path (docs/controller.md): told of each sized offer
	 * whose admission decision projects a TTFT beyond slo.ttft_s (a prompt
	 * too long for the target even idle aside); NULL: nobody listens. */
	void (*ttft_breach)(void *data, uint64_t prompt_tokens, double projected_ttft_s);
	void *ttft_breach_data;
};

/* NULL with error set when the serving context cannot be made. */
struct nw_serve *nw_serve_new(const struct nw_serve_options *opts, GError **error);
/* The client server, once it exists (its handler needs the serve first). */
void nw_serve_set_http(struct nw_serve *s, struct nw_http_server *http);

/* Whether a path belongs to the data plane. */
bool nw_serve_owns(const char *url);
/* MHD's access handler for the data plane's paths. s takes a request's
 * first call; its later calls, and its completion below, go to the serve
 * that took it, whichever s is given (a reload replaces the serve). */
enum MHD_Result nw_serve_handle(struct nw_serve *s, struct MHD_Connection *conn, const char *url,
                                const char *method, const char *upload, size_t *upload_size,
                                void **request);
/* MHD's completion callback (request may be NULL). */
void nw_serve_completed(struct nw_serve *s, void **request, enum MHD_RequestTerminationCode why);

/* Answer 405 on a route that exists, with the Allow header (one helper
 * for the daemon's own routes and ours). */
enum MHD_Result nw_serve_method_not_allowed(struct nw_serve *s, struct MHD_Connection *conn,
                                            const char *url, const char *method,
                                            const char *allow);

/* Answer 404/405 for a path nobody serves. */
enum MHD_Result nw_serve_no_route(struct nw_serve *s, struct MHD_Connection *conn,
                                  const char *url, const char *method);

/* Stop: every request in flight is answered 503, or its stream ends with
 * an error event, and its engine calls are cancelled. Returns the number
 * of requests MHD still holds. */
unsigned nw_serve_shutdown(struct nw_serve *s);
unsigned nw_serve_retained(const struct nw_serve *s);

/* A stop signal's drain (docs/deployment.md): new requests get 503
 * shutting_down with Retry-After; those in flight go on, retries
 * included. */
void nw_serve_set_draining(struct nw_serve *s);

/* A reload (docs/deployment.md): older is the serve s supersedes, still
 * finishing its requests (NULL once it is freed). The gauges of
 * nw_serve_counters_to_json sum over s and the serves it follows. */
void nw_serve_set_older(struct nw_serve *s, struct nw_serve *older);
/* Requests not yet freed: the serve may be freed when this is 0. */
unsigned nw_serve_busy(const struct nw_serve *s);
/* Room may have appeared on an engine outside this serve's own
 * bookkeeping (another generation's residents left): the first request
 * waiting for a phase slot tries again. */
void nw_serve_room_changed(struct nw_serve *s);

/* {"name": count, ...} (transfer full). */
json_t *nw_serve_counters_to_json(const struct nw_serve *s);

/* The data plane's gauges now, for GET /metrics (docs/metrics.md). */
struct nw_serve_gauges {
	uint32_t prefill_waiting;      /* requests waiting for a prefill slot */
	uint32_t decode_waiting;       /* for a decode slot */
	uint32_t prefill_slots;        /* serving.prefill_concurrency, per engine */
	uint32_t decode_slots;         /* serving.decode_concurrency, per engine */
	uint32_t retry_budget;         /* serving.retry_budget: the credits' ceiling */
};
void nw_serve_gauges(const struct nw_serve *s, struct nw_serve_gauges *g);
/* The metrics the serve records (borrowed). */
const struct nw_serve_metrics *nw_serve_metrics(const struct nw_serve *s);
/* The demand ledger the serve feeds (borrowed; docs/state.md, demand). */
const struct nw_demand *nw_serve_demand(const struct nw_serve *s);

/* Frees the context; call after the HTTP server has stopped. */
void nw_serve_free(struct nw_serve *s);

/* Read the comma-separated keys from the environment variable named
 * env_name. NULL (with *error set) when the variable is unset or holds no
 * key. */
char **nw_serve_read_api_keys(const char *env_name, GError **error);

/* Constant-time check of an Authorization header against the keys. */
bool nw_serve_key_ok(char *const *keys, const char *authorization);

#endif /* NW_SERVE_SERVE_H */
