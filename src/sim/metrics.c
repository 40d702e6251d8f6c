#include "build-config.h"

#include "sim/metrics.h"

#include <math.h>

/* Bucket bounds as vLLM publishes them, so dashboards built for vLLM read
 * the simulator unchanged. */
static const double ttft_bounds[] = {
	0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
	2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
};
static const double itl_bounds[] = {
	0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
	2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
};
static const double request_bounds[] = {
	0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
	50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
};

#define MAX_BOUNDS 24

struct histogram {
	const char *name;
	const char *help;
	const double *bounds;
	unsigned n_bounds;
	uint64_t counts[MAX_BOUNDS + 1]; /* per bucket, not cumulative; last is +Inf */
	uint64_t count;
	double sum;
};

enum { H_TTFT, H_ITL, H_E2E, H_QUEUE, H_PREFILL, H_DECODE, N_HIST };

struct sim_metrics {
	struct histogram hist[N_HIST];
	uint64_t finished[SIM_N_REASONS];
	uint64_t max_request_tokens;     /* llama.cpp's n_tokens_max */
	uint64_t scraped_gen_tokens;     /* SGLang's gen_throughput window */
	double scraped_s;
};

static const char *const reason_names[SIM_N_REASONS] = { "stop", "length", "abort", "error" };

static void
histogram_init(struct histogram *h, const char *name, const char *help, const double *bounds,
               unsigned n)
{
	g_assert(n <= MAX_BOUNDS);
	h->name = name;
	h->help = help;
	h->bounds = bounds;
	h->n_bounds = n;
}

static void
histogram_observe(struct histogram *h, double v, uint64_t times)
{
	unsigned i = 0;

	if (!isfinite(v))
		return;
	/* A step may start a hair before the arrival its wake-up noticed. */
	v = MAX(v, 0.0);
	while (i < h->n_bounds && v > h->bounds[i])
		i++;
	h->counts[i] += times;
	h->count += times;
	h->sum += v * (double)times;
}

struct sim_metrics *
sim_metrics_new(void)
{
	struct sim_metrics *m = g_new0(struct sim_metrics, 1);

	histogram_init(&m->hist[H_TTFT], "vllm:time_to_first_token_seconds",
	               "Time to first token, in model seconds.",
	               ttft_bounds, G_N_ELEMENTS(ttft_bounds));
	histogram_init(&m->hist[H_ITL], "vllm:inter_token_latency_seconds",
	               "Time between consecutive output tokens, in model seconds.",
	               itl_bounds, G_N_ELEMENTS(itl_bounds));
	histogram_init(&m->hist[H_E2E], "vllm:e2e_request_latency_seconds",
	               "Request latency from arrival to the last token, in model seconds.",
	               request_bounds, G_N_ELEMENTS(request_bounds));
	histogram_init(&m->hist[H_QUEUE], "vllm:request_queue_time_seconds",
	               "Time a request waited before its first step, in model seconds.",
	               request_bounds, G_N_ELEMENTS(request_bounds));
	histogram_init(&m->hist[H_PREFILL], "vllm:request_prefill_time_seconds",
	               "Time from first step to first token, in model seconds.",
	               request_bounds, G_N_ELEMENTS(request_bounds));
	histogram_init(&m->hist[H_DECODE], "vllm:request_decode_time_seconds",
	               "Time from first token to the last, in model seconds.",
	               request_bounds, G_N_ELEMENTS(request_bounds));
	return m;
}

void
sim_metrics_free(struct sim_metrics *m)
{
	g_free(m);
}

void
sim_metrics_first_token(struct sim_metrics *m, double ttft_s)
{
	histogram_observe(&m->hist[H_TTFT], ttft_s, 1);
}

void
sim_metrics_inter_token(struct sim_metrics *m, double gap_s, uint32_t n)
{
	if (n > 0)
		histogram_observe(&m->hist[H_ITL], gap_s, n);
}

void
sim_metrics_finished(struct sim_metrics *m, sim_finish_reason reason, double e2e_s,
                     double queue_s, double prefill_s, double decode_s)
{
	m->finished[reason]++;
	if (e2e_s >= 0)
		histogram_observe(&m->hist[H_E2E], e2e_s, 1);
	if (queue_s >= 0)
		histogram_observe(&m->hist[H_QUEUE], queue_s, 1);
	if (prefill_s >= 0)
		histogram_observe(&m->hist[H_PREFILL], prefill_s, 1);
	if (decode_s >= 0)
		histogram_observe(&m->hist[H_DECODE], decode_s, 1);
}

/* Label values are escaped as the text format requires. */
static char *
escape_label(const char *s)
{
	GString *out = g_string_new(NULL);

	for (; *s; s++) {
		if (*s == '\\' || *s == '"')
			g_string_append_c(out, '\\');
		if (*s == '\n') {
			g_string_append(out, "\\n");
			continue;
		}
		g_string_append_c(out, *s);
	}
	return g_string_free(out, FALSE);
}

