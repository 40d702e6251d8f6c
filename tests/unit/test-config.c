/*
 * Configuration loader tests, table-driven: every field's default, both
 * sides of every range boundary, each cross-field rule accepted and refused,
 * then the fleet, unknown keys, types, whole-document problems, derived
 * values and the effective configuration. A test path that starts with
 * spec-X.Y checks that clause of the specification; "narwhal" marks fields
 * and rules that are Narwhal's own. Expectations are written from the spec
 * and the docs, not read from the field table, so a wrong table row fails.
 */
#include "core/config.h"

#include <glib.h>
#include <glib/gstdio.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Two engines and nothing else: every other field takes its default. */
static const char base_doc[] =
	"{\"fleet\": {\"engines\": ["
	"{\"id\": \"e1\", \"url\": \"http://127.0.0.1:8101\"},"
	"{\"id\": \"e2\", \"url\": \"http://127.0.0.1:8102\"}]}}";

/* ------------------------------------------------------------ helpers --- */

/* Merge src into dst: objects recursively, anything else replaces. */
static void
merge(json_t *dst, json_t *src)
{
	const char *k;
	json_t *v;

	json_object_foreach(src, k, v) {
		json_t *d = json_object_get(dst, k);
		if (json_is_object(d) && json_is_object(v))
			merge(d, v);
		else
			json_object_set(dst, k, v);
	}
}

static json_t *
parse(const char *text)
{
	json_error_t err;
	json_t *j = json_loads(text, JSON_DECODE_ANY, &err);

	if (!j)
		g_error("test JSON does not parse: %s: %s", text, err.text);
	return j;
}

/* The node at a dotted path with [i] indexes (fleet.engines[1].role), or
 * NULL. With value (stolen), set it there, making objects on the way. */
static json_t *
at_path(json_t *root, const char *path, json_t *value)
{
	char **parts = g_strsplit(path, ".", -1);
	json_t *node = root;

	for (guint i = 0; parts[i] && node; i++) {
		char *br = strchr(parts[i], '[');
		bool last = parts[i + 1] == NULL;
		json_t *next;
		long idx = -1;

		if (br) {
			idx = strtol(br + 1, NULL, 10);
			*br = '\0';
		}
		if (last && value && !br) {
			json_object_set_new(node, parts[i], value);
			node = value;
			value = NULL;
			break;
		}
		next = json_object_get(node, parts[i]);
		if (!next && value && !br) {
			next = json_object();
			json_object_set_new(node, parts[i], next);
		}
		if (br)
			next = json_array_get(next, (size_t)idx);
		node = next;
	}
	g_strfreev(parts);
	g_assert_null(value); /* a set must land */
	return node;
}

/* The base document, then fragment merged in, then value set at path. */
static char *
make_doc(const char *fragment, const char *path, const char *value)
{
	json_t *doc = parse(base_doc);
	char *dump, *out;

	if (fragment) {
		json_t *f = parse(fragment);
		merge(doc, f);
		json_decref(f);
	}
	if (path)
		at_path(doc, path, parse(value));
	dump = json_dumps(doc, JSON_COMPACT);
	out = g_strdup(dump);
	free(dump);
	json_decref(doc);
	return out;
}

struct outcome {
	struct nw_config *cfg;
	GPtrArray *problems;
};

static struct outcome
load(const char *text)
{
	struct outcome o = { NULL, NULL };

	o.cfg = nw_config_load_string(text, "t.json", &o.problems);
	g_assert_nonnull(o.problems);
	return o;
}

static void
outcome_clear(struct outcome *o)
{
	nw_config_free(o->cfg);
	g_ptr_array_unref(o->problems);
}

static void
dump_problems(const GPtrArray *problems)
{
	for (guint i = 0; i < problems->len; i++) {
		char *s = nw_config_error_format("t.json", problems->pdata[i]);
		g_test_message("problem: %s", s);
		g_free(s);
	}
}

static const struct nw_config_error *
find_problem(const GPtrArray *problems, const char *path, const char *substring)
{
	for (guint i = 0; i < problems->len; i++) {
		const struct nw_config_error *e = problems->pdata[i];
		if (g_strcmp0(e->path, path) == 0 && strstr(e->message, substring))
			return e;
	}
	return NULL;
}

/* Load text; check it loads (ok) or not, and that the expected problem is
 * there. With ok and no expected problem, there must be no problem at all. */
static void
expect(const char *text, bool ok, const char *path, const char *substring, bool warning)
{
	struct outcome o = load(text);
	const struct nw_config_error *e = NULL;

	if (substring)
		e = find_problem(o.problems, path, substring);
	if ((o.cfg != NULL) != ok || (substring && !e) || (ok && !substring && o.problems->len)) {
		g_test_message("document: %s", text);
		g_test_message("expected %s, %s: %s", ok ? "success" : "failure",
		               path ? path : "(no path)", substring ? substring : "(no problem)");
		dump_problems(o.problems);
	}
	if (ok)
		g_assert_nonnull(o.cfg);
	else
		g_assert_null(o.cfg);
	if (substring) {
		g_assert_nonnull(e);
		g_assert_cmpint(e->warning, ==, warning);
	} else if (ok) {
		g_assert_cmpuint(o.problems->len, ==, 0);
	}
	outcome_clear(&o);
}

/* /config/spec-4.2/KIND/WHAT for a clause number, /config/narwhal/... else */
static char *
test_name(const char *clause, const char *kind, const char *what)
{
	char *w = g_strdup(what), *name;

	g_strdelimit(w, "/", '_');  /* '/' would open a sub-suite */
	g_strdelimit(w, "\"", '\''); /* quotes only make names hard to type */
	name = g_strdup_printf("/config/%s%s/%s/%s", g_ascii_isdigit(clause[0]) ? "spec-" : "",
	                       clause, kind, w);
	g_free(w);
	return name;
}

/* ----------------------------------------------------------- defaults --- */

struct default_case {
	const char *clause;
	const char *path;
	const char *value; /* JSON; reals and integers are told apart */
};

static const struct default_case default_cases[] = {
	{ "narwhal", "server.host", "\"127.0.0.1\"" },
	{ "narwhal", "server.port", "8000" },
	{ "narwhal", "server.client_timeout_s", "30.0" },
	{ "narwhal", "server.head_timeout_s", "10.0" },
	{ "narwhal", "server.body_timeout_s", "60.0" },
	{ "narwhal", "server.max_pending_connections", "1024" },
	{ "narwhal", "server.drain_timeout_s", "30.0" },
	{ "narwhal", "server.api_keys_env", "null" },
	/* issue 11, admin API: its listener's fields (docs/admin.md) */
	{ "narwhal", "admin.host", "\"127.0.0.1\"" },
	{ "narwhal", "admin.port", "8081" },
	{ "narwhal", "admin.token_env", "null" },
	{ "narwhal", "admin.allow_remote", "false" },
	{ "narwhal", "log.level", "\"info\"" },
	{ "narwhal", "log.format", "\"json\"" },
	{ "narwhal", "log.access", "true" },
	{ "narwhal", "slo.ttft_s", "1.0" },
	{ "narwhal", "slo.tpot_s", "0.1" },
	{ "4.1", "serving.admission", "\"predictive\"" },
	{ "4.1", "serving.admission_margin", "0.0" },
	{ "4.1", "serving.max_connections", "512" },
	{ "4.1", "engine.control_connections", "0" },
	{ "4.2", "serving.queue_capacity", "0" },
	{ "4.2", "serving.queue_timeout_s", "0.0" },
	{ "4.2", "serving.prefill_concurrency", "0" },
	{ "4.2", "serving.decode_concurrency", "0" },
	{ "4.2", "serving.handoff_timeout_s", "0.0" },
	{ "4.2", "serving.max_attempts", "1" },
	{ "4.2", "serving.retry_base_s", "0.1" },
	{ "4.2", "serving.retry_cap_s", "1.0" },
	{ "4.2", "serving.retry_budget", "10" },
	{ "4.2", "serving.retry_replenish", "0.1" },
	{ "4.2", "serving.max_request_bytes", "4194304" },
	{ "4.2", "serving.max_response_bytes", "16777216" },
	{ "6", "profiles.path", "\"runs/profiles.json\"" },
	{ "6", "serving.request_timeout_s", "600.0" },
	{ "6", "serving.prefill_timeout_s", "120.0" },
	{ "4.3", "serving.stream_commit", "\"before_decode\"" },
	{ "6", "recovery.failure_quarantine_s", "0.0" },
	{ "6", "engine.decode_read_timeout_s", "60.0" },
	{ "6", "engine.first_token_timeout_s", "2.5" },
	{ "6", "engine.tokenize", "true" },
	{ "6", "engine.tokenize_timeout_s", "2.0" },
	{ "6", "engine.chars_per_token", "3.8" },
	{ "6", "engine.pool_timeout_s", "5.0" },
	{ "6", "engine.connect_timeout_s", "10.0" },
	{ "6", "engine.health_timeout_s", "5.0" },
	{ "narwhal", "engine.tls_ca_file", "null" },
	{ "narwhal", "engine.tls_verify", "true" },
	{ "7", "controller.advisory", "false" },
	{ "7", "controller.monitor_interval_s", "1.0" },
	{ "7", "controller.monitor_failure_limit", "5" },
	{ "7", "controller.min_prefill", "1" },
	{ "7", "controller.min_decode", "1" },
	{ "7", "controller.thresholds.expand", "1.0" },
	{ "7", "controller.thresholds.shrink", "0.5" },
	{ "7", "controller.thresholds.cooldown_s", "10.0" },
	{ "7", "controller.thresholds.sustained_intervals", "3" },
	{ "7", "controller.thresholds.dwell_s", "0.0" },
	{ "7", "controller.thresholds.panic_ratio", "0.0" },
	{ "7", "controller.thresholds.flip_resident_guard", "0" },
	{ "7", "controller.flip_history", "1000" },
	{ "narwhal", "controller.policy", "\"reactive\"" },
	{ "narwhal", "recovery.health.window_s", "30.0" },
	{ "narwhal", "recovery.health.min_samples", "10" },
	{ "7.7", "controller.reactive.window_s", "120.0" },
	{ "7.7", "controller.reactive.confirmations", "2" },
	{ "7.7", "controller.reactive.utilization", "0.8" },
	{ "7.7", "controller.reactive.min_arrivals", "10" },
	{ "7.7", "controller.reactive.demand_floor", "0.5" },
	{ "7.7", "controller.reactive.movement_margin", "0.05" },
	{ "7.7", "controller.reactive.step_s", "5.0" },
	{ "7.7", "controller.reactive.evidence_span_s", "60.0" },
	{ "7.7", "controller.reactive.evidence_max_span_s", "120.0" },
	{ "7.7", "controller.reactive.evidence_min_arrivals", "10" },
	{ "7.7", "controller.reactive.demand_rise_tolerance", "0.25" },
	{ "7.7", "controller.reactive.decode_correction_min", "0.5" },
	{ "7.7", "controller.reactive.decode_correction_max", "2.0" },
	{ "7.7", "controller.reactive.decode_correction_alpha", "0.2" },
	{ "7.7", "controller.reactive.decode_correction_min_samples", "8" },
	{ "narwhal", "fleet.model", "null" },
	{ "narwhal", "fleet.engines[0].dialect", "\"vllm\"" },
	{ "narwhal", "fleet.engines[0].pinned", "false" },
	{ "narwhal", "fleet.engines[0].kv_lease_s", "30.0" },
	{ "narwhal", "fleet.engines[0].role", "\"prefill\"" },
	{ "narwhal", "fleet.engines[1].role", "\"decode\"" },
	{ "narwhal", "plugins.dir", "null" },
	{ "narwhal", "plugins.admission.name", "\"predictive\"" },
	{ "narwhal", "plugins.admission.path", "null" },
	{ "narwhal", "plugins.admission.config", "{}" },
	{ "narwhal", "plugins.admission.max_inflight", "0" },
	{ "narwhal", "plugins.placement.name", "\"slo-cost\"" },
	{ "narwhal", "plugins.placement.path", "null" },
	{ "narwhal", "plugins.placement.config", "{}" },
	{ "narwhal", "plugins.controller.path", "null" },
	{ "narwhal", "plugins.controller.config", "{}" },
	{ "narwhal", "plugins.dialects", "{}" },
};

