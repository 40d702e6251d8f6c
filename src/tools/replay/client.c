#include "build-config.h"

#include "tools/replay/client.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <glib-unix.h>
#include <jansson.h>

#include "net/loop.h"
#include "net/upstream.h"
#include "tools/replay/sse.h"

/* Bodies kept for error messages and non-streamed answers. */
#define BODY_CAP (8u << 20)

struct run;

/* One request in flight. */
struct call_state {
	struct run *run;
	size_t index;                /* into results and the schedule */
	struct nw_upstream_call *call;
	struct rp_stream stream;     /* a 2xx answer to a streamed request */
	GString *body;               /* anything else: kept for parsing */
	int64_t send_us;
	long status;
	bool streaming;
};

struct run {
	const struct rp_client_opts *o;
	const struct rp_schedule *s;
	struct rp_result *results;
	struct nw_upstream *up;
	GMainLoop *loop;
	GSource *arrivals;           /* deadline: the next scheduled request */
	GSource *progress;           /* deadline: the next status line */
	guint sig_int, sig_term;
	char *endpoint;
	int64_t start_us;
	size_t next;                 /* next schedule item to come due */
	GQueue waiting;              /* due items held by the concurrency cap */
	GHashTable *active;          /* struct call_state * in flight */
	size_t ended;
	uint64_t ok, failed, late;
	size_t ended_at_last_line;
	bool tty;
	bool stopping;
	bool interrupted;
};

static void dispatch_waiting(struct run *run);

static double
since_start(const struct run *run, int64_t us)
{
	return (double)(us - run->start_us) / 1e6;
}

double
rp_parse_retry_after(const char *value)
{
	char *end;
	double v;
	time_t when;

	while (*value == ' ')
		value++;
	errno = 0;
	v = g_ascii_strtod(value, &end);
	while (*end == ' ' || *end == '\r' || *end == '\n')
		end++;
	if (end != value && *end == '\0' && errno == 0 && isfinite(v) && v >= 0)
		return v;
	/* The other form is an HTTP date: seconds from now. */
	when = curl_getdate(value, NULL);
	if (when == (time_t)-1)
		return NAN;
	return MAX(0.0, difftime(when, time(NULL)));
}

/* --- one request ---------------------------------------------------- */

static void
call_free(struct call_state *cs)
{
	if (cs->streaming)
		rp_stream_clear(&cs->stream);
	if (cs->body)
		g_string_free(cs->body, TRUE);
	g_free(cs);
}

static void
on_response(void *data, long status)
{
	struct call_state *cs = data;

	cs->status = status;
	cs->run->results[cs->index].status = status;
	const char *ra = nw_upstream_header(cs->call, "Retry-After");

	if (ra != NULL)
		cs->run->results[cs->index].retry_after = rp_parse_retry_after(ra);
	if (status >= 200 && status < 300 && cs->run->o->body.stream) {
		cs->streaming = true;
		rp_stream_init(&cs->stream);
	}
}

static bool
on_data(void *data, const char *bytes, size_t len)
{
	struct call_state *cs = data;

	if (cs->streaming) {
		rp_stream_feed(&cs->stream, g_get_monotonic_time(), bytes, len);
		return true;
	}
	if (cs->body == NULL)
		cs->body = g_string_new(NULL);
	if (cs->body->len < BODY_CAP)
		g_string_append_len(cs->body, bytes, (gssize)MIN(len, BODY_CAP - cs->body->len));
	return true;
}

static void
set_error(struct rp_result *r, const char *msg)
{
	if (r->error == NULL && msg != NULL)
		r->error = g_strndup(msg, 500);
}

