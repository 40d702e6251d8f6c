/* jansson's allocator in the daemon: malloc with short per-size lists of
 * freed small blocks (json-alloc.c says why). */
#ifndef NW_CORE_JSON_ALLOC_H
#define NW_CORE_JSON_ALLOC_H

/* 1 when the lists are built in: they are left out under AddressSanitizer,
 * where a reused block would hide a use after free. */
#if defined(__SANITIZE_ADDRESS__)
#define NW_JSON_ALLOC_LISTS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define NW_JSON_ALLOC_LISTS 0
#endif
#endif
#ifndef NW_JSON_ALLOC_LISTS
#define NW_JSON_ALLOC_LISTS 1
#endif

/* Makes jansson allocate through the lists. Called first thing in main(),
 * before any JSON value exists; a no-op under AddressSanitizer. */
void nw_json_alloc_install(void);

/* Gives the calling thread's kept blocks back to malloc (before a heap
 * trim). */
void nw_json_alloc_trim(void);

#endif
