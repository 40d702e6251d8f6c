#!/bin/sh
# Every page of the manual is installed (issue 14: docs/simulator.md was
# not): the build directory's install-dist_docDATA, into a scratch
# directory, puts each docs/*.md there, as TAP.
srcdir=${srcdir:-.}
make=${MAKE:-make}

if [ ! -f Makefile ]; then
	echo "1..0 # SKIP not run from a build directory"
	exit 0
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/docs-installed.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM

# The install itself fails on a page listed twice.
if ! $make -s install-dist_docDATA DESTDIR="$tmp" docdir=/doc >"$tmp/log" 2>&1; then
	echo "1..1"
	echo "not ok 1 - make install-dist_docDATA"
	sed 's/^/# /' "$tmp/log"
	exit 1
fi

set -- "$srcdir"/docs/*.md
echo "1..$#"
i=0
failed=0
for page in "$@"; do
	i=$((i + 1))
	name=${page##*/}
	if [ -f "$tmp/doc/$name" ]; then
		echo "ok $i - docs/$name is installed"
	else
		echo "not ok $i - docs/$name is installed: add it to dist_doc_DATA (Makefile.am)"
		failed=1
	fi
done
exit $failed
