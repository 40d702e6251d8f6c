/*
 * One simulated engine: its listener and its scheduler on virtual time.
 *
 * The scheduler runs one step at a time from a deadline source: a step
 * that lasts d model seconds ends d / time_scale wall seconds later (at
 * once with --no-delay). The same source also wakes the engine when a
 * pulled KV lands (kv_ready_s) and when a lease lapses.
 */
#include "build-config.h"

#include <errno.h>
#include <math.h>
#include <sys/prctl.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <glib-unix.h>

#include "core/log.h"
#include "net/loop.h"
#include "sim/metrics.h"
#include "sim/server.h"
#include "sim/sim.h"

/* Retry period for re-listening after refused connections are restored. */
#define REBIND_RETRY_US (200 * 1000)

static void
on_engine_tokens(void *owner, struct sim_request *req, uint32_t n)
{
	sim_call_on_tokens(owner, n);
}

static void
on_engine_finished(void *owner, struct sim_request *req, sim_finish why)
{
	sim_call_on_finished(owner, why);
}

static const struct sim_engine_callbacks engine_callbacks = {
	.on_tokens = on_engine_tokens,
	.on_finished = on_engine_finished,
};

/* Wake at virtual time v. GLib's poll timeout is whole milliseconds,
 * rounded up, so a step would end up to 1 ms late in wall time and every
 * answer with it (the next step's start is back to back regardless); a
 * timerfd wakes the loop within the kernel's timer slack instead. */
static void
arm_at(struct sim_node *node, double v)
{
	int64_t at_us = sim_fleet_wall_us(node->fleet, v);
	struct itimerspec when = { .it_value = {
		.tv_sec = (time_t)(at_us / G_USEC_PER_SEC),
		.tv_nsec = (long)(at_us % G_USEC_PER_SEC) * 1000 + 1, /* 0 would disarm */
	} };

	if (node->wake_fd >= 0 && at_us > 0 &&
	    timerfd_settime(node->wake_fd, TFD_TIMER_ABSTIME, &when, NULL) == 0)
		return;
	nw_deadline_source_set(node->wake, at_us);
}

/* Aborts requested from inside the step callbacks run once they return:
 * the engine is iterating over its batch then. */
static void
abort_doomed(struct sim_node *node)
{
	for (guint i = 0; i < node->doomed->len; i++) {
		struct sim_call *call = g_ptr_array_index(node->doomed, i);

		call->doomed = false;
		sim_call_engine_abort(call);
		sim_call_unref(call); /* the reference taken by sim_node_doom */
	}
	g_ptr_array_set_size(node->doomed, 0);
}

static void
expire_leases(struct sim_node *node, double now)
{
	double next = sim_engine_next_lease_expiry(node->engine);
	unsigned n;

	if (next < 0 || next > now)
		return;
	n = sim_engine_lease_expire(node->engine, now);
	if (n > 0 && nw_log_enabled(NARWHAL_LOG_INFO)) {
		char count[16];

		g_snprintf(count, sizeof count, "%u", n);
		nw_log(NARWHAL_LOG_INFO, "kv_lease_expired", "engine", node->id, "leases", count, NULL);
	}
}

static double
earliest(double a, double b)
{
	if (a < 0)
		return b;
	if (b < 0)
		return a;
	return MIN(a, b);
}

/* Zero-length steps (--no-delay) run in bursts of up to this many per
 * loop iteration, so each stream's events leave in one write instead of
 * one send per token: the send, not the model, is what costs then. */
/* How late (wall seconds) a step's end may be noticed and still count as
 * back to back with the next step. */
#define LOOP_SLACK_S 0.002

/* How long the simulator may take to read a request that an idle engine
 * then starts on as of its arrival (wall seconds). */
#define ARRIVAL_SLACK_S 0.02

#define ZERO_STEP_BURST 16
#define ZERO_STEP_BURST_US 1000

