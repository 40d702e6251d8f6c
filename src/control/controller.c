/*
 * The controller host (control/controller.h; spec 7 to 7.7 and the
 * role-control document; docs/controller.md): the priced inputs a
 * controller plugin decides on, the host's guards on whatever it
 * proposes, the records of every evaluation, and the urgent TTFT path.
 * Pure: the caller passes the time and applies the changes.
 */
#include "build-config.h"

#include "control/controller.h"

#include <math.h>
#include <string.h>

#include <glib.h>

#include "core/demand.h"
#include "core/host.h"
#include "core/pricing.h"
#include "core/split-price.h"

/* A plugin's reason as recorded: at most this many bytes. */
#define REASON_MAX 31
/* Distinct reasons kept (a plugin's reasons are a small fixed set; a
 * plugin that makes up new ones each pass cannot grow the host without
 * bound): beyond, a reason is recorded as "other". */
#define REASONS_KEPT 256
/* The reason of a controller that rate-limits itself and was called
 * between its steps (reactive's controller.reactive.step_s: the
 * role-control document's one evaluation per step): no evaluation took
 * place, so the records and the gate stay as the last one left them, and
 * the gate does not flicker to "step" between two real evaluations
 * (docs/controller.md). */
#define REASON_STEP "step"
/* Engines a record names (a move takes more than one only while a pool
 * is below its floor). */
#define ENGINES_KEPT 8

enum result {
	RESULT_UNCHANGED,
	RESULT_APPLIED,
	RESULT_ADVISED,
	RESULT_REFUSED,
	RESULT_FAILED,
	RESULT_DISMISSED,
};

const char *const nw_controller_result_names[NW_CONTROLLER_RESULTS] = {
	"unchanged", "applied", "advised", "refused", "failed", "dismissed",
};

enum kind { KIND_SCHEDULED = 0, KIND_URGENT = 1 };

/* The urgent path between two scheduled passes (role-control document,
 * "Prefill queue projections": one coalesced evaluation between regular
 * controller passes): a trigger arms it, the wake spends it, and the next
 * scheduled pass lets a trigger arm it again. So a flood of breaches costs
 * one evaluation a monitor pass, however many requests breach. */
enum urgent_state {
	URGENT_IDLE,    /* a trigger may arm it */
	URGENT_ARMED,   /* a trigger waits for its wake */
	URGENT_SPENT,   /* evaluated since the last scheduled pass */
};

static const char *const callers[2] = { "controller", "controller_urgent" };

/* What one evaluation was priced on. */
struct inputs {
	double prefill_load, decode_load;           /* spec 7.1, pool means; NaN unknown */
	double demand_short, demand_long;           /* arrivals per second */
	uint64_t arrivals_short, arrivals_long;
	double dispersion;                          /* the long horizon's; NaN unmeasured */
	double prompt_mean, output_mean;            /* tokens per sized offer; 0 unknown */
	uint32_t resident_decode, pending_decode;
	bool evidence_closed;
	double evidence_span_s;
	uint64_t evidence_arrivals;
	bool profiles_complete;
	uint32_t movable_to_prefill, movable_to_decode;
	double worst_current, worst_proposed;       /* the host's prices; NaN unpriced */
	double plugin_worst;                        /* the plugin's own, as it said */
	/* The urgent path: the prompt, its projection at the trigger and on
	 * the current and proposed splits now (NaN: not priced). */
	uint64_t urgent_prompt_tokens;
	int64_t urgent_trigger_at_ns;
	double urgent_trigger_s, urgent_current_s, urgent_proposed_s;
};

struct record {
	int64_t at_ns;
	const char *caller;                         /* static */
	const char *reason;                         /* pooled; NULL: none */
	uint32_t prefill_before, decode_before;
	uint32_t prefill, decode;                   /* proposed */
	enum result result;
	const char *refused_by;                     /* static; NULL unless refused */
	const char *engines[ENGINES_KEPT];          /* interned ids of the engines moved */
	uint32_t n_engines;
	struct inputs in;
};

struct nw_controller {
	struct nw_role_rules rules;
	double shrink, cooldown_s, panic_ratio, utilization;
	char *policy;

