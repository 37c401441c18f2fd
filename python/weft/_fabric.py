"""Fabric and Tensor: a weft_fabric and its tensors as Python objects, the op set on numpy arrays and resident
tensors, scopes, routing explanations and the cost model.

Arrays in: every array operand is turned into C-contiguous float32. A float32 C-contiguous ndarray is used as
it is (no copy); any other real numeric input (float64, float16, integers, booleans, lists, non-contiguous
views) is copied with np.asarray(x, dtype=np.float32, order="C"): float64 rounds to the nearest float32,
integers beyond 2**24 round, booleans become 0 and 1. Complex, object and string data raise TypeError.

Results out: an op whose operands are all arrays returns a new ndarray; an op with at least one Tensor operand
returns a new Tensor (the result stays where it was computed); `out=` names where the result goes (a Tensor
of this fabric, or a float32 C-contiguous ndarray that is filled in place) and is what the op returns.

Array operands travel through scratch tensors the fabric keeps per (operand position, shape), so a loop over
arrays of one shape creates no tensors after its first call. A fabric is safe to share between threads: each
call holds the fabric's lock (the library wants one thread at a time per fabric).
"""

import collections
import ctypes
import sys
import dataclasses
import threading

import numpy as np

from . import _lib
from ._errors import (InvalidArgumentError, NotFoundError, ShapeError, StateError, WeftError, WrongFabricError,
                      error_for)
from ._lib import lib

_F32 = np.dtype(np.float32)
_ndarray = np.ndarray
_from_buffer = ctypes.c_float.from_buffer
_PF = ctypes.POINTER(ctypes.c_float)

_write = lib.weft_tensor_write
_read = lib.weft_tensor_read
_matmul = lib.weft_op_matmul
_add = lib.weft_op_add
_relu = lib.weft_op_relu
_relu_backward = lib.weft_op_relu_backward
_scale = lib.weft_op_scale
_axpy = lib.weft_op_axpy
_sum_rows = lib.weft_op_sum_rows
_softmax_xent = lib.weft_op_softmax_xent


def _data(arr):
    """A float* to an array's first element without the cost of arr.ctypes (about 1 us a call)."""
    try:
        return _from_buffer(arr)
    except (TypeError, ValueError):  # read-only or empty buffers
        return arr.ctypes.data_as(_PF)


def as_float32(x, what="array"):
    """x as a C-contiguous float32 ndarray, following the conversion rule in this module's docstring."""
    if type(x) is _ndarray and x.dtype is _F32 and x.flags.c_contiguous:
        return x
    arr = np.asarray(x)
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{what}: weft computes in float32 and cannot convert an array of dtype {arr.dtype}")
    return np.asarray(arr, dtype=np.float32, order="C")


def _contract_index(contract):
    if isinstance(contract, str):
        try:
            return _lib.CONTRACTS.index(contract)
        except ValueError:
            pass
    elif isinstance(contract, int) and 0 <= contract < len(_lib.CONTRACTS):
        return contract
    raise InvalidArgumentError(f"unknown contract {contract!r}; weft knows {', '.join(_lib.CONTRACTS)}")


def _enum_index(value, names, what):
    if isinstance(value, str) and value in names:
        return names.index(value)
    if isinstance(value, int) and 0 <= value < len(names):
        return value
    raise InvalidArgumentError(f"unknown {what} {value!r}; weft knows {', '.join(names)}")


def _contract_names(mask):
    return [name for i, name in enumerate(_lib.CONTRACTS) if mask & (1 << i)]


@dataclasses.dataclass
class CostLine:
    """One cost line of a lane: t = alpha + work / beta (beta 0: free). `source` is prior, measured, cached
    or set; `refine` the online correction factor; `points` the measurements the fit used."""
    lane: str
    cls: str
    contract: str
    alpha: float
    beta: float
    refine: float
    source: str
    points: int


@dataclasses.dataclass
class RouteCost:
    """One lane's predicted cost for an op, in seconds, split into its parts."""
    lane: str
    eligible: bool
    why_not: str
    wait: float
    transfer: float
    alpha: float
    compute: float
    total: float


