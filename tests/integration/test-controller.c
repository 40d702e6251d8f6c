/*
 * Role control through the daemon in front of narwhal-sim (issue 13, "How
 * it is checked"; spec 7 to 7.7, the role-control document;
 * docs/controller.md): the reactive controller on a phase-shifting
 * workload (a prefill-heavy phase, then a decode-heavy one, sent by
 * narwhal-replay) moves engines the right way within a few step_s, never
 * breaks a floor and makes at most one move a step; advisory mode records
 * the same proposal and keeps the roles; a sudden TTFT breach triggers the
 * urgent path; a reload swaps the controller and keeps its records.
 *
 * The simulator runs at half speed (--time-scale 0.5) with a profile
 * store scaled to match (serve_store_write), so a 1,500-token prompt takes
 * about 0.37 s to prefill and a decode step about 40 ms: a few requests a
 * second are a real load. The controller's windows are seconds, not
 * minutes, so each case runs in well under a minute.
 */
#include "build-config.h"

#include <signal.h>
#include <stdint.h>
#include <string.h>

#include <glib/gstdio.h>

#include "integration/test-serve-common.h"

#define TIME_SCALE "0.5"
#define STEP_S 1.0

static const char *const sim_args[] = { "--engines", "4", "--preset", "opt-13b-a100",
	                                "--time-scale", TIME_SCALE, "--seed", "11", NULL };

/* The daemon's settings over the harness's: the reactive controller with
 * short windows (one step a second, evidence after 1.5 s and 4 offers,
 * one confirmation), the store, slo-cost placement, a monitor pass every
 * 0.25 s; extra merged over them. */
static char *
config_text(const struct serve_store *s, const char *admission, const char *extra)
{
	g_autofree char *base = g_strdup_printf(
		"{\"serving\": {\"admission\": \"%s\"},"
		" \"slo\": {\"ttft_s\": 1.0, \"tpot_s\": 0.1},"
		" \"profiles\": {\"path\": \"%s\"},"
		" \"recovery\": {\"health\": {\"min_samples\": 3}},"
		" \"plugins\": {\"placement\": {\"name\": \"slo-cost\"}},"
		" \"controller\": {\"policy\": \"reactive\", \"monitor_interval_s\": 0.25,"
		"  \"thresholds\": {\"cooldown_s\": 1, \"sustained_intervals\": 1},"
		"  \"reactive\": {\"step_s\": %g, \"confirmations\": 1, \"window_s\": 4,"
		"   \"evidence_span_s\": 1.5, \"evidence_max_span_s\": 3,"
		"   \"evidence_min_arrivals\": 4, \"min_arrivals\": 4, \"demand_floor\": 0.5}}}",
		admission, s->path, STEP_S);

	return serve_json_merged_text(base, extra);
}

static json_t *
state_get(struct serve_env *e)
{
	struct sim_reply r = { 0 };
	json_t *doc;

	sim_http(e->port, "GET", "/narwhal/state", NULL, NULL, 5000, &r);
	g_assert_cmpint(r.status, ==, 200);
	doc = sim_json(r.body->str);
	sim_reply_clear(&r);
	return doc;
}

static json_int_t
int_at(json_t *o, const char *a, const char *b)
{
	return json_integer_value(json_object_get(json_object_get(o, a), b));
}

/* narwhal-replay on the workload, in the background. */
static GSubprocess *
replay_start(struct serve_env *e, const char *spec)
{
	g_autofree char *url = g_strdup_printf("http://127.0.0.1:%u", e->port);
	GError *error = NULL;
	GSubprocess *p = g_subprocess_new(
		G_SUBPROCESS_FLAGS_STDOUT_SILENCE | G_SUBPROCESS_FLAGS_STDERR_SILENCE, &error,
		sim_replay_bin(), "--url", url, "--model", e->model, "--quiet", "--synthetic", spec,
		"--seed", "3", "--timeout", "60", NULL);

	g_assert_no_error(error);
	return p;
}

static void
replay_finish(GSubprocess *p)
{
	GError *error = NULL;

	/* Bounded by the workload's durations and --timeout. */
	g_assert_true(g_subprocess_wait_check(p, NULL, &error));
	g_assert_no_error(error);
	g_object_unref(p);
}

