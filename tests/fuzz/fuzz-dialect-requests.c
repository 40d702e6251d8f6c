/*
 * libFuzzer target for the dialects' builders fed hostile client bodies:
 * build_tokenize, build_aggregate and a pair's build_prefill and
 * build_decode. The first byte picks the dialect (dialects.h); the second
 * the builder, the route and the engines; the rest is the client's body,
 * JSON of any shape (the host validates bodies first, but a dialect must
 * not rely on it). Beyond "no crash, no leak":
 * - every answer is one the ABI allows (plugin-abi.h), -EALREADY only from
 *   build_tokenize and only for a prompt of token IDs;
 * - the client body is never changed;
 * - a built call is a GET or a POST to an absolute path, with either the
 *   client's body (NARWHAL_CALL_CLIENT_BODY, no body of its own) or an
 *   object;
 * - a router key (router_keys) reaches an engine only with the dialect's
 *   own value: vLLM's prefill parameters or the handoff it was given,
 *   SGLang's bootstrap address and a room in [0, 2^63) that both legs of a
 *   pair share; never on a tokenise or aggregate call;
 * - vLLM's prefill leg does not stream and asks for one token.
 */
#include "dialects.h"
#include "../../plugins/dialect/openai.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum op { OP_TOKENIZE, OP_AGGREGATE, OP_PAIR, OP_BAD_HANDOFF, OP_COUNT };

static const char *
route_path(narwhal_route route)
{
	return route == NARWHAL_ROUTE_COMPLETIONS ? "/v1/completions" : "/v1/chat/completions";
}

static bool
is_router_key(const struct fuzz_dialect *d, const char *key)
{
	const char *const *keys = d->ops->router_keys ? d->ops->router_keys(d->instance) : NULL;

	for (size_t i = 0; keys != NULL && keys[i] != NULL; i++) {
		if (strcmp(keys[i], key) == 0)
			return true;
	}
	return false;
}

static bool
has_router_key(const struct fuzz_dialect *d, const json_t *body)
{
	const char *key;
	json_t *v;

	json_object_foreach((json_t *)body, key, v) {
		(void)v;
		if (is_router_key(d, key))
			return true;
	}
	return false;
}

/* The body the call sends; NULL for a bodiless call. Aborts on a call
 * the ABI does not allow. */
static const json_t *
sent_body(const struct narwhal_http_call *call, const json_t *client)
{
	if (call->method == NULL || (strcmp(call->method, "POST") != 0 &&
	                             strcmp(call->method, "GET") != 0))
		abort();
	if (call->path == NULL || call->path[0] != '/')
		abort();
	if ((call->flags & ~NARWHAL_CALL_CLIENT_BODY) != 0)
		abort();
	if (call->flags & NARWHAL_CALL_CLIENT_BODY) {
		if (call->body != NULL)
			abort();
		return client;
	}
	if (call->body != NULL && !json_is_object(call->body))
		abort();
	return call->body;
}

static struct narwhal_http_call
fresh_call(void)
{
	return (struct narwhal_http_call){ .struct_size = sizeof(struct narwhal_http_call) };
}

static void
check_rc(int rc, bool tokenize)
{
	if (rc != 0 && rc != -EINVAL && rc != -ENOTSUP && rc != -ENOMEM &&
	    !(tokenize && rc == -EALREADY))
		abort();
}

static void
tokenize(const struct fuzz_dialect *d, const struct narwhal_dialect_target *t)
{
	struct narwhal_http_call call = fresh_call();
	const json_t *body;
	int rc;

	if (d->ops->build_tokenize == NULL)
		return;
	rc = d->ops->build_tokenize(d->instance, t, &call);
	check_rc(rc, true);
	if (rc == -EALREADY && (t->route != NARWHAL_ROUTE_COMPLETIONS ||
	                        !oai_is_token_ids(json_object_get(t->client_body, "prompt"))))
		abort();
	if (rc != 0) {
		if (call.body != NULL)
			abort(); /* nothing for the host to free on a failure */
		return;
	}
	body = sent_body(&call, t->client_body);
	if (strcmp(call.method, "POST") != 0 || body == NULL || has_router_key(d, body))
		abort();
	json_decref(call.body);
}

static void
aggregate(const struct fuzz_dialect *d, const struct narwhal_dialect_target *t)
{
	struct narwhal_http_call call = fresh_call();
	const json_t *body;
	int rc = d->ops->build_aggregate(d->instance, t, &call);

	check_rc(rc, false);
	if (rc != 0) {
		if (call.body != NULL)
			abort();
		return;
	}
	body = sent_body(&call, t->client_body);
	if (strcmp(call.method, "POST") != 0 || strcmp(call.path, route_path(t->route)) != 0 ||
	    body == NULL || has_router_key(d, body))
		abort();
	json_decref(call.body);
}

/* What vLLM's prefill leg sends in kv_transfer_params. */
static bool
is_vllm_prefill_params(const json_t *v)
{
	json_t *want = json_pack("{s:b, s:b, s:n, s:n, s:n, s:n}", "do_remote_decode", 1,
	                         "do_remote_prefill", 0, "remote_engine_id", "remote_block_ids",
	                         "remote_host", "remote_port");
	bool same = json_equal(v, want);

	json_decref(want);
	return same;
}

