"""The canonical order of every op, transcribed into numpy float32 arithmetic (each multiply and add is its
own ufunc, so each is rounded on its own and nothing is fused): an independent statement of what the exact
contract promises, to hold every lane's bits against. Mirrors src/core/reference.c and src/core/wmath.c."""

import numpy as np

f32 = np.float32


def same_bits(x, y):
    """Bit equality, every NaN counted equal to every other NaN (payloads differ between hardware)."""
    x = np.asarray(x, f32)
    y = np.asarray(y, f32)
    if x.shape != y.shape:
        return False
    nx, ny = np.isnan(x), np.isnan(y)
    if not np.array_equal(nx, ny):
        return False
    return np.array_equal(np.where(nx, 0, x.view(np.uint32)), np.where(ny, 0, y.view(np.uint32)))


def matmul_loop(a, b):
    """The canonical order as the definition states it, one element at a time (small shapes only)."""
    m, k = a.shape
    n = b.shape[1]
    c = np.empty((m, n), f32)
    for i in range(m):
        for j in range(n):
            acc = f32(0)
            for q in range(k):
                acc = f32(acc + f32(a[i, q] * b[q, j]))
            c[i, j] = acc
    return c


def matmul(a, b, trans_a=False, trans_b=False):
    """The canonical order vectorised over the output elements: k ascending, product then sum, each rounded."""
    a = np.asarray(a, f32)
    b = np.asarray(b, f32)
    if trans_a:
        a = np.swapaxes(a, -1, -2)
    if trans_b:
        b = np.swapaxes(b, -1, -2)
    if a.ndim > 2:
        batch = a.shape[:-2]
        a2 = a.reshape((-1,) + a.shape[-2:])
        b2 = b.reshape((-1,) + b.shape[-2:]) if b.ndim > 2 else None
        out = [matmul(a2[p], b2[p] if b2 is not None else b) for p in range(a2.shape[0])]
        return np.array(out, f32).reshape(batch + (a.shape[-2], b.shape[-1]))
    m, k = a.shape
    acc = np.zeros((m, b.shape[1]), f32)
    for q in range(k):
        prod = np.multiply.outer(a[:, q], b[q, :])
        acc = acc + prod
    return acc


def matmul_numpy(a, b):
    """numpy.matmul's rules (1-D promotion and removal, broadcast batch dimensions, empty operands, k = 0 giving
    zeros) with the canonical order's bits in every element: a float32 result of numpy.matmul's shape."""
    a = np.asarray(a, f32)
    b = np.asarray(b, f32)
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    m, n = a2.shape[-2], b2.shape[-1]
    count = int(np.prod(batch, dtype=np.int64))
    A = np.broadcast_to(a2, batch + a2.shape[-2:]).reshape((count,) + a2.shape[-2:])
    B = np.broadcast_to(b2, batch + b2.shape[-2:]).reshape((count,) + b2.shape[-2:])
    out = np.zeros((count, m, n), f32)
    for p in range(count):
        out[p] = matmul(np.ascontiguousarray(A[p]), np.ascontiguousarray(B[p]))
    shape = batch + ((m,) if a.ndim > 1 else ()) + ((n,) if b.ndim > 1 else ())
    return out.reshape(shape)


def add(x, y):
    return np.asarray(x, f32) + np.asarray(y, f32)


def relu(x):
    x = np.asarray(x, f32)
    return np.where(x > 0, x, np.where(np.isnan(x), x, f32(0))).astype(f32)


def relu_backward(grad, x):
    return np.where(np.asarray(x, f32) > 0, np.asarray(grad, f32), f32(0)).astype(f32)


def scale(alpha, x):
    return f32(alpha) * np.asarray(x, f32)


def axpy(alpha, x, y):
    prod = f32(alpha) * np.asarray(x, f32)
    return prod + np.asarray(y, f32)


def sum_rows(x):
    x = np.asarray(x, f32)
    x = x.reshape(int(np.prod(x.shape[:-1], dtype=np.int64)), x.shape[-1])  # -1 is ambiguous when empty
    acc = np.zeros(x.shape[1], f32)
    for i in range(x.shape[0]):
        acc = acc + x[i]
    return acc


def _pow2i(e):
    return ((e + 127).astype(np.uint32) << np.uint32(23)).view(f32)


