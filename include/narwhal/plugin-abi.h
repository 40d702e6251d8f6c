/*
 * Narwhal plugin ABI, version 2.
 *
 * This header, with <jansson.h>, is everything a Narwhal plugin may use, and
 * it is the whole contract: each slot says whether it is required, what its
 * return values mean, and which result fields the host acts on. The manual
 * (docs/plugins.md) explains how to write, build and test a plugin.
 *
 * A plugin is a shared object exporting exactly one function,
 * narwhal_plugin_entry(), made by one of the kind-specific macros at the end
 * (NARWHAL_DIALECT_PLUGIN, NARWHAL_ADMISSION_PLUGIN, NARWHAL_PLACEMENT_PLUGIN,
 * NARWHAL_CONTROLLER_PLUGIN), which check at compile time that the ops table
 * is the kind's. The function returns a const descriptor whose guard fields
 * (magic, ABI version, struct size) come first, so the host can check them
 * before it trusts anything else.
 *
 * Loading. The host refuses, naming the file, what it expected, what it found
 * and how to fix it, a plugin: whose magic or ABI major differs; whose minor
 * is newer than the host's; whose descriptor or ops table is shorter than
 * the ABI's first version of it, or longer than the host's (no plugin of an
 * equal or older minor has one); of another kind than configured; whose name
 * differs from the configured one; that lacks a required slot; that has only
 * one slot of a pair that works together (dialect: build_tokenize with
 * parse_tokenize, build_models with parse_models, build_metrics with
 * parse_metrics, and build_prefill, build_decode and parse_prefill
 * together). Optional slots may be NULL; the host checks every optional
 * slot before it calls it.
 *
 * Compatibility: the plugin's ABI major must equal the host's, and its minor
 * must be at most the host's. Every struct that crosses the boundary starts
 * with its own size; a slot that lies beyond the size the plugin was built
 * with reads as absent (NULL) and the host uses its default for it.
 *
 * Types: no C enum crosses the boundary (its size is the compiler's choice);
 * every such value is a fixed-width integer with the named constants below.
 *
 * Threading and re-entrancy: the host calls a plugin instance from one
 * thread, the daemon's event loop, and never from inside another call on the
 * same instance; a plugin needs no locks. A plugin must not call back into
 * the host from destroy(). Host services may be called from any plugin call
 * other than destroy(), on the same thread.
 *
 * Plugins own policy, the host owns mechanism. A plugin keeps its state in
 * the instance it returns from create(), never in mutable statics; it takes
 * time only from host->now_ns(), never blocks and never does I/O. The same
 * shared object therefore runs in the daemon, in its isolation tests and in
 * a replay under virtual time.
 *
 * Failures: a slot that returns non-zero has failed. The host logs the
 * failure with the plugin's name (event plugin_call_failed), counts it (the
 * plugin_call_errors counter of GET /narwhal/health), and fails safe as the
 * slot's comment says: a failed admission decision refuses the request, a
 * failed placement fails the attempt; neither becomes "admit" or "the first
 * eligible engine".
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
 * Versioning: an addition (a new slot or field at the end of a struct, a new
 * constant, a new host service) bumps the minor; any other change bumps the
 * major and resets the minor. Every change gets a line below.
 *
 * ABI changelog
 *   1.0  First version: descriptor; admission, placement, controller and
 *        dialect vtables; host services (clock, log, metrics, fleet
 *        snapshot, estimators).
 *   2.0  Breaking. Fixed-width integers replace every enum in structs and
 *        return types. Kind-specific definition macros that type-check the
 *        ops table replace NARWHAL_PLUGIN_DEFINE. Admission and placement
 *        get a host-unique request handle (uint64_t request) for their
 *        ledgers; admission's finished() takes it. Placement is told the
 *        pair's prefill engine. Dialect builders take a struct
 *        narwhal_dialect_target (request handle, attempt, route, client
 *        body, the engine called and both engines of a pair, a pair id), so
 *        concurrent handoffs (both legs at once) can be built;
 *        capabilities() is asked per engine. The dialect owns every
 *        engine-format fact: new slots sniff_sse (which stream events need
 *        a parse), parse_error (replaces classify_error: class, message and
 *        parameter of an engine error), build_models and parse_models (the
 *        served model and its maximum length), router_keys (request keys
 *        the router owns) and whole_body_only (requests the engine will
 *        not stream). Sending the client's body unchanged is the flag
 *        NARWHAL_CALL_CLIENT_BODY on struct narwhal_http_call, not pointer
 *        identity. The slots a dialect must implement are split into
 *        required ones and pairs.
 *   2.1  Dialect: the optional pair build_metrics and parse_metrics (the
 *        engine's own metrics, read by the host's monitor each pass) and
 *        struct narwhal_engine_metrics (running, waiting, kv_usage,
 *        start_time_s). A 2.0 dialect loads with the pair absent. Error
 *        class NARWHAL_ERROR_HANDOFF, so a decode engine's failure to load
 *        a handoff is blamed on the prefill engine that made it.
 *   2.2  Controller: struct narwhal_controller_input gains the demand's
 *        arrival counts and mean request size, the decode work resident and
 *        pending, profile coverage, how many engines the host's guards would
 *        let move each way, and the prompt of an urgent wake. Host service
 *        price_split (struct narwhal_split_query, struct
 *        narwhal_split_price): the projected SLO ratios of a prefill/decode
 *        split on the mean profile (spec 7.5 to 7.7). Both carry the
 *        arrivals' index of dispersion, which prices bursts.
 *   2.3  Fleet view: engine flags NARWHAL_ENGINE_WHOLE_ONLY (the engine's
 *        dialect cannot pair, so it runs every request whole: llama.cpp)
 *        and NARWHAL_ENGINE_PAIR_ONLY (it hands off in a fixed role and
 *        never runs a whole request: SGLang in PD mode), so that policies
 *        see which engines the host gives which requests.
 *   2.4  Dialect: the optional slot parse_sse_json, parse_sse for an event
 *        the host has already read as JSON, so that an event the host
 *        needs as a tree (an assembled answer's first chunk) is read once
 *        for both. A 2.3 dialect loads with it absent and keeps getting
 *        parse_sse.
 */
