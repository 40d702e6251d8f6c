/*
 * The "static" controller: the split never changes. Every pass proposes the
 * live prefill and decode counts it is given, which the host reads as "no
 * change"; roles then move only by operator action (pins, the admin API).
 *
 * Config: no options. The host hands every controller plugin the keys
 * "reactive" and "thresholds" (controller.reactive and
 * controller.thresholds, docs/plugins.md "Its settings"), which the split
 * that never moves has no use for: they are accepted and ignored. Any
 * other key is refused by name.
 */
#include <narwhal/plugin-abi.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STATIC_MAGIC 0x53544154u /* "STAT" */

struct static_controller {
	unsigned magic;
};

static struct static_controller *
controller_cast(void *instance)
{
	struct static_controller *sc = instance;

	if (sc == NULL || sc->magic != STATIC_MAGIC)
		abort(); /* the host passed something that is not ours */
	return sc;
}

static int
static_create(const struct narwhal_host *host, const json_t *config, void **instance,
              char *err, size_t err_len)
{
	struct static_controller *sc;

	(void)host; /* nothing to log, count or time */
	if (config != NULL && !json_is_null(config)) {
		const char *key;
		json_t *value;

		if (!json_is_object(config)) {
			snprintf(err, err_len, "config must be an object: the static "
			         "controller takes no options");
			return -EINVAL;
		}
		/* Read-only walk; the cast only satisfies the macro's type. */
		json_object_foreach((json_t *)config, key, value) {
			(void)value;
			if (strcmp(key, "reactive") == 0 || strcmp(key, "thresholds") == 0)
				continue; /* the host's, ignored */
			snprintf(err, err_len, "unknown key \"%s\": the static controller takes "
			         "no options", key);
			return -EINVAL;
		}
	}
	sc = calloc(1, sizeof *sc);
	if (sc == NULL) {
		snprintf(err, err_len, "out of memory");
		return -ENOMEM;
	}
	sc->magic = STATIC_MAGIC;
	*instance = sc;
	return 0;
}

static void
static_destroy(void *instance)
{
	struct static_controller *sc = controller_cast(instance);

	sc->magic = 0;
	free(sc);
}

static int
static_propose(void *instance, const struct narwhal_controller_input *in,
               struct narwhal_controller_proposal *out)
{
	controller_cast(instance);
	if (in == NULL || out == NULL)
		return -EINVAL;
	out->prefill = in->live_prefill;
	out->decode = in->live_decode;
	out->worst_slo_ratio = NAN; /* nothing is priced */
	out->reason = "static";
	return 0;
}

static const struct narwhal_controller_ops static_ops = {
	.struct_size = sizeof(struct narwhal_controller_ops),
	.create = static_create,
	.destroy = static_destroy,
	.propose = static_propose,
};

NARWHAL_CONTROLLER_PLUGIN("static", "2.0.0", &static_ops)
