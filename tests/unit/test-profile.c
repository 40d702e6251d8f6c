/* The profile store (issue 12, first item: "writes the store at
 * profiles.path (versioned format, the engines' hardware and model
 * recorded, atomic write)"; docs/profiles.md, "The store's format"). */
#include "build-config.h"

#include <glib.h>
#include <glib/gstdio.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>

#include "core/profile.h"

static struct nw_engine_profile *
sample_engine(const char *id)
{
	struct nw_engine_profile *p = g_new0(struct nw_engine_profile, 1);

	p->engine = g_strdup(id);
	p->url = g_strdup("http://127.0.0.1:8001");
	p->dialect = g_strdup("vllm");
	p->model = g_strdup("llama-3-8b");
	p->hardware = g_strdup("1x H100 80GB");
	p->kv_capacity_tokens = 480000;
	p->measured_at = g_strdup("2026-12-01T21:00:00Z");
	p->prefill = (struct nw_prefill_profile){ 0.012, 9.5e-5, 1.25e-9, 16, 8192, 40, 0.031 };
	p->decode = (struct nw_decode_profile){ 0.011, 2.0e-8, 1.5e-4, 1, 64, 0, 400000, 96, 0.02 };
	p->handoff = (struct nw_handoff_profile){ 0.004, 1.0e-6, 8192, 12 };
	return p;
}

static struct nw_profile_store *
sample_store(void)
{
	struct nw_profile_store *s = nw_profile_store_new();

	s->created_at = g_strdup("2026-12-01T21:05:00Z");
	s->tool = g_strdup("narwhal-profile 0.1.0");
	nw_profile_store_put(s, sample_engine("p0"));
	nw_profile_store_put(s, sample_engine("d0"));
	return s;
}

/* A fresh directory for one test's files. */
static char *
scratch_dir(void)
{
	GError *error = NULL;
	char *dir = g_dir_make_tmp("nw-profile-XXXXXX", &error);

	g_assert_no_error(error);
	return dir;
}

static void
remove_dir(const char *dir)
{
	GDir *d = g_dir_open(dir, 0, NULL);
	const char *name;

	while (d != NULL && (name = g_dir_read_name(d)) != NULL) {
		g_autofree char *f = g_build_filename(dir, name, NULL);
		g_unlink(f);
	}
	if (d != NULL)
		g_dir_close(d);
	g_rmdir(dir);
}

static void
assert_same_engine(const struct nw_engine_profile *a, const struct nw_engine_profile *b)
{
	g_assert_cmpstr(a->engine, ==, b->engine);
	g_assert_cmpstr(a->url, ==, b->url);
	g_assert_cmpstr(a->dialect, ==, b->dialect);
	g_assert_cmpstr(a->model, ==, b->model);
	g_assert_cmpstr(a->hardware, ==, b->hardware);
	g_assert_cmpuint(a->kv_capacity_tokens, ==, b->kv_capacity_tokens);
	g_assert_cmpstr(a->measured_at, ==, b->measured_at);
	/* the numbers are written so they read back exactly */
	g_assert_true(memcmp(&a->prefill, &b->prefill, sizeof a->prefill) == 0);
	g_assert_true(memcmp(&a->decode, &b->decode, sizeof a->decode) == 0);
	g_assert_true(memcmp(&a->handoff, &b->handoff, sizeof a->handoff) == 0);
}

/* Round trip: what save writes, load reads back field for field; and
 * save leaves only the store in its directory (atomic write: the
 * temporary file is renamed over it, none is left behind). */
static void
test_round_trip(void)
{
	g_autofree char *dir = scratch_dir();
	g_autofree char *file = g_build_filename(dir, "profiles.json", NULL);
	struct nw_profile_store *s = sample_store(), *back;
	GError *error = NULL;
	GDir *d;
	const char *name;
	guint files = 0;

	/* a store written over an older one replaces it whole */
	g_assert_true(g_file_set_contents(file, "old", -1, NULL));
	g_assert_true(nw_profile_store_save(s, file, &error));
	g_assert_no_error(error);
	back = nw_profile_store_load(file, &error);
	g_assert_no_error(error);
	g_assert_nonnull(back);
	g_assert_cmpuint(back->version, ==, NW_PROFILE_STORE_VERSION);
	g_assert_cmpstr(back->created_at, ==, s->created_at);
	g_assert_cmpstr(back->tool, ==, s->tool);
	g_assert_cmpuint(back->engines->len, ==, 2);
	for (guint i = 0; i < 2; i++)
		assert_same_engine(g_ptr_array_index(back->engines, i),
		                   g_ptr_array_index(s->engines, i));

	d = g_dir_open(dir, 0, &error);
	g_assert_no_error(error);
	while ((name = g_dir_read_name(d)) != NULL) {
		g_assert_cmpstr(name, ==, "profiles.json");
		files++;
	}
	g_dir_close(d);
	g_assert_cmpuint(files, ==, 1);

	nw_profile_store_free(back);
	nw_profile_store_free(s);
	remove_dir(dir);
}

