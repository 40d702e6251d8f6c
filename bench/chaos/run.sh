#!/bin/bash
# Chaos soak (issue 10, "How it is checked"): mixed load through Narwhal in
# front of a simulated fleet for DURATION seconds while a seeded schedule
# kills, hangs, refuses, fails and restarts engines. Narwhal's
# /narwhal/health is sampled every SAMPLE_MS; the report says whether every
# request was answered and how long a dead engine kept receiving work.
# See bench/chaos/README.md.
#
#   bench/chaos/run.sh [path/to/narwhal [path/to/narwhal-sim [path/to/narwhal-replay]]]
#   bench/chaos/run.sh --report OUT       # analyse the run in OUT again
#
# Run from the build directory (defaults ./narwhal, ./narwhal-sim,
# ./narwhal-replay; plugins from ./plugins/.libs unless NARWHAL_PLUGIN_DIR).
#
# Environment (defaults in brackets):
#   DURATION [600]        seconds of load
#   SEED [1]              seed of the fault schedule and of the load
#   RATE [12]             requests per second, shared by four streams:
#                         completions and chat, streamed and not
#   INPUT ["uniform:50:400"], OUTPUT ["uniform:8:64"]   prompt and output
#                         tokens (narwhal-replay distributions)
#   PREFILL [3], DECODE [3]  engines of each starting role; the last of each
#                         role is never faulted (both share one process),
#                         every other engine runs alone in its own process
#   MAX_DOWN [2]          most engines faulted or not yet readmitted at once
#   FAULTS ["kill hang refuse error restart"]   fault kinds drawn from
#   FAULT_MIN [5], FAULT_MAX [20]   seconds a fault lasts (not restart)
#   GAP_MIN [2], GAP_MAX [10]       seconds between fault starts
#   SETTLE [15]           seconds after a fault's end the schedule leaves
#                         its engine alone (time to be readmitted)
#   WARMUP [10]           seconds of load before the first fault
#   TAIL [20]             seconds at the end without a new fault
#   MONITOR_INTERVAL [0.5]  controller.monitor_interval_s
#   HANDOFF_TIMEOUT [5]   serving.handoff_timeout_s (bounds a prefill leg
#                         on a hung engine)
#   STREAM_COMMIT [before_decode]   serving.stream_commit
#   SAMPLE_MS [100]       health sampling period
#   OUT                   output directory [a new /tmp/narwhal-chaos.*]
set -eu
export LC_ALL=C # EPOCHREALTIME with a dot

here=$(cd "$(dirname "$0")" && pwd)
. "$here/../router/common.sh"

if [ "${1:-}" = --report ]; then
	[ -f "${2:-}/meta.json" ] || nwb_die "usage: $0 --report OUT (a directory of a run)"
	exec "$here/report.sh" "$2"
fi

narwhal=${1:-./narwhal}
sim=${2:-./narwhal-sim}
replay=${3:-./narwhal-replay}
duration=${DURATION:-600}
seed=${SEED:-1}
rate=${RATE:-12}
input=${INPUT:-uniform:50:400}
output=${OUTPUT:-uniform:8:64}
n_prefill=${PREFILL:-3}
n_decode=${DECODE:-3}
max_down=${MAX_DOWN:-2}
faults=${FAULTS:-kill hang refuse error restart}
fault_min=${FAULT_MIN:-5}
fault_max=${FAULT_MAX:-20}
gap_min=${GAP_MIN:-2}
gap_max=${GAP_MAX:-10}
settle=${SETTLE:-15}
warmup=${WARMUP:-10}
tail_s=${TAIL:-20}
monitor=${MONITOR_INTERVAL:-0.5}
handoff=${HANDOFF_TIMEOUT:-5}
commit=${STREAM_COMMIT:-before_decode}
sample_ms=${SAMPLE_MS:-100}
plugin_dir=${NARWHAL_PLUGIN_DIR:-$(dirname "$narwhal")/plugins/.libs}
model=opt-13b-a100