#ifndef NARWHAL_PLUGIN_ABI_H
#define NARWHAL_PLUGIN_ABI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NARWHAL_PLUGIN_MAGIC 0x4e57504cu /* "NWPL" */
#define NARWHAL_ABI_MAJOR 2
#define NARWHAL_ABI_MINOR 4

/* The one symbol a plugin exports. */
#define NARWHAL_PLUGIN_ENTRY_SYMBOL "narwhal_plugin_entry"

/* Length of the error buffer the host passes to create(). */
#define NARWHAL_ERROR_MAX 512

/* Plugin kinds (descriptor field kind). */
typedef uint32_t narwhal_plugin_kind;
enum {
	NARWHAL_KIND_DIALECT = 1,
	NARWHAL_KIND_ADMISSION = 2,
	NARWHAL_KIND_PLACEMENT = 3,
	NARWHAL_KIND_CONTROLLER = 4,
};

/* Engine roles. */
typedef uint32_t narwhal_role;
enum {
	NARWHAL_ROLE_PREFILL = 1,
	NARWHAL_ROLE_DECODE = 2,
};

/* Log levels for host->log(). */
typedef uint32_t narwhal_log_level;
enum {
	NARWHAL_LOG_DEBUG = 0,
	NARWHAL_LOG_INFO = 1,
	NARWHAL_LOG_WARNING = 2,
	NARWHAL_LOG_ERROR = 3,
};

/* ------------------------------------------------------------------------
 * Fleet snapshot: what the host knows about the engines right now.
 * ------------------------------------------------------------------------ */

/* Engine state flags. */
#define NARWHAL_ENGINE_PINNED      (1u << 0) /* role fixed by the operator */
#define NARWHAL_ENGINE_AVAILABLE   (1u << 1) /* healthy and not held */
#define NARWHAL_ENGINE_DRAINING    (1u << 2) /* operator drain or restart */
#define NARWHAL_ENGINE_QUARANTINED (1u << 3) /* failure quarantine */
#define NARWHAL_ENGINE_PROFILED    (1u << 4) /* a measured profile exists */
#define NARWHAL_ENGINE_WHOLE_ONLY  (1u << 5) /* never paired: runs requests whole (2.3) */
#define NARWHAL_ENGINE_PAIR_ONLY   (1u << 6) /* fixed-role handoff: never whole (2.3) */

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
 * Host services: the only way a plugin reaches the outside world. Every
 * service is always set (never NULL) and takes host_ctx first.
 * ------------------------------------------------------------------------ */

/* Estimator results (the return value of the estimator services). */
typedef int32_t narwhal_estimate_status;
enum {
	NARWHAL_ESTIMATE_OK = 0,
	NARWHAL_ESTIMATE_NO_PROFILE = 1,     /* engine has no measured profile */
	NARWHAL_ESTIMATE_OUT_OF_DOMAIN = 2,  /* input outside the measured domain */
};

