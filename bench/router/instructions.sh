#!/bin/sh
# User-space instructions per request of the Narwhal rows of run.sh, counted
# by valgrind's callgrind: a figure that neither the machine's other load nor
# a virtual machine's stolen time moves, to compare builds where CPU time is
# too noisy (bench/router/README.md, "Instructions per request").
#
#   bench/router/instructions.sh [path/to/narwhal [path/to/narwhal-sim]]
#
# Run from the build directory, like run.sh. Environment (defaults in
# brackets):
#   TARGETS ["narwhal-body narwhal narwhal-disagg"]
#   DURATION [5]    seconds of counted load per target (after 2 s not counted)
#   CONNS [16]      wrk connections (the requests in flight at either end
#                   of the window are worked on but not counted, so more
#                   connections inflate the figure: README, "Why c=512
#                   costs more than c=64")
#   MAX_TOKENS [16] max_tokens of the non-streaming requests
#   PROXY_CPU [1], LOAD_CPU [0]
#   OUT             output directory [a new /tmp/narwhal-bench-instr.*]
#
# Under callgrind Narwhal runs some 50 times slower, so a target serves a few
# hundred requests a second, and work done on timers (health checks, metric
# scrapes) weighs more per request than at full speed. Kernel time is not
# counted at all: this measures Narwhal's own code and its libraries.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"

narwhal=${1:-./narwhal}
sim=${2:-./narwhal-sim}
targets=${TARGETS:-narwhal-body narwhal narwhal-disagg}
duration=${DURATION:-5}
conns=${CONNS:-16}
tokens=${MAX_TOKENS:-16}
proxy_cpu=${PROXY_CPU:-1}
load_cpu=${LOAD_CPU:-0}
plugin_dir=${NARWHAL_PLUGIN_DIR:-$(dirname "$narwhal")/plugins/.libs}

nwb_need wrk jq curl taskset awk valgrind callgrind_control callgrind_annotate
case $duration$conns$tokens in *[!0-9]*) nwb_die "DURATION, CONNS, MAX_TOKENS: integers" ;; esac
for t in $targets; do
	case $t in narwhal | narwhal-body | narwhal-disagg) ;; *) nwb_die "unknown target $t" ;; esac
done
[ -x "$narwhal" ] || nwb_die "no narwhal at $narwhal"
[ -x "$sim" ] || nwb_die "no narwhal-sim at $sim"

out=${OUT:-$(mktemp -d /tmp/narwhal-bench-instr.XXXXXX)}
mkdir -p "$out"
work=$out
: >"$work/pids"
trap 'st=$?; nwb_cleanup; exit $st' EXIT
trap 'exit 130' INT TERM

nwb_start_sim "$sim" 3 "$load_cpu"

load() { # url seconds -> wrk's output
	MAX_TOKENS=$tokens timeout $(($2 + 30)) taskset -c "$load_cpu" \
		wrk -t1 -c"$conns" -d"$2s" --timeout 10s -s "$here/completions.lua" "$1/v1/completions"
}

echo "| target | requests | instructions / request | ×narwhal-body |"
echo "|---|---|---|---|"
body_ir=
for t in $targets; do
	case $t in
	narwhal) engines='[$f.engines[0]]' sd=true ;;
	narwhal-body) engines='[$f.engines[0]]' sd=false ;;
	narwhal-disagg)
		engines='[($f.engines[1] | .role = "prefill"), ($f.engines[2] | .role = "decode")]' sd=true ;;
	esac
	port=$(nwb_free_port)
	nwb_narwhal_config "$work/$t.json" "$port" false "$engines" "$sd"
	NARWHAL_PLUGIN_DIR=$plugin_dir taskset -c "$proxy_cpu" valgrind --tool=callgrind \
		--callgrind-out-file="$work/callgrind-$t.out" "$narwhal" --config "$work/$t.json" \
		2>"$work/$t.log" &
	vg=$!
	nwb_remember "$vg"
	nwb_wait_http "http://127.0.0.1:$port/v1/models" 120 || {
		tail -n 20 "$work/$t.log" >&2
		nwb_die "$t did not answer under valgrind"
	}
	load "http://127.0.0.1:$port" 2 >/dev/null 2>&1 || true
	callgrind_control -z "$vg" >/dev/null 2>&1
	load "http://127.0.0.1:$port" "$duration" >"$work/wrk-$t.out" 2>&1 || true
	callgrind_control -d "$vg" >/dev/null 2>&1
	kill -TERM "$vg" 2>/dev/null || true
	wait "$vg" 2>/dev/null || true
	reqs=$(awk '/ requests in / { print $1 }' "$work/wrk-$t.out")
	bad=$(awk '/^NWB / { split($3, a, "="); split($4, b, "="); print a[2] + b[2] }' "$work/wrk-$t.out")
	[ "${bad:-1}" = 0 ] || nwb_die "$t: failed or wrong answers (see $work/wrk-$t.out)"
	# the dump made after the counted load; the file without a suffix is the
	# one written at exit
	ir=$(callgrind_annotate "$work/callgrind-$t.out.1" 2>/dev/null |
		awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }')
	per=$(awk -v i="$ir" -v r="$reqs" 'BEGIN { printf "%.0f", i / r }')
	[ "$t" = narwhal-body ] && body_ir=$per
	x=$(awk -v p="$per" -v b="$body_ir" 'BEGIN { if (b == "") print "—"; else printf "%.2f×", p / b }')
	echo "| $t | $reqs | $per | $x |"
done
echo
echo "callgrind profiles in $out (callgrind_annotate --inclusive=yes FILE)"
