#include "build-config.h"

#include <narwhal/plugin-test.h>

#include <math.h>
#include <string.h>

struct canned {
	narwhal_estimate_status status;
	double value;
	guint calls;
	struct narwhal_mock_estimate_call last;
};

/* One engine's script and record for one estimator. */
struct per_engine {
	gboolean scripted;
	narwhal_estimate_status status;
	double value;
	uint64_t max_tokens;   /* the measured domain; 0: none */
	uint32_t max_active;
	guint calls;
	struct narwhal_mock_estimate_call last;
};

struct narwhal_mock_host {
	/* First, so a host_ctx pointer is also the table's owner. */
	struct narwhal_host table;
	int64_t now_ns;
	guint clock_reads;
	GPtrArray *logs;        /* char *, "level: message" */
	GHashTable *counters;   /* char * -> double * */
	GHashTable *gauges;     /* char * -> double * */
	const struct narwhal_fleet_view *fleet;
	guint fleet_reads;
	struct canned estimates[NARWHAL_MOCK_N_ESTIMATORS];
	GArray *engines[NARWHAL_MOCK_N_ESTIMATORS]; /* struct per_engine, by engine index */
	GHashTable *split_prices; /* split_key -> struct narwhal_split_price * */
	narwhal_mock_split_pricer pricer;
	void *pricer_data;
	GPtrArray *split_queries; /* struct narwhal_split_query *, every call in order */
};

static const char *const level_names[] = { "debug", "info", "warning", "error" };

static int64_t
mock_now_ns(void *host_ctx)
{
	struct narwhal_mock_host *mh = host_ctx;

	mh->clock_reads++;
	return mh->now_ns;
}

static void
mock_log(void *host_ctx, narwhal_log_level level, const char *message)
{
	struct narwhal_mock_host *mh = host_ctx;
	const char *name = (unsigned)level < G_N_ELEMENTS(level_names) ? level_names[level]
	                                                               : "invalid";

	g_ptr_array_add(mh->logs, g_strdup_printf("%s: %s", name, message ? message : "(null)"));
}

static double *
metric_slot(GHashTable *table, const char *name)
{
	double *v = g_hash_table_lookup(table, name);

	if (v == NULL) {
		v = g_new0(double, 1);
		g_hash_table_insert(table, g_strdup(name), v);
	}
	return v;
}

static void
mock_counter_add(void *host_ctx, const char *name, double delta)
{
	struct narwhal_mock_host *mh = host_ctx;

	*metric_slot(mh->counters, name) += delta;
}

static void
mock_gauge_set(void *host_ctx, const char *name, double value)
{
	struct narwhal_mock_host *mh = host_ctx;

	*metric_slot(mh->gauges, name) = value;
}

static const struct narwhal_fleet_view *
mock_fleet(void *host_ctx)
{
	struct narwhal_mock_host *mh = host_ctx;

	mh->fleet_reads++;
	return mh->fleet;
}

/* The engine's slot, grown as needed (new slots are zeroed: unscripted). */
static struct per_engine *
engine_slot(struct narwhal_mock_host *mh, narwhal_mock_estimator which, uint32_t engine)
{
	GArray *a = mh->engines[which];

	g_assert_cmpuint(engine, <, 1u << 20); /* a test fleet, not a stray index */
	if (engine >= a->len)
		g_array_set_size(a, engine + 1);
	return &g_array_index(a, struct per_engine, engine);
}

static narwhal_estimate_status
answer(struct narwhal_mock_host *mh, narwhal_mock_estimator which, uint32_t engine, uint64_t tokens,
       uint32_t active, double *out)
{
	struct canned *c = &mh->estimates[which];
	struct per_engine *pe = engine_slot(mh, which, engine);
	narwhal_estimate_status status = pe->scripted ? pe->status : c->status;
	double value = pe->scripted ? pe->value : c->value;

	c->calls++;
	c->last.engine = engine;
	c->last.tokens = tokens;
	c->last.active_requests = active;
	pe->calls++;
	pe->last = c->last;
	if ((pe->max_tokens > 0 && tokens > pe->max_tokens) ||
	    (pe->max_active > 0 && active > pe->max_active))
		status = NARWHAL_ESTIMATE_OUT_OF_DOMAIN;
	/* Like the real estimators: *out is written only on OK. */
	if (status == NARWHAL_ESTIMATE_OK)
		*out = value;
	return status;
}

