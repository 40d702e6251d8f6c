/*
 * One simulated engine's HTTP surface: routing, request validation with
 * its dialect's statuses and error shape, and the life of a completion request
 * from its body to its last byte.
 *
 * A non-streaming request is suspended in the access handler until the
 * engine finishes it, then answered when libmicrohttpd calls the handler
 * again after the resume. A streaming request gets its 200 headers at once
 * and a content reader that suspends whenever nothing is buffered (never
 * returning 0 without suspending); each engine step appends SSE events and
 * resumes it. A client that leaves aborts the request in the engine and
 * frees its KV at once.
 */
#include "build-config.h"

#include "sim/server.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <sys/socket.h>

#include "core/log.h"
#include "sim/metrics.h"
#include "sim/tokenize.h"

#define MAX_REQUEST_ID 200
#define STREAM_BLOCK (32u << 10)

/* --- calls ------------------------------------------------------------ */

void
sim_call_unref(struct sim_call *call)
{
	if (--call->refs > 0)
		return;
	if (call->body)
		g_string_free(call->body, TRUE);
	if (call->out)
		g_string_free(call->out, TRUE);
	if (call->pull_body)
		g_string_free(call->pull_body, TRUE);
	json_decref(call->kv_in);
	sim_output_clear(&call->output);
	g_free(call->prompt_text);
	if (call->prompt_ids)
		g_array_free(call->prompt_ids, TRUE);
	g_free(call->request_id);
	g_free(call->response_id);
	g_free(call);
}

static double
now_v(const struct sim_call *call)
{
	return sim_fleet_now(call->node->fleet);
}

void
sim_call_engine_abort(struct sim_call *call)
{
	struct sim_node *node = call->node;
	double now;

	if (!call->in_engine)
		return;
	sim_engine_abort(node->engine, &call->req);
	call->in_engine = false;
	now = now_v(call);
	sim_metrics_finished(node->metrics, SIM_REASON_ABORT, now - call->arrival_v,
	                     call->req.scheduled_s >= 0
	                         ? MAX(call->req.scheduled_s - call->req.arrival_s, 0) : -1,
	                     -1, -1);
	sim_node_kick(node);
}

/* Stop every piece of work the call still has going. */
static void
stop_work(struct sim_call *call)
{
	if (call->hang_timer != 0) {
		g_source_remove(call->hang_timer);
		call->hang_timer = 0;
	}
	if (call->pull != NULL) {
		nw_upstream_cancel(call->pull);
		call->pull = NULL;
	}
	sim_bootstrap_stop(call);
	sim_node_doom(call->node, call);
}

static void
resume_handler(struct sim_call *call)
{
	if (call->suspended && call->node->http != NULL) {
		call->suspended = false;
		nw_http_server_resume(call->node->http, call->conn);
	}
}

static void
wake_reader(struct sim_call *call)
{
	if (call->reader_suspended && call->node->http != NULL) {
		call->reader_suspended = false;
		nw_http_server_resume(call->node->http, call->conn);
	}
}

/* A suspended client hung up: vLLM aborts the request and frees its KV. */
static void
on_hangup(void *data)
{
	struct sim_call *call = data;

	call->dead = true;
	stop_work(call);
	if (nw_log_enabled(NARWHAL_LOG_DEBUG))
		nw_log(NARWHAL_LOG_DEBUG, "client_gone", "engine", call->node->id,
		       "request_id", call->request_id, NULL);
	/* Resume so libmicrohttpd fails the connection and completes it. */
	resume_handler(call);
	wake_reader(call);
}

static void
suspend_handler(struct sim_call *call)
{
	call->suspended = true;
	nw_http_server_suspend(call->node->http, call->conn, on_hangup, call);
}

void
sim_call_fail(struct sim_call *call, unsigned status, const char *param, const char *message)
{
	if (call->dead || call->state == SIM_CALL_FAILED || call->state == SIM_CALL_DONE)
		return;
	call->state = SIM_CALL_FAILED;
	stop_work(call);
	if (call->stream) {
		/* The 200 went out with the headers: report in-band. */
		sim_render_stream_error(call, status, param, message);
		call->stream_end = true;
		wake_reader(call);
		return;
	}
	call->status = status;
	if (call->out)
		g_string_free(call->out, TRUE);
	{
		char *text = sim_error_text(call->node->dialect, status, param, message);

		call->out = g_string_new(text);
		g_free(text);
	}
	resume_handler(call);
}

