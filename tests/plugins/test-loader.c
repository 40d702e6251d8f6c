/*
 * Loader tests: every refusal against a purpose-built mock plugin
 * (tests/plugins/mock-plugin.c), asserting the error code and that the
 * message names the file, what was expected and what was found; the path
 * rules; the ops copy; residency; and instances against the mock host.
 *
 * Every test that dlopens runs in its own subprocess, so what one test
 * leaves loaded cannot change what another sees.
 */
#include "build-config.h"

#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include <glib/gstdio.h>

#include "core/plugin-loader.h"
#include <narwhal/plugin-test.h>

/* ------------------------------------------------------------- helpers --- */

static char *
mock_file(const char *name)
{
	g_autofree char *base = g_strdup_printf("mock-%s.so", name);

	return g_test_build_filename(G_TEST_BUILT, "plugins", ".libs", base, NULL);
}

/* Load mock-<name>.so and expect the refusal code; returns the message. */
static char *
expect_refusal(const char *mock, narwhal_plugin_kind kind, const char *name,
               nw_plugin_error code)
{
	g_autofree char *file = mock_file(mock);
	g_autoptr(GError) error = NULL;
	struct nw_plugin *p;
	char *message;

	p = nw_plugin_load(kind, name, file, &error);
	g_assert_null(p);
	g_assert_error(error, NARWHAL_PLUGIN_ERROR, (gint)code);
	g_test_message("%s", error->message);
	/* Every refusal starts with the file it is about. */
	g_assert_true(g_str_has_prefix(error->message, file));
	g_assert_cmpint(error->message[strlen(file)], ==, ':');
	message = g_strdup(error->message);
	return message;
}

static void
assert_contains(const char *haystack, const char *needle)
{
	if (strstr(haystack, needle) == NULL)
		g_error("expected \"%s\" in \"%s\"", needle, haystack);
}

static struct nw_plugin *
load_ok(const char *mock, narwhal_plugin_kind kind, const char *name)
{
	g_autofree char *file = mock_file(mock);
	g_autoptr(GError) error = NULL;
	struct nw_plugin *p;

	p = nw_plugin_load(kind, name, file, &error);
	g_assert_no_error(error);
	g_assert_nonnull(p);
	g_assert_cmpstr(p->path, ==, file);
	g_assert_cmpint(p->kind, ==, kind);
	return p;
}

/* Whether the file is mapped in this process right now. */
static gboolean
is_loaded(const char *file)
{
	void *h = dlopen(file, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);

	if (h == NULL)
		return FALSE;
	dlclose(h);
	return TRUE;
}

/* ------------------------------------------------- names and resolution --- */

static void
test_kind_names(void)
{
	g_assert_cmpstr(nw_plugin_kind_name(NARWHAL_KIND_DIALECT), ==, "dialect");
	g_assert_cmpstr(nw_plugin_kind_name(NARWHAL_KIND_ADMISSION), ==, "admission");
	g_assert_cmpstr(nw_plugin_kind_name(NARWHAL_KIND_PLACEMENT), ==, "placement");
	g_assert_cmpstr(nw_plugin_kind_name(NARWHAL_KIND_CONTROLLER), ==, "controller");
	g_assert_null(nw_plugin_kind_name((narwhal_plugin_kind)0));
	g_assert_null(nw_plugin_kind_name((narwhal_plugin_kind)5));
	g_assert_null(nw_plugin_kind_name((narwhal_plugin_kind)-1));
}

static void
test_resolve_path_wins(void)
{
	g_autofree char *a = NULL;
	g_autofree char *b = NULL;

	a = nw_plugin_resolve(NARWHAL_KIND_ADMISSION, "open", "/opt/x/my.so", "/dir");
	g_assert_cmpstr(a, ==, "/opt/x/my.so");
	/* The path is used as given, even relative and without a name. */
	b = nw_plugin_resolve(NARWHAL_KIND_CONTROLLER, NULL, "rel/ctl.so", NULL);
	g_assert_cmpstr(b, ==, "rel/ctl.so");
}

static void
test_resolve_dir(void)
{
	g_autofree char *a = NULL;
	g_autofree char *b = NULL;
	g_autofree char *c = NULL;

	g_setenv("NARWHAL_PLUGIN_DIR", "/from/env", TRUE);
	a = nw_plugin_resolve(NARWHAL_KIND_ADMISSION, "open", NULL, "/lib/nw");
	g_assert_cmpstr(a, ==, "/lib/nw/admission-open.so");
	/* An empty path means "not given". */
	b = nw_plugin_resolve(NARWHAL_KIND_DIALECT, "vllm", "", "/lib/nw/");
	g_assert_cmpstr(b, ==, "/lib/nw/dialect-vllm.so");
	c = nw_plugin_resolve(NARWHAL_KIND_PLACEMENT, "slo-cost", NULL, "plugins");
	g_assert_cmpstr(c, ==, "plugins/placement-slo-cost.so");
}

static void
test_resolve_env(void)
{
	g_autofree char *a = NULL;
	g_autofree char *b = NULL;

	g_setenv("NARWHAL_PLUGIN_DIR", "/from/env", TRUE);
	a = nw_plugin_resolve(NARWHAL_KIND_CONTROLLER, "static", NULL, NULL);
	g_assert_cmpstr(a, ==, "/from/env/controller-static.so");
	b = nw_plugin_resolve(NARWHAL_KIND_CONTROLLER, "static", NULL, "");
	g_assert_cmpstr(b, ==, "/from/env/controller-static.so");
}

/* Issue 14: plugins.dir adds a directory searched first; a name it does
 * not hold is still found in $NARWHAL_PLUGIN_DIR, then the installed
 * directory, so a drop-in plugin does not hide the built-ins. */
static void
test_resolve_search_path(void)
{
	g_autoptr(GError) error = NULL;
	g_autofree char *dropin = g_dir_make_tmp("narwhal-dropin-XXXXXX", &error);
	g_autofree char *env = g_dir_make_tmp("narwhal-env-XXXXXX", &error);
	g_autofree char *mine = g_build_filename(dropin, "placement-mine.so", NULL);
	g_autofree char *open_env = g_build_filename(env, "admission-open.so", NULL);
	g_autofree char *open_dropin = g_build_filename(dropin, "admission-open.so", NULL);
	g_auto(GStrv) dirs = NULL;
	char *got;

	g_assert_no_error(error);
	g_assert_true(g_file_set_contents(mine, "", 0, NULL));
	g_assert_true(g_file_set_contents(open_env, "", 0, NULL));
	g_setenv("NARWHAL_PLUGIN_DIR", env, TRUE);

	dirs = nw_plugin_search_path(dropin);
	g_assert_cmpuint(g_strv_length(dirs), ==, 3);
	g_assert_cmpstr(dirs[0], ==, dropin);
	g_assert_cmpstr(dirs[1], ==, env);
	g_assert_cmpstr(dirs[2], ==, NW_PLUGINDIR);

	got = nw_plugin_resolve(NARWHAL_KIND_PLACEMENT, "mine", NULL, dropin);
	g_assert_cmpstr(got, ==, mine);
	g_free(got);
	/* Not in the drop-in directory: the next one's. */
	got = nw_plugin_resolve(NARWHAL_KIND_ADMISSION, "open", NULL, dropin);
	g_assert_cmpstr(got, ==, open_env);
	g_free(got);
	/* In both: the drop-in directory's wins. */
	g_assert_true(g_file_set_contents(open_dropin, "", 0, NULL));
	got = nw_plugin_resolve(NARWHAL_KIND_ADMISSION, "open", NULL, dropin);
	g_assert_cmpstr(got, ==, open_dropin);
	g_free(got);

	/* A directory named twice is searched once. */
	g_strfreev(dirs);
	g_setenv("NARWHAL_PLUGIN_DIR", NW_PLUGINDIR "/", TRUE);
	dirs = nw_plugin_search_path(NULL);
	g_assert_cmpuint(g_strv_length(dirs), ==, 1);

	g_unlink(mine);
	g_unlink(open_env);
	g_unlink(open_dropin);
	g_rmdir(dropin);
	g_rmdir(env);
}

