/*
 * Placement (spec 5): which engines may take a phase of a request now (role,
 * availability, exclusions, room), the placement plugin's choice among
 * them, the per-engine phase slots and their FIFO wait lines, and the
 * aggregate fallback (docs/recovery.md).
 */
#include "build-config.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "core/log.h"
#include "serve/eligible.h"
#include "serve/phases.h"
#include "serve/request.h"
#include "serve/serve-internal.h"

void
nw_phase_begin_attempt(struct nw_request *r)
{
	r->aggregate = !nw_eligible_fleet_pairs(r->serve->fleet, r->serve->dialects);
	r->prefill_pair = -1;
	nw_phase_place(r, r->aggregate ? NARWHAL_PHASE_AGGREGATE : NARWHAL_PHASE_PREFILL);
}

/* Fill s->eligible with engines that may take the phase now (room) and
 * count the ones that only lack room (serve/eligible.h). */
static uint32_t
collect_eligible(struct nw_request *r, narwhal_phase phase, bool exclusions, uint32_t *full)
{
	struct nw_serve *s = r->serve;
	struct nw_eligible_query q = {
		.phase = phase,
		.prefill_pair = r->prefill_pair,
		.excluded = exclusions ? r->excluded : NULL,
		.limit = nw_eligible_phase_limit(s->cfg, phase),
	};

	return nw_eligible_collect(s->fleet, s->dialects, &q, s->eligible, full);
}

/* The placement plugin's choice among s->eligible[0, n), or -1 when it
 * failed or named an engine that is not eligible: logged and counted, and
 * never replaced by a choice of ours (plugin-abi.h). The choice and what it
 * was priced on go to the demand ledger; binding: the request goes there
 * (an unserved one is counted, spec 5), not just waits for a slot. */
static int32_t
choose(struct nw_request *r, narwhal_phase phase, uint32_t n, bool binding)
{
	struct nw_serve *s = r->serve;
	const struct narwhal_placement_ops *ops = &s->placement->plugin->ops.placement;
	struct narwhal_placement_request req = {
		.struct_size = sizeof req, .request = r->handle, .request_id = r->id,
		.phase = phase, .prompt_tokens = r->prompt_tokens,
		.max_tokens = r->parsed.max_tokens, .eligible = s->eligible, .n_eligible = n,
		.paired_engine = phase == NARWHAL_PHASE_DECODE ? r->prefill_pair : -1,
	};
	struct narwhal_placement_result out = {
		.struct_size = sizeof out, .engine = UINT32_MAX, .cost = 0,
		.projected_slo_ratio = NAN, .unserved = false,
	};
	int rc = ops->place(s->placement->ctx, &req, &out);

	for (uint32_t i = 0; rc == 0 && i < n; i++) {
		if (s->eligible[i] != out.engine)
			continue;
		nw_demand_note_placement(s->demand, g_get_monotonic_time() * 1000, r->id, phase,
		                         r->prompt_tokens, r->prompt_tokens_exact,
		                         s->cfg->fleet.engines[out.engine].id, binding, &out);
		return (int32_t)out.engine;
	}
	/* An engine that is not eligible is a bad argument back: -EINVAL. */
	nw_serve_plugin_failed(s, "placement", s->placement->plugin->desc->name, "place",
	                       rc != 0 ? rc : -EINVAL, NULL, r->id);
	return -1;
}

uint64_t
nw_phase_reserved_output(const struct nw_request *r)
{
	return r->parsed.max_tokens_set ? r->parsed.max_tokens : 0;
}

void
nw_phase_unqueue(struct nw_request *r)
{
	if (r->queued_on >= 0) {
		r->serve->fleet->engines[r->queued_on].queued_prefill--;
		r->queued_on = -1;
		nw_pricing_unplaced(r->serve->fleet, &r->price);
	}
}

/* A decode that ended well shows its engine's token gaps (spec 7.7):
 * its output tokens (the engine's usage, else the token events relayed)
 * from the first token to the last chunk (the read-gap clock's last
 * reading; one clock read here when that clock is off). */
static void
observe_decode(const struct nw_request *r)
{
	int64_t tokens = r->usage_completion >= 0 ? r->usage_completion : r->token_events;
	int64_t last_us = r->last_chunk_us >= 0 ? r->last_chunk_us : g_get_monotonic_time();

	if (tokens >= 2)
		nw_pricing_decode_observe(r->serve->fleet, &r->price, last_us * 1000,
		                          (uint64_t)tokens);
}

void
nw_phase_release_slot(struct nw_request *r, narwhal_phase phase)
{
	struct nw_serve *s = r->serve;
	struct narwhal_engine_view *e;

	if (phase == NARWHAL_PHASE_DECODE) {
		e = &s->fleet->engines[r->decode_engine];
		e->resident_decode--;
		/* An aggregate leg's decode part is not a handoff decode. */
		if (!r->aggregate && --s->fleet->stats[r->decode_engine].handoff_decodes == 0)
			nw_fleet_changed(s->fleet); /* it may take aggregate work now */
		if (r->ok)
			observe_decode(r);
		nw_pricing_decode_leave(s->fleet, &r->price);
		r->decode_engine = -1;
		nw_wait_line_kick(&s->decode_line);
	} else {
		e = &s->fleet->engines[r->prefill_engine];
		e->resident_prefill--;
		r->prefill_engine = -1;
		/* Not completed (nw_phase_prefill_done was not called): to place
		 * again, or released with the request. */
		nw_pricing_unplaced(s->fleet, &r->price);
		nw_wait_line_kick(&s->prefill_line);
	}
}

