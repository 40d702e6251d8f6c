#include "build-config.h"

#include "net/http-server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gio/gio.h>
#include <glib-unix.h>

#include "core/log.h"
#include "net/loop.h"

/* One client connection, from MHD's connection notice to its close. Its
 * socket joins the hang-up set once, for its whole life: adding it on every
 * suspend and removing it on every resume cost two epoll_ctl calls per
 * request. */
struct watched {
	struct MHD_Connection *conn;
	int fd;                  /* -1: not (or no longer) in the hang-up set */
	bool suspended;
	bool peer_closed;        /* the hang-up came while MHD had the connection */
	bool late;               /* in late_hangups rather than suspended */
	nw_http_hangup_fn on_hangup;
	void *data;
	GList link;              /* in suspended, while suspended */
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
	/* A connection resumed from inside that run (by a callback) waits
	 * for the next run, which MHD's own timeout does not ask for. */
	if (srv->resumed)
		nw_deadline_source_set_in(srv->deadline, 0);
	/* M3: 0 means "again now"; MHD_NO means no deadline at all. */
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
		w->conn = conn;
		w->fd = -1;
		w->link.data = w;
		ev.data.ptr = w;
		if (info != NULL && epoll_ctl(srv->hangup_epfd, EPOLL_CTL_ADD, info->connect_fd, &ev) == 0)
			w->fd = info->connect_fd;
		*socket_context = w;
		return;
	}
	w = *socket_context;
	if (w == NULL)
		return;
	/* MHD closes the socket after this notice. */
	unwatch(srv, w);
	if (w->suspended)
		g_queue_unlink(w->late ? &srv->late_hangups : &srv->suspended, &w->link);
	g_free(w);
	*socket_context = NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap) G_GNUC_PRINTF(2, 0);

static void
mhd_log(void *cls, const char *fmt, va_list ap)
{
	char *msg = g_strdup_vprintf(fmt, ap);

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
	                            handler, data,
	                            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
	                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
	                            MHD_OPTION_CONNECTION_TIMEOUT, opts->connection_timeout_s,
	                            MHD_OPTION_CONNECTION_LIMIT, opts->connection_limit,
	                            MHD_OPTION_NOTIFY_COMPLETED, completed, data,
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

static struct watched *
watched_of(struct MHD_Connection *conn)
{
	const union MHD_ConnectionInfo *info =
		MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

	return info ? info->socket_context : NULL;
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
	/* M2: resume only sets flags; run MHD at the next iteration. */
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
	/* M6: stopping with suspended connections is an API violation. */
	while (srv->suspended.head != NULL || srv->late_hangups.head != NULL) {
		GList *l = srv->suspended.head ? srv->suspended.head : srv->late_hangups.head;

		nw_http_server_resume(srv, ((struct watched *)l->data)->conn);
	}
	if (srv->mhd) {
		MHD_run(srv->mhd);
		MHD_stop_daemon(srv->mhd);
	}
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
nw_http_respond_json(struct MHD_Connection *conn, unsigned status, const json_t *body)
{
	char *text = json_dumps(body, JSON_COMPACT);
	struct MHD_Response *resp;
	enum MHD_Result ret;
	size_t len;

	if (text == NULL)
		return MHD_NO;
	len = strlen(text);
	resp = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
	if (resp == NULL) {
		free(text);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
	ret = MHD_queue_response(conn, status, resp);
	MHD_destroy_response(resp);
	return ret;
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
