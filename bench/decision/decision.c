/*
 * bench/decision: the cost of one admission plus placement decision (issue
 * 12: at most 20 us at p99 with 64 engines, at most 200 us with 1,024;
 * ratios against an empty decision in the same run are the reported form).
 * See bench/decision/README.md.
 *
 * The built plugins are loaded through the real loader and given the real
 * host table (src/core/host.h) over a fleet of N engines, half prefill and
 * half decode, each with a synthetic measured profile and some resident
 * work. One decision is: the admission plugin's decide(), then the
 * placement plugin's place() for the prefill phase over the prefill
 * engines, then for the decode phase over the decode engines. Three
 * variants take turns, request by request, in the same run:
 *
 *   empty        open admission, and the first eligible engine for both
 *                phases (no placement call): the floor
 *   open+ll      open admission, least-loaded placement (the old defaults)
 *   pred+slo     predictive admission, slo-cost placement (the defaults)
 *
 * Each decision is timed alone with CLOCK_MONOTONIC; a run gives p50 and
 * p99 per variant, and the medians over runs are printed with the ratio of
 * each variant's p99 to the empty decision's p99 of the same run.
 *
 * Beside the decisions, in the same loop, one split priced by the host
 * (core/split-price.h, the price_split service of ABI 2.2) around the
 * fleet's split: once at an instant not yet priced (the pool's held
 * prefill work is summed over the live pool) and once more at the same
 * instant (the sum is reused, as by the other splits of one evaluation).
 *
 * The host's prefill_queue_seconds (the FIFO projection) may answer "no
 * profile" in a build without it; then, unless told --queue=host, the
 * bench gives the plugins a stand-in projection so that they take their
 * priced paths, and says so.
 *
 *   decision [--engines N[,N...]] [--requests K] [--runs R] [--queue MODE]
 *            [--plugin-dir DIR]
 */
#include "build-config.h"

#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <glib.h>

#include "core/config.h"
#include "core/host.h"
#include "core/plugin-loader.h"
#include "core/profile.h"
#include "core/split-price.h"
#include "common.h"

enum { EMPTY, OPEN_LL, PRED_SLO, N_VARIANTS };
enum queue_mode { QUEUE_AUTO, QUEUE_HOST, QUEUE_STAND_IN };
static const char *const variant_names[N_VARIANTS] = { "empty", "open+ll", "pred+slo" };
/* The split price rows: at a new instant, and again at the same one. */
enum { PRICE_NEW, PRICE_SAME, N_PRICES };
static const char *const price_names[N_PRICES] = { "price-new", "price-hit" };

/* A plugin's host table: the real one (src/core/host.c), with the
 * prefill queue projection answered by a stand-in when the host has none
 * (see stand_in_queue_s). Every other service is the host's own. */
struct table {
	struct narwhal_host table;     /* what the plugin gets; host_ctx is this */
	const struct narwhal_host *real;
	struct nw_host *host;
	bool stand_in;
};

/* One admission and one placement plugin, each with its own host table. */
struct pair {
	struct nw_plugin *admission, *placement;
	struct table *admission_host, *placement_host;
	struct nw_plugin_instance *admission_inst, *placement_inst;
};

struct bench {
	uint32_t n;
	struct nw_config cfg;
	struct nw_engine_config *engine_cfg;
	struct nw_fleet *fleet;
	struct nw_engine_profile profile;
	struct nw_plugin_metrics *metrics;
	uint32_t *prefill, *decode; /* eligible lists */
	uint32_t n_prefill, n_decode;
	struct pair pairs[N_VARIANTS];
	bool stand_in;              /* the stand-in queue projection is in use */
	GRand *rand;
	/* Outcomes of the last run, by variant: admitted, refused, failed. */
	uint64_t admitted[N_VARIANTS], refused[N_VARIANTS], failed[N_VARIANTS];
	/* The split prices of the last run: in the domain, outside it, not
	 * priced (not OK). */
	uint64_t priced_in[N_PRICES], priced_out[N_PRICES], unpriced[N_PRICES];
	int64_t instant;            /* the last instant priced at (virtual) */
	uint32_t decode_streams;    /* what the decode engines hold at the start */
};

static void
die(const char *what, GError *error)
{
	fprintf(stderr, "decision: %s: %s\n", what, error ? error->message : "failed");
	exit(1);
}

