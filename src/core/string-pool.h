/* Scratch GStrings kept for reuse on the request path (string-pool.c
 * says why). */
#ifndef NW_CORE_STRING_POOL_H
#define NW_CORE_STRING_POOL_H

#include <glib.h>

/* An empty string: a kept one when there is one, else a new one. */
GString *nw_string_take(void);

/* Gives s back (NULL is fine): kept, emptied, while it is small and the
 * thread's list has room; freed otherwise. */
void nw_string_give(GString *s);

/* Frees the calling thread's kept strings (before a heap trim). */
void nw_string_pool_trim(void);

/* How many strings the calling thread keeps now (for tests). */
unsigned nw_string_pool_kept(void);

#endif
