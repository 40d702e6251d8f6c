/*
 * Request validation for narwhal-sim's OpenAI-compatible routes, with
 * vLLM's statuses and parameter names (the other dialects differ in their
 * context-length checks and handoff fields): one set of prompt rules serves
 * /tokenize and generation, so /tokenize counts equal usage.prompt_tokens.
 */
#include "build-config.h"

#include <inttypes.h>
#include <stdarg.h>
#include <string.h>

#include "core/log.h"
#include "sim/server.h"
#include "sim/tokenize.h"

bool
sim_fail_set(struct sim_fail *f, unsigned status, const char *param, const char *fmt, ...)
             {
	     va_list ap;

	va_start(ap, fmt);
	g_free(f->message);
	f->status = status;
	f->param = param;
	f->message = g_strdup_vprintf(fmt, ap);
	va_end(ap);
	return false;
}

static bool
get_bool(const json_t *doc, const char *key, bool def, bool *out, struct sim_fail *f)
{
	const json_t *v = json_object_get(doc, key);

	if (v == NULL || json_is_null(v)) {
		*out = def;
		return true;
	}
	if (!json_is_boolean(v))
		return sim_fail_set(f, 400, key, "'%s' must be a boolean.", key);
	*out = json_is_true(v);
	return true;
}

/* An optional positive integer; *present tells whether one was given. */
static bool
get_count(const json_t *doc, const char *key, bool *present, uint32_t *out, struct sim_fail *f)
{
	const json_t *v = json_object_get(doc, key);

	*present = false;
	if (v == NULL || json_is_null(v))
		return true;
	if (!json_is_integer(v))
		return sim_fail_set(f, 400, key, "'%s' must be an integer.", key);
	if (json_integer_value(v) < 1)
		return sim_fail_set(f, 400, key,
		                    "'%s' must be at least 1, got %" JSON_INTEGER_FORMAT ".",
		                    key, json_integer_value(v));
	*out = json_integer_value(v) > UINT32_MAX / 2 ? UINT32_MAX / 2
	                                              : (uint32_t)json_integer_value(v);
	*present = true;
	return true;
}

bool
sim_check_model(const struct sim_node *node, const json_t *doc, struct sim_fail *f)
{
	const json_t *v = json_object_get(doc, "model");

	if (v == NULL || json_is_null(v))
		return true;
	if (!json_is_string(v))
		return sim_fail_set(f, 400, "model", "'model' must be a string.");
	if (strcmp(json_string_value(v), node->fleet->model_name) != 0)
		return sim_fail_set(f, 404, "model", "The model `%s` does not exist.",
		                    json_string_value(v));
	return true;
}

static uint64_t
fnv1a(uint64_t h, const void *data, size_t len)
{
	const unsigned char *p = data;

	for (size_t i = 0; i < len; i++)
		h = (h ^ p[i]) * 1099511628211ull;
	return h;
}

/*
 * The prompt of a completion or chat request as tokens: the same rules
 * serve /tokenize and generation, so /tokenize counts equal usage. ids,
 * when given, receives the token ids (text prompts only).
 */
static const char one_prompt[] =
	"'prompt' must be a string, or a list of token ids; narwhal-sim takes one prompt "
	"per request.";

