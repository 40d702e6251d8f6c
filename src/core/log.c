#define _GNU_SOURCE /* SCHED_BATCH */
#include "build-config.h"

#include "core/log.h"

#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Read by any thread that logs (GLib may log from its own threads). */
static gint threshold = NARWHAL_LOG_INFO;
static gint format = NW_LOG_FORMAT_JSON;

static const char *const level_names[] = { "debug", "info", "warning", "error" };

/*
 * The writer (docs/deployment.md, "Logs"). Callers format a line and append
 * it to `pending` under the lock; the writer thread takes the whole pending
 * buffer at once and does the blocking writes without the lock, so a stalled
 * stderr never stalls the loop. Bytes pending and being written are capped;
 * past the cap lines are dropped until the writer takes the buffer, so the
 * lost lines are one run at the end of a batch, and the writer writes its
 * own log_lines_dropped line right after that batch.
 */
static struct {
	GMutex lock;
	GCond wake;          /* the writer: something to write, or stop */
	GCond written_cond;  /* flushers: `written` moved */
	GThread *thread;     /* NULL: lines are written by their caller */
	FILE *stream;        /* NULL: stderr */
	GString *pending;    /* lines handed over, not yet taken */
	GString *spare;      /* the writer's buffer between batches */
	gsize inflight;      /* bytes taken by the writer, not yet written */
	gsize cap;
	guint64 dropped_now; /* lines dropped since the writer took a batch */
	guint64 submitted;   /* lines handed over or dropped, ever */
	guint64 written;     /* of those, the ones written or reported */
	guint64 dropped_total;
	bool idle;           /* the writer waits on `wake` for a first line */
	bool hurry;          /* a flush waits: no lingering */
	bool stop;
} w;

/* How long exit waits for a stalled stream. */
#define FLUSH_WAIT_US (2 * G_USEC_PER_SEC)
/* A writer's buffer larger than this is given back after its batch. */
#define KEEP_BUFFER_BYTES (64 * 1024)
/* Under load, after a write the writer lingers LINGER_US, or until
 * LINGER_BYTES wait, before it takes the next batch: the loop then wakes it
 * a few dozen times a second rather than once per loop iteration, each
 * wake-up a context switch on the loop's core (bench/obs/README.md), and a
 * line is out within LINGER_US of being logged. Under load means at least
 * LINGER_MIN_LINES lines a LINGER_WINDOW_US, judged once a window; below
 * that every line goes out as soon as the writer runs. */
#define LINGER_US (20 * 1000)
#define LINGER_BYTES (256 * 1024)
#define LINGER_WINDOW_US (100 * 1000)
#define LINGER_MIN_LINES 200

bool
nw_log_level_parse(const char *name, narwhal_log_level *out)
{
	for (size_t i = 0; i < G_N_ELEMENTS(level_names); i++) {
		if (g_strcmp0(name, level_names[i]) == 0) {
			*out = (narwhal_log_level)i;
			return true;
		}
	}
	return false;
}

bool
nw_log_enabled(narwhal_log_level level)
{
	return (gint)level >= g_atomic_int_get(&threshold);
}

/* Formatting runs on the loop for every access line, so it avoids printf
 * and strftime (bench/obs/README.md). */

static void
append_uint(GString *line, uint64_t v, int min_digits)
{
	char buf[24];
	int i = sizeof buf;

	do {
		buf[--i] = (char)('0' + v % 10);
		v /= 10;
	} while (v > 0 || (int)sizeof buf - i < min_digits);
	g_string_append_len(line, buf + i, (gssize)sizeof buf - i);
}

static void
append_int(GString *line, int64_t v)
{
	if (v < 0) {
		g_string_append_c(line, '-');
		append_uint(line, -(uint64_t)v, 1);
	} else {
		append_uint(line, (uint64_t)v, 1);
	}
}

/* "2026-12-01T19:44:05.042Z"; the part up to the second is kept per thread
 * and redone once a second. */
static void
append_timestamp(GString *line)
{
	static __thread time_t cached_sec = (time_t)-1;
	static __thread char cached[24];
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	if (ts.tv_sec != cached_sec) {
		struct tm tm;

		gmtime_r(&ts.tv_sec, &tm);
		strftime(cached, sizeof cached, "%Y-%m-%dT%H:%M:%S.", &tm);
		cached_sec = ts.tv_sec;
	}
	g_string_append(line, cached);
	append_uint(line, (uint64_t)(ts.tv_nsec / 1000000), 3);
	g_string_append_c(line, 'Z');
}

/* Bytes that go into a JSON string as they are; 0x80 and up need the UTF-8
 * check of the slow path. */
static inline bool
json_plain(unsigned char c)
{
	return c >= 0x20 && c < 0x7f && c != '"' && c != '\\';
}

