/*
 * The shared SSE framer (src/net/sse.c) as the relay uses it: events from
 * chunks split anywhere, event boundaries in the byte stream, stopping at
 * an event, and the bound on one event.
 */
#include "build-config.h"

#include <string.h>

#include "net/sse.h"

struct seen {
	GPtrArray *events;
	int stop_at; /* stop after this many events; -1: never */
};

static bool
collect(void *data, const char *payload, size_t len)
{
	struct seen *s = data;

	g_ptr_array_add(s->events, g_strndup(payload, len));
	return s->stop_at < 0 || (int)s->events->len < s->stop_at;
}

/* Feed text in pieces of every size and check the events each time. */
static void
check_split(const char *text, const char *const *want)
{
	size_t len = strlen(text);

	for (size_t piece = 1; piece <= len; piece++) {
		struct seen s = { g_ptr_array_new_with_free_func(g_free), -1 };
		struct nw_sse p;
		guint n = 0;

		nw_sse_init(&p, collect, &s);
		for (size_t at = 0; at < len; at += piece) {
			/* Each piece from a buffer of its own, spoilt once fed:
			 * the framer keeps no pointer into a caller's bytes. */
			size_t n_piece = MIN(piece, len - at);
			char *copy = g_memdup2(text + at, n_piece);

			g_assert_true(nw_sse_feed(&p, copy, n_piece));
			memset(copy, '#', n_piece);
			g_free(copy);
		}
		g_assert_true(nw_sse_at_boundary(&p));
		nw_sse_finish(&p);
		for (; want[n]; n++)
			g_assert_cmpstr(g_ptr_array_index(s.events, n), ==, want[n]);
		g_assert_cmpuint(s.events->len, ==, n);
		nw_sse_clear(&p);
		g_ptr_array_free(s.events, TRUE);
	}
}

static void
test_framing(void)
{
	const char *const want[] = { "{\"a\":1}", "x\ny", "[DONE]", NULL };

	g_test_summary("/serve/sse/framing: LF, CR LF and CR line ends, joined data lines, "
	               "comments and other fields, split at every byte");
	check_split("data: {\"a\":1}\n\n: keep-alive\n\nevent: e\ndata:x\ndata: y\n\n"
	            "data: [DONE]\n\n", want);
	check_split("data: {\"a\":1}\r\n\r\ndata:x\r\ndata: y\r\n\r\ndata: [DONE]\r\n\r\n", want);
	check_split("data: {\"a\":1}\r\rdata:x\rdata: y\r\rdata: [DONE]\r\r", want);
}

static void
test_boundary(void)
{
	struct seen s = { g_ptr_array_new_with_free_func(g_free), -1 };
	struct nw_sse p;
	const char *a = "data: one\n\ndata: tw";
	const char *b = "o\n\ndata: thr";
	const char *c = "\r";
	const char *d = "\n\r\n";

	g_test_summary("/serve/sse/boundary: the bytes of a chunk up to its last event end");
	nw_sse_init(&p, collect, &s);
	g_assert_true(nw_sse_feed(&p, a, strlen(a)));
	g_assert_cmpuint(p.boundary, ==, strlen("data: one\n\n"));
	g_assert_false(nw_sse_at_boundary(&p));
	g_assert_true(nw_sse_feed(&p, b, strlen(b)));
	g_assert_cmpuint(p.boundary, ==, strlen("o\n\n"));
	g_assert_true(nw_sse_feed(&p, c, 1));
	g_assert_cmpuint(p.boundary, ==, 0); /* a line ended, not an event */
	g_assert_true(nw_sse_feed(&p, d, 3));
	/* "\n" finishes the CR LF of the data line; "\r\n" is the blank line. */
	g_assert_cmpuint(p.boundary, ==, 3);
	g_assert_true(nw_sse_at_boundary(&p));
	g_assert_cmpuint(s.events->len, ==, 3);
	g_assert_cmpstr(g_ptr_array_index(s.events, 2), ==, "thr");
	/* A CR blank line whose LF comes in the next chunk: the pair stays whole. */
	g_assert_true(nw_sse_feed(&p, "data: 4\n\r", 9));
	g_assert_cmpuint(p.boundary, ==, 9);
	g_assert_true(nw_sse_feed(&p, "\ndata: 5", 8));
	g_assert_cmpuint(p.boundary, ==, 1);
	nw_sse_clear(&p);
	g_ptr_array_free(s.events, TRUE);
}