static void
on_wake(void *data)
{
	struct sim_node *node = data;
	int64_t started = g_get_monotonic_time();
	double now = sim_fleet_now(node->fleet);
	double slack = LOOP_SLACK_S * node->fleet->opts->time_scale;
	double d, next, start;

	for (unsigned burst = 1;; burst++) {
		start = now;
		/* An idle engine starts on a request when it arrived: reading
		 * and tokenising it is the simulator's own work, which the model
		 * does not price and which a loaded machine or a sanitizer build
		 * makes slower, so it must not show in model time either. */
		if (!node->in_step && burst == 1 && now - node->arrived_v <= ARRIVAL_SLACK_S *
		    node->fleet->opts->time_scale)
			start = MAX(node->arrived_v, node->step_end_v);
		if (node->in_step) {
			if (now < node->step_end_v) {
				arm_at(node, node->step_end_v);
				return;
			}
			node->in_step = false;
			/* Stamp the step's own end, not the (later) loop wake-up, so
			 * model timings stay exact under load. */
			node->ending_step = true;
			sim_engine_end_step(node->engine, node->step_end_v);
			node->ending_step = false;
			abort_doomed(node);
			/* A busy engine starts its next step when the last one ended:
			 * the loop's wake-up delay, multiplied by the time scale, must
			 * not leak into model time between back-to-back steps. */
			if (now - node->step_end_v <= slack)
				start = node->step_end_v;
		}
		expire_leases(node, now);

		d = sim_engine_begin_step(node->engine, start);
		/* Work that became ready after that arrival (a pulled KV) waits
		 * for now. */
		if (d < 0 && start < now)
			d = sim_engine_begin_step(node->engine, start = now);
		if (d < 0)
			break;
		d *= node->faults.latency_multiplier;
		node->in_step = true;
		node->step_end_v = start + d;
		if (d > 0) {
			arm_at(node, node->step_end_v);
			return;
		}
		if (burst >= ZERO_STEP_BURST ||
		    g_get_monotonic_time() - started >= ZERO_STEP_BURST_US) {
			nw_deadline_source_set_in(node->wake, 0);
			return;
		}
	}
	next = earliest(sim_engine_next_ready(node->engine),
	                sim_engine_next_lease_expiry(node->engine));
	if (next < 0)
		return; /* idle until a submit kicks */
	if (next <= now) {
		/* Ready work the scheduler cannot place yet (KV is full of
		 * leases): look again shortly rather than spin. */
		nw_deadline_source_set_in(node->wake, 1000);
		return;
	}
	arm_at(node, next);
}

static gboolean
on_wake_fd(gint fd, GIOCondition condition, gpointer data)
{
	uint64_t expirations;

	/* Nothing to read (a re-armed timer): a spurious wake is harmless. */
	if (read(fd, &expirations, sizeof expirations) < 0 && errno != EAGAIN)
		return G_SOURCE_CONTINUE;
	on_wake(data);
	return G_SOURCE_CONTINUE;
}

void
sim_node_kick(struct sim_node *node)
{
	if (!node->in_step)
		nw_deadline_source_set_in(node->wake, 0);
}

void
sim_node_doom(struct sim_node *node, struct sim_call *call)
{
	if (!call->in_engine || call->doomed)
		return;
	if (node->ending_step) {
		/* Inside the step callbacks: the engine is iterating its batch. */
		call->doomed = true;
		call->refs++;
		g_ptr_array_add(node->doomed, call);
		return;
	}
	sim_call_engine_abort(call);
}

double
sim_node_lease_s(const struct sim_node *node)
{
	return node->faults.kv_lease_s > 0 ? node->faults.kv_lease_s
	                                   : node->fleet->opts->kv_lease_s;
}

void
sim_node_apply_lease(struct sim_node *node)
{
	sim_engine_set_lease(node->engine, sim_node_lease_s(node));
}

struct sim_node *
sim_node_new(struct sim_fleet *fleet, unsigned index)
{
	const struct sim_options *opts = fleet->opts;
	struct sim_node *node = g_new0(struct sim_node, 1);

	node->fleet = fleet;
	node->index = index;
	node->id = g_strdup_printf("%s%u", opts->id_prefix, index);
	node->index_label = g_strdup_printf("%u", index);
	node->port = opts->base_port ? (uint16_t)(opts->base_port + index) : 0;
	node->dialect = opts->dialects[index].dialect;
	node->pd_mode = opts->dialects[index].mode;
	/* Each engine draws its own noise and fault dice from the seed. */
	node->engine = sim_engine_new(&fleet->model, &engine_callbacks, opts->noise_sigma,
	                              opts->seed + index);
	node->rand = g_rand_new_with_seed((guint32)(opts->seed * 2654435761u + index));
	node->id_rand = g_rand_new();
	node->wake = nw_deadline_source_new("narwhal-sim-step", on_wake, node);
	/* The kernel may defer a timer by the thread's slack (50 us unless
	 * set): 1 us keeps the steps' ends where the model puts them. */
	prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
	node->wake_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (node->wake_fd >= 0) {
		node->wake_fd_source = g_unix_fd_source_new(node->wake_fd, G_IO_IN);
		g_source_set_callback(node->wake_fd_source, G_SOURCE_FUNC(on_wake_fd), node, NULL);
		g_source_attach(node->wake_fd_source, NULL);
	}
	node->doomed = g_ptr_array_new();
	node->metrics = sim_metrics_new();
	node->next_request_id = 1;
	sim_faults_clear(&node->faults);
	sim_node_apply_lease(node);
	return node;
}

