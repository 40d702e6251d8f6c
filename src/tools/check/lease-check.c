/*
 * Lease release (docs/check.md, "Lease checks"; spec 4.2: "Verify
 * separately that abandoned handoffs are released by the backend when the
 * lease expires"). On every engine that hands off sequentially, at once:
 * read its KV use through the dialect's metrics (ABI 2.1), start a prefill
 * whose handoff nobody collects, see the KV use rise, then poll until it is
 * back at the baseline (pass) or the engine's kv_lease_s and a margin have
 * passed (fail).
 */
#include "build-config.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "control/handoff-probe.h"
#include "tools/check/checks.h"

/* The wait after the lease: a quarter of it, at least this long. */
#define MARGIN_MIN_S 1.0
#define MARGIN_SHARE 0.25
/* A release this early says the engine's lease is shorter than configured. */
#define EARLY_SHARE 0.5
/* A prompt long enough to hold KV blocks that the engine's KV use shows. */
#define LEASE_PROMPT_WORDS 200

struct lease_job {
	struct nw_check_run *run;
	uint32_t engine;
	const struct nw_dialect *d;
	double lease_s;
	double poll_s;
	double baseline;
	double held;               /* KV use with the handoff held */
	int64_t lease_from_us;     /* the prefill answered: the lease runs */
	int64_t deadline_us;
	unsigned *outstanding;
};

static void G_GNUC_PRINTF(3, 4)
job_end(struct lease_job *job, nw_check_verdict verdict, const char *fmt, ...)
{
	va_list ap;
	g_autofree char *reason = NULL;
	json_t *m = json_pack("{s:f}", "kv_lease_s", job->lease_s);

	va_start(ap, fmt);
	reason = g_strdup_vprintf(fmt, ap);
	va_end(ap);
	if (!isnan(job->baseline))
		json_object_set_new(m, "kv_usage_baseline", json_real(job->baseline));
	if (!isnan(job->held))
		json_object_set_new(m, "kv_usage_held", json_real(job->held));
	if (job->lease_from_us > 0 && verdict != NW_CHECK_SKIP)
		json_object_set_new(m, "waited_s", json_real((double)(g_get_monotonic_time() -
		                                                      job->lease_from_us) / 1e6));
	nw_check_report_add(job->run->report, "lease", nw_check_engine_subject(job->d), verdict, m,
	                    "%s", reason);
	(*job->outstanding)--;
}

/* --- reading the engine's metrics ---------------------------------------- */

typedef void (*metrics_fn)(struct lease_job *job, double kv_usage);

struct metrics_read {
	struct lease_job *job;
	metrics_fn fn;
};

static void
metrics_answered(void *data, const struct nw_dialect_answer *a)
{
	struct metrics_read *mr = data;
	struct lease_job *job = mr->job;
	metrics_fn fn = mr->fn;
	const struct nw_dialect *d = job->d;
	struct narwhal_engine_metrics m = {
		.struct_size = sizeof m, .running = -1, .waiting = -1, .kv_usage = NAN,
		.start_time_s = NAN,
	};

	g_free(mr);
	if (a->code != NW_UPSTREAM_OK || a->status < 200 || a->status >= 300) {
		g_autofree char *problem = nw_dialect_answer_problem(d, a, "engine.health_timeout_s",
		                                                     job->run->cfg->engine.health_timeout_s);

		job_end(job, NW_CHECK_FAIL, "the engine's metrics failed: %s", problem);
		return;
	}
	if (d->ops->parse_metrics(d->ctx, a->body->str, a->body->len, &m) != 0) {
		job_end(job, NW_CHECK_FAIL, "dialect %s cannot read the engine's metrics: is %s the "
		        "engine the dialect is for?", d->name, d->ref.url);
		return;
	}
	if (isnan(m.kv_usage)) {
		job_end(job, NW_CHECK_SKIP, "the engine's metrics give no KV cache use: verify on "
		        "the engine that abandoned handoffs are freed when their lease expires");
		return;
	}
	fn(job, m.kv_usage);
}

