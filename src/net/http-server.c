#include "build-config.h"

#include "net/http-server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gio/gio.h>
#include <glib-unix.h>

#include "core/json-write.h"
#include "core/log.h"
#include "core/process.h"
#include "net/http-framing.h"
#include "net/loop.h"

/* Lingering close (RFC 9112 9.6): after an answer sent before the body was
 * read, what the client still sends is read and dropped for this long, up
 * to this many bytes, on at most this many sockets at once. Closing with
 * unread data would send a reset, which makes the client's TCP stack drop
 * the answer it has not read yet. */
#define LINGER_US (5 * G_USEC_PER_SEC)
#define LINGER_BYTES (64u << 20)
#define LINGER_MAX 256u

/* One client connection, from MHD's connection notice to its close. Its
 * socket joins the hang-up set once, for its whole life: adding it on every
 * suspend and removing it on every resume cost two epoll_ctl calls per
 * request. */
struct watched {
	struct nw_http_server *srv;
	struct MHD_Connection *conn;
	int sock;                /* the connection's socket */
	int fd;                  /* -1: not (or no longer) in the hang-up set */
	bool suspended;
	bool peer_closed;        /* the hang-up came while MHD had the connection */
	bool late;               /* in late_hangups rather than suspended */
	bool in_request;         /* the handler saw this request's head */
	bool deferred;           /* no body: the handler's first call waits */
	bool body_pending;       /* a body was declared and is not read yet */
	bool evicted;            /* closed for slowness or the abort: no linger */
	nw_http_hangup_fn on_hangup;
	void *data;
	GList link;              /* in suspended, while suspended */
	GQueue *slow_q;          /* heads_new, heads_idle or bodies; NULL: none */
	GList slow_link;
	int64_t since_us;        /* when it joined slow_q */
	char *canned;            /* an answer to write at close (refuse, 408) */
	size_t canned_len;
};

/* A socket in lingering close, after MHD let go of it. */
struct lingerer {
	struct nw_http_server *srv;
	int fd;
	size_t left;             /* bytes still to drop */
	int64_t since_us;
	GSource *io;
	GList link;
};

struct nw_http_server {
	struct MHD_Daemon *mhd;
	uint16_t port;
	GSource *io;        /* MHD's epoll fd */
	GSource *deadline;  /* MHD_get_timeout, and runs requested by resume */
	int hangup_epfd;    /* private epoll of client sockets, EPOLLRDHUP */
	GSource *hangup_io;
	GQueue suspended;   /* struct watched, suspended by us */
	GQueue late_hangups; /* suspended after their peer had closed */
	bool running;       /* inside MHD_run: never re-enter it */
	bool resumed;       /* a resume since the last MHD_run began */
	bool quiet;         /* drop MHD's next message: a close we asked for */
	bool stopping;      /* no lingering while MHD lets everything go */
	nw_http_handler_fn handler;
	nw_http_completed_fn completed;
	void *app;
	/* Slow clients: FIFO queues, each with one allowance, so the head of
	 * each is the first to expire; one deadline source sweeps them. */
	GQueue heads_new;   /* accepted, no whole head yet */
	GQueue heads_idle;  /* kept alive after an answer, no next head yet */
	GQueue bodies;      /* head seen, body not read yet */
	GQueue lingering;   /* struct lingerer */
	int64_t head_us, idle_us, body_us; /* allowances; 0: none */
	unsigned connection_timeout_s;
	unsigned max_pending;
	GSource *sweep;
	struct nw_http_server_counters counters;
};

static void
unwatch(struct nw_http_server *srv, struct watched *w)
{
	if (w->fd < 0)
		return;
	epoll_ctl(srv->hangup_epfd, EPOLL_CTL_DEL, w->fd, NULL);
	w->fd = -1;
}

/* A suspended connection whose peer left: tell its owner once. */
static void
report_hangup(struct watched *w)
{
	nw_http_hangup_fn fn = w->on_hangup;

	w->on_hangup = NULL;
	if (fn != NULL)
		fn(w->data); /* usually resumes */
}

