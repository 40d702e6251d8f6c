#!/bin/bash
# Admission and placement evaluation (issue 12, "How it is checked"):
# goodput and SLO attainment of admission+placement policy pairs (by
# default predictive+slo-cost against open+least-loaded) on windows of the
# Azure code and conv traces replayed at several rates, through Narwhal in
# front of a simulated 2 prefill + 2 decode fleet that narwhal-profile has
# measured. Writes a table and a plot. See bench/admission/README.md.
#
#   bench/admission/run.sh [path/to/narwhal [path/to/narwhal-sim [path/to/narwhal-replay [path/to/narwhal-profile]]]]
#   bench/admission/run.sh --report OUT     # table and plot of the run in OUT again
#
# Run from the build directory (defaults ./narwhal, ./narwhal-sim,
# ./narwhal-replay, ./narwhal-profile; plugins from ./plugins/.libs unless
# NARWHAL_PLUGIN_DIR).
#
# Environment (defaults in brackets; QUICK=1 changes those marked Q):
#   QUICK [0]             1: a smoke run of about two minutes
#   POLICIES ["open:least-loaded predictive:slo-cost"]   admission:placement pairs
#   WORKLOADS ["code conv"]  which Azure traces (AzureLLMInferenceTrace_<name>.csv)
#   TRACES                the folder of the traces [the source tree's ../shared/traces]
#   RATES_CODE ["8 12 16 24 32"] Q["8 24"], RATES_CONV ["10 20 30 40"] Q["10 30"]
#                         offered rates, requests per second
#   WINDOW [15] Q[8]      seconds of arrivals at every rate
#   OFFSET_CODE [1080], OFFSET_CONV [600]   where the window starts in the trace (s)
#   PRESET [llama2-70b-tp8-h100], PREFILL [2], DECODE [2]   the simulated fleet
#   SLO_TTFT [1.0], SLO_TPOT [0.1]   slo.ttft_s and slo.tpot_s, and replay's targets
#   MAX_OUTPUT [512] Q[128]   output tokens are capped at this
#   MAX_PROMPT [context - 512]   longer prompts are skipped
#   TIMEOUT [SLO_TTFT + MAX_OUTPUT * SLO_TPOT + 5, rounded up]   seconds a
#                         request may take at most (replay's --timeout)
#   IDLE_TIMEOUT [60]     longest wait for the fleet to be idle before a rate
#   PROFILE_FLAGS [""] Q["--quick"], PROFILE_TIMEOUT [900]   for narwhal-profile
#   DEV_HAND_PROFILE [0]  development aid: 1 writes the profile store from the
#                         preset's coefficients (src/sim/model.c) instead of
#                         running narwhal-profile; the report says so
#   SEED [1]              narwhal-sim's and narwhal-replay's seed
#   OUT                   output directory [a new /tmp/narwhal-admission.*]
set -eu
export LC_ALL=C

here=$(cd "$(dirname "$0")" && pwd)
. "$here/../router/common.sh"

if [ "${1:-}" = --report ]; then
	[ -f "${2:-}/meta.json" ] || nwb_die "usage: $0 --report OUT (a directory of a run)"
	exec "$here/report.sh" "$2"
fi

quick=${QUICK:-0}
q() { if [ "$quick" = 1 ]; then echo "$2"; else echo "$1"; fi; }
narwhal=${1:-./narwhal}
sim=${2:-./narwhal-sim}
replay=${3:-./narwhal-replay}
profiler=${4:-./narwhal-profile}
policies=${POLICIES:-open:least-loaded predictive:slo-cost}
workloads=${WORKLOADS:-code conv}
rates_code=${RATES_CODE:-$(q "8 12 16 24 32" "8 24")}
rates_conv=${RATES_CONV:-$(q "10 20 30 40" "10 30")}
window=${WINDOW:-$(q 15 8)}
offset_code=${OFFSET_CODE:-1080}
offset_conv=${OFFSET_CONV:-600}
# The rates and the offset of a workload (code or conv).
rates_of() { if [ "$1" = code ]; then echo "$rates_code"; else echo "$rates_conv"; fi; }
offset_of() { if [ "$1" = code ]; then echo "$offset_code"; else echo "$offset_conv"; fi; }
preset=${PRESET:-llama2-70b-tp8-h100}
n_prefill=${PREFILL:-2}
n_decode=${DECODE:-2}
slo_ttft=${SLO_TTFT:-1.0}
slo_tpot=${SLO_TPOT:-0.1}
max_output=${MAX_OUTPUT:-$(q 512 128)}
idle_timeout=${IDLE_TIMEOUT:-60}
profile_flags=${PROFILE_FLAGS-$(q "" "--quick")}
profile_timeout=${PROFILE_TIMEOUT:-900}
hand_profile=${DEV_HAND_PROFILE:-0}
seed=${SEED:-1}
plugin_dir=${NARWHAL_PLUGIN_DIR:-$(dirname "$narwhal")/plugins/.libs}