static void
test_resolve_default(void)
{
	g_autofree char *a = NULL;
	g_autofree char *b = NULL;
	g_autofree char *want = g_build_filename(NW_PLUGINDIR, "admission-open.so", NULL);

	g_unsetenv("NARWHAL_PLUGIN_DIR");
	a = nw_plugin_resolve(NARWHAL_KIND_ADMISSION, "open", NULL, NULL);
	g_assert_cmpstr(a, ==, want);
	g_setenv("NARWHAL_PLUGIN_DIR", "", TRUE);
	b = nw_plugin_resolve(NARWHAL_KIND_ADMISSION, "open", NULL, NULL);
	g_assert_cmpstr(b, ==, want);
}

/* ------------------------------------------------------------ refusals --- */

static void
test_not_found(void)
{
	g_autoptr(GError) error = NULL;
	g_autofree char *dir = NULL;
	g_autofree char *file = NULL;
	struct nw_plugin *p;

	dir = g_dir_make_tmp("narwhal-loader-XXXXXX", &error);
	g_assert_no_error(error);
	file = nw_plugin_resolve(NARWHAL_KIND_ADMISSION, "missing", NULL, dir);
	p = nw_plugin_load(NARWHAL_KIND_ADMISSION, "missing", file, &error);
	g_assert_null(p);
	g_assert_error(error, NARWHAL_PLUGIN_ERROR, NW_PLUGIN_ERROR_NOT_FOUND);
	g_test_message("%s", error->message);
	g_assert_true(g_str_has_prefix(error->message, file));
	assert_contains(error->message, "plugin file not found");
	assert_contains(error->message, "expected admission plugin \"missing\"");
	assert_contains(error->message, dir);
	assert_contains(error->message, "plugins.dir");
	assert_contains(error->message, "plugins.admission.path");
	/* Every directory of the search path, in order, with what it holds
	 * (issue 14: plugins.dir adds to the search path). */
	{
		g_autofree char *none = g_strdup_printf("the admission plugins there: %s: none; ", dir);
		g_autofree char *order = g_strdup_printf("directories %s, %s", dir,
		                                         g_getenv("NARWHAL_PLUGIN_DIR"));

		assert_contains(error->message, none);
		assert_contains(error->message, order);
		assert_contains(error->message, "(searched in this order)");
	}
	g_clear_error(&error);

	/* A directory that is not there is said to be missing, not empty. */
	{
		g_autofree char *nowhere = g_build_filename(dir, "nowhere", NULL);
		g_autofree char *missing = g_strdup_printf("there: %s: no such directory; ", nowhere);
		g_autofree char *at = nw_plugin_resolve(NARWHAL_KIND_ADMISSION, "missing", NULL,
		                                        nowhere);

		g_setenv("NARWHAL_PLUGIN_DIR", dir, TRUE);
		g_assert_null(nw_plugin_load(NARWHAL_KIND_ADMISSION, "missing", at, &error));
		g_test_message("%s", error->message);
		assert_contains(error->message, missing);
		g_clear_error(&error);
	}

	/* With one directory to search, the list is that directory's. */
	g_setenv("NARWHAL_PLUGIN_DIR", NW_PLUGINDIR, TRUE);
	g_free(file);
	file = nw_plugin_resolve(NARWHAL_KIND_ADMISSION, "missing", NULL, NW_PLUGINDIR);
	p = nw_plugin_load(NARWHAL_KIND_ADMISSION, "missing", file, &error);
	g_assert_null(p);
	g_test_message("%s", error->message);
	assert_contains(error->message, "in directory " NW_PLUGINDIR ", found no such file");
	g_clear_error(&error);
	g_unsetenv("NARWHAL_PLUGIN_DIR");
	g_free(file);
	file = nw_plugin_resolve(NARWHAL_KIND_ADMISSION, "missing", NULL, dir);

	/* The message names the plugins of that kind the directory holds, in
	 * order, so a name this build does not ship is plain to see. */
	{
		g_autofree char *zeta = g_build_filename(dir, "admission-zeta.so", NULL);
		g_autofree char *alpha = g_build_filename(dir, "admission-alpha.so", NULL);
		g_autofree char *other = g_build_filename(dir, "placement-beta.so", NULL);

		g_assert_true(g_file_set_contents(zeta, "", 0, NULL));
		g_assert_true(g_file_set_contents(alpha, "", 0, NULL));
		g_assert_true(g_file_set_contents(other, "", 0, NULL));
		p = nw_plugin_load(NARWHAL_KIND_ADMISSION, "missing", file, &error);
		g_assert_null(p);
		assert_contains(error->message, "alpha, zeta;");
		g_clear_error(&error);
		g_unlink(zeta);
		g_unlink(alpha);
		g_unlink(other);
	}

	/* A dialect's file is given in its plugins.dialects entry (issue 14). */
	g_free(file);
	file = nw_plugin_resolve(NARWHAL_KIND_DIALECT, "tgi", NULL, dir);
	p = nw_plugin_load(NARWHAL_KIND_DIALECT, "tgi", file, &error);
	g_assert_null(p);
	g_assert_error(error, NARWHAL_PLUGIN_ERROR, NW_PLUGIN_ERROR_NOT_FOUND);
	g_test_message("%s", error->message);
	assert_contains(error->message, "expected dialect plugin \"tgi\"");
	assert_contains(error->message, "set plugins.dir");
	assert_contains(error->message, "give its file with plugins.dialects.tgi.path");
	g_clear_error(&error);
	g_free(file);
	file = g_build_filename(dir, "tgi.so", NULL);
	p = nw_plugin_load(NARWHAL_KIND_DIALECT, NULL, file, &error);
	g_assert_null(p);
	assert_contains(error->message, "expected a dialect plugin at this path");
	assert_contains(error->message, "correct plugins.dialects.<name>.path");
	g_clear_error(&error);

	/* An explicit path (no name to check) points back at the path setting. */
	g_free(file);
	file = g_build_filename(dir, "mine.so", NULL);
	p = nw_plugin_load(NARWHAL_KIND_CONTROLLER, NULL, file, &error);
	g_assert_null(p);
	g_assert_error(error, NARWHAL_PLUGIN_ERROR, NW_PLUGIN_ERROR_NOT_FOUND);
	g_test_message("%s", error->message);
	g_assert_true(g_str_has_prefix(error->message, file));
	assert_contains(error->message, "expected a controller plugin at this path");
	assert_contains(error->message, dir);
	assert_contains(error->message, "correct plugins.controller.path");
	assert_contains(error->message, "plugins.dir");
	g_clear_error(&error);
	/* "an" before a vowel: the admission kind's message reads right. */
	p = nw_plugin_load(NARWHAL_KIND_ADMISSION, NULL, file, &error);
	g_assert_null(p);
	assert_contains(error->message, "expected an admission plugin at this path");
	g_clear_error(&error);
	g_rmdir(dir);
}

static void
test_open_error(void)
{
	g_autoptr(GError) error = NULL;
	g_autofree char *file = NULL;
	struct nw_plugin *p;
	int fd;

	fd = g_file_open_tmp("admission-junk-XXXXXX.so", &file, &error);
	g_assert_no_error(error);
	g_assert_cmpint(write(fd, "not a shared object\n", 20), ==, 20);
	close(fd);

	p = nw_plugin_load(NARWHAL_KIND_ADMISSION, "junk", file, &error);
	g_assert_null(p);
	g_assert_error(error, NARWHAL_PLUGIN_ERROR, NW_PLUGIN_ERROR_OPEN);
	g_test_message("%s", error->message);
	g_assert_true(g_str_has_prefix(error->message, file));
	assert_contains(error->message, "cannot load plugin");
	assert_contains(error->message, "expected a loadable shared object");
	/* dlerror() names the file and the reason. */
	assert_contains(error->message, "found dlopen error: ");
	assert_contains(error->message, "ldd ");
	g_unlink(file);
}

/* Only a regular file is opened (issue 14, tried as an attacker would):
 * a FIFO held dlopen, and with it the daemon's start, --check-config and
 * narwhal-plugin-check, until something wrote to it; a directory or a
 * device is named as what it is, and a loop of symbolic links is not
 * called a missing file. */
