#!/usr/bin/env python3
"""torch_gpt.py - the PyTorch peer of `weft gpt` for bench/gpt: GPT-2 (the architecture of tests/gpt/torch_ref.py)
written for speed in plain PyTorch, timed at its best variants, one JSON line per figure on stdout.

    torch_gpt.py decode [--layers 12 --channels 768 --heads 12 --vocab 50257 --context 1024]
                        [--prompt 16 --tokens 128 --device cuda|cpu --threads N --repeat 3]
    torch_gpt.py train  [--layers 12 ... --batch 8 --seq 1024 --steps 6 --device cuda|cpu --threads N]

decode: batch 1, greedy, a preallocated KV cache; variants: eager fp32 (TF32 off), eager with TF32 matmuls,
and (CUDA) the whole decode step captured once as a CUDA graph and replayed (fp32; TF32 off), the way
PyTorch users make decode fast without a compiler. Reports ms per token (median of --repeat runs).
train: one step = forward, cross-entropy, backward, fused AdamW (CUDA) or foreach AdamW (CPU); variants:
eager fp32, eager TF32, eager bf16 autocast, torch.compile'd TF32 and bf16 (CUDA, when compile works).
Reports ms per step (median of the steps after two warm-up steps). Random weights (timing does not depend
on their values); the same shapes weft runs.
"""
import argparse
import json
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F


