/*
 * narwhal-check (docs/check.md; spec 4.2 and 6; issue 10 "narwhal-check")
 * as an operator runs it: a real subprocess against narwhal-sim fleets on
 * loopback ephemeral ports. A healthy fleet passes; a broken handoff, a
 * handoff p99 above an engine's kv_lease_s and an engine that does not
 * release an abandoned handoff each fail with their reason; usage and
 * configuration errors exit 2. The sims run at time scale 20 so that
 * leases of 20 model seconds lapse after 1 s of wall time.
 */
#include "build-config.h"

#include <signal.h>
#include <string.h>

#include <glib/gstdio.h>

#include "integration/sim-client.h"

/* A whole run of narwhal-check is bounded by this. */
#define RUN_TIMEOUT_S 60

static const char *
check_bin(void)
{
	const char *bin = g_getenv("NARWHAL_CHECK_BIN");

	g_assert_nonnull(bin);
	return bin;
}

/* Run narwhal-check with these arguments (NULL-terminated), bounded. */
static void
run_check(const char *const *args, struct tool_run *r)
{
	tool_run(check_bin(), "narwhal-check", args, RUN_TIMEOUT_S, r);
}

/* A simulated fleet and a configuration file for it. */
struct fleet {
	struct sim_proc sim;
	char *dir;
	char *config;
};

/* Start narwhal-sim with two engines at time scale 20 (plus extra
 * arguments) and write a configuration with its fleet, every kv_lease_s
 * set to lease_s (wall seconds), merged with extra_json (may be NULL).
 * FALSE (skipped) when narwhal-sim is not built. */
static gboolean
fleet_start(struct fleet *f, const char *const *extra, double lease_s, const char *extra_json)
{
	g_autofree char *bin = sim_bin();
	g_autoptr(GPtrArray) args = g_ptr_array_new();
	json_t *engines, *cfg;
	GError *error = NULL;

	memset(f, 0, sizeof *f);
	if (!g_file_test(bin, G_FILE_TEST_IS_EXECUTABLE)) {
		g_test_skip("narwhal-sim is not built");
		return FALSE;
	}
	g_ptr_array_add(args, "--engines");
	g_ptr_array_add(args, "2");
	g_ptr_array_add(args, "--time-scale");
	g_ptr_array_add(args, "20");
	for (const char *const *a = extra; a && *a; a++)
		g_ptr_array_add(args, (gpointer)*a);
	g_ptr_array_add(args, NULL);
	g_assert_true(sim_start(&f->sim, (const char *const *)args->pdata));
	engines = json_object_get(f->sim.fleet, "engines");
	for (size_t i = 0; i < json_array_size(engines); i++)
		json_object_set_new(json_array_get(engines, i), "kv_lease_s", json_real(lease_s));
	cfg = json_pack("{s:O}", "fleet", f->sim.fleet);
	if (extra_json != NULL) {
		json_t *extra_cfg = sim_json(extra_json);
		const char *key;
		json_t *v;

		json_object_foreach(extra_cfg, key, v) {
			if (json_is_object(json_object_get(cfg, key)))
				json_object_update(json_object_get(cfg, key), v);
			else
				json_object_set(cfg, key, v);
		}
		json_decref(extra_cfg);
	}
	f->dir = g_dir_make_tmp("narwhal-check-test-XXXXXX", &error);
	g_assert_no_error(error);
	f->config = g_build_filename(f->dir, "narwhal.json", NULL);
	g_assert_cmpint(json_dump_file(cfg, f->config, JSON_INDENT(1)), ==, 0);
	json_decref(cfg);
	return TRUE;
}

static void
fleet_set_lease(struct fleet *f, unsigned engine, double lease_s)
{
	json_t *cfg = json_load_file(f->config, 0, NULL);

	json_object_set_new(json_array_get(json_object_get(json_object_get(cfg, "fleet"),
	                                                   "engines"), engine),
	                    "kv_lease_s", json_real(lease_s));
	g_assert_cmpint(json_dump_file(cfg, f->config, JSON_INDENT(1)), ==, 0);
	json_decref(cfg);
}

