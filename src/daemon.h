/*
 * The narwhal daemon: one GLib main loop driving the client HTTP server,
 * the engine connection pools and the configured plugins.
 */
#ifndef NW_DAEMON_H
#define NW_DAEMON_H

#include <glib.h>

#include "core/config.h"

struct nw_daemon;

/* Build the daemon from a validated configuration loaded from a file
 * (transfer full, also on failure): load the plugins, open the engine
 * pools and start listening. A reload re-reads cfg->source. */
struct nw_daemon *nw_daemon_new(struct nw_config *cfg, GError **error);

/* Run until a stop signal's drain is over (docs/deployment.md); returns
 * the process exit status. SIGHUP reloads the configuration. */
int nw_daemon_run(struct nw_daemon *d);

void nw_daemon_free(struct nw_daemon *d);

/* For --check-config and a reload: load every configured plugin and let
 * it validate its own section. Appends struct nw_config_error entries to problems; returns
 * false if any plugin refused. loaded, when not NULL, is an object that
 * gets what was loaded, by kind ("admission", ..., and "dialects" by name):
 * {"name", "version", "path"} each (--check-config --show-plugins). quiet:
 * the plugins' own log lines are dropped, for a check that the daemon's
 * creation of the same plugins follows (a start, a reload). */
gboolean nw_daemon_check_plugins(const struct nw_config *cfg, GPtrArray *problems,
                                 json_t *loaded, gboolean quiet);

#endif /* NW_DAEMON_H */