void
sim_call_submit(struct sim_call *call, sim_request_kind kind, double kv_ready_v)
{
	struct sim_node *node = call->node;

	memset(&call->req, 0, sizeof call->req);
	call->req.id = node->next_request_id++;
	call->req.kind = kind;
	call->req.prompt_tokens = call->prompt_tokens;
	/* A prefill-only request answers with exactly one token. */
	call->req.max_tokens = kind == SIM_PREFILL_ONLY ? 1 : call->max_tokens;
	call->req.arrival_s = call->arrival_v;
	call->req.kv_ready_s = kv_ready_v;
	call->req.first_token_s = -1;
	call->req.scheduled_s = -1;
	call->req.owner = call;
	if (!sim_engine_submit(node->engine, &call->req)) {
		g_autofree char *msg = g_strdup_printf(
			"This request needs %" PRIu32 " tokens of KV cache (prompt and output), "
			"more than this engine can ever hold.",
			call->req.prompt_tokens + call->req.max_tokens);
		sim_call_fail(call, 400, "input_tokens", msg);
		return;
	}
	call->in_engine = true;
	call->state = SIM_CALL_RUNNING;
	node->arrived_v = MAX(node->arrived_v, call->arrival_v);
	sim_node_kick(node);
}

void
sim_call_on_tokens(struct sim_call *call, uint32_t n)
{
	struct sim_node *node = call->node;
	double now = node->step_end_v;
	int64_t die = node->faults.die_after_tokens;
	bool final = call->req.generated >= call->req.max_tokens;
	uint32_t take = n;
	bool dies = false;

	if (call->dead || call->state != SIM_CALL_RUNNING)
		return;
	/* die_after_tokens: N tokens reach the client, then the engine "dies". */
	if (die >= 0 && (call->emitted + n > die || (call->emitted + n == die && !final))) {
		take = die > call->emitted ? (uint32_t)(die - call->emitted) : 0;
		dies = true;
	}
	if (take > 0) {
		if (call->emitted == 0) {
			sim_metrics_first_token(node->metrics, now - call->arrival_v);
			sim_metrics_inter_token(node->metrics, 0, take - 1);
		} else {
			sim_metrics_inter_token(node->metrics, (now - call->last_token_v) / take, take);
		}
		call->last_token_v = now;
		if (call->stream)
			sim_render_chunks(call, call->emitted, take, final && !dies);
		call->emitted += take;
	}
	if (dies) {
		nw_log(NARWHAL_LOG_INFO, "fault_died", "engine", node->id,
		       "request_id", call->request_id, NULL);
		if (call->stream) {
			call->state = SIM_CALL_FAILED;
			call->stream_end = true;
			call->stream_abort = true;
			stop_work(call);
		} else {
			sim_call_fail(call, 500, NULL,
			              "The engine died while generating (injected fault).");
		}
	}
	/* error_after_tokens: N tokens, then an in-band error event (a stream)
	 * or a 500; the request is aborted. */
	if (!dies && node->faults.error_after_tokens >= 0 &&
	    call->emitted >= node->faults.error_after_tokens && !final) {
		sim_call_fail(call, 500, NULL, "The engine failed while generating (injected "
		              "fault).");
		return;
	}
	if (call->stream)
		wake_reader(call);
}

