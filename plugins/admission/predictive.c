/*
 * The "predictive" admission policy (spec 4.1; docs/admission.md): price
 * every prefill path a request could take against the TTFT budget,
 * slo.ttft_s * (1 + serving.admission_margin), and admit only what fits.
 *
 * A path is a prefill candidate and, when the fleet hands off (some live
 * prefill engine and some live decode engine), the best live decode engine
 * after it:
 *
 *   candidates   available prefill engines; in aggregate mode (no live
 *                pairing engine of one of the roles) every available
 *                engine but a decode engine with resident decode work,
 *                which the profiles cannot price until it drains
 *                (role-control document, "Aggregate fallback from an idle
 *                decode engine"); in either mode every available engine
 *                that only runs whole requests and never one that only
 *                hands off (NARWHAL_ENGINE_WHOLE_ONLY, _PAIR_ONLY)
 *   path cost    prefill_queue_seconds(candidate, prompt), plus, when
 *                disaggregated, the least first decode interval over the
 *                live decode engines: decode_interval_seconds(d,
 *                resident_decode + 1, resident_kv_tokens + prompt), twice
 *                on an engine already decoding (the step in progress,
 *                then the first token's own); slo.tpot_s for that step
 *                when the engine decodes more than its profile measured
 *   projected    the least path cost
 *
 * The verdict:
 *   projected <= budget                 ADMIT ("priced")
 *   an unprofiled path, and config
 *   without_profiles "open"             ADMIT unpriced, as open would ("unpriced")
 *   over budget, and no candidate fits
 *   even idle (prefill_seconds plus
 *   the idle decode interval)           REFUSE_TOO_LONG ("too_long")
 *   over budget otherwise               REFUSE, retry_after_s = projected - budget
 *                                       ("backlog")
 *   no priced path, the prompt outside
 *   what every candidate measured (its
 *   prefill or handoff), or (handing
 *   off) its tokens outside every decode
 *   engine's grid even idle             REFUSE_TOO_LONG ("outside_measured_domain")
 *   no priced path, the load outside
 *   the measured domain                 REFUSE, retry_after_s = budget
 *                                       ("outside_measured_domain")
 *   no candidate at all                 REFUSE, retry_after_s = budget ("no_engine")
 *   no priced path, only unprofiled
 *   ones, without_profiles "refuse"     failure (-ENODATA): the host answers 503
 *
 * create() refuses a fleet with an unprofiled engine unless the config
 * says without_profiles "open"; then it says so once in the log and in the
 * gauge "unpriced".
 *
 * Config (all optional):
 *   without_profiles  "refuse" (default) or "open"
 *   admission_margin  number >= 0, default 0: the host sets it from
 *                     serving.admission_margin (docs/configuration.md)
 *
 * Metrics: admitted_total, admitted_unpriced_total, refused_<reason>_total,
 * gauges projected_ttft_seconds (the last priced projection) and unpriced.
 */
#include <narwhal/plugin-abi.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PREDICTIVE_MAGIC 0x50524544u /* "PRED" */

/* The engine view must reach at least the last field read here. */
#define VIEW_NEEDED \
	(offsetof(struct narwhal_engine_view, resident_kv_tokens) + sizeof(uint64_t))

struct predictive {
	unsigned magic;
	const struct narwhal_host *host;
	double margin;           /* serving.admission_margin */
	bool admit_unprofiled;   /* without_profiles "open" */
};

/* What pricing one request found. */
struct pricing {
	bool aggregate;          /* no handoff: candidates run whole requests */
	uint32_t candidates;
	uint32_t priced;         /* paths with a projection */
	uint32_t unprofiled;     /* paths with an engine that has no profile */
	uint32_t outside;        /* paths outside the measured domain */
	uint32_t prompt_outside; /* candidates whose projection is outside with no
	                          * resident decode work: the prompt itself is */
	double projected_s;      /* least priced path; +inf when none */
};

static struct predictive *
predictive_cast(void *instance)
{
	struct predictive *p = instance;

	if (p == NULL || p->magic != PREDICTIVE_MAGIC)
		abort(); /* the host passed something that is not ours */
	return p;
}

