/* The dialect scenario (conform.h): every slot the plugin has, called with
 * an OpenAI-style client request and typical engine answers. A dialect may
 * refuse an answer it cannot read (-EPROTO), but its calls must be well
 * formed and its results among the values the ABI defines. */
#include "build-config.h"

#include "tools/plugin-kit/conform.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "tools/plugin-kit/guard.h"

#define KNOWN_CAPS (NARWHAL_DIALECT_HANDOFF_SEQUENTIAL | NARWHAL_DIALECT_HANDOFF_CONCURRENT | \
                    NARWHAL_DIALECT_PER_REQUEST_ROLES)

/* A built call: well formed, written to the transcript, its body freed. */
static void
call_seen(const char *slot, int rc, struct narwhal_http_call *c, gboolean required,
          struct kit_seen *seen)
{
	g_autofree char *body = c->body != NULL ? json_dumps(c->body, JSON_COMPACT | JSON_SORT_KEYS)
	                                        : NULL;

	g_string_append_printf(seen->transcript, "%s: %d %u %s %s %s\n", slot, rc, c->flags,
	                       c->method != NULL ? c->method : "(null)",
	                       c->path != NULL ? c->path : "(null)", body != NULL ? body : "-");
	if (rc == 0) {
		if (c->method == NULL || (strcmp(c->method, "GET") != 0 && strcmp(c->method, "POST") != 0))
			kit_problem(seen->range, "%s built a call with method %s, not GET or POST", slot,
			            c->method != NULL ? c->method : "NULL");
		else if (c->path == NULL || c->path[0] != '/')
			kit_problem(seen->range, "%s built a path that does not start with '/'", slot);
		else if ((c->flags & NARWHAL_CALL_CLIENT_BODY) != 0 && c->body != NULL)
			kit_problem(seen->range, "%s set NARWHAL_CALL_CLIENT_BODY and a body too", slot);
	} else if (required) {
		kit_problem(seen->slots, "%s returned %d for a plain client request", slot, rc);
	}
	json_decref(c->body);
	c->body = NULL;
}

static struct narwhal_http_call
fresh_call(void)
{
	return (struct narwhal_http_call){ .struct_size = sizeof(struct narwhal_http_call) };
}

static json_t *
parse(const char *text)
{
	return json_loads(text, 0, NULL);
}

/* An event as the host hands it over: its presets (plugin-abi.h). */
static struct narwhal_sse_event
preset_event(void)
{
	return (struct narwhal_sse_event){
		.struct_size = sizeof(struct narwhal_sse_event),
		.kind = NARWHAL_SSE_OTHER,
		.prompt_tokens = -1,
		.completion_tokens = -1,
	};
}

/* parse_sse_json (ABI 2.4) must read a payload the host has read as JSON
 * as parse_sse reads its bytes: the host calls one or the other. */
static void
sse_json(const struct narwhal_dialect_ops *ops, void *inst, const char *data, int rc,
         const struct narwhal_sse_event *want, struct kit_seen *seen)
{
	struct narwhal_sse_event ev = preset_event();
	json_t *doc;
	int rc_json;

	if (ops->parse_sse_json == NULL || (doc = parse(data)) == NULL)
		return;
	KIT_CALL("parse_sse_json", rc_json = ops->parse_sse_json(inst, doc, data, strlen(data), &ev));
	json_decref(doc);
	if ((rc_json == 0) != (rc == 0) ||
	    (rc == 0 && (ev.kind != want->kind || ev.tokens != want->tokens ||
	                 ev.prompt_tokens != want->prompt_tokens ||
	                 ev.completion_tokens != want->completion_tokens ||
	                 (ev.kind == NARWHAL_SSE_ERROR && ev.error_class != want->error_class))))
		kit_problem(seen->range, "parse_sse_json reads %s otherwise than parse_sse (%d kind %u "
		            "tokens %u, against %d kind %u tokens %u)", data, rc_json, ev.kind,
		            ev.tokens, rc, want->kind, want->tokens);
}

static void
sse(const struct narwhal_dialect_ops *ops, void *inst, const char *data, struct kit_seen *seen)
{
	struct narwhal_sse_event ev = preset_event();
	int rc;
	bool sniff = true;

	KIT_CALL("parse_sse", rc = ops->parse_sse(inst, data, strlen(data), &ev));
	if (ops->sniff_sse != NULL)
		KIT_CALL("sniff_sse", sniff = ops->sniff_sse(inst, data, strlen(data)));
	g_string_append_printf(seen->transcript, "parse_sse %s: %d %u %u %" G_GINT64_FORMAT
	                       " %" G_GINT64_FORMAT " %u %d\n", data, rc, ev.kind, ev.tokens,
	                       ev.prompt_tokens, ev.completion_tokens, ev.error_class, sniff);
	if (rc == 0 && (ev.kind < NARWHAL_SSE_TOKENS || ev.kind > NARWHAL_SSE_OTHER))
		kit_problem(seen->range, "parse_sse answered event kind %u for %s", ev.kind, data);
	else if (rc == 0 && ev.kind == NARWHAL_SSE_ERROR &&
	         (ev.error_class < NARWHAL_ERROR_RETRYABLE || ev.error_class > NARWHAL_ERROR_HANDOFF))
		kit_problem(seen->range, "parse_sse classed an error %u", ev.error_class);
	else if (rc == 0 && (ev.kind == NARWHAL_SSE_DONE || ev.kind == NARWHAL_SSE_ERROR) && !sniff)
		kit_problem(seen->range, "sniff_sse said %s cannot matter, but parse_sse reads a "
		            "terminator or an error in it", data);
	else
		sse_json(ops, inst, data, rc, &ev, seen);
}