static void
fleet_clear(struct fleet *f)
{
	g_assert_cmpint(sim_stop(&f->sim, SIGTERM, 10000), ==, 0);
	sim_clear(&f->sim);
	g_unlink(f->config);
	g_rmdir(f->dir);
	g_free(f->config);
	g_free(f->dir);
}

/* The record of a check on a subject ("sim-0", or "sim-0 -> sim-1"). */
static json_t *
find_check(const struct tool_run *r, const char *check, const char *subject)
{
	json_t *checks = json_object_get(r->doc, "checks");
	size_t i;
	json_t *c;

	g_assert_true(json_is_array(checks));
	json_array_foreach(checks, i, c) {
		const char *engine = json_string_value(json_object_get(c, "engine"));
		g_autofree char *pair = g_strdup_printf("%s -> %s",
		                                        json_string_value(json_object_get(c, "prefill")),
		                                        json_string_value(json_object_get(c, "decode")));

		if (strcmp(json_string_value(json_object_get(c, "check")), check) == 0 &&
		    (g_strcmp0(engine, subject) == 0 || strcmp(pair, subject) == 0))
			return c;
	}
	g_error("no %s check of %s in:\n%s", check, subject, r->out);
	return NULL;
}

static void
assert_verdict(const struct tool_run *r, const char *check, const char *subject, const char *verdict,
               const char *reason_part)
{
	json_t *c = find_check(r, check, subject);
	const char *got = json_string_value(json_object_get(c, "verdict"));
	const char *reason = json_string_value(json_object_get(c, "reason"));

	if (strcmp(got, verdict) != 0 || (reason_part != NULL && strstr(reason, reason_part) == NULL))
		g_error("%s %s: want %s (\"%s\"), got %s: %s", check, subject, verdict,
		        reason_part ? reason_part : "", got, reason);
}

static json_int_t
summary(const struct tool_run *r, const char *verdict)
{
	return json_integer_value(json_object_get(json_object_get(r->doc, "summary"), verdict));
}

/* Issue 10: a healthy simulated fleet passes every check: health,
 * model, tokenise, both crossed pairs with real handoffs under
 * engine.first_token_timeout_s, and the lease release (spec 4.2). */
static void
test_healthy_fleet(void)
{
	const char *const sim_args[] = { "--kv-lease-duration", "20", NULL };
	struct fleet f;
	struct tool_run r;

	g_test_summary("/check/issue10/healthy-fleet: every check of a healthy simulated fleet "
	               "passes and narwhal-check exits 0, with timings in the JSON");
	if (!fleet_start(&f, sim_args, 1.0, NULL))
		return;
	{
		const char *const args[] = { "--json", "--samples", "3", f.config, NULL };

		run_check(args, &r);
	}
	g_assert_cmpint(r.status, ==, 0);
	g_assert_nonnull(r.doc);
	g_assert_cmpstr(json_string_value(json_object_get(r.doc, "verdict")), ==, "pass");
	g_assert_cmpint(summary(&r, "pass"), ==, 10);
	g_assert_cmpint(summary(&r, "fail") + summary(&r, "warn") + summary(&r, "skip"), ==, 0);
	for (unsigned i = 0; i < 2; i++) {
		const char *id = i == 0 ? "sim-0" : "sim-1";

		assert_verdict(&r, "health", id, "pass", NULL);
		assert_verdict(&r, "model", id, "pass", "opt-13b-a100");
		assert_verdict(&r, "tokenize", id, "pass", NULL);
		assert_verdict(&r, "lease", id, "pass", "released the abandoned handoff");
	}
	{
		json_t *m = json_object_get(find_check(&r, "handoff", "sim-0 -> sim-1"),
		                            "measurements");
		json_t *held = json_object_get(json_object_get(find_check(&r, "lease", "sim-0"),
		                                               "measurements"), "kv_usage_held");

		assert_verdict(&r, "handoff", "sim-1 -> sim-0", "pass", NULL);
		g_assert_cmpint(json_integer_value(json_object_get(m, "completed")), ==, 3);
		g_assert_cmpfloat(json_number_value(json_object_get(json_object_get(m, "first_token_s"),
		                                                    "p99")), >, 0.0);
		g_assert_cmpfloat(json_number_value(json_object_get(json_object_get(m, "handoff_s"),
		                                                    "p99")), <, 1.0);
		g_assert_cmpfloat(json_number_value(held), >, 0.0);
	}
	tool_run_clear(&r);
	/* The readable report: a line per check, then the summary. */
	{
		const char *const args[] = { "--samples", "1", "--no-lease-check", f.config, NULL };

		run_check(args, &r);
	}
	g_assert_cmpint(r.status, ==, 0);
	g_assert_nonnull(strstr(r.out, "\nPASS  handoff   sim-0 -> sim-1 "));
	g_assert_nonnull(strstr(r.out, "\nPASS: 8 checks: 8 pass, 0 warn, 0 fail, 0 skip"));
	/* Not a terminal: no progress line. */
	g_assert_null(strstr(r.err, "\r"));
	tool_run_clear(&r);
	fleet_clear(&f);
}

