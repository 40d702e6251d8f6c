/*
 * narwhal-plugin-check: would the daemon load this plugin, and does it keep
 * the plugin rules? (docs/plugins.md, "Checking a plugin")
 *
 *   narwhal-plugin-check FILE.so [--config JSON]
 *
 * Loads FILE through the daemon's own loader, prints why it would be
 * refused if it would be, then runs the kind's conformance checks against a
 * mock host and prints a verdict per check. Each check runs in a process of
 * its own (sandbox.h), which loads the plugin again: this one never runs
 * plugin code, so a plugin that crashes, exits, hangs or writes to
 * standard output fails a check and cannot end the tool or forge its
 * verdicts. Exit status: 0 every check passed, 1 the plugin was refused or
 * a check failed, 2 a usage error.
 */
#include "build-config.h"

#include <errno.h>
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <glib.h>
#include <jansson.h>

#include "core/log.h"
#include "core/plugin-loader.h"
#include "tools/plugin-kit/conform.h"
#include "tools/plugin-kit/guard.h"
#include "tools/plugin-kit/sandbox.h"

enum { EXIT_FAILED = 1, EXIT_USAGE = 2 };

/* The loader checks the kind it is asked for; the file says its own. Ask
 * for each in turn: every other refusal comes before the kind check
 * (docs/plugins.md, section 8), so it is the same whichever is asked. */
static struct nw_plugin *
load_any_kind(const char *file, GError **error)
{
	static const narwhal_plugin_kind kinds[] = { NARWHAL_KIND_ADMISSION, NARWHAL_KIND_PLACEMENT,
		                                     NARWHAL_KIND_CONTROLLER, NARWHAL_KIND_DIALECT };
	struct nw_plugin *p = NULL;

	for (size_t i = 0; i < G_N_ELEMENTS(kinds) && p == NULL; i++) {
		g_clear_error(error);
		p = nw_plugin_load(kinds[i], NULL, file, error);
		if (p == NULL && !g_error_matches(*error, NARWHAL_PLUGIN_ERROR, NW_PLUGIN_ERROR_KIND))
			break;
	}
	return p;
}

/* The leak check counts the bytes in use (mallinfo2), which include the
 * chunks the C library caches per thread, filled as calls vary: run again
 * without that cache, so the count is exact. Under AddressSanitizer its
 * leak checker does the work instead. */
static void
exact_malloc_counts(char **argv)
{
#if !defined(__SANITIZE_ADDRESS__)
	static const char tunable[] = "glibc.malloc.tcache_count=0";
	const char *had = g_getenv("GLIBC_TUNABLES");
	g_autofree char *want = NULL;

	if (had != NULL && strstr(had, tunable) != NULL)
		return;
	want = had != NULL && *had != '\0' ? g_strconcat(had, ":", tunable, NULL) : g_strdup(tunable);
	g_setenv("GLIBC_TUNABLES", want, TRUE);
	execv("/proc/self/exe", argv);
	/* Not re-run: the check's allowance covers most of the cache's noise. */
#else
	(void)argv;
#endif
}

/* One check's work, as its process sees it. */
struct job {
	const char *file;
	const json_t *config;         /* the user's --config, or NULL */
	const struct kit_check *check; /* NULL: the load check */
};

/* In the check's process: load the plugin as the daemon would, then run
 * the check (or, for the load check, say what was loaded). */
static void
run_check(const char *check, void *data, FILE *out)
{
	const struct job *job = data;
	GError *error = NULL;
	struct nw_plugin *p;
	struct kit_plan plan;

	kit_guard_loading(TRUE);
	p = load_any_kind(job->file, &error);
	kit_guard_loading(FALSE);
	if (p == NULL) {
		kit_verdict(out, FALSE, check, "%s%s",
		            job->check == NULL ? "the daemon would refuse it: "
		                               : "the plugin no longer loads: ",
		            error->message);
		g_error_free(error);
		return;
	}
	if (job->check == NULL) {
		fprintf(out, "%s: %s plugin \"%s\" %s, ABI %u.%u (%s)\n", job->file,
		        nw_plugin_kind_name(p->kind), p->desc->name,
		        p->desc->version != NULL ? p->desc->version : "(no version)",
		        p->desc->abi_major, p->desc->abi_minor,
		        p->desc->build_id != NULL ? p->desc->build_id : "");
		kit_verdict(out, TRUE, "load", "the daemon's loader accepts it");
	} else {
		kit_plan_init(&plan, p, job->config);
		job->check->run(&plan, out);
		kit_plan_clear(&plan);
	}
	nw_plugin_free(p);
}

