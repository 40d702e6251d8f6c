#!/bin/sh
# narwhal-plugin-check (issue 14, the plugin author's kit): it passes every
# built-in plugin, and fails each deliberately broken plugin with the right
# check and reason: the loader's refusals (tests/plugins/mock-plugin.c), files
# that are no shared object, and each rule broken in turn by
# tests/plugins/broken-placement.c, including plugins that crash, exit, hang,
# print or eat memory: each gives a verdict and the exit status 1, and never
# takes the tool down or holds it up (docs/plugins.md, "Checking a
# plugin"). Every run is bounded in time. TAP.

bin=${NARWHAL_PLUGIN_CHECK_BIN:-./narwhal-plugin-check}
plugins=${NARWHAL_PLUGIN_DIR:-plugins/.libs}
mocks=${MOCK_PLUGIN_DIR:-tests/plugins/.libs}

limit_s=${KIT_CHECK_SECONDS:-300}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/check-plugin-check.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM

n=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); echo "not ok $n - $1"; sed 's/^/# /' "$tmp/out"; }

# The tool, bounded (exit 124 when it had to be stopped); its standard
# output in $tmp/stdout, both streams in $tmp/out.
run() {
	rc=0
	timeout "$limit_s" "$bin" "$@" >"$tmp/stdout" 2>"$tmp/stderr" || rc=$?
	cat "$tmp/stdout" "$tmp/stderr" >"$tmp/out"
}

# expect DESCRIPTION STATUS PATTERN FILE [ARGS...]: the exit status, and a
# line of the output matching the extended regular expression.
expect() {
	what=$1 want=$2 pattern=$3
	shift 3
	run "$@"
	if [ "$rc" = "$want" ] && grep -Eq -- "$pattern" "$tmp/out"; then
		ok "$what"
	else
		echo "# exit $rc, expected $want and a line matching: $pattern" >>"$tmp/out"
		not_ok "$what"
	fi
}

if [ ! -x "$bin" ]; then
	echo "1..0 # SKIP narwhal-plugin-check is not built ($bin)"
	exit 0
fi

