#!/bin/bash
# The role-control evaluation (issue 13; bench/controller/README.md): the
# reactive controller against every static split of an eight-engine fleet
# and against all engines aggregate, on the Azure code trace, the conv
# trace and a mix that alternates them, at several rates, in narwhal-replay's
# what-if mode; then one rate of the mix through the real daemon in front of
# narwhal-sim, reactive and the best static split, beside the what-if runs of
# the same configuration (their agreement).
#
#   bench/controller/run.sh [narwhal [narwhal-sim [narwhal-replay [narwhal-profile]]]]
#   bench/controller/run.sh --report OUT    # the table and plot of a run again
#
# Run from the build directory (defaults ./narwhal, ./narwhal-sim,
# ./narwhal-replay, ./narwhal-profile; plugins from ./plugins/.libs unless
# NARWHAL_PLUGIN_DIR). The knobs (environment) are in the README.
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
slo=${SLO:-default}
# The reactive settings the evaluation runs as "reactive" (README.md, "The
# reactive settings"); "reactive-defaults" runs the spec's defaults.
tuned='{"reactive": {"window_s": 30, "evidence_span_s": 15, "evidence_max_span_s": 30, "step_s": 2,
 "confirmations": 2, "utilization": 0.9, "movement_margin": 0.1}, "thresholds": {"sustained_intervals": 2, "cooldown_s": 4}}'
case $slo in
default)
	slo_ttft=${SLO_TTFT:-1.0} slo_tpot=${SLO_TPOT:-0.1} mix_ratio=${MIX_RATIO:-1.85}
	rates_code=${RATES_CODE:-$(q "4 6 8 10 12 14 16 18 20 22 24" "8 16")}
	rates_conv=${RATES_CONV:-$(q "20 25 30 35 40 44 48 52 56" "30 44")}
	rates_mix=${RATES_MIX:-$(q "30 34 38 42 46 50 54 58 62 66" "42 54")}
	rates_code_steady=${RATES_CODE_STEADY:-$(q "40 50 60 65 70 75 80 85 90" "60 80")}
	rates_conv_steady=${RATES_CONV_STEADY:-$(q "30 35 40 44 48 52 56 60" "44 52")}
	daemon_rate=${DAEMON_RATE:-50} ;;
tight)
	slo_ttft=${SLO_TTFT:-1.0} slo_tpot=${SLO_TPOT:-0.05} mix_ratio=${MIX_RATIO:-2.0}
	rates_code=${RATES_CODE:-$(q "2 4 6 8 10 12 14 16 18 20" "6 14")}
	rates_conv=${RATES_CONV:-$(q "10 15 20 25 28 31 34 37 40" "20 31")}
	rates_mix=${RATES_MIX:-$(q "20 24 28 32 36 40 44 48 52" "32 44")}
	rates_code_steady=${RATES_CODE_STEADY:-$(q "30 40 50 60 65 70 75 80 85" "50 70")}
	rates_conv_steady=${RATES_CONV_STEADY:-$(q "15 20 25 28 31 34 37 40 45" "25 34")}
	daemon_rate=${DAEMON_RATE:-40} ;;