/* The rule every check keeps watch over: no output (docs/plugins.md,
 * section 4). */
static gboolean
output_verdict(const struct kit_output *output)
{
	if (output->bytes == 0) {
		kit_verdict(stdout, TRUE, "output",
		            "nothing written to standard output or standard error");
		return TRUE;
	}
	kit_verdict(stdout, FALSE, "output",
	            "the plugin wrote %" G_GUINT64_FORMAT " bytes to standard output or standard "
	            "error, first in the %s check (shown on standard error, marked \"plugin "
	            "output\"): a plugin does no I/O; log through host->log",
	            output->bytes, output->first_check);
	return FALSE;
}

int
main(int argc, char **argv)
{
	g_autofree char *config_text = NULL;
	gboolean version = FALSE;
	GOptionEntry entries[] = {
		{ "config", 'c', 0, G_OPTION_ARG_STRING, &config_text,
		  "The plugin's configuration section, a JSON object (default: none)", "JSON" },
		{ "version", 0, 0, G_OPTION_ARG_NONE, &version, "Print the version and exit", NULL },
		{ NULL, 0, 0, 0, NULL, NULL, NULL },
	};
	g_autoptr(GOptionContext) ctx = g_option_context_new(
		"FILE.so - check a Narwhal plugin as the daemon would load it");
	struct kit_output output = { 0 };
	GError *error = NULL;
	json_t *config = NULL;
	struct job job = { 0 };
	struct stat st;
	guint failed = 0;

	exact_malloc_counts(argv);
	setvbuf(stdout, NULL, _IOLBF, 0); /* each verdict out as it is given */
	setlocale(LC_ALL, "");
	setlocale(LC_NUMERIC, "C"); /* verdicts print numbers alike everywhere */
	g_option_context_add_main_entries(ctx, entries, NULL);
	if (!g_option_context_parse(ctx, &argc, &argv, &error)) {
		fprintf(stderr, "narwhal-plugin-check: %s (see --help)\n", error->message);
		g_error_free(error);
		return EXIT_USAGE;
	}
	if (version) {
		printf("narwhal-plugin-check %s (plugin ABI %d.%d)\n", PACKAGE_VERSION,
		       NARWHAL_ABI_MAJOR, NARWHAL_ABI_MINOR);
		return 0;
	}
	if (argc != 2) {
		fprintf(stderr, "narwhal-plugin-check: give one plugin file (see --help)\n");
		return EXIT_USAGE;
	}
	if (config_text != NULL) {
		json_error_t jerr;

		config = json_loads(config_text, JSON_DECODE_ANY, &jerr);
		if (config == NULL) {
			fprintf(stderr, "narwhal-plugin-check: --config: not JSON: %s at column %d\n",
			        jerr.text, jerr.column);
			return EXIT_USAGE;
		}
		/* The daemon hands a plugin an object (or, a dialect without a
		 * section, none): nothing else can come its way. */
		if (!json_is_object(config)) {
			fprintf(stderr, "narwhal-plugin-check: --config: expected a JSON object, the "
			        "plugin's section of the configuration, found %s\n",
			        json_is_array(config) ? "an array" : "a single value");
			json_decref(config);
			return EXIT_USAGE;
		}
	}
	job.file = argv[1];
	job.config = config;
	nw_log_setup("warning", NW_LOG_FORMAT_TEXT);
	/* jansson seeds its hash function on first use, from the clock when it
	 * cannot read /dev/urandom: do it now, not inside a plugin's call. */
	json_object_seed(0);

	/* The loader's own message for a missing file names the kind it was
	 * asked for, which the tool does not know yet. */
	if (stat(job.file, &st) != 0 && (errno == ENOENT || errno == ENOTDIR)) {
		printf("FAIL  load: no such file: %s\n", job.file);
		json_decref(config);
		return EXIT_FAILED;
	}
	kit_guard_share();
	if (!kit_sandbox_run("load", run_check, &job, stdout, &output)) {
		json_decref(config);
		return EXIT_FAILED;
	}
	/* create first: when it fails, the others cannot run. */
	for (guint i = 0; i < kit_n_checks; i++) {
		job.check = &kit_checks[i];
		if (!kit_sandbox_run(job.check->name, run_check, &job, stdout, &output)) {
			failed++;
			if (i == 0)
				break;
		}
	}
	failed += !output_verdict(&output);
	printf("%s: %s\n", failed == 0 ? "conforms" : "does not conform",
	       failed == 0 ? "every check passed" : "see the checks marked FAIL");
	json_decref(config);
	return failed == 0 ? 0 : EXIT_FAILED;
}
