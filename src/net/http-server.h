/*
 * The client-facing HTTP server: libmicrohttpd in external-poll epoll mode,
 * driven from the GLib main loop (docs/deployment.md).
 *
 * - MHD's epoll descriptor is watched by one GLib fd source; each wake runs
 *   MHD_run once and re-arms a deadline source from MHD_get_timeout, whose
 *   answer is honoured after every run.
 * - Resuming a connection does not wake the loop in external mode, so
 *   nw_http_server_resume() only asks for a run at the next iteration; many
 *   resumes in one iteration share one MHD_run.
 * - Every client socket joins a private epoll set for hang-ups once,
 *   when MHD announces the connection, so a client that leaves while its
 *   request is suspended on an engine is noticed at once, at no cost per
 *   request.
 * - The front door (docs/api.md, "Framing and slow clients"): the body's
 *   framing is checked before the handler's first call; heads and bodies
 *   have deadlines and connections without a head a cap of their own,
 *   kept in FIFO queues swept by one deadline source (no system call per
 *   request); an answer sent before the body was read is followed by a
 *   lingering close.
 */
#ifndef NW_HTTP_SERVER_H
#define NW_HTTP_SERVER_H

#include <stdbool.h>
#include <stdint.h>

#include <glib.h>
#include <jansson.h>
#include <microhttpd.h>

struct nw_http_server;

/* Each client connection's memory pool: its request line and headers must
 * fit (else 431), and libmicrohttpd zeroes the pool's unused part after
 * every request on a kept-alive connection, so a pool larger than headers
 * need costs a memset per request. Bodies pass through it in pieces. */
#define NW_HTTP_CONNECTION_MEMORY (16u * 1024u)

struct nw_http_server_options {
	const char *host;          /* numeric IPv4 or IPv6 address */
	uint16_t port;             /* 0: ephemeral */
	unsigned connection_timeout_s; /* idle and slow clients */
	unsigned connection_limit; /* admitted requests; pending heads come on top */
	/* Slow clients (docs/deployment.md, "Slow clients"); 0 is off. */
	double head_timeout_s;     /* a whole head, from accept or the last answer */
	double body_timeout_s;     /* a whole body, from the end of its head */
	unsigned max_pending;      /* connections without a head: the oldest goes */
	const char *tls_cert_pem;  /* with tls_key_pem: serve HTTPS (GnuTLS), */
	const char *tls_key_pem;   /* for narwhal-sim's TLS endpoints */
};

/* What the front door refused or closed, for /narwhal/health. */
struct nw_http_server_counters {
	uint64_t framing_refusals; /* 400/501 for Content-Length/Transfer-Encoding */
	uint64_t head_timeouts;    /* closed: no whole head within head_timeout_s */
	uint64_t body_timeouts;    /* 408: no whole body within body_timeout_s */
	uint64_t pending_evictions; /* closed: max_pending reached, oldest head out */
	uint64_t lingering_closes;  /* answered early, unread body drained */
};

/* The request handler, with libmicrohttpd's access-handler contract: it is
 * called for the headers, then for each body chunk, then once with
 * *upload_size == 0; it must queue a response or suspend before returning
 * MHD_YES on that last call. Its first call either answers (leaving
 * *request NULL) or sets *request.
 *
 * The server checks the body's framing before the first call (400/501 and
 * close, docs/api.md "Framing"). A request without a body gets its first
 * call only once the request is complete, so that an answer there keeps
 * the connection alive (libmicrohttpd closes a connection answered before
 * its body was read); the final call follows at once if *request was set. */
typedef enum MHD_Result (*nw_http_handler_fn)(void *data, struct MHD_Connection *conn,
                                              const char *url, const char *method,
                                              const char *version, const char *upload,
                                              size_t *upload_size, void **request);
/* Called once per request when MHD is done with it, whatever the reason. */
typedef void (*nw_http_completed_fn)(void *data, struct MHD_Connection *conn,
                                     void **request, enum MHD_RequestTerminationCode why);
/* A suspended client hung up. */
typedef void (*nw_http_hangup_fn)(void *data);

struct nw_http_server *nw_http_server_start(const struct nw_http_server_options *opts,
                                            nw_http_handler_fn handler,
                                            nw_http_completed_fn completed, void *data,
                                            GError **error);

/* The bound port (useful with port 0). */
uint16_t nw_http_server_port(const struct nw_http_server *srv);

/* Suspend a connection (only from the handler or a content reader), and
 * watch it for hang-up until it is resumed. on_hangup may be NULL. */
void nw_http_server_suspend(struct nw_http_server *srv, struct MHD_Connection *conn,
                            nw_http_hangup_fn on_hangup, void *data);

/* Resume a suspended connection from any callback on the loop thread. */
void nw_http_server_resume(struct nw_http_server *srv, struct MHD_Connection *conn);

/* End a connection at once, from a content reader about to return
 * MHD_CONTENT_READER_END_WITH_ERROR or from a callback: the peer sees the
 * close now. In our mode (external epoll, MHD_USE_TURBO) MHD neither shuts
 * the socket nor looks again at a resumed connection it marked closed, so
 * the socket is shut here and the connection given a 1 s timeout, whose
 * deadline makes the server run MHD and release the descriptor. */
void nw_http_server_abort(struct MHD_Connection *conn);

/* From the handler in the middle of a body, where libmicrohttpd takes no
 * answer: answer status with body (the error envelope, copied) and close
 * the connection, draining what the client still sends for a bounded time
 * so that it reads the answer rather than a reset. Return the result from
 * the handler (it is MHD_NO, which makes libmicrohttpd let go). */
enum MHD_Result nw_http_server_refuse(struct MHD_Connection *conn, unsigned status,
                                      const json_t *body, const char *request_id);

void nw_http_server_counters(const struct nw_http_server *srv,
                             struct nw_http_server_counters *out);

/* A reload (docs/deployment.md): new slow-client allowances
 * (server.head_timeout_s, server.body_timeout_s; 0 is off). */
void nw_http_server_set_slow_timeouts(struct nw_http_server *srv, double head_timeout_s,
                                      double body_timeout_s);

/* Stop accepting (a stop signal's drain): the listening socket is closed,
 * so new connections are refused; open ones are served on. */
void nw_http_server_quiesce(struct nw_http_server *srv);

/* Number of connections currently suspended. */
unsigned nw_http_server_suspended(const struct nw_http_server *srv);

/* Resume every suspended connection and stop. The handler may be called
 * again for resumed connections and must answer them (e.g. 503). */
void nw_http_server_stop(struct nw_http_server *srv);

/* Queue a JSON response (body borrowed) with the given status. */
enum MHD_Result nw_http_respond_json(struct MHD_Connection *conn, unsigned status,
                                     const json_t *body);
/* The same with more headers: name, value pairs ended by a NULL name; a
 * pair whose value is NULL is left out. */
enum MHD_Result nw_http_respond_json_with(struct MHD_Connection *conn, unsigned status,
                                          const json_t *body, const char *const *headers);

/* Queue the OpenAI-style error envelope:
 * {"error":{"message":..., "type":..., "param":..., "code":...}}
 * code and param may be NULL (JSON null). */
enum MHD_Result nw_http_respond_error(struct MHD_Connection *conn, unsigned status,
                                      const char *type, const char *code,
                                      const char *param, const char *message);

/* The error body alone (transfer full), for streams and tests. */
json_t *nw_http_error_body(const char *type, const char *code, const char *param,
                           const char *message);

#endif /* NW_HTTP_SERVER_H */
