"""Hostile and unusual inputs, one case each for what the property tests (test_properties.py) found: every call
raises a WeftError subclass or the built-in exception the README names, with a message a person can act on,
or gives numpy's answer. These run without hypothesis."""

import numpy as np
import pytest

import reference as ref
import weft
from conftest import EXACT_LANES

f32 = np.float32
BIG = 128  # BIG * BIG elements are wrapped by the library in place, not copied into a scratch tensor


def rand(seed, *shape):
    return np.random.default_rng(seed).uniform(-2, 2, shape).astype(f32)


# ------------------------------------------------------------------------------------------ out= over inputs

def test_out_over_an_input_gives_numpys_answer(fabric):
    # out=x for an array of 16384+ elements failed with the library's "c and a are different tensors over
    # overlapping memory" (naming c, which the caller never passed); now computed into weft's memory and copied in
    assert BIG * BIG >= weft._weft.WRAP_MIN
    x, y = rand(1, BIG, BIG), rand(2, BIG, BIG)
    want = ref.matmul(x, y)
    copies = fabric.copies
    assert fabric.matmul(x, y, out=x) is x and ref.same_bits(x, want)
    assert fabric.copies == copies + 1  # the result's detour is counted
    x = rand(1, BIG, BIG)
    assert ref.same_bits(fabric.relu(x, out=x), ref.relu(rand(1, BIG, BIG)))
    assert ref.same_bits(fabric.add(x, y, out=y), ref.relu(rand(1, BIG, BIG)) + rand(2, BIG, BIG))
    flat = np.concatenate([rand(3, BIG * BIG), [f32(0)]]).astype(f32)
    want = ref.relu(flat[:-1].copy())
    assert ref.same_bits(fabric.relu(flat[:-1], out=flat[1:]), want)  # shifted by one element


def test_axpy_with_x_over_y(fabric):
    x = rand(4, BIG, BIG)
    want = ref.axpy(2.0, x, x)
    assert ref.same_bits(fabric.axpy(2.0, x, x), want)
    x = rand(4, BIG, BIG)
    want = ref.axpy(0.5, x[::-1].copy(), x)
    assert ref.same_bits(fabric.axpy(0.5, x[::-1], x), want)


def test_out_over_a_shared_tensors_memory(fabric):
    # a tensor over an array's memory (DLPack) and that array on the other side of the op: the library saw two
    # handles over one buffer, and refused with the names of its C parameters ("c and a")
    x, y = rand(5, BIG, BIG), rand(6, BIG, BIG)
    want = ref.matmul(x, y)
    assert ref.same_bits(fabric.matmul(fabric.from_dlpack(x), y, out=x), want)
    x = rand(5, BIG, BIG)
    t = fabric.from_dlpack(x)
    assert fabric.matmul(x, y, out=t) is t and ref.same_bits(x, want)
    x = rand(5, BIG, BIG)
    t = fabric.from_dlpack(x)
    assert fabric.relu(x, out=t) is t and ref.same_bits(x, ref.relu(rand(5, BIG, BIG)))
    x = rand(5, BIG, BIG)
    assert ref.same_bits(fabric.axpy(2.0, fabric.from_dlpack(x), x), ref.axpy(2.0, rand(5, BIG, BIG), rand(5, BIG, BIG)))
    x = rand(5, BIG, BIG)
    t = fabric.from_dlpack(x)
    assert fabric.axpy(2.0, x, t) is t and ref.same_bits(x, ref.axpy(2.0, rand(5, BIG, BIG), rand(5, BIG, BIG)))


# --------------------------------------------------------------------------------------- empties and zeros

def test_k_zero_into_an_out_tensor_writes_zeros(fabric):
    # the zeros were 0 * (old value): NaN or infinity stayed
    out = fabric.tensor(np.array([[np.nan, np.inf], [-np.inf, 1]], f32))
    got = fabric.matmul(np.ones((2, 0), f32), np.ones((0, 2), f32), out=out)
    assert got is out and ref.same_bits(out.numpy(), np.zeros((2, 2), f32))
    out = np.full((2, 2), np.nan, f32)
    assert ref.same_bits(fabric.matmul(np.ones((2, 0), f32), np.ones((0, 2), f32), out=out), np.zeros((2, 2), f32))


