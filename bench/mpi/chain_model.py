#!/usr/bin/env python3
"""chain_model.py - a model (not a measurement) of the chained exact reduction at 8..1024 ranks against a
ring all-reduce, for GPT-2 124M's gradient (124,439,808 floats, 497.8 MB) on a 100 Gb/s network.

  link: t(bytes) = alpha + bytes / BW, BW = 12.5 GB/s each way (full duplex), alpha = 2 us a message
  ring all-reduce (reduce-scatter + all-gather):   2 (R-1) (alpha + S / (R BW))
  chain, P chunks, then a pipelined chain broadcast back (weft's first design: the broadcast after the chain):
                                                   2 (P + R - 2) (alpha + S / (P BW))
  chain with the broadcast overlapped (as weft runs it: each final chunk sent back down the chain as soon as
  it is final; the links carry the running sums one way and the results the other):
                                                   (P + 2 (R - 1) - 1) (alpha + S / (P BW))
The chain's adds are the ranks' own matmul_acc steps of the backward pass, so compute is left out of both.
Prints, per R: the ring's time; the chain's best P and time, the ratio; the smallest and largest P that keep
the chain within 1.2x of the ring; and the share of the chain's time that is latency (the alpha terms).
weft's chunks are 256 Ki floats (1 MiB) up to 64 ranks, then halved for each doubling of the job down to 16 Ki
(src/sched/chain.c, chunk_floats): this gradient goes in P = 475 of them up to 64 ranks, 7596 at 1024. The
last column is the chain at weft's P (until 2026-12-02 weft used 64 Ki floats at any size: P = 1899)."""
import math

S = 124439808 * 4
BW = 12.5e9
ALPHA = 2e-6


def weft_p(r):
    c = 1 << 18
    k = 64
    while k < r and c > (1 << 14):
        c //= 2
        k *= 2
    return math.ceil(S / 4 / c)



def ring(r):
    return 2 * (r - 1) * (ALPHA + S / (r * BW))


def chain(r, p, overlap=False):
    t = ALPHA + S / (p * BW)
    return (p + 2 * (r - 1) - 1) * t if overlap else 2 * (p + r - 2) * t


def best_p(r, overlap=False):
    # d/dP of (P + c)(alpha + S/(P BW)) = 0 at P = sqrt(c S / (alpha BW))
    c = 2 * (r - 1) - 1 if overlap else r - 2
    p0 = max(1, int(math.sqrt(max(c, 1) * S / (ALPHA * BW))))
    cands = [p for p in range(max(1, p0 // 2), 2 * p0 + 2)]
    return min(cands, key=lambda p: chain(r, p, overlap))


def within(r, limit, overlap=False):
    lo = hi = None
    target = limit * ring(r)
    for p in (int(1.05 ** i) for i in range(1, 400)):
        if chain(r, p, overlap) <= target:
            lo = p if lo is None else lo
            hi = p
    return lo, hi


print("S = %.1f MB, BW = %.1f GB/s, alpha = %.0f us; S / BW = %.1f ms" % (S / 1e6, BW / 1e9, ALPHA * 1e6, S / BW * 1e3))
for overlap in (False, True):
    print()
    print("chain, then the broadcast (the first design)" if not overlap
          else "chain with the broadcast overlapped (as weft runs it)")
    print("%6s %10s %8s %10s %7s %16s %10s %14s" % ("ranks", "ring ms", "best P", "chain ms", "/ring", "P within 1.2x",
                                                  "latency %", "weft's P /ring"))
    for r in (8, 16, 32, 64, 128, 256, 512, 1024):
        p = best_p(r, overlap)
        t = chain(r, p, overlap)
        lo, hi = within(r, 1.2, overlap)
        lat = (p + 2 * (r - 1) - 1) * ALPHA if overlap else 2 * (p + r - 2) * ALPHA
        rng = "%d..%d" % (lo, hi) if lo else "none"
        print("%6d %10.1f %8d %10.1f %7.2f %16s %9.0f%% %6d %5.2fx" % (r, ring(r) * 1e3, p, t * 1e3, t / ring(r), rng,
                                                              100 * lat / t, weft_p(r), chain(r, weft_p(r), overlap) / ring(r)))

