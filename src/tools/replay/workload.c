#include "build-config.h"

#include "tools/replay/workload.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* --- distributions -------------------------------------------------- */

static bool
parse_number(const char *s, double *out)
{
	char *end;

	if (s == NULL || *s == '\0')
		return false;
	errno = 0;
	*out = g_ascii_strtod(s, &end);
	return errno == 0 && *end == '\0' && isfinite(*out);
}

static bool
load_column(struct rp_dist *d, const char *path, bool output, GError **error)
{
	struct rp_trace *t = rp_trace_load(path, RP_TRACE_AUTO, error);

	if (t == NULL)
		return false;
	d->kind = RP_DIST_SAMPLE;
	d->samples = g_array_sized_new(FALSE, FALSE, sizeof(uint32_t), t->reqs->len);
	for (guint i = 0; i < t->reqs->len; i++) {
		const struct rp_request *r = &g_array_index(t->reqs, struct rp_request, i);
		uint32_t v = output ? r->output_tokens : r->input_tokens;

		g_array_append_val(d->samples, v);
	}
	rp_trace_free(t);
	return true;
}

bool
rp_dist_parse(struct rp_dist *d, const char *text, const char *what, bool output,
              GError **error)
{
	g_auto(GStrv) parts = NULL;
	guint n;
	double v[2] = { 0, 0 };

	memset(d, 0, sizeof *d);
	if (g_str_has_prefix(text, "trace:"))
		return load_column(d, text + 6, output, error);
	parts = g_strsplit(text, ":", -1);
	n = g_strv_length(parts);
	if (n == 1 && parse_number(parts[0], &v[0]) && v[0] >= 1) {
		d->kind = RP_DIST_FIXED;
		d->a = round(v[0]);
		return true;
	}
	if (n == 2 && strcmp(parts[0], "fixed") == 0 && parse_number(parts[1], &v[0]) && v[0] >= 1) {
		d->kind = RP_DIST_FIXED;
		d->a = round(v[0]);
		return true;
	}
	if (n == 3 && strcmp(parts[0], "uniform") == 0 && parse_number(parts[1], &v[0]) &&
	    parse_number(parts[2], &v[1]) && v[0] >= 1 && v[1] >= v[0] && v[1] <= 1e9) {
		d->kind = RP_DIST_UNIFORM;
		d->a = round(v[0]);
		d->b = round(v[1]);
		return true;
	}
	if (n == 3 && strcmp(parts[0], "lognormal") == 0 && parse_number(parts[1], &v[0]) &&
	    parse_number(parts[2], &v[1]) && v[0] >= 1 && v[1] >= 0 && v[1] <= 5) {
		d->kind = RP_DIST_LOGNORMAL;
		d->a = v[0];
		d->b = v[1];
		return true;
	}
	g_set_error(error, RP_ERROR, RP_ERROR_PARSE,
	            "%s: \"%s\" is not a length distribution (N, fixed:N, uniform:A:B, "
	            "lognormal:MEDIAN:SIGMA or trace:FILE; lengths >= 1)", what, text);
	return false;
}

void
rp_dist_clear(struct rp_dist *d)
{
	if (d->samples)
		g_array_free(d->samples, TRUE);
	memset(d, 0, sizeof *d);
}

/* A standard normal deviate (Box-Muller; 1 - u keeps log away from 0). */
static double
normal(GRand *rng)
{
	double u = 1.0 - g_rand_double(rng), v = g_rand_double(rng);

	return sqrt(-2.0 * log(u)) * cos(2.0 * G_PI * v);
}

static uint32_t
clamp_length(double x)
{
	if (!(x >= 1))
		return 1;
	if (x > 1e9)
		return 1000000000u;
	return (uint32_t)llround(x);
}

uint32_t
rp_dist_sample(const struct rp_dist *d, GRand *rng)
{
	switch (d->kind) {
	case RP_DIST_UNIFORM:
		return (uint32_t)d->a + (uint32_t)g_rand_int_range(rng, 0, (gint32)(d->b - d->a) + 1);
	case RP_DIST_LOGNORMAL:
		return clamp_length(d->a * exp(d->b * normal(rng)));
	case RP_DIST_SAMPLE:
		if (d->samples == NULL || d->samples->len == 0)
			return 1;
		return MAX(1u, g_array_index(d->samples, uint32_t,
		                             g_rand_int_range(rng, 0, (gint32)d->samples->len)));
	case RP_DIST_FIXED:
	default:
		return clamp_length(d->a);
	}
}

/* Gamma(shape k, scale 1) by Marsaglia and Tsang; shapes below 1 use the
 * boost Gamma(k) = Gamma(k + 1) * U^(1/k). */
