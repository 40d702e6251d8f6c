/*
 * Integration-test helpers for narwhal-sim: start real simulator processes
 * on loopback ephemeral ports, read their fleet description and admin
 * port, speak HTTP to them (plain, streamed, or as a client that hangs up),
 * and stop them. Every wait is bounded.
 */
#ifndef NW_TEST_SIM_CLIENT_H
#define NW_TEST_SIM_CLIENT_H

#include <gio/gio.h>
#include <glib.h>
#include <jansson.h>

#define SIM_MAX_ENGINES 8

struct sim_proc {
	GSubprocess *proc;
	char *dir;            /* temporary directory for stdout and stderr */
	char *out_path;
	char *err_path;
	json_t *fleet;        /* the fleet line printed on stdout */
	guint16 ports[SIM_MAX_ENGINES];
	unsigned n_engines;
	guint16 admin_port;
};

/* The narwhal-sim binary: $NARWHAL_SIM_BIN, else next to $NARWHAL_BIN. */
char *sim_bin(void);
/* The narwhal-replay binary: $NARWHAL_REPLAY_BIN, else beside the tests'
 * build directory (kept, not freed). */
const char *sim_replay_bin(void);

/* Start narwhal-sim --base-port 0 with extra arguments (NULL-terminated)
 * and wait (bounded) for its fleet line and admin port. */
gboolean sim_start(struct sim_proc *p, const char *const *args);
/* Signal and wait (bounded); the exit status, or -1 (then it is killed). */
int sim_stop(struct sim_proc *p, int signo, guint timeout_ms);
void sim_clear(struct sim_proc *p);
/* Wait (bounded) until the stderr log contains needle. */
gboolean sim_wait_log(struct sim_proc *p, const char *needle, guint timeout_ms);

struct sim_reply {
	long status;          /* 0: no HTTP answer */
	int curl_code;        /* CURLcode of the transfer */
	GString *body;
	GString *headers;
	double seconds;       /* wall time of the whole exchange */
	double first_byte_s;  /* wall time to the first body byte, < 0 if none */
};

/* One request to 127.0.0.1:port (blocking, timeout_ms bounded); headers is
 * a NULL-terminated list of "Name: value" or NULL. */
void sim_http(guint16 port, const char *method, const char *path, const char *body,
              const char *const *headers, long timeout_ms, struct sim_reply *r);
void sim_reply_clear(struct sim_reply *r);
/* The value of a response header (case-insensitive), or NULL; caller frees. */
char *sim_reply_header(const struct sim_reply *r, const char *name);

/* Parse JSON text, failing the test when it is not JSON. */
json_t *sim_json(const char *text);
/* The payloads of the "data: ..." events of an SSE body. */
GPtrArray *sim_sse_events(const char *body);

/* The value of the first /metrics sample whose line starts with prefix
 * (e.g. "vllm:e2e_request_latency_seconds_sum{", or
 * "process_start_time_seconds " for a sample without labels). */
double sim_metric(guint16 port, const char *prefix);

/* The stats object of one engine from the admin API (owned). */
json_t *sim_engine_stats(const struct sim_proc *p, unsigned engine);
/* POST a fault object to an engine through the admin API; the status. */
long sim_set_faults(const struct sim_proc *p, unsigned engine, const char *faults_json);

/* POST /sim/reset: every engine's faults cleared; the status. */
long sim_reset_faults(const struct sim_proc *p);
/* One integer of an engine's stats, and its sum over the process's
 * engines. */
json_int_t sim_engine_stat(const struct sim_proc *p, unsigned engine, const char *key);
json_int_t sim_fleet_stat(const struct sim_proc *p, const char *key);
/* Wait (bounded) until the sum over the engines of a stats field is value. */
gboolean sim_wait_fleet_stat(const struct sim_proc *p, const char *key, json_int_t value,
                             guint timeout_ms);

/* Open a raw connection, send a request, read until some body bytes came
 * (bounded); returns the socket for the caller to close, or -1. */
int sim_raw_request(guint16 port, const char *path, const char *body, guint timeout_ms);

/* One run of a Narwhal command-line tool (narwhal-check, narwhal-profile). */
struct tool_run {
	int status;      /* exit status; -1: killed */
	char *out;
	char *err;
	json_t *doc;     /* stdout as JSON, when it is */
	double seconds;  /* wall time */
};

/* Run bin with args (NULL-terminated) on the thread-default main context,
 * stopped after timeout_s; its outputs go into the test's log under name. */
void tool_run(const char *bin, const char *name, const char *const *args, guint timeout_s,
              struct tool_run *r);
void tool_run_clear(struct tool_run *r);

#endif /* NW_TEST_SIM_CLIENT_H */
