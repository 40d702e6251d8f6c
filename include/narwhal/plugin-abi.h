/*
 * Narwhal plugin ABI.
 *
 * This header, with <jansson.h>, is everything a Narwhal plugin may use. A
 * plugin is a shared object exporting exactly one function,
 * narwhal_plugin_entry(), made by NARWHAL_PLUGIN_DEFINE(). The function returns
 * a const descriptor whose guard fields (magic, ABI version, struct size) come
 * first, so the host can check them before it trusts anything else.
 *
 * Compatibility rule: the plugin's ABI major must equal the host's, and its
 * minor must be at most the host's. Every struct that crosses the boundary
 * starts with its own size; a slot that lies beyond the size the plugin was
 * built with reads as absent and the host uses its default for it.
 *
 * Plugins own policy, the host owns mechanism. A plugin keeps its state in
 * the instance it returns from create(), never in mutable statics; it takes
 * time only from host->now_ns(), never blocks and never does I/O. The same
 * shared object therefore runs in the daemon, in its isolation tests and in
 * a replay under virtual time.
 *
 * Ownership: arguments are borrowed for the duration of the call unless a
 * comment says (transfer full). Strings a plugin returns in result structs
 * must stay valid until the next call on the same instance (static strings
 * are simplest).
 *
 * Sizes: the host sets struct_size in every struct it hands over, result
 * structs included, and initialises result structs before the call, so a
 * field an older plugin does not know keeps the host's default. Because the
 * host's minor is never older than the plugin's, each struct is at least as
 * large as the plugin expects; the plugin fills the result fields it knows
 * and leaves struct_size alone.
 *
 * Versioning: an addition (a new slot at the end of a struct, a new enum
 * value, a new host service) bumps the minor; any other change bumps the
 * major and resets the minor. Every change gets a line below.
 *
 * ABI changelog
 *   1.0  First version: descriptor; admission, placement, controller and
 *        dialect vtables; host services (clock, log, metrics, fleet
 *        snapshot, estimators).
 */
#ifndef NARWHAL_PLUGIN_ABI_H
#define NARWHAL_PLUGIN_ABI_H

#ifdef NARWHAL_HOST_INTERNAL_H
#error "include <narwhal/plugin-abi.h> before host-internal headers"
#endif

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NARWHAL_PLUGIN_MAGIC 0x4e57504cu /* "NWPL" */
#define NARWHAL_ABI_MAJOR 1
#define NARWHAL_ABI_MINOR 0

/* The one symbol a plugin exports. */
#define NARWHAL_PLUGIN_ENTRY_SYMBOL "narwhal_plugin_entry"

/* Length of the error buffer the host passes to create(). */
#define NARWHAL_ERROR_MAX 512

typedef enum narwhal_plugin_kind {
	NARWHAL_KIND_DIALECT = 1,
	NARWHAL_KIND_ADMISSION = 2,
	NARWHAL_KIND_PLACEMENT = 3,
	NARWHAL_KIND_CONTROLLER = 4,
} narwhal_plugin_kind;

typedef enum narwhal_role {
	NARWHAL_ROLE_PREFILL = 1,
	NARWHAL_ROLE_DECODE = 2,
} narwhal_role;

typedef enum narwhal_log_level {
	NARWHAL_LOG_DEBUG = 0,
	NARWHAL_LOG_INFO = 1,
	NARWHAL_LOG_WARNING = 2,
	NARWHAL_LOG_ERROR = 3,
} narwhal_log_level;

/* ------------------------------------------------------------------------
 * Fleet snapshot: what the host knows about the engines right now.
 * ------------------------------------------------------------------------ */

/* Engine state flags. */
#define NARWHAL_ENGINE_PINNED      (1u << 0) /* role fixed by the operator */
#define NARWHAL_ENGINE_AVAILABLE   (1u << 1) /* healthy and not held */
#define NARWHAL_ENGINE_DRAINING    (1u << 2) /* operator drain or restart */
#define NARWHAL_ENGINE_QUARANTINED (1u << 3) /* failure quarantine */
#define NARWHAL_ENGINE_PROFILED    (1u << 4) /* a measured profile exists */

