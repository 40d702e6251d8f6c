/* jansson's allocator in the daemon: malloc with short per-size lists of
 * freed small blocks (json-alloc.c says why). */
#ifndef NW_CORE_JSON_ALLOC_H
#define NW_CORE_JSON_ALLOC_H

#include "core/sanitizer.h"

/* 1 when the lists are built in: they are left out under AddressSanitizer
 * (sanitizer.h). */
#define NW_JSON_ALLOC_LISTS (!NW_UNDER_ASAN)

/* Makes jansson allocate through the lists. Called first thing in main(),
 * before any JSON value exists; a no-op under AddressSanitizer. */
void nw_json_alloc_install(void);

/* Gives the calling thread's kept blocks back to malloc (before a heap
 * trim). */
void nw_json_alloc_trim(void);

#endif
