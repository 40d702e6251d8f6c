#!/bin/bash
# The chaos soak's report (bench/chaos/README.md): reads the raw files of a
# run in OUT, writes OUT/report.json and OUT/report.md, prints the markdown,
# and exits 0 when every goal is met, 1 otherwise.
#
#   bench/chaos/report.sh OUT
set -eu
export LC_ALL=C

here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: $0 OUT (the output directory of a run of bench/chaos/run.sh)}
for f in meta.json health.jsonl.gz health-start.json health-end.json narwhal.log; do
	[ -f "$out/$f" ] || { echo "$0: $out/$f is missing: not a finished chaos run" >&2; exit 2; }
done
touch "$out/faults.jsonl"

# Each sample cut down to what the analysis reads: per engine whether it is
# in placement, its state and the legs placed on it.
zcat "$out/health.jsonl.gz" | jq -c '{t, e: (.h.engines | map({key: .id, value:
	{a: .available, st: .state, lp: .legs_placed}}) | from_entries)}' >"$out/samples.jsonl"

# Narwhal's log: failed legs, availability changes and failed requests,
# stamped in Unix milliseconds.
jq -cR 'fromjson? | select(.event == "engine_error" or .event == "engine_unavailable"
	or .event == "engine_available" or .event == "request_failed") |
	{t: (.ts | capture("^(?<s>[^.]+)\\.(?<ms>[0-9]{3})Z$") | ((.s + "Z") | fromdateiso8601) * 1000
	        + (.ms | tonumber)),
	 event, engine, code, detail}' "$out/narwhal.log" >"$out/events.jsonl"

cat "$out"/replay-*.json 2>/dev/null >"$out/replay-all.json" || true

jq -n --slurpfile meta "$out/meta.json" --slurpfile faults "$out/faults.jsonl" \
	--slurpfile samples "$out/samples.jsonl" --slurpfile base "$out/health-start.json" \
	--slurpfile fin "$out/health-end.json" --slurpfile replay "$out/replay-all.json" \
	--slurpfile events "$out/events.jsonl" -f "$here/report.jq" >"$out/report.json"
jq -r -f "$here/markdown.jq" "$out/report.json" >"$out/report.md"
cat "$out/report.md"
echo
echo "report: $out/report.md and $out/report.json; raw data and logs in $out"
jq -e '.verdict == "PASS"' "$out/report.json" >/dev/null
