#include "build-config.h"

#include "core/process.h"

#include <malloc.h>
#include <sys/resource.h>

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

void
nw_process_tune_malloc(void)
{
#ifdef M_TRIM_THRESHOLD
	/* Per-request buffers come and go in bursts; with glibc's defaults the
	 * top of the heap is trimmed and regrown with brk() many times a
	 * second under load. Keep up to 32 MiB of free heap, grow it 1 MiB at
	 * a time, and take buffers below 1 MiB from the heap. */
	mallopt(M_MMAP_THRESHOLD, 1 << 20);
	mallopt(M_TRIM_THRESHOLD, 32 << 20);
	mallopt(M_TOP_PAD, 1 << 20);
#endif
}
