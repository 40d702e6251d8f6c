#!/bin/sh
# Router benchmark (issue 4): Narwhal vs direct to narwhal-sim vs nginx in
# front of the same simulator, non-streaming and streaming, at several
# concurrencies, in one run. See bench/router/README.md.
#
#   bench/router/run.sh [path/to/narwhal [path/to/narwhal-sim]]
#   bench/router/run.sh --report RAW.tsv     # re-print the tables of a run
#
# Run from the build directory (defaults ./narwhal and ./narwhal-sim; the
# plugins are taken from ./plugins/.libs unless NARWHAL_PLUGIN_DIR is set).
#
# Environment (defaults in brackets):
#   RUNS [3]            runs; every figure is the median over runs
#   DURATION [10]       seconds of load per cell
#   CONCS ["1 64 512"]  wrk connections
#   MODES ["ns sse"]    ns = non-streaming, sse = streaming, paced =
#                       non-streaming held near PACED_RPS requests/s
#   PACED_RPS [2000]    the rate of the paced mode (wrk's delay(): each
#                       connection waits c * 1000 / PACED_RPS ms per request)
#   TARGETS ["direct nginx narwhal narwhal-body narwhal-disagg"]; also narwhal-tok
#   MAX_TOKENS_NS [16]  max_tokens of non-streaming requests
#   MAX_TOKENS_SSE [200] max_tokens of streamed requests
#   PROXY_CPU [1]       CPU of the proxy under test (Narwhal or nginx)
#   LOAD_CPU [0]        CPU of narwhal-sim and wrk
#   PAUSE [1]           seconds of quiet before each cell
#   WARMUP [2]          seconds of warm-up load per target and mode at start
#   WRK_TIMEOUT [10]    wrk's per-request timeout, seconds
#   OUT                 output directory [a new /tmp/narwhal-bench-router.*]
#   PERF [0]            1: perf record -g the proxy of every narwhal* cell;
#                       all: of every proxy cell (distorts those cells; for
#                       profiling runs only; reports in OUT/perf-*.txt);
#                       layers: perf record (no call graphs) of every proxy
#                       cell, split by layer into OUT/layers.tsv and
#                       OUT/layers.md (README, "What the decided stack
#                       costs by itself")
#   run.sh --layers OUT  # re-print the layer tables of a PERF=layers run
set -eu

here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"

if [ "${1:-}" = --report ]; then
	[ -f "${2:-}" ] || nwb_die "usage: $0 --report RAW.tsv"
	exec awk -f "$here/report.awk" "$2"
fi
if [ "${1:-}" = --layers ]; then
	[ -f "${2:-}/raw.tsv" ] && [ -f "$2/layers.tsv" ] || nwb_die "usage: $0 --layers OUT (of a PERF=layers run)"
	exec awk -f "$here/layers-report.awk" "$2/raw.tsv" "$2/layers.tsv"
fi

narwhal=${1:-./narwhal}
sim=${2:-./narwhal-sim}
runs=${RUNS:-3}
duration=${DURATION:-10}
concs=${CONCS:-1 64 512}
modes=${MODES:-ns sse}
targets=${TARGETS:-direct nginx narwhal narwhal-body narwhal-disagg}
ns_tokens=${MAX_TOKENS_NS:-16}
sse_tokens=${MAX_TOKENS_SSE:-200}
paced_rps=${PACED_RPS:-2000}
proxy_cpu=${PROXY_CPU:-1}
load_cpu=${LOAD_CPU:-0}
pause=${PAUSE:-1}
warmup=${WARMUP:-2}
wrk_timeout=${WRK_TIMEOUT:-10}
perf=${PERF:-0}
plugin_dir=${NARWHAL_PLUGIN_DIR:-$(dirname "$narwhal")/plugins/.libs}

nwb_need wrk jq curl taskset awk
case $runs$duration$pause$warmup$wrk_timeout$ns_tokens$sse_tokens$paced_rps in
*[!0-9]*) nwb_die "RUNS, DURATION, PAUSE, WARMUP, WRK_TIMEOUT, MAX_TOKENS_*, PACED_RPS: integers" ;;
esac
for c in $concs; do case $c in '' | *[!0-9]*) nwb_die "CONCS: integers" ;; esac; done
for m in $modes; do case $m in ns | sse | paced) ;; *) nwb_die "MODES: ns, sse and/or paced" ;; esac; done
[ "$paced_rps" -gt 0 ] || nwb_die "PACED_RPS: more than 0"
need_nginx=0
need_narwhal=0
for t in $targets; do
	case $t in
	direct) ;;
	nginx) need_nginx=1 ;;
	narwhal | narwhal-body | narwhal-disagg | narwhal-tok) need_narwhal=1 ;;
	*) nwb_die "unknown target $t (direct nginx narwhal narwhal-body narwhal-disagg narwhal-tok)" ;;
	esac
