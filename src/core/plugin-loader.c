#include "build-config.h"

#include "core/plugin-loader.h"

#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"

#ifndef NW_PLUGINDIR
#error "NW_PLUGINDIR must name the installed plugin directory (set by Makefile.am)"
#endif

#define REBUILD_HINT \
	"rebuild the plugin against Narwhal's installed headers (pkg-config narwhal-plugin)"

G_DEFINE_QUARK(narwhal-plugin-error-quark, nw_plugin_error)

/* The byte just past a struct member: a struct is "long enough" for a member
 * when its declared size reaches this. */
#define END_OF(type, member) (offsetof(type, member) + sizeof(((type *)0)->member))

/* The 1.0 descriptor ends with ops; anything shorter cannot be trusted. */
#define DESCRIPTOR_MIN_SIZE END_OF(struct narwhal_plugin_descriptor, ops)

struct slot {
	const char *name;
	size_t offset;
};

#define SLOT(type, member) { #member, offsetof(type, member) }

static const struct slot admission_required[] = {
	SLOT(struct narwhal_admission_ops, create),
	SLOT(struct narwhal_admission_ops, destroy),
	SLOT(struct narwhal_admission_ops, decide),
};

static const struct slot placement_required[] = {
	SLOT(struct narwhal_placement_ops, create),
	SLOT(struct narwhal_placement_ops, destroy),
	SLOT(struct narwhal_placement_ops, place),
};

static const struct slot controller_required[] = {
	SLOT(struct narwhal_controller_ops, create),
	SLOT(struct narwhal_controller_ops, destroy),
	SLOT(struct narwhal_controller_ops, propose),
};

/* Optional dialect slots are optional together: tokenise sizing needs both
 * halves, model discovery and engine metrics too, and a handoff needs all three of its slots
 * (whether an engine uses them is its capabilities' business, checked when
 * the daemon starts). */
static const struct slot dialect_required[] = {
	SLOT(struct narwhal_dialect_ops, create),
	SLOT(struct narwhal_dialect_ops, destroy),
	SLOT(struct narwhal_dialect_ops, capabilities),
	SLOT(struct narwhal_dialect_ops, build_aggregate),
	SLOT(struct narwhal_dialect_ops, build_health),
	SLOT(struct narwhal_dialect_ops, parse_sse),
	SLOT(struct narwhal_dialect_ops, parse_error),
};

#define MAX_GROUP 3

/* Slots that are each optional but only work together: a table has all of
 * a group or none. */
struct slot_group {
	struct slot slots[MAX_GROUP];
	size_t n;
};

static const struct slot_group dialect_groups[] = {
	{ { SLOT(struct narwhal_dialect_ops, build_tokenize),
	    SLOT(struct narwhal_dialect_ops, parse_tokenize) }, 2 },
	{ { SLOT(struct narwhal_dialect_ops, build_prefill),
	    SLOT(struct narwhal_dialect_ops, build_decode),
	    SLOT(struct narwhal_dialect_ops, parse_prefill) }, 3 },
	{ { SLOT(struct narwhal_dialect_ops, build_models),
	    SLOT(struct narwhal_dialect_ops, parse_models) }, 2 },
	{ { SLOT(struct narwhal_dialect_ops, build_metrics),
	    SLOT(struct narwhal_dialect_ops, parse_metrics) }, 2 },
};

struct kind_info {
	const char *name;
	const char *ops_type; /* for messages */
	size_t ops_size;      /* the host's sizeof */
	size_t ops_min;       /* end of the last required slot */
	const struct slot *required;
	size_t n_required;
	const struct slot_group *groups;
	size_t n_groups;
};

