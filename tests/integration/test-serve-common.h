/*
 * Helpers for the data-plane integration tests: a narwhal-sim fleet and a
 * narwhal daemon in front of it, both real processes on loopback
 * ephemeral ports with their logs in files (a chatty process never blocks
 * on a pipe), plus clients that stream, hang up or stop reading.
 */
#ifndef NW_TEST_SERVE_COMMON_H
#define NW_TEST_SERVE_COMMON_H

#include <glib.h>
#include <jansson.h>

#include "integration/sim-client.h"

struct serve_env {
	struct sim_proc sim;
	GSubprocess *daemon;
	char *dir;
	char *config_path;
	char *log_path;
	guint16 port;
	const char *model;
	/* Dialect settings the fleet needs (plugins.dialects), merged into
	 * every configuration written before the test's own; NULL: none. */
	json_t *dialect_config;
};

/* The environment of the running test, for failure reports. */
extern struct serve_env *serve_current;

/* Start narwhal-sim with its arguments, then narwhal with the fleet and
 * the extra config (a JSON object text merged over the defaults: open
 * admission, static controller, info logs). roles: NULL keeps the sim's
 * roles, else one 'p', 'd' or 'a' (no role) per engine. FALSE (test
 * skipped) when narwhal-sim is not built. */
gboolean serve_start(struct serve_env *e, const char *const *sim_args, const char *roles,
                     const char *config_json);
/* serve_start with each engine's dialect: dialects has one letter per
 * engine ('v': vllm, 's': sglang, 'l': llamacpp), given to narwhal-sim as
 * --engines and --dialect before sim_args; roles has one letter per engine
 * ('p', 'd', or 'a' for none). A SGLang engine is launched in its role
 * (sglang:prefill, sglang:decode, sglang:aggregate) and configured as
 * docs/dialects.md asks: the same role, and an aggregate engine with
 * disaggregation false. A llama.cpp engine's role is only a label. */
gboolean serve_start_dialects(struct serve_env *e, const char *dialects, const char *roles,
                              const char *const *sim_args, const char *config_json);
/* narwhal-sim's --dialect list for engines of these dialect and role
 * letters, as serve_start_dialects launches them (owned). */
char *serve_sim_dialects(const char *dialects, const char *roles);
/* Start only narwhal again, after serve_stop_daemon, or with env vars. */
gboolean serve_start_daemon(struct serve_env *e, const char *config_json, const char *const *envp);
int serve_stop_daemon(struct serve_env *e, int signo, guint timeout_ms);
void serve_clear(struct serve_env *e);
/* serve_clear that also fails the test unless both narwhal and
 * narwhal-sim exit 0 on SIGTERM (a sanitizer build's leak report makes
 * either exit otherwise). */
void serve_finish(struct serve_env *e);
gboolean serve_wait_log(struct serve_env *e, const char *needle, guint timeout_ms);
char *serve_log(struct serve_env *e);

/* A request to narwhal (JSON body, optional extra headers). */
void serve_post(struct serve_env *e, const char *path, const char *body,
                const char *const *headers, long timeout_ms, struct sim_reply *r);

/* Fail the test with narwhal's log. */
G_GNUC_NORETURN void serve_fail(struct serve_env *e, const char *what);
/* A completion (serve_completion_body) that must succeed whole: a JSON
 * answer with max_tokens generated, or a stream (serve_stream_whole);
 * else serve_fail. */
void serve_request_whole(struct serve_env *e, gboolean stream, unsigned max_tokens);

/* The counters of GET /narwhal/health (owned). */
/* Merge src into dst, objects recursively (a config over another). */
void serve_json_merge(json_t *dst, json_t *src);
/* The settings every serve test starts from, without the fleet: loopback
 * on an ephemeral port, info logs, open admission, the static controller
 * (owned). */
json_t *serve_base_config(void);
/* The JSON object text base with extra (an object text, or NULL) merged
 * over it, compact (owned string). */
char *serve_json_merged_text(const char *base, const char *extra);

/* GET /narwhal/health, 200 or 503 (owned). */
json_t *serve_health(struct serve_env *e);
json_t *serve_counters(struct serve_env *e);
/* Poll /narwhal/health until every engine is available (docs/recovery.md). */
gboolean serve_wait_all_available(struct serve_env *e, long timeout_ms);
json_int_t serve_counter(struct serve_env *e, const char *name);

/* A completions body for the served model (owned string). */
char *serve_completion_body(const struct serve_env *e, unsigned max_tokens, gboolean stream);
/* The error code of an error body, or NULL (owned string). */
char *serve_error_code(const char *body);

/* Fail the test (with narwhal's log) unless the reply is an error envelope
 * with this status and code. */
void serve_assert_error(const struct sim_reply *r, long status, const char *code);
/* Fail the test unless the reply is a stream (200) whose last event is an
 * error event with this code (NULL: any), with no [DONE] (spec 4.3). */
