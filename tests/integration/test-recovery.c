/*
 * Engine health and recovery end to end (issue 10, docs/recovery.md):
 * narwhal in front of real narwhal-sim engines whose faults are set through
 * the simulator's admin API, or whose process is killed and restarted. For
 * each fault: once a few monitor passes have gone by every request succeeds
 * on the healthy engines, the faulted engine is out of placement with the
 * right state and reason and receives no work, and once the fault clears it
 * is verified, readmitted and takes work again. Then floor repair, the
 * aggregate fallback, the degraded state, restart detection through the
 * engine's start time and a whole pool dead. Every scenario ends with the
 * counters reconciled. Each test names its clause.
 *
 * The monitor runs every 0.2 s and the simulator 20 times faster than
 * model time, so each scenario takes a few seconds. Sequential requests go
 * to the engine with the lowest id of a role (least-loaded placement breaks
 * ties by id), so the faulted engine is always the one placement would
 * choose: sim-0 among prefill engines, sim-2 among decode engines.
 */
#include "build-config.h"

#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "integration/test-serve-common.h"

#define MONITOR_INTERVAL_S 0.2
#define TIME_SCALE "20"

/* A fast monitor, a short verification backoff, a first-token limit that a
 * slowed or hung engine misses (a healthy crossed handoff at this time
 * scale takes a few milliseconds) and retries for the requests in flight
 * when a fault starts. handoff_timeout_s must be set when retrying. */
static const char base_config[] =
	"{\"controller\": {\"monitor_interval_s\": 0.2},"
	" \"recovery\": {\"verify_backoff_s\": 0.2, \"verify_backoff_max_s\": 0.5},"
	" \"engine\": {\"first_token_timeout_s\": 0.3, \"health_timeout_s\": 1.0},"
	" \"serving\": {\"max_attempts\": 3, \"handoff_timeout_s\": 2.0,"
	"               \"retry_base_s\": 0.01, \"retry_cap_s\": 0.02}}";

/* Bounds of every load loop, and the pause between its requests (a few
 * monitor passes take about 20 requests). */
#define DRIVE_MAX_REQUESTS 200
#define DRIVE_MAX_MS 8000
#define DRIVE_PAUSE_US 20000
#define WAIT_MS 8000

/* --- configuration ------------------------------------------------------- */

/* base_config with extra (a JSON object text, or NULL) merged over it. */
static char *
config_with(const char *extra)
{
	return serve_json_merged_text(base_config, extra);
}

static gboolean
start(struct serve_env *e, unsigned engines, const char *roles, const char *extra)
{
	g_autofree char *n = g_strdup_printf("%u", engines);
	const char *const args[] = { "--engines", n, "--time-scale", TIME_SCALE, NULL };
	g_autofree char *cfg = config_with(extra);

	if (!serve_start(e, args, roles, cfg))
		return FALSE;
	g_assert_true(serve_wait_all_available(e, WAIT_MS));
	return TRUE;
}

/* --- failures with the daemon's log ------------------------------------ */

G_GNUC_NORETURN static void
fail(struct serve_env *e, const char *what)
{
	g_autofree char *log = serve_log(e);

	g_printerr("narwhal log:\n%s\n", log);
	g_error("%s", what);
}

/* --- /narwhal/health ----------------------------------------------------- */

/* One engine's entry (owned), found by id. */
static json_t *
engine_health(struct serve_env *e, const char *id)
{
	json_t *doc = serve_health(e), *engine, *found = NULL;
	size_t i;

	json_array_foreach(json_object_get(doc, "engines"), i, engine) {
		if (g_strcmp0(json_string_value(json_object_get(engine, "id")), id) == 0)
			found = json_incref(engine);
	}
	json_decref(doc);
	if (found == NULL)
		fail(e, "no such engine in /narwhal/health");
	return found;
}

static json_int_t
engine_int(struct serve_env *e, const char *id, const char *field)
{
	json_t *h = engine_health(e, id);
	json_int_t v = json_integer_value(json_object_get(h, field));

	json_decref(h);
	return v;
}

static gboolean
engine_available(struct serve_env *e, const char *id)
{
	json_t *h = engine_health(e, id);
	gboolean v = json_is_true(json_object_get(h, "available"));

	json_decref(h);
	return v;
}

static const char *
str_of(json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));

	return s != NULL ? s : "(null)";
}

/* Poll until an integer field of the engine's health reaches at least
 * min (bounded). */
static gboolean
wait_engine_int(struct serve_env *e, const char *id, const char *field, json_int_t min,
                guint timeout_ms)
{
	gint64 deadline = g_get_monotonic_time() + (gint64)timeout_ms * 1000;

	do {
		if (engine_int(e, id, field) >= min)
			return TRUE;
		g_usleep(10000);
	} while (g_get_monotonic_time() < deadline);
	return FALSE;
}

/* Poll until the engine's availability is want (bounded). */
static gboolean
wait_available(struct serve_env *e, const char *id, gboolean want, guint timeout_ms)
{
	gint64 deadline = g_get_monotonic_time() + (gint64)timeout_ms * 1000;

	do {
		if (engine_available(e, id) == want)
			return TRUE;
		g_usleep(10000);
	} while (g_get_monotonic_time() < deadline);
	return FALSE;
}

/* Whether the document's reasons[] has this code. */
static gboolean
has_reason(json_t *doc, const char *code)
{
	json_t *r;
	size_t i;

	json_array_foreach(json_object_get(doc, "reasons"), i, r) {
		if (g_strcmp0(str_of(r, "code"), code) == 0)
			return TRUE;
	}
	return FALSE;
}

/* GET /narwhal/health with its status (body owned). */
static json_t *
health_with_status(struct serve_env *e, long *status)
{
	struct sim_reply r;
	json_t *doc;

	sim_http(e->port, "GET", "/narwhal/health", NULL, NULL, 5000, &r);
	*status = r.status;
	doc = sim_json(r.body->str);
	sim_reply_clear(&r);
	return doc;
}

/* Poll until /narwhal/health lists reason code (bounded). */
static gboolean
wait_reason(struct serve_env *e, const char *code, guint timeout_ms)
{
	gint64 deadline = g_get_monotonic_time() + (gint64)timeout_ms * 1000;

	do {
		json_t *doc = serve_health(e);
		gboolean found = has_reason(doc, code);

		json_decref(doc);
		if (found)
			return TRUE;
		g_usleep(10000);
	} while (g_get_monotonic_time() < deadline);
	return FALSE;
}

/* --- the daemon's log ------------------------------------------------------ */

/* The daemon's JSON log lines, parsed (lines that are not JSON skipped). */
static GPtrArray *
log_events(struct serve_env *e)
{
	GPtrArray *events = g_ptr_array_new_with_free_func((GDestroyNotify)json_decref);
	g_autofree char *text = serve_log(e);
	g_auto(GStrv) lines = g_strsplit(text, "\n", -1);

	for (char **l = lines; *l != NULL; l++) {
		json_t *ev = json_loads(*l, 0, NULL);

		if (ev != NULL)
			g_ptr_array_add(events, ev);
	}
	return events;
}

/* Index of the first event named event at or after from whose field key
 * (NULL: any) is value; -1 when none. */
