/* The state document's configuration digest (issue 11, /narwhal/state:
 * "the effective configuration's digest"; docs/state.md, config). */
#include "build-config.h"

#include <glib.h>

#include "core/config.h"
#include "obs/state.h"

#define FLEET "\"fleet\": {\"engines\": [{\"id\": \"a\", \"url\": \"http://127.0.0.1:9\"}]}"

static char *
digest_of(const char *text)
{
	g_autoptr(nw_config) cfg = nw_config_load_string(text, "test.json", NULL);

	g_assert_nonnull(cfg);
	return nw_state_config_digest(cfg);
}

/* The SHA-256 of the effective configuration, keys sorted: the same for
 * files that differ only in defaults spelled out or key order, different
 * when a value differs. */
static void
test_digest(void)
{
	g_autofree char *plain = digest_of("{" FLEET "}");
	g_autofree char *spelled = digest_of("{\"serving\": {\"max_connections\": 512}, " FLEET "}");
	g_autofree char *other = digest_of("{\"serving\": {\"max_connections\": 511}, " FLEET "}");
	g_autoptr(nw_config) cfg = nw_config_load_string("{" FLEET "}", "test.json", NULL);
	json_t *effective = nw_config_to_json(cfg);
	char *text = json_dumps(effective, JSON_COMPACT | JSON_SORT_KEYS);
	g_autofree char *sum = g_compute_checksum_for_string(G_CHECKSUM_SHA256, text, -1);
	g_autofree char *expected = g_strconcat("sha256:", sum, NULL);

	g_assert_cmpstr(plain, ==, expected);
	g_assert_cmpstr(plain, ==, spelled);
	g_assert_cmpstr(plain, !=, other);
	free(text);
	json_decref(effective);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/state/issue-11/config-digest", test_digest);
	return g_test_run();
}
