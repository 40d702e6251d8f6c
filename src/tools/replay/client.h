/*
 * The open-loop dispatcher: sends each scheduled request at its arrival
 * time, whatever the earlier ones are doing, over one nw_upstream (libcurl
 * multi on the GLib loop), and measures each response as it streams in.
 *
 * The arrival schedule is one deadline source re-armed at the next
 * arrival; every request due by now goes out in the same wake-up. The only
 * brake is the concurrency limit, a safety cap: a request that finds it
 * full waits in a queue and is counted late when it leaves.
 */
#ifndef NW_REPLAY_CLIENT_H
#define NW_REPLAY_CLIENT_H

#include <stdbool.h>
#include <stdint.h>

#include <glib.h>

#include "tools/replay/prompt.h"
#include "tools/replay/stats.h"
#include "tools/replay/trace.h"

struct rp_client_opts {
	const char *url;             /* base URL, without the API path */
	struct rp_body_opts body;
	double timeout_s;            /* whole request; > 0 */
	double connect_timeout_s;    /* > 0 */
	unsigned concurrency;        /* in-flight cap; >= 1 */
	bool progress;               /* a status line on stderr every second */
	const char *label;           /* names the run in the status line */
	uint32_t id_base;            /* X-Request-Id is replay-<id_base + i> */
};

struct rp_run {
	struct rp_result *results;   /* one per schedule item, in its order */
	size_t n;
	bool interrupted;            /* SIGINT or SIGTERM stopped it */
	double wall;                 /* seconds from start to the end */
};

/* Run one schedule to the end (every request answered, failed or timed
 * out), or until SIGINT/SIGTERM. false only when the run could not start. */
bool rp_client_run(const struct rp_client_opts *o, const struct rp_schedule *s,
                   struct rp_run *out, GError **error);
void rp_run_clear(struct rp_run *r);

/* The first model id from GET <url>/v1/models; caller frees. */
char *rp_client_discover_model(const char *url, double timeout_s, GError **error);

/* The tokens the server adds around a prompt (BOS, chat template): the
 * count POST <url>/tokenize (vLLM, narwhal-sim) gives for an empty one. */
bool rp_client_prompt_overhead(const char *url, const struct rp_body_opts *o, double timeout_s,
                               uint32_t *out, GError **error);

/* Retry-After as seconds: delta-seconds or an HTTP date; NAN when bad. */
double rp_parse_retry_after(const char *value);

#endif /* NW_REPLAY_CLIENT_H */