/* Indexed by narwhal_plugin_kind. */
static const struct kind_info kinds[] = {
	[NARWHAL_KIND_DIALECT] = {
		"dialect", "struct narwhal_dialect_ops",
		sizeof(struct narwhal_dialect_ops),
		END_OF(struct narwhal_dialect_ops, parse_error),
		dialect_required, G_N_ELEMENTS(dialect_required),
		dialect_groups, G_N_ELEMENTS(dialect_groups),
	},
	[NARWHAL_KIND_ADMISSION] = {
		"admission", "struct narwhal_admission_ops",
		sizeof(struct narwhal_admission_ops),
		END_OF(struct narwhal_admission_ops, decide),
		admission_required, G_N_ELEMENTS(admission_required),
	},
	[NARWHAL_KIND_PLACEMENT] = {
		"placement", "struct narwhal_placement_ops",
		sizeof(struct narwhal_placement_ops),
		END_OF(struct narwhal_placement_ops, place),
		placement_required, G_N_ELEMENTS(placement_required),
	},
	[NARWHAL_KIND_CONTROLLER] = {
		"controller", "struct narwhal_controller_ops",
		sizeof(struct narwhal_controller_ops),
		END_OF(struct narwhal_controller_ops, propose),
		controller_required, G_N_ELEMENTS(controller_required),
	},
};

/* The union in struct nw_plugin must hold every kind's ops. */
G_STATIC_ASSERT(sizeof(((struct nw_plugin *)0)->ops) >= sizeof(struct narwhal_dialect_ops));
G_STATIC_ASSERT(sizeof(((struct nw_plugin *)0)->ops) >= sizeof(struct narwhal_admission_ops));
G_STATIC_ASSERT(sizeof(((struct nw_plugin *)0)->ops) >= sizeof(struct narwhal_placement_ops));
G_STATIC_ASSERT(sizeof(((struct nw_plugin *)0)->ops) >= sizeof(struct narwhal_controller_ops));

static const struct kind_info *
kind_info(uint32_t kind)
{
	if (kind >= G_N_ELEMENTS(kinds) || kinds[kind].name == NULL)
		return NULL;
	return &kinds[kind];
}

const char *
nw_plugin_kind_name(narwhal_plugin_kind kind)
{
	const struct kind_info *k = kind_info((uint32_t)kind);

	return k ? k->name : NULL;
}

/* Whether two directory names are the same, but for trailing slashes. */
static bool
same_dir(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);

	while (la > 1 && a[la - 1] == '/')
		la--;
	while (lb > 1 && b[lb - 1] == '/')
		lb--;
	return la == lb && strncmp(a, b, la) == 0;
}

char **
nw_plugin_search_path(const char *dir)
{
	const char *candidates[] = { dir, g_getenv("NARWHAL_PLUGIN_DIR"), NW_PLUGINDIR };
	GPtrArray *dirs = g_ptr_array_new();

	for (size_t i = 0; i < G_N_ELEMENTS(candidates); i++) {
		const char *d = candidates[i];
		bool seen = false;

		if (d == NULL || *d == '\0')
			continue;
		for (guint k = 0; k < dirs->len && !seen; k++)
			seen = same_dir(g_ptr_array_index(dirs, k), d);
		if (!seen)
			g_ptr_array_add(dirs, g_strdup(d));
	}
	g_ptr_array_add(dirs, NULL);
	return (char **)g_ptr_array_free(dirs, FALSE);
}

char *
nw_plugin_resolve(narwhal_plugin_kind kind, const char *name, const char *path,
                  const char *dir)
{
	const char *kind_name = nw_plugin_kind_name(kind);
	g_autofree char *base = NULL;
	g_auto(GStrv) dirs = NULL;

	if (path != NULL && *path != '\0')
		return g_strdup(path);
	g_return_val_if_fail(kind_name != NULL, NULL);
	g_return_val_if_fail(name != NULL && *name != '\0', NULL);

	/* The first directory that holds the file wins, so a drop-in
	 * directory adds plugins without hiding the installed ones
	 * (docs/plugins.md, "Where plugins live"). */
	base = g_strdup_printf("%s-%s.so", kind_name, name);
	dirs = nw_plugin_search_path(dir);
	for (char **d = dirs; *d != NULL; d++) {
		char *file = g_build_filename(*d, base, NULL);

		if (g_file_test(file, G_FILE_TEST_EXISTS))
			return file;
		g_free(file);
	}
	/* Found nowhere: the first directory's file, whose not-found message
	 * lists the whole search path. */
	return g_build_filename(dirs[0], base, NULL);
}

