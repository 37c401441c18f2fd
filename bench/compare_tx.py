#!/usr/bin/env python3
"""compare_tx.py - the CPU lane's transformer ops against PyTorch CPU, op by op, in one run.

    bench/compare_tx.py BUILD_DIR [T ...]        (T default 64 256 1024)

Starts bench_tx --serve (weft through the public API, exact and fp32 in turn) and bench_tx_torch.py --serve
(PyTorch, every form of each op: plain, foreach, fused, SDPA where this torch has them) twice: with torch's
default OpenMP settings, timed at every CPU and at 1 thread, and with OMP_WAIT_POLICY=PASSIVE at every CPU
(OpenMP's spinning workers fight other processes for a small machine's cores); both with OPENBLAS_CORETYPE
set to the best core type this CPU runs (SkylakeX with AVX-512, else Haswell: Debian's OpenBLAS may not know
the CPU). For each T and op, ROUNDS rounds (default 5) ask each of them in turn, so load from other work on
the machine falls on all of them alike (with a pause of 50 ms before each request, for the workers of the
one before, which spin a while, to sleep); each answer is the best of several calls. Prints per op and T the
median over the rounds: PyTorch at its best (the fastest form and setting, by median; named), weft exact and
weft fp32, and their ratios torch ms / weft ms (above 1 weft is faster). Then attention_decode_ratio: weft's
fused attention over a cache of T positions over attention_cached of its last row (no PyTorch peer).
PYTHON is the interpreter for PyTorch's side (default: this one); WEFT_BENCH_THREADS weft's threads (default
every CPU). Exits 77 without PyTorch."""
import os
import statistics
import subprocess
import sys
import time

OPS = ["embedding_fwd", "embedding_bwd", "layernorm_fwd", "layernorm_bwd", "gelu_fwd", "gelu_bwd", "adamw",
       "attention_fwd", "attention_bwd", "softmax_fwd", "softmax_bwd", "crossentropy_fwd", "crossentropy_bwd"]
DECODE = ["attention_decode_fused", "attention_decode_cached"]


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: compare_tx.py BUILD_DIR [T ...]")
    build, Ts = sys.argv[1], [int(a) for a in sys.argv[2:]] or [64, 256, 1024]
    here = os.path.dirname(os.path.abspath(__file__))
    py = os.environ.get("PYTHON", sys.executable)
    rounds = int(os.environ.get("ROUNDS", "5"))
    if subprocess.run([py, "-c", "import torch"], capture_output=True).returncode != 0:
        print(f"compare_tx: PyTorch not importable by {py} (Debian: apt-get install python3-torch); "
              "nothing to compare", file=sys.stderr)
        sys.exit(77)
    ncpu = os.cpu_count() or 1
    nth = int(os.environ.get("WEFT_BENCH_THREADS", "0")) or ncpu
    avx512 = "avx512f" in open("/proc/cpuinfo").read()
    env = dict(os.environ, OPENBLAS_CORETYPE="SkylakeX" if avx512 else "Haswell")
    weft = subprocess.Popen([os.path.join(build, "bench", "bench_tx"), "--serve"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=dict(os.environ, WEFT_BENCH_THREADS=str(nth)))
    torch_script = os.path.join(here, "bench_tx_torch.py")
    peers = [("", subprocess.Popen([py, torch_script, "--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   text=True, env=dict(env, TORCH_THREADS=f"{nth},1" if nth > 1 else "1")))]
    if nth > 1:
        peers.append(("passive", subprocess.Popen(
            [py, torch_script, "--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            env=dict(env, TORCH_THREADS=str(nth), OMP_WAIT_POLICY="PASSIVE"))))
    ver = subprocess.run([py, "-c", "import torch; print(torch.__version__, torch.get_num_threads())"],
                         capture_output=True, text=True).stdout.split()
    load = open("/proc/loadavg").read().split()[:3]
    print(f"compare_tx: {rounds} rounds per op; weft at {nth} threads; torch {ver[0]} (default {ver[1]} threads) at "
          f"{nth} and 1 thread, and at {nth} with OMP_WAIT_POLICY=PASSIVE, OPENBLAS_CORETYPE="
          f"{env['OPENBLAS_CORETYPE']}; load average before: {' '.join(load)}", flush=True)

    def ask_weft(op, T, contract):
        time.sleep(0.05)  # OpenMP's and OpenBLAS's workers spin a while after PyTorch's calls
        weft.stdin.write(f"{op} {T} {contract}\n")
        weft.stdin.flush()
        return float(weft.stdout.readline().split()[2])

    def ask_torch(tag, proc, op, T):
        time.sleep(0.05)  # and the other server's
        proc.stdin.write(f"{op} {T}\n")
        proc.stdin.flush()
        out = {}
        for line in proc.stdout:
            if line.strip() == "done":
                break
            form, _, ms = line.split()
            out[form + ("," + tag if tag else "")] = float(ms)
        return out

    weft_ms, torch_ms = {}, {}
    for T in Ts:
        for op in OPS + DECODE:
            for r in range(rounds):
                for c in ("exact", "fp32"):
                    weft_ms.setdefault((op, T, c), []).append(ask_weft(op, T, c))
                if op in DECODE:
                    continue
                for tag, proc in peers:
                    for form, ms in ask_torch(tag, proc, op, T).items():
                        torch_ms.setdefault((op, T), {}).setdefault(form, []).append(ms)
    for _, proc in [("", weft)] + peers:
        proc.stdin.close()
        proc.wait()
    load = open("/proc/loadavg").read().split()[:3]
    print(f"compare_tx: load average after: {' '.join(load)}")
    print(f"{'op':<18} {'T':>5} {'torch ms':>10} {'(torch form@threads)':<30} {'exact ms':>9} {'ratio':>6} "
          f"{'fp32 ms':>9} {'ratio':>6}")
    med = statistics.median
    for T in Ts:
        for op in OPS:
            forms = {f: med(v) for f, v in torch_ms.get((op, T), {}).items()}
            if not forms:
                continue
            best = min(forms, key=forms.get)
            e, f = med(weft_ms[(op, T, "exact")]), med(weft_ms[(op, T, "fp32")])
            t = forms[best]
            print(f"{op:<18} {T:>5} {t:>10.3f} {'(' + best + ')':<30} {e:>9.3f} {t / e:>6.2f} {f:>9.3f} {t / f:>6.2f}")
            if os.environ.get("SHOW_FORMS"):
                print("    " + "  ".join(f"{k} {v:.3f}" for k, v in sorted(forms.items())))
    for T in Ts:
        for c in ("exact", "fp32"):
            fu, ca = med(weft_ms[(DECODE[0], T, c)]), med(weft_ms[(DECODE[1], T, c)])
            print(f"attention_decode_ratio T={T} {c}: fused {fu:.3f} ms / cached {ca:.3f} ms = {fu / ca:.1f}")


if __name__ == "__main__":
    main()
