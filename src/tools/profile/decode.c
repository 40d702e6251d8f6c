/*
 * The decode grid (docs/profiles.md, "How to profile a fleet"): in each
 * cell, B streams (aggregate legs) with prompts of p tokens each, so that
 * the resident KV tokens T vary apart from B across cells (plan.c). The
 * streams start in groups whose prefill the prefill model puts within half
 * of engine.first_token_timeout_s; once every stream has its first token,
 * all B are decoding and nothing else runs, and only from then are token
 * intervals timed, over a window of tokens (stream_slope); T is the mean of
 * the contexts the window's steps decoded. Then the streams are cancelled.
 *
 * The first cell (one long stream) also reads the engine's KV usage
 * (build_metrics, when the dialect has it) to estimate its KV capacity,
 * which bounds T in the other cells to half of it: a grid that filled the
 * cache would time preemptions, not decode steps. Engines on different
 * hosts run their grids at once; engines that share a host, one after the
 * other.
 */
#include "build-config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "control/handoff-probe.h"
#include "net/loop.h"
#include "tools/profile/run.h"

/* A group's prompts should prefill within this share of the first-token
 * timeout. */
#define GROUP_SHARE 0.5

struct token_event {
	uint64_t count;             /* tokens so far, this event's included */
	int64_t at_us;
};

struct cell;

struct stream {
	struct cell *cell;
	char *prompt;
	struct nw_handoff_probe *probe; /* NULL: not started, or finished */
	GArray *events;             /* struct token_event */
	uint64_t count;
	bool ended;                 /* the stream finished by itself */
};

struct grid;

struct cell {
	struct grid *g;
	struct nw_prof_cell plan;
	uint32_t max_tokens;
	struct stream *streams;
	unsigned built, started, first;
	GSource *tick;              /* the cell's steps run from here, outside
	                             * the calls' callbacks */
	char *error;
	struct nw_dialect_call *metrics;
	bool metrics_sent;
	uint64_t metrics_resident;
};

struct grid {
	struct nw_prof_run *run;
	struct nw_prof_engine *e;
	char *host;                 /* the engine's host: one grid at a time each */
	bool started;
	struct grid *all;           /* every engine's grid, n_engines of them */
	struct nw_prof_cell cells[NW_PROF_CELLS_MAX];
	size_t n_cells, next;
	uint64_t p_min, p_max;
	unsigned *running;
	bool *all_done;
};

static void run_next_cell(struct grid *g);

static void G_GNUC_PRINTF(2, 3)
cell_fail(struct cell *c, const char *fmt, ...)
{
	va_list ap;

	if (c->error != NULL)
		return;
	va_start(ap, fmt);
	c->error = g_strdup_vprintf(fmt, ap);
	va_end(ap);
	nw_deadline_source_set_in(c->tick, 0);
}

static void
poke(struct cell *c)
{
	nw_deadline_source_set_in(c->tick, 0);
}

/* --- the streams ---------------------------------------------------------- */

static void
on_tokens(void *data, uint32_t tokens, int64_t at_us)
{
	struct stream *s = data;
	struct token_event ev;

	s->count += tokens;
	ev = (struct token_event){ .count = s->count, .at_us = at_us };
	g_array_append_val(s->events, ev);
	if (s->events->len == 1) {
		s->cell->first++;
		poke(s->cell);
	} else if (s->cell->first == s->cell->plan.active) {
		poke(s->cell);
	}
}

static void
on_stream_done(void *data, const struct nw_handoff_probe_result *res)
{
	struct stream *s = data;

	s->probe = NULL; /* freed when this returns */
	if (!res->ok)
		cell_fail(s->cell, "stage %s: %s", nw_handoff_probe_stage_name(res->stage),
		          res->error);
	s->ended = true;
	poke(s->cell);
}

/* What one prompt of the cell takes to prefill, counting the fixed cost
 * for each prompt (an engine may not batch them). */