/* What the polls saw. */
struct watch {
	double uptime_at_start;   /* the daemon's uptime_s when the workload began */
	uint32_t max_prefill;     /* the most live prefill engines seen */
	uint32_t min_prefill_seen, min_decode_seen;
};

/* Poll /narwhal/state every 0.2 s while the replay runs (bounded by
 * timeout_s): each time, neither pool below its floor (spec 7.2). */
static void
watch_roles(struct serve_env *e, GSubprocess *replay, double timeout_s, struct watch *w)
{
	gint64 deadline = g_get_monotonic_time() + (gint64)(timeout_s * G_USEC_PER_SEC);

	w->min_prefill_seen = w->min_decode_seen = UINT32_MAX;
	while (g_subprocess_get_identifier(replay) != NULL && g_get_monotonic_time() < deadline) {
		json_t *st = state_get(e);
		uint32_t p = (uint32_t)int_at(st, "roles", "live_prefill");
		uint32_t d = (uint32_t)int_at(st, "roles", "live_decode");

		w->max_prefill = MAX(w->max_prefill, p);
		w->min_prefill_seen = MIN(w->min_prefill_seen, p);
		w->min_decode_seen = MIN(w->min_decode_seen, d);
		json_decref(st);
		g_usleep(200000);
	}
}

/* The flip history's entries by caller prefix ("controller" matches the
 * urgent caller too), in order (borrowed from doc). */
static GPtrArray *
flips(json_t *doc, const char *caller)
{
	GPtrArray *out = g_ptr_array_new();
	json_t *entries = json_object_get(json_object_get(doc, "flip_history"), "entries"), *f;
	size_t i;

	json_array_foreach(entries, i, f) {
		if (g_str_has_prefix(json_string_value(json_object_get(f, "caller")), caller))
			g_ptr_array_add(out, f);
	}
	return out;
}

static const char *
str_of(json_t *o, const char *k)
{
	return json_string_value(json_object_get(o, k));
}

/* The workload: prefill-heavy (1,500-token prompts, 4 tokens out) at 3 a
 * second, beyond one prefill engine, then decode-heavy (100-token
 * prompts, 200 tokens out) at the same rate. */
#define PHASE1_S 10
#define PHASE2_S 12
#define WORKLOAD                                                                \
	"name=prefill,rate=3,input=1500,output=4,duration=10;"                  \
	"name=decode,rate=3,input=100,output=200,duration=12"

/* Issue 13: "a phase-shifting workload (a prefill-heavy phase, then a
 * decode-heavy one) in which reactive moves engines the right way within
 * a few step_s, never breaks a floor, and makes at most one move per
 * step_s"; spec 7.2 (floors), 7.5 (adjacent moves), role-control document
 * ("rate-limits role evaluations to one per controller.reactive.step_s").
 * One prefill and three decode engines to start. */
