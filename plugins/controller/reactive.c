/*
 * The "reactive" controller (spec 7.5 to 7.7 and the role-control
 * document; docs/controller-reactive.md): it prices the live split and its
 * two adjacent splits with the host's price_split service and proposes the
 * one that lowers the worst projected SLO ratio enough, once it has come up
 * often enough in a row. It only proposes: the host's guards (pins, floors,
 * dwell, cooldown, panic_ratio, flip_resident_guard, advisory mode) decide
 * what happens (src/control/controller.h).
 *
 * A scheduled call, in order (the first that stops gives the reason; every
 * stop proposes the live split):
 *   "step"          less than step_s since the last scheduled evaluation
 *                   (host clock); the step clock moves only when one runs
 *   "min_arrivals"  arrivals_long < min_arrivals
 *   "demand_floor"  max(demand_short, demand_long) < demand_floor
 *   "no_split"      no live engine on one side: floor repair's business
 *   "no_profile"    price_split cannot price the live split
 *   then each adjacent split is judged (P+1 moves one decode engine to
 *   prefill, D+1 one prefill engine to decode; the first gate that refuses
 *   a candidate is its gate):
 *     both   "margin"         worst ratio not below current * (1 - margin),
 *                             or not strictly below current
 *     P+1    "source_load"    projected decode load above shrink ("consolidation")
 *                             and not measured prefill load >= expand with every
 *                             engine profiled ("mixed_pressure")
 *            "out_of_domain"  the split lies outside the measured domain (7.3)
 *            "evidence_open"  the evidence window is open (7.6)
 *            "demand_rising"  short-horizon demand above long * (1 + tolerance),
 *                             once the short horizon holds evidence_min_arrivals
 *            "not_movable"    the host's guards would let no decode engine move
 *     D+1    "source_load"    measured prefill load above shrink
 *            "not_movable"    no prefill engine may move ("decode_expansion")
 *   "no_candidate"  no adjacent split exists (or none could be priced)
 *   the deepest gate of the two candidates otherwise, when neither qualifies
 *   "confirming"    the winner (the larger improvement) has come up fewer than
 *                   max(confirmations, sustained_intervals) times in a row with
 *                   the same split, rule and evidence completeness
 *   the winner's rule: its split is proposed and the count starts over.
 *
 * An urgent call (the role-control document's "Prefill queue projections")
 * is not rate-limited, leaves the step clock and the confirmations alone,
 * and considers P+1 only, priced with the triggering prompt: "no_split",
 * "no_candidate", "no_profile" (also when some engine has no profile),
 * "no_gain" (P+1 does not strictly lower that prompt's projected TTFT),
 * "decode_capacity" (P+1 outside the domain or over the TPOT target),
 * "evidence_open", "demand_rising", "not_movable", else P+1 with reason
 * "urgent_ttft".
 *
 * worst_slo_ratio is the priced worst ratio of what is proposed: the live
 * split's when nothing moves, NaN when the call stopped before pricing.
 *
 * Config: the host hands over {"reactive": {controller.reactive.*},
 * "thresholds": {controller.thresholds.*}} (docs/plugins.md, "Its
 * settings"); an absent key takes the spec's default, an unknown one is
 * refused by name. Only the fields read below are used; the others (the
 * host's: window_s, the evidence spans, the decode correction, cooldown_s,
 * dwell_s, panic_ratio, flip_resident_guard) are checked and ignored.
 *
 * Metrics: evaluations_total, urgent_evaluations_total,
 * proposals_<rule>_total, gauge confirmations_pending.
 */
#include <narwhal/plugin-abi.h>

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REACTIVE_MAGIC 0x52454143u /* "REAC" */

/* The input must reach at least the last ABI 2.2 field read here. */
#define INPUT_NEEDED \
	(offsetof(struct narwhal_controller_input, urgent_ttft_s) + sizeof(double))

/* --- configuration ------------------------------------------------------- */

struct settings {
	/* controller.reactive */
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
	/* controller.thresholds */
	double expand;
	double shrink;
	double cooldown_s;
	uint32_t sustained_intervals;
	double dwell_s;
	double panic_ratio;
	uint32_t flip_resident_guard;
};