struct narwhal_engine_view {
	uint32_t struct_size;
	uint32_t index;           /* position in the fleet, stable */
	const char *id;           /* configured instance ID */
	narwhal_role role;
	uint32_t flags;           /* NARWHAL_ENGINE_* */
	int64_t role_since_ns;    /* host clock when the role last changed */
	uint32_t resident_prefill;
	uint32_t resident_decode;
	uint64_t resident_kv_tokens;
	uint32_t queued_prefill;  /* offers waiting for this engine's prefill slots */
	double prefill_load;      /* spec 7.1; NaN when unknown */
	double decode_load;       /* spec 7.1; NaN when unknown */
};

struct narwhal_fleet_view {
	uint32_t struct_size;
	uint32_t engine_view_size; /* stride of engines[], for forward compatibility */
	uint32_t n_engines;
	const struct narwhal_engine_view *engines;
	double ttft_target_s;      /* slo.ttft_s */
	double tpot_target_s;      /* slo.tpot_s */
};

/* Index into a fleet view with the host's stride. */
static inline const struct narwhal_engine_view *
narwhal_fleet_engine(const struct narwhal_fleet_view *fleet, uint32_t i)
{
	return (const struct narwhal_engine_view *)((const char *)fleet->engines +
	                                            (size_t)i * fleet->engine_view_size);
}

/* ------------------------------------------------------------------------
 * Host services: the only way a plugin reaches the outside world.
 * ------------------------------------------------------------------------ */

/* Estimator results. */
typedef enum narwhal_estimate_status {
	NARWHAL_ESTIMATE_OK = 0,
	NARWHAL_ESTIMATE_NO_PROFILE = 1,     /* engine has no measured profile */
	NARWHAL_ESTIMATE_OUT_OF_DOMAIN = 2,  /* input outside the measured domain */
} narwhal_estimate_status;

struct narwhal_host {
	uint32_t struct_size;
	uint16_t abi_major;
	uint16_t abi_minor;
	void *host_ctx; /* pass back to every service */

	/* Monotonic host clock in nanoseconds: wall time in the daemon,
	 * virtual time in a replay. */
	int64_t (*now_ns)(void *host_ctx);

	/* Structured log line attributed to the plugin instance. */
	void (*log)(void *host_ctx, narwhal_log_level level, const char *message);

	/* Metrics, created on first use. Names are relative: the host prefixes
	 * narwhal_plugin_<kind>_<name>_, so "refusals_total" from admission
	 * plugin "open" is exported as narwhal_plugin_admission_open_refusals_total. */
	void (*counter_add)(void *host_ctx, const char *name, double delta);
	void (*gauge_set)(void *host_ctx, const char *name, double value);

	/* The fleet as the host sees it now (transfer none; valid until the
	 * plugin call returns). */
	const struct narwhal_fleet_view *(*fleet)(void *host_ctx);

	/* Profile estimators (architecture section 6). Each writes *out only on
	 * NARWHAL_ESTIMATE_OK. */
	narwhal_estimate_status (*prefill_seconds)(void *host_ctx, uint32_t engine,
	                                           uint64_t prompt_tokens, double *out);
	narwhal_estimate_status (*decode_interval_seconds)(void *host_ctx, uint32_t engine,
	                                                   uint32_t active_requests,
	                                                   uint64_t resident_kv_tokens,
	                                                   double *out);
	narwhal_estimate_status (*prefill_queue_seconds)(void *host_ctx, uint32_t engine,
	                                                 uint64_t prompt_tokens, double *out);
};

/* ------------------------------------------------------------------------
 * Admission: admit / queue / refuse / too long, for a sized request.
 * ------------------------------------------------------------------------ */

