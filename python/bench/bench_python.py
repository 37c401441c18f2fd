#!/usr/bin/env python3
"""What weft costs from Python, against numpy in the same run.

1. Per-call overhead: weft.matmul on 4x4 arrays (routed and pinned, exact and fp32), on resident tensors, and
   the bare ctypes call, against numpy's a @ b. Batches of calls are interleaved case by case so that load
   from other processes hits every case alike; a figure is the best batch (the least disturbed), per call.
2. n = 1024 matmul: weft.matmul (exact and fp32) on numpy arrays, against numpy's a @ b as Debian ships it
   and with OPENBLAS_CORETYPE set. Each numpy setting runs in a subprocess of its own, because OpenBLAS reads
   the variable once, when it loads; the subprocesses stay up and time one a @ b when asked, so the cases
   run in rounds of blocks and share whatever else the machine is doing. The override is SkylakeX where the
   CPU has AVX-512 (avx512f in /proc/cpuinfo) and Haswell otherwise: OpenBLAS's SkylakeX kernels would fault
   on a CPU without AVX-512.
   threadpoolctl (python3-threadpoolctl), when present, reports the core OpenBLAS actually runs.

    PYTHONPATH=python python3 python/bench/bench_python.py [--quick] [--json]
"""

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import weft  # noqa: E402

NUMPY_CHILD = r"""
import json, sys, time
import numpy as np
n = int(sys.argv[1])
info = {}
try:
    import threadpoolctl
    for p in threadpoolctl.threadpool_info():
        if p.get("internal_api") == "openblas":
            info = {"core": p.get("architecture"), "threads": p.get("num_threads"), "version": p.get("version")}
except ImportError:
    info = {"core": "? (threadpoolctl not installed)"}
rng = np.random.default_rng(1)
a = rng.uniform(-1, 1, (n, n)).astype(np.float32)
b = rng.uniform(-1, 1, (n, n)).astype(np.float32)
a @ b
print(json.dumps(info), flush=True)
for line in sys.stdin:  # one timed a @ b per line the parent sends
    t0 = time.perf_counter(); a @ b; dt = time.perf_counter() - t0
    print(dt, flush=True)
"""


def cpu_has_avx512():
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and " avx512f" in line for line in f)
    except OSError:
        return False


class NumpyChild:
    """numpy in a process of its own (OPENBLAS_CORETYPE is read once, when OpenBLAS loads), timing one a @ b
    each time it is asked, so that its runs interleave with the parent's."""

    def __init__(self, n, coretype):
        env = dict(os.environ)
        env.pop("OPENBLAS_CORETYPE", None)
        if coretype:
            env["OPENBLAS_CORETYPE"] = coretype
        self.proc = subprocess.Popen([sys.executable, "-c", NUMPY_CHILD, str(n)], env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"numpy with OPENBLAS_CORETYPE={coretype} did not start")
        self.info = json.loads(line)

    def run(self):
        self.proc.stdin.write("run\n")
        self.proc.stdin.flush()
        return float(self.proc.stdout.readline())

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


