/*
 * The admin API (docs/admin.md; beyond the spec in its form): a listener
 * of its own, loopback unless admin.allow_remote, with a bearer token read
 * from the environment variable admin.token_env names. It reads the state,
 * drains, pins, moves, ejects and readmits engines through the monitor,
 * and reloads the configuration. Every call is logged (admin_call) and
 * kept in the operator history /narwhal/state shows. It reads the daemon
 * only through the accessors of daemon-internal.h, since a reload
 * replaces what they return.
 */
#ifndef NW_ADMIN_ADMIN_H
#define NW_ADMIN_ADMIN_H

#include <stdbool.h>
#include <stdint.h>

#include <glib.h>
#include <jansson.h>

struct nw_daemon;
struct nw_admin;

/* Start the listener when admin.token_env is set. NULL without error when
 * no token is configured (no listener, logged once as admin_disabled);
 * NULL with error when the variable is unset or empty, or the address
 * cannot be bound. */
struct nw_admin *nw_admin_start(struct nw_daemon *d, GError **error);

/* The admin token from the variable admin.token_env names, blanks around
 * it dropped: NULL with error when the variable is unset or blank (a start
 * then fails; --check-config warns). token_env must not be NULL. */
char *nw_admin_read_token(const char *token_env, GError **error);

/* The bound port (admin.port 0 picks one). */
uint16_t nw_admin_port(const struct nw_admin *a);

/* The operator history, oldest first (transfer full): {"enabled",
 * "capacity", "total", "entries": [{"at", "method", "path", "engine",
 * "status", "result"[, "peer"]}], "unauthorized": {"count"[, "last_at"]
 * [, "last_peer"]}} (docs/state.md); the callers' addresses only for
 * operators. a may be NULL (no listener): {"enabled": false, "entries":
 * []}. */
json_t *nw_admin_history_json(const struct nw_admin *a, bool operator);

/* Calls answered by result ("ok" or the error code answered; static
 * strings), for the metrics (docs/metrics.md): fn once per result, "ok"
 * and "invalid_admin_token" always. */
typedef void (*nw_admin_count_fn)(const char *result, uint64_t n, void *data);
void nw_admin_calls_foreach(const struct nw_admin *a, nw_admin_count_fn fn, void *data);

/* Stop listening and free; a may be NULL. */
void nw_admin_free(struct nw_admin *a);

#endif /* NW_ADMIN_ADMIN_H */