static void
test_not_a_file(void)
{
	g_autofree char *dir = g_dir_make_tmp("narwhal-loader-XXXXXX", NULL);
	g_autofree char *fifo = g_build_filename(dir, "placement-fifo.so", NULL);
	g_autofree char *sub = g_build_filename(dir, "placement-dir.so", NULL);
	g_autofree char *loop_a = g_build_filename(dir, "placement-loop.so", NULL);
	g_autofree char *loop_b = g_build_filename(dir, "loop-b.so", NULL);
	const struct {
		const char *file;
		const char *found;
	} cases[] = {
		{ fifo, "found a FIFO" },
		{ sub, "found a directory" },
		{ "/dev/zero", "found a character device" },
		{ loop_a, "found that it cannot be reached: " },
	};

	g_assert_nonnull(dir);
	g_assert_cmpint(mkfifo(fifo, 0600), ==, 0);
	g_assert_cmpint(g_mkdir(sub, 0700), ==, 0);
	g_assert_cmpint(symlink(loop_b, loop_a), ==, 0);
	g_assert_cmpint(symlink(loop_a, loop_b), ==, 0);
	for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
		g_autoptr(GError) error = NULL;

		/* A FIFO would not return: this test would be stopped. */
		g_assert_null(nw_plugin_load(NARWHAL_KIND_PLACEMENT, NULL, cases[i].file, &error));
		g_assert_error(error, NARWHAL_PLUGIN_ERROR, NW_PLUGIN_ERROR_OPEN);
		g_test_message("%s", error->message);
		g_assert_true(g_str_has_prefix(error->message, cases[i].file));
		assert_contains(error->message, ": cannot load plugin: expected a shared object file, ");
		assert_contains(error->message, cases[i].found);
		assert_contains(error->message, ": give the path of the plugin's .so file");
	}
	g_unlink(loop_a);
	g_unlink(loop_b);
	g_rmdir(sub);
	g_unlink(fifo);
	g_rmdir(dir);
}

static void
test_no_entry(void)
{
	g_autofree char *m = expect_refusal("no-entry", NARWHAL_KIND_ADMISSION, "mock",
	                                    NW_PLUGIN_ERROR_NO_ENTRY);

	assert_contains(m, "not a Narwhal plugin");
	assert_contains(m, "expected an exported function narwhal_plugin_entry, found none");
	assert_contains(m, "NARWHAL_<KIND>_PLUGIN");
}

static void
test_null_descriptor(void)
{
	g_autofree char *m = expect_refusal("null-desc", NARWHAL_KIND_ADMISSION, "mock",
	                                    NW_PLUGIN_ERROR_NULL_DESCRIPTOR);

	assert_contains(m, "expected a descriptor");
	assert_contains(m, "found NULL");
	assert_contains(m, "NARWHAL_<KIND>_PLUGIN");
}

static void
test_bad_magic(void)
{
	g_autofree char *m = expect_refusal("bad-magic", NARWHAL_KIND_ADMISSION, "mock",
	                                    NW_PLUGIN_ERROR_BAD_MAGIC);

	assert_contains(m, "not a Narwhal plugin descriptor");
	assert_contains(m, "expected magic 0x4e57504c, found 0xdeadbeef");
}

static void
test_major(void)
{
	g_autofree char *file = mock_file("major");
	g_autofree char *m = expect_refusal("major", NARWHAL_KIND_ADMISSION, "mock",
	                                    NW_PLUGIN_ERROR_MAJOR);
	g_autofree char *want = g_strdup_printf(
		"%s: incompatible plugin ABI: host is %d.%d, plugin was built for %d.0: "
		"rebuild the plugin against Narwhal's installed headers (pkg-config "
		"narwhal-plugin)",
		file, NARWHAL_ABI_MAJOR, NARWHAL_ABI_MINOR, NARWHAL_ABI_MAJOR + 1);

	/* Reported alone: nothing past the guard fields is read or mentioned. */
	g_assert_cmpstr(m, ==, want);
}

static void
test_minor(void)
{
	g_autofree char *m = expect_refusal("minor", NARWHAL_KIND_ADMISSION, "mock",
	                                    NW_PLUGIN_ERROR_MINOR);
	g_autofree char *expected = g_strdup_printf("expected ABI %d.%d or older",
	                                            NARWHAL_ABI_MAJOR, NARWHAL_ABI_MINOR);
	g_autofree char *found = g_strdup_printf("found %d.%d", NARWHAL_ABI_MAJOR,
	                                         NARWHAL_ABI_MINOR + 1);

	assert_contains(m, "plugin needs a newer Narwhal");
	assert_contains(m, expected);
	assert_contains(m, found);
	assert_contains(m, "pkg-config narwhal-plugin");
}

/* A struct_size larger than the host's struct is refused: no plugin of
 * this ABI or an older minor has one, so the size is a lie or the header
 * newer than the plugin says, and the host would read slots past the
 * plugin's table (issue 14, tried as an attacker would). */
static void
test_long_structs(void)
{
	g_autofree char *ops = expect_refusal("long-ops", NARWHAL_KIND_ADMISSION, "mock",
	                                      NW_PLUGIN_ERROR_SHORT_STRUCT);
	g_autofree char *desc = expect_refusal("long-desc", NARWHAL_KIND_ADMISSION, "mock",
	                                       NW_PLUGIN_ERROR_SHORT_STRUCT);
	g_autofree char *ops_want = g_strdup_printf(
		"admission ops too long: expected at most %zu bytes (ABI %d.%d), found %zu: set "
		"struct_size to sizeof(struct narwhal_admission_ops)",
		sizeof(struct narwhal_admission_ops), NARWHAL_ABI_MAJOR, NARWHAL_ABI_MINOR,
		sizeof(struct narwhal_admission_ops) + 64);
	g_autofree char *desc_want = g_strdup_printf(
		"plugin descriptor too long: expected at most %zu bytes (ABI %d.%d), found %zu",
		sizeof(struct narwhal_plugin_descriptor), NARWHAL_ABI_MAJOR, NARWHAL_ABI_MINOR,
		sizeof(struct narwhal_plugin_descriptor) + 8);

	assert_contains(ops, ops_want);
	assert_contains(desc, desc_want);
}

static void
test_short_descriptor(void)
{
	g_autofree char *m = expect_refusal("short-desc", NARWHAL_KIND_ADMISSION, "mock",
	                                    NW_PLUGIN_ERROR_SHORT_STRUCT);
	g_autofree char *expected = g_strdup_printf(
		"expected at least %zu bytes",
		offsetof(struct narwhal_plugin_descriptor, ops) + sizeof(const void *));
	g_autofree char *found = g_strdup_printf(
		"found %zu", offsetof(struct narwhal_plugin_descriptor, kind));

	assert_contains(m, "plugin descriptor too short");
	assert_contains(m, expected);
	assert_contains(m, found);
}

static void
test_wrong_kind(void)
{
	g_autofree char *m = expect_refusal("wrong-kind", NARWHAL_KIND_ADMISSION, "mock",
	                                    NW_PLUGIN_ERROR_KIND);
	struct nw_plugin *p;

	assert_contains(m, "wrong kind of plugin: expected admission, found controller");
	assert_contains(m, "this file can only serve as a controller plugin");
	/* The same file is fine where it belongs. */
	p = load_ok("wrong-kind", NARWHAL_KIND_CONTROLLER, "mock");
	g_assert_nonnull(p->ops.controller.propose);
	nw_plugin_free(p);
}

static void
test_name_mismatch(void)
{
	g_autofree char *m = expect_refusal("good", NARWHAL_KIND_ADMISSION, "other",
	                                    NW_PLUGIN_ERROR_NAME);

	assert_contains(m, "plugin name mismatch: expected \"other\", found \"mock\"");
	assert_contains(m, "install the file as admission-mock.so");
	assert_contains(m, "plugins.admission.path");
}

