/*
 * Counted resources with FIFO waiters: the admission ledger (admitted
 * requests against the admission limit, spec 4.1), the serving pool
 * (engine calls against serving.max_connections, for engine.pool_timeout_s)
 * and the wait lines for per-engine phase slots (spec 4.2).
 *
 * Pure bookkeeping, no loop and no clock: a waiter is told it was granted
 * through a callback that must only record it (the request acts on it from
 * its own timer), so releasing never re-enters request code.
 */
#ifndef NW_SERVE_SLOTS_H
#define NW_SERVE_SLOTS_H

#include <stdbool.h>
#include <stdint.h>

#include <glib.h>

typedef void (*nw_waiter_fn)(void *data);

struct nw_waiter {
	GList link;       /* in one queue while waiting */
	bool waiting;
	bool granted;     /* a resource was handed over while waiting */
	int64_t order;    /* place in line: lower first, ties in turn (0 by
	                   * default; requests use their arrival time) */
	nw_waiter_fn fn;  /* granted (resources) or kicked (wait lines) */
	void *data;
};

void nw_waiter_init(struct nw_waiter *w, nw_waiter_fn fn, void *data);

/* A counted resource. limit 0 means unlimited. */
struct nw_resource {
	uint32_t in_use;
	uint32_t limit;
	uint32_t capacity;  /* most waiters; UINT32_MAX: unbounded */
	GQueue waiters;
};

void nw_resource_init(struct nw_resource *r, uint32_t limit, uint32_t capacity);
/* Take one unit now: only when there is room and nobody waits (FIFO). */
bool nw_resource_try(struct nw_resource *r);
/* Join the line at the place its order gives (FIFO by arrival: a request
 * whose sizing took longer does not lose its turn to a later one); false
 * when the line is full (capacity). */
bool nw_resource_wait(struct nw_resource *r, struct nw_waiter *w);
/* Leave the line (a no-op when not waiting). */
void nw_resource_leave(struct nw_resource *r, struct nw_waiter *w);
/* Give one unit back: to the first waiter (granted, fn called), else the
 * count drops. */
void nw_resource_release(struct nw_resource *r);
uint32_t nw_resource_waiting(const struct nw_resource *r);

/* A wait line in order (phase slots: room appears on some engine, and the
 * first in line tries again). */
struct nw_wait_line {
	GQueue waiters;
};

void nw_wait_line_init(struct nw_wait_line *l);
/* Join at the place the waiter's order gives. A waiter that goes in ahead
 * of the old head is kicked: the room the old head was kicked for is its
 * now. */
void nw_wait_line_push(struct nw_wait_line *l, struct nw_waiter *w);
/* Leave the line; when the head leaves, the new head is kicked (a kick
 * the old head got and did not act on must not be lost). */
void nw_wait_line_leave(struct nw_wait_line *l, struct nw_waiter *w);
bool nw_wait_line_empty(const struct nw_wait_line *l);
bool nw_wait_line_is_first(const struct nw_wait_line *l, const struct nw_waiter *w);
/* Call the first waiter's fn (it stays in line until it leaves). */
void nw_wait_line_kick(struct nw_wait_line *l);
uint32_t nw_wait_line_length(const struct nw_wait_line *l);

#endif /* NW_SERVE_SLOTS_H */
