/*
 * The "open" admission policy in isolation: the built .so, loaded by the
 * real loader, driven against the mock host with canned requests.
 */
#include "build-config.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "plugins/harness.h"

static struct nw_harness *
open_with(const char *config_json)
{
	struct nw_harness *h = nw_harness_new(NARWHAL_KIND_ADMISSION, "open");
	g_autoptr(GError) error = NULL;

	if (h == NULL)
		return NULL;
	g_assert_true(nw_harness_create(h, config_json, &error));
	g_assert_no_error(error);
	return h;
}

/* A request with the given counts; the sizing fields do not matter to open. */
static struct narwhal_admission_request
request(uint32_t admitted, uint32_t limit, uint32_t queued, uint32_t capacity)
{
	struct narwhal_admission_request req = {
		.struct_size = sizeof req,
		.request_id = "req-1",
		.prompt_tokens = 512,
		.prompt_tokens_exact = true,
		.max_tokens = 64,
		.arrival_ns = 0,
		.deadline_ns = 30 * G_GINT64_CONSTANT(1000000000),
		.admitted = admitted,
		.admitted_limit = limit,
		.queued = queued,
		.queue_capacity = capacity,
	};
	return req;
}

static struct narwhal_admission_decision
decide(struct nw_harness *h, const struct narwhal_admission_request *req)
{
	/* Poison the output so a field the plugin forgets shows up. */
	struct narwhal_admission_decision out = {
		.struct_size = sizeof out,
		.verdict = (narwhal_admission_verdict)99,
		.retry_after_s = -7.0,
		.projected_ttft_s = -7.0,
		.reason = NULL,
	};

	g_assert_cmpint(nw_harness_ops(h)->admission.decide(nw_harness_ctx(h), req, &out), ==, 0);
	g_assert_cmpuint(out.struct_size, ==, sizeof out);
	g_assert_true(isnan(out.projected_ttft_s));
	g_assert_nonnull(out.reason);
	return out;
}

static void
test_descriptor(void)
{
	struct nw_harness *h = nw_harness_new(NARWHAL_KIND_ADMISSION, "open");

	if (h == NULL)
		return;
	g_assert_cmpstr(h->plugin->desc->name, ==, "open");
	g_assert_cmpuint(h->plugin->desc->abi_major, ==, NARWHAL_ABI_MAJOR);
	g_assert_cmpuint(h->plugin->desc->abi_minor, ==, NARWHAL_ABI_MINOR);
	g_assert_nonnull(h->plugin->ops.admission.decide);
	/* The host's counts are its ledger: no finished callback. */
	g_assert_null(h->plugin->ops.admission.finished);
	nw_harness_free(h);
}

static void
test_admits_below_limit(void)
{
	struct nw_harness *h = open_with(NULL);
	struct narwhal_admission_request req;
	struct narwhal_admission_decision out;

	if (h == NULL)
		return;
	req = request(0, 4, 0, 0);
	out = decide(h, &req);
	g_assert_cmpint(out.verdict, ==, NARWHAL_ADMIT);
	g_assert_cmpstr(out.reason, ==, "open");
	g_assert_cmpfloat(out.retry_after_s, ==, 0.0);

	req = request(3, 4, 2, 2); /* last free slot, even with a full queue */
	out = decide(h, &req);
	g_assert_cmpint(out.verdict, ==, NARWHAL_ADMIT);
	nw_harness_free(h);
}

/* Open never prices prompts, so it never answers "too long". */
static void
test_never_too_long(void)
{
	struct nw_harness *h = open_with("{}");
	struct narwhal_admission_request req;
	struct narwhal_admission_decision out;

	if (h == NULL)
		return;
	req = request(0, 1, 0, 0);
	req.prompt_tokens = UINT64_MAX;
	req.prompt_tokens_exact = false;
	out = decide(h, &req);
	g_assert_cmpint(out.verdict, ==, NARWHAL_ADMIT);

	req = request(1, 1, 0, 0);
	req.prompt_tokens = UINT64_MAX;
	out = decide(h, &req);
	g_assert_cmpint(out.verdict, !=, NARWHAL_REFUSE_TOO_LONG);
	nw_harness_free(h);
}

static void
test_queues_at_limit(void)
{
	struct nw_harness *h = open_with(NULL);
	struct narwhal_admission_request req;
	struct narwhal_admission_decision out;

	if (h == NULL)
		return;
	req = request(4, 4, 0, 2);
	out = decide(h, &req);
	g_assert_cmpint(out.verdict, ==, NARWHAL_ADMIT_QUEUE);
	g_assert_cmpstr(out.reason, ==, "queued");

	req = request(4, 4, 1, 2);
	out = decide(h, &req);
	g_assert_cmpint(out.verdict, ==, NARWHAL_ADMIT_QUEUE);
	g_assert_true(isnan(narwhal_mock_host_counter(h->host, "refusals_total")));
	nw_harness_free(h);
}

static void
test_refuses_when_queue_full(void)
{
	struct nw_harness *h = open_with(NULL);
	struct narwhal_admission_request req;
	struct narwhal_admission_decision out;

	if (h == NULL)
		return;
	req = request(4, 4, 2, 2);
	out = decide(h, &req);
	g_assert_cmpint(out.verdict, ==, NARWHAL_REFUSE);
	g_assert_cmpstr(out.reason, ==, "saturated");
	g_assert_cmpfloat(out.retry_after_s, ==, 1.0);
	g_assert_cmpfloat(narwhal_mock_host_counter(h->host, "refusals_total"), ==, 1.0);

	/* queue_capacity 0 refuses at once at saturation. */
	req = request(4, 4, 0, 0);
	out = decide(h, &req);
	g_assert_cmpint(out.verdict, ==, NARWHAL_REFUSE);

	/* A limit lowered under the current count (an override) also refuses. */
	req = request(9, 4, 0, 0);
	out = decide(h, &req);
	g_assert_cmpint(out.verdict, ==, NARWHAL_REFUSE);

	/* A zero limit admits nothing directly; it can still queue. */
	req = request(0, 0, 0, 1);
	out = decide(h, &req);
	g_assert_cmpint(out.verdict, ==, NARWHAL_ADMIT_QUEUE);
	g_assert_cmpfloat(narwhal_mock_host_counter(h->host, "refusals_total"), ==, 3.0);
	nw_harness_free(h);
}

