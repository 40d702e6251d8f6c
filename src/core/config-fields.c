/*
 * The configuration field table and the generic per-field operations:
 * defaults, type and range checks, conversion back to JSON, release.
 * Cross-field rules live in config.c.
 */
#include "core/config-fields.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

_Static_assert(sizeof(nw_admission_mode) == sizeof(int), "enums are stored as int");
_Static_assert(sizeof(nw_log_format) == sizeof(int), "enums are stored as int");
_Static_assert(sizeof(nw_engine_role) == sizeof(int), "enums are stored as int");
_Static_assert(sizeof(nw_stream_commit) == sizeof(int), "enums are stored as int");

const struct nw_enum_name nw_admission_names[] = {
	{ "predictive", NW_ADMISSION_PREDICTIVE },
	{ "open", NW_ADMISSION_OPEN },
	{ NULL, 0 },
};

const struct nw_enum_name nw_role_names[] = {
	{ "prefill", NW_ROLE_PREFILL },
	{ "decode", NW_ROLE_DECODE },
	{ NULL, 0 },
};

static const struct nw_enum_name stream_commit_names[] = {
	{ "before_decode", NW_STREAM_COMMIT_BEFORE_DECODE },
	{ "first_event", NW_STREAM_COMMIT_FIRST_EVENT },
	{ NULL, 0 },
};

static const struct nw_enum_name log_format_names[] = {
	{ "json", NW_LOG_FORMAT_JSON },
	{ "text", NW_LOG_FORMAT_TEXT },
	{ NULL, 0 },
};

static const struct nw_enum_name log_level_names[] = {
	{ "debug", 0 }, { "info", 0 }, { "warning", 0 }, { "error", 0 },
	{ NULL, 0 },
};

/* Whether [from, to) is a numeric address of the family. */
static bool
is_address(int family, const char *from, const char *to)
{
	unsigned char buf[sizeof(struct in6_addr)];
	char text[INET6_ADDRSTRLEN];

	if (to - from >= (ptrdiff_t)sizeof text)
		return false;
	memcpy(text, from, (size_t)(to - from));
	text[to - from] = '\0';
	return inet_pton(family, text, buf) == 1;
}

/* Engine URLs: exactly http://host:port or https://host:port, an optional
 * trailing slash dropped. Strict on purpose: a path or query here would
 * silently be ignored by the dialects, which append their own endpoints. */
static char *
check_engine_url(const char *s, char **normalized)
{
	const char *p = s, *host, *host_end;
	unsigned long port = 0;
	int digits = 0;

	if (strncmp(p, "http://", 7) == 0)
		p += 7;
	else if (strncmp(p, "https://", 8) == 0)
		p += 8;
	else
		return g_strdup("does not start with http:// or https://");
	host = p;
	if (memchr(host, '@', strcspn(host, "/?#")) != NULL)
		return g_strdup("has user information (user@ or user:password@), which is not allowed");
	if (*p == '[') {
		p += strspn(p + 1, "0123456789abcdefABCDEF:.") + 1;
		if (*p != ']' || p == host + 1 || !is_address(AF_INET6, host + 1, p))
			return g_strdup("has a malformed [IPv6] host");
		host_end = ++p;
	} else {
		p += strspn(p, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
		               "0123456789.-_");
		host_end = p;
		if (*p == ':' && memchr(p + 1, ':', strcspn(p + 1, "/?#")) != NULL)
			return g_strdup("has an IPv6 address without brackets: write it as "
			                "[address]:port");
		if (host_end == host)
			return g_strdup("has no host");
		/* All digits and dots is an IPv4 address, never a name. */
		if (strspn(host, "0123456789.") == (size_t)(host_end - host) &&
		    !is_address(AF_INET, host, host_end))
			return g_strdup("has a malformed IPv4 address");
	}
	if (*p != ':')
		return g_strdup(*p == '\0' || *p == '/' ? "has no port"
		                                        : "has a character not allowed in a host");
	for (p++; *p >= '0' && *p <= '9' && digits < 6; p++, digits++)
		port = port * 10 + (unsigned long)(*p - '0');
	if (digits == 0)
		return g_strdup("has no port");
	if (port < 1 || port > 65535 || digits > 5)
		return g_strdup("has a port outside 1 to 65535");
	if (*p == '/' && p[1] == '\0') {
		*normalized = g_strndup(s, (gsize)(p - s));
		return NULL;
	}
	if (*p != '\0')
		return g_strdup("has something after the port (a path, query or fragment)");
	return NULL;
}

/* A file Narwhal must read at start (a CA bundle). */
static char *
check_readable_file(const char *s, char **normalized)
{
	if (!g_file_test(s, G_FILE_TEST_IS_REGULAR))
		return g_strdup("is not a file");
	if (access(s, R_OK) != 0)
		return g_strdup_printf("cannot be read (%s)", g_strerror(errno));
	return NULL;
}

/* A directory searched for plugins (plugins.dir): one that is not there
 * would be skipped without a word while the next place on the search path
 * serves the plugin. */
static char *
check_directory(const char *s, char **normalized)
{
	(void)normalized;
	if (!g_file_test(s, G_FILE_TEST_IS_DIR))
		return g_strdup(g_file_test(s, G_FILE_TEST_EXISTS) ? "is not a directory"
		                                                   : "does not exist");
	return NULL;
}

/* The admin listener binds numeric addresses only (docs/admin.md). */
static char *
check_numeric_address(const char *s, char **normalized)
{
	const char *end = s + strlen(s);

	(void)normalized;
	if (is_address(AF_INET, s, end) || is_address(AF_INET6, s, end))
		return NULL;
	return g_strdup("is not a numeric IPv4 or IPv6 address");
}

