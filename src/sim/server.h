/*
 * One simulated engine's HTTP surface, as vLLM's OpenAI-compatible server
 * presents it: /v1/completions, /v1/chat/completions (streaming or not),
 * /tokenize, /detokenize, /v1/models, /health, /version, /metrics, and the
 * simulator-internal KV pull route /sim/kv/pull; or as SGLang's or
 * llama.cpp's server presents it (dialect.h, routes.c, bootstrap.c).
 *
 * A completion request becomes a "call": it is parsed and validated, may
 * wait for an injected hang or for its KV to be pulled from a producer,
 * then runs in the engine's scheduler. The engine's step callbacks turn
 * into SSE chunks (streaming) or into one JSON body at the end.
 */
#ifndef NW_SIM_SERVER_H
#define NW_SIM_SERVER_H

#include "sim/output.h"
#include "sim/sim.h"

/* Request bodies above this are answered 413. */
#define SIM_MAX_BODY_BYTES (32u << 20)

enum sim_route {
	R_NONE = 0,
	R_COMPLETIONS,
	R_CHAT,
	R_TOKENIZE,
	R_DETOKENIZE,
	R_MODELS,
	R_HEALTH,
	R_VERSION,
	R_METRICS,
	R_KV_PULL,
	R_PROPS,              /* llama.cpp */
	R_MODEL_INFO,         /* SGLang */
};

/* A call's part in an SGLang bootstrap room (bootstrap.c). */
typedef enum sim_room_state {
	SIM_ROOM_NONE = 0,
	SIM_ROOM_PREFILL,     /* a prefill leg whose KV is not yet published */
	SIM_ROOM_PUBLISHED,   /* a prefill leg whose KV waits in its room */
	SIM_ROOM_WAITING,     /* a decode leg waiting for its room's KV */
} sim_room_state;

typedef enum sim_call_state {
	SIM_CALL_NEW = 0,     /* headers and body arriving */
	SIM_CALL_HANGING,     /* injected hang before the first token */
	SIM_CALL_PULLING,     /* fetching KV from the producer */
	SIM_CALL_RUNNING,     /* in the engine */
	SIM_CALL_DONE,        /* finished; the answer is ready */
	SIM_CALL_FAILED,      /* failed; an error answer is ready (or none: close) */
} sim_call_state;

struct sim_call {
	struct sim_node *node;
	struct MHD_Connection *conn;
	unsigned refs;             /* the connection, plus the stream reader */
	int route;
	const char *not_allowed;   /* the Allow header of a 405, or NULL */
	GString *body;             /* request body */
	bool body_too_large;

	/* The parsed request. */
	bool chat;
	bool stream;
	bool include_usage;
	bool continuous_usage;
	char *request_id;          /* X-Request-Id, or generated */
	char *response_id;         /* cmpl-... or chatcmpl-... */
	int64_t created;           /* unix seconds */
	uint32_t prompt_tokens;
	uint32_t max_tokens;
	uint64_t text_seed;        /* generated text depends on the prompt */
	sim_request_kind kind;     /* what the request asked for */
	json_t *kv_in;             /* do_remote_prefill params (owned) */
	const char *kv_invalid;    /* why kv_in cannot be used, or NULL */
	struct sim_output output;  /* tool calls, reasoning, logprobs */
	char *prompt_text;         /* for prompt_logprobs: the prompt, or NULL */
	GArray *prompt_ids;        /* for prompt_logprobs of a token-id prompt */
	bool prompt_bos;           /* the prompt starts with the BOS token */

	sim_call_state state;
	bool suspended;            /* in the access handler (not a reader) */
	bool reader_suspended;     /* in the stream reader */
	bool in_engine;            /* submitted and not finished or aborted */
	bool doomed;               /* abort pending after the step */
	bool dead;                 /* client gone: answer nothing */
	struct sim_request req;
	double arrival_v;          /* when the HTTP request arrived */
	double last_token_v;
	uint32_t emitted;          /* tokens emitted to the client */
	bool role_sent;            /* chat streams: the role delta went out */
	uint32_t text_chars;       /* completions streams: text sent (text_offset) */

	/* Answer. */
	unsigned status;           /* non-streaming: the HTTP status to send */
	GString *out;              /* non-streaming body, or pending SSE bytes */
	size_t out_pos;            /* SSE bytes already handed to MHD */
	bool stream_end;           /* no more SSE bytes will come */
	bool stream_abort;         /* end by closing without the terminator */

	struct nw_upstream_call *pull;
	GString *pull_body;        /* the producer's answer */
	guint hang_timer;

	/* SGLang's bootstrap (bootstrap.c). */
	uint64_t room;
	sim_room_state room_state;
	guint room_timer;          /* a decode leg's wait, or its handoff */
};

/* The libmicrohttpd handlers of an engine's listener (data: the node). */
enum MHD_Result sim_server_handler(void *data, struct MHD_Connection *conn, const char *url,
                                   const char *method, const char *version,
                                   const char *upload, size_t *upload_size, void **request);
void sim_server_completed(void *data, struct MHD_Connection *conn, void **request,
                          enum MHD_RequestTerminationCode why);

void sim_call_unref(struct sim_call *call);
/* Take the request out of the engine now (never inside step callbacks). */
void sim_call_engine_abort(struct sim_call *call);

/* Engine callbacks, routed here by the node. */
void sim_call_on_tokens(struct sim_call *call, uint32_t n);
void sim_call_on_finished(struct sim_call *call, sim_finish why);

