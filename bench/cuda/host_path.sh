#!/bin/sh
# host_path.sh - the host data path's figures against PyTorch's variants in one short table: the ordinary
# path (weft_tensor_create / write / read) against PyTorch with pinned buffers, the wrapped arrays against the
# limit of transfers overlapped with compute, the first calls on fresh arrays against the steady state, and
# tiny ops against PyTorch's loop, CUDA graph and torch.compile - each peer at its best, every ratio one row.
#
#   bench/cuda/host_path.sh carry BUILD_DIR OUT_DIR   copy what a run needs from a build (bench_cuda, libweft,
#                                                     test_hostpath and test_cuda, and the shared libraries
#                                                     they load that not every system has) into OUT_DIR, for
#                                                     a machine without the build's packages (the same C
#                                                     library or a newer one)
#   bench/cuda/host_path.sh run DIR [LOG_DIR]         run it: DIR is a build directory or a carried OUT_DIR;
#                                                     the tests of the host path and the CUDA lane first (the
#                                                     same bits through every new copy path), then
#                                                     bench_cuda --host, torch_compare.py --host (needs
#                                                     PyTorch with CUDA in python3) and summary.py --host
# From the repository root. Logs go to LOG_DIR (default DIR/host_path_logs).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
usage="usage: host_path.sh carry BUILD_DIR OUT_DIR | host_path.sh run DIR [LOG_DIR]"
cmd=${1:?$usage}
case $cmd in
carry)
  build=${2:?$usage}
  out=${3:?$usage}
  mkdir -p "$out/lib" "$out/bench/cuda" "$out/tests/cuda"
  cp "$build/bench/cuda/bench_cuda" "$out/bench/cuda/"
  cp "$build/tests/test_hostpath" "$out/tests/"
  cp "$build/tests/cuda/test_cuda" "$out/tests/cuda/"
  cp -P "$build"/libweft.so* "$out/"
  for bin in "$build/bench/cuda/bench_cuda" "$build/libweft.so" "$build/tests/test_hostpath"; do
    ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | while read -r lib; do
      case $(basename "$lib") in
      libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so* | ld-linux*) ;;
      *) cp -L "$lib" "$out/lib/" ;;
      esac
    done
  done
  du -sh "$out"
  ;;
run)
  dir=${2:?$usage}
  dir=$(cd "$dir" && pwd)
  logs=${3:-$dir/host_path_logs}
  mkdir -p "$logs"
  if [ -d "$dir/lib" ]; then
    LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export LD_LIBRARY_PATH
  fi
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1 | tee "$logs/gpu.log"
  for t in tests/test_hostpath tests/cuda/test_cuda; do
    status=0
    timeout 180 "$dir/$t" > "$logs/$(basename "$t").log" 2>&1 || status=$?
    echo "$t: exit $status"
    grep -E "FAIL|checks," "$logs/$(basename "$t").log" | tail -5 || true
  done
  status=0
  timeout 300 "$dir/bench/cuda/bench_cuda" --host > "$logs/bench_host.log" 2>&1 || status=$?
  echo "bench_cuda --host: exit $status"
  grep -v '^RESULT' "$logs/bench_host.log" || true
  status=0
  WEFT_LIBRARY="$dir/libweft.so" PYTHONUNBUFFERED=1 timeout 300 python3 "$here/torch_compare.py" --host \
    > "$logs/torch_host.log" 2>&1 || status=$?
  echo "torch_compare.py --host: exit $status"
  grep -v '^RESULT' "$logs/torch_host.log" || true
  echo
  python3 "$here/summary.py" --host "$logs/bench_host.log" "$logs/torch_host.log" | tee "$logs/summary.txt"
  ;;
*)
  echo "$usage" >&2
  exit 2
  ;;
esac