nwb_need jq curl awk gzip timeout
is_num() { case $1 in '' | *[!0-9.]* | *.*.* | .*) return 1 ;; esac; }
case $quick$window$n_prefill$n_decode$max_output${TIMEOUT:-0}$idle_timeout$profile_timeout$seed$offset_code$offset_conv in
*[!0-9]*) nwb_die "QUICK, WINDOW, PREFILL, DECODE, MAX_OUTPUT, TIMEOUT, IDLE_TIMEOUT, PROFILE_TIMEOUT, SEED, OFFSET_*: integers" ;;
esac
for v in "$slo_ttft" "$slo_tpot"; do is_num "$v" || nwb_die "SLO_TTFT, SLO_TPOT: numbers"; done
# A request that could still meet both SLOs ends within SLO_TTFT +
# MAX_OUTPUT * SLO_TPOT; the default timeout cuts off none of those.
timeout_s=${TIMEOUT:-$(awk -v f="$slo_ttft" -v p="$slo_tpot" -v n="$max_output" \
	'BEGIN { t = f + n * p + 5; printf "%d", t == int(t) ? t : int(t) + 1 }')}
[ "$n_prefill" -ge 1 ] && [ "$n_decode" -ge 1 ] || nwb_die "PREFILL and DECODE: at least 1"
[ "$window" -ge 2 ] && [ "$window" -le 600 ] || nwb_die "WINDOW: 2 to 600 seconds"
[ "$timeout_s" -ge 1 ] || nwb_die "TIMEOUT: at least 1"
case $hand_profile in 0 | 1) ;; *) nwb_die "DEV_HAND_PROFILE: 0 or 1" ;; esac
for w in $workloads; do
	case $w in code | conv) ;; *) nwb_die "WORKLOADS: code and/or conv" ;; esac
	rates=$(rates_of "$w")
	[ -n "$rates" ] || nwb_die "RATES_${w^^}: at least one rate"
	[ "$(echo $rates | wc -w)" -le 12 ] || nwb_die "RATES_${w^^}: at most 12 rates"
	for r in $rates; do
		is_num "$r" && awk -v r="$r" 'BEGIN { exit !(r > 0 && r <= 500) }' ||
			nwb_die "RATES_${w^^}: numbers above 0, at most 500 (got $r)"
	done
done
for p in $policies; do
	case $p in [a-z]*:[a-z]*) ;; *) nwb_die "POLICIES: admission:placement pairs, e.g. open:least-loaded" ;; esac
done
[ -x "$sim" ] || nwb_die "no narwhal-sim at $sim"
[ -x "$narwhal" ] || nwb_die "no narwhal at $narwhal"
[ -x "$replay" ] || nwb_die "no narwhal-replay at $replay"
[ -d "$plugin_dir" ] || nwb_die "no plugin directory $plugin_dir (set NARWHAL_PLUGIN_DIR)"
for p in $policies; do
	for so in "admission-${p%%:*}.so" "placement-${p#*:}.so"; do
		[ -f "$plugin_dir/$so" ] || nwb_die "$plugin_dir/$so is not built: policy pair $p cannot run" \
			"(POLICIES=open:least-loaded runs the baseline alone)"
	done
done
if [ "$hand_profile" = 0 ] && [ ! -x "$profiler" ]; then
	nwb_die "no narwhal-profile at $profiler: the fleet must be profiled before predictive admission" \
		"can run (build narwhal-profile; DEV_HAND_PROFILE=1 is a development aid that writes the" \
		"store from the preset's coefficients instead)"
