/*
 * narwhal-replay as a real process against a fake OpenAI-compatible engine
 * whose timing is known: the engine runs in this process on the GLib loop
 * (src/net/http-server.h), answers /v1/models, and streams completions or
 * chat chunks with a fixed TTFT and a fixed gap between tokens, on an
 * absolute schedule so the gaps do not drift. With faults on, request
 * replay-<n> with n % 10 == 3 gets a 429 with Retry-After, 5 an in-band
 * error after two tokens, 7 a stream cut without [DONE].
 *
 * Checked from narwhal-replay's JSON and CSV: TTFT, TPOT, end-to-end
 * latency, counts, statuses, Retry-After, error events, attainment,
 * goodput, lateness under a concurrency cap, prompt token counts (the
 * engine counts words the way narwhal-sim's tokeniser does), X-Request-Id,
 * model discovery, the sweep, the plot, and the exit codes. Every run is
 * bounded in time; everything is on loopback.
 */
#include "build-config.h"

#include <math.h>
#include <signal.h>
#include <string.h>

#include <gio/gio.h>
#include <glib/gstdio.h>

#include "integration/sim-client.h"
#include "net/http-server.h"
#include "net/loop.h"
#include "net/upstream.h"

#define TTFT_MS 100
#define ITL_MS 10
#define RUN_LIMIT_S 60

struct engine {
	struct nw_http_server *srv;
	bool faults;
	unsigned requests;
	unsigned bad_model;
	GHashTable *ids;          /* X-Request-Id values seen */
	char *last_path;
};

struct req {
	struct engine *e;
	struct MHD_Connection *conn;
	GString *in;              /* request body */
	GString *out;             /* SSE bytes not yet read by MHD */
	GSource *tick;
	char *rid;
	int64_t t0;               /* when the request was complete */
	unsigned id;              /* n of replay-<n> */
	unsigned max_tokens;
	unsigned prompt_tokens;
	unsigned sent;            /* tokens written */
	bool chat, stream, queued, suspended, ended, ready;
	int fault;                /* n % 10 when faults are on, else -1 */
};

static struct engine engine;

/* narwhal-sim's rule: a space and 1-4 lowercase letters is one token;
 * longer runs take one token per four letters. Plus one BOS. */
static unsigned
count_tokens(const char *s)
{
	unsigned n = 1;

	while (*s) {
		size_t run;

		while (*s == ' ')
			s++;
		run = strspn(s, "abcdefghijklmnopqrstuvwxyz");
		if (run == 0 && *s) {
			s++;
			n++;
			continue;
		}
		n += (unsigned)((run + 3) / 4);
		s += run;
	}
	return n;
}

static void
wake(struct req *r)
{
	if (r->suspended) {
		r->suspended = false;
		nw_http_server_resume(r->e->srv, r->conn);
	}
}

static void
emit_token(struct req *r)
{
	bool last = r->sent + 1 == r->max_tokens;

	if (r->chat && r->sent == 0)
		g_string_append_printf(r->out, "data: {\"id\":\"chatcmpl-%s\",\"object\":"
		                       "\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":"
		                       "{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n", r->rid);
	if (r->chat)
		g_string_append_printf(r->out, "data: {\"id\":\"chatcmpl-%s\",\"object\":"
		                       "\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":"
		                       "{\"content\":\" tok\"},\"finish_reason\":%s}]}\n\n",
		                       r->rid, last ? "\"length\"" : "null");
	else
		g_string_append_printf(r->out, "data: {\"id\":\"cmpl-%s\",\"object\":\"text_completion\","
		                       "\"created\":0,\"model\":\"fake-model\",\"choices\":[{\"index\":0,"
		                       "\"text\":\" tok\",\"logprobs\":null,\"finish_reason\":%s}]}\n\n",
		                       r->rid, last ? "\"length\"" : "null");
	r->sent++;
}

static void
on_tick(void *data)
{
	struct req *r = data;

	if (!r->stream) {
		/* The whole answer is due: let the handler queue it. */
		r->ready = true;
		wake(r);
		return;
	}
	emit_token(r);
	if (r->fault == 5 && r->sent == 2) {
		g_string_append(r->out, "data: {\"error\":{\"message\":\"simulated failure\",\"type\":"
		                "\"InternalServerError\",\"param\":null,\"code\":500}}\n\ndata: [DONE]\n\n");
		r->ended = true;
	} else if (r->fault == 7 && r->sent == 2) {
		r->ended = true; /* cut: no usage, no [DONE] */
	} else if (r->sent == r->max_tokens) {
		g_string_append_printf(r->out, "data: {\"id\":\"cmpl-%s\",\"choices\":[],\"usage\":"
		                       "{\"prompt_tokens\":%u,\"completion_tokens\":%u,\"total_tokens\":%u}}"
		                       "\n\ndata: [DONE]\n\n", r->rid, r->prompt_tokens, r->sent,
		                       r->prompt_tokens + r->sent);
		r->ended = true;
	} else {
		/* Absolute times: token k is due at TTFT + k * ITL, whatever the
		 * loop's delays were. */
		nw_deadline_source_set(r->tick, r->t0 + (TTFT_MS + (int64_t)r->sent * ITL_MS) * 1000);
	}
	wake(r);
}

