/*
 * The JSON and SSE text narwhal-sim answers with, shaped field for field
 * like vLLM's OpenAI-compatible server (the other dialects differ in their
 * errors, dialect.c, and in leaving out vLLM's kv_transfer_params). Bodies
 * on the token path are built by hand into reused buffers: one jansson
 * tree per token would dominate the cost of a zero-delay benchmark.
 */
#include "build-config.h"

#include <inttypes.h>
#include <string.h>

#include "sim/server.h"
#include "sim/tokenize.h"

void
sim_json_escape(GString *out, const char *s)
{
	const char *run = s;

	/* Copy plain runs in one go; escape only what JSON requires. */
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c >= 0x20 && c != '"' && c != '\\')
			continue;
		g_string_append_len(out, run, s - run);
		switch (c) {
		case '"': g_string_append(out, "\\\""); break;
		case '\\': g_string_append(out, "\\\\"); break;
		case '\n': g_string_append(out, "\\n"); break;
		case '\r': g_string_append(out, "\\r"); break;
		case '\t': g_string_append(out, "\\t"); break;
		default: g_string_append_printf(out, "\\u%04x", c); break;
		}
		run = s + 1;
	}
	g_string_append_len(out, run, s - run);
}

char *
sim_error_text(sim_dialect d, unsigned status, const char *param, const char *message)
{
	return sim_dialect_error_text(d, status, param, message, false, 0, 0);
}

enum MHD_Result
sim_respond_text(struct MHD_Connection *conn, unsigned status, const char *content_type,
                 char *text, size_t len, const char *request_id)
{
	struct MHD_Response *resp;
	enum MHD_Result ret;

	resp = MHD_create_response_from_buffer_with_free_callback(len, text, g_free);
	if (resp == NULL) {
		g_free(text);
		return MHD_NO;
	}
	if (content_type != NULL)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
	if (request_id != NULL)
		MHD_add_response_header(resp, "X-Request-Id", request_id);
	ret = MHD_queue_response(conn, status, resp);
	MHD_destroy_response(resp);
	return ret;
}

enum MHD_Result
sim_respond_error(struct MHD_Connection *conn, sim_dialect d, unsigned status,
                  const char *param, const char *message, const char *request_id)
{
	char *text = sim_error_text(d, status, param, message);

	return sim_respond_text(conn, status, "application/json", text, strlen(text), request_id);
}

enum MHD_Result
sim_respond_json(struct MHD_Connection *conn, unsigned status, const json_t *doc)
{
	char *dumped = json_dumps(doc, JSON_COMPACT);
	char *text;
	size_t len;

	if (dumped == NULL)
		return MHD_NO;
	/* jansson allocates with malloc; hand MHD a GLib copy to free. */
	len = strlen(dumped);
	text = g_memdup2(dumped, len + 1);
	free(dumped);
	return sim_respond_text(conn, status, "application/json", text, len, NULL);
}

static const char *
model_json(const struct sim_call *call)
{
	return call->node->fleet->model_name_json;
}

static void
append_usage(GString *out, const struct sim_call *call, uint32_t completion, bool details)
{
	g_string_append_printf(out, "{\"prompt_tokens\":%" PRIu32 ",\"total_tokens\":%" PRIu32
	                       ",\"completion_tokens\":%" PRIu32,
	                       call->prompt_tokens, call->prompt_tokens + completion, completion);
	/* No prefix cache: nothing is ever cached. */
	if (call->node->fleet->opts->prompt_tokens_details)
		g_string_append(out, ",\"prompt_tokens_details\":{\"cached_tokens\":0}}");
	else
		g_string_append(out, details ? ",\"prompt_tokens_details\":null}" : "}");
}

static void
append_head(GString *out, const struct sim_call *call, const char *object)
{
	g_string_append(out, "{\"id\":\"");
	sim_json_escape(out, call->response_id);
	g_string_append_printf(out, "\",\"object\":\"%s\",\"created\":%" PRId64 ",\"model\":\"%s\"",
	                       object, call->created, model_json(call));
}

/* The pieces of tokens [0, n) that are of kind (tool calls: call c's). */
static void
append_pieces(GString *out, const struct sim_call *call, uint32_t n, sim_out_kind kind,
              unsigned c)
{
	for (uint32_t i = 0; i < n; i++) {
		unsigned ci = 0;

		if (sim_output_kind(&call->output, i, &ci) != kind || (kind == SIM_OUT_TOOL && ci != c))
			continue;
		if (kind == SIM_OUT_TOOL)
			sim_output_append_args(&call->output, call->text_seed, i, out);
		else
			g_string_append(out, sim_token_piece(call->text_seed, i));
	}
}

