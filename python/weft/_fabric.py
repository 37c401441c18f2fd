"""Fabric: weft's fabric as a Python object. The hot part (every op, tensors, array operands) is the native
type weft._weft.Fabric; this module adds what is not on any hot path: devices(), routing explanations, the
cost model, scopes as a with block.

Arrays in: float32 arrays are used where they are (no copy). weft computes in float32 and converts nothing
silently: a float64, integer or boolean operand raises TypeError saying how to convert it, unless the call
passes dtype=numpy.float32, which converts it (float64 rounds to nearest; integers beyond 2**24 round).
Complex, object and string data always raise TypeError. Fortran-ordered matrices and transposed views are
read where they are; other strided views are copied (Fabric.copies counts every copy weft makes), or refused
with copy=False (matmul).

Results out: an op whose operands are all arrays returns a new ndarray; an op with at least one Tensor operand
returns a new Tensor (the result stays where it was computed); `out=` names where the result goes (a Tensor
of this fabric, not a .T view, or a writable, aligned float32 C-contiguous ndarray filled in place) and is what
the op returns.

A fabric is safe to share between threads: each call holds the fabric's lock (the library wants one thread at
a time per fabric), and calls that wait (reads, large ops, sync) let other Python threads run meanwhile.
"""

import dataclasses
import numbers
import operator

from ._errors import InvalidArgumentError, ShapeError, WeftError
from ._native import load

_weft = load()

CONTRACTS = ("exact", "fp32", "tf32", "bf16")
OPS = _weft.op_names()
COST_CLASSES = ("matmul", "elementwise", "upload", "download")
COST_SOURCES = ("prior", "measured", "cached", "set")


def _contract_index(contract, fn):
    if isinstance(contract, str) and contract in CONTRACTS:
        return CONTRACTS.index(contract)
    if isinstance(contract, int) and not isinstance(contract, bool) and 0 <= contract < len(CONTRACTS):
        return contract
    if not isinstance(contract, (str, int)) or isinstance(contract, bool):
        raise TypeError(f"{fn}: contract must be a contract's name ({', '.join(CONTRACTS)}) or index, not {contract!r}")
    raise InvalidArgumentError(f"{fn}: unknown contract {contract!r}; weft knows {', '.join(CONTRACTS)}")


