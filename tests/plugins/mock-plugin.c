/*
 * Mock plugins for the loader tests: one source, built once per case with a
 * -D flag (tests/plugins/Makefile.inc). With no flag it is a well-behaved
 * admission plugin named "mock" that exercises every host service.
 *
 *   MOCK_BAD_MAGIC    descriptor magic is wrong
 *   MOCK_MAJOR        built for the next ABI major
 *   MOCK_MINOR        built for a newer minor than the host's
 *   MOCK_SHORT_DESC   descriptor struct_size covers only the guard fields
 *   MOCK_NULL_DESC    the entry returns NULL
 *   MOCK_NO_ENTRY     exports something, but not narwhal_plugin_entry
 *   MOCK_NO_NAME      the descriptor's name is empty
 *   MOCK_NULL_OPS     the descriptor's ops pointer is NULL
 *   MOCK_NULL_SLOT    decide is NULL
 *   MOCK_WRONG_KIND   a (working) controller named "mock"
 *   MOCK_CREATE_FAIL  create always refuses
 *   MOCK_OLD_OPS      ops struct_size ends at decide: finished must read NULL
 *   MOCK_TINY_OPS     ops struct_size ends before decide
 *   MOCK_LONG_OPS     ops struct_size larger than the struct (a lie, or a
 *                     header newer than the version the plugin gives)
 *   MOCK_LONG_DESC    descriptor struct_size larger than the struct
 *   MOCK_DIALECT      a working minimal dialect; of the optional slots it
 *                     has only the engine-metrics pair (ABI 2.1) and
 *                     parse_sse_json (2.4), and it counts its parse_sse and
 *                     parse_sse_json calls (sse_bytes_total, sse_json_total)
 *   MOCK_HALF_PAIR    that dialect with build_tokenize but no parse_tokenize
 *   MOCK_HALF_METRICS that dialect with parse_metrics but no build_metrics
 *   MOCK_ABI_2_0      that dialect built for ABI 2.0: minor 0, its ops
 *                     struct_size ending at whole_body_only (the metrics
 *                     pair and parse_sse_json, present in memory, must read
 *                     NULL)
 *   MOCK_WRONG_OPS    an admission descriptor given placement ops (must not
 *                     compile: tests/plugins/Makefile.inc checks that)
 */
#include <narwhal/plugin-abi.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MOCK_MAGIC 0x4d4f434bu /* "MOCK" */

#define MOCK_END_OF(type, member) (offsetof(type, member) + sizeof(((type *)0)->member))

struct mock {
	unsigned magic;
	const struct narwhal_host *host;
	char label[32];
	uint32_t caps; /* the mock dialect's capabilities */
	int decide_rc; /* what the mock admission's decide returns when not 0 */
	char metrics_path[64]; /* what the mock dialect's build_metrics asks for */
	int metrics_rc; /* what its parse_metrics returns instead of reading, when not 0 */
};

static struct mock *
mock_cast(void *instance)
{
	struct mock *m = instance;

	if (m == NULL || m->magic != MOCK_MAGIC)
		abort();
	return m;
}

static void
mock_log(const struct mock *m, narwhal_log_level level, const char *what)
{
	char line[96];

	snprintf(line, sizeof line, "mock %s label=%s", what, m->label);
	m->host->log(m->host->host_ctx, level, line);
}

/* Config: {"label": string, "fail": string, "fail_unterminated": true,
 * "fail_silent": negative errno, "caps": dialect capabilities, "decide_rc":
 * what admission decide() returns, "metrics_path": the dialect's metrics
 * path, "metrics_rc": what the dialect's parse_metrics returns instead of
 * reading, "admission_margin": ignored}; anything else is refused by name. */
