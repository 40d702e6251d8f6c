/*
 * bench/decision/controller: the cost of one scheduled controller
 * evaluation (issue 13: under 1 ms at 1,024 engines). See
 * bench/decision/README.md.
 *
 * What the daemon does on a monitor pass, without the engines: the
 * controller host (control/controller.h) calls the built `reactive`
 * plugin, loaded through the real loader with a real host table and the
 * configuration section the daemon hands it, on a fleet of N engines made
 * from a configuration, half prefill and half decode, each with a measured
 * profile and resident work, and a demand ledger fed with a steady stream
 * of offers. The controller is advisory, so the roles never change and
 * every evaluation sees the same fleet.
 *
 * The host clock is CLOCK_MONOTONIC moved on by more than
 * controller.reactive.step_s before each evaluation, so that every call is
 * a full evaluation (the plugin's step gate lets it through) and the
 * plugin's price_split calls read a clock that moves, as in the daemon.
 * The program fails when an evaluation is not a full one: the plugin
 * answered "step", or stopped before pricing.
 *
 * Two variants take turns, evaluation by evaluation:
 *
 *   defaults   the spec's settings (controller.reactive.movement_margin 0.05)
 *   margin=0   movement_margin 0: a strictly better adjacent split qualifies,
 *              so every third evaluation proposes a move that the host's
 *              guards check and record as advised
 *
 * Each evaluation is timed alone: filling the engines as the guards see
 * them (the daemon's nw_monitor_role_engines) and nw_controller_scheduled.
 * The monitor's pricing pass before it (nw_pricing_pass) is timed apart.
 *
 *   controller [--engines N[,N...]] [--evaluations K] [--runs R]
 *              [--plugin-dir DIR] [--log-level LEVEL]
 */
#include "build-config.h"

#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <glib.h>

#include "control/controller.h"
#include "control/roles.h"
#include "core/config.h"
#include "core/demand.h"
#include "core/dialect.h"
#include "core/host.h"
#include "core/log.h"
#include "core/plugin-loader.h"
#include "core/pricing.h"
#include "core/profile.h"
#include "common.h"

enum { DEFAULTS, MARGIN0, N_VARIANTS };
static const char *const variant_names[N_VARIANTS] = { "defaults", "margin=0" };
/* Each variant's controller.reactive members beyond the defaults. */
static const char *const variant_reactive[N_VARIANTS] = { "", "\"movement_margin\": 0" };

/* The demand: half an offer per engine per second, prefill-heavy, so
 * that one engine more for prefill is the better split. */
#define OFFERS_PER_ENGINE_S 0.5
#define PROMPT_TOKENS 4000
#define OUTPUT_TOKENS 100

/* The clock moves this much past step_s between two evaluations. */
#define PAST_STEP_NS 1000000

/* One controller: its configuration, the plugin and its host table, the
 * controller host. */
struct variant {
	struct nw_config *cfg;
	struct nw_plugin *plugin;
	struct nw_host *host;
	struct nw_plugin_instance *inst;
	struct nw_controller_plugin call;
	struct nw_controller *ctl;
	/* The last run: evaluations by result; the last one's result and
	 * the gate it left. */
	uint64_t results[NW_CONTROLLER_RESULTS];
	int last_result;
	const char *gate;
};

struct bench {
	uint32_t n, n_prefill, n_decode;
	int64_t skew_ns;             /* the host clock is CLOCK_MONOTONIC plus this */
	int64_t step_ns;             /* the clock's move before each evaluation */
	int64_t fed_ns;              /* offers are made up to this instant */
	uint32_t warm_up;            /* evaluations per variant before the runs */
	struct nw_fleet *fleet;
	struct nw_engine_profile profile;
	struct nw_demand *demand;
	struct nw_plugin_metrics *metrics;
	struct nw_role_engine *roles;
	struct nw_role_change *out;
	struct nw_price_hold *holds;  /* the prefill work the ledger holds */
	uint32_t n_holds;
	struct variant v[N_VARIANTS];
	GRand *rand;
	FILE *log_sink;
};

