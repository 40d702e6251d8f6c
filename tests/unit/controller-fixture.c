/*
 * The controller host's test fixture (controller-fixture.h).
 */
#include "build-config.h"

#include "controller-fixture.h"

#include <string.h>

/* --- the scripted plugin --------------------------------------------------- */

static int
scripted_create(const struct narwhal_host *host, const json_t *config, void **instance,
                char *err, size_t err_len)
{
	(void)host, (void)config, (void)instance, (void)err, (void)err_len;
	return -1; /* never made through the loader here */
}

static void
scripted_destroy(void *instance)
{
	(void)instance;
}

static int
scripted_propose(void *instance, const struct narwhal_controller_input *in,
                 struct narwhal_controller_proposal *out)
{
	struct script *s = instance;

	s->calls++;
	s->in = *in;
	s->preset = *out;
	if (s->fill) {
		out->prefill = (uint32_t)((int)in->live_prefill + s->dp);
		out->decode = (uint32_t)((int)in->live_decode - s->dp + s->extra_decode);
		out->reason = s->reason;
		out->worst_slo_ratio = s->worst;
	}
	return s->rc;
}

static const struct narwhal_controller_ops scripted_ops = {
	.struct_size = sizeof(struct narwhal_controller_ops),
	.create = scripted_create,
	.destroy = scripted_destroy,
	.propose = scripted_propose,
};

/* --- the fleet ------------------------------------------------------------- */

/* prefill_s = 0.01 + 1e-4 * L over 10..4096 tokens; interval_s = 0.02 +
 * 1e-6 * T + 0.001 * B over 1..64 requests and 0..100000 KV tokens
 * (tests/unit/test-pricing.c). */
struct nw_engine_profile
profile(void)
{
	struct nw_engine_profile p = { 0 };

	p.kv_capacity_tokens = 100000;
	p.prefill = (struct nw_prefill_profile){ .a_s = 0.01, .b_s = 1e-4, .c_s = 0,
		                                     .min_tokens = 10, .max_tokens = 4096,
		                                     .samples = 10 };
	p.decode = (struct nw_decode_profile){ .d0_s = 0.02, .d1_s = 1e-6, .d2_s = 0.001,
		                                   .min_active = 1, .max_active = 64,
		                                   .min_kv_tokens = 0, .max_kv_tokens = 100000,
		                                   .samples = 10 };
	return p;
}


/* Engines of the roles given ("ppdd": p0, p1, d0, d1), each profiled,
 * live and movable, in their role since time 0; the controller settings
 * given (JSON members, or NULL); slo.ttft_s 2, slo.tpot_s 0.1; a demand
 * ledger from time 0; the clock at T0. */
void
env_init(struct env *e, const char *roles, const char *controller)
{
	GString *engines = g_string_new(NULL);
	g_autofree char *text = NULL;
	GPtrArray *problems = NULL;
	struct nw_demand_windows w;
	uint32_t n = (uint32_t)strlen(roles);

	memset(e, 0, sizeof *e);
	g_assert_cmpuint(n, <=, MAX_ENGINES);
	for (uint32_t i = 0; i < n; i++)
		g_string_append_printf(engines, "%s{\"id\": \"%c%u\", \"url\": \"http://127.0.0.1:%u\", "
		                       "\"role\": \"%s\"}", i ? ", " : "", roles[i], i, i + 1,
		                       roles[i] == 'p' ? "prefill" : "decode");
	text = g_strdup_printf(
		"{\"serving\": {\"admission\": \"open\"}, \"controller\": {\"policy\": \"scripted\"%s%s},"
		" \"slo\": {\"ttft_s\": 2.0, \"tpot_s\": 0.1}, \"fleet\": {\"engines\": [%s]}}",
		controller ? ", " : "", controller ? controller : "", engines->str);
	g_string_free(engines, TRUE);
	e->cfg = nw_config_load_string(text, "test.json", &problems);
	if (e->cfg == NULL) {
		const struct nw_config_error *err = g_ptr_array_index(problems, 0);

		g_error("config: %s: %s", err->path, err->message);
	}
	g_ptr_array_unref(problems);
	e->f = nw_fleet_new(e->cfg, 0);
	for (uint32_t i = 0; i < n; i++) {
		e->prof[i] = profile();
		nw_fleet_set_profile(e->f, i, &e->prof[i]);
	}
	nw_demand_windows_from_config(e->cfg, &w);
	e->demand = nw_demand_new(&w, 0);
	e->c = nw_controller_new(e->cfg);
	e->plugin = (struct nw_controller_plugin){ "scripted", &scripted_ops, &e->script };
	e->now = T0;
}