static void
test_phase_shift(void)
{
	struct serve_env e;
	struct serve_store s;
	g_autofree char *cfg = NULL;
	struct watch w = { 0 };
	GSubprocess *replay;
	json_t *doc, *st;
	GPtrArray *moves;
	double first_to_prefill = -1, first_to_decode = -1, last_at = -1;

	serve_store_write(&s, 4, 0.5);
	cfg = config_text(&s, "open", NULL);
	if (!serve_start(&e, sim_args, "pddd", cfg)) {
		serve_store_clear(&s);
		return;
	}
	g_assert_true(serve_wait_all_available(&e, 10000));
	st = state_get(&e);
	w.uptime_at_start = json_number_value(json_object_get(st, "uptime_s"));
	json_decref(st);
	replay = replay_start(&e, WORKLOAD);
	watch_roles(&e, replay, PHASE1_S + PHASE2_S + 60, &w);
	replay_finish(replay);

	doc = state_get(&e);
	moves = flips(doc, "controller");
	for (guint k = 0; k < moves->len; k++) {
		json_t *f = g_ptr_array_index(moves, k);
		double at = json_number_value(json_object_get(f, "at_s")) - w.uptime_at_start;

		g_test_message("%.2f s: %s %s -> %s (%s), split %" JSON_INTEGER_FORMAT "/%"
		               JSON_INTEGER_FORMAT, at, str_of(f, "caller"), str_of(f, "from"),
		               str_of(f, "to"), str_of(f, "reason"),
		               json_integer_value(json_object_get(f, "prefill")),
		               json_integer_value(json_object_get(f, "decode")));
		g_assert_true(json_is_true(json_object_get(f, "applied")));
		/* Spec 7.2: no change below a floor (1 and 1 here). */
		g_assert_cmpint(json_integer_value(json_object_get(f, "prefill")), >=, 1);
		g_assert_cmpint(json_integer_value(json_object_get(f, "decode")), >=, 1);
		/* At most one move a step (the urgent path is not used here:
		 * open admission prices nothing). */
		g_assert_cmpstr(str_of(f, "caller"), ==, "controller");
		if (last_at >= 0)
			g_assert_cmpfloat(at - last_at, >=, STEP_S - 0.05);
		last_at = at;
		if (strcmp(str_of(f, "to"), "prefill") == 0 && first_to_prefill < 0)
			first_to_prefill = at;
		if (strcmp(str_of(f, "to"), "decode") == 0 && first_to_decode < 0)
			first_to_decode = at;
	}
	/* The prefill-heavy phase takes a decode engine to prefill within a
	 * few steps (the evidence window, 1.5 s, and a step or two). */
	g_assert_cmpfloat(first_to_prefill, >=, 0);
	g_assert_cmpfloat(first_to_prefill, <=, 5 * STEP_S);
	g_assert_cmpuint(w.max_prefill, >=, 2);
	/* The decode-heavy phase takes one back, once the long horizon (4 s)
	 * has forgotten the long prompts, within a few steps more. */
	g_assert_cmpfloat(first_to_decode, >, PHASE1_S);
	g_assert_cmpfloat(first_to_decode, <=, PHASE1_S + 4 + 5 * STEP_S);
	/* No poll saw a pool below its floor. */
	g_assert_cmpuint(w.min_prefill_seen, >=, 1);
	g_assert_cmpuint(w.min_decode_seen, >=, 1);
	/* The state's controller section shows the moves with their inputs. */
	{
		json_t *c = json_object_get(doc, "controller");

		g_assert_cmpstr(str_of(c, "policy"), ==, "reactive");
		g_assert_cmpint(int_at(json_object_get(c, "evaluations"), "scheduled", "applied"), ==,
		                moves->len);
		g_assert_cmpuint(json_array_size(json_object_get(c, "proposals")), >=, moves->len);
	}
	g_ptr_array_unref(moves);
	json_decref(doc);
	serve_clear(&e);
	serve_store_clear(&s);
}

/* Spec 7.4 (advisory rollout) and issue 13: "advisory mode records the
 * same proposals and keeps the roles": the prefill-heavy phase alone; the
 * proposal the applied run made first (one decode engine to prefill, for
 * consolidation) is recorded as advised, the flip history holds it not
 * applied, and the split stays one prefill, three decode throughout. */
static void
test_advisory(void)
{
	struct serve_env e;
	struct serve_store s;
	g_autofree char *cfg = NULL;
	struct watch w = { 0 };
	GSubprocess *replay;
	json_t *doc, *props, *p;
	GPtrArray *advised;
	size_t i;
	gboolean found = FALSE;

	serve_store_write(&s, 4, 0.5);
	cfg = config_text(&s, "open", "{\"controller\": {\"advisory\": true}}");
	if (!serve_start(&e, sim_args, "pddd", cfg)) {
		serve_store_clear(&s);
		return;
	}
	g_assert_true(serve_wait_all_available(&e, 10000));
	replay = replay_start(&e, "name=prefill,rate=3,input=1500,output=4,duration=6");
	watch_roles(&e, replay, 60, &w);
	replay_finish(replay);

	g_assert_cmpuint(w.max_prefill, ==, 1);
	g_assert_cmpuint(w.min_prefill_seen, ==, 1);
	doc = state_get(&e);
	g_assert_true(json_is_true(json_object_get(json_object_get(doc, "controller"),
	                                           "advisory")));
	props = json_object_get(json_object_get(doc, "controller"), "proposals");
	json_array_foreach(props, i, p) {
		g_assert_cmpstr(str_of(p, "result"), !=, "applied");
		if (strcmp(str_of(p, "result"), "advised") == 0 &&
		    int_at(p, "before", "prefill") == 1 && int_at(p, "proposed", "prefill") == 2 &&
		    g_strcmp0(str_of(p, "reason"), "consolidation") == 0)
			found = TRUE;
	}
	g_assert_true(found);
	advised = flips(doc, "controller");
	g_assert_cmpuint(advised->len, >=, 1);
	for (guint k = 0; k < advised->len; k++)
		g_assert_true(json_is_false(json_object_get(g_ptr_array_index(advised, k), "applied")));
	g_ptr_array_unref(advised);
	g_assert_cmpint(int_at(doc, "roles", "live_prefill"), ==, 1);
	json_decref(doc);
	serve_clear(&e);
	serve_store_clear(&s);
}