#define CFG(p, t, m) .path = (p), .type = (t), .offset = offsetof(struct nw_config, m)
#define ENG(p, t, m) .path = (p), .type = (t), .offset = offsetof(struct nw_engine_config, m)

/* Value classes shared by many rows. */
#define SECONDS_POS                                                              \
	.flags = NW_FF_MIN | NW_FF_MIN_EXCL | NW_FF_MAX, .min = 0, .max = NW_CONFIG_SECONDS_MAX, \
	.valid = "a number of seconds greater than 0 and at most 1e9"
#define SECONDS_NONNEG                                                           \
	.flags = NW_FF_MIN | NW_FF_MAX, .min = 0, .max = NW_CONFIG_SECONDS_MAX,  \
	.valid = "a number of seconds from 0 to 1e9"
#define COUNT_FROM(lo, text)                                                     \
	.flags = NW_FF_MIN | NW_FF_MAX, .min = (lo), .max = NW_CONFIG_COUNT_MAX, \
	.valid = "an integer from " text " to 1000000"
#define POSITIVE                                                                 \
	.flags = NW_FF_MIN | NW_FF_MIN_EXCL, .min = 0, .valid = "a number greater than 0"
#define NONNEG .flags = NW_FF_MIN, .min = 0, .valid = "a number of at least 0"
#define BYTES                                                                    \
	.flags = NW_FF_MIN | NW_FF_MAX, .min = 1, .max = (double)NW_CONFIG_BYTES_MAX, \
	.valid = "an integer number of bytes from 1 to 1099511627776 (1 TiB)"
#define PLUGIN_NAME                                                              \
	.charset = NW_CHARS_PLUGIN,                                              \
	.valid = "a plugin name of lowercase letters, digits and '-'"
#define PLUGIN_PATH                                                              \
	.flags = NW_FF_NULLABLE,                                                 \
	.valid = "null (find the plugin by name) or the path of a plugin .so file"
#define PLUGIN_CONFIG .valid = "an object, handed to the plugin as it is"

