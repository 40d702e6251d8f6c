#include "build-config.h"

#include "core/profile.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <glib/gstdio.h>

#include "core/config-fields.h"
#include "core/regular-file.h"

/* How much of a value from the file a message quotes. */
#define QUOTE_MAX 64

/* --- the store in memory ----------------------------------------------- */

struct nw_profile_store *
nw_profile_store_new(void)
{
	struct nw_profile_store *s = g_new0(struct nw_profile_store, 1);

	s->version = NW_PROFILE_STORE_VERSION;
	s->engines = g_ptr_array_new_with_free_func((GDestroyNotify)nw_engine_profile_free);
	return s;
}

void
nw_profile_store_free(struct nw_profile_store *s)
{
	if (s == NULL)
		return;
	g_free(s->created_at);
	g_free(s->tool);
	g_ptr_array_unref(s->engines);
	g_free(s);
}

void
nw_engine_profile_free(struct nw_engine_profile *p)
{
	if (p == NULL)
		return;
	g_free(p->engine);
	g_free(p->url);
	g_free(p->dialect);
	g_free(p->model);
	g_free(p->hardware);
	g_free(p->measured_at);
	g_free(p);
}

void
nw_profile_store_put(struct nw_profile_store *s, struct nw_engine_profile *p)
{
	for (guint i = 0; i < s->engines->len; i++) {
		struct nw_engine_profile *old = g_ptr_array_index(s->engines, i);

		if (g_strcmp0(old->engine, p->engine) == 0) {
			nw_engine_profile_free(old);
			s->engines->pdata[i] = p;
			return;
		}
	}
	g_ptr_array_add(s->engines, p);
}

const struct nw_engine_profile *
nw_profile_store_find(const struct nw_profile_store *s, const char *engine)
{
	for (guint i = 0; s != NULL && engine != NULL && i < s->engines->len; i++) {
		const struct nw_engine_profile *p = g_ptr_array_index(s->engines, i);

		if (g_strcmp0(p->engine, engine) == 0)
			return p;
	}
	return NULL;
}

/* --- writing ------------------------------------------------------------- */

/* Now, as the store writes times: UTC, ISO 8601, whole seconds. */
static char *
utc_now(void)
{
	g_autoptr(GDateTime) now = g_date_time_new_now_utc();

	return g_date_time_format(now, "%Y-%m-%dT%H:%M:%SZ");
}

static json_t *
string_or_empty(const char *s)
{
	return json_string(s != NULL ? s : "");
}

static json_t *
engine_to_json(const struct nw_engine_profile *p)
{
	g_autofree char *now = p->measured_at == NULL ? utc_now() : NULL;
	const struct nw_prefill_profile *pf = &p->prefill;
	const struct nw_decode_profile *d = &p->decode;
	const struct nw_handoff_profile *h = &p->handoff;

	return json_pack(
		"{s:o, s:o, s:o, s:o, s:o, s:I, s:s,"
		" s:{s:f, s:f, s:f, s:I, s:I, s:I, s:f},"
		" s:{s:f, s:f, s:f, s:I, s:I, s:I, s:I, s:I, s:f},"
		" s:{s:f, s:f, s:I, s:I}}",
		"engine", string_or_empty(p->engine), "url", string_or_empty(p->url),
		"dialect", string_or_empty(p->dialect), "model", string_or_empty(p->model),
		"hardware", p->hardware != NULL ? json_string(p->hardware) : json_null(),
		"kv_capacity_tokens", (json_int_t)p->kv_capacity_tokens,
		"measured_at", p->measured_at != NULL ? p->measured_at : now,
		"prefill", "a_s", pf->a_s, "b_s", pf->b_s, "c_s", pf->c_s,
		"min_tokens", (json_int_t)pf->min_tokens, "max_tokens", (json_int_t)pf->max_tokens,
		"samples", (json_int_t)pf->samples, "rel_rms_error", pf->rel_rms_error,
		"decode", "d0_s", d->d0_s, "d1_s", d->d1_s, "d2_s", d->d2_s,
		"min_active", (json_int_t)d->min_active, "max_active", (json_int_t)d->max_active,
		"min_kv_tokens", (json_int_t)d->min_kv_tokens,
		"max_kv_tokens", (json_int_t)d->max_kv_tokens, "samples", (json_int_t)d->samples,
		"rel_rms_error", d->rel_rms_error,
		"handoff", "setup_s", h->setup_s, "per_token_s", h->per_token_s,
		"max_tokens", (json_int_t)h->max_tokens, "samples", (json_int_t)h->samples);
}

