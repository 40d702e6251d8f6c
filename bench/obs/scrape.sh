#!/bin/sh
# Scrape time of GET /metrics on a 1,024-engine fleet (issue 11: under 10 ms).
#
#   bench/obs/scrape.sh [build-dir]        (default build/plain)
#
# Four narwhal-sim processes of 256 engines each (the simulator's limit per
# process), --no-delay, make a live fleet of 1,024 engines on loopback;
# narwhal serves it after a short replay (so counters and histograms hold
# values), then GET /metrics is timed SCRAPES times with curl and the
# median printed. Environment: SCRAPES (default 21), WARM_REQUESTS (replayed
# before timing, default 400), SIMS (default 4), ENGINES_PER_SIM (default 256).
set -eu

top=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$top/build/plain}" && pwd)
scrapes=${SCRAPES:-21}
warm=${WARM_REQUESTS:-400}
sims=${SIMS:-4}
per_sim=${ENGINES_PER_SIM:-256}

for b in narwhal narwhal-sim narwhal-replay; do
	[ -x "$build/$b" ] || { echo "scrape.sh: no $b in $build: build first" >&2; exit 1; }
done
command -v jq >/dev/null || { echo "scrape.sh: jq is missing (apt-get install jq)" >&2; exit 1; }
case $scrapes$warm$sims$per_sim in *[!0-9]*) echo "scrape.sh: integers only" >&2; exit 1;; esac

work=$(mktemp -d "${TMPDIR:-/tmp}/narwhal-scrape.XXXXXX")
pids=
cleanup() {
	for p in $pids; do kill "$p" 2>/dev/null || true; done
	for p in $pids; do wait "$p" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT INT TERM

# Wait (bounded, 20 s) until a file holds a pattern.
wait_for() { # file pattern what
	tries=0
	until grep -q "$2" "$1" 2>/dev/null; do
		tries=$((tries + 1))
		[ $tries -gt 400 ] && { echo "scrape.sh: $3 did not start" >&2; cat "$work"/*.log >&2; exit 1; }
		sleep 0.05
	done
}

i=0
while [ $i -lt "$sims" ]; do
	"$build/narwhal-sim" --engines "$per_sim" --base-port 0 --no-delay --id-prefix "s$i-" \
		--log-level warning --fleet-out "$work/fleet$i.json" \
		>/dev/null 2>"$work/sim$i.log" &
	pids="$pids $!"
	wait_for "$work/fleet$i.json" engines "narwhal-sim $i"
	i=$((i + 1))
done
# One fleet: half prefill, half decode.
jq -s '{server: {host: "127.0.0.1", port: 0}, log: {level: "info"},
        serving: {admission: "open", max_connections: 512},
        controller: {policy: "static"},
        fleet: {model: .[0].model,
                engines: ([.[].engines] | add | to_entries
                          | map(.value + {role: (if .key % 2 == 0 then "prefill"
                                                 else "decode" end)}))}}' \
	"$work"/fleet*.json >"$work/narwhal.json"
n=$(jq '.fleet.engines | length' "$work/narwhal.json")
NARWHAL_PLUGIN_DIR="$build/plugins/.libs" "$build/narwhal" --config "$work/narwhal.json" \
	2>"$work/narwhal.log" &
pids="$pids $!"
wait_for "$work/narwhal.log" '"event":"listening"' narwhal
port=$(sed -n 's/.*"event":"listening".*"port":"\([0-9]*\)".*/\1/p' "$work/narwhal.log" | head -n 1)
url="http://127.0.0.1:$port"
# The monitor learns the model before the first request is served.
i=0
until curl -sf "$url/v1/models" | grep -q '"id"'; do
	i=$((i + 1))
	[ $i -gt 400 ] && { echo "scrape.sh: narwhal never learnt the model" >&2; exit 1; }
	sleep 0.05
done
"$build/narwhal-replay" --url "$url" --synthetic "rate=200,input=uniform:50:200,output=uniform:8:32,duration=10" \
	--max-requests "$warm" --timeout 30 --quiet >/dev/null 2>"$work/replay.log" ||
	{ echo "scrape.sh: the warm-up replay failed:" >&2; cat "$work/replay.log" >&2; exit 1; }

curl -s "$url/metrics" >"$work/scrape.txt"
lines=$(wc -l <"$work/scrape.txt")
engines=$(grep -c '^narwhal_engine_available{' "$work/scrape.txt")
bytes=$(wc -c <"$work/scrape.txt")
[ "$engines" = "$n" ] || { echo "scrape.sh: $engines engines in the scrape, $n configured" >&2; exit 1; }

median() {
	sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
j=0
: >"$work/times"
while [ $j -lt "$scrapes" ]; do
	curl -s -o /dev/null -w '%{time_starttransfer} %{time_total}\n' "$url/metrics" >>"$work/times"
	j=$((j + 1))
done
first=$(awk '{ print $1 * 1000 }' "$work/times" | median)
total=$(awk '{ print $2 * 1000 }' "$work/times" | median)
max=$(awk '{ print $2 * 1000 }' "$work/times" | sort -n | tail -n 1)
echo "fleet: $n engines ($sims narwhal-sim processes), after $warm replayed requests"
echo "scrape: $lines lines, $bytes bytes"
echo "GET /metrics over $scrapes scrapes: median ${total} ms whole (first byte ${first} ms), worst ${max} ms"
awk -v t="$total" 'BEGIN { if (t < 10) print "target (under 10 ms): met"; else print "target (under 10 ms): MISSED" }'