	struct record *ring;                        /* proposals that would change the split */
	uint32_t cap, len, head;
	uint64_t total;
	struct record last;
	bool has_last;
	const char *gate;                           /* static or pooled; NULL: none */

	bool has_to_decode;                         /* the last move towards decode */
	int64_t to_decode_ns;

	struct {
		enum urgent_state state;
		int64_t at_ns;
		uint64_t prompt_tokens;
		double projected_ttft_s;
		uint64_t evaluations, moves, dismissed;
	} urgent;

	uint64_t evaluations[2];
	uint64_t results[2][NW_CONTROLLER_RESULTS];
	uint64_t between_steps;                     /* scheduled calls answered "step" */
	GHashTable *reasons;                        /* the reasons recorded, owned */
	struct nw_role_engine *scratch;             /* the engines as a move changes them */
	uint32_t scratch_cap;
};

/* --- configuration ------------------------------------------------------- */

static void
take_config(struct nw_controller *c, const struct nw_config *cfg)
{
	nw_role_rules_from_config(&c->rules, cfg);
	c->shrink = cfg->controller.thresholds.shrink;
	c->cooldown_s = cfg->controller.thresholds.cooldown_s;
	c->panic_ratio = cfg->controller.thresholds.panic_ratio;
	c->utilization = cfg->controller.reactive.utilization;
	g_free(c->policy);
	c->policy = g_strdup(cfg->controller.policy);
}

/* A ring of cap records holding the newest of the old one's. */
static void
resize_ring(struct nw_controller *c, uint32_t cap)
{
	struct record *ring;
	uint32_t keep;

	cap = MAX(cap, 1u);
	if (cap == c->cap)
		return;
	ring = g_new0(struct record, cap);
	keep = MIN(c->len, cap);
	for (uint32_t k = 0; k < keep; k++)
		ring[k] = c->ring[(c->head + c->len - keep + k) % c->cap];
	g_free(c->ring);
	c->ring = ring;
	c->cap = cap;
	c->len = keep;
	c->head = 0;
}

struct nw_controller *
nw_controller_new(const struct nw_config *cfg)
{
	struct nw_controller *c = g_new0(struct nw_controller, 1);

	c->reasons = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
	nw_controller_configure(c, cfg);
	return c;
}

void
nw_controller_configure(struct nw_controller *c, const struct nw_config *cfg)
{
	take_config(c, cfg);
	resize_ring(c, cfg->controller.flip_history);
}

void
nw_controller_free(struct nw_controller *c)
{
	if (c == NULL)
		return;
	g_free(c->ring);
	g_free(c->scratch);
	g_free(c->policy);
	g_hash_table_destroy(c->reasons);
	g_free(c);
}

/* The plugin's reason, bounded, printable, kept for as long as the host
 * is (records, the gate and the flip history hold it). */
static const char *
pool_reason(struct nw_controller *c, const char *reason)
{
	char buf[REASON_MAX + 1];
	char *kept;
	size_t k;

	if (reason == NULL || reason[0] == '\0')
		return NULL;
	for (k = 0; k < REASON_MAX && reason[k] != '\0'; k++)
		buf[k] = g_ascii_isprint(reason[k]) ? reason[k] : '?';
	buf[k] = '\0';
	kept = g_hash_table_lookup(c->reasons, buf);
	if (kept != NULL)
		return kept;
	if (g_hash_table_size(c->reasons) >= REASONS_KEPT)
		return "other";
	kept = g_strdup(buf);
	g_hash_table_add(c->reasons, kept);
	return kept;
}

/* --- the inputs ---------------------------------------------------------- */

/* What the fleet and the ledger say now (struct narwhal_controller_input's
 * ABI 2.2 fields; spec 7.6: resident plus pending decode work). */
