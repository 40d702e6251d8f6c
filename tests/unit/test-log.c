/* Structured log lines: JSON and text formats, escaping, thresholds. */
#include "build-config.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <jansson.h>

#include "core/log.h"

static char *
capture(nw_log_format format, const char *level, void (*emit)(void))
{
	char *buf = NULL;
	size_t len = 0;
	FILE *stream = open_memstream(&buf, &len);

	g_assert_true(nw_log_setup(level, format));
	nw_log_set_stream(stream);
	emit();
	nw_log_set_stream(NULL);
	fclose(stream);
	return buf;
}

static void
emit_listening(void)
{
	nw_log(NARWHAL_LOG_INFO, "listening", "host", "127.0.0.1", "port", "8000", NULL);
}

static void
emit_tricky(void)
{
	nw_log(NARWHAL_LOG_WARNING, "odd", "message", "say \"hi\"\nnext\tline\x01", NULL);
}

static void
emit_debug_and_error(void)
{
	nw_log(NARWHAL_LOG_DEBUG, "hidden", NULL);
	nw_log(NARWHAL_LOG_ERROR, "shown", NULL);
}

static void
test_json_line_parses(void)
{
	g_autofree char *out = capture(NW_LOG_FORMAT_JSON, "info", emit_listening);
	json_error_t err;
	json_t *doc = json_loads(out, 0, &err);

	g_assert_nonnull(doc);
	g_assert_cmpstr(json_string_value(json_object_get(doc, "event")), ==, "listening");
	g_assert_cmpstr(json_string_value(json_object_get(doc, "level")), ==, "info");
	g_assert_cmpstr(json_string_value(json_object_get(doc, "port")), ==, "8000");
	g_assert_true(json_is_string(json_object_get(doc, "ts")));
	g_assert_true(g_str_has_suffix(out, "}\n"));
	json_decref(doc);
}

static void
test_json_escaping(void)
{
	g_autofree char *out = capture(NW_LOG_FORMAT_JSON, "info", emit_tricky);
	json_t *doc = json_loads(out, 0, NULL);

	g_assert_nonnull(doc);
	g_assert_cmpstr(json_string_value(json_object_get(doc, "message")), ==,
	                "say \"hi\"\nnext\tline\x01");
	/* One event, one line. */
	size_t first_newline = strcspn(out, "\n");
	g_assert_cmpuint(first_newline, ==, strlen(out) - 1);
	json_decref(doc);
}

static void
test_text_format(void)
{
	g_autofree char *out = capture(NW_LOG_FORMAT_TEXT, "info", emit_listening);

	g_assert_nonnull(strstr(out, " info listening host=127.0.0.1 port=8000\n"));
}

static void
test_threshold(void)
{
	g_autofree char *out = capture(NW_LOG_FORMAT_TEXT, "warning", emit_debug_and_error);

	g_assert_null(strstr(out, "hidden"));
	g_assert_nonnull(strstr(out, " error shown"));
}

static void
test_level_names(void)
{
	narwhal_log_level level;

	g_assert_true(nw_log_level_parse("debug", &level));
	g_assert_cmpint(level, ==, NARWHAL_LOG_DEBUG);
	g_assert_true(nw_log_level_parse("error", &level));
	g_assert_cmpint(level, ==, NARWHAL_LOG_ERROR);
	g_assert_false(nw_log_level_parse("verbose", &level));
	g_assert_false(nw_log_setup("loud", NW_LOG_FORMAT_JSON));
}

static void
emit_numbers(void)
{
	struct nw_log_line l;

	nw_log_line_begin(&l, NARWHAL_LOG_DEBUG, "numbers");
	nw_log_line_int(&l, "zero", 0);
	nw_log_line_int(&l, "neg", -42);
	nw_log_line_int(&l, "min", INT64_MIN);
	nw_log_line_int(&l, "max", INT64_MAX);
	nw_log_line_real(&l, "small", 0.0000004);
	nw_log_line_real(&l, "round", 2.0000005);
	nw_log_line_real(&l, "negr", -1.25);
	nw_log_line_real(&l, "huge", 1e13);
	nw_log_line_real(&l, "nan", NAN);
	nw_log_line_real(&l, "inf", INFINITY);
	nw_log_line_bool(&l, "yes", true);
	nw_log_line_end(&l);
}

/* The access log's numbers (issue 11, access log) are written by hand
 * rather than by printf: whole numbers in full, reals with six decimals
 * rounded, and a real that is not finite left out. Written whatever the
 * threshold. */
static void
test_line_numbers(void)
{
	g_autofree char *out = capture(NW_LOG_FORMAT_TEXT, "error", emit_numbers);
	g_autofree char *json = capture(NW_LOG_FORMAT_JSON, "error", emit_numbers);
	json_t *doc = json_loads(json, 0, NULL);

	g_assert_nonnull(strstr(out, " debug numbers zero=0 neg=-42 min=-9223372036854775808"
	                             " max=9223372036854775807 small=0.000000 round=2.000001"
	                             " negr=-1.250000 huge=10000000000000.000000 yes=true\n"));
	g_assert_nonnull(doc);
	g_assert_true(json_integer_value(json_object_get(doc, "min")) == INT64_MIN);
	g_assert_cmpfloat(json_real_value(json_object_get(doc, "negr")), ==, -1.25);
	g_assert_null(json_object_get(doc, "nan"));
	g_assert_null(json_object_get(doc, "inf"));
	g_assert_true(json_is_true(json_object_get(doc, "yes")));
	json_decref(doc);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/log/json-line-parses", test_json_line_parses);
	g_test_add_func("/log/json-escaping", test_json_escaping);
	g_test_add_func("/log/text-format", test_text_format);
	g_test_add_func("/log/threshold", test_threshold);
	g_test_add_func("/log/level-names", test_level_names);
	g_test_add_func("/log/line-numbers", test_line_numbers);
	return g_test_run();
}
