/*
 * narwhal-profile: measure the configured engines and write the profile
 * store (docs/profiles.md, "How to profile a fleet"; spec 7.7; issue 12).
 *
 *   narwhal-profile --config FILE [--quick] [--engine ID]... [--out FILE] [--json]
 *                   [--max-decode-streams N]
 *                   [--max-prompt-tokens N]
 *
 * Exit status: 0 every engine asked for was profiled and the store
 * written, 1 an engine could not be profiled (the others are written), 2 a
 * usage, configuration or store error (then no engine was driven, or
 * nothing was written).
 */
#include "build-config.h"

#include <errno.h>
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>
#include <glib.h>
#include <glib/gstdio.h>

#include "core/log.h"
#include "tools/profile/run.h"

enum { EXIT_FAILED = 1, EXIT_USAGE = 2 };

#define PROMPT_CAP_MIN 64
#define PROMPT_CAP_MAX (1u << 24)

/* Find out now, before any engine is driven, whether the store can be
 * written where it goes: its directory made when missing (the default,
 * runs/profiles.json, is in a directory of its own), then a file made and
 * removed beside it. */
static gboolean
check_writable(const char *path, GError **error)
{
	g_autofree char *dir = g_path_get_dirname(path);
	g_autofree char *probe = g_build_filename(dir, ".narwhal-profile-XXXXXX", NULL);
	int fd;

	if (g_file_test(path, G_FILE_TEST_IS_DIR)) {
		g_set_error(error, G_FILE_ERROR, G_FILE_ERROR_ISDIR, "it is a directory");
		return FALSE;
	}
	if (g_mkdir_with_parents(dir, 0755) != 0) {
		int err = errno;

		g_set_error(error, G_FILE_ERROR, g_file_error_from_errno(err),
		            "cannot create the directory %s: %s", dir, g_strerror(err));
		return FALSE;
	}
	fd = g_mkstemp(probe);
	if (fd < 0) {
		int err = errno;

		g_set_error(error, G_FILE_ERROR, g_file_error_from_errno(err),
		            "cannot create a file in %s: %s", dir, g_strerror(err));
		return FALSE;
	}
	close(fd);
	g_unlink(probe);
	return TRUE;
}

/* The old store, whose entries of engines not profiled now are kept; an
 * empty one when there is none or it cannot be read (said so). */
static struct nw_profile_store *
old_store(const char *path, struct nw_prof_report *report)
{
	struct nw_profile_store *s;
	GError *error = NULL;

	if (!g_file_test(path, G_FILE_TEST_EXISTS))
		return nw_profile_store_new();
	s = nw_profile_store_load(path, &error);
	if (s != NULL)
		return s;
	nw_prof_report_note(report, "the store there now is replaced, since it cannot be read "
	                    "(%s)", error->message);
	g_error_free(error);
	return nw_profile_store_new();
}

/* The progress units planned for one engine before its sweeps are known
 * (a sweep over a nominal context, and its grid); each sweep corrects
 * them when it knows its own. */
static void
plan_units(struct nw_prof_run *run)
{
	uint64_t lengths[NW_PROF_LENGTHS_MAX];
	struct nw_prof_cell cells[NW_PROF_CELLS_MAX];
	size_t n = nw_prof_prefill_lengths(run->opts->quick, 16, 4095, lengths,
	                                   G_N_ELEMENTS(lengths));

	run->prefill_units = (double)(n * run->sizes.prefill_reps);
	run->decode_cells = nw_prof_decode_cells(run->opts->quick, run->opts->active_max, 16,
	                                         4000, run->sizes.kv_tokens_max, cells,
	                                         G_N_ELEMENTS(cells));
}

/* A fit this far off its own measurements (root mean square, relative)
 * is written, with a warning: something besides the model moved them. */
#define FIT_ERROR_WARN 0.1

static void
warn_fit(struct nw_prof_run *run, const char *engine, const char *model, double error)
{
	if (error > FIT_ERROR_WARN)
		nw_prof_report_note(run->report, "warning: engine %s: its %s fit is %.0f%% off its "
		                    "measurements (root mean square): the engine or its host was "
		                    "busy, or the model does not describe it over this range; profile "
		                    "it again on an idle fleet", engine, model, 100 * error);
}