/* A JSON string. Bytes that are not UTF-8 (a path from a client may hold
 * any) become U+FFFD so that the line stays valid JSON. */
static void
append_json_string(GString *line, const char *s)
{
	g_autofree char *valid = NULL;
	size_t run = 0;

	while (json_plain((unsigned char)s[run]))
		run++;
	g_string_append_c(line, '"');
	g_string_append_len(line, s, (gssize)run);
	if (s[run] != '\0') {
		if (!g_utf8_validate(s + run, -1, NULL)) {
			s = valid = g_utf8_make_valid(s + run, -1);
			run = 0;
		}
		for (const unsigned char *p = (const unsigned char *)s + run; *p; p++) {
			switch (*p) {
			case '"': g_string_append(line, "\\\""); break;
			case '\\': g_string_append(line, "\\\\"); break;
			case '\n': g_string_append(line, "\\n"); break;
			case '\r': g_string_append(line, "\\r"); break;
			case '\t': g_string_append(line, "\\t"); break;
			default:
				if (*p < 0x20 || *p == 0x7f) {
					g_string_append(line, "\\u00");
					g_string_append_c(line, "0123456789abcdef"[*p >> 4]);
					g_string_append_c(line, "0123456789abcdef"[*p & 15]);
				} else {
					g_string_append_c(line, (char)*p);
				}
			}
		}
	}
	g_string_append_c(line, '"');
}

/* Text values go bare unless a reader could misread them: empty, or holding
 * a space, a quote, '=', a control byte or a byte past ASCII; those are
 * quoted as JSON. */
static void
append_text_value(GString *line, const char *s)
{
	size_t run = 0;

	while (json_plain((unsigned char)s[run]) && s[run] != ' ' && s[run] != '=')
		run++;
	if (run > 0 && s[run] == '\0')
		g_string_append_len(line, s, (gssize)run);
	else
		append_json_string(line, s);
}

static void
line_begin(struct nw_log_line *l, nw_log_format fmt, narwhal_log_level level, const char *event)
{
	l->format = fmt;
	l->text = g_string_sized_new(384);
	if (l->format == NW_LOG_FORMAT_JSON) {
		g_string_append(l->text, "{\"ts\":\"");
		append_timestamp(l->text);
		g_string_append(l->text, "\",\"level\":\"");
		g_string_append(l->text, level_names[level]);
		g_string_append(l->text, "\",\"event\":");
		append_json_string(l->text, event);
	} else {
		append_timestamp(l->text);
		g_string_append_c(l->text, ' ');
		g_string_append(l->text, level_names[level]);
		g_string_append_c(l->text, ' ');
		append_text_value(l->text, event);
	}
}

void
nw_log_line_begin(struct nw_log_line *l, narwhal_log_level level, const char *event)
{
	line_begin(l, (nw_log_format)g_atomic_int_get(&format), level, event);
}

/* Keys are Narwhal's own identifiers: nothing to escape. */
static void
append_key(struct nw_log_line *l, const char *key)
{
	bool json = l->format == NW_LOG_FORMAT_JSON;

	g_string_append(l->text, json ? ",\"" : " ");
	g_string_append(l->text, key);
	g_string_append(l->text, json ? "\":" : "=");
}

void
nw_log_line_str(struct nw_log_line *l, const char *key, const char *value)
{
	append_key(l, key);
	if (l->format == NW_LOG_FORMAT_JSON)
		append_json_string(l->text, value ? value : "");
	else
		append_text_value(l->text, value ? value : "");
}

void
nw_log_line_int(struct nw_log_line *l, const char *key, int64_t value)
{
	append_key(l, key);
	append_int(l->text, value);
}

/* Six decimals (as "%.6f", rounding aside), from the value in millionths. */
void
nw_log_line_real(struct nw_log_line *l, const char *key, double value)
{
	int64_t millionths;

	if (!isfinite(value))
		return;
	append_key(l, key);
	if (fabs(value) >= 1e12) {
		char buf[G_ASCII_DTOSTR_BUF_SIZE];

		g_string_append(l->text, g_ascii_formatd(buf, sizeof buf, "%.6f", value));
		return;
	}
	millionths = llround(value * 1e6);
	if (millionths < 0) {
		g_string_append_c(l->text, '-');
		millionths = -millionths;
	}
	append_uint(l->text, (uint64_t)(millionths / 1000000), 1);
	g_string_append_c(l->text, '.');
	append_uint(l->text, (uint64_t)(millionths % 1000000), 6);
}

void
nw_log_line_bool(struct nw_log_line *l, const char *key, bool value)
{
	append_key(l, key);
	g_string_append(l->text, value ? "true" : "false");
}

