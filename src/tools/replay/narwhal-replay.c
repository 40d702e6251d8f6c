/*
 * narwhal-replay: open-loop, trace-driven load against an OpenAI-compatible
 * endpoint (Narwhal, one engine, narwhal-sim, anything else), measuring
 * TTFT, TPOT, end-to-end latency, status and errors per request, with
 * percentiles, SLO attainment and goodput. See docs/replay.md.
 */
#include "build-config.h"

#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <glib.h>
#include <jansson.h>

#include "core/log.h"
#include "core/process.h"
#include "tools/replay/client.h"
#include "tools/replay/report.h"
#include "tools/replay/trace.h"
#include "tools/replay/whatif.h"
#include "tools/replay/workload.h"

#define MAX_SWEEP 32

struct options {
	char *url;
	char *api;
	char *model;
	gboolean stream;
	gboolean no_ignore_eos;
	char *trace;
	char *trace_format;
	char *synthetic;
	char *workload;
	double rate_scale;
	char *rate_sweep;
	double start_offset;
	double duration;
	gint64 max_requests;
	gint max_prompt;
	gint max_output;
	char *long_prompts;
	char *prompt_overhead;
	gint64 seed;
	double timeout;
	double connect_timeout;
	gint concurrency;
	double slo_ttft;
	double slo_tpot;
	char *extra_body;
	char *out_json;
	char *out_csv;
	char *plot;
	gboolean quiet;
	gboolean dry_run;
	/* The what-if mode (docs/replay.md, "What-if mode"). */
	char *what_if;
	char *sim_preset;
	char *sim_model_file;
	double sim_noise_sigma;
	gint64 sim_seed;
	double sim_time_scale;
	gint engines;
	gboolean aggregate;
	gboolean version;
};

static struct options opt = {
	.api = NULL, .stream = TRUE, .rate_scale = 1.0, .seed = 1,
	.timeout = 600, .connect_timeout = 10, .concurrency = 4096,
	.sim_seed = 1, .sim_time_scale = 1,
};