/* A split to price (ABI 2.2, host service price_split). */
struct narwhal_split_query {
	uint32_t struct_size;
	uint32_t prefill;            /* engines serving prefill (at least 1) */
	uint32_t decode;             /* engines serving decode (at least 1) */
	double arrivals_per_s;       /* offered requests per second */
	double prompt_tokens;        /* mean prompt of a request */
	double output_tokens;        /* mean output of a request */
	double utilization;          /* usable fraction of each engine, (0, 1]
	                              * (controller.reactive.utilization) */
	uint32_t decode_streams;     /* decode work to hold now: resident plus
	                              * pending streams (spec 7.6) */
	uint64_t urgent_prompt_tokens; /* non-zero: also project this prompt,
	                                * arriving now, on the live prefill
	                                * engine that serves it soonest, or on
	                                * an idle one a larger prefill pool
	                                * adds (the urgent evaluation) */
	double arrival_dispersion;   /* the arrivals' index of dispersion
	                              * (struct narwhal_controller_input): the
	                              * prefill queueing wait scales with it; below
	                              * 1, absent or not finite it is 1 (Poisson) */
};

/* The price of a split. Ratios are projected time over the SLO target: 1.0
 * meets it exactly. An overloaded phase (arrivals beyond its usable
 * capacity) has a finite ratio that grows with the overload, so two
 * overloaded splits still compare. */
struct narwhal_split_price {
	uint32_t struct_size;
	double ttft_s;               /* projected TTFT of the mean request */
	double tpot_s;               /* projected token interval */
	double ttft_ratio;           /* ttft_s / slo.ttft_s */
	double tpot_ratio;           /* tpot_s / slo.tpot_s */
	double worst_ratio;          /* the larger of the two (spec 7.5) */
	double prefill_load;         /* projected pool loads, spec 7.1's form */
	double decode_load;
	double urgent_ttft_s;        /* the urgent prompt's projected TTFT; NaN without one */
	bool in_domain;              /* spec 7.3: the split's prefill and decode
	                              * batches lie inside the measured domain and the
	                              * decode engines' KV capacity holds the decode work */
};

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

	/* Profile estimators (architecture section 6; docs/profiles.md). Each
	 * returns a NARWHAL_ESTIMATE_* value and writes *out only on
	 * NARWHAL_ESTIMATE_OK; an input above what the engine's profile
	 * measured is OUT_OF_DOMAIN, never an extrapolation (one below it is
	 * priced at the measured lower edge, an upper bound).
	 *
	 * prefill_seconds: the engine's own time to prefill one prompt of
	 * prompt_tokens on an idle engine (the quadratic form, spec 7.7) and,
	 * on a prefill engine of a pair, to hand it off when the profile
	 * measured that: what the prompt costs at zero backlog. A count sized
	 * by engine.chars_per_token is priced the same way.
	 *
	 * decode_interval_seconds: the token interval with active_requests
	 * decoding and resident_kv_tokens held between them, times the
	 * engine's bounded live correction (controller.reactive.
	 * decode_correction_*, spec 7.7).
	 *
	 * prefill_queue_seconds: seconds from now until a prompt of
	 * prompt_tokens placed on this engine now would have finished its
	 * prefill and handed off: the FIFO projection (role-control document,
	 * "Prefill queue projections") behind the prefill work resident on and
	 * waiting for the engine and its share of admitted work not yet placed
	 * on the live prefill pool, then its own prefill and, when measured,
	 * the handoff. An engine with resident decode work is outside the
	 * single-phase region the profiles measured (spec 4.1): OUT_OF_DOMAIN
	 * until that work drains. */
	narwhal_estimate_status (*prefill_seconds)(void *host_ctx, uint32_t engine,
	                                           uint64_t prompt_tokens, double *out);
	narwhal_estimate_status (*decode_interval_seconds)(void *host_ctx, uint32_t engine,
	                                                   uint32_t active_requests,
	                                                   uint64_t resident_kv_tokens,
	                                                   double *out);
	narwhal_estimate_status (*prefill_queue_seconds)(void *host_ctx, uint32_t engine,
	                                                 uint64_t prompt_tokens, double *out);

	/* ABI 2.2. price_split: what a split of the live engines into
	 * q->prefill prefill and q->decode decode engines would serve the
	 * demand q describes at, priced on the mean profile (spec 7.7) at the
	 * host clock (struct narwhal_split_price says what each figure is).
	 * NO_PROFILE when no mean profile can be made; OUT_OF_DOMAIN never
	 * (out->in_domain says it instead, so an overloaded split still has a
	 * price to compare); *out is written only on OK. */
	narwhal_estimate_status (*price_split)(void *host_ctx, const struct narwhal_split_query *q,
	                                       struct narwhal_split_price *out);
};

