"""Randomized properties of the Python package, with numpy as the oracle (python3-hypothesis draws the cases;
derandomized, so every run tries the same ones, and a failure is shrunk to a small case).

- matmul follows numpy.matmul's rules (1-D promotion and removal, broadcast batch dimensions, empty operands,
  k = 0 giving zeros) for arrays in any layout (C, Fortran, transposed, negative or other strides, the other
  byte order, unaligned, read-only), tensors, .T/.mT views, out= and trans flags: under the exact contract
  every element has the canonical order's bits (reference.py), under fp32 it is within a rounding bound;
  tensors are refused only where the README says (rank above 4, a batch that repeats an operand, a result no
  tensor can hold);
- the elementwise ops the same way (their canonical order is numpy's float32 arithmetic);
- tensors behave like arrays: @ + - * by scalars, .T, .mT, shape, dtype, len, numpy.asarray, repr;
- DLPack shares memory both ways with numpy and PyTorch (a write through one side is read through the other);
- dtypes: other real dtypes raise TypeError saying how to get float32, or are converted under dtype=;
- every refusal is a WeftError or TypeError whose message names the call and no parameter the caller did not
  pass.

WEFT_PROPERTY_EXAMPLES (default 1) multiplies the number of cases, for a longer search by hand."""

import math
import os
import re

import numpy as np
import pytest

hypothesis = pytest.importorskip(
    "hypothesis", reason="python3-hypothesis is not installed (Debian: apt-get install python3-hypothesis)")
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.extra import numpy as hnp  # noqa: E402

import reference as ref  # noqa: E402
import weft  # noqa: E402
from conftest import EXACT_LANES  # noqa: E402

f32 = np.float32
SCALE = max(1, int(os.environ.get("WEFT_PROPERTY_EXAMPLES", "1")))


def prop(examples):
    return settings(max_examples=examples * SCALE, derandomize=True, database=None, deadline=None,
                    print_blob=False, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                             HealthCheck.filter_too_much,
                                                             HealthCheck.function_scoped_fixture])


@pytest.fixture(autouse=True)
def _quiet_numpy():
    """The references compute with NaN and infinity on purpose: numpy's warnings about them are expected."""
    with np.errstate(all="ignore"):
        yield


def _lanes_for(contract):
    with weft.Fabric(calibration="off") as f:
        return [lane.name for lane in f.devices() if contract in lane.contracts]


FP32_LANES = _lanes_for("fp32")
MAX_DIMS = 4  # a weft tensor's rank


# ------------------------------------------------------------------------------------------------ values