/* Valid values, as docs/configuration.md gives them. */
enum range {
	SECONDS_POS,    /* (0, 1e9] */
	SECONDS_NONNEG, /* [0, 1e9] */
	POSITIVE,       /* (0, inf) */
	NONNEG,         /* [0, inf) */
	FRACTION,       /* (0, 1] */
	MARGIN,         /* [0, 1) */
	PANIC,          /* 0, or [1, inf) */
	COUNT_FROM_1,   /* integer [1, 1e6] */
	COUNT_FROM_0,   /* integer [0, 1e6] */
};

static const char *const range_text[] = {
	[SECONDS_POS] = "a number of seconds greater than 0 and at most 1e9",
	[SECONDS_NONNEG] = "a number of seconds from 0 to 1e9",
	[POSITIVE] = "a number greater than 0",
	[NONNEG] = "a number of at least 0",
	[FRACTION] = "a number greater than 0 and at most 1",
	[MARGIN] = "a number from 0 up to but not including 1",
	[PANIC] = "0 (off) or a number of at least 1",
	[COUNT_FROM_1] = "an integer from 1 to 1000000",
	[COUNT_FROM_0] = "an integer from 0 to 1000000",
};

struct key {
	const char *section; /* "reactive" or "thresholds" */
	const char *name;
	size_t offset;       /* in struct settings: uint32_t for counts, else double */
	enum range range;
	double def;          /* spec 7 and 7.7 */
};

#define KEY(section_, name_, range_, def_) \
	{ #section_, #name_, offsetof(struct settings, name_), range_, def_ }

static const struct key keys[] = {
	KEY(reactive, window_s, SECONDS_POS, 120.0),
	KEY(reactive, confirmations, COUNT_FROM_1, 2),
	KEY(reactive, utilization, FRACTION, 0.8),
	KEY(reactive, min_arrivals, COUNT_FROM_1, 10),
	KEY(reactive, demand_floor, POSITIVE, 0.5),
	KEY(reactive, movement_margin, MARGIN, 0.05),
	KEY(reactive, step_s, SECONDS_POS, 5.0),
	KEY(reactive, evidence_span_s, SECONDS_POS, 60.0),
	KEY(reactive, evidence_max_span_s, SECONDS_POS, 120.0),
	KEY(reactive, evidence_min_arrivals, COUNT_FROM_1, 10),
	KEY(reactive, demand_rise_tolerance, NONNEG, 0.25),
	KEY(reactive, decode_correction_min, POSITIVE, 0.5),
	KEY(reactive, decode_correction_max, POSITIVE, 2.0),
	KEY(reactive, decode_correction_alpha, FRACTION, 0.2),
	KEY(reactive, decode_correction_min_samples, COUNT_FROM_1, 8),
	KEY(thresholds, expand, POSITIVE, 1.0),
	KEY(thresholds, shrink, NONNEG, 0.5),
	KEY(thresholds, cooldown_s, SECONDS_NONNEG, 10.0),
	KEY(thresholds, sustained_intervals, COUNT_FROM_1, 3),
	KEY(thresholds, dwell_s, SECONDS_NONNEG, 0.0),
	KEY(thresholds, panic_ratio, PANIC, 0.0),
	KEY(thresholds, flip_resident_guard, COUNT_FROM_0, 0),
};

static bool
is_count(enum range r)
{
	return r == COUNT_FROM_1 || r == COUNT_FROM_0;
}

static bool
in_range(enum range r, double v)
{
	switch (r) {
	case SECONDS_POS: return v > 0.0 && v <= 1e9;
	case SECONDS_NONNEG: return v >= 0.0 && v <= 1e9;
	case POSITIVE: return v > 0.0 && isfinite(v);
	case NONNEG: return v >= 0.0 && isfinite(v);
	case FRACTION: return v > 0.0 && v <= 1.0;
	case MARGIN: return v >= 0.0 && v < 1.0;
	case PANIC: return v == 0.0 || (v >= 1.0 && isfinite(v));
	case COUNT_FROM_1: return v >= 1.0 && v <= 1e6;
	case COUNT_FROM_0: return v >= 0.0 && v <= 1e6;
	}
	return false;
}

static void
set_defaults(struct settings *s)
{
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
		char *field = (char *)s + keys[i].offset;

		if (is_count(keys[i].range))
			*(uint32_t *)(void *)field = (uint32_t)keys[i].def;
		else
			*(double *)(void *)field = keys[i].def;
	}
}

