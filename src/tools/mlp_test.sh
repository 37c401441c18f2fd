#!/bin/sh
# mlp_test.sh - checks `weft mlp`: under the exact contract, training on the CPU lane only, on the Vulkan
# lane only, routed over every lane and pinned round-robin across lanes ends with the same weights bit for
# bit (the same fingerprint); a default run on the CPU reaches 95% held-out accuracy; a missing or malformed
# data file fails with a message that says what to do; usage errors exit 2. Exits 77 (skipped) when
# scikit-learn's digits are not installed. Usage: mlp_test.sh path/to/weft
weft=${1:?usage: mlp_test.sh path/to/weft}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=$tmp/out err=$tmp/err
# routing calibrates the lanes and writes the cache: never the user's own
export XDG_CACHE_HOME="$tmp/cache"
failures=0

fail() {
  echo "FAIL: $*"
  echo "  stdout:"; sed 's/^/    /' "$out"
  echo "  stderr:"; sed 's/^/    /' "$err"
  failures=$((failures + 1))
}

# expect STATUS ARGS...: runs weft mlp ARGS, checks the exit status.
expect() {
  want=$1; shift
  "$weft" mlp "$@" >"$out" 2>"$err"
  got=$?
  [ "$got" -eq "$want" ] || fail "weft mlp $* exited $got, expected $want"
  [ "$got" -eq "$want" ]
}

has() {
  grep -Eq -- "$2" "$1" || fail "$3: no line matches '$2'"
}

fingerprint() {
  sed -n 's/^weights fingerprint \([0-9a-f]\{16\}\) .*/\1/p' "$out"
}

# The data set comes with Debian's python3-sklearn; without it there is nothing to train on.
if ! "$weft" mlp --lanes cpu --epochs 1 --limit 10 >"$out" 2>"$err"; then
  if grep -q "cannot open the digits data set" "$err"; then
    echo "SKIP: scikit-learn's digits are not installed (Debian: python3-sklearn):"
    sed 's/^/  /' "$err"
    exit 77
  fi
  fail "a one-epoch run on 10 digits failed"
fi

# Help and usage errors.
expect 0 --help && has "$out" "^Usage: weft mlp" "weft mlp --help"
if "$weft" help mlp >"$out" 2>"$err"; then has "$out" "^Usage: weft mlp" "weft help mlp"; else fail "weft help mlp failed"; fi
if "$weft" --help >"$out" 2>"$err"; then has "$out" "^  mlp " "weft --help lists mlp"; else fail "weft --help failed"; fi
expect 2 --place nowhere && has "$err" "--place wants auto, round-robin, layers or layers-rr" "mlp: bad --place"
expect 2 --lr 0 && has "$err" "--lr wants a learning rate above 0" "mlp: zero learning rate"
expect 2 --contract bf16 && has "$err" "--contract wants exact or fp32" "mlp: a tensor-unit contract"
expect 2 --limit 5 && has "$err" "--limit wants a whole number from 10" "mlp: too few samples"
expect 2 --hidden && has "$err" "needs a value" "mlp: missing value"
expect 2 extra && has "$err" "takes no arguments" "mlp: stray argument"

# A missing data file: exit 1, naming the file and the package that ships it.
expect 1 --data "$tmp/nosuch/digits.csv.gz" --lanes cpu &&
  has "$err" "cannot open the digits data set '$tmp/nosuch/digits.csv.gz'" "mlp: missing file named" &&
  has "$err" "python3-sklearn" "mlp: missing file names the package"
# A file that is not the digits: exit 1 with the line and what is wrong with it.
printf '1,2,3\n' >"$tmp/short.csv"
expect 1 --data "$tmp/short.csv" --lanes cpu && has "$err" "short.csv:1: 3 fields, expected 65" "mlp: a short row"
data=/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz
if [ -r "$data" ]; then
  # a plain (not gzipped) copy of the first 200 rows reads the same; a label of 12 is refused
  gzip -dc "$data" | head -n 200 >"$tmp/digits.csv"
  expect 0 --data "$tmp/digits.csv" --lanes cpu --epochs 1 && has "$out" "^digits: 200 samples" "mlp: a plain csv"
  sed '3s/,[0-9]*$/,12/' "$tmp/digits.csv" >"$tmp/badlabel.csv"
  expect 1 --data "$tmp/badlabel.csv" --lanes cpu && has "$err" "badlabel.csv:3: field 65 is 12, outside 0..9" "mlp: bad label"
  # a truncated gzip stream is an error, not a shorter data set
  head -c 20000 "$data" >"$tmp/cut.csv.gz"
  expect 1 --data "$tmp/cut.csv.gz" --lanes cpu && has "$err" "cannot read .*cut.csv.gz" "mlp: truncated gzip"
