#!/bin/sh
# mpi_conformance.sh TEST - the conformance suite on the other ranks' lanes (mpi:<rank>/cpu) for jobs of 1 to
# 4 ranks: 1 rank has no other ranks and must say so (Skipped, 77); 2, 3 and 4 must pass.
set -u
. "$(dirname "$0")/mpi_env.sh"
test=$1
mpi 1 "$test"
rc=$?
if [ $rc -ne 77 ]; then
  echo "FAIL: one rank: exit $rc, want 77 (no other ranks' lanes to test)"
  exit 1
fi
for n in 2 3 4; do
  echo "== $n ranks"
  if ! mpi "$n" "$test"; then
    echo "FAIL: the conformance suite over MPI with $n ranks"
    exit 1
  fi
done
echo "mpi conformance: 1 to 4 ranks passed"
