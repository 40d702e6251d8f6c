/*
 * Structured log lines: one event per line on stderr, as JSON objects or as
 * "time level event key=value ..." text. Every line names an event; request
 * work adds request_id. GLib's own messages go through the same writer.
 *
 * Lines are formatted by the caller. Once nw_log_writer_start() has run, a
 * writer thread does the writes, so logging never blocks the loop on a slow
 * stderr (docs/deployment.md, "Logs"); before that, lines are written in
 * place.
 */
#ifndef NW_LOG_H
#define NW_LOG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <glib.h>

#include <narwhal/plugin-abi.h>

#include "core/config.h"

/* Set the threshold ("debug", "info", "warning", "error") and format.
 * Returns false for an unknown level name. */
bool nw_log_setup(const char *level, nw_log_format format);

/* Send lines to another stream (tests); NULL restores stderr. Lines
 * already handed to the writer go to the old stream first. */
void nw_log_set_stream(FILE *stream);

/* Bytes of lines handed over but not yet written, past which lines are
 * dropped (and counted) rather than held. */
#define NW_LOG_PENDING_CAP ((gsize)4 << 20)

/* Start the writer thread (no effect when it runs). Also makes exit()
 * write what is pending. */
void nw_log_writer_start(gsize pending_cap);
/* Write every pending line, then end the thread; later lines are written
 * in place. Waits at most 2 s for a stalled stream, then leaves the thread
 * behind (the process is ending). */
void nw_log_writer_stop(void);
/* Wait (at most 2 s) until every line handed over so far is written;
 * false when the stream stalled. */
bool nw_log_flush(void);
/* Lines dropped because the writer fell behind, since the start. */
guint64 nw_log_dropped_lines(void);

bool nw_log_enabled(narwhal_log_level level);

/* Log an event with key/value string pairs, terminated by NULL:
 *   nw_log(NARWHAL_LOG_INFO, "listening", "port", "8080", NULL); */
void nw_log(narwhal_log_level level, const char *event, ...) G_GNUC_NULL_TERMINATED;

/* A line built field by field, written whatever the threshold (the access
 * log): begin, add fields, end (which hands it over and frees it). */
struct nw_log_line {
	GString *text;
	nw_log_format format;
};

void nw_log_line_begin(struct nw_log_line *l, narwhal_log_level level, const char *event);
/* A string, escaped; NULL is written as "". */
void nw_log_line_str(struct nw_log_line *l, const char *key, const char *value);
/* Numbers and booleans bare, also in JSON. A real that is not finite is
 * left out. */
void nw_log_line_int(struct nw_log_line *l, const char *key, int64_t value);
void nw_log_line_real(struct nw_log_line *l, const char *key, double value);
void nw_log_line_bool(struct nw_log_line *l, const char *key, bool value);
void nw_log_line_end(struct nw_log_line *l);

/* Parse a level name; returns false when unknown. */
bool nw_log_level_parse(const char *name, narwhal_log_level *out);

#endif /* NW_LOG_H */
