/*
 * narwhal-sim: simulated inference engines that speak the OpenAI-compatible
 * wire format of vLLM, SGLang or llama.cpp (chosen per engine), with a
 * continuous-batching timing model, KV handoffs between engines, and fault
 * injection.
 *
 *   narwhal-sim --engines 4 --base-port 8100
 *
 * prints the fleet as one line of JSON on stdout (ready to paste as
 * Narwhal's "fleet" section) and serves until SIGTERM or SIGINT.
 * docs/simulator.md is the manual.
 */
#include "build-config.h"

#include <locale.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <glib-unix.h>
#include <glib.h>

#include "core/log.h"
#include "core/process.h"
#include "sim/server.h"
#include "sim/sim.h"

enum { EXIT_STARTUP = 1, EXIT_USAGE = 2 };

#define MAX_ENGINES 256

/* --- time ---------------------------------------------------------------- */

double
sim_fleet_now(const struct sim_fleet *fleet)
{
	return (double)(g_get_monotonic_time() - fleet->start_us) / 1e6 * fleet->opts->time_scale;
}

int64_t
sim_fleet_wall_us(const struct sim_fleet *fleet, double v)
{
	/* Round up: waking a hair early would only mean waking twice. */
	return fleet->start_us + (int64_t)ceil(v / fleet->opts->time_scale * 1e6);
}

/* Wall clock when main() began: the start time /metrics reports, as
 * Prometheus's process collector does, so a restart shows. */
static int64_t process_start_unix_us;

double
sim_fleet_unix_s(const struct sim_fleet *fleet, double v)
{
	return (double)fleet->start_unix_us / 1e6 + v / fleet->opts->time_scale;
}

struct sim_node *
sim_fleet_find(const struct sim_fleet *fleet, const char *id)
{
	for (unsigned i = 0; i < fleet->n_nodes; i++) {
		if (strcmp(fleet->nodes[i]->id, id) == 0)
			return fleet->nodes[i];
	}
	return NULL;
}

/* --- options --------------------------------------------------------------- */

/* Fault flags; NAN or -1 means "not given". */
struct fault_flags {
	double error_rate;
	int error_status;
	double latency_multiplier;
	char *hang;
	int die_after_tokens;
	gboolean refuse_connections;
	double flap_period_s;
	double kv_lease_s;
	gboolean unhealthy;
};

static json_t *
faults_from_flags(const struct fault_flags *ff, char **error)
{
	json_t *doc = json_object();

	if (!isnan(ff->error_rate))
		json_object_set_new(doc, "error_rate", json_real(ff->error_rate));
	if (ff->error_status >= 0)
		json_object_set_new(doc, "error_status", json_integer(ff->error_status));
	if (!isnan(ff->latency_multiplier))
		json_object_set_new(doc, "latency_multiplier", json_real(ff->latency_multiplier));
	if (ff->hang != NULL) {
		char *end = NULL;
		double s = g_ascii_strtod(ff->hang, &end);

		if (strcmp(ff->hang, "forever") == 0) {
			json_object_set_new(doc, "hang_before_first_token", json_true());
		} else if (end != ff->hang && *end == '\0') {
			json_object_set_new(doc, "hang_before_first_token", json_real(s));
		} else {
			*error = g_strdup_printf("--fault-hang-before-first-token: expected model "
			                         "seconds or \"forever\", got \"%s\"", ff->hang);
			json_decref(doc);
			return NULL;
		}
	}
	if (ff->die_after_tokens >= 0)
		json_object_set_new(doc, "die_after_tokens", json_integer(ff->die_after_tokens));
	if (ff->refuse_connections)
		json_object_set_new(doc, "refuse_connections", json_true());
	if (!isnan(ff->flap_period_s))
		json_object_set_new(doc, "flap_health_period_s", json_real(ff->flap_period_s));
	if (!isnan(ff->kv_lease_s))
		json_object_set_new(doc, "kv_lease_s", json_real(ff->kv_lease_s));
	if (ff->unhealthy)
		json_object_set_new(doc, "unhealthy", json_true());
	return doc;
}

static void
list_presets(void)
{
	for (const char *const *name = sim_model_preset_names(); *name; name++) {
		struct sim_model m;

		if (!sim_model_preset(*name, &m))
			continue;
		printf("%-24s max_model_len=%u kv_capacity_tokens=%" G_GUINT64_FORMAT " %s; %s\n",
		       *name, m.max_model_len, (guint64)m.kv_capacity_tokens,
		       m.calibrated ? "measured" : "derived, uncalibrated", m.source);
	}
}

