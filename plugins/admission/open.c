/*
 * The "open" admission policy: no pricing, only the host's counts. A request
 * is admitted while the admitted count is under its limit; at the limit it
 * waits in the admission queue while there is room, and is refused with a
 * fixed Retry-After once the queue is full. It never answers "too long",
 * because it does not price prompts against the TTFT target.
 *
 * Config (all optional):
 *   retry_after_s     number > 0, default 1.0: Retry-After for refusals
 *   admission_margin  accepted and ignored: the host hands every admission
 *                     plugin serving.admission_margin, which prices TTFT
 *
 * Metrics: refusals_total (narwhal_plugin_admission_open_refusals_total).
 */
#include <narwhal/plugin-abi.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OPEN_MAGIC 0x4f50454eu /* "OPEN" */
#define OPEN_DEFAULT_RETRY_AFTER_S 1.0

struct open_policy {
	unsigned magic;
	const struct narwhal_host *host;
	double retry_after_s;
};

static struct open_policy *
open_cast(void *instance)
{
	struct open_policy *op = instance;

	if (op == NULL || op->magic != OPEN_MAGIC)
		abort(); /* the host passed something that is not ours */
	return op;
}

static int
open_parse_config(const json_t *config, double *retry_after_s, char *err, size_t err_len)
{
	const char *key;
	json_t *value;

	*retry_after_s = OPEN_DEFAULT_RETRY_AFTER_S;
	if (config == NULL || json_is_null(config))
		return 0;
	if (!json_is_object(config)) {
		snprintf(err, err_len, "config must be an object, with optional key retry_after_s");
		return -EINVAL;
	}
	/* json_object_foreach wants a non-const object; we only read. */
	json_object_foreach((json_t *)config, key, value) {
		if (strcmp(key, "retry_after_s") == 0) {
			double v;

			if (!json_is_number(value)) {
				snprintf(err, err_len, "retry_after_s: must be a number of seconds, "
				         "greater than 0");
				return -EINVAL;
			}
			v = json_number_value(value);
			if (!isfinite(v) || v <= 0.0) {
				snprintf(err, err_len, "retry_after_s: %g is out of range: must be "
				         "greater than 0", v);
				return -EINVAL;
			}
			*retry_after_s = v;
		} else if (strcmp(key, "admission_margin") == 0) {
			/* Nothing here is priced against the TTFT budget. */
		} else {
			snprintf(err, err_len, "unknown key \"%s\": the open policy accepts only "
			         "retry_after_s (and admission_margin, which it ignores)", key);
			return -EINVAL;
		}
	}
	return 0;
}

static int
open_create(const struct narwhal_host *host, const json_t *config, void **instance,
            char *err, size_t err_len)
{
	struct open_policy *op;
	double retry_after_s;
	char line[96];
	int rc;

	rc = open_parse_config(config, &retry_after_s, err, err_len);
	if (rc != 0)
		return rc;
	op = calloc(1, sizeof *op);
	if (op == NULL) {
		snprintf(err, err_len, "out of memory");
		return -ENOMEM;
	}
	op->magic = OPEN_MAGIC;
	op->host = host;
	op->retry_after_s = retry_after_s;

	snprintf(line, sizeof line, "open admission: retry_after_s=%g", retry_after_s);
	host->log(host->host_ctx, NARWHAL_LOG_DEBUG, line);
	*instance = op;
	return 0;
}

static void
open_destroy(void *instance)
{
	struct open_policy *op = open_cast(instance);

	op->magic = 0;
	free(op);
}

static int
open_decide(void *instance, const struct narwhal_admission_request *req,
            struct narwhal_admission_decision *out)
{
	const struct open_policy *op = open_cast(instance);

	if (req == NULL || out == NULL)
		return -EINVAL;

	/* Nothing here is priced. */
	out->projected_ttft_s = NAN;
	out->retry_after_s = 0.0;
	if (req->admitted < req->admitted_limit) {
		out->verdict = NARWHAL_ADMIT;
		out->reason = "open";
	} else if (req->queued < req->queue_capacity) {
		out->verdict = NARWHAL_ADMIT_QUEUE;
		out->reason = "queued";
	} else {
		out->verdict = NARWHAL_REFUSE;
		out->retry_after_s = op->retry_after_s;
		out->reason = "saturated";
		op->host->counter_add(op->host->host_ctx, "refusals_total", 1.0);
	}
	return 0;
}

static const struct narwhal_admission_ops open_ops = {
	.struct_size = sizeof(struct narwhal_admission_ops),
	.create = open_create,
	.destroy = open_destroy,
	.decide = open_decide,
	.finished = NULL, /* the host's counts are the ledger */
};

NARWHAL_ADMISSION_PLUGIN("open", "2.0.0", &open_ops)
