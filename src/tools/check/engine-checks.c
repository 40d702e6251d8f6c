/*
 * Each engine on its own (docs/check.md, "Engine checks"): its health
 * probe under engine.health_timeout_s (spec 6), the model it serves (every
 * engine must serve the same one, and fleet.model when that is set), and
 * its tokenise call under engine.tokenize_timeout_s. Each kind runs on
 * every engine at once; the records follow in fleet order.
 */
#include "build-config.h"

#include <errno.h>
#include <string.h>

#include "tools/check/checks.h"

#define TOKENIZE_PROMPT "How many tokens does the engine count in this sentence?"

/* One engine's outcome of one kind of check, reported in fleet order. */
struct outcome {
	nw_check_verdict verdict;
	char *reason;
	json_t *measurements;
	/* models */
	bool model_known;
	struct narwhal_model_info info;
};

/* One kind of check over the fleet: the engines still out, and theirs. */
struct phase {
	struct nw_check_run *run;
	const char *check;
	unsigned outstanding;
	bool done;
	struct outcome *outcomes;
};

struct job {
	struct phase *ph;
	uint32_t engine;
};

static void G_GNUC_PRINTF(4, 5)
set_outcome(struct phase *ph, uint32_t i, nw_check_verdict verdict, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	ph->outcomes[i].verdict = verdict;
	g_free(ph->outcomes[i].reason);
	ph->outcomes[i].reason = g_strdup_vprintf(fmt, ap);
	va_end(ap);
}

static void
phase_init(struct phase *ph, struct nw_check_run *run, const char *check)
{
	memset(ph, 0, sizeof *ph);
	ph->run = run;
	ph->check = check;
	ph->outcomes = g_new0(struct outcome, MAX(run->fleet->n_engines, 1));
}

static void
job_done(struct job *job)
{
	struct phase *ph = job->ph;

	g_free(job);
	if (--ph->outstanding == 0)
		ph->done = true;
	else
		nw_check_report_progress(ph->run->report, "%s: %u engine(s) still to answer",
		                         ph->check, ph->outstanding);
}

/* Send what a builder made for engine i (the job's end comes with the
 * answer), or record the builder's failure. */
static void
send_job(struct phase *ph, uint32_t i, const char *slot, int rc, struct narwhal_http_call *call,
         double timeout_s, nw_dialect_answer_fn fn)
{
	const struct nw_dialect *d = &ph->run->fleet->dialects[i];
	struct job *job;

	if (rc == 0 && (call->path == NULL || call->path[0] != '/'))
		rc = -EINVAL;
	if (rc != 0) {
		json_decref(call->body);
		set_outcome(ph, i, NW_CHECK_FAIL, "dialect %s: %s failed (%s): fix the dialect "
		            "plugin", d->name, slot, g_strerror(-rc));
		return;
	}
	job = g_new0(struct job, 1);
	job->ph = ph;
	job->engine = i;
	ph->outstanding++;
	nw_check_call(ph->run, d, call, timeout_s, fn, job);
}

/* Wait for every job, then report in fleet order. */
static void
phase_finish(struct phase *ph)
{
	struct nw_check_run *run = ph->run;

	ph->done = ph->outstanding == 0;
	nw_check_wait(&ph->done);
	for (uint32_t i = 0; i < run->fleet->n_engines; i++) {
		struct outcome *o = &ph->outcomes[i];

		nw_check_report_add(run->report, ph->check,
		                    nw_check_engine_subject(&run->fleet->dialects[i]), o->verdict,
		                    o->measurements, "%s", o->reason);
		g_free(o->reason);
	}
	g_free(ph->outcomes);
}

static bool
answered_2xx(const struct nw_dialect_answer *a)
{
	return a->code == NW_UPSTREAM_OK && a->status >= 200 && a->status < 300;
}

/* --- health ------------------------------------------------------------ */

static void
health_answered(void *data, const struct nw_dialect_answer *a)
{
	struct job *job = data;
	struct phase *ph = job->ph;
	const struct nw_config *cfg = ph->run->cfg;
	uint32_t i = job->engine;
	g_autofree char *took = nw_check_seconds(a->seconds);

	ph->outcomes[i].measurements = json_pack("{s:I, s:f}", "status", (json_int_t)a->status,
	                                         "seconds", a->seconds);
	if (answered_2xx(a)) {
		ph->run->healthy[i] = true;
		set_outcome(ph, i, NW_CHECK_PASS, "answered HTTP %ld in %s", a->status, took);
	} else {
		g_autofree char *problem = nw_dialect_answer_problem(&ph->run->fleet->dialects[i], a,
		                                                     "engine.health_timeout_s",
		                                                     cfg->engine.health_timeout_s);

		set_outcome(ph, i, NW_CHECK_FAIL, "%s: start the engine or fix its address in "
		            "fleet.engines[%u].url; its other checks are skipped", problem, i);
	}
	job_done(job);
}