@dataclasses.dataclass
class RouteExplanation:
    """The router's reasoning for one op: every lane's predicted cost and the lane it chose (None when no
    lane can run it)."""
    op: str
    contract: str
    work: float
    chosen: object  # lane name, or None
    chosen_index: int
    lanes: list

    def as_dict(self):
        return dataclasses.asdict(self)

    def __str__(self):
        unit = "flop" if self.op == "matmul" else "elements"
        head = (f"{self.op}, contract {self.contract}, work {self.work:.4g} {unit}: "
                f"{'runs on ' + self.chosen if self.chosen else 'no lane can run it'}")
        width = max([4] + [len(c.lane) for c in self.lanes])
        rows = [head, f"  {'lane':<{width}}  {'total':>10}  {'wait':>10}  {'transfer':>10}  {'alpha':>10}  "
                      f"{'compute':>10}"]
        for c in self.lanes:
            mark = "*" if c.lane == self.chosen else " "
            if c.eligible:
                rows.append(f"{mark} {c.lane:<{width}}  " + "  ".join(
                    _fmt_s(v) for v in (c.total, c.wait, c.transfer, c.alpha, c.compute)))
            else:
                rows.append(f"{mark} {c.lane:<{width}}  not eligible: {c.why_not}")
        return "\n".join(rows)


def _fmt_s(seconds):
    if seconds >= 1:
        return f"{seconds:8.3f} s "
    if seconds >= 1e-3:
        return f"{seconds * 1e3:8.3f} ms"
    return f"{seconds * 1e6:8.2f} us"


def _explanation(e):
    lanes = [RouteCost(_lib.text(c.lane), bool(c.eligible), _lib.text(c.why_not), c.wait, c.transfer, c.alpha,
                       c.compute, c.total) for c in (e.lanes[i] for i in range(e.nlanes))]
    chosen = lanes[e.chosen].lane if 0 <= e.chosen < len(lanes) else None
    return RouteExplanation(_lib.OPS[e.op] if 0 <= e.op < len(_lib.OPS) else str(e.op),
                            _lib.CONTRACTS[e.contract] if 0 <= e.contract < len(_lib.CONTRACTS) else str(e.contract),
                            e.work, chosen, e.chosen, lanes)


class _Scope:
    __slots__ = ("_fabric",)

    def __init__(self, fabric):
        self._fabric = fabric

    def __enter__(self):
        self._fabric._scope_begin()
        return self._fabric

    def __exit__(self, exc_type, exc, tb):
        try:
            self._fabric._scope_end()
        except WeftError:
            if exc_type is None:
                raise  # otherwise the error that left the block is the one to see
        return False


class Tensor:
    """An fp32 tensor of a fabric (rank 1 to 4). Its value stays on the lane that last computed it until it is
    read (numpy()), so chains of ops on Tensors move no data through the host. Create with fabric.tensor(),
    fabric.zeros(), or as the result of an op with a Tensor operand."""

    __slots__ = ("_h", "_fabric", "shape", "__weakref__")

    def __init__(self, *args, **kwargs):
        raise TypeError("create tensors with fabric.tensor(data) or fabric.zeros(shape)")

    @classmethod
    def _wrap(cls, fabric, handle, shape):
        t = object.__new__(cls)
        t._fabric = fabric
        t._h = handle
        t.shape = shape
        return t

    def _handle(self):
        h = self._h
        if h is None or self._fabric._ptr is None:
            raise StateError("this tensor is closed" if h is None else "this tensor's fabric is closed")
        return h

    @property
    def fabric(self):
        return self._fabric

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def dtype(self):
        return _F32

    @property
    def nbytes(self):
        return 4 * self.size

    @property
    def location(self):
        """Where the current value lives: 'host', a lane name, or several joined by ','."""
        with self._fabric._lock:
            return _lib.text(lib.weft_tensor_location(self._handle()))

    def numpy(self, out=None):
        """The value as a new float32 ndarray (or written into `out`, a float32 C-contiguous array of the same
        size). Waits for pending work, and flushes an open scope on the lane that holds the value."""
        fab = self._fabric
        with fab._lock:
            h = self._handle()
            if out is None:
                out = np.empty(self.shape, _F32)
            elif not (type(out) is _ndarray and out.dtype is _F32 and out.flags.c_contiguous and out.flags.writeable):
                raise TypeError("numpy(out=...): out must be a writable C-contiguous float32 ndarray")
            if out.size or self.size:
                st = _read(h, _data(out), out.size)
                if st:
                    raise fab._error(st)
            return out

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        return a if dtype is None else a.astype(dtype, copy=False)

    def write(self, data):
        """Replaces the value with `data` (converted to float32; it must hold as many elements)."""
        fab = self._fabric
        arr = as_float32(data, "write")
        with fab._lock:
            h = self._handle()
            st = _write(h, _data(arr), arr.size)
            if st:
                raise fab._error(st)
        return self

    def close(self):
        """Destroys the tensor and its copies on every lane now (otherwise that happens when it is collected)."""
        h, self._h = self._h, None
        fab = self._fabric
        if h is not None and fab._ptr is not None:
            with fab._lock:
                if fab._ptr is not None:
                    lib.weft_tensor_destroy(h)

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the module's globals may already be gone
            pass

    def __repr__(self):
        if self._h is None or self._fabric._ptr is None:
            return f"<weft.Tensor shape={self.shape} closed>"
        return f"<weft.Tensor shape={self.shape} location={self.location!r}>"