static const struct nw_field config_fields[] = {
	/* server (Narwhal's own) */
	{ CFG("server.host", NW_FT_STRING, server.host), .def_str = "127.0.0.1",
	  .charset = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789.-_:%",
	  .valid = "a host name or IP address to listen on" },
	{ CFG("server.port", NW_FT_U32, server.port), .def = 8000,
	  .flags = NW_FF_MIN | NW_FF_MAX, .min = 0, .max = 65535,
	  .valid = "an integer from 0 to 65535 (0 picks a free port)" },
	{ CFG("server.client_timeout_s", NW_FT_DOUBLE, server.client_timeout_s), .def = 30.0,
	  SECONDS_POS },
	/* Beyond the spec: slow clients (docs/deployment.md, "Slow clients"). */
	{ CFG("server.head_timeout_s", NW_FT_DOUBLE, server.head_timeout_s), .def = 10.0,
	  SECONDS_POS },
	{ CFG("server.body_timeout_s", NW_FT_DOUBLE, server.body_timeout_s), .def = 60.0,
	  SECONDS_POS },
	{ CFG("server.max_pending_connections", NW_FT_U32, server.max_pending_connections),
	  .def = 1024, .flags = NW_FF_MIN | NW_FF_MAX, .min = 1, .max = 1048576,
	  .valid = "an integer from 1 to 1048576" },
	/* Beyond the spec: a stop signal's drain (docs/deployment.md). */
	{ CFG("server.drain_timeout_s", NW_FT_DOUBLE, server.drain_timeout_s), .def = 30.0,
	  SECONDS_NONNEG },
	{ CFG("server.api_keys_env", NW_FT_STRING, server.api_keys_env), .flags = NW_FF_NULLABLE,
	  .charset = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_",
	  .valid = "null (no client key needed) or the name of an environment variable "
	           "(letters, digits, '_') holding the accepted keys, comma-separated" },

	/* admin: the admin API's listener (Narwhal's own, docs/admin.md) */
	{ CFG("admin.host", NW_FT_STRING, admin.host), .def_str = "127.0.0.1",
	  .check = check_numeric_address,
	  .valid = "a numeric IPv4 or IPv6 address to listen on, loopback unless "
	           "admin.allow_remote is true" },
	{ CFG("admin.port", NW_FT_U32, admin.port), .def = 8081,
	  .flags = NW_FF_MIN | NW_FF_MAX, .min = 0, .max = 65535,
	  .valid = "an integer from 0 to 65535 (0 picks a free port)" },
	{ CFG("admin.token_env", NW_FT_STRING, admin.token_env), .flags = NW_FF_NULLABLE,
	  .charset = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_",
	  .valid = "null (no admin listener) or the name of an environment variable "
	           "(letters, digits, '_') holding the admin API's bearer token" },
	{ CFG("admin.allow_remote", NW_FT_BOOL, admin.allow_remote), .def = false,
	  .valid = "true or false" },

	/* log (Narwhal's own) */
	{ CFG("log.level", NW_FT_STRING, log.level), .def_str = "info", .names = log_level_names,
	  .valid = "one of \"debug\", \"info\", \"warning\", \"error\"" },
	{ CFG("log.format", NW_FT_ENUM, log.format), .def = NW_LOG_FORMAT_JSON,
	  .names = log_format_names, .valid = "one of \"json\", \"text\"" },
	/* Beyond the spec: the access log (docs/metrics.md, "Access log"). */
	{ CFG("log.access", NW_FT_BOOL, log.access), .def = true, .valid = "true or false" },

	/* slo: the spec prices against these targets without fixing defaults */
	{ CFG("slo.ttft_s", NW_FT_DOUBLE, slo.ttft_s), .def = 1.0, SECONDS_POS },
	{ CFG("slo.tpot_s", NW_FT_DOUBLE, slo.tpot_s), .def = 0.1, SECONDS_POS },

	/* serving: spec 4.1, 4.2 and 6 */
	{ CFG("serving.admission", NW_FT_ENUM, serving.admission), .def = NW_ADMISSION_PREDICTIVE,
	  .names = nw_admission_names, .valid = "one of \"predictive\", \"open\"" },
	{ CFG("serving.admission_margin", NW_FT_DOUBLE, serving.admission_margin), .def = 0.0,
	  NONNEG },
	{ CFG("serving.max_connections", NW_FT_U32, serving.max_connections), .def = 512,
	  COUNT_FROM(1, "1") },
	{ CFG("serving.queue_capacity", NW_FT_U32, serving.queue_capacity), .def = 0,
	  COUNT_FROM(0, "0") },
	{ CFG("serving.queue_timeout_s", NW_FT_DOUBLE, serving.queue_timeout_s), .def = 0.0,
	  SECONDS_NONNEG },
	{ CFG("serving.prefill_concurrency", NW_FT_U32, serving.prefill_concurrency), .def = 0,
	  COUNT_FROM(0, "0") },
	{ CFG("serving.decode_concurrency", NW_FT_U32, serving.decode_concurrency), .def = 0,
	  COUNT_FROM(0, "0") },
	{ CFG("serving.handoff_timeout_s", NW_FT_DOUBLE, serving.handoff_timeout_s), .def = 0.0,
	  SECONDS_NONNEG },
	{ CFG("serving.max_attempts", NW_FT_U32, serving.max_attempts), .def = 1,
	  .flags = NW_FF_MIN | NW_FF_MAX, .min = 1, .max = 3, .valid = "an integer from 1 to 3" },
	{ CFG("serving.retry_base_s", NW_FT_DOUBLE, serving.retry_base_s), .def = 0.1,
	  SECONDS_NONNEG },
	{ CFG("serving.retry_cap_s", NW_FT_DOUBLE, serving.retry_cap_s), .def = 1.0,
	  SECONDS_NONNEG },
	{ CFG("serving.retry_budget", NW_FT_U32, serving.retry_budget), .def = 10,
	  COUNT_FROM(0, "0") },
	{ CFG("serving.retry_replenish", NW_FT_DOUBLE, serving.retry_replenish), .def = 0.1,
	  .flags = NW_FF_MIN | NW_FF_MAX, .min = 0, .max = 1, .valid = "a number from 0 to 1" },
	{ CFG("serving.max_request_bytes", NW_FT_U64, serving.max_request_bytes),
	  .def = 4194304, BYTES },
	{ CFG("serving.max_response_bytes", NW_FT_U64, serving.max_response_bytes),
	  .def = 16777216, BYTES },
	{ CFG("serving.request_timeout_s", NW_FT_DOUBLE, serving.request_timeout_s), .def = 600.0,
	  SECONDS_POS },
	{ CFG("serving.prefill_timeout_s", NW_FT_DOUBLE, serving.prefill_timeout_s), .def = 120.0,
	  SECONDS_POS },
	{ CFG("serving.stream_commit", NW_FT_ENUM, serving.stream_commit),
	  .def = NW_STREAM_COMMIT_BEFORE_DECODE, .names = stream_commit_names,
	  .valid = "one of \"before_decode\", \"first_event\"" },

	/* engine: spec 4.1 and 6 */
	{ CFG("engine.control_connections", NW_FT_U32, engine.control_connections), .def = 0,
	  COUNT_FROM(0, "0") },
	{ CFG("engine.decode_read_timeout_s", NW_FT_DOUBLE, engine.decode_read_timeout_s),
	  .def = 60.0, SECONDS_NONNEG },
	{ CFG("engine.first_token_timeout_s", NW_FT_DOUBLE, engine.first_token_timeout_s),
	  .def = 2.5, SECONDS_POS },
	{ CFG("engine.stream_decode", NW_FT_BOOL, engine.stream_decode), .def = true,
	  .valid = "true or false" },
	{ CFG("engine.tokenize", NW_FT_BOOL, engine.tokenize), .def = true,
	  .valid = "true or false" },
	{ CFG("engine.tokenize_timeout_s", NW_FT_DOUBLE, engine.tokenize_timeout_s), .def = 2.0,
	  SECONDS_POS },
	{ CFG("engine.chars_per_token", NW_FT_DOUBLE, engine.chars_per_token), .def = 3.8,
	  POSITIVE },
	{ CFG("engine.pool_timeout_s", NW_FT_DOUBLE, engine.pool_timeout_s), .def = 5.0,
	  SECONDS_POS },
	{ CFG("engine.connect_timeout_s", NW_FT_DOUBLE, engine.connect_timeout_s), .def = 10.0,
	  SECONDS_POS },
	{ CFG("engine.health_timeout_s", NW_FT_DOUBLE, engine.health_timeout_s), .def = 5.0,
	  SECONDS_POS },
	{ CFG("engine.tls_ca_file", NW_FT_STRING, engine.tls_ca_file), .flags = NW_FF_NULLABLE,
	  .check = check_readable_file,
	  .valid = "null (the system's CA store) or a readable PEM file of CA certificates" },
	{ CFG("engine.tls_verify", NW_FT_BOOL, engine.tls_verify), .def = true,
	  .valid = "true or false" },

	/* profiles, recovery: spec 6 and 7 */
	{ CFG("profiles.path", NW_FT_STRING, profiles.path), .def_str = "runs/profiles.json",
	  .valid = "the path of the profile store" },
	{ CFG("recovery.failure_quarantine_s", NW_FT_DOUBLE, recovery.failure_quarantine_s),
	  .def = 0.0, SECONDS_NONNEG },
	{ CFG("recovery.health.window_s", NW_FT_DOUBLE, recovery.health.window_s), .def = 30.0,
	  SECONDS_POS },
	{ CFG("recovery.health.min_samples", NW_FT_U32, recovery.health.min_samples), .def = 10,
	  COUNT_FROM(1, "1") },
	/* recovery: Narwhal's own rules (docs/recovery.md) */
	{ CFG("recovery.health.failure_ratio", NW_FT_DOUBLE, recovery.health.failure_ratio),
	  .def = 0.5, .flags = NW_FF_MIN | NW_FF_MAX | NW_FF_MIN_EXCL, .min = 0, .max = 1,
	  .valid = "a number greater than 0 and at most 1" },
	{ CFG("recovery.probe_failures", NW_FT_U32, recovery.probe_failures), .def = 2,
	  COUNT_FROM(1, "1") },
	{ CFG("recovery.passive_failures", NW_FT_U32, recovery.passive_failures), .def = 3,
	  COUNT_FROM(0, "0") },
	{ CFG("recovery.verify_backoff_s", NW_FT_DOUBLE, recovery.verify_backoff_s), .def = 1.0,
	  SECONDS_POS },
	{ CFG("recovery.verify_backoff_max_s", NW_FT_DOUBLE, recovery.verify_backoff_max_s),
	  .def = 30.0, SECONDS_POS },
	{ CFG("recovery.stall_s", NW_FT_DOUBLE, recovery.stall_s), .def = 5.0, SECONDS_NONNEG },

	/* controller: spec 7 */
	{ CFG("controller.policy", NW_FT_STRING, controller.policy), .def_str = "reactive",
	  PLUGIN_NAME },
	{ CFG("controller.advisory", NW_FT_BOOL, controller.advisory), .def = false,
	  .valid = "true or false" },
	{ CFG("controller.monitor_interval_s", NW_FT_DOUBLE, controller.monitor_interval_s),
	  .def = 1.0, SECONDS_POS },
	{ CFG("controller.monitor_failure_limit", NW_FT_U32, controller.monitor_failure_limit),
	  .def = 5, COUNT_FROM(1, "1") },
	{ CFG("controller.min_prefill", NW_FT_U32, controller.min_prefill), .def = 1,
	  COUNT_FROM(1, "1") },
	{ CFG("controller.min_decode", NW_FT_U32, controller.min_decode), .def = 1,
	  COUNT_FROM(1, "1") },
	{ CFG("controller.flip_history", NW_FT_U32, controller.flip_history), .def = 1000,
	  COUNT_FROM(1, "1") },
	{ CFG("controller.thresholds.expand", NW_FT_DOUBLE, controller.thresholds.expand),
	  .def = 1.0, POSITIVE },
	{ CFG("controller.thresholds.shrink", NW_FT_DOUBLE, controller.thresholds.shrink),
	  .def = 0.5, NONNEG },
	{ CFG("controller.thresholds.cooldown_s", NW_FT_DOUBLE, controller.thresholds.cooldown_s),
	  .def = 10.0, SECONDS_NONNEG },
	{ CFG("controller.thresholds.sustained_intervals", NW_FT_U32,
	      controller.thresholds.sustained_intervals), .def = 3, COUNT_FROM(1, "1") },
	{ CFG("controller.thresholds.dwell_s", NW_FT_DOUBLE, controller.thresholds.dwell_s),
	  .def = 0.0, SECONDS_NONNEG },
	{ CFG("controller.thresholds.panic_ratio", NW_FT_DOUBLE, controller.thresholds.panic_ratio),
	  .def = 0.0, .flags = NW_FF_MIN | NW_FF_ZERO_OK, .min = 1,
	  .valid = "0 (off) or a number of at least 1" },
	{ CFG("controller.thresholds.flip_resident_guard", NW_FT_U32,
	      controller.thresholds.flip_resident_guard), .def = 0, COUNT_FROM(0, "0") },

	/* controller.reactive: spec 7.7 */
	{ CFG("controller.reactive.window_s", NW_FT_DOUBLE, controller.reactive.window_s),
	  .def = 120.0, SECONDS_POS },
	{ CFG("controller.reactive.confirmations", NW_FT_U32, controller.reactive.confirmations),
	  .def = 2, COUNT_FROM(1, "1") },
	{ CFG("controller.reactive.utilization", NW_FT_DOUBLE, controller.reactive.utilization),
	  .def = 0.8, .flags = NW_FF_MIN | NW_FF_MIN_EXCL | NW_FF_MAX, .min = 0, .max = 1,
	  .valid = "a number greater than 0 and at most 1" },
	{ CFG("controller.reactive.min_arrivals", NW_FT_U32, controller.reactive.min_arrivals),
	  .def = 10, COUNT_FROM(1, "1") },
	{ CFG("controller.reactive.demand_floor", NW_FT_DOUBLE, controller.reactive.demand_floor),
	  .def = 0.5, POSITIVE },
	{ CFG("controller.reactive.movement_margin", NW_FT_DOUBLE,
	      controller.reactive.movement_margin), .def = 0.05,
	  .flags = NW_FF_MIN | NW_FF_MAX | NW_FF_MAX_EXCL, .min = 0, .max = 1,
	  .valid = "a number from 0 up to but not including 1" },
	{ CFG("controller.reactive.step_s", NW_FT_DOUBLE, controller.reactive.step_s),
	  .def = 5.0, SECONDS_POS },
	{ CFG("controller.reactive.evidence_span_s", NW_FT_DOUBLE,
	      controller.reactive.evidence_span_s), .def = 60.0, SECONDS_POS },
	{ CFG("controller.reactive.evidence_max_span_s", NW_FT_DOUBLE,
	      controller.reactive.evidence_max_span_s), .def = 120.0, SECONDS_POS },
	{ CFG("controller.reactive.evidence_min_arrivals", NW_FT_U32,
	      controller.reactive.evidence_min_arrivals), .def = 10, COUNT_FROM(1, "1") },
	{ CFG("controller.reactive.demand_rise_tolerance", NW_FT_DOUBLE,
	      controller.reactive.demand_rise_tolerance), .def = 0.25, NONNEG },
	{ CFG("controller.reactive.decode_correction_min", NW_FT_DOUBLE,
	      controller.reactive.decode_correction_min), .def = 0.5, POSITIVE },
	{ CFG("controller.reactive.decode_correction_max", NW_FT_DOUBLE,
	      controller.reactive.decode_correction_max), .def = 2.0, POSITIVE },
	{ CFG("controller.reactive.decode_correction_alpha", NW_FT_DOUBLE,
	      controller.reactive.decode_correction_alpha), .def = 0.2,
	  .flags = NW_FF_MIN | NW_FF_MIN_EXCL | NW_FF_MAX, .min = 0, .max = 1,
	  .valid = "a number greater than 0 and at most 1" },
	{ CFG("controller.reactive.decode_correction_min_samples", NW_FT_U32,
	      controller.reactive.decode_correction_min_samples), .def = 8, COUNT_FROM(1, "1") },

	/* fleet */
	{ CFG("fleet.model", NW_FT_STRING, fleet.model), .flags = NW_FF_NULLABLE,
	  .valid = "null (ask the engines) or the served model name" },
	{ CFG("fleet.engines", NW_FT_ENGINES, fleet.engines), .flags = NW_FF_REQUIRED,
	  .valid = "an array of at least one engine object" },

	/* plugins */
	{ CFG("plugins.dir", NW_FT_STRING, plugins.dir), .flags = NW_FF_NULLABLE,
	  .check = check_directory,
	  .valid = "null (search $NARWHAL_PLUGIN_DIR, then the installed plugin directory) "
	           "or an existing directory" },
	{ CFG("plugins.admission.name", NW_FT_STRING, plugins.admission.name),
	  .flags = NW_FF_NULLABLE, .charset = NW_CHARS_PLUGIN,
	  .valid = "null (use serving.admission) or a plugin name of lowercase letters, "
	           "digits and '-'" },
	{ CFG("plugins.admission.path", NW_FT_STRING, plugins.admission.path), PLUGIN_PATH },
	{ CFG("plugins.admission.config", NW_FT_OBJECT, plugins.admission.config), PLUGIN_CONFIG },
	{ CFG("plugins.admission.max_inflight", NW_FT_U32, plugins.admission_max_inflight),
	  .def = 0, .flags = NW_FF_MIN | NW_FF_MAX, .min = 0, .max = NW_CONFIG_COUNT_MAX,
	  .valid = "an integer from 0 (use serving.max_connections) to 1000000" },
	{ CFG("plugins.placement.name", NW_FT_STRING, plugins.placement.name),
	  .def_str = "slo-cost", PLUGIN_NAME },
	{ CFG("plugins.placement.path", NW_FT_STRING, plugins.placement.path), PLUGIN_PATH },
	{ CFG("plugins.placement.config", NW_FT_OBJECT, plugins.placement.config), PLUGIN_CONFIG },
	{ CFG("plugins.controller.path", NW_FT_STRING, plugins.controller.path), PLUGIN_PATH },
	{ CFG("plugins.controller.config", NW_FT_OBJECT, plugins.controller.config),
	  PLUGIN_CONFIG },
	{ CFG("plugins.dialects", NW_FT_OBJECT, plugins.dialects),
	  .valid = "an object mapping dialect names to their config objects" },
};

