#include "build-config.h"

#include "control/health.h"

#include <math.h>
#include <string.h>

#include <glib.h>

#define NS_PER_S 1e9
/* A window never needs more than this many residuals (one per pass). */
#define WINDOW_CAP_MAX 65536u

void
nw_health_rules_from_config(struct nw_health_rules *rules, const struct nw_config *cfg)
{
	memset(rules, 0, sizeof(*rules));
	rules->probe_failures = cfg->recovery.probe_failures;
	rules->passive_failures = cfg->recovery.passive_failures;
	rules->window_s = cfg->recovery.health.window_s;
	rules->min_samples = cfg->recovery.health.min_samples;
	rules->failure_ratio = cfg->recovery.health.failure_ratio;
	rules->quarantine_s = cfg->recovery.failure_quarantine_s;
	rules->backoff_s = cfg->recovery.verify_backoff_s;
	rules->backoff_max_s = cfg->recovery.verify_backoff_max_s;
}

void
nw_health_init(struct nw_engine_health *h, const struct nw_health_rules *rules,
               double monitor_interval_s, int64_t now_ns)
{
	double want = WINDOW_CAP_MAX;

	/* One residual per pass: window_s / interval passes, plus one so a
	 * sample exactly window_s old has not pushed out a younger one. */
	if (monitor_interval_s > 0 && rules->window_s > 0)
		want = ceil(rules->window_s / monitor_interval_s) + 1;
	want = MAX(want, (double)rules->min_samples);
	want = CLAMP(want, 1.0, (double)WINDOW_CAP_MAX);

	memset(h, 0, sizeof(*h));
	h->state = NW_HEALTH_LIVE;
	h->reason = NW_HEALTH_REASON_NONE;
	h->start_time_s = NAN;
	h->changed_ns = now_ns;
	h->window_cap = (uint32_t)want;
	h->window = g_new0(struct nw_health_sample, h->window_cap);
}

void
nw_health_clear(struct nw_engine_health *h)
{
	g_free(h->window);
	memset(h, 0, sizeof(*h));
}

void
nw_health_adopt(struct nw_engine_health *dst, const struct nw_engine_health *src,
                int64_t now_ns)
{
	struct nw_health_sample *window = dst->window;
	uint32_t cap = dst->window_cap, keep = MIN(src->window_len, cap);

	*dst = *src;
	dst->window = window;
	dst->window_cap = cap;
	dst->window_head = 0;
	dst->window_len = keep;
	for (uint32_t k = 0; k < keep; k++)
		window[k] = src->window[(src->window_head + src->window_len - keep + k) %
		                        src->window_cap];
	/* The old monitor's verification legs were cancelled with it. */
	if (dst->state == NW_HEALTH_VERIFYING) {
		dst->state = NW_HEALTH_EJECTED;
		dst->next_verify_ns = now_ns;
	}
}

/* now + s seconds, saturating at INT64_MAX (which means "never"). */
static int64_t
add_seconds(int64_t now_ns, double s)
{
	double ns = s * NS_PER_S;

	if (!(ns > 0))
		return now_ns;
	if (ns >= (double)INT64_MAX - (double)now_ns)
		return INT64_MAX;
	return now_ns + (int64_t)ns;
}

/* Wait before the next verification: backoff_s doubled per failed
 * verification in a row, capped at backoff_max_s (docs/configuration.md,
 * recovery.verify_backoff_s). */
static double
verify_backoff_s(const struct nw_health_rules *rules, uint32_t verify_failures)
{
	double s = rules->backoff_s * ldexp(1.0, (int)MIN(verify_failures, 60u));

	return MIN(s, rules->backoff_max_s);
}

static void
window_push(struct nw_engine_health *h, int64_t now_ns, bool failed)
{
	uint32_t slot;

	if (h->window_cap == 0)
		return;
	if (h->window_len < h->window_cap) {
		slot = (h->window_head + h->window_len) % h->window_cap;
		h->window_len++;
	} else {
		/* Full: the oldest residual makes room. */
		slot = h->window_head;
		h->window_head = (h->window_head + 1) % h->window_cap;
	}
	h->window[slot].at_ns = now_ns;
	h->window[slot].failed = failed;
}

double
nw_health_window_failure_share(const struct nw_engine_health *h,
                               const struct nw_health_rules *rules, int64_t now_ns,
                               uint32_t *samples)
{
	uint32_t n = 0, failed = 0;
	double horizon_ns = rules->window_s * NS_PER_S;

	for (uint32_t i = 0; i < h->window_len; i++) {
		const struct nw_health_sample *s = &h->window[(h->window_head + i) % h->window_cap];

		if ((double)(now_ns - s->at_ns) >= horizon_ns)
			continue; /* older than window_s: out of the window */
		n++;
		if (s->failed)
			failed++;
	}
	if (samples)
		*samples = n;
	return n ? (double)failed / n : 0.0;
}