static void
gather(const struct nw_controller *c, const struct nw_controller_pass *p,
       const struct nw_role_counts *counts, struct inputs *in)
{
	const struct nw_fleet *f = p->fleet;
	struct nw_demand_estimate s, l;
	struct nw_demand_evidence ev;
	uint64_t sized, pending = f->pricing.pending;

	*in = (struct inputs){ .worst_current = NAN, .worst_proposed = NAN, .plugin_worst = NAN,
	                       .urgent_trigger_s = NAN, .urgent_current_s = NAN,
	                       .urgent_proposed_s = NAN };
	nw_pricing_pool_loads(f, &in->prefill_load, &in->decode_load);
	nw_demand_estimate(p->demand, p->now_ns, NW_DEMAND_SHORT, &s);
	nw_demand_estimate(p->demand, p->now_ns, NW_DEMAND_LONG, &l);
	nw_demand_evidence(p->demand, p->now_ns, &ev);
	in->demand_short = s.arrivals_per_s;
	in->demand_long = l.arrivals_per_s;
	in->arrivals_short = s.arrivals;
	in->arrivals_long = l.arrivals;
	in->dispersion = l.dispersion;
	sized = l.arrivals - l.unsized;
	if (sized > 0) {
		in->prompt_mean = (double)l.prompt_tokens / (double)sized;
		/* What the offers that set max_tokens requested, each; without
		 * any, what completions delivered (plugin-abi.h). */
		if (l.bounded > 0)
			in->output_mean = (double)l.output_requested / (double)l.bounded;
		else if (l.completions > 0)
			in->output_mean = (double)l.output_delivered / (double)l.completions;
	}
	in->evidence_closed = ev.closed;
	in->evidence_span_s = ev.span_s;
	in->evidence_arrivals = ev.arrivals;
	in->profiles_complete = true;
	for (uint32_t i = 0; i < f->view.n_engines; i++) {
		const struct narwhal_engine_view *v = &f->engines[i];

		in->resident_decode += v->resident_decode;
		pending += (uint64_t)v->resident_prefill + v->queued_prefill;
		in->profiles_complete &= (v->flags & NARWHAL_ENGINE_PROFILED) != 0;
	}
	in->pending_decode = (uint32_t)MIN(pending, (uint64_t)UINT32_MAX);
	for (uint32_t i = 0; i < p->n; i++) {
		const struct nw_role_engine *e = &p->engines[i];

		if (e->role == NARWHAL_ROLE_DECODE)
			in->movable_to_prefill += nw_roles_check_counted(counts, e, NARWHAL_ROLE_PREFILL,
			                                                 &c->rules, p->now_ns) ==
			                          NW_ROLE_GUARD_OK;
		else if (e->role == NARWHAL_ROLE_PREFILL)
			in->movable_to_decode += nw_roles_check_counted(counts, e, NARWHAL_ROLE_DECODE,
			                                                &c->rules, p->now_ns) ==
			                         NW_ROLE_GUARD_OK;
	}
}

/* Price split (prefill, decode) on the inputs (spec 7.6: the larger
 * demand estimate, resident plus pending decode work). */
static narwhal_estimate_status
price(const struct nw_controller *c, const struct nw_controller_pass *p, const struct inputs *in,
      uint32_t prefill, uint32_t decode, struct narwhal_split_price *out)
{
	struct narwhal_split_query q = {
		.struct_size = sizeof q,
		.prefill = prefill,
		.decode = decode,
		.arrivals_per_s = MAX(in->demand_short, in->demand_long),
		.prompt_tokens = in->prompt_mean,
		.output_tokens = in->output_mean,
		.utilization = c->utilization,
		.decode_streams = (uint32_t)MIN((uint64_t)in->resident_decode + in->pending_decode,
		                                (uint64_t)UINT32_MAX),
		.urgent_prompt_tokens = in->urgent_prompt_tokens,
		.arrival_dispersion = in->dispersion,
	};

	*out = (struct narwhal_split_price){ .struct_size = sizeof *out };
	if (prefill == 0 || decode == 0)
		return NARWHAL_ESTIMATE_NO_PROFILE;
	return nw_split_price(p->fleet, &q, p->now_ns, out);
}

/* --- the guards ------------------------------------------------------------ */

