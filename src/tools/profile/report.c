#include "build-config.h"

#include "tools/profile/report.h"

#include <stdarg.h>
#include <string.h>

#include "tools/profile/run.h"

#define BAR_WIDTH 24

struct nw_prof_report {
	FILE *out;
	FILE *err;
	bool json;
	bool progress;
	bool shown;                 /* a progress line is on the terminal */
	double planned, done;
};

struct nw_prof_report *
nw_prof_report_new(FILE *out, FILE *err, bool json, bool progress)
{
	struct nw_prof_report *r = g_new0(struct nw_prof_report, 1);

	r->out = out;
	r->err = err;
	r->json = json;
	r->progress = progress;
	return r;
}

void
nw_prof_report_free(struct nw_prof_report *r)
{
	g_free(r);
}

static void
clear_line(struct nw_prof_report *r)
{
	if (!r->shown)
		return;
	fputs("\r\033[K", r->err);
	fflush(r->err);
	r->shown = false;
}

void
nw_prof_report_plan(struct nw_prof_report *r, double units)
{
	r->planned += units;
}

void
nw_prof_report_done(struct nw_prof_report *r, double units)
{
	r->done += units;
}

void
nw_prof_report_progress(struct nw_prof_report *r, const char *fmt, ...)
{
	double share = r->planned > 0 ? CLAMP(r->done / r->planned, 0.0, 1.0) : 0.0;
	int filled = (int)(share * BAR_WIDTH);
	char bar[BAR_WIDTH + 1];
	va_list ap;

	if (!r->progress)
		return;
	memset(bar, '#', (size_t)filled);
	memset(bar + filled, '-', (size_t)(BAR_WIDTH - filled));
	bar[BAR_WIDTH] = '\0';
	fprintf(r->err, "\r\033[K[%s] %3.0f%%  ", bar, 100 * share);
	va_start(ap, fmt);
	vfprintf(r->err, fmt, ap);
	va_end(ap);
	fflush(r->err);
	r->shown = true;
}

void
nw_prof_report_failed(struct nw_prof_report *r, const char *engine, const char *reason)
{
	clear_line(r);
	fprintf(r->err, "narwhal-profile: engine %s could not be profiled: %s\n", engine, reason);
	fflush(r->err);
}

void
nw_prof_report_note(struct nw_prof_report *r, const char *fmt, ...)
{
	va_list ap;

	clear_line(r);
	fputs("narwhal-profile: ", r->err);
	va_start(ap, fmt);
	vfprintf(r->err, fmt, ap);
	va_end(ap);
	fputc('\n', r->err);
	fflush(r->err);
}

/* --- the summary -------------------------------------------------------- */

static json_t *
stored_entry(const json_t *profiles, const char *engine)
{
	size_t i;
	json_t *e;

	json_array_foreach(json_object_get(profiles, "engines"), i, e)
		if (g_strcmp0(json_string_value(json_object_get(e, "engine")), engine) == 0)
			return e;
	return NULL;
}

/* What the fits rest on (beyond the spec): prefill [tokens, seconds],
 * decode [active, kv_tokens, seconds], handoff [tokens, seconds]. */
static json_t *
measurements(const struct nw_prof_engine *e)
{
	json_t *prefill = json_array(), *decode = json_array(), *handoff = json_array();

	for (guint i = 0; i < e->prefill->len; i++) {
		const struct nw_prefill_sample *s = &g_array_index(e->prefill, struct nw_prefill_sample, i);

		json_array_append_new(prefill, json_pack("[I, f]", (json_int_t)s->tokens, s->seconds));
	}
	for (guint i = 0; i < e->decode->len; i++) {
		const struct nw_decode_sample *s = &g_array_index(e->decode, struct nw_decode_sample, i);

		json_array_append_new(decode, json_pack("[I, I, f]", (json_int_t)s->active,
		                                        (json_int_t)s->kv_tokens, s->seconds));
	}
	for (guint i = 0; i < e->handoff->len; i++) {
		const struct nw_prof_handoff_sample *s =
			&g_array_index(e->handoff, struct nw_prof_handoff_sample, i);

		json_array_append_new(handoff, json_pack("[I, f]", (json_int_t)s->tokens, s->seconds));
	}
	return json_pack("{s:o, s:o, s:o}", "prefill", prefill, "decode", decode, "handoff", handoff);
}