/* ------------------------------------------------------------------------
 * Admission: admit / queue / refuse / too long, for a sized request.
 * ------------------------------------------------------------------------ */

typedef uint32_t narwhal_admission_verdict;
enum {
	NARWHAL_ADMIT = 0,
	NARWHAL_ADMIT_QUEUE = 1,     /* wait for capacity (bounded by the host) */
	NARWHAL_REFUSE = 2,          /* 429 with Retry-After */
	NARWHAL_REFUSE_TOO_LONG = 3, /* cannot meet the TTFT target even idle */
};

struct narwhal_admission_request {
	uint32_t struct_size;
	uint64_t request;         /* host-unique handle: key ledgers by this */
	const char *request_id;   /* the client's X-Request-Id or the host's: for
	                           * log lines only, clients choose it */
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

/* The host acts on verdict, and on retry_after_s for NARWHAL_REFUSE (the
 * Retry-After header, rounded up to whole seconds, at least 1; preset 1).
 * projected_ttft_s and reason are informational: the host does not act on
 * them. The host presets verdict NARWHAL_REFUSE, so a plugin that returns 0
 * without setting it refuses. */
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
	 * Return 0, or a negative errno with a message in err (at most err_len
	 * bytes with its terminator): the daemon refuses to start with it. */
	int (*create)(const struct narwhal_host *host, const json_t *config,
	              void **instance, char *err, size_t err_len);
	/* Required. Free the instance; no host service may be called. */
	void (*destroy)(void *instance);
	/* Required. Return 0 with out filled; non-zero is a failure, and the
	 * host refuses the request with 503 (never admits it). */
	int (*decide)(void *instance, const struct narwhal_admission_request *req,
	              struct narwhal_admission_decision *out);
	/* Optional: an admitted request finished (ok: it was answered in full),
	 * for policies that keep their own ledger. Called once per admitted
	 * request, with the handle decide() saw. */
	void (*finished)(void *instance, uint64_t request, bool ok);
};

/* ------------------------------------------------------------------------
 * Placement: choose an engine for a phase from the eligible set.
 * ------------------------------------------------------------------------ */

typedef uint32_t narwhal_phase;
enum {
	NARWHAL_PHASE_PREFILL = 1,
	NARWHAL_PHASE_DECODE = 2,
	NARWHAL_PHASE_AGGREGATE = 3,
};

struct narwhal_placement_request {
	uint32_t struct_size;
	uint64_t request;         /* host-unique handle */
	const char *request_id;   /* for log lines only */
	narwhal_phase phase;
	uint64_t prompt_tokens;
	uint32_t max_tokens;
	const uint32_t *eligible; /* engine indices after role, availability,
	                           * exclusion and pairing filters; never empty */
	uint32_t n_eligible;
	int32_t paired_engine;    /* for NARWHAL_PHASE_DECODE after a prefill:
	                           * the prefill engine; else -1 */
};

/* The host acts on engine (which must be one of eligible[]); cost,
 * projected_slo_ratio and unserved are informational. The host presets
 * engine to UINT32_MAX, which is never eligible. */
struct narwhal_placement_result {
	uint32_t struct_size;
	uint32_t engine;            /* one of eligible[] */
	double cost;
	double projected_slo_ratio; /* projected / target; NaN when unknown */
	bool unserved;              /* every candidate breaks its projected SLO */
};

struct narwhal_placement_ops {
	uint32_t struct_size;
	/* Required; as for admission. */
	int (*create)(const struct narwhal_host *host, const json_t *config,
	              void **instance, char *err, size_t err_len);
	/* Required. */
	void (*destroy)(void *instance);
	/* Required. Return 0 with out->engine one of eligible[]. Any other
	 * return, or an engine that is not eligible, fails the attempt (logged
	 * and counted); the host never picks an engine in the plugin's place. */
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
	/* ABI 2.2 */
	uint64_t arrivals_short;   /* offers in the short horizon (evidence_span_s) */
	uint64_t arrivals_long;    /* offers in the long horizon (window_s) */
	double prompt_tokens_mean; /* per sized offer in the long horizon; 0 unknown */
	double output_tokens_mean; /* max_tokens per offer in the long horizon that set
	                            * it (delivered per completion, when none did); 0 unknown */
	uint32_t resident_decode;  /* decode streams resident on the fleet */
	uint32_t pending_decode;   /* admitted requests whose decode has not begun */
	bool profiles_complete;    /* every configured engine has a profile */
	uint32_t movable_to_prefill; /* decode engines the host's guards would let
	                              * move to prefill now (0: a D-to-P proposal
	                              * would be refused) */
	uint32_t movable_to_decode;  /* and prefill engines to decode */
	uint64_t urgent_prompt_tokens; /* urgent: the prompt that triggered the wake */
	double urgent_ttft_s;      /* urgent: its projected TTFT on the current split */
	double arrival_dispersion; /* the long horizon's arrivals: variance over
	                            * mean of their counts per demand bucket. 1 for
	                            * Poisson arrivals, more for bursts; NaN when
	                            * unmeasured (docs/controller.md) */
};