/* What a 2xx streamed answer measured. */
static void
settle_stream(struct call_state *cs, struct rp_result *r, bool transfer_ok)
{
	struct rp_stream *st = &cs->stream;

	r->output_tokens = rp_stream_tokens(st);
	r->usage_prompt = st->usage_prompt;
	r->usage_completion = st->usage_completion;
	if (st->first_us != 0)
		r->ttft = (double)(st->first_us - cs->send_us) / 1e6;
	r->tpot = rp_tpot(st->first_us, st->last_us, r->output_tokens);
	if (st->error_event) {
		r->outcome = RP_OUT_ERROR_EVENT;
		set_error(r, st->error);
	} else if (!transfer_ok) {
		r->outcome = RP_OUT_INCOMPLETE; /* cut mid-stream; curl says how below */
	} else if (st->sse.overflow) {
		r->outcome = RP_OUT_INCOMPLETE;
		set_error(r, "an event exceeded 16 MiB");
	} else if (!st->done) {
		r->outcome = RP_OUT_INCOMPLETE;
		set_error(r, st->events == 0 ? "no server-sent events in the response"
		                             : "stream ended without [DONE]");
	} else {
		r->outcome = RP_OUT_OK;
	}
}

/* What a non-streamed answer (or an error answer) measured. */
static void
settle_body(struct call_state *cs, struct rp_result *r)
{
	struct rp_event ev;
	const char *text = cs->body ? cs->body->str : "";
	size_t len = cs->body ? cs->body->len : 0;

	rp_event_parse(text, len, &ev);
	if (cs->status < 200 || cs->status >= 300) {
		r->outcome = RP_OUT_HTTP;
		if (ev.kind == RP_EV_ERROR)
			set_error(r, ev.error);
		else if (len > 0)
			set_error(r, text);
	} else if (ev.kind == RP_EV_ERROR) {
		r->outcome = RP_OUT_ERROR_EVENT;
		set_error(r, ev.error);
	} else if (ev.kind != RP_EV_DATA) {
		r->outcome = RP_OUT_INCOMPLETE;
		set_error(r, "the response body is not a JSON object");
	} else {
		r->outcome = RP_OUT_OK;
		r->usage_prompt = ev.prompt_tokens;
		r->usage_completion = ev.completion_tokens;
		r->output_tokens = ev.completion_tokens >= 0 ? (uint32_t)ev.completion_tokens
		                                             : ev.pieces;
		/* Without a stream the first token is seen with the last. */
		r->ttft = r->e2e;
	}
	rp_event_clear(&ev);
}

/* refill: start requests the concurrency cap held back (not when a start
 * failed inside that very loop, which would recurse). */
static void
request_ended(struct run *run, struct call_state *cs, bool refill)
{
	struct rp_result *r = &run->results[cs->index];

	g_hash_table_remove(run->active, cs);
	call_free(cs);
	run->ended++;
	if (r->outcome == RP_OUT_OK)
		run->ok++;
	else if (r->outcome != RP_OUT_CANCELLED)
		run->failed++;
	if (refill && !run->stopping)
		dispatch_waiting(run);
}

static void
on_done(void *data, const struct nw_upstream_result *res)
{
	struct call_state *cs = data;
	struct run *run = cs->run;
	struct rp_result *r = &run->results[cs->index];
	int64_t now = g_get_monotonic_time();
	bool transfer_ok = res->code == NW_UPSTREAM_OK;

	r->finished = since_start(run, now);
	r->e2e = (double)(now - cs->send_us) / 1e6;
	if (res->status != 0)
		r->status = cs->status = res->status;
	if (cs->streaming) {
		rp_stream_finish(&cs->stream, now);
		settle_stream(cs, r, transfer_ok);
	} else if (transfer_ok || cs->status >= 300) {
		settle_body(cs, r);
	}
	if (!transfer_ok) {
		/* An error event or status says more than the cut that followed. */
		bool known = r->outcome == RP_OUT_ERROR_EVENT || r->outcome == RP_OUT_HTTP;

		if (!known && res->code == NW_UPSTREAM_TIMEOUT)
			r->outcome = RP_OUT_TIMEOUT;
		else if (!known && cs->status == 0)
			r->outcome = RP_OUT_TRANSPORT;
		else if (!known)
			r->outcome = RP_OUT_INCOMPLETE;
		set_error(r, res->error);
	}
	request_ended(run, cs, true);
	if (run->next >= run->s->items->len && run->waiting.length == 0 &&
	    g_hash_table_size(run->active) == 0)
		g_main_loop_quit(run->loop);
}