fi

# The traces: TRACES, else ../shared/traces beside the source tree, else
# beside the main worktree when this is a linked git worktree.
src_dir=$(cd "$here/../.." && pwd)
traces=${TRACES:-}
if [ -z "$traces" ]; then
	for d in "$src_dir/../shared/traces" \
		"$(cd "$src_dir" && git rev-parse --path-format=absolute --git-common-dir 2>/dev/null)/../../shared/traces"; do
		if [ -f "$d/AzureLLMInferenceTrace_code.csv" ]; then traces=$(cd "$d" && pwd); break; fi
	done
fi
for w in $workloads; do
	[ -f "${traces:-/nonexistent}/AzureLLMInferenceTrace_$w.csv" ] ||
		nwb_die "AzureLLMInferenceTrace_$w.csv not found (set TRACES to the folder that holds the Azure traces)"
done

# The preset's context bounds prompt + output (narwhal-sim refuses more).
context=$("$sim" --list-presets | awk -v p="$preset" '$1 == p { sub(/.*max_model_len=/, ""); print $1 + 0 }')
[ -n "$context" ] || nwb_die "PRESET: $preset is not one of narwhal-sim's presets ($("$sim" --list-presets | awk '{ printf "%s ", $1 }'))"
# The default prompt cap leaves room for 512 output tokens (or MAX_OUTPUT if
# more), so that QUICK's lower output cap replays the same requests.
max_prompt=${MAX_PROMPT:-$((context - (max_output > 512 ? max_output : 512)))}
case $max_prompt in '' | *[!0-9]*) nwb_die "MAX_PROMPT: an integer" ;; esac
[ "$max_prompt" -ge 1 ] && [ $((max_prompt + max_output)) -le "$context" ] ||
	nwb_die "MAX_PROMPT + MAX_OUTPUT must be at most $preset's context, $context tokens"