nwb_need jq curl awk gzip
case $duration$seed$n_prefill$n_decode$max_down$fault_min$fault_max$gap_min$gap_max$settle$warmup$tail_s$sample_ms in
*[!0-9]*) nwb_die "DURATION, SEED, PREFILL, DECODE, MAX_DOWN, FAULT_*, GAP_*, SETTLE, WARMUP, TAIL, SAMPLE_MS: integers" ;;
esac
for v in "$rate" "$monitor" "$handoff"; do
	case $v in '' | *[!0-9.]* | *.*.*) nwb_die "RATE, MONITOR_INTERVAL, HANDOFF_TIMEOUT: numbers" ;; esac
done
for k in $faults; do
	case $k in kill | hang | refuse | error | restart) ;; *) nwb_die "FAULTS: kill hang refuse error restart" ;; esac
done
case $commit in before_decode | first_event) ;; *) nwb_die "STREAM_COMMIT: before_decode or first_event" ;; esac
[ "$n_prefill" -ge 1 ] && [ "$n_decode" -ge 1 ] || nwb_die "PREFILL and DECODE: at least 1"
[ $((n_prefill + n_decode)) -ge 3 ] || nwb_die "PREFILL + DECODE: at least 3, so that one engine can be faulted"
[ "$max_down" -ge 1 ] || nwb_die "MAX_DOWN: at least 1"
[ "$fault_min" -ge 1 ] && [ "$fault_max" -ge "$fault_min" ] || nwb_die "need 1 <= FAULT_MIN <= FAULT_MAX"
[ "$gap_min" -ge 1 ] && [ "$gap_max" -ge "$gap_min" ] || nwb_die "need 1 <= GAP_MIN <= GAP_MAX"
[ "$sample_ms" -ge 20 ] || nwb_die "SAMPLE_MS: at least 20"
[ "$duration" -ge $((warmup + tail_s + fault_min)) ] || nwb_die "DURATION must leave room for a fault after WARMUP and before TAIL"
[ -x "$sim" ] || nwb_die "no narwhal-sim at $sim"
[ -x "$narwhal" ] || nwb_die "no narwhal at $narwhal"
[ -x "$replay" ] || nwb_die "no narwhal-replay at $replay"
[ -d "$plugin_dir" ] || nwb_die "no plugin directory $plugin_dir (set NARWHAL_PLUGIN_DIR)"