/* NULL when a number is not finite (json_pack refuses NaN and infinity). */
json_t *
nw_profile_store_to_json(const struct nw_profile_store *s)
{
	g_autofree char *now = s->created_at == NULL ? utc_now() : NULL;
	json_t *engines = json_array();

	for (guint i = 0; i < s->engines->len; i++) {
		json_t *e = engine_to_json(g_ptr_array_index(s->engines, i));

		if (e == NULL) {
			json_decref(engines);
			return NULL;
		}
		json_array_append_new(engines, e);
	}
	/* Always the version this code reads: what it writes is that format. */
	return json_pack("{s:i, s:s, s:s, s:o}", "version", NW_PROFILE_STORE_VERSION,
	                 "created_at", s->created_at != NULL ? s->created_at : now,
	                 "tool", s->tool != NULL ? s->tool : "narwhal " PACKAGE_VERSION,
	                 "engines", engines);
}

static bool models_readable(const struct nw_profile_store *s, const char *file, GError **error);

gboolean
nw_profile_store_save(const struct nw_profile_store *s, const char *file, GError **error)
{
	json_t *doc;
	char *text;
	g_autofree char *body = NULL;
	GError *e = NULL;
	gboolean ok;

	doc = nw_profile_store_to_json(s);

	/* JSON has no NaN or infinity: json_pack fails on one, and a store
	 * with it could not be read back anyway. */
	if (doc == NULL) {
		g_set_error(error, G_FILE_ERROR, G_FILE_ERROR_INVAL,
		            "%s: a profile holds a number that is not finite: nothing written", file);
		return FALSE;
	}
	/* Never write a store the router would refuse to read. */
	if (!models_readable(s, file, error)) {
		json_decref(doc);
		return FALSE;
	}
	text = json_dumps(doc, JSON_INDENT(2));
	body = g_strconcat(text, "\n", NULL);
	json_decref(doc);
	free(text);
	/* GLib writes a temporary file beside it (file.XXXXXX), fsyncs it
	 * (CONSISTENT) and renames it over file, so a reader sees the old
	 * store or the new one, never half of one; on failure it removes the
	 * temporary file. DURABLE also fsyncs the directory after the rename.
	 * Plain g_file_set_contents adds ONLY_EXISTING, which skips the
	 * fsync for a store written the first time: hence the _full form. A
	 * symbolic link at file is replaced by the store, not followed. */
	ok = g_file_set_contents_full(file, body, -1,
	                              G_FILE_SET_CONTENTS_CONSISTENT | G_FILE_SET_CONTENTS_DURABLE,
	                              0644, &e);
	if (!ok) {
		g_set_error(error, e->domain, e->code, "%s: cannot write the profile store: %s", file,
		            e->message);
		g_error_free(e);
	}
	return ok;
}

/* --- reading ------------------------------------------------------------- */

struct reader {
	const char *file;
	GError **error;
	bool failed; /* the first problem is reported; the rest are not looked for */
};

