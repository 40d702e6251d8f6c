#include "build-config.h"

#include <stdbool.h>
#include <string.h>

#include <glib.h>

#include "core/json-write.h"
#include "core/string-pool.h"
#include "serve/assemble.h"

/* How a field takes a new value (besides replacing it). */
#define CAT_STRINGS 1u
#define CAT_ARRAYS  2u

/*
 * One merged key; a "bag" is a GPtrArray of them in first-seen order (few
 * per object, so a linear search does). At most one of str and val is
 * set; neither means the key was only ever null. A val array is copied
 * before we first extend it (owned): it may still be the chunk's own. The
 * key lives in the same block (one allocation a field, not two).
 */
struct field {
	GString *str;
	json_t *val;
	bool owned;
	char key[];
};

struct call {
	json_int_t index;
	char *id;
	char *type;
	char *name;
	GString *args;
};

/* Only what the route and the chunks need is allocated: text or msg by
 * the route, logprobs and calls when a chunk has them. */
struct choice {
	json_int_t index;
	GString *text;          /* completions */
	GPtrArray *msg;         /* chat: the deltas */
	GTree *calls;           /* chat: struct call by index */
	GPtrArray *logprobs;    /* NULL: no chunk had a logprobs object */
	GPtrArray *rest;        /* finish_reason, stop_reason, ... */
};

struct nw_assembly {
	narwhal_route route;
	unsigned chunks;
	GPtrArray *top;
	json_t *usage;
	GTree *choices;         /* struct choice by index */
};

static void
field_drop(struct field *f)
{
	nw_string_give(f->str);
	f->str = NULL;
	json_decref(f->val);
	f->val = NULL;
	f->owned = false;
}

static void
field_free(void *p)
{
	struct field *f = p;

	field_drop(f);
	g_free(f);
}

static GPtrArray *
bag_new(void)
{
	return g_ptr_array_new_with_free_func(field_free);
}

static struct field *
bag_find(const GPtrArray *b, const char *key)
{
	for (guint i = 0; i < b->len; i++) {
		struct field *f = g_ptr_array_index(b, i);

		if (strcmp(f->key, key) == 0)
			return f;
	}
	return NULL;
}

static void
bag_merge(GPtrArray *b, const char *key, json_t *v, unsigned how)
{
	struct field *f = bag_find(b, key);

	if (!f) {
		size_t size = strlen(key) + 1;

		f = g_malloc0(sizeof *f + size);
		memcpy(f->key, key, size);
		g_ptr_array_add(b, f);
	}
	if (json_is_null(v))
		return;
	if ((how & CAT_STRINGS) && json_is_string(v)) {
		if (!f->str) {
			field_drop(f);
			f->str = nw_string_take();
		}
		g_string_append_len(f->str, json_string_value(v), json_string_length(v));
		return;
	}
	if ((how & CAT_ARRAYS) && json_is_array(v) && json_is_array(f->val)) {
		if (!f->owned) {
			json_t *own = json_copy(f->val);

			json_decref(f->val);
			f->val = own;
			f->owned = true;
		}
		json_array_extend(f->val, v);
		return;
	}
	field_drop(f);
	f->val = json_incref(v);
}

/* Merge every key of obj except those in skip (NULL-terminated). */
static void
bag_merge_object(GPtrArray *b, json_t *obj, const char *const *skip, unsigned how)
{
	const char *key;
	json_t *v;

	json_object_foreach(obj, key, v) {
		if (!skip || !g_strv_contains(skip, key))
			bag_merge(b, key, v, how);
	}
}

static gint
index_cmp(gconstpointer a, gconstpointer b, gpointer unused)
{
	json_int_t x = *(const json_int_t *)a, y = *(const json_int_t *)b;

	return x < y ? -1 : x > y;
}

static void
call_free(void *p)
{
	struct call *c = p;

	g_free(c->id);
	g_free(c->type);
	g_free(c->name);
	g_string_free(c->args, TRUE);
	g_free(c);
}