static int
find_event(GPtrArray *events, guint from, const char *event, const char *key, const char *value)
{
	for (guint i = from; i < events->len; i++) {
		json_t *ev = g_ptr_array_index(events, i);

		if (g_strcmp0(str_of(ev, "event"), event) == 0 &&
		    (key == NULL || g_strcmp0(str_of(ev, key), value) == 0))
			return (int)i;
	}
	return -1;
}

/* How many events named event about this engine (field "engine"). */
static guint
count_events(struct serve_env *e, const char *event, const char *engine)
{
	GPtrArray *events = log_events(e);
	guint n = 0;

	for (int i = 0; (i = find_event(events, (guint)i, event, "engine", engine)) >= 0; i++)
		n++;
	g_ptr_array_unref(events);
	return n;
}

static guint
log_length(struct serve_env *e)
{
	GPtrArray *events = log_events(e);
	guint n = events->len;

	g_ptr_array_unref(events);
	return n;
}

/* Wait (bounded) for an event at or after from; its index, or -1. */
static int
wait_event(struct serve_env *e, guint from, const char *event, const char *key,
           const char *value, guint timeout_ms)
{
	gint64 deadline = g_get_monotonic_time() + (gint64)timeout_ms * 1000;

	do {
		GPtrArray *events = log_events(e);
		int at = find_event(events, from, event, key, value);

		g_ptr_array_unref(events);
		if (at >= 0)
			return at;
		g_usleep(10000);
	} while (g_get_monotonic_time() < deadline);
	return -1;
}

/* The reason of the first engine_unavailable event of engine. */
static char *
first_ejection_reason(struct serve_env *e, const char *engine)
{
	GPtrArray *events = log_events(e);
	int at = find_event(events, 0, "engine_unavailable", "engine", engine);
	char *reason = at < 0 ? NULL : g_strdup(str_of(g_ptr_array_index(events, at), "reason"));

	g_ptr_array_unref(events);
	return reason;
}

/* reason is one of alternatives ("a|b|c"). */
static gboolean
one_of(const char *reason, const char *alternatives)
{
	g_auto(GStrv) alts = g_strsplit(alternatives, "|", -1);

	return reason != NULL && g_strv_contains((const char *const *)alts, reason);
}

/* --- requests ---------------------------------------------------------------- */

/* kind: bit 0 streamed, bit 1 chat. */
static char *
body_of(struct serve_env *e, unsigned kind)
{
	const char *stream = (kind & 1) ? ",\"stream\":true" : "";

	if (kind & 2)
		return g_strdup_printf("{\"model\":\"%s\",\"messages\":[{\"role\":\"user\","
		                       "\"content\":\"Tell me about whales\"}],\"max_tokens\":4%s}",
		                       e->model, stream);
	return g_strdup_printf("{\"model\":\"%s\",\"prompt\":\"Tell me about whales\","
	                       "\"max_tokens\":4%s}", e->model, stream);
}

static const char *
path_of(unsigned kind)
{
	return (kind & 2) ? "/v1/chat/completions" : "/v1/completions";
}

/* One request of this kind that must succeed in full: a JSON answer with
 * choices, or a stream of events ending with [DONE] and no error event. */
static void
request_ok(struct serve_env *e, unsigned kind)
{
	g_autofree char *body = body_of(e, kind);
	struct sim_reply r;
	gboolean good;

	serve_post(e, path_of(kind), body, NULL, 10000, &r);
	good = r.status == 200;
	if (good && (kind & 1)) {
		GPtrArray *events = sim_sse_events(r.body->str);

		good = events->len > 1 &&
		       g_strcmp0(g_ptr_array_index(events, events->len - 1), "[DONE]") == 0 &&
		       strstr(r.body->str, "\"error\"") == NULL;
		g_ptr_array_free(events, TRUE);
	} else if (good) {
		json_t *doc = sim_json(r.body->str);

		good = json_array_size(json_object_get(doc, "choices")) == 1;
		json_decref(doc);
	}
	if (!good) {
		g_autofree char *what = g_strdup_printf("%s%s: want a whole answer, got %ld "
		                                        "(curl %d): %s", path_of(kind),
		                                        (kind & 1) ? " (stream)" : "", r.status,
		                                        r.curl_code, r.body->str);

		sim_reply_clear(&r);
		fail(e, what);
	}
	sim_reply_clear(&r);
}

/* n requests, every kind in turn: each must succeed. */
static void
load_ok(struct serve_env *e, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		request_ok(e, i % 4);
}

/* Non-streamed requests, each of which must succeed (a retry covers one
 * that met the fault), until every victim is out of placement; bounded in
 * count and time. The number of requests sent. */
static unsigned
drive_until_out(struct serve_env *e, const char *const *victims, unsigned n_victims)
{
	gint64 deadline = g_get_monotonic_time() + DRIVE_MAX_MS * 1000;
	unsigned sent = 0;

	for (;;) {
		gboolean all_out = TRUE;

		for (unsigned v = 0; v < n_victims; v++)
			all_out = all_out && !engine_available(e, victims[v]);
		if (all_out)
			return sent;
		if (sent >= DRIVE_MAX_REQUESTS || g_get_monotonic_time() >= deadline)
			fail(e, "the faulted engine was not taken out of placement in time");
		request_ok(e, (sent % 2) * 2); /* completions and chat, not streamed */
		sent++;
		g_usleep(DRIVE_PAUSE_US);
	}
}

/* docs/recovery.md, "Nothing admitted is lost": once nothing is in
 * progress, requests in = outcomes out. */
static void
assert_reconciled(struct serve_env *e)
{
	gint64 deadline = g_get_monotonic_time() + 5 * G_USEC_PER_SEC;
	json_t *c;
	json_int_t in, out;

	for (;;) {
		c = serve_counters(e);
		if (json_integer_value(json_object_get(c, "in_progress")) == 0)
			break;
		json_decref(c);
		if (g_get_monotonic_time() >= deadline)
			fail(e, "requests still in progress after the scenario");
		g_usleep(10000);
	}
	in = json_integer_value(json_object_get(c, "requests_completions")) +
	     json_integer_value(json_object_get(c, "requests_chat"));
	out = json_integer_value(json_object_get(c, "requests_ok")) +
	      json_integer_value(json_object_get(c, "requests_failed")) +
	      json_integer_value(json_object_get(c, "refused_before_body"));
	g_test_message("counters: %" JSON_INTEGER_FORMAT " in, %" JSON_INTEGER_FORMAT " ok, %"
	               JSON_INTEGER_FORMAT " failed, %" JSON_INTEGER_FORMAT " refused before "
	               "the body, %" JSON_INTEGER_FORMAT " retries", in,
	               json_integer_value(json_object_get(c, "requests_ok")),
	               json_integer_value(json_object_get(c, "requests_failed")),
	               json_integer_value(json_object_get(c, "refused_before_body")),
	               json_integer_value(json_object_get(c, "retries")));
	g_assert_cmpint(in, >, 0);
	g_assert_cmpint(in, ==, out);
	json_decref(c);
}

/* --- engines in simulator processes --------------------------------------- */

struct engine {
	struct sim_proc *sim;
	unsigned index;       /* in its simulator process */
	const char *id;
};

static json_int_t
work_of(const struct engine *en)
{
	return sim_engine_stat(en->sim, en->index, "work_requests_total");
}

static void
clear_faults(const struct engine *en)
{
	g_autofree char *path = g_strdup_printf("/sim/engines/%s/faults", en->id);
	struct sim_reply r;

	sim_http(en->sim->admin_port, "DELETE", path, NULL, NULL, 5000, &r);
	g_assert_cmpint(r.status, ==, 200);
	sim_reply_clear(&r);
}