*) echo "$0: SLO: default (TTFT 1 s, TPOT 0.1 s) or tight (TPOT 0.05 s)" >&2; exit 1 ;;
esac
workloads=${WORKLOADS:-code conv mix code-steady conv-steady}
policies=${POLICIES:-reactive reactive-defaults static-1 static-2 static-3 static-4 static-5 static-6 static-7 aggregate reactive@3 reactive@5 reactive@7}
phase_s=${PHASE_S:-$(q 180 60)}
repeat=${REPEAT:-$(q 3 2)}
steady_s=${STEADY_S:-$(q 600 120)}
n_engines=${ENGINES:-8}
reactive_start=${REACTIVE_START:-4}
reactive_settings=${REACTIVE_SETTINGS-$tuned}
preset=${PRESET:-llama2-70b-tp8-h100}
max_output=${MAX_OUTPUT:-512}
# Requests admitted at once: what the fleet holds (8 engines of at most 256
# streams), so that the connection ceiling (512 by default) is not what
# limits any policy.
max_connections=${MAX_CONNECTIONS:-$((256 * ${ENGINES:-8}))}
profile=${PROFILE:-measure}
# The decode grid up to the 256 streams a narwhal-sim engine runs at once
# (its max_num_seqs): the splits that put many streams on few decode
# engines lie inside the measured domain (spec 7.3) only when it was
# measured there.
profile_flags=${PROFILE_FLAGS-$(q "--max-decode-streams 256" "--quick --max-decode-streams 256")}
profile_timeout=${PROFILE_TIMEOUT:-5400}
daemon=${DAEMON:-1}
daemon_static=${DAEMON_STATIC:-best}
daemon_repeat=${DAEMON_REPEAT:-1}
time_scale=${TIME_SCALE:-4}
seed=${SEED:-1}
plugin_dir=${NARWHAL_PLUGIN_DIR:-$(dirname "$narwhal")/plugins/.libs}

nwb_need jq curl awk timeout
is_num() { case $1 in '' | *[!0-9.]* | *.*.* | .*) return 1 ;; esac; }
case $quick$max_output$max_connections$seed$phase_s$repeat$steady_s$daemon_repeat$n_engines$reactive_start$profile_timeout in
*[!0-9]*) nwb_die "QUICK, MAX_OUTPUT, MAX_CONNECTIONS, SEED, PHASE_S, REPEAT, STEADY_S, DAEMON_REPEAT, ENGINES, REACTIVE_START, PROFILE_TIMEOUT: integers" ;;
esac
for v in "$slo_ttft" "$slo_tpot" "$mix_ratio" "$time_scale" "$daemon_rate"; do
	is_num "$v" || nwb_die "SLO_TTFT, SLO_TPOT, MIX_RATIO, TIME_SCALE, DAEMON_RATE: numbers"
done
[ "$n_engines" -ge 2 ] && [ "$n_engines" -le 64 ] || nwb_die "ENGINES: 2 to 64"
[ "$reactive_start" -ge 1 ] && [ "$reactive_start" -lt "$n_engines" ] || nwb_die "REACTIVE_START: 1 to ENGINES - 1"
[ "$phase_s" -ge 10 ] && [ "$phase_s" -le 3600 ] || nwb_die "PHASE_S: 10 to 3600 seconds"
[ "$steady_s" -ge 10 ] && [ "$steady_s" -le 7200 ] || nwb_die "STEADY_S: 10 to 7200 seconds"
[ "$repeat" -ge 1 ] && [ "$repeat" -le 20 ] && [ "$daemon_repeat" -ge 1 ] && [ "$daemon_repeat" -le 20 ] ||
	nwb_die "REPEAT, DAEMON_REPEAT: 1 to 20"
awk -v f="$time_scale" 'BEGIN { exit !(f >= 1 && f <= 50) }' || nwb_die "TIME_SCALE: 1 to 50"
case $daemon in 0 | 1) ;; *) nwb_die "DAEMON: 0 or 1" ;; esac
for w in $workloads; do
	case $w in code | conv | mix | code-steady | conv-steady) ;; *) nwb_die "WORKLOADS: code, conv, mix, code-steady, conv-steady" ;; esac
done
rates_of() {
	case $1 in
	code) echo "$rates_code" ;; conv) echo "$rates_conv" ;; mix) echo "$rates_mix" ;;
	code-steady) echo "$rates_code_steady" ;; conv-steady) echo "$rates_conv_steady" ;;
	esac
}
for w in $workloads; do
	n_rates=$(rates_of "$w" | wc -w)
	[ "$n_rates" -ge 1 ] && [ "$n_rates" -le 24 ] ||
		nwb_die "RATES_$(echo "${w^^}" | tr - _): 1 to 24 rates"
	for r in $(rates_of "$w"); do
		is_num "$r" && awk -v r="$r" 'BEGIN { exit !(r > 0 && r <= 1000) }' ||
			nwb_die "RATES_$(echo "${w^^}" | tr - _): numbers above 0, at most 1000 (got $r)"
	done
