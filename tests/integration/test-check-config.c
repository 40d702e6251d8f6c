/*
 * narwhal --check-config and the plugin search (issue 14, the plugin
 * author's kit): plugins.dir adds a directory searched before
 * $NARWHAL_PLUGIN_DIR and the installed one, a dialect is loaded from the
 * path in its plugins.dialects entry, and --show-plugins says which file
 * each plugin was loaded from, as text and as JSON.
 */
#include "build-config.h"

#include <string.h>
#include <unistd.h>

#include <glib.h>
#include <glib/gstdio.h>
#include <jansson.h>

#include "integration/harness.h"

/* The built-in plugins' directory of this build (the test environment's). */
static const char *
built_dir(void)
{
	const char *dir = g_getenv("NARWHAL_PLUGIN_DIR");

	g_assert_nonnull(dir);
	return dir;
}

static char *
built(const char *file)
{
	return g_build_filename(built_dir(), file, NULL);
}

/* A configuration of one engine (never contacted by the check) with open
 * admission and the static controller, and plugins (an object text). */
static char *
config_text(const char *dialect, const char *plugins)
{
	return g_strdup_printf(
		"{\"serving\": {\"admission\": \"open\"}, \"controller\": {\"policy\": \"static\"},"
		" \"profiles\": {\"path\": \"/nonexistent/profiles.json\"},"
		" \"fleet\": {\"model\": \"m\", \"engines\": [{\"id\": \"e0\", \"url\": "
		"\"http://127.0.0.1:1\", \"dialect\": \"%s\", \"role\": \"prefill\"}, {\"id\": \"e1\", "
		"\"url\": \"http://127.0.0.1:2\", \"dialect\": \"%s\", \"role\": \"decode\"}]},"
		" \"plugins\": %s}", dialect, dialect, plugins);
}

static int
check(const char *file, const char *extra1, const char *extra2, char **out, char **err)
{
	const char *argv[] = { harness_narwhal_bin(), "--check-config", file, extra1, extra2, NULL };
	int status = harness_run(argv, out, err);

	g_test_message("exit %d\nstdout:\n%s\nstderr:\n%s", status, *out, *err);
	return status;
}

static void
assert_has(const char *text, const char *needle)
{
	if (strstr(text, needle) == NULL)
		g_error("expected \"%s\" in \"%s\"", needle, text);
}

/* A placement plugin and a dialect from explicit paths: --show-plugins
 * names each plugin's own name and its file, as text and as JSON, while
 * the effective configuration (without the flag) stays as configured. */
static void
test_show_plugins_paths(void)
{
	struct harness_proc h = { 0 };
	g_autofree char *placement = built("placement-least-loaded.so");
	g_autofree char *dialect = built("dialect-vllm.so");
	g_autofree char *open_file = built("admission-open.so");
	g_autofree char *plugins = g_strdup_printf(
		"{\"placement\": {\"path\": \"%s\"}, \"dialects\": {\"mine\": {\"path\": \"%s\"}}}",
		placement, dialect);
	g_autofree char *text = config_text("mine", plugins);
	g_autofree char *file = harness_write_config(&h, text);
	g_autofree char *want = NULL;
	char *out = NULL, *err = NULL;
	json_t *doc, *p;

	/* One line each: where configured, its own name and version, its file. */
	g_assert_cmpint(check(file, "--show-plugins", NULL, &out, &err), ==, 0);
	assert_has(out, "plugins.placement: least-loaded ");
	want = g_strdup_printf(" from %s\n", placement);
	assert_has(out, want);
	g_free(want);
	assert_has(out, "plugins.dialects.mine: vllm ");
	want = g_strdup_printf(" from %s\n", dialect);
	assert_has(out, want);
	assert_has(out, "plugins.admission: open ");
	assert_has(out, open_file);
	assert_has(out, "plugins.controller: static ");
	g_assert_cmpstr(err, ==, "");
	g_free(out);
	g_free(err);

	g_assert_cmpint(check(file, "--show-plugins", "--json", &out, &err), ==, 0);
	doc = json_loads(out, 0, NULL);
	g_assert_nonnull(doc);
	p = json_object_get(doc, "placement");
	g_assert_cmpstr(json_string_value(json_object_get(p, "name")), ==, "least-loaded");
	g_assert_cmpstr(json_string_value(json_object_get(p, "path")), ==, placement);
	g_assert_nonnull(json_string_value(json_object_get(p, "version")));
	p = json_object_get(json_object_get(doc, "dialects"), "mine");
	g_assert_cmpstr(json_string_value(json_object_get(p, "name")), ==, "vllm");
	g_assert_cmpstr(json_string_value(json_object_get(p, "path")), ==, dialect);
	p = json_object_get(doc, "admission");
	g_assert_cmpstr(json_string_value(json_object_get(p, "path")), ==, open_file);
	json_decref(doc);
	g_free(out);
	g_free(err);

	/* Without the flag, the effective configuration: the path as written,
	 * handed back as it is. */
	g_assert_cmpint(check(file, NULL, NULL, &out, &err), ==, 0);
	doc = json_loads(out, 0, NULL);
	g_assert_nonnull(doc);
	p = json_object_get(json_object_get(json_object_get(doc, "plugins"), "dialects"), "mine");
	g_assert_cmpstr(json_string_value(json_object_get(p, "path")), ==, dialect);
	json_decref(doc);
	g_free(out);
	g_free(err);
	harness_clear(&h);
}

