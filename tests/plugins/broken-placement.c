/*
 * A placement plugin that breaks one plugin rule on demand, for the tests
 * of narwhal-plugin-check (tests/plugins/check-plugin-check.sh). Config:
 * {"break": WHAT}, WHAT one of
 *   "none"    keep every rule (the default): every check passes
 *   "config"  accept keys it does not know
 *   "slot"    place() fails
 *   "range"   place() answers an engine outside the eligible set
 *   "clock"   place() reads the wall clock
 *   "sleep"   place() waits (usleep(0): it never really sleeps)
 *   "static"  answers depend on a counter shared by every instance
 *   "leak"    create() keeps memory that destroy() never frees
 *   "crash"   place() crashes (SIGSEGV)
 *   "abort"   destroy() aborts
 *   "exit"    create() ends the process with exit(0)
 *   "hang"    create() never returns when given a key it does not know
 *   "print"   place() writes to standard output what narwhal-plugin-check
 *             prints when every check passed
 *   "hog"     place() allocates without bound (aborting when it can no
 *             more, as g_malloc would)
 *   "once"    create() accepts its configuration once a process, then
 *             refuses it
 *
 * Built again with BROKEN_WILD_ENTRY, its entry returns a pointer to no
 * descriptor, which the loader crashes on.
 */
#include <narwhal/plugin-abi.h>

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *const modes[] = { "none", "config", "slot", "range", "clock", "sleep",
	                             "static", "leak", "crash", "abort", "exit", "hang",
	                             "print", "hog", "once" };
enum { NONE, CONFIG, SLOT, RANGE, CLOCK, SLEEP, STATIC, LEAK, CRASH, ABORT, EXIT, HANG, PRINT,
       HOG, ONCE, N_MODES };

struct broken {
	int mode;
	void *kept; /* LEAK: allocated, then forgotten by destroy */
};

/* STATIC and ONCE: the rule these modes exist to break. */
static unsigned shared_calls;
static unsigned created;

static int
broken_create(const struct narwhal_host *host, const json_t *config, void **instance, char *err,
              size_t err_len)
{
	struct broken *b;
	const char *key;
	json_t *value;
	int mode = NONE;

	(void)host;
	json_object_foreach((json_t *)config, key, value) {
		if (strcmp(key, "break") == 0 && json_is_string(value)) {
			for (mode = 0; mode < N_MODES; mode++) {
				if (strcmp(json_string_value(value), modes[mode]) == 0)
					break;
			}
			if (mode == N_MODES) {
				snprintf(err, err_len, "break: unknown mode \"%s\"",
				         json_string_value(value));
				return -EINVAL;
			}
		}
	}
	if (mode == EXIT)
		exit(0);
	json_object_foreach((json_t *)config, key, value) {
		/* HANG: a loop the compiler must keep (it has a side effect). */
		for (volatile unsigned spin = 0; mode == HANG && strcmp(key, "break") != 0;)
			spin++;
		if (strcmp(key, "break") != 0 && mode != CONFIG) {
			snprintf(err, err_len, "unknown key \"%s\": only break is accepted", key);
			return -EINVAL;
		}
	}
	if (mode == ONCE && created++ > 0) {
		snprintf(err, err_len, "created once already");
		return -EBUSY;
	}
	b = calloc(1, sizeof *b);
	if (b == NULL)
		return -ENOMEM;
	b->mode = mode;
	if (mode == LEAK)
		b->kept = malloc(64);
	*instance = b;
	return 0;
}

static void
broken_destroy(void *instance)
{
	struct broken *b = instance;

	if (b->mode == ABORT)
		abort();
	free(instance); /* LEAK: b->kept is never freed */
}

static int
broken_place(void *instance, const struct narwhal_placement_request *req,
             struct narwhal_placement_result *out)
{
	struct broken *b = instance;
	struct timespec ts;
	unsigned pick = 0;

	switch (b->mode) {
	case SLOT:
		return -EIO;
	case RANGE:
		out->engine = UINT32_MAX - 1;
		return 0;
	case CLOCK:
		clock_gettime(CLOCK_MONOTONIC, &ts);
		break;
	case SLEEP:
		usleep(0);
		break;
	case STATIC:
		pick = shared_calls++;
		break;
	case CRASH:
		raise(SIGSEGV);
		break;
	case PRINT:
		printf("PASS  output: nothing written\nconforms: every check passed\n");
		break;
	case HOG:
		for (;;) {
			char *more = malloc((size_t)64 << 20);

			if (more == NULL)
				abort();
			memcpy(more, &b->kept, sizeof b->kept); /* a chain, never freed */
			b->kept = more;
		}
	default:
		break;
	}
	out->engine = req->eligible[pick % req->n_eligible];
	out->cost = 0;
	return 0;
}

static const struct narwhal_placement_ops broken_ops = {
	.struct_size = sizeof broken_ops,
	.create = broken_create,
	.destroy = broken_destroy,
	.place = broken_place,
};

#ifndef BROKEN_WILD_ENTRY
NARWHAL_PLACEMENT_PLUGIN("broken", "1.0.0", &broken_ops)
#else
/* An entry of the right name whose descriptor is nowhere. */
const struct narwhal_plugin_descriptor *
narwhal_plugin_entry(void)
{
	(void)&broken_ops;
	return (const struct narwhal_plugin_descriptor *)(uintptr_t)16;
}
#endif