static void
die(const char *what, const char *why)
{
	fprintf(stderr, "controller: %s: %s\n", what, why ? why : "failed");
	exit(1);
}

static int64_t
host_clock(void *data)
{
	const struct bench *b = data;

	return bench_now_ns() + b->skew_ns;
}

/* What the command line sets. */
struct options {
	const char *dir;             /* the built plugins */
	const char *log_level;       /* log.level; NULL: its default */
	uint32_t evaluations, runs;
};

/* A configuration of n engines, alternately prefill and decode (vLLM's
 * dialect, which takes either role per request), with an advisory
 * reactive controller and the variant's settings. */
static struct nw_config *
config_new(uint32_t n, int variant, const struct options *o)
{
	GString *text = g_string_new("{\"slo\": {\"ttft_s\": 2.0, \"tpot_s\": 0.1}, ");
	GPtrArray *problems = NULL;
	struct nw_config *cfg;

	if (o->log_level != NULL)
		g_string_append_printf(text, "\"log\": {\"level\": \"%s\"}, ", o->log_level);
	g_string_append_printf(text, "\"controller\": {\"policy\": \"reactive\", \"advisory\": true, "
	                       "\"reactive\": {%s}}, \"fleet\": {\"engines\": [",
	                       variant_reactive[variant]);
	for (uint32_t i = 0; i < n; i++)
		g_string_append_printf(text, "%s{\"id\": \"engine-%04u\", \"url\": "
		                       "\"http://127.0.0.1:%u\", \"role\": \"%s\"}", i ? ", " : "",
		                       i, 10000 + i, i % 2 == 0 ? "prefill" : "decode");
	g_string_append(text, "]}}");
	cfg = nw_config_load_string(text->str, "bench.json", &problems);
	g_string_free(text, TRUE);
	if (cfg == NULL) {
		const struct nw_config_error *e = g_ptr_array_index(problems, 0);
		g_autofree char *line = nw_config_error_format("bench.json", e);

		die("configuration", line);
	}
	g_ptr_array_unref(problems);
	return cfg;
}

/* The section the daemon hands the controller plugin at create()
 * (daemon-generation.c, docs/plugins.md "Its settings"): {"reactive":
 * controller.reactive, "thresholds": controller.thresholds}, every field
 * as the effective configuration has it (transfer full). */
static json_t *
controller_section(const struct nw_config *cfg)
{
	json_t *all = nw_config_to_json(cfg);
	json_t *c = json_object_get(all, "controller");
	json_t *section = json_pack("{s:O, s:O}", "reactive", json_object_get(c, "reactive"),
	                            "thresholds", json_object_get(c, "thresholds"));

	json_decref(all);
	return section;
}

static void
variant_init(struct bench *b, struct variant *v, int variant, const struct options *o)
{
	g_autofree char *file = NULL;
	GError *error = NULL;
	json_t *config;

	v->cfg = config_new(b->n, variant, o);
	file = nw_plugin_resolve(NARWHAL_KIND_CONTROLLER, v->cfg->controller.policy, NULL, o->dir);
	v->plugin = nw_plugin_load(NARWHAL_KIND_CONTROLLER, v->cfg->controller.policy, file, &error);
	if (v->plugin == NULL)
		die("controller plugin", error->message);
	v->host = nw_host_new(NARWHAL_KIND_CONTROLLER, v->plugin->desc->name, host_clock, b,
	                      b->fleet, b->metrics);
	config = controller_section(v->cfg);
	v->inst = nw_plugin_instance_new(v->plugin, nw_host_table(v->host), config, &error);
	json_decref(config);
	if (v->inst == NULL)
		die(v->cfg->controller.policy, error->message);
	v->call = (struct nw_controller_plugin){ v->plugin->desc->name, &v->plugin->ops.controller,
	                                         v->inst->ctx };
	v->ctl = nw_controller_new(v->cfg);
}

