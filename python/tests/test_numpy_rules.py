"""numpy.matmul's rules: 1-D promotion, broadcast batch dimensions, empty operands, layouts, dtypes, and error
messages that name only what the caller passed. Every result is checked bit for bit against the canonical
order (reference.matmul) on float32 data, and its shape against numpy's."""

import numpy as np
import pytest

import reference as ref
import weft

f32 = np.float32


def rand(rng, *shape):
    return rng.uniform(-1, 1, shape).astype(f32)


def canonical(a, b):
    """numpy.matmul's shapes with the canonical order's bits (broadcast by numpy, each matrix by reference)."""
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))  # the shape numpy gives
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    A = np.broadcast_to(a2, batch + a2.shape[-2:]).reshape((-1,) + a2.shape[-2:])
    B = np.broadcast_to(b2, batch + b2.shape[-2:]).reshape((-1,) + b2.shape[-2:])
    out = np.stack([ref.matmul(np.ascontiguousarray(x), np.ascontiguousarray(y)) for x, y in zip(A, B)])
    return out.reshape(want.shape)


SHAPES = [
    ((3,), (3,)),                 # both 1-D: a scalar
    ((3,), (3, 4)),               # a promoted to a row, removed
    ((5, 3), (3,)),               # b promoted to a column, removed
    ((2, 5, 3), (3,)),
    ((3,), (2, 3, 4)),
    ((2, 5, 3), (3, 4)),          # batch against one matrix
    ((5, 3), (2, 3, 4)),          # one matrix against a batch (computed as c^T = b^T a^T, permuted)
    ((2, 5, 3), (2, 3, 4)),
    ((2, 1, 5, 3), (3, 3, 4)),    # broadcast batch: a copy of the operands, counted
    ((1, 5, 3), (2, 3, 4)),
    ((2, 2, 2, 5, 3), (3, 4)),    # more batch dimensions than a weft tensor has: flattened
]


@pytest.mark.parametrize("sa,sb", SHAPES, ids=[f"{a}@{b}" for a, b in SHAPES])
def test_shapes_follow_numpy_matmul(fabric, sa, sb, lane):
    rng = np.random.default_rng(len(sa) * 10 + len(sb))
    a, b = rand(rng, *sa), rand(rng, *sb)
    got = fabric.matmul(a, b, lane=lane)
    want = canonical(a, b)
    assert np.shape(got) == want.shape == np.matmul(a, b).shape
    assert ref.same_bits(np.asarray(got, f32), want)
    if not sa[1:] and not sb[1:]:
        assert isinstance(got, np.float32)  # two 1-D operands: a numpy scalar, as numpy gives


def test_broadcast_copies_are_counted_and_can_be_refused(fabric):
    a, b = np.ones((2, 1, 5, 3), f32), np.ones((3, 3, 4), f32)
    before = fabric.copies
    fabric.matmul(a, b)
    assert fabric.copies == before + 2
    with pytest.raises(ValueError, match="copy=False"):
        fabric.matmul(a, b, copy=False)
    before = fabric.copies
    fabric.matmul(np.ones((5, 3), f32), np.ones((2, 3, 4), f32), copy=False)  # no copy needed: none made
    assert fabric.copies == before


@pytest.mark.parametrize("sa,sb,zeros", [
    ((0, 3), (3, 4), False), ((5, 3), (3, 0), False), ((0, 5, 3), (3, 4), False), ((2, 0, 3), (2, 3, 4), False),
    ((5, 0), (0, 4), True), ((0,), (0,), True), ((2, 5, 0), (0, 4), True),
])
def test_empty_operands_give_what_numpy_gives(fabric, sa, sb, zeros):
    a, b = np.ones(sa, f32), np.ones(sb, f32)
    got = fabric.matmul(a, b)
    want = np.matmul(a, b)
    assert np.shape(got) == want.shape and np.array_equal(got, want)
    if zeros and want.size:
        assert not np.any(got)  # an empty sum is zero


def test_empty_elementwise(fabric):
    assert fabric.relu(np.ones((0, 3), f32)).shape == (0, 3)
    assert fabric.add(np.ones((0, 3), f32), np.ones((0, 3), f32)).shape == (0, 3)


def test_fortran_and_transposed_inputs_are_read_in_place(fabric):
    rng = np.random.default_rng(3)
    a, b = rand(rng, 6, 5), rand(rng, 5, 4)
    before = fabric.copies
    assert ref.same_bits(fabric.matmul(np.asfortranarray(a), b), ref.matmul(a, b))
    assert ref.same_bits(fabric.matmul(a, np.asfortranarray(b)), ref.matmul(a, b))
    at = rand(rng, 5, 6)
    assert ref.same_bits(fabric.matmul(at.T, b), ref.matmul(np.ascontiguousarray(at.T), b))
    batch = rand(rng, 3, 5, 6)
    got = fabric.matmul(batch.transpose(0, 2, 1), b)  # each matrix transposed: still no copy
    assert ref.same_bits(got, canonical(np.ascontiguousarray(batch.transpose(0, 2, 1)), b))
    assert fabric.copies == before


def test_strided_views_are_copied_and_say_so(fabric):
    rng = np.random.default_rng(4)
    big = rand(rng, 8, 8)
    view = big[::2, 1::2]
    before = fabric.copies
    assert ref.same_bits(fabric.matmul(view, view), ref.matmul(view.copy(), view.copy()))
    assert fabric.copies == before + 2
    with pytest.raises(ValueError, match=r"not contiguous.*copy=False"):
        fabric.matmul(view, view, copy=False)


