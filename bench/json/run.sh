#!/bin/sh
# The request path's JSON reader and writer against jansson on the
# daemon's payloads (issue 15): builds bench/json/json-bench in a build
# directory, runs it on bench/json/payloads and keeps its output. See
# bench/json/README.md.
#
#   bench/json/run.sh [build directory, default build/plain]
#
# Environment (defaults in brackets):
#   RUNS [7]        runs; figures are medians over runs
#   BATCH_MS [10]   milliseconds of jansson calls per timed batch
#   CPU             pin to this CPU with taskset (unset: not pinned)
#   OUT             output file [a new /tmp/narwhal-bench-json.*]
set -eu

here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../build/plain}
runs=${RUNS:-7}
batch=${BATCH_MS:-10}
out=${OUT:-$(mktemp "${TMPDIR:-/tmp}/narwhal-bench-json.XXXXXX")}

make -C "$build" bench/json/json-bench >/dev/null
set -- "$build/bench/json/json-bench" --runs "$runs" --batch-ms "$batch"
if [ -n "${CPU:-}" ]; then
	set -- taskset -c "$CPU" "$@"
fi
p=$here/payloads
{
	echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)"
	echo "# $(uname -srm), $(getconf _NPROCESSORS_ONLN) cpus, load $(cut -d' ' -f1-3 /proc/loadavg)"
	"$@" "$p/completions-body.json" "$p/chat-body.json" "$p/completion-chunk.json" \
		"$p/usage-chunk.json" "$p/prefill-answer.json" "$p/prefill-request.json" \
		"$p/decode-request.json"
} | tee "$out"
echo "output: $out" >&2