/* Every engine's profile into the store; returns the engines profiled. */
static unsigned
collect(struct nw_prof_run *run, struct nw_profile_store *store, GPtrArray *kept)
{
	unsigned profiled = 0;

	for (uint32_t i = 0; i < run->n_engines; i++) {
		struct nw_prof_engine *e = &run->engines[i];

		if (!e->selected)
			continue;
		if (e->error != NULL) {
			nw_prof_report_failed(run->report, e->d->ref.id, e->error);
			continue;
		}
		warn_fit(run, e->d->ref.id, "prefill", e->fit_prefill.rel_rms_error);
		warn_fit(run, e->d->ref.id, "decode", e->fit_decode.rel_rms_error);
		nw_profile_store_put(store, nw_prof_engine_profile(e));
		profiled++;
	}
	for (guint i = 0; i < store->engines->len; i++) {
		const struct nw_engine_profile *p = g_ptr_array_index(store->engines, i);
		bool now = false;

		for (uint32_t j = 0; j < run->n_engines; j++)
			now = now || (run->engines[j].selected && run->engines[j].error == NULL &&
			              strcmp(run->engines[j].d->ref.id, p->engine) == 0);
		if (!now)
			g_ptr_array_add(kept, p->engine);
	}
	return profiled;
}

static int
profile_fleet(const char *file, struct nw_config *cfg, struct nw_prof_options *opts)
{
	struct nw_upstream_options pool = {
		.max_connections = MAX(cfg->fleet.n_engines, 1) * (opts->active_max + 8),
		.tls_ca_file = cfg->engine.tls_ca_file,
		.tls_no_verify = !cfg->engine.tls_verify,
	};
	struct nw_prof_run run = { .cfg = cfg, .opts = opts, .n_engines = cfg->fleet.n_engines };
	struct nw_prof_outcome outcome = { .config = file, .store = opts->out };
	int64_t started = g_get_monotonic_time();
	g_autoptr(GPtrArray) kept = g_ptr_array_new();
	struct nw_profile_store *store;
	struct nw_fleet *registry;
	struct nw_plugin_metrics *metrics;
	GError *error = NULL;
	unsigned selected = 0, profiled;
	int status = 0;
	json_t *written = NULL;

	nw_prof_sizes(opts->quick, &run.sizes);
	run.report = nw_prof_report_new(stdout, stderr, opts->json, isatty(STDERR_FILENO) == 1);
	/* The dialects' host tables see a fleet registry, as in the daemon. */
	registry = nw_fleet_new(cfg, nw_clock_monotonic_ns(NULL));
	metrics = nw_plugin_metrics_new();
	run.fleet = nw_fleet_dialects_load(cfg, registry, metrics, &error);
	if (run.fleet == NULL) {
		fprintf(stderr, "%s: %s\n", file, error->message);
		g_error_free(error);
		nw_plugin_metrics_free(metrics);
		nw_fleet_free(registry);
		nw_prof_report_free(run.report);
		return EXIT_USAGE;
	}
	store = old_store(opts->out, run.report);
	run.pool = nw_upstream_new(&pool);
	run.tag = g_random_int();
	run.engines = g_new0(struct nw_prof_engine, MAX(run.n_engines, 1));
	plan_units(&run);
	for (uint32_t i = 0; i < run.n_engines; i++) {
		struct nw_prof_engine *e = &run.engines[i];

		e->index = i;
		e->d = &run.fleet->dialects[i];
		e->selected = opts->selected[i];
		e->max_model_len = -1;
		e->tokens_per_filler = 1.0;
		e->prompt_overhead = 4.0;
		e->prefill = g_array_new(FALSE, FALSE, sizeof(struct nw_prefill_sample));
		e->decode = g_array_new(FALSE, FALSE, sizeof(struct nw_decode_sample));
		e->handoff = g_array_new(FALSE, FALSE, sizeof(struct nw_prof_handoff_sample));
		if (e->selected) {
			selected++;
			nw_prof_report_plan(run.report, run.prefill_units +
			                    NW_PROF_CELL_UNITS * (double)run.decode_cells);
		}
	}
	if (!opts->json)
		printf("narwhal-profile %s: %s: %u of %u engine(s), %s sweep\n", PACKAGE_VERSION, file,
		       selected, run.n_engines, opts->quick ? "quick" : "full");

	nw_prof_discover(&run);
	/* One engine at a time: each sample's handoff also loads its partner. */
	for (uint32_t i = 0; i < run.n_engines; i++) {
		struct nw_prof_engine *e = &run.engines[i];

		if (e->selected && e->error == NULL)
			nw_prof_prefill(&run, e);
	}
	nw_prof_decode(&run);

	profiled = collect(&run, store, kept);
	if (profiled > 0) {
		g_free(store->created_at);
		store->created_at = nw_prof_utc_now();
		g_free(store->tool);
		store->tool = g_strdup("narwhal-profile " PACKAGE_VERSION);
		store->version = NW_PROFILE_STORE_VERSION;
		if (nw_profile_store_save(store, opts->out, &error)) {
			outcome.written = true;
			written = nw_profile_store_to_json(store);
		} else {
			nw_prof_report_note(run.report, "the store was not written: %s", error->message);
			g_clear_error(&error);
			status = EXIT_USAGE;
		}
	}
	if (status == 0 && profiled < selected)
		status = EXIT_FAILED;
	outcome.kept = kept;
	outcome.profiles = written;
	outcome.seconds = (double)(g_get_monotonic_time() - started) / 1e6;
	nw_prof_report_finish(run.report, &run, &outcome);

	json_decref(written);
	for (uint32_t i = 0; i < run.n_engines; i++) {
		struct nw_prof_engine *e = &run.engines[i];

		g_free(e->error);
		g_free(e->model);
		g_free(e->measured_at);
		g_array_unref(e->prefill);
		g_array_unref(e->decode);
		g_array_unref(e->handoff);
	}
	g_free(run.engines);
	nw_profile_store_free(store);
	nw_upstream_free(run.pool);
	nw_fleet_dialects_free(run.fleet);
	nw_plugin_metrics_free(metrics);
	nw_fleet_free(registry);
	nw_prof_report_free(run.report);
	return status;
}

