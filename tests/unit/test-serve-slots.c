/*
 * The serve layer's pure pieces: counted resources with FIFO waiters
 * (admission ledger, serving pool), phase wait lines, the request timer
 * heap, and X-Request-Id handling.
 */
#include "build-config.h"

#include <string.h>

#include "serve/request-id.h"
#include "serve/serve.h"
#include "serve/slots.h"
#include "net/timers.h"

/* Waiters that record their name when granted or kicked. */
struct named {
	struct nw_waiter w;
	const char *name;
	GString *log;
};

static void
granted(void *data)
{
	struct named *n = data;

	g_string_append_printf(n->log, "%s;", n->name);
}

static void
test_resource_fifo(void)
{
	struct nw_resource r;
	GString *log = g_string_new(NULL);
	struct named a = { .name = "a", .log = log }, b = { .name = "b", .log = log },
		     c = { .name = "c", .log = log };

	g_test_summary("/serve/spec-4.2/resource-fifo: units pass to waiters in arrival order, "
	               "the line is bounded, a waiter that leaves is skipped");
	nw_resource_init(&r, 2, 2);
	nw_waiter_init(&a.w, granted, &a);
	nw_waiter_init(&b.w, granted, &b);
	nw_waiter_init(&c.w, granted, &c);
	g_assert_true(nw_resource_try(&r));
	g_assert_true(nw_resource_try(&r));
	g_assert_false(nw_resource_try(&r));
	g_assert_true(nw_resource_wait(&r, &a.w));
	g_assert_true(nw_resource_wait(&r, &b.w));
	g_assert_false(nw_resource_wait(&r, &c.w)); /* capacity 2 */
	g_assert_cmpuint(nw_resource_waiting(&r), ==, 2);
	nw_resource_release(&r);
	g_assert_cmpstr(log->str, ==, "a;");
	g_assert_true(a.w.granted);
	g_assert_cmpuint(r.in_use, ==, 2); /* handed over, not freed */
	/* b leaves; c joins; the next unit goes to c. */
	nw_resource_leave(&r, &b.w);
	g_assert_true(nw_resource_wait(&r, &c.w));
	nw_resource_release(&r);
	g_assert_cmpstr(log->str, ==, "a;c;");
	/* Nobody waits: units are freed; a newcomer must not jump a line. */
	nw_resource_release(&r);
	g_assert_cmpuint(r.in_use, ==, 1);
	g_assert_true(nw_resource_wait(&r, &b.w));
	g_assert_false(nw_resource_try(&r)); /* b waits: FIFO */
	nw_resource_leave(&r, &b.w);
	g_assert_true(nw_resource_try(&r));
	g_string_free(log, TRUE);
}

static void
test_resource_unlimited(void)
{
	struct nw_resource r;

	nw_resource_init(&r, 0, 0);
	for (int i = 0; i < 1000; i++)
		g_assert_true(nw_resource_try(&r));
	g_assert_cmpuint(r.in_use, ==, 1000);
}

static void
test_wait_line(void)
{
	struct nw_wait_line l;
	GString *log = g_string_new(NULL);
	struct named a = { .name = "a", .log = log }, b = { .name = "b", .log = log };

	g_test_summary("/serve/spec-4.2/phase-line-fifo: a freed phase slot wakes the first "
	               "waiter only, who stays first until it leaves");
	nw_wait_line_init(&l);
	nw_waiter_init(&a.w, granted, &a);
	nw_waiter_init(&b.w, granted, &b);
	nw_wait_line_kick(&l); /* empty: nothing */
	nw_wait_line_push(&l, &a.w);
	nw_wait_line_push(&l, &b.w);
	g_assert_true(nw_wait_line_is_first(&l, &a.w));
	nw_wait_line_kick(&l);
	nw_wait_line_kick(&l);
	g_assert_cmpstr(log->str, ==, "a;a;");
	nw_wait_line_leave(&l, &a.w);
	g_assert_true(nw_wait_line_is_first(&l, &b.w));
	/* The head left: the new head is kicked at once. */
	g_assert_cmpstr(log->str, ==, "a;a;b;");
	nw_wait_line_kick(&l);
	g_assert_cmpstr(log->str, ==, "a;a;b;b;");
	nw_wait_line_leave(&l, &b.w);
	g_assert_true(nw_wait_line_empty(&l));
	g_string_free(log, TRUE);
}