def values(seed, shape, special):
    """float32 values of `shape`: uniform in [-2, 2], and with `special` some NaN, infinities, signed zeros,
    subnormals, large values (whose products overflow) and small integers mixed in."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2, 2, shape).astype(f32)
    if special and x.size:
        pool = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -3e-39, 1.5e-40, 3e38, -2e30, 1.0, -3.0],
                        f32)
        mask = rng.random(shape) < 0.25
        x[mask] = rng.choice(pool, size=int(mask.sum()))
    return x


def c_order(x):
    """A C-contiguous copy (numpy.ascontiguousarray would make a 0-d array 1-d)."""
    return np.array(x, order="C", copy=True)


LAYOUTS = ("C", "F", "T", "neg", "step", "swapped", "unaligned", "readonly")


def in_layout(x, layout):
    """x's values as an array laid out in memory as `layout` says (what the operand is, not how it is stored,
    is what numpy computes with)."""
    if x.ndim == 0 and layout in ("F", "T", "neg", "step"):
        return c_order(x)  # numpy's asfortranarray would make it 1-d
    if layout == "F":
        return np.asfortranarray(x)
    if layout == "T" and x.ndim >= 2:
        return c_order(np.swapaxes(x, -1, -2)).swapaxes(-1, -2)
    if layout == "neg" and x.ndim >= 1:
        return c_order(x[..., ::-1])[..., ::-1]
    if layout == "step" and x.ndim >= 1:
        wide = np.zeros(x.shape[:-1] + (2 * x.shape[-1],), f32)
        wide[..., ::2] = x
        return wide[..., ::2]
    if layout == "swapped":
        return x.astype(np.dtype(f32).newbyteorder())
    if layout == "unaligned":
        buf = bytearray(x.nbytes + 1)
        u = np.ndarray(x.shape, f32, buffer=buf, offset=1)
        u[...] = x
        return u
    if layout == "readonly":
        r = x.copy()
        r.setflags(write=False)
        return r
    return c_order(x)


def tensor_can_hold(shape):
    """A weft tensor has rank 0 to 4 and dimensions >= 1, but for the batch dimensions of rank 3 or 4."""
    if len(shape) > MAX_DIMS:
        return False
    return all(d >= 1 or (len(shape) >= 3 and i < len(shape) - 2) for i, d in enumerate(shape))


def as_tensor(fabric, x, view):
    """x as a Tensor of the fabric: made from x, or (`view`) a .T/.mT view of a tensor holding x swapped."""
    if view and x.ndim >= 2 and tensor_can_hold(np.swapaxes(x, -1, -2).shape):
        base = fabric.tensor(c_order(np.swapaxes(x, -1, -2)))
        t = base.T if x.ndim == 2 else base.mT
        assert t.base is base and t.shape == x.shape
        return t
    return fabric.tensor(c_order(x))


def stripped(batch):
    batch = list(batch)
    while batch and batch[0] == 1:
        batch.pop(0)
    return batch


def batches_repeat(sa, sb):
    """The README: a batch that broadcasts only by repeating an operand (neither operand one matrix, and not the
    same batch) is expanded for arrays and refused for tensors."""
    ba = stripped(sa[:-2]) if len(sa) > 2 else []
    bb = stripped(sb[:-2]) if len(sb) > 2 else []
    return bool(ba) and bool(bb) and ba != bb


def assert_matmul_close(got, a, b):
    """Under fp32 (any accumulation order, fused or not) each element is within k * eps of the sum of |products|
    away from the float64 product."""
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    bound = np.matmul(np.abs(a).astype(np.float64), np.abs(b).astype(np.float64))
    k = a.shape[-1] if a.ndim else 1
    err = np.abs(np.asarray(got, np.float64) - want)
    assert np.all(err <= (k + 2) * 2.0 ** -23 * bound + 1e-37), (err.max(), bound.max())


def assert_names_only_what_was_passed(message, fn, passed):
    assert "weft_" not in message, message
    assert message.startswith(fn + ": "), (fn, message)
    for word in ("trans_a", "trans_b", "out", "dtype", "lane", "contract", "copy", "out_loss", "out_grad"):
        if word not in passed:
            assert not re.search(rf"\b{word}\b", message), (word, message)


# ---------------------------------------------------------------------------------------------------- matmul

matmul_shapes = hnp.mutually_broadcastable_shapes(signature=np.matmul.signature, max_dims=3, min_side=0,
                                                  max_side=5)


@st.composite
def matmul_cases(draw):
    shapes = draw(matmul_shapes)
    sa, sb = shapes.input_shapes
    case = dict(sa=sa, sb=sb, result=shapes.result_shape, seed=draw(st.integers(0, 2**32 - 1)),
                contract=draw(st.sampled_from(["exact", "exact", "exact", "fp32"])))
    case["special"] = case["contract"] == "exact" and draw(st.booleans())
    lanes = EXACT_LANES if case["contract"] == "exact" else FP32_LANES
    case["lane"] = draw(st.sampled_from([None] + lanes))
    for side, shape in (("a", sa), ("b", sb)):
        kind = draw(st.sampled_from(["array", "array", "tensor"]))
        if kind == "tensor" and not (tensor_can_hold(shape) and len(shape) >= 1):
            kind = "array"
        case[side] = kind
        case[side + "_layout"] = draw(st.sampled_from(LAYOUTS)) if kind == "array" else "C"
        case[side + "_view"] = kind == "tensor" and draw(st.booleans())
        case["trans_" + side] = len(shape) >= 2 and draw(st.booleans())
    case["out"] = draw(st.sampled_from([None, None, "array", "tensor"]))
    case["scope"] = draw(st.booleans())
    return case


@prop(200)
@given(matmul_cases())
def test_matmul_follows_numpy(fabric, case):
    a = values(case["seed"], case["sa"], case["special"])
    b = values(case["seed"] + 1, case["sb"], case["special"])

    def operand(x, side):
        # with trans_x the caller passes the operand's transpose and asks for it to be transposed back
        given_x = c_order(np.swapaxes(x, -1, -2)) if case["trans_" + side] else x
        if case[side] == "tensor":
            return as_tensor(fabric, given_x, case[side + "_view"])
        return in_layout(given_x, case[side + "_layout"])

    A, B = operand(a, "a"), operand(b, "b")
    resident = case["a"] == "tensor" or case["b"] == "tensor"
    shape = case["result"]
    out = None
    if case["out"] == "array":
        out = np.full(shape, np.nan, f32)
    elif case["out"] == "tensor" and tensor_can_hold(shape):
        out = fabric.tensor(np.full(shape, np.nan, f32))
    kwargs = {}
    if case["contract"] != "exact":
        kwargs["contract"] = case["contract"]
    if case["lane"] is not None:
        kwargs["lane"] = case["lane"]
    if out is not None:
        kwargs["out"] = out
    if case["trans_a"]:
        kwargs["trans_a"] = True
    if case["trans_b"]:
        kwargs["trans_b"] = True
    empty = 0 in shape or (a.shape[-1] if a.ndim else 1) == 0
    copies = fabric.copies

    refused = None
    if resident and len(shape) > MAX_DIMS:
        refused = "at most 4 dimensions"
    elif resident and empty and out is None and not tensor_can_hold(shape):
        refused = "cannot hold"
    elif resident and not empty and batches_repeat(case["sa"], case["sb"]):
        refused = "repeating one operand"
    if refused:
        with pytest.raises(weft.ShapeError, match=refused) as info:
            fabric.matmul(A, B, **kwargs)
        assert_names_only_what_was_passed(str(info.value), "matmul", set(kwargs))
        return

    if case["scope"]:  # the lanes batch the block; reading the result inside flushes it
        with fabric.scope():
            got = fabric.matmul(A, B, **kwargs)
            value = np.asarray(got).copy()
    else:
        got = fabric.matmul(A, B, **kwargs)
        value = np.asarray(got)
    if out is not None:
        assert got is out
    elif resident:
        assert isinstance(got, weft.Tensor) and got.contract == case["contract"]
    elif shape == ():
        assert isinstance(got, np.float32)  # two 1-D operands: a numpy scalar, as numpy gives
    else:
        assert isinstance(got, np.ndarray) and got.dtype == f32
    assert value.shape == shape == np.matmul(a, b).shape
    if case["contract"] == "exact":
        assert ref.same_bits(value, ref.matmul_numpy(a, b))
    else:
        assert_matmul_close(value, a, b)
    # C-ordered and transposed operands go to the library as they are: no copy, unless a batch repeats one
    plain = all(case[s] == "tensor" or case[s + "_layout"] in ("C", "T", "readonly") for s in "ab")
    if plain and not batches_repeat(case["sa"], case["sb"]):
        assert fabric.copies == copies


@prop(25)
@given(st.integers(0, 2**32 - 1), st.integers(1, 40), st.integers(1, 40), st.integers(1, 300),
       st.sampled_from([None] + EXACT_LANES))
@example(1, 37, 33, 300, None).via("tile edges, long k")
@example(2, 13, 29, 257, EXACT_LANES[-1]).via("tile edges, long k")
@example(3, 1, 40, 129, EXACT_LANES[0]).via("one row")
def test_matmul_exact_is_the_canonical_loop(fabric, seed, m, n, k, lane):
    # the definition itself (reference.matmul_loop: one float32 multiply and one float32 add per step, k
    # ascending) on shapes the lanes tile differently, including ragged edges and long k
    a, b = values(seed, (m, k), False), values(seed + 1, (k, n), False)
    got = fabric.matmul(a, b, lane=lane)
    want = ref.matmul_loop(a, b) if m * n * k <= 1500 else ref.matmul(a, b)
    assert ref.same_bits(got, want)


# ------------------------------------------------------------------------------------------- elementwise

ELEMENTWISE = ("add", "add_row", "relu", "relu_backward", "scale", "axpy", "sum_rows", "softmax_xent")


@st.composite
def elementwise_cases(draw):
    op = draw(st.sampled_from(ELEMENTWISE))
    shape = draw(hnp.array_shapes(min_dims=1 if op == "add_row" else 0, max_dims=5, min_side=0, max_side=6))
    case = dict(op=op, shape=shape, seed=draw(st.integers(0, 2**32 - 1)), special=draw(st.booleans()),
                lane=draw(st.sampled_from([None] + EXACT_LANES)),
                alpha=draw(st.sampled_from([2.0, -0.5, 0.0, 1e-3, 3e38, float("nan"), float("inf"), 1 / 3])))
    if op == "add_row":
        case["yshape"] = draw(st.sampled_from([(shape[-1],), (1, shape[-1])]))
    for side in ("x", "y"):
        kind = draw(st.sampled_from(["array", "array", "tensor"]))
        case[side] = kind
        case[side + "_layout"] = draw(st.sampled_from(LAYOUTS))
        case[side + "_view"] = draw(st.booleans())
    case["out"] = draw(st.sampled_from([None, None, "array", "tensor"]))
    return case


def rows2d(x):
    """x as [rows, cols] the way weft counts them: every leading dimension is rows; a 0-d x is one element."""
    return x.reshape(int(np.prod(x.shape[:-1], dtype=np.int64)), x.shape[-1]) if x.ndim else x.reshape(1, 1)


def elementwise_reference(op, x, y, alpha):
    if op in ("add", "add_row"):
        return ref.add(x, y)
    if op == "relu":
        return ref.relu(x)
    if op == "relu_backward":
        return ref.relu_backward(x, y)
    if op == "scale":
        return ref.scale(alpha, x)
    if op == "axpy":
        return ref.axpy(alpha, x, y)
    if op == "sum_rows":
        return ref.sum_rows(rows2d(x))
    z = rows2d(x)
    t = y.reshape(z.shape)
    loss, grad = ref.softmax_xent(z, t)
    return loss, grad.reshape(x.shape)


@prop(200)
@given(elementwise_cases())
def test_elementwise_ops_follow_numpy(fabric, case):
    op, shape = case["op"], case["shape"]
    x = values(case["seed"], shape, case["special"])
    yshape = case.get("yshape", shape)
    y = values(case["seed"] + 1, yshape, case["special"])
    if op == "softmax_xent":
        y = np.abs(y) / max(1, shape[-1] if shape else 1)  # target probabilities
        y = np.nan_to_num(y, nan=0.5, posinf=1.0).astype(f32)
    if op == "axpy":
        case["y"] = "array" if case["y"] == "array" else "tensor"
        case["y_layout"] = "C"  # y is written in place: a C-contiguous array or a tensor of its own
        case["y_view"] = False

    def operand(v, side):
        if case[side] == "tensor" and tensor_can_hold(v.shape):
            return as_tensor(fabric, v, case[side + "_view"])
        case[side] = "array"
        return in_layout(v, case[side + "_layout"])

    X, Y = operand(x, "x"), operand(y, "y")
    if op in ("relu", "scale", "sum_rows"):
        case["y"] = "unused"
    resident = case["x"] == "tensor" or case["y"] == "tensor"
    if op == "softmax_xent" and 0 in shape:
        want, rshape = None, shape  # refused: a mean over no rows
    else:
        with np.errstate(all="ignore"):
            want = elementwise_reference(op, x, y, case["alpha"])
        rshape = want[1].shape if op == "softmax_xent" else np.shape(want)
    out = None
    if op not in ("axpy", "softmax_xent"):
        if case["out"] == "array":
            out = np.full(rshape, np.nan, f32)
        elif case["out"] == "tensor" and tensor_can_hold(rshape):
            out = fabric.tensor(np.full(rshape, np.nan, f32))
    kwargs = {} if case["lane"] is None else dict(lane=case["lane"])
    if out is not None:
        kwargs["out"] = out
    calls = {
        "add": lambda: fabric.add(X, Y, **kwargs), "add_row": lambda: fabric.add(X, Y, **kwargs),
        "relu": lambda: fabric.relu(X, **kwargs), "relu_backward": lambda: fabric.relu_backward(X, Y, **kwargs),
        "scale": lambda: fabric.scale(case["alpha"], X, **kwargs),
        "axpy": lambda: fabric.axpy(case["alpha"], X, Y, **kwargs), "sum_rows": lambda: fabric.sum_rows(X, **kwargs),
        "softmax_xent": lambda: fabric.softmax_xent(X, Y, **kwargs),
    }
    fn = "add" if op == "add_row" else op
    empty = 0 in shape

    refused = None
    if op == "softmax_xent" and empty:
        refused = "empty"
    elif resident and len(rshape) > MAX_DIMS and not empty:
        refused = "at most 4 dimensions"
    elif resident and out is None and op != "axpy" and not tensor_can_hold(rshape):
        refused = "cannot hold"
    if refused:
        with pytest.raises(weft.ShapeError, match=refused) as info:
            calls[op]()
        assert_names_only_what_was_passed(str(info.value), fn, set(kwargs))
        return

    before = np.asarray(Y).copy() if op == "axpy" else None
    got = calls[op]()
    if op == "softmax_xent":
        loss, grad = got
        assert isinstance(loss, weft.Tensor if resident else np.float32)
        assert np.asarray(loss).size == 1 and ref.same_bits(np.asarray(loss).reshape(()), want[0])
        assert np.shape(grad) == shape and ref.same_bits(np.asarray(grad), want[1])
        return
    if op == "axpy":
        assert got is Y
        assert ref.same_bits(np.asarray(Y), ref.axpy(case["alpha"], x, before))
        return
    if out is not None:
        assert got is out
    elif resident:
        assert isinstance(got, weft.Tensor)
    elif rshape == ():
        assert isinstance(got, np.float32)
    value = np.asarray(got)
    assert value.shape == rshape
    assert ref.same_bits(value, want)


# ---------------------------------------------------------------------------------------------- operators

tensor_shapes = hnp.array_shapes(min_dims=0, max_dims=4, min_side=1, max_side=5)
scalars = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=32), st.integers(-1000, 1000),
                    st.sampled_from([np.float32(1.5), np.float64(-2.25), np.int64(3), np.array(0.5)]))


@prop(150)
@given(tensor_shapes, st.integers(0, 2**32 - 1), scalars, st.booleans(), st.sampled_from(["exact", "fp32"]))
def test_tensors_feel_like_arrays(fabric, shape, seed, s, special, contract):
    x = values(seed, shape, special)
    t = fabric.tensor(x, contract=contract)
    assert t.shape == shape and t.ndim == len(shape) and t.size == x.size and t.dtype == f32
    assert t.nbytes == 4 * x.size and t.contract == contract
    r = repr(t)
    assert f"shape={shape}" in r and f"contract={contract}" in r and "lane=" in r
    if shape:
        assert len(t) == shape[0]
    else:
        with pytest.raises(TypeError):
            len(t)
    assert ref.same_bits(np.asarray(t), x) and ref.same_bits(t.numpy(), x)
    assert np.asarray(t, dtype=np.float64).dtype == np.float64
    sv = f32(np.asarray(s, np.float64))  # the scalar rounded to float32, as the operators take it
    with np.errstate(all="ignore"):
        for got, want in ((t * s, x * sv), (s * t, sv * x), (-t, -x), (t + s, x + sv), (s + t, sv + x),
                          (t - s, x - sv), (s - t, sv - x), (t + t, x + x), (t - t, x - x)):
            assert isinstance(got, weft.Tensor) and got.contract == contract
            assert got.shape == np.shape(want) and ref.same_bits(np.asarray(got), want)
        if shape:
            row = values(seed + 2, shape[-1:], special)
            assert ref.same_bits(np.asarray(t + row), x + row)   # a row added to every row, as numpy
            assert ref.same_bits(np.asarray(row + t), row + x)   # numpy defers to the tensor
            assert ref.same_bits(np.asarray(row - t), row - x)
            assert ref.same_bits(np.asarray(t - x), x - x)
    # .T is numpy's (every axis reversed), .mT swaps the last two
    assert t.T.shape == x.T.shape and ref.same_bits(np.asarray(t.T), x.T)
    if len(shape) >= 2:
        assert t.mT.shape == np.swapaxes(x, -1, -2).shape
        assert ref.same_bits(np.asarray(t.mT), np.swapaxes(x, -1, -2))
        assert ref.same_bits(np.asarray(t.mT + c_order(np.swapaxes(x, -1, -2))),
                             np.swapaxes(x + x, -1, -2))
    with pytest.raises(TypeError):
        t / 2  # division is not one of weft's ops: refused, not approximated
    with pytest.raises(TypeError):
        t * t


@prop(80)
@given(hnp.mutually_broadcastable_shapes(signature=np.matmul.signature, max_dims=2, min_side=1, max_side=5),
       st.integers(0, 2**32 - 1), st.booleans(), st.booleans())
def test_tensor_matmul_operator(fabric, shapes, seed, left_array, view):
    sa, sb = shapes.input_shapes
    a, b = values(seed, sa, False), values(seed + 1, sb, False)
    A = a if left_array else as_tensor(fabric, a, view)
    B = as_tensor(fabric, b, view)
    if len(shapes.result_shape) > MAX_DIMS or batches_repeat(sa, sb):
        with pytest.raises(weft.ShapeError) as info:
            A @ B
        assert_names_only_what_was_passed(str(info.value), "@", set())
        return
    got = A @ B
    assert isinstance(got, weft.Tensor) and got.shape == np.matmul(a, b).shape
    assert ref.same_bits(np.asarray(got), ref.matmul_numpy(a, b))


# ------------------------------------------------------------------------------------------------- DLPack

@prop(60)
@given(tensor_shapes, st.integers(0, 2**32 - 1), st.sampled_from(["numpy", "torch"]), st.booleans())
def test_dlpack_shares_memory_both_ways(fabric, shape, seed, peer, transposed):
    x = values(seed, shape, False)
    transposed = transposed and len(shape) == 2
    if peer == "torch":
        torch = pytest.importorskip("torch", reason="PyTorch is not installed (Debian: python3-torch)")
        src = torch.from_numpy(x.T.copy()).T if transposed else torch.from_numpy(x.copy())
    else:
        src = c_order(x.T).T if transposed else x.copy()
    # their memory into weft: a write through them is read through weft, and weft's op writes into them
    t = fabric.from_dlpack(src)
    assert t.shape == shape and ref.same_bits(np.asarray(t), x) and "shared" in repr(t)
    src[...] = 2  # torch and numpy both take a scalar fill
    assert ref.same_bits(np.asarray(t), np.full(shape, 2, f32))
    owner = t if t.base is None else t.base  # a transposed import is a .T view of a tensor over the memory
    fabric.scale(3, owner, out=owner)
    assert ref.same_bits(np.asarray(src), np.full(shape, 6, f32))
    # weft's memory out: numpy (read-only, as numpy 1.24 marks DLPack arrays) and torch see weft's writes
    u = fabric.tensor(x)
    seen = np.from_dlpack(u.T if transposed else u) if peer == "numpy" else None
    if peer == "torch":
        torch = pytest.importorskip("torch")
        seen = torch.from_dlpack(u.T if transposed else u)
        seen.zero_()  # torch writes ...
        assert ref.same_bits(np.asarray(u), np.zeros(shape, f32))  # ... weft reads
    fabric.add(u, fabric.tensor(np.ones(shape, f32)), out=u)
    want = np.ones(shape, f32) if peer == "torch" else x + f32(1)
    assert ref.same_bits(np.asarray(seen), want.T if transposed else want)


# ------------------------------------------------------------------------------------------------- dtypes

OTHER_DTYPES = (np.float64, np.float16, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint32, bool)


@prop(60)
@given(st.sampled_from(OTHER_DTYPES), st.sampled_from(["matmul", "add", "relu", "relu_backward", "scale",
                                                        "axpy", "sum_rows", "softmax_xent", "tensor", "write"]),
       st.integers(0, 2**32 - 1), hnp.array_shapes(min_dims=2, max_dims=2, min_side=1, max_side=4))
def test_other_dtypes_say_how_to_get_float32(fabric, dtype, fn, seed, shape):
    rng = np.random.default_rng(seed)
    x = (rng.uniform(-50, 50, shape) if np.dtype(dtype).kind == "f" else rng.integers(0, 50, shape)).astype(dtype)
    y = values(seed, shape, False)
    yt = c_order(y.T)
    t = fabric.tensor(np.zeros(shape, f32))

    def call(v, **kw):
        return {"matmul": lambda: fabric.matmul(v, yt, **kw), "add": lambda: fabric.add(v, y, **kw),
                "relu": lambda: fabric.relu(v, **kw), "relu_backward": lambda: fabric.relu_backward(y, v, **kw),
                "scale": lambda: fabric.scale(2, v, **kw), "axpy": lambda: fabric.axpy(2, v, y.copy(), **kw),
                "sum_rows": lambda: fabric.sum_rows(v, **kw),
                "softmax_xent": lambda: fabric.softmax_xent(y, v, **kw)[1],
                "tensor": lambda: np.asarray(fabric.tensor(v, **kw)), "write": lambda: np.asarray(t.write(v, **kw)),
                }[fn]()

    with pytest.raises(TypeError) as info:
        call(x)
    msg = str(info.value)
    assert "without converting silently" in msg and ".astype(numpy.float32)" in msg and "dtype=numpy.float32" in msg
    assert msg.startswith(fn + ": ")
    assert ref.same_bits(np.asarray(call(x, dtype=np.float32)), np.asarray(call(x.astype(f32))))
    with pytest.raises(TypeError) as info:  # the operators take no dtype=, and their message names none
        fabric.tensor(y) + x
    assert "dtype=" not in str(info.value) and ".astype(numpy.float32)" in str(info.value)
    for bad in (x.astype(np.complex64), x.astype(object), x.astype(str)):
        with pytest.raises(TypeError, match="real numbers"):
            call(bad, dtype=np.float32)


# --------------------------------------------------------------------------------------- error messages

OPTIONAL = ("contract", "lane", "dtype", "trans_a", "trans_b", "copy", "out")


@prop(120)
@given(st.sampled_from(["matmul", "add", "relu_backward", "axpy", "softmax_xent", "relu", "sum_rows", "scale"]),
       st.sets(st.sampled_from(OPTIONAL)), st.sampled_from(["inner", "out_shape", "out_dtype", "other_fabric"]),
       st.booleans())
def test_errors_name_only_what_was_passed(fabric, fn, passed, fault, tensors):
    accepts = {"matmul": OPTIONAL, "axpy": ("contract", "lane", "dtype"),
               "softmax_xent": ("contract", "lane", "dtype")}.get(fn, ("contract", "lane", "dtype", "out"))
    passed = {p for p in passed if p in accepts}
    a = np.ones((2, 3), f32)
    b = np.ones((4, 5) if fault == "inner" else (3, 2) if fn == "matmul" else (2, 3), f32)
    if fault == "inner" and fn in ("relu", "sum_rows", "scale"):
        fault = "out_shape"  # one operand: nothing to mismatch but out
        passed.add("out")
    if fault in ("out_shape", "out_dtype"):
        passed.add("out") if "out" in accepts else None
    if fault == "other_fabric":
        other = weft.Fabric(lanes="cpu", calibration="off")
        a = other.tensor(a)
    elif tensors:
        a = fabric.tensor(a)
    kw = {}
    if "contract" in passed:
        kw["contract"] = "exact"
    if "lane" in passed:
        kw["lane"] = "cpu"
    if "dtype" in passed:
        kw["dtype"] = np.float32
    if "trans_a" in passed:
        kw["trans_a"] = False
    if "trans_b" in passed:
        kw["trans_b"] = False
    if "copy" in passed:
        kw["copy"] = True
    if "out" in passed:
        kw["out"] = np.empty((7, 7), f32) if fault == "out_shape" else np.empty((2, 2), np.float64) \
            if fault == "out_dtype" else None
    call = {"matmul": lambda: fabric.matmul(a, b, **kw), "add": lambda: fabric.add(a, b, **kw),
            "relu_backward": lambda: fabric.relu_backward(a, b, **kw), "axpy": lambda: fabric.axpy(1, a, b, **kw),
            "softmax_xent": lambda: fabric.softmax_xent(a, b, **kw), "relu": lambda: fabric.relu(a, **kw),
            "sum_rows": lambda: fabric.sum_rows(a, **kw), "scale": lambda: fabric.scale(2, a, **kw)}[fn]
    try:
        if fault in ("out_shape", "out_dtype") and "out" not in passed:
            return  # nothing wrong in the call
        if fn in ("matmul",) and fault in ("out_shape", "out_dtype") and kw.get("out") is None:
            return
        with pytest.raises((weft.WeftError, TypeError)) as info:
            call()
        assert_names_only_what_was_passed(str(info.value), fn, passed)
        if fault == "other_fabric":
            assert isinstance(info.value, weft.WrongFabricError)
    finally:
        if fault == "other_fabric":
            other.close()


# ------------------------------------------------------------------------------------------------ aliasing

ALIASED = ("matmul_out_a", "matmul_out_b", "add_out_x", "add_out_y", "relu_out_x", "relu_shifted", "scale_out_x",
           "relu_backward_out_grad", "axpy_y_is_x", "axpy_x_view_of_y", "dlpack_operand_out", "dlpack_out",
           "axpy_dlpack_x")


@prop(20)
@given(st.sampled_from(ALIASED), st.integers(0, 2**32 - 1), st.sampled_from([None] + EXACT_LANES))
def test_outputs_over_their_inputs_give_numpys_answer(fabric, case, seed, lane):
    # numpy gives out= over an input (out=x, a shifted view of x) the answer it would give into fresh memory. Arrays
    # this large are wrapped, not copied into scratch tensors: the library must never see two handles over one
    # buffer (it refuses them, naming parameters the caller never passed) nor read what it has already written.
    n = 128
    assert n * n >= weft._weft.WRAP_MIN
    x = values(seed, (n, n), False)
    y = values(seed + 1, (n, n), False)
    kw = {} if lane is None else dict(lane=lane)
    x0, y0 = x.copy(), y.copy()  # the values before the call overwrites them
    flat = np.concatenate([x.ravel(), [f32(0)]]).astype(f32)
    cases = {
        "matmul_out_a": (lambda: fabric.matmul(x, y, out=x, **kw), ref.matmul(x0, y0)),
        "matmul_out_b": (lambda: fabric.matmul(x, y, out=y, **kw), ref.matmul(x0, y0)),
        "add_out_x": (lambda: fabric.add(x, y, out=x, **kw), x0 + y0),
        "add_out_y": (lambda: fabric.add(x, y, out=y, **kw), x0 + y0),
        "relu_out_x": (lambda: fabric.relu(x, out=x, **kw), ref.relu(x0)),
        "relu_shifted": (lambda: fabric.relu(flat[:-1], out=flat[1:], **kw), ref.relu(flat[:-1].copy())),
        "scale_out_x": (lambda: fabric.scale(-0.5, x, out=x, **kw), ref.scale(-0.5, x0)),
        "relu_backward_out_grad": (lambda: fabric.relu_backward(x, y, out=x, **kw), ref.relu_backward(x0, y0)),
        "axpy_y_is_x": (lambda: fabric.axpy(2.0, x, x, **kw), ref.axpy(2.0, x0, x0)),
        "axpy_x_view_of_y": (lambda: fabric.axpy(2.0, x[::-1], x, **kw), ref.axpy(2.0, x0[::-1], x0)),
        # a tensor over x's memory (DLPack), and x as out=
        "dlpack_operand_out": (lambda: fabric.matmul(fabric.from_dlpack(x), y, out=x, **kw), ref.matmul(x0, y0)),
        "dlpack_out": (lambda: fabric.add(x, y, out=fabric.from_dlpack(x), **kw), x0 + y0),
        "axpy_dlpack_x": (lambda: fabric.axpy(-1.0, fabric.from_dlpack(x), x, **kw), ref.axpy(-1.0, x0, x0)),
    }
    call, want = cases[case]
    got = call()
    assert ref.same_bits(np.asarray(got), want)


# ------------------------------------------------------------------------------------------- hostile junk

def _junk(fabric):
    closed = weft.Fabric(lanes="cpu", calibration="off")
    closed_tensor = closed.tensor(np.ones((2, 2), f32))
    closed.close()
    other = weft.Fabric(lanes="cpu", calibration="off")
    dropped = fabric.tensor(np.ones((2, 2), f32))
    dropped.close()
    ro = np.ones((2, 2), f32)
    ro.setflags(write=False)
    return other, [
        None, "x", b"x", 1 + 2j, object(), [], [[]], {}, -1, 0, 2**31, 10**30, -10**30, 2.5, float("nan"),
        float("-inf"), True, np.float64(1.5), np.complex64(1j), np.array(1.0), np.array("x"),
        np.ones((2, 2), object), np.ones((2, 2), complex), np.ones((2, 2), bool), np.ones((2, 2), np.float16),
        np.ones((2, 2)), np.ones((0,), f32), np.ones((0, 2, 2), f32), np.ones((1,) * 6, f32), ro,
        np.ones((2, 2), f32)[:, ::-1], np.ones((2, 2), np.dtype(f32).newbyteorder()), closed_tensor, dropped,
        other.tensor(np.ones((2, 2), f32)), fabric.tensor(np.ones((2, 2), f32)).T, lambda: 0, weft.Fabric,
        fabric.zeros((0, 2, 2)), fabric.tensor(np.float32(1)),
    ]


def _calls(fabric, gpt):
    a, t = np.ones((2, 2), f32), fabric.tensor(np.ones((2, 2), f32))
    return {
        "matmul": (fabric.matmul, [a, a, "exact", False, False, None, None, None, None]),
        "add": (fabric.add, [a, a, "exact", None, None, None]),
        "relu": (fabric.relu, [t, "exact", None, None, None]),
        "relu_backward": (fabric.relu_backward, [a, t, "exact", None, None, None]),
        "scale": (fabric.scale, [2.0, a, "exact", None, None, None]),
        "axpy": (fabric.axpy, [2.0, a, np.ones((2, 2), f32), "exact", None, None]),
        "sum_rows": (fabric.sum_rows, [a, "exact", None, None, None]),
        "softmax_xent": (fabric.softmax_xent, [a, a, "exact", None, True, True, None, None, None]),
        "tensor": (fabric.tensor, [a, "exact", None]),
        "zeros": (fabric.zeros, [(2, 2), "exact"]),
        "from_dlpack": (fabric.from_dlpack, [np.ones(3, f32), "exact"]),
        "lane_index": (fabric.lane_index, ["cpu"]),
        "route_explain": (fabric.route_explain, ["matmul", (2, 3), (3, 4)]),
        "cost_model": (fabric.cost_model, ["cpu", "matmul", "exact"]),
        "set_cost_model": (weft.Fabric(lanes="cpu", calibration="off").set_cost_model,
                           ["cpu", "matmul", 1e-6, 1e9, "exact"]),
        "Fabric": (lambda *v: weft.Fabric(*v).close(), ["cpu", 1, "off", None, 0, 1 << 20]),
        "devices": (weft.devices, ["cpu"]),
        "numpy": (t.numpy, [np.empty((2, 2), f32)]),
        "__array__": (t.__array__, [None, None]),
        "write": (fabric.tensor(np.ones((2, 2), f32)).write, [a, None]),
        "with_contract": (t.with_contract, ["fp32"]),
        "__dlpack__": (fabric.tensor(np.ones((2, 2), f32)).__dlpack__, [None, None, None, None]),
        "weft.from_dlpack": (weft.from_dlpack, [np.ones(3, f32), None, "exact"]),
        "@": (lambda x, y: x @ y, [t, t]), "+": (lambda x, y: x + y, [t, t]), "-": (lambda x, y: x - y, [t, t]),
        "*": (lambda x, y: x * y, [t, 2.0]), "r*": (lambda x, y: x * y, [2.0, t]),
        "expf": (weft.expf, [1.0]), "logf": (weft.logf, [1.0]),
        "GPT": (lambda *v: weft.GPT(fabric, *v), [1, 8, 2, 16, 4]),
        "GPT.loss": (gpt.loss, [np.arange(3), np.arange(3)]),
        "GPT.logits": (gpt.logits, [np.arange(3)]),
        "GPT.generate": (gpt.generate, [np.arange(2), 1, 0.0, 0, 0]),
        "GPT.train_step": (gpt.train_step, [np.arange(3), np.arange(3), 1e-3, 0.0, 1.0]),
    }


# What a hostile argument may raise: weft's errors and the built-in exceptions the README names (TypeError for a
# wrong type or dtype, OverflowError for an int too large for C, BufferError for memory DLPack cannot share as it
# is), and LookupError's kin for a lane name (NotFoundError is one).
ALLOWED = (weft.WeftError, TypeError, OverflowError, BufferError)


@prop(300)
@given(st.data())
def test_hostile_arguments_raise_errors_a_person_can_act_on(fabric, data):
    gpt = weft.GPT(fabric, L=1, C=8, NH=2, V=16, maxT=4)
    other, junk = _junk(fabric)
    try:
        calls = _calls(fabric, gpt)
        name = data.draw(st.sampled_from(sorted(calls)), label="call")
        fn, args = calls[name]
        slot = data.draw(st.integers(0, len(args) - 1), label="slot")
        bad = data.draw(st.sampled_from(junk), label="junk")
        args = list(args)
        args[slot] = bad
        try:
            with np.errstate(all="ignore"):
                fn(*args)
        except ALLOWED as e:
            assert str(e) and "weft_" not in str(e), (name, slot, e)
    finally:
        other.close()
        gpt.close()