static uint32_t
scratch_engines(struct nw_controller *c, const struct nw_controller_pass *p)
{
	if (c->scratch_cap < p->n) {
		g_free(c->scratch);
		c->scratch = g_new(struct nw_role_engine, p->n);
		c->scratch_cap = p->n;
	}
	if (p->n > 0)
		memcpy(c->scratch, p->engines, sizeof *c->scratch * p->n);
	return p->n;
}

/* The engine of role from that moves to `to`: among those every guard
 * lets go (nw_roles_check_counted), the one with the least resident work,
 * ties to the lowest index (role-control document: flip_resident_guard
 * judges the lightest eligible decode donor). UINT32_MAX when none, with
 * *refused the guard that stopped the candidate that got furthest (the
 * guards are checked in the order of their values). */
static uint32_t
donor(const struct nw_controller *c, const struct nw_role_engine *engines, uint32_t n,
      const struct nw_role_counts *counts, narwhal_role from, narwhal_role to, int64_t now_ns,
      nw_role_guard *refused)
{
	uint32_t best = UINT32_MAX;
	nw_role_guard furthest = NW_ROLE_GUARD_OK;

	for (uint32_t i = 0; i < n; i++) {
		const struct nw_role_engine *e = &engines[i];
		nw_role_guard g;

		if (e->role != from)
			continue;
		g = nw_roles_check_counted(counts, e, to, &c->rules, now_ns);
		if (g != NW_ROLE_GUARD_OK)
			furthest = MAX(furthest, g);
		else if (best == UINT32_MAX || e->resident < engines[best].resident)
			best = i;
	}
	/* No engine of that role at all: its floor is what holds. */
	if (furthest == NW_ROLE_GUARD_OK)
		furthest = from == NARWHAL_ROLE_PREFILL ? NW_ROLE_GUARD_PREFILL_FLOOR
		                                        : NW_ROLE_GUARD_DECODE_FLOOR;
	*refused = furthest;
	return best;
}

/* A decode-to-prefill move's checks on the price of the split it leaves. */
static const char *
check_to_prefill(enum kind kind, narwhal_estimate_status st,
                 const struct narwhal_split_price *priced, const struct inputs *in)
{
	/* Spec 7.3: the split left holds the resident decode work inside the
	 * measured domain and its decode engines' KV capacity. */
	if (st != NARWHAL_ESTIMATE_OK)
		return "no_profile";
	if (!priced->in_domain)
		return "outside_domain";
	/* The urgent move must strictly improve the projection of the
	 * request that triggered it (role-control document, "Prefill queue
	 * projections"). */
	if (kind == KIND_URGENT && !(priced->urgent_ttft_s < in->urgent_current_s))
		return "no_improvement";
	return NULL;
}

/* The host's guards on a proposal that changes the split (controller.h):
 * the changes go to out (at most max; *n_out of them when it may go);
 * returns the code of the guard that refused, NULL when the move may go. */