char **
nw_plugin_hidden(narwhal_plugin_kind kind, const char *name, const char *path, const char *dir)
{
	g_autofree char *base = NULL;
	g_auto(GStrv) dirs = NULL;
	GPtrArray *hidden = g_ptr_array_new();
	struct stat loaded, st;
	bool found = false;

	if ((path == NULL || *path == '\0') && nw_plugin_kind_name(kind) != NULL && name != NULL) {
		base = g_strdup_printf("%s-%s.so", nw_plugin_kind_name(kind), name);
		dirs = nw_plugin_search_path(dir);
		for (char **d = dirs; *d != NULL; d++) {
			char *file = g_build_filename(*d, base, NULL);

			if (stat(file, &st) != 0) {
				g_free(file);
			} else if (!found) {
				found = true; /* the one that is loaded */
				loaded = st;
				g_free(file);
			} else if (st.st_dev == loaded.st_dev && st.st_ino == loaded.st_ino) {
				g_free(file); /* the same file by another name hides nothing */
			} else {
				g_ptr_array_add(hidden, file);
			}
		}
	}
	g_ptr_array_add(hidden, NULL);
	return (char **)g_ptr_array_free(hidden, FALSE);
}

/* Kind as text for messages, including values no host kind has. */
static char *
describe_kind(uint32_t kind)
{
	const struct kind_info *k = kind_info(kind);

	return k ? g_strdup(k->name) : g_strdup_printf("unknown kind %" PRIu32, kind);
}

/* How the configuration can point at a file directly, for hints
 * (transfer full); name is the dialect's, when known. */
static char *
path_hint(narwhal_plugin_kind kind, const char *name)
{
	switch (kind) {
	case NARWHAL_KIND_ADMISSION: return g_strdup("plugins.admission.path");
	case NARWHAL_KIND_PLACEMENT: return g_strdup("plugins.placement.path");
	case NARWHAL_KIND_CONTROLLER: return g_strdup("plugins.controller.path");
	case NARWHAL_KIND_DIALECT:
		return g_strdup_printf("plugins.dialects.%s.path", name ? name : "<name>");
	}
	return NULL;
}