/* A leg's body: its router keys are the dialect's own. */
static void
check_leg(const struct fuzz_dialect *d, const json_t *body, bool prefill, const json_t *handoff)
{
	const char *key;
	json_t *v;

	json_object_foreach((json_t *)body, key, v) {
		if (!is_router_key(d, key))
			continue;
		if (strcmp(key, "kv_transfer_params") == 0) {
			if (prefill ? !is_vllm_prefill_params(v) : !json_equal(v, handoff))
				abort();
		} else if (strcmp(key, "bootstrap_room") == 0) {
			if (!json_is_integer(v) || json_integer_value(v) < 0)
				abort();
		} else if (strcmp(key, "bootstrap_port") == 0) {
			if (!json_is_integer(v) || json_integer_value(v) < 1 ||
			    json_integer_value(v) > 65535)
				abort();
		} else if (strcmp(key, "bootstrap_host") == 0) {
			if (!json_is_string(v) || json_string_length(v) == 0 ||
			    strpbrk(json_string_value(v), "[]/@ ") != NULL)
				abort();
		} else {
			abort(); /* a client's key the dialect let through */
		}
	}
	/* A concurrent pair's legs carry the room that pairs them. */
	if (strcmp(d->name, "sglang") == 0 && json_object_get(body, "bootstrap_room") == NULL)
		abort();
	if (strcmp(d->name, "vllm") == 0 && prefill &&
	    (!json_is_false(json_object_get(body, "stream")) ||
	     json_integer_value(json_object_get(body, "max_tokens")) != 1))
		abort();
}

static void
pair(const struct fuzz_dialect *d, struct narwhal_dialect_target *t, const json_t *handoff)
{
	struct narwhal_http_call p = fresh_call(), dc = fresh_call();
	bool concurrent = strcmp(d->name, "sglang") == 0;
	const struct narwhal_engine_ref *decode = t->decode;
	int rc_p, rc_d;

	if (!d->handoff)
		return;
	/* A sequential pair's prefill leg is built before the decode engine
	 * is placed. */
	t->engine = t->prefill;
	if (!concurrent)
		t->decode = NULL;
	rc_p = d->ops->build_prefill(d->instance, t, &p);
	check_rc(rc_p, false);
	t->engine = t->decode = decode;
	rc_d = d->ops->build_decode(d->instance, t, concurrent ? NULL : handoff, &dc);
	check_rc(rc_d, false);
	if (rc_p == 0) {
		const json_t *body = sent_body(&p, t->client_body);

		if (strcmp(p.method, "POST") != 0 || strcmp(p.path, route_path(t->route)) != 0 ||
		    body == NULL)
			abort();
		check_leg(d, body, true, NULL);
	}
	if (rc_d == 0) {
		const json_t *body = sent_body(&dc, t->client_body);

		if (strcmp(dc.method, "POST") != 0 || strcmp(dc.path, route_path(t->route)) != 0 ||
		    body == NULL)
			abort();
		check_leg(d, body, false, json_is_null(handoff) ? NULL : handoff);
	}
	/* Both legs of a concurrent pair carry one body: the same room. */
	if (concurrent && (rc_p == 0) != (rc_d == 0))
		abort();
	if (concurrent && rc_p == 0 && !json_equal(p.body, dc.body))
		abort();
	json_decref(p.body);
	json_decref(dc.body);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const struct fuzz_dialect *d;
	struct narwhal_dialect_target t = { .struct_size = sizeof t, .request = 1,
	                                    .request_id = "fuzz" };
	json_t *client, *pristine, *handoff;
	unsigned sel;

	if (size < 2)
		return 0;
	d = fuzz_dialect_pick(data[0]);
	sel = data[1];
	client = json_loadb((const char *)data + 2, size - 2, 0, NULL);
	if (client == NULL)
		return 0;
	pristine = json_deep_copy(client);
	t.client_body = client;
	/* The selector's bits: the route (0), a handoff or none (1), the
	 * builder (2, 3), the engine (4, 5), the pair (6, 7). */
	t.route = sel & 1 ? NARWHAL_ROUTE_CHAT_COMPLETIONS : NARWHAL_ROUTE_COMPLETIONS;
	t.engine = &fuzz_engines[(sel >> 4) % FUZZ_ENGINES];
	/* The prefill engine of a pair is the one chosen, its decode engine
	 * the next. */
	t.prefill = t.engine;
	t.decode = &fuzz_engines[((sel >> 4) + 1) % FUZZ_ENGINES];
	t.pair_id = ((uint64_t)(sel >> 6) + 1) << 2;
	/* A handoff as vLLM's prefill engine answers it, or none. */
	handoff = sel & 2 ? json_pack("{s:b, s:[[i]], s:s, s:s, s:i}", "do_remote_prefill", 1,
	                              "remote_block_ids", 7, "remote_engine_id", "e",
	                              "remote_host", "10.0.0.7", "remote_port", 5600)
	                  : json_null();
	switch ((sel >> 2) % OP_COUNT) {
	case OP_TOKENIZE:
		t.prefill = t.decode = NULL;
		tokenize(d, &t);
		break;
	case OP_AGGREGATE:
		t.prefill = t.decode = NULL;
		aggregate(d, &t);
		break;
	case OP_PAIR:
		pair(d, &t, handoff);
		break;
	default:
		/* A handoff that is neither an object nor null. */
		if (d->handoff) {
			struct narwhal_http_call call = fresh_call();
			json_t *bad = json_integer(3);

			t.engine = t.decode;
			if (d->ops->build_decode(d->instance, &t, bad, &call) != -EINVAL)
				abort();
			json_decref(bad);
		}
		break;
	}
	if (!json_equal(client, pristine))
		abort(); /* the client body must come back untouched */
	json_decref(handoff);
	json_decref(pristine);
	json_decref(client);
	return 0;
}
