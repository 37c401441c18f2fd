"""Every op on numpy arrays: the same bits as the canonical order (reference.py) on every exact lane and when
routed, close to a float64 computation, and the fp32 contract within its error bound."""

import numpy as np
import pytest

import reference as ref
import weft

f32 = np.float32


def rand(rng, *shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, shape).astype(f32)


def run(fn, *args, **kw):
    """Runs an op. Every lane these tests pin to claims the exact contract (conftest.EXACT_LANES) and routed
    ops always have the CPU lane, so an UnsupportedError is the lane breaking its claim: a failure, never a
    skip."""
    try:
        return fn(*args, **kw)
    except weft.UnsupportedError as e:
        pytest.fail(f"a lane that claims the exact contract refused the op: {e}")


def test_a_refusal_on_a_lane_that_claims_exact_fails():
    # run() must turn an UnsupportedError into a failure: a skip here would let a lane that claims the
    # contract and refuses its ops pass the whole suite.
    def refuses(*args, **kw):
        raise weft.UnsupportedError("vulkan:0 does not run relu")

    try:
        run(refuses)
    except pytest.fail.Exception as e:
        assert "claims the exact contract" in str(e)
        return
    except BaseException as e:  # pytest.skip raises an OutcomeException, not an Exception
        pytest.fail(f"run() turned the refusal into {type(e).__name__}, not a failure")
    pytest.fail("run() swallowed the refusal")


def test_reference_matmul_is_the_definition():
    # The vectorised reference must equal the element-by-element statement of the canonical order.
    rng = np.random.default_rng(0)
    a, b = rand(rng, 5, 37), rand(rng, 37, 6)
    assert ref.same_bits(ref.matmul(a, b), ref.matmul_loop(a, b))


def test_reference_expf_logf_match_the_library():
    # The numpy transcriptions of weft_expf/weft_logf agree with the library's on a spread of inputs,
    # including the range edges, so the softmax reference below is the library's definition.
    rng = np.random.default_rng(1)
    xs = np.concatenate([rng.uniform(-110, 95, 2000), rng.uniform(-1, 1, 500),
                         [0.0, -0.0, 88.72, 88.73, -103.9, -104.0, -87.5, -100.0, np.nan, np.inf, -np.inf]]).astype(f32)
    got = np.array([weft.expf(float(x)) for x in xs], f32)
    assert ref.same_bits(ref.expf(xs), got)
    ls = np.concatenate([rng.uniform(0, 100, 1000), 10.0 ** rng.uniform(-44, 38, 1000),
                         [0.0, 1.0, 2.0, 1e-45, 1e-40, np.inf, -1.0, np.nan]]).astype(f32)
    got = np.array([weft.logf(float(x)) for x in ls], f32)
    assert ref.same_bits(ref.logf(ls), got)


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (4, 4, 4), (7, 13, 5), (33, 65, 17), (64, 100, 48), (128, 257, 96)])
def test_matmul_exact(fabric, lane, m, k, n):
    rng = np.random.default_rng(m * 1000 + k * 10 + n)
    a, b = rand(rng, m, k), rand(rng, k, n)
    c = run(fabric.matmul, a, b, lane=lane)
    assert c.dtype == f32 and c.shape == (m, n)
    assert ref.same_bits(c, ref.matmul(a, b))
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    # the classic bound of a length-k float32 dot product: k * u * (|a| . |b|)
    assert np.all(np.abs(c - a64 @ b64) <= 1.01 * k * 2.0 ** -24 * (np.abs(a64) @ np.abs(b64)))


def test_matmul_small_matches_scalar_loop(fabric, lane):
    rng = np.random.default_rng(7)
    a, b = rand(rng, 3, 9), rand(rng, 9, 4)
    assert ref.same_bits(run(fabric.matmul, a, b, lane=lane), ref.matmul_loop(a, b))


@pytest.mark.parametrize("trans_a,trans_b", [(False, True), (True, False), (True, True)])
def test_matmul_transposes(fabric, lane, trans_a, trans_b):
    rng = np.random.default_rng(3)
    m, k, n = 9, 31, 11
    a = rand(rng, k, m) if trans_a else rand(rng, m, k)
    b = rand(rng, n, k) if trans_b else rand(rng, k, n)
    c = run(fabric.matmul, a, b, trans_a=trans_a, trans_b=trans_b, lane=lane)
    assert ref.same_bits(c, ref.matmul(a, b, trans_a, trans_b))


def test_matmul_batched(fabric, lane):
    rng = np.random.default_rng(4)
    a, b_shared, b_batched = rand(rng, 2, 3, 5, 7), rand(rng, 7, 4), rand(rng, 2, 3, 7, 4)
    c = run(fabric.matmul, a, b_shared, lane=lane)
    assert c.shape == (2, 3, 5, 4)
    assert ref.same_bits(c, ref.matmul(a, b_shared))
    c = run(fabric.matmul, a, b_batched, lane=lane)
    assert ref.same_bits(c, ref.matmul(a, b_batched))