static void G_GNUC_PRINTF(3, 4)
problem(struct reader *r, const char *path, const char *fmt, ...)
{
	va_list ap;
	g_autofree char *msg = NULL;

	if (r->failed)
		return;
	r->failed = true;
	va_start(ap, fmt);
	msg = g_strdup_vprintf(fmt, ap);
	va_end(ap);
	if (path != NULL && *path)
		g_set_error(r->error, G_FILE_ERROR, G_FILE_ERROR_INVAL, "%s: %s: %s", r->file, path,
		            msg);
	else
		g_set_error(r->error, G_FILE_ERROR, G_FILE_ERROR_INVAL, "%s: %s", r->file, msg);
}

static char *
sub(const char *path, const char *key)
{
	return *path ? g_strconcat(path, ".", key, NULL) : g_strdup(key);
}

/* An object whose keys are all among keys[] (NULL-terminated). */
static bool
check_object(struct reader *r, const char *path, const json_t *v, const char *const *keys,
             const char *what)
{
	const char *key;
	const json_t *val;
	size_t n = g_strv_length((char **)keys);

	if (!json_is_object(v)) {
		g_autofree char *d = nw_json_describe(v);
		problem(r, path, "wrong type, found %s: %s", d, what);
		return false;
	}
	json_object_foreach((json_t *)v, key, val) {
		const char *best;
		g_autofree char *q = NULL, *at = NULL;
		bool known = false;

		for (size_t i = 0; i < n && !known; i++)
			known = strcmp(keys[i], key) == 0;
		if (known)
			continue;
		best = nw_closest(key, keys, n);
		q = nw_text_escape(key, QUOTE_MAX);
		at = sub(path, q);
		if (best != NULL) {
			problem(r, at, "unknown key: did you mean \"%s\"?", best);
		} else {
			g_autofree char *list = g_strjoinv("\", \"", (char **)keys);
			problem(r, at, "unknown key: the keys here are \"%s\"", list);
		}
		return false;
	}
	return true;
}

/* The member key of obj; a problem when it is missing. */
static const json_t *
member(struct reader *r, const char *path, const json_t *obj, const char *key, const char *valid)
{
	const json_t *v = json_object_get(obj, key);

	if (v == NULL && !r->failed) {
		g_autofree char *at = sub(path, key);
		problem(r, at, "missing: %s", valid);
	}
	return v;
}

static bool
read_string(struct reader *r, const char *path, const json_t *obj, const char *key,
            bool nullable, bool iso_time, char **out)
{
	const char *valid = iso_time ? "a UTC time in ISO 8601, as \"2026-12-01T21:17:30Z\""
	                    : nullable ? "a non-empty string, or null" : "a non-empty string";
	const json_t *v = member(r, path, obj, key, valid);
	g_autofree char *at = sub(path, key);

	if (v == NULL)
		return false;
	if (nullable && json_is_null(v)) {
		*out = NULL;
		return true;
	}
	if (!json_is_string(v) || json_string_length(v) == 0 ||
	    strlen(json_string_value(v)) != json_string_length(v)) {
		g_autofree char *d = nw_json_describe(v);
		problem(r, at, "wrong value, found %s: %s", d, valid);
		return false;
	}
	if (iso_time) {
		GDateTime *t = g_date_time_new_from_iso8601(json_string_value(v), NULL);

		if (t == NULL) {
			g_autofree char *q = nw_text_escape(json_string_value(v), QUOTE_MAX);
			problem(r, at, "\"%s\" is not a time: %s", q, valid);
			return false;
		}
		g_date_time_unref(t);
	}
	*out = g_strdup(json_string_value(v));
	return true;
}

/* An integer in min..max. */
static bool
read_uint(struct reader *r, const char *path, const json_t *obj, const char *key, uint64_t min,
          uint64_t max, uint64_t *out)
{
	g_autofree char *valid = max == UINT32_MAX
		? g_strdup_printf("an integer from %" G_GUINT64_FORMAT " to %u", min, UINT32_MAX)
		: g_strdup_printf("an integer, %" G_GUINT64_FORMAT " or more", min);
	const json_t *v = member(r, path, obj, key, valid);
	g_autofree char *at = sub(path, key);

	if (v == NULL)
		return false;
	if (!json_is_integer(v) || json_integer_value(v) < 0 ||
	    (uint64_t)json_integer_value(v) < min || (uint64_t)json_integer_value(v) > max) {
		g_autofree char *d = nw_json_describe(v);
		problem(r, at, "wrong value, found %s: %s", d, valid);
		return false;
	}
	*out = (uint64_t)json_integer_value(v);
	return true;
}