/* Issue 10: a broken handoff fails its pair with the stage and the
 * engine's answer; an engine that refuses connections fails its health
 * check and its pairs are skipped with the reason. */
static void
test_broken_handoff(void)
{
	struct fleet f;
	struct tool_run r;

	g_test_summary("/check/issue10/broken-handoff: a decode engine answering 503 fails both "
	               "pairs with stage and status; a refusing engine fails health");
	if (!fleet_start(&f, NULL, 1.0, NULL))
		return;
	g_assert_cmpint(sim_set_faults(&f.sim, 1, "{\"error_rate\": 1.0}"), ==, 200);
	{
		const char *const args[] = { "--json", "--samples", "2", "--no-lease-check", f.config,
		                             NULL };

		run_check(args, &r);
	}
	g_assert_cmpint(r.status, ==, 1);
	g_assert_cmpstr(json_string_value(json_object_get(r.doc, "verdict")), ==, "fail");
	assert_verdict(&r, "health", "sim-1", "pass", NULL);
	assert_verdict(&r, "handoff", "sim-0 -> sim-1", "fail",
	               "sample 1 of 2 failed at stage decode: sim-1 answered HTTP 503");
	assert_verdict(&r, "handoff", "sim-1 -> sim-0", "fail",
	               "failed at stage prefill: sim-1 answered HTTP 503");
	{
		json_t *failure = json_object_get(json_object_get(find_check(&r, "handoff",
		                                  "sim-0 -> sim-1"), "measurements"), "failure");

		g_assert_cmpstr(json_string_value(json_object_get(failure, "stage")), ==, "decode");
		g_assert_cmpint(json_integer_value(json_object_get(failure, "status")), ==, 503);
	}
	tool_run_clear(&r);

	g_assert_cmpint(sim_set_faults(&f.sim, 1, "{\"error_rate\": 0, "
	                               "\"refuse_connections\": true}"), ==, 200);
	{
		const char *const args[] = { "--json", "--samples", "1", f.config, NULL };

		run_check(args, &r);
	}
	g_assert_cmpint(r.status, ==, 1);
	assert_verdict(&r, "health", "sim-0", "pass", NULL);
	assert_verdict(&r, "health", "sim-1", "fail", "Failed to connect");
	assert_verdict(&r, "model", "sim-1", "skip", "health check failed");
	assert_verdict(&r, "handoff", "sim-0 -> sim-1", "skip", "sim-1's health check failed");
	assert_verdict(&r, "lease", "sim-1", "skip", "health check failed");
	tool_run_clear(&r);
	fleet_clear(&f);
}

/* Spec 4.2 and 6: a handoff that lives longer than the producer's
 * kv_lease_s fails its pair with that reason (here the configured lease
 * of sim-0 is far below a handoff slowed fivefold). */
