#!/bin/sh
# cli_test.sh - checks the `weft` CLI's contract with people and scripts: every help and the version
# succeed, usage errors exit 2 with a message, a fabric that cannot open exits 1, and devices/bench produce
# their text, JSON and CSV with every lane agreeing. Usage: cli_test.sh path/to/weft
weft=${1:?usage: cli_test.sh path/to/weft}
out=$(mktemp) err=$(mktemp) plot=$(mktemp) cache=$(mktemp -d)
trap 'rm -rf "$out" "$err" "$plot" "$cache"' EXIT
# bench, route and calibrate measure lanes and write the calibration cache: never the user's own
export XDG_CACHE_HOME="$cache"
failures=0

fail() {
  echo "FAIL: $*"
  echo "  stdout:"; sed 's/^/    /' "$out"
  echo "  stderr:"; sed 's/^/    /' "$err"
  failures=$((failures + 1))
}

# expect STATUS ARGS...: runs weft ARGS, checks the exit status.
expect() {
  want=$1; shift
  "$weft" "$@" >"$out" 2>"$err"
  got=$?
  [ "$got" -eq "$want" ] || fail "weft $* exited $got, expected $want"
  [ "$got" -eq "$want" ]
}

# has FILE PATTERN WHAT: the output holds a line matching PATTERN (grep -E).
has() {
  grep -Eq -- "$2" "$1" || fail "$3: no line matches '$2'"
}

# Help and version.
for args in "--help" "-h" "help" "help devices" "help bench" "devices --help" "bench --help" "bench -h" \
  "route --help" "calibrate --help" "help route"; do
  # shellcheck disable=SC2086 # the words are the arguments
  expect 0 $args && has "$out" "^Usage: weft" "weft $args"
done
expect 0 --help && has "$out" "^  devices " "weft --help lists devices" && has "$out" "^  bench " "weft --help lists bench"
expect 0 --version && has "$out" "^weft [0-9]+\.[0-9]+\.[0-9]+$" "weft --version"

# Usage errors: exit 2, say what is wrong on stderr, nothing on stdout.
expect 2
expect 2 nosuch && has "$err" "unknown command 'nosuch'" "unknown command"
expect 2 --nosuch && has "$err" "unknown option '--nosuch'" "unknown top-level option"
expect 2 help nosuch && has "$err" "unknown command 'nosuch'" "help for an unknown command"
expect 2 devices --nosuch && has "$err" "unknown option '--nosuch'" "devices: unknown option"
expect 2 devices extra && has "$err" "takes no arguments" "devices: stray argument"
expect 2 bench --repeats && has "$err" "needs a value" "bench: missing value"
expect 2 bench --repeats 0 && has "$err" "--repeats wants a whole number" "bench: repeats out of range"
expect 2 bench --sizes 16,x && has "$err" "--sizes wants sizes" "bench: bad size list"
expect 2 bench --sizes 16, && has "$err" "--sizes wants sizes" "bench: trailing comma"
expect 2 bench --contract nope && has "$err" "--contract wants one of exact" "bench: unknown contract"
expect 2 bench --max-seconds -1 && has "$err" "--max-seconds wants" "bench: negative budget"
expect 2 bench --json --csv && has "$err" "pick one" "bench: two formats"
expect 2 bench 64 && has "$err" "takes no arguments" "bench: stray argument"
[ -s "$out" ] && fail "a usage error wrote to stdout"

# A lane filter that matches nothing: the fabric cannot open, which is a failure, not a usage error.
expect 1 devices --lanes nosuch && has "$err" "cannot open the fabric" "devices with an empty filter"

# devices: text and JSON.
expect 0 devices && has "$out" "^cpu" "devices lists the cpu lane" && has "$out" "^  contracts  exact" "devices: cpu contracts"
expect 0 devices --json && has "$out" "\"name\":[[:space:]]*\"cpu\"" "devices --json: cpu lane" &&
  has "$out" "\"contracts\":[[:space:]]*\[\"exact\"" "devices --json: contracts" &&
  has "$out" "\"absent\":" "devices --json: absent list"
expect 0 devices --lanes cpu && has "$out" "not requested" "devices --lanes cpu lists the rest as absent"

# --cpu-threads' default is one thread per CPU this process may run on (its affinity mask), as the help says
# (it said "online core"; under taskset the lane takes fewer).
expect 0 devices --help && has "$out" "one per CPU this process may run on" "devices --help: the thread default"
if command -v taskset >/dev/null 2>&1 && taskset -c 0 true 2>/dev/null; then
  taskset -c 0 "$weft" devices --lanes cpu >"$out" 2>"$err" && has "$out" "[^0-9]1 thread([^s]|$)" "devices under taskset -c 0: one thread"
fi
# a WEFT_CPU_ISA the lane does not know is not silently dropped: the lane's details say it was ignored
WEFT_CPU_ISA=avx9000 expect 0 devices --lanes cpu && has "$out" "WEFT_CPU_ISA='avx9000' ignored" "devices: an unknown WEFT_CPU_ISA is named"
# ... nor a WEFT_COPY_THREADS that is no count from 1 to 64: said on stderr, the default used
WEFT_COPY_THREADS=lots expect 0 devices --lanes cpu &&
  has "$err" "^weft: WEFT_COPY_THREADS='lots' is not a whole number from 1 to 64" "devices: a bad WEFT_COPY_THREADS is named"