bool
sim_parse_prompt(const json_t *doc, bool chat, GArray *ids, uint32_t *tokens, uint64_t *seed,
                 char **text_out, struct sim_fail *f)
{
	const uint64_t basis = 14695981039346656037ull;
	g_autofree char *chat_text = NULL;
	const char *text = NULL;
	bool special;

	if (chat) {
		const json_t *messages = json_object_get(doc, "messages");
		bool add_generation, continue_final;
		const char *why = NULL;

		if (messages == NULL || json_is_null(messages))
			return sim_fail_set(f, 400, "messages", "'messages' is required.");
		if (!json_is_array(messages))
			return sim_fail_set(f, 400, "messages", "'messages' must be an array.");
		if (!get_bool(doc, "add_generation_prompt", true, &add_generation, f) ||
		    !get_bool(doc, "continue_final_message", false, &continue_final, f) ||
		    !get_bool(doc, "add_special_tokens", false, &special, f))
			return false;
		if (add_generation && continue_final)
			return sim_fail_set(f, 400, "continue_final_message",
			                    "'continue_final_message' cannot be true together with "
			                    "'add_generation_prompt'.");
		chat_text = sim_chat_prompt(messages, add_generation && !continue_final, &why);
		if (chat_text == NULL)
			return sim_fail_set(f, 400, "messages", "Invalid 'messages': %s",
			                    why ? why : "not a valid conversation");
		text = chat_text;
	} else {
		const json_t *prompt = json_object_get(doc, "prompt");

		if (!get_bool(doc, "add_special_tokens", true, &special, f))
			return false;
		if (prompt == NULL || json_is_null(prompt))
			return sim_fail_set(f, 400, "prompt", "'prompt' is required.");
		if (json_is_array(prompt) && json_array_size(prompt) == 1 &&
		    (json_is_string(json_array_get(prompt, 0)) ||
		     json_is_array(json_array_get(prompt, 0))))
			prompt = json_array_get(prompt, 0); /* a batch of one */
		if (json_is_string(prompt)) {
			text = json_string_value(prompt);
		} else if (json_is_array(prompt) && ids == NULL) {
			/* Token ids: counted as given, no special tokens added. */
			size_t i;
			json_t *id;
			uint64_t h = basis;

			if (json_array_size(prompt) == 0)
				return sim_fail_set(f, 400, "prompt", "'prompt' must not be empty.");
			json_array_foreach(prompt, i, id) {
				json_int_t v = json_integer_value(id);

				if (!json_is_integer(id) || v < 0)
					return sim_fail_set(f, 400, "prompt", "%s", one_prompt);
				h = fnv1a(h, &v, sizeof v);
			}
			*tokens = (uint32_t)MIN(json_array_size(prompt), UINT32_MAX / 2);
			*seed = h;
			return true;
		} else {
			return sim_fail_set(f, 400, "prompt", "%s",
			                    ids ? "'prompt' must be a string." : one_prompt);
		}
	}
	if (ids != NULL) {
		if (special) {
			guint32 bos = SIM_TOKEN_BOS;

			g_array_append_val(ids, bos);
		}
		sim_tokenize(text, strlen(text), ids);
		*tokens = ids->len;
	} else {
		*tokens = sim_tokenize_count(text, strlen(text)) + (special ? 1 : 0);
	}
	*seed = fnv1a(basis, text, strlen(text));
	if (text_out != NULL)
		*text_out = g_strdup(text);
	return true;
}

/* The context-length check in each dialect's wording (wire formats 4.5):
 * vLLM's newest, with the parameter named; SGLang's; llama.cpp's, which
 * refuses only a prompt that fills the context and otherwise stops
 * generating at its end, so max_tokens is cut to what fits. */
static bool
check_context(struct sim_call *call, bool explicit_max, struct sim_fail *f)
{
	uint32_t limit = call->node->fleet->model.max_model_len;
	uint32_t in = call->prompt_tokens;
	uint32_t want = explicit_max ? call->max_tokens : 0;

	if (in < limit && (uint64_t)in + want <= limit)
		return true;
	switch (call->node->dialect) {
	case SIM_DIALECT_LLAMACPP:
		if (in < limit) {
			call->max_tokens = limit - in;
			return true;
		}
		sim_fail_set(f, 400, "input_tokens", "request (%" PRIu32 " tokens) exceeds the "
		             "available context size (%" PRIu32 " tokens), try increasing it",
		             in, limit);
		f->n_prompt = in;
		f->n_ctx = limit;
		return false;
	case SIM_DIALECT_SGLANG:
		if (in >= limit)
			return sim_fail_set(f, 400, "input_tokens", "The input (%" PRIu32 " tokens) is "
			                    "longer than the model's context length (%" PRIu32
			                    " tokens).", in, limit);
		return sim_fail_set(f, 400, "max_tokens", "Requested token count exceeds the "
		                    "model's maximum context length of %" PRIu32 " tokens. You "
		                    "requested a total of %" PRIu32 " tokens: %" PRIu32 " tokens "
		                    "from the input messages and %" PRIu32 " tokens for the "
		                    "completion. Please reduce the number of tokens in the input "
		                    "messages or the completion to fit within the limit.",
		                    limit, in + want, in, want);
	default:
		break;
	}
	return sim_fail_set(f, 400, in >= limit ? "input_tokens" : "max_tokens",
	                    "You passed %" PRIu32 " input tokens and requested %" PRIu32 " output "
	                    "tokens. However, the model's context length is only %" PRIu32 " tokens, "
	                    "resulting in a maximum input length of %" PRIu32 " tokens. Please reduce "
	                    "the length of the input prompt. (parameter=%s, value=%" PRIu32 ")",
	                    in, want, limit, want < limit ? limit - want : 0,
	                    in >= limit ? "input_tokens" : "max_tokens", in >= limit ? in : want);
}