out=${OUT:-$(mktemp -d /tmp/narwhal-admission.XXXXXX)}
mkdir -p "$out/bin" "$out/plugins" "$out/runs"
# Run copies, so that a rebuild during the run changes nothing.
cp "$sim" "$out/bin/narwhal-sim"
cp "$narwhal" "$out/bin/narwhal"
cp "$replay" "$out/bin/narwhal-replay"
[ "$hand_profile" = 1 ] || cp "$profiler" "$out/bin/narwhal-profile"
cp "$plugin_dir"/*.so "$out/plugins/"
sim=$out/bin/narwhal-sim
narwhal=$out/bin/narwhal
replay=$out/bin/narwhal-replay
profiler=$out/bin/narwhal-profile
plugin_dir=$out/plugins
work=$out
: >"$work/pids"
trap 'st=$?; nwb_cleanup; exit $st' EXIT
trap 'exit 130' INT TERM

# Wait for a process started in the background (remembered meanwhile, so
# that an interruption stops it) and return its status. Waiting in the
# background lets the INT and TERM traps run at once.
run_bg() {
	local st=0
	nwb_remember "$1"
	wait "$1" || st=$?
	sed -i "/^$1\$/d" "$work/pids"
	return $st
}

t0=$(date +%s)
say() { printf '[%4ds] %s\n' $(($(date +%s) - t0)) "$*"; }

# --- the fleet: one narwhal-sim process, engines p0.. prefill, d0.. decode.
n_engines=$((n_prefill + n_decode))
"$sim" --engines "$n_engines" --preset "$preset" --base-port 0 --id-prefix sim- --seed "$seed" \
	--log-level warning --fleet-out "$work/fleet.json" >/dev/null 2>"$work/sim.log" &
sim_pid=$!
nwb_remember "$sim_pid"
i=0
while ! grep -q engines "$work/fleet.json" 2>/dev/null; do
	i=$((i + 1))
	[ $i -le 100 ] && kill -0 "$sim_pid" 2>/dev/null || { cat "$work/sim.log" >&2; nwb_die "narwhal-sim did not start"; }
	sleep 0.05
done
engines_json=$(jq -c --argjson np "$n_prefill" '[.engines | to_entries[] | .value + (
	if .key < $np then {id: "p\(.key)", role: "prefill"} else {id: "d\(.key - $np)", role: "decode"} end)]' \
	"$work/fleet.json")
model=$(jq -r .model "$work/fleet.json")
store=$out/profiles.json

# write_config FILE ADMISSION PLACEMENT PORT: the daemon's configuration.
# Everything but the two policy fields is the same for every pair. The
# first-token limit is raised to the request timeout so that a slow decode
# shows as latency (a missed SLO) rather than as failed legs that could
# take engines out of placement.
write_config() {
	jq -n --argjson port "$4" --arg adm "$2" --arg pl "$3" --argjson ttft "$slo_ttft" \
		--argjson tpot "$slo_tpot" --argjson ftt "$timeout_s" --arg store "$store" \
		--arg model "$model" --argjson engines "$engines_json" '{
		server: {host: "127.0.0.1", port: $port},
		log: {level: "info"},
		slo: {ttft_s: $ttft, tpot_s: $tpot},
		serving: {admission: $adm},
		engine: {first_token_timeout_s: $ftt},
		plugins: {placement: {name: $pl}},
		controller: {policy: "static"},
		profiles: {path: $store},
		fleet: {model: $model, engines: $engines}
	}' >"$1"
}

# Development aid (DEV_HAND_PROFILE=1): the store narwhal-profile would
# write if it recovered the preset exactly, from the coefficients in
# src/sim/model.c (ms there, seconds here), in the format of
# docs/profiles.md. Handoff: kv_setup_ms plus KV bytes over 45 GB/s.
# opt-13b-a100's decode has two sets split at 95 requests; the store's
# one linear form takes the small-batch set and stops its domain at 94.
hand_store() {
	local kv_cap
	kv_cap=$("$sim" --list-presets | awk -v p="$preset" '$1 == p { sub(/.*kv_capacity_tokens=/, ""); print $1 + 0 }')
	jq -n --arg preset "$preset" --argjson ctx "$context" --argjson kvcap "$kv_cap" \
		--argjson engines "$engines_json" --arg model "$model" \
		--arg now "$(date -u +%Y-%m-%dT%H:%M:%SZ)" '
	{
		"opt-13b-a100": {a: 18.10, b: 0.10191, c: 7.122e-6, d: [19.93, 6.269e-4, 0.03851],
		                 kvb: 819200, seqs: 94},
		"llama2-70b-tp8-h100": {a: 4.8, b: 0.0699, c: 4.08e-6, d: [29.6, 0, 0.312],
		                        kvb: 327680, seqs: 256},
		"llama3-8b-h100": {a: 3.0, b: (1.606e10 / (0.55 * 989e12) * 1e3),
		                   c: (2.62e5 / (0.55 * 989e12) * 1e3), d: [6.39, 5.2e-5, 0.032],
		                   kvb: 131072, seqs: 256}
	}[$preset] as $m
	| if $m == null then error("no hand-written profile for preset \($preset)") else . end
	| {version: 1, created_at: $now, tool: "bench/admission hand-written store (development aid)",
	   engines: [$engines[] | {
		engine: .id, url: .url, dialect: .dialect, model: $model, hardware: null,
		kv_capacity_tokens: $kvcap, measured_at: $now,
		prefill: {a_s: ($m.a / 1e3), b_s: ($m.b / 1e3), c_s: ($m.c / 1e3),
		          min_tokens: 1, max_tokens: $ctx, samples: 1, rel_rms_error: 0},
		decode: {d0_s: ($m.d[0] / 1e3), d1_s: ($m.d[1] / 1e3), d2_s: ($m.d[2] / 1e3),
		         min_active: 1, max_active: $m.seqs, min_kv_tokens: 0,
		         max_kv_tokens: ([$kvcap, $m.seqs * $ctx] | min), samples: 1, rel_rms_error: 0},
		handoff: {setup_s: 0.001, per_token_s: ($m.kvb / 45e9), max_tokens: $ctx, samples: 1}}]}'
}

# --- the profile store, measured once for every run.
write_config "$work/profile-config.json" open least-loaded "$(nwb_free_port)"
profile_t0=$(date +%s)
if [ "$hand_profile" = 1 ]; then
	say "DEV_HAND_PROFILE=1: writing the profile store from $preset's coefficients (a development aid, not a measurement)"
	hand_store >"$store" || nwb_die "could not write the hand-made store"
else
	say "profiling the fleet: narwhal-profile ${profile_flags:-(full)} (at most ${profile_timeout}s)"
	# shellcheck disable=SC2086 # the flags are words
	NARWHAL_PLUGIN_DIR=$plugin_dir timeout -k 5 "$profile_timeout" "$profiler" \
		--config "$work/profile-config.json" $profile_flags --out "$store" >"$work/profile.log" 2>&1 &
	if ! run_bg $!; then
		tail -n 20 "$work/profile.log" >&2
		nwb_die "narwhal-profile failed (log in $work/profile.log)"
	fi
	[ -s "$store" ] || nwb_die "narwhal-profile wrote no store at $store"
	tail -n 10 "$work/profile.log"
fi
profile_s=$(($(date +%s) - profile_t0))
jq -r '.engines[] | "  \(.engine): prefill a=\(.prefill.a_s) b=\(.prefill.b_s) c=\(.prefill.c_s) [\(.prefill.min_tokens)..\(.prefill.max_tokens)];" +
	" decode d0=\(.decode.d0_s) d1=\(.decode.d1_s) d2=\(.decode.d2_s) [B \(.decode.min_active)..\(.decode.max_active)]"' "$store"

# --- the schedule. Each rate replays the first rate*WINDOW requests after
# the trace's offset (prompts over MAX_PROMPT skipped), their gaps divided
# by the scale that makes them arrive at that rate on average: a higher rate
# is the same stretch of trace, longer and compressed, bursts kept.
printf 'trace\trate\trequests\tscale\tnative_rps\n' >"$work/schedule.tsv"
replay_window() { # trace-file offset: the options that pick the window
	echo --trace "$1" --start-offset "$2" --max-prompt-tokens "$max_prompt" --max-output-tokens "$max_output"
}
for w in $workloads; do
	offset=$(offset_of "$w")
	for r in $(rates_of "$w"); do
		n=$(awk -v r="$r" -v w="$window" 'BEGIN { n = int(r * w + 0.5); print n < 2 ? 2 : n }')
		# shellcheck disable=SC2046
		line=$("$replay" --url http://127.0.0.1:9 --model "$model" \
			$(replay_window "$traces/AzureLLMInferenceTrace_$w.csv" "$offset") --max-requests "$n" --dry-run) ||
			nwb_die "narwhal-replay --dry-run failed on $w"
		got=$(echo "$line" | sed -n 's/^rate scale 1: \([0-9]*\) requests over .*/\1/p')
		native=$(echo "$line" | sed -n 's/.*(\([0-9.]*\) req\/s).*/\1/p')
		[ "$got" = "$n" ] && is_num "$native" ||
			nwb_die "the $w trace has fewer than $n requests after offset $offset (dry run: $line)"
		scale=$(awk -v r="$r" -v x="$native" 'BEGIN { printf "%.6g", r / x }')
		printf '%s\t%s\t%s\t%s\t%s\n' "$w" "$r" "$n" "$scale" "$native" >>"$work/schedule.tsv"
	done