out=${OUT:-$(mktemp -d /tmp/narwhal-chaos.XXXXXX)}
mkdir -p "$out/bin" "$out/plugins"
# Run copies, so that a rebuild during the soak changes nothing.
cp "$sim" "$out/bin/narwhal-sim"
cp "$narwhal" "$out/bin/narwhal"
cp "$replay" "$out/bin/narwhal-replay"
cp "$plugin_dir"/*.so "$out/plugins/"
sim=$out/bin/narwhal-sim
narwhal=$out/bin/narwhal
replay=$out/bin/narwhal-replay
plugin_dir=$out/plugins
src=$(cd "$here/../.." && git rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(cd "$here/../.." && git status --porcelain 2>/dev/null | grep -vc '^??' || true)
work=$out
: >"$work/pids"
rm -f "$out/faults.jsonl" "$out/health.jsonl" "$out/stop"
trap 'st=$?; touch "$out/stop"; nwb_cleanup; exit $st' EXIT
trap 'exit 130' INT TERM

now_ms() {
	local us=${EPOCHREALTIME/./}
	echo $((us / 1000))
}
t0_ms=$(now_ms)
say() { # a progress line with the seconds since the start
	local t=$(($(now_ms) - t0_ms))
	printf '[%4d.%01ds] %s\n' $((t / 1000)) $((t % 1000 / 100)) "$*"
}

# --- the fleet. Engine names are Narwhal's ids: p0.. and d0.. by starting
# role. The last engine of each role is stable; the others are victims.
victims=
stable=
roles=
for i in $(seq 0 $((n_prefill - 1))); do
	roles="$roles p$i:prefill"
	if [ "$i" -lt $((n_prefill - 1)) ]; then victims="$victims p$i"; else stable="$stable p$i"; fi
done
for i in $(seq 0 $((n_decode - 1))); do
	roles="$roles d$i:decode"
	if [ "$i" -lt $((n_decode - 1)) ]; then victims="$victims d$i"; else stable="$stable d$i"; fi
done
victims=${victims# }
stable=${stable# }
[ -n "$victims" ] || nwb_die "no engine to fault: PREFILL or DECODE must be at least 2"

declare -A port admin pid role_of
for r in $roles; do role_of[${r%%:*}]=${r#*:}; done

forget_pid() {
	sed -i "/^$1\$/d" "$work/pids"
}

# Start victim $1 on its fixed ports, wait (bounded) until its /health
# answers; a few tries in case the port is still held.
start_victim() {
	local e=$1 try
	for try in 1 2 3; do
		"$sim" --engines 1 --base-port "${port[$e]}" --admin-port "${admin[$e]}" \
			--id-prefix "$e-" --seed "$seed" --log-level warning \
			--fleet-out "$work/fleet-$e.json" >/dev/null 2>>"$work/sim-$e.log" &
		pid[$e]=$!
		nwb_remember "${pid[$e]}"
		if nwb_wait_http "http://127.0.0.1:${port[$e]}/health" 10; then
			return 0
		fi
		kill -KILL "${pid[$e]}" 2>/dev/null || true
		wait "${pid[$e]}" 2>/dev/null || true
		forget_pid "${pid[$e]}"
		sleep 0.5
	done
	return 1
}

for e in $victims; do
	port[$e]=$(nwb_free_port)
	admin[$e]=$(nwb_free_port)
	start_victim "$e" || nwb_die "victim $e did not start on port ${port[$e]} (see $work/sim-$e.log)"
done
"$sim" --engines "$(echo $stable | wc -w)" --base-port 0 --id-prefix stable- --seed "$seed" \
	--log-level warning --fleet-out "$work/fleet-stable.json" >/dev/null 2>"$work/sim-stable.log" &
stable_pid=$!
nwb_remember "$stable_pid"
i=0
while ! grep -q engines "$work/fleet-stable.json" 2>/dev/null; do
	i=$((i + 1))
	[ $i -le 100 ] && kill -0 "$stable_pid" 2>/dev/null || nwb_die "narwhal-sim (stable engines) did not start"
	sleep 0.05
done

# --- Narwhal's configuration: the fleet above, retries, a fast monitor.
engines_json=$(
	{
		k=0
		for e in $stable; do
			jq -c --argjson k $k --arg id "$e" --arg role "${role_of[$e]}" \
				'.engines[$k] | .id = $id | .role = $role' "$work/fleet-stable.json"
			k=$((k + 1))
		done
		for e in $victims; do
			jq -c --arg id "$e" --arg role "${role_of[$e]}" '.engines[0] | .id = $id | .role = $role' \
				"$work/fleet-$e.json"
		done
	} | jq -sc 'sort_by(.role != "prefill", .id)'
)
nw_port=$(nwb_free_port)
jq -n --argjson port "$nw_port" --argjson engines "$engines_json" --arg model "$model" \
	--argjson mi "$monitor" --argjson handoff "$handoff" --arg commit "$commit" '{
	server: {host: "127.0.0.1", port: $port},
	log: {level: "info"},
	serving: {admission: "open", max_attempts: 3, handoff_timeout_s: $handoff,
	          stream_commit: $commit},
	controller: {policy: "static", monitor_interval_s: $mi, min_prefill: 1, min_decode: 1},
	fleet: {model: $model, engines: $engines}
}' >"$work/narwhal.json"
NARWHAL_PLUGIN_DIR=$plugin_dir "$narwhal" --config "$work/narwhal.json" 2>"$work/narwhal.log" &
nw_pid=$!
nwb_remember "$nw_pid"
url=http://127.0.0.1:$nw_port
nwb_wait_http "$url/v1/models" 10 || { tail -n 20 "$work/narwhal.log" >&2; nwb_die "narwhal does not serve"; }

echo "chaos soak: ${duration}s, seed $seed, $rate req/s; engines $(echo $roles | sed 's/:[a-z]*//g')" \
	"(victims $victims; stable $stable); at most $max_down down; monitor ${monitor}s; output in $out"

