#!/bin/sh
# Observability cost benchmark (issue 11): Narwhal's CPU per request with
# the access log on, with it off, and a baseline build of an earlier commit
# (before the metrics and the access log), in one run, in front of the same
# narwhal-sim engine. See bench/obs/README.md.
#
#   bench/obs/run.sh [path/to/narwhal [path/to/narwhal-sim]]
#
# Run from the build directory (defaults ./narwhal and ./narwhal-sim; the
# plugins are taken from ./plugins/.libs unless NARWHAL_PLUGIN_DIR is set).
# The baseline is built from BASE_REF into BASE_CACHE once and reused.
#
# Environment (defaults in brackets):
#   BASE_REF [f252d03^]  git ref of the baseline build
#   BASE_BUILD           a build directory of the baseline to use instead
#                        (holds narwhal and plugins/.libs)
#   BASE_CACHE [/tmp/narwhal-bench-obs-base]  where baselines are built
#   RUNS [5]             runs; every figure is the median over runs
#   DURATION [10]        seconds of load per cell
#   CONCS ["64"]         wrk connections
#   MODES ["ns sse"]     ns = non-streaming, sse = streaming
#   TARGETS ["base off on off2"]  base = BASE_REF's build; off, on = this
#                        build with log.access false / true; off2 = a second
#                        "off" process, the A/A control (the noise floor)
#   MAX_TOKENS_NS [16], MAX_TOKENS_SSE [200]
#   PROXY_CPU [1], LOAD_CPU [0], PAUSE [1], WARMUP [2], WRK_TIMEOUT [10]
#   LIMIT_PCT [5]        the issue's bound on the on/base ratio, percent
#   OUT                  output directory [a new /tmp/narwhal-bench-obs.*]
set -eu

here=$(cd "$(dirname "$0")" && pwd)
router=$here/../router
. "$router/common.sh"

narwhal=${1:-./narwhal}
sim=${2:-./narwhal-sim}
base_ref=${BASE_REF:-f252d03^}
base_cache=${BASE_CACHE:-/tmp/narwhal-bench-obs-base}
runs=${RUNS:-5}
duration=${DURATION:-10}
concs=${CONCS:-64}
modes=${MODES:-ns sse}
targets=${TARGETS:-base off on off2}
ns_tokens=${MAX_TOKENS_NS:-16}
sse_tokens=${MAX_TOKENS_SSE:-200}
proxy_cpu=${PROXY_CPU:-1}
load_cpu=${LOAD_CPU:-0}
pause=${PAUSE:-1}
warmup=${WARMUP:-2}
wrk_timeout=${WRK_TIMEOUT:-10}
limit_pct=${LIMIT_PCT:-5}
plugin_dir=${NARWHAL_PLUGIN_DIR:-$(dirname "$narwhal")/plugins/.libs}

nwb_need wrk jq curl taskset awk git
case $runs$duration$pause$warmup$wrk_timeout$ns_tokens$sse_tokens$limit_pct in
*[!0-9]*) nwb_die "RUNS, DURATION, PAUSE, WARMUP, WRK_TIMEOUT, MAX_TOKENS_*, LIMIT_PCT: integers" ;;
esac
[ "$runs" -ge 1 ] && [ "$runs" -le 50 ] || nwb_die "RUNS: 1 to 50"
[ "$duration" -ge 1 ] && [ "$duration" -le 600 ] || nwb_die "DURATION: 1 to 600 seconds"
for c in $concs; do case $c in '' | *[!0-9]*) nwb_die "CONCS: integers" ;; esac; done
for m in $modes; do case $m in ns | sse) ;; *) nwb_die "MODES: ns and/or sse" ;; esac; done
for t in $targets; do case $t in base | off | on | off2) ;; *) nwb_die "unknown target $t (base off on off2)" ;; esac; done
[ -x "$sim" ] || nwb_die "no narwhal-sim at $sim"
[ -x "$narwhal" ] || nwb_die "no narwhal at $narwhal"
[ -d "$plugin_dir" ] || nwb_die "no plugin directory $plugin_dir (set NARWHAL_PLUGIN_DIR)"

out=${OUT:-$(mktemp -d /tmp/narwhal-bench-obs.XXXXXX)}
mkdir -p "$out/bin" "$out/plugins"
repo=$(cd "$here/../.." && pwd)
src=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git -C "$repo" status --porcelain 2>/dev/null | grep -vc '^??' || true)