static int
parse_config(const json_t *config, double *margin, bool *admit_unprofiled, char *err,
             size_t err_len)
{
	const char *key;
	json_t *value;

	*margin = 0.0;
	*admit_unprofiled = false;
	if (config == NULL || json_is_null(config))
		return 0;
	if (!json_is_object(config)) {
		snprintf(err, err_len, "config must be an object, with optional keys "
		         "without_profiles and admission_margin");
		return -EINVAL;
	}
	/* json_object_foreach wants a non-const object; we only read. */
	json_object_foreach((json_t *)config, key, value) {
		if (strcmp(key, "without_profiles") == 0) {
			const char *s = json_string_value(value);

			if (s != NULL && strcmp(s, "refuse") == 0) {
				*admit_unprofiled = false;
			} else if (s != NULL && strcmp(s, "open") == 0) {
				*admit_unprofiled = true;
			} else {
				snprintf(err, err_len, "without_profiles: must be \"refuse\" (stop "
				         "when an engine has no profile) or \"open\" (admit through "
				         "unprofiled engines unpriced)");
				return -EINVAL;
			}
		} else if (strcmp(key, "admission_margin") == 0) {
			double v;

			if (!json_is_number(value)) {
				snprintf(err, err_len, "admission_margin: must be a number, 0 or more "
				         "(set it as serving.admission_margin)");
				return -EINVAL;
			}
			v = json_number_value(value);
			if (!isfinite(v) || v < 0.0) {
				snprintf(err, err_len, "admission_margin: %g is out of range: must be "
				         "0 or more", v);
				return -EINVAL;
			}
			*margin = v;
		} else {
			snprintf(err, err_len, "unknown key \"%s\": the predictive policy accepts only "
			         "without_profiles and admission_margin", key);
			return -EINVAL;
		}
	}
	return 0;
}

/* Append the IDs of the unprofiled engines to buf as "a, b and 3 more",
 * as many as fit in room bytes; returns how many there are. */
static uint32_t
list_unprofiled(const struct narwhal_fleet_view *fleet, char *buf, size_t room)
{
	uint32_t n = 0, listed = 0;
	size_t used = 0;

	buf[0] = '\0';
	for (uint32_t i = 0; fleet != NULL && i < fleet->n_engines; i++) {
		const struct narwhal_engine_view *e = narwhal_fleet_engine(fleet, i);
		const char *id = e->id != NULL ? e->id : "(unnamed)";
		size_t need = strlen(id) + (listed > 0 ? 2 : 0);

		if (e->flags & NARWHAL_ENGINE_PROFILED)
			continue;
		n++;
		/* Keep 24 bytes for " and 4294967295 more". */
		if (used + need + 24 < room && listed == n - 1) {
			used += (size_t)snprintf(buf + used, room - used, "%s%s", listed > 0 ? ", " : "",
			                         id);
			listed++;
		}
	}
	if (listed == 0 && n > 0)
		snprintf(buf, room, "%u engines", n);
	else if (listed < n)
		snprintf(buf + used, room - used, " and %u more", n - listed);
	return n;
}

static int
predictive_create(const struct narwhal_host *host, const json_t *config, void **instance,
                  char *err, size_t err_len)
{
	const struct narwhal_fleet_view *fleet;
	struct predictive *p;
	double margin;
	bool admit_unprofiled;
	char ids[256];
	char line[NARWHAL_ERROR_MAX];
	uint32_t unprofiled;
	int rc;

	rc = parse_config(config, &margin, &admit_unprofiled, err, err_len);
	if (rc != 0)
		return rc;
	fleet = host->fleet(host->host_ctx);
	if (fleet != NULL && fleet->engine_view_size < VIEW_NEEDED) {
		snprintf(err, err_len, "the host's engine view is too short for this plugin");
		return -EINVAL;
	}
	unprofiled = list_unprofiled(fleet, ids, sizeof ids);
	if (unprofiled > 0 && !admit_unprofiled) {
		snprintf(err, err_len, "%s %s no measured profile, so requests cannot be priced: "
		         "run `narwhal-profile --config FILE` to measure the fleet "
		         "(docs/profiles.md), or set plugins.admission.config.without_profiles to "
		         "\"open\" to admit through unprofiled engines unpriced",
		         ids, unprofiled == 1 ? "has" : "have");
		return -ENODATA;
	}
	p = calloc(1, sizeof *p);
	if (p == NULL) {
		snprintf(err, err_len, "out of memory");
		return -ENOMEM;
	}
	p->magic = PREDICTIVE_MAGIC;
	p->host = host;
	p->margin = margin;
	p->admit_unprofiled = admit_unprofiled;

	if (unprofiled > 0) {
		snprintf(line, sizeof line, "%s %s no measured profile: admitting through %s "
		         "unpriced, as the open policy does (without_profiles \"open\"); run "
		         "`narwhal-profile --config FILE` to price %s (docs/profiles.md)", ids,
		         unprofiled == 1 ? "has" : "have", unprofiled == 1 ? "it" : "them",
		         unprofiled == 1 ? "it" : "them");
		host->log(host->host_ctx, NARWHAL_LOG_WARNING, line);
	}
	host->gauge_set(host->host_ctx, "unpriced", unprofiled > 0 ? 1.0 : 0.0);
	snprintf(line, sizeof line, "predictive admission: admission_margin=%g "
	         "without_profiles=%s", margin, admit_unprofiled ? "open" : "refuse");
	host->log(host->host_ctx, NARWHAL_LOG_DEBUG, line);
	*instance = p;
	return 0;
}