/* The host acts on prefill and decode (after its guards) and records
 * worst_slo_ratio and reason with the proposal. The host presets the
 * current split, so a plugin that fills nothing proposes no change. */
struct narwhal_controller_proposal {
	uint32_t struct_size;
	uint32_t prefill;          /* proposed live prefill count */
	uint32_t decode;           /* proposed live decode count */
	double worst_slo_ratio;    /* priced ratio of the proposal; NaN if unpriced */
	const char *reason;        /* short, machine-readable */
};

struct narwhal_controller_ops {
	uint32_t struct_size;
	/* Required; as for admission. */
	int (*create)(const struct narwhal_host *host, const json_t *config,
	              void **instance, char *err, size_t err_len);
	/* Required. */
	void (*destroy)(void *instance);
	/* Required. Fill out with the proposed split; proposing the current
	 * split means "no change". Non-zero: no change this pass (logged and
	 * counted). */
	int (*propose)(void *instance, const struct narwhal_controller_input *in,
	               struct narwhal_controller_proposal *out);
};

/* ------------------------------------------------------------------------
 * Dialect: an engine's wire format. The host does all I/O; the dialect
 * builds request bodies and interprets responses. Every engine-format fact
 * lives here, so a new engine is a new dialect with no host change.
 * ------------------------------------------------------------------------ */

/* What an engine's own metrics say (parse_metrics, ABI 2.1). The host
 * presets every field to "unknown" (NaN, or -1 for counts); a dialect sets
 * what its engine exposes and leaves the rest. */
struct narwhal_engine_metrics {
	uint32_t struct_size;
	int64_t running;          /* requests in the running batch; -1 unknown */
	int64_t waiting;          /* requests waiting to be scheduled; -1 unknown */
	double kv_usage;          /* KV-cache blocks in use, 0 to 1; NaN unknown */
	double start_time_s;      /* process start, Unix seconds; NaN unknown.
	                           * A change means the engine restarted. */
};

/* Capabilities of one engine (capabilities() is asked once per engine at
 * start). With neither handoff flag the engine is aggregate-only: it runs
 * whole requests (build_aggregate) and is never paired. */
#define NARWHAL_DIALECT_HANDOFF_SEQUENTIAL (1u << 0) /* prefill, then decode with its handoff */
#define NARWHAL_DIALECT_HANDOFF_CONCURRENT (1u << 1) /* both legs sent at once, paired */
#define NARWHAL_DIALECT_PER_REQUEST_ROLES  (1u << 2) /* any engine, any role, per request */

/* Error classes (narwhal_sse_event.error_class, narwhal_engine_error). */
typedef uint32_t narwhal_error_class;
enum {
	NARWHAL_ERROR_RETRYABLE = 1,        /* spec 4.2's transient failures */
	NARWHAL_ERROR_PERMANENT = 2,        /* anything else: not retried */
	NARWHAL_ERROR_CONTEXT_TOO_LONG = 3, /* the request does not fit the context */
	NARWHAL_ERROR_CLIENT = 4,           /* the engine refused the client's own
	                                     * request (validation): its message
	                                     * may be shown to the client */
	NARWHAL_ERROR_HANDOFF = 5,          /* (2.1) a decode engine could not load
	                                     * the handoff (the prefill engine's KV
	                                     * was gone: lease expired, producer
	                                     * down): the prefill engine's fault,
	                                     * retryable */
};

/* SSE event kinds (narwhal_sse_event.kind). */
typedef uint32_t narwhal_sse_kind;
enum {
	NARWHAL_SSE_TOKENS = 1, /* generated output; tokens says how many */
	NARWHAL_SSE_USAGE = 2,  /* usage only */
	NARWHAL_SSE_ERROR = 3,  /* in-band error */
	NARWHAL_SSE_DONE = 4,   /* success terminator */
	NARWHAL_SSE_OTHER = 5,  /* metadata: relay, counts as liveness */
};