/* Submit the call to the engine as kind (after any hang and KV pull). */
void sim_call_submit(struct sim_call *call, sim_request_kind kind, double kv_ready_v);
/* Fail the call with an error: an HTTP error before the stream started, an
 * in-band error event after. */
void sim_call_fail(struct sim_call *call, unsigned status, const char *param,
                   const char *message);

/* A validation failure on its way to becoming an error answer. */
struct sim_fail {
	unsigned status;
	const char *param;         /* static */
	char *message;             /* owned */
	uint32_t n_prompt, n_ctx;  /* a context-size error (llama.cpp's shape) */
};

/* Answer the failure (and free its message). */
enum MHD_Result sim_respond_fail(struct sim_call *call, struct sim_fail *f);

/* --- validation (parse.c) --------------------------------------------- */

/* Record a failure; returns false for "return sim_fail_set(...)". */
bool sim_fail_set(struct sim_fail *f, unsigned status, const char *param, const char *fmt, ...)
	G_GNUC_PRINTF(4, 5);
/* The body as a JSON object, or NULL with f set. */
json_t *sim_parse_body(struct sim_call *call, struct sim_fail *f);
/* "model" absent, null or the served name; else 404. */
bool sim_check_model(const struct sim_node *node, const json_t *doc, struct sim_fail *f);
/* The prompt (completion form) or messages (chat form) as tokens; ids,
 * when given, receives the token ids and only text prompts are taken.
 * text_out (may be NULL) gets a copy of the prompt's text (NULL for
 * token ids). */
bool sim_parse_prompt(const json_t *doc, bool chat, GArray *ids, uint32_t *tokens,
                      uint64_t *seed, char **text_out, struct sim_fail *f);
/* A completion or chat request into the call's fields. */
bool sim_parse_generation(struct sim_call *call, const json_t *doc, struct sim_fail *f);

/* --- other routes (routes.c) ------------------------------------------ */

/* The route of url; *not_allowed names the allowed methods when the path
 * exists but the method does not fit. */
int sim_route_of(sim_dialect d, const char *url, const char *method,
                 const char **not_allowed);
enum MHD_Result sim_route_tokenize(struct sim_call *call);
/* GET routes: health, models, version, metrics, props, model info. */
enum MHD_Result sim_route_get(struct sim_node *node, struct MHD_Connection *conn, int route);
/* 404/405 in the dialect's shape (vLLM and SGLang add FastAPI's "detail"). */
enum MHD_Result sim_respond_no_route(struct MHD_Connection *conn, sim_dialect d,
                                     unsigned status, const char *detail,
                                     const char *message, const char *allow);

/* --- JSON answers (render.c) ------------------------------------------ */

/* An error body in dialect d's shape (sim_dialect_error_text). */
char *sim_error_text(sim_dialect d, unsigned status, const char *param, const char *message);
enum MHD_Result sim_respond_text(struct MHD_Connection *conn, unsigned status,
                                 const char *content_type, char *text, size_t len,
                                 const char *request_id);
enum MHD_Result sim_respond_error(struct MHD_Connection *conn, sim_dialect d,
                                  unsigned status, const char *param, const char *message,
                                  const char *request_id);
enum MHD_Result sim_respond_json(struct MHD_Connection *conn, unsigned status,
                                 const json_t *doc);
/* Append s as a JSON string body (without quotes) to out. */
void sim_json_escape(GString *out, const char *s);
/* The whole non-streaming completion or chat completion body. */
void sim_render_response(const struct sim_call *call, const json_t *kv_out, GString *out);
/* SSE events for n new tokens starting at output index first. */
void sim_render_chunks(struct sim_call *call, uint32_t first, uint32_t n, bool last);
/* The usage chunk (include_usage) and the terminator. */
void sim_render_stream_end(struct sim_call *call);
void sim_render_stream_error(struct sim_call *call, unsigned status, const char *param,
                             const char *message);

/* --- KV handoff (kv-handoff.c) ---------------------------------------- */

/* Start the pull described by call->kv_in; the call continues with
 * sim_call_submit or the failure policy. */
void sim_kv_pull_start(struct sim_call *call);
/* Check do_remote_prefill params: NULL when valid, else why not. */
const char *sim_kv_params_invalid(const json_t *params);
/* The kv_transfer_params a prefill-only request answers with. */
json_t *sim_kv_params_out(struct sim_call *call);
/* POST /sim/kv/pull on the producer. */
enum MHD_Result sim_kv_route_pull(struct sim_node *node, struct MHD_Connection *conn,
                                  const char *body, size_t len);
/* Apply the load-failure policy to a do_remote_prefill call that cannot
 * get its KV. */
void sim_kv_load_failed(struct sim_call *call, const char *why);

/* --- SGLang's bootstrap rooms (bootstrap.c) ---------------------------- */

/* A prefill leg finished: its KV, held under the engine's lease, waits in
 * its room for the decode leg. */
void sim_bootstrap_publish(struct sim_call *prefill);
/* A decode leg waits (bounded by --disaggregation-waiting-timeout) for its
 * room's KV, then is submitted as a remote decode; it fails with 500 when
 * the prefill leg fails or the wait times out. */
void sim_bootstrap_wait(struct sim_call *decode);
/* The call stops (failed, finished or its client gone): a prefill leg that
 * never published fails its waiting decode leg; a waiting decode leg
 * leaves its room. */
void sim_bootstrap_stop(struct sim_call *call);
/* Free every room (at exit). */
void sim_bootstrap_free(struct sim_fleet *fleet);

#endif /* NW_SIM_SERVER_H */
