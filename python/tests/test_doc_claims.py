"""Each claim of python/README.md, the package's docstrings and its type stubs that the other files do not hold
already, checked as written: the quoted words are the claim, the test is what makes it true or fails. Operands
hold small whole numbers, so every summation order gives numpy's bits and a plain comparison is exact."""

import datetime
import gc
import inspect
import threading

import numpy as np
import pytest

import weft

f32 = np.float32


def ints(seed, *shape, lo=-4, hi=5):
    return np.random.default_rng(seed).integers(lo, hi, shape).astype(f32)


def same(x, y):
    x, y = np.asarray(x), np.asarray(y)
    return x.shape == y.shape and x.dtype == y.dtype and np.array_equal(x, y, equal_nan=True)


def readonly(a):
    a.setflags(write=False)
    return a


def misaligned(shape):
    n = int(np.prod(shape))
    return np.ndarray(shape, f32, buffer=np.zeros(4 * n + 1, np.uint8), offset=1)


def bad_outputs(shape):
    """Arrays that README says an output may not be: read-only, not C-contiguous, misaligned, the other byte
    order, not float32."""
    return {
        "read-only": readonly(np.zeros(shape, f32)),
        "Fortran": np.zeros(shape, f32, order="F"),
        "strided": np.zeros(shape[:-1] + (2 * shape[-1],), f32)[..., ::2],
        "misaligned": misaligned(shape),
        "byte order": np.zeros(shape, f32).astype(f32().dtype.newbyteorder()),
        "float64": np.zeros(shape),
    }


# --------------------------------------------------------------------------------------- numpy.matmul's rules

def test_two_1d_operands_give_a_numpy_scalar(fabric):
    # "two 1-D operands give a numpy scalar"
    a, b = ints(1, 5), ints(2, 5)
    r = fabric.matmul(a, b)
    assert type(r) is np.float32 and r == a @ b
    r = weft.matmul(a, b)
    assert type(r) is np.float32 and r == a @ b


@pytest.mark.parametrize("sa,sb", [((3,), (3, 4)), ((2, 3), (3,)), ((5, 2, 3), (3,)), ((3,), (5, 3, 2)),
                                   ((2, 1, 3, 2, 3), (3, 4)), ((2, 1, 1, 2, 3), (1, 3, 1, 3, 2)),
                                   ((1, 1, 1, 1, 1, 2, 3), (3, 1))])
def test_promotion_and_broadcast_at_any_rank_give_numpys_result(fabric, sa, sb):
    # "1-D operands are promoted ... and the dimension removed", "Batch dimensions broadcast; arrays of any rank"
    a, b = ints(3, *sa), ints(4, *sb)
    assert same(fabric.matmul(a, b), a @ b)


def test_a_batch_repeated_for_arrays_is_a_counted_copy_and_refused_for_tensors(fabric):
    # "A batch that broadcasts only by repeating an operand is expanded for arrays (a copy, counted) and refused
    # for tensors"
    a, b = ints(5, 2, 1, 2, 3), ints(6, 3, 3, 2)
    copies = fabric.copies
    assert same(fabric.matmul(a, b), a @ b)
    assert fabric.copies > copies
    with pytest.raises(weft.ShapeError, match="broadcast only by repeating"):
        fabric.tensor(a) @ fabric.tensor(b)
    with pytest.raises(weft.InvalidArgumentError, match="copy=False"):
        fabric.matmul(a, b, copy=False)


def test_one_matrix_against_a_batch_needs_no_copy(fabric):
    # "one matrix against a batch needs no copy"
    m, batch = ints(7, 2, 3), ints(8, 5, 3, 4)
    for a, b in ((m, batch), (ints(9, 5, 4, 2), ints(10, 2, 3))):
        copies = fabric.copies
        assert same(fabric.matmul(a, b, copy=False), a @ b)
        assert fabric.copies == copies
        assert same((fabric.tensor(a) @ fabric.tensor(b)).numpy(), a @ b)


def test_empty_operands_as_numpy_and_tensor_results_where_a_tensor_can_hold_them(fabric):
    # "Empty operands give empty results, an inner dimension of 0 gives zeros ... only the batch dimensions of a
    # rank-3 or rank-4 tensor may be 0; otherwise ShapeError, and arrays give the empty array"
    assert same(fabric.matmul(np.ones((2, 0), f32), np.ones((0, 4), f32)), np.zeros((2, 4), f32))
    assert same(fabric.matmul(np.ones((0, 3), f32), np.ones((3, 4), f32)), np.zeros((0, 4), f32))
    assert same(fabric.matmul(np.ones((2, 3), f32), np.ones((3, 0), f32)), np.zeros((2, 0), f32))
    e = fabric.tensor(np.ones((0, 2, 3), f32))
    r = e @ np.ones((3, 4), f32)
    assert isinstance(r, weft.Tensor) and r.shape == (0, 2, 4)
    with pytest.raises(weft.ShapeError, match="cannot hold"):
        fabric.tensor(np.ones((2, 3), f32)) @ np.ones((3, 0), f32)
    with pytest.raises(weft.ShapeError):
        fabric.tensor(np.ones((0, 3), f32))


def test_a_0d_operand_is_a_shape_error(fabric):
    # "A refusal of bad arguments (a 0-d matmul operand ...) is one too (ShapeError ...)"
    for z in (f32(2), np.array(2, f32)):
        with pytest.raises(weft.ShapeError, match="^matmul: a is a scalar"):
            fabric.matmul(z, np.ones(3, f32))
    with pytest.raises(weft.ShapeError):
        fabric.tensor(f32(2)) @ fabric.tensor(f32(3))


# ----------------------------------------------------------------------------------------------- layouts

def test_contiguous_fortran_and_transposed_operands_are_not_copied(fabric):
    # "C-contiguous arrays are used in place ... Fortran-ordered matrices and transposed views go to the library
    # as transpositions, no copy"
    a, b = ints(11, 6, 5), ints(12, 5, 4)
    for x, y in ((a, b), (np.asfortranarray(a), b), (a, np.asfortranarray(b)), (a.T.copy().T, b.T.copy().T)):
        copies = fabric.copies
        assert same(fabric.matmul(x, y, copy=False), a @ b)
        assert fabric.copies == copies


