/*
 * Narwhal configuration: one JSON file, every field of the specification
 * with its default, type and range, the cross-field rules, the fleet and
 * the plugin selection. See docs/configuration.md.
 */
#ifndef NW_CONFIG_H
#define NW_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include <glib.h>
#include <jansson.h>

#include <narwhal/plugin-abi.h>

/* Narwhal's own upper bounds, so that derived arithmetic cannot overflow:
 * every duration converts to int64 nanoseconds, and counts that are summed
 * (connections plus queue) stay far from 32-bit limits. */
#define NW_CONFIG_SECONDS_MAX 1e9
#define NW_CONFIG_COUNT_MAX 1000000u
#define NW_CONFIG_BYTES_MAX 1099511627776ull /* 1 TiB */
/* The largest configuration file read (docs/configuration.md). */
#define NW_CONFIG_FILE_MAX_BYTES (16u << 20)

typedef enum nw_admission_mode {
	NW_ADMISSION_PREDICTIVE = 0,
	NW_ADMISSION_OPEN = 1,
} nw_admission_mode;

typedef enum nw_engine_role {
	NW_ROLE_PREFILL = 1, /* same values as narwhal_role */
	NW_ROLE_DECODE = 2,
} nw_engine_role;

/* When a streamed request's 200 is committed (docs/configuration.md). */
typedef enum nw_stream_commit {
	NW_STREAM_COMMIT_BEFORE_DECODE = 0, /* spec 4.3 */
	NW_STREAM_COMMIT_FIRST_EVENT = 1,   /* beyond the spec */
} nw_stream_commit;

typedef enum nw_log_format {
	NW_LOG_FORMAT_JSON = 0,
	NW_LOG_FORMAT_TEXT = 1,
} nw_log_format;

struct nw_engine_config {
	char *id;
	char *url;          /* http://host:port, no trailing slash */
	char *dialect;      /* dialect plugin name */
	nw_engine_role role; /* initial role */
	bool role_set;      /* role given in the file (else assigned) */
	bool pinned;
	double kv_lease_s;  /* verified backend KV lease */
};

/* One plugin selection: a name resolved in the plugin directory, or an
 * explicit path, plus its own config section (validated by the plugin). */
struct nw_plugin_config {
	char *name;
	char *path;     /* NULL: <plugins.dir>/<kind>-<name>.so */
	json_t *config; /* owned; an empty object when absent, never NULL */
};

struct nw_config {
	char *source; /* file name the config came from */
	int64_t loaded_unix_us; /* wall clock when nw_config_load_file read it; 0: not from a file */

	struct {
		char *host;
		uint32_t port; /* 0: ephemeral */
		double client_timeout_s; /* idle and slow-client bound */
		double head_timeout_s;   /* a whole request head (beyond the spec) */
		double body_timeout_s;   /* a whole request body (beyond the spec) */
		uint32_t max_pending_connections; /* connections without a head yet */
		double drain_timeout_s;  /* a stop signal's drain (beyond the spec) */
		char *api_keys_env; /* NULL: no client key; else the variable holding them */
	} server;

	/* The admin API's listener (beyond the spec; docs/admin.md). */
	struct {
		char *host;        /* numeric address; loopback unless allow_remote */
		uint32_t port;     /* 0: ephemeral */
		char *token_env;   /* NULL: no admin listener; else the variable with the token */
		bool allow_remote; /* allow a host that is not loopback */
	} admin;

	struct {
		char *level;  /* debug, info, warning, error */
		nw_log_format format;
		bool access; /* the access log (beyond the spec) */
	} log;

	struct {
		double ttft_s;
		double tpot_s;
	} slo;

	struct {
		nw_admission_mode admission;
		double admission_margin;
		uint32_t max_connections;
		uint32_t queue_capacity;
		double queue_timeout_s;
		uint32_t prefill_concurrency;
		uint32_t decode_concurrency;
		double handoff_timeout_s;
		uint32_t max_attempts;
		double retry_base_s;
		double retry_cap_s;
		uint32_t retry_budget;
		double retry_replenish;
		uint64_t max_request_bytes;
		uint64_t max_response_bytes;
		double request_timeout_s;
		double prefill_timeout_s;
		nw_stream_commit stream_commit;
	} serving;

	struct {
		uint32_t control_connections; /* as configured; 0 derives */
		double decode_read_timeout_s;
		double first_token_timeout_s;
		bool stream_decode;       /* stream decode legs of non-streamed requests too */
		bool tokenize;
		double tokenize_timeout_s;
		double chars_per_token;
		double pool_timeout_s;
		double connect_timeout_s;
		double health_timeout_s;
		char *tls_ca_file;        /* https engines: CA bundle; NULL: the system's */
		bool tls_verify;          /* https engines: check certificate and name */
	} engine;

	struct {
		char *path;
	} profiles;

	struct {
		double failure_quarantine_s;
		struct {
			double window_s;
			uint32_t min_samples;
			double failure_ratio;     /* beyond the spec: share that ejects */
		} health;
		uint32_t probe_failures;          /* beyond the spec: failed probes in a row */
		uint32_t passive_failures;        /* beyond the spec: failed legs in a row; 0 off */
		double verify_backoff_s;          /* beyond the spec: first verification wait */
		double verify_backoff_max_s;      /* beyond the spec: its cap */
		double stall_s;                   /* beyond the spec: busy and silent; 0 off */
	} recovery;

