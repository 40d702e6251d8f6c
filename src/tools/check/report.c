#include "build-config.h"

#include "tools/check/report.h"

#include <stdarg.h>

struct nw_check_report {
	FILE *out;
	FILE *err;
	bool json;
	bool progress;
	bool progress_shown;
	json_t *checks;
	unsigned counts[NW_CHECK_SKIP + 1];
};

const char *
nw_check_verdict_name(nw_check_verdict v)
{
	switch (v) {
	case NW_CHECK_PASS: return "pass";
	case NW_CHECK_WARN: return "warn";
	case NW_CHECK_FAIL: return "fail";
	case NW_CHECK_SKIP: return "skip";
	}
	return "unknown";
}

struct nw_check_report *
nw_check_report_new(FILE *out, FILE *err, bool json, bool progress)
{
	struct nw_check_report *r = g_new0(struct nw_check_report, 1);

	r->out = out;
	r->err = err;
	r->json = json;
	r->progress = progress;
	r->checks = json_array();
	return r;
}

void
nw_check_report_free(struct nw_check_report *r)
{
	if (r == NULL)
		return;
	json_decref(r->checks);
	g_free(r);
}

static void
clear_progress(struct nw_check_report *r)
{
	if (!r->progress_shown)
		return;
	fputs("\r\033[K", r->err);
	fflush(r->err);
	r->progress_shown = false;
}

void
nw_check_report_progress(struct nw_check_report *r, const char *fmt, ...)
{
	va_list ap;

	if (!r->progress)
		return;
	fputs("\r\033[K", r->err);
	va_start(ap, fmt);
	vfprintf(r->err, fmt, ap);
	va_end(ap);
	fflush(r->err);
	r->progress_shown = true;
}

/* "sim-0" for an engine, "sim-0 -> sim-1" for a pair. */
static char *
subject_text(const json_t *subject)
{
	const char *engine = json_string_value(json_object_get(subject, "engine"));
	const char *prefill = json_string_value(json_object_get(subject, "prefill"));
	const char *decode = json_string_value(json_object_get(subject, "decode"));

	if (engine != NULL)
		return g_strdup(engine);
	if (prefill != NULL && decode != NULL)
		return g_strdup_printf("%s -> %s", prefill, decode);
	return g_strdup("fleet");
}

void
nw_check_report_add(struct nw_check_report *r, const char *check, json_t *subject,
                    nw_check_verdict verdict, json_t *measurements, const char *fmt, ...)
{
	va_list ap;
	g_autofree char *reason = NULL;
	json_t *item = json_pack("{s:s}", "check", check);

	va_start(ap, fmt);
	reason = g_strdup_vprintf(fmt, ap);
	va_end(ap);
	json_object_update(item, subject);
	json_object_set_new(item, "verdict", json_string(nw_check_verdict_name(verdict)));
	json_object_set_new(item, "reason", json_string(reason));
	json_object_set_new(item, "measurements", measurements != NULL ? measurements : json_object());
	json_array_append_new(r->checks, item);
	r->counts[verdict]++;
	if (!r->json) {
		g_autofree char *who = subject_text(subject);
		g_autofree char *tag = g_ascii_strup(nw_check_verdict_name(verdict), -1);

		clear_progress(r);
		fprintf(r->out, "%-4s  %-9s %-20s %s\n", tag, check, who, reason);
		fflush(r->out);
	}
	json_decref(subject);
}

int
nw_check_report_finish(struct nw_check_report *r, const char *config, double seconds)
{
	bool failed = r->counts[NW_CHECK_FAIL] > 0;

	clear_progress(r);
	if (r->json) {
		json_t *doc = json_pack("{s:s, s:s, s:f, s:{s:I, s:I, s:I, s:I}, s:O}",
		                        "config", config,
		                        "verdict", failed ? "fail" : "pass",
		                        "duration_s", seconds,
		                        "summary",
		                        "pass", (json_int_t)r->counts[NW_CHECK_PASS],
		                        "warn", (json_int_t)r->counts[NW_CHECK_WARN],
		                        "fail", (json_int_t)r->counts[NW_CHECK_FAIL],
		                        "skip", (json_int_t)r->counts[NW_CHECK_SKIP],
		                        "checks", r->checks);

		json_dumpf(doc, r->out, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
		fputc('\n', r->out);
		json_decref(doc);
	} else {
		fprintf(r->out, "%s: %u checks: %u pass, %u warn, %u fail, %u skip (%.1f s)\n",
		        failed ? "FAIL" : "PASS", (unsigned)json_array_size(r->checks),
		        r->counts[NW_CHECK_PASS], r->counts[NW_CHECK_WARN],
		        r->counts[NW_CHECK_FAIL], r->counts[NW_CHECK_SKIP], seconds);
	}
	fflush(r->out);
	return failed ? 1 : 0;
}