# Until every engine has been probed and passed: then the fleet is whole.
i=0
until curl -s -m 2 "$url/narwhal/health" | jq -e '.status == "ok"' >/dev/null 2>&1; do
	i=$((i + 1))
	[ $i -le 100 ] || nwb_die "narwhal's health did not become ok within 10 s"
	sleep 0.1
done

# --- preflight: one request of each kind through the whole fleet.
for api in completions chat; do
	for stream in false true; do
		if [ $api = completions ]; then
			body='{"model":"'$model'","prompt":"a short preflight prompt","max_tokens":4,"stream":'$stream'}'
		else
			body='{"model":"'$model'","messages":[{"role":"user","content":"preflight"}],"max_tokens":4,"stream":'$stream'}'
		fi
		code=$(curl -s -m 10 -o "$work/preflight.out" -w '%{http_code}' -H 'Content-Type: application/json' \
			-d "$body" "$url/v1/$([ $api = chat ] && echo chat/completions || echo completions)" || true)
		if [ "$code" != 200 ] || { [ $stream = true ] && ! grep -q '^data: \[DONE\]' "$work/preflight.out"; }; then
			nwb_die "preflight $api stream=$stream: HTTP $code $(head -c 200 "$work/preflight.out")"
		fi
	done
done

# --- the fault schedule, drawn before the run from SEED (Park-Miller, so
# that every awk draws the same numbers): planned second, engine, kind,
# seconds it lasts. Each round of faults has every kind once, in a drawn
# order. At most MAX_DOWN victims are busy at once, an engine
# counting as busy from its fault's start until SETTLE after its end.
awk -v seed="$seed" -v dur="$duration" -v warm="$warmup" -v tail="$tail_s" -v kinds="$faults" \
	-v victims="$victims" -v maxdown="$max_down" -v fmin="$fault_min" -v fmax="$fault_max" \
	-v gmin="$gap_min" -v gmax="$gap_max" -v settle="$settle" '
	function draw() { x = (x * 16807) % 2147483647; return x / 2147483647 }
	function tenth(v) { return int(v * 10 + 0.5) / 10 }
	BEGIN {
		x = (seed % 2147483646) + 1
		for (i = 0; i < 10; i++) draw()
		nk = split(kinds, K, " "); nv = split(victims, V, " ")
		t = warm; last = dur - tail; n = 0
		while (t < last) {
			busy = 0; soonest = 1e18
			for (j = 1; j <= nv; j++)
				if (until[V[j]] > t) { busy++; if (until[V[j]] < soonest) soonest = until[V[j]] }
			if (busy >= maxdown || busy >= nv) { t = soonest; continue }
			if (bag == 0) { # every kind once per round, in a drawn order
				for (j = 1; j <= nk; j++) B[j] = K[j]
				for (j = nk; j > 1; j--) { r = 1 + int(draw() * j); tmp = B[j]; B[j] = B[r]; B[r] = tmp }
				bag = nk
			}
			k = B[bag--]
			d = k == "restart" ? 0 : tenth(fmin + draw() * (fmax - fmin))
			if (t + d > last) {
				d = tenth(last - t)
				if (d < fmin) break
			}
			nf = 0
			for (j = 1; j <= nv; j++) if (until[V[j]] <= t) F[++nf] = V[j]
			e = F[1 + int(draw() * nf)]
			until[e] = t + d + settle
			printf "%d\t%.1f\t%s\t%s\t%.1f\n", ++n, t, e, k, d
			t = tenth(t + gmin + draw() * (gmax - gmin))
		}
	}' >"$work/schedule.tsv"
