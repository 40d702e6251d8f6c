/* Process-wide set-up shared by the programs. */
#ifndef NW_PROCESS_H
#define NW_PROCESS_H

/* Raise the soft limit on open descriptors to the hard limit: a router or
 * a load generator holds about two sockets per request in flight, far past
 * the usual soft limit of 1024. Returns the soft limit now in force. */
unsigned long nw_process_raise_fd_limit(void);

/* Keep freed heap for reuse rather than trimming it back to the kernel
 * after every burst (glibc; a no-op elsewhere). */
void nw_process_tune_malloc(void);

#endif /* NW_PROCESS_H */
