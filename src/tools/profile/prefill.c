/*
 * The prefill sweep of one engine (docs/profiles.md, "How to profile a
 * fleet"): prompts of exact lengths (prompt.c), each length several times,
 * the rounds in turn so that a drift of the engine touches every length
 * alike. The engine is otherwise idle.
 *
 * An engine that hands off is timed on prefill-only legs, each one a real
 * handoff to its partner (engines.c) with two output tokens, which frees
 * the KV the prefill left behind and times the handoff too: from the end
 * of the prefill to the decode engine's first token, less that engine's
 * decode step (the interval to its second token). An aggregate-only engine
 * is timed on aggregate legs with one output token (to the first token).
 *
 * What is fitted is the engine's own time: each length's fastest leg (a
 * busy machine delays some answers and speeds up none), less the fastest
 * round trip of a call without model work, the tokenise call of the
 * shortest prompt.
 */
#include "build-config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "control/handoff-probe.h"
#include "tools/profile/run.h"

/* The prompt that teaches the builder the engine's tokeniser first. */
#define CALIBRATION_TOKENS 64

struct sample_wait {
	bool done;
	struct nw_handoff_probe_result res;
	int64_t token_us[2];        /* the first two token events */
	unsigned token_events;
	bool multi;                 /* an event carried more than one token */
};

static void
on_tokens(void *data, uint32_t tokens, int64_t at_us)
{
	struct sample_wait *w = data;

	if (tokens > 1)
		w->multi = true;
	if (w->token_events < 2)
		w->token_us[w->token_events] = at_us;
	w->token_events++;
}

static void
on_probe_done(void *data, const struct nw_handoff_probe_result *res)
{
	struct sample_wait *w = data;

	w->res = *res;
	w->res.handoff = NULL;
	w->done = true;
}

static double
least(const double *v, size_t n)
{
	double m = v[0];

	for (size_t i = 1; i < n; i++)
		m = MIN(m, v[i]);
	return m;
}

/* handoff_s = setup + per_token * L by least squares; samples 0 when the
 * lengths do not differ. */
static void
fit_handoff(const GArray *s, struct nw_handoff_profile *out)
{
	double mx = 0, my = 0, sxx = 0, sxy = 0;
	uint64_t longest = 0;
	guint n = s->len;

	memset(out, 0, sizeof *out);
	for (guint i = 0; i < n; i++) {
		const struct nw_prof_handoff_sample *h = &g_array_index(s, struct nw_prof_handoff_sample, i);

		mx += (double)h->tokens / n;
		my += h->seconds / n;
		longest = MAX(longest, h->tokens);
	}
	for (guint i = 0; i < n; i++) {
		const struct nw_prof_handoff_sample *h = &g_array_index(s, struct nw_prof_handoff_sample, i);

		sxx += ((double)h->tokens - mx) * ((double)h->tokens - mx);
		sxy += ((double)h->tokens - mx) * (h->seconds - my);
	}
	if (n < 2 || !(sxx > 0))
		return;
	out->per_token_s = sxy / sxx;
	out->setup_s = my - out->per_token_s * mx;
	out->max_tokens = longest;
	out->samples = n;
}