static double
gamma_unit(GRand *rng, double k)
{
	double d, c;

	if (k < 1.0) {
		double u = 1.0 - g_rand_double(rng);

		return gamma_unit(rng, k + 1.0) * pow(u, 1.0 / k);
	}
	d = k - 1.0 / 3.0;
	c = 1.0 / sqrt(9.0 * d);
	for (;;) {
		double x = normal(rng), v = 1.0 + c * x, u;

		if (v <= 0)
			continue;
		v = v * v * v;
		u = 1.0 - g_rand_double(rng);
		if (u < 1.0 - 0.0331 * x * x * x * x ||
		    log(u) < 0.5 * x * x + d * (1.0 - v + log(v)))
			return d * v;
	}
}

double
rp_sample_gap(GRand *rng, double rate, double cv, bool gamma)
{
	double mean = 1.0 / rate, k;

	if (!gamma)
		return -log(1.0 - g_rand_double(rng)) * mean;
	if (cv < 1e-6)
		return mean;
	/* Shape 1/cv^2 and scale mean*cv^2 give the mean gap and the CV. */
	k = 1.0 / (cv * cv);
	return gamma_unit(rng, k) * mean / k;
}

/* --- phases --------------------------------------------------------- */

static void
phase_free(gpointer p)
{
	struct rp_phase *ph = p;

	g_free(ph->name);
	rp_dist_clear(&ph->input);
	rp_dist_clear(&ph->output);
	if (ph->pairs)
		g_array_free(ph->pairs, TRUE);
	g_free(ph);
}

void
rp_workload_free(struct rp_workload *w)
{
	if (w == NULL)
		return;
	g_ptr_array_free(w->phases, TRUE);
	g_free(w);
}

static struct rp_workload *
workload_new(void)
{
	struct rp_workload *w = g_new0(struct rp_workload, 1);

	w->phases = g_ptr_array_new_with_free_func(phase_free);
	w->repeat = 1;
	return w;
}

static struct rp_phase *
phase_new(guint index)
{
	struct rp_phase *ph = g_new0(struct rp_phase, 1);

	ph->name = g_strdup_printf("phase%u", index + 1);
	ph->rate = -1;
	ph->cv = 1.0;
	/* Defaults: a middling chat request. */
	ph->input.kind = RP_DIST_FIXED;
	ph->input.a = 512;
	ph->output.kind = RP_DIST_FIXED;
	ph->output.a = 128;
	return ph;
}

static bool
load_pairs(struct rp_phase *ph, const char *path, GError **error)
{
	struct rp_trace *t = rp_trace_load(path, RP_TRACE_AUTO, error);

	if (t == NULL)
		return false;
	ph->pairs = g_array_sized_new(FALSE, FALSE, sizeof(uint32_t), 2 * t->reqs->len);
	for (guint i = 0; i < t->reqs->len; i++) {
		const struct rp_request *r = &g_array_index(t->reqs, struct rp_request, i);

		g_array_append_val(ph->pairs, r->input_tokens);
		g_array_append_val(ph->pairs, r->output_tokens);
	}
	rp_trace_free(t);
	return true;
}

/* One key of a phase, from the spec or the JSON file (values as text). */
static bool
phase_set(struct rp_phase *ph, const char *key, const char *value, const char *what,
          GError **error)
{
	g_autofree char *where = g_strdup_printf("%s %s", what, key);
	double v;

	if (strcmp(key, "rate") == 0) {
		if (!parse_number(value, &v) || v < 0 || v > 1e6)
			goto bad_number;
		ph->rate = v;
	} else if (strcmp(key, "cv") == 0) {
		if (!parse_number(value, &v) || v < 0 || v > 100)
			goto bad_number;
		ph->cv = v;
		ph->gamma = true; /* a CV only means something for gamma gaps */
	} else if (strcmp(key, "duration") == 0) {
		if (!parse_number(value, &v) || v <= 0 || v > 1e7)
			goto bad_number;
		ph->duration = v;
	} else if (strcmp(key, "arrival") == 0) {
		if (strcmp(value, "poisson") == 0) {
			ph->gamma = false;
			ph->cv = 1.0;
		} else if (strcmp(value, "gamma") == 0) {
			ph->gamma = true;
		} else {
			g_set_error(error, RP_ERROR, RP_ERROR_PARSE,
			            "%s: \"%s\" is not poisson or gamma", where, value);
			return false;
		}
	} else if (strcmp(key, "input") == 0 || strcmp(key, "output") == 0) {
		struct rp_dist *d = key[0] == 'i' ? &ph->input : &ph->output;
		struct rp_dist nd;

		if (!rp_dist_parse(&nd, value, where, key[0] == 'o', error))
			return false;
		rp_dist_clear(d);
		*d = nd;
	} else if (strcmp(key, "lengths") == 0) {
		if (!g_str_has_prefix(value, "trace:")) {
			g_set_error(error, RP_ERROR, RP_ERROR_PARSE,
			            "%s: want trace:FILE (joint input/output samples)", where);
			return false;
		}
		if (ph->pairs)
			g_array_free(ph->pairs, TRUE);
		ph->pairs = NULL;
		return load_pairs(ph, value + 6, error);
	} else if (strcmp(key, "name") == 0) {
		g_free(ph->name);
		ph->name = g_strdup(value);
	} else {
		g_set_error(error, RP_ERROR, RP_ERROR_PARSE,
		            "%s: unknown key \"%s\" (rate, arrival, cv, duration, input, output, "
		            "lengths, name)", what, key);
		return false;
	}
	return true;

bad_number:
	g_set_error(error, RP_ERROR, RP_ERROR_PARSE, "%s: \"%s\" is out of range", where, value);
	return false;
}

