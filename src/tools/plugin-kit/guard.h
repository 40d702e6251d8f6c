/*
 * What a plugin does during its calls, for narwhal-plugin-check: the tool
 * defines the C library's clocks and sleeps itself (guard.c) and exports
 * them, so a plugin's calls to them come here first. Between
 * kit_guard_enter and kit_guard_leave every such call is noted against the
 * slot, and each call's wall time is measured (docs/plugins.md, section 4:
 * plugins never block and take time from the host's clock only).
 *
 * The record can live in memory shared with the tool's parent process
 * (kit_guard_share), which runs each check in a child of its own: the
 * notes then add up over every check, and the parent sees which call is
 * under way and since when, to stop a call that never returns.
 */
#ifndef NW_KIT_GUARD_H
#define NW_KIT_GUARD_H

#include <glib.h>

/* Calls of one family (clocks, or sleeps and waits) made inside plugin
 * calls: how many, the first and the slot that made it. */
struct kit_guard_calls {
	guint n;
	char what[32];            /* e.g. "clock_gettime" */
	char slot[32];
};

struct kit_guard_record {
	struct kit_guard_calls clock;
	struct kit_guard_calls wait;
	gint64 slowest_us;        /* the longest single plugin call */
	char slowest_slot[32];
	guint calls;              /* plugin calls seen */
	/* The call under way (started_us: its start on the monotonic clock,
	 * 0 when none is), or the last one made; loading: the loader is
	 * reading the plugin (its constructors, entry and descriptor). */
	gint64 started_us;
	char slot[32];
	gboolean loading;
};

/* Moves the record to memory shared with the children forked later,
 * zeroed. Call once, before the first fork. */
void kit_guard_share(void);

/* A plugin call begins and ends. */
void kit_guard_enter(const char *slot);
void kit_guard_leave(void);
/* The loader begins or ends reading the plugin: timed as a call (not
 * counted as one). */
void kit_guard_loading(gboolean loading);

/* A new check begins: no call under way or made yet, nothing loading;
 * the counts go on. */
void kit_guard_begin_check(void);
/* Starts a new measure of the slowest call (the counts go on). */
void kit_guard_reset_slowest(void);
const struct kit_guard_record *kit_guard_record(void);

/* Wraps one plugin call: KIT_CALL("place", rc = ops->place(...)). */
#define KIT_CALL(slot_, stmt_) \
	do { \
		kit_guard_enter(slot_); \
		stmt_; \
		kit_guard_leave(); \
	} while (0)

#endif /* NW_KIT_GUARD_H */