static int
store_key(struct settings *s, const char *section, const char *name, const json_t *value,
          char *err, size_t err_len)
{
	const struct key *k = NULL;
	char *field;
	double v;

	for (size_t i = 0; i < sizeof keys / sizeof keys[0] && k == NULL; i++)
		if (strcmp(keys[i].section, section) == 0 && strcmp(keys[i].name, name) == 0)
			k = &keys[i];
	if (k == NULL) {
		snprintf(err, err_len, "unknown key \"%s.%s\": not a field of controller.%s "
		         "(docs/configuration.md)", section, name, section);
		return -EINVAL;
	}
	if (is_count(k->range) ? !json_is_integer(value) : !json_is_number(value)) {
		snprintf(err, err_len, "%s.%s: must be %s", section, name, range_text[k->range]);
		return -EINVAL;
	}
	v = json_number_value(value);
	if (!in_range(k->range, v)) {
		char shown[32];

		if (is_count(k->range))
			snprintf(shown, sizeof shown, "%" JSON_INTEGER_FORMAT, json_integer_value(value));
		else
			snprintf(shown, sizeof shown, "%g", v);
		snprintf(err, err_len, "%s.%s: %s is out of range: must be %s", section, name, shown,
		         range_text[k->range]);
		return -EINVAL;
	}
	field = (char *)s + k->offset;
	if (is_count(k->range))
		*(uint32_t *)(void *)field = (uint32_t)v;
	else
		*(double *)(void *)field = v;
	return 0;
}

/* The rules between fields (docs/configuration.md, "Rules between
 * fields"), for a section the operator wrote by hand. */
static int
check_rules(const struct settings *s, char *err, size_t err_len)
{
	if (!(s->shrink < s->expand))
		snprintf(err, err_len, "thresholds.shrink: %g must be below thresholds.expand (%g)",
		         s->shrink, s->expand);
	else if (s->evidence_span_s > s->evidence_max_span_s)
		snprintf(err, err_len, "reactive.evidence_span_s: %g must be at most "
		         "reactive.evidence_max_span_s (%g)", s->evidence_span_s,
		         s->evidence_max_span_s);
	else if (s->evidence_max_span_s > s->window_s)
		snprintf(err, err_len, "reactive.evidence_max_span_s: %g must be at most "
		         "reactive.window_s (%g)", s->evidence_max_span_s, s->window_s);
	else if (s->decode_correction_max < s->decode_correction_min)
		snprintf(err, err_len, "reactive.decode_correction_max: %g must be at least "
		         "reactive.decode_correction_min (%g)", s->decode_correction_max,
		         s->decode_correction_min);
	else
		return 0;
	return -EINVAL;
}

static int
parse_config(const json_t *config, struct settings *s, char *err, size_t err_len)
{
	const char *section;
	json_t *object;

	set_defaults(s);
	if (config == NULL || json_is_null(config))
		return 0;
	if (!json_is_object(config)) {
		snprintf(err, err_len, "config must be an object with the optional keys \"reactive\" "
		         "and \"thresholds\" (Narwhal fills them from controller.reactive and "
		         "controller.thresholds)");
		return -EINVAL;
	}
	/* json_object_foreach wants a non-const object; we only read. */
	json_object_foreach((json_t *)config, section, object) {
		const char *name;
		json_t *value;
		int rc;

		if (strcmp(section, "reactive") != 0 && strcmp(section, "thresholds") != 0) {
			snprintf(err, err_len, "unknown key \"%s\": the reactive controller takes only "
			         "\"reactive\" and \"thresholds\" (controller.reactive and "
			         "controller.thresholds, docs/configuration.md)", section);
			return -EINVAL;
		}
		if (!json_is_object(object)) {
			snprintf(err, err_len, "%s: must be an object of controller.%s fields", section,
			         section);
			return -EINVAL;
		}
		json_object_foreach(object, name, value) {
			rc = store_key(s, section, name, value, err, err_len);
			if (rc != 0)
				return rc;
		}
	}
	return check_rules(s, err, err_len);
}