static narwhal_estimate_status
mock_prefill_seconds(void *host_ctx, uint32_t engine, uint64_t prompt_tokens, double *out)
{
	return answer(host_ctx, NARWHAL_MOCK_PREFILL_SECONDS, engine, prompt_tokens, 0, out);
}

static narwhal_estimate_status
mock_decode_interval_seconds(void *host_ctx, uint32_t engine, uint32_t active_requests,
                             uint64_t resident_kv_tokens, double *out)
{
	return answer(host_ctx, NARWHAL_MOCK_DECODE_INTERVAL_SECONDS, engine, resident_kv_tokens,
	              active_requests, out);
}

static narwhal_estimate_status
mock_prefill_queue_seconds(void *host_ctx, uint32_t engine, uint64_t prompt_tokens,
                           double *out)
{
	return answer(host_ctx, NARWHAL_MOCK_PREFILL_QUEUE_SECONDS, engine, prompt_tokens, 0, out);
}

/* A split's key in split_prices: prefill in the high half. */
static gpointer
split_key(uint32_t prefill, uint32_t decode)
{
	return g_memdup2(&(guint64){ (guint64)prefill << 32 | decode }, sizeof(guint64));
}

static narwhal_estimate_status
mock_price_split(void *host_ctx, const struct narwhal_split_query *q,
                 struct narwhal_split_price *out)
{
	struct narwhal_mock_host *mh = host_ctx;
	guint64 key;
	const struct narwhal_split_price *scripted;
	struct narwhal_split_price priced = { .struct_size = sizeof priced };
	narwhal_estimate_status st = NARWHAL_ESTIMATE_NO_PROFILE;

	g_assert_nonnull(q);
	g_assert_nonnull(out);
	g_ptr_array_add(mh->split_queries, g_memdup2(q, sizeof *q));
	key = (guint64)q->prefill << 32 | q->decode;
	scripted = g_hash_table_lookup(mh->split_prices, &key);
	if (scripted != NULL) {
		priced = *scripted;
		st = NARWHAL_ESTIMATE_OK;
	} else if (mh->pricer != NULL) {
		st = mh->pricer(q, &priced, mh->pricer_data);
	}
	/* Like the real service: *out is written only on OK. */
	if (st == NARWHAL_ESTIMATE_OK) {
		*out = priced;
		out->struct_size = sizeof *out;
	}
	return st;
}

struct narwhal_mock_host *
narwhal_mock_host_new(void)
{
	struct narwhal_mock_host *mh = g_new0(struct narwhal_mock_host, 1);

	mh->table.struct_size = sizeof mh->table;
	mh->table.abi_major = NARWHAL_ABI_MAJOR;
	mh->table.abi_minor = NARWHAL_ABI_MINOR;
	mh->table.host_ctx = mh;
	mh->table.now_ns = mock_now_ns;
	mh->table.log = mock_log;
	mh->table.counter_add = mock_counter_add;
	mh->table.gauge_set = mock_gauge_set;
	mh->table.fleet = mock_fleet;
	mh->table.prefill_seconds = mock_prefill_seconds;
	mh->table.decode_interval_seconds = mock_decode_interval_seconds;
	mh->table.prefill_queue_seconds = mock_prefill_queue_seconds;
	mh->table.price_split = mock_price_split;

	mh->logs = g_ptr_array_new_with_free_func(g_free);
	mh->counters = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
	mh->gauges = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
	for (guint i = 0; i < NARWHAL_MOCK_N_ESTIMATORS; i++) {
		mh->estimates[i].status = NARWHAL_ESTIMATE_NO_PROFILE;
		mh->engines[i] = g_array_new(FALSE, TRUE, sizeof(struct per_engine));
	}
	mh->split_prices = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, g_free);
	mh->split_queries = g_ptr_array_new_with_free_func(g_free);
	return mh;
}

