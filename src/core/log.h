/*
 * Structured log lines: one event per line on stderr, as JSON objects or as
 * "time level event key=value ..." text. Every line names an event; request
 * work adds request_id. GLib's own messages go through the same writer.
 */
#ifndef NW_LOG_H
#define NW_LOG_H

#include <stdbool.h>
#include <stdio.h>

#include <narwhal/plugin-abi.h>

#include "core/config.h"

/* Set the threshold ("debug", "info", "warning", "error") and format.
 * Returns false for an unknown level name. */
bool nw_log_setup(const char *level, nw_log_format format);

/* Send lines to another stream (tests); NULL restores stderr. */
void nw_log_set_stream(FILE *stream);

bool nw_log_enabled(narwhal_log_level level);

/* Log an event with key/value string pairs, terminated by NULL:
 *   nw_log(NARWHAL_LOG_INFO, "listening", "port", "8080", NULL); */
void nw_log(narwhal_log_level level, const char *event, ...) G_GNUC_NULL_TERMINATED;

/* Parse a level name; returns false when unknown. */
bool nw_log_level_parse(const char *name, narwhal_log_level *out);

#endif /* NW_LOG_H */
