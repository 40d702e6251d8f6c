/* Structured log lines: JSON and text formats, escaping, thresholds. */
#include "build-config.h"

#include <string.h>

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

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/log/json-line-parses", test_json_line_parses);
	g_test_add_func("/log/json-escaping", test_json_escaping);
	g_test_add_func("/log/text-format", test_text_format);
	g_test_add_func("/log/threshold", test_threshold);
	g_test_add_func("/log/level-names", test_level_names);
	return g_test_run();
}
