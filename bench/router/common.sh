# Shared helpers of bench/router/run.sh and bench/router/soak.sh (POSIX sh,
# sourced). Everything listens on 127.0.0.1 only.
#
# The caller sets: work (a private temporary directory), and calls
# nwb_cleanup from its EXIT trap. Processes started here are remembered in
# $work/pids and only those are stopped.

nwb_die() {
	echo "$0: $*" >&2
	exit 1
}

nwb_need() {
	for tool; do
		command -v "$tool" >/dev/null 2>&1 || nwb_die "$tool is missing (apt-get install -y wrk nginx-light jq util-linux)"
	done
}

# Seconds since the epoch, with a fraction when date supports it.
nwb_now() {
	date +%s
}

nwb_remember() {
	echo "$1" >>"$work/pids"
}

# Stop every process this script started, by pid: TERM, then KILL after 5 s.
nwb_cleanup() {
	[ -f "$work/pids" ] || return 0
	for p in $(cat "$work/pids"); do
		kill -TERM "$p" 2>/dev/null || true
	done
	i=0
	for p in $(cat "$work/pids"); do
		while kill -0 "$p" 2>/dev/null && [ $i -lt 50 ]; do
			sleep 0.1
			i=$((i + 1))
		done
		kill -KILL "$p" 2>/dev/null || true
	done
	: >"$work/pids"
}

# A TCP port no local socket uses (in any state, IPv4 or IPv6), below the
# kernel's ephemeral range so that no outgoing connection can take it
# later. There is a small race with other programs; the callers check
# that their server started.
nwb_free_port() {
	low=$(awk '{ print $1 }' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
	seed=$$$(date +%N 2>/dev/null | cut -c1-6)
	# The ports in use go through a pipe, not an argument: a busy machine
	# has more sockets than an argument list holds.
	awk 'FNR > 1 { split($2, a, ":"); print a[2] }' /proc/net/tcp /proc/net/tcp6 2>/dev/null |
		awk -v seed="$seed" -v low="${low:-32768}" '{ used[$1] = 1 } END {
		srand(seed % 2147483647)
		lo = 10000; hi = low > 12000 ? low : 32768
		for (i = 0; i < 1000; i++) {
			p = lo + int(rand() * (hi - lo))
			if (!(sprintf("%04X", p) in used)) { print p; exit }
		}
		exit 1
	}'
}

# HTTP status of a GET, or 000.
nwb_http_status() {
	curl -s -o /dev/null -m 2 -w '%{http_code}' "$1" 2>/dev/null || true
}

# Wait (bounded, $2 seconds) until GET $1 answers 200.
nwb_wait_http() {
	i=0
	while [ "$(nwb_http_status "$1")" != 200 ]; do
		i=$((i + 1))
		[ $i -gt $(($2 * 10)) ] && return 1
		sleep 0.1
	done
	return 0
}

# Sum of utime + stime (clock ticks) of the given pids.
nwb_ticks() {
	t=0
	for p; do
		v=$(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null | awk '{ print $12 + $13 }')
		t=$((t + ${v:-0}))
	done
	echo "$t"
}

# "VmRSS VmHWM" in KiB, summed over the given pids.
nwb_mem() {
	for p; do
		cat "/proc/$p/status" 2>/dev/null
	done | awk '/^VmRSS:/ { r += $2 } /^VmHWM:/ { h += $2 } END { printf "%d %d\n", r, h }'
}

nwb_alive() {
	for p; do
		kill -0 "$p" 2>/dev/null || return 1
	done
	return 0
}

# Start narwhal-sim with $2 engines pinned to CPU $3; sets sim_pid and
# writes the fleet line to $work/fleet.json.
nwb_start_sim() {
	taskset -c "$3" "$1" --engines "$2" --no-delay --base-port 0 --log-level warning \
		--fleet-out "$work/fleet.json" >/dev/null 2>"$work/sim.log" &
	sim_pid=$!
	nwb_remember "$sim_pid"
	i=0
	while ! grep -q engines "$work/fleet.json" 2>/dev/null; do
		i=$((i + 1))
		if [ $i -gt 100 ] || ! kill -0 "$sim_pid" 2>/dev/null; then
			cat "$work/sim.log" >&2
			nwb_die "narwhal-sim did not start"
		fi
		sleep 0.05
	done
}