/* A hardware the engine did not tell is null in the file and NULL back;
 * put replaces an engine's profile rather than adding a second. */
static void
test_null_hardware_and_put(void)
{
	g_autofree char *dir = scratch_dir();
	g_autofree char *file = g_build_filename(dir, "profiles.json", NULL);
	struct nw_profile_store *s = sample_store(), *back;
	struct nw_engine_profile *p = sample_engine("p0");
	GError *error = NULL;

	g_clear_pointer(&p->hardware, g_free);
	nw_profile_store_put(s, p);
	g_assert_cmpuint(s->engines->len, ==, 2);
	g_assert_true(nw_profile_store_find(s, "p0") == p);
	g_assert_null(nw_profile_store_find(s, "nope"));
	g_assert_true(nw_profile_store_save(s, file, &error));
	back = nw_profile_store_load(file, &error);
	g_assert_no_error(error);
	g_assert_null(nw_profile_store_find(back, "p0")->hardware);
	nw_profile_store_free(back);
	nw_profile_store_free(s);
	remove_dir(dir);
}

/* Saving into a directory that does not exist fails with the file named
 * (and writes nothing). */
static void
test_save_error(void)
{
	struct nw_profile_store *s = sample_store();
	GError *error = NULL;

	g_assert_false(nw_profile_store_save(s, "/nonexistent-nw-dir/profiles.json", &error));
	g_assert_nonnull(error);
	g_assert_true(g_str_has_prefix(error->message, "/nonexistent-nw-dir/profiles.json: "));
	g_error_free(error);
	nw_profile_store_free(s);
}

/* Save s over a file holding "old": refused with a message that starts
 * with the file and holds needle, and the old file stays as it was. */
static void
assert_save_refused(struct nw_profile_store *s, const char *needle, const char *needle2)
{
	g_autofree char *dir = scratch_dir();
	g_autofree char *file = g_build_filename(dir, "profiles.json", NULL);
	g_autofree char *text = NULL;
	GError *error = NULL;

	g_assert_true(g_file_set_contents(file, "old", -1, NULL));
	g_assert_false(nw_profile_store_save(s, file, &error));
	g_assert_nonnull(error);
	g_assert_true(g_str_has_prefix(error->message, file));
	g_assert_nonnull(strstr(error->message, needle));
	if (needle2 != NULL)
		g_assert_nonnull(strstr(error->message, needle2));
	g_clear_error(&error);
	g_assert_true(g_file_get_contents(file, &text, NULL, NULL));
	g_assert_cmpstr(text, ==, "old");
	remove_dir(dir);
}

/* A fit that is not finite is not written (JSON cannot hold it and the
 * loader would refuse it): the old store stays as it was. */
static void
test_save_not_finite(void)
{
	struct nw_profile_store *s = sample_store();
	struct nw_engine_profile *p = g_ptr_array_index(s->engines, 1);

	p->decode.d1_s = NAN;
	assert_save_refused(s, "not finite", NULL);
	nw_profile_store_free(s);
}

/* A fit that gives a negative time inside its measured domain is not
 * written either: the router would refuse that store (test_load_errors),
 * so narwhal-profile must not leave one behind. */
static void
test_save_unreadable_fit(void)
{
	struct nw_profile_store *s = sample_store();
	struct nw_engine_profile *p = g_ptr_array_index(s->engines, 1);

	p->decode.d0_s = -1.0;
	assert_save_refused(s, "engines[1].decode: the fit gives", "nothing written");
	nw_profile_store_free(s);
}

/* One load error: a mutation of the valid store's JSON, and the message
 * the loader must give ("file: json.path: problem: what is valid"). */
struct load_case {
	const char *name;
	const char *path;   /* json path to set (dots; [i] as .i), NULL: whole document */
	const char *value;  /* JSON to set there; NULL: remove the key */
	const char *expect; /* the whole message after "store.json: " */
};

