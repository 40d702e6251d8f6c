/* The rotate placement plugin against Narwhal's plugin test kit: the
 * plugin's source is linked in and driven through its descriptor. */
#include <narwhal/plugin-test.h>

#include <errno.h>
#include <string.h>

struct scene {
	struct narwhal_mock_host *mh;
	struct narwhal_test_fleet *fleet;
	const struct narwhal_placement_ops *ops;
	void *inst;
};

/* Three prefill engines and a decode engine; config from the test data. */
static void
scene_setup(struct scene *s, gconstpointer config_json)
{
	const struct narwhal_plugin_descriptor *d = narwhal_plugin_entry();
	json_t *config = config_json != NULL ? json_loads(config_json, 0, NULL) : NULL;
	char err[NARWHAL_ERROR_MAX] = "";

	g_assert_cmpuint(d->kind, ==, NARWHAL_KIND_PLACEMENT);
	g_assert_cmpstr(d->name, ==, "rotate");
	s->ops = d->ops;
	s->mh = narwhal_mock_host_new();
	s->fleet = narwhal_test_fleet_new(1.0, 0.05);
	narwhal_test_fleet_add(s->fleet, "p0", NARWHAL_ROLE_PREFILL);
	narwhal_test_fleet_add(s->fleet, "p1", NARWHAL_ROLE_PREFILL);
	narwhal_test_fleet_add(s->fleet, "p2", NARWHAL_ROLE_PREFILL);
	narwhal_test_fleet_add(s->fleet, "d0", NARWHAL_ROLE_DECODE);
	narwhal_mock_host_set_fleet(s->mh, narwhal_test_fleet_view(s->fleet));
	if (s->ops->create(narwhal_mock_host_table(s->mh), config, &s->inst, err, sizeof err) != 0)
		g_error("create refused %s: %s", (const char *)config_json, err);
	json_decref(config); /* borrowed: the plugin must not keep it */
}

static void
scene_teardown(struct scene *s, gconstpointer unused)
{
	(void)unused;
	s->ops->destroy(s->inst);
	narwhal_test_fleet_free(s->fleet);
	narwhal_mock_host_free(s->mh);
}

static uint32_t
place(struct scene *s, narwhal_phase phase, narwhal_role role)
{
	struct narwhal_placement_request req = { .struct_size = sizeof req, .request = 1,
		                                 .request_id = "t", .phase = phase,
		                                 .paired_engine = -1 };
	struct narwhal_placement_result out = { .struct_size = sizeof out, .engine = UINT32_MAX };

	req.eligible = narwhal_test_fleet_eligible(s->fleet, role, &req.n_eligible);
	g_assert_cmpint(s->ops->place(s->inst, &req, &out), ==, 0);
	return out.engine;
}

/* Prefills go round the prefill engines; decodes keep a turn of their own. */
static void
test_turns(struct scene *s, gconstpointer unused)
{
	(void)unused;
	g_assert_cmpuint(place(s, NARWHAL_PHASE_PREFILL, NARWHAL_ROLE_PREFILL), ==, 0);
	g_assert_cmpuint(place(s, NARWHAL_PHASE_PREFILL, NARWHAL_ROLE_PREFILL), ==, 1);
	g_assert_cmpuint(place(s, NARWHAL_PHASE_DECODE, NARWHAL_ROLE_DECODE), ==, 3);
	g_assert_cmpuint(place(s, NARWHAL_PHASE_PREFILL, NARWHAL_ROLE_PREFILL), ==, 2);
	g_assert_cmpuint(place(s, NARWHAL_PHASE_PREFILL, NARWHAL_ROLE_PREFILL), ==, 0);
	/* It never reads the clock and never logs. */
	g_assert_cmpuint(narwhal_mock_host_clock_reads(s->mh), ==, 0);
	g_assert_cmpuint(narwhal_mock_host_n_logs(s->mh), ==, 0);
}

/* With skip_busy 2, a busy engine's turn passes, unless all are busy. */
static void
test_skip_busy(struct scene *s, gconstpointer unused)
{
	(void)unused;
	narwhal_test_fleet_engine(s->fleet, 0)->resident_prefill = 2;
	g_assert_cmpuint(place(s, NARWHAL_PHASE_PREFILL, NARWHAL_ROLE_PREFILL), ==, 1);
	g_assert_cmpuint(place(s, NARWHAL_PHASE_PREFILL, NARWHAL_ROLE_PREFILL), ==, 2);
	g_assert_cmpuint(place(s, NARWHAL_PHASE_PREFILL, NARWHAL_ROLE_PREFILL), ==, 1);
	narwhal_test_fleet_engine(s->fleet, 1)->resident_prefill = 5;
	narwhal_test_fleet_engine(s->fleet, 2)->resident_prefill = 9;
	g_assert_cmpuint(place(s, NARWHAL_PHASE_PREFILL, NARWHAL_ROLE_PREFILL), ==, 2);
}

/* Bad settings are refused with a reason that names them. */
static void
test_bad_config(void)
{
	static const char *const bad[][2] = {
		{ "{\"depth\": 1}", "\"depth\"" },
		{ "{\"skip_busy\": 0}", "skip_busy" },
		{ "{\"skip_busy\": \"2\"}", "skip_busy" },
		{ "[1]", "object" },
	};
	struct narwhal_mock_host *mh = narwhal_mock_host_new();
	const struct narwhal_placement_ops *ops = narwhal_plugin_entry()->ops;

	for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
		json_t *config = json_loads(bad[i][0], JSON_DECODE_ANY, NULL);
		char err[NARWHAL_ERROR_MAX] = "";
		void *inst = NULL;

		g_assert_cmpint(ops->create(narwhal_mock_host_table(mh), config, &inst, err,
		                            sizeof err), ==, -EINVAL);
		g_assert_nonnull(strstr(err, bad[i][1]));
		json_decref(config);
	}
	narwhal_mock_host_free(mh);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add("/rotate/turns", struct scene, NULL, scene_setup, test_turns, scene_teardown);
	g_test_add("/rotate/skip-busy", struct scene, "{\"skip_busy\": 2}", scene_setup,
	           test_skip_busy, scene_teardown);
	g_test_add_func("/rotate/bad-config", test_bad_config);
	return g_test_run();
}