# URL of engine $1 (0-based) of the simulator.
nwb_engine_url() {
	jq -r ".engines[$1].url" "$work/fleet.json"
}

# Write a Narwhal configuration:
#   nwb_narwhal_config FILE PORT TOKENIZE ENGINES [STREAM_DECODE]
# where ENGINES is a jq expression over the fleet line ($f), e.g.
# '[$f.engines[0]]', and STREAM_DECODE is engine.stream_decode (default true).
nwb_narwhal_config() {
	jq -n --slurpfile fl "$work/fleet.json" --argjson port "$2" --argjson tok "$3" \
		--argjson sd "${5:-true}" "
	\$fl[0] as \$f | {
		server: {host: \"127.0.0.1\", port: \$port},
		log: {level: \"warning\"},
		serving: {admission: \"open\", max_connections: 1024},
		engine: {tokenize: \$tok, stream_decode: \$sd},
		controller: {policy: \"static\", min_prefill: 1, min_decode: 1},
		fleet: {model: \$f.model, engines: ($4)}
	}" >"$1"
}

# Start Narwhal with config $2 on CPU $3, log to $4; sets nw_pid and waits
# (bounded) until GET /v1/models answers on port $5.
nwb_start_narwhal() {
	NARWHAL_PLUGIN_DIR=$plugin_dir taskset -c "$3" "$1" --config "$2" 2>"$4" &
	nw_pid=$!
	nwb_remember "$nw_pid"
	if ! nwb_wait_http "http://127.0.0.1:$5/v1/models" 10; then
		echo "narwhal did not answer GET /v1/models on port $5:" >&2
		tail -n 20 "$4" >&2
		return 1
	fi
	return 0
}

# Convert a wrk latency ("123.45us", "1.20ms", "2.00s", "1.00m") to µs.
nwb_wrk_us() {
	awk -v v="$1" 'BEGIN {
		n = v + 0; u = v; sub(/^[0-9.]+/, "", u)
		if (u == "us") f = 1; else if (u == "ms") f = 1e3; else if (u == "s") f = 1e6
		else if (u == "m") f = 6e7; else if (u == "h") f = 3.6e9; else { print "nan"; exit }
		printf "%.1f\n", n * f
	}'
}

# The wrk script and max_tokens of a mode: sets script and tokens. Reads
# ns_tokens and sse_tokens. "paced" is non-streaming at a fixed rate.
nwb_mode_load() {
	case $1 in
	ns | paced) script=completions.lua tokens=$ns_tokens ;;
	*) script=stream.lua tokens=$sse_tokens ;;
	esac
}

# Warm every target up, not recorded: each mode for $warmup seconds at
# c=64, wrk on $load_cpu with the scripts of folder $1. Reads targets,
# modes, ns_tokens, sse_tokens, warmup, load_cpu and url_<target> (a dash
# in a target's name is an underscore in its variable).
nwb_warm_up() {
	for t in $targets; do
		v=$(echo "$t" | tr - _)
		eval "u=\$url_$v"
		for m in $modes; do
			nwb_mode_load "$m"
			MAX_TOKENS=$tokens timeout $((warmup + 30)) taskset -c "$load_cpu" \
				wrk -t1 -c64 -d"${warmup}s" -s "$1/$script" "$u/v1/completions" >/dev/null 2>&1 || true
		done
	done
}

# Every run: the modes, then the concurrencies, then the targets in an
# order that rotates from run to run so that no target always goes first;
# calls the script's own `cell RUN MODE CONC TARGET`. Reads runs, modes,
# concs and targets.
nwb_run_cells() {
	n=$(echo $targets | wc -w)
	for r in $(seq "$runs"); do
		order=$(echo $targets | awk -v k=$(((r - 1) % n)) '{ for (i = 0; i < NF; i++) printf "%s ", $((i + k) % NF + 1) }')
		for m in $modes; do
			for c in $concs; do
				for t in $order; do
					cell "$r" "$m" "$c" "$t"
				done
			done
		done
	done
}
