/*
 * Engine lifecycle through every engine backend (issue 14: "the same
 * integration suite runs through Narwhal for vLLM, SGLang and llama.cpp
 * fleets"; the vLLM suites are test-recovery.c, test-admin.c and
 * test-admission.c): an operator's drain, an engine whose dialect's health
 * route says it is down, an engine killed and started again, and
 * admission refusing with Retry-After when the fleet is full. Each runs on
 * narwhal-sim fleets whose engines speak their dialect: SGLang
 * prefill/decode pairs, SGLang aggregate engines, llama.cpp engines, and a
 * llama.cpp engine beside a vLLM pair. Each test names its clause.
 *
 * Placement breaks ties by engine index, so a quiet fleet's requests go to
 * its `first` engine and are generated on `gen`.
 */
#include "build-config.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "integration/test-serve-common.h"

struct fleet {
	const char *name;
	const char *dialects; /* serve_start_dialects */
	const char *roles;
	gboolean pairs;       /* requests run as prefill/decode pairs */
	unsigned first;       /* takes a quiet fleet's requests (prefill, or whole) */
	unsigned gen;         /* generates them (its decode, or first) */
	/* The kill: victim engines in a narwhal-sim of their own (ids a-0 ...,
	 * first in the fleet, so they win ties), beside the main fleet. */
	const char *victim_dialects, *victim_roles;
	const char *main_dialects, *main_roles;
};

static const struct fleet fleets[] = {
	/* The victim is a whole SGLang pair: both roles go down together,
	 * and only an aggregate engine serves meanwhile. */
	{ "sglang-pd", "ssss", "ppdd", TRUE, 0, 2, "ss", "pd", "s", "a" },
	{ "sglang-aggregate", "ss", "aa", FALSE, 0, 0, "s", "a", "s", "a" },
	{ "llamacpp", "ll", "aa", FALSE, 0, 0, "l", "a", "l", "a" },
	{ "mixed", "lvv", "dpd", FALSE, 0, 0, "l", "a", "vv", "pd" },
};

#define TOKEN_ENV "NARWHAL_TEST_DIALECT_ADMIN_TOKEN"
#define TOKEN "dialect-admin-token"
#define WAIT_MS 8000
#define LOAD_MAX_REQUESTS 200
#define LOAD_MAX_MS 8000

/* A fast monitor and verification; retries for requests that meet a
 * fault; the admin listener on a free port. */
static const char base_config[] =
	"{\"controller\": {\"monitor_interval_s\": 0.1},"
	" \"recovery\": {\"verify_backoff_s\": 0.2, \"verify_backoff_max_s\": 0.5},"
	" \"engine\": {\"first_token_timeout_s\": 1.0, \"health_timeout_s\": 1.0},"
	" \"serving\": {\"max_attempts\": 3, \"handoff_timeout_s\": 5,"
	"               \"retry_base_s\": 0.01, \"retry_cap_s\": 0.02},"
	" \"admin\": {\"port\": 0, \"token_env\": \"" TOKEN_ENV "\"}}";

static const char *const fast_sim[] = { "--time-scale", "50", NULL };

static gboolean
start(struct serve_env *e, const struct fleet *f, const char *const *sim_args, const char *extra)
{
	g_autofree char *cfg = serve_json_merged_text(base_config, extra);

	if (!serve_start_dialects(e, f->dialects, f->roles, sim_args ? sim_args : fast_sim, cfg))
		return FALSE;
	if (!serve_wait_all_available(e, WAIT_MS))
		serve_fail(e, "the engines did not all become available");
	return TRUE;
}

static const char *
id_of(const struct serve_env *e, unsigned engine)
{
	return json_string_value(json_object_get(json_array_get(json_object_get(e->sim.fleet,
	                                                                        "engines"),
	                                                        engine), "id"));
}

/* One engine's entry of GET path (/narwhal/health or /narwhal/state),
 * owned. */