done
case " $targets " in *" direct "*) ;; *) nwb_die "TARGETS must include direct (latency is added versus direct)" ;; esac
[ -x "$sim" ] || nwb_die "no narwhal-sim at $sim"
if [ $need_narwhal = 1 ]; then
	[ -x "$narwhal" ] || nwb_die "no narwhal at $narwhal"
	[ -d "$plugin_dir" ] || nwb_die "no plugin directory $plugin_dir (set NARWHAL_PLUGIN_DIR)"
fi
[ $need_nginx = 1 ] && nwb_need nginx
case $perf in 0) ;; 1 | all | layers) nwb_need perf ;; *) nwb_die "PERF: 0, 1, all or layers" ;; esac
[ "$(nproc)" -ge 2 ] || echo "warning: only $(nproc) CPU; proxy and load share it" >&2

out=${OUT:-$(mktemp -d /tmp/narwhal-bench-router.XXXXXX)}
mkdir -p "$out"
# Run copies of the binaries and plugins, so that a rebuild during the run
# changes nothing; note which source they came from.
mkdir -p "$out/bin" "$out/plugins"
cp "$sim" "$out/bin/narwhal-sim"
sim=$out/bin/narwhal-sim
if [ $need_narwhal = 1 ]; then
	cp "$narwhal" "$out/bin/narwhal"
	cp "$plugin_dir"/*.so "$out/plugins/"
	narwhal=$out/bin/narwhal
	plugin_dir=$out/plugins
fi
src=$(cd "$here/../.." && git rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(cd "$here/../.." && git status --porcelain 2>/dev/null | grep -vc '^??' || true)
work=$out
: >"$work/pids"
trap 'st=$?; nwb_cleanup; exit $st' EXIT
trap 'exit 130' INT TERM

ntargets=$(echo $targets | wc -w)
ncells=$((runs * $(echo $modes | wc -w) * $(echo $concs | wc -w) * ntargets))
estimate=$((ncells * (duration + pause + 1) + ntargets * 2 * (warmup + 1) + 10))
start=$(nwb_now)
echo "narwhal router benchmark: $(nproc) CPUs ($(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo))," \
	"load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "proxy on CPU $proxy_cpu; narwhal-sim and wrk on CPU $load_cpu; $runs runs x $ncells/$runs cells x ${duration}s;" \
	"about $((estimate / 60)) min $((estimate % 60)) s"
echo "targets: $targets; modes: $modes; concurrency: $concs; source $src ($dirty modified tracked files); output in $out"

# --- the simulator: engine 0 serves direct, nginx and the aggregate Narwhal
# fleets; engines 1 (prefill) and 2 (decode) the disaggregated fleet.
nwb_start_sim "$sim" 3 "$load_cpu"
sim_version=$("$sim" --version | awk '{ print $2 }')
url0=$(nwb_engine_url 0)
hostport0=${url0#http://}

# --- the proxies, each on the proxy CPU, all started once for the whole run.
pids_direct=
url_direct=$url0
if [ $need_nginx = 1 ]; then
	mkdir -p "$work/nginx-body" "$work/nginx-proxy" "$work/nginx-fastcgi" "$work/nginx-uwsgi" "$work/nginx-scgi"
	for attempt in 1 2 3; do # a new port if another program took ours
		nginx_port=$(nwb_free_port)
		sed -e "s|@WORK@|$work|g" -e "s|@PORT@|$nginx_port|g" -e "s|@UPSTREAM@|$hostport0|g" \
			"$here/nginx.conf.in" >"$work/nginx.conf"
		taskset -c "$proxy_cpu" nginx -e "$work/nginx-error.log" -p "$work" -c "$work/nginx.conf" \
			2>>"$work/nginx-error.log" &
		nginx_master=$!
		nwb_remember "$nginx_master"
		nwb_wait_http "http://127.0.0.1:$nginx_port/v1/models" 10 && break
		kill "$nginx_master" 2>/dev/null || true
		[ $attempt = 3 ] && { tail -n 5 "$work/nginx-error.log" >&2; nwb_die "nginx did not start"; }
	done
	nginx_worker=$(pgrep -P "$nginx_master" | tr '\n' ' ' | sed 's/ *$//')
	[ -n "$nginx_worker" ] || nwb_die "no nginx worker process"
	# The worker does the work; the master's share (about 1 MB of RSS and no
	# CPU) is counted with it so that both proxies are whole process trees.
	pids_nginx="$nginx_master $nginx_worker"
	url_nginx=http://127.0.0.1:$nginx_port
	echo "nginx $(nginx -v 2>&1 | sed 's|.*/||'): master $nginx_master, worker $nginx_worker, port $nginx_port"