def per_call(cases, calls, batches):
    """{name: (best, median) seconds per call}, batches of every case interleaved."""
    samples = {name: [] for name in cases}
    for fn in cases.values():
        for _ in range(max(100, calls // 20)):
            fn()
    for _ in range(batches):
        for name, fn in cases.items():
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            samples[name].append((time.perf_counter() - t0) / calls)
    return {name: (min(s), float(np.median(s))) for name, s in samples.items()}


def overhead_table(calls, batches):
    f = weft.default_fabric()
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (4, 4)).astype(np.float32)
    b = rng.uniform(-1, 1, (4, 4)).astype(np.float32)
    weft.matmul(a, b)  # opens the default fabric; calibrates first if routing must choose between lanes
    weft.matmul(a, b, contract="fp32")
    routed_to = f.last_lane
    ta, tb, tc = f.tensor(a), f.tensor(b), f.zeros((4, 4))
    lib, d = weft._lib.lib, weft._lib.OpDesc()
    d.contract, d.lane = 0, f.lane_index("cpu")
    mm, fp, ha, hb, hc = lib.weft_op_matmul, f._ptr, ta._h, tb._h, tc._h
    cases = {
        "numpy a @ b": lambda: a @ b,
        f"weft.matmul(a, b) exact, routed ({routed_to})": lambda: weft.matmul(a, b),
        "weft.matmul(a, b, contract='fp32')": lambda: weft.matmul(a, b, contract="fp32"),
        "weft.matmul(a, b, lane='cpu')": lambda: weft.matmul(a, b, lane="cpu"),
        "fabric.matmul(ta, tb, out=tc) resident": lambda: f.matmul(ta, tb, out=tc),
        "bare ctypes weft_op_matmul (floor)": lambda: mm(fp, d, ha, 0, hb, 0, hc),
    }
    res = per_call(cases, calls, batches)
    base = res["numpy a @ b"][0]
    rows = [{"case": name, "best_us": best * 1e6, "median_us": med * 1e6, "vs_numpy": best / base}
            for name, (best, med) in res.items()]
    return rows


def big_table(n, repeats, rounds):
    """Rounds of blocks of `repeats` runs per case (weft exact, weft fp32, each numpy setting); medians and
    bests per case over every run."""
    f = weft.default_fabric()
    rng = np.random.default_rng(1)
    a = rng.uniform(-1, 1, (n, n)).astype(np.float32)
    b = rng.uniform(-1, 1, (n, n)).astype(np.float32)
    override = "SkylakeX" if cpu_has_avx512() else "Haswell"
    children = {}
    notes = {}
    for name, coretype in (("numpy, as Debian ships it", None), (f"numpy, OPENBLAS_CORETYPE={override}", override)):
        try:
            children[name] = NumpyChild(n, coretype)
            info = children[name].info
            notes[name] = f"OpenBLAS core {info.get('core')}" + (f", {info['threads']} threads" if info.get("threads") else "")
        except (RuntimeError, ValueError, OSError) as e:
            notes[name] = f"failed: {e}"
    cases = {}
    for contract in ("exact", "fp32"):
        weft.matmul(a, b, contract=contract)  # warm-up, and which lane the router picks
        cases[f"weft.matmul {contract} ({f.last_lane})"] = (lambda c=contract: _timed(weft.matmul, a, b, contract=c))
    for name, child in children.items():
        cases[name] = child.run
    # Blocks of runs per case, a pause between blocks, rounds of blocks. Thread pools spin for a while after
    # their work (OpenBLAS about 0.1 s, weft's 0.3 ms) before they sleep: run back to back, one process's
    # spinning threads would slow the next case down. The rounds share out the machine's other load.
    times = {name: [] for name in cases}
    for _ in range(rounds):
        for name, run in cases.items():
            time.sleep(0.3)
            run()  # wakes the case's threads; not counted
            for _ in range(repeats):
                times[name].append(run())
    for child in children.values():
        child.close()
    exact_result = weft.matmul(a, b)
    rows = []
    for name in list(cases) + [k for k in notes if k not in cases]:
        t = times.get(name)
        rows.append({"case": name, "seconds": float(np.median(t)) if t else None, "best": min(t) if t else None,
                     "note": notes.get(name, "")})
    base = next((r for r in rows if r["case"] == "numpy, as Debian ships it" and r["seconds"]), None)
    for r in rows:
        r["gflops"] = 2.0 * n ** 3 / r["best"] * 1e-9 if r["best"] else None
        r["vs_numpy"] = r["best"] / base["best"] if r["best"] and base else None
        r["median_vs_numpy"] = r["seconds"] / base["seconds"] if r["seconds"] and base else None
    ref64 = a.astype(np.float64) @ b.astype(np.float64)
    err = float(np.max(np.abs(exact_result - ref64)))
    return rows, err


def _timed(fn, *args, **kwargs):
    t0 = time.perf_counter()
    fn(*args, **kwargs)
    return time.perf_counter() - t0


def main():
    p = argparse.ArgumentParser(description="weft from Python against numpy")
    p.add_argument("--quick", action="store_true", help="fewer calls and runs (a smoke run, noisy figures)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.add_argument("-n", type=int, default=1024, help="size of the large matmul (default 1024)")
    args = p.parse_args()
    calls, batches, repeats, rounds = (2000, 3, 3, 1) if args.quick else (20000, 9, 5, 3)

    small = overhead_table(calls, batches)
    big, err = big_table(args.n, repeats, rounds)
    if args.json:
        print(json.dumps({"library": weft.library_version, "lanes": weft.default_fabric().lanes,
                          "overhead_4x4": small, "matmul_n": args.n, "matmul": big, "exact_max_abs_err_vs_f64": err},
                         indent=2))
        return
    print(f"weft {weft.library_version} ({weft.library_path}), lanes: {', '.join(weft.default_fabric().lanes)}; "
          f"numpy {np.__version__}; python {sys.version.split()[0]}")
    print(f"\nper-call cost of a 4x4 matmul: best of {batches} interleaved batches of {calls} calls (median beside)")
    w = max(len(r["case"]) for r in small)
    print(f"  {'case':<{w}}  {'us/call':>8}  {'median':>8}  {'vs numpy':>8}")
    for r in small:
        print(f"  {r['case']:<{w}}  {r['best_us']:8.2f}  {r['median_us']:8.2f}  {r['vs_numpy']:7.1f}x")
    print(f"\nn = {args.n} matmul, numpy float32 arrays in and out: {rounds} rounds of {repeats} runs per case, "
          "best and median")
    w = max(len(r["case"]) for r in big)
    print(f"  {'case':<{w}}  {'best ms':>8}  {'GFLOP/s':>8}  {'vs numpy':>8}  {'median ms':>9}  {'vs numpy':>8}  notes")
    for r in big:
        if r["seconds"] is None:
            print(f"  {r['case']:<{w}}  {'-':>8}  {'-':>8}  {'-':>8}  {'-':>9}  {'-':>8}  {r['note']}")
            continue
        print(f"  {r['case']:<{w}}  {r['best'] * 1e3:8.2f}  {r['gflops']:8.1f}  {r['vs_numpy']:7.2f}x  "
              f"{r['seconds'] * 1e3:9.2f}  {r['median_vs_numpy']:7.2f}x  {r['note']}")
    print(f"\nexact result: max |c - float64 a.b| = {err:.3g}")


if __name__ == "__main__":
    main()
