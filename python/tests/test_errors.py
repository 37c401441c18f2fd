"""weft's statuses as exceptions: the right class, the status code, and weft's own message."""

import numpy as np
import pytest

import weft

f32 = np.float32


def test_shape_mismatch_raises_shape_error_with_weft_message(fabric):
    a, b = np.ones((3, 4), f32), np.ones((5, 2), f32)
    with pytest.raises(weft.ShapeError) as info:
        fabric.matmul(a, b)
    e = info.value
    assert isinstance(e, weft.WeftError) and isinstance(e, ValueError)
    assert e.status == 2 and e.status_name == "shape mismatch"
    assert "inner dimensions differ" in str(e) and "(3, 4)" in str(e) and "(5, 2)" in str(e)
    assert "trans" not in str(e)  # the caller passed no trans_a or trans_b: the message names neither
    with pytest.raises(weft.ShapeError, match="with trans_a"):
        fabric.matmul(a, b, trans_a=True)


def test_messages_name_no_c_function(fabric):
    with pytest.raises(weft.ShapeError) as info:
        fabric.add(np.ones((2, 3), f32), np.ones((3, 2), f32))
    assert "weft_" not in str(info.value) and str(info.value).startswith("add: ")
    t = fabric.zeros((2, 2))
    with pytest.raises(weft.InvalidArgumentError) as info:
        fabric.matmul(t, t, out=t)
    assert "weft_op" not in str(info.value)


def test_rank_limits(fabric):
    # arrays of any rank work as numpy's do (the batch is flattened); a tensor has at most 4 dimensions
    assert fabric.relu(np.ones((1, 1, 1, 1, 2), f32)).shape == (1, 1, 1, 1, 2)
    assert fabric.relu(np.float32(-1.0)) == 0
    with pytest.raises(weft.ShapeError, match="at most 4 dimensions"):
        fabric.tensor(np.ones((1, 1, 1, 1, 2), f32))
    with pytest.raises(ValueError, match="scalar"):
        fabric.matmul(np.float32(1), np.ones((2, 2), f32))


def test_unsupported_contract(fabric):
    # a lane that does not honour a contract refuses it when pinned, with weft's reason
    cpu = fabric.devices()["cpu"]
    assert "tf32" not in cpu.contracts
    with pytest.raises(weft.UnsupportedError, match="cpu does not honour the 'tf32' contract") as info:
        fabric.matmul(np.ones((2, 2), f32), np.ones((2, 2), f32), contract="tf32", lane="cpu")
    assert info.value.status == 6
    if not any("tf32" in lane.contracts for lane in fabric.devices()):
        with pytest.raises(weft.UnsupportedError, match="no lane in this fabric can run it under the 'tf32'"):
            fabric.matmul(np.ones((2, 2), f32), np.ones((2, 2), f32), contract="tf32")


def test_unknown_names(fabric):
    with pytest.raises(weft.InvalidArgumentError, match="unknown contract 'fast'"):
        fabric.relu(np.ones(2, f32), contract="fast")
    with pytest.raises(weft.NotFoundError, match="no lane named 'gpu9'") as info:
        fabric.relu(np.ones(2, f32), lane="gpu9")
    assert isinstance(info.value, LookupError) and info.value.status == 8
    with pytest.raises(weft.NotFoundError):
        fabric.relu(np.ones(2, f32), lane=99)
    with pytest.raises(weft.InvalidArgumentError, match="unknown calibration"):
        weft.Fabric(calibration="sometimes")


def test_open_error_carries_weft_open_message():
    with pytest.raises(weft.NotFoundError, match="no lane could be opened"):
        weft.Fabric(lanes="nosuchlane", calibration="off")


def test_invalid_arguments_from_the_library(fabric):
    t = fabric.zeros((2, 2))
    with pytest.raises(weft.InvalidArgumentError, match="no in-place matmul"):
        fabric.matmul(t, t, out=t)
    with pytest.raises(weft.InvalidArgumentError, match="different tensors"):
        fabric.axpy(1.0, t, t)
    with pytest.raises(TypeError, match="in place"):
        fabric.axpy(1.0, np.ones(2, f32), np.ones(2))  # float64 y cannot be updated in place


def test_a_failed_call_leaves_the_fabric_usable(fabric):
    with pytest.raises(weft.ShapeError):
        fabric.add(np.ones((2, 3), f32), np.ones((4, 3), f32))
    assert np.array_equal(fabric.add(np.ones((2, 3), f32), np.ones((2, 3), f32)), np.full((2, 3), 2, f32))