static const char *const sim_ids[] = { "sim-0", "sim-1", "sim-2", "sim-3" };

/* The engines that are not victims were never ejected: no engine is
 * blamed for another's fault. */
static void
assert_never_ejected(struct serve_env *e, const char *id)
{
	json_t *h = engine_health(e, id);

	if (json_integer_value(json_object_get(h, "ejections")) != 0 ||
	    !json_is_true(json_object_get(h, "available"))) {
		g_autofree char *text = json_dumps(h, JSON_COMPACT);
		g_autofree char *what = g_strdup_printf("%s was taken out for another engine's "
		                                        "fault: %s", id, text);

		json_decref(h);
		fail(e, what);
	}
	json_decref(h);
}

/* --- the fault matrix -------------------------------------------------------- */

struct fault_case {
	const char *path;
	const char *summary;
	const char *faults;       /* set on every victim */
	unsigned victims[2];      /* indices of the 2P+2D fleet (sim-0, sim-1: prefill) */
	unsigned n_victims;
	const char *ejected_for;  /* the reasons of the first ejection, "a|b" */
	const char *counter;      /* the data plane's counter of the failure met */
	gboolean health_passes;   /* the engine's health still answers: the monitor's
	                           * verification legs may reach it while it is out */
};

/*
 * issue 10, "How it is checked": after the fault is set and a few monitor
 * intervals have passed, every request succeeds on the healthy engines;
 * after it clears, the engine is verified, readmitted and takes work again.
 */
static void
run_fault_case(gconstpointer data)
{
	const struct fault_case *c = data;
	struct serve_env e;
	struct engine victims[2];
	const char *ids[2];
	json_int_t work0[2], legs0[2];
	guint verifications0[2], clear_at;
	gint64 t_fault, t_out, t_back;
	unsigned driven;

	g_test_summary(c->summary);
	if (!start(&e, 4, "ppdd", NULL))
		return;
	for (unsigned v = 0; v < c->n_victims; v++) {
		victims[v] = (struct engine){ &e.sim, c->victims[v], sim_ids[c->victims[v]] };
		ids[v] = victims[v].id;
	}
	load_ok(&e, 4);

	/* The fault: each victim is out of placement within a few passes, and
	 * every request meanwhile succeeds (retried on a healthy engine). */
	t_fault = g_get_monotonic_time();
	for (unsigned v = 0; v < c->n_victims; v++)
		g_assert_cmpint(sim_set_faults(&e.sim, victims[v].index, c->faults), ==, 200);
	driven = drive_until_out(&e, ids, c->n_victims);
	t_out = g_get_monotonic_time();
	/* The failure met was the fault's; passive detection needs
	 * recovery.passive_failures (3) of them in a row. */
	g_assert_cmpint(serve_counter(&e, c->counter), >=,
	                g_strcmp0(c->ejected_for, "leg_failures") == 0 ? 3 : 1);
	for (unsigned v = 0; v < c->n_victims; v++) {
		g_autofree char *reason = first_ejection_reason(&e, ids[v]);
		json_t *h = engine_health(&e, ids[v]);

		if (!one_of(reason, c->ejected_for))
			fail(&e, "the faulted engine was ejected for the wrong reason");
		/* Still out: ejected (or verifying, when its health answers),
		 * for the first reason or a failed verification since. */
		g_assert_false(json_is_true(json_object_get(h, "available")));
		g_assert_true(one_of(str_of(h, "state"), "ejected|verifying"));
		g_assert_true(one_of(str_of(h, "reason"), c->ejected_for) ||
		              g_strcmp0(str_of(h, "reason"), "verify_failed") == 0);
		g_assert_cmpint(json_integer_value(json_object_get(h, "ejections")), >=, 1);
		json_decref(h);
	}

	/* Out of placement: requests of every kind succeed and no leg goes
	 * to a victim. Its work may grow only by the monitor's verification
	 * legs (two per attempt: a prefill and a decode on it). */
	for (unsigned v = 0; v < c->n_victims; v++) {
		work0[v] = work_of(&victims[v]);
		legs0[v] = engine_int(&e, ids[v], "legs_placed");
		verifications0[v] = count_events(&e, "engine_verification", ids[v]);
	}
	load_ok(&e, 8);
	for (unsigned v = 0; v < c->n_victims; v++) {
		guint verifications = count_events(&e, "engine_verification", ids[v]) -
		                      verifications0[v];
		json_int_t grew = work_of(&victims[v]) - work0[v];

		g_test_message("%s out: work +%" JSON_INTEGER_FORMAT ", %u verification(s)", ids[v],
		               grew, verifications);
		g_assert_cmpint(engine_int(&e, ids[v], "legs_placed"), ==, legs0[v]);
		g_assert_cmpint(grew, <=, 2 * (json_int_t)verifications + (c->health_passes ? 2 : 0));
	}
	for (unsigned i = 0; i < 4; i++) {
		gboolean victim = FALSE;

		for (unsigned v = 0; v < c->n_victims; v++)
			victim = victim || c->victims[v] == i;
		if (!victim)
			assert_never_ejected(&e, sim_ids[i]);
	}

	/* Its health may answer, but it stays out until verification legs
	 * pass (spec 6: never readmitted on a health probe alone): while the
	 * fault holds they fail. */
	for (unsigned v = 0; v < c->n_victims && c->health_passes; v++) {
		if (wait_event(&e, 0, "engine_verification_failed", "engine", ids[v], WAIT_MS) < 0)
			fail(&e, "no verification attempt failed while the fault held");
		g_assert_false(engine_available(&e, ids[v]));
	}

	/* The fault clears: verified (after the clear), readmitted, available. */
	clear_at = log_length(&e);
	for (unsigned v = 0; v < c->n_victims; v++)
		clear_faults(&victims[v]);
	for (unsigned v = 0; v < c->n_victims; v++) {
		int verified, readmitted;

		if (!wait_available(&e, ids[v], TRUE, WAIT_MS))
			fail(&e, "the engine was not readmitted after its fault cleared");
		/* Log lines reach the file a little after the state changes
		 * (the log writer, docs/deployment.md "Logs"): wait for the
		 * later line; the earlier one is written before it. */
		readmitted = wait_event(&e, clear_at, "engine_readmitted", "engine", ids[v], WAIT_MS);
		verified = wait_event(&e, clear_at, "engine_verification", "engine", ids[v], 0);
		g_assert_cmpint(verified, >=, 0);
		g_assert_cmpint(readmitted, >, verified);
	}
	t_back = g_get_monotonic_time();

	/* And takes work again: it is the engine placement prefers. */
	for (unsigned v = 0; v < c->n_victims; v++) {
		work0[v] = work_of(&victims[v]);
		legs0[v] = engine_int(&e, ids[v], "legs_placed");
	}
	load_ok(&e, 8);
	for (unsigned v = 0; v < c->n_victims; v++) {
		g_assert_cmpint(work_of(&victims[v]), >=, work0[v] + 4);
		g_assert_cmpint(engine_int(&e, ids[v], "legs_placed"), >=, legs0[v] + 4);
	}
	assert_reconciled(&e);
	g_test_message("%s: out %.2f s after the fault (%u requests meanwhile), back %.2f s "
	               "after it cleared", c->path, (t_out - t_fault) / 1e6, driven,
	               (t_back - t_out) / 1e6);
	serve_clear(&e);
}