def test_empty_operands_check_out_and_sum_to_zero(fabric):
    empty = np.ones((0, 3), f32)
    with pytest.raises(TypeError, match="relu: out must be"):
        fabric.relu(empty, out=np.empty((0, 3)))  # float64: was returned unchecked
    with pytest.raises(weft.ShapeError, match="relu: out has shape"):
        fabric.relu(empty, out=np.empty((5, 5), f32))
    out = np.full(3, 7, f32)
    assert fabric.sum_rows(empty, out=out) is out and not out.any()  # the sum over no rows: was left as it was
    assert fabric.matmul(empty, np.ones((3, 4), f32), out=np.empty((0, 4), f32)).shape == (0, 4)  # was a "tensor:"
    with pytest.raises(weft.ShapeError, match=r"^softmax_xent: .*empty"):
        fabric.softmax_xent(empty, empty)


def test_empty_tensors_work_in_every_op(fabric):
    # a tensor may have an empty batch dimension; ops on one said "weft tensors hold at least one element"
    t = fabric.zeros((0, 2, 3))
    for got in (fabric.relu(t), t + 1, t * 2, -t, t - t, fabric.scale(3, t), fabric.add(t, np.ones(3, f32))):
        assert isinstance(got, weft.Tensor) and got.shape == (0, 2, 3)
    s = fabric.sum_rows(t)
    assert isinstance(s, weft.Tensor) and ref.same_bits(s.numpy(), np.zeros(3, f32))
    assert (t @ fabric.tensor(np.ones((3, 4), f32))).shape == (0, 2, 4)
    with pytest.raises(weft.ShapeError, match=r"^\.T: the transpose has shape \(3, 2, 0\)"):
        t.T  # was "tensor: dimension 2 is 0"
    assert t.mT.shape == (0, 3, 2)
    with pytest.raises(weft.ShapeError, match=r"^matmul: the result has shape \(2, 0\)"):
        fabric.matmul(fabric.tensor(np.ones((2, 3), f32)), np.ones((3, 0), f32))


# ------------------------------------------------------------------------------------ tensors with arrays

def test_arrays_of_a_tensors_shape_of_rank_3_and_4(fabric):
    # an array operand was given to the library as [rows, cols], and refused against a rank-3 tensor
    x = rand(7, 2, 3, 4)
    t = fabric.tensor(x)
    assert ref.same_bits(np.asarray(fabric.add(t, x)), x + x)
    assert ref.same_bits(np.asarray(fabric.add(x, t)), x + x)
    assert ref.same_bits(np.asarray(t + x), x + x) and ref.same_bits(np.asarray(x - t), x - x)
    assert ref.same_bits(np.asarray(fabric.relu_backward(t, x)), ref.relu_backward(x, x))
    assert ref.same_bits(fabric.add(t, x, out=np.empty_like(x)), x + x)
    y = x.copy()
    assert ref.same_bits(fabric.axpy(2.0, t, y), ref.axpy(2.0, x, x))
    loss, grad = fabric.softmax_xent(t, np.abs(x) / 8)
    want = ref.softmax_xent(x.reshape(6, 4), (np.abs(x) / 8).reshape(6, 4))
    assert ref.same_bits(loss.numpy()[0], want[0]) and ref.same_bits(grad.numpy(), want[1].reshape(2, 3, 4))
    xt = np.swapaxes(x, -1, -2)
    assert ref.same_bits(np.asarray(t.mT + xt.copy()), xt + xt)
    assert ref.same_bits(np.asarray(fabric.tensor(x[None]) + x[None]), (x + x)[None])