static GOptionEntry entries[] = {
	{ "url", 'u', 0, G_OPTION_ARG_STRING, &opt.url,
	  "Base URL of the endpoint, e.g. http://127.0.0.1:8000 (required)", "URL" },
	{ "api", 0, 0, G_OPTION_ARG_STRING, &opt.api,
	  "completions (POST /v1/completions, default) or chat (/v1/chat/completions)", "API" },
	{ "model", 'm', 0, G_OPTION_ARG_STRING, &opt.model,
	  "Model name for the body (default: the first id of GET /v1/models)", "NAME" },
	{ "stream", 0, 0, G_OPTION_ARG_NONE, &opt.stream,
	  "Stream responses with stream_options.include_usage (default)", NULL },
	{ "no-stream", 0, G_OPTION_FLAG_REVERSE, G_OPTION_ARG_NONE, &opt.stream,
	  "Ask for whole responses: TTFT is then the end-to-end latency", NULL },
	{ "no-ignore-eos", 0, 0, G_OPTION_ARG_NONE, &opt.no_ignore_eos,
	  "Do not send \"ignore_eos\": true (servers that reject unknown fields)", NULL },
	{ "trace", 't', 0, G_OPTION_ARG_FILENAME, &opt.trace,
	  "Replay a trace file (Azure CSV or Mooncake JSONL)", "FILE" },
	{ "trace-format", 0, 0, G_OPTION_ARG_STRING, &opt.trace_format,
	  "auto (default: by extension, then content), azure or mooncake", "FORMAT" },
	{ "synthetic", 's', 0, G_OPTION_ARG_STRING, &opt.synthetic,
	  "A synthetic workload, e.g. 'rate=4,arrival=gamma,cv=2,input=lognormal:1000:0.7,"
	  "output=uniform:50:300,duration=60; rate=8,duration=60'", "SPEC" },
	{ "workload", 'w', 0, G_OPTION_ARG_FILENAME, &opt.workload,
	  "A synthetic workload from a JSON file {\"repeat\": N, \"phases\": [...]}", "FILE" },
	{ "rate-scale", 'r', 0, G_OPTION_ARG_DOUBLE, &opt.rate_scale,
	  "Arrival rate multiplier: every gap is divided by F (F > 1 is faster; default 1)", "F" },
	{ "rate-sweep", 0, 0, G_OPTION_ARG_STRING, &opt.rate_sweep,
	  "Replay once per rate scale in the list, e.g. 0.5,1,2 (replaces --rate-scale)", "LIST" },
	{ "start-offset", 0, 0, G_OPTION_ARG_DOUBLE, &opt.start_offset,
	  "Skip the source's first S seconds (source time, before scaling)", "S" },
	{ "duration", 'd', 0, G_OPTION_ARG_DOUBLE, &opt.duration,
	  "Send only requests due in the first S seconds of the run (after scaling)", "S" },
	{ "max-requests", 'n', 0, G_OPTION_ARG_INT64, &opt.max_requests,
	  "Send at most N requests per run", "N" },
	{ "max-prompt-tokens", 0, 0, G_OPTION_ARG_INT, &opt.max_prompt,
	  "Longer prompts are skipped (or truncated, see --long-prompts) and counted", "N" },
	{ "max-output-tokens", 0, 0, G_OPTION_ARG_INT, &opt.max_output,
	  "Cap max_tokens at N (counted)", "N" },
	{ "long-prompts", 0, 0, G_OPTION_ARG_STRING, &opt.long_prompts,
	  "skip (default) or truncate prompts over --max-prompt-tokens", "POLICY" },
	{ "prompt-overhead", 0, 0, G_OPTION_ARG_STRING, &opt.prompt_overhead,
	  "Tokens the server adds to each prompt, or auto (ask POST /tokenize); default 1 "
	  "(the BOS) for completions, auto for chat", "N|auto" },
	{ "seed", 0, 0, G_OPTION_ARG_INT64, &opt.seed,
	  "Seed for synthetic arrivals, lengths and prompt words (default 1)", "N" },
	{ "timeout", 0, 0, G_OPTION_ARG_DOUBLE, &opt.timeout,
	  "Per-request limit in seconds, whole response (default 600)", "S" },
	{ "connect-timeout", 0, 0, G_OPTION_ARG_DOUBLE, &opt.connect_timeout,
	  "Per-connection setup limit in seconds (default 10)", "S" },
	{ "concurrency-limit", 'c', 0, G_OPTION_ARG_INT, &opt.concurrency,
	  "Safety cap on requests in flight; requests held by it are counted late "
	  "(default 4096)", "N" },
	{ "slo-ttft", 0, 0, G_OPTION_ARG_DOUBLE, &opt.slo_ttft,
	  "TTFT target in seconds, for attainment and goodput", "S" },
	{ "slo-tpot", 0, 0, G_OPTION_ARG_DOUBLE, &opt.slo_tpot,
	  "TPOT target in seconds, for attainment and goodput", "S" },
	{ "extra-body", 0, 0, G_OPTION_ARG_STRING, &opt.extra_body,
	  "A JSON object merged into every request body (its keys win)", "JSON" },
	{ "out-json", 'o', 0, G_OPTION_ARG_FILENAME, &opt.out_json,
	  "Write the JSON summary here", "FILE" },
	{ "out-csv", 0, 0, G_OPTION_ARG_FILENAME, &opt.out_csv,
	  "Write one CSV row per request here", "FILE" },
	{ "plot", 0, 0, G_OPTION_ARG_FILENAME, &opt.plot,
	  "Draw latency over time (and, with --rate-sweep, attainment and goodput against rate) "
	  "to a .png or .svg with gnuplot", "FILE" },
	{ "quiet", 'q', 0, G_OPTION_ARG_NONE, &opt.quiet,
	  "No progress line and no table (files are still written)", NULL },
	{ "dry-run", 0, 0, G_OPTION_ARG_NONE, &opt.dry_run,
	  "Print what would be sent (counts, rate, token means) and exit", NULL },
	{ "what-if", 0, 0, G_OPTION_ARG_FILENAME, &opt.what_if,
	  "Instead of sending, run the load through Narwhal's plugins and narwhal-sim's engine "
	  "model in this process on a virtual clock, with this daemon configuration", "CONFIG" },
	{ "sim-preset", 0, 0, G_OPTION_ARG_STRING, &opt.sim_preset,
	  "What-if: narwhal-sim's --preset (default opt-13b-a100)", "NAME" },
	{ "sim-model-file", 0, 0, G_OPTION_ARG_FILENAME, &opt.sim_model_file,
	  "What-if: narwhal-sim's --model-file", "FILE" },
	{ "sim-noise-sigma", 0, 0, G_OPTION_ARG_DOUBLE, &opt.sim_noise_sigma,
	  "What-if: narwhal-sim's --noise-sigma (default 0)", "S" },
	{ "sim-seed", 0, 0, G_OPTION_ARG_INT64, &opt.sim_seed,
	  "What-if: narwhal-sim's --seed (default 1)", "N" },
	{ "sim-time-scale", 0, 0, G_OPTION_ARG_DOUBLE, &opt.sim_time_scale,
	  "What-if: narwhal-sim's --time-scale, model seconds per second (default 1)", "F" },
	{ "engines", 0, 0, G_OPTION_ARG_INT, &opt.engines,
	  "What-if: N engines made from the configured fleet's first, its split scaled", "N" },
	{ "aggregate", 0, 0, G_OPTION_ARG_NONE, &opt.aggregate,
	  "What-if: every engine serves whole requests (none hands off), whatever its role", NULL },
	{ "version", 'V', 0, G_OPTION_ARG_NONE, &opt.version, "Print the version and exit", NULL },
	{ NULL },
};

