/*
 * narwhal-sim's fault injection, through the admin API and the --fault-*
 * flags: injected error statuses, latency multipliers, a hang before the
 * first token, death mid-stream, refused connections, flapping or failed
 * health, a shortened lease, strict validation of fault objects, and reset;
 * and what a recovery test reads back: the process start time across a
 * SIGKILL and restart, and when an engine last received work.
 */
#include "build-config.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>

#include "integration/sim-client.h"

static const char *const fast[] = { "--time-scale", "50", NULL };

static void
admin(const struct sim_proc *p, const char *method, const char *path, const char *body,
      long want, struct sim_reply *r)
{
	sim_http(p->admin_port, method, path, body, NULL, 5000, r);
	if (r->status != want)
		g_error("%s %s -> %ld (want %ld): %s", method, path, r->status, want, r->body->str);
}

static void
test_error_rate(void)
{
	struct sim_proc p;
	const char *args[] = { "--no-delay", "--fault-error-rate", "1", "--fault-error-status",
	                       "429", NULL };
	struct sim_reply r;
	unsigned errors = 0;
	json_t *doc;

	g_test_summary("/sim/issue3/fault-error-rate: injected statuses with a probability, "
	               "from the flags and the admin API, in vLLM's error shape");
	g_assert_true(sim_start(&p, args));
	sim_http(p.ports[0], "POST", "/v1/completions", "{\"prompt\":\"a\"}", NULL, 5000, &r);
	g_assert_cmpint(r.status, ==, 429);
	doc = sim_json(r.body->str);
	g_assert_cmpint(json_integer_value(json_object_get(json_object_get(doc, "error"), "code")),
	                ==, 429);
	json_decref(doc);
	sim_reply_clear(&r);
	/* Health and metrics are not inference: they keep answering. */
	sim_http(p.ports[0], "GET", "/health", NULL, NULL, 5000, &r);
	g_assert_cmpint(r.status, ==, 200);
	sim_reply_clear(&r);

	g_assert_cmpint(sim_set_faults(&p, 0, "{\"error_rate\":0.5,\"error_status\":503}"), ==, 200);
	for (int i = 0; i < 60; i++) {
		sim_http(p.ports[0], "POST", "/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":1}",
		         NULL, 5000, &r);
		g_assert_true(r.status == 200 || r.status == 503);
		errors += r.status == 503;
		sim_reply_clear(&r);
	}
	g_test_message("%u of 60 failed at rate 0.5", errors);
	g_assert_cmpuint(errors, >, 10);
	g_assert_cmpuint(errors, <, 50);
	admin(&p, "POST", "/sim/reset", "", 200, &r);
	sim_reply_clear(&r);
	sim_http(p.ports[0], "POST", "/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":1}", NULL,
	         5000, &r);
	g_assert_cmpint(r.status, ==, 200);
	sim_reply_clear(&r);
	g_assert_cmpint(sim_stop(&p, SIGTERM, 10000), ==, 0);
	sim_clear(&p);
}

static void
test_latency(void)
{
	struct sim_proc p;
	/* A small time scale: wall-clock wake-up jitter on a loaded machine,
	 * multiplied by the scale, must stay small against the step times. */
	const char *args[] = { "--time-scale", "2", NULL };
	const char *body = "{\"prompt\":\"a b c\",\"max_tokens\":30}";
	const char *e2e = "vllm:e2e_request_latency_seconds_sum{";
	struct sim_reply r;
	double plain, slow, plain_wall, slow_wall;

	g_test_summary("/sim/issue3/fault-latency-multiplier: every step is stretched");
	g_assert_true(sim_start(&p, args));
	sim_http(p.ports[0], "POST", "/v1/completions", body, NULL, 10000, &r);
	g_assert_cmpint(r.status, ==, 200);
	plain_wall = r.seconds;
	sim_reply_clear(&r);
	plain = sim_metric(p.ports[0], e2e);
	g_assert_cmpint(sim_set_faults(&p, 0, "{\"latency_multiplier\":4}"), ==, 200);
	sim_http(p.ports[0], "POST", "/v1/completions", body, NULL, 10000, &r);
	g_assert_cmpint(r.status, ==, 200);
	slow_wall = r.seconds;
	sim_reply_clear(&r);
	slow = sim_metric(p.ports[0], e2e) - plain;
	g_test_message("model time: plain %.3f s, x4 %.3f s; wall: %.3f s, %.3f s", plain, slow,
	               plain_wall, slow_wall);
	/* The steps stretch 4x; the gaps between them (the loop's own wake-up
	 * latency, times the time scale) do not. */
	g_assert_cmpfloat(slow, >, plain * 3.0);
	g_assert_cmpfloat(slow, <, plain * 4.5);
	g_assert_cmpfloat(slow_wall, >, plain_wall);
	g_assert_cmpfloat(slow_wall, >=, slow / 2 * 0.9);
	g_assert_cmpint(sim_stop(&p, SIGTERM, 10000), ==, 0);
	sim_clear(&p);
}