static void
line_close(struct nw_log_line *l)
{
	g_string_append(l->text, l->format == NW_LOG_FORMAT_JSON ? "}\n" : "\n");
}

static void
write_out(FILE *out, const char *bytes, gsize len)
{
	fwrite(bytes, 1, len, out);
	fflush(out);
}

/* Hands one whole line over; never blocks on the stream once the writer
 * runs. Lines keep the order in which they were handed over. */
static void
submit(const GString *line)
{
	g_mutex_lock(&w.lock);
	if (w.thread == NULL) {
		/* Before the writer starts (tools, unit tests): write in place. */
		write_out(w.stream ? w.stream : stderr, line->str, line->len);
		g_mutex_unlock(&w.lock);
		return;
	}
	w.submitted++;
	if (w.dropped_now > 0 || w.pending->len + w.inflight + line->len > w.cap) {
		w.dropped_now++;
		w.dropped_total++;
	} else {
		g_string_append_len(w.pending, line->str, (gssize)line->len);
	}
	/* One wake-up a batch: lines handed over before the writer runs, or
	 * while it lingers, ride along without another signal, unless they
	 * fill LINGER_BYTES. */
	if (w.idle || (w.pending->len >= LINGER_BYTES && w.pending->len - line->len < LINGER_BYTES)) {
		w.idle = false;
		g_cond_signal(&w.wake);
	}
	g_mutex_unlock(&w.lock);
}

void
nw_log_line_end(struct nw_log_line *l)
{
	line_close(l);
	submit(l->text);
	g_string_free(l->text, TRUE);
	l->text = NULL;
}

static gpointer
writer_main(gpointer unused)
{
	/* A batch thread does not preempt the loop when woken: it runs when the
	 * loop waits for events (or on another core), so lines handed over in
	 * one loop iteration go out in one write. */
	struct sched_param param = { 0 };
	gint64 window_start = g_get_monotonic_time();
	guint64 window_from = 0;
	bool loaded = false;

	sched_setscheduler(0, SCHED_BATCH, &param);
	g_mutex_lock(&w.lock);
	window_from = w.written;
	for (;;) {
		GString *batch;
		guint64 dropped, upto;
		FILE *out;

		while (w.pending->len == 0 && w.dropped_now == 0 && !w.stop) {
			w.idle = true;
			g_cond_wait(&w.wake, &w.lock);
		}
		w.idle = false;
		if (w.pending->len == 0 && w.dropped_now == 0)
			break; /* stopping, and nothing left */
		w.hurry = false; /* this batch holds every line a flush waits for */
		batch = w.pending;
		w.pending = w.spare;
		w.spare = NULL;
		w.inflight = batch->len;
		dropped = w.dropped_now;
		w.dropped_now = 0;
		upto = w.submitted;
		out = w.stream ? w.stream : stderr;
		g_mutex_unlock(&w.lock);

		if (batch->len > 0)
			write_out(out, batch->str, batch->len);
		if (dropped > 0) {
			struct nw_log_line report;

			line_begin(&report, (nw_log_format)g_atomic_int_get(&format),
			           NARWHAL_LOG_WARNING, "log_lines_dropped");
			nw_log_line_int(&report, "count", (int64_t)dropped);
			line_close(&report);
			write_out(out, report.text->str, report.text->len);
			g_string_free(report.text, TRUE);
		}
		if (batch->allocated_len > KEEP_BUFFER_BYTES) {
			g_string_free(batch, TRUE);
			batch = g_string_sized_new(4096);
		} else {
			g_string_truncate(batch, 0);
		}

		g_mutex_lock(&w.lock);
		w.spare = batch;
		w.inflight = 0;
		w.written = upto;
		g_cond_broadcast(&w.written_cond);
		{
			gint64 now = g_get_monotonic_time(), until = now + LINGER_US;

			if (now - window_start >= LINGER_WINDOW_US) {
				/* The window's rate, however long it was. */
				loaded = (double)(upto - window_from) * LINGER_WINDOW_US >=
				         (double)LINGER_MIN_LINES * (double)(now - window_start);
				window_start = now;
				window_from = upto;
			}
			while (loaded && !w.stop && !w.hurry && w.pending->len < LINGER_BYTES &&
			       g_cond_wait_until(&w.wake, &w.lock, until))
				;
		}
	}
	g_mutex_unlock(&w.lock);
	return NULL;
}

/* Waits, under the lock, until every line handed over before the call is
 * written, for up to FLUSH_WAIT_US. */