static int
usage_error(const char *fmt, ...) G_GNUC_PRINTF(1, 2);

static int
usage_error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("narwhal-replay: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputs(" (see --help)\n", stderr);
	va_end(ap);
	return 2;
}

static bool
parse_sweep(const char *list, double *scales, guint *n)
{
	g_auto(GStrv) parts = g_strsplit(list, ",", -1);

	*n = 0;
	for (guint i = 0; parts[i] != NULL; i++) {
		char *end;
		double v;

		if (*g_strstrip(parts[i]) == '\0')
			continue;
		v = g_ascii_strtod(parts[i], &end);
		if (*end != '\0' || !(v > 0) || v > 1e6 || *n >= MAX_SWEEP)
			return false;
		scales[(*n)++] = v;
	}
	return *n > 0;
}

static int
check_options(double *scales, guint *n_scales, enum rp_long_policy *policy)
{
	int sources = (opt.trace != NULL) + (opt.synthetic != NULL) + (opt.workload != NULL);

	if (opt.what_if && opt.url)
		return usage_error("--what-if runs without an endpoint: give --url or --what-if, "
		                   "not both");
	if (!opt.what_if && (opt.sim_preset || opt.sim_model_file || opt.sim_noise_sigma != 0 ||
	                     opt.sim_seed != 1 || opt.sim_time_scale != 1 || opt.engines != 0 ||
	                     opt.aggregate))
		return usage_error("--sim-*, --engines and --aggregate apply to --what-if only");
	if (opt.sim_preset && opt.sim_model_file)
		return usage_error("give --sim-preset or --sim-model-file, not both");
	if (opt.engines < 0 || opt.engines > 100000)
		return usage_error("--engines must be 1 to 100000");
	if (!(opt.sim_time_scale > 0) || opt.sim_time_scale > 1e6 || !(opt.sim_noise_sigma >= 0))
		return usage_error("--sim-time-scale must be above 0 and --sim-noise-sigma at least 0");
	if (opt.url == NULL && !opt.dry_run && !opt.what_if)
		return usage_error("--url (or --what-if) is required");
	if (opt.url && !g_str_has_prefix(opt.url, "http://") && !g_str_has_prefix(opt.url, "https://"))
		return usage_error("--url %s: want http://host:port", opt.url);
	if (sources != 1)
		return usage_error("give exactly one of --trace, --synthetic and --workload");
	if (opt.api && strcmp(opt.api, "completions") != 0 && strcmp(opt.api, "chat") != 0)
		return usage_error("--api %s: want completions or chat", opt.api);
	if (opt.trace_format && opt.trace == NULL)
		return usage_error("--trace-format applies to --trace only");
	if (!(opt.rate_scale > 0) || opt.rate_scale > 1e6)
		return usage_error("--rate-scale must be above 0");
	if (opt.rate_sweep) {
		if (!parse_sweep(opt.rate_sweep, scales, n_scales))
			return usage_error("--rate-sweep %s: want up to %d positive numbers, "
			                   "e.g. 0.5,1,2", opt.rate_sweep, MAX_SWEEP);
	} else {
		scales[0] = opt.rate_scale;
		*n_scales = 1;
	}
	if (opt.start_offset < 0 || opt.duration < 0 || opt.max_requests < 0 ||
	    opt.max_prompt < 0 || opt.max_output < 0)
		return usage_error("offsets, durations, counts and caps cannot be negative");
	if (opt.prompt_overhead && strcmp(opt.prompt_overhead, "auto") != 0) {
		char *end;
		long v = strtol(opt.prompt_overhead, &end, 10);

		if (*end != '\0' || end == opt.prompt_overhead || v < 0 || v > 1000)
			return usage_error("--prompt-overhead %s: want 0 to 1000 or auto",
			                   opt.prompt_overhead);
	}
	if (!(opt.timeout > 0) || !(opt.connect_timeout > 0))
		return usage_error("--timeout and --connect-timeout must be above 0: every request "
		                   "is bounded");
	if (opt.concurrency < 1 || opt.concurrency > 100000)
		return usage_error("--concurrency-limit must be 1 to 100000");
	if (opt.slo_ttft < 0 || opt.slo_tpot < 0)
		return usage_error("SLO targets cannot be negative");
	*policy = RP_LONG_SKIP;
	if (opt.long_prompts && strcmp(opt.long_prompts, "truncate") == 0)
		*policy = RP_LONG_TRUNCATE;
	else if (opt.long_prompts && strcmp(opt.long_prompts, "skip") != 0)
		return usage_error("--long-prompts %s: want skip or truncate", opt.long_prompts);
	if (opt.plot && !rp_plot_path_ok(opt.plot))
		return usage_error("--plot %s: the name must end in .png or .svg", opt.plot);
	return 0;
}