static void
predictive_destroy(void *instance)
{
	struct predictive *p = predictive_cast(instance);

	p->magic = 0;
	free(p);
}

static bool
live(const struct narwhal_engine_view *e)
{
	return (e->flags & NARWHAL_ENGINE_AVAILABLE) != 0;
}

/* Whether engine e is a prefill candidate: the engines the host would give
 * the request's prefill (its whole request in aggregate mode). An engine
 * whose dialect cannot pair runs requests whole beside the pairs, and one
 * that hands off in a fixed role never runs one whole (ABI 2.3 flags). */
static bool
candidate(const struct narwhal_engine_view *e, bool aggregate)
{
	if (!live(e))
		return false;
	if (e->flags & NARWHAL_ENGINE_WHOLE_ONLY)
		return true;
	if (!aggregate)
		return e->role == NARWHAL_ROLE_PREFILL;
	if (e->flags & NARWHAL_ENGINE_PAIR_ONLY)
		return false;
	return e->role != NARWHAL_ROLE_DECODE || e->resident_decode == 0;
}

/* The worse of two estimate outcomes: no profile, then outside the
 * domain, then OK. */
static narwhal_estimate_status
worse(narwhal_estimate_status a, narwhal_estimate_status b)
{
	if (a == NARWHAL_ESTIMATE_NO_PROFILE || b == NARWHAL_ESTIMATE_NO_PROFILE)
		return NARWHAL_ESTIMATE_NO_PROFILE;
	if (a != NARWHAL_ESTIMATE_OK || b != NARWHAL_ESTIMATE_OK)
		return NARWHAL_ESTIMATE_OUT_OF_DOMAIN;
	return NARWHAL_ESTIMATE_OK;
}

/* An estimate as this policy uses it: a projection that is no number
 * of seconds prices nothing. */
static narwhal_estimate_status
checked(narwhal_estimate_status st, const double *v)
{
	if (st == NARWHAL_ESTIMATE_OK && !(isfinite(*v) && *v >= 0.0))
		return NARWHAL_ESTIMATE_OUT_OF_DOMAIN;
	return st;
}

