#!/bin/sh
# Memory soak with the features on (issue 15): Narwhal in front of a
# simulated 2 prefill + 2 decode fleet, with predictive admission on
# measured profiles, the monitor and the reactive controller, the access
# log, demand accounting, and GET /metrics and /narwhal/state scraped all
# along. The load goes through phases:
#
#   steady   the mixed load of bench/router/mixed.lua at c=CONNS
#   streams  STREAMS open streams (bench/router/stream.lua, long answers)
#   quiet    no load at all
#
# in the order steady streams quiet steady streams quiet steady, over
# DURATION seconds (phase lengths in proportion: 9 2 2 9 2 2 4). Narwhal's
# RSS is sampled every INTERVAL seconds into rss.tsv and plotted
# (report.sh). The run fails (exit 1) when:
#   - RSS at the end of the last steady phase exceeds RSS at the end of the
#     first by more than GROWTH_LIMIT_KB (medians of the last minute);
#   - the second quiet phase ends above the first by more than
#     GROWTH_LIMIT_KB (medians of its last half);
#   - a quiet phase ends above QUIET_LIMIT_KB, or a streams phase peaks
#     above STREAMS_LIMIT_KB;
#   - Narwhal exits, wrk sees a socket error, an answer is wrong (see
#     mixed.lua and stream.lua), a stream is refused, or a scrape fails.
#
#   bench/soak/run.sh [path/to/narwhal [path/to/narwhal-sim [path/to/narwhal-profile]]]
#
# Environment (defaults in brackets):
#   DURATION [1800]     seconds of the phases, after WARMUP
#   WARMUP [20]         seconds of steady load before the first sample
#   INTERVAL [5]        seconds between RSS samples and between scrapes
#   CONNS [64]          wrk connections of the steady phases
#   STREAMS [512]       wrk connections of the streams phases
#   STREAM_TOKENS [1000]  max_tokens of each stream
#   TIME_SCALE [10]     narwhal-sim --time-scale: model time runs this much
#                       faster than wall time (the profiles are measured so)
#   GROWTH_LIMIT_KB [2048], QUIET_LIMIT_KB [20480], STREAMS_LIMIT_KB [40960]
#   PROXY_CPU [1], LOAD_CPU [0]   as in bench/router/run.sh
#   OUT                 output directory [a new /tmp/narwhal-soak.*]
set -eu

here=$(cd "$(dirname "$0")" && pwd)
router=$here/../router
. "$router/common.sh"

narwhal=${1:-./narwhal}
sim=${2:-./narwhal-sim}
profiler=${3:-./narwhal-profile}
duration=${DURATION:-1800}
warmup=${WARMUP:-20}
interval=${INTERVAL:-5}
conns=${CONNS:-64}
streams=${STREAMS:-512}
stream_tokens=${STREAM_TOKENS:-1000}
time_scale=${TIME_SCALE:-10}
growth_kb=${GROWTH_LIMIT_KB:-2048}
quiet_kb=${QUIET_LIMIT_KB:-20480}
streams_kb=${STREAMS_LIMIT_KB:-40960}
proxy_cpu=${PROXY_CPU:-1}
load_cpu=${LOAD_CPU:-0}
plugin_dir=${NARWHAL_PLUGIN_DIR:-$(dirname "$narwhal")/plugins/.libs}

nwb_need wrk jq curl taskset awk
case $duration$warmup$interval$conns$streams$stream_tokens$growth_kb$quiet_kb$streams_kb in
*[!0-9]*) nwb_die "DURATION, WARMUP, INTERVAL, CONNS, STREAMS, STREAM_TOKENS and the limits: integers" ;;
esac
[ "$interval" -gt 0 ] && [ "$duration" -ge $((30 * interval)) ] || nwb_die "need DURATION >= 30 x INTERVAL > 0"
for b in "$narwhal" "$sim" "$profiler"; do [ -x "$b" ] || nwb_die "no program at $b"; done
[ -d "$plugin_dir" ] || nwb_die "no plugin directory $plugin_dir (set NARWHAL_PLUGIN_DIR)"

