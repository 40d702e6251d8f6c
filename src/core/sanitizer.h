/* NW_UNDER_ASAN: 1 when built with AddressSanitizer. The request path's
 * free lists (json-alloc.c, string-pool.c) keep nothing then: a reused
 * block would hide a use after free from it. */
#ifndef NW_CORE_SANITIZER_H
#define NW_CORE_SANITIZER_H

#if defined(__SANITIZE_ADDRESS__)
#define NW_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define NW_UNDER_ASAN 1
#endif
#endif
#ifndef NW_UNDER_ASAN
#define NW_UNDER_ASAN 0
#endif

#endif