/* How many requests to generate for --max-requests: the schedule drops
 * some (skipped long prompts, the start offset), so leave room then. */
static uint64_t
generation_cap(const struct rp_workload *w, double limit, enum rp_long_policy policy)
{
	const struct rp_phase *last = g_ptr_array_index(w->phases, w->phases->len - 1);
	bool drops = opt.start_offset > 0 || (opt.max_prompt > 0 && policy == RP_LONG_SKIP);

	if (opt.max_requests <= 0)
		return 0;
	if (!drops)
		return (uint64_t)opt.max_requests;
	if (limit > 0 || last->duration > 0)
		return 0; /* time bounds it already */
	return (uint64_t)opt.max_requests * 10 + 1000;
}

static struct rp_trace *
load_source(double max_scale, enum rp_long_policy policy, GError **error)
{
	struct rp_workload *w;
	struct rp_trace *t;
	double limit = 0;

	if (opt.trace) {
		rp_trace_format f = RP_TRACE_AUTO;

		if (opt.trace_format && !rp_trace_format_parse(opt.trace_format, &f)) {
			g_set_error(error, RP_ERROR, RP_ERROR_PARSE, "--trace-format %s: want auto, "
			            "azure or mooncake", opt.trace_format);
			return NULL;
		}
		return rp_trace_load(opt.trace, f, error);
	}
	w = opt.synthetic ? rp_workload_parse_spec(opt.synthetic, error)
	                  : rp_workload_load_file(opt.workload, error);
	if (w == NULL)
		return NULL;
	/* Generate what the fastest scale of the sweep can reach. */
	if (opt.duration > 0)
		limit = opt.start_offset + opt.duration * max_scale;
	t = rp_workload_generate(w, (uint64_t)opt.seed, limit, generation_cap(w, limit, policy), error);
	rp_workload_free(w);
	return t;
}

