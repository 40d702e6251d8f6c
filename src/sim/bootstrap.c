/*
 * SGLang's PD handoff (wire formats 2), modelled inside one narwhal-sim
 * process as the vLLM handoff is modelled between engines: a router sends
 * the same body, carrying bootstrap_host, bootstrap_port and
 * bootstrap_room, to a prefill engine and a decode engine at once. The
 * prefill leg prefills, answers its one token, and leaves its KV under
 * the engine's lease in a room keyed by bootstrap_room. The decode leg
 * waits for that room's KV (however the two legs are ordered), takes it
 * (freeing the prefill engine's blocks), waits the model's transfer time,
 * then decodes. Rooms are per process: both engines of a pair must be in
 * the same narwhal-sim (docs/simulator.md, "SGLang").
 */
#include "build-config.h"

#include <inttypes.h>

#include "core/log.h"
#include "sim/server.h"

struct room {
	uint64_t room;               /* the key */
	struct sim_node *producer;   /* NULL until the prefill leg published */
	uint64_t lease_id;           /* the producer engine's lease */
	double expires_v;            /* when that lease lapses */
	struct sim_call *waiter;     /* the decode leg waiting (a reference), or NULL */
};

static GHashTable *
rooms(struct sim_fleet *fleet)
{
	if (fleet->rooms == NULL)
		fleet->rooms = g_hash_table_new_full(g_int64_hash, g_int64_equal, NULL, g_free);
	return fleet->rooms;
}

static gboolean
lapsed(gpointer key, gpointer value, gpointer data)
{
	const struct room *r = value;

	return r->waiter == NULL && r->producer != NULL && r->expires_v < *(const double *)data;
}

/* A room nobody collects outlives its lease only until the table has
 * doubled since the last sweep: amortised constant work per room. */
static struct room *
room_get(struct sim_fleet *fleet, uint64_t key)
{
	GHashTable *table = rooms(fleet);
	struct room *r = g_hash_table_lookup(table, &key);
	double now;

	if (r != NULL)
		return r;
	if (g_hash_table_size(table) >= 2 * fleet->rooms_swept + 64) {
		now = sim_fleet_now(fleet);
		g_hash_table_foreach_remove(table, lapsed, &now);
		fleet->rooms_swept = g_hash_table_size(table);
	}
	r = g_new0(struct room, 1);
	r->room = key;
	g_hash_table_insert(table, &r->room, r);
	return r;
}

static void
room_drop(struct sim_fleet *fleet, struct room *r)
{
	g_hash_table_remove(rooms(fleet), &r->room);
}

/* Take the waiter out of its room: its timer stops, the room's reference
 * goes (the caller holds its own while it needs the call). */
static struct sim_call *
detach_waiter(struct room *r)
{
	struct sim_call *call = r->waiter;

	r->waiter = NULL;
	call->room_state = SIM_ROOM_NONE;
	if (call->room_timer != 0) {
		g_source_remove(call->room_timer);
		call->room_timer = 0;
	}
	return call;
}

static void
fail_decode(struct sim_call *call, const char *why)
{
	g_autofree char *msg = g_strdup_printf("Failed to receive the KV cache of bootstrap room "
	                                       "%" PRIu64 ": %s.", call->room, why);

	nw_log(NARWHAL_LOG_WARNING, "kv_load_failed", "engine", call->node->id,
	       "request_id", call->request_id, "reason", why, "policy", "fail", NULL);
	sim_call_fail(call, 500, NULL, msg);
}

/* The decode leg takes the published KV: the prefill engine's blocks are
 * freed, and the decode runs once the transfer time has passed. */
static void
hand_off(struct sim_call *call, struct room *r)
{
	struct sim_node *producer = r->producer;
	struct sim_fleet *fleet = call->node->fleet;
	double now = sim_fleet_now(fleet);
	uint64_t lease = r->lease_id;
	uint32_t tokens = 0;
	bool taken;

	detach_waiter(r);
	room_drop(fleet, r);
	sim_engine_lease_expire(producer->engine, now);
	taken = sim_engine_lease_take(producer->engine, lease, &tokens);
	if (!taken) {
		fail_decode(call, "the prefill engine's lease lapsed");
		sim_call_unref(call);
		return;
	}
	producer->kv_pulls_served++;
	sim_node_kick(producer);
	sim_call_submit(call, SIM_REMOTE_DECODE,
	                now + sim_model_kv_transfer_ms(&fleet->model, tokens) / 1e3);
	sim_call_unref(call);
}

