#include "build-config.h"

#include "tools/replay/report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void
rp_report_summarize(struct rp_report *rep, struct rp_report_run *rr)
{
	rp_summary_clear(&rr->summary);
	rp_summary_compute(rr->run.results, rr->run.n, rr->schedule.span, &rep->slo, &rr->summary);
}

/* --- JSON ----------------------------------------------------------- */

static json_t *
num(double v)
{
	return isfinite(v) ? json_real(v) : json_null();
}

static json_t *
latency_json(const struct rp_latency *l)
{
	return json_pack("{s:I, s:o, s:o, s:o, s:o, s:o}", "n", (json_int_t)l->n,
	                 "mean", num(l->mean), "p50", num(l->p50), "p90", num(l->p90),
	                 "p99", num(l->p99), "max", num(l->max));
}

static json_t *
slo_json(const struct rp_report *rep, const struct rp_summary *s)
{
	if (!s->slo_set)
		return json_null();
	return json_pack("{s:I, s:o, s:o, s:o, s:o}", "met", (json_int_t)s->met,
	                 "attainment", num(s->attainment),
	                 "attainment_ttft", num(s->attainment_ttft),
	                 "attainment_tpot", num(s->attainment_tpot),
	                 "goodput_rps", num(s->goodput));
}

/* Per-phase latency and attainment, for synthetic phase mixes. */
static json_t *
phases_json(const struct rp_report *rep, const struct rp_report_run *rr)
{
	json_t *arr = json_array();
	struct rp_result *sub = g_new(struct rp_result, MAX(rr->run.n, 1));

	for (guint p = 0; p < rep->phase_names->len; p++) {
		struct rp_summary s;
		size_t k = 0;

		for (size_t i = 0; i < rr->run.n; i++)
			if (rr->run.results[i].phase == p)
				sub[k++] = rr->run.results[i];
		rp_summary_compute(sub, k, 0, &rep->slo, &s);
		json_array_append_new(arr, json_pack(
			"{s:s, s:I, s:I, s:I, s:o, s:o, s:o}",
			"name", (const char *)g_ptr_array_index(rep->phase_names, p),
			"requests", (json_int_t)s.scheduled, "ok", (json_int_t)s.ok,
			"failed", (json_int_t)s.failed,
			"ttft_s", latency_json(&s.ttft), "tpot_s", latency_json(&s.tpot),
			"slo", slo_json(rep, &s)));
		rp_summary_clear(&s);
	}
	g_free(sub);
	return arr;
}