static void
report_late_hangups(struct nw_http_server *srv)
{
	GList *l;

	while ((l = g_queue_pop_head_link(&srv->late_hangups)) != NULL) {
		struct watched *w = l->data;

		w->late = false;
		g_queue_push_tail_link(&srv->suspended, &w->link);
		report_hangup(w);
	}
}

/* --- slow clients ------------------------------------------------- */

static int64_t
allowance(const struct nw_http_server *srv, const GQueue *q)
{
	return q == &srv->bodies ? srv->body_us : q == &srv->heads_new ? srv->head_us
	                                                                : srv->idle_us;
}

static void
slow_leave(struct watched *w)
{
	if (w->slow_q == NULL)
		return;
	g_queue_unlink(w->slow_q, &w->slow_link);
	w->slow_q = NULL;
}

/* Join a queue at its tail: the loop's time only grows, so each queue
 * stays in deadline order. No system call: the sweep is re-armed only
 * when this deadline comes before the one it has. */
static void
slow_join(struct nw_http_server *srv, struct watched *w, GQueue *q)
{
	int64_t allow = allowance(srv, q), at;

	slow_leave(w);
	if (allow <= 0 && q != &srv->heads_new && q != &srv->heads_idle)
		return;
	w->since_us = g_source_get_time(srv->io);
	w->slow_q = q;
	g_queue_push_tail_link(q, &w->slow_link);
	if (allow <= 0)
		return; /* counted for max_pending only */
	at = w->since_us + allow;
	if (nw_deadline_source_get(srv->sweep) < 0 || at < nw_deadline_source_get(srv->sweep))
		nw_deadline_source_set(srv->sweep, at);
}

/* Make MHD close a connection it is reading: it sees the end of input at
 * once (the shut read side wakes its epoll), or at the latest at the 1 s
 * timeout. The write side stays open for a canned answer. */
static void
close_soon(struct watched *w, int how)
{
	slow_leave(w);
	w->evicted = true;
	shutdown(w->sock, how);
	MHD_set_connection_option(w->conn, MHD_CONNECTION_OPTION_TIMEOUT, 1u);
}

/* An answer written by us at close, for when MHD takes none. */
static void
set_canned(struct watched *w, unsigned status, const json_t *body, const char *request_id)
{
	size_t len;
	g_autofree char *text = nw_json_dumps(body, JSON_COMPACT, &len);
	const char *reason = MHD_get_reason_phrase_for(status);
	GString *out;

	if (text == NULL || w->canned != NULL)
		return;
	out = g_string_sized_new(256 + len);
	g_string_append_printf(out, "HTTP/1.1 %u %s\r\nConnection: close\r\n"
	                       "Content-Type: application/json\r\nContent-Length: %zu\r\n",
	                       status, reason ? reason : "Error", len);
	if (request_id != NULL)
		g_string_append_printf(out, "X-Request-Id: %s\r\n", request_id);
	g_string_append_printf(out, "\r\n%s", text);
	w->canned_len = out->len;
	w->canned = g_string_free(out, FALSE);
}

static void
linger_end(struct nw_http_server *srv, struct lingerer *l)
{
	g_queue_unlink(&srv->lingering, &l->link);
	g_source_destroy(l->io);
	g_source_unref(l->io);
	close(l->fd);
	g_free(l);
}

static gboolean
on_linger_io(gint fd, GIOCondition cond, gpointer data)
{
	struct lingerer *l = data;
	static char sink[64 * 1024];
	ssize_t n;

	while ((n = recv(fd, sink, sizeof sink, MSG_DONTWAIT)) > 0) {
		if ((size_t)n >= l->left) {
			l->left = 0;
			break;
		}
		l->left -= (size_t)n;
	}
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) && l->left > 0)
		return G_SOURCE_CONTINUE;
	/* End of input, an error or the byte bound: done. */
	linger_end(l->srv, l);
	return G_SOURCE_REMOVE;
}

