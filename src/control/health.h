/*
 * One engine's health and lifecycle holds (docs/recovery.md): what the
 * monitor's probes and the data plane's real legs say about it, ejection,
 * the breaker that readmits an ejected engine only after verification legs
 * (spec 6), failure quarantine (spec 6, recovery.failure_quarantine_s),
 * restart holds and operator drains (spec 5, 7.3). Pure: no I/O, time comes
 * from the caller, so the rules run the same under a replay's virtual
 * clock and in unit tests with a fake one.
 *
 * One state field (state) and one transition function (nw_health_step).
 * Holds that are not health (a drain, a model mismatch, quarantine) sit
 * beside it; nw_health_available() combines them.
 */
#ifndef NW_CONTROL_HEALTH_H
#define NW_CONTROL_HEALTH_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "core/config.h"

typedef enum nw_health_state {
	NW_HEALTH_LIVE = 0,    /* in placement, unless a hold applies */
	NW_HEALTH_EJECTED,     /* out of placement; verified after next_verify_ns */
	NW_HEALTH_VERIFYING,   /* out of placement; verification legs running */
} nw_health_state;

/* Why an engine is out (EJECTED or VERIFYING); NONE while LIVE. */
typedef enum nw_health_reason {
	NW_HEALTH_REASON_NONE = 0,
	NW_HEALTH_REASON_PROBE_FAILURES,   /* recovery.probe_failures probes in a row */
	NW_HEALTH_REASON_HEALTH_WINDOW,    /* failure share of a full window */
	NW_HEALTH_REASON_LEG_FAILURES,     /* recovery.passive_failures real legs in a row */
	NW_HEALTH_REASON_RESTART,          /* health answered after failing, or a new
	                                    * start time: held until verified */
	NW_HEALTH_REASON_VERIFY_FAILED,    /* a verification attempt failed */
	NW_HEALTH_REASON_OPERATOR,         /* ejected by the operator (admin API) */
	NW_HEALTH_REASON_STALLED,          /* work outstanding, nothing back for
	                                    * recovery.stall_s */
} nw_health_reason;

/* Operator and monitor holds, beside the health state (bit set). */
#define NW_HOLD_DRAIN          (1u << 0) /* operator drain: no new work */
#define NW_HOLD_MODEL_MISMATCH (1u << 1) /* serves another model than the fleet */
#define NW_HOLD_UNPROBED       (1u << 2) /* added by a reload: out until its first
                                          * health probe passes (docs/deployment.md) */

/* What happened, fed to nw_health_step. */
typedef enum nw_health_event_kind {
	NW_HEALTH_PROBE_OK,       /* a health probe answered 2xx in time */
	NW_HEALTH_PROBE_FAILED,   /* refused, reset, timed out, non-2xx */
	NW_HEALTH_START_TIME,     /* the engine's metrics gave its start time */
	NW_HEALTH_LEG_OK,         /* a real leg on it completed */
	NW_HEALTH_LEG_FAILED,     /* a real leg failed through the engine's fault:
	                           * reset, timeout, 5xx */
	NW_HEALTH_LEG_REFUSED,    /* a real leg found no connection (refused,
	                           * unreachable): nothing serves there, so with
	                           * passive detection on it ejects at once */
	NW_HEALTH_VERIFY_START,   /* the monitor started verification legs;
	                           * ignored unless nw_health_verify_due() */
	NW_HEALTH_VERIFY_OK,      /* both verification legs completed */
	NW_HEALTH_VERIFY_FAILED,  /* a verification leg failed */
	NW_HEALTH_EJECT,          /* the operator ejects it: out until READMIT
	                           * (from EJECTED or VERIFYING too) */
	NW_HEALTH_READMIT,        /* the operator asks for verification now */
	NW_HEALTH_STALLED,        /* it held work and answered nothing for
	                           * recovery.stall_s (the monitor's check) */
} nw_health_event_kind;

struct nw_health_event {
	nw_health_event_kind kind;
	double start_time_s;      /* NW_HEALTH_START_TIME: Unix seconds; not
	                           * finite: ignored */
};

/* The rules, from the configuration (docs/recovery.md lists each field). */
struct nw_health_rules {
	uint32_t probe_failures;   /* recovery.probe_failures: probes in a row that eject */
	uint32_t passive_failures; /* recovery.passive_failures: legs in a row; 0: off */
	double window_s;           /* recovery.health.window_s */
	uint32_t min_samples;      /* recovery.health.min_samples */
	double failure_ratio;      /* recovery.health.failure_ratio */
	double quarantine_s;       /* recovery.failure_quarantine_s; 0: off */
	double backoff_s;          /* recovery.verify_backoff_s: first wait */
	double backoff_max_s;      /* recovery.verify_backoff_max_s: cap */
};

