/*
 * The log writer (issue 11, access log: "logging never blocks the loop";
 * docs/deployment.md, "Logs"): lines handed to a writer thread keep their
 * order and show up without a flush; a stalled stream never blocks the
 * caller, lines past the cap are dropped, counted and reported in place;
 * stopping writes everything pending.
 */
#include "build-config.h"

#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "core/log.h"

#define DEADLINE_US (10 * G_USEC_PER_SEC)

static void
log_seq(int n)
{
	char buf[16];

	g_snprintf(buf, sizeof buf, "%d", n);
	nw_log(NARWHAL_LOG_INFO, "seq", "n", buf, "pad",
	       "................................................................", NULL);
}

/* The "n" of each "seq" line of text, in order; other events as -1. */
static GArray *
parse_lines(const char *text, guint64 *reported, guint *reports)
{
	g_auto(GStrv) lines = g_strsplit(text, "\n", -1);
	GArray *seq = g_array_new(FALSE, FALSE, sizeof(int));

	*reported = 0;
	*reports = 0;
	for (guint i = 0; lines[i] != NULL && lines[i][0] != '\0'; i++) {
		json_t *doc = json_loads(lines[i], 0, NULL);
		const char *event;
		int n = -1;

		g_assert_nonnull(doc);
		event = json_string_value(json_object_get(doc, "event"));
		if (g_strcmp0(event, "seq") == 0 || g_strcmp0(event, "final") == 0) {
			n = atoi(json_string_value(json_object_get(doc, "n")));
		} else if (g_strcmp0(event, "log_lines_dropped") == 0) {
			json_t *count = json_object_get(doc, "count");

			g_assert_true(json_is_integer(count));
			*reported += (guint64)json_integer_value(count);
			(*reports)++;
			/* A report sits where its lines went missing: marked as
			 * -2 - count so the caller can check the gap. */
			n = -2 - (int)json_integer_value(count);
		}
		g_array_append_val(seq, n);
		json_decref(doc);
	}
	return seq;
}

static char *
read_file(const char *path)
{
	char *text = NULL;

	g_assert_true(g_file_get_contents(path, &text, NULL, NULL));
	return text;
}

/* Issue 11, access log ("never blocks the loop"): lines reach the stream
 * through the writer in order and promptly, without anyone flushing. */
static void
test_order_and_promptness(void)
{
	g_autofree char *path = NULL;
	int fd = g_file_open_tmp("nw-log-XXXXXX", &path, NULL);
	FILE *stream = fdopen(fd, "w");
	gint64 deadline = g_get_monotonic_time() + DEADLINE_US;
	enum { N = 2000 };
	char *text = NULL;
	guint64 reported;
	guint reports;
	GArray *seq;

	g_assert_true(nw_log_setup("info", NW_LOG_FORMAT_JSON));
	nw_log_set_stream(stream);
	nw_log_writer_start(NW_LOG_PENDING_CAP);
	for (int i = 0; i < N; i++)
		log_seq(i);
	g_message("from glib");
	/* Poll for the last line: the writer wakes on its own. */
	do {
		g_free(text);
		text = read_file(path);
		if (strstr(text, "from glib") != NULL)
			break;
		g_usleep(1000);
	} while (g_get_monotonic_time() < deadline);
	g_assert_nonnull(strstr(text, "\"event\":\"glib\",\"message\":\"from glib\""));

	seq = parse_lines(text, &reported, &reports);
	g_assert_cmpuint(seq->len, ==, N + 1);
	for (int i = 0; i < N; i++)
		g_assert_cmpint(g_array_index(seq, int, i), ==, i);
	g_assert_cmpuint(reports, ==, 0);
	g_array_unref(seq);
	g_free(text);

	nw_log_writer_stop();
	nw_log_set_stream(NULL);
	fclose(stream);
	unlink(path);
}

struct flood {
	int lines;
	gint done;
};

static gpointer
flood_main(gpointer data)
{
	struct flood *f = data;

	for (int i = 0; i < f->lines; i++)
		log_seq(i);
	g_atomic_int_set(&f->done, 1);
	return NULL;
}

/* A reader that lets the stream move: reads the pipe (non-blocking read
 * end) into text until the needle shows up or the deadline passes. */
struct reader {
	int fd;
	GString *text;
	const char *needle;
	gint64 deadline;
	bool found;
};

static gpointer
reader_main(gpointer data)
{
	struct reader *rd = data;
	char buf[65536];

	while (strstr(rd->text->str, rd->needle) == NULL) {
		struct pollfd p = { .fd = rd->fd, .events = POLLIN };
		gint64 left_ms = (rd->deadline - g_get_monotonic_time()) / 1000;
		ssize_t n;

		if (left_ms <= 0)
			return NULL;
		if (poll(&p, 1, (int)MIN(left_ms, 100)) <= 0)
			continue;
		n = read(rd->fd, buf, sizeof buf);
		if (n > 0)
			g_string_append_len(rd->text, buf, n);
	}
	rd->found = true;
	return NULL;
}