static const char *
guard(struct nw_controller *c, const struct nw_controller_pass *p, enum kind kind,
      const struct nw_role_counts *counts, const struct narwhal_controller_proposal *prop,
      const char *reason, struct record *rec, struct nw_role_change *out, uint32_t max,
      uint32_t *n_out)
{
	uint32_t live_p = counts->prefill, live_d = counts->decode;
	bool to_prefill = prop->prefill > live_p;
	narwhal_role to = to_prefill ? NARWHAL_ROLE_PREFILL : NARWHAL_ROLE_DECODE;
	narwhal_role from = to_prefill ? NARWHAL_ROLE_DECODE : NARWHAL_ROLE_PREFILL;
	uint32_t k = to_prefill ? prop->prefill - live_p : live_p - prop->prefill;
	uint32_t recv = to_prefill ? live_p : live_d;
	uint32_t floor = to_prefill ? c->rules.min_prefill : c->rules.min_decode;
	struct nw_role_counts after = *counts;
	struct narwhal_split_price priced;
	narwhal_estimate_status st;
	uint32_t n;

	*n_out = 0;
	/* The live engines are what moves: a proposal names their split. */
	if ((uint64_t)prop->prefill + prop->decode != (uint64_t)live_p + live_d)
		return "invalid_split";
	/* The urgent wake may only turn one decode engine into a prefill
	 * engine (role-control document, "Prefill queue projections"). */
	if (kind == KIND_URGENT && (!to_prefill || k != 1))
		return "urgent_direction";
	/* One adjacent move; more engines only while the pool they feed is
	 * below its floor (role-control document, "Role control"). */
	if (k > MAX(1u, floor > recv ? floor - recv : 0) || k > max)
		return "not_adjacent";

	n = scratch_engines(c, p);
	for (uint32_t j = 0; j < k; j++) {
		nw_role_guard refused;
		uint32_t i = donor(c, c->scratch, n, &after, from, to, p->now_ns, &refused);

		if (i == UINT32_MAX)
			return nw_role_guard_code(refused);
		c->scratch[i].role = to;
		c->scratch[i].role_since_ns = p->now_ns;
		if (to_prefill) {
			after.prefill++;
			after.decode--;
		} else {
			after.prefill--;
			after.decode++;
		}
		out[j] = (struct nw_role_change){
			.engine = i, .from = from, .to = to, .at_ns = p->now_ns,
			.caller = callers[kind], .reason = reason != NULL ? reason : "unspecified",
			.applied = !c->rules.advisory,
			.prefill_after = after.prefill, .decode_after = after.decode,
		};
		if (rec->n_engines < ENGINES_KEPT && i < p->fleet->view.n_engines)
			rec->engines[rec->n_engines++] = g_intern_string(p->fleet->ids[i]);
	}
	*n_out = k;

	st = price(c, p, &rec->in, after.prefill, after.decode, &priced);
	if (st == NARWHAL_ESTIMATE_OK) {
		rec->in.worst_proposed = priced.worst_ratio;
		rec->in.urgent_proposed_s = priced.urgent_ttft_s;
	}
	if (to_prefill)
		return check_to_prefill(kind, st, &priced, &rec->in);
	/* Spec 7: cooldown_s between moves towards decode; panic_ratio lets
	 * a decode pool that far over its target skip it while prefill is
	 * light. */
	if (c->has_to_decode && (double)(p->now_ns - c->to_decode_ns) < c->cooldown_s * 1e9 &&
	    !(c->panic_ratio > 0 && rec->in.decode_load >= c->panic_ratio &&
	      rec->in.prefill_load < c->shrink))
		return "cooldown";
	return NULL;
}

/* --- records --------------------------------------------------------------- */

static void
record(struct nw_controller *c, enum kind kind, const struct record *rec, bool changes_split)
{
	c->evaluations[kind]++;
	c->results[kind][rec->result]++;
	c->last = *rec;
	c->has_last = true;
	if (!changes_split)
		return;
	if (c->len < c->cap) {
		c->ring[(c->head + c->len) % c->cap] = *rec;
		c->len++;
	} else {
		c->ring[c->head] = *rec;
		c->head = (c->head + 1) % c->cap;
	}
	c->total++;
}

/* One evaluation: the inputs, the plugin's proposal, the guards, the
 * records. */
static uint32_t
evaluate(struct nw_controller *c, const struct nw_controller_pass *p, enum kind kind,
         struct nw_role_change *out, uint32_t max)
{
	struct nw_role_counts counts;
	struct narwhal_split_price now_price;
	struct narwhal_controller_input in;
	struct narwhal_controller_proposal prop;
	struct record rec = { .at_ns = p->now_ns, .caller = callers[kind] };
	const struct narwhal_controller_ops *ops = p->plugin->ops;
	uint32_t n = 0;
	int rc;

	nw_roles_count(p->engines, p->n, &counts);
	gather(c, p, &counts, &rec.in);
	rec.prefill_before = rec.prefill = counts.prefill;
	rec.decode_before = rec.decode = counts.decode;
	if (kind == KIND_URGENT) {
		rec.in.urgent_prompt_tokens = c->urgent.prompt_tokens;
		rec.in.urgent_trigger_s = c->urgent.projected_ttft_s;
		rec.in.urgent_trigger_at_ns = c->urgent.at_ns;
		c->urgent.state = URGENT_SPENT;
		c->urgent.evaluations++;
	}
	if (price(c, p, &rec.in, counts.prefill, counts.decode, &now_price) ==
	    NARWHAL_ESTIMATE_OK) {
		rec.in.worst_current = now_price.worst_ratio;
		rec.in.urgent_current_s = now_price.urgent_ttft_s;
	}
	/* The queue may have drained since the trigger: the prompt now meets
	 * its target on the current split (or nothing can price it), and the
	 * wake ends without asking the plugin. */
	if (kind == KIND_URGENT && !(rec.in.urgent_current_s > p->fleet->view.ttft_target_s)) {
		rec.result = RESULT_DISMISSED;
		c->urgent.dismissed++;
		record(c, kind, &rec, false);
		return 0;
	}

