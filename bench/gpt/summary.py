#!/usr/bin/env python3
"""summary.py - the table of bench/gpt/run_gpt.sh: weft's decode and training figures next to PyTorch's from
the same run, as ratios (speed-up = the peer's time / weft's time; above 1 weft is faster).

    summary.py GPT.JSONL [cuda|cpu]
"""
import json
import sys

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip().startswith("{")]
dev = sys.argv[2] if len(sys.argv) > 2 else "cuda"


def pick(peer, what, variant=None):
    for r in rows:
        if r.get("peer") == peer and r.get("what") == what and (variant is None or r.get("variant") == variant):
            return r
    return None


print("decode, batch 1, ms per token (speed-up = PyTorch's time / weft's)")
peers = [r for r in rows if r.get("what") == "decode" and r.get("peer") in ("torch", "limit")]
for w in [r for r in rows if r.get("peer") == "weft" and r.get("what") == "decode"]:
    if "error" in w:
        print("  weft %-22s error: %s" % (w["variant"], w["error"]))
        continue
    print("  weft %-22s %8.3f ms" % (w["variant"], w["ms_per_token"]))
    for p in peers:
        if "ms_per_token" not in p:
            continue
        tag = "limit" if p["peer"] == "limit" else "torch " + p["variant"]
        ratio = p["ms_per_token"] / w["ms_per_token"]
        what = "of the limit" if p["peer"] == "limit" else "x PyTorch's speed"
        print("      vs %-26s %8.3f ms  -> %.2f %s" % (tag, p["ms_per_token"], ratio, what))
print("training, ms per step")
for w in [r for r in rows if r.get("peer") == "weft" and r.get("what") == "train"]:
    if "error" in w:
        print("  weft %-8s error: %s" % (w["variant"], w["error"]))
        continue
    print("  weft %-8s %9.1f ms" % (w["variant"], w["ms_per_step"]))
for p in [r for r in rows if r.get("peer") == "torch" and r.get("what") == "train"]:
    if "error" in p:
        print("  torch %-14s error: %s" % (p["variant"], p["error"]))
    else:
        print("  torch %-14s %9.1f ms" % (p["variant"], p["ms_per_step"]))
