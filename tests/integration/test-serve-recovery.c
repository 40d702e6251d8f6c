/*
 * Recovery paths of the data plane against narwhal-sim engines with
 * injected faults: what a timeout blames, when a stream commits, and
 * that a retry is still possible where the spec allows one. Each test
 * names its spec clause.
 */
#include "build-config.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "integration/test-serve-common.h"

static void
assert_status(struct serve_env *e, const struct sim_reply *r, long status)
{
	if (r->status != status) {
		g_autofree char *log = serve_log(e);

		g_printerr("narwhal log:\n%s\n", log ? log : "");
		g_error("want %ld, got %ld (curl %d): %s", status, r->status, r->curl_code,
		        r->body->str);
	}
}

/* Spec 6 / 4.2: the handoff cap counts from the start of the prefill
 * request, so a prefill that has not answered when it passes has made an
 * expired handoff: a prefill failure of that engine, retried elsewhere. */
static void
test_hung_prefill_under_handoff_cap(void)
{
	const char *const args[] = { "--engines", "3", "--time-scale", "50", NULL };
	struct serve_env e;
	struct sim_reply r;
	g_autofree char *body = NULL;

	g_test_summary("/serve/spec-6/handoff-cap-during-prefill: a prefill hung past "
	               "handoff_timeout_s (below prefill_timeout_s) fails as a prefill "
	               "timeout of its engine and the retry runs on the other prefill engine");
	if (!serve_start(&e, args, "ppd", "{\"serving\":{\"max_attempts\":2,"
	                 "\"handoff_timeout_s\":0.2,\"prefill_timeout_s\":0.5,"
	                 "\"retry_base_s\":0.01,\"retry_cap_s\":0.02}}"))
		return;
	g_assert_cmpint(sim_set_faults(&e.sim, 0, "{\"hang_before_first_token\":true}"), ==, 200);
	body = serve_completion_body(&e, 3, FALSE);
	serve_post(&e, "/v1/completions", body, NULL, 10000, &r);
	assert_status(&e, &r, 200);
	g_assert_cmpfloat(r.seconds, >=, 0.2);
	g_assert_cmpfloat(r.seconds, <, 3.0);
	sim_reply_clear(&r);
	g_assert_cmpint(serve_counter(&e, "prefill_timeouts"), ==, 1);
	g_assert_cmpint(serve_counter(&e, "handoff_expired"), ==, 0);
	g_assert_cmpint(serve_counter(&e, "retries"), ==, 1);
	g_assert_true(serve_wait_stat(&e, 0, "active_requests", 0, 2000));
	serve_clear(&e);
}

/* Spec 4.3 / 4.2: a stream commits before decode starts, and no earlier,
 * so a handoff that expires while waiting for a decode slot is retried. */
static void
test_stream_retried_after_decode_wait(void)
{
	const char *const args[] = { "--engines", "2", "--time-scale", "50", NULL };
	struct serve_env e;
	struct sim_reply r;
	struct serve_async *hold;
	GPtrArray *events;
	g_autofree char *hold_body = NULL, *body = NULL;

	g_test_summary("/serve/spec-4.3/commit-after-decode-wait: a streamed request whose "
	               "handoff expires while the only decode slot is busy is retried with a "
	               "fresh prefill and the client gets a clean stream");
	if (!serve_start(&e, args, "pd", "{\"serving\":{\"decode_concurrency\":1,"
	                 "\"handoff_timeout_s\":0.4,\"max_attempts\":3,"
	                 "\"retry_base_s\":0.01,\"retry_cap_s\":0.02}}"))
		return;
	/* A decode that hangs holds the only decode slot until its client
	 * leaves (after 0.7 s): the stream's first handoff expires waiting,
	 * the second attempt gets the slot. */
	g_assert_cmpint(sim_set_faults(&e.sim, 1, "{\"hang_before_first_token\":true}"), ==, 200);
	hold_body = serve_completion_body(&e, 4, FALSE);
	hold = serve_post_async(&e, "/v1/completions", hold_body, 700);
	g_assert_true(serve_wait_stat(&e, 1, "active_requests", 1, 3000));
	g_assert_cmpint(sim_set_faults(&e.sim, 1, "{\"hang_before_first_token\":false}"), ==, 200);
	body = serve_completion_body(&e, 4, TRUE);
	serve_post(&e, "/v1/completions", body, NULL, 10000, &r);
	assert_status(&e, &r, 200);
	events = sim_sse_events(r.body->str);
	g_assert_cmpuint(events->len, >, 1);
	g_assert_cmpstr(g_ptr_array_index(events, events->len - 1), ==, "[DONE]");
	g_assert_null(strstr(r.body->str, "\"error\""));
	g_ptr_array_free(events, TRUE);
	sim_reply_clear(&r);
	g_assert_cmpint(serve_counter(&e, "handoff_expired"), >=, 1);
	g_assert_cmpint(serve_counter(&e, "retries"), >=, 1);
	g_assert_cmpint(serve_counter(&e, "stream_errors"), ==, 0);
	serve_async_join(hold, &r, NULL);
	sim_reply_clear(&r);
	serve_clear(&e);
}

