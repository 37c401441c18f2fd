#!/bin/sh
# compare_blas.sh - builds bench_blas and runs weft's CPU lane against OpenBLAS and oneDNN.
#
# OpenBLAS picks its kernels by CPU at load time. Debian's 0.3.21 does not recognise every new CPU and may
# fall back to slow generic kernels, so the main comparison forces the best core type this CPU can run:
# SkylakeX where AVX-512 is present, else Haswell (SkylakeX kernels would fault without AVX-512). A second,
# shorter run shows what OpenBLAS picks on its own.
#
# Usage: bench/compare_blas.sh [build-dir] [bench_blas options...]
# Never fails a CI run because a peer library is missing: it says so and exits 0.
set -u
here=$(cd "$(dirname "$0")" && pwd)
src=$(dirname "$here")
build=${1:-"$src/build-bench"}
[ $# -gt 0 ] && shift

if [ ! -e /usr/include/dnnl.h ] || ! ls /usr/include/*/openblas*/cblas.h >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "compare_blas: installing libopenblas-dev and libdnnl-dev"
    (apt-get install -y -q libopenblas-dev libdnnl-dev >/dev/null 2>&1 ||
      (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q libopenblas-dev libdnnl-dev >/dev/null 2>&1)) ||
      echo "compare_blas: could not install them"
  fi
fi

cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null || { echo "compare_blas: configure failed"; exit 1; }
cmake --build "$build" --target bench_blas -j "$(nproc)" >/dev/null 2>&1
bench="$build/bench/bench_blas"
if [ ! -x "$bench" ]; then
  echo "compare_blas: bench_blas was not built (OpenBLAS or oneDNN missing); nothing to compare"
  exit 0
fi

if grep -qw avx512f /proc/cpuinfo 2>/dev/null; then tuned=SkylakeX; else tuned=Haswell; fi
default=$(OPENBLAS_VERBOSE=2 "$bench" --openblas-only --sizes 64 --rounds 1 2>&1 | sed -n 's/^Core: //p' | head -n 1)
forced=$(OPENBLAS_VERBOSE=2 OPENBLAS_CORETYPE=$tuned "$bench" --openblas-only --sizes 64 --rounds 1 2>&1 |
  sed -n 's/^Core: //p' | head -n 1)
echo "CPU: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1), $(nproc) cores," \
  "AVX-512: $(grep -qw avx512f /proc/cpuinfo && echo yes || echo no)"
echo "OpenBLAS core type: ${default:-unknown} by default; forcing OPENBLAS_CORETYPE=$tuned (it reports: ${forced:-unknown})"
echo

echo "== weft vs OpenBLAS ($tuned) vs oneDNN"
OPENBLAS_CORETYPE=$tuned "$bench" "$@" || exit 1
echo
echo "== OpenBLAS with its own choice of core type (${default:-unknown}), for reference"
"$bench" --openblas-only "$@" || exit 1
