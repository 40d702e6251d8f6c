/*
 * The first ten minutes (issue 14): a cold start, Narwhal up before its
 * engines listen. The demo's replay once printed nothing because Narwhal
 * asked the first engine for its model before the simulator listened and
 * never asked again, so /v1/models stayed empty until a restart. The
 * monitor asks an engine that has not said its model at every round
 * (docs/recovery.md, "Model"): once the engines listen, /v1/models lists
 * the model and a completion goes through.
 */
#include "build-config.h"

#include <string.h>

#include <glib.h>
#include <jansson.h>

#include "integration/test-serve-common.h"

#define ENGINES 2
#define MODEL "cold-start-model"

/* GET /v1/models: the ids listed, comma-separated ("" for none; owned). */
static char *
listed_models(struct serve_env *e, long *status)
{
	struct sim_reply r;
	GString *ids = g_string_new(NULL);
	json_t *doc, *m;
	size_t i;

	sim_http(e->port, "GET", "/v1/models", NULL, NULL, 5000, &r);
	*status = r.status;
	doc = r.status == 200 ? json_loads(r.body->str, 0, NULL) : NULL;
	json_array_foreach(json_object_get(doc, "data"), i, m)
		g_string_append_printf(ids, "%s%s", i ? "," : "",
		                       json_string_value(json_object_get(m, "id")));
	json_decref(doc);
	sim_reply_clear(&r);
	return g_string_free(ids, FALSE);
}

static void
test_cold_start(void)
{
	static const char *const sim_args[] = { "--engines", "2", "--no-delay",
	                                        "--served-model-name", MODEL,
	                                        "--fault-refuse-connections", NULL };
	struct serve_env e;
	g_autofree char *body = NULL;
	char *ids = NULL;
	long status = 0;
	gint64 deadline;
	struct sim_reply r;

	/* fleet.model null: the model is learnt from the engines, as in
	 * conf/narwhal.json. */
	if (!serve_start(&e, sim_args, "pd", "{\"fleet\": {\"model\": null}}"))
		return;
	/* The merge above replaced the fleet's model, which e.model pointed at. */
	e.model = MODEL;
	ids = listed_models(&e, &status);
	g_test_message("before the engines listen: %ld [%s]", status, ids);
	g_assert_null(strstr(ids, MODEL));
	g_free(ids);

	/* The simulator starts listening on the same ports. */
	for (unsigned i = 0; i < ENGINES; i++)
		g_assert_cmpint(sim_set_faults(&e.sim, i, "{\"refuse_connections\": false}"), ==, 200);

	deadline = g_get_monotonic_time() + 20 * G_USEC_PER_SEC;
	for (;;) {
		ids = listed_models(&e, &status);
		if (status == 200 && strcmp(ids, MODEL) == 0)
			break;
		g_free(ids);
		ids = NULL;
		if (g_get_monotonic_time() > deadline)
			break;
		g_usleep(50 * 1000);
	}
	if (ids == NULL) {
		g_autofree char *log = serve_log(&e);

		g_test_message("narwhal log:\n%s", log);
	}
	g_assert_nonnull(ids);
	g_free(ids);

	/* And the fleet serves: the engines become available, a completion
	 * goes through. */
	g_assert_true(serve_wait_all_available(&e, 20000));
	body = serve_completion_body(&e, 4, FALSE);
	serve_post(&e, "/v1/completions", body, NULL, 10000, &r);
	g_assert_cmpint(r.status, ==, 200);
	sim_reply_clear(&r);
	serve_clear(&e);
}

int
main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/first-run/cold-start", test_cold_start);
	return g_test_run();
}