/* A name is required even when the configuration gave a path. */
static void
test_no_name(void)
{
	g_autofree char *a = expect_refusal("no-name", NARWHAL_KIND_ADMISSION, "mock",
	                                    NW_PLUGIN_ERROR_NAME);
	g_autofree char *b = expect_refusal("no-name", NARWHAL_KIND_ADMISSION, NULL,
	                                    NW_PLUGIN_ERROR_NAME);

	assert_contains(a, "plugin has no name: expected \"mock\", found none");
	assert_contains(b, "plugin has no name: expected a name, found none");
	assert_contains(b, "NARWHAL_<KIND>_PLUGIN");
}

static void
test_null_ops(void)
{
	g_autofree char *m = expect_refusal("null-ops", NARWHAL_KIND_ADMISSION, "mock",
	                                    NW_PLUGIN_ERROR_NULL_SLOT);

	assert_contains(m, "plugin mock has no ops");
	assert_contains(m, "expected a pointer to struct narwhal_admission_ops, found NULL");
}

static void
test_null_slot(void)
{
	g_autofree char *m = expect_refusal("null-slot", NARWHAL_KIND_ADMISSION, "mock",
	                                    NW_PLUGIN_ERROR_NULL_SLOT);

	assert_contains(m, "required admission slot is NULL");
	assert_contains(m, "expected a function in decide, found NULL");
	assert_contains(m, "struct narwhal_admission_ops");
}

/* plugin-abi.h: slots that work together are required together. */
static void
test_half_pair(void)
{
	g_autofree char *m = expect_refusal("half-pair", NARWHAL_KIND_DIALECT, "mock",
	                                    NW_PLUGIN_ERROR_NULL_SLOT);

	assert_contains(m, "incomplete dialect slot group");
	assert_contains(m, "build_tokenize and parse_tokenize work together");
	assert_contains(m, "found parse_tokenize NULL");
}

/* plugin-abi.h (2.1): the engine-metrics slots are one more such pair; a
 * dialect with parse_metrics alone is refused, naming the missing half. */
static void
test_half_metrics(void)
{
	g_autofree char *m = expect_refusal("half-metrics", NARWHAL_KIND_DIALECT, "mock",
	                                    NW_PLUGIN_ERROR_NULL_SLOT);

	assert_contains(m, "incomplete dialect slot group");
	assert_contains(m, "build_metrics and parse_metrics work together");
	assert_contains(m, "found build_metrics NULL");
}

/* A copy of a mock plugin in a fresh directory (freed by the caller with
 * remove_copy). */
static char *
copy_mock(const char *mock, char **dir_out)
{
	g_autofree char *src = mock_file(mock);
	g_autofree char *dir = g_dir_make_tmp("narwhal-loader-XXXXXX", NULL);
	char *dst;
	gchar *bytes = NULL;
	gsize len = 0;

	g_assert_nonnull(dir);
	g_assert_true(g_file_get_contents(src, &bytes, &len, NULL));
	dst = g_build_filename(dir, "admission-mock.so", NULL);
	g_assert_true(g_file_set_contents(dst, bytes, (gssize)len, NULL));
	g_assert_cmpint(chmod(dst, 0755), ==, 0);
	g_assert_cmpint(chmod(dir, 0755), ==, 0);
	g_free(bytes);
	*dir_out = g_steal_pointer(&dir);
	return dst;
}

static void
remove_copy(char *file, char *dir)
{
	g_remove(file);
	g_rmdir(dir);
	g_free(file);
	g_free(dir);
}

/* Issue: a plugin file or directory others can write is refused as root
 * and warned about otherwise, naming the path. */
static void
check_writable(gboolean file_side)
{
	g_autoptr(GError) error = NULL;
	char *dir = NULL;
	char *file = copy_mock("good", &dir);
	const char *target = file_side ? file : dir;
	struct nw_plugin *p;

	/* Writable by its owner only: loads quietly. */
	p = nw_plugin_load(NARWHAL_KIND_ADMISSION, "mock", file, &error);
	g_assert_no_error(error);
	nw_plugin_free(p);

	g_assert_cmpint(chmod(target, file_side ? 0757 : 0777), ==, 0);
	p = nw_plugin_load(NARWHAL_KIND_ADMISSION, "mock", file, &error);
	if (geteuid() == 0) {
		g_assert_null(p);
		g_assert_error(error, NARWHAL_PLUGIN_ERROR, NW_PLUGIN_ERROR_UNSAFE);
		assert_contains(error->message, target);
		assert_contains(error->message, "every user can write it");
		assert_contains(error->message, "chmod go-w");
	} else {
		/* Loaded, with a warning on the log that names the path. */
		g_assert_no_error(error);
		g_assert_nonnull(p);
		nw_plugin_free(p);
	}
	g_assert_cmpint(chmod(target, 0755), ==, 0);
	remove_copy(file, dir);
}

static void
test_writable_file(void)
{
	check_writable(TRUE);
}

static void
test_writable_dir(void)
{
	check_writable(FALSE);
}

static void
test_short_ops(void)
{
	g_autofree char *m = expect_refusal("tiny-ops", NARWHAL_KIND_ADMISSION, "mock",
	                                    NW_PLUGIN_ERROR_SHORT_STRUCT);
	g_autofree char *expected = g_strdup_printf(
		"expected at least %zu bytes (through decide)",
		offsetof(struct narwhal_admission_ops, decide) + sizeof(void *));
	g_autofree char *found = g_strdup_printf(
		"found %zu", offsetof(struct narwhal_admission_ops, decide));

	assert_contains(m, "admission ops too short");
	assert_contains(m, expected);
	assert_contains(m, found);
}

/* The first failing check wins, in the documented order. */
static void
test_check_order(void)
{
	g_autofree char *a = NULL;
	g_autofree char *b = NULL;
	g_autofree char *c = NULL;

	/* kind before name */
	a = expect_refusal("wrong-kind", NARWHAL_KIND_PLACEMENT, "other", NW_PLUGIN_ERROR_KIND);
	/* name before the ops size and slots */
	b = expect_refusal("null-slot", NARWHAL_KIND_ADMISSION, "other", NW_PLUGIN_ERROR_NAME);
	c = expect_refusal("tiny-ops", NARWHAL_KIND_ADMISSION, "other", NW_PLUGIN_ERROR_NAME);
	/* without a configured name, the slots are checked */
	g_clear_pointer(&b, g_free);
	b = expect_refusal("null-slot", NARWHAL_KIND_ADMISSION, NULL, NW_PLUGIN_ERROR_NULL_SLOT);
}

/* A refused plugin is really unloaded; an accepted one stays resident even
 * after its bookkeeping is freed. */
static void
test_residency(void)
{
	g_autofree char *bad = mock_file("bad-magic");
	g_autofree char *good = mock_file("good");
	g_autofree char *m = NULL;
	struct nw_plugin *p;

	g_assert_false(is_loaded(bad));
	m = expect_refusal("bad-magic", NARWHAL_KIND_ADMISSION, "mock", NW_PLUGIN_ERROR_BAD_MAGIC);
	g_assert_false(is_loaded(bad));

	g_assert_false(is_loaded(good));
	p = load_ok("good", NARWHAL_KIND_ADMISSION, "mock");
	nw_plugin_free(p);
	g_assert_true(is_loaded(good));

	/* Refusing a resident plugin later does not unload it. */
	g_clear_pointer(&m, g_free);
	m = expect_refusal("good", NARWHAL_KIND_ADMISSION, "other", NW_PLUGIN_ERROR_NAME);
	g_assert_true(is_loaded(good));
}

/* --------------------------------------------------------------- loads --- */

static void
test_good(void)
{
	struct nw_plugin *p = load_ok("good", NARWHAL_KIND_ADMISSION, "mock");

	g_assert_cmpuint(p->desc->magic, ==, NARWHAL_PLUGIN_MAGIC);
	g_assert_cmpuint(p->desc->abi_major, ==, NARWHAL_ABI_MAJOR);
	g_assert_cmpuint(p->desc->abi_minor, ==, NARWHAL_ABI_MINOR);
	g_assert_cmpuint(p->desc->struct_size, ==, sizeof(struct narwhal_plugin_descriptor));
	g_assert_cmpstr(p->desc->name, ==, "mock");
	g_assert_cmpstr(p->desc->version, ==, "0.0.1");
	g_assert_nonnull(p->desc->build_id);
	g_assert_cmpuint(p->ops.admission.struct_size, ==, sizeof(struct narwhal_admission_ops));
	g_assert_nonnull(p->ops.admission.create);
	g_assert_nonnull(p->ops.admission.destroy);
	g_assert_nonnull(p->ops.admission.decide);
	g_assert_nonnull(p->ops.admission.finished);
	nw_plugin_free(p);

	/* An explicit path may skip the name check. */
	p = load_ok("good", NARWHAL_KIND_ADMISSION, NULL);
	g_assert_cmpstr(p->desc->name, ==, "mock");
	nw_plugin_free(p);
}

