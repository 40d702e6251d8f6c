/*
 * The HTTP server and the upstream client on one GLib loop, in one
 * process: round trips, 300 concurrent requests (above the 128 ready
 * connections that stall libmicrohttpd's internal epoll thread),
 * suspend/resume without a lost wake-up, hang-up detection for a
 * suspended client, cancellation, pause/unpause, and connect errors.
 * The client cases run on both engine clients: Narwhal's own HTTP/1.1
 * client (http URLs) and libcurl (https URLs; forced here for http).
 */
#include "build-config.h"

#include <string.h>

#include <curl/curl.h>

#include "net/http-server.h"
#include "net/upstream.h"

struct fixture {
	struct nw_http_server *srv;
	struct nw_upstream *up;
	GMainLoop *loop;
	/* server side */
	GPtrArray *parked;     /* suspended connections awaiting release */
	unsigned hangups;
	bool suspend_mode;     /* /slow requests are parked */
	/* client side */
	unsigned done, ok, failed;
	unsigned expected;
	GString *body;
	long last_status;
	bool pause_once;
	struct nw_upstream_call *paused_call;
};

static void on_hangup(void *data);

static enum MHD_Result
handler(void *data, struct MHD_Connection *conn, const char *url, const char *method,
        const char *version, const char *upload, size_t *upload_size, void **request)
{
	struct fixture *f = data;

	if (*request == NULL) {
		*request = conn; /* mark: headers seen */
		return MHD_YES;
	}
	if (*upload_size > 0) {
		*upload_size = 0; /* the tests ignore bodies */
		return MHD_YES;
	}
	if (strcmp(url, "/watch") == 0 && *request == conn) {
		*request = f;
		g_ptr_array_add(f->parked, conn);
		nw_http_server_suspend(f->srv, conn, on_hangup, f);
		return MHD_YES;
	}
	if (strcmp(url, "/slow") == 0 && f->suspend_mode) {
		/* Park it; the test answers it later. Called again after resume. */
		if (*request == conn) {
			*request = f; /* second mark: parked once */
			g_ptr_array_add(f->parked, conn);
			nw_http_server_suspend(f->srv, conn, NULL, NULL);
			return MHD_YES;
		}
	}
	json_t *body = json_pack("{s:s, s:s}", "url", url, "method", method);
	enum MHD_Result ret = nw_http_respond_json(conn, 200, body);
	json_decref(body);
	return ret;
}

static void
completed(void *data, struct MHD_Connection *conn, void **request,
          enum MHD_RequestTerminationCode why)
{
}

/* data: non-NULL runs the engine client through libcurl (the https path)
 * instead of Narwhal's own HTTP/1.1 client. */
static void
setup(struct fixture *f, gconstpointer libcurl)
{
	struct nw_http_server_options opts = {
		.host = "127.0.0.1", .port = 0, .connection_timeout_s = 10, .connection_limit = 2000,
	};
	struct nw_upstream_options uo = {
		.max_connections = 512, .use_libcurl = libcurl != NULL,
	};
	GError *error = NULL;

	memset(f, 0, sizeof *f);
	f->loop = g_main_loop_new(NULL, FALSE);
	f->srv = nw_http_server_start(&opts, handler, completed, f, &error);
	g_assert_no_error(error);
	g_assert_cmpuint(nw_http_server_port(f->srv), >, 0);
	f->up = nw_upstream_new(&uo);
	f->parked = g_ptr_array_new();
	f->body = g_string_new(NULL);
}

static void
teardown(struct fixture *f, gconstpointer unused)
{
	nw_upstream_free(f->up);
	nw_http_server_stop(f->srv);
	g_ptr_array_free(f->parked, TRUE);
	g_string_free(f->body, TRUE);
	g_main_loop_unref(f->loop);
}