/* opts->selected from the --engine ids (all when none); false with a
 * message when an id is not in the fleet. */
static bool
select_engines(const struct nw_config *cfg, char **ids, bool *selected)
{
	for (uint32_t i = 0; i < cfg->fleet.n_engines; i++)
		selected[i] = ids == NULL;
	for (char **id = ids; id != NULL && *id != NULL; id++) {
		bool found = false;

		for (uint32_t i = 0; i < cfg->fleet.n_engines; i++)
			if (strcmp(cfg->fleet.engines[i].id, *id) == 0)
				found = selected[i] = true;
		if (!found) {
			g_autoptr(GString) known = g_string_new(NULL);

			for (uint32_t i = 0; i < cfg->fleet.n_engines; i++)
				g_string_append_printf(known, "%s%s", i ? ", " : "", cfg->fleet.engines[i].id);
			fprintf(stderr, "narwhal-profile: --engine %s: no such engine in fleet.engines: "
			        "one of %s\n", *id, known->str);
			return false;
		}
	}
	return true;
}

int
main(int argc, char **argv)
{
	gboolean quick = FALSE, json = FALSE, version = FALSE;
	g_autofree char *config = NULL;
	g_autofree char *out = NULL;
	g_auto(GStrv) engine_ids = NULL;
	gint prompt_cap = NW_PROF_PROMPT_CAP;
	gint active_max = NW_PROF_ACTIVE_DEFAULT;
	GOptionEntry entries[] = {
		{ "config", 'c', 0, G_OPTION_ARG_FILENAME, &config,
		  "The daemon's configuration: the fleet, its timeouts and profiles.path", "FILE" },
		{ "quick", 0, 0, G_OPTION_ARG_NONE, &quick,
		  "A small sweep (CI, a first look): seconds per engine, not minutes", NULL },
		{ "engine", 'e', 0, G_OPTION_ARG_STRING_ARRAY, &engine_ids,
		  "Profile only this engine (repeat for more; default every engine)", "ID" },
		{ "out", 'o', 0, G_OPTION_ARG_FILENAME, &out,
		  "Write the store here instead of profiles.path", "FILE" },
		{ "json", 0, 0, G_OPTION_ARG_NONE, &json, "Print the summary as one JSON document",
		  NULL },
		{ "max-prompt-tokens", 0, 0, G_OPTION_ARG_INT, &prompt_cap,
		  "Longest prompt measured (default 8192): the engines' max_num_batched_tokens", "N" },
		{ "max-decode-streams", 0, 0, G_OPTION_ARG_INT, &active_max,
		  "Most decode streams measured at once (default 94): up to the engines' max_num_seqs",
		  "N" },
		{ "version", 'V', 0, G_OPTION_ARG_NONE, &version, "Print the version and exit", NULL },
		{ NULL },
	};
	g_autoptr(GOptionContext) ctx = g_option_context_new("- measure a Narwhal fleet's "
	                                                     "engines and write its profile store");
	struct nw_prof_options opts = { 0 };
	g_autofree bool *selected = NULL;
	struct nw_config *cfg;
	GError *error = NULL;
	int status;

	/* Messages in the operator's locale (GLib's quotation marks would
	 * print as '?' in "C"); numbers in JSON and configuration always in C. */
	setlocale(LC_ALL, "");
	setlocale(LC_NUMERIC, "C");
	g_option_context_add_main_entries(ctx, entries, NULL);
	if (!g_option_context_parse(ctx, &argc, &argv, &error)) {
		fprintf(stderr, "narwhal-profile: %s (see --help)\n", error->message);
		g_error_free(error);
		return EXIT_USAGE;
	}
	if (version) {
		printf("narwhal-profile %s (plugin ABI %d.%d, store version %d)\n", PACKAGE_VERSION,
		       NARWHAL_ABI_MAJOR, NARWHAL_ABI_MINOR, NW_PROFILE_STORE_VERSION);
		return 0;
	}
	if (config == NULL || argc != 1) {
		fprintf(stderr, "narwhal-profile: give the configuration with --config FILE and "
		        "nothing else (see --help)\n");
		return EXIT_USAGE;
	}
	if (prompt_cap < (gint)PROMPT_CAP_MIN || prompt_cap > (gint)PROMPT_CAP_MAX) {
		fprintf(stderr, "narwhal-profile: --max-prompt-tokens: %d is out of range: a count "
		        "from %u to %u\n", prompt_cap, PROMPT_CAP_MIN, PROMPT_CAP_MAX);
		return EXIT_USAGE;
	}

	if (active_max < 1 || active_max > NW_PROF_ACTIVE_LIMIT) {
		fprintf(stderr, "narwhal-profile: --max-decode-streams: %d is out of range: a count "
		        "from 1 to %u\n", active_max, NW_PROF_ACTIVE_LIMIT);
		return EXIT_USAGE;
	}

	cfg = nw_config_load_reported(config);
	if (cfg == NULL)
		return EXIT_USAGE;
	selected = g_new0(bool, MAX(cfg->fleet.n_engines, 1));
	opts = (struct nw_prof_options){
		.quick = quick, .json = json, .out = out != NULL ? out : cfg->profiles.path,
		.prompt_cap = (uint64_t)prompt_cap, .active_max = (uint32_t)active_max,
		.selected = selected,
	};
	if (!select_engines(cfg, engine_ids, selected)) {
		nw_config_free(cfg);
		return EXIT_USAGE;
	}
	if (!check_writable(opts.out, &error)) {
		fprintf(stderr, "narwhal-profile: cannot write the store at %s: %s: give a writable "
		        "path with --out or profiles.path\n", opts.out, error->message);
		g_error_free(error);
		nw_config_free(cfg);
		return EXIT_USAGE;
	}
	/* Plugins' own lines only when they matter; the summary is the output. */
	nw_log_setup("warning", NW_LOG_FORMAT_TEXT);

	curl_global_init(CURL_GLOBAL_DEFAULT);
	status = profile_fleet(config, cfg, &opts);
	curl_global_cleanup();
	nw_config_free(cfg);
	return status;
}