static json_t *
engine_entry(struct serve_env *e, const char *path, const char *id)
{
	struct sim_reply r;
	json_t *doc, *engine, *found = NULL;
	size_t i;

	sim_http(e->port, "GET", path, NULL, NULL, 5000, &r);
	doc = sim_json(r.body->str);
	sim_reply_clear(&r);
	json_array_foreach(json_object_get(doc, "engines"), i, engine) {
		if (g_strcmp0(json_string_value(json_object_get(engine, "id")), id) == 0)
			found = json_incref(engine);
	}
	json_decref(doc);
	if (found == NULL)
		serve_fail(e, "an engine is missing from the daemon's documents");
	return found;
}

static json_int_t
legs_placed(struct serve_env *e, const char *id)
{
	json_t *h = engine_entry(e, "/narwhal/health", id);
	json_int_t n = json_integer_value(json_object_get(h, "legs_placed"));

	json_decref(h);
	return n;
}

static gboolean
available(struct serve_env *e, const char *id)
{
	json_t *h = engine_entry(e, "/narwhal/health", id);
	gboolean v = json_is_true(json_object_get(h, "available"));

	json_decref(h);
	return v;
}

static gboolean
wait_available(struct serve_env *e, const char *id, gboolean want)
{
	gint64 deadline = g_get_monotonic_time() + (gint64)WAIT_MS * 1000;

	while (available(e, id) != want) {
		if (g_get_monotonic_time() >= deadline)
			return FALSE;
		g_usleep(10000);
	}
	return TRUE;
}

/* The reason an engine is out of placement (owned; NULL while live). */
static char *
reason_of(struct serve_env *e, const char *id)
{
	json_t *h = engine_entry(e, "/narwhal/health", id);
	char *reason = g_strdup(json_string_value(json_object_get(h, "reason")));

	json_decref(h);
	return reason;
}

static void
load_ok(struct serve_env *e, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		serve_request_whole(e, i % 2, 4);
}

/* Whole requests, one at a time, until no victim is available (bounded
 * in count and time); each must succeed (a retry covers one that met the
 * fault). */
static void
drive_until_out(struct serve_env *e, const char *const *ids, unsigned n)
{
	gint64 deadline = g_get_monotonic_time() + LOAD_MAX_MS * 1000;

	for (unsigned sent = 0;; sent++) {
		gboolean out = TRUE;

		for (unsigned v = 0; v < n; v++)
			out = out && !available(e, ids[v]);
		if (out)
			return;
		if (sent >= LOAD_MAX_REQUESTS || g_get_monotonic_time() >= deadline)
			serve_fail(e, "the engine was not taken out of placement in time");
		serve_request_whole(e, FALSE, 4);
		g_usleep(20000);
	}
}

/* The log's engine_readmitted line for id, after at (an offset into the
 * log), within the bound. */
static gboolean
wait_readmitted(struct serve_env *e, size_t at, const char *id)
{
	g_autofree char *needle = g_strdup_printf("\"event\":\"engine_readmitted\",\"engine\":\"%s\"",
	                                          id);
	gint64 deadline = g_get_monotonic_time() + (gint64)WAIT_MS * 1000;

	do {
		g_autofree char *log = serve_log(e);

		if (strlen(log) > at && strstr(log + at, needle) != NULL)
			return TRUE;
		g_usleep(10000);
	} while (g_get_monotonic_time() < deadline);
	return FALSE;
}

static size_t
log_size(struct serve_env *e)
{
	g_autofree char *log = serve_log(e);

	return strlen(log);
}

/* --- the admin API --------------------------------------------------- */

static guint16
admin_port(struct serve_env *e)
{
	g_autofree char *log = serve_log(e);
	const char *at = strstr(log, "\"event\":\"admin_listening\"");

	if (at == NULL || (at = strstr(at, "\"port\":\"")) == NULL)
		serve_fail(e, "no admin_listening line");
	return (guint16)atoi(at + strlen("\"port\":\""));
}

/* POST /admin/engines/<id>/<action>; the status. */
static long
engine_action(struct serve_env *e, const char *id, const char *action)
{
	static const char *const headers[] = { "Content-Type: application/json",
	                                       "Authorization: Bearer " TOKEN, NULL };
	g_autofree char *path = g_strdup_printf("/admin/engines/%s/%s", id, action);
	struct sim_reply r;
	long status;

	sim_http(admin_port(e), "POST", path, NULL, headers, 5000, &r);
	status = r.status;
	sim_reply_clear(&r);
	return status;
}

