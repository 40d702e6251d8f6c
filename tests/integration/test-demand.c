/*
 * Demand accounting through the daemon (issue 12, "Demand accounting in
 * core"; docs/state.md, demand; docs/metrics.md, Demand): narwhal in front
 * of a narwhal-sim fleet (one prefill, one decode engine) on loopback
 * ephemeral ports. A few requests of known size are served, one is refused
 * before any leg (context length), and with serving.max_connections at 1
 * a connection that holds the one slot with its body unsent makes the next
 * request a 429 before its body: an unsized offer (spec 4.2). Then
 * /narwhal/state (both copies) and /metrics must agree with what was sent.
 * The ledger is written as requests end, after their answers, so every
 * reading is polled with a deadline. A reload then keeps the ledger.
 */
#include "build-config.h"

#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "integration/test-serve-common.h"

#define TOKEN_ENV "NARWHAL_TEST_DEMAND_ADMIN_TOKEN"
#define TOKEN "demand-admin-token"
#define WAIT_MS 10000

/* One admitted request at a time, and no queue: the connection ceiling is
 * 1. The TTFT budget is 2 * 1.5 s. The evidence window closes after 0.5 s
 * and 3 offers. */
static const char config[] =
	"{\"admin\": {\"port\": 0, \"token_env\": \"" TOKEN_ENV "\"},"
	" \"slo\": {\"ttft_s\": 2.0},"
	" \"serving\": {\"max_connections\": 1, \"queue_capacity\": 0, \"admission_margin\": 0.5},"
	" \"controller\": {\"monitor_interval_s\": 0.1,"
	"   \"reactive\": {\"evidence_span_s\": 0.5, \"evidence_min_arrivals\": 3}}}";

static const char *const sim_args[] = { "--engines", "2", "--time-scale", "4", NULL };

G_GNUC_NORETURN static void
fail(struct serve_env *e, const char *what)
{
	g_autofree char *log = serve_log(e);

	g_printerr("narwhal log:\n%s\n", log);
	g_error("%s", what);
}

static guint16
admin_port(struct serve_env *e)
{
	g_autofree char *log = serve_log(e);
	const char *at = strstr(log, "\"event\":\"admin_listening\"");

	if (at == NULL || (at = strstr(at, "\"port\":\"")) == NULL)
		fail(e, "no admin_listening line");
	return (guint16)atoi(at + strlen("\"port\":\""));
}

/* GET a JSON document (admin: the admin listener with the token); its
 * text in *text when text is not NULL. */
static json_t *
get_state(struct serve_env *e, gboolean admin, char **text)
{
	const char *const headers[] = { "Authorization: Bearer " TOKEN, NULL };
	struct sim_reply r;
	json_t *doc;

	sim_http(admin ? admin_port(e) : e->port, "GET", admin ? "/admin/state" : "/narwhal/state",
	         NULL, admin ? headers : NULL, 5000, &r);
	g_assert_cmpint(r.status, ==, 200);
	doc = sim_json(r.body->str);
	if (text != NULL)
		*text = g_strdup(r.body->str);
	sim_reply_clear(&r);
	return doc;
}

/* A dotted path into a document ("demand.totals.offers.sized"). */
static json_t *
at(json_t *doc, const char *path)
{
	g_auto(GStrv) parts = g_strsplit(path, ".", -1);

	for (char **p = parts; *p != NULL && doc != NULL; p++)
		doc = json_object_get(doc, *p);
	return doc;
}

static json_int_t
int_at(json_t *doc, const char *path)
{
	json_t *v = at(doc, path);

	if (!json_is_integer(v))
		g_error("%s is not an integer", path);
	return json_integer_value(v);
}

/* Poll the clients' state until path reaches value; the document. */
static json_t *
state_until(struct serve_env *e, const char *path, json_int_t value)
{
	gint64 deadline = g_get_monotonic_time() + WAIT_MS * 1000;

	for (;;) {
		json_t *doc = get_state(e, FALSE, NULL);
		json_t *v = at(doc, path);

		if (json_is_integer(v) && json_integer_value(v) == value)
			return doc;
		json_decref(doc);
		if (g_get_monotonic_time() > deadline) {
			g_autofree char *msg = g_strdup_printf("%s never reached %" JSON_INTEGER_FORMAT,
			                                       path, value);

			fail(e, msg);
		}
		g_usleep(20 * 1000);
	}
}