static int64_t
fwd_now_ns(void *ctx)
{
	const struct table *t = ctx;

	return t->real->now_ns(t->real->host_ctx);
}

static void
fwd_log(void *ctx, narwhal_log_level level, const char *message)
{
	const struct table *t = ctx;

	t->real->log(t->real->host_ctx, level, message);
}

static void
fwd_counter_add(void *ctx, const char *name, double delta)
{
	const struct table *t = ctx;

	t->real->counter_add(t->real->host_ctx, name, delta);
}

static void
fwd_gauge_set(void *ctx, const char *name, double value)
{
	const struct table *t = ctx;

	t->real->gauge_set(t->real->host_ctx, name, value);
}

static const struct narwhal_fleet_view *
fwd_fleet(void *ctx)
{
	const struct table *t = ctx;

	return t->real->fleet(t->real->host_ctx);
}

static narwhal_estimate_status
fwd_prefill_seconds(void *ctx, uint32_t engine, uint64_t tokens, double *out)
{
	const struct table *t = ctx;

	return t->real->prefill_seconds(t->real->host_ctx, engine, tokens, out);
}

static narwhal_estimate_status
fwd_decode_interval_seconds(void *ctx, uint32_t engine, uint32_t active, uint64_t kv,
                            double *out)
{
	const struct table *t = ctx;

	return t->real->decode_interval_seconds(t->real->host_ctx, engine, active, kv, out);
}

/* The stand-in FIFO projection: the engine's prefill of this prompt, once
 * for itself and once for each request resident on or queued for it. O(1),
 * like a projection the host keeps up to date; it only makes the plugins
 * take their priced paths. */
static narwhal_estimate_status
stand_in_queue_s(const struct table *t, uint32_t engine, uint64_t tokens, double *out)
{
	const struct narwhal_fleet_view *fleet = t->real->fleet(t->real->host_ctx);
	const struct narwhal_engine_view *e;
	narwhal_estimate_status st;
	double own;

	if (fleet == NULL || engine >= fleet->n_engines)
		return NARWHAL_ESTIMATE_NO_PROFILE;
	e = narwhal_fleet_engine(fleet, engine);
	if (e->resident_decode > 0)
		return NARWHAL_ESTIMATE_OUT_OF_DOMAIN;
	st = t->real->prefill_seconds(t->real->host_ctx, engine, tokens, &own);
	if (st == NARWHAL_ESTIMATE_OK)
		*out = own * (1.0 + e->resident_prefill + e->queued_prefill);
	return st;
}

static narwhal_estimate_status
fwd_prefill_queue_seconds(void *ctx, uint32_t engine, uint64_t tokens, double *out)
{
	const struct table *t = ctx;

	if (t->stand_in)
		return stand_in_queue_s(t, engine, tokens, out);
	return t->real->prefill_queue_seconds(t->real->host_ctx, engine, tokens, out);
}

static struct table *
table_new(struct bench *b, narwhal_plugin_kind kind, const char *name)
{
	struct table *t = g_new0(struct table, 1);

	t->host = nw_host_new(kind, name, NULL, NULL, b->fleet, b->metrics);
	t->real = nw_host_table(t->host);
	t->stand_in = b->stand_in;
	t->table = *t->real;
	t->table.host_ctx = t;
	t->table.now_ns = fwd_now_ns;
	t->table.log = fwd_log;
	t->table.counter_add = fwd_counter_add;
	t->table.gauge_set = fwd_gauge_set;
	t->table.fleet = fwd_fleet;
	t->table.prefill_seconds = fwd_prefill_seconds;
	t->table.decode_interval_seconds = fwd_decode_interval_seconds;
	t->table.prefill_queue_seconds = fwd_prefill_queue_seconds;
	return t;
}

static void
table_free(struct table *t)
{
	if (t == NULL)
		return;
	nw_host_free(t->host);
	g_free(t);
}