/* Checks across the whole sequence. */
static bool
workload_check(struct rp_workload *w, const char *what, GError **error)
{
	if (w->phases->len == 0) {
		g_set_error(error, RP_ERROR, RP_ERROR_PARSE, "%s: no phases", what);
		return false;
	}
	for (guint i = 0; i < w->phases->len; i++) {
		struct rp_phase *ph = g_ptr_array_index(w->phases, i);

		if (ph->rate < 0) {
			g_set_error(error, RP_ERROR, RP_ERROR_PARSE, "%s: phase %u (%s) needs rate=R",
			            what, i + 1, ph->name);
			return false;
		}
		if (ph->duration <= 0 && (i + 1 < w->phases->len || w->repeat > 1)) {
			g_set_error(error, RP_ERROR, RP_ERROR_PARSE,
			            "%s: phase %u (%s) needs a duration: only the last phase of a "
			            "sequence run once may be open-ended", what, i + 1, ph->name);
			return false;
		}
		if (ph->rate == 0 && ph->duration <= 0) {
			g_set_error(error, RP_ERROR, RP_ERROR_PARSE, "%s: phase %u (%s) has rate 0 "
			            "and no duration", what, i + 1, ph->name);
			return false;
		}
	}
	return true;
}

struct rp_workload *
rp_workload_parse_spec(const char *spec, GError **error)
{
	struct rp_workload *w = workload_new();
	g_auto(GStrv) phases = g_strsplit(spec, ";", -1);

	for (guint i = 0; phases[i] != NULL; i++) {
		g_auto(GStrv) kvs = g_strsplit(phases[i], ",", -1);
		g_autofree char *what = g_strdup_printf("--synthetic phase %u", w->phases->len + 1);
		struct rp_phase *ph;

		if (*g_strstrip(phases[i]) == '\0')
			continue; /* a trailing ';' */
		ph = phase_new(w->phases->len);
		g_ptr_array_add(w->phases, ph);
		for (guint k = 0; kvs[k] != NULL; k++) {
			char *kv = g_strstrip(kvs[k]);
			char *eq = strchr(kv, '=');

			if (*kv == '\0')
				continue;
			if (eq == NULL) {
				g_set_error(error, RP_ERROR, RP_ERROR_PARSE,
				            "%s: \"%s\" is not key=value", what, kv);
				goto fail;
			}
			*eq = '\0';
			if (!phase_set(ph, g_strstrip(kv), g_strstrip(eq + 1), what, error))
				goto fail;
		}
	}
	if (!workload_check(w, "--synthetic", error))
		goto fail;
	return w;
fail:
	rp_workload_free(w);
	return NULL;
}

struct rp_workload *
rp_workload_from_json(const json_t *doc, const char *what, GError **error)
{
	struct rp_workload *w = workload_new();
	json_t *phases = json_object_get(doc, "phases"), *rep, *pv;
	const char *key;
	json_t *value;
	size_t i;

	if (!json_is_object(doc) || !json_is_array(phases)) {
		g_set_error(error, RP_ERROR, RP_ERROR_PARSE,
		            "%s: want an object with a \"phases\" array", what);
		goto fail;
	}
	json_object_foreach((json_t *)doc, key, value) {
		if (strcmp(key, "phases") != 0 && strcmp(key, "repeat") != 0 &&
		    strcmp(key, "comment") != 0) {
			g_set_error(error, RP_ERROR, RP_ERROR_PARSE,
			            "%s: unknown key \"%s\" (phases, repeat, comment)", what, key);
			goto fail;
		}
	}
	rep = json_object_get(doc, "repeat");
	if (rep != NULL) {
		if (!json_is_integer(rep) || json_integer_value(rep) < 1 ||
		    json_integer_value(rep) > 100000) {
			g_set_error(error, RP_ERROR, RP_ERROR_PARSE,
			            "%s: repeat must be an integer from 1 to 100000", what);
			goto fail;
		}
		w->repeat = (unsigned)json_integer_value(rep);
	}
	json_array_foreach(phases, i, pv) {
		g_autofree char *pwhat = g_strdup_printf("%s phases[%zu]", what, i);
		struct rp_phase *ph;

		if (!json_is_object(pv)) {
			g_set_error(error, RP_ERROR, RP_ERROR_PARSE, "%s: want an object", pwhat);
			goto fail;
		}
		ph = phase_new((guint)i);
		g_ptr_array_add(w->phases, ph);
		json_object_foreach(pv, key, value) {
			g_autofree char *text = NULL;

			/* Numbers and strings both become the spec's text form. */
			if (json_is_string(value))
				text = g_strdup(json_string_value(value));
			else if (json_is_number(value))
				text = g_strdup_printf("%.17g", json_number_value(value));
			else {
				g_set_error(error, RP_ERROR, RP_ERROR_PARSE,
				            "%s %s: want a number or a string", pwhat, key);
				goto fail;
			}
			if (!phase_set(ph, key, text, pwhat, error))
				goto fail;
		}
	}
	if (!workload_check(w, what, error))
		goto fail;
	return w;
fail:
	rp_workload_free(w);
	return NULL;
}