/* Spec 4.2: a retry avoids the engine that failed it while another has
 * room; when the only room is on that engine, it goes there rather than
 * wait at the head of the phase line (blocking everyone behind it). */
static void
test_exclusion_yields_to_free_slot(void)
{
	const char *const args[] = { "--engines", "3", "--time-scale", "50", NULL };
	struct serve_env e;
	struct sim_reply r;
	struct serve_async *hold;
	unsigned held, other;
	gint64 start_us;
	g_autofree char *body = NULL;

	g_test_summary("/serve/spec-4.2/exclusion-yields-to-free-slot: a retried request whose "
	               "only free prefill slot is on the engine that failed it is placed there "
	               "at once, not held until the other engine frees");
	if (!serve_start(&e, args, "ppd", "{\"serving\":{\"prefill_concurrency\":1,"
	                 "\"max_attempts\":2,\"prefill_timeout_s\":10,\"handoff_timeout_s\":20,"
	                 "\"retry_base_s\":0.01,\"retry_cap_s\":0.02}}"))
		return;
	/* One request holds one prefill engine (hung) until its client leaves
	 * after 4 s. */
	for (unsigned i = 0; i < 2; i++)
		g_assert_cmpint(sim_set_faults(&e.sim, i, "{\"hang_before_first_token\":true}"),
		                ==, 200);
	body = serve_completion_body(&e, 3, FALSE);
	hold = serve_post_async(&e, "/v1/completions", body, 4000);
	held = serve_wait_stat(&e, 0, "active_requests", 1, 3000) ? 0 : 1;
	other = 1 - held;
	g_assert_true(serve_wait_stat(&e, held, "active_requests", 1, 3000));
	/* The other one answers 503 (retryable). */
	g_assert_cmpint(sim_set_faults(&e.sim, other, "{\"hang_before_first_token\":false,"
	                               "\"error_rate\":1,\"error_status\":503}"), ==, 200);
	start_us = g_get_monotonic_time();
	serve_post(&e, "/v1/completions", body, NULL, 10000, &r);
	/* Both attempts ran on the 503 engine at once: the retry did not wait
	 * for the held engine. */
	g_assert_cmpint(g_get_monotonic_time() - start_us, <, 2000 * 1000);
	g_assert_cmpint(r.status, ==, 502); /* engine_error */
	sim_reply_clear(&r);
	g_assert_cmpint(serve_counter(&e, "retries"), ==, 1);
	g_assert_cmpint(serve_counter(&e, "prefill_failed_status"), ==, 2);
	serve_async_join(hold, &r, NULL);
	sim_reply_clear(&r);
	serve_clear(&e);
}

/* TCP sockets on this host whose remote end is port (any state: a
 * connection closed by its client lingers in TIME_WAIT). */