def test_add_broadcasts_as_numpy(fabric):
    assert fabric.add(np.ones(3, f32), np.ones((1, 3), f32)).shape == (1, 3)  # was (3,)
    t = fabric.tensor(np.ones(3, f32))
    assert (t + np.ones((1, 3), f32)).shape == (1, 3)
    assert (fabric.tensor(np.ones(1, f32)) + fabric.tensor(np.ones((1, 1, 1), f32))).shape == (1, 1, 1)  # refused
    z = fabric.tensor(np.float32(2))
    assert ref.same_bits(np.asarray(z + 3), f32(5)) and ref.same_bits(np.asarray(3 - z), f32(1))  # refused


# ---------------------------------------------------------------------------------------------- scalars

def test_only_real_numbers_are_scalars(fabric):
    t = fabric.tensor(np.ones((2, 2), f32))
    # numpy's complex scalars became their real part (a ComplexWarning, and a silently wrong answer)
    for bad in (np.complex64(1 + 2j), np.complex128(1j), 1 + 2j, np.array(1 + 2j), np.timedelta64(3), np.array("x")):
        for op in (lambda: t * bad, lambda: bad * t, lambda: t + bad, lambda: t - bad, lambda: bad - t):
            with pytest.raises(TypeError):
                op()
    for fn in (lambda a: fabric.scale(a, np.ones(2, f32)), lambda a: fabric.axpy(a, np.ones(2, f32), np.ones(2, f32)),
               weft.expf, weft.logf):
        with pytest.raises(TypeError, match="real number"):
            fn(np.complex64(1 + 2j))
        with pytest.raises(TypeError, match="real number"):
            fn(np.array("x"))  # was numpy's ValueError
        with pytest.raises(OverflowError):
            fn(10**400)  # was a TypeError saying an int is not a real number
    assert ref.same_bits(np.asarray(t * np.float64(0.5)), np.full((2, 2), 0.5, f32))
    assert ref.same_bits(np.asarray(t * np.array(2, np.int16)), np.full((2, 2), 2, f32))
    assert ref.same_bits(np.asarray(t + float("nan")), np.full((2, 2), np.nan, f32))


def test_a_refused_operand_keeps_its_name(fabric):
    t = fabric.tensor(np.ones((2, 2), f32))
    with pytest.raises(TypeError, match="the left operand has dtype <U1"):
        "x" - t  # the operators put the larger operand first: it was called the right operand
    with pytest.raises(TypeError, match="the left operand has dtype object"):
        None + t
    with pytest.raises(TypeError, match="the right operand has dtype float64"):
        t + np.ones((2, 2))


# ---------------------------------------------------------------------------------------------- DLPack

def test_from_dlpack_of_a_tensor(fabric):
    with weft.Fabric(lanes="cpu", calibration="off") as other:
        u = other.tensor(np.arange(4, dtype=f32))
        t = fabric.from_dlpack(u)  # was u itself, a tensor of the other fabric
        assert t.fabric is fabric and ref.same_bits(np.asarray(t), np.arange(4, dtype=f32))
        other.scale(2, u, out=u)  # the memory is shared
        assert ref.same_bits(np.asarray(t), 2 * np.arange(4, dtype=f32))
        assert np.asarray(fabric.relu(t)).shape == (4,)
    v = fabric.tensor(np.ones(2, f32))
    assert fabric.from_dlpack(v) is v
    w = fabric.from_dlpack(v, contract="fp32")  # contract= was ignored
    assert w.contract == "fp32" and w.base is v


def test_dlpack_arguments_and_producers_of_the_wrong_kind(fabric):
    t = fabric.tensor(np.ones(2, f32))
    for dev in (5, [1, 0], (1,), ("a", 0)):
        with pytest.raises(TypeError, match="dl_device must be a"):
            t.__dlpack__(dl_device=dev)  # was SystemError

    class NoTuple:
        def __dlpack_device__(self):
            return 1

        def __dlpack__(self):
            return None

    class NoCapsule:
        def __dlpack_device__(self):
            return (1, 0)

        def __dlpack__(self):
            return "capsule"

    with pytest.raises(TypeError, match="did not return a"):
        fabric.from_dlpack(NoTuple())  # was SystemError
    with pytest.raises(TypeError, match="DLPack capsule"):
        fabric.from_dlpack(NoCapsule())  # was "PyCapsule_GetPointer called with invalid PyCapsule object"
    with pytest.raises(TypeError, match="fabric must be a weft.Fabric"):
        weft.from_dlpack(np.ones(2, f32), fabric="cpu")  # was AttributeError


