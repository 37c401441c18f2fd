#!/bin/sh
# cli_doc_claims.sh - what `weft --help`, every `weft <cmd> --help`, README.md and docs/DESIGN.md say about
# the CLI, held to the letter: every command's help is reachable the four documented ways and is the same
# text; every option a help text or a `weft <cmd> ...` span of the docs names is one the command takes
# (and the docs name none its help leaves out); options match whole, never by a prefix; the exit status is
# 0 on success, 1 when the command ran and failed, 2 for a usage error, with a message naming the option;
# hostile values (missing, empty, not a number, negative, zero, huge) are usage errors; gpt's options of one
# subcommand are refused by the other, and a shape that differs from a checkpoint's is refused; the files
# the docs say are written (the calibration cache, a checkpoint of the documented layout) are written, and
# the commands documented to write nothing write nothing.
# Usage: cli_doc_claims.sh path/to/weft path/to/source-root
weft=${1:?usage: cli_doc_claims.sh path/to/weft path/to/source-root}
root=${2:?usage: cli_doc_claims.sh path/to/weft path/to/source-root}
weft=$(cd "$(dirname "$weft")" && pwd)/$(basename "$weft") # some checks run in a folder of their own
tmp=$(mktemp -d)
out=$tmp/out err=$tmp/err
trap 'rm -rf "$tmp"' EXIT
export XDG_CACHE_HOME="$tmp/cache"
unset WEFT_REMOTE WEFT_BROWSER WEFT_PLUGIN_PATH
failures=0
checks=0

fail() {
  echo "FAIL: $*"
  echo "  stdout:"; head -c 2000 "$out" | sed 's/^/    /'
  echo "  stderr:"; head -c 2000 "$err" | sed 's/^/    /'
  failures=$((failures + 1))
}
# expect STATUS ARGS...: runs weft ARGS (60 s at most), checks the exit status.
expect() {
  want=$1; shift
  checks=$((checks + 1))
  timeout 60 "$weft" "$@" >"$out" 2>"$err" </dev/null
  got=$?
  [ "$got" -eq "$want" ] || fail "weft $* exited $got, expected $want"
  [ "$got" -eq "$want" ]
}
has() { grep -Eq -- "$2" "$1" || fail "$3: no line matches '$2'"; }
hasnt() { ! grep -Eq -- "$2" "$1" || fail "$3: a line matches '$2'"; }
# usage PATTERN ARGS...: weft ARGS is a usage error (exit 2) whose message matches PATTERN, with nothing on
# stdout.
usage() {
  pat=$1
  shift
  expect 2 "$@" && has "$err" "$pat" "weft $*"
  if [ -s "$out" ]; then fail "weft $*: a usage error wrote to stdout"; fi
}

commands=$("$weft" --help | sed -n 's/^  \([a-z]\+\) .*/\1/p' | grep -v '^help$')
[ -n "$commands" ] || { echo "FAIL: weft --help lists no commands"; exit 1; }

# --- every command's help, four ways, one text ------------------------------------------------------
for c in $commands; do
  expect 0 "$c" --help && has "$out" "^Usage: weft $c" "weft $c --help" && cp "$out" "$tmp/help_$c"
  for way in "help $c" "$c -h" "--help $c"; do
    # shellcheck disable=SC2086 # the words are the arguments
    expect 0 $way && { cmp -s "$out" "$tmp/help_$c" || fail "weft $way differs from weft $c --help"; }
  done
done
expect 0 --help && cp "$out" "$tmp/main"
for way in "-h" "help" "help help" "help --help" "help -h"; do
  # shellcheck disable=SC2086
  expect 0 $way && { cmp -s "$out" "$tmp/main" || fail "weft $way differs from weft --help"; }
done
has "$tmp/main" "Exit status: 0 success, 1 the command ran and failed, 2 usage error" "weft --help: the exit statuses"
expect 0 --version && has "$out" "^weft [0-9]+\.[0-9]+\.[0-9]+$" "weft --version"
usage "--version takes no arguments" --version extra
usage "help takes at most one command name" help devices bench
usage "unknown command 'nosuch'" --help nosuch
usage "^Usage: weft <command>"
usage "did you mean 'devices'" devics