static const char *
finish_reason(const struct sim_call *call)
{
	return call->output.n_calls > 0 ? "\"tool_calls\"" : "\"length\"";
}

static void
append_prompt_logprobs(GString *out, const struct sim_call *call)
{
	json_t *list;
	char *text;

	if (call->output.prompt_top < 0) {
		g_string_append(out, "null");
		return;
	}
	list = sim_output_prompt_logprobs(call->prompt_text, call->prompt_bos, call->prompt_ids,
	                                  call->output.prompt_top, call->text_seed);
	text = json_dumps(list, JSON_COMPACT);
	g_string_append(out, text ? text : "null");
	free(text);
	json_decref(list);
}

static void
append_message(GString *out, const struct sim_call *call)
{
	const struct sim_output *o = &call->output;

	g_string_append(out, "{\"role\":\"assistant\",\"content\":");
	if (o->n_calls > 0) {
		g_string_append(out, "null");
	} else {
		g_string_append_c(out, '"');
		append_pieces(out, call, call->emitted, SIM_OUT_CONTENT, 0);
		g_string_append_c(out, '"');
	}
	g_string_append(out, ",\"reasoning_content\":");
	if (o->reasoning > 0) {
		g_string_append_c(out, '"');
		append_pieces(out, call, call->emitted, SIM_OUT_REASONING, 0);
		g_string_append_c(out, '"');
	} else {
		g_string_append(out, "null");
	}
	g_string_append(out, ",\"tool_calls\":[");
	for (unsigned c = 0; c < o->n_calls; c++) {
		g_string_append(out, c ? ",{\"id\":\"" : "{\"id\":\"");
		sim_output_append_call_id(call->text_seed, c, out);
		g_string_append_printf(out, "\",\"type\":\"function\",\"function\":{\"name\":%s,"
		                       "\"arguments\":\"", o->call_names[c]);
		append_pieces(out, call, call->emitted, SIM_OUT_TOOL, c);
		g_string_append(out, "\"}}");
	}
	g_string_append(out, "]}");
}

static void
append_logprobs(GString *out, const struct sim_call *call, uint32_t first, uint32_t n,
                uint32_t offset)
{
	if (call->output.top < 0) {
		g_string_append(out, "null");
	} else if (call->chat) {
		g_string_append(out, "{\"content\":[");
		for (uint32_t i = first; i < first + n; i++) {
			if (i > first)
				g_string_append_c(out, ',');
			sim_output_append_chat_logprob(&call->output, call->text_seed, i, out);
		}
		g_string_append(out, "]}");
	} else {
		sim_output_append_completion_logprobs(&call->output, call->text_seed, first, n, offset,
		                                      out);
	}
}

void
sim_render_response(const struct sim_call *call, const json_t *kv_out, GString *out)
{
	char *kv = kv_out ? json_dumps(kv_out, JSON_COMPACT) : NULL;

	append_head(out, call, call->chat ? "chat.completion" : "text_completion");
	if (call->chat) {
		g_string_append(out, ",\"choices\":[{\"index\":0,\"message\":");
		append_message(out, call);
		g_string_append(out, ",\"logprobs\":");
		append_logprobs(out, call, 0, call->emitted, 0);
		g_string_append_printf(out, ",\"finish_reason\":%s,\"stop_reason\":null}],\"usage\":",
		                       finish_reason(call));
	} else {
		g_string_append(out, ",\"choices\":[{\"index\":0,\"text\":\"");
		append_pieces(out, call, call->emitted, SIM_OUT_CONTENT, 0);
		g_string_append(out, "\",\"logprobs\":");
		append_logprobs(out, call, 0, call->emitted, 0);
		g_string_append(out, ",\"finish_reason\":\"length\",\"stop_reason\":null,"
		                "\"prompt_logprobs\":");
		append_prompt_logprobs(out, call);
		g_string_append(out, "}],\"usage\":");
	}
	append_usage(out, call, call->emitted, true);
	if (call->chat) {
		g_string_append(out, ",\"prompt_logprobs\":");
		append_prompt_logprobs(out, call);
	}
	/* A vLLM field (wire formats 1.2); the other engines have none. */
	if (call->node->dialect == SIM_DIALECT_VLLM) {
		g_string_append(out, ",\"kv_transfer_params\":");
		g_string_append(out, kv ? kv : "null");
	}
	g_string_append_c(out, '}');
	free(kv);
}

