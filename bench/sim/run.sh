#!/bin/sh
# narwhal-sim HTTP-path benchmark (issue 3): one simulator process pinned to
# one core, --no-delay, loopback only, wrk pinned to another core.
#
#   bench/sim/run.sh [path/to/narwhal-sim]
#
# Environment: DURATION (seconds per run, default 10), RUNS (default 3),
# CONNS (wrk connections, default 64), MAX_TOKENS_NS (non-streaming
# max_tokens, default 16), MAX_TOKENS_SSE (streamed tokens, default 100),
# SIM_CPU (default 0), WRK_CPU (default 1).
# Targets: 2,000 non-streaming requests/s and 50,000 SSE events/s.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
sim=${1:-./narwhal-sim}
duration=${DURATION:-10}
runs=${RUNS:-3}
conns=${CONNS:-64}
ns_tokens=${MAX_TOKENS_NS:-16}
sse_tokens=${MAX_TOKENS_SSE:-100}
sim_cpu=${SIM_CPU:-0}
wrk_cpu=${WRK_CPU:-1}

command -v wrk >/dev/null || { echo "wrk is missing: apt-get install -y wrk" >&2; exit 1; }
[ -x "$sim" ] || { echo "no narwhal-sim at $sim" >&2; exit 1; }
case $duration$runs$conns in *[!0-9]*) echo "DURATION, RUNS, CONNS: integers" >&2; exit 1;; esac

work=$(mktemp -d)
pid=
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT INT TERM

taskset -c "$sim_cpu" "$sim" --no-delay --base-port 0 --log-level warning \
	>"$work/fleet" 2>"$work/sim.log" &
pid=$!
# Wait (bounded) for the fleet line.
i=0
while ! grep -q engines "$work/fleet" 2>/dev/null; do
	i=$((i + 1))
	[ $i -gt 100 ] && { echo "narwhal-sim did not start:" >&2; cat "$work/sim.log" >&2; exit 1; }
	sleep 0.05
done
url=$(sed -n 's/.*"url":"\([^"]*\)".*/\1/p' "$work/fleet")/v1/completions

# One wrk run: prints requests/s.
run_wrk() {
	MAX_TOKENS=$2 taskset -c "$wrk_cpu" wrk -t1 -c"$conns" -d"${duration}s" \
		-s "$here/$1" "$url" >"$work/wrk.out"
	awk '/^Requests\/sec:/ { print $2 }' "$work/wrk.out"
	if grep -q "Non-2xx\|Socket errors" "$work/wrk.out"; then
		grep "Non-2xx\|Socket errors" "$work/wrk.out" >&2
	fi
}

median() {
	sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

echo "narwhal-sim $("$sim" --version | awk '{ print $2 }'), $(nproc) CPUs, sim on CPU $sim_cpu," \
	"wrk on CPU $wrk_cpu, c=$conns, ${duration}s x $runs runs"
: >"$work/ns"
: >"$work/sse"
for r in $(seq "$runs"); do
	ns=$(run_wrk completions.lua "$ns_tokens")
	sse=$(run_wrk stream.lua "$sse_tokens")
	echo "$ns" >>"$work/ns"
	echo "$sse" >>"$work/sse"
	echo "run $r: non-streaming $ns req/s; streaming $sse req/s" \
		"($(awk -v r="$sse" -v t="$sse_tokens" 'BEGIN { printf "%.0f", r * (t + 1) }') events/s)"
done
ns_med=$(median <"$work/ns")
sse_med=$(median <"$work/sse")
awk -v ns="$ns_med" -v sse="$sse_med" -v t="$sse_tokens" 'BEGIN {
	ev = sse * (t + 1)
	printf "median non-streaming: %.0f req/s (%.1fx the 2,000 target)\n", ns, ns / 2000
	printf "median streaming: %.0f req/s = %.0f SSE events/s (%.1fx the 50,000 target)\n", sse, ev, ev / 50000
}'
