#!/usr/bin/env python3
"""What weft costs from Python, against its peers measured side by side in this one run.

1. A 4x4 matmul on numpy arrays: weft.matmul(a, b) (routed and pinned to the CPU lane, exact and fp32)
   against numpy's own a @ b. Goal: weft within 1.5x of numpy.
2. The Python overhead of an op on resident tensors: relu(t), add(t, u) and t @ u from Python, against the
   same op called through weft.h from C in a loop (weft._weft's _bench_c: one result tensor made and dropped
   per call, as the Python call does). Overhead = Python's time - C's. Goal: at most 1 us.
3. 512x512 and larger matmuls on numpy arrays: fabric.matmul(a, b) (a new result array each call) against
   a C program doing the same work at its best through weft.h (its arrays wrapped once with
   weft_tensor_wrap, then per call: write, matmul, read into its own array), one call each in turn.
   Goal: within 5% of the C API.

Cases of each part are interleaved batch by batch, so load from other processes hits them alike; a
figure is the best batch (the least disturbed), per call. Every op runs on the CPU lane when pinned
(lane='cpu'), so both sides of a ratio ran the same kernels.

    PYTHONPATH=python python3 python/bench/bench_python.py [--quick] [--json] [--sizes 512,1024,2048]

OpenBLAS (numpy's BLAS) may be slowed by OPENBLAS_CORETYPE where it is set; it does not matter for part 1
(numpy's 4x4 matmul does not call BLAS) and numpy is not a peer in parts 2 and 3.
"""

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import weft  # noqa: E402


