#!/bin/sh
# Run the OpenAI Node SDK scenarios (scenarios.js) through Narwhal:
#
#   tests/clients/openai-node/run.sh BUILD_DIR     e.g. build/plain
#
# Starts narwhal-sim (two simulated vLLM engines, one prefill and one decode)
# and narwhal from BUILD_DIR on loopback ephemeral ports, installs the pinned
# SDK with `npm ci` into a temporary directory, runs the scenarios with a
# time limit and stops everything it started. Needs node and npm.
#
# A registry that cannot be reached fails the run, loudly. To skip the
# suite on purpose (a machine without network), set
# NARWHAL_SKIP_CLIENT_TESTS=1.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
[ $# = 1 ] || { echo "usage: $0 BUILD_DIR" >&2; exit 2; }
build=$(cd "$1" && pwd)

if [ "${NARWHAL_SKIP_CLIENT_TESTS:-}" = 1 ]; then
	echo "openai-node: SKIPPED (NARWHAL_SKIP_CLIENT_TESTS=1)"
	exit 0
fi

die() {
	echo "openai-node: $*" >&2
	exit 1
}

for tool in node npm; do
	command -v "$tool" >/dev/null 2>&1 ||
		die "$tool is missing (apt-get install nodejs npm, or NARWHAL_SKIP_CLIENT_TESTS=1 to skip)"
done
for prog in narwhal narwhal-sim; do
	[ -x "$build/$prog" ] || die "$build/$prog is not built"
done

work=$(mktemp -d "${TMPDIR:-/tmp}/narwhal-openai-node.XXXXXX")
pids=""
cleanup() {
	for p in $pids; do kill -TERM "$p" 2>/dev/null || true; done
	for p in $pids; do
		i=0
		while kill -0 "$p" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
		kill -KILL "$p" 2>/dev/null || true
	done
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# Show a process's log and fail.
fail_with_log() { # message, log file
	echo "openai-node: $1; $2 ends:" >&2
	tail -n 20 "$2" >&2
	exit 1
}

start=$(date +%s)

# The pinned SDK, installed apart from the source tree. npm's own retries
# are bounded and so is the whole install.
cp "$here/package.json" "$here/package-lock.json" "$here/scenarios.js" "$work/"
if ! (cd "$work" && timeout 300 npm ci --no-audit --no-fund --fetch-timeout=30000 \
	--fetch-retries=2 >npm.log 2>&1); then
	cat "$work/npm.log" >&2
	die "npm ci failed: is the npm registry reachable? (NARWHAL_SKIP_CLIENT_TESTS=1 skips this suite)"
fi
echo "openai-node: SDK $(cd "$work" && node -p "require('./node_modules/openai/package.json').version") installed in $(($(date +%s) - start)) s"

# Two engines with the timing model of the default preset (about 20 ms a
# decoded token), so that a stream lasts long enough to hold and cancel.
"$build/narwhal-sim" --engines 2 --base-port 0 --log-level warning \
	--fleet-out "$work/fleet.json" >/dev/null 2>"$work/sim.log" &
pids="$pids $!"
sim=$!
i=0
until grep -q engines "$work/fleet.json" 2>/dev/null; do
	i=$((i + 1))
	{ [ $i -gt 100 ] || ! kill -0 "$sim" 2>/dev/null; } && fail_with_log "narwhal-sim did not start" "$work/sim.log"
	sleep 0.1
done

# One admission slot and no queue (docs/admission.md): a second request
# while one is in flight is refused with 429 and Retry-After. Client keys
# are required, as in a deployment.
NARWHAL_CLIENT_KEYS=sdk-test-key
export NARWHAL_CLIENT_KEYS
(cd "$work" && node -e '
const f = JSON.parse(require("fs").readFileSync("fleet.json", "utf8"));
console.log(JSON.stringify({
  server: { host: "127.0.0.1", port: 0, api_keys_env: "NARWHAL_CLIENT_KEYS" },
  log: { level: "info", format: "json" },
  serving: { admission: "open", max_connections: 16, queue_capacity: 0 },
  engine: { first_token_timeout_s: 10 },
  controller: { policy: "static", min_prefill: 1, min_decode: 1 },
  profiles: { path: "profiles.json" },
  plugins: { admission: { max_inflight: 1 }, placement: { name: "least-loaded" } },
  fleet: { model: f.model, engines: f.engines },
}, null, 2));' >narwhal.json)

NARWHAL_PLUGIN_DIR="$build/plugins/.libs" "$build/narwhal" --config "$work/narwhal.json" \
	2>"$work/narwhal.log" &
nw=$!
pids="$pids $nw"
port=""
i=0
while [ -z "$port" ]; do
	i=$((i + 1))
	{ [ $i -gt 100 ] || ! kill -0 "$nw" 2>/dev/null; } && fail_with_log "narwhal did not start" "$work/narwhal.log"
	sleep 0.1
	port=$(sed -n 's/.*"event":"listening".*"port":"\([0-9]*\)".*/\1/p' "$work/narwhal.log" | head -n 1)
done
url="http://127.0.0.1:$port"
# Ready when the monitor has learnt the model from an engine.
i=0
until curl -sf -m 2 "$url/v1/models" 2>/dev/null | grep -q '"id"'; do
	i=$((i + 1))
	[ $i -gt 100 ] && fail_with_log "narwhal lists no model after 10 s" "$work/narwhal.log"
	sleep 0.1
done

status=0
(cd "$work" &&
	NARWHAL_URL=$url NARWHAL_API_KEY=$NARWHAL_CLIENT_KEYS \
	NARWHAL_MODEL=$(node -p 'require("./fleet.json").model') \
	NARWHAL_ENGINES=$(node -p 'require("./fleet.json").engines.map((e) => e.url).join(",")') \
	timeout 120 node scenarios.js) || status=$?
# Narwhal is still up after all of it, and stops cleanly on SIGTERM (under
# the sanitizers, a leak makes that exit status non-zero).
if kill -0 "$nw" 2>/dev/null; then
	kill -TERM "$nw"
	i=0
	while kill -0 "$nw" 2>/dev/null && [ $i -lt 150 ]; do sleep 0.1; i=$((i + 1)); done
	if kill -0 "$nw" 2>/dev/null; then
		status=1
		echo "openai-node: narwhal did not stop within 15 s of SIGTERM" >&2
		kill -KILL "$nw"
	fi
	nw_status=0
	wait "$nw" || nw_status=$?
	[ "$nw_status" = 0 ] || { status=1; echo "openai-node: narwhal exited with status $nw_status" >&2; }
else
	status=1
	echo "openai-node: narwhal is no longer running" >&2
fi
if [ "$status" != 0 ]; then
	echo "openai-node: failed (status $status); narwhal's log ends:" >&2
	tail -n 40 "$work/narwhal.log" >&2
fi
echo "openai-node: took $(($(date +%s) - start)) s"
exit "$status"