done
for p in $policies; do
	case $p in
	reactive | reactive-defaults | aggregate | aggregate-predictive) ;;
	static-[1-9] | static-[1-9][0-9] | reactive@[1-9] | reactive@[1-9][0-9])
		[ "${p#*[-@]}" -lt "$n_engines" ] || nwb_die "POLICIES: $p needs at least one decode engine" ;;
	*) nwb_die "POLICIES: reactive, reactive-defaults, static-K (K prefill engines), reactive@K (reactive starting at K), aggregate, aggregate-predictive (got $p)" ;;
	esac
done
if [ -n "$reactive_settings" ]; then
	jq -e 'type == "object"' >/dev/null 2>&1 <<<"$reactive_settings" ||
		nwb_die "REACTIVE_SETTINGS: a JSON object merged into the configuration's controller"
fi
for b in "$narwhal" "$sim" "$replay"; do [ -x "$b" ] || nwb_die "no program at $b"; done
[ -d "$plugin_dir" ] || nwb_die "no plugin directory $plugin_dir (set NARWHAL_PLUGIN_DIR)"
for so in admission-predictive admission-open placement-slo-cost placement-least-loaded \
	controller-reactive controller-static dialect-vllm; do
	[ -f "$plugin_dir/$so.so" ] || nwb_die "$plugin_dir/$so.so is not built"
done
case $profile in
measure) [ -x "$profiler" ] || nwb_die "no narwhal-profile at $profiler (or PROFILE=STORE, a store measured before)" ;;
*) [ -f "$profile" ] || nwb_die "PROFILE: measure, or the path of a store measured before on this fleet" ;;
esac

src_dir=$(cd "$here/../.." && pwd)
traces=${TRACES:-}
if [ -z "$traces" ]; then
	for d in "$src_dir/../shared/traces" \
		"$(cd "$src_dir" && git rev-parse --path-format=absolute --git-common-dir 2>/dev/null)/../../shared/traces"; do
		if [ -f "$d/AzureLLMInferenceTrace_code.csv" ]; then traces=$(cd "$d" && pwd); break; fi
	done
fi
for w in code conv; do
	[ -f "${traces:-/nonexistent}/AzureLLMInferenceTrace_$w.csv" ] ||
		nwb_die "AzureLLMInferenceTrace_$w.csv not found (set TRACES to the folder that holds the Azure traces)"
done
context=$("$sim" --list-presets | awk -v p="$preset" '$1 == p { sub(/.*max_model_len=/, ""); print $1 + 0 }')
[ -n "$context" ] || nwb_die "PRESET: $preset is not one of narwhal-sim's presets"
max_prompt=${MAX_PROMPT:-$((context - (max_output > 512 ? max_output : 512)))}
case $max_prompt in '' | *[!0-9]*) nwb_die "MAX_PROMPT: an integer" ;; esac
[ "$max_prompt" -ge 1 ] && [ $((max_prompt + max_output)) -le "$context" ] ||
	nwb_die "MAX_PROMPT + MAX_OUTPUT must be at most $preset's context, $context tokens"
timeout_s=$(awk -v f="$slo_ttft" -v p="$slo_tpot" -v n="$max_output" \
	'BEGIN { t = f + n * p + 5; printf "%d", t == int(t) ? t : int(t) + 1 }')