fi

start_narwhal() { # target tokenize engines-expression [stream_decode]
	v=$(echo "$1" | tr - _)
	for attempt in 1 2 3; do # a new port if another program took ours
		port=$(nwb_free_port)
		nwb_narwhal_config "$work/$1.json" "$port" "$2" "$3" "${4:-true}"
		eval "pids_$v=; url_$v=http://127.0.0.1:$port"
		if nwb_start_narwhal "$narwhal" "$work/$1.json" "$proxy_cpu" "$work/$1.log" "$port"; then
			eval "pids_$v=$nw_pid"
			echo "$1: pid $nw_pid, port $port, engine.tokenize $2, config $work/$1.json"
			return 0
		fi
		if kill -0 "$nw_pid" 2>/dev/null; then
			eval "pids_$v=$nw_pid" # running but not serving: measure what it does
			break
		fi
	done
	echo "$1: NOT SERVING (see $work/$1.log); its cells will be marked invalid" >&2
}
for t in $targets; do
	case $t in
	narwhal) start_narwhal narwhal false '[$f.engines[0]]' ;;
	narwhal-body) start_narwhal narwhal-body false '[$f.engines[0]]' false ;;
	narwhal-tok) start_narwhal narwhal-tok true '[$f.engines[0]]' ;;
	narwhal-disagg)
		start_narwhal narwhal-disagg false \
			'[($f.engines[1] | .role = "prefill"), ($f.engines[2] | .role = "decode")]' ;;
	esac
done

# --- preflight: one request of each mode per target, checked in full.
body() { # mode
	if [ "$1" = ns ]; then
		printf '{"model":"opt-13b-a100","prompt":"Summarise the history of the lighthouse in two lines.","max_tokens":%d,"stream":false}' "$ns_tokens"
	else
		printf '{"model":"opt-13b-a100","prompt":"Write a long story about a lighthouse keeper.","max_tokens":%d,"stream":true}' "$sse_tokens"
	fi
}
preflight() { # target url -> prints "" or the reason it fails
	f=$work/preflight-$1
	code=$(curl -s -m 10 -o "$f-ns" -w '%{http_code}' -H 'Content-Type: application/json' \
		-d "$(body ns)" "$2/v1/completions" || true)
	if [ "$code" != 200 ] || ! grep -q '"finish_reason":"length"' "$f-ns"; then
		echo "non-streaming: HTTP $code $(head -c 200 "$f-ns" 2>/dev/null)"
		return
	fi
	code=$(curl -sN -m 10 -o "$f-sse" -w '%{http_code}' -H 'Content-Type: application/json' \
		-d "$(body sse)" "$2/v1/completions" || true)
	events=$(grep -c '^data: ' "$f-sse" || true)
	last=$(grep '^data: ' "$f-sse" | tail -n 1)
	if [ "$code" != 200 ] || [ "$events" != $((sse_tokens + 1)) ] || [ "$last" != "data: [DONE]" ]; then
		echo "streaming: HTTP $code, $events events (expected $((sse_tokens + 1)) ending with [DONE])"
		return
	fi
}
broken=
for t in $targets; do
	v=$(echo "$t" | tr - _)
	eval "u=\$url_$v"
	why=$(preflight "$t" "$u")
	if [ -n "$why" ]; then
		echo "preflight $t: FAILED: $why" >&2
		broken="$broken $t"
	else
		echo "preflight $t: ok (200, finished completion; $((sse_tokens + 1)) SSE events ending with [DONE])"
	fi
done

# --- one cell: wrk against one target, CPU and memory of its process(es).
hz=$(getconf CLK_TCK)
printf '#hz=%s ns_tokens=%s sse_tokens=%s duration=%s paced_rps=%s\n' "$hz" "$ns_tokens" "$sse_tokens" "$duration" "$paced_rps" >"$out/raw.tsv"
printf 'run\tmode\tc\ttarget\trps\trequests\tseconds\tp50_us\tp99_us\terrors\tnon2xx\tbad\tproxy_ticks\tsim_ticks\trss_kb\thwm_kb\tvalid\tnote\n' \
	>>"$out/raw.tsv"
