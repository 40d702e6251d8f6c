/*
 * The reader of an engine's /metrics page (ABI 2.1, parse_metrics) shared
 * by the dialects: its own file, as it is its own concern. Each dialect
 * names the metrics its engine exports.
 */
#ifndef NW_PLUGIN_ENGINE_METRICS_H
#define NW_PLUGIN_ENGINE_METRICS_H

#include <narwhal/plugin-abi.h>

#include <stddef.h>

/* The names of the gauges behind struct narwhal_engine_metrics; NULL for
 * one the engine does not export. The process start time is always
 * process_start_time_seconds. */
struct engine_metric_names {
	const char *running;      /* requests in the running batch */
	const char *waiting;      /* requests waiting to be scheduled */
	const char *kv_usage;     /* KV-cache usage, 0 to 1 */
	const char *kv_usage_old; /* an older name, read only without kv_usage */
};

/* Fill out from a Prometheus text body of len bytes (not terminated):
 * 0, or -EPROTO when it is not the engine's metrics (none of the named
 * metrics, or a malformed sample of one), -EINVAL for bad arguments.
 * Fields the body does not give keep out's presets. */
int engine_metrics_read(const char *body, size_t len, const struct engine_metric_names *names,
                        struct narwhal_engine_metrics *out);

#endif /* NW_PLUGIN_ENGINE_METRICS_H */