/* Keep the socket past MHD's close: a duplicate holds it open, our FIN
 * follows the answer already sent, and what arrives is dropped. */
static void
linger_start(struct nw_http_server *srv, int sock)
{
	struct lingerer *l;
	int fd;

	if (srv->lingering.length >= LINGER_MAX)
		linger_end(srv, srv->lingering.head->data);
	fd = fcntl(sock, F_DUPFD_CLOEXEC, 0);
	if (fd < 0)
		return;
	shutdown(fd, SHUT_WR);
	l = g_new0(struct lingerer, 1);
	l->srv = srv;
	l->fd = fd;
	l->left = LINGER_BYTES;
	l->since_us = g_source_get_time(srv->io);
	l->link.data = l;
	l->io = g_unix_fd_source_new(fd, G_IO_IN | G_IO_HUP | G_IO_ERR);
	g_source_set_callback(l->io, (GSourceFunc)(void (*)(void))on_linger_io, l, NULL);
	g_source_set_name(l->io, "narwhal-http-linger");
	g_source_attach(l->io, NULL);
	g_queue_push_tail_link(&srv->lingering, &l->link);
	srv->counters.lingering_closes++;
	if (nw_deadline_source_get(srv->sweep) < 0 ||
	    l->since_us + LINGER_US < nw_deadline_source_get(srv->sweep))
		nw_deadline_source_set(srv->sweep, l->since_us + LINGER_US);
}

/* Close what outlived its allowance, oldest first; re-arm for the next. */
static unsigned
expire(struct nw_http_server *srv, GQueue *q, int64_t now, int64_t *next, int how)
{
	int64_t allow = allowance(srv, q);
	unsigned n = 0;

	if (allow <= 0)
		return 0;
	while (q->head != NULL) {
		struct watched *w = q->head->data;

		if (w->since_us + allow > now) {
			*next = *next < 0 ? w->since_us + allow : MIN(*next, w->since_us + allow);
			break;
		}
		if (q == &srv->bodies) {
			json_t *body = nw_http_error_body("invalid_request_error", "request_timeout",
			                                  NULL, "the request body did not arrive within "
			                                  "server.body_timeout_s");

			set_canned(w, 408, body, NULL);
			json_decref(body);
		}
		close_soon(w, how);
		n++;
	}
	return n;
}

static void
on_sweep(void *data)
{
	struct nw_http_server *srv = data;
	int64_t now = g_get_monotonic_time(), next = -1;
	unsigned heads, bodies;
	char a[16], b[16];

	heads = expire(srv, &srv->heads_new, now, &next, SHUT_RDWR);
	heads += expire(srv, &srv->heads_idle, now, &next, SHUT_RDWR);
	bodies = expire(srv, &srv->bodies, now, &next, SHUT_RD);
	while (srv->lingering.head != NULL) {
		struct lingerer *l = srv->lingering.head->data;

		if (l->since_us + LINGER_US > now) {
			next = next < 0 ? l->since_us + LINGER_US : MIN(next, l->since_us + LINGER_US);
			break;
		}
		linger_end(srv, l);
	}
	nw_deadline_source_set(srv->sweep, next);
	srv->counters.head_timeouts += heads;
	srv->counters.body_timeouts += bodies;
	if (heads + bodies == 0)
		return;
	/* One line a sweep, not one a connection: a flood of tricklers must
	 * not flood the log too. */
	g_snprintf(a, sizeof a, "%u", heads);
	g_snprintf(b, sizeof b, "%u", bodies);
	nw_log(NARWHAL_LOG_INFO, "slow_clients_closed", "head_timeouts", a, "body_timeouts", b,
	       NULL);
	/* Closed sockets are MHD's to reap. */
	nw_deadline_source_set_in(srv->deadline, 0);
}

