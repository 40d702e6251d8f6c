/*
 * The access log (docs/metrics.md, "Access log"): one structured line per
 * client request once its answer is decided and sent, written through the
 * log's writer so it never blocks the loop. Never a prompt, a completion or
 * an API key. log.access switches it. A field without a value (NULL, -1,
 * NAN) is left out of the line.
 */
#ifndef NW_ACCESS_LOG_H
#define NW_ACCESS_LOG_H

#include <stdbool.h>
#include <stdint.h>

#include "core/config.h"

struct nw_access_record {
	const char *request_id;
	const char *route;          /* the path, e.g. "/v1/completions" */
	const char *model;          /* as the client named it; NULL: none */
	bool stream;
	int status;                 /* HTTP status sent (a stream: its first one) */
	const char *error_code;     /* the error envelope's or event's code;
	                             * NULL: served in full */
	int64_t prompt_tokens;      /* -1: unknown */
	int64_t output_tokens;      /* -1: unknown */
	double queue_s;             /* waiting for admission; NAN: none */
	double ttft_s;              /* to the first token sent; NAN: none */
	double tpot_s;              /* mean time per output token after the
	                             * first; NAN: fewer than two */
	double total_s;             /* arrival to the last byte */
	const char *prefill_engine; /* instance ids; NULL: none */
	const char *decode_engine;  /* NULL: none, or an aggregate request */
	uint32_t attempts;          /* engine attempts, 0 when none started */
};

/* Switch the access log (log.access). Off until set. */
void nw_access_log_setup(bool enabled);
bool nw_access_log_enabled(void);
/* Write one line (nothing when off). Never blocks. */
void nw_access_log(const struct nw_access_record *r);

#endif /* NW_ACCESS_LOG_H */