static const struct nw_field engine_fields[] = {
	{ ENG("id", NW_FT_STRING, id), .flags = NW_FF_REQUIRED, .charset = NW_CHARS_ID,
	  .valid = "a name of letters, digits, '.', '_' and '-'" },
	{ ENG("url", NW_FT_STRING, url), .flags = NW_FF_REQUIRED, .check = check_engine_url,
	  .valid = "an http://host:port or https://host:port URL with no path" },
	{ ENG("dialect", NW_FT_STRING, dialect), .def_str = "vllm", PLUGIN_NAME },
	/* no default: an absent role is assigned by the loader */
	{ ENG("role", NW_FT_ENUM, role), .def = 0, .names = nw_role_names,
	  .valid = "one of \"prefill\", \"decode\"" },
	{ ENG("pinned", NW_FT_BOOL, pinned), .def = false, .valid = "true or false" },
	{ ENG("kv_lease_s", NW_FT_DOUBLE, kv_lease_s), .def = 30.0, SECONDS_POS },
};

const struct nw_table nw_config_table = { config_fields, G_N_ELEMENTS(config_fields) };
const struct nw_table nw_engine_table = { engine_fields, G_N_ELEMENTS(engine_fields) };

const struct nw_moved_key nw_config_moved_keys[] = {
	{ "plugins.controller.name",
	  "not accepted here: the controller plugin is named by controller.policy" },
	{ NULL, NULL },
};

