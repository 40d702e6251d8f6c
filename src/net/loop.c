#include "build-config.h"

#include "net/loop.h"

struct deadline_source {
	GSource base;
	int64_t deadline_us; /* -1: disarmed */
	nw_deadline_fn fn;
	void *data;
};

static gboolean
deadline_prepare(GSource *base, gint *timeout_ms)
{
	struct deadline_source *s = (struct deadline_source *)base;
	int64_t now;

	if (s->deadline_us < 0) {
		*timeout_ms = -1;
		return FALSE;
	}
	now = g_source_get_time(base);
	if (s->deadline_us <= now) {
		*timeout_ms = 0;
		return TRUE;
	}
	/* Round up so the poll never wakes a hair early and spins. */
	*timeout_ms = (gint)MIN((s->deadline_us - now + 999) / 1000, G_MAXINT);
	return FALSE;
}

static gboolean
deadline_check(GSource *base)
{
	struct deadline_source *s = (struct deadline_source *)base;

	return s->deadline_us >= 0 && s->deadline_us <= g_source_get_time(base);
}

static gboolean
deadline_dispatch(GSource *base, GSourceFunc unused, gpointer unused_data)
{
	struct deadline_source *s = (struct deadline_source *)base;

	s->deadline_us = -1;
	s->fn(s->data);
	return G_SOURCE_CONTINUE;
}

static GSourceFuncs deadline_funcs = {
	.prepare = deadline_prepare,
	.check = deadline_check,
	.dispatch = deadline_dispatch,
};

GSource *
nw_deadline_source_new(const char *name, nw_deadline_fn fn, void *data)
{
	GSource *base = g_source_new(&deadline_funcs, sizeof(struct deadline_source));
	struct deadline_source *s = (struct deadline_source *)base;

	s->deadline_us = -1;
	s->fn = fn;
	s->data = data;
	g_source_set_name(base, name);
	g_source_attach(base, NULL);
	return base;
}

void
nw_deadline_source_set(GSource *source, int64_t deadline_us)
{
	((struct deadline_source *)source)->deadline_us = deadline_us < 0 ? -1 : deadline_us;
}

void
nw_deadline_source_set_in(GSource *source, int64_t delay_us)
{
	nw_deadline_source_set(source, g_get_monotonic_time() + MAX(delay_us, 0));
}

int64_t
nw_deadline_source_get(GSource *source)
{
	return ((struct deadline_source *)source)->deadline_us;
}

void
nw_deadline_source_destroy(GSource *source)
{
	if (source == NULL)
		return;
	g_source_destroy(source);
	g_source_unref(source);
}
