/*
 * https engines end to end (issue 9, the engine client): narwhal-sim
 * serves its engines over TLS with a certificate this test makes, and
 * narwhal reaches them through libcurl, checking them against
 * engine.tls_ca_file.
 */
#include "build-config.h"

#include <string.h>

#include <glib.h>
#include <glib/gstdio.h>

#include "integration/test-serve-common.h"

/* A self-signed certificate for 127.0.0.1 in dir (openssl, from the
 * bootstrap packages); FALSE when openssl is missing. */
static gboolean
make_certificate(const char *dir, char **cert, char **key)
{
	g_autofree char *out = NULL, *err = NULL;
	int status = -1;
	GError *error = NULL;

	*cert = g_build_filename(dir, "cert.pem", NULL);
	*key = g_build_filename(dir, "key.pem", NULL);
	const char *argv[] = {
		"openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
		"-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
		"-addext", "subjectAltName=IP:127.0.0.1", "-keyout", *key, "-out", *cert, NULL,
	};

	if (!g_spawn_sync(NULL, (char **)argv, NULL, G_SPAWN_SEARCH_PATH, NULL, NULL, &out, &err,
	                  &status, &error)) {
		g_test_message("openssl: %s", error->message);
		g_error_free(error);
		return FALSE;
	}
	if (!g_spawn_check_wait_status(status, NULL))
		g_error("openssl req failed: %s", err);
	return TRUE;
}

struct tls_env {
	char *dir, *cert, *key;
	const char *sim_args[12];
};

static gboolean
tls_env_init(struct tls_env *t)
{
	unsigned n = 0;

	t->dir = g_dir_make_tmp("narwhal-tls-test-XXXXXX", NULL);
	g_assert_nonnull(t->dir);
	if (!make_certificate(t->dir, &t->cert, &t->key)) {
		g_test_skip("openssl is not installed");
		return FALSE;
	}
	t->sim_args[n++] = "--engines";
	t->sim_args[n++] = "2";
	t->sim_args[n++] = "--time-scale";
	t->sim_args[n++] = "50";
	t->sim_args[n++] = "--tls-cert";
	t->sim_args[n++] = t->cert;
	t->sim_args[n++] = "--tls-key";
	t->sim_args[n++] = t->key;
	t->sim_args[n] = NULL;
	return TRUE;
}

static void
tls_env_clear(struct tls_env *t)
{
	if (t->cert != NULL)
		g_unlink(t->cert);
	if (t->key != NULL)
		g_unlink(t->key);
	g_rmdir(t->dir);
	g_free(t->dir);
	g_free(t->cert);
	g_free(t->key);
}

static void
test_https_engines(void)
{
	struct tls_env t = { 0 };
	struct serve_env e;
	g_autofree char *cfg = NULL;

	/* Issue 9: https:// engine URLs work through libcurl with a CA file. */
	g_test_summary("Against https engines checked with engine.tls_ca_file, a streamed and a "
	               "non-streamed disaggregated completion both succeed");
	if (!tls_env_init(&t))
		goto out;
	cfg = g_strdup_printf("{\"engine\": {\"tls_ca_file\": \"%s\"}}", t.cert);
	if (!serve_start(&e, t.sim_args, "pd", cfg))
		goto out;
	g_assert_true(g_str_has_prefix(json_string_value(json_object_get(
		json_array_get(json_object_get(e.sim.fleet, "engines"), 0), "url")), "https://"));
	for (int stream = 0; stream < 2; stream++) {
		g_autofree char *body = serve_completion_body(&e, 4, stream);
		struct sim_reply r;

		serve_post(&e, "/v1/completions", body, NULL, 10000, &r);
		if (r.status != 200) {
			g_autofree char *log = serve_log(&e);

			g_error("stream=%d: %ld %s\n%s", stream, r.status, r.body->str, log);
		}
		if (stream)
			g_assert_nonnull(strstr(r.body->str, "data: [DONE]"));
		else
			g_assert_nonnull(strstr(r.body->str, "\"usage\""));
		sim_reply_clear(&r);
	}
	g_assert_cmpint(serve_counter(&e, "requests_ok"), ==, 2);
	serve_clear(&e);
out:
	tls_env_clear(&t);
}

static void
test_https_unverified_refused(void)
{
	struct tls_env t = { 0 };
	struct serve_env e;
	g_autofree char *body = NULL, *code = NULL, *port = NULL;
	const char *url;
	struct sim_reply r;

	/* Issue 9: with verification on and no CA for the engines'
	 * certificate, no request gets through; the client sees no engine
	 * address, the log has the cause. */
	g_test_summary("With engine.tls_verify on and the system's CA store, a self-signed engine "
	               "is refused: the client gets a 5xx error envelope naming no address, and "
	               "the log names the certificate problem");
	if (!tls_env_init(&t))
		goto out;
	if (!serve_start(&e, t.sim_args, "pd", "{\"engine\": {\"tls_verify\": true}}"))
		goto out;
	body = serve_completion_body(&e, 4, FALSE);
	serve_post(&e, "/v1/completions", body, NULL, 10000, &r);
	g_test_message("%ld %s", r.status, r.body->str);
	g_assert_cmpint(r.status, >=, 500);
	code = serve_error_code(r.body->str);
	g_assert_nonnull(code);
	url = json_string_value(json_object_get(
		json_array_get(json_object_get(e.sim.fleet, "engines"), 0), "url"));
	port = g_strdup(strrchr(url, ':') + 1);
	g_assert_null(strstr(r.body->str, "127.0.0.1"));
	g_assert_null(strstr(r.body->str, port));
	sim_reply_clear(&r);
	g_assert_true(serve_wait_log(&e, "certificate", 5000));
	serve_clear(&e);
out:
	tls_env_clear(&t);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/serve/narwhal/https-engines", test_https_engines);
	g_test_add_func("/serve/narwhal/https-unverified-refused", test_https_unverified_refused);
	return g_test_run();
}