void
sim_call_on_finished(struct sim_call *call, sim_finish why)
{
	struct sim_node *node = call->node;
	const struct sim_request *req = &call->req;
	double now = node->step_end_v;
	json_t *kv_out = NULL;

	call->in_engine = false;
	if (call->dead || call->state != SIM_CALL_RUNNING)
		return;
	if (why != SIM_FINISH_LENGTH) {
		sim_call_fail(call, why == SIM_FINISH_REJECTED ? 400 : 500,
		              why == SIM_FINISH_REJECTED ? "input_tokens" : NULL,
		              why == SIM_FINISH_REJECTED
		                  ? "The request can never fit in this engine's KV cache."
		                  : "The request was aborted.");
		return;
	}
	sim_metrics_finished(node->metrics, SIM_REASON_LENGTH, now - call->arrival_v,
	                     req->scheduled_s >= 0 ? MAX(req->scheduled_s - req->arrival_s, 0) : -1,
	                     req->first_token_s >= 0 && req->scheduled_s >= 0
	                         ? req->first_token_s - req->scheduled_s : -1,
	                     req->first_token_s >= 0 ? now - req->first_token_s : -1);
	sim_metrics_request_tokens(node->metrics, (uint64_t)call->prompt_tokens + call->emitted);
	call->state = SIM_CALL_DONE;
	if (call->room_state == SIM_ROOM_PREFILL)
		sim_bootstrap_publish(call);
	if (call->stream) {
		sim_render_stream_end(call);
		call->stream_end = true;
		wake_reader(call);
		return;
	}
	if (call->kind == SIM_PREFILL_ONLY && node->dialect == SIM_DIALECT_VLLM)
		kv_out = sim_kv_params_out(call);
	call->status = 200;
	call->out = g_string_sized_new(512);
	sim_render_response(call, kv_out, call->out);
	json_decref(kv_out);
	resume_handler(call);
}

/* --- streaming -------------------------------------------------------- */

/*
 * End a streamed response abruptly, as a crashed engine would: the client
 * gets FIN without the final chunk. MHD_CONTENT_READER_END_WITH_ERROR alone
 * is not enough in our mode (external epoll, MHD_USE_TURBO, libmicrohttpd
 * 0.9.75): MHD marks the connection closed but neither shuts the socket
 * (TURBO skips that) nor looks at it again, because a connection that was
 * suspended and resumed is out of MHD's epoll set and a closed one leaves
 * the ready list. The client would hang until its own timeout, and the
 * descriptor would stay until the connection timeout (60 s) or until other
 * traffic on the port happens to sweep it. So shut the socket ourselves
 * (the client sees the close at once), and give the connection a 1 s
 * timeout of its own: that deadline makes the server run MHD again, which
 * then cleans the closed connection up and releases its descriptor (within
 * about a second, measured).
 */
static ssize_t
end_abruptly(struct sim_call *call)
{
	nw_http_server_abort(call->conn);
	return MHD_CONTENT_READER_END_WITH_ERROR;
}

static ssize_t
stream_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct sim_call *call = cls;
	size_t avail;

	if (call->node->stopping || call->dead || call->node->http == NULL)
		return end_abruptly(call);
	avail = call->out->len - call->out_pos;
	if (avail > 0) {
		size_t n = MIN(avail, max);

		memcpy(buf, call->out->str + call->out_pos, n);
		call->out_pos += n;
		if (call->out_pos == call->out->len) {
			g_string_truncate(call->out, 0); /* keep the allocation */
			call->out_pos = 0;
		}
		return (ssize_t)n;
	}
	if (call->stream_end)
		return call->stream_abort ? end_abruptly(call) : MHD_CONTENT_READER_END_OF_STREAM;
	/* Nothing yet: suspend, or libmicrohttpd would spin on us. */
	call->reader_suspended = true;
	nw_http_server_suspend(call->node->http, call->conn, on_hangup, call);
	return 0;
}

static void
stream_reader_free(void *cls)
{
	sim_call_unref(cls);
}

static enum MHD_Result
queue_stream(struct sim_call *call)
{
	struct MHD_Response *resp;
	enum MHD_Result ret;

	resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, STREAM_BLOCK, stream_reader,
	                                         call, stream_reader_free);
	if (resp == NULL)
		return MHD_NO;
	call->refs++;
	call->out = g_string_sized_new(1024);
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
	                        "text/event-stream; charset=utf-8");
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
	MHD_add_response_header(resp, "X-Request-Id", call->request_id);
	ret = MHD_queue_response(call->conn, MHD_HTTP_OK, resp);
	MHD_destroy_response(resp);
	return ret;
}

/* --- generation -------------------------------------------------------- */

static void
after_hang(struct sim_call *call)
{
	if (call->kind != SIM_REMOTE_DECODE) {
		sim_call_submit(call, call->kind, 0);
		return;
	}
	call->state = SIM_CALL_PULLING;
	if (call->node->dialect == SIM_DIALECT_SGLANG) {
		sim_bootstrap_wait(call);
		return;
	}
	if (call->kv_invalid != NULL) {
		sim_kv_load_failed(call, call->kv_invalid);
		return;
	}
	sim_kv_pull_start(call);
}

