#!/bin/sh
# browser_lane_serve.sh - `weft serve` end to end: it says where it listens, serves the worker page, says
# when a tab joins (and that the tab's matmul has the CPU lane's bits, and which ops its GPU runs), which of
# the tab's lanes ran its ops, and when it leaves, refuses bad options, and stops cleanly on SIGINT. Exits 77 (skip) when the tab driver cannot run a browser.
# Usage: browser_lane_serve.sh WEFT NODE DRIVER WEB_DIR
weft=${1:?usage: browser_lane_serve.sh WEFT NODE DRIVER WEB_DIR} node=$2 driver=$3 web=$4
out=serve.out drv=serve-driver.out
failures=0
fail() {
  echo "FAIL: $*"
  sed 's/^/  serve: /' "$out"
  failures=$((failures + 1))
}
# waitfor FILE PATTERN SECONDS: 0 once a line of FILE matches PATTERN (grep -E).
waitfor() {
  n=0
  while [ "$n" -lt $(($3 * 10)) ]; do
    grep -Eq -- "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
    n=$((n + 1))
  done
  return 1
}

"$weft" serve --help | grep -q "^Usage: weft serve" || fail "weft serve --help"
"$weft" serve --port 70000 >/dev/null 2>&1
[ $? -eq 2 ] || fail "a port out of range is a usage error"
"$weft" serve --tls-cert x >/dev/null 2>&1
[ $? -eq 2 ] || fail "--tls-cert without --tls-key is a usage error"
"$weft" serve --listen 0.0.0.0 --port 0 --web "$web" >"$out" 2>&1
[ $? -eq 2 ] && grep -q "secret" "$out" || fail "off loopback without a secret: a usage error (exit 2), saying why"

"$weft" serve --port 0 --web "$web" --slots 2 >"$out" 2>&1 &
pid=$!
waitfor "$out" "^weft serve: listening on http://127\.0\.0\.1:[0-9]+$" 10 || fail "serve says where it listens"
base=$(sed -n 's/^weft serve: listening on //p' "$out")
waitfor "$out" "^weft serve: worker page: http://127\.0\.0\.1:[0-9]+/worker/#token=[0-9a-f]{32}$" 10 ||
  fail "serve prints the worker page's address with its token"
page=$(sed -n 's/^weft serve: worker page: //p' "$out")
# The driver reads commands from a pipe we hold open; closing it (EOF) makes it close its browser.
rm -f serve.fifo
mkfifo serve.fifo
# gpu_min=0: the tab's GPU takes every op it has a kernel for (SwiftShader, a fallback adapter, otherwise none).
"$node" "$driver" --url "$page&gpu_min=0" <serve.fifo >"$drv" 2>/dev/null &
dpid=$!
exec 3>serve.fifo
waitfor "$drv" "^(ready|SKIP|FAIL)" 60
if grep -q "^SKIP" "$drv"; then
  cat "$drv"
  exec 3>&-
  kill "$pid" 2>/dev/null
  wait
  rm -f serve.fifo
  exit 77
fi
waitfor "$out" "^weft serve: a tab joined as browser:0: " 30 || fail "serve says a tab joined"
waitfor "$out" "bit-identical to the CPU lane" 30 || fail "the tab's check matmul has the CPU lane's bits"
# SwiftShader where there is no GPU: the tab's GPU lane passed the self-test for its kernels.
grep -q "^weft serve: a tab joined as browser:0: .*on its webgpu lane when large: matmul, layernorm" "$out" ||
  fail "serve says which ops the tab's GPU runs"
# The check matmul (64 x 64 x 64, at the tab's default gpu_min) ran on the tab's GPU, and serve says so.
waitfor "$out" "^weft serve: browser:0 ran: matmul 1 on webgpu" 20 || fail "serve says the tab's GPU ran the matmul"
# ... and, before the tab is closed, the once-a-second heartbeat (a relu) has run on it too. serve prints a "ran:"
# line only when the counts other than the heartbeat's change, so none may come after the first heartbeat: give
# the heartbeat a few of its periods, then the "left" line below says what the tab ran, heartbeat included.
sleep 4
exec 3>&-
wait "$dpid"
rm -f serve.fifo
waitfor "$out" "^weft serve: the tab of browser:0 left; it ran: matmul 1 on webgpu; relu [0-9]+ on cpu$" 20 ||
  fail "serve says the tab left, and what it ran"
kill -INT "$pid"
wait "$pid"
rc=$?
[ "$rc" -eq 0 ] || fail "SIGINT: exit $rc, expected 0"
grep -q "^weft serve: stopping$" "$out" || fail "serve says it stops"
[ "$failures" -eq 0 ] && echo "browser_lane_serve: all checks passed"
[ "$failures" -eq 0 ]
