"""DLPack: memory shared, not copied, between weft tensors and numpy arrays or PyTorch tensors, in both
directions (each tested by writing through one side and reading through the other); and a torch.cuda tensor
entering a cuda lane without a host round trip (run where there is an NVIDIA GPU; skipped elsewhere)."""

import numpy as np
import pytest

import weft

f32 = np.float32


def test_numpy_array_into_weft_shares_memory(fabric):
    a = np.arange(6, dtype=f32).reshape(2, 3)
    t = fabric.from_dlpack(a)
    assert t.shape == (2, 3) and "shared" in repr(t)
    a[1, 2] = 50                          # numpy writes ...
    assert t.numpy()[1, 2] == 50          # ... weft reads
    fabric.scale(2, t, out=t)             # weft writes (an op with out=) ...
    assert a[1, 2] == 100 and a[0, 1] == 2  # ... numpy reads, no copy back asked for
    assert np.array_equal(fabric.relu(t - 4).numpy(), np.maximum(a - 4, 0))
    exact = [d.name for d in fabric.devices() if "exact" in d.contracts]  # cuda:N.tensor is tf32/bf16 only
    assert "cpu" in exact
    for lane in exact:                    # a device lane's result comes home into the shared memory too
        fabric.scale(1, t, out=t, lane=lane)
        assert a[1, 2] == 100


def test_weft_tensor_into_numpy_shares_memory(fabric):
    t = fabric.tensor(np.zeros((2, 2), f32))
    v = np.from_dlpack(t)                 # numpy 1.24 makes such arrays read-only: weft writes, numpy reads
    assert v.shape == (2, 2) and v.dtype == f32
    t.write(np.full((2, 2), 3, f32))
    assert v[1, 1] == 3
    fabric.add(t, t, out=t)
    assert v[0, 0] == 6
    assert np.array_equal(np.from_dlpack(t.T), np.asarray(t).T)  # a view exports its strides
    assert t.__dlpack_device__() == (1, 0)


def test_transposed_memory_comes_in_as_a_view(fabric):
    a = np.arange(6, dtype=f32).reshape(2, 3)
    t = fabric.from_dlpack(a.T)
    assert t.shape == (3, 2) and t.base is not None and np.array_equal(np.asarray(t), a.T)
    with pytest.raises(BufferError, match="strided"):
        fabric.from_dlpack(np.arange(12, dtype=f32).reshape(3, 4)[:, ::2])
    with pytest.raises(TypeError, match="float32"):
        fabric.from_dlpack(np.ones(3))


torch = pytest.importorskip("torch", reason="PyTorch is not installed (Debian: python3-torch)")


def test_torch_cpu_tensor_both_ways(fabric):
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    t = fabric.from_dlpack(x)
    x[0, 0] = -7                          # torch writes, weft reads
    assert t.numpy()[0, 0] == -7
    fabric.relu(t, out=t)                 # weft writes, torch reads
    assert x[0, 0].item() == 0 and x[1, 2].item() == 5
    u = torch.from_dlpack(fabric.tensor(np.ones((2, 2), f32)) * 4)
    w = fabric.from_dlpack(u)
    u[1, 0] = 9                           # torch writes into weft's memory, weft reads
    assert w.numpy()[1, 0] == 9
    back = fabric.tensor(np.ones((2, 2), f32))
    tb = torch.from_dlpack(back)
    back.write(np.full((2, 2), 5, f32))   # weft writes into memory torch holds, torch reads
    assert tb[1, 1].item() == 5


def _cuda_lane(fabric):
    if not torch.cuda.is_available():
        return None
    return next((lane for lane in fabric.lanes if lane.startswith("cuda:") and "." not in lane), None)


def test_torch_cuda_tensor_enters_a_cuda_lane_without_a_host_round_trip(fabric):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for PyTorch here")
    lane = _cuda_lane(fabric)
    if lane is None:
        pytest.skip(f"PyTorch sees a GPU but this fabric has no cuda lane ({fabric.devices().absent})")
    x = torch.arange(12, dtype=torch.float32, device="cuda").reshape(3, 4)
    t = fabric.from_dlpack(x)
    assert t.location == lane             # the value is on the GPU: nothing crossed to the host
    y = fabric.scale(2, t, lane=lane)
    assert y.location == lane
    back = torch.from_dlpack(y)           # leaves the same way
    assert back.is_cuda and torch.equal(back, x * 2)
    x[0, 0] = 100                         # torch writes on the device, weft reads
    assert fabric.scale(1, t, lane=lane).numpy()[0, 0] == 100
