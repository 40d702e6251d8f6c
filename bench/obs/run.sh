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
. "$here/../router/common.sh"
. "$here/cpu.sh"

name=obs title=observability known_targets="base off on off2" default_targets="base off on off2" default_limit=5
base_ref=${BASE_REF:-f252d03^}
base_cache=${BASE_CACHE:-/tmp/narwhal-bench-obs-base}
cpu_init "$@"

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
echo "base: $base_ref = ${base_sha:-none}"
nwb_start_sim "$sim" 1 "$load_cpu"

# One aggregate engine, the router benchmark's "narwhal" fleet, so the
# figures compare with bench/router/README.md; log.level "warning" as
# there. The baseline does not know log.access, so it gets no such key.
for t in $targets; do
	case $t in
	base) cpu_start base "$out/bin/narwhal-base" "$out/base-plugins" '[$f.engines[0]]' ;;
	off | off2) cpu_start "$t" "$out/bin/narwhal" "$out/plugins" '[$f.engines[0]]' '.log.access = false' ;;
	on) cpu_start on "$out/bin/narwhal" "$out/plugins" '[$f.engines[0]]' '.log.access = true' ;;
	esac
done

cpu_measure

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
cpu_report "on/off=the access log;on/base;off/base;off2/off=A/A: noise" on/base "$notes" \
	"base: $base_ref = ${base_sha:-none}"
