/*
 * A recording stand-in for the daemon's host services table, for plugin
 * isolation tests: a virtual clock the test sets and advances, every log line
 * kept for inspection, counters and gauges in a table, a fleet view the test
 * supplies, and estimators that answer with canned values (NO_PROFILE until
 * told otherwise), for every engine or scripted per engine, while
 * remembering what they were asked, and a price_split service (ABI 2.2)
 * that answers a scripted price per split and keeps every query.
 *
 * Pass nw_mock_host_table(mh) wherever a plugin wants a struct narwhal_host.
 */
#ifndef NW_TEST_MOCK_HOST_H
#define NW_TEST_MOCK_HOST_H

#include <narwhal/plugin-abi.h>

#include <glib.h>

struct nw_mock_host;

/* Which estimator a canned answer or a recorded call is for. */
typedef enum nw_mock_estimator {
	NW_MOCK_PREFILL_SECONDS = 0,
	NW_MOCK_DECODE_INTERVAL_SECONDS = 1,
	NW_MOCK_PREFILL_QUEUE_SECONDS = 2,
	NW_MOCK_N_ESTIMATORS
} nw_mock_estimator;

/* The arguments of the last call to one estimator. */
struct nw_mock_estimate_call {
	uint32_t engine;
	uint64_t tokens;          /* prompt_tokens, or resident_kv_tokens for decode */
	uint32_t active_requests; /* decode only */
};

struct nw_mock_host *nw_mock_host_new(void);
void nw_mock_host_free(struct nw_mock_host *mh);

/* The services table (owned by mh, valid until nw_mock_host_free). */
const struct narwhal_host *nw_mock_host_table(struct nw_mock_host *mh);

/* Clock. Starts at 0. */
void nw_mock_host_set_time(struct nw_mock_host *mh, int64_t now_ns);
void nw_mock_host_advance(struct nw_mock_host *mh, int64_t delta_ns);
/* How many times the plugin read the clock. */
guint nw_mock_host_clock_reads(const struct nw_mock_host *mh);

/* Log lines, each "level: message" with level debug/info/warning/error. */
guint nw_mock_host_n_logs(const struct nw_mock_host *mh);
const char *nw_mock_host_log_line(const struct nw_mock_host *mh, guint i);
/* True when some line at this level contains substring. */
gboolean nw_mock_host_logged(const struct nw_mock_host *mh, narwhal_log_level level,
                             const char *substring);
void nw_mock_host_clear_logs(struct nw_mock_host *mh);

/* Metric values; NaN when the plugin never touched the name. */
double nw_mock_host_counter(const struct nw_mock_host *mh, const char *name);
double nw_mock_host_gauge(const struct nw_mock_host *mh, const char *name);

/* Fleet view returned by host->fleet() (borrowed: the caller keeps it alive
 * while plugins may read it). NULL until set. */
void nw_mock_host_set_fleet(struct nw_mock_host *mh, const struct narwhal_fleet_view *fleet);
guint nw_mock_host_fleet_reads(const struct nw_mock_host *mh);

/* Canned estimator answer for every engine: status, and value when OK. */
void nw_mock_host_set_estimate(struct nw_mock_host *mh, nw_mock_estimator which,
                               narwhal_estimate_status status, double value);
guint nw_mock_host_estimate_calls(const struct nw_mock_host *mh, nw_mock_estimator which);
const struct nw_mock_estimate_call *nw_mock_host_last_estimate(const struct nw_mock_host *mh,
                                                               nw_mock_estimator which);

/* Scripted answer for one engine: overrides the canned answer for every
 * engine, until nw_mock_host_clear_engine_estimates. */
void nw_mock_host_set_engine_estimate(struct nw_mock_host *mh, nw_mock_estimator which,
                                      uint32_t engine, narwhal_estimate_status status,
                                      double value);
/* The measured domain of one engine's estimator: an input above it
 * (tokens, or resident KV tokens for decode, above max_tokens; more than
 * max_active requests) is OUT_OF_DOMAIN whatever the script says, as the
 * real estimators answer. 0: no bound. */
void nw_mock_host_set_engine_domain(struct nw_mock_host *mh, nw_mock_estimator which,
                                    uint32_t engine, uint64_t max_tokens, uint32_t max_active);
/* Forgets the scripts and the domains. */
void nw_mock_host_clear_engine_estimates(struct nw_mock_host *mh);
/* Calls of one estimator about one engine, and the last of them (NULL when
 * it was never asked about that engine). */
guint nw_mock_host_estimate_calls_for(const struct nw_mock_host *mh, nw_mock_estimator which,
                                      uint32_t engine);
const struct nw_mock_estimate_call *nw_mock_host_last_estimate_for(const struct nw_mock_host *mh,
                                                                   nw_mock_estimator which,
                                                                   uint32_t engine);

/* price_split (ABI 2.2). The answer for a split (q->prefill, q->decode):
 * its scripted price when one is set (status OK, *out a copy of price with
 * struct_size set), else the pricer's answer when one is set, else
 * NO_PROFILE (*out untouched, as the real service). Every call is
 * recorded. */

/* Script the split prefill/decode: OK with *price (copied). price NULL
 * forgets that split's script. */
void nw_mock_host_set_split_price(struct nw_mock_host *mh, uint32_t prefill, uint32_t decode,
                                  const struct narwhal_split_price *price);
/* A function that prices the splits without a script (NULL: none, they
 * answer NO_PROFILE). It may return any status; its *out is passed on only
 * on OK. data is passed back. */
typedef narwhal_estimate_status (*nw_mock_split_pricer)(const struct narwhal_split_query *q,
                                                        struct narwhal_split_price *out,
                                                        void *data);
void nw_mock_host_set_split_pricer(struct nw_mock_host *mh, nw_mock_split_pricer pricer,
                                   void *data);
/* Forgets every script and the pricer: every split NO_PROFILE again. The
 * record of calls stays. */
void nw_mock_host_clear_split_prices(struct nw_mock_host *mh);
/* How many times price_split was called, the i-th query (0 the first,
 * i below the count), and the last one (NULL before the first call).
 * Copies, valid until nw_mock_host_free. */
guint nw_mock_host_split_price_calls(const struct nw_mock_host *mh);
const struct narwhal_split_query *nw_mock_host_split_query(const struct nw_mock_host *mh, guint i);
const struct narwhal_split_query *nw_mock_host_last_split_query(const struct nw_mock_host *mh);
/* Calls about one split (q->prefill, q->decode). */
guint nw_mock_host_split_price_calls_for(const struct nw_mock_host *mh, uint32_t prefill,
                                         uint32_t decode);

#endif /* NW_TEST_MOCK_HOST_H */
