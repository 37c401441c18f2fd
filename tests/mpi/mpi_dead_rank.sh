#!/bin/sh
# mpi_dead_rank.sh WEFT - a rank of a data-parallel job that hangs (SIGSTOP) or dies (SIGKILL) ends the job
# within a bounded time, with an error: a hung rank is named by rank 0 ("nothing from rank 2 within ... ms
# ... rank 2 died or hangs", WEFT_MPI_TIMEOUT_MS=5000 here), a dead one by mpirun ("process rank 2 ...
# exited on signal 9"). Never a hang: each run has 60 s. The same for a job without --mpi, where rank 0 runs
# the command on the other ranks' lanes: a hung serving rank is named, and rank 0 ends the job (MPI_Finalize
# would wait for the hung rank forever).
set -u
. "$(dirname "$0")/mpi_env.sh"
weft=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
if ! "$weft" mlp --epochs 1 --lanes cpu >/dev/null 2>&1; then
  echo "SKIP: weft mlp does not run here (no digits? python3-sklearn)"
  exit 77
fi

rank_pid() { # the pid of rank $1 among the processes running weft mlp --epochs 100000
  for p in $(pgrep -f "mlp .*--epochs 100000"); do
    if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1"; then
      echo "$p"
      return
    fi
  done
}

export WEFT_MPI_LANES=cpu WEFT_MPI_TIMEOUT_MS=5000
for sig in STOP KILL LANES; do
  out=$tmp/$sig
  if [ $sig = LANES ]; then # rank 0 runs every op round robin over its CPU and ranks 1 and 2's
    mpi 3 -x WEFT_MPI_TIMEOUT_MS -x WEFT_MPI_LANES "$weft" mlp --epochs 100000 --lanes cpu,mpi --place round-robin \
      --cpu-threads 1 >"$out" 2>&1 &
  else
    mpi 3 -x WEFT_MPI_TIMEOUT_MS "$weft" mlp --mpi --epochs 100000 --lanes cpu --cpu-threads 1 >"$out" 2>&1 &
  fi
  job=$!
  i=0
  while ! grep -q '^epoch' "$out" && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
  victim=$(rank_pid 2)
  if [ -z "$victim" ]; then
    echo "FAIL: $sig: rank 2 was not found running"
    cat "$out"
    kill "$job" 2>/dev/null
    fail=1
    continue
  fi
  if [ $sig = LANES ]; then kill -STOP "$victim"; else kill -"$sig" "$victim"; fi
  t0=$(date +%s)
  while kill -0 "$job" 2>/dev/null && [ $(($(date +%s) - t0)) -lt 60 ]; do sleep 0.2; done
  took=$(($(date +%s) - t0))
  if kill -0 "$job" 2>/dev/null; then
    echo "FAIL: $sig: the job still runs 60 s after rank 2 stopped"
    kill -KILL "$job" "$victim" 2>/dev/null
    fail=1
    continue
  fi
  wait "$job"
  rc=$?
  kill -KILL "$victim" 2>/dev/null
  if [ $rc = 0 ]; then
    echo "FAIL: $sig: the job exited 0 after rank 2 stopped"
    fail=1
  fi
  if [ "$sig" = STOP ]; then
    want='rank 0: .*nothing from rank 2 within 5000 ms.*rank 2 died or hangs'
  elif [ "$sig" = LANES ]; then
    want='rank 2 \(took no message\|did not answer\) .*died or hangs'
  else
    want='rank 2.*signal 9'
  fi
  if grep -q "$want" "$out"; then
    echo "ok: $sig: the job ended in ${took}s (exit $rc): $(grep -m1 "$want" "$out")"
  else
    echo "FAIL: $sig: no error matching '$want' (exit $rc, ${took}s):"
    grep -v '^epoch' "$out"
    fail=1
  fi
done
[ $fail = 0 ] && echo "mpi dead rank: a hung and a killed rank each ended the job with an error, and a hung serving rank too"
exit $fail
