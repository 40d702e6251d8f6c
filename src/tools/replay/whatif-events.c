#include "build-config.h"

#include "tools/replay/whatif-events.h"

#include <string.h>

#include <glib.h>

void
wi_queue_init(struct wi_queue *q)
{
	memset(q, 0, sizeof *q);
}

void
wi_queue_clear(struct wi_queue *q)
{
	g_free(q->heap);
	memset(q, 0, sizeof *q);
}

static bool
before(const struct wi_event *a, const struct wi_event *b)
{
	return a->at_ns < b->at_ns || (a->at_ns == b->at_ns && a->seq < b->seq);
}

void
wi_queue_push(struct wi_queue *q, int64_t at_ns, uint32_t kind, void *obj, uint32_t stamp)
{
	struct wi_event ev = {
		.at_ns = MAX(at_ns, q->now_ns), .seq = q->next_seq++, .kind = kind,
		.stamp = stamp, .obj = obj,
	};
	size_t i;

	if (q->len == q->cap) {
		q->cap = MAX(64, q->cap * 2);
		q->heap = g_renew(struct wi_event, q->heap, q->cap);
	}
	/* Sift up from the new leaf. */
	for (i = q->len++; i > 0; i = (i - 1) / 2) {
		size_t parent = (i - 1) / 2;

		if (!before(&ev, &q->heap[parent]))
			break;
		q->heap[i] = q->heap[parent];
	}
	q->heap[i] = ev;
}

bool
wi_queue_pop(struct wi_queue *q, struct wi_event *out)
{
	struct wi_event last;
	size_t i = 0;

	if (q->len == 0)
		return false;
	*out = q->heap[0];
	q->now_ns = out->at_ns;
	last = q->heap[--q->len];
	/* Sift the last leaf down from the root. */
	for (;;) {
		size_t child = 2 * i + 1;

		if (child >= q->len)
			break;
		if (child + 1 < q->len && before(&q->heap[child + 1], &q->heap[child]))
			child++;
		if (!before(&q->heap[child], &last))
			break;
		q->heap[i] = q->heap[child];
		i = child;
	}
	if (q->len > 0)
		q->heap[i] = last;
	return true;
}

bool
wi_queue_peek(const struct wi_queue *q, int64_t *at_ns)
{
	if (q->len == 0)
		return false;
	*at_ns = q->heap[0].at_ns;
	return true;
}

int64_t
wi_queue_clock(void *queue)
{
	return ((const struct wi_queue *)queue)->now_ns;
}
