/*
 * narwhal: the router daemon.
 *
 *   narwhal --config FILE          run
 *   narwhal --check-config FILE    print the effective configuration, or
 *                                  every problem, and exit 0 or 1
 *     [--show-plugins [--json]]    print the plugins loaded and their files
 *                                  instead of the configuration
 */
#include "build-config.h"

#include <locale.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include <curl/curl.h>
#include <glib.h>

#include "core/access-log.h"
#include "core/config.h"
#include "core/json-alloc.h"
#include "core/log.h"
#include "core/process.h"
#include "admin/admin.h"
#include "daemon.h"
#include "serve/serve.h"

enum { EXIT_CONFIG = 1, EXIT_USAGE = 2 };

/* One plugin of --show-plugins as a text line: where it is configured,
 * its own name and version, the file it was loaded from, and the files of
 * its name it hides further along the search path. */
static void
print_loaded(const char *where, const json_t *p)
{
	const char *version = json_string_value(json_object_get(p, "version"));
	const json_t *hides = json_object_get(p, "hides");
	size_t i;
	json_t *h;

	printf("%s: %s%s%s from %s", where, json_string_value(json_object_get(p, "name")),
	       version ? " " : "", version ? version : "",
	       json_string_value(json_object_get(p, "path")));
	json_array_foreach(hides, i, h)
		printf("%s%s", i == 0 ? " (hides " : ", ", json_string_value(h));
	printf("%s\n", json_array_size(hides) > 0 ? ")" : "");
}

/* A secret the file names by variable (admin.token_env,
 * server.api_keys_env) that the start's own reader could not read here: a
 * warning, since the daemon's environment (a unit's EnvironmentFile) may
 * set it, but a start here would fail. */
static void
warn_unreadable_secret(GPtrArray *problems, const char *path, const char *name, bool readable)
{
	g_autofree char *message = NULL;

	if (readable)
		return;
	message = g_strdup_printf("the environment variable %s is %s here: narwhal starts only "
	                          "where it is set (docs/deployment.md, \"Running under systemd\")",
	                          name, g_getenv(name) == NULL ? "unset" : "empty");
	nw_config_error_add(problems, true, path, message);
}

/* --check-config: the effective configuration, or with show_plugins the
 * plugins loaded for it (docs/configuration.md, "Checking a file"). */
static int
check_config(const char *file, gboolean show_plugins, gboolean json)
{
	GPtrArray *problems = NULL;
	struct nw_config *cfg = nw_config_load_file(file, &problems);
	json_t *loaded = show_plugins ? json_object() : NULL;
	int status = 0;

	if (cfg != NULL && cfg->admin.token_env != NULL) {
		g_autofree char *token = nw_admin_read_token(cfg->admin.token_env, NULL);

		warn_unreadable_secret(problems, "admin.token_env", cfg->admin.token_env, token != NULL);
	}
	if (cfg != NULL && cfg->server.api_keys_env != NULL) {
		g_auto(GStrv) keys = nw_serve_read_api_keys(cfg->server.api_keys_env, NULL);

		warn_unreadable_secret(problems, "server.api_keys_env", cfg->server.api_keys_env,
		                       keys != NULL);
	}
	if (cfg == NULL) {
		nw_config_print_problems(file, problems, FALSE);
		status = EXIT_CONFIG;
	} else if (!nw_daemon_check_plugins(cfg, problems, loaded, FALSE)) {
		nw_config_print_problems(file, problems, FALSE);
		status = EXIT_CONFIG;
	} else if (show_plugins && !json) {
		static const char *const kinds[] = { "admission", "placement", "controller" };
		const char *name;
		json_t *p;

		nw_config_print_problems(file, problems, TRUE);
		for (size_t i = 0; i < G_N_ELEMENTS(kinds); i++) {
			g_autofree char *where = g_strconcat("plugins.", kinds[i], NULL);

			print_loaded(where, json_object_get(loaded, kinds[i]));
		}
		json_object_foreach(json_object_get(loaded, "dialects"), name, p) {
			g_autofree char *where = g_strconcat("plugins.dialects.", name, NULL);

			print_loaded(where, p);
		}
	} else {
		json_t *out = show_plugins ? json_incref(loaded) : nw_config_to_json(cfg);

		nw_config_print_problems(file, problems, TRUE);
		json_dumpf(out, stdout, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(15));
		fputc('\n', stdout);
		json_decref(out);
	}
	if (problems)
		g_ptr_array_unref(problems);
	json_decref(loaded);
	nw_config_free(cfg);
	return status;
}

