#!/usr/bin/env python3
"""PyTorch CPU's figures for the ops bench_tx.c times, at the same shapes (B = 4, C = 768, 12 heads,
V = 50257), each op in each of its forms:
  attention_fwd/_bwd       the unfused form llm.c's PyTorch reference uses (q.k^T, masked softmax, att.v; the att
                           matrix is an output, as in weft's op);
  attention_fwd_sdpa/_bwd  F.scaled_dot_product_attention(q, k, v, is_causal=True) (fused; it does not return
                           att, which weft's op writes), where the installed torch has it (2.0 on);
  layernorm                F.layer_norm forward; aten's native_layer_norm_backward (what autograd calls);
  gelu                     F.gelu(approximate="tanh") and its aten backward;
  softmax                  torch.softmax of the scaled, masked scores; aten's _softmax_backward_data, scaled;
  crossentropy             F.cross_entropy (fused log-softmax), reduction="none"; backward through autograd;
  adamw / _foreach / _fused  torch.optim.AdamW plain (for-loop), foreach=True, fused=True where offered.
Backward passes are timed alone, on a graph built beforehand. Each figure is the best of several calls.

    bench_tx_torch.py [T ...]       every op at each T (default 64 256 1024): lines "FORM T ms"
    bench_tx_torch.py --serve       requests "OP T" on stdin (OP: bench_tx's op names); answers one line
                                    "FORM@THREADS T ms" per form and thread count, then "done"

Threads: TORCH_THREADS, a comma-separated list of counts to time each form at (default: every CPU, then 1);
"default" leaves torch's own. Exits 77, saying so, without torch."""
import os
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("bench_tx_torch: PyTorch not installed (Debian: apt-get install python3-torch); skipped", file=sys.stderr)
    sys.exit(77)

B, C, NH, V = 4, 768, 12, 50257
HS = C // NH


def best_ms(fn, budget):
    fn()
    best, spent, rep = 1e30, 0.0, 0
    while rep < 10 and (rep < 3 or spent < budget):
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        spent += dt
        best = min(best, dt)
        rep += 1
    return best * 1e3


