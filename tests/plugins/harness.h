/*
 * Load a built plugin the way the daemon does and drive it against the mock
 * host. Plugins are found by kind and name in $NARWHAL_PLUGIN_DIR (make check
 * points it at plugins/.libs), so tests never pick up an installed copy.
 */
#ifndef NW_TEST_PLUGIN_HARNESS_H
#define NW_TEST_PLUGIN_HARNESS_H

#include "core/plugin-loader.h"
#include <narwhal/plugin-test.h>

struct nw_harness {
	struct narwhal_mock_host *host;
	struct nw_plugin *plugin;
	struct nw_plugin_instance *inst; /* NULL until nw_harness_create succeeds */
};

/* Load kind/name through the real loader; the test fails if it is refused.
 * Skips the test (and returns NULL) when NARWHAL_PLUGIN_DIR is not set. */
struct nw_harness *nw_harness_new(narwhal_plugin_kind kind, const char *name);
void nw_harness_free(struct nw_harness *h);

/* Create the instance from config JSON text (NULL: no section). The parsed
 * config is released right after create, as the daemon may, so a plugin
 * that keeps the borrowed reference trips the sanitizer. Returns FALSE with
 * error set when the plugin refuses. */
gboolean nw_harness_create(struct nw_harness *h, const char *config_json, GError **error);

/* Assert that kind/name refuses config_json: the loader's message names the
 * file and the plugin, then the plugin's own reason, which must contain
 * reason; the refusal must log nothing. */
void nw_harness_expect_config_error(narwhal_plugin_kind kind, const char *name,
                                    const char *config_json, const char *reason);

/* Typed access to the instance's context and ops. */
#define nw_harness_ctx(h) ((h)->inst->ctx)
#define nw_harness_ops(h) (&(h)->plugin->ops)
#define nw_harness_dialect(h) (&(h)->plugin->ops.dialect)

/* JSON text of a test (any value); the test fails when it does not parse. */
json_t *nw_harness_json(const char *text);

/* Assert that got equals the JSON of expected_text, printing both when not. */
void nw_harness_assert_json(const json_t *got, const char *expected_text);

#endif /* NW_TEST_PLUGIN_HARNESS_H */