const struct nw_field *
nw_field_find(const struct nw_table *t, const char *path)
{
	for (size_t i = 0; i < t->n_fields; i++) {
		if (strcmp(t->fields[i].path, path) == 0)
			return &t->fields[i];
	}
	return NULL;
}

bool
nw_field_is_section(const struct nw_table *t, const char *path)
{
	size_t len = strlen(path);

	for (size_t i = 0; i < t->n_fields; i++) {
		const char *p = t->fields[i].path;
		if (strncmp(p, path, len) == 0 && p[len] == '.')
			return true;
	}
	return false;
}

const char *
nw_enum_name_of(const struct nw_enum_name *names, int value)
{
	for (; names && names->name; names++) {
		if (names->value == value)
			return names->name;
	}
	return NULL;
}

#define AT(base, f, type) ((type *)((char *)(base) + (f)->offset))
#define AT_CONST(base, f, type) ((const type *)((const char *)(base) + (f)->offset))

void
nw_field_set_default(const struct nw_field *f, void *base)
{
	switch (f->type) {
	case NW_FT_BOOL: *AT(base, f, bool) = f->def != 0; break;
	case NW_FT_U32: *AT(base, f, uint32_t) = (uint32_t)f->def; break;
	case NW_FT_U64: *AT(base, f, uint64_t) = (uint64_t)f->def; break;
	case NW_FT_DOUBLE: *AT(base, f, double) = f->def; break;
	case NW_FT_ENUM: *AT(base, f, int) = (int)f->def; break;
	case NW_FT_STRING:
		g_free(*AT(base, f, char *));
		*AT(base, f, char *) = g_strdup(f->def_str);
		break;
	case NW_FT_OBJECT:
		json_decref(*AT(base, f, json_t *));
		*AT(base, f, json_t *) = json_object();
		break;
	case NW_FT_ENGINES:
		break; /* config.c owns the engine array */
	}
}

