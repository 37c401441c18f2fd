#!/bin/sh
# cli_ux_test.sh - what a person meets on a first run, with two lanes everywhere (this machine's CPU and a
# `weft worker` on loopback, a remote lane): bench measures the lanes before its table (a few lines in a
# pipe, nothing glued to a lane's description), prints the paired times behind each routed/best ratio (and
# writes them to --json and --csv), checks --plot before running and writes an SVG with a 'wrote' line;
# calibrate exits 1 when it cannot write its cache; the worker logs connections and refused logins; the
# cache does not grow an entry per ephemeral worker port; messages for mistyped commands, lanes and
# addresses. Usage: cli_ux_test.sh path/to/weft
weft=${1:?usage: cli_ux_test.sh path/to/weft}
tmp=$(mktemp -d)
out=$tmp/out err=$tmp/err
export XDG_CACHE_HOME="$tmp/cache"
unset WEFT_REMOTE WEFT_BROWSER
failures=0
pids=""
cleanup() {
  for p in $pids; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*"
  echo "  stdout:"; sed 's/^/    /' "$out"
  echo "  stderr:"; sed 's/^/    /' "$err"
  failures=$((failures + 1))
}
expect() {
  want=$1; shift
  "$weft" "$@" >"$out" 2>"$err"
  got=$?
  [ "$got" -eq "$want" ] || fail "weft $* exited $got, expected $want"
  [ "$got" -eq "$want" ]
}
has() { grep -Eq -- "$2" "$1" || fail "$3: no line matches '$2'"; }
hasnt() { ! grep -Eq -- "$2" "$1" || fail "$3: a line matches '$2'"; }
# has_soon FILE RE WHAT: like has, for a log another process writes: waits up to 10 s for the line
has_soon() {
  n=0
  while ! grep -Eq -- "$2" "$1" && [ $n -lt 100 ]; do sleep 0.1; n=$((n + 1)); done
  has "$@"
}

# start_worker LOG ARGS...: a worker on a free loopback port; sets $port
start_worker() {
  log=$1; shift
  "$weft" worker --listen 127.0.0.1:0 --lanes cpu "$@" >"$log" 2>&1 &
  pids="$pids $!"
  port=""
  i=0
  while [ $i -lt 100 ] && [ -z "$port" ]; do
    port=$(sed -n 's/^weft worker: listening on 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$log")
    [ -n "$port" ] || sleep 0.1
    i=$((i + 1))
  done
  [ -n "$port" ] || { echo "FAIL: the worker did not start:"; cat "$log"; exit 1; }
}

start_worker "$tmp/worker.log"
export WEFT_REMOTE=127.0.0.1:$port
two="cpu,remote"

# bench on an empty cache: the lanes are measured before the table, said in a few lines (a pipe)
expect 0 bench --sizes 8,32 --repeats 1 --lanes $two && has "$err" "^weft bench: no calibration cache yet" "bench: says the cache is empty" &&
  has "$err" "^weft bench: lanes measured in" "bench: says when the lanes are measured"
[ "$(wc -l <"$err")" -le 6 ] || fail "bench printed more than a few calibration lines in a pipe"
hasnt "$out" "calibration cache" "bench: the cache note is not in the table"
hasnt "$out" "calibrat" "bench: no calibration line inside the table"
# the table: the routed time, the best lane's time of the same pairing, and their ratio, reproducible
has "$out" "^ +32 \\|.*\\([a-z:./0-9]+\\) \\| +[0-9.]+ +\\([a-z:./0-9]+\\) \\| +[0-9.]+ \\|" "bench: routed and best times beside the ratio"
awk -F'|' '/^ +32 \|/ { split($4, r, " "); split($5, b, " "); want = r[1] / b[1]; got = $6 + 0;
  if (got < want * 0.99 - 0.002 || got > want * 1.01 + 0.002) { print "ratio " got " vs " want; exit 1 } }' "$out" ||
  fail "bench: the ratio is not routed ms / best ms as printed"
has "$out" "routed/best, geometric mean" "bench: routed summary"
has "$out" "crossover cpu / remote:127.0.0.1:$port/cpu" "bench: crossover of the two lanes"
# second run: the cache has them, nothing is measured
expect 0 bench --sizes 8 --repeats 1 --lanes $two && hasnt "$err" "measur" "bench: a warm cache measures nothing"
expect 0 bench --sizes 8,16 --repeats 1 --lanes $two --json && has "$out" "\"best_ms\":" "bench --json: best_ms" &&
  has "$out" "\"predicted_ms\":" "bench --json: predicted_ms per point"