/* Keep a failure's description for operators: valid UTF-8 (it may come
 * from an engine), cut at a character boundary to fit. */
static void
set_last_error(struct nw_engine_health *h, const char *detail, const char *fallback)
{
	char *valid = g_utf8_make_valid(detail ? detail : fallback, -1);
	size_t len = strlen(valid);

	if (len >= sizeof(h->last_error)) {
		const char *end = valid + sizeof(h->last_error) - 1;

		/* end points at the first byte that does not fit; back off to the
		 * start of the character it belongs to. */
		while (end > valid && ((unsigned char)*end & 0xC0) == 0x80)
			end--;
		len = (size_t)(end - valid);
	}
	memcpy(h->last_error, valid, len);
	h->last_error[len] = '\0';
	g_free(valid);
}

/* Leave placement (any reason but a failed verification, which goes
 * back from VERIFYING). A restart verifies at once; an operator's
 * ejection waits for the operator (READMIT). */
static void
eject(struct nw_engine_health *h, const struct nw_health_rules *rules,
      nw_health_reason reason, int64_t now_ns)
{
	h->state = NW_HEALTH_EJECTED;
	h->reason = reason;
	h->ejections++;
	h->changed_ns = now_ns;
	h->leg_failures = 0;
	if (reason == NW_HEALTH_REASON_RESTART)
		h->next_verify_ns = now_ns;
	else if (reason == NW_HEALTH_REASON_OPERATOR)
		h->next_verify_ns = INT64_MAX;
	else
		h->next_verify_ns = add_seconds(now_ns, verify_backoff_s(rules, h->verify_failures));
}

static bool
step_probe_ok(struct nw_engine_health *h, const struct nw_health_rules *rules, int64_t now_ns)
{
	bool answered_after_failing = h->probe_failed_last;

	window_push(h, now_ns, false);
	h->probe_failures = 0;
	h->probe_failed_last = false;
	/* issue 10: an engine whose health answers again after failing has
	 * restarted (lost its KV state, its handoffs): it stays held until
	 * verified, which may start at once. "Failing" is what ejected it:
	 * probes that failed in a row (or real legs, when its probes failed
	 * too). One lost probe of a live engine is no restart (docs/recovery.md:
	 * a quick restart shows in its start time or its failed legs), and an
	 * engine whose window ejected it (it flaps) keeps its backoff. */
	if (h->state == NW_HEALTH_EJECTED && answered_after_failing &&
	    (h->reason == NW_HEALTH_REASON_PROBE_FAILURES ||
	     h->reason == NW_HEALTH_REASON_LEG_FAILURES)) {
		h->reason = NW_HEALTH_REASON_RESTART;
		h->next_verify_ns = MIN(h->next_verify_ns, now_ns);
	}
	(void)rules;
	return false;
}

static bool
step_probe_failed(struct nw_engine_health *h, const struct nw_health_rules *rules,
                  int64_t now_ns, const char *detail)
{
	uint32_t samples;
	double share;

	window_push(h, now_ns, true);
	h->probe_failures++;
	h->probe_failed_last = true;
	set_last_error(h, detail, "health probe failed");
	/* Out of placement already: while VERIFYING the legs decide. */
	if (h->state != NW_HEALTH_LIVE)
		return false;
	if (h->probe_failures >= rules->probe_failures) {
		eject(h, rules, NW_HEALTH_REASON_PROBE_FAILURES, now_ns);
		return true;
	}
	share = nw_health_window_failure_share(h, rules, now_ns, &samples);
	if (samples >= rules->min_samples && share >= rules->failure_ratio) {
		eject(h, rules, NW_HEALTH_REASON_HEALTH_WINDOW, now_ns);
		return true;
	}
	return false;
}

static bool
step_start_time(struct nw_engine_health *h, const struct nw_health_rules *rules,
                double start_time_s, int64_t now_ns)
{
	bool restarted;

	if (!isfinite(start_time_s))
		return false; /* not a start time: keep the one we know */
	/* Half a second of slack: engines report a float that may be
	 * recomputed (uptime subtracted from a clock) on every read. */
	restarted = !isnan(h->start_time_s) && fabs(start_time_s - h->start_time_s) > 0.5;
	h->start_time_s = start_time_s;
	if (!restarted)
		return false;
	switch (h->state) {
	case NW_HEALTH_LIVE:
		eject(h, rules, NW_HEALTH_REASON_RESTART, now_ns);
		return true;
	case NW_HEALTH_EJECTED:
	case NW_HEALTH_VERIFYING:
		/* Already out; say why it is now. An operator's ejection stays
		 * the operator's: only READMIT ends it. */
		if (h->reason != NW_HEALTH_REASON_OPERATOR)
			h->reason = NW_HEALTH_REASON_RESTART;
		return false;
	}
	return false;
}