/* --- the instance -------------------------------------------------------- */

/* The adjacent split the scheduled evaluations are confirming. */
struct candidate {
	uint32_t count;          /* consecutive matching evaluations; 0: none */
	uint32_t prefill, decode;
	const char *rule;        /* a static string below */
	bool evidence_closed;    /* demand completeness when it was proposed */
};

struct reactive {
	unsigned magic;
	const struct narwhal_host *host;
	struct settings s;
	uint32_t required;       /* max(confirmations, sustained_intervals) */
	int64_t step_ns;
	bool evaluated;          /* a scheduled evaluation has run */
	int64_t last_eval_ns;
	struct candidate cand;
	char metric[64];
};

static struct reactive *
reactive_cast(void *instance)
{
	struct reactive *r = instance;

	if (r == NULL || r->magic != REACTIVE_MAGIC)
		abort(); /* the host passed something that is not ours */
	return r;
}

static int
reactive_create(const struct narwhal_host *host, const json_t *config, void **instance,
                char *err, size_t err_len)
{
	struct settings s;
	struct reactive *r;
	char line[NARWHAL_ERROR_MAX];
	int rc;

	rc = parse_config(config, &s, err, err_len);
	if (rc != 0)
		return rc;
	if (host->struct_size < offsetof(struct narwhal_host, price_split) + sizeof host->price_split) {
		snprintf(err, err_len, "the host is older than ABI 2.2: it has no price_split service");
		return -ENOTSUP;
	}
	r = calloc(1, sizeof *r);
	if (r == NULL) {
		snprintf(err, err_len, "out of memory");
		return -ENOMEM;
	}
	r->magic = REACTIVE_MAGIC;
	r->host = host;
	r->s = s;
	r->required = s.confirmations > s.sustained_intervals ? s.confirmations
	                                                      : s.sustained_intervals;
	r->step_ns = (int64_t)(s.step_s * 1e9);
	snprintf(line, sizeof line, "reactive controller: step_s=%g confirmations=%u "
	         "movement_margin=%g utilization=%g expand=%g shrink=%g", s.step_s, r->required,
	         s.movement_margin, s.utilization, s.expand, s.shrink);
	host->log(host->host_ctx, NARWHAL_LOG_DEBUG, line);
	*instance = r;
	return 0;
}

static void
reactive_destroy(void *instance)
{
	struct reactive *r = reactive_cast(instance);

	r->magic = 0;
	free(r);
}

/* --- pricing --------------------------------------------------------------- */

/* The arrivals' dispersion when the host's input carries it; NaN (priced
 * as Poisson) from a host whose input ends before it. */
static double
arrival_dispersion(const struct narwhal_controller_input *in)
{
	if (in->struct_size < offsetof(struct narwhal_controller_input, arrival_dispersion) +
	                      sizeof in->arrival_dispersion)
		return NAN;
	return in->arrival_dispersion;
}

/* Spec 7.6 and the role-control document: the larger of the two demand
 * estimates, resident plus pending decode work; bursts priced by the
 * arrivals' dispersion (docs/controller-reactive.md). */
static narwhal_estimate_status
price(const struct reactive *r, const struct narwhal_controller_input *in, uint32_t prefill,
      uint32_t decode, uint64_t urgent_prompt_tokens, struct narwhal_split_price *out)
{
	uint64_t streams = (uint64_t)in->resident_decode + in->pending_decode;
	struct narwhal_split_query q = {
		.struct_size = sizeof q,
		.prefill = prefill,
		.decode = decode,
		.arrivals_per_s = fmax(in->demand_short, in->demand_long),
		.prompt_tokens = in->prompt_tokens_mean,
		.output_tokens = in->output_tokens_mean,
		.utilization = r->s.utilization,
		.decode_streams = streams > UINT32_MAX ? UINT32_MAX : (uint32_t)streams,
		.urgent_prompt_tokens = urgent_prompt_tokens,
		.arrival_dispersion = arrival_dispersion(in),
	};

	memset(out, 0, sizeof *out);
	out->struct_size = sizeof *out;
	if (r->host->price_split == NULL) /* a host that breaks the ABI's promise */
		return NARWHAL_ESTIMATE_NO_PROFILE;
	return r->host->price_split(r->host->host_ctx, &q, out);
}

