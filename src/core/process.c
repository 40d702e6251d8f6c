#include "build-config.h"

#include "core/process.h"

#include <malloc.h>
#include <sys/resource.h>

#include <glib.h>

#include "core/json-alloc.h"
#include "core/log.h"
#include "core/string-pool.h"

unsigned long
nw_process_raise_fd_limit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return 0;
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
			getrlimit(RLIMIT_NOFILE, &rl);
	}
	return (unsigned long)rl.rlim_cur;
}

static struct {
	bool on;                                  /* nw_process_tune_malloc ran */
	struct nw_trim_rule loads[NW_LOAD_KINDS];
	guint pending;                            /* the idle source of a trim */
	uint64_t trims;
} heap;

void
nw_process_tune_malloc(void)
{
#ifdef M_TRIM_THRESHOLD
	/* Per-request buffers come and go in bursts; with glibc's defaults the
	 * top of the heap is trimmed and regrown with brk() many times a
	 * second under load. Keep up to 32 MiB of free heap, grow it 1 MiB at
	 * a time, and take buffers below 1 MiB from the heap. What a burst
	 * leaves free is given back once it has passed (nw_process_load_down). */
	mallopt(M_MMAP_THRESHOLD, 1 << 20);
	mallopt(M_TRIM_THRESHOLD, 32 << 20);
	mallopt(M_TOP_PAD, 1 << 20);
	heap.on = true;
#endif
}

bool
nw_trim_rule_step(struct nw_trim_rule *t, bool up)
{
	if (up) {
		t->now++;
		t->peak = MAX(t->peak, t->now);
		return false;
	}
	if (t->now > 0)
		t->now--;
	if (t->peak < NW_TRIM_BURST || t->now > t->peak / 4)
		return false;
	t->peak = t->now;
	return true;
}

static gboolean
trim_now(gpointer data)
{
	gint64 t0 = g_get_monotonic_time();
	char us[24];

	(void)data;
	heap.pending = 0;
	nw_json_alloc_trim();
	nw_string_pool_trim();
#ifdef M_TRIM_THRESHOLD
	/* Free pages anywhere in the heap go back, not only its top. */
	malloc_trim(0);
#endif
	heap.trims++;
	g_snprintf(us, sizeof us, "%" G_GINT64_FORMAT, g_get_monotonic_time() - t0);
	nw_log(NARWHAL_LOG_DEBUG, "heap_trimmed", "duration_us", us, NULL);
	return G_SOURCE_REMOVE;
}

void
nw_process_load_up(enum nw_load kind)
{
	if (heap.on)
		nw_trim_rule_step(&heap.loads[kind], true);
}

void
nw_process_load_down(enum nw_load kind)
{
	if (!heap.on || !nw_trim_rule_step(&heap.loads[kind], false) || heap.pending != 0)
		return;
	/* After the loop has done what is ready: the requests and
	 * connections that end in the same batch are freed by then. */
	heap.pending = g_idle_add_full(G_PRIORITY_LOW, trim_now, NULL, NULL);
}

uint64_t
nw_process_heap_trims(void)
{
	return heap.trims;
}