out=${OUT:-$(mktemp -d /tmp/narwhal-controller.XXXXXX)}
mkdir -p "$out/bin" "$out/plugins" "$out/runs" "$out/configs" "$out/workloads"
cp "$narwhal" "$out/bin/narwhal"
cp "$sim" "$out/bin/narwhal-sim"
cp "$replay" "$out/bin/narwhal-replay"
[ "$profile" != measure ] || cp "$profiler" "$out/bin/narwhal-profile"
cp "$plugin_dir"/*.so "$out/plugins/"
narwhal=$out/bin/narwhal
sim=$out/bin/narwhal-sim
replay=$out/bin/narwhal-replay
profiler=$out/bin/narwhal-profile
plugin_dir=$out/plugins
work=$out
: >"$work/pids"
trap 'st=$?; nwb_cleanup; exit $st' EXIT
trap 'exit 130' INT TERM
t0=$(date +%s)
say() { printf '[%4ds] %s\n' $(($(date +%s) - t0)) "$*"; }

# Wait for a background job of ours, forgetting it afterwards.
run_bg() {
	local st=0
	nwb_remember "$1"
	wait "$1" || st=$?
	sed -i "/^$1\$/d" "$work/pids"
	return $st
}

# --- the fleet: one narwhal-sim of n_engines engines, ids e0.. (a store is
# keyed by engine id, and every policy gives the same engines other roles).
start_sim() { # time-scale fleet-file log: sets sim_pid
	"$sim" --engines "$n_engines" --preset "$preset" --base-port 0 --id-prefix sim- --seed "$seed" \
		--time-scale "$1" --log-level warning --fleet-out "$2" >/dev/null 2>"$3" &
	sim_pid=$!
	nwb_remember "$sim_pid"
	local i=0
	until grep -q engines "$2" 2>/dev/null; do
		i=$((i + 1))
		[ $i -le 200 ] && kill -0 "$sim_pid" 2>/dev/null || nwb_die "narwhal-sim did not start (log in $3)"
		sleep 0.05
	done
}
stop_pid() {
	kill -TERM "$1" 2>/dev/null || true
	local i=0
	while kill -0 "$1" 2>/dev/null && [ $i -lt 100 ]; do
		sleep 0.1
		i=$((i + 1))
	done
	kill -KILL "$1" 2>/dev/null || true
	wait "$1" 2>/dev/null || true
	sed -i "/^$1\$/d" "$work/pids"
}

# The daemon's configuration for a policy: $1 policy, $2 fleet file, $3
# store, $4 port, $5 time scale (every time of the SLO and the controller
# divided by it; 1 for the what-if sweeps).
write_config() {
	local p=$1 np adm=predictive pl=slo-cost ctl=static
	case $p in
	reactive | reactive-defaults) np=$reactive_start ctl=reactive ;;
	reactive@*) np=${p#reactive@} ctl=reactive ;;
	static-*) np=${p#static-} ;;
	aggregate) np=$reactive_start adm=open pl=least-loaded ;;
	aggregate-predictive) np=$reactive_start ;;
	esac
	jq -n --argjson port "$4" --arg adm "$adm" --arg pl "$pl" --arg ctl "$ctl" \
		--argjson np "$np" --argjson ttft "$slo_ttft" --argjson tpot "$slo_tpot" \
		--argjson ftt "$timeout_s" --arg store "$3" --argjson f "$5" --argjson conns "$max_connections" \
		--argjson extra "$(case $p in reactive | reactive@*) echo "${reactive_settings:-{\}}" ;; *) echo '{}' ;; esac)" \
		--slurpfile fleet "$2" '
	def scaled: with_entries(if (.key | endswith("_s")) and (.value | type) == "number"
		then .value /= $f else . end);
	($fleet[0].engines | to_entries | map(.value + {id: "e\(.key)",
		role: (if .key < $np then "prefill" else "decode" end)})) as $engines
	| ({monitor_interval_s: 1.0,
	    reactive: {window_s: 120.0, step_s: 5.0, evidence_span_s: 60.0, evidence_max_span_s: 120.0},
	    thresholds: {cooldown_s: 10.0, dwell_s: 0.0}} * $extra) as $c
	| {server: {host: "127.0.0.1", port: $port}, log: {level: "warning"},
	   slo: ({ttft_s: $ttft, tpot_s: $tpot} | scaled),
	   serving: {admission: $adm, max_connections: $conns},
	   engine: {first_token_timeout_s: $ftt},
	   plugins: ({placement: {name: $pl}}
		+ (if $adm == "predictive" then {admission: {config: {without_profiles: "open"}}} else {} end)),
	   controller: ($c + {policy: $ctl} | scaled
		| .reactive |= scaled | .thresholds |= scaled),
	   profiles: {path: $store},
	   fleet: {model: $fleet[0].model, engines: $engines}}' >"$6"
}

# --- the profile store, measured once at time scale 1.
store=$out/profiles.json
profile_s=0
if [ "$profile" = measure ]; then
	start_sim 1 "$work/fleet.json" "$work/sim.log"
	write_config static-$reactive_start "$work/fleet.json" "$store" "$(nwb_free_port)" 1 "$work/profile-config.json"
	say "profiling $n_engines $preset engines: narwhal-profile ${profile_flags:-(full sweep)} (at most ${profile_timeout}s)"
	p0=$(date +%s)
	# shellcheck disable=SC2086
	NARWHAL_PLUGIN_DIR=$plugin_dir timeout -k 5 "$profile_timeout" "$profiler" \
		--config "$work/profile-config.json" $profile_flags --out "$store" >"$work/profile.log" 2>&1 &
	run_bg $! || { tail -n 20 "$work/profile.log" >&2; nwb_die "narwhal-profile failed (log in $work/profile.log)"; }
	profile_s=$(($(date +%s) - p0))
	stop_pid "$sim_pid"
else
	cp "$profile" "$store"
	# The fleet file the configurations are written from: any narwhal-sim
	# fleet of the preset (the what-if mode calls no address).
	start_sim 1 "$work/fleet.json" "$work/sim.log"
	stop_pid "$sim_pid"
fi
for i in $(seq 0 $((n_engines - 1))); do
	jq -e --arg id "e$i" 'any(.engines[]; .engine == $id)' "$store" >/dev/null ||
		nwb_die "the store $store has no profile for engine e$i"
done

# --- the workloads. The traces: each whole (after the prompt cap), its
# gaps divided by the scale that makes it arrive at the rate asked. The
# mix: PHASE_S of code, then PHASE_S of conv, REPEAT times, Poisson
# arrivals with the traces' (prompt, output) pairs; the code phase offers
# MIX_RATIO times the conv phase's rate, the mean of the two is the rate.
# The steady ones: one of the mix's phases alone, STEADY_S at the rate.
caps="--max-prompt-tokens $max_prompt --max-output-tokens $max_output"
# shellcheck disable=SC2086
for w in code conv; do
	line=$("$replay" --url http://127.0.0.1:9 --model m --trace "$traces/AzureLLMInferenceTrace_$w.csv" $caps --dry-run) ||
		nwb_die "narwhal-replay --dry-run failed on the $w trace"
	native=$(echo "$line" | sed -n 's/.*(\([0-9.]*\) req\/s).*/\1/p')
	is_num "$native" || nwb_die "no rate in the dry run of the $w trace: $line"
	echo "$native" >"$work/native-$w"
	# The share of the trace's requests the prompt cap keeps: a phase
	# drawing its lengths from the trace skips the others too.
	awk -F, -v m="$max_prompt" 'NR > 1 { n++; if ($2 + 0 <= m) k++ } END { printf "%.6f\n", k / n }' \
		"$traces/AzureLLMInferenceTrace_$w.csv" >"$work/kept-$w"