def sdpa(q, k, v, is_causal=False, attn_mask=None):
    """F.scaled_dot_product_attention where this PyTorch has it (2.0+), else the same thing written out
    (Debian 12's PyTorch 1.13)."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, attn_mask=attn_mask)
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    if is_causal:
        T = q.shape[-2]
        att = att.masked_fill(torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    if attn_mask is not None:
        att = att.masked_fill(~attn_mask, float("-inf"))
    return torch.softmax(att, dim=-1) @ v


def emit(**kw):
    print(json.dumps(kw), flush=True)


class GPT(torch.nn.Module):
    def __init__(s, L, C, NH, V, maxT):
        super().__init__()
        s.L, s.C, s.NH, s.V, s.maxT = L, C, NH, V, maxT
        g = torch.Generator().manual_seed(1)

        def P(*shape, std=0.02):
            return torch.nn.Parameter(torch.randn(*shape, generator=g) * std)

        s.wte, s.wpe = P(V, C), P(maxT, C, std=0.01)
        s.ln1w = torch.nn.Parameter(torch.ones(L, C)); s.ln1b = torch.nn.Parameter(torch.zeros(L, C))
        s.ln2w = torch.nn.Parameter(torch.ones(L, C)); s.ln2b = torch.nn.Parameter(torch.zeros(L, C))
        s.qkvw, s.qkvb = P(L, 3 * C, C), torch.nn.Parameter(torch.zeros(L, 3 * C))
        s.apw, s.apb = P(L, C, C), torch.nn.Parameter(torch.zeros(L, C))
        s.fcw, s.fcb = P(L, 4 * C, C), torch.nn.Parameter(torch.zeros(L, 4 * C))
        s.fpw, s.fpb = P(L, C, 4 * C), torch.nn.Parameter(torch.zeros(L, C))
        s.lnfw = torch.nn.Parameter(torch.ones(C)); s.lnfb = torch.nn.Parameter(torch.zeros(C))

    def block_mlp(s, l, x):
        h = F.layer_norm(x, (s.C,), s.ln2w[l], s.ln2b[l], 1e-5)
        h = F.gelu(F.linear(h, s.fcw[l], s.fcb[l]), approximate="tanh")
        return x + F.linear(h, s.fpw[l], s.fpb[l])

    def forward(s, idx, targets=None):
        B, T = idx.shape
        x = s.wte[idx] + s.wpe[:T]
        for l in range(s.L):
            h = F.layer_norm(x, (s.C,), s.ln1w[l], s.ln1b[l], 1e-5)
            q, k, v = F.linear(h, s.qkvw[l], s.qkvb[l]).split(s.C, dim=2)
            q, k, v = (t.view(B, T, s.NH, s.C // s.NH).transpose(1, 2) for t in (q, k, v))
            y = sdpa(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, s.C)
            x = x + F.linear(y, s.apw[l], s.apb[l])
            x = s.block_mlp(l, x)
        x = F.layer_norm(x, (s.C,), s.lnfw, s.lnfb, 1e-5)
        logits = F.linear(x, s.wte)
        if targets is None:
            return logits
        return F.cross_entropy(logits.view(-1, s.V), targets.view(-1))

    # decode with a preallocated cache k/v: [L, 1, NH, maxT, hs]; pos a 0-d long tensor (so a graph can replay)
    def prefill(s, idx, kc, vc):
        T = idx.shape[1]
        x = s.wte[idx] + s.wpe[:T]
        for l in range(s.L):
            h = F.layer_norm(x, (s.C,), s.ln1w[l], s.ln1b[l], 1e-5)
            q, k, v = F.linear(h, s.qkvw[l], s.qkvb[l]).split(s.C, dim=2)
            q, k, v = (t.view(1, T, s.NH, s.C // s.NH).transpose(1, 2) for t in (q, k, v))
            kc[l, :, :, :T] = k
            vc[l, :, :, :T] = v
            y = sdpa(q, k, v, is_causal=True).transpose(1, 2).reshape(1, T, s.C)
            x = x + F.linear(y, s.apw[l], s.apb[l])
            x = s.block_mlp(l, x)
        x = F.layer_norm(x[:, -1:], (s.C,), s.lnfw, s.lnfb, 1e-5)
        return F.linear(x, s.wte)[0, -1]

    def step(s, tok, pos, kc, vc, mask_row):
        """one token: tok [1,1] long, pos [1] long; mask_row [1,1,1,maxT] bool (True where <= pos)."""
        x = s.wte[tok] + s.wpe[pos]
        hs = s.C // s.NH
        for l in range(s.L):
            h = F.layer_norm(x, (s.C,), s.ln1w[l], s.ln1b[l], 1e-5)
            q, k, v = F.linear(h, s.qkvw[l], s.qkvb[l]).split(s.C, dim=2)
            q, k, v = (t.view(1, 1, s.NH, hs).transpose(1, 2) for t in (q, k, v))
            kc[l].index_copy_(2, pos, k)
            vc[l].index_copy_(2, pos, v)
            y = sdpa(q, kc[l], vc[l], attn_mask=mask_row).transpose(1, 2).reshape(1, 1, s.C)
            x = x + F.linear(y, s.apw[l], s.apb[l])
            x = s.block_mlp(l, x)
        x = F.layer_norm(x, (s.C,), s.lnfw, s.lnfb, 1e-5)
        return F.linear(x, s.wte)[0, 0]


def sync(dev):
    if dev == "cuda":
        torch.cuda.synchronize()


def decode(a):
    dev = a.device
    m = GPT(a.layers, a.channels, a.heads, a.vocab, a.context).to(dev).eval()
    hs = a.channels // a.heads
    prompt = torch.randint(0, a.vocab, (1, a.prompt), generator=torch.Generator().manual_seed(2)).to(dev)
    ar = torch.arange(a.context, device=dev)

    def run(tf32, graph):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        kc = torch.zeros(a.layers, 1, a.heads, a.context, hs, device=dev)
        vc = torch.zeros_like(kc)
        tok = torch.zeros(1, 1, dtype=torch.long, device=dev)
        pos = torch.zeros(1, dtype=torch.long, device=dev)
        mask = torch.zeros(1, 1, 1, a.context, dtype=torch.bool, device=dev)
        out = []
        with torch.inference_mode():
            lg = m.prefill(prompt, kc, vc)
            nxt = int(lg.argmax())
            g = None
            if graph:
                # capture one step on a side stream after warm-up, then replay it with tok/pos/mask updated in place
                tok.fill_(nxt); pos.fill_(a.prompt); torch.le(ar, pos, out=mask.view(-1))
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    for _ in range(2):
                        m.step(tok, pos, kc, vc, mask)
                torch.cuda.current_stream().wait_stream(s)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    glog = m.step(tok, pos, kc, vc, mask)
            sync(dev)
            t0 = time.perf_counter()
            for i in range(a.tokens):
                p = a.prompt + i
                tok.fill_(nxt); pos.fill_(p); torch.le(ar, pos, out=mask.view(-1))
                if g is not None:
                    g.replay()
                    lg = glog
                else:
                    lg = m.step(tok, pos, kc, vc, mask)
                nxt = int(lg.argmax())  # the host needs the token: one synchronisation a step, as weft's
                out.append(nxt)
            sync(dev)
            return (time.perf_counter() - t0) * 1e3 / a.tokens, out

    # the physical limit: the bytes a decode step must read (every weight but the position table, which it
    # reads one row of) at the rate a large device (or memory) copy reaches, read + write counted
    nbytes = 4 * sum(p.numel() for n, p in m.named_parameters() if n != "wpe")
    buf = torch.empty(1 << 28, device=dev)
    dst = torch.empty_like(buf)
    dst.copy_(buf)
    sync(dev)
    t0 = time.perf_counter()
    for _ in range(5):
        dst.copy_(buf)
    sync(dev)
    rate = 5 * 2 * buf.numel() * 4 / (time.perf_counter() - t0)
    del buf, dst
    emit(peer="limit", what="decode", variant="weights / copy rate", device=dev, ms_per_token=nbytes / rate * 1e3,
         weight_bytes=nbytes, copy_gb_s=rate / 1e9)
    variants = [("eager fp32", False, False)]
    if dev == "cuda":
        variants += [("eager tf32", True, False), ("cuda graph fp32", False, True)]
    for name, tf32, graph in variants:
        ms = []
        for _ in range(a.repeat):
            t, _ = run(tf32, graph)
            ms.append(t)
        emit(peer="torch", what="decode", variant=name, device=dev, ms_per_token=statistics.median(ms),
             runs=[round(x, 4) for x in ms], L=a.layers, C=a.channels, V=a.vocab, prompt=a.prompt, tokens=a.tokens,
             torch=torch.__version__)


def train(a):
    dev = a.device
    torch.manual_seed(3)
    x = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev)
    y = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev)
    variants = [("eager fp32", False, None, False)]
    if dev == "cuda":
        variants += [("eager tf32", True, None, False), ("eager bf16", True, torch.bfloat16, False)]
        if not a.no_compile:
            variants += [("compiled tf32", True, None, True), ("compiled bf16", True, torch.bfloat16, True)]
    for name, tf32, amp, comp in variants:
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        m = GPT(a.layers, a.channels, a.heads, a.vocab, a.context).to(dev)
        kw = {"fused": True} if dev == "cuda" else {"foreach": True}
        opt = torch.optim.AdamW(m.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1, **kw)
        fwd = m
        if comp:
            try:
                fwd = torch.compile(m)
            except Exception as e:  # noqa: BLE001 - report and go on
                emit(peer="torch", what="train", variant=name, error=str(e)[:200])
                continue

        def one():
            with torch.autocast(device_type=dev, dtype=amp, enabled=amp is not None):
                loss = fwd(x, y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss

        try:
            ms = []
            for i in range(a.steps + 2):
                sync(dev)
                t0 = time.perf_counter()
                one()
                sync(dev)
                if i >= 2:
                    ms.append((time.perf_counter() - t0) * 1e3)
        except Exception as e:  # noqa: BLE001
            emit(peer="torch", what="train", variant=name, error=str(e)[:200])
            continue
        emit(peer="torch", what="train", variant=name, device=dev, ms_per_step=statistics.median(ms),
             runs=[round(v, 3) for v in ms], L=a.layers, C=a.channels, B=a.batch, T=a.seq, V=a.vocab,
             torch=torch.__version__)
        del m, opt, fwd
        if dev == "cuda":
            torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["decode", "train"])
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--channels", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile variants")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    if a.channels % a.heads:
        sys.exit("torch_gpt.py: --channels must be a multiple of --heads")
    (decode if a.what == "decode" else train)(a)


if __name__ == "__main__":
    main()