static const struct fault_case fault_cases[] = {
	{ "/recovery/issue10/refuse-connections",
	  "issue 10 (the operator's report): one prefill and one decode engine of a 2P+2D fleet "
	  "stop accepting connections; both are ejected, every request succeeds on the other "
	  "two, and both come back verified once they listen again",
	  "{\"refuse_connections\": true}", { 0, 2 }, 2, "probe_failures|leg_failures",
	  "prefill_failed_transport", FALSE },
	{ "/recovery/issue10/answers-503",
	  "issue 10, passive detection: a prefill engine answering 503 (health still 200) is "
	  "ejected after recovery.passive_failures legs, fails its verification while the fault "
	  "holds, and is readmitted once it serves again",
	  "{\"error_rate\": 1}", { 0 }, 1, "leg_failures", "prefill_failed_status", TRUE },
	{ "/recovery/spec-6/hang-before-first-token",
	  "spec 6 / issue 10: a decode engine hanging before its first token misses "
	  "engine.first_token_timeout_s, is ejected, and is readmitted once it answers",
	  "{\"hang_before_first_token\": true}", { 2 }, 1, "leg_failures", "first_token_timeouts",
	  TRUE },
	{ "/recovery/issue10/dies-mid-stream",
	  "issue 10: a decode engine that dies after its first token is ejected; requests "
	  "are retried on the other decode engine, and it is readmitted once it completes "
	  "streams again",
	  "{\"die_after_tokens\": 1}", { 2 }, 1, "leg_failures", "decode_failed_transport", TRUE },
	{ "/recovery/spec-6/slowed-down",
	  "spec 6 / issue 10: a decode engine slowed down past engine.first_token_timeout_s is "
	  "ejected and readmitted once its speed is back",
	  "{\"latency_multiplier\": 1000}", { 2 }, 1, "leg_failures", "first_token_timeouts", TRUE },
	{ "/recovery/issue10/expired-leases",
	  "issue 10 / docs/recovery.md: a prefill engine whose KV leases lapse before the pull "
	  "makes the decode engines' loads fail (NARWHAL_ERROR_HANDOFF); the failures are the "
	  "prefill engine's, so it is ejected and the decode engines are not",
	  "{\"kv_lease_s\": 0.000001}", { 0 }, 1, "leg_failures", "handoff_load_failed", TRUE },
};

/* --- flapping health ------------------------------------------------------- */

/* issue 10 / spec 7, the health window: an engine whose health flaps while
 * its requests still work is taken out by its window (at most one residual
 * per pass), verified and readmitted; requests keep succeeding all along,
 * and operators see the window and the verifications in /narwhal/health. */
static void
test_flapping_health(void)
{
	struct serve_env e;
	struct engine victim;
	gint64 deadline;
	gboolean saw_window = FALSE;
	double share = 0;
	json_int_t samples = 0, work0, legs0;
	unsigned sent = 0;
	guint clear_at;
	g_autofree char *reason = NULL;

	g_test_summary("/recovery/spec-7/flapping-health: a prefill engine whose /health "
	               "alternates 503 and 200 is ejected by its health window and verified; "
	               "every request succeeds meanwhile; once steady it is back and takes work");
	/* Only the window ejects here (probes in a row never do): at least 5
	 * samples in its 3 s, half of them failed. */
	if (!start(&e, 4, "ppdd", "{\"recovery\": {\"probe_failures\": 100,"
	           " \"health\": {\"window_s\": 3.0, \"min_samples\": 5, \"failure_ratio\": 0.5}}}"))
		return;
	victim = (struct engine){ &e.sim, 0, "sim-0" };
	/* 503 for 1 s of wall time (five passes), then 200 for 1 s, and so
	 * on: the failed share of the window passes one half within a 503
	 * period or two, whatever the phase of the flapping against the
	 * passes, and the 200 periods leave time to verify the engine. */
	g_assert_cmpint(sim_set_faults(&e.sim, 0, "{\"flap_health_period_s\": 20}"), ==, 200);
	deadline = g_get_monotonic_time() + DRIVE_MAX_MS * 1000;
	while (count_events(&e, "engine_readmitted", "sim-0") == 0 ||
	       count_events(&e, "engine_unavailable", "sim-0") == 0 || !saw_window) {
		json_t *h = engine_health(&e, "sim-0");
		json_t *window = json_object_get(h, "window");

		if (json_is_number(json_object_get(window, "failure_share")) &&
		    json_number_value(json_object_get(window, "failure_share")) > 0) {
			saw_window = TRUE;
			share = json_number_value(json_object_get(window, "failure_share"));
			samples = json_integer_value(json_object_get(window, "samples"));
		}
		json_decref(h);
		if (sent >= DRIVE_MAX_REQUESTS || g_get_monotonic_time() >= deadline)
			fail(&e, "the flapping engine was not ejected and verified in time");
		request_ok(&e, sent % 4);
		sent++;
		g_usleep(DRIVE_PAUSE_US);
	}
	reason = first_ejection_reason(&e, "sim-0");
	g_assert_cmpstr(reason, ==, "health_window");
	g_test_message("window seen: %" JSON_INTEGER_FORMAT " samples, failed share %.2f; %u "
	               "requests", samples, share, sent);
	g_assert_cmpint(samples, >=, 1);
	g_assert_cmpint(engine_int(&e, "sim-0", "ejections"), >=, 1);
	for (unsigned i = 1; i < 4; i++)
		assert_never_ejected(&e, sim_ids[i]);

	/* Steady again: available and taking work. */
	clear_faults(&victim);
	if (!wait_available(&e, "sim-0", TRUE, WAIT_MS))
		fail(&e, "the engine was not back after its health steadied");
	clear_at = log_length(&e);
	work0 = work_of(&victim);
	legs0 = engine_int(&e, "sim-0", "legs_placed");
	load_ok(&e, 8);
	g_assert_cmpint(work_of(&victim), >=, work0 + 4);
	g_assert_cmpint(engine_int(&e, "sim-0", "legs_placed"), >=, legs0 + 4);
	/* And stays in: the steady engine is not ejected again. */
	g_assert_cmpint(wait_event(&e, clear_at, "engine_unavailable", "engine", "sim-0", 0), <, 0);
	assert_reconciled(&e);
	serve_clear(&e);
}

/* --- a victim in its own simulator process --------------------------------- */

/* One engine ("a-0", so that it sorts before every sim-N) in a narwhal-sim
 * process of its own; port 0: an ephemeral one, else that port again. */
static void
victim_start(struct sim_proc *v, guint16 port)
{
	g_autofree char *p = g_strdup_printf("%u", port);
	const char *const args[] = { "--engines", "1", "--time-scale", TIME_SCALE, "--id-prefix",
	                             "a-", "--base-port", p, NULL };

	g_assert_true(sim_start(v, args));
	if (port != 0)
		g_assert_cmpuint(v->ports[0], ==, port);
}

/* The main fleet's engines (roles main_roles) with the victim inserted at
 * position at in the role victim_role; as a config text merged over the
 * base configuration and extra. */
