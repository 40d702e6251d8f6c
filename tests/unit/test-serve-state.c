/*
 * The request lifecycle's transition table (src/serve/request.c, issue 9:
 * one state field changed by one transition function). Defends: a decided
 * request never returns to work, DONE is never left, no retry after the
 * stream is committed.
 */
#include "build-config.h"

#include <glib.h>

#include "serve/request.h"

static void
test_done_is_final(void)
{
	for (int to = 0; to < NW_REQ_N_STATES; to++)
		g_assert_false(nw_req_transition_legal(NW_REQ_DONE, (nw_req_state)to));
}

static void
test_decided_never_works_again(void)
{
	/* DONE was overwritten by RESPONDING on refusal paths (issue 9). */
	for (int to = NW_REQ_READING; to < NW_REQ_STREAMING; to++) {
		g_assert_false(nw_req_transition_legal(NW_REQ_RESPONDING, (nw_req_state)to));
		g_assert_false(nw_req_transition_legal(NW_REQ_STREAM_ENDING, (nw_req_state)to));
	}
	g_assert_false(nw_req_transition_legal(NW_REQ_RESPONDING, NW_REQ_STREAM_ENDING));
	g_assert_false(nw_req_transition_legal(NW_REQ_STREAM_ENDING, NW_REQ_RESPONDING));
	g_assert_true(nw_req_transition_legal(NW_REQ_RESPONDING, NW_REQ_DONE));
	g_assert_true(nw_req_transition_legal(NW_REQ_STREAM_ENDING, NW_REQ_DONE));
}

static void
test_no_retry_after_commit(void)
{
	/* Spec 4.2: retries only before visible output. */
	g_assert_false(nw_req_transition_legal(NW_REQ_STREAMING, NW_REQ_BACKOFF));
	g_assert_false(nw_req_transition_legal(NW_REQ_STREAMING, NW_REQ_RESPONDING));
	g_assert_true(nw_req_transition_legal(NW_REQ_STREAMING, NW_REQ_STREAM_ENDING));
	g_assert_true(nw_req_transition_legal(NW_REQ_DECODE, NW_REQ_STREAMING));
	g_assert_false(nw_req_transition_legal(NW_REQ_PREFILL, NW_REQ_STREAMING));
}

static void
test_working_states_can_end(void)
{
	for (int from = NW_REQ_READING; from < NW_REQ_STREAMING; from++) {
		g_assert_true(nw_req_transition_legal((nw_req_state)from, NW_REQ_RESPONDING));
		g_assert_false(nw_req_transition_legal((nw_req_state)from, NW_REQ_DONE));
	}
	g_assert_true(nw_req_transition_legal(NW_REQ_BACKOFF, NW_REQ_PLACING));
	g_assert_true(nw_req_transition_legal(NW_REQ_PREFILL, NW_REQ_PLACING));
	g_assert_false(nw_req_transition_legal(NW_REQ_QUEUED, NW_REQ_READING));
	g_assert_cmpstr(nw_req_state_name(NW_REQ_STREAM_ENDING), ==, "stream_ending");
	g_assert_cmpstr(nw_req_state_name(NW_REQ_N_STATES), ==, "invalid");
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/serve/state/done-is-final", test_done_is_final);
	g_test_add_func("/serve/state/decided-never-works-again", test_decided_never_works_again);
	g_test_add_func("/serve/state/no-retry-after-commit", test_no_retry_after_commit);
	g_test_add_func("/serve/state/working-states-can-end", test_working_states_can_end);
	return g_test_run();
}
