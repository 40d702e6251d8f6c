/* narwhal-plugin-check's checks, each in a child process (sandbox.h). */
#include "build-config.h"

#include "tools/plugin-kit/sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <glib-unix.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/log.h"
#include "tools/plugin-kit/guard.h"

/* Lines of the plugin's output passed on; the rest is counted. */
#define KIT_SHOWN_LINES 20
/* Bytes read from a pipe at a time, so a plugin that writes without end
 * cannot keep the parent from its watch. */
#define KIT_READ_CHUNK 65536

static int tool_stderr = -1;
/* Lines of the plugin's output passed on so far, over every check. */
static guint shown;

int
kit_sandbox_tool_stderr(void)
{
	return tool_stderr;
}

/* The child: limits, the plugin's output into the capture pipe, the tool's
 * log lines to the real standard error, then the check. It never returns
 * to the caller's loop: _exit skips the plugin's destructors and atexit
 * handlers, so no plugin code runs after the verdict. */
static void G_GNUC_NORETURN
child(const char *check, kit_child_fn fn, void *data, int result_fd, int capture_fd, pid_t parent)
{
	struct rlimit no_core = { 0, 0 };
	FILE *out = fdopen(result_fd, "w");
	FILE *log;

	setpgid(0, 0); /* the parent stops the whole group, whatever the plugin started */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent || out == NULL)
		_exit(127);
	setrlimit(RLIMIT_CORE, &no_core);
#if !defined(__SANITIZE_ADDRESS__)
	{
		struct rlimit as = { KIT_MEMORY_LIMIT, KIT_MEMORY_LIMIT };

		setrlimit(RLIMIT_AS, &as);
	}
#endif
	tool_stderr = dup(STDERR_FILENO);
	log = tool_stderr >= 0 ? fdopen(tool_stderr, "w") : NULL;
	if (log != NULL) {
		setvbuf(log, NULL, _IOLBF, 0);
		nw_log_set_stream(log);
	}
	dup2(capture_fd, STDOUT_FILENO);
	dup2(capture_fd, STDERR_FILENO);
	close(capture_fd);
	setvbuf(stdout, NULL, _IONBF, 0); /* a plugin's printf out before it crashes */
	fn(check, data, out);
	fflush(out);
	_exit(0);
}

/* What the child printed, and what the plugin wrote, as it comes. */
struct watch {
	const char *check;
	GString *result;
	GString *line;            /* the plugin's output since its last newline */
	guint64 bytes;
};

static void
show_line(struct watch *w, const char *text, gsize len)
{
	if (shown < KIT_SHOWN_LINES)
		fprintf(stderr, "plugin output (%s): %.*s\n", w->check, (int)len, text);
	else if (shown == KIT_SHOWN_LINES)
		fprintf(stderr, "plugin output (%s): ... (no more is shown)\n", w->check);
	shown++;
}

static void
take_output(struct watch *w, const char *buf, gsize len)
{
	const char *nl;

	w->bytes += len;
	g_string_append_len(w->line, buf, (gssize)len);
	while ((nl = memchr(w->line->str, '\n', w->line->len)) != NULL) {
		show_line(w, w->line->str, (gsize)(nl - w->line->str));
		g_string_erase(w->line, 0, nl - w->line->str + 1);
	}
	if (w->line->len > 4096) { /* a line without end */
		show_line(w, w->line->str, w->line->len);
		g_string_truncate(w->line, 0);
	}
}

/* Reads what a pipe holds now; FALSE once it is closed. */
static gboolean
drain(int fd, struct watch *w, gboolean output)
{
	char buf[4096];
	gsize taken = 0;

	while (taken < KIT_READ_CHUNK) {
		ssize_t n = read(fd, buf, sizeof buf);

		if (n > 0) {
			taken += (gsize)n;
			if (output)
				take_output(w, buf, (gsize)n);
			else
				g_string_append_len(w->result, buf, n);
		} else if (n == 0) {
			return FALSE;
		} else {
			return errno == EAGAIN || errno == EINTR;
		}
	}
	return TRUE;
}

/* Where the child was when it ended, from the record it shares. */
static char *
where(void)
{
	const struct kit_guard_record *rec = kit_guard_record();

	if (rec->loading)
		return g_strdup("while the loader read it (its constructors, narwhal_plugin_entry() or "
		                "the descriptor it returned)");
	if (__atomic_load_n(&rec->started_us, __ATOMIC_ACQUIRE) != 0)
		return g_strdup_printf("in %s", rec->slot);
	if (rec->slot[0] != '\0')
		return g_strdup_printf("after %s returned, while the check read what it returned",
		                       rec->slot);
	return g_strdup("before the first plugin call");
}

/* The child's verdict line for check, when it gave one. */
static const char *
verdict_of(const char *text, const char *check)
{
	size_t n = strlen(check);

	for (const char *l = text; l != NULL && *l != '\0'; l = strchr(l, '\n')) {
		if (*l == '\n')
			l++;
		if ((g_str_has_prefix(l, "PASS  ") || g_str_has_prefix(l, "FAIL  ")) &&
		    strncmp(l + 6, check, n) == 0 && l[6 + n] == ':')
			return l;
	}
	return NULL;
}