static void
test_hang(void)
{
	struct sim_proc p;
	struct sim_reply r;
	json_t *st;

	g_test_summary("/sim/issue3/fault-hang-before-first-token: headers go out, the first "
	               "token does not (forever, or for a time)");
	g_assert_true(sim_start(&p, fast));
	g_assert_cmpint(sim_set_faults(&p, 0, "{\"hang_before_first_token\":true}"), ==, 200);
	sim_http(p.ports[0], "POST", "/v1/completions",
	         "{\"prompt\":\"a\",\"max_tokens\":3,\"stream\":true}", NULL, 400, &r);
	g_assert_cmpint(r.curl_code, ==, CURLE_OPERATION_TIMEDOUT);
	g_assert_cmpint(r.status, ==, 200);
	g_assert_cmpuint(r.body->len, ==, 0);
	sim_reply_clear(&r);
	/* The hung request was dropped with its client. */
	st = sim_engine_stats(&p, 0);
	g_assert_cmpint(json_integer_value(json_object_get(st, "running")), ==, 0);
	json_decref(st);

	/* 20 model seconds at time scale 50: 0.4 s of wall time. */
	g_assert_cmpint(sim_set_faults(&p, 0, "{\"hang_before_first_token\":20}"), ==, 200);
	sim_http(p.ports[0], "POST", "/v1/completions",
	         "{\"prompt\":\"a\",\"max_tokens\":3,\"stream\":true}", NULL, 5000, &r);
	g_assert_cmpint(r.status, ==, 200);
	g_assert_cmpfloat(r.first_byte_s, >=, 0.39);
	g_assert_true(g_str_has_suffix(r.body->str, "data: [DONE]\n\n"));
	sim_reply_clear(&r);
	g_assert_cmpint(sim_stop(&p, SIGTERM, 10000), ==, 0);
	sim_clear(&p);
}

/* Sockets the process holds open (Linux /proc). */
static unsigned
open_sockets(const struct sim_proc *p)
{
	const char *pid = g_subprocess_get_identifier(p->proc);
	g_autofree char *dir = g_strdup_printf("/proc/%s/fd", pid);
	GDir *d = g_dir_open(dir, 0, NULL);
	const char *name;
	unsigned n = 0;

	g_assert_nonnull(d);
	while ((name = g_dir_read_name(d)) != NULL) {
		g_autofree char *path = g_build_filename(dir, name, NULL);
		g_autofree char *target = g_file_read_link(path, NULL);

		n += target != NULL && g_str_has_prefix(target, "socket:");
	}
	g_dir_close(d);
	return n;
}

/* A stream that dies: N token events, then the connection ends without the
 * final chunk and without [DONE], at once (not at the client's timeout). */
static void
assert_died_mid_stream(const struct sim_proc *p, const char *path, const char *body,
                       unsigned n_tokens, gboolean chat)
{
	struct sim_reply r;
	GPtrArray *ev;
	guint i0 = 0;

	sim_http(p->ports[0], "POST", path, body, NULL, 10000, &r);
	g_test_message("%s: curl %d after %.3f s, %zu bytes", path, r.curl_code, r.seconds,
	               r.body->len);
	g_assert_cmpint(r.status, ==, 200);
	/* A truncated chunked transfer, not a timeout or a clean end. */
	g_assert_cmpint(r.curl_code, ==, CURLE_PARTIAL_FILE);
	g_assert_cmpfloat(r.seconds, <, 2.0); /* the client would wait 10 s */
	g_assert_null(strstr(r.body->str, "[DONE]"));
	g_assert_null(strstr(r.body->str, "\"error\""));
	ev = sim_sse_events(r.body->str);
	if (chat) {
		/* vLLM opens a chat stream with the role alone: not a token. */
		g_assert_cmpuint(ev->len, >, 0);
		g_assert_nonnull(strstr(g_ptr_array_index(ev, 0), "\"role\":\"assistant\""));
		i0 = 1;
	}
	g_assert_cmpuint(ev->len - i0, ==, n_tokens);
	for (guint i = i0; i < ev->len; i++) {
		json_t *doc = sim_json(g_ptr_array_index(ev, i));
		json_t *choice = json_array_get(json_object_get(doc, "choices"), 0);

		g_assert_nonnull(choice);
		g_assert_true(json_is_null(json_object_get(choice, "finish_reason")));
		json_decref(doc);
	}
	g_ptr_array_unref(ev);
	sim_reply_clear(&r);
}