# --- every option a help names is one the command takes ----------------------------------------------
# `weft CMD --opt v1 v2` parses options and stray words before it runs anything: whether --opt takes a
# value or not, it ends in a usage error, and the error must not be that --opt is unknown.
for c in $commands; do
  opts=$(grep -o -- '--[a-z][a-z0-9-]*' "$tmp/help_$c" | sort -u)
  [ -n "$opts" ] || fail "weft $c --help names no options"
  for o in $opts; do
    [ "$o" = "--help" ] && continue # help wins over anything after it
    if [ "$c" = gpt ]; then runs="gpt train|gpt generate"; else runs=$c; fi
    IFS='|'
    for r in $runs; do
      unset IFS
      # shellcheck disable=SC2086
      expect 2 $r "$o" stray-one stray-two && hasnt "$err" "unknown option" "weft $r $o (named by weft $c --help)"
    done
    unset IFS
  done
done

# --- every option the docs give a command is in its --help --------------------------------------------
# `weft CMD ...` spans in backticks and command lines in code blocks of README.md and docs/DESIGN.md.
for doc in "$root/README.md" "$root/docs/DESIGN.md"; do
  {
    # inline spans, joined across line breaks
    tr '\n' ' ' <"$doc" | sed 's/```[^`]*```//g' | grep -o '`[^`]*weft [a-z]\+[^`]*`'
    # lines of fenced code blocks
    awk '/^```/ { inblock = !inblock; next } inblock' "$doc" | grep -o 'weft [a-z]\+ .*' | sed 's/#.*//'
  } | while IFS= read -r span; do
    c=$(printf '%s\n' "$span" | sed -n 's/.*weft \([a-z]\+\).*/\1/p')
    [ -f "$tmp/help_$c" ] || continue
    for o in $(printf '%s\n' "$span" | sed 's/.*weft [a-z]\+//' | grep -o -- '--[a-z][a-z0-9-]*'); do
      [ "$o" = "--help" ] && continue
      grep -q -- "$o\\b" "$tmp/help_$c" || echo "$(basename "$doc"): '$span' names $o, which weft $c --help does not"
    done
  done
done >"$tmp/doc_opts"
checks=$((checks + 1))
[ -s "$tmp/doc_opts" ] && { echo "FAIL: options in the docs missing from --help:"; sed 's/^/  /' "$tmp/doc_opts"; failures=$((failures + 1)); }
# ... and the README's list of each command's options carries every option of its help (devices, bench,
# calibrate, route, mlp: their whole synopsis is in the README)
for c in devices bench calibrate route mlp; do
  span=$(tr '\n' ' ' <"$root/README.md" | grep -o "\`weft $c \[[^\`]*\`" | head -n 1)
  [ -n "$span" ] || { fail "README.md has no synopsis of weft $c"; continue; }
  for o in $(sed -n '1,/^$/p' "$tmp/help_$c" | grep -o -- '--[a-z][a-z0-9-]*' | sort -u); do
    [ "$o" = "--help" ] && continue
    checks=$((checks + 1))
    printf '%s\n' "$span" | grep -q -- "$o\\b" || fail "README.md's synopsis of weft $c lacks $o (its --help has it)"
  done
done

# --- options match whole ---------------------------------------------------------------------------
usage "unknown option '--js'; did you mean '--json'" devices --js
usage "unknown option '--lane'; did you mean '--lanes'" devices --lane cpu
usage "unknown option '--size'" bench --size 8
usage "option '--json' takes no value" devices --json=yes
usage "option '--quiet' takes no value" calibrate --quiet=1
usage "unknown option '--nosuch'" devices --nosuch
usage "unknown option '-x'" devices -x
usage "option '--steps' needs a value" gpt train --steps
# the value of an option may look like an option: it is still the value
expect 1 devices --lanes --json && has "$err" "cannot open the fabric" "devices --lanes --json: '--json' is the lane filter"

# --- hostile values: a usage error naming the option ------------------------------------------------
for v in "" abc -1 0 1.5 1e3 99999999999999999999; do
  usage "--cpu-threads wants a whole number" devices --cpu-threads "$v"
  usage "--repeats wants a whole number" bench --repeats "$v"
  usage "--epochs wants a whole number" mlp --epochs "$v"
  usage "--hidden wants a whole number" mlp --hidden "$v"
  usage "--batch wants a whole number" mlp --batch "$v"
  usage "--steps wants a whole number" gpt train --steps "$v"
  usage "--batch wants a whole number" gpt train --batch "$v"
  usage "--tokens wants a whole number" gpt generate --tokens "$v"
  usage "--layers wants a whole number" gpt train --layers "$v"
  usage "--max-clients wants a whole number" worker --max-clients "$v"
  usage "--slots wants a whole number" serve --slots "$v"
