/*
 * narwhal-check: preflight checks of a configured fleet (docs/check.md;
 * spec 4.2 and 6).
 *
 *   narwhal-check [--json] [--samples N] [--no-lease-check] [--lease-wait-s S] CONFIG
 *
 * Exit status: 0 every check passed (warnings and skips allowed), 1 a check
 * failed, 2 a usage or configuration error.
 */
#include "build-config.h"

#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <curl/curl.h>
#include <glib.h>

#include "core/config.h"
#include "core/log.h"
#include "tools/check/checks.h"

enum { EXIT_FAILED = 1, EXIT_USAGE = 2 };

#define SAMPLES_MAX 1000
#define LEASE_WAIT_DEFAULT_S 120.0

static int
run_checks(const char *file, struct nw_config *cfg, const struct nw_check_options *opts,
           gboolean json)
{
	struct nw_check_run run = { .cfg = cfg, .opts = opts };
	struct nw_upstream_options pool = {
		.max_connections = nw_config_control_connections(cfg),
		.tls_ca_file = cfg->engine.tls_ca_file,
		.tls_no_verify = !cfg->engine.tls_verify,
	};
	GError *error = NULL;
	int64_t started = g_get_monotonic_time();
	struct nw_fleet *registry;
	struct nw_plugin_metrics *metrics;
	int status;

	/* The dialects' host tables see a fleet registry, as in the daemon. */
	registry = nw_fleet_new(cfg, nw_clock_monotonic_ns(NULL));
	metrics = nw_plugin_metrics_new();
	run.fleet = nw_fleet_dialects_load(cfg, registry, metrics, &error);
	if (run.fleet == NULL) {
		fprintf(stderr, "%s: %s\n", file, error->message);
		g_error_free(error);
		nw_plugin_metrics_free(metrics);
		nw_fleet_free(registry);
		return EXIT_USAGE;
	}
	run.pool = nw_upstream_new(&pool);
	run.healthy = g_new0(bool, MAX(cfg->fleet.n_engines, 1));
	run.report = nw_check_report_new(stdout, stderr, json, isatty(STDERR_FILENO) == 1);
	if (!json)
		printf("narwhal-check %s: %s: %u engine(s), %u sample(s) per pair\n", PACKAGE_VERSION,
		       file, cfg->fleet.n_engines, opts->samples);
	nw_check_engines(&run);
	nw_check_pairs(&run);
	if (opts->lease_check)
		nw_check_leases(&run);
	status = nw_check_report_finish(run.report, file,
	                                (double)(g_get_monotonic_time() - started) / 1e6);
	nw_check_report_free(run.report);
	nw_upstream_free(run.pool);
	nw_fleet_dialects_free(run.fleet);
	nw_plugin_metrics_free(metrics);
	nw_fleet_free(registry);
	g_free(run.healthy);
	g_free(run.model);
	return status;
}

int
main(int argc, char **argv)
{
	gboolean json = FALSE, no_lease = FALSE, version = FALSE;
	gint samples = 5;
	gdouble lease_wait_s = LEASE_WAIT_DEFAULT_S;
	GOptionEntry entries[] = {
		{ "json", 0, 0, G_OPTION_ARG_NONE, &json,
		  "Print one JSON document with every check", NULL },
		{ "samples", 'n', 0, G_OPTION_ARG_INT, &samples,
		  "Handoffs per engine pair (default 5)", "N" },
		{ "no-lease-check", 0, 0, G_OPTION_ARG_NONE, &no_lease,
		  "Skip the check that abandoned handoffs are released", NULL },
		{ "lease-wait-s", 0, 0, G_OPTION_ARG_DOUBLE, &lease_wait_s,
		  "Longest wait for a lease to expire (default 120)", "S" },
		{ "version", 'V', 0, G_OPTION_ARG_NONE, &version, "Print the version and exit", NULL },
		{ NULL },
	};
	g_autoptr(GOptionContext) ctx = g_option_context_new("CONFIG - preflight checks of a "
	                                                     "Narwhal fleet");
	struct nw_check_options opts;
	struct nw_config *cfg;
	GError *error = NULL;
	int status;

	/* Messages in the operator's locale (GLib's quotation marks would
	 * print as '?' in "C"); numbers in JSON and configuration always in C. */
	setlocale(LC_ALL, "");
	setlocale(LC_NUMERIC, "C");
	g_option_context_add_main_entries(ctx, entries, NULL);
	if (!g_option_context_parse(ctx, &argc, &argv, &error)) {
		fprintf(stderr, "narwhal-check: %s (see --help)\n", error->message);
		g_error_free(error);
		return EXIT_USAGE;
	}
	if (version) {
		printf("narwhal-check %s (plugin ABI %d.%d)\n", PACKAGE_VERSION, NARWHAL_ABI_MAJOR,
		       NARWHAL_ABI_MINOR);
		return 0;
	}
	if (argc != 2) {
		fprintf(stderr, "narwhal-check: give one configuration file (see --help)\n");
		return EXIT_USAGE;
	}
	if (samples < 1 || samples > SAMPLES_MAX) {
		fprintf(stderr, "narwhal-check: --samples: %d is out of range: a count from 1 to %d\n",
		        samples, SAMPLES_MAX);
		return EXIT_USAGE;
	}
	if (!(lease_wait_s > 0 && lease_wait_s <= NW_CONFIG_SECONDS_MAX)) {
		fprintf(stderr, "narwhal-check: --lease-wait-s: %g is out of range: seconds above 0\n",
		        lease_wait_s);
		return EXIT_USAGE;
	}
	opts = (struct nw_check_options){
		.samples = (unsigned)samples, .lease_check = !no_lease, .lease_wait_s = lease_wait_s,
	};

	cfg = nw_config_load_reported(argv[1]);
	if (cfg == NULL)
		return EXIT_USAGE;
	/* Plugins' own lines only when they matter; the report is the output. */
	nw_log_setup("warning", NW_LOG_FORMAT_TEXT);

	curl_global_init(CURL_GLOBAL_DEFAULT);
	status = run_checks(argv[1], cfg, &opts, json);
	curl_global_cleanup();
	nw_config_free(cfg);
	return status;
}
