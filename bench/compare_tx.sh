#!/bin/sh
# The CPU lane's transformer ops (exact) against PyTorch CPU, in one run: bench_tx (weft) and
# bench_tx_torch.py (PyTorch) alternate, ROUNDS times (default 2), at the same shapes and threads; each op's
# best time over all rounds is kept. Prints per op and T: weft ms, torch ms, and torch/weft (weft's speed
# as a fraction of PyTorch's; >= 1 means weft is faster).
# Usage: bench/compare_tx.sh BUILD_DIR [T ...]   (PYTHON picks the interpreter, default python3)
set -eu
build=${1:?usage: compare_tx.sh BUILD_DIR [T ...]}
shift
here=$(dirname "$0")
py=${PYTHON:-python3}
rounds=${ROUNDS:-2}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! "$py" -c 'import torch' 2>/dev/null; then
  echo "compare_tx: PyTorch not importable by $py (Debian: apt-get install python3-torch); nothing to compare" >&2
  exit 77
fi
r=0
while [ "$r" -lt "$rounds" ]; do
  "$build/bench/bench_tx" "$@" >>"$tmp/weft"
  "$py" "$here/bench_tx_torch.py" "$@" >>"$tmp/torch"
  r=$((r + 1))
done
awk 'FNR == NR { k = $1 " " $2; if (!(k in w) || $3 < w[k]) w[k] = $3; if (!(k in seen)) { seen[k] = 1; order[++n] = k }; next }
     { k = $1 " " $2; if (!(k in t) || $3 < t[k]) t[k] = $3 }
     END { printf "%-18s %6s %11s %11s %12s\n", "op", "T", "weft ms", "torch ms", "torch/weft";
           for (i = 1; i <= n; i++) { k = order[i]; split(k, a, " ");
             printf "%-18s %6s %11.3f %11.3f %12.2f\n", a[1], a[2], w[k], t[k], (k in t) ? t[k] / w[k] : 0 } }' \
  "$tmp/weft" "$tmp/torch"
