#include "build-config.h"

#include "core/demand.h"

#include <math.h>
#include <string.h>

#include <glib.h>

const char *const nw_demand_refusal_names[NW_DEMAND_REFUSALS] = {
	[NW_DEMAND_REFUSED_CEILING] = "connection_ceiling",
	[NW_DEMAND_REFUSED_ADMISSION] = "admission",
	[NW_DEMAND_REFUSED_TTFT_TARGET] = "ttft_target",
	[NW_DEMAND_REFUSED_QUEUE_FULL] = "queue_full",
	[NW_DEMAND_REFUSED_QUEUE_TIMEOUT] = "queue_timeout",
	[NW_DEMAND_REFUSED_CONTEXT_LENGTH] = "context_length",
	[NW_DEMAND_REFUSED_DEGRADED] = "degraded",
	[NW_DEMAND_REFUSED_UNAVAILABLE] = "admission_unavailable",
};

const char *const nw_demand_phase_names[NW_DEMAND_PHASES] = {
	"prefill", "decode", "aggregate",
};

/* Where an offer is (struct nw_demand_ticket). */
enum {
	STAGE_NONE,
	STAGE_OFFERED,
	STAGE_QUEUED,
	STAGE_ADMITTED,
	STAGE_CLOSED,
};

/* What arrived and completed in one stretch of width_ns. */
struct bucket {
	int64_t index;               /* the stretch's number from origin_ns; -1: none */
	uint64_t arrivals;
	uint64_t unsized;
	uint64_t prompt_tokens;
	uint64_t output_requested;
	uint64_t output_delivered;
	uint64_t completions;
};

struct nw_demand {
	struct nw_demand_windows w;
	int64_t origin_ns;           /* bucket 0 starts here */
	int64_t width_ns;
	uint32_t short_buckets;      /* the short horizon's share of the buckets */
	int64_t latest;              /* the newest bucket written; -1: none */
	struct bucket buckets[NW_DEMAND_BUCKETS];
	struct nw_demand_totals totals;

	/* The evidence window. */
	int64_t ev_open_ns;
	uint64_t ev_arrivals;
	int64_t ev_enough_ns;        /* when evidence_min_arrivals was reached; -1: not yet */
	uint64_t ev_resets;
	const char *ev_reason;

	/* The decisions, a ring. */
	struct nw_demand_decision ring[NW_DEMAND_DECISIONS];
	uint32_t ring_next;
	uint32_t ring_len;
};

void
nw_demand_windows_from_config(const struct nw_config *cfg, struct nw_demand_windows *w)
{
	*w = (struct nw_demand_windows){
		.long_s = cfg->controller.reactive.window_s,
		.short_s = cfg->controller.reactive.evidence_span_s,
		.evidence_span_s = cfg->controller.reactive.evidence_span_s,
		.evidence_max_span_s = cfg->controller.reactive.evidence_max_span_s,
		.evidence_min_arrivals = cfg->controller.reactive.evidence_min_arrivals,
	};
}

static int64_t
seconds_ns(double s)
{
	return (int64_t)llround(s * 1e9);
}

/* The buckets start again at now (a new width). */
static void
clear_buckets(struct nw_demand *d, int64_t now_ns)
{
	d->origin_ns = now_ns;
	d->latest = -1;
	for (uint32_t i = 0; i < NW_DEMAND_BUCKETS; i++)
		d->buckets[i] = (struct bucket){ .index = -1 };
}

static void
evidence_open(struct nw_demand *d, int64_t now_ns)
{
	d->ev_open_ns = now_ns;
	d->ev_arrivals = 0;
	d->ev_enough_ns = -1;
}

/* The short horizon in whole buckets, 1 to all of them. */
static void
set_short(struct nw_demand *d)
{
	double n = round((double)seconds_ns(d->w.short_s) / (double)d->width_ns);

	d->short_buckets = (uint32_t)CLAMP(n, 1.0, (double)NW_DEMAND_BUCKETS);
}