static json_t *
run_json(const struct rp_report *rep, const struct rp_report_run *rr)
{
	const struct rp_summary *s = &rr->summary;
	const struct rp_schedule *sc = &rr->schedule;
	json_t *outcomes = json_object(), *statuses = json_object(), *run;

	for (int o = 0; o < RP_OUT_COUNT; o++)
		json_object_set_new(outcomes, rp_outcome_name(o),
		                    json_integer((json_int_t)s->by_outcome[o]));
	for (guint i = 0; i < s->statuses->len; i++) {
		const struct rp_status_count *c =
			&g_array_index(s->statuses, struct rp_status_count, i);
		char key[24];

		g_snprintf(key, sizeof key, "%ld", c->status);
		json_object_set_new(statuses, key, json_integer((json_int_t)c->n));
	}
	run = json_pack(
		"{s:f, s:b, s:o, s:{s:I, s:I, s:I, s:I, s:I, s:o, s:o, s:o}, s:o, s:o, s:o,"
		" s:o, s:o, s:o, s:o}",
		"rate_scale", rr->scale, "interrupted", rr->run.interrupted,
		"schedule", json_pack("{s:I, s:o, s:o, s:I, s:I, s:I, s:I, s:I, s:I}",
		                      "requests", (json_int_t)sc->items->len,
		                      "span_s", num(sc->span), "offered_rps", num(s->offered_rate),
		                      "long_prompts_skipped", (json_int_t)sc->long_skipped,
		                      "long_prompts_truncated", (json_int_t)sc->long_truncated,
		                      "outputs_capped", (json_int_t)sc->output_capped,
		                      "before_offset", (json_int_t)sc->before_offset,
		                      "beyond_duration", (json_int_t)sc->after_duration,
		                      "beyond_max_requests", (json_int_t)sc->over_max_requests),
		"counts",
		"scheduled", (json_int_t)s->scheduled, "sent", (json_int_t)s->sent,
		"ok", (json_int_t)s->ok, "failed", (json_int_t)s->failed, "late", (json_int_t)s->late,
		"outcomes", outcomes, "status", statuses,
		"retry_after", json_pack("{s:I, s:o}", "count", (json_int_t)s->retry_after_n,
		                         "max_s", num(s->retry_after_max)),
		"elapsed_s", num(s->elapsed),
		"throughput_rps", num(s->throughput),
		"output_tokens_per_s", num(s->output_token_rate),
		"ttft_s", latency_json(&s->ttft),
		"tpot_s", latency_json(&s->tpot),
		"e2e_s", latency_json(&s->e2e),
		"slo", slo_json(rep, s));
	if (run != NULL && rep->phase_names != NULL && rep->phase_names->len > 0)
		json_object_set_new(run, "phases", phases_json(rep, rr));
	if (run != NULL && rr->what_if != NULL)
		json_object_set(run, "what_if", rr->what_if);
	return run;
}

json_t *
rp_report_json(const struct rp_report *rep)
{
	json_t *runs = json_array();
	json_t *slo = json_null();

	for (guint i = 0; i < rep->runs->len; i++)
		json_array_append_new(runs, run_json(rep, g_ptr_array_index(rep->runs, i)));
	if (rep->slo.ttft > 0 || rep->slo.tpot > 0) {
		json_decref(slo);
		slo = json_pack("{s:o, s:o}",
		                "ttft_s", rep->slo.ttft > 0 ? json_real(rep->slo.ttft) : json_null(),
		                "tpot_s", rep->slo.tpot > 0 ? json_real(rep->slo.tpot) : json_null());
	}
	return json_pack("{s:s, s:s, s:{s:s, s:s, s:s?, s:b, s:I}, s:s, s:I, s:o, s:o, s:O?}",
	                 "tool", "narwhal-replay", "version", PACKAGE_VERSION,
	                 "target", "url", rep->url, "api", rep->api, "model", rep->model,
	                 "stream", rep->stream, "prompt_overhead", (json_int_t)rep->prompt_overhead,
	                 "source", rep->source, "seed", (json_int_t)rep->seed,
	                 "slo", slo, "runs", runs, "what_if", rep->what_if);
}

bool
rp_report_write_json(const char *path, const struct rp_report *rep, GError **error)
{
	json_t *doc = rp_report_json(rep);
	char *text = doc ? json_dumps(doc, JSON_INDENT(2) | JSON_REAL_PRECISION(9)) : NULL;
	bool ok = false;

	if (text == NULL)
		g_set_error(error, RP_ERROR, RP_ERROR_RUN, "cannot encode the JSON summary");
	else {
		g_autofree char *line = g_strconcat(text, "\n", NULL);

		ok = g_file_set_contents(path, line, -1, error);
	}
	free(text);
	json_decref(doc);
	return ok;
}

/* --- table ---------------------------------------------------------- */

static void
latency_row(FILE *f, const char *name, const struct rp_latency *l)
{
	fprintf(f, "  %-6s %7u", name, l->n);
	if (l->n == 0) {
		fputs("          -         -         -         -         -\n", f);
		return;
	}
	fprintf(f, " %10.1f %9.1f %9.1f %9.1f %9.1f\n", l->mean * 1e3, l->p50 * 1e3,
	        l->p90 * 1e3, l->p99 * 1e3, l->max * 1e3);
}

