"""torch_compare.py - PyTorch's figures for what bench_cuda measures, on the same machine, so the two can be
set side by side (summary.py): a matmul from host numpy arrays to a host result (fp32 and tf32, n = 4096),
device-resident fp32 / tf32 / bf16 matmul, 100 tiny ops synchronised one by one and replayed from a CUDA
graph, and the size at which the GPU path from host arrays overtakes torch on 16 CPU threads.

Prints "RESULT torch_<key> <value>" lines. Usage: python3 torch_compare.py [--quick]
"""
import statistics
import sys
import time

import numpy as np
import torch


def result(key, value):
    print(f"RESULT torch_{key} {value:.6g}", flush=True)


def timeit(fn, reps, warm=1):
    for _ in range(warm):
        fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


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


def main():
    quick = "--quick" in sys.argv
    rng = np.random.default_rng(0)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}, {torch.get_num_threads()} CPU threads")

    n = 1024 if quick else 4096
    a = (rng.random((n, n), dtype=np.float32) - 0.5).astype(np.float32)
    b = (rng.random((n, n), dtype=np.float32) - 0.5).astype(np.float32)

    def h2h():
        return torch.matmul(torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()).cpu().numpy()

    set_tf32(False)
    t = timeit(h2h, 7, warm=2)
    print(f"host -> host fp32 n={n}: {t * 1e3:.2f} ms")
    result("h2h_fp32_ms", t * 1e3)
    set_tf32(True)
    t = timeit(h2h, 7, warm=2)
    print(f"host -> host tf32 n={n}: {t * 1e3:.2f} ms")
    result("h2h_tf32_ms", t * 1e3)

    for size in ([1024] if quick else [4096, 8192]):
        A = torch.rand(size, size, device="cuda") - 0.5
        B = torch.rand(size, size, device="cuda") - 0.5
        flop = 2.0 * size**3
        set_tf32(False)
        t = resident(A, B, 10)
        result(f"fp32_tflops_{size}", flop / t * 1e-12)
        set_tf32(True)
        t = resident(A, B, 20)
        result(f"tf32_tflops_{size}", flop / t * 1e-12)
        t = resident(A.bfloat16(), B.bfloat16(), 20)
        result(f"bf16_tflops_{size}", flop / t * 1e-12)
        print(f"resident n={size}: see RESULT lines")
        del A, B
    set_tf32(False)

    # 100 tiny ops: synchronised one by one, and one CUDA graph replay
    x = torch.zeros(256, device="cuda")
    y = torch.ones(256, device="cuda")

    def each_sync():
        for _ in range(100):
            x.add_(y)
            torch.cuda.synchronize()

    t = timeit(each_sync, 7)
    result("tiny_sync_us", t / 100 * 1e6)
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

    t = timeit(replay, 20, warm=3)
    result("tiny_graph_us", t / 100 * 1e6)
    print("tiny ops: see RESULT lines")

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
    result("crossover_fp32", cross)


if __name__ == "__main__":
    main()