static void
test_handoff_above_lease(void)
{
	struct fleet f;
	struct tool_run r;

	g_test_summary("/check/issue10/handoff-above-lease: a handoff p99 above the prefill "
	               "engine's kv_lease_s fails that pair with the reason");
	if (!fleet_start(&f, NULL, 1.0, NULL))
		return;
	fleet_set_lease(&f, 0, 0.001);
	g_assert_cmpint(sim_set_faults(&f.sim, 0, "{\"latency_multiplier\": 5}"), ==, 200);
	g_assert_cmpint(sim_set_faults(&f.sim, 1, "{\"latency_multiplier\": 5}"), ==, 200);
	{
		const char *const args[] = { "--json", "--samples", "2", "--no-lease-check", f.config,
		                             NULL };

		run_check(args, &r);
	}
	g_assert_cmpint(r.status, ==, 1);
	assert_verdict(&r, "handoff", "sim-0 -> sim-1", "fail",
	               "exceeds sim-0's kv_lease_s (0.001 s)");
	/* sim-1's lease (1 s) is long enough. */
	assert_verdict(&r, "handoff", "sim-1 -> sim-0", "pass", NULL);
	tool_run_clear(&r);
	fleet_clear(&f);
}

/* Spec 4.2: "verify separately that abandoned handoffs are released by
 * the backend when the lease expires". The engines hold KV for 10 s of
 * wall time (200 model seconds), the configuration says 0.5 s. */
static void
test_lease_not_released(void)
{
	const char *const sim_args[] = { "--kv-lease-duration", "200", NULL };
	struct fleet f;
	struct tool_run r;

	g_test_summary("/check/issue10/lease-not-released: an engine that keeps an abandoned "
	               "handoff past its configured kv_lease_s fails the lease check");
	if (!fleet_start(&f, sim_args, 0.5, NULL))
		return;
	{
		const char *const args[] = { "--json", "--samples", "1", f.config, NULL };

		run_check(args, &r);
	}
	g_assert_cmpint(r.status, ==, 1);
	assert_verdict(&r, "handoff", "sim-0 -> sim-1", "pass", NULL);
	assert_verdict(&r, "lease", "sim-0", "fail",
	               "the engine did not release an abandoned handoff within its lease");
	assert_verdict(&r, "lease", "sim-1", "fail", NULL);
	tool_run_clear(&r);
	/* A lease longer than the wait allowed is skipped, not failed. */
	{
		const char *const args[] = { "--json", "--samples", "1", "--lease-wait-s", "1",
		                             f.config, NULL };

		run_check(args, &r);
	}
	g_assert_cmpint(r.status, ==, 0);
	assert_verdict(&r, "lease", "sim-0", "skip", "raise --lease-wait-s");
	tool_run_clear(&r);
	fleet_clear(&f);
}

/* Spec 4.2: "Set serving.handoff_timeout_s below the producer's KV lease".
 * The engines release after 1 s of wall time (20 model seconds) while the
 * configuration lets a handoff wait 3 s for its decode leg: the lease
 * check fails with that reason. */
static void
test_lease_below_handoff_timeout(void)
{
	const char *const sim_args[] = { "--kv-lease-duration", "20", NULL };
	struct fleet f;
	struct tool_run r;

	g_test_summary("/check/issue10/lease-below-handoff-timeout: an engine that releases an "
	               "abandoned handoff before serving.handoff_timeout_s fails the lease check");
	if (!fleet_start(&f, sim_args, 4.0, "{\"serving\":{\"handoff_timeout_s\":3}}"))
		return;
	{
		const char *const args[] = { "--json", "--samples", "1", f.config, NULL };

		run_check(args, &r);
	}
	g_assert_cmpint(r.status, ==, 1);
	assert_verdict(&r, "lease", "sim-0", "fail", "before serving.handoff_timeout_s");
	tool_run_clear(&r);
	fleet_clear(&f);
}