class Shape:
    """One T's tensors, and every op's forms as (form name, function) lists."""

    def __init__(self, T):
        self.T = T
        N = B * T
        g = torch.Generator().manual_seed(1)
        tok = (torch.arange(N) * 7919) % V
        pos = torch.arange(T).repeat(B)
        wte = torch.rand(V, C, generator=g) * 0.2 - 0.1
        wpe = torch.rand(1024, C, generator=g) * 0.2 - 0.1
        x = torch.rand(N, C, generator=g) * 2 - 1
        dy = torch.rand(N, C, generator=g) * 2 - 1
        w = torch.rand(C, generator=g) + 0.5
        b = torch.rand(C, generator=g) * 0.2 - 0.1
        res = torch.ops.aten.native_layer_norm(x, [C], w, b, 1e-5)
        mean, rstd = res[1], res[2]
        h = torch.rand(4 * N, C, generator=g) * 6 - 3
        hd = torch.rand(4 * N, C, generator=g) * 2 - 1
        qkv = torch.rand(B, T, 3 * C, generator=g) * 2 - 1
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        dout = torch.rand(B, T, C, generator=g) * 2 - 1
        scores = torch.rand(B * NH, T, T, generator=g) * 16 - 8
        probs = torch.softmax((scores * 0.125).masked_fill(~mask, float("-inf")), dim=-1)
        dp = torch.rand(B * NH, T, T, generator=g) * 2 - 1
        logits = torch.rand(N, V, generator=g) * 8 - 4
        dl = torch.full((N,), 1.0 / N)

        def emb_bwd():
            wte.index_add_(0, tok, dy)
            wpe.index_add_(0, pos, dy)

        def att_fwd(qkv):
            q, k, v = qkv.split(C, dim=2)
            q = q.view(B, T, NH, HS).transpose(1, 2)
            k = k.view(B, T, NH, HS).transpose(1, 2)
            v = v.view(B, T, NH, HS).transpose(1, 2)
            pre = (q @ k.transpose(-2, -1)) * (1.0 / HS ** 0.5)
            pre = pre.masked_fill(~mask, float("-inf"))
            att = torch.softmax(pre, dim=-1)
            return (att @ v).transpose(1, 2).contiguous().view(B, T, C), att

        def sdpa(qkv):
            q, k, v = (a.view(B, T, NH, HS).transpose(1, 2) for a in qkv.split(C, dim=2))
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return o.transpose(1, 2).contiguous().view(B, T, C)

        def backward_of(fwd, inp, grad):
            with torch.enable_grad():
                leaf = inp.clone().requires_grad_(True)
                out = fwd(leaf)
                if isinstance(out, tuple):
                    out = out[0]
            return lambda: torch.autograd.grad(out, leaf, grad, retain_graph=True)

        self.ops = {
            "embedding_fwd": [("embedding_fwd", lambda: wte[tok] + wpe[pos])],
            "embedding_bwd": [("embedding_bwd", emb_bwd)],
            "layernorm_fwd": [("layernorm_fwd", lambda: F.layer_norm(x, [C], w, b, 1e-5))],
            "layernorm_bwd": [("layernorm_bwd", lambda: torch.ops.aten.native_layer_norm_backward(
                dy, x, [C], mean, rstd, w, b, [True, True, True]))],
            "gelu_fwd": [("gelu_fwd", lambda: F.gelu(h, approximate="tanh"))],
            "gelu_bwd": [("gelu_bwd", lambda: torch.ops.aten.gelu_backward(hd, h, approximate="tanh"))],
            "adamw": [],
            "attention_fwd": [("attention_fwd", lambda: att_fwd(qkv))],
            "attention_bwd": [("attention_bwd", None)],
            "softmax_fwd": [("softmax_fwd", lambda: torch.softmax(
                (scores * 0.125).masked_fill(~mask, float("-inf")), dim=-1))],
            "softmax_bwd": [("softmax_bwd", lambda: torch.ops.aten._softmax_backward_data(
                dp, probs, -1, torch.float32) * 0.125)],
            "crossentropy_fwd": [("crossentropy_fwd", lambda: F.cross_entropy(logits, tok, reduction="none"))],
            "crossentropy_bwd": [("crossentropy_bwd", None)],
        }
        # graphs built on first use (they hold activations)
        self.lazy = {
            ("attention_bwd", "attention_bwd"): lambda: backward_of(att_fwd, qkv, dout),
            ("crossentropy_bwd", "crossentropy_bwd"): lambda: backward_of(
                lambda z: F.cross_entropy(z, tok, reduction="none"), logits, dl),
        }
        if hasattr(F, "scaled_dot_product_attention"):
            self.ops["attention_fwd"].append(("attention_fwd_sdpa", lambda: sdpa(qkv)))
            self.ops["attention_bwd"].append(("attention_bwd_sdpa", None))
            self.lazy[("attention_bwd", "attention_bwd_sdpa")] = lambda: backward_of(sdpa, qkv, dout)
        for suffix, kw in (("", {"foreach": False}), ("_foreach", {"foreach": True}), ("_fused", {"fused": True})):
            p = torch.nn.Parameter(h.clone())
            p.grad = hd.clone()
            try:
                opt = torch.optim.AdamW([p], lr=3e-4, weight_decay=0.0, **kw)
                opt.step()
            except (TypeError, RuntimeError) as e:  # not offered by this torch (on CPU)
                if T == 64:
                    print(f"bench_tx_torch: AdamW {kw}: not available ({str(e).splitlines()[0]})", file=sys.stderr)
                continue
            self.ops["adamw"].append(("adamw" + suffix, opt.step))

    def forms(self, op):
        out = []
        for name, fn in self.ops.get(op, []):
            if fn is None:
                fn = self.lazy[(op, name)]()
                self.ops[op] = [(n, fn if n == name else f) for n, f in self.ops[op]]
            out.append((name, fn))
        return out


def thread_counts():
    env = os.environ.get("TORCH_THREADS", "")
    if env == "default":
        return [torch.get_num_threads()]
    if env:
        return [int(t) for t in env.split(",")]
    n = os.cpu_count() or 1
    return [n, 1] if n > 1 else [1]


def main():
    torch.set_grad_enabled(False)
    counts = thread_counts()
    print(f"bench_tx_torch: torch {torch.__version__}, threads {counts}", file=sys.stderr)
    if "scaled_dot_product_attention" not in dir(F):
        print(f"bench_tx_torch: torch {torch.__version__} has no F.scaled_dot_product_attention (2.0 on): "
              "the fused attention is not compared", file=sys.stderr)
    shape = None
    if sys.argv[1:2] == ["--serve"]:
        for line in sys.stdin:
            parts = line.split()
            if len(parts) != 2:
                continue
            op, T = parts[0], int(parts[1])
            if shape is None or shape.T != T:
                shape = None
                shape = Shape(T)
            for name, fn in shape.forms(op):
                for th in counts:
                    torch.set_num_threads(th)
                    print(f"{name}@{th} {T} {best_ms(fn, 0.3):.4f}", flush=True)
            print("done", flush=True)
        return
    torch.set_num_threads(counts[0])
    for T in [int(a) for a in sys.argv[1:]] or [64, 256, 1024]:
        shape = Shape(T)
        for op in shape.ops:
            for name, fn in shape.forms(op):
                print(f"{name} {T} {best_ms(fn, 1.0):.4f}", flush=True)


if __name__ == "__main__":
    main()
