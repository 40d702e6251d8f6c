#!/bin/sh
# narwhal --check-config against the example files, as TAP.
#
# Each tests/config/NAME.json is broken on purpose: narwhal must exit 1 and
# print exactly the lines of NAME.expected about that file (other lines,
# such as a summary, are ignored). conf/narwhal.json must pass, print no
# warning, and show every field of tests/config/fields.list. Finally the
# manual, docs/configuration.md, must name every field.
#
# Runs from the build directory; paths are given relative to $srcdir so the
# messages match the .expected files in any build (make distcheck too).

srcdir=${srcdir:-.}
bin=${NARWHAL_BIN:-./narwhal}
case $bin in /*) ;; *) bin=$(pwd)/$bin ;; esac

if [ ! -x "$bin" ]; then
	echo "1..0 # SKIP narwhal is not built ($bin)"
	exit 0
fi
cd "$srcdir" || { echo "Bail out! cannot enter $srcdir"; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/check-config.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM

# Every key path of pretty-printed JSON (one member per line), with array
# elements as "[]": fleet.engines[].id
flatten() {
	awk '
	function prefix(   p, i) {
		p = ""
		for (i = 1; i <= depth; i++) {
			if (stack[i] == "")
				continue
			if (stack[i] == "[]")
				p = p "[]"
			else
				p = (p == "" ? stack[i] : p "." stack[i])
		}
		return p
	}
	{
		line = $0
		sub(/^[ \t]+/, "", line)
		key = ""
		rest = line
		if (match(line, /^"[^"]*":/)) {
			key = substr(line, 2, RLENGTH - 3)
			p = prefix()
			print (p == "" ? key : p "." key)
			rest = substr(line, RLENGTH + 1)
			sub(/^[ \t]+/, "", rest)
		}
		if (rest ~ /^[}\]]/) {
			depth--
		} else if (rest ~ /[{[]$/) {
			depth++
			stack[depth] = key != "" ? key : (depth == 1 ? "" : "[]")
		}
	}'
}

fields() {
	grep -v -e '^#' -e '^$' tests/config/fields.list
}

set -- tests/config/*.expected
n=$(($# + 3))
echo "1..$n"
i=0
failed=0

ok() {
	i=$((i + 1))
	echo "ok $i - $1"
}

not_ok() {
	i=$((i + 1))
	failed=1
	echo "not ok $i - $1"
	shift
	for f in "$@"; do
		sed 's/^/# /' "$f"
	done
}

for expected in "$@"; do
	name=${expected%.expected}
	file=$name.json
	"$bin" --check-config "$file" >"$tmp/out" 2>"$tmp/err"
	status=$?
	grep -E "^(warning: )?$file: " "$tmp/err" >"$tmp/got"
	if [ $status -eq 1 ] && cmp -s "$tmp/got" "$expected"; then
		ok "$file is refused with the expected messages"
	else
		echo "exit status $status (expected 1); expected, then stderr:" >"$tmp/why"
		not_ok "$file is refused with the expected messages" "$tmp/why" "$expected" "$tmp/err"
	fi
done

# conf/narwhal.json asks for predictive admission, which needs the profile
# store narwhal-profile writes (profiles.path, runs/profiles.json from the
# working directory): one for its four engines, checked from a directory
# that holds it.
file=conf/narwhal.json
mkdir -p "$tmp/cwd/runs"
engine() { # id
	printf '{"engine": "%s", "url": "http://127.0.0.1:1", "dialect": "vllm", "model": "m",' "$1"
	printf ' "hardware": null, "kv_capacity_tokens": 0, "measured_at": "2026-12-01T20:00:00Z",'
	printf ' "prefill": {"a_s": 0.003, "b_s": 3e-5, "c_s": 5e-10, "min_tokens": 16,'
	printf ' "max_tokens": 8192, "samples": 40, "rel_rms_error": 0.01},'
	printf ' "decode": {"d0_s": 0.0064, "d1_s": 5e-8, "d2_s": 3e-5, "min_active": 1,'
	printf ' "max_active": 64, "min_kv_tokens": 0, "max_kv_tokens": 200000, "samples": 40,'
	printf ' "rel_rms_error": 0.01},'
	printf ' "handoff": {"setup_s": 0, "per_token_s": 0, "max_tokens": 0, "samples": 0}}'
}
{
	printf '{"version": 1, "created_at": "2026-12-01T20:00:00Z", "tool": "check-config",'
	printf ' "engines": [%s, %s, %s, %s]}\n' "$(engine sim-p0)" "$(engine sim-p1)" \
		"$(engine sim-d0)" "$(engine sim-d1)"
} >"$tmp/cwd/runs/profiles.json"
(cd "$tmp/cwd" && "$bin" --check-config "$OLDPWD/$file") >"$tmp/out" 2>"$tmp/err"
status=$?
if [ $status -eq 0 ] && [ ! -s "$tmp/err" ]; then
	ok "$file passes without warnings"
else
	echo "exit status $status (expected 0), stderr:" >"$tmp/why"
	not_ok "$file passes without warnings" "$tmp/why" "$tmp/err"
fi

flatten <"$tmp/out" | sort -u >"$tmp/paths"
fields | sort -u >"$tmp/fields"
comm -23 "$tmp/fields" "$tmp/paths" >"$tmp/missing"
if [ $status -eq 0 ] && [ ! -s "$tmp/missing" ]; then
	ok "$file: the effective configuration shows every field"
else
	echo "fields missing from the output:" >"$tmp/why"
	not_ok "$file: the effective configuration shows every field" "$tmp/why" "$tmp/missing"
fi

: >"$tmp/undocumented"
for f in $(fields); do
	grep -qF "\`$f\`" docs/configuration.md || echo "$f" >>"$tmp/undocumented"
done
if [ ! -s "$tmp/undocumented" ]; then
	ok "docs/configuration.md names every field"
else
	echo "fields docs/configuration.md does not name:" >"$tmp/why"
	not_ok "docs/configuration.md names every field" "$tmp/why" "$tmp/undocumented"
fi
exit $failed
