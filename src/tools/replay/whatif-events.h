/*
 * The what-if mode's event core (docs/replay.md, "What-if mode"): a virtual
 * clock and the queue of what happens next, in time order. Everything of a
 * what-if run (arrivals, engine steps, timers, handoffs, monitor passes)
 * is an event here; nothing reads a wall clock.
 *
 * A binary heap ordered by (time, sequence number): events at the same
 * nanosecond come out in the order they were pushed, so a run is the same
 * run every time. Push and pop are O(log n) and allocate only when the
 * heap grows.
 *
 * Cancelling is lazy: an event carries a stamp, and its owner bumps its
 * own stamp to forget the events it pushed before (wi_event_stale).
 */
#ifndef NW_REPLAY_WHATIF_EVENTS_H
#define NW_REPLAY_WHATIF_EVENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct wi_event {
	int64_t at_ns;     /* virtual time */
	uint64_t seq;      /* push order, the tie-break */
	uint32_t kind;     /* the caller's */
	uint32_t stamp;    /* the owner's stamp when pushed */
	void *obj;         /* the caller's */
};

struct wi_queue {
	struct wi_event *heap;
	size_t len, cap;
	uint64_t next_seq;
	int64_t now_ns;    /* the virtual clock: the last event popped */
};

void wi_queue_init(struct wi_queue *q);
void wi_queue_clear(struct wi_queue *q);

/* Queue an event; a time in the past is taken as now (an event never runs
 * before one already run). */
void wi_queue_push(struct wi_queue *q, int64_t at_ns, uint32_t kind, void *obj, uint32_t stamp);
/* Take the earliest event and move the clock to it; false when empty. */
bool wi_queue_pop(struct wi_queue *q, struct wi_event *out);
/* The earliest event's time without taking it; false when empty. */
bool wi_queue_peek(const struct wi_queue *q, int64_t *at_ns);

static inline bool
wi_event_stale(const struct wi_event *ev, uint32_t owner_stamp)
{
	return ev->stamp != owner_stamp;
}

/* The host clock (core/host.h's nw_clock_fn) over the queue's clock. */
int64_t wi_queue_clock(void *queue);

/* Seconds and nanoseconds of virtual time. */
static inline int64_t
wi_ns(double s)
{
	return (int64_t)(s * 1e9 + (s >= 0 ? 0.5 : -0.5));
}

static inline double
wi_s(int64_t ns)
{
	return (double)ns / 1e9;
}

#endif /* NW_REPLAY_WHATIF_EVENTS_H */