struct nw_demand *
nw_demand_new(const struct nw_demand_windows *w, int64_t now_ns)
{
	struct nw_demand *d = g_new0(struct nw_demand, 1);

	d->w = *w;
	/* At least a millisecond a bucket, whatever the window. */
	d->width_ns = MAX(seconds_ns(w->long_s) / NW_DEMAND_BUCKETS, 1000000);
	set_short(d);
	clear_buckets(d, now_ns);
	evidence_open(d, now_ns);
	return d;
}

void
nw_demand_free(struct nw_demand *d)
{
	g_free(d);
}

void
nw_demand_configure(struct nw_demand *d, const struct nw_demand_windows *w, int64_t now_ns)
{
	int64_t width = MAX(seconds_ns(w->long_s) / NW_DEMAND_BUCKETS, 1000000);
	bool evidence_changed = w->evidence_span_s != d->w.evidence_span_s ||
	                        w->evidence_max_span_s != d->w.evidence_max_span_s ||
	                        w->evidence_min_arrivals != d->w.evidence_min_arrivals;

	d->w = *w;
	if (width != d->width_ns) {
		d->width_ns = width;
		clear_buckets(d, now_ns);
	}
	set_short(d);
	/* Evidence gathered under other rules proves nothing under these. */
	if (evidence_changed)
		nw_demand_evidence_reset(d, now_ns, "reconfigured");
}

const struct nw_demand_windows *
nw_demand_windows(const struct nw_demand *d)
{
	return &d->w;
}

double
nw_demand_bucket_s(const struct nw_demand *d)
{
	return (double)d->width_ns / 1e9;
}

/* The bucket of the stretch holding at_ns, made current; NULL when it is
 * older than the long horizon (or than the estimates' start). */
static struct bucket *
bucket_at(struct nw_demand *d, int64_t at_ns)
{
	int64_t k;
	struct bucket *b;

	if (at_ns < d->origin_ns)
		return NULL;
	k = (at_ns - d->origin_ns) / d->width_ns;
	if (k + NW_DEMAND_BUCKETS <= d->latest)
		return NULL;
	b = &d->buckets[k % NW_DEMAND_BUCKETS];
	/* The slot holds an older stretch (never a newer one: that would be
	 * past latest): it has left the horizon. */
	if (b->index != k)
		*b = (struct bucket){ .index = k };
	d->latest = MAX(d->latest, k);
	return b;
}

/* One arrival, sized or not. */
static struct bucket *
arrive(struct nw_demand *d, int64_t at_ns)
{
	struct bucket *b = bucket_at(d, at_ns);

	if (b != NULL)
		b->arrivals++;
	if (at_ns >= d->ev_open_ns && ++d->ev_arrivals == d->w.evidence_min_arrivals)
		d->ev_enough_ns = MAX(at_ns, d->ev_open_ns);
	return b;
}

/* --- one offer's course ------------------------------------------------ */

void
nw_demand_offer(struct nw_demand *d, struct nw_demand_ticket *t, int64_t at_ns,
                uint64_t prompt_tokens, bool prompt_tokens_exact, uint32_t max_tokens)
{
	struct bucket *b;

	if (t->stage != STAGE_NONE)
		return;
	t->stage = STAGE_OFFERED;
	d->totals.offers_sized++;
	d->totals.offers_estimated += !prompt_tokens_exact;
	d->totals.offers_unbounded += max_tokens == 0;
	d->totals.prompt_tokens += prompt_tokens;
	d->totals.output_requested += max_tokens;
	b = arrive(d, at_ns);
	if (b != NULL) {
		b->prompt_tokens += prompt_tokens;
		b->output_requested += max_tokens;
	}
}

void
nw_demand_refuse_unsized(struct nw_demand *d, int64_t at_ns, nw_demand_refusal why)
{
	struct bucket *b;

	d->totals.offers_unsized++;
	if (why < NW_DEMAND_REFUSALS)
		d->totals.refused[why]++;
	b = arrive(d, at_ns);
	if (b != NULL)
		b->unsized++;
}

