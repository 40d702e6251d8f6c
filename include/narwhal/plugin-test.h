/*
 * Narwhal's plugin test kit (libnarwhal-plugin-test, pkg-config
 * narwhal-plugin-test): what Narwhal's own plugin tests stand on, for
 * plugin authors' GLib tests (docs/plugins.md, "Testing a plugin").
 *
 * The mock host is a recording stand-in for the daemon's host services
 * table: a virtual clock the test sets and advances, every log line kept
 * for inspection, counters and gauges in a table, a fleet view the test
 * supplies (build one with the scripted fleet below), and estimators that
 * answer with canned values (NO_PROFILE until told otherwise), for every
 * engine or scripted per engine, while remembering what they were asked,
 * and a price_split service (ABI 2.2) that answers a scripted price per
 * split and keeps every query.
 *
 * Pass narwhal_mock_host_table(mh) wherever a plugin wants a struct
 * narwhal_host. Nothing here is thread-safe; a plugin is called from one
 * thread anyway (docs/plugins.md, section 3).
 */
#ifndef NARWHAL_PLUGIN_TEST_H
#define NARWHAL_PLUGIN_TEST_H

#include <narwhal/plugin-abi.h>

#include <glib.h>

G_BEGIN_DECLS /* C++ tests link the C library too */

struct narwhal_mock_host;

/* Which estimator a canned answer or a recorded call is for. */
typedef enum narwhal_mock_estimator {
	NARWHAL_MOCK_PREFILL_SECONDS = 0,
	NARWHAL_MOCK_DECODE_INTERVAL_SECONDS = 1,
	NARWHAL_MOCK_PREFILL_QUEUE_SECONDS = 2,
	NARWHAL_MOCK_N_ESTIMATORS
} narwhal_mock_estimator;

/* The arguments of the last call to one estimator. */
struct narwhal_mock_estimate_call {
	uint32_t engine;
	uint64_t tokens;          /* prompt_tokens, or resident_kv_tokens for decode */
	uint32_t active_requests; /* decode only */
};

struct narwhal_mock_host *narwhal_mock_host_new(void);
void narwhal_mock_host_free(struct narwhal_mock_host *mh);

/* The services table (owned by mh, valid until narwhal_mock_host_free). */
const struct narwhal_host *narwhal_mock_host_table(struct narwhal_mock_host *mh);

/* Clock. Starts at 0. */
void narwhal_mock_host_set_time(struct narwhal_mock_host *mh, int64_t now_ns);
void narwhal_mock_host_advance(struct narwhal_mock_host *mh, int64_t delta_ns);
/* How many times the plugin read the clock. */
guint narwhal_mock_host_clock_reads(const struct narwhal_mock_host *mh);

/* Log lines, each "level: message" with level debug/info/warning/error. */
guint narwhal_mock_host_n_logs(const struct narwhal_mock_host *mh);
const char *narwhal_mock_host_log_line(const struct narwhal_mock_host *mh, guint i);
/* True when some line at this level contains substring. */
gboolean narwhal_mock_host_logged(const struct narwhal_mock_host *mh, narwhal_log_level level,
                             const char *substring);
void narwhal_mock_host_clear_logs(struct narwhal_mock_host *mh);

/* Metric values; NaN when the plugin never touched the name. */
double narwhal_mock_host_counter(const struct narwhal_mock_host *mh, const char *name);
double narwhal_mock_host_gauge(const struct narwhal_mock_host *mh, const char *name);

/* Fleet view returned by host->fleet() (borrowed: the caller keeps it alive
 * while plugins may read it). NULL until set. */
void narwhal_mock_host_set_fleet(struct narwhal_mock_host *mh, const struct narwhal_fleet_view *fleet);
guint narwhal_mock_host_fleet_reads(const struct narwhal_mock_host *mh);

/* Canned estimator answer for every engine: status, and value when OK. */
void narwhal_mock_host_set_estimate(struct narwhal_mock_host *mh, narwhal_mock_estimator which,
                               narwhal_estimate_status status, double value);
guint narwhal_mock_host_estimate_calls(const struct narwhal_mock_host *mh, narwhal_mock_estimator which);
const struct narwhal_mock_estimate_call *narwhal_mock_host_last_estimate(const struct narwhal_mock_host *mh,
                                                               narwhal_mock_estimator which);

/* Scripted answer for one engine: overrides the canned answer for every
 * engine, until narwhal_mock_host_clear_engine_estimates. */
void narwhal_mock_host_set_engine_estimate(struct narwhal_mock_host *mh, narwhal_mock_estimator which,
                                      uint32_t engine, narwhal_estimate_status status,
                                      double value);