static void
on_hangup(void *data)
{
	struct req *r = data;

	r->ended = true;
	nw_deadline_source_set(r->tick, -1);
	wake(r);
}

static ssize_t
reader(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct req *r = cls;
	size_t n = MIN(max, r->out->len);

	if (n > 0) {
		memcpy(buf, r->out->str, n);
		g_string_erase(r->out, 0, (gssize)n);
		return (ssize_t)n;
	}
	if (r->ended)
		return MHD_CONTENT_READER_END_OF_STREAM;
	/* Nothing yet: suspend, never return 0 without. */
	r->suspended = true;
	nw_http_server_suspend(r->e->srv, r->conn, on_hangup, r);
	return 0;
}

static enum MHD_Result
respond_text(struct MHD_Connection *conn, unsigned status, const char *type, const char *text,
             const char *retry_after)
{
	struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(text), (void *)text,
	                                                            MHD_RESPMEM_MUST_COPY);
	enum MHD_Result ret;

	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	if (retry_after)
		MHD_add_response_header(resp, "Retry-After", retry_after);
	ret = MHD_queue_response(conn, status, resp);
	MHD_destroy_response(resp);
	return ret;
}

static enum MHD_Result
start_answer(struct req *r)
{
	json_t *body = json_loadb(r->in->str, r->in->len, 0, NULL);
	json_t *prompt = json_object_get(body, "prompt");
	const char *model = json_string_value(json_object_get(body, "model"));
	enum MHD_Result ret;

	if (r->chat)
		prompt = json_object_get(json_array_get(json_object_get(body, "messages"), 0), "content");
	if (!json_is_string(prompt) || g_strcmp0(model, "fake-model") != 0) {
		engine.bad_model += g_strcmp0(model, "fake-model") != 0;
		json_decref(body);
		r->queued = true;
		return respond_text(r->conn, 404, "application/json",
		                    "{\"error\":{\"message\":\"bad body or model\",\"type\":"
		                    "\"NotFoundError\",\"param\":null,\"code\":404}}", NULL);
	}
	r->prompt_tokens = count_tokens(json_string_value(prompt));
	r->max_tokens = (unsigned)MAX(1, json_integer_value(json_object_get(body, "max_tokens")));
	r->stream = json_is_true(json_object_get(body, "stream"));
	json_decref(body);
	r->t0 = g_get_monotonic_time();
	r->tick = nw_deadline_source_new("fake-engine", on_tick, r);
	if (r->fault == 3) {
		r->queued = true;
		return respond_text(r->conn, 429, "application/json",
		                    "{\"error\":{\"message\":\"slow down\",\"type\":\"RateLimitError\","
		                    "\"param\":null,\"code\":429}}", "3");
	}
	if (!r->stream) {
		/* Park the request until the last token would have come. */
		nw_deadline_source_set(r->tick, r->t0 + (TTFT_MS + (int64_t)(r->max_tokens - 1) *
		                                         ITL_MS) * 1000);
		r->suspended = true;
		nw_http_server_suspend(engine.srv, r->conn, on_hangup, r);
		return MHD_YES;
	}
	{
		struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096,
		                                                              reader, r, NULL);

		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
		ret = MHD_queue_response(r->conn, 200, resp);
		MHD_destroy_response(resp);
	}
	r->queued = true;
	nw_deadline_source_set(r->tick, r->t0 + TTFT_MS * 1000);
	return ret;
}

static enum MHD_Result
handler(void *data, struct MHD_Connection *conn, const char *url, const char *method,
        const char *version, const char *upload, size_t *upload_size, void **request)
{
	struct req *r = *request;

	if (r == NULL) {
		const char *rid = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Request-Id");

		r = g_new0(struct req, 1);
		r->e = &engine;
		r->conn = conn;
		r->in = g_string_new(NULL);
		r->out = g_string_new(NULL);
		r->rid = g_strdup(rid ? rid : "none");
		r->fault = -1;
		if (rid && g_str_has_prefix(rid, "replay-")) {
			r->id = (unsigned)atoi(rid + 7);
			if (engine.faults)
				r->fault = (int)(r->id % 10);
		}
		*request = r;
		return MHD_YES;
	}
	if (*upload_size > 0) {
		g_string_append_len(r->in, upload, (gssize)*upload_size);
		*upload_size = 0;
		return MHD_YES;
	}
	if (r->queued)
		return MHD_YES;
	if (r->ready) {
		/* A non-streamed answer whose time has come. */
		g_autofree char *text = g_strdup_printf(
			"{\"id\":\"cmpl-%s\",\"object\":\"text_completion\",\"choices\":[{\"index\":0,"
			"\"text\":\" tok\",\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":%u,"
			"\"completion_tokens\":%u,\"total_tokens\":%u}}", r->rid, r->prompt_tokens,
			r->max_tokens, r->prompt_tokens + r->max_tokens);

		r->queued = true;
		return respond_text(conn, 200, "application/json", text, NULL);
	}
	if (r->tick != NULL)
		return MHD_YES; /* parked, resumed early by a hang-up */
	engine.requests++;
	g_free(engine.last_path);
	engine.last_path = g_strdup(url);
	g_hash_table_add(engine.ids, g_strdup(r->rid));
	if (strcmp(method, "GET") == 0 && strcmp(url, "/v1/models") == 0) {
		r->queued = true;
		return respond_text(conn, 200, "application/json",
		                    "{\"object\":\"list\",\"data\":[{\"id\":\"fake-model\",\"object\":"
		                    "\"model\",\"max_model_len\":8192}]}", NULL);
	}
	r->chat = strcmp(url, "/v1/chat/completions") == 0;
	if (strcmp(method, "POST") != 0 || (!r->chat && strcmp(url, "/v1/completions") != 0)) {
		r->queued = true;
		return respond_text(conn, 404, "application/json", "{\"error\":{\"message\":\"no\"}}", NULL);
	}
	return start_answer(r);
}

