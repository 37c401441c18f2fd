#!/bin/sh
# fuzz.sh TARGET SRC BIN LIBWEFT SECONDS [LIBS...] - builds one libFuzzer target with clang
# (-fsanitize=fuzzer,address,undefined) against the library LIBWEFT (and LIBS: what else it was built with,
# such as MPI), and runs it for SECONDS from its seed corpus (new inputs go to a scratch folder, not into the
# repository). Exits 77 (skipped) when clang with libFuzzer is missing. TARGET is one of
#   protocol   the wire protocol (tests/net/fuzz_protocol.c, corpus tests/net/corpus)
#   gpt_load   weft_gpt_load_ex on llm.c and safetensors files (tests/gpt/fuzz_files.c, tests/gpt/corpus-load)
#   gpt_ckpt   weft_gpt_checkpoint_load (tests/gpt/corpus-ckpt)
#   gpt_bpe    weft_bpe_load, then encode and decode (tests/gpt/corpus-bpe)
# The file targets run with a small malloc limit: an allocation the input does not justify is a finding.
target=$1
src=$2
bin=$3
lib=$4
secs=$5
shift 5
case "$target" in
protocol)
  sources="tests/net/fuzz_protocol.c src/net/protocol.c src/net/worker.c"
  defines=""
  corpus="$src/tests/net/corpus"
  limits="-rss_limit_mb=2048" ;;
gpt_load | gpt_ckpt | gpt_bpe)
  sources="tests/gpt/fuzz_files.c src/gpt/gpt_io.c src/gpt/bpe.c src/gpt/gpt.c"
  defines="-DFUZZ_TARGET=${target#gpt_}"
  corpus="$src/tests/gpt/corpus-${target#gpt_}"
  limits="-rss_limit_mb=1024 -malloc_limit_mb=64" ;;
*)
  echo "fuzz.sh: unknown target '$target' (protocol, gpt_load, gpt_ckpt, gpt_bpe)" >&2
  exit 2 ;;
esac
cc=""
for c in clang clang-14 clang-15 clang-16; do
  if command -v "$c" >/dev/null 2>&1; then cc=$c; break; fi
done
if [ -z "$cc" ]; then
  echo "skipped: no clang (Debian: clang) to build the libFuzzer target"
  exit 77
fi
exe=$bin/fuzz_$target
if ! echo 'int LLVMFuzzerTestOneInput(const char *d, long n) { (void)d; (void)n; return 0; }' |
  "$cc" -x c -fsanitize=fuzzer - -o "$exe.probe" 2>/dev/null; then
  echo "skipped: $cc has no libFuzzer (Debian: libclang-rt-dev or the clang package's runtime)"
  exit 77
fi
rm -f "$exe.probe"
flags="-g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -ffp-contract=off"
paths=""
for s in $sources; do paths="$paths $src/$s"; done
"$cc" $flags $defines -I"$src/include" -I"$src/src" -o "$exe" $paths "$lib" $(pkg-config --libs libcjson) -lssl -lcrypto \
  $(pkg-config --libs libwebsockets 2>/dev/null) "$@" -lpthread -ldl -lm || exit 1
scratch=$(mktemp -d)
mkdir "$scratch/new" "$scratch/tmp"
# libFuzzer's own exit status for a finding is 77, which CTest would count as skipped: 1 instead.
TMPDIR=$scratch/tmp ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  "$exe" -max_total_time="$secs" $limits -timeout=10 -error_exitcode=1 -timeout_exitcode=1 "$scratch/new" "$corpus"
status=$?
rm -rf "$scratch"
exit $status