static uint64_t
add_sat(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* The least decode interval over the live decode engines, with each
 * engine's residents (idle false) or on an idle engine (idle true):
 * OK with *out, else the best reason none was priced. */
static narwhal_estimate_status
best_decode(const struct predictive *p, const struct narwhal_fleet_view *fleet,
            uint64_t prompt, bool idle, double *out)
{
	const struct narwhal_host *host = p->host;
	narwhal_estimate_status best = NARWHAL_ESTIMATE_OUT_OF_DOMAIN;
	double least = INFINITY;

	for (uint32_t d = 0; d < fleet->n_engines; d++) {
		const struct narwhal_engine_view *e = narwhal_fleet_engine(fleet, d);
		uint32_t active = 1;
		uint64_t kv = prompt;
		narwhal_estimate_status st;
		double v = 0.0;

		if (e->role != NARWHAL_ROLE_DECODE || !live(e) || (e->flags & NARWHAL_ENGINE_WHOLE_ONLY))
			continue;
		if (!idle) {
			active = e->resident_decode == UINT32_MAX ? UINT32_MAX : e->resident_decode + 1;
			kv = add_sat(e->resident_kv_tokens, prompt);
		}
		st = checked(host->decode_interval_seconds(host->host_ctx, d, active, kv, &v), &v);
		/* More decoding than the profile's grid measured, where this
		 * prompt alone is inside it: the load is unpriced, not the
		 * prompt. The first token's step is then priced at the TPOT
		 * target, the interval placement keeps decode within (slo-cost,
		 * docs/admission.md), rather than refusing every request while
		 * the decode pool is busier than it was profiled. */
		if (st == NARWHAL_ESTIMATE_OUT_OF_DOMAIN && !idle &&
		    checked(host->decode_interval_seconds(host->host_ctx, d, 1, prompt, &v), &v) ==
		            NARWHAL_ESTIMATE_OK) {
			v = fleet->tpot_target_s;
			st = NARWHAL_ESTIMATE_OK;
		}
		/* A handoff that reaches a busy decode engine waits for the step
		 * in progress before its own: two intervals at most. */
		if (st == NARWHAL_ESTIMATE_OK && !idle && e->resident_decode > 0)
			v *= 2;
		if (st == NARWHAL_ESTIMATE_OK && v < least)
			least = v;
		else if (st == NARWHAL_ESTIMATE_NO_PROFILE)
			best = NARWHAL_ESTIMATE_NO_PROFILE;
	}
	if (isinf(least))
		return best;
	*out = least;
	return NARWHAL_ESTIMATE_OK;
}

static void
price(const struct predictive *p, const struct narwhal_fleet_view *fleet, uint64_t prompt,
      struct pricing *pr)
{
	const struct narwhal_host *host = p->host;
	bool prefill_live = false, decode_live = false;
	narwhal_estimate_status decode_st = NARWHAL_ESTIMATE_OK;
	double first_interval = 0.0;

	for (uint32_t i = 0; i < fleet->n_engines; i++) {
		const struct narwhal_engine_view *e = narwhal_fleet_engine(fleet, i);

		/* Only engines that pair make a pair live. */
		if (live(e) && !(e->flags & NARWHAL_ENGINE_WHOLE_ONLY)) {
			prefill_live |= e->role == NARWHAL_ROLE_PREFILL;
			decode_live |= e->role == NARWHAL_ROLE_DECODE;
		}
	}
	*pr = (struct pricing){ .aggregate = !(prefill_live && decode_live),
	                        .projected_s = INFINITY };
	if (!pr->aggregate)
		decode_st = best_decode(p, fleet, prompt, false, &first_interval);
	for (uint32_t i = 0; i < fleet->n_engines; i++) {
		const struct narwhal_engine_view *e = narwhal_fleet_engine(fleet, i);
		narwhal_estimate_status st;
		double queue_s = 0.0;

		if (!candidate(e, pr->aggregate))
			continue;
		pr->candidates++;
		st = host->prefill_queue_seconds(host->host_ctx, i, prompt, &queue_s);
		/* Outside with no resident decode work (the one load the
		 * projection cannot price, plugin-abi.h): the prompt is outside
		 * what that engine measured, its prefill or its handoff. */
		if (st == NARWHAL_ESTIMATE_OUT_OF_DOMAIN && e->resident_decode == 0)
			pr->prompt_outside++;
		st = worse(checked(st, &queue_s), decode_st);
		if (st == NARWHAL_ESTIMATE_OK) {
			pr->priced++;
			if (queue_s + first_interval < pr->projected_s)
				pr->projected_s = queue_s + first_interval;
		} else if (st == NARWHAL_ESTIMATE_NO_PROFILE) {
			pr->unprofiled++;
		} else {
			pr->outside++;
		}
	}
}

/* Whether no candidate could meet the budget even on an idle fleet: its
 * own prefill plus the idle decode interval. A candidate that cannot be
 * priced idle cannot meet it either. */
static bool
too_long(const struct predictive *p, const struct narwhal_fleet_view *fleet, uint64_t prompt,
         bool aggregate, double budget_s)
{
	const struct narwhal_host *host = p->host;
	double idle_decode = 0.0;

	if (!aggregate && best_decode(p, fleet, prompt, true, &idle_decode) != NARWHAL_ESTIMATE_OK)
		return true;
	for (uint32_t i = 0; i < fleet->n_engines; i++) {
		double prefill_s = 0.0;
		narwhal_estimate_status st;

		if (!candidate(narwhal_fleet_engine(fleet, i), aggregate))
			continue;
		st = host->prefill_seconds(host->host_ctx, i, prompt, &prefill_s);
		if (checked(st, &prefill_s) == NARWHAL_ESTIMATE_OK &&
		    prefill_s + idle_decode <= budget_s)
			return false;
	}
	return true;
}

/* Whether the prompt lies outside what every candidate measured (its
 * projection outside with no resident decode work, or the prefill domain
 * of one that has some) or, when the fleet hands off, its KV tokens
 * outside the measured decode grid of every live decode engine even idle:
 * then no load will ever price it. */
static bool
prompt_outside(const struct predictive *p, const struct narwhal_fleet_view *fleet,
               uint64_t prompt, const struct pricing *pr)
{
	const struct narwhal_host *host = p->host;
	uint32_t outside = pr->prompt_outside;
	double v;

	if (!pr->aggregate && best_decode(p, fleet, prompt, true, &v) ==
	    NARWHAL_ESTIMATE_OUT_OF_DOMAIN)
		return true;
	for (uint32_t i = 0; i < fleet->n_engines && outside < pr->candidates; i++) {
		const struct narwhal_engine_view *e = narwhal_fleet_engine(fleet, i);

		if (!candidate(e, pr->aggregate) || e->resident_decode == 0)
			continue;
		if (host->prefill_seconds(host->host_ctx, i, prompt, &v) !=
		    NARWHAL_ESTIMATE_OUT_OF_DOMAIN)
			return false;
		outside++;
	}
	return outside == pr->candidates;
}

static void
verdict(const struct predictive *p, struct narwhal_admission_decision *out,
        narwhal_admission_verdict v, const char *reason, const char *counter)
{
	out->verdict = v;
	out->reason = reason;
	p->host->counter_add(p->host->host_ctx, counter, 1.0);
}

static int
predictive_decide(void *instance, const struct narwhal_admission_request *req,
                  struct narwhal_admission_decision *out)
{
	const struct predictive *p = predictive_cast(instance);
	const struct narwhal_host *host = p->host;
	const struct narwhal_fleet_view *fleet;
	struct pricing pr;
	double budget_s;

	if (req == NULL || out == NULL)
		return -EINVAL;
	fleet = host->fleet(host->host_ctx);
	if (fleet == NULL)
		return -ENOENT;
	if (fleet->engine_view_size < VIEW_NEEDED || !(fleet->ttft_target_s > 0.0))
		return -EINVAL;
	budget_s = fleet->ttft_target_s * (1.0 + p->margin);
	out->retry_after_s = 0.0;
	out->projected_ttft_s = NAN;

	price(p, fleet, req->prompt_tokens, &pr);
	if (pr.priced > 0) {
		out->projected_ttft_s = pr.projected_s;
		host->gauge_set(host->host_ctx, "projected_ttft_seconds", pr.projected_s);
	}
	if (pr.priced > 0 && pr.projected_s <= budget_s) {
		verdict(p, out, req->admitted < req->admitted_limit ? NARWHAL_ADMIT
		                                                    : NARWHAL_ADMIT_QUEUE,
		        "priced", "admitted_total");
	} else if (pr.unprofiled > 0 && p->admit_unprofiled) {
		/* Spec 4.1 prices paths it can; an unprofiled one goes as open. */
		verdict(p, out, req->admitted < req->admitted_limit ? NARWHAL_ADMIT
		                                                    : NARWHAL_ADMIT_QUEUE,
		        "unpriced", "admitted_total");
		host->counter_add(host->host_ctx, "admitted_unpriced_total", 1.0);
	} else if (pr.priced > 0) {
		if (too_long(p, fleet, req->prompt_tokens, pr.aggregate, budget_s)) {
			verdict(p, out, NARWHAL_REFUSE_TOO_LONG, "too_long", "refused_too_long_total");
		} else {
			verdict(p, out, NARWHAL_REFUSE, "backlog", "refused_backlog_total");
			out->retry_after_s = pr.projected_s - budget_s;
		}
	} else if (pr.candidates == 0) {
		verdict(p, out, NARWHAL_REFUSE, "no_engine", "refused_no_engine_total");
		out->retry_after_s = budget_s;
	} else if (pr.outside > 0) {
		if (prompt_outside(p, fleet, req->prompt_tokens, &pr)) {
			verdict(p, out, NARWHAL_REFUSE_TOO_LONG, "outside_measured_domain",
			        "refused_outside_domain_total");
		} else {
			verdict(p, out, NARWHAL_REFUSE, "outside_measured_domain",
			        "refused_outside_domain_total");
			out->retry_after_s = budget_s;
		}
	} else {
		/* Only unprofiled paths, and the operator said not to admit
		 * unpriced work: the policy cannot decide (the host answers 503). */
		return -ENODATA;
	}
	return 0;
}

static const struct narwhal_admission_ops predictive_ops = {
	.struct_size = sizeof(struct narwhal_admission_ops),
	.create = predictive_create,
	.destroy = predictive_destroy,
	.decide = predictive_decide,
	.finished = NULL, /* the fleet view is the ledger */
};

NARWHAL_ADMISSION_PLUGIN("predictive", "1.0.0", &predictive_ops)