static void
choice_free(void *p)
{
	struct choice *c = p;

	nw_string_give(c->text);
	if (c->msg)
		g_ptr_array_free(c->msg, TRUE);
	if (c->calls)
		g_tree_destroy(c->calls);
	if (c->logprobs)
		g_ptr_array_free(c->logprobs, TRUE);
	g_ptr_array_free(c->rest, TRUE);
	g_free(c);
}

struct nw_assembly *
nw_assembly_new(narwhal_route route)
{
	struct nw_assembly *a = g_new0(struct nw_assembly, 1);

	a->route = route;
	a->top = bag_new();
	a->choices = g_tree_new_full(index_cmp, NULL, NULL, choice_free);
	return a;
}

void
nw_assembly_free(struct nw_assembly *a)
{
	if (!a)
		return;
	g_ptr_array_free(a->top, TRUE);
	json_decref(a->usage);
	g_tree_destroy(a->choices);
	g_free(a);
}

unsigned
nw_assembly_chunks(const struct nw_assembly *a)
{
	return a->chunks;
}

static bool
valid_index(json_t *obj, json_int_t *index)
{
	json_t *v = json_object_get(obj, "index");

	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return false;
	*index = json_integer_value(v);
	return true;
}

/* Replace *slot by v when v is a non-empty string. */
static void
set_nonempty(char **slot, json_t *v)
{
	if (json_is_string(v) && json_string_length(v) > 0) {
		g_free(*slot);
		*slot = g_strdup(json_string_value(v));
	}
}

static void
merge_calls(struct choice *c, json_t *calls)
{
	size_t pos;
	json_t *el;

	if (!c->calls)
		c->calls = g_tree_new_full(index_cmp, NULL, NULL, call_free);
	json_array_foreach(calls, pos, el) {
		json_int_t index = (json_int_t)pos;
		json_t *fn = json_object_get(el, "function");
		struct call *call;

		if (!json_is_object(el))
			continue;
		valid_index(el, &index);
		call = g_tree_lookup(c->calls, &index);
		if (!call) {
			call = g_new0(struct call, 1);
			call->index = index;
			call->args = g_string_new(NULL);
			g_tree_insert(c->calls, &call->index, call);
		}
		set_nonempty(&call->id, json_object_get(el, "id"));
		set_nonempty(&call->type, json_object_get(el, "type"));
		if (json_is_object(fn)) {
			json_t *args = json_object_get(fn, "arguments");

			set_nonempty(&call->name, json_object_get(fn, "name"));
			if (json_is_string(args))
				g_string_append_len(call->args, json_string_value(args),
				                    json_string_length(args));
		}
	}
}

static void
merge_choice(struct nw_assembly *a, json_t *ch, json_int_t index)
{
	static const char *const skip_compl[] = { "index", "text", "logprobs", NULL };
	static const char *const skip_chat[] = { "index", "delta", "message", "logprobs", NULL };
	static const char *const skip_delta[] = { "role", "tool_calls", NULL };
	struct choice *c = g_tree_lookup(a->choices, &index);
	bool chat = a->route == NARWHAL_ROUTE_CHAT_COMPLETIONS;
	json_t *v;

	if (!c) {
		c = g_new0(struct choice, 1);
		c->index = index;
		if (chat)
			c->msg = bag_new();
		else
			c->text = nw_string_take();
		c->rest = bag_new();
		g_tree_insert(a->choices, &c->index, c);
	}
	v = json_object_get(ch, "logprobs");
	if (json_is_object(v)) {
		if (!c->logprobs)
			c->logprobs = bag_new();
		bag_merge_object(c->logprobs, v, NULL, CAT_ARRAYS);
	}
	bag_merge_object(c->rest, ch, chat ? skip_chat : skip_compl, CAT_ARRAYS);
	if (!chat) {
		v = json_object_get(ch, "text");
		if (json_is_string(v))
			g_string_append_len(c->text, json_string_value(v), json_string_length(v));
		return;
	}
	v = json_object_get(ch, "delta");
	/* A request that cannot stream (vLLM's beam search) comes as one
	 * event whose choice holds the whole "message". */
	if (!json_is_object(v))
		v = json_object_get(ch, "message");
	if (!json_is_object(v))
		return;
	/* role is a value, not a piece of text: it must not concatenate */
	if (json_object_get(v, "role"))
		bag_merge(c->msg, "role", json_object_get(v, "role"), 0);
	bag_merge_object(c->msg, v, skip_delta, CAT_STRINGS);
	v = json_object_get(v, "tool_calls");
	if (json_is_array(v))
		merge_calls(c, v);
}

