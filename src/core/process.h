/* Process-wide set-up shared by the programs. */
#ifndef NW_PROCESS_H
#define NW_PROCESS_H

#include <stdbool.h>
#include <stdint.h>

/* Raise the soft limit on open descriptors to the hard limit: a router or
 * a load generator holds about two sockets per request in flight, far past
 * the usual soft limit of 1024. Returns the soft limit now in force. */
unsigned long nw_process_raise_fd_limit(void);

/* Keep freed heap for reuse rather than trimming it back to the kernel
 * after every burst, and give it back once a burst has passed (glibc; a
 * no-op elsewhere). Without this call the load notes below do nothing. */
void nw_process_tune_malloc(void);

/*
 * Giving the heap back after a burst (docs/deployment.md, "CPU and
 * memory"). A load that rose to at least NW_TRIM_BURST and then fell to a
 * quarter of its peak has left freed memory behind, resident but unused;
 * the heap is trimmed then, once, from the main loop when it is next idle.
 * A trim costs about 2 ms after 512 streams and 40 µs on a heap that has
 * just been trimmed. The burst is large so that a steady load whose
 * requests come in batches (64 alive, then none, a few times a second)
 * does not trim after every batch: with 64 that happened 35 times a
 * second in bench/router's c=64 cells, for nothing, since each batch
 * takes the memory back.
 */
#define NW_TRIM_BURST 256u

/* One kind of load: requests alive, or client connections open. */
struct nw_trim_rule {
	unsigned now;    /* alive now */
	unsigned peak;   /* the most alive at once since the last trim */
};

/* The load rose (up) or fell by one; true when the heap should be trimmed
 * now (the rule then starts over from the load it is at). */
bool nw_trim_rule_step(struct nw_trim_rule *t, bool up);

enum nw_load { NW_LOAD_REQUESTS, NW_LOAD_CONNECTIONS, NW_LOAD_KINDS };

/* The process's loads, as they change. */
void nw_process_load_up(enum nw_load kind);
void nw_process_load_down(enum nw_load kind);
/* Heap trims done so far. */
uint64_t nw_process_heap_trims(void);

#endif /* NW_PROCESS_H */
