"""summary.py - reads the RESULT lines of bench_cuda and torch_compare.py (files given as arguments) and prints
weft's CUDA figures next to cuBLAS's and PyTorch's, with the ratios and the targets.

Usage: python3 summary.py bench_cuda.log torch_compare.log
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


def main():
    r = load(sys.argv[1:])

    def g(k):
        return r.get(k)

    def fmt(v, unit=""):
        return "-" if v is None else f"{v:.3g}{unit}"

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
        ("host->host exact n=4096", fmt(g("h2h_exact_ms"), " ms"), fmt(g("torch_h2h_fp32_ms"), " ms (torch fp32)"),
         ratio(g("torch_h2h_fp32_ms"), g("h2h_exact_ms")) + " faster", "<= 8 ms"),
        ("  of which: 2 writes / matmul call / read", "/".join(fmt(g(k)) for k in ("h2h_exact_write_ms", "h2h_exact_op_ms",
                                                                                  "h2h_exact_read_ms")) + " ms",
         fmt(g("memcpy_64mib_ms"), " ms per 64 MiB memcpy"), "", ""),
        ("host->host tf32 n=4096", fmt(g("h2h_tf32_ms"), " ms"), fmt(g("torch_h2h_tf32_ms"), " ms (torch tf32)"),
         ratio(g("torch_h2h_tf32_ms"), g("h2h_tf32_ms")) + " faster", "<= 5 ms"),
        ("  of which: 2 writes / matmul call / read", "/".join(fmt(g(k)) for k in ("h2h_tf32_write_ms", "h2h_tf32_op_ms",
                                                                                  "h2h_tf32_read_ms")) + " ms", "", "", ""),
        ("100 tiny ops in a scope, per op", fmt(g("tiny_scope_us"), " us"), fmt(g("torch_tiny_graph_us"), " us (torch graph)"),
         ratio(g("tiny_scope_us"), g("torch_tiny_graph_us")), "<= 1 us"),
        ("tiny op, launch + sync each", fmt(g("tiny_sync_us"), " us"), fmt(g("torch_tiny_sync_us"), " us (torch)"),
         ratio(g("tiny_sync_us"), g("torch_tiny_sync_us")), ""),
        ("tiny op, one sync for 100", fmt(g("tiny_onesync_us"), " us"), "", "", ""),
        ("CPU/GPU crossover, measured (exact)", fmt(g("crossover_measured_exact")), fmt(g("torch_crossover_fp32"), " (torch fp32)"),
         "", ""),
        ("CPU/GPU crossover, measured (tf32)", fmt(g("crossover_measured_tf32")), "", "", ""),
        ("CPU/GPU crossover, router (exact)", fmt(g("crossover_router_exact")), "", "", ""),
        ("SIMT/tensor crossover, resident (tf32 vs fp32)", fmt(g("crossover_simt_tensor")), "", "", ""),
    ]
    w = [max(len(row[i]) for row in rows) for i in range(5)]
    head = ("figure", "weft", "against", "ratio", "target")
    w = [max(w[i], len(head[i])) for i in range(5)]
    print("  ".join(head[i].ljust(w[i]) for i in range(5)))
    for row in rows:
        print("  ".join(row[i].ljust(w[i]) for i in range(5)))


if __name__ == "__main__":
    main()
