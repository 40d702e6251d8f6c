#!/bin/sh
# narwhal-plugin-check (issue 14, the plugin author's kit): it passes every
# built-in plugin, and fails each deliberately broken plugin with the right
# check and reason: the loader's refusals (tests/plugins/mock-plugin.c) and
# each rule broken in turn by tests/plugins/broken-placement.c. TAP.

bin=${NARWHAL_PLUGIN_CHECK_BIN:-./narwhal-plugin-check}
plugins=${NARWHAL_PLUGIN_DIR:-plugins/.libs}
mocks=${MOCK_PLUGIN_DIR:-tests/plugins/.libs}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/check-plugin-check.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM

n=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); echo "not ok $n - $1"; sed 's/^/# /' "$tmp/out"; }

# expect DESCRIPTION STATUS PATTERN FILE [ARGS...]: the exit status, and a
# line of the output matching the extended regular expression.
expect() {
	what=$1 want=$2 pattern=$3
	shift 3
	rc=0
	"$bin" "$@" >"$tmp/out" 2>&1 || rc=$?
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
	if grep -q '^FAIL' "$tmp/out" || [ "$(grep -c '^PASS' "$tmp/out")" != 9 ]; then
		not_ok "$(basename "$so"): nine verdicts, all PASS"
	else
		ok "$(basename "$so"): nine verdicts, all PASS"
	fi
done

# The loader's refusals, with the daemon's own message.
expect "a bad magic is refused by the loader" 1 \
	'^FAIL  load: the daemon would refuse it: .*not a Narwhal plugin descriptor' \
	"$mocks/mock-bad-magic.so"
expect "an ABI 1 plugin is refused by the loader" 1 \
	'^FAIL  load: the daemon would refuse it: .*incompatible plugin ABI' "$mocks/mock-major.so"
expect "a missing required slot is refused by the loader" 1 \
	'^FAIL  load: .*required .* slot is NULL' "$mocks/mock-null-slot.so"
expect "a missing file is refused" 1 '^FAIL  load: no such file: ' "$tmp/no-such-plugin.so"

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
echo "1..$n"
