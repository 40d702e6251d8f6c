/* narwhal-plugin-check's checks over the kinds' scenarios (conform.h). */
#include "build-config.h"

#include "tools/plugin-kit/conform.h"

#include <errno.h>
#include <malloc.h>
#include <math.h>
#include <string.h>

#include "tools/plugin-kit/guard.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#define KIT_LSAN 1
#endif

/* A plugin call that takes longer than this blocks the daemon's loop. */
#define KIT_SLOW_CALL_US 100000
/* The leak check: cycles measured after a warm-up, and the growth allowed
 * per cycle (below any allocation the C library can make). */
#define KIT_LEAK_WARMUP 20
#define KIT_LEAK_CYCLES 300
#define KIT_LEAK_ROUNDS 3
#define KIT_LEAK_BYTES_PER_CYCLE 16
/* The key the bad-configuration check adds. */
#define KIT_UNKNOWN_KEY "narwhal-plugin-check-unknown-key"
#define KIT_MAX_PROBLEMS 5

void
kit_problem(GString *list, const char *fmt, ...)
{
	va_list ap;
	guint lines = 0;

	for (const char *c = list->str; *c != '\0'; c++)
		lines += *c == '\n';
	if (lines >= KIT_MAX_PROBLEMS)
		return;
	va_start(ap, fmt);
	g_string_append_vprintf(list, fmt, ap);
	va_end(ap);
	g_string_append_c(list, '\n');
}

kit_scenario_fn
kit_scenario_for(narwhal_plugin_kind kind)
{
	switch (kind) {
	case NARWHAL_KIND_ADMISSION: return kit_scenario_admission;
	case NARWHAL_KIND_PLACEMENT: return kit_scenario_placement;
	case NARWHAL_KIND_CONTROLLER: return kit_scenario_controller;
	case NARWHAL_KIND_DIALECT: return kit_scenario_dialect;
	default: return NULL;
	}
}

json_t *
kit_daemon_config(narwhal_plugin_kind kind, const json_t *user)
{
	json_t *cfg;

	if (user != NULL && !json_is_null(user) && !json_is_object(user))
		return json_deep_copy(user); /* the plugin must refuse it */
	cfg = user != NULL && json_is_object(user) ? json_deep_copy(user) : json_object();
	if (kind == NARWHAL_KIND_ADMISSION && json_object_get(cfg, "admission_margin") == NULL)
		json_object_set_new(cfg, "admission_margin", json_real(0.0));
	if (kind == NARWHAL_KIND_CONTROLLER) {
		/* Every section present; the user's keys within it kept. */
		static const char *const sections[] = { "reactive", "thresholds" };

		for (size_t i = 0; i < G_N_ELEMENTS(sections); i++) {
			if (json_object_get(cfg, sections[i]) == NULL)
				json_object_set_new(cfg, sections[i], json_object());
		}
	}
	return cfg;
}

/* A deterministic price for every split: best at three prefill engines. */
static narwhal_estimate_status
price(const struct narwhal_split_query *q, struct narwhal_split_price *out, void *data)
{
	double off = fabs((double)q->prefill - 3.0);

	out->ttft_s = 0.4 + 0.3 * off;
	out->tpot_s = 0.02 + 0.01 * off;
	out->ttft_ratio = out->ttft_s / 1.0;
	out->tpot_ratio = out->tpot_s / 0.05;
	out->worst_ratio = MAX(out->ttft_ratio, out->tpot_ratio);
	out->prefill_load = 0.5;
	out->decode_load = 0.5;
	out->urgent_ttft_s = q->urgent_prompt_tokens != 0 ? 0.8 : NAN;
	out->in_domain = TRUE;
	return NARWHAL_ESTIMATE_OK;
}

/* Two prefill and two decode engines, profiled, with estimators that
 * answer per engine and a price for every split; the clock at 1 s. */
