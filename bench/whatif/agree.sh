#!/bin/bash
# One point of agreement between narwhal-replay's what-if mode and the real
# daemon (issue 13, "A what-if mode under virtual time": within 5% of the
# real daemon in front of narwhal-sim on SLO attainment and goodput).
#
# The same window of an Azure trace, at one rate, is replayed twice with
# the same narwhal-replay options: once against narwhal in front of a
# narwhal-sim fleet (--url), once with --what-if and that same daemon
# configuration (same preset, same seed, narwhal-sim's --time-scale as
# --sim-time-scale). Prints both summaries side by side and the relative
# differences. See bench/whatif/README.md.
#
#   bench/whatif/agree.sh [narwhal [narwhal-sim [narwhal-replay [narwhal-profile]]]]
#
# Run from the build directory (defaults ./narwhal, ./narwhal-sim,
# ./narwhal-replay, ./narwhal-profile; plugins from ./plugins/.libs unless
# NARWHAL_PLUGIN_DIR). Environment (defaults in brackets):
#   POLICY [predictive:slo-cost]   admission:placement
#   CONTROLLER [static]            controller.policy
#   PRESET [llama2-70b-tp8-h100], PREFILL [2], DECODE [2]   the fleet
#   TRACE [conv], OFFSET [600], RATE [20], WINDOW [60]   AzureLLMInferenceTrace_<TRACE>.csv,
#                                  trace seconds skipped, requests per second, seconds of arrivals
#   SLO_TTFT [1.0], SLO_TPOT [0.1], MAX_OUTPUT [512], MAX_PROMPT [context - 512]
#   TIME_SCALE [1]                 narwhal-sim's --time-scale (and --sim-time-scale)
#   PROFILE [measure]              measure: narwhal-profile --quick measures the fleet; none:
#                                  no store (predictive then admits unpriced); or the path of a
#                                  store measured before on the same fleet, copied
#   SEED [1]                       narwhal-sim's and narwhal-replay's seed
#   TRACES                         the folder of the traces [the source tree's ../shared/traces]
#   OUT                            output directory [a new /tmp/narwhal-whatif-agree.*]
set -eu
export LC_ALL=C

here=$(cd "$(dirname "$0")" && pwd)
. "$here/../router/common.sh"

narwhal=${1:-./narwhal}
sim=${2:-./narwhal-sim}
replay=${3:-./narwhal-replay}
profiler=${4:-./narwhal-profile}
policy=${POLICY:-predictive:slo-cost}
controller=${CONTROLLER:-static}
preset=${PRESET:-llama2-70b-tp8-h100}
n_prefill=${PREFILL:-2}
n_decode=${DECODE:-2}
trace=${TRACE:-conv}
offset=${OFFSET:-600}
rate=${RATE:-20}
window=${WINDOW:-60}
slo_ttft=${SLO_TTFT:-1.0}
slo_tpot=${SLO_TPOT:-0.1}
max_output=${MAX_OUTPUT:-512}
time_scale=${TIME_SCALE:-1}
profile=${PROFILE:-measure}
seed=${SEED:-1}
plugin_dir=${NARWHAL_PLUGIN_DIR:-$(dirname "$narwhal")/plugins/.libs}

nwb_need jq curl awk timeout
for b in "$narwhal" "$sim" "$replay"; do [ -x "$b" ] || nwb_die "no program at $b"; done
case $profile in measure | none) ;; *) [ -f "$profile" ] || nwb_die "PROFILE: measure, none or a store file" ;; esac
[ "$profile" != measure ] || [ -x "$profiler" ] || nwb_die "no narwhal-profile at $profiler"
case $n_prefill$n_decode$window$offset$max_output$seed in *[!0-9]*) nwb_die "PREFILL, DECODE, WINDOW, OFFSET, MAX_OUTPUT, SEED: integers" ;; esac
src_dir=$(cd "$here/../.." && pwd)
traces=${TRACES:-}
if [ -z "$traces" ]; then
	for d in "$src_dir/../shared/traces" \
		"$(cd "$src_dir" && git rev-parse --path-format=absolute --git-common-dir 2>/dev/null)/../../shared/traces"; do
		if [ -f "$d/AzureLLMInferenceTrace_$trace.csv" ]; then traces=$(cd "$d" && pwd); break; fi
	done