static void
test_die(void)
{
	struct sim_proc p;
	struct sim_reply r;
	json_t *st;
	unsigned sockets;
	gint64 deadline;

	g_test_summary("/sim/issue3/fault-die-after-tokens: after N token events the stream's "
	               "connection closes at once without its terminator; non-streaming "
	               "answers 500; KV is freed");
	g_assert_true(sim_start(&p, fast));
	sockets = open_sockets(&p);
	g_assert_cmpint(sim_set_faults(&p, 0, "{\"die_after_tokens\":3}"), ==, 200);
	assert_died_mid_stream(&p, "/v1/completions",
	                       "{\"prompt\":\"a\",\"max_tokens\":10,\"stream\":true}", 3, FALSE);
	g_assert_true(sim_wait_log(&p, "\"event\":\"fault_died\"", 1000));
	/* The dead stream's socket is released soon too, with no other request
	 * on the engine's port to sweep it (the admin API has its own
	 * listener), not left to the connection timeout (60 s). */
	deadline = g_get_monotonic_time() + 5 * G_USEC_PER_SEC;
	while (open_sockets(&p) > sockets && g_get_monotonic_time() < deadline)
		g_usleep(20000);
	g_assert_cmpuint(open_sockets(&p), <=, sockets);
	/* A chat stream: the role event, then N tokens, then the close. */
	assert_died_mid_stream(&p, "/v1/chat/completions",
	                       "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],"
	                       "\"max_tokens\":1000,\"stream\":true}", 3, TRUE);
	/* N = 0: the headers, then the close. */
	g_assert_cmpint(sim_set_faults(&p, 0, "{\"die_after_tokens\":0}"), ==, 200);
	assert_died_mid_stream(&p, "/v1/completions",
	                       "{\"prompt\":\"a\",\"max_tokens\":10,\"stream\":true}", 0, FALSE);
	g_assert_cmpint(sim_set_faults(&p, 0, "{\"die_after_tokens\":3}"), ==, 200);
	/* The aborted requests hold no KV and no slot. */
	st = sim_engine_stats(&p, 0);
	g_assert_cmpint(json_integer_value(json_object_get(st, "running")), ==, 0);
	g_assert_cmpint(json_integer_value(json_object_get(st, "waiting")), ==, 0);
	g_assert_cmpint(json_integer_value(json_object_get(st, "kv_blocks_used")), ==, 0);
	json_decref(st);
	g_assert_cmpfloat(sim_metric(p.ports[0], "vllm:num_requests_running{"), ==, 0);

	sim_http(p.ports[0], "POST", "/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":10}",
	         NULL, 5000, &r);
	g_assert_cmpint(r.status, ==, 500);
	g_assert_nonnull(strstr(r.body->str, "\"InternalServerError\""));
	sim_reply_clear(&r);
	/* Short requests finish before the death point. */
	sim_http(p.ports[0], "POST", "/v1/completions",
	         "{\"prompt\":\"a\",\"max_tokens\":3,\"stream\":true}", NULL, 5000, &r);
	g_assert_cmpint(r.curl_code, ==, CURLE_OK);
	g_assert_true(g_str_has_suffix(r.body->str, "data: [DONE]\n\n"));
	sim_reply_clear(&r);
	st = sim_engine_stats(&p, 0);
	g_assert_cmpint(json_integer_value(json_object_get(st, "running")), ==, 0);
	g_assert_cmpint(json_integer_value(json_object_get(st, "kv_blocks_used")), ==, 0);
	json_decref(st);
	g_assert_cmpint(sim_stop(&p, SIGTERM, 10000), ==, 0);
	sim_clear(&p);
}

