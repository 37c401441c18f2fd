#!/usr/bin/env python3
"""gpt_torch.py - PyTorch CPU's side of compare_gpt.sh: the GPT-2 model `weft gpt` runs (learned token and
position embeddings; pre-norm blocks of causal multi-head attention and a tanh-GELU MLP, every linear layer
with a bias; a final layer norm, eps 1e-5; logits tied to the token table), written plainly in PyTorch, at
its best settings on this CPU: fp32, torch.set_num_threads(THREADS), training with AdamW (foreach where this
torch has it; betas 0.9/0.95, eps 1e-8, weight decay on the matrices as weft's) and the global-norm clip;
decode with a preallocated KV cache under torch.inference_mode(). The weights are random (speed does not
depend on their values); weft's own initialisation is not reproduced.

    gpt_torch.py train  L C NH V T B STEPS      prints "train_ms MS" per step (after one warm-up step)
    gpt_torch.py decode L C NH V CTX TOKENS     prints "decode_ms MS": the mean ms per token over the tokens
                                                after the first (greedy, from a 1-token prompt), as weft's
                                                decode tokens/s counts

THREADS: the environment's TORCH_THREADS (default: every CPU). Attention is the explicit causal form
(q.k^T, masked softmax, att.v): torch.nn.functional.scaled_dot_product_attention is used instead where this
torch has it (2.0 on), as its fastest form."""
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

HAVE_SDPA = hasattr(F, "scaled_dot_product_attention")


class Block(torch.nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.ln1 = torch.nn.LayerNorm(C, eps=1e-5)
        self.qkv = torch.nn.Linear(C, 3 * C)
        self.proj = torch.nn.Linear(C, C)
        self.ln2 = torch.nn.LayerNorm(C, eps=1e-5)
        self.fc = torch.nn.Linear(C, 4 * C)
        self.fcproj = torch.nn.Linear(4 * C, C)

    def attend(self, q, k, v, causal):
        if HAVE_SDPA:
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.size(-1)))
        if causal:
            T = q.size(-2)
            att = att.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        return torch.softmax(att, dim=-1) @ v

    def forward(self, x):
        B, T, C = x.shape
        hs = C // self.NH
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (a.view(B, T, self.NH, hs).transpose(1, 2) for a in (q, k, v))
        y = self.attend(q, k, v, True).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.proj(y)
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    def step(self, x, kc, vc, t):
        """One position (x [1, 1, C]) at position t: appends its k, v to the caches [1, NH, CTX, hs]."""
        C = x.size(-1)
        hs = C // self.NH
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        kc[:, :, t] = k.view(1, self.NH, hs)
        vc[:, :, t] = v.view(1, self.NH, hs)
        q = q.view(1, 1, self.NH, hs).transpose(1, 2)
        y = self.attend(q, kc[:, :, :t + 1], vc[:, :, :t + 1], False)
        x = x + self.proj(y.transpose(1, 2).reshape(1, 1, C))
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(torch.nn.Module):
    def __init__(self, L, C, NH, V, maxT):
        super().__init__()
        self.wte = torch.nn.Embedding(V, C)
        self.wpe = torch.nn.Embedding(maxT, C)
        self.blocks = torch.nn.ModuleList([Block(C, NH) for _ in range(L)])
        self.lnf = torch.nn.LayerNorm(C, eps=1e-5)
        for p in self.parameters():
            if p.dim() == 2:
                torch.nn.init.normal_(p, std=0.02)

    def forward(self, tok):
        T = tok.size(1)
        x = self.wte(tok) + self.wpe(torch.arange(T))
        for b in self.blocks:
            x = b(x)
        return self.lnf(x) @ self.wte.weight.t()


def median(xs):
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def train(L, C, NH, V, T, B, steps):
    torch.manual_seed(1)
    model = GPT(L, C, NH, V, T)
    decay = [p for p in model.parameters() if p.dim() == 2]
    other = [p for p in model.parameters() if p.dim() != 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}]
    try:
        opt = torch.optim.AdamW(groups, lr=1e-4, betas=(0.9, 0.95), eps=1e-8, foreach=True)
    except TypeError:
        opt = torch.optim.AdamW(groups, lr=1e-4, betas=(0.9, 0.95), eps=1e-8)
    g = torch.Generator().manual_seed(2)
    for s in range(steps + 1):
        tok = torch.randint(0, V, (B, T + 1), generator=g)
        t0 = time.perf_counter()
        logits = model(tok[:, :-1])
        loss = F.cross_entropy(logits.view(-1, V), tok[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        ms = (time.perf_counter() - t0) * 1e3
        if s:  # the first step allocates the optimizer's state
            print(f"train_ms {ms:.3f}", flush=True)


@torch.inference_mode()
def decode(L, C, NH, V, ctx, ntok):
    torch.manual_seed(1)
    model = GPT(L, C, NH, V, ctx)
    hs = C // NH
    kc = [torch.zeros(1, NH, ctx, hs) for _ in range(L)]
    vc = [torch.zeros(1, NH, ctx, hs) for _ in range(L)]
    wt = model.wte.weight.t()
    nxt = 0
    for t in range(ntok):
        if t == 1:  # the first token is the prompt's; weft's figure too is over the tokens after it
            t0 = time.perf_counter()
        x = (model.wte.weight[nxt] + model.wpe.weight[t]).view(1, 1, C)
        for i, b in enumerate(model.blocks):
            x = b.step(x, kc[i], vc[i], t)
        logits = model.lnf(x).view(1, C) @ wt
        nxt = int(torch.argmax(logits))
    print(f"decode_ms {(time.perf_counter() - t0) * 1e3 / (ntok - 1):.3f}", flush=True)


def main():
    threads = int(os.environ.get("TORCH_THREADS", "0")) or os.cpu_count()
    torch.set_num_threads(threads)
    print(f"gpt_torch: torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"attention {'SDPA' if HAVE_SDPA else 'explicit'}", file=sys.stderr)
    mode, args = sys.argv[1], [int(a) for a in sys.argv[2:]]
    if mode == "train":
        train(*args)
    elif mode == "decode":
        decode(*args)
    else:
        sys.exit("usage: gpt_torch.py train L C NH V T B STEPS | decode L C NH V CTX TOKENS")


if __name__ == "__main__":
    main()