static int
mock_create(const struct narwhal_host *host, const json_t *config, void **instance,
            char *err, size_t err_len)
{
	struct mock *m;
	const char *label = "none";
	uint32_t caps = NARWHAL_DIALECT_HANDOFF_SEQUENTIAL;
	int decide_rc = 0;
	const char *metrics_path = "/metrics";
	int metrics_rc = 0;
	const char *key;
	json_t *value;

#ifdef MOCK_CREATE_FAIL
	(void)host;
	(void)config;
	(void)instance;
	snprintf(err, err_len, "mock refuses every configuration (option \"always\")");
	return -EINVAL;
#endif
	if (config != NULL && !json_is_object(config)) {
		snprintf(err, err_len, "config must be an object");
		return -EINVAL;
	}
	json_object_foreach((json_t *)config, key, value) {
		if (strcmp(key, "label") == 0 && json_is_string(value)) {
			label = json_string_value(value);
		} else if (strcmp(key, "caps") == 0 && json_is_integer(value)) {
			caps = (uint32_t)json_integer_value(value);
		} else if (strcmp(key, "decide_rc") == 0 && json_is_integer(value)) {
			decide_rc = (int)json_integer_value(value);
		} else if (strcmp(key, "metrics_path") == 0 && json_is_string(value) &&
		           json_string_length(value) < 64) {
			/* Any text: a path without its '/' is a builder fault the
			 * host must catch. */
			metrics_path = json_string_value(value);
		} else if (strcmp(key, "metrics_rc") == 0 && json_is_integer(value)) {
			metrics_rc = (int)json_integer_value(value);
		} else if (strcmp(key, "admission_margin") == 0 && json_is_number(value)) {
			/* the daemon hands every admission plugin this one */
		} else if (strcmp(key, "fail") == 0 && json_is_string(value)) {
			snprintf(err, err_len, "%s", json_string_value(value));
			return -EINVAL;
		} else if (strcmp(key, "fail_unterminated") == 0) {
			memset(err, 'x', err_len); /* no terminator on purpose */
			return -EINVAL;
		} else if (strcmp(key, "fail_silent") == 0 && json_is_integer(value)) {
			return (int)json_integer_value(value);
		} else {
			snprintf(err, err_len, "unknown key \"%s\"", key);
			return -EINVAL;
		}
	}
	m = calloc(1, sizeof *m);
	if (m == NULL)
		return -ENOMEM;
	m->magic = MOCK_MAGIC;
	m->host = host;
	m->caps = caps;
	m->decide_rc = decide_rc;
	m->metrics_rc = metrics_rc;
	snprintf(m->metrics_path, sizeof m->metrics_path, "%s", metrics_path);
	snprintf(m->label, sizeof m->label, "%s", label);
	host->counter_add(host->host_ctx, "mock_instances_total", 1.0);
	host->gauge_set(host->host_ctx, "mock_live", 1.0);
	mock_log(m, NARWHAL_LOG_INFO, "create");
	*instance = m;
	return 0;
}

static void
mock_destroy(void *instance)
{
	struct mock *m = mock_cast(instance);

	m->host->gauge_set(m->host->host_ctx, "mock_live", 0.0);
	mock_log(m, NARWHAL_LOG_INFO, "destroy");
	m->magic = 0;
	free(m);
}

#if defined(MOCK_WRONG_KIND)

static int
mock_propose(void *instance, const struct narwhal_controller_input *in,
             struct narwhal_controller_proposal *out)
{
	mock_cast(instance);
	out->prefill = in->live_prefill;
	out->decode = in->live_decode;
	out->worst_slo_ratio = NAN;
	out->reason = "mock";
	return 0;
}

static const struct narwhal_controller_ops mock_ops = {
	.struct_size = sizeof(struct narwhal_controller_ops),
	.create = mock_create,
	.destroy = mock_destroy,
	.propose = mock_propose,
};
#define MOCK_KIND CONTROLLER

#elif defined(MOCK_DIALECT) || defined(MOCK_HALF_PAIR) || defined(MOCK_HALF_METRICS) || \
	defined(MOCK_ABI_2_0)

/* A minimal working dialect for OpenAI-compatible engines: legs are the
 * client's body (the prefill one cut to one token), no handoff, no
 * tokenise, no model discovery. Config "caps" (an integer) replaces its
 * capabilities, e.g. 0 for an aggregate-only engine. Its engine metrics are
 * a tiny text format, below. */
static uint32_t
mock_capabilities(void *instance, const struct narwhal_engine_ref *engine)
{
	struct mock *m = mock_cast(instance);

	(void)engine;
	return m->caps;
}

/* A leg built for a pair says so on the host's log, for the tests. */
static void
mock_log_pair(const struct mock *m, const char *leg, const struct narwhal_dialect_target *t)
{
	char line[160];

	if (t->prefill == NULL || t->decode == NULL)
		return;
	snprintf(line, sizeof line, "mock %s leg pair=%llu prefill=%s decode=%s", leg,
	         (unsigned long long)t->pair_id, t->prefill->id, t->decode->id);
	m->host->log(m->host->host_ctx, NARWHAL_LOG_INFO, line);
}

static int
mock_build(void *instance, const struct narwhal_dialect_target *target,
           struct narwhal_http_call *out)
{
	mock_cast(instance);
	out->method = "POST";
	out->path = target->route == NARWHAL_ROUTE_CHAT_COMPLETIONS ? "/v1/chat/completions"
	                                                            : "/v1/completions";
	out->body = NULL;
	out->flags = NARWHAL_CALL_CLIENT_BODY;
	return 0;
}