done
say "fleet: $n_prefill prefill + $n_decode decode $preset engines; SLO TTFT ${slo_ttft}s TPOT ${slo_tpot}s;" \
	"${window}s of arrivals per rate; prompts <= $max_prompt, outputs <= $max_output tokens; output in $out"

jq -n --arg preset "$preset" --argjson np "$n_prefill" --argjson nd "$n_decode" \
	--argjson ttft "$slo_ttft" --argjson tpot "$slo_tpot" --argjson window "$window" \
	--argjson max_prompt "$max_prompt" --argjson max_output "$max_output" --argjson timeout "$timeout_s" \
	--arg policies "$policies" --arg workloads "$workloads" --argjson oc "$offset_code" \
	--argjson ov "$offset_conv" --argjson quick "$quick" --argjson hand "$hand_profile" \
	--arg profile_flags "$profile_flags" --argjson profile_s "$profile_s" --argjson seed "$seed" \
	--arg src "$(cd "$src_dir" && git rev-parse --short HEAD 2>/dev/null || echo unknown)" \
	--arg dirty "$(cd "$src_dir" && git status --porcelain 2>/dev/null | grep -vc '^??' || true)" \
	--arg machine "$(nproc) CPUs, $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)" \
	--arg load "$(cut -d' ' -f1-3 /proc/loadavg)" --arg when "$(date -u +%Y-%m-%dT%H:%MZ)" '{
	preset: $preset, prefill: $np, decode: $nd, slo_ttft_s: $ttft, slo_tpot_s: $tpot,
	window_s: $window, max_prompt_tokens: $max_prompt, max_output_tokens: $max_output,
	timeout_s: $timeout, policies: ($policies | split(" ")), workloads: ($workloads | split(" ")),
	offsets_s: {code: $oc, conv: $ov}, quick: ($quick == 1), hand_profile: ($hand == 1),
	profile_flags: $profile_flags, profile_s: $profile_s, seed: $seed, source: $src, modified_files: ($dirty | tonumber? // 0),
	machine: $machine, loadavg_start: $load, date: $when
}' >"$work/meta.json"

