#include "build-config.h"

#include "serve/slots.h"

void
nw_waiter_init(struct nw_waiter *w, nw_waiter_fn fn, void *data)
{
	w->link.data = w;
	w->link.next = w->link.prev = NULL;
	w->waiting = false;
	w->granted = false;
	w->order = 0;
	w->fn = fn;
	w->data = data;
}

/* Behind every waiter of the same or a lower order. */
static void
insert_ordered(GQueue *q, struct nw_waiter *w)
{
	GList *l = q->tail;

	while (l != NULL && ((struct nw_waiter *)l->data)->order > w->order)
		l = l->prev;
	if (l == NULL)
		g_queue_push_head_link(q, &w->link);
	else
		g_queue_insert_after_link(q, l, &w->link);
}

void
nw_resource_init(struct nw_resource *r, uint32_t limit, uint32_t capacity)
{
	r->in_use = 0;
	r->limit = limit;
	r->capacity = capacity;
	g_queue_init(&r->waiters);
}

bool
nw_resource_try(struct nw_resource *r)
{
	if (r->waiters.length > 0 || (r->limit > 0 && r->in_use >= r->limit))
		return false;
	r->in_use++;
	return true;
}

bool
nw_resource_wait(struct nw_resource *r, struct nw_waiter *w)
{
	if (w->waiting)
		return true;
	if (r->waiters.length >= r->capacity)
		return false;
	w->granted = false;
	w->waiting = true;
	insert_ordered(&r->waiters, w);
	return true;
}

void
nw_resource_leave(struct nw_resource *r, struct nw_waiter *w)
{
	if (!w->waiting)
		return;
	g_queue_unlink(&r->waiters, &w->link);
	w->waiting = false;
}

void
nw_resource_release(struct nw_resource *r)
{
	GList *head = g_queue_pop_head_link(&r->waiters);

	if (head != NULL) {
		struct nw_waiter *w = head->data;

		/* The unit passes straight to the first waiter: in_use stays. */
		w->waiting = false;
		w->granted = true;
		w->fn(w->data);
		return;
	}
	if (r->in_use > 0)
		r->in_use--;
}

uint32_t
nw_resource_waiting(const struct nw_resource *r)
{
	return r->waiters.length;
}

void
nw_wait_line_init(struct nw_wait_line *l)
{
	g_queue_init(&l->waiters);
}

void
nw_wait_line_push(struct nw_wait_line *l, struct nw_waiter *w)
{
	if (w->waiting)
		return;
	w->waiting = true;
	w->granted = false;
	insert_ordered(&l->waiters, w);
	if (l->waiters.head == &w->link && l->waiters.length > 1)
		w->fn(w->data);
}

void
nw_wait_line_leave(struct nw_wait_line *l, struct nw_waiter *w)
{
	bool was_first;

	if (!w->waiting)
		return;
	was_first = nw_wait_line_is_first(l, w);
	g_queue_unlink(&l->waiters, &w->link);
	w->waiting = false;
	/* The head may have been kicked and left before acting on it: pass the
	 * wake-up on, or the new head could wait for a slot already free. */
	if (was_first)
		nw_wait_line_kick(l);
}

bool
nw_wait_line_empty(const struct nw_wait_line *l)
{
	return l->waiters.length == 0;
}

bool
nw_wait_line_is_first(const struct nw_wait_line *l, const struct nw_waiter *w)
{
	return l->waiters.head != NULL && l->waiters.head->data == w;
}

void
nw_wait_line_kick(struct nw_wait_line *l)
{
	struct nw_waiter *w = l->waiters.head ? l->waiters.head->data : NULL;

	if (w != NULL)
		w->fn(w->data);
}

uint32_t
nw_wait_line_length(const struct nw_wait_line *l)
{
	return l->waiters.length;
}