static void
load_pair(struct bench *b, struct pair *pr, const char *dir, const char *admission,
          const char *admission_config, const char *placement)
{
	g_autofree char *afile = nw_plugin_resolve(NARWHAL_KIND_ADMISSION, admission, NULL, dir);
	g_autofree char *pfile = NULL;
	json_t *config = json_loads(admission_config, 0, NULL);
	GError *error = NULL;

	pr->admission = nw_plugin_load(NARWHAL_KIND_ADMISSION, admission, afile, &error);
	if (pr->admission == NULL)
		die(admission, error);
	pr->admission_host = table_new(b, NARWHAL_KIND_ADMISSION, admission);
	pr->admission_inst = nw_plugin_instance_new(pr->admission, &pr->admission_host->table,
	                                            config, &error);
	json_decref(config);
	if (pr->admission_inst == NULL)
		die(admission, error);
	if (placement == NULL)
		return;
	pfile = nw_plugin_resolve(NARWHAL_KIND_PLACEMENT, placement, NULL, dir);
	pr->placement = nw_plugin_load(NARWHAL_KIND_PLACEMENT, placement, pfile, &error);
	if (pr->placement == NULL)
		die(placement, error);
	pr->placement_host = table_new(b, NARWHAL_KIND_PLACEMENT, placement);
	pr->placement_inst = nw_plugin_instance_new(pr->placement, &pr->placement_host->table,
	                                            NULL, &error);
	if (pr->placement_inst == NULL)
		die(placement, error);
}

static void
pair_free(struct pair *pr)
{
	nw_plugin_instance_free(pr->admission_inst);
	nw_plugin_instance_free(pr->placement_inst);
	table_free(pr->admission_host);
	table_free(pr->placement_host);
	nw_plugin_free(pr->admission);
	nw_plugin_free(pr->placement);
}

/* Whether the host projects the prefill queue (the FIFO projection of
 * issue 12), asked of a host table over this fleet. */
static bool
host_projects_queue(struct bench *b)
{
	struct nw_host *h = nw_host_new(NARWHAL_KIND_ADMISSION, "probe", NULL, NULL, b->fleet,
	                                b->metrics);
	const struct narwhal_host *t = nw_host_table(h);
	double v;
	bool ok = t->prefill_queue_seconds(t->host_ctx, b->prefill[0], 1000, &v) ==
	          NARWHAL_ESTIMATE_OK;

	nw_host_free(h);
	return ok;
}

static struct bench *
bench_new(uint32_t n, const char *dir, enum queue_mode queue_mode)
{
	struct bench *b = g_new0(struct bench, 1);

	b->n = n;
	b->rand = g_rand_new_with_seed(20261201);
	b->engine_cfg = g_new0(struct nw_engine_config, n);
	for (uint32_t i = 0; i < n; i++) {
		b->engine_cfg[i].id = g_strdup_printf("engine-%04u", i);
		b->engine_cfg[i].role = i % 2 == 0 ? NW_ROLE_PREFILL : NW_ROLE_DECODE;
	}
	b->cfg.fleet.engines = b->engine_cfg;
	b->cfg.fleet.n_engines = n;
	b->cfg.slo.ttft_s = 2.0;
	b->cfg.slo.tpot_s = 0.1;
	b->fleet = nw_fleet_new(&b->cfg, bench_now_ns());
	bench_profile_init(&b->profile);
	b->prefill = g_new(uint32_t, n);
	b->decode = g_new(uint32_t, n);
	for (uint32_t i = 0; i < n; i++) {
		nw_fleet_set_profile(b->fleet, i, &b->profile);
		if (b->fleet->engines[i].role == NARWHAL_ROLE_PREFILL)
			b->prefill[b->n_prefill++] = i;
		else
			b->decode[b->n_decode++] = i;
	}
	bench_residents_init(b->fleet, b->rand);
	for (uint32_t i = 0; i < n; i++)
		b->decode_streams += b->fleet->engines[i].resident_decode;
	b->metrics = nw_plugin_metrics_new();
	switch (queue_mode) {
	case QUEUE_HOST:
		b->stand_in = false;
		break;
	case QUEUE_STAND_IN:
		b->stand_in = true;
		break;
	default:
		b->stand_in = !host_projects_queue(b);
		break;
	}
	load_pair(b, &b->pairs[EMPTY], dir, "open", "{}", NULL);
	load_pair(b, &b->pairs[OPEN_LL], dir, "open", "{}", "least-loaded");
	load_pair(b, &b->pairs[PRED_SLO], dir, "predictive",
	          "{\"admission_margin\": 0.0, \"without_profiles\": \"refuse\"}", "slo-cost");
	return b;
}

