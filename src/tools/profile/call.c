/*
 * One engine call of narwhal-profile (models, tokenise, metrics): what a
 * dialect built, sent on the run's pool under a timeout, its whole answer
 * collected (bounded), and the reader's words for a failure.
 */
#include "build-config.h"

#include <stdarg.h>

#include "tools/profile/run.h"

/* A tokenise answer lists the prompt's token ids; metrics pages are the
 * largest answers read. */
#define ANSWER_MAX (16u << 20)

struct nw_dialect_call *
nw_prof_call(struct nw_prof_run *run, const struct nw_dialect *d, struct narwhal_http_call *call,
             double timeout_s, nw_dialect_answer_fn fn, void *data)
{
	g_autofree char *request_id = g_strdup_printf("narwhal-profile-%" G_GUINT64_FORMAT,
	                                              run->next_handle++);
	const struct nw_dialect_call_options o = {
		.pool = run->pool, .dialect = d,
		.connect_timeout_s = run->cfg->engine.connect_timeout_s, .timeout_s = timeout_s,
		.body_max = ANSWER_MAX, .request_id = request_id,
	};
	return nw_dialect_call_start(&o, call, fn, data);
}

bool
nw_prof_answered_2xx(const struct nw_dialect_answer *a)
{
	return a->code == NW_UPSTREAM_OK && a->status >= 200 && a->status < 300;
}

void
nw_prof_fail(struct nw_prof_engine *e, const char *fmt, ...)
{
	va_list ap;

	if (e->error != NULL)
		return;
	va_start(ap, fmt);
	e->error = g_strdup_vprintf(fmt, ap);
	va_end(ap);
}

char *
nw_prof_utc_now(void)
{
	g_autoptr(GDateTime) now = g_date_time_new_now_utc();

	return g_date_time_format(now, "%Y-%m-%dT%H:%M:%SZ");
}

void
nw_prof_wait(const bool *flag)
{
	while (!*flag)
		g_main_context_iteration(NULL, TRUE);
}
