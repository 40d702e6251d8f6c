/*
 * narwhal-replay's request sources and the arrival schedule.
 *
 * A trace is a list of requests (arrival time, prompt and output token
 * counts, optional prefix block ids) read from the Azure LLM inference CSV,
 * the Mooncake JSONL, or generated from a synthetic workload (workload.h).
 * A schedule is one replay of a trace: rate-scaled, offset, bounded in
 * time and count, with over-long prompts skipped or truncated.
 */
#ifndef NW_REPLAY_TRACE_H
#define NW_REPLAY_TRACE_H

#include <stdbool.h>
#include <stdint.h>

#include <glib.h>

#define RP_ERROR (rp_error_quark())
GQuark rp_error_quark(void);

typedef enum rp_error_code {
	RP_ERROR_FILE,    /* unreadable file */
	RP_ERROR_PARSE,   /* malformed line, spec or option value */
	RP_ERROR_BOUND,   /* an unbounded or oversized run */
	RP_ERROR_RUN,     /* the run itself could not proceed */
} rp_error_code;

typedef enum rp_trace_format {
	RP_TRACE_AUTO = 0,
	RP_TRACE_AZURE,    /* TIMESTAMP,ContextTokens,GeneratedTokens */
	RP_TRACE_MOONCAKE, /* {"timestamp": ms, "input_length", "output_length", "hash_ids"} */
} rp_trace_format;

struct rp_request {
	double t;               /* arrival, seconds after the trace's first row */
	uint32_t input_tokens;
	uint32_t output_tokens;
	uint32_t phase;         /* synthetic phase index; 0 for files */
	uint32_t n_hash;        /* prefix block ids (Mooncake), 0 when none */
	size_t hash_off;        /* their offset in rp_trace.hash_ids */
	uint32_t row;           /* position in the source, for stable order */
};

struct rp_trace {
	GArray *reqs;           /* struct rp_request, sorted by t */
	GArray *hash_ids;       /* uint32_t, shared pool */
	GPtrArray *phase_names; /* char *, one per phase (synthetic only) */
	char *label;            /* what it came from, for reports */
};

struct rp_trace *rp_trace_new(const char *label);
void rp_trace_free(struct rp_trace *t);

/* Append a request; hash ids may be NULL. */
void rp_trace_add(struct rp_trace *t, double at, uint32_t input, uint32_t output,
                  uint32_t phase, const uint32_t *hash_ids, uint32_t n_hash);

/* Sort by arrival (stable) and shift times so the first row is at 0. */
void rp_trace_finish(struct rp_trace *t);

const uint32_t *rp_trace_hashes(const struct rp_trace *t, const struct rp_request *r);

/* Parse a whole file's text; what names it in errors ("file.csv"). */
bool rp_trace_parse_azure(struct rp_trace *t, const char *text, size_t len,
                          const char *what, GError **error);
bool rp_trace_parse_mooncake(struct rp_trace *t, const char *text, size_t len,
                             const char *what, GError **error);

/* Azure's wall-clock timestamp, "2023-11-16 18:17:03.9799600", as
 * nanoseconds since the Unix epoch (UTC); false when malformed. */
bool rp_parse_azure_time(const char *s, size_t len, int64_t *out_ns);

/* From the extension (.csv, .jsonl/.json), else from the first byte. */
rp_trace_format rp_trace_detect(const char *path, const char *text, size_t len);

bool rp_trace_format_parse(const char *name, rp_trace_format *out);
const char *rp_trace_format_name(rp_trace_format f);

struct rp_trace *rp_trace_load(const char *path, rp_trace_format format, GError **error);

/* --- schedule ------------------------------------------------------- */

enum rp_long_policy { RP_LONG_SKIP = 0, RP_LONG_TRUNCATE };

struct rp_schedule_opts {
	double rate_scale;        /* > 0; 2 = twice as fast (gaps halved) */
	double start_offset;      /* trace seconds skipped at the start */
	double duration;          /* schedule seconds kept; <= 0: all */
	uint64_t max_requests;    /* 0: all */
	uint32_t max_prompt;      /* 0: no cap */
	uint32_t max_output;      /* 0: no cap */
	enum rp_long_policy long_policy;
};

struct rp_item {
	double t;                 /* seconds after the run's start */
	uint32_t input_tokens;    /* after any truncation */
	uint32_t output_tokens;   /* after any cap; at least 1 */
	uint32_t req;             /* index into the trace's reqs */
};

struct rp_schedule {
	GArray *items;            /* struct rp_item, by t */
	const struct rp_trace *trace;
	double span;              /* t of the last item */
	/* What the bounds and caps did. */
	uint64_t before_offset;
	uint64_t after_duration;
	uint64_t over_max_requests;
	uint64_t long_skipped;
	uint64_t long_truncated;
	uint64_t output_capped;
};

void rp_schedule_build(struct rp_schedule *s, const struct rp_trace *t,
                       const struct rp_schedule_opts *o);
void rp_schedule_clear(struct rp_schedule *s);

#endif /* NW_REPLAY_TRACE_H */