def per_call(cases, calls, batches):
    """{name: best seconds per call}, batches of every case interleaved."""
    samples = {name: [] for name in cases}
    for fn in cases.values():
        for _ in range(max(10, calls // 20)):
            fn()
    for _ in range(batches):
        for name, fn in cases.items():
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            samples[name].append((time.perf_counter() - t0) / calls)
    return {name: min(s) for name, s in samples.items()}


def small_matmul(f, calls, batches):
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (4, 4)).astype(np.float32)
    b = rng.uniform(-1, 1, (4, 4)).astype(np.float32)
    weft.matmul(a, b)
    routed = f.last_lane
    cases = {
        "numpy a @ b": lambda: a @ b,
        f"weft.matmul(a, b) (routed: {routed})": lambda: weft.matmul(a, b),
        "weft.matmul(a, b, lane='cpu')": lambda: weft.matmul(a, b, lane="cpu"),
        "weft.matmul(a, b, contract='fp32')": lambda: weft.matmul(a, b, contract="fp32"),
        "fabric.matmul(a, b)": lambda: f.matmul(a, b),
    }
    res = per_call(cases, calls, batches)
    base = res["numpy a @ b"]
    return [{"case": k, "us": v * 1e6, "vs_numpy": v / base} for k, v in res.items()]


def resident_overhead(f, calls, batches):
    rng = np.random.default_rng(1)
    a = rng.uniform(-1, 1, (4, 4)).astype(np.float32)
    ta, tb = f.tensor(a), f.tensor(a)
    cpu = f.lane_index("cpu")
    rows = []
    py = {
        "relu": lambda: f.relu(ta, lane="cpu"),
        "add": lambda: f.add(ta, tb, lane="cpu"),
        "matmul": lambda: f.matmul(ta, tb, lane="cpu"),
    }
    ops = {"relu(t)": "relu", "add(t, u)": "add", "matmul(t, u)": "matmul"}
    py_cases = {name: py[op] for name, op in ops.items()}
    py_cases["t @ u (operator, routed)"] = lambda: ta @ tb
    samples = {name: [] for name in list(py_cases) + [f"C {op}" for op in ops.values()]}
    for _ in range(batches):
        for name, fn in py_cases.items():
            for _ in range(20):
                fn()
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            samples[name].append((time.perf_counter() - t0) / calls)
        for op in ops.values():
            samples[f"C {op}"].append(f._bench_c(op, ta, tb, calls, 0, cpu))
    best = {k: min(v) for k, v in samples.items()}
    for name, op in ops.items():
        c, p = best[f"C {op}"], best[name]
        rows.append({"op": name, "python_us": p * 1e6, "c_api_us": c * 1e6, "overhead_us": (p - c) * 1e6,
                     "ratio": p / c})
    c = best["C matmul"]
    p = best["t @ u (operator, routed)"]
    rows.append({"op": "t @ u (operator, routed)", "python_us": p * 1e6, "c_api_us": c * 1e6,
                 "overhead_us": (p - c) * 1e6, "ratio": p / c})
    return rows


def large_matmul(f, sizes, contract, rounds):
    """Each round: one Python call, then one C call (the C program's tensors made once, before its first
    call), alternating, so both see the same machine; the figure is each side's best round."""
    rows = []
    rng = np.random.default_rng(2)
    cpu, ci = f.lane_index("cpu"), weft.CONTRACTS.index(contract)
    for n in sizes:
        a = rng.uniform(-1, 1, (n, n)).astype(np.float32)
        b = rng.uniform(-1, 1, (n, n)).astype(np.float32)
        py, cc = [], []
        f.matmul(a, b, contract=contract, lane="cpu")
        f._bench_c("matmul_host", a, b, 1, ci, cpu, 1)
        for _ in range(rounds):
            t0 = time.perf_counter()
            f.matmul(a, b, contract=contract, lane="cpu")
            py.append(time.perf_counter() - t0)
            cc.append(f._bench_c("matmul_host", a, b, 1, ci, cpu, 1))
        p, c = min(py), min(cc)
        rows.append({"n": n, "contract": contract, "python_ms": p * 1e3, "c_api_ms": c * 1e3, "ratio": p / c,
                     "python_median_ms": float(np.median(py)) * 1e3, "c_api_median_ms": float(np.median(cc)) * 1e3})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer calls and rounds (a smoke run)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    ap.add_argument("--sizes", default="512,1024", help="matrix sizes for part 3")
    args = ap.parse_args()
    calls, batches, rounds = (2000, 5, 3) if args.quick else (20000, 15, 15)
    f = weft.Fabric(calibration="off")
    weft.set_default_fabric(f)
    out = {
        "small": small_matmul(f, calls, batches),
        "resident": resident_overhead(f, calls, batches),
        "large": [r for c in ("exact", "fp32") for r in large_matmul(f, [int(s) for s in args.sizes.split(",")], c,
                                                                        rounds)],
        "lanes": f.lanes,
    }
    if args.json:
        print(json.dumps(out, indent=1))
        return
    print(f"weft {weft.library_version} from Python {sys.version.split()[0]}, numpy {np.__version__}; lanes "
          f"{', '.join(f.lanes)}")
    print("\n1. 4x4 matmul on numpy arrays (best batch, per call)")
    for r in out["small"]:
        print(f"  {r['case']:<44} {r['us']:7.2f} us  {r['vs_numpy']:5.2f}x numpy")
    print("\n2. an op on resident tensors, Python against the C API (CPU lane)")
    for r in out["resident"]:
        print(f"  {r['op']:<26} python {r['python_us']:6.2f} us  C {r['c_api_us']:6.2f} us  overhead "
              f"{r['overhead_us']:5.2f} us ({r['ratio']:.2f}x)")
    print("\n3. large matmuls on numpy arrays, Python against the C API (CPU lane)")
    for r in out["large"]:
        print(f"  n={r['n']:<5} {r['contract']:<6} python {r['python_ms']:9.2f} ms  C {r['c_api_ms']:9.2f} ms  "
              f"{r['ratio']:.3f}x  (medians {r['python_median_ms']:.2f} / {r['c_api_median_ms']:.2f} ms)")
    f.close()


if __name__ == "__main__":
    main()