static bool
read_u32(struct reader *r, const char *path, const json_t *obj, const char *key, uint32_t min,
         uint32_t *out)
{
	uint64_t v;

	if (!read_uint(r, path, obj, key, min, UINT32_MAX, &v))
		return false;
	*out = (uint32_t)v;
	return true;
}

/* A finite number; nonneg: 0 or more. */
static bool
read_number(struct reader *r, const char *path, const json_t *obj, const char *key, bool nonneg,
            double *out)
{
	const char *valid = nonneg ? "a finite number, 0 or more" : "a finite number";
	const json_t *v = member(r, path, obj, key, valid);
	g_autofree char *at = sub(path, key);
	double x;

	if (v == NULL)
		return false;
	x = json_number_value(v);
	if (!json_is_number(v) || !isfinite(x) || (nonneg && x < 0)) {
		g_autofree char *d = nw_json_describe(v);
		problem(r, at, "wrong value, found %s: %s", d, valid);
		return false;
	}
	*out = x;
	return true;
}

/* hi below lo: a problem at path.hi_key. */
static bool
check_order(struct reader *r, const char *path, const char *lo_key, uint64_t lo,
            const char *hi_key, uint64_t hi)
{
	g_autofree char *at = NULL;

	if (lo <= hi)
		return true;
	at = sub(path, hi_key);
	problem(r, at,
	        "%" G_GUINT64_FORMAT " is below %s (%" G_GUINT64_FORMAT "): an integer, %s or more",
	        hi, lo_key, lo, lo_key);
	return false;
}

static const char *const prefill_keys[] = { "a_s", "b_s", "c_s", "min_tokens", "max_tokens",
	                                    "samples", "rel_rms_error", NULL };
static const char *const decode_keys[] = { "d0_s", "d1_s", "d2_s", "min_active", "max_active",
	                                   "min_kv_tokens", "max_kv_tokens", "samples",
	                                   "rel_rms_error", NULL };
static const char *const handoff_keys[] = { "setup_s", "per_token_s", "max_tokens", "samples",
	                                    NULL };
static const char *const engine_keys[] = { "engine", "url", "dialect", "model", "hardware",
	                                   "kv_capacity_tokens", "measured_at", "prefill",
	                                   "decode", "handoff", NULL };
static const char *const store_keys[] = { "version", "created_at", "tool", "engines", NULL };

static bool
read_prefill(struct reader *r, const char *path, const json_t *v, struct nw_prefill_profile *p)
{
	return check_object(r, path, v, prefill_keys, "an object with the prefill fit") &&
	       read_number(r, path, v, "a_s", false, &p->a_s) &&
	       read_number(r, path, v, "b_s", false, &p->b_s) &&
	       read_number(r, path, v, "c_s", false, &p->c_s) &&
	       read_uint(r, path, v, "min_tokens", 1, UINT64_MAX, &p->min_tokens) &&
	       read_uint(r, path, v, "max_tokens", 1, UINT64_MAX, &p->max_tokens) &&
	       check_order(r, path, "min_tokens", p->min_tokens, "max_tokens", p->max_tokens) &&
	       read_u32(r, path, v, "samples", 1, &p->samples) &&
	       read_number(r, path, v, "rel_rms_error", true, &p->rel_rms_error);
}