out=${OUT:-$(mktemp -d /tmp/narwhal-soak.XXXXXX)}
mkdir -p "$out/bin" "$out/plugins"
# Run copies, so that a rebuild during the soak changes nothing.
cp "$narwhal" "$out/bin/narwhal"
cp "$sim" "$out/bin/narwhal-sim"
cp "$profiler" "$out/bin/narwhal-profile"
cp "$plugin_dir"/*.so "$out/plugins/"
narwhal=$out/bin/narwhal
sim=$out/bin/narwhal-sim
profiler=$out/bin/narwhal-profile
plugin_dir=$out/plugins
src=$(cd "$here/../.." && git rev-parse --short HEAD 2>/dev/null || echo unknown)
work=$out
: >"$work/pids"
trap 'st=$?; nwb_cleanup; exit $st' EXIT
trap 'exit 130' INT TERM

t_start=$(nwb_now)
say() { printf '[%5ds] %s\n' $(($(nwb_now) - t_start)) "$*"; }

# --- the fleet: one simulator process, two prefill and two decode engines.
taskset -c "$load_cpu" "$sim" --engines 4 --time-scale "$time_scale" --base-port 0 \
	--log-level warning --fleet-out "$work/fleet.json" >/dev/null 2>"$work/sim.log" &
sim_pid=$!
nwb_remember "$sim_pid"
i=0
while ! grep -q engines "$work/fleet.json" 2>/dev/null; do
	i=$((i + 1))
	[ $i -le 100 ] && kill -0 "$sim_pid" 2>/dev/null || { cat "$work/sim.log" >&2; nwb_die "narwhal-sim did not start"; }
	sleep 0.05
done
port=$(nwb_free_port)
# The features on: predictive admission on the measured store, the reactive
# controller and the monitor (defaults), the access log. The first-token
# limit and the TTFT target are raised so that STREAMS streams, most of
# them queued in the engines (max_num_seqs 94 each), are admitted and kept
# open rather than refused or failed: admission still prices every one.
jq -n --slurpfile fl "$work/fleet.json" --argjson port "$port" --arg store "$work/profiles.json" \
	--argjson cap $((streams + 2 * conns)) '$fl[0] as $f | {
	server: {host: "127.0.0.1", port: $port},
	log: {level: "info", access: true},
	slo: {ttft_s: 120},
	serving: {admission: "predictive", max_connections: $cap},
	engine: {first_token_timeout_s: 120},
	profiles: {path: $store},
	fleet: {model: $f.model, engines: [$f.engines | to_entries[] | .value +
		{role: (if .key < 2 then "prefill" else "decode" end)}]}
}' >"$work/narwhal.json"

say "profiling the fleet (narwhal-profile --quick, time scale $time_scale)"
NARWHAL_PLUGIN_DIR=$plugin_dir timeout -k 5 300 "$profiler" --config "$work/narwhal.json" --quick \
	>"$work/profile.log" 2>&1 || { tail -n 20 "$work/profile.log" >&2; nwb_die "narwhal-profile failed"; }

# The access log and everything else go to the log file; it grows with
# the run (about 250 bytes a request), which is the point.
nwb_start_narwhal "$narwhal" "$work/narwhal.json" "$proxy_cpu" "$work/narwhal.log" "$port" ||
	nwb_die "Narwhal does not serve; nothing to soak"
url=http://127.0.0.1:$port
idle_fds=$(ls "/proc/$nw_pid/fd" | wc -l)
set -- $(nwb_mem "$nw_pid")
idle_kb=$1

# --- the phases: name and length in units of DURATION/30.
phases="steady:9 streams:2 quiet:2 steady:9 streams:2 quiet:2 steady:4"
unit=$((duration / 30))
: >"$work/phases.tsv"
t=0
n=0
for p in $phases; do
	n=$((n + 1))
	len=$((${p#*:} * unit))
	[ "$n" = 7 ] && len=$((duration - t)) # the last takes the rounding
	printf '%s\t%s\t%s\t%s\n' "$n" "${p%:*}" "$t" "$((t + len))" >>"$work/phases.tsv"
	t=$((t + len))
done
say "narwhal pid $nw_pid on CPU $proxy_cpu (idle RSS $((idle_kb / 1024)) MB), simulator and wrk on CPU $load_cpu;" \
	"${warmup}s warm-up, then ${duration}s: $(awk -F'\t' '{ printf "%s%s %ds", (NR > 1 ? ", " : ""), $2, $4 - $3 }' "$work/phases.tsv"); output in $out"

# One wrk per loaded phase, bounded by -d and by timeout.
load() { # phase-number name seconds
	case $2 in
	steady)
		timeout $(($3 + 60)) taskset -c "$load_cpu" wrk -t1 -c"$conns" -d"$3s" --timeout 10s \
			-s "$router/mixed.lua" "$url" >"$work/wrk-$1-$2.out" 2>"$work/wrk-$1-$2.err" ;;
	streams)
		MAX_TOKENS=$stream_tokens timeout $(($3 + 60)) taskset -c "$load_cpu" wrk -t1 -c"$streams" \
			-d"$3s" --timeout 120s -s "$router/stream.lua" "$url/v1/completions" \
			>"$work/wrk-$1-$2.out" 2>"$work/wrk-$1-$2.err" ;;
	esac
}

# The scraper: /metrics and /narwhal/state every INTERVAL, until told to
# stop; counts its failures.
(
	ok=0 bad=0
	while [ ! -f "$work/stop" ]; do
		for path in /metrics /narwhal/state; do
			if [ "$(curl -s -o /dev/null -m 5 -w '%{http_code}' "$url$path" || true)" = 200 ]; then
				ok=$((ok + 1))
			else
				bad=$((bad + 1))
			fi
		done
		echo "$ok $bad" >"$work/scrapes"
		sleep "$interval"
	done
) &
nwb_remember $!

sleep 1
load 0 steady "$warmup" || true
t0=$(nwb_now)
printf 't_s\tphase\tname\trss_kb\thwm_kb\tcpu_ticks\tfds\n' >"$work/rss.tsv"
died=
while IFS="$(printf '\t')" read -r n name from to; do
	load "$n" "$name" $((to - from)) &
	wrk_pid=$!
	nwb_remember "$wrk_pid"
	while :; do
		el=$(($(nwb_now) - t0))
		if ! nwb_alive "$nw_pid"; then died=yes; break; fi
		set -- $(nwb_mem "$nw_pid")
		printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$el" "$n" "$name" "$1" "$2" "$(nwb_ticks "$nw_pid")" \
			"$(ls "/proc/$nw_pid/fd" 2>/dev/null | wc -l)" >>"$work/rss.tsv"
		[ "$el" -ge "$to" ] && break
		sl=$((to - el < interval ? to - el : interval))
		sleep "$sl"
	done
	wait "$wrk_pid" || true
	[ -n "$died" ] && break
	say "phase $n $name done: RSS $(awk -F'\t' -v n="$n" '$2 == n { r = $4 } END { printf "%.1f MB", r / 1024 }' "$work/rss.tsv")"
done <"$work/phases.tsv"
touch "$work/stop"
set -- $(cat "$work/scrapes" 2>/dev/null || echo "0 0")
scrapes_ok=$1 scrapes_bad=$2

{
	echo "# bench/soak, $(date -u +%Y-%m-%dT%H:%MZ), source $src"
	echo "# machine: $(nproc) CPUs, $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo), $(uname -r)"
	echo "# DURATION=$duration WARMUP=$warmup INTERVAL=$interval CONNS=$conns STREAMS=$streams STREAM_TOKENS=$stream_tokens TIME_SCALE=$time_scale"
	echo "# idle RSS before the load: $idle_kb KiB ($idle_fds descriptors)"
	echo "# scrapes of /metrics and /narwhal/state: $scrapes_ok answered 200, $scrapes_bad failed"
} >"$work/meta.txt"

# --- the verdicts.
status=0
fail() { echo "FAIL: $*" >&2; status=1; }
[ -n "$died" ] && fail "narwhal exited during the soak (log: $work/narwhal.log)"
[ "$scrapes_bad" = 0 ] && [ "$scrapes_ok" -gt 0 ] || fail "$scrapes_bad scrapes failed, $scrapes_ok answered"
for f in "$work"/wrk-[1-9]-*.out; do
	[ -f "$f" ] || continue
	errs=$(awk '/Socket errors:/ { gsub(/,/, ""); print $4 + $6 + $8 + $10 }' "$f")
	check=$(awk '/^NWB / { print }' "$f")
	rps=$(awk '/^Requests\/sec:/ { print $2 }' "$f")
	echo "$(basename "$f" .out): ${rps:-0} req/s; ${check:-no check line}; socket errors ${errs:-0}"
	[ "${errs:-0}" = 0 ] || fail "$(basename "$f"): ${errs} socket errors"
	case $f in
	*steady*)
		set -- $(echo "$check" | tr '=' ' ') # NWB responses N ok N rejected N unexpected N bad N
		if [ -z "$check" ] || [ "${3:-0}" = 0 ]; then
			fail "$(basename "$f"): no answers counted"
		elif [ "$9" != 0 ] || [ "${11}" != 0 ]; then
			fail "$(basename "$f"): $9 unexpected answers, ${11} bad 2xx bodies"
		elif [ $(($7 * 100)) -gt $(($3 * 15)) ] || [ $(($7 * 100)) -lt $(($3 * 5)) ]; then
			fail "$(basename "$f"): $7 of $3 answers were 4xx; about 10% (the invalid requests) expected"
		fi ;;
	*streams*)
		set -- $(echo "$check" | tr '=' ' ') # NWB responses N non2xx N bad N checked N
		[ -n "$check" ] && [ "$5" = 0 ] && [ "$7" = 0 ] ||
			fail "$(basename "$f"): streams refused or cut: ${check:-no check line}" ;;
	esac
done

verdict=$(awk -F'\t' -v g="$growth_kb" -v q="$quiet_kb" -v s="$streams_kb" -v hz="$(getconf CLK_TCK)" '
	NR == 1 { next }
	{ t[++n] = $1; ph[n] = $2; name[ph[n]] = $3; r[n] = $4; h = $5; cpu[n] = $6; fd[n] = $7
	  if (!(ph[n] in first)) first[ph[n]] = n; last[ph[n]] = n }
	function med(lo, hi, from,   i, k, a, j, x) {
		k = 0
		for (i = lo; i <= hi; i++) if (t[i] >= from) a[++k] = r[i]
		for (i = 2; i <= k; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
		return k == 0 ? -1 : k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
	}
	function tail(p, secs) { return med(first[p], last[p], t[last[p]] - secs) }
	function peak(p,   i, m) { m = 0; for (i = first[p]; i <= last[p]; i++) if (r[i] > m) m = r[i]; return m }
	function fds(p,   i, m) { m = 0; for (i = first[p]; i <= last[p]; i++) if (fd[i] > m) m = fd[i]; return m }
	END {
		a = tail(1, 60); b = tail(7, 60)
		printf "%s steady: first phase ends at %.0f KiB, last at %.0f KiB: growth %+.0f KiB (limit %d)\n", \
			(b - a > g ? "FAIL" : "PASS"), a, b, b - a, g
		q1 = tail(3, (t[last[3]] - t[first[3]]) / 2); q2 = tail(6, (t[last[6]] - t[first[6]]) / 2)
		printf "%s quiet: the first quiet phase ends at %.0f KiB, the second at %.0f KiB: growth %+.0f KiB (limit %d)\n", \
			(q2 - q1 > g ? "FAIL" : "PASS"), q1, q2, q2 - q1, g
		for (p = 2; p <= 6; p++) {
			if (name[p] == "quiet") {
				v = tail(p, (t[last[p]] - t[first[p]]) / 2)
				printf "%s phase %d quiet: RSS %.1f MB (limit %.1f MB)\n", (v > q ? "FAIL" : "PASS"), p, v / 1024, q / 1024
			}
			if (name[p] == "streams") {
				v = peak(p)
				printf "%s phase %d streams: peak RSS %.1f MB (limit %.1f MB), up to %d descriptors\n", \
					(v > s ? "FAIL" : "PASS"), p, v / 1024, s / 1024, fds(p)
			}
		}
		printf "INFO VmHWM %.1f MB; Narwhal CPU %.0f%% over the run\n", h / 1024, \
			(cpu[n] - cpu[1]) / hz / (t[n] - t[1] + 1e-9) * 100
	}' "$work/rss.tsv")
echo "$verdict"
echo "$verdict" | grep -q '^FAIL' && status=1
{ cat "$work/meta.txt"; echo "$verdict"; } >"$work/summary.txt"
"$here/report.sh" "$work" || true
if [ $status = 0 ]; then
	echo "soak PASSED ($out)"
else
	echo "soak FAILED ($out)" >&2
fi
exit $status