static char *
fleet_config(struct serve_env *e, const struct sim_proc *v, unsigned at, const char *victim_role,
             const char *main_roles, const char *extra)
{
	json_t *engines = json_array(), *main = json_object_get(e->sim.fleet, "engines");
	json_t *victim = json_deep_copy(json_array_get(json_object_get(v->fleet, "engines"), 0));
	json_t *cfg;
	g_autofree char *base = config_with(extra);
	char *text;

	json_object_set_new(victim, "role", json_string(victim_role));
	for (size_t i = 0; i < json_array_size(main); i++) {
		json_t *en = json_deep_copy(json_array_get(main, i));

		if (i == at)
			json_array_append(engines, victim);
		json_object_set_new(en, "role", json_string(main_roles[i] == 'd' ? "decode"
		                                                                   : "prefill"));
		json_array_append_new(engines, en);
	}
	if (at >= json_array_size(main))
		json_array_append(engines, victim);
	json_decref(victim);
	cfg = sim_json(base);
	json_object_set_new(cfg, "fleet", json_pack("{s:o}", "engines", engines));
	text = json_dumps(cfg, JSON_COMPACT);
	json_decref(cfg);
	return text;
}

/* narwhal-sim with three engines (main_roles) and a victim process, and
 * narwhal in front of all four. */
static gboolean
start_with_victim(struct serve_env *e, struct sim_proc *v, unsigned at, const char *victim_role,
                  const char *main_roles)
{
	const char *const args[] = { "--engines", "3", "--time-scale", TIME_SCALE, NULL };
	g_autofree char *cfg = NULL;

	if (!serve_start(e, args, main_roles, base_config))
		return FALSE;
	victim_start(v, 0);
	g_assert_cmpint(serve_stop_daemon(e, SIGTERM, 10000), ==, 0);
	cfg = fleet_config(e, v, at, victim_role, main_roles, NULL);
	if (!serve_start_daemon(e, cfg, NULL))
		fail(e, "narwhal did not start with the victim's fleet");
	g_assert_true(serve_wait_all_available(e, WAIT_MS));
	return TRUE;
}

/* issue 10: an engine killed with SIGKILL is ejected (its probes and legs
 * fail), every request succeeds on the others while it is down for several
 * passes, and when it is started again on its port it is verified (a
 * restarted engine lost its KV state) and readmitted, and takes work. */
static void
test_killed_and_restarted(void)
{
	struct serve_env e;
	struct sim_proc v;
	struct engine victim = { &v, 0, "a-0" };
	const char *const ids[] = { "a-0" };
	g_autofree char *reason = NULL;
	json_int_t legs0;
	guint16 port;
	guint restart_at;
	unsigned driven;

	g_test_summary("/recovery/issue10/sigkill-restart: a prefill engine killed with SIGKILL "
	               "is ejected while every request succeeds elsewhere; restarted on its port it "
	               "is verified, readmitted and takes work again");
	if (!start_with_victim(&e, &v, 0, "prefill", "pdd"))
		return;
	load_ok(&e, 4);
	g_assert_cmpint(work_of(&victim), >=, 4);
	port = v.ports[0];
	sim_stop(&v, SIGKILL, 5000);
	sim_clear(&v);
	driven = drive_until_out(&e, ids, 1);
	reason = first_ejection_reason(&e, "a-0");
	g_assert_true(one_of(reason, "probe_failures|leg_failures"));
	legs0 = engine_int(&e, "a-0", "legs_placed");
	load_ok(&e, 8);
	g_assert_cmpint(engine_int(&e, "a-0", "legs_placed"), ==, legs0);
	for (unsigned i = 0; i < 3; i++)
		assert_never_ejected(&e, sim_ids[i]);

	/* Down for a few passes (its probes fail too), then back on its port. */
	g_assert_true(wait_engine_int(&e, "a-0", "probe_failures", 3, WAIT_MS));
	restart_at = log_length(&e);
	victim_start(&v, port);
	if (!wait_available(&e, "a-0", TRUE, WAIT_MS))
		fail(&e, "the restarted engine was not readmitted");
	g_assert_cmpint(wait_event(&e, restart_at, "engine_readmitted", "engine", "a-0", WAIT_MS),
	                >=, 0);
	g_assert_cmpint(wait_event(&e, restart_at, "engine_verification", "engine", "a-0", 0), >=, 0);
	legs0 = engine_int(&e, "a-0", "legs_placed");
	load_ok(&e, 8);
	/* A new process: its counts start from zero (the verification legs
	 * and the requests just sent). */
	g_assert_cmpint(work_of(&victim), >=, 4);
	g_assert_cmpint(engine_int(&e, "a-0", "legs_placed"), >=, legs0 + 4);
	assert_reconciled(&e);
	g_test_message("%u requests while it went out", driven);
	serve_clear(&e);
	sim_stop(&v, SIGTERM, 10000);
	sim_clear(&v);
}

/* issue 10, lifecycle holds: "an engine that restarts (... its start time
 * changes) is held until verified". The engine is killed and started again
 * between two monitor passes (narwhal is stopped meanwhile, so no probe
 * can fail): only its new start time can tell, and it must be held until
 * verification legs pass, then readmitted. */
static void
test_restart_between_probes(void)
{
	struct serve_env e;
	struct sim_proc v;
	struct engine victim = { &v, 0, "a-0" };
	GPtrArray *events;
	int out, verified, readmitted, back;
	gint64 deadline;
	guint16 port;
	guint restart_at;

	g_test_summary("/recovery/issue10/restart-start-time: a decode engine restarted between "
	               "two probes is found by its new start time, held (reason restart) until "
	               "verified, readmitted and given work");
	if (!start_with_victim(&e, &v, 2, "decode", "ppd"))
		return;
	/* The monitor knows the engine's start time, and the restart will be
	 * well past the half second of slack the monitor allows. */
	deadline = g_get_monotonic_time() + WAIT_MS * 1000;
	for (;;) {
		json_t *h = engine_health(&e, "a-0");
		gboolean read = json_is_object(json_object_get(h, "metrics"));

		json_decref(h);
		if (read)
			break;
		if (g_get_monotonic_time() >= deadline)
			fail(&e, "the monitor never read the engine's metrics");
		g_usleep(10000);
	}
	load_ok(&e, 8);
	g_assert_cmpint(work_of(&victim), >=, 4);
	/* 1.2 s after the victim started (load took most of it). */
	while (sim_metric(v.ports[0], "process_start_time_seconds ") >
	       (double)g_get_real_time() / 1e6 - 1.2)
		g_usleep(20000);

	port = v.ports[0];
	restart_at = log_length(&e);
	g_assert_nonnull(g_subprocess_get_identifier(e.daemon));
	g_subprocess_send_signal(e.daemon, SIGSTOP);
	sim_stop(&v, SIGKILL, 5000);
	sim_clear(&v);
	victim_start(&v, port);
	g_subprocess_send_signal(e.daemon, SIGCONT);

	back = wait_event(&e, restart_at, "engine_available", "engine", "a-0", WAIT_MS);
	if (back < 0)
		fail(&e, "the restarted engine did not come back");
	events = log_events(&e);
	out = find_event(events, restart_at, "engine_unavailable", "engine", "a-0");
	verified = find_event(events, restart_at, "engine_verification", "engine", "a-0");
	readmitted = find_event(events, restart_at, "engine_readmitted", "engine", "a-0");
	g_assert_cmpint(out, >=, 0);
	g_assert_cmpstr(str_of(g_ptr_array_index(events, out), "reason"), ==, "restart");
	/* Held: out, then verified, and only then in placement (readmitted,
	 * logged with its role after the availability). */
	g_assert_cmpint(out, <, verified);
	g_assert_cmpint(verified, <, back);
	g_assert_cmpint(verified, <, readmitted);
	g_ptr_array_unref(events);
	g_assert_cmpint(engine_int(&e, "a-0", "ejections"), ==, 1);

	load_ok(&e, 8);
	g_assert_cmpint(work_of(&victim), >=, 4);
	for (unsigned i = 0; i < 3; i++)
		assert_never_ejected(&e, sim_ids[i]);
	assert_reconciled(&e);
	serve_clear(&e);
	sim_stop(&v, SIGTERM, 10000);
	sim_clear(&v);
}

