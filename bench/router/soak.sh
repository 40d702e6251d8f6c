#!/bin/sh
# Memory soak (issue 4: "no RSS growth over a 10-minute soak"): a steady
# mixed load through Narwhal for DURATION seconds, Narwhal's RSS sampled
# every INTERVAL seconds; the median RSS of the first and of the last
# minute are compared and the script fails (exit 1) when it grew by more
# than the limit, or when any answer was wrong.
#
#   bench/router/soak.sh [path/to/narwhal [path/to/narwhal-sim]]
#
# Environment (defaults in brackets):
#   DURATION [600]      seconds of measured load (after WARMUP)
#   WARMUP [20]         seconds of the same load before the first sample
#   INTERVAL [10]       seconds between RSS samples
#   CONNS [64]          wrk connections
#   ENGINES [4]         simulated engines; the first half prefill, the rest
#                       decode; 1 = a single aggregate engine
#   TOKENIZE [true]     Narwhal's engine.tokenize
#   GROWTH_LIMIT_KB [2048]  largest allowed growth, last minute vs first
#   PROXY_CPU [1], LOAD_CPU [0]   as in run.sh
#   OUT                 output directory [a new /tmp/narwhal-soak.*]
set -eu

here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"

narwhal=${1:-./narwhal}
sim=${2:-./narwhal-sim}
duration=${DURATION:-600}
warmup=${WARMUP:-20}
interval=${INTERVAL:-10}
conns=${CONNS:-64}
engines=${ENGINES:-4}
tokenize=${TOKENIZE:-true}
limit_kb=${GROWTH_LIMIT_KB:-2048}
proxy_cpu=${PROXY_CPU:-1}
load_cpu=${LOAD_CPU:-0}
plugin_dir=${NARWHAL_PLUGIN_DIR:-$(dirname "$narwhal")/plugins/.libs}

nwb_need wrk jq curl taskset awk
case $duration$warmup$interval$conns$engines$limit_kb in
*[!0-9]*) nwb_die "DURATION, WARMUP, INTERVAL, CONNS, ENGINES, GROWTH_LIMIT_KB: integers" ;;
esac
case $tokenize in true | false) ;; *) nwb_die "TOKENIZE: true or false" ;; esac
[ "$interval" -gt 0 ] && [ "$duration" -ge "$interval" ] || nwb_die "need DURATION >= INTERVAL > 0"
[ -x "$sim" ] || nwb_die "no narwhal-sim at $sim"
[ -x "$narwhal" ] || nwb_die "no narwhal at $narwhal"