static void
test_default(gconstpointer data)
{
	const struct default_case *c = data;
	struct outcome o = load(base_doc);
	json_t *eff, *want = parse(c->value), *got;

	g_assert_nonnull(o.cfg);
	g_assert_cmpuint(o.problems->len, ==, 0);
	eff = nw_config_to_json(o.cfg);
	got = at_path(eff, c->path, NULL);
	g_assert_nonnull(got);
	if (!json_equal(got, want)) {
		char *s = json_dumps(got, JSON_ENCODE_ANY);
		g_test_message("%s is %s, expected %s", c->path, s, c->value);
		free(s);
	}
	g_assert_true(json_equal(got, want));
	json_decref(want);
	json_decref(eff);
	outcome_clear(&o);
}

/* -------------------------------------------------------------- ranges --- */

struct range_case {
	const char *clause;
	const char *path;
	const char *value;  /* JSON */
	bool ok;
	const char *expect; /* refused: message substring */
	const char *extra;  /* fragment merged first: companions the value needs */
};

#define SECS_POS(clause, path)                                                         \
	{ clause, path, "0", false, "0 is out of range: a number of seconds greater than 0" }, \
	{ clause, path, "-1", false, "out of range" },                                      \
	{ clause, path, "0.001", true, NULL },                                              \
	{ clause, path, "1e9", true, NULL },                                                \
	{ clause, path, "1000000001", false, "out of range" }
#define SECS_NONNEG(clause, path)                                                      \
	{ clause, path, "-0.001", false, "-0.001 is out of range: a number of seconds from 0" }, \
	{ clause, path, "0", true, NULL },                                                  \
	{ clause, path, "1e9", true, NULL },                                                \
	{ clause, path, "1e10", false, "out of range" }
#define COUNT(clause, path, lo, lo_ok, below)                                          \
	{ clause, path, below, false, "is out of range: an integer from " lo " to 1000000" }, \
	{ clause, path, lo_ok, true, NULL },                                                \
	{ clause, path, "1000000", true, NULL },                                            \
	{ clause, path, "1000001", false, "1000001 is out of range" },                      \
	{ clause, path, "2.5", false, "wrong type, found real number 2.5" }
#define COUNT1(clause, path) COUNT(clause, path, "1", "1", "0")
#define COUNT0(clause, path) COUNT(clause, path, "0", "0", "-1")

/* queueing at the top of its range needs the rest of spec 4.2 */
#define QUEUE_OK "{\"serving\": {\"queue_timeout_s\": 1, \"prefill_concurrency\": 2, " \
	"\"decode_concurrency\": 2, \"handoff_timeout_s\": 5}}"