/* Spec 7.5: the worst ratio falls by at least movement_margin of the
 * current one (relative), and strictly. */
static bool
improves(const struct reactive *r, const struct narwhal_split_price *cur,
         const struct narwhal_split_price *cand)
{
	return cand->worst_ratio < cur->worst_ratio &&
	       cand->worst_ratio <= cur->worst_ratio * (1.0 - r->s.movement_margin);
}

/* Spec 7.6: once the short horizon holds enough arrivals, a rise beyond
 * the tolerance pauses moves towards prefill. */
static bool
demand_rising(const struct reactive *r, const struct narwhal_controller_input *in)
{
	return in->arrivals_short >= r->s.evidence_min_arrivals &&
	       in->demand_short > in->demand_long * (1.0 + r->s.demand_rise_tolerance);
}

/* What refused a candidate, in the order it is judged: a later gate means
 * the candidate passed the earlier ones. */
enum gate {
	QUALIFIES = 0,
	GATE_ABSENT,        /* no such split, or it could not be priced */
	GATE_MARGIN,
	GATE_SOURCE_LOAD,
	GATE_OUT_OF_DOMAIN,
	GATE_EVIDENCE_OPEN,
	GATE_DEMAND_RISING,
	GATE_NOT_MOVABLE,
};

static const char *const gate_names[] = {
	[QUALIFIES] = "qualifies",
	[GATE_ABSENT] = "no_candidate",
	[GATE_MARGIN] = "margin",
	[GATE_SOURCE_LOAD] = "source_load",
	[GATE_OUT_OF_DOMAIN] = "out_of_domain",
	[GATE_EVIDENCE_OPEN] = "evidence_open",
	[GATE_DEMAND_RISING] = "demand_rising",
	[GATE_NOT_MOVABLE] = "not_movable",
};

/* P+1: one decode engine to prefill (spec 7.5, 7.3 and 7.6). */
static enum gate
judge_to_prefill(const struct reactive *r, const struct narwhal_controller_input *in,
                 const struct narwhal_split_price *cur, const struct narwhal_split_price *cand,
                 const char **rule)
{
	if (!improves(r, cur, cand))
		return GATE_MARGIN;
	if (cand->decode_load <= r->s.shrink)
		*rule = "consolidation";
	else if (in->prefill_load >= r->s.expand && in->profiles_complete)
		*rule = "mixed_pressure";
	else
		return GATE_SOURCE_LOAD;
	if (!cand->in_domain)
		return GATE_OUT_OF_DOMAIN;
	if (!in->evidence_closed)
		return GATE_EVIDENCE_OPEN;
	if (demand_rising(r, in))
		return GATE_DEMAND_RISING;
	if (in->movable_to_prefill == 0)
		return GATE_NOT_MOVABLE;
	return QUALIFIES;
}

/* D+1: one prefill engine to decode (spec 7.5; it may proceed while the
 * evidence window is open, spec 7.6; cooldown and panic_ratio are the
 * host's). Spec 7.5 asks of it "prefill pressure at or below shrink": the
 * measured pool load of spec 7.1, as the panic bypass reads it, not the
 * candidate's projection (which consolidation, the other way, asks for).
 * The margin already prices what the move does to the prefill side; a
 * projected gate as well would keep an overloaded decode pool from the
 * engine that relieves it whenever the prefill pool would then be busy. */
static enum gate
judge_to_decode(const struct reactive *r, const struct narwhal_controller_input *in,
                const struct narwhal_split_price *cur, const struct narwhal_split_price *cand,
                const char **rule)
{
	if (!improves(r, cur, cand))
		return GATE_MARGIN;
	if (!(in->prefill_load <= r->s.shrink))
		return GATE_SOURCE_LOAD;
	*rule = "decode_expansion";
	if (in->movable_to_decode == 0)
		return GATE_NOT_MOVABLE;
	return QUALIFIES;
}