static void
world_init(struct kit_world *w)
{
	static const char *const ids[] = { "p0", "p1", "d0", "d1" };

	w->mh = narwhal_mock_host_new();
	w->fleet = narwhal_test_fleet_new(1.0, 0.05);
	for (uint32_t i = 0; i < G_N_ELEMENTS(ids); i++) {
		struct narwhal_engine_view *e =
			narwhal_test_fleet_add(w->fleet, ids[i],
			                       i < 2 ? NARWHAL_ROLE_PREFILL : NARWHAL_ROLE_DECODE);

		e->flags |= NARWHAL_ENGINE_PROFILED;
		e->prefill_load = 0.1 * i;
		e->decode_load = 0.05 * i;
		narwhal_mock_host_set_engine_estimate(w->mh, NARWHAL_MOCK_PREFILL_SECONDS, i,
		                                      NARWHAL_ESTIMATE_OK, 0.1 + 0.05 * i);
		narwhal_mock_host_set_engine_estimate(w->mh, NARWHAL_MOCK_PREFILL_QUEUE_SECONDS, i,
		                                      NARWHAL_ESTIMATE_OK, 0.2 + 0.1 * i);
		narwhal_mock_host_set_engine_estimate(w->mh, NARWHAL_MOCK_DECODE_INTERVAL_SECONDS, i,
		                                      NARWHAL_ESTIMATE_OK, 0.01 + 0.005 * i);
		narwhal_mock_host_set_engine_domain(w->mh, NARWHAL_MOCK_PREFILL_SECONDS, i, 32768, 0);
	}
	narwhal_mock_host_set_fleet(w->mh, narwhal_test_fleet_view(w->fleet));
	narwhal_mock_host_set_split_pricer(w->mh, price, NULL);
	narwhal_mock_host_set_time(w->mh, 1000000000);
}

static void
world_clear(struct kit_world *w)
{
	narwhal_mock_host_free(w->mh);
	narwhal_test_fleet_free(w->fleet);
}

static void
seen_init(struct kit_seen *s)
{
	s->transcript = g_string_new(NULL);
	s->slots = g_string_new(NULL);
	s->range = g_string_new(NULL);
}

static void
seen_clear(struct kit_seen *s)
{
	g_string_free(s->transcript, TRUE);
	g_string_free(s->slots, TRUE);
	g_string_free(s->range, TRUE);
}

/* The kind's create and destroy slots. */
static void
lifecycle(const struct nw_plugin *p,
          int (**create)(const struct narwhal_host *, const json_t *, void **, char *, size_t),
          void (**destroy)(void *))
{
	switch (p->kind) {
	case NARWHAL_KIND_ADMISSION:
		*create = p->ops.admission.create;
		*destroy = p->ops.admission.destroy;
		break;
	case NARWHAL_KIND_PLACEMENT:
		*create = p->ops.placement.create;
		*destroy = p->ops.placement.destroy;
		break;
	case NARWHAL_KIND_CONTROLLER:
		*create = p->ops.controller.create;
		*destroy = p->ops.controller.destroy;
		break;
	default:
		*create = p->ops.dialect.create;
		*destroy = p->ops.dialect.destroy;
		break;
	}
}

static int
create(const struct nw_plugin *p, struct kit_world *w, const json_t *cfg, void **inst, char *err,
       size_t err_len)
{
	int (*fn)(const struct narwhal_host *, const json_t *, void **, char *, size_t);
	void (*unused)(void *);
	int rc;

	lifecycle(p, &fn, &unused);
	err[0] = '\0';
	*inst = NULL;
	KIT_CALL("create", rc = fn(narwhal_mock_host_table(w->mh), cfg, inst, err, err_len));
	err[err_len - 1] = '\0';
	return rc;
}

static void
destroy(const struct nw_plugin *p, void *inst)
{
	int (*unused)(const struct narwhal_host *, const json_t *, void **, char *, size_t);
	void (*fn)(void *);

	lifecycle(p, &unused, &fn);
	KIT_CALL("destroy", fn(inst));
}

static void
verdict(FILE *out, guint *failed, gboolean ok, const char *check, const char *fmt, ...)
	G_GNUC_PRINTF(5, 6);

static void
verdict(FILE *out, guint *failed, gboolean ok, const char *check, const char *fmt, ...)
{
	va_list ap;

	fprintf(out, "%s  %s: ", ok ? "PASS" : "FAIL", check);
	va_start(ap, fmt);
	vfprintf(out, fmt, ap);
	va_end(ap);
	fputc('\n', out);
	if (!ok)
		(*failed)++;
}

/* The first line where two transcripts part, for the message. */
static char *
first_difference(const char *a, const char *b)
{
	guint line = 1;
	const char *sa = a, *sb = b;

	while (*a != '\0' && *a == *b) {
		if (*a == '\n') {
			line++;
			sa = a + 1;
			sb = b + 1;
		}
		a++;
		b++;
	}
	return g_strdup_printf("line %u, \"%.*s\" then \"%.*s\"", line, (int)strcspn(sa, "\n"), sa,
	                       (int)strcspn(sb, "\n"), sb);
}

/* One life of an instance in a world of its own; NULL when create failed
 * (then err holds the plugin's reason). */