static const struct range_case range_cases[] = {
	{ "narwhal", "server.port", "-1", false, "-1 is out of range: an integer from 0 to 65535" },
	{ "narwhal", "server.port", "0", true, NULL },
	{ "narwhal", "server.port", "65535", true, NULL },
	{ "narwhal", "server.port", "65536", false, "65536 is out of range" },
	{ "narwhal", "server.port", "\"8000\"", false, "wrong type, found string \"8000\"" },
	{ "narwhal", "server.host", "\"0.0.0.0\"", true, NULL },
	{ "narwhal", "server.host", "\"::1\"", true, NULL },
	{ "narwhal", "server.host", "\"\"", false, "empty string" },
	{ "narwhal", "server.host", "\"my host\"", false, "not allowed (' ')" },
	SECS_POS("narwhal", "server.client_timeout_s"),
	SECS_POS("narwhal", "server.head_timeout_s"),
	SECS_POS("narwhal", "server.body_timeout_s"),
	{ "narwhal", "server.max_pending_connections", "0", false, "from 1 to 1048576" },
	{ "narwhal", "server.max_pending_connections", "1", true, NULL },
	SECS_NONNEG("narwhal", "server.drain_timeout_s"),
	{ "narwhal", "log.level", "\"debug\"", true, NULL },
	{ "narwhal", "log.level", "\"error\"", true, NULL },
	{ "narwhal", "log.level", "\"warn\"", false, "did you mean \"warning\"?" },
	{ "narwhal", "log.level", "\"INFO\"", false, "not a valid choice" },
	{ "narwhal", "log.format", "\"text\"", true, NULL },
	{ "narwhal", "log.format", "\"yaml\"", false, "\"yaml\" is not a valid choice" },
	/* Issue 11, access log: log.access switches it. */
	{ "narwhal", "log.access", "false", true, NULL },
	{ "narwhal", "log.access", "\"off\"", false, "wrong type" },
	SECS_POS("narwhal", "slo.ttft_s"),
	SECS_POS("narwhal", "slo.tpot_s"),

	{ "4.1", "serving.admission", "\"open\"", true, NULL },
	{ "narwhal", "serving.stream_commit", "\"first_event\"", true, NULL },
	{ "narwhal", "serving.stream_commit", "\"before_decode\"", true, NULL },
	{ "narwhal", "serving.stream_commit", "\"first_token\"", false, "not a valid choice" },
	{ "narwhal", "serving.stream_commit", "true", false, "wrong type" },
	{ "4.1", "serving.admission", "\"predictive\"", true, NULL },
	{ "4.1", "serving.admission", "\"opne\"", false, "did you mean \"open\"?" },
	{ "4.1", "serving.admission", "1", false, "wrong type, found integer 1" },
	{ "4.1", "serving.admission_margin", "-0.01", false,
	  "-0.01 is out of range: a number of at least 0" },
	{ "4.1", "serving.admission_margin", "0", true, NULL },
	{ "4.1", "serving.admission_margin", "2.5", true, NULL },
	COUNT1("4.1", "serving.max_connections"),
	COUNT0("4.1", "engine.control_connections"),

	{ "4.2", "serving.queue_capacity", "-1", false, "out of range: an integer from 0" },
	{ "4.2", "serving.queue_capacity", "0", true, NULL },
	{ "4.2", "serving.queue_capacity", "1000000", true, NULL, QUEUE_OK },
	{ "4.2", "serving.queue_capacity", "1000001", false, "out of range", QUEUE_OK },
	SECS_NONNEG("4.2", "serving.queue_timeout_s"),
	COUNT0("4.2", "serving.prefill_concurrency"),
	COUNT0("4.2", "serving.decode_concurrency"),
	{ "4.2", "serving.handoff_timeout_s", "-1", false, "out of range" },
	{ "4.2", "serving.handoff_timeout_s", "0", true, NULL },
	{ "4.2", "serving.handoff_timeout_s", "29.999", true, NULL },
	{ "4.2", "serving.max_attempts", "0", false, "0 is out of range: an integer from 1 to 3" },
	{ "4.2", "serving.max_attempts", "1", true, NULL },
	{ "4.2", "serving.max_attempts", "3", true, NULL, "{\"serving\": {\"handoff_timeout_s\": 5}}" },
	{ "4.2", "serving.max_attempts", "4", false, "4 is out of range: an integer from 1 to 3" },
	{ "4.2", "serving.max_attempts", "1.5", false,
	  "wrong type, found real number 1.5: an integer from 1 to 3" },
	{ "4.2", "serving.max_attempts", "2.0", false, "wrong type, found real number 2.0" },
	{ "4.2", "serving.retry_base_s", "-0.1", false, "out of range" },
	{ "4.2", "serving.retry_base_s", "0", true, NULL },
	{ "4.2", "serving.retry_cap_s", "-0.1", false, "out of range" },
	{ "4.2", "serving.retry_cap_s", "0.1", true, NULL },
	COUNT0("4.2", "serving.retry_budget"),
	{ "4.2", "serving.retry_replenish", "-0.001", false,
	  "-0.001 is out of range: a number from 0 to 1" },
	{ "4.2", "serving.retry_replenish", "0", true, NULL },
	{ "4.2", "serving.retry_replenish", "1", true, NULL },
	{ "4.2", "serving.retry_replenish", "1.001", false, "1.001 is out of range" },
	{ "4.2", "serving.max_request_bytes", "0", false,
	  "0 is out of range: an integer number of bytes from 1" },
	{ "4.2", "serving.max_request_bytes", "1", true, NULL },
	{ "4.2", "serving.max_request_bytes", "1099511627776", true, NULL },
	{ "4.2", "serving.max_request_bytes", "1099511627777", false, "out of range" },
	{ "4.2", "serving.max_response_bytes", "0", false, "out of range" },
	{ "4.2", "serving.max_response_bytes", "1", true, NULL },
	{ "4.2", "serving.max_response_bytes", "1099511627777", false, "out of range" },

	SECS_POS("6", "serving.request_timeout_s"),
	SECS_POS("6", "serving.prefill_timeout_s"),
	{ "6", "serving.request_timeout_s", "600", true, NULL }, /* integers fill reals */
	{ "6", "serving.request_timeout_s", "null", false, "wrong type, found null" },
	{ "6", "profiles.path", "\"/var/lib/narwhal/profiles.json\"", true, NULL },
	{ "6", "profiles.path", "\"\"", false, "empty string" },
	SECS_NONNEG("6", "recovery.failure_quarantine_s"),
	SECS_NONNEG("6", "engine.decode_read_timeout_s"),
	SECS_POS("6", "engine.first_token_timeout_s"),
	{ "6", "engine.tokenize", "false", true, NULL },
	{ "6", "engine.tokenize", "\"false\"", false, "wrong type, found string \"false\": true or false" },
	{ "6", "engine.tokenize", "0", false, "wrong type, found integer 0" },
	SECS_POS("6", "engine.tokenize_timeout_s"),
	{ "6", "engine.chars_per_token", "0", false, "0 is out of range: a number greater than 0" },
	{ "6", "engine.chars_per_token", "0.01", true, NULL },
	{ "6", "engine.chars_per_token", "-3.8", false, "out of range" },
	SECS_POS("6", "engine.pool_timeout_s"),
	SECS_POS("6", "engine.connect_timeout_s"),
	SECS_POS("6", "engine.health_timeout_s"),
	/* Issue 9: https engines' CA bundle must be a readable file. */
	{ "narwhal", "engine.tls_ca_file", "null", true, NULL },
	{ "narwhal", "engine.tls_ca_file", "\"/etc/hostname\"", true, NULL },
	{ "narwhal", "engine.tls_ca_file", "\"/nonexistent/ca.pem\"", false,
	  "\"/nonexistent/ca.pem\" is not a file: null (the system's CA store) or a readable PEM "
	  "file of CA certificates" },
	{ "narwhal", "engine.tls_ca_file", "\"/tmp\"", false, "is not a file" },
	{ "narwhal", "engine.tls_ca_file", "5", false, "wrong type" },
	{ "narwhal", "engine.tls_verify", "false", true, NULL },
	{ "narwhal", "engine.tls_verify", "\"no\"", false, "wrong type" },

	{ "7", "controller.advisory", "true", true, NULL },
	{ "7", "controller.advisory", "1", false, "wrong type" },
	SECS_POS("7", "controller.monitor_interval_s"),
	COUNT1("7", "controller.monitor_failure_limit"),
	{ "7", "controller.min_prefill", "0", false, "0 is out of range: an integer from 1" },
	{ "7", "controller.min_prefill", "1", true, NULL },
	{ "7", "controller.min_decode", "0", false, "0 is out of range: an integer from 1" },
	{ "7", "controller.min_decode", "1", true, NULL },
	{ "7", "controller.thresholds.expand", "0", false, "out of range: a number greater than 0" },
	{ "7", "controller.thresholds.expand", "0.6", true, NULL },
	{ "7", "controller.thresholds.shrink", "-0.1", false, "out of range: a number of at least 0" },
	{ "7", "controller.thresholds.shrink", "0", true, NULL },
	SECS_NONNEG("7", "controller.thresholds.cooldown_s"),
	COUNT1("7", "controller.thresholds.sustained_intervals"),
	SECS_NONNEG("7", "controller.thresholds.dwell_s"),
	{ "7", "controller.thresholds.panic_ratio", "0", true, NULL },
	{ "7", "controller.thresholds.panic_ratio", "0.5", false,
	  "0.5 is out of range: 0 (off) or a number of at least 1" },
	{ "7", "controller.thresholds.panic_ratio", "0.999", false, "out of range" },
	{ "7", "controller.thresholds.panic_ratio", "1", true, NULL },
	{ "7", "controller.thresholds.panic_ratio", "1000", true, NULL },
	{ "7", "controller.thresholds.panic_ratio", "-1", false, "out of range" },
	COUNT0("7", "controller.thresholds.flip_resident_guard"),
	COUNT1("7", "controller.flip_history"),
	{ "narwhal", "controller.policy", "\"static\"", true, NULL },
	{ "narwhal", "controller.policy", "\"my-policy2\"", true, NULL },
	{ "narwhal", "controller.policy", "\"My_Policy\"", false, "not allowed ('M')" },
	SECS_POS("narwhal", "recovery.health.window_s"),
	COUNT1("narwhal", "recovery.health.min_samples"),

	{ "7.7", "controller.reactive.window_s", "0", false, "out of range" },
	{ "7.7", "controller.reactive.window_s", "120", true, NULL },
	COUNT1("7.7", "controller.reactive.confirmations"),
	{ "7.7", "controller.reactive.utilization", "0", false,
	  "0 is out of range: a number greater than 0 and at most 1" },
	{ "7.7", "controller.reactive.utilization", "1e-9", true, NULL },
	{ "7.7", "controller.reactive.utilization", "1", true, NULL },
	{ "7.7", "controller.reactive.utilization", "1.0001", false, "1.0001 is out of range" },
	COUNT1("7.7", "controller.reactive.min_arrivals"),
	{ "7.7", "controller.reactive.demand_floor", "0", false, "out of range: a number greater than 0" },
	{ "7.7", "controller.reactive.demand_floor", "0.01", true, NULL },
	{ "7.7", "controller.reactive.movement_margin", "-0.01", false, "out of range" },
	{ "7.7", "controller.reactive.movement_margin", "0", true, NULL },
	{ "7.7", "controller.reactive.movement_margin", "0.999", true, NULL },
	{ "7.7", "controller.reactive.movement_margin", "1", false,
	  "1 is out of range: a number from 0 up to but not including 1" },
	SECS_POS("7.7", "controller.reactive.step_s"),
	{ "7.7", "controller.reactive.evidence_span_s", "0", false, "out of range" },
	{ "7.7", "controller.reactive.evidence_span_s", "0.1", true, NULL },
	{ "7.7", "controller.reactive.evidence_max_span_s", "0", false, "out of range" },
	{ "7.7", "controller.reactive.evidence_max_span_s", "60", true, NULL },
	COUNT1("7.7", "controller.reactive.evidence_min_arrivals"),
	{ "7.7", "controller.reactive.demand_rise_tolerance", "-0.01", false,
	  "out of range: a number of at least 0" },
	{ "7.7", "controller.reactive.demand_rise_tolerance", "0", true, NULL },
	{ "7.7", "controller.reactive.demand_rise_tolerance", "1e6", true, NULL },
	{ "7.7", "controller.reactive.decode_correction_min", "0", false, "out of range" },
	{ "7.7", "controller.reactive.decode_correction_min", "0.01", true, NULL },
	{ "7.7", "controller.reactive.decode_correction_max", "0", false, "out of range" },
	{ "7.7", "controller.reactive.decode_correction_max", "0.5", true, NULL },
	{ "7.7", "controller.reactive.decode_correction_alpha", "0", false,
	  "0 is out of range: a number greater than 0 and at most 1" },
	{ "7.7", "controller.reactive.decode_correction_alpha", "1e-6", true, NULL },
	{ "7.7", "controller.reactive.decode_correction_alpha", "1", true, NULL },
	{ "7.7", "controller.reactive.decode_correction_alpha", "1.01", false, "out of range" },
	COUNT1("7.7", "controller.reactive.decode_correction_min_samples"),

	{ "narwhal", "server.api_keys_env", "null", true, NULL },
	{ "narwhal", "server.api_keys_env", "\"NARWHAL_KEYS\"", true, NULL },
	{ "narwhal", "server.api_keys_env", "\"\"", false, "empty string" },
	{ "narwhal", "server.api_keys_env", "\"A B\"", false, "not allowed (' ')" },
	/* issue 11, admin API: a loopback listener unless allow_remote, a token
	 * by variable name */
	{ "narwhal", "admin.host", "\"::1\"", true, NULL },
	{ "narwhal", "admin.host", "\"127.0.0.2\"", true, NULL },
	{ "narwhal", "admin.host", "\"0.0.0.0\"", false,
	  "is not a loopback address, and the admin API can drain, eject and move engines: a "
	  "loopback address (127.0.0.1, ::1), or set admin.allow_remote to true" },
	{ "narwhal", "admin.host", "\"10.1.2.3\"", false, "set admin.allow_remote to true" },
	{ "narwhal", "admin.host", "\"::\"", true, NULL, "{\"admin\": {\"allow_remote\": true}}" },
	{ "narwhal", "admin.host", "\"\"", false, "empty string" },
	{ "narwhal", "admin.host", "\"localhost\"", false, "is not a numeric IPv4 or IPv6 address" },
	{ "narwhal", "admin.port", "0", true, NULL },
	{ "narwhal", "admin.port", "65536", false, "65536 is out of range" },
	{ "narwhal", "admin.token_env", "\"NARWHAL_ADMIN_TOKEN\"", true, NULL },
	{ "narwhal", "admin.token_env", "\"A-B\"", false, "not allowed ('-')" },
	{ "narwhal", "admin.allow_remote", "\"yes\"", false, "wrong type" },
	{ "narwhal", "fleet.model", "null", true, NULL },
	{ "narwhal", "fleet.model", "\"llama-3-8b\"", true, NULL },
	{ "narwhal", "fleet.model", "\"\"", false, "empty string" },
	{ "narwhal", "fleet.model", "7", false, "wrong type, found integer 7" },
	{ "narwhal", "fleet.engines[0].kv_lease_s", "0", false,
	  "0 is out of range: a number of seconds greater than 0" },
	{ "narwhal", "fleet.engines[0].kv_lease_s", "0.5", true, NULL },
	{ "narwhal", "fleet.engines[0].dialect", "\"sglang\"", true, NULL },
	{ "narwhal", "fleet.engines[0].dialect", "\"vLLM\"", false, "not allowed ('L')" },
	{ "narwhal", "fleet.engines[0].role", "\"decode\"", true, NULL },
	{ "narwhal", "fleet.engines[0].role", "\"prefil\"", false, "did you mean \"prefill\"?" },
	{ "narwhal", "fleet.engines[0].pinned", "\"yes\"", false, "wrong type" },
	{ "narwhal", "plugins.dir", "null", true, NULL },
	{ "narwhal", "plugins.dir", "\"/\"", true, NULL },
	{ "narwhal", "plugins.dir", "\"/nonexistent/narwhal/plugins\"", false, "does not exist" },
	{ "narwhal", "plugins.dir", "\"/dev/null\"", false, "is not a directory" },
	{ "narwhal", "plugins.dir", "5", false, "wrong type, found integer 5" },
	{ "narwhal", "plugins.admission.path", "\"/opt/x/admission-open.so\"", true, NULL },
	{ "narwhal", "plugins.admission.path", "\"\"", false, "empty string" },
	{ "narwhal", "plugins.admission.config", "{\"anything\": [1, 2]}", true, NULL },
	{ "narwhal", "plugins.admission.config", "[]", false, "wrong type, found an array: an object" },
	{ "narwhal", "plugins.admission.max_inflight", "-1", false, "out of range" },
	{ "narwhal", "plugins.admission.max_inflight", "0", true, NULL },
	{ "narwhal", "plugins.admission.max_inflight", "1", true, NULL },
	{ "narwhal", "plugins.placement.name", "\"slo-cost\"", true, NULL },
	{ "narwhal", "plugins.placement.name", "\"slo cost\"", false, "not allowed (' ')" },
	{ "narwhal", "plugins.placement.config", "\"x\"", false, "wrong type" },
	{ "narwhal", "plugins.controller.path", "\"./controller-x.so\"", true, NULL },
	{ "narwhal", "plugins.controller.config", "{\"k\": 1}", true, NULL },
	{ "narwhal", "plugins.dialects", "{\"vllm\": {\"x\": 1}}", true, NULL },
	{ "narwhal", "plugins.dialects", "[]", false, "wrong type" },
	{ "narwhal", "serving", "5", false, "wrong type, found integer 5: an object" },
	{ "narwhal", "controller.thresholds", "null", false, "wrong type, found null: an object" },
};

static bool
same_value(const json_t *got, const json_t *want)
{
	if (json_is_number(got) && json_is_number(want))
		return json_number_value(got) == json_number_value(want);
	return json_equal(got, want);
}

static void
test_range(gconstpointer data)
{
	const struct range_case *c = data;
	char *doc = make_doc(c->extra, c->path, c->value);
	struct outcome o = load(doc);

	if ((o.cfg != NULL) != c->ok) {
		g_test_message("document: %s", doc);
		dump_problems(o.problems);
	}
	if (c->ok) {
		json_t *eff, *want = parse(c->value);
		g_assert_nonnull(o.cfg);
		g_assert_cmpuint(nw_config_error_count(o.problems), ==, 0);
		/* the value was stored where the effective config shows it */
		eff = nw_config_to_json(o.cfg);
		g_assert_true(same_value(at_path(eff, c->path, NULL), want));
		json_decref(eff);
		json_decref(want);
	} else {
		const struct nw_config_error *e = find_problem(o.problems, c->path, c->expect);
		if (!e) {
			g_test_message("expected %s: %s", c->path, c->expect);
			dump_problems(o.problems);
		}
		g_assert_null(o.cfg);
		g_assert_nonnull(e);
		g_assert_false(e->warning);
	}
	outcome_clear(&o);
	g_free(doc);
}

/* -------------------------------------------------- cross-field rules --- */

struct rule_case {
	const char *clause;
	const char *name;
	const char *fragment; /* merged onto the two-engine base */
	bool ok;
	const char *path;     /* expected problem, or NULL for none at all */
	const char *expect;
	bool warning;
};

#define ONE_ENGINE "\"fleet\": {\"engines\": [{\"id\": \"solo\", \"url\": \"http://h:9000\"}]}"
#define THREE_ENGINES "\"fleet\": {\"engines\": [{\"id\": \"a\", \"url\": \"http://h:1\"}, " \
	"{\"id\": \"b\", \"url\": \"http://h:2\"}, {\"id\": \"c\", \"url\": \"http://h:3\"}]}"