done
for v in "" abc -1 0 nan inf 1e999; do
  usage "--max-seconds wants a number of seconds above 0" bench --max-seconds "$v"
  usage "--lr wants a learning rate above 0" mlp --lr "$v"
  usage "--lr wants a number" gpt train --lr "$v"
done
for o in --clip --temperature --min-lr --weight-decay; do
  for v in nan inf -inf; do
    case $o in --temperature) sub=generate ;; *) sub=train ;; esac
    usage "$o wants a number" gpt $sub $o $v
  done
done
usage "--lr wants a learning rate above 0 and at most 1e6" mlp --lr 1e30
usage "--sizes wants sizes" bench --sizes 8,,16
usage "--sizes wants sizes from 1 to 16384" bench --sizes 16385
usage "shape '0'" route matmul 0
usage "a matmul shape is N, MxKxN or BxMxKxN" route matmul 2x3
usage "unknown op 'nosuch'" route nosuch 64
usage "--port wants a whole number from 0 to 65535" serve --port 65536
usage "HOST:PORT" worker --listen nowhere
usage "--max-streams wants a whole number from 1 to 64" worker --max-streams 65
usage "--place wants auto, round-robin, layers or layers-rr" mlp --place nowhere
for c in devices bench calibrate route mlp worker; do
  usage "--lanes wants lane kinds or names" "$c" --lanes ""
done
usage "--lanes wants lane kinds or names" gpt train --lanes ,
usage "--contract wants one of exact" bench --contract nope
usage "--json and --csv exclude each other" bench --json --csv
usage "--tls-cert and --tls-key go together" serve --tls-cert x.pem
usage "--tls needs --secret-file" worker --tls
# lanes that match nothing: the command ran and failed (1), and it says which lanes there are
expect 1 devices --lanes nosuch && has "$err" "the lanes here are: cpu" "devices --lanes nosuch lists the lanes"
# ... and so does one word of several (it was dropped without a word while the rest opened)
for c in devices "route matmul 64" "bench --sizes 8 --repeats 1 --no-route" "worker --listen 127.0.0.1:0"; do
  # shellcheck disable=SC2086
  expect 1 $c --lanes cpu,vulcan && has "$err" "--lanes names 'vulcan', which is no lane kind or name here" "weft $c --lanes cpu,vulcan" &&
    has "$err" "'vulcan': did you mean 'vulkan'" "weft $c --lanes cpu,vulcan: the likely lane"
done
# a documented kind this machine or build lacks is no typo: it is listed as absent
expect 0 devices --lanes cpu,cuda:7,opencl && has "$out" "^cpu$" "devices --lanes cpu,cuda:7,opencl opens the cpu"

# --- files that cannot be read ------------------------------------------------------------------------
printf 'short\n' >"$tmp/short.key"
head -c 3000 /dev/urandom >"$tmp/garbage"
expect 1 worker --secret-file "$tmp/nosuch.key" && has "$err" "cannot open the secret file .*: No such file" "worker: a missing secret file says why"
expect 1 worker --secret-file "$tmp" && has "$err" "cannot read the secret file .*: Is a directory" "worker: a folder as the secret file says why"
expect 1 worker --secret-file "$tmp/short.key" && has "$err" "is 5 bytes; use at least 16" "worker: a short secret"
expect 1 mlp --data "$tmp/garbage" --lanes cpu && has "$err" "garbage" "mlp: garbage data names the file"
expect 1 mlp --data "$tmp" --lanes cpu && has "$err" "cannot read" "mlp: a folder as data"
expect 1 gpt generate --checkpoint "$tmp/garbage" --lanes cpu && has "$err" "not a weft gpt checkpoint" "gpt: garbage checkpoint"
expect 1 gpt generate --weights "$tmp/garbage" --lanes cpu && has "$err" "neither an llm.c checkpoint" "gpt: garbage weights"
expect 1 gpt generate --bpe "$tmp" --lanes cpu && has "$err" "encoder.json" "gpt: a BPE folder without its files"