static void
variant_clear(struct variant *v)
{
	nw_controller_free(v->ctl);
	nw_plugin_instance_free(v->inst);
	nw_host_free(v->host);
	nw_plugin_free(v->plugin);
	nw_config_free(v->cfg);
}

/* Resident work as decision.c gives it (common.h), the prefill work
 * also in the ledger, so that the pool's held work is summed as in the
 * daemon. */
static void
residents_init(struct bench *b, int64_t now)
{
	bench_residents_init(b->fleet, b->rand);
	b->holds = g_new0(struct nw_price_hold, 3 * (size_t)b->n);
	for (uint32_t i = 0; i < b->n; i++) {
		const struct narwhal_engine_view *e = &b->fleet->engines[i];

		for (uint32_t k = 0; k < e->resident_prefill + e->queued_prefill; k++) {
			struct nw_price_hold *h = &b->holds[b->n_holds++];

			h->arrival_ns = now;
			nw_pricing_pending(b->fleet, h, (uint64_t)g_rand_int_range(b->rand, 64, 4096));
			if (k < e->resident_prefill)
				nw_pricing_resident(b->fleet, h, i, now);
			else
				nw_pricing_queued(b->fleet, h, i);
		}
	}
}

static struct bench *
bench_new(uint32_t n, const struct options *o)
{
	struct bench *b = g_new0(struct bench, 1);
	/* The variants' configurations make the same fleet and windows. */
	g_autoptr(nw_config) cfg = config_new(n, DEFAULTS, o);
	struct nw_demand_windows w;
	int64_t now;

	b->n = n;
	b->rand = g_rand_new_with_seed(20261201);
	b->metrics = nw_plugin_metrics_new();
	/* The plugin logs its proposals as in the daemon: formatted and handed
	 * to the writer thread, here bound for /dev/null. */
	b->log_sink = fopen("/dev/null", "w");
	if (b->log_sink == NULL || !nw_log_setup(cfg->log.level, cfg->log.format))
		die("log", NULL);
	nw_log_set_stream(b->log_sink);
	nw_log_writer_start(NW_LOG_PENDING_CAP);
	b->step_ns = (int64_t)(cfg->controller.reactive.step_s * 1e9) + PAST_STEP_NS;
	b->warm_up = (uint32_t)ceil(cfg->controller.reactive.window_s * 1e9 / (double)b->step_ns) +
	             10;
	now = host_clock(b);
	b->fleet = nw_fleet_new(cfg, now);
	bench_profile_init(&b->profile);
	for (uint32_t i = 0; i < n; i++) {
		nw_fleet_set_profile(b->fleet, i, &b->profile);
		if (b->fleet->engines[i].role == NARWHAL_ROLE_PREFILL)
			b->n_prefill++;
		else
			b->n_decode++;
	}
	residents_init(b, now);
	nw_demand_windows_from_config(cfg, &w);
	b->demand = nw_demand_new(&w, now);
	b->fed_ns = now;
	b->roles = g_new(struct nw_role_engine, n);
	b->out = g_new(struct nw_role_change, n);
	for (int v = 0; v < N_VARIANTS; v++)
		variant_init(b, &b->v[v], v, o);
	return b;
}

static void
bench_free(struct bench *b)
{
	for (int v = 0; v < N_VARIANTS; v++)
		variant_clear(&b->v[v]);
	for (uint32_t k = 0; k < b->n_holds; k++)
		nw_pricing_release(b->fleet, &b->holds[k]);
	nw_demand_free(b->demand);
	nw_fleet_free(b->fleet);
	nw_plugin_metrics_free(b->metrics);
	nw_log_writer_stop();
	nw_log_set_stream(NULL);
	fclose(b->log_sink);
	g_free(b->holds);
	g_free(b->roles);
	g_free(b->out);
	g_rand_free(b->rand);
	g_free(b);
}

/* The offers that arrived from the last fed instant up to now, evenly
 * spread, each admitted and completed with its output. */
