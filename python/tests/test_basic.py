"""Loading the library, the package's surface, the default fabric."""

import os
import subprocess
import sys

import numpy as np

import weft

PACKAGE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def _import_with(env_changes):
    env = dict(os.environ, PYTHONPATH=PACKAGE_DIR, **env_changes)
    return subprocess.run([sys.executable, "-c", "import weft; print(weft.library_path)"], env=env,
                          capture_output=True, text=True)


def test_missing_library_says_what_was_tried():
    r = _import_with({"WEFT_LIBRARY": "/nonexistent/libweft.so"})
    assert r.returncode != 0
    assert "ImportError" in r.stderr and "WEFT_LIBRARY: /nonexistent/libweft.so: no such file" in r.stderr
    assert "Build it" in r.stderr


def test_a_file_that_is_not_weft_is_refused():
    libc = "libc.so.6" if sys.platform.startswith("linux") else None
    if libc:
        r = _import_with({"WEFT_LIBRARY": libc})
        assert r.returncode != 0 and "not a weft library" in r.stderr


def test_weft_library_is_what_loads():
    r = _import_with({"WEFT_LIBRARY": weft.library_path})
    assert r.returncode == 0 and r.stdout.strip() == weft.library_path


def test_surface():
    for name in weft.__all__:
        assert hasattr(weft, name), name
    assert weft.CONTRACTS == ("exact", "fp32", "tf32", "bf16")
    assert set(weft.OPS) == {"matmul", "add", "relu", "relu_backward", "scale", "axpy", "sum_rows", "softmax_xent"}
    assert issubclass(weft.ShapeError, weft.WeftError) and issubclass(weft.ShapeError, ValueError)


def test_as_float32_rule():
    a = np.ones((2, 2), np.float32)
    assert weft.as_float32(a) is a  # no copy for float32 C-contiguous
    assert weft.as_float32(np.ones((2, 2))).dtype == np.float32
    assert weft.as_float32(np.ones((2, 2), ">f4")).dtype.isnative
    assert weft.as_float32(a.T).flags.c_contiguous
    assert weft.as_float32(np.array(2**24 + 1)).item() == 2**24  # integers beyond 2^24 round


def test_set_default_fabric():
    mine = weft.Fabric(lanes="cpu", calibration="off")
    try:
        weft.set_default_fabric(mine)
        assert weft.default_fabric() is mine
        weft.relu(np.ones(3, np.float32))
        assert mine.last_lane == "cpu"
    finally:
        weft.set_default_fabric(None)
    assert not mine.closed  # a fabric the caller opened is the caller's to close
    assert weft.default_fabric() is not mine
    mine.close()


def test_command_line(capsys):
    from weft.__main__ import main

    assert main(["devices"]) == 0
    out = capsys.readouterr().out
    assert "cpu" in out and "contracts" in out
    assert main(["bench", "--sizes", "8,16", "--repeats", "1", "--numpy"]) == 0
    out = capsys.readouterr().out
    assert "numpy" in out and "DIFFERS" not in out
