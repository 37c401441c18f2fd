"""python -m weft devices | bench: the CLI's two everyday commands from the Python package."""

import argparse
import sys

from . import Fabric, InvalidArgumentError, WeftError, bench, bench_table, devices, library_path, library_version


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m weft", description="weft from Python")
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("devices", help="list the lanes found here and why others are absent")
    d.add_argument("--lanes", default=None, help="lane kinds or names to look for (default: all)")
    b = sub.add_parser("bench", help="time square matmuls on every lane, numpy arrays in and out")
    b.add_argument("--sizes", default="16,32,64,128,256,512,1024", help="comma-separated sizes")
    b.add_argument("--contract", default="exact", choices=["exact", "fp32"])
    b.add_argument("--lanes", default=None)
    b.add_argument("--repeats", type=int, default=5)
    b.add_argument("--max-seconds", type=float, default=2.0)
    b.add_argument("--numpy", action="store_true", help="add numpy's a @ b as a row")
    args = p.parse_args(argv)

    if args.command == "devices":
        print(f"weft {library_version} ({library_path})")
        print(devices(args.lanes))
        return 0
    try:
        sizes = [int(s) for s in args.sizes.split(",")]
    except ValueError:
        p.error(f"--sizes wants whole numbers separated by commas (64,128,256), got {args.sizes!r}")
    try:
        with Fabric(lanes=args.lanes, calibration="off") as f:
            rows = bench(sizes, args.contract, repeats=args.repeats, max_seconds=args.max_seconds, numpy=args.numpy,
                         fabric=f)
    except InvalidArgumentError as e:  # a bad size, repeat count or budget: a usage error, exit 2 as weft's
        p.error(str(e))
    except WeftError as e:  # the fabric could not open (no such lane), ...: it ran and failed, exit 1
        print(f"python -m weft bench: {e}", file=sys.stderr)
        return 1
    print(bench_table(rows))
    for r in rows:
        if r["skipped"]:
            print(f"{r['lane']} n={r['n']}: skipped, {r['skipped']}")
    return 1 if any(r["check"] == "differs" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
