"""Tensors that feel like arrays: @ + - * by scalars, .T, .shape, .dtype, len, np.asarray, repr; operators
under the tensor's contract; and numpy's own operators deferring to the tensor's."""

import numpy as np
import pytest

import reference as ref
import weft

f32 = np.float32


@pytest.fixture
def ab(fabric):
    rng = np.random.default_rng(30)
    a, b = rng.uniform(-1, 1, (4, 3)).astype(f32), rng.uniform(-1, 1, (3, 5)).astype(f32)
    return a, b, fabric.tensor(a), fabric.tensor(b)


def test_attributes(fabric, ab):
    a, _, ta, _ = ab
    assert ta.shape == (4, 3) and ta.ndim == 2 and ta.size == 12 and ta.nbytes == 48
    assert ta.dtype == np.float32 and len(ta) == 4
    assert ref.same_bits(np.asarray(ta), a) and np.asarray(ta, dtype=np.float64).dtype == np.float64
    with pytest.raises(ValueError, match="copy=False"):
        ta.__array__(copy=False)


def test_operators_give_tensors_with_numpys_values(fabric, ab):
    a, b, ta, tb = ab
    c = ta @ tb
    assert isinstance(c, weft.Tensor) and ref.same_bits(c.numpy(), ref.matmul(a, b))
    assert ref.same_bits((ta * 2).numpy(), a * f32(2)) and ref.same_bits((2 * ta).numpy(), a * f32(2))
    assert ref.same_bits((ta * 0.5).numpy(), a * f32(0.5))
    assert ref.same_bits((-ta).numpy(), -a)
    assert ref.same_bits((ta + ta).numpy(), a + a)
    assert ref.same_bits((ta - ta * 2).numpy(), a - a * f32(2))
    assert ref.same_bits((ta + 1.5).numpy(), a + f32(1.5)) and ref.same_bits((1.5 + ta).numpy(), a + f32(1.5))
    assert ref.same_bits((ta - 1).numpy(), a - f32(1)) and ref.same_bits((1 - ta).numpy(), f32(1) - a)
    bias = np.arange(3, dtype=f32)
    assert ref.same_bits((ta + bias).numpy(), a + bias)       # a row added to every row, as numpy broadcasts
    assert ref.same_bits((bias + ta).numpy(), a + bias)       # numpy defers to the tensor (__array_ufunc__ = None)
    assert ref.same_bits((a @ tb).numpy(), ref.matmul(a, b))  # ndarray @ Tensor runs on the fabric
    assert isinstance(a @ tb, weft.Tensor) and isinstance(a - ta, weft.Tensor)
    assert ref.same_bits((a - ta).numpy(), a - a)
    with pytest.raises(TypeError, match="by a scalar"):
        ta * ta
    with pytest.raises(TypeError):
        ta / 2  # division is not one of weft's ops: refused, not approximated


def test_transpose(fabric, ab):
    a, b, ta, tb = ab
    assert ta.T.shape == (3, 4) and ta.T.base is ta and ta.T.T is ta
    assert ref.same_bits(np.asarray(ta.T), a.T)
    assert ref.same_bits((ta.T @ ta).numpy(), ref.matmul(np.ascontiguousarray(a.T), a))  # no copy: a transposition
    assert ref.same_bits((ta.T * 3).numpy(), np.ascontiguousarray(a.T) * f32(3))      # made real on the lane
    v = fabric.tensor(np.arange(3, dtype=f32))
    assert v.T is v
    x = np.arange(24, dtype=f32).reshape(2, 3, 4)
    tx = fabric.tensor(x)
    assert tx.T.shape == (4, 3, 2) and ref.same_bits(np.asarray(tx.T), x.T)  # every axis reversed, as numpy
    assert tx.mT.shape == (2, 4, 3) and ref.same_bits(np.asarray(tx.mT), x.transpose(0, 2, 1))


def test_repr_shows_shape_lane_and_contract(fabric, ab):
    _, _, ta, tb = ab
    r = repr(ta)
    assert "shape=(4, 3)" in r and "lane=host" in r and "contract=exact" in r
    fp32 = [d.name for d in fabric.devices() if "fp32" in d.contracts]  # the last that honours it
    c = fabric.matmul(ta, tb, contract="fp32", lane=fp32[-1])
    r = repr(c)
    assert f"lane={c.location}" in r and "contract=fp32" in r
    ta2 = fabric.tensor(np.ones(2, f32))
    ta2.close()
    assert "closed" in repr(ta2)


def test_operators_run_under_the_tensors_contract(fabric, ab):
    a, b, ta, tb = ab
    fp = ta.with_contract("fp32")
    assert fp.contract == "fp32" and fp.base is ta
    c = fp @ tb.with_contract("fp32")
    assert c.contract == "fp32"
    assert np.allclose(c.numpy(), a @ b, atol=1e-5)
    assert (ta @ tb).contract == "exact"
    with pytest.raises(ValueError, match="different contracts"):
        fp @ tb
    assert fabric.tensor(a, contract="fp32").contract == "fp32"


def test_scalar_tensor(fabric):
    v = fabric.tensor(np.array([1, 2, 3], f32))
    s = v @ v
    assert s.shape == () and s.ndim == 0 and np.asarray(s) == 14
    with pytest.raises(TypeError, match="0-d"):
        len(s)
    assert float(np.asarray(s * 2)) == 28
