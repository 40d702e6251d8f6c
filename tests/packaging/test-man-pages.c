/*
 * Issue 14, "Installed like a Debian service": every program `make install`
 * installs has a man page that is installed with it, and that page names
 * every option the program's --help lists, so a new option without a line
 * in its page fails here. The configuration format has its section 5 page.
 *
 * The Makefile hands over what it installs: NW_BIN_PROGRAMS (bin_PROGRAMS)
 * and NW_MAN_PAGES (man_MANS), both relative to the build directory.
 */
#include "build-config.h"

#include <string.h>

#include <glib.h>

static char *
builddir_path(const char *relative)
{
	return g_build_filename(g_getenv("G_TEST_BUILDDIR"), "..", relative, NULL);
}

static char **
env_words(const char *name)
{
	const char *value = g_getenv(name);

	g_assert_nonnull(value);
	return g_strsplit_set(value, " \t\n", -1);
}

static gboolean
is_installed_page(const char *page)
{
	g_auto(GStrv) pages = env_words("NW_MAN_PAGES");

	for (char **p = pages; *p != NULL; p++)
		if (g_strcmp0(*p, page) == 0)
			return TRUE;
	return FALSE;
}

/* The option as roff writes it: every '-' as "\-". */
static char *
roff_dashes(const char *option)
{
	g_autoptr(GString) out = g_string_new(NULL);

	for (const char *c = option; *c != '\0'; c++) {
		if (*c == '-')
			g_string_append(out, "\\-");
		else
			g_string_append_c(out, *c);
	}
	return g_string_free(g_steal_pointer(&out), FALSE);
}

/* Whether the page names the option itself, not only a longer one that
 * starts with it (--seed inside --sim-seed is fine; --fault inside
 * --fault-unhealthy is not). */
static gboolean
page_names(const char *page, const char *option)
{
	g_autofree char *needle = roff_dashes(option);
	size_t len = strlen(needle);

	for (const char *at = strstr(page, needle); at != NULL; at = strstr(at + 1, needle)) {
		char next = at[len];

		if (g_ascii_isalnum(next) || next == '_' || g_str_has_prefix(at + len, "\\-"))
			continue;
		return TRUE;
	}
	return FALSE;
}

/* The options of `program --help-all`: each "-x, --name" or "--name" that
 * starts a line, less GLib's own --help-GROUP variants. */
static GPtrArray *
help_options(const char *program)
{
	g_autofree char *path = builddir_path(program);
	const char *argv[] = { path, "--help-all", NULL };
	g_autofree char *out = NULL, *err = NULL;
	g_autoptr(GError) error = NULL;
	g_autoptr(GRegex) re = g_regex_new("^\\s+(?:(-[A-Za-z0-9]), )?(--[a-z0-9][a-z0-9-]*)",
	                                   G_REGEX_MULTILINE, 0, NULL);
	g_autoptr(GMatchInfo) m = NULL;
	GPtrArray *options = g_ptr_array_new_with_free_func(g_free);
	int status = 0;

	g_assert_true(g_spawn_sync(NULL, (char **)argv, NULL, G_SPAWN_DEFAULT, NULL, NULL,
	                           &out, &err, &status, &error));
	g_assert_no_error(error);
	g_assert_true(g_spawn_check_wait_status(status, NULL));
	for (g_regex_match(re, out, 0, &m); g_match_info_matches(m); g_match_info_next(m, NULL)) {
		char *shortopt = g_match_info_fetch(m, 1), *longopt = g_match_info_fetch(m, 2);

		if (g_str_has_prefix(longopt, "--help-")) {
			g_free(shortopt);
			g_free(longopt);
			continue;
		}
		if (*shortopt != '\0')
			g_ptr_array_add(options, shortopt);
		else
			g_free(shortopt);
		g_ptr_array_add(options, longopt);
	}
	return options;
}

static void
test_program_page(gconstpointer data)
{
	const char *program = data;
	g_autofree char *page = g_strdup_printf("man/%s.1", program);
	g_autofree char *path = builddir_path(page);
	g_autofree char *text = NULL;
	g_autoptr(GError) error = NULL;
	g_autoptr(GPtrArray) options = help_options(program);
	g_autoptr(GString) missing = g_string_new(NULL);

	if (!is_installed_page(page))
		g_test_fail_printf("%s has no installed man page: add %s to man_MANS (man/Makefile.inc)",
		                   program, page);
	if (!g_file_get_contents(path, &text, NULL, &error)) {
		g_test_fail_printf("%s: %s", page, error->message);
		return;
	}
	g_assert_cmpuint(options->len, >=, 2); /* at least -h, --help */
	for (guint i = 0; i < options->len; i++)
		if (!page_names(text, g_ptr_array_index(options, i)))
			g_string_append_printf(missing, " %s", (char *)g_ptr_array_index(options, i));
	if (missing->len > 0)
		g_test_fail_printf("%s lists options its man page %s.in does not name:%s",
		                   program, page, missing->str);
}

/* The configuration format's page, and the page's own header. */
static void
test_format_page(void)
{
	g_autofree char *path = builddir_path("man/narwhal.json.5");
	g_autofree char *text = NULL;
	g_autoptr(GError) error = NULL;

	g_assert_true(is_installed_page("man/narwhal.json.5"));
	g_assert_true(g_file_get_contents(path, &text, NULL, &error));
	g_assert_true(g_str_has_prefix(text, ".TH NARWHAL.JSON 5 "));
	/* The paths were filled in at build time. */
	g_assert_null(strstr(text, "@SYSCONFDIR@"));
	g_assert_null(strstr(text, "@DOCDIR@"));
}

/* The matcher itself: a longer option does not stand for a shorter one. */
static void
test_page_names(void)
{
	g_assert_true(page_names(".BR \\-\\-seed =N", "--seed"));
	g_assert_true(page_names(".B \\-\\-sim\\-seed\n.B \\-\\-seed\n", "--seed"));
	g_assert_false(page_names(".B \\-\\-sim\\-seed\n", "--seed"));
	g_assert_false(page_names(".B \\-\\-fault\\-unhealthy\n", "--fault"));
	g_assert_false(page_names(".B \\-\\-no\\-stream\n", "--stream"));
	g_assert_true(page_names(".BR \\-c \", \" \\-\\-config", "-c"));
	g_assert_false(page_names(".BR \\-\\-config", "-c"));
}

int
main(int argc, char **argv)
{
	g_auto(GStrv) programs = NULL;

	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/packaging/man/matcher", test_page_names);
	g_test_add_func("/packaging/man/narwhal.json.5", test_format_page);
	programs = env_words("NW_BIN_PROGRAMS");
	for (char **p = programs; *p != NULL; p++) {
		g_autofree char *name = NULL;

		if (**p == '\0')
			continue;
		name = g_strdup_printf("/packaging/man/%s", *p);
		g_test_add_data_func(name, *p, test_program_page);
	}
	return g_test_run();
}