static void
completed(void *data, struct MHD_Connection *conn, void **request,
          enum MHD_RequestTerminationCode why)
{
	struct req *r = *request;

	if (r == NULL)
		return;
	nw_deadline_source_destroy(r->tick);
	g_string_free(r->in, TRUE);
	g_string_free(r->out, TRUE);
	g_free(r->rid);
	g_free(r);
	*request = NULL;
}

static void
engine_start(bool faults)
{
	struct nw_http_server_options o = {
		.host = "127.0.0.1", .port = 0, .connection_timeout_s = 30, .connection_limit = 1000,
	};
	GError *error = NULL;

	memset(&engine, 0, sizeof engine);
	engine.faults = faults;
	engine.ids = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
	engine.srv = nw_http_server_start(&o, handler, completed, NULL, &error);
	g_assert_no_error(error);
}

static void
engine_stop(void)
{
	nw_http_server_stop(engine.srv);
	/* Let MHD's last completions run. */
	while (g_main_context_iteration(NULL, FALSE))
		;
	g_hash_table_destroy(engine.ids);
	g_free(engine.last_path);
	memset(&engine, 0, sizeof engine);
}

/* --- running narwhal-replay ----------------------------------------- */

struct outcome {
	bool done;
	int status;
	char *out, *err;
};

static void
on_exit_cb(GObject *src, GAsyncResult *res, gpointer data)
{
	struct outcome *o = data;
	GSubprocess *proc = G_SUBPROCESS(src);

	g_subprocess_communicate_utf8_finish(proc, res, &o->out, &o->err, NULL);
	o->status = g_subprocess_get_if_exited(proc) ? g_subprocess_get_exit_status(proc) : -1;
	o->done = true;
}

static gboolean
wake_up(gpointer data)
{
	return G_SOURCE_CONTINUE;
}

/* An environment variable for the next child (NAME, VALUE), or NULLs. */
static const char *child_env[2];

/* Run narwhal-replay with the engine serving on this loop meanwhile. */
static int
replay(struct outcome *o, const char *first, ...)
{
	GPtrArray *argv = g_ptr_array_new_with_free_func(g_free);
	GError *error = NULL;
	GSubprocessLauncher *launcher;
	GSubprocess *proc;
	gint64 deadline = g_get_monotonic_time() + RUN_LIMIT_S * G_USEC_PER_SEC;
	guint wake = g_timeout_add(50, wake_up, NULL);
	va_list ap;

	memset(o, 0, sizeof *o);
	g_ptr_array_add(argv, g_strdup(sim_replay_bin()));
	va_start(ap, first);
	for (const char *a = first; a != NULL; a = va_arg(ap, const char *))
		g_ptr_array_add(argv, g_strdup(a));
	va_end(ap);
	g_ptr_array_add(argv, NULL);
	launcher = g_subprocess_launcher_new(G_SUBPROCESS_FLAGS_STDOUT_PIPE |
	                                     G_SUBPROCESS_FLAGS_STDERR_PIPE);
	if (child_env[0])
		g_subprocess_launcher_setenv(launcher, child_env[0], child_env[1], TRUE);
	proc = g_subprocess_launcher_spawnv(launcher, (const char *const *)argv->pdata, &error);
	g_assert_no_error(error);
	g_object_unref(launcher);
	g_subprocess_communicate_utf8_async(proc, NULL, NULL, on_exit_cb, o);
	while (!o->done) {
		g_main_context_iteration(NULL, TRUE);
		if (g_get_monotonic_time() > deadline) {
			g_subprocess_force_exit(proc);
			deadline = G_MAXINT64;
		}
	}
	g_source_remove(wake);
	g_object_unref(proc);
	g_ptr_array_free(argv, TRUE);
	if (o->status != 0)
		g_test_message("narwhal-replay exited %d; stderr:\n%s", o->status, o->err);
	return o->status;
}

