#!/bin/sh
# The cost of one admission plus placement decision (issue 12) and of a
# split's price (issue 13): builds bench/decision/decision in a build
# directory, runs it and keeps its output. See bench/decision/README.md.
#
#   bench/decision/run.sh [build directory, default build/plain]
#
# Environment (defaults in brackets):
#   ENGINES ["64,1024"]  fleet sizes
#   RUNS [7]             runs per size; figures are medians over runs
#   REQUESTS             decisions per variant per run (the program's
#                        default: 20000 up to 256 engines, else 4000)
#   QUEUE [auto]         prefill queue projection: host, stand-in or auto
#   OUT                  output file [a new /tmp/narwhal-bench-decision.*]
set -eu

here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../build/plain}
engines=${ENGINES:-64,1024}
runs=${RUNS:-7}
queue=${QUEUE:-auto}
out=${OUT:-$(mktemp "${TMPDIR:-/tmp}/narwhal-bench-decision.XXXXXX")}

make -C "$build" bench/decision/decision >/dev/null
set -- --engines "$engines" --runs "$runs" --queue "$queue" \
	--plugin-dir "${NARWHAL_PLUGIN_DIR:-$build/plugins/.libs}"
if [ -n "${REQUESTS:-}" ]; then
	set -- "$@" --requests "$REQUESTS"
fi
{
	echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)"
	echo "# $(uname -srm), $(getconf _NPROCESSORS_ONLN) cpus"
	"$build/bench/decision/decision" "$@"
} | tee "$out"
echo "output: $out" >&2
