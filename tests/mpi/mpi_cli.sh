#!/bin/sh
# mpi_cli.sh WEFT - the CLI unchanged under mpirun (no --mpi): rank 0 runs the command, ranks 1 and 2 serve
# their CPU lanes as mpi:1/cpu and mpi:2/cpu. `weft devices` lists them; `weft bench` checks they agree bit
# for bit with the local CPU lane; `weft mlp` and `weft gpt train` with every op pinned round robin over the
# local CPU and the other ranks' lanes end with one process's weights fingerprint.
set -u
. "$(dirname "$0")/mpi_env.sh"
weft=$1
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export WEFT_MPI_LANES=cpu
fail=0
fp() { sed -n 's/^weights fingerprint \([0-9a-f]*\).*/\1/p' "$1"; }

mpi 3 -x WEFT_MPI_LANES "$weft" devices --json >"$tmp/dev" 2>&1
for l in mpi:1/cpu mpi:2/cpu; do
  if ! grep -q "\"$l\"" "$tmp/dev"; then
    echo "FAIL: weft devices under mpirun -np 3 does not list $l"
    cat "$tmp/dev"
    fail=1
  fi
done

# a timeout that is no number is told, not replaced by the default in silence
if WEFT_MPI_TIMEOUT_MS=3s mpi 2 -x WEFT_MPI_LANES -x WEFT_MPI_TIMEOUT_MS "$weft" devices >"$tmp/tmo" 2>&1 ||
  ! grep -q "WEFT_MPI_TIMEOUT_MS is '3s'" "$tmp/tmo"; then
  echo "FAIL: WEFT_MPI_TIMEOUT_MS=3s: want a failed job saying so"
  cat "$tmp/tmo"
  fail=1
fi

if ! mpi 2 -x WEFT_MPI_LANES "$weft" bench --lanes cpu,mpi --sizes 16,64 --max-seconds 2 >"$tmp/bench" 2>&1; then
  echo "FAIL: weft bench under mpirun -np 2 (exit status not 0: a lane differs, or it failed)"
  cat "$tmp/bench"
  fail=1
elif ! grep -q 'mpi:1/cpu' "$tmp/bench"; then
  echo "FAIL: weft bench did not time mpi:1/cpu"
  fail=1
else
  echo "ok: weft bench on cpu and mpi:1/cpu: same bits"
fi

if "$weft" mlp --epochs 1 --lanes cpu >"$tmp/mlp0" 2>&1; then
  mpi 3 -x WEFT_MPI_LANES "$weft" mlp --epochs 1 --lanes cpu,mpi --place round-robin >"$tmp/mlp" 2>&1
  if [ -z "$(fp "$tmp/mlp")" ] || [ "$(fp "$tmp/mlp")" != "$(fp "$tmp/mlp0")" ]; then
    echo "FAIL: weft mlp round robin over cpu, mpi:1/cpu, mpi:2/cpu: '$(fp "$tmp/mlp")', want '$(fp "$tmp/mlp0")'"
    cat "$tmp/mlp"
    fail=1
  else
    echo "ok: weft mlp round robin over the ranks' lanes: $(fp "$tmp/mlp")"
  fi
else
  echo "note: weft mlp does not run here (no digits? python3-sklearn): its part skipped"
fi

gpt="gpt train --data $here/../../README.md --steps 2 --layers 1 --channels 32 --heads 2 --context 32 --seq 16 --batch 2 --val-every 0"
# shellcheck disable=SC2086
"$weft" $gpt --lanes cpu --checkpoint "$tmp/a.ckpt" >"$tmp/gpt0" 2>&1
# shellcheck disable=SC2086
mpi 3 -x WEFT_MPI_LANES "$weft" $gpt --lanes cpu,mpi --place rr --checkpoint "$tmp/b.ckpt" >"$tmp/gpt" 2>&1
if [ -z "$(fp "$tmp/gpt")" ] || [ "$(fp "$tmp/gpt")" != "$(fp "$tmp/gpt0")" ]; then
  echo "FAIL: weft gpt train round robin over the ranks' lanes: '$(fp "$tmp/gpt")', want '$(fp "$tmp/gpt0")'"
  cat "$tmp/gpt"
  fail=1
elif ! grep -q 'mpi:2/cpu' "$tmp/gpt"; then
  echo "FAIL: weft gpt train ran nothing on mpi:2/cpu"
  fail=1
else
  echo "ok: weft gpt train round robin over the ranks' lanes: $(fp "$tmp/gpt")"
fi
[ $fail = 0 ] && echo "mpi cli: devices, bench, mlp and gpt under mpirun"
exit $fail
