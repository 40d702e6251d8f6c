/*
 * The "static" controller in isolation: the built .so, loaded by the real
 * loader, driven against the mock host with canned controller inputs.
 */
#include "build-config.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "plugins/harness.h"

static struct nw_harness *
static_with(const char *config_json)
{
	struct nw_harness *h = nw_harness_new(NARWHAL_KIND_CONTROLLER, "static");
	g_autoptr(GError) error = NULL;

	if (h == NULL)
		return NULL;
	g_assert_true(nw_harness_create(h, config_json, &error));
	g_assert_no_error(error);
	return h;
}

static struct narwhal_controller_proposal
propose(struct nw_harness *h, const struct narwhal_controller_input *in)
{
	/* Poisoned, so a field the plugin forgets shows up. */
	struct narwhal_controller_proposal out = {
		.struct_size = sizeof out,
		.prefill = 777,
		.decode = 777,
		.worst_slo_ratio = -1.0,
		.reason = NULL,
	};

	g_assert_cmpint(nw_harness_ops(h)->controller.propose(nw_harness_ctx(h), in, &out), ==, 0);
	g_assert_cmpuint(out.struct_size, ==, sizeof out);
	g_assert_cmpstr(out.reason, ==, "static");
	g_assert_true(isnan(out.worst_slo_ratio));
	return out;
}

static void
test_descriptor(void)
{
	struct nw_harness *h = nw_harness_new(NARWHAL_KIND_CONTROLLER, "static");

	if (h == NULL)
		return;
	g_assert_cmpstr(h->plugin->desc->name, ==, "static");
	g_assert_cmpuint(h->plugin->desc->abi_major, ==, NARWHAL_ABI_MAJOR);
	g_assert_nonnull(h->plugin->ops.controller.propose);
	nw_harness_free(h);
}

/* Whatever the loads, demand and evidence say, the live split stands. */
static void
test_proposes_live_split(void)
{
	struct nw_harness *h = static_with(NULL);
	/* The kit's scripted fleet, as plugin authors build theirs. */
	struct narwhal_test_fleet *fleet = narwhal_test_fleet_new(1.0, 0.05);
	struct narwhal_controller_input in = {
		.struct_size = sizeof in,
		.now_ns = 5 * G_GINT64_CONSTANT(1000000000),
		.live_prefill = 1,
		.live_decode = 2,
		.prefill_load = 3.0,   /* badly overloaded */
		.decode_load = 0.1,
		.demand_short = 40.0,
		.demand_long = 10.0,
		.evidence_closed = true,
		.urgent = true,
	};
	struct narwhal_controller_proposal out;

	if (h == NULL) {
		narwhal_test_fleet_free(fleet);
		return;
	}
	narwhal_test_fleet_add(fleet, "p0", NARWHAL_ROLE_PREFILL)->prefill_load = 3.0;
	narwhal_test_fleet_add(fleet, "d0", NARWHAL_ROLE_DECODE)->decode_load = 0.1;
	narwhal_test_fleet_add(fleet, "d1", NARWHAL_ROLE_DECODE)->decode_load = 0.1;
	in.fleet = narwhal_test_fleet_view(fleet);
	narwhal_mock_host_set_fleet(h->host, in.fleet);
	out = propose(h, &in);
	g_assert_cmpuint(out.prefill, ==, 1);
	g_assert_cmpuint(out.decode, ==, 2);

	in.live_prefill = 6;
	in.live_decode = 0;
	in.prefill_load = NAN;
	in.decode_load = NAN;
	in.urgent = false;
	out = propose(h, &in);
	g_assert_cmpuint(out.prefill, ==, 6);
	g_assert_cmpuint(out.decode, ==, 0);

	in.live_prefill = 0;
	in.live_decode = 0;
	in.fleet = NULL;
	out = propose(h, &in);
	g_assert_cmpuint(out.prefill, ==, 0);
	g_assert_cmpuint(out.decode, ==, 0);

	/* Policy from the input alone: no clock, fleet or estimator calls, no
	 * log lines. */
	g_assert_cmpuint(narwhal_mock_host_clock_reads(h->host), ==, 0);
	g_assert_cmpuint(narwhal_mock_host_fleet_reads(h->host), ==, 0);
	for (guint i = 0; i < NARWHAL_MOCK_N_ESTIMATORS; i++)
		g_assert_cmpuint(narwhal_mock_host_estimate_calls(h->host, i), ==, 0);
	g_assert_cmpuint(narwhal_mock_host_n_logs(h->host), ==, 0);
	nw_harness_free(h);
	narwhal_test_fleet_free(fleet);
}

/* What the host hands every controller plugin (docs/plugins.md, "Its
 * settings"): controller.reactive and controller.thresholds, accepted and
 * ignored, whatever they hold. */
static void
test_accepted_configs(void)
{
	const char *const configs[] = {
		NULL, "{}", "null",
		"{\"reactive\": {\"step_s\": 5.0, \"confirmations\": 2},"
		" \"thresholds\": {\"expand\": 1.0, \"shrink\": 0.5}}",
		"{\"thresholds\": {}}",
	};

	for (size_t i = 0; i < G_N_ELEMENTS(configs); i++) {
		struct nw_harness *h = static_with(configs[i]);

		if (h == NULL)
			return;
		nw_harness_free(h);
	}
}

static void
test_bad_arguments(void)
{
	struct nw_harness *h = static_with(NULL);
	struct narwhal_controller_input in = { .struct_size = sizeof in };
	struct narwhal_controller_proposal out = { .struct_size = sizeof out };

	if (h == NULL)
		return;
	g_assert_cmpint(h->plugin->ops.controller.propose(h->inst->ctx, NULL, &out), ==, -EINVAL);
	g_assert_cmpint(h->plugin->ops.controller.propose(h->inst->ctx, &in, NULL), ==, -EINVAL);
	nw_harness_free(h);
}

static void
expect_config_error(const char *config_json, const char *reason)
{
	nw_harness_expect_config_error(NARWHAL_KIND_CONTROLLER, "static", config_json, reason);
}

static void
test_config_errors(void)
{
	expect_config_error("{\"dwell_s\": 10}",
	                    "unknown key \"dwell_s\": the static controller takes no options");
	expect_config_error("{\"prefill\": 2, \"decode\": 2}", "unknown key \"");
	/* Beside the host's keys, another is still refused. */
	expect_config_error("{\"reactive\": {}, \"thresholds\": {}, \"react\": {}}",
	                    "unknown key \"react\": the static controller takes no options");
	expect_config_error("[]", "config must be an object");
	expect_config_error("\"static\"", "config must be an object");
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);

	g_test_add_func("/controller-static/descriptor", test_descriptor);
	g_test_add_func("/controller-static/live-split", test_proposes_live_split);
	g_test_add_func("/controller-static/accepted-configs", test_accepted_configs);
	g_test_add_func("/controller-static/bad-arguments", test_bad_arguments);
	g_test_add_func("/controller-static/config-errors", test_config_errors);
	return g_test_run();
}