static void
outcome_clear(struct outcome *o)
{
	g_free(o->out);
	g_free(o->err);
}

static char *
url(void)
{
	return g_strdup_printf("http://127.0.0.1:%u", nw_http_server_port(engine.srv));
}

static json_t *
run0(json_t *doc)
{
	return json_array_get(json_object_get(doc, "runs"), 0);
}

static double
getf(json_t *o, const char *a, const char *b)
{
	json_t *v = json_object_get(json_object_get(o, a), b);

	return json_is_null(v) || v == NULL ? NAN : json_number_value(v);
}

static double
getn(json_t *o, const char *key)
{
	return json_number_value(json_object_get(o, key));
}

static json_int_t
geti(json_t *o, const char *a, const char *b)
{
	return json_integer_value(json_object_get(json_object_get(o, a), b));
}

struct files {
	char *dir, *trace, *json, *csv, *plot;
};

static void
files_init(struct files *f, const char *trace_text, const char *ext)
{
	GError *error = NULL;

	f->dir = g_dir_make_tmp("narwhal-replay-test-XXXXXX", &error);
	g_assert_no_error(error);
	f->trace = g_build_filename(f->dir, ext, NULL);
	f->json = g_build_filename(f->dir, "summary.json", NULL);
	f->csv = g_build_filename(f->dir, "requests.csv", NULL);
	f->plot = g_build_filename(f->dir, "plot.svg", NULL);
	if (trace_text)
		g_assert_true(g_file_set_contents(f->trace, trace_text, -1, NULL));
}

static void
files_clear(struct files *f)
{
	char **all[] = { &f->trace, &f->json, &f->csv, &f->plot, &f->dir };

	for (guint i = 0; i < G_N_ELEMENTS(all); i++) {
		g_remove(*all[i]); /* the directory last */
		g_free(*all[i]);
	}
}

/* A Mooncake trace: n requests every gap_ms, varied prompts, `out` tokens. */
static char *
mooncake_trace(unsigned n, unsigned gap_ms, unsigned out)
{
	GString *t = g_string_new(NULL);

	for (unsigned i = 0; i < n; i++)
		g_string_append_printf(t, "{\"timestamp\": %u, \"input_length\": %u, \"output_length\": "
		                       "%u, \"hash_ids\": [%u]}\n", i * gap_ms, 50 + i * 37, out, i % 3);
	return g_string_free(t, FALSE);
}

/* A CSV row's fields by column name. */
static char *
csv_get(char **header, char **row, const char *name)
{
	for (guint i = 0; header[i] && row[i]; i++)
		if (strcmp(header[i], name) == 0)
			return row[i];
	g_assert_not_reached();
	return NULL;
}