static double
prompt_prefill_s(const struct nw_prof_engine *e, uint64_t p)
{
	const struct nw_prefill_profile *f = &e->fit_prefill;
	double x = (double)p;

	return MAX(f->a_s, 0.0) + MAX(f->b_s * x + f->c_s * x * x, 0.0);
}

static void
start_group(struct cell *c)
{
	struct grid *g = c->g;
	const struct nw_config *cfg = g->run->cfg;
	double budget = GROUP_SHARE * cfg->engine.first_token_timeout_s;
	double each = prompt_prefill_s(g->e, c->plan.prompt_tokens), sum = 0;

	do {
		struct stream *s = &c->streams[c->started++];
		struct nw_handoff_probe_options po = {
			.pool = g->run->pool, .prefill = g->e->d, .model = g->e->model,
			.handle = NW_HANDOFF_PROBE_HANDLE_BASE + g->run->next_handle++,
			.max_tokens = c->max_tokens, .prompt = s->prompt,
			.leg_timeout_s = cfg->engine.first_token_timeout_s,
			.connect_timeout_s = cfg->engine.connect_timeout_s,
			.aggregate = true,
			/* 0 (no bound) in the daemon; here every wait is bounded. */
			.gap_timeout_s = cfg->engine.decode_read_timeout_s > 0
			                 ? cfg->engine.decode_read_timeout_s
			                 : cfg->engine.first_token_timeout_s,
			.on_tokens = on_tokens, .tokens_data = s,
		};

		s->probe = nw_handoff_probe_start(&po, on_stream_done, s);
		sum += each;
	} while (c->started < c->plan.active && sum + each <= budget);
}

/* --- the window ----------------------------------------------------------- */

/* The event of stream s in the step that gave the last first token. */
static guint
window_start(const struct stream *s, int64_t all_us)
{
	guint best = 0;

	for (guint k = 1; k < s->events->len; k++) {
		int64_t d = g_array_index(s->events, struct token_event, k).at_us - all_us;
		int64_t b = g_array_index(s->events, struct token_event, best).at_us - all_us;

		if (llabs(d) < llabs(b))
			best = k;
	}
	return best;
}

static int64_t
all_decoding_us(const struct cell *c)
{
	int64_t all = 0;

	for (uint32_t i = 0; i < c->plan.active; i++)
		all = MAX(all, g_array_index(c->streams[i].events, struct token_event, 0).at_us);
	return all;
}