static void
engine_error(const struct narwhal_dialect_ops *ops, void *inst, int32_t status, const char *body,
             struct kit_seen *seen)
{
	struct narwhal_engine_error e = { .struct_size = sizeof e,
		                          .error_class = NARWHAL_ERROR_PERMANENT };
	int rc;

	KIT_CALL("parse_error", rc = ops->parse_error(inst, status, body, strlen(body), &e));
	g_string_append_printf(seen->transcript, "parse_error %d %s: %d %u %s %s\n", status, body, rc,
	                       e.error_class, e.message, e.param);
	if (rc != 0 && rc != -EPROTO)
		kit_problem(seen->slots, "parse_error returned %d, neither 0 nor -EPROTO", rc);
	else if (e.error_class < NARWHAL_ERROR_RETRYABLE || e.error_class > NARWHAL_ERROR_HANDOFF)
		kit_problem(seen->range, "parse_error classed %d %s as %u", status, body, e.error_class);
	else if (memchr(e.message, '\0', sizeof e.message) == NULL ||
	         memchr(e.param, '\0', sizeof e.param) == NULL)
		kit_problem(seen->range, "parse_error left message or param unterminated");
}

void
kit_scenario_dialect(const struct nw_plugin *p, void *inst, struct kit_world *w,
                     gboolean disturb, struct kit_seen *seen)
{
	static const char *const events[] = {
		"[DONE]",
		"{\"choices\":[{\"index\":0,\"text\":\"hi\"}]}",
		"{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}",
		"{\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2}}",
		"{\"error\":{\"message\":\"overloaded\",\"code\":503}}",
		"not json",
	};
	const struct narwhal_dialect_ops *ops = &p->ops.dialect;
	struct narwhal_engine_ref p0 = { sizeof p0, 0, "p0", "http://127.0.0.1:9" };
	struct narwhal_engine_ref d0 = { sizeof d0, 2, "d0", "http://127.0.0.1:10" };
	json_t *body = parse(disturb ? "{\"model\":\"m\",\"messages\":[{\"role\":\"user\","
	                               "\"content\":\"hello\"}],\"max_tokens\":64,\"stream\":false}"
	                             : "{\"model\":\"m\",\"prompt\":\"hello\",\"max_tokens\":16,"
	                               "\"stream\":true}");
	struct narwhal_dialect_target t = {
		.struct_size = sizeof t,
		.request = 1,
		.request_id = "kit-1",
		.route = disturb ? NARWHAL_ROUTE_CHAT_COMPLETIONS : NARWHAL_ROUTE_COMPLETIONS,
		.client_body = body,
		.engine = &p0,
	};
	struct narwhal_http_call c;
	uint32_t caps;
	int rc;

	(void)w;
	KIT_CALL("capabilities", caps = ops->capabilities(inst, &p0));
	g_string_append_printf(seen->transcript, "capabilities: %u\n", caps);
	if ((caps & ~KNOWN_CAPS) != 0)
		kit_problem(seen->range, "capabilities answered unknown flags 0x%x", caps & ~KNOWN_CAPS);
	if ((caps & (NARWHAL_DIALECT_HANDOFF_SEQUENTIAL | NARWHAL_DIALECT_HANDOFF_CONCURRENT)) != 0 &&
	    ops->build_prefill == NULL)
		kit_problem(seen->slots, "capabilities offers a handoff, but build_prefill is NULL");

	/* An engine launched to hand off only (a handoff, no roles per
	 * request: SGLang in PD mode) may refuse whole requests with -ENOTSUP
	 * (docs/plugins.md, build_aggregate). */
	c = fresh_call();
	KIT_CALL("build_aggregate", rc = ops->build_aggregate(inst, &t, &c));
	call_seen("build_aggregate", rc, &c,
	          !(rc == -ENOTSUP && (caps & NARWHAL_DIALECT_PER_REQUEST_ROLES) == 0 &&
	            (caps & (NARWHAL_DIALECT_HANDOFF_SEQUENTIAL |
	                     NARWHAL_DIALECT_HANDOFF_CONCURRENT)) != 0),
	          seen);
	c = fresh_call();
	KIT_CALL("build_health", rc = ops->build_health(inst, &p0, &c));
	call_seen("build_health", rc, &c, TRUE, seen);

	if (ops->build_tokenize != NULL) {
		json_t *answer = parse("{\"count\":1,\"tokens\":[1],\"max_model_len\":4096}");
		uint64_t tokens = 0;

		c = fresh_call();
		KIT_CALL("build_tokenize", rc = ops->build_tokenize(inst, &t, &c));
		call_seen("build_tokenize", rc, &c, FALSE, seen);
		KIT_CALL("parse_tokenize", rc = ops->parse_tokenize(inst, answer, &tokens));
		g_string_append_printf(seen->transcript, "parse_tokenize: %d %" G_GUINT64_FORMAT "\n",
		                       rc, tokens);
		json_decref(answer);
	}
	if (ops->build_prefill != NULL &&
	    (caps & (NARWHAL_DIALECT_HANDOFF_SEQUENTIAL | NARWHAL_DIALECT_HANDOFF_CONCURRENT)) != 0) {
		gboolean concurrent = (caps & NARWHAL_DIALECT_HANDOFF_SEQUENTIAL) == 0;
		json_t *answer = parse("{\"id\":\"x\",\"choices\":[{\"text\":\"\"}],"
		                       "\"kv_transfer_params\":{\"remote_engine_id\":\"e\"}}");
		json_t *handoff = NULL;

		t.prefill = &p0;
		t.decode = concurrent ? &d0 : NULL;
		t.pair_id = 7;
		c = fresh_call();
		KIT_CALL("build_prefill", rc = ops->build_prefill(inst, &t, &c));
		call_seen("build_prefill", rc, &c, TRUE, seen);
		KIT_CALL("parse_prefill", rc = ops->parse_prefill(inst, answer, &handoff));
		g_string_append_printf(seen->transcript, "parse_prefill: %d %d\n", rc, handoff != NULL);
		t.engine = &d0;
		t.decode = &d0;
		c = fresh_call();
		KIT_CALL("build_decode", rc = ops->build_decode(inst, &t, concurrent ? NULL : handoff,
		                                                &c));
		call_seen("build_decode", rc, &c, TRUE, seen);
		json_decref(handoff);
		json_decref(answer);
		t.engine = &p0;
	}
	for (size_t i = 0; i < G_N_ELEMENTS(events); i++)
		sse(ops, inst, events[i], seen);
	engine_error(ops, inst, 503, "{\"error\":{\"message\":\"busy\",\"code\":503}}", seen);
	engine_error(ops, inst, 400, "{\"object\":\"error\",\"message\":\"bad max_tokens\"}", seen);
	engine_error(ops, inst, 0, "{\"error\":\"stream broke\"}", seen);
	engine_error(ops, inst, 502, "<html>bad gateway</html>", seen);

	if (ops->build_models != NULL) {
		json_t *answer = parse("{\"object\":\"list\",\"data\":[{\"id\":\"m\","
		                       "\"max_model_len\":4096}]}");
		struct narwhal_model_info m = { .struct_size = sizeof m, .max_model_len = -1 };

		c = fresh_call();
		KIT_CALL("build_models", rc = ops->build_models(inst, &p0, &c));
		call_seen("build_models", rc, &c, TRUE, seen);
		KIT_CALL("parse_models", rc = ops->parse_models(inst, answer, &m));
		g_string_append_printf(seen->transcript, "parse_models: %d %.*s %" G_GINT64_FORMAT "\n",
		                       rc, (int)sizeof m.name, m.name, m.max_model_len);
		if (memchr(m.name, '\0', sizeof m.name) == NULL)
			kit_problem(seen->range, "parse_models left the name unterminated");
		json_decref(answer);
	}
	if (ops->router_keys != NULL) {
		const char *const *keys;

		KIT_CALL("router_keys", keys = ops->router_keys(inst));
		for (guint i = 0; keys != NULL && keys[i] != NULL && i < 64; i++)
			g_string_append_printf(seen->transcript, "router_key: %s\n", keys[i]);
	}
	if (ops->whole_body_only != NULL) {
		bool whole;

		KIT_CALL("whole_body_only", whole = ops->whole_body_only(inst, body));
		g_string_append_printf(seen->transcript, "whole_body_only: %d\n", whole);
	}
	if (ops->build_metrics != NULL) {
		static const char text[] = "# TYPE x gauge\nx 1\n";
		struct narwhal_engine_metrics m = { .struct_size = sizeof m, .running = -1,
			                            .waiting = -1, .kv_usage = NAN,
			                            .start_time_s = NAN };

		c = fresh_call();
		KIT_CALL("build_metrics", rc = ops->build_metrics(inst, &p0, &c));
		call_seen("build_metrics", rc, &c, TRUE, seen);
		KIT_CALL("parse_metrics", rc = ops->parse_metrics(inst, text, strlen(text), &m));
		g_string_append_printf(seen->transcript, "parse_metrics: %d %" G_GINT64_FORMAT
		                       " %" G_GINT64_FORMAT " %.17g %.17g\n", rc, m.running, m.waiting,
		                       m.kv_usage, m.start_time_s);
		if (!isnan(m.kv_usage) && !(m.kv_usage >= 0 && m.kv_usage <= 1))
			kit_problem(seen->range, "parse_metrics read a KV usage of %g", m.kv_usage);
	}
	json_decref(body);
}
