"""In-place ops from Python: `out=` naming an input Tensor (the same tensor) gives the bits of the op out of
place on every exact lane and when routed - remote lanes included when WEFT_REMOTE names a worker (CTest's
python_inplace_remote) - and matmul refuses an output that is an input, changing nothing."""

import numpy as np
import pytest

import weft

f32 = np.float32


def data(seed, shape=(37, 29)):
    x = np.random.default_rng(seed).uniform(-4, 4, shape).astype(f32)
    x.flat[3] = 0.0
    x.flat[5] = -0.0
    return x


def same_bits(a, b):
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


CASES = {
    "relu": lambda f, x, y, lane, out: f.relu(x, lane=lane, out=out),
    "scale": lambda f, x, y, lane, out: f.scale(-1.75, x, lane=lane, out=out),
    "add": lambda f, x, y, lane, out: f.add(x, y, lane=lane, out=out),
    "relu_backward": lambda f, x, y, lane, out: f.relu_backward(x, y, lane=lane, out=out),
}


@pytest.mark.parametrize("op", sorted(CASES))
def test_out_is_x(fabric, lane, op):
    x0, y0 = data(1), data(2)
    want = CASES[op](fabric, x0, y0, lane, None)
    x, y = fabric.tensor(x0), fabric.tensor(y0)
    r = CASES[op](fabric, x, y, lane, x)
    assert r is x
    got = x.numpy()
    assert same_bits(want, got), f"{op} in place on {lane or 'auto'} differs from out of place"
    assert not same_bits(x0, got)


def test_add_out_is_y(fabric, lane):
    x0, y0 = data(3), data(4)
    want = fabric.add(x0, y0, lane=lane)
    x, y = fabric.tensor(x0), fabric.tensor(y0)
    fabric.add(x, y, lane=lane, out=y)
    assert same_bits(want, y.numpy())
    assert same_bits(x0, x.numpy())


def test_axpy_in_place(fabric, lane):
    x0, y0 = data(5), data(6)
    y = fabric.tensor(y0)
    fabric.axpy(0.5, fabric.tensor(x0), y, lane=lane)
    assert same_bits((f32(0.5) * x0) + y0, y.numpy())


def test_matmul_out_is_a_refused(fabric, lane):
    a0 = data(7, (16, 16))
    a = fabric.tensor(a0)
    with pytest.raises(weft.InvalidArgumentError, match="in-place"):
        fabric.matmul(a, a, lane=lane, out=a)
    assert same_bits(a0, a.numpy())