done
native_of() { cat "$work/native-$1"; }
mix_file() { # rate phase-seconds repeat file
	jq -n --argjson r "$1" --argjson k "$mix_ratio" --argjson d "$2" --argjson n "$3" \
		--argjson kc "$(cat "$work/kept-code")" --argjson kv "$(cat "$work/kept-conv")" --arg t "$traces" '
	(2 * $r * $k / (1 + $k)) as $code | (2 * $r / (1 + $k)) as $conv
	| {comment: "bench/controller: \($d) s of code, \($d) s of conv, \($n) times; \($code) and \($conv) req/s offered after the prompt cap",
	   repeat: $n, phases: [
		{name: "code", rate: ($code / $kc), duration: $d, lengths: "trace:\($t)/AzureLLMInferenceTrace_code.csv"},
		{name: "conv", rate: ($conv / $kv), duration: $d, lengths: "trace:\($t)/AzureLLMInferenceTrace_conv.csv"}]}' >"$4"
}
steady_file() { # trace rate file
	jq -n --arg w "$1" --argjson r "$2" --argjson k "$(cat "$work/kept-$1")" --argjson d "$steady_s" --arg t "$traces" '
	{comment: "bench/controller: \($d) s of Poisson arrivals at \($r) req/s offered after the prompt cap, lengths from the \($w) trace",
	 phases: [{name: $w, rate: ($r / $k), duration: $d, lengths: "trace:\($t)/AzureLLMInferenceTrace_\($w).csv"}]}' >"$3"
}
src_opts() { # workload rate: narwhal-replay's source options
	case $1 in
	code | conv)
		echo "--trace $traces/AzureLLMInferenceTrace_$1.csv --rate-scale $(awk -v r="$2" -v x="$(native_of "$1")" 'BEGIN { printf "%.6g", r / x }')" ;;
	*) echo "--workload $out/workloads/$1-$2.json" ;;
	esac
}
for w in $workloads; do
	for r in $(rates_of "$w"); do
		case $w in
		mix) mix_file "$r" "$phase_s" "$repeat" "$out/workloads/mix-$r.json" ;;
		*-steady) steady_file "${w%-steady}" "$r" "$out/workloads/$w-$r.json" ;;
		esac
	done
