/*
 * What one replayed request measured, and the run's summary: percentiles,
 * SLO attainment and goodput. The formulas are in docs/replay.md.
 */
#ifndef NW_REPLAY_STATS_H
#define NW_REPLAY_STATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <glib.h>

enum rp_outcome {
	RP_OUT_OK = 0,      /* 2xx, and a stream that ended with [DONE] */
	RP_OUT_HTTP,        /* a status other than 2xx */
	RP_OUT_ERROR_EVENT, /* an in-band data: {"error": ...} */
	RP_OUT_INCOMPLETE,  /* the stream ended without [DONE], or a bad body */
	RP_OUT_TIMEOUT,     /* --timeout passed */
	RP_OUT_TRANSPORT,   /* connection refused, reset, ... */
	RP_OUT_CANCELLED,   /* in flight when the run was interrupted */
	RP_OUT_NOT_SENT,    /* its time had not come when the run was interrupted */
	RP_OUT_COUNT
};

struct rp_result {
	uint32_t id;             /* n of the X-Request-Id replay-<n> */
	uint32_t phase;
	double scheduled;        /* seconds after the run's start */
	double sent;             /* when it went out; NAN when never */
	double finished;         /* when it ended; NAN when never */
	bool late;               /* sent over RP_LATE_S after its time */
	uint32_t input_tokens;
	uint32_t max_tokens;
	long status;             /* HTTP status; 0 when none arrived */
	enum rp_outcome outcome;
	double ttft;             /* seconds; NAN when not measured */
	double tpot;             /* seconds; NAN with fewer than 2 tokens */
	double e2e;              /* seconds; NAN when it did not finish */
	uint32_t output_tokens;
	int64_t usage_prompt;    /* usage.prompt_tokens; -1 when absent */
	int64_t usage_completion;
	double retry_after;      /* seconds from the Retry-After header; NAN */
	char *error;             /* the error message, or NULL */
};

/* A request is late when it leaves this long after its scheduled time
 * (a full concurrency limit, or a loop that could not keep up). */
#define RP_LATE_S 0.010

struct rp_latency {
	uint32_t n;
	double mean, p50, p90, p99, max; /* NAN when n == 0 */
};

struct rp_slo {
	double ttft;             /* seconds; <= 0: no target */
	double tpot;
};

struct rp_status_count {
	long status;
	uint64_t n;
};

struct rp_summary {
	uint64_t scheduled;
	uint64_t sent;
	uint64_t ok;
	uint64_t failed;         /* sent, not cancelled, not ok */
	uint64_t late;
	uint64_t by_outcome[RP_OUT_COUNT];
	GArray *statuses;        /* struct rp_status_count, by status */
	uint64_t retry_after_n;
	double retry_after_max;
	double elapsed;          /* start to the last request's end, seconds */
	double offered_rate;     /* (scheduled - 1) / span of the schedule */
	double throughput;       /* ok / elapsed */
	double output_token_rate;/* output tokens of ok requests / elapsed */
	struct rp_latency ttft, tpot, e2e;
	bool slo_set;
	uint64_t met, met_ttft, met_tpot;
	double attainment;       /* met / counted, as a fraction */
	double attainment_ttft;
	double attainment_tpot;
	double goodput;          /* met / elapsed, requests per second */
};

/* Linear interpolation between closest ranks of sorted values. */
double rp_percentile(const double *sorted, size_t n, double p);
/* Summarise values (order not needed; NANs skipped). */
void rp_latency_of(const double *values, size_t n, struct rp_latency *out);
/* (last - first) / (tokens - 1) in seconds; NAN below 2 tokens. */
double rp_tpot(int64_t first_us, int64_t last_us, uint32_t tokens);

bool rp_slo_met_ttft(const struct rp_result *r, const struct rp_slo *slo);
bool rp_slo_met_tpot(const struct rp_result *r, const struct rp_slo *slo);
bool rp_slo_met(const struct rp_result *r, const struct rp_slo *slo);

/* span: the schedule's last arrival time, for the offered rate. */
void rp_summary_compute(const struct rp_result *res, size_t n, double span,
                        const struct rp_slo *slo, struct rp_summary *out);
void rp_summary_clear(struct rp_summary *s);

const char *rp_outcome_name(enum rp_outcome o);

#endif /* NW_REPLAY_STATS_H */
