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
	uint64_t bounded;            /* sized offers that set max_tokens */
	uint64_t prompt_tokens;
	uint64_t output_requested;
	uint64_t output_delivered;
	uint64_t completions;
};

/* One horizon: a ring of buckets that together span it. */
struct horizon {
	int64_t origin_ns;           /* bucket 0 starts here */
	int64_t width_ns;
	int64_t latest;              /* the newest bucket written; -1: none */
	struct bucket buckets[NW_DEMAND_BUCKETS];
};

struct nw_demand {
	struct nw_demand_windows w;
	/* Each horizon has buckets of its own, so that each is exact whatever
	 * the ratio of the two windows. */
	struct horizon horizons[2];  /* nw_demand_horizon */
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

/* The horizon's buckets start again at now, length_s long in all (at
 * least a millisecond a bucket). */
static void
horizon_start(struct horizon *h, double length_s, int64_t now_ns)
{
	h->width_ns = MAX(seconds_ns(length_s) / NW_DEMAND_BUCKETS, 1000000);
	h->origin_ns = now_ns;
	h->latest = -1;
	for (uint32_t i = 0; i < NW_DEMAND_BUCKETS; i++)
		h->buckets[i] = (struct bucket){ .index = -1 };
}

static void
evidence_open(struct nw_demand *d, int64_t now_ns)
{
	d->ev_open_ns = now_ns;
	d->ev_arrivals = 0;
	d->ev_enough_ns = -1;
}

struct nw_demand *
nw_demand_new(const struct nw_demand_windows *w, int64_t now_ns)
{
	struct nw_demand *d = g_new0(struct nw_demand, 1);

	d->w = *w;
	horizon_start(&d->horizons[NW_DEMAND_SHORT], w->short_s, now_ns);
	horizon_start(&d->horizons[NW_DEMAND_LONG], w->long_s, now_ns);
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
	bool evidence_changed = w->evidence_span_s != d->w.evidence_span_s ||
	                        w->evidence_max_span_s != d->w.evidence_max_span_s ||
	                        w->evidence_min_arrivals != d->w.evidence_min_arrivals;

	if (w->short_s != d->w.short_s)
		horizon_start(&d->horizons[NW_DEMAND_SHORT], w->short_s, now_ns);
	if (w->long_s != d->w.long_s)
		horizon_start(&d->horizons[NW_DEMAND_LONG], w->long_s, now_ns);
	d->w = *w;
	/* Evidence gathered under other rules proves nothing under these. */
	if (evidence_changed)
		nw_demand_evidence_reset(d, now_ns, "reconfigured");
}

const struct nw_demand_windows *
nw_demand_windows(const struct nw_demand *d)
{
	return &d->w;
}

/* The bucket of the stretch holding at_ns, made current; NULL when it is
 * older than the horizon (or than the horizon's start). */
static struct bucket *
bucket_at(struct horizon *h, int64_t at_ns)
{
	int64_t k;
	struct bucket *b;

	if (at_ns < h->origin_ns)
		return NULL;
	k = (at_ns - h->origin_ns) / h->width_ns;
	if (k + NW_DEMAND_BUCKETS <= h->latest)
		return NULL;
	b = &h->buckets[k % NW_DEMAND_BUCKETS];
	/* The slot holds an older stretch (never a newer one: that would be
	 * past latest): it has left the horizon. */
	if (b->index != k)
		*b = (struct bucket){ .index = k };
	h->latest = MAX(h->latest, k);
	return b;
}

/* Both horizons' buckets at at_ns; each may be NULL. */
static void
buckets_at(struct nw_demand *d, int64_t at_ns, struct bucket *b[2])
{
	for (int h = 0; h < 2; h++)
		b[h] = bucket_at(&d->horizons[h], at_ns);
}

/* One arrival, sized or not, and its buckets. */
static void
arrive(struct nw_demand *d, int64_t at_ns, struct bucket *b[2])
{
	buckets_at(d, at_ns, b);
	for (int h = 0; h < 2; h++) {
		if (b[h] != NULL)
			b[h]->arrivals++;
	}
	if (at_ns >= d->ev_open_ns && ++d->ev_arrivals == d->w.evidence_min_arrivals)
		d->ev_enough_ns = MAX(at_ns, d->ev_open_ns);
}

/* --- one offer's course ------------------------------------------------ */

void
nw_demand_offer(struct nw_demand *d, struct nw_demand_ticket *t, int64_t at_ns,
                uint64_t prompt_tokens, bool prompt_tokens_exact, uint32_t max_tokens)
{
	struct bucket *b[2];

	if (t->stage != STAGE_NONE)
		return;
	t->stage = STAGE_OFFERED;
	d->totals.offers_sized++;
	d->totals.offers_estimated += !prompt_tokens_exact;
	d->totals.offers_unbounded += max_tokens == 0;
	d->totals.prompt_tokens += prompt_tokens;
	d->totals.output_requested += max_tokens;
	arrive(d, at_ns, b);
	for (int h = 0; h < 2; h++) {
		if (b[h] != NULL) {
			b[h]->bounded += max_tokens > 0;
			b[h]->prompt_tokens += prompt_tokens;
			b[h]->output_requested += max_tokens;
		}
	}
}

void
nw_demand_refuse_unsized(struct nw_demand *d, int64_t at_ns, nw_demand_refusal why)
{
	struct bucket *b[2];

	d->totals.offers_unsized++;
	if (why < NW_DEMAND_REFUSALS)
		d->totals.refused[why]++;
	arrive(d, at_ns, b);
	for (int h = 0; h < 2; h++) {
		if (b[h] != NULL)
			b[h]->unsized++;
	}
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
	struct bucket *b[2];

	switch (t->stage) {
	case STAGE_ADMITTED:
		if (ok)
			d->totals.completed_ok++;
		else
			d->totals.completed_failed++;
		d->totals.output_delivered += out;
		buckets_at(d, now_ns, b);
		for (int h = 0; h < 2; h++) {
			if (b[h] != NULL) {
				b[h]->completions++;
				b[h]->output_delivered += out;
			}
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
	/* Printable ASCII only: the plugin's bytes reach JSON and the state
	 * must stay valid whatever they are. */
	for (size_t i = 0; dec->reason != NULL && dec->reason[i] != '\0' &&
	                   i < NW_DEMAND_REASON_MAX; i++) {
		char c = dec->reason[i];

		rec->reason[i] = c >= 0x20 && c < 0x7f ? c : '?';
		rec->reason[i + 1] = '\0';
	}
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
	const struct horizon *z = &d->horizons[h == NW_DEMAND_SHORT ? NW_DEMAND_SHORT
	                                                            : NW_DEMAND_LONG];
	int64_t now = MAX(now_ns, z->origin_ns);
	int64_t current = (now - z->origin_ns) / z->width_ns;
	int64_t first = current - NW_DEMAND_BUCKETS + 1;
	int64_t start = MAX(z->origin_ns, z->origin_ns + first * z->width_ns);
	/* The whole buckets the dispersion reads: the current one is still
	 * filling. */
	int64_t whole = current - MAX(first, 0);
	double covered, sum = 0, squares = 0;

	*out = (struct nw_demand_estimate){
		.horizon_s = (double)(NW_DEMAND_BUCKETS * z->width_ns) / 1e9,
		.bucket_s = (double)z->width_ns / 1e9,
		.dispersion = NAN,
	};
	for (uint32_t i = 0; i < NW_DEMAND_BUCKETS; i++) {
		const struct bucket *b = &z->buckets[i];

		if (b->index < first || b->index > current)
			continue;
		if (b->index < current) {
			sum += (double)b->arrivals;
			squares += (double)b->arrivals * (double)b->arrivals;
		}
		out->arrivals += b->arrivals;
		out->unsized += b->unsized;
		out->bounded += b->bounded;
		out->prompt_tokens += b->prompt_tokens;
		out->output_requested += b->output_requested;
		out->output_delivered += b->output_delivered;
		out->completions += b->completions;
	}
	/* Rates over the time the buckets cover, at least one bucket: a
	 * just-started ledger does not turn one arrival into a burst. */
	covered = (double)MAX(now - start, z->width_ns) / 1e9;
	out->covered_s = covered;
	out->arrivals_per_s = (double)out->arrivals / covered;
	out->prompt_tokens_per_s = (double)out->prompt_tokens / covered;
	out->output_requested_per_s = (double)out->output_requested / covered;
	out->output_delivered_per_s = (double)out->output_delivered / covered;
	if (whole >= 2 && sum > 0) {
		double mean = sum / (double)whole;

		out->dispersion = MAX(squares / (double)whole - mean * mean, 0) / mean;
	}
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