/*
 * SGLang (wire formats 2): an engine launched in PD mode takes only
 * requests with the bootstrap fields, the prefill engine as the pair's
 * prefill leg and the decode engine as its decode leg. The reference has
 * the prefill engine refuse a request without them with 400; the decode
 * engine is held to the same rule (the reference is silent on it). An
 * aggregate engine ignores them, as SGLang without PD does.
 */
static bool
parse_bootstrap(struct sim_call *call, const json_t *doc, struct sim_fail *f)
{
	struct sim_dialect_fail df = { 0 };
	int has = sim_sglang_bootstrap(doc, &call->room, &df);

	if (has < 0) {
		f->status = df.status;
		f->message = df.message;
		f->param = NULL;
		return false;
	}
	if (call->node->pd_mode == SIM_PD_NONE)
		return true;
	if (has == 0)
		return sim_fail_set(f, 400, NULL, "This engine runs in disaggregation mode %s: "
		                    "the request needs bootstrap_host, bootstrap_port and "
		                    "bootstrap_room.",
		                    call->node->pd_mode == SIM_PD_PREFILL ? "prefill" : "decode");
	call->kind = call->node->pd_mode == SIM_PD_PREFILL ? SIM_PREFILL_ONLY : SIM_REMOTE_DECODE;
	call->room_state = call->kind == SIM_PREFILL_ONLY ? SIM_ROOM_PREFILL : SIM_ROOM_NONE;
	return true;
}

/* llama.cpp has no remote KV handoff: a disaggregated leg of either
 * engine's protocol is refused in its error shape (docs/simulator.md). */
static bool
refuse_handoff(const json_t *doc, struct sim_fail *f)
{
	const json_t *kv = json_object_get(doc, "kv_transfer_params");
	static const char *const fields[] = { "bootstrap_host", "bootstrap_port",
	                                      "bootstrap_room" };

	if (json_is_true(json_object_get(kv, "do_remote_decode")) ||
	    json_is_true(json_object_get(kv, "do_remote_prefill")))
		return sim_fail_set(f, 400, "kv_transfer_params", "This server does not support "
		                    "disaggregated prefill and decode (kv_transfer_params).");
	for (size_t i = 0; i < G_N_ELEMENTS(fields); i++) {
		const json_t *v = json_object_get(doc, fields[i]);

		if (v != NULL && !json_is_null(v))
			return sim_fail_set(f, 400, fields[i], "This server does not support "
			                    "disaggregated prefill and decode (%s).", fields[i]);
	}
	return true;
}

static bool
parse_kv_params(struct sim_call *call, const json_t *doc, struct sim_fail *f)
{
	const json_t *kv = json_object_get(doc, "kv_transfer_params");

	call->kind = SIM_AGGREGATE;
	if (call->node->dialect == SIM_DIALECT_SGLANG)
		return parse_bootstrap(call, doc, f);
	if (call->node->dialect == SIM_DIALECT_LLAMACPP)
		return refuse_handoff(doc, f);
	if (kv == NULL || json_is_null(kv))
		return true;
	if (!json_is_object(kv))
		return sim_fail_set(f, 400, "kv_transfer_params",
		                    "'kv_transfer_params' must be an object.");
	if (json_is_true(json_object_get(kv, "do_remote_decode"))) {
		if (call->stream)
			return sim_fail_set(f, 400, "stream",
			                    "A prefill-only request (do_remote_decode) must not "
			                    "stream.");
		call->kind = SIM_PREFILL_ONLY;
	} else if (json_is_true(json_object_get(kv, "do_remote_prefill"))) {
		call->kind = SIM_REMOTE_DECODE;
		call->kv_invalid = sim_kv_params_invalid(kv);
		if (call->kv_invalid != NULL)
			nw_log(NARWHAL_LOG_WARNING, "invalid_kv_transfer_params",
			       "engine", call->node->id, "request_id", call->request_id,
			       "reason", call->kv_invalid, NULL);
		else
			call->kv_in = json_deep_copy(kv);
	}
	return true;
}

