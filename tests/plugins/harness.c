#include "build-config.h"

#include "plugins/harness.h"

#include <string.h>

struct nw_harness *
nw_harness_new(narwhal_plugin_kind kind, const char *name)
{
	g_autofree char *file = NULL;
	g_autoptr(GError) error = NULL;
	struct nw_harness *h;
	const char *dir = g_getenv("NARWHAL_PLUGIN_DIR");

	if (dir == NULL || *dir == '\0') {
		g_test_skip("NARWHAL_PLUGIN_DIR is not set (run through make check)");
		return NULL;
	}
	file = nw_plugin_resolve(kind, name, NULL, dir);
	h = g_new0(struct nw_harness, 1);
	h->plugin = nw_plugin_load(kind, name, file, &error);
	g_assert_no_error(error);
	g_assert_nonnull(h->plugin);
	h->host = narwhal_mock_host_new();
	return h;
}

gboolean
nw_harness_create(struct nw_harness *h, const char *config_json, GError **error)
{
	json_t *config = NULL;
	json_error_t jerr;

	g_assert_null(h->inst);
	if (config_json != NULL) {
		config = json_loads(config_json, JSON_DECODE_ANY, &jerr);
		if (config == NULL)
			g_error("test config is not JSON: %s: %s", jerr.text, config_json);
	}
	h->inst = nw_plugin_instance_new(h->plugin, narwhal_mock_host_table(h->host), config, error);
	json_decref(config);
	return h->inst != NULL;
}

void
nw_harness_free(struct nw_harness *h)
{
	if (h == NULL)
		return;
	nw_plugin_instance_free(h->inst);
	nw_plugin_free(h->plugin);
	narwhal_mock_host_free(h->host);
	g_free(h);
}

void
nw_harness_expect_config_error(narwhal_plugin_kind kind, const char *name,
                               const char *config_json, const char *reason)
{
	struct nw_harness *h = nw_harness_new(kind, name);
	g_autoptr(GError) error = NULL;
	g_autofree char *prefix = NULL;

	if (h == NULL)
		return;
	g_assert_false(nw_harness_create(h, config_json, &error));
	g_assert_error(error, NARWHAL_PLUGIN_ERROR, NW_PLUGIN_ERROR_CREATE);
	g_test_message("%s", error->message);
	prefix = g_strdup_printf("%s: plugin %s refused its configuration: ", h->plugin->path, name);
	g_assert_true(g_str_has_prefix(error->message, prefix));
	if (strstr(error->message + strlen(prefix), reason) == NULL)
		g_error("expected \"%s\" in \"%s\"", reason, error->message);
	g_assert_cmpuint(narwhal_mock_host_n_logs(h->host), ==, 0);
	nw_harness_free(h);
}

json_t *
nw_harness_json(const char *text)
{
	json_error_t jerr;
	json_t *v = json_loads(text, JSON_DECODE_ANY, &jerr);

	if (v == NULL)
		g_error("test JSON does not parse: %s: %s", jerr.text, text);
	return v;
}

void
nw_harness_assert_json(const json_t *got, const char *expected_text)
{
	json_t *expected = nw_harness_json(expected_text);

	if (!json_equal(got, expected)) {
		char *g = json_dumps(got, JSON_SORT_KEYS | JSON_ENCODE_ANY);
		char *e = json_dumps(expected, JSON_SORT_KEYS | JSON_ENCODE_ANY);

		g_error("JSON differs:\n  got      %s\n  expected %s", g ? g : "(null)", e);
	}
	json_decref(expected);
}