void
nw_field_free(const struct nw_field *f, void *base)
{
	if (f->type == NW_FT_STRING) {
		g_free(*AT(base, f, char *));
		*AT(base, f, char *) = NULL;
	} else if (f->type == NW_FT_OBJECT) {
		json_decref(*AT(base, f, json_t *));
		*AT(base, f, json_t *) = NULL;
	}
}

json_t *
nw_field_to_json(const struct nw_field *f, const void *base)
{
	const char *s;

	switch (f->type) {
	case NW_FT_BOOL: return json_boolean(*AT_CONST(base, f, bool));
	case NW_FT_U32: return json_integer((json_int_t)*AT_CONST(base, f, uint32_t));
	case NW_FT_U64: return json_integer((json_int_t)*AT_CONST(base, f, uint64_t));
	case NW_FT_DOUBLE: return json_real(*AT_CONST(base, f, double));
	case NW_FT_ENUM:
		s = nw_enum_name_of(f->names, *AT_CONST(base, f, int));
		return s ? json_string(s) : json_null();
	case NW_FT_STRING:
		s = *AT_CONST(base, f, char *);
		return s ? json_string(s) : json_null();
	case NW_FT_OBJECT:
		return json_deep_copy(*AT_CONST(base, f, json_t *));
	case NW_FT_ENGINES:
		break;
	}
	return json_null();
}

char *
nw_number_text(double v)
{
	char buf[G_ASCII_DTOSTR_BUF_SIZE];

	/* %.15g reads back exactly for every number a person types; fall back
	 * to 17 digits for the rest. */
	g_ascii_formatd(buf, sizeof buf, "%.15g", v);
	if (g_ascii_strtod(buf, NULL) != v)
		g_ascii_formatd(buf, sizeof buf, "%.17g", v);
	return g_strdup(buf);
}

char *
nw_text_escape(const char *s, size_t max)
{
	GString *out = g_string_new(NULL);
	size_t chars = 0;

	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		bool starts_char = (*p & 0xc0) != 0x80; /* not a UTF-8 continuation */

		if (starts_char && max && chars++ == max) {
			g_string_append(out, "...");
			break;
		}
		if (*p == '"' || *p == '\\')
			g_string_append_printf(out, "\\%c", *p);
		else if (*p < 0x20 || *p == 0x7f)
			g_string_append_printf(out, "\\u%04x", *p);
		else
			g_string_append_c(out, (char)*p);
	}
	return g_string_free(out, FALSE);
}

/* Longest excerpt of a value a message quotes. */
#define QUOTE_MAX 60

char *
nw_json_describe(const json_t *v)
{
	char *num, *out;

	switch (json_typeof(v)) {
	case JSON_OBJECT: return g_strdup("an object");
	case JSON_ARRAY: return g_strdup("an array");
	case JSON_TRUE: return g_strdup("true");
	case JSON_FALSE: return g_strdup("false");
	case JSON_NULL: return g_strdup("null");
	case JSON_INTEGER:
		return g_strdup_printf("integer %" JSON_INTEGER_FORMAT, json_integer_value(v));
	case JSON_REAL:
		num = nw_number_text(json_real_value(v));
		/* show that 2.0 was written as a real, not the integer 2 */
		out = g_strdup_printf("real number %s%s", num,
		                      strpbrk(num, ".eEn") ? "" : ".0");
		g_free(num);
		return out;
	case JSON_STRING: {
		char *q = nw_text_escape(json_string_value(v), QUOTE_MAX);
		out = g_strdup_printf("string \"%s\"", q);
		g_free(q);
		return out;
	}
	}
	return g_strdup("a value");
}