static void *
live(const struct nw_plugin *p, const json_t *cfg, struct kit_world *w, char *err, size_t len)
{
	void *inst;

	world_init(w);
	if (create(p, w, cfg, &inst, err, len) != 0) {
		world_clear(w);
		return NULL;
	}
	return inst;
}

static void
leak_cycle(const struct nw_plugin *p, const json_t *cfg, const json_t *bad)
{
	char err[NARWHAL_ERROR_MAX];
	struct kit_world w;
	struct kit_seen seen;
	void *inst = live(p, cfg, &w, err, sizeof err);

	if (inst == NULL)
		return;
	seen_init(&seen);
	kit_scenario_for(p->kind)(p, inst, &w, FALSE, &seen);
	seen_clear(&seen);
	destroy(p, inst);
	if (create(p, &w, bad, &inst, err, sizeof err) == 0)
		destroy(p, inst);
	world_clear(&w);
}

/* No memory kept across create, calls and destroy, nor a refused create. */
static void
check_leak(const struct nw_plugin *p, const json_t *cfg, const json_t *bad, FILE *out,
           guint *failed)
{
	for (int i = 0; i < KIT_LEAK_WARMUP; i++)
		leak_cycle(p, cfg, bad);
#ifdef KIT_LSAN
	for (int i = 0; i < KIT_LEAK_CYCLES; i++)
		leak_cycle(p, cfg, bad);
	verdict(out, failed, __lsan_do_recoverable_leak_check() == 0, "leak",
	        "%d create/destroy cycles with calls, checked by LeakSanitizer", KIT_LEAK_CYCLES);
#else
	gint64 grew = 0;

	/* The C library counts the chunks it caches per thread as in use, and
	 * its caches fill in the first rounds: the last round decides. */
	for (int round = 0; round < KIT_LEAK_ROUNDS; round++) {
		size_t before = mallinfo2().uordblks;

		for (int i = 0; i < KIT_LEAK_CYCLES; i++)
			leak_cycle(p, cfg, bad);
		grew = (gint64)mallinfo2().uordblks - (gint64)before;
	}
	verdict(out, failed, grew <= (gint64)KIT_LEAK_CYCLES * KIT_LEAK_BYTES_PER_CYCLE, "leak",
	        "memory in use grew by %" G_GINT64_FORMAT " bytes over %d create/destroy cycles "
	        "with calls (at most %d allowed)",
	        grew, KIT_LEAK_CYCLES, KIT_LEAK_CYCLES * KIT_LEAK_BYTES_PER_CYCLE);
#endif
}

/* A and B must answer one script alike when B starts after another
 * instance ran a different one and while that instance still lives. */
static void
check_isolation(const struct nw_plugin *p, const json_t *cfg, const char *baseline, FILE *out,
                guint *failed)
{
	char err[NARWHAL_ERROR_MAX];
	struct kit_world wb, wc;
	struct kit_seen sb, sc;
	void *b = live(p, cfg, &wb, err, sizeof err);
	void *c = b != NULL ? live(p, cfg, &wc, err, sizeof err) : NULL;
	g_autofree char *diff = NULL;

	if (c == NULL) {
		verdict(out, failed, FALSE, "isolation", "a second instance was refused: %s", err);
		if (b != NULL) {
			destroy(p, b);
			world_clear(&wb);
		}
		return;
	}
	seen_init(&sb);
	seen_init(&sc);
	kit_scenario_for(p->kind)(p, c, &wc, TRUE, &sc);
	kit_scenario_for(p->kind)(p, b, &wb, FALSE, &sb);
	destroy(p, c);
	destroy(p, b);
	if (strcmp(sb.transcript->str, baseline) == 0) {
		verdict(out, failed, TRUE, "isolation",
		        "an instance answers alike while another, busy with other work, lives");
	} else {
		diff = first_difference(baseline, sb.transcript->str);
		verdict(out, failed, FALSE, "isolation",
		        "an instance answered differently after another ran other work (%s): "
		        "keep every state in the instance, nothing in static or global variables",
		        diff);
	}
	seen_clear(&sb);
	seen_clear(&sc);
	world_clear(&wb);
	world_clear(&wc);
}

