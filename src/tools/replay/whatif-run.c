/*
 * One what-if run: the world's event loop on the virtual clock, from the
 * monitor's first pass at 0 to the end of the last request, and the run's
 * "what_if" report object.
 */
#include "build-config.h"

#include "tools/replay/whatif-internal.h"

static void
push_arrival(struct wi_world *w)
{
	const struct rp_item *it =
		&g_array_index(w->schedule->items, struct rp_item, w->next_arrival);

	wi_queue_push(&w->queue, wi_ns(it->t), WI_EV_ARRIVAL, NULL, 0);
}

static void
dispatch(struct wi_world *w, const struct wi_event *ev)
{
	switch (ev->kind) {
	case WI_EV_ARRIVAL:
		wi_course_arrive(w, w->next_arrival++);
		if (w->next_arrival < w->schedule->items->len)
			push_arrival(w);
		break;
	case WI_EV_ENGINE:
		wi_engines_on_wake(&w->engines, ev);
		break;
	case WI_EV_TIMER:
	case WI_EV_KICK:
	case WI_EV_ADMITTED:
		wi_course_on_event(w, ev);
		break;
	case WI_EV_PASS:
		wi_control_pass(w);
		break;
	case WI_EV_URGENT:
		wi_control_urgent(w);
		break;
	default:
		break;
	}
}

void
wi_world_run(struct wi_world *w, const struct rp_schedule *sched)
{
	size_t n = sched->items->len;
	struct wi_event ev;

	w->schedule = sched;
	w->results = g_new0(struct rp_result, MAX(n, 1));
	/* The monitor passes once as the daemon starts (nw_monitor_start). */
	wi_queue_push(&w->queue, 0, WI_EV_PASS, NULL, 0);
	if (n > 0)
		push_arrival(w);
	while ((w->live > 0 || w->next_arrival < n) && wi_queue_pop(&w->queue, &ev)) {
		w->events++;
		dispatch(w, &ev);
	}
	w->end_ns = w->queue.now_ns;
	/* What is left refers to ended requests: drop their references. */
	while (wi_queue_pop(&w->queue, &ev)) {
		if (ev.kind == WI_EV_TIMER || ev.kind == WI_EV_KICK || ev.kind == WI_EV_ADMITTED)
			wi_course_on_event(w, &ev);
	}
}

static json_t *
demand_json(const struct nw_demand *d)
{
	const struct nw_demand_totals *t = nw_demand_totals(d);
	json_t *refused = json_object();

	for (int k = 0; k < NW_DEMAND_REFUSALS; k++)
		json_object_set_new(refused, nw_demand_refusal_names[k],
		                    json_integer((json_int_t)t->refused[k]));
	return json_pack("{s:I, s:I, s:I, s:I, s:o, s:I, s:I}",
	                 "offers_sized", (json_int_t)t->offers_sized,
	                 "offers_unsized", (json_int_t)t->offers_unsized,
	                 "queued", (json_int_t)t->queued, "admitted", (json_int_t)t->admitted,
	                 "refused", refused, "completed_ok", (json_int_t)t->completed_ok,
	                 "completed_failed", (json_int_t)t->completed_failed);
}

bool
wi_run(const struct wi_setup *s, const struct rp_schedule *sched, const struct wi_run_opts *o,
       struct rp_run *out, json_t **what_if, GError **error)
{
	int64_t started = g_get_monotonic_time(); /* the wall time it took: a report figure */
	struct wi_world *w = wi_world_new(s, o, error);
	double wall;
	json_t *doc;

	if (w == NULL)
		return false;
	wi_world_run(w, sched);
	wall = (double)(g_get_monotonic_time() - started) / 1e6;
	out->results = g_steal_pointer(&w->results);
	out->n = sched->items->len;
	out->interrupted = false;
	out->wall = wall;
	doc = wi_control_json(w->control, w);
	json_object_update_missing_new(doc, json_pack(
		"{s:f, s:f, s:I, s:I, s:I, s:I, s:o}",
		"virtual_s", wi_s(w->end_ns), "wall_s", wall, "engines", (json_int_t)w->engines.n,
		"events", (json_int_t)w->events, "engine_steps", (json_int_t)w->engines.steps,
		"aggregate_legs", (json_int_t)w->aggregate_legs,
		"demand", demand_json(w->demand)));
	*what_if = doc;
	wi_world_free(w);
	return true;
}

char *
wi_run_summary_line(const json_t *what_if)
{
	double v = json_real_value(json_object_get(what_if, "virtual_s"));
	double wall = json_real_value(json_object_get(what_if, "wall_s"));
	const json_t *from = json_object_get(what_if, "initial_split");
	const json_t *to = json_object_get(what_if, "final_split");

	return g_strdup_printf(
		"  what-if: %.1f s of virtual time in %.2f s of wall time (x%.0f), %" JSON_INTEGER_FORMAT
		" engines, %" JSON_INTEGER_FORMAT " events; split %" JSON_INTEGER_FORMAT "P/%"
		JSON_INTEGER_FORMAT "D -> %" JSON_INTEGER_FORMAT "P/%" JSON_INTEGER_FORMAT "D, %zu role "
		"changes, %" JSON_INTEGER_FORMAT " proposals\n",
		v, wall, wall > 0 ? v / wall : 0.0,
		json_integer_value(json_object_get(what_if, "engines")),
		json_integer_value(json_object_get(what_if, "events")),
		json_integer_value(json_object_get(from, "prefill")),
		json_integer_value(json_object_get(from, "decode")),
		json_integer_value(json_object_get(to, "prefill")),
		json_integer_value(json_object_get(to, "decode")),
		json_array_size(json_object_get(what_if, "role_changes")),
		json_integer_value(json_object_get(what_if, "proposals")));
}