	in = (struct narwhal_controller_input){
		.struct_size = sizeof in,
		.now_ns = p->now_ns,
		.fleet = &p->fleet->view,
		.live_prefill = counts.prefill,
		.live_decode = counts.decode,
		.prefill_load = rec.in.prefill_load,
		.decode_load = rec.in.decode_load,
		.demand_short = rec.in.demand_short,
		.demand_long = rec.in.demand_long,
		.evidence_closed = rec.in.evidence_closed,
		.urgent = kind == KIND_URGENT,
		.arrivals_short = rec.in.arrivals_short,
		.arrivals_long = rec.in.arrivals_long,
		.prompt_tokens_mean = rec.in.prompt_mean,
		.output_tokens_mean = rec.in.output_mean,
		.resident_decode = rec.in.resident_decode,
		.pending_decode = rec.in.pending_decode,
		.profiles_complete = rec.in.profiles_complete,
		.movable_to_prefill = rec.in.movable_to_prefill,
		.movable_to_decode = rec.in.movable_to_decode,
		.urgent_prompt_tokens = rec.in.urgent_prompt_tokens,
		.urgent_ttft_s = rec.in.urgent_current_s,
		.arrival_dispersion = rec.in.dispersion,
	};
	/* The current split, so a plugin that fills nothing proposes no
	 * change (plugin-abi.h). */
	prop = (struct narwhal_controller_proposal){
		.struct_size = sizeof prop, .prefill = counts.prefill, .decode = counts.decode,
		.worst_slo_ratio = NAN, .reason = NULL,
	};
	rc = ops->propose(p->plugin->instance, &in, &prop);
	if (rc != 0) {
		rec.result = RESULT_FAILED;
		c->gate = "plugin_failed";
		record(c, kind, &rec, false);
		return 0;
	}
	rec.reason = pool_reason(c, prop.reason);
	rec.in.plugin_worst = prop.worst_slo_ratio;
	rec.prefill = prop.prefill;
	rec.decode = prop.decode;
	if (prop.prefill == counts.prefill && prop.decode == counts.decode) {
		if (kind == KIND_SCHEDULED && g_strcmp0(rec.reason, REASON_STEP) == 0) {
			c->between_steps++;
			return 0;
		}
		rec.result = RESULT_UNCHANGED;
		c->gate = rec.reason;
		record(c, kind, &rec, false);
		return 0;
	}
	rec.refused_by = guard(c, p, kind, &counts, &prop, rec.reason, &rec, out, max, &n);
	if (rec.refused_by != NULL) {
		/* Nothing moves: the caller gets no change. */
		rec.result = RESULT_REFUSED;
		rec.n_engines = 0;
		c->gate = rec.refused_by;
		n = 0;
	} else if (c->rules.advisory) {
		rec.result = RESULT_ADVISED;
		c->gate = "advisory";
	} else {
		rec.result = RESULT_APPLIED;
		c->gate = NULL;
		if (kind == KIND_URGENT)
			c->urgent.moves++;
	}
	record(c, kind, &rec, true);
	return n;
}

uint32_t
nw_controller_scheduled(struct nw_controller *c, const struct nw_controller_pass *p,
                        struct nw_role_change *out, uint32_t max)
{
	/* A regular pass (answered "step" or not): the urgent path may be
	 * armed again. */
	if (c->urgent.state == URGENT_SPENT)
		c->urgent.state = URGENT_IDLE;
	return evaluate(c, p, KIND_SCHEDULED, out, max);
}