/* The host acts on kind, tokens (the first token) and error_class; the
 * usage counts are informational. It presets kind NARWHAL_SSE_OTHER, tokens
 * 0 and the counts -1. */
struct narwhal_sse_event {
	uint32_t struct_size;
	narwhal_sse_kind kind;
	uint32_t tokens;
	int64_t prompt_tokens;     /* from usage, -1 when absent */
	int64_t completion_tokens; /* from usage, -1 when absent */
	narwhal_error_class error_class; /* for NARWHAL_SSE_ERROR */
};

/* An engine error answer as the dialect reads it. The host acts on
 * error_class; it shows message to the client only for a
 * NARWHAL_ERROR_CLIENT answer of status 400 or 422 (docs/api.md), and logs
 * the engine's whole answer otherwise; param is informational. The host
 * presets error_class from the HTTP status (spec 4.2) and message and param
 * empty. */
#define NARWHAL_ENGINE_MESSAGE_MAX 512
#define NARWHAL_ENGINE_PARAM_MAX 64
struct narwhal_engine_error {
	uint32_t struct_size;
	narwhal_error_class error_class;
	char message[NARWHAL_ENGINE_MESSAGE_MAX]; /* the engine's text, terminated */
	char param[NARWHAL_ENGINE_PARAM_MAX];     /* the request key at fault, or "" */
};

/* What the engines say about the model they serve. The host presets name
 * "" and max_model_len -1; it uses name as the served model when the
 * configuration gives none, and max_model_len to refuse requests that
 * cannot fit before any leg. */
#define NARWHAL_MODEL_NAME_MAX 256
struct narwhal_model_info {
	uint32_t struct_size;
	char name[NARWHAL_MODEL_NAME_MAX];
	int64_t max_model_len;     /* tokens; -1 when unknown */
};

/* Which client route a request came in on. */
typedef uint32_t narwhal_route;
enum {
	NARWHAL_ROUTE_COMPLETIONS = 1,
	NARWHAL_ROUTE_CHAT_COMPLETIONS = 2,
};

/* One engine as a dialect sees it. */
struct narwhal_engine_ref {
	uint32_t struct_size;
	uint32_t index;            /* position in the fleet */
	const char *id;            /* configured instance ID */
	const char *url;           /* configured base URL, no trailing slash */
};

/* What a call is built for. For a sequential handoff the decode engine is
 * placed after the prefill answer, so build_prefill sees decode NULL; for a
 * concurrent handoff both are placed first, both legs see both and go out
 * together, and build_decode gets no handoff (NULL). An engine whose
 * capabilities have both flags hands off sequentially. */
struct narwhal_dialect_target {
	uint32_t struct_size;
	uint64_t request;                          /* host-unique handle */
	const char *request_id;                    /* for log lines only */
	uint32_t attempt;                          /* 0-based */
	narwhal_route route;
	const json_t *client_body;                 /* the validated client JSON */
	const struct narwhal_engine_ref *engine;   /* the engine this call goes to */
	const struct narwhal_engine_ref *prefill;  /* the pair's prefill engine, or NULL */
	const struct narwhal_engine_ref *decode;   /* the pair's decode engine, or NULL */
	uint64_t pair_id;          /* unique per attempt of a pair (e.g. a
	                            * bootstrap room); 0 outside a pair */
};

/* The call's body is target->client_body unchanged (body must be NULL): the
 * host sends it without building a copy, and when it is the client's own
 * JSON it sends the bytes the client sent. */
#define NARWHAL_CALL_CLIENT_BODY (1u << 0)

/* An outgoing engine call. path is static or owned by the instance; body is
 * (transfer full) to the host, NULL for a bodiless GET or with
 * NARWHAL_CALL_CLIENT_BODY. The host only serialises the body. */
struct narwhal_http_call {
	uint32_t struct_size;
	uint32_t flags;            /* NARWHAL_CALL_* */
	const char *method;        /* "GET" or "POST" */
	const char *path;          /* starts with '/', appended to the engine URL */
	json_t *body;
};

