#include "build-config.h"

#include "core/access-log.h"

#include <glib.h>

#include "core/log.h"

/* Read on the loop; a reload may switch it. */
static gint access_enabled;

void
nw_access_log_setup(bool enabled)
{
	g_atomic_int_set(&access_enabled, enabled);
}

bool
nw_access_log_enabled(void)
{
	return g_atomic_int_get(&access_enabled) != 0;
}

static void
optional_str(struct nw_log_line *l, const char *key, const char *value)
{
	if (value != NULL)
		nw_log_line_str(l, key, value);
}

static void
optional_count(struct nw_log_line *l, const char *key, int64_t value)
{
	if (value >= 0)
		nw_log_line_int(l, key, value);
}

/* docs/metrics.md, "Access log": a field without a value (NULL, -1, NAN)
 * is left out, in both formats. Written at level info whatever log.level
 * says. */
void
nw_access_log(const struct nw_access_record *r)
{
	struct nw_log_line l;

	if (!nw_access_log_enabled())
		return;
	nw_log_line_begin(&l, NARWHAL_LOG_INFO, "access");
	optional_str(&l, "request_id", r->request_id);
	optional_str(&l, "route", r->route);
	optional_str(&l, "model", r->model);
	nw_log_line_bool(&l, "stream", r->stream);
	nw_log_line_int(&l, "status", r->status);
	optional_str(&l, "error_code", r->error_code);
	optional_count(&l, "prompt_tokens", r->prompt_tokens);
	optional_count(&l, "output_tokens", r->output_tokens);
	nw_log_line_real(&l, "queue_s", r->queue_s);
	nw_log_line_real(&l, "ttft_s", r->ttft_s);
	nw_log_line_real(&l, "tpot_s", r->tpot_s);
	nw_log_line_real(&l, "total_s", r->total_s);
	optional_str(&l, "prefill_engine", r->prefill_engine);
	optional_str(&l, "decode_engine", r->decode_engine);
	nw_log_line_int(&l, "attempts", r->attempts);
	nw_log_line_end(&l);
}
