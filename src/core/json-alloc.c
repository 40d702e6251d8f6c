/*
 * jansson's allocator in the daemon: malloc, with a short list of freed
 * small blocks kept per size for the next value of that size.
 *
 * Why: a request builds and drops a dozen JSON trees (its body, the engine
 * bodies, the prefill answer, chunks, the answer), some 150 values, each a
 * malloc and a free. The frees come in bursts of a whole tree, past what
 * glibc's per-thread cache holds (7 blocks a size), so most went the slow
 * way through the arenas (bench/router/README.md, "Issue 15").
 *
 * Every block is a plain malloc block, so a block freed with free() (as a
 * json_dumps() result may be) or one freed here that malloc gave is fine.
 * A freed block is listed by its usable size, which malloc_usable_size()
 * tells, so nothing is stored in the block besides the list link while it
 * waits. The lists are per thread and bounded (at most about 1 MiB held in
 * all); nw_json_alloc_trim() gives them back to malloc.
 *
 * Under AddressSanitizer the lists are left out: a reused block would hide
 * a use after free from it.
 */
#include "build-config.h"

#include "core/json-alloc.h"

#include <malloc.h>
#include <stdlib.h>

#include <jansson.h>

/* Sizes in steps of 16 bytes up to 512: jansson's values, hash table
 * pairs and short strings. Larger blocks go straight to malloc. */
#define STEP 16u
#define CLASSES 32u
#define KEEP 128u /* blocks kept per size: ~1 MiB at most */

struct block {
	struct block *next;
};

static __thread struct {
	struct block *head[CLASSES];
	unsigned count[CLASSES];
} lists;

static void *
alloc_block(size_t size)
{
	size_t c = size == 0 ? 0 : (size - 1) / STEP;
	struct block *b;

	if (c >= CLASSES)
		return malloc(size);
	b = lists.head[c];
	if (b != NULL) {
		lists.head[c] = b->next;
		lists.count[c]--;
		return b;
	}
	return malloc((c + 1) * STEP);
}

static void
free_block(void *p)
{
	size_t usable, c;
	struct block *b = p;

	if (p == NULL)
		return;
	usable = malloc_usable_size(p);
	/* The largest size the block can serve. */
	c = usable / STEP;
	if (c == 0 || c > CLASSES || lists.count[c - 1] >= KEEP) {
		free(p);
		return;
	}
	c--;
	b->next = lists.head[c];
	lists.head[c] = b;
	lists.count[c]++;
}

void
nw_json_alloc_install(void)
{
	if (NW_JSON_ALLOC_LISTS)
		json_set_alloc_funcs(alloc_block, free_block);
}

void
nw_json_alloc_trim(void)
{
	for (unsigned c = 0; c < CLASSES; c++) {
		while (lists.head[c] != NULL) {
			struct block *b = lists.head[c];

			lists.head[c] = b->next;
			free(b);
		}
		lists.count[c] = 0;
	}
}
