#!/bin/sh
# carry.sh BUILD_DIR OUT_DIR - bench_net and weft from a build, with the shared libraries they load that not
# every Linux system has (OpenSSL, cJSON, libwebsockets and what those load), copied into OUT_DIR, so the
# figures can be taken on a machine that has none of the build's packages (the same C library or newer):
#
#   OUT_DIR/run.sh bulk [STREAMS [ROUNDS [SIZES_MIB]]]     (arguments as bench_net's after its first)
set -eu
build=${1:?usage: carry.sh BUILD_DIR OUT_DIR}
out=${2:?usage: carry.sh BUILD_DIR OUT_DIR}
mkdir -p "$out/lib"
cp "$build/bench_net" "$build/weft" "$out/"
for bin in "$build/bench_net" "$build/weft"; do
  ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | while read -r lib; do
    case $(basename "$lib") in
    libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so* | ld-linux*) ;;
    *) cp -L "$lib" "$out/lib/" ;;
    esac
  done
done
cat >"$out/run.sh" <<'RUN'
#!/bin/sh
# Runs the carried bench_net against the carried weft (its worker inherits the library path).
here=$(cd "$(dirname "$0")" && pwd)
LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$here/bench_net" "$here/weft" "$@"
RUN
chmod +x "$out/run.sh"
du -sh "$out"
