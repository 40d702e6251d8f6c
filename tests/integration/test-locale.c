/*
 * Every program takes its locale from the environment for messages
 * (issue 14, "the first ten minutes": GLib's quotation marks printed as
 * '?' because no program set its locale) while numbers stay in C. Run
 * under C.UTF-8, which Debian always has, the marks arrive intact.
 */
#include "build-config.h"

#include <locale.h>
#include <string.h>

#include <glib.h>

#include "integration/harness.h"
#include "integration/sim-client.h"

/* Run argv under LC_ALL=C.UTF-8; stderr (owned). */
static char *
run_utf8(const char *const *argv, int *status)
{
	char *out = NULL, *err = NULL;

	g_setenv("LC_ALL", "C.UTF-8", TRUE);
	*status = harness_run(argv, &out, &err);
	g_unsetenv("LC_ALL");
	g_test_message("%s: exit %d, stderr: %s", argv[0], *status, err);
	g_free(out);
	return err;
}

static gboolean
have_utf8_locale(void)
{
	char *was = g_strdup(setlocale(LC_ALL, NULL));
	gboolean ok = setlocale(LC_ALL, "C.UTF-8") != NULL;

	setlocale(LC_ALL, was);
	g_free(was);
	if (!ok)
		g_test_skip("no C.UTF-8 locale on this system");
	return ok;
}

/* GLib's own message for a file it cannot open quotes the name with
 * U+201C and U+201D. */
static void
test_replay_quotes(void)
{
	const char *argv[] = { sim_replay_bin(), "--url", "http://127.0.0.1:1", "--trace",
	                       "/nonexistent/narwhal-trace.csv", NULL };
	g_autofree char *err = NULL;
	int status;

	if (!have_utf8_locale())
		return;
	err = run_utf8(argv, &status);
	g_assert_cmpint(status, !=, 0);
	g_assert_nonnull(strstr(err, "\u201c/nonexistent/narwhal-trace.csv\u201d"));
	g_assert_null(strchr(err, '?'));
}

/* GLib's usage line ends its placeholder with U+2026 (an ellipsis); in
 * the C locale it is "[OPTION?]". */
static void
test_usage_ellipsis(void)
{
	g_autofree char *sim = sim_bin();
	const char *programs[] = { harness_narwhal_bin(), sim };

	if (!have_utf8_locale())
		return;
	for (size_t i = 0; i < G_N_ELEMENTS(programs); i++) {
		const char *argv[] = { programs[i], "--help", NULL };
		char *out = NULL, *err = NULL;

		g_setenv("LC_ALL", "C.UTF-8", TRUE);
		g_assert_cmpint(harness_run(argv, &out, &err), ==, 0);
		g_unsetenv("LC_ALL");
		g_test_message("%s", out);
		g_assert_nonnull(strstr(out, "[OPTION\u2026]"));
		g_assert_null(strstr(out, "[OPTION?]"));
		g_free(out);
		g_free(err);
	}
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/locale/replay-quotes", test_replay_quotes);
	g_test_add_func("/locale/usage-ellipsis", test_usage_ellipsis);
	return g_test_run();
}