def test_other_strided_views_and_the_other_byte_order_are_counted_copies(fabric):
    # "Other strided views, and float32 in the other byte order, are copied (the latter into native order: its
    # values, not its bytes); Fabric.copies counts every copy ..., and matmul(..., copy=False) refuses instead (a
    # dtype= conversion too)"
    b = ints(13, 3, 4)
    base = ints(14, 4, 6)
    views = [base[::2, ::2], base[::-1, :3], base[:, 1:4][::-1], ints(15, 2, 3).astype(">f4"),
             np.broadcast_to(ints(16, 3), (2, 3))]
    for v in views:
        copies = fabric.copies
        assert same(fabric.matmul(v, b), np.asarray(v, f32) @ b)
        assert fabric.copies == copies + 1
        with pytest.raises(weft.InvalidArgumentError, match="copy=False"):
            fabric.matmul(v, b, copy=False)
    copies = fabric.copies
    assert same(fabric.matmul(ints(17, 2, 3).astype(np.float64), b, dtype=f32), ints(17, 2, 3) @ b)
    assert fabric.copies == copies + 1
    with pytest.raises(weft.InvalidArgumentError, match="copy=False"):
        fabric.matmul(ints(17, 2, 3).astype(np.float64), b, dtype=f32, copy=False)


def test_readonly_and_misaligned_inputs_are_read(fabric):
    a, b = ints(18, 2, 3), ints(19, 3, 4)
    m = misaligned((2, 3))
    m[...] = a
    assert same(fabric.matmul(readonly(a.copy()), b), a @ b)
    assert same(fabric.matmul(m, b), a @ b)
    assert same(fabric.relu(m), np.maximum(a, 0))
    assert same(fabric.relu(readonly(a.copy())), np.maximum(a, 0))


def test_outputs_must_be_writable_contiguous_aligned_native_float32(fabric):
    # "An output array (out=, axpy's y, Tensor.numpy(out=)) must be writable, C-contiguous, aligned float32 in
    # native byte order, else TypeError"
    a, b = ints(20, 2, 3), ints(21, 3, 4)
    t = fabric.tensor(a)
    for why, out in bad_outputs((2, 4)).items():
        before = np.array(out, copy=True)
        with pytest.raises(TypeError, match="^matmul: out must be"):
            fabric.matmul(a, b, out=out)
        assert np.array_equal(out, before), why  # refused: untouched
    for why, y in bad_outputs((2, 3)).items():
        with pytest.raises(TypeError, match="^axpy: y "):
            fabric.axpy(1.0, a, y)
        with pytest.raises(TypeError, match="^relu: out must be"):
            fabric.relu(a, out=y)
        with pytest.raises(TypeError, match=r"^numpy\(out=...\): out must be"):
            t.numpy(out=y)


def test_outputs_may_overlap_their_operands(fabric):
    # "Outputs may overlap the operands, as in numpy (out=x, a shifted view of x, axpy(a, x, x), a from_dlpack
    # tensor over an operand's memory)"
    x = ints(22, 4, 4)
    want = x @ x
    assert same(fabric.matmul(x, x, out=x), want)
    buf = ints(23, 17)
    want = buf[:16] + buf[1:]
    fabric.add(buf[:16], buf[1:], out=buf[1:])
    assert same(buf[1:], want)
    x = ints(24, 3, 3)
    want = x + 2 * x
    assert fabric.axpy(2.0, x, x) is x and same(x, want)
    x, y = ints(25, 3, 3), ints(26, 3, 3)
    want = x @ y
    t = weft.from_dlpack(x, fabric=fabric)
    assert fabric.matmul(x, y, out=t) is t
    assert same(x, want)


# ----------------------------------------------------------------------------------------------- dtypes

@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.int32, np.int64, np.uint8, np.bool_])
def test_no_silent_conversion_unless_dtype_is_given(fabric, dtype):
    # "a float64, integer, boolean or float16 operand ... raises TypeError saying how to convert it, unless the
    # call passes dtype=numpy.float32"
    a = np.ones((2, 3), dtype)
    b = np.ones((3, 2), f32)
    with pytest.raises(TypeError, match=r"^matmul: a has dtype .*astype\(numpy.float32\).*dtype=numpy.float32"):
        fabric.matmul(a, b)
    assert same(fabric.matmul(a, b, dtype=f32), np.full((2, 2), 3, f32))
    t = fabric.tensor(b)
    with pytest.raises(TypeError, match="astype"):
        a @ t
    with pytest.raises(TypeError, match="astype"):
        t.T + a


def test_a_list_of_floats_is_float64(fabric):
    with pytest.raises(TypeError, match="float64"):
        fabric.matmul([[1.0, 2.0]], [[1.0], [2.0]])
    assert same(fabric.matmul([[1.0, 2.0]], [[1.0], [2.0]], dtype=f32), np.array([[5]], f32))


def test_dtype_must_be_float32_and_names_the_call(fabric):
    a = np.ones((2, 2), f32)
    with pytest.raises(TypeError, match="^matmul: .*float32"):
        fabric.matmul(a, a, dtype=np.float64)
    with pytest.raises(TypeError, match="^relu: "):
        fabric.relu(a, dtype="no such dtype")


# ----------------------------------------------------------------------------------------------- errors

