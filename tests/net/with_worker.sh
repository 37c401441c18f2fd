#!/bin/sh
# with_worker.sh WEFT COMMAND... - starts `weft worker` on an ephemeral loopback port, runs COMMAND with
# WEFT_REMOTE naming it, stops the worker, and exits with COMMAND's status. The worker serves the lanes
# WEFT_WORKER_LANES names (default: cpu). With WITH_WORKER_TLS=1 the worker gets a fresh shared secret and
# --tls, and COMMAND runs with WEFT_REMOTE_SECRET_FILE and WEFT_REMOTE_TLS=1.
weft=$1
shift
out=$(mktemp)
secret=
if [ "${WITH_WORKER_TLS:-0}" = 1 ]; then
  secret=$(mktemp)
  head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$secret"
  "$weft" worker --listen 127.0.0.1:0 --lanes "${WEFT_WORKER_LANES:-cpu}" --secret-file "$secret" --tls >"$out" 2>&1 &
else
  "$weft" worker --listen 127.0.0.1:0 --lanes "${WEFT_WORKER_LANES:-cpu}" >"$out" 2>&1 &
fi
pid=$!
i=0
while ! grep -q 'listening on' "$out" && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
port=$(sed -n 's/.*listening on .*:\([0-9][0-9]*\)$/\1/p' "$out")
rm -f "$out"
if [ -z "$port" ]; then
  echo "with_worker.sh: the worker did not start" >&2
  kill "$pid" 2>/dev/null
  [ -n "$secret" ] && rm -f "$secret"
  exit 1
fi
if [ -n "$secret" ]; then
  WEFT_REMOTE=127.0.0.1:$port WEFT_REMOTE_SECRET_FILE=$secret WEFT_REMOTE_TLS=1 "$@"
else
  WEFT_REMOTE=127.0.0.1:$port "$@"
fi
status=$?
kill "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
[ -n "$secret" ] && rm -f "$secret"
exit $status
