#!/bin/sh
# Plots a soak's RSS over time: OUT/plot.png from OUT/rss.tsv and
# OUT/phases.tsv (the gnuplot script is OUT/plot.gp; without gnuplot the
# picture is left out, and said so).
#
#   bench/soak/report.sh OUT
set -eu
export LC_ALL=C

out=${1:?usage: $0 OUT (the output directory of bench/soak/run.sh)}
[ -f "$out/rss.tsv" ] && [ -f "$out/phases.tsv" ] ||
	{ echo "$0: $out is not the output of bench/soak/run.sh" >&2; exit 2; }

{
	echo 'set terminal pngcairo size 1100,560 font "sans,10"'
	echo "set output '$out/plot.png'"
	echo "set title \"Narwhal's RSS through the soak (2P+2D, predictive admission, monitor, metrics scraped, access log)\""
	echo 'set xlabel "minutes"'
	echo 'set ylabel "RSS (MB)"'
	echo 'set y2label "open descriptors"'
	echo 'set ytics nomirror'
	echo 'set y2tics'
	echo 'set yrange [0:50]'
	echo 'set y2range [0:*]'
	echo 'set key outside bottom center horizontal'
	echo 'set grid ytics'
	# The phases as shaded bands, named at the top.
	awk -F'\t' '{
		c = $2 == "streams" ? "#f4c7a1" : $2 == "quiet" ? "#cfe3f3" : "#eeeeee"
		printf "set object %d rect from %f, graph 0 to %f, graph 1 behind fillcolor rgb \"%s\" fillstyle solid 0.6 noborder\n", NR, $3 / 60, $4 / 60, c
		printf "set label %d \"%s\" at %f, graph 0.97 center font \",9\"\n", NR, $2, ($3 + $4) / 120
	}' "$out/phases.tsv"
	echo "set arrow from graph 0, first 40 to graph 1, first 40 nohead dashtype 2 linecolor rgb '#c0392b'"
	echo "set arrow from graph 0, first 20 to graph 1, first 20 nohead dashtype 2 linecolor rgb '#2874a6'"
	echo "plot '$out/rss.tsv' using (\$1/60):(\$4/1024) every ::1 with lines linewidth 2 linecolor rgb '#1b4f72' title 'RSS (MB)', \\"
	echo "     '$out/rss.tsv' using (\$1/60):7 every ::1 axes x1y2 with lines linecolor rgb '#999999' title 'open descriptors (right)', \\"
	echo "     NaN with lines dashtype 2 linecolor rgb '#c0392b' title '40 MB: the limit with 512 open streams', \\"
	echo "     NaN with lines dashtype 2 linecolor rgb '#2874a6' title '20 MB: the limit once they end'"
} >"$out/plot.gp"
if command -v gnuplot >/dev/null 2>&1; then
	gnuplot "$out/plot.gp" 2>"$out/plot.err" || echo "gnuplot failed (see $out/plot.err); the script is $out/plot.gp" >&2
	[ -s "$out/plot.err" ] || rm -f "$out/plot.err"
else
	echo "gnuplot is missing (apt-get install -y gnuplot-nox): no plot.png; the script is $out/plot.gp" >&2
fi
echo "plot: $out/plot.png (script $out/plot.gp)"
