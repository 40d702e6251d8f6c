#include "build-config.h"

#include "core/access-log.h"

#include <math.h>

#include <glib.h>

#include "core/log.h"

/* A first writer through the log; the log's own writer replaces it. */
static bool access_enabled;

void
nw_access_log_setup(bool enabled)
{
	access_enabled = enabled;
}

bool
nw_access_log_enabled(void)
{
	return access_enabled;
}

void
nw_access_log(const struct nw_access_record *r)
{
	char status[16], total[32];

	if (!access_enabled)
		return;
	g_snprintf(status, sizeof status, "%d", r->status);
	g_snprintf(total, sizeof total, "%.6f", r->total_s);
	nw_log(NARWHAL_LOG_INFO, "access", "request_id", r->request_id, "route", r->route,
	       "status", status, "total_s", total, NULL);
}