enum stop { RAN, STOPPED_CALL, STOPPED_CHECK };

static void
fail_ended(FILE *out, const char *check, enum stop stop, int status)
{
	g_autofree char *at = where();

	if (stop == STOPPED_CALL && kit_guard_record()->loading)
		fprintf(out, "FAIL  %s: the loader had not finished after %d s %s, so the check was "
		        "stopped: a plugin must never block or loop\n", check,
		        (int)(KIT_CALL_LIMIT_US / G_USEC_PER_SEC), at);
	else if (stop == STOPPED_CALL)
		fprintf(out, "FAIL  %s: %s did not return within %d s, so the check was stopped: a "
		        "plugin call must never block or loop\n", check, kit_guard_record()->slot,
		        (int)(KIT_CALL_LIMIT_US / G_USEC_PER_SEC));
	else if (stop == STOPPED_CHECK)
		fprintf(out, "FAIL  %s: the check did not finish within %d s, so it was stopped (the "
		        "last call: %s): plugin calls must be quick\n", check,
		        (int)(KIT_CHECK_LIMIT_US / G_USEC_PER_SEC), kit_guard_record()->slot);
	else if (WIFSIGNALED(status))
		fprintf(out, "FAIL  %s: the plugin crashed %s (%s, signal %d): the daemon would "
		        "crash too\n", check, at, g_strsignal(WTERMSIG(status)), WTERMSIG(status));
	else
		fprintf(out, "FAIL  %s: the process ended %s, with exit status %d: a plugin must "
		        "never end the process (exit, abort)\n", check, at, WEXITSTATUS(status));
}

gboolean
kit_sandbox_run(const char *check, kit_child_fn fn, void *data, FILE *out,
                struct kit_output *output)
{
	const struct kit_guard_record *rec = kit_guard_record();
	struct watch w = { check, g_string_new(NULL), g_string_new(NULL), 0 };
	int result[2] = { -1, -1 }, capture[2] = { -1, -1 };
	gboolean open_result = TRUE, open_capture = TRUE, passed = FALSE;
	enum stop stop = RAN;
	const char *verdict;
	gint64 begun;
	int status = 0;
	pid_t pid = -1, self = getpid();

	kit_guard_begin_check();
	fflush(NULL); /* nothing buffered here for the child to write again */
	if (!g_unix_open_pipe(result, FD_CLOEXEC, NULL) ||
	    !g_unix_open_pipe(capture, FD_CLOEXEC, NULL) || (pid = fork()) < 0) {
		fprintf(out, "FAIL  %s: could not start the check's process: %s\n", check,
		        g_strerror(errno));
		goto out;
	}
	if (pid == 0) {
		close(result[0]);
		close(capture[0]);
		child(check, fn, data, result[1], capture[1], self);
	}
	setpgid(pid, pid);
	close(result[1]);
	close(capture[1]);
	result[1] = capture[1] = -1;
	g_unix_set_fd_nonblocking(result[0], TRUE, NULL);
	g_unix_set_fd_nonblocking(capture[0], TRUE, NULL);

	begun = g_get_monotonic_time();
	for (;;) {
		struct pollfd fds[2] = { { open_result ? result[0] : -1, POLLIN, 0 },
			                 { open_capture ? capture[0] : -1, POLLIN, 0 } };
		siginfo_t info = { 0 };
		gint64 now, started;

		poll(fds, 2, 20);
		if (open_result)
			open_result = drain(result[0], &w, FALSE);
		if (open_capture)
			open_capture = drain(capture[0], &w, TRUE);
		/* Ended: left unreaped (WNOWAIT) so its group can still be
		 * stopped without a reused process id. */
		if (waitid(P_PID, (id_t)pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
		    info.si_pid == pid)
			break;
		if (stop != RAN)
			continue;
		now = g_get_monotonic_time();
		started = __atomic_load_n(&rec->started_us, __ATOMIC_ACQUIRE);
		if (started != 0 && now - started > KIT_CALL_LIMIT_US)
			stop = STOPPED_CALL;
		else if (now - begun > KIT_CHECK_LIMIT_US)
			stop = STOPPED_CHECK;
		if (stop != RAN)
			kill(-pid, SIGKILL);
	}
	kill(-pid, SIGKILL); /* whatever the plugin left running */
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (open_result)
		drain(result[0], &w, FALSE);
	if (open_capture)
		drain(capture[0], &w, TRUE);
	if (w.line->len > 0)
		show_line(&w, w.line->str, w.line->len);

	verdict = verdict_of(w.result->str, check);
	if (stop == RAN && WIFEXITED(status) && WEXITSTATUS(status) == 0 && verdict != NULL) {
		fputs(w.result->str, out);
		passed = g_str_has_prefix(verdict, "PASS");
	} else {
		fail_ended(out, check, stop, status);
	}
out:
	if (w.bytes > 0 && output->bytes == 0)
		g_strlcpy(output->first_check, check, sizeof output->first_check);
	output->bytes += w.bytes;
	for (int i = 0; i < 2; i++) {
		if (result[i] >= 0)
			close(result[i]);
		if (capture[i] >= 0)
			close(capture[i]);
	}
	g_string_free(w.result, TRUE);
	g_string_free(w.line, TRUE);
	fflush(out);
	return passed;
}