static void
run_mhd(struct nw_http_server *srv)
{
	MHD_UNSIGNED_LONG_LONG timeout_ms;

	if (srv->running)
		return;
	srv->running = true;
	srv->resumed = false;
	MHD_run(srv->mhd);
	srv->running = false;
	srv->quiet = false;
	/* A connection resumed from inside that run (by a callback) waits
	 * for the next run, which MHD's own timeout does not ask for. */
	if (srv->resumed)
		nw_deadline_source_set_in(srv->deadline, 0);
	/* Zero means "again now"; MHD_NO means no deadline at all. */
	else if (MHD_get_timeout(srv->mhd, &timeout_ms) == MHD_YES)
		nw_deadline_source_set_in(srv->deadline, (int64_t)MIN(timeout_ms, 3600000ull) * 1000);
	else
		nw_deadline_source_set(srv->deadline, -1);
}

static gboolean
on_mhd_io(gint fd, GIOCondition cond, gpointer data)
{
	run_mhd(data);
	return G_SOURCE_CONTINUE;
}

static void
on_mhd_deadline(void *data)
{
	report_late_hangups(data);
	run_mhd(data);
}

static gboolean
on_hangup_io(gint fd, GIOCondition cond, gpointer data)
{
	struct nw_http_server *srv = data;
	struct epoll_event events[64];
	int n;

	n = epoll_wait(srv->hangup_epfd, events, G_N_ELEMENTS(events), 0);
	for (int i = 0; i < n; i++) {
		struct watched *w = events[i].data.ptr;

		/* The set is level-triggered: stop watching first, or a peer
		 * that closed while MHD owns the connection would wake us on
		 * every iteration until MHD gets round to it. */
		unwatch(srv, w);
		w->peer_closed = true;
		if (w->suspended)
			report_hangup(w);
	}
	return G_SOURCE_CONTINUE;
}

static struct watched *
watched_of(struct MHD_Connection *conn)
{
	const union MHD_ConnectionInfo *info =
		MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

	return info ? info->socket_context : NULL;
}

/* server.max_pending_connections: a new connection pushes out the oldest
 * that has not sent its head, a fresh one before a kept-alive one, so that
 * tricklers cannot keep well-behaved clients out (docs/deployment.md). */
static void
evict_if_full(struct nw_http_server *srv)
{
	GQueue *q;

	if (srv->max_pending == 0 || srv->heads_new.length + srv->heads_idle.length <= srv->max_pending)
		return;
	q = srv->heads_new.length > 1 || srv->heads_idle.length == 0 ? &srv->heads_new
	                                                             : &srv->heads_idle;
	srv->counters.pending_evictions++;
	close_soon(q->head->data, SHUT_RDWR);
}

static void
on_connection(void *data, struct MHD_Connection *conn, void **socket_context,
              enum MHD_ConnectionNotificationCode code)
{
	struct nw_http_server *srv = data;
	struct watched *w;

	if (code == MHD_CONNECTION_NOTIFY_STARTED) {
		const union MHD_ConnectionInfo *info =
			MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
		struct epoll_event ev = { .events = EPOLLRDHUP | EPOLLHUP | EPOLLERR };

		w = g_new0(struct watched, 1);
		w->srv = srv;
		w->conn = conn;
		w->sock = info != NULL ? info->connect_fd : -1;
		w->fd = -1;
		w->link.data = w;
		w->slow_link.data = w;
		ev.data.ptr = w;
		if (info != NULL && epoll_ctl(srv->hangup_epfd, EPOLL_CTL_ADD, info->connect_fd, &ev) == 0)
			w->fd = info->connect_fd;
		*socket_context = w;
		nw_process_load_up(NW_LOAD_CONNECTIONS);
		slow_join(srv, w, &srv->heads_new);
		evict_if_full(srv);
		return;
	}
	w = *socket_context;
	if (w == NULL)
		return;
	nw_process_load_down(NW_LOAD_CONNECTIONS);
	/* MHD closes the socket after this notice. */
	unwatch(srv, w);
	if (w->suspended)
		g_queue_unlink(w->late ? &srv->late_hangups : &srv->suspended, &w->link);
	slow_leave(w);
	if (w->canned != NULL && w->sock >= 0)
		(void)send(w->sock, w->canned, w->canned_len, MSG_DONTWAIT | MSG_NOSIGNAL);
	/* Answered before its body was read: let the client read the answer. */
	if (w->body_pending && !w->evicted && !srv->stopping && w->sock >= 0)
		linger_start(srv, w->sock);
	g_free(w->canned);
	g_free(w);
	*socket_context = NULL;
}

