/*
 * An engine's Prometheus metrics with its dialect's names: vLLM's with
 * labels model_name and engine, SGLang's with model_name, llama.cpp's
 * without labels (wire formats 5). Latencies are in model seconds.
 */
#ifndef NW_SIM_METRICS_H
#define NW_SIM_METRICS_H

#include <stdint.h>

#include <glib.h>

#include "sim/dialect.h"
#include "sim/engine.h"

typedef enum sim_finish_reason {
	SIM_REASON_STOP = 0,
	SIM_REASON_LENGTH = 1,
	SIM_REASON_ABORT = 2,
	SIM_REASON_ERROR = 3,
	SIM_N_REASONS
} sim_finish_reason;

struct sim_metrics;

struct sim_metrics *sim_metrics_new(void);
void sim_metrics_free(struct sim_metrics *m);

void sim_metrics_first_token(struct sim_metrics *m, double ttft_s);
/* n inter-token gaps of gap_s each. */
void sim_metrics_inter_token(struct sim_metrics *m, double gap_s, uint32_t n);
/* A request left the engine; any time < 0 is not observed. */
void sim_metrics_finished(struct sim_metrics *m, sim_finish_reason reason, double e2e_s,
                          double queue_s, double prefill_s, double decode_s);

/* A request's whole length (prompt and output), for llama.cpp's
 * n_tokens_max. */
void sim_metrics_request_tokens(struct sim_metrics *m, uint64_t tokens);

/* The exposition text (version 0.0.4) of one engine in dialect d; now_s
 * (model seconds) dates SGLang's gen_throughput, which covers the time
 * since the previous scrape. */
void sim_metrics_render(struct sim_metrics *m, const struct sim_engine_stats *st,
                        sim_dialect d, const char *model_name, const char *engine_label,
                        double now_s, GString *out);
/* The process's start time (Unix seconds), as Prometheus's process
 * collector exports it: one sample without labels. */
void sim_metrics_render_process(double start_unix_s, GString *out);

#endif /* NW_SIM_METRICS_H */
