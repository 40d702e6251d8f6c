/*
 * One engine call of a check: what a dialect built (health, models,
 * tokenise, metrics), sent on the check's pool under a timeout, its whole
 * answer collected (bounded), and the reader's words for a failure.
 */
#include "build-config.h"

#include <string.h>

#include "tools/check/checks.h"

/* Metrics pages are the largest answers a check reads. */
#define ANSWER_MAX (16u << 20)

void
nw_check_call(struct nw_check_run *run, const struct nw_dialect *d,
              struct narwhal_http_call *call, double timeout_s, nw_dialect_answer_fn fn,
              void *data)
{
	g_autofree char *request_id = g_strdup_printf("narwhal-check-%" G_GUINT64_FORMAT,
	                                              run->next_handle++);
	const struct nw_dialect_call_options o = {
		.pool = run->pool, .dialect = d,
		.connect_timeout_s = run->cfg->engine.connect_timeout_s, .timeout_s = timeout_s,
		.body_max = ANSWER_MAX, .request_id = request_id,
	};

	if (nw_dialect_call_start(&o, call, fn, data) == NULL) {
		g_autoptr(GString) none = g_string_new(NULL);
		const struct nw_dialect_answer a = {
			.code = NW_UPSTREAM_FAILED, .error = "the call could not start", .body = none,
		};

		fn(data, &a);
	}
}

json_t *
nw_check_engine_subject(const struct nw_dialect *d)
{
	return json_pack("{s:s, s:s}", "engine", d->ref.id, "url", d->ref.url);
}

char *
nw_check_seconds(double s)
{
	if (s < 1e-3)
		return g_strdup_printf("%.0f us", s * 1e6);
	if (s < 1.0)
		return g_strdup_printf("%.3g ms", s * 1e3);
	return g_strdup_printf("%.3g s", s);
}

void
nw_check_wait(const bool *flag)
{
	while (!*flag)
		g_main_context_iteration(NULL, TRUE);
}
