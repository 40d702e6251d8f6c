/* What a reload carries over from the superseded monitor to the new one
 * (src/control/monitor.h, nw_monitor_adopt; issue 11, "Configuration
 * reload": what the router learnt survives a reload, by engine id). The
 * monitors are built and never started: no engine is called. */
#include "build-config.h"

#include <string.h>

#include <glib.h>

#include "control/monitor-internal.h"
#include "core/config.h"
#include "core/host.h"

struct side {
	struct nw_config *cfg;
	struct nw_fleet *fleet;
	struct nw_monitor *m;
	/* Each engine's dialect as the monitor sees it: vLLM's capabilities
	 * (no plugin is called here). */
	struct nw_dialect dialects[8];
};

static void
side_init(struct side *s, const char *engines_json, int64_t now)
{
	g_autofree char *text = g_strdup_printf(
		"{\"serving\": {\"admission\": \"open\"}, \"controller\": {\"policy\": \"static\","
		" \"flip_history\": 8}, \"fleet\": {\"engines\": %s}}", engines_json);
	GPtrArray *problems = NULL;
	struct nw_monitor_options o = { 0 };

	s->cfg = nw_config_load_string(text, "test.json", &problems);
	g_assert_nonnull(s->cfg);
	g_ptr_array_unref(problems);
	s->fleet = nw_fleet_new(s->cfg, now);
	g_assert_cmpuint(s->cfg->fleet.n_engines, <=, G_N_ELEMENTS(s->dialects));
	for (uint32_t i = 0; i < G_N_ELEMENTS(s->dialects); i++)
		s->dialects[i] = (struct nw_dialect){
			.caps = NARWHAL_DIALECT_HANDOFF_SEQUENTIAL | NARWHAL_DIALECT_PER_REQUEST_ROLES,
		};
	o.cfg = s->cfg;
	o.fleet = s->fleet;
	o.dialects = s->dialects;
	s->m = nw_monitor_new(&o);
}

static void
side_clear(struct side *s)
{
	nw_monitor_free(s->m);
	nw_fleet_free(s->fleet);
	nw_config_free(s->cfg);
}

static uint32_t
index_of(const struct side *s, const char *id)
{
	for (uint32_t i = 0; i < s->fleet->view.n_engines; i++) {
		if (strcmp(s->fleet->ids[i], id) == 0)
			return i;
	}
	g_assert_not_reached();
}

/* Issue 11: "a drained engine stays drained across a reload"; its role
 * and role time, its health and the flip history carry over by id; an
 * engine the reload removed is dropped, one it added is held out of
 * placement until a health probe passes. */
