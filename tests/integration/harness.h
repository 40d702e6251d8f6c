/*
 * Integration-test harness: start real narwhal processes on loopback
 * ephemeral ports, speak HTTP to them, and stop them.
 */
#ifndef NW_TEST_HARNESS_H
#define NW_TEST_HARNESS_H

#include <gio/gio.h>
#include <glib.h>
#include <jansson.h>

struct harness_proc {
	GSubprocess *proc;
	GDataInputStream *err;  /* the daemon's stderr, line by line */
	GString *log;           /* every stderr line read so far */
	char *dir;              /* temporary directory, removed at the end */
	guint16 port;
};

/* Write text to a file in a fresh temporary directory; returns its path. */
char *harness_write_config(struct harness_proc *p, const char *json_text);

/* Start narwhal --config FILE and wait (bounded) for its "listening" line.
 * Returns FALSE and leaves the process reaped if it exits first. */
gboolean harness_start_daemon(struct harness_proc *p, const char *config_file);

/* Read stderr lines until one contains needle or the timeout passes. */
gboolean harness_wait_log(struct harness_proc *p, const char *needle, guint timeout_ms);

/* Send a signal and wait (bounded) for the exit; returns the exit status,
 * or -1 when it did not exit in time (then it is killed). */
int harness_stop(struct harness_proc *p, int signo, guint timeout_ms);

void harness_clear(struct harness_proc *p);

/* Run a command to completion (bounded); captures stdout and stderr. */
int harness_run(const char *const *argv, char **out, char **err);

/* A blocking HTTP request to 127.0.0.1:port. body may be NULL. Returns the
 * status (0 on transport failure) and the response body in *response. */
long harness_http(guint16 port, const char *method, const char *path, const char *body,
                  char **response);

/* The narwhal binary under test ($NARWHAL_BIN). */
const char *harness_narwhal_bin(void);

#endif /* NW_TEST_HARNESS_H */