static void
test_timing(void)
{
	g_autofree char *trace = mooncake_trace(20, 50, 20);
	g_autofree char *u = NULL;
	g_autofree char *csv = NULL;
	g_auto(GStrv) lines = NULL, header = NULL;
	struct files f;
	struct outcome o;
	json_t *doc, *run;

	engine_start(false);
	u = url();
	files_init(&f, trace, "trace.jsonl");
	/* No --model: it is learnt from /v1/models. */
	g_assert_cmpint(replay(&o, "--url", u, "--trace", f.trace, "--slo-ttft", "0.5",
	                       "--slo-tpot", "0.05", "--out-json", f.json, "--out-csv", f.csv,
	                       NULL), ==, 0);
	g_assert_nonnull(strstr(o.out, "rate scale 1: 20 scheduled, 20 sent, 20 ok"));
	g_assert_nonnull(strstr(o.err, "narwhal-replay: ")); /* the progress line */
	g_assert_cmpuint(engine.bad_model, ==, 0);
	doc = json_load_file(f.json, 0, NULL);
	g_assert_nonnull(doc);
	g_assert_cmpstr(json_string_value(json_object_get(json_object_get(doc, "target"), "model")),
	                ==, "fake-model");
	run = run0(doc);
	g_assert_cmpint(geti(run, "counts", "ok"), ==, 20);
	g_assert_cmpint(geti(run, "counts", "failed"), ==, 0);
	g_assert_cmpint(geti(run, "counts", "late"), <=, 2);
	g_assert_cmpint(geti(json_object_get(run, "counts"), "status", "200"), ==, 20);
	/* TTFT 100 ms, 10 ms between tokens, 20 tokens: E2E 290 ms. */
	g_assert_cmpfloat(getf(run, "ttft_s", "p50"), >=, 0.095);
	g_assert_cmpfloat(getf(run, "ttft_s", "p50"), <=, 0.200);
	g_assert_cmpfloat(getf(run, "tpot_s", "p50"), >=, 0.0095);
	g_assert_cmpfloat(getf(run, "tpot_s", "p50"), <=, 0.020);
	g_assert_cmpfloat(getf(run, "tpot_s", "mean"), <=, 0.020);
	g_assert_cmpfloat(getf(run, "e2e_s", "p50"), >=, 0.285);
	g_assert_cmpfloat(getf(run, "e2e_s", "p50"), <=, 0.450);
	g_assert_cmpfloat(getf(run, "slo", "attainment"), ==, 1.0);
	/* 20 requests over ~0.95 s + 0.29 s: goodput about 16/s. */
	g_assert_cmpfloat(getf(run, "slo", "goodput_rps"), >, 10);
	g_assert_cmpfloat(getf(run, "slo", "goodput_rps"), <, 22);
	g_assert_cmpfloat(fabs(getf(run, "schedule", "offered_rps") - 20), <, 0.01);
	json_decref(doc);

	/* Per request: prompts of the trace's size (the engine counts the
	 * tokens), open-loop send times, X-Request-Id. */
	g_assert_true(g_file_get_contents(f.csv, &csv, NULL, NULL));
	lines = g_strsplit(csv, "\n", -1);
	header = g_strsplit(lines[0], ",", -1);
	for (guint i = 1; i <= 20; i++) {
		g_auto(GStrv) row = g_strsplit(lines[i], ",", -1);
		g_autofree char *rid = g_strdup_printf("replay-%u", i - 1);

		g_assert_cmpstr(csv_get(header, row, "request_id"), ==, rid);
		g_assert_true(g_hash_table_contains(engine.ids, rid));
		g_assert_cmpstr(csv_get(header, row, "usage_prompt_tokens"), ==,
		                csv_get(header, row, "input_tokens"));
		g_assert_cmpint(atoi(csv_get(header, row, "input_tokens")), ==, 50 + (i - 1) * 37);
		g_assert_cmpstr(csv_get(header, row, "output_tokens"), ==, "20");
		g_assert_cmpstr(csv_get(header, row, "outcome"), ==, "ok");
		g_assert_cmpstr(csv_get(header, row, "slo_met"), ==, "1");
		/* Open loop: never early, and a request sent more than
		 * RP_LATE_S after its time says so (a loaded machine may make
		 * one late; the run's count of them is held above). */
		{
			double lag = g_ascii_strtod(csv_get(header, row, "sent_s"), NULL) -
			             (i - 1) * 0.05;

			g_assert_cmpfloat(lag, >, -0.001);
			if (lag > 0.03)
				g_assert_cmpstr(csv_get(header, row, "late"), ==, "1");
		}
	}
	g_assert_cmpstr(lines[21], ==, "");
	outcome_clear(&o);
	files_clear(&f);
	engine_stop();
}

static void
test_failures(void)
{
	g_autofree char *u = NULL;
	g_autofree char *csv = NULL;
	struct files f;
	struct outcome o;
	json_t *doc, *run, *outcomes;

	engine_start(true);
	u = url();
	files_init(&f, NULL, "unused");
	g_assert_cmpint(replay(&o, "--url", u, "--model", "fake-model", "--synthetic",
	                       "rate=40,arrival=gamma,cv=0,input=64,output=8", "--max-requests", "20",
	                       "--slo-ttft", "1", "--slo-tpot", "0.1", "--out-json", f.json,
	                       "--out-csv", f.csv, NULL), ==, 0);
	doc = json_load_file(f.json, 0, NULL);
	run = run0(doc);
	outcomes = json_object_get(json_object_get(run, "counts"), "outcomes");
	g_assert_cmpint(json_integer_value(json_object_get(outcomes, "ok")), ==, 14);
	g_assert_cmpint(json_integer_value(json_object_get(outcomes, "http_error")), ==, 2);
	g_assert_cmpint(json_integer_value(json_object_get(outcomes, "error_event")), ==, 2);
	g_assert_cmpint(json_integer_value(json_object_get(outcomes, "incomplete")), ==, 2);
	g_assert_cmpint(geti(json_object_get(run, "counts"), "status", "429"), ==, 2);
	g_assert_cmpint(geti(json_object_get(run, "counts"), "status", "200"), ==, 18);
	g_assert_cmpfloat_with_epsilon(getf(run, "slo", "attainment"), 0.7, 1e-9);
	g_assert_cmpint(geti(run, "counts", "failed"), ==, 6);
	g_assert_cmpint(geti(json_object_get(run, "counts"), "retry_after", "count"), ==, 2);
	g_assert_cmpfloat(getf(json_object_get(run, "counts"), "retry_after", "max_s"), ==, 3);
	json_decref(doc);
	g_assert_true(g_file_get_contents(f.csv, &csv, NULL, NULL));
	g_assert_nonnull(strstr(csv, ",replay-3,phase1,"));
	g_assert_nonnull(strstr(csv, ",429,http_error,"));
	g_assert_nonnull(strstr(csv, ",slow down\n"));
	g_assert_nonnull(strstr(csv, ",200,error_event,"));
	g_assert_nonnull(strstr(csv, ",simulated failure\n"));
	g_assert_nonnull(strstr(csv, ",200,incomplete,"));
	g_assert_nonnull(strstr(csv, ",stream ended without [DONE]\n"));
	outcome_clear(&o);
	files_clear(&f);
	engine_stop();
}

