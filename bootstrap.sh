#!/bin/sh
# Narwhal set-up, build, test and demo on Debian 12, as root or with sudo.
#
#   ./bootstrap.sh demo   install dependencies, build, run Narwhal on conf/narwhal.json
#   ./bootstrap.sh test   install dependencies, build with -Werror, run the whole
#                         suite plain, then under ASan+UBSan, then make
#                         distcheck-quick (the tarball; Makefile.am),
#                         then, as root on Debian, build, install, start and purge
#                         the Debian packages (tests/packaging/deb-check.sh), then
#                         each libFuzzer target briefly (FUZZ_SECONDS, default 20,
#                         FUZZ_TOTAL_SECONDS for all, default 100),
#                         then the OpenAI Node SDK scenarios through Narwhal
#                         (NARWHAL_SKIP_CLIENT_TESTS=1 skips them)
#   ./bootstrap.sh deps   only install the Debian packages
set -eu

top=$(cd "$(dirname "$0")" && pwd)
jobs=$(nproc 2>/dev/null || echo 2)

# Build tools and libraries, all from Debian's registry.
packages="build-essential autoconf automake libtool pkg-config
	libglib2.0-dev libjansson-dev libmicrohttpd-dev libcurl4-openssl-dev
	curl clang libclang-rt-14-dev gnuplot-nox openssl prometheus"
# node and npm for the OpenAI SDK suite (tests/clients/openai-node). A
# node that brings its own npm (NodeSource's nodejs, which conflicts with
# Debian's npm) is kept as it is.
node_packages="nodejs npm"

# What tests/packaging/deb-check.sh needs beyond the packages above to run
# dpkg-buildpackage on debian/control (its Build-Depends are in that list).
deb_packages="debhelper dh-autoreconf dpkg-dev fakeroot"

# Whether the Debian packages can be checked here: deb-check.sh installs
# and purges packages on this machine, so only as root on Debian. Says why
# not in $why_not.
deb_check_here() {
	why_not=""
	if [ ! -f /etc/debian_version ] || ! command -v dpkg-query >/dev/null 2>&1; then
		why_not="this is not a Debian system"
	elif [ "$(id -u)" != 0 ]; then
		why_not="not running as root (it installs and purges packages)"
	fi
	[ -z "$why_not" ]
}

as_root() {
	if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

deps() {
	missing=""
	for p in $packages; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
			missing="$missing $p"
	done
	command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 ||
		missing="$missing $node_packages"
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

# How long each step of a test run took, printed at its end: CI has 30
# minutes on two cores.
started=$(date +%s)
mark=$started
timings=""
took() { # step
	now=$(date +%s)
	timings="${timings}bootstrap: $1 took $((now - mark)) s
"
	mark=$now
}
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

# The quick start: a simulated fleet of four engines (conf/narwhal.json's
# fleet: two prefill, two decode on 8101-8104), measured once by
# narwhal-profile (runs/profiles.json), Narwhal in front of it on 8000 with
# predictive admission, slo-cost placement and the reactive controller, one
# streamed request and a short replayed workload through it; then both keep
# running until Ctrl-C.
demo() {
	b="$top/build/plain"
	logs=$(mktemp -d "${TMPDIR:-/tmp}/narwhal-demo.XXXXXX")
	cd "$top"
	"$b/narwhal-sim" --engines 4 --base-port 8101 --preset llama3-8b-h100 \
		>"$logs/fleet.json" 2>"$logs/narwhal-sim.log" &
	sim=$!
	trap 'kill $sim 2>/dev/null; wait 2>/dev/null' EXIT INT TERM
	for _ in $(seq 1 50); do
		curl -sf http://127.0.0.1:8104/health >/dev/null 2>&1 && break
		sleep 0.2
	done
	# Predictive admission prices every request on measured engine
	# profiles (docs/profiles.md): measure the fleet once, briefly.
	echo "bootstrap: measuring the engines for the profile store (narwhal-profile --quick):"
	NARWHAL_PLUGIN_DIR="$b/plugins/.libs" "$b/narwhal-profile" --config conf/narwhal.json --quick
	NARWHAL_PLUGIN_DIR="$b/plugins/.libs" "$b/narwhal" --config conf/narwhal.json \
		2>"$logs/narwhal.log" &
	router=$!
	trap 'kill $router $sim 2>/dev/null; wait 2>/dev/null; echo; echo "bootstrap: stopped; logs in $logs"' EXIT INT TERM
	# Up, and the monitor has learnt the served model from an engine
	# (docs/recovery.md): /v1/models lists it.
	ready=no
	for _ in $(seq 1 100); do
		if ! kill -0 "$router" 2>/dev/null; then
			echo "bootstrap: narwhal stopped at start; its log, $logs/narwhal.log, ends:" >&2
			tail -n 5 "$logs/narwhal.log" >&2
			exit 1
		fi
		curl -sf http://127.0.0.1:8000/v1/models 2>/dev/null | grep -q '"id"' &&
			ready=yes && break
		sleep 0.2
	done
	[ "$ready" = yes ] ||
		echo "bootstrap: narwhal lists no model after 20 s; the requests below may fail (log: $logs/narwhal.log)" >&2
	echo "bootstrap: narwhal on http://127.0.0.1:8000 in front of 4 simulated engines (logs: $logs)"
	echo "bootstrap: one streamed completion, prefill on one engine and decode on another;"
	echo "bootstrap: the generated text, token by token as the SSE events arrive:"
	printf '  Narwhals are'
	curl -sN http://127.0.0.1:8000/v1/completions -H 'Content-Type: application/json' \
		-d '{"model": "llama3-8b-h100", "prompt": "Narwhals are", "max_tokens": 24, "stream": true}' |
		awk -F'"text":"' 'NF > 1 { split($2, piece, "\""); printf "%s", piece[1]; fflush() }'
	echo
	# Its progress line (stderr, once a second) and any error show; a
	# failed replay is reported and the fleet keeps running.
	echo "bootstrap: a short open-loop workload (60 requests, Poisson at 4/s), progress each second:"
	replay=0
	"$b/narwhal-replay" --url http://127.0.0.1:8000 \
		--synthetic 'rate=4,input=lognormal:1000:0.6,output=uniform:50:200' \
		--max-requests 60 --slo-ttft 1 --slo-tpot 0.1 || replay=$?
	[ "$replay" = 0 ] ||
		echo "bootstrap: narwhal-replay failed (exit $replay), as it says above; the router's log: $logs/narwhal.log" >&2
	echo "bootstrap: still running; try"
	echo "  curl -s http://127.0.0.1:8000/v1/completions -H 'Content-Type: application/json' -d '{\"model\": \"llama3-8b-h100\", \"prompt\": \"Hello\", \"max_tokens\": 8}'"
	echo "  curl -s http://127.0.0.1:8000/narwhal/state     # everything the router knows"
	echo "  curl -s http://127.0.0.1:8000/metrics           # Prometheus text format"
	echo "  kill -HUP $router                               # reload the configuration"
	echo "bootstrap: Ctrl-C stops the fleet and the router"
	wait $router
}

case "${1:-}" in
deps)
	deps
	;;
demo)
	deps
	build build/plain
	demo
	;;
