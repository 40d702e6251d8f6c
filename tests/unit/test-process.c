/*
 * The process's heap trim rule (core/process.h): when a burst of load has
 * passed, and only then. Counters, no clock.
 */
#include "build-config.h"

#include <glib.h>

#include "core/process.h"

/* Steps the rule from its load to `to`, one request at a time; returns how
 * many trims it asked for on the way. */
static unsigned
walk(struct nw_trim_rule *t, unsigned to)
{
	unsigned trims = 0;

	while (t->now < to)
		trims += nw_trim_rule_step(t, true);
	while (t->now > to)
		trims += nw_trim_rule_step(t, false);
	return trims;
}

static void
test_after_a_burst(void)
{
	const unsigned b = NW_TRIM_BURST;
	struct nw_trim_rule t = { 0 };

	/* Issue 15: memory comes back once many open streams have ended. */
	g_test_summary("A load that rose to NW_TRIM_BURST or more asks for a trim when it falls "
	               "to a quarter of its peak, once, and again only after a new burst");
	g_assert_cmpuint(walk(&t, 8 * b), ==, 0);
	g_assert_cmpuint(walk(&t, 2 * b + 1), ==, 0);
	g_assert_true(nw_trim_rule_step(&t, false)); /* 2b: a quarter of 8b */
	g_assert_cmpuint(t.peak, ==, 2 * b);
	/* Falling on: a quarter of 2b is the end of a burst too, a quarter of
	 * b / 2 is not (b / 2 is below a burst). */
	g_assert_cmpuint(walk(&t, 0), ==, 1);
	g_assert_cmpuint(t.peak, ==, b / 2);
	g_assert_cmpuint(walk(&t, 4 * b), ==, 0);
	g_assert_cmpuint(walk(&t, 0), ==, 2); /* at b, then at b / 4 */
}

static void
test_not_per_request(void)
{
	const unsigned b = NW_TRIM_BURST;
	struct nw_trim_rule t = { 0 };
	unsigned trims = 0;

	g_test_summary("A load below NW_TRIM_BURST that comes and goes, or a steady one, never "
	               "asks for a trim; a load of exactly NW_TRIM_BURST does once");
	for (int i = 0; i < 10000; i++)
		trims += walk(&t, i % 2 ? b - 1 : 0);
	g_assert_cmpuint(trims, ==, 0);
	g_assert_cmpuint(walk(&t, 3 * b), ==, 0);
	for (int i = 0; i < 10000; i++)
		trims += walk(&t, i % 2 ? 3 * b : 2 * b);
	g_assert_cmpuint(trims, ==, 0);
	g_assert_cmpuint(walk(&t, 0), ==, 1); /* at 3b / 4, below a burst after it */
	g_assert_cmpuint(walk(&t, b), ==, 0);
	g_assert_cmpuint(walk(&t, 0), ==, 1);
	/* Ending more than began is counted as nothing. */
	g_assert_false(nw_trim_rule_step(&t, false));
	g_assert_cmpuint(t.now, ==, 0);
}

static void
test_off_without_tuning(void)
{
	g_test_summary("Without nw_process_tune_malloc the process's loads ask for nothing");
	for (unsigned i = 0; i < 4 * NW_TRIM_BURST; i++)
		nw_process_load_up(NW_LOAD_REQUESTS);
	for (unsigned i = 0; i < 4 * NW_TRIM_BURST; i++)
		nw_process_load_down(NW_LOAD_REQUESTS);
	while (g_main_context_iteration(NULL, FALSE))
		;
	g_assert_cmpuint(nw_process_heap_trims(), ==, 0);
}

static void
test_process_trims_when_idle(void)
{
	g_test_summary("With nw_process_tune_malloc, the end of a burst of connections trims the "
	               "heap once, from the main loop, not inside the call that ended it");
	nw_process_tune_malloc();
	for (unsigned i = 0; i < 2 * NW_TRIM_BURST; i++)
		nw_process_load_up(NW_LOAD_CONNECTIONS);
	for (unsigned i = 0; i < 2 * NW_TRIM_BURST; i++)
		nw_process_load_down(NW_LOAD_CONNECTIONS);
	g_assert_cmpuint(nw_process_heap_trims(), ==, 0);
	while (g_main_context_iteration(NULL, FALSE))
		;
	g_assert_cmpuint(nw_process_heap_trims(), ==, 1);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/process/trim/after-a-burst", test_after_a_burst);
	g_test_add_func("/process/trim/not-per-request", test_not_per_request);
	g_test_add_func("/process/trim/off-without-tuning", test_off_without_tuning);
	g_test_add_func("/process/trim/when-idle", test_process_trims_when_idle);
	return g_test_run();
}