static void
check_health(struct nw_check_run *run)
{
	struct phase ph;

	phase_init(&ph, run, "health");
	for (uint32_t i = 0; i < run->fleet->n_engines; i++) {
		const struct nw_dialect *d = &run->fleet->dialects[i];
		struct narwhal_http_call call = { .struct_size = sizeof call };
		int rc = d->ops->build_health(d->ctx, &d->ref, &call);

		send_job(&ph, i, "build_health", rc, &call, run->cfg->engine.health_timeout_s,
		         health_answered);
	}
	phase_finish(&ph);
}

/* --- served model ------------------------------------------------------ */

static void
models_answered(void *data, const struct nw_dialect_answer *a)
{
	struct job *job = data;
	struct phase *ph = job->ph;
	uint32_t i = job->engine;
	const struct nw_dialect *d = &ph->run->fleet->dialects[i];
	struct outcome *o = &ph->outcomes[i];
	json_t *doc = answered_2xx(a) ? json_loadb(a->body->str, a->body->len, 0, NULL) : NULL;
	int rc;

	o->info = (struct narwhal_model_info){ .struct_size = sizeof o->info, .max_model_len = -1 };
	if (!answered_2xx(a)) {
		g_autofree char *problem = nw_dialect_answer_problem(d, a, "engine.health_timeout_s",
		                                                     ph->run->cfg->engine.health_timeout_s);

		set_outcome(ph, i, NW_CHECK_FAIL, "the model list failed: %s", problem);
	} else if (doc == NULL || (rc = d->ops->parse_models(d->ctx, doc, &o->info)) != 0 ||
	           o->info.name[0] == '\0') {
		set_outcome(ph, i, NW_CHECK_FAIL, "dialect %s cannot read the engine's model list: "
		            "is %s the engine the dialect is for?", d->name, d->ref.url);
	} else {
		o->info.name[sizeof o->info.name - 1] = '\0';
		o->model_known = true;
	}
	json_decref(doc);
	job_done(job);
}

/* The model every engine must serve: fleet.model when set, else the name
 * most engines answered (the first in fleet order on a tie). */
static const char *
reference_model(const struct nw_check_run *run, const struct phase *ph)
{
	const char *best = NULL;
	unsigned best_n = 0;

	if (run->cfg->fleet.model != NULL)
		return run->cfg->fleet.model;
	for (uint32_t i = 0; i < run->fleet->n_engines; i++) {
		unsigned n = 0;

		if (!ph->outcomes[i].model_known)
			continue;
		for (uint32_t j = 0; j < run->fleet->n_engines; j++)
			n += ph->outcomes[j].model_known &&
			     strcmp(ph->outcomes[j].info.name, ph->outcomes[i].info.name) == 0;
		if (n > best_n) {
			best = ph->outcomes[i].info.name;
			best_n = n;
		}
	}
	return best;
}

static void
check_models(struct nw_check_run *run)
{
	struct phase ph;
	const char *ref;

	phase_init(&ph, run, "model");
	for (uint32_t i = 0; i < run->fleet->n_engines; i++) {
		const struct nw_dialect *d = &run->fleet->dialects[i];
		struct narwhal_http_call call = { .struct_size = sizeof call };

		if (!run->healthy[i]) {
			set_outcome(&ph, i, NW_CHECK_SKIP, "the engine's health check failed");
			continue;
		}
		if (d->ops->build_models == NULL) {
			set_outcome(&ph, i, NW_CHECK_SKIP, "dialect %s cannot ask the engine for its "
			            "model: set fleet.model to the model the engines serve", d->name);
			continue;
		}
		send_job(&ph, i, "build_models", d->ops->build_models(d->ctx, &d->ref, &call), &call,
		         run->cfg->engine.health_timeout_s, models_answered);
	}
	ph.done = ph.outstanding == 0;
	nw_check_wait(&ph.done);
	ref = reference_model(run, &ph);
	run->model = g_strdup(ref);
	for (uint32_t i = 0; i < run->fleet->n_engines; i++) {
		struct outcome *o = &ph.outcomes[i];

		if (!o->model_known)
			continue;
		o->measurements = json_pack("{s:s, s:I}", "model", o->info.name, "max_model_len",
		                            (json_int_t)o->info.max_model_len);
		if (run->cfg->fleet.model != NULL && strcmp(o->info.name, ref) != 0)
			set_outcome(&ph, i, NW_CHECK_FAIL, "serves \"%s\", but fleet.model is \"%s\": "
			            "set fleet.model to the served model or load it on the engine",
			            o->info.name, ref);
		else if (strcmp(o->info.name, ref) != 0)
			set_outcome(&ph, i, NW_CHECK_FAIL, "serves \"%s\", but most engines serve "
			            "\"%s\": every engine must serve the same model", o->info.name, ref);
		else if (o->info.max_model_len > 0)
			set_outcome(&ph, i, NW_CHECK_PASS, "serves \"%s\" (max_model_len %" G_GINT64_FORMAT
			            ")", o->info.name, o->info.max_model_len);
		else
			set_outcome(&ph, i, NW_CHECK_PASS, "serves \"%s\"", o->info.name);
	}
	phase_finish(&ph);
}