# --- one Narwhal per (trace, policy pair), the rates in rising order.
nw_pid=
stop_narwhal() {
	[ -n "$nw_pid" ] || return 0
	kill -TERM "$nw_pid" 2>/dev/null || true
	i=0
	while kill -0 "$nw_pid" 2>/dev/null && [ $i -lt 100 ]; do
		sleep 0.1
		i=$((i + 1))
	done
	kill -KILL "$nw_pid" 2>/dev/null || true
	wait "$nw_pid" 2>/dev/null || true
	sed -i "/^$nw_pid\$/d" "$work/pids"
	nw_pid=
}

start_narwhal() { # config-file log: sets url, or returns 1
	local port _
	for _ in 1 2 3; do
		port=$(nwb_free_port)
		write_config "$1" "$adm" "$pl" "$port"
		NARWHAL_PLUGIN_DIR=$plugin_dir "$narwhal" --config "$1" 2>>"$2" &
		nw_pid=$!
		nwb_remember "$nw_pid"
		url=http://127.0.0.1:$port
		if nwb_wait_http "$url/v1/models" 10; then
			# Every engine probed and in placement.
			i=0
			until curl -s -m 2 "$url/narwhal/health" | jq -e '.status == "ok"' >/dev/null 2>&1; do
				i=$((i + 1))
				[ $i -le 100 ] || { stop_narwhal; return 1; }
				sleep 0.1
			done
			return 0
		fi
		stop_narwhal
		kill -0 "$sim_pid" 2>/dev/null || return 1
	done
	return 1
}

