#include "build-config.h"

#include "serve/request-id.h"

#include <string.h>

bool
nw_request_id_valid(const char *id)
{
	size_t n = 0;

	if (id == NULL || *id == '\0')
		return false;
	/* Printable ASCII only: no spaces at the ends, no control bytes that
	 * could split a header or a log line. */
	for (const char *p = id; *p; p++, n++) {
		if (n >= NW_REQUEST_ID_MAX || *p < 0x21 || *p > 0x7e)
			return false;
	}
	return true;
}

void
nw_request_id_generate(GRand *rng, char out[static 33])
{
	static const char hex[] = "0123456789abcdef";

	for (int i = 0; i < 4; i++) {
		guint32 v = g_rand_int(rng);

		for (int j = 0; j < 8; j++) {
			out[i * 8 + j] = hex[v & 0xf];
			v >>= 4;
		}
	}
	out[32] = '\0';
}

bool
nw_request_id_choose(GRand *rng, const char *given, char out[static NW_REQUEST_ID_MAX + 1])
{
	if (nw_request_id_valid(given)) {
		g_strlcpy(out, given, NW_REQUEST_ID_MAX + 1);
		return true;
	}
	nw_request_id_generate(rng, out);
	return false;
}