static int
mock_build_prefill(void *instance, const struct narwhal_dialect_target *target,
                   struct narwhal_http_call *out)
{
	int rc = mock_build(instance, target, out);

	mock_log_pair(mock_cast(instance), "prefill", target);
	out->flags = 0;
	out->body = json_copy((json_t *)target->client_body);
	if (out->body == NULL)
		return -ENOMEM;
	json_object_set_new(out->body, "max_tokens", json_integer(1));
	json_object_set_new(out->body, "stream", json_false());
	json_object_del(out->body, "stream_options");
	return rc;
}

static int
mock_build_decode(void *instance, const struct narwhal_dialect_target *target,
                  const json_t *handoff, struct narwhal_http_call *out)
{
	(void)handoff;
	mock_log_pair(mock_cast(instance), "decode", target);
	return mock_build(instance, target, out);
}

static int
mock_build_health(void *instance, const struct narwhal_engine_ref *engine,
                  struct narwhal_http_call *out)
{
	mock_cast(instance);
	(void)engine;
	out->method = "GET";
	out->path = "/health";
	out->body = NULL;
	return 0;
}

static int
mock_parse_prefill(void *instance, const json_t *response, json_t **handoff)
{
	mock_cast(instance);
	(void)response;
	*handoff = NULL;
	return 0;
}

/* An error event or a token event (one token). */
static void
mock_event(bool error, struct narwhal_sse_event *out)
{
	if (error) {
		out->kind = NARWHAL_SSE_ERROR;
		out->error_class = NARWHAL_ERROR_PERMANENT;
	} else {
		out->kind = NARWHAL_SSE_TOKENS;
		out->tokens = 1;
	}
}

static int
mock_parse_sse(void *instance, const char *data, size_t len, struct narwhal_sse_event *out)
{
	struct mock *m = mock_cast(instance);

	/* What the host read itself and what it left to us (ABI 2.4). */
	m->host->counter_add(m->host->host_ctx, "sse_bytes_total", 1.0);
	if (len == 6 && memcmp(data, "[DONE]", 6) == 0)
		out->kind = NARWHAL_SSE_DONE;
	else
		mock_event(len >= 9 && memcmp(data, "{\"error\"", 8) == 0, out);
	return 0;
}

/* The same reading from the tree the host made (ABI 2.4): an object with
 * an "error" key is an error, any other a token event. */
static int
mock_parse_sse_json(void *instance, const json_t *doc, const char *data, size_t len,
                    struct narwhal_sse_event *out)
{
	struct mock *m = mock_cast(instance);

	(void)data;
	(void)len;
	m->host->counter_add(m->host->host_ctx, "sse_json_total", 1.0);
	mock_event(json_object_get(doc, "error") != NULL, out);
	return 0;
}

/* The host's presets (the status's class) stand; no message is read. */
static int
mock_parse_error(void *instance, int32_t http_status, const char *body, size_t len,
                 struct narwhal_engine_error *out)
{
	mock_cast(instance);
	(void)http_status;
	(void)body;
	(void)len;
	(void)out;
	return -EPROTO;
}

#ifndef MOCK_HALF_METRICS
/* GET metrics_path (config; "/metrics" by default). */
static int
mock_build_metrics(void *instance, const struct narwhal_engine_ref *engine,
                   struct narwhal_http_call *out)
{
	struct mock *m = mock_cast(instance);

	(void)engine;
	out->method = "GET";
	out->path = m->metrics_path;
	out->body = NULL;
	return 0;
}
#endif

/* Whether line [p, end) is "key value" for this key; the value is copied
 * into buf (terminated) when it is. */
static bool
mock_metric_line(const char *p, const char *end, const char *key, char *buf, size_t size)
{
	size_t k = strlen(key), n;

	if ((size_t)(end - p) <= k || memcmp(p, key, k) != 0 || p[k] != ' ')
		return false;
	p += k + 1;
	n = (size_t)(end - p);
	if (n >= size)
		n = size - 1;
	memcpy(buf, p, n);
	buf[n] = '\0';
	return true;
}

/*
 * Lines "key value": "running" and "waiting" (non-negative integers),
 * "kv_usage" (0 to 1) and "start_time_s" or Prometheus's
 * "process_start_time_seconds" (positive). Every other line is skipped, so
 * a vLLM or narwhal-sim scrape reads as its start time alone, and a body
 * without any of these is an engine that reports nothing (0, presets kept).
 * A known key with a bad value is -EPROTO; config "metrics_rc" replaces the
 * answer.
 */