class Fabric:
    """A weft fabric: the lanes of this machine, a router over them and the tensors that live on them.

    lanes: None (every lane found), or lane kinds/names as "cpu,vulkan" or a list ["cpu", "vulkan:0"].
    cpu_threads: threads the CPU lane may use; 0 = one per online core.
    calibration: "auto" (read the on-disk cache, measure missing lanes when routing first has to choose),
        "force" (measure every lane now and rewrite the cache) or "off" (built-in priors; never touches disk).
    on_note: a callable taking one str: calibration progress and notes (default: the notes that begin
        "weft: " go to stderr, such as the one line saying that lanes are being measured and where the
        results are kept).
    scratch_bytes: how much memory the scratch tensors for array operands may keep between calls.
    Use as a context manager, or call close(); tensors of a closed fabric are closed with it.
    """

    def __init__(self, lanes=None, cpu_threads=0, calibration="auto", on_note=None, vulkan_max_binding=0,
                 scratch_bytes=64 << 20, plugins=None):
        self._ptr = None
        self._lock = threading.RLock()
        desc = _lib.FabricDesc()
        if lanes is not None and not isinstance(lanes, str):
            lanes = ",".join(lanes)
        desc.lanes = lanes.encode() if lanes else None
        desc.cpu_threads = int(cpu_threads)
        desc.vulkan_max_binding = int(vulkan_max_binding)
        if plugins is not None and not isinstance(plugins, str):
            plugins = ":".join(plugins)
        # kept on the fabric: the library reads the paths while it opens
        self._plugins = plugins.encode() if plugins else None
        desc.plugins = self._plugins
        if calibration not in _lib.CALIBRATION:
            raise InvalidArgumentError(
                f"unknown calibration {calibration!r}; use one of {', '.join(_lib.CALIBRATION)}")
        desc.calibration = _lib.CALIBRATION[calibration]
        if on_note is None:
            # The notes a person should see ("weft: ..."): that routing started measuring lanes and where
            # the results are kept (one line), a cache that could not be read or written; progress is silent.
            def on_note(line):
                if line.startswith("weft: "):
                    print(line, file=sys.stderr, flush=True)
        # kept on the fabric: the library calls it for as long as the fabric is open
        self._note_fn = _lib.NOTE_FN(lambda ctx, line: on_note(_lib.text(line)))
        desc.on_note = self._note_fn
        out = ctypes.c_void_p()
        st = lib.weft_fabric_open(ctypes.byref(desc), ctypes.byref(out))
        if st:
            raise error_for(st, _lib.text(lib.weft_open_error()))
        self._ptr = out.value
        info = _lib.LaneInfo()
        self._lane_names = []
        for i in range(lib.weft_fabric_lane_count(self._ptr)):
            if lib.weft_fabric_lane_info(self._ptr, i, ctypes.byref(info)) == 0:
                self._lane_names.append(_lib.text(info.name))
        self._lane_index = {name: i for i, name in enumerate(self._lane_names)}
        self._descs = {}
        self._scratch = collections.OrderedDict()  # (position, shape) -> [handle, bytes], least recent first
        self._scratch_bytes = 0
        self._scratch_budget = int(scratch_bytes)
        self._scratch_over = False

    # ------------------------------------------------------------------------------------ lifetime

    def close(self):
        """Closes the fabric and every tensor on it. Calling it again does nothing."""
        with self._lock:
            p, self._ptr = self._ptr, None
            self._scratch.clear()
            self._scratch_bytes = 0
            if p is not None:
                lib.weft_fabric_close(p)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    @property
    def closed(self):
        return self._ptr is None

    def __repr__(self):
        if self._ptr is None:
            return "<weft.Fabric closed>"
        return f"<weft.Fabric lanes={self._lane_names}>"

    # ------------------------------------------------------------------------------------ internals

    def _error(self, status):
        return error_for(status, _lib.text(lib.weft_fabric_last_error(self._ptr)) if self._ptr else "")

    def _open_ptr(self):
        p = self._ptr
        if p is None:
            raise StateError("this fabric is closed")
        return p

    def _desc(self, contract, lane):
        key = (contract, lane)
        try:
            d = self._descs.get(key)
        except TypeError:  # an unhashable contract or lane: validated below, not cached
            d, key = None, None
        if d is None:
            d = _lib.OpDesc()
            d.contract = _contract_index(contract)
            d.lane = self.lane_index(lane) if lane is not None else _lib.LANE_AUTO
            if key is not None:
                self._descs[key] = d
        return d

    def lane_index(self, lane):
        """The index of a lane given by name ("cpu") or index; NotFoundError (weft's message) if none."""
        if isinstance(lane, str):
            i = self._lane_index.get(lane)
            if i is None:
                found = ctypes.c_size_t()
                st = lib.weft_fabric_lane_find(self._open_ptr(), lane.encode(), ctypes.byref(found))
                if st:
                    raise self._error(st)
                i = found.value
            return i
        if isinstance(lane, int) and not isinstance(lane, bool):
            if not 0 <= lane < len(self._lane_names):
                raise NotFoundError(f"lane {lane} does not exist (the fabric has {len(self._lane_names)} lanes)")
            return lane
        raise InvalidArgumentError(f"lane must be a lane name or index, not {lane!r}")

    def _create(self, shape, data=None):
        out = ctypes.c_void_p()
        dims = (ctypes.c_int64 * len(shape))(*shape)
        st = lib.weft_tensor_create(self._ptr, len(shape), dims, data, ctypes.byref(out))
        if st:
            raise self._error(st)
        return out.value

    def _scratch_get(self, pos, shape):
        key = (pos, shape)
        e = self._scratch.get(key)
        if e is not None:
            self._scratch.move_to_end(key)
            return e[0]
        h = self._create(shape)
        n = 4
        for d in shape:
            n *= d
        self._scratch[key] = [h, n]
        self._scratch_bytes += n
        if self._scratch_bytes > self._scratch_budget or len(self._scratch) > 64:
            self._scratch_over = True  # trimmed after the op: nothing in use now may be destroyed
        return h

    def _scratch_trim(self):
        self._scratch_over = False
        while self._scratch and (self._scratch_bytes > self._scratch_budget or len(self._scratch) > 64):
            _, (h, n) = self._scratch.popitem(last=False)
            self._scratch_bytes -= n
            lib.weft_tensor_destroy(h)

    def _in(self, x, pos, what):
        """(handle, shape, is_tensor) for an operand; arrays are written into a scratch tensor."""
        if type(x) is _ndarray and x.dtype is _F32 and x.flags.c_contiguous:
            arr = x
        elif isinstance(x, Tensor):
            if x._fabric is not self:
                raise WrongFabricError(f"{what} belongs to another fabric; tensors cannot be shared between fabrics")
            h = x._h
            if h is None:
                raise StateError(f"{what} is a closed tensor")
            return h, x.shape, True
        else:
            arr = as_float32(x, what)
        shape = arr.shape
        h = self._scratch_get(pos, shape)
        if arr.size:
            st = _write(h, _data(arr), arr.size)
            if st:
                raise self._error(st)
        return h, shape, False

    def _out(self, out, shape, resident, pos, what):
        """(handle, holder) for an op's result: holder None means "read into a new ndarray"."""
        if out is None:
            if resident:
                t = Tensor._wrap(self, self._create(shape), shape)
                return t._h, t
            return self._scratch_get(pos, shape), None
        if isinstance(out, Tensor):
            if out._fabric is not self:
                raise WrongFabricError(f"{what} belongs to another fabric; tensors cannot be shared between fabrics")
            if out._h is None:
                raise StateError(f"{what} is a closed tensor")
            return out._h, out
        if type(out) is _ndarray and out.dtype is _F32 and out.flags.c_contiguous and out.flags.writeable:
            # the library checks the shape against the scratch tensor and says what it should be
            return self._scratch_get(pos, out.shape), out
        raise TypeError(f"{what} must be a Tensor of this fabric or a writable C-contiguous float32 ndarray")

    def _result(self, h, holder, shape, trim=True):
        if holder is None:
            arr = np.empty(shape, _F32)
        elif type(holder) is _ndarray:
            arr = holder
        else:
            if trim and self._scratch_over:
                self._scratch_trim()
            return holder
        if arr.size:
            st = _read(h, _data(arr), arr.size)
            if st:
                raise self._error(st)
        if trim and self._scratch_over:
            self._scratch_trim()
        return arr

    # ------------------------------------------------------------------------------------ tensors

    def tensor(self, data):
        """A Tensor holding a float32 copy of `data` (any array-like; see the conversion rule)."""
        arr = as_float32(data, "tensor")
        with self._lock:
            self._open_ptr()
            h = self._create(arr.shape, _data(arr) if arr.size else None)
            return Tensor._wrap(self, h, arr.shape)

    def zeros(self, shape):
        """A Tensor of zeros of this shape."""
        shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(d) for d in shape)
        with self._lock:
            self._open_ptr()
            return Tensor._wrap(self, self._create(shape), shape)

    # ------------------------------------------------------------------------------------ ops

    def matmul(self, a, b, contract="exact", trans_a=False, trans_b=False, lane=None, out=None):
        """c = op(a) . op(b), op(x) = x or x transposed (the last two dimensions). a is [m,k] or [batch..,m,k];
        b is [k,n] (shared by the batch) or has a's batch dimensions. Under "exact" every element is
        acc = 0; for k ascending acc = acc + a[i,k]*b[k,j], each multiply and add rounded on its own."""
        if (out is None and type(a) is _ndarray and type(b) is _ndarray and a.dtype is _F32 and b.dtype is _F32
                and a.flags.c_contiguous and b.flags.c_contiguous):
            # The common call, arrays in and out with shapes seen before, without the general path's layers:
            # it is most of what a small matmul costs from Python. Anything unusual falls through.
            sa, sb = a.shape, b.shape
            if len(sa) >= 2 and len(sb) >= 2:
                sc = sa[:-2] + ((sa[-1] if trans_a else sa[-2]), (sb[-2] if trans_b else sb[-1]))
                with self._lock:
                    f = self._ptr
                    try:
                        d = self._descs.get((contract, lane))
                    except TypeError:  # unhashable: the general path says what is wrong with it
                        d = None
                    s = self._scratch
                    ea, eb, ec = s.get((0, sa)), s.get((1, sb)), s.get((2, sc))
                    if f is not None and d is not None and ea is not None and eb is not None and ec is not None:
                        try:
                            pa, pb, c = _from_buffer(a), _from_buffer(b), np.empty(sc, _F32)
                            pc = _from_buffer(c)
                        except (TypeError, ValueError):  # read-only or empty arrays
                            pass
                        else:
                            st = _write(ea[0], pa, a.size) or _write(eb[0], pb, b.size)
                            if not st:
                                st = _matmul(f, d, ea[0], 1 if trans_a else 0, eb[0], 1 if trans_b else 0, ec[0])
                            if not st:
                                st = _read(ec[0], pc, c.size)
                            if st:
                                raise self._error(st)
                            return c
        with self._lock:
            f = self._open_ptr()
            d = self._desc(contract, lane)
            ha, sa, ta = self._in(a, 0, "matmul: a")
            hb, sb, tb = self._in(b, 1, "matmul: b")
            if len(sa) >= 2 and len(sb) >= 2:
                shape = sa[:-2] + ((sa[-1] if trans_a else sa[-2]), (sb[-2] if trans_b else sb[-1]))
            else:
                shape = (1, 1)  # the library rejects the ranks, with its own message
            hc, holder = self._out(out, shape, ta or tb, 2, "matmul: out")
            st = _matmul(f, d, ha, 1 if trans_a else 0, hb, 1 if trans_b else 0, hc)
            if st:
                raise self._error(st)
            return self._result(hc, holder, shape)

    def add(self, x, y, contract="exact", lane=None, out=None):
        """x + y, where y has x's shape or is one row [n] / [1,n] added to every row of x (a bias)."""
        with self._lock:
            f = self._open_ptr()
            d = self._desc(contract, lane)
            hx, sx, tx = self._in(x, 0, "add: x")
            hy, _, ty = self._in(y, 1, "add: y")
            ho, holder = self._out(out, sx, tx or ty, 2, "add: out")
            st = _add(f, d, hx, hy, ho)
            if st:
                raise self._error(st)
            return self._result(ho, holder, sx)

    def relu(self, x, contract="exact", lane=None, out=None):
        """max(x, 0); a NaN stays NaN."""
        with self._lock:
            f = self._open_ptr()
            d = self._desc(contract, lane)
            hx, sx, tx = self._in(x, 0, "relu: x")
            ho, holder = self._out(out, sx, tx, 2, "relu: out")
            st = _relu(f, d, hx, ho)
            if st:
                raise self._error(st)
            return self._result(ho, holder, sx)

    def relu_backward(self, grad, x, contract="exact", lane=None, out=None):
        """grad where x > 0, else 0: the gradient through relu given the relu's input x."""
        with self._lock:
            f = self._open_ptr()
            d = self._desc(contract, lane)
            hg, sg, tg = self._in(grad, 0, "relu_backward: grad")
            hx, _, tx = self._in(x, 1, "relu_backward: x")
            ho, holder = self._out(out, sg, tg or tx, 2, "relu_backward: out")
            st = _relu_backward(f, d, hg, hx, ho)
            if st:
                raise self._error(st)
            return self._result(ho, holder, sg)

    def scale(self, alpha, x, contract="exact", lane=None, out=None):
        """alpha * x (alpha rounded to float32)."""
        with self._lock:
            f = self._open_ptr()
            d = self._desc(contract, lane)
            hx, sx, tx = self._in(x, 0, "scale: x")
            ho, holder = self._out(out, sx, tx, 2, "scale: out")
            st = _scale(f, d, alpha, hx, ho)
            if st:
                raise self._error(st)
            return self._result(ho, holder, sx)

    def axpy(self, alpha, x, y, contract="exact", lane=None):
        """y = alpha * x + y in place (the product rounded, then the sum); returns y. y is a Tensor, or a
        writable float32 C-contiguous ndarray that is updated in place."""
        with self._lock:
            f = self._open_ptr()
            d = self._desc(contract, lane)
            hx, _, _ = self._in(x, 0, "axpy: x")
            if isinstance(y, Tensor):
                hy, _, _ = self._in(y, 1, "axpy: y")
            elif type(y) is _ndarray and y.dtype is _F32 and y.flags.c_contiguous and y.flags.writeable:
                hy, _, _ = self._in(y, 1, "axpy: y")
            else:
                raise TypeError("axpy: y is updated in place, so it must be a Tensor or a writable C-contiguous "
                                "float32 ndarray")
            st = _axpy(f, d, alpha, hx, hy)
            if st:
                raise self._error(st)
            return self._result(hy, y, None)

    def sum_rows(self, x, contract="exact", lane=None, out=None):
        """The sum over rows (every leading dimension) for each column, rows ascending: shape [n]."""
        with self._lock:
            f = self._open_ptr()
            d = self._desc(contract, lane)
            hx, sx, tx = self._in(x, 0, "sum_rows: x")
            shape = (sx[-1],) if sx else (1,)
            ho, holder = self._out(out, shape, tx, 2, "sum_rows: out")
            st = _sum_rows(f, d, hx, ho)
            if st:
                raise self._error(st)
            return self._result(ho, holder, shape)

    def softmax_xent(self, logits, targets, contract="exact", lane=None, loss=True, grad=True, out_loss=None,
                     out_grad=None):
        """Softmax cross-entropy of logits [r,c] against target probabilities [r,c] (one-hot or soft).
        Returns (loss, grad): loss = mean over rows of -sum_j t*log_softmax(z), grad = (softmax(z) - t) / r.
        With array operands loss is a numpy float32 and grad an ndarray; with a Tensor operand both are
        Tensors (loss of shape [1]). loss=False or grad=False skips one (it comes back as None)."""
        with self._lock:
            f = self._open_ptr()
            d = self._desc(contract, lane)
            hz, sz, tz = self._in(logits, 0, "softmax_xent: logits")
            ht, _, tt = self._in(targets, 1, "softmax_xent: targets")
            resident = tz or tt
            hl = hg = None
            lholder = gholder = None
            if loss or out_loss is not None:
                hl, lholder = self._out(out_loss, (1,), resident, 2, "softmax_xent: out_loss")
            if grad or out_grad is not None:
                hg, gholder = self._out(out_grad, sz, resident, 3, "softmax_xent: out_grad")
            st = _softmax_xent(f, d, hz, ht, hl, hg)
            if st:
                raise self._error(st)
            rl = rg = None
            if hl is not None:
                rl = self._result(hl, lholder, (1,), trim=hg is None)
                if lholder is None:
                    rl = rl[0]
            if hg is not None:
                rg = self._result(hg, gholder, sz)
            return rl, rg

    # ------------------------------------------------------------------------------------ scopes

    def scope(self):
        """`with fabric.scope():` batches the lanes' dispatches into one submission and one synchronisation
        until the block ends. Reading a tensor inside flushes it, so results are always right."""
        return _Scope(self)

    def _scope_begin(self):
        with self._lock:
            st = lib.weft_scope_begin(self._open_ptr())
            if st:
                raise self._error(st)

    def _scope_end(self):
        with self._lock:
            st = lib.weft_scope_end(self._open_ptr())
            if st:
                raise self._error(st)

    def sync(self):
        """Waits for every lane to finish what it was given."""
        with self._lock:
            st = lib.weft_fabric_sync(self._open_ptr())
            if st:
                raise self._error(st)

    def revive(self):
        """Asks every down lane that can come back (a restarted worker, a browser tab that attached) whether it
        is up, now rather than at its next backoff. Returns the number of lanes up."""
        with self._lock:
            up = ctypes.c_size_t()
            st = lib.weft_fabric_revive(self._open_ptr(), ctypes.byref(up))
            if st:
                raise self._error(st)
            return up.value

    # ------------------------------------------------------------------------------------ lanes

    def devices(self):
        """Every lane of the fabric (present=True) and every lane looked for and absent (present=False, with
        the reason), as dicts with the keys name, kind, device, driver, details, contracts, failed (the lane is
        down), revivable (a down lane may come back), present, reason."""
        with self._lock:
            p = self._open_ptr()
            rows = []
            info = _lib.LaneInfo()
            for i in range(lib.weft_fabric_lane_count(p)):
                st = lib.weft_fabric_lane_info(p, i, ctypes.byref(info))
                if st:
                    raise self._error(st)
                rows.append({
                    "name": _lib.text(info.name), "kind": _lib.text(info.kind), "device": _lib.text(info.device),
                    "driver": _lib.text(info.driver), "details": _lib.text(info.details),
                    "contracts": _contract_names(info.contracts), "failed": bool(info.failed),
                    "revivable": bool(info.revivable), "present": True, "reason": "",
                })
            name, reason = ctypes.c_char_p(), ctypes.c_char_p()
            for i in range(lib.weft_fabric_absent_count(p)):
                if lib.weft_fabric_absent_info(p, i, ctypes.byref(name), ctypes.byref(reason)) == 0:
                    n = _lib.text(name.value)
                    rows.append({"name": n, "kind": n.split(":")[0], "device": "", "driver": "", "details": "",
                                 "contracts": [], "failed": False, "revivable": False, "present": False,
                                 "reason": _lib.text(reason.value)})
            return rows

    @property
    def lanes(self):
        """The names of the fabric's lanes, in index order."""
        return list(self._lane_names)

    @property
    def last_lane(self):
        """The name of the lane the last successful op ran on, or None."""
        with self._lock:
            i = lib.weft_fabric_last_lane(self._open_ptr())
        return self._lane_names[i] if 0 <= i < len(self._lane_names) else None

    # ------------------------------------------------------------------------------------ routing, cost

    def route_explain(self, op, *shapes, contract="exact", trans_a=False, trans_b=False, batch=None, m=None,
                      n=None, k=None, rows=None, cols=None):
        """Where an op of this shape would run (inputs on the host), and why: a RouteExplanation.

        Shapes are those of the operands (tuples, ndarrays or Tensors): route_explain("matmul", (m, k), (k, n))
        or with a batch ((b, m, k), (k, n)); route_explain("add", (rows, cols)). Keywords give the numbers
        directly instead: m, n, k and batch for matmul; rows and cols for the other ops."""
        opi = _enum_index(op, _lib.OPS, "op")
        q = _lib.RouteQuery()
        q.op = opi
        q.contract = _contract_index(contract)
        dims = [tuple(int(v) for v in (s.shape if hasattr(s, "shape") else s)) for s in shapes]
        if _lib.OPS[opi] == "matmul":
            if dims:
                if len(dims) != 2 or len(dims[0]) < 2 or len(dims[1]) < 2:
                    raise ShapeError("route_explain: matmul takes the shapes of a and b, each of rank 2 to 4")
                sa, sb = dims
                bt = 1
                for v in sa[:-2]:
                    bt *= v
                q.batch, q.m, q.k = bt, (sa[-1] if trans_a else sa[-2]), (sa[-2] if trans_a else sa[-1])
                q.n = sb[-2] if trans_b else sb[-1]
            if batch is not None:
                q.batch = batch
            elif not dims:
                q.batch = 1
            for name, v in (("m", m), ("n", n), ("k", k)):
                if v is not None:
                    setattr(q, name, v)
        else:
            if dims:
                s = dims[0]
                if not s:
                    raise ShapeError(f"route_explain: {_lib.OPS[opi]} needs an operand of rank 1 to 4")
                r = 1
                for v in s[:-1]:
                    r *= v
                q.rows, q.cols = r, s[-1]
            if rows is not None:
                q.rows = rows
            if cols is not None:
                q.cols = cols
        e = _lib.RouteExplanation()
        with self._lock:
            st = lib.weft_route_explain(self._open_ptr(), ctypes.byref(q), ctypes.byref(e))
            if st:
                raise self._error(st)
            return _explanation(e)

    def route_last(self):
        """The router's reasoning for the last op it routed (not those pinned with lane=): a RouteExplanation.
        StateError before any op was routed."""
        e = _lib.RouteExplanation()
        with self._lock:
            st = lib.weft_route_last(self._open_ptr(), ctypes.byref(e))
            if st:
                raise self._error(st)
            return _explanation(e)

    def cost_model(self, lane, cls="matmul", contract="exact"):
        """A lane's cost line for an op class ("matmul", "elementwise", "upload", "download"): a CostLine.
        Matmul lines are kept per contract; the other classes ignore it."""
        ci = _enum_index(cls, _lib.COST_CLASSES, "cost class")
        k = _contract_index(contract)
        with self._lock:
            p = self._open_ptr()
            i = self.lane_index(lane)
            line = _lib.CostLine()
            st = lib.weft_fabric_cost_model(p, i, ci, k, ctypes.byref(line))
            if st:
                raise self._error(st)
        src = _lib.COST_SOURCES[line.source] if 0 <= line.source < len(_lib.COST_SOURCES) else str(line.source)
        return CostLine(self._lane_names[i], _lib.COST_CLASSES[ci], _lib.CONTRACTS[k], line.alpha, line.beta,
                        line.refine, src, line.points)

    def set_cost_model(self, lane, cls, alpha, beta, contract="exact"):
        """Replaces a cost line: alpha in seconds, beta in work per second (0 = free)."""
        ci = _enum_index(cls, _lib.COST_CLASSES, "cost class")
        k = _contract_index(contract)
        with self._lock:
            p = self._open_ptr()
            st = lib.weft_fabric_set_cost_model(p, self.lane_index(lane), ci, k, float(alpha), float(beta))
            if st:
                raise self._error(st)

    def calibrate(self):
        """Measures every live lane now and writes the cache (unless calibration is "off"). Progress lines go
        to on_note."""
        with self._lock:
            st = lib.weft_fabric_calibrate(self._open_ptr())
            if st:
                raise self._error(st)


def cost_cache_path():
    """The calibration cache file weft reads and writes."""
    buf = ctypes.create_string_buffer(4096)
    st = lib.weft_cost_cache_path(buf, len(buf))
    if st:
        raise error_for(st, "no home or cache directory is known (set XDG_CACHE_HOME or HOME)")
    return buf.value.decode()