/* Chat streaming, a full concurrency cap, and whole (non-streamed)
 * answers, each a short run against the same engine. */
static void
test_modes(void)
{
	g_autofree char *burst = mooncake_trace(6, 0, 3);
	g_autofree char *u = NULL;
	struct files f;
	struct outcome o;
	json_t *doc;

	engine_start(false);
	u = url();
	files_init(&f, burst, "burst.jsonl");
	g_assert_cmpint(replay(&o, "--url", u, "--api", "chat", "--model", "fake-model",
	                       "--synthetic", "rate=20,arrival=gamma,cv=0,input=100,output=5",
	                       "--max-requests", "5", "--out-json", f.json, "--quiet", NULL), ==, 0);
	g_assert_cmpstr(o.out, ==, ""); /* --quiet */
	g_assert_cmpstr(engine.last_path, ==, "/v1/chat/completions");
	doc = json_load_file(f.json, 0, NULL);
	g_assert_cmpint(geti(run0(doc), "counts", "ok"), ==, 5);
	/* The role-only first delta is not the first token. */
	g_assert_cmpfloat(getf(run0(doc), "ttft_s", "p50"), >=, 0.095);
	g_assert_cmpfloat(getf(run0(doc), "tpot_s", "p50"), >=, 0.0095);
	g_assert_cmpfloat(getf(run0(doc), "tpot_s", "p50"), <=, 0.020);
	json_decref(doc);
	outcome_clear(&o);

	/* Six at once through two slots: three waves of ~120 ms, four late. */
	g_assert_cmpint(replay(&o, "--url", u, "--model", "fake-model", "--trace", f.trace,
	                       "--concurrency-limit", "2", "--out-json", f.json, "--quiet",
	                       NULL), ==, 0);
	doc = json_load_file(f.json, 0, NULL);
	g_assert_cmpint(geti(run0(doc), "counts", "ok"), ==, 6);
	g_assert_cmpint(geti(run0(doc), "counts", "late"), ==, 4);
	g_assert_cmpfloat(getf(run0(doc), "e2e_s", "max"), <, 0.5);
	g_assert_cmpfloat(getn(run0(doc), "elapsed_s"), >=, 0.3);
	json_decref(doc);
	outcome_clear(&o);

	/* Not streamed: the whole answer after 100 + 10 * 10 ms is the TTFT. */
	g_assert_cmpint(replay(&o, "--url", u, "--model", "fake-model", "--no-stream",
	                       "--synthetic", "rate=20,arrival=gamma,cv=0,input=30,output=11",
	                       "--max-requests", "4", "--out-json", f.json, "--quiet", NULL), ==, 0);
	doc = json_load_file(f.json, 0, NULL);
	g_assert_cmpint(geti(run0(doc), "counts", "ok"), ==, 4);
	g_assert_cmpfloat(getf(run0(doc), "ttft_s", "p50"), >=, 0.195);
	g_assert_cmpfloat(getf(run0(doc), "ttft_s", "p50"), <=, 0.350);
	g_assert_cmpfloat(getf(run0(doc), "ttft_s", "p50"), ==, getf(run0(doc), "e2e_s", "p50"));
	g_assert_cmpint(geti(run0(doc), "tpot_s", "n"), ==, 0);
	g_assert_cmpfloat(getn(run0(doc), "output_tokens_per_s"), >, 0);
	json_decref(doc);
	outcome_clear(&o);
	files_clear(&f);
	engine_stop();
}