/* A dialect path that names no file is refused as the other kinds' paths
 * are, after the dialect's configuration path. */
static void
test_dialect_path_missing(void)
{
	struct harness_proc h = { 0 };
	g_autofree char *text = config_text(
		"mine", "{\"dialects\": {\"mine\": {\"path\": \"/nonexistent/dialect-mine.so\"}}}");
	g_autofree char *file = harness_write_config(&h, text);
	g_autofree char *want = NULL;
	char *out = NULL, *err = NULL;

	g_assert_cmpint(check(file, NULL, NULL, &out, &err), ==, 1);
	want = g_strdup_printf("%s: plugins.dialects.mine: /nonexistent/dialect-mine.so: plugin file "
	                       "not found: expected a dialect plugin at this path", file);
	assert_has(err, want);
	assert_has(err, "correct plugins.dialects.<name>.path");
	g_free(out);
	g_free(err);
	harness_clear(&h);
}

/* plugins.dir is searched first, then $NARWHAL_PLUGIN_DIR: a drop-in
 * directory's plugin is loaded and the built-ins it does not hold still
 * are (issue 14: plugins.dir used to replace the plugin directory). */
static void
test_plugins_dir_adds(void)
{
	struct harness_proc h = { 0 };
	g_autofree char *dropin = NULL;
	g_autofree char *target = built("placement-least-loaded.so");
	g_autofree char *link = NULL;
	g_autofree char *plugins = NULL;
	g_autofree char *text = NULL;
	g_autofree char *file = NULL;
	g_autofree char *want = NULL;
	g_autofree char *open_file = built("admission-open.so");
	char *out = NULL, *err = NULL;
	GError *error = NULL;

	dropin = g_dir_make_tmp("narwhal-dropin-XXXXXX", &error);
	g_assert_no_error(error);
	link = g_build_filename(dropin, "placement-least-loaded.so", NULL);
	g_assert_cmpint(symlink(target, link), ==, 0);
	plugins = g_strdup_printf("{\"dir\": \"%s\", \"placement\": {\"name\": \"least-loaded\"}}",
	                          dropin);
	text = config_text("vllm", plugins);
	file = harness_write_config(&h, text);

	g_assert_cmpint(check(file, "--show-plugins", NULL, &out, &err), ==, 0);
	want = g_strdup_printf(" from %s\n", link);
	assert_has(out, "plugins.placement: least-loaded ");
	assert_has(out, want);
	assert_has(out, open_file);
	g_free(out);
	g_free(err);

	/* A name no directory holds: every directory is listed, in order. */
	g_free(text);
	g_free(plugins);
	plugins = g_strdup_printf("{\"dir\": \"%s\", \"placement\": {\"name\": \"fewest\"}}", dropin);
	text = config_text("vllm", plugins);
	g_free(file);
	file = harness_write_config(&h, text);
	g_assert_cmpint(check(file, NULL, NULL, &out, &err), ==, 1);
	g_free(want);
	want = g_strdup_printf("in directories %s, %s", dropin, built_dir());
	assert_has(err, want);
	g_free(want);
	want = g_strdup_printf("%s: least-loaded;", dropin);
	assert_has(err, want);
	g_free(out);
	g_free(err);

	g_unlink(link);
	g_rmdir(dropin);
	harness_clear(&h);
}

static void
test_usage(void)
{
	const char *argv[] = { harness_narwhal_bin(), "--show-plugins", NULL };
	char *out = NULL, *err = NULL;

	g_assert_cmpint(harness_run(argv, &out, &err), ==, 2);
	assert_has(err, "--show-plugins goes with --check-config FILE");
	g_free(out);
	g_free(err);
}

/* A stray argument or both --config and --check-config is a usage error
 * (exit 2), not something to ignore: the operator meant something else. */
static void
test_usage_stray(void)
{
	const char *extra[] = { harness_narwhal_bin(), "--check-config", "a.json", "b.json", NULL };
	const char *both[] = { harness_narwhal_bin(), "--config", "a.json", "--check-config",
	                       "a.json", NULL };
	char *out = NULL, *err = NULL;

	g_assert_cmpint(harness_run(extra, &out, &err), ==, 2);
	assert_has(err, "unexpected argument \"b.json\"");
	g_free(out);
	g_free(err);
	g_assert_cmpint(harness_run(both, &out, &err), ==, 2);
	assert_has(err, "give one of them");
	g_free(out);
	g_free(err);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/check-config/show-plugins/paths", test_show_plugins_paths);
	g_test_add_func("/check-config/dialect-path/missing", test_dialect_path_missing);
	g_test_add_func("/check-config/plugins-dir/adds", test_plugins_dir_adds);
	g_test_add_func("/check-config/show-plugins/usage", test_usage);
	g_test_add_func("/check-config/usage/stray-arguments", test_usage_stray);
	return g_test_run();
}