def expf(x):
    """weft_expf, step for step, on arrays."""
    x = np.atleast_1d(np.asarray(x, f32))
    with np.errstate(all="ignore"):
        n = np.floor(x * f32(1.44269502925872802734375) + f32(0.5))
        r = x - n * f32(0.693145751953125)
        r = r - n * f32(1.428606765330187045e-06)
        p = np.full_like(x, f32(1.98412698e-4))
        for c in (1.38888889e-3, 8.33333377e-3, 4.16666679e-2, 1.66666672e-1, 0.5, 1.0, 1.0):
            p = p * r + f32(c)
        inrange = (x <= f32(88.72283935546875)) & (x >= f32(-103.97208404541015625))
        e = np.where(inrange, n, 0).astype(np.int32)
        big = p * _pow2i(np.full_like(e, 127)) * _pow2i(np.clip(e - 127, -126, 127))
        small = p * _pow2i(np.clip(e + 64, -126, 127)) * _pow2i(np.full_like(e, -64))
        mid = p * _pow2i(np.clip(e, -126, 127))
        out = np.where(e > 127, big, np.where(e < -126, small, mid))
        out = np.where(x > f32(88.72283935546875), f32(np.inf), out)
        out = np.where(x < f32(-103.97208404541015625), f32(0), out)
        out = np.where(np.isnan(x), x, out)
    return out.astype(f32)


_LOG_C = [f32(v) for v in (
    1.000000000e+00, -5.000000000e-01, 3.333333433e-01, -2.500000298e-01, 1.999998242e-01,
    -1.666648984e-01, 1.428636611e-01, -1.250664145e-01, 1.110298857e-01, -9.878969938e-02,
    9.054505080e-02, -9.342882037e-02, 9.089755267e-02, -4.717759788e-02)]


def logf(x):
    """weft_logf, step for step, on arrays."""
    x = np.atleast_1d(np.asarray(x, f32))
    with np.errstate(all="ignore"):
        sub = (x > 0) & (x < f32(1.17549435e-38))
        xs = np.where(sub, x * f32(8388608.0), x)
        e = np.where(sub, -23, 0).astype(np.int32)
        u = xs.view(np.uint32)
        e = e + ((u >> np.uint32(23)) & np.uint32(0xFF)).astype(np.int32) - 127
        m = ((u & np.uint32(0x007FFFFF)) | np.uint32(0x3F800000)).view(f32)
        hi = m > f32(1.41421353816986083984375)
        m = np.where(hi, m * f32(0.5), m)
        e = np.where(hi, e + 1, e)
        fr = m - f32(1.0)
        q = np.full_like(fr, _LOG_C[13])
        for c in reversed(_LOG_C[:13]):
            q = q * fr + c
        lo = q * fr
        fe = e.astype(f32)
        out = fe * f32(0.693145751953125) + (lo + fe * f32(1.428606765330187045e-06))
        out = np.where(x == f32(np.inf), x, out)
        out = np.where(x == 0, f32(-np.inf), out)
        out = np.where(x < 0, f32(np.nan), out)
        out = np.where(np.isnan(x), x, out)
    return out.astype(f32)


def softmax_xent(z, t):
    """(loss, grad) in the canonical order of ref_softmax_xent: columns ascending within a row, rows ascending
    for the loss."""
    z = np.asarray(z, f32)
    t = np.asarray(t, f32)
    rows, cols = z.shape
    inv_rows = f32(1) / f32(rows)
    mx = z[:, 0].copy()
    for j in range(1, cols):
        mx = np.where(z[:, j] > mx, z[:, j], mx)
    s = np.zeros(rows, f32)
    for j in range(cols):
        s = s + expf(z[:, j] - mx)
    ls = logf(s)
    acc = np.zeros(rows, f32)
    grad = np.empty((rows, cols), f32)
    for j in range(cols):
        lsm = (z[:, j] - mx) - ls
        acc = acc + t[:, j] * lsm
        grad[:, j] = (expf(lsm) - t[:, j]) * inv_rows
    tot = f32(0)
    for i in range(rows):
        tot = f32(tot + f32(-acc[i]))
    return f32(tot * inv_rows), grad


def softmax_xent_f64(z, t):
    """The same quantities in float64 with numpy's exp and log: what the float32 results approximate."""
    z = np.asarray(z, np.float64)
    t = np.asarray(t, np.float64)
    zs = z - z.max(axis=1, keepdims=True)
    lsm = zs - np.log(np.exp(zs).sum(axis=1, keepdims=True))
    loss = -(t * lsm).sum(axis=1).mean()
    grad = (np.exp(lsm) - t) / z.shape[0]
    return loss, grad