static void
test_sweep_and_plot(void)
{
	g_autofree char *trace = mooncake_trace(10, 100, 5);
	g_autofree char *u = NULL;
	g_autofree char *gnuplot = g_find_program_in_path("gnuplot");
	g_autofree char *svg = NULL;
	struct files f;
	struct outcome o;
	json_t *doc, *r0, *r1;

	engine_start(false);
	u = url();
	files_init(&f, trace, "sweep.jsonl");
	if (gnuplot == NULL) {
		g_assert_cmpint(replay(&o, "--url", u, "--model", "fake-model", "--trace", f.trace,
		                       "--rate-sweep", "1,2", "--plot", f.plot, NULL), ==, 1);
		g_assert_nonnull(strstr(o.err, "gnuplot"));
		g_assert_cmpuint(engine.requests, ==, 0); /* nothing sent */
		outcome_clear(&o);
		g_test_message("gnuplot is not installed: the plot itself is not checked");
	}
	g_assert_cmpint(replay(&o, "--url", u, "--model", "fake-model", "--trace", f.trace,
	                       "--rate-sweep", "1,2", "--slo-ttft", "0.05", "--out-json", f.json,
	                       gnuplot ? "--plot" : "--quiet", gnuplot ? f.plot : NULL, NULL), ==, 0);
	doc = json_load_file(f.json, 0, NULL);
	g_assert_cmpuint(json_array_size(json_object_get(doc, "runs")), ==, 2);
	r0 = json_array_get(json_object_get(doc, "runs"), 0);
	r1 = json_array_get(json_object_get(doc, "runs"), 1);
	g_assert_cmpfloat(json_number_value(json_object_get(r1, "rate_scale")), ==, 2);
	g_assert_cmpfloat(fabs(getf(r0, "schedule", "offered_rps") - 10), <, 0.01);
	g_assert_cmpfloat(fabs(getf(r1, "schedule", "offered_rps") - 20), <, 0.01);
	g_assert_cmpint(geti(r0, "counts", "ok"), ==, 10);
	g_assert_cmpint(geti(r1, "counts", "ok"), ==, 10);
	/* Nobody makes a 50 ms TTFT against a 100 ms engine. */
	g_assert_cmpfloat(getf(r0, "slo", "attainment"), ==, 0);
	g_assert_cmpfloat(getf(r1, "slo", "goodput_rps"), ==, 0);
	/* Request ids continue across the sweep. */
	g_assert_true(g_hash_table_contains(engine.ids, "replay-19"));
	if (gnuplot) {
		g_assert_nonnull(strstr(o.out, "sweep   offered/s"));
		g_assert_true(g_file_get_contents(f.plot, &svg, NULL, NULL));
		g_assert_nonnull(strstr(svg, "<svg"));
		g_assert_nonnull(strstr(svg, "attainment"));
	}
	json_decref(doc);
	outcome_clear(&o);
	files_clear(&f);
	engine_stop();
}

static void
test_cli_and_transport(void)
{
	g_autofree char *u = NULL;
	struct files f;
	struct outcome o;
	json_t *doc, *run;

	engine_start(false);
	u = url();
	files_init(&f, NULL, "unused");
	/* --version, as every other binary has (docs/replay.md). */
	g_assert_cmpint(replay(&o, "--version", NULL), ==, 0);
	g_assert_true(g_str_has_prefix(o.out, "narwhal-replay " PACKAGE_VERSION "\n"));
	outcome_clear(&o);
	/* Usage errors exit 2 and name the problem. */
	g_assert_cmpint(replay(&o, "--synthetic", "rate=1", NULL), ==, 2);
	g_assert_nonnull(strstr(o.err, "--url"));
	outcome_clear(&o);
	g_assert_cmpint(replay(&o, "--url", u, "--synthetic", "rate=1", "--trace", "x", NULL), ==, 2);
	outcome_clear(&o);
	g_assert_cmpint(replay(&o, "--url", u, "--synthetic", "rate=1", "--plot", "x.jpg", NULL), ==, 2);
	outcome_clear(&o);
	/* An unbounded workload is refused before anything is sent. */
	g_assert_cmpint(replay(&o, "--url", u, "--model", "m", "--synthetic", "rate=1", NULL), ==, 1);
	g_assert_nonnull(strstr(o.err, "open-ended"));
	outcome_clear(&o);
	/* A missing gnuplot is said plainly, and nothing is sent. */
	child_env[0] = "NARWHAL_GNUPLOT";
	child_env[1] = "/nonexistent/gnuplot";
	g_assert_cmpint(replay(&o, "--url", u, "--model", "fake-model", "--synthetic",
	                       "rate=10,duration=0.2", "--plot", f.plot, NULL), ==, 1);
	child_env[0] = child_env[1] = NULL;
	g_assert_nonnull(strstr(o.err, "needs gnuplot"));
	g_assert_cmpuint(engine.requests, ==, 0);
	outcome_clear(&o);
	/* Timeouts: 60 tokens take 690 ms, the limit is 300 ms. */
	g_assert_cmpint(replay(&o, "--url", u, "--model", "fake-model", "--synthetic",
	                       "rate=50,arrival=gamma,cv=0,output=60", "--max-requests", "2",
	                       "--timeout", "0.3", "--out-json", f.json, "--quiet", NULL), ==, 0);
	doc = json_load_file(f.json, 0, NULL);
	run = run0(doc);
	g_assert_cmpint(geti(json_object_get(run, "counts"), "outcomes", "timeout"), ==, 2);
	json_decref(doc);
	outcome_clear(&o);
	/* Connection refused: counted as transport failures, the run ends. */
	g_assert_cmpint(replay(&o, "--url", "http://127.0.0.1:1", "--model", "m", "--synthetic",
	                       "rate=100,arrival=gamma,cv=0", "--max-requests", "3",
	                       "--out-json", f.json, "--quiet", NULL), ==, 0);
	doc = json_load_file(f.json, 0, NULL);
	run = run0(doc);
	g_assert_cmpint(geti(json_object_get(run, "counts"), "outcomes", "transport"), ==, 3);
	json_decref(doc);
	outcome_clear(&o);
	/* No model given and none to learn. */
	g_assert_cmpint(replay(&o, "--url", "http://127.0.0.1:1", "--synthetic", "rate=1",
	                       "--max-requests", "1", NULL), ==, 1);
	g_assert_nonnull(strstr(o.err, "--model"));
	outcome_clear(&o);
	files_clear(&f);
	engine_stop();
}

