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
if [ $# -lt 2 ]; then
  echo "usage: layers.sh NM OBJECT..." >&2
  exit 2
fi
NM=$1
shift

layer_of() { # object path -> "rank name", or nothing for objects outside the checked folders
  case $1 in
  */src/core/status.c.o | */src/core/wmath.c.o | */src/core/reference.c.o | */src/core/reference_tx.c.o | \
    */src/core/optable.c.o) echo "0 base" ;;
  */src/cost/*.o) echo "1 cost" ;;
  */src/core/*.o) echo "2 core" ;;
  */src/sched/*.o) echo "3 sched" ;;
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

# Join references to definitions and keep those that point up.
awk 'NR == FNR { rank[$1] = $2; layer[$1] = $3; file[$1] = $4; next }
     ($1 in rank) && rank[$1] > $2 {
       printf "%s (%s) references %s, defined in %s (%s)\n", $4, $3, $1, file[$1], layer[$1]; bad++
     }
     END { exit bad ? 1 : 0 }' "$tmp/defs" "$tmp/refs" >"$tmp/out"
rc=$?
if [ $rc -ne 0 ]; then
  sort -u "$tmp/out"
  echo "layers.sh: $(sort -u "$tmp/out" | wc -l) references from a lower layer to a higher one (docs/DESIGN.md, Layers)"
  exit 1
fi
echo "layers.sh: $checked objects, every reference points down or within its layer"
exit 0
