#!/bin/sh
# What the spec's default policies cost (issue 12, "How it is checked": CPU
# per request through the daemon within 10% of open): Narwhal's CPU per
# request with `predictive` admission and `slo-cost` placement, pricing
# every request on profiles, against `open` admission and `least-loaded`
# placement, same build, same narwhal-sim engines, in one run. See
# bench/obs/README.md.
#
#   bench/obs/policy.sh [path/to/narwhal [path/to/narwhal-sim]]
#
# Run from the build directory (defaults ./narwhal and ./narwhal-sim; the
# plugins are taken from ./plugins/.libs unless NARWHAL_PLUGIN_DIR is set).
#
# Environment (defaults in brackets):
#   TARGETS ["open pred open2"]
#                        open, pred: one prefill and one decode engine
#                        (placement runs for both legs) with open +
#                        least-loaded / predictive + slo-cost; open2: a
#                        second "open" process, the A/A control (the noise
#                        floor); agg-open, agg-pred, agg-open2: the same on
#                        one aggregate engine, where predictive admits every
#                        request only at CONCS=1 (see the README)
#   SLO_TTFT [10]        slo.ttft_s, whole seconds: high enough that
#                        predictive admits every request at c=64
#   RUNS [5], DURATION [10], CONCS ["64"], MODES ["ns sse"],
#   MAX_TOKENS_NS [16], MAX_TOKENS_SSE [200], PROXY_CPU [1], LOAD_CPU [0],
#   PAUSE [1], WARMUP [2], WRK_TIMEOUT [10], OUT: as bench/obs/run.sh
#   LIMIT_PCT [10]       the issue's bound on pred/open, percent
set -eu

here=$(cd "$(dirname "$0")" && pwd)
. "$here/../router/common.sh"
. "$here/cpu.sh"

name=policy title="admission and placement policy" known_targets="open pred open2 agg-open agg-pred agg-open2"
default_targets="open pred open2" default_limit=10
slo_ttft=${SLO_TTFT:-10}
cpu_init "$@"
case $slo_ttft in '' | *[!0-9]*) nwb_die "SLO_TTFT: whole seconds" ;; esac

# Engine sim-0 serves the aggregate fleet, sim-1 (prefill) and sim-2
# (decode) the disaggregated one, as in bench/router; idle engines cost
# nothing.
nwb_start_sim "$sim" 3 "$load_cpu"
model=$(jq -r .model "$work/fleet.json")
[ "$model" = opt-13b-a100 ] || nwb_die "narwhal-sim serves $model; the profile store is opt-13b-a100's"

# The profile store: what narwhal-profile recovers of narwhal-sim's default
# preset, opt-13b-a100 (its coefficients in src/sim/model.c, in ms there and
# seconds here; the handoff is 800 KiB a token at 45 GB/s), for every
# engine of the simulator. What pricing costs does not depend on the
# coefficients' values, only on every request being priced inside the
# measured domain and admitted: a refusal costs less than serving. The
# engines run --no-delay, but the ledger still charges each request in
# flight its modelled prefill (about 20 ms), so at c=64 a projection can
# pass 1 s: hence SLO_TTFT.
store=$out/profiles.json
jq --arg now "$(date -u +%Y-%m-%dT%H:%M:%SZ)" '{
	version: 1, created_at: $now, tool: "bench/obs/policy.sh (opt-13b-a100 preset)",
	engines: [.model as $model | .engines[] | {
		engine: .id, url: .url, dialect: .dialect, model: $model, hardware: null,
		kv_capacity_tokens: 59312, measured_at: $now,
		prefill: {a_s: 0.01810, b_s: 1.0191e-4, c_s: 7.122e-9,
		          min_tokens: 1, max_tokens: 2048, samples: 100, rel_rms_error: 0},
		decode: {d0_s: 0.01993, d1_s: 6.269e-7, d2_s: 3.851e-5,
		         min_active: 1, max_active: 94, min_kv_tokens: 0, max_kv_tokens: 59312,
		         samples: 100, rel_rms_error: 0},
		handoff: {setup_s: 0.001, per_token_s: (819200 / 45e9), max_tokens: 2048, samples: 10}}]
}' "$work/fleet.json" >"$store" || nwb_die "could not write the profile store"

