#include "build-config.h"

#include "core/log.h"

#include <stdarg.h>
#include <string.h>
#include <time.h>

static narwhal_log_level threshold = NARWHAL_LOG_INFO;
static nw_log_format format = NW_LOG_FORMAT_JSON;
static FILE *stream;

static const char *const level_names[] = { "debug", "info", "warning", "error" };

bool
nw_log_level_parse(const char *name, narwhal_log_level *out)
{
	for (size_t i = 0; i < G_N_ELEMENTS(level_names); i++) {
		if (g_strcmp0(name, level_names[i]) == 0) {
			*out = (narwhal_log_level)i;
			return true;
		}
	}
	return false;
}

bool
nw_log_enabled(narwhal_log_level level)
{
	return level >= threshold;
}

void
nw_log_set_stream(FILE *s)
{
	stream = s;
}

static void
append_timestamp(GString *line)
{
	struct timespec ts;
	struct tm tm;
	char buf[32];

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
	g_string_append_printf(line, "%s.%03ldZ", buf, ts.tv_nsec / 1000000);
}

/* JSON string escaping for the small strings a log line carries. */
static void
append_json_string(GString *line, const char *s)
{
	g_string_append_c(line, '"');
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		switch (*p) {
		case '"': g_string_append(line, "\\\""); break;
		case '\\': g_string_append(line, "\\\\"); break;
		case '\n': g_string_append(line, "\\n"); break;
		case '\r': g_string_append(line, "\\r"); break;
		case '\t': g_string_append(line, "\\t"); break;
		default:
			if (*p < 0x20)
				g_string_append_printf(line, "\\u%04x", *p);
			else
				g_string_append_c(line, (char)*p);
		}
	}
	g_string_append_c(line, '"');
}

static void
append_text_value(GString *line, const char *s)
{
	if (*s != '\0' && strpbrk(s, " \"=\n") == NULL) {
		g_string_append(line, s);
		return;
	}
	append_json_string(line, s);
}

static void
emit(narwhal_log_level level, const char *event, va_list ap)
{
	GString *line = g_string_sized_new(160);
	const char *key;

	if (format == NW_LOG_FORMAT_JSON) {
		g_string_append(line, "{\"ts\":\"");
		append_timestamp(line);
		g_string_append_printf(line, "\",\"level\":\"%s\",\"event\":", level_names[level]);
		append_json_string(line, event);
		while ((key = va_arg(ap, const char *)) != NULL) {
			const char *value = va_arg(ap, const char *);
			g_string_append_c(line, ',');
			append_json_string(line, key);
			g_string_append_c(line, ':');
			append_json_string(line, value ? value : "");
		}
		g_string_append(line, "}\n");
	} else {
		append_timestamp(line);
		g_string_append_printf(line, " %s %s", level_names[level], event);
		while ((key = va_arg(ap, const char *)) != NULL) {
			const char *value = va_arg(ap, const char *);
			g_string_append_printf(line, " %s=", key);
			append_text_value(line, value ? value : "");
		}
		g_string_append_c(line, '\n');
	}
	FILE *out = stream ? stream : stderr;
	fwrite(line->str, 1, line->len, out);
	fflush(out);
	g_string_free(line, TRUE);
}

void
nw_log(narwhal_log_level level, const char *event, ...)
{
	va_list ap;

	if (!nw_log_enabled(level))
		return;
	va_start(ap, event);
	emit(level, event, ap);
	va_end(ap);
}

/* GLib's g_warning() and friends, and libraries using GLib logging. */
static GLogWriterOutput
glib_writer(GLogLevelFlags flags, const GLogField *fields, gsize n_fields, gpointer data)
{
	const char *message = "";
	narwhal_log_level level;

	for (gsize i = 0; i < n_fields; i++) {
		if (strcmp(fields[i].key, "MESSAGE") == 0 && fields[i].length < 0)
			message = fields[i].value;
	}
	if (flags & (G_LOG_LEVEL_ERROR | G_LOG_LEVEL_CRITICAL))
		level = NARWHAL_LOG_ERROR;
	else if (flags & G_LOG_LEVEL_WARNING)
		level = NARWHAL_LOG_WARNING;
	else if (flags & (G_LOG_LEVEL_MESSAGE | G_LOG_LEVEL_INFO))
		level = NARWHAL_LOG_INFO;
	else
		level = NARWHAL_LOG_DEBUG;
	nw_log(level, "glib", "message", message, NULL);
	return G_LOG_WRITER_HANDLED;
}

bool
nw_log_setup(const char *level_name, nw_log_format fmt)
{
	narwhal_log_level level;
	static bool writer_set;

	if (!nw_log_level_parse(level_name, &level))
		return false;
	threshold = level;
	format = fmt;
	if (!writer_set) {
		g_log_set_writer_func(glib_writer, NULL, NULL);
		writer_set = true;
	}
	return true;
}
