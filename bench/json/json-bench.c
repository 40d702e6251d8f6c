/*
 * bench/json: the request path's JSON reader and writer (src/core/json-*.c)
 * against the jansson calls they replace, on the payloads the daemon reads
 * and writes for each request (bench/json/payloads). See
 * bench/json/README.md.
 *
 * For each payload, in the same run and taking turns batch by batch:
 *   read    json_loadb against nw_json_read, with the flags the request
 *           path uses for it (a client body: JSON_REJECT_DUPLICATES |
 *           JSON_DECODE_ANY; an engine's answer or chunk: 0), the tree
 *           freed after each;
 *   write   json_dumps(v, JSON_COMPACT) against nw_json_dumps of the same
 *           tree, the text freed after each (what leg.c and pair.c do
 *           for an engine request body).
 * A batch is timed with CLOCK_MONOTONIC and sized to take about 10 ms;
 * each run gives ns per call for both and their ratio; the figures
 * printed are medians over runs (the ratio: the median of the per-run
 * ratios). Before timing, both sides are checked to agree.
 *
 *   json-bench [--runs R] [--batch-ms MS] PAYLOAD.json...
 */
#include "build-config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <glib.h>
#include <jansson.h>

#include "core/json-read.h"
#include "core/json-write.h"

enum { JANSSON, OURS, SIDES };

struct payload {
	char *name;
	char *text;
	size_t len;
	size_t flags;
	json_t *tree;
};

static int64_t
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static double
median(double *v, size_t n)
{
	for (size_t i = 1; i < n; i++)
		for (size_t j = i; j > 0 && v[j - 1] > v[j]; j--) {
			double t = v[j];

			v[j] = v[j - 1];
			v[j - 1] = t;
		}
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* One call of a side on p; the result is freed. */
static void
read_once(const struct payload *p, int side)
{
	json_t *v = side == JANSSON ? json_loadb(p->text, p->len, p->flags, NULL) :
	                              nw_json_read(p->text, p->len, p->flags, NULL);

	if (v == NULL)
		g_error("%s no longer reads", p->name);
	json_decref(v);
}

static void
write_once(const struct payload *p, int side)
{
	size_t len;
	char *text = side == JANSSON ? json_dumps(p->tree, JSON_COMPACT) :
	                               nw_json_dumps(p->tree, JSON_COMPACT, &len);

	if (text == NULL)
		g_error("%s no longer writes", p->name);
	free(text);
}

/* ns per call of each side over one batch of n calls each, in turns of
 * 64 calls so that both see the same moment of the machine. */
static void
time_batch(const struct payload *p, void (*op)(const struct payload *, int), long n,
           double ns[SIDES])
{
	int64_t total[SIDES] = { 0, 0 };

	for (long done = 0; done < n; done += 64)
		for (int side = 0; side < SIDES; side++) {
			int64_t t0 = now_ns();

			for (int i = 0; i < 64; i++)
				op(p, side);
			total[side] += now_ns() - t0;
		}
	for (int side = 0; side < SIDES; side++)
		ns[side] = (double)total[side] / (double)((n + 63) / 64 * 64);
}

/* The calls per batch that take about batch_ms for jansson's side. */
static long
calibrate(const struct payload *p, void (*op)(const struct payload *, int), double batch_ms)
{
	double ns[SIDES];

	time_batch(p, op, 256, ns);
	return MAX(64L, (long)(batch_ms * 1e6 / MAX(ns[JANSSON], 1.0)));
}

static void
measure(const struct payload *p, void (*op)(const struct payload *, int), int runs,
        double batch_ms, double out[3])
{
	double *side_ns[SIDES], *ratio = g_new(double, runs);
	long n = calibrate(p, op, batch_ms);

	for (int side = 0; side < SIDES; side++)
		side_ns[side] = g_new(double, runs);
	for (int r = 0; r < runs; r++) {
		double ns[SIDES];

		time_batch(p, op, n, ns);
		side_ns[JANSSON][r] = ns[JANSSON];
		side_ns[OURS][r] = ns[OURS];
		ratio[r] = ns[JANSSON] / ns[OURS];
	}
	out[0] = median(side_ns[JANSSON], (size_t)runs);
	out[1] = median(side_ns[OURS], (size_t)runs);
	out[2] = median(ratio, (size_t)runs);
	for (int side = 0; side < SIDES; side++)
		g_free(side_ns[side]);
	g_free(ratio);
}

/* Both sides agree on p before it is timed. */
static void
check(const struct payload *p)
{
	json_t *a = json_loadb(p->text, p->len, p->flags, NULL);
	json_t *b = nw_json_read(p->text, p->len, p->flags, NULL);
	char *ta = json_dumps(a, JSON_COMPACT), *tb;
	size_t len;

	if (a == NULL || b == NULL || !json_equal(a, b))
		g_error("%s: the readers disagree", p->name);
	tb = nw_json_dumps(a, JSON_COMPACT, &len);
	if (ta == NULL || tb == NULL || strcmp(ta, tb) != 0)
		g_error("%s: the writers disagree", p->name);
	free(ta);
	free(tb);
	json_decref(a);
	json_decref(b);
}

int
main(int argc, char **argv)
{
	gint runs = 7;
	gdouble batch_ms = 10;
	GOptionEntry entries[] = {
		{ "runs", 'r', 0, G_OPTION_ARG_INT, &runs, "Runs; figures are medians (default 7)", "R" },
		{ "batch-ms", 'b', 0, G_OPTION_ARG_DOUBLE, &batch_ms,
		  "Milliseconds of jansson calls per batch (default 10)", "MS" },
		{ NULL },
	};
	GOptionContext *ctx = g_option_context_new("PAYLOAD.json... - JSON reader and writer against jansson");
	GError *error = NULL;

	g_option_context_add_main_entries(ctx, entries, NULL);
	if (!g_option_context_parse(ctx, &argc, &argv, &error) || argc < 2 || runs < 1 ||
	    batch_ms <= 0) {
		fprintf(stderr, "%s\n", error ? error->message : "give payload files");
		return 2;
	}
	g_option_context_free(ctx);

	printf("# %d runs, batches of about %.0f ms; ns per call, medians over runs;\n"
	       "# x = jansson's time / ours (median of per-run ratios)\n", runs, batch_ms);
	printf("| payload | bytes | read: jansson ns | ours ns | x | write: jansson ns | ours ns | x |\n");
	printf("|---|---|---|---|---|---|---|---|\n");
	for (int i = 1; i < argc; i++) {
		struct payload p = { .name = g_path_get_basename(argv[i]) };
		double rd[3], wr[3];

		if (!g_file_get_contents(argv[i], &p.text, &p.len, &error))
			g_error("%s", error->message);
		/* client bodies are read as request-parse.c reads them */
		p.flags = g_str_has_suffix(p.name, "-body.json") ?
		          JSON_REJECT_DUPLICATES | JSON_DECODE_ANY : 0;
		check(&p);
		p.tree = json_loadb(p.text, p.len, p.flags, NULL);
		measure(&p, read_once, runs, batch_ms, rd);
		measure(&p, write_once, runs, batch_ms, wr);
		printf("| %s | %zu | %.0f | %.0f | %.2f | %.0f | %.0f | %.2f |\n", p.name, p.len,
		       rd[0], rd[1], rd[2], wr[0], wr[1], wr[2]);
		fflush(stdout);
		json_decref(p.tree);
		g_free(p.text);
		g_free(p.name);
	}
	return 0;
}
