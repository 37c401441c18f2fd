"""weft.GPT: GPT-2 (src/gpt) on the fabric from numpy arrays: made from a seed or a parameter array, trained,
sampled, saved and loaded."""

import os

import numpy as np
import pytest

import weft

CFG = dict(L=2, C=64, NH=4, V=256, maxT=32)


def batch(seed, B=4, T=16):
    text = np.frombuffer(b"the fabric measures, and the numbers decide. " * 8, dtype=np.uint8).astype(np.int32)
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, len(text) - T - 1, B)
    return np.stack([text[s:s + T] for s in starts]), np.stack([text[s + 1:s + T + 1] for s in starts])


@pytest.fixture(scope="module")
def fab():
    with weft.Fabric(lanes="cpu", calibration="off") as f:
        yield f


def test_training_lowers_the_loss(fab):
    g = weft.GPT(fab, seed=1, **CFG)
    assert g.config == CFG and g.step == 0 and g.fabric is fab
    tok, tgt = batch(0)
    first = g.loss(tok, tgt)
    losses = [g.train_step(tok, tgt, lr=1e-3)[0] for _ in range(8)]
    assert g.step == 8 and abs(losses[0] - first) < 1e-5
    assert losses[-1] < first * 0.8
    logits = g.logits(tok)
    assert logits.shape == (4, 16, 256) and logits.dtype == np.float32
    assert g.logits(tok[0]).shape == (16, 256)


def test_generation_is_reproducible_and_the_parameters_round_trip(fab):
    g = weft.GPT(fab, seed=2, **CFG)
    prompt = np.array([116, 104, 101], np.int32)
    out = g.generate(prompt, 10)
    assert out.dtype == np.int32 and out.shape == (10,) and np.all((out >= 0) & (out < 256))
    assert np.array_equal(out, g.generate(prompt, 10))  # greedy: the same tokens
    sampled = g.generate(prompt, 10, temperature=1.0, top_k=20, seed=7)
    assert np.array_equal(sampled, g.generate(prompt, 10, temperature=1.0, top_k=20, seed=7))
    p = g.params()
    twin = weft.GPT(fab, params=p, **CFG)      # from an array: the same model, the same tokens
    assert np.array_equal(twin.params(), p) and np.array_equal(twin.generate(prompt, 10), out)
    with pytest.raises(weft.ShapeError, match="floats"):
        weft.GPT(fab, params=p[:-1], **CFG)
    with pytest.raises(TypeError, match="float64"):
        weft.GPT(fab, params=p.astype(np.float64), **CFG)


def test_checkpoint_save_and_load(fab, tmp_path):
    g = weft.GPT(fab, seed=3, **CFG)
    tok, tgt = batch(1)
    g.train_step(tok, tgt)
    path = os.fspath(tmp_path / "model.ckpt")
    g.save(path, 1234)
    h, rng = weft.GPT.load(path, fabric=fab)
    assert rng == 1234 and h.step == 1 and h.config == CFG and np.array_equal(h.params(), g.params())
    assert g.train_step(tok, tgt) == h.train_step(tok, tgt)  # AdamW's moments came back too
    with pytest.raises(weft.WeftError):
        weft.GPT.load(os.fspath(tmp_path / "missing.ckpt"), fabric=fab)
    with pytest.raises(weft.WeftError):
        weft.GPT.from_weights(os.fspath(tmp_path / "missing.safetensors"), fabric=fab)


def test_bad_input_is_an_error_not_a_crash(fab):
    g = weft.GPT(fab, seed=4, **CFG)
    with pytest.raises(weft.InvalidArgumentError):
        g.loss(np.array([[1, 2, 300]]), np.array([[1, 2, 3]]))  # a token beyond the vocabulary
    with pytest.raises(weft.ShapeError, match="one shape"):
        g.train_step(np.zeros((2, 4), np.int32), np.zeros((2, 5), np.int32))
    with pytest.raises(weft.InvalidArgumentError):
        weft.GPT(fab, L=2, C=65, NH=4, V=256, maxT=32)  # NH must divide C
    # A NaN or infinite hyperparameter is refused before any op, and the weights stay as they were (a NaN lr
    # once turned every weight into NaN; a NaN temperature, not "<= 0", sampled from NaN probabilities).
    before = g.params()
    tok, tgt = batch(1)
    for bad in (dict(lr=float("nan")), dict(lr=float("inf")), dict(weight_decay=float("nan")),
                dict(max_norm=float("nan"))):
        with pytest.raises(weft.InvalidArgumentError, match="finite"):
            g.train_step(tok, tgt, **bad)
    assert np.array_equal(g.params(), before) and g.step == 0
    for t in (float("nan"), float("inf"), -float("inf")):
        with pytest.raises(weft.InvalidArgumentError, match="temperature"):
            g.generate(np.array([1, 2, 3]), 2, temperature=t, seed=1)
    g.close()
    with pytest.raises(weft.StateError, match="closed"):
        g.params()
