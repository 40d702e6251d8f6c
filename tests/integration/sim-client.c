#include "build-config.h"

#include "integration/sim-client.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <curl/curl.h>
#include <glib/gstdio.h>

char *
sim_bin(void)
{
	const char *bin = g_getenv("NARWHAL_SIM_BIN");
	const char *narwhal = g_getenv("NARWHAL_BIN");
	g_autofree char *dir = NULL;

	if (bin != NULL && *bin != '\0')
		return g_strdup(bin);
	g_assert_nonnull(narwhal);
	dir = g_path_get_dirname(narwhal);
	return g_build_filename(dir, "narwhal-sim", NULL);
}

const char *
sim_replay_bin(void)
{
	static char *bin;
	const char *env = g_getenv("NARWHAL_REPLAY_BIN");

	if (env && *env)
		return env;
	if (bin == NULL)
		bin = g_test_build_filename(G_TEST_BUILT, "..", "narwhal-replay", NULL);
	return bin;
}

static char *
read_file(const char *path)
{
	char *text = NULL;

	if (!g_file_get_contents(path, &text, NULL, NULL))
		return g_strdup("");
	return text;
}

gboolean
sim_wait_log(struct sim_proc *p, const char *needle, guint timeout_ms)
{
	gint64 deadline = g_get_monotonic_time() + (gint64)timeout_ms * 1000;

	do {
		g_autofree char *text = read_file(p->err_path);

		if (strstr(text, needle) != NULL)
			return TRUE;
		g_usleep(5000);
	} while (g_get_monotonic_time() < deadline);
	return FALSE;
}

/* In the child: die with the test, so a failed assertion (which aborts the
 * test before it can stop its simulators) leaves no process behind. */
static void
die_with_parent(gpointer unused)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
}

static guint16
port_of_url(const char *url)
{
	const char *colon = url ? strrchr(url, ':') : NULL;

	return colon ? (guint16)atoi(colon + 1) : 0;
}

gboolean
sim_start(struct sim_proc *p, const char *const *args)
{
	g_autoptr(GSubprocessLauncher) launcher = g_subprocess_launcher_new(G_SUBPROCESS_FLAGS_NONE);
	g_autoptr(GPtrArray) argv = g_ptr_array_new_with_free_func(g_free);
	GError *error = NULL;
	gint64 deadline = g_get_monotonic_time() + 10 * G_USEC_PER_SEC;
	json_t *engines;
	const char *at;

	memset(p, 0, sizeof *p);
	p->dir = g_dir_make_tmp("narwhal-sim-test-XXXXXX", &error);
	g_assert_no_error(error);
	p->out_path = g_build_filename(p->dir, "stdout", NULL);
	p->err_path = g_build_filename(p->dir, "stderr", NULL);
	/* Files, not pipes: a chatty child can never block on a full pipe. */
	g_subprocess_launcher_set_stdout_file_path(launcher, p->out_path);
	g_subprocess_launcher_set_stderr_file_path(launcher, p->err_path);
	g_subprocess_launcher_set_child_setup(launcher, die_with_parent, NULL, NULL);
	g_ptr_array_add(argv, sim_bin());
	g_ptr_array_add(argv, g_strdup("--base-port"));
	g_ptr_array_add(argv, g_strdup("0"));
	for (const char *const *a = args; a && *a; a++)
		g_ptr_array_add(argv, g_strdup(*a));
	g_ptr_array_add(argv, NULL);
	p->proc = g_subprocess_launcher_spawnv(launcher, (const char *const *)argv->pdata, &error);
	g_assert_no_error(error);

	while (p->fleet == NULL && g_get_monotonic_time() < deadline) {
		g_autofree char *out = read_file(p->out_path);
		char *nl = strchr(out, '\n');

		if (nl != NULL) {
			p->fleet = json_loadb(out, (size_t)(nl - out), 0, NULL);
			break;
		}
		if (g_subprocess_get_identifier(p->proc) == NULL)
			return FALSE; /* exited */
		g_usleep(5000);
	}
	if (p->fleet == NULL)
		return FALSE;
	engines = json_object_get(p->fleet, "engines");
	p->n_engines = (unsigned)MIN(json_array_size(engines), SIM_MAX_ENGINES);
	for (unsigned i = 0; i < p->n_engines; i++)
		p->ports[i] = port_of_url(json_string_value(json_object_get(
			json_array_get(engines, i), "url")));
	if (!sim_wait_log(p, "\"event\":\"admin_listening\"", 5000))
		return FALSE;
	{
		g_autofree char *err = read_file(p->err_path);

		at = strstr(err, "\"event\":\"admin_listening\"");
		at = at ? strstr(at, "\"port\":\"") : NULL;
		p->admin_port = at ? (guint16)atoi(at + strlen("\"port\":\"")) : 0;
	}
	return p->admin_port != 0;
}