def test_matmul_exact_lanes_agree_with_each_other(fabric):
    lanes = [lane.name for lane in fabric.devices() if "exact" in lane.contracts]
    rng = np.random.default_rng(5)
    a, b = rand(rng, 70, 300), rand(rng, 300, 50)
    results = {}
    for lane in lanes:
        results[lane] = run(fabric.matmul, a, b, lane=lane)  # each claims exact: refusing is a failure
    first = next(iter(results.values()))
    assert all(ref.same_bits(first, r) for r in results.values()), list(results)


def test_matmul_fp32_within_bound(fabric):
    rng = np.random.default_rng(6)
    k = 333
    a, b = rand(rng, 40, k), rand(rng, k, 30)
    c = fabric.matmul(a, b, contract="fp32")
    exact64 = a.astype(np.float64) @ b.astype(np.float64)
    assert np.max(np.abs(c - exact64)) <= 2 * k * 2.0 ** -24 * k
    assert np.allclose(c, exact64, rtol=1e-4, atol=1e-4)


def test_add_and_broadcast(fabric, lane):
    rng = np.random.default_rng(8)
    x, y, row = rand(rng, 6, 10), rand(rng, 6, 10), rand(rng, 10)
    assert ref.same_bits(run(fabric.add, x, y, lane=lane), x + y)
    assert ref.same_bits(run(fabric.add, x, row, lane=lane), x + row)
    assert ref.same_bits(run(fabric.add, x, row.reshape(1, 10), lane=lane), x + row)


def test_relu_and_backward(fabric, lane):
    x = np.array([[-2.0, -0.0, 0.0, 1e-30, 3.5, np.nan, -np.inf, np.inf]], f32)
    r = run(fabric.relu, x, lane=lane)
    assert ref.same_bits(r, ref.relu(x))
    assert np.signbit(r[0, 1]) == False  # noqa: E712 - relu(-0) is +0 by definition
    g = np.arange(8, dtype=f32).reshape(1, 8) + 1
    assert ref.same_bits(run(fabric.relu_backward, g, x, lane=lane), ref.relu_backward(g, x))


def test_scale_axpy(fabric, lane):
    rng = np.random.default_rng(9)
    x, y = rand(rng, 5, 7), rand(rng, 5, 7)
    assert ref.same_bits(run(fabric.scale, 0.3, x, lane=lane), ref.scale(0.3, x))
    y0 = y.copy()
    out = run(fabric.axpy, -0.7, x, y, lane=lane)
    assert out is y  # in place
    assert ref.same_bits(y, ref.axpy(-0.7, x, y0))


def test_sum_rows(fabric, lane):
    rng = np.random.default_rng(10)
    x = rand(rng, 300, 9, lo=-1e3, hi=1e3)
    s = run(fabric.sum_rows, x, lane=lane)
    assert s.shape == (9,)
    assert ref.same_bits(s, ref.sum_rows(x))
    assert np.allclose(s, x.astype(np.float64).sum(axis=0), rtol=1e-4, atol=1e-1)
    x3 = rand(rng, 2, 3, 4)  # every leading dimension counts as rows
    assert ref.same_bits(run(fabric.sum_rows, x3, lane=lane), ref.sum_rows(x3))


@pytest.mark.parametrize("rows,cols", [(1, 2), (8, 10), (33, 7)])
def test_softmax_xent(fabric, lane, rows, cols):
    rng = np.random.default_rng(rows * cols)
    z = rand(rng, rows, cols, lo=-8, hi=8)
    t = np.eye(cols, dtype=f32)[rng.integers(0, cols, rows)]
    loss, grad = run(fabric.softmax_xent, z, t, lane=lane)
    want_loss, want_grad = ref.softmax_xent(z, t)
    assert isinstance(loss, np.float32) and grad.shape == z.shape
    assert ref.same_bits(loss, want_loss)
    assert ref.same_bits(grad, want_grad)
    loss64, grad64 = ref.softmax_xent_f64(z, t)
    assert abs(float(loss) - loss64) <= 1e-5 * max(1.0, abs(loss64))
    assert np.allclose(grad, grad64, rtol=1e-5, atol=1e-6)


def test_softmax_xent_soft_targets_and_one_output(fabric):
    rng = np.random.default_rng(11)
    z = rand(rng, 4, 5)
    t = rng.dirichlet(np.ones(5), 4).astype(f32)
    loss, grad = fabric.softmax_xent(z, t, grad=False)
    assert grad is None and ref.same_bits(loss, ref.softmax_xent(z, t)[0])
    loss, grad = fabric.softmax_xent(z, t, loss=False)
    assert loss is None and ref.same_bits(grad, ref.softmax_xent(z, t)[1])


