"""weft for Python: the fabric's lanes, router and ops on numpy arrays, through ctypes over libweft.

    import numpy as np, weft
    weft.devices()                                    # lanes found here, and those absent with the reason
    c = weft.matmul(a, b)                             # exact contract: the same bits on every lane
    c = weft.matmul(a, b, contract="fp32")            # any accumulation order (vendor BLAS, FMA)
    with weft.Fabric(lanes="cpu,vulkan") as f:
        ta, tb = f.tensor(a), f.tensor(b)             # resident tensors: no host round trip between ops
        tc = f.relu(f.matmul(ta, tb))
        print(tc.location, f.route_last())
        result = tc.numpy()

The module-level op functions use a default fabric opened on first use (every lane, calibration "auto");
weft.set_default_fabric() replaces it. Errors are weft.WeftError subclasses carrying weft's own message.
Array operands are converted to C-contiguous float32 as described in weft._fabric (float64 rounds to
nearest, integers and booleans convert, complex/object/strings raise TypeError).
"""

import atexit as _atexit

from . import _lib
from ._bench import bench, bench_table
from ._errors import (InternalError, InvalidArgumentError, LaneFailedError, NotFoundError, OutOfMemoryError,
                      ShapeError, SizeOverflowError, StateError, UnsupportedError, WeftError, WeftIOError,
                      WrongFabricError)
from ._fabric import CostLine, Fabric, RouteCost, RouteExplanation, Tensor, as_float32, cost_cache_path

__version__ = "0.1.0"
library_version = _lib.version
library_path = _lib.path
CONTRACTS = _lib.CONTRACTS
OPS = _lib.OPS

__all__ = [
    "Fabric", "Tensor", "CostLine", "RouteCost", "RouteExplanation",
    "WeftError", "InvalidArgumentError", "ShapeError", "SizeOverflowError", "WrongFabricError", "OutOfMemoryError",
    "UnsupportedError", "LaneFailedError", "NotFoundError", "StateError", "WeftIOError", "InternalError",
    "devices", "default_fabric", "set_default_fabric", "tensor", "zeros", "scope", "sync",
    "matmul", "add", "relu", "relu_backward", "scale", "axpy", "sum_rows", "softmax_xent",
    "route_explain", "route_last", "cost_model", "calibrate", "cost_cache_path", "bench", "bench_table",
    "expf", "logf", "as_float32", "library_version", "library_path", "CONTRACTS", "OPS",
]

_default = None


def default_fabric():
    """The fabric the module-level functions use, opened on first use with every lane found."""
    global _default
    f = _default
    if f is None or f._ptr is None:
        f = _default = Fabric()
    return f


def set_default_fabric(fabric):
    """Makes `fabric` the one the module-level functions use (None: open a fresh default on next use).
    The previous default is closed if this module opened it."""
    global _default
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
    """The lanes of this machine as dicts (name, kind, device, driver, details, contracts, failed, present,
    reason): present lanes first, then every lane looked for and absent, with the reason. Opens a fabric
    with calibration off (nothing measured, nothing written) and closes it."""
    with Fabric(lanes=lanes, calibration="off") as f:
        return f.devices()


def _f():
    f = _default
    return f if f is not None and f._ptr is not None else default_fabric()


def tensor(data):
    """A Tensor of the default fabric holding a float32 copy of `data`."""
    return _f().tensor(data)


def zeros(shape):
    """A Tensor of zeros on the default fabric."""
    return _f().zeros(shape)


def scope():
    """`with weft.scope():` on the default fabric (see Fabric.scope)."""
    return _f().scope()


def sync():
    _f().sync()


def matmul(a, b, contract="exact", trans_a=False, trans_b=False, lane=None, out=None):
    """c = op(a) . op(b) on the default fabric (see Fabric.matmul)."""
    return _f().matmul(a, b, contract, trans_a, trans_b, lane, out)


def add(x, y, contract="exact", lane=None, out=None):
    """x + y, y of x's shape or one row broadcast over x's rows (see Fabric.add)."""
    return _f().add(x, y, contract, lane, out)


def relu(x, contract="exact", lane=None, out=None):
    return _f().relu(x, contract, lane, out)


def relu_backward(grad, x, contract="exact", lane=None, out=None):
    return _f().relu_backward(grad, x, contract, lane, out)


def scale(alpha, x, contract="exact", lane=None, out=None):
    return _f().scale(alpha, x, contract, lane, out)


def axpy(alpha, x, y, contract="exact", lane=None):
    """y = alpha * x + y in place; returns y (see Fabric.axpy)."""
    return _f().axpy(alpha, x, y, contract, lane)


def sum_rows(x, contract="exact", lane=None, out=None):
    return _f().sum_rows(x, contract, lane, out)


def softmax_xent(logits, targets, contract="exact", lane=None, loss=True, grad=True, out_loss=None, out_grad=None):
    """(loss, grad) of softmax cross-entropy (see Fabric.softmax_xent)."""
    return _f().softmax_xent(logits, targets, contract, lane, loss, grad, out_loss, out_grad)


def route_explain(op, *shapes, **kwargs):
    """Fabric.route_explain on the default fabric."""
    return _f().route_explain(op, *shapes, **kwargs)


def route_last():
    return _f().route_last()


def cost_model(lane, cls="matmul", contract="exact"):
    return _f().cost_model(lane, cls, contract)


def calibrate():
    _f().calibrate()


def expf(x):
    """weft's exp (weft_expf): the same bits on every exact lane. x is rounded to float32 first."""
    return _lib.lib.weft_expf(x)


def logf(x):
    """weft's log (weft_logf)."""
    return _lib.lib.weft_logf(x)