static unsigned
sockets_to_port(guint16 port)
{
	const char *files[] = { "/proc/net/tcp", "/proc/net/tcp6" };
	unsigned n = 0;

	for (unsigned f = 0; f < G_N_ELEMENTS(files); f++) {
		g_autofree char *text = NULL;
		g_auto(GStrv) lines = NULL;

		if (!g_file_get_contents(files[f], &text, NULL, NULL))
			continue;
		lines = g_strsplit(text, "\n", -1);
		for (guint i = 1; lines[i] != NULL; i++) {
			char local[64], remote[64];
			const char *colon;

			if (sscanf(lines[i], "%*s %63s %63s", local, remote) != 2)
				continue;
			colon = strrchr(remote, ':');
			if (colon != NULL && strtoul(colon + 1, NULL, 16) == port)
				n++;
		}
	}
	return n;
}

/* Spec 4.3 with engine connection reuse: a stream ends for the client once
 * the engine's transfer is complete, so the engine connection survives. */
static void
test_stream_keeps_engine_connection(void)
{
	const char *const args[] = { "--engines", "1", "--time-scale", "50", NULL };
	struct serve_env e;
	struct sim_reply r;
	g_autofree char *body = NULL;
	unsigned n, before;

	g_test_summary("/serve/spec-4.3/stream-keeps-engine-connection: ten sequential streams "
	               "through one engine reuse its connection instead of opening ten");
	if (!g_file_test("/proc/net/tcp", G_FILE_TEST_EXISTS)) {
		g_test_skip("no /proc/net/tcp");
		return;
	}
	if (!serve_start(&e, args, NULL, NULL))
		return;
	body = serve_completion_body(&e, 3, TRUE);
	/* Sockets to that port already there: closed connections of an
	 * earlier process that listened on the same ephemeral port may still
	 * wait out TIME_WAIT. */
	before = sockets_to_port(e.sim.ports[0]);
	for (int i = 0; i < 10; i++) {
		GPtrArray *events;

		serve_post(&e, "/v1/completions", body, NULL, 10000, &r);
		assert_status(&e, &r, 200);
		events = sim_sse_events(r.body->str);
		g_assert_cmpuint(events->len, >, 1);
		g_assert_cmpstr(g_ptr_array_index(events, events->len - 1), ==, "[DONE]");
		g_ptr_array_free(events, TRUE);
		sim_reply_clear(&r);
	}
	g_assert_cmpint(serve_counter(&e, "requests_ok"), ==, 10);
	/* Streams, sizing calls and probes may use a few connections; one per
	 * stream would leave ten or more here. */
	n = sockets_to_port(e.sim.ports[0]);
	n = n > before ? n - before : 0;
	g_test_message("%u new sockets to the engine after 10 streams (%u before)", n, before);
	if (n >= 6)
		g_error("%u new sockets to the engine after 10 streams", n);
	serve_clear(&e);
}

/* Spec 4.3: a relay that was full resumes the engine transfer
 * from inside the client's write; the held chunk may carry the engine's
 * error event, which ends the request while curl is still delivering it.
 * Several slow readers make it likely that some error event arrives that
 * way; under ASan a use-after-free aborts the daemon. */