#define Q "\"queue_capacity\": 8, "

static const struct rule_case rule_cases[] = {
	/* admission overrides stay within the dispatch pool */
	{ "4.1", "admission-override-at-pool", "{\"plugins\": {\"admission\": {\"max_inflight\": 512}}}",
	  true },
	{ "4.1", "admission-override-above-pool",
	  "{\"plugins\": {\"admission\": {\"max_inflight\": 513}}}", false,
	  "plugins.admission.max_inflight", "513 is above serving.max_connections (512)" },
	{ "4.1", "admission-override-above-smaller-pool",
	  "{\"serving\": {\"max_connections\": 100}, \"plugins\": {\"admission\": {\"max_inflight\": 101}}}",
	  false, "plugins.admission.max_inflight", "101 is above serving.max_connections (100)" },

	/* queueing needs its wait bound, phase concurrency and handoff cap */
	{ "4.2", "queueing-complete", "{\"serving\": {" Q "\"queue_timeout_s\": 2, "
	  "\"prefill_concurrency\": 4, \"decode_concurrency\": 8, \"handoff_timeout_s\": 10}}", true },
	{ "4.2", "queueing-needs-timeout", "{\"serving\": {" Q "\"prefill_concurrency\": 4, "
	  "\"decode_concurrency\": 8, \"handoff_timeout_s\": 10}}", false,
	  "serving.queue_timeout_s", "0 is not allowed while queueing is on (serving.queue_capacity is 8)" },
	{ "4.2", "queueing-needs-prefill-concurrency", "{\"serving\": {" Q "\"queue_timeout_s\": 2, "
	  "\"decode_concurrency\": 8, \"handoff_timeout_s\": 10}}", false,
	  "serving.prefill_concurrency", "while queueing is on" },
	{ "4.2", "queueing-needs-decode-concurrency", "{\"serving\": {" Q "\"queue_timeout_s\": 2, "
	  "\"prefill_concurrency\": 4, \"handoff_timeout_s\": 10}}", false,
	  "serving.decode_concurrency", "while queueing is on" },
	{ "4.2", "queueing-needs-handoff-cap", "{\"serving\": {" Q "\"queue_timeout_s\": 2, "
	  "\"prefill_concurrency\": 4, \"decode_concurrency\": 8}}", false,
	  "serving.handoff_timeout_s", "0 is not allowed while queueing is on" },
	{ "4.2", "no-queue-needs-nothing", "{\"serving\": {\"queue_capacity\": 0}}", true },

	/* retries need a handoff cap too */
	{ "4.2", "retry-needs-handoff-cap", "{\"serving\": {\"max_attempts\": 2}}", false,
	  "serving.handoff_timeout_s", "0 is not allowed while retries are on" },
	{ "4.2", "retry-with-handoff-cap", "{\"serving\": {\"max_attempts\": 2, \"handoff_timeout_s\": 5}}",
	  true },
	{ "4.2", "queue-and-retry-need-handoff-cap", "{\"serving\": {" Q "\"queue_timeout_s\": 2, "
	  "\"prefill_concurrency\": 4, \"decode_concurrency\": 8, \"max_attempts\": 3}}", false,
	  "serving.handoff_timeout_s", "while queueing and retries are on" },

	/* a handoff cap ends before the backend lease */
	{ "4.2", "handoff-below-lease", "{\"serving\": {\"handoff_timeout_s\": 29.99}}", true },
	{ "4.2", "handoff-at-lease", "{\"serving\": {\"handoff_timeout_s\": 30}}", false,
	  "serving.handoff_timeout_s", "30 is not below fleet.engines[0].kv_lease_s (30)" },
	{ "4.2", "handoff-above-shortest-lease", "{\"serving\": {\"handoff_timeout_s\": 20}, "
	  "\"fleet\": {\"engines\": [{\"id\": \"e1\", \"url\": \"http://h:1\", \"kv_lease_s\": 60}, "
	  "{\"id\": \"e2\", \"url\": \"http://h:2\", \"kv_lease_s\": 10}]}}", false,
	  "serving.handoff_timeout_s", "20 is not below fleet.engines[1].kv_lease_s (10)" },
	{ "4.2", "handoff-below-longer-leases", "{\"serving\": {\"handoff_timeout_s\": 45}, "
	  "\"fleet\": {\"engines\": [{\"id\": \"e1\", \"url\": \"http://h:1\", \"kv_lease_s\": 60}, "
	  "{\"id\": \"e2\", \"url\": \"http://h:2\", \"kv_lease_s\": 50}]}}", true },

	/* backoff cap at least the base */
	{ "4.2", "retry-cap-equals-base", "{\"serving\": {\"retry_base_s\": 0.5, \"retry_cap_s\": 0.5}}",
	  true },
	{ "4.2", "retry-cap-below-base", "{\"serving\": {\"retry_base_s\": 0.5, \"retry_cap_s\": 0.4}}",
	  false, "serving.retry_cap_s", "0.4 is below serving.retry_base_s (0.5)" },
	{ "narwhal", "retry-without-budget-warns", "{\"serving\": {\"max_attempts\": 2, "
	  "\"handoff_timeout_s\": 5, \"retry_budget\": 0}}", true,
	  "serving.retry_budget", "no retry ever runs", true },
	{ "narwhal", "prefill-deadline-beyond-request-warns",
	  "{\"serving\": {\"prefill_timeout_s\": 700}}", true,
	  "serving.prefill_timeout_s", "700 is above serving.request_timeout_s (600)", true },
	{ "narwhal", "queue-wait-beyond-request-warns", "{\"serving\": {" Q "\"queue_timeout_s\": 900, "
	  "\"prefill_concurrency\": 4, \"decode_concurrency\": 8, \"handoff_timeout_s\": 10}}", true,
	  "serving.queue_timeout_s", "can never fire", true },

	/* shrink below expand */
	{ "7", "shrink-below-expand", "{\"controller\": {\"thresholds\": {\"shrink\": 0.99}}}", true },
	{ "7", "shrink-equals-expand", "{\"controller\": {\"thresholds\": {\"shrink\": 1}}}", false,
	  "controller.thresholds.shrink", "1 is not below controller.thresholds.expand (1)" },
	{ "7", "expand-below-shrink", "{\"controller\": {\"thresholds\": {\"expand\": 0.4}}}", false,
	  "controller.thresholds.shrink", "0.5 is not below controller.thresholds.expand (0.4)" },

	/* evidence_span_s <= evidence_max_span_s <= window_s */
	{ "7.7", "evidence-span-equals-max",
	  "{\"controller\": {\"reactive\": {\"evidence_span_s\": 120}}}", true },
	{ "7.7", "evidence-span-above-max",
	  "{\"controller\": {\"reactive\": {\"evidence_span_s\": 120.5}}}", false,
	  "controller.reactive.evidence_span_s",
	  "120.5 is above controller.reactive.evidence_max_span_s (120)" },
	{ "7.7", "evidence-max-equals-window",
	  "{\"controller\": {\"reactive\": {\"window_s\": 120, \"evidence_max_span_s\": 120}}}", true },
	{ "7.7", "evidence-max-above-window", "{\"controller\": {\"reactive\": {\"window_s\": 119}}}",
	  false, "controller.reactive.evidence_max_span_s",
	  "120 is above controller.reactive.window_s (119)" },

	/* correction bounds in order */
	{ "7.7", "correction-max-equals-min",
	  "{\"controller\": {\"reactive\": {\"decode_correction_max\": 0.5}}}", true },
	{ "7.7", "correction-max-below-min",
	  "{\"controller\": {\"reactive\": {\"decode_correction_max\": 0.4}}}", false,
	  "controller.reactive.decode_correction_max",
	  "0.4 is below controller.reactive.decode_correction_min (0.5)" },

	/* floors fit the fleet; one engine with floors 1/1 is aggregate */
	{ "7.2", "floors-fit-fleet", "{\"controller\": {\"min_prefill\": 1, \"min_decode\": 1}}", true },
	{ "7.2", "floors-exceed-fleet", "{\"controller\": {\"min_prefill\": 2}}", false,
	  "controller.min_prefill", "2 plus controller.min_decode 1 needs 3 engines but fleet.engines has 2" },
	{ "7.2", "floors-fit-three", "{\"controller\": {\"min_prefill\": 2}, " THREE_ENGINES "}", true },
	{ "7.2", "decode-floor-exceeds-three", "{\"controller\": {\"min_decode\": 3}, " THREE_ENGINES "}",
	  false, "controller.min_prefill", "needs 4 engines but fleet.engines has 3" },
	{ "7.2", "single-engine-aggregate", "{" ONE_ENGINE "}", true },
	{ "7.2", "single-engine-two-prefill", "{\"controller\": {\"min_prefill\": 2}, " ONE_ENGINE "}",
	  false, "controller.min_prefill", "needs 3 engines but fleet.engines has 1" },

	/* pins and initial roles against the floors: warnings */
	{ "7.2", "pins-leave-decode-floor-unreachable", "{\"fleet\": {\"engines\": ["
	  "{\"id\": \"a\", \"url\": \"http://h:1\", \"role\": \"prefill\", \"pinned\": true},"
	  "{\"id\": \"b\", \"url\": \"http://h:2\", \"role\": \"prefill\", \"pinned\": true}]}}", true,
	  "controller.min_decode", "engines pinned to prefill leave 0 that can decode, fewer than 1", true },
	{ "7.2", "pins-leave-prefill-floor-unreachable", "{\"controller\": {\"min_prefill\": 2}, "
	  "\"fleet\": {\"engines\": ["
	  "{\"id\": \"a\", \"url\": \"http://h:1\", \"role\": \"decode\", \"pinned\": true},"
	  "{\"id\": \"b\", \"url\": \"http://h:2\", \"role\": \"decode\", \"pinned\": true},"
	  "{\"id\": \"c\", \"url\": \"http://h:3\"}]}}", true,
	  "controller.min_prefill", "engines pinned to decode leave 1 that can prefill, fewer than 2", true },
	{ "7.2", "initial-roles-below-decode-floor", "{\"fleet\": {\"engines\": ["
	  "{\"id\": \"a\", \"url\": \"http://h:1\", \"role\": \"prefill\"},"
	  "{\"id\": \"b\", \"url\": \"http://h:2\", \"role\": \"prefill\"}]}}", true,
	  "controller.min_decode", "the initial roles give 0 decode engines", true },
	{ "7.2", "pins-within-floors", "{\"fleet\": {\"engines\": ["
	  "{\"id\": \"a\", \"url\": \"http://h:1\", \"role\": \"prefill\", \"pinned\": true},"
	  "{\"id\": \"b\", \"url\": \"http://h:2\", \"role\": \"decode\", \"pinned\": true}]}}", true },
	{ "narwhal", "pinned-needs-role", "{\"fleet\": {\"engines\": ["
	  "{\"id\": \"a\", \"url\": \"http://h:1\", \"pinned\": true},"
	  "{\"id\": \"b\", \"url\": \"http://h:2\"}]}}", false,
	  "fleet.engines[0].pinned", "a pinned engine needs an explicit role" },

	/* min_samples fits the health window: advice, so a warning */
	{ "7", "min-samples-fit-window", "{\"recovery\": {\"health\": {\"window_s\": 10, "
	  "\"min_samples\": 10}}}", true },
	{ "7", "min-samples-above-window", "{\"recovery\": {\"health\": {\"window_s\": 10, "
	  "\"min_samples\": 11}}}", true, "recovery.health.min_samples",
	  "11 is above floor(recovery.health.window_s / controller.monitor_interval_s) = 10", true },
	{ "7", "min-samples-fit-inexact-division", "{\"recovery\": {\"health\": {\"window_s\": 0.3, "
	  "\"min_samples\": 3}}, \"controller\": {\"monitor_interval_s\": 0.1}}", true },
	{ "7", "min-samples-slow-monitor", "{\"controller\": {\"monitor_interval_s\": 5}}", true,
	  "recovery.health.min_samples", "= 6", true },

	/* admission names: serving.admission and plugins.admission.name agree */
	{ "narwhal", "admission-names-agree", "{\"serving\": {\"admission\": \"open\"}, "
	  "\"plugins\": {\"admission\": {\"name\": \"open\"}}}", true },
	{ "narwhal", "admission-names-disagree", "{\"serving\": {\"admission\": \"open\"}, "
	  "\"plugins\": {\"admission\": {\"name\": \"predictive\"}}}", false,
	  "plugins.admission.name", "\"predictive\" disagrees with serving.admission (\"open\")" },
	{ "narwhal", "admission-custom-plugin", "{\"plugins\": {\"admission\": {\"name\": \"my-gate\"}}}",
	  true },

	/* dialect sections */
	{ "narwhal", "dialect-section-used", "{\"plugins\": {\"dialects\": {\"vllm\": {\"a\": 1}}}}", true },
	{ "narwhal", "dialect-section-unused-warns", "{\"plugins\": {\"dialects\": {\"sglang\": {}}}}",
	  true, "plugins.dialects.sglang", "no engine uses dialect \"sglang\"", true },
	{ "narwhal", "dialect-section-not-object", "{\"plugins\": {\"dialects\": {\"vllm\": 3}}}", false,
	  "plugins.dialects.vllm", "wrong type, found integer 3" },
	{ "narwhal", "dialect-section-bad-name", "{\"plugins\": {\"dialects\": {\"v LLM\": {}}}}", false,
	  "plugins.dialects.v LLM", "is not a dialect name" },
	/* issue 14: a dialect's file in its entry, as plugins.<kind>.path */
	{ "narwhal", "dialect-path", "{\"plugins\": {\"dialects\": {\"vllm\": "
	  "{\"path\": \"/src/x/dialect-vllm.so\"}}}}", true },
	{ "narwhal", "dialect-path-null", "{\"plugins\": {\"dialects\": {\"vllm\": {\"path\": null}}}}",
	  true },
	{ "narwhal", "dialect-path-not-string", "{\"plugins\": {\"dialects\": {\"vllm\": "
	  "{\"path\": 5}}}}", false, "plugins.dialects.vllm.path",
	  "wrong type, found integer 5: null (find the plugin by name) or the path of a plugin .so file" },
	{ "narwhal", "dialect-path-empty", "{\"plugins\": {\"dialects\": {\"vllm\": {\"path\": \"\"}}}}",
	  false, "plugins.dialects.vllm.path", "empty string: null (find the plugin by name)" },
	{ "narwhal", "controller-name-refused", "{\"plugins\": {\"controller\": {\"name\": \"static\"}}}",
	  false, "plugins.controller.name", "named by controller.policy" },

	/* plugins.controller.config over a field the host applies too: the
	 * host keeps controller.*'s value, so a different one warns */
	{ "narwhal", "controller-config-plugin-field",
	  "{\"plugins\": {\"controller\": {\"config\": {\"reactive\": {\"step_s\": 1}}}}}", true },
	{ "narwhal", "controller-config-host-field-same",
	  "{\"controller\": {\"thresholds\": {\"cooldown_s\": 4}}, \"plugins\": {\"controller\": "
	  "{\"config\": {\"thresholds\": {\"cooldown_s\": 4.0}}}}}", true },
	{ "narwhal", "controller-config-host-field-warns",
	  "{\"plugins\": {\"controller\": {\"config\": {\"thresholds\": {\"cooldown_s\": 0}}}}}",
	  true, "plugins.controller.config.thresholds.cooldown_s",
	  "given to the plugin alone: Narwhal's own guards and estimates keep "
	  "controller.thresholds.cooldown_s (10.0): set controller.thresholds.cooldown_s instead", true },
	{ "narwhal", "controller-config-host-field-wrong-type",
	  "{\"plugins\": {\"controller\": {\"config\": {\"reactive\": {\"utilization\": \"x\"}}}}}",
	  true, "plugins.controller.config.reactive.utilization", "keep controller.reactive.utilization",
	  true },
};

