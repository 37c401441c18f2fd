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


def test_missing_extension_says_what_was_tried():
    r = _import_with({"WEFT_PYTHON_EXT": "/nonexistent/_weft.so"})
    assert r.returncode != 0
    assert "ImportError" in r.stderr and "WEFT_PYTHON_EXT: /nonexistent/_weft.so: no such file" in r.stderr
    assert "Build it" in r.stderr


def test_the_extension_runs_on_the_weft_library():
    assert os.path.basename(weft.library_path).startswith("libweft")
    assert weft.library_version == "0.1.0"
    assert type(weft.Tensor).__name__ == "type" and weft.Tensor.__module__ == "weft"
    assert "ctypes" not in sys.modules or not any(
        getattr(m, "__name__", "").startswith("weft.") and "ctypes" in vars(m) for m in list(sys.modules.values()))


def test_surface():
    for name in weft.__all__:
        assert hasattr(weft, name), name
    assert weft.CONTRACTS == ("exact", "fp32", "tf32", "bf16")
    assert weft.OPS[:8] == ("matmul", "add", "relu", "relu_backward", "scale", "axpy", "sum_rows", "softmax_xent")
    assert "attention" in weft.OPS
    assert issubclass(weft.ShapeError, weft.WeftError) and issubclass(weft.ShapeError, ValueError)


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