/* Against narwhal-sim itself when it is built (its preset OPT-13B on
 * A100, latency-models.md 2.2): prompts land at the trace's exact token
 * count for both APIs (BOS for completions, the chat template found by
 * --prompt-overhead auto), and one request at a time sees the model's
 * prefill(512) ~ 72 ms as TTFT and decode(B=1) ~ 20.6 ms as TPOT. */
static void
test_against_sim(void)
{
	g_autofree char *sim = g_strdup(g_getenv("NARWHAL_SIM_BIN"));
	g_autofree char *fleet_file = NULL, *csv = NULL;
	g_autofree char *trace = g_strdup_printf("%s\n%s\n%s\n",
		"{\"timestamp\": 0, \"input_length\": 512, \"output_length\": 21}",
		"{\"timestamp\": 600, \"input_length\": 512, \"output_length\": 21}",
		"{\"timestamp\": 1200, \"input_length\": 512, \"output_length\": 21}");
	gint64 deadline = g_get_monotonic_time() + 10 * G_USEC_PER_SEC;
	GSubprocess *proc;
	GError *error = NULL;
	struct files f;
	struct outcome o;
	json_t *fleet = NULL, *doc;
	const char *u;

	if (sim == NULL) { /* built next to narwhal-replay, when it is built */
		g_autofree char *dir = g_path_get_dirname(sim_replay_bin());

		sim = g_build_filename(dir, "narwhal-sim", NULL);
	}
	if (!g_file_test(sim, G_FILE_TEST_IS_EXECUTABLE)) {
		g_test_skip("narwhal-sim is not built");
		return;
	}
	files_init(&f, trace, "one-at-a-time.jsonl");
	fleet_file = g_build_filename(f.dir, "fleet.json", NULL);
	proc = g_subprocess_new(G_SUBPROCESS_FLAGS_STDOUT_SILENCE | G_SUBPROCESS_FLAGS_STDERR_SILENCE,
	                        &error, sim, "--base-port", "0", "--log-level", "warning",
	                        "--fleet-out", fleet_file, NULL);
	g_assert_no_error(error);
	while (fleet == NULL && g_get_monotonic_time() < deadline) {
		g_usleep(10000);
		fleet = json_load_file(fleet_file, 0, NULL);
	}
	u = json_string_value(json_object_get(json_array_get(json_object_get(fleet, "engines"), 0),
	                                      "url"));
	g_assert_nonnull(u);
	for (int chat = 0; chat < 2; chat++) {
		g_auto(GStrv) lines = NULL;

		g_assert_cmpint(replay(&o, "--url", u, "--trace", f.trace, "--api",
		                       chat ? "chat" : "completions", "--out-json", f.json,
		                       "--out-csv", f.csv, "--quiet", NULL), ==, 0);
		doc = json_load_file(f.json, 0, NULL);
		g_assert_cmpint(geti(run0(doc), "counts", "ok"), ==, 3);
		g_assert_cmpfloat(getf(run0(doc), "ttft_s", "p50"), >=, 0.060);
		g_assert_cmpfloat(getf(run0(doc), "ttft_s", "p50"), <=, 0.120);
		g_assert_cmpfloat(getf(run0(doc), "tpot_s", "p50"), >=, 0.017);
		g_assert_cmpfloat(getf(run0(doc), "tpot_s", "p50"), <=, 0.030);
		json_decref(doc);
		/* input 512 and usage.prompt_tokens 512; 21 tokens asked and given. */
		g_assert_true(g_file_get_contents(f.csv, &csv, NULL, NULL));
		lines = g_strsplit(csv, "\n", -1);
		for (guint i = 1; i <= 3; i++) {
			g_assert_nonnull(strstr(lines[i], ",512,21,200,ok,"));
			g_assert_true(g_str_has_suffix(lines[i], ",21,512,21,,,"));
		}
		g_clear_pointer(&csv, g_free);
		outcome_clear(&o);
	}
	json_decref(fleet);
	g_subprocess_send_signal(proc, SIGTERM);
	deadline = g_get_monotonic_time() + 10 * G_USEC_PER_SEC;
	while (g_subprocess_get_identifier(proc) != NULL && g_get_monotonic_time() < deadline)
		g_usleep(10000);
	g_subprocess_force_exit(proc);
	g_subprocess_wait(proc, NULL, NULL);
	g_object_unref(proc);
	g_unlink(fleet_file);
	files_clear(&f);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/replay/integration/timing", test_timing);
	g_test_add_func("/replay/integration/failures", test_failures);
	g_test_add_func("/replay/integration/modes", test_modes);
	g_test_add_func("/replay/integration/sweep-and-plot", test_sweep_and_plot);
	g_test_add_func("/replay/integration/cli-and-transport", test_cli_and_transport);
	g_test_add_func("/replay/integration/narwhal-sim", test_against_sim);
	return g_test_run();
}