static void
test_rule(gconstpointer data)
{
	const struct rule_case *c = data;
	char *doc = make_doc(c->fragment, NULL, NULL);

	expect(doc, c->ok, c->path, c->expect, c->warning);
	g_free(doc);
}

/* --------------------------------------------------------- unknown keys --- */

struct unknown_case {
	const char *fragment;
	const char *path;
	const char *expect;
};

static const struct unknown_case unknown_cases[] = {
	{ "{\"serving\": {\"queu_capacity\": 8}}", "serving.queu_capacity",
	  "unknown key: did you mean \"queue_capacity\"?" },
	{ "{\"servng\": {}}", "servng", "unknown key: did you mean \"serving\"?" },
	{ "{\"controller\": {\"reactive\": {\"evidence_spn_s\": 1}}}",
	  "controller.reactive.evidence_spn_s", "did you mean \"evidence_span_s\"?" },
	{ "{\"controller\": {\"thresholds\": {\"Expand\": 1}}}", "controller.thresholds.Expand",
	  "did you mean \"expand\"?" },
	{ "{\"serving\": {\"monitor_interval_s\": 1}}", "serving.monitor_interval_s",
	  "did you mean \"controller.monitor_interval_s\"?" },
	{ "{\"serving.max_attempts\": 2}", "serving.max_attempts",
	  "dotted names are not expanded: nest it, as {\"serving\": {\"max_attempts\": ...}}" },
	{ "{\"serving\": {\"zzz\": 1}}", "serving.zzz", "unknown key: the keys here are \"admission\"" },
	{ "{\"fleet\": {\"engines\": [{\"id\": \"a\", \"urll\": \"http://h:1\"}, "
	  "{\"id\": \"b\", \"url\": \"http://h:2\"}]}}", "fleet.engines[0].urll",
	  "did you mean \"url\"?" },
	{ "{\"plugins\": {\"controller\": {\"name\": \"x\"}}}", "plugins.controller.name",
	  "not accepted here: the controller plugin is named by controller.policy" },
	{ "{\"plugins\": {\"admission\": {\"max_inflights\": 1}}}", "plugins.admission.max_inflights",
	  "did you mean \"max_inflight\"?" },
};

static void
test_unknown(gconstpointer data)
{
	const struct unknown_case *c = data;
	char *doc = make_doc(c->fragment, NULL, NULL);

	expect(doc, false, c->path, c->expect, false);
	g_free(doc);
}

/* --------------------------------------------------------------- fleet --- */

struct url_case {
	const char *url;
	const char *stored; /* NULL: refused */
};

static const struct url_case url_cases[] = {
	{ "http://127.0.0.1:8101", "http://127.0.0.1:8101" },
	{ "http://127.0.0.1:8101/", "http://127.0.0.1:8101" },
	{ "http://engine-0.internal:8000", "http://engine-0.internal:8000" },
	{ "http://[::1]:8000", "http://[::1]:8000" },
	{ "http://h:1", "http://h:1" },
	{ "http://h:65535", "http://h:65535" },
	{ "http://h:0", NULL },
	{ "http://h:65536", NULL },
	{ "http://h", NULL },
	{ "http://h:", NULL },
	/* Issue 9: https engines, through libcurl. */
	{ "https://h:8000", "https://h:8000" },
	{ "https://[::1]:8443/", "https://[::1]:8443" },
	{ "https://h", NULL },
	{ "httpss://h:8000", NULL },
	{ "h:8000", NULL },
	{ "http://h:8000/v1", NULL },
	{ "http://h:8000//", NULL },
	{ "http://h:8000?x=1", NULL },
	{ "http://user@h:8000", NULL },
	{ "http://h h:8000", NULL },
	{ "http://:8000", NULL },
	{ "http://[]:8000", NULL },
	{ "http://10.0.0.7:8000", "http://10.0.0.7:8000" },
	{ "http://[fe80::1]:8000", "http://[fe80::1]:8000" },
};

/* What a refused URL is told: the mistake itself, not a symptom of it. */
static const struct {
	const char *url, *problem;
} url_problems[] = {
	{ "http://u:p@127.0.0.1:9101", "has user information" },
	{ "http://user@h:8000", "has user information" },
	{ "http://::1:9101", "has an IPv6 address without brackets: write it as [address]:port" },
	{ "http://[1.2.3.4]:9101", "has a malformed [IPv6] host" },
	{ "http://[:::::]:9101", "has a malformed [IPv6] host" },
	{ "http://999.1.1.1:9101", "has a malformed IPv4 address" },
	{ "http://1.2.3:9101", "has a malformed IPv4 address" },
	{ "http://h:8000/a:b", "has something after the port" },
};

static void
test_url_problems(void)
{
	for (size_t i = 0; i < G_N_ELEMENTS(url_problems); i++) {
		char *value = g_strdup_printf("\"%s\"", url_problems[i].url);
		char *doc = make_doc(NULL, "fleet.engines[0].url", value);
		struct outcome o = load(doc);

		g_assert_null(o.cfg);
		g_assert_nonnull(find_problem(o.problems, "fleet.engines[0].url",
		                              url_problems[i].problem));
		outcome_clear(&o);
		g_free(doc);
		g_free(value);
	}
}

static void
test_url(gconstpointer data)
{
	const struct url_case *c = data;
	char *value = g_strdup_printf("\"%s\"", c->url);
	char *doc = make_doc(NULL, "fleet.engines[0].url", value);
	struct outcome o = load(doc);

	if (c->stored) {
		g_assert_nonnull(o.cfg);
		g_assert_cmpstr(o.cfg->fleet.engines[0].url, ==, c->stored);
	} else {
		g_assert_null(o.cfg);
		g_assert_nonnull(find_problem(o.problems, "fleet.engines[0].url",
		                              "an http://host:port or https://host:port URL with no path"));
	}
	outcome_clear(&o);
	g_free(doc);
	g_free(value);
}

struct role_case {
	const char *name;
	const char *fragment;
	const char *roles;  /* one letter per engine: P or D */
	const char *set;    /* one letter per engine: y if role_set */
};

static const struct role_case role_cases[] = {
	{ "none-given", "{" THREE_ENGINES "}", "PDD", "nnn" },
	{ "none-given-two-prefill", "{\"controller\": {\"min_prefill\": 2}, " THREE_ENGINES "}",
	  "PPD", "nnn" },
	{ "explicit-decode-first", "{\"fleet\": {\"engines\": ["
	  "{\"id\": \"a\", \"url\": \"http://h:1\", \"role\": \"decode\"},"
	  "{\"id\": \"b\", \"url\": \"http://h:2\"}, {\"id\": \"c\", \"url\": \"http://h:3\"}]}}",
	  "DPD", "ynn" },
	{ "explicit-prefill-last", "{\"fleet\": {\"engines\": ["
	  "{\"id\": \"a\", \"url\": \"http://h:1\"}, {\"id\": \"b\", \"url\": \"http://h:2\"},"
	  "{\"id\": \"c\", \"url\": \"http://h:3\", \"role\": \"prefill\"}]}}", "DDP", "nny" },
	{ "all-explicit", "{\"fleet\": {\"engines\": ["
	  "{\"id\": \"a\", \"url\": \"http://h:1\", \"role\": \"decode\"},"
	  "{\"id\": \"b\", \"url\": \"http://h:2\", \"role\": \"prefill\"}]}}", "DP", "yy" },
	{ "single-engine", "{" ONE_ENGINE "}", "P", "n" },
};