/* Tokens timed so far in the window: the least over the streams. */
static uint64_t
window_tokens(const struct cell *c, int64_t all_us, bool *ended)
{
	uint64_t least = UINT64_MAX;

	*ended = false;
	for (uint32_t i = 0; i < c->plan.active; i++) {
		const struct stream *s = &c->streams[i];
		uint64_t c0 = g_array_index(s->events, struct token_event, window_start(s, all_us)).count;

		least = MIN(least, s->count - c0);
		*ended = *ended || s->ended;
	}
	return least;
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double
median(double *v, size_t n)
{
	qsort(v, n, sizeof *v, cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* One stream's token interval over its window: the median, over every
 * two arrivals a quarter of the window apart, of the time between them per
 * token. A pair that far apart shares the lateness of single arrivals
 * among several tokens; a stall of the engine or its host (every later
 * arrival shifted) or an arrival a busy client read late touches only the
 * few pairs around it, which the median passes over. */
static double
stream_slope(const struct stream *s, guint k0, uint64_t w, double *pairs)
{
	const struct token_event *ev = &g_array_index(s->events, struct token_event, 0);
	guint end = k0 + 1, span;
	size_t n = 0;

	while (end < s->events->len && ev[end].count <= ev[k0].count + w)
		end++;
	/* ev[k0..end) are the window's arrivals. */
	span = MAX((end - k0) / 4, 1u);
	for (guint i = k0; i + span < end; i++)
		pairs[n++] = (double)(ev[i + span].at_us - ev[i].at_us) / 1e6 /
		             (double)(ev[i + span].count - ev[i].count);
	return n > 0 ? median(pairs, n) : NAN;
}

/* The cell's sample: the token interval is the median over the streams of
 * each one's slope of arrival time against token count over the window's
 * w tokens; T is the mean resident context of those steps. */
static void
window_sample(const struct cell *c, int64_t all_us, uint64_t w, struct nw_decode_sample *out)
{
	double *pairs = g_new(double, w + 1);
	double *slopes = g_new(double, c->plan.active);
	double kv = 0;
	size_t n = 0;

	for (uint32_t i = 0; i < c->plan.active; i++) {
		const struct stream *s = &c->streams[i];
		guint k0 = window_start(s, all_us);
		uint64_t c0 = g_array_index(s->events, struct token_event, k0).count;

		/* The step that gives token n decodes a context of p + n - 1. */
		kv += (double)c->plan.prompt_tokens + (double)c0 + ((double)w - 1) / 2;
		slopes[n] = stream_slope(s, k0, w, pairs);
		n += !isnan(slopes[n]);
	}
	out->active = c->plan.active;
	out->kv_tokens = (uint64_t)llround(kv);
	out->seconds = n > 0 ? median(slopes, n) : NAN;
	g_free(pairs);
	g_free(slopes);
}

/* --- KV capacity ---------------------------------------------------------- */

static void
metrics_answered(void *data, const struct nw_dialect_answer *a)
{
	struct cell *c = data;
	struct nw_prof_engine *e = c->g->e;
	const struct nw_dialect *d = e->d;
	struct narwhal_engine_metrics m = {
		.struct_size = sizeof m, .running = -1, .waiting = -1, .kv_usage = NAN,
		.start_time_s = NAN,
	};

	c->metrics = NULL;
	if (!nw_prof_answered_2xx(a) ||
	    d->ops->parse_metrics(d->ctx, a->body->str, a->body->len, &m) != 0)
		return;
	/* Usage counts whole blocks, so the estimate errs low (by less than
	 * a block of one stream's tokens). */
	if (m.kv_usage > 0 && m.kv_usage <= 1)
		e->kv_capacity = (uint64_t)((double)c->metrics_resident / m.kv_usage);
}

static void
send_metrics(struct cell *c)
{
	struct grid *g = c->g;
	const struct nw_dialect *d = g->e->d;
	struct narwhal_http_call call = { .struct_size = sizeof call };

	c->metrics_sent = true;
	/* Only the first cell's single stream: with many streams, each one's
	 * part-filled last block would make the estimate low. */
	if (c->plan.active != 1 || g->e->kv_asked ||
	    d->ops->build_metrics == NULL || d->ops->parse_metrics == NULL ||
	    d->ops->build_metrics(d->ctx, &d->ref, &call) != 0) {
		json_decref(call.body);
		return;
	}
	g->e->kv_asked = true;
	c->metrics_resident = 0;
	for (uint32_t i = 0; i < c->plan.active; i++)
		c->metrics_resident += c->plan.prompt_tokens + c->streams[i].count;
	c->metrics = nw_prof_call(g->run, d, &call, g->run->cfg->engine.health_timeout_s,
	                          metrics_answered, c);
}

/* --- a cell's life ------------------------------------------------------- */

static void
cell_free(struct cell *c)
{
	for (uint32_t i = 0; i < c->plan.active; i++) {
		nw_handoff_probe_cancel(c->streams[i].probe);
		g_free(c->streams[i].prompt);
		if (c->streams[i].events != NULL)
			g_array_unref(c->streams[i].events);
	}
	if (c->metrics != NULL)
		nw_dialect_call_cancel(c->metrics);
	nw_deadline_source_destroy(c->tick);
	g_free(c->streams);
	g_free(c->error);
	g_free(c);
}

static void
cell_finish(struct cell *c, const struct nw_decode_sample *sample)
{
	struct grid *g = c->g;
	struct nw_prof_engine *e = g->e;

	if (sample != NULL)
		g_array_append_val(e->decode, *sample);
	else
		nw_prof_fail(e, "decode with %u active request(s) of %" G_GUINT64_FORMAT " tokens: %s",
		             c->plan.active, c->plan.prompt_tokens, c->error);
	nw_prof_report_done(g->run->report, NW_PROF_CELL_UNITS);
	cell_free(c);
	run_next_cell(g);
}

static void
on_tick(void *data)
{
	struct cell *c = data;
	const unsigned w = c->g->run->sizes.window;
	struct nw_decode_sample sample;
	int64_t all_us;
	uint64_t timed;
	bool ended;

	if (c->error != NULL) {
		cell_finish(c, NULL);
		return;
	}
	if (c->built < c->plan.active)
		return;
	if (c->first < c->started) {
		for (uint32_t i = 0; i < c->started; i++)
			if (c->streams[i].ended && c->streams[i].events->len == 0) {
				cell_fail(c, "a stream ended without a token");
				return;
			}
		return;
	}
	if (c->started < c->plan.active) {
		start_group(c);
		return;
	}
	all_us = all_decoding_us(c);
	timed = window_tokens(c, all_us, &ended);
	if (!c->metrics_sent && timed >= w / 2)
		send_metrics(c);
	if (timed >= w || (ended && timed >= w / 2)) {
		window_sample(c, all_us, MIN(timed, w), &sample);
		if (sample.seconds > 0)
			cell_finish(c, &sample);
		else
			cell_fail(c, "no steady token intervals in its window");
	} else if (ended) {
		cell_fail(c, "a stream ended after %" G_GUINT64_FORMAT " timed token(s), before "
		          "its window of %u%s", timed, w,
		          timed == 0 ? " (no token came apart from the others: an engine that "
		                       "answers with no delay between tokens, such as narwhal-sim "
		                       "--no-delay, cannot be timed)" : "");
	}
}

static void
prompt_built(void *data, bool ok, char *text, double seconds, const char *error)
{
	struct cell *c = data;
	struct grid *g = c->g;

	(void)seconds;
	if (!ok) {
		cell_fail(c, "a prompt of %" G_GUINT64_FORMAT " tokens: %s", c->plan.prompt_tokens,
		          error);
		return;
	}
	c->streams[c->built++].prompt = text;
	if (c->built < c->plan.active)
		nw_prof_prompt_build(g->run, g->e, c->plan.prompt_tokens, prompt_built, c);
	else
		poke(c);
}

static void
run_cell(struct grid *g, const struct nw_prof_cell *plan)
{
	struct cell *c = g_new0(struct cell, 1);

	c->g = g;
	c->plan = *plan;
	c->max_tokens = nw_prof_stream_tokens(&g->run->sizes, plan, g->e->max_model_len);
	c->streams = g_new0(struct stream, plan->active);
	for (uint32_t i = 0; i < plan->active; i++) {
		c->streams[i].cell = c;
		c->streams[i].events = g_array_new(FALSE, FALSE, sizeof(struct token_event));
	}
	c->tick = nw_deadline_source_new("narwhal-profile-cell", on_tick, c);
	nw_prof_report_progress(g->run->report, "%s: decode cell %zu, %u active request(s) "
	                        "of %" G_GUINT64_FORMAT " tokens", g->e->d->ref.id, g->next,
	                        plan->active, plan->prompt_tokens);
	nw_prof_prompt_build(g->run, g->e, plan->prompt_tokens, prompt_built, c);
}

/* After the first cell: the rest of the grid, bounded by what the engine
 * showed (its prefill, its KV capacity). */
static void
plan_rest(struct grid *g)
{
	struct nw_prof_run *run = g->run;
	uint64_t t_max = nw_prof_kv_tokens_max(&run->sizes, &g->e->fit_prefill,
	                                       g->e->kv_capacity);
	size_t n = nw_prof_decode_cells(run->opts->quick, run->opts->active_max, g->p_min,
	                                g->p_max, t_max, g->cells, G_N_ELEMENTS(g->cells));

	nw_prof_report_plan(run->report, ((double)n - (double)run->decode_cells) *
	                    NW_PROF_CELL_UNITS);
	g->n_cells = n;
}

static void start_grid(struct grid *g);

static void
grid_done(struct grid *g)
{
	struct nw_prof_engine *e = g->e;

	if (e->error == NULL &&
	    !nw_fit_decode((const struct nw_decode_sample *)(void *)e->decode->data,
	                   e->decode->len, &e->fit_decode))
		nw_prof_fail(e, "its token intervals do not fit the decode form (%u cells)",
		             e->decode->len);
	e->measured_at = nw_prof_utc_now();
	if (--*g->running == 0) {
		*g->all_done = true;
		return;
	}
	/* The next engine on the same host. */
	for (uint32_t i = 0; i < g->run->n_engines; i++) {
		struct grid *next = &g->all[i];

		if (next->e != NULL && !next->started && strcmp(next->host, g->host) == 0) {
			start_grid(next);
			return;
		}
	}
}

static void
run_next_cell(struct grid *g)
{
	if (g->e->error == NULL && g->next == 1 && g->n_cells == 1)
		plan_rest(g);
	if (g->e->error != NULL || g->next >= g->n_cells) {
		grid_done(g);
		return;
	}
	run_cell(g, &g->cells[g->next++]);
}

static void
start_grid(struct grid *g)
{
	g->started = true;
	run_next_cell(g);
}

/* The host of an engine's URL (port and scheme aside). */
static char *
url_host(const char *url)
{
	char *host = NULL;

	if (!g_uri_split_network(url, G_URI_FLAGS_NONE, NULL, &host, NULL, NULL))
		return g_strdup(url);
	return host;
}

void
nw_prof_decode(struct nw_prof_run *run)
{
	struct grid *grids = g_new0(struct grid, MAX(run->n_engines, 1));
	unsigned running = 0;
	bool all_done = false;

	for (uint32_t i = 0; i < run->n_engines; i++) {
		struct nw_prof_engine *e = &run->engines[i];
		struct grid *g = &grids[i];
		uint64_t reserve = run->sizes.window + 8;
		uint64_t p_max = e->fit_prefill.max_tokens;

		if (!e->selected || e->error != NULL)
			continue;
		if (e->max_model_len > 0)
			p_max = MIN(p_max, (uint64_t)MAX(e->max_model_len - (int64_t)reserve, 0));
		if (p_max < e->fit_prefill.min_tokens) {
			nw_prof_fail(e, "its context (max_model_len %" G_GINT64_FORMAT ") is too short "
			             "for the decode grid", e->max_model_len);
			continue;
		}
		g->run = run;
		g->e = e;
		g->all = grids;
		g->host = url_host(e->d->ref.url);
		g->running = &running;
		g->all_done = &all_done;
		g->p_min = e->fit_prefill.min_tokens;
		g->p_max = p_max;
		/* The first cell, one long stream, estimates the KV capacity. */
		g->cells[0] = (struct nw_prof_cell){ .active = 1, .prompt_tokens = p_max };
		g->n_cells = 1;
		running++;
	}
	all_done = running == 0;
	/* Engines on different hosts at once; engines that share a host one
	 * after another, since they share its processors (and a narwhal-sim
	 * process serves all its engines from one thread). */
	for (uint32_t i = 0; i < run->n_engines; i++) {
		bool host_busy = false;

		if (grids[i].e == NULL)
			continue;
		for (uint32_t j = 0; j < i; j++)
			host_busy = host_busy || (grids[j].started && strcmp(grids[j].host, grids[i].host) == 0);
		if (!host_busy)
			start_grid(&grids[i]);
	}
	nw_prof_wait(&all_done);
	for (uint32_t i = 0; i < run->n_engines; i++)
		g_free(grids[i].host);
	g_free(grids);
}