nfaults=$(wc -l <"$work/schedule.tsv")
echo "schedule: $nfaults faults ($(cut -f4 "$work/schedule.tsv" | sort | uniq -c | awk '{ printf "%s%s %s", (NR > 1 ? ", " : ""), $1, $2 }'))" \
	"in $work/schedule.tsv"

# --- the health sampler: GET /narwhal/health every SAMPLE_MS, each answer
# stamped with the Unix milliseconds at which it arrived. Bounded in time
# (the run plus five minutes) and in count; stops early at $out/stop.
sampler() {
	local end_us=$1 period_us=$((sample_ms * 1000)) next now body t n=0 max
	max=$(((end_us - ${EPOCHREALTIME/./}) / period_us + 10))
	next=${EPOCHREALTIME/./}
	while [ ! -e "$out/stop" ] && [ $n -lt $max ]; do
		now=${EPOCHREALTIME/./}
		[ "$now" -lt "$end_us" ] || break
		n=$((n + 1))
		body=$(curl -s -m 1 "$url/narwhal/health" 2>/dev/null || true)
		t=${EPOCHREALTIME/./}
		[ -n "$body" ] && printf '{"t":%d,"h":%s}\n' $((t / 1000)) "$body" >>"$out/health.jsonl"
		next=$((next + period_us))
		now=${EPOCHREALTIME/./}
		if [ "$next" -gt "$now" ]; then
			sleep "$(((next - now) / 1000000)).$(printf '%06d' $(((next - now) % 1000000)))"
		else
			next=$now
		fi
	done
}
sampler $((${EPOCHREALTIME/./} + (duration + 300) * 1000000)) &
sampler_pid=$!
nwb_remember "$sampler_pid"
i=0
until [ -s "$out/health.jsonl" ]; do
	i=$((i + 1))
	[ $i -le 50 ] || nwb_die "the health sampler wrote nothing in 5 s"
	sleep 0.1
done
curl -s -m 2 "$url/narwhal/health" >"$work/health-start.json"

# --- the load: four open-loop narwhal-replay streams, each a quarter of
# RATE, all bounded by --duration and a per-request --timeout.
load_start_ms=$(now_ms)
replay_pids=
k=0
for api in completions chat; do
	for stream in stream no-stream; do
		k=$((k + 1))
		overhead=1
		[ $api = chat ] && overhead=15 # narwhal-sim's chat template
		"$replay" --url "$url" --api $api --$stream --model "$model" --prompt-overhead $overhead \
			--synthetic "rate=$(awk -v r="$rate" 'BEGIN { print r / 4 }'),input=$input,output=$output" \
			--duration "$duration" --seed $((seed * 10 + k)) --timeout 120 --connect-timeout 10 \
			--concurrency-limit 1024 --quiet \
			--out-json "$work/replay-$api-$stream.json" --out-csv "$work/replay-$api-$stream.csv" \
			>"$work/replay-$api-$stream.out" 2>&1 &
		replay_pids="$replay_pids $!"
		nwb_remember "$!"
	done
done
say "load started: 4 streams, $rate req/s in all"

# --- the faults, as scheduled. Before each, a guard: the engine must be in
# placement and no more than MAX_DOWN engines may be faulted or out of
# placement with it; otherwise the fault waits (and is recorded as late),
# and is skipped when it cannot start before the quiet tail.
admin_url() { echo "http://127.0.0.1:${admin[$1]}/sim/engines/$1-0/faults"; }
set_fault() { # engine json
	curl -s -m 5 -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' \
		-d "$2" "$(admin_url "$1")" || true
}
clear_fault() {
	curl -s -m 5 -o /dev/null -w '%{http_code}' -X DELETE "$(admin_url "$1")" || true
}
engines_out() { # ids of engines out of placement in the latest sample
	tail -n 1 "$out/health.jsonl" 2>/dev/null |
		jq -r '[.h.engines[] | select(.available | not) | .id] | join(" ")' 2>/dev/null || true
}
declare -A f_idx f_kind f_planned f_start f_end_at f_delay f_note
active=