expect 0 bench --sizes 8 --repeats 1 --lanes $two --csv && has "$out" "^8,routed,[0-9.]+,[0-9.]+,[0-9.]+,[0-9]+,,[^,]+,[^,]+,[0-9.]+,[0-9.]+,$" "bench --csv: routed row with best_lane, best_ms, ratio"

# --plot: checked before anything runs; SVG only; 'wrote' once written
expect 2 bench --sizes 8 --lanes cpu --plot "$tmp/plot.png" && has "$err" "--plot writes SVG" "bench --plot refuses .png"
expect 2 bench --sizes 8 --lanes cpu --plot "$tmp/no/such/dir/p.svg" && has "$err" "cannot write" "bench --plot: bad path at once"
hasnt "$out" "n x n" "bench --plot: a bad path fails before the table"
expect 0 bench --sizes 8,16,24 --repeats 1 --lanes $two --plot "$tmp/p.svg" && has "$err" "wrote the plot to $tmp/p.svg" "bench --plot says wrote" &&
  has "$tmp/p.svg" "^<svg " "bench --plot: SVG" && has "$tmp/p.svg" ">24</text>" "bench --plot: a tick at each size" &&
  has "$tmp/p.svg" "routed \\(ring" "bench --plot: the router's rings" && has "$tmp/p.svg" "crossover, predicted" "bench --plot: predicted crossovers in the legend"

# calibrate cannot write its cache: exit 1, and says so
mkdir -p "$tmp/ro" && touch "$tmp/ro/weft" # a file where the cache's folder should be
XDG_CACHE_HOME="$tmp/ro" expect 1 calibrate --lanes cpu --quiet && has "$err" "could not be written" "calibrate: unwritable cache"
XDG_CACHE_HOME="$tmp/ro" expect 0 devices # nothing else minds

# the worker logs the client's connections
has "$tmp/worker.log" "127\\.0\\.0\\.1:[0-9]+ connected" "worker: logs a connection"
has "$tmp/worker.log" "joined" "worker: logs a completed handshake"
has_soon "$tmp/worker.log" "left" "worker: logs a client leaving"
# ... and a refused login (a worker with a secret, a client without it)
printf 'a-secret-of-more-than-16-bytes\n' >"$tmp/key"
start_worker "$tmp/worker2.log" --secret-file "$tmp/key"
WEFT_REMOTE=127.0.0.1:$port expect 0 devices --lanes cpu,remote
# the worker logs the refusal after the client has gone, so the line may come a moment later
has_soon "$tmp/worker2.log" "refused" "worker: logs a refused login"

# the cache keeps a bounded number of entries, however many ephemeral worker ports come and go
i=0
while [ $i -lt 3 ]; do
  start_worker "$tmp/w$i.log"
  WEFT_REMOTE=127.0.0.1:$port expect 0 calibrate --lanes remote --quiet
  i=$((i + 1))
done
n=$(grep -c '"key":' "$XDG_CACHE_HOME/weft/calibration.json")
[ "$n" -le 64 ] || fail "the cache holds $n entries"
grep -q '"saved":' "$XDG_CACHE_HOME/weft/calibration.json" || fail "cache entries carry when they were saved"

# messages
expect 2 devics && has "$err" "did you mean 'devices'" "did you mean"
expect 1 devices --lanes gpu && has "$err" "the lanes here are: cpu" "a filter that matches nothing lists the lanes"
expect 2 worker --listen garbage && has "$err" "HOST:PORT" "worker --listen garbage is a usage error"
expect 2 worker --listen 127.0.0.1:99999 && has "$err" "bad port 99999" "worker: bad port"
expect 2 route matmul -5 && has "$err" "negative number" "route -5"
WEFT_REMOTE=garbage expect 0 devices --lanes cpu,remote && has "$out" "not a worker address" "WEFT_REMOTE=garbage"
WEFT_REMOTE=127.0.0.1:99999 expect 0 devices --lanes cpu,remote && has "$out" "bad port '99999'" "WEFT_REMOTE bad port"
WEFT_REMOTE=,,, expect 0 devices --lanes cpu,remote && has "$out" "names no worker" "WEFT_REMOTE=,,,"
expect 0 route --explain matmul 64 --lanes $two &&
  awk '/^  lane / { w = length($0) } /^  (cpu|remote:[^ ]*) +[0-9]/ { sub(/   <- chosen.*/, ""); if (length($0) != w) bad = 1 }
       END { exit bad || !w }' "$out" || fail "route --explain: a long lane name pushes its row out of the columns"

if [ "$failures" -ne 0 ]; then
  echo "$failures first-run check(s) failed"
  exit 1
fi
echo "all first-run checks passed"