static gboolean
on_room_ready(gpointer data)
{
	struct sim_call *call = data;
	struct sim_fleet *fleet = call->node->fleet;
	struct room *r = g_hash_table_lookup(rooms(fleet), &call->room);

	call->room_timer = 0;
	if (r != NULL && r->waiter == call)
		hand_off(call, r);
	return G_SOURCE_REMOVE;
}

static gboolean
on_wait_timeout(gpointer data)
{
	struct sim_call *call = data;
	struct sim_fleet *fleet = call->node->fleet;
	struct room *r = g_hash_table_lookup(rooms(fleet), &call->room);

	call->room_timer = 0;
	if (r == NULL || r->waiter != call)
		return G_SOURCE_REMOVE;
	detach_waiter(r);
	if (r->producer == NULL)
		room_drop(fleet, r);
	fail_decode(call, "timed out waiting for the prefill engine");
	sim_call_unref(call);
	return G_SOURCE_REMOVE;
}

void
sim_bootstrap_publish(struct sim_call *prefill)
{
	struct sim_node *node = prefill->node;
	struct room *r = room_get(node->fleet, prefill->room);

	/* A room used twice: the later KV wins; the earlier lapses with its
	 * lease. */
	r->producer = node;
	r->lease_id = prefill->req.id;
	r->expires_v = node->step_end_v + sim_node_lease_s(node);
	prefill->room_state = SIM_ROOM_PUBLISHED;
	/* The step callbacks are running on the producer's engine: take the
	 * lease once they have returned. */
	if (r->waiter != NULL && r->waiter->room_timer != 0) {
		g_source_remove(r->waiter->room_timer);
		r->waiter->room_timer = g_idle_add(on_room_ready, r->waiter);
	}
}

void
sim_bootstrap_wait(struct sim_call *decode)
{
	struct sim_fleet *fleet = decode->node->fleet;
	struct room *r = room_get(fleet, decode->room);
	double ms = fleet->opts->waiting_timeout_s / fleet->opts->time_scale * 1e3;

	if (r->waiter != NULL) {
		fail_decode(decode, "another decode request waits on this room");
		return;
	}
	decode->refs++;
	decode->room_state = SIM_ROOM_WAITING;
	r->waiter = decode;
	if (r->producer != NULL)
		decode->room_timer = g_idle_add(on_room_ready, decode);
	else
		decode->room_timer = g_timeout_add((guint)MIN(MAX(ms, 1.0), 86400e3),
		                                   on_wait_timeout, decode);
}

void
sim_bootstrap_stop(struct sim_call *call)
{
	struct sim_fleet *fleet = call->node->fleet;
	struct room *r;
	struct sim_call *waiter;

	if (call->room_state != SIM_ROOM_PREFILL && call->room_state != SIM_ROOM_WAITING)
		return;
	r = fleet->rooms ? g_hash_table_lookup(fleet->rooms, &call->room) : NULL;
	if (call->room_state == SIM_ROOM_WAITING) {
		call->room_state = SIM_ROOM_NONE;
		if (r == NULL || r->waiter != call)
			return;
		detach_waiter(r);
		if (r->producer == NULL)
			room_drop(fleet, r);
		sim_call_unref(call);
		return;
	}
	/* A prefill leg that failed or was aborted before its KV was ready:
	 * the decode leg waiting on it fails now rather than at its timeout. */
	call->room_state = SIM_ROOM_NONE;
	if (r == NULL || r->waiter == NULL || r->producer != NULL)
		return;
	waiter = detach_waiter(r);
	room_drop(fleet, r);
	fail_decode(waiter, "the prefill request failed");
	sim_call_unref(waiter);
}

void
sim_bootstrap_free(struct sim_fleet *fleet)
{
	GHashTableIter it;
	gpointer value;

	if (fleet->rooms == NULL)
		return;
	g_hash_table_iter_init(&it, fleet->rooms);
	while (g_hash_table_iter_next(&it, NULL, &value)) {
		struct room *r = value;

		if (r->waiter != NULL)
			sim_call_unref(detach_waiter(r));
	}
	g_hash_table_destroy(fleet->rooms);
	fleet->rooms = NULL;
}