static gint
compare_names(gconstpointer a, gconstpointer b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names of the plugins of this kind a directory holds (files
 * "<kind>-<name>.so"), comma-separated, for a not-found message; "none"
 * when it holds none, and why when it cannot be read: a directory named
 * wrong is then plain to see (transfer full). */
static char *
plugins_in(const char *dir, narwhal_plugin_kind kind)
{
	g_autofree char *prefix = g_strdup_printf("%s-", nw_plugin_kind_name(kind));
	g_autoptr(GPtrArray) names = g_ptr_array_new_with_free_func(g_free);
	g_autoptr(GError) error = NULL;
	GDir *d = g_dir_open(dir, 0, &error);
	const char *entry;

	if (g_error_matches(error, G_FILE_ERROR, G_FILE_ERROR_NOENT))
		return g_strdup("no such directory");
	if (d == NULL)
		return g_strdup("not a directory it can read");
	while ((entry = g_dir_read_name(d)) != NULL) {
		if (g_str_has_prefix(entry, prefix) && g_str_has_suffix(entry, ".so") &&
		    strlen(entry) > strlen(prefix) + 3)
			g_ptr_array_add(names, g_strndup(entry + strlen(prefix),
			                                 strlen(entry) - strlen(prefix) - 3));
	}
	g_dir_close(d);
	if (names->len == 0)
		return g_strdup("none");
	g_ptr_array_sort(names, compare_names);
	g_ptr_array_add(names, NULL);
	return g_strjoinv(", ", (char **)names->pdata);
}

/* What each directory of a search path holds of a kind: "open" for one
 * directory, "/a: none; /b: open, predictive" for several (transfer full). */
static char *
plugins_in_path(char **dirs, narwhal_plugin_kind kind)
{
	GString *out = g_string_new(NULL);

	for (char **d = dirs; *d != NULL; d++) {
		g_autofree char *there = plugins_in(*d, kind);

		if (dirs[1] == NULL)
			g_string_append(out, there);
		else
			g_string_append_printf(out, "%s%s: %s", d == dirs ? "" : "; ", *d, there);
	}
	return g_string_free(out, FALSE);
}

static void
refuse_not_found(GError **error, const char *file, narwhal_plugin_kind kind,
                 const char *name)
{
	g_autofree char *dir = g_path_get_dirname(file);
	const char *kind_name = nw_plugin_kind_name(kind);
	g_autofree char *path_key = path_hint(kind, name);
	g_auto(GStrv) dirs = NULL;
	g_autofree char *where = NULL;
	g_autofree char *there = NULL;

	if (name == NULL) {
		/* The configuration named the file itself. */
		g_set_error(error, NARWHAL_PLUGIN_ERROR, NW_PLUGIN_ERROR_NOT_FOUND,
		            "%s: plugin file not found: expected %s %s plugin at this path "
		            "(directory %s), found no such file: correct %s, or remove it "
		            "and set plugins.dir to find the plugin by name",
		            file, strchr("aeiou", kind_name[0]) != NULL ? "an" : "a", kind_name, dir,
		            path_key);
		return;
	}
	/* A name is looked up along the search path, whose first directory
	 * holds file (nw_plugin_resolve). Say what each directory does hold:
	 * a name from the specification that this build does not ship is
	 * then plain to see. */
	dirs = nw_plugin_search_path(dir);
	if (dirs[1] == NULL) {
		where = g_strdup_printf("directory %s", dirs[0]);
	} else {
		g_autofree char *joined = g_strjoinv(", ", dirs);

		where = g_strdup_printf("directories %s (searched in this order)", joined);
	}
	there = plugins_in_path(dirs, kind);
	g_set_error(error, NARWHAL_PLUGIN_ERROR, NW_PLUGIN_ERROR_NOT_FOUND,
	            "%s: plugin file not found: expected %s plugin \"%s\" in %s, found no "
	            "such file (the %s plugins there: %s): choose one of those, install the "
	            "plugin in one of those directories, set plugins.dir to the directory that "
	            "holds it, or give its file with %s",
	            file, kind_name, name, where, kind_name, there, path_key);
}

/* Whether an ops slot (in the host's copy) holds a function. */
static bool
slot_set(const struct nw_plugin *p, const struct slot *s)
{
	void (*fn)(void);

	memcpy(&fn, (const char *)&p->ops + s->offset, sizeof fn);
	return fn != NULL;
}

/* A group of slots that only work together: all set, or none. */
static bool
check_group(const struct nw_plugin *p, const struct slot_group *group,
            const struct kind_info *want, GError **error)
{
	g_autoptr(GString) names = g_string_new(NULL);
	const char *missing = NULL;
	size_t n_set = 0;

	for (size_t i = 0; i < group->n; i++) {
		g_string_append_printf(names, "%s%s", i == 0 ? "" : (i + 1 == group->n ? " and " : ", "),
		                       group->slots[i].name);
		if (slot_set(p, &group->slots[i]))
			n_set++;
		else if (missing == NULL)
			missing = group->slots[i].name;
	}
	if (n_set == 0 || n_set == group->n)
		return true;
	g_set_error(error, NARWHAL_PLUGIN_ERROR, NW_PLUGIN_ERROR_NULL_SLOT,
	            "%s: incomplete %s slot group: %s work together, found %s NULL while "
	            "another is set: implement %s() too, or set none of them in the "
	            "plugin's %s",
	            p->path, want->name, names->str, missing, missing, want->ops_type);
	return false;
}

/* Every check the descriptor and ops must pass before the host calls into
 * the plugin, in a fixed order: the guard fields first, because nothing
 * after them has a known layout until they match. Fills p->ops. */
static bool
check_descriptor(struct nw_plugin *p, const char *name, GError **error)
{
	const struct narwhal_plugin_descriptor *d = p->desc;
	const char *file = p->path;
	const struct kind_info *want = kind_info(p->kind);
	uint32_t ops_size;

	if (d == NULL) {
		g_set_error(error, NARWHAL_PLUGIN_ERROR, NW_PLUGIN_ERROR_NULL_DESCRIPTOR,
		            "%s: plugin returned no descriptor: expected a descriptor from %s(), "
		            "found NULL: declare the plugin with NARWHAL_<KIND>_PLUGIN, which "
		            "returns a static descriptor",
		            file, NARWHAL_PLUGIN_ENTRY_SYMBOL);
		return false;
	}
	if (d->magic != NARWHAL_PLUGIN_MAGIC) {
		g_set_error(error, NARWHAL_PLUGIN_ERROR, NW_PLUGIN_ERROR_BAD_MAGIC,
		            "%s: not a Narwhal plugin descriptor: expected magic 0x%08x, "
		            "found 0x%08" PRIx32 ": declare the plugin with "
		            "NARWHAL_<KIND>_PLUGIN from <narwhal/plugin-abi.h>",
		            file, NARWHAL_PLUGIN_MAGIC, d->magic);
		return false;
	}
	/* A different major may lay out every later field differently, so it is
	 * reported on its own. */
	if (d->abi_major != NARWHAL_ABI_MAJOR) {
		g_set_error(error, NARWHAL_PLUGIN_ERROR, NW_PLUGIN_ERROR_MAJOR,
		            "%s: incompatible plugin ABI: host is %d.%d, plugin was built for "
		            "%u.%u: " REBUILD_HINT,
		            file, NARWHAL_ABI_MAJOR, NARWHAL_ABI_MINOR,
		            (unsigned)d->abi_major, (unsigned)d->abi_minor);
		return false;
	}
	if (d->abi_minor > NARWHAL_ABI_MINOR) {
		g_set_error(error, NARWHAL_PLUGIN_ERROR, NW_PLUGIN_ERROR_MINOR,
		            "%s: plugin needs a newer Narwhal: expected ABI %d.%d or older, "
		            "found %u.%u: upgrade Narwhal, or " REBUILD_HINT,
		            file, NARWHAL_ABI_MAJOR, NARWHAL_ABI_MINOR,
		            (unsigned)d->abi_major, (unsigned)d->abi_minor);
		return false;
	}
	if (d->struct_size < DESCRIPTOR_MIN_SIZE) {
		g_set_error(error, NARWHAL_PLUGIN_ERROR, NW_PLUGIN_ERROR_SHORT_STRUCT,
		            "%s: plugin descriptor too short: expected at least %zu bytes "
		            "(ABI %d.0), found %" PRIu32 ": " REBUILD_HINT,
		            file, (size_t)DESCRIPTOR_MIN_SIZE, NARWHAL_ABI_MAJOR,
		            d->struct_size);
		return false;
	}
	/* Larger than this host's struct: no honest plugin is, since its minor
	 * is not newer. The size is wrong, or the header it was built with is
	 * newer than its version says; either way its fields are not where
	 * the host would read them. */
	if (d->struct_size > sizeof(struct narwhal_plugin_descriptor)) {
		g_set_error(error, NARWHAL_PLUGIN_ERROR, NW_PLUGIN_ERROR_SHORT_STRUCT,
		            "%s: plugin descriptor too long: expected at most %zu bytes (ABI "
		            "%u.%u), found %" PRIu32 ": " REBUILD_HINT,
		            file, sizeof(struct narwhal_plugin_descriptor), (unsigned)d->abi_major,
		            (unsigned)d->abi_minor, d->struct_size);
		return false;
	}
	if (d->kind != (uint32_t)p->kind) {
		g_autofree char *found = describe_kind(d->kind);

		if (kind_info(d->kind) != NULL)
			g_set_error(error, NARWHAL_PLUGIN_ERROR, NW_PLUGIN_ERROR_KIND,
			            "%s: wrong kind of plugin: expected %s, found %s: configure a "
			            "plugin of kind %s here; this file can only serve as a %s plugin",
			            file, want->name, found, want->name, found);
		else
			g_set_error(error, NARWHAL_PLUGIN_ERROR, NW_PLUGIN_ERROR_KIND,
			            "%s: wrong kind of plugin: expected %s, found %s: " REBUILD_HINT,
			            file, want->name, found);
		return false;
	}
	/* Messages and logs name the plugin, so a name is always required;
	 * it must match when the configuration chose the plugin by name. */
	if (d->name == NULL || *d->name == '\0') {
		g_set_error(error, NARWHAL_PLUGIN_ERROR, NW_PLUGIN_ERROR_NAME,
		            "%s: plugin has no name: expected %s%s%s, found none: give the "
		            "name as the first argument of NARWHAL_<KIND>_PLUGIN",
		            file, name ? "\"" : "a name", name ? name : "", name ? "\"" : "");
		return false;
	}
	if (name != NULL && strcmp(d->name, name) != 0) {
		g_autofree char *path_key = path_hint(p->kind, name);

		g_set_error(error, NARWHAL_PLUGIN_ERROR, NW_PLUGIN_ERROR_NAME,
		            "%s: plugin name mismatch: expected \"%s\", found \"%s\": configure "
		            "the name \"%s\" and install the file as %s-%s.so, or give its "
		            "file with %s",
		            file, name, d->name, d->name, want->name, d->name, path_key);
		return false;
	}
	if (d->ops == NULL) {
		g_set_error(error, NARWHAL_PLUGIN_ERROR, NW_PLUGIN_ERROR_NULL_SLOT,
		            "%s: plugin %s has no ops: expected a pointer to %s, found NULL: "
		            "pass the ops table as the last argument of NARWHAL_<KIND>_PLUGIN",
		            file, d->name, want->ops_type);
		return false;
	}
	/* Every ops struct starts with its size. */
	memcpy(&ops_size, d->ops, sizeof ops_size);
	if (ops_size < want->ops_min) {
		g_set_error(error, NARWHAL_PLUGIN_ERROR, NW_PLUGIN_ERROR_SHORT_STRUCT,
		            "%s: %s ops too short: expected at least %zu bytes (through %s), "
		            "found %" PRIu32 ": set struct_size to sizeof(%s) and "
		            REBUILD_HINT,
		            file, want->name, want->ops_min,
		            want->required[want->n_required - 1].name, ops_size, want->ops_type);
		return false;
	}

	if (ops_size > want->ops_size) {
		g_set_error(error, NARWHAL_PLUGIN_ERROR, NW_PLUGIN_ERROR_SHORT_STRUCT,
		            "%s: %s ops too long: expected at most %zu bytes (ABI %u.%u), found "
		            "%" PRIu32 ": set struct_size to sizeof(%s) and " REBUILD_HINT,
		            file, want->name, want->ops_size, (unsigned)d->abi_major,
		            (unsigned)d->abi_minor, ops_size, want->ops_type);
		return false;
	}

	/* Copy what the plugin declared; slots it does not cover stay NULL and
	 * the host uses its defaults for them. */
	memset(&p->ops, 0, sizeof p->ops);
	memcpy(&p->ops, d->ops, ops_size);

	for (size_t i = 0; i < want->n_required; i++) {
		const struct slot *s = &want->required[i];

		if (!slot_set(p, s)) {
			g_set_error(error, NARWHAL_PLUGIN_ERROR, NW_PLUGIN_ERROR_NULL_SLOT,
			            "%s: required %s slot is NULL: expected a function in %s, "
			            "found NULL: implement %s() and set it in the plugin's %s",
			            file, want->name, s->name, s->name, want->ops_type);
			return false;
		}
	}
	for (size_t g = 0; g < want->n_groups; g++)
		if (!check_group(p, &want->groups[g], want, error))
			return false;
	return true;
}

/* Who other than the path's owner (and root) could replace it: NULL when
 * nobody. A directory counts too, since its writers can swap the file. */
static const char *
other_writers(const struct stat *st)
{
	if (st->st_uid != 0 && st->st_uid != geteuid())
		return "another user owns it";
	/* In a sticky directory (/tmp) only a file's owner may replace it. */
	if (S_ISDIR(st->st_mode) && (st->st_mode & S_ISVTX))
		return NULL;
	if (st->st_mode & S_IWOTH)
		return "every user can write it";
	if ((st->st_mode & S_IWGRP) && st->st_gid != 0)
		return "its group can write it";
	return NULL;
}

/* Refuse (as root) or warn about a plugin file or directory that others
 * can write: loading it runs their code with our privileges. */
static bool
check_writers(const char *file, GError **error)
{
	g_autofree char *dir = g_path_get_dirname(file);
	const char *paths[] = { file, dir };

	for (size_t i = 0; i < G_N_ELEMENTS(paths); i++) {
		struct stat st;
		const char *who;

		if (stat(paths[i], &st) != 0 || (who = other_writers(&st)) == NULL)
			continue;
		if (geteuid() == 0) {
			g_set_error(error, NARWHAL_PLUGIN_ERROR, NW_PLUGIN_ERROR_UNSAFE,
			            "%s: refusing to load a plugin as root from a %s others can "
			            "write: expected %s owned by root and writable by its owner "
			            "only, found that %s: fix it with chown root and chmod go-w",
			            file, i == 0 ? "file" : "directory", paths[i], who);
			return false;
		}
		nw_log(NARWHAL_LOG_WARNING, "plugin_path_writable", "path", paths[i], "why", who,
		       "plugin", file, NULL);
	}
	return true;
}

/* What a path is, when it is not a regular file. */
static const char *
file_type(mode_t mode)
{
	if (S_ISDIR(mode))
		return "a directory";
	if (S_ISFIFO(mode))
		return "a FIFO";
	if (S_ISSOCK(mode))
		return "a socket";
	if (S_ISCHR(mode))
		return "a character device";
	if (S_ISBLK(mode))
		return "a block device";
	return "something other than a regular file";
}

/* The file must be there and be a regular file: dlopen would wait for
 * ever on a FIFO (until something writes to it), and read a device as if
 * it were a file. */
static bool
check_file(const char *file, narwhal_plugin_kind kind, const char *name, GError **error)
{
	struct stat st;

	if (stat(file, &st) != 0) {
		if (errno == ENOENT || errno == ENOTDIR)
			refuse_not_found(error, file, kind, name);
		else
			g_set_error(error, NARWHAL_PLUGIN_ERROR, NW_PLUGIN_ERROR_OPEN,
			            "%s: cannot load plugin: expected a shared object file, found that "
			            "it cannot be reached: %s: give the path of the plugin's .so file",
			            file, g_strerror(errno));
		return false;
	}
	if (!S_ISREG(st.st_mode)) {
		g_set_error(error, NARWHAL_PLUGIN_ERROR, NW_PLUGIN_ERROR_OPEN,
		            "%s: cannot load plugin: expected a shared object file, found %s: give "
		            "the path of the plugin's .so file",
		            file, file_type(st.st_mode));
		return false;
	}
	return true;
}

struct nw_plugin *
nw_plugin_load(narwhal_plugin_kind kind, const char *name, const char *file, GError **error)
{
	struct nw_plugin *p = NULL;
	g_autofree char *open_name = NULL;
	narwhal_plugin_entry_fn entry;
	void *sym;
	const char *why;

	g_return_val_if_fail(nw_plugin_kind_name(kind) != NULL, NULL);
	g_return_val_if_fail(file != NULL && *file != '\0', NULL);
	g_return_val_if_fail(error == NULL || *error == NULL, NULL);

	if (!check_file(file, kind, name, error) || !check_writers(file, error))
		return NULL;

	p = g_new0(struct nw_plugin, 1);
	p->path = g_strdup(file);
	p->kind = kind;

	/* A name without a slash would send dlopen through the library search
	 * path; the configuration means a file. */
	open_name = strchr(file, '/') ? g_strdup(file) : g_strconcat("./", file, NULL);

	/* Not RTLD_NODELETE yet: a refused plugin must really unload. */
	p->handle = dlopen(open_name, RTLD_NOW | RTLD_LOCAL);
	if (p->handle == NULL) {
		why = dlerror();
		g_set_error(error, NARWHAL_PLUGIN_ERROR, NW_PLUGIN_ERROR_OPEN,
		            "%s: cannot load plugin: expected a loadable shared object, found "
		            "dlopen error: %s: check its dependencies with `ldd %s` and that it "
		            "was built for this system",
		            file, why ? why : "unknown error", file);
		goto out;
	}

	dlerror();
	sym = dlsym(p->handle, NARWHAL_PLUGIN_ENTRY_SYMBOL);
	if (sym == NULL) {
		why = dlerror();
		g_set_error(error, NARWHAL_PLUGIN_ERROR, NW_PLUGIN_ERROR_NO_ENTRY,
		            "%s: not a Narwhal plugin: expected an exported function %s, found "
		            "none (%s): declare the plugin with NARWHAL_<KIND>_PLUGIN and export "
		            "the entry (-export-symbols-regex '^%s$')",
		            file, NARWHAL_PLUGIN_ENTRY_SYMBOL, why ? why : "symbol is NULL",
		            NARWHAL_PLUGIN_ENTRY_SYMBOL);
		goto out;
	}
	/* dlsym returns an object pointer; POSIX guarantees the conversion. */
	memcpy(&entry, &sym, sizeof entry);
	p->desc = entry();

	if (!check_descriptor(p, name, error))
		goto out;

	/* Accepted: keep it mapped for the life of the process, so callbacks
	 * and sanitizer stack traces stay valid even after nw_plugin_free. */
	if (dlopen(open_name, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD | RTLD_NODELETE) == NULL) {
		why = dlerror();
		g_set_error(error, NARWHAL_PLUGIN_ERROR, NW_PLUGIN_ERROR_OPEN,
		            "%s: cannot keep plugin resident: expected dlopen(RTLD_NODELETE) to "
		            "succeed, found: %s: check the file was not replaced while loading",
		            file, why ? why : "unknown error");
		goto out;
	}
	return p;

out:
	if (p->handle != NULL)
		dlclose(p->handle);
	g_free(p->path);
	g_free(p);
	return NULL;
}

void
nw_plugin_free(struct nw_plugin *plugin)
{
	if (plugin == NULL)
		return;
	/* The handle stays open on purpose: see nw_plugin_load. */
	g_free(plugin->path);
	g_free(plugin);
}

/* Every kind has create and destroy, with the same types; the loader has
 * already checked both are set. */
typedef int (*create_fn)(const struct narwhal_host *, const json_t *, void **, char *, size_t);
typedef void (*destroy_fn)(void *);

static create_fn
plugin_create(const struct nw_plugin *p)
{
	switch (p->kind) {
	case NARWHAL_KIND_DIALECT: return p->ops.dialect.create;
	case NARWHAL_KIND_ADMISSION: return p->ops.admission.create;
	case NARWHAL_KIND_PLACEMENT: return p->ops.placement.create;
	case NARWHAL_KIND_CONTROLLER: return p->ops.controller.create;
	}
	return NULL;
}

static destroy_fn
plugin_destroy(const struct nw_plugin *p)
{
	switch (p->kind) {
	case NARWHAL_KIND_DIALECT: return p->ops.dialect.destroy;
	case NARWHAL_KIND_ADMISSION: return p->ops.admission.destroy;
	case NARWHAL_KIND_PLACEMENT: return p->ops.placement.destroy;
	case NARWHAL_KIND_CONTROLLER: return p->ops.controller.destroy;
	}
	return NULL;
}

struct nw_plugin_instance *
nw_plugin_instance_new(struct nw_plugin *plugin, const struct narwhal_host *host,
                       const json_t *config, GError **error)
{
	struct nw_plugin_instance *inst;
	char err[NARWHAL_ERROR_MAX];
	void *ctx = NULL;
	create_fn create;
	int rc;

	g_return_val_if_fail(plugin != NULL, NULL);
	g_return_val_if_fail(host != NULL, NULL);
	g_return_val_if_fail(error == NULL || *error == NULL, NULL);

	create = plugin_create(plugin);
	err[0] = '\0';
	rc = create(host, config, &ctx, err, sizeof err);
	/* The plugin may have filled the buffer without a terminator. */
	err[sizeof err - 1] = '\0';
	if (rc != 0) {
		g_set_error(error, NARWHAL_PLUGIN_ERROR, NW_PLUGIN_ERROR_CREATE,
		            "%s: plugin %s refused its configuration: %s",
		            plugin->path, plugin->desc->name,
		            err[0] != '\0' ? err
		                            : (rc < 0 && rc > INT_MIN ? g_strerror(-rc)
		                                                      : "no reason given"));
		return NULL;
	}

	inst = g_new0(struct nw_plugin_instance, 1);
	inst->plugin = plugin;
	inst->ctx = ctx;
	return inst;
}

void
nw_plugin_instance_free(struct nw_plugin_instance *inst)
{
	if (inst == NULL)
		return;
	plugin_destroy(inst->plugin)(inst->ctx);
	g_free(inst);
}
