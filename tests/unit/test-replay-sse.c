/*
 * The SSE reader: a vLLM-style stream (completions and chat) split at
 * every byte boundary, at two boundaries, and into random pieces, must give
 * the same events; CR LF, CR and LF line ends (including a CR LF split
 * across chunks), comments, multi-line data, other fields, [DONE], in-band
 * errors (nested and flat), the usage chunk with empty choices, a stream
 * without [DONE], an oversized event, and the timing it yields.
 */
#include "build-config.h"

#include <math.h>
#include <string.h>

#include "tools/replay/sse.h"
#include "tools/replay/stats.h"

static const char completion_stream[] =
	": keep-alive comment\n\n"
	"data: {\"id\":\"cmpl-replay-1\",\"object\":\"text_completion\",\"created\":1,"
	"\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":\" abcd\",\"logprobs\":null,"
	"\"finish_reason\":null}]}\n\n"
	"data: {\"id\":\"cmpl-replay-1\",\"choices\":[{\"index\":0,\"text\":\" efgh\"}]}\r\n\r\n"
	"event: message\nid: 7\nretry: 100\n"
	"data: {\"id\":\"cmpl-replay-1\",\"choices\":[{\"index\":0,\"text\":\"\"}]}\n\n"
	"data:{\"id\":\"cmpl-replay-1\",\"choices\":[{\"index\":0,\"text\":\" ijkl\","
	"\"finish_reason\":\"length\"}]}\r\r"
	"data: {\"id\":\"cmpl-replay-1\",\"object\":\"text_completion\",\"choices\":[],"
	"\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":3,\"total_tokens\":14}}\n\n"
	"data: [DONE]\n\n";

struct collected {
	GPtrArray *events;
};

static void
collect(void *data, const char *payload, size_t len)
{
	struct collected *c = data;

	g_ptr_array_add(c->events, g_strndup(payload, len));
}

/* Feed text in pieces cut at the given offsets; return the events. */
static GPtrArray *
feed_cut(const char *text, const size_t *cuts, guint ncuts)
{
	struct collected c = { g_ptr_array_new_with_free_func(g_free) };
	struct rp_sse p;
	size_t len = strlen(text), at = 0;

	rp_sse_init(&p, collect, &c);
	for (guint i = 0; i <= ncuts; i++) {
		size_t end = i < ncuts ? cuts[i] : len;

		g_assert_true(rp_sse_feed(&p, text + at, end - at));
		at = end;
	}
	rp_sse_finish(&p);
	rp_sse_clear(&p);
	return c.events;
}

static void
assert_same(GPtrArray *a, GPtrArray *b)
{
	g_assert_cmpuint(a->len, ==, b->len);
	for (guint i = 0; i < a->len; i++)
		g_assert_cmpstr(g_ptr_array_index(a, i), ==, g_ptr_array_index(b, i));
}

static void
test_framing(void)
{
	GPtrArray *whole = feed_cut(completion_stream, NULL, 0);
	size_t len = strlen(completion_stream);
	GRand *rng = g_rand_new_with_seed(4);

	/* Five data events, then [DONE]; comment and empty lines give none. */
	g_assert_cmpuint(whole->len, ==, 6);
	g_assert_true(g_str_has_prefix(g_ptr_array_index(whole, 0), "{\"id\""));
	g_assert_true(g_str_has_prefix(g_ptr_array_index(whole, 3), "{\"id\"")); /* "data:" no space */
	g_assert_cmpstr(g_ptr_array_index(whole, 5), ==, "[DONE]");

	/* Every single cut, and every pair of cuts, gives the same events. */
	for (size_t i = 0; i <= len; i++) {
		GPtrArray *got = feed_cut(completion_stream, &i, 1);

		assert_same(whole, got);
		g_ptr_array_free(got, TRUE);
	}
	for (size_t i = 0; i <= len; i += 3) {
		for (size_t j = i; j <= len; j += 7) {
			size_t cuts[2] = { i, j };
			GPtrArray *got = feed_cut(completion_stream, cuts, 2);

			assert_same(whole, got);
			g_ptr_array_free(got, TRUE);
		}
	}
	/* One byte at a time, and random pieces. */
	{
		size_t *cuts = g_new(size_t, len);
		GPtrArray *got;

		for (size_t i = 0; i < len; i++)
			cuts[i] = i;
		got = feed_cut(completion_stream, cuts, (guint)len);
		assert_same(whole, got);
		g_ptr_array_free(got, TRUE);
		for (int round = 0; round < 200; round++) {
			guint n = 0;

			for (size_t at = 0; at < len; n++) {
				at += (size_t)g_rand_int_range(rng, 1, 40);
				cuts[n] = MIN(at, len);
			}
			got = feed_cut(completion_stream, cuts, n);
			assert_same(whole, got);
			g_ptr_array_free(got, TRUE);
		}
		g_free(cuts);
	}
	g_rand_free(rng);
	g_ptr_array_free(whole, TRUE);
}

