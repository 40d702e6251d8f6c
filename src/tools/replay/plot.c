/*
 * The plot: gnuplot draws it from data files and a script written to a
 * temporary directory. It runs after the load loop has ended, so waiting
 * for gnuplot blocks nothing.
 */
#include "build-config.h"

#include "tools/replay/report.h"

#include <math.h>
#include <string.h>

#include <glib/gstdio.h>

bool
rp_plot_path_ok(const char *path)
{
	return g_str_has_suffix(path, ".png") || g_str_has_suffix(path, ".svg");
}

/* A gnuplot single-quoted string: a quote is written twice. */
static void
quoted(GString *out, const char *s)
{
	g_string_append_c(out, '\'');
	for (; *s; s++) {
		if (*s == '\'')
			g_string_append_c(out, '\'');
		g_string_append_c(out, *s);
	}
	g_string_append_c(out, '\'');
}

static const char *
gnuplot_program(void)
{
	const char *env = g_getenv("NARWHAL_GNUPLOT");

	return env && *env ? env : "gnuplot";
}

/* Latency of every ok request, one data block per run with any. Returns
 * the runs that got a block, in block order. */
static GArray *
write_latency(GString *data, const struct rp_report *rep)
{
	GArray *blocks = g_array_new(FALSE, FALSE, sizeof(guint));

	for (guint k = 0; k < rep->runs->len; k++) {
		const struct rp_report_run *rr = g_ptr_array_index(rep->runs, k);
		bool any = false;

		for (size_t i = 0; i < rr->run.n; i++) {
			const struct rp_result *r = &rr->run.results[i];

			if (r->outcome != RP_OUT_OK || !isfinite(r->sent))
				continue;
			g_string_append_printf(data, "%.6f %.6f ", r->sent, r->ttft);
			if (isfinite(r->tpot))
				g_string_append_printf(data, "%.6f\n", r->tpot);
			else
				g_string_append(data, "NaN\n");
			any = true;
		}
		if (any) {
			g_string_append(data, "\n\n"); /* ends a gnuplot index block */
			g_array_append_val(blocks, k);
		}
	}
	return blocks;
}

static void
write_script(GString *sc, const char *path, const char *lat_file, const char *sweep_file,
             const struct rp_report *rep, GArray *blocks, bool png_cairo)
{
	bool sweep = rep->runs->len > 1;
	bool png = g_str_has_suffix(path, ".png");

	if (png)
		g_string_append_printf(sc, "set terminal %s size 1200,%d noenhanced\n",
		                       png_cairo ? "pngcairo" : "png", sweep ? 900 : 500);
	else
		g_string_append_printf(sc, "set terminal svg size 1200,%d dynamic noenhanced\n",
		                       sweep ? 900 : 500);
	g_string_append(sc, "set output ");
	quoted(sc, path);
	g_string_append(sc, "\nset grid\nset key outside right top\n");
	if (sweep)
		g_string_append(sc, "set multiplot layout 2,1\n");

	g_string_append(sc, "set title ");
	quoted(sc, rep->source);
	g_string_append(sc, "\nset xlabel 'time since start (s)'\nset ylabel 'TTFT (s)'\n"
	                    "set y2label 'TPOT (s)'\nset ytics nomirror\nset y2tics\n"
	                    "set yrange [0:*]\nset y2range [0:*]\n");
	if (blocks->len == 0) {
		g_string_append(sc, "set label 'no successful requests' at graph 0.4,0.5\n"
		                    "set xrange [0:1]\nset yrange [0:1]\nplot 2 notitle\n");
	} else {
		g_string_append(sc, "plot ");
		for (guint b = 0; b < blocks->len; b++) {
			const struct rp_report_run *rr =
				g_ptr_array_index(rep->runs, g_array_index(blocks, guint, b));
			g_autofree char *sfx = sweep ? g_strdup_printf(" x%g", rr->scale)
			                             : g_strdup("");

			g_string_append(sc, b ? ", " : "");
			quoted(sc, lat_file);
			g_string_append_printf(sc, " index %u using 1:2 axes x1y1 with points pt 7 "
			                       "ps 0.5 title 'TTFT%s', ", b, sfx);
			quoted(sc, lat_file);
			g_string_append_printf(sc, " index %u using 1:3 axes x1y2 with points pt 2 "
			                       "ps 0.5 title 'TPOT%s'", b, sfx);
		}
		g_string_append_c(sc, '\n');
	}
	if (sweep) {
		g_string_append(sc, "unset label\nset autoscale\nset title 'SLO attainment and goodput "
		                    "against offered rate'\nset xlabel 'offered rate (req/s)'\n"
		                    "set ylabel 'attainment (%)'\nset y2label 'req/s'\n"
		                    "set yrange [0:105]\nset y2range [0:*]\nplot ");
		quoted(sc, sweep_file);
		g_string_append(sc, " using 2:3 axes x1y1 with linespoints pt 7 title 'attainment', ");
		quoted(sc, sweep_file);
		g_string_append(sc, " using 2:4 axes x1y2 with linespoints pt 5 title 'goodput', ");
		quoted(sc, sweep_file);
		g_string_append(sc, " using 2:5 axes x1y2 with linespoints pt 4 dt 2 "
		                    "title 'throughput'\nunset multiplot\n");
	}
}

