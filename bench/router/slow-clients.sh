#!/bin/sh
# Slow clients (issue 9, "The front door"): the added latency a
# well-behaved client sees while SLOW connections trickle request heads a
# byte at a time and never finish them (reconnecting when Narwhal closes
# them, as an attacker would). Two phases of REQUESTS sequential requests
# each, a new connection per request (so every one passes accept and the
# pending-head cap): without slow clients, then with SLOW of them open.
# Prints p50/p99/max per phase and the p99 difference; exits 1 when a
# request failed or when the p99 added latency is above LIMIT_MS.
#
#   bench/router/slow-clients.sh [path/to/narwhal [path/to/narwhal-sim]]
#
# Environment (defaults in brackets):
#   SLOW [1000]         slow-header connections kept open
#   REQUESTS [2000]     requests per phase (POST /v1/completions, 16 tokens)
#   LIMIT_MS [50]       largest allowed p99 added latency
#   SETTLE [9]          seconds of trickling before the measured phase
#   PROXY_CPU [1], LOAD_CPU [0]   CPUs for Narwhal and for sim + clients
#   OUT                 output directory [a new /tmp/narwhal-slow.*]
# Loopback only; every phase is bounded (120 s each).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"

narwhal=${1:-./narwhal}
sim=${2:-./narwhal-sim}
slow=${SLOW:-1000}
requests=${REQUESTS:-2000}
limit_ms=${LIMIT_MS:-50}
proxy_cpu=${PROXY_CPU:-1}
load_cpu=${LOAD_CPU:-0}
plugin_dir=${NARWHAL_PLUGIN_DIR:-$(dirname "$narwhal")/plugins/.libs}

nwb_need jq curl taskset python3
case $slow$requests$limit_ms in *[!0-9]*) nwb_die "SLOW, REQUESTS, LIMIT_MS: integers" ;; esac
[ -x "$sim" ] || nwb_die "no narwhal-sim at $sim"
[ -x "$narwhal" ] || nwb_die "no narwhal at $narwhal"

work=${OUT:-$(mktemp -d /tmp/narwhal-slow.XXXXXX)}
mkdir -p "$work"
: >"$work/pids"
trap 'st=$?; nwb_cleanup; exit $st' EXIT
trap 'exit 130' INT TERM

nwb_start_sim "$sim" 1 "$load_cpu"
port=$(nwb_free_port)
nwb_narwhal_config "$work/narwhal.json" "$port" false '$f.engines'
nwb_start_narwhal "$narwhal" "$work/narwhal.json" "$proxy_cpu" "$work/narwhal.log" "$port" ||
	nwb_die "Narwhal does not serve"
model=$(jq -r .model "$work/fleet.json")

# The slow clients: SLOW sockets, one byte each per second, reopened when
# closed; "$work/slow.open" holds how many are open.
cat >"$work/slow.py" <<'PY'
import os, resource, selectors, socket, sys, time
port, n, status = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
head = b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 100000
sel = selectors.DefaultSelector()
pos = {}
def opened():
    s = socket.socket()
    s.setblocking(False)
    s.connect_ex(("127.0.0.1", port))
    sel.register(s, selectors.EVENT_READ)
    pos[s] = 0
reopened = 0
for _ in range(n):
    opened()
end = time.monotonic() + float(os.environ.get("SLOW_SECONDS", "600"))
while time.monotonic() < end:
    tick = time.monotonic() + 1.0
    for s in list(pos):
        try:
            s.send(head[pos[s]:pos[s] + 1])
            pos[s] += 1
        except OSError:
            pass
    while time.monotonic() < tick:
        for key, _ in sel.select(max(0.0, tick - time.monotonic())):
            s = key.fileobj
            try:
                data = s.recv(4096)
            except OSError:
                data = b""
            if not data:
                sel.unregister(s); s.close(); del pos[s]
                opened(); reopened += 1
    with open(status + ".tmp", "w") as f:
        f.write("%d %d\n" % (len(pos), reopened))
    os.replace(status + ".tmp", status)
PY

# The well-behaved client: REQUESTS sequential requests, a new connection
# each; prints the latencies in ms, one a line.
cat >"$work/good.py" <<'PY'
import http.client, json, sys, time
port, n, model = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
body = json.dumps({"model": model, "prompt": "hello there", "max_tokens": 16})
end = time.monotonic() + 120
for _ in range(n):
    if time.monotonic() > end:
        break
    t = time.monotonic()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse(); r.read(); c.close()
    print("%.3f %d" % ((time.monotonic() - t) * 1000, r.status), flush=True)
PY

stats() {
	awk '$2 != 200 { bad++ } { print $1 }
	     END { if (bad) print "FAILED " bad > "/dev/stderr" }' "$1" | sort -n | awk '
	{ v[NR] = $1 } END {
		if (NR == 0) { print "nan nan nan 0"; exit }
		p50 = v[int(NR * 0.50) > 0 ? int(NR * 0.50) : 1]
		p99 = v[int(NR * 0.99) > 0 ? int(NR * 0.99) : 1]
		printf "%.2f %.2f %.2f %d\n", p50, p99, v[NR], NR
	}'
}

echo "slow-clients: narwhal pid $nw_pid on CPU $proxy_cpu; $requests requests a phase," \
	"$slow slow-header connections; output in $work"
taskset -c "$load_cpu" python3 "$work/good.py" "$port" "$requests" "$model" >"$work/base.txt"
base=$(stats "$work/base.txt")

SLOW_SECONDS=300 taskset -c "$load_cpu" python3 "$work/slow.py" "$port" "$slow" "$work/slow.open" &
nwb_remember $!
i=0
until [ -f "$work/slow.open" ] && [ "$(cut -d' ' -f1 "$work/slow.open")" -ge "$slow" ]; do
	i=$((i + 1))
	[ $i -gt 300 ] && nwb_die "the slow clients did not connect"
	sleep 0.1
done
# Let them trickle first, so that the measured phase spans the moment
# server.head_timeout_s (default 10 s) closes them all and they reconnect.
sleep "${SETTLE:-9}"
taskset -c "$load_cpu" python3 "$work/good.py" "$port" "$requests" "$model" >"$work/slow.txt"
under=$(stats "$work/slow.txt")
open=$(cat "$work/slow.open")
health=$(curl -s -m 5 "http://127.0.0.1:$port/narwhal/health" | jq -c .front_door)

set -- $base
b50=$1 b99=$2 bmax=$3 bn=$4
set -- $under
s50=$1 s99=$2 smax=$3 sn=$4
added=$(awk -v a="$s99" -v b="$b99" 'BEGIN { printf "%.2f", a - b }')
echo "phase           n      p50 ms   p99 ms   max ms"
printf "%-14s %5d %8s %8s %8s\n" "no slow" "$bn" "$b50" "$b99" "$bmax"
printf "%-14s %5d %8s %8s %8s\n" "$slow slow" "$sn" "$s50" "$s99" "$smax"
echo "p99 added latency: $added ms (limit $limit_ms ms)"
echo "slow connections open / reopened at the end: $open"
echo "front door counters: $health"
fail=0
[ "$bn" -eq "$requests" ] && [ "$sn" -eq "$requests" ] || { echo "FAIL: not every request was answered"; fail=1; }
grep -qv ' 200$' "$work/base.txt" "$work/slow.txt" && { echo "FAIL: a request was not answered 200"; fail=1; }
awk -v a="$added" -v l="$limit_ms" 'BEGIN { exit !(a > l) }' && { echo "FAIL: p99 added latency above $limit_ms ms"; fail=1; }
exit $fail