/* --- floors, the aggregate fallback, a dead pool ---------------------------- */

static void
roles_of(struct serve_env *e, json_int_t *live_prefill, json_int_t *live_decode,
         gboolean *decode_breach)
{
	json_t *doc = serve_health(e);
	json_t *roles = json_object_get(doc, "roles");

	*live_prefill = json_integer_value(json_object_get(roles, "live_prefill"));
	*live_decode = json_integer_value(json_object_get(roles, "live_decode"));
	*decode_breach = json_is_true(json_object_get(roles, "decode_breach"));
	json_decref(doc);
}

static const char *
role_of(struct serve_env *e, const char *id, char buf[16])
{
	json_t *h = engine_health(e, id);

	g_strlcpy(buf, str_of(h, "role"), 16);
	json_decref(h);
	return buf;
}

/* Both decode engines refuse connections. A request could fail on both in
 * turn before they are out (every attempt finds a dead one): wait for the
 * probes (two passes) instead of sending requests. */
static void
refuse_both_decode(struct serve_env *e)
{
	g_assert_cmpint(sim_set_faults(&e->sim, 2, "{\"refuse_connections\": true}"), ==, 200);
	g_assert_cmpint(sim_set_faults(&e->sim, 3, "{\"refuse_connections\": true}"), ==, 200);
	g_assert_true(wait_available(e, "sim-2", FALSE, WAIT_MS));
	g_assert_true(wait_available(e, "sim-3", FALSE, WAIT_MS));
}

/* Spec 7.2, floor repair: with both decode engines refusing, a prefill
 * engine moves to decode within a pass or two (controller.min_decode 1),
 * requests keep succeeding, and the move is logged with caller
 * floor_repair. When the decode engines return the fleet is 2P+2D again
 * (a readmitted engine takes the phase with fewer live engines). */
static void
test_floor_repair(void)
{
	struct serve_env e;
	struct engine d0, d1;
	json_int_t p, d;
	gboolean breach;
	int moved;
	char role[16];
	const char *mover;

	g_test_summary("/recovery/spec-7.2/floor-repair: both decode engines refusing: a prefill "
	               "engine moves to decode (role_change, caller floor_repair), every request "
	               "succeeds, and the fleet is 2P+2D again once they are back");
	if (!start(&e, 4, "ppdd", NULL))
		return;
	d0 = (struct engine){ &e.sim, 2, "sim-2" };
	d1 = (struct engine){ &e.sim, 3, "sim-3" };
	refuse_both_decode(&e);
	moved = wait_event(&e, 0, "role_change", "caller", "floor_repair",
	                   (guint)(4 * MONITOR_INTERVAL_S * 1000));
	if (moved < 0)
		fail(&e, "no floor repair within two passes");
	{
		GPtrArray *events = log_events(&e);
		json_t *ev = g_ptr_array_index(events, moved);

		g_assert_cmpstr(str_of(ev, "from"), ==, "prefill");
		g_assert_cmpstr(str_of(ev, "to"), ==, "decode");
		g_assert_cmpstr(str_of(ev, "reason"), ==, "decode_below_floor");
		mover = g_strcmp0(str_of(ev, "engine"), "sim-0") == 0 ? "sim-0" : "sim-1";
		g_assert_cmpstr(str_of(ev, "engine"), ==, mover);
		g_ptr_array_unref(events);
	}
	g_assert_cmpstr(role_of(&e, mover, role), ==, "decode");
	roles_of(&e, &p, &d, &breach);
	g_assert_cmpint(p, ==, 1);
	g_assert_cmpint(d, ==, 1);
	g_assert_false(breach);
	load_ok(&e, 8);
	g_assert_cmpint(serve_counter(&e, "decode_started"), >=, 8);

	clear_faults(&d0);
	clear_faults(&d1);
	g_assert_true(serve_wait_all_available(&e, WAIT_MS));
	roles_of(&e, &p, &d, &breach);
	g_assert_cmpint(p, ==, 2);
	g_assert_cmpint(d, ==, 2);
	load_ok(&e, 4);
	assert_reconciled(&e);
	serve_clear(&e);
}

/* Spec 7.2, advisory mode: the same breach moves nothing; it is reported
 * (roles.decode_breach, reason floor_breach) and the move only advised,
 * while requests are served whole by the prefill engines. */
static void
test_floor_advisory(void)
{
	struct serve_env e;
	json_t *doc;
	json_int_t p, d, agg0;
	gboolean breach;
	char role[16];

	g_test_summary("/recovery/spec-7.2/floor-advisory: with controller.advisory the decode "
	               "floor breach is reported, not repaired, and requests still succeed");
	if (!start(&e, 4, "ppdd", "{\"controller\": {\"advisory\": true}}"))
		return;
	refuse_both_decode(&e);
	g_assert_true(wait_reason(&e, "floor_breach", WAIT_MS));
	g_assert_cmpint(wait_event(&e, 0, "role_change_advised", "caller", "floor_repair", WAIT_MS),
	                >=, 0);
	g_assert_cmpint(wait_event(&e, 0, "floor_breach", "phase", "decode", WAIT_MS), >=, 0);
	agg0 = serve_counter(&e, "aggregate_started");
	load_ok(&e, 8);
	g_assert_cmpint(serve_counter(&e, "aggregate_started"), >=, agg0 + 8);
	/* Nothing moved. */
	g_assert_cmpint(wait_event(&e, 0, "role_change", NULL, NULL, 0), <, 0);
	g_assert_cmpstr(role_of(&e, "sim-0", role), ==, "prefill");
	g_assert_cmpstr(role_of(&e, "sim-1", role), ==, "prefill");
	roles_of(&e, &p, &d, &breach);
	g_assert_cmpint(p, ==, 2);
	g_assert_cmpint(d, ==, 0);
	g_assert_true(breach);
	doc = serve_health(&e);
	g_assert_cmpstr(str_of(doc, "status"), ==, "degraded");
	g_assert_true(has_reason(doc, "decode_pool_empty"));
	json_decref(doc);
	assert_reconciled(&e);
	serve_clear(&e);
}

/* Role-control document, "Floors, fallback, and degraded capacity": with
 * the only prefill engine refusing, the decode engine serves whole
 * requests (aggregate legs), health says the prefill pool is empty, and
 * the fleet disaggregates again once the prefill engine is back. */