/* The role-control document, "Prefill queue projections": a projected
 * prefill TTFT breach schedules a guarded decode-to-prefill evaluation
 * between scheduled passes. Predictive admission prices each offer; a
 * burst of long prompts on one prefill engine projects beyond slo.ttft_s,
 * and the urgent evaluation moves one decode engine to prefill, recorded
 * with caller controller_urgent. Scheduled moves are kept out of the way
 * (min_arrivals beyond the burst); the rising-demand check, which a burst
 * on an idle fleet trips, is relaxed: this checks the path, and
 * docs/controller-reactive.md's tests check the plugin's rules. */
static void
test_urgent(void)
{
	struct serve_env e;
	struct serve_store s;
	g_autofree char *cfg = NULL;
	GSubprocess *replay;
	json_t *doc = NULL, *c, *p;
	gint64 deadline;
	gboolean found = FALSE;
	size_t i;

	serve_store_write(&s, 4, 0.5);
	cfg = config_text(&s, "predictive",
	                  "{\"controller\": {\"reactive\": {\"min_arrivals\": 100000,"
	                  " \"demand_rise_tolerance\": 100}}}");
	if (!serve_start(&e, sim_args, "pddd", cfg)) {
		serve_store_clear(&s);
		return;
	}
	g_assert_true(serve_wait_all_available(&e, 10000));
	/* The evidence window closes on its own under sparse traffic (3 s). */
	deadline = g_get_monotonic_time() + 10 * G_USEC_PER_SEC;
	do {
		json_decref(doc);
		doc = state_get(&e);
		if (json_is_true(json_object_get(json_object_get(json_object_get(doc, "demand"),
		                                                 "evidence"), "closed")))
			break;
		g_usleep(100000);
	} while (g_get_monotonic_time() < deadline);
	json_decref(doc);
	/* Eight 1,500-token prompts at once: about 3 s of prefill for one
	 * engine, beyond the 1 s target from the third on. */
	replay = replay_start(&e, "rate=40,arrival=gamma,cv=0,input=1500,output=4,duration=0.2");
	deadline = g_get_monotonic_time() + 30 * G_USEC_PER_SEC;
	doc = NULL;
	while (!found && g_get_monotonic_time() < deadline) {
		json_decref(doc);
		doc = state_get(&e);
		c = json_object_get(doc, "controller");
		json_array_foreach(json_object_get(c, "proposals"), i, p) {
			if (strcmp(str_of(p, "caller"), "controller_urgent") == 0 &&
			    strcmp(str_of(p, "result"), "applied") == 0)
				found = TRUE;
		}
		if (!found)
			g_usleep(100000);
	}
	if (!found) {
		g_autofree char *text = json_dumps(json_object_get(doc, "controller"), JSON_INDENT(1));

		g_test_message("controller: %s", text);
	}
	g_assert_true(found);
	/* While TTFT stays above target after a move, the new state may
	 * trigger another guarded evaluation (the same section), so the burst
	 * may take more than one decode engine; each wake moves at most one,
	 * always towards prefill, and the decode floor holds. */
	json_decref(doc);
	doc = state_get(&e);
	c = json_object_get(doc, "controller");
	g_assert_cmpint(int_at(c, "urgent", "moves"), >=, 1);
	g_assert_cmpint(int_at(doc, "roles", "live_prefill"), >=, 2);
	g_assert_cmpint(int_at(doc, "roles", "live_decode"), >=, 1);
	{
		GPtrArray *f = flips(doc, "controller_urgent");

		g_assert_cmpuint(f->len, ==, (guint)int_at(c, "urgent", "moves"));
		for (guint k = 0; k < f->len; k++)
			g_assert_cmpstr(str_of(g_ptr_array_index(f, k), "to"), ==, "prefill");
		g_ptr_array_unref(f);
	}
	json_array_foreach(json_object_get(c, "proposals"), i, p) {
		if (strcmp(str_of(p, "caller"), "controller_urgent") == 0 &&
		    strcmp(str_of(p, "result"), "applied") == 0)
			g_assert_cmpint(int_at(p, "proposed", "prefill"), ==,
			                int_at(p, "before", "prefill") + 1);
	}
	json_decref(doc);
	replay_finish(replay);
	serve_clear(&e);
	serve_store_clear(&s);
}

