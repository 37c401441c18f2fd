"""Builds weft._weft, the package's compiled part, for `pip install ./python` (pyproject.toml holds the rest).

The module links libweft. Which one, in order: the file named by WEFT_LIBRARY (libweft.so, with its headers
in WEFT_INCLUDE or this checkout's include/); the CMake build of this checkout (build/libweft.so); an
installed weft found by pkg-config (`cmake --install` writes weft.pc). The module records the library's
folder as its run path, so it needs no LD_LIBRARY_PATH. It also compiles src/gpt/gpt.c of this checkout
(GPT-2 on weft's public API, through csrc/gpt_model.c), as the CMake build does.
"""

import os
import shlex
import subprocess

import numpy
from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def _pkg_config(*args):
    try:
        return subprocess.run(["pkg-config", *args, "weft"], check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None


def find_weft():
    """(include dirs, library dir, how it was found)."""
    tried = []
    env = os.environ.get("WEFT_LIBRARY")
    if env:
        if not os.path.exists(env):
            raise SystemExit(f"weft: WEFT_LIBRARY={env}: no such file")
        inc = os.environ.get("WEFT_INCLUDE", os.path.join(REPO, "include"))
        return [inc], os.path.dirname(os.path.abspath(env)), f"WEFT_LIBRARY ({env})"
    tried.append("WEFT_LIBRARY: not set")
    build = os.path.join(REPO, "build")
    if os.path.exists(os.path.join(build, "libweft.so")):
        return [os.path.join(REPO, "include")], build, f"this checkout's build ({build})"
    tried.append(f"{build}/libweft.so: no such file")
    cflags, libs = _pkg_config("--cflags"), _pkg_config("--libs-only-L")
    if libs is not None:
        incs = [f[2:] for f in shlex.split(cflags or "") if f.startswith("-I")]
        dirs = [f[2:] for f in shlex.split(libs) if f.startswith("-L")]
        return incs, (dirs[0] if dirs else "/usr/lib"), "pkg-config weft"
    tried.append("pkg-config weft: not found")
    raise SystemExit("weft: no weft library to build the Python module against. Tried:\n  " + "\n  ".join(tried) +
                     "\nBuild it first (cmake -S . -B build && cmake --build build), or set WEFT_LIBRARY.")


incs, libdir, how = find_weft()
gpt_c = os.path.join(REPO, "src", "gpt", "gpt.c")
if not os.path.exists(gpt_c):
    raise SystemExit(f"weft: {gpt_c} is missing: install from a weft checkout (pip install ./python)")
print(f"weft: building weft._weft against the library from {how}")
csrc = os.path.join(HERE, "csrc")
sources = sorted(os.path.join("csrc", n) for n in os.listdir(csrc) if n.endswith(".c"))

setup(
    ext_modules=[Extension(
        "weft._weft",
        sources=sources,
        include_dirs=incs + [os.path.join(REPO, "src"), numpy.get_include()],
        library_dirs=[libdir],
        runtime_library_dirs=[libdir],
        libraries=["weft"],
        extra_compile_args=["-std=gnu11", "-ffp-contract=off", "-fvisibility=hidden", "-Wall", "-Wextra"],
        depends=[os.path.join("csrc", "weftmodule.h")],
    )],
)