/* The value as written, for "X is out of range". */
static char *
value_text(const json_t *v)
{
	if (json_is_integer(v))
		return g_strdup_printf("%" JSON_INTEGER_FORMAT, json_integer_value(v));
	return nw_number_text(json_number_value(v));
}

static char *
wrong_type(const struct nw_field *f, const json_t *v)
{
	char *d = nw_json_describe(v);
	char *out = g_strdup_printf("wrong type, found %s: %s", d, f->valid);
	g_free(d);
	return out;
}

static bool
in_range(const struct nw_field *f, double v)
{
	if ((f->flags & NW_FF_ZERO_OK) && v == 0)
		return true;
	if (f->flags & NW_FF_MIN) {
		if (v < f->min || ((f->flags & NW_FF_MIN_EXCL) && v == f->min))
			return false;
	}
	if (f->flags & NW_FF_MAX) {
		if (v > f->max || ((f->flags & NW_FF_MAX_EXCL) && v == f->max))
			return false;
	}
	return true;
}

/* "x" is not a valid choice, with a suggestion when one is close. */
static char *
bad_choice(const struct nw_field *f, const char *s)
{
	const char *names[16];
	size_t n = 0;
	const char *best;
	char *q = nw_text_escape(s, QUOTE_MAX), *out;

	for (const struct nw_enum_name *e = f->names; e->name && n < G_N_ELEMENTS(names); e++)
		names[n++] = e->name;
	best = nw_closest(s, names, n);
	if (best)
		out = g_strdup_printf("\"%s\" is not a valid choice (did you mean \"%s\"?): %s",
		                      q, best, f->valid);
	else
		out = g_strdup_printf("\"%s\" is not a valid choice: %s", q, f->valid);
	g_free(q);
	return out;
}

static char *
store_string(const struct nw_field *f, void *base, const json_t *v)
{
	const char *s;
	char *normalized = NULL, *problem;
	size_t bad;

	if (json_is_null(v) && (f->flags & NW_FF_NULLABLE)) {
		g_free(*AT(base, f, char *));
		*AT(base, f, char *) = NULL;
		return NULL;
	}
	if (!json_is_string(v))
		return wrong_type(f, v);
	s = json_string_value(v);
	if (*s == '\0')
		return g_strdup_printf("empty string: %s", f->valid);
	if (f->names) {
		const struct nw_enum_name *n;
		for (n = f->names; n->name; n++) {
			if (strcmp(n->name, s) == 0)
				break;
		}
		if (!n->name)
			return bad_choice(f, s);
	}
	if (f->charset && s[bad = strspn(s, f->charset)] != '\0') {
		char *q = nw_text_escape(s, QUOTE_MAX);
		char *out = g_strdup_printf("\"%s\" has a character that is not allowed ('%c'): %s",
		                            q, g_ascii_isprint(s[bad]) ? s[bad] : '?', f->valid);
		g_free(q);
		return out;
	}
	if (f->check && (problem = f->check(s, &normalized)) != NULL) {
		char *q = nw_text_escape(s, QUOTE_MAX);
		char *out = g_strdup_printf("\"%s\" %s: %s", q, problem, f->valid);
		g_free(q);
		g_free(problem);
		return out;
	}
	g_free(*AT(base, f, char *));
	*AT(base, f, char *) = normalized ? normalized : g_strdup(s);
	return NULL;
}

char *
nw_field_store(const struct nw_field *f, void *base, const json_t *v)
{
	switch (f->type) {
	case NW_FT_BOOL:
		if (!json_is_boolean(v))
			return wrong_type(f, v);
		*AT(base, f, bool) = json_is_true(v);
		return NULL;
	case NW_FT_U32:
	case NW_FT_U64: {
		json_int_t i;
		double max = f->type == NW_FT_U32 ? (double)UINT32_MAX : (double)INT64_MAX;
		if (!json_is_integer(v))
			return wrong_type(f, v);
		i = json_integer_value(v);
		/* the type's own limit holds even when the row sets no maximum */
		if (i < 0 || (double)i > max || !in_range(f, (double)i)) {
			char *t = value_text(v);
			char *out = g_strdup_printf("%s is out of range: %s", t, f->valid);
			g_free(t);
			return out;
		}
		if (f->type == NW_FT_U32)
			*AT(base, f, uint32_t) = (uint32_t)i;
		else
			*AT(base, f, uint64_t) = (uint64_t)i;
		return NULL;
	}
	case NW_FT_DOUBLE: {
		double d;
		if (!json_is_number(v))
			return wrong_type(f, v);
		d = json_number_value(v);
		if (!isfinite(d) || !in_range(f, d)) {
			char *t = value_text(v);
			char *out = g_strdup_printf("%s is out of range: %s", t, f->valid);
			g_free(t);
			return out;
		}
		*AT(base, f, double) = d == 0 ? 0.0 : d; /* -0.0 would print as -0.0 */
		return NULL;
	}
	case NW_FT_ENUM:
		if (!json_is_string(v))
			return wrong_type(f, v);
		for (const struct nw_enum_name *n = f->names; n->name; n++) {
			if (strcmp(n->name, json_string_value(v)) == 0) {
				*AT(base, f, int) = n->value;
				return NULL;
			}
		}
		return bad_choice(f, json_string_value(v));
	case NW_FT_STRING:
		return store_string(f, base, v);
	case NW_FT_OBJECT:
		if (!json_is_object(v))
			return wrong_type(f, v);
		json_decref(*AT(base, f, json_t *));
		*AT(base, f, json_t *) = json_deep_copy(v);
		return NULL;
	case NW_FT_ENGINES:
		break;
	}
	return g_strdup("internal error: field type has no loader");
}

