#!/bin/sh
# readme_sample.sh - regenerates the README's sample of `weft bench` (docs/bench-sample.txt) and its plot
# (docs/bench-sample.svg) with the CLI of build/, on whatever machine runs it: the figures are that
# machine's. Run from the repository's root after ./build.sh build:  sh bench/readme_sample.sh
set -e
weft=${WEFT:-build/weft}
[ -x "$weft" ] || { echo "no $weft: run ./build.sh build first" >&2; exit 1; }
"$weft" bench --sizes 16,32,64,128,256,512 --repeats 5 --plot docs/bench-sample.svg >docs/bench-sample.txt
echo "wrote docs/bench-sample.txt and docs/bench-sample.svg"