/* A field of an engine's drain in /narwhal/state. */
static gboolean
drain_flag(struct serve_env *e, const char *id, const char *key)
{
	json_t *s = engine_entry(e, "/narwhal/state", id);
	gboolean v = json_is_true(json_object_get(json_object_get(s, "drain"), key));

	json_decref(s);
	return v;
}

/* Issue 11's admin drain (docs/admin.md; spec 5: "Lifecycle drains ...
 * remain active") on each dialect's engine: the generating engine of a
 * stream in flight is drained; the stream finishes whole, new requests
 * all succeed and none is placed on it, the drain completes once the
 * stream is done, and undrain puts it back into placement. */
static void
test_drain(gconstpointer data)
{
	const struct fleet *f = data;
	struct serve_env e;
	struct serve_async *stream;
	struct sim_reply r;
	g_autofree char *body = NULL;
	const char *id;
	json_int_t placed;
	gint64 deadline;

	if (!start(&e, f, NULL, NULL))
		return;
	id = id_of(&e, f->gen);
	/* 20 ms model steps twenty times longer at time scale 50: 8 ms a
	 * token, so 100 tokens last most of a second. */
	g_assert_cmpint(sim_set_faults(&e.sim, f->gen, "{\"latency_multiplier\": 20}"), ==, 200);
	body = serve_completion_body(&e, 100, TRUE);
	stream = serve_post_async(&e, "/v1/completions", body, 20000);
	if (!serve_wait_stat(&e, f->gen, "running", 1, 5000))
		serve_fail(&e, "the stream never ran on the engine to drain");
	g_assert_cmpint(engine_action(&e, id, "drain"), ==, 200);
	g_assert_true(drain_flag(&e, id, "draining"));
	g_assert_false(available(&e, id));
	placed = legs_placed(&e, id);
	load_ok(&e, 4);
	g_assert_cmpint(legs_placed(&e, id), ==, placed);

	serve_async_join(stream, &r, NULL);
	if (!serve_stream_whole(&r))
		serve_fail(&e, "the drained engine's stream did not finish whole");
	sim_reply_clear(&r);
	deadline = g_get_monotonic_time() + (gint64)WAIT_MS * 1000;
	while (!drain_flag(&e, id, "drained")) {
		if (g_get_monotonic_time() >= deadline)
			serve_fail(&e, "the drain never completed");
		g_usleep(10000);
	}
	g_assert_cmpint(serve_counter(&e, "requests_failed"), ==, 0);

	g_assert_cmpint(sim_reset_faults(&e.sim), ==, 200);
	g_assert_cmpint(engine_action(&e, id, "undrain"), ==, 200);
	if (!wait_available(&e, id, TRUE))
		serve_fail(&e, "the engine did not come back after undrain");
	load_ok(&e, 2);
	g_assert_cmpint(legs_placed(&e, id), >, placed);
	serve_finish(&e);
}

/* Issue 14 ("its health route"; llama.cpp's /health answers 503 while it
 * loads) and docs/recovery.md, failed probes: the engine that takes new
 * work says through its dialect's health route that it is down; the
 * monitor takes it out of placement with no request sent, every request
 * succeeds on the others meanwhile, and once its health passes it is
 * verified (real legs in its dialect), readmitted and takes work again. */
static void
test_health_route(gconstpointer data)
{
	const struct fleet *f = data;
	struct serve_env e;
	g_autofree char *reason = NULL;
	const char *id;
	json_int_t placed;
	size_t at;

	if (!start(&e, f, NULL, NULL))
		return;
	id = id_of(&e, f->first);
	g_assert_cmpint(sim_set_faults(&e.sim, f->first, "{\"unhealthy\": true}"), ==, 200);
	if (!wait_available(&e, id, FALSE))
		serve_fail(&e, "an engine whose health says it is down stayed in placement");
	reason = reason_of(&e, id);
	g_assert_cmpstr(reason, ==, "probe_failures");
	placed = legs_placed(&e, id);
	load_ok(&e, 4);
	g_assert_cmpint(legs_placed(&e, id), ==, placed);
	g_assert_cmpint(serve_counter(&e, "retries"), ==, 0);

	at = log_size(&e);
	g_assert_cmpint(sim_reset_faults(&e.sim), ==, 200);
	if (!wait_available(&e, id, TRUE) || !wait_readmitted(&e, at, id))
		serve_fail(&e, "the engine was not readmitted once its health passed");
	load_ok(&e, 2);
	g_assert_cmpint(legs_placed(&e, id), >=, placed + 2);
	serve_finish(&e);
}