static void
feed(struct bench *b, int64_t now)
{
	double per_ns = OFFERS_PER_ENGINE_S * b->n / 1e9;
	uint64_t k = (uint64_t)floor((double)(now - b->fed_ns) * per_ns);

	for (uint64_t j = 0; j < k; j++) {
		struct nw_demand_ticket t = { 0 };
		int64_t at = b->fed_ns + (int64_t)((double)(j + 1) / per_ns);

		nw_demand_offer(b->demand, &t, at, PROMPT_TOKENS, true, OUTPUT_TOKENS);
		nw_demand_admit(b->demand, &t);
		nw_demand_end(b->demand, &t, at, true, OUTPUT_TOKENS);
	}
	b->fed_ns += (int64_t)((double)k / per_ns);
}

/* The engines as the guards see them, as the monitor fills them
 * (nw_role_engine_of), each behind a dialect with vLLM's capabilities: it
 * hands off and takes either role per request, so every engine may move. */
static void
fill_roles(struct bench *b)
{
	static const struct nw_dialect vllm_like = {
		.name = "vllm",
		.caps = NARWHAL_DIALECT_HANDOFF_SEQUENTIAL | NARWHAL_DIALECT_PER_REQUEST_ROLES,
	};

	for (uint32_t i = 0; i < b->n; i++)
		b->roles[i] = nw_role_engine_of(&b->fleet->engines[i], &vllm_like);
}

/* The index of a result in nw_controller_result_names. */
static int
result_index(const char *name)
{
	for (int r = 0; r < NW_CONTROLLER_RESULTS; r++)
		if (strcmp(nw_controller_result_names[r], name) == 0)
			return r;
	die("results", name);
	return -1;
}

/* The gates of a reactive evaluation that stopped before it priced the
 * splits (plugins/controller/reactive.c), and the host's for a plugin
 * that failed. */
static bool
stopped_before_pricing(const char *gate)
{
	static const char *const early[] = { "step", "min_arrivals", "demand_floor", "no_split",
	                                     "no_profile", "no_candidate", "plugin_failed" };

	for (size_t k = 0; gate != NULL && k < G_N_ELEMENTS(early); k++)
		if (strcmp(gate, early[k]) == 0)
			return true;
	return false;
}

/* One scheduled evaluation of variant v: the clock moves past step_s,
 * the offers of that time arrive, the monitor's pricing pass runs (its
 * nanoseconds in *pass_ns), then the evaluation (its nanoseconds
 * returned). Checked: a full evaluation that priced the splits (unless
 * warming up), and nothing applied. */
static int64_t
evaluate_once(struct bench *b, struct variant *v, bool warm_up, int64_t *pass_ns)
{
	struct nw_controller_summary before, after;
	struct nw_controller_pass pass = {
		.fleet = b->fleet, .demand = b->demand, .engines = b->roles, .n = b->n,
		.plugin = &v->call,
	};
	int64_t t0, t1, t2;
	uint32_t k;

	b->skew_ns += b->step_ns;
	pass.now_ns = host_clock(b);
	feed(b, pass.now_ns);
	nw_controller_summary(v->ctl, &before);
	t0 = bench_now_ns();
	nw_pricing_pass(b->fleet, pass.now_ns);
	t1 = bench_now_ns();
	fill_roles(b);
	k = nw_controller_scheduled(v->ctl, &pass, b->out, b->n);
	t2 = bench_now_ns();
	*pass_ns = t1 - t0;

	nw_controller_summary(v->ctl, &after);
	if (after.evaluations[0] != before.evaluations[0] + 1)
		die(variant_names[v - b->v], "the plugin answered \"step\": not a full evaluation");
	for (uint32_t j = 0; j < k; j++)
		if (b->out[j].applied)
			die(variant_names[v - b->v], "a role change was applied in advisory mode");
	for (int r = 0; r < NW_CONTROLLER_RESULTS; r++)
		if (after.results[0][r] != before.results[0][r]) {
			v->results[r]++;
			v->last_result = r;
		}
	v->gate = after.gate;
	if (!warm_up && (stopped_before_pricing(after.gate) || !isfinite(after.worst_ratio_current)))
		die(variant_names[v - b->v], after.gate ? after.gate : "the split was not priced");
	return t2 - t1;
}

