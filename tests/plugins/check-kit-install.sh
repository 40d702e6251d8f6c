#!/bin/sh
# The plugin author's kit as installed (issue 14): a plugin project outside
# the tree, made of exactly the configure.ac and Makefile.am of
# docs/plugins.md section 9 and the fewest.c of section 10, must go through
# autoreconf, configure and make against the installed narwhal.m4 and
# narwhal-plugin.pc, and the plugin it builds must export its entry alone;
# then, with the lines "Testing a plugin" tells an author to add, its GLib
# test on the installed test kit (narwhal-plugin-test) must pass under make
# check, and with the page's commands without autotools too (a test built
# so could not find the library under a prefix of its own), and the
# installed narwhal-plugin-check must pass the plugin.
# Last, the examples (examples/placement-rotate, examples/dialect-minnow)
# must each build, pass their tests and conform, and the configuration
# file of each README must load the built plugin in the installed narwhal
# (the READMEs gave fragments that, wrapped as a file, asked for profiles).
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

# The fenced block after the marker <!-- example: NAME --> of a page (the
# manual unless a third argument names another).
extract() { # name, destination[, page]
	awk -v want="<!-- example: $1 -->" '
		$0 == want { armed = 1; next }
		armed && /^```/ { if (inside) exit; inside = 1; next }
		inside { print }' "${3:-$page}" >"$2"
	[ -s "$2" ]
}

# The projects are a plugin author's own, built as from a fresh shell:
# nothing of the make that runs this script (its flags, or variables set on
# its command line such as the TESTS of make distcheck-quick) reaches them.
unset MAKEFLAGS MFLAGS MAKELEVEL
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export ACLOCAL_PATH="$prefix/share/aclocal${ACLOCAL_PATH:+:$ACLOCAL_PATH}"

kit="share/aclocal/narwhal.m4 lib/pkgconfig/narwhal-plugin.pc include/narwhal/plugin-abi.h
	lib/pkgconfig/narwhal-plugin-test.pc include/narwhal/plugin-test.h bin/narwhal-plugin-check"
missing=""
for f in $kit; do
	[ -f "$prefix/$f" ] || missing="$missing $f"
done
if [ -z "$missing" ]; then
	ok "make install put the kit under $prefix"
else
	not_ok "make install put the kit under $prefix (missing:$missing)"
fi

proj=$tmp/fewest
mkdir -p "$proj"
if extract configure.ac "$proj/configure.ac" && extract Makefile.am "$proj/Makefile.am" &&
	extract fewest.c "$proj/fewest.c" && extract "Makefile.am tests" "$tmp/tests.am" &&
	extract test-fewest-kit.c "$proj/test-fewest.c"; then
	ok "the manual holds configure.ac, Makefile.am, fewest.c and its test on the kit"
else
	not_ok "the manual holds configure.ac, Makefile.am, fewest.c and its test on the kit"
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

# The test on the kit, added as the manual says.
if [ "$failed" = 0 ]; then
	sed -i 's/^AC_CONFIG_FILES/PKG_CHECK_MODULES([KIT], [narwhal-plugin-test])\n&/' \
		"$proj/configure.ac"
	cat "$tmp/tests.am" >>"$proj/Makefile.am"
fi
step "autoreconf, configure with the test kit" sh -c 'autoreconf -fi && ./configure'
step "make check runs the plugin's GLib test on the installed kit" make check
# The manual's commands for the same test without autotools, as written:
# pkg-config narwhal-plugin-test must give all the test needs, and the
# test must find the library at run time under a prefix of its own.
if [ "$failed" = 0 ] && extract "kit test without autotools" "$proj/kit-test.sh"; then
	step "the manual's commands build and run the test without autotools" sh ./kit-test.sh
elif [ "$failed" = 0 ]; then
	not_ok "the manual holds the commands for the test without autotools"
fi
check=$prefix/bin/narwhal-plugin-check
if [ "$failed" = 0 ] && [ -x "$check" ]; then
	rc=0
	"$check" "$so" --config '{ "max_resident": 4 }' >"$tmp/log" 2>&1 || rc=$?
	if [ "$rc" = 0 ] && grep -q '^conforms: every check passed$' "$tmp/log"; then
		ok "the installed narwhal-plugin-check passes the plugin"
	else
		diag "$tmp/log"
		not_ok "the installed narwhal-plugin-check passes the plugin (exit $rc)"
	fi
elif [ "$failed" = 0 ]; then
	not_ok "narwhal-plugin-check is installed in $prefix/bin"
fi

# The example projects of examples/, as shipped: build, their tests and
# narwhal-plugin-check under make check.
export PATH="$prefix/bin:$PATH"
for example in placement-rotate dialect-minnow; do
	[ "$failed" = 0 ] || break
	proj=$tmp/$example
	cp -R "$srcdir/examples/$example" "$proj"
	chmod -R u+w "$proj"
	step "examples/$example: autoreconf and configure" sh -c 'autoreconf -fi && ./configure'
	step "examples/$example: make check (its tests, narwhal-plugin-check)" make check
	if [ "$failed" = 0 ] && grep -q '^conforms: every check passed$' "$tmp/log"; then
		ok "examples/$example conforms"
	elif [ "$failed" = 0 ]; then
		diag "$tmp/log"
		not_ok "examples/$example conforms"
	fi
	# The README's configuration file, with the built file as it says,
	# loads in the installed narwhal and names that file.
	[ "$failed" = 0 ] || break
	name=${example#*-}
	built=$proj/.libs/$example.so
	if ! extract "$name.json" "$proj/$name.json" "$srcdir/examples/$example/README.md"; then
		not_ok "examples/$example: its README holds $name.json"
		continue
	fi
	sed -i "s#\"name\": \"$name\"#\"path\": \"$built\"#; s#\"/src/$example/.libs/$example.so\"#\"$built\"#" \
		"$proj/$name.json"
	step "examples/$example: narwhal --check-config $name.json --show-plugins, as its README says" \
		narwhal --check-config "$name.json" --show-plugins
	if [ "$failed" = 0 ] && grep -q "^plugins\.[a-z.]*: $name 1\.0\.0 from $built\$" "$tmp/log"; then
		ok "examples/$example: the README's file loads the built plugin"
	elif [ "$failed" = 0 ]; then
		diag "$tmp/log"
		not_ok "examples/$example: the README's file loads the built plugin"
	fi
done

echo "1..$n"
exit "$failed"
