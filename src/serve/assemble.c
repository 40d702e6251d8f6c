#include "build-config.h"

#include <stdbool.h>
#include <string.h>

#include <glib.h>

#include "serve/assemble.h"

/* How a field takes a new value (besides replacing it). */
#define CAT_STRINGS 1u
#define CAT_ARRAYS  2u

/*
 * One merged key; a "bag" is a GPtrArray of them in first-seen order (few
 * per object, so a linear search does). At most one of str and val is
 * set; neither means the key was only ever null. A val array is copied
 * before we first extend it (owned): it may still be the chunk's own.
 */
struct field {
	char *key;
	GString *str;
	json_t *val;
	bool owned;
};

struct call {
	json_int_t index;
	char *id;
	char *type;
	char *name;
	GString *args;
};

struct choice {
	json_int_t index;
	GString *text;          /* completions */
	GPtrArray *msg;         /* chat: the deltas */
	GTree *calls;           /* chat: struct call by index */
	bool have_logprobs;
	GPtrArray *logprobs;
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
	if (f->str)
		g_string_free(f->str, TRUE);
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
	g_free(f->key);
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
		f = g_new0(struct field, 1);
		f->key = g_strdup(key);
		g_ptr_array_add(b, f);
	}
	if (json_is_null(v))
		return;
	if ((how & CAT_STRINGS) && json_is_string(v)) {
		if (!f->str) {
			field_drop(f);
			f->str = g_string_new(NULL);
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

static json_t *
field_value(const struct field *f)
{
	if (f->str)
		return json_stringn(f->str->str, f->str->len);
	return f->val ? json_deep_copy(f->val) : json_null();
}

/* The value of key, or dflt (a new reference) when missing or null. */
static json_t *
bag_value(const GPtrArray *b, const char *key, json_t *dflt)
{
	const struct field *f = bag_find(b, key);

	if (f && (f->str || f->val)) {
		json_decref(dflt);
		return field_value(f);
	}
	return dflt;
}

/* Add the fields whose key out does not have yet, in first-seen order. */
static void
bag_emit(const GPtrArray *b, json_t *out)
{
	for (guint i = 0; i < b->len; i++) {
		const struct field *f = g_ptr_array_index(b, i);

		if (!json_object_get(out, f->key))
			json_object_set_new(out, f->key, field_value(f));
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

	g_string_free(c->text, TRUE);
	g_ptr_array_free(c->msg, TRUE);
	if (c->calls)
		g_tree_destroy(c->calls);
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
		c->text = g_string_new(NULL);
		c->msg = bag_new();
		c->logprobs = bag_new();
		c->rest = bag_new();
		g_tree_insert(a->choices, &c->index, c);
	}
	v = json_object_get(ch, "logprobs");
	if (json_is_object(v)) {
		c->have_logprobs = true;
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
		f->str = g_string_new(NULL);
	g_string_append_len(f->str, text, (gssize)len);
	a->chunks++;
	return 0;
}

static json_t *
finish_call(const struct call *c)
{
	json_t *fn = json_pack("{s:o, s:s%}",
	                       "name", c->name ? json_string(c->name) : json_null(),
	                       "arguments", c->args->str, c->args->len);

	return json_pack("{s:o, s:s, s:o}", "id", c->id ? json_string(c->id) : json_null(),
	                 "type", c->type ? c->type : "function", "function", fn);
}

static json_t *
finish_message(const struct choice *c)
{
	json_t *msg = json_object();
	json_t *content = bag_value(c->msg, "content", json_null());
	bool calls = c->calls && g_tree_nnodes(c->calls) > 0;

	json_object_set_new(msg, "role", bag_value(c->msg, "role", json_string("assistant")));
	if (calls && json_is_string(content) && json_string_length(content) == 0) {
		json_decref(content);
		content = json_null();
	}
	json_object_set_new(msg, "content", content);
	bag_emit(c->msg, msg);
	if (calls) {
		json_t *list = json_array();

		for (GTreeNode *n = g_tree_node_first(c->calls); n; n = g_tree_node_next(n))
			json_array_append_new(list, finish_call(g_tree_node_value(n)));
		json_object_set_new(msg, "tool_calls", list);
	}
	return msg;
}

static json_t *
finish_choice(const struct choice *c, narwhal_route route)
{
	json_t *out = json_object();
	json_t *lp = c->have_logprobs ? json_object() : json_null();

	json_object_set_new(out, "index", json_integer(c->index));
	if (route == NARWHAL_ROUTE_CHAT_COMPLETIONS)
		json_object_set_new(out, "message", finish_message(c));
	else
		json_object_set_new(out, "text", json_stringn(c->text->str, c->text->len));
	if (c->have_logprobs)
		bag_emit(c->logprobs, lp);
	json_object_set_new(out, "logprobs", lp);
	json_object_set_new(out, "finish_reason", bag_value(c->rest, "finish_reason", json_null()));
	bag_emit(c->rest, out);
	return out;
}

json_t *
nw_assembly_finish(const struct nw_assembly *a)
{
	json_t *body = json_object();
	json_t *list = json_array();

	json_object_set_new(body, "id", bag_value(a->top, "id", json_null()));
	json_object_set_new(body, "object",
	                    json_string(a->route == NARWHAL_ROUTE_CHAT_COMPLETIONS ?
	                                "chat.completion" : "text_completion"));
	bag_emit(a->top, body);
	for (GTreeNode *n = g_tree_node_first(a->choices); n; n = g_tree_node_next(n))
		json_array_append_new(list, finish_choice(g_tree_node_value(n), a->route));
	json_object_set_new(body, "choices", list);
	if (a->usage)
		json_object_set_new(body, "usage", json_deep_copy(a->usage));
	return body;
}