static gboolean
on_hang_over(gpointer data)
{
	struct sim_call *call = data;

	call->hang_timer = 0;
	after_hang(call);
	return G_SOURCE_REMOVE;
}

static void
begin(struct sim_call *call)
{
	const struct sim_fleet *fleet = call->node->fleet;
	double hang = call->node->faults.hang_s;

	if (hang > 0) {
		call->state = SIM_CALL_HANGING;
		if (isfinite(hang)) {
			double ms = hang / fleet->opts->time_scale * 1e3;

			call->hang_timer = g_timeout_add((guint)MIN(MAX(ms, 1.0), 86400e3),
			                                 on_hang_over, call);
		}
		return; /* forever: until the client leaves */
	}
	after_hang(call);
}

static enum MHD_Result
answer(struct sim_call *call)
{
	size_t len = call->out->len;
	char *text = g_string_free(call->out, FALSE);

	call->out = NULL;
	return sim_respond_text(call->conn, call->status, "application/json", text, len,
	                        call->request_id);
}

enum MHD_Result
sim_respond_fail(struct sim_call *call, struct sim_fail *f)
{
	char *text = sim_dialect_error_text(call->node->dialect, f->status, f->param, f->message,
	                                    false, f->n_prompt, f->n_ctx);

	g_free(f->message);
	return sim_respond_text(call->conn, f->status, "application/json", text, strlen(text),
	                        call->request_id);
}

static bool
injected_error(struct sim_call *call, struct sim_fail *f)
{
	const struct sim_faults *faults = &call->node->faults;

	if (faults->error_rate <= 0 || g_rand_double(call->node->rand) >= faults->error_rate)
		return false;
	sim_fail_set(f, faults->error_status, NULL, "Injected fault: engine %s answers %u.",
	             call->node->id, faults->error_status);
	return true;
}

static gboolean
on_error_due(gpointer data)
{
	struct sim_call *call = data;

	call->hang_timer = 0;
	call->state = SIM_CALL_FAILED;
	resume_handler(call);
	return G_SOURCE_REMOVE;
}

/* error_delay_s: the injected error leaves later, the request held as a
 * hang holds it (a client that leaves ends it). An engine's refusal that
 * comes after its partner heard of the failure, as an SGLang decode engine
 * hears of its prefill's through the bootstrap server (docs/simulator.md). */
static enum MHD_Result
delay_error(struct sim_call *call, struct sim_fail *f)
{
	double ms = call->node->faults.error_delay_s / call->node->fleet->opts->time_scale * 1e3;
	char *text = sim_error_text(call->node->dialect, f->status, f->param, f->message);

	g_free(f->message);
	call->status = f->status;
	call->out = g_string_new(text);
	g_free(text);
	call->state = SIM_CALL_HANGING;
	call->hang_timer = g_timeout_add((guint)MIN(MAX(ms, 1.0), 86400e3), on_error_due, call);
	suspend_handler(call);
	return MHD_YES;
}

static enum MHD_Result
start_generation(struct sim_call *call)
{
	struct sim_fail f = { 0 };
	json_t *doc;
	bool ok;
	enum MHD_Result ret = MHD_YES;

	if (injected_error(call, &f))
		return call->node->faults.error_delay_s > 0 ? delay_error(call, &f)
		                                            : sim_respond_fail(call, &f);
	doc = sim_parse_body(call, &f);
	if (doc == NULL)
		return sim_respond_fail(call, &f);
	ok = sim_parse_generation(call, doc, &f);
	json_decref(doc);
	if (!ok)
		return sim_respond_fail(call, &f);
	g_string_free(call->body, TRUE);
	call->body = NULL;
	call->response_id = g_strconcat(call->chat ? "chatcmpl-" : "cmpl-", call->request_id, NULL);
	call->created = (int64_t)(g_get_real_time() / G_USEC_PER_SEC);

	if (call->stream) {
		ret = queue_stream(call);
		begin(call);
		return ret;
	}
	begin(call);
	if (call->state == SIM_CALL_DONE || call->state == SIM_CALL_FAILED)
		return answer(call);
	suspend_handler(call);
	return MHD_YES;
}

