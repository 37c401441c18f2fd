#!/bin/sh
# fuzz.sh SRC BIN LIBWEFT SECONDS [LIBS...] - builds the protocol fuzzer with clang
# (-fsanitize=fuzzer,address,undefined) against the library LIBWEFT (and LIBS: what else it was built with,
# such as MPI), and runs it for SECONDS from the seed corpus tests/net/corpus (new inputs go to a scratch
# folder, not into the repository). Exits 77 (skipped) when clang with libFuzzer is missing.
src=$1
bin=$2
lib=$3
secs=$4
shift 4
cc=""
for c in clang clang-14 clang-15 clang-16; do
  if command -v "$c" >/dev/null 2>&1; then cc=$c; break; fi
done
if [ -z "$cc" ]; then
  echo "skipped: no clang (Debian: clang) to build the libFuzzer target"
  exit 77
fi
exe=$bin/fuzz_protocol
if ! echo 'int LLVMFuzzerTestOneInput(const char *d, long n) { (void)d; (void)n; return 0; }' |
  "$cc" -x c -fsanitize=fuzzer - -o "$exe.probe" 2>/dev/null; then
  echo "skipped: $cc has no libFuzzer (Debian: libclang-rt-dev or the clang package's runtime)"
  exit 77
fi
rm -f "$exe.probe"
flags="-g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -ffp-contract=off"
"$cc" $flags -I"$src/include" -I"$src/src" -o "$exe" "$src/tests/net/fuzz_protocol.c" "$src/src/net/protocol.c" \
  "$src/src/net/worker.c" "$lib" $(pkg-config --libs libcjson) -lssl -lcrypto \
  $(pkg-config --libs libwebsockets 2>/dev/null) "$@" -lpthread -ldl -lm || exit 1
scratch=$(mktemp -d)
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  "$exe" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 "$scratch" "$src/tests/net/corpus"
status=$?
rm -rf "$scratch"
exit $status