void
narwhal_mock_host_free(struct narwhal_mock_host *mh)
{
	if (mh == NULL)
		return;
	g_ptr_array_unref(mh->logs);
	g_hash_table_unref(mh->counters);
	g_hash_table_unref(mh->gauges);
	for (guint i = 0; i < NARWHAL_MOCK_N_ESTIMATORS; i++)
		g_array_unref(mh->engines[i]);
	g_hash_table_unref(mh->split_prices);
	g_ptr_array_unref(mh->split_queries);
	g_free(mh);
}

const struct narwhal_host *
narwhal_mock_host_table(struct narwhal_mock_host *mh)
{
	return &mh->table;
}

void
narwhal_mock_host_set_time(struct narwhal_mock_host *mh, int64_t now_ns)
{
	mh->now_ns = now_ns;
}

void
narwhal_mock_host_advance(struct narwhal_mock_host *mh, int64_t delta_ns)
{
	/* The host clock is monotonic. */
	g_assert_cmpint(delta_ns, >=, 0);
	mh->now_ns += delta_ns;
}

guint
narwhal_mock_host_clock_reads(const struct narwhal_mock_host *mh)
{
	return mh->clock_reads;
}

guint
narwhal_mock_host_n_logs(const struct narwhal_mock_host *mh)
{
	return mh->logs->len;
}

const char *
narwhal_mock_host_log_line(const struct narwhal_mock_host *mh, guint i)
{
	g_assert_cmpuint(i, <, mh->logs->len);
	return g_ptr_array_index(mh->logs, i);
}

gboolean
narwhal_mock_host_logged(const struct narwhal_mock_host *mh, narwhal_log_level level,
                    const char *substring)
{
	g_autofree char *prefix = NULL;

	g_assert_cmpuint((unsigned)level, <, G_N_ELEMENTS(level_names));
	prefix = g_strdup_printf("%s: ", level_names[level]);
	for (guint i = 0; i < mh->logs->len; i++) {
		const char *line = g_ptr_array_index(mh->logs, i);

		if (g_str_has_prefix(line, prefix) && strstr(line + strlen(prefix), substring))
			return TRUE;
	}
	return FALSE;
}

void
narwhal_mock_host_clear_logs(struct narwhal_mock_host *mh)
{
	g_ptr_array_set_size(mh->logs, 0);
}

static double
metric_value(GHashTable *table, const char *name)
{
	const double *v = g_hash_table_lookup(table, name);

	return v ? *v : NAN;
}

double
narwhal_mock_host_counter(const struct narwhal_mock_host *mh, const char *name)
{
	return metric_value(mh->counters, name);
}

double
narwhal_mock_host_gauge(const struct narwhal_mock_host *mh, const char *name)
{
	return metric_value(mh->gauges, name);
}

void
narwhal_mock_host_set_fleet(struct narwhal_mock_host *mh, const struct narwhal_fleet_view *fleet)
{
	mh->fleet = fleet;
}

guint
narwhal_mock_host_fleet_reads(const struct narwhal_mock_host *mh)
{
	return mh->fleet_reads;
}

void
narwhal_mock_host_set_estimate(struct narwhal_mock_host *mh, narwhal_mock_estimator which,
                          narwhal_estimate_status status, double value)
{
	g_assert_cmpint(which, <, NARWHAL_MOCK_N_ESTIMATORS);
	mh->estimates[which].status = status;
	mh->estimates[which].value = value;
}

guint
narwhal_mock_host_estimate_calls(const struct narwhal_mock_host *mh, narwhal_mock_estimator which)
{
	g_assert_cmpint(which, <, NARWHAL_MOCK_N_ESTIMATORS);
	return mh->estimates[which].calls;
}

const struct narwhal_mock_estimate_call *
narwhal_mock_host_last_estimate(const struct narwhal_mock_host *mh, narwhal_mock_estimator which)
{
	g_assert_cmpint(which, <, NARWHAL_MOCK_N_ESTIMATORS);
	return &mh->estimates[which].last;
}