static void
family(GString *out, const char *name, const char *type, const char *help)
{
	g_string_append_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void
sample_u64(GString *out, const char *name, const char *labels, uint64_t v)
{
	g_string_append_printf(out, "%s{%s} %" G_GUINT64_FORMAT "\n", name, labels, v);
}

static void
append_double(GString *out, double v)
{
	char buf[G_ASCII_DTOSTR_BUF_SIZE];

	g_string_append(out, g_ascii_formatd(buf, sizeof buf, "%.9g", v));
}

/* A histogram under its vLLM name, or under name when given. */
static void
render_histogram(GString *out, const struct histogram *h, const char *name, const char *labels)
{
	uint64_t cumulative = 0;
	const char *sep = *labels ? "," : "";

	if (name == NULL)
		name = h->name;
	family(out, name, "histogram", h->help);
	for (unsigned i = 0; i <= h->n_bounds; i++) {
		cumulative += h->counts[i];
		g_string_append_printf(out, "%s_bucket{%s%sle=\"", name, labels, sep);
		if (i < h->n_bounds)
			append_double(out, h->bounds[i]);
		else
			g_string_append(out, "+Inf");
		g_string_append_printf(out, "\"} %" G_GUINT64_FORMAT "\n", cumulative);
	}
	g_string_append_printf(out, "%s_sum{%s} ", name, labels);
	append_double(out, h->sum);
	g_string_append_printf(out, "\n%s_count{%s} %" G_GUINT64_FORMAT "\n", name, labels,
	                       h->count);
}

static void
sample_double(GString *out, const char *name, const char *labels, double v)
{
	g_string_append_printf(out, "%s{%s} ", name, labels);
	append_double(out, v);
	g_string_append_c(out, '\n');
}

void
sim_metrics_request_tokens(struct sim_metrics *m, uint64_t tokens)
{
	m->max_request_tokens = MAX(m->max_request_tokens, tokens);
}

/* SGLang's names (wire formats 5.2), labelled model_name. There is no
 * prefix cache, so cache_hit_rate is 0; gen_throughput is the tokens
 * generated per model second since the previous scrape. */
static void
render_sglang(struct sim_metrics *m, const struct sim_engine_stats *st, const char *labels,
              uint64_t block_tokens, double now_s, GString *out)
{
	double usage = st->kv_blocks_total ? (double)st->kv_blocks_used / st->kv_blocks_total : 0;
	double span = now_s - m->scraped_s;
	double throughput = span > 0 ? (double)(st->generation_tokens_total -
	                                        m->scraped_gen_tokens) / span : 0;

	m->scraped_s = now_s;
	m->scraped_gen_tokens = st->generation_tokens_total;
	family(out, "sglang:num_running_reqs", "gauge", "Requests in the running batch.");
	sample_u64(out, "sglang:num_running_reqs", labels, st->running);
	family(out, "sglang:num_queue_reqs", "gauge", "Requests waiting in the queue.");
	sample_u64(out, "sglang:num_queue_reqs", labels, st->waiting);
	family(out, "sglang:token_usage", "gauge", "Fraction of KV-cache tokens in use (0 to 1).");
	sample_double(out, "sglang:token_usage", labels, usage);
	family(out, "sglang:num_used_tokens", "gauge", "KV-cache tokens in use.");
	sample_u64(out, "sglang:num_used_tokens", labels, st->kv_blocks_used * block_tokens);
	family(out, "sglang:gen_throughput", "gauge", "Generated tokens per second.");
	sample_double(out, "sglang:gen_throughput", labels, throughput);
	family(out, "sglang:cache_hit_rate", "gauge", "Prefix-cache hit rate (no prefix cache).");
	sample_double(out, "sglang:cache_hit_rate", labels, 0);
	family(out, "sglang:prompt_tokens_total", "counter", "Prompt tokens prefilled.");
	sample_u64(out, "sglang:prompt_tokens_total", labels, st->prompt_tokens_total);
	family(out, "sglang:generation_tokens_total", "counter", "Output tokens generated.");
	sample_u64(out, "sglang:generation_tokens_total", labels, st->generation_tokens_total);
	render_histogram(out, &m->hist[H_TTFT], "sglang:time_to_first_token_seconds", labels);
	render_histogram(out, &m->hist[H_ITL], "sglang:time_per_output_token_seconds", labels);
	render_histogram(out, &m->hist[H_E2E], "sglang:e2e_request_latency_seconds", labels);
}

/* llama.cpp's names (wire formats 5.3), without labels. Throughputs are
 * tokens over the summed per-request prefill and decode times; busy slots
 * per decode is tokens generated per step. */
/* One unlabelled sample with its family lines. */
static void
unlabelled(GString *out, const char *name, const char *type, const char *help, double v)
{
	family(out, name, type, help);
	g_string_append_printf(out, "%s ", name);
	append_double(out, v);
	g_string_append_c(out, '\n');
}

static void
render_llamacpp(const struct sim_metrics *m, const struct sim_engine_stats *st, GString *out)
{
	double prefill_s = m->hist[H_PREFILL].sum, decode_s = m->hist[H_DECODE].sum;

	unlabelled(out, "llamacpp:requests_processing", "gauge", "Requests being processed.",
	           st->running);
	unlabelled(out, "llamacpp:requests_deferred", "gauge", "Requests deferred.", st->waiting);
	unlabelled(out, "llamacpp:prompt_tokens_total", "counter", "Prompt tokens processed.",
	           (double)st->prompt_tokens_total);
	unlabelled(out, "llamacpp:tokens_predicted_total", "counter", "Tokens generated.",
	           (double)st->generation_tokens_total);
	unlabelled(out, "llamacpp:prompt_tokens_seconds", "gauge",
	           "Average prompt throughput in tokens/s.",
	           prefill_s > 0 ? (double)st->prompt_tokens_total / prefill_s : 0);
	unlabelled(out, "llamacpp:predicted_tokens_seconds", "gauge",
	           "Average generation throughput in tokens/s.",
	           decode_s > 0 ? (double)st->generation_tokens_total / decode_s : 0);
	unlabelled(out, "llamacpp:n_busy_slots_per_decode", "gauge",
	           "Average number of busy slots per decode.",
	           st->steps_total ? (double)st->generation_tokens_total / st->steps_total : 0);
	unlabelled(out, "llamacpp:n_decode_total", "counter", "Decode calls (scheduler steps).",
	           (double)st->steps_total);
	unlabelled(out, "llamacpp:n_tokens_max", "counter", "Largest request seen, in tokens.",
	           (double)m->max_request_tokens);
}

void
sim_metrics_render(struct sim_metrics *m, const struct sim_engine_stats *st, sim_dialect d,
                   const char *model_name, const char *engine_label, double now_s,
                   GString *out)
{
	g_autofree char *model = escape_label(model_name);
	g_autofree char *engine = escape_label(engine_label);
	g_autofree char *labels = NULL;
	double usage = st->kv_blocks_total ? (double)st->kv_blocks_used / st->kv_blocks_total : 0;

	if (d == SIM_DIALECT_LLAMACPP) {
		render_llamacpp(m, st, out);
		return;
	}
	if (d == SIM_DIALECT_SGLANG) {
		labels = g_strdup_printf("model_name=\"%s\"", model);
		render_sglang(m, st, labels, st->block_tokens, now_s, out);
		return;
	}
	labels = g_strdup_printf("model_name=\"%s\",engine=\"%s\"", model, engine);

	family(out, "vllm:num_requests_running", "gauge", "Requests in the running batch.");
	sample_u64(out, "vllm:num_requests_running", labels, st->running);
	family(out, "vllm:num_requests_waiting", "gauge", "Requests waiting to be scheduled.");
	sample_u64(out, "vllm:num_requests_waiting", labels, st->waiting);
	family(out, "vllm:kv_cache_usage_perc", "gauge",
	       "Fraction of KV-cache blocks in use, leased blocks included (0 to 1).");
	g_string_append_printf(out, "vllm:kv_cache_usage_perc{%s} ", labels);
	append_double(out, usage);
	g_string_append_c(out, '\n');
	family(out, "vllm:prompt_tokens_total", "counter", "Prompt tokens prefilled.");
	sample_u64(out, "vllm:prompt_tokens_total", labels, st->prompt_tokens_total);
	family(out, "vllm:generation_tokens_total", "counter", "Output tokens generated.");
	sample_u64(out, "vllm:generation_tokens_total", labels, st->generation_tokens_total);
	family(out, "vllm:num_preemptions_total", "counter", "Requests preempted for KV space.");
	sample_u64(out, "vllm:num_preemptions_total", labels, st->preemptions_total);
	family(out, "vllm:request_success_total", "counter", "Requests finished, by reason.");
	for (int r = 0; r < SIM_N_REASONS; r++) {
		g_string_append_printf(out, "vllm:request_success_total{%s,finished_reason=\"%s\"} %"
		                       G_GUINT64_FORMAT "\n", labels, reason_names[r],
		                       m->finished[r]);
	}
	for (int h = 0; h < N_HIST; h++)
		render_histogram(out, &m->hist[h], NULL, labels);
	/* Simulator extras, outside vLLM's namespace. */
	family(out, "narwhal_sim:kv_leases", "gauge", "KV leases held for remote decode.");
	sample_u64(out, "narwhal_sim:kv_leases", labels, st->leases);
	family(out, "narwhal_sim:kv_leased_blocks", "gauge", "KV blocks held under leases.");
	sample_u64(out, "narwhal_sim:kv_leased_blocks", labels, st->leased_blocks);
	family(out, "narwhal_sim:steps_total", "counter", "Scheduler steps run.");
	sample_u64(out, "narwhal_sim:steps_total", labels, st->steps_total);
}

void
sim_metrics_render_process(double start_unix_s, GString *out)
{
	char buf[G_ASCII_DTOSTR_BUF_SIZE];

	family(out, "process_start_time_seconds", "gauge",
	       "Start time of the process since unix epoch in seconds.");
	/* Milliseconds: a restart within the same second still shows. */
	g_string_append_printf(out, "process_start_time_seconds %s\n",
	                       g_ascii_formatd(buf, sizeof buf, "%.3f", start_unix_s));
}
