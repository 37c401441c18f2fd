#!/usr/bin/env python3
"""PyTorch CPU's figures for the ops bench_tx.c times, at the same shapes, in its output format
("op T milliseconds", the best of several runs). Threads: TORCH_THREADS=default leaves torch's own default;
otherwise WEFT_BENCH_THREADS, else every CPU (bench_tx's count).
Each op gets PyTorch's best form where it has more than one, each on its own line:
  attention_fwd/_bwd       the unfused form llm.c's PyTorch reference uses (q.k^T, masked softmax, att.v; the att
                           matrix is an output, as in weft's op);
  attention_fwd_sdpa/_bwd  F.scaled_dot_product_attention(q, k, v, is_causal=True) (fused; it does not return
                           att, which weft's op writes), where the installed torch has it (2.0 on);
  layernorm                F.layer_norm forward; aten's native_layer_norm_backward (what autograd calls);
  gelu                     F.gelu(approximate="tanh") and its aten backward;
  crossentropy             F.cross_entropy (fused log-softmax), reduction="none"; backward through autograd;
  adamw / _foreach / _fused  torch.optim.AdamW plain (for-loop), foreach=True, fused=True where offered.
Backward passes are timed alone, on a graph built beforehand. Exits 77, saying so, without torch."""
import os
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("bench_tx_torch: PyTorch not installed (Debian: apt-get install python3-torch); skipped", file=sys.stderr)
    sys.exit(77)


def bench(name, T, fn):
    fn()
    best, spent, rep = 1e30, 0.0, 0
    while rep < 10 and (rep < 3 or spent < 1.0):
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        spent += dt
        best = min(best, dt)
        rep += 1
    print(f"{name} {T} {best * 1e3:.4f}", flush=True)


def main():
    if os.environ.get("TORCH_THREADS") != "default":
        torch.set_num_threads(int(os.environ.get("WEFT_BENCH_THREADS", "0")) or os.cpu_count())
    torch.set_grad_enabled(False)
    print(f"bench_tx_torch: torch {torch.__version__}, {torch.get_num_threads()} threads", file=sys.stderr)
    B, C, NH, V = 4, 768, 12, 50257
    Ts = [int(a) for a in sys.argv[1:]] or [64, 256, 1024]
    g = torch.Generator().manual_seed(1)
    for T in Ts:
        N = B * T
        tok = (torch.arange(N) * 7919) % V
        pos = torch.arange(T).repeat(B)
        wte = torch.rand(V, C, generator=g) * 0.2 - 0.1
        wpe = torch.rand(1024, C, generator=g) * 0.2 - 0.1
        x = torch.rand(N, C, generator=g) * 2 - 1
        dy = torch.rand(N, C, generator=g) * 2 - 1
        w = torch.rand(C, generator=g) + 0.5
        b = torch.rand(C, generator=g) * 0.2 - 0.1
        bench("embedding_fwd", T, lambda: wte[tok] + wpe[pos])

        def emb_bwd():
            wte.index_add_(0, tok, dy)
            wpe.index_add_(0, pos, dy)
        bench("embedding_bwd", T, emb_bwd)
        res = torch.ops.aten.native_layer_norm(x, [C], w, b, 1e-5)
        bench("layernorm_fwd", T, lambda: F.layer_norm(x, [C], w, b, 1e-5))
        mean, rstd = res[1], res[2]
        bench("layernorm_bwd", T, lambda: torch.ops.aten.native_layer_norm_backward(
            dy, x, [C], mean, rstd, w, b, [True, True, True]))
        h = torch.rand(4 * N, C, generator=g) * 6 - 3
        hd = torch.rand(4 * N, C, generator=g) * 2 - 1
        bench("gelu_fwd", T, lambda: F.gelu(h, approximate="tanh"))
        bench("gelu_bwd", T, lambda: torch.ops.aten.gelu_backward(hd, h, approximate="tanh"))
        for suffix, kw in (("", {"foreach": False}), ("_foreach", {"foreach": True}), ("_fused", {"fused": True})):
            p = torch.nn.Parameter(h.clone())
            p.grad = hd.clone()
            try:
                opt = torch.optim.AdamW([p], lr=3e-4, weight_decay=0.0, **kw)
                opt.step()
            except (TypeError, RuntimeError) as e:  # not offered by this torch (on CPU)
                print(f"bench_tx_torch: AdamW {kw}: not available ({str(e).splitlines()[0]})", file=sys.stderr)
                continue
            bench("adamw" + suffix, T, opt.step)
            del p, opt
        del h, hd

        qkv = torch.rand(B, T, 3 * C, generator=g) * 2 - 1
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        hs = C // NH

        def att_fwd(qkv):
            q, k, v = qkv.split(C, dim=2)
            q = q.view(B, T, NH, hs).transpose(1, 2)
            k = k.view(B, T, NH, hs).transpose(1, 2)
            v = v.view(B, T, NH, hs).transpose(1, 2)
            pre = (q @ k.transpose(-2, -1)) * (1.0 / hs ** 0.5)
            pre = pre.masked_fill(~mask, float("-inf"))
            att = torch.softmax(pre, dim=-1)
            return (att @ v).transpose(1, 2).contiguous().view(B, T, C), att
        bench("attention_fwd", T, lambda: att_fwd(qkv))
        dout = torch.rand(B, T, C, generator=g) * 2 - 1
        with torch.enable_grad():
            qg = qkv.clone().requires_grad_(True)
            out, _ = att_fwd(qg)
            bench("attention_bwd", T, lambda: torch.autograd.grad(out, qg, dout, retain_graph=True))
            del out, qg
        if hasattr(F, "scaled_dot_product_attention"):
            def sdpa(qkv):
                q, k, v = (a.view(B, T, NH, hs).transpose(1, 2) for a in qkv.split(C, dim=2))
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                return o.transpose(1, 2).contiguous().view(B, T, C)
            bench("attention_fwd_sdpa", T, lambda: sdpa(qkv))
            with torch.enable_grad():
                qg = qkv.clone().requires_grad_(True)
                out = sdpa(qg)
                bench("attention_bwd_sdpa", T, lambda: torch.autograd.grad(out, qg, dout, retain_graph=True))
                del out, qg
        elif T == Ts[0]:
            print(f"bench_tx_torch: torch {torch.__version__} has no F.scaled_dot_product_attention (2.0 on): "
                  "the fused attention is not compared", file=sys.stderr)
        scores = torch.rand(B * NH, T, T, generator=g) * 2 - 1
        bench("softmax_fwd", T, lambda: torch.softmax((scores * 0.125).masked_fill(~mask, float("-inf")), dim=-1))
        probs = torch.softmax((scores * 0.125).masked_fill(~mask, float("-inf")), dim=-1)
        dp = torch.rand(B * NH, T, T, generator=g) * 2 - 1
        bench("softmax_bwd", T, lambda: torch.ops.aten._softmax_backward_data(dp, probs, -1, torch.float32) * 0.125)
        del qkv, scores, probs, dp

        logits = torch.rand(N, V, generator=g) * 8 - 4
        bench("crossentropy_fwd", T, lambda: F.cross_entropy(logits, tok, reduction="none"))
        dl = torch.full((N,), 1.0 / N)
        with torch.enable_grad():
            lg = logits.clone().requires_grad_(True)
            loss = F.cross_entropy(lg, tok, reduction="none")
            bench("crossentropy_bwd", T, lambda: torch.autograd.grad(loss, lg, dl, retain_graph=True))
            del loss, lg
        del logits


if __name__ == "__main__":
    main()
