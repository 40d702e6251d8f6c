/*
 * Scratch GStrings kept for reuse (src/core/string-pool.c): a string given
 * back comes back empty to the next taker, a grown one is freed instead,
 * the list is bounded, and a trim empties it. Under AddressSanitizer
 * nothing is kept, and only that is checked.
 */
#include "build-config.h"

#include <glib.h>

#include "core/sanitizer.h"
#include "core/string-pool.h"

static void
test_reuse(void)
{
	GString *a, *b;

	g_test_summary("/string-pool/reuse: a string given back comes back empty, "
	               "with its buffer");
	nw_string_pool_trim();
	a = nw_string_take();
	g_string_append(a, "a token's text");
	nw_string_give(a);
	if (NW_UNDER_ASAN) {
		g_assert_cmpuint(nw_string_pool_kept(), ==, 0);
		return;
	}
	g_assert_cmpuint(nw_string_pool_kept(), ==, 1);
	b = nw_string_take();
	g_assert_true(b == a);
	g_assert_cmpuint(b->len, ==, 0);
	g_assert_cmpstr(b->str, ==, "");
	g_assert_cmpuint(nw_string_pool_kept(), ==, 0);
	nw_string_give(b);
	nw_string_give(NULL); /* as a clear of a never-filled slot does */
	g_assert_cmpuint(nw_string_pool_kept(), ==, 1);
	nw_string_pool_trim();
	g_assert_cmpuint(nw_string_pool_kept(), ==, 0);
}

static void
test_large_freed(void)
{
	GString *big = nw_string_take();

	g_test_summary("/string-pool/large-freed: a string grown past the kept size is "
	               "freed, so a large answer does not stay held");
	nw_string_pool_trim();
	for (int i = 0; i < 1000; i++)
		g_string_append(big, "0123456789");
	nw_string_give(big);
	g_assert_cmpuint(nw_string_pool_kept(), ==, 0);
}

static void
test_bounded(void)
{
	GString *s[300];

	g_test_summary("/string-pool/bounded: the kept list stops growing at its bound");
	nw_string_pool_trim();
	for (unsigned i = 0; i < G_N_ELEMENTS(s); i++)
		s[i] = nw_string_take();
	for (unsigned i = 0; i < G_N_ELEMENTS(s); i++)
		nw_string_give(s[i]);
	if (!NW_UNDER_ASAN) {
		g_assert_cmpuint(nw_string_pool_kept(), >, 0);
		g_assert_cmpuint(nw_string_pool_kept(), <, G_N_ELEMENTS(s));
	} else {
		g_assert_cmpuint(nw_string_pool_kept(), ==, 0);
	}
	nw_string_pool_trim();
	g_assert_cmpuint(nw_string_pool_kept(), ==, 0);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/string-pool/reuse", test_reuse);
	g_test_add_func("/string-pool/large-freed", test_large_freed);
	g_test_add_func("/string-pool/bounded", test_bounded);
	return g_test_run();
}
