"""torch_compare.py - PyTorch's figures next to weft's, on the same machine, with the peer at its best and each
contested comparison shown several ways. In one process, in alternating turns (medians):

  host arrays -> host result, n = 4096 (fp32 against weft exact, tf32 against weft tf32):
    torch_pageable    torch.from_numpy(a).cuda() ... .cpu().numpy(): what most code does
    torch_pinned_nb   a, b copied into pinned buffers (allocated once), .to(DEV, non_blocking=True), the
                      result copied into a pinned buffer (non_blocking) and from it into the caller's array:
                      the same work as weft's ordinary path (weft_tensor_write / weft_tensor_read)
    torch_pinned_view the same, the result left in the pinned buffer (a view: one copy less than weft does)
    torch_pinned_in   the inputs already in pinned memory, the result into a pinned buffer: the peer of weft's
                      wrapped arrays (weft_tensor_wrap, the caller's memory pinned in place)
    weft_py           weft's ordinary path driven from Python (Fabric.matmul(a, b, out=...): a write of each
                      operand and a read of the result per call), the same language driving both
  and the first three calls on fresh arrays of torch_pageable and torch_pinned_nb;
  100 tiny ops (add of 256 floats) per op, driven from a Python loop on both sides:
    torch: synchronised each, one synchronisation for all, a CUDA graph of the unfused ops, and
    torch.compile (fused) replayed from a CUDA graph (mode "reduce-overhead");
    weft:  synchronised each, one synchronisation for all, one scope (weft's recorded launches, the small
    elementwise ops run as one batch kernel, replayed as a graph).
  The full run adds device-resident fp32 / tf32 / bf16 matmul and the size at which the GPU path from host
  arrays overtakes torch on 16 CPU threads.

weft is loaded from the repository's python/ package and WEFT_LIBRARY (else build/libweft.so); without it
the weft columns are left out and said so. Prints "RESULT <key> <value>" lines for summary.py.
Usage: python3 torch_compare.py [--quick] [--host] [--dry-run]
  --host: the host data path and the tiny ops only; --dry-run: every path of the script on the CPU at a small
  size, to check the script where there is no GPU (its figures mean nothing)
"""
import os
import statistics
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))


def result(key, value):
    print(f"RESULT {key} {value:.6g}", flush=True)


def timeit(fn, reps, warm=1):
    for _ in range(warm):
        fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def turns(fns, rounds, warm=2):
    """Median seconds of each of `fns` (a dict), run in alternating turns: every round runs each once."""
    for _ in range(warm):
        for fn in fns.values():
            fn()
    ts = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            ts[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in ts.items()}


def resident(a, b, reps):
    torch.matmul(a, b)
    torch.cuda.synchronize()
    ts = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(reps):
            torch.matmul(a, b)
        torch.cuda.synchronize()
        ts.append((time.perf_counter() - t0) / reps)
    return statistics.median(ts)


def set_tf32(on):
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on


# --dry-run: every path of this script on the CPU at a small size (no GPU, no pinned memory, weft's cpu lane in
# place of cuda:0), to check the script itself on a machine without the GPU; its figures mean nothing.
DRY = "--dry-run" in sys.argv
DEV = "cpu" if DRY else "cuda"
LANES = {"exact": "cpu", "tf32": "cpu"} if DRY else {"exact": "cuda:0", "tf32": "cuda:0.tensor"}


def sync():
    if not DRY:
        torch.cuda.synchronize()


def open_weft():
    """A weft fabric on cpu + cuda (calibration off: nothing measured behind the timings), or None and why."""
    try:
        import weft
        fab = weft.Fabric(lanes="cpu" if DRY else "cpu,cuda", calibration="off")
        fab.lane_index(LANES["exact"])
        return fab, None
    except Exception as e:  # no library, no GPU lane: the torch figures still stand
        return None, f"{type(e).__name__}: {e}"


def lane_present(fab, name):
    try:
        fab.lane_index(name)
        return True
    except Exception:
        return False


