"""summary.py - reads the RESULT lines of bench_cuda and torch_compare.py (files given as arguments) and prints
weft's CUDA figures next to their peers', with the ratios and the goals.

Two tables: the host data path and tiny ops against PyTorch's variants (every ratio is weft's time over the
peer's: below 1 weft is faster), then (unless --host) the kernels against cuBLAS and PyTorch.

Usage: python3 summary.py [--host] bench_cuda.log torch_compare.log
"""
import sys


def load(paths):
    r = {}
    for p in paths:
        try:
            with open(p) as f:
                for line in f:
                    parts = line.split()
                    if len(parts) == 3 and parts[0] == "RESULT":
                        r[parts[1]] = float(parts[2])
        except OSError as e:
            print(f"(could not read {p}: {e})")
    return r


def fmt(v, unit=""):
    return "-" if v is None else f"{v:.3g}{unit}"


def table(rows, head):
    w = [max(len(str(row[i])) for row in rows + [head]) for i in range(len(head))]
    print("  ".join(head[i].ljust(w[i]) for i in range(len(head))).rstrip())
    for row in rows:
        print("  ".join(str(row[i]).ljust(w[i]) for i in range(len(head))).rstrip())


def host_table(r):
    g = r.get
    rows = []

    def row(what, wks, pk, peer, goal=""):
        """wks: one key, or several (calls 1, 2, 3) shown as a / b / c against the same peer."""
        wks = [wks] if isinstance(wks, str) else wks
        p = g(pk)
        ws = [g(k) for k in wks]
        rts = [None if w is None or p is None or p == 0 else w / p for w in ws]
        verdict = ""
        if goal and all(x is not None for x in rts):
            verdict = " met" if max(rts) <= float(goal.split()[-1]) else " NOT met"
        rows.append((what, " / ".join(fmt(w) for w in ws), fmt(p), peer,
                     " / ".join("-" if x is None else f"{x:.2f}" for x in rts), goal + verdict))

    print("Host arrays -> host result, n = 4096 (ms), and tiny ops (us per op).")
    print("ratio = weft's time / the peer's (below 1: weft is faster); a/b/c = calls 1, 2, 3 on fresh arrays.")
    for c, tc in (("exact", "fp32"), ("tf32", "tf32")):
        row(f"ordinary path, {c} (C)", f"h2h_ord_{c}_ms", f"torch_{tc}_pinned_nb_ms",
            f"torch {tc}: pinned buffers, non_blocking", "<= 1")
        row(f"ordinary path, {c} (Python)", f"weft_py_ord_{c}_ms", f"torch_{tc}_pinned_nb_ms",
            f"torch {tc}: pinned buffers, non_blocking", "<= 1")
        row(f"arrays wrapped each call, {c} (Python)", f"weft_py_wrap_{c}_ms", f"torch_{tc}_pinned_nb_ms",
            f"torch {tc}: pinned buffers, non_blocking")
        row(f"ordinary path, {c} (C)", f"h2h_ord_{c}_ms", f"torch_{tc}_pinned_view_ms",
            f"torch {tc}: same, result left pinned")
        row(f"ordinary path, {c} (C)", f"h2h_ord_{c}_ms", f"torch_{tc}_pageable_ms", f"torch {tc}: pageable arrays")
        row(f"wrapped arrays, {c}", f"h2h_wrap_{c}_ms", f"limit_{c}_ms", "limit: bus || resident matmul",
            "<= 1.1")
        row(f"wrapped arrays, {c}", f"h2h_wrap_{c}_ms", f"floor_{c}_ms", "floor: b up + matmul + c block down")
        row(f"wrapped arrays, {c}", f"h2h_wrap_{c}_ms", f"torch_{tc}_pinned_in_ms", f"torch {tc}: inputs pinned")
        for path, pn in (("wrapped", "wrap"), ("ordinary", "ord")):
            row(f"{path}, {c}: first calls", [f"h2h_first{i}_{pn}_{c}_ms" for i in (1, 2, 3)], f"h2h_{pn}_{c}_ms",
                "its steady state", "<= 2")
        row(f"torch {tc} pinned: first calls", [f"torch_{tc}_pinned_nb_first{i}_ms" for i in (1, 2, 3)],
            f"torch_{tc}_pinned_nb_ms", "its steady state")
    row("wrapped, exact: process's calls", [f"h2h_cold{i}_wrap_exact_ms" for i in (1, 2, 3)], "h2h_wrap_exact_ms",
        "its steady state")
    row("100 adds in a scope (C loop)", "tiny_scope_us", "torch_tiny_graph_us", "torch CUDA graph, unfused")
    row("100 adds in a scope (C loop)", "tiny_scope_us", "torch_tiny_compiled_us", "torch.compile, fused, graph")
    row("100 adds in a scope (Python)", "weft_py_tiny_scope_us", "torch_tiny_graph_us", "torch CUDA graph, unfused")
    row("100 adds in a scope (Python)", "weft_py_tiny_scope_us", "torch_tiny_compiled_us",
        "torch.compile, fused, graph")
    row("100 adds, one sync (Python)", "weft_py_tiny_onesync_us", "torch_tiny_onesync_us", "torch loop, one sync")
    row("add, sync each (Python)", "weft_py_tiny_sync_us", "torch_tiny_sync_us", "torch loop, sync each")
    table(rows, ("figure", "weft", "peer", "peer is", "ratio", "goal"))


