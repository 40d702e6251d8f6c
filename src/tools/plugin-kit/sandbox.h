/*
 * One check of narwhal-plugin-check in a process of its own, so that a
 * plugin that crashes, ends the process, hangs or eats memory fails the
 * check under way with the reason instead of taking the tool down with it
 * (docs/plugins.md, "Checking a plugin"). The child loads the plugin
 * itself; the parent never runs plugin code. The child's standard output
 * and error are the plugin's alone (the tool writes elsewhere): the parent
 * passes them on, marked, and counts them for the output check.
 */
#ifndef NW_KIT_SANDBOX_H
#define NW_KIT_SANDBOX_H

#include <glib.h>
#include <stdio.h>

/* A plugin call that has not returned after this long is stopped: it
 * blocks or loops (the blocking check allows 100 ms). */
#define KIT_CALL_LIMIT_US (2 * G_USEC_PER_SEC)
/* A check that has not finished after this long is stopped. */
#define KIT_CHECK_LIMIT_US (120 * G_USEC_PER_SEC)
/* The address space of a check's process (not under AddressSanitizer,
 * which reserves far more up front). */
#define KIT_MEMORY_LIMIT ((guint64)2 << 30)

/* What the plugin wrote to standard output or error, over every check. */
struct kit_output {
	guint64 bytes;
	char first_check[32];     /* the check it first wrote in */
};

/* The check's body, run in the child: prints the check's lines (ending
 * with its verdict) to out. */
typedef void (*kit_child_fn)(const char *check, void *data, FILE *out);

/* Runs fn in a child and prints to out the lines it printed, or, when it
 * ended without giving the check's verdict, a FAIL verdict for check that
 * says how and in which plugin call it ended. TRUE when the check passed.
 * Call kit_guard_share() once first. */
gboolean kit_sandbox_run(const char *check, kit_child_fn fn, void *data, FILE *out,
                         struct kit_output *output);

/* In a check's process, a descriptor of the tool's own standard error
 * (its standard error is the plugin's there); -1 elsewhere. */
int kit_sandbox_tool_stderr(void);

#endif /* NW_KIT_SANDBOX_H */
