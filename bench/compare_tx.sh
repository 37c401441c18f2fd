#!/bin/sh
# The CPU lane's transformer ops (through the public API, exact) against PyTorch CPU, in one run: bench_tx
# (weft) and bench_tx_torch.py (PyTorch, twice: at weft's thread count and at torch's own default) alternate,
# ROUNDS times (default 2), at the same shapes; each op's best time over all rounds is kept. Prints per
# PyTorch form and T: weft ms, torch ms and torch/weft (weft's speed relative to PyTorch's; > 1 means weft is
# faster) at the same threads, then torch ms and torch/weft at torch's default threads. A PyTorch form with a
# suffix (attention_fwd_sdpa, adamw_foreach, ...) is set beside weft's op of the name without it.
# Usage: bench/compare_tx.sh BUILD_DIR [T ...]
#   PYTHON picks the interpreter (default python3); WEFT_BENCH_THREADS weft's and the first torch column's
#   threads (default every CPU); WEFT_BENCH_CONTRACT=fp32 times weft under fp32 (the same kernels).
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
: >"$tmp/weft"
: >"$tmp/same"
: >"$tmp/dflt"
r=0
while [ "$r" -lt "$rounds" ]; do
  "$build/bench/bench_tx" "$@" >>"$tmp/weft"
  "$py" "$here/bench_tx_torch.py" "$@" >>"$tmp/same"
  TORCH_THREADS=default "$py" "$here/bench_tx_torch.py" "$@" >>"$tmp/dflt"
  r=$((r + 1))
done
"$py" -c 'import torch; print("compare_tx: torch", torch.__version__, "default threads:", torch.get_num_threads())'
awk 'function keep(arr, k, v) { if (!(k in arr) || v < arr[k]) arr[k] = v }
     FILENAME == ARGV[1] { keep(w, $1 " " $2, $3); next }
     FILENAME == ARGV[2] { k = $1 " " $2; keep(s, k, $3); if (!(k in seen)) { seen[k] = 1; order[++n] = k }; next }
     { keep(d, $1 " " $2, $3) }
     END { printf "%-22s %5s %10s %10s %8s %12s %8s\n", "op (torch form)", "T", "weft ms", "torch ms", "ratio",
                  "torch ms dft", "ratio";
           for (i = 1; i <= n; i++) { k = order[i]; split(k, a, " "); op = a[1]; sub(/_(sdpa|foreach|fused)$/, "", op);
             wk = op " " a[2]; if (!(wk in w)) continue;
             printf "%-22s %5s %10.3f %10.3f %8.2f %12.3f %8.2f\n", a[1], a[2], w[wk], s[k], s[k] / w[wk],
                    (k in d) ? d[k] : 0, (k in d) ? d[k] / w[wk] : 0 } }' \
  "$tmp/weft" "$tmp/same" "$tmp/dflt"