static int
mock_parse_metrics(void *instance, const char *body, size_t len,
                   struct narwhal_engine_metrics *out)
{
	struct mock *m = mock_cast(instance);
	struct narwhal_engine_metrics got = *out;
	const char *p = body, *end = body + len;

	if (m->metrics_rc != 0)
		return m->metrics_rc;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *eol = nl != NULL ? nl : end;
		char buf[64], *rest;
		long long count;
		double v;

		if (mock_metric_line(p, eol, "running", buf, sizeof buf) ||
		    mock_metric_line(p, eol, "waiting", buf, sizeof buf)) {
			count = strtoll(buf, &rest, 10);
			if (rest == buf || *rest != '\0' || count < 0)
				return -EPROTO;
			if (p[0] == 'r')
				got.running = count;
			else
				got.waiting = count;
		} else if (mock_metric_line(p, eol, "kv_usage", buf, sizeof buf)) {
			v = strtod(buf, &rest);
			if (rest == buf || *rest != '\0' || !(v >= 0 && v <= 1))
				return -EPROTO;
			got.kv_usage = v;
		} else if (mock_metric_line(p, eol, "start_time_s", buf, sizeof buf) ||
		           mock_metric_line(p, eol, "process_start_time_seconds", buf, sizeof buf)) {
			v = strtod(buf, &rest);
			if (rest == buf || *rest != '\0' || !(v > 0 && isfinite(v)))
				return -EPROTO;
			got.start_time_s = v;
		}
		p = eol + 1;
	}
	*out = got;
	return 0;
}

#ifdef MOCK_HALF_PAIR
static int
mock_build_tokenize(void *instance, const struct narwhal_dialect_target *target,
                    struct narwhal_http_call *out)
{
	(void)target;
	(void)out;
	mock_cast(instance);
	return -ENOTSUP;
}
#endif

static const struct narwhal_dialect_ops mock_ops = {
#ifdef MOCK_ABI_2_0
	/* As a plugin built against the 2.0 header sees the table; the
	 * metrics pair below is present in memory all the same. */
	.struct_size = MOCK_END_OF(struct narwhal_dialect_ops, whole_body_only),
#else
	.struct_size = sizeof(struct narwhal_dialect_ops),
#endif
	.create = mock_create,
	.destroy = mock_destroy,
	.capabilities = mock_capabilities,
#ifdef MOCK_HALF_PAIR
	.build_tokenize = mock_build_tokenize, /* without parse_tokenize */
#else
	.build_tokenize = NULL, /* optional */
#endif
	.parse_tokenize = NULL,
	.build_prefill = mock_build_prefill,
	.build_decode = mock_build_decode,
	.parse_prefill = mock_parse_prefill,
	.build_aggregate = mock_build,
	.build_health = mock_build_health,
	.parse_sse = mock_parse_sse,
	.parse_error = mock_parse_error,
#ifdef MOCK_HALF_METRICS
	.build_metrics = NULL, /* with parse_metrics alone */
#else
	.build_metrics = mock_build_metrics,
#endif
	.parse_metrics = mock_parse_metrics,
	.parse_sse_json = mock_parse_sse_json,
};
#define MOCK_KIND DIALECT

#else /* admission */

#ifndef MOCK_NULL_SLOT
/* Admits prompts up to 1000 tokens, priced with the prefill estimator of
 * engine 0 plus the time already spent since arrival. */
static int
mock_decide(void *instance, const struct narwhal_admission_request *req,
            struct narwhal_admission_decision *out)
{
	struct mock *m = mock_cast(instance);
	const struct narwhal_host *h = m->host;
	double prefill;

	h->counter_add(h->host_ctx, "mock_decisions_total", 1.0);
	if (m->decide_rc != 0)
		return m->decide_rc; /* a policy that fails: the host must refuse */
	if (req->prompt_tokens > 1000) {
		out->verdict = NARWHAL_REFUSE_TOO_LONG;
		out->reason = "too_long";
		out->projected_ttft_s = NAN;
		return 0;
	}
	out->verdict = NARWHAL_ADMIT;
	out->reason = "mock";
	out->retry_after_s = 0.0;
	if (h->prefill_seconds(h->host_ctx, 0, req->prompt_tokens, &prefill) ==
	    NARWHAL_ESTIMATE_OK)
		out->projected_ttft_s = prefill + (double)(h->now_ns(h->host_ctx) -
		                                           req->arrival_ns) / 1e9;
	else
		out->projected_ttft_s = NAN;
	return 0;
}
#endif