static void
test_framing_edges(void)
{
	GPtrArray *ev;

	/* Multi-line data joins with LF; a lone CR ends a line. */
	ev = feed_cut("data: a\ndata: b\r\rdata:  c\n\n", NULL, 0);
	g_assert_cmpuint(ev->len, ==, 2);
	g_assert_cmpstr(g_ptr_array_index(ev, 0), ==, "a\nb");
	g_assert_cmpstr(g_ptr_array_index(ev, 1), ==, " c"); /* only one space is eaten */
	g_ptr_array_free(ev, TRUE);
	/* A CR at the end of one chunk and its LF at the start of the next
	 * make one line end, not an empty line (which would end the event). */
	{
		size_t cut = 8;

		ev = feed_cut("data: a\r\ndata: b\n\n", &cut, 1);
		g_assert_cmpuint(ev->len, ==, 1);
		g_assert_cmpstr(g_ptr_array_index(ev, 0), ==, "a\nb");
		g_ptr_array_free(ev, TRUE);
	}
	/* The last event without its blank line (or even its newline) still
	 * counts at the end of the body. */
	ev = feed_cut("data: x\n\ndata: [DONE]", NULL, 0);
	g_assert_cmpuint(ev->len, ==, 2);
	g_assert_cmpstr(g_ptr_array_index(ev, 1), ==, "[DONE]");
	g_ptr_array_free(ev, TRUE);
	/* Fields without data make no event; "data" alone is an empty one. */
	ev = feed_cut("event: x\n\ndata\n\n", NULL, 0);
	g_assert_cmpuint(ev->len, ==, 1);
	g_assert_cmpstr(g_ptr_array_index(ev, 0), ==, "");
	g_ptr_array_free(ev, TRUE);
}

static void
test_overflow(void)
{
	struct collected c = { g_ptr_array_new_with_free_func(g_free) };
	struct rp_sse p;
	char *big = g_malloc(1 << 20);

	memset(big, 'x', 1 << 20);
	rp_sse_init(&p, collect, &c);
	g_assert_true(rp_sse_feed(&p, "data: ", 6));
	for (int i = 0; i < 16; i++)
		(void)rp_sse_feed(&p, big, 1 << 20);
	g_assert_false(rp_sse_feed(&p, "\n\n", 2));
	g_assert_true(p.overflow);
	rp_sse_finish(&p);
	g_assert_cmpuint(c.events->len, ==, 0);
	rp_sse_clear(&p);
	g_free(big);
	g_ptr_array_free(c.events, TRUE);
}

static void
parse(const char *text, struct rp_event *ev)
{
	rp_event_parse(text, strlen(text), ev);
}

static void
test_events(void)
{
	struct rp_event ev;

	parse(" [DONE] ", &ev);
	g_assert_cmpint(ev.kind, ==, RP_EV_DONE);
	parse("{\"error\":{\"message\":\"boom\",\"type\":\"InternalServerError\","
	      "\"param\":null,\"code\":500}}", &ev);
	g_assert_cmpint(ev.kind, ==, RP_EV_ERROR);
	g_assert_cmpstr(ev.error, ==, "boom");
	g_assert_cmpint(ev.error_code, ==, 500);
	rp_event_clear(&ev);
	/* The old flat shape, and a string code. */
	{
		const char *flat = "{\"object\":\"error\",\"message\":\"too long\",\"code\":\"400\"}";

		rp_event_parse(flat, strlen(flat), &ev);
		g_assert_cmpint(ev.kind, ==, RP_EV_ERROR);
		g_assert_cmpstr(ev.error, ==, "too long");
		g_assert_cmpint(ev.error_code, ==, 400);
		rp_event_clear(&ev);
	}
	/* Chat deltas: a role-only first chunk carries no text. */
	{
		const char *role = "{\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\","
		                   "\"content\":\"\"}}]}";
		const char *content = "{\"choices\":[{\"index\":0,\"delta\":{\"content\":\" ab\"}}]}";
		const char *reasoning = "{\"choices\":[{\"delta\":{\"reasoning_content\":\"hm\"}}]}";
		const char *usage = "{\"choices\":[],\"usage\":{\"prompt_tokens\":9,"
		                    "\"completion_tokens\":4,\"total_tokens\":13}}";
		const char *whole = "{\"choices\":[{\"message\":{\"role\":\"assistant\",\"content\":\"x\"}}],"
		                    "\"usage\":{\"prompt_tokens\":2,\"completion_tokens\":1}}";

		rp_event_parse(role, strlen(role), &ev);
		g_assert_cmpint(ev.kind, ==, RP_EV_DATA);
		g_assert_cmpuint(ev.pieces, ==, 0);
		rp_event_parse(content, strlen(content), &ev);
		g_assert_cmpuint(ev.pieces, ==, 1);
		g_assert_cmpint(ev.completion_tokens, ==, -1);
		rp_event_parse(reasoning, strlen(reasoning), &ev);
		g_assert_cmpuint(ev.pieces, ==, 1);
		rp_event_parse(usage, strlen(usage), &ev);
		g_assert_cmpuint(ev.pieces, ==, 0);
		g_assert_cmpint(ev.prompt_tokens, ==, 9);
		g_assert_cmpint(ev.completion_tokens, ==, 4);
		rp_event_parse(whole, strlen(whole), &ev);
		g_assert_cmpuint(ev.pieces, ==, 1);
		g_assert_cmpint(ev.completion_tokens, ==, 1);
	}
	parse("not json", &ev);
	g_assert_cmpint(ev.kind, ==, RP_EV_INVALID);
	parse("[1]", &ev);
	g_assert_cmpint(ev.kind, ==, RP_EV_INVALID);
	/* "error": null is not an error. */
	parse("{\"error\":null,\"choices\":[]}", &ev);
	g_assert_cmpint(ev.kind, ==, RP_EV_DATA);
}