# ------------------------------------------------------------------------------------------- arguments

def test_copy_false_refuses_a_dtype_conversion(fabric):
    with pytest.raises(weft.InvalidArgumentError, match=r"dtype=numpy.float32 converts it into a copy.*copy=False"):
        fabric.matmul(np.ones((2, 2)), np.ones((2, 2), f32), dtype=np.float32, copy=False)  # copied silently
    assert fabric.matmul(np.ones((2, 2)), np.ones((2, 2), f32), dtype=np.float32).dtype == f32


def test_axpy_y_must_be_aligned_and_is_not_about_copy(fabric):
    y = np.ndarray((4,), f32, buffer=bytearray(17), offset=1)
    with pytest.raises(TypeError, match="aligned") as info:
        fabric.axpy(1.0, np.ones(4, f32), y)
    assert "copy" not in str(info.value)  # axpy has no copy=; the message named it


def test_flags_and_numbers_of_the_wrong_kind(fabric):
    a = np.ones((2, 2), f32)
    with pytest.raises(TypeError, match="matmul: trans_a must be True or False"):
        fabric.matmul(a, a, trans_a=np.ones(2))  # was numpy's "truth value of an array is ambiguous"
    with pytest.raises(TypeError, match="softmax_xent: grad must be True or False"):
        fabric.softmax_xent(a, a, grad=np.ones(3))
    with pytest.raises(weft.NotFoundError, match=r"lane 1000000000000000000000 does not exist"):
        fabric.relu(a, lane=10**21)  # was "lane -1"
    assert fabric.zeros(np.int64(3)).shape == (3,)  # numpy's ints are ints
    with pytest.raises(weft.ShapeError, match=r"^zeros: dimension 0 is -1"):
        fabric.zeros((-1, 2))  # was "tensor: ..."
    with pytest.raises(TypeError, match="route_explain: shapes are tuples of ints"):
        fabric.route_explain("matmul", (2.7, 3), (3, 4))  # was the shape (2, 3), silently
    with pytest.raises(TypeError, match="alpha must be a real number"):
        fabric.set_cost_model("cpu", "matmul", "x", 1e9)  # was float()'s ValueError


def test_fabric_options_of_the_wrong_kind():
    with pytest.raises(weft.InvalidArgumentError, match="unknown calibration 5"):
        weft.Fabric(lanes="cpu", calibration=5)  # was handed to PyUnicode_CompareWithASCIIString, not a str
    for kw in (dict(scratch_bytes=-1), dict(vulkan_max_binding=-1)):  # wrapped to 2**64 - 1
        with pytest.raises(weft.InvalidArgumentError, match="byte count >= 0"):
            weft.Fabric(lanes="cpu", calibration="off", **kw)


def test_with_contract_views_take_results(fabric):
    t = fabric.zeros((2, 2))
    v = t.with_contract("fp32")
    assert fabric.relu(np.ones((2, 2), f32), out=v) is v  # was refused as "a view (.T)"
    assert fabric.axpy(1.0, np.ones((2, 2), f32), v) is v
    assert ref.same_bits(t.numpy(), np.full((2, 2), 2, f32))
    with pytest.raises(TypeError, match=r"view \(\.T\)"):
        fabric.relu(np.ones((2, 2), f32), out=t.T)


# ------------------------------------------------------------------------------------------------- GPT