def host_to_host(rng, n, fab):
    a = (rng.random((n, n), dtype=np.float32) - 0.5).astype(np.float32)
    b = (rng.random((n, n), dtype=np.float32) - 0.5).astype(np.float32)
    out = np.empty((n, n), np.float32)
    out.fill(0)
    pa, pb, pc = (torch.empty((n, n), dtype=torch.float32, pin_memory=not DRY) for _ in range(3))
    pa.copy_(torch.from_numpy(a))
    pb.copy_(torch.from_numpy(b))
    ta, tb, tout = torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(out)

    def pageable():
        return torch.matmul(ta.to(DEV), tb.to(DEV)).cpu().numpy()

    def pinned_nb(ta=ta, tb=tb, tout=tout):
        pa.copy_(ta)
        pb.copy_(tb)
        gc = torch.matmul(pa.to(DEV, non_blocking=True), pb.to(DEV, non_blocking=True))
        pc.copy_(gc, non_blocking=True)
        sync()
        tout.copy_(pc)

    def pinned_view():
        pa.copy_(ta)
        pb.copy_(tb)
        gc = torch.matmul(pa.to(DEV, non_blocking=True), pb.to(DEV, non_blocking=True))
        pc.copy_(gc, non_blocking=True)
        sync()
        return pc.numpy()

    def pinned_in():
        gc = torch.matmul(pa.to(DEV, non_blocking=True), pb.to(DEV, non_blocking=True))
        pc.copy_(gc, non_blocking=True)
        sync()
        return pc.numpy()

    for contract in ("exact", "tf32"):
        set_tf32(contract == "tf32")
        tname = "fp32" if contract == "exact" else "tf32"
        fns = {f"torch_{tname}_pageable": pageable, f"torch_{tname}_pinned_nb": pinned_nb,
               f"torch_{tname}_pinned_view": pinned_view, f"torch_{tname}_pinned_in": pinned_in}
        lane = LANES[contract]
        if fab is not None and lane_present(fab, lane) and not (DRY and contract == "tf32"):
            fns[f"weft_py_{contract}"] = lambda c=contract, l=lane: fab.matmul(a, b, contract=c, lane=l, out=out)
        # torch's first calls on fresh arrays (the pinned buffers, the CUDA context and cuBLAS warm)
        a2, b2 = a + 0.25, b - 0.25
        out2 = np.empty((n, n), np.float32)
        ta2, tb2, tout2 = torch.from_numpy(a2), torch.from_numpy(b2), torch.from_numpy(out2)
        for i in range(3):
            t0 = time.perf_counter()
            torch.matmul(ta2.to(DEV), tb2.to(DEV)).cpu().numpy()
            result(f"torch_{tname}_pageable_first{i + 1}_ms", (time.perf_counter() - t0) * 1e3)
        a3, b3 = a + 0.5, b - 0.5
        out3 = np.empty((n, n), np.float32)
        ta3, tb3, tout3 = torch.from_numpy(a3), torch.from_numpy(b3), torch.from_numpy(out3)
        for i in range(3):
            t0 = time.perf_counter()
            pinned_nb(ta3, tb3, tout3)
            result(f"torch_{tname}_pinned_nb_first{i + 1}_ms", (time.perf_counter() - t0) * 1e3)
        med = turns(fns, 3 if DRY else 9)
        for k, t in med.items():
            print(f"host -> host {contract if k.startswith('weft') else tname} n={n} {k}: {t * 1e3:.2f} ms")
            result(f"{k}_ms", t * 1e3)
    set_tf32(False)


def tiny_ops(fab, quick):
    x = torch.zeros(256, device=DEV)
    y = torch.ones(256, device=DEV)

    def each_sync():
        for _ in range(100):
            x.add_(y)
            sync()

    def one_sync():
        for _ in range(100):
            x.add_(y)
        sync()

    result("torch_tiny_sync_us", timeit(each_sync, 7) / 100 * 1e6)
    result("torch_tiny_onesync_us", timeit(one_sync, 7, warm=2) / 100 * 1e6)
    if not DRY:
        tiny_graphs(x, y, quick)
    if fab is not None:
        weft_tiny(fab)
    print("tiny ops: see RESULT lines")