void
nw_phase_prefill_done(struct nw_request *r, int64_t now_us)
{
	nw_pricing_prefill_done(r->serve->fleet, &r->price, now_us * 1000);
	nw_phase_release_slot(r, NARWHAL_PHASE_PREFILL);
}

void
nw_phase_leave_line(struct nw_request *r)
{
	if (r->phase_line != NULL) {
		nw_wait_line_leave(r->phase_line, &r->phase_wait);
		r->phase_line = NULL;
	}
}

static void
join_line(struct nw_request *r, struct nw_wait_line *line)
{
	if (r->phase_line == line)
		return;
	nw_phase_leave_line(r);
	r->serve->metrics->counters.phase_waits++;
	nw_wait_line_push(line, &r->phase_wait);
	r->phase_line = line;
}

void
nw_phase_place(struct nw_request *r, narwhal_phase phase)
{
	struct nw_serve *s = r->serve;
	struct nw_wait_line *line = phase == NARWHAL_PHASE_DECODE ? &s->decode_line
	                                                          : &s->prefill_line;
	uint32_t n, full;
	int32_t engine;

	nw_request_set_state(r, NW_REQ_PLACING);
	r->placing = phase;
	/* FIFO: whoever waits already goes first. */
	if (r->phase_line != line && !nw_wait_line_empty(line)) {
		join_line(r, line);
		return;
	}
	if (r->phase_line == line && !nw_wait_line_is_first(line, &r->phase_wait))
		return;
	n = collect_eligible(r, phase, true, &full);
	/* Exclusions yield to service: when nothing else has room (full or
	 * none), an engine that failed this request takes it again rather
	 * than have it wait at the head of the line and block those behind. */
	if (n == 0)
		n = collect_eligible(r, phase, false, &full);
	if (n == 0) {
		if (full == 0) {
			nw_phase_leave_line(r);
			s->metrics->counters.no_engine++;
			nw_request_fail(r, NW_FAIL_NO_ENGINE, 0, "no available engine can take the "
			                "request");
			return;
		}
		join_line(r, line);
		/* A prefill offer waiting for a slot still counts as demand on
		 * the engine placement would pick. */
		if (phase != NARWHAL_PHASE_DECODE && r->queued_on < 0) {
			struct nw_eligible_query q = {
				.phase = phase, .prefill_pair = r->prefill_pair, .excluded = r->excluded,
			};
			uint32_t m, ignored;

			/* Room aside (no limit asked), exclusions yielding as above. */
			m = nw_eligible_collect(s->fleet, s->dialects, &q, s->eligible, &ignored);
			if (m == 0) {
				q.excluded = NULL;
				m = nw_eligible_collect(s->fleet, s->dialects, &q, s->eligible, &ignored);
			}
			if (m > 0) {
				nw_pricing_placing(s->fleet, &r->price);
				r->queued_on = choose(r, phase, m, false);
			}
			if (r->queued_on >= 0) {
				s->fleet->engines[r->queued_on].queued_prefill++;
				nw_pricing_queued(s->fleet, &r->price, (uint32_t)r->queued_on);
			} else if (m > 0) {
				nw_pricing_pending(s->fleet, &r->price, r->prompt_tokens);
			}
		}
		return;
	}
	if (phase != NARWHAL_PHASE_DECODE)
		nw_pricing_placing(s->fleet, &r->price);
	engine = choose(r, phase, n, true);
	nw_phase_leave_line(r);
	nw_phase_unqueue(r);
	if (engine < 0) {
		nw_wait_line_kick(line);
		nw_request_fail(r, NW_FAIL_INTERNAL, 0, "the placement policy could not choose "
		                "an engine");
		return;
	}
	if (phase == NARWHAL_PHASE_DECODE) {
		s->fleet->engines[engine].resident_decode++;
		if (s->fleet->stats[engine].handoff_decodes++ == 0)
			nw_fleet_changed(s->fleet);
		r->decode_engine = engine;
		nw_pricing_decode_enter(s->fleet, &r->price, (uint32_t)engine, r->prompt_tokens,
		                        nw_phase_reserved_output(r));
	} else {
		s->fleet->engines[engine].resident_prefill++;
		r->prefill_engine = engine;
		nw_pricing_resident(s->fleet, &r->price, (uint32_t)engine,
		                    g_get_monotonic_time() * 1000);
		/* An engine that cannot pair runs the request whole. */
		if (phase == NARWHAL_PHASE_PREFILL && !nw_dialect_pairs(&s->dialects[engine])) {
			r->aggregate = true;
			phase = NARWHAL_PHASE_AGGREGATE;
		}
		if (phase == NARWHAL_PHASE_PREFILL)
			r->prefill_pair = engine;
	}
	/* Another slot may be free for the next in line. */
	nw_wait_line_kick(line);
	/* A concurrent pair needs its decode engine before either leg goes
	 * out: both are built for both engines (pair.c). */
	if (phase == NARWHAL_PHASE_PREFILL && nw_phase_pair_concurrent(r)) {
		nw_phase_place(r, NARWHAL_PHASE_DECODE);
		return;
	}
	nw_phase_start_leg(r, phase, (uint32_t)engine);
}