static void
mock_finished(void *instance, uint64_t request, bool ok)
{
	struct mock *m = mock_cast(instance);

	(void)request;
	m->host->counter_add(m->host->host_ctx, ok ? "mock_ok_total" : "mock_failed_total", 1.0);
}

#if defined(MOCK_OLD_OPS)
#define MOCK_OPS_SIZE MOCK_END_OF(struct narwhal_admission_ops, decide)
#elif defined(MOCK_TINY_OPS)
#define MOCK_OPS_SIZE MOCK_END_OF(struct narwhal_admission_ops, destroy)
#elif defined(MOCK_LONG_OPS)
#define MOCK_OPS_SIZE (sizeof(struct narwhal_admission_ops) + 64)
#else
#define MOCK_OPS_SIZE sizeof(struct narwhal_admission_ops)
#endif

static const struct narwhal_admission_ops mock_ops = {
	.struct_size = MOCK_OPS_SIZE,
	.create = mock_create,
	.destroy = mock_destroy,
#ifdef MOCK_NULL_SLOT
	.decide = NULL,
#else
	.decide = mock_decide,
#endif
	/* Present in memory even when struct_size says otherwise. */
	.finished = mock_finished,
};
#define MOCK_KIND ADMISSION

#endif

#if defined(MOCK_BAD_MAGIC) || defined(MOCK_MAJOR) || defined(MOCK_MINOR) || \
	defined(MOCK_SHORT_DESC) || defined(MOCK_NULL_DESC) || defined(MOCK_NO_ENTRY) || \
	defined(MOCK_NO_NAME) || defined(MOCK_NULL_OPS) || defined(MOCK_ABI_2_0) || \
	defined(MOCK_LONG_DESC)

/* A descriptor written by hand, as a broken or foreign build would. */
#define MOCK_GLUE(a, b) a##b
#define MOCK_KIND_VALUE(k) MOCK_GLUE(NARWHAL_KIND_, k)

static const struct narwhal_plugin_descriptor mock_desc = {
#ifdef MOCK_BAD_MAGIC
	.magic = 0xdeadbeefu,
#else
	.magic = NARWHAL_PLUGIN_MAGIC,
#endif
#ifdef MOCK_MAJOR
	.abi_major = NARWHAL_ABI_MAJOR + 1,
	.abi_minor = 0,
#elif defined(MOCK_MINOR)
	.abi_major = NARWHAL_ABI_MAJOR,
	.abi_minor = NARWHAL_ABI_MINOR + 1,
#elif defined(MOCK_ABI_2_0)
	.abi_major = 2,
	.abi_minor = 0,
#else
	.abi_major = NARWHAL_ABI_MAJOR,
	.abi_minor = NARWHAL_ABI_MINOR,
#endif
#ifdef MOCK_SHORT_DESC
	.struct_size = offsetof(struct narwhal_plugin_descriptor, kind),
#elif defined(MOCK_LONG_DESC)
	.struct_size = sizeof(struct narwhal_plugin_descriptor) + 8,
#else
	.struct_size = sizeof(struct narwhal_plugin_descriptor),
#endif
	.kind = MOCK_KIND_VALUE(MOCK_KIND),
#ifdef MOCK_NO_NAME
	.name = "",
#else
	.name = "mock",
#endif
	.version = "0.0.1",
	.build_id = "test",
#ifdef MOCK_NULL_OPS
	.ops = NULL,
#else
	.ops = &mock_ops,
#endif
};

#ifdef MOCK_NO_ENTRY
/* A plausible mistake: the descriptor exported under another name. */
const struct narwhal_plugin_descriptor *narwhal_plugin_descriptor(void);
NARWHAL_PLUGIN_EXPORT const struct narwhal_plugin_descriptor *
narwhal_plugin_descriptor(void)
{
	return &mock_desc;
}
#else
NARWHAL_PLUGIN_EXPORT const struct narwhal_plugin_descriptor *
narwhal_plugin_entry(void)
{
#ifdef MOCK_NULL_OPS
	(void)&mock_ops;
#endif
#ifdef MOCK_NULL_DESC
	(void)&mock_desc;
	return NULL;
#else
	return &mock_desc;
#endif
}
#endif

#else

#define MOCK_DEFINE_(k) NARWHAL_##k##_PLUGIN("mock", "0.0.1", &mock_ops)
#define MOCK_DEFINE(k) MOCK_DEFINE_(k)
MOCK_DEFINE(MOCK_KIND)

#endif