static void
bench_free(struct bench *b)
{
	for (int v = 0; v < N_VARIANTS; v++)
		pair_free(&b->pairs[v]);
	nw_plugin_metrics_free(b->metrics);
	nw_fleet_free(b->fleet);
	for (uint32_t i = 0; i < b->n; i++)
		g_free(b->engine_cfg[i].id);
	g_free(b->engine_cfg);
	g_free(b->prefill);
	g_free(b->decode);
	g_rand_free(b->rand);
	g_free(b);
}

static uint32_t
place_with(const struct pair *pr, const struct narwhal_placement_request *req)
{
	struct narwhal_placement_result out = {
		.struct_size = sizeof out, .engine = UINT32_MAX, .projected_slo_ratio = NAN,
	};

	if (pr->placement == NULL)
		return req->eligible[0]; /* the trivial choice */
	if (pr->placement->ops.placement.place(pr->placement_inst->ctx, req, &out) != 0)
		return UINT32_MAX;
	return out.engine;
}

/* One decision; returns its nanoseconds. The fleet then takes on the work
 * placed, as the host would, so the state moves between decisions. */
static int64_t
decide_once(struct bench *b, int v, uint64_t prompt, uint32_t max_tokens, uint64_t handle)
{
	const struct pair *pr = &b->pairs[v];
	struct narwhal_admission_request areq = {
		.struct_size = sizeof areq, .request = handle, .request_id = "bench",
		.prompt_tokens = prompt, .prompt_tokens_exact = true, .max_tokens = max_tokens,
		.admitted = 0, .admitted_limit = 512, .queue_capacity = 0,
	};
	struct narwhal_admission_decision dec = {
		.struct_size = sizeof dec, .verdict = NARWHAL_REFUSE, .retry_after_s = 1.0,
		.projected_ttft_s = NAN,
	};
	struct narwhal_placement_request preq = {
		.struct_size = sizeof preq, .request = handle, .request_id = "bench",
		.phase = NARWHAL_PHASE_PREFILL, .prompt_tokens = prompt, .max_tokens = max_tokens,
		.eligible = b->prefill, .n_eligible = b->n_prefill, .paired_engine = -1,
	};
	uint32_t p = UINT32_MAX, d = UINT32_MAX;
	int64_t t0, t1;
	int rc;

	t0 = bench_now_ns();
	rc = pr->admission->ops.admission.decide(pr->admission_inst->ctx, &areq, &dec);
	/* Placement runs whatever admission said, so every variant does the
	 * same work whatever the host's estimators answer. */
	p = place_with(pr, &preq);
	preq.phase = NARWHAL_PHASE_DECODE;
	preq.eligible = b->decode;
	preq.n_eligible = b->n_decode;
	preq.paired_engine = (int32_t)p;
	d = place_with(pr, &preq);
	t1 = bench_now_ns();

	if (rc != 0)
		b->failed[v]++;
	else if (dec.verdict == NARWHAL_ADMIT || dec.verdict == NARWHAL_ADMIT_QUEUE)
		b->admitted[v]++;
	else
		b->refused[v]++;
	/* The work lands, and some finishes: the loads stay bounded. */
	if (p < b->n) {
		struct narwhal_engine_view *e = &b->fleet->engines[p];

		e->queued_prefill = e->queued_prefill >= 4 ? 0 : e->queued_prefill + 1;
	}
	if (d < b->n) {
		struct narwhal_engine_view *e = &b->fleet->engines[d];

		if (e->resident_decode >= 96) {
			e->resident_decode = 0;
			e->resident_kv_tokens = 0;
		}
		e->resident_decode++;
		e->resident_kv_tokens += prompt + max_tokens;
	}
	return t1 - t0;
}

/* One split priced, k-th of the three around the fleet's split (the live
 * one, one engine more prefill, one more decode), at a new instant or at
 * the last one again; returns its nanoseconds. The demand is half a
 * request per second per engine, of 2,000-token prompts and 200-token
 * outputs, at the spec's default utilization. */
static int64_t
price_once(struct bench *b, int row, uint32_t k)
{
	static const int shift[3] = { 0, 1, -1 };
	struct narwhal_split_query q = {
		.struct_size = sizeof q,
		.prefill = (uint32_t)((int)b->n_prefill + shift[k % 3]),
		.decode = (uint32_t)((int)b->n_decode - shift[k % 3]),
		.arrivals_per_s = 0.5 * b->n, .prompt_tokens = 2000, .output_tokens = 200,
		.utilization = 0.8, .decode_streams = b->decode_streams,
	};
	struct narwhal_split_price out;
	narwhal_estimate_status st;
	int64_t t0, t1;

	if (row == PRICE_NEW)
		b->instant += 1000; /* a microsecond on: the held work is summed again */
	t0 = bench_now_ns();
	st = nw_split_price(b->fleet, &q, b->instant, &out);
	t1 = bench_now_ns();
	if (st != NARWHAL_ESTIMATE_OK)
		b->unpriced[row]++;
	else if (out.in_domain)
		b->priced_in[row]++;
	else
		b->priced_out[row]++;
	return t1 - t0;
}