static bool
read_decode(struct reader *r, const char *path, const json_t *v, struct nw_decode_profile *p)
{
	return check_object(r, path, v, decode_keys, "an object with the decode fit") &&
	       read_number(r, path, v, "d0_s", false, &p->d0_s) &&
	       read_number(r, path, v, "d1_s", false, &p->d1_s) &&
	       read_number(r, path, v, "d2_s", false, &p->d2_s) &&
	       read_u32(r, path, v, "min_active", 1, &p->min_active) &&
	       read_u32(r, path, v, "max_active", 1, &p->max_active) &&
	       check_order(r, path, "min_active", p->min_active, "max_active", p->max_active) &&
	       read_uint(r, path, v, "min_kv_tokens", 0, UINT64_MAX, &p->min_kv_tokens) &&
	       read_uint(r, path, v, "max_kv_tokens", 0, UINT64_MAX, &p->max_kv_tokens) &&
	       check_order(r, path, "min_kv_tokens", p->min_kv_tokens, "max_kv_tokens",
	                   p->max_kv_tokens) &&
	       read_u32(r, path, v, "samples", 1, &p->samples) &&
	       read_number(r, path, v, "rel_rms_error", true, &p->rel_rms_error);
}

static bool
read_handoff(struct reader *r, const char *path, const json_t *v, struct nw_handoff_profile *p)
{
	return check_object(r, path, v, handoff_keys, "an object with the handoff fit") &&
	       read_number(r, path, v, "setup_s", false, &p->setup_s) &&
	       read_number(r, path, v, "per_token_s", false, &p->per_token_s) &&
	       read_uint(r, path, v, "max_tokens", 0, UINT64_MAX, &p->max_tokens) &&
	       read_u32(r, path, v, "samples", 0, &p->samples);
}

/* --- the models over their domains ---------------------------------------- */

/* A model's value at a point of its domain is usable when it is a finite
 * number of seconds, 0 or more: a fit that dips below 0 there (or
 * overflows) would price real work at no time. A negative coefficient is
 * fine as long as the domain keeps the model above 0 (docs/profiles.md,
 * "Errors"). */
static bool
usable(double s)
{
	return isfinite(s) && s >= 0;
}

/* The prefill fit over min_tokens..max_tokens: its least is at an end or,
 * for a convex fit, at the whole lengths either side of its vertex; its
 * largest (for overflow) at an end or at the vertex of a concave one. */
static bool
check_prefill_model(struct reader *r, const char *path, const struct nw_prefill_profile *p)
{
	double lo = (double)p->min_tokens, hi = (double)p->max_tokens, at[4];
	size_t n = 0;

	at[n++] = lo;
	at[n++] = hi;
	if (p->c_s != 0) {
		double v = -p->b_s / (2 * p->c_s);

		if (v > lo && v < hi) {
			at[n++] = floor(v);
			at[n++] = ceil(v);
		}
	}
	for (size_t i = 0; i < n; i++) {
		double l = at[i], s = p->a_s + p->b_s * l + p->c_s * l * l;

		if (!usable(s)) {
			problem(r, path, "the fit gives %g s at %.0f tokens, inside its measured domain: "
			        "coefficients that give 0 s or more from min_tokens to max_tokens (run "
			        "narwhal-profile again)", s, l);
			return false;
		}
	}
	return true;
}

/* The decode fit is linear in each input: its least and largest over the
 * grid are at the grid's corners. */
static bool
check_decode_model(struct reader *r, const char *path, const struct nw_decode_profile *p)
{
	const double b[2] = { p->min_active, p->max_active };
	const double t[2] = { (double)p->min_kv_tokens, (double)p->max_kv_tokens };

	for (int i = 0; i < 2; i++) {
		for (int j = 0; j < 2; j++) {
			double s = p->d0_s + p->d1_s * t[j] + p->d2_s * b[i];

			if (!usable(s)) {
				problem(r, path, "the fit gives %g s at %.0f active requests and %.0f KV "
				        "tokens, inside its measured domain: coefficients that give 0 s or "
				        "more over min_active..max_active and min_kv_tokens..max_kv_tokens "
				        "(run narwhal-profile again)", s, b[i], t[j]);
				return false;
			}
		}
	}
	return true;
}