/* Feed a stream with a timestamp per piece; the pieces are split at the
 * given offsets and stamped 1 s, 2 s, ... */
static void
run_stream(struct rp_stream *s, const char *text, const size_t *cuts, guint ncuts)
{
	size_t at = 0, len = strlen(text);

	rp_stream_init(s);
	for (guint i = 0; i <= ncuts; i++) {
		size_t end = i < ncuts ? cuts[i] : len;

		rp_stream_feed(s, (int64_t)(i + 1) * 1000000, text + at, end - at);
		at = end;
	}
	rp_stream_finish(s, (int64_t)(ncuts + 2) * 1000000);
}

static void
test_stream_timing(void)
{
	struct rp_stream s;
	const char *first = strstr(completion_stream, "\" abcd\"");
	const char *second = strstr(completion_stream, "\" efgh\"");
	const char *third = strstr(completion_stream, "\" ijkl\"");
	/* Cut inside each text event: the event is stamped when it completes. */
	size_t cuts[3] = { (size_t)(first - completion_stream), (size_t)(second - completion_stream),
	                   (size_t)(third - completion_stream) };

	run_stream(&s, completion_stream, cuts, 3);
	g_assert_true(s.done);
	g_assert_false(s.error_event);
	g_assert_cmpuint(s.pieces, ==, 3);  /* the empty text chunk is no token */
	g_assert_cmpint(s.first_us, ==, 2000000);
	g_assert_cmpint(s.last_us, ==, 4000000);
	g_assert_cmpint(s.usage_prompt, ==, 11);
	g_assert_cmpint(s.usage_completion, ==, 3);
	g_assert_cmpuint(rp_stream_tokens(&s), ==, 3);
	/* TPOT = (last - first) / (tokens - 1) = 2 s / 2. */
	g_assert_cmpfloat_with_epsilon(rp_tpot(s.first_us, s.last_us, rp_stream_tokens(&s)), 1.0, 1e-12);
	rp_stream_clear(&s);
}

static void
test_stream_failures(void)
{
	struct rp_stream s;

	/* In-band error then [DONE]: an error, though [DONE] came. */
	run_stream(&s, "data: {\"choices\":[{\"text\":\" a\"}]}\n\n"
	               "data: {\"error\":{\"message\":\"engine died\",\"code\":500}}\n\n"
	               "data: [DONE]\n\n", NULL, 0);
	g_assert_true(s.error_event);
	g_assert_true(s.done);
	g_assert_cmpstr(s.error, ==, "engine died");
	g_assert_cmpint(s.error_code, ==, 500);
	g_assert_cmpuint(s.pieces, ==, 1);
	rp_stream_clear(&s);
	/* Cut off: tokens but no [DONE]. Without usage, text events count. */
	run_stream(&s, "data: {\"choices\":[{\"text\":\" a\"}]}\n\n"
	               "data: {\"choices\":[{\"text\":\" b\"}]}\n\n", NULL, 0);
	g_assert_false(s.done);
	g_assert_cmpuint(rp_stream_tokens(&s), ==, 2);
	g_assert_cmpint(s.usage_completion, ==, -1);
	rp_stream_clear(&s);
	/* Not SSE at all. */
	run_stream(&s, "{\"choices\":[{\"text\":\"x\"}]}", NULL, 0);
	g_assert_cmpuint(s.events, ==, 0);
	g_assert_false(s.done);
	rp_stream_clear(&s);
}

static void
test_tpot_formula(void)
{
	/* 100 tokens, first at 1.0 s, last at 3.0 s: 2 s over 99 gaps. */
	g_assert_cmpfloat_with_epsilon(rp_tpot(1000000, 3000000, 100), 2.0 / 99, 1e-12);
	g_assert_cmpfloat_with_epsilon(rp_tpot(0, 20000, 2), 0.02, 1e-12);
	g_assert_true(isnan(rp_tpot(5, 5, 1)));
	g_assert_true(isnan(rp_tpot(5, 5, 0)));
	g_assert_true(isnan(rp_tpot(10, 5, 3)));
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/replay/sse/framing", test_framing);
	g_test_add_func("/replay/sse/framing-edges", test_framing_edges);
	g_test_add_func("/replay/sse/overflow", test_overflow);
	g_test_add_func("/replay/sse/events", test_events);
	g_test_add_func("/replay/sse/stream-timing", test_stream_timing);
	g_test_add_func("/replay/sse/stream-failures", test_stream_failures);
	g_test_add_func("/replay/stats/tpot", test_tpot_formula);
	return g_test_run();
}