def test_gpt_token_ids_beyond_int32_are_refused(fabric):
    m = weft.GPT(fabric, L=1, C=16, NH=2, V=32, maxT=8)
    for ids in (np.array([2**32 + 1], np.int64), np.array([2**63 + 1], np.uint64), np.array([-2**40])):
        with pytest.raises(weft.InvalidArgumentError, match="is outside 0..31"):
            m.loss(ids, np.array([1]))  # 2**32 + 1 was read as the id 1
    with pytest.raises(weft.InvalidArgumentError, match="is outside 0..31"):
        m.logits(np.array([2**32 + 3]))
    assert np.isfinite(m.loss(np.array([1, 2], np.uint64), np.array([2, 3], np.int64)))


def test_gpt_arguments(fabric):
    with pytest.raises(TypeError) as info:
        weft.GPT(fabric, L=1, C=16, NH=2, V=32, maxT=8, params=np.zeros(10))
    assert "astype(numpy.float32)" in str(info.value) and "dtype=" not in str(info.value)  # GPT takes no dtype=
    m = weft.GPT(fabric, L=1, C=16, NH=2, V=32, maxT=8)
    with pytest.raises(weft.ShapeError, match="must fit the context of 8"):
        m.generate(np.array([1]), 2**31 - 1)  # n + 1 overflowed int in gpt.c, then ran out of memory
    with pytest.raises(TypeError, match="train_step: lr must be a real number"):
        m.train_step(np.arange(3), np.arange(3), lr=np.array("x"))
    with pytest.raises(TypeError, match="generate: temperature must be a real number"):
        m.generate(np.array([1]), 1, temperature=np.complex64(1j))
    m.close()
    assert repr(m) == "<weft.GPT closed>"  # raised StateError


# --------------------------------------------------------------------------------------- use after close

def test_everything_after_close_is_a_state_error():
    f = weft.Fabric(lanes="cpu", calibration="off")
    t = f.tensor(np.ones((2, 2), f32))
    m = weft.GPT(f, L=1, C=8, NH=2, V=16, maxT=4)
    f.close()
    a = np.ones((2, 2), f32)
    calls = [lambda: f.matmul(a, a), lambda: f.relu(a), lambda: f.tensor(a), lambda: f.zeros(2),
             lambda: f.from_dlpack(a), lambda: f.scope().__enter__(), f.sync, f.devices, f.route_last,
             lambda: f.route_explain("add", (2, 2)), lambda: f.cost_model("cpu"), f.calibrate, f.revive,
             lambda: t @ t, t.numpy, lambda: t + 1, lambda: t.T.numpy(), lambda: t.write(a), lambda: np.from_dlpack(t),
             lambda: t.location, lambda: weft.GPT(f), lambda: m.loss(np.arange(2), np.arange(2)), lambda: f.last_lane]
    for call in calls:
        with pytest.raises(weft.StateError, match="closed"):
            call()
    assert "closed" in repr(t) and "closed" in repr(f)
    f.close()
    t.close()


def test_devices_keeps_absent_lanes_apart():
    d = weft.devices()
    assert d.names and not set(d.names) & {a.name for a in d.absent}
    assert all(a.reason for a in d.absent)
    text = str(d)
    assert text.startswith("lanes:") and ("absent:" in text)
    for a in d.absent:
        assert a.name not in d
        with pytest.raises(KeyError, match="absent"):
            d[a.name]


@pytest.mark.parametrize("lane", EXACT_LANES)
def test_a_pinned_matrix_times_a_batch_runs_all_of_it_on_the_pinned_lane(fabric, lane):
    # one matrix against a batch is computed as c^T = b^T a^T, then its last two axes swapped: the swap ran
    # routed, so last_lane could name another lane than the one the caller pinned
    if len(EXACT_LANES) < 2:
        pytest.skip("one exact lane here: where the swap ran cannot differ")
    a, b = rand(1, 3, 5), rand(2, 4, 5, 2)
    c = fabric.matmul(a, b, lane=lane)
    assert fabric.last_lane == lane
    np.testing.assert_array_equal(c, fabric.matmul(np.broadcast_to(a, (4, 3, 5)).copy(), b, lane=lane))