done

for p in $policies; do write_config "$p" "$work/fleet.json" "$store" 9 1 "$out/configs/$p.json"; done
model=$(jq -r .model "$work/fleet.json")

jq -n --arg preset "$preset" --argjson n "$n_engines" --argjson ttft "$slo_ttft" --argjson tpot "$slo_tpot" \
	--argjson max_prompt "$max_prompt" --argjson max_output "$max_output" --argjson timeout "$timeout_s" \
	--arg policies "$policies" --arg workloads "$workloads" --argjson quick "$quick" \
	--arg rc "$rates_code" --arg rv "$rates_conv" --arg rm "$rates_mix" --arg rcs "$rates_code_steady" \
	--arg rvs "$rates_conv_steady" --arg slo "$slo" --argjson steady "$steady_s" \
	--argjson phase "$phase_s" --argjson repeat "$repeat" --argjson ratio "$mix_ratio" \
	--argjson start "$reactive_start" --argjson settings "${reactive_settings:-{\}}" \
	--arg profile "$profile" --arg profile_flags "$profile_flags" --argjson profile_s "$profile_s" \
	--argjson seed "$seed" --argjson nc "$(native_of code)" --argjson nv "$(native_of conv)" \
	--arg src "$(cd "$src_dir" && git rev-parse --short HEAD 2>/dev/null || echo unknown)" \
	--arg dirty "$(cd "$src_dir" && git status --porcelain 2>/dev/null | grep -vc '^??' || true)" \
	--arg machine "$(nproc) CPUs, $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)" \
	--arg when "$(date -u +%Y-%m-%dT%H:%MZ)" '{
	preset: $preset, engines: $n, slo_ttft_s: $ttft, slo_tpot_s: $tpot,
	max_prompt_tokens: $max_prompt, max_output_tokens: $max_output, timeout_s: $timeout,
	policies: ($policies | split(" ")), workloads: ($workloads | split(" ")),
	slo: $slo,
	rates: {code: ($rc | split(" ") | map(tonumber)), conv: ($rv | split(" ") | map(tonumber)),
	        mix: ($rm | split(" ") | map(tonumber)), "code-steady": ($rcs | split(" ") | map(tonumber)),
	        "conv-steady": ($rvs | split(" ") | map(tonumber))},
	native_rps: {code: $nc, conv: $nv},
	mix: {phase_s: $phase, repeat: $repeat, ratio: $ratio}, steady_s: $steady,
	reactive_start: $start, reactive_settings: $settings, quick: ($quick == 1),
	profile: (if $profile == "measure" then "narwhal-profile \($profile_flags)" else "given: \($profile)" end),
	profile_s: $profile_s, seed: $seed, source: $src, modified_files: ($dirty | tonumber? // 0),
	machine: $machine, date: $when
}' >"$out/meta.json"