/* The measured domain of one engine's estimator: an input above it
 * (tokens, or resident KV tokens for decode, above max_tokens; more than
 * max_active requests) is OUT_OF_DOMAIN whatever the script says, as the
 * real estimators answer. 0: no bound. */
void narwhal_mock_host_set_engine_domain(struct narwhal_mock_host *mh, narwhal_mock_estimator which,
                                    uint32_t engine, uint64_t max_tokens, uint32_t max_active);
/* Forgets the scripts and the domains. */
void narwhal_mock_host_clear_engine_estimates(struct narwhal_mock_host *mh);
/* Calls of one estimator about one engine, and the last of them (NULL when
 * it was never asked about that engine). */
guint narwhal_mock_host_estimate_calls_for(const struct narwhal_mock_host *mh, narwhal_mock_estimator which,
                                      uint32_t engine);
const struct narwhal_mock_estimate_call *narwhal_mock_host_last_estimate_for(const struct narwhal_mock_host *mh,
                                                                   narwhal_mock_estimator which,
                                                                   uint32_t engine);

/* price_split (ABI 2.2). The answer for a split (q->prefill, q->decode):
 * its scripted price when one is set (status OK, *out a copy of price with
 * struct_size set), else the pricer's answer when one is set, else
 * NO_PROFILE (*out untouched, as the real service). Every call is
 * recorded. */

/* Script the split prefill/decode: OK with *price (copied). price NULL
 * forgets that split's script. */
void narwhal_mock_host_set_split_price(struct narwhal_mock_host *mh, uint32_t prefill, uint32_t decode,
                                  const struct narwhal_split_price *price);
/* A function that prices the splits without a script (NULL: none, they
 * answer NO_PROFILE). It may return any status; its *out is passed on only
 * on OK. data is passed back. */
typedef narwhal_estimate_status (*narwhal_mock_split_pricer)(const struct narwhal_split_query *q,
                                                        struct narwhal_split_price *out,
                                                        void *data);
void narwhal_mock_host_set_split_pricer(struct narwhal_mock_host *mh, narwhal_mock_split_pricer pricer,
                                   void *data);
/* Forgets every script and the pricer: every split NO_PROFILE again. The
 * record of calls stays. */
void narwhal_mock_host_clear_split_prices(struct narwhal_mock_host *mh);
/* How many times price_split was called, the i-th query (0 the first,
 * i below the count), and the last one (NULL before the first call):
 * copies, valid until narwhal_mock_host_free (later calls move none). */
guint narwhal_mock_host_split_price_calls(const struct narwhal_mock_host *mh);
const struct narwhal_split_query *narwhal_mock_host_split_query(const struct narwhal_mock_host *mh, guint i);
const struct narwhal_split_query *narwhal_mock_host_last_split_query(const struct narwhal_mock_host *mh);
/* Calls about one split (q->prefill, q->decode). */
guint narwhal_mock_host_split_price_calls_for(const struct narwhal_mock_host *mh, uint32_t prefill,
                                         uint32_t decode);

/* ------------------------------------------------------------------------
 * Scripted fleet: a struct narwhal_fleet_view built engine by engine.
 * ------------------------------------------------------------------------ */

struct narwhal_test_fleet;

/* An empty fleet with these SLO targets (slo.ttft_s, slo.tpot_s). */
struct narwhal_test_fleet *narwhal_test_fleet_new(double ttft_target_s, double tpot_target_s);
void narwhal_test_fleet_free(struct narwhal_test_fleet *fleet);

/* Adds an engine at the next index: id copied, role, flags
 * NARWHAL_ENGINE_AVAILABLE, no requests, loads NaN. Returns it to change
 * further; the pointer (and every engine pointer) is valid until the next
 * add. */
struct narwhal_engine_view *narwhal_test_fleet_add(struct narwhal_test_fleet *fleet,
                                                   const char *id, narwhal_role role);
/* Engine i (NULL past the end), to change between calls. */
struct narwhal_engine_view *narwhal_test_fleet_engine(struct narwhal_test_fleet *fleet,
                                                      uint32_t i);
/* The view to give narwhal_mock_host_set_fleet or a controller input:
 * valid until the next add or the free, and current after any change. */
const struct narwhal_fleet_view *narwhal_test_fleet_view(struct narwhal_test_fleet *fleet);

/* The indices of the engines of one role (0: every engine), ascending, for
 * a placement request's eligible set; *n gets their count. Valid until the
 * next call with this fleet. */
const uint32_t *narwhal_test_fleet_eligible(struct narwhal_test_fleet *fleet, narwhal_role role,
                                            uint32_t *n);

G_END_DECLS

#endif /* NARWHAL_PLUGIN_TEST_H */