/* The handoff fit, when measured, from a 1-token prompt to max_tokens. */
static bool
check_handoff_model(struct reader *r, const char *path, const struct nw_handoff_profile *p)
{
	const double l[2] = { 1, (double)MAX(p->max_tokens, 1) };

	for (int i = 0; i < 2 && p->samples > 0; i++) {
		double s = p->setup_s + p->per_token_s * l[i];

		if (!usable(s)) {
			problem(r, path, "the fit gives %g s at %.0f tokens, inside its measured domain: "
			        "coefficients that give 0 s or more up to max_tokens (run narwhal-profile "
			        "again)", s, l[i]);
			return false;
		}
	}
	return true;
}

/* Whether every fit of s gives a usable time over its measured domain, as
 * the reader checks it; else error set, "file: engines[i].prefill: ...:
 * nothing written". */
static bool
models_readable(const struct nw_profile_store *s, const char *file, GError **error)
{
	GError *e = NULL;
	struct reader r = { .file = file, .error = &e };

	for (guint i = 0; i < s->engines->len && !r.failed; i++) {
		const struct nw_engine_profile *p = g_ptr_array_index(s->engines, i);
		g_autofree char *pf = g_strdup_printf("engines[%u].prefill", i);
		g_autofree char *dc = g_strdup_printf("engines[%u].decode", i);
		g_autofree char *ho = g_strdup_printf("engines[%u].handoff", i);

		(void)(check_prefill_model(&r, pf, &p->prefill) &&
		       check_decode_model(&r, dc, &p->decode) &&
		       check_handoff_model(&r, ho, &p->handoff));
	}
	if (!r.failed)
		return true;
	g_set_error(error, e->domain, e->code, "%s: nothing written", e->message);
	g_error_free(e);
	return false;
}

static struct nw_engine_profile *
read_engine(struct reader *r, const char *path, const json_t *v)
{
	struct nw_engine_profile *p = g_new0(struct nw_engine_profile, 1);
	g_autofree char *pf = sub(path, "prefill");
	g_autofree char *dc = sub(path, "decode");
	g_autofree char *ho = sub(path, "handoff");
	const json_t *x;
	bool ok = check_object(r, path, v, engine_keys, "an object with one engine's profile") &&
	          read_string(r, path, v, "engine", false, false, &p->engine) &&
	          read_string(r, path, v, "url", false, false, &p->url) &&
	          read_string(r, path, v, "dialect", false, false, &p->dialect) &&
	          read_string(r, path, v, "model", false, false, &p->model) &&
	          read_string(r, path, v, "hardware", true, false, &p->hardware) &&
	          read_uint(r, path, v, "kv_capacity_tokens", 0, UINT64_MAX,
	                    &p->kv_capacity_tokens) &&
	          read_string(r, path, v, "measured_at", false, true, &p->measured_at);

	ok = ok && (x = member(r, path, v, "prefill", "an object with the prefill fit")) != NULL &&
	     read_prefill(r, pf, x, &p->prefill) && check_prefill_model(r, pf, &p->prefill);
	ok = ok && (x = member(r, path, v, "decode", "an object with the decode fit")) != NULL &&
	     read_decode(r, dc, x, &p->decode) && check_decode_model(r, dc, &p->decode);
	ok = ok && (x = member(r, path, v, "handoff", "an object with the handoff fit")) != NULL &&
	     read_handoff(r, ho, x, &p->handoff) && check_handoff_model(r, ho, &p->handoff);
	if (!ok) {
		nw_engine_profile_free(p);
		return NULL;
	}
	return p;
}

/* The version first: a store of another format is refused as such,
 * before its fields are judged by this one's rules. */
