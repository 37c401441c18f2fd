#!/bin/sh
# gpt_test.sh - a smoke test of `weft gpt`: help and usage errors; 3 training steps of a small model on a
# text the test writes (a progress line per step, a checkpoint, a fingerprint, JSON); a run stopped at
# step 2 and resumed to step 3 ends with the uninterrupted run's fingerprint; a truncated checkpoint is
# refused; Ctrl-C stops a run cleanly with a checkpoint; generation from the checkpoint (greedy: the same
# tokens twice) and from random weights. Usage: gpt_test.sh path/to/weft
weft=${1:?usage: gpt_test.sh path/to/weft}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=$tmp/out err=$tmp/err
export XDG_CACHE_HOME="$tmp/cache"
failures=0

fail() {
  echo "FAIL: $*"
  echo "  stdout:"; sed 's/^/    /' "$out"
  echo "  stderr:"; sed 's/^/    /' "$err"
  failures=$((failures + 1))
}
expect() {
  want=$1; shift
  "$weft" gpt "$@" >"$out" 2>"$err"
  got=$?
  [ "$got" -eq "$want" ] || fail "weft gpt $* exited $got, expected $want"
  [ "$got" -eq "$want" ]
}
has() { grep -Eq -- "$2" "$1" || fail "$3: no line matches '$2'"; }
fingerprint() { sed -n 's/^weights fingerprint \([0-9a-f]\{16\}\) .*/\1/p' "$out"; }

i=0
while [ $i -lt 100 ]; do echo "the fabric weaves the same text on every lane, line $i."; i=$((i + 1)); done >"$tmp/text.txt"
small="--data $tmp/text.txt --layers 2 --channels 64 --heads 4 --context 32 --seq 16 --batch 2 --lanes cpu"

expect 0 --help && has "$out" "^Usage: weft gpt train" "weft gpt --help"
if "$weft" --help >"$out" 2>"$err"; then has "$out" "^  gpt " "weft --help lists gpt"; else fail "weft --help failed"; fi
expect 2 && has "$err" "wants a subcommand" "gpt without a subcommand"
expect 2 fly && has "$err" "unknown subcommand 'fly'" "gpt: bad subcommand"
expect 2 train --channels 65 --heads 4 && has "$err" "heads must divide" "gpt: heads that do not divide"
expect 2 train --lr 0 && has "$err" "--lr wants a number" "gpt: zero learning rate"
expect 1 train --data "$tmp/nosuch.txt" && has "$err" "cannot open the data '$tmp/nosuch.txt'" "gpt: missing data"

# shellcheck disable=SC2086 # the words are the options
expect 0 train $small --steps 3 --checkpoint "$tmp/a.ckpt" && has "$out" "^step +3/3 loss [0-9.]+ val [0-9.]+ .* tok/s .* ms \| ops: cpu [0-9]+" "gpt: progress line" &&
  has "$out" "^checkpoint at step 3 written to" "gpt: checkpoint line"
full=$(fingerprint)
[ -n "$full" ] || fail "no fingerprint"
# shellcheck disable=SC2086
expect 0 train $small --steps 3 --stop-at 2 --checkpoint "$tmp/b.ckpt" &&
  expect 0 train $small --steps 3 --resume "$tmp/b.ckpt" --checkpoint "$tmp/c.ckpt"
[ "$(fingerprint)" = "$full" ] || fail "stopped at 2 and resumed: fingerprint $(fingerprint), uninterrupted $full"
# shellcheck disable=SC2086
expect 0 train $small --steps 2 --json --checkpoint "$tmp/j.ckpt" && has "$out" "\"fingerprint\":[[:space:]]*\"[0-9a-f]{16}\"" "gpt train --json" &&
  has "$out" "\"val_loss\":" "gpt train --json val_loss"
head -c 500 "$tmp/a.ckpt" >"$tmp/cut.ckpt"
# shellcheck disable=SC2086
expect 1 train $small --resume "$tmp/cut.ckpt" && has "$err" "cut.ckpt' is truncated" "gpt: truncated checkpoint"
expect 1 generate --checkpoint "$tmp/text.txt" && has "$err" "not a weft gpt checkpoint" "gpt: not a checkpoint"

# Ctrl-C: stops after the step in progress and writes a checkpoint
# shellcheck disable=SC2086
"$weft" gpt train $small --steps 100000000 --checkpoint "$tmp/int.ckpt" >"$out" 2>"$err" &
pid=$!
sleep 2
kill -INT $pid
wait $pid
rc=$?
[ "$rc" -eq 0 ] || fail "an interrupted run exited $rc"
has "$out" "^interrupted: checkpoint at step [0-9]+ written to" "gpt: Ctrl-C writes a checkpoint"

expect 0 generate --checkpoint "$tmp/a.ckpt" --prompt "the fab" --tokens 8 --temperature 0 --lanes cpu &&
  has "$out" "^tokens:( [0-9]+){8}$" "gpt generate: tokens" && has "$out" "decode [0-9.]+ tokens/s" "gpt generate: tokens/s"
first=$(grep '^tokens:' "$out")
expect 0 generate --checkpoint "$tmp/a.ckpt" --prompt "the fab" --tokens 8 --temperature 0
[ "$(grep '^tokens:' "$out")" = "$first" ] || fail "greedy tokens differ between cpu and routed"
expect 0 generate --seed 3 --layers 1 --channels 32 --heads 2 --context 16 --prompt "hi" --tokens 4 --json &&
  has "$out" "\"decode_tokens_per_s\":" "gpt generate --json"
expect 2 generate --context 8 --prompt "too long a prompt" && has "$err" "must fit the context" "gpt: prompt too long"
# A model that cannot fit this machine's memory is refused with its size, before anything is allocated (it
# once exited 1 with no word at all).
expect 1 generate --layers 1024 --channels 65536 --heads 1 --context 2 --tokens 1 --lanes cpu &&
  has "$err" "needs about [0-9.]+ GiB of memory; this machine has" "gpt: a model too large for the machine"
# --seq past the context is a usage error that says so (it was worded as too little text).
expect 2 train --data "$tmp/text.txt" --layers 1 --channels 16 --heads 2 --context 8 --seq 16 --lanes cpu &&
  has "$err" "--seq 16 is longer than the model's context of 8 tokens" "gpt: --seq past the context"

if [ "$failures" -ne 0 ]; then
  echo "$failures gpt check(s) failed"
  exit 1
fi
echo "all gpt checks passed"