def _enum_index(value, names, what, fn):
    if isinstance(value, str) and value in names:
        return names.index(value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(names):
        return value
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        raise TypeError(f"{fn}: {what} must be a name ({', '.join(names)}) or index, not {value!r}")
    raise InvalidArgumentError(f"{fn}: unknown {what} {value!r}; weft knows {', '.join(names)}")


def _named(fn, call, *args):
    """call(*args), an error of weft's (or a TypeError) that leaves it naming the Python call `fn`, as the native
    methods' errors do; a native method's own name in front ("lane_index: ...") gives way to it."""
    try:
        return call(*args)
    except (WeftError, TypeError, OverflowError) as e:
        msg = str(e)
        if msg.startswith(fn + ":") or (not isinstance(e, WeftError) and type(e) not in (TypeError, OverflowError)):
            raise
        inner = getattr(call, "__name__", "").lstrip("_")
        if inner and msg.startswith(inner + ": "):
            msg = msg[len(inner) + 2:]
        named = type(e)(f"{fn}: {msg}")
        if type(e) is WeftError:
            named.status = e.status
        raise named.with_traceback(e.__traceback__) from None


@dataclasses.dataclass(frozen=True)
class Lane:
    """A lane of the fabric: its name ("cpu", "vulkan:0", "cuda:0.tensor"), kind, the device and driver as they
    call themselves, one line of details, the contracts it honours, the ops it offers, and whether it is down
    (failed) and may come back (revivable)."""
    name: str
    kind: str
    device: str
    driver: str
    details: str
    contracts: tuple
    ops: tuple
    failed: bool
    revivable: bool


@dataclasses.dataclass(frozen=True)
class AbsentLane:
    """A lane (or lane kind) weft looked for and could not open here, and why."""
    name: str
    reason: str


class Devices:
    """What weft.devices() and Fabric.devices() return: the lanes there are (`lanes`; iterating, len() and
    indexing by position or name go over these) kept apart from the lanes looked for and absent (`absent`,
    each with its reason). print() it for a table."""

    def __init__(self, lanes, absent):
        self.lanes = list(lanes)
        self.absent = list(absent)

    def __iter__(self):
        return iter(self.lanes)

    def __len__(self):
        return len(self.lanes)

    def __getitem__(self, key):
        if isinstance(key, str):
            for lane in self.lanes:
                if lane.name == key:
                    return lane
            why = next((a.reason for a in self.absent if a.name == key), None)
            raise KeyError(f"{key}: absent ({why})" if why else f"{key}: no such lane here")
        return self.lanes[key]

    def __contains__(self, name):
        return any(lane.name == name for lane in self.lanes)

    @property
    def names(self):
        """The names of the lanes there are."""
        return [lane.name for lane in self.lanes]

    def __repr__(self):
        return f"Devices(lanes={self.names}, absent={[a.name for a in self.absent]})"

    def __str__(self):
        rows = ["lanes:"]
        for lane in self.lanes:
            rows.append(f"  {lane.name:<14} {lane.device}; contracts {', '.join(lane.contracts)}"
                        f"{'; DOWN' if lane.failed else ''}")
            if lane.details:
                rows.append(f"  {'':<14} {lane.details}")
        rows.append("absent:" if self.absent else "absent: none")
        for a in self.absent:
            rows.append(f"  {a.name:<14} {a.reason}")
        return "\n".join(rows)


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
        """The explanation as plain dicts and lists (for JSON)."""
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


def _explanation(raw):
    op, contract, work, chosen_index, rows = raw
    lanes = [RouteCost(name, bool(eligible), why_not, wait, transfer, alpha, compute, total)
             for (name, eligible, why_not, wait, transfer, alpha, compute, total) in rows]
    chosen = lanes[chosen_index].lane if 0 <= chosen_index < len(lanes) else None
    return RouteExplanation(op, CONTRACTS[contract] if 0 <= contract < len(CONTRACTS) else str(contract), work,
                            chosen, chosen_index, lanes)


class _Scope:
    __slots__ = ("_fabric",)

    def __init__(self, fabric):
        self._fabric = fabric

    def __enter__(self):
        _named("scope", self._fabric._scope_begin)
        return self._fabric

    def __exit__(self, exc_type, exc, tb):
        try:
            _named("scope", self._fabric._scope_end)
        except WeftError:
            if exc_type is None:
                raise  # otherwise the error that left the block is the one to see
        return False


class Fabric(_weft.Fabric):
    """A weft fabric: the lanes of this machine, a router over them and the tensors that live on them.

    Fabric(lanes=None, cpu_threads=0, calibration="auto", on_note=None, vulkan_max_binding=0,
           scratch_bytes=64 << 20, plugins=None, remote=None, browser=None)

    lanes: None (every lane found), or lane kinds/names as "cpu,vulkan" or a list ["cpu", "vulkan:0"].
    cpu_threads: threads the CPU lane may use; 0 = one per core this process may run on.
    calibration: "auto" (read the on-disk cache, measure missing lanes when routing first has to choose),
        "force" (measure every lane now and rewrite the cache) or "off" (built-in priors; never touches disk).
    on_note: a callable taking one str: calibration progress and notes (default: the notes that begin
        "weft: " go to stderr, such as the one line saying that lanes are being measured and where the
        results are kept).
    scratch_bytes: how much memory the scratch tensors for small array operands may keep between calls.
    plugins, remote, browser: plugin lanes to load, `weft worker`s to join, where browser tabs attach.
    Use as a context manager, or call close(); tensors of a closed fabric are closed with it.

    The ops (matmul, add, relu, relu_backward, scale, axpy, sum_rows, softmax_xent), tensor(), zeros() and
    from_dlpack() are the native type's; see their own help.
    """

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        if self.closed:
            return "<weft.Fabric closed>"
        return f"<weft.Fabric lanes={self.lanes}>"

    def scope(self):
        """`with fabric.scope():` batches the lanes' dispatches into one submission and one synchronisation
        until the block ends. Reading a tensor inside flushes it, so results are always right."""
        return _Scope(self)

    def devices(self):
        """The lanes of the fabric and, apart from them, the lanes looked for and absent: a Devices."""
        lanes = []
        for (name, kind, device, driver, details, cmask, failed, revivable, omask) in _named("devices", self._lane_infos):
            lanes.append(Lane(name, kind, device, driver, details,
                              tuple(c for i, c in enumerate(CONTRACTS) if cmask & (1 << i)),
                              tuple(o for i, o in enumerate(OPS) if omask & (1 << i)), bool(failed), bool(revivable)))
        return Devices(lanes, [AbsentLane(n, r) for (n, r) in _named("devices", self._absent)])

    def route_explain(self, op, *shapes, contract="exact", trans_a=False, trans_b=False, batch=None, m=None,
                      n=None, k=None, rows=None, cols=None):
        """Where an op of this shape would run (inputs on the host), and why: a RouteExplanation.

        Shapes are those of the operands (tuples, ndarrays or Tensors): route_explain("matmul", (m, k), (k, n))
        or with a batch ((b, m, k), (k, n)); route_explain("add", (rows, cols)). Keywords give the numbers
        directly instead: m, n, k and batch for matmul; rows and cols for the other ops."""
        def _whole(name, v):
            if isinstance(v, bool) or not isinstance(v, numbers.Integral):
                raise TypeError(f"route_explain: {name} must be a whole number, not {v!r}")
            return operator.index(v)

        opname = OPS[_enum_index(op, OPS, "op", "route_explain")]
        ci = _contract_index(contract, "route_explain")
        # whole numbers only: int() would make (2.7, 3) the shape (2, 3) without a word
        try:
            dims = [tuple(operator.index(v) for v in (s.shape if hasattr(s, "shape") else s)) for s in shapes]
        except TypeError:
            raise TypeError(f"route_explain: shapes are tuples of ints (or arrays, Tensors); got {shapes!r}") from None
        for s in dims:
            if any(v < 1 for v in s[-2:]) or any(v < 0 for v in s):
                raise ShapeError(f"route_explain: shape {s}: dimensions must be >= 1 (batch dimensions >= 0)")
        qb, qm, qn, qk, qr, qc = 0, 0, 0, 0, 0, 0
        if opname == "matmul":
            if dims:
                if len(dims) != 2 or not 2 <= len(dims[0]) <= 4 or not 2 <= len(dims[1]) <= 4:
                    raise ShapeError("route_explain: matmul takes the shapes of a and b, each of rank 2 to 4")
                sa, sb = dims
                qb = 1
                for v in sa[:-2]:
                    qb *= v
                qm, qk = (sa[-1], sa[-2]) if trans_a else (sa[-2], sa[-1])
                qn = sb[-2] if trans_b else sb[-1]
                kb = sb[-1] if trans_b else sb[-2]
                if kb != qk:
                    raise ShapeError(f"route_explain: the inner dimensions differ: a {sa} and b {sb} (k {qk} and {kb})")
            qb = _whole("batch", batch) if batch is not None else (qb or 1)
            qm, qn, qk = (_whole("m", m) if m is not None else qm), (_whole("n", n) if n is not None else qn), \
                (_whole("k", k) if k is not None else qk)
        else:
            if dims:
                s = dims[0]
                if not 1 <= len(s) <= 4:
                    raise ShapeError(f"route_explain: {opname} needs an operand of rank 1 to 4")
                qr = 1
                for v in s[:-1]:
                    qr *= v
                qc = s[-1]
            qr, qc = (_whole("rows", rows) if rows is not None else qr), (_whole("cols", cols) if cols is not None else qc)
        if opname == "matmul" and (qb < 0 or min(qm, qn, qk) < 1):
            raise ShapeError(f"route_explain: matmul needs batch >= 0 and m, n, k >= 1; got batch {qb}, m {qm}, "
                             f"n {qn}, k {qk}")
        if opname != "matmul" and min(qr, qc) < 1:
            raise ShapeError(f"route_explain: {opname} needs rows and cols >= 1; got rows {qr}, cols {qc}")
        return _explanation(_named("route_explain", self._route_explain, opname, ci, qb, qm, qn, qk, qr, qc))

    def route_last(self):
        """The router's reasoning for the last op it routed: a RouteExplanation. Not every op is routed: those
        pinned with lane= are not, nor, on a fabric of several lanes, a matmul on host data that runs where weft
        measured that shape fastest or is shared out across lanes (last_lane says where the last op ran).
        StateError before any op was routed."""
        return _explanation(_named("route_last", self._route_last))

    def cost_model(self, lane, cls="matmul", contract="exact"):
        """A lane's cost line for an op class ("matmul", "elementwise", "upload", "download"): a CostLine.
        Matmul lines are kept per contract; the other classes ignore it."""
        ci = _enum_index(cls, COST_CLASSES, "cost class", "cost_model")
        k = _contract_index(contract, "cost_model")
        i = _named("cost_model", self.lane_index, lane)
        alpha, beta, refine, source, points = _named("cost_model", self._cost_model, i, ci, k)
        src = COST_SOURCES[source] if 0 <= source < len(COST_SOURCES) else str(source)
        return CostLine(self.lanes[i], COST_CLASSES[ci], CONTRACTS[k], alpha, beta, refine, src, points)

    def set_cost_model(self, lane, cls, alpha, beta, contract="exact"):
        """Replaces a cost line: alpha in seconds, beta in work per second (0 = free)."""
        ci = _enum_index(cls, COST_CLASSES, "cost class", "set_cost_model")
        for name, v in (("alpha", alpha), ("beta", beta)):
            if not isinstance(v, numbers.Real) or isinstance(v, bool):
                raise TypeError(f"set_cost_model: {name} must be a real number, not {type(v).__name__}")
        _named("set_cost_model", self._set_cost_model, _named("set_cost_model", self.lane_index, lane), ci,
               _contract_index(contract, "set_cost_model"), float(alpha), float(beta))

    def gpt(self, **kwargs):
        """A GPT-2 model on this fabric: weft.GPT(fabric=self, ...)."""
        from ._gpt import GPT

        return GPT(fabric=self, **kwargs)


def cost_cache_path():
    """The calibration cache file weft reads and writes."""
    return _weft.cost_cache_path()