void serve_assert_stream_error(const struct sim_reply *r, const char *code);
/* Whether the reply is a whole stream: 200, events, [DONE] last and no
 * error event. */
gboolean serve_stream_whole(const struct sim_reply *r);
/* Wait (bounded) until an engine's stats field reaches value. */
gboolean serve_wait_stat(struct serve_env *e, unsigned engine, const char *field,
                         json_int_t value, guint timeout_ms);

/* A request in a thread, for holding requests open while a test goes on. */
struct serve_async {
	GThread *thread;
	struct serve_env *env;
	char *path;
	char *body;
	long timeout_ms;
	struct sim_reply reply;
	gint64 done_us;   /* when the answer was complete (monotonic) */
};
struct serve_async *serve_post_async(struct serve_env *e, const char *path, const char *body,
                                     long timeout_ms);
/* Join and free; the reply is moved to *r, and *done_us (may be NULL)
 * says when it was complete. */
void serve_async_join(struct serve_async *a, struct sim_reply *r, gint64 *done_us);
/* Start requests one after the other, each only once narwhal counts it
 * (counter requests_completions reaches base + i + 1): arrival order is
 * then certain. */
void serve_post_in_order(struct serve_env *e, const char *body, struct serve_async **out,
                         unsigned n);

/* Raw client: connect, send a POST, return the socket (or -1). rcvbuf > 0
 * shrinks the receive buffer before connecting. */
int serve_raw_post(guint16 port, const char *path, const char *body, int rcvbuf);
/* Read until needle shows up in what was read, or the time passes. */
gboolean serve_raw_read_until(int fd, GString *got, const char *needle, guint timeout_ms);

/* A plugin directory with the built-in plugins and the mock dialect of
 * tests/plugins as "dialect-mock.so" (symbolic links); freed with
 * serve_plugin_dir_free. */
char *serve_plugin_dir_new(void);
void serve_plugin_dir_free(char *dir);
/* Restart narwhal with engine i's dialect set as dialects[i] ('v': vllm,
 * 'm': the mock, 'l': llamacpp) and the extra configuration, whatever the
 * simulator engine speaks (serve_start_dialects starts engines that speak
 * each dialect). */
void serve_restart_with_dialects(struct serve_env *e, const char *dialects,
                                 const char *config_json);

/* A loopback fake engine: a scripted HTTP/1.1 server for what narwhal-sim
 * cannot do. serve runs for every accepted connection, in a thread of its
 * own, and closes the descriptor when done. */
typedef void (*serve_fake_fn)(int fd, gpointer data);
struct serve_fake_engine {
	int fd;
	guint16 port;
	GThread *acceptor;
	gint stop;
	serve_fake_fn serve;
	gpointer data;
};
void serve_fake_engine_start(struct serve_fake_engine *f, serve_fake_fn serve, gpointer data);
/* Stop accepting; connection threads end when narwhal closes its side. */
void serve_fake_engine_stop(struct serve_fake_engine *f);
/* Write all of text; FALSE on a write error. */
gboolean serve_send_all(int fd, const char *text);
/* Read from fd until in starts with one whole request (its head, and the
 * body its Content-Length gives); the request's length, or 0 when the peer
 * closed first. The caller erases the request from in after answering. */
size_t serve_fake_read_request(int fd, GString *in);
/* Answer the monitor's calls the way vLLM does (docs/recovery.md): GET
 * /health (200), GET /v1/models (model opt-13b-a100, max_model_len 2048)
 * and GET /metrics (an idle engine). request is the request's head; with
 * close, Connection: close. -1 when request is none of them (nothing sent),
 * else whether the answer was written. */
int serve_fake_answer_control(int fd, const char *request, gboolean close);

/* A profile store in a directory of its own for engines sim-0 ...
 * sim-(n_engines - 1) (narwhal-sim's ids) of the opt-13b-a100 preset
 * running at time_scale (model seconds per real second), so a test prices
 * exactly the engines it runs against. */
struct serve_store {
	char *dir;
	char *path;
};
void serve_store_write(struct serve_store *s, unsigned n_engines, double time_scale);
void serve_store_clear(struct serve_store *s);

/* Raw sockets to a loopback port, for what an HTTP client would not send:
 * a connected socket (asserted), a whole write (asserted), and a read
 * until the server closes (TRUE) or timeout_ms passes (FALSE), *reset
 * saying whether the end was a reset rather than a close. */
int serve_raw_connect(guint16 port);
void serve_raw_send(int fd, const char *text, size_t len);
gboolean serve_raw_read_to_eof(int fd, GString *got, guint timeout_ms, gboolean *reset);
/* request on a fresh connection, and the whole answer, read until the
 * server closes (asserted to come within timeout_ms). */
GString *serve_raw_exchange(guint16 port, const char *request, guint timeout_ms);

#endif /* NW_TEST_SERVE_COMMON_H */
