#!/bin/sh
# Run every libFuzzer target of a build for a bounded time over its seed
# corpus, for CI. Builds nothing: configure with
#   ./configure CC=clang --enable-fuzzing && make
# then run this from that build directory (or pass it as the argument).
#
#   tests/fuzz/run-fuzzers.sh [BUILD_DIR]
#
# Each target tests/fuzz/fuzz-NAME starts from tests/fuzz/corpus/NAME in
# the source tree; inputs it finds go to a scratch directory, never into
# the tree. Bounds: FUZZ_SECONDS (default 20) and FUZZ_RUNS (default
# 5000000) per target, whichever ends first, and FUZZ_TOTAL_SECONDS for
# all of them (default 100, what five targets took at 20 s): when the
# targets would take longer at FUZZ_SECONDS, each gets an equal share, so
# a new target does not make a CI run longer. Exits 0 when every target
# ran clean or when none was built (with a message), non-zero on a crash,
# leak, timeout or sanitizer report; the reproducer is kept and named.
set -u

top=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-.}
seconds=${FUZZ_SECONDS:-20}
total=${FUZZ_TOTAL_SECONDS:-100}
runs=${FUZZ_RUNS:-5000000}

if [ ! -d "$build/tests/fuzz" ]; then
	echo "run-fuzzers: no fuzz targets in $build (configure CC=clang --enable-fuzzing, make); skipping"
	exit 0
fi
targets=$(find "$build/tests/fuzz" -maxdepth 1 -type f -name 'fuzz-*' -perm -u+x | sort)
if [ -z "$targets" ]; then
	echo "run-fuzzers: no fuzz targets built in $build/tests/fuzz (configure CC=clang --enable-fuzzing, make); skipping"
	exit 0
fi

count=$(echo "$targets" | wc -l)
if [ $((seconds * count)) -gt "$total" ]; then
	seconds=$((total / count))
	[ "$seconds" -ge 1 ] || seconds=1
fi

scratch=$(mktemp -d "${TMPDIR:-/tmp}/narwhal-fuzz.XXXXXX")
artifacts=${FUZZ_ARTIFACTS:-$scratch/artifacts}
mkdir -p "$artifacts"
failed=0

for bin in $targets; do
	name=$(basename "$bin")
	seeds="$top/tests/fuzz/corpus/${name#fuzz-}"
	work="$scratch/corpus-$name"
	mkdir -p "$work"
	[ -d "$seeds" ] || seeds=""
	echo "run-fuzzers: $name for ${seconds}s or $runs runs${seeds:+ from $seeds}"
	# leaks are failures; UBSan stops at the first report (built with
	# -fno-sanitize-recover), and libFuzzer turns either into an exit code
	ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} \
	"$bin" -max_total_time="$seconds" -runs="$runs" -timeout=10 -rss_limit_mb=2048 \
		-max_len=65536 -print_final_stats=1 -artifact_prefix="$artifacts/$name-" \
		"$work" $seeds >"$scratch/$name.log" 2>&1
	rc=$?
	if [ "$rc" -ne 0 ]; then
		failed=1
		tail -n 60 "$scratch/$name.log"
		echo "run-fuzzers: $name FAILED (exit $rc); log $scratch/$name.log"
		for a in "$artifacts/$name-"*; do
			[ -e "$a" ] && echo "run-fuzzers: reproduce with $bin $a"
		done
	else
		grep -E '^stat::(number_of_executed_units|peak_rss_mb)|^#[0-9]+.*DONE' \
			"$scratch/$name.log" | sed "s/^/run-fuzzers: $name: /"
		echo "run-fuzzers: $name ok"
	fi
done

if [ "$failed" -ne 0 ]; then
	echo "run-fuzzers: kept $scratch for the logs and reproducers"
	exit 1
fi
rm -rf "$scratch"
exit 0