def full_table(r):
    def g(k):
        return r.get(k)

    def ratio(a, b):
        return "-" if a is None or b is None or b == 0 else f"{a / b:.2f}x"

    rows = [
        ("exact matmul n=1024, resident", fmt(g("exact_tflops_1024"), " TF/s"), "", "", ""),
        ("exact matmul n=2048, resident", fmt(g("exact_tflops_2048"), " TF/s"), "", "", ""),
        ("exact matmul n=4096, resident", fmt(g("exact_tflops_4096"), " TF/s"),
         fmt(g("torch_fp32_tflops_4096"), " TF/s (torch fp32)"), ratio(g("exact_tflops_4096"), g("torch_fp32_tflops_4096")),
         ">= 25 TF/s"),
        ("fp32 (cuBLAS sgemm) n=4096", fmt(g("fp32_tflops_4096"), " TF/s"), fmt(g("torch_fp32_tflops_4096"), " TF/s (torch)"),
         ratio(g("fp32_tflops_4096"), g("torch_fp32_tflops_4096")), ""),
    ]
    for c in ("tf32", "bf16"):
        for n in (4096, 8192):
            rows.append((f"tensor {c} n={n}", fmt(g(f"{c}_tflops_{n}"), " TF/s"),
                         fmt(g(f"{c}_cublas_tflops_{n}"), " TF/s (cuBLAS)"),
                         ratio(g(f"{c}_tflops_{n}"), g(f"{c}_cublas_tflops_{n}")), ">= 0.9x cuBLAS"))
            rows.append((f"  torch {c} n={n}", fmt(g(f"torch_{c}_tflops_{n}"), " TF/s"), "", "", ""))
    rows += [
        ("tiny op, one sync for 100 (C loop)", fmt(g("tiny_onesync_us"), " us"), "", "", ""),
        ("CPU/GPU crossover, measured (exact)", fmt(g("crossover_measured_exact")), fmt(g("torch_crossover_fp32"), " (torch fp32)"),
         "", ""),
        ("CPU/GPU crossover, measured (tf32)", fmt(g("crossover_measured_tf32")), "", "", ""),
        ("CPU/GPU crossover, router (exact)", fmt(g("crossover_router_exact")), "", "", ""),
        ("SIMT/tensor crossover, resident (tf32 vs fp32)", fmt(g("crossover_simt_tensor")), "", "", ""),
    ]
    print()
    print("Kernels (ratio: weft's speed / the peer's):")
    table([list(x) for x in rows], ("figure", "weft", "against", "ratio", "target"))


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    r = load(args)
    host_table(r)
    if "--host" not in sys.argv:
        full_table(r)


if __name__ == "__main__":
    main()