void
sim_node_free(struct sim_node *node)
{
	if (node == NULL)
		return;
	sim_node_unlisten(node);
	nw_deadline_source_destroy(node->rebind);
	nw_deadline_source_destroy(node->wake);
	if (node->wake_fd_source != NULL) {
		g_source_destroy(node->wake_fd_source);
		g_source_unref(node->wake_fd_source);
	}
	if (node->wake_fd >= 0)
		close(node->wake_fd);
	g_ptr_array_free(node->doomed, TRUE);
	sim_engine_free(node->engine);
	sim_metrics_free(node->metrics);
	g_rand_free(node->rand);
	g_rand_free(node->id_rand);
	g_free(node->index_label);
	g_free(node->id);
	g_free(node);
}

bool
sim_node_listen(struct sim_node *node, GError **error)
{
	struct nw_http_server_options so = {
		.host = node->fleet->opts->host,
		.port = node->port,
		.connection_timeout_s = 60,
		.connection_limit = 8192,
		.tls_cert_pem = node->fleet->opts->tls_cert_pem,
		.tls_key_pem = node->fleet->opts->tls_key_pem,
	};
	char port[8];

	if (node->http != NULL)
		return true;
	node->http = nw_http_server_start(&so, sim_server_handler, sim_server_completed, node,
	                                  error);
	if (node->http == NULL)
		return false;
	node->port = nw_http_server_port(node->http);
	g_snprintf(port, sizeof port, "%u", node->port);
	nw_log(NARWHAL_LOG_INFO, "listening", "engine", node->id, "host", so.host, "port", port,
	       "model", node->fleet->model_name, NULL);
	return true;
}

void
sim_node_unlisten(struct sim_node *node)
{
	if (node->http == NULL)
		return;
	/* Requests answered while the listener goes down see stopping set
	 * and end instead of suspending again. */
	node->stopping = true;
	nw_http_server_stop(node->http);
	node->http = NULL;
	node->stopping = false;
	abort_doomed(node);
}

static void
on_rebind(void *data)
{
	struct sim_node *node = data;
	GError *error = NULL;

	if (node->faults.refuse_connections || node->http != NULL)
		return;
	if (!sim_node_listen(node, &error)) {
		nw_log(NARWHAL_LOG_WARNING, "relisten_failed", "engine", node->id,
		       "error", error->message, NULL);
		g_error_free(error);
		nw_deadline_source_set_in(node->rebind, REBIND_RETRY_US);
	}
}

void
sim_node_sync_listener(struct sim_node *node)
{
	if (node->faults.refuse_connections) {
		if (node->http != NULL) {
			nw_log(NARWHAL_LOG_INFO, "refusing_connections", "engine", node->id, NULL);
			sim_node_unlisten(node);
		}
		return;
	}
	if (node->http == NULL) {
		if (node->rebind == NULL)
			node->rebind = nw_deadline_source_new("narwhal-sim-rebind", on_rebind, node);
		on_rebind(node);
	}
}

json_t *
sim_node_stats_json(const struct sim_node *node)
{
	struct sim_engine_stats st;
	char *url = g_strdup_printf("%s://%s:%u", node->fleet->opts->tls_cert_pem ? "https" : "http",
	                            node->fleet->opts->host, node->port);
	json_t *doc;

	sim_engine_stats(node->engine, &st);
	doc = json_pack("{s:s, s:s, s:i, s:s, s:b, s:f, s:{s:i, s:i, s:I, s:I, s:f, s:i, s:I, s:I, "
	                "s:I, s:I, s:I, s:I, s:i, s:I, s:I, s:I}, s:o}",
	                "id", node->id,
	                "url", url,
	                "port", (json_int_t)node->port,
	                "dialect", sim_dialect_name(node->dialect),
	                "listening", node->http != NULL,
	                "kv_lease_s", sim_node_lease_s(node),
	                "stats",
	                "running", (json_int_t)st.running,
	                "waiting", (json_int_t)st.waiting,
	                "kv_blocks_used", (json_int_t)st.kv_blocks_used,
	                "kv_blocks_total", (json_int_t)st.kv_blocks_total,
	                "kv_cache_usage", st.kv_blocks_total
	                    ? (double)st.kv_blocks_used / st.kv_blocks_total : 0.0,
	                "leases", (json_int_t)st.leases,
	                "leased_blocks", (json_int_t)st.leased_blocks,
	                "preemptions_total", (json_int_t)st.preemptions_total,
	                "prompt_tokens_total", (json_int_t)st.prompt_tokens_total,
	                "generation_tokens_total", (json_int_t)st.generation_tokens_total,
	                "steps_total", (json_int_t)st.steps_total,
	                "http_requests_total", (json_int_t)node->http_requests_total,
	                "active_requests", (json_int_t)node->calls_active,
	                "kv_pulls_served", (json_int_t)node->kv_pulls_served,
	                "work_requests_total", (json_int_t)node->work_requests_total,
	                "last_request_unix_ms", (json_int_t)node->last_request_unix_ms,
	                "faults", sim_faults_json(&node->faults));
	g_free(url);
	return doc;
}