# --- the baseline build: BASE_REF's tree, exported (the repository and its
# worktrees are left alone), configured and built once per commit.
case " $targets " in
*" base "*)
	if [ -n "${BASE_BUILD:-}" ]; then
		base_dir=$BASE_BUILD
		base_sha=given
	else
		base_sha=$(git -C "$repo" rev-parse --short "$base_ref^{commit}") ||
			nwb_die "BASE_REF $base_ref is not a commit"
		base_dir=$base_cache/$base_sha/build
		if [ ! -x "$base_dir/narwhal" ]; then
			echo "building the baseline $base_ref ($base_sha) in $base_cache/$base_sha (once)"
			rm -rf "$base_cache/$base_sha"
			mkdir -p "$base_cache/$base_sha/src" "$base_dir"
			git -C "$repo" archive "$base_sha" | tar -x -C "$base_cache/$base_sha/src"
			(cd "$base_cache/$base_sha/src" && autoreconf -fi >/dev/null 2>&1) ||
				nwb_die "autoreconf of the baseline failed"
			(cd "$base_dir" && ../src/configure >configure.log 2>&1 && make -j2 >make.log 2>&1) ||
				nwb_die "the baseline did not build; see $base_dir/make.log"
		fi
	fi
	[ -x "$base_dir/narwhal" ] || nwb_die "no narwhal in $base_dir"
	mkdir -p "$out/base-plugins"
	cp "$base_dir/narwhal" "$out/bin/narwhal-base"
	cp "$base_dir"/plugins/.libs/*.so "$out/base-plugins/"
	;;
esac
# Run copies, so that a rebuild during the run changes nothing.
cp "$sim" "$out/bin/narwhal-sim"
cp "$narwhal" "$out/bin/narwhal"
cp "$plugin_dir"/*.so "$out/plugins/"
sim=$out/bin/narwhal-sim

work=$out
: >"$work/pids"
trap 'st=$?; nwb_cleanup; exit $st' EXIT
trap 'exit 130' INT TERM

ntargets=$(echo $targets | wc -w)
ncells=$((runs * $(echo $modes | wc -w) * $(echo $concs | wc -w) * ntargets))
estimate=$((ncells * (duration + pause + 1) + ntargets * 2 * (warmup + 1) + 10))
start=$(nwb_now)
echo "narwhal observability benchmark: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "proxy on CPU $proxy_cpu; narwhal-sim and wrk on CPU $load_cpu; $runs runs x $((ncells / runs)) cells x ${duration}s;" \
	"about $((estimate / 60)) min $((estimate % 60)) s"
echo "targets: $targets (base: $base_ref = ${base_sha:-none}); source $src ($dirty modified tracked files); output in $out"

nwb_start_sim "$sim" 1 "$load_cpu"
url0=$(nwb_engine_url 0)

# One aggregate engine, the router benchmark's "narwhal" fleet, so the
# figures compare with bench/router/README.md; log.level "warning" as
# there. The baseline does not know log.access, so it gets no such key.
start_target() { # target
	case $1 in
	base) bin=$out/bin/narwhal-base plugins=$out/base-plugins access= ;;
	off | off2) bin=$out/bin/narwhal plugins=$out/plugins access=false ;;
	on) bin=$out/bin/narwhal plugins=$out/plugins access=true ;;
	esac
	for attempt in 1 2 3; do # a new port if another program took ours
		port=$(nwb_free_port)
		nwb_narwhal_config "$work/$1.json.in" "$port" false '[$f.engines[0]]'
		if [ -n "$access" ]; then
			jq --argjson a "$access" '.log.access = $a' "$work/$1.json.in" >"$work/$1.json"
		else
			cp "$work/$1.json.in" "$work/$1.json"
		fi
		plugin_dir=$plugins
		if nwb_start_narwhal "$bin" "$work/$1.json" "$proxy_cpu" "$work/$1.log" "$port"; then
			eval "pid_$1=$nw_pid url_$1=http://127.0.0.1:$port"
			echo "$1: pid $nw_pid, port $port, config $work/$1.json"
			return 0
		fi
		kill "$nw_pid" 2>/dev/null || true
	done
	nwb_die "$1 did not start (see $work/$1.log)"
}
for t in $targets; do start_target "$t"; done

hz=$(getconf CLK_TCK)
printf 'run\tmode\tc\ttarget\trequests\tseconds\trps\tticks\tvalid\n' >"$out/raw.tsv"
cell_no=0
cell() { # run mode c target
	r=$1 mode=$2 c=$3 t=$4
	eval "u=\$url_$t; pid=\$pid_$t"
	nwb_mode_load "$mode"
	cell_no=$((cell_no + 1))
	tag=run$r-$mode-c$c-$t
	sleep "$pause"
	p0=$(nwb_ticks "$pid")
	valid=yes
	MAX_TOKENS=$tokens timeout $((duration + 30)) taskset -c "$load_cpu" \
		wrk -t1 -c"$c" -d"${duration}s" --timeout "${wrk_timeout}s" \
		-s "$router/$script" "$u/v1/completions" >"$out/wrk-$tag.out" 2>"$out/wrk-$tag.err" || valid=no
	p1=$(nwb_ticks "$pid")
	nwb_alive "$pid" "$sim_pid" || valid=no
	w=$out/wrk-$tag.out
	reqs=$(awk '/ requests in / { print $1 }' "$w")
	secs=$(awk '/ requests in / { s = $4; sub(/s,?$/, "", s); print s }' "$w")
	rps=$(awk '/^Requests\/sec:/ { print $2 }' "$w")
	errs=$(awk '/Socket errors:/ { gsub(/,/, ""); print $4 + $6 + $8 + $10 }' "$w")
	check=$(awk '/^NWB / { split($3, a, "="); split($4, b, "="); print a[2] + b[2] }' "$w")
	: "${reqs:=0}" "${secs:=$duration}" "${rps:=0}" "${errs:=0}"
	if [ "$reqs" = 0 ] || [ "$errs" != 0 ] || [ "${check:-x}" != 0 ]; then valid=no; fi
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$mode" "$c" "$t" "$reqs" "$secs" "$rps" \
		$((p1 - p0)) "$valid" >>"$out/raw.tsv"
	awk -v n="$cell_no" -v N="$ncells" -v el=$(($(nwb_now) - start)) -v r="$r" -v m="$mode" \
		-v c="$c" -v t="$t" -v rps="$rps" -v reqs="$reqs" -v tk=$((p1 - p0)) -v hz="$hz" \
		-v secs="$secs" -v valid="$valid" 'BEGIN {
		per = reqs > 0 ? tk / hz / reqs * 1000 : 0
		printf("[%d/%d %dm%02ds] run %d %-3s c=%-3d %-4s %8.0f req/s  cpu %.3f ms/req (%.0f%%)%s\n",
			n, N, el / 60, el % 60, r, m, c, t, rps, per, tk / hz / secs * 100,
			valid == "yes" ? "" : "  INVALID")
	}'
}

# --- warm-up (not recorded), then the runs; the order of the targets
# rotates from run to run so that no target always goes first.
nwb_warm_up "$router"
nwb_run_cells

# --- what each target wrote: access lines, and lines its writer dropped.
notes=
for t in $targets; do
	eval "u=\$url_$t"
	lines=$(grep -c '"event":"access"' "$work/$t.log" || true)
	dropped=$(curl -s -m 5 "$u/metrics" | awk '$1 == "narwhal_log_dropped_lines_total" { print $2 }')
	notes="$notes$t: ${lines:-0} access lines, dropped log lines ${dropped:-n/a}; "
	if [ "$t" = on ] && [ "${lines:-0}" = 0 ]; then
		echo "warning: log.access on wrote no access line: this build does not call the access log yet" >&2
	fi
	# About 300 bytes an access line: keep the ends of a large log only.
	if [ "$(wc -c <"$work/$t.log")" -gt 1048576 ]; then
		{ head -n 100 "$work/$t.log"; echo "... (cut by run.sh)"; tail -n 100 "$work/$t.log"; } >"$work/$t.log.cut"
		mv "$work/$t.log.cut" "$work/$t.log"
	fi
done
{
	echo "# narwhal observability benchmark, $(date -u +%Y-%m-%dT%H:%MZ)"
	echo "# machine: $(nproc) CPUs, $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo), load at end $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "# RUNS=$runs DURATION=$duration CONCS=\"$concs\" MODES=\"$modes\" TARGETS=\"$targets\" MAX_TOKENS_NS=$ns_tokens MAX_TOKENS_SSE=$sse_tokens clk_tck=$hz"
	echo "# this build: commit $src with $dirty modified tracked files; base: $base_ref = ${base_sha:-none}"
	echo "# $notes"
} >"$out/meta.txt"
cat "$out/meta.txt"
awk -v limit="$limit_pct" -v HZ="$hz" -f "$here/report.awk" "$out/raw.tsv" | tee "$out/report.md"
echo "total time $(($(nwb_now) - start)) s; raw data, wrk outputs and logs in $out"