static int
run(const char *file)
{
	GPtrArray *problems = NULL;
	struct nw_config *cfg;
	struct nw_daemon *d;
	GError *error = NULL;
	guint checked_from;
	int status;

	/* A reload asked for while starting (`systemctl reload` right after
	 * the start) must not end the process, SIGHUP's default: the start
	 * reads the file anyway. The daemon takes SIGHUP over once it runs
	 * (docs/deployment.md, "Signals"). */
	signal(SIGHUP, SIG_IGN);
	cfg = nw_config_load_file(file, &problems);
	if (cfg == NULL) {
		nw_config_print_problems(file, problems, FALSE);
		g_ptr_array_unref(problems);
		return EXIT_CONFIG;
	}
	if (!nw_log_setup(cfg->log.level, cfg->log.format)) {
		fprintf(stderr, "%s: log.level: unknown level \"%s\"\n", file, cfg->log.level);
		nw_config_free(cfg);
		g_ptr_array_unref(problems);
		return EXIT_CONFIG;
	}
	/* From here the loop never waits on stderr (docs/deployment.md, "Logs"). */
	nw_log_writer_start(NW_LOG_PENDING_CAP);
	nw_access_log_setup(cfg->log.access);
	for (guint i = 0; problems && i < problems->len; i++) {
		char *line = nw_config_error_format(file, g_ptr_array_index(problems, i));

		nw_log(NARWHAL_LOG_WARNING, "config_warning", "problem", line, NULL);
		g_free(line);
	}

	/* The plugins are checked first, as --check-config and a reload check
	 * them, so that a refusal names the file and its field (FILE:
	 * plugins.placement: ...), which the daemon's own load does not. */
	checked_from = problems->len; /* the file's own warnings are logged above */
	if (!nw_daemon_check_plugins(cfg, problems, NULL, TRUE)) {
		g_autoptr(GPtrArray) lines = g_ptr_array_new_with_free_func(g_free);

		for (guint i = checked_from; i < problems->len; i++) {
			const struct nw_config_error *e = g_ptr_array_index(problems, i);
			g_autofree char *line = nw_config_error_format(file, e);

			/* A warning here is the refusal's context (a missing
			 * profile store). */
			g_ptr_array_add(lines, g_strconcat(e->warning ? "warning: " : "", line, NULL));
			nw_log(e->warning ? NARWHAL_LOG_WARNING : NARWHAL_LOG_ERROR,
			       e->warning ? "config_warning" : "startup_failed",
			       e->warning ? "problem" : "error", line, NULL);
		}
		nw_log_writer_stop();
		for (guint i = 0; i < lines->len; i++)
			fprintf(stderr, "%s\n", (const char *)g_ptr_array_index(lines, i));
		g_ptr_array_unref(problems);
		nw_config_free(cfg);
		return EXIT_CONFIG;
	}
	g_ptr_array_unref(problems);

	nw_process_raise_fd_limit();
	nw_process_tune_malloc();
	d = nw_daemon_new(cfg, &error);
	if (d == NULL) {
		nw_log(NARWHAL_LOG_ERROR, "startup_failed", "error", error->message, NULL);
		nw_log_writer_stop();
		fprintf(stderr, "narwhal: %s\n", error->message);
		g_error_free(error);
		return EXIT_CONFIG;
	}
	status = nw_daemon_run(d);
	nw_daemon_free(d); /* logs "stopped" */
	nw_log_writer_stop();
	return status;
}

int
main(int argc, char **argv)
{
	g_autofree char *config_file = NULL;
	g_autofree char *check_file = NULL;
	gboolean version = FALSE, show_plugins = FALSE, json = FALSE;
	GOptionEntry entries[] = {
		{ "config", 'c', 0, G_OPTION_ARG_FILENAME, &config_file,
		  "Run with this configuration file", "FILE" },
		{ "check-config", 0, 0, G_OPTION_ARG_FILENAME, &check_file,
		  "Validate FILE, print the effective configuration and exit", "FILE" },
		{ "show-plugins", 0, 0, G_OPTION_ARG_NONE, &show_plugins,
		  "With --check-config: print each plugin loaded, its name, version and file, "
		  "instead of the effective configuration", NULL },
		{ "json", 0, 0, G_OPTION_ARG_NONE, &json,
		  "With --show-plugins: print them as a JSON object", NULL },
		{ "version", 'V', 0, G_OPTION_ARG_NONE, &version, "Print the version and exit", NULL },
		{ NULL },
	};
	g_autoptr(GOptionContext) ctx = g_option_context_new("- router for disaggregated LLM inference");
	GError *error = NULL;
	int status;

	/* Before any JSON value exists (json-alloc.h). */
	nw_json_alloc_install();
	/* Messages in the operator's locale (GLib's quotation marks would
	 * print as '?' in "C"); numbers in JSON and configuration always in C. */
	setlocale(LC_ALL, "");
	setlocale(LC_NUMERIC, "C");
	g_option_context_add_main_entries(ctx, entries, NULL);
	if (!g_option_context_parse(ctx, &argc, &argv, &error)) {
		fprintf(stderr, "narwhal: %s (see --help)\n", error->message);
		g_error_free(error);
		return EXIT_USAGE;
	}
	if (version) {
		printf("narwhal %s (plugin ABI %d.%d)\n", PACKAGE_VERSION, NARWHAL_ABI_MAJOR,
		       NARWHAL_ABI_MINOR);
		return 0;
	}
	if (argc > 1) {
		fprintf(stderr, "narwhal: unexpected argument \"%s\": give the file with --config "
		        "FILE or --check-config FILE (see --help)\n", argv[1]);
		return EXIT_USAGE;
	}
	if (config_file != NULL && check_file != NULL) {
		fprintf(stderr, "narwhal: --config runs and --check-config only checks: give one of "
		        "them (see --help)\n");
		return EXIT_USAGE;
	}
	if ((show_plugins && check_file == NULL) || (json && !show_plugins)) {
		fprintf(stderr, "narwhal: --show-plugins goes with --check-config FILE, and --json "
		        "with --show-plugins (see --help)\n");
		return EXIT_USAGE;
	}
	if (check_file != NULL)
		return check_config(check_file, show_plugins, json);
	if (config_file == NULL) {
		fprintf(stderr, "narwhal: give --config FILE to run or --check-config FILE to validate\n");
		return EXIT_USAGE;
	}
	curl_global_init(CURL_GLOBAL_DEFAULT);
	status = run(config_file);
	curl_global_cleanup();
	return status;
}