static bool
on_data(void *data, const char *bytes, size_t len)
{
	struct fixture *f = data;

	if (f->pause_once) {
		f->pause_once = false;
		return false;
	}
	g_string_append_len(f->body, bytes, (gssize)len);
	return true;
}

static void
on_done(void *data, const struct nw_upstream_result *res)
{
	struct fixture *f = data;

	f->done++;
	f->last_status = res->status;
	if (res->code == NW_UPSTREAM_OK && res->status == 200)
		f->ok++;
	else
		f->failed++;
	if (f->done == f->expected)
		g_main_loop_quit(f->loop);
}

static const struct nw_upstream_handlers handlers = { .on_data = on_data, .on_done = on_done };

static gboolean
on_watchdog(gpointer data)
{
	g_error("test loop did not finish in time");
	return G_SOURCE_REMOVE;
}

/* Run the loop until quit, bounded. */
static void
run_loop(struct fixture *f)
{
	guint watchdog = g_timeout_add_seconds(20, on_watchdog, f);

	g_main_loop_run(f->loop);
	g_source_remove(watchdog);
}

static struct nw_upstream_call *
start(struct fixture *f, const char *path)
{
	g_autofree char *url = g_strdup_printf("http://127.0.0.1:%u%s",
	                                       nw_http_server_port(f->srv), path);
	struct nw_upstream_request req = {
		.method = "POST", .url = url, .request_id = "req-1",
		.body = "{}", .body_len = 2, .connect_timeout_ms = 2000, .timeout_ms = 10000,
	};

	return nw_upstream_start(f->up, &req, &handlers, f);
}

static void
test_round_trip(struct fixture *f, gconstpointer unused)
{
	json_t *doc;

	f->expected = 1;
	g_assert_nonnull(start(f, "/hello"));
	run_loop(f);
	g_assert_cmpuint(f->ok, ==, 1);
	doc = json_loads(f->body->str, 0, NULL);
	g_assert_cmpstr(json_string_value(json_object_get(doc, "url")), ==, "/hello");
	g_assert_cmpstr(json_string_value(json_object_get(doc, "method")), ==, "POST");
	json_decref(doc);
	g_assert_cmpuint(nw_upstream_active(f->up), ==, 0);
}

static void
test_many_concurrent(struct fixture *f, gconstpointer unused)
{
	f->expected = 300;
	for (unsigned i = 0; i < f->expected; i++)
		g_assert_nonnull(start(f, "/many"));
	run_loop(f);
	g_assert_cmpuint(f->ok, ==, 300);
	/* And again, over reused connections. */
	f->done = f->ok = 0;
	for (unsigned i = 0; i < f->expected; i++)
		g_assert_nonnull(start(f, "/again"));
	run_loop(f);
	g_assert_cmpuint(f->ok, ==, 300);
}

static gboolean
release_parked(gpointer data)
{
	struct fixture *f = data;

	if (f->parked->len < f->expected)
		return G_SOURCE_CONTINUE; /* not all arrived yet */
	for (guint i = 0; i < f->parked->len; i++)
		nw_http_server_resume(f->srv, g_ptr_array_index(f->parked, i));
	g_ptr_array_set_size(f->parked, 0);
	return G_SOURCE_REMOVE;
}

static void
test_suspend_resume(struct fixture *f, gconstpointer unused)
{
	f->suspend_mode = true;
	f->expected = 40;
	for (unsigned i = 0; i < f->expected; i++)
		g_assert_nonnull(start(f, "/slow"));
	g_timeout_add(5, release_parked, f);
	run_loop(f);
	g_assert_cmpuint(f->ok, ==, 40);
	g_assert_cmpuint(nw_http_server_suspended(f->srv), ==, 0);
}

static void
on_hangup(void *data)
{
	struct fixture *f = data;

	f->hangups++;
	/* MHD must see the connection again to fail the write and clean up. */
	nw_http_server_resume(f->srv, g_ptr_array_index(f->parked, 0));
	g_ptr_array_set_size(f->parked, 0);
	g_main_loop_quit(f->loop);
}

