/*
 * Plugin loader: dlopen(RTLD_NOW | RTLD_LOCAL), find narwhal_plugin_entry,
 * check the descriptor's guard fields, kind, name and required slots, and
 * refuse with a message that names the file, what was expected, what was
 * found and how to fix it. Loaded plugins are never unloaded while the
 * process runs (callbacks may still be referenced); nw_plugin_free only
 * drops the bookkeeping.
 */
#ifndef NW_PLUGIN_LOADER_H
#define NW_PLUGIN_LOADER_H

#include <narwhal/plugin-abi.h>

#include <glib.h>

#define NARWHAL_PLUGIN_ERROR (nw_plugin_error_quark())
GQuark nw_plugin_error_quark(void);

/* Error codes, in the order the loader checks them. */
typedef enum nw_plugin_error {
	NW_PLUGIN_ERROR_NOT_FOUND,      /* no file for the name */
	NW_PLUGIN_ERROR_UNSAFE,         /* as root: file or directory others can write */
	NW_PLUGIN_ERROR_OPEN,           /* dlopen failed, or (before UNSAFE) not a regular file */
	NW_PLUGIN_ERROR_NO_ENTRY,       /* no narwhal_plugin_entry symbol */
	NW_PLUGIN_ERROR_NULL_DESCRIPTOR,/* entry returned NULL */
	NW_PLUGIN_ERROR_BAD_MAGIC,
	NW_PLUGIN_ERROR_MAJOR,          /* ABI major differs */
	NW_PLUGIN_ERROR_MINOR,          /* plugin minor newer than the host's */
	NW_PLUGIN_ERROR_SHORT_STRUCT,   /* descriptor or ops smaller than their minimum, or
	                                 * larger than this host's */
	NW_PLUGIN_ERROR_KIND,           /* another kind than the one configured */
	NW_PLUGIN_ERROR_NAME,           /* descriptor name differs from the configured one */
	NW_PLUGIN_ERROR_NULL_SLOT,      /* a required ops slot is NULL */
	NW_PLUGIN_ERROR_CREATE,         /* the plugin's create() failed */
} nw_plugin_error;

/* A loaded plugin (the type). */
struct nw_plugin {
	char *path;                  /* resolved file */
	void *handle;                /* dlopen handle, kept open */
	narwhal_plugin_kind kind;
	const struct narwhal_plugin_descriptor *desc;
	/* The kind's ops, copied into a host-sized struct: slots the plugin's
	 * struct_size does not cover read as NULL. Use the member that matches
	 * kind. */
	union {
		struct narwhal_admission_ops admission;
		struct narwhal_placement_ops placement;
		struct narwhal_controller_ops controller;
		struct narwhal_dialect_ops dialect;
	} ops;
};

/* A configured instance of a plugin. */
struct nw_plugin_instance {
	struct nw_plugin *plugin; /* borrowed */
	void *ctx;                /* what create() returned */
};

/* Kind name used in file names and messages: "admission", ... */
const char *nw_plugin_kind_name(narwhal_plugin_kind kind);

/* The directories a plugin is looked for in, in order: dir (plugins.dir;
 * may be NULL), $NARWHAL_PLUGIN_DIR, the installed plugin directory; each
 * once, unset ones left out (NULL-terminated, g_strfreev). */
char **nw_plugin_search_path(const char *dir);

/* The file for a plugin: path when given, else <kind>-<name>.so in the
 * first directory of nw_plugin_search_path(dir) that holds it, or in its
 * first directory when none does (the load then says where it looked). */
char *nw_plugin_resolve(narwhal_plugin_kind kind, const char *name, const char *path,
                        const char *dir);

/* The other files for the name along the same search path, after the one
 * nw_plugin_resolve finds: the plugins that one hides (--show-plugins).
 * None when path is given. NULL-terminated, g_strfreev. */
char **nw_plugin_hidden(narwhal_plugin_kind kind, const char *name, const char *path,
                        const char *dir);

/* Load and check. name may be NULL to skip the name check (explicit path).
 * A file, or its directory, that users other than its owner can write, or
 * that another user owns, is refused when running as root and logged as a
 * warning otherwise (docs/plugins.md, "Where plugins live"). */
struct nw_plugin *nw_plugin_load(narwhal_plugin_kind kind, const char *name,
                                 const char *file, GError **error);
void nw_plugin_free(struct nw_plugin *plugin);

/* Create an instance (config borrowed, may be NULL). */
struct nw_plugin_instance *nw_plugin_instance_new(struct nw_plugin *plugin,
                                                  const struct narwhal_host *host,
                                                  const json_t *config, GError **error);
void nw_plugin_instance_free(struct nw_plugin_instance *inst);

#endif /* NW_PLUGIN_LOADER_H */