# Every built-in plugin conforms, with every check passed.
for so in "$plugins"/*.so; do
	expect "$(basename "$so") passes every check" 0 '^conforms: every check passed$' "$so"
	if grep -q '^FAIL' "$tmp/out" || [ "$(grep -c '^PASS' "$tmp/out")" != 10 ]; then
		not_ok "$(basename "$so"): ten verdicts, all PASS"
	else
		ok "$(basename "$so"): ten verdicts, all PASS"
	fi
done

# A dialect gets its section as the daemon hands it: without the path key,
# which is Narwhal's, and no section at all when none is given.
expect "a dialect's section is handed over without its path" 0 \
	'^PASS  create: created with the configuration \{\}$' "$plugins/dialect-vllm.so" \
	--config '{"path": "/srv/plugins/dialect-vllm.so"}'
expect "a dialect given no --config gets none" 0 '^PASS  create: created with the configuration null$' \
	"$plugins/dialect-vllm.so"

# The loader's refusals, with the daemon's own message.
expect "a bad magic is refused by the loader" 1 \
	'^FAIL  load: the daemon would refuse it: .*not a Narwhal plugin descriptor' \
	"$mocks/mock-bad-magic.so"
expect "an ABI 1 plugin is refused by the loader" 1 \
	'^FAIL  load: the daemon would refuse it: .*incompatible plugin ABI' "$mocks/mock-major.so"
expect "a missing required slot is refused by the loader" 1 \
	'^FAIL  load: .*required .* slot is NULL' "$mocks/mock-null-slot.so"
expect "a missing file is refused" 1 '^FAIL  load: no such file: ' "$tmp/no-such-plugin.so"

# Files that are no shared object are refused before they are opened: a
# FIFO held dlopen (the daemon too) until something wrote to it.
mkfifo "$tmp/placement-fifo.so"
expect "a FIFO is refused, not waited on" 1 \
	'^FAIL  load: the daemon would refuse it: .*expected a shared object file, found a FIFO' \
	"$tmp/placement-fifo.so"
mkdir "$tmp/placement-dir.so"
expect "a directory is refused as one" 1 \
	'^FAIL  load: .*expected a shared object file, found a directory' "$tmp/placement-dir.so"
ln -s loop-b.so "$tmp/loop-a.so"
ln -s loop-a.so "$tmp/loop-b.so"
expect "a symbolic link loop is not called a missing file" 1 \
	'^FAIL  load: the daemon would refuse it: .*cannot be reached: Too many levels of symbolic links' \
	"$tmp/loop-a.so"
expect "a plugin whose entry returns a wild pointer fails load, the tool survives" 1 \
	'^FAIL  load: the plugin crashed while the loader read it' "$mocks/placement-wild.so"

# One rule broken at a time.
broken=$mocks/placement-broken.so
expect "the broken plugin, unbroken, conforms" 0 '^conforms' "$broken"
expect "a refused configuration fails create with the plugin's reason" 1 \
	'^FAIL  create: the plugin refused the configuration .*unknown key "depth"' \
	"$broken" --config '{"depth": 1}'
expect "accepting an unknown key fails bad-config" 1 \
	'^FAIL  bad-config: accepted the unknown key' "$broken" --config '{"break": "config"}'
expect "a failing place fails slots" 1 '^FAIL  slots: place returned -5' \
	"$broken" --config '{"break": "slot"}'
expect "an engine outside the eligible set fails range" 1 \
	'^FAIL  range: place chose engine 4294967294, which is not in the eligible set' \
	"$broken" --config '{"break": "range"}'
expect "reading the wall clock fails clock" 1 '^FAIL  clock: place called clock_gettime\(\)' \
	"$broken" --config '{"break": "clock"}'
expect "waiting fails blocking" 1 '^FAIL  blocking: place called usleep\(\)' \
	"$broken" --config '{"break": "sleep"}'
expect "state shared between instances fails isolation" 1 \
	'^FAIL  isolation: an instance answered differently after another ran other work' \
	"$broken" --config '{"break": "static"}'
expect "memory kept after destroy fails leak" 1 '^FAIL  leak: ' \
	"$broken" --config '{"break": "leak"}'
expect "a bad --config is a usage error" 2 'not JSON' "$broken" --config '{'
long=$(awk 'BEGIN { printf "{"; for (i = 0; i < 2000; i++) printf "%s\"key%d\": %d", i ? ", " : "", i, i; printf "}" }')
expect "a long --config refused shows a line of its start" 1 \
	'^FAIL  create: the plugin refused the configuration \{"key0":0,.*\.\.\. \([0-9]+ bytes\): unknown key' \
	"$broken" --config "$long"
if [ "$(awk '/^FAIL  create/ { print length($0) }' "$tmp/stdout")" -lt 400 ]; then
	ok "the verdict on a long --config stays one short line"
else
	not_ok "the verdict on a long --config stays one short line"
fi
expect "a --config that is an array is a usage error" 2 '--config: expected a JSON object' \
	"$broken" --config '[{"break": "none"}]'
expect "a --config that is a number is a usage error" 2 '--config: expected a JSON object' \
	"$broken" --config '5'

# A plugin that crashes, ends the process or never returns fails the check
# under way, naming the call; the other checks still run.
expect "a crash in place fails slots, naming place" 1 \
	'^FAIL  slots: the plugin crashed in place \(' "$broken" --config '{"break": "crash"}'
grep -q '^PASS  bad-config' "$tmp/out" && ok "a crash in place leaves the other checks running" ||
	not_ok "a crash in place leaves the other checks running"
expect "an abort in destroy fails create, naming destroy" 1 \
	'^FAIL  create: the plugin crashed in destroy \(' "$broken" --config '{"break": "abort"}'
expect "exit(0) in create fails create, and the tool exits 1" 1 \
	'^FAIL  create: the process ended in create, with exit status 0' \
	"$broken" --config '{"break": "exit"}'
expect "a create that never returns is stopped and fails bad-config" 1 \
	'^FAIL  bad-config: create did not return within [0-9]+ s' \
	"$broken" --config '{"break": "hang"}'

# A check that cannot create its instance says so rather than pass.
expect "a create that refuses the second time fails blocking, which creates twice" 1 \
	'^FAIL  blocking: the plugin refused the configuration it accepted in the create check' \
	"$broken" --config '{"break": "once"}'

# What a plugin writes cannot pass for a verdict: it goes to standard
# error, marked, and fails the output check.
expect "writing to standard output fails output" 1 \
	'^FAIL  output: the plugin wrote [0-9]+ bytes .*first in the slots check' \
	"$broken" --config '{"break": "print"}'
if grep -q '^conforms' "$tmp/stdout" || grep -q '^PASS  output' "$tmp/stdout"; then
	not_ok "a plugin's output never reaches the verdicts"
elif grep -q '^plugin output (slots): conforms: every check passed$' "$tmp/stderr"; then
	ok "a plugin's output never reaches the verdicts"
else
	not_ok "a plugin's output is shown on standard error, marked"
fi

# Allocating without bound ends at the check's memory limit (none under
# the sanitizers, which reserve far more address space up front).
if [ -n "$KIT_SANITIZERS" ]; then
	n=$((n + 1))
	echo "ok $n # SKIP allocating without bound: no memory limit under the sanitizers"
else
	expect "allocating without bound is stopped by the memory limit and fails slots" 1 \
		'^FAIL  slots: the plugin crashed in place \(' "$broken" --config '{"break": "hog"}'
fi
echo "1..$n"
