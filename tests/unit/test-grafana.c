/*
 * conf/grafana/narwhal.json (issue 11: a Grafana dashboard under conf/
 * built on these metrics): valid JSON with a Prometheus data-source
 * variable that every query uses; every metric a query names is one
 * docs/metrics.md documents; and, when promtool is installed, every query
 * parses as PromQL (checked as a rules file).
 */
#include "build-config.h"

#include <stdbool.h>
#include <string.h>

#include <glib.h>
#include <glib/gstdio.h>
#include <jansson.h>

static json_t *
load_dashboard(void)
{
	g_autofree char *path = g_test_build_filename(G_TEST_DIST, "..", "conf", "grafana",
	                                              "narwhal.json", NULL);
	json_error_t err;
	json_t *doc = json_load_file(path, 0, &err);

	if (doc == NULL)
		g_error("%s:%d: %s", path, err.line, err.text);
	return doc;
}

/* Every query of every panel, in order. */
static GPtrArray *
queries(json_t *doc)
{
	GPtrArray *out = g_ptr_array_new();
	size_t i, j;
	json_t *panel, *target;

	json_array_foreach(json_object_get(doc, "panels"), i, panel) {
		json_array_foreach(json_object_get(panel, "targets"), j, target) {
			const char *uid = json_string_value(
				json_object_get(json_object_get(target, "datasource"), "uid"));

			g_assert_cmpstr(uid, ==, "${datasource}");
			g_assert_true(json_is_string(json_object_get(target, "expr")));
			g_ptr_array_add(out, (gpointer)json_string_value(json_object_get(target, "expr")));
		}
	}
	return out;
}

static void
test_datasource_variable(void)
{
	json_t *doc = load_dashboard();
	json_t *vars = json_object_get(json_object_get(doc, "templating"), "list");
	bool found = false;
	size_t i;
	json_t *v;
	g_autoptr(GPtrArray) q = NULL;

	g_assert_true(json_is_string(json_object_get(doc, "title")));
	json_array_foreach(vars, i, v) {
		if (g_strcmp0(json_string_value(json_object_get(v, "type")), "datasource") == 0 &&
		    g_strcmp0(json_string_value(json_object_get(v, "name")), "datasource") == 0) {
			g_assert_cmpstr(json_string_value(json_object_get(v, "query")), ==, "prometheus");
			found = true;
		}
	}
	g_assert_true(found);
	q = queries(doc);
	g_assert_cmpuint(q->len, >=, 20);
	json_decref(doc);
}

static void
test_metrics_documented(void)
{
	g_autofree char *docs_path = g_test_build_filename(G_TEST_DIST, "..", "docs", "metrics.md",
	                                                   NULL);
	g_autofree char *docs = NULL;
	json_t *doc = load_dashboard();
	g_autoptr(GPtrArray) q = queries(doc);
	g_autoptr(GRegex) name = g_regex_new("narwhal_[a-z0-9_]+", 0, 0, NULL);

	g_assert_true(g_file_get_contents(docs_path, &docs, NULL, NULL));
	for (guint i = 0; i < q->len; i++) {
		g_autoptr(GMatchInfo) m = NULL;

		g_regex_match(name, q->pdata[i], 0, &m);
		while (g_match_info_matches(m)) {
			g_autofree char *metric = g_match_info_fetch(m, 0);
			g_autofree char *quoted = NULL;
			static const char *const suffixes[] = { "_bucket", "_sum", "_count" };

			for (size_t k = 0; k < G_N_ELEMENTS(suffixes); k++) {
				if (g_str_has_suffix(metric, suffixes[k]))
					metric[strlen(metric) - strlen(suffixes[k])] = '\0';
			}
			/* The docs name each metric in backquotes. */
			quoted = g_strdup_printf("`%s`", metric);
			if (strstr(docs, quoted) == NULL)
				g_error("the dashboard queries %s, which docs/metrics.md does not list "
				        "(query: %s)", metric, (const char *)q->pdata[i]);
			g_match_info_next(m, NULL);
		}
	}
	json_decref(doc);
}

static void
test_promql_parses(void)
{
	g_autofree char *promtool = g_find_program_in_path("promtool");
	json_t *doc;
	g_autoptr(GPtrArray) q = NULL;
	GString *rules;
	g_autofree char *dir = NULL, *file = NULL, *out = NULL;
	GError *error = NULL;
	int status;

	if (promtool == NULL) {
		if (g_strcmp0(g_getenv("NARWHAL_REQUIRE_PROMTOOL"), "1") == 0)
			g_error("promtool is not installed and NARWHAL_REQUIRE_PROMTOOL=1");
		g_test_skip("promtool is not installed (Debian's prometheus package)");
		return;
	}
	doc = load_dashboard();
	q = queries(doc);
	rules = g_string_new("groups:\n  - name: dashboard\n    rules:\n");
	for (guint i = 0; i < q->len; i++) {
		g_autofree char *e1 = NULL, *e2 = NULL, *e3 = NULL;
		g_autoptr(GRegex) rate = g_regex_new("\\$__rate_interval", 0, 0, NULL);
		g_autoptr(GRegex) inst = g_regex_new("\\$instance", 0, 0, NULL);
		g_autoptr(GRegex) quote = g_regex_new("'", 0, 0, NULL);

		/* Grafana's variables as Grafana would fill them. */
		e1 = g_regex_replace_literal(rate, q->pdata[i], -1, 0, "5m", 0, NULL);
		e2 = g_regex_replace_literal(inst, e1, -1, 0, ".+", 0, NULL);
		e3 = g_regex_replace_literal(quote, e2, -1, 0, "''", 0, NULL);
		g_string_append_printf(rules, "      - record: dashboard:q%u\n        expr: '%s'\n", i,
		                       e3);
	}
	dir = g_dir_make_tmp("narwhal-grafana-XXXXXX", &error);
	g_assert_no_error(error);
	file = g_build_filename(dir, "rules.yml", NULL);
	g_assert_true(g_file_set_contents(file, rules->str, -1, NULL));
	{
		const char *argv[] = { promtool, "check", "rules", file, NULL };

		g_assert_true(g_spawn_sync(NULL, (char **)argv, NULL, G_SPAWN_STDERR_TO_DEV_NULL, NULL,
		                           NULL, &out, NULL, &status, &error));
		g_assert_no_error(error);
	}
	if (!g_spawn_check_wait_status(status, NULL))
		g_error("promtool check rules rejected a dashboard query:\n%s\n%s", out, rules->str);
	g_unlink(file);
	g_rmdir(dir);
	g_string_free(rules, TRUE);
	json_decref(doc);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/grafana/issue-11/datasource-variable", test_datasource_variable);
	g_test_add_func("/grafana/issue-11/metrics-documented", test_metrics_documented);
	g_test_add_func("/grafana/issue-11/promql-parses", test_promql_parses);
	return g_test_run();
}