record() { # engine end_ms note
	local e=$1
	jq -nc --argjson idx "${f_idx[$e]}" --arg engine "$e" --arg kind "${f_kind[$e]}" \
		--argjson planned "${f_planned[$e]}" --argjson from "${f_start[$e]}" --argjson to "$2" \
		--argjson delay "${f_delay[$e]}" --arg note "$3" \
		'{idx: $idx, engine: $engine, kind: $kind, planned_s: $planned, start_ms: $from,
		  end_ms: $to, delay_s: $delay, note: $note}' >>"$out/faults.jsonl"
}

start_fault() { # idx planned engine kind seconds delay_s
	local e=$3 k=$4 st
	f_idx[$e]=$1 f_planned[$e]=$2 f_kind[$e]=$k f_delay[$e]=$6 f_note[$e]=
	# The fault's time is taken just before it is made, so that every leg
	# that could have met it counts as after it.
	f_start[$e]=$(now_ms)
	case $k in
	kill)
		kill -KILL "${pid[$e]}"
		wait "${pid[$e]}" 2>/dev/null || true
		forget_pid "${pid[$e]}"
		;;
	restart)
		kill -TERM "${pid[$e]}"
		wait "${pid[$e]}" 2>/dev/null || true
		forget_pid "${pid[$e]}"
		if start_victim "$e"; then
			record "$e" "$(now_ms)" ""
			say "fault ${f_idx[$e]}: $e restarted"
		else
			record "$e" "$(now_ms)" "did not start again"
			say "fault ${f_idx[$e]}: $e DID NOT START AGAIN"
		fi
		return
		;;
	hang) st=$(set_fault "$e" '{"hang_before_first_token": true}') ;;
	refuse) st=$(set_fault "$e" '{"refuse_connections": true}') ;;
	error) st=$(set_fault "$e" '{"error_rate": 1, "error_status": 503}') ;;
	esac
	case $k in kill) ;; *) [ "$st" = 200 ] || f_note[$e]="admin API answered $st" ;; esac
	f_end_at[$e]=$((f_start[$e] + $(awk -v s="$5" 'BEGIN { printf "%d", s * 1000 }')))
	active="$active $e"
	say "fault $1: $k $e for ${5}s${f_note[$e]:+ (${f_note[$e]})}"
}

end_fault() {
	local e=$1 st note=${f_note[$e]}
	if [ "${f_kind[$e]}" = kill ]; then
		start_victim "$e" || note="${note:+$note; }did not start again"
	else
		st=$(clear_fault "$e")
		[ "$st" = 200 ] || [ "$st" = 204 ] || note="${note:+$note; }clearing answered $st"
	fi
	record "$e" "$(now_ms)" "$note"
	active=$(for a in $active; do [ "$a" = "$e" ] || printf ' %s' "$a"; done)
	say "fault ${f_idx[$e]}: $e back (${f_kind[$e]})${note:+ ($note)}"
}

