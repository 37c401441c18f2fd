"""The matmul-routing and GPT examples run and do what they say (the MLP example: test_example.py)."""

import os


def _load(name):
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", name)
    spec = importlib.util.spec_from_file_location(name[:-3], path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_matmul_routing_example(capsys):
    ran = _load("matmul_routing.py").main(["--sizes", "4,128", "--calibration", "off"])
    out = capsys.readouterr().out
    assert [n for n, _ in ran] == [4, 128] and "ran on" in out and "resident chain" in out


def test_gpt_example_learns_and_generates(capsys):
    r = _load("gpt_generate.py").main(["--steps", "30", "--lanes", "cpu", "--tokens", "16"])
    out = capsys.readouterr().out
    assert r["losses"][-1] < r["losses"][0] * 0.7 and len(r["greedy"]) == 16 and "greedy:" in out
