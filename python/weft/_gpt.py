"""weft.GPT: GPT-2 (after llm.c) resident on a fabric, driven with numpy arrays."""

from ._errors import StateError
from ._fabric import _named
from ._native import load

_weft = load()


def _fabric_arg(fabric, fn):
    if fabric is None:
        from . import default_fabric

        return default_fabric()
    if not isinstance(fabric, _weft.Fabric):
        raise TypeError(f"{fn}: fabric must be a weft.Fabric (or None: the default), not {type(fabric).__name__}")
    return fabric


class GPT(_weft.GPT):
    """GPT-2 on a fabric: its parameters, activations and AdamW state live as weft tensors on the lanes, and
    numpy arrays of token ids go in.

    GPT(fabric=None, L=2, C=64, NH=4, V=256, maxT=64, params=None, seed=0, place="auto", lane=None,
        contract="exact")

    L layers, C channels, NH heads (dividing C), V tokens, maxT positions. params: a float32 array of every
    parameter in llm.c's order (wte[V,C] wpe[maxT,C] ln1w[L,C] ln1b[L,C] qkvw[L,3C,C] qkvb[L,3C]
    attprojw[L,C,C] attprojb[L,C] ln2w[L,C] ln2b[L,C] fcw[L,4C,C] fcb[L,4C] fcprojw[L,C,4C] fcprojb[L,C]
    lnfw[C] lnfb[C]; any layout, read in C order); None initialises them as GPT-2 does, from `seed` (0 to
    2**64 - 1), the same bits everywhere.
    place: "auto" (the router places every op), "layers" (a pipeline: each layer on one lane), "pinned"
    (every op on `lane`), "rr" (ops round robin over the lanes: a placement test). contract: the matmuls'
    (the transformer ops run exact under "exact" and fp32 under the others).

    GPT.from_weights(path) loads GPT-2's weights (Hugging Face model.safetensors or llm.c's .bin);
    GPT.load(path) a checkpoint written by save(). train_step, loss, logits and generate take token ids
    as int arrays ([B, T], or [T] for one sequence).
    """

    def __init__(self, fabric=None, L=2, C=64, NH=4, V=256, maxT=64, params=None, seed=0, place="auto",
                 lane=None, contract="exact"):
        fabric = _fabric_arg(fabric, "GPT")
        _named("GPT", super().__init__, fabric, L, C, NH, V, maxT, params, seed, place, lane, contract)

    @classmethod
    def from_weights(cls, path, fabric=None, place="auto", lane=None, contract="exact"):
        """GPT-2's weights from a file: Hugging Face `model.safetensors` (the `gpt2` repository's tensor names)
        or llm.c's `gpt2_124M.bin`. Every size in the file is checked before anything is read."""
        fabric = _fabric_arg(fabric, "GPT.from_weights")
        model, _ = _named("GPT.from_weights", cls._load, fabric, path, "weights", place, lane, contract)
        return model

    @classmethod
    def load(cls, path, fabric=None, place="auto", lane=None, contract="exact"):
        """A model from a checkpoint written by save(): parameters, AdamW's moments and the step, so training
        resumes where it stopped. Returns (model, rng_state) with the rng_state given to save()."""
        fabric = _fabric_arg(fabric, "GPT.load")
        return _named("GPT.load", cls._load, fabric, path, "checkpoint", place, lane, contract)

    def __repr__(self):
        try:
            c = self.config
        except StateError:
            return "<weft.GPT closed>"

        return f"<weft.GPT L={c['L']} C={c['C']} NH={c['NH']} V={c['V']} maxT={c['maxT']} step={self.step}>"