void
env_clear(struct env *e)
{
	nw_controller_free(e->c);
	nw_demand_free(e->demand);
	nw_fleet_free(e->f);
	nw_config_free(e->cfg);
}

/* The monitor's view of the engines (control/monitor.c, fill_role_engines). */
void
fill_roles(struct env *e)
{
	for (uint32_t i = 0; i < e->f->view.n_engines; i++) {
		const struct narwhal_engine_view *v = &e->f->engines[i];

		e->roles[i] = (struct nw_role_engine){
			.role = v->role,
			.live = (v->flags & NARWHAL_ENGINE_AVAILABLE) != 0,
			.pinned = (v->flags & NARWHAL_ENGINE_PINNED) != 0,
			.movable = !e->unmovable[i],
			.role_since_ns = v->role_since_ns,
			.resident = v->role == D ? v->resident_decode
			                         : v->resident_prefill + v->queued_prefill,
		};
	}
}

/* What the daemon does with the changes: applied ones change the fleet
 * and every applied one is noted. */
void
apply(struct env *e, uint32_t n)
{
	for (uint32_t k = 0; k < n; k++) {
		const struct nw_role_change *c = &e->out[k];
		struct narwhal_engine_view *v = &e->f->engines[c->engine];

		g_assert_cmpuint(v->role, ==, c->from);
		if (!c->applied)
			continue;
		v->role = c->to;
		v->role_since_ns = c->at_ns;
		nw_fleet_changed(e->f);
		nw_controller_note_change(e->c, e->demand, c);
	}
}

struct nw_controller_pass
pass_of(struct env *e)
{
	fill_roles(e);
	return (struct nw_controller_pass){
		.fleet = e->f, .demand = e->demand, .engines = e->roles,
		.n = e->f->view.n_engines, .plugin = &e->plugin, .now_ns = e->now,
	};
}

/* A scheduled evaluation with the plugin proposing dp more prefill
 * engines; the changes applied; returns their count. */
uint32_t
scheduled(struct env *e, int dp, const char *reason)
{
	struct nw_controller_pass p = pass_of(e);
	uint32_t n;

	e->script.fill = true;
	e->script.dp = dp;
	e->script.reason = reason;
	e->script.worst = NAN;
	n = nw_controller_scheduled(e->c, &p, e->out, MAX_ENGINES);
	apply(e, n);
	return n;
}

uint32_t
urgent(struct env *e, int dp, const char *reason)
{
	struct nw_controller_pass p = pass_of(e);
	uint32_t n;

	e->script.fill = true;
	e->script.dp = dp;
	e->script.reason = reason;
	e->script.worst = NAN;
	n = nw_controller_urgent(e->c, &p, e->out, MAX_ENGINES);
	apply(e, n);
	return n;
}

/* A scheduled pass in which the plugin proposes no change. */
void
pass(struct env *e)
{
	g_assert_cmpuint(scheduled(e, 0, "hold"), ==, 0);
}

/* Sized offers of prompt and max_tokens, at times spread over [from, to). */
void
offers(struct env *e, uint32_t count, double from_s, double to_s, uint64_t prompt, uint32_t max)
{
	for (uint32_t k = 0; k < count; k++) {
		struct nw_demand_ticket t = { 0 };

		nw_demand_offer(e->demand, &t, S(from_s + (to_s - from_s) * k / count), prompt, true,
		                max);
		nw_demand_refuse(e->demand, &t, NW_DEMAND_REFUSED_ADMISSION);
	}
}

uint32_t
live_of(const struct env *e, narwhal_role r)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < e->f->view.n_engines; i++)
		n += e->f->engines[i].role == r && (e->f->engines[i].flags & NARWHAL_ENGINE_AVAILABLE);
	return n;
}

/* The controller's document, and its last evaluation's and newest
 * proposal's fields. */
json_t *
doc(struct env *e)
{
	return nw_controller_to_json(e->c, (const char *const *)e->f->ids, 0);
}

void
assert_last(struct env *e, const char *result, const char *refused_by)
{
	json_t *d = doc(e), *last = json_object_get(d, "last");

	g_assert_nonnull(last);
	g_assert_cmpstr(json_string_value(json_object_get(last, "result")), ==, result);
	g_assert_cmpstr(json_string_value(json_object_get(last, "refused_by")), ==, refused_by);
	json_decref(d);
}

size_t
n_proposals(struct env *e)
{
	json_t *d = doc(e);
	size_t n = json_array_size(json_object_get(d, "proposals"));

	json_decref(d);
	return n;
}

const char *
gate(struct env *e)
{
	struct nw_controller_summary s;

	nw_controller_summary(e->c, &s);
	return s.gate;
}