void
nw_demand_queue(struct nw_demand *d, struct nw_demand_ticket *t)
{
	if (t->stage != STAGE_OFFERED)
		return;
	t->stage = STAGE_QUEUED;
	d->totals.queued++;
}

void
nw_demand_admit(struct nw_demand *d, struct nw_demand_ticket *t)
{
	if (t->stage != STAGE_OFFERED && t->stage != STAGE_QUEUED)
		return;
	t->stage = STAGE_ADMITTED;
	d->totals.admitted++;
}

void
nw_demand_refuse(struct nw_demand *d, struct nw_demand_ticket *t, nw_demand_refusal why)
{
	if (t->stage != STAGE_OFFERED && t->stage != STAGE_QUEUED)
		return;
	t->stage = STAGE_CLOSED;
	if (why < NW_DEMAND_REFUSALS)
		d->totals.refused[why]++;
}

void
nw_demand_end(struct nw_demand *d, struct nw_demand_ticket *t, int64_t now_ns, bool ok,
              int64_t output_tokens)
{
	uint64_t out = output_tokens > 0 ? (uint64_t)output_tokens : 0;
	struct bucket *b;

	switch (t->stage) {
	case STAGE_ADMITTED:
		if (ok)
			d->totals.completed_ok++;
		else
			d->totals.completed_failed++;
		d->totals.output_delivered += out;
		b = bucket_at(d, now_ns);
		if (b != NULL) {
			b->completions++;
			b->output_delivered += out;
		}
		break;
	case STAGE_OFFERED:
	case STAGE_QUEUED:
		d->totals.withdrawn++;
		break;
	default:
		break;
	}
	t->stage = STAGE_CLOSED;
}

/* --- decisions --------------------------------------------------------- */

static struct nw_demand_decision *
record(struct nw_demand *d, int64_t now_ns, nw_decision_kind kind, const char *request_id,
       uint64_t prompt_tokens, bool exact)
{
	struct nw_demand_decision *rec = &d->ring[d->ring_next];

	d->ring_next = (d->ring_next + 1) % NW_DEMAND_DECISIONS;
	d->ring_len = MIN(d->ring_len + 1, NW_DEMAND_DECISIONS);
	d->totals.decisions++;
	rec->at_ns = now_ns;
	rec->kind = kind;
	rec->phase = 0;
	rec->verdict = 0;
	rec->engine = NULL;
	rec->binding = false;
	rec->unserved = false;
	rec->prompt_tokens = prompt_tokens;
	rec->prompt_tokens_exact = exact;
	rec->projected_ttft_s = rec->budget_s = rec->retry_after_s = NAN;
	rec->cost = rec->projected_slo_ratio = NAN;
	rec->reason[0] = '\0';
	g_strlcpy(rec->request_id, request_id ? request_id : "", sizeof rec->request_id);
	return rec;
}

void
nw_demand_note_admission(struct nw_demand *d, int64_t now_ns, const char *request_id,
                         uint64_t prompt_tokens, bool prompt_tokens_exact, double budget_s,
                         const struct narwhal_admission_decision *dec)
{
	struct nw_demand_decision *rec = record(d, now_ns, NW_DECISION_ADMISSION, request_id,
	                                        prompt_tokens, prompt_tokens_exact);

	rec->verdict = dec->verdict;
	rec->projected_ttft_s = dec->projected_ttft_s;
	rec->budget_s = budget_s;
	rec->retry_after_s = dec->retry_after_s;
	if (dec->reason != NULL)
		g_strlcpy(rec->reason, dec->reason, sizeof rec->reason);
}

void
nw_demand_note_placement(struct nw_demand *d, int64_t now_ns, const char *request_id,
                         narwhal_phase phase, uint64_t prompt_tokens, bool prompt_tokens_exact,
                         const char *engine_id, bool binding,
                         const struct narwhal_placement_result *res)
{
	struct nw_demand_decision *rec = record(d, now_ns, NW_DECISION_PLACEMENT, request_id,
	                                        prompt_tokens, prompt_tokens_exact);

	rec->phase = phase;
	/* A record may outlive the configuration that named the engine (a
	 * reload): the id is interned, once per id for the process's life. */
	rec->engine = g_intern_string(engine_id);
	rec->binding = binding;
	rec->unserved = res->unserved;
	rec->cost = res->cost;
	rec->projected_slo_ratio = res->projected_slo_ratio;
	if (binding && phase >= 1 && phase <= NW_DEMAND_PHASES) {
		d->totals.placements[phase - 1]++;
		d->totals.unserved[phase - 1] += res->unserved;
	}
}