static bool
run_gnuplot(const char *script, GString *err_text, GError **error)
{
	const char *argv[] = { gnuplot_program(), script, NULL };
	g_autofree char *out = NULL, *err = NULL;
	int status = 0;

	if (!g_spawn_sync(NULL, (char **)argv, NULL, G_SPAWN_SEARCH_PATH, NULL, NULL, &out, &err,
	                  &status, error))
		return false;
	g_string_assign(err_text, err ? err : "");
	return g_spawn_check_wait_status(status, NULL);
}

bool
rp_report_plot(const char *path, const struct rp_report *rep, GError **error)
{
	g_autofree char *prog = g_find_program_in_path(gnuplot_program());
	g_autofree char *dir = NULL, *lat = NULL, *sweep = NULL, *script = NULL;
	GString *data, *sc, *err_text;
	GArray *blocks;
	bool ok = false;

	if (!rp_plot_path_ok(path)) {
		g_set_error(error, RP_ERROR, RP_ERROR_PARSE,
		            "--plot %s: the name must end in .png or .svg", path);
		return false;
	}
	if (prog == NULL) {
		g_set_error(error, RP_ERROR, RP_ERROR_RUN,
		            "--plot needs gnuplot, and \"%s\" is not on PATH (Debian: apt-get install "
		            "-y gnuplot-nox); the other outputs were written", gnuplot_program());
		return false;
	}
	dir = g_dir_make_tmp("narwhal-replay-plot-XXXXXX", error);
	if (dir == NULL)
		return false;
	lat = g_build_filename(dir, "latency.dat", NULL);
	sweep = g_build_filename(dir, "sweep.dat", NULL);
	script = g_build_filename(dir, "plot.gp", NULL);
	data = g_string_new(NULL);
	sc = g_string_new(NULL);
	err_text = g_string_new(NULL);
	blocks = write_latency(data, rep);
	if (!g_file_set_contents(lat, data->str, (gssize)data->len, error))
		goto out;
	g_string_truncate(data, 0);
	for (guint k = 0; k < rep->runs->len; k++) {
		const struct rp_report_run *rr = g_ptr_array_index(rep->runs, k);
		const struct rp_summary *s = &rr->summary;

		g_string_append_printf(data, "%g %.6f %.4f %.6f %.6f\n", rr->scale,
		                       isfinite(s->offered_rate) ? s->offered_rate : 0.0,
		                       isfinite(s->attainment) ? s->attainment * 100 : 0.0,
		                       isfinite(s->goodput) ? s->goodput : 0.0,
		                       isfinite(s->throughput) ? s->throughput : 0.0);
	}
	if (!g_file_set_contents(sweep, data->str, (gssize)data->len, error))
		goto out;
	/* pngcairo draws better; plain png is the fallback some builds have. */
	for (int attempt = 0; attempt < 2 && !ok; attempt++) {
		g_string_truncate(sc, 0);
		write_script(sc, path, lat, sweep, rep, blocks, attempt == 0);
		if (!g_file_set_contents(script, sc->str, (gssize)sc->len, error))
			goto out;
		GError *spawn_error = NULL;

		ok = run_gnuplot(script, err_text, &spawn_error);
		if (spawn_error != NULL) {
			g_propagate_error(error, spawn_error);
			goto out;
		}
		if (!g_str_has_suffix(path, ".png"))
			break;
	}
	if (!ok)
		g_set_error(error, RP_ERROR, RP_ERROR_RUN, "gnuplot failed to draw %s: %s", path,
		            err_text->str);
out:
	g_unlink(lat);
	g_unlink(sweep);
	g_unlink(script);
	g_rmdir(dir);
	g_array_free(blocks, TRUE);
	g_string_free(data, TRUE);
	g_string_free(sc, TRUE);
	g_string_free(err_text, TRUE);
	return ok;
}
