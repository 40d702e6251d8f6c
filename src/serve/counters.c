#include "build-config.h"

#include "serve/counters.h"

json_t *
nw_serve_counters_json(const struct nw_serve_counters *c)
{
	json_t *o = json_object();

#define NW_SERVE_COUNTER_JSON(name) \
	json_object_set_new(o, #name, json_integer((json_int_t)c->name));
	NW_SERVE_COUNTER_LIST(NW_SERVE_COUNTER_JSON)
#undef NW_SERVE_COUNTER_JSON
	return o;
}