static void
test_wait_line_head_leaves(void)
{
	struct nw_wait_line l;
	GString *log = g_string_new(NULL);
	struct named a = { .name = "a", .log = log }, b = { .name = "b", .log = log },
	             c = { .name = "c", .log = log };

	g_test_summary("/serve/spec-4.2/phase-line-head-leaves: a head kicked for a free slot "
	               "that leaves (hang-up, retry) before acting passes the wake-up on; a "
	               "waiter behind the head leaving kicks nobody");
	nw_wait_line_init(&l);
	nw_waiter_init(&a.w, granted, &a);
	nw_waiter_init(&b.w, granted, &b);
	nw_waiter_init(&c.w, granted, &c);
	nw_wait_line_push(&l, &a.w);
	nw_wait_line_push(&l, &b.w);
	nw_wait_line_push(&l, &c.w);
	nw_wait_line_kick(&l);           /* a slot came free: a is told */
	nw_wait_line_leave(&l, &b.w);    /* not the head: nothing */
	g_assert_cmpstr(log->str, ==, "a;");
	nw_wait_line_leave(&l, &a.w);    /* a hangs up before its timer runs */
	g_assert_cmpstr(log->str, ==, "a;c;");
	g_assert_true(nw_wait_line_is_first(&l, &c.w));
	nw_wait_line_leave(&l, &c.w);
	g_assert_true(nw_wait_line_empty(&l));
	g_assert_cmpstr(log->str, ==, "a;c;");
	g_string_free(log, TRUE);
}

static void
test_arrival_order(void)
{
	struct nw_wait_line l;
	struct nw_resource r;
	GString *log = g_string_new(NULL);
	struct named a = { .name = "a", .log = log }, b = { .name = "b", .log = log },
	             c = { .name = "c", .log = log }, d = { .name = "d", .log = log };

	g_test_summary("/serve/spec-4.2/lines-by-arrival: waiters line up by arrival, not by "
	               "when they joined (a request whose sizing took longer keeps its turn); "
	               "one that goes in ahead of a kicked head is kicked itself");
	nw_wait_line_init(&l);
	nw_waiter_init(&a.w, granted, &a);
	nw_waiter_init(&b.w, granted, &b);
	nw_waiter_init(&c.w, granted, &c);
	a.w.order = 10;
	b.w.order = 30;
	c.w.order = 20;
	nw_wait_line_push(&l, &a.w);
	nw_wait_line_push(&l, &b.w);
	nw_wait_line_push(&l, &c.w);     /* arrived before b: goes in front of it */
	g_assert_cmpstr(log->str, ==, "");
	nw_wait_line_leave(&l, &a.w);    /* the head leaves: c is next, and kicked */
	g_assert_cmpstr(log->str, ==, "c;");
	g_assert_true(nw_wait_line_is_first(&l, &c.w));
	/* d arrived first of all: it takes the head, and the kick with it. */
	nw_waiter_init(&d.w, granted, &d);
	d.w.order = 5;
	nw_wait_line_push(&l, &d.w);
	g_assert_cmpstr(log->str, ==, "c;d;");
	g_assert_true(nw_wait_line_is_first(&l, &d.w));
	nw_wait_line_leave(&l, &d.w);
	nw_wait_line_leave(&l, &c.w);
	nw_wait_line_leave(&l, &b.w);
	g_assert_true(nw_wait_line_empty(&l));

	/* The same order in a counted resource; equal orders keep their turn. */
	g_string_truncate(log, 0);
	nw_resource_init(&r, 1, UINT32_MAX);
	g_assert_true(nw_resource_try(&r));
	a.w.order = 50;
	b.w.order = 40;
	c.w.order = 50;
	g_assert_true(nw_resource_wait(&r, &a.w));
	g_assert_true(nw_resource_wait(&r, &b.w));
	g_assert_true(nw_resource_wait(&r, &c.w));
	nw_resource_release(&r);
	nw_resource_release(&r);
	nw_resource_release(&r);
	g_assert_cmpstr(log->str, ==, "b;a;c;");
	g_string_free(log, TRUE);
}