/* Poll the clients' state until path is true; the document. */
static json_t *
state_until_true(struct serve_env *e, const char *path)
{
	gint64 deadline = g_get_monotonic_time() + WAIT_MS * 1000;

	for (;;) {
		json_t *doc = get_state(e, FALSE, NULL);

		if (json_is_true(at(doc, path)))
			return doc;
		json_decref(doc);
		if (g_get_monotonic_time() > deadline)
			fail(e, path);
		g_usleep(20 * 1000);
	}
}

/* A completion whose prompt is n token ids (its size is exact, no
 * tokeniser needed), with this request id. */
static void
post_sized(struct serve_env *e, const char *id, unsigned n, unsigned max_tokens,
           struct sim_reply *r)
{
	GString *body = g_string_new(NULL);
	g_autofree char *header = g_strdup_printf("X-Request-Id: %s", id);
	const char *const headers[] = { header, NULL };

	g_string_append_printf(body, "{\"model\":\"%s\",\"max_tokens\":%u,\"prompt\":[", e->model,
	                       max_tokens);
	for (unsigned i = 0; i < n; i++)
		g_string_append_printf(body, "%s%u", i ? "," : "", 100 + i);
	g_string_append(body, "]}");
	serve_post(e, "/v1/completions", body->str, headers, 20000, r);
	g_string_free(body, TRUE);
}

/* A connection that sends a completion's headers and holds its body back:
 * narwhal holds the request (reading) until it closes. */
static int
hold_slot(guint16 port)
{
	struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = htons(port) };
	const char *head = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
	                   "Content-Type: application/json\r\nContent-Length: 64\r\n\r\n{";
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	g_assert_cmpint(fd, >=, 0);
	inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
	g_assert_cmpint(connect(fd, (struct sockaddr *)&addr, sizeof addr), ==, 0);
	g_assert_cmpint(write(fd, head, strlen(head)), ==, (ssize_t)strlen(head));
	return fd;
}

static void
wait_counter(struct serve_env *e, const char *name, json_int_t value)
{
	gint64 deadline = g_get_monotonic_time() + WAIT_MS * 1000;

	while (serve_counter(e, name) != value) {
		if (g_get_monotonic_time() > deadline)
			fail(e, name);
		g_usleep(20 * 1000);
	}
}

/* The model's context length, once the monitor has learnt it. */
static json_int_t
max_model_len(struct serve_env *e)
{
	gint64 deadline = g_get_monotonic_time() + WAIT_MS * 1000;

	for (;;) {
		struct sim_reply r;
		json_t *doc;
		json_int_t n;

		sim_http(e->port, "GET", "/v1/models", NULL, NULL, 5000, &r);
		doc = sim_json(r.body->str);
		n = json_integer_value(json_object_get(json_array_get(json_object_get(doc, "data"), 0),
		                                       "max_model_len"));
		json_decref(doc);
		sim_reply_clear(&r);
		if (n > 0)
			return n;
		if (g_get_monotonic_time() > deadline)
			fail(e, "the model's context length never became known");
		g_usleep(20 * 1000);
	}
}

/* The value of the sample whose line starts with "line " exactly; NAN when
 * absent. */
static double
sample(const char *text, const char *line)
{
	g_autofree char *needle = g_strconcat("\n", line, " ", NULL);
	const char *hit = strstr(text, needle);

	return hit ? g_ascii_strtod(hit + strlen(needle), NULL) : NAN;
}

static char *
scrape(struct serve_env *e)
{
	struct sim_reply r;
	char *text;

	sim_http(e->port, "GET", "/metrics", NULL, NULL, 5000, &r);
	g_assert_cmpint(r.status, ==, 200);
	text = g_strdup(r.body->str);
	sim_reply_clear(&r);
	return text;
}

/* promtool check metrics, when installed (test-metrics-scrape.c requires
 * it where NARWHAL_REQUIRE_PROMTOOL=1; here it is a bonus). */