# --- the what-if sweeps: one narwhal-replay --what-if per workload, policy
# and rate, each on a fresh fleet.
whatif() { # config source-options out-json [extra options]: one what-if run
	local cfg=$1 src=$2 json=$3
	shift 3
	# The source options come after the defaults, so they may set others.
	# shellcheck disable=SC2086
	NARWHAL_PLUGIN_DIR=$plugin_dir timeout -k 5 600 "$replay" --what-if "$cfg" --sim-preset "$preset" \
		--sim-seed "$seed" $caps --slo-ttft "$slo_ttft" --slo-tpot "$slo_tpot" \
		--timeout "$timeout_s" --seed "$seed" $src --quiet --out-json "$json" "$@" </dev/null
}
say "what-if: ${n_engines} $preset engines, workloads $workloads, policies $policies; output in $out"
w0=$(date +%s)
failed=0
for w in $workloads; do
	for p in $policies; do
		mkdir -p "$out/runs/$w/$p"
		for r in $(rates_of "$w"); do
			extra=
			case $p in aggregate*) extra=--aggregate ;; esac
			# shellcheck disable=SC2086
			whatif "$out/configs/$p.json" "$(src_opts "$w" "$r")" "$out/runs/$w/$p/rate-$r.json" $extra \
				>"$out/runs/$w/$p/rate-$r.out" 2>&1 ||
				{ failed=$((failed + 1)); say "  $w $p $r: narwhal-replay failed (see $out/runs/$w/$p/rate-$r.out)"; }
		done
	done
	say "  $w done"
done
whatif_s=$(($(date +%s) - w0))
say "what-if sweeps: ${whatif_s}s"

