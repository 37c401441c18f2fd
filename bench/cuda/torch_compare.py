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
    weft_py_ord       weft's ordinary path driven from Python (weft_tensor_write a and b, matmul, weft_tensor_read
                      into the caller's array, tensors made once), the same language driving both
    weft_py_wrap      the caller's arrays wrapped anew each call (weft_tensor_wrap), as weft's Python package
                      does with large arrays
  and the first three calls on fresh arrays of torch_pageable and torch_pinned_nb;
  100 tiny ops (add of 256 floats) per op, driven from a Python loop on both sides:
    torch: synchronised each, one synchronisation for all, a CUDA graph of the unfused ops, and
    torch.compile (fused) replayed from a CUDA graph (mode "reduce-overhead");
    weft:  synchronised each, one synchronisation for all, one scope (weft's recorded launches, the small
    elementwise ops run as one batch kernel, replayed as a graph).
  The full run adds device-resident fp32 / tf32 / bf16 matmul and the size at which the GPU path from host
  arrays overtakes torch on 16 CPU threads.

weft is driven through ctypes (weft_ctypes.py beside this: WEFT_LIBRARY, else build/libweft.so), which loads
in any Python (the compiled package must match the Python it was built for) and costs about a microsecond
more per call than the package; without the library the weft columns are left out and said so. Prints
"RESULT <key> <value>" lines for summary.py.
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
sys.path.insert(0, HERE)


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


class WeftC:
    """weft's C API through ctypes: a fabric on cpu + cuda (calibration off: nothing measured behind the
    timings), tensors, ops pinned to a lane."""

    def __init__(self):
        import ctypes
        import weft_ctypes as W
        self.c, self.W, lib = ctypes, W, W.lib
        lib.weft_tensor_wrap.restype = ctypes.c_int
        lib.weft_tensor_wrap.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_int64),
                                         ctypes.POINTER(ctypes.c_float), ctypes.POINTER(ctypes.c_void_p)]
        self.lib = lib
        desc = W.FabricDesc()
        desc.lanes = b"cpu" if DRY else b"cpu,cuda"
        desc.calibration = W.CALIBRATION["off"]
        self.f = ctypes.c_void_p()
        if lib.weft_fabric_open(ctypes.byref(desc), ctypes.byref(self.f)) != 0:
            raise RuntimeError(f"weft_fabric_open: {W.text(lib.weft_open_error())}")
        if self.lane(LANES["exact"]) is None:
            raise RuntimeError(f"no {LANES['exact']} lane in this fabric")

    def lane(self, name):
        i = self.c.c_size_t()
        return i.value if self.lib.weft_fabric_lane_find(self.f, name.encode(), self.c.byref(i)) == 0 else None

    def desc(self, contract, lane):
        d = self.W.OpDesc()
        d.contract = self.W.CONTRACTS.index(contract)
        d.lane = self.lane(lane)
        return self.c.byref(d), d

    def ok(self, st, what):
        if st != 0:
            raise RuntimeError(f"{what}: {self.W.text(self.lib.weft_fabric_last_error(self.f))}")

    def ptr(self, arr):
        return arr.ctypes.data_as(self.c.POINTER(self.c.c_float))

    def create(self, shape, data=None):
        t = self.c.c_void_p()
        dims = (self.c.c_int64 * len(shape))(*shape)
        self.ok(self.lib.weft_tensor_create(self.f, len(shape), dims, None if data is None else self.ptr(data),
                                            self.c.byref(t)), "create")
        return t

    def ordinary(self, a, b, out, contract, lane):
        """weft's ordinary path: tensors made once; each call writes a and b, multiplies, reads into out."""
        lib, n = self.lib, a.size
        A, B, C = self.create(a.shape), self.create(b.shape), self.create(out.shape)
        dp, keep = self.desc(contract, lane)
        pa, pb, pc = self.ptr(a), self.ptr(b), self.ptr(out)

        def call():
            self.ok(lib.weft_tensor_write(A, pa, n) or lib.weft_tensor_write(B, pb, n) or
                    lib.weft_op_matmul(self.f, dp, A, 0, B, 0, C) or lib.weft_tensor_read(C, pc, out.size), "ordinary")
        call.keep = keep
        return call

    def wrapped_each_call(self, a, b, out, contract, lane):
        """the arrays wrapped anew each call, as the Python package does with large arrays."""
        lib, c = self.lib, self.c
        dp, keep = self.desc(contract, lane)
        pa, pb, pc = self.ptr(a), self.ptr(b), self.ptr(out)
        da, db, dc = ((c.c_int64 * 2)(*x.shape) for x in (a, b, out))

        def call():
            A, B, C = c.c_void_p(), c.c_void_p(), c.c_void_p()
            st = lib.weft_tensor_wrap(self.f, 2, da, pa, c.byref(A)) or lib.weft_tensor_wrap(self.f, 2, db, pb, c.byref(B))
            st = st or lib.weft_tensor_wrap(self.f, 2, dc, pc, c.byref(C))
            st = st or lib.weft_op_matmul(self.f, dp, A, 0, B, 0, C) or lib.weft_tensor_read(C, pc, out.size)
            for t in (A, B, C):
                lib.weft_tensor_destroy(t)
            self.ok(st, "wrapped")
        call.keep = keep
        return call


def open_weft():
    try:
        return WeftC(), None
    except Exception as e:  # no library, no GPU lane: the torch figures still stand
        return None, f"{type(e).__name__}: {e}"


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
        if fab is not None and fab.lane(lane) is not None and not (DRY and contract == "tf32"):
            fns[f"weft_py_ord_{contract}"] = fab.ordinary(a, b, out, contract, lane)
            fns[f"weft_py_wrap_{contract}"] = fab.wrapped_each_call(a, b, out, contract, lane)
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
    lib = fab.lib
    z = np.zeros(256, np.float32)
    tx, ty = fab.create((256,), z), fab.create((256,), z + 1)
    dp, keep = fab.desc("exact", LANES["exact"])
    add, sync, f = lib.weft_op_add, lib.weft_fabric_sync, fab.f

    def w_each():
        for _ in range(100):
            add(f, dp, tx, ty, tx)
            sync(f)

    def w_one():
        for _ in range(100):
            add(f, dp, tx, ty, tx)
        sync(f)

    def w_scope():
        lib.weft_scope_begin(f)
        for _ in range(100):
            add(f, dp, tx, ty, tx)
        lib.weft_scope_end(f)

    result("weft_py_tiny_sync_us", timeit(w_each, 7) / 100 * 1e6)
    result("weft_py_tiny_onesync_us", timeit(w_one, 7, warm=2) / 100 * 1e6)
    result("weft_py_tiny_scope_us", timeit(w_scope, 20, warm=3) / 100 * 1e6)
    fab.ok(sync(f), "tiny ops")
    del keep


def main():
    quick = "--quick" in sys.argv
    host_only = "--host" in sys.argv
    rng = np.random.default_rng(0)
    gpu = "(dry run on the CPU: the figures mean nothing)" if DRY else torch.cuda.get_device_name(0)
    print(f"torch {torch.__version__}, {gpu}, {torch.get_num_threads()} CPU threads")
    fab, why = open_weft()
    if fab is None:
        print(f"weft (from Python) not measured: {why}")

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