uint32_t
nw_demand_decision_count(const struct nw_demand *d)
{
	return d->ring_len;
}

const struct nw_demand_decision *
nw_demand_decision_at(const struct nw_demand *d, uint32_t i)
{
	uint32_t oldest = (d->ring_next + NW_DEMAND_DECISIONS - d->ring_len) % NW_DEMAND_DECISIONS;

	g_return_val_if_fail(i < d->ring_len, NULL);
	return &d->ring[(oldest + i) % NW_DEMAND_DECISIONS];
}

/* --- reading ------------------------------------------------------------ */

const struct nw_demand_totals *
nw_demand_totals(const struct nw_demand *d)
{
	return &d->totals;
}

void
nw_demand_estimate(const struct nw_demand *d, int64_t now_ns, nw_demand_horizon h,
                   struct nw_demand_estimate *out)
{
	int64_t n = h == NW_DEMAND_SHORT ? d->short_buckets : NW_DEMAND_BUCKETS;
	int64_t now = MAX(now_ns, d->origin_ns);
	int64_t current = (now - d->origin_ns) / d->width_ns, first = current - n + 1;
	int64_t start = MAX(d->origin_ns, d->origin_ns + first * d->width_ns);
	double covered;

	*out = (struct nw_demand_estimate){ .horizon_s = (double)(n * d->width_ns) / 1e9 };
	for (uint32_t i = 0; i < NW_DEMAND_BUCKETS; i++) {
		const struct bucket *b = &d->buckets[i];

		if (b->index < first || b->index > current)
			continue;
		out->arrivals += b->arrivals;
		out->unsized += b->unsized;
		out->prompt_tokens += b->prompt_tokens;
		out->output_requested += b->output_requested;
		out->output_delivered += b->output_delivered;
		out->completions += b->completions;
	}
	/* Rates over the time the buckets cover, at least one bucket: a
	 * just-started ledger does not turn one arrival into a burst. */
	covered = (double)MAX(now - start, d->width_ns) / 1e9;
	out->covered_s = covered;
	out->arrivals_per_s = (double)out->arrivals / covered;
	out->prompt_tokens_per_s = (double)out->prompt_tokens / covered;
	out->output_requested_per_s = (double)out->output_requested / covered;
	out->output_delivered_per_s = (double)out->output_delivered / covered;
}

/* --- the evidence window ------------------------------------------------ */

void
nw_demand_evidence(const struct nw_demand *d, int64_t now_ns, struct nw_demand_evidence *out)
{
	int64_t by_max = d->ev_open_ns + seconds_ns(d->w.evidence_max_span_s);
	int64_t by_span = d->ev_enough_ns < 0
	                  ? INT64_MAX
	                  : MAX(d->ev_open_ns + seconds_ns(d->w.evidence_span_s), d->ev_enough_ns);
	int64_t closes = MIN(by_span, by_max);

	*out = (struct nw_demand_evidence){
		.span_s = (double)MAX(now_ns - d->ev_open_ns, 0) / 1e9,
		.arrivals = d->ev_arrivals,
		.closed = now_ns >= closes,
		.closed_after_s = NAN,
		.resets = d->ev_resets,
		.last_reset = d->ev_reason,
	};
	if (out->closed) {
		out->closed_by = by_span <= by_max ? "span_and_arrivals" : "max_span";
		out->closed_after_s = (double)(closes - d->ev_open_ns) / 1e9;
	}
}

void
nw_demand_evidence_reset(struct nw_demand *d, int64_t now_ns, const char *reason)
{
	evidence_open(d, now_ns);
	d->ev_resets++;
	d->ev_reason = reason;
}