static gboolean
cancel_when_parked(gpointer data)
{
	struct fixture *f = data;

	if (f->parked->len == 0)
		return G_SOURCE_CONTINUE;
	nw_upstream_cancel(f->paused_call); /* the client goes away */
	return G_SOURCE_REMOVE;
}

static void
test_hangup_detected(struct fixture *f, gconstpointer unused)
{
	f->paused_call = start(f, "/watch");
	g_timeout_add(5, cancel_when_parked, f);
	run_loop(f);
	g_assert_cmpuint(f->hangups, ==, 1);
	g_assert_cmpuint(f->done, ==, 0);
}

static void
test_connect_error(struct fixture *f, gconstpointer unused)
{
	struct nw_upstream_request req = {
		.method = "GET", .url = "http://127.0.0.1:9/health", .connect_timeout_ms = 2000,
		.timeout_ms = 5000,
	};

	f->expected = 1;
	g_assert_nonnull(nw_upstream_start(f->up, &req, &handlers, f));
	run_loop(f);
	g_assert_cmpuint(f->failed, ==, 1);
	g_assert_cmpint(f->last_status, ==, 0);
}

static gboolean
unpause_later(gpointer data)
{
	struct fixture *f = data;

	nw_upstream_unpause(f->paused_call);
	return G_SOURCE_REMOVE;
}

static void
test_pause_unpause(struct fixture *f, gconstpointer unused)
{
	f->expected = 1;
	f->pause_once = true;
	f->paused_call = start(f, "/paused");
	g_timeout_add(20, unpause_later, f);
	run_loop(f);
	g_assert_cmpuint(f->ok, ==, 1);
	g_assert_nonnull(strstr(f->body->str, "/paused"));
}

static gboolean
cancel_and_quit(gpointer data)
{
	struct fixture *f = data;

	nw_upstream_cancel(f->paused_call);
	g_main_loop_quit(f->loop);
	return G_SOURCE_REMOVE;
}

static void
test_cancel_running(struct fixture *f, gconstpointer unused)
{
	f->suspend_mode = true;
	f->expected = 1;
	f->paused_call = start(f, "/slow");
	g_timeout_add(50, cancel_and_quit, f);
	run_loop(f);
	/* No callback after cancel, and nothing left running. */
	g_assert_cmpuint(f->done, ==, 0);
	g_assert_cmpuint(nw_upstream_active(f->up), ==, 0);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	/* Every client case runs on both engine clients. */
	for (int libcurl = 0; libcurl < 2; libcurl++) {
		const char *c = libcurl ? "libcurl" : "http1";
		gconstpointer data = libcurl ? "libcurl" : NULL;
		g_autofree char *p1 = g_strdup_printf("/net/%s/round-trip", c);
		g_autofree char *p2 = g_strdup_printf("/net/%s/300-concurrent", c);
		g_autofree char *p3 = g_strdup_printf("/net/%s/connect-error", c);
		g_autofree char *p4 = g_strdup_printf("/net/%s/pause-unpause", c);
		g_autofree char *p5 = g_strdup_printf("/net/%s/cancel-running", c);

		g_test_add(p1, struct fixture, data, setup, test_round_trip, teardown);
		g_test_add(p2, struct fixture, data, setup, test_many_concurrent, teardown);
		g_test_add(p3, struct fixture, data, setup, test_connect_error, teardown);
		g_test_add(p4, struct fixture, data, setup, test_pause_unpause, teardown);
		g_test_add(p5, struct fixture, data, setup, test_cancel_running, teardown);
	}
	g_test_add("/net/suspend-resume", struct fixture, NULL, setup, test_suspend_resume, teardown);
	g_test_add("/net/hangup-detected", struct fixture, NULL, setup, test_hangup_detected, teardown);
	int status = g_test_run();
	curl_global_cleanup();
	return status;
}