typedef enum narwhal_admission_verdict {
	NARWHAL_ADMIT = 0,
	NARWHAL_ADMIT_QUEUE = 1,   /* wait for capacity (bounded by the host) */
	NARWHAL_REFUSE = 2,        /* 429 with Retry-After */
	NARWHAL_REFUSE_TOO_LONG = 3, /* cannot meet the TTFT target even idle */
} narwhal_admission_verdict;

struct narwhal_admission_request {
	uint32_t struct_size;
	const char *request_id;
	uint64_t prompt_tokens;
	bool prompt_tokens_exact; /* false when sized by chars_per_token */
	uint32_t max_tokens;
	int64_t arrival_ns;
	int64_t deadline_ns;
	uint32_t admitted;        /* requests currently admitted */
	uint32_t admitted_limit;  /* serving.max_connections or the override */
	uint32_t queued;          /* requests waiting for admission */
	uint32_t queue_capacity;
};

struct narwhal_admission_decision {
	uint32_t struct_size;
	narwhal_admission_verdict verdict;
	double retry_after_s;     /* projected wait, for NARWHAL_REFUSE */
	double projected_ttft_s;  /* NaN when not priced */
	const char *reason;       /* short, machine-readable, e.g. "backlog" */
};

struct narwhal_admission_ops {
	uint32_t struct_size;
	/* Required. Parse config (borrowed; may be NULL), allocate the instance.
	 * Return 0, or a negative errno with a message in err. */
	int (*create)(const struct narwhal_host *host, const json_t *config,
	              void **instance, char *err, size_t err_len);
	/* Required. */
	void (*destroy)(void *instance);
	/* Required. */
	int (*decide)(void *instance, const struct narwhal_admission_request *req,
	              struct narwhal_admission_decision *out);
	/* Optional: an admitted request finished (for policies that keep
	 * their own ledger). */
	void (*finished)(void *instance, const char *request_id, bool ok);
};

/* ------------------------------------------------------------------------
 * Placement: choose an engine for a phase from the eligible set.
 * ------------------------------------------------------------------------ */

typedef enum narwhal_phase {
	NARWHAL_PHASE_PREFILL = 1,
	NARWHAL_PHASE_DECODE = 2,
	NARWHAL_PHASE_AGGREGATE = 3,
} narwhal_phase;

struct narwhal_placement_request {
	uint32_t struct_size;
	const char *request_id;
	narwhal_phase phase;
	uint64_t prompt_tokens;
	uint32_t max_tokens;
	const uint32_t *eligible; /* engine indices after role, availability and exclusion filters */
	uint32_t n_eligible;
};

struct narwhal_placement_result {
	uint32_t struct_size;
	uint32_t engine;            /* one of eligible[] */
	double cost;
	double projected_slo_ratio; /* projected / target; NaN when unknown */
	bool unserved;              /* every candidate breaks its projected SLO */
};

struct narwhal_placement_ops {
	uint32_t struct_size;
	int (*create)(const struct narwhal_host *host, const json_t *config,
	              void **instance, char *err, size_t err_len);
	void (*destroy)(void *instance);
	/* Required. Return 0 with out filled, or -ENOENT when no candidate. */
	int (*place)(void *instance, const struct narwhal_placement_request *req,
	             struct narwhal_placement_result *out);
};

/* ------------------------------------------------------------------------
 * Controller: propose role changes from loads, demand and evidence. The host
 * applies floors, pins, dwell, cooldown, advisory mode and history.
 * ------------------------------------------------------------------------ */

struct narwhal_controller_input {
	uint32_t struct_size;
	int64_t now_ns;
	const struct narwhal_fleet_view *fleet;
	uint32_t live_prefill;
	uint32_t live_decode;
	double prefill_load;       /* pool loads, spec 7.1 */
	double decode_load;
	double demand_short;       /* arrivals per second, short horizon */
	double demand_long;        /* arrivals per second, long horizon */
	bool evidence_closed;      /* spec 7.6 evidence window */
	bool urgent;               /* an urgent TTFT wake, not a scheduled pass */
};