last_start_ms=$((load_start_ms + (duration - tail_s) * 1000))
stop_ms=$((load_start_ms + (duration + 60) * 1000))
mapfile -t plan <"$work/schedule.tsv"
next=0
while :; do
	now=$(now_ms)
	for e in $active; do
		if [ "$now" -ge "${f_end_at[$e]}" ]; then end_fault "$e"; fi
	done
	if [ $next -lt ${#plan[@]} ]; then
		IFS=$'\t' read -r idx planned e k secs <<<"${plan[$next]}"
		due=$((load_start_ms + $(awk -v s="$planned" 'BEGIN { printf "%d", s * 1000 }')))
		if [ "$now" -ge "$due" ]; then
			late_ms=$((now - due))
			room_ms=$((last_start_ms - now))
			out_now=$(engines_out)
			down=$(printf '%s\n' $out_now $active "$e" | sort -u | grep -c . || true)
			# A late fault is cut short to end before the tail.
			if [ "$k" != restart ] && [ "$(awk -v s="$secs" 'BEGIN { printf "%d", s * 1000 }')" -gt "$room_ms" ]; then
				secs=$(awk -v m="$room_ms" 'BEGIN { printf "%.1f", m / 1000 }')
			fi
			if [ "$room_ms" -lt 0 ] || { [ "$k" != restart ] && [ "$room_ms" -lt 1000 ]; }; then
				jq -nc --argjson idx "$idx" --arg engine "$e" --arg kind "$k" --argjson planned "$planned" \
					'{idx: $idx, engine: $engine, kind: $kind, planned_s: $planned, skipped: true,
					  note: "could not start before the quiet tail"}' >>"$out/faults.jsonl"
				say "fault $idx: $k $e skipped (engines out: ${out_now:-none}; active: ${active:-none})"
				next=$((next + 1))
			elif ! printf '%s\n' $out_now $active | grep -qx "$e" && [ "$down" -le "$max_down" ]; then
				start_fault "$idx" "$planned" "$e" "$k" "$secs" \
					"$(awk -v m="$late_ms" 'BEGIN { printf "%.1f", m / 1000 }')"
				next=$((next + 1))
			fi
		fi
	fi
	[ $next -ge ${#plan[@]} ] && [ -z "$(echo $active)" ] && break
	[ "$(now_ms)" -lt "$stop_ms" ] || { say "fault loop: out of time"; break; }
	sleep 0.05
done
for e in $active; do end_fault "$e"; done
say "fault schedule done; waiting for the load to finish"

for p in $replay_pids; do
	wait "$p" || echo "narwhal-replay (pid $p) exited with status $?" >&2
	forget_pid "$p"
done
load_end_ms=$(now_ms)
say "load finished"

# Every engine back in placement (bounded: the longest verification backoff
# and some), then the last sample.
i=0
until curl -s -m 2 "$url/narwhal/health" | jq -e '[.engines[] | select(.available | not)] | length == 0' \
	>/dev/null 2>&1; do
	i=$((i + 1))
	[ $i -le 450 ] || { say "some engines are still out of placement after 45 s"; break; }
	sleep 0.1
done
curl -s -m 2 "$url/narwhal/health" >"$work/health-end.json"
touch "$out/stop"
wait "$sampler_pid" 2>/dev/null || true
forget_pid "$sampler_pid"
kill -0 "$nw_pid" 2>/dev/null || echo "NARWHAL EXITED during the run (see $work/narwhal.log)" >&2

jq -n --argjson seed "$seed" --argjson duration "$duration" --argjson rate "$rate" \
	--argjson max_down "$max_down" --argjson monitor "$monitor" --argjson handoff "$handoff" \
	--arg commit "$commit" --arg faults "$faults" --arg victims "$victims" --arg stable "$stable" \
	--argjson load_start "$load_start_ms" --argjson load_end "$load_end_ms" \
	--argjson sample_ms "$sample_ms" --arg src "$src" --argjson dirty "${dirty:-0}" \
	--arg input "$input" --arg output "$output" --argjson alive "$(kill -0 "$nw_pid" 2>/dev/null && echo true || echo false)" \
	--arg machine "$(nproc) CPUs, $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)" \
	--arg when "$(date -u +%Y-%m-%dT%H:%MZ)" --argjson nfaults "$nfaults" '{
	seed: $seed, duration_s: $duration, rate_rps: $rate, max_down: $max_down,
	monitor_interval_s: $monitor, handoff_timeout_s: $handoff, stream_commit: $commit,
	fault_kinds: ($faults | split(" ")), victims: ($victims | split(" ")),
	stable: ($stable | split(" ")), input: $input, output: $output,
	faults_planned: $nfaults, load_start_ms: $load_start, load_end_ms: $load_end,
	sample_ms: $sample_ms, narwhal_alive: $alive, source: $src, modified_files: $dirty,
	machine: $machine, date: $when
}' >"$work/meta.json"
gzip -f "$out/health.jsonl"

"$here/report.sh" "$out"