/* spec 7.2 floors and Narwhal's assignment: roleless engines fill prefill
 * up to min_prefill in file order, the rest decode */
static void
test_roles(gconstpointer data)
{
	const struct role_case *c = data;
	char *doc = make_doc(c->fragment, NULL, NULL);
	struct outcome o = load(doc);

	g_assert_nonnull(o.cfg);
	g_assert_cmpuint(o.cfg->fleet.n_engines, ==, strlen(c->roles));
	for (uint32_t i = 0; i < o.cfg->fleet.n_engines; i++) {
		const struct nw_engine_config *e = &o.cfg->fleet.engines[i];
		g_assert_cmpint(e->role, ==, c->roles[i] == 'P' ? NW_ROLE_PREFILL : NW_ROLE_DECODE);
		g_assert_cmpint(e->role_set, ==, c->set[i] == 'y');
	}
	outcome_clear(&o);
	g_free(doc);
}

static void
test_fleet_required(void)
{
	expect("{}", false, "fleet.engines", "missing: an array of at least one engine object", false);
	expect("{\"fleet\": {}}", false, "fleet.engines", "missing", false);
	/* a dotted key is not the field it spells */
	expect("{\"fleet.engines\": [{\"id\": \"a\", \"url\": \"http://h:1\"}]}", false, "fleet.engines",
	       "missing", false);
	expect("{\"fleet\": {\"engines\": []}}", false, "fleet.engines", "no engines", false);
	expect("{\"fleet\": {\"engines\": {}}}", false, "fleet.engines", "wrong type, found an object",
	       false);
	expect("{\"fleet\": {\"engines\": [5]}}", false, "fleet.engines[0]",
	       "wrong type, found integer 5: an engine object", false);
	expect("{\"fleet\": {\"engines\": [{\"url\": \"http://h:1\"}]}}", false, "fleet.engines[0].id",
	       "missing: a name of letters, digits", false);
	expect("{\"fleet\": {\"engines\": [{\"id\": \"a\"}]}}", false, "fleet.engines[0].url",
	       "missing: an http://host:port or https://host:port URL", false);
	expect("{\"fleet\": {\"engines\": [{\"id\": \"a b\", \"url\": \"http://h:1\"}]}}", false,
	       "fleet.engines[0].id", "not allowed (' ')", false);
	expect("{\"fleet\": {\"engines\": [{\"id\": \"A-1.b_2\", \"url\": \"http://h:1\"}]}}", true,
	       NULL, NULL, false);
}

static void
test_fleet_duplicates(void)
{
	expect("{\"fleet\": {\"engines\": [{\"id\": \"e1\", \"url\": \"http://h:1\"}, "
	       "{\"id\": \"e2\", \"url\": \"http://h:2\"}, {\"id\": \"e1\", \"url\": \"http://h:3\"}]}}",
	       false, "fleet.engines[2].id", "duplicate id \"e1\": ids must be unique", false);
	expect("{\"fleet\": {\"engines\": [{\"id\": \"e1\", \"url\": \"http://h:1\"}, "
	       "{\"id\": \"e2\", \"url\": \"http://h:1/\"}]}}",
	       false, "fleet.engines[1].url", "duplicate url \"http://h:1\" (also fleet.engines[0])",
	       false);
}

/* ----------------------------------------------------- the document --- */

static void
test_malformed_json(void)
{
	struct outcome o = load("{\n  \"serving\": {\n    \"max_attempts\": 2,\n  }\n}\n");
	const struct nw_config_error *e;

	g_assert_null(o.cfg);
	g_assert_cmpuint(o.problems->len, ==, 1);
	e = o.problems->pdata[0];
	g_assert_null(e->path);
	g_assert_nonnull(strstr(e->message, "malformed JSON at line 4, column"));
	outcome_clear(&o);
	expect("", false, NULL, "the file is empty: a JSON object", false);
	expect(" \n", false, NULL, "the file is empty: a JSON object", false);
	expect("\xEF\xBB\xBF{}", false, NULL, "starts with a byte-order mark", false);
	expect("{\n  // the fleet\n}", false, NULL, "(comments are not JSON: remove them)",
	       false);
	expect("{\"a\": 1} x", false, NULL, "end of file expected", false);
	/* a repeated key is almost always an edit that lost its twin */
	expect("{\"serving\": {\"max_attempts\": 1, \"max_attempts\": 2}}", false, NULL,
	       "duplicate object key", false);
}

static void
test_top_level(void)
{
	expect("[1, 2]", false, NULL, "wrong type at the top level, found an array: an object", false);
}

/* every problem is reported, not only the first */
static void
test_all_errors(void)
{
	struct outcome o = load("{\"serving\": {\"max_attempts\": 9, \"queu_capacity\": 1},"
	                        " \"engine\": {\"tokenize\": 1},"
	                        " \"controller\": {\"thresholds\": {\"shrink\": 3}},"
	                        " \"fleet\": {\"engines\": [{\"id\": \"a\", \"url\": \"ftp://x\"}]}}");

	g_assert_null(o.cfg);
	g_assert_nonnull(find_problem(o.problems, "serving.max_attempts", "out of range"));
	g_assert_nonnull(find_problem(o.problems, "serving.queu_capacity", "unknown key"));
	g_assert_nonnull(find_problem(o.problems, "engine.tokenize", "wrong type"));
	g_assert_nonnull(find_problem(o.problems, "controller.thresholds.shrink", "not below"));
	g_assert_nonnull(find_problem(o.problems, "fleet.engines[0].url", "does not start with"));
	g_assert_cmpuint(nw_config_error_count(o.problems), ==, 5);
	outcome_clear(&o);
}

/* a refused value is not judged again by the rules that use it */
static void
test_no_cascade(void)
{
	struct outcome o = load("{\"serving\": {\"retry_base_s\": \"fast\", \"retry_cap_s\": 0.01},"
	                        " \"fleet\": {\"engines\": [{\"id\": \"a\", \"url\": \"http://h:1\"}]}}");

	g_assert_null(o.cfg);
	g_assert_cmpuint(o.problems->len, ==, 1);
	outcome_clear(&o);
}

/* a problem stays one printable line whatever the file holds */
static void
test_message_text(void)
{
	char *doc = make_doc("{\"ser\\nving\": 1}", NULL, NULL);
	char *long_host = g_strdup_printf("\"%s x\"", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
	char *doc2 = make_doc(NULL, "server.host", long_host);
	struct outcome o;
	const struct nw_config_error *e;
	json_t *eff;

	expect(doc, false, "ser\\u000aving", "unknown key", false);

	o = load(doc2);
	e = find_problem(o.problems, "server.host", "...\" has a character that is not allowed");
	g_assert_nonnull(e);
	g_assert_null(strstr(e->message, " x\""));
	outcome_clear(&o);

	/* -0.0 is stored, and shown, as 0.0 */
	g_free(doc);
	doc = make_doc(NULL, "engine.decode_read_timeout_s", "-0.0");
	o = load(doc);
	g_assert_nonnull(o.cfg);
	g_assert_false(signbit(o.cfg->engine.decode_read_timeout_s));
	eff = nw_config_to_json(o.cfg);
	g_assert_false(signbit(json_real_value(at_path(eff, "engine.decode_read_timeout_s", NULL))));
	json_decref(eff);
	outcome_clear(&o);
	g_free(doc);
	g_free(doc2);
	g_free(long_host);
}

static void
test_error_format(void)
{
	struct nw_config_error e = { (char *)"serving.max_attempts",
	                             (char *)"5 is out of range: an integer from 1 to 3", false };
	char *s = nw_config_error_format("conf/x.json", &e);

	g_assert_cmpstr(s, ==, "conf/x.json: serving.max_attempts: 5 is out of range: "
	                       "an integer from 1 to 3");
	g_free(s);
	e.warning = true; /* the same line: the caller marks warnings */
	s = nw_config_error_format("conf/x.json", &e);
	g_assert_cmpstr(s, ==, "conf/x.json: serving.max_attempts: 5 is out of range: "
	                       "an integer from 1 to 3");
	g_free(s);
	e.path = NULL;
	e.warning = false;
	s = nw_config_error_format("conf/x.json", &e);
	g_assert_cmpstr(s, ==, "conf/x.json: 5 is out of range: an integer from 1 to 3");
	g_free(s);
}

static void
test_load_file(void)
{
	GPtrArray *problems = NULL;
	struct nw_config *cfg;
	GError *error = NULL;
	char *dir = g_dir_make_tmp("test-config-XXXXXX", &error), *file;

	g_assert_no_error(error);
	file = g_build_filename(dir, "n.json", NULL);

	cfg = nw_config_load_file(file, &problems);
	g_assert_null(cfg);
	g_assert_cmpuint(problems->len, ==, 1);
	g_assert_cmpstr(((struct nw_config_error *)problems->pdata[0])->message, ==,
	                "cannot open the file: No such file or directory");
	g_ptr_array_unref(problems);
	problems = NULL;

	g_assert_true(g_file_set_contents(file, base_doc, -1, NULL));
	cfg = nw_config_load_file(file, &problems);
	g_assert_nonnull(cfg);
	g_assert_cmpstr(cfg->source, ==, file);
	g_assert_cmpuint(problems->len, ==, 0);
	nw_config_free(cfg);

	/* problems accumulate in an array the caller passes in */
	cfg = nw_config_load_file(dir, &problems);
	g_assert_null(cfg);
	g_assert_cmpuint(problems->len, ==, 1);
	g_assert_cmpstr(((struct nw_config_error *)problems->pdata[0])->message, ==,
	                "is not a regular file (a directory): a JSON file");
	g_ptr_array_unref(problems);
	problems = NULL;

	g_unlink(file);
	g_free(file);
	file = g_build_filename(dir, "fifo.json", NULL);
	g_assert_cmpint(mkfifo(file, 0600), ==, 0);
	/* a FIFO nobody writes to is refused at once, not waited on */
	cfg = nw_config_load_file(file, &problems);
	g_assert_null(cfg);
	g_assert_cmpuint(problems->len, ==, 1);
	g_assert_cmpstr(((struct nw_config_error *)problems->pdata[0])->message, ==,
	                "is not a regular file (a pipe, socket or device): a JSON file");
	g_ptr_array_unref(problems);
	problems = NULL;
	g_unlink(file);

	/* a file past the cap is refused, not read whole */
	{
		GString *big = g_string_new("{\"x\": \"");

		while (big->len <= NW_CONFIG_FILE_MAX_BYTES)
			g_string_append_c(big, 'a');
		g_string_append(big, "\"}");
		g_assert_true(g_file_set_contents(file, big->str, (gssize)big->len, NULL));
		g_string_free(big, TRUE);
	}
	cfg = nw_config_load_file(file, &problems);
	g_assert_null(cfg);
	g_assert_cmpuint(problems->len, ==, 1);
	g_assert_cmpstr(((struct nw_config_error *)problems->pdata[0])->message, ==,
	                "is larger than 16 MiB: a configuration file of at most 16 MiB");
	g_ptr_array_unref(problems);

	/* and may be ignored */
	cfg = nw_config_load_string("{", NULL, NULL);
	g_assert_null(cfg);

	g_unlink(file);
	g_rmdir(dir);
	g_free(file);
	g_free(dir);
}

/* ------------------------------------------------------------ derived --- */

static void
test_control_connections(void)
{
	static const struct {
		const char *fragment;
		uint32_t want;
	} cases[] = {
		{ "{" ONE_ENGINE "}", 4 },
		{ NULL, 4 },
		{ "{" THREE_ENGINES "}", 6 },
		{ "{\"engine\": {\"control_connections\": 7}}", 7 },
		{ "{\"engine\": {\"control_connections\": 1}, " THREE_ENGINES "}", 1 },
	};

	for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
		char *doc = make_doc(cases[i].fragment, NULL, NULL);
		struct outcome o = load(doc);
		json_t *eff;

		g_assert_nonnull(o.cfg);
		g_assert_cmpuint(nw_config_control_connections(o.cfg), ==, cases[i].want);
		/* the effective config shows the field as configured */
		eff = nw_config_to_json(o.cfg);
		g_assert_cmpint(json_integer_value(at_path(eff, "engine.control_connections", NULL)), ==,
		                o.cfg->engine.control_connections);
		json_decref(eff);
		outcome_clear(&o);
		g_free(doc);
	}
}

