/*
 * The configuration field table: one row per field, naming its JSON path,
 * type, place in the struct, default and valid range. The loader, the type
 * and range checks, unknown-key detection and nw_config_to_json all read
 * this table, so adding a field is adding a row (and a struct member).
 */
#ifndef NW_CONFIG_FIELDS_H
#define NW_CONFIG_FIELDS_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "core/config.h"

typedef enum nw_field_type {
	NW_FT_BOOL,
	NW_FT_U32,
	NW_FT_U64,
	NW_FT_DOUBLE,
	NW_FT_STRING,  /* char *, g_free'd */
	NW_FT_ENUM,    /* a C enum (int-sized), named by .names */
	NW_FT_OBJECT,  /* json_t * (owned), any object, passed on verbatim */
	NW_FT_ENGINES, /* fleet.engines: loaded by config.c with nw_engine_table */
} nw_field_type;

enum nw_field_flags {
	NW_FF_MIN = 1u << 0,      /* .min applies */
	NW_FF_MAX = 1u << 1,      /* .max applies */
	NW_FF_MIN_EXCL = 1u << 2, /* value must be above .min, not equal */
	NW_FF_MAX_EXCL = 1u << 3, /* value must be below .max, not equal */
	NW_FF_ZERO_OK = 1u << 4,  /* 0 is valid besides the range ("0 disables") */
	NW_FF_NULLABLE = 1u << 5, /* strings: JSON null is valid and stored as NULL */
	NW_FF_REQUIRED = 1u << 6, /* the key must be present */
};

/* A name for an enum value, or one allowed string of a string field. */
struct nw_enum_name {
	const char *name;
	int value;
};

/* Extra check for a string field. Returns NULL when s is valid, else a
 * newly allocated description of the problem. May set *normalized to a
 * newly allocated value to store instead of s. */
typedef char *(*nw_string_check)(const char *s, char **normalized);

struct nw_field {
	const char *path;    /* dotted JSON path, relative to the table's root */
	nw_field_type type;
	size_t offset;       /* offsetof the member in the table's struct */
	unsigned flags;      /* enum nw_field_flags */
	double min, max;     /* numbers: the range the flags select */
	double def;          /* default of numbers, booleans and enums */
	const char *def_str; /* default of strings (NULL: null) */
	const struct nw_enum_name *names; /* enums, and strings with fixed choices;
	                                   * terminated by a NULL name */
	const char *charset; /* strings: the characters allowed (NULL: any) */
	nw_string_check check; /* strings: extra check (NULL: none) */
	const char *valid;   /* what a valid value is, for messages and docs */
};

/* A table and the struct its offsets point into. */
struct nw_table {
	const struct nw_field *fields;
	size_t n_fields;
};

/* A key that was valid elsewhere or once: refused with a hint. */
struct nw_moved_key {
	const char *path;
	const char *hint;
};

/* Rows for struct nw_config, and for one struct nw_engine_config. */
extern const struct nw_table nw_config_table;
extern const struct nw_table nw_engine_table;
extern const struct nw_moved_key nw_config_moved_keys[];

/* Names of admission modes, log formats and engine roles. */
extern const struct nw_enum_name nw_admission_names[];
extern const struct nw_enum_name nw_role_names[];

/* Characters of plugin names ([a-z0-9-]) and of engine ids. */
#define NW_CHARS_PLUGIN "abcdefghijklmnopqrstuvwxyz0123456789-"
#define NW_CHARS_ID \
	"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-"

const struct nw_field *nw_field_find(const struct nw_table *t, const char *path);

/* True when some field lies below path (path names an object section). */
bool nw_field_is_section(const struct nw_table *t, const char *path);

/* Store the field's default into base (the table's struct). */
void nw_field_set_default(const struct nw_field *f, void *base);

/* Type- and range-check a JSON value and store it into base. On failure
 * stores nothing and returns "problem: what is valid" (caller frees). */
char *nw_field_store(const struct nw_field *f, void *base, const json_t *value);

/* The stored value as JSON (transfer full). */
json_t *nw_field_to_json(const struct nw_field *f, const void *base);

/* Release what the field owns in base. */
void nw_field_free(const struct nw_field *f, void *base);

/* Name of an enum value (NULL when none). */
const char *nw_enum_name_of(const struct nw_enum_name *names, int value);

/* A short description of a JSON value for messages: `integer 5`,
 * `string "yes"`, `an object`. Caller frees. */
char *nw_json_describe(const json_t *v);

/* Text from the file made safe for a one-line message: quotes, backslashes
 * and control characters escaped, cut after max characters (0: never) with
 * "...". Caller frees. */
char *nw_text_escape(const char *s, size_t max);

/* A number as the shortest text that reads back the same. Caller frees. */
char *nw_number_text(double v);

/* The message for a key the table does not know below rel ("" for the
 * root): a moved key's hint, a did-you-mean, or the keys allowed there.
 * Caller frees. */
char *nw_field_unknown_key(const struct nw_table *t, const char *rel, const char *key);

/* Case-insensitive edit distance (adjacent transpositions count as one). */
unsigned nw_edit_distance(const char *a, const char *b);

/* The candidate closest to word, or NULL when none is close enough to be
 * the likely intent. */
const char *nw_closest(const char *word, const char *const *candidates, size_t n);

#endif /* NW_CONFIG_FIELDS_H */