/* Slots past the plugin's ops struct_size read as NULL even though the
 * plugin's table has something there. */
static void
test_old_ops(void)
{
	struct nw_plugin *p = load_ok("old-ops", NARWHAL_KIND_ADMISSION, "mock");

	g_assert_cmpuint(p->ops.admission.struct_size, ==,
	                 offsetof(struct narwhal_admission_ops, decide) + sizeof(void *));
	g_assert_nonnull(p->ops.admission.decide);
	g_assert_null(p->ops.admission.finished);
	nw_plugin_free(p);
}

static void
test_dialect_optional_slots(void)
{
	struct nw_plugin *p = load_ok("dialect", NARWHAL_KIND_DIALECT, "mock");
	struct narwhal_mock_host *mh = narwhal_mock_host_new();
	g_autoptr(GError) error = NULL;
	struct nw_plugin_instance *inst;
	struct narwhal_http_call call = { .struct_size = sizeof call };

	const struct narwhal_engine_ref engine = {
		.struct_size = sizeof engine, .index = 0, .id = "e0", .url = "http://127.0.0.1:1",
	};
	struct narwhal_engine_error err = { .struct_size = sizeof err };

	/* Optional slots read as NULL, and the host checks each before use. */
	g_assert_null(p->ops.dialect.build_tokenize);
	g_assert_null(p->ops.dialect.parse_tokenize);
	g_assert_null(p->ops.dialect.build_models);
	g_assert_null(p->ops.dialect.sniff_sse);
	g_assert_null(p->ops.dialect.router_keys);
	g_assert_nonnull(p->ops.dialect.parse_error);
	g_assert_nonnull(p->ops.dialect.build_metrics);
	g_assert_nonnull(p->ops.dialect.parse_metrics);

	inst = nw_plugin_instance_new(p, narwhal_mock_host_table(mh), NULL, &error);
	g_assert_no_error(error);
	g_assert_cmpuint(p->ops.dialect.capabilities(inst->ctx, &engine), ==,
	                 NARWHAL_DIALECT_HANDOFF_SEQUENTIAL);
	g_assert_cmpint(p->ops.dialect.build_health(inst->ctx, &engine, &call), ==, 0);
	g_assert_cmpstr(call.path, ==, "/health");
	g_assert_null(call.body);
	g_assert_cmpint(p->ops.dialect.parse_error(inst->ctx, 503, "", 0, &err), ==, -EPROTO);
	nw_plugin_instance_free(inst);
	nw_plugin_free(p);
	narwhal_mock_host_free(mh);
}

/* Compatibility (plugin-abi.h): a dialect built for ABI 2.0 loads on a
 * newer host; its ops table ends before the metrics pair and
 * parse_sse_json (2.4), which read as absent even though the mock's table
 * has them in memory. */
static void
test_abi_2_0_dialect(void)
{
	struct nw_plugin *p = load_ok("abi-2-0", NARWHAL_KIND_DIALECT, "mock");

	g_assert_cmpuint(p->desc->abi_major, ==, 2);
	g_assert_cmpuint(p->desc->abi_minor, ==, 0);
	g_assert_cmpuint(p->ops.dialect.struct_size, ==,
	                 offsetof(struct narwhal_dialect_ops, whole_body_only) + sizeof(void *));
	g_assert_null(p->ops.dialect.build_metrics);
	g_assert_null(p->ops.dialect.parse_metrics);
	g_assert_null(p->ops.dialect.parse_sse_json);
	g_assert_nonnull(p->ops.dialect.parse_error);
	g_assert_nonnull(p->ops.dialect.build_health);
	nw_plugin_free(p);
}

/* The mock dialect's metrics, which host tests script (mock-plugin.c): the
 * configured path, its tiny text format, presets kept for what is absent,
 * -EPROTO for a bad value and the configured failure. */
static int
mock_metrics(const struct nw_plugin *p, void *ctx, const char *text,
             struct narwhal_engine_metrics *m)
{
	*m = (struct narwhal_engine_metrics){ .struct_size = sizeof *m, .running = -1,
	                                      .waiting = -1, .kv_usage = NAN,
	                                      .start_time_s = NAN };
	return p->ops.dialect.parse_metrics(ctx, text, strlen(text), m);
}

static void
test_dialect_metrics(void)
{
	struct nw_plugin *p = load_ok("dialect", NARWHAL_KIND_DIALECT, "mock");
	struct narwhal_mock_host *mh = narwhal_mock_host_new();
	g_autoptr(GError) error = NULL;
	struct nw_plugin_instance *inst, *failing;
	struct narwhal_http_call call = { .struct_size = sizeof call };
	struct narwhal_engine_metrics m;
	json_t *config = json_pack("{s:s}", "metrics_path", "/stats");
	json_t *fail = json_pack("{s:i}", "metrics_rc", -EIO);
	const struct narwhal_engine_ref engine = {
		.struct_size = sizeof engine, .index = 0, .id = "e0", .url = "http://127.0.0.1:1",
	};

	inst = nw_plugin_instance_new(p, narwhal_mock_host_table(mh), NULL, &error);
	g_assert_no_error(error);
	g_assert_cmpint(p->ops.dialect.build_metrics(inst->ctx, &engine, &call), ==, 0);
	g_assert_cmpstr(call.method, ==, "GET");
	g_assert_cmpstr(call.path, ==, "/metrics");
	g_assert_null(call.body);

	g_assert_cmpint(mock_metrics(p, inst->ctx, "running 3\nwaiting 0\nkv_usage 0.5\n"
	                             "start_time_s 1700000000.5", &m), ==, 0);
	g_assert_cmpint(m.running, ==, 3);
	g_assert_cmpint(m.waiting, ==, 0);
	g_assert_cmpfloat(m.kv_usage, ==, 0.5);
	g_assert_cmpfloat(m.start_time_s, ==, 1700000000.5);
	/* A Prometheus scrape reads as its start time alone. */
	g_assert_cmpint(mock_metrics(p, inst->ctx, "# TYPE process_start_time_seconds gauge\n"
	                             "process_start_time_seconds 1.5e9\n"
	                             "vllm:num_requests_running{engine=\"0\"} 4.0\n", &m), ==, 0);
	g_assert_cmpfloat(m.start_time_s, ==, 1.5e9);
	g_assert_cmpint(m.running, ==, -1);
	g_assert_true(isnan(m.kv_usage));
	g_assert_cmpint(mock_metrics(p, inst->ctx, "", &m), ==, 0);
	g_assert_cmpint(mock_metrics(p, inst->ctx, "running many\n", &m), ==, -EPROTO);
	g_assert_cmpint(mock_metrics(p, inst->ctx, "waiting -1\n", &m), ==, -EPROTO);
	g_assert_cmpint(mock_metrics(p, inst->ctx, "kv_usage 2\n", &m), ==, -EPROTO);
	g_assert_cmpint(mock_metrics(p, inst->ctx, "start_time_s 0\n", &m), ==, -EPROTO);
	nw_plugin_instance_free(inst);

	inst = nw_plugin_instance_new(p, narwhal_mock_host_table(mh), config, &error);
	g_assert_no_error(error);
	g_assert_cmpint(p->ops.dialect.build_metrics(inst->ctx, &engine, &call), ==, 0);
	g_assert_cmpstr(call.path, ==, "/stats");
	failing = nw_plugin_instance_new(p, narwhal_mock_host_table(mh), fail, &error);
	g_assert_no_error(error);
	g_assert_cmpint(mock_metrics(p, failing->ctx, "running 1\n", &m), ==, -EIO);
	g_assert_cmpint(m.running, ==, -1);
	nw_plugin_instance_free(failing);
	nw_plugin_instance_free(inst);
	json_decref(config);
	json_decref(fail);
	nw_plugin_free(p);
	narwhal_mock_host_free(mh);
}