static void
test_error_event_on_resume(void)
{
	const char *const args[] = { "--engines", "1", "--no-delay", "--preset",
	                             "llama2-70b-tp8-h100", "--max-model-len", "200000", NULL };
	enum { N = 12 };
	struct serve_env e;
	GString *got[N];
	int fd[N];
	bool open_fd[N];
	unsigned left = N, errors = 0;
	gint64 deadline;
	g_autofree char *body = NULL;
	struct sim_reply r;

	g_test_summary("/serve/spec-4.3/engine-error-on-resume: slow stream clients behind a "
	               "full relay each get the engine's in-band error event, and the daemon "
	               "survives the error arriving while the paused transfer resumes");
	if (!serve_start(&e, args, NULL, NULL))
		return;
	g_assert_cmpint(sim_set_faults(&e.sim, 0, "{\"error_after_tokens\":1500}"), ==, 200);
	body = serve_completion_body(&e, 100000, TRUE);
	for (int i = 0; i < N; i++) {
		got[i] = g_string_new(NULL);
		fd[i] = serve_raw_post(e.port, "/v1/completions", body, 4096);
		g_assert_cmpint(fd[i], >=, 0);
		open_fd[i] = true;
	}
	/* Read slowly (4 KiB per descriptor every 5 ms, well inside the
	 * relay's stall grace) until every stream has ended. */
	deadline = g_get_monotonic_time() + 30 * G_USEC_PER_SEC;
	while (left > 0 && g_get_monotonic_time() < deadline) {
		g_usleep(5000);
		for (int i = 0; i < N; i++) {
			struct pollfd pfd = { .fd = fd[i], .events = POLLIN };
			char buf[4096];
			ssize_t n;

			if (!open_fd[i] || poll(&pfd, 1, 0) <= 0)
				continue;
			n = read(fd[i], buf, sizeof buf);
			if (n > 0)
				g_string_append_len(got[i], buf, n);
			/* The chunked body ends with an empty chunk. */
			if (n <= 0 || g_str_has_suffix(got[i]->str, "\r\n0\r\n\r\n")) {
				open_fd[i] = false;
				left--;
			}
		}
	}
	g_assert_cmpuint(left, ==, 0);
	for (int i = 0; i < N; i++) {
		g_assert_true(g_str_has_prefix(got[i]->str, "HTTP/1.1 200"));
		g_assert_null(strstr(got[i]->str, "[DONE]"));
		/* A reader starved on a loaded machine may be closed for not
		 * reading (backpressure, no final chunk); every stream that
		 * ended normally carries the engine's error event. */
		if (g_str_has_suffix(got[i]->str, "\r\n0\r\n\r\n")) {
			g_assert_nonnull(strstr(got[i]->str, "\"error\""));
			errors++;
		}
		close(fd[i]);
		g_string_free(got[i], TRUE);
	}
	g_assert_cmpuint(errors, >, 0);
	/* Still serving. */
	g_assert_cmpint(sim_set_faults(&e.sim, 0, "{\"error_after_tokens\":null}"), ==, 200);
	g_free(body);
	body = serve_completion_body(&e, 3, FALSE);
	serve_post(&e, "/v1/completions", body, NULL, 10000, &r);
	assert_status(&e, &r, 200);
	sim_reply_clear(&r);
	serve_clear(&e);
}

/* --- a fake engine that is slow to end its streams ------------------ */

/* One engine on loopback that answers every completion with a stream whose
 * chunked terminator comes FAKE_END_DELAY_US after its [DONE] event (the
 * simulator ends at once, so it cannot show a router that cuts a transfer
 * short at [DONE] and so loses the connection). It also answers the model
 * probe. It counts the connections that carried a completion. */
#define FAKE_END_DELAY_US (300 * 1000)

struct fake_engine {
	struct serve_fake_engine srv;
	gint completion_conns;
};

static bool
send_chunk(int fd, const char *data)
{
	g_autofree char *chunk = g_strdup_printf("%zx\r\n%s\r\n", strlen(data), data);

	return serve_send_all(fd, chunk);
}

/* One connection: requests in turn until the peer closes. */
static void
fake_connection(int fd, gpointer data)
{
	struct fake_engine *f = data;
	GString *in = g_string_new(NULL);
	bool counted = false;

	for (;;) {
		size_t len = serve_fake_read_request(fd, in);
		int control;

		if (len == 0)
			break;
		control = serve_fake_answer_control(fd, in->str, FALSE);
		if (control == 0)
			break;
		if (control > 0) {
			/* the monitor's call: answered */
		} else if (g_str_has_prefix(in->str, "POST /v1/completions")) {
			if (!counted) {
				counted = true;
				g_atomic_int_inc(&f->completion_conns);
			}
			if (!serve_send_all(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
			              "Transfer-Encoding: chunked\r\n\r\n") ||
			    !send_chunk(fd, "data: {\"id\":\"cmpl-fake\",\"object\":\"text_completion\","
			                "\"created\":1,\"model\":\"opt-13b-a100\",\"choices\":[{\"index\":0,"
			                "\"text\":\" whale\",\"logprobs\":null,\"finish_reason\":\"length\","
			                "\"stop_reason\":null}],\"usage\":null}\n\n") ||
			    !send_chunk(fd, "data: {\"id\":\"cmpl-fake\",\"object\":\"text_completion\","
			                "\"created\":1,\"model\":\"opt-13b-a100\",\"choices\":[],\"usage\":"
			                "{\"prompt_tokens\":4,\"completion_tokens\":1,\"total_tokens\":5}}\n\n") ||
			    !send_chunk(fd, "data: [DONE]\n\n"))
				break;
			g_usleep(FAKE_END_DELAY_US);
			if (!serve_send_all(fd, "0\r\n\r\n"))
				break;
		} else if (!serve_send_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")) {
			break;
		}
		g_string_erase(in, 0, (gssize)len);
	}
	close(fd);
	g_string_free(in, TRUE);
}