struct rp_workload *
rp_workload_load_file(const char *path, GError **error)
{
	json_error_t jerr;
	json_t *doc = json_load_file(path, 0, &jerr);
	struct rp_workload *w;

	if (doc == NULL) {
		g_set_error(error, RP_ERROR, RP_ERROR_FILE, "%s:%d: %s", path, jerr.line, jerr.text);
		return NULL;
	}
	w = rp_workload_from_json(doc, path, error);
	json_decref(doc);
	return w;
}

/* --- generation ----------------------------------------------------- */

static void
emit(struct rp_trace *t, const struct rp_phase *ph, guint pi, double at, GRand *rng)
{
	uint32_t in, out;

	if (ph->pairs != NULL && ph->pairs->len >= 2) {
		guint k = (guint)g_rand_int_range(rng, 0, (gint32)(ph->pairs->len / 2));

		in = MAX(1u, g_array_index(ph->pairs, uint32_t, 2 * k));
		out = MAX(1u, g_array_index(ph->pairs, uint32_t, 2 * k + 1));
	} else {
		in = rp_dist_sample(&ph->input, rng);
		out = rp_dist_sample(&ph->output, rng);
	}
	rp_trace_add(t, at, in, out, pi, NULL, 0);
}

struct rp_trace *
rp_workload_generate(const struct rp_workload *w, uint64_t seed, double time_limit,
                     uint64_t max_requests, GError **error)
{
	guint32 words[2] = { (guint32)seed, (guint32)(seed >> 32) };
	GRand *rng = g_rand_new_with_seed_array(words, 2);
	const struct rp_phase *last = g_ptr_array_index(w->phases, w->phases->len - 1);
	struct rp_trace *t;
	double start = 0;
	bool stop = false;

	if (last->duration <= 0 && time_limit <= 0 && max_requests == 0) {
		g_set_error(error, RP_ERROR, RP_ERROR_BOUND,
		            "the last phase is open-ended: give it a duration, or bound the run "
		            "with --duration or --max-requests");
		g_rand_free(rng);
		return NULL;
	}
	t = rp_trace_new("synthetic");
	for (guint i = 0; i < w->phases->len; i++) {
		const struct rp_phase *ph = g_ptr_array_index(w->phases, i);

		g_ptr_array_add(t->phase_names, g_strdup(ph->name));
	}
	for (unsigned rep = 0; rep < w->repeat && !stop; rep++) {
		for (guint i = 0; i < w->phases->len && !stop; i++) {
			const struct rp_phase *ph = g_ptr_array_index(w->phases, i);
			double end = ph->duration > 0 ? start + ph->duration : INFINITY;
			double at = start;

			/* The first gap of a phase is drawn at its own rate, from its
			 * start: each phase is its own renewal process. */
			while (ph->rate > 0) {
				at += rp_sample_gap(rng, ph->rate, ph->cv, ph->gamma);
				if (at >= end)
					break;
				if ((time_limit > 0 && at >= time_limit) ||
				    (max_requests > 0 && t->reqs->len >= max_requests)) {
					stop = true;
					break;
				}
				if (t->reqs->len >= RP_MAX_GENERATED) {
					g_set_error(error, RP_ERROR, RP_ERROR_BOUND,
					            "the workload would generate over %u requests; "
					            "bound it with --duration or --max-requests",
					            RP_MAX_GENERATED);
					rp_trace_free(t);
					g_rand_free(rng);
					return NULL;
				}
				emit(t, ph, i, at, rng);
			}
			start = end;
			if (time_limit > 0 && start >= time_limit)
				stop = true;
		}
	}
	g_rand_free(rng);
	/* Keep absolute times: a leading idle phase is part of the schedule. */
	return t;
}
