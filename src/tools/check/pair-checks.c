/*
 * Every crossed pair (docs/check.md, "Handoff checks"; spec 4.2 and 6):
 * for each engine that hands off, every other engine that can take its
 * handoff (with a single such engine, itself), --samples real handoffs one
 * after the other with the handoff probe under engine.first_token_timeout_s.
 * The first-token p99 is compared with that timeout, and the time the
 * handoff lived before its first token with the producer's kv_lease_s and
 * serving.handoff_timeout_s. An engine that cannot hand off is checked with
 * aggregate requests under the same timeout.
 */
#include "build-config.h"

#include <math.h>
#include <string.h>

#include "control/handoff-probe.h"
#include "tools/check/checks.h"

/* A p99 above this share of the timeout passes with a warning. */
#define HEADROOM_WARN 0.8

struct sample_wait {
	bool done;
	struct nw_handoff_probe_result res;
};

static void
on_probe_done(void *data, const struct nw_handoff_probe_result *res)
{
	struct sample_wait *w = data;

	w->res = *res;
	w->res.handoff = NULL;
	w->done = true;
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Nearest-rank percentile of n sorted values. */
static double
percentile(const double *sorted, unsigned n, double q)
{
	unsigned rank = (unsigned)ceil(q * n);

	return n == 0 ? NAN : sorted[MIN(MAX(rank, 1u), n) - 1];
}

static json_t *
distribution(double *v, unsigned n)
{
	qsort(v, n, sizeof *v, cmp_double);
	return json_pack("{s:f, s:f, s:f}", "p50", percentile(v, n, 0.5), "p99",
	                 percentile(v, n, 0.99), "max", n ? v[n - 1] : NAN);
}

/* What an operator can do about a failed sample. */
static const char *
failure_hint(const struct nw_handoff_probe_result *res)
{
	if (res->timed_out && res->stage != NW_PROBE_STAGE_STREAM)
		return "raise engine.first_token_timeout_s above the fleet's crossed-handoff p99, "
		       "or find why the engine is slow";
	switch (res->stage) {
	case NW_PROBE_STAGE_BUILD:
		return "fix the dialect plugin or the engines' dialects in fleet.engines";
	case NW_PROBE_STAGE_HANDOFF:
		return "the prefill engine gives no handoff: check its KV connector settings";
	default:
		return "check both engines' logs";
	}
}

/* One pair (prefill == decode for an aggregate-only engine, or a fleet
 * with a single engine that hands off). */
static void
check_pair(struct nw_check_run *run, uint32_t a, uint32_t b)
{
	const struct nw_config *cfg = run->cfg;
	const struct nw_dialect *pd = &run->fleet->dialects[a], *dd = &run->fleet->dialects[b];
	bool aggregate = !nw_dialect_pairs(pd);
	const char *check = aggregate ? "aggregate" : "handoff";
	json_t *subject = aggregate ? nw_check_engine_subject(pd)
	                            : json_pack("{s:s, s:s}", "prefill", pd->ref.id,
	                                        "decode", dd->ref.id);
	double timeout = cfg->engine.first_token_timeout_s;
	double lease = cfg->fleet.engines[a].kv_lease_s;
	double cap = cfg->serving.handoff_timeout_s;
	unsigned n = run->opts->samples, done = 0;
	g_autofree double *first = g_new0(double, n);
	g_autofree double *handoff = g_new0(double, n);
	g_autofree double *prefill = g_new0(double, n);
	struct sample_wait w = { .done = false };
	json_t *m;
	double ft99, ho99;
	g_autofree char *ft50_text = NULL;
	g_autofree char *ft99_text = NULL;
	g_autofree char *ho99_text = NULL;

	if (!run->healthy[a] || !run->healthy[b]) {
		nw_check_report_add(run->report, check, subject, NW_CHECK_SKIP, NULL, "%s's health "
		                    "check failed", run->healthy[a] ? dd->ref.id : pd->ref.id);
		return;
	}
	for (; done < n; done++) {
		struct nw_handoff_probe_options po = {
			.pool = run->pool, .prefill = pd, .decode = dd, .model = run->model,
			.handle = NW_HANDOFF_PROBE_HANDLE_BASE + run->next_handle++,
			.leg_timeout_s = timeout, .connect_timeout_s = cfg->engine.connect_timeout_s,
		};

		if (aggregate)
			nw_check_report_progress(run->report, "aggregate %s: sample %u of %u",
			                         pd->ref.id, done + 1, n);
		else
			nw_check_report_progress(run->report, "handoff %s -> %s: sample %u of %u",
			                         pd->ref.id, dd->ref.id, done + 1, n);
		w.done = false;
		nw_handoff_probe_start(&po, on_probe_done, &w);
		nw_check_wait(&w.done);
		if (!w.res.ok)
			break;
		first[done] = w.res.first_token_s;
		handoff[done] = w.res.handoff_s;
		prefill[done] = w.res.prefill_s;
	}
	m = json_pack("{s:I, s:I, s:f}", "samples", (json_int_t)n, "completed", (json_int_t)done,
	              "first_token_timeout_s", timeout);
	if (!aggregate) {
		json_object_set_new(m, "kv_lease_s", json_real(lease));
		if (cap > 0)
			json_object_set_new(m, "handoff_timeout_s", json_real(cap));
	}
	if (done > 0) {
		json_object_set_new(m, "first_token_s", distribution(first, done));
		if (!aggregate) {
			json_object_set_new(m, "handoff_s", distribution(handoff, done));
			json_object_set_new(m, "prefill_s", distribution(prefill, done));
		}
	}
	if (done < n) {
		json_object_set_new(m, "failure", json_pack("{s:I, s:s, s:I, s:b, s:s}",
		                    "sample", (json_int_t)done + 1,
		                    "stage", nw_handoff_probe_stage_name(w.res.stage),
		                    "status", (json_int_t)w.res.status, "timed_out", w.res.timed_out,
		                    "error", w.res.error));
		nw_check_report_add(run->report, check, subject, NW_CHECK_FAIL, m, "sample %u of %u "
		                    "failed at stage %s: %s; %s", done + 1, n,
		                    nw_handoff_probe_stage_name(w.res.stage), w.res.error,
		                    failure_hint(&w.res));
		return;
	}
	/* distribution() sorted the samples. */
	ft99 = percentile(first, n, 0.99);
	ho99 = percentile(handoff, n, 0.99);
	ft50_text = nw_check_seconds(percentile(first, n, 0.5));
	ft99_text = nw_check_seconds(ft99);
	ho99_text = nw_check_seconds(ho99);
	if (ft99 >= timeout)
		nw_check_report_add(run->report, check, subject, NW_CHECK_FAIL, m, "first-token p99 "
		                    "%s is not below engine.first_token_timeout_s (%g s): raise "
		                    "engine.first_token_timeout_s above %s", ft99_text, timeout,
		                    ft99_text);
	else if (!aggregate && ho99 > lease)
		nw_check_report_add(run->report, check, subject, NW_CHECK_FAIL, m, "handoff p99 %s "
		                    "exceeds %s's kv_lease_s (%g s): the engine may free the KV "
		                    "before %s takes it; raise the engine's KV lease and "
		                    "fleet.engines[%u].kv_lease_s, or find why handoffs are slow",
		                    ho99_text, pd->ref.id, lease, dd->ref.id, a);
	else if (!aggregate && cap > 0 && ho99 > cap)
		nw_check_report_add(run->report, check, subject, NW_CHECK_FAIL, m, "handoff p99 %s "
		                    "exceeds serving.handoff_timeout_s (%g s): requests would expire "
		                    "their handoffs; raise serving.handoff_timeout_s (keeping it below "
		                    "every kv_lease_s) or find why handoffs are slow", ho99_text, cap);
	else if (ft99 > HEADROOM_WARN * timeout)
		nw_check_report_add(run->report, check, subject, NW_CHECK_WARN, m, "first-token p99 "
		                    "%s is within %.0f%% of engine.first_token_timeout_s (%g s): "
		                    "consider raising it", ft99_text, 100 * (1 - HEADROOM_WARN),
		                    timeout);
	else if (aggregate)
		nw_check_report_add(run->report, check, subject, NW_CHECK_PASS, m, "%u sample%s: first "
		                    "token p50 %s, p99 %s (engine.first_token_timeout_s %g s)", n,
		                    n == 1 ? "" : "s", ft50_text, ft99_text, timeout);
	else
		nw_check_report_add(run->report, check, subject, NW_CHECK_PASS, m, "%u sample%s: first "
		                    "token p50 %s, p99 %s (engine.first_token_timeout_s %g s); handoff "
		                    "p99 %s (kv_lease_s %g s)", n, n == 1 ? "" : "s", ft50_text,
		                    ft99_text, timeout, ho99_text, lease);
}

void
nw_check_pairs(struct nw_check_run *run)
{
	const struct nw_fleet_dialects *f = run->fleet;

	for (uint32_t a = 0; a < f->n_engines; a++) {
		bool partnered = false;

		if (!nw_dialect_pairs(&f->dialects[a])) {
			check_pair(run, a, a);
			continue;
		}
		for (uint32_t b = 0; b < f->n_engines; b++) {
			if (b == a || !nw_dialect_compatible(&f->dialects[a], &f->dialects[b]))
				continue;
			partnered = true;
			check_pair(run, a, b);
		}
		if (!partnered)
			check_pair(run, a, a);
	}
}