int
sim_stop(struct sim_proc *p, int signo, guint timeout_ms)
{
	gint64 deadline = g_get_monotonic_time() + (gint64)timeout_ms * 1000;

	if (p->proc == NULL)
		return -1;
	if (g_subprocess_get_identifier(p->proc) != NULL)
		g_subprocess_send_signal(p->proc, signo);
	while (g_subprocess_get_identifier(p->proc) != NULL && g_get_monotonic_time() < deadline)
		g_usleep(2000);
	if (g_subprocess_get_identifier(p->proc) != NULL) {
		g_subprocess_force_exit(p->proc);
		g_subprocess_wait(p->proc, NULL, NULL);
		return -1;
	}
	g_subprocess_wait(p->proc, NULL, NULL);
	return g_subprocess_get_if_exited(p->proc) ? g_subprocess_get_exit_status(p->proc) : -1;
}

void
sim_clear(struct sim_proc *p)
{
	if (p->proc != NULL && g_subprocess_get_identifier(p->proc) != NULL) {
		g_subprocess_force_exit(p->proc);
		g_subprocess_wait(p->proc, NULL, NULL);
	}
	if (p->proc != NULL && g_test_failed()) {
		g_autofree char *err = read_file(p->err_path);

		g_test_message("narwhal-sim stderr:\n%s", err);
	}
	g_clear_object(&p->proc);
	json_decref(p->fleet);
	if (p->dir != NULL) {
		g_unlink(p->out_path);
		g_unlink(p->err_path);
		g_rmdir(p->dir);
	}
	g_free(p->out_path);
	g_free(p->err_path);
	g_free(p->dir);
	memset(p, 0, sizeof *p);
}

/* --- HTTP ---------------------------------------------------------------- */

struct transfer {
	struct sim_reply *r;
	gint64 start_us;
};

static size_t
collect_body(char *data, size_t size, size_t n, void *userp)
{
	struct transfer *t = userp;

	if (t->r->first_byte_s < 0 && size * n > 0)
		t->r->first_byte_s = (double)(g_get_monotonic_time() - t->start_us) / 1e6;
	g_string_append_len(t->r->body, data, (gssize)(size * n));
	return size * n;
}

static size_t
collect_headers(char *data, size_t size, size_t n, void *userp)
{
	g_string_append_len(userp, data, (gssize)(size * n));
	return size * n;
}

void
sim_http(guint16 port, const char *method, const char *path, const char *body,
         const char *const *headers, long timeout_ms, struct sim_reply *r)
{
	CURL *easy = curl_easy_init();
	g_autofree char *url = g_strdup_printf("http://127.0.0.1:%u%s", port, path);
	struct curl_slist *list = curl_slist_append(NULL, "Content-Type: application/json");
	struct transfer t = { .r = r, .start_us = g_get_monotonic_time() };

	memset(r, 0, sizeof *r);
	r->body = g_string_new(NULL);
	r->headers = g_string_new(NULL);
	r->first_byte_s = -1;
	for (const char *const *h = headers; h && *h; h++)
		list = curl_slist_append(list, *h);
	curl_easy_setopt(easy, CURLOPT_URL, url);
	curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(easy, CURLOPT_HTTPHEADER, list);
	curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, collect_body);
	curl_easy_setopt(easy, CURLOPT_WRITEDATA, &t);
	curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, collect_headers);
	curl_easy_setopt(easy, CURLOPT_HEADERDATA, r->headers);
	curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, timeout_ms > 0 ? timeout_ms : 10000L);
	curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, 2000L);
	curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
	if (body != NULL)
		curl_easy_setopt(easy, CURLOPT_POSTFIELDS, body);
	if (strcmp(method, "HEAD") == 0)
		curl_easy_setopt(easy, CURLOPT_NOBODY, 1L);
	r->curl_code = (int)curl_easy_perform(easy);
	curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &r->status);
	r->seconds = (double)(g_get_monotonic_time() - t.start_us) / 1e6;
	curl_slist_free_all(list);
	curl_easy_cleanup(easy);
}