struct narwhal_controller_proposal {
	uint32_t struct_size;
	uint32_t prefill;          /* proposed live prefill count */
	uint32_t decode;           /* proposed live decode count */
	double worst_slo_ratio;    /* priced ratio of the proposal; NaN if unpriced */
	const char *reason;        /* short, machine-readable */
};

struct narwhal_controller_ops {
	uint32_t struct_size;
	int (*create)(const struct narwhal_host *host, const json_t *config,
	              void **instance, char *err, size_t err_len);
	void (*destroy)(void *instance);
	/* Required. Fill out with the proposed split; proposing the current
	 * split means "no change". */
	int (*propose)(void *instance, const struct narwhal_controller_input *in,
	               struct narwhal_controller_proposal *out);
};

/* ------------------------------------------------------------------------
 * Dialect: an engine's wire format. The host does all I/O; the dialect
 * builds request bodies and interprets responses.
 * ------------------------------------------------------------------------ */

/* Capabilities. */
#define NARWHAL_DIALECT_HANDOFF_SEQUENTIAL (1u << 0) /* prefill, then decode with its handoff */
#define NARWHAL_DIALECT_HANDOFF_CONCURRENT (1u << 1) /* both legs at once, paired */
#define NARWHAL_DIALECT_PER_REQUEST_ROLES  (1u << 2) /* any engine, any role, per request */

typedef enum narwhal_error_class {
	NARWHAL_ERROR_RETRYABLE = 1,
	NARWHAL_ERROR_PERMANENT = 2,
	NARWHAL_ERROR_CONTEXT_TOO_LONG = 3,
} narwhal_error_class;

typedef enum narwhal_sse_kind {
	NARWHAL_SSE_TOKENS = 1, /* generated output; tokens says how many */
	NARWHAL_SSE_USAGE = 2,  /* usage only */
	NARWHAL_SSE_ERROR = 3,  /* in-band error */
	NARWHAL_SSE_DONE = 4,   /* success terminator */
	NARWHAL_SSE_OTHER = 5,  /* metadata: relay, counts as liveness */
} narwhal_sse_kind;

struct narwhal_sse_event {
	uint32_t struct_size;
	narwhal_sse_kind kind;
	uint32_t tokens;
	int64_t prompt_tokens;     /* from usage, -1 when absent */
	int64_t completion_tokens; /* from usage, -1 when absent */
	narwhal_error_class error_class; /* for NARWHAL_SSE_ERROR */
};

/* An outgoing engine call. path is static or owned by the instance; body is
 * (transfer full) to the host, NULL for a bodiless GET. The host only
 * serialises the body; a body that is the client body itself (with its own
 * reference) is sent as the client's bytes as they came. */
struct narwhal_http_call {
	uint32_t struct_size;
	const char *method;
	const char *path;
	json_t *body;
};

/* Which client route a request came in on. */
typedef enum narwhal_route {
	NARWHAL_ROUTE_COMPLETIONS = 1,
	NARWHAL_ROUTE_CHAT_COMPLETIONS = 2,
} narwhal_route;

struct narwhal_dialect_ops {
	uint32_t struct_size;
	int (*create)(const struct narwhal_host *host, const json_t *config,
	              void **instance, char *err, size_t err_len);
	void (*destroy)(void *instance);
	uint32_t (*capabilities)(void *instance);

	/* Requests. client_body is the validated client JSON (borrowed). */
	int (*build_tokenize)(void *instance, narwhal_route route, const json_t *client_body,
	                      struct narwhal_http_call *out);
	int (*build_prefill)(void *instance, narwhal_route route, const json_t *client_body,
	                     struct narwhal_http_call *out);
	/* handoff is what parse_prefill returned; NULL makes the decode engine
	 * prefill locally. */
	int (*build_decode)(void *instance, narwhal_route route, const json_t *client_body,
	                    const json_t *handoff, struct narwhal_http_call *out);
	int (*build_aggregate)(void *instance, narwhal_route route, const json_t *client_body,
	                       struct narwhal_http_call *out);
	int (*build_health)(void *instance, struct narwhal_http_call *out);