int
nw_assembly_add(struct nw_assembly *a, const json_t *chunk)
{
	static const char *const skip_top[] = { "object", "choices", "usage", NULL };
	/* jansson's getters and iterators take non-const; nothing is changed */
	json_t *obj = (json_t *)chunk;
	json_t *choices, *ch, *usage;
	json_int_t index;
	size_t i;

	/* check everything first, so that a refused chunk changes nothing */
	if (!json_is_object(obj))
		return -1;
	choices = json_object_get(obj, "choices");
	if (choices && !json_is_array(choices))
		return -1;
	json_array_foreach(choices, i, ch) {
		if (!json_is_object(ch) || !valid_index(ch, &index))
			return -1;
	}

	bag_merge_object(a->top, obj, skip_top, 0);
	usage = json_object_get(obj, "usage");
	if (json_is_object(usage)) {
		json_decref(a->usage);
		a->usage = json_incref(usage);
	}
	json_array_foreach(choices, i, ch) {
		valid_index(ch, &index);
		merge_choice(a, ch, index);
	}
	a->chunks++;
	return 0;
}

int
nw_assembly_add_text(struct nw_assembly *a, json_int_t index, const char *text, size_t len)
{
	struct choice *c = g_tree_lookup(a->choices, &index);
	struct field *f;

	if (!c)
		return -1;
	if (a->route != NARWHAL_ROUTE_CHAT_COMPLETIONS) {
		g_string_append_len(c->text, text, (gssize)len);
		a->chunks++;
		return 0;
	}
	f = bag_find(c->msg, "content");
	if (!f || f->val)
		return -1; /* content that is not text: only a whole merge knows */
	if (!f->str)
		f->str = nw_string_take();
	g_string_append_len(f->str, text, (gssize)len);
	a->chunks++;
	return 0;
}

int
nw_assembly_set_reason(struct nw_assembly *a, json_int_t index, const char *key, json_t *v)
{
	struct choice *c = g_tree_lookup(a->choices, &index);

	if (c != NULL)
		bag_merge(c->rest, key, v, CAT_ARRAYS);
	json_decref(v);
	return c != NULL ? 0 : -1;
}

/*
 * The body is written as text, field by field, in the order the keys are
 * listed in assemble.h: building a tree of it to encode cost more than
 * the rest of the assembly (bench/router/README.md, issue 15's profile).
 * Values and strings are written by core/json-write.h, as jansson
 * encodes them with JSON_COMPACT, so the text is what encoding the same
 * tree gives.
 */

static void
write_value(GString *out, const json_t *v)
{
	nw_json_write(v, out, JSON_COMPACT | JSON_ENCODE_ANY);
}

/* ,"key": (the comma unless the object was just opened) */
static void
write_key(GString *out, const char *key)
{
	if (out->str[out->len - 1] != '{')
		g_string_append_c(out, ',');
	nw_json_write_string(out, key, strlen(key));
	g_string_append_c(out, ':');
}

static void
write_field(GString *out, const struct field *f)
{
	if (f->str)
		nw_json_write_string(out, f->str->str, f->str->len);
	else if (f->val)
		write_value(out, f->val);
	else
		g_string_append(out, "null");
}

/* The value of key, or dflt (JSON text) when missing or null. */
static void
write_bag_value(GString *out, const GPtrArray *b, const char *key, const char *dflt)
{
	const struct field *f = bag_find(b, key);

	if (f && (f->str || f->val))
		write_field(out, f);
	else
		g_string_append(out, dflt);
}

/* The fields whose key is not in written (NULL-ended), in first-seen order. */
static void
write_bag_rest(GString *out, const GPtrArray *b, const char *const *written)
{
	for (guint i = 0; i < b->len; i++) {
		const struct field *f = g_ptr_array_index(b, i);

		if (!g_strv_contains(written, f->key)) {
			write_key(out, f->key);
			write_field(out, f);
		}
	}
}

