#!/bin/bash
# The admission evaluation's report (bench/admission/README.md): reads the
# runs in OUT and writes OUT/results.tsv (one row per trace, policy pair and
# rate), OUT/results.md (the tables) and OUT/plot.png (with its gnuplot
# script OUT/plot.gp and data OUT/plot/*.dat; the picture is left out, and
# said so, when gnuplot is missing). Prints the markdown.
#
#   bench/admission/report.sh OUT
set -eu
export LC_ALL=C

out=${1:?usage: $0 OUT (the output directory of a run of bench/admission/run.sh)}
[ -f "$out/meta.json" ] && [ -d "$out/runs" ] ||
	{ echo "$0: $out is not the output of bench/admission/run.sh" >&2; exit 2; }

# One JSON object per run, in the order of the schedule.
rows=$out/results.jsonl
: >"$rows"
for w in $(jq -r '.workloads[]' "$out/meta.json"); do
	for p in $(jq -r '.policies[] | sub(":"; "+")' "$out/meta.json"); do
		for r in $(awk -F'\t' -v w="$w" 'NR > 1 && $1 == w { print $2 }' "$out/schedule.tsv"); do
			d=$out/runs/$w/$p/rate-$r
			[ -f "$d/run.json" ] || continue
			replay=$d/replay.json
			[ -s "$replay" ] || replay=/dev/null
			jq -n -c --slurpfile run "$d/run.json" --slurpfile rp "$replay" \
				--slurpfile c0 "$d/counters-before.json" --slurpfile c1 "$d/counters-after.json" '
			def delta($k): ($c1[0][$k] // 0) - ($c0[0][$k] // 0);
			$run[0] + (if ($rp | length) == 0 then {measured: false} else
				$rp[0].runs[0] as $x
				| ($x.counts.sent - $x.counts.outcomes.cancelled) as $counted
				| (($x.counts.status["429"] // 0) + ($x.counts.status["400"] // 0)) as $refused
				| $x.slo.met as $met
				| {measured: true, offered_rps: $x.schedule.offered_rps, counted: $counted,
				   ok: $x.counts.ok, refused: $refused, failed: ($counted - $x.counts.ok - $refused),
				   met: $met, late: $x.counts.late,
				   attainment_offered: $x.slo.attainment,
				   attainment_admitted: (if $counted > $refused then $met / ($counted - $refused) else null end),
				   goodput_rps: ($x.slo.attainment * $x.schedule.offered_rps),
				   goodput_elapsed_rps: $x.slo.goodput_rps, elapsed_s: $x.elapsed_s,
				   ttft_p50: $x.ttft_s.p50, ttft_p99: $x.ttft_s.p99, tpot_p99: $x.tpot_s.p99,
				   nw_admitted: delta("narwhal_admitted_total"),
				   nw_refused_admission: delta("narwhal_refused_admission_total"),
				   nw_refused_too_long: delta("narwhal_refused_too_long_total"),
				   nw_ceiling_refusals: delta("narwhal_ceiling_refusals_total"),
				   nw_first_token_timeouts: delta("narwhal_first_token_timeouts_total"),
				   nw_unserved: ([$c1[0] // {} | keys[] | select(test("unserved"))] | map(delta(.)) | add // 0)}
			end)' >>"$rows"
		done
	done
done

cols='trace policy rate offered_rps counted ok refused failed met attainment_offered attainment_admitted
goodput_rps goodput_elapsed_rps elapsed_s ttft_p50 ttft_p99 tpot_p99 late idle_before replay_status
nw_admitted nw_refused_admission nw_refused_too_long nw_ceiling_refusals nw_first_token_timeouts nw_unserved'
jq -r -n --arg cols "$cols" '($cols | split("\\s+"; null)) as $c | $c, (inputs | [.[$c[]]]) | map(if . == null then "" else . end) | @tsv' \
	"$rows" >"$out/results.tsv"

# --- the markdown.
{
	jq -r '"Fleet: \(.prefill) prefill + \(.decode) decode `\(.preset)` engines (narwhal-sim); " +
		"SLO TTFT \(.slo_ttft_s) s, TPOT \(.slo_tpot_s) s; \(.window_s) s of arrivals per rate; " +
		"prompts up to \(.max_prompt_tokens) tokens, outputs capped at \(.max_output_tokens); " +
		"request timeout \(.timeout_s) s; trace offsets code \(.offsets_s.code) s, conv \(.offsets_s.conv) s." +
		(if .quick then " **QUICK smoke run.**" else "" end),
		"Profile: " + (if .hand_profile then "**hand-written from the preset (DEV_HAND_PROFILE=1, a development aid, not a measurement)**"
			else "narwhal-profile \(.profile_flags) (\(.profile_s) s)" end) + ".",
		"Source \(.source)\(if .modified_files > 0 then " (+\(.modified_files) modified files)" else "" end); " +
		"\(.machine); load average \(.loadavg_start) at the start, \(.loadavg_end // "?") at the end; " +
		"\(.date), \(.wall_s // "?") s in all."' "$out/meta.json"
	# The store's mean coefficients in the units of src/sim/model.c (ms),
	# to set beside the preset's.
	if [ -f "$out/profiles.json" ]; then
		jq -r '.engines | [length] + ([.[] | [.prefill.a_s, .prefill.b_s, .prefill.c_s,
			.decode.d0_s, .decode.d1_s, .decode.d2_s]] | transpose | map(add)) | @tsv' "$out/profiles.json" |
			awk -F'\t' '{ for (i = 2; i <= 7; i++) m[i] = $i / $1 * 1e3
			printf "Mean profile of the %d engines, in ms: prefill a %.4g, b %.4g, c %.4g; decode d0 %.4g, d1 %.4g, d2 %.4g.\n",
				$1, m[2], m[3], m[4], m[5], m[6], m[7] }'
	fi
	echo
	echo 'Goodput: requests meeting both SLOs per second of the offered window (= attainment over'
	echo 'offered x offered rate). Attainment over **offered**: SLO-meeting requests / requests sent'
	echo '(refusals count as misses). Over **admitted**: / requests not refused (429 or 400).'
	echo 'TTFT and TPOT percentiles are over the requests that completed.'
	for w in $(jq -r '.workloads[]' "$out/meta.json"); do
		echo
		echo "### $w trace"
		echo
		echo '| rate (req/s) | policy | requests | refused | goodput (req/s) | attainment, offered | attainment, admitted | TTFT p50 / p99 (s) | TPOT p99 (s) | notes |'
		echo '|---:|---|---:|---:|---:|---:|---:|---:|---:|---|'
		jq -r --arg w "$w" 'select(.trace == $w) |
			def pct: if . == null then "-" else "\(. * 1000 | round / 10)%" end;
			def fixed($n): if . == null then "-" else
				(. * pow(10; $n) | round) as $i | pow(10; $n) as $p
				| "\($i / $p | floor).\($i % $p + $p | tostring | .[1:])" end;
			if .measured then
				"| \(.rate) | \(.policy) | \(.counted) | \(.refused) | \(.goodput_rps | fixed(2)) | " +
				"\(.attainment_offered | pct) | \(.attainment_admitted | pct) | " +
				"\(.ttft_p50 | fixed(2)) / \(.ttft_p99 | fixed(2)) | \(.tpot_p99 | fixed(3)) | " +
				([if .failed > 0 then "\(.failed) failed" else empty end,
				  if .nw_refused_admission + .nw_refused_too_long + .nw_ceiling_refusals > 0 then
				    "narwhal counted \(.nw_refused_admission) refused by admission, \(.nw_refused_too_long) too long, " +
				    "\(.nw_ceiling_refusals) at the connection ceiling" else empty end,
				  if .late > 0 then "\(.late) late" else empty end,
				  if .nw_unserved > 0 then "\(.nw_unserved) unserved placements" else empty end,
				  if .idle_before then empty else "fleet busy at start" end,
				  if .replay_status != 0 then "narwhal-replay status \(.replay_status)" else empty end] | join(", ")) + " |"
			else
				"| \(.rate) | \(.policy) | - | - | - | - | - | - | - | not measured (narwhal-replay status \(.replay_status)) |"
			end' "$rows" | sort -t'|' -k2,2n -k3,3 -s
		echo
		jq -r -s --arg w "$w" 'map(select(.trace == $w and .measured)) | group_by(.policy)[] |
			"- \(.[0].policy): peak goodput \(map(.goodput_rps) | max * 100 | round / 100) req/s; " +
			"highest rate with attainment over offered >= 90%: " +
			((map(select(.attainment_offered >= 0.9) | .rate) | max) as $m
			 | if $m == null then "none measured" else "\($m) req/s" end)' "$rows"
	done
} >"$out/results.md"

# --- the plot: goodput (top) and attainment (bottom) against the offered
# rate, one column per trace, one colour per policy pair; attainment over
# offered solid, over admitted dashed.
mkdir -p "$out/plot"
rm -f "$out"/plot/*.dat
jq -r '.workloads[]' "$out/meta.json" >"$out/plot/traces"
jq -r '.policies[] | sub(":"; "+")' "$out/meta.json" >"$out/plot/policies"
while read -r w; do
	while read -r p; do
		jq -r --arg w "$w" --arg p "$p" 'select(.trace == $w and .policy == $p and .measured) |
			[.rate, .offered_rps, .goodput_rps, .attainment_offered * 100,
			 (if .attainment_admitted == null then "NaN" else .attainment_admitted * 100 end)] | @tsv' \
			"$rows" | sort -n >"$out/plot/$w-$p.dat"
	done <"$out/plot/policies"
done <"$out/plot/traces"
nt=$(wc -l <"$out/plot/traces")
{
	echo "set terminal pngcairo size $((520 * nt + 80)),760 font 'sans,10'"
	echo "set output '$out/plot.png'"
	echo "set multiplot layout 2,$nt title 'Goodput and SLO attainment against offered rate ($(jq -r '"\(.preset), \(.prefill)P+\(.decode)D, SLO TTFT \(.slo_ttft_s) s, TPOT \(.slo_tpot_s) s" + (if .hand_profile then ", hand-written profile" else "" end)' "$out/meta.json"))'"
	echo "set grid; set xlabel 'offered rate (req/s)'; set xrange [0:*]"
	echo "set style data linespoints"
	echo "set datafile separator '\t'"
	for row in goodput attainment; do
		while read -r w; do
			if [ $row = goodput ]; then
				echo "set title '$w trace: goodput'; set ylabel 'goodput (req/s)'; set yrange [0:*]; set key top left"
				plots=
			else
				echo "set title '$w trace: SLO attainment (solid: of offered; dashed: of admitted)'; set ylabel 'attainment (%)'; set yrange [0:105]; set key bottom left"
				plots=
			fi
			k=0
			while read -r p; do
				k=$((k + 1))
				f=$out/plot/$w-$p.dat
				if [ $row = goodput ]; then
					plots="$plots${plots:+, }'$f' using 2:3 title '$p' lc $k pt 7"
				else
					plots="$plots${plots:+, }'$f' using 2:4 title '$p' lc $k pt 7, '$f' using 2:5 notitle lc $k dt 2 pt 6"
				fi
			done <"$out/plot/policies"
			# The goodput a fleet that met every SLO would have.
			[ $row = goodput ] && plots="$plots, x title 'offered' with lines dt 3 lc rgb 'gray'"
			echo "plot $plots"
		done <"$out/plot/traces"
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
echo "report: $out/results.md, $out/results.tsv, $out/plot.png; raw data and logs in $out"