static void
start_request(struct run *run, size_t i)
{
	const struct rp_item *it = &g_array_index(run->s->items, struct rp_item, i);
	const struct rp_request *rq = &g_array_index(run->s->trace->reqs, struct rp_request, it->req);
	struct rp_result *r = &run->results[i];
	struct call_state *cs = g_new0(struct call_state, 1);
	static const struct nw_upstream_handlers handlers = {
		.on_response = on_response, .on_data = on_data, .on_done = on_done,
	};
	g_autofree char *rid = g_strdup_printf("replay-%u", r->id);
	struct nw_upstream_request req = {
		.method = "POST",
		.url = run->endpoint,
		.request_id = rid,
		.connect_timeout_ms = (long)(run->o->connect_timeout_s * 1000),
		.timeout_ms = (long)(run->o->timeout_s * 1000),
	};
	g_autofree char *body = rp_body_build(&run->o->body, it->input_tokens, it->output_tokens,
	                                      rp_trace_hashes(run->s->trace, rq), rq->n_hash,
	                                      r->id, &req.body_len);

	req.body = body;
	cs->run = run;
	cs->index = i;
	cs->send_us = g_get_monotonic_time();
	r->sent = since_start(run, cs->send_us);
	if (r->sent - r->scheduled > RP_LATE_S) {
		r->late = true;
		run->late++;
	}
	g_hash_table_add(run->active, cs);
	cs->call = nw_upstream_start(run->up, &req, &handlers, cs);
	if (cs->call == NULL) {
		r->outcome = RP_OUT_TRANSPORT;
		r->finished = r->sent;
		set_error(r, "libcurl refused the transfer");
		request_ended(run, cs, false);
	}
}

static void
dispatch_waiting(struct run *run)
{
	while (run->waiting.length > 0 && g_hash_table_size(run->active) < run->o->concurrency)
		start_request(run, GPOINTER_TO_SIZE(g_queue_pop_head(&run->waiting)) - 1);
}

static void
on_arrival(void *data)
{
	struct run *run = data;
	int64_t now = g_get_monotonic_time();
	const GArray *items = run->s->items;

	if (run->stopping)
		return;
	/* Everything due goes out now: open loop, one wake-up per batch. */
	while (run->next < items->len) {
		const struct rp_item *it = &g_array_index(items, struct rp_item, run->next);

		if (run->start_us + (int64_t)(it->t * 1e6) > now)
			break;
		g_queue_push_tail(&run->waiting, GSIZE_TO_POINTER(run->next + 1));
		run->next++;
	}
	dispatch_waiting(run);
	if (run->next < items->len) {
		const struct rp_item *it = &g_array_index(items, struct rp_item, run->next);

		nw_deadline_source_set(run->arrivals, run->start_us + (int64_t)(it->t * 1e6));
	} else if (run->waiting.length == 0 && g_hash_table_size(run->active) == 0) {
		g_main_loop_quit(run->loop);
	}
}

/* --- progress and signals ------------------------------------------- */

static void
on_progress(void *data)
{
	struct run *run = data;
	int64_t now = g_get_monotonic_time();
	double t = since_start(run, now);
	size_t n = run->s->items->len;
	double rate = (double)(run->ended - run->ended_at_last_line);

	run->ended_at_last_line = run->ended;
	fprintf(stderr, "%snarwhal-replay%s%s: %5.0fs sent %zu/%zu, in flight %u, waiting %u, "
	        "ok %" G_GUINT64_FORMAT ", failed %" G_GUINT64_FORMAT ", late %" G_GUINT64_FORMAT
	        ", %.0f done/s%s",
	        run->tty ? "\r" : "", run->o->label ? " " : "", run->o->label ? run->o->label : "",
	        t, run->next - run->waiting.length, n, g_hash_table_size(run->active),
	        run->waiting.length, run->ok, run->failed, run->late, rate,
	        run->tty ? "\033[K" : "\n");
	fflush(stderr);
	nw_deadline_source_set(run->progress, run->start_us +
	                       ((now - run->start_us) / 1000000 + 1) * 1000000);
}

