/*
 * The vllm dialect's reader of an engine's /metrics page (ABI 2.1,
 * parse_metrics): its own file, as it is its own concern.
 */
#ifndef NW_PLUGIN_VLLM_METRICS_H
#define NW_PLUGIN_VLLM_METRICS_H

#include <narwhal/plugin-abi.h>

#include <stddef.h>

/* Fill out from a Prometheus text body of len bytes (not terminated):
 * 0, or -EPROTO when it is not a vLLM engine's metrics, -EINVAL for bad
 * arguments. Fields the body does not give keep out's presets. */
int vllm_metrics_read(const char *body, size_t len, struct narwhal_engine_metrics *out);

#endif /* NW_PLUGIN_VLLM_METRICS_H */