# Every daemon: the router benchmark's configuration (admission open,
# static controller, tokenize off, log.level warning) with the access log
# off (its cost is then not in the denominator), the same profile store
# and TTFT target, and its policies.
pd='[($f.engines[1] | .role = "prefill"), ($f.engines[2] | .role = "decode")]'
agg='[$f.engines[0]]'
common=".log.access = false | .profiles.path = $(jq -n --arg s "$store" '$s') | .slo.ttft_s = $slo_ttft"
open="$common | .serving.admission = \"open\" | .plugins.placement.name = \"least-loaded\""
pred="$common | .serving.admission = \"predictive\" | .plugins.placement.name = \"slo-cost\""
for t in $targets; do
	case $t in
	open | open2) cpu_start "$t" "$out/bin/narwhal" "$out/plugins" "$pd" "$open" ;;
	pred) cpu_start "$t" "$out/bin/narwhal" "$out/plugins" "$pd" "$pred" ;;
	agg-open | agg-open2) cpu_start "$t" "$out/bin/narwhal" "$out/plugins" "$agg" "$open" ;;
	agg-pred) cpu_start "$t" "$out/bin/narwhal" "$out/plugins" "$agg" "$pred" ;;
	esac
done

# What each daemon decided, from its /narwhal/state: refusals (of every
# reason), admissions and placements by its plugins and how many of them
# were unpriced, as a JSON object ({} when the state could not be read).
counts() { # target
	v=$(echo "$1" | tr - _)
	eval "u=\$url_$v"
	curl -s -m 5 "$u/narwhal/state" | jq -c '
		(.plugins.admission.metrics // {}) as $a | (.plugins.placement.metrics // {}) as $p | {
		policies: "\(.plugins.admission.name)+\(.plugins.placement.name)",
		refused: ([.demand.totals.refused[]] | add), admitted: ($a.admitted_total // 0),
		admitted_unpriced: ($a.admitted_unpriced_total // 0), placed: ($p.placed_total // 0),
		placed_unpriced: ($p.unpriced_total // 0), unserved: ($p.unserved_total // 0)}' \
		2>/dev/null || echo '{}'
}
# After the warm-up (at c=64, whatever CONCS says), so that only the
# measured cells count.
warmed_up() {
	for t in $targets; do counts "$t" >"$work/$t.counts0"; done
}
cpu_measure warmed_up

# A predictive daemon that refused requests or did not price one did less
# work than serving them (its cells are then invalid or understated).
notes=
for t in $targets; do
	line=$(counts "$t" | jq -r --slurpfile c0 "$work/$t.counts0" '
		. as $c | ($c0[0] // {}) as $z | def d(k): ($c[k] // 0) - ($z[k] // 0);
		"\(.policies // "no state"): refused \(d("refused"))" +
		(if d("admitted") > 0 then ", admitted \(d("admitted")) (unpriced \(d("admitted_unpriced")))" else "" end) +
		(if d("placed") > 0 then ", placed \(d("placed")) (unpriced \(d("placed_unpriced")), unserved \(d("unserved")))" else "" end)')
	notes="$notes$t: $line; "
	case $t:$line in
	*"no state"*) echo "warning: could not read the state of $t" >&2 ;;
	*open*:*"refused 0"* | *pred:*"refused 0, "*"(unpriced 0)"*"(unpriced 0,"*) ;;
	*) echo "warning: $t did not serve every request priced: $line" >&2 ;;
	esac
done
cpu_report "pred/open=both policies, prefill + decode;open2/open=A/A: noise;agg-pred/agg-open=both policies, one aggregate engine;agg-open2/agg-open=A/A" \
	"pred/open agg-pred/agg-open" "$notes"
