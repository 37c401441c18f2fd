"""weft.bench: the `weft bench` sweep from Python. Square matmuls of growing size on every lane that honours
the contract, each run timed as a Python caller holding numpy arrays pays for it: both inputs written, the
matmul pinned to the lane, the result read back. A point is the median of the runs after one warm-up. Every
lane's result is checked against the first lane's: the same bits under exact, within the fp32 error bound
otherwise. numpy=True adds numpy's own a @ b as a row, checked the same way against the fp32 bound."""

import time

import numpy as np

DEFAULT_SIZES = (16, 32, 64, 128, 256, 512, 1024)
MAX_SIZE = 16384  # as `weft bench --sizes`
MAX_REPEATS = 1000  # as `weft bench --repeats` (WEFT_CLI_MAX_REPEATS)


def _same_bits(x, y):
    """Bit equality with every NaN counted equal to every other NaN (payloads differ between hardware)."""
    nx, ny = np.isnan(x), np.isnan(y)
    if not np.array_equal(nx, ny):
        return False
    return np.array_equal(np.where(nx, 0, x.view(np.uint32)), np.where(ny, 0, y.view(np.uint32)))


def _check(ref, got, k, exact):
    if exact:
        ok = _same_bits(ref, got)
    else:
        # two fp32 dot products of length k over inputs in [-1, 1], each off by at most k*k*u (u = 2^-24)
        ok = bool(np.all(np.abs(ref.astype(np.float64) - got.astype(np.float64)) <= 2.0 * k * k * 2.0 ** -24))
    diff = float(np.max(np.abs(ref - got))) if ref.size else 0.0
    return ("agrees" if ok else "differs"), diff


def _time_point(run, repeats, max_seconds):
    run()  # warm-up: first-touch allocation, lane buffers, kernel compilation
    times = []
    spent = 0.0
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        run()
        dt = time.perf_counter() - t0
        times.append(dt)
        spent += dt
        if spent > max_seconds:
            break
    return float(np.median(times)), len(times)


def bench(sizes=DEFAULT_SIZES, contract="exact", lanes=None, repeats=5, max_seconds=2.0, cpu_threads=0,
          numpy=False, fabric=None, seed=1):
    """Times square matmuls on every lane that honours `contract` and returns one dict per (size, lane):
    n, lane, contract, median_s, gflops, runs, check ("reference", "agrees", "differs", "alone"),
    max_abs_diff, and skipped (a reason, when the time budget left the point out: a lane skips the larger
    sizes once one of its points, scaled by the work, would take longer than max_seconds).

    sizes are whole numbers from 1 to 16384 (as `weft bench --sizes`), repeats 1 to 1000 and max_seconds a
    number above 0; anything else raises InvalidArgumentError before a fabric is opened.

    fabric: a Fabric to use (otherwise one is opened with `lanes` and `cpu_threads`, calibration off)."""
    from ._errors import InvalidArgumentError
    from ._fabric import Fabric

    def whole(v, lo, hi):
        return isinstance(v, (int, np.integer)) and not isinstance(v, bool) and lo <= v <= hi

    try:
        sizes = list(sizes)
    except TypeError:
        raise InvalidArgumentError(f"bench: sizes must be a sequence of whole numbers, not {type(sizes).__name__}") from None
    bad = [v for v in sizes if not whole(v, 1, MAX_SIZE)]
    if not sizes or bad:
        raise InvalidArgumentError(f"bench: sizes must be whole numbers from 1 to {MAX_SIZE}; got {bad[0] if bad else 'none'!r}")
    if not whole(repeats, 1, MAX_REPEATS):
        raise InvalidArgumentError(f"bench: repeats must be a whole number from 1 to {MAX_REPEATS}; got {repeats!r}")
    try:
        budget = float(max_seconds)
    except (TypeError, ValueError):
        budget = float("nan")
    if not (0 < budget < float("inf")):
        raise InvalidArgumentError(f"bench: max_seconds must be a number of seconds above 0; got {max_seconds!r}")

    from ._fabric import CONTRACTS, _contract_index, _named

    contract = CONTRACTS[_contract_index(contract, "bench")]  # an unknown one ran nothing and returned []
    if fabric is not None and not isinstance(fabric, Fabric):
        raise TypeError(f"bench: fabric must be a weft.Fabric (or None: one is opened), not {type(fabric).__name__}")
    own = fabric is None
    if own:
        fabric = _named("bench", Fabric, lanes, cpu_threads, "off")
    try:
        exact = contract == "exact"
        lanes_to_run = []
        for d in fabric.devices():
            if not d.failed and contract in d.contracts:
                lanes_to_run.append(d.name)
        if numpy:
            lanes_to_run.append("numpy")
        rng = np.random.default_rng(seed)
        rows = []
        last = {}  # lane -> (n, median): predicts the next point
        for n in sizes:
            n = int(n)
            a = rng.uniform(-1, 1, (n, n)).astype(np.float32)
            b = rng.uniform(-1, 1, (n, n)).astype(np.float32)
            ref = None
            for lane in lanes_to_run:
                row = {"n": n, "lane": lane, "contract": contract if lane != "numpy" else "fp32",
                       "median_s": None, "gflops": None, "runs": 0, "check": None, "max_abs_diff": None,
                       "skipped": None}
                rows.append(row)
                if lane in last:
                    pn, pt = last[lane]
                    predicted = pt * (n / pn) ** 3
                    if pt > max_seconds or predicted > max_seconds:
                        row["skipped"] = f"predicted {predicted:.3g} s a run, over the {max_seconds:g} s budget"
                        continue
                if lane == "numpy":
                    out = np.empty((n, n), np.float32)

                    def run(a=a, b=b, out=out):
                        np.matmul(a, b, out=out)
                else:
                    ta, tb, tc = fabric.zeros((n, n)), fabric.zeros((n, n)), fabric.zeros((n, n))
                    out = np.empty((n, n), np.float32)

                    def run(a=a, b=b, ta=ta, tb=tb, tc=tc, out=out, lane=lane):
                        ta.write(a)
                        tb.write(b)
                        fabric.matmul(ta, tb, contract=contract, lane=lane, out=tc)
                        tc.numpy(out=out)

                median, runs = _time_point(run, repeats, max_seconds)
                last[lane] = (n, median)
                row.update(median_s=median, gflops=2.0 * n ** 3 / median * 1e-9, runs=runs)
                if ref is None and lane != "numpy":
                    ref = out.copy()
                    row["check"] = "reference"
                elif ref is None:
                    row["check"] = "alone"
                else:
                    row["check"], row["max_abs_diff"] = _check(ref, out, n, exact and lane != "numpy")
            solo = [r for r in rows if r["n"] == n and r["check"] == "reference"]
            if solo and sum(1 for r in rows if r["n"] == n and r["median_s"] is not None) == 1:
                solo[0]["check"] = "alone"
        return rows
    finally:
        if own:
            fabric.close()