test)
	deb_check=no
	if deb_check_here; then
		deb_check=yes
		packages="$packages $deb_packages"
	fi
	deps
	# promtool (Debian's prometheus) checks GET /metrics; here its absence
	# fails the test rather than skipping it.
	NARWHAL_REQUIRE_PROMTOOL=1
	export NARWHAL_REQUIRE_PROMTOOL
	took "installing the dependencies"
	build build/plain
	took "the plain build"
	check
	took "the plain suite"
	build build/sanitizers --enable-sanitizers
	took "the sanitizer build"
	check
	took "the sanitizer suite"
	# The tarball: built, its tests built, all but the integration tests
	# run (they have just passed twice), installed and uninstalled
	# (Makefile.am, distcheck-quick).
	cd "$top/build/plain"
	make -j"$jobs" distcheck-quick || failed=$((failed + 1))
	took "make distcheck-quick"
	steps="plain and sanitizer runs of the suite, distcheck"
	if [ "$deb_check" = yes ]; then
		"$top/tests/packaging/deb-check.sh" || failed=$((failed + 1))
		took "the Debian packages"
		steps="$steps, the Debian packages"
	else
		echo "bootstrap: skipped the Debian packages (tests/packaging/deb-check.sh): $why_not"
	fi
	# The fuzz targets need clang's libFuzzer; they run for a bounded time.
	# The whole tree is built with clang here, under -Werror, as a second
	# compiler's check.
	configure_in build/fuzz CC=clang --enable-fuzzing
	make -j"$jobs"
	took "the clang build"
	"$top/tests/fuzz/run-fuzzers.sh" "$top/build/fuzz" || failed=$((failed + 1))
	took "fuzzing"
	# The official OpenAI Node SDK through Narwhal (about 10 s); a registry
	# that cannot be reached fails it (tests/clients/openai-node/README.md).
	"$top/tests/clients/openai-node/run.sh" "$top/build/plain" || failed=$((failed + 1))
	took "the OpenAI SDK scenarios"
	printf '%s' "$timings"
	echo "bootstrap: $steps, fuzzing, the OpenAI SDK scenarios in $(($(date +%s) - started)) s"
	echo "tests: $passed passed, $failed failed"
	[ "$failed" = 0 ]
	;;
*)
	echo "usage: $0 demo|test|deps" >&2
	exit 2
	;;
esac
