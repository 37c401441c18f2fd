#!/usr/bin/env python3
"""Matmul routing: where weft runs a matmul as it grows, and why.

For square matmuls from 4 to 1024 (numpy arrays in and out, numpy.matmul's rules) this asks the router
where each would run and what every lane is predicted to cost, runs it, and checks the result against
numpy. Then the same chain on resident tensors: the operands stay on the lane between ops, so the
router stops charging their transfer, and @ reads like numpy.

    PYTHONPATH=python python3 python/examples/matmul_routing.py [--lanes cpu,vulkan] [--sizes 4,64,512]
"""

import argparse
import time

import numpy as np

import weft


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lanes", default=None, help="lane kinds or names to open (default: every lane found)")
    p.add_argument("--sizes", default="4,16,64,256,1024")
    p.add_argument("--calibration", default="auto", choices=["auto", "force", "off"])
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    ran = []
    with weft.Fabric(lanes=args.lanes, calibration=args.calibration) as f:
        print(f.devices(), "\n")
        for n in (int(s) for s in args.sizes.split(",")):
            a = rng.uniform(-1, 1, (n, n)).astype(np.float32)
            b = rng.uniform(-1, 1, (n, n)).astype(np.float32)
            plan = f.route_explain("matmul", a, b)
            t0 = time.perf_counter()
            c = f.matmul(a, b)
            dt = time.perf_counter() - t0
            err = float(np.max(np.abs(c - a @ b)))
            print(f"n={n:<5} ran on {f.last_lane:<10} in {dt * 1e3:8.3f} ms  (max |c - numpy| = {err:.2e})")
            print("   " + str(plan).replace("\n", "\n   "))
            ran.append((n, f.last_lane))
        # resident: x stays where the first op put it
        x = f.tensor(rng.uniform(-1, 1, (256, 256)).astype(np.float32))
        w = f.tensor(rng.uniform(-1, 1, (256, 256)).astype(np.float32) / 16)
        with f.scope():
            h = f.relu(x @ w) @ w.T
        print(f"\nresident chain relu(x @ w) @ w.T: {h!r}")
        print(f"last routed: {f.route_last().chosen}")
    return ran


if __name__ == "__main__":
    main()