/* --- the urgent path -------------------------------------------------------- */

bool
nw_controller_urgent_note(struct nw_controller *c, int64_t now_ns, uint64_t prompt_tokens,
                          double projected_ttft_s)
{
	if (c->urgent.state != URGENT_IDLE)
		return false;
	c->urgent.state = URGENT_ARMED;
	c->urgent.at_ns = now_ns;
	c->urgent.prompt_tokens = prompt_tokens;
	c->urgent.projected_ttft_s = projected_ttft_s;
	return true;
}

bool
nw_controller_urgent_pending(const struct nw_controller *c)
{
	return c->urgent.state == URGENT_ARMED;
}

uint32_t
nw_controller_urgent(struct nw_controller *c, const struct nw_controller_pass *p,
                     struct nw_role_change *out, uint32_t max)
{
	if (c->urgent.state != URGENT_ARMED)
		return 0;
	return evaluate(c, p, KIND_URGENT, out, max);
}

void
nw_controller_note_change(struct nw_controller *c, struct nw_demand *demand,
                          const struct nw_role_change *change)
{
	if (!change->applied || change->to != NARWHAL_ROLE_DECODE)
		return;
	c->has_to_decode = true;
	c->to_decode_ns = change->at_ns;
	/* Spec 7.6: a decode-recovery move restarts the consolidation
	 * evidence window. */
	if (g_strcmp0(change->caller, "floor_repair") == 0)
		nw_demand_evidence_reset(demand, change->at_ns, "decode_recovery");
}

/* --- exposure ------------------------------------------------------------------ */

static json_t *
finite_json(double v)
{
	return isfinite(v) ? json_real(v) : json_null();
}

static json_t *
split_json(uint32_t prefill, uint32_t decode)
{
	return json_pack("{s:I, s:I}", "prefill", (json_int_t)prefill, "decode", (json_int_t)decode);
}

static json_t *
demand_json(const struct inputs *in)
{
	return json_pack("{s:{s:f, s:I}, s:{s:f, s:I, s:o}}",
	                 "short", "arrivals_per_s", in->demand_short,
	                 "arrivals", (json_int_t)in->arrivals_short,
	                 "long", "arrivals_per_s", in->demand_long,
	                 "arrivals", (json_int_t)in->arrivals_long,
	                 "dispersion", finite_json(in->dispersion));
}

static json_t *
evidence_json(const struct inputs *in)
{
	return json_pack("{s:b, s:f, s:I}", "closed", in->evidence_closed, "span_s",
	                 in->evidence_span_s, "arrivals", (json_int_t)in->evidence_arrivals);
}

static json_t *
inputs_json(const struct inputs *in, int64_t start_ns)
{
	json_t *o = json_pack(
		"{s:{s:o, s:o}, s:o, s:o, s:f, s:f, s:I, s:I, s:b, s:{s:I, s:I}, s:o, s:o, s:o}",
		"loads", "prefill", finite_json(in->prefill_load),
		"decode", finite_json(in->decode_load),
		"demand", demand_json(in),
		"evidence", evidence_json(in),
		"prompt_tokens_mean", in->prompt_mean,
		"output_tokens_mean", in->output_mean,
		"resident_decode", (json_int_t)in->resident_decode,
		"pending_decode", (json_int_t)in->pending_decode,
		"profiles_complete", in->profiles_complete,
		"movable", "to_prefill", (json_int_t)in->movable_to_prefill,
		"to_decode", (json_int_t)in->movable_to_decode,
		"worst_ratio_current", finite_json(in->worst_current),
		"worst_ratio_proposed", finite_json(in->worst_proposed),
		"plugin_worst_ratio", finite_json(in->plugin_worst));

	if (in->urgent_prompt_tokens > 0)
		json_object_set_new(o, "urgent", json_pack(
			"{s:I, s:f, s:o, s:o, s:o}", "prompt_tokens", (json_int_t)in->urgent_prompt_tokens,
			"trigger_at_s", (double)(in->urgent_trigger_at_ns - start_ns) / 1e9,
			"trigger_ttft_s", finite_json(in->urgent_trigger_s),
			"current_ttft_s", finite_json(in->urgent_current_s),
			"proposed_ttft_s", finite_json(in->urgent_proposed_s)));
	return o;
}

