#!/bin/bash
# The role-control evaluation's report (bench/controller/README.md): reads
# the runs in OUT and writes OUT/results.jsonl and OUT/results.tsv (one row
# per workload, policy and rate), OUT/results.md (the headline, the tables,
# the real daemon's agreement) and OUT/plot.png (its gnuplot script
# OUT/plot.gp and data OUT/plot/*.dat; without gnuplot the picture is left
# out, and said so). Prints the markdown.
#
#   bench/controller/report.sh OUT
set -eu
export LC_ALL=C

out=${1:?usage: $0 OUT (the output directory of a run of bench/controller/run.sh)}
[ -f "$out/meta.json" ] && [ -d "$out/runs" ] ||
	{ echo "$0: $out is not the output of bench/controller/run.sh" >&2; exit 2; }

# One JSON object per run, in the order of the sweeps.
rows=$out/results.jsonl
: >"$rows"
for w in $(jq -r '.workloads[]' "$out/meta.json"); do
	for p in $(jq -r '.policies[]' "$out/meta.json"); do
		for r in $(jq -r --arg w "$w" '.rates[$w][]' "$out/meta.json"); do
			f=$out/runs/$w/$p/rate-$r.json
			if [ ! -s "$f" ]; then
				jq -n -c --arg w "$w" --arg p "$p" --argjson r "$r" \
					'{workload: $w, policy: $p, rate: $r, measured: false}' >>"$rows"
				continue
			fi
			jq -c --arg w "$w" --arg p "$p" --argjson r "$r" '.runs[0] as $x
			| ($x.counts.sent - $x.counts.outcomes.cancelled) as $counted
			| (($x.counts.status["429"] // 0) + ($x.counts.status["400"] // 0)) as $refused
			| {workload: $w, policy: $p, rate: $r, measured: true,
			   offered_rps: $x.schedule.offered_rps, requests: $counted, met: $x.slo.met,
			   refused: $refused, failed: ($counted - $x.counts.ok - $refused),
			   attainment: $x.slo.attainment, attainment_ttft: $x.slo.attainment_ttft,
			   attainment_tpot: $x.slo.attainment_tpot,
			   goodput_rps: ($x.slo.attainment * $x.schedule.offered_rps),
			   ttft_p99: $x.ttft_s.p99, tpot_p99: $x.tpot_s.p99,
			   role_changes: ($x.what_if.role_changes | map(select(.applied)) | length),
			   virtual_s: $x.what_if.virtual_s, wall_s: $x.what_if.wall_s,
			   phases: ($x.phases // [] | map({name, requests, met: .slo.met}))}' "$f" >>"$rows"
		done
	done
done
# The mix's best static split phase by phase: in each phase (all code
# phases, all conv phases) the static split that met the most requests
# there. Not a bound on a controller: each phase of a static run inherits
# what the same split left of the phase before.
oracle='static, best per phase'
jq -s -c --arg o "$oracle" 'map(select(.workload == "mix" and .measured and (.policy | startswith("static-"))))
	| group_by(.rate)[] | . as $g
	| ($g[0].phases | map(.name)) as $names
	| ($names | map(. as $n | [$g[] | .phases[] | select(.name == $n) | .met] | max) | add) as $met
	| ($g[0].phases | map(.requests) | add) as $n
	| select($n > 0)
	| {workload: "mix", policy: $o, rate: $g[0].rate, measured: true, offered_rps: $g[0].offered_rps,
	   requests: $n, met: $met, attainment: ($met / $n), goodput_rps: ($met / $n * $g[0].offered_rps),
	   phases: [], oracle: true}' "$rows" >"$rows.oracle"
cat "$rows.oracle" >>"$rows"
rm -f "$rows.oracle"

cols='workload policy rate offered_rps requests met refused failed attainment attainment_ttft
attainment_tpot goodput_rps ttft_p99 tpot_p99 role_changes virtual_s wall_s'
jq -r -n --arg cols "$cols" '($cols | split("\\s+"; null)) as $c | $c, (inputs | [.[$c[]]]) | map(if . == null then "" else . end) | @tsv' \
	"$rows" >"$out/results.tsv"

# The highest rate a policy sustains at >= 90% attainment: the rates in
# rising order, the last one of the run from the lowest that all reach
# 90%, and from there linearly in attainment to the next rate, where it
# falls below. null: even the lowest rate falls below; "above": none does.
sustained='def sustained: sort_by(.rate) as $s
	| (reduce range(0; $s | length) as $i ({k: -1, stop: false};
		if .stop then . elif ($s[$i].measured and $s[$i].attainment >= 0.9) then .k = $i else .stop = true end)) as $st
	| if $st.k < 0 then null
	  elif $st.k == ($s | length) - 1 then {rate: $s[$st.k].rate, above: true}
	  else $s[$st.k] as $a | $s[$st.k + 1] as $b
		| if ($b.measured | not) then {rate: $a.rate, above: false}
		  else {rate: ($a.rate + ($b.rate - $a.rate) * ($a.attainment - 0.9) / ($a.attainment - $b.attainment)),
		        above: false} end end;'
jq -s -c "$sustained"'
	group_by(.workload)[] | . as $w
	| (group_by(.policy) | map({policy: .[0].policy, s: sustained,
		peak_goodput: (map(select(.measured) | .goodput_rps) | max)})) as $p
	| ($p | map(select(.policy | test("^static-[0-9]+$")))) as $st
	| ($st | max_by(.s.rate // -1)) as $best
	| {workload: $w[0].workload, policies: $p, best_static: $best.policy,
	   best_static_rate: $best.s.rate,
	   reactive_rate: ([$p[] | select(.policy == "reactive") | .s.rate][0]),
	   ratio: ([$p[] | select(.policy == "reactive") | .s.rate][0] as $r
		| if $r == null or $best.s.rate == null or $best.s.rate == 0 then null else $r / $best.s.rate end),
	   ratio_defaults: ([$p[] | select(.policy == "reactive-defaults") | .s.rate][0] as $r
		| if $r == null or $best.s.rate == null or $best.s.rate == 0 then null else $r / $best.s.rate end),
	   from_best: ("reactive@" + ($best.policy // "" | ltrimstr("static-"))),
	   ratio_from_best: ([$p[] | select(.policy == ("reactive@" + ($best.policy // "" | ltrimstr("static-")))) | .s.rate][0] as $r
		| if $r == null or $best.s.rate == null or $best.s.rate == 0 then null else $r / $best.s.rate end)}' \
	"$rows" >"$out/headline.jsonl"

pct='def pct: if . == null then "-" else "\(. * 1000 | round / 10)%" end;
	def fixed($n): if . == null then "-" else (. * pow(10; $n) | round) as $i | pow(10; $n) as $p
		| "\($i / $p | floor).\($i % $p + $p | tostring | .[1:])" end;
	def srate: if .s == null then "below the lowest rate" else (.s.rate | fixed(1)) + (if .s.above then "+" else "" end) end;'

# --- the markdown.
{
	jq -r '"Fleet: \(.engines) `\(.preset)` engines (narwhal-sim'"'"'s model, what-if mode); SLO TTFT \(.slo_ttft_s) s, " +
		"TPOT \(.slo_tpot_s) s; prompts up to \(.max_prompt_tokens) tokens, outputs capped at \(.max_output_tokens); " +
		"request timeout \(.timeout_s) s. Traces whole, at native \(.native_rps.code * 1000 | round / 1000) (code) and " +
		"\(.native_rps.conv * 1000 | round / 1000) (conv) req/s, compressed to each rate. Mix: \(.mix.phase_s) s of code, then " +
		"\(.mix.phase_s) s of conv, \(.mix.repeat) times; the code phase offers \(.mix.ratio) times the conv phase'"'"'s rate." +
		(if .quick then " **QUICK smoke run.**" else "" end),
		"Reactive starts at \(.reactive_start)P+\(.engines - .reactive_start)D" +
		(if (.reactive_settings | length) > 0 then ", with `controller` \(.reactive_settings | tojson)" else " with the defaults" end) +
		". Every policy but `aggregate` uses predictive admission and slo-cost placement; `aggregate` runs " +
		"`narwhal-replay --what-if --aggregate` with open admission and least-loaded placement.",
		"Profile: \(.profile) (\(.profile_s) s). Source \(.source)\(if .modified_files > 0 then " (+\(.modified_files) modified files)" else "" end); " +
		"\(.machine); \(.date); what-if sweeps \(.whatif_s // "?") s, real daemon \(.daemon_s // "?") s, \(.wall_s // "?") s in all."' "$out/meta.json"
	echo
	echo "### Headline: the highest rate sustained at >= 90% SLO attainment (req/s)"
	echo
	ws=$(jq -r '.workloads | join(" ")' "$out/meta.json")
	printf '| policy |'
	for w in $ws; do printf ' %s |' "$w"; done
	printf '\n|---|'
	for w in $ws; do printf -- '---:|'; done
	printf '\n'
	for p in $(jq -r '.policies[]' "$out/meta.json") "$oracle"; do
		[ "$p" != "$oracle" ] || grep -q '"mix"' <<<"$ws" || continue
		printf '| %s |' "$p"
		for w in $ws; do
			c=$(jq -r -j --arg w "$w" --arg p "$p" "$pct"'select(.workload == $w) | .policies[] | select(.policy == $p)
				| " \(srate) |"' "$out/headline.jsonl")
			printf '%s' "${c:- - |}"
		done
		printf '\n'
	done
	printf '| **reactive / best static split** |'
	for w in $ws; do
		jq -r -j --arg w "$w" "$pct"'select(.workload == $w) | " **\(.ratio | fixed(2))** (\(.best_static)) |"' \
			"$out/headline.jsonl"
	done
	printf '\n'
	printf '| reactive-defaults / best static split |'
	for w in $ws; do
		jq -r -j --arg w "$w" "$pct"'select(.workload == $w) | " \(.ratio_defaults | fixed(2)) |"' "$out/headline.jsonl"
	done
	printf '\n'
	printf '| reactive started at the best static split / that split |'
	for w in $ws; do
		jq -r -j --arg w "$w" "$pct"'select(.workload == $w) | " \(.ratio_from_best | fixed(2)) (\(.from_best)) |"' \
			"$out/headline.jsonl"
	done
	printf '\n\n'
	echo 'Sustained: the rates in rising order, the last of the run from the lowest that all reach 90%,'
	echo 'interpolated linearly in attainment towards the next (a "+": every rate measured reaches 90%).'
	echo 'Attainment: requests meeting both TTFT and TPOT targets over every request offered (a refusal is a miss).'
	echo 'Goodput: attainment x offered rate (requests meeting both targets per second of arrivals).'
	for w in $ws; do
		echo
		echo "### $w: SLO attainment, and goodput (req/s)"
		echo
		rates=$(jq -r --arg w "$w" '.rates[$w] | join(" ")' "$out/meta.json")
		printf '| policy |'
		for r in $rates; do printf ' %s |' "$r"; done
		printf '\n|---|'
		for r in $rates; do printf -- '---:|'; done
		printf '\n'
		for p in $(jq -r '.policies[]' "$out/meta.json") "$oracle"; do
			[ "$p" != "$oracle" ] || [ "$w" = mix ] || continue
			printf '| %s |' "$p"
			jq -r -s -j --arg w "$w" --arg p "$p" "$pct"'map(select(.workload == $w and .policy == $p)) | sort_by(.rate)[]
				| if .measured then " \(.attainment | pct) (\(.goodput_rps | fixed(1))) |" else " - |" end' "$rows"
			printf '\n'
		done
		echo
		for p in reactive reactive-defaults; do
			jq -r -s --arg w "$w" --arg p "$p" "$pct"'map(select(.workload == $w and .policy == $p and .measured)) | sort_by(.rate)
				| if length == 0 then empty else
				"Role changes of \($p), by rate: " + (map("\(.rate): \(.role_changes)") | join(", ")) + "." end' "$rows"
		done
	done

	if [ -f "$out/daemon/meta.json" ]; then
		dm=$out/daemon
		echo
		echo "### What-if against the real daemon"
		echo
		jq -r '"The mix at \(.rate) req/s (\(.phase_s) s phases, \(.repeat) cycle(s) of code then conv), " +
			"through `narwhal` in front of `narwhal-sim --time-scale \(.time_scale)` (real), and through " +
			"`narwhal-replay --what-if` with the same configuration at `--sim-time-scale \(.time_scale)` " +
			"(what-if). At time scale \(.time_scale) the SLO targets, the controller'"'"'s times and the store'"'"'s " +
			"coefficients are divided by \(.time_scale) and the arrivals come \(.time_scale) times faster " +
			"(`--rate-scale \(.time_scale)`); the last column is the what-if mode on the unscaled configuration " +
			"at time scale 1, as the sweeps run. Times and goodput below are in model time (real time × " +
			"\(.time_scale)). Difference: (what-if − real) / real."' "$dm/meta.json"
		echo
		echo '| policy | figure | real daemon | what-if | difference | what-if, time scale 1 |'
		echo '|---|---|---:|---:|---:|---:|'
		f=$(jq .time_scale "$dm/meta.json")
		for p in reactive $(jq -r .static "$dm/meta.json"); do
			[ -s "$dm/real-$p.json" ] && [ -s "$dm/whatif-$p.json" ] || { echo "| $p | not measured | | | | |"; continue; }
			one=$dm/whatif1-$p.json
			[ -s "$one" ] || one=/dev/null
			jq -n -r --arg p "$p" --slurpfile r "$dm/real-$p.json" --slurpfile w "$dm/whatif-$p.json" \
				--slurpfile z "$one" --slurpfile st "$dm/real-$p-state.json" --argjson f "$f" "$pct"'
				def rel(a; b): if b == 0 or a == null or b == null then "-" else "\((a - b) / b * 1000 | round / 10)%" end;
				def gp: .slo.attainment * .schedule.offered_rps;
				def ms($k): if . == null then "-" else "\(. * $k * 1000 | round)" end;
				$r[0].runs[0] as $x | $w[0].runs[0] as $y | ($z[0].runs[0] // null) as $o
				| "| \($p) | attainment | \($x.slo.attainment | pct) | \($y.slo.attainment | pct) | \(rel($y.slo.attainment; $x.slo.attainment)) | \(if $o then ($o.slo.attainment | pct) else "-" end) |",
				  "| | goodput (req/s) | \($x | gp / $f | fixed(2)) | \($y | gp / $f | fixed(2)) | \(rel($y | gp; $x | gp)) | \(if $o then ($o | gp | fixed(2)) else "-" end) |",
				  "| | refused (429) | \($x.counts.status["429"] // 0) | \($y.counts.status["429"] // 0) | | \(if $o then ($o.counts.status["429"] // 0) else "-" end) |",
				  "| | TTFT p50 / p99 (ms) | \($x.ttft_s.p50 | ms($f)) / \($x.ttft_s.p99 | ms($f)) | \($y.ttft_s.p50 | ms($f)) / \($y.ttft_s.p99 | ms($f)) | | \(if $o then "\($o.ttft_s.p50 | ms(1)) / \($o.ttft_s.p99 | ms(1))" else "-" end) |",
				  "| | TPOT p50 / p99 (ms) | \($x.tpot_s.p50 | ms($f)) / \($x.tpot_s.p99 | ms($f)) | \($y.tpot_s.p50 | ms($f)) / \($y.tpot_s.p99 | ms($f)) | | \(if $o then "\($o.tpot_s.p50 | ms(1)) / \($o.tpot_s.p99 | ms(1))" else "-" end) |",
				  "| | role changes | \($st[0].flip_history.entries // [] | map(select(.applied != false)) | length) | \($y.what_if.role_changes | map(select(.applied)) | length) | | \(if $o then ($o.what_if.role_changes | map(select(.applied)) | length) else "-" end) |",
				  "| | requests sent late (real) | \($x.counts.late) of \($x.counts.scheduled) | | | |"'
		done
		echo
		echo 'Goodput is attainment × offered rate; the offered schedule is the same in every column.'
	fi
} >"$out/results.md"

# --- the plot: attainment (top) and goodput (bottom) against the rate, one
# column per workload, one line per policy; the static splits coloured
# from blue (1 prefill engine) to red (7), reactive thick black, its
# defaults dashed black, aggregate dashed grey, the mix's best static
# split phase by phase dotted green. One key, in the mix's column (else the first).
mkdir -p "$out/plot"
rm -f "$out"/plot/*.dat
ws=$(jq -r '.workloads | join(" ")' "$out/meta.json")
# reactive@K (reactive started at K prefill engines) is in the tables only.
ps="$(jq -r '.policies | map(select(startswith("reactive@") | not)) | join(" ")' "$out/meta.json") oracle"
for w in $ws; do
	for p in $ps; do
		name=$p
		[ "$p" != oracle ] || name=$oracle
		jq -r --arg w "$w" --arg p "$name" 'select(.workload == $w and .policy == $p and .measured) |
			[.rate, .attainment * 100, .goodput_rps] | @tsv' "$rows" | sort -n >"$out/plot/$w-$p.dat"
	done
done
nw=$(echo $ws | wc -w)
ne=$(jq .engines "$out/meta.json")
keycol=$(echo $ws | tr ' ' '\n' | awk '$1 == "mix" { print NR; exit }')
keycol=${keycol:-1}
{
	echo "set terminal pngcairo size $((380 * nw + 60)),780 font 'sans,9'"
	echo "set output '$out/plot.png'"
	echo "set multiplot layout 2,$nw title 'Role control: SLO attainment and goodput against rate ($(jq -r '"\(.engines) \(.preset) engines, SLO TTFT \(.slo_ttft_s) s, TPOT \(.slo_tpot_s) s, what-if mode"' "$out/meta.json"))'"
	echo "set grid; set xlabel 'offered rate (req/s)'"
	echo "set style data linespoints"
	echo "set datafile separator '\t'"
	for row in attainment goodput; do
		col=0
		for w in $ws; do
			col=$((col + 1))
			if [ $row = attainment ]; then
				echo "set title '$w: SLO attainment'; set ylabel 'attainment (%)'; set yrange [0:105]"
			else
				echo "set title '$w: goodput'; set ylabel 'goodput (req/s)'; set yrange [0:*]"
			fi
			if [ $col = "$keycol" ] && [ $row = attainment ]; then echo "set key bottom left font ',8' opaque"; else echo "unset key"; fi
			plots=
			for p in $ps; do
				f=$out/plot/$w-$p.dat
				[ -s "$f" ] || continue
				title=$p
				case $p in
				reactive) style="lc rgb 'black' lw 3 pt 7 ps 0.8" ;;
				reactive-defaults) style="lc rgb 'black' dt 2 lw 2 pt 6 ps 0.8" ;;
				aggregate*) style="lc rgb 'gray50' dt 2 lw 2 pt 4 ps 0.7" ;;
				oracle) style="lc rgb '#1a9641' dt 3 lw 2 pt 0"; title=$oracle ;;
				static-*)
					k=${p#static-}
					style="lc rgb '$(awk -v k="$k" -v n="$ne" 'BEGIN { t = (k - 1) / (n > 2 ? n - 2 : 1)
						printf "#%02x%02x%02x", 40 + 200 * t, 80 - 40 * t, 220 - 200 * t }')' lw 1 pt 7 ps 0.5" ;;
				esac
				c=2
				[ $row = goodput ] && c=3
				plots="$plots${plots:+, }'$f' using 1:$c title '$title' $style"
			done
			[ $row = attainment ] && plots="$plots, 90 title '90%' with lines dt 3 lc rgb 'red'"
			echo "plot $plots"
		done
	done
	echo "unset multiplot"
} >"$out/plot.gp"
if command -v gnuplot >/dev/null 2>&1; then
	gnuplot "$out/plot.gp" 2>"$out/plot.err" || echo "gnuplot failed (see $out/plot.err); the script is $out/plot.gp" >&2
	[ -s "$out/plot.err" ] || rm -f "$out/plot.err"
else
	echo "gnuplot is missing (apt-get install -y gnuplot-nox): no plot.png; the script is $out/plot.gp" >&2
fi

cat "$out/results.md"
echo
echo "report: $out/results.md, $out/results.tsv, $out/plot.png; raw data in $out/runs"