def bench_table(rows):
    """bench() rows as a text table: one line per size, ms and GFLOP/s per lane, and the check."""
    lanes = []
    for r in rows:
        if r["lane"] not in lanes:
            lanes.append(r["lane"])
    sizes = []
    for r in rows:
        if r["n"] not in sizes:
            sizes.append(r["n"])
    by = {(r["n"], r["lane"]): r for r in rows}
    width = {lane: max(21, len(lane)) for lane in lanes}
    contract = next((r["contract"] for r in rows if r["lane"] != "numpy"), "")
    out = [f"matmul n x n x n, contract {contract}: median ms and GFLOP/s, numpy arrays in and out",
           f"{'n':>6} | " + " | ".join(f"{lane:>{width[lane]}}" for lane in lanes) + " | check"]
    for n in sizes:
        cells, notes = [], []
        for lane in lanes:
            r = by.get((n, lane))
            if r is None or r["median_s"] is None:
                cells.append(f"{'-':>{width[lane]}}")
                continue
            flag = "!" if r["check"] == "differs" else ""
            cells.append(f"{r['median_s'] * 1e3:9.3f} {r['gflops']:9.2f}{flag:1}".rjust(width[lane]))
            if r["check"] == "differs":
                notes.append(f"{lane} DIFFERS (max |diff| {r['max_abs_diff']:g})")
        ran = [by[(n, lane)] for lane in lanes if (n, lane) in by and by[(n, lane)]["median_s"] is not None]
        lanes_ran = [r for r in ran if r["lane"] != "numpy"]
        if notes:
            check = "; ".join(notes)
        elif len(ran) < 2:
            check = "-"
        elif contract == "exact":
            parts = ["same bits"] if len(lanes_ran) > 1 else []
            if len(lanes_ran) < len(ran):
                parts.append("numpy within fp32 bound")
            check = ", ".join(parts)
        else:
            check = "within fp32 bound"
        out.append(f"{n:>6} | " + " | ".join(cells) + f" | {check}")
    return "\n".join(out)
