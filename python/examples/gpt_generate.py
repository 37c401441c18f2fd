#!/usr/bin/env python3
"""GPT generation: a small GPT-2 trained on a few lines of text and sampled, on the fabric from numpy arrays.

The model (weft.GPT: llm.c's GPT-2 on weft's ops) lives on the lanes; token ids (bytes of the text) go in
as numpy arrays. It trains for a few steps, then generates greedily and with top-k sampling. With a
GPT-2 checkpoint (--weights model.safetensors or llm.c's gpt2_124M.bin) it samples from those weights
instead of training (byte ids then mean GPT-2 token ids: give --prompt-ids).

    PYTHONPATH=python python3 python/examples/gpt_generate.py [--steps 60] [--lanes cpu]
"""

import argparse
import time

import numpy as np

import weft

TEXT = (b"the fabric does not assume what your silicon is good at: it measures, and the numbers decide. "
        b"tiny work stays on the cpu, large work goes to the gpu, and every exact lane returns the same bits. ")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--lanes", default=None)
    p.add_argument("--weights", default=None, help="GPT-2 weights (safetensors or llm.c .bin) to sample from")
    p.add_argument("--prompt", default="the fabric ")
    p.add_argument("--prompt-ids", default=None, help="comma-separated token ids (with --weights)")
    p.add_argument("--tokens", type=int, default=48)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    with weft.Fabric(lanes=args.lanes, calibration="off") as f:
        if args.weights:
            model = weft.GPT.from_weights(args.weights, fabric=f)
            prompt = np.array([int(t) for t in (args.prompt_ids or "464").split(",")], np.int32)
            print(model, "\n", model.generate(prompt, args.tokens, temperature=1.0, top_k=40, seed=args.seed))
            return None
        model = weft.GPT(f, L=2, C=64, NH=4, V=256, maxT=64, seed=args.seed)
        data = np.frombuffer(TEXT * 4, np.uint8).astype(np.int32)
        rng = np.random.default_rng(args.seed)
        B, T = 8, 32
        t0 = time.perf_counter()
        losses = []
        for step in range(args.steps):
            starts = rng.integers(0, len(data) - T - 1, B)
            tok = np.stack([data[s:s + T] for s in starts])
            tgt = np.stack([data[s + 1:s + T + 1] for s in starts])
            loss, norm = model.train_step(tok, tgt, lr=3e-3)
            losses.append(loss)
            if step % 10 == 0 or step == args.steps - 1:
                print(f"step {step:3d}  loss {loss:.3f}  grad norm {norm:.3f}")
        print(f"{args.steps} steps in {time.perf_counter() - t0:.2f} s on {', '.join(f.lanes)}")
        prompt = np.frombuffer(args.prompt.encode(), np.uint8).astype(np.int32)
        greedy = model.generate(prompt, args.tokens)
        sampled = model.generate(prompt, args.tokens, temperature=0.8, top_k=10, seed=args.seed)
        show = lambda ids: bytes(int(i) for i in ids).decode("latin-1")  # noqa: E731
        print(f"greedy:  {args.prompt!r} + {show(greedy)!r}")
        print(f"sampled: {args.prompt!r} + {show(sampled)!r}")
        return {"losses": losses, "greedy": greedy}


if __name__ == "__main__":
    main()
