/*
 * What the configuration loader (config.c) shares with its cross-field
 * rules (config-rules.c): the state of one load and the calls that report
 * a problem or ask what the document gave. Internal to the core layer.
 */
#ifndef NW_CORE_CONFIG_LOADER_H
#define NW_CORE_CONFIG_LOADER_H

#include <stdbool.h>

#include <glib.h>

#include "core/config.h"

struct loader {
	GPtrArray *problems;
	guint n_errors;        /* errors added by this load */
	struct nw_config *cfg;
	GHashTable *given;     /* displayed paths present in the file */
	GHashTable *bad;       /* displayed paths whose value was refused */
};

/* A problem at path (a displayed path such as "fleet.engines[0].url"). */
void nw_loader_problem(struct loader *ld, bool warning, const char *path, const char *fmt, ...)
	G_GNUC_PRINTF(4, 5);
#define ERROR(ld, path, ...) nw_loader_problem((ld), false, (path), __VA_ARGS__)
#define WARN(ld, path, ...) nw_loader_problem((ld), true, (path), __VA_ARGS__)

/* Record that the value at path was refused (see nw_loader_usable). */
void nw_loader_mark_bad(struct loader *ld, const char *path);

/* Whether the document gave path. */
bool nw_loader_given(const struct loader *ld, const char *path);

/* A value cross-field rules may trust: neither it nor a section or array
 * element above it was refused (a refused field keeps its default, and a
 * rule judging the default would only add noise). */
bool nw_loader_usable(const struct loader *ld, const char *path);

/* Every cross-field rule (config-rules.c), after the walk, the fleet and
 * the derived defaults. */
void nw_config_apply_rules(struct loader *ld);

#endif /* NW_CORE_CONFIG_LOADER_H */
