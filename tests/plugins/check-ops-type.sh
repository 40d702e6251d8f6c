#!/bin/sh
# The kind-specific plugin macros type-check the ops table at compile time
# (include/narwhal/plugin-abi.h, issue: "the ops pointer is type-checked
# against the kind"): each macro compiles with its own kind's table and
# fails with any other kind's. Also checks that the header compiles alone,
# as C and as C++ when a C++ compiler is there. TAP.

srcdir=${srcdir:-.}
cc=${CC:-cc}
cxx=${CXX:-}
[ -n "$cxx" ] || ! command -v g++ >/dev/null 2>&1 || cxx=g++
inc="-I$srcdir/include $JANSSON_CFLAGS"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/check-ops-type.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM

kinds="DIALECT ADMISSION PLACEMENT CONTROLLER"
n=0
out=""
ok() { n=$((n + 1)); out="$out
ok $n - $1"; }
not_ok() { n=$((n + 1)); out="$out
not ok $n - $1"; }

# A source declaring one plugin of kind $1 with the ops table of kind $2.
write() {
	ops=$(echo "$2" | tr 'A-Z' 'a-z')
	cat >"$tmp/p.c" <<EOC
#include <narwhal/plugin-abi.h>
static const struct narwhal_${ops}_ops ops = { .struct_size = sizeof ops };
NARWHAL_$1_PLUGIN("p", "1.0.0", &ops)
EOC
}

for k in $kinds; do
	for o in $kinds; do
		write "$k" "$o"
		if $cc -std=c11 -Werror -Wall -fsyntax-only $inc "$tmp/p.c" 2>"$tmp/err"; then
			compiled=yes
		else
			compiled=no
		fi
		if [ "$k" = "$o" ]; then
			[ $compiled = yes ] && ok "NARWHAL_${k}_PLUGIN takes ${o} ops" ||
				{ sed 's/^/# /' "$tmp/err"; not_ok "NARWHAL_${k}_PLUGIN takes ${o} ops"; }
		else
			[ $compiled = no ] && ok "NARWHAL_${k}_PLUGIN refuses ${o} ops" ||
				not_ok "NARWHAL_${k}_PLUGIN refuses ${o} ops"
		fi
	done
done

# The header alone, with every warning, as a plugin author compiles it.
echo '#include <narwhal/plugin-abi.h>' >"$tmp/h.c"
if $cc -std=c99 -pedantic -Werror -Wall -Wextra -fsyntax-only $inc "$tmp/h.c" 2>"$tmp/err"; then
	ok "plugin-abi.h compiles alone as C99 with -pedantic"
else
	sed 's/^/# /' "$tmp/err"; not_ok "plugin-abi.h compiles alone as C99 with -pedantic"
fi
if [ -n "$cxx" ] && command -v "${cxx%% *}" >/dev/null 2>&1; then
	write ADMISSION ADMISSION
	cp "$tmp/p.c" "$tmp/p.cc"
	if $cxx -Werror -Wall -fsyntax-only $inc "$tmp/p.cc" 2>"$tmp/err"; then
		ok "an admission plugin compiles as C++"
	else
		sed 's/^/# /' "$tmp/err"; not_ok "an admission plugin compiles as C++"
	fi
	write ADMISSION PLACEMENT
	cp "$tmp/p.c" "$tmp/p.cc"
	$cxx -fsyntax-only $inc "$tmp/p.cc" 2>/dev/null &&
		not_ok "C++ refuses placement ops for an admission plugin" ||
		ok "C++ refuses placement ops for an admission plugin"
fi
echo "1..$n$out"