static void
test_adopt(void)
{
	struct side old, new;
	uint32_t map[3];
	uint32_t a_new, b_new, d_new;
	struct nw_role_change c = { .from = NARWHAL_ROLE_PREFILL, .to = NARWHAL_ROLE_DECODE,
	                            .at_ns = 5, .caller = "floor_repair",
	                            .reason = "decode_below_floor", .applied = true };
	json_t *hist, *doc, *eb;

	side_init(&old, "[{\"id\": \"a\", \"url\": \"http://127.0.0.1:1\", \"role\": \"prefill\"},"
	                " {\"id\": \"b\", \"url\": \"http://127.0.0.1:2\", \"role\": \"prefill\"},"
	                " {\"id\": \"c\", \"url\": \"http://127.0.0.1:3\", \"role\": \"decode\"}]",
	          1);
	/* What the router learnt: b drained by the operator, then moved to
	 * decode by floor repair; c ejected after probe failures. */
	nw_monitor_drain(old.m, 1, true);
	c.engine = 1;
	nw_flip_history_add(&old.m->history, &c);
	c.engine = 2; /* c's change: dropped with c */
	nw_flip_history_add(&old.m->history, &c);
	old.fleet->engines[1].role = NARWHAL_ROLE_DECODE;
	old.fleet->engines[1].role_since_ns = 5;
	nw_monitor_health_event(old.m, 0, NW_HEALTH_PROBE_FAILED, "refused");
	old.m->passes = 7;
	nw_monitor_stop(old.m);

	/* The new file: c removed, d added, b and a in another order. */
	side_init(&new, "[{\"id\": \"b\", \"url\": \"http://127.0.0.1:2\", \"role\": \"prefill\"},"
	                " {\"id\": \"d\", \"url\": \"http://127.0.0.1:4\", \"role\": \"decode\"},"
	                " {\"id\": \"a\", \"url\": \"http://127.0.0.1:1\", \"role\": \"prefill\"}]",
	          100);
	a_new = index_of(&new, "a");
	b_new = index_of(&new, "b");
	d_new = index_of(&new, "d");
	map[0] = a_new;
	map[1] = b_new;
	map[2] = UINT32_MAX;
	nw_monitor_adopt(new.m, old.m, map);

	/* The drain holds: b takes no new work. */
	g_assert_true(new.m->engines[b_new].health.holds & NW_HOLD_DRAIN);
	g_assert_true(new.fleet->engines[b_new].flags & NARWHAL_ENGINE_DRAINING);
	g_assert_false(new.fleet->engines[b_new].flags & NARWHAL_ENGINE_AVAILABLE);
	/* Its running role is kept, with its time, over the file's initial one. */
	g_assert_cmpint(new.fleet->engines[b_new].role, ==, NARWHAL_ROLE_DECODE);
	g_assert_cmpint(new.fleet->engines[b_new].role_since_ns, ==, 5);
	/* a's probe failure counts on. */
	g_assert_cmpuint(new.m->engines[a_new].health.probe_failures, ==, 1);
	g_assert_true(new.fleet->engines[a_new].flags & NARWHAL_ENGINE_AVAILABLE);
	/* d waits for its first passing probe. */
	g_assert_true(new.m->engines[d_new].health.holds & NW_HOLD_UNPROBED);
	g_assert_false(new.fleet->engines[d_new].flags & NARWHAL_ENGINE_AVAILABLE);
	nw_monitor_health_event(new.m, d_new, NW_HEALTH_PROBE_OK, NULL);
	g_assert_cmpuint(new.m->engines[d_new].health.holds, ==, 0);
	g_assert_true(new.fleet->engines[d_new].flags & NARWHAL_ENGINE_AVAILABLE);

	/* The history: b's change, under its new index; c's dropped. */
	hist = nw_monitor_history_json(new.m);
	g_assert_cmpuint(json_array_size(hist), ==, 1);
	g_assert_cmpstr(json_string_value(json_object_get(json_array_get(hist, 0), "engine")), ==,
	                "b");
	json_decref(hist);
	g_assert_cmpuint(new.m->history.total, ==, 2);

	/* What operators see: the pass count goes on, b's hold is shown. */
	doc = nw_monitor_to_json(new.m, true);
	g_assert_cmpint(json_integer_value(json_object_get(json_object_get(doc, "monitor"),
	                                                   "passes")), ==, 7);
	eb = json_array_get(json_object_get(doc, "engines"), b_new);
	g_assert_cmpstr(json_string_value(json_object_get(eb, "id")), ==, "b");
	g_assert_cmpstr(json_string_value(json_array_get(json_object_get(eb, "holds"), 0)), ==,
	                "drain");
	json_decref(doc);

	side_clear(&old);
	side_clear(&new);
}

/* Issue 11 (GET /metrics, the monitor's figures): the monitoring
 * failures by stage (an unlisted stage as "other"), the role changes by
 * caller and each kept engine's last reading of its own metrics carry over
 * a reload; an added engine has no reading. The summary gives the numbers
 * of nw_monitor_to_json's "roles". */