static void
test_refuse(void)
{
	struct sim_proc p;
	const char *args[] = { "--engines", "2", "--no-delay", NULL };
	struct sim_reply r;
	json_t *doc, *st;
	char buf[4096];
	int fd;

	g_test_summary("/sim/issue3/fault-refuse-connections: the engine's port stops "
	               "listening; reset binds the same port again");
	g_assert_true(sim_start(&p, args));
	/* A request in flight ends with the listener, and frees its KV. */
	g_assert_cmpint(sim_set_faults(&p, 1, "{\"hang_before_first_token\":true}"), ==, 200);
	fd = sim_raw_request(p.ports[1], "/v1/completions",
	                     "{\"prompt\":\"a\",\"max_tokens\":5,\"stream\":true}", 100);
	g_assert_cmpint(fd, >=, 0);
	g_assert_cmpint(sim_set_faults(&p, 1, "{\"refuse_connections\":true}"), ==, 200);
	g_assert_cmpint(read(fd, buf, sizeof buf), >=, 0); /* closed, perhaps after the headers */
	close(fd);
	st = sim_engine_stats(&p, 1);
	g_assert_cmpint(json_integer_value(json_object_get(st, "active_requests")), ==, 0);
	g_assert_cmpint(json_integer_value(json_object_get(st, "kv_blocks_used")), ==, 0);
	json_decref(st);
	sim_http(p.ports[1], "GET", "/health", NULL, NULL, 2000, &r);
	g_assert_cmpint(r.status, ==, 0);
	g_assert_cmpint(r.curl_code, ==, CURLE_COULDNT_CONNECT);
	sim_reply_clear(&r);
	/* The other engine is untouched. */
	sim_http(p.ports[0], "GET", "/health", NULL, NULL, 2000, &r);
	g_assert_cmpint(r.status, ==, 200);
	sim_reply_clear(&r);
	admin(&p, "GET", "/sim/engines", NULL, 200, &r);
	doc = sim_json(r.body->str);
	g_assert_true(json_is_false(json_object_get(json_array_get(json_object_get(doc, "engines"),
	                                                           1), "listening")));
	json_decref(doc);
	sim_reply_clear(&r);
	admin(&p, "POST", "/sim/reset", "{}", 200, &r);
	sim_reply_clear(&r);
	sim_http(p.ports[1], "POST", "/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":2}", NULL,
	         2000, &r);
	g_assert_cmpint(r.status, ==, 200);
	sim_reply_clear(&r);
	g_assert_cmpint(sim_stop(&p, SIGTERM, 10000), ==, 0);
	sim_clear(&p);

	/* From the flag: no engine listens until a reset. */
	{
		const char *flag_args[] = { "--no-delay", "--fault-refuse-connections", NULL };

		g_assert_true(sim_start(&p, flag_args));
		sim_http(p.ports[0], "GET", "/health", NULL, NULL, 2000, &r);
		g_assert_cmpint(r.status, ==, 0);
		sim_reply_clear(&r);
		admin(&p, "DELETE", "/sim/engines/sim-0/faults", NULL, 200, &r);
		sim_reply_clear(&r);
		sim_http(p.ports[0], "GET", "/health", NULL, NULL, 2000, &r);
		g_assert_cmpint(r.status, ==, 200);
		sim_reply_clear(&r);
		g_assert_cmpint(sim_stop(&p, SIGTERM, 10000), ==, 0);
		sim_clear(&p);
	}
}

static void
test_health(void)
{
	struct sim_proc p;
	const char *args[] = { "--no-delay", "--fault-unhealthy", NULL };
	struct sim_reply r;
	unsigned up = 0, down = 0;
	gint64 end;

	g_test_summary("/sim/issue3/fault-health: /health answers 503 when faulted, and "
	               "alternates 503 and 200 when flapping");
	g_assert_true(sim_start(&p, args));
	sim_http(p.ports[0], "GET", "/health", NULL, NULL, 2000, &r);
	g_assert_cmpint(r.status, ==, 503);
	g_assert_cmpuint(r.body->len, ==, 0);
	sim_reply_clear(&r);
	g_assert_cmpint(sim_set_faults(&p, 0, "{\"unhealthy\":false,\"flap_health_period_s\":0.1}"),
	                ==, 200);
	/* Poll until both answers were seen a few times, with a deadline, so a
	 * loaded machine only makes the test slower (a fixed window raced the
	 * clock). */
	end = g_get_monotonic_time() + 20 * G_USEC_PER_SEC;
	while ((up <= 3 || down <= 3) && g_get_monotonic_time() < end) {
		sim_http(p.ports[0], "GET", "/health", NULL, NULL, 2000, &r);
		up += r.status == 200;
		down += r.status == 503;
		sim_reply_clear(&r);
		g_usleep(10 * 1000);
	}
	g_test_message("flapping: %u up, %u down", up, down);
	g_assert_cmpuint(up, >, 3);
	g_assert_cmpuint(down, >, 3);
	g_assert_cmpint(sim_stop(&p, SIGTERM, 10000), ==, 0);
	sim_clear(&p);
}