	/* Responses. */
	int (*parse_tokenize)(void *instance, const json_t *response, uint64_t *prompt_tokens);
	/* *handoff is (transfer full), NULL when the engine returned none. */
	int (*parse_prefill)(void *instance, const json_t *response, json_t **handoff);
	/* One SSE data payload (without "data: " and the blank line). */
	int (*parse_sse)(void *instance, const char *data, size_t len,
	                 struct narwhal_sse_event *out);
	narwhal_error_class (*classify_error)(void *instance, int http_status,
	                                      const char *body, size_t len);
};

/* ------------------------------------------------------------------------
 * The descriptor.
 * ------------------------------------------------------------------------ */

struct narwhal_plugin_descriptor {
	/* Guard fields: never move these. */
	uint32_t magic;       /* NARWHAL_PLUGIN_MAGIC */
	uint16_t abi_major;
	uint16_t abi_minor;
	uint32_t struct_size; /* sizeof(struct narwhal_plugin_descriptor) as built */
	uint32_t kind;        /* narwhal_plugin_kind */
	/* Identity. */
	const char *name;     /* matches the configured name */
	const char *version;  /* the plugin's own version */
	const char *build_id; /* free text, e.g. compiler and date */
	/* The kind's ops: struct narwhal_<kind>_ops. */
	const void *ops;
};

typedef const struct narwhal_plugin_descriptor *(*narwhal_plugin_entry_fn)(void);

#if defined(__GNUC__)
#define NARWHAL_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define NARWHAL_PLUGIN_EXPORT
#endif

#ifndef NARWHAL_PLUGIN_BUILD_ID
#if defined(__VERSION__)
#define NARWHAL_PLUGIN_BUILD_ID "cc " __VERSION__
#else
#define NARWHAL_PLUGIN_BUILD_ID ""
#endif
#endif

/* The entry every plugin defines (through NARWHAL_PLUGIN_DEFINE). Declared
 * here so it has C linkage and default visibility even in C++ plugins and
 * in builds with -fvisibility=hidden. */
NARWHAL_PLUGIN_EXPORT const struct narwhal_plugin_descriptor *narwhal_plugin_entry(void);

/* Kind token to enum value; a separate step so a macro given as the kind is
 * expanded before it is pasted. */
#define NARWHAL_PLUGIN_KIND_VALUE_(kind_) NARWHAL_KIND_##kind_

/* Declare a plugin: NARWHAL_PLUGIN_DEFINE(ADMISSION, "open", "1.0.0", &ops).
 * kind is one of DIALECT, ADMISSION, PLACEMENT, CONTROLLER. */
#define NARWHAL_PLUGIN_DEFINE(kind_, name_, version_, ops_)                   \
	NARWHAL_PLUGIN_EXPORT const struct narwhal_plugin_descriptor *        \
	narwhal_plugin_entry(void)                                            \
	{                                                                     \
		static const struct narwhal_plugin_descriptor desc = {        \
			NARWHAL_PLUGIN_MAGIC,                                 \
			NARWHAL_ABI_MAJOR,                                    \
			NARWHAL_ABI_MINOR,                                    \
			sizeof(struct narwhal_plugin_descriptor),             \
			NARWHAL_PLUGIN_KIND_VALUE_(kind_),                    \
			(name_),                                              \
			(version_),                                           \
			NARWHAL_PLUGIN_BUILD_ID,                              \
			(ops_),                                               \
		};                                                            \
		return &desc;                                                 \
	}

#ifdef __cplusplus
}
#endif

#endif /* NARWHAL_PLUGIN_ABI_H */
