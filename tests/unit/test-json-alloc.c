/*
 * jansson's allocator in the daemon (src/core/json-alloc.c): freed small
 * blocks come back for the next value of their size, blocks stay plain
 * malloc blocks either way, the lists are bounded, and a trim empties
 * them. Under AddressSanitizer the lists are left out, and only the
 * plain-malloc half is checked.
 */
#include "build-config.h"

#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include <glib.h>
#include <jansson.h>

#include "core/json-alloc.h"

static void
test_reuse(void)
{
	json_t *a, *b;
	void *first;

	g_test_summary("/json-alloc/reuse: a value freed whole gives its block to the next "
	               "value of that size");
	if (!NW_JSON_ALLOC_LISTS) {
		g_test_skip("the lists are left out under AddressSanitizer");
		return;
	}
	nw_json_alloc_trim();
	a = json_string("a string long enough to be a block of its own size");
	first = (void *)json_string_value(a);
	json_decref(a);
	b = json_string("a string long enough to be a block of its own size");
	g_assert_true((void *)json_string_value(b) == first);
	json_decref(b);
}

static void
test_plain_blocks(void)
{
	json_t *doc = json_pack("{s:s, s:[i,i,i]}", "k", "v", "a", 1, 2, 3);
	char *text = json_dumps(doc, JSON_COMPACT);
	void *big;

	g_test_summary("/json-alloc/plain-blocks: what jansson allocates may go to free(), "
	               "and any malloc block to jansson's free");
	g_assert_cmpstr(text, ==, "{\"k\":\"v\",\"a\":[1,2,3]}");
	free(text); /* as callers of json_dumps do */
	json_decref(doc);
	/* A block jansson did not allocate, large or small. */
	big = malloc(4096);
	{
		json_malloc_t m;
		json_free_t f;

		json_get_alloc_funcs(&m, &f);
		f(big);
		f(malloc(24));
		f(NULL);
		void *empty = m(0);

		g_assert_nonnull(empty);
		f(empty);
	}
}

static void
test_bounded(void)
{
	json_malloc_t m;
	json_free_t f;
	void *blocks[1000];
	GHashTable *seen;
	unsigned again = 0;

	g_test_summary("/json-alloc/bounded: at most a fixed number of blocks a size wait");
	if (!NW_JSON_ALLOC_LISTS) {
		g_test_skip("the lists are left out under AddressSanitizer");
		return;
	}
	json_get_alloc_funcs(&m, &f);
	nw_json_alloc_trim();
	for (unsigned i = 0; i < G_N_ELEMENTS(blocks); i++)
		blocks[i] = m(40);
	seen = g_hash_table_new(NULL, NULL);
	for (unsigned i = 0; i < G_N_ELEMENTS(blocks); i++) {
		g_hash_table_add(seen, blocks[i]);
		f(blocks[i]);
	}
	/* Fewer come back than went: the rest went to free(). */
	for (unsigned i = 0; i < G_N_ELEMENTS(blocks); i++) {
		blocks[i] = m(40);
		if (g_hash_table_contains(seen, blocks[i]))
			again++;
	}
	g_assert_cmpuint(again, >, 0);
	g_assert_cmpuint(again, <, G_N_ELEMENTS(blocks) / 2);
	for (unsigned i = 0; i < G_N_ELEMENTS(blocks); i++)
		f(blocks[i]);
	g_hash_table_destroy(seen);
	nw_json_alloc_trim();
	/* After the trim blocks come from malloc again, of the size asked. */
	blocks[0] = m(40);
	g_assert_true(malloc_usable_size(blocks[0]) >= 40);
	f(blocks[0]);
	nw_json_alloc_trim();
}

int
main(int argc, char **argv)
{
	nw_json_alloc_install();
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/json-alloc/reuse", test_reuse);
	g_test_add_func("/json-alloc/plain-blocks", test_plain_blocks);
	g_test_add_func("/json-alloc/bounded", test_bounded);
	return g_test_run();
}