static void
test_aggregate_fallback(void)
{
	struct serve_env e;
	struct engine prefill, decode;
	json_t *doc;
	json_int_t agg0, work0, pre0;
	char role[16];

	g_test_summary("/recovery/role-control/aggregate-fallback: 1P+1D with the prefill engine "
	               "refusing: the decode engine serves whole requests, /narwhal/health says "
	               "prefill_pool_empty, and requests disaggregate again after readmission");
	if (!start(&e, 2, "pd", NULL))
		return;
	prefill = (struct engine){ &e.sim, 0, "sim-0" };
	decode = (struct engine){ &e.sim, 1, "sim-1" };
	/* The only prefill engine: a request could meet it on every attempt
	 * before it is out, so wait for the probes (two passes). */
	g_assert_cmpint(sim_set_faults(&e.sim, 0, "{\"refuse_connections\": true}"), ==, 200);
	g_assert_true(wait_available(&e, "sim-0", FALSE, WAIT_MS));
	doc = serve_health(&e);
	g_assert_cmpstr(str_of(doc, "status"), ==, "degraded");
	g_assert_true(has_reason(doc, "prefill_pool_empty"));
	g_assert_true(has_reason(doc, "engines_out"));
	json_decref(doc);
	agg0 = serve_counter(&e, "aggregate_started");
	pre0 = serve_counter(&e, "prefill_started");
	work0 = work_of(&decode);
	load_ok(&e, 8);
	g_assert_cmpint(serve_counter(&e, "aggregate_started"), ==, agg0 + 8);
	g_assert_cmpint(serve_counter(&e, "prefill_started"), ==, pre0);
	g_assert_cmpint(work_of(&decode), >=, work0 + 8);
	/* The decode engine cannot move: the decode floor holds it. */
	g_assert_cmpstr(role_of(&e, "sim-1", role), ==, "decode");

	clear_faults(&prefill);
	g_assert_true(wait_available(&e, "sim-0", TRUE, WAIT_MS));
	g_assert_cmpstr(role_of(&e, "sim-0", role), ==, "prefill");
	agg0 = serve_counter(&e, "aggregate_started");
	pre0 = serve_counter(&e, "prefill_started");
	load_ok(&e, 4);
	g_assert_cmpint(serve_counter(&e, "aggregate_started"), ==, agg0);
	g_assert_cmpint(serve_counter(&e, "prefill_started"), ==, pre0 + 4);
	assert_reconciled(&e);
	serve_clear(&e);
}

/* issue 10: "Health is no longer ok with a whole pool dead". Both prefill
 * engines refusing: requests keep succeeding (spec 7.2: the prefill floor
 * takes a decode engine at once, though no engine's dwell is over;
 * aggregate legs until then). Every engine
 * refusing: requests get 503 no_engine with Retry-After and health is 503
 * unavailable. Everything back: every engine is verified and in. */
static void
test_dead_pool(void)
{
	struct serve_env e;
	json_t *doc;
	json_int_t p, d;
	gboolean breach;
	long status;
	gint64 deadline;

	g_test_summary("/recovery/issue10/dead-pool: both prefill engines refusing: requests "
	               "succeed (floor repair or aggregate legs); every engine refusing: 503 "
	               "no_engine with Retry-After and health 503 unavailable; all back after");
	if (!start(&e, 4, "ppdd", "{\"controller\": {\"thresholds\": {\"dwell_s\": 600}}}"))
		return;
	g_assert_cmpint(sim_set_faults(&e.sim, 0, "{\"refuse_connections\": true}"), ==, 200);
	g_assert_cmpint(sim_set_faults(&e.sim, 1, "{\"refuse_connections\": true}"), ==, 200);
	/* A request could fail here on both prefill engines in turn: wait for
	 * the probes (two passes) instead of sending requests. */
	g_assert_true(wait_available(&e, "sim-0", FALSE, WAIT_MS));
	g_assert_true(wait_available(&e, "sim-1", FALSE, WAIT_MS));
	load_ok(&e, 8);
	g_assert_cmpint(wait_event(&e, 0, "role_change", "reason", "prefill_below_floor", WAIT_MS),
	                >=, 0);
	roles_of(&e, &p, &d, &breach);
	g_assert_cmpint(p, ==, 1);
	g_assert_cmpint(d, ==, 1);
	load_ok(&e, 8);
	doc = health_with_status(&e, &status);
	g_assert_cmpint(status, ==, 200);
	g_assert_cmpstr(str_of(doc, "status"), ==, "degraded");
	g_assert_true(has_reason(doc, "engines_out"));
	json_decref(doc);

	/* Every engine refusing. */
	g_assert_cmpint(sim_set_faults(&e.sim, 2, "{\"refuse_connections\": true}"), ==, 200);
	g_assert_cmpint(sim_set_faults(&e.sim, 3, "{\"refuse_connections\": true}"), ==, 200);
	deadline = g_get_monotonic_time() + WAIT_MS * 1000;
	for (;;) {
		doc = health_with_status(&e, &status);
		if (status == 503)
			break;
		json_decref(doc);
		if (g_get_monotonic_time() >= deadline)
			fail(&e, "health never said unavailable with every engine out");
		g_usleep(10000);
	}
	g_assert_cmpstr(str_of(doc, "status"), ==, "unavailable");
	g_assert_true(has_reason(doc, "no_live_engine"));
	json_decref(doc);
	for (unsigned kind = 0; kind < 4; kind++) {
		g_autofree char *body = body_of(&e, kind);
		g_autofree char *retry_after = NULL;
		struct sim_reply r;

		serve_post(&e, path_of(kind), body, NULL, 10000, &r);
		serve_assert_error(&r, 503, "no_engine");
		retry_after = sim_reply_header(&r, "Retry-After");
		g_assert_nonnull(retry_after);
		g_assert_cmpint(atoi(retry_after), >=, 1);
		sim_reply_clear(&r);
	}

	for (unsigned i = 0; i < 4; i++) {
		struct engine en = { &e.sim, i, sim_ids[i] };

		clear_faults(&en);
	}
	g_assert_true(serve_wait_all_available(&e, WAIT_MS));
	load_ok(&e, 4);
	assert_reconciled(&e);
	serve_clear(&e);
}

/* --- the degraded state ---------------------------------------------------- */

/* Spec 7, controller.monitor_failure_limit: the mock dialect of one engine
 * builds its metrics call without a path the host accepts (a dialect
 * builder's fault: the monitor's own failure, docs/recovery.md), so every
 * pass has a monitoring failure. After the limit new requests get 503 degraded with
 * Retry-After and health is 503 unavailable (monitoring_failures); once a
 * pass is clean (the engine's health fails, so its metrics are not read:
 * an engine that is down is no monitoring failure) admission resumes. */
