#include "dialects.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const struct narwhal_engine_ref fuzz_engines[FUZZ_ENGINES] = {
	{ .struct_size = sizeof(struct narwhal_engine_ref), .index = 0, .id = "p0",
	  .url = "http://10.0.0.7:30000" },
	{ .struct_size = sizeof(struct narwhal_engine_ref), .index = 1, .id = "d0",
	  .url = "http://10.0.0.8:30001" },
	{ .struct_size = sizeof(struct narwhal_engine_ref), .index = 2, .id = "p6",
	  .url = "https://[fd00::17]:30000" },
	{ .struct_size = sizeof(struct narwhal_engine_ref), .index = 3, .id = "agg",
	  .url = "http://gpu-7.lab:8080" },
};

/* The host clock at create; the dialects read nothing else of the host. */
static int64_t
fixed_now(void *ctx)
{
	(void)ctx;
	return INT64_C(1700000000000000000);
}

static void
no_log(void *ctx, narwhal_log_level level, const char *message)
{
	(void)ctx;
	(void)level;
	(void)message;
}

static void
no_metric(void *ctx, const char *name, double value)
{
	(void)ctx;
	(void)name;
	(void)value;
}

/* No fleet: the dialects take every engine ID of their settings. */
static const struct narwhal_fleet_view *
no_fleet(void *ctx)
{
	(void)ctx;
	return NULL;
}

static const struct narwhal_host host = {
	.struct_size = sizeof(struct narwhal_host),
	.abi_major = NARWHAL_ABI_MAJOR,
	.abi_minor = NARWHAL_ABI_MINOR,
	.now_ns = fixed_now,
	.log = no_log,
	.counter_add = no_metric,
	.gauge_set = no_metric,
	.fleet = no_fleet,
};

static void
create(struct fuzz_dialect *d, const char *name,
       const struct narwhal_plugin_descriptor *(*entry)(void), const char *config_text)
{
	char err[NARWHAL_ERROR_MAX];
	json_t *config = config_text ? json_loads(config_text, 0, NULL) : NULL;

	d->name = name;
	d->ops = entry()->ops;
	if (d->ops->create(&host, config, &d->instance, err, sizeof err) != 0) {
		fprintf(stderr, "fuzz: the %s dialect refused its config: %s\n", name, err);
		abort();
	}
	d->handoff = d->ops->build_prefill != NULL;
	/* The dialect must not keep the config. */
	json_decref(config);
}

const struct fuzz_dialect *
fuzz_dialect_pick(uint8_t byte)
{
	static struct fuzz_dialect dialects[FUZZ_DIALECTS];

	if (dialects[0].ops == NULL) {
		create(&dialects[0], "vllm", fuzz_entry_vllm, NULL);
		create(&dialects[1], "sglang", fuzz_entry_sglang, NULL);
		create(&dialects[2], "llamacpp", fuzz_entry_llamacpp, NULL);
		create(&dialects[3], "sglang", fuzz_entry_sglang,
		       "{\"bootstrap_port\": 9000, \"engines\": {"
		       "\"p6\": {\"bootstrap_host\": \"fd00::1\", \"bootstrap_port\": 7000},"
		       "\"agg\": {\"disaggregation\": false}}}");
	}
	return &dialects[byte % FUZZ_DIALECTS];
}
