"""The digits example trains to the accuracy it promises, and under the exact contract every lane trains the
very same network, bit for bit."""

import importlib.util
import os

import numpy as np
import pytest

import reference as ref
from conftest import EXACT_LANES

pytest.importorskip("sklearn", reason="the digits data ship with scikit-learn (python3-sklearn)")

_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "train_digits.py")


def _example():
    spec = importlib.util.spec_from_file_location("train_digits", _PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_train_digits_reaches_95_percent(capsys):
    result = _example().main(["--calibration", "off", "--epochs", "30"])
    out = capsys.readouterr().out
    assert "test accuracy" in out and "epoch  30" in out
    assert result["test_accuracy"] >= 0.95
    assert result["epoch_losses"][-1] < result["epoch_losses"][0] / 5


@pytest.mark.skipif(len(EXACT_LANES) < 2, reason="needs two lanes that honour exact")
def test_every_exact_lane_trains_the_same_bits(capsys):
    mod = _example()
    runs = {lane: mod.main(["--calibration", "off", "--epochs", "2", "--lanes", lane]) for lane in EXACT_LANES}
    capsys.readouterr()
    first = runs[EXACT_LANES[0]]
    for lane, r in runs.items():
        assert r["epoch_losses"] == first["epoch_losses"], lane
        assert all(ref.same_bits(w, v) for w, v in zip(r["weights"], first["weights"])), lane