static void
run_table(FILE *f, const struct rp_report *rep, const struct rp_report_run *rr)
{
	const struct rp_summary *s = &rr->summary;
	const struct rp_schedule *sc = &rr->schedule;
	bool first = true;

	fprintf(f, "\nrate scale %g%s: %" G_GUINT64_FORMAT " scheduled, %" G_GUINT64_FORMAT
	        " sent, %" G_GUINT64_FORMAT " ok, %" G_GUINT64_FORMAT " failed, %"
	        G_GUINT64_FORMAT " late\n", rr->scale, rr->run.interrupted ? " (interrupted)" : "",
	        s->scheduled, s->sent, s->ok, s->failed, s->late);
	fprintf(f, "  offered %.2f req/s over %.1f s; elapsed %.1f s; throughput %.2f req/s, "
	        "%.0f output tok/s\n", s->offered_rate, sc->span, s->elapsed, s->throughput,
	        s->output_token_rate);
	fputs("  outcomes:", f);
	for (int o = 0; o < RP_OUT_COUNT; o++)
		if (s->by_outcome[o] > 0)
			fprintf(f, " %s %" G_GUINT64_FORMAT, rp_outcome_name(o), s->by_outcome[o]);
	fputs("\n  status:", f);
	for (guint i = 0; i < s->statuses->len; i++) {
		const struct rp_status_count *c =
			&g_array_index(s->statuses, struct rp_status_count, i);

		fprintf(f, "%s %ld x%" G_GUINT64_FORMAT, first ? "" : ",", c->status, c->n);
		first = false;
	}
	if (s->retry_after_n > 0)
		fprintf(f, " (Retry-After on %" G_GUINT64_FORMAT ", max %g s)", s->retry_after_n,
		        s->retry_after_max);
	fputc('\n', f);
	if (sc->long_skipped || sc->long_truncated || sc->output_capped)
		fprintf(f, "  caps: %" G_GUINT64_FORMAT " long prompts skipped, %" G_GUINT64_FORMAT
		        " truncated, %" G_GUINT64_FORMAT " outputs capped\n",
		        sc->long_skipped, sc->long_truncated, sc->output_capped);
	fputs("  latency (ms)   n       mean       p50       p90       p99       max\n", f);
	latency_row(f, "TTFT", &s->ttft);
	latency_row(f, "TPOT", &s->tpot);
	latency_row(f, "E2E", &s->e2e);
	if (s->slo_set) {
		fputs("  SLO", f);
		if (rep->slo.ttft > 0)
			fprintf(f, " TTFT <= %g ms", rep->slo.ttft * 1e3);
		if (rep->slo.tpot > 0)
			fprintf(f, "%s TPOT <= %g ms", rep->slo.ttft > 0 ? "," : "",
			        rep->slo.tpot * 1e3);
		fprintf(f, ": attainment %.1f%% (TTFT %.1f%%, TPOT %.1f%%), goodput %.2f req/s\n",
		        s->attainment * 100, s->attainment_ttft * 100, s->attainment_tpot * 100,
		        s->goodput);
	}
	if (rr->what_if_line != NULL)
		fputs(rr->what_if_line, f);
}

static void
sweep_row(FILE *f, const struct rp_report_run *rr)
{
	const struct rp_summary *s = &rr->summary;

	fprintf(f, "x%-6g %9.2f %5" G_GUINT64_FORMAT " %6" G_GUINT64_FORMAT " %7" G_GUINT64_FORMAT
	        " %5" G_GUINT64_FORMAT, rr->scale, s->offered_rate, s->sent, s->ok, s->failed,
	        s->late);
	fprintf(f, " %9.1f %9.1f %9.1f %9.1f %6.1f%% %10.2f\n", s->ttft.p50 * 1e3,
	        s->ttft.p99 * 1e3, s->tpot.p50 * 1e3, s->tpot.p99 * 1e3, s->attainment * 100,
	        s->goodput);
}