/* At the end of a run: the plugin's own worst ratio of its last
 * evaluation (NaN when it stopped before pricing) is a number, and the
 * margin=0 variant proposed moves that the guards recorded as advised. */
static void
check_run(struct bench *b)
{
	for (int v = 0; v < N_VARIANTS; v++) {
		json_t *state = nw_controller_to_json(b->v[v].ctl, NULL, 0);
		json_t *worst = json_object_get(json_object_get(json_object_get(state, "last"),
		                                                "inputs"), "plugin_worst_ratio");
		bool priced = json_is_number(worst);

		json_decref(state);
		if (!priced)
			die(variant_names[v], "the plugin did not price its last evaluation");
	}
	if (b->v[MARGIN0].results[result_index("advised")] == 0)
		die(variant_names[MARGIN0], "no move was proposed: the demand no longer leads to one");
}

/* The rows printed: each variant's evaluations, those of margin=0 that
 * proposed a move (the guards' path), the monitor's pass. */
enum { ROW_DEFAULTS, ROW_MARGIN0, ROW_MOVES, ROW_PASS, N_ROWS };
static const char *const row_names[N_ROWS] = { "defaults", "margin=0", "  moves", "pass" };

struct row {
	int64_t *ns;                 /* this run's samples */
	size_t len;
	double *p50, *p99, *max;     /* by run */
	double worst;                /* the largest sample of every run */
};

static void
row_add(struct row *row, int64_t ns)
{
	row->ns[row->len++] = ns;
}

/* Runs of K evaluations per variant on n engines; one line per row. */
static void
bench_size(uint32_t n, const struct options *o)
{
	struct bench *b = bench_new(n, o);
	uint32_t evaluations = o->evaluations > 0 ? o->evaluations : n <= 256 ? 2000 : 1000;
	uint32_t runs = o->runs;
	struct row rows[N_ROWS] = { { 0 } };
	int advised = result_index("advised");
	int64_t pass_ns;

	printf("engines %u (%u prefill, %u decode), %u runs of %u evaluations per variant\n", n,
	       b->n_prefill, b->n_decode, runs, evaluations);
	for (int w = 0; w < N_ROWS; w++) {
		rows[w].ns = g_new(int64_t, (size_t)evaluations * N_VARIANTS);
		rows[w].p50 = g_new(double, runs);
		rows[w].p99 = g_new(double, runs);
		rows[w].max = g_new(double, runs);
	}
	/* Past the long horizon and the evidence window's span, and the
	 * caches, the metric tables and the records warm. */
	for (uint32_t i = 0; i < b->warm_up; i++)
		for (int v = 0; v < N_VARIANTS; v++)
			evaluate_once(b, &b->v[v], true, &pass_ns);
	for (uint32_t r = 0; r < runs; r++) {
		for (int v = 0; v < N_VARIANTS; v++)
			memset(b->v[v].results, 0, sizeof b->v[v].results);
		for (int w = 0; w < N_ROWS; w++)
			rows[w].len = 0;
		for (uint32_t i = 0; i < evaluations; i++)
			for (int v = 0; v < N_VARIANTS; v++) {
				int64_t ns = evaluate_once(b, &b->v[v], false, &pass_ns);

				row_add(&rows[v == DEFAULTS ? ROW_DEFAULTS : ROW_MARGIN0], ns);
				if (v == MARGIN0 && b->v[v].last_result == advised)
					row_add(&rows[ROW_MOVES], ns);
				row_add(&rows[ROW_PASS], pass_ns);
			}
		check_run(b);
		for (int w = 0; w < N_ROWS; w++) {
			rows[w].p50[r] = bench_percentile_us(rows[w].ns, rows[w].len, 0.50);
			rows[w].p99[r] = bench_percentile_us(rows[w].ns, rows[w].len, 0.99);
			rows[w].max[r] = bench_percentile_us(rows[w].ns, rows[w].len, 1.0);
			rows[w].worst = MAX(rows[w].worst, rows[w].max[r]);
		}
	}
	printf("%-9s %9s %9s %9s %12s  %s\n", "variant", "p50 us", "p99 us", "max us",
	       "max all runs", "last run: unchanged advised refused, last gate");
	for (int w = 0; w < N_ROWS; w++) {
		const struct variant *v = w == ROW_DEFAULTS ? &b->v[DEFAULTS]
		                          : w == ROW_MARGIN0 ? &b->v[MARGIN0] : NULL;

		printf("%-9s %9.2f %9.2f %9.2f %12.2f  ", row_names[w], bench_median(rows[w].p50, runs),
		       bench_median(rows[w].p99, runs), bench_median(rows[w].max, runs), rows[w].worst);
		if (v != NULL)
			printf("%" G_GUINT64_FORMAT " %" G_GUINT64_FORMAT " %" G_GUINT64_FORMAT ", %s\n",
			       v->results[result_index("unchanged")], v->results[advised],
			       v->results[result_index("refused")], v->gate ? v->gate : "none");
		else if (w == ROW_MOVES)
			printf("- (the margin=0 evaluations that proposed a move)\n");
		else
			printf("- (the monitor's pricing pass before each evaluation)\n");
		g_free(rows[w].ns);
		g_free(rows[w].p50);
		g_free(rows[w].p99);
		g_free(rows[w].max);
	}
	printf("\n");
	bench_free(b);
}

