"""torch_tx.py - the transformer ops on cuda:0 through weft (exact contract) against PyTorch eager CUDA (fp32)
at GPT-2 small's shapes (B = 4, T = 64 and 1024, C = 768, 12 heads, V = 50,257), in one process, one run:
for each op the two sides take turns (weft, torch, weft, torch, ...), each turn timing `reps` calls and a
wait for the device, and the table gives the median time per call of each side and weft / torch.

weft is called through ctypes on libweft.so (weft_ctypes.py beside this finds it: WEFT_LIBRARY, else build/), each
op pinned to cuda:0, `reps` ops in one scope (so a repeated scope is replayed as a CUDA graph, as a training
step would be). torch runs the same computation as eager ops with TF32 off (its matmuls in fp32), eager
launches (what a PyTorch program gets without torch.compile), and the same `reps` calls captured in one CUDA
graph and replayed, which is what weft's scope gets (ops whose calls cannot be captured say why). weft's
results are exact (the canonical order, the CPU lane's bits); torch's are fp32 in cuBLAS's and its kernels'
orders.

Usage: python3 bench/cuda/torch_tx.py [--quick] [--ops=NAME,...] [--kernels]
  --quick: T = 64 only, fewer turns; --ops: only the ops whose names start so; --kernels: after each op's
  turns, one more of weft fp32 (eager) and of torch under torch.profiler, printing the GPU kernels each ran
  and their time per call (lines starting '#').
Without torch, without a GPU, or without weft's cuda:0 it says so and exits 0.
"""
import ctypes
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

try:
    import numpy as np
    import torch
    import torch.nn.functional as Fn
except ImportError as e:
    print(f"torch_tx: PyTorch (with numpy) is not installed: nothing to compare against (skipped: {e})")
    sys.exit(0)
if not torch.cuda.is_available():
    print("torch_tx: torch sees no CUDA device (skipped)")
    sys.exit(0)
try:
    import weft_ctypes as W
except ImportError as e:
    print(f"torch_tx: the weft library did not load (skipped):\n{e}")
    sys.exit(0)

lib = W.lib
P, S, I64, F32 = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_float
OD = ctypes.POINTER(W.OpDesc)
for name, res, args in [
    ("weft_tensor_create_typed", S, [P, ctypes.c_int, ctypes.c_int, ctypes.POINTER(I64), P, ctypes.POINTER(P)]),
    ("weft_op_embedding", S, [P, OD, P, P, P, P, P]),
    ("weft_op_embedding_backward", S, [P, OD, P, P, P, P, P]),
    ("weft_op_layernorm", S, [P, OD, P, P, P, F32, P, P, P]),
    ("weft_op_layernorm_backward", S, [P, OD, P, P, P, P, P, P, P, P]),
    ("weft_op_gelu", S, [P, OD, P, P]),
    ("weft_op_gelu_backward", S, [P, OD, P, P, P]),
    ("weft_op_attention", S, [P, OD, P, I64, P, P, P]),
    ("weft_op_attention_backward", S, [P, OD, P, P, P, I64, P]),
    ("weft_op_causal_softmax", S, [P, OD, P, F32, P]),
    ("weft_op_causal_softmax_backward", S, [P, OD, P, P, F32, P]),
    ("weft_op_crossentropy", S, [P, OD, P, P, P]),
    ("weft_op_crossentropy_backward", S, [P, OD, P, P, P, P]),
    ("weft_op_adamw", S, [P, OD, P, P, P, P, F32, F32, F32, F32, F32, I64]),
    ("weft_op_sumsq", S, [P, OD, P, P]),
    ("weft_op_permute", S, [P, OD, P, ctypes.POINTER(ctypes.c_int), P]),
    ("weft_op_copy_slice", S, [P, OD, P, P, ctypes.c_int, I64]),
]:
    fn = getattr(lib, name, None)
    if fn is None:
        print(f"torch_tx: {W.path} has no {name}: build weft with the transformer ops (skipped)")
        sys.exit(0)
    fn.restype, fn.argtypes = res, args

desc = W.FabricDesc()
desc.lanes = b"cuda"
desc.calibration = W.CALIBRATION["off"]
fab = P()
if lib.weft_fabric_open(ctypes.byref(desc), ctypes.byref(fab)) != 0:
    print(f"torch_tx: weft_fabric_open failed: {W.text(lib.weft_open_error())} (skipped)")
    sys.exit(0)
