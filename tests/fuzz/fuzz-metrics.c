/*
 * libFuzzer target for the dialects' parse_metrics (the Prometheus text
 * reader, engine-metrics.c, with each dialect's names): the first byte
 * picks the dialect (dialects.h), the rest is the body. Beyond "no crash,
 * no leak, no read past the body": an answer is 0 or -EPROTO; a refusal
 * leaves the host's presets; a success sets at least one field, and every
 * field is a preset or in its range; and the reader is line-oriented, so
 * one more final newline never changes the answer.
 */
#include "dialects.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const struct narwhal_engine_metrics presets = {
	.struct_size = sizeof(struct narwhal_engine_metrics),
	.running = -1, .waiting = -1, .kv_usage = NAN, .start_time_s = NAN,
};

static bool
same(const struct narwhal_engine_metrics *a, const struct narwhal_engine_metrics *b)
{
	return a->running == b->running && a->waiting == b->waiting &&
	       (a->kv_usage == b->kv_usage || (isnan(a->kv_usage) && isnan(b->kv_usage))) &&
	       (a->start_time_s == b->start_time_s ||
	        (isnan(a->start_time_s) && isnan(b->start_time_s)));
}

static void
check(int rc, const struct narwhal_engine_metrics *m)
{
	if (rc == -EPROTO) {
		if (!same(m, &presets))
			abort();
		return;
	}
	if (rc != 0 || same(m, &presets))
		abort();
	if (m->running < -1 || m->waiting < -1)
		abort();
	if (!isnan(m->kv_usage) && !(m->kv_usage >= 0 && m->kv_usage <= 1))
		abort();
	if (!isnan(m->start_time_s) && !(m->start_time_s > 0 && isfinite(m->start_time_s)))
		abort();
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const struct fuzz_dialect *d;
	struct narwhal_engine_metrics a = presets, b = presets;
	char *copy;
	int rc_a, rc_b;

	if (size < 1)
		return 0;
	d = fuzz_dialect_pick(data[0]);
	data++;
	size--;
	/* An exact-size copy, so a read past the end is caught. */
	copy = malloc(size + 1);
	if (copy == NULL)
		return 0;
	memcpy(copy, data, size);
	rc_a = d->ops->parse_metrics(d->instance, copy, size, &a);
	check(rc_a, &a);
	if (size == 0 || copy[size - 1] != '\n') {
		copy[size] = '\n';
		rc_b = d->ops->parse_metrics(d->instance, copy, size + 1, &b);
		if (rc_b != rc_a || !same(&a, &b))
			abort();
	}
	free(copy);
	return 0;
}
