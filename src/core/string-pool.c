/*
 * Scratch GStrings kept for reuse on the request path.
 *
 * Why: a non-streamed answer's SSE framer, chunk shape, matched text and
 * answer text each took a new GString and grew it from nothing: about
 * twenty malloc, realloc and free calls a request, many of them past what
 * glibc's per-thread cache keeps (bench/router/README.md, "Issue 15").
 * A string given back keeps its buffer for the next taker.
 *
 * The list is per thread and bounded in count and in each string's size,
 * so it holds at most KEEP * KEEP_BYTES (512 KiB); nw_string_pool_trim()
 * empties it with the heap trim. Under AddressSanitizer nothing is kept,
 * as with jansson's lists (sanitizer.h).
 */
#include "build-config.h"

#include "core/string-pool.h"

#include "core/sanitizer.h"

#define KEEP 128u
#define KEEP_BYTES 4096u /* a string grown past this is freed, not kept */

static __thread struct {
	GString *s[KEEP];
	unsigned n;
} spare;

GString *
nw_string_take(void)
{
	if (spare.n > 0)
		return spare.s[--spare.n];
	return g_string_new(NULL);
}

void
nw_string_give(GString *s)
{
	if (s == NULL)
		return;
	if (!NW_UNDER_ASAN && s->allocated_len <= KEEP_BYTES && spare.n < KEEP) {
		g_string_truncate(s, 0);
		spare.s[spare.n++] = s;
		return;
	}
	g_string_free(s, TRUE);
}

void
nw_string_pool_trim(void)
{
	while (spare.n > 0)
		g_string_free(spare.s[--spare.n], TRUE);
}

unsigned
nw_string_pool_kept(void)
{
	return spare.n;
}