/* An optional integer from 0 to SIM_MAX_LOGPROBS; -1 when absent. */
static bool
get_top(const json_t *doc, const char *key, int *out, struct sim_fail *f)
{
	const json_t *v = json_object_get(doc, key);

	*out = -1;
	if (v == NULL || json_is_null(v))
		return true;
	if (!json_is_integer(v) || json_integer_value(v) < 0 ||
	    json_integer_value(v) > SIM_MAX_LOGPROBS)
		return sim_fail_set(f, 400, key, "'%s' must be an integer from 0 to %d.", key,
		                    SIM_MAX_LOGPROBS);
	*out = (int)json_integer_value(v);
	return true;
}

/*
 * The tool calls a chat request asks for (docs/simulator.md): tool_choice
 * "required" calls every tool in order, a named function calls that one;
 * "auto", "none" or no tool_choice answer with text, as an engine without
 * a tool parser would. *names gets the names as JSON literals, or NULL.
 */
static bool
parse_tools(const json_t *doc, GPtrArray **names, struct sim_fail *f)
{
	const json_t *tools = json_object_get(doc, "tools");
	const json_t *choice = json_object_get(doc, "tool_choice");
	const char *wanted = NULL;
	json_t *tool;
	size_t i;

	*names = NULL;
	if (tools != NULL && !json_is_null(tools) && !json_is_array(tools))
		return sim_fail_set(f, 400, "tools", "'tools' must be an array.");
	json_array_foreach(tools, i, tool) {
		if (!json_is_string(json_object_get(json_object_get(tool, "function"), "name")))
			return sim_fail_set(f, 400, "tools",
			                    "Each tool needs a 'function' with a string 'name'.");
	}
	if (choice == NULL || json_is_null(choice))
		return true;
	if (json_is_string(choice) && (strcmp(json_string_value(choice), "none") == 0 ||
	                               strcmp(json_string_value(choice), "auto") == 0))
		return true;
	if (json_is_object(choice))
		wanted = json_string_value(json_object_get(json_object_get(choice, "function"),
		                                           "name"));
	else if (!json_is_string(choice) || strcmp(json_string_value(choice), "required") != 0)
		return sim_fail_set(f, 400, "tool_choice", "'tool_choice' must be \"none\", "
		                    "\"auto\", \"required\" or a named function.");
	if (json_is_object(choice) && wanted == NULL)
		return sim_fail_set(f, 400, "tool_choice",
		                    "A named 'tool_choice' needs a string function.name.");
	if (json_array_size(tools) == 0)
		return sim_fail_set(f, 400, "tool_choice",
		                    "When using `tool_choice`, `tools` must be set.");
	*names = g_ptr_array_new_with_free_func(g_free);
	json_array_foreach(tools, i, tool) {
		const json_t *name = json_object_get(json_object_get(tool, "function"), "name");
		char *literal;

		if (wanted != NULL && strcmp(json_string_value(name), wanted) != 0)
			continue;
		literal = json_dumps(name, JSON_ENCODE_ANY);
		g_ptr_array_add(*names, g_strdup(literal));
		free(literal);
		if (wanted != NULL)
			break;
	}
	if ((*names)->len == 0) {
		g_ptr_array_free(*names, TRUE);
		*names = NULL;
		return sim_fail_set(f, 400, "tool_choice", "Tool '%s' was not found in 'tools'.",
		                    wanted);
	}
	return true;
}