/* The delta of chat token i: reasoning, content, or a piece of a tool
 * call (whose first piece carries its id, type and name). */
static void
append_delta(GString *out, const struct sim_call *call, uint32_t i)
{
	unsigned c = 0;

	switch (sim_output_kind(&call->output, i, &c)) {
	case SIM_OUT_CONTENT:
		g_string_append(out, "{\"content\":\"");
		g_string_append(out, sim_token_piece(call->text_seed, i));
		g_string_append(out, "\"}");
		break;
	case SIM_OUT_REASONING:
		g_string_append(out, "{\"reasoning_content\":\"");
		g_string_append(out, sim_token_piece(call->text_seed, i));
		g_string_append(out, "\"}");
		break;
	case SIM_OUT_TOOL:
		g_string_append(out, "{\"tool_calls\":[{");
		if (i == sim_output_call_first(&call->output, c)) {
			g_string_append(out, "\"id\":\"");
			sim_output_append_call_id(call->text_seed, c, out);
			g_string_append_printf(out, "\",\"type\":\"function\",\"index\":%u,\"function\":"
			                       "{\"name\":%s,\"arguments\":\"", c,
			                       call->output.call_names[c]);
		} else {
			g_string_append_printf(out, "\"index\":%u,\"function\":{\"arguments\":\"", c);
		}
		sim_output_append_args(&call->output, call->text_seed, i, out);
		g_string_append(out, "\"}}]}");
		break;
	}
}

void
sim_render_chunks(struct sim_call *call, uint32_t first, uint32_t n, bool last)
{
	GString *out = call->out;

	for (uint32_t i = first; i < first + n; i++) {
		bool final = last && i + 1 == first + n;

		if (call->chat && !call->role_sent) {
			/* vLLM opens a chat stream with the role alone. */
			g_string_append(out, "data: ");
			append_head(out, call, "chat.completion.chunk");
			g_string_append(out, ",\"choices\":[{\"index\":0,\"delta\":"
			                "{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,"
			                "\"finish_reason\":null,\"stop_reason\":null}]");
			if (call->continuous_usage) {
				g_string_append(out, ",\"usage\":");
				append_usage(out, call, 0, false);
			}
			g_string_append(out, "}\n\n");
			call->role_sent = true;
		}
		g_string_append(out, "data: ");
		if (call->chat) {
			append_head(out, call, "chat.completion.chunk");
			g_string_append(out, ",\"choices\":[{\"index\":0,\"delta\":");
			append_delta(out, call, i);
		} else {
			append_head(out, call, "text_completion");
			g_string_append(out, ",\"choices\":[{\"index\":0,\"text\":\"");
			g_string_append(out, sim_token_piece(call->text_seed, i));
			g_string_append_c(out, '"');
		}
		g_string_append(out, ",\"logprobs\":");
		append_logprobs(out, call, i, 1, call->text_chars);
		call->text_chars += (uint32_t)strlen(sim_token_piece(call->text_seed, i));
		g_string_append(out, ",\"finish_reason\":");
		g_string_append(out, final ? finish_reason(call) : "null");
		g_string_append(out, ",\"stop_reason\":null}]");
		if (call->continuous_usage) {
			g_string_append(out, ",\"usage\":");
			append_usage(out, call, i + 1, false);
		}
		g_string_append(out, "}\n\n");
	}
}

void
sim_render_stream_end(struct sim_call *call)
{
	GString *out = call->out;

	if (call->include_usage) {
		g_string_append(out, "data: ");
		append_head(out, call, call->chat ? "chat.completion.chunk" : "text_completion");
		g_string_append(out, ",\"choices\":[],\"usage\":");
		append_usage(out, call, call->emitted, false);
		g_string_append(out, "}\n\n");
	}
	g_string_append(out, "data: [DONE]\n\n");
}

void
sim_render_stream_error(struct sim_call *call, unsigned status, const char *param,
                        const char *message)
{
	/* Every dialect reports in-band as wire formats 0.6 says: a nested
	 * error event, then the terminator. */
	char *text = sim_dialect_error_text(call->node->dialect, status, param, message, true, 0, 0);

	g_string_append(call->out, "data: ");
	g_string_append(call->out, text);
	g_string_append(call->out, "\n\ndata: [DONE]\n\n");
	g_free(text);
}