void
sim_reply_clear(struct sim_reply *r)
{
	if (r->body)
		g_string_free(r->body, TRUE);
	if (r->headers)
		g_string_free(r->headers, TRUE);
	memset(r, 0, sizeof *r);
}

char *
sim_reply_header(const struct sim_reply *r, const char *name)
{
	g_auto(GStrv) lines = g_strsplit(r->headers->str, "\r\n", -1);
	size_t len = strlen(name);

	for (char **l = lines; *l; l++) {
		if (g_ascii_strncasecmp(*l, name, len) == 0 && (*l)[len] == ':')
			return g_strstrip(g_strdup(*l + len + 1));
	}
	return NULL;
}

json_t *
sim_json(const char *text)
{
	json_error_t je;
	json_t *doc = json_loads(text, 0, &je);

	if (doc == NULL)
		g_error("not JSON (%s): %s", je.text, text);
	return doc;
}

GPtrArray *
sim_sse_events(const char *body)
{
	GPtrArray *events = g_ptr_array_new_with_free_func(g_free);
	g_auto(GStrv) parts = g_strsplit(body, "\n\n", -1);

	for (char **p = parts; *p; p++) {
		if (g_str_has_prefix(*p, "data: "))
			g_ptr_array_add(events, g_strdup(*p + strlen("data: ")));
		else
			g_assert_cmpstr(*p, ==, ""); /* only data events, only at the end empty */
	}
	return events;
}

double
sim_metric(guint16 port, const char *prefix)
{
	struct sim_reply r;
	const char *at;
	double v;

	sim_http(port, "GET", "/metrics", NULL, NULL, 5000, &r);
	g_assert_cmpint(r.status, ==, 200);
	/* At the start of a line, so a HELP or TYPE comment never matches. */
	for (at = r.body->str; at != NULL && !g_str_has_prefix(at, prefix);) {
		at = strchr(at, '\n');
		at = at ? at + 1 : NULL;
	}
	if (at == NULL)
		g_error("no /metrics sample starts with \"%s\"", prefix);
	/* The value is the line's last token: the simulator sends no
	 * timestamps. */
	{
		const char *eol = strchr(at, '\n');
		g_autofree char *line = eol ? g_strndup(at, (gsize)(eol - at)) : g_strdup(at);

		v = g_ascii_strtod(strrchr(line, ' ') + 1, NULL);
	}
	sim_reply_clear(&r);
	return v;
}

json_t *
sim_engine_stats(const struct sim_proc *p, unsigned engine)
{
	struct sim_reply r;
	const char *id = json_string_value(json_object_get(json_array_get(
		json_object_get(p->fleet, "engines"), engine), "id"));
	g_autofree char *path = g_strdup_printf("/sim/engines/%s", id);
	json_t *doc, *stats;

	sim_http(p->admin_port, "GET", path, NULL, NULL, 5000, &r);
	g_assert_cmpint(r.status, ==, 200);
	doc = sim_json(r.body->str);
	stats = json_incref(json_object_get(doc, "stats"));
	json_decref(doc);
	sim_reply_clear(&r);
	return stats;
}

long
sim_set_faults(const struct sim_proc *p, unsigned engine, const char *faults_json)
{
	struct sim_reply r;
	const char *id = json_string_value(json_object_get(json_array_get(
		json_object_get(p->fleet, "engines"), engine), "id"));
	g_autofree char *path = g_strdup_printf("/sim/engines/%s/faults", id);
	long status;

	sim_http(p->admin_port, "POST", path, faults_json, NULL, 5000, &r);
	status = r.status;
	sim_reply_clear(&r);
	return status;
}

long
sim_reset_faults(const struct sim_proc *p)
{
	struct sim_reply r;
	long status;

	sim_http(p->admin_port, "POST", "/sim/reset", "", NULL, 5000, &r);
	status = r.status;
	sim_reply_clear(&r);
	return status;
}

json_int_t
sim_engine_stat(const struct sim_proc *p, unsigned engine, const char *key)
{
	json_t *stats = sim_engine_stats(p, engine);
	json_int_t n = json_integer_value(json_object_get(stats, key));

	json_decref(stats);
	return n;
}

json_int_t
sim_fleet_stat(const struct sim_proc *p, const char *key)
{
	json_int_t sum = 0;

	for (unsigned i = 0; i < p->n_engines; i++)
		sum += sim_engine_stat(p, i, key);
	return sum;
}

