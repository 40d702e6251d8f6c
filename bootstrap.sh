#!/bin/sh
# Narwhal set-up, build, test and demo on Debian 12, as root or with sudo.
#
#   ./bootstrap.sh demo   install dependencies, build, run Narwhal on conf/narwhal.json
#   ./bootstrap.sh test   install dependencies, build with -Werror, run the whole
#                         suite plain, then under ASan+UBSan, then make distcheck,
#                         then each libFuzzer target briefly (FUZZ_SECONDS, default 20)
#   ./bootstrap.sh deps   only install the Debian packages
set -eu

top=$(cd "$(dirname "$0")" && pwd)
jobs=$(nproc 2>/dev/null || echo 2)

# Build tools and libraries, all from Debian's registry.
packages="build-essential autoconf automake libtool pkg-config
	libglib2.0-dev libjansson-dev libmicrohttpd-dev libcurl4-openssl-dev
	curl clang libclang-rt-14-dev gnuplot-nox"

as_root() {
	if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

deps() {
	missing=""
	for p in $packages; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
			missing="$missing $p"
	done
	if [ -n "$missing" ]; then
		echo "bootstrap: installing$missing"
		as_root apt-get update -qq
		as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
	fi
}

configure_in() { # dir, configure flags...
	dir=$1; shift
	[ -x "$top/configure" ] || (cd "$top" && autoreconf -fi)
	mkdir -p "$top/$dir"
	cd "$top/$dir"
	"$top/configure" --enable-werror "$@" >/dev/null
}

build() { # dir, configure flags...
	configure_in "$@"
	make -j"$jobs"
}

# Run make check in the current build dir, keep going on failure, and add
# its counts to the totals printed at the end.
passed=0
failed=0
check() {
	status=0
	make -j"$jobs" check || status=$?
	if [ -f test-suite.log ]; then
		p=$(sed -n 's/^# PASS: *//p' test-suite.log | head -n 1)
		f=$(sed -n 's/^# FAIL: *//p' test-suite.log | head -n 1)
		e=$(sed -n 's/^# ERROR: *//p' test-suite.log | head -n 1)
		passed=$((passed + ${p:-0}))
		failed=$((failed + ${f:-0} + ${e:-0}))
	fi
	[ "$status" = 0 ] || failed=$((failed + 1))
	return 0
}

case "${1:-}" in
deps)
	deps
	;;
demo)
	deps
	build build/plain
	echo "bootstrap: starting narwhal on conf/narwhal.json (Ctrl-C stops it)"
	echo "bootstrap: try   curl -s http://127.0.0.1:8000/narwhal/health"
	cd "$top"
	NARWHAL_PLUGIN_DIR="$top/build/plain/plugins/.libs" exec build/plain/narwhal --config conf/narwhal.json
	;;
test)
	deps
	build build/plain
	check
	build build/sanitizers --enable-sanitizers
	check
	cd "$top/build/plain"
	make -j"$jobs" distcheck DISTCHECK_CONFIGURE_FLAGS=--enable-werror || failed=$((failed + 1))
	# The fuzz targets need clang's libFuzzer; they run for a bounded time.
	configure_in build/fuzz CC=clang --enable-fuzzing
	make -j"$jobs"
	"$top/tests/fuzz/run-fuzzers.sh" "$top/build/fuzz" || failed=$((failed + 1))
	echo "bootstrap: plain and sanitizer runs of the suite, distcheck, fuzzing"
	echo "tests: $passed passed, $failed failed"
	[ "$failed" = 0 ]
	;;
*)
	echo "usage: $0 demo|test|deps" >&2
	exit 2
	;;
esac