static const struct load_case load_cases[] = {
	/* the version rule: another version is refused, with the way out */
	{ "version-2", "version", "2",
	  "version: version 2 is not read by this narwhal, which reads version 1: run "
	  "narwhal-profile again to measure the fleet in this format" },
	{ "version-type", "version", "\"1\"",
	  "version: wrong type, found string \"1\": the integer 1" },
	{ "version-missing", "version", NULL, "version: missing: the integer 1" },
	/* unknown keys, with a did-you-mean when one is close */
	{ "unknown-top", "engine", "[]", "engine: unknown key: did you mean \"engines\"?" },
	{ "unknown-far", "zzzzzzzz", "1",
	  "zzzzzzzz: unknown key: the keys here are \"version\", \"created_at\", \"tool\", "
	  "\"engines\"" },
	{ "unknown-prefill", "engines.0.prefill.min_token", "1",
	  "engines[0].prefill.min_token: unknown key: did you mean \"min_tokens\"?" },
	/* types */
	{ "engines-type", "engines", "{}",
	  "engines: wrong type, found an object: an array of engine profiles" },
	{ "engine-type", "engines.1", "3",
	  "engines[1]: wrong type, found integer 3: an object with one engine's profile" },
	{ "url-type", "engines.0.url", "5",
	  "engines[0].url: wrong value, found integer 5: a non-empty string" },
	{ "model-empty", "engines.0.model", "\"\"",
	  "engines[0].model: wrong value, found string \"\": a non-empty string" },
	{ "created-not-time", "created_at", "\"yesterday\"",
	  "created_at: \"yesterday\" is not a time: a UTC time in ISO 8601, as "
	  "\"2026-12-01T21:17:30Z\"" },
	{ "coef-type", "engines.0.prefill.b_s", "\"fast\"",
	  "engines[0].prefill.b_s: wrong value, found string \"fast\": a finite number" },
	{ "rms-negative", "engines.0.decode.rel_rms_error", "-0.5",
	  "engines[0].decode.rel_rms_error: wrong value, found real number -0.5: a finite number, 0 "
	  "or more" },
	{ "tokens-real", "engines.0.prefill.min_tokens", "1.5",
	  "engines[0].prefill.min_tokens: wrong value, found real number 1.5: an integer, 1 or more" },
	{ "kv-negative", "engines.1.kv_capacity_tokens", "-1",
	  "engines[1].kv_capacity_tokens: wrong value, found integer -1: an integer, 0 or more" },
	/* samples > 0 for prefill and decode */
	{ "prefill-samples-0", "engines.0.prefill.samples", "0",
	  "engines[0].prefill.samples: wrong value, found integer 0: an integer from 1 to "
	  "4294967295" },
	{ "decode-samples-0", "engines.0.decode.samples", "0",
	  "engines[0].decode.samples: wrong value, found integer 0: an integer from 1 to "
	  "4294967295" },
	/* min <= max */
	{ "prefill-order", "engines.0.prefill.max_tokens", "8",
	  "engines[0].prefill.max_tokens: 8 is below min_tokens (16): an integer, min_tokens or "
	  "more" },
	{ "active-order", "engines.1.decode.min_active", "65",
	  "engines[1].decode.max_active: 64 is below min_active (65): an integer, min_active or "
	  "more" },
	{ "kv-order", "engines.1.decode.min_kv_tokens", "500000",
	  "engines[1].decode.max_kv_tokens: 400000 is below min_kv_tokens (500000): an integer, "
	  "min_kv_tokens or more" },
	/* Each model gives a finite number of seconds, 0 or more, everywhere in
	 * its measured domain (docs/profiles.md, "Errors"): a fit that prices
	 * a prompt there at minus 256 s would be admitted as taking no time.
	 * The sample's prefill domain is 16..8192 tokens; its decode grid 1..64
	 * requests by 0..400000 KV tokens; its handoff up to 8192 tokens. */
	{ "prefill-negative-at-min", "engines.0.prefill.c_s", "-1",
	  "engines[0].prefill: the fit gives -255.986 s at 16 tokens, inside its measured "
	  "domain: coefficients that give 0 s or more from min_tokens to max_tokens (run "
	  "narwhal-profile again)" },
	{ "prefill-negative-at-max", "engines.0.prefill.c_s", "-2e-08",
	  "engines[0].prefill: the fit gives -0.551937 s at 8192 tokens, inside its measured "
	  "domain: coefficients that give 0 s or more from min_tokens to max_tokens (run "
	  "narwhal-profile again)" },
	/* a + b*L + c*L^2 with b < 0 < c dips inside the domain: its least is
	 * at L = 4000 (b = -8e-5, c = 1e-8: -0.148 s) */
	{ "prefill-negative-inside", "engines.1.prefill",
	  "{\"a_s\": 0.012, \"b_s\": -8e-05, \"c_s\": 1e-08, \"min_tokens\": 16,"
	  " \"max_tokens\": 8192, \"samples\": 40, \"rel_rms_error\": 0.03}",
	  "engines[1].prefill: the fit gives -0.148 s at 4000 tokens, inside its measured "
	  "domain: coefficients that give 0 s or more from min_tokens to max_tokens (run "
	  "narwhal-profile again)" },
	{ "prefill-not-finite", "engines.0.prefill.c_s", "1e305",
	  "engines[0].prefill: the fit gives inf s at 8192 tokens, inside its measured domain: "
	  "coefficients that give 0 s or more from min_tokens to max_tokens (run narwhal-profile "
	  "again)" },
	{ "decode-negative", "engines.0.decode.d1_s", "-1e-06",
	  "engines[0].decode: the fit gives -0.38885 s at 1 active requests and 400000 KV tokens, "
	  "inside its measured domain: coefficients that give 0 s or more over min_active.."
	  "max_active and min_kv_tokens..max_kv_tokens (run narwhal-profile again)" },
	{ "decode-negative-d0", "engines.1.decode.d0_s", "-1",
	  "engines[1].decode: the fit gives -0.99985 s at 1 active requests and 0 KV tokens, "
	  "inside its measured domain: coefficients that give 0 s or more over min_active.."
	  "max_active and min_kv_tokens..max_kv_tokens (run narwhal-profile again)" },
	{ "handoff-negative", "engines.0.handoff.setup_s", "-0.5",
	  "engines[0].handoff: the fit gives -0.499999 s at 1 tokens, inside its measured domain: "
	  "coefficients that give 0 s or more up to max_tokens (run narwhal-profile again)" },
	/* missing members */
	{ "missing-handoff", "engines.1.handoff", NULL,
	  "engines[1].handoff: missing: an object with the handoff fit" },
	{ "missing-d1", "engines.0.decode.d1_s", NULL,
	  "engines[0].decode.d1_s: missing: a finite number" },
	/* one profile per engine */
	{ "duplicate", "engines.1.engine", "\"p0\"",
	  "engines[1].engine: duplicate engine \"p0\": each engine has one profile" },
	/* the document */
	{ "not-object", NULL, "[1]", "wrong type, found an array: an object, as narwhal-profile writes" },
};

