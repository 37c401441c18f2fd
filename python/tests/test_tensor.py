"""Resident tensors (results stay on the lane between calls, out= targets, in-place ops), their lifetime
against their fabric's, and scopes as a with block."""

import gc

import numpy as np
import pytest

import reference as ref
import weft

f32 = np.float32


def test_tensor_round_trip_and_properties(fabric):
    a = np.arange(24, dtype=f32).reshape(2, 3, 4)
    t = fabric.tensor(a)
    assert t.shape == (2, 3, 4) and t.ndim == 3 and t.size == 24 and t.nbytes == 96 and t.dtype == f32
    assert t.location == "host" and t.fabric is fabric
    assert ref.same_bits(t.numpy(), a)
    assert ref.same_bits(np.asarray(t), a)
    t.write(a * 2)
    assert ref.same_bits(t.numpy(), a * 2)
    z = fabric.zeros((3, 5))
    assert ref.same_bits(z.numpy(), np.zeros((3, 5), f32))
    assert "shape=(3, 5)" in repr(z)


def test_write_of_the_wrong_size_is_a_shape_error(fabric):
    t = fabric.zeros((2, 2))
    with pytest.raises(weft.ShapeError, match="5 floats given, the tensor holds 4"):
        t.write(np.ones(5, f32))


def test_tensor_operands_give_tensor_results_that_stay_resident(fabric, lane):
    rng = np.random.default_rng(20)
    a, b, bias = (rng.uniform(-1, 1, s).astype(f32) for s in ((8, 16), (16, 4), (4,)))
    ta, tb, tbias = fabric.tensor(a), fabric.tensor(b), fabric.tensor(bias)
    try:
        h = fabric.relu(fabric.add(fabric.matmul(ta, tb, lane=lane), tbias, lane=lane), lane=lane)
    except weft.UnsupportedError as e:  # every lane here claims exact: refusing is a failure, not a skip
        pytest.fail(f"a lane that claims the exact contract refused the op: {e}")
    assert isinstance(h, weft.Tensor) and h.shape == (8, 4)
    ran_on = fabric.last_lane
    if lane is not None:
        assert ran_on == lane
    # the value lives where it was computed (a host-memory lane's results are on the host)
    assert ran_on in h.location.split(",") or h.location == "host"
    assert ref.same_bits(h.numpy(), ref.relu(ref.add(ref.matmul(a, b), bias)))


def test_mixed_array_and_tensor_operands(fabric):
    a = np.full((2, 3), 2, f32)
    tb = fabric.tensor(np.full((3, 2), 3, f32))
    c = fabric.matmul(a, tb)
    assert isinstance(c, weft.Tensor) and ref.same_bits(c.numpy(), np.full((2, 2), 18, f32))


def test_out_tensor_and_in_place(fabric):
    x = fabric.tensor(np.array([[-1, 2], [3, -4]], f32))
    out = fabric.zeros((2, 2))
    assert fabric.relu(x, out=out) is out
    assert ref.same_bits(out.numpy(), np.array([[0, 2], [3, 0]], f32))
    fabric.scale(2, x, out=x)  # out may be x
    assert ref.same_bits(x.numpy(), np.array([[-2, 4], [6, -8]], f32))
    y = fabric.tensor(np.ones((2, 2), f32))
    assert fabric.axpy(0.5, x, y) is y
    assert ref.same_bits(y.numpy(), np.array([[0, 3], [4, -3]], f32))
    loss, grad = fabric.softmax_xent(x, fabric.tensor(np.eye(2, dtype=f32)))
    assert loss.shape == (1,) and grad.shape == (2, 2)
    want = ref.softmax_xent(np.array([[-2, 4], [6, -8]], f32), np.eye(2, dtype=f32))
    assert ref.same_bits(loss.numpy()[0], want[0]) and ref.same_bits(grad.numpy(), want[1])


def test_closed_tensor_and_closed_fabric(fabric):
    t = fabric.zeros(3)
    t.close()
    t.close()  # twice is fine
    with pytest.raises(weft.StateError, match="closed"):
        t.numpy()
    with pytest.raises(weft.StateError, match="closed tensor"):
        fabric.relu(t)
    f = weft.Fabric(calibration="off")
    u = f.tensor([1.0, 2.0], dtype=f32)  # Python floats are float64: converted only when asked
    f.close()
    assert f.closed
    with pytest.raises(weft.StateError, match="fabric is closed"):
        u.numpy()
    with pytest.raises(weft.StateError, match="fabric is closed"):
        f.matmul(np.ones((2, 2), f32), np.ones((2, 2), f32))
    del u
    gc.collect()  # collecting a tensor of a closed fabric must not touch the freed library object


