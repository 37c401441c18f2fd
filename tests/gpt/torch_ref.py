#!/usr/bin/env python3
"""torch_ref.py - GPT-2 logits from an independent implementation: plain PyTorch (CPU, fp32) with its own
readers of both checkpoint formats (nothing shared with weft's loader).

    torch_ref.py WEIGHTS TOKEN [TOKEN ...] [--nh N] [--npy OUT.npy] [--check LOGITS.hex [--atol A] [--rtol R]]

WEIGHTS is a Hugging Face model.safetensors (F32, F16 or BF16; its config.json beside it gives n_head; else
--nh, else C/64) or an llm.c .bin (version 3 fp32, or 5 bf16). Prints the logits, one line per position: V float32 values as 8-digit
hex of their bits (so a reader can compare within a tolerance or bit for bit), or writes them [T, V] to a
.npy file with --npy. With --check, reads another implementation's logits in the same hex format (T lines
of V values) and exits 1 unless every one is within atol + rtol * |PyTorch's| (defaults 1e-4 each), printing
the worst difference. The model: token + position embeddings; per layer pre-norm causal multi-head
attention and a tanh-GELU MLP with residuals; a final layer norm (eps 1e-5); logits tied to the token table.
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch

ORDER = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
         "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]


def shapes(L, C, V, maxT):
    return {"wte": (V, C), "wpe": (maxT, C), "ln1w": (L, C), "ln1b": (L, C), "qkvw": (L, 3 * C, C),
            "qkvb": (L, 3 * C), "attprojw": (L, C, C), "attprojb": (L, C), "ln2w": (L, C), "ln2b": (L, C),
            "fcw": (L, 4 * C, C), "fcb": (L, 4 * C), "fcprojw": (L, C, 4 * C), "fcprojb": (L, C),
            "lnfw": (C,), "lnfb": (C,)}


def widen(buf, dtype):
    """float32 array from raw little-endian F32, F16 or BF16 bytes."""
    if dtype == "F32":
        return np.frombuffer(buf, dtype="<f4")
    if dtype == "F16":
        return np.frombuffer(buf, dtype="<f2").astype(np.float32)
    if dtype == "BF16":
        return (np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
    sys.exit("torch_ref.py: dtype %s is not F32, F16 or BF16" % dtype)


def load_llmc(path):
    raw = open(path, "rb").read()
    h = struct.unpack("<256i", raw[:1024])
    if h[0] != 20240326 or h[1] not in (3, 5):
        sys.exit("torch_ref.py: %s: not an llm.c checkpoint of version 3 or 5 (magic %d, version %d)"
                 % (path, h[0], h[1]))
    maxT, V, L, NH, C, Vp = h[2:8]
    data = widen(raw[1024:], "F32" if h[1] == 3 else "BF16")
    p, off = {}, 0
    for name, shp in shapes(L, C, Vp, maxT).items():
        n = int(np.prod(shp))
        p[name] = torch.from_numpy(data[off:off + n].reshape(shp).copy())
        off += n
    if off != data.size:
        sys.exit("torch_ref.py: %s: size disagrees with its header" % path)
    p["wte"] = p["wte"][:V]
    return p, L, C, NH


def load_safetensors(path, nh):
    raw = open(path, "rb").read()
    (hl,) = struct.unpack("<Q", raw[:8])
    hdr = json.loads(raw[8:8 + hl])
    data = raw[8 + hl:]

    def t(name):
        for key in (name, "transformer." + name):
            if key in hdr:
                e = hdr[key]
                b, en = e["data_offsets"]
                return torch.from_numpy(widen(data[b:en], e["dtype"]).reshape(e["shape"]).copy())
        sys.exit("torch_ref.py: %s: no tensor %s" % (path, name))

    wte = t("wte.weight")
    V, C = wte.shape
    L = 0
    while any(k in hdr for k in ("h.%d.ln_1.weight" % L, "transformer.h.%d.ln_1.weight" % L)):
        L += 1
    cfgp = os.path.join(os.path.dirname(path), "config.json")
    if os.path.exists(cfgp):
        nh = json.load(open(cfgp))["n_head"]
    elif not nh:
        nh = C // 64
    hf = {"ln1w": "ln_1.weight", "ln1b": "ln_1.bias", "qkvw": "attn.c_attn.weight", "qkvb": "attn.c_attn.bias",
          "attprojw": "attn.c_proj.weight", "attprojb": "attn.c_proj.bias", "ln2w": "ln_2.weight",
          "ln2b": "ln_2.bias", "fcw": "mlp.c_fc.weight", "fcb": "mlp.c_fc.bias", "fcprojw": "mlp.c_proj.weight",
          "fcprojb": "mlp.c_proj.bias"}
    p = {"wte": wte, "wpe": t("wpe.weight"), "lnfw": t("ln_f.weight"), "lnfb": t("ln_f.bias")}
    for k, n in hf.items():
        # Conv1D weights are stored [in, out]: transpose to [out, in] like nn.Linear
        p[k] = torch.stack([t("h.%d.%s" % (l, n)).T if k.endswith("w") and "ln" not in k
                            else t("h.%d.%s" % (l, n)) for l in range(L)])
    return p, L, C, nh


def layernorm(x, w, b):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + 1e-5) * w + b


def gelu(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def forward(p, L, C, NH, tokens):
    T = len(tokens)
    idx = torch.tensor(tokens, dtype=torch.long)
    x = p["wte"][idx] + p["wpe"][torch.arange(T)]
    hs = C // NH
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(L):
        h = layernorm(x, p["ln1w"][l], p["ln1b"][l])
        qkv = h @ p["qkvw"][l].T + p["qkvb"][l]
        q, k, v = (m.reshape(T, NH, hs).transpose(0, 1) for m in qkv.split(C, dim=-1))
        att = (q @ k.transpose(-1, -2)) / math.sqrt(hs)
        att = torch.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(0, 1).reshape(T, C)
        x = x + y @ p["attprojw"][l].T + p["attprojb"][l]
        h = layernorm(x, p["ln2w"][l], p["ln2b"][l])
        x = x + gelu(h @ p["fcw"][l].T + p["fcb"][l]) @ p["fcprojw"][l].T + p["fcprojb"][l]
    x = layernorm(x, p["lnfw"], p["lnfb"])
    return x @ p["wte"].T


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("weights")
    ap.add_argument("tokens", type=int, nargs="+")
    ap.add_argument("--nh", type=int, default=0, help="heads, for a safetensors file without config.json")
    ap.add_argument("--npy", help="write the [T, V] float32 logits here instead of printing hex")
    ap.add_argument("--check", help="compare with these logits (hex, T lines of V) instead of printing")
    ap.add_argument("--atol", type=float, default=1e-4)
    ap.add_argument("--rtol", type=float, default=1e-4)
    a = ap.parse_args()
    torch.set_num_threads(1)
    with open(a.weights, "rb") as f:
        magic = f.read(4)
    if struct.unpack("<i", magic)[0] == 20240326:
        p, L, C, NH = load_llmc(a.weights)
    else:
        p, L, C, NH = load_safetensors(a.weights, a.nh)
    if max(a.tokens) >= p["wte"].shape[0] or len(a.tokens) > p["wpe"].shape[0] or min(a.tokens) < 0:
        sys.exit("torch_ref.py: token ids or sequence length out of range")
    with torch.no_grad():
        logits = forward(p, L, C, NH, a.tokens).to(torch.float32).numpy()
    if a.check:
        rows = [l.split() for l in open(a.check) if l.strip()]
        other = np.array([[int(v, 16) for v in r] for r in rows], dtype=np.uint32).view(np.float32)
        if other.shape != logits.shape:
            sys.exit("torch_ref.py: %s holds %s logits, PyTorch made %s" % (a.check, other.shape, logits.shape))
        diff = np.abs(other.astype(np.float64) - logits.astype(np.float64))
        bad = int((~(diff <= a.atol + a.rtol * np.abs(logits))).sum())
        print("max |diff| %.3g over logits up to %.3g: %d of %d beyond %g + %g * |x|"
              % (diff.max(), np.abs(logits).max(), bad, logits.size, a.atol, a.rtol))
        sys.exit(1 if bad else 0)
    if a.npy:
        np.save(a.npy, logits)
    else:
        for row in logits:
            print(" ".join("%08x" % v for v in row.view(np.uint32)))


if __name__ == "__main__":
    main()