fi
trace_file=${traces:-/nonexistent}/AzureLLMInferenceTrace_$trace.csv
[ -f "$trace_file" ] || nwb_die "AzureLLMInferenceTrace_$trace.csv not found (set TRACES)"
context=$("$sim" --list-presets | awk -v p="$preset" '$1 == p { sub(/.*max_model_len=/, ""); print $1 + 0 }')
[ -n "$context" ] || nwb_die "PRESET: $preset is not a narwhal-sim preset"
max_prompt=${MAX_PROMPT:-$((context - (max_output > 512 ? max_output : 512)))}
timeout_s=$(awk -v f="$slo_ttft" -v p="$slo_tpot" -v n="$max_output" \
	'BEGIN { t = f + n * p + 5; printf "%d", t == int(t) ? t : int(t) + 1 }')

out=${OUT:-$(mktemp -d /tmp/narwhal-whatif-agree.XXXXXX)}
mkdir -p "$out"
work=$out
: >"$work/pids"
trap 'st=$?; nwb_cleanup; exit $st' EXIT
trap 'exit 130' INT TERM
say() { printf '%s\n' "$*"; }

# --- the fleet and the daemon's configuration.
n_engines=$((n_prefill + n_decode))
"$sim" --engines "$n_engines" --preset "$preset" --base-port 0 --id-prefix sim- --seed "$seed" \
	--time-scale "$time_scale" --log-level warning --fleet-out "$work/fleet.json" \
	>/dev/null 2>"$work/sim.log" &
nwb_remember $!
i=0
until grep -q engines "$work/fleet.json" 2>/dev/null; do
	i=$((i + 1))
	[ $i -le 100 ] || nwb_die "narwhal-sim did not start (log in $work/sim.log)"
	sleep 0.05
done
engines_json=$(jq -c --argjson np "$n_prefill" '[.engines | to_entries[] | .value + (
	if .key < $np then {id: "p\(.key)", role: "prefill"} else {id: "d\(.key - $np)", role: "decode"} end)]' \
	"$work/fleet.json")
model=$(jq -r .model "$work/fleet.json")
store=$out/profiles.json
port=$(nwb_free_port)
# As bench/admission: the first-token limit is the request timeout, so that
# a slow decode shows as latency rather than as failed legs.
jq -n --argjson port "$port" --arg adm "${policy%%:*}" --arg pl "${policy#*:}" \
	--arg ctl "$controller" --argjson ttft "$slo_ttft" --argjson tpot "$slo_tpot" \
	--argjson ftt "$timeout_s" --arg store "$store" --arg model "$model" \
	--argjson engines "$engines_json" '{
	server: {host: "127.0.0.1", port: $port}, log: {level: "warning"},
	slo: {ttft_s: $ttft, tpot_s: $tpot}, serving: {admission: $adm},
	engine: {first_token_timeout_s: $ftt},
	plugins: ({placement: {name: $pl}}
		+ (if $adm == "predictive" then {admission: {config: {without_profiles: "open"}}} else {} end)),
	controller: {policy: $ctl}, profiles: {path: $store},
	fleet: {model: $model, engines: $engines}
}' >"$out/config.json"

case $profile in
measure)
	say "profiling the fleet (narwhal-profile --quick)"
	NARWHAL_PLUGIN_DIR=$plugin_dir timeout -k 5 900 "$profiler" --config "$out/config.json" --quick \
		--out "$store" >"$work/profile.log" 2>&1 || nwb_die "narwhal-profile failed (log in $work/profile.log)"
	;;
none) ;;
*) cp "$profile" "$store" ;;
esac

# --- the schedule: the first RATE * WINDOW requests after OFFSET at RATE.
n=$(awk -v r="$rate" -v w="$window" 'BEGIN { n = int(r * w + 0.5); print n < 2 ? 2 : n }')
opts="--trace $trace_file --start-offset $offset --max-prompt-tokens $max_prompt --max-output-tokens $max_output --max-requests $n"
# shellcheck disable=SC2086
native=$("$replay" --url http://127.0.0.1:9 --model "$model" $opts --dry-run |
	sed -n 's/.*(\([0-9.]*\) req\/s).*/\1/p')
