"""Finding weft._weft, the compiled part of the package (python/csrc, the CPython C API over weft.h).

`pip install ./python` and `cmake --install` put it inside the package, where a plain import finds it. A
source checkout running from python/ finds the one the CMake build made: the file named by the environment
variable WEFT_PYTHON_EXT (CTest sets it), else <repo>/build/python/weft/_weft*.so. The ImportError raised when
none loads lists every place tried and why.
"""

import glob
import importlib.machinery
import importlib.util
import os
import sys


def _candidates():
    env = os.environ.get("WEFT_PYTHON_EXT")
    if env:
        if os.path.isdir(env):
            return [("WEFT_PYTHON_EXT", p) for p in _ext_files(env)] or [("WEFT_PYTHON_EXT", os.path.join(env, "_weft.*"))]
        return [("WEFT_PYTHON_EXT", env)]
    here = os.path.dirname(os.path.abspath(__file__))
    build = os.path.join(here, "..", "..", "build", "python", "weft")
    return [("build tree", p) for p in _ext_files(build)] or [("build tree", os.path.join(build, "_weft.*"))]


def _ext_files(folder):
    out = []
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        out.extend(sorted(glob.glob(os.path.join(folder, "_weft" + suffix))))
    return out


def load():
    try:
        from . import _weft  # installed with the package

        return _weft
    except ImportError as e:
        tried = [f"  inside the package: {e}"]
    for how, path in _candidates():
        if not os.path.exists(path):
            tried.append(f"  {how}: {os.path.normpath(path)}: no such file")
            continue
        try:
            spec = importlib.util.spec_from_file_location("weft._weft", path)
            mod = importlib.util.module_from_spec(spec)
            sys.modules["weft._weft"] = mod
            spec.loader.exec_module(mod)
            return mod
        except ImportError as e:
            sys.modules.pop("weft._weft", None)
            tried.append(f"  {how}: {path}: {e}")
    raise ImportError(
        "weft: the compiled module weft._weft was not found. Tried:\n" + "\n".join(tried) +
        "\nBuild it with the library (cmake -S . -B build && cmake --build build), or install the package "
        "(pip install --no-build-isolation ./python, after building the library)."
    )