int
main(int argc, char **argv)
{
	g_autofree char *engines = NULL, *dir = NULL, *log_level = NULL;
	gint evaluations = 0, runs = 5;
	GOptionEntry entries[] = {
		{ "engines", 'n', 0, G_OPTION_ARG_STRING, &engines,
		  "Fleet sizes, comma-separated (default 64,1024)", "N[,N...]" },
		{ "evaluations", 'k', 0, G_OPTION_ARG_INT, &evaluations,
		  "Evaluations per variant per run (default 2000 for up to 256 engines, else 1000)",
		  "K" },
		{ "runs", 'r', 0, G_OPTION_ARG_INT, &runs, "Runs; figures are medians (default 5)",
		  "R" },
		{ "plugin-dir", 'd', 0, G_OPTION_ARG_FILENAME, &dir,
		  "Built plugins (default $NARWHAL_PLUGIN_DIR, else ./plugins/.libs)", "DIR" },
		{ "log-level", 'l', 0, G_OPTION_ARG_STRING, &log_level,
		  "log.level of the configuration (default its default, info): the plugin's log "
		  "lines are written to /dev/null", "LEVEL" },
		{ NULL },
	};
	g_autoptr(GOptionContext) ctx = g_option_context_new("- time controller evaluations");
	GError *error = NULL;
	g_auto(GStrv) sizes = NULL;
	struct options o;

	/* Messages in the operator's locale, numbers always in C (as the
	 * programs do). */
	setlocale(LC_ALL, "");
	setlocale(LC_NUMERIC, "C");
	g_option_context_add_main_entries(ctx, entries, NULL);
	if (!g_option_context_parse(ctx, &argc, &argv, &error))
		die("options", error->message);
	if (runs < 1 || evaluations < 0)
		die("options", "--runs must be at least 1, --evaluations at least 0");
	if (dir == NULL)
		dir = g_strdup(g_getenv("NARWHAL_PLUGIN_DIR") ? g_getenv("NARWHAL_PLUGIN_DIR")
		                                               : "plugins/.libs");
	o = (struct options){ .dir = dir, .log_level = log_level,
	                      .evaluations = (uint32_t)evaluations, .runs = (uint32_t)runs };
	sizes = g_strsplit(engines ? engines : "64,1024", ",", -1);
	for (char **s = sizes; *s != NULL; s++) {
		guint64 n;

		/* At least two engines a side; ports 10000 on stay below 65536. */
		if (!g_ascii_string_to_unsigned(*s, 10, 4, 50000, &n, &error))
			die("--engines", error->message);
		bench_size((uint32_t)n, &o);
	}
	return 0;
}