def test_every_error_names_the_python_call(fabric):
    # "Errors are weft.WeftError subclasses ... with weft's message, which names the Python function (add: ...),
    # never a C one"
    a = np.ones((2, 3), f32)
    closed = weft.Fabric(lanes="cpu", calibration="off")
    ct = closed.tensor(a)
    closed.close()
    gpt = weft.GPT(fabric, L=1, C=16, NH=2, V=16, maxT=8)
    tok = np.zeros((1, 4), np.int32)
    cases = [
        ("matmul", lambda: fabric.matmul(a, a, contract="fast")),
        ("relu", lambda: fabric.relu(a, lane="no-such-lane")),
        ("add", lambda: fabric.add(a, a, lane=999)),
        ("matmul", lambda: closed.matmul(a, a.T)),
        ("sync", lambda: closed.sync()),
        ("numpy", lambda: ct.numpy()),
        ("tensor", lambda: fabric.tensor(a, contract="fast")),
        ("zeros", lambda: fabric.zeros((2, 3), contract=9)),
        ("with_contract", lambda: fabric.tensor(a).with_contract("fast")),
        ("from_dlpack", lambda: fabric.from_dlpack(a, contract="fast")),
        ("route_explain", lambda: fabric.route_explain("matmul", (2, 3), (3, 4), contract="fast")),
        ("route_last", lambda: closed.route_last()),
        ("cost_model", lambda: fabric.cost_model("no-such-lane")),
        ("cost_model", lambda: fabric.cost_model("cpu", contract="fast")),
        ("set_cost_model", lambda: fabric.set_cost_model("cpu", "nope", 1e-6, 1e9)),
        ("devices", lambda: closed.devices()),
        ("loss", lambda: gpt.loss(tok + 99, tok)),
        ("loss", lambda: gpt.loss(np.zeros((1, 9), np.int32), np.zeros((1, 9), np.int32))),
        ("train_step", lambda: gpt.train_step(tok, tok, lr=float("nan"))),
        ("save", lambda: gpt.save("/nonexistent-dir/x.ckpt")),
        ("GPT", lambda: weft.GPT(fabric, place="nowhere")),
        ("GPT.load", lambda: weft.GPT.load("/nonexistent-dir/x.ckpt", fabric=fabric)),
        ("scope", lambda: closed.scope().__enter__()),
        ("devices", lambda: weft.devices("no-such-lane-kind")),
        ("bench", lambda: weft.bench(sizes=[8], lanes="no-such-lane-kind")),
        ("bench", lambda: weft.bench(sizes=[8], lanes="cpu", cpu_threads=-1)),
    ]
    for fn, call in cases:
        with pytest.raises(weft.WeftError) as info:
            call()
        msg = str(info.value)
        assert msg.startswith(fn + ": "), (fn, msg)
        assert "weft_" not in msg and msg.count(fn + ": ") == 1, msg
        assert info.value.status is not None and info.value.status_name != "unknown"
    gpt.close()


def test_type_and_overflow_errors_name_the_call_too(fabric):
    with pytest.raises(OverflowError, match="^zeros: "):
        fabric.zeros((2 ** 70,))
    with pytest.raises(TypeError, match="^expf: x must be a real number"):
        weft.expf("1")
    with pytest.raises(ValueError, match="^relu: "):  # numpy's own words, said by the call they came from
        fabric.relu([[1.0], [1.0, 2.0]], dtype=f32)
    with pytest.raises(BufferError, match="^from_dlpack: "):
        fabric.from_dlpack(readonly(np.ones(3, f32)))


def test_the_named_exception_kinds(fabric):
    # "a wrong dtype or an argument of the wrong Python type is TypeError, a Python int too large for C is
    # OverflowError, and memory from_dlpack cannot share as it is (strided) is BufferError"
    a = np.ones((2, 2), f32)
    for cls, base in ((weft.ShapeError, ValueError), (weft.InvalidArgumentError, ValueError),
                      (weft.OutOfMemoryError, MemoryError), (weft.StateError, RuntimeError),
                      (weft.NotFoundError, LookupError), (weft.SizeOverflowError, OverflowError)):
        assert issubclass(cls, weft.WeftError) and issubclass(cls, base)
    with pytest.raises(TypeError):
        fabric.relu(a, out=[0.0] * 4)
    with pytest.raises(OverflowError):
        fabric.scale(10 ** 400, a)
    with pytest.raises(OverflowError):
        fabric.tensor(a) * 10 ** 400
    with pytest.raises(BufferError):
        weft.from_dlpack(np.ones((4, 4), f32)[::2], fabric=fabric)
    with pytest.raises(weft.SizeOverflowError):
        fabric.zeros((2 ** 40, 2 ** 40))
    with pytest.raises(weft.InvalidArgumentError):
        weft.bench(sizes=[0], fabric=fabric)


# ----------------------------------------------------------------------------------------------- tensors

def test_tensors_have_rank_0_to_4(fabric):
    # "Tensors (weft.Tensor, rank 0 to 4, float32)"
    for nd in range(5):
        shape = tuple(range(2, 2 + nd))
        t = fabric.tensor(ints(27, *shape))
        assert t.shape == shape and t.ndim == nd and t.dtype == np.dtype(f32)
        z = fabric.zeros(shape)
        assert z.shape == shape and same(z.numpy(), np.zeros(shape, f32))
    assert fabric.zeros(np.array([2, 3])).shape == (2, 3)  # as numpy.zeros takes a shape
    assert fabric.zeros(np.int64(3)).shape == (3,)
    with pytest.raises(weft.ShapeError):
        fabric.tensor(np.ones((1,) * 5, f32))
    with pytest.raises(weft.ShapeError):
        fabric.zeros((1,) * 5)
    s = fabric.tensor(f32(3))
    assert same(s.numpy(), np.array(3, f32)) and same((s * 2 + 1).numpy(), np.array(7, f32))
    with pytest.raises(TypeError):
        len(s)


def test_operators_take_tensors_arrays_and_scalars(fabric):
    # "@, +/- with tensors, arrays (numpy defers: __array_ufunc__ = None) and scalars, * by a scalar, unary -"
    a, b = ints(28, 2, 3), ints(29, 3, 4)
    ta, tb = fabric.tensor(a), fabric.tensor(b)
    assert weft.Tensor.__array_ufunc__ is None
    for got, want in (((ta @ tb), a @ b), ((a @ tb), a @ b), ((ta @ b), a @ b), ((ta + a), a + a), ((a + ta), a + a),
                      ((ta - a), a - a), ((a - ta), a - a), ((ta + 2), a + 2), ((2 - ta), 2 - a), ((ta * 3), a * 3),
                      ((3 * ta), a * 3), ((-ta), -a), ((ta + a[0]), a + a[0]), ((ta * np.int16(2)), a * 2),
                      ((ta * np.array(2.5)), a * f32(2.5)), ((ta + np.float64(0.5)), a + f32(0.5))):
        assert isinstance(got, weft.Tensor) and same(got.numpy(), want)


