/*
 * Loop primitives shared by the HTTP server and the upstream client.
 *
 * A deadline source is a GSource that keeps one monotonic deadline in its
 * own struct and reports it from prepare()/check(). Changing the deadline
 * costs no system call and no wake-up write, unlike g_source_set_ready_time.
 * It is one-shot: the deadline is disarmed before the callback runs.
 */
#ifndef NW_LOOP_H
#define NW_LOOP_H

#include <stdint.h>

#include <glib.h>

typedef void (*nw_deadline_fn)(void *data);

/* A new deadline source attached to the default context, disarmed. */
GSource *nw_deadline_source_new(const char *name, nw_deadline_fn fn, void *data);

/* Arm at an absolute g_get_monotonic_time() value, in microseconds;
 * negative disarms. */
void nw_deadline_source_set(GSource *source, int64_t deadline_us);

/* Arm relative to now; 0 means "at the next loop iteration". */
void nw_deadline_source_set_in(GSource *source, int64_t delay_us);

int64_t nw_deadline_source_get(GSource *source);

void nw_deadline_source_destroy(GSource *source);

#endif /* NW_LOOP_H */
