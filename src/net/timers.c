#include "build-config.h"

#include "net/timers.h"

#include "net/loop.h"

struct nw_timers {
	GPtrArray *heap; /* struct nw_timer *, a min-heap on when_us */
	GSource *source; /* armed to the heap's top; NULL when detached */
};

static void
sync_source(struct nw_timers *t)
{
	if (t->source != NULL)
		nw_deadline_source_set(t->source, nw_timers_next(t));
}

static void
on_source(void *data)
{
	nw_timers_run(data, g_get_monotonic_time());
}

struct nw_timers *
nw_timers_new(bool attach)
{
	struct nw_timers *t = g_new0(struct nw_timers, 1);

	t->heap = g_ptr_array_new();
	if (attach)
		t->source = nw_deadline_source_new("narwhal-timers", on_source, t);
	return t;
}

void
nw_timers_free(struct nw_timers *t)
{
	if (t == NULL)
		return;
	for (guint i = 0; i < t->heap->len; i++)
		((struct nw_timer *)g_ptr_array_index(t->heap, i))->when_us = -1;
	g_ptr_array_free(t->heap, TRUE);
	nw_deadline_source_destroy(t->source);
	g_free(t);
}

void
nw_timer_init(struct nw_timer *timer, nw_timer_fn fn, void *data)
{
	timer->when_us = -1;
	timer->index = 0;
	timer->fn = fn;
	timer->data = data;
}

bool
nw_timer_armed(const struct nw_timer *timer)
{
	return timer->when_us >= 0;
}

static struct nw_timer *
at(struct nw_timers *t, unsigned i)
{
	return g_ptr_array_index(t->heap, i);
}

static void
place(struct nw_timers *t, unsigned i, struct nw_timer *timer)
{
	t->heap->pdata[i] = timer;
	timer->index = i;
}

static void
sift_up(struct nw_timers *t, unsigned i)
{
	struct nw_timer *timer = at(t, i);

	while (i > 0) {
		unsigned parent = (i - 1) / 2;

		if (at(t, parent)->when_us <= timer->when_us)
			break;
		place(t, i, at(t, parent));
		i = parent;
	}
	place(t, i, timer);
}

static void
sift_down(struct nw_timers *t, unsigned i)
{
	struct nw_timer *timer = at(t, i);
	unsigned n = t->heap->len;

	for (;;) {
		unsigned l = 2 * i + 1, r = l + 1, m = i;
		int64_t best = timer->when_us;

		if (l < n && at(t, l)->when_us < best) {
			m = l;
			best = at(t, l)->when_us;
		}
		if (r < n && at(t, r)->when_us < best)
			m = r;
		if (m == i)
			break;
		place(t, i, at(t, m));
		i = m;
	}
	place(t, i, timer);
}

static void
heap_remove(struct nw_timers *t, struct nw_timer *timer)
{
	unsigned i = timer->index;
	struct nw_timer *last = g_ptr_array_index(t->heap, t->heap->len - 1);

	g_ptr_array_set_size(t->heap, t->heap->len - 1);
	timer->when_us = -1;
	if (last == timer)
		return;
	place(t, i, last);
	sift_down(t, i);
	sift_up(t, last->index);
}

void
nw_timer_set(struct nw_timers *t, struct nw_timer *timer, int64_t when_us)
{
	if (when_us < 0) {
		nw_timer_cancel(t, timer);
		return;
	}
	if (timer->when_us < 0) {
		timer->when_us = when_us;
		g_ptr_array_add(t->heap, timer);
		sift_up(t, t->heap->len - 1);
	} else if (when_us != timer->when_us) {
		timer->when_us = when_us;
		sift_down(t, timer->index);
		sift_up(t, timer->index);
	}
	sync_source(t);
}

void
nw_timer_cancel(struct nw_timers *t, struct nw_timer *timer)
{
	if (timer->when_us < 0)
		return;
	heap_remove(t, timer);
	sync_source(t);
}

void
nw_timers_run(struct nw_timers *t, int64_t now_us)
{
	while (t->heap->len > 0 && at(t, 0)->when_us <= now_us) {
		struct nw_timer *timer = at(t, 0);

		heap_remove(t, timer);
		timer->fn(timer->data);
	}
	sync_source(t);
}

int64_t
nw_timers_next(const struct nw_timers *t)
{
	return t->heap->len > 0 ? ((struct nw_timer *)g_ptr_array_index(t->heap, 0))->when_us : -1;
}

unsigned
nw_timers_count(const struct nw_timers *t)
{
	return t->heap->len;
}
