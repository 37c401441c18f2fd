#!/bin/sh
# run_all.sh - every CUDA check and figure in one go, for a machine with an NVIDIA GPU: the test suite
# (CUDA tests, conformance on every lane), bench_cuda, torch_compare.py (when PyTorch is there) and the
# side-by-side summary: first the short table of the host data path and tiny ops against PyTorch's variants
# (the one host_path.sh prints alone), then the kernels against cuBLAS. Logs go to LOG_DIR.
# Usage: bench/cuda/run_all.sh BUILD_DIR LOG_DIR    (from the repository root)
set -u
build=${1:?usage: run_all.sh BUILD_DIR LOG_DIR}
logs=${2:?usage: run_all.sh BUILD_DIR LOG_DIR}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$logs"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv 2>&1 | tee "$logs/gpu.log"

echo "== tests"
(cd "$build" && ctest --output-on-failure --timeout 300 -E '^(python|vulkan|cuda|conformance$)' 2>&1) > "$logs/ctest.log"
grep -E "tests passed|Passed|Failed|\*\*\*" "$logs/ctest.log" | tail -20
for t in cuda cuda_fault; do
  timeout 300 "$build/tests/cuda/test_$t" > "$logs/test_$t.log" 2>&1
  echo "test_$t: exit $?"; tail -4 "$logs/test_$t.log"
done
WEFT_TEST_LANES=cpu,cuda timeout 300 "$build/tests/test_conformance" > "$logs/conformance.log" 2>&1
echo "conformance (cpu,cuda): exit $?"; grep -E "^lane|^router|^total|FAIL" "$logs/conformance.log" | head -30

echo "== bench_cuda"
timeout 300 "$build/bench/cuda/bench_cuda" > "$logs/bench_cuda.log" 2>&1
echo "bench_cuda: exit $?"; grep -v '^RESULT' "$logs/bench_cuda.log"

echo "== weft devices / weft bench"
"$build/weft" devices 2>&1 | tee "$logs/weft_devices.log" | head -40
timeout 120 "$build/weft" bench --lanes cpu,cuda --sizes 64,128,256,512,1024,2048 > "$logs/weft_bench.log" 2>&1
echo "weft bench: exit $?"; cat "$logs/weft_bench.log"

echo "== torch_compare"
if python3 -c 'import torch' 2>/dev/null; then
  WEFT_LIBRARY="$(cd "$build" && pwd)/libweft.so" PYTHONUNBUFFERED=1 timeout 300 python3 "$here/torch_compare.py" \
    > "$logs/torch_compare.log" 2>&1
  echo "torch_compare: exit $?"; grep -v '^RESULT' "$logs/torch_compare.log"
else
  echo "no PyTorch here: skipped"
fi

echo "== summary"
python3 "$here/summary.py" "$logs/bench_cuda.log" "$logs/torch_compare.log" | tee "$logs/summary.txt"