static bool
flush_locked(void)
{
	gint64 deadline = g_get_monotonic_time() + FLUSH_WAIT_US;
	guint64 target = w.submitted;

	if (w.thread != NULL && w.written < target) {
		w.hurry = true; /* cut a linger short */
		g_cond_signal(&w.wake);
	}
	while (w.thread != NULL && w.written < target) {
		if (!g_cond_wait_until(&w.written_cond, &w.lock, deadline))
			return w.written >= target;
	}
	return true;
}

bool
nw_log_flush(void)
{
	bool done;

	g_mutex_lock(&w.lock);
	done = flush_locked();
	g_mutex_unlock(&w.lock);
	return done;
}

void
nw_log_writer_start(gsize pending_cap)
{
	static bool at_exit_set;

	g_mutex_lock(&w.lock);
	if (w.thread != NULL) {
		g_mutex_unlock(&w.lock);
		return;
	}
	w.cap = pending_cap;
	w.pending = g_string_sized_new(4096);
	w.spare = g_string_sized_new(4096);
	w.stop = false;
	w.thread = g_thread_new("nw-log", writer_main, NULL);
	g_mutex_unlock(&w.lock);
	if (!at_exit_set) {
		/* A process that ends through exit() still writes its last lines. */
		atexit(nw_log_writer_stop);
		at_exit_set = true;
	}
}

void
nw_log_writer_stop(void)
{
	GThread *thread;
	bool done;

	g_mutex_lock(&w.lock);
	if (w.thread == NULL) {
		g_mutex_unlock(&w.lock);
		return;
	}
	done = flush_locked();
	w.stop = true;
	g_cond_signal(&w.wake);
	thread = w.thread;
	if (!done) {
		/* The stream is stalled; the process is ending: leave the writer
		 * blocked rather than hang on it (it ends on its own if the stream
		 * moves). Lines handed over from now on are written in place. */
		w.thread = NULL;
		g_mutex_unlock(&w.lock);
		g_thread_unref(thread);
		return;
	}
	g_mutex_unlock(&w.lock);
	g_thread_join(thread);
	g_mutex_lock(&w.lock);
	w.thread = NULL;
	g_string_free(w.pending, TRUE);
	g_string_free(w.spare, TRUE);
	w.pending = w.spare = NULL;
	g_mutex_unlock(&w.lock);
}

guint64
nw_log_dropped_lines(void)
{
	guint64 n;

	g_mutex_lock(&w.lock);
	n = w.dropped_total;
	g_mutex_unlock(&w.lock);
	return n;
}

void
nw_log_set_stream(FILE *s)
{
	g_mutex_lock(&w.lock);
	flush_locked();
	w.stream = s;
	g_mutex_unlock(&w.lock);
}

void
nw_log(narwhal_log_level level, const char *event, ...)
{
	struct nw_log_line l;
	const char *key;
	va_list ap;

	if (!nw_log_enabled(level))
		return;
	nw_log_line_begin(&l, level, event);
	va_start(ap, event);
	while ((key = va_arg(ap, const char *)) != NULL)
		nw_log_line_str(&l, key, va_arg(ap, const char *));
	va_end(ap);
	nw_log_line_end(&l);
}

/* GLib's g_warning() and friends, and libraries using GLib logging. */
static GLogWriterOutput
glib_writer(GLogLevelFlags flags, const GLogField *fields, gsize n_fields, gpointer data)
{
	const char *message = "";
	narwhal_log_level level;

	for (gsize i = 0; i < n_fields; i++) {
		if (strcmp(fields[i].key, "MESSAGE") == 0 && fields[i].length < 0)
			message = fields[i].value;
	}
	if (flags & (G_LOG_LEVEL_ERROR | G_LOG_LEVEL_CRITICAL))
		level = NARWHAL_LOG_ERROR;
	else if (flags & G_LOG_LEVEL_WARNING)
		level = NARWHAL_LOG_WARNING;
	else if (flags & (G_LOG_LEVEL_MESSAGE | G_LOG_LEVEL_INFO))
		level = NARWHAL_LOG_INFO;
	else
		level = NARWHAL_LOG_DEBUG;
	nw_log(level, "glib", "message", message, NULL);
	/* GLib aborts after a fatal message: let the line out first. */
	if (flags & (G_LOG_FLAG_FATAL | G_LOG_LEVEL_ERROR))
		nw_log_flush();
	return G_LOG_WRITER_HANDLED;
}

bool
nw_log_setup(const char *level_name, nw_log_format fmt)
{
	narwhal_log_level level;
	static gsize writer_set;

	if (!nw_log_level_parse(level_name, &level))
		return false;
	g_atomic_int_set(&threshold, (gint)level);
	g_atomic_int_set(&format, (gint)fmt);
	if (g_once_init_enter(&writer_set)) {
		g_log_set_writer_func(glib_writer, NULL, NULL);
		g_once_init_leave(&writer_set, 1);
	}
	return true;
}
