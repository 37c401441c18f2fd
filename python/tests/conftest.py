"""Shared fixtures: one fabric over every lane (calibration off, so nothing is measured or written), and the
lanes of it that honour the exact contract, each test op run pinned to every one of them and routed."""

import atexit
import os
import shutil
import sys
import tempfile

import pytest

# The default fabric calibrates (calibration "auto") and writes weft's cache: never into the user's home.
_cache = tempfile.mkdtemp(prefix="weft-pytest-cache-")
os.environ["XDG_CACHE_HOME"] = _cache
atexit.register(shutil.rmtree, _cache, True)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # python/: the package

import weft  # noqa: E402


@pytest.fixture(scope="session")
def fabric():
    f = weft.Fabric(calibration="off")
    yield f
    f.close()


def _exact_lanes():
    with weft.Fabric(calibration="off") as f:
        return [lane.name for lane in f.devices() if "exact" in lane.contracts]


EXACT_LANES = _exact_lanes()


def pytest_report_header(config):
    return [f"weft library {weft.library_version} at {weft.library_path}", f"exact lanes: {', '.join(EXACT_LANES)}"]


@pytest.fixture(params=[None] + EXACT_LANES, ids=lambda lane: f"lane={lane or 'auto'}")
def lane(request):
    """None (the router chooses) and then every lane that honours exact. Such a lane claims every op under the
    exact contract: a test pinned to it fails (never skips) when it raises UnsupportedError."""
    return request.param
