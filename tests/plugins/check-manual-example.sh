#!/bin/sh
# The manual's complete example (docs/plugins.md, section 10) must build and
# load as the manual says, so it can never rot: fewest.c is cut out of the
# page, built out of tree as a plugin with -Wall -Wextra -Werror against
# include/ only, loaded by `narwhal --check-config` through
# plugins.placement.path (good settings pass, a bad one is refused with the
# plugin's reason), and the page's own test-fewest.c is built with it and
# run; so is its test on the plugin test kit (test-fewest-kit.c), with
# -Wall -Wextra -Werror -pedantic against the built test library (its
# unused parameters failed that, issue 14). TAP.

srcdir=${srcdir:-.}
cc=${CC:-cc}
bin=${NARWHAL_BIN:-./narwhal}
case $bin in /*) ;; *) bin=$(pwd)/$bin ;; esac
page=$srcdir/docs/plugins.md
inc="-I$srcdir/include $JANSSON_CFLAGS"
libs=${JANSSON_LIBS:--ljansson}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/check-manual-example.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
chmod 700 "$tmp"

n=0
out=""
ok() { n=$((n + 1)); out="$out
ok $n - $1"; }
not_ok() { n=$((n + 1)); out="$out
not ok $n - $1"; }
skip() { n=$((n + 1)); out="$out
ok $n # SKIP $1"; }
diag() { out="$out
$(sed 's/^/# /' "$1")"; }

# The fenced block after the marker <!-- example: NAME -->.
extract() {
	awk -v want="<!-- example: $1 -->" '
		$0 == want { armed = 1; next }
		armed && /^```/ { if (inside) exit; inside = 1; next }
		inside { print }' "$page" >"$tmp/$1"
	[ -s "$tmp/$1" ]
}

if extract fewest.c && extract test-fewest.c && extract test-fewest-kit.c; then
	ok "the manual holds fewest.c, test-fewest.c and test-fewest-kit.c"
else
	not_ok "the manual holds fewest.c, test-fewest.c and test-fewest-kit.c"
	echo "1..$n$out"
	exit 0
fi

so=$tmp/placement-fewest.so
if $cc -std=gnu11 -Wall -Wextra -Werror -fPIC -shared -fvisibility=hidden $inc \
	-o "$so" "$tmp/fewest.c" $libs 2>"$tmp/err"; then
	ok "fewest.c builds as a plugin with -Wall -Wextra -Werror"
	chmod 755 "$so"
else
	diag "$tmp/err"
	not_ok "fewest.c builds as a plugin with -Wall -Wextra -Werror"
fi

if $cc -std=gnu11 -Wall -Wextra -Werror $inc -o "$tmp/test-fewest" \
	"$tmp/test-fewest.c" "$tmp/fewest.c" $libs 2>"$tmp/err" &&
	"$tmp/test-fewest" >"$tmp/out" 2>"$tmp/err"; then
	ok "the manual's test-fewest.c passes"
else
	diag "$tmp/err"
	not_ok "the manual's test-fewest.c passes"
fi

# KIT_TEST_CFLAGS and KIT_TEST_LIBS: tests/plugins/Makefile.inc.
# shellcheck disable=SC2086 # the flags are lists
if $cc -std=gnu11 -Wall -Wextra -Werror -pedantic $KIT_TEST_CFLAGS -o "$tmp/test-fewest-kit" \
	"$tmp/test-fewest-kit.c" "$tmp/fewest.c" $KIT_TEST_LIBS 2>"$tmp/err" &&
	"$tmp/test-fewest-kit" >"$tmp/out" 2>"$tmp/err"; then
	ok "the manual's test on the kit builds with every warning an error, and passes"
else
	diag "$tmp/err"
	not_ok "the manual's test on the kit builds with every warning an error, and passes"
fi

# A fleet of one pair; the built-in plugins come from $NARWHAL_PLUGIN_DIR.
config() {
	cat >"$tmp/$1.json" <<EOC
{
  "serving": { "admission": "open" },
  "controller": { "policy": "static" },
  "fleet": { "engines": [
    { "id": "p0", "url": "http://127.0.0.1:9", "dialect": "vllm", "role": "prefill" },
    { "id": "d0", "url": "http://127.0.0.1:10", "dialect": "vllm", "role": "decode" } ] },
  "plugins": { "placement": { "path": "$so", "config": $2 } }
}
EOC
}

if [ ! -x "$bin" ]; then
	skip "narwhal is not built ($bin)"
	skip "narwhal is not built ($bin)"
else
	config good '{ "max_resident": 4 }'
	if "$bin" --check-config "$tmp/good.json" >/dev/null 2>"$tmp/err"; then
		ok "narwhal --check-config loads and creates the example"
	else
		diag "$tmp/err"
		not_ok "narwhal --check-config loads and creates the example"
	fi
	config bad '{ "depth": 1 }'
	if "$bin" --check-config "$tmp/bad.json" >/dev/null 2>"$tmp/err"; then
		not_ok "the example refuses an unknown setting by name"
	elif grep -q 'plugin fewest refused its configuration: unknown key "depth"' "$tmp/err"; then
		ok "the example refuses an unknown setting by name"
	else
		diag "$tmp/err"
		not_ok "the example refuses an unknown setting by name"
	fi
fi
echo "1..$n$out"