static bool
read_version(struct reader *r, const json_t *root, uint32_t *out)
{
	const json_t *v = member(r, "", root, "version", "the integer 1");

	if (v == NULL)
		return false;
	if (!json_is_integer(v)) {
		g_autofree char *d = nw_json_describe(v);
		problem(r, "version", "wrong type, found %s: the integer %d", d,
		        NW_PROFILE_STORE_VERSION);
		return false;
	}
	if (json_integer_value(v) != NW_PROFILE_STORE_VERSION) {
		problem(r, "version",
		        "version %" JSON_INTEGER_FORMAT " is not read by this narwhal, which reads "
		        "version %d: run narwhal-profile again to measure the fleet in this format",
		        json_integer_value(v), NW_PROFILE_STORE_VERSION);
		return false;
	}
	*out = NW_PROFILE_STORE_VERSION;
	return true;
}

static struct nw_profile_store *
read_store(struct reader *r, const json_t *root)
{
	struct nw_profile_store *s = nw_profile_store_new();
	const json_t *engines, *e;
	size_t i;

	if (!json_is_object(root)) {
		g_autofree char *d = nw_json_describe(root);
		problem(r, NULL, "wrong type, found %s: an object, as narwhal-profile writes", d);
		goto fail;
	}
	if (!read_version(r, root, &s->version) ||
	    !check_object(r, "", root, store_keys, "an object") ||
	    !read_string(r, "", root, "created_at", false, true, &s->created_at) ||
	    !read_string(r, "", root, "tool", false, false, &s->tool))
		goto fail;
	engines = member(r, "", root, "engines", "an array of engine profiles");
	if (engines == NULL)
		goto fail;
	if (!json_is_array(engines)) {
		g_autofree char *d = nw_json_describe(engines);
		problem(r, "engines", "wrong type, found %s: an array of engine profiles", d);
		goto fail;
	}
	json_array_foreach(engines, i, e) {
		g_autofree char *path = g_strdup_printf("engines[%zu]", i);
		struct nw_engine_profile *p = read_engine(r, path, e);

		if (p == NULL)
			goto fail;
		if (nw_profile_store_find(s, p->engine) != NULL) {
			g_autofree char *at = sub(path, "engine");
			g_autofree char *q = nw_text_escape(p->engine, QUOTE_MAX);
			problem(r, at, "duplicate engine \"%s\": each engine has one profile", q);
			nw_engine_profile_free(p);
			goto fail;
		}
		g_ptr_array_add(s->engines, p);
	}
	return s;

fail:
	nw_profile_store_free(s);
	return NULL;
}

/* The store's bytes: only a regular file (core/regular-file.h). */
static GBytes *
read_regular(const char *file, GError **error)
{
	struct nw_file_read how;
	GBytes *bytes = nw_regular_file_read(file, G_MAXSIZE, &how);

	if (how.result == NW_FILE_NOT_REGULAR)
		g_set_error(error, G_FILE_ERROR, G_FILE_ERROR_INVAL,
		            "%s: not a regular file (a directory, a pipe or a device): profiles.path "
		            "names the JSON file narwhal-profile writes", file);
	else if (bytes == NULL)
		g_set_error(error, G_FILE_ERROR, g_file_error_from_errno(how.errno_value),
		            "%s: cannot read the profile store: %s", file,
		            g_strerror(how.errno_value));
	return bytes;
}

struct nw_profile_store *
nw_profile_store_load(const char *file, GError **error)
{
	struct reader r = { .file = file, .error = error };
	g_autoptr(GBytes) bytes = read_regular(file, error);
	gsize len = 0;
	const char *text;
	json_error_t jerr;
	json_t *root;
	struct nw_profile_store *s;

	if (bytes == NULL)
		return NULL;
	text = g_bytes_get_data(bytes, &len);
	root = json_loadb(len > 0 ? text : "", len, JSON_REJECT_DUPLICATES, &jerr);
	if (root == NULL) {
		problem(&r, NULL, "malformed JSON at line %d, column %d: %s", jerr.line, jerr.column,
		        jerr.text);
		return NULL;
	}
	s = read_store(&r, root);
	json_decref(root);
	return s;
}