/* --- proposing --------------------------------------------------------------- */

static void
no_change(const struct narwhal_controller_input *in, struct narwhal_controller_proposal *out,
          const char *reason, double ratio)
{
	out->prefill = in->live_prefill;
	out->decode = in->live_decode;
	out->worst_slo_ratio = ratio;
	out->reason = reason;
}

static void
count(struct reactive *r, const char *prefix, const char *name)
{
	snprintf(r->metric, sizeof r->metric, "%s%s_total", prefix, name);
	r->host->counter_add(r->host->host_ctx, r->metric, 1.0);
}

static void
move(struct reactive *r, const struct narwhal_controller_input *in,
     struct narwhal_controller_proposal *out, uint32_t prefill, uint32_t decode,
     const char *rule, double cur_ratio, double new_ratio)
{
	char line[NARWHAL_ERROR_MAX];

	out->prefill = prefill;
	out->decode = decode;
	out->worst_slo_ratio = new_ratio;
	out->reason = rule;
	count(r, "proposals_", rule);
	snprintf(line, sizeof line, "reactive controller proposes %u prefill / %u decode "
	         "(from %u / %u), reason %s: worst projected SLO ratio %.3g -> %.3g, demand "
	         "%.3g/s short, %.3g/s long, evidence %s", prefill, decode, in->live_prefill,
	         in->live_decode, rule, cur_ratio, new_ratio, in->demand_short, in->demand_long,
	         in->evidence_closed ? "closed" : "open");
	r->host->log(r->host->host_ctx, NARWHAL_LOG_INFO, line);
}

static void
clear_candidate(struct reactive *r)
{
	r->cand.count = 0;
	r->host->gauge_set(r->host->host_ctx, "confirmations_pending", 0.0);
}

/* A scheduled evaluation, past the step and the gates before pricing. */
static void
evaluate(struct reactive *r, const struct narwhal_controller_input *in,
         struct narwhal_controller_proposal *out)
{
	struct narwhal_split_price cur, p1, d1;
	const char *rule_p = NULL, *rule_d = NULL;
	enum gate gate_p = GATE_ABSENT, gate_d = GATE_ABSENT;
	const struct narwhal_split_price *win;
	struct candidate next;

	if (price(r, in, in->live_prefill, in->live_decode, 0, &cur) != NARWHAL_ESTIMATE_OK) {
		clear_candidate(r);
		no_change(in, out, "no_profile", NAN);
		return;
	}
	if (in->live_decode >= 2 &&
	    price(r, in, in->live_prefill + 1, in->live_decode - 1, 0, &p1) == NARWHAL_ESTIMATE_OK)
		gate_p = judge_to_prefill(r, in, &cur, &p1, &rule_p);
	if (in->live_prefill >= 2 &&
	    price(r, in, in->live_prefill - 1, in->live_decode + 1, 0, &d1) == NARWHAL_ESTIMATE_OK)
		gate_d = judge_to_decode(r, in, &cur, &d1, &rule_d);

	/* When both qualify, the larger improvement wins (ties: P+1). */
	if (gate_p == QUALIFIES && (gate_d != QUALIFIES || p1.worst_ratio <= d1.worst_ratio)) {
		win = &p1;
		next = (struct candidate){ 1, in->live_prefill + 1, in->live_decode - 1, rule_p,
		                           in->evidence_closed };
	} else if (gate_d == QUALIFIES) {
		win = &d1;
		next = (struct candidate){ 1, in->live_prefill - 1, in->live_decode + 1, rule_d,
		                           in->evidence_closed };
	} else {
		clear_candidate(r);
		no_change(in, out, gate_names[gate_p > gate_d ? gate_p : gate_d], cur.worst_ratio);
		return;
	}

	/* Spec 7.5: consecutive matching evaluations; any change of split,
	 * rule or demand completeness starts the count again. */
	if (r->cand.count > 0 && r->cand.prefill == next.prefill &&
	    r->cand.decode == next.decode && r->cand.rule == next.rule &&
	    r->cand.evidence_closed == next.evidence_closed)
		next.count = r->cand.count + 1;
	r->cand = next;
	if (r->cand.count < r->required) {
		r->host->gauge_set(r->host->host_ctx, "confirmations_pending", r->cand.count);
		no_change(in, out, "confirming", cur.worst_ratio);
		return;
	}
	clear_candidate(r);
	move(r, in, out, next.prefill, next.decode, next.rule, cur.worst_ratio, win->worst_ratio);
}

