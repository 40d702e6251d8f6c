/*
 * Client request validation for POST /v1/completions and
 * /v1/chat/completions: one parse of the body into the fields the request
 * lifecycle needs, or a client error ready for the OpenAI-style envelope
 * (nw_http_respond_error). Every rule and its error code is listed in
 * docs/api.md, "Request validation".
 *
 * The parsed body is kept as is (no rewriting, no re-serialisation) and
 * forwarded to the dialect plugin; the other fields borrow from it.
 */
#ifndef NW_REQUEST_PARSE_H
#define NW_REQUEST_PARSE_H

#include <narwhal/plugin-abi.h>

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <glib.h>
#include <jansson.h>

#define NW_CLIENT_PARAM_MAX 64
#define NW_CLIENT_MESSAGE_MAX 256
/* How many bytes of a client string a message quotes. */
#define NW_CLIENT_QUOTE_MAX 48

/* The default bound on max_tokens: far above any model's context, so only
 * nonsense is refused here; the context-length check comes later. */
#define NW_MAX_TOKENS_LIMIT_DEFAULT (1u << 24)

/* A client error: the HTTP status and the envelope's fields. type and code
 * are static strings; an empty param means JSON null. message is valid
 * UTF-8 without control characters, whatever the input was. */
struct nw_client_error {
	unsigned status;
	const char *type;
	const char *code;
	char param[NW_CLIENT_PARAM_MAX];
	char message[NW_CLIENT_MESSAGE_MAX];
};

struct nw_parse_limits {
	uint32_t max_tokens_limit; /* 0: NW_MAX_TOKENS_LIMIT_DEFAULT */
	/* Top-level keys the fleet's dialects own for their handoffs (their
	 * router_keys slot), NULL-terminated; a client may not send them, not
	 * even as null. NULL: none. */
	const char *const *router_keys;
};

struct nw_client_request {
	narwhal_route route;
	json_t *body;             /* owned: the validated client JSON, forwarded to dialects */
	const char *model;        /* borrowed from body */
	bool stream;
	bool include_usage;       /* stream_options.include_usage, vLLM's defaulting */
	bool max_tokens_set;
	uint32_t max_tokens;      /* max_tokens, or for chat max_completion_tokens (preferred) */
	/* Completions. */
	const char *prompt;       /* the prompt text; NULL for token ids and for chat */
	size_t prompt_len;        /* its length in bytes */
	size_t prompt_chars;      /* its length in characters (code points) */
	uint32_t prompt_token_ids; /* length of a token-id prompt; 0 otherwise */
	/* Chat. */
	uint32_t chat_messages;   /* number of messages */
	size_t chat_chars;        /* characters of the messages' text content */
};

/* Parse and validate a request body for route. content_type is the
 * Content-Type header or NULL when absent; data need not be NUL-terminated
 * and may be NULL when len is 0; lim may be NULL for defaults. Returns 0 and
 * fills out (release with nw_client_request_clear), or -1 with err filled
 * and out cleared. */
int nw_request_parse(narwhal_route route, const char *content_type, const char *data, size_t len,
                     const struct nw_parse_limits *lim, struct nw_client_request *out,
                     struct nw_client_error *err);

/* Release the body and zero the request; safe on a cleared request. */
void nw_client_request_clear(struct nw_client_request *r);

/* The route served at path ("/v1/completions", "/v1/chat/completions"), or
 * false for any other path. */
bool nw_request_route_for_path(const char *path, narwhal_route *route);
/* The path of a completion route, the inverse of the above. */
const char *nw_request_path_for_route(narwhal_route route);

/* Fill err. type follows status (server_error for 5xx, else
 * invalid_request_error); param may be NULL. The message is cut to fit and
 * made valid UTF-8, so client bytes may be formatted into it. */
void nw_client_error_set(struct nw_client_error *err, unsigned status, const char *code,
                         const char *param, const char *fmt, ...) G_GNUC_PRINTF(5, 6);

void nw_client_error_vset(struct nw_client_error *err, unsigned status, const char *code,
                          const char *param, const char *fmt, va_list ap) G_GNUC_PRINTF(5, 0);

/* 400 invalid_json from jansson's diagnosis, in our words, with the line
 * and column. */
void nw_client_error_from_json(struct nw_client_error *err, const json_error_t *je);

/* Quote a client string for a message: at most NW_CLIENT_QUOTE_MAX bytes,
 * whole characters, bad bytes as '?', "..." when cut. size must be at least
 * NW_CLIENT_QUOTE_MAX + 8. */
void nw_client_quote(char *dst, size_t size, const char *s, size_t n);

/* A JSON value for a message: the string "x", the integer 5, the number
 * 1.5, true, null, an array, an object. size must be at least
 * NW_CLIENT_QUOTE_MAX + 40. */
const char *nw_client_describe_json(const json_t *v, char *buf, size_t size);

/* Common errors for the host, in the same words as the docs. */
/* 404 model_not_found; served may be NULL (the fleet's model, to suggest). */
void nw_client_error_model_not_found(struct nw_client_error *err, const char *model,
                                     const char *served);
/* 404 not_found: no such route. */
void nw_client_error_no_route(struct nw_client_error *err, const char *method, const char *path);
/* 405 method_not_allowed; allow is the Allow header's value. */
void nw_client_error_method_not_allowed(struct nw_client_error *err, const char *method,
                                        const char *path, const char *allow);
/* 413 request_too_large: the body exceeds serving.max_request_bytes. */
void nw_client_error_too_large(struct nw_client_error *err, uint64_t limit);

#endif /* NW_REQUEST_PARSE_H */