# --- the real daemon: one rate of the mix, reactive and the best static
# split, through narwhal in front of narwhal-sim at TIME_SCALE, and the
# what-if mode on the same (time-scaled) configuration.
best_static() { # the static split that sustains the highest mix rate at >= 90% (report.sh's headline)
	"$here/report.sh" "$out" >/dev/null 2>&1 || true
	jq -r 'select(.workload == "mix") | .best_static // empty' "$out/headline.jsonl" 2>/dev/null
}
daemon_s=0
if [ "$daemon" = 1 ]; then
	d0=$(date +%s)
	[ "$daemon_static" = best ] && daemon_static=$(best_static)
	[ -n "$daemon_static" ] || daemon_static=static-$reactive_start
	dd=$out/daemon
	mkdir -p "$dd"
	# The store at the time scale: narwhal-sim --time-scale F runs every
	# model duration F times faster, so narwhal-profile would measure each
	# time coefficient divided by F.
	jq --argjson f "$time_scale" '.engines |= map(
		.prefill |= (.a_s /= $f | .b_s /= $f | .c_s /= $f)
		| .decode |= (.d0_s /= $f | .d1_s /= $f | .d2_s /= $f)
		| if .handoff then .handoff |= (.setup_s /= $f | .per_token_s /= $f) else . end)' \
		"$store" >"$dd/profiles.json"
	mix_file "$daemon_rate" "$phase_s" "$daemon_repeat" "$dd/mix.json"
	# The same arrivals F times faster, the targets F times tighter.
	scaled_slo="--slo-ttft $(awk -v a="$slo_ttft" -v f="$time_scale" 'BEGIN { print a / f }')"
	scaled_slo="$scaled_slo --slo-tpot $(awk -v a="$slo_tpot" -v f="$time_scale" 'BEGIN { print a / f }')"
	dopts="--workload $dd/mix.json $caps --timeout $timeout_s --seed $seed --quiet"
	span=$((2 * phase_s * daemon_repeat))
	start_sim "$time_scale" "$dd/fleet.json" "$dd/sim.log"
	for p in reactive "$daemon_static"; do
		port=$(nwb_free_port)
		write_config "$p" "$dd/fleet.json" "$dd/profiles.json" "$port" "$time_scale" "$dd/$p.json"
		write_config "$p" "$dd/fleet.json" "$store" "$port" 1 "$dd/$p-unscaled.json"
		NARWHAL_PLUGIN_DIR=$plugin_dir "$narwhal" --config "$dd/$p.json" 2>"$dd/narwhal-$p.log" &
		nw_pid=$!
		nwb_remember "$nw_pid"
		url=http://127.0.0.1:$port
		nwb_wait_http "$url/v1/models" 20 || nwb_die "narwhal ($p) does not serve (log in $dd/narwhal-$p.log)"
		i=0
		until curl -s -m 2 "$url/narwhal/health" | jq -e '.status == "ok"' >/dev/null 2>&1; do
			i=$((i + 1))
			[ $i -le 100 ] || nwb_die "narwhal's engines are not all in placement ($p)"
			sleep 0.1
		done
		say "real daemon: the mix at $daemon_rate req/s, $p, narwhal-sim --time-scale $time_scale (about $(awk -v s="$span" -v f="$time_scale" 'BEGIN { printf "%d", s / f }')s)"
		rc=0
		# shellcheck disable=SC2086
		timeout -k 5 $((span + timeout_s + 120)) "$replay" --url "$url" --model "$model" $dopts \
			--rate-scale "$time_scale" $scaled_slo --out-json "$dd/real-$p.json" </dev/null >"$dd/real-$p.out" 2>&1 &
		run_bg $! || rc=$?
		curl -s -m 5 "$url/narwhal/state" >"$dd/real-$p-state.json" || echo '{}' >"$dd/real-$p-state.json"
		stop_pid "$nw_pid"
		[ $rc = 0 ] || { failed=$((failed + 1)); say "  the real replay of $p failed (status $rc, see $dd/real-$p.out)"; }
		# The what-if mode on the same configuration at the same scale,
		# and on the unscaled one at time scale 1 (as the sweeps run).
		# shellcheck disable=SC2086
		whatif "$dd/$p.json" "$dopts --rate-scale $time_scale $scaled_slo" "$dd/whatif-$p.json" \
			--sim-time-scale "$time_scale" >"$dd/whatif-$p.out" 2>&1 ||
			{ failed=$((failed + 1)); say "  the what-if run of $p failed (see $dd/whatif-$p.out)"; }
		whatif "$dd/$p-unscaled.json" "$dopts" "$dd/whatif1-$p.json" >"$dd/whatif1-$p.out" 2>&1 ||
			{ failed=$((failed + 1)); say "  the what-if run of $p at time scale 1 failed (see $dd/whatif1-$p.out)"; }
	done
	stop_pid "$sim_pid"
	jq -n --arg s "$daemon_static" --argjson r "$daemon_rate" --argjson f "$time_scale" \
		--argjson n "$daemon_repeat" --argjson d "$phase_s" \
		'{static: $s, rate: $r, time_scale: $f, repeat: $n, phase_s: $d}' >"$dd/meta.json"
	daemon_s=$(($(date +%s) - d0))
fi

jq --argjson w "$whatif_s" --argjson d "$daemon_s" --argjson t "$(($(date +%s) - t0))" \
	--arg load "$(cut -d' ' -f1-3 /proc/loadavg)" \
	'. + {whatif_s: $w, daemon_s: $d, wall_s: $t, loadavg_end: $load}' "$out/meta.json" >"$out/meta.json.new"
mv "$out/meta.json.new" "$out/meta.json"
"$here/report.sh" "$out"
[ "$failed" = 0 ] || { say "$failed run(s) failed"; exit 1; }