/* Engines must serve the configured model. */
static void
test_model_mismatch(void)
{
	struct fleet f;
	struct tool_run r;

	g_test_summary("/check/issue10/model-mismatch: engines that do not serve fleet.model fail "
	               "their model check");
	if (!fleet_start(&f, NULL, 1.0, "{\"fleet\": {\"model\": \"another-model\"}}"))
		return;
	{
		const char *const args[] = { "--json", "--samples", "1", "--no-lease-check", f.config,
		                             NULL };

		run_check(args, &r);
	}
	g_assert_cmpint(r.status, ==, 1);
	assert_verdict(&r, "model", "sim-0", "fail", "but fleet.model is \"another-model\"");
	tool_run_clear(&r);
	fleet_clear(&f);
}

/* Exit status 2 for usage and configuration errors, with the message in
 * the form narwhal --check-config uses. */
static void
test_usage_errors(void)
{
	g_autofree char *dir = g_dir_make_tmp("narwhal-check-usage-XXXXXX", NULL);
	g_autofree char *bad = g_build_filename(dir, "bad.json", NULL);
	g_autofree char *nodialect = g_build_filename(dir, "nodialect.json", NULL);
	struct tool_run r;

	g_test_summary("/check/issue10/usage-errors: usage and configuration errors exit 2 with "
	               "a message");
	g_assert_true(g_file_set_contents(bad, "{\"serving\": {\"max_attempts\": \"three\"}, "
	                                  "\"fleet\": {\"engines\": [{\"id\": \"a\", \"url\": "
	                                  "\"http://127.0.0.1:1\"}]}}", -1, NULL));
	g_assert_true(g_file_set_contents(nodialect, "{\"fleet\": {\"engines\": [{\"id\": \"a\", "
	                                  "\"url\": \"http://127.0.0.1:1\", \"dialect\": "
	                                  "\"nosuch\"}]}}", -1, NULL));
	{
		const char *const args[] = { NULL };

		run_check(args, &r);
		g_assert_cmpint(r.status, ==, 2);
		g_assert_nonnull(strstr(r.err, "give one configuration file"));
		tool_run_clear(&r);
	}
	{
		const char *const args[] = { "--samples", "0", bad, NULL };

		run_check(args, &r);
		g_assert_cmpint(r.status, ==, 2);
		g_assert_nonnull(strstr(r.err, "--samples"));
		tool_run_clear(&r);
	}
	{
		const char *const args[] = { "--no-such-option", bad, NULL };

		run_check(args, &r);
		g_assert_cmpint(r.status, ==, 2);
		tool_run_clear(&r);
	}
	{
		const char *const args[] = { bad, NULL };
		g_autofree char *want = g_strdup_printf("%s: serving.max_attempts: ", bad);

		run_check(args, &r);
		g_assert_cmpint(r.status, ==, 2);
		g_assert_nonnull(strstr(r.err, want));
		tool_run_clear(&r);
	}
	{
		const char *const args[] = { nodialect, NULL };
		g_autofree char *want = g_strdup_printf("%s: plugins.dialects.nosuch: ", nodialect);

		run_check(args, &r);
		g_assert_cmpint(r.status, ==, 2);
		g_assert_nonnull(strstr(r.err, want));
		tool_run_clear(&r);
	}
	{
		g_autofree char *missing = g_build_filename(dir, "missing.json", NULL);
		const char *const args[] = { missing, NULL };

		run_check(args, &r);
		g_assert_cmpint(r.status, ==, 2);
		g_assert_nonnull(strstr(r.err, missing));
		tool_run_clear(&r);
	}
	g_unlink(bad);
	g_unlink(nodialect);
	g_rmdir(dir);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/check/issue10/healthy-fleet", test_healthy_fleet);
	g_test_add_func("/check/issue10/broken-handoff", test_broken_handoff);
	g_test_add_func("/check/issue10/handoff-above-lease", test_handoff_above_lease);
	g_test_add_func("/check/issue10/lease-not-released", test_lease_not_released);
	g_test_add_func("/check/issue10/lease-below-handoff-timeout",
	                test_lease_below_handoff_timeout);
	g_test_add_func("/check/issue10/model-mismatch", test_model_mismatch);
	g_test_add_func("/check/issue10/usage-errors", test_usage_errors);
	return g_test_run();
}