# --- gpt: one subcommand's options are not the other's -------------------------------------------------
for o in "--data x" "--steps 3" "--batch 2" "--seq 8" "--lr 0.01" "--warmup 1" "--min-lr 0.5" "--weight-decay 0" \
  "--clip 0" "--val-every 0" "--checkpoint-every 1" "--resume x" "--stop-at 1" "--init-from x" "--mpi"; do
  # shellcheck disable=SC2086
  usage "is for 'gpt train'|is for train|train starts from weights" gpt generate $o
done
for o in "--prompt x" "--tokens 3" "--temperature 0" "--top-k 3" "--explain-step 1" "--weights x"; do
  # shellcheck disable=SC2086
  usage "is for 'gpt generate'|is for generate|generate reads weights" gpt train $o
done
usage "--explain-step 3: --tokens 3 makes 2 decode steps" gpt generate --tokens 3 --explain-step 3
usage "--tokens 1 makes 0 decode steps" gpt generate --tokens 1 --explain-step 1
usage "--bpe DIR or --encoder and --vocab-bpe, not both" gpt generate --bpe d --encoder e --vocab-bpe v
usage "--encoder and --vocab-bpe go together" gpt generate --encoder e

# --- files written where the docs say -------------------------------------------------------------------
i=0
while [ $i -lt 300 ]; do echo "every lane weaves the same text, line $i."; i=$((i + 1)); done >"$tmp/text.txt"
shape="--layers 1 --channels 16 --heads 2 --context 16"
small="--data $tmp/text.txt $shape --seq 8 --batch 2 --lanes cpu"
mkdir "$tmp/run"
# the default checkpoint is gpt.ckpt in the working folder, in the documented layout: "WEFTGPT1", u32 1,
# i32 L C NH V maxT, i64 step, u64 state, u64 n, 3n f32, u64 checksum
# shellcheck disable=SC2086
(cd "$tmp/run" && timeout 60 "$weft" gpt train $small --steps 2 >"$out" 2>"$err")
checks=$((checks + 1))
if [ -f "$tmp/run/gpt.ckpt" ]; then
  magic=$(head -c 8 "$tmp/run/gpt.ckpt")
  [ "$magic" = "WEFTGPT1" ] || fail "gpt.ckpt starts '$magic', not WEFTGPT1"
  # the ints after the magic: version 1, L 1, C 16, NH 2, V 256, maxT 16, step 2
  words=$(od -An -tu4 -j8 -N32 "$tmp/run/gpt.ckpt" | tr -s ' \n' ' ' | sed 's/^ //;s/ $//')
  [ "$words" = "1 1 16 2 256 16 2 0" ] || fail "gpt.ckpt header is '$words', expected '1 1 16 2 256 16 2 0'"
  n=$(od -An -tu8 -j48 -N8 "$tmp/run/gpt.ckpt" | tr -d ' ')
  size=$(wc -c <"$tmp/run/gpt.ckpt")
  [ "$size" -eq $((56 + 12 * n + 8)) ] || fail "gpt.ckpt is $size bytes; 56 + 12 * $n + 8 expected"
  has "$out" "^checkpoint at step 2 written to gpt.ckpt" "gpt train says where the checkpoint went"
else
  fail "gpt train without --checkpoint wrote no gpt.ckpt in the working folder"
fi
# a checkpoint's shape is its own: a differing shape flag is refused, an agreeing one is fine
usage "--layers 2, but the checkpoint .* has 1" gpt generate --checkpoint "$tmp/run/gpt.ckpt" --layers 2 --tokens 2 --lanes cpu
usage "--heads 4, but the checkpoint .* has 2" gpt generate --checkpoint "$tmp/run/gpt.ckpt" --heads 4 --tokens 2 --lanes cpu
# shellcheck disable=SC2086
usage "--context 32, but the checkpoint .* has 16" gpt train $small --context 32 --steps 3 --resume "$tmp/run/gpt.ckpt" --checkpoint "$tmp/r.ckpt"
# resuming a checkpoint already at --steps trains nothing, and says so
# shellcheck disable=SC2086
expect 0 gpt train $small --steps 2 --resume "$tmp/run/gpt.ckpt" --checkpoint "$tmp/r.ckpt" &&
  has "$err" "checkpoint is at step 2, already at --steps 2: nothing to train" "gpt train --resume at --steps"