/* Run `runs` runs of `requests` decisions per variant on n engines and
 * print one line per variant. */
static void
bench_size(uint32_t n, uint32_t requests, uint32_t runs, const char *dir,
           enum queue_mode queue_mode)
{
	struct bench *b = bench_new(n, dir, queue_mode);
	int64_t *samples[N_VARIANTS], *price_samples[N_PRICES];
	double *p50[N_VARIANTS], *p99[N_VARIANTS], *ratio[N_VARIANTS], *ratio_ll[N_VARIANTS];
	double *price_p50[N_PRICES], *price_p99[N_PRICES], *price_ratio[N_PRICES];
	uint64_t handle = 1;

	printf("engines %u (%u prefill, %u decode), %u runs of %u decisions per variant\n", n,
	       b->n_prefill, b->n_decode, runs, requests);
	printf("prefill queue projection: %s\n",
	       b->stand_in ? "the bench's stand-in (the host's answers \"no profile\")"
	                   : "the host's own");
	for (int v = 0; v < N_VARIANTS; v++) {
		samples[v] = g_new(int64_t, requests);
		p50[v] = g_new(double, runs);
		p99[v] = g_new(double, runs);
		ratio[v] = g_new(double, runs);
		ratio_ll[v] = g_new(double, runs);
	}
	for (int v = 0; v < N_PRICES; v++) {
		price_samples[v] = g_new(int64_t, requests);
		price_p50[v] = g_new(double, runs);
		price_p99[v] = g_new(double, runs);
		price_ratio[v] = g_new(double, runs);
	}
	/* Warm up the code paths, the caches and the metric tables. */
	for (uint32_t i = 0; i < 200; i++) {
		for (int v = 0; v < N_VARIANTS; v++)
			decide_once(b, v, 1000, 128, handle++);
		for (int v = 0; v < N_PRICES; v++)
			price_once(b, v, i);
	}
	for (uint32_t r = 0; r < runs; r++) {
		memset(b->admitted, 0, sizeof b->admitted);
		memset(b->refused, 0, sizeof b->refused);
		memset(b->failed, 0, sizeof b->failed);
		memset(b->priced_in, 0, sizeof b->priced_in);
		memset(b->priced_out, 0, sizeof b->priced_out);
		memset(b->unpriced, 0, sizeof b->unpriced);
		for (uint32_t i = 0; i < requests; i++) {
			uint64_t prompt = (uint64_t)g_rand_int_range(b->rand, 64, 8192);
			uint32_t max_tokens = (uint32_t)g_rand_int_range(b->rand, 16, 512);

			/* The variants take turns, so drift hits them alike. */
			for (int v = 0; v < N_VARIANTS; v++)
				samples[v][i] = decide_once(b, v, prompt, max_tokens, handle++);
			for (int v = 0; v < N_PRICES; v++)
				price_samples[v][i] = price_once(b, v, i);
		}
		for (int v = 0; v < N_VARIANTS; v++) {
			p50[v][r] = bench_percentile_us(samples[v], requests, 0.50);
			p99[v][r] = bench_percentile_us(samples[v], requests, 0.99);
		}
		for (int v = 0; v < N_VARIANTS; v++) {
			ratio[v][r] = p99[v][r] / p99[EMPTY][r];
			ratio_ll[v][r] = p99[v][r] / p99[OPEN_LL][r];
		}
		for (int v = 0; v < N_PRICES; v++) {
			price_p50[v][r] = bench_percentile_us(price_samples[v], requests, 0.50);
			price_p99[v][r] = bench_percentile_us(price_samples[v], requests, 0.99);
			price_ratio[v][r] = price_p99[v][r] / p99[EMPTY][r];
		}
	}
	printf("%-9s %9s %9s %12s %14s  %s\n", "variant", "p50 us", "p99 us", "p99/empty",
	       "p99/open+ll", "last run: admitted refused failed");
	for (int v = 0; v < N_VARIANTS; v++) {
		printf("%-9s %9.2f %9.2f %12.1f %14.2f  %" G_GUINT64_FORMAT " %" G_GUINT64_FORMAT
		       " %" G_GUINT64_FORMAT "\n", variant_names[v], bench_median(p50[v], runs),
		       bench_median(p99[v], runs), bench_median(ratio[v], runs),
		       bench_median(ratio_ll[v], runs), b->admitted[v], b->refused[v], b->failed[v]);
		g_free(samples[v]);
		g_free(p50[v]);
		g_free(p99[v]);
		g_free(ratio[v]);
		g_free(ratio_ll[v]);
	}
	/* The split price rows: the last column counts priced inside the
	 * measured domain, outside it, and not priced. */
	for (int v = 0; v < N_PRICES; v++) {
		printf("%-9s %9.2f %9.2f %12.1f %14s  %" G_GUINT64_FORMAT " %" G_GUINT64_FORMAT
		       " %" G_GUINT64_FORMAT " (in domain, out, unpriced)\n", price_names[v],
		       bench_median(price_p50[v], runs), bench_median(price_p99[v], runs),
		       bench_median(price_ratio[v], runs), "-", b->priced_in[v], b->priced_out[v],
		       b->unpriced[v]);
		g_free(price_samples[v]);
		g_free(price_p50[v]);
		g_free(price_p99[v]);
		g_free(price_ratio[v]);
	}
	printf("\n");
	bench_free(b);
}