# Nothing admitted in Narwhal and nothing running or waiting on any engine
# (bounded by IDLE_TIMEOUT); 1 when that time ran out.
wait_idle() {
	local deadline=$(($(date +%s) + idle_timeout)) busy e m
	while :; do
		busy=$(curl -s -m 2 "$url/narwhal/state" | jq -r '.admission.admitted_now // 1' 2>/dev/null || true)
		busy=${busy:-1}
		for e in $(jq -r '.[].url' <<<"$engines_json"); do
			m=$(curl -s -m 2 "$e/metrics" || true)
			# An engine that does not answer counts as busy.
			busy=$((busy + $(awk '/^vllm:num_requests_(running|waiting)/ { s += $2; seen = 1 }
				END { print seen ? s : 1 }' <<<"$m")))
		done
		[ "$busy" -eq 0 ] && return 0
		[ "$(date +%s)" -lt "$deadline" ] || return 1
		sleep 0.2
	done
}

# Narwhal's counters (GET /metrics, the *_total lines) as a JSON object.
counters() {
	curl -s -m 5 "$url/metrics" | awk '/^narwhal_[a-z_]+_total [0-9]/ { printf "%s\t%s\n", $1, $2 }' |
		jq -R -s 'split("\n") | map(select(length > 0) | split("\t") | {key: .[0], value: (.[1] | tonumber)}) | from_entries'
}

failed_runs=0
for w in $workloads; do
	for p in $policies; do
		adm=${p%%:*} pl=${p#*:}
		label=$adm+$pl
		cfg=$work/narwhal-$w-$label.json
		log=$work/narwhal-$w-$label.log
		start_narwhal "$cfg" "$log" || { tail -n 20 "$log" >&2; nwb_die "narwhal ($label) does not serve (log in $log)"; }
		# One request through the whole path before anything is measured;
		# 200 words, inside any prefill domain narwhal-profile measures.
		code=$(curl -s -m 20 -o "$work/preflight.out" -w '%{http_code}' -H 'Content-Type: application/json' \
			-d '{"model":"'"$model"'","prompt":"'"$(printf ' word%.0s' $(seq 200))"'","max_tokens":4,"stream":true}' \
			"$url/v1/completions" || true)
		[ "$code" = 200 ] && grep -q '^data: \[DONE\]' "$work/preflight.out" ||
			nwb_die "preflight through narwhal ($label): HTTP $code $(head -c 200 "$work/preflight.out")"
		say "$w, $label: narwhal at $url"
		offset=$(offset_of "$w")
		while IFS=$'\t' read -r -u 3 tw r n scale native; do
			[ "$tw" = "$w" ] || continue
			run=$out/runs/$w/$label/rate-$r
			mkdir -p "$run"
			idle=true
			wait_idle || { idle=false; say "  the fleet was not idle after ${idle_timeout}s; measuring anyway"; }
			counters >"$run/counters-before.json"
			# Bounded twice: every request by --timeout, the whole run by
			# the window, that timeout and a margin.
			rc=0
			# shellcheck disable=SC2046
			timeout -k 5 $((window * 2 + timeout_s + 60)) "$replay" --url "$url" --model "$model" \
				$(replay_window "$traces/AzureLLMInferenceTrace_$w.csv" "$offset") \
				--max-requests "$n" --rate-scale "$scale" --slo-ttft "$slo_ttft" --slo-tpot "$slo_tpot" \
				--timeout "$timeout_s" --connect-timeout 10 --concurrency-limit 4096 --seed "$seed" \
				--quiet --out-json "$run/replay.json" --out-csv "$run/requests.csv" \
				</dev/null >"$run/replay.out" 2>&1 &
			run_bg $! || rc=$?
			counters >"$run/counters-after.json"
			jq -n --arg trace "$w" --arg policy "$label" --argjson rate "$r" --argjson requests "$n" \
				--argjson scale "$scale" --argjson native "$native" --argjson rc "$rc" \
				--argjson idle "$idle" '{trace: $trace, policy: $policy, rate: $rate, requests: $requests,
				scale: $scale, native_rps: $native, replay_status: $rc, idle_before: $idle}' >"$run/run.json"
			if [ "$rc" -ne 0 ] || [ ! -s "$run/replay.json" ]; then
				failed_runs=$((failed_runs + 1))
				say "  $r req/s: narwhal-replay exited with status $rc (see $run/replay.out)"
				continue
			fi
			jq -r --arg r "$r" '.runs[0] | "  \($r) req/s (\(.schedule.requests) requests): attainment " +
				"\(.slo.attainment * 1000 | round / 10)%, " +
				"\((.counts.status["429"] // 0) + (.counts.status["400"] // 0)) refused, " +
				"TTFT p99 \(.ttft_s.p99 // null | if . == null then "-" else . * 100 | round / 100 end)s, " +
				"late \(.counts.late)"' "$run/replay.json" |
				while read -r l; do say "$l"; done
		done 3<"$work/schedule.tsv"
		curl -s -m 5 "$url/narwhal/state" >"$work/state-$w-$label.json" || true
		kill -0 "$nw_pid" 2>/dev/null || say "NARWHAL EXITED during the runs (see $log)"
		stop_narwhal
		gzip -f "$log"
	done
done
jq --arg load "$(cut -d' ' -f1-3 /proc/loadavg)" --argjson secs $(($(date +%s) - t0)) \
	'. + {loadavg_end: $load, wall_s: $secs}' "$work/meta.json" >"$work/meta.json.tmp" &&
	mv "$work/meta.json.tmp" "$work/meta.json"
nwb_cleanup
rm -rf "${out:?}/bin" "$out/plugins" "$out/pids" "$out/preflight.out"

"$here/report.sh" "$out"
[ "$failed_runs" -eq 0 ] || { echo "$failed_runs run(s) did not complete" >&2; exit 1; }
