/*
 * The sglang dialect's settings (plugins.dialects.sglang, docs/dialects.md),
 * read once when an instance is created. A refusal names the key by its
 * path and says what is valid, on one line.
 */
#include "sglang-config.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "openai.h"

/* SGLang's own default for --disaggregation-bootstrap-port. */
#define DEFAULT_BOOTSTRAP_PORT 8998

/* Room for "engines." with a shown ID and a dot. */
#define WHERE_MAX (sizeof "engines.." + OAI_SHOWN_MAX)

/* A port setting: an integer from 1 to 65535. */
static bool
read_port(const json_t *v, int *port, const char *where, char *err, size_t err_len)
{
	if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 65535) {
		snprintf(err, err_len, "%sbootstrap_port: must be an integer from 1 to 65535 "
		         "(the engine's --disaggregation-bootstrap-port)", where);
		return false;
	}
	*port = (int)json_integer_value(v);
	return true;
}

static bool
read_flag(const json_t *v, bool *flag, const char *where, char *err, size_t err_len)
{
	if (!json_is_boolean(v)) {
		snprintf(err, err_len, "%sdisaggregation: must be true (the engine runs with "
		         "--disaggregation-mode) or false", where);
		return false;
	}
	*flag = json_is_true(v);
	return true;
}

static bool
is_alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* A host name (an IPv4 address is one too): labels of letters, digits,
 * '-' and '_', 1 to 63 long, neither starting nor ending with '-', joined
 * by single dots, perhaps with a final one. */
static bool
valid_host_name(const char *s)
{
	size_t label = 0;
	const char *p;

	for (p = s; *p != '\0'; p++) {
		if (*p == '.') {
			if (label == 0 || p[-1] == '-')
				return false;
			label = 0;
		} else if (is_alnum(*p) || *p == '_' || (*p == '-' && label > 0)) {
			if (++label > 63)
				return false;
		} else {
			return false;
		}
	}
	return label > 0 ? p[-1] != '-' : p - s > 1;
}

/* An IPv6 address without brackets, with an optional %zone (the
 * interface of a link-local address). */
static bool
valid_ipv6(const char *s)
{
	const char *zone = strchr(s, '%');
	size_t n = zone != NULL ? (size_t)(zone - s) : strlen(s);
	struct in6_addr addr;
	char text[INET6_ADDRSTRLEN];

	if (n == 0 || n >= sizeof text)
		return false;
	if (zone != NULL && (zone[1] == '\0' || !valid_host_name(zone + 1)))
		return false;
	memcpy(text, s, n);
	text[n] = '\0';
	return inet_pton(AF_INET6, text, &addr) == 1;
}

/* A host as the decode engine will dial it, port apart. */
static bool
valid_host(const char *s)
{
	if (strlen(s) > 253)
		return false;
	return strchr(s, ':') != NULL ? valid_ipv6(s) : valid_host_name(s);
}

/* Whether the fleet the host knows has an engine of this ID; true when the
 * host shows no fleet (the isolation tests, tools that load dialects
 * alone). */
static bool
fleet_has(const struct narwhal_host *host, const char *id)
{
	const struct narwhal_fleet_view *fleet = host->fleet(host->host_ctx);

	if (fleet == NULL)
		return true;
	for (uint32_t i = 0; i < fleet->n_engines; i++) {
		const struct narwhal_engine_view *e = narwhal_fleet_engine(fleet, i);

		if (e->id != NULL && strcmp(e->id, id) == 0)
			return true;
	}
	return false;
}

static bool
read_engine(const struct narwhal_host *host, const char *id, const json_t *obj,
            struct sglang_engine_settings *es, char *err, size_t err_len)
{
	char shown[OAI_SHOWN_MAX], where[WHERE_MAX];
	const char *key;
	json_t *v;