static void
test_stop(void)
{
	struct seen s = { g_ptr_array_new_with_free_func(g_free), 2 };
	struct nw_sse p;
	const char *text = "data: 1\n\ndata: 2\n\ndata: 3\n\n";

	g_test_summary("/serve/sse/stop: a callback stops the chunk at its event; the "
	               "boundary is that event's end and nothing more is read");
	nw_sse_init(&p, collect, &s);
	g_assert_false(nw_sse_feed(&p, text, strlen(text)));
	g_assert_cmpuint(p.boundary, ==, strlen("data: 1\n\ndata: 2\n\n"));
	g_assert_cmpuint(s.events->len, ==, 2);
	g_assert_false(nw_sse_feed(&p, text, strlen(text)));
	nw_sse_finish(&p);
	g_assert_cmpuint(s.events->len, ==, 2);
	nw_sse_reset(&p);
	s.stop_at = -1;
	g_assert_true(nw_sse_feed(&p, text, strlen(text)));
	g_assert_cmpuint(s.events->len, ==, 5);
	nw_sse_clear(&p);
	g_ptr_array_free(s.events, TRUE);
}

static void
test_bound(void)
{
	struct seen s = { g_ptr_array_new_with_free_func(g_free), -1 };
	struct nw_sse p;
	char big[100];

	g_test_summary("/serve/sse/bound: an event above the bound fails the stream, "
	               "however its lines come");
	memset(big, 'x', sizeof big);
	nw_sse_init(&p, collect, &s);
	nw_sse_set_max_event(&p, 64);
	g_assert_true(nw_sse_feed(&p, "data: ok\n\n", 10));
	g_assert_true(nw_sse_feed(&p, "data: ", 6));
	g_assert_false(nw_sse_feed(&p, big, sizeof big));
	g_assert_true(p.overflow);
	g_assert_false(nw_sse_feed(&p, "\n\n", 2));
	nw_sse_finish(&p);
	g_assert_cmpuint(s.events->len, ==, 1);
	/* Two data lines of one chunk, each under the bound, together over. */
	nw_sse_reset(&p);
	g_assert_true(nw_sse_feed(&p, "data: 0123456789012345678901234567890123456789\n", 47));
	g_assert_false(nw_sse_feed(&p, "data: 01234567890123456789\n\n", 29));
	g_assert_true(p.overflow);
	g_assert_cmpuint(s.events->len, ==, 1);
	nw_sse_reset(&p);
	g_assert_false(nw_sse_feed(&p, "data: 0123456789012345678901234567890123456789\n"
	                               "data: 01234567890123456789\n\n", 76));
	g_assert_true(p.overflow);
	g_assert_cmpuint(s.events->len, ==, 1);
	nw_sse_clear(&p);
	g_ptr_array_free(s.events, TRUE);
}

static void
test_bound_counts_every_line(void)
{
	struct seen s = { g_ptr_array_new_with_free_func(g_free), -1 };
	struct nw_sse p;

	g_test_summary("/serve/sse/bound-counts-every-line: comments and fields other than "
	               "data count towards the bound on one event, so an engine cannot hold an "
	               "event open without end; keep-alive events each end and start again at 0");
	nw_sse_init(&p, collect, &s);
	nw_sse_set_max_event(&p, 64);
	/* Keep-alive comments, each its own event: far more than the bound
	 * in all, never too many in one event. */
	for (int i = 0; i < 100; i++)
		g_assert_true(nw_sse_feed(&p, ": keep-alive\n\n", 14));
	g_assert_false(p.overflow);
	/* Comment lines with no blank line between them: one event. */
	for (int i = 0; i < 4; i++)
		g_assert_true(nw_sse_feed(&p, ": keep-alive\n", 13));
	g_assert_false(nw_sse_feed(&p, ": keep-alive\n: keep-alive\n", 26));
	g_assert_true(p.overflow);
	g_assert_cmpuint(s.events->len, ==, 0);
	/* event:, id: and retry: lines likewise, in one chunk or in pieces. */
	nw_sse_reset(&p);
	g_assert_false(nw_sse_feed(&p, "event: a\nid: 1\nretry: 5\nevent: b\nevent: c\n"
	                               "event: d\nevent: e\nevent: f\nevent: g\n", 78));
	g_assert_true(p.overflow);
	nw_sse_reset(&p);
	g_assert_true(nw_sse_feed(&p, "event: tokens\nid: 17\n", 21));
	g_assert_true(nw_sse_feed(&p, "data: 0123456789\n\n", 18));
	g_assert_cmpuint(s.events->len, ==, 1);
	/* A data line that fits alone does not fit after an id line. */
	g_assert_true(nw_sse_feed(&p, "id: 18181\n", 10));
	g_assert_false(nw_sse_feed(&p, "data: 01234567890123456789012345678901234567890123456789\n", 57));
	g_assert_true(p.overflow);
	g_assert_cmpuint(s.events->len, ==, 1);
	nw_sse_clear(&p);
	g_ptr_array_free(s.events, TRUE);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/serve/sse/framing", test_framing);
	g_test_add_func("/serve/sse/boundary", test_boundary);
	g_test_add_func("/serve/sse/stop", test_stop);
	g_test_add_func("/serve/sse/bound", test_bound);
	g_test_add_func("/serve/sse/bound-counts-every-line", test_bound_counts_every_line);
	return g_test_run();
}