void
narwhal_mock_host_set_engine_estimate(struct narwhal_mock_host *mh, narwhal_mock_estimator which,
                                 uint32_t engine, narwhal_estimate_status status, double value)
{
	struct per_engine *pe;

	g_assert_cmpint(which, <, NARWHAL_MOCK_N_ESTIMATORS);
	pe = engine_slot(mh, which, engine);
	pe->scripted = TRUE;
	pe->status = status;
	pe->value = value;
}

void
narwhal_mock_host_set_engine_domain(struct narwhal_mock_host *mh, narwhal_mock_estimator which, uint32_t engine,
                               uint64_t max_tokens, uint32_t max_active)
{
	struct per_engine *pe;

	g_assert_cmpint(which, <, NARWHAL_MOCK_N_ESTIMATORS);
	pe = engine_slot(mh, which, engine);
	pe->max_tokens = max_tokens;
	pe->max_active = max_active;
}

void
narwhal_mock_host_clear_engine_estimates(struct narwhal_mock_host *mh)
{
	for (guint w = 0; w < NARWHAL_MOCK_N_ESTIMATORS; w++) {
		for (guint i = 0; i < mh->engines[w]->len; i++) {
			struct per_engine *pe = &g_array_index(mh->engines[w], struct per_engine, i);

			pe->scripted = FALSE;
			pe->max_tokens = 0;
			pe->max_active = 0;
		}
	}
}

guint
narwhal_mock_host_estimate_calls_for(const struct narwhal_mock_host *mh, narwhal_mock_estimator which,
                                uint32_t engine)
{
	g_assert_cmpint(which, <, NARWHAL_MOCK_N_ESTIMATORS);
	if (engine >= mh->engines[which]->len)
		return 0;
	return g_array_index(mh->engines[which], struct per_engine, engine).calls;
}

const struct narwhal_mock_estimate_call *
narwhal_mock_host_last_estimate_for(const struct narwhal_mock_host *mh, narwhal_mock_estimator which,
                               uint32_t engine)
{
	g_assert_cmpint(which, <, NARWHAL_MOCK_N_ESTIMATORS);
	if (narwhal_mock_host_estimate_calls_for(mh, which, engine) == 0)
		return NULL;
	return &g_array_index(mh->engines[which], struct per_engine, engine).last;
}

void
narwhal_mock_host_set_split_price(struct narwhal_mock_host *mh, uint32_t prefill, uint32_t decode,
                             const struct narwhal_split_price *price)
{
	if (price == NULL) {
		g_autofree gpointer key = split_key(prefill, decode);

		g_hash_table_remove(mh->split_prices, key);
		return;
	}
	g_hash_table_replace(mh->split_prices, split_key(prefill, decode),
	                     g_memdup2(price, sizeof *price));
}

void
narwhal_mock_host_set_split_pricer(struct narwhal_mock_host *mh, narwhal_mock_split_pricer pricer, void *data)
{
	mh->pricer = pricer;
	mh->pricer_data = data;
}

void
narwhal_mock_host_clear_split_prices(struct narwhal_mock_host *mh)
{
	g_hash_table_remove_all(mh->split_prices);
	mh->pricer = NULL;
	mh->pricer_data = NULL;
}

guint
narwhal_mock_host_split_price_calls(const struct narwhal_mock_host *mh)
{
	return mh->split_queries->len;
}

const struct narwhal_split_query *
narwhal_mock_host_split_query(const struct narwhal_mock_host *mh, guint i)
{
	g_assert_cmpuint(i, <, mh->split_queries->len);
	return g_ptr_array_index(mh->split_queries, i);
}

const struct narwhal_split_query *
narwhal_mock_host_last_split_query(const struct narwhal_mock_host *mh)
{
	if (mh->split_queries->len == 0)
		return NULL;
	return narwhal_mock_host_split_query(mh, mh->split_queries->len - 1);
}

guint
narwhal_mock_host_split_price_calls_for(const struct narwhal_mock_host *mh, uint32_t prefill,
                                   uint32_t decode)
{
	guint n = 0;

	for (guint i = 0; i < mh->split_queries->len; i++) {
		const struct narwhal_split_query *q = g_ptr_array_index(mh->split_queries, i);

		n += q->prefill == prefill && q->decode == decode;
	}
	return n;
}