def test_every_status_has_a_class():
    for status in range(1, 12):
        e = weft._errors.error_for(status, "")
        assert isinstance(e, weft.WeftError) and e.status == status and str(e)
    e = weft._errors.error_for(99, "from the future")
    assert type(e) is weft.WeftError and e.status == 99


def test_every_refusal_of_bad_arguments_is_a_weft_error(fabric):
    # The README: errors are weft.WeftError subclasses, each also the built-in exception that fits. A caller
    # who catches weft.WeftError (or weft.ShapeError) catches these too; they were once plain ValueErrors.
    a, b = np.ones((2, 3), f32), np.ones((3, 2), f32)
    strided = np.ones((4, 6), f32)[::2, ::2]
    t = fabric.tensor(a)
    cases = [
        (weft.ShapeError, "scalar", lambda: fabric.matmul(np.float32(1), b)),
        (weft.ShapeError, "scalar", lambda: t @ fabric.tensor(np.float32(2))),
        (weft.InvalidArgumentError, "copy=False", lambda: fabric.matmul(strided, b, copy=False)),
        (weft.InvalidArgumentError, "copy=False",
         lambda: fabric.matmul(np.ones((2, 1, 2, 3), f32), np.ones((3, 3, 2), f32), copy=False)),
        (weft.InvalidArgumentError, "nothing to compute",
         lambda: fabric.softmax_xent(a, np.full((2, 3), 1 / 3, f32), loss=False, grad=False)),
        (weft.ShapeError, "mT", lambda: fabric.tensor(np.ones(3, f32)).mT),
        (weft.InvalidArgumentError, "different contracts", lambda: t + t.with_contract("fp32")),
    ]
    for cls, needle, call in cases:
        with pytest.raises(cls, match=needle) as info:
            call()
        assert isinstance(info.value, weft.WeftError) and isinstance(info.value, ValueError), needle


def test_bench_refuses_what_weft_bench_refuses():
    # as `weft bench`: sizes 1..16384, repeats 1..1000, a budget above 0. repeats=0 once ran one repeat
    # silently; size 0 failed inside tensor creation, negative or huge sizes inside numpy.
    for kw, needle in ((dict(sizes=[0]), "sizes"), (dict(sizes=[-1]), "sizes"), (dict(sizes=[10**12]), "sizes"),
                       (dict(sizes=[8.5]), "sizes"), (dict(sizes=[]), "sizes"), (dict(sizes=8), "sequence"),
                       (dict(sizes=[8], repeats=0), "repeats"), (dict(sizes=[8], repeats=-1), "repeats"),
                       (dict(sizes=[8], max_seconds=float("nan")), "max_seconds"),
                       (dict(sizes=[8], max_seconds=0), "max_seconds")):
        with pytest.raises(weft.InvalidArgumentError, match=needle):
            weft.bench(lanes="cpu", **kw)


def test_route_explain_checks_shapes_with_its_own_name(fabric):
    # the README: messages name the Python function, never a C one; the ranks the message states are kept
    for call in (lambda: fabric.route_explain("relu", (-4, 4)), lambda: fabric.route_explain("relu", (0, 4)),
                 lambda: fabric.route_explain("relu", (1, 1, 1, 1, 4)),
                 lambda: fabric.route_explain("matmul", (2, 3), (4, 5)),
                 lambda: fabric.route_explain("matmul", (1, 1, 1, 2, 3), (3, 2)),
                 lambda: fabric.route_explain("matmul")):
        with pytest.raises(weft.ShapeError) as info:
            call()
        assert str(info.value).startswith("route_explain: ") and "weft_" not in str(info.value)
    assert fabric.route_explain("matmul", (2, 3), (3, 5)).chosen


def test_a_gpt_too_large_for_the_machine_says_so(fabric):
    # an empty MemoryError once; now the size it needs, before anything is allocated
    with pytest.raises(weft.OutOfMemoryError, match=r"needs about [0-9.]+ GiB of memory; this machine has"):
        weft.GPT(fabric, L=1024, C=65536, NH=1, V=256, maxT=2)


def test_messages_from_the_library_name_the_python_call():
    # weft_fabric_open's failure once reached Python as "weft_fabric_open: no lane could be opened ..."
    with pytest.raises(weft.NotFoundError) as info:
        weft.Fabric(lanes="nosuch", calibration="off")
    assert str(info.value).startswith("Fabric: ") and "weft_" not in str(info.value)
    with weft.Fabric(lanes="cpu", calibration="off") as f:
        with pytest.raises(weft.StateError) as info:
            f.route_last()
        assert str(info.value).startswith("route_last: ") and "weft_" not in str(info.value)
