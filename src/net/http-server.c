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

/* One suspended connection under the hang-up watch. */
struct suspended {
	struct MHD_Connection *conn;
	int fd;
	nw_http_hangup_fn on_hangup;
	void *data;
};

struct nw_http_server {
	struct MHD_Daemon *mhd;
	uint16_t port;
	GSource *io;        /* MHD's epoll fd */
	GSource *deadline;  /* MHD_get_timeout, and runs requested by resume */
	int hangup_epfd;    /* private epoll of suspended clients, EPOLLRDHUP */
	GSource *hangup_io;
	GHashTable *suspended; /* MHD_Connection * -> struct suspended * */
	bool running;       /* inside MHD_run: never re-enter it */
};

static void
run_mhd(struct nw_http_server *srv)
{
	MHD_UNSIGNED_LONG_LONG timeout_ms;

	if (srv->running)
		return;
	srv->running = true;
	MHD_run(srv->mhd);
	srv->running = false;
	/* M3: 0 means "again now"; MHD_NO means no deadline at all. */
	if (MHD_get_timeout(srv->mhd, &timeout_ms) == MHD_YES)
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
		struct suspended *s = g_hash_table_lookup(srv->suspended, events[i].data.ptr);

		if (s == NULL)
			continue;
		/* Stop watching first: the callback usually resumes. */
		epoll_ctl(srv->hangup_epfd, EPOLL_CTL_DEL, s->fd, NULL);
		s->fd = -1;
		if (s->on_hangup)
			s->on_hangup(s->data);
	}
	return G_SOURCE_CONTINUE;
}

static void
suspended_free(gpointer p)
{
	g_free(p);
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
	srv->hangup_epfd = -1;
	flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_TURBO | MHD_USE_ERROR_LOG;
	if (addr.ss_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	srv->mhd = MHD_start_daemon(flags, opts->port, NULL, NULL,
	                            handler, data,
	                            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
	                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
	                            MHD_OPTION_CONNECTION_TIMEOUT, opts->connection_timeout_s,
	                            MHD_OPTION_CONNECTION_LIMIT, opts->connection_limit,
	                            MHD_OPTION_NOTIFY_COMPLETED, completed, data,
	                            MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u,
	                            MHD_OPTION_END);
	if (srv->mhd == NULL) {
		g_set_error(error, G_IO_ERROR, G_IO_ERROR_FAILED,
		            "cannot listen on %s port %u: %s", opts->host, opts->port,
		            errno ? g_strerror(errno) : "libmicrohttpd refused to start");
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

	srv->hangup_epfd = epoll_create1(EPOLL_CLOEXEC);
	srv->hangup_io = g_unix_fd_source_new(srv->hangup_epfd, G_IO_IN);
	g_source_set_callback(srv->hangup_io, (GSourceFunc)(void (*)(void))on_hangup_io, srv, NULL);
	g_source_set_name(srv->hangup_io, "narwhal-http-hangup");
	g_source_attach(srv->hangup_io, NULL);
	srv->suspended = g_hash_table_new_full(g_direct_hash, g_direct_equal, NULL, suspended_free);

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
	struct suspended *s = g_new0(struct suspended, 1);
	const union MHD_ConnectionInfo *info;

	s->conn = conn;
	s->fd = -1;
	s->on_hangup = on_hangup;
	s->data = data;
	info = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	if (on_hangup && info) {
		struct epoll_event ev = { .events = EPOLLRDHUP | EPOLLHUP | EPOLLERR, .data.ptr = conn };

		if (epoll_ctl(srv->hangup_epfd, EPOLL_CTL_ADD, info->connect_fd, &ev) == 0)
			s->fd = info->connect_fd;
	}
	g_hash_table_replace(srv->suspended, conn, s);
	MHD_suspend_connection(conn);
}

void
nw_http_server_resume(struct nw_http_server *srv, struct MHD_Connection *conn)
{
	struct suspended *s = g_hash_table_lookup(srv->suspended, conn);

	if (s == NULL)
		return; /* not suspended: resuming twice is harmless */
	if (s->fd >= 0)
		epoll_ctl(srv->hangup_epfd, EPOLL_CTL_DEL, s->fd, NULL);
	g_hash_table_remove(srv->suspended, conn);
	MHD_resume_connection(conn);
	/* M2: resume only sets flags; run MHD at the next iteration. */
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
	return g_hash_table_size(srv->suspended);
}

void
nw_http_server_stop(struct nw_http_server *srv)
{
	GHashTableIter it;
	gpointer key;

	if (srv == NULL)
		return;
	/* M6: stopping with suspended connections is an API violation. */
	while (g_hash_table_size(srv->suspended) > 0) {
		g_hash_table_iter_init(&it, srv->suspended);
		g_hash_table_iter_next(&it, &key, NULL);
		nw_http_server_resume(srv, key);
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
	g_hash_table_destroy(srv->suspended);
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
