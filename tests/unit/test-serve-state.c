/*
 * The request lifecycle's transition table (src/serve/request.c, issue 9:
 * one state field changed by one transition function). Defends: a decided
 * request never returns to work, DONE is never left, no retry after the
 * stream is committed. And a concurrent pair's own state (src/serve/pair.c):
 * a decode failure is held only while the prefill leg is out, once, and
 * only when the prefill engine's answer could change what the client gets.
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

static void
test_pair_holds_only_beside_a_prefill(void)
{
	/* HOLDING is entered only from OUT (a prefill leg out), never twice,
	 * and every state can be released back to IDLE. */
	for (int from = 0; from < NW_PAIR_N_STATES; from++) {
		g_assert_cmpint(nw_pair_transition_legal((nw_pair_state)from, NW_PAIR_HOLDING), ==,
		                from == NW_PAIR_OUT);
		g_assert_cmpint(nw_pair_transition_legal((nw_pair_state)from, NW_PAIR_IDLE), ==,
		                from != NW_PAIR_IDLE);
	}
	/* A new prefill leg only after the last one is over. */
	g_assert_true(nw_pair_transition_legal(NW_PAIR_IDLE, NW_PAIR_OUT));
	g_assert_false(nw_pair_transition_legal(NW_PAIR_HOLDING, NW_PAIR_OUT));
	g_assert_false(nw_pair_transition_legal(NW_PAIR_OUT, NW_PAIR_OUT));
	g_assert_false(nw_pair_transition_legal(NW_PAIR_N_STATES, NW_PAIR_IDLE));
}

static void
test_pair_holds_what_the_prefill_may_explain(void)
{
	/* What the decode engine may fail through its prefill engine's
	 * refusal: an error status or event, a cut or unreadable answer,
	 * the first-token or gap clock. */
	g_assert_true(nw_pair_holds(NW_FAIL_STATUS, 500));
	g_assert_true(nw_pair_holds(NW_FAIL_STATUS, 0));
	g_assert_true(nw_pair_holds(NW_FAIL_TRANSPORT, 0));
	g_assert_true(nw_pair_holds(NW_FAIL_PERMANENT, 501));
	g_assert_true(nw_pair_holds(NW_FAIL_PERMANENT, 404));
	g_assert_true(nw_pair_holds(NW_FAIL_BAD_RESPONSE, 200));
	g_assert_true(nw_pair_holds(NW_FAIL_TOO_LARGE, 200));
	g_assert_true(nw_pair_holds(NW_FAIL_FIRST_TOKEN, 0));
	g_assert_true(nw_pair_holds(NW_FAIL_READ_GAP, 0));
	/* Already the client's own error (spec 4.3: a 400 either way). */
	g_assert_false(nw_pair_holds(NW_FAIL_CONTEXT, 400));
	g_assert_false(nw_pair_holds(NW_FAIL_PERMANENT, 400));
	g_assert_false(nw_pair_holds(NW_FAIL_PERMANENT, 422));
	/* The decode engine never had the request. */
	g_assert_false(nw_pair_holds(NW_FAIL_CONNECT, 0));
	/* Narwhal's own ends never wait. */
	g_assert_false(nw_pair_holds(NW_FAIL_DEADLINE, 0));
	g_assert_false(nw_pair_holds(NW_FAIL_CLIENT, 0));
	g_assert_false(nw_pair_holds(NW_FAIL_SHUTDOWN, 0));
	g_assert_false(nw_pair_holds(NW_FAIL_POOL, 0));
	g_assert_false(nw_pair_holds(NW_FAIL_INTERNAL, 0));
	g_assert_false(nw_pair_holds(NW_FAIL_HANDOFF, 0));
	g_assert_false(nw_pair_holds(NW_FAIL_PREFILL_TIMEOUT, 0));
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/serve/state/done-is-final", test_done_is_final);
	g_test_add_func("/serve/state/decided-never-works-again", test_decided_never_works_again);
	g_test_add_func("/serve/state/no-retry-after-commit", test_no_retry_after_commit);
	g_test_add_func("/serve/state/working-states-can-end", test_working_states_can_end);
	g_test_add_func("/serve/state/pair-holds-only-beside-a-prefill",
	                test_pair_holds_only_beside_a_prefill);
	g_test_add_func("/serve/state/pair-holds-what-the-prefill-may-explain",
	                test_pair_holds_what_the_prefill_may_explain);
	return g_test_run();
}