fi

# The same weights bit for bit wherever the ops ran (exact contract). Small, for lavapipe's speed.
small="--hidden 32 --epochs 2 --limit 300 --seed 7"
# shellcheck disable=SC2086 # the words are the options
expect 0 $small --lanes cpu && has "$out" "^epoch  2/2 " "mlp: cpu progress line"
cpu_fp=$(fingerprint)
[ -n "$cpu_fp" ] || fail "no fingerprint from the cpu run"
if "$weft" devices --lanes vulkan >/dev/null 2>&1; then
  # shellcheck disable=SC2086
  expect 0 $small --lanes vulkan && has "$out" "^  vulkan:0 +[0-9]" "mlp: the vulkan row of the table"
  vk_fp=$(fingerprint)
  [ "$vk_fp" = "$cpu_fp" ] || fail "vulkan-only weights $vk_fp differ from cpu-only $cpu_fp"
  # pinned round-robin: tensors cross between the CPU and Vulkan at every op
  # shellcheck disable=SC2086
  expect 0 $small --place round-robin && has "$out" "^  cpu +[1-9]" "mlp: round-robin ran ops on the cpu" &&
    has "$out" "^  vulkan:0 +[1-9]" "mlp: round-robin ran ops on vulkan"
  rr_fp=$(fingerprint)
  [ "$rr_fp" = "$cpu_fp" ] || fail "round-robin weights $rr_fp differ from cpu-only $cpu_fp"
  # a pipeline: layer 1 on the cpu, layer 2 on vulkan, activations crossing through the host; with a trace
  expect 0 $small --place layers-rr && has "$out" "^layer 1 on cpu" "mlp: layers-rr puts layer 1 on the cpu" &&
    has "$out" "^layer 2 on vulkan:0" "mlp: layers-rr puts layer 2 on vulkan" &&
    has "$out" "^pipeline trace" "mlp: the pipeline trace"
  lr_fp=$(fingerprint)
  [ "$lr_fp" = "$cpu_fp" ] || fail "layer-pipeline weights $lr_fp differ from cpu-only $cpu_fp"
else
  echo "note: no vulkan lane here, so the vulkan-only and round-robin runs are skipped:"
  "$weft" devices 2>&1 | grep -E "^  vulkan" | sed 's/^/  /'
fi
# shellcheck disable=SC2086
expect 0 $small && has "$out" "ops routed over cpu" "mlp: routed over every lane"
routed_fp=$(fingerprint)
[ "$routed_fp" = "$cpu_fp" ] || fail "routed weights $routed_fp differ from cpu-only $cpu_fp"
# another seed gives other weights: the fingerprint is not a constant
# shellcheck disable=SC2086
expect 0 $small --lanes cpu --seed 8
[ "$(fingerprint)" != "$cpu_fp" ] || fail "seeds 7 and 8 gave the same fingerprint $cpu_fp"

# The default run on the CPU: >= 95% of the held-out digits, and the table of where the ops ran.
expect 0 --lanes cpu && has "$out" "^epoch 30/30 " "mlp: 30 epochs by default" &&
  has "$out" "^  cpu +[0-9]+ .* measured " "mlp: the cpu row, measured"
acc=$(sed -n 's/^held-out accuracy \([0-9.]*\)% .*/\1/p' "$out")
if [ -z "$acc" ] || ! awk -v a="$acc" 'BEGIN { exit !(a >= 95) }'; then
  fail "held-out accuracy '${acc}' is below 95%"
else
  echo "default run on the cpu: held-out accuracy $acc%"
fi

# fp32 runs too (its bits may differ from exact), and JSON comes out.
expect 0 --lanes cpu --contract fp32 --epochs 1 --limit 200 && has "$out" "contract fp32" "mlp: fp32 contract"
expect 0 --lanes cpu --epochs 1 --limit 100 --json && has "$out" "\"fingerprint\":[[:space:]]*\"[0-9a-f]{16}\"" "mlp --json" &&
  has "$out" "\"heldout_accuracy\":" "mlp --json accuracy" && has "$out" "\"seconds_measured\":[[:space:]]*true" "mlp --json lanes"

if [ "$failures" -ne 0 ]; then
  echo "$failures mlp check(s) failed"
  exit 1
fi
echo "all mlp checks passed"