/* --- the handler's entry: framing, deferral, slow-client queues ------ */

static enum MHD_Result
framing_field(void *cls, enum MHD_ValueKind kind, const char *key, size_t key_size,
              const char *value, size_t value_size)
{
	nw_framing_add(cls, key, key_size, value, value_size);
	return MHD_YES;
}

/* The path of an absolute-form target ("http://host:port/v1/models"),
 * which RFC 9112 3.2.2 says a server must accept; url itself otherwise. */
static const char *
origin_path(const char *url)
{
	const char *p;

	if (g_ascii_strncasecmp(url, "http://", 7) == 0)
		p = url + 7;
	else if (g_ascii_strncasecmp(url, "https://", 8) == 0)
		p = url + 8;
	else
		return url;
	p = strchr(p, '/');
	return p != NULL ? p : "/";
}

static enum MHD_Result
on_access(void *cls, struct MHD_Connection *conn, const char *target, const char *method,
          const char *version, const char *upload, size_t *upload_size, void **request)
{
	struct nw_http_server *srv = cls;
	struct watched *w = watched_of(conn);
	const char *url = origin_path(target);
	enum MHD_Result ret;

	if (w != NULL && !w->in_request) {
		struct nw_framing f = { 0 };
		nw_framing_verdict v;

		/* The first call: the head is whole. MHD used the first
		 * Content-Length, or any Transfer-Encoding, as it found them;
		 * refuse what it would misread (docs/api.md, "Framing"). */
		w->in_request = true;
		slow_leave(w);
		MHD_get_connection_values_n(conn, MHD_HEADER_KIND, framing_field, &f);
		v = nw_framing_verdict_of(&f);
		if (v == NW_FRAMING_BAD_NAME) {
			/* libmicrohttpd saw no body where another hop may see one:
			 * answer and close, so no byte after the head runs as a
			 * request (docs/api.md, "Framing"). */
			json_t *body = nw_http_error_body("invalid_request_error", nw_framing_code(v),
			                                  NULL, nw_framing_message(v));

			srv->counters.framing_refusals++;
			ret = nw_http_server_refuse(conn, nw_framing_status(v), body, NULL);
			json_decref(body);
			return ret;
		}
		if (v == NW_FRAMING_NONE) {
			w->deferred = true;
			return MHD_YES;
		}
		w->body_pending = true;
		if (nw_framing_status(v) != 0) {
			srv->counters.framing_refusals++;
			return nw_http_respond_error(conn, nw_framing_status(v), "invalid_request_error",
			                             nw_framing_code(v), NULL, nw_framing_message(v));
		}
		slow_join(srv, w, &srv->bodies);
		return srv->handler(srv->app, conn, url, method, version, upload, upload_size, request);
	}
	if (w != NULL && w->deferred) {
		/* A request without a body, complete: its first call now, and
		 * its final call at once if the first did not answer. */
		w->deferred = false;
		ret = srv->handler(srv->app, conn, url, method, version, upload, upload_size, request);
		if (ret == MHD_YES && *request != NULL)
			ret = srv->handler(srv->app, conn, url, method, version, upload, upload_size,
			                   request);
		return ret;
	}
	if (w != NULL && *upload_size == 0 && w->body_pending) {
		w->body_pending = false;
		slow_leave(w);
	}
	return srv->handler(srv->app, conn, url, method, version, upload, upload_size, request);
}

static void
on_completed(void *cls, struct MHD_Connection *conn, void **request,
             enum MHD_RequestTerminationCode why)
{
	struct nw_http_server *srv = cls;
	struct watched *w = watched_of(conn);

