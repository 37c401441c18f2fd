"""weft_ctypes.py - libweft through ctypes for torch_tx.py, which times the transformer ops of the C library
itself (the Python package, python/weft, is a compiled extension and has no ctypes binding). Finding and
binding libweft: the C structures of include/weft.h as ctypes types, and every function with
its argument and result types set once, so that a call costs one ctypes dispatch and nothing more.

The library is looked for, in order: the file named by the WEFT_LIBRARY environment variable (and nowhere
else when it is set); the build tree of this checkout (<repo>/build/libweft.so); the system's search path (ctypes.util.find_library, then
the soname). The ImportError raised when none loads lists every attempt and why it failed.
"""

import ctypes
import ctypes.util
import os
import sys

# Numbers fixed by include/weft.h ("codes only grow at the end"; "numbers are stable").
STATUS_NAMES = (
    "ok", "invalid argument", "shape", "overflow", "wrong fabric", "out of memory", "unsupported",
    "lane failed", "not found", "state", "io", "internal",
)
CONTRACTS = ("exact", "fp32", "tf32", "bf16")
OPS = ("matmul", "add", "relu", "relu_backward", "scale", "axpy", "sum_rows", "softmax_xent")
COST_CLASSES = ("matmul", "elementwise", "upload", "download")
COST_SOURCES = ("prior", "measured", "cached", "set")
CALIBRATION = {"auto": 0, "force": 1, "off": 2}
LANE_AUTO = -1
MAX_DIMS = 4

# Structures the library fills or reads get trailing room: should a later weft.h add a field at the end of
# a descriptor, the library reads zeros (the usual default) and writes into padding, never past our object.
_PAD = ("_reserved", ctypes.c_char * 128)

NOTE_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p)


class FabricDesc(ctypes.Structure):
    _fields_ = [
        ("lanes", ctypes.c_char_p),
        ("cpu_threads", ctypes.c_int),
        ("vulkan_max_binding", ctypes.c_uint64),
        ("calibration", ctypes.c_int),
        ("on_note", NOTE_FN),
        ("note_ctx", ctypes.c_void_p),
        ("plugins", ctypes.c_char_p),
        ("remote", ctypes.c_char_p),
        ("browser", ctypes.c_char_p),
        _PAD,
    ]


class LaneInfo(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("kind", ctypes.c_char_p),
        ("device", ctypes.c_char_p),
        ("driver", ctypes.c_char_p),
        ("details", ctypes.c_char_p),
        ("contracts", ctypes.c_uint32),
        ("failed", ctypes.c_int),
        ("revivable", ctypes.c_int),
        ("ops", ctypes.c_uint64),  # bit per weft_op_kind: the ops the lane offers
        _PAD,
    ]


class OpDesc(ctypes.Structure):
    _fields_ = [("contract", ctypes.c_int), ("lane", ctypes.c_int), _PAD]


class CostLine(ctypes.Structure):
    _fields_ = [
        ("alpha", ctypes.c_double),
        ("beta", ctypes.c_double),
        ("refine", ctypes.c_double),
        ("source", ctypes.c_int),
        ("points", ctypes.c_int),
        _PAD,
    ]


class RouteQuery(ctypes.Structure):
    _fields_ = [
        ("op", ctypes.c_int),
        ("contract", ctypes.c_int),
        ("batch", ctypes.c_int64),
        ("m", ctypes.c_int64),
        ("n", ctypes.c_int64),
        ("k", ctypes.c_int64),
        ("rows", ctypes.c_int64),
        ("cols", ctypes.c_int64),
        _PAD,
    ]


# An array the library owns and we index: no padding here, its stride must be the C one.
class RouteCost(ctypes.Structure):
    _fields_ = [
        ("lane", ctypes.c_char_p),
        ("eligible", ctypes.c_int),
        ("why_not", ctypes.c_char_p),
        ("wait", ctypes.c_double),
        ("transfer", ctypes.c_double),
        ("alpha", ctypes.c_double),
        ("compute", ctypes.c_double),
        ("total", ctypes.c_double),
    ]


class RouteExplanation(ctypes.Structure):
    _fields_ = [
        ("op", ctypes.c_int),
        ("contract", ctypes.c_int),
        ("work", ctypes.c_double),
        ("chosen", ctypes.c_int),
        ("nlanes", ctypes.c_size_t),
        ("lanes", ctypes.POINTER(RouteCost)),
        _PAD,
    ]


_P = ctypes.c_void_p  # opaque handles travel as plain integers
_S = ctypes.c_int  # weft_status
_PF = ctypes.POINTER(ctypes.c_float)
_I = ctypes.c_int
_Z = ctypes.c_size_t