struct fired {
	GString *log;
	const char *name;
	struct nw_timers *t;
	struct nw_timer *rearm;
};

static void
fire(void *data)
{
	struct fired *f = data;

	g_string_append_printf(f->log, "%s;", f->name);
	if (f->rearm != NULL) {
		nw_timer_set(f->t, f->rearm, 50);
		f->rearm = NULL;
	}
}

static void
test_timers(void)
{
	struct nw_timers *t = nw_timers_new(false);
	GString *log = g_string_new(NULL);
	struct fired f[5];
	struct nw_timer timer[5];
	const char *names[] = { "a", "b", "c", "d", "e" };
	const int64_t when[] = { 30, 10, 20, 40, 10 };

	g_test_summary("/serve/timers: the heap fires due timers earliest first, re-arms and "
	               "cancels, and a callback may re-arm");
	for (int i = 0; i < 5; i++) {
		f[i] = (struct fired){ .log = log, .name = names[i], .t = t };
		nw_timer_init(&timer[i], fire, &f[i]);
		nw_timer_set(t, &timer[i], when[i]);
	}
	g_assert_cmpint(nw_timers_next(t), ==, 10);
	nw_timer_cancel(t, &timer[4]);
	nw_timer_set(t, &timer[3], 5); /* d moves first */
	f[1].rearm = &timer[1];        /* b re-arms itself at 50 */
	nw_timers_run(t, 25);
	g_assert_cmpstr(log->str, ==, "d;b;c;");
	g_assert_cmpuint(nw_timers_count(t), ==, 2);
	g_assert_cmpint(nw_timers_next(t), ==, 30);
	nw_timers_run(t, 100);
	g_assert_cmpstr(log->str, ==, "d;b;c;a;b;");
	g_assert_cmpint(nw_timers_next(t), ==, -1);
	g_assert_false(nw_timer_armed(&timer[0]));
	nw_timers_free(t);
	g_string_free(log, TRUE);
}

static void
test_timers_many(void)
{
	struct nw_timers *t = nw_timers_new(false);
	GRand *rng = g_rand_new_with_seed(7);
	struct nw_timer *timers = g_new0(struct nw_timer, 500);
	int64_t last = -1;
	GString *log = g_string_new(NULL);
	struct fired f = { .log = log, .name = "x" };

	for (int i = 0; i < 500; i++) {
		nw_timer_init(&timers[i], fire, &f);
		nw_timer_set(t, &timers[i], g_rand_int_range(rng, 0, 1000));
	}
	for (int i = 0; i < 500; i += 3)
		nw_timer_set(t, &timers[i], g_rand_int_range(rng, 0, 1000));
	for (int i = 1; i < 500; i += 7)
		nw_timer_cancel(t, &timers[i]);
	while (nw_timers_count(t) > 0) {
		int64_t next = nw_timers_next(t);

		g_assert_cmpint(next, >=, last);
		last = next;
		nw_timers_run(t, next);
	}
	g_free(timers);
	g_rand_free(rng);
	nw_timers_free(t);
	g_string_free(log, TRUE);
}