static void
test_short_lease(void)
{
	struct sim_proc p;
	const char *args[] = { "--time-scale", "10", NULL };
	struct sim_reply r;
	json_t *doc, *st;
	double expiry, now;

	g_test_summary("/sim/issue3/fault-kv-lease: a shortened lease shows in the params and "
	               "frees the KV when it lapses");
	g_assert_true(sim_start(&p, args));
	g_assert_cmpint(sim_set_faults(&p, 0, "{\"kv_lease_s\":2}"), ==, 200);
	sim_http(p.ports[0], "POST", "/v1/completions",
	         "{\"prompt\":\"a b c\",\"max_tokens\":1,\"kv_transfer_params\":"
	         "{\"do_remote_decode\":true}}", NULL, 5000, &r);
	g_assert_cmpint(r.status, ==, 200);
	now = (double)g_get_real_time() / 1e6;
	doc = sim_json(r.body->str);
	expiry = json_number_value(json_object_get(json_object_get(doc, "kv_transfer_params"),
	                                           "remote_blocks_expiry_time"));
	/* 2 model seconds at time scale 10: 0.2 s from now. */
	g_assert_cmpfloat(expiry, >, now);
	g_assert_cmpfloat(expiry, <, now + 0.3);
	json_decref(doc);
	sim_reply_clear(&r);
	/* Poll (bounded) for the lapse rather than race a fixed sleep against
	 * the lease clock (issue 9: stable on loaded cores). */
	{
		gint64 until = g_get_monotonic_time() + 5 * G_USEC_PER_SEC;

		for (;;) {
			st = sim_engine_stats(&p, 0);
			if (json_integer_value(json_object_get(st, "leases")) == 0 ||
			    g_get_monotonic_time() >= until)
				break;
			json_decref(st);
			g_usleep(10 * 1000);
		}
	}
	g_assert_cmpint(json_integer_value(json_object_get(st, "leases")), ==, 0);
	g_assert_cmpint(json_integer_value(json_object_get(st, "kv_blocks_used")), ==, 0);
	json_decref(st);
	g_assert_cmpint(sim_stop(&p, SIGTERM, 10000), ==, 0);
	sim_clear(&p);
}