	if (w != NULL) {
		w->in_request = false;
		w->deferred = false;
		/* Kept alive: the next head has its allowance from now. */
		if (why == MHD_REQUEST_TERMINATED_COMPLETED_OK && !w->body_pending && !w->evicted)
			slow_join(srv, w, &srv->heads_idle);
		else
			slow_leave(w);
	}
	if (srv->completed != NULL)
		srv->completed(srv->app, conn, request, why);
}

static void mhd_log(void *cls, const char *fmt, va_list ap) G_GNUC_PRINTF(2, 0);

static void
mhd_log(void *cls, const char *fmt, va_list ap)
{
	struct nw_http_server *srv = cls;
	char *msg;

	if (srv->quiet) {
		srv->quiet = false;
		return;
	}
	msg = g_strdup_vprintf(fmt, ap);

	g_strchomp(msg);
	nw_log(NARWHAL_LOG_WARNING, "http_server", "message", msg, NULL);
	g_free(msg);
}

struct nw_http_server *
nw_http_server_start(const struct nw_http_server_options *opts, nw_http_handler_fn handler,
                     nw_http_completed_fn completed, void *data, GError **error)
{
	struct nw_http_server *srv = NULL;
	struct sockaddr_storage addr;
	const union MHD_DaemonInfo *info;
	unsigned flags;
	/* narwhal-sim's TLS endpoints (docs/simulator.md). */
	struct MHD_OptionItem tls[] = {
		{ MHD_OPTION_HTTPS_MEM_CERT, 0, (void *)opts->tls_cert_pem },
		{ MHD_OPTION_HTTPS_MEM_KEY, 0, (void *)opts->tls_key_pem },
		{ MHD_OPTION_END, 0, NULL },
	};
	struct MHD_OptionItem no_tls[] = { { MHD_OPTION_END, 0, NULL } };

	memset(&addr, 0, sizeof addr);
	if (inet_pton(AF_INET, opts->host, &((struct sockaddr_in *)&addr)->sin_addr) == 1) {
		struct sockaddr_in *in = (struct sockaddr_in *)&addr;
		in->sin_family = AF_INET;
		in->sin_port = htons(opts->port);
	} else if (inet_pton(AF_INET6, opts->host, &((struct sockaddr_in6 *)&addr)->sin6_addr) == 1) {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&addr;
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons(opts->port);
	} else {
		g_set_error(error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
		            "server.host: \"%s\" is not a numeric IPv4 or IPv6 address", opts->host);
		return NULL;
	}

	srv = g_new0(struct nw_http_server, 1);
	srv->handler = handler;
	srv->completed = completed;
	srv->app = data;
	srv->connection_timeout_s = opts->connection_timeout_s;
	nw_http_server_set_slow_timeouts(srv, opts->head_timeout_s, opts->body_timeout_s);
	srv->max_pending = opts->max_pending;
	/* Before MHD starts: its connection notices add to this set. */
	srv->hangup_epfd = epoll_create1(EPOLL_CLOEXEC);
	if (srv->hangup_epfd < 0) {
		g_set_error(error, G_IO_ERROR, g_io_error_from_errno(errno),
		            "cannot create an epoll set: %s", g_strerror(errno));
		g_free(srv);
		return NULL;
	}
	flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_TURBO | MHD_USE_ERROR_LOG;
	if (addr.ss_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	if (opts->tls_cert_pem != NULL)
		flags |= MHD_USE_TLS;
	srv->mhd = MHD_start_daemon(flags, opts->port, NULL, NULL,
	                            on_access, srv,
	                            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, srv,
	                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
	                            MHD_OPTION_CONNECTION_TIMEOUT, opts->connection_timeout_s,
	                            MHD_OPTION_CONNECTION_LIMIT,
	                            opts->connection_limit + opts->max_pending,
	                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv,
	                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, srv,
	                            MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u,
	                            MHD_OPTION_CONNECTION_MEMORY_LIMIT,
	                            (size_t)NW_HTTP_CONNECTION_MEMORY,
	                            MHD_OPTION_ARRAY, opts->tls_cert_pem != NULL ? tls : no_tls,
	                            MHD_OPTION_END);
	if (srv->mhd == NULL) {
		g_set_error(error, G_IO_ERROR, G_IO_ERROR_FAILED,
		            "cannot listen on %s port %u: %s", opts->host, opts->port,
		            errno ? g_strerror(errno) : "libmicrohttpd refused to start");
		close(srv->hangup_epfd);
		g_free(srv);
		return NULL;
	}
	info = MHD_get_daemon_info(srv->mhd, MHD_DAEMON_INFO_BIND_PORT);
	srv->port = info ? info->port : opts->port;
	info = MHD_get_daemon_info(srv->mhd, MHD_DAEMON_INFO_EPOLL_FD);

	srv->io = g_unix_fd_source_new(info->epoll_fd, G_IO_IN);
	g_source_set_callback(srv->io, (GSourceFunc)(void (*)(void))on_mhd_io, srv, NULL);
	g_source_set_name(srv->io, "narwhal-http-io");
	g_source_attach(srv->io, NULL);
	srv->deadline = nw_deadline_source_new("narwhal-http-deadline", on_mhd_deadline, srv);
	srv->sweep = nw_deadline_source_new("narwhal-http-slow-clients", on_sweep, srv);

	srv->hangup_io = g_unix_fd_source_new(srv->hangup_epfd, G_IO_IN);
	g_source_set_callback(srv->hangup_io, (GSourceFunc)(void (*)(void))on_hangup_io, srv, NULL);
	g_source_set_name(srv->hangup_io, "narwhal-http-hangup");
	g_source_attach(srv->hangup_io, NULL);

	/* Accept whatever is already pending. */
	nw_deadline_source_set_in(srv->deadline, 0);
	return srv;
}

uint16_t
nw_http_server_port(const struct nw_http_server *srv)
{
	return srv->port;
}


void
nw_http_server_suspend(struct nw_http_server *srv, struct MHD_Connection *conn,
                       nw_http_hangup_fn on_hangup, void *data)
{
	struct watched *w = watched_of(conn);

	MHD_suspend_connection(conn);
	if (w == NULL || w->suspended)
		return;
	w->suspended = true;
	w->on_hangup = on_hangup;
	w->data = data;
	/* A peer that left before this suspend is reported from the loop,
	 * not from inside the caller's handler. */
	w->late = w->peer_closed && on_hangup != NULL;
	g_queue_push_tail_link(w->late ? &srv->late_hangups : &srv->suspended, &w->link);
	if (w->late)
		nw_deadline_source_set_in(srv->deadline, 0);
}

void
nw_http_server_resume(struct nw_http_server *srv, struct MHD_Connection *conn)
{
	struct watched *w = watched_of(conn);

	if (w == NULL || !w->suspended)
		return; /* not suspended: resuming twice is harmless */
	w->suspended = false;
	w->on_hangup = NULL;
	w->data = NULL;
	g_queue_unlink(w->late ? &srv->late_hangups : &srv->suspended, &w->link);
	w->late = false;
	MHD_resume_connection(conn);
	/* Resume only sets flags; run MHD at the next iteration. */
	srv->resumed = true;
	nw_deadline_source_set_in(srv->deadline, 0);
}

void
nw_http_server_abort(struct MHD_Connection *conn)
{
	const union MHD_ConnectionInfo *info;

	if (conn == NULL)
		return;
	info = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	if (info != NULL)
		shutdown(info->connect_fd, SHUT_RDWR);
	MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, 1u);
	if (watched_of(conn) != NULL)
		watched_of(conn)->evicted = true; /* nothing to linger for */
}