cell_no=0
cell() { # run mode c target
	r=$1 mode=$2 c=$3 t=$4
	v=$(echo "$t" | tr - _)
	eval "u=\$url_$v; pids=\$pids_$v"
	nwb_mode_load "$mode"
	cell_no=$((cell_no + 1))
	tag=run$r-$mode-c$c-$t
	note=
	case " $broken " in *" $t "*) note="preflight failed" ;; esac
	if [ -n "$pids" ] && ! nwb_alive $pids; then note="process gone"; fi
	sleep "$pause"
	# A target that failed its preflight or died still gets its load, so
	# that the failure shows in wrk's counts; the cell is marked invalid.
	p0=$(nwb_ticks $pids)
	s0=$(nwb_ticks "$sim_pid")
	perf_pid=
	profile=no graph=-g
	case $perf in
	all) profile=yes ;;
	layers) profile=yes graph= ;;
	1) [ "${t#narwhal}" != "$t" ] && profile=yes ;;
	esac
	if [ -n "$pids" ] && [ $profile = yes ]; then
		(sleep 1 && perf record -q $graph -o "$out/perf-$tag.data" -p "$(echo $pids | tr ' ' ,)" \
			-- sleep $((duration > 3 ? duration - 2 : 1)) >/dev/null 2>&1) &
		perf_pid=$!
	fi
	pace=0
	[ "$mode" = paced ] && pace=$((c * 1000 / paced_rps))
	MAX_TOKENS=$tokens PACE_MS=$pace timeout $((duration + 30)) taskset -c "$load_cpu" \
		wrk -t1 -c"$c" -d"${duration}s" --latency --timeout "${wrk_timeout}s" \
		-s "$here/$script" "$u/v1/completions" >"$out/wrk-$tag.out" 2>"$out/wrk-$tag.err" ||
		note="${note:+$note; }wrk exit $?"
	p1=$(nwb_ticks $pids)
	s1=$(nwb_ticks "$sim_pid")
	if [ -n "$perf_pid" ]; then wait "$perf_pid" || true; fi
	if [ -n "$pids" ]; then mem=$(nwb_mem $pids); else mem="0 0"; fi
	if [ -n "$pids" ] && ! nwb_alive $pids; then note="${note:+$note; }process died"; fi
	nwb_alive "$sim_pid" || note="${note:+$note; }narwhal-sim died"
	w=$out/wrk-$tag.out
	rps=$(awk '/^Requests\/sec:/ { print $2 }' "$w")
	reqs=$(awk '/ requests in / { print $1 }' "$w")
	secs=$(awk '/ requests in / { s = $4; sub(/s,?$/, "", s); print s }' "$w")
	p50=$(nwb_wrk_us "$(awk '$1 == "50%" { print $2 }' "$w")")
	p99=$(nwb_wrk_us "$(awk '$1 == "99%" { print $2 }' "$w")")
	errs=$(awk '/Socket errors:/ { gsub(/,/, ""); print $4 + $6 + $8 + $10 }' "$w")
	non2xx=$(awk '/^NWB / { split($3, a, "="); print a[2] }' "$w")
	bad=$(awk '/^NWB / { split($4, a, "="); print a[2] }' "$w")
	wrk_non2xx=$(awk '/Non-2xx or 3xx responses:/ { print $NF }' "$w")
	: "${rps:=0}" "${reqs:=0}" "${secs:=$duration}" "${errs:=0}" "${non2xx:=}" "${bad:=}" "${wrk_non2xx:=0}"
	[ -n "$non2xx" ] || { note="${note:+$note; }no check line from the wrk script"; non2xx=0; bad=0; }
	if [ "$wrk_non2xx" -gt "$non2xx" ]; then non2xx=$wrk_non2xx; fi
	valid=yes
	if [ -n "$note" ] || [ "$reqs" = 0 ] || [ "$errs" != 0 ] || [ "$non2xx" != 0 ] || [ "$bad" != 0 ]; then
		valid=no
	fi
	set -- $mem
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
		"$r" "$mode" "$c" "$t" "$rps" "$reqs" "$secs" "$p50" "$p99" "$errs" "$non2xx" "$bad" \
		$((p1 - p0)) $((s1 - s0)) "$1" "$2" "$valid" "${note:--}" >>"$out/raw.tsv"
	el=$(($(nwb_now) - start))
	awk -v n="$cell_no" -v N="$ncells" -v el="$el" -v r="$r" -v m="$mode" -v c="$c" -v t="$t" \
		-v rps="$rps" -v p50="$p50" -v p99="$p99" -v reqs="$reqs" -v pt=$((p1 - p0)) -v hz="$hz" \
		-v secs="$secs" -v rss="$1" -v tok="$tokens" -v valid="$valid" -v errs="$errs" \
		-v non2xx="$non2xx" -v bad="$bad" -v note="$note" 'BEGIN {
		line = sprintf("[%d/%d %dm%02ds] run %d %-3s c=%-3d %-14s %9.0f req/s", n, N, el / 60, el % 60, r, m, c, t, rps)
		if (m == "sse") line = line sprintf(" (%.0f ev/s)", rps * tok)
		line = line sprintf("  p50 %s  p99 %s", fmt(p50), fmt(p99))
		if (p50 == "nan" || p50 == "") line = sprintf("%s  (no latency)", line)
		if (t != "direct" && reqs > 0)
			line = line sprintf("  cpu %.3f s/1k req (%.0f%%)  rss %.1f MB", pt / hz / reqs * 1000, pt / hz / secs * 100, rss / 1024)
		if (valid != "yes")
			line = line sprintf("  INVALID: errors %d, non-2xx %d, bad %d%s", errs, non2xx, bad, note != "" ? ", " note : "")
		print line
	}
	function fmt(us) { return us == "nan" ? "—" : us >= 1e6 ? sprintf("%.2fs", us / 1e6) : us >= 1e3 ? sprintf("%.2fms", us / 1e3) : sprintf("%.0fus", us) }'
	if [ "$valid" != yes ] && [ -s "$out/wrk-$tag.err" ]; then
		head -n 3 "$out/wrk-$tag.err" | sed 's/^/    /'
	fi
	if [ -f "$out/perf-$tag.data" ]; then
		perf report --stdio --no-children -i "$out/perf-$tag.data" 2>/dev/null | head -n 150 >"$out/perf-$tag.txt" || true
		perf report --stdio --no-children --sort dso -i "$out/perf-$tag.data" 2>/dev/null | head -n 40 >"$out/perf-$tag-dso.txt" || true
		if [ "$perf" = layers ]; then
			split=$(perf report --stdio --no-children --sort dso,sym -g none -i "$out/perf-$tag.data" 2>/dev/null |
				awk -f "$here/layers.awk") &&
				printf '%s\t%s\t%s\t%s\t%s\n' "$r" "$mode" "$c" "$t" "$split" >>"$out/layers.tsv"
		fi
	fi
}

