/*
 * The JSON and SSE text narwhal-sim answers with, shaped field for field
 * like vLLM's OpenAI-compatible server. Bodies on the token path are built
 * by hand into reused buffers: one jansson tree per token would dominate
 * the cost of a zero-delay benchmark.
 */
#include "build-config.h"

#include <inttypes.h>
#include <string.h>

#include "sim/server.h"
#include "sim/tokenize.h"

const char *
sim_error_type(unsigned status)
{
	switch (status) {
	case 400: return "BadRequestError";
	case 401: return "AuthenticationError";
	case 403: return "PermissionDeniedError";
	case 404: return "NotFoundError";
	case 405: return "MethodNotAllowedError";
	case 408: return "RequestTimeoutError";
	case 409: return "ConflictError";
	case 413: return "RequestEntityTooLargeError";
	case 422: return "UnprocessableEntityError";
	case 429: return "RateLimitError";
	case 501: return "NotImplementedError";
	case 502: return "BadGatewayError";
	case 503: return "ServiceUnavailableError";
	case 504: return "GatewayTimeoutError";
	default: return status >= 500 ? "InternalServerError" : "BadRequestError";
	}
}

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

static void
append_error_object(GString *out, unsigned status, const char *param, const char *message)
{
	g_string_append(out, "{\"error\":{\"message\":\"");
	sim_json_escape(out, message);
	g_string_append_printf(out, "\",\"type\":\"%s\",\"param\":", sim_error_type(status));
	if (param != NULL) {
		g_string_append_c(out, '"');
		sim_json_escape(out, param);
		g_string_append_c(out, '"');
	} else {
		g_string_append(out, "null");
	}
	g_string_append_printf(out, ",\"code\":%u}}", status);
}

char *
sim_error_text(unsigned status, const char *param, const char *message)
{
	GString *out = g_string_sized_new(128);

	append_error_object(out, status, param, message);
	return g_string_free(out, FALSE);
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
sim_respond_error(struct MHD_Connection *conn, unsigned status, const char *param,
                  const char *message, const char *request_id)
{
	char *text = sim_error_text(status, param, message);

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
	                       ",\"completion_tokens\":%" PRIu32 "%s}",
	                       call->prompt_tokens, call->prompt_tokens + completion, completion,
	                       details ? ",\"prompt_tokens_details\":null" : "");
}

static void
append_head(GString *out, const struct sim_call *call, const char *object)
{
	g_string_append(out, "{\"id\":\"");
	sim_json_escape(out, call->response_id);
	g_string_append_printf(out, "\",\"object\":\"%s\",\"created\":%" PRId64 ",\"model\":\"%s\"",
	                       object, call->created, model_json(call));
}

static void
append_text(GString *out, uint64_t seed, uint32_t first, uint32_t n)
{
	for (uint32_t i = first; i < first + n; i++)
		sim_json_escape(out, sim_token_piece(seed, i));
}

void
sim_render_response(const struct sim_call *call, const json_t *kv_out, GString *out)
{
	char *kv = kv_out ? json_dumps(kv_out, JSON_COMPACT) : NULL;

	append_head(out, call, call->chat ? "chat.completion" : "text_completion");
	if (call->chat) {
		g_string_append(out, ",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\","
		                "\"content\":\"");
		append_text(out, call->text_seed, 0, call->emitted);
		g_string_append(out, "\",\"reasoning_content\":null,\"tool_calls\":[]},"
		                "\"logprobs\":null,\"finish_reason\":\"length\",\"stop_reason\":null}],"
		                "\"usage\":");
	} else {
		g_string_append(out, ",\"choices\":[{\"index\":0,\"text\":\"");
		append_text(out, call->text_seed, 0, call->emitted);
		g_string_append(out, "\",\"logprobs\":null,\"finish_reason\":\"length\","
		                "\"stop_reason\":null,\"prompt_logprobs\":null}],\"usage\":");
	}
	append_usage(out, call, call->emitted, true);
	g_string_append(out, call->chat ? ",\"prompt_logprobs\":null,\"kv_transfer_params\":"
	                                : ",\"kv_transfer_params\":");
	g_string_append(out, kv ? kv : "null");
	g_string_append_c(out, '}');
	free(kv);
}

static void
append_chunk_tail(GString *out, const struct sim_call *call, bool last, uint32_t completion)
{
	g_string_append(out, last ? "\",\"logprobs\":null,\"finish_reason\":\"length\","
	                            "\"stop_reason\":null}]"
	                          : "\",\"logprobs\":null,\"finish_reason\":null,"
	                            "\"stop_reason\":null}]");
	if (call->continuous_usage) {
		g_string_append(out, ",\"usage\":");
		append_usage(out, call, completion, false);
	}
	g_string_append(out, "}\n\n");
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
			g_string_append(out, ",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"");
			sim_json_escape(out, sim_token_piece(call->text_seed, i));
			g_string_append_c(out, '"');
			g_string_append(out, "},\"logprobs\":null,\"finish_reason\":");
			g_string_append(out, final ? "\"length\",\"stop_reason\":null}]"
			                           : "null,\"stop_reason\":null}]");
			if (call->continuous_usage) {
				g_string_append(out, ",\"usage\":");
				append_usage(out, call, i + 1, false);
			}
			g_string_append(out, "}\n\n");
		} else {
			append_head(out, call, "text_completion");
			g_string_append(out, ",\"choices\":[{\"index\":0,\"text\":\"");
			sim_json_escape(out, sim_token_piece(call->text_seed, i));
			append_chunk_tail(out, call, final, i + 1);
		}
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
	g_string_append(call->out, "data: ");
	append_error_object(call->out, status, param, message);
	g_string_append(call->out, "\n\ndata: [DONE]\n\n");
}