/* Issue 11, access log ("never blocks the loop"): with a stream nobody
 * reads, the caller still finishes; lines past the cap are dropped and
 * counted; once the stream moves, a log_lines_dropped line with the count
 * stands where they are missing, and every other line is there in order. */
static void
test_stalled_stream_drops_and_counts(void)
{
	enum { N = 20000, CAP = 64 * 1024 };
	struct flood f = { .lines = N };
	g_autoptr(GString) text = g_string_new(NULL);
	gint64 deadline = g_get_monotonic_time() + DEADLINE_US;
	guint64 before = nw_log_dropped_lines(), reported, kept = 0;
	guint reports;
	int fds[2], prev = -1;
	char final_line[32];
	struct reader rd;
	GThread *flood, *reader;
	FILE *stream;
	GArray *seq;

	g_assert_cmpint(pipe(fds), ==, 0);
	g_assert_cmpint(fcntl(fds[0], F_SETFL, O_NONBLOCK), ==, 0);
	stream = fdopen(fds[1], "w");
	g_assert_true(nw_log_setup("info", NW_LOG_FORMAT_JSON));
	nw_log_set_stream(stream);
	nw_log_writer_start(CAP);

	/* N lines of ~150 bytes: far more than the pipe and the cap hold. */
	flood = g_thread_new("flood", flood_main, &f);
	while (!g_atomic_int_get(&f.done) && g_get_monotonic_time() < deadline)
		g_usleep(1000);
	g_assert_true(g_atomic_int_get(&f.done)); /* the caller never blocked */
	g_thread_join(flood);
	g_assert_cmpuint(nw_log_dropped_lines(), >, before);

	/* Let the stream move: the report comes once the writer can. Once
	 * everything is written there is room again, and a new line goes
	 * through. */
	rd = (struct reader){ .fd = fds[0], .text = text, .needle = "\"event\":\"final\"",
	                      .deadline = deadline };
	reader = g_thread_new("reader", reader_main, &rd);
	g_assert_true(nw_log_flush());
	g_snprintf(final_line, sizeof final_line, "%d", N);
	nw_log(NARWHAL_LOG_INFO, "final", "n", final_line, NULL);
	g_thread_join(reader);
	g_assert_true(rd.found);
	g_assert_true(g_str_has_suffix(text->str, "}\n"));

	seq = parse_lines(text->str, &reported, &reports);
	g_assert_cmpuint(reported, ==, nw_log_dropped_lines() - before);
	g_assert_cmpuint(reports, >=, 1);
	for (guint i = 0; i < seq->len; i++) {
		int n = g_array_index(seq, int, i);
		int gap_before = 0;

		if (n <= -2)
			continue;
		/* The reports just before this line (a batch may be all drops,
		 * so two can follow each other). */
		for (guint j = i; j > 0 && g_array_index(seq, int, j - 1) <= -2; j--)
			gap_before += -2 - g_array_index(seq, int, j - 1);
		/* In order, and every gap exactly the count reported in it. */
		g_assert_cmpint(n, ==, prev + 1 + gap_before);
		prev = n;
		kept++;
	}
	g_assert_cmpint(prev, ==, N);
	g_assert_cmpuint(kept + reported, ==, N + 1);
	g_array_unref(seq);

	nw_log_writer_stop();
	nw_log_set_stream(NULL);
	fclose(stream);
	close(fds[0]);
}

/* Issue 11, access log: on the way out every pending line is written. */
static void
test_stop_writes_everything(void)
{
	g_autofree char *path = NULL;
	int fd = g_file_open_tmp("nw-log-XXXXXX", &path, NULL);
	FILE *stream = fdopen(fd, "w");
	enum { N = 5000 };
	g_autofree char *text = NULL;
	guint64 reported;
	guint reports;
	GArray *seq;

	g_assert_true(nw_log_setup("info", NW_LOG_FORMAT_JSON));
	nw_log_set_stream(stream);
	nw_log_writer_start(NW_LOG_PENDING_CAP);
	for (int i = 0; i < N; i++)
		log_seq(i);
	nw_log_writer_stop();
	text = read_file(path);
	seq = parse_lines(text, &reported, &reports);
	g_assert_cmpuint(seq->len, ==, N);
	g_assert_cmpint(g_array_index(seq, int, N - 1), ==, N - 1);
	g_array_unref(seq);

	/* Stopped: lines are written in place again. */
	log_seq(N);
	g_free(text);
	text = read_file(path);
	g_assert_true(g_str_has_suffix(text, "\"n\":\"5000\",\"pad\":"
	                                     "\"................................................................\"}\n"));
	nw_log_set_stream(NULL);
	fclose(stream);
	unlink(path);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/log-writer/order-and-promptness", test_order_and_promptness);
	g_test_add_func("/log-writer/stalled-stream-drops-and-counts",
	                test_stalled_stream_drops_and_counts);
	g_test_add_func("/log-writer/stop-writes-everything", test_stop_writes_everything);
	return g_test_run();
}