static void
read_metrics(struct lease_job *job, metrics_fn fn)
{
	const struct nw_dialect *d = job->d;
	struct narwhal_http_call call = { .struct_size = sizeof call };
	struct metrics_read *mr;
	int rc = d->ops->build_metrics(d->ctx, &d->ref, &call);

	if (rc == 0 && (call.path == NULL || call.path[0] != '/'))
		rc = -EINVAL;
	if (rc != 0) {
		json_decref(call.body);
		job_end(job, NW_CHECK_FAIL, "dialect %s: build_metrics failed (%s): fix the dialect "
		        "plugin", d->name, g_strerror(-rc));
		return;
	}
	mr = g_new0(struct metrics_read, 1);
	mr->job = job;
	mr->fn = fn;
	nw_check_call(job->run, d, &call, job->run->cfg->engine.health_timeout_s,
	              metrics_answered, mr);
}

/* --- the steps ------------------------------------------------------------ */

static void polled(struct lease_job *job, double kv_usage);

static gboolean
on_poll_timer(gpointer data)
{
	read_metrics(data, polled);
	return G_SOURCE_REMOVE;
}

static void
poll_later(struct lease_job *job)
{
	int64_t now = g_get_monotonic_time();
	int64_t at = MIN(now + (int64_t)(job->poll_s * 1e6), job->deadline_us);

	g_timeout_add((guint)MAX(1, (at - now + 999) / 1000), on_poll_timer, job);
}

static void
polled(struct lease_job *job, double kv_usage)
{
	double after = (double)(g_get_monotonic_time() - job->lease_from_us) / 1e6;
	g_autofree char *after_text = nw_check_seconds(after);

	if (kv_usage <= job->baseline) {
		double handoff_timeout = job->run->cfg->serving.handoff_timeout_s;

		/* Spec 4.2: a handoff may wait up to serving.handoff_timeout_s
		 * for its decode leg, so the engine must keep it at least that
		 * long. */
		if (handoff_timeout > 0 && after < handoff_timeout)
			job_end(job, NW_CHECK_FAIL, "released the abandoned handoff after %s, before "
			        "serving.handoff_timeout_s (%g s): a handoff may be gone before its "
			        "decode leg starts; lower serving.handoff_timeout_s below the engine's "
			        "real lease, or lengthen the engine's lease", after_text,
			        handoff_timeout);
		else if (after < EARLY_SHARE * job->lease_s)
			job_end(job, NW_CHECK_WARN, "released the abandoned handoff after %s, well "
			        "before kv_lease_s (%g s): the engine's lease may be shorter than "
			        "fleet.engines[%u].kv_lease_s says; set it to the engine's real lease",
			        after_text, job->lease_s, job->engine);
		else
			job_end(job, NW_CHECK_PASS, "released the abandoned handoff after %s "
			        "(kv_lease_s %g s)", after_text, job->lease_s);
		return;
	}
	if (g_get_monotonic_time() >= job->deadline_us) {
		job_end(job, NW_CHECK_FAIL, "the engine did not release an abandoned handoff within "
		        "its lease: KV use still %.4g after %s (baseline %.4g, kv_lease_s %g s); "
		        "check the engine's own KV lease setting and "
		        "fleet.engines[%u].kv_lease_s", kv_usage, after_text, job->baseline,
		        job->lease_s, job->engine);
		return;
	}
	poll_later(job);
}

static void
held(struct lease_job *job, double kv_usage)
{
	job->held = kv_usage;
	if (kv_usage <= job->baseline) {
		job_end(job, NW_CHECK_WARN, "KV use did not rise with an abandoned handoff held "
		        "(%.4g, baseline %.4g): the engine's metrics cannot show its release; verify "
		        "it on the engine", kv_usage, job->baseline);
		return;
	}
	poll_later(job);
}