out=${OUT:-$(mktemp -d /tmp/narwhal-soak.XXXXXX)}
mkdir -p "$out" "$out/bin" "$out/plugins"
# Run copies, so that a rebuild during the soak changes nothing.
cp "$sim" "$out/bin/narwhal-sim"
cp "$narwhal" "$out/bin/narwhal"
cp "$plugin_dir"/*.so "$out/plugins/"
sim=$out/bin/narwhal-sim
narwhal=$out/bin/narwhal
plugin_dir=$out/plugins
work=$out
: >"$work/pids"
wrk_pid=
trap 'st=$?; nwb_cleanup; exit $st' EXIT
trap 'exit 130' INT TERM

nwb_start_sim "$sim" "$engines" "$load_cpu"
port=$(nwb_free_port)
if [ "$engines" = 1 ]; then
	nwb_narwhal_config "$work/narwhal.json" "$port" "$tokenize" '$f.engines'
else
	nwb_narwhal_config "$work/narwhal.json" "$port" "$tokenize" \
		"[\$f.engines | to_entries[] | .value + {role: (if .key < (($engines + 1) / 2 | floor) then \"prefill\" else \"decode\" end)}]"
fi
nwb_start_narwhal "$narwhal" "$work/narwhal.json" "$proxy_cpu" "$work/narwhal.log" "$port" ||
	nwb_die "Narwhal does not serve; nothing to soak"
url=http://127.0.0.1:$port
window=$((duration / 4 < 60 ? duration / 4 : 60))
[ "$window" -ge "$interval" ] || window=$interval
echo "soak: narwhal pid $nw_pid on CPU $proxy_cpu, $engines simulated engine(s) on CPU $load_cpu," \
	"wrk c=$conns; ${warmup}s warm-up + ${duration}s measured, RSS every ${interval}s;" \
	"first vs last ${window}s, limit +$limit_kb KiB; output in $out"

# One wrk run covers warm-up and measurement; wrk is bounded by -d and the
# whole by timeout.
total=$((warmup + duration))
timeout $((total + 60)) taskset -c "$load_cpu" wrk -t1 -c"$conns" -d"${total}s" --latency \
	--timeout 10s -s "$here/mixed.lua" "$url" >"$work/wrk.out" 2>"$work/wrk.err" &
wrk_pid=$!
nwb_remember "$wrk_pid"
sleep "$warmup"
t0=$(nwb_now)
: >"$work/rss.tsv"
printf 't_s\trss_kb\thwm_kb\tcpu_ticks\n' >"$work/rss.tsv"
died=
n=0
while :; do
	el=$(($(nwb_now) - t0))
	if ! nwb_alive "$nw_pid"; then died=yes; break; fi
	set -- $(nwb_mem "$nw_pid")
	printf '%s\t%s\t%s\t%s\n' "$el" "$1" "$2" "$(nwb_ticks "$nw_pid")" >>"$work/rss.tsv"
	n=$((n + 1))
	awk -v t="$el" -v r="$1" -v h="$2" 'BEGIN { printf "  t=%ds  VmRSS %.1f MB  VmHWM %.1f MB\n", t, r / 1024, h / 1024 }'
	[ "$el" -ge "$duration" ] && break
	next=$((n * interval))
	[ "$next" -gt "$duration" ] && next=$duration
	sl=$((next - el))
	[ "$sl" -gt 0 ] && sleep "$sl"
done
wait "$wrk_pid" || true
wrk_pid=

hz=$(getconf CLK_TCK)
check=$(awk '/^NWB / { print }' "$work/wrk.out")
rps=$(awk '/^Requests\/sec:/ { print $2 }' "$work/wrk.out")
errs=$(awk '/Socket errors:/ { gsub(/,/, ""); print $4 + $6 + $8 + $10 }' "$work/wrk.out")
echo "wrk: ${rps:-0} req/s over ${total}s; ${check:-no check line}; socket errors ${errs:-0}"
[ -s "$work/wrk.err" ] && head -n 5 "$work/wrk.err" | sed 's/^/  /'

verdict=$(awk -v w="$window" -v d="$duration" -v lim="$limit_kb" -v hz="$hz" -F'\t' '
	NR == 1 { next }
	{ t[++n] = $1; r[n] = $2; h = $3; cpu[n] = $4 }
	function med(a, k,   i, j, x) {
		for (i = 2; i <= k; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
		return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
	}
	END {
		for (i = 1; i <= n; i++) {
			if (t[i] < w) f[++nf] = r[i]
			if (t[i] > d - w) l[++nl] = r[i]
			# least-squares slope, KiB per minute, over all samples
			sx += t[i]; sy += r[i]; sxx += t[i] * t[i]; sxy += t[i] * r[i]
		}
		if (nf == 0 || nl == 0) { print "FAIL not enough samples"; exit }
		a = med(f, nf); b = med(l, nl)
		slope = (n * sxx - sx * sx) > 0 ? (n * sxy - sx * sy) / (n * sxx - sx * sx) * 60 : 0
		printf "%s first %.0f KiB, last %.0f KiB, growth %+.0f KiB (limit %d); trend %+.1f KiB/min; peak (VmHWM) %.0f KiB; CPU %.0f%%\n", \
			(b - a > lim ? "FAIL" : "PASS"), a, b, b - a, lim, slope, h, (cpu[n] - cpu[1]) / hz / (t[n] - t[1] + 1e-9) * 100
	}' "$work/rss.tsv")
echo "RSS: $verdict"

status=0
case $verdict in FAIL*) status=1 ;; esac
if [ -n "$died" ]; then
	echo "FAIL: narwhal exited during the soak (log: $work/narwhal.log)" >&2
	tail -n 20 "$work/narwhal.log" >&2
	status=1
fi
set -- $(echo "$check" | tr '=' ' ')
# NWB responses N ok N rejected N unexpected N bad N
if [ -z "$check" ] || [ "${3:-0}" = 0 ]; then
	echo "FAIL: no answers counted" >&2
	status=1
else
	resp=$3 ok=$5 rej=$7 unexp=$9 bad=${11}
	if [ "$unexp" != 0 ] || [ "$bad" != 0 ] || [ "${errs:-0}" != 0 ]; then
		echo "FAIL: $unexp unexpected answers, $bad bad 2xx bodies, ${errs:-0} socket errors" >&2
		status=1
	fi
	# 2 requests in 20 are invalid on purpose.
	if [ $((rej * 100)) -gt $((resp * 15)) ] || [ $((rej * 100)) -lt $((resp * 5)) ]; then
		echo "FAIL: $rej of $resp answers were 4xx; about 10% expected" >&2
		status=1
	fi
fi
if [ $status = 0 ]; then
	echo "soak PASSED ($out/rss.tsv)"
else
	echo "soak FAILED ($out)" >&2
fi
exit $status