/* --- tokenise ---------------------------------------------------------- */

static void
tokenize_answered(void *data, const struct nw_dialect_answer *a)
{
	struct job *job = data;
	struct phase *ph = job->ph;
	uint32_t i = job->engine;
	const struct nw_dialect *d = &ph->run->fleet->dialects[i];
	json_t *doc = answered_2xx(a) ? json_loadb(a->body->str, a->body->len, 0, NULL) : NULL;
	uint64_t count = 0;
	g_autofree char *took = nw_check_seconds(a->seconds);

	if (!answered_2xx(a)) {
		g_autofree char *problem = nw_dialect_answer_problem(d, a, "engine.tokenize_timeout_s",
		                                                     ph->run->cfg->engine.tokenize_timeout_s);

		set_outcome(ph, i, NW_CHECK_FAIL, "%s: requests fall back to engine.chars_per_token "
		            "sizing; fix the engine's tokeniser or set engine.tokenize to false",
		            problem);
	} else if (doc == NULL || d->ops->parse_tokenize(d->ctx, doc, &count) != 0) {
		set_outcome(ph, i, NW_CHECK_FAIL, "dialect %s cannot read the engine's token count: "
		            "requests fall back to engine.chars_per_token sizing", d->name);
	} else {
		ph->outcomes[i].measurements = json_pack("{s:I, s:f}", "tokens", (json_int_t)count,
		                                         "seconds", a->seconds);
		set_outcome(ph, i, NW_CHECK_PASS, "counted %" G_GUINT64_FORMAT " tokens in %s "
		            "(engine.tokenize_timeout_s %g s)", count, took,
		            ph->run->cfg->engine.tokenize_timeout_s);
	}
	json_decref(doc);
	job_done(job);
}

static void
check_tokenize(struct nw_check_run *run)
{
	struct phase ph;
	json_t *body = json_pack("{s:s}", "prompt", TOKENIZE_PROMPT);

	if (run->model != NULL)
		json_object_set_new(body, "model", json_string(run->model));
	phase_init(&ph, run, "tokenize");
	for (uint32_t i = 0; i < run->fleet->n_engines; i++) {
		const struct nw_dialect *d = &run->fleet->dialects[i];
		struct narwhal_http_call call = { .struct_size = sizeof call };
		struct narwhal_dialect_target target = {
			.struct_size = sizeof target, .request = run->next_handle,
			.request_id = "narwhal-check-tokenize", .route = NARWHAL_ROUTE_COMPLETIONS,
			.client_body = body, .engine = &d->ref,
		};
		int rc;

		if (!run->cfg->engine.tokenize) {
			set_outcome(&ph, i, NW_CHECK_SKIP, "engine.tokenize is false: requests are sized "
			            "by engine.chars_per_token");
			continue;
		}
		if (d->ops->build_tokenize == NULL) {
			set_outcome(&ph, i, NW_CHECK_SKIP, "dialect %s cannot count tokens: requests to "
			            "it are sized by engine.chars_per_token", d->name);
			continue;
		}
		if (!run->healthy[i]) {
			set_outcome(&ph, i, NW_CHECK_SKIP, "the engine's health check failed");
			continue;
		}
		rc = d->ops->build_tokenize(d->ctx, &target, &call);
		if (rc == -ENOTSUP || rc == -EALREADY) {
			json_decref(call.body);
			set_outcome(&ph, i, NW_CHECK_SKIP, "dialect %s counts this prompt without the "
			            "engine", d->name);
			continue;
		}
		send_job(&ph, i, "build_tokenize", rc, &call, run->cfg->engine.tokenize_timeout_s,
		         tokenize_answered);
	}
	phase_finish(&ph);
	json_decref(body);
}

void
nw_check_engines(struct nw_check_run *run)
{
	check_health(run);
	check_models(run);
	check_tokenize(run);
}
