/*
 * libFuzzer target: the request path's JSON reader (src/core/json-read.c)
 * against jansson's json_loadb, which it replaces (issue 15). The first
 * input byte picks the flags, the rest is the text, from a buffer of
 * exactly its length (an over-read trips ASan). Both readers must agree:
 * on the verdict; when they accept, on the tree (json_equal) and its key
 * order (equal json_dumps) and the position after the text; when they
 * refuse, on the whole json_error_t (code, text, line, column, position,
 * source). Any difference aborts.
 */
#include "build-config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json-read.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
same_text(const json_t *a, const json_t *b)
{
	char *ta = json_dumps(a, JSON_ENCODE_ANY | JSON_COMPACT);
	char *tb = json_dumps(b, JSON_ENCODE_ANY | JSON_COMPACT);

	if (ta == NULL || tb == NULL || strcmp(ta, tb) != 0)
		abort();
	free(ta);
	free(tb);
}

static void
same_error(const json_error_t *a, const json_error_t *b)
{
	if (json_error_code(a) != json_error_code(b) || strcmp(a->text, b->text) != 0 ||
	    a->line != b->line || a->column != b->column || a->position != b->position ||
	    strcmp(a->source, b->source) != 0) {
		fprintf(stderr, "jansson: %d:%d@%d code %d '%s'\nours:    %d:%d@%d code %d '%s'\n",
		        a->line, a->column, a->position, (int)json_error_code(a), a->text,
		        b->line, b->column, b->position, (int)json_error_code(b), b->text);
		abort();
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const size_t flag_sets[] = {
		0,
		JSON_DECODE_ANY,
		JSON_REJECT_DUPLICATES,
		JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, /* the client body's */
		JSON_ALLOW_NUL | JSON_DECODE_ANY,
		JSON_ALLOW_NUL | JSON_REJECT_DUPLICATES,
	};
	json_error_t ea, eb;
	json_t *a, *b;
	size_t flags;
	char *buf;

	if (size == 0)
		return 0;
	flags = flag_sets[data[0] % (sizeof flag_sets / sizeof flag_sets[0])];
	buf = malloc(size - 1 ? size - 1 : 1);
	if (buf == NULL)
		return 0;
	memcpy(buf, data + 1, size - 1);
	a = json_loadb(buf, size - 1, flags, &ea);
	b = nw_json_read(buf, size - 1, flags, &eb);
	if ((a == NULL) != (b == NULL)) {
		fprintf(stderr, "jansson %s, ours %s: '%s' / '%s'\n", a ? "accepts" : "refuses",
		        b ? "accepts" : "refuses", a ? "" : ea.text, b ? "" : eb.text);
		abort();
	}
	if (a != NULL) {
		if (!json_equal(a, b) || ea.position != eb.position)
			abort();
		same_text(a, b);
	} else {
		same_error(&ea, &eb);
	}
	json_decref(a);
	json_decref(b);
	free(buf);
	return 0;
}