def test_no_silent_float32(fabric):
    a64, b = np.ones((2, 2)), np.ones((2, 2), f32)
    for bad in (a64, np.ones((2, 2), np.int64), np.ones((2, 2), bool), np.ones((2, 2), np.float16), [[1.0, 2.0]]):
        with pytest.raises(TypeError, match="without converting silently"):
            fabric.matmul(bad, b)  # a list of Python floats is float64 too
    with pytest.raises(TypeError, match="convert it first"):
        fabric.relu(a64)
    assert fabric.matmul(a64, b, dtype=np.float32).dtype == f32
    assert fabric.matmul(a64, b, dtype="float32").dtype == f32
    with pytest.raises(TypeError, match="float32 only"):
        fabric.matmul(a64, b, dtype=np.float64)
    with pytest.raises(TypeError, match="real numbers"):
        fabric.matmul(np.ones((2, 2), np.complex64), b, dtype=np.float32)
    before = fabric.copies
    fabric.matmul(a64, b, dtype=np.float32)
    assert fabric.copies == before + 1  # the conversion is a copy, counted


def test_errors_name_only_what_the_caller_passed(fabric):
    a, b = np.ones((2, 3), f32), np.ones((4, 5), f32)
    with pytest.raises(weft.ShapeError) as info:
        weft.matmul(a, b)
    msg = str(info.value)
    for word in ("trans", "out", "dtype", "weft_op", "lane", "contract"):
        assert word not in msg, (word, msg)
    with pytest.raises(weft.ShapeError, match="with trans_b"):
        weft.matmul(a, b, trans_b=True)
    with pytest.raises(weft.ShapeError, match="out has shape"):
        weft.matmul(a, np.ones((3, 5), f32), out=np.empty((3, 3), f32))
    t = weft.tensor(np.ones((2, 3), f32))
    with pytest.raises(ValueError) as info:
        t @ t
    assert "a is" not in str(info.value) and "left operand" in str(info.value)
    with pytest.raises(ValueError, match="batch dimensions"):
        weft.matmul(np.ones((2, 2, 3), f32), np.ones((3, 3, 2), f32))
    with pytest.raises(ValueError, match="scalar"):
        weft.matmul(np.float32(2), a)


def test_trans_flags_compose_with_layouts(fabric):
    rng = np.random.default_rng(5)
    a, b = rand(rng, 5, 6), rand(rng, 4, 5)
    want = ref.matmul(np.ascontiguousarray(a.T), np.ascontiguousarray(b.T))
    assert ref.same_bits(fabric.matmul(a, b, trans_a=True, trans_b=True), want)
    assert ref.same_bits(fabric.matmul(np.asfortranarray(a), np.asfortranarray(b), trans_a=True, trans_b=True), want)


def test_tensor_operands_follow_the_same_rules(fabric, lane):
    rng = np.random.default_rng(6)
    a, b, v = rand(rng, 5, 3), rand(rng, 2, 3, 4), rand(rng, 3)
    ta, tb, tv = fabric.tensor(a), fabric.tensor(b), fabric.tensor(v)
    for x, y, tx, ty in ((a, b, ta, tb), (v, b, tv, tb), (a, v, ta, tv), (v, v, tv, tv), (a.T, a, ta.T, ta)):
        got = fabric.matmul(tx, ty, lane=lane)
        want = canonical(x, y)
        assert isinstance(got, weft.Tensor) and got.shape == want.shape
        assert ref.same_bits(np.asarray(got), want)
    assert tv.shape == (3,) and ta.shape == (5, 3)  # operands keep their shapes
    big = rand(rng, 130, 140)  # large enough to be wrapped rather than copied
    assert ref.same_bits(fabric.matmul(big, big.T, lane=lane), ref.matmul(big, np.ascontiguousarray(big.T)))
    with pytest.raises(weft.ShapeError, match="resident tensors"):
        fabric.matmul(fabric.tensor(rand(rng, 2, 1, 5, 3)), fabric.tensor(rand(rng, 3, 3, 4)))


def test_float32_in_the_other_byte_order_gives_numpy_values(fabric):
    # '>f4' (or '<f4' on a big-endian host) is float32 with swapped bytes: its values, not its bytes, are the
    # operand. It was read as native floats (a silent wrong answer); now it is copied to native order, counted,
    # refused under copy=False, and never written into as an output.
    other = np.dtype(np.float32).newbyteorder()
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.arange(6, dtype=np.float32).reshape(3, 2)
    copies = fabric.copies
    assert np.array_equal(fabric.matmul(a.astype(other), b.astype(other)), a @ b)
    assert fabric.copies == copies + 2
    assert np.array_equal(fabric.add(a.astype(other), a), a + a)
    assert np.array_equal(np.asarray(fabric.tensor(a.astype(other))), a)
    with pytest.raises(weft.InvalidArgumentError, match="byte order"):
        fabric.matmul(a.astype(other), b, copy=False)
    for call in (lambda o: fabric.relu(a, out=o), lambda o: fabric.axpy(1.0, a, o),
                 lambda o: fabric.tensor(a).numpy(out=o)):
        with pytest.raises(TypeError, match="native byte order"):
            call(np.zeros((2, 3), other))
