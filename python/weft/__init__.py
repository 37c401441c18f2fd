"""weft for Python: a heterogeneous compute fabric on numpy arrays and resident tensors.

weft finds every processor it can reach - the CPU's cores, GPUs through Vulkan and CUDA, plugin NPUs,
remote workers, browser tabs - as *lanes*, measures what each costs on this machine, and runs each op on
the lane that finishes it first: tiny work stays on the CPU, large work goes to a GPU. Under the default
*exact* contract every lane returns the same bits.

Arrays (numpy's rules)::

    import numpy as np, weft
    a = np.random.rand(64, 32).astype(np.float32)
    b = np.random.rand(32, 16).astype(np.float32)
    c = weft.matmul(a, b)                      # as numpy.matmul: 1-D promotion, batch broadcast, empties
    c = weft.matmul(a, b, contract="fp32")     # any accumulation order (vendor BLAS, FMA)
    weft.matmul(a.astype(np.float64), b)       # TypeError: weft converts nothing silently ...
    weft.matmul(a.astype(np.float64), b, dtype=np.float32)   # ... unless asked to

Resident tensors (values stay on their lane between ops)::

    with weft.Fabric(lanes="cpu,vulkan") as f:
        x, w = f.tensor(a), f.tensor(b)
        with f.scope():                        # the lanes batch the block into one submission
            h = f.relu(x @ w)                  # @ + - and * by scalars, .T, .shape, len()
        print(h, f.route_last())               # where it lives, and every lane's predicted cost
        result = np.asarray(h)

Sharing memory (no copies, both ways)::

    t = weft.from_dlpack(np_array_or_torch_tensor)   # a Tensor over that memory
    v = np.from_dlpack(t); u = torch.from_dlpack(t)  # that memory, seen by numpy or PyTorch

What is here: weft.devices() (lanes there are, and those absent with the reason), the ops (matmul, add,
relu, relu_backward, scale, axpy, sum_rows, softmax_xent) on the default fabric or a Fabric of your own,
Tensor, from_dlpack, route_explain / route_last / cost_model / calibrate (why an op ran where it did),
bench, and GPT (GPT-2 trained and sampled on the fabric). Errors are weft.WeftError subclasses carrying
weft's message, each also a built-in exception (ShapeError is a ValueError, ...).

Examples: python/examples/ - matmul_routing.py, train_digits.py (the MLP), gpt_generate.py.
The module-level functions use a default fabric opened on first use (every lane, calibration "auto");
weft.set_default_fabric() replaces it.
"""

import atexit as _atexit

from . import _native
from ._errors import (InternalError, InvalidArgumentError, LaneFailedError, NotFoundError, OutOfMemoryError,
                      ShapeError, SizeOverflowError, StateError, UnsupportedError, WeftError, WeftIOError,
                      WrongFabricError, _BY_STATUS)

_weft = _native.load()
_weft._set_errors(dict(_BY_STATUS), WeftError)

from ._bench import bench, bench_table  # noqa: E402
from ._fabric import (CONTRACTS, OPS, AbsentLane, CostLine, Devices, Fabric, Lane, RouteCost,  # noqa: E402
                      RouteExplanation, cost_cache_path)
from ._gpt import GPT  # noqa: E402

Tensor = _weft.Tensor

__version__ = "0.1.0"
#: The version of the weft library the package runs on ("MAJOR.MINOR.PATCH").
library_version = _weft.library_version
#: The file of that library.
library_path = _weft.library_path()

__all__ = [
    "Fabric", "Tensor", "GPT", "Devices", "Lane", "AbsentLane", "CostLine", "RouteCost", "RouteExplanation",
    "WeftError", "InvalidArgumentError", "ShapeError", "SizeOverflowError", "WrongFabricError", "OutOfMemoryError",
    "UnsupportedError", "LaneFailedError", "NotFoundError", "StateError", "WeftIOError", "InternalError",
    "devices", "default_fabric", "set_default_fabric", "tensor", "zeros", "from_dlpack", "scope", "sync",
    "matmul", "add", "relu", "relu_backward", "scale", "axpy", "sum_rows", "softmax_xent",
    "route_explain", "route_last", "cost_model", "calibrate", "cost_cache_path", "bench", "bench_table",
    "expf", "logf", "library_version", "library_path", "CONTRACTS", "OPS",
]

_default = None


def default_fabric():
    """The fabric the module-level functions use, opened on first use with every lane found."""
    global _default
    f = _default
    if f is None or f.closed:
        f = _default = Fabric()
    return f