void nw_health_rules_from_config(struct nw_health_rules *rules, const struct nw_config *cfg);

/* One residual per monitor pass in the window: a probe's outcome. */
struct nw_health_sample {
	int64_t at_ns;
	bool failed;
};

struct nw_engine_health {
	nw_health_state state;
	nw_health_reason reason;      /* why out; NONE while LIVE */
	uint32_t holds;               /* NW_HOLD_* */
	uint32_t probe_failures;      /* consecutive failed probes */
	uint32_t leg_failures;        /* consecutive failed real legs */
	bool probe_failed_last;       /* the last probe failed (restart detection) */
	double start_time_s;          /* last start time seen; NaN: none */
	int64_t quarantine_until_ns;  /* failure quarantine ends; 0: none */
	int64_t next_verify_ns;       /* EJECTED: earliest verification;
	                               * INT64_MAX: operator's, until READMIT */
	uint32_t verify_failures;     /* in a row: sets the backoff */
	int64_t changed_ns;           /* when state last changed */
	uint64_t ejections;           /* times it left placement (LIVE -> out),
	                               * for the operator */
	/* The health window: a ring of the last residuals; window_head is the
	 * oldest, window_len of window_cap slots are used. */
	struct nw_health_sample *window;
	uint32_t window_cap, window_len, window_head;
	char last_error[160];         /* what the last failure was (for operators;
	                               * never shown to clients) */
};

/* Window capacity: enough for window_s at one residual per pass
 * (ceil(window_s / monitor_interval_s) + 1, at least min_samples, at most
 * 65536). nw_health_clear frees it. */
void nw_health_init(struct nw_engine_health *h, const struct nw_health_rules *rules,
                    double monitor_interval_s, int64_t now_ns);
void nw_health_clear(struct nw_engine_health *h);

/* Apply one event at now_ns. detail (may be NULL) is kept as last_error
 * for failures. Returns true when the engine's placement availability may
 * have changed (the caller refreshes the fleet view): a state change, or a
 * quarantine set. A quarantine's end is no event: nw_health_available
 * reads it at now, so the caller refreshes once per pass as well. Events
 * that do not apply in the current state are ignored (false). The caller
 * sends at most one probe event per engine per monitor pass (one residual
 * per pass in the window). */
bool nw_health_step(struct nw_engine_health *h, const struct nw_health_rules *rules,
                    const struct nw_health_event *ev, int64_t now_ns, const char *detail);

/* Take over what src learnt (a reload, docs/deployment.md): state, holds,
 * counters, quarantine, start time and the newest residuals that fit dst's
 * window (dst was made by nw_health_init under the new rules). A
 * verification the reload cut short starts again at now_ns. */
void nw_health_adopt(struct nw_engine_health *dst, const struct nw_engine_health *src,
                     int64_t now_ns);

/* Set (on) or clear one NW_HOLD_* bit; true when the holds changed. */
bool nw_health_set_hold(struct nw_engine_health *h, uint32_t hold, bool on);

/* Whether placement may use the engine now: LIVE, no hold, not in
 * quarantine. */
bool nw_health_available(const struct nw_engine_health *h, int64_t now_ns);

/* Whether the monitor should start verification now: EJECTED and the
 * backoff has passed. (The monitor probes health first; a passing probe
 * then sends VERIFY_START.) */
bool nw_health_verify_due(const struct nw_engine_health *h, int64_t now_ns);

/* Failure share of the window's residuals younger than window_s (0 when
 * there are none), and their count in *samples (may be NULL). */
double nw_health_window_failure_share(const struct nw_engine_health *h,
                                      const struct nw_health_rules *rules, int64_t now_ns,
                                      uint32_t *samples);

const char *nw_health_state_name(nw_health_state s);   /* "live", "ejected", "verifying" */
const char *nw_health_reason_name(nw_health_reason r); /* "probe_failures", ... ; NULL for NONE */

/* For /narwhal/health and /narwhal/state: state, reason, holds (names),
 * quarantine remaining, next verification, window share and samples,
 * counters, last error (transfer full). */
json_t *nw_health_to_json(const struct nw_engine_health *h, const struct nw_health_rules *rules,
                          int64_t now_ns);

#endif /* NW_CONTROL_HEALTH_H */
