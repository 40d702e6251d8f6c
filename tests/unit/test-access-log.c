/*
 * The access log (issue 11, "Access log"; docs/metrics.md, "Access log"):
 * one line per request with every field of the record, in both formats,
 * whatever log.level says; absent values left out; client strings escaped
 * so that the line stays one valid line; nothing when log.access is off.
 */
#include "build-config.h"

#include <math.h>
#include <string.h>

#include <jansson.h>

#include "core/access-log.h"
#include "core/log.h"

static const struct nw_access_record full = {
	.request_id = "req-7",
	.route = "/v1/completions",
	.model = "tiny",
	.stream = true,
	.status = 200,
	.error_code = "engine_timeout",
	.prompt_tokens = 12,
	.output_tokens = 34,
	.queue_s = 0.0015,
	.ttft_s = 0.25,
	.tpot_s = 0.0125,
	.total_s = 1.5,
	.prefill_engine = "p-0",
	.decode_engine = "d-1",
	.attempts = 2,
};

static const struct nw_access_record sparse = {
	.request_id = "req-8",
	.route = "/v1/chat/completions",
	.status = 400,
	.error_code = "invalid_request",
	.prompt_tokens = -1,
	.output_tokens = -1,
	.queue_s = NAN,
	.ttft_s = NAN,
	.tpot_s = NAN,
	.total_s = 0.001,
};

/* Writes r with the log set to format and level (lines written in place:
 * no writer thread here) and returns what came out. */
static char *
capture(nw_log_format format, const char *level, bool enabled,
        const struct nw_access_record *r)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *stream = open_memstream(&buf, &len);

	g_assert_true(nw_log_setup(level, format));
	nw_access_log_setup(enabled);
	nw_log_set_stream(stream);
	nw_access_log(r);
	nw_log_set_stream(NULL);
	fclose(stream);
	return buf;
}

/* Issue 11, access log: id, route, model, status, error code, tokens,
 * TTFT, TPOT, total time, engines and attempts; numbers as JSON numbers;
 * written with log.level at "error". */
static void
test_json_fields(void)
{
	g_autofree char *out = capture(NW_LOG_FORMAT_JSON, "error", true, &full);
	json_t *doc = json_loads(out, 0, NULL);

	g_assert_nonnull(doc);
	g_assert_true(g_str_has_suffix(out, "}\n"));
	g_assert_cmpstr(json_string_value(json_object_get(doc, "event")), ==, "access");
	g_assert_cmpstr(json_string_value(json_object_get(doc, "level")), ==, "info");
	g_assert_cmpstr(json_string_value(json_object_get(doc, "request_id")), ==, "req-7");
	g_assert_cmpstr(json_string_value(json_object_get(doc, "route")), ==, "/v1/completions");
	g_assert_cmpstr(json_string_value(json_object_get(doc, "model")), ==, "tiny");
	g_assert_true(json_is_true(json_object_get(doc, "stream")));
	g_assert_cmpint(json_integer_value(json_object_get(doc, "status")), ==, 200);
	g_assert_cmpstr(json_string_value(json_object_get(doc, "error_code")), ==, "engine_timeout");
	g_assert_cmpint(json_integer_value(json_object_get(doc, "prompt_tokens")), ==, 12);
	g_assert_cmpint(json_integer_value(json_object_get(doc, "output_tokens")), ==, 34);
	g_assert_cmpfloat_with_epsilon(json_real_value(json_object_get(doc, "queue_s")), 0.0015, 1e-9);
	g_assert_cmpfloat_with_epsilon(json_real_value(json_object_get(doc, "ttft_s")), 0.25, 1e-9);
	g_assert_cmpfloat_with_epsilon(json_real_value(json_object_get(doc, "tpot_s")), 0.0125, 1e-9);
	g_assert_cmpfloat_with_epsilon(json_real_value(json_object_get(doc, "total_s")), 1.5, 1e-9);
	g_assert_cmpstr(json_string_value(json_object_get(doc, "prefill_engine")), ==, "p-0");
	g_assert_cmpstr(json_string_value(json_object_get(doc, "decode_engine")), ==, "d-1");
	g_assert_cmpint(json_integer_value(json_object_get(doc, "attempts")), ==, 2);
	/* ts, level, event and the fifteen fields of the record. */
	g_assert_cmpuint(json_object_size(doc), ==, 3 + 15);
	json_decref(doc);
}