static void
test_admin(void)
{
	struct sim_proc p;
	struct sim_reply r;
	json_t *doc;
	static const char *const bad[] = {
		"{\"error_rate\":1.5}",
		"{\"error_rate\":\"high\"}",
		"{\"error_status\":200}",
		"{\"latency_multiplier\":0.5}",
		"{\"hang_before_first_token\":\"long\"}",
		"{\"die_after_tokens\":-1}",
		"{\"die_after_tokens\":2.5}",
		"{\"refuse_connections\":1}",
		"{\"flap_health_period_s\":-1}",
		"{\"kv_lease_s\":0}",
		"{\"no_such_fault\":true}",
		"[1]",
		"{oops",
	};

	g_test_summary("/sim/issue3/admin-api: strict validation with clear 400s, per-engine "
	               "GET/POST/DELETE, /sim/engines and /sim/reset");
	g_assert_true(sim_start(&p, fast));
	for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
		json_t *err;

		admin(&p, "POST", "/sim/engines/sim-0/faults", bad[i], 400, &r);
		doc = sim_json(r.body->str);
		err = json_object_get(doc, "error");
		g_test_message("%s -> %s", bad[i],
		               json_string_value(json_object_get(err, "message")));
		g_assert_cmpint(json_integer_value(json_object_get(err, "code")), ==, 400);
		json_decref(doc);
		sim_reply_clear(&r);
	}
	/* A rejected object changes nothing, not even its valid fields. */
	admin(&p, "POST", "/sim/engines/sim-0/faults", "{\"error_rate\":0.5,\"bogus\":1}", 400, &r);
	sim_reply_clear(&r);
	admin(&p, "GET", "/sim/engines/sim-0/faults", NULL, 200, &r);
	doc = sim_json(r.body->str);
	g_assert_cmpfloat(json_number_value(json_object_get(doc, "error_rate")), ==, 0.0);
	json_decref(doc);
	sim_reply_clear(&r);

	admin(&p, "POST", "/sim/engines/sim-0/faults", "{\"latency_multiplier\":2,"
	      "\"die_after_tokens\":7,\"hang_before_first_token\":false}", 200, &r);
	doc = sim_json(r.body->str);
	g_assert_cmpfloat(json_number_value(json_object_get(doc, "latency_multiplier")), ==, 2.0);
	g_assert_cmpint(json_integer_value(json_object_get(doc, "die_after_tokens")), ==, 7);
	json_decref(doc);
	sim_reply_clear(&r);
	/* Merging: a second object keeps the first one's faults; null clears one. */
	admin(&p, "POST", "/sim/engines/sim-0/faults", "{\"die_after_tokens\":null}", 200, &r);
	doc = sim_json(r.body->str);
	g_assert_cmpfloat(json_number_value(json_object_get(doc, "latency_multiplier")), ==, 2.0);
	g_assert_true(json_is_null(json_object_get(doc, "die_after_tokens")));
	json_decref(doc);
	sim_reply_clear(&r);

	admin(&p, "GET", "/sim/engines", NULL, 200, &r);
	doc = sim_json(r.body->str);
	g_assert_cmpuint(json_array_size(json_object_get(doc, "engines")), ==, 1);
	g_assert_cmpint(json_integer_value(json_object_get(json_array_get(
		json_object_get(doc, "engines"), 0), "port")), ==, p.ports[0]);
	json_decref(doc);
	sim_reply_clear(&r);
	admin(&p, "DELETE", "/sim/engines/sim-0/faults", NULL, 200, &r);
	doc = sim_json(r.body->str);
	g_assert_cmpfloat(json_number_value(json_object_get(doc, "latency_multiplier")), ==, 1.0);
	json_decref(doc);
	sim_reply_clear(&r);

	admin(&p, "GET", "/sim/engines/sim-9/faults", NULL, 404, &r);
	sim_reply_clear(&r);
	admin(&p, "GET", "/sim/reset", NULL, 405, &r);
	sim_reply_clear(&r);
	admin(&p, "PUT", "/sim/engines/sim-0/faults", "{}", 405, &r);
	sim_reply_clear(&r);
	admin(&p, "GET", "/sim/nothing", NULL, 404, &r);
	sim_reply_clear(&r);
	g_assert_cmpint(sim_stop(&p, SIGTERM, 10000), ==, 0);
	sim_clear(&p);
}

static void
test_bad_flags(void)
{
	const char *const cases[][4] = {
		{ "--fault-error-rate", "2", NULL },
		{ "--fault-hang-before-first-token", "soon", NULL },
		{ "--engines", "0", NULL },
		{ "--kv-load-failure-policy", "retry", NULL },
		{ "--preset", "no-such-model", NULL },
	};
	g_autofree char *bin = sim_bin();

	g_test_summary("/sim/issue3/flags: invalid flags are usage errors, exit status 2 with a "
	               "message (docs/simulator.md)");
	for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
		const char *argv[8] = { bin, "--base-port", "0", cases[i][0], cases[i][1], NULL };
		g_autoptr(GSubprocess) proc = NULL;
		g_autofree char *err = NULL;
		GError *error = NULL;

		proc = g_subprocess_newv(argv, G_SUBPROCESS_FLAGS_STDOUT_SILENCE |
		                         G_SUBPROCESS_FLAGS_STDERR_PIPE, &error);
		g_assert_no_error(error);
		g_subprocess_communicate_utf8(proc, NULL, NULL, NULL, &err, &error);
		g_assert_no_error(error);
		g_test_message("%s %s: %s", cases[i][0], cases[i][1], err);
		g_assert_true(g_subprocess_get_if_exited(proc));
		g_assert_cmpint(g_subprocess_get_exit_status(proc), ==, 2);
		g_assert_nonnull(strstr(err, "narwhal-sim: "));
	}
}

/* Issue 10 ("with expired leases"): a lease shorter than any handoff
 * lapses before the decode engine's pull arrives, so the decode fails
 * while the prefill answered normally, and the producer holds nothing. */