/* Set (or remove) the value at a dotted path with numeric array steps. */
static void
mutate(json_t *root, const char *path, const char *value)
{
	char **parts = g_strsplit(path, ".", -1);
	guint n = g_strv_length(parts);
	json_t *at = root;

	for (guint i = 0; i + 1 < n; i++)
		at = json_is_array(at) ? json_array_get(at, (size_t)atoi(parts[i]))
		                       : json_object_get(at, parts[i]);
	g_assert_nonnull(at);
	if (json_is_array(at)) {
		g_assert_nonnull(value);
		json_array_set_new(at, (size_t)atoi(parts[n - 1]), json_loads(value, JSON_DECODE_ANY, NULL));
	} else if (value == NULL) {
		g_assert_cmpint(json_object_del(at, parts[n - 1]), ==, 0);
	} else {
		json_object_set_new(at, parts[n - 1], json_loads(value, JSON_DECODE_ANY, NULL));
	}
	g_strfreev(parts);
}

static void
test_load_error(gconstpointer data)
{
	const struct load_case *c = data;
	g_autofree char *dir = scratch_dir();
	g_autofree char *file = g_build_filename(dir, "store.json", NULL);
	g_autofree char *expect = g_strdup_printf("%s: %s", file, c->expect);
	struct nw_profile_store *s = sample_store();
	json_t *doc = nw_profile_store_to_json(s);
	char *text;
	GError *error = NULL;

	if (c->path != NULL) {
		mutate(doc, c->path, c->value);
	} else {
		json_decref(doc);
		doc = json_loads(c->value, JSON_DECODE_ANY, NULL);
	}
	text = json_dumps(doc, JSON_ENCODE_ANY);
	g_assert_true(g_file_set_contents(file, text, -1, NULL));
	g_assert_null(nw_profile_store_load(file, &error));
	g_assert_nonnull(error);
	g_assert_cmpstr(error->message, ==, expect);
	g_error_free(error);
	free(text);
	json_decref(doc);
	nw_profile_store_free(s);
	remove_dir(dir);
}

