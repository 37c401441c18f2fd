#!/bin/sh
# with_worker.sh WEFT COMMAND... - starts `weft worker` on an ephemeral loopback port, runs COMMAND with
# WEFT_REMOTE naming it, stops the worker, and exits with COMMAND's status. The worker serves the lanes
# WEFT_WORKER_LANES names (default: cpu).
weft=$1
shift
out=$(mktemp)
"$weft" worker --listen 127.0.0.1:0 --lanes "${WEFT_WORKER_LANES:-cpu}" >"$out" 2>&1 &
pid=$!
i=0
while ! grep -q 'listening on' "$out" && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
port=$(sed -n 's/.*listening on .*:\([0-9][0-9]*\)$/\1/p' "$out")
rm -f "$out"
if [ -z "$port" ]; then
  echo "with_worker.sh: the worker did not start" >&2
  kill "$pid" 2>/dev/null
  exit 1
fi
WEFT_REMOTE=127.0.0.1:$port "$@"
status=$?
kill "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
exit $status
