#!/bin/sh
# The daemon refuses a bad plugin at start as --check-config and a reload
# do (issue 14, tried as an attacker would): it exits 1 at once with
# `FILE: json.path: problem: what is valid` (its start printed the loader's
# message alone, without the file and the field), and a FIFO given as a
# plugin is refused rather than waited on for ever. And --check-config
# --show-plugins names the file a plugin was loaded from as an absolute
# path, with the files of its name it hides further along the search path
# (it said neither). Every run is bounded in time; the file asks for an
# ephemeral port, though none is ever opened. TAP.

bin=${NARWHAL_BIN:-./narwhal}
mocks=${MOCK_PLUGIN_DIR:-tests/plugins/.libs}
limit_s=${KIT_CHECK_SECONDS:-60}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/check-daemon-plugins.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM

n=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); echo "not ok $n - $1"; sed 's/^/# /' "$tmp/err"; }

if [ ! -x "$bin" ]; then
	echo "1..0 # SKIP narwhal is not built ($bin)"
	exit 0
fi

# config NAME PLUGINS: a fleet of one vLLM pair and this plugins section;
# the built-in plugins come from $NARWHAL_PLUGIN_DIR.
config() {
	cat >"$tmp/$1.json" <<EOC
{
  "server": { "host": "127.0.0.1", "port": 0 },
  "serving": { "admission": "open" },
  "controller": { "policy": "static" },
  "fleet": { "engines": [
    { "id": "p0", "url": "http://127.0.0.1:9", "dialect": "$3", "role": "prefill" },
    { "id": "d0", "url": "http://127.0.0.1:10", "dialect": "$3", "role": "decode" } ] },
  "plugins": $2
}
EOC
}

# refused DESCRIPTION NAME PATTERN: the daemon started on NAME.json exits 1
# with a line on standard error matching the extended regular expression.
refused() {
	rc=0
	timeout "$limit_s" "$bin" --config "$tmp/$2.json" >/dev/null 2>"$tmp/err" || rc=$?
	if [ "$rc" = 1 ] && grep -Eq -- "$3" "$tmp/err"; then
		ok "$1"
	else
		echo "exit $rc, expected 1 and a line matching: $3" >>"$tmp/err"
		not_ok "$1"
	fi
}

config refused '{ "placement": { "path": "'"$mocks"'/placement-broken.so", "config": { "depth": 1 } } }' vllm
refused "a plugin that refuses its settings stops the start, naming the file and field" refused \
	"^$tmp/refused.json: plugins.placement: $mocks/placement-broken.so: plugin broken refused its configuration: unknown key \"depth\""

mkfifo "$tmp/placement-fifo.so"
config fifo '{ "placement": { "path": "'"$tmp"'/placement-fifo.so" } }' vllm
refused "a FIFO as a plugin stops the start at once" fifo \
	"^$tmp/fifo.json: plugins.placement: .*expected a shared object file, found a FIFO"

mkdir "$tmp/dialect-dir.so"
config dir '{ "dialects": { "minnow": { "path": "'"$tmp"'/dialect-dir.so" } } }' minnow
refused "a directory as a dialect stops the start, naming the dialect's field" dir \
	"^$tmp/dir.json: plugins.dialects.minnow: .*expected a shared object file, found a directory"
# A drop-in directory with a copy of a built-in: the copy wins and says
# what it hides. A relative path is shown as the file it names.
builtin=${NARWHAL_PLUGIN_DIR:-plugins/.libs}
mkdir "$tmp/drop-in"
cp "$builtin/placement-least-loaded.so" "$tmp/drop-in/"
cp "$mocks/placement-broken.so" "$tmp/"
real=$(cd "$tmp" && pwd -P)
config shadow '{ "dir": "'"$tmp"'/drop-in", "placement": { "name": "least-loaded" } }' vllm
config relative '{ "placement": { "path": "placement-broken.so" } }' vllm
rc=0
timeout "$limit_s" "$bin" --check-config "$tmp/shadow.json" --show-plugins >"$tmp/out" 2>"$tmp/err" ||
	rc=$?
cat "$tmp/out" >>"$tmp/err"
if [ "$rc" = 0 ] && grep '^plugins.placement: least-loaded ' "$tmp/out" | grep -Fq \
	" from $tmp/drop-in/placement-least-loaded.so (hides $builtin/placement-least-loaded.so)"; then
	ok "--show-plugins names the drop-in that wins and the built-in it hides"
else
	not_ok "--show-plugins names the drop-in that wins and the built-in it hides"
fi
rc=0
timeout "$limit_s" "$bin" --check-config "$tmp/shadow.json" --show-plugins --json >"$tmp/out" \
	2>"$tmp/err" || rc=$?
cat "$tmp/out" >>"$tmp/err"
if [ "$rc" = 0 ] && tr -d ' \n' <"$tmp/out" |
	grep -Fq "\"hides\":[\"$builtin/placement-least-loaded.so\"],\"name\":\"least-loaded\""; then
	ok "--show-plugins --json lists what a plugin hides"
else
	not_ok "--show-plugins --json lists what a plugin hides"
fi
rc=0
(cd "$tmp" && timeout "$limit_s" "$bin" --check-config relative.json --show-plugins) \
	>"$tmp/out" 2>"$tmp/err" || rc=$?
cat "$tmp/out" >>"$tmp/err"
if [ "$rc" = 0 ] && grep -Fqx "plugins.placement: broken 1.0.0 from $real/placement-broken.so" "$tmp/out"; then
	ok "--show-plugins shows a relative path as the absolute file it names"
else
	not_ok "--show-plugins shows a relative path as the absolute file it names"
fi
echo "1..$n"