/* Malformed JSON and duplicate keys are refused with where they are; an
 * unreadable file says so. */
static void
test_load_malformed(void)
{
	g_autofree char *dir = scratch_dir();
	g_autofree char *file = g_build_filename(dir, "store.json", NULL);
	GError *error = NULL;

	g_assert_true(g_file_set_contents(file, "{\"version\": 1,\n \"version\": 1}", -1, NULL));
	g_assert_null(nw_profile_store_load(file, &error));
	g_assert_true(g_str_has_prefix(error->message, file));
	g_assert_nonnull(strstr(error->message, ": malformed JSON at line 2"));
	g_assert_nonnull(strstr(error->message, "duplicate object key"));
	g_clear_error(&error);
	g_unlink(file);
	g_assert_null(nw_profile_store_load(file, &error));
	g_assert_true(g_error_matches(error, G_FILE_ERROR, G_FILE_ERROR_NOENT));
	g_assert_true(g_str_has_prefix(error->message, file));
	g_clear_error(&error);
	remove_dir(dir);
}

/* What profiles.path names but is no file: a directory, a device, a
 * named pipe. Each is refused at once with what is valid; a pipe never
 * blocks the loader (at a reload it would stop the daemon) waiting for a
 * writer. The load runs in a thread so that a loader that blocks fails
 * the test at its deadline instead of hanging it. */
struct load_job {
	const char *file;
	GMutex lock;
	GCond done_cond;
	bool done;
	char *message;
};

static gpointer
load_thread(gpointer data)
{
	struct load_job *j = data;
	GError *error = NULL;
	struct nw_profile_store *s = nw_profile_store_load(j->file, &error);

	nw_profile_store_free(s);
	g_mutex_lock(&j->lock);
	j->message = g_strdup(error != NULL ? error->message : "(loaded)");
	j->done = true;
	g_cond_signal(&j->done_cond);
	g_mutex_unlock(&j->lock);
	g_clear_error(&error);
	return NULL;
}

static char *
load_message_within(const char *file, int seconds)
{
	struct load_job j = { .file = file };
	gint64 deadline = g_get_monotonic_time() + seconds * G_TIME_SPAN_SECOND;
	GThread *t;
	char *message;

	g_mutex_init(&j.lock);
	g_cond_init(&j.done_cond);
	t = g_thread_new("load", load_thread, &j);
	g_mutex_lock(&j.lock);
	while (!j.done) {
		if (!g_cond_wait_until(&j.done_cond, &j.lock, deadline) && !j.done)
			g_error("loading %s did not return within %d s", file, seconds);
	}
	g_mutex_unlock(&j.lock);
	g_thread_join(t);
	message = j.message;
	g_mutex_clear(&j.lock);
	g_cond_clear(&j.done_cond);
	return message;
}

static void
test_load_not_a_file(void)
{
	g_autofree char *dir = scratch_dir();
	g_autofree char *fifo = g_build_filename(dir, "store.json", NULL);
	const char *const cases[] = { dir, fifo, "/dev/null" };

	g_assert_cmpint(mkfifo(fifo, 0600), ==, 0);
	for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
		g_autofree char *got = load_message_within(cases[i], 5);
		g_autofree char *expect = g_strdup_printf(
			"%s: not a regular file (a directory, a pipe or a device): profiles.path names "
			"the JSON file narwhal-profile writes", cases[i]);

		g_assert_cmpstr(got, ==, expect);
	}
	g_unlink(fifo);
	remove_dir(dir);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/profile/round-trip", test_round_trip);
	g_test_add_func("/profile/null-hardware-and-put", test_null_hardware_and_put);
	g_test_add_func("/profile/save-error", test_save_error);
	g_test_add_func("/profile/save-not-finite", test_save_not_finite);
	g_test_add_func("/profile/save-unreadable-fit", test_save_unreadable_fit);
	g_test_add_func("/profile/load-malformed", test_load_malformed);
	g_test_add_func("/profile/load-not-a-file", test_load_not_a_file);
	for (size_t i = 0; i < G_N_ELEMENTS(load_cases); i++) {
		g_autofree char *name = g_strdup_printf("/profile/load-error/%s", load_cases[i].name);
		g_test_add_data_func(name, &load_cases[i], test_load_error);
	}
	return g_test_run();
}
