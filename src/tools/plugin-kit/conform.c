/* narwhal-plugin-check's checks over the kinds' scenarios (conform.h). */
#include "build-config.h"

#include "tools/plugin-kit/conform.h"

#include <errno.h>
#include <malloc.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/plugin-kit/guard.h"
#include "tools/plugin-kit/sandbox.h"

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
/* The most of the configuration a verdict shows. */
#define KIT_CONFIG_SHOWN 240

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

	/* A dialect without a plugins.dialects entry gets none, and never the
	 * entry's path key, which is Narwhal's (nw_config_dialect_section). */
	if (kind == NARWHAL_KIND_DIALECT) {
		cfg = json_deep_copy(user);
		json_object_del(cfg, "path");
		return cfg;
	}
	cfg = user != NULL ? json_deep_copy(user) : json_object();
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

void
kit_verdict(FILE *out, gboolean ok, const char *check, const char *fmt, ...)
{
	va_list ap;

	fprintf(out, "%s  %s: ", ok ? "PASS" : "FAIL", check);
	va_start(ap, fmt);
	vfprintf(out, fmt, ap);
	va_end(ap);
	fputc('\n', out);
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

/* A fresh instance driven with the kind's script, then destroyed, and a
 * create with the bad configuration; what it saw goes to seen
 * (seen_init'ed by the caller). FALSE when create refused. */
static gboolean
script_run(const struct kit_plan *plan, struct kit_seen *seen)
{
	const struct nw_plugin *p = plan->p;
	char err[NARWHAL_ERROR_MAX];
	struct kit_world w;
	void *inst = live(p, plan->cfg, &w, err, sizeof err);

	if (inst == NULL)
		return FALSE;
	kit_scenario_for(p->kind)(p, inst, &w, FALSE, seen);
	destroy(p, inst);
	if (create(p, &w, plan->bad, &inst, err, sizeof err) == 0)
		destroy(p, inst);
	world_clear(&w);
	return TRUE;
}

/* A check's fresh instance was refused although create passed: a verdict,
 * not silence (each check runs in a process of its own). */
static void
refused_again(FILE *out, const char *check)
{
	kit_verdict(out, FALSE, check, "the plugin refused the configuration it accepted in the "
	            "create check: create must answer alike every time");
}

static void
check_create(const struct kit_plan *plan, FILE *out)
{
	char err[NARWHAL_ERROR_MAX];
	struct kit_world w;
	void *inst = live(plan->p, plan->cfg, &w, err, sizeof err);

	if (inst == NULL) {
		kit_verdict(out, FALSE, "create", "the plugin refused the configuration %s: %s",
		            plan->cfg_text, err[0] != '\0' ? err : "(no reason given)");
		return;
	}
	destroy(plan->p, inst);
	world_clear(&w);
	kit_verdict(out, TRUE, "create", "created with the configuration %s", plan->cfg_text);
}

/* slots and range: what the script saw of a fresh instance. */
static void
check_script(const struct kit_plan *plan, FILE *out, gboolean range)
{
	struct kit_seen s;
	const GString *problems;

	seen_init(&s);
	problems = range ? s.range : s.slots;
	if (!script_run(plan, &s))
		refused_again(out, range ? "range" : "slots");
	else if (range)
		kit_verdict(out, problems->len == 0, "range", "%s",
		            problems->len == 0 ? "every result in range and inside the eligible set"
		                               : problems->str);
	else
		kit_verdict(out, problems->len == 0, "slots", "%s",
		            problems->len == 0 ? "every required slot answered the scripted calls"
		                               : problems->str);
	seen_clear(&s);
}

static void
check_slots(const struct kit_plan *plan, FILE *out)
{
	check_script(plan, out, FALSE);
}

static void
check_range(const struct kit_plan *plan, FILE *out)
{
	check_script(plan, out, TRUE);
}

/* Bad configuration: refused, with a reason. */
static void
check_bad_config(const struct kit_plan *plan, FILE *out)
{
	char err[NARWHAL_ERROR_MAX];
	struct kit_world w;
	void *inst;
	int rc;

	world_init(&w);
	rc = create(plan->p, &w, plan->bad, &inst, err, sizeof err);
	if (rc == 0) {
		destroy(plan->p, inst);
		kit_verdict(out, FALSE, "bad-config",
		            "accepted the unknown key \"" KIT_UNKNOWN_KEY "\": refuse every key you do "
		            "not know, naming it");
	} else {
		kit_verdict(out, rc < 0 && err[0] != '\0', "bad-config",
		            "an unknown key is refused (%d%s%s)", rc, err[0] != '\0' ? ", " : "",
		            err[0] != '\0' ? err
		                           : "; but with no reason in err: write one, the operator sees it");
	}
	world_clear(&w);
}

static void
leak_cycle(const struct kit_plan *plan)
{
	struct kit_seen seen;

	seen_init(&seen);
	script_run(plan, &seen);
	seen_clear(&seen);
}

#ifdef KIT_LSAN
/* LeakSanitizer's report is the tool's, not the plugin's output: it goes
 * to the tool's standard error (sandbox.h). */
static int
lsan_check(void)
{
	int tool = kit_sandbox_tool_stderr(), saved = tool >= 0 ? dup(STDERR_FILENO) : -1;
	int leaked;

	if (saved >= 0)
		dup2(tool, STDERR_FILENO);
	leaked = __lsan_do_recoverable_leak_check();
	if (saved >= 0) {
		dup2(saved, STDERR_FILENO);
		close(saved);
	}
	return leaked;
}
#endif

/* No memory kept across create, calls and destroy, nor a refused create. */
static void
check_leak(const struct kit_plan *plan, FILE *out)
{
	for (int i = 0; i < KIT_LEAK_WARMUP; i++)
		leak_cycle(plan);
#ifdef KIT_LSAN
	for (int i = 0; i < KIT_LEAK_CYCLES; i++)
		leak_cycle(plan);
	kit_verdict(out, lsan_check() == 0, "leak",
	            "%d create/destroy cycles with calls, checked by LeakSanitizer", KIT_LEAK_CYCLES);
#else
	gint64 grew = 0;

	/* The C library counts the chunks it caches per thread as in use, and
	 * its caches fill in the first rounds: the last round decides. */
	for (int round = 0; round < KIT_LEAK_ROUNDS; round++) {
		size_t before = mallinfo2().uordblks;

		for (int i = 0; i < KIT_LEAK_CYCLES; i++)
			leak_cycle(plan);
		grew = (gint64)mallinfo2().uordblks - (gint64)before;
	}
	kit_verdict(out, grew <= (gint64)KIT_LEAK_CYCLES * KIT_LEAK_BYTES_PER_CYCLE, "leak",
	            "memory in use grew by %" G_GINT64_FORMAT " bytes over %d create/destroy cycles "
	            "with calls (at most %d allowed)",
	            grew, KIT_LEAK_CYCLES, KIT_LEAK_CYCLES * KIT_LEAK_BYTES_PER_CYCLE);
#endif
}

/* A and B must answer one script alike when B starts after another
 * instance ran a different one and while that instance still lives. */
static void
check_isolation(const struct kit_plan *plan, FILE *out)
{
	const struct nw_plugin *p = plan->p;
	char err[NARWHAL_ERROR_MAX];
	struct kit_world wb, wc;
	struct kit_seen sa, sb, sc;
	void *b, *c;

	seen_init(&sa);
	if (!script_run(plan, &sa)) {
		refused_again(out, "isolation");
		seen_clear(&sa);
		return;
	}
	b = live(p, plan->cfg, &wb, err, sizeof err);
	c = b != NULL ? live(p, plan->cfg, &wc, err, sizeof err) : NULL;
	if (c == NULL) {
		kit_verdict(out, FALSE, "isolation", "a second instance was refused: %s", err);
		if (b != NULL) {
			destroy(p, b);
			world_clear(&wb);
		}
		seen_clear(&sa);
		return;
	}
	seen_init(&sb);
	seen_init(&sc);
	kit_scenario_for(p->kind)(p, c, &wc, TRUE, &sc);
	kit_scenario_for(p->kind)(p, b, &wb, FALSE, &sb);
	destroy(p, c);
	destroy(p, b);
	if (strcmp(sb.transcript->str, sa.transcript->str) == 0) {
		kit_verdict(out, TRUE, "isolation",
		            "an instance answers alike while another, busy with other work, lives");
	} else {
		g_autofree char *diff = first_difference(sa.transcript->str, sb.transcript->str);

		kit_verdict(out, FALSE, "isolation",
		            "an instance answered differently after another ran other work (%s): "
		            "keep every state in the instance, nothing in static or global variables",
		            diff);
	}
	seen_clear(&sa);
	seen_clear(&sb);
	seen_clear(&sc);
	world_clear(&wb);
	world_clear(&wc);
}

/* No clock read in any call of any check so far (the record adds up over
 * the checks, guard.h), and two fresh instances driven alike on the same
 * fake clock answer alike. */
static void
check_clock(const struct kit_plan *plan, FILE *out)
{
	const struct kit_guard_record *rec = kit_guard_record();
	struct kit_seen s0, s1;

	seen_init(&s0);
	seen_init(&s1);
	if (!script_run(plan, &s0) || !script_run(plan, &s1)) {
		refused_again(out, "clock");
	} else if (rec->clock.n != 0) {
		kit_verdict(out, FALSE, "clock",
		            "%s called %s() (%u clock reads in all): take time from host->now_ns only",
		            rec->clock.slot, rec->clock.what, rec->clock.n);
	} else if (strcmp(s0.transcript->str, s1.transcript->str) != 0) {
		g_autofree char *diff = first_difference(s0.transcript->str, s1.transcript->str);

		kit_verdict(out, FALSE, "clock",
		            "two instances driven alike on the same fake clock answered differently (%s): "
		            "answers may depend only on the calls, the instance and host->now_ns; this "
		            "plugin reads another clock or keeps state outside its instance", diff);
	} else {
		kit_verdict(out, TRUE, "clock",
		            "no clock read in %u calls; answers follow the host's fake clock", rec->calls);
	}
	seen_clear(&s0);
	seen_clear(&s1);
}

/* No wait in any call of any check so far, and the script's slowest call
 * quick in at least one of two runs: a busy machine may preempt any one
 * call. */
static void
check_blocking(const struct kit_plan *plan, FILE *out)
{
	const struct kit_guard_record *rec = kit_guard_record();
	char slowest_slot[sizeof rec->slowest_slot] = "";
	gint64 slowest_us = G_MAXINT64;
	gboolean created = TRUE;

	for (int run = 0; run < 2; run++) {
		struct kit_seen s;

		kit_guard_reset_slowest();
		seen_init(&s);
		created &= script_run(plan, &s);
		seen_clear(&s);
		if (rec->slowest_us < slowest_us) {
			slowest_us = rec->slowest_us;
			g_strlcpy(slowest_slot, rec->slowest_slot, sizeof slowest_slot);
		}
	}
	if (!created)
		refused_again(out, "blocking");
	else if (rec->wait.n != 0)
		kit_verdict(out, FALSE, "blocking",
		            "%s called %s() (%u waits in all): a plugin call must never wait",
		            rec->wait.slot, rec->wait.what, rec->wait.n);
	else
		kit_verdict(out, slowest_us <= KIT_SLOW_CALL_US, "blocking",
		            "the slowest call (%s) took %.1f ms (at most %d ms allowed)", slowest_slot,
		            slowest_us / 1000.0, KIT_SLOW_CALL_US / 1000);
}

const struct kit_check kit_checks[] = {
	{ "create", check_create },
	{ "slots", check_slots },
	{ "range", check_range },
	{ "bad-config", check_bad_config },
	{ "isolation", check_isolation },
	{ "leak", check_leak },
	{ "clock", check_clock },
	{ "blocking", check_blocking },
};
const guint kit_n_checks = G_N_ELEMENTS(kit_checks);

void
kit_plan_init(struct kit_plan *plan, const struct nw_plugin *p, const json_t *user)
{
	plan->p = p;
	plan->cfg = kit_daemon_config(p->kind, user);
	plan->bad = plan->cfg != NULL ? json_deep_copy(plan->cfg) : json_object();
	json_object_set_new(plan->bad, KIT_UNKNOWN_KEY, json_true());
	plan->cfg_text = plan->cfg != NULL ? json_dumps(plan->cfg, JSON_COMPACT | JSON_SORT_KEYS |
	                                                          JSON_ENSURE_ASCII)
	                                   : strdup("null");
	/* A verdict stays one readable line, whatever the configuration
	 * (ASCII: a cut never splits a character). */
	if (plan->cfg_text != NULL && strlen(plan->cfg_text) > KIT_CONFIG_SHOWN) {
		size_t len = strlen(plan->cfg_text);

		g_snprintf(plan->cfg_text + KIT_CONFIG_SHOWN - 32, 32, "... (%zu bytes)", len);
	}
}

void
kit_plan_clear(struct kit_plan *plan)
{
	json_decref(plan->cfg);
	json_decref(plan->bad);
	free(plan->cfg_text);
}