/* Tool calls, reasoning, logprobs and prompt_logprobs (output.h). */
static bool
parse_output(struct sim_call *call, const json_t *doc, struct sim_fail *f)
{
	const json_t *kwargs = json_object_get(doc, "chat_template_kwargs");
	GPtrArray *names = NULL;
	bool thinking = false, logprobs = false;
	int top = -1, prompt_top;

	if (!get_top(doc, "prompt_logprobs", &prompt_top, f))
		return false;
	/* vLLM checks this when it validates the request. */
	if (call->stream && prompt_top > 0)
		return sim_fail_set(f, 400, "prompt_logprobs",
		                    "`prompt_logprobs` are not available when `stream=True`.");
	if (call->chat) {
		if (!get_bool(doc, "logprobs", false, &logprobs, f) ||
		    !get_top(doc, "top_logprobs", &top, f))
			return false;
		if (top > 0 && !logprobs)
			return sim_fail_set(f, 400, "top_logprobs", "When using `top_logprobs`, "
			                    "`logprobs` must be set to true.");
		top = logprobs ? MAX(top, 0) : -1;
		if (kwargs != NULL && !json_is_null(kwargs) && !json_is_object(kwargs))
			return sim_fail_set(f, 400, "chat_template_kwargs",
			                    "'chat_template_kwargs' must be an object.");
		if ((json_is_object(kwargs) &&
		     !get_bool(kwargs, "enable_thinking", false, &thinking, f)) ||
		    !parse_tools(doc, &names, f))
			return false;
	} else if (!get_top(doc, "logprobs", &top, f)) {
		return false;
	}
	sim_output_plan(&call->output, call->max_tokens, thinking, names);
	call->output.top = top;
	call->output.prompt_top = prompt_top;
	if (prompt_top >= 0 && call->prompt_text == NULL) {
		/* A prompt of token ids: kept as given. */
		const json_t *prompt = json_object_get(doc, "prompt");
		json_t *id;
		size_t i;

		if (json_array_size(prompt) == 1 && json_is_array(json_array_get(prompt, 0)))
			prompt = json_array_get(prompt, 0);
		call->prompt_ids = g_array_new(FALSE, FALSE, sizeof(guint32));
		json_array_foreach(prompt, i, id) {
			guint32 v = (guint32)json_integer_value(id);

			g_array_append_val(call->prompt_ids, v);
		}
	}
	if (prompt_top < 0) {
		g_free(call->prompt_text);
		call->prompt_text = NULL;
	} else if (call->prompt_text != NULL) {
		call->prompt_bos = sim_tokenize_count(call->prompt_text, strlen(call->prompt_text)) <
		                   call->prompt_tokens;
	}
	return true;
}

bool
sim_parse_generation(struct sim_call *call, const json_t *doc, struct sim_fail *f)
{
	const json_t *options;
	bool max_given = false, n_given;
	uint32_t n = 1;
	uint32_t limit = call->node->fleet->model.max_model_len;

	if (!sim_check_model(call->node, doc, f) ||
	    !get_bool(doc, "stream", false, &call->stream, f) ||
	    !get_count(doc, "n", &n_given, &n, f))
		return false;
	if (n != 1)
		return sim_fail_set(f, 400, "n", "narwhal-sim generates one choice per request (n=1).");
	options = json_object_get(doc, "stream_options");
	if (options != NULL && !json_is_null(options)) {
		if (!json_is_object(options))
			return sim_fail_set(f, 400, "stream_options",
			                    "'stream_options' must be an object.");
		if (!call->stream)
			return sim_fail_set(f, 400, "stream_options",
			                    "'stream_options' needs 'stream': true.");
		if (!get_bool(options, "include_usage", false, &call->include_usage, f) ||
		    !get_bool(options, "continuous_usage_stats", false, &call->continuous_usage, f))
			return false;
	}
	if (!sim_parse_prompt(doc, call->chat, NULL, &call->prompt_tokens, &call->text_seed,
	                      &call->prompt_text, f))
		return false;
	if (call->prompt_tokens == 0)
		return sim_fail_set(f, 400, call->chat ? "messages" : "prompt", "The prompt is empty.");
	if (call->chat && !get_count(doc, "max_completion_tokens", &max_given, &call->max_tokens, f))
		return false;
	if (!max_given && !get_count(doc, "max_tokens", &max_given, &call->max_tokens, f))
		return false;
	if (!check_context(call, max_given, f))
		return false;
	if (!max_given) {
		/* vLLM's defaults: 16 for completions, the rest of the context for chat. */
		call->max_tokens = limit - call->prompt_tokens;
		if (!call->chat)
			call->max_tokens = MIN(call->max_tokens, 16u);
	}
	return parse_output(call, doc, f) && parse_kv_params(call, doc, f);
}

json_t *
sim_parse_body(struct sim_call *call, struct sim_fail *f)
{
	json_error_t je;
	json_t *doc;

	if (call->body_too_large) {
		sim_fail_set(f, 413, NULL, "The request body is larger than %u bytes.",
		             SIM_MAX_BODY_BYTES);
		return NULL;
	}
	doc = json_loadb(call->body->str, call->body->len, 0, &je);
	if (doc == NULL) {
		sim_fail_set(f, 400, NULL,
		             "The request body is not valid JSON: %s (line %d, column %d).",
		             je.text, je.line, je.column);
		return NULL;
	}
	if (!json_is_object(doc)) {
		json_decref(doc);
		sim_fail_set(f, 400, NULL, "The request body must be a JSON object.");
		return NULL;
	}
	return doc;
}