/* ----------------------------------------------------------- instances --- */

static void
test_instance_lifecycle(void)
{
	struct nw_plugin *p = load_ok("good", NARWHAL_KIND_ADMISSION, "mock");
	struct narwhal_mock_host *mh = narwhal_mock_host_new();
	g_autoptr(GError) error = NULL;
	struct nw_plugin_instance *inst;
	json_t *config = json_pack("{s:s}", "label", "first");
	struct narwhal_admission_request req = {
		.struct_size = sizeof req,
		.request_id = "r1",
		.prompt_tokens = 100,
		.arrival_ns = 1000000000,
	};
	struct narwhal_admission_decision out = { .struct_size = sizeof out };

	inst = nw_plugin_instance_new(p, narwhal_mock_host_table(mh), config, &error);
	/* config is borrowed: the plugin must not keep it. */
	json_decref(config);
	g_assert_no_error(error);
	g_assert_nonnull(inst);
	g_assert_true(inst->plugin == p);
	g_assert_true(narwhal_mock_host_logged(mh, NARWHAL_LOG_INFO, "mock create label=first"));
	g_assert_cmpfloat(narwhal_mock_host_counter(mh, "mock_instances_total"), ==, 1.0);
	g_assert_cmpfloat(narwhal_mock_host_gauge(mh, "mock_live"), ==, 1.0);

	/* Unpriced without a profile. */
	g_assert_cmpint(p->ops.admission.decide(inst->ctx, &req, &out), ==, 0);
	g_assert_cmpint(out.verdict, ==, NARWHAL_ADMIT);
	g_assert_true(isnan(out.projected_ttft_s));
	g_assert_cmpuint(narwhal_mock_host_estimate_calls(mh, NARWHAL_MOCK_PREFILL_SECONDS), ==, 1);
	g_assert_cmpuint(narwhal_mock_host_last_estimate(mh, NARWHAL_MOCK_PREFILL_SECONDS)->tokens, ==, 100);
	g_assert_cmpuint(narwhal_mock_host_clock_reads(mh), ==, 0);

	/* Priced with the canned estimate and the virtual clock. */
	narwhal_mock_host_set_estimate(mh, NARWHAL_MOCK_PREFILL_SECONDS, NARWHAL_ESTIMATE_OK, 0.25);
	narwhal_mock_host_set_time(mh, 1000000000);
	narwhal_mock_host_advance(mh, 500000000);
	g_assert_cmpint(p->ops.admission.decide(inst->ctx, &req, &out), ==, 0);
	g_assert_cmpfloat_with_epsilon(out.projected_ttft_s, 0.75, 1e-9);
	g_assert_cmpuint(narwhal_mock_host_clock_reads(mh), ==, 1);
	g_assert_cmpfloat(narwhal_mock_host_counter(mh, "mock_decisions_total"), ==, 2.0);

	p->ops.admission.finished(inst->ctx, 1, true);
	g_assert_cmpfloat(narwhal_mock_host_counter(mh, "mock_ok_total"), ==, 1.0);
	g_assert_true(isnan(narwhal_mock_host_counter(mh, "mock_failed_total")));

	nw_plugin_instance_free(inst);
	g_assert_true(narwhal_mock_host_logged(mh, NARWHAL_LOG_INFO, "mock destroy label=first"));
	g_assert_cmpfloat(narwhal_mock_host_gauge(mh, "mock_live"), ==, 0.0);
	nw_plugin_instance_free(NULL);
	nw_plugin_free(p);
	narwhal_mock_host_free(mh);
}

/* Two instances of one plugin keep separate state. */
static void
test_two_instances(void)
{
	struct nw_plugin *p1 = load_ok("good", NARWHAL_KIND_ADMISSION, "mock");
	struct nw_plugin *p2 = load_ok("good", NARWHAL_KIND_ADMISSION, "mock");
	struct narwhal_mock_host *mh = narwhal_mock_host_new();
	g_autoptr(GError) error = NULL;
	struct nw_plugin_instance *a, *b;
	json_t *ca = json_pack("{s:s}", "label", "a");
	json_t *cb = json_pack("{s:s}", "label", "b");

	/* The same file twice shares code, not state. */
	g_assert_true(p1->desc == p2->desc);
	a = nw_plugin_instance_new(p1, narwhal_mock_host_table(mh), ca, &error);
	g_assert_no_error(error);
	b = nw_plugin_instance_new(p2, narwhal_mock_host_table(mh), cb, &error);
	g_assert_no_error(error);
	g_assert_true(a->ctx != b->ctx);
	nw_plugin_instance_free(a);
	nw_plugin_free(p1);
	g_assert_true(narwhal_mock_host_logged(mh, NARWHAL_LOG_INFO, "destroy label=a"));
	g_assert_false(narwhal_mock_host_logged(mh, NARWHAL_LOG_INFO, "destroy label=b"));
	nw_plugin_instance_free(b);
	g_assert_true(narwhal_mock_host_logged(mh, NARWHAL_LOG_INFO, "destroy label=b"));
	nw_plugin_free(p2);
	narwhal_mock_host_free(mh);
	json_decref(ca);
	json_decref(cb);
}

static char *
expect_create_error(const char *mock, const char *config_json)
{
	struct nw_plugin *p = load_ok(mock, NARWHAL_KIND_ADMISSION, "mock");
	struct narwhal_mock_host *mh = narwhal_mock_host_new();
	g_autoptr(GError) error = NULL;
	struct nw_plugin_instance *inst;
	json_t *config = config_json ? json_loads(config_json, 0, NULL) : NULL;
	char *message;

	g_assert_true(config_json == NULL || config != NULL);
	inst = nw_plugin_instance_new(p, narwhal_mock_host_table(mh), config, &error);
	g_assert_null(inst);
	g_assert_error(error, NARWHAL_PLUGIN_ERROR, NW_PLUGIN_ERROR_CREATE);
	g_test_message("%s", error->message);
	/* A refused create leaves nothing behind for destroy. */
	g_assert_false(narwhal_mock_host_logged(mh, NARWHAL_LOG_INFO, "create"));
	message = g_strdup(error->message);
	json_decref(config);
	nw_plugin_free(p);
	narwhal_mock_host_free(mh);
	return message;
}

static void
test_create_fail(void)
{
	g_autofree char *file = mock_file("create-fail");
	g_autofree char *m = expect_create_error("create-fail", NULL);
	g_autofree char *want = g_strdup_printf(
		"%s: plugin mock refused its configuration: mock refuses every configuration "
		"(option \"always\")", file);

	g_assert_cmpstr(m, ==, want);
}

static void
test_create_unknown_key(void)
{
	g_autofree char *m = expect_create_error("good", "{\"colour\": 1}");

	assert_contains(m, "plugin mock refused its configuration: unknown key \"colour\"");
}

/* A plugin that fills the whole buffer without a terminator is cut at the
 * buffer's end, not read past it. */
static void
test_create_unterminated(void)
{
	g_autofree char *m = expect_create_error("good", "{\"fail_unterminated\": true}");
	const char *reason = strstr(m, "refused its configuration: ");

	g_assert_nonnull(reason);
	reason += strlen("refused its configuration: ");
	g_assert_cmpuint(strlen(reason), ==, NARWHAL_ERROR_MAX - 1);
	g_assert_cmpuint(strspn(reason, "x"), ==, NARWHAL_ERROR_MAX - 1);
}

/* No message: the errno the plugin returned explains it. */
static void
test_create_silent(void)
{
	g_autofree char *m = expect_create_error("good", "{\"fail_silent\": -5}");
	g_autofree char *want = g_strdup_printf("refused its configuration: %s", g_strerror(EIO));

	assert_contains(m, want);
}

/* ------------------------------------------------------------ mock host --- */