# shellcheck disable=SC2086
expect 0 gpt generate --checkpoint "$tmp/run/gpt.ckpt" $shape --tokens 3 --temperature 0 --lanes cpu &&
  has "$out" "^tokens:( [0-9]+){3}$" "gpt generate with the checkpoint's own shape"
# a batch whose activations cannot fit this machine is refused with its size (it once ran on, allocating)
expect 1 gpt train --data "$tmp/text.txt" $shape --context 1024 --seq 1024 --batch 65536 --steps 1 --lanes cpu \
  --checkpoint "$tmp/big.ckpt" && has "$err" "a batch of 65536 x 1024 tokens .* needs about [0-9.]+ GiB of activations" "gpt: a batch too large"
# a checkpoint that cannot be written is a failure that says which
# shellcheck disable=SC2086
expect 1 gpt train $small --steps 1 --checkpoint "$tmp/no/such/dir/c.ckpt" && has "$err" "cannot write the checkpoint" "gpt: unwritable checkpoint"

# devices and bench --no-route measure nothing and write nothing; calibrate writes the cache where
# XDG_CACHE_HOME says, else under ~/.cache/weft/
export XDG_CACHE_HOME="$tmp/cache2"
expect 0 devices && [ ! -e "$XDG_CACHE_HOME/weft" ] || fail "weft devices wrote a weft cache"
expect 0 bench --sizes 8 --repeats 1 --no-route --lanes cpu && [ ! -e "$XDG_CACHE_HOME/weft" ] || fail "weft bench --no-route wrote a weft cache"
expect 0 calibrate --lanes cpu --quiet && [ -s "$XDG_CACHE_HOME/weft/calibration.json" ] ||
  fail "weft calibrate wrote no $XDG_CACHE_HOME/weft/calibration.json"
has "$out" "cache: $XDG_CACHE_HOME/weft/calibration.json" "calibrate names the cache it wrote"
mkdir "$tmp/home"
(unset XDG_CACHE_HOME; HOME="$tmp/home" timeout 60 "$weft" calibrate --lanes cpu --quiet >"$out" 2>"$err")
checks=$((checks + 1))
[ -s "$tmp/home/.cache/weft/calibration.json" ] || fail "without XDG_CACHE_HOME, calibrate wrote no ~/.cache/weft/calibration.json"
# a cache that is garbage is said and measured again, not a failure
printf '{not json' >"$XDG_CACHE_HOME/weft/calibration.json"
expect 0 route matmul 64 --lanes cpu && has "$out" "^cpu$" "route with a garbage cache"

# WEFT_* variables the docs name, with values that are not what they take: said, and the default used
WEFT_COPY_THREADS=0 expect 0 devices --lanes cpu && has "$err" "WEFT_COPY_THREADS='0' is not a whole number from 1 to 64" "a zero WEFT_COPY_THREADS is said"
WEFT_REMOTE=127.0.0.1:1 WEFT_REMOTE_TIMEOUT_MS=-5 expect 0 devices --lanes cpu,remote &&
  has "$out" "WEFT_REMOTE_TIMEOUT_MS is '-5'" "a negative WEFT_REMOTE_TIMEOUT_MS is said"
WEFT_BROWSER_SLOTS=0 expect 1 serve --port 0 && has "$err" "WEFT_BROWSER_SLOTS is '0'; use 1 to 64" "a zero WEFT_BROWSER_SLOTS is said"
WEFT_PLUGIN_PATH="$tmp/garbage" expect 0 devices && has "$out" "^  plugin:garbage +[^ ]" "a garbage plugin is absent with the reason"
for v in abc 0 -5 86401 12s; do
  WEFT_PLUGIN_TIMEOUT=$v WEFT_PLUGIN_PATH="$tmp/garbage" expect 0 devices &&
    has "$out" "WEFT_PLUGIN_TIMEOUT is '$v'; it takes a whole number of seconds from 1 to 86400" "WEFT_PLUGIN_TIMEOUT=$v is said"
done

if [ "$failures" -ne 0 ]; then
  echo "$failures of $checks CLI documentation check(s) failed"
  exit 1
fi
echo "all $checks CLI documentation checks passed"