static void
test_admission_limit(void)
{
	char *doc = make_doc(NULL, NULL, NULL);
	struct outcome o = load(doc);

	g_assert_cmpuint(nw_config_admission_limit(o.cfg), ==, 512);
	outcome_clear(&o);
	g_free(doc);
	doc = make_doc("{\"serving\": {\"max_connections\": 64}, "
	               "\"plugins\": {\"admission\": {\"max_inflight\": 48}}}", NULL, NULL);
	o = load(doc);
	g_assert_cmpuint(nw_config_admission_limit(o.cfg), ==, 48);
	outcome_clear(&o);
	g_free(doc);
}

static void
test_admission_names(void)
{
	char *doc = make_doc("{\"plugins\": {\"admission\": {\"name\": \"open\"}}}", NULL, NULL);
	struct outcome o = load(doc);

	/* the plugin name alone selects the mode too */
	g_assert_cmpint(o.cfg->serving.admission, ==, NW_ADMISSION_OPEN);
	g_assert_cmpstr(o.cfg->plugins.admission.name, ==, "open");
	g_assert_cmpstr(o.cfg->plugins.controller.name, ==, "reactive");
	outcome_clear(&o);
	g_free(doc);

	doc = make_doc("{\"serving\": {\"admission\": \"open\"}, "
	               "\"controller\": {\"policy\": \"static\"}}", NULL, NULL);
	o = load(doc);
	g_assert_cmpstr(o.cfg->plugins.admission.name, ==, "open");
	g_assert_cmpstr(o.cfg->plugins.controller.name, ==, "static");
	outcome_clear(&o);
	g_free(doc);

	g_assert_cmpstr(nw_config_admission_name(NW_ADMISSION_PREDICTIVE), ==, "predictive");
	g_assert_cmpstr(nw_config_admission_name(NW_ADMISSION_OPEN), ==, "open");
	g_assert_cmpstr(nw_config_role_name(NW_ROLE_PREFILL), ==, "prefill");
	g_assert_cmpstr(nw_config_role_name(NW_ROLE_DECODE), ==, "decode");
	g_assert_null(nw_config_role_name((nw_engine_role)0));
}

/* Every field lands in its own struct member: distinct values in, the same
 * values out. Guards the table's offsets. */
static void
test_struct_members(void)
{
	char *doc = make_doc(
		"{\"server\": {\"host\": \"::1\", \"port\": 9001, \"client_timeout_s\": 11},"
		" \"log\": {\"level\": \"debug\", \"format\": \"text\", \"access\": false},"
		" \"slo\": {\"ttft_s\": 1.5, \"tpot_s\": 0.05},"
		" \"serving\": {\"admission\": \"open\", \"admission_margin\": 0.07, \"max_connections\": 301,"
		"  \"queue_capacity\": 302, \"queue_timeout_s\": 3.5, \"prefill_concurrency\": 303,"
		"  \"decode_concurrency\": 304, \"handoff_timeout_s\": 12.5, \"max_attempts\": 3,"
		"  \"retry_base_s\": 0.25, \"retry_cap_s\": 4.5, \"retry_budget\": 305,"
		"  \"retry_replenish\": 0.75, \"max_request_bytes\": 306, \"max_response_bytes\": 307,"
		"  \"request_timeout_s\": 408, \"prefill_timeout_s\": 309},"
		" \"engine\": {\"control_connections\": 310, \"decode_read_timeout_s\": 311,"
		"  \"first_token_timeout_s\": 312, \"tokenize\": false, \"tokenize_timeout_s\": 313,"
		"  \"chars_per_token\": 3.14, \"pool_timeout_s\": 314, \"connect_timeout_s\": 315,"
		"  \"health_timeout_s\": 316},"
		" \"profiles\": {\"path\": \"p.json\"},"
		" \"recovery\": {\"failure_quarantine_s\": 317, \"health\": {\"window_s\": 318,"
		"  \"min_samples\": 19}},"
		" \"controller\": {\"policy\": \"static\", \"advisory\": true, \"monitor_interval_s\": 2,"
		"  \"monitor_failure_limit\": 320, \"min_prefill\": 1, \"min_decode\": 1,"
		"  \"flip_history\": 321,"
		"  \"thresholds\": {\"expand\": 3.5, \"shrink\": 0.25, \"cooldown_s\": 322,"
		"   \"sustained_intervals\": 323, \"dwell_s\": 324, \"panic_ratio\": 2.5,"
		"   \"flip_resident_guard\": 325},"
		"  \"reactive\": {\"window_s\": 400, \"confirmations\": 326, \"utilization\": 0.65,"
		"   \"min_arrivals\": 327, \"demand_floor\": 0.35, \"movement_margin\": 0.15,"
		"   \"step_s\": 328, \"evidence_span_s\": 329, \"evidence_max_span_s\": 330,"
		"   \"evidence_min_arrivals\": 331, \"demand_rise_tolerance\": 0.45,"
		"   \"decode_correction_min\": 0.55, \"decode_correction_max\": 3.25,"
		"   \"decode_correction_alpha\": 0.85, \"decode_correction_min_samples\": 332}},"
		" \"fleet\": {\"model\": \"m\", \"engines\": ["
		"  {\"id\": \"x\", \"url\": \"http://h:1\", \"dialect\": \"sglang\", \"role\": \"decode\","
		"   \"pinned\": true, \"kv_lease_s\": 333},"
		"  {\"id\": \"y\", \"url\": \"http://h:2\", \"role\": \"prefill\"}]},"
		" \"plugins\": {\"dir\": \"/\","
		"  \"admission\": {\"path\": \"/a.so\", \"config\": {\"a\": 1}, \"max_inflight\": 300},"
		"  \"placement\": {\"name\": \"slo-cost\", \"path\": \"/p.so\", \"config\": {\"p\": 2}},"
		"  \"controller\": {\"path\": \"/c.so\", \"config\": {\"c\": 3}},"
		"  \"dialects\": {\"sglang\": {\"d\": 4}}}}",
		NULL, NULL);
	struct outcome o = load(doc);
	const struct nw_config *c = o.cfg;
	const struct nw_engine_config *e;

	dump_problems(o.problems);
	g_assert_nonnull(c);
	g_assert_cmpuint(o.problems->len, ==, 0);
	g_assert_cmpstr(c->server.host, ==, "::1");
	g_assert_cmpuint(c->server.port, ==, 9001);
	g_assert_cmpfloat(c->server.client_timeout_s, ==, 11);
	g_assert_cmpstr(c->log.level, ==, "debug");
	g_assert_cmpint(c->log.format, ==, NW_LOG_FORMAT_TEXT);
	g_assert_false(c->log.access);
	g_assert_cmpfloat(c->slo.ttft_s, ==, 1.5);
	g_assert_cmpfloat(c->slo.tpot_s, ==, 0.05);
	g_assert_cmpint(c->serving.admission, ==, NW_ADMISSION_OPEN);
	g_assert_cmpfloat(c->serving.admission_margin, ==, 0.07);
	g_assert_cmpuint(c->serving.max_connections, ==, 301);
	g_assert_cmpuint(c->serving.queue_capacity, ==, 302);
	g_assert_cmpfloat(c->serving.queue_timeout_s, ==, 3.5);
	g_assert_cmpuint(c->serving.prefill_concurrency, ==, 303);
	g_assert_cmpuint(c->serving.decode_concurrency, ==, 304);
	g_assert_cmpfloat(c->serving.handoff_timeout_s, ==, 12.5);
	g_assert_cmpuint(c->serving.max_attempts, ==, 3);
	g_assert_cmpfloat(c->serving.retry_base_s, ==, 0.25);
	g_assert_cmpfloat(c->serving.retry_cap_s, ==, 4.5);
	g_assert_cmpuint(c->serving.retry_budget, ==, 305);
	g_assert_cmpfloat(c->serving.retry_replenish, ==, 0.75);
	g_assert_cmpuint(c->serving.max_request_bytes, ==, 306);
	g_assert_cmpuint(c->serving.max_response_bytes, ==, 307);
	g_assert_cmpfloat(c->serving.request_timeout_s, ==, 408);
	g_assert_cmpfloat(c->serving.prefill_timeout_s, ==, 309);
	g_assert_cmpuint(c->engine.control_connections, ==, 310);
	g_assert_cmpfloat(c->engine.decode_read_timeout_s, ==, 311);
	g_assert_cmpfloat(c->engine.first_token_timeout_s, ==, 312);
	g_assert_false(c->engine.tokenize);
	g_assert_cmpfloat(c->engine.tokenize_timeout_s, ==, 313);
	g_assert_cmpfloat(c->engine.chars_per_token, ==, 3.14);
	g_assert_cmpfloat(c->engine.pool_timeout_s, ==, 314);
	g_assert_cmpfloat(c->engine.connect_timeout_s, ==, 315);
	g_assert_cmpfloat(c->engine.health_timeout_s, ==, 316);
	g_assert_cmpstr(c->profiles.path, ==, "p.json");
	g_assert_cmpfloat(c->recovery.failure_quarantine_s, ==, 317);
	g_assert_cmpfloat(c->recovery.health.window_s, ==, 318);
	g_assert_cmpuint(c->recovery.health.min_samples, ==, 19);
	g_assert_cmpstr(c->controller.policy, ==, "static");
	g_assert_true(c->controller.advisory);
	g_assert_cmpfloat(c->controller.monitor_interval_s, ==, 2);
	g_assert_cmpuint(c->controller.monitor_failure_limit, ==, 320);
	g_assert_cmpuint(c->controller.flip_history, ==, 321);
	g_assert_cmpfloat(c->controller.thresholds.expand, ==, 3.5);
	g_assert_cmpfloat(c->controller.thresholds.shrink, ==, 0.25);
	g_assert_cmpfloat(c->controller.thresholds.cooldown_s, ==, 322);
	g_assert_cmpuint(c->controller.thresholds.sustained_intervals, ==, 323);
	g_assert_cmpfloat(c->controller.thresholds.dwell_s, ==, 324);
	g_assert_cmpfloat(c->controller.thresholds.panic_ratio, ==, 2.5);
	g_assert_cmpuint(c->controller.thresholds.flip_resident_guard, ==, 325);
	g_assert_cmpfloat(c->controller.reactive.window_s, ==, 400);
	g_assert_cmpuint(c->controller.reactive.confirmations, ==, 326);
	g_assert_cmpfloat(c->controller.reactive.utilization, ==, 0.65);
	g_assert_cmpuint(c->controller.reactive.min_arrivals, ==, 327);
	g_assert_cmpfloat(c->controller.reactive.demand_floor, ==, 0.35);
	g_assert_cmpfloat(c->controller.reactive.movement_margin, ==, 0.15);
	g_assert_cmpfloat(c->controller.reactive.step_s, ==, 328);
	g_assert_cmpfloat(c->controller.reactive.evidence_span_s, ==, 329);
	g_assert_cmpfloat(c->controller.reactive.evidence_max_span_s, ==, 330);
	g_assert_cmpuint(c->controller.reactive.evidence_min_arrivals, ==, 331);
	g_assert_cmpfloat(c->controller.reactive.demand_rise_tolerance, ==, 0.45);
	g_assert_cmpfloat(c->controller.reactive.decode_correction_min, ==, 0.55);
	g_assert_cmpfloat(c->controller.reactive.decode_correction_max, ==, 3.25);
	g_assert_cmpfloat(c->controller.reactive.decode_correction_alpha, ==, 0.85);
	g_assert_cmpuint(c->controller.reactive.decode_correction_min_samples, ==, 332);
	g_assert_cmpstr(c->fleet.model, ==, "m");
	g_assert_cmpuint(c->fleet.n_engines, ==, 2);
	e = &c->fleet.engines[0];
	g_assert_cmpstr(e->id, ==, "x");
	g_assert_cmpstr(e->url, ==, "http://h:1");
	g_assert_cmpstr(e->dialect, ==, "sglang");
	g_assert_cmpint(e->role, ==, NW_ROLE_DECODE);
	g_assert_true(e->role_set);
	g_assert_true(e->pinned);
	g_assert_cmpfloat(e->kv_lease_s, ==, 333);
	g_assert_cmpstr(c->fleet.engines[1].dialect, ==, "vllm");
	g_assert_cmpstr(c->plugins.dir, ==, "/");
	g_assert_cmpstr(c->plugins.admission.name, ==, "open");
	g_assert_cmpstr(c->plugins.admission.path, ==, "/a.so");
	g_assert_cmpint(json_integer_value(json_object_get(c->plugins.admission.config, "a")), ==, 1);
	g_assert_cmpuint(c->plugins.admission_max_inflight, ==, 300);
	g_assert_cmpstr(c->plugins.placement.name, ==, "slo-cost");
	g_assert_cmpstr(c->plugins.placement.path, ==, "/p.so");
	g_assert_cmpint(json_integer_value(json_object_get(c->plugins.placement.config, "p")), ==, 2);
	g_assert_cmpstr(c->plugins.controller.name, ==, "static");
	g_assert_cmpstr(c->plugins.controller.path, ==, "/c.so");
	g_assert_cmpint(json_integer_value(json_object_get(c->plugins.controller.config, "c")), ==, 3);
	g_assert_nonnull(json_object_get(c->plugins.dialects, "sglang"));
	g_assert_null(nw_config_dialect_path(c, "sglang"));
	outcome_clear(&o);
	g_free(doc);
}