static char *
new_request_id(struct sim_node *node, struct MHD_Connection *conn)
{
	const char *given = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Request-Id");

	if (given != NULL && *given != '\0' && strlen(given) <= MAX_REQUEST_ID)
		return g_strdup(given);
	return g_strdup_printf("%08x%08x%08x%08x", g_rand_int(node->id_rand),
	                       g_rand_int(node->id_rand), g_rand_int(node->id_rand),
	                       g_rand_int(node->id_rand));
}

enum MHD_Result
sim_server_handler(void *data, struct MHD_Connection *conn, const char *url, const char *method,
                   const char *version, const char *upload, size_t *upload_size, void **request)
{
	struct sim_node *node = data;
	struct sim_call *call = *request;

	if (call == NULL) {
		/* Every answer waits for the last call: answering while the
		 * request is still being read makes libmicrohttpd close the
		 * connection, which a health checker on keep-alive would pay. */
		call = g_new0(struct sim_call, 1);
		call->refs = 1;
		call->node = node;
		call->conn = conn;
		call->route = sim_route_of(node->dialect, url, method, &call->not_allowed);
		call->chat = call->route == R_CHAT;
		call->body = g_string_new(NULL);
		call->arrival_v = sim_fleet_now(node->fleet);
		node->calls_active++;
		node->http_requests_total++;
		/* Work the engine was given, failed or not (docs/simulator.md,
		 * "last_request_unix_ms"). */
		if ((call->route == R_COMPLETIONS || call->route == R_CHAT ||
		     call->route == R_TOKENIZE) && call->not_allowed == NULL) {
			node->work_requests_total++;
			node->last_request_unix_ms = g_get_real_time() / 1000;
		}
		*request = call;
		return MHD_YES;
	}
	if (*upload_size > 0) {
		if (call->body->len + *upload_size > SIM_MAX_BODY_BYTES)
			call->body_too_large = true;
		else
			g_string_append_len(call->body, upload, (gssize)*upload_size);
		*upload_size = 0;
		return MHD_YES;
	}
	/* The last call, or a call again after a resume. */
	if (call->dead)
		return MHD_NO;
	if (node->stopping)
		return sim_respond_error(conn, node->dialect, 503, NULL,
		                         "The engine is shutting down.", call->request_id);
	switch (call->state) {
	case SIM_CALL_NEW:
		break;
	case SIM_CALL_DONE:
	case SIM_CALL_FAILED:
		return answer(call);
	default:
		suspend_handler(call); /* woken early: keep waiting */
		return MHD_YES;
	}
	if (call->route == R_NONE) {
		g_autofree char *msg = g_strdup_printf("No route for %s %s.", method, url);
		return sim_respond_no_route(conn, node->dialect, 404, "Not Found", msg, NULL);
	}
	if (call->not_allowed != NULL) {
		g_autofree char *msg = g_strdup_printf("Method %s is not allowed on %s.", method, url);
		return sim_respond_no_route(conn, node->dialect, 405, "Method Not Allowed", msg,
		                            call->not_allowed);
	}
	switch (call->route) {
	case R_COMPLETIONS:
	case R_CHAT:
		call->request_id = new_request_id(node, conn);
		return start_generation(call);
	case R_TOKENIZE:
		return sim_route_tokenize(call);
	case R_DETOKENIZE:
		return sim_respond_error(conn, node->dialect, 501, NULL,
		                         "narwhal-sim does not model detokenization.", NULL);
	case R_KV_PULL:
		return sim_kv_route_pull(node, conn, call->body->str, call->body->len);
	default:
		return sim_route_get(node, conn, call->route);
	}
}

void
sim_server_completed(void *data, struct MHD_Connection *conn, void **request,
                     enum MHD_RequestTerminationCode why)
{
	struct sim_call *call = *request;

	if (call == NULL)
		return;
	*request = NULL;
	/* Whatever still runs for this request goes: a client that left must
	 * not keep KV held (vLLM aborts on disconnect). */
	call->dead = true;
	stop_work(call);
	call->suspended = false;
	call->reader_suspended = false;
	call->conn = NULL;
	call->node->calls_active--;
	sim_call_unref(call);
}