WEFT_COPY_THREADS=2 expect 0 devices --lanes cpu && ! grep -q "COPY_THREADS" "$err" ||
  fail "devices: a good WEFT_COPY_THREADS says nothing"
# ... nor a remote tuning variable that is no number in its range: the workers stay out, saying which and why
WEFT_REMOTE=127.0.0.1:1 WEFT_REMOTE_TIMEOUT_MS=3s expect 0 devices --lanes cpu,remote &&
  has "$out" "WEFT_REMOTE_TIMEOUT_MS is '3s'; it takes a whole number of milliseconds" "devices: a bad WEFT_REMOTE_TIMEOUT_MS is named"
WEFT_REMOTE=127.0.0.1:1 WEFT_REMOTE_STREAMS=-2 expect 0 devices --lanes cpu,remote &&
  has "$out" "WEFT_REMOTE_STREAMS is '-2'" "devices: a bad WEFT_REMOTE_STREAMS is named"

# bench: small sizes, every format; odd sizes exercise the kernels' edges. Exit 0 also means no lane differs.
expect 0 bench --sizes 8,33 --repeats 1 && has "$out" "^ +33 \|" "bench table row"
expect 0 bench --sizes 8,33 --repeats 1 --csv && has "$out" "^n,lane,ms,min_ms,gflops,repeats,check,picked,best_lane,best_ms,ratio,predicted_ms$" "bench --csv header" &&
  has "$out" "^33,cpu," "bench --csv row"
expect 0 bench --sizes 17 --repeats 2 --json && has "$out" "\"mismatches\":[[:space:]]*0" "bench --json mismatches" &&
  has "$out" "\"lane\":[[:space:]]*\"cpu\"" "bench --json cpu point"
expect 0 bench --sizes 24 --repeats 1 --contract fp32 --lanes cpu && has "$out" "contract fp32" "bench fp32"
# A budget far below one run still measures the first point, then skips the larger ones and says so.
expect 0 bench --sizes 64,128 --repeats 1 --max-seconds 0.000001 --lanes cpu && has "$out" "cpu: 1 size skipped: the n = 64 point took" "bench budget"

# routing with one lane: nothing to choose, so no routed column (cli_ux_test.sh checks two lanes).
expect 0 bench --sizes 8 --repeats 1 --lanes cpu && ! grep -q "routed/best" "$out" && has "$out" "with one lane there is nothing to choose" "bench: one lane, no routed column" ||
  fail "bench with one lane shows a routed column"
expect 0 bench --sizes 8 --repeats 1 --lanes cpu --no-route && ! grep -q "routed" "$out" || fail "bench --no-route still routes"

# calibrate: progress on stderr, the fitted lines, the cache written where XDG_CACHE_HOME says.
expect 0 calibrate --lanes cpu && has "$out" "cpu +matmul.exact" "calibrate: the exact matmul line" &&
  has "$err" "calibrate cpu: matmul exact n=" "calibrate: progress" && [ -s "$cache/weft/calibration.json" ] ||
  fail "calibrate wrote no cache"
expect 0 calibrate --lanes cpu --quiet --json && has "$out" "\"line\":[[:space:]]*\"matmul.exact\"" "calibrate --json"

# route: the pick, the explanation, JSON; usage errors for a bad op or shape.
expect 0 route matmul 64 --lanes cpu && has "$out" "^cpu$" "route prints the lane"
expect 0 route --explain matmul 2x64x32x16 --lanes cpu && has "$out" "<- chosen" "route --explain marks the choice" &&
  has "$out" "matmul \\[2,64,32\\]\\.\\[32,16\\]" "route --explain names the shape" && has "$out" "alpha" "route --explain splits the cost"
expect 0 route --json relu 100x10 --lanes cpu && has "$out" "\"chosen\":[[:space:]]*\"cpu\"" "route --json"
expect 1 route matmul 64 --lanes cpu --contract bf16 && has "$err" "no lane" "route: no lane for bf16 on the cpu"
expect 2 route nosuch 64 && has "$err" "unknown op 'nosuch'" "route: unknown op"
expect 2 route matmul 0 && has "$err" "shape '0'" "route: bad shape"
expect 2 route matmul && has "$err" "wants an op and a shape" "route: missing shape"
# `weft route --help` names the ops it explains: the others (the transformer ops, whose cost no one
# [rows, cols] describes) are refused, not explained from a made-up shape. A dimension past the limit says the limit.
expect 2 route layernorm 4x4 && has "$err" "OP is one of matmul, add" "route: a transformer op is refused with the list"
expect 2 route matmul_acc 64 && has "$err" "OP is one of matmul, add" "route: matmul_acc is refused with the list"
expect 2 route matmul 99999999999 && has "$err" "from 1 to 2147483648" "route: a dimension past the limit names it"
# An absurd shape's prediction keeps its unit (it once overflowed the cell and lost the " s").
expect 0 route --explain matmul 2147483648x2147483648x2147483648x2147483648 --lanes cpu &&
  has "$out" "^  cpu +0 +0 +[0-9.]+ us +[0-9.e+]+ s +[0-9.e+]+ s" "route --explain: huge times in seconds"

if [ "$failures" -ne 0 ]; then
  echo "$failures CLI check(s) failed"
  exit 1
fi
echo "all CLI checks passed"