def set_default_fabric(fabric):
    """Makes `fabric` the one the module-level functions use (None: open a fresh default on next use).
    The previous default is closed if this module opened it."""
    global _default
    if fabric is not None and not isinstance(fabric, Fabric):
        raise TypeError(f"set_default_fabric: fabric must be a weft.Fabric (or None), not {type(fabric).__name__}")
    old = _default
    if old is not None and old is not fabric and getattr(old, "_weft_owned_default", True):
        old.close()
    if fabric is not None:
        fabric._weft_owned_default = False
    _default = fabric


@_atexit.register
def _close_default():
    # lanes with device threads and drivers shut down before the interpreter tears down modules
    f = _default
    if f is not None and getattr(f, "_weft_owned_default", True):
        f.close()


def devices(lanes=None):
    """The lanes of this machine and, kept apart, those looked for and absent with the reason: a Devices
    (iterate it for the lanes there are; .absent for the others; print it for a table). Opens a fabric with
    calibration off (nothing measured, nothing written) and closes it."""
    from ._fabric import _named

    with _named("devices", Fabric, lanes, 0, "off") as f:
        return f.devices()


def _f():
    f = _default
    return f if f is not None and not f.closed else default_fabric()


def tensor(data, contract="exact", dtype=None):
    """A Tensor of the default fabric holding a copy of `data` (see Fabric.tensor)."""
    return _f().tensor(data, contract, dtype)


def zeros(shape, contract="exact"):
    """A Tensor of zeros on the default fabric."""
    return _f().zeros(shape, contract)


def from_dlpack(x, fabric=None, contract="exact"):
    """A Tensor over the memory of `x` (a numpy array, a PyTorch tensor: anything with __dlpack__), with no
    copy: writes through either side are seen by the other. float32, row-major (or a matrix's transpose,
    which comes in as a .T view). On the default fabric unless `fabric` is given."""
    if fabric is not None and not isinstance(fabric, _weft.Fabric):
        raise TypeError(f"from_dlpack: fabric must be a weft.Fabric (or None: the default), not {type(fabric).__name__}")
    return (fabric if fabric is not None else _f()).from_dlpack(x, contract)


def scope():
    """`with weft.scope():` on the default fabric (see Fabric.scope)."""
    return _f().scope()


def sync():
    """Waits for every lane of the default fabric to finish what it was given."""
    _f().sync()


def matmul(a, b, contract="exact", trans_a=False, trans_b=False, lane=None, out=None, dtype=None, copy=None):
    """The matrix product as numpy.matmul computes it, on the default fabric (see Fabric.matmul)."""
    f = _default
    if f is None or f.closed:
        f = default_fabric()
    return f.matmul(a, b, contract, trans_a, trans_b, lane, out, dtype, copy)


def add(x, y, contract="exact", lane=None, out=None, dtype=None):
    """x + y, y of x's shape or one row broadcast over x's rows (see Fabric.add)."""
    return _f().add(x, y, contract, lane, out, dtype)


def relu(x, contract="exact", lane=None, out=None, dtype=None):
    """max(x, 0) elementwise (see Fabric.relu)."""
    return _f().relu(x, contract, lane, out, dtype)


def relu_backward(grad, x, contract="exact", lane=None, out=None, dtype=None):
    """grad where x > 0, else 0 (see Fabric.relu_backward)."""
    return _f().relu_backward(grad, x, contract, lane, out, dtype)


def scale(alpha, x, contract="exact", lane=None, out=None, dtype=None):
    """alpha * x (see Fabric.scale)."""
    return _f().scale(alpha, x, contract, lane, out, dtype)


def axpy(alpha, x, y, contract="exact", lane=None, dtype=None):
    """y = alpha * x + y in place; returns y (see Fabric.axpy)."""
    return _f().axpy(alpha, x, y, contract, lane, dtype)


def sum_rows(x, contract="exact", lane=None, out=None, dtype=None):
    """The sum over rows of each column (see Fabric.sum_rows)."""
    return _f().sum_rows(x, contract, lane, out, dtype)


def softmax_xent(logits, targets, contract="exact", lane=None, loss=True, grad=True, out_loss=None, out_grad=None,
                 dtype=None):
    """(loss, grad) of softmax cross-entropy (see Fabric.softmax_xent)."""
    return _f().softmax_xent(logits, targets, contract, lane, loss, grad, out_loss, out_grad, dtype)


def route_explain(op, *shapes, **kwargs):
    """Where an op of this shape would run on the default fabric, and why (see Fabric.route_explain)."""
    return _f().route_explain(op, *shapes, **kwargs)


def route_last():
    """The router's reasoning for the default fabric's last routed op (see Fabric.route_last for which are)."""
    return _f().route_last()


def cost_model(lane, cls="matmul", contract="exact"):
    """A lane's cost line on the default fabric (see Fabric.cost_model)."""
    return _f().cost_model(lane, cls, contract)


def calibrate():
    """Measures every live lane of the default fabric now and writes the cache."""
    _f().calibrate()


expf = _weft.expf
logf = _weft.logf