static json_t *
record_json(const struct record *r, int64_t start_ns)
{
	json_t *engines = json_array();

	for (uint32_t k = 0; k < r->n_engines; k++)
		json_array_append_new(engines, json_string(r->engines[k]));
	return json_pack("{s:f, s:s, s:s?, s:o, s:o, s:s, s:s?, s:o, s:o}",
	                 "at_s", (double)(r->at_ns - start_ns) / 1e9,
	                 "caller", r->caller, "reason", r->reason,
	                 "before", split_json(r->prefill_before, r->decode_before),
	                 "proposed", split_json(r->prefill, r->decode),
	                 "result", nw_controller_result_names[r->result],
	                 "refused_by", r->refused_by,
	                 "engines", engines,
	                 "inputs", inputs_json(&r->in, start_ns));
}

/* Evaluations of one kind by result. */
static json_t *
counts_json(const struct nw_controller *c, enum kind kind)
{
	json_t *o = json_pack("{s:I}", "total", (json_int_t)c->evaluations[kind]);

	if (kind == KIND_SCHEDULED)
		json_object_set_new(o, "between_steps", json_integer((json_int_t)c->between_steps));

	for (int k = 0; k < NW_CONTROLLER_RESULTS; k++)
		json_object_set_new(o, nw_controller_result_names[k],
		                    json_integer((json_int_t)c->results[kind][k]));
	return o;
}

json_t *
nw_controller_to_json(const struct nw_controller *c, const char *const *ids, int64_t start_ns)
{
	json_t *proposals = json_array();

	/* Records name engines by id already (a reload may renumber them). */
	(void)ids;
	for (uint32_t k = 0; k < c->len; k++)
		json_array_append_new(proposals,
		                      record_json(&c->ring[(c->head + k) % c->cap], start_ns));
	return json_pack("{s:s?, s:b, s:s?, s:o, s:o, s:o, s:{s:b, s:I, s:I, s:I}, "
	                 "s:{s:o, s:o}, s:{s:I, s:I}, s:o}",
	                 "policy", c->policy, "advisory", c->rules.advisory,
	                 "gate", c->gate,
	                 "last", c->has_last ? record_json(&c->last, start_ns) : json_null(),
	                 "demand", c->has_last ? demand_json(&c->last.in) : json_null(),
	                 "evidence", c->has_last ? evidence_json(&c->last.in) : json_null(),
	                 "urgent", "pending", c->urgent.state == URGENT_ARMED,
	                 "evaluations", (json_int_t)c->urgent.evaluations,
	                 "moves", (json_int_t)c->urgent.moves,
	                 "dismissed", (json_int_t)c->urgent.dismissed,
	                 "evaluations", "scheduled", counts_json(c, KIND_SCHEDULED),
	                 "urgent", counts_json(c, KIND_URGENT),
	                 "proposals_kept", "capacity", (json_int_t)c->cap,
	                 "total", (json_int_t)c->total,
	                 "proposals", proposals);
}

void
nw_controller_summary(const struct nw_controller *c, struct nw_controller_summary *out)
{
	const struct inputs *in = &c->last.in;

	*out = (struct nw_controller_summary){
		.gate = c->gate,
		.has_last = c->has_last,
		.proposed_prefill = c->last.prefill,
		.proposed_decode = c->last.decode,
		.prefill_load = c->has_last ? in->prefill_load : NAN,
		.decode_load = c->has_last ? in->decode_load : NAN,
		.demand_short = c->has_last ? in->demand_short : NAN,
		.demand_long = c->has_last ? in->demand_long : NAN,
		.evidence_closed = c->has_last && in->evidence_closed,
		.worst_ratio_current = c->has_last ? in->worst_current : NAN,
		.worst_ratio_proposed = c->has_last ? in->worst_proposed : NAN,
	};
	memcpy(out->evaluations, c->evaluations, sizeof out->evaluations);
	memcpy(out->results, c->results, sizeof out->results);
}