scale=$(awk -v r="$rate" -v x="$native" 'BEGIN { printf "%.6g", r / x }')
opts="$opts --rate-scale $scale --slo-ttft $slo_ttft --slo-tpot $slo_tpot --timeout $timeout_s --seed $seed --quiet"

# --- the real run.
NARWHAL_PLUGIN_DIR=$plugin_dir "$narwhal" --config "$out/config.json" 2>"$work/narwhal.log" &
nwb_remember $!
url=http://127.0.0.1:$port
nwb_wait_http "$url/v1/models" 20 || nwb_die "narwhal does not serve (log in $work/narwhal.log)"
i=0
until curl -s -m 2 "$url/narwhal/health" | jq -e '.status == "ok"' >/dev/null 2>&1; do
	i=$((i + 1))
	[ $i -le 100 ] || nwb_die "narwhal's engines are not all in placement"
	sleep 0.1
done
say "real: $n requests at $rate req/s (scale $scale) through $url"
t0=$(date +%s.%N)
# shellcheck disable=SC2086
timeout -k 5 $((window * 2 + timeout_s + 60)) "$replay" --url "$url" --model "$model" $opts \
	--out-json "$out/real.json" --out-csv "$out/real.csv" </dev/null >"$out/real.out" 2>&1 ||
	nwb_die "the real replay failed (see $out/real.out)"
real_wall=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
# The daemon's own record of the run (its role changes, the controller's).
curl -s -m 5 "$url/narwhal/state" >"$out/real-state.json" || echo '{}' >"$out/real-state.json"

# --- the what-if run: the same options, the same configuration.
say "what-if: the same through narwhal-replay --what-if"
t0=$(date +%s.%N)
# shellcheck disable=SC2086
NARWHAL_PLUGIN_DIR=$plugin_dir "$replay" --what-if "$out/config.json" --sim-preset "$preset" \
	--sim-seed "$seed" --sim-time-scale "$time_scale" $opts \
	--out-json "$out/whatif.json" --out-csv "$out/whatif.csv" >"$out/whatif.out" 2>&1 ||
	nwb_die "the what-if replay failed (see $out/whatif.out)"
wi_wall=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
nwb_cleanup

# --- the comparison.
cmd_real="$replay --url URL --model $model $opts"
cmd_wi="$replay --what-if config.json --sim-preset $preset --sim-seed $seed --sim-time-scale $time_scale $opts"
jq -n --slurpfile r "$out/real.json" --slurpfile w "$out/whatif.json" \
	--slurpfile st "$out/real-state.json" --arg rw "$real_wall" \
	--arg ww "$wi_wall" --arg cr "$cmd_real" --arg cw "$cmd_wi" '
	def rel(a; b): if b == 0 then null else ((a - b) / b * 1000 | round / 10) end;
	def row(name; f): {metric: name, real: ($r[0].runs[0] | f), what_if: ($w[0].runs[0] | f)}
		| . + {diff_pct: rel(.what_if; .real)};
	{commands: {real: $cr, what_if: $cw}, wall_s: {real: ($rw | tonumber), what_if: ($ww | tonumber)},
	 rows: [row("attainment"; .slo.attainment), row("goodput_rps"; .slo.goodput_rps),
	        row("goodput_offered_rps"; .slo.attainment * .schedule.offered_rps),
	        row("ok"; .counts.ok), row("refused_429"; .counts.status["429"] // 0),
	        row("ttft_p50_s"; .ttft_s.p50), row("ttft_p99_s"; .ttft_s.p99),
	        row("tpot_p50_s"; .tpot_s.p50), row("tpot_p99_s"; .tpot_s.p99),
	        row("elapsed_s"; .elapsed_s),
	        ({metric: "role_changes", real: ($st[0].flip_history.entries // [] | length),
	          what_if: ($w[0].runs[0].what_if.role_changes | length)}
	         | . + {diff_pct: rel(.what_if; .real)})]}' >"$out/agreement.json"
jq -r '"metric\treal\twhat-if\tdiff %", (.rows[] | "\(.metric)\t\(.real)\t\(.what_if)\t\(.diff_pct)"),
	"wall seconds\t\(.wall_s.real)\t\(.wall_s.what_if)"' "$out/agreement.json" | column -t -s $'\t'
say "output in $out (agreement.json, real.json, whatif.json, the CSVs, config.json)"