idx = ctypes.c_size_t()
if lib.weft_fabric_lane_find(fab, b"cuda:0", ctypes.byref(idx)) != 0:
    why = "no cuda:0"
    for i in range(lib.weft_fabric_absent_count(fab)):
        n, w = ctypes.c_char_p(), ctypes.c_char_p()
        lib.weft_fabric_absent_info(fab, i, ctypes.byref(n), ctypes.byref(w))
        if W.text(n.value).startswith("cuda"):
            why = W.text(w.value)
    print(f"torch_tx: weft's cuda:0 is absent: {why} (skipped)")
    sys.exit(0)
PIN = W.OpDesc()
PIN.contract = W.CONTRACTS.index("exact")
PIN.lane = idx.value
pin = ctypes.byref(PIN)
PIN32 = W.OpDesc()  # the same ops under the fp32 contract (any fp32 order: the lane's fp32 kernels where it has them)
PIN32.contract = W.CONTRACTS.index("fp32")
PIN32.lane = idx.value
pin32 = ctypes.byref(PIN32)

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
dev = torch.device("cuda:0")
rng = np.random.default_rng(1)
keep = []  # weft tensors to destroy at the end


def ok(st, what):
    if st != 0:
        raise RuntimeError(f"{what}: {W.status_name(st)}: {W.text(lib.weft_fabric_last_error(fab))}")


def wt(arr):
    """A weft tensor holding arr (float32 or int32 numpy array)."""
    arr = np.ascontiguousarray(arr)
    dims = (I64 * arr.ndim)(*arr.shape)
    t = P()
    dtype = 1 if arr.dtype == np.int32 else 0
    ok(lib.weft_tensor_create_typed(fab, dtype, arr.ndim, dims, arr.ctypes.data_as(P), ctypes.byref(t)), "create")
    keep.append(t)
    return t


def tt(arr):
    return torch.from_numpy(np.ascontiguousarray(arr)).to(dev)