static void
abandoned(void *data, const struct nw_handoff_probe_result *res)
{
	struct lease_job *job = data;
	double margin = MAX(MARGIN_MIN_S, MARGIN_SHARE * job->lease_s);

	if (!res->ok) {
		job_end(job, NW_CHECK_FAIL, "could not make a handoff to abandon: stage %s: %s",
		        nw_handoff_probe_stage_name(res->stage), res->error);
		return;
	}
	job->lease_from_us = g_get_monotonic_time();
	job->deadline_us = job->lease_from_us + (int64_t)((job->lease_s + margin) * 1e6);
	read_metrics(job, held);
}

static void
baseline_read(struct lease_job *job, double kv_usage)
{
	struct nw_check_run *run = job->run;
	g_autoptr(GString) prompt = g_string_new(NULL);
	struct nw_handoff_probe_options po = {
		.pool = run->pool, .prefill = job->d, .decode = job->d, .model = run->model,
		.handle = NW_HANDOFF_PROBE_HANDLE_BASE + run->next_handle++,
		.leg_timeout_s = run->cfg->engine.first_token_timeout_s,
		.connect_timeout_s = run->cfg->engine.connect_timeout_s,
		.abandon = true,
	};

	job->baseline = kv_usage;
	for (unsigned i = 0; i < LEASE_PROMPT_WORDS; i++)
		g_string_append(prompt, i % 7 == 0 ? "lease " : "check ");
	po.prompt = prompt->str;
	nw_handoff_probe_start(&po, abandoned, job);
}

void
nw_check_leases(struct nw_check_run *run)
{
	const struct nw_fleet_dialects *f = run->fleet;
	g_autofree struct lease_job *jobs = g_new0(struct lease_job, MAX(f->n_engines, 1));
	unsigned outstanding = 0;
	int64_t started = g_get_monotonic_time();

	for (uint32_t i = 0; i < f->n_engines; i++) {
		struct lease_job *job = &jobs[i];
		const struct nw_dialect *d = &f->dialects[i];
		double lease = run->cfg->fleet.engines[i].kv_lease_s;
		double margin = MAX(MARGIN_MIN_S, MARGIN_SHARE * lease);

		job->run = run;
		job->engine = i;
		job->d = d;
		job->lease_s = lease;
		job->poll_s = MIN(1.0, MAX(0.05, lease / 20));
		job->baseline = job->held = NAN;
		job->outstanding = &outstanding;
		outstanding++;
		if (!nw_dialect_pairs(d))
			job_end(job, NW_CHECK_SKIP, "the engine hands off no KV (aggregate-only)");
		else if (nw_dialect_concurrent(d))
			job_end(job, NW_CHECK_SKIP, "dialect %s hands off concurrently: there is no "
			        "prefill answer to abandon; verify lease release on the engine", d->name);
		else if (d->ops->build_metrics == NULL)
			job_end(job, NW_CHECK_SKIP, "dialect %s cannot read the engine's metrics: verify "
			        "on the engine that abandoned handoffs are freed when their lease "
			        "expires", d->name);
		else if (!run->healthy[i])
			job_end(job, NW_CHECK_SKIP, "the engine's health check failed");
		else if (lease + margin > run->opts->lease_wait_s)
			job_end(job, NW_CHECK_SKIP, "kv_lease_s (%g s) and a margin of %g s are longer "
			        "than --lease-wait-s (%g s): raise --lease-wait-s to check", lease,
			        margin, run->opts->lease_wait_s);
		else
			read_metrics(job, baseline_read);
	}
	while (outstanding > 0) {
		nw_check_report_progress(run->report, "lease: %u engine(s) holding an abandoned "
		                         "handoff (%.0f s)", outstanding,
		                         (double)(g_get_monotonic_time() - started) / 1e6);
		g_main_context_iteration(NULL, TRUE);
	}
}
