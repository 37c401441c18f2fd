#!/bin/sh
# The CPU lane's transformer ops (through the public API) against PyTorch CPU, in one run. Each round runs, one
# after another: bench_tx under the exact contract, bench_tx under fp32, bench_tx_torch.py at weft's thread
# count and bench_tx_torch.py at torch's own default (each program times every op as the best of several
# calls). ROUNDS rounds (default 5) alternate them, so load from other work on the machine falls on all of
# them; each figure is the median over the rounds.
# Prints per op and T: PyTorch at its best (the fastest of its forms - plain, foreach, fused, SDPA - and of
# its two thread counts, by median; the form and threads named), then weft exact and weft fp32 with their
# speed relative to it (torch ms / weft ms: above 1 weft is faster). With SHOW_FORMS=1 it also lists every
# PyTorch form and thread count beside the weft op it is compared with.
# Usage: bench/compare_tx.sh BUILD_DIR [T ...]
#   PYTHON picks the interpreter (default python3); WEFT_BENCH_THREADS weft's and the first torch column's
#   threads (default every CPU).
set -eu
build=${1:?usage: compare_tx.sh BUILD_DIR [T ...]}
shift
here=$(dirname "$0")
py=${PYTHON:-python3}
rounds=${ROUNDS:-5}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! "$py" -c 'import torch' 2>/dev/null; then
  echo "compare_tx: PyTorch not importable by $py (Debian: apt-get install python3-torch); nothing to compare" >&2
  exit 77
fi
nth=${WEFT_BENCH_THREADS:-$(getconf _NPROCESSORS_ONLN)}
dflt=$("$py" -c 'import torch; print(torch.get_num_threads())')
echo "compare_tx: $rounds rounds; weft and torch at $nth threads, torch also at its default ($dflt); load average: $(cut -d' ' -f1-3 /proc/loadavg)"
r=0
while [ "$r" -lt "$rounds" ]; do
  WEFT_BENCH_CONTRACT=exact "$build/bench/bench_tx" "$@" 2>/dev/null | sed "s/^/weft_exact $r /" >>"$tmp/all"
  WEFT_BENCH_CONTRACT=fp32 "$build/bench/bench_tx" "$@" 2>/dev/null | sed "s/^/weft_fp32 $r /" >>"$tmp/all"
  "$py" "$here/bench_tx_torch.py" "$@" 2>/dev/null | sed "s/^/torch_t$nth $r /" >>"$tmp/all"
  TORCH_THREADS=default "$py" "$here/bench_tx_torch.py" "$@" 2>/dev/null | sed "s/^/torch_t$dflt $r /" >>"$tmp/all"
  r=$((r + 1))
done
echo "compare_tx: torch $("$py" -c 'import torch; print(torch.__version__)'); load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
# Lines: WHO ROUND OP T MS. Medians per (who, op, T), then per weft op the fastest torch (form, threads).
awk -v show="${SHOW_FORMS:-0}" '
  $3 ~ /_decode_|_ratio/ { next }
  { k = $1 SUBSEP $3 SUBSEP $4; n[k]++; v[k, n[k]] = $5 + 0
    if (!(($3 SUBSEP $4) in seen)) { seen[$3, $4] = 1; order[++no] = $3 SUBSEP $4 } }
  function median(k,   m, i, j, t, a) {
    m = n[k]; for (i = 1; i <= m; i++) a[i] = v[k, i]
    for (i = 2; i <= m; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
    return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2 }
  END {
    for (k in n) med[k] = median(k)
    printf "%-18s %5s %10s %-24s %10s %7s %10s %7s\n", "op", "T", "torch ms", "(torch form, threads)", "exact ms",
           "ratio", "fp32 ms", "ratio"
    for (i = 1; i <= no; i++) {
      split(order[i], a, SUBSEP); op = a[1]; T = a[2]
      if (op ~ /_(sdpa|foreach|fused)$/) continue
      ke = "weft_exact" SUBSEP op SUBSEP T; kf = "weft_fp32" SUBSEP op SUBSEP T
      if (!(ke in med)) continue
      best = 0; bform = ""
      for (k in med) {
        split(k, b, SUBSEP); if (b[1] !~ /^torch_t/ || b[3] != T) continue
        f = b[2]; base = f; sub(/_(sdpa|foreach|fused)$/, "", base); if (base != op) continue
        if (show) forms[op, T] = forms[op, T] sprintf("  %s@%s %.3f", f, substr(b[1], 8), med[k])
        if (!best || med[k] < best) { best = med[k]; bform = f "," substr(b[1], 8) }
      }
      if (!best) continue
      printf "%-18s %5s %10.3f %-24s %10.3f %7.2f %10.3f %7.2f\n", op, T, best, "(" bform ")", med[ke], best / med[ke],
             med[kf], best / med[kf]
      if (show) print "   " forms[op, T]
    }
  }' "$tmp/all"
