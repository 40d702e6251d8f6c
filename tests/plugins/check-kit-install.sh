#!/bin/sh
# The plugin author's kit as installed (issue 14): a plugin project outside
# the tree, made of exactly the configure.ac and Makefile.am of
# docs/plugins.md section 9 and the fewest.c of section 10, must go through
# autoreconf, configure and make against the installed narwhal.m4 and
# narwhal-plugin.pc, and the plugin it builds must export its entry alone.
# Every step runs under a time and a memory limit: the narwhal.m4 of 0.1.0
# sent m4 into endless expansion (it grew to 14.8 GB).
#
#   check-kit-install.sh PREFIX     (make installcheck passes $(prefix))
#
# TAP on stdout; exits 1 when a check fails.

prefix=${1:?usage: check-kit-install.sh PREFIX}
srcdir=${srcdir:-$(dirname "$0")/../..}
page=$srcdir/docs/plugins.md
limit_s=${KIT_STEP_SECONDS:-300}
limit_kb=${KIT_STEP_KB:-2000000}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/check-kit-install.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM

n=0
failed=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); failed=1; echo "not ok $n - $1"; }
diag() { tail -n 30 "$1" | sed 's/^/# /'; }

# One step of the build, bounded; its output goes to $tmp/log.
bounded() {
	(ulimit -v "$limit_kb" && exec timeout "$limit_s" "$@") >"$tmp/log" 2>&1
}

# The fenced block after the marker <!-- example: NAME -->.
extract() { # name, destination
	awk -v want="<!-- example: $1 -->" '
		$0 == want { armed = 1; next }
		armed && /^```/ { if (inside) exit; inside = 1; next }
		inside { print }' "$page" >"$2"
	[ -s "$2" ]
}

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export ACLOCAL_PATH="$prefix/share/aclocal${ACLOCAL_PATH:+:$ACLOCAL_PATH}"

if [ -f "$prefix/share/aclocal/narwhal.m4" ] && [ -f "$prefix/lib/pkgconfig/narwhal-plugin.pc" ] &&
	[ -f "$prefix/include/narwhal/plugin-abi.h" ]; then
	ok "make install put narwhal.m4, narwhal-plugin.pc and the header under $prefix"
else
	not_ok "make install put narwhal.m4, narwhal-plugin.pc and the header under $prefix"
fi

proj=$tmp/fewest
mkdir -p "$proj"
if extract configure.ac "$proj/configure.ac" && extract Makefile.am "$proj/Makefile.am" &&
	extract fewest.c "$proj/fewest.c"; then
	ok "the manual holds configure.ac, Makefile.am and fewest.c"
else
	not_ok "the manual holds configure.ac, Makefile.am and fewest.c"
fi

# Each step only when the one before it worked: a failure names its step.
step() { # description, command...
	what=$1
	shift
	if [ "$failed" != 0 ]; then
		n=$((n + 1))
		echo "ok $n # SKIP $what: an earlier step failed"
		return
	fi
	rc=0
	(cd "$proj" && bounded "$@") || rc=$?
	if [ "$rc" = 0 ]; then
		ok "$what"
	else
		diag "$tmp/log"
		not_ok "$what (exit $rc; limits ${limit_s} s, ${limit_kb} kB)"
	fi
}

step "autoreconf -fi finishes on the manual's project" autoreconf -fi
step "configure finds the installed kit" ./configure
step "make builds the plugin" make
so=$proj/.libs/placement-fewest.so
if [ "$failed" = 0 ]; then
	funcs=$(nm -D --defined-only "$so" | awk '$2 == "T" { print $3 }')
	if [ "$funcs" = narwhal_plugin_entry ]; then
		ok "the plugin exports narwhal_plugin_entry alone"
	else
		echo "# exported: $funcs"
		not_ok "the plugin exports narwhal_plugin_entry alone"
	fi
	grep -q '^NARWHAL_PLUGIN_CFLAGS = .*-I' "$proj/Makefile" &&
		ok "configure substituted NARWHAL_PLUGIN_CFLAGS from pkg-config" ||
		not_ok "configure substituted NARWHAL_PLUGIN_CFLAGS from pkg-config"
fi

echo "1..$n"
exit "$failed"