/* One sample: a prompt of L tokens, its leg timed. False with e failed. */
static bool
measure(struct nw_prof_run *run, struct nw_prof_engine *e, uint64_t tokens, double *leg_s,
        double *tokenize_s)
{
	const struct nw_config *cfg = run->cfg;
	const struct nw_dialect *partner = e->partner >= 0 ? run->engines[e->partner].d : NULL;
	struct sample_wait w = { .done = false };
	g_autofree char *text = nw_prof_prompt_wait(run, e, tokens, tokenize_s);
	struct nw_handoff_probe_options po = {
		.pool = run->pool, .prefill = e->d, .decode = partner, .model = e->model,
		.handle = NW_HANDOFF_PROBE_HANDLE_BASE + run->next_handle++,
		.max_tokens = partner != NULL ? 2 : 1, .prompt = text,
		.leg_timeout_s = cfg->engine.first_token_timeout_s,
		.connect_timeout_s = cfg->engine.connect_timeout_s,
		.on_tokens = on_tokens, .tokens_data = &w,
	};

	if (text == NULL)
		return false;
	nw_handoff_probe_start(&po, on_probe_done, &w);
	nw_prof_wait(&w.done);
	if (!w.res.ok) {
		nw_prof_fail(e, "a prompt of %" G_GUINT64_FORMAT " tokens failed at stage %s: %s%s",
		             tokens, nw_handoff_probe_stage_name(w.res.stage), w.res.error,
		             w.res.timed_out ? " (engine.first_token_timeout_s bounds each leg)" : "");
		return false;
	}
	if (partner == NULL) {
		*leg_s = w.res.first_token_s;
		return true;
	}
	*leg_s = w.res.prefill_s;
	if (w.token_events >= 2 && !w.multi) {
		/* handoff_s runs from the prefill leg's start, so less the
		 * prefill it is prefill end to first token. */
		struct nw_prof_handoff_sample h = {
			.tokens = tokens,
			.seconds = w.res.handoff_s - w.res.prefill_s -
			           (double)(w.token_us[1] - w.token_us[0]) / 1e6,
		};

		g_array_append_val(e->handoff, h);
	}
	return true;
}

void
nw_prof_prefill(struct nw_prof_run *run, struct nw_prof_engine *e)
{
	const unsigned reps = run->sizes.prefill_reps;
	uint64_t lengths[NW_PROF_LENGTHS_MAX];
	uint64_t lo, hi;
	size_t n;
	double seconds, transport;
	g_autofree double *leg = NULL;
	g_autofree double *tok = NULL;     /* the shortest prompt's tokenise calls */
	g_autofree char *calibration = nw_prof_prompt_wait(run, e, CALIBRATION_TOKENS, &seconds);

	if (calibration == NULL)
		return;
	/* At least one filler after the nonce. */
	lo = MAX(NW_PROF_PROMPT_FLOOR,
	         (uint64_t)ceil(e->prompt_overhead + e->tokens_per_filler - 1e-9));
	hi = nw_prof_prompt_max(e->max_model_len, run->opts->prompt_cap);
	n = nw_prof_prefill_lengths(run->opts->quick, lo, hi, lengths, G_N_ELEMENTS(lengths));
	if (n < 3) {
		nw_prof_fail(e, "its prompts can only be %" G_GUINT64_FORMAT " to %" G_GUINT64_FORMAT
		             " tokens long: too few lengths to fit the prefill model", lo, hi);
		return;
	}
	nw_prof_report_plan(run->report, (double)(n * reps) - run->prefill_units);
	leg = g_new0(double, n * reps);
	tok = g_new0(double, reps);
	for (unsigned r = 0; r < reps; r++) {
		for (size_t i = 0; i < n; i++) {
			double tokenize_s;

			nw_prof_report_progress(run->report, "%s: prefill of %" G_GUINT64_FORMAT
			                        " tokens (%u of %u)", e->d->ref.id, lengths[i],
			                        (unsigned)(r * n + i + 1), (unsigned)(n * reps));
			if (!measure(run, e, lengths[i], &leg[i * reps + r], &tokenize_s))
				return;
			if (i == 0)
				tok[r] = tokenize_s;
			nw_prof_report_done(run->report, 1);
		}
	}
	/* Longer prompts' tokenise calls answer with every token id, so their
	 * round trip grows with more than the engine's reading of the prompt;
	 * the shortest one's is the round trip of the call itself. */
	transport = least(tok, reps);
	for (size_t i = 0; i < n; i++) {
		struct nw_prefill_sample s = {
			.tokens = lengths[i],
			/* Never zero or below: the fit refuses such a time. */
			.seconds = MAX(least(&leg[i * reps], reps) - transport, 1e-6),
		};

		g_array_append_val(e->prefill, s);
	}
	if (!nw_fit_prefill((const struct nw_prefill_sample *)(void *)e->prefill->data,
	                    e->prefill->len, &e->fit_prefill)) {
		nw_prof_fail(e, "its prefill times do not fit the quadratic form (%u lengths)",
		             e->prefill->len);
		return;
	}
	/* The fit was over each length's fastest; it rests on every round. */
	e->fit_prefill.samples = (uint32_t)(n * reps);
	fit_handoff(e->handoff, &e->fit_handoff);
}
