#!/bin/sh
# The plugin test kit's header as plugin authors compile it (issue 14, the
# plugin test library): <narwhal/plugin-test.h> compiles alone as C99 with
# -pedantic and every warning an error; and, when a C++ compiler is there,
# a C++ test with the same flags compiles, links against the built
# libnarwhal-plugin-test and runs (its declarations had no extern "C", so
# C++ tests linked to mangled names that do not exist). TAP.
#
# KIT_TEST_CFLAGS and KIT_TEST_LIBS are what pkg-config narwhal-plugin-test
# gives, for the build tree (tests/plugins/Makefile.inc).

cc=${CC:-cc}
cxx=${CXX:-}
[ -n "$cxx" ] || ! command -v g++ >/dev/null 2>&1 || cxx=g++
flags="-Wall -Wextra -Werror -pedantic"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/check-kit-header.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM

n=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); echo "not ok $n - $1"; sed 's/^/# /' "$tmp/err"; }

echo '#include <narwhal/plugin-test.h>' >"$tmp/h.c"
# shellcheck disable=SC2086 # the flags are lists
if $cc -std=c99 $flags -fsyntax-only $KIT_TEST_CFLAGS "$tmp/h.c" 2>"$tmp/err"; then
	ok "plugin-test.h compiles alone as C99 with $flags"
else
	not_ok "plugin-test.h compiles alone as C99 with $flags"
fi

if [ -z "$cxx" ] || ! command -v "${cxx%% *}" >/dev/null 2>&1; then
	n=$((n + 1))
	echo "ok $n # SKIP no C++ compiler"
	echo "1..$n"
	exit 0
fi

# A C++ test of the kind the kit is for: a mock host with a fleet.
cat >"$tmp/t.cc" <<'EOF'
#include <narwhal/plugin-test.h>

int
main()
{
	struct narwhal_mock_host *mh = narwhal_mock_host_new();
	struct narwhal_test_fleet *fleet = narwhal_test_fleet_new(1.0, 0.05);
	uint32_t n = 0;

	narwhal_test_fleet_add(fleet, "p0", NARWHAL_ROLE_PREFILL);
	narwhal_mock_host_set_fleet(mh, narwhal_test_fleet_view(fleet));
	narwhal_mock_host_set_time(mh, 5);
	const struct narwhal_host *host = narwhal_mock_host_table(mh);
	int ok = host->now_ns(host->host_ctx) == 5 &&
	         narwhal_test_fleet_eligible(fleet, NARWHAL_ROLE_PREFILL, &n) != NULL && n == 1;
	narwhal_test_fleet_free(fleet);
	narwhal_mock_host_free(mh);
	return ok ? 0 : 1;
}
EOF
# shellcheck disable=SC2086
if $cxx $flags $KIT_TEST_CFLAGS -o "$tmp/t" "$tmp/t.cc" $KIT_TEST_LIBS 2>"$tmp/err"; then
	ok "a C++ test on the kit compiles and links with $flags"
	if "$tmp/t" >"$tmp/err" 2>&1; then
		ok "the C++ test runs"
	else
		not_ok "the C++ test runs"
	fi
else
	not_ok "a C++ test on the kit compiles and links with $flags"
fi
echo "1..$n"
