#!/bin/sh
# Every page of the manual is installed (issue 14: docs/simulator.md was
# not): each docs/*.md is in Makefile.am's dist_doc_DATA, as TAP.
srcdir=${srcdir:-.}
cd "$srcdir" || { echo "Bail out! cannot enter $srcdir"; exit 1; }

# The words of dist_doc_DATA's value, its continuation lines joined.
listed=$(awk '
	/^dist_doc_DATA[ \t]*=/ { on = 1; sub(/^[^=]*=/, "") }
	on { cont = sub(/\\[ \t]*$/, ""); print; if (!cont) on = 0 }
' Makefile.am)

set -- docs/*.md
echo "1..$#"
i=0
failed=0
for page in "$@"; do
	i=$((i + 1))
	case " $(echo $listed) " in
	*" $page "*) echo "ok $i - $page is installed" ;;
	*) echo "not ok $i - $page is installed: add it to dist_doc_DATA in Makefile.am"; failed=1 ;;
	esac
done
exit $failed