def f32(*shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


def both(arr):
    return wt(arr), tt(arr)


def time_weft(call, reps):
    t0 = time.perf_counter()
    ok(lib.weft_scope_begin(fab), "scope_begin")
    for _ in range(reps):
        ok(call(), "op")
    ok(lib.weft_scope_end(fab), "scope_end")
    return (time.perf_counter() - t0) / reps


def time_weft_eager(call, reps):
    """weft's ops one by one outside a scope: each launches as it is called and the host goes on (PyTorch
    eager's way), one wait for the device at the end."""
    t0 = time.perf_counter()
    for _ in range(reps):
        ok(call(), "op")
    ok(lib.weft_fabric_sync(fab), "sync")
    return (time.perf_counter() - t0) / reps


def time_torch(call, reps):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        call()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / reps


def torch_graph(call, reps):
    """torch's `reps` calls captured in one CUDA graph, as weft's scope replays its ops (None, and why, when
    they cannot be captured)."""
    try:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                call()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(reps):
                call()
        torch.cuda.synchronize()
        return g, None
    except Exception as e:  # an op that synchronises or allocates on the host cannot be captured
        torch.cuda.synchronize()
        return None, f"{type(e).__name__}"


def time_graph(g, reps):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    g.replay()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / reps


KERNELS = "--kernels" in sys.argv  # one more turn of each side under torch.profiler: its GPU kernels
ONLY = next((a.split("=", 1)[1].split(",") for a in sys.argv if a.startswith("--ops=")), None)


def kernel_table(label, side, call, reps):
    """The GPU kernels one turn of `call` ran (CUPTI sees weft's driver-API launches as well as torch's)."""
    from torch.profiler import profile, ProfilerActivity
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        call(reps)
        torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():
        dt = getattr(e, "device_time_total", None)
        if dt is None:
            dt = getattr(e, "cuda_time_total", 0)
        if dt and e.count:
            rows.append((dt / reps, e.count // reps if e.count >= reps else e.count, e.key))
    rows.sort(reverse=True)
    total = sum(r[0] for r in rows)
    print(f"#   kernels {label} [{side}]: {total:.1f} us per call: " +
          "; ".join(f"{k[:48]} x{c} {t:.1f}" for t, c, k in rows[:5]), flush=True)


def compare(label, B, T, wcall, tcall, reps, turns):
    """wcall(pin) runs weft's op pinned as `pin` says (exact: pin, fp32: pin32). Each turn times, in this order:
    weft exact in a scope, weft fp32 in a scope, weft fp32 eager (no scope), torch eager, torch's CUDA graph."""
    if ONLY and not any(label.startswith(o) for o in ONLY):
        return
    wexact = lambda: wcall(pin)  # noqa: E731
    wfp32 = lambda: wcall(pin32)  # noqa: E731
    time_weft(wexact, reps), time_weft(wfp32, reps), time_weft_eager(wfp32, reps), time_torch(tcall, reps)  # warm-up
    time_weft(wexact, reps), time_weft(wfp32, reps)
    g, why = torch_graph(tcall, reps)
    if g is not None:
        time_graph(g, reps)
    ws, fs, es, ts, gs = [], [], [], [], []
    for _ in range(turns):
        ws.append(time_weft(wexact, reps))
        fs.append(time_weft(wfp32, reps))
        es.append(time_weft_eager(wfp32, reps))
        ts.append(time_torch(tcall, reps))
        if g is not None:
            gs.append(time_graph(g, reps))
    w, f, e, t = statistics.median(ws), statistics.median(fs), statistics.median(es), statistics.median(ts)
    gcol, gratio = (f"{statistics.median(gs) * 1e3:.3f}", f"{f / statistics.median(gs):.2f}") if gs else (
        f"- ({why})", "-")
    print(f"| {label} | {B} | {T} | {w * 1e3:.3f} | {f * 1e3:.3f} | {e * 1e3:.3f} | {t * 1e3:.3f} | {gcol} | "
          f"{w / t:.2f} | {f / t:.2f} | {e / t:.2f} | {min(e, f) / t:.2f} | {gratio} |", flush=True)
    if KERNELS:
        kernel_table(label, "weft fp32", lambda r: time_weft_eager(wfp32, r), reps)
        kernel_table(label, "torch", lambda r: time_torch(tcall, r), reps)
    del g


def run(B, T, turns):
    C, NH, V, Pn = 768, 12, 50257, 1024
    hs, N = C // NH, B * T
    reps = 20  # enough calls per turn that one sync and a scope's launch are a small part of each
    tok = rng.integers(0, V, size=(B, T), dtype=np.int32)
    tg = rng.integers(0, V, size=(N,), dtype=np.int32)
    w_tok, t_tok = both(tok)
    w_tg, t_tg = both(tg)
    t_tok64, t_tg64 = t_tok.long().view(-1), t_tg.long()
    t_pos = torch.arange(T, device=dev).repeat(B)
    w_wte, t_wte = both(f32(V, C))
    w_wpe, t_wpe = both(f32(Pn, C))
    w_out, t_out = both(np.zeros((B, T, C), np.float32))
    w_gw, t_gw = both(np.zeros((V, C), np.float32))
    w_gp, t_gp = both(np.zeros((Pn, C), np.float32))
    compare("embedding", B, T, lambda pn=pin: lib.weft_op_embedding(fab, pn, w_tok, None, w_wte, w_wpe, w_out),
            lambda: torch.add(t_wte[t_tok64], t_wpe[t_pos], out=t_out.view(N, C)), reps, turns)

    def t_emb_bwd():
        d = t_out.view(N, C)
        t_gw.index_add_(0, t_tok64, d)
        t_gp.index_add_(0, t_pos, d)
    compare("embedding_backward", B, T, lambda pn=pin: lib.weft_op_embedding_backward(fab, pn, w_out, w_tok, None, w_gw, w_gp),
            t_emb_bwd, reps, turns)

    w_x, t_x = both(f32(N, C, lo=-3, hi=3))
    w_g, t_g = both(f32(C))
    w_b, t_b = both(f32(C))
    w_y, _ = both(np.zeros((N, C), np.float32))
    w_m, _ = both(np.zeros((N,), np.float32))
    w_r, _ = both(np.zeros((N,), np.float32))
    w_dg, _ = both(np.zeros((C,), np.float32))
    w_db, _ = both(np.zeros((C,), np.float32))
    _, t_mean, t_rstd = torch.native_layer_norm(t_x, [C], t_g, t_b, 1e-5)
    compare("layernorm", B, T, lambda pn=pin: lib.weft_op_layernorm(fab, pn, w_x, w_g, w_b, F32(1e-5), w_y, w_m, w_r),
            lambda: torch.native_layer_norm(t_x, [C], t_g, t_b, 1e-5), reps, turns)
    compare("layernorm_backward", B, T,
            lambda pn=pin: lib.weft_op_layernorm_backward(fab, pn, w_x, w_x, w_m, w_r, w_g, w_y, w_dg, w_db),
            lambda: torch.ops.aten.native_layer_norm_backward(t_x, t_x, [C], t_mean, t_rstd, t_g, t_b,
                                                               [True, True, True]), reps, turns)

    w_h, t_h = both(f32(N, 4 * C, lo=-4, hi=4))
    w_h2, _ = both(np.zeros((N, 4 * C), np.float32))
    compare("gelu", B, T, lambda pn=pin: lib.weft_op_gelu(fab, pn, w_h, w_h2),
            lambda: Fn.gelu(t_h, approximate="tanh"), reps, turns)
    compare("gelu_backward", B, T, lambda pn=pin: lib.weft_op_gelu_backward(fab, pn, w_h, w_h, w_h2),
            lambda: torch.ops.aten.gelu_backward(t_h, t_h, approximate="tanh"), reps, turns)

    w_qkv, t_qkv = both(f32(B, T, 3 * C, lo=-2, hi=2))
    w_ao, _ = both(np.zeros((B, T, C), np.float32))
    w_att, _ = both(np.zeros((B, NH, T, T), np.float32))
    w_att2, _ = both(np.zeros((B, NH, T, T), np.float32))
    w_dqkv, _ = both(np.zeros((B, T, 3 * C), np.float32))
    w_dout, t_dout = both(f32(B, T, C))
    mask = torch.ones(T, T, device=dev, dtype=torch.bool).triu(1)
    scale = 1.0 / float(np.sqrt(hs))

    def heads(x):
        return x.view(B, T, NH, hs).transpose(1, 2)

    def t_attn():
        q, k, v = t_qkv.split(C, dim=2)
        q, k, v = heads(q), heads(k), heads(v)
        att = (q @ k.transpose(-2, -1)) * scale
        att = torch.softmax(att.masked_fill(mask, float("-inf")), dim=-1)
        return (att @ v).transpose(1, 2).contiguous().view(B, T, C), att
    _, t_att = t_attn()
    compare("attention", B, T, lambda pn=pin: lib.weft_op_attention(fab, pn, w_qkv, NH, w_ao, w_att, None), t_attn, reps,
            turns)
    lib.weft_op_attention(fab, pin, w_qkv, NH, w_ao, w_att, None)

    def t_attn_bwd():
        q, k, v = t_qkv.split(C, dim=2)
        q, k, v = heads(q), heads(k), heads(v)
        do = heads(t_dout)
        dv = t_att.transpose(-2, -1) @ do
        datt = do @ v.transpose(-2, -1)
        dpre = t_att * (datt - (t_att * datt).sum(-1, keepdim=True)) * scale
        dq, dk = dpre @ k, dpre.transpose(-2, -1) @ q
        return torch.cat([x.transpose(1, 2).reshape(B, T, C) for x in (dq, dk, dv)], dim=2)
    compare("attention_backward", B, T,
            lambda pn=pin: lib.weft_op_attention_backward(fab, pn, w_dout, w_qkv, w_att, NH, w_dqkv), t_attn_bwd, reps, turns)

    t_s = tt(f32(B, NH, T, T, lo=-8, hi=8))
    w_s = wt(t_s.cpu().numpy())
    compare("causal_softmax", B, T, lambda pn=pin: lib.weft_op_causal_softmax(fab, pn, w_s, F32(0.125), w_att2),
            lambda: torch.softmax((t_s * 0.125).masked_fill(mask, float("-inf")), dim=-1), reps, turns)
    t_p = torch.softmax((t_s * 0.125).masked_fill(mask, float("-inf")), dim=-1)
    compare("causal_softmax_backward", B, T,
            lambda pn=pin: lib.weft_op_causal_softmax_backward(fab, pn, w_att, w_att, F32(0.125), w_att2),
            lambda: torch._softmax_backward_data(t_p, t_p, -1, torch.float32) * 0.125, reps, turns)
    del t_s, t_p

    w_z, t_z = both(f32(N, V, lo=-10, hi=10))
    w_l, _ = both(np.zeros((N,), np.float32))
    w_dl, t_dl = both(f32(N))
    w_dz, _ = both(np.zeros((N, V), np.float32))
    compare("crossentropy", B, T, lambda pn=pin: lib.weft_op_crossentropy(fab, pn, w_z, w_tg, w_l),
            lambda: Fn.cross_entropy(t_z, t_tg64, reduction="none"), reps, turns)
    ar = torch.arange(N, device=dev)

    def t_xent_bwd():
        g = torch.softmax(t_z, dim=-1)
        g[ar, t_tg64] -= 1.0
        return g.mul_(t_dl[:, None])
    compare("crossentropy_backward", B, T, lambda pn=pin: lib.weft_op_crossentropy_backward(fab, pn, w_z, w_tg, w_dl, w_dz),
            t_xent_bwd, reps, turns)
    del t_z

    n = 4 * C * C
    w_p, t_p = both(f32(n))
    w_gr, t_gr = both(f32(n))
    w_m1, t_m1 = both(np.zeros(n, np.float32))
    w_v1, t_v1 = both(np.zeros(n, np.float32))
    lr, b1, b2, eps, wd = 6e-4, 0.9, 0.95, 1e-8, 0.1

    def t_adamw():  # the same step as eager elementwise ops (llm.c's form)
        t_m1.mul_(b1).add_(t_gr, alpha=1 - b1)
        t_v1.mul_(b2).addcmul_(t_gr, t_gr, value=1 - b2)
        mh = t_m1 / (1 - b1)
        vh = t_v1 / (1 - b2)
        t_p.sub_(lr * (mh / (vh.sqrt() + eps) + wd * t_p))
    compare("adamw (4C x C)", B, T,
            lambda pn=pin: lib.weft_op_adamw(fab, pn, w_p, w_gr, w_m1, w_v1, lr, b1, b2, eps, wd, 1), t_adamw, reps, turns)
    w_acc, t_acc = both(np.zeros(1, np.float32))
    compare("sumsq (4C x C)", B, T, lambda pn=pin: lib.weft_op_sumsq(fab, pn, w_gr, w_acc),
            lambda: t_acc.add_(t_gr.square().sum()), reps, turns)

    w_x4, t_x4 = both(f32(B, T, NH, hs))
    w_y4, t_y4 = both(np.zeros((B, NH, T, hs), np.float32))
    perm = (ctypes.c_int * 4)(0, 2, 1, 3)
    compare("permute [B,T,NH,hs]", B, T, lambda pn=pin: lib.weft_op_permute(fab, pn, w_x4, perm, w_y4),
            lambda: t_y4.copy_(t_x4.permute(0, 2, 1, 3)), reps, turns)
    w_kv, t_kv = both(np.zeros((B, NH, 1024, hs), np.float32))
    t0 = 1024 - T
    compare("copy_slice (kv append)", B, T, lambda pn=pin: lib.weft_op_copy_slice(fab, pn, w_y4, w_kv, 2, t0),
            lambda: t_kv[:, :, t0:t0 + T].copy_(t_y4), reps, turns)
    for t in keep:
        lib.weft_tensor_destroy(t)
    keep.clear()
    torch.cuda.empty_cache()


def main():
    quick = "--quick" in sys.argv
    print(f"weft {W.version} ({W.path}) against torch {torch.__version__} on {torch.cuda.get_device_name(0)}")
    print("weft: pinned to cuda:0 under the exact contract and under fp32, repeated in a scope (replayed as a CUDA")
    print("graph), and under fp32 eagerly (each op launched as it is called, one wait at the end); torch: fp32, TF32")
    print("off, eager launches and the same calls captured in one CUDA graph. Ratios are weft's time over torch's:")
    print("above 1 weft is slower. 'best fp32 / eager' takes weft's faster way (scope or eager) against torch eager.")
    print("\n| op | B | T | weft exact ms | weft fp32 ms | weft fp32 eager ms | torch eager ms | torch graph ms | "
          "exact / eager | fp32 / eager | fp32 eager / eager | best fp32 / eager | fp32 / graph |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for T in (64,) if quick else (64, 1024):
        run(4, T, 3 if quick else 7)
    lib.weft_fabric_close(fab)


if __name__ == "__main__":
    main()