static void
test_mock_host(void)
{
	struct narwhal_mock_host *mh = narwhal_mock_host_new();
	const struct narwhal_host *h = narwhal_mock_host_table(mh);
	struct narwhal_engine_view engines[2] = {
		{ .struct_size = sizeof engines[0], .index = 0, .id = "e0" },
		{ .struct_size = sizeof engines[0], .index = 1, .id = "e1" },
	};
	struct narwhal_fleet_view fleet = {
		.struct_size = sizeof fleet,
		.engine_view_size = sizeof engines[0],
		.n_engines = 2,
		.engines = engines,
	};
	double v = -1.0;

	g_assert_cmpuint(h->struct_size, ==, sizeof(struct narwhal_host));
	g_assert_cmpuint(h->abi_major, ==, NARWHAL_ABI_MAJOR);

	g_assert_cmpint(h->now_ns(h->host_ctx), ==, 0);
	narwhal_mock_host_set_time(mh, 42);
	narwhal_mock_host_advance(mh, 8);
	g_assert_cmpint(h->now_ns(h->host_ctx), ==, 50);
	g_assert_cmpuint(narwhal_mock_host_clock_reads(mh), ==, 2);

	h->log(h->host_ctx, NARWHAL_LOG_WARNING, "disk on fire");
	g_assert_cmpuint(narwhal_mock_host_n_logs(mh), ==, 1);
	g_assert_cmpstr(narwhal_mock_host_log_line(mh, 0), ==, "warning: disk on fire");
	g_assert_true(narwhal_mock_host_logged(mh, NARWHAL_LOG_WARNING, "fire"));
	g_assert_false(narwhal_mock_host_logged(mh, NARWHAL_LOG_ERROR, "fire"));
	narwhal_mock_host_clear_logs(mh);
	g_assert_cmpuint(narwhal_mock_host_n_logs(mh), ==, 0);

	h->counter_add(h->host_ctx, "c", 2.0);
	h->counter_add(h->host_ctx, "c", 3.0);
	h->gauge_set(h->host_ctx, "g", 7.0);
	h->gauge_set(h->host_ctx, "g", 4.0);
	g_assert_cmpfloat(narwhal_mock_host_counter(mh, "c"), ==, 5.0);
	g_assert_cmpfloat(narwhal_mock_host_gauge(mh, "g"), ==, 4.0);
	g_assert_true(isnan(narwhal_mock_host_counter(mh, "g")));

	g_assert_null(h->fleet(h->host_ctx));
	narwhal_mock_host_set_fleet(mh, &fleet);
	g_assert_cmpstr(narwhal_fleet_engine(h->fleet(h->host_ctx), 1)->id, ==, "e1");
	g_assert_cmpuint(narwhal_mock_host_fleet_reads(mh), ==, 2);

	g_assert_cmpint(h->decode_interval_seconds(h->host_ctx, 1, 8, 4096, &v), ==,
	                NARWHAL_ESTIMATE_NO_PROFILE);
	g_assert_cmpfloat(v, ==, -1.0);
	narwhal_mock_host_set_estimate(mh, NARWHAL_MOCK_DECODE_INTERVAL_SECONDS,
	                          NARWHAL_ESTIMATE_OK, 0.02);
	g_assert_cmpint(h->decode_interval_seconds(h->host_ctx, 1, 8, 4096, &v), ==,
	                NARWHAL_ESTIMATE_OK);
	g_assert_cmpfloat(v, ==, 0.02);
	g_assert_cmpuint(narwhal_mock_host_estimate_calls(mh, NARWHAL_MOCK_DECODE_INTERVAL_SECONDS), ==, 2);
	g_assert_cmpuint(narwhal_mock_host_last_estimate(mh, NARWHAL_MOCK_DECODE_INTERVAL_SECONDS)->engine,
	                 ==, 1);
	g_assert_cmpuint(narwhal_mock_host_last_estimate(mh, NARWHAL_MOCK_DECODE_INTERVAL_SECONDS)
	                 ->active_requests, ==, 8);
	g_assert_cmpuint(narwhal_mock_host_last_estimate(mh, NARWHAL_MOCK_DECODE_INTERVAL_SECONDS)->tokens,
	                 ==, 4096);
	g_assert_cmpint(h->prefill_queue_seconds(h->host_ctx, 0, 10, &v), ==,
	                NARWHAL_ESTIMATE_NO_PROFILE);
	narwhal_mock_host_free(mh);
}

/* A pricer for the mock's unscripted splits: ratio prefill/decode. */
static narwhal_estimate_status
ratio_pricer(const struct narwhal_split_query *q, struct narwhal_split_price *out, void *data)
{
	(void)data;
	if (q->prefill == 7)
		return NARWHAL_ESTIMATE_NO_PROFILE;
	out->worst_ratio = (double)q->prefill / q->decode;
	return NARWHAL_ESTIMATE_OK;
}

/* The mock's price_split (ABI 2.2): NO_PROFILE by default, a scripted
 * price per split, the pricer for the rest, every query kept. */
static void
test_mock_host_price_split(void)
{
	struct narwhal_mock_host *mh = narwhal_mock_host_new();
	const struct narwhal_host *h = narwhal_mock_host_table(mh);
	struct narwhal_split_query q = {
		.struct_size = sizeof q, .prefill = 3, .decode = 5, .arrivals_per_s = 2.5,
		.prompt_tokens = 1000, .output_tokens = 200, .utilization = 0.9,
		.decode_streams = 4, .urgent_prompt_tokens = 0,
	};
	struct narwhal_split_price scripted = { .worst_ratio = 1.25, .in_domain = true };
	struct narwhal_split_price out = { .worst_ratio = -1 };
	const struct narwhal_split_query *first;

	g_assert_nonnull(h->price_split);
	g_assert_null(narwhal_mock_host_last_split_query(mh));
	g_assert_cmpint(h->price_split(h->host_ctx, &q, &out), ==, NARWHAL_ESTIMATE_NO_PROFILE);
	g_assert_cmpfloat(out.worst_ratio, ==, -1); /* untouched */
	first = narwhal_mock_host_last_split_query(mh);

	narwhal_mock_host_set_split_price(mh, 3, 5, &scripted);
	scripted.worst_ratio = 9; /* the script is a copy */
	g_assert_cmpint(h->price_split(h->host_ctx, &q, &out), ==, NARWHAL_ESTIMATE_OK);
	g_assert_cmpfloat(out.worst_ratio, ==, 1.25);
	g_assert_true(out.in_domain);
	g_assert_cmpuint(out.struct_size, ==, sizeof out);
	q.prefill = 4;
	q.decode = 4;
	g_assert_cmpint(h->price_split(h->host_ctx, &q, &out), ==, NARWHAL_ESTIMATE_NO_PROFILE);

	narwhal_mock_host_set_split_pricer(mh, ratio_pricer, NULL);
	g_assert_cmpint(h->price_split(h->host_ctx, &q, &out), ==, NARWHAL_ESTIMATE_OK);
	g_assert_cmpfloat(out.worst_ratio, ==, 1.0);
	q.prefill = 7;
	g_assert_cmpint(h->price_split(h->host_ctx, &q, &out), ==, NARWHAL_ESTIMATE_NO_PROFILE);
	q.prefill = 3;
	q.decode = 5;
	g_assert_cmpint(h->price_split(h->host_ctx, &q, &out), ==, NARWHAL_ESTIMATE_OK);
	g_assert_cmpfloat(out.worst_ratio, ==, 1.25); /* the script wins */

	narwhal_mock_host_set_split_price(mh, 3, 5, NULL);
	g_assert_cmpint(h->price_split(h->host_ctx, &q, &out), ==, NARWHAL_ESTIMATE_OK);
	g_assert_cmpfloat(out.worst_ratio, ==, 0.6);
	narwhal_mock_host_set_split_price(mh, 3, 5, &scripted);
	narwhal_mock_host_clear_split_prices(mh);
	g_assert_cmpint(h->price_split(h->host_ctx, &q, &out), ==, NARWHAL_ESTIMATE_NO_PROFILE);

	g_assert_cmpuint(narwhal_mock_host_split_price_calls(mh), ==, 8);
	g_assert_cmpuint(narwhal_mock_host_split_price_calls_for(mh, 3, 5), ==, 5);
	g_assert_cmpuint(narwhal_mock_host_split_price_calls_for(mh, 4, 4), ==, 2);
	g_assert_cmpuint(narwhal_mock_host_split_query(mh, 2)->prefill, ==, 4);
	g_assert_cmpuint(narwhal_mock_host_last_split_query(mh)->decode_streams, ==, 4);
	g_assert_cmpfloat(narwhal_mock_host_last_split_query(mh)->utilization, ==, 0.9);
	/* a query kept from before stays valid */
	g_assert_true(first == narwhal_mock_host_split_query(mh, 0));
	g_assert_cmpuint(first->prefill, ==, 3);
	g_assert_cmpfloat(first->arrivals_per_s, ==, 2.5);
	g_assert_cmpuint(narwhal_mock_host_clock_reads(mh), ==, 0);
	narwhal_mock_host_free(mh);
}