	oai_shown_name(shown, sizeof shown, id);
	snprintf(where, sizeof where, "engines.%s.", shown);
	es->disaggregate = -1;
	if (!fleet_has(host, id)) {
		snprintf(err, err_len, "engines.%s: no engine of the fleet has this ID", shown);
		return false;
	}
	if (!json_is_object(obj)) {
		snprintf(err, err_len, "engines.%s: must be an object with bootstrap_port, "
		         "bootstrap_host or disaggregation", shown);
		return false;
	}
	json_object_foreach((json_t *)obj, key, v) {
		bool flag;

		if (strcmp(key, "bootstrap_port") == 0) {
			if (!read_port(v, &es->port, where, err, err_len))
				return false;
		} else if (strcmp(key, "disaggregation") == 0) {
			if (!read_flag(v, &flag, where, err, err_len))
				return false;
			es->disaggregate = flag;
		} else if (strcmp(key, "bootstrap_host") == 0) {
			if (!json_is_string(v) || !valid_host(json_string_value(v))) {
				snprintf(err, err_len, "%sbootstrap_host: must be a host name or an IPv4 "
				         "address, or an IPv6 address without brackets (with an optional "
				         "%%zone), and no port", where);
				return false;
			}
			es->host = strdup(json_string_value(v));
			if (es->host == NULL) {
				snprintf(err, err_len, "out of memory");
				return false;
			}
		} else {
			oai_shown_name(shown, sizeof shown, key);
			snprintf(err, err_len, "%s%s: unknown key: valid keys are bootstrap_port, "
			         "bootstrap_host and disaggregation", where, shown);
			return false;
		}
	}
	return true;
}

static bool
read_engines(struct sglang_config *cfg, const struct narwhal_host *host, const json_t *obj,
             char *err, size_t err_len)
{
	const char *id;
	json_t *v;

	if (!json_is_object(obj)) {
		snprintf(err, err_len, "engines: must be an object from engine ID to settings");
		return false;
	}
	cfg->engines = calloc(json_object_size(obj) + 1, sizeof *cfg->engines);
	if (cfg->engines == NULL) {
		snprintf(err, err_len, "out of memory");
		return false;
	}
	json_object_foreach((json_t *)obj, id, v) {
		struct sglang_engine_settings *es = &cfg->engines[cfg->n_engines];

		es->id = strdup(id);
		if (es->id == NULL) {
			snprintf(err, err_len, "out of memory");
			return false;
		}
		cfg->n_engines++;
		if (!read_engine(host, id, v, es, err, err_len))
			return false;
	}
	return true;
}

void
sglang_config_clear(struct sglang_config *cfg)
{
	for (size_t i = 0; i < cfg->n_engines; i++) {
		free(cfg->engines[i].id);
		free(cfg->engines[i].host);
	}
	free(cfg->engines);
	memset(cfg, 0, sizeof *cfg);
}

bool
sglang_config_read(struct sglang_config *cfg, const struct narwhal_host *host,
                   const json_t *config, char *err, size_t err_len)
{
	const char *key;
	json_t *v;

	memset(cfg, 0, sizeof *cfg);
	cfg->port = DEFAULT_BOOTSTRAP_PORT;
	cfg->disaggregate = true;
	if (config != NULL && !json_is_null(config) && !json_is_object(config)) {
		snprintf(err, err_len, "config must be an object (bootstrap_port, disaggregation, "
		         "engines)");
		return false;
	}
	/* Read-only walk; the cast only satisfies the macro's type. */
	json_object_foreach((json_t *)config, key, v) {
		bool ok;

		if (strcmp(key, "bootstrap_port") == 0) {
			ok = read_port(v, &cfg->port, "", err, err_len);
		} else if (strcmp(key, "disaggregation") == 0) {
			ok = read_flag(v, &cfg->disaggregate, "", err, err_len);
		} else if (strcmp(key, "engines") == 0) {
			ok = read_engines(cfg, host, v, err, err_len);
		} else {
			char shown[OAI_SHOWN_MAX];

			oai_shown_name(shown, sizeof shown, key);
			snprintf(err, err_len, "%s: unknown key: valid keys are bootstrap_port, "
			         "disaggregation and engines", shown);
			ok = false;
		}
		if (!ok) {
			sglang_config_clear(cfg);
			return false;
		}
	}
	return true;
}