static bool
step_leg_failed(struct nw_engine_health *h, const struct nw_health_rules *rules,
                int64_t now_ns, const char *detail, bool refused)
{
	bool changed = false;

	h->leg_failures++;
	set_last_error(h, detail, "leg failed");
	/* spec 6, recovery.failure_quarantine_s: a failed engine stays out
	 * of placement this long; 0 turns it off. */
	if (rules->quarantine_s > 0) {
		h->quarantine_until_ns = add_seconds(now_ns, rules->quarantine_s);
		changed = true;
	}
	/* issue 10, passive detection: real legs failing in a row eject at
	 * once, without waiting for probes; a refused connection is
	 * conclusive on its own (docs/recovery.md). */
	if (rules->passive_failures > 0 && h->state == NW_HEALTH_LIVE &&
	    (refused || h->leg_failures >= rules->passive_failures)) {
		eject(h, rules, NW_HEALTH_REASON_LEG_FAILURES, now_ns);
		changed = true;
	}
	return changed;
}

/* spec 6, breaker verification: both legs passed; a fresh start. */
static void
readmit(struct nw_engine_health *h, int64_t now_ns)
{
	h->state = NW_HEALTH_LIVE;
	h->reason = NW_HEALTH_REASON_NONE;
	h->changed_ns = now_ns;
	h->verify_failures = 0;
	h->probe_failures = 0;
	h->probe_failed_last = false;
	h->leg_failures = 0;
	h->quarantine_until_ns = 0;
	h->next_verify_ns = 0;
	/* Old failures must not eject the readmitted engine again. */
	h->window_len = 0;
	h->window_head = 0;
}

bool
nw_health_step(struct nw_engine_health *h, const struct nw_health_rules *rules,
               const struct nw_health_event *ev, int64_t now_ns, const char *detail)
{
	switch (ev->kind) {
	case NW_HEALTH_PROBE_OK:
		return step_probe_ok(h, rules, now_ns);
	case NW_HEALTH_PROBE_FAILED:
		return step_probe_failed(h, rules, now_ns, detail);
	case NW_HEALTH_START_TIME:
		return step_start_time(h, rules, ev->start_time_s, now_ns);
	case NW_HEALTH_LEG_OK:
		h->leg_failures = 0;
		return false;
	case NW_HEALTH_LEG_FAILED:
		return step_leg_failed(h, rules, now_ns, detail, false);
	case NW_HEALTH_LEG_REFUSED:
		return step_leg_failed(h, rules, now_ns, detail, true);
	case NW_HEALTH_VERIFY_START:
		if (!nw_health_verify_due(h, now_ns))
			return false;
		h->state = NW_HEALTH_VERIFYING;
		h->changed_ns = now_ns;
		return true;
	case NW_HEALTH_VERIFY_OK:
		if (h->state != NW_HEALTH_VERIFYING)
			return false;
		readmit(h, now_ns);
		return true;
	case NW_HEALTH_VERIFY_FAILED:
		if (h->state != NW_HEALTH_VERIFYING)
			return false;
		/* issue 10: the wait before the next attempt doubles, capped. */
		set_last_error(h, detail, "verification failed");
		h->verify_failures++;
		h->state = NW_HEALTH_EJECTED;
		h->reason = NW_HEALTH_REASON_VERIFY_FAILED;
		h->changed_ns = now_ns;
		h->next_verify_ns = add_seconds(now_ns, verify_backoff_s(rules, h->verify_failures));
		return true;
	case NW_HEALTH_STALLED:
		if (h->state != NW_HEALTH_LIVE)
			return false;
		set_last_error(h, detail, "stalled");
		eject(h, rules, NW_HEALTH_REASON_STALLED, now_ns);
		return true;
	case NW_HEALTH_EJECT:
		if (h->state == NW_HEALTH_LIVE) {
			eject(h, rules, NW_HEALTH_REASON_OPERATOR, now_ns);
			return true;
		}
		/* Out already (for health, or readmitted by the operator and
		 * not yet verified): the operator's word now keeps it out, and a
		 * verification under way is abandoned. */
		h->reason = NW_HEALTH_REASON_OPERATOR;
		h->next_verify_ns = INT64_MAX;
		if (h->state == NW_HEALTH_VERIFYING) {
			h->state = NW_HEALTH_EJECTED;
			h->changed_ns = now_ns;
			return true;
		}
		return false;
	case NW_HEALTH_READMIT:
		/* Verification is still required; it may start at once. */
		if (h->state != NW_HEALTH_EJECTED)
			return false;
		h->next_verify_ns = now_ns;
		h->verify_failures = 0;
		return false;
	}
	return false;
}