@pytest.mark.parametrize("bad", [True, np.bool_(True), 1 + 2j, np.complex64(1), np.array(True), np.timedelta64(2),
                                 datetime.timedelta(1), "2", None])
def test_scalars_are_real_numbers_only(fabric, bad):
    # "a scalar is a real number ... so complex numbers, bools and timedeltas are refused (TypeError), not
    # converted": for the operators and for every other place weft takes a scalar (scale, axpy, expf, logf)
    t = fabric.tensor(np.ones((2, 2), f32))
    x = np.ones((2, 2), f32)
    for op in (lambda: t * bad, lambda: bad * t, lambda: t + bad, lambda: t - bad, lambda: bad - t,
               lambda: fabric.scale(bad, x), lambda: fabric.axpy(bad, x, np.ones((2, 2), f32)),
               lambda: weft.expf(bad), lambda: weft.logf(bad)):
        with pytest.raises(TypeError):
            op()
    assert same(x, np.ones((2, 2), f32))


def test_division_and_elementwise_products_are_refused(fabric):
    # "Elementwise division and products are not weft ops: refused"
    t = fabric.tensor(np.ones((2, 2), f32))
    for op in (lambda: t * t, lambda: t * np.ones((2, 2), f32), lambda: np.ones((2, 2), f32) * t, lambda: t / 2,
               lambda: 2 / t, lambda: t / t, lambda: t // 2):
        with pytest.raises(TypeError):
            op()


def test_shape_dtype_ndim_len_T_mT_asarray_repr(fabric):
    # ".shape, .dtype, .ndim, len(), .T (numpy's: a view for a matrix ...; rank 3-4 permuted on the lane), .mT,
    # np.asarray(t), and a repr with shape, lane and contract"
    for shape in ((4,), (2, 3), (2, 3, 4), (2, 3, 4, 5)):
        a = ints(30, *shape)
        t = fabric.tensor(a, contract="fp32")
        assert t.shape == shape and t.ndim == len(shape) and len(t) == shape[0] and t.dtype == np.dtype(f32)
        assert t.size == a.size and t.nbytes == a.nbytes
        assert same(t.T.numpy(), a.T) and same(np.asarray(t.T), a.T)
        if len(shape) >= 2:
            assert same(t.mT.numpy(), np.swapaxes(a, -1, -2))
            assert t.mT.base is t
        assert same(np.asarray(t), a) and same(np.asarray(t, dtype=np.float64), a.astype(np.float64))
        r = repr(t)
        assert str(shape) in r and "lane=" in r and "contract=fp32" in r
    m = fabric.tensor(ints(31, 2, 3))
    assert m.T.base is m and m.T.T.shape == (2, 3) and same(m.T.T.numpy(), m.numpy())
    with pytest.raises(weft.ShapeError):
        fabric.tensor(ints(32, 3)).mT


def test_a_transposed_view_reads_into_out_and_takes_writes(fabric):
    # Tensor.numpy(out=): "written into out, a writable C-contiguous float32 array of as many elements"
    a = ints(33, 2, 3)
    t = fabric.tensor(a)
    out = np.zeros((3, 2), f32)
    assert t.T.numpy(out=out) is out and same(out, a.T)
    flat = np.zeros(6, f32)
    assert same(t.T.numpy(out=flat), a.T.ravel())
    with pytest.raises(weft.ShapeError):
        t.T.numpy(out=np.zeros(5, f32))
    t.T.write(ints(34, 3, 2))
    assert same(t.numpy(), ints(34, 3, 2).T)


def test_numpy_returns_a_copy(fabric):
    # "The value as a new float32 ndarray"; __array__: "a copy; see numpy.from_dlpack for shared memory"
    t = fabric.tensor(ints(35, 2, 3))
    x, y = t.numpy(), t.numpy()
    assert x.flags.owndata and not np.shares_memory(x, y)
    x[...] = 99
    assert same(t.numpy(), ints(35, 2, 3))
    with pytest.raises(ValueError):
        t.__array__(copy=False)


def test_operators_run_under_the_tensors_contract_and_mixed_contracts_are_refused(fabric):
    a = ints(36, 2, 2)
    t, u = fabric.tensor(a, contract="fp32"), fabric.tensor(a)
    assert (t @ a).contract == "fp32" and (u @ a).contract == "exact"
    v = u.with_contract("fp32")
    assert v.base is u and v.contract == "fp32" and same(v.numpy(), a)
    for op in (lambda: t @ u, lambda: t + u, lambda: u - t):
        with pytest.raises(weft.InvalidArgumentError, match="different contracts"):
            op()
    assert same((t @ v).numpy(), a @ a)


def test_closing_a_tensor_closes_its_views(fabric):
    t = fabric.tensor(ints(37, 2, 3))
    views = [t.T, t.mT, t.with_contract("fp32")]
    t.close()
    assert t.closed and all(v.closed for v in views)
    with pytest.raises(weft.StateError):
        views[0].numpy()


def test_a_fabric_as_context_manager_closes_its_tensors():
    with weft.Fabric(lanes="cpu", calibration="off") as f:
        t = f.tensor(np.ones(3, f32))
    assert f.closed and t.closed
    with pytest.raises(weft.StateError):
        t.numpy()
    f.close()  # "Calling it again does nothing."


# ----------------------------------------------------------------------------------------------- DLPack

def test_from_dlpack_shares_numpy_memory_both_ways(fabric):
    # "From then on that memory *is* the value whenever Python runs: ... ops writing it bring the result home
    # before they return"
    x = ints(38, 3, 3)
    t = weft.from_dlpack(x, fabric=fabric)
    fabric.scale(2.0, t, out=t)
    assert same(x, ints(38, 3, 3) * 2)
    x[0, 0] = 100
    assert fabric.relu(t).numpy()[0, 0] == 100
    assert same((t @ np.eye(3, dtype=f32)).numpy(), x)
    y = ints(39, 3, 2)
    tt = weft.from_dlpack(y.T, fabric=fabric)  # "or a matrix's transpose"
    assert tt.shape == (2, 3) and same(tt.numpy(), y.T)


def test_numpy_reads_and_torch_writes_a_tensors_memory(fabric):
    torch = pytest.importorskip("torch")
    t = fabric.tensor(ints(40, 2, 3))
    assert t.__dlpack_device__() == (1, 0)
    v = np.from_dlpack(t)
    assert same(v, ints(40, 2, 3))
    fabric.scale(3.0, t, out=t)
    assert same(v, ints(40, 2, 3) * 3)
    if np.lib.NumpyVersion(np.__version__) < "2.0.0":
        assert not v.flags.writeable  # "numpy 1.24 marks arrays from DLPack read-only"
    u = torch.from_dlpack(t)
    u += 1  # "PyTorch writes both ways"
    assert same(t.numpy(), ints(40, 2, 3) * 3 + 1)
    p = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    tp = weft.from_dlpack(p, fabric=fabric)
    fabric.relu(-tp, out=tp)
    assert float(p.abs().sum()) == 0
    with pytest.raises(TypeError, match="float32"):
        weft.from_dlpack(torch.ones(2, dtype=torch.float64), fabric=fabric)


def test_from_dlpack_of_a_tensor(fabric):
    # "A Tensor of this fabric is returned as it is (a view of it if contract differs); one of another fabric is
    # shared like any producer's memory"
    t = fabric.tensor(ints(41, 2, 2))
    assert fabric.from_dlpack(t) is t
    v = fabric.from_dlpack(t, contract="fp32")
    assert v.base is t and v.contract == "fp32"
    with weft.Fabric(lanes="cpu", calibration="off") as g:
        s = g.from_dlpack(t)
        assert s.fabric is g and same(s.numpy(), ints(41, 2, 2))


def test_shared_memory_outlives_its_producer_and_its_consumer(fabric):
    x = ints(42, 2, 3)
    t = weft.from_dlpack(x.copy(), fabric=fabric)  # "the tensor keeps the producer's buffer alive"
    gc.collect()
    assert same(t.numpy(), x)
    u = fabric.tensor(x)
    v = np.from_dlpack(u)
    del u
    gc.collect()
    assert same(v, x)


# ----------------------------------------------------------------------------------------------- ops' docstrings

def test_the_ops_do_what_their_docstrings_say(fabric):
    x = ints(43, 3, 4)
    # scale: "alpha * x (alpha rounded to float32)"
    assert same(fabric.scale(0.1, x), f32(0.1) * x)
    # relu: "max(x, 0) elementwise; a NaN stays NaN"
    assert same(fabric.relu(np.array([np.nan, -1, 2], f32)), np.array([np.nan, 0, 2], f32))
    # add: "y has x's shape or is one row ([n] or [1, n]) added to every row of x"
    assert same(fabric.add(x, x[0]), x + x[0]) and same(fabric.add(x, x[:1]), x + x[:1])
    with pytest.raises(weft.ShapeError):
        fabric.add(x, x[:, :1])
    # sum_rows: "The sum over rows (every leading dimension) of each column ...: shape (n,)"
    y = ints(44, 2, 3, 4)
    assert same(fabric.sum_rows(y), y.reshape(-1, 4).sum(0))
    # relu_backward: "grad where x > 0, else 0"
    g = ints(45, 3, 4)
    assert same(fabric.relu_backward(g, x), np.where(x > 0, g, 0).astype(f32))
    # axpy: "y = alpha * x + y in place ...; returns y. y is a Tensor or a writable C-contiguous float32 ndarray"
    yy = ints(46, 3, 4)
    want = f32(2) * x + yy
    assert fabric.axpy(2, x, yy) is yy and same(yy, want)
    ty = fabric.tensor(ints(46, 3, 4))
    assert fabric.axpy(2, x, ty) is ty and same(ty.numpy(), want)
    # softmax_xent: "With array operands loss is a numpy float32 and grad an ndarray; with a Tensor operand both
    # are Tensors (loss of shape (1,)). loss=False or grad=False skips one (it comes back as None)"
    z, tgt = ints(47, 2, 3), np.full((2, 3), 1 / 3, f32)
    loss, grad = fabric.softmax_xent(z, tgt)
    assert type(loss) is np.float32 and isinstance(grad, np.ndarray) and grad.shape == (2, 3)
    tl, tg = fabric.softmax_xent(fabric.tensor(z), tgt)
    assert isinstance(tl, weft.Tensor) and tl.shape == (1,) and isinstance(tg, weft.Tensor)
    assert fabric.softmax_xent(z, tgt, loss=False)[0] is None and fabric.softmax_xent(z, tgt, grad=False)[1] is None
    # "Arrays in: an ndarray out ... Any Tensor operand: a Tensor out"; out= "is what the op returns"
    assert isinstance(fabric.relu(x), np.ndarray) and isinstance(fabric.relu(fabric.tensor(x)), weft.Tensor)
    o = fabric.zeros((3, 4))
    assert fabric.relu(x, out=o) is o and same(o.numpy(), np.maximum(x, 0))


def test_out_tensors_and_views(fabric):
    # out "a Tensor of this fabric" of the result's shape; a .T view is not one (it has no memory of its own)
    a = ints(48, 2, 3)
    with pytest.raises(weft.ShapeError):
        fabric.relu(a, out=fabric.zeros((3, 2)))
    with pytest.raises(TypeError, match="view"):
        fabric.relu(a.T.copy(), out=fabric.zeros((2, 3)).T)
    with weft.Fabric(lanes="cpu", calibration="off") as g:
        with pytest.raises(weft.WrongFabricError):
            fabric.relu(a, out=g.zeros((2, 3)))


# ----------------------------------------------------------------------------------------------- fabric

def test_devices_lists_lanes_and_absent_ones_apart():
    d = weft.devices("cpu")
    assert [lane.name for lane in d] == d.names == ["cpu"] and len(d) == 1 and "cpu" in d and d["cpu"] is d[0]
    assert d.absent and all(a.reason for a in d.absent)
    text = str(d)
    assert "lanes:" in text and "absent:" in text and all(a.name in text for a in d.absent)
    with pytest.raises(KeyError, match="absent"):
        d[d.absent[0].name]


def test_set_default_fabric_refuses_what_is_not_a_fabric():
    f = weft.default_fabric()
    with pytest.raises(TypeError, match="^set_default_fabric: "):
        weft.set_default_fabric("cpu")
    assert weft.default_fabric() is f and not f.closed  # the refusal closed nothing


def test_lane_index_and_route_last(fabric):
    with pytest.raises(weft.NotFoundError, match="cpu"):
        fabric.lane_index("no-such-lane")
    assert fabric.lane_index("cpu") == fabric.lanes.index("cpu") and fabric.lane_index(0) == 0
    with weft.Fabric(lanes="cpu", calibration="off") as g:
        with pytest.raises(weft.StateError, match="^route_last: "):
            g.route_last()
        g.relu(np.ones(3, f32))
        assert g.route_last().chosen == "cpu" and g.last_lane == "cpu"


def test_accepted_work_survives_a_later_error(fabric):
    # a failed call leaves what came before it, inside a scope too, and the fabric usable
    a = ints(49, 2, 3)
    t = fabric.tensor(a)
    with pytest.raises(weft.ShapeError):
        with fabric.scope():
            r = fabric.relu(t)
            s = t * 2
            fabric.matmul(a, a)
    assert same(r.numpy(), np.maximum(a, 0)) and same(s.numpy(), a * 2)
    with fabric.scope():
        assert same((t + t).numpy(), a + a)
    out = np.full((2, 4), 7, f32)
    with pytest.raises(weft.ShapeError):
        fabric.matmul(a, np.ones((2, 4), f32), out=out)
    assert (out == 7).all()
    y = np.ones(3, f32)
    with pytest.raises(TypeError):
        fabric.axpy(1j, np.ones(3, f32), y)
    assert same(y, np.ones(3, f32))


def test_threads_share_a_fabric_and_keep_their_own_scopes_apart(fabric):
    # "A fabric is safe to share between threads: each call holds the fabric's lock"
    a, b = ints(50, 8, 8), ints(51, 8, 8)
    want = a @ b
    errors = []

    def work():
        try:
            for _ in range(50):
                assert same(fabric.matmul(a, b), want)
                t = fabric.tensor(a)
                assert same((t @ b).numpy(), want)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors


def test_gpt_surface(fabric):
    g = weft.GPT(fabric, L=1, C=16, NH=2, V=16, maxT=8)
    assert g.config == {"L": 1, "C": 16, "NH": 2, "V": 16, "maxT": 8} and g.fabric is fabric and g.step == 0
    tok = np.arange(8, dtype=np.int32).reshape(2, 4)
    assert g.logits(tok).shape == (2, 4, 16) and g.logits(tok[0]).shape == (4, 16)
    assert g.logits(tok).dtype == np.dtype(f32)
    assert isinstance(g.loss(tok, tok), float)
    out = g.generate(tok[0], 3)
    assert out.dtype == np.dtype(np.int32) and out.shape == (3,)
    p = g.params()
    # train_step: "A NaN or infinite lr or weight_decay, or a NaN max_norm, raises InvalidArgumentError and
    # changes nothing"
    for kw in (dict(lr=float("nan")), dict(lr=float("inf")), dict(weight_decay=float("-inf")),
               dict(max_norm=float("nan"))):
        with pytest.raises(weft.InvalidArgumentError):
            g.train_step(tok, tok, **kw)
    assert g.step == 0 and same(g.params(), p)
    with pytest.raises(weft.InvalidArgumentError):
        g.generate(tok[0], 2, temperature=float("nan"))
    loss, norm = g.train_step(tok, tok)
    assert g.step == 1 and np.isfinite(loss) and np.isfinite(norm)
    with pytest.raises(weft.InvalidArgumentError):
        weft.GPT(fabric, L=1, C=16, NH=3, V=16, maxT=8)  # "NH heads (dividing C)"
    g.close()
    with pytest.raises(weft.StateError):
        g.loss(tok, tok)


def test_the_stubs_match_the_signatures():
    # the type stubs' parameters are the callables' own (for those whose signature Python can read)
    import ast
    import os

    stub = ast.parse(open(os.path.join(os.path.dirname(weft.__file__), "__init__.pyi")).read())
    funcs = {n.name: n for n in stub.body if isinstance(n, ast.FunctionDef)}
    classes = {n.name: {m.name: m for m in n.body if isinstance(m, ast.FunctionDef)}
               for n in stub.body if isinstance(n, ast.ClassDef)}
    checked = 0

    def params(node, method):
        a = node.args
        names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
        return names[1:] if method else names  # self, or cls of a classmethod

    def compare(obj, node, where, method=False):
        nonlocal checked
        try:
            sig = inspect.signature(obj)
        except (TypeError, ValueError):
            return
        real = [p.name for p in sig.parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        if method and real[:1] == ["self"]:  # a plain function of the class, not bound
            real = real[1:]
        assert real == params(node, method), where
        checked += 1

    for name, node in funcs.items():
        compare(getattr(weft, name), node, name)
    for cname in ("Fabric", "Tensor", "GPT"):
        cls = getattr(weft, cname)
        for mname, node in classes[cname].items():
            if mname.startswith("__") or isinstance(inspect.getattr_static(cls, mname), property):
                continue
            obj = getattr(cls, mname)
            if not callable(obj) or type(inspect.getattr_static(cls, mname)).__name__ == "getset_descriptor":
                continue
            compare(obj, node, f"{cname}.{mname}", True)
    assert checked >= 40


@pytest.mark.parametrize("call", [
    lambda f: f.relu(np.ones(2, f32), lane=True), lambda f: f.relu(np.ones(2, f32), lane=1.5),
    lambda f: f.relu(np.ones(2, f32), lane=[0]), lambda f: f.relu(np.ones(2, f32), contract=1.5),
    lambda f: f.tensor(np.ones(2, f32), contract=b"exact"), lambda f: f.lane_index(None),
    lambda f: f.cost_model(1.5), lambda f: f.cost_model("cpu", cls=None), lambda f: f.route_explain(None),
    lambda f: f.route_explain("matmul", m="2", n=2, k=2), lambda f: f.route_explain("add", rows=1.5, cols=2),
    lambda f: f.set_cost_model("cpu", "matmul", True, 1e9), lambda f: weft.GPT(f, L="2"),
    lambda f: weft.GPT.load("x.ckpt", fabric=5), lambda f: weft.Fabric(lanes="cpu", calibration="off", cpu_threads="2"),
])
def test_an_argument_of_the_wrong_python_type_is_a_type_error_naming_the_call(fabric, call):
    # "an argument of the wrong Python type is TypeError"
    with pytest.raises(TypeError) as info:
        call(fabric)
    assert not isinstance(info.value, weft.WeftError)
    assert str(info.value).split(":")[0] in ("relu", "tensor", "lane_index", "cost_model", "route_explain",
                                              "set_cost_model", "GPT", "GPT.load", "Fabric"), str(info.value)


def test_seeds_and_rng_state_round_trip_or_are_refused(fabric, tmp_path):
    # GPT.load: "Returns (model, rng_state) with the rng_state given to save()"; an int that does not fit is an
    # OverflowError, never wrapped
    g = weft.GPT(fabric, L=1, C=16, NH=2, V=16, maxT=8)
    path = str(tmp_path / "m.ckpt")
    for rng in (0, 12345, 2 ** 64 - 1):
        g.save(path, rng)
        model, back = weft.GPT.load(path, fabric=fabric)
        assert back == rng and same(model.params(), g.params())
        model.close()
    for bad in (-1, 2 ** 64, 2 ** 70):
        with pytest.raises(OverflowError, match="^save: "):
            g.save(path, bad)
        with pytest.raises(OverflowError, match="^generate: "):
            g.generate(np.zeros(2, np.int32), 1, seed=bad)
        with pytest.raises(OverflowError, match="^GPT: "):
            weft.GPT(fabric, L=1, C=16, NH=2, V=16, maxT=8, seed=bad)
    # params: "a float32 array of every parameter in llm.c's order", whatever its layout
    p = g.params()
    strided = np.repeat(p, 2)[::2]
    h = weft.GPT(fabric, L=1, C=16, NH=2, V=16, maxT=8, params=strided)
    assert same(h.params(), p)
    with pytest.raises(weft.ShapeError, match="^GPT: params holds 5 floats"):
        weft.GPT(fabric, L=1, C=16, NH=2, V=16, maxT=8, params=np.zeros(5, f32))
    g.close()
    h.close()


def test_copies_counts_every_copy_weft_makes(fabric):
    # "Fabric.copies counts every copy weft makes": those for an op's operands, and those tensor(), write() and
    # GPT(params=) make before the tensor's own copy
    strided = ints(52, 4, 6)[::2, ::2]
    cases = [lambda: fabric.relu(strided), lambda: fabric.tensor(strided), lambda: fabric.tensor(strided.T),
             lambda: fabric.tensor(np.ones((2, 2)), dtype=f32), lambda: fabric.tensor(np.ones((2, 2), ">f4")),
             lambda: fabric.tensor(np.zeros((2, 3), f32)).write(strided),
             lambda: fabric.tensor(np.zeros((2, 3), f32)).write(np.ones((2, 3)), dtype=f32),
             lambda: fabric.relu(misaligned((2, 3))), lambda: fabric.relu(np.ones(3), dtype=f32)]
    for make in cases:
        copies = fabric.copies
        make()
        assert fabric.copies == copies + 1
    for none in (lambda: fabric.tensor(ints(53, 2, 3)), lambda: fabric.relu(ints(53, 2, 3)),
                 lambda: fabric.matmul(ints(53, 2, 3).T, ints(54, 2, 3))):
        copies = fabric.copies
        none()
        assert fabric.copies == copies
    with pytest.raises(weft.InvalidArgumentError, match=r"not aligned .*pass a\.copy\(\)"):
        fabric.matmul(misaligned((2, 3)), np.ones((3, 2), f32), copy=False)


def test_operators_getters_and_bench_name_themselves_in_errors(fabric):
    t = fabric.tensor(np.ones((2, 2), f32))
    t.close()
    for op, call in (("+", lambda: t + 1), ("-", lambda: -t), ("-", lambda: 1 - t), ("*", lambda: t * 2),
                     ("@", lambda: t @ t), ("location", lambda: t.location)):
        with pytest.raises(weft.StateError) as info:
            call()
        assert str(info.value).startswith(op + ": "), str(info.value)
    with weft.Fabric(lanes="cpu", calibration="off") as g:
        u = g.tensor(np.ones((2, 2), f32))
    with pytest.raises(weft.StateError, match=r"^\+: this fabric is closed"):
        u + 1
    with pytest.raises(weft.StateError, match="^last_lane: "):
        g.last_lane
    with pytest.raises(OverflowError, match=r"^\+: "):
        fabric.tensor(np.ones(2, f32)) + 10 ** 400
    # bench: "contract" is one of weft's (an unknown one timed nothing and returned []), fabric a Fabric
    with pytest.raises(weft.InvalidArgumentError, match="^bench: unknown contract"):
        weft.bench(sizes=[8], fabric=fabric, contract="fast")
    with pytest.raises(TypeError, match="^bench: fabric must be"):
        weft.bench(sizes=[8], fabric=5)


def test_from_dlpack_says_what_a_producer_lacks(fabric):
    class NoDevice:
        def __dlpack__(self, **kw):
            return np.ones(3, f32).__dlpack__()

    with pytest.raises(TypeError, match="has __dlpack__ but no __dlpack_device__"):
        fabric.from_dlpack(NoDevice())
    with pytest.raises(TypeError, match="has no __dlpack__"):
        fabric.from_dlpack([1.0])
    t = fabric.tensor(np.ones(3, f32))
    # __dlpack__: "shared, not copied": a copy asked for, or another device, is refused rather than faked
    with pytest.raises(BufferError, match="^__dlpack__: copy=True"):
        t.__dlpack__(copy=True)
    with pytest.raises(BufferError, match="^__dlpack__: dl_device"):
        t.__dlpack__(dl_device=(2, 0))


def test_shared_memory_is_the_value_on_every_lane(fabric, lane):
    # DLPack: "ops reading the tensor are told it may have changed (device lanes upload it again), ops writing it
    # bring the result home before they return", inside a scope too
    x = np.ones((4, 4), f32)
    t = weft.from_dlpack(x, fabric=fabric)
    assert fabric.relu(t, lane=lane).numpy()[0, 0] == 1
    x[...] = 5
    assert same(fabric.relu(t, lane=lane).numpy(), x)
    fabric.scale(3.0, t, lane=lane, out=t)
    assert (x == 15).all()
    u = fabric.tensor(np.ones((4, 4), f32))
    v = np.from_dlpack(u)
    fabric.scale(2.0, u, lane=lane, out=u)
    assert (v == 2).all()
    with fabric.scope():
        fabric.scale(2.0, u, lane=lane, out=u)
        assert (v == 4).all()
    torch = pytest.importorskip("torch")
    w = torch.from_dlpack(u)
    w += 1
    assert same(fabric.relu(u, lane=lane).numpy(), np.full((4, 4), 5, f32))


def test_gpt_training_resumes_from_a_checkpoint_and_reports_the_norm_it_clips_by(fabric, tmp_path):
    # save: "configuration, step, parameters, AdamW's moments"; load: "training resumes where it stopped"
    g = weft.GPT(fabric, L=1, C=16, NH=2, V=16, maxT=8)
    tok = np.arange(8, dtype=np.int32).reshape(2, 4)
    g.train_step(tok, tok)
    g.save(str(tmp_path / "r.ckpt"), 42)
    h, rng = weft.GPT.load(str(tmp_path / "r.ckpt"), fabric=fabric)
    assert rng == 42 and h.step == 1
    assert g.train_step(tok, tok) == h.train_step(tok, tok) and same(g.params(), h.params())
    # train_step: "Returns (loss, gradient norm before the clip; 0.0 with max_norm <= 0 ...)"
    loss, norm = g.train_step(tok, tok, max_norm=1e30)
    assert norm > 0
    loss, norm = g.train_step(tok, tok, max_norm=0)
    assert norm == 0.0
    # generate: "temperature <= 0 is greedy (NaN or infinite: InvalidArgumentError)"; one prompt at a time
    assert same(g.generate(tok[0], 3, temperature=-1), g.generate(tok[0], 3))
    for bad in (float("inf"), float("-inf")):
        with pytest.raises(weft.InvalidArgumentError, match="^generate: temperature"):
            g.generate(tok[0], 2, temperature=bad)
    with pytest.raises(weft.ShapeError, match="^generate: "):
        g.generate(tok, 2)
    g.close()
    h.close()


def test_axpy_rounds_the_product_then_sums_and_sum_rows_adds_rows_in_order(fabric, lane):
    # axpy: "y = alpha * x + y in place (the product rounded, then the sum)": no fused multiply-add, whose single
    # rounding would leave 2**-24 here
    e = f32(2.0 ** -12)
    x = np.full(8, 1 + e, f32)
    y = np.full(8, -(1 + 2 * e), f32)
    assert fabric.axpy(float(1 + e), x, y, lane=lane) is y
    assert (y == 0).all() and not np.signbit(y).any()
    assert same(fabric.scale(float(1 + e), x, lane=lane), np.full(8, 1 + 2 * e, f32))
    # sum_rows: "The sum over rows (every leading dimension) of each column, rows ascending"
    col = np.array([[1e8], [1], [-1e8]], f32)
    assert same(fabric.sum_rows(col, lane=lane), np.array([0], f32))  # (1e8 + 1) rounds to 1e8 first
    assert same(fabric.sum_rows(col[[0, 2, 1]], lane=lane), np.array([1], f32))  # 1e8 - 1e8 first, then 1


def test_route_last_follows_routed_ops_only():
    # route_last: "the last op it routed"; pinned ops are not routed; last_lane: "the lane the last successful op
    # ran on"
    with weft.Fabric(lanes="cpu", calibration="off") as g:
        a = np.ones((8, 8), f32)
        g.relu(a)
        assert g.route_last().op == "relu"
        g.matmul(a, a)
        assert g.route_last().op == "matmul" and g.route_last().chosen == g.last_lane == "cpu"
        g.add(a, a, lane="cpu")
        assert g.route_last().op == "matmul"
        with pytest.raises(weft.ShapeError):
            g.matmul(a, np.ones((3, 3), f32))
        assert g.last_lane == "cpu"


def test_write_takes_as_many_elements_into_a_view_too(fabric):
    # write: "Replaces the value with data (float32, as many elements ...)": read in C order into the tensor's
    # own shape, for a .T/.mT view as for any tensor
    d = np.arange(6, dtype=f32) + 10
    for data in (d, d.reshape(3, 2), d.reshape(2, 3), d.reshape(1, 6)):
        t = fabric.tensor(np.zeros((2, 3), f32))
        assert t.T.write(data).shape == (3, 2)
        assert same(t.T.numpy(), d.reshape(3, 2)) and same(t.numpy(), d.reshape(3, 2).T)
        u = fabric.tensor(np.zeros((2, 3), f32))
        assert same(u.write(data).numpy(), d.reshape(2, 3))
    w = fabric.tensor(np.zeros((2, 3, 4), f32))
    w.mT.write(np.arange(24, dtype=f32))
    assert same(w.mT.numpy(), np.arange(24, dtype=f32).reshape(2, 4, 3))
    with pytest.raises(weft.ShapeError, match="^write: 5 floats given"):
        fabric.tensor(np.zeros((2, 3), f32)).T.write(np.ones(5, f32))


def test_softmax_xent_does_not_take_a_skipped_output_somewhere(fabric):
    # "loss=False or grad=False skips one (it comes back as None ...)": given out_loss/out_grad for the one
    # skipped, which is meant is unclear, and it is refused rather than one picked
    z, tgt = ints(55, 2, 3), np.full((2, 3), 1 / 3, f32)
    with pytest.raises(weft.InvalidArgumentError, match="^softmax_xent: loss=False"):
        fabric.softmax_xent(z, tgt, loss=False, out_loss=np.zeros(1, f32))
    with pytest.raises(weft.InvalidArgumentError, match="^softmax_xent: grad=False"):
        fabric.softmax_xent(z, tgt, grad=False, out_grad=np.zeros((2, 3), f32))
    ol = np.zeros(1, f32)
    loss, grad = fabric.softmax_xent(z, tgt, out_loss=ol)
    assert loss is ol and isinstance(grad, np.ndarray)