/* Issue 11, access log: the same fields as key=value text. */
static void
test_text_fields(void)
{
	g_autofree char *out = capture(NW_LOG_FORMAT_TEXT, "warning", true, &full);

	g_assert_nonnull(strstr(out, " info access request_id=req-7 route=/v1/completions model=tiny"
	                             " stream=true status=200 error_code=engine_timeout"
	                             " prompt_tokens=12 output_tokens=34 queue_s=0.001500"
	                             " ttft_s=0.250000 tpot_s=0.012500 total_s=1.500000"
	                             " prefill_engine=p-0 decode_engine=d-1 attempts=2\n"));
}

/* docs/metrics.md, "Access log": a field without a value is left out. */
static void
test_absent_fields_left_out(void)
{
	g_autofree char *out = capture(NW_LOG_FORMAT_JSON, "info", true, &sparse);
	g_autofree char *text = capture(NW_LOG_FORMAT_TEXT, "info", true, &sparse);
	json_t *doc = json_loads(out, 0, NULL);
	const char *absent[] = { "model", "prompt_tokens", "output_tokens", "queue_s",
	                         "ttft_s", "tpot_s", "prefill_engine", "decode_engine" };

	g_assert_nonnull(doc);
	for (guint i = 0; i < G_N_ELEMENTS(absent); i++)
		g_assert_null(json_object_get(doc, absent[i]));
	g_assert_true(json_is_false(json_object_get(doc, "stream")));
	g_assert_cmpint(json_integer_value(json_object_get(doc, "attempts")), ==, 0);
	g_assert_cmpint(json_integer_value(json_object_get(doc, "status")), ==, 400);
	json_decref(doc);
	g_assert_nonnull(strstr(text, " info access request_id=req-8 route=/v1/chat/completions"
	                              " stream=false status=400 error_code=invalid_request"
	                              " total_s=0.001000 attempts=0\n"));
}

/* Issue 11, access log: a model name from a client may hold quotes,
 * newlines, control bytes and '='; a route may hold bytes that are not
 * UTF-8. The line stays one line, and in JSON one valid object. */
static void
test_client_strings_escaped(void)
{
	static const char model[] = "ti\"ny\n{\"event\":\"x\"}\r\t\x01\x1f\x7f= m";
	struct nw_access_record r = sparse;
	g_autofree char *json = NULL, *text = NULL;
	json_t *doc;

	r.model = model;
	r.route = "/v1/\xff\xfe";
	json = capture(NW_LOG_FORMAT_JSON, "info", true, &r);
	text = capture(NW_LOG_FORMAT_TEXT, "info", true, &r);

	g_assert_cmpuint(strcspn(json, "\n"), ==, strlen(json) - 1);
	g_assert_cmpuint(strcspn(text, "\n"), ==, strlen(text) - 1);
	for (const unsigned char *p = (const unsigned char *)text; p[1] != '\0'; p++)
		g_assert_true(*p >= 0x20 && *p != 0x7f);
	doc = json_loads(json, 0, NULL);
	g_assert_nonnull(doc);
	g_assert_cmpstr(json_string_value(json_object_get(doc, "model")), ==, model);
	g_assert_cmpstr(json_string_value(json_object_get(doc, "route")), ==,
	                "/v1/\xef\xbf\xbd\xef\xbf\xbd");
	g_assert_cmpstr(json_string_value(json_object_get(doc, "event")), ==, "access");
	json_decref(doc);
	/* In text, the model is one quoted value the reader can decode. */
	g_assert_nonnull(strstr(text, " model=\"ti\\\"ny\\n{\\\"event\\\":\\\"x\\\"}\\r\\t\\u0001"
	                              "\\u001f\\u007f= m\" "));
}

/* Issue 11, access log "switchable": log.access off writes nothing. */
static void
test_off_writes_nothing(void)
{
	g_autofree char *out = capture(NW_LOG_FORMAT_JSON, "debug", false, &full);

	g_assert_false(nw_access_log_enabled());
	g_assert_cmpstr(out, ==, "");
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/access-log/json-fields", test_json_fields);
	g_test_add_func("/access-log/text-fields", test_text_fields);
	g_test_add_func("/access-log/absent-fields-left-out", test_absent_fields_left_out);
	g_test_add_func("/access-log/client-strings-escaped", test_client_strings_escaped);
	g_test_add_func("/access-log/off-writes-nothing", test_off_writes_nothing);
	return g_test_run();
}