	struct {
		char *policy; /* controller plugin name */
		bool advisory;
		double monitor_interval_s;
		uint32_t monitor_failure_limit;
		uint32_t min_prefill;
		uint32_t min_decode;
		uint32_t flip_history;
		struct {
			double expand;
			double shrink;
			double cooldown_s;
			uint32_t sustained_intervals;
			double dwell_s;
			double panic_ratio;
			uint32_t flip_resident_guard;
		} thresholds;
		struct {
			double window_s;
			uint32_t confirmations;
			double utilization;
			uint32_t min_arrivals;
			double demand_floor;
			double movement_margin;
			double step_s;
			double evidence_span_s;
			double evidence_max_span_s;
			uint32_t evidence_min_arrivals;
			double demand_rise_tolerance;
			double decode_correction_min;
			double decode_correction_max;
			double decode_correction_alpha;
			uint32_t decode_correction_min_samples;
		} reactive;
	} controller;

	struct {
		char *model; /* served model name; NULL: taken from the engines */
		struct nw_engine_config *engines;
		uint32_t n_engines;
	} fleet;

	struct {
		char *dir; /* plugin directory; NULL: $NARWHAL_PLUGIN_DIR or installed */
		struct nw_plugin_config admission; /* name defaults to serving.admission */
		uint32_t admission_max_inflight;   /* 0: serving.max_connections */
		struct nw_plugin_config placement;
		struct nw_plugin_config controller; /* name mirrors controller.policy */
		json_t *dialects; /* object: dialect name -> its section, with an optional "path"; owned */
	} plugins;
};

/* One configuration problem, formatted as "file: json.path: problem: what is valid".
 * Problems about the document as a whole (unreadable file, malformed JSON)
 * have path NULL. */
struct nw_config_error {
	char *path;    /* json path, e.g. "serving.max_attempts" */
	char *message; /* "problem: what is valid" */
	bool warning;  /* advisory only; does not fail the load */
};

/* Load and validate a file. On success returns a config and may append
 * warnings to *problems; on failure returns NULL with every error (and
 * warning) in *problems. *problems is a GPtrArray of struct nw_config_error
 * (its free function releases g_malloc'd path and message, so callers may
 * append their own), freed with g_ptr_array_unref. When problems is not
 * NULL, *problems is always set: an array passed in is appended to, else a
 * new one is made. problems may be NULL to ignore them. */
struct nw_config *nw_config_load_file(const char *file, GPtrArray **problems);

/* The same from JSON text; name stands for the file in messages. */
struct nw_config *nw_config_load_string(const char *text, const char *name,
                                        GPtrArray **problems);

void nw_config_free(struct nw_config *cfg);
typedef struct nw_config nw_config;
G_DEFINE_AUTOPTR_CLEANUP_FUNC(nw_config, nw_config_free)

/* Format one problem as "file: path: message", or "file: message" when it
 * has no path. Warnings format the same; callers mark them (caller frees). */
char *nw_config_error_format(const char *file, const struct nw_config_error *e);
/* Each problem on stderr, one line each as nw_config_error_format gives
 * it, warnings marked "warning: "; only the warnings when warnings_only
 * (the programs that read a configuration file print them so). */
void nw_config_print_problems(const char *file, const GPtrArray *problems,
                              gboolean warnings_only);
/* nw_config_load_file for a program's start: its problems printed
 * (nw_config_print_problems), the configuration, or NULL when it is
 * invalid. */
struct nw_config *nw_config_load_reported(const char *file);

/* The effective configuration, every field with its value (transfer full). */
json_t *nw_config_to_json(const struct nw_config *cfg);

/* Derived values. Control connections: as configured, or when 0, two per
 * engine and at least four. Admission limit: plugins.admission.max_inflight,
 * or serving.max_connections when that is 0. */
uint32_t nw_config_control_connections(const struct nw_config *cfg);
uint32_t nw_config_admission_limit(const struct nw_config *cfg);

/* The section a plugin of kind (NARWHAL_KIND_*) gets at create()
 * (docs/plugins.md, "Its settings"; transfer full): pc's config; the
 * admission plugin's also carries serving.admission_margin as
 * "admission_margin" unless it sets its own; the controller plugin's is
 * {"reactive": controller.reactive, "thresholds": controller.thresholds}
 * with pc's config merged over it, so a key the operator sets there wins.
 * The daemon and narwhal-replay's what-if mode create plugins alike. */
json_t *nw_config_plugin_section(const struct nw_config *cfg, const struct nw_plugin_config *pc,
                                 narwhal_plugin_kind kind);

/* A dialect's plugins.dialects.<name> entry: its "path", Narwhal's own
 * key, or NULL to find the dialect by name (borrowed); and the rest of
 * the entry, the section the dialect gets at create() (transfer full;
 * NULL when the file has no entry for it). */
const char *nw_config_dialect_path(const struct nw_config *cfg, const char *name);
json_t *nw_config_dialect_section(const struct nw_config *cfg, const char *name);

/* Append a problem of the caller's own (a plugin that will not load, a
 * field a reload cannot change) to a problems array; path may be NULL.
 * The strings are copied. */
void nw_config_error_add(GPtrArray *problems, bool warning, const char *path,
                         const char *message);

/* Number of problems that are errors, not warnings (problems may be NULL). */
guint nw_config_error_count(const GPtrArray *problems);

/* Names as they are written in the file: "predictive", "open"; "prefill",
 * "decode". NULL for a value that has no name. */
const char *nw_config_admission_name(nw_admission_mode mode);
const char *nw_config_role_name(nw_engine_role role);

#endif /* NW_CONFIG_H */