static gboolean
on_signal(gpointer data)
{
	struct run *run = data;
	GHashTableIter it;
	gpointer key;
	int64_t now = g_get_monotonic_time();

	run->interrupted = true;
	run->stopping = true;
	nw_deadline_source_set(run->arrivals, -1);
	/* In-flight requests are cancelled; the rest stay not_sent. */
	g_hash_table_iter_init(&it, run->active);
	while (g_hash_table_iter_next(&it, &key, NULL)) {
		struct call_state *cs = key;
		struct rp_result *r = &run->results[cs->index];

		nw_upstream_cancel(cs->call);
		r->outcome = RP_OUT_CANCELLED;
		r->finished = since_start(run, now);
		g_hash_table_iter_remove(&it);
		call_free(cs);
	}
	g_queue_clear(&run->waiting);
	g_main_loop_quit(run->loop);
	return G_SOURCE_CONTINUE;
}

/* --- the run -------------------------------------------------------- */

static char *
endpoint_of(const char *base, const char *path)
{
	g_autofree char *b = g_strdup(base);
	size_t len = strlen(b);

	while (len > 0 && b[len - 1] == '/')
		b[--len] = '\0';
	return g_strconcat(b, path, NULL);
}

bool
rp_client_run(const struct rp_client_opts *o, const struct rp_schedule *s, struct rp_run *out,
              GError **error)
{
	struct nw_upstream_options uo = { .max_connections = o->concurrency };
	struct run run = { .o = o, .s = s };
	size_t n = s->items->len;

	memset(out, 0, sizeof *out);
	out->n = n;
	out->results = g_new0(struct rp_result, MAX(n, 1));
	for (size_t i = 0; i < n; i++) {
		const struct rp_item *it = &g_array_index(s->items, struct rp_item, i);
		struct rp_result *r = &out->results[i];

		r->id = o->id_base + (uint32_t)i;
		r->phase = g_array_index(s->trace->reqs, struct rp_request, it->req).phase;
		r->scheduled = it->t;
		r->input_tokens = it->input_tokens;
		r->max_tokens = it->output_tokens;
		r->outcome = RP_OUT_NOT_SENT;
		r->sent = r->finished = r->ttft = r->tpot = r->e2e = r->retry_after = NAN;
		r->usage_prompt = r->usage_completion = -1;
	}
	if (n == 0)
		return true;
	run.results = out->results;
	run.up = nw_upstream_new(&uo);
	if (run.up == NULL) {
		g_set_error(error, RP_ERROR, RP_ERROR_RUN, "cannot set up libcurl");
		return false;
	}
	run.endpoint = endpoint_of(o->url, rp_api_path(o->body.api));
	run.loop = g_main_loop_new(NULL, FALSE);
	run.active = g_hash_table_new(g_direct_hash, g_direct_equal);
	g_queue_init(&run.waiting);
	run.tty = isatty(STDERR_FILENO);
	run.arrivals = nw_deadline_source_new("replay-arrivals", on_arrival, &run);
	run.progress = nw_deadline_source_new("replay-progress", on_progress, &run);
	run.sig_int = g_unix_signal_add(SIGINT, on_signal, &run);
	run.sig_term = g_unix_signal_add(SIGTERM, on_signal, &run);

	run.start_us = g_get_monotonic_time();
	nw_deadline_source_set(run.arrivals, run.start_us);
	if (o->progress)
		nw_deadline_source_set(run.progress, run.start_us + 1000000);
	g_main_loop_run(run.loop);
	out->wall = since_start(&run, g_get_monotonic_time());
	out->interrupted = run.interrupted;
	if (o->progress) {
		on_progress(&run);
		if (run.tty)
			fputc('\n', stderr);
	}

	g_source_remove(run.sig_int);
	g_source_remove(run.sig_term);
	nw_deadline_source_destroy(run.arrivals);
	nw_deadline_source_destroy(run.progress);
	nw_upstream_free(run.up);
	g_hash_table_destroy(run.active);
	g_queue_clear(&run.waiting);
	g_main_loop_unref(run.loop);
	g_free(run.endpoint);
	return true;
}

void
rp_run_clear(struct rp_run *r)
{
	for (size_t i = 0; r->results && i < r->n; i++)
		g_free(r->results[i].error);
	g_free(r->results);
	memset(r, 0, sizeof *r);
}

/* --- questions before the run ------------------------------------- */

