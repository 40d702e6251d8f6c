/*
 * What a plugin does during its calls, for narwhal-plugin-check: the tool
 * defines the C library's clocks and sleeps itself (guard.c) and exports
 * them, so a plugin's calls to them come here first. Between
 * kit_guard_enter and kit_guard_leave every such call is noted against the
 * slot, and each call's wall time is measured (docs/plugins.md, section 4:
 * plugins never block and take time from the host's clock only).
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
};

/* A plugin call begins and ends; slot names it in the record. */
void kit_guard_enter(void);
void kit_guard_leave(const char *slot);

void kit_guard_reset(void);
/* Starts a new measure of the slowest call (the counts go on). */
void kit_guard_reset_slowest(void);
const struct kit_guard_record *kit_guard_record(void);

/* Wraps one plugin call: KIT_CALL("place", rc = ops->place(...)). */
#define KIT_CALL(slot_, stmt_) \
	do { \
		kit_guard_enter(); \
		stmt_; \
		kit_guard_leave(slot_); \
	} while (0)

#endif /* NW_KIT_GUARD_H */
