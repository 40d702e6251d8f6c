/*
 * Timers: one binary heap of deadlines behind one loop deadline source.
 * The owner of a timer (a request, an engine call) arms it to the earliest
 * of its deadlines; re-arming is O(log n) and costs no system call. One
 * GSource per timer would make every loop iteration poll them all.
 */
#ifndef NW_NET_TIMERS_H
#define NW_NET_TIMERS_H

#include <stdbool.h>
#include <stdint.h>

#include <glib.h>

typedef void (*nw_timer_fn)(void *data);

struct nw_timer {
	int64_t when_us;  /* g_get_monotonic_time() value; -1: not armed */
	unsigned index;   /* position in the heap while armed */
	nw_timer_fn fn;
	void *data;
};

struct nw_timers;

/* attach: false for a heap without a loop source (unit tests drive it with
 * nw_timers_run). */
struct nw_timers *nw_timers_new(bool attach);
void nw_timers_free(struct nw_timers *t);

void nw_timer_init(struct nw_timer *timer, nw_timer_fn fn, void *data);
/* Arm (or move) to an absolute time; a negative time disarms. */
void nw_timer_set(struct nw_timers *t, struct nw_timer *timer, int64_t when_us);
void nw_timer_cancel(struct nw_timers *t, struct nw_timer *timer);
bool nw_timer_armed(const struct nw_timer *timer);

/* Fire every timer due at now_us, earliest first; a fired timer is
 * disarmed before its callback, which may re-arm it or others. */
void nw_timers_run(struct nw_timers *t, int64_t now_us);
/* The earliest armed time, or -1. */
int64_t nw_timers_next(const struct nw_timers *t);
unsigned nw_timers_count(const struct nw_timers *t);

#endif /* NW_NET_TIMERS_H */