static void
test_degraded(void)
{
	struct serve_env e;
	char *dir;
	g_autofree char *cfg = NULL;
	json_t *doc, *failure;
	long status;
	gint64 t_stop, t_resume;

	g_test_summary("/recovery/spec-7/degraded: monitor_failure_limit failed passes in a row "
	               "stop admission (503 degraded, Retry-After; health 503 unavailable, "
	               "monitoring_failures); a clean pass resumes it");
	if (!start(&e, 3, "pdd", NULL))
		return;
	dir = serve_plugin_dir_new();
	{
		g_autofree char *extra = g_strdup_printf(
			"{\"plugins\": {\"dir\": \"%s\", \"dialects\": {\"mock\": {\"metrics_path\": \"m\"}}},"
			" \"controller\": {\"monitor_failure_limit\": 3}}", dir);

		cfg = config_with(extra);
	}
	t_stop = g_get_monotonic_time();
	serve_restart_with_dialects(&e, "vvm", cfg);
	if (serve_wait_log(&e, "\"event\":\"admission_stopped\"", WAIT_MS) == FALSE)
		fail(&e, "admission never stopped");
	t_stop = g_get_monotonic_time() - t_stop;

	doc = health_with_status(&e, &status);
	g_assert_cmpint(status, ==, 503);
	g_assert_cmpstr(str_of(doc, "status"), ==, "unavailable");
	g_assert_true(has_reason(doc, "monitoring_failures"));
	g_assert_cmpint(json_integer_value(json_object_get(json_object_get(doc, "monitor"),
	                "failed_passes")), >=, 3);
	failure = json_array_get(json_object_get(json_object_get(doc, "monitor"), "last_failures"), 0);
	g_assert_cmpstr(str_of(failure, "engine"), ==, "sim-2");
	g_assert_cmpstr(str_of(failure, "stage"), ==, "metrics");
	json_decref(doc);
	for (unsigned kind = 0; kind < 2; kind++) {
		g_autofree char *body = body_of(&e, kind);
		g_autofree char *retry_after = NULL;
		struct sim_reply r;

		serve_post(&e, path_of(kind), body, NULL, 10000, &r);
		serve_assert_error(&r, 503, "degraded");
		retry_after = sim_reply_header(&r, "Retry-After");
		g_assert_nonnull(retry_after);
		g_assert_cmpint(atoi(retry_after), >=, 1);
		sim_reply_clear(&r);
	}
	g_assert_cmpint(serve_counter(&e, "refused_degraded"), ==, 2);

	/* The cause goes: the engine's health fails, its metrics are not read,
	 * and the next pass is clean. */
	t_resume = g_get_monotonic_time();
	g_assert_cmpint(sim_set_faults(&e.sim, 2, "{\"unhealthy\": true}"), ==, 200);
	if (!serve_wait_log(&e, "\"event\":\"admission_resumed\"", WAIT_MS))
		fail(&e, "admission never resumed after a clean pass");
	t_resume = g_get_monotonic_time() - t_resume;
	doc = health_with_status(&e, &status);
	g_assert_cmpint(status, ==, 200);
	g_assert_false(has_reason(doc, "monitoring_failures"));
	json_decref(doc);
	load_ok(&e, 4);
	assert_reconciled(&e);
	g_test_message("admission stopped %.2f s after start, resumed %.2f s after the cause went",
	               t_stop / 1e6, t_resume / 1e6);
	serve_clear(&e);
	serve_plugin_dir_free(dir);
}

/* Issue 10 ("hanging before its first token") on a prefill engine whose
 * health still passes: its prefill legs never answer, so no first-token
 * timeout sees it; the stall check (recovery.stall_s, docs/recovery.md)
 * ejects it, the requests caught on it retry once serving.handoff_timeout_s
 * passes, and new requests go to the healthy prefill engine. */
static void
test_stalled_prefill(void)
{
	struct serve_env e;
	json_t *h;
	json_int_t placed;

	g_test_summary("/recovery/issue10/stalled-prefill: a hung prefill engine whose health "
	               "passes is ejected as stalled and requests succeed on the others");
	if (!start(&e, 4, "ppdd", "{\"recovery\": {\"stall_s\": 0.5}}"))
		return;
	g_assert_cmpint(sim_set_faults(&e.sim, 0, "{\"hang_before_first_token\": true}"), ==, 200);
	/* The first requests may be placed on it and wait out their handoff
	 * timeout before a retry: every one succeeds. */
	load_ok(&e, 4);
	if (!serve_wait_log(&e, "\"reason\":\"stalled\"", WAIT_MS))
		fail(&e, "the hung prefill engine was never found stalled");
	h = engine_health(&e, "sim-0");
	g_assert_false(json_is_true(json_object_get(h, "available")));
	placed = json_integer_value(json_object_get(h, "legs_placed"));
	json_decref(h);
	load_ok(&e, 8);
	h = engine_health(&e, "sim-0");
	g_assert_cmpint(json_integer_value(json_object_get(h, "legs_placed")), ==, placed);
	json_decref(h);
	g_assert_cmpint(sim_set_faults(&e.sim, 0, "{\"hang_before_first_token\": false}"), ==, 200);
	g_assert_true(serve_wait_all_available(&e, WAIT_MS));
	assert_reconciled(&e);
	serve_clear(&e);
}

/* docs/recovery.md ("Degraded state"): one engine whose metrics cannot be
 * read is that engine's problem, logged, not a monitoring failure that
 * stops the fleet, while the other engines' metrics are read. */
static void
test_one_unreadable_engine(void)
{
	struct serve_env e;
	char *dir;
	g_autofree char *cfg = NULL, *log = NULL;
	json_t *doc;
	long status;
	json_int_t passes = 0;
	gint64 deadline;

	g_test_summary("/recovery/issue10/one-unreadable-engine: one engine's unreadable metrics "
	               "do not stop admission");
	if (!start(&e, 3, "pdd", NULL))
		return;
	dir = serve_plugin_dir_new();
	{
		g_autofree char *extra = g_strdup_printf(
			"{\"plugins\": {\"dir\": \"%s\", \"dialects\": {\"mock\": {\"metrics_rc\": -71}}},"
			" \"controller\": {\"monitor_failure_limit\": 3}}", dir);

		cfg = config_with(extra);
	}
	serve_restart_with_dialects(&e, "vvm", cfg);
	g_assert_true(serve_wait_log(&e, "\"event\":\"monitor_failure\"", WAIT_MS));
	/* Six passes or more: twice the limit. */
	deadline = g_get_monotonic_time() + WAIT_MS * 1000;
	while (passes < 6 && g_get_monotonic_time() < deadline) {
		doc = health_with_status(&e, &status);
		passes = json_integer_value(json_object_get(json_object_get(doc, "monitor"), "passes"));
		json_decref(doc);
		g_usleep(20000);
	}
	g_assert_cmpint(passes, >=, 6);
	doc = health_with_status(&e, &status);
	g_assert_cmpint(status, ==, 200);
	g_assert_false(has_reason(doc, "monitoring_failures"));
	g_assert_cmpint(json_integer_value(json_object_get(json_object_get(doc, "monitor"),
	                "failed_passes")), ==, 0);
	json_decref(doc);
	log = serve_log(&e);
	g_assert_null(strstr(log, "admission_stopped"));
	load_ok(&e, 4);
	assert_reconciled(&e);
	serve_clear(&e);
	serve_plugin_dir_free(dir);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	for (size_t i = 0; i < G_N_ELEMENTS(fault_cases); i++)
		g_test_add_data_func(fault_cases[i].path, &fault_cases[i], run_fault_case);
	g_test_add_func("/recovery/spec-7/flapping-health", test_flapping_health);
	g_test_add_func("/recovery/issue10/sigkill-restart", test_killed_and_restarted);
	g_test_add_func("/recovery/issue10/restart-start-time", test_restart_between_probes);
	g_test_add_func("/recovery/spec-7.2/floor-repair", test_floor_repair);
	g_test_add_func("/recovery/spec-7.2/floor-advisory", test_floor_advisory);
	g_test_add_func("/recovery/role-control/aggregate-fallback", test_aggregate_fallback);
	g_test_add_func("/recovery/issue10/dead-pool", test_dead_pool);
	g_test_add_func("/recovery/spec-7/degraded", test_degraded);
	g_test_add_func("/recovery/issue10/one-unreadable-engine", test_one_unreadable_engine);
	g_test_add_func("/recovery/issue10/stalled-prefill", test_stalled_prefill);
	return g_test_run();
}