static void
test_expired_lease(void)
{
	struct sim_proc p;
	const char *args[] = { "--engines", "2", "--no-delay", NULL };
	struct sim_reply r;
	json_t *doc, *st;
	char *params, *decode;

	g_test_summary("/sim/issue10/fault-expired-lease: with kv_lease_s below a handoff's "
	               "time the decode's pull is refused and the prefill engine's KV is free");
	g_assert_true(sim_start(&p, args));
	g_assert_cmpint(sim_set_faults(&p, 0, "{\"kv_lease_s\":0.000001}"), ==, 200);
	sim_http(p.ports[0], "POST", "/v1/completions",
	         "{\"prompt\":\"a b c\",\"max_tokens\":4,\"kv_transfer_params\":"
	         "{\"do_remote_decode\":true}}", NULL, 5000, &r);
	g_assert_cmpint(r.status, ==, 200);
	doc = sim_json(r.body->str);
	params = json_dumps(json_object_get(doc, "kv_transfer_params"), JSON_COMPACT);
	g_assert_nonnull(params);
	json_decref(doc);
	sim_reply_clear(&r);
	decode = g_strdup_printf("{\"prompt\":\"a b c\",\"max_tokens\":4,"
	                         "\"kv_transfer_params\":%s}", params);
	sim_http(p.ports[1], "POST", "/v1/completions", decode, NULL, 5000, &r);
	g_assert_cmpint(r.status, ==, 500);
	sim_reply_clear(&r);
	g_assert_true(sim_wait_log(&p, "\"event\":\"kv_load_failed\"", 5000));
	st = sim_engine_stats(&p, 0);
	g_assert_cmpint(json_integer_value(json_object_get(st, "leases")), ==, 0);
	g_assert_cmpint(json_integer_value(json_object_get(st, "kv_pulls_served")), ==, 0);
	json_decref(st);
	free(params);
	g_free(decode);
	g_assert_cmpint(sim_stop(&p, SIGTERM, 10000), ==, 0);
	sim_clear(&p);
}

/* Issue 10 ("killed with SIGKILL then restarted"): every engine's /metrics
 * carries the process's start time as Prometheus's process collector does
 * (a gauge without labels, Unix seconds, below a second's precision), so a
 * monitor tells a restarted engine from one that only blinked. */
static void
test_restart_start_time(void)
{
	struct sim_proc p;
	const char *args[] = { "--engines", "2", "--no-delay", NULL };
	struct sim_reply r;
	double before, after, first, killed, second;
	char port_text[8];
	guint16 port;

	g_test_summary("/sim/issue10/restart-start-time: process_start_time_seconds is the "
	               "process's start, the same on every engine, and moves on a restart");
	before = (double)g_get_real_time() / 1e6;
	g_assert_true(sim_start(&p, args));
	after = (double)g_get_real_time() / 1e6;
	sim_http(p.ports[0], "GET", "/metrics", NULL, NULL, 5000, &r);
	g_assert_cmpint(r.status, ==, 200);
	g_assert_nonnull(strstr(r.body->str, "\n# TYPE process_start_time_seconds gauge\n"
	                                     "process_start_time_seconds "));
	sim_reply_clear(&r);
	first = sim_metric(p.ports[0], "process_start_time_seconds ");
	g_assert_cmpfloat(sim_metric(p.ports[1], "process_start_time_seconds "), ==, first);
	/* Printed to the millisecond. */
	g_assert_cmpfloat(first, >=, before - 0.001);
	g_assert_cmpfloat(first, <=, after);

	port = p.ports[0];
	sim_stop(&p, SIGKILL, 5000);
	sim_clear(&p);
	killed = (double)g_get_real_time() / 1e6;
	/* The same port again: a later --base-port wins over the helper's 0.
	 * One engine: a second one would need port + 1, which was never this
	 * process's (its ports were ephemeral) and is often the local port of
	 * a closed client connection still in TIME_WAIT. */
	g_snprintf(port_text, sizeof port_text, "%u", port);
	{
		const char *again[] = { "--engines", "1", "--no-delay", "--base-port", port_text,
		                        NULL };

		g_assert_true(sim_start(&p, again));
	}
	g_assert_cmpuint(p.ports[0], ==, port);
	second = sim_metric(port, "process_start_time_seconds ");
	g_test_message("start time %.3f, after the restart %.3f", first, second);
	g_assert_cmpfloat(second, >, first);
	g_assert_cmpfloat(second, >=, killed - 0.001);
	g_assert_cmpint(sim_stop(&p, SIGTERM, 10000), ==, 0);
	sim_clear(&p);
}