def test_module_level_functions_use_the_default_fabric():
    rng = np.random.default_rng(12)
    a, b = rand(rng, 3, 4), rand(rng, 4, 2)
    assert ref.same_bits(weft.matmul(a, b), ref.matmul(a, b))
    assert ref.same_bits(weft.add(a, a), a + a)
    assert ref.same_bits(weft.relu(a), ref.relu(a))
    assert ref.same_bits(weft.relu_backward(a, a), ref.relu_backward(a, a))
    assert ref.same_bits(weft.scale(2.5, a), ref.scale(2.5, a))
    y = a.copy()
    weft.axpy(0.5, a, y)
    assert ref.same_bits(y, ref.axpy(0.5, a, a))
    assert ref.same_bits(weft.sum_rows(a), ref.sum_rows(a))
    t = np.eye(2, dtype=f32)[[0, 1, 1]]
    z = rand(rng, 3, 2)
    assert ref.same_bits(weft.softmax_xent(z, t)[1], ref.softmax_xent(z, t)[1])
    assert weft.default_fabric().last_lane in weft.default_fabric().lanes


# --------------------------------------------------------------------------------------- input conversion

def test_float32_contiguous_input_is_not_copied_and_not_modified(fabric):
    a = np.arange(12, dtype=f32).reshape(3, 4)
    before = a.copy()
    fabric.matmul(a, a.T.copy())
    assert ref.same_bits(a, before)


def test_other_dtypes_convert_only_when_asked(fabric):
    # changed with the native module: weft converted float64 and integers silently before; now it says how
    a64 = np.array([[0.1, 0.2], [0.3, 0.4]])
    ai = np.array([[1, 2], [3, 4]])
    with pytest.raises(TypeError, match=r"float64.*astype\(numpy.float32\).*dtype=numpy.float32"):
        fabric.matmul(a64, ai)
    got = fabric.matmul(a64, ai, dtype=np.float32)  # float64 rounds to the nearest float32
    assert got.dtype == f32
    assert ref.same_bits(got, ref.matmul(a64.astype(f32), ai.astype(f32)))
    assert ref.same_bits(fabric.add([[1, 2]], [[True, False]], dtype=f32), np.array([[2, 2]], f32))
    assert ref.same_bits(fabric.relu(np.array([-1, 2], np.float16), dtype="float32"), np.array([0, 2], f32))


def test_non_contiguous_and_readonly_inputs(fabric):
    rng = np.random.default_rng(13)
    big = rand(rng, 8, 8)
    view = big[::2, 1::2]  # a strided view is copied first
    assert ref.same_bits(fabric.matmul(view, view), ref.matmul(view.copy(), view.copy()))
    ro = big.copy()
    ro.flags.writeable = False
    assert ref.same_bits(fabric.matmul(ro, ro), ref.matmul(big, big))
    fortran = np.asfortranarray(big)
    assert ref.same_bits(fabric.matmul(fortran, big), ref.matmul(big, big))


def test_unconvertible_dtype_raises_type_error(fabric):
    with pytest.raises(TypeError, match="complex"):
        fabric.relu(np.ones((2, 2), np.complex64))
    with pytest.raises(TypeError):
        fabric.relu(np.array([["a", "b"]]))


def test_out_ndarray_is_filled_in_place(fabric):
    rng = np.random.default_rng(14)
    a, b = rand(rng, 4, 6), rand(rng, 6, 3)
    out = np.full((4, 3), 99, f32)
    r = fabric.matmul(a, b, out=out)
    assert r is out and ref.same_bits(out, ref.matmul(a, b))
    with pytest.raises(weft.ShapeError, match=r"out has shape \(4, 4\); the result has shape \(4, 3\)"):
        fabric.matmul(a, b, out=np.empty((4, 4), f32))
    with pytest.raises(TypeError):
        fabric.matmul(a, b, out=np.empty((4, 3), np.float64))


def test_repeated_shapes_reuse_scratch_and_small_budget_evicts(fabric):
    rng = np.random.default_rng(15)
    a, b = rand(rng, 16, 16), rand(rng, 16, 16)
    fabric.matmul(a, b)
    for _ in range(5):
        x = rand(rng, 16, 16)
        assert ref.same_bits(fabric.matmul(x, b), ref.matmul(x, b))
    with weft.Fabric(calibration="off", scratch_bytes=4096) as small:
        for n in (8, 16, 24, 32, 40):
            x, y = rand(rng, n, n), rand(rng, n, n)
            assert ref.same_bits(small.matmul(x, y), ref.matmul(x, y))
            assert ref.same_bits(small.add(x, y), x + y)