static void
promtool_check(const char *text)
{
	g_autofree char *bin = g_find_program_in_path("promtool");
	g_autoptr(GSubprocess) proc = NULL;
	g_autofree char *out = NULL;
	GError *error = NULL;

	if (bin == NULL)
		return;
	proc = g_subprocess_new(G_SUBPROCESS_FLAGS_STDIN_PIPE | G_SUBPROCESS_FLAGS_STDOUT_PIPE |
	                        G_SUBPROCESS_FLAGS_STDERR_MERGE, &error, bin, "check", "metrics",
	                        NULL);
	g_assert_no_error(error);
	g_assert_true(g_subprocess_communicate_utf8(proc, text, NULL, &out, NULL, &error));
	g_assert_no_error(error);
	if (g_subprocess_get_exit_status(proc) != 0 || (out != NULL && *out != '\0'))
		g_error("promtool check metrics:\n%s", out ? out : "");
}

/* Issue 12, demand accounting; spec 4.2 (the ceiling's 429 is an unsized
 * offer), 5 (placements and unserved ones by phase), 7.6 (refused offers
 * are demand; short and long estimates; the evidence window closes by
 * span and arrivals). */
static void
test_demand_through_daemon(void)
{
	struct serve_env e;
	static const struct {
		const char *id;
		unsigned prompt, max_tokens;
	} sent[] = {
		{ "demand-it-a", 12, 8 },
		{ "demand-it-b", 30, 5 },
		{ "demand-it-c", 7, 16 },
	};
	json_int_t prompt_sum = 0, requested_sum = 0, delivered_sum = 0, limit;
	g_autofree char *client_text = NULL, *metrics = NULL;
	json_t *doc, *admin, *entries, *entry;
	struct sim_reply r;
	unsigned admissions = 0, placements = 0, ids_seen = 0;
	size_t i;
	int fd;

	g_test_summary("issue 12: the demand ledger in /narwhal/state and /metrics agrees with "
	               "the requests sent: sized offers, a context-length refusal, an unsized "
	               "offer at the connection ceiling, completions, token work, estimates, the "
	               "evidence window, priced decisions (request ids on the admin copy only)");
	if (!serve_start(&e, sim_args, "pd", config))
		return;
	if (!serve_wait_all_available(&e, WAIT_MS))
		fail(&e, "the engines did not all become available");

	for (i = 0; i < G_N_ELEMENTS(sent); i++) {
		json_t *body;

		post_sized(&e, sent[i].id, sent[i].prompt, sent[i].max_tokens, &r);
		if (r.status != 200)
			fail(&e, r.body->str);
		body = sim_json(r.body->str);
		delivered_sum += json_integer_value(at(body, "usage.completion_tokens"));
		json_decref(body);
		sim_reply_clear(&r);
		prompt_sum += sent[i].prompt;
		requested_sum += sent[i].max_tokens;
	}
	/* A sized offer refused before any leg: it cannot fit the model. */
	limit = max_model_len(&e);
	post_sized(&e, "demand-it-long", 4, (unsigned)limit, &r);
	serve_assert_error(&r, 400, "context_length_exceeded");
	sim_reply_clear(&r);
	prompt_sum += 4;
	requested_sum += limit;

	/* The one slot held by a body that does not come: the next request is
	 * refused at the ceiling before its body is read. */
	fd = hold_slot(e.port);
	wait_counter(&e, "retained", 1);
	post_sized(&e, "demand-it-over", 5, 5, &r);
	serve_assert_error(&r, 429, "too_many_requests");
	sim_reply_clear(&r);
	close(fd);
	wait_counter(&e, "retained", 0);

	/* The clients' copy, once every admitted request has ended. */
	doc = state_until(&e, "demand.totals.completed.ok", 3);
	g_assert_cmpint(int_at(doc, "demand.totals.offers.sized"), ==, 4);
	g_assert_cmpint(int_at(doc, "demand.totals.offers.unsized"), ==, 1);
	g_assert_cmpint(int_at(doc, "demand.totals.offers.sized_by_chars"), ==, 0);
	g_assert_cmpint(int_at(doc, "demand.totals.prompt_tokens"), ==, prompt_sum);
	g_assert_cmpint(int_at(doc, "demand.totals.output_tokens_requested"), ==, requested_sum);
	g_assert_cmpint(int_at(doc, "demand.totals.admitted"), ==, 3);
	g_assert_cmpint(int_at(doc, "demand.totals.queued"), ==, 0);
	g_assert_cmpint(int_at(doc, "demand.totals.refused.connection_ceiling"), ==, 1);
	g_assert_cmpint(int_at(doc, "demand.totals.refused.context_length"), ==, 1);
	g_assert_cmpint(int_at(doc, "demand.totals.refused.admission"), ==, 0);
	g_assert_cmpint(int_at(doc, "demand.totals.withdrawn"), ==, 0);
	g_assert_cmpint(int_at(doc, "demand.totals.completed.failed"), ==, 0);
	g_assert_cmpint(int_at(doc, "demand.totals.output_tokens_delivered"), ==, delivered_sum);
	g_assert_cmpint(delivered_sum, >, 0);
	/* Every offer, refused ones included, is an arrival of both horizons. */
	g_assert_cmpint(int_at(doc, "demand.long.arrivals"), ==, 5);
	g_assert_cmpint(int_at(doc, "demand.long.unsized_arrivals"), ==, 1);
	g_assert_cmpint(int_at(doc, "demand.long.prompt_tokens"), ==, prompt_sum);
	g_assert_cmpint(int_at(doc, "demand.long.output_tokens_delivered"), ==, delivered_sum);
	g_assert_cmpint(int_at(doc, "demand.short.arrivals"), ==, 5);
	g_assert_cmpfloat(json_real_value(at(doc, "demand.long.horizon_s")), ==, 120);
	g_assert_cmpfloat_with_epsilon(json_real_value(at(doc, "demand.short.horizon_s")), 0.5, 1e-6);
	g_assert_cmpfloat(json_real_value(at(doc, "demand.long.arrivals_per_s")), >, 0);
	g_assert_cmpfloat(json_real_value(at(doc, "demand.long.prompt_tokens_per_s")), >, 0);
	/* docs/state.md: the dispersion, a number or null (too few whole
	 * buckets yet), never absent */
	g_assert_true(json_is_number(at(doc, "demand.short.arrival_dispersion")) ||
	              json_is_null(at(doc, "demand.short.arrival_dispersion")));
	g_assert_true(json_is_number(at(doc, "demand.long.arrival_dispersion")) ||
	              json_is_null(at(doc, "demand.long.arrival_dispersion")));
	g_assert_cmpint(int_at(doc, "demand.evidence.arrivals"), ==, 5);
	g_assert_cmpint(int_at(doc, "demand.evidence.min_arrivals"), ==, 3);
	/* One binding placement per phase of each admitted request; open
	 * and least-loaded price nothing, so nothing is unserved. */
	g_assert_cmpint(int_at(doc, "placement.placed.prefill"), ==, 3);
	g_assert_cmpint(int_at(doc, "placement.placed.decode"), ==, 3);
	g_assert_cmpint(int_at(doc, "placement.placed.aggregate"), ==, 0);
	g_assert_cmpint(int_at(doc, "placement.unserved.prefill"), ==, 0);
	g_assert_cmpint(int_at(doc, "placement.unserved.decode"), ==, 0);
	entries = at(doc, "demand.decisions.entries");
	json_array_foreach(entries, i, entry) {
		const char *kind = json_string_value(json_object_get(entry, "kind"));

		g_assert_null(json_object_get(entry, "request_id"));
		if (g_strcmp0(kind, "admission") == 0) {
			admissions++;
			g_assert_cmpstr(json_string_value(json_object_get(entry, "verdict")), ==, "admit");
			g_assert_cmpfloat(json_real_value(json_object_get(entry, "budget_s")), ==, 3.0);
			g_assert_true(json_is_null(json_object_get(entry, "projected_ttft_s")));
			g_assert_true(json_is_true(json_object_get(entry, "prompt_tokens_exact")));
		} else {
			placements++;
			g_assert_cmpstr(kind, ==, "placement");
			g_assert_true(json_is_true(json_object_get(entry, "binding")));
			g_assert_true(json_is_false(json_object_get(entry, "unserved")));
			g_assert_nonnull(json_string_value(json_object_get(entry, "engine")));
		}
	}
	g_assert_cmpuint(admissions, ==, 3);
	g_assert_cmpuint(placements, ==, 6);
	g_assert_cmpint(int_at(doc, "demand.decisions.total"), ==, 9);
	json_decref(doc);

	/* Five offers: once half a second has passed since the start, the
	 * evidence window is closed by span and arrivals, not by its maximum
	 * (120 s). */
	doc = state_until_true(&e, "demand.evidence.closed");
	g_assert_cmpstr(json_string_value(at(doc, "demand.evidence.closed_by")), ==,
	                "span_and_arrivals");
	g_assert_cmpfloat(json_real_value(at(doc, "demand.evidence.closed_after_s")), >=, 0.5);
	g_assert_cmpfloat(json_real_value(at(doc, "demand.evidence.closed_after_s")), <, 120);
	json_decref(doc);

	/* Request ids are the operator's: in the admin copy, nowhere in the
	 * clients'. */
	json_decref(get_state(&e, FALSE, &client_text));
	g_assert_null(strstr(client_text, "demand-it-"));
	admin = get_state(&e, TRUE, NULL);
	json_array_foreach(at(admin, "demand.decisions.entries"), i, entry) {
		const char *id = json_string_value(json_object_get(entry, "request_id"));

		g_assert_nonnull(id);
		ids_seen += g_str_has_prefix(id, "demand-it-");
	}
	g_assert_cmpuint(ids_seen, ==, 9);
	json_decref(admin);

	/* The metrics say the same, and pass promtool. */
	metrics = scrape(&e);
	g_assert_cmpfloat(sample(metrics, "narwhal_demand_offers_total{size=\"sized\"}"), ==, 4);
	g_assert_cmpfloat(sample(metrics, "narwhal_demand_offers_total{size=\"unsized\"}"), ==, 1);
	g_assert_cmpfloat(sample(metrics, "narwhal_refusals_total{reason=\"connection_ceiling\"}"),
	                  ==, 1);
	g_assert_cmpfloat(sample(metrics, "narwhal_refusals_total{reason=\"context_length\"}"), ==, 1);
	g_assert_cmpfloat(sample(metrics, "narwhal_refusals_total{reason=\"admission_unavailable\"}"),
	                  ==, 0);
	g_assert_cmpfloat(sample(metrics, "narwhal_demand_completions_total{result=\"ok\"}"), ==, 3);
	g_assert_cmpfloat(sample(metrics, "narwhal_demand_tokens_total{work=\"prompt\"}"), ==,
	                  (double)prompt_sum);
	g_assert_cmpfloat(sample(metrics, "narwhal_demand_tokens_total{work=\"output_delivered\"}"),
	                  ==, (double)delivered_sum);
	g_assert_cmpfloat(sample(metrics, "narwhal_placements_total{phase=\"prefill\"}"), ==, 3);
	g_assert_cmpfloat(sample(metrics, "narwhal_placement_unserved_total{phase=\"decode\"}"), ==,
	                  0);
	g_assert_cmpfloat(sample(metrics, "narwhal_demand_arrivals_per_second{horizon=\"long\"}"), >,
	                  0);
	g_assert_cmpfloat(sample(metrics, "narwhal_demand_horizon_seconds{horizon=\"long\"}"), ==,
	                  120);
	/* docs/metrics.md: present for both horizons, NaN while unmeasured */
	g_assert_nonnull(strstr(metrics, "\nnarwhal_demand_arrival_dispersion{horizon=\"short\"} "));
	g_assert_nonnull(strstr(metrics, "\nnarwhal_demand_arrival_dispersion{horizon=\"long\"} "));
	g_assert_cmpfloat(sample(metrics, "narwhal_demand_evidence_closed"), ==, 1);
	g_assert_cmpfloat(sample(metrics, "narwhal_demand_evidence_arrivals"), ==, 5);
	g_assert_false(isnan(sample(metrics, "narwhal_demand_tokens_per_second{horizon=\"short\","
	                                     "work=\"prompt\"}")));
	promtool_check(metrics);

	/* A reload keeps the ledger (the daemon owns it, as the metrics): the
	 * totals go on; a new window_s restarts the long horizon; new
	 * evidence rules reopen the evidence window. */
	{
		json_t *file = json_load_file(e.config_path, 0, NULL);
		json_t *reactive = at(file, "controller.reactive");

		g_assert_nonnull(reactive);
		json_object_set_new(reactive, "window_s", json_real(100));
		json_object_set_new(reactive, "evidence_max_span_s", json_real(100));
		g_assert_cmpint(json_dump_file(file, e.config_path, 0), ==, 0);
		json_decref(file);
	}
	g_subprocess_send_signal(e.daemon, SIGHUP);
	doc = state_until(&e, "demand.evidence.resets", 1);
	g_assert_cmpstr(json_string_value(at(doc, "demand.evidence.last_reset")), ==, "reconfigured");
	g_assert_cmpint(int_at(doc, "demand.evidence.arrivals"), ==, 0);
	g_assert_cmpint(int_at(doc, "demand.totals.offers.sized"), ==, 4);
	g_assert_cmpint(int_at(doc, "demand.totals.offers.unsized"), ==, 1);
	g_assert_cmpint(int_at(doc, "demand.totals.completed.ok"), ==, 3);
	g_assert_cmpint(int_at(doc, "placement.placed.prefill"), ==, 3);
	g_assert_cmpint(int_at(doc, "demand.decisions.total"), ==, 9);
	g_assert_cmpint(int_at(doc, "demand.long.arrivals"), ==, 0);
	g_assert_cmpfloat_with_epsilon(json_real_value(at(doc, "demand.long.horizon_s")), 100, 1e-6);
	json_decref(doc);
	serve_clear(&e);
}