/* ------------------------------------------------------- pkg-config --- */

/* configure.ac mirrors the header's ABI version into narwhal-plugin.pc for
 * out-of-tree builds; the two must not drift apart. */
static void
test_pkgconfig_abi(void)
{
	g_autofree char *pc = g_test_build_filename(G_TEST_BUILT, "..", "narwhal-plugin.pc", NULL);
	g_autofree char *text = NULL;
	g_autofree char *major = g_strdup_printf("\nabi_major=%d\n", NARWHAL_ABI_MAJOR);
	g_autofree char *minor = g_strdup_printf("\nabi_minor=%d\n", NARWHAL_ABI_MINOR);

	if (!g_file_get_contents(pc, &text, NULL, NULL)) {
		g_test_skip("narwhal-plugin.pc not generated (not a configured build tree)");
		return;
	}
	assert_contains(text, major);
	assert_contains(text, minor);
	assert_contains(text, "\nplugindir=");
}

/* ---------------------------------------------------------------- main --- */

struct isolated {
	const char *path;
	void (*body)(void);
};

/* Run the body in a fresh process: the parent only checks it passed. */
static void
run_isolated(gconstpointer data)
{
	const struct isolated *t = data;

	if (g_test_subprocess()) {
		t->body();
		return;
	}
	/* Bounded: a load that never returns fails its test, not the run. */
	g_test_trap_subprocess(NULL, 120 * G_USEC_PER_SEC, G_TEST_SUBPROCESS_INHERIT_STDERR);
	g_test_trap_assert_passed();
}

static const struct isolated isolated_tests[] = {
	/* These change the environment, which later children would inherit. */
	{ "/loader/resolve/dir", test_resolve_dir },
	{ "/loader/resolve/env", test_resolve_env },
	{ "/loader/resolve/search-path", test_resolve_search_path },
	{ "/loader/resolve/default", test_resolve_default },
	{ "/loader/refuse/not-found", test_not_found },
	{ "/loader/refuse/open", test_open_error },
	{ "/loader/refuse/no-entry", test_no_entry },
	{ "/loader/refuse/null-descriptor", test_null_descriptor },
	{ "/loader/refuse/bad-magic", test_bad_magic },
	{ "/loader/refuse/major", test_major },
	{ "/loader/refuse/minor", test_minor },
	{ "/loader/refuse/short-descriptor", test_short_descriptor },
	{ "/loader/refuse/wrong-kind", test_wrong_kind },
	{ "/loader/refuse/name", test_name_mismatch },
	{ "/loader/refuse/no-name", test_no_name },
	{ "/loader/refuse/null-ops", test_null_ops },
	{ "/loader/refuse/null-slot", test_null_slot },
	{ "/loader/refuse/short-ops", test_short_ops },
	{ "/loader/refuse/half-pair", test_half_pair },
	{ "/loader/refuse/half-metrics", test_half_metrics },
	{ "/loader/refuse/not-a-file", test_not_a_file },
	{ "/loader/refuse/long-structs", test_long_structs },
	{ "/loader/refuse/writable-file", test_writable_file },
	{ "/loader/refuse/writable-dir", test_writable_dir },
	{ "/loader/refuse/order", test_check_order },
	{ "/loader/residency", test_residency },
	{ "/loader/load/good", test_good },
	{ "/loader/load/old-ops", test_old_ops },
	{ "/loader/load/dialect", test_dialect_optional_slots },
	{ "/loader/load/abi-2.0-dialect", test_abi_2_0_dialect },
	{ "/loader/load/dialect-metrics", test_dialect_metrics },
	{ "/loader/instance/lifecycle", test_instance_lifecycle },
	{ "/loader/instance/two", test_two_instances },
	{ "/loader/instance/create-fail", test_create_fail },
	{ "/loader/instance/unknown-key", test_create_unknown_key },
	{ "/loader/instance/unterminated-error", test_create_unterminated },
	{ "/loader/instance/silent-error", test_create_silent },
};

/* The kit's scripted fleet (issue 14, the plugin test library): engines
 * at successive indices with the host's presets, a view that follows
 * changes and growth, and eligible sets by role. */
static void
test_kit_fleet(void)
{
	struct narwhal_test_fleet *f = narwhal_test_fleet_new(2.0, 0.05);
	const struct narwhal_fleet_view *v;
	const uint32_t *el;
	uint32_t n = 99;

	g_assert_null(narwhal_test_fleet_engine(f, 0));
	narwhal_test_fleet_add(f, "p0", NARWHAL_ROLE_PREFILL);
	narwhal_test_fleet_add(f, "d0", NARWHAL_ROLE_DECODE)->resident_decode = 3;
	narwhal_test_fleet_add(f, "p1", NARWHAL_ROLE_PREFILL);
	v = narwhal_test_fleet_view(f);
	g_assert_cmpuint(v->n_engines, ==, 3);
	g_assert_cmpuint(v->engine_view_size, ==, sizeof(struct narwhal_engine_view));
	g_assert_cmpfloat(v->ttft_target_s, ==, 2.0);
	g_assert_cmpstr(narwhal_fleet_engine(v, 2)->id, ==, "p1");
	g_assert_cmpuint(narwhal_fleet_engine(v, 2)->index, ==, 2);
	g_assert_cmpuint(narwhal_fleet_engine(v, 1)->resident_decode, ==, 3);
	g_assert_cmpuint(narwhal_fleet_engine(v, 0)->flags, ==, NARWHAL_ENGINE_AVAILABLE);
	g_assert_true(isnan(narwhal_fleet_engine(v, 0)->prefill_load));

	el = narwhal_test_fleet_eligible(f, NARWHAL_ROLE_PREFILL, &n);
	g_assert_cmpuint(n, ==, 2);
	g_assert_cmpuint(el[0], ==, 0);
	g_assert_cmpuint(el[1], ==, 2);
	el = narwhal_test_fleet_eligible(f, 0, &n);
	g_assert_cmpuint(n, ==, 3);

	/* Growth moves the array; the view follows. */
	for (int i = 0; i < 64; i++)
		narwhal_test_fleet_add(f, "x", NARWHAL_ROLE_DECODE);
	narwhal_test_fleet_engine(f, 1)->resident_decode = 7;
	v = narwhal_test_fleet_view(f);
	g_assert_cmpuint(v->n_engines, ==, 67);
	g_assert_cmpuint(narwhal_fleet_engine(v, 1)->resident_decode, ==, 7);
	g_assert_cmpstr(narwhal_fleet_engine(v, 0)->id, ==, "p0");
	narwhal_test_fleet_free(f);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);

	g_test_add_func("/loader/kind-names", test_kind_names);
	g_test_add_func("/loader/resolve/path", test_resolve_path_wins);
	g_test_add_func("/mock-host/services", test_mock_host);
	g_test_add_func("/mock-host/price-split", test_mock_host_price_split);
	g_test_add_func("/kit/fleet", test_kit_fleet);
	g_test_add_func("/loader/pkgconfig-abi", test_pkgconfig_abi);
	for (size_t i = 0; i < G_N_ELEMENTS(isolated_tests); i++)
		g_test_add_data_func(isolated_tests[i].path, &isolated_tests[i], run_isolated);
	return g_test_run();
}