/* --prompt-overhead auto (the default for chat): ask the server. */
static void
resolve_overhead(struct rp_body_opts *body)
{
	bool asked = opt.prompt_overhead != NULL && strcmp(opt.prompt_overhead, "auto") == 0;
	GError *error = NULL;

	if (!asked && !(opt.prompt_overhead == NULL && body->api == RP_API_CHAT))
		return;
	if (rp_client_prompt_overhead(opt.url, body, opt.connect_timeout, &body->prompt_overhead,
	                              &error))
		return;
	/* Not every endpoint has /tokenize: carry on with a stated guess. */
	body->prompt_overhead = body->api == RP_API_CHAT ? 0 : 1;
	g_printerr("narwhal-replay: --prompt-overhead auto: %s; using %u\n", error->message,
	           body->prompt_overhead);
	g_error_free(error);
}

static void
dry_run(const struct rp_report_run *rr)
{
	const struct rp_schedule *s = &rr->schedule;
	double in = 0, out = 0;

	for (guint i = 0; i < s->items->len; i++) {
		in += g_array_index(s->items, struct rp_item, i).input_tokens;
		out += g_array_index(s->items, struct rp_item, i).output_tokens;
	}
	printf("rate scale %g: %u requests over %.1f s (%.2f req/s), mean input %.0f, mean output "
	       "%.0f tokens; skipped %" G_GUINT64_FORMAT " long prompts, truncated %"
	       G_GUINT64_FORMAT ", capped %" G_GUINT64_FORMAT " outputs\n",
	       rr->scale, s->items->len, s->span,
	       s->items->len > 1 && s->span > 0 ? (s->items->len - 1) / s->span : 0.0,
	       s->items->len ? in / s->items->len : 0.0, s->items->len ? out / s->items->len : 0.0,
	       s->long_skipped, s->long_truncated, s->output_capped);
}

static void
run_free(gpointer p)
{
	struct rp_report_run *rr = p;

	json_decref(rr->what_if);
	g_free(rr->what_if_line);
	rp_schedule_clear(&rr->schedule);
	rp_run_clear(&rr->run);
	rp_summary_clear(&rr->summary);
	g_free(rr);
}

/* One run: against the endpoint, or in the what-if mode. */
static bool
run_one(const struct rp_client_opts *co, const struct wi_setup *wi, struct rp_report_run *rr,
        GError **error)
{
	struct wi_run_opts wo = {
		.id_base = co->id_base, .timeout_s = opt.timeout, .stream = opt.stream,
		.prompt_overhead = co->body.prompt_overhead,
	};

	if (wi == NULL)
		return rp_client_run(co, &rr->schedule, &rr->run, error);
	if (!wi_run(wi, &rr->schedule, &wo, &rr->run, &rr->what_if, error))
		return false;
	rr->what_if_line = wi_run_summary_line(rr->what_if);
	return true;
}

static int
replay(struct rp_trace *trace, const double *scales, guint n_scales,
       enum rp_long_policy policy, const struct rp_body_opts *body, const struct wi_setup *wi)
{
	struct rp_report rep = {
		.url = wi ? wi_setup_target(wi) : opt.url,
		.api = opt.api ? opt.api : "completions", .model = opt.model,
		.stream = opt.stream, .source = trace->label, .seed = (uint64_t)opt.seed,
		.slo = { .ttft = opt.slo_ttft, .tpot = opt.slo_tpot },
		.phase_names = trace->phase_names->len ? trace->phase_names : NULL,
		.prompt_overhead = body->prompt_overhead,
		.runs = g_ptr_array_new_with_free_func(run_free),
		.what_if = wi ? wi_setup_json(wi) : NULL,
	};
	struct rp_client_opts co = {
		.url = opt.url,
		.body = *body,
		.timeout_s = opt.timeout, .connect_timeout_s = opt.connect_timeout,
		.concurrency = (unsigned)opt.concurrency, .progress = !opt.quiet,
	};
	GError *error = NULL;
	int status = 0;
	uint32_t next_id = 0;

