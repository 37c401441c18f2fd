"""Lanes, route_explain / route_last as structured results, the cost model, calibration and bench."""

import math

import numpy as np
import pytest

import weft

f32 = np.float32


def test_devices_keeps_absent_lanes_apart():
    d = weft.devices()
    assert isinstance(d, weft.Devices) and len(d) == len(d.lanes) and list(d) == d.lanes
    assert any(lane.kind == "cpu" for lane in d)
    for lane in d:
        assert isinstance(lane, weft.Lane) and lane.name and lane.contracts
        assert set(lane.contracts) <= set(weft.CONTRACTS) and set(lane.ops) <= set(weft.OPS)
    for a in d.absent:
        assert isinstance(a, weft.AbsentLane) and a.reason and a.name not in d
    assert d["cpu"].kind == "cpu" and "cpu" in d.names
    cpu_only = weft.devices(lanes="cpu")
    assert cpu_only.names == ["cpu"]
    assert cpu_only.absent and all(a.reason for a in cpu_only.absent)
    text = str(cpu_only)
    assert text.startswith("lanes:") and "absent:" in text and text.index("absent:") > text.index("cpu")
    if cpu_only.absent:
        with pytest.raises(KeyError, match="absent"):
            cpu_only[cpu_only.absent[0].name]


def test_fabric_lanes_and_version(fabric):
    assert "cpu" in fabric.lanes and fabric.lane_index("cpu") == fabric.lanes.index("cpu")
    # nothing is down: every lane is up, asked or not
    assert fabric.revive() == len(fabric.lanes)
    assert weft.library_version.count(".") == 2 and weft.library_path


def _check_explanation(f, e, op):
    assert isinstance(e, weft.RouteExplanation) and e.op == op and e.contract == "exact"
    assert [c.lane for c in e.lanes] == f.lanes  # one entry per lane, in index order
    assert e.chosen in [c.lane for c in e.lanes] and e.lanes[e.chosen_index].lane == e.chosen
    eligible = [c for c in e.lanes if c.eligible]
    assert eligible and e.lanes[e.chosen_index].eligible
    for c in eligible:
        assert math.isclose(c.total, c.wait + c.transfer + c.alpha + c.compute, rel_tol=1e-9, abs_tol=1e-15)
        assert c.total >= e.lanes[e.chosen_index].total  # the chosen lane finishes first
    for c in e.lanes:
        if not c.eligible:
            assert c.why_not
    assert e.as_dict()["chosen"] == e.chosen and e.chosen in str(e)


def test_route_explain_matmul_structure(fabric):
    e = fabric.route_explain("matmul", (64, 128), (128, 32))
    _check_explanation(fabric, e, "matmul")
    assert e.work == 2.0 * 64 * 128 * 32
    same = fabric.route_explain("matmul", m=64, k=128, n=32)
    assert same.work == e.work and same.chosen == e.chosen
    batched = fabric.route_explain("matmul", np.zeros((3, 64, 128), f32), (128, 32))
    assert batched.work == 3 * e.work
    transposed = fabric.route_explain("matmul", (128, 64), (32, 128), trans_a=True, trans_b=True)
    assert transposed.work == e.work


def test_route_explain_elementwise(fabric):
    e = fabric.route_explain("add", (10, 20))
    _check_explanation(fabric, e, "add")
    assert e.work == 200
    assert fabric.route_explain("relu", rows=10, cols=20).work == 200


def test_route_explain_errors(fabric):
    with pytest.raises(weft.InvalidArgumentError, match="unknown op"):
        fabric.route_explain("conv", (2, 2))
    with pytest.raises(weft.ShapeError):
        fabric.route_explain("matmul", (2, 2))
    with pytest.raises(weft.ShapeError, match="m, n, k >= 1"):
        fabric.route_explain("matmul", m=0, n=1, k=1)
    e = fabric.route_explain("matmul", (4, 4), (4, 4), contract="tf32")
    tf32 = [lane.name for lane in fabric.devices() if "tf32" in lane.contracts]
    assert [c.lane for c in e.lanes if c.eligible] == tf32
    if not tf32:
        assert e.chosen is None and e.chosen_index == -1
    cpu = e.lanes[fabric.lane_index("cpu")]
    assert not cpu.eligible and "contract" in cpu.why_not


def test_route_last():
    with weft.Fabric(calibration="off") as f:
        with pytest.raises(weft.StateError, match="no op has been routed"):
            f.route_last()
        f.relu(np.ones((3, 7), f32))
        e = f.route_last()
        _check_explanation(f, e, "relu")
        assert e.work == 21 and e.chosen == f.last_lane
        f.matmul(np.ones((2, 5), f32), np.ones((5, 3), f32), lane="cpu")  # pinned: not routed
        assert f.route_last().op == "relu"


def test_cost_model_and_set_cost_model():
    with weft.Fabric(calibration="off") as f:
        line = f.cost_model("cpu", "matmul", "exact")
        assert isinstance(line, weft.CostLine) and line.source == "prior" and line.alpha >= 0 and line.beta > 0
        f.set_cost_model("cpu", "matmul", alpha=1e-3, beta=1e9, contract="exact")
        line = f.cost_model("cpu", "matmul", "exact")
        assert (line.alpha, line.beta, line.source) == (1e-3, 1e9, "set")
        e = f.route_explain("matmul", (100, 100), (100, 100))
        cpu = e.lanes[f.lane_index("cpu")]
        assert math.isclose(cpu.alpha, 1e-3) and math.isclose(cpu.compute, 2e6 / 1e9)
        with pytest.raises(weft.InvalidArgumentError, match="finite and >= 0"):
            f.set_cost_model("cpu", "upload", -1, 1)
        with pytest.raises(weft.InvalidArgumentError, match="unknown cost class"):
            f.cost_model("cpu", "conv")
        assert f.cost_model(0, "upload").lane == f.lanes[0]


def test_calibrate_measures_without_writing_when_off(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    notes = []
    with weft.Fabric(lanes="cpu", calibration="off", on_note=notes.append) as f:
        f.calibrate()
        line = f.cost_model("cpu", "matmul", "exact")
        assert line.source == "measured" and line.beta > 0 and line.points > 0
    assert notes and all(isinstance(n, str) for n in notes)
    assert weft.cost_cache_path().startswith(str(tmp_path))
    assert not any(tmp_path.rglob("*.json"))  # calibration off never writes the cache


def test_bench_rows():
    rows = weft.bench(sizes=(8, 24), repeats=2, max_seconds=0.5, numpy=True)
    lanes = {r["lane"] for r in rows}
    assert "numpy" in lanes and any(r["lane"] == "cpu" for r in rows)
    for r in rows:
        assert r["n"] in (8, 24) and r["runs"] >= 1 and r["median_s"] > 0 and r["gflops"] > 0
        assert r["check"] in ("reference", "agrees", "alone")
    table = weft.bench_table(rows)
    assert "numpy" in table and "cpu" in table and "DIFFERS" not in table
    fp32 = weft.bench(sizes=(16,), contract="fp32", repeats=1, lanes="cpu")
    assert fp32[0]["contract"] == "fp32" and fp32[0]["check"] == "alone"
