/*
 * The sglang dialect's settings (sglang-config.c): the prefill engines'
 * bootstrap port, whether the engines run disaggregated, and one engine's
 * own values (docs/dialects.md, "SGLang").
 */
#ifndef NW_PLUGIN_SGLANG_CONFIG_H
#define NW_PLUGIN_SGLANG_CONFIG_H

#include <narwhal/plugin-abi.h>

#include <stdbool.h>
#include <stddef.h>

/* One engine's settings from the engines object. */
struct sglang_engine_settings {
	char *id;
	int port;         /* 0: the dialect's */
	char *host;       /* NULL: the URL's host */
	int disaggregate; /* -1: the dialect's, else 0 or 1 */
};

struct sglang_config {
	int port;          /* --disaggregation-bootstrap-port */
	bool disaggregate; /* the engines run with --disaggregation-mode */
	size_t n_engines;
	struct sglang_engine_settings *engines;
};

/* Read config (NULL, null or an object) into cfg; the engine IDs must be
 * the fleet's when the host shows one. False with err filled ("path:
 * problem: what is valid") and cfg left empty when it is refused. */
bool sglang_config_read(struct sglang_config *cfg, const struct narwhal_host *host,
                        const json_t *config, char *err, size_t err_len);

void sglang_config_clear(struct sglang_config *cfg);

#endif /* NW_PLUGIN_SGLANG_CONFIG_H */