/* --- an engine killed and started again -------------------------------- */

/* A port p such that p and p + 1 are both free now (the victim's engines
 * listen on consecutive ports, so that they can come back on the same). */
static guint16
free_port_pair(void)
{
	for (int attempt = 0; attempt < 50; attempt++) {
		struct sockaddr_in a = { .sin_family = AF_INET };
		socklen_t len = sizeof a;
		int s0 = socket(AF_INET, SOCK_STREAM, 0), s1 = socket(AF_INET, SOCK_STREAM, 0);
		int on = 1;
		guint16 port = 0;

		/* As the engines bind: a port whose old connections wait out
		 * TIME_WAIT is free for them. */
		setsockopt(s0, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
		setsockopt(s1, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		if (bind(s0, (struct sockaddr *)&a, sizeof a) == 0 &&
		    getsockname(s0, (struct sockaddr *)&a, &len) == 0 && ntohs(a.sin_port) < 65535) {
			a.sin_port = htons(ntohs(a.sin_port) + 1);
			if (bind(s1, (struct sockaddr *)&a, sizeof a) == 0)
				port = ntohs(a.sin_port) - 1;
		}
		close(s0);
		close(s1);
		if (port != 0)
			return port;
	}
	g_error("no two consecutive free ports on loopback");
}

/* narwhal-sim with the victim's engines (ids a-0 ...) on ports from base
 * (0: ephemeral ones). */
static void
victim_start(struct sim_proc *v, const struct fleet *f, guint16 base)
{
	g_autofree char *n = g_strdup_printf("%zu", strlen(f->victim_dialects));
	g_autofree char *port = g_strdup_printf("%u", base);
	g_autofree char *dialects = serve_sim_dialects(f->victim_dialects, f->victim_roles);
	const char *const args[] = { "--engines", n, "--dialect", dialects, "--time-scale", "50",
	                             "--id-prefix", "a-", "--base-port", port, NULL };

	g_assert_true(sim_start(v, args));
	if (base != 0)
		g_assert_cmpuint(v->ports[0], ==, base);
}

/* The fleet with the victim's engines first, in their roles, and what the
 * sglang dialect must be told of them (docs/dialects.md: an aggregate
 * engine runs without --disaggregation-mode); a config text. */
static char *
victim_config(struct serve_env *e, const struct sim_proc *v, const struct fleet *f)
{
	json_t *engines = json_array(), *sglang = json_object(), *cfg;
	char *text;

	for (size_t i = 0; f->victim_roles[i]; i++) {
		json_t *en = json_deep_copy(json_array_get(json_object_get(v->fleet, "engines"), i));
		char role = f->victim_roles[i];

		if (role == 'a') {
			json_object_del(en, "role");
			if (f->victim_dialects[i] == 's')
				json_object_set_new(sglang, json_string_value(json_object_get(en, "id")),
				                    json_pack("{s:b}", "disaggregation", 0));
		} else {
			json_object_set_new(en, "role", json_string(role == 'p' ? "prefill" : "decode"));
		}
		json_array_append_new(engines, en);
	}
	json_array_extend(engines, json_object_get(e->sim.fleet, "engines"));
	cfg = sim_json(base_config);
	json_object_set_new(cfg, "fleet", json_pack("{s:o}", "engines", engines));
	if (json_object_size(sglang) > 0)
		json_object_set_new(cfg, "plugins", json_pack("{s:{s:{s:O}}}", "dialects", "sglang",
		                                              "engines", sglang));
	json_decref(sglang);
	text = json_dumps(cfg, JSON_COMPACT);
	json_decref(cfg);
	return text;
}

/* The victim's work: generation requests, or for a pair the handoffs its
 * prefill engine served. */
static json_int_t
victim_work(const struct sim_proc *v, const struct fleet *f)
{
	return sim_engine_stat(v, 0, f->pairs ? "kv_pulls_served" : "work_requests_total");
}

/* Issue 10 ("an engine killed with SIGKILL ... restarted") through each
 * dialect: the victim's narwhal-sim is killed; the monitor takes its
 * engines out (their health probes and legs fail), every request succeeds
 * on the rest meanwhile; started again on the same ports, its engines are
 * verified in their dialect, readmitted, and serve. For SGLang the victim
 * is a prefill/decode pair that goes down together: each engine's
 * verification needs the other (docs/recovery.md). */
static void
test_kill_restart(gconstpointer data)
{
	const struct fleet *f = data;
	size_t n = strlen(f->victim_dialects);
	const char *ids[2] = { "a-0", "a-1" };
	struct serve_env e;
	struct sim_proc v;
	g_autofree char *cfg = NULL;
	guint16 base;
	size_t at;

	if (!serve_start_dialects(&e, f->main_dialects, f->main_roles, fast_sim, base_config))
		return;
	base = n > 1 ? free_port_pair() : 0;
	victim_start(&v, f, base);
	base = v.ports[0];
	cfg = victim_config(&e, &v, f);
	g_test_message("victim fleet: %s", cfg);
	g_assert_cmpint(serve_stop_daemon(&e, SIGTERM, 10000), ==, 0);
	if (!serve_start_daemon(&e, cfg, NULL) || !serve_wait_all_available(&e, WAIT_MS))
		serve_fail(&e, "narwhal did not start with the victim's fleet");
	load_ok(&e, 4);
	g_assert_cmpint(victim_work(&v, f), >=, 4);

	g_assert_cmpint(sim_stop(&v, SIGKILL, 5000), ==, -1);
	sim_clear(&v);
	drive_until_out(&e, ids, (unsigned)n);
	for (size_t i = 0; i < n; i++) {
		g_autofree char *reason = reason_of(&e, ids[i]);

		if (g_strcmp0(reason, "probe_failures") != 0 && g_strcmp0(reason, "leg_failures") != 0)
			serve_fail(&e, "the killed engine is out for another reason");
	}
	load_ok(&e, 4);

	at = log_size(&e);
	victim_start(&v, f, base);
	for (size_t i = 0; i < n; i++) {
		if (!wait_available(&e, ids[i], TRUE) || !wait_readmitted(&e, at, ids[i]))
			serve_fail(&e, "the restarted engine was not readmitted");
	}
	load_ok(&e, 4);
	/* A new process: its counts start from zero. */
	g_assert_cmpint(victim_work(&v, f), >=, 4);
	g_assert_cmpint(serve_counter(&e, "requests_failed"), ==, 0);
	serve_finish(&e);
	g_assert_cmpint(sim_stop(&v, SIGTERM, 10000), ==, 0);
	sim_clear(&v);
}

/* --- admission --------------------------------------------------------- */

/* A completion whose prompt is `tokens` token ids (an exact count). */
static char *
ids_body(const struct serve_env *e, unsigned tokens)
{
	GString *b = g_string_new(NULL);

	g_string_append_printf(b, "{\"model\":\"%s\",\"max_tokens\":4,\"prompt\":[", e->model);
	for (unsigned i = 0; i < tokens; i++)
		g_string_append_printf(b, "%s%u", i ? "," : "", 100 + i % 1000);
	g_string_append(b, "]}");
	return g_string_free(b, FALSE);
}

/* Spec 4.1: predictive admission prices every prefill path against the
 * TTFT target, "Backlog-driven refusals include Retry-After with the
 * projected wait", whatever the engines speak. With every engine hung,
 * requests whose prefill alone fits the target (1,500 tokens: about
 * 1.9 s against 3 s) are admitted until each path has one ahead; the
 * next is refused 429 overloaded with a Retry-After of whole seconds. The
 * profiles are ten times slower than the simulator's: the projection takes
 * off the time a prefill ahead has been running, so the test's own pace
 * must stay small against the margin (about 1 s here). */
static void
test_admission_full(gconstpointer data)
{
	static const char *const sim_args[] = { "--time-scale", "1", NULL };
	const struct fleet *f = data;
	struct serve_async *held[8];
	struct serve_store s;
	struct serve_env e;
	struct sim_reply r = { 0 };
	g_autofree char *cfg = NULL, *body = NULL, *retry_after = NULL;
	unsigned n_held = 0;

	serve_store_write(&s, (unsigned)strlen(f->dialects), 0.1);
	/* The held requests wait for the end (no first-token limit). */
	cfg = g_strdup_printf("{\"serving\": {\"admission\": \"predictive\"},"
	                      " \"engine\": {\"first_token_timeout_s\": 60},"
	                      " \"slo\": {\"ttft_s\": 3, \"tpot_s\": 5},"
	                      " \"profiles\": {\"path\": \"%s\"},"
	                      " \"plugins\": {\"placement\": {\"name\": \"slo-cost\"}},"
	                      " \"server\": {\"drain_timeout_s\": 0}}", s.path);
	if (!start(&e, f, sim_args, cfg)) {
		serve_store_clear(&s);
		return;
	}
	for (unsigned i = 0; i < e.sim.n_engines; i++)
		g_assert_cmpint(sim_set_faults(&e.sim, i, "{\"hang_before_first_token\": true}"), ==,
		                200);
	body = ids_body(&e, 1500);
	/* One at a time, each admitted and on its engine before the next is
	 * priced, until one is refused; at most one more than the engines. */
	while (r.status != 429) {
		json_int_t admitted = serve_counter(&e, "admitted");
		json_int_t refused = serve_counter(&e, "refused_admission");
		gint64 deadline = g_get_monotonic_time() + 5 * G_USEC_PER_SEC;
		struct serve_async *a;

		if (n_held > e.sim.n_engines)
			serve_fail(&e, "a full fleet still admitted requests");
		a = serve_post_async(&e, "/v1/completions", body, 20000);
		while (serve_counter(&e, "admitted") == admitted &&
		       serve_counter(&e, "refused_admission") == refused) {
			if (g_get_monotonic_time() >= deadline)
				serve_fail(&e, "a request was neither admitted nor refused");
			g_usleep(2000);
		}
		if (serve_counter(&e, "refused_admission") > refused) {
			serve_async_join(a, &r, NULL);
			break;
		}
		held[n_held++] = a;
		/* On its engine (a pair's request on both of its engines; the
		 * monitor's calls count while they last). */
		while (sim_fleet_stat(&e.sim, "active_requests") < n_held) {
			if (g_get_monotonic_time() >= deadline)
				serve_fail(&e, "an admitted request did not reach its engine");
			g_usleep(2000);
		}
	}
	g_test_message("%u admitted before the refusal", n_held);
	g_assert_cmpuint(n_held, >=, 1);
	serve_assert_error(&r, 429, "overloaded");
	retry_after = sim_reply_header(&r, "Retry-After");
	g_assert_nonnull(retry_after);
	g_assert_cmpint(atoi(retry_after), >=, 1);
	sim_reply_clear(&r);

	/* The held ones end with the daemon (drain_timeout_s 0). */
	g_assert_cmpint(serve_stop_daemon(&e, SIGTERM, 10000), ==, 0);
	for (unsigned i = 0; i < n_held; i++) {
		serve_async_join(held[i], &r, NULL);
		serve_assert_error(&r, 503, "shutting_down");
		sim_reply_clear(&r);
	}
	serve_finish(&e);
	serve_store_clear(&s);
}

int
main(int argc, char **argv)
{
	static const struct {
		const char *path;
		GTestDataFunc fn;
	} scenarios[] = {
		{ "issue-11/drain", test_drain },
		{ "issue-14/health-route", test_health_route },
		{ "issue-10/kill-restart", test_kill_restart },
		{ "spec-4.1/admission-retry-after", test_admission_full },
	};

	g_test_init(&argc, &argv, NULL);
	/* The daemons inherit the admin token. */
	g_setenv(TOKEN_ENV, TOKEN, TRUE);
	for (size_t i = 0; i < G_N_ELEMENTS(fleets); i++) {
		for (size_t j = 0; j < G_N_ELEMENTS(scenarios); j++) {
			g_autofree char *path = g_strdup_printf("/serve/dialect-recovery/%s/%s",
			                                        fleets[i].name, scenarios[j].path);

			g_test_add_data_func(path, &fleets[i], scenarios[j].fn);
		}
	}
	return g_test_run();
}
