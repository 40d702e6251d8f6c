/*
 * A placement plugin for tests/integration/test-demand.c: it takes the
 * first eligible engine and says every candidate breaks its projected SLO
 * (spec 5: an unserved placement), with a fixed cost and ratio, so the
 * test can see the host count and record what the plugin returned. Not
 * installed; loaded by plugins.placement.path.
 */
#include <narwhal/plugin-abi.h>

#include <errno.h>
#include <stdlib.h>

static int
unserved_create(const struct narwhal_host *host, const json_t *config, void **instance,
                char *err, size_t err_len)
{
	(void)host;
	(void)config;
	(void)err;
	(void)err_len;
	*instance = malloc(1);
	return *instance != NULL ? 0 : -ENOMEM;
}

static void
unserved_destroy(void *instance)
{
	free(instance);
}

static int
unserved_place(void *instance, const struct narwhal_placement_request *req,
               struct narwhal_placement_result *out)
{
	(void)instance;
	out->engine = req->eligible[0];
	out->cost = 7.25;
	out->projected_slo_ratio = 1.5;
	out->unserved = true;
	return 0;
}

static const struct narwhal_placement_ops unserved_ops = {
	.struct_size = sizeof(struct narwhal_placement_ops),
	.create = unserved_create,
	.destroy = unserved_destroy,
	.place = unserved_place,
};

NARWHAL_PLACEMENT_PLUGIN("unserved-test", "1.0.0", &unserved_ops)