static void
fake_engine_start(struct fake_engine *f)
{
	memset(f, 0, sizeof *f);
	serve_fake_engine_start(&f->srv, fake_connection, f);
}

static void
test_keeps_connection_past_done(void)
{
	const char *const args[] = { "--engines", "1", "--time-scale", "50", NULL };
	struct serve_env e;
	struct fake_engine f;
	struct sim_reply r;
	g_autofree char *config = NULL;
	const char *stream = "{\"model\":\"opt-13b-a100\",\"prompt\":\"Hi\",\"max_tokens\":1,"
	                     "\"stream\":true}";
	const char *plain = "{\"model\":\"opt-13b-a100\",\"prompt\":\"Hi\",\"max_tokens\":1}";

	g_test_summary("/serve/spec-4.3/keep-alive-past-done: an engine that ends its transfer "
	               "well after [DONE] keeps its one connection over streamed and non-streamed "
	               "requests: Narwhal waits for the end of the transfer, and the client's "
	               "answer ends after it");
	if (!serve_start(&e, args, NULL, NULL))
		return;
	fake_engine_start(&f);
	g_assert_cmpint(serve_stop_daemon(&e, SIGTERM, 10000), ==, 0);
	config = g_strdup_printf("{\"engine\":{\"tokenize\":false},"
	                         "\"controller\":{\"min_prefill\":1,\"min_decode\":1},"
	                         "\"fleet\":{\"model\":\"opt-13b-a100\",\"engines\":[{\"id\":\"fake\","
	                         "\"url\":\"http://127.0.0.1:%u\",\"role\":\"prefill\"}]}}", f.srv.port);
	g_assert_true(serve_start_daemon(&e, config, NULL));
	for (int i = 0; i < 6; i++) {
		serve_post(&e, "/v1/completions", i % 2 ? plain : stream, NULL, 10000, &r);
		assert_status(&e, &r, 200);
		if (i % 2 == 0)
			g_assert_nonnull(strstr(r.body->str, "data: [DONE]"));
		else
			g_assert_nonnull(strstr(r.body->str, "\" whale\""));
		/* The answer ended only with the engine's transfer. */
		g_assert_cmpfloat(r.seconds, >=, FAKE_END_DELAY_US / 1e6 * 0.9);
		sim_reply_clear(&r);
	}
	g_assert_cmpint(serve_counter(&e, "requests_ok"), ==, 6);
	/* One connection carried them all (a router that cut each transfer at
	 * [DONE] would have needed six). */
	g_assert_cmpint(g_atomic_int_get(&f.completion_conns), ==, 1);
	serve_clear(&e);
	serve_fake_engine_stop(&f.srv);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/serve/spec-6/handoff-cap-during-prefill",
	                test_hung_prefill_under_handoff_cap);
	g_test_add_func("/serve/spec-4.3/commit-after-decode-wait",
	                test_stream_retried_after_decode_wait);
	g_test_add_func("/serve/spec-4.2/exclusion-yields-to-free-slot",
	                test_exclusion_yields_to_free_slot);
	g_test_add_func("/serve/spec-4.3/stream-keeps-engine-connection",
	                test_stream_keeps_engine_connection);
	g_test_add_func("/serve/spec-4.3/engine-error-on-resume", test_error_event_on_resume);
	g_test_add_func("/serve/spec-4.3/keep-alive-past-done", test_keeps_connection_past_done);
	return g_test_run();
}
