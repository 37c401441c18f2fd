#!/bin/sh
# layers.sh - checks that the library's layers call one way only (docs/DESIGN.md, "Layers"): no object of a
# lower layer references a symbol that an object of a higher layer defines. Reads the symbol tables of the
# library's objects (nm), so it sees calls and data references, not #includes or inline functions.
#
#   layers.sh NM OBJECT...
# (an OBJECT argument may be a ;-separated list, as CMake's $<TARGET_OBJECTS> expands in add_test)
#
# Layers, bottom up, by source path (objects of other folders - lanes, gpt - are not checked here):
#   base   src/core/{status,wmath,reference,reference_tx,optable}.c
#   cost   src/cost/*.c      the cost model's arithmetic and its on-disk cache
#   core   src/core/*.c      the rest: lane slots, tensors and residency, the host queue, the execution entry
#   sched  src/sched/*.c     the op path, routing, splits, measuring, recovery, weft_fabric_open/close
# Prints each offending reference and exits 1; exits 0 when there is none.
set -u
if [ $# -lt 3 ]; then
  echo "usage: layers.sh NM SRCDIR OBJECT..." >&2
  exit 2
fi
NM=$1
SRC=$2
shift 2

layer_of() { # object or source path -> "rank name", or nothing outside the checked folders
  case $1 in
  */src/core/status.c* | */src/core/wmath.c* | */src/core/reference.[ch]* | */src/core/reference_tx.[ch]* | \
    */src/core/optable.[ch]* | */src/core/fpenv.h | */src/core/state.h) echo "0 base" ;;
  */src/cost/*) echo "1 cost" ;;
  */src/core/*) echo "2 core" ;;
  */src/sched/*) echo "3 sched" ;;
  esac
}

tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT
: >"$tmp/defs"
: >"$tmp/refs"
checked=0
for obj in $(printf '%s\n' "$@" | tr ';' '\n'); do
  l=$(layer_of "$obj")
  [ -n "$l" ] || continue
  checked=$((checked + 1))
  src=$(echo "$obj" | sed 's|.*/\(src/[^ ]*\)\.o$|\1|')
  # defined, global: symbol rank layer source
  "$NM" --defined-only -g "$obj" | awk -v l="$l" -v s="$src" 'NF >= 3 { print $3, l, s }' >>"$tmp/defs" || exit 2
  # referenced, undefined here: symbol rank layer source
  "$NM" -u "$obj" | awk -v l="$l" -v s="$src" '{ print $NF, l, s }' >>"$tmp/refs" || exit 2
done
if [ "$checked" -lt 8 ]; then
  echo "layers.sh: only $checked objects of src/core, src/cost and src/sched given; expected the library's objects" >&2
  exit 2
fi

# Includes: each quoted #include of a checked file, resolved beside it or under src/, must not be of a
# higher layer. (One awk over every file: the same layer rules as layer_of.)
SRC=$(cd "$SRC" && pwd) || exit 2
awk -v src="$SRC" '
  function layer(p) { # path under src/ -> rank, or -1
    if (p ~ /^core\/(status\.c|wmath\.c|reference\.[ch]|reference_tx\.[ch]|optable\.[ch]|fpenv\.h|state\.h)$/) return 0
    if (p ~ /^cost\//) return 1
    if (p ~ /^core\//) return 2
    if (p ~ /^sched\//) return 3
    return -1
  }
  function norm(p,   n, i, k, part, out, res) { # collapse "dir/../" and "./"
    n = split(p, part, "/"); k = 0
    for (i = 1; i <= n; i++) {
      if (part[i] == "" || part[i] == ".") continue
      if (part[i] == ".." && k > 0) { k--; continue }
      out[++k] = part[i]
    }
    res = ""
    for (i = 1; i <= k; i++) res = res (i > 1 ? "/" : "") out[i]
    return res
  }
  function exists(p,   line, r) { r = (getline line < (src "/" p)); if (r >= 0) close(src "/" p); return r >= 0 }
  FNR == 1 { rel = substr(FILENAME, length(src) + 2); dir = rel; sub(/\/[^\/]*$/, "", dir); l = layer(rel) }
  /^[ \t]*#[ \t]*include[ \t]*"/ {
    inc = $0; sub(/^[^"]*"/, "", inc); sub(/".*$/, "", inc)
    t = norm(dir "/" inc)
    if (!exists(t)) { t = norm(inc); if (!exists(t)) next }
    r = layer(t)
    if (l >= 0 && r > l) printf "src/%s (%s) includes src/%s (%s)\n", rel, name[l], t, name[r]
  }
  BEGIN { name[0] = "base"; name[1] = "cost"; name[2] = "core"; name[3] = "sched" }
' "$SRC"/core/*.[ch] "$SRC"/cost/*.[ch] "$SRC"/sched/*.[ch] >"$tmp/inc" || exit 2

# Join references to definitions and keep those that point up.
awk 'NR == FNR { rank[$1] = $2; layer[$1] = $3; file[$1] = $4; next }
     ($1 in rank) && rank[$1] > $2 {
       printf "%s (%s) references %s, defined in %s (%s)\n", $4, $3, $1, file[$1], layer[$1]; bad++
     }
     END { exit bad ? 1 : 0 }' "$tmp/defs" "$tmp/refs" >"$tmp/out"
rc=$?
cat "$tmp/inc" >>"$tmp/out"
if [ $rc -ne 0 ] || [ -s "$tmp/inc" ]; then
  sort -u "$tmp/out"
  echo "layers.sh: $(sort -u "$tmp/out" | wc -l) references from a lower layer to a higher one (docs/DESIGN.md, Layers)"
  exit 1
fi
echo "layers.sh: $checked objects and their sources: every reference and #include points down or within its layer"
exit 0