def test_tensors_of_another_fabric_are_refused(fabric):
    with weft.Fabric(calibration="off") as other:
        t = other.tensor(np.ones((2, 2), f32))
        with pytest.raises(weft.WrongFabricError, match="another fabric"):
            fabric.relu(t)
        with pytest.raises(weft.WrongFabricError):
            fabric.relu(np.ones((2, 2), f32), out=t)


def test_tensor_cannot_be_constructed_directly():
    with pytest.raises(TypeError, match="fabric.tensor"):
        weft.Tensor()


def test_fabric_context_manager_closes_tensors():
    with weft.Fabric(calibration="off") as f:
        t = f.tensor(np.ones(4, f32))
        assert repr(t).startswith("<weft.Tensor")
    assert f.closed and "closed" in repr(t) and "closed" in repr(f)


# ---------------------------------------------------------------------------------------------- scopes

def test_scope_block_gives_the_same_results(fabric):
    rng = np.random.default_rng(21)
    a, b = rng.uniform(-1, 1, (16, 16)).astype(f32), rng.uniform(-1, 1, (16, 16)).astype(f32)
    ta, tb = fabric.tensor(a), fabric.tensor(b)
    with fabric.scope() as f:
        assert f is fabric
        c = fabric.matmul(ta, tb)
        d = fabric.relu(c)
        inside = d.numpy()  # a read inside the scope flushes it
        e = fabric.scale(2, d)
    assert ref.same_bits(inside, ref.relu(ref.matmul(a, b)))
    assert ref.same_bits(e.numpy(), ref.scale(2, inside))


def test_scopes_do_not_nest(fabric):
    with fabric.scope():
        with pytest.raises(weft.StateError, match="already open"):
            with fabric.scope():
                pass
    # the outer scope ended normally: a new one opens
    with fabric.scope():
        pass


def test_scope_ends_when_the_block_raises(fabric):
    with pytest.raises(weft.ShapeError):
        with fabric.scope():
            fabric.matmul(np.ones((2, 3), f32), np.ones((2, 3), f32))
    with fabric.scope():  # would be "already open" had the failed block left it open
        pass


def test_module_level_scope_and_sync():
    with weft.scope():
        r = weft.relu(np.array([-1.0, 1.0], f32))
    weft.sync()
    assert ref.same_bits(r, np.array([0, 1], f32))


def test_one_fabric_shared_by_threads(fabric):
    # ctypes releases the GIL during calls; the fabric's lock keeps the library to one thread at a time
    import threading

    rng = np.random.default_rng(22)
    pairs = [(rng.uniform(-1, 1, (12, 20)).astype(f32), rng.uniform(-1, 1, (20, 7)).astype(f32)) for _ in range(4)]
    wrong = []

    def work(a, b):
        want = ref.matmul(a, b)
        for _ in range(200):
            if not ref.same_bits(fabric.matmul(a, b), want):
                wrong.append(1)

    threads = [threading.Thread(target=work, args=p) for p in pairs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong


def test_array_operands_reused_inside_a_scope(fabric, lane):
    # Each call below rewrites the same scratch tensor for `a` while the scope may still hold the earlier
    # ops unsubmitted: every result must still be the one of its own input.
    rng = np.random.default_rng(23)
    b = fabric.tensor(rng.uniform(-1, 1, (8, 8)).astype(f32))
    xs = [rng.uniform(-1, 1, (8, 8)).astype(f32) for _ in range(4)]
    try:
        with fabric.scope():
            outs = [fabric.matmul(x, b, lane=lane) for x in xs]
    except weft.UnsupportedError as e:  # every lane here claims exact: refusing is a failure, not a skip
        pytest.fail(f"a lane that claims the exact contract refused the op: {e}")
    for x, o in zip(xs, outs):
        assert ref.same_bits(o.numpy(), ref.matmul(x, b.numpy()))