bool
nw_health_set_hold(struct nw_engine_health *h, uint32_t hold, bool on)
{
	uint32_t before = h->holds;

	if (on)
		h->holds |= hold;
	else
		h->holds &= ~hold;
	return h->holds != before;
}

bool
nw_health_available(const struct nw_engine_health *h, int64_t now_ns)
{
	return h->state == NW_HEALTH_LIVE && h->holds == 0 && now_ns >= h->quarantine_until_ns;
}

bool
nw_health_verify_due(const struct nw_engine_health *h, int64_t now_ns)
{
	return h->state == NW_HEALTH_EJECTED && now_ns >= h->next_verify_ns;
}

const char *
nw_health_state_name(nw_health_state s)
{
	switch (s) {
	case NW_HEALTH_LIVE: return "live";
	case NW_HEALTH_EJECTED: return "ejected";
	case NW_HEALTH_VERIFYING: return "verifying";
	}
	return "unknown";
}

const char *
nw_health_reason_name(nw_health_reason r)
{
	switch (r) {
	case NW_HEALTH_REASON_NONE: return NULL;
	case NW_HEALTH_REASON_PROBE_FAILURES: return "probe_failures";
	case NW_HEALTH_REASON_HEALTH_WINDOW: return "health_window";
	case NW_HEALTH_REASON_LEG_FAILURES: return "leg_failures";
	case NW_HEALTH_REASON_RESTART: return "restart";
	case NW_HEALTH_REASON_VERIFY_FAILED: return "verify_failed";
	case NW_HEALTH_REASON_OPERATOR: return "operator";
	case NW_HEALTH_REASON_STALLED: return "stalled";
	}
	return NULL;
}

static const struct {
	uint32_t bit;
	const char *name;
} hold_names[] = {
	{ NW_HOLD_DRAIN, "drain" },
	{ NW_HOLD_MODEL_MISMATCH, "model_mismatch" },
	{ NW_HOLD_UNPROBED, "unprobed" },
};

json_t *
nw_health_to_json(const struct nw_engine_health *h, const struct nw_health_rules *rules,
                  int64_t now_ns)
{
	json_t *o = json_object(), *holds = json_array(), *window = json_object();
	const char *reason = nw_health_reason_name(h->reason);
	uint32_t samples;
	double share = nw_health_window_failure_share(h, rules, now_ns, &samples);
	double quarantine_s = 0;

	for (size_t i = 0; i < G_N_ELEMENTS(hold_names); i++)
		if (h->holds & hold_names[i].bit)
			json_array_append_new(holds, json_string(hold_names[i].name));
	if (h->quarantine_until_ns > now_ns)
		quarantine_s = (double)(h->quarantine_until_ns - now_ns) / NS_PER_S;

	json_object_set_new(o, "state", json_string(nw_health_state_name(h->state)));
	json_object_set_new(o, "reason", reason ? json_string(reason) : json_null());
	json_object_set_new(o, "holds", holds);
	json_object_set_new(o, "available", json_boolean(nw_health_available(h, now_ns)));
	json_object_set_new(o, "quarantine_remaining_s", json_real(quarantine_s));
	/* null: not waiting for a verification (live, verifying, or ejected by
	 * the operator until READMIT). */
	if (h->state == NW_HEALTH_EJECTED && h->next_verify_ns != INT64_MAX)
		json_object_set_new(o, "next_verify_in_s",
		                    json_real(h->next_verify_ns > now_ns
		                              ? (double)(h->next_verify_ns - now_ns) / NS_PER_S
		                              : 0.0));
	else
		json_object_set_new(o, "next_verify_in_s", json_null());
	json_object_set_new(window, "samples", json_integer(samples));
	json_object_set_new(window, "failure_share", samples ? json_real(share) : json_null());
	json_object_set_new(o, "window", window);
	json_object_set_new(o, "probe_failures", json_integer(h->probe_failures));
	json_object_set_new(o, "leg_failures", json_integer(h->leg_failures));
	json_object_set_new(o, "verify_failures", json_integer(h->verify_failures));
	json_object_set_new(o, "ejections", json_integer((json_int_t)h->ejections));
	json_object_set_new(o, "last_error",
	                    h->last_error[0] ? json_string(h->last_error) : json_null());
	return o;
}
