#!/bin/sh
# run_mpi.sh BUILD - the MPI figures of bench/mpi/README.md in one run: NetPIPE's TCP ping-pong on loopback
# (Debian: netpipe-tcp) for the TCP floor, bench_mpi lanes (a `weft worker` on loopback started here for the
# TCP lane), bench_mpi reduce on 2 and 4 ranks at GPT-2 124M's gradient size, and the data-parallel
# training step of `weft gpt train --mpi` on 1, 2 and 4 ranks. Everything on this machine (oversubscribed
# where it has fewer cores than ranks).
set -u
build=${1:-build}
weft=$build/weft
bench=$build/bench/bench_mpi
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi() { n=$1; shift; mpirun --oversubscribe --bind-to none -np "$n" "$@"; }
tmp=$(mktemp -d)
echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"

if command -v NPtcp >/dev/null 2>&1; then
  NPtcp >/dev/null 2>&1 &
  np=$!
  sleep 0.5
  NPtcp -h 127.0.0.1 -l 1 -u 256 -o "$tmp/np" >/dev/null 2>&1
  kill "$np" 2>/dev/null
  # NetPIPE prints half the round trip; the median over 1..256 bytes
  echo "NetPIPE TCP loopback latency (half a round trip), median over 1..256 bytes: $(awk '{print $3 * 1e6}' "$tmp/np" | sort -n | awk '{v[NR]=$1} END {printf "%.1f us", v[int((NR+1)/2)]}')"
else
  echo "NetPIPE TCP: not installed (Debian: netpipe-tcp)"
fi

"$weft" worker --listen 127.0.0.1:0 --lanes cpu >"$tmp/worker" 2>&1 &
wk=$!
i=0
while ! grep -q 'listening on' "$tmp/worker" && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
port=$(sed -n 's/.*listening on .*:\([0-9][0-9]*\)$/\1/p' "$tmp/worker")
WEFT_REMOTE=127.0.0.1:$port mpi 2 -x WEFT_REMOTE "$bench" lanes 256
kill "$wk" 2>/dev/null

# the peer at its best (its scratch memory kept by malloc), then, on 4 ranks, as it comes
for n in 2 4; do mpi "$n" "$bench" reduce "${REDUCE_FLOATS:-124439808}"; done
mpi 4 -x BENCH_MPI_MALLOC=default "$bench" reduce "${REDUCE_FLOATS:-124439808}"

gpt="gpt train --steps 12 --layers 2 --channels 128 --heads 4 --context 64 --seq 64 --batch 8 --lanes cpu --val-every 0 --checkpoint $tmp/g.ckpt"
for n in 1 2 4; do
  # shellcheck disable=SC2086
  mpi "$n" "$weft" $gpt --mpi --cpu-threads 1 >"$tmp/gpt$n" 2>&1
  echo "gpt train --mpi, $n rank(s): median step $(sed -n 's/.* \([0-9.]*\) ms | ops.*/\1/p' "$tmp/gpt$n" | tail -n +3 | sort -n | awk '{v[NR]=$1} END {printf "%.1f ms", v[int((NR+1)/2)]}'), $(grep fingerprint "$tmp/gpt$n")"
done
rm -rf "$tmp"
