/* The clock and sleep interposers of narwhal-plugin-check (guard.h). The
 * executable exports these names (interpose.list), so the dynamic linker
 * binds a plugin's references to them before the C library's; each one
 * notes the call when a plugin call is under way and then does what the C
 * library would. */
#include "build-config.h"

#include "tools/plugin-kit/guard.h"

#include <dlfcn.h>
#include <poll.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static gboolean active;
static struct kit_guard_record own;
static struct kit_guard_record *record = &own;

void
kit_guard_share(void)
{
	void *shared = mmap(NULL, sizeof *record, PROT_READ | PROT_WRITE,
	                    MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	/* Without it the checks still run, in one process's view each. */
	if (shared != MAP_FAILED)
		record = shared;
	memset(record, 0, sizeof *record);
}

void
kit_guard_enter(const char *slot)
{
	g_strlcpy(record->slot, slot, sizeof record->slot);
	/* The parent reads the start while the call runs (guard.h). */
	__atomic_store_n(&record->started_us, g_get_monotonic_time(), __ATOMIC_RELEASE);
	active = TRUE;
}

void
kit_guard_leave(void)
{
	gint64 took;

	active = FALSE;
	took = g_get_monotonic_time() - record->started_us;
	__atomic_store_n(&record->started_us, 0, __ATOMIC_RELEASE);
	record->calls++;
	if (took > record->slowest_us) {
		record->slowest_us = took;
		g_strlcpy(record->slowest_slot, record->slot, sizeof record->slowest_slot);
	}
}

void
kit_guard_loading(gboolean loading)
{
	/* Timed as a call is, so that a constructor that never returns is
	 * stopped too; but no slot's, and not counted. */
	record->loading = loading;
	__atomic_store_n(&record->started_us, loading ? g_get_monotonic_time() : 0,
	                 __ATOMIC_RELEASE);
}

void
kit_guard_begin_check(void)
{
	record->started_us = 0;
	record->slot[0] = '\0';
	record->loading = FALSE;
}

void
kit_guard_reset_slowest(void)
{
	record->slowest_us = 0;
	record->slowest_slot[0] = '\0';
}

const struct kit_guard_record *
kit_guard_record(void)
{
	return record;
}

static void
note(struct kit_guard_calls *family, const char *what)
{
	if (!active)
		return;
	if (family->n++ == 0) {
		g_strlcpy(family->what, what, sizeof family->what);
		g_strlcpy(family->slot, record->slot, sizeof family->slot);
	}
}

/* The C library's own definition, found past this executable. */
#define REAL(type_, name_) ((type_)dlsym(RTLD_NEXT, name_))

int
clock_gettime(clockid_t id, struct timespec *ts)
{
	note(&record->clock, "clock_gettime");
	return REAL(int (*)(clockid_t, struct timespec *), "clock_gettime")(id, ts);
}

int
gettimeofday(struct timeval *restrict tv, void *restrict tz)
{
	note(&record->clock, "gettimeofday");
	return REAL(int (*)(struct timeval *, void *), "gettimeofday")(tv, tz);
}

time_t
time(time_t *t)
{
	note(&record->clock, "time");
	return REAL(time_t (*)(time_t *), "time")(t);
}

int
nanosleep(const struct timespec *req, struct timespec *rem)
{
	note(&record->wait, "nanosleep");
	return REAL(int (*)(const struct timespec *, struct timespec *), "nanosleep")(req, rem);
}

int
clock_nanosleep(clockid_t id, int flags, const struct timespec *req, struct timespec *rem)
{
	note(&record->wait, "clock_nanosleep");
	return REAL(int (*)(clockid_t, int, const struct timespec *, struct timespec *),
	            "clock_nanosleep")(id, flags, req, rem);
}

int
usleep(useconds_t us)
{
	note(&record->wait, "usleep");
	return REAL(int (*)(useconds_t), "usleep")(us);
}

unsigned int
sleep(unsigned int s)
{
	note(&record->wait, "sleep");
	return REAL(unsigned int (*)(unsigned int), "sleep")(s);
}

int
poll(struct pollfd *fds, nfds_t n, int timeout)
{
	note(&record->wait, "poll");
	return REAL(int (*)(struct pollfd *, nfds_t, int), "poll")(fds, n, timeout);
}

int
select(int n, fd_set *restrict r, fd_set *restrict w, fd_set *restrict e,
       struct timeval *restrict timeout)
{
	note(&record->wait, "select");
	return REAL(int (*)(int, fd_set *, fd_set *, fd_set *, struct timeval *), "select")(
		n, r, w, e, timeout);
}
