# What bench/obs/run.sh and bench/obs/policy.sh share (POSIX sh, sourced
# after bench/router/common.sh): the knobs, the run copies of the
# binaries, the cells (one wrk run against one daemon pinned to its own
# CPU, its utime + stime around it) and the report. See bench/obs/README.md.
#
# The caller sets here (its directory), name (of the output directory),
# title, known_targets, default_targets and default_limit, calls
# cpu_init "$@", starts narwhal-sim (nwb_start_sim) and each target with
# cpu_start, then calls cpu_measure and cpu_report.

cpu_init() { # [path/to/narwhal [path/to/narwhal-sim]]
	router=$here/../router
	narwhal=${1:-./narwhal}
	sim=${2:-./narwhal-sim}
	runs=${RUNS:-5}
	duration=${DURATION:-10}
	concs=${CONCS:-64}
	modes=${MODES:-ns sse}
	targets=${TARGETS:-$default_targets}
	ns_tokens=${MAX_TOKENS_NS:-16}
	sse_tokens=${MAX_TOKENS_SSE:-200}
	proxy_cpu=${PROXY_CPU:-1}
	load_cpu=${LOAD_CPU:-0}
	pause=${PAUSE:-1}
	warmup=${WARMUP:-2}
	wrk_timeout=${WRK_TIMEOUT:-10}
	limit_pct=${LIMIT_PCT:-$default_limit}
	plugin_dir=${NARWHAL_PLUGIN_DIR:-$(dirname "$narwhal")/plugins/.libs}

	nwb_need wrk jq curl taskset awk git
	case $runs$duration$pause$warmup$wrk_timeout$ns_tokens$sse_tokens$limit_pct in
	*[!0-9]*) nwb_die "RUNS, DURATION, PAUSE, WARMUP, WRK_TIMEOUT, MAX_TOKENS_*, LIMIT_PCT: integers" ;;
	esac
	[ "$runs" -ge 1 ] && [ "$runs" -le 50 ] || nwb_die "RUNS: 1 to 50"
	[ "$duration" -ge 1 ] && [ "$duration" -le 600 ] || nwb_die "DURATION: 1 to 600 seconds"
	for c in $concs; do case $c in '' | *[!0-9]*) nwb_die "CONCS: integers" ;; esac; done
	for m in $modes; do case $m in ns | sse) ;; *) nwb_die "MODES: ns and/or sse" ;; esac; done
	for t in $targets; do
		case " $known_targets " in *" $t "*) ;; *) nwb_die "unknown target $t ($known_targets)" ;; esac
	done
	[ -x "$sim" ] || nwb_die "no narwhal-sim at $sim"
	[ -x "$narwhal" ] || nwb_die "no narwhal at $narwhal"
	[ -d "$plugin_dir" ] || nwb_die "no plugin directory $plugin_dir (set NARWHAL_PLUGIN_DIR)"

	out=${OUT:-$(mktemp -d "/tmp/narwhal-bench-$name.XXXXXX")}
	mkdir -p "$out/bin" "$out/plugins"
	repo=$(cd "$here/../.." && pwd)
	src=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)
	dirty=$(git -C "$repo" status --porcelain 2>/dev/null | grep -vc '^??' || true)
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
	hz=$(getconf CLK_TCK)
	echo "narwhal $title benchmark: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "proxy on CPU $proxy_cpu; narwhal-sim and wrk on CPU $load_cpu; $runs runs x $((ncells / runs)) cells x ${duration}s;" \
		"about $((estimate / 60)) min $((estimate % 60)) s"
	echo "targets: $targets; source $src ($dirty modified tracked files); output in $out"
}

# Start a daemon on PROXY_CPU:
#   cpu_start TARGET BINARY PLUGIN-DIR ENGINES [FILTER]
# with nwb_narwhal_config's configuration over ENGINES (a jq expression
# over the simulator's fleet line $f) and then the jq program FILTER.
# Sets pid_<target> and url_<target> (a dash in the name is an underscore).
cpu_start() {
	v=$(echo "$1" | tr - _)
	for attempt in 1 2 3; do # a new port if another program took ours
		port=$(nwb_free_port)
		nwb_narwhal_config "$work/$1.json.in" "$port" false "$4"
		jq "${5:-.}" "$work/$1.json.in" >"$work/$1.json" || nwb_die "could not write the configuration of $1"
		plugin_dir=$3
		if nwb_start_narwhal "$2" "$work/$1.json" "$proxy_cpu" "$work/$1.log" "$port"; then
			eval "pid_$v=$nw_pid url_$v=http://127.0.0.1:$port"
			echo "$1: pid $nw_pid, port $port, config $work/$1.json"
			return 0
		fi
		kill "$nw_pid" 2>/dev/null || true
	done
	nwb_die "$1 did not start (see $work/$1.log)"
}

cell_no=0
cell() { # run mode c target
	r=$1 mode=$2 c=$3 t=$4
	v=$(echo "$t" | tr - _)
	eval "u=\$url_$v; pid=\$pid_$v"
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
		printf("[%d/%d %dm%02ds] run %d %-3s c=%-3d %-8s %8.0f req/s  cpu %.4f ms/req (%.0f%%)%s\n",
			n, N, el / 60, el % 60, r, m, c, t, rps, per, tk / hz / secs * 100,
			valid == "yes" ? "" : "  INVALID")
	}'
}

# Warm-up (not recorded), then the command given, if any, then the runs;
# the order of the targets rotates from run to run so that no target
# always goes first.
cpu_measure() { # [COMMAND]
	printf 'run\tmode\tc\ttarget\trequests\tseconds\trps\tticks\tvalid\n' >"$out/raw.tsv"
	nwb_warm_up "$router"
	[ $# -eq 0 ] || "$@"
	nwb_run_cells
}

# The report: cpu_report RATIOS BOUNDS NOTES [META]. RATIOS is a
# ;-separated list of a/b or "a/b=what it measures"; BOUNDS the a/b among
# them held to LIMIT_PCT; NOTES and META lines for meta.txt.
cpu_report() {
	{
		echo "# narwhal $title benchmark, $(date -u +%Y-%m-%dT%H:%MZ)"
		echo "# machine: $(nproc) CPUs, $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo), load at end $(cut -d' ' -f1-3 /proc/loadavg)"
		echo "# RUNS=$runs DURATION=$duration CONCS=\"$concs\" MODES=\"$modes\" TARGETS=\"$targets\" MAX_TOKENS_NS=$ns_tokens MAX_TOKENS_SSE=$sse_tokens clk_tck=$hz"
		echo "# this build: commit $src with $dirty modified tracked files${4:+; $4}"
		echo "# $3"
	} >"$out/meta.txt"
	cat "$out/meta.txt"
	awk -v limit="$limit_pct" -v HZ="$hz" -v ratios="$1" -v bounds="$2" \
		-f "$here/report.awk" "$out/raw.tsv" | tee "$out/report.md"
	echo "total time $(($(nwb_now) - start)) s; raw data, wrk outputs and logs in $out"
}