/* A PEM file for the TLS endpoints, whole. */
static bool
read_pem(const char *flag, const char *path, char **out, char **error)
{
	GError *gerror = NULL;

	if (g_file_get_contents(path, out, NULL, &gerror))
		return true;
	*error = g_strdup_printf("%s: %s", flag, gerror->message);
	g_error_free(gerror);
	return false;
}

static bool
check_options(struct sim_options *o, const char *policy, const char *dialect, char **error)
{
	if (o->engines < 1 || o->engines > MAX_ENGINES)
		*error = g_strdup_printf("--engines: expected 1 to %d, got %u", MAX_ENGINES,
		                         o->engines);
	else if (o->base_port > 65535 || (o->base_port && o->base_port + o->engines - 1 > 65535))
		*error = g_strdup_printf("--base-port: %u engines from port %u do not fit below 65536",
		                         o->engines, o->base_port);
	else if (o->admin_port > 65535)
		*error = g_strdup_printf("--admin-port: expected 0 to 65535, got %u", o->admin_port);
	else if (!(o->time_scale > 0) || !isfinite(o->time_scale) || o->time_scale > 1e6)
		*error = g_strdup_printf("--time-scale: expected a number above 0, got %g",
		                         o->time_scale);
	else if (!(o->noise_sigma >= 0) || o->noise_sigma > 2)
		*error = g_strdup_printf("--noise-sigma: expected 0 to 2, got %g", o->noise_sigma);
	else if (!(o->waiting_timeout_s > 0) || o->waiting_timeout_s > 86400)
		*error = g_strdup_printf("--disaggregation-waiting-timeout: expected model seconds "
		                         "above 0, got %g", o->waiting_timeout_s);
	else if (!(o->kv_lease_s > 0) || o->kv_lease_s > 86400)
		*error = g_strdup_printf("--kv-lease-duration: expected model seconds above 0, got %g",
		                         o->kv_lease_s);
	else if (strcmp(policy, "fail") != 0 && strcmp(policy, "recompute") != 0)
		*error = g_strdup_printf("--kv-load-failure-policy: expected fail or recompute, got "
		                         "\"%s\"", policy);
	else if (*o->id_prefix == '\0' || strspn(o->id_prefix, "abcdefghijklmnopqrstuvwxyz"
	                                         "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
	                                  != strlen(o->id_prefix))
		*error = g_strdup_printf("--id-prefix: expected letters, digits, '.', '_' and '-', "
		                         "got \"%s\"", o->id_prefix);
	else if ((o->tls_cert_file == NULL) != (o->tls_key_file == NULL))
		*error = g_strdup("--tls-cert and --tls-key: give both or neither");
	else if (o->model_file == NULL && !g_strv_contains(sim_model_preset_names(), o->preset)) {
		g_autofree char *names = g_strjoinv(", ", (char **)sim_model_preset_names());

		*error = g_strdup_printf("--preset: unknown preset \"%s\"; presets are: %s",
		                         o->preset, names);
	}
	else if (o->tls_cert_file != NULL && MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES)
		*error = g_strdup("--tls-cert: this libmicrohttpd is built without TLS");
	else if (o->tls_cert_file != NULL &&
	         (!read_pem("--tls-cert", o->tls_cert_file, &o->tls_cert_pem, error) ||
	          !read_pem("--tls-key", o->tls_key_file, &o->tls_key_pem, error)))
		return false;
	else if ((o->dialects = g_new0(struct sim_engine_dialect, o->engines)),
	         !sim_dialect_parse_spec(dialect, o->engines, o->dialects, error))
		return false;
	else
		return true;
	return false;
}

/* --- the fleet ----------------------------------------------------------- */

static bool
load_model(struct sim_fleet *fleet, char **error)
{
	const struct sim_options *o = fleet->opts;
	GError *gerror = NULL;
	GString *escaped;

	if (o->model_file != NULL) {
		if (!sim_model_load_file(o->model_file, &fleet->model, &gerror)) {
			*error = g_strdup_printf("--model-file: %s", gerror->message);
			g_error_free(gerror);
			return false;
		}
	} else if (!sim_model_preset(o->preset, &fleet->model)) {
		*error = g_strdup_printf("--preset: unknown preset \"%s\"", o->preset);
		return false; /* check_options refused it first, as a usage error */
	}
	if (o->no_delay)
		sim_model_zero_delay(&fleet->model);
	if (o->max_model_len > 0)
		fleet->model.max_model_len = o->max_model_len;
	fleet->model_name = g_strdup(o->served_model_name ? o->served_model_name
	                                                  : fleet->model.name);
	escaped = g_string_new(NULL);
	sim_json_escape(escaped, fleet->model_name);
	fleet->model_name_json = g_string_free(escaped, FALSE);
	return true;
}

/* The fleet description, in the shape of Narwhal's "fleet" section. */
static char *
fleet_json(const struct sim_fleet *fleet)
{
	json_t *engines = json_array();
	json_t *doc;
	char *text;

	for (unsigned i = 0; i < fleet->n_nodes; i++) {
		const struct sim_node *node = fleet->nodes[i];
		const char *scheme = fleet->opts->tls_cert_pem ? "https" : "http";
		const char *role = sim_dialect_fleet_role(fleet->opts->dialects, fleet->n_nodes, i);
		g_autofree char *url = strchr(fleet->opts->host, ':')
			? g_strdup_printf("%s://[%s]:%u", scheme, fleet->opts->host, node->port)
			: g_strdup_printf("%s://%s:%u", scheme, fleet->opts->host, node->port);
		json_t *engine = json_pack("{s:s, s:s, s:s}", "id", node->id, "url", url,
		                           "dialect", sim_dialect_name(node->dialect));

		/* An aggregate-only engine has no role for Narwhal to start it in;
		 * an SGLang PD engine's role is fixed at launch, so it is pinned. */
		if (role != NULL)
			json_object_set_new(engine, "role", json_string(role));
		if (node->dialect == SIM_DIALECT_SGLANG && role != NULL)
			json_object_set_new(engine, "pinned", json_true());
		json_object_set_new(engine, "kv_lease_s", json_real(sim_node_lease_s(node)));
		json_array_append_new(engines, engine);
	}
	doc = json_pack("{s:s, s:o}", "model", fleet->model_name, "engines", engines);
	text = json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(doc);
	return text;
}

static void
fleet_free(struct sim_fleet *fleet)
{
	for (unsigned i = 0; i < fleet->n_nodes; i++)
		sim_node_free(fleet->nodes[i]);
	g_free(fleet->nodes);
	sim_bootstrap_free(fleet);
	sim_admin_stop(fleet);
	nw_upstream_free(fleet->pulls);
	g_free(fleet->model_name);
	g_free(fleet->model_name_json);
	if (fleet->loop)
		g_main_loop_unref(fleet->loop);
}

static bool
fleet_start(struct sim_fleet *fleet, char **error)
{
	const struct sim_options *o = fleet->opts;
	/* KV pulls between the fleet's own engines: with TLS, the test's
	 * certificate need not name the host the pulls use. */
	struct nw_upstream_options uo = { .max_connections = 1024,
	                                  .tls_no_verify = o->tls_cert_pem != NULL };
	GError *gerror = NULL;

	fleet->loop = g_main_loop_new(NULL, FALSE);
	fleet->start_us = g_get_monotonic_time();
	fleet->start_unix_us = g_get_real_time();
	fleet->process_start_unix_us = process_start_unix_us;
	fleet->pulls = nw_upstream_new(&uo);
	fleet->nodes = g_new0(struct sim_node *, o->engines);
	for (unsigned i = 0; i < o->engines; i++) {
		struct sim_node *node = sim_node_new(fleet, i);
		char *ferr = NULL;

		fleet->nodes[fleet->n_nodes++] = node;
		if (o->faults && !sim_faults_merge(&node->faults, o->faults, 0, &ferr)) {
			*error = ferr;
			return false;
		}
		sim_node_apply_lease(node);
		if (node->faults.refuse_connections) {
			/* Bind once to learn the port, then refuse. */
			node->faults.refuse_connections = false;
			if (!sim_node_listen(node, &gerror))
				break;
			node->faults.refuse_connections = true;
			sim_node_sync_listener(node);
		} else if (!sim_node_listen(node, &gerror)) {
			break;
		}
	}
	if (gerror == NULL)
		sim_admin_start(fleet, &gerror);
	if (gerror != NULL) {
		*error = g_strdup(gerror->message);
		g_error_free(gerror);
		return false;
	}
	return true;
}

static gboolean
on_stop_signal(gpointer data)
{
	struct sim_fleet *fleet = data;

	nw_log(NARWHAL_LOG_INFO, "stopping", "reason", "signal", NULL);
	g_main_loop_quit(fleet->loop);
	return G_SOURCE_CONTINUE;
}

static int
run(struct sim_options *o)
{
	struct sim_fleet fleet = { .opts = o };
	char *error = NULL;
	char *text;
	guint sigterm, sigint;

	/* Catch the stop signals before anyone can learn we are up. */
	sigterm = g_unix_signal_add(SIGTERM, on_stop_signal, &fleet);
	sigint = g_unix_signal_add(SIGINT, on_stop_signal, &fleet);
	if (!load_model(&fleet, &error) || !fleet_start(&fleet, &error)) {
		nw_log(NARWHAL_LOG_ERROR, "startup_failed", "error", error, NULL);
		fprintf(stderr, "narwhal-sim: %s\n", error);
		g_free(error);
		g_source_remove(sigterm);
		g_source_remove(sigint);
		fleet_free(&fleet);
		return EXIT_STARTUP;
	}
	text = fleet_json(&fleet);
	if (o->fleet_out != NULL) {
		GError *gerror = NULL;
		g_autofree char *line = g_strconcat(text, "\n", NULL);

		if (!g_file_set_contents(o->fleet_out, line, -1, &gerror)) {
			fprintf(stderr, "narwhal-sim: --fleet-out: %s\n", gerror->message);
			g_error_free(gerror);
			free(text);
			g_source_remove(sigterm);
			g_source_remove(sigint);
			fleet_free(&fleet);
			return EXIT_STARTUP;
		}
	}
	printf("%s\n", text);
	fflush(stdout);
	free(text);

	g_main_loop_run(fleet.loop);
	g_source_remove(sigterm);
	g_source_remove(sigint);
	fleet_free(&fleet);
	nw_log(NARWHAL_LOG_INFO, "stopped", NULL);
	return 0;
}

int
main(int argc, char **argv)
{
	struct sim_options o = {
		.engines = 1, .base_port = 8100, .admin_port = 0, .seed = 1, .time_scale = 1.0,
		.kv_lease_s = 30.0, .waiting_timeout_s = 300.0,
	};
	struct fault_flags ff = {
		.error_rate = NAN, .error_status = -1, .latency_multiplier = NAN,
		.die_after_tokens = -1, .flap_period_s = NAN, .kv_lease_s = NAN,
	};
	/* GOption overwrites string targets without freeing: defaults come
	 * after parsing. */
	g_autofree char *policy = NULL;
	g_autofree char *dialect = NULL;
	g_autofree char *log_level = NULL;
	g_autofree char *log_format = NULL;
	gboolean version = FALSE, presets = FALSE;
	gint engines = 1, base_port = 8100, admin_port = 0, max_model_len = 0;
	gint64 seed = 1;
	GOptionEntry entries[] = {
		{ "engines", 'n', 0, G_OPTION_ARG_INT, &engines, "Simulated engines (default 1)", "N" },
		{ "base-port", 'p', 0, G_OPTION_ARG_INT, &base_port,
		  "First engine port; engines use P..P+N-1; 0 picks ephemeral ports (default 8100)",
		  "P" },
		{ "host", 0, 0, G_OPTION_ARG_STRING, &o.host,
		  "Numeric address to listen on (default 127.0.0.1)", "ADDR" },
		{ "admin-port", 0, 0, G_OPTION_ARG_INT, &admin_port,
		  "Port of the admin API (default 0: ephemeral, logged as admin_listening)", "P" },
		{ "preset", 0, 0, G_OPTION_ARG_STRING, &o.preset,
		  "Timing-model preset (default opt-13b-a100; see --list-presets)", "NAME" },
		{ "model-file", 0, 0, G_OPTION_ARG_FILENAME, &o.model_file,
		  "Timing-model coefficients from a JSON file", "FILE" },
		{ "list-presets", 0, 0, G_OPTION_ARG_NONE, &presets, "List the presets and exit",
		  NULL },
		{ "noise-sigma", 0, 0, G_OPTION_ARG_DOUBLE, &o.noise_sigma,
		  "Log-normal noise on step times, sigma (default 0)", "S" },
		{ "seed", 0, 0, G_OPTION_ARG_INT64, &seed, "Seed for noise and faults (default 1)",
		  "N" },
		{ "time-scale", 0, 0, G_OPTION_ARG_DOUBLE, &o.time_scale,
		  "Run model time F times faster than wall time (default 1)", "F" },
		{ "no-delay", 0, 0, G_OPTION_ARG_NONE, &o.no_delay,
		  "Steps take no time (benchmarks of the HTTP path)", NULL },
		{ "enable-prompt-tokens-details", 0, 0, G_OPTION_ARG_NONE, &o.prompt_tokens_details,
		  "Usage carries prompt_tokens_details (cached_tokens)", NULL },
		{ "served-model-name", 0, 0, G_OPTION_ARG_STRING, &o.served_model_name,
		  "Model name in requests and answers (default the preset's name)", "NAME" },
		{ "max-model-len", 0, 0, G_OPTION_ARG_INT, &max_model_len,
		  "Override the context length", "N" },
		{ "kv-lease-duration", 0, 0, G_OPTION_ARG_DOUBLE, &o.kv_lease_s,
		  "Model seconds a prefill engine holds KV for a remote decode (default 30)", "S" },
		{ "kv-load-failure-policy", 0, 0, G_OPTION_ARG_STRING, &policy,
		  "When a remote decode cannot load its KV: fail or recompute (default fail)", "P" },
		{ "dialect", 0, 0, G_OPTION_ARG_STRING, &dialect,
		  "Wire format: vllm, sglang[:prefill|:decode|:aggregate] or llamacpp, one for "
		  "every engine or a comma list of one per engine (default vllm)", "SPEC" },
		{ "disaggregation-waiting-timeout", 0, 0, G_OPTION_ARG_DOUBLE, &o.waiting_timeout_s,
		  "Model seconds an SGLang decode engine waits for its KV (default 300)", "S" },
		{ "id-prefix", 0, 0, G_OPTION_ARG_STRING, &o.id_prefix,
		  "Engine ids are PREFIX0..PREFIX(N-1) (default sim-)", "PREFIX" },
		{ "fleet-out", 0, 0, G_OPTION_ARG_FILENAME, &o.fleet_out,
		  "Also write the fleet JSON to FILE", "FILE" },
		{ "log-level", 0, 0, G_OPTION_ARG_STRING, &log_level,
		  "debug, info, warning or error (default info)", "LEVEL" },
		{ "log-format", 0, 0, G_OPTION_ARG_STRING, &log_format, "json or text (default json)",
		  "FORMAT" },
		{ "fault-error-rate", 0, 0, G_OPTION_ARG_DOUBLE, &ff.error_rate,
		  "Fault: answer this fraction of requests with an error", "R" },
		{ "fault-error-status", 0, 0, G_OPTION_ARG_INT, &ff.error_status,
		  "Fault: status of injected errors (default 503)", "S" },
		{ "fault-latency-multiplier", 0, 0, G_OPTION_ARG_DOUBLE, &ff.latency_multiplier,
		  "Fault: stretch every step by M (>= 1)", "M" },
		{ "fault-hang-before-first-token", 0, 0, G_OPTION_ARG_STRING, &ff.hang,
		  "Fault: wait S model seconds (or \"forever\") before work starts", "S" },
		{ "fault-die-after-tokens", 0, 0, G_OPTION_ARG_INT, &ff.die_after_tokens,
		  "Fault: requests die after N tokens", "N" },
		{ "fault-refuse-connections", 0, 0, G_OPTION_ARG_NONE, &ff.refuse_connections,
		  "Fault: engines do not listen until reset", NULL },
		{ "fault-flap-health-period", 0, 0, G_OPTION_ARG_DOUBLE, &ff.flap_period_s,
		  "Fault: /health alternates 503 and 200 every S model seconds", "S" },
		{ "fault-kv-lease", 0, 0, G_OPTION_ARG_DOUBLE, &ff.kv_lease_s,
		  "Fault: a shortened KV lease, model seconds", "S" },
		{ "fault-unhealthy", 0, 0, G_OPTION_ARG_NONE, &ff.unhealthy,
		  "Fault: /health answers 503", NULL },
		{ "tls-cert", 0, 0, G_OPTION_ARG_FILENAME, &o.tls_cert_file,
		  "Engines serve HTTPS with this PEM certificate (with --tls-key)", "FILE" },
		{ "tls-key", 0, 0, G_OPTION_ARG_FILENAME, &o.tls_key_file,
		  "The PEM private key of --tls-cert", "FILE" },
		{ "version", 'V', 0, G_OPTION_ARG_NONE, &version, "Print the version and exit", NULL },
		{ NULL },
	};
	g_autoptr(GOptionContext) ctx =
		g_option_context_new("- simulated vLLM, SGLang and llama.cpp engines");
	GError *gerror = NULL;
	char *error = NULL;
	narwhal_log_level level;
	int status;

	process_start_unix_us = g_get_real_time();
	/* Messages in the operator's locale (GLib's quotation marks would
	 * print as '?' in "C"); numbers in JSON and configuration always in C. */
	setlocale(LC_ALL, "");
	setlocale(LC_NUMERIC, "C");
	g_option_context_add_main_entries(ctx, entries, NULL);
	if (!g_option_context_parse(ctx, &argc, &argv, &gerror)) {
		fprintf(stderr, "narwhal-sim: %s (see --help)\n", gerror->message);
		g_error_free(gerror);
		return EXIT_USAGE;
	}
	if (version) {
		printf("narwhal-sim %s\n", PACKAGE_VERSION);
		return 0;
	}
	if (presets) {
		list_presets();
		return 0;
	}
	if (argc > 1) {
		fprintf(stderr, "narwhal-sim: unexpected argument \"%s\" (see --help)\n", argv[1]);
		return EXIT_USAGE;
	}
	o.engines = engines < 0 ? 0 : (unsigned)engines;
	o.base_port = base_port < 0 ? 70000u : (unsigned)base_port;
	o.admin_port = admin_port < 0 ? 70000u : (unsigned)admin_port;
	o.max_model_len = max_model_len < 0 ? 0 : (unsigned)max_model_len;
	o.seed = (guint64)seed;
	if (policy == NULL)
		policy = g_strdup("fail");
	if (dialect == NULL)
		dialect = g_strdup("vllm");
	if (log_level == NULL)
		log_level = g_strdup("info");
	if (log_format == NULL)
		log_format = g_strdup("json");
	if (o.host == NULL)
		o.host = g_strdup("127.0.0.1");
	if (o.preset == NULL)
		o.preset = g_strdup("opt-13b-a100");
	if (o.id_prefix == NULL)
		o.id_prefix = g_strdup("sim-");
	if (!nw_log_level_parse(log_level, &level) ||
	    (strcmp(log_format, "json") != 0 && strcmp(log_format, "text") != 0)) {
		fprintf(stderr, "narwhal-sim: --log-level takes debug, info, warning or error and "
		        "--log-format json or text\n");
		status = EXIT_USAGE;
		goto out;
	}
	nw_log_setup(log_level, strcmp(log_format, "text") == 0 ? NW_LOG_FORMAT_TEXT
	                                                        : NW_LOG_FORMAT_JSON);
	o.faults = faults_from_flags(&ff, &error);
	if (o.faults != NULL && json_object_size(o.faults) > 0) {
		struct sim_faults probe;

		/* Check the flags now, for a message naming the flag's field. */
		sim_faults_clear(&probe);
		if (!sim_faults_merge(&probe, o.faults, 0, &error)) {
			json_decref(o.faults);
			o.faults = NULL;
		}
	}
	if (error != NULL || !check_options(&o, policy, dialect, &error)) {
		fprintf(stderr, "narwhal-sim: %s\n", error);
		g_free(error);
		status = EXIT_USAGE;
		goto out;
	}
	o.kv_policy = strcmp(policy, "recompute") == 0 ? SIM_KV_POLICY_RECOMPUTE
	                                               : SIM_KV_POLICY_FAIL;
	/* A client that leaves mid-write must not kill the process. */
	signal(SIGPIPE, SIG_IGN);
	nw_process_raise_fd_limit();
	curl_global_init(CURL_GLOBAL_DEFAULT);
	status = run(&o);
	curl_global_cleanup();
out:
	json_decref(o.faults);
	g_free(o.host);
	g_free(o.preset);
	g_free(o.model_file);
	g_free(o.served_model_name);
	g_free(o.id_prefix);
	g_free(o.fleet_out);
	g_free(o.tls_cert_file);
	g_free(o.tls_key_file);
	g_free(o.tls_cert_pem);
	if (o.tls_key_pem != NULL)
		memset(o.tls_key_pem, 0, strlen(o.tls_key_pem));
	g_free(o.tls_key_pem);
	g_free(o.dialects);
	g_free(ff.hang);
	return status;
}