static void
scheduled(struct reactive *r, const struct narwhal_controller_input *in,
          struct narwhal_controller_proposal *out)
{
	int64_t now = r->host->now_ns(r->host->host_ctx);

	if (r->evaluated && now - r->last_eval_ns < r->step_ns) {
		no_change(in, out, "step", NAN);
		return;
	}
	r->evaluated = true;
	r->last_eval_ns = now;
	count(r, "", "evaluations");

	if (in->arrivals_long < r->s.min_arrivals) {
		clear_candidate(r);
		no_change(in, out, "min_arrivals", NAN);
	} else if (fmax(in->demand_short, in->demand_long) < r->s.demand_floor) {
		clear_candidate(r);
		no_change(in, out, "demand_floor", NAN);
	} else if (in->live_prefill == 0 || in->live_decode == 0) {
		clear_candidate(r);
		no_change(in, out, "no_split", NAN);
	} else {
		evaluate(r, in, out);
	}
}

/* The urgent wake (role-control document, "Prefill queue projections"
 * and "Guards on role changes"): P+1 only, on strict improvement for the
 * prompt that triggered it, without confirmations. */
static void
urgent(struct reactive *r, const struct narwhal_controller_input *in,
       struct narwhal_controller_proposal *out)
{
	struct narwhal_split_price cur, p1;
	const char *gate = NULL;

	count(r, "", "urgent_evaluations");
	if (in->live_prefill == 0 || in->live_decode == 0) {
		no_change(in, out, "no_split", NAN);
		return;
	}
	if (in->live_decode < 2) {
		no_change(in, out, "no_candidate", NAN);
		return;
	}
	if (!in->profiles_complete ||
	    price(r, in, in->live_prefill, in->live_decode, in->urgent_prompt_tokens, &cur) !=
	            NARWHAL_ESTIMATE_OK ||
	    price(r, in, in->live_prefill + 1, in->live_decode - 1, in->urgent_prompt_tokens,
	          &p1) != NARWHAL_ESTIMATE_OK) {
		no_change(in, out, "no_profile", NAN);
		return;
	}
	/* Equal projections (one prompt's own prefill beyond the SLO on both
	 * splits) keep the split. Decode capacity: the decode pool left behind
	 * inside the measured domain and at most as loaded as ordinary
	 * consolidation leaves it (shrink), so that one prompt's TTFT is not
	 * bought with every stream's TPOT. */
	if (!(p1.urgent_ttft_s < cur.urgent_ttft_s))
		gate = "no_gain";
	else if (!p1.in_domain || !(p1.decode_load <= r->s.shrink))
		gate = "decode_capacity";
	else if (!in->evidence_closed)
		gate = "evidence_open";
	else if (demand_rising(r, in))
		gate = "demand_rising";
	else if (in->movable_to_prefill == 0)
		gate = "not_movable";
	if (gate != NULL) {
		no_change(in, out, gate, cur.worst_ratio);
		return;
	}
	move(r, in, out, in->live_prefill + 1, in->live_decode - 1, "urgent_ttft", cur.worst_ratio,
	     p1.worst_ratio);
}

static int
reactive_propose(void *instance, const struct narwhal_controller_input *in,
                 struct narwhal_controller_proposal *out)
{
	struct reactive *r = reactive_cast(instance);

	if (in == NULL || out == NULL || in->struct_size < INPUT_NEEDED)
		return -EINVAL;
	if (in->urgent)
		urgent(r, in, out);
	else
		scheduled(r, in, out);
	return 0;
}

static const struct narwhal_controller_ops reactive_ops = {
	.struct_size = sizeof(struct narwhal_controller_ops),
	.create = reactive_create,
	.destroy = reactive_destroy,
	.propose = reactive_propose,
};

NARWHAL_CONTROLLER_PLUGIN("reactive", "1.0.0", &reactive_ops)