gboolean
sim_wait_fleet_stat(const struct sim_proc *p, const char *key, json_int_t value,
                    guint timeout_ms)
{
	gint64 deadline = g_get_monotonic_time() + (gint64)timeout_ms * 1000;

	while (sim_fleet_stat(p, key) != value) {
		if (g_get_monotonic_time() >= deadline)
			return FALSE;
		g_usleep(2000);
	}
	return TRUE;
}

int
sim_raw_request(guint16 port, const char *path, const char *body, guint timeout_ms)
{
	struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = htons(port) };
	g_autofree char *req = g_strdup_printf("POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\n"
	                                       "Content-Type: application/json\r\n"
	                                       "Content-Length: %zu\r\n\r\n%s",
	                                       path, strlen(body), body);
	gint64 deadline = g_get_monotonic_time() + (gint64)timeout_ms * 1000;
	GString *got = g_string_new(NULL);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
	if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0 ||
	    write(fd, req, strlen(req)) != (ssize_t)strlen(req)) {
		if (fd >= 0)
			close(fd);
		g_string_free(got, TRUE);
		return -1;
	}
	/* Read until a first SSE event arrived, or the time is up. */
	while (strstr(got->str, "data:") == NULL && g_get_monotonic_time() < deadline) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		char buf[4096];
		ssize_t n;

		if (poll(&pfd, 1, 10) <= 0)
			continue;
		n = read(fd, buf, sizeof buf);
		if (n <= 0)
			break;
		g_string_append_len(got, buf, n);
	}
	g_string_free(got, TRUE);
	return fd;
}

/* --- command-line tools ------------------------------------------------- */

struct tool_wait {
	GSubprocess *proc;
	gboolean done;
	gboolean timed_out;
	char *out;
	char *err;
};

static void
tool_communicated(GObject *source, GAsyncResult *res, gpointer data)
{
	struct tool_wait *w = data;
	GError *error = NULL;

	(void)source;
	g_subprocess_communicate_utf8_finish(w->proc, res, &w->out, &w->err, &error);
	g_assert_no_error(error);
	w->done = TRUE;
}

static gboolean
tool_timed_out(gpointer data)
{
	struct tool_wait *w = data;

	w->timed_out = TRUE;
	g_subprocess_force_exit(w->proc);
	return G_SOURCE_REMOVE;
}

void
tool_run(const char *bin, const char *name, const char *const *args, guint timeout_s,
         struct tool_run *r)
{
	g_autoptr(GPtrArray) argv = g_ptr_array_new();
	struct tool_wait w = { 0 };
	GError *error = NULL;
	gint64 started = g_get_monotonic_time();
	guint timer;

	memset(r, 0, sizeof *r);
	g_ptr_array_add(argv, (gpointer)bin);
	for (const char *const *a = args; *a; a++)
		g_ptr_array_add(argv, (gpointer)*a);
	g_ptr_array_add(argv, NULL);
	w.proc = g_subprocess_newv((const char *const *)argv->pdata,
	                           G_SUBPROCESS_FLAGS_STDOUT_PIPE | G_SUBPROCESS_FLAGS_STDERR_PIPE,
	                           &error);
	g_assert_no_error(error);
	g_subprocess_communicate_utf8_async(w.proc, NULL, NULL, tool_communicated, &w);
	timer = g_timeout_add_seconds(timeout_s, tool_timed_out, &w);
	while (!w.done)
		g_main_context_iteration(NULL, TRUE);
	if (!w.timed_out)
		g_source_remove(timer);
	g_subprocess_wait(w.proc, NULL, NULL);
	r->status = g_subprocess_get_if_exited(w.proc) ? g_subprocess_get_exit_status(w.proc) : -1;
	r->out = w.out;
	r->err = w.err;
	r->doc = json_loads(r->out ? r->out : "", 0, NULL);
	r->seconds = (double)(g_get_monotonic_time() - started) / 1e6;
	g_object_unref(w.proc);
	g_test_message("%s exit %d after %.1f s\nstdout:\n%s\nstderr:\n%s", name, r->status,
	               r->seconds, r->out, r->err);
}

void
tool_run_clear(struct tool_run *r)
{
	g_free(r->out);
	g_free(r->err);
	json_decref(r->doc);
	memset(r, 0, sizeof *r);
}