def tiny_graphs(x, y, quick):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            x.add_(y)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(100):
            x.add_(y)

    def replay():
        g.replay()
        torch.cuda.synchronize()

    result("torch_tiny_graph_us", timeit(replay, 20, warm=3) / 100 * 1e6)
    if not quick:
        try:
            def chain(u, v):
                for _ in range(100):
                    u = u + v
                return u

            cf = torch.compile(chain, mode="reduce-overhead", fullgraph=True)

            def compiled():
                cf(x, y)
                torch.cuda.synchronize()

            result("torch_tiny_compiled_us", timeit(compiled, 20, warm=5) / 100 * 1e6)
        except Exception as e:  # no compiler for inductor here: said, not hidden
            print(f"torch.compile not measured: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")


def weft_tiny(fab):
    lane = LANES["exact"]
    tx = fab.tensor(np.zeros(256, np.float32))
    ty = fab.tensor(np.ones(256, np.float32))
    add = fab.add

    def w_each():
        for _ in range(100):
            add(tx, ty, lane=lane, out=tx)
            fab.sync()

    def w_one():
        for _ in range(100):
            add(tx, ty, lane=lane, out=tx)
        fab.sync()

    def w_scope():
        with fab.scope():
            for _ in range(100):
                add(tx, ty, lane=lane, out=tx)

    result("weft_py_tiny_sync_us", timeit(w_each, 7) / 100 * 1e6)
    result("weft_py_tiny_onesync_us", timeit(w_one, 7, warm=2) / 100 * 1e6)
    result("weft_py_tiny_scope_us", timeit(w_scope, 20, warm=3) / 100 * 1e6)


def main():
    quick = "--quick" in sys.argv
    host_only = "--host" in sys.argv
    rng = np.random.default_rng(0)
    gpu = "(dry run on the CPU: the figures mean nothing)" if DRY else torch.cuda.get_device_name(0)
    print(f"torch {torch.__version__}, {gpu}, {torch.get_num_threads()} CPU threads")
    fab, why = open_weft()
    if fab is None:
        print(f"weft (Python) not measured: {why}")

    n = 256 if DRY else 1024 if quick else 4096
    host_to_host(rng, n, fab)
    tiny_ops(fab, quick)
    if host_only or DRY:
        return

    for size in ([1024] if quick else [4096, 8192]):
        A = torch.rand(size, size, device="cuda") - 0.5
        B = torch.rand(size, size, device="cuda") - 0.5
        flop = 2.0 * size**3
        set_tf32(False)
        t = resident(A, B, 10)
        result(f"torch_fp32_tflops_{size}", flop / t * 1e-12)
        set_tf32(True)
        t = resident(A, B, 20)
        result(f"torch_tf32_tflops_{size}", flop / t * 1e-12)
        t = resident(A.bfloat16(), B.bfloat16(), 20)
        result(f"torch_bf16_tflops_{size}", flop / t * 1e-12)
        print(f"resident n={size}: see RESULT lines")
        del A, B
    set_tf32(False)

    # CPU (16 threads) against the GPU path from host arrays
    torch.set_num_threads(16)
    w = torch.rand(256, 256)
    for _ in range(20):  # start the CPU thread pool before the first timed size
        torch.matmul(w, w)
    sizes = [64, 128, 192, 256, 384, 512, 640, 768, 1024, 1536, 2048]
    if quick:
        sizes = sizes[:5]
    cross = 0
    print(f"{'n':>6} {'cpu ms':>10} {'gpu ms':>10}")
    for size in sizes:
        a2 = (rng.random((size, size), dtype=np.float32) - 0.5).astype(np.float32)
        b2 = (rng.random((size, size), dtype=np.float32) - 0.5).astype(np.float32)
        reps = 9 if size <= 512 else 5
        tc = timeit(lambda: torch.matmul(torch.from_numpy(a2), torch.from_numpy(b2)).numpy(), reps)
        tg = timeit(lambda: torch.matmul(torch.from_numpy(a2).cuda(), torch.from_numpy(b2).cuda()).cpu().numpy(), reps)
        print(f"{size:>6} {tc * 1e3:>10.3f} {tg * 1e3:>10.3f}")
        if not cross and tg < tc:
            cross = size
    result("torch_crossover_fp32", cross)


if __name__ == "__main__":
    main()