	for (guint k = 0; k < n_scales; k++) {
		struct rp_report_run *rr = g_new0(struct rp_report_run, 1);
		struct rp_schedule_opts so = {
			.rate_scale = scales[k], .start_offset = opt.start_offset,
			.duration = opt.duration, .max_requests = (uint64_t)opt.max_requests,
			.max_prompt = (uint32_t)opt.max_prompt, .max_output = (uint32_t)opt.max_output,
			.long_policy = policy,
		};
		g_autofree char *label = n_scales > 1 ? g_strdup_printf("[x%g]", scales[k]) : NULL;

		rr->scale = scales[k];
		rp_schedule_build(&rr->schedule, trace, &so);
		g_ptr_array_add(rep.runs, rr);
		if (opt.dry_run) {
			dry_run(rr);
			continue;
		}
		co.label = label;
		co.id_base = next_id;
		if (!run_one(&co, wi, rr, &error)) {
			g_printerr("narwhal-replay: %s\n", error->message);
			g_clear_error(&error);
			status = 1;
			/* A run that did not start has nothing to report. */
			g_ptr_array_remove_index(rep.runs, rep.runs->len - 1);
			break;
		}
		next_id += (uint32_t)rr->run.n;
		rp_report_summarize(&rep, rr);
		if (rr->run.interrupted) {
			status = 130;
			break;
		}
	}
	if (opt.dry_run || rep.runs->len == 0)
		goto out;
	if (!opt.quiet)
		rp_report_table(stdout, &rep);
	if (opt.out_json && !rp_report_write_json(opt.out_json, &rep, &error)) {
		g_printerr("narwhal-replay: --out-json: %s\n", error->message);
		g_clear_error(&error);
		status = status ? status : 1;
	}
	if (opt.out_csv && !rp_report_write_csv(opt.out_csv, &rep, &error)) {
		g_printerr("narwhal-replay: --out-csv: %s\n", error->message);
		g_clear_error(&error);
		status = status ? status : 1;
	}
	if (opt.plot && !rp_report_plot(opt.plot, &rep, &error)) {
		g_printerr("narwhal-replay: %s\n", error->message);
		g_clear_error(&error);
		status = status ? status : 1;
	}
out:
	g_ptr_array_free(rep.runs, TRUE);
	json_decref(rep.what_if);
	return status;
}