enum MHD_Result
nw_http_server_refuse(struct MHD_Connection *conn, unsigned status, const json_t *body,
                      const char *request_id)
{
	struct watched *w = watched_of(conn);

	if (w != NULL) {
		set_canned(w, status, body, request_id);
		slow_leave(w);
		/* MHD reports the MHD_NO as an application error: it is not. */
		w->srv->quiet = true;
	}
	return MHD_NO;
}

void
nw_http_server_counters(const struct nw_http_server *srv, struct nw_http_server_counters *out)
{
	*out = srv->counters;
}

void
nw_http_server_set_slow_timeouts(struct nw_http_server *srv, double head_timeout_s,
                                 double body_timeout_s)
{
	srv->head_us = (int64_t)(head_timeout_s * G_USEC_PER_SEC);
	srv->idle_us = srv->head_us > 0
	               ? srv->head_us + (int64_t)srv->connection_timeout_s * G_USEC_PER_SEC : 0;
	srv->body_us = (int64_t)(body_timeout_s * G_USEC_PER_SEC);
	/* Shorter allowances: the sweep looks again now. */
	if (srv->sweep != NULL)
		nw_deadline_source_set_in(srv->sweep, 0);
}

void
nw_http_server_quiesce(struct nw_http_server *srv)
{
	/* External polling: MHD leaves the socket to us at once. */
	MHD_socket fd = MHD_quiesce_daemon(srv->mhd);

	if (fd != MHD_INVALID_SOCKET)
		close(fd);
}