/* Issue 13: "controllers are swapped by configuration, and by reload
 * without a restart": advisory reactive records a proposal; the file then
 * names the static controller, SIGHUP applies it, and the state shows the
 * new plugin and policy with the records kept (the proposal, the
 * evaluation counts going on). */
static void
test_reload_swaps(void)
{
	struct serve_env e;
	struct serve_store s;
	g_autofree char *cfg = NULL, *log = NULL;
	GSubprocess *replay;
	json_t *doc = NULL, *file, *c;
	json_int_t before = 0;
	gint64 deadline;

	serve_store_write(&s, 4, 0.5);
	cfg = config_text(&s, "open", "{\"controller\": {\"advisory\": true}}");
	if (!serve_start(&e, sim_args, "pddd", cfg)) {
		serve_store_clear(&s);
		return;
	}
	g_assert_true(serve_wait_all_available(&e, 10000));
	replay = replay_start(&e, "name=prefill,rate=3,input=1500,output=4,duration=6");
	deadline = g_get_monotonic_time() + 30 * G_USEC_PER_SEC;
	do {
		json_decref(doc);
		doc = state_get(&e);
		c = json_object_get(doc, "controller");
		if (json_array_size(json_object_get(c, "proposals")) > 0)
			break;
		g_usleep(100000);
	} while (g_get_monotonic_time() < deadline);
	g_assert_cmpuint(json_array_size(json_object_get(c, "proposals")), >=, 1);
	before = int_at(json_object_get(c, "evaluations"), "scheduled", "total");
	json_decref(doc);

	file = json_load_file(e.config_path, 0, NULL);
	g_assert_nonnull(file);
	json_object_set_new(json_object_get(file, "controller"), "policy", json_string("static"));
	g_assert_cmpint(json_dump_file(file, e.config_path, JSON_INDENT(1)), ==, 0);
	json_decref(file);
	g_subprocess_send_signal(e.daemon, SIGHUP);
	g_assert_true(serve_wait_log(&e, "\"event\":\"reload_applied\"", 10000));
	log = serve_log(&e);
	g_assert_nonnull(strstr(log, "controller: reactive -> static"));

	/* A few passes under the static controller. */
	deadline = g_get_monotonic_time() + 10 * G_USEC_PER_SEC;
	doc = NULL;
	do {
		json_decref(doc);
		doc = state_get(&e);
		c = json_object_get(doc, "controller");
		if (g_strcmp0(str_of(c, "gate"), "static") == 0)
			break;
		g_usleep(100000);
	} while (g_get_monotonic_time() < deadline);
	g_assert_cmpstr(str_of(c, "policy"), ==, "static");
	g_assert_cmpstr(str_of(c, "gate"), ==, "static");
	g_assert_cmpstr(str_of(json_object_get(json_object_get(doc, "plugins"), "controller"),
	                       "name"), ==, "static");
	g_assert_cmpuint(json_array_size(json_object_get(c, "proposals")), >=, 1);
	g_assert_cmpint(int_at(json_object_get(c, "evaluations"), "scheduled", "total"), >, before);
	json_decref(doc);
	replay_finish(replay);
	serve_clear(&e);
	serve_store_clear(&s);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/controller/issue-13/phase-shift", test_phase_shift);
	g_test_add_func("/controller/spec-7.4/advisory", test_advisory);
	g_test_add_func("/controller/role-control/urgent", test_urgent);
	g_test_add_func("/controller/issue-13/reload-swaps", test_reload_swaps);
	return g_test_run();
}