int
main(int argc, char **argv)
{
	GOptionContext *ctx = g_option_context_new("- open-loop trace replay against an "
	                                           "OpenAI-compatible endpoint");
	GError *error = NULL;
	double scales[MAX_SWEEP];
	guint n_scales = 0;
	enum rp_long_policy policy = RP_LONG_SKIP;
	struct rp_trace *trace = NULL;
	json_t *extra = NULL;
	g_autofree char *gnuplot = NULL;
	double max_scale = 0;
	int status;
	struct rp_body_opts body = { .stream = true };
	struct wi_setup *wi = NULL;

	/* Messages in the operator's locale (GLib's quotation marks would
	 * print as '?' in "C"); numbers in JSON and configuration always in C. */
	setlocale(LC_ALL, "");
	setlocale(LC_NUMERIC, "C");
	g_option_context_add_main_entries(ctx, entries, NULL);
	g_option_context_set_description(ctx, "Outputs: a table on stdout, progress on stderr, "
	                                 "--out-json, --out-csv, --plot. Full manual: docs/replay.md.");
	if (!g_option_context_parse(ctx, &argc, &argv, &error)) {
		status = usage_error("%s", error->message);
		g_error_free(error);
		g_option_context_free(ctx);
		return status;
	}
	g_option_context_free(ctx);
	if (opt.version) {
		printf("narwhal-replay %s\n", PACKAGE_VERSION);
		return 0;
	}
	if (argc > 1)
		return usage_error("unexpected argument \"%s\"", argv[1]);
	if ((status = check_options(scales, &n_scales, &policy)) != 0)
		return status;
	body.api = g_strcmp0(opt.api, "chat") == 0 ? RP_API_CHAT : RP_API_COMPLETIONS;
	body.stream = opt.stream;
	body.ignore_eos = !opt.no_ignore_eos;
	body.seed = (uint64_t)opt.seed;
	body.prompt_overhead = 1;
	if (opt.prompt_overhead && strcmp(opt.prompt_overhead, "auto") != 0)
		body.prompt_overhead = (uint32_t)atoi(opt.prompt_overhead);
	if (opt.extra_body) {
		json_error_t jerr;

		extra = json_loads(opt.extra_body, 0, &jerr);
		if (!json_is_object(extra)) {
			json_decref(extra);
			return usage_error("--extra-body: want a JSON object (%s)",
			                   extra ? "not an object" : jerr.text);
		}
		body.extra = extra;
	}
	/* Fail before a long run, not after it. */
	if (opt.plot && !opt.dry_run) {
		const char *prog = g_getenv("NARWHAL_GNUPLOT");

		gnuplot = g_find_program_in_path(prog && *prog ? prog : "gnuplot");
		if (gnuplot == NULL) {
			g_printerr("narwhal-replay: --plot needs gnuplot, which is not on PATH "
			           "(Debian: apt-get install -y gnuplot-nox); nothing was sent\n");
			json_decref(extra);
			return 1;
		}
	}
	for (guint k = 0; k < n_scales; k++)
		max_scale = MAX(max_scale, scales[k]);
	trace = load_source(max_scale, policy, &error);
	if (trace == NULL) {
		g_printerr("narwhal-replay: %s\n", error->message);
		g_error_free(error);
		json_decref(extra);
		return 1;
	}
	if (opt.what_if && !opt.dry_run) {
		struct wi_options wo = {
			.config = opt.what_if, .preset = opt.sim_preset, .model_file = opt.sim_model_file,
			.noise_sigma = opt.sim_noise_sigma, .seed = (uint64_t)opt.sim_seed,
			.time_scale = opt.sim_time_scale, .engines = (uint32_t)opt.engines,
			.aggregate = opt.aggregate,
		};

		/* The plugins' log lines, as narwhal-check and narwhal-profile keep
		 * them: warnings and errors, as text (the report holds the role
		 * changes with their virtual times). */
		nw_log_setup("warning", NW_LOG_FORMAT_TEXT);
		wi = wi_setup_new(&wo, &error);
		if (wi == NULL) {
			g_printerr("narwhal-replay: %s\n", error->message);
			g_error_free(error);
			rp_trace_free(trace);
			json_decref(extra);
			return 1;
		}
		if (opt.model == NULL)
			opt.model = g_strdup(wi_setup_model(wi));
	}
	nw_process_raise_fd_limit();
	curl_global_init(CURL_GLOBAL_DEFAULT);
	if (opt.model == NULL && !opt.dry_run) {
		opt.model = rp_client_discover_model(opt.url, opt.connect_timeout, &error);
		if (opt.model == NULL) {
			g_printerr("narwhal-replay: %s\n", error->message);
			g_error_free(error);
			status = 1;
			goto out;
		}
	}
	body.model = opt.model;
	if (!opt.dry_run && wi == NULL)
		resolve_overhead(&body);
	status = replay(trace, scales, n_scales, policy, &body, wi);
out:
	wi_setup_free(wi);
	rp_trace_free(trace);
	json_decref(extra);
	curl_global_cleanup();
	return status;
}