static void
test_retry_after_config(void)
{
	struct nw_harness *h = open_with("{\"retry_after_s\": 2.5}");
	struct nw_harness *whole = open_with("{\"retry_after_s\": 3}");
	struct narwhal_admission_request req = request(1, 1, 0, 0);
	struct narwhal_admission_decision out;

	if (h == NULL || whole == NULL) {
		nw_harness_free(h);
		nw_harness_free(whole);
		return;
	}
	out = decide(h, &req);
	g_assert_cmpint(out.verdict, ==, NARWHAL_REFUSE);
	g_assert_cmpfloat(out.retry_after_s, ==, 2.5);
	g_assert_true(narwhal_mock_host_logged(h->host, NARWHAL_LOG_DEBUG, "retry_after_s=2.5"));

	/* Instances keep their own settings. */
	out = decide(whole, &req);
	g_assert_cmpfloat(out.retry_after_s, ==, 3.0);
	out = decide(h, &req);
	g_assert_cmpfloat(out.retry_after_s, ==, 2.5);
	nw_harness_free(h);
	nw_harness_free(whole);
}

/* The daemon hands every admission plugin serving.admission_margin
 * (docs/configuration.md); open prices nothing, so it takes and ignores it. */
static void
test_ignores_admission_margin(void)
{
	struct nw_harness *h = open_with("{\"admission_margin\": 0.5, \"retry_after_s\": 2}");
	struct narwhal_admission_request req = request(1, 1, 0, 0);
	struct narwhal_admission_decision out;

	if (h == NULL)
		return;
	out = decide(h, &req);
	g_assert_cmpint(out.verdict, ==, NARWHAL_REFUSE);
	g_assert_cmpfloat(out.retry_after_s, ==, 2.0);
	req = request(0, 1, 0, 0);
	g_assert_cmpint(decide(h, &req).verdict, ==, NARWHAL_ADMIT);
	nw_harness_free(h);
}

/* Policy only: the clock, the fleet and the estimators are never consulted. */
static void
test_no_host_calls(void)
{
	struct nw_harness *h = open_with("null");
	struct narwhal_admission_request req;

	if (h == NULL)
		return;
	for (uint32_t admitted = 0; admitted < 6; admitted++) {
		req = request(admitted, 4, 0, 1);
		decide(h, &req);
	}
	g_assert_cmpuint(narwhal_mock_host_clock_reads(h->host), ==, 0);
	g_assert_cmpuint(narwhal_mock_host_fleet_reads(h->host), ==, 0);
	for (guint i = 0; i < NARWHAL_MOCK_N_ESTIMATORS; i++)
		g_assert_cmpuint(narwhal_mock_host_estimate_calls(h->host, i), ==, 0);
	nw_harness_free(h);
}

static void
test_bad_arguments(void)
{
	struct nw_harness *h = open_with(NULL);
	struct narwhal_admission_decision out = { .struct_size = sizeof out };
	struct narwhal_admission_request req = request(0, 1, 0, 0);

	if (h == NULL)
		return;
	g_assert_cmpint(h->plugin->ops.admission.decide(h->inst->ctx, NULL, &out), ==, -EINVAL);
	g_assert_cmpint(h->plugin->ops.admission.decide(h->inst->ctx, &req, NULL), ==, -EINVAL);
	nw_harness_free(h);
}

static void
expect_config_error(const char *config_json, const char *reason)
{
	nw_harness_expect_config_error(NARWHAL_KIND_ADMISSION, "open", config_json, reason);
}

static void
test_config_errors(void)
{
	expect_config_error("{\"retry_after_s\": 0}", "retry_after_s: 0 is out of range");
	expect_config_error("{\"retry_after_s\": -1.5}", "retry_after_s: -1.5 is out of range");
	expect_config_error("{\"retry_after_s\": \"1\"}", "retry_after_s: must be a number");
	expect_config_error("{\"retry_after_s\": null}", "retry_after_s: must be a number");
	expect_config_error("{\"retry_after\": 1}",
	                    "unknown key \"retry_after\": the open policy accepts only "
	                    "retry_after_s");
	expect_config_error("{\"retry_after_s\": 1, \"queue\": true}", "unknown key \"queue\"");
	expect_config_error("[]", "config must be an object");
	expect_config_error("1.0", "config must be an object");
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);

	g_test_add_func("/admission-open/descriptor", test_descriptor);
	g_test_add_func("/admission-open/admit", test_admits_below_limit);
	g_test_add_func("/admission-open/never-too-long", test_never_too_long);
	g_test_add_func("/admission-open/queue", test_queues_at_limit);
	g_test_add_func("/admission-open/refuse", test_refuses_when_queue_full);
	g_test_add_func("/admission-open/retry-after", test_retry_after_config);
	g_test_add_func("/admission-open/ignores-admission-margin", test_ignores_admission_margin);
	g_test_add_func("/admission-open/no-host-calls", test_no_host_calls);
	g_test_add_func("/admission-open/bad-arguments", test_bad_arguments);
	g_test_add_func("/admission-open/config-errors", test_config_errors);
	return g_test_run();
}