static void
write_call(GString *out, const struct call *c)
{
	const char *type;

	g_string_append(out, "{\"id\":");
	if (c->id)
		nw_json_write_string(out, c->id, strlen(c->id));
	else
		g_string_append(out, "null");
	g_string_append(out, ",\"type\":");
	type = c->type ? c->type : "function";
	nw_json_write_string(out, type, strlen(type));
	g_string_append(out, ",\"function\":{\"name\":");
	if (c->name)
		nw_json_write_string(out, c->name, strlen(c->name));
	else
		g_string_append(out, "null");
	g_string_append(out, ",\"arguments\":");
	nw_json_write_string(out, c->args->str, c->args->len);
	g_string_append(out, "}}");
}

static void
write_message(GString *out, const struct choice *c)
{
	static const char *const written[] = { "role", "content", NULL };
	const struct field *content = bag_find(c->msg, "content");
	bool calls = c->calls && g_tree_nnodes(c->calls) > 0;

	g_string_append(out, "{\"role\":");
	write_bag_value(out, c->msg, "role", "\"assistant\"");
	g_string_append(out, ",\"content\":");
	/* Empty content beside tool calls is null (assemble.h). */
	if (calls && content && content->str && content->str->len == 0)
		g_string_append(out, "null");
	else
		write_bag_value(out, c->msg, "content", "null");
	write_bag_rest(out, c->msg, written);
	if (calls) {
		g_string_append(out, ",\"tool_calls\":[");
		for (GTreeNode *n = g_tree_node_first(c->calls); n; n = g_tree_node_next(n)) {
			if (out->str[out->len - 1] != '[')
				g_string_append_c(out, ',');
			write_call(out, g_tree_node_value(n));
		}
		g_string_append_c(out, ']');
	}
	g_string_append_c(out, '}');
}

static void
write_choice(GString *out, const struct choice *c, narwhal_route route)
{
	static const char *const written_cmpl[] = { "index", "text", "logprobs", "finish_reason",
		                                    NULL };
	static const char *const written_chat[] = { "index", "message", "logprobs",
		                                    "finish_reason", NULL };
	static const char *const none[] = { NULL };
	bool chat = route == NARWHAL_ROUTE_CHAT_COMPLETIONS;

	g_string_append(out, "{\"index\":");
	nw_json_write_integer(out, c->index);
	if (chat) {
		g_string_append(out, ",\"message\":");
		write_message(out, c);
	} else {
		g_string_append(out, ",\"text\":");
		nw_json_write_string(out, c->text->str, c->text->len);
	}
	g_string_append(out, ",\"logprobs\":");
	if (c->logprobs) {
		g_string_append_c(out, '{');
		write_bag_rest(out, c->logprobs, none);
		g_string_append_c(out, '}');
	} else {
		g_string_append(out, "null");
	}
	g_string_append(out, ",\"finish_reason\":");
	write_bag_value(out, c->rest, "finish_reason", "null");
	write_bag_rest(out, c->rest, chat ? written_chat : written_cmpl);
	g_string_append_c(out, '}');
}

void
nw_assembly_write(const struct nw_assembly *a, GString *out)
{
	static const char *const written[] = { "id", "object", NULL };

	g_string_append(out, "{\"id\":");
	write_bag_value(out, a->top, "id", "null");
	g_string_append(out, a->route == NARWHAL_ROUTE_CHAT_COMPLETIONS ?
	                ",\"object\":\"chat.completion\"" : ",\"object\":\"text_completion\"");
	write_bag_rest(out, a->top, written);
	g_string_append(out, ",\"choices\":[");
	for (GTreeNode *n = g_tree_node_first(a->choices); n; n = g_tree_node_next(n)) {
		if (out->str[out->len - 1] != '[')
			g_string_append_c(out, ',');
		write_choice(out, g_tree_node_value(n), a->route);
	}
	g_string_append_c(out, ']');
	if (a->usage) {
		g_string_append(out, ",\"usage\":");
		write_value(out, a->usage);
	}
	g_string_append_c(out, '}');
}

const json_t *
nw_assembly_usage(const struct nw_assembly *a)
{
	return a->usage;
}