unsigned
nw_http_server_suspended(const struct nw_http_server *srv)
{
	return srv->suspended.length + srv->late_hangups.length;
}

void
nw_http_server_stop(struct nw_http_server *srv)
{
	if (srv == NULL)
		return;
	/* Stopping with suspended connections is an API violation. */
	while (srv->suspended.head != NULL || srv->late_hangups.head != NULL) {
		GList *l = srv->suspended.head ? srv->suspended.head : srv->late_hangups.head;

		nw_http_server_resume(srv, ((struct watched *)l->data)->conn);
	}
	srv->stopping = true;
	if (srv->mhd) {
		MHD_run(srv->mhd);
		MHD_stop_daemon(srv->mhd);
	}
	while (srv->lingering.head != NULL)
		linger_end(srv, srv->lingering.head->data);
	nw_deadline_source_destroy(srv->sweep);
	nw_deadline_source_destroy(srv->deadline);
	if (srv->io) {
		g_source_destroy(srv->io);
		g_source_unref(srv->io);
	}
	if (srv->hangup_io) {
		g_source_destroy(srv->hangup_io);
		g_source_unref(srv->hangup_io);
	}
	if (srv->hangup_epfd >= 0)
		close(srv->hangup_epfd);
	g_free(srv);
}

enum MHD_Result
nw_http_respond_json_with(struct MHD_Connection *conn, unsigned status, const json_t *body,
                          const char *const *headers)
{
	struct MHD_Response *resp;
	enum MHD_Result ret;
	size_t len;
	char *text = nw_json_dumps(body, JSON_COMPACT, &len);

	if (text == NULL)
		return MHD_NO;
	resp = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
	if (resp == NULL) {
		free(text);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
	for (size_t i = 0; headers != NULL && headers[i] != NULL; i += 2) {
		if (headers[i + 1] != NULL)
			MHD_add_response_header(resp, headers[i], headers[i + 1]);
	}
	ret = MHD_queue_response(conn, status, resp);
	MHD_destroy_response(resp);
	return ret;
}

enum MHD_Result
nw_http_respond_json(struct MHD_Connection *conn, unsigned status, const json_t *body)
{
	return nw_http_respond_json_with(conn, status, body, NULL);
}

json_t *
nw_http_error_body(const char *type, const char *code, const char *param, const char *message)
{
	return json_pack("{s:{s:s, s:s, s:s?, s:s?}}", "error",
	                 "message", message, "type", type, "param", param, "code", code);
}

enum MHD_Result
nw_http_respond_error(struct MHD_Connection *conn, unsigned status, const char *type,
                      const char *code, const char *param, const char *message)
{
	json_t *body = nw_http_error_body(type, code, param, message);
	enum MHD_Result ret = nw_http_respond_json(conn, status, body);

	json_decref(body);
	return ret;
}
