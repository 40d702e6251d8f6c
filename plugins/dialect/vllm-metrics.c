#include "vllm-metrics.h"

#include <errno.h>
#include <stdint.h>

#include "prom-text.h"

/*
 * What the vllm dialect reads from vLLM's /metrics page (prometheus_client's
 * text format, read by prom-text.c). Reference: engine-wire-formats
 * section 5.1.
 */

enum vllm_metric {
	M_RUNNING,
	M_WAITING,
	M_KV,
	M_KV_OLD, /* the older name: read only when the new one is absent */
	M_START,
	M_COUNT,
};

static const struct prom_family families[M_COUNT] = {
	[M_RUNNING] = { "vllm:num_requests_running", PROM_COUNT },
	[M_WAITING] = { "vllm:num_requests_waiting", PROM_COUNT },
	[M_KV] = { "vllm:kv_cache_usage_perc", PROM_RATIO },
	[M_KV_OLD] = { "vllm:gpu_cache_usage_perc", PROM_RATIO },
	[M_START] = { "process_start_time_seconds", PROM_TIME },
};

/* GET /metrics: running and waiting requests, KV-cache usage and the
 * process start time, summed or maxed across the engine's series. */
int
vllm_metrics_read(const char *body, size_t len, struct narwhal_engine_metrics *out)
{
	struct prom_value v[M_COUNT];
	int rc;

	if (out == NULL)
		return -EINVAL;
	rc = prom_text_read(body, len, families, M_COUNT, v);
	if (rc != 0)
		return rc;
	if (v[M_RUNNING].seen)
		out->running = (int64_t)v[M_RUNNING].value;
	if (v[M_WAITING].seen)
		out->waiting = (int64_t)v[M_WAITING].value;
	if (v[M_KV].seen)
		out->kv_usage = v[M_KV].value;
	else if (v[M_KV_OLD].seen)
		out->kv_usage = v[M_KV_OLD].value;
	if (v[M_START].seen)
		out->start_time_s = v[M_START].value;
	return 0;
}
