/*
 * narwhal-sim's process-wide types: the options, the fleet of simulated
 * engines in this process, and one engine "node" (its HTTP listener, its
 * scheduler on virtual time, its faults and its metrics).
 *
 * Virtual time is model seconds since the process started:
 *   now_v = (wall elapsed) * time_scale
 * so --time-scale 10 runs every model duration ten times faster.
 */
#ifndef NW_SIM_SIM_H
#define NW_SIM_SIM_H

#include <stdbool.h>
#include <stdint.h>

#include <glib.h>
#include <jansson.h>

#include "net/http-server.h"
#include "net/upstream.h"
#include "sim/dialect.h"
#include "sim/engine.h"
#include "sim/model.h"

typedef enum sim_kv_policy {
	SIM_KV_POLICY_FAIL = 0,      /* vLLM's default: the request fails */
	SIM_KV_POLICY_RECOMPUTE = 1, /* run it as an aggregate request */
} sim_kv_policy;

struct sim_options {
	unsigned engines;
	unsigned base_port;          /* 0: every engine on an ephemeral port */
	char *host;
	unsigned admin_port;         /* 0: ephemeral */
	char *preset;
	char *model_file;
	double noise_sigma;
	guint64 seed;
	double time_scale;
	gboolean no_delay;
	gboolean prompt_tokens_details; /* usage says cached_tokens */
	char *served_model_name;     /* NULL: the model's name */
	unsigned max_model_len;      /* 0: the model's */
	double kv_lease_s;
	sim_kv_policy kv_policy;
	char *id_prefix;
	char *fleet_out;
	json_t *faults;              /* from the --fault-* flags, applied at start */
	char *tls_cert_file, *tls_key_file; /* both or neither: engines speak HTTPS */
	char *tls_cert_pem, *tls_key_pem;   /* their contents, read at start */
	struct sim_engine_dialect *dialects; /* one per engine (--dialect) */
	double waiting_timeout_s;    /* SGLang decode: longest wait for the KV */
};

/* Injected faults of one engine; all durations are model seconds. */
struct sim_faults {
	double error_rate;           /* 0..1 */
	unsigned error_status;       /* HTTP status of injected errors */
	double error_delay_s;        /* an injected error waits this long; 0: none */
	double latency_multiplier;   /* >= 1, stretches every step */
	double hang_s;               /* < 0: none; INFINITY: until the client leaves */
	int64_t die_after_tokens;    /* < 0: none */
	int64_t error_after_tokens;  /* < 0: none; in-band error event after N */
	bool refuse_connections;
	double flap_period_s;        /* 0: none */
	double flap_since_v;         /* virtual time the flapping started */
	double kv_lease_s;           /* 0: the process default */
	bool unhealthy;
};

struct sim_fleet;
struct sim_metrics;
struct sim_call;

struct sim_node {
	struct sim_fleet *fleet;
	unsigned index;
	char *id;
	char *index_label;           /* the "engine" metrics label */
	uint16_t port;               /* kept across refuse/restore */
	struct nw_http_server *http; /* NULL while refusing connections */
	bool stopping;               /* the listener is being torn down */
	sim_dialect dialect;
	sim_pd_mode pd_mode;
	struct sim_engine *engine;
	GSource *wake;               /* step ends, KV arrivals, lease expiry */
	int wake_fd;                 /* a timerfd for the timed wake-ups: the
	                              * loop's own timers wake whole ms late
	                              * (-1: none, wake serves them) */
	GSource *wake_fd_source;
	bool in_step;
	bool ending_step;            /* inside sim_engine_end_step's callbacks */
	double step_end_v;
	double arrived_v;            /* the latest arrival of a request submitted */
	GPtrArray *doomed;           /* calls to abort once the step callbacks return */
	struct sim_faults faults;
	GRand *rand;                 /* fault dice, from --seed */
	GRand *id_rand;              /* request ids: unique across processes */
	uint64_t next_request_id;
	uint64_t next_block_id;
	struct sim_metrics *metrics;
	GSource *rebind;             /* retries a failed re-listen */
	unsigned calls_active;
	uint64_t http_requests_total;
	uint64_t kv_pulls_served;
	uint64_t work_requests_total; /* generation and tokenize requests received */
	int64_t last_request_unix_ms; /* wall clock of the last generation or
	                               * tokenize request received; 0: none */
};

struct sim_fleet {
	const struct sim_options *opts;
	struct sim_model model;
	char *model_name;            /* served model name */
	char *model_name_json;       /* the same, escaped for a JSON string */
	GMainLoop *loop;
	int64_t start_us;            /* monotonic */
	int64_t start_unix_us;       /* wall clock at start_us */
	int64_t process_start_unix_us; /* wall clock when main() began: the
	                                * process_start_time_seconds metric */
	struct sim_node **nodes;
	unsigned n_nodes;
	struct nw_http_server *admin;
	struct nw_upstream *pulls;   /* KV pulls between engines */
	GHashTable *rooms;           /* SGLang bootstrap rooms (bootstrap.c) */
	unsigned rooms_swept;        /* the table's size after the last sweep */
};

/* --- time (narwhal-sim.c) --------------------------------------------- */

double sim_fleet_now(const struct sim_fleet *fleet);
/* The monotonic wall time (microseconds) at which virtual time v arrives. */
int64_t sim_fleet_wall_us(const struct sim_fleet *fleet, double v);
/* Unix seconds at which virtual time v arrives. */
double sim_fleet_unix_s(const struct sim_fleet *fleet, double v);
struct sim_node *sim_fleet_find(const struct sim_fleet *fleet, const char *id);

/* --- nodes (node.c) --------------------------------------------------- */

struct sim_node *sim_node_new(struct sim_fleet *fleet, unsigned index);
void sim_node_free(struct sim_node *node);
/* Listen on node->port (0 the first time picks one); false with error. */
bool sim_node_listen(struct sim_node *node, GError **error);
/* Stop listening: in-flight requests on this engine end. */
void sim_node_unlisten(struct sim_node *node);
/* Listen or stop listening as the refuse_connections fault says. */
void sim_node_sync_listener(struct sim_node *node);
/* Something changed (a submit, a lease): reconsider the next step now. */
void sim_node_kick(struct sim_node *node);
/* Abort a request in the engine, deferred past the step callbacks. */
void sim_node_doom(struct sim_node *node, struct sim_call *call);
/* The lease duration currently in force (fault or default). */
double sim_node_lease_s(const struct sim_node *node);
/* Apply a changed lease duration to the engine. */
void sim_node_apply_lease(struct sim_node *node);
json_t *sim_node_stats_json(const struct sim_node *node);

/* --- faults and the admin API (faults.c) ------------------------------ */

void sim_faults_clear(struct sim_faults *f);
/* Validate a fault object strictly and merge it into *f (all or nothing);
 * false with a message naming the field. */
bool sim_faults_merge(struct sim_faults *f, const json_t *doc, double now_v, char **error);
json_t *sim_faults_json(const struct sim_faults *f);
/* Is /health answering 503 now? */
bool sim_faults_health_down(const struct sim_faults *f, double now_v);
/* Set a node's faults from JSON and act on the listener and lease. */
bool sim_node_set_faults(struct sim_node *node, const json_t *doc, char **error);
void sim_node_reset_faults(struct sim_node *node);
bool sim_admin_start(struct sim_fleet *fleet, GError **error);
void sim_admin_stop(struct sim_fleet *fleet);

#endif /* NW_SIM_SIM_H */