/* issue 14: plugins.dialects.<name>.path names the dialect's file and is
 * Narwhal's: the dialect's section is the entry without it. */
static void
test_dialect_path_section(void)
{
	g_autoptr(nw_config) c = nw_config_load_string(
		"{\"fleet\": {\"engines\": [{\"id\": \"a\", \"url\": \"http://h:1\", "
		"\"role\": \"prefill\"}, {\"id\": \"b\", \"url\": \"http://h:2\", "
		"\"role\": \"decode\", \"dialect\": \"mine\"}]}, "
		"\"plugins\": {\"dialects\": {\"mine\": {\"path\": \"/src/mine.so\", \"k\": 1}}}}",
		"t.json", NULL);
	json_t *section;

	g_assert_nonnull(c);
	g_assert_cmpstr(nw_config_dialect_path(c, "mine"), ==, "/src/mine.so");
	g_assert_null(nw_config_dialect_path(c, "vllm"));
	section = nw_config_dialect_section(c, "mine");
	g_assert_null(json_object_get(section, "path"));
	g_assert_cmpint(json_integer_value(json_object_get(section, "k")), ==, 1);
	json_decref(section);
	/* The entry itself keeps its path (the effective configuration). */
	g_assert_nonnull(json_object_get(json_object_get(c->plugins.dialects, "mine"), "path"));
	g_assert_null(nw_config_dialect_section(c, "vllm"));
}

/* --------------------------------------------- effective configuration --- */

static void
flatten(const json_t *node, const char *prefix, GHashTable *fields, GPtrArray *out)
{
	const char *k;
	json_t *v;

	json_object_foreach((json_t *)node, k, v) {
		char *p = *prefix ? g_strconcat(prefix, ".", k, NULL) : g_strdup(k);
		if (g_hash_table_contains(fields, p)) {
			g_ptr_array_add(out, g_strdup(p));
		} else if (json_is_object(v)) {
			flatten(v, p, fields, out);
		} else if (json_is_array(v)) {
			char *q = g_strconcat(p, "[]", NULL);
			for (size_t i = 0; i < json_array_size(v); i++)
				flatten(json_array_get(v, i), q, fields, out);
			g_free(q);
		} else {
			g_ptr_array_add(out, g_strdup(p)); /* not a field: fails below */
		}
		g_free(p);
	}
}

/* The effective config shows exactly the fields in tests/config/fields.list
 * (the list the docs and check-config.sh use), and nothing else. */
static void
test_to_json_fields(void)
{
	char *file = g_test_build_filename(G_TEST_DIST, "config", "fields.list", NULL);
	char *text = NULL, **lines;
	GHashTable *fields = g_hash_table_new(g_str_hash, g_str_equal);
	GHashTable *seen = g_hash_table_new(g_str_hash, g_str_equal);
	GPtrArray *out = g_ptr_array_new_with_free_func(g_free);
	struct outcome o = load(base_doc);
	json_t *eff;

	if (!g_file_get_contents(file, &text, NULL, NULL)) {
		g_test_skip("tests/config/fields.list not found (set G_TEST_SRCDIR)");
		goto done;
	}
	lines = g_strsplit(text, "\n", -1);
	for (guint i = 0; lines[i]; i++) {
		if (lines[i][0] && lines[i][0] != '#')
			g_hash_table_add(fields, lines[i]);
	}
	eff = nw_config_to_json(o.cfg);
	flatten(eff, "", fields, out);
	for (guint i = 0; i < out->len; i++) {
		if (!g_hash_table_contains(fields, out->pdata[i]))
			g_test_message("not a field: %s", (char *)out->pdata[i]);
		g_assert_true(g_hash_table_contains(fields, out->pdata[i]));
		g_hash_table_add(seen, out->pdata[i]);
	}
	g_assert_cmpuint(g_hash_table_size(fields), >, 80);
	g_assert_cmpuint(g_hash_table_size(seen), ==, g_hash_table_size(fields));
	json_decref(eff);
	g_strfreev(lines);
done:
	g_free(text);
	g_free(file);
	g_hash_table_unref(fields);
	g_hash_table_unref(seen);
	g_ptr_array_unref(out);
	outcome_clear(&o);
}

/* What --check-config prints reads back as the same configuration. */
static void
test_to_json_round_trip(void)
{
	static const char *const fragments[] = {
		NULL,
		"{" THREE_ENGINES ", \"serving\": {\"admission\": \"open\"}}",
		"{\"serving\": {\"max_attempts\": 2, \"handoff_timeout_s\": 5}, "
		"\"plugins\": {\"dialects\": {\"vllm\": {\"x\": [1]}}, \"dir\": \"/\"}}",
		"{\"plugins\": {\"dialects\": {\"vllm\": {\"path\": \"/src/dialect-vllm.so\"}}}}",
	};

	for (size_t i = 0; i < G_N_ELEMENTS(fragments); i++) {
		char *doc = make_doc(fragments[i], NULL, NULL), *again;
		struct outcome a = load(doc), b;
		json_t *ja, *jb;

		g_assert_nonnull(a.cfg);
		ja = nw_config_to_json(a.cfg);
		again = json_dumps(ja, 0);
		b = load(again);
		if (!b.cfg)
			dump_problems(b.problems);
		g_assert_nonnull(b.cfg);
		jb = nw_config_to_json(b.cfg);
		g_assert_true(json_equal(ja, jb));
		json_decref(ja);
		json_decref(jb);
		free(again);
		outcome_clear(&a);
		outcome_clear(&b);
		g_free(doc);
	}
}

/* ---------------------------------------------------------------- main --- */

int
main(int argc, char **argv)
{
	GHashTable *names;

	g_test_init(&argc, &argv, NULL);
	names = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);

#define ADD(name, data, fn)                                                  \
	do {                                                                 \
		char *n_ = (name);                                           \
		g_assert_false(g_hash_table_contains(names, n_));           \
		g_test_add_data_func(n_, (data), (fn));                      \
		g_hash_table_add(names, n_);                                 \
	} while (0)

	for (size_t i = 0; i < G_N_ELEMENTS(default_cases); i++)
		ADD(test_name(default_cases[i].clause, "default", default_cases[i].path),
		    &default_cases[i], test_default);
	for (size_t i = 0; i < G_N_ELEMENTS(range_cases); i++) {
		char *what = g_strdup_printf("%s=%s", range_cases[i].path, range_cases[i].value);
		ADD(test_name(range_cases[i].clause, "range", what), &range_cases[i], test_range);
		g_free(what);
	}
	for (size_t i = 0; i < G_N_ELEMENTS(rule_cases); i++)
		ADD(test_name(rule_cases[i].clause, "rule", rule_cases[i].name), &rule_cases[i],
		    test_rule);
	for (size_t i = 0; i < G_N_ELEMENTS(unknown_cases); i++)
		ADD(g_strdup_printf("/config/unknown-key/%s", unknown_cases[i].path),
		    &unknown_cases[i], test_unknown);
	for (size_t i = 0; i < G_N_ELEMENTS(url_cases); i++)
		ADD(g_strdup_printf("/config/fleet/url/%zu", i), &url_cases[i], test_url);
	g_test_add_func("/config/fleet/url-problems", test_url_problems);
	for (size_t i = 0; i < G_N_ELEMENTS(role_cases); i++)
		ADD(g_strdup_printf("/config/spec-7.2/roles/%s", role_cases[i].name), &role_cases[i],
		    test_roles);
#undef ADD

	g_test_add_func("/config/fleet/required", test_fleet_required);
	g_test_add_func("/config/fleet/duplicates", test_fleet_duplicates);
	g_test_add_func("/config/plugins/dialect-path", test_dialect_path_section);
	g_test_add_func("/config/document/malformed-json", test_malformed_json);
	g_test_add_func("/config/document/top-level", test_top_level);
	g_test_add_func("/config/document/all-errors", test_all_errors);
	g_test_add_func("/config/document/no-cascade", test_no_cascade);
	g_test_add_func("/config/document/load-file", test_load_file);
	g_test_add_func("/config/error-format", test_error_format);
	g_test_add_func("/config/document/message-text", test_message_text);
	g_test_add_func("/config/spec-4.1/derived/control-connections", test_control_connections);
	g_test_add_func("/config/spec-4.1/derived/admission-limit", test_admission_limit);
	g_test_add_func("/config/narwhal/admission-names", test_admission_names);
	g_test_add_func("/config/struct-members", test_struct_members);
	g_test_add_func("/config/effective/every-field", test_to_json_fields);
	g_test_add_func("/config/effective/round-trip", test_to_json_round_trip);

	int rc = g_test_run();
	g_hash_table_unref(names);
	return rc;
}