static void
finish_json(struct nw_prof_report *r, const struct nw_prof_run *run,
            const struct nw_prof_outcome *o)
{
	json_t *engines = json_array();
	json_t *kept = json_array();
	json_t *doc;

	for (uint32_t i = 0; i < run->n_engines; i++) {
		const struct nw_prof_engine *e = &run->engines[i];
		json_t *stored = o->profiles != NULL ? stored_entry(o->profiles, e->d->ref.id) : NULL;
		json_t *item;

		if (!e->selected)
			continue;
		if (e->error == NULL && stored != NULL) {
			item = json_deep_copy(stored);
			json_object_set_new(item, "status", json_string("profiled"));
		} else {
			item = json_pack("{s:s, s:s, s:s, s:s}", "engine", e->d->ref.id,
			                 "url", e->d->ref.url, "status", "failed",
			                 "error", e->error != NULL ? e->error : "not written");
		}
		json_object_set_new(item, "measurements", measurements(e));
		json_array_append_new(engines, item);
	}
	for (guint i = 0; o->kept != NULL && i < o->kept->len; i++)
		json_array_append_new(kept, json_string(g_ptr_array_index(o->kept, i)));
	doc = json_pack("{s:s, s:s, s:b, s:b, s:f, s:o, s:o}", "config", o->config,
	                "store", o->store, "written", o->written, "quick", run->opts->quick,
	                "duration_s", o->seconds, "engines", engines, "kept", kept);
	json_dumpf(doc, r->out, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
	fputc('\n', r->out);
	json_decref(doc);
}

static void
print_engine(struct nw_prof_report *r, const struct nw_prof_engine *e)
{
	const struct nw_prefill_profile *p = &e->fit_prefill;
	const struct nw_decode_profile *d = &e->fit_decode;
	const struct nw_handoff_profile *h = &e->fit_handoff;

	fprintf(r->out, "%s  %s  %s  %s\n", e->d->ref.id, e->d->name, e->model, e->d->ref.url);
	fprintf(r->out, "  prefill  a %.4g ms  b %.4g ms/token  c %.4g ms/token^2  "
	        "tokens %" G_GUINT64_FORMAT "..%" G_GUINT64_FORMAT "  %u samples  "
	        "rms error %.2f%%\n", p->a_s * 1e3, p->b_s * 1e3, p->c_s * 1e3, p->min_tokens,
	        p->max_tokens, p->samples, 100 * p->rel_rms_error);
	fprintf(r->out, "  decode   d0 %.4g ms  d1 %.4g ms/token  d2 %.4g ms/request  "
	        "active %u..%u  kv %" G_GUINT64_FORMAT "..%" G_GUINT64_FORMAT "  %u samples  "
	        "rms error %.2f%%\n", d->d0_s * 1e3, d->d1_s * 1e3, d->d2_s * 1e3, d->min_active,
	        d->max_active, d->min_kv_tokens, d->max_kv_tokens, d->samples,
	        100 * d->rel_rms_error);
	if (h->samples > 0)
		fprintf(r->out, "  handoff  setup %.4g ms  %.4g ms/token  tokens up to %" G_GUINT64_FORMAT
		        "  %u samples\n", h->setup_s * 1e3, h->per_token_s * 1e3, h->max_tokens,
		        h->samples);
	else
		fprintf(r->out, "  handoff  not measured (the engine does not hand off)\n");
	if (e->kv_capacity > 0)
		fprintf(r->out, "  kv capacity about %" G_GUINT64_FORMAT " tokens (from its KV usage)\n",
		        e->kv_capacity);
}

static void
finish_text(struct nw_prof_report *r, const struct nw_prof_run *run,
            const struct nw_prof_outcome *o)
{
	unsigned profiled = 0;

	for (uint32_t i = 0; i < run->n_engines; i++) {
		const struct nw_prof_engine *e = &run->engines[i];

		if (!e->selected)
			continue;
		if (e->error != NULL) {
			fprintf(r->out, "%s  %s  FAILED: %s\n", e->d->ref.id, e->d->ref.url, e->error);
			continue;
		}
		print_engine(r, e);
		profiled++;
	}
	if (o->written)
		fprintf(r->out, "wrote %u profile(s) to %s (kept %u other entr%s) in %.1f s\n",
		        profiled, o->store, o->kept != NULL ? o->kept->len : 0,
		        o->kept != NULL && o->kept->len == 1 ? "y" : "ies", o->seconds);
	else
		fprintf(r->out, "nothing written to %s in %.1f s\n", o->store, o->seconds);
}

void
nw_prof_report_finish(struct nw_prof_report *r, const struct nw_prof_run *run,
                      const struct nw_prof_outcome *o)
{
	clear_line(r);
	if (r->json)
		finish_json(r, run, o);
	else
		finish_text(r, run, o);
	fflush(r->out);
}