static void
test_adopt_metric_figures(void)
{
	struct side old, new;
	uint32_t map[2] = { 1, UINT32_MAX };
	struct nw_role_change c = { .engine = 1, .from = NARWHAL_ROLE_PREFILL,
	                            .to = NARWHAL_ROLE_DECODE, .caller = "operator",
	                            .reason = "operator_request", .applied = true };
	struct nw_monitor_summary sum;
	struct narwhal_engine_metrics r;
	double age = -1;

	side_init(&old, "[{\"id\": \"a\", \"url\": \"http://127.0.0.1:1\", \"role\": \"prefill\"},"
	                " {\"id\": \"b\", \"url\": \"http://127.0.0.1:2\", \"role\": \"decode\"}]", 1);
	g_assert_false(nw_monitor_engine_reading(old.m, 0, &r, &age));
	nw_monitor_failed(old.m, 0, "metrics", "unreadable", true);
	nw_monitor_failed(old.m, 1, "control_pool", "none left", false);
	nw_monitor_failed(old.m, 1, "somewhere", "new stage", false);
	nw_flip_history_add(&old.m->history, &c);
	old.m->engines[0].metrics = (struct narwhal_engine_metrics){
		.running = 3, .waiting = -1, .kv_usage = 0.25,
	};
	old.m->engines[0].metrics_at_ns = nw_monitor_now(old.m) - 2000000000;
	nw_monitor_stop(old.m);

	side_init(&new, "[{\"id\": \"c\", \"url\": \"http://127.0.0.1:3\", \"role\": \"prefill\"},"
	                " {\"id\": \"a\", \"url\": \"http://127.0.0.1:1\", \"role\": \"prefill\"}]",
	          100);
	nw_monitor_adopt(new.m, old.m, map);
	nw_monitor_summary(new.m, &sum);
	g_assert_cmpuint(sum.failures[2], ==, 1);  /* metrics */
	g_assert_cmpstr(nw_monitor_stages[2], ==, "metrics");
	g_assert_cmpuint(sum.failures[3], ==, 1);  /* control_pool */
	g_assert_cmpuint(sum.failures[NW_MONITOR_STAGES - 1], ==, 1);
	g_assert_cmpstr(nw_monitor_stages[NW_MONITOR_STAGES - 1], ==, "other");
	g_assert_cmpuint(sum.failures[0] + sum.failures[1], ==, 0);
	/* b's change is dropped from the ring with b, but counted. */
	g_assert_cmpuint(sum.role_changes[nw_role_caller_index("operator")][1], ==, 1);
	g_assert_cmpuint(sum.min_prefill, ==, 1);
	g_assert_cmpuint(sum.min_decode, ==, 1);
	g_assert_cmpuint(sum.floors.live_decode, ==, 0);
	g_assert_cmpuint(sum.failure_limit, ==, new.cfg->controller.monitor_failure_limit);
	/* a's reading, two seconds old (and more by now); c has none. */
	g_assert_true(nw_monitor_engine_reading(new.m, 1, &r, &age));
	g_assert_cmpint(r.running, ==, 3);
	g_assert_cmpint(r.waiting, ==, -1);
	g_assert_cmpfloat(r.kv_usage, ==, 0.25);
	g_assert_cmpfloat(age, >=, 2);
	g_assert_cmpfloat(age, <, 60);
	g_assert_false(nw_monitor_engine_reading(new.m, 0, &r, &age));
	side_clear(&old);
	side_clear(&new);
}

/* Issue 11: an engine in verification when the reload came has its
 * verification legs cancelled with the old monitor: the new one verifies
 * it again at once, rather than leave it out forever. The health window
 * keeps the newest residuals that fit. */
static void
test_health_adopt(void)
{
	struct nw_health_rules rules = { .probe_failures = 2, .window_s = 30, .min_samples = 2,
	                                 .failure_ratio = 0.5, .backoff_s = 1,
	                                 .backoff_max_s = 30 };
	struct nw_health_rules small = rules;
	struct nw_engine_health a, b;

	nw_health_init(&a, &rules, 1.0, 0);
	for (int k = 0; k < 10; k++) {
		struct nw_health_event ev = { .kind = k < 8 ? NW_HEALTH_PROBE_OK
		                                            : NW_HEALTH_PROBE_FAILED };

		nw_health_step(&a, &rules, &ev, (int64_t)k * 1000000000, NULL);
	}
	a.state = NW_HEALTH_VERIFYING;
	small.window_s = 3;
	nw_health_init(&b, &small, 1.0, 0);
	g_assert_cmpuint(b.window_cap, <, a.window_len);
	nw_health_adopt(&b, &a, 42);
	g_assert_cmpint(b.state, ==, NW_HEALTH_EJECTED);
	g_assert_cmpint(b.next_verify_ns, ==, 42);
	g_assert_true(nw_health_verify_due(&b, 42));
	g_assert_cmpuint(b.window_len, ==, b.window_cap);
	/* The newest residual is the last failed probe. */
	g_assert_true(b.window[b.window_len - 1].failed);
	g_assert_cmpint(b.window[b.window_len - 1].at_ns, ==, 9000000000);
	g_assert_false(b.window[0].at_ns < 9000000000 - (int64_t)(b.window_cap - 1) * 1000000000);
	nw_health_clear(&a);
	nw_health_clear(&b);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/monitor/issue-11/adopt", test_adopt);
	g_test_add_func("/monitor/issue-11/health-adopt", test_health_adopt);
	g_test_add_func("/monitor/issue-11/adopt-metric-figures", test_adopt_metric_figures);
	return g_test_run();
}