void
rp_report_table(FILE *f, const struct rp_report *rep)
{
	fprintf(f, "narwhal-replay: %s -> %s (%s, model %s, %s)\n", rep->source, rep->url,
	        rep->api, rep->model ? rep->model : "-", rep->stream ? "streaming" : "not streaming");
	for (guint i = 0; i < rep->runs->len; i++)
		run_table(f, rep, g_ptr_array_index(rep->runs, i));
	if (rep->runs->len > 1) {
		fputs("\nsweep   offered/s  sent     ok  failed  late  TTFT p50  TTFT p99  TPOT p50  "
		      "TPOT p99  attain  goodput/s\n", f);
		for (guint i = 0; i < rep->runs->len; i++)
			sweep_row(f, g_ptr_array_index(rep->runs, i));
	}
	fflush(f);
}

/* --- CSV ------------------------------------------------------------ */

void
rp_csv_field(GString *out, const char *text)
{
	if (text == NULL)
		return;
	if (strpbrk(text, ",\"\r\n") == NULL) {
		g_string_append(out, text);
		return;
	}
	g_string_append_c(out, '"');
	for (const char *p = text; *p; p++) {
		if (*p == '"')
			g_string_append_c(out, '"');
		g_string_append_c(out, *p);
	}
	g_string_append_c(out, '"');
}

/* A comma and a number of seconds (microsecond digits), empty for NAN. */
static void
csv_num(GString *out, double v)
{
	g_string_append_c(out, ',');
	if (isfinite(v))
		g_string_append_printf(out, "%.6f", v);
}

bool
rp_report_write_csv(const char *path, const struct rp_report *rep, GError **error)
{
	GString *out = g_string_new("rate_scale,id,request_id,phase,scheduled_s,sent_s,late,"
	                            "input_tokens,max_tokens,status,outcome,ttft_s,tpot_s,e2e_s,"
	                            "output_tokens,usage_prompt_tokens,usage_completion_tokens,"
	                            "retry_after_s,slo_met,error\n");
	bool slo = rep->slo.ttft > 0 || rep->slo.tpot > 0;
	bool ok;

	for (guint k = 0; k < rep->runs->len; k++) {
		const struct rp_report_run *rr = g_ptr_array_index(rep->runs, k);

		for (size_t i = 0; i < rr->run.n; i++) {
			const struct rp_result *r = &rr->run.results[i];
			const char *phase = "";

			if (rep->phase_names && r->phase < rep->phase_names->len)
				phase = g_ptr_array_index(rep->phase_names, r->phase);
			g_string_append_printf(out, "%g,%u,replay-%u,", rr->scale, r->id, r->id);
			rp_csv_field(out, phase);
			csv_num(out, r->scheduled);
			csv_num(out, r->sent);
			g_string_append_printf(out, ",%d,%u,%u,%ld,%s", r->late, r->input_tokens,
			                       r->max_tokens, r->status, rp_outcome_name(r->outcome));
			csv_num(out, r->ttft);
			csv_num(out, r->tpot);
			csv_num(out, r->e2e);
			g_string_append_printf(out, ",%u,", r->output_tokens);
			if (r->usage_prompt >= 0)
				g_string_append_printf(out, "%" G_GINT64_FORMAT, r->usage_prompt);
			g_string_append_c(out, ',');
			if (r->usage_completion >= 0)
				g_string_append_printf(out, "%" G_GINT64_FORMAT, r->usage_completion);
			csv_num(out, r->retry_after);
			g_string_append_c(out, ',');
			if (slo && r->outcome != RP_OUT_NOT_SENT && r->outcome != RP_OUT_CANCELLED)
				g_string_append_c(out, rp_slo_met(r, &rep->slo) ? '1' : '0');
			g_string_append_c(out, ',');
			rp_csv_field(out, r->error);
			g_string_append_c(out, '\n');
		}
	}
	ok = g_file_set_contents(path, out->str, (gssize)out->len, error);
	g_string_free(out, TRUE);
	return ok;
}