struct ask {
	GMainLoop *loop;
	GString *body;
	long status;
	char *error;
};

static bool
ask_data(void *data, const char *bytes, size_t len)
{
	struct ask *a = data;

	if (a->body->len < (1u << 20))
		g_string_append_len(a->body, bytes, (gssize)len);
	return true;
}

static void
ask_done(void *data, const struct nw_upstream_result *res)
{
	struct ask *a = data;

	a->status = res->status;
	if (res->code != NW_UPSTREAM_OK)
		a->error = g_strdup(res->error);
	g_main_loop_quit(a->loop);
}

/* One bounded request on a private loop, before the run starts (nothing
 * else is on the loop yet). The JSON answer of a 200, or NULL with *why. */
static json_t *
ask(const char *endpoint, const char *body, double timeout_s, char **why)
{
	struct nw_upstream_options uo = { .max_connections = 1 };
	struct nw_upstream *up = nw_upstream_new(&uo);
	struct ask a = { .loop = g_main_loop_new(NULL, FALSE), .body = g_string_new(NULL) };
	static const struct nw_upstream_handlers handlers = {
		.on_data = ask_data, .on_done = ask_done,
	};
	struct nw_upstream_request req = {
		.method = body ? "POST" : "GET", .url = endpoint, .request_id = "replay-setup",
		.body = body, .body_len = body ? strlen(body) : 0,
		.connect_timeout_ms = (long)(timeout_s * 1000), .timeout_ms = (long)(timeout_s * 1000),
	};
	json_t *doc = NULL;

	if (nw_upstream_start(up, &req, &handlers, &a) == NULL)
		a.error = g_strdup("libcurl refused the transfer");
	else
		g_main_loop_run(a.loop);
	if (a.error == NULL && a.status == 200)
		doc = json_loadb(a.body->str, a.body->len, 0, NULL);
	if (doc == NULL)
		*why = a.error ? g_steal_pointer(&a.error)
		     : a.status != 200 ? g_strdup_printf("status %ld", a.status)
		     : g_strdup("the answer is not JSON");
	g_free(a.error);
	g_string_free(a.body, TRUE);
	g_main_loop_unref(a.loop);
	nw_upstream_free(up);
	return doc;
}

char *
rp_client_discover_model(const char *url, double timeout_s, GError **error)
{
	g_autofree char *endpoint = endpoint_of(url, "/v1/models");
	g_autofree char *why = NULL;
	json_t *doc = ask(endpoint, NULL, timeout_s, &why);
	json_t *id = json_object_get(json_array_get(json_object_get(doc, "data"), 0), "id");
	char *model = json_is_string(id) ? g_strdup(json_string_value(id)) : NULL;

	if (model == NULL)
		g_set_error(error, RP_ERROR, RP_ERROR_RUN,
		            "cannot learn the model name from %s (%s); pass --model", endpoint,
		            why ? why : "no data[0].id");
	json_decref(doc);
	return model;
}

bool
rp_client_prompt_overhead(const char *url, const struct rp_body_opts *o, double timeout_s,
                          uint32_t *out, GError **error)
{
	g_autofree char *endpoint = endpoint_of(url, "/tokenize");
	g_autofree char *why = NULL;
	json_t *req = o->api == RP_API_CHAT
		? json_pack("{s:[{s:s, s:s}]}", "messages", "role", "user", "content", "")
		: json_pack("{s:s}", "prompt", "");
	char *body;
	json_t *doc, *count;
	bool ok;

	/* An empty prompt's count is exactly what the server adds to ours. */
	if (o->model)
		json_object_set_new(req, "model", json_string(o->model));
	body = json_dumps(req, JSON_COMPACT);
	doc = ask(endpoint, body, timeout_s, &why);
	count = json_object_get(doc, "count");
	ok = json_is_integer(count) && json_integer_value(count) >= 0 &&
	     json_integer_value(count) <= 100000;
	if (ok)
		*out = (uint32_t)json_integer_value(count);
	else
		g_set_error(error, RP_ERROR, RP_ERROR_RUN, "POST %s gave no token count (%s)",
		            endpoint, why ? why : "no \"count\"");
	free(body);
	json_decref(req);
	json_decref(doc);
	return ok;
}