static gint64
last_request_ms(const struct sim_proc *p)
{
	json_t *st = sim_engine_stats(p, 0);
	json_t *v = json_object_get(st, "last_request_unix_ms");
	gint64 ms;

	g_assert_true(json_is_integer(v));
	ms = json_integer_value(v);
	json_decref(st);
	return ms;
}

/* Send one request and check that last_request_unix_ms became the wall
 * clock of its arrival (or stayed put when moves is false). */
static void
expect_last_request(const struct sim_proc *p, const char *method, const char *path,
                    const char *body, long status, gboolean moves)
{
	gint64 was = last_request_ms(p), before, after, now;
	struct sim_reply r;

	/* A later millisecond than the last value, so a move always shows. */
	while (g_get_real_time() / 1000 <= was)
		g_usleep(500);
	before = g_get_real_time() / 1000;
	sim_http(p->ports[0], method, path, body, NULL, 5000, &r);
	after = g_get_real_time() / 1000;
	if (r.status != status)
		g_error("%s %s -> %ld (want %ld): %s", method, path, r.status, status, r.body->str);
	sim_reply_clear(&r);
	now = last_request_ms(p);
	if (!moves) {
		g_assert_cmpint(now, ==, was);
		return;
	}
	g_assert_cmpint(now, >=, before);
	g_assert_cmpint(now, <=, after);
}

/* Issue 10's chaos benchmark measures how long a dead engine kept
 * receiving work: each engine's stats say when its last generation or
 * tokenize request arrived, whatever became of it. */
static void
test_last_request(void)
{
	struct sim_proc p;
	const char *args[] = { "--no-delay", NULL };
	const char *comp = "{\"prompt\":\"a\",\"max_tokens\":2}";

	g_test_summary("/sim/issue10/last-request-time: last_request_unix_ms is the wall clock "
	               "of the last generation or tokenize request, 0 before any");
	g_assert_true(sim_start(&p, args));
	g_assert_cmpint(last_request_ms(&p), ==, 0);
	/* Probes and discovery are not work. */
	expect_last_request(&p, "GET", "/health", NULL, 200, FALSE);
	expect_last_request(&p, "GET", "/metrics", NULL, 200, FALSE);
	expect_last_request(&p, "GET", "/v1/models", NULL, 200, FALSE);
	expect_last_request(&p, "GET", "/v1/completions", NULL, 405, FALSE);
	expect_last_request(&p, "POST", "/v1/completions", comp, 200, TRUE);
	expect_last_request(&p, "POST", "/v1/chat/completions",
	                    "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],"
	                    "\"max_tokens\":1}", 200, TRUE);
	expect_last_request(&p, "POST", "/tokenize", "{\"prompt\":\"a b\"}", 200, TRUE);
	/* An engine answering 503 still received the request. */
	g_assert_cmpint(sim_set_faults(&p, 0, "{\"error_rate\":1}"), ==, 200);
	expect_last_request(&p, "POST", "/v1/completions", comp, 503, TRUE);
	g_assert_cmpint(sim_stop(&p, SIGTERM, 10000), ==, 0);
	sim_clear(&p);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	g_test_add_func("/sim/issue3/fault-error-rate", test_error_rate);
	g_test_add_func("/sim/issue3/fault-latency-multiplier", test_latency);
	g_test_add_func("/sim/issue3/fault-hang-before-first-token", test_hang);
	g_test_add_func("/sim/issue3/fault-die-after-tokens", test_die);
	g_test_add_func("/sim/issue3/fault-refuse-connections", test_refuse);
	g_test_add_func("/sim/issue3/fault-health", test_health);
	g_test_add_func("/sim/issue3/fault-kv-lease", test_short_lease);
	g_test_add_func("/sim/issue3/admin-api", test_admin);
	g_test_add_func("/sim/issue3/flags", test_bad_flags);
	g_test_add_func("/sim/issue10/fault-expired-lease", test_expired_lease);
	g_test_add_func("/sim/issue10/restart-start-time", test_restart_start_time);
	g_test_add_func("/sim/issue10/last-request-time", test_last_request);
	int status = g_test_run();
	curl_global_cleanup();
	return status;
}