# --- warm-up (not recorded): every target, every mode, c=64.
nwb_warm_up "$here"
echo "warm-up done ($(($(nwb_now) - start)) s)"

# --- the runs: modes, then concurrency, then the targets in an order that
# rotates from run to run so that no target always goes first.
nwb_run_cells

for t in $targets; do
	v=$(echo "$t" | tr - _)
	eval "pids=\$pids_$v"
	[ -n "$pids" ] && echo "$t final memory (VmRSS VmHWM, KiB): $(nwb_mem $pids)"
done
{
	echo "# narwhal router benchmark, $(date -u +%Y-%m-%dT%H:%MZ)"
	echo "# machine: $(nproc) CPUs, $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo), $(uname -r), load at end $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "# narwhal-sim $sim_version --no-delay on CPU $load_cpu with wrk; proxy on CPU $proxy_cpu; RUNS=$runs DURATION=$duration CONCS=\"$concs\" MODES=\"$modes\""
	echo "# TARGETS=\"$targets\" MAX_TOKENS_NS=$ns_tokens MAX_TOKENS_SSE=$sse_tokens clk_tck=$hz"
	echo "# source: commit $src with $dirty modified tracked files; narwhal sha256 $(sha256sum "$narwhal" 2>/dev/null | cut -c1-12)"
} >"$out/meta.txt"
cat "$out/meta.txt"
awk -f "$here/report.awk" "$out/raw.tsv" |
	tee "$out/report.md"
if [ "$perf" = layers ] && [ -f "$out/layers.tsv" ]; then
	awk -f "$here/layers-report.awk" "$out/raw.tsv" "$out/layers.tsv" | tee "$out/layers.md"
fi
echo "total time $(($(nwb_now) - start)) s; raw data, wrk outputs and logs in $out"