guint
kit_conform(const struct nw_plugin *p, const json_t *user_config, FILE *out)
{
	json_t *cfg = kit_daemon_config(p->kind, user_config);
	json_t *bad = json_is_object(cfg) ? json_deep_copy(cfg) : json_object();
	g_autofree char *cfg_text = json_dumps(cfg, JSON_COMPACT | JSON_ENCODE_ANY | JSON_SORT_KEYS);
	char err[NARWHAL_ERROR_MAX];
	struct kit_world w0, w1;
	struct kit_seen s0, s1;
	const struct kit_guard_record *rec = kit_guard_record();
	char slowest_slot[sizeof rec->slowest_slot];
	gint64 slowest_us;
	guint failed = 0;
	void *inst;
	int rc;

	json_object_set_new(bad, KIT_UNKNOWN_KEY, json_true());
	kit_guard_reset();
	inst = live(p, cfg, &w0, err, sizeof err);
	if (inst == NULL) {
		verdict(out, &failed, FALSE, "create", "the plugin refused the configuration %s: %s",
		        cfg_text, err[0] != '\0' ? err : "(no reason given)");
		json_decref(cfg);
		json_decref(bad);
		return failed;
	}
	verdict(out, &failed, TRUE, "create", "created with the configuration %s", cfg_text);
	seen_init(&s0);
	kit_scenario_for(p->kind)(p, inst, &w0, FALSE, &s0);
	destroy(p, inst);
	world_clear(&w0);
	verdict(out, &failed, s0.slots->len == 0, "slots", "%s",
	        s0.slots->len == 0 ? "every required slot answered the scripted calls"
	                           : s0.slots->str);
	verdict(out, &failed, s0.range->len == 0, "range", "%s",
	        s0.range->len == 0 ? "every result in range and inside the eligible set"
	                           : s0.range->str);

	/* Bad configuration: refused, with a reason. */
	world_init(&w1);
	rc = create(p, &w1, bad, &inst, err, sizeof err);
	if (rc == 0) {
		destroy(p, inst);
		verdict(out, &failed, FALSE, "bad-config",
		        "accepted the unknown key \"" KIT_UNKNOWN_KEY "\": refuse every key you do "
		        "not know, naming it");
	} else {
		verdict(out, &failed, rc < 0 && err[0] != '\0', "bad-config",
		        "an unknown key is refused (%d%s%s)", rc, err[0] != '\0' ? ", " : "",
		        err[0] != '\0' ? err
		                       : "; but with no reason in err: write one, the operator sees it");
	}
	world_clear(&w1);

	/* The same script on the same fake clock: the same answers. The
	 * slowest call is measured in both runs, and only one slow in both
	 * counts: a busy machine may preempt any one call. */
	slowest_us = rec->slowest_us;
	g_strlcpy(slowest_slot, rec->slowest_slot, sizeof slowest_slot);
	kit_guard_reset_slowest();
	inst = live(p, cfg, &w1, err, sizeof err);
	seen_init(&s1);
	if (inst != NULL) {
		kit_scenario_for(p->kind)(p, inst, &w1, FALSE, &s1);
		destroy(p, inst);
		world_clear(&w1);
	}
	if (rec->slowest_us < slowest_us) {
		slowest_us = rec->slowest_us;
		g_strlcpy(slowest_slot, rec->slowest_slot, sizeof slowest_slot);
	}
	check_isolation(p, cfg, s0.transcript->str, out, &failed);
	check_leak(p, cfg, bad, out, &failed);

	if (rec->clock.n != 0) {
		verdict(out, &failed, FALSE, "clock",
		        "%s called %s() (%u clock reads in all): take time from host->now_ns only",
		        rec->clock.slot, rec->clock.what, rec->clock.n);
	} else if (strcmp(s0.transcript->str, s1.transcript->str) != 0) {
		g_autofree char *diff = first_difference(s0.transcript->str, s1.transcript->str);

		verdict(out, &failed, FALSE, "clock",
		        "two instances driven alike on the same fake clock answered differently (%s): "
		        "answers may depend only on the calls, the instance and host->now_ns; this "
		        "plugin reads another clock or keeps state outside its instance", diff);
	} else {
		verdict(out, &failed, TRUE, "clock",
		        "no clock read in %u calls; answers follow the host's fake clock", rec->calls);
	}
	if (rec->wait.n != 0) {
		verdict(out, &failed, FALSE, "blocking",
		        "%s called %s() (%u waits in all): a plugin call must never wait",
		        rec->wait.slot, rec->wait.what, rec->wait.n);
	} else {
		verdict(out, &failed, slowest_us <= KIT_SLOW_CALL_US, "blocking",
		        "the slowest call (%s) took %.1f ms (at most %d ms allowed)", slowest_slot,
		        slowest_us / 1000.0, KIT_SLOW_CALL_US / 1000);
	}
	seen_clear(&s0);
	seen_clear(&s1);
	json_decref(cfg);
	json_decref(bad);
	return failed;
}
