/*
 * The engines of a run: what each one serves and how long a context it
 * takes (build_models with parse_models, under engine.health_timeout_s),
 * asked of every engine at once; the decode engine each engine's handoffs
 * go to; and the store entry of an engine once it is measured.
 */
#include "build-config.h"

#include <errno.h>
#include <string.h>

#include "tools/profile/run.h"

struct ask {
	struct nw_prof_run *run;
	struct nw_prof_engine *e;
	unsigned *outstanding;
	bool *done;
	bool *answered;
};

static void
ask_done(struct ask *q)
{
	if (--*q->outstanding == 0)
		*q->done = true;
	g_free(q);
}

static void
models_answered(void *data, const struct nw_dialect_answer *a)
{
	struct ask *q = data;
	struct nw_prof_engine *e = q->e;
	const struct nw_dialect *d = e->d;
	struct narwhal_model_info info = {
		.struct_size = sizeof info, .max_model_len = -1,
	};
	json_t *doc = nw_prof_answered_2xx(a) ? json_loadb(a->body->str, a->body->len, 0, NULL)
	                                      : NULL;

	if (!nw_prof_answered_2xx(a)) {
		g_autofree char *problem = nw_dialect_answer_problem(d, a, "engine.health_timeout_s",
		                                                     q->run->cfg->engine.health_timeout_s);

		nw_prof_fail(e, "its model list: %s: start the engine or fix its address in "
		             "fleet.engines[%u].url", problem, e->index);
	} else if (doc == NULL || d->ops->parse_models(d->ctx, doc, &info) != 0 ||
	           info.name[0] == '\0') {
		nw_prof_fail(e, "dialect %s cannot read the engine's model list: is %s the engine "
		             "the dialect is for?", d->name, d->ref.url);
	} else {
		info.name[sizeof info.name - 1] = '\0';
		g_free(e->model);
		e->model = g_strdup(info.name);
		e->max_model_len = info.max_model_len;
		q->answered[e->index] = true;
	}
	json_decref(doc);
	ask_done(q);
}

/* The decode engine for e's handoffs: the next engine after it in fleet
 * order that answered and can take its handoff, else itself. */
static int
choose_partner(const struct nw_prof_run *run, const struct nw_prof_engine *e,
               const bool *answered)
{
	if (!nw_dialect_pairs(e->d))
		return -1;
	for (uint32_t k = 1; k < run->n_engines; k++) {
		uint32_t j = (e->index + k) % run->n_engines;

		if (answered[j] && nw_dialect_compatible(e->d, run->engines[j].d))
			return (int)j;
	}
	return (int)e->index;
}

void
nw_prof_discover(struct nw_prof_run *run)
{
	const struct nw_config *cfg = run->cfg;
	g_autofree bool *answered = g_new0(bool, MAX(run->n_engines, 1));
	unsigned outstanding = 0;
	bool done = false;

	/* Every engine is asked, selected or not: an engine not profiled may
	 * still take the handoffs of one that is. */
	for (uint32_t i = 0; i < run->n_engines; i++) {
		struct nw_prof_engine *e = &run->engines[i];
		const struct nw_dialect *d = e->d;
		struct narwhal_http_call call = { .struct_size = sizeof call };
		struct ask *q;
		int rc;

		if (d->ops->build_tokenize == NULL || d->ops->parse_tokenize == NULL) {
			nw_prof_fail(e, "dialect %s cannot count tokens: narwhal-profile needs the "
			             "engine's token count to make prompts of exact lengths", d->name);
			continue;
		}
		if (d->ops->build_models == NULL || d->ops->parse_models == NULL) {
			if (cfg->fleet.model == NULL) {
				nw_prof_fail(e, "dialect %s cannot ask the engine for its model: set "
				             "fleet.model to the model the engines serve", d->name);
				continue;
			}
			e->model = g_strdup(cfg->fleet.model);
			answered[i] = true;
			continue;
		}
		rc = d->ops->build_models(d->ctx, &d->ref, &call);
		if (rc == 0 && (call.path == NULL || call.path[0] != '/'))
			rc = -EINVAL;
		if (rc != 0) {
			json_decref(call.body);
			nw_prof_fail(e, "dialect %s: build_models failed (%s)", d->name, g_strerror(-rc));
			continue;
		}
		q = g_new0(struct ask, 1);
		*q = (struct ask){ run, e, &outstanding, &done, answered };
		if (nw_prof_call(run, d, &call, cfg->engine.health_timeout_s, models_answered,
		                 q) == NULL) {
			nw_prof_fail(e, "its model list: the call could not start");
			g_free(q);
			continue;
		}
		outstanding++;
	}
	done = outstanding == 0;
	nw_prof_report_progress(run->report, "asking %u engine(s) what they serve",
	                        run->n_engines);
	nw_prof_wait(&done);
	for (uint32_t i = 0; i < run->n_engines; i++)
		run->engines[i].partner = choose_partner(run, &run->engines[i], answered);
}

struct nw_engine_profile *
nw_prof_engine_profile(const struct nw_prof_engine *e)
{
	struct nw_engine_profile *p = g_new0(struct nw_engine_profile, 1);

	p->engine = g_strdup(e->d->ref.id);
	p->url = g_strdup(e->d->ref.url);
	p->dialect = g_strdup(e->d->name);
	p->model = g_strdup(e->model);
	/* No dialect says what hardware its engine runs on (plugin ABI 2.1). */
	p->hardware = NULL;
	p->kv_capacity_tokens = e->kv_capacity;
	p->measured_at = g_strdup(e->measured_at);
	p->prefill = e->fit_prefill;
	p->decode = e->fit_decode;
	p->handoff = e->fit_handoff;
	return p;
}