/* Spec 5: when every candidate breaks its projected SLO the host records
 * an unserved placement, by phase, and what the plugin priced it at. The
 * plugin here (placement-unserved.c) says so of every placement. */
static void
test_unserved_placements(void)
{
	struct serve_env e;
	g_autofree char *plugin = g_test_build_filename(G_TEST_BUILT, "integration", ".libs",
	                                                "placement-unserved.so", NULL);
	g_autofree char *cfg = g_strdup_printf(
		"{\"controller\": {\"monitor_interval_s\": 0.1},"
		" \"plugins\": {\"placement\": {\"name\": \"unserved-test\", \"path\": \"%s\"}}}",
		plugin);
	g_autofree char *metrics = NULL;
	json_t *doc, *entry;
	struct sim_reply r;
	unsigned unserved = 0;
	size_t i;

	g_test_summary("spec 5: unserved placements are counted by phase in /narwhal/state and "
	               "/metrics, with the cost and ratio the plugin priced them at");
	/* make check builds it with the tests. */
	g_assert_true(g_file_test(plugin, G_FILE_TEST_EXISTS));
	if (!serve_start(&e, sim_args, "pd", cfg))
		return;
	if (!serve_wait_all_available(&e, WAIT_MS))
		fail(&e, "the engines did not all become available");
	for (i = 0; i < 2; i++) {
		post_sized(&e, "demand-it-unserved", 10, 4, &r);
		if (r.status != 200)
			fail(&e, r.body->str);
		sim_reply_clear(&r);
	}
	doc = state_until(&e, "demand.totals.completed.ok", 2);
	g_assert_cmpint(int_at(doc, "placement.placed.prefill"), ==, 2);
	g_assert_cmpint(int_at(doc, "placement.unserved.prefill"), ==, 2);
	g_assert_cmpint(int_at(doc, "placement.placed.decode"), ==, 2);
	g_assert_cmpint(int_at(doc, "placement.unserved.decode"), ==, 2);
	g_assert_cmpint(int_at(doc, "placement.unserved.aggregate"), ==, 0);
	json_array_foreach(at(doc, "demand.decisions.entries"), i, entry) {
		if (g_strcmp0(json_string_value(json_object_get(entry, "kind")), "placement") != 0)
			continue;
		unserved += json_is_true(json_object_get(entry, "unserved"));
		g_assert_cmpfloat(json_real_value(json_object_get(entry, "cost")), ==, 7.25);
		g_assert_cmpfloat(json_real_value(json_object_get(entry, "projected_slo_ratio")), ==,
		                  1.5);
	}
	g_assert_cmpuint(unserved, ==, 4);
	json_decref(doc);
	metrics = scrape(&e);
	g_assert_cmpfloat(sample(metrics, "narwhal_placement_unserved_total{phase=\"prefill\"}"),
	                  ==, 2);
	g_assert_cmpfloat(sample(metrics, "narwhal_placement_unserved_total{phase=\"decode\"}"),
	                  ==, 2);
	g_assert_cmpfloat(sample(metrics, "narwhal_placements_total{phase=\"decode\"}"), ==, 2);
	serve_clear(&e);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_setenv(TOKEN_ENV, TOKEN, TRUE);
	g_test_add_func("/demand/issue-12/through-daemon", test_demand_through_daemon);
	g_test_add_func("/demand/spec-5/unserved-placements", test_unserved_placements);
	return g_test_run();
}