int
main(int argc, char **argv)
{
	g_autofree char *engines = NULL, *dir = NULL, *queue = NULL;
	enum queue_mode queue_mode = QUEUE_AUTO;
	gint requests = 0, runs = 5;
	GOptionEntry entries[] = {
		{ "engines", 'n', 0, G_OPTION_ARG_STRING, &engines,
		  "Fleet sizes, comma-separated (default 64,1024)", "N[,N...]" },
		{ "requests", 'k', 0, G_OPTION_ARG_INT, &requests,
		  "Decisions per variant per run (default 20000 for up to 256 engines, else 4000)",
		  "K" },
		{ "runs", 'r', 0, G_OPTION_ARG_INT, &runs, "Runs; figures are medians (default 5)",
		  "R" },
		{ "queue", 'q', 0, G_OPTION_ARG_STRING, &queue,
		  "Prefill queue projection: host, stand-in, or auto (the host's when it has one; "
		  "default)", "MODE" },
		{ "plugin-dir", 'd', 0, G_OPTION_ARG_FILENAME, &dir,
		  "Built plugins (default $NARWHAL_PLUGIN_DIR, else ./plugins/.libs)", "DIR" },
		{ NULL },
	};
	g_autoptr(GOptionContext) ctx = g_option_context_new("- time admission and placement");
	GError *error = NULL;
	g_auto(GStrv) sizes = NULL;

	/* Messages in the operator's locale, numbers always in C (as the
	 * programs do). */
	setlocale(LC_ALL, "");
	setlocale(LC_NUMERIC, "C");
	g_option_context_add_main_entries(ctx, entries, NULL);
	if (!g_option_context_parse(ctx, &argc, &argv, &error))
		die("options", error);
	if (runs < 1 || requests < 0)
		die("options", NULL);
	if (g_strcmp0(queue, "host") == 0)
		queue_mode = QUEUE_HOST;
	else if (g_strcmp0(queue, "stand-in") == 0)
		queue_mode = QUEUE_STAND_IN;
	else if (queue != NULL && strcmp(queue, "auto") != 0)
		die("--queue: host, stand-in or auto", NULL);
	if (dir == NULL)
		dir = g_strdup(g_getenv("NARWHAL_PLUGIN_DIR") ? g_getenv("NARWHAL_PLUGIN_DIR")
		                                               : "plugins/.libs");
	sizes = g_strsplit(engines ? engines : "64,1024", ",", -1);
	for (char **s = sizes; *s != NULL; s++) {
		guint64 n;

		if (!g_ascii_string_to_unsigned(*s, 10, 2, 65536, &n, &error))
			die("--engines", error);
		bench_size((uint32_t)n, requests > 0 ? (uint32_t)requests : n <= 256 ? 20000 : 4000,
		           (uint32_t)runs, dir, queue_mode);
	}
	return 0;
}