static void
test_request_id(void)
{
	GRand *rng = g_rand_new_with_seed(1);
	char out[NW_REQUEST_ID_MAX + 1], other[NW_REQUEST_ID_MAX + 1];
	char long_id[NW_REQUEST_ID_MAX + 2];

	g_test_summary("/serve/request-id: a client's printable id up to 128 bytes is kept, "
	               "anything else is replaced by 32 fresh hex digits");
	g_assert_true(nw_request_id_choose(rng, "req-1", out));
	g_assert_cmpstr(out, ==, "req-1");
	memset(long_id, 'a', sizeof long_id - 1);
	long_id[sizeof long_id - 1] = '\0';
	g_assert_false(nw_request_id_valid(long_id));
	long_id[NW_REQUEST_ID_MAX] = '\0';
	g_assert_true(nw_request_id_valid(long_id));
	g_assert_false(nw_request_id_valid("a b"));
	g_assert_false(nw_request_id_valid("a\r\nX-Evil: 1"));
	g_assert_false(nw_request_id_valid("caf\xc3\xa9"));
	g_assert_false(nw_request_id_valid(""));
	g_assert_false(nw_request_id_choose(rng, NULL, out));
	g_assert_cmpuint(strlen(out), ==, 32);
	for (const char *p = out; *p; p++)
		g_assert_true(g_ascii_isxdigit(*p) && !g_ascii_isupper(*p));
	g_assert_false(nw_request_id_choose(rng, "bad id", other));
	g_assert_cmpstr(out, !=, other);
	g_rand_free(rng);
}

static void
test_api_keys(void)
{
	char *keys[] = { "alpha", "beta-2", NULL };
	GError *error = NULL;
	char **read;

	g_test_summary("/serve/api-keys: Bearer keys from an environment variable, compared "
	               "whole, never by prefix");
	g_assert_true(nw_serve_key_ok(keys, "Bearer alpha"));
	g_assert_true(nw_serve_key_ok(keys, "bearer beta-2"));
	g_assert_false(nw_serve_key_ok(keys, "Bearer alph"));
	g_assert_false(nw_serve_key_ok(keys, "Bearer alphaa"));
	g_assert_false(nw_serve_key_ok(keys, "alpha"));
	g_assert_false(nw_serve_key_ok(keys, "Bearer "));
	g_assert_false(nw_serve_key_ok(keys, NULL));
	g_setenv("NW_TEST_KEYS", " k1 ,,k2", TRUE);
	read = nw_serve_read_api_keys("NW_TEST_KEYS", &error);
	g_assert_no_error(error);
	g_assert_cmpuint(g_strv_length(read), ==, 2);
	g_assert_cmpstr(read[0], ==, "k1");
	g_assert_cmpstr(read[1], ==, "k2");
	g_strfreev(read);
	g_setenv("NW_TEST_KEYS", " , ", TRUE);
	g_assert_null(nw_serve_read_api_keys("NW_TEST_KEYS", &error));
	g_assert_nonnull(strstr(error->message, "NW_TEST_KEYS"));
	g_clear_error(&error);
	g_unsetenv("NW_TEST_KEYS");
	g_assert_null(nw_serve_read_api_keys("NW_TEST_KEYS", &error));
	g_clear_error(&error);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/serve/spec-4.2/resource-fifo", test_resource_fifo);
	g_test_add_func("/serve/spec-4.2/resource-unlimited", test_resource_unlimited);
	g_test_add_func("/serve/spec-4.2/phase-line-fifo", test_wait_line);
	g_test_add_func("/serve/spec-4.2/phase-line-head-leaves", test_wait_line_head_leaves);
	g_test_add_func("/serve/spec-4.2/lines-by-arrival", test_arrival_order);
	g_test_add_func("/serve/timers/order", test_timers);
	g_test_add_func("/serve/timers/many", test_timers_many);
	g_test_add_func("/serve/request-id", test_request_id);
	g_test_add_func("/serve/api-keys", test_api_keys);
	return g_test_run();
}