/*
 * Return values of the dialect slots: 0 is success. Builders may return
 * -EALREADY (build_tokenize only: the count is known without a call, e.g.
 * a prompt of token IDs; the host takes the prompt's length), -ENOTSUP (this
 * request cannot be served that way: the host sizes by characters, or fails
 * the attempt for a generation leg), -EINVAL (bad arguments) or -ENOMEM.
 * Parsers return -EPROTO for an answer they cannot read. Any failure of a
 * generation builder or parser fails the attempt as an internal or engine
 * error; it is logged and counted.
 */
struct narwhal_dialect_ops {
	uint32_t struct_size;
	/* Required; as for admission. */
	int (*create)(const struct narwhal_host *host, const json_t *config,
	              void **instance, char *err, size_t err_len);
	/* Required. */
	void (*destroy)(void *instance);
	/* Required. NARWHAL_DIALECT_* flags for one engine, asked once per
	 * engine when the daemon starts. An engine with a handoff flag needs
	 * the prefill trio (build_prefill, build_decode, parse_prefill). */
	uint32_t (*capabilities)(void *instance, const struct narwhal_engine_ref *engine);

	/* Optional pair: exact prompt sizing (spec 6, engine.tokenize).
	 * Without it requests are sized with engine.chars_per_token. */
	int (*build_tokenize)(void *instance, const struct narwhal_dialect_target *target,
	                      struct narwhal_http_call *out);
	int (*parse_tokenize)(void *instance, const json_t *response, uint64_t *prompt_tokens);

	/* Optional trio, required for an engine with a handoff capability. */
	int (*build_prefill)(void *instance, const struct narwhal_dialect_target *target,
	                     struct narwhal_http_call *out);
	/* handoff is what parse_prefill returned (NULL for a concurrent
	 * handoff, or when the prefill answer carried none: the decode engine
	 * then prefills locally). */
	int (*build_decode)(void *instance, const struct narwhal_dialect_target *target,
	                    const json_t *handoff, struct narwhal_http_call *out);
	/* *handoff is (transfer full), NULL when the engine returned none (the
	 * host logs and counts a missing handoff). */
	int (*parse_prefill)(void *instance, const json_t *response, json_t **handoff);

	/* Required: one engine runs the whole request. */
	int (*build_aggregate)(void *instance, const struct narwhal_dialect_target *target,
	                       struct narwhal_http_call *out);
	/* Required: the engine's liveness probe; 2xx means healthy. */
	int (*build_health)(void *instance, const struct narwhal_engine_ref *engine,
	                    struct narwhal_http_call *out);

	/* Required. One SSE data payload (without "data: " and the blank
	 * line). Non-zero: the payload is not an event of this engine, and the
	 * leg fails as a bad engine response. After the first token, a payload
	 * with the bytes of an earlier token event around another text is a
	 * token event: a relayed stream, and with sniff_sse a non-streamed
	 * answer, do not ask (docs/plugins.md). */
	int (*parse_sse)(void *instance, const char *data, size_t len,
	                 struct narwhal_sse_event *out);
	/* Optional. After a stream's first token the host parses only the
	 * events this says may matter (the terminator, an error, usage): return
	 * true when the payload may be anything but a plain token event. It
	 * must never return false for an error or a terminator. Without it the
	 * host parses every event. */
	bool (*sniff_sse)(void *instance, const char *data, size_t len);
	/* Required. Read an engine error: an HTTP answer of status http_status
	 * (>= 400) with its body, or an in-band stream error event's payload
	 * (http_status 0). Return 0 with out filled, or -EPROTO when the body
	 * says nothing the dialect can read (out keeps the host's presets). */
	int (*parse_error)(void *instance, int32_t http_status, const char *body, size_t len,
	                   struct narwhal_engine_error *out);

	/* Optional pair: model discovery. The host sends build_models to the
	 * first engine at start and reads the answer with parse_models. */
	int (*build_models)(void *instance, const struct narwhal_engine_ref *engine,
	                    struct narwhal_http_call *out);
	int (*parse_models)(void *instance, const json_t *response,
	                    struct narwhal_model_info *out);

	/* Optional: the top-level request keys this dialect's handoff uses
	 * (e.g. "kv_transfer_params"): a NULL-terminated static list. The host
	 * refuses client requests that carry any of them (400), so a client can
	 * never forge a handoff. */
	const char *const *(*router_keys)(void *instance);

	/* Optional. The host streams the decode leg of a non-streamed request
	 * too (engine.stream_decode), to bound it by the first token; return
	 * true for a client body the engine answers only in a whole body (vLLM:
	 * prompt_logprobs), which then gets a non-streamed leg. Asked once per
	 * request of each dialect in the fleet. Without it every request may
	 * stream. */
	bool (*whole_body_only)(void *instance, const json_t *client_body);

