#include "build-config.h"

#include "integration/harness.h"

#include <signal.h>
#include <string.h>

#include <curl/curl.h>
#include <glib/gstdio.h>

const char *
harness_narwhal_bin(void)
{
	const char *bin = g_getenv("NARWHAL_BIN");

	g_assert_nonnull(bin);
	return bin;
}

char *
harness_write_config(struct harness_proc *p, const char *json_text)
{
	GError *error = NULL;
	char *file;

	if (p->dir == NULL) {
		p->dir = g_dir_make_tmp("narwhal-test-XXXXXX", &error);
		g_assert_no_error(error);
	}
	file = g_build_filename(p->dir, "narwhal.json", NULL);
	g_file_set_contents(file, json_text, -1, &error);
	g_assert_no_error(error);
	return file;
}

/* Read one stderr line with a deadline, without blocking the test forever. */
static char *
read_line(struct harness_proc *p, gint64 deadline_us)
{
	GPollableInputStream *base = G_POLLABLE_INPUT_STREAM(
		g_subprocess_get_stderr_pipe(p->proc));

	for (;;) {
		gsize avail = g_buffered_input_stream_get_available(G_BUFFERED_INPUT_STREAM(p->err));
		const char *buf = g_buffered_input_stream_peek_buffer(
			G_BUFFERED_INPUT_STREAM(p->err), &avail);

		if (avail > 0 && memchr(buf, '\n', avail) != NULL)
			return g_data_input_stream_read_line(p->err, NULL, NULL, NULL);
		if (g_get_monotonic_time() > deadline_us)
			return NULL;
		if (g_pollable_input_stream_is_readable(base)) {
			GError *error = NULL;
			gssize n = g_buffered_input_stream_fill(G_BUFFERED_INPUT_STREAM(p->err),
			                                        -1, NULL, &error);
			g_clear_error(&error);
			if (n <= 0) {
				/* EOF: hand back a final partial line, if any. */
				avail = g_buffered_input_stream_get_available(
					G_BUFFERED_INPUT_STREAM(p->err));
				if (avail > 0)
					return g_data_input_stream_read_line(p->err, NULL, NULL, NULL);
				return NULL;
			}
			continue;
		}
		g_usleep(2000);
	}
}

gboolean
harness_wait_log(struct harness_proc *p, const char *needle, guint timeout_ms)
{
	gint64 deadline = g_get_monotonic_time() + (gint64)timeout_ms * 1000;
	char *line;

	if (strstr(p->log->str, needle) != NULL)
		return TRUE;
	while ((line = read_line(p, deadline)) != NULL) {
		gboolean hit = strstr(line, needle) != NULL;

		g_string_append_printf(p->log, "%s\n", line);
		g_free(line);
		if (hit)
			return TRUE;
	}
	return FALSE;
}

gboolean
harness_start_daemon(struct harness_proc *p, const char *config_file)
{
	GError *error = NULL;
	json_t *event;
	const char *line_start;
	const char *port;

	if (p->log == NULL)
		p->log = g_string_new(NULL);
	p->proc = g_subprocess_new(G_SUBPROCESS_FLAGS_STDERR_PIPE | G_SUBPROCESS_FLAGS_STDOUT_SILENCE,
	                           &error, harness_narwhal_bin(), "--config", config_file, NULL);
	g_assert_no_error(error);
	p->err = g_data_input_stream_new(g_subprocess_get_stderr_pipe(p->proc));
	if (!harness_wait_log(p, "\"event\":\"listening\"", 10000))
		return FALSE;
	line_start = strstr(p->log->str, "{\"ts\"");
	for (const char *l = line_start; l; l = strstr(l + 1, "{\"ts\"")) {
		/* Within this line only: other events may come first. */
		if (g_strstr_len(l, (gssize)strcspn(l, "\n"), "\"event\":\"listening\"") == NULL)
			continue;
		event = json_loadb(l, strcspn(l, "\n"), 0, NULL);
		g_assert_nonnull(event);
		port = json_string_value(json_object_get(event, "port"));
		g_assert_nonnull(port);
		p->port = (guint16)atoi(port);
		json_decref(event);
		break;
	}
	return p->port != 0;
}

int
harness_stop(struct harness_proc *p, int signo, guint timeout_ms)
{
	gint64 deadline = g_get_monotonic_time() + (gint64)timeout_ms * 1000;

	if (p->proc == NULL)
		return -1;
	g_subprocess_send_signal(p->proc, signo);
	/* GLib reaps the child on its worker thread; keep draining stderr so
	 * the child never blocks on a full pipe while it shuts down. */
	while (g_subprocess_get_identifier(p->proc) != NULL && g_get_monotonic_time() < deadline) {
		if (!harness_wait_log(p, "\x01never", 20))
			g_usleep(1000);
	}
	if (g_subprocess_get_identifier(p->proc) != NULL) {
		g_subprocess_force_exit(p->proc);
		g_subprocess_wait(p->proc, NULL, NULL);
		return -1;
	}
	g_subprocess_wait(p->proc, NULL, NULL);
	harness_wait_log(p, "\x01never", 50);
	return g_subprocess_get_if_exited(p->proc) ? g_subprocess_get_exit_status(p->proc) : -1;
}

void
harness_clear(struct harness_proc *p)
{
	if (p->proc != NULL && g_subprocess_get_identifier(p->proc) != NULL) {
		g_subprocess_force_exit(p->proc);
		g_subprocess_wait(p->proc, NULL, NULL);
	}
	g_clear_object(&p->err);
	g_clear_object(&p->proc);
	if (p->log)
		g_string_free(p->log, TRUE);
	if (p->dir != NULL) {
		g_autofree char *file = g_build_filename(p->dir, "narwhal.json", NULL);
		g_unlink(file);
		g_rmdir(p->dir);
		g_free(p->dir);
	}
	memset(p, 0, sizeof *p);
}

int
harness_run(const char *const *argv, char **out, char **err)
{
	GError *error = NULL;
	GSubprocess *proc = g_subprocess_newv(argv, G_SUBPROCESS_FLAGS_STDOUT_PIPE |
	                                      G_SUBPROCESS_FLAGS_STDERR_PIPE, &error);
	int status;

	g_assert_no_error(error);
	g_subprocess_communicate_utf8(proc, NULL, NULL, out, err, &error);
	g_assert_no_error(error);
	status = g_subprocess_get_if_exited(proc) ? g_subprocess_get_exit_status(proc) : -1;
	g_object_unref(proc);
	return status;
}

static size_t
collect(char *p, size_t size, size_t n, void *userp)
{
	g_string_append_len(userp, p, (gssize)(size * n));
	return size * n;
}

long
harness_http(guint16 port, const char *method, const char *path, const char *body,
             char **response)
{
	CURL *easy = curl_easy_init();
	GString *buf = g_string_new(NULL);
	g_autofree char *url = g_strdup_printf("http://127.0.0.1:%u%s", port, path);
	struct curl_slist *headers = curl_slist_append(NULL, "Content-Type: application/json");
	long status = 0;

	curl_easy_setopt(easy, CURLOPT_URL, url);
	curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(easy, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, collect);
	curl_easy_setopt(easy, CURLOPT_WRITEDATA, buf);
	curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, 10000L);
	curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
	if (body != NULL)
		curl_easy_setopt(easy, CURLOPT_POSTFIELDS, body);
	if (curl_easy_perform(easy) == CURLE_OK)
		curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
	curl_slist_free_all(headers);
	curl_easy_cleanup(easy);
	if (response)
		*response = g_string_free(buf, FALSE);
	else
		g_string_free(buf, TRUE);
	return status;
}
