/*
 * The what-if mode's world: one run's fleet, ledgers, plugins and engine
 * models on one virtual clock, and the requests going through them. Shared
 * by the what-if modules (setup, course, control, run); narwhal-replay sees
 * whatif.h only.
 */
#ifndef NW_REPLAY_WHATIF_INTERNAL_H
#define NW_REPLAY_WHATIF_INTERNAL_H

#include <narwhal/plugin-abi.h>

#include <stdbool.h>
#include <stdint.h>

#include "core/config.h"
#include "core/demand.h"
#include "core/fleet-dialects.h"
#include "core/host.h"
#include "core/plugin-loader.h"
#include "core/pricing.h"
#include "core/profile.h"
#include "serve/slots.h"
#include "sim/engine.h"
#include "sim/model.h"
#include "tools/replay/whatif-engines.h"
#include "tools/replay/whatif-events.h"
#include "tools/replay/whatif.h"

/* What the events of a world are. */
enum wi_event_kind {
	WI_EV_ARRIVAL = 1,  /* the schedule's next request arrives */
	WI_EV_ENGINE,       /* obj: struct wi_engine, a step ends or it wakes */
	WI_EV_TIMER,        /* obj: struct wi_request, one of its deadlines */
	WI_EV_KICK,         /* obj: struct wi_request, its wait line moved */
	WI_EV_ADMITTED,     /* obj: struct wi_request, an admission unit came to it */
	WI_EV_PASS,         /* the monitor's pass */
	WI_EV_URGENT,       /* the controller's urgent evaluation */
};

struct wi_setup {
	struct wi_options o;
	struct nw_config *cfg;     /* --engines applied */
	char *config_path;
	char *target;              /* "what-if:<config>" */
	struct sim_model model;
	struct nw_profile_store *profiles; /* NULL: no store at profiles.path */
	/* Each engine's profile (borrowed from profiles); NULL: none. With
	 * --engines every engine has the template engine's. */
	const struct nw_engine_profile **engine_profiles;
};

/* A plugin of one kind as the daemon holds it. */
struct wi_plugin {
	struct nw_plugin *plugin;
	struct nw_host *host;
	struct nw_plugin_instance *instance;
};

struct wi_control;

struct wi_world {
	const struct wi_setup *setup;
	const struct nw_config *cfg;
	const struct wi_run_opts *opts;
	struct wi_queue queue;
	struct wi_engines engines;
	struct nw_fleet *fleet;
	struct nw_demand *demand;
	struct nw_plugin_metrics *metrics;
	struct wi_plugin admission, placement, controller;
	struct nw_fleet_dialects *dialects;
	struct nw_resource admitted;     /* the admission ledger and its queue */
	struct nw_wait_line prefill_line, decode_line;
	uint32_t *eligible;              /* placement scratch, one per engine */
	uint64_t next_handle;
	struct wi_control *control;

	const struct rp_schedule *schedule;
	struct rp_result *results;       /* one per schedule item */
	size_t next_arrival;             /* the schedule's next item */
	size_t live;                     /* requests that have not ended */
	uint64_t events;
	uint64_t aggregate_legs;         /* requests run whole on one engine */
	int64_t end_ns;                  /* when the last request ended */
};

/* Where a request is in the daemon's course (serve/request.h's states,
 * those the what-if mode goes through). */
typedef enum wi_state {
	WI_REQ_QUEUED,      /* waiting for an admission unit */
	WI_REQ_PLACING,     /* waiting for a phase slot, or being placed */
	WI_REQ_PREFILL,     /* its prefill leg runs */
	WI_REQ_DECODE,      /* its decode (or aggregate) leg runs */
	WI_REQ_ENDED,
} wi_state;

struct wi_request {
	struct wi_world *w;
	size_t index;                    /* into the schedule and the results */
	uint64_t handle;
	char id[24];                     /* replay-<n>, as X-Request-Id */
	uint32_t refs;                   /* itself while live, plus queued events */
	wi_state state;
	int64_t arrival_ns;
	uint64_t prompt_tokens;
	bool prompt_tokens_exact;
	uint32_t input_tokens, max_tokens;

	struct nw_price_hold price;
	struct nw_demand_ticket demand;
	struct nw_waiter admit_wait, phase_wait;
	struct nw_wait_line *phase_line;
	narwhal_phase placing;
	bool admitted, aggregate, committed, ok;
	int32_t queued_on, prefill_engine, decode_engine, prefill_pair;

	/* The engine leg: the request in its engine's model. */
	struct sim_request sim;
	int32_t leg_engine;              /* -1: in no engine */
	int32_t lease_engine;            /* the prefill engine holding its KV; -1 */
	uint64_t lease_id;

	/* Deadlines, virtual ns, -1 when none; one timer event for the
	 * earliest. */
	int64_t deadline_ns, client_until_ns, queue_until_ns, prefill_until_ns, handoff_until_ns,
		ft_until_ns;
	int64_t timer_at;
	uint32_t timer_stamp;

	int64_t first_token_ns, last_token_ns;
	uint32_t tokens;
};

/* --- setup (whatif-setup.c) ------------------------------------------- */

/* A fresh world for one run: fleet, ledgers, plugins, engine models.
 * NULL with error set when a plugin will not load. */
struct wi_world *wi_world_new(const struct wi_setup *s, const struct wi_run_opts *o,
                              GError **error);
void wi_world_free(struct wi_world *w);
/* Run the schedule to its end (whatif-run.c): w->results holds one result
 * per item. */
void wi_world_run(struct wi_world *w, const struct rp_schedule *sched);

/* --- the request's course (whatif-course.c) --------------------------- */

extern const struct sim_engine_callbacks wi_course_engine_callbacks;
/* The schedule's item i arrives now. */
void wi_course_arrive(struct wi_world *w, size_t i);
/* A request's event (timer, kick, admitted); drops the event's reference. */
void wi_course_on_event(struct wi_world *w, const struct wi_event *ev);
/* Queue an event for a request (it holds a reference until handled). */
void wi_request_push(struct wi_request *r, int64_t at_ns, uint32_t kind, uint32_t stamp);

/* --- the monitor's passes and the controller (whatif-control.c) ------- */

struct wi_control *wi_control_new(struct wi_world *w);
void wi_control_free(struct wi_control *c);
/* The monitor's pass at now: floor repair, the pricing pass, the
 * controller's scheduled evaluation; the next pass is queued. */
void wi_control_pass(struct wi_world *w);
/* An admission decision on a prompt: a projected TTFT beyond slo.ttft_s
 * may arm the urgent evaluation (an event right after). */
void wi_control_admission_priced(struct wi_world *w, uint64_t prompt_tokens,
                                 const struct narwhal_admission_decision *dec);
void wi_control_urgent(struct wi_world *w);
/* The run's role changes, passes and proposals (transfer full). */
json_t *wi_control_json(const struct wi_control *c, const struct wi_world *w);

#endif /* NW_REPLAY_WHATIF_INTERNAL_H */