	/* Optional pair (ABI 2.1): the engine's own metrics, read by the
	 * host's monitor once per pass on the control pool. build_metrics
	 * builds the request (e.g. GET /metrics); parse_metrics reads the
	 * whole answer body, which need not be JSON (Prometheus text), and
	 * fills what it knows. Non-zero from parse_metrics: the body is not
	 * this engine's metrics (a monitoring failure, logged and counted). */
	int (*build_metrics)(void *instance, const struct narwhal_engine_ref *engine,
	                     struct narwhal_http_call *out);
	int (*parse_metrics)(void *instance, const char *body, size_t len,
	                     struct narwhal_engine_metrics *out);

	/* Optional (ABI 2.4). parse_sse for a payload the host has read as
	 * JSON itself: doc is that value (borrowed; an object or an array,
	 * read as json_loadb reads with no flags), data and len the payload's
	 * bytes. The same results and return values as parse_sse, which the
	 * host calls instead for a payload that is not such JSON (the
	 * terminator) and whenever this slot is absent. */
	int (*parse_sse_json)(void *instance, const json_t *doc, const char *data, size_t len,
	                      struct narwhal_sse_event *out);
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
	narwhal_plugin_kind kind;
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

/* The entry every plugin defines (through one of the macros below). Declared
 * here so it has C linkage and default visibility even in C++ plugins and
 * in builds with -fvisibility=hidden. */
NARWHAL_PLUGIN_EXPORT const struct narwhal_plugin_descriptor *narwhal_plugin_entry(void);

/* The ops table's type is checked at compile time: a table of another kind
 * is a hard error with GCC and Clang (a static assertion) and in C++, and an
 * incompatible-pointer diagnostic elsewhere. */
#if defined(__GNUC__) && !defined(__cplusplus)
#define NARWHAL_OPS_CHECK_(type_, ops_)                                        \
	_Static_assert(__builtin_types_compatible_p(__typeof__(*(ops_)), type_), \
	               "the ops table given is not a " #type_)
#else
#define NARWHAL_OPS_CHECK_(type_, ops_) ((void)0)
#endif

/* The descriptor and entry function; use the kind-specific macros. */
#define NARWHAL_PLUGIN_DEFINE_(kind_, type_, name_, version_, ops_)           \
	NARWHAL_PLUGIN_EXPORT const struct narwhal_plugin_descriptor *        \
	narwhal_plugin_entry(void)                                            \
	{                                                                     \
		const type_ *const narwhal_typed_ops_ = (ops_);               \
		static const struct narwhal_plugin_descriptor desc = {        \
			NARWHAL_PLUGIN_MAGIC,                                 \
			NARWHAL_ABI_MAJOR,                                    \
			NARWHAL_ABI_MINOR,                                    \
			sizeof(struct narwhal_plugin_descriptor),             \
			(kind_),                                              \
			(name_),                                              \
			(version_),                                           \
			NARWHAL_PLUGIN_BUILD_ID,                              \
			(ops_),                                               \
		};                                                            \
		NARWHAL_OPS_CHECK_(type_, ops_);                              \
		(void)narwhal_typed_ops_;                                     \
		return &desc;                                                 \
	}

/* Declare a plugin, e.g. NARWHAL_ADMISSION_PLUGIN("open", "1.0.0", &open_ops).
 * Use exactly one per shared object, at file scope. */
#define NARWHAL_DIALECT_PLUGIN(name_, version_, ops_) \
	NARWHAL_PLUGIN_DEFINE_(NARWHAL_KIND_DIALECT, struct narwhal_dialect_ops, \
	                       name_, version_, ops_)
#define NARWHAL_ADMISSION_PLUGIN(name_, version_, ops_) \
	NARWHAL_PLUGIN_DEFINE_(NARWHAL_KIND_ADMISSION, struct narwhal_admission_ops, \
	                       name_, version_, ops_)
#define NARWHAL_PLACEMENT_PLUGIN(name_, version_, ops_) \
	NARWHAL_PLUGIN_DEFINE_(NARWHAL_KIND_PLACEMENT, struct narwhal_placement_ops, \
	                       name_, version_, ops_)
#define NARWHAL_CONTROLLER_PLUGIN(name_, version_, ops_) \
	NARWHAL_PLUGIN_DEFINE_(NARWHAL_KIND_CONTROLLER, struct narwhal_controller_ops, \
	                       name_, version_, ops_)

#ifdef __cplusplus
}
#endif

#endif /* NARWHAL_PLUGIN_ABI_H */