# name: (restype, argtypes)
_PROTOTYPES = {
    "weft_version": (ctypes.c_char_p, []),
    "weft_version_number": (_I, []),
    "weft_status_str": (ctypes.c_char_p, [_I]),
    "weft_fabric_open": (_S, [ctypes.POINTER(FabricDesc), ctypes.POINTER(_P)]),
    "weft_fabric_close": (None, [_P]),
    "weft_fabric_last_error": (ctypes.c_char_p, [_P]),
    "weft_open_error": (ctypes.c_char_p, []),
    "weft_fabric_lane_count": (_Z, [_P]),
    "weft_fabric_lane_info": (_S, [_P, _Z, ctypes.POINTER(LaneInfo)]),
    "weft_fabric_lane_find": (_S, [_P, ctypes.c_char_p, ctypes.POINTER(_Z)]),
    "weft_fabric_absent_count": (_Z, [_P]),
    "weft_fabric_absent_info": (_S, [_P, _Z, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_char_p)]),
    "weft_tensor_create": (_S, [_P, _I, ctypes.POINTER(ctypes.c_int64), _PF, ctypes.POINTER(_P)]),
    "weft_tensor_destroy": (None, [_P]),
    "weft_tensor_write": (_S, [_P, _PF, _Z]),
    "weft_tensor_read": (_S, [_P, _PF, _Z]),
    "weft_tensor_numel": (_Z, [_P]),
    "weft_tensor_location": (ctypes.c_char_p, [_P]),
    "weft_op_matmul": (_S, [_P, ctypes.POINTER(OpDesc), _P, _I, _P, _I, _P]),
    "weft_op_add": (_S, [_P, ctypes.POINTER(OpDesc), _P, _P, _P]),
    "weft_op_relu": (_S, [_P, ctypes.POINTER(OpDesc), _P, _P]),
    "weft_op_relu_backward": (_S, [_P, ctypes.POINTER(OpDesc), _P, _P, _P]),
    "weft_op_scale": (_S, [_P, ctypes.POINTER(OpDesc), ctypes.c_float, _P, _P]),
    "weft_op_axpy": (_S, [_P, ctypes.POINTER(OpDesc), ctypes.c_float, _P, _P]),
    "weft_op_sum_rows": (_S, [_P, ctypes.POINTER(OpDesc), _P, _P]),
    "weft_op_softmax_xent": (_S, [_P, ctypes.POINTER(OpDesc), _P, _P, _P, _P]),
    "weft_fabric_last_lane": (_I, [_P]),
    "weft_scope_begin": (_S, [_P]),
    "weft_scope_end": (_S, [_P]),
    "weft_fabric_sync": (_S, [_P]),
    "weft_fabric_revive": (_S, [_P, ctypes.POINTER(_Z)]),
    "weft_fabric_cost_model": (_S, [_P, _Z, _I, _I, ctypes.POINTER(CostLine)]),
    "weft_fabric_set_cost_model": (_S, [_P, _Z, _I, _I, ctypes.c_double, ctypes.c_double]),
    "weft_fabric_calibrate": (_S, [_P]),
    "weft_cost_cache_path": (_S, [ctypes.c_char_p, _Z]),
    "weft_route_explain": (_S, [_P, ctypes.POINTER(RouteQuery), ctypes.POINTER(RouteExplanation)]),
    "weft_route_last": (_S, [_P, ctypes.POINTER(RouteExplanation)]),
    "weft_expf": (ctypes.c_float, [ctypes.c_float]),
    "weft_logf": (ctypes.c_float, [ctypes.c_float]),
}


def _library_file_name():
    if sys.platform == "darwin":
        return "libweft.dylib"
    if sys.platform == "win32":
        return "weft.dll"
    return "libweft.so"


def _candidates():
    """(how it was found, what to pass to CDLL) in the order they are tried."""
    env = os.environ.get("WEFT_LIBRARY")
    if env:
        return [("WEFT_LIBRARY", env)]
    here = os.path.dirname(os.path.abspath(__file__))
    out = [("build tree", os.path.join(here, "..", "..", "build", _library_file_name()))]
    found = ctypes.util.find_library("weft")
    if found:
        out.append(("ctypes.util.find_library('weft')", found))
    if sys.platform.startswith("linux"):
        out.append(("system search path", "libweft.so.0"))
    return out


def _load():
    tried = []
    for how, path in _candidates():
        if os.path.sep in path and not os.path.exists(path):
            tried.append(f"  {how}: {os.path.normpath(path)}: no such file")
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"  {how}: {path}: {e}")
            continue
        missing = [name for name in _PROTOTYPES if not hasattr(lib, name)]
        if missing:
            tried.append(f"  {how}: {path}: not a weft library this package can use (missing {', '.join(missing[:3])})")
            continue
        return lib, path
    raise ImportError(
        "weft: could not load the weft shared library. Tried:\n" + "\n".join(tried) +
        "\nBuild it (cmake -S . -B build && cmake --build build) or point WEFT_LIBRARY at libweft.so."
    )


lib, path = _load()
for _name, (_res, _args) in _PROTOTYPES.items():
    _fn = getattr(lib, _name)
    _fn.restype = _res
    _fn.argtypes = _args

version = lib.weft_version().decode()
version_number = lib.weft_version_number()


def status_name(status):
    s = lib.weft_status_str(status)
    return s.decode() if s else "unknown status"


def text(p):
    """A C string from the library as str ('' for NULL)."""
    return p.decode("utf-8", "replace") if p else ""