unsigned
nw_edit_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	unsigned *d, out;

	/* optimal string alignment over a (la+1) x (lb+1) matrix */
	d = g_new(unsigned, (la + 1) * (lb + 1));
#define D(i, j) d[(i) * (lb + 1) + (j)]
	for (size_t i = 0; i <= la; i++)
		D(i, 0) = (unsigned)i;
	for (size_t j = 0; j <= lb; j++)
		D(0, j) = (unsigned)j;
	for (size_t i = 1; i <= la; i++) {
		for (size_t j = 1; j <= lb; j++) {
			unsigned cost = g_ascii_tolower(a[i - 1]) != g_ascii_tolower(b[j - 1]);
			unsigned best = MIN(D(i - 1, j) + 1, D(i, j - 1) + 1);
			best = MIN(best, D(i - 1, j - 1) + cost);
			if (i > 1 && j > 1 &&
			    g_ascii_tolower(a[i - 1]) == g_ascii_tolower(b[j - 2]) &&
			    g_ascii_tolower(a[i - 2]) == g_ascii_tolower(b[j - 1]))
				best = MIN(best, D(i - 2, j - 2) + 1);
			D(i, j) = best;
		}
	}
	out = D(la, lb);
#undef D
	g_free(d);
	return out;
}

const char *
nw_closest(const char *word, const char *const *candidates, size_t n)
{
	const char *best = NULL;
	unsigned best_d = UINT_MAX;
	/* about one edit in three characters, at least one, at most three */
	unsigned limit = CLAMP((unsigned)strlen(word) / 3, 1u, 3u);

	if (strlen(word) > 64)
		return NULL;
	/* an abbreviation ("warn" for "warning") is as good as a typo */
	for (size_t i = 0; i < n && strlen(word) >= 3; i++) {
		if (g_ascii_strncasecmp(word, candidates[i], strlen(word)) == 0)
			return candidates[i];
	}
	for (size_t i = 0; i < n; i++) {
		unsigned d = nw_edit_distance(word, candidates[i]);
		if (d < best_d) {
			best_d = d;
			best = candidates[i];
		}
	}
	return best_d <= limit ? best : NULL;
}

/* The distinct keys the table allows directly below rel. */
static GPtrArray *
keys_below(const struct nw_table *t, const char *rel)
{
	GPtrArray *keys = g_ptr_array_new_with_free_func(g_free);
	size_t len = strlen(rel);

	for (size_t i = 0; i < t->n_fields; i++) {
		const char *p = t->fields[i].path, *end;
		char *k;

		if (len) {
			if (strncmp(p, rel, len) != 0 || p[len] != '.')
				continue;
			p += len + 1;
		}
		end = strchr(p, '.');
		k = end ? g_strndup(p, (gsize)(end - p)) : g_strdup(p);
		if (!g_ptr_array_find_with_equal_func(keys, k, g_str_equal, NULL))
			g_ptr_array_add(keys, k);
		else
			g_free(k);
	}
	return keys;
}

/* {"a": {"b": ...}} for the dotted key "a.b" */
static char *
nested_form(const char *key)
{
	char **parts = g_strsplit(key, ".", -1);
	GString *out = g_string_new(NULL);
	guint n = g_strv_length(parts);

	for (guint i = 0; i < n; i++)
		g_string_append_printf(out, "{\"%s\": ", parts[i]);
	g_string_append(out, "...");
	for (guint i = 0; i < n; i++)
		g_string_append_c(out, '}');
	g_strfreev(parts);
	return g_string_free(out, FALSE);
}

char *
nw_field_unknown_key(const struct nw_table *t, const char *rel, const char *key)
{
	char *full = *rel ? g_strconcat(rel, ".", key, NULL) : g_strdup(key);
	char *msg = NULL;
	GPtrArray *keys;
	const char *best;

	if (t == &nw_config_table) {
		for (const struct nw_moved_key *m = nw_config_moved_keys; m->path && !msg; m++) {
			if (strcmp(m->path, full) == 0)
				msg = g_strdup(m->hint);
		}
	}
	if (!msg && strchr(key, '.') && (nw_field_find(t, full) || nw_field_is_section(t, full))) {
		char *nested = nested_form(key);
		msg = g_strdup_printf("unknown key: dotted names are not expanded: nest it, as %s",
		                      nested);
		g_free(nested);
	}
	if (msg) {
		g_free(full);
		return msg;
	}
	g_free(full);

	keys = keys_below(t, rel);
	best = nw_closest(key, (const char *const *)keys->pdata, keys->len);
	if (best) {
		msg = g_strdup_printf("unknown key: did you mean \"%s\"?", best);
	} else {
		/* the right name in the wrong section */
		for (size_t i = 0; i < t->n_fields && !msg; i++) {
			const char *p = t->fields[i].path, *last = strrchr(p, '.');
			if (g_ascii_strcasecmp(last ? last + 1 : p, key) == 0)
				msg = g_strdup_printf("unknown key: did you mean \"%s\"?", p);
		}
	}
	if (!msg) {
		GString *list = g_string_new("unknown key: the keys here are ");
		for (guint i = 0; i < keys->len; i++)
			g_string_append_printf(list, "%s\"%s\"", i ? ", " : "",
			                       (const char *)keys->pdata[i]);
		msg = g_string_free(list, FALSE);
	}
	g_ptr_array_unref(keys);
	return msg;
}
